//! The standard AWS configuration, as the AWS command line and SDKs read it, for one bucket:
//!
//! - the URL `s3://BUCKET[/PREFIX]`;
//! - credentials from the default chain: the environment (`AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), web identity (`AWS_WEB_IDENTITY_TOKEN_FILE`,
//!   `AWS_ROLE_ARN`), the container's (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`,
//!   `..._FULL_URI`) — all read by the client — then the shared profile (`AWS_PROFILE`, else
//!   `default`, in `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`, read here), then
//!   the instance's metadata service (the client's last resort; not with
//!   `AWS_EC2_METADATA_DISABLED=true`, when no credentials is an error);
//! - the region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region` in
//!   `AWS_CONFIG_FILE` (else `~/.aws/config`), else `us-east-1`;
//! - the endpoint of an S3-compatible server: `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`,
//!   addressed path-style (`ENDPOINT/BUCKET/KEY`); `http://` allowed for it;
//! - the deadline of a request's retries: `NXCC_S3_RETRY_TIMEOUT` (seconds, default 60), the
//!   pauses between them as the remote client's (from 100 ms, doubling up to 5 s).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// The environment variable that bounds a request's retries, in seconds.
pub const RETRY_TIMEOUT_ENV: &str = "NXCC_S3_RETRY_TIMEOUT";
/// A request's retries stop after this unless told otherwise.
pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a store is: its bucket and the prefix its objects are named under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The bucket.
    pub bucket: String,
    /// The prefix, without a leading or trailing `/` (may be empty).
    pub prefix: String,
}

/// Read `s3://BUCKET[/PREFIX]`; why not, in words.
pub fn parse_url(url: &str) -> Result<Location, String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{url} is not an s3:// URL"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let valid = (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if !valid {
        return Err(format!(
            "{url}: {bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, '-' and '.')"
        ));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
        return Err(format!(
            "{url}: the prefix {prefix:?} is not a plain key prefix"
        ));
    }
    Ok(Location {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
    })
}

/// The sections of an INI file (`[name]` then `key = value` lines).
fn ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone())
                .or_default()
                .insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    out
}

fn home_file(env: &str, rel: &str) -> Option<PathBuf> {
    std::env::var_os(env)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rel)))
}

fn profile() -> String {
    std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_string())
}

/// Keys from the shared credentials file's profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// `aws_access_key_id`.
    pub access_key_id: String,
    /// `aws_secret_access_key`.
    pub secret_access_key: String,
    /// `aws_session_token`, if any.
    pub token: Option<String>,
}

/// The profile's keys in the shared credentials file, when the environment names none and no
/// other source of the chain before it is configured.
pub fn profile_keys() -> Option<Keys> {
    if configured_before_metadata() {
        return None;
    }
    let path = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials")?;
    let text = std::fs::read_to_string(path).ok()?;
    let sections = ini(&text);
    let s = sections.get(&profile())?;
    Some(Keys {
        access_key_id: s.get("aws_access_key_id")?.clone(),
        secret_access_key: s.get("aws_secret_access_key")?.clone(),
        token: s.get("aws_session_token").cloned(),
    })
}

/// Whether the chain may end at the instance's metadata service (`AWS_EC2_METADATA_DISABLED`
/// not `true`).
pub fn metadata_allowed() -> bool {
    !std::env::var("AWS_EC2_METADATA_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Whether a source of the chain before the metadata service is configured in the environment.
pub fn configured_before_metadata() -> bool {
    [
        "AWS_ACCESS_KEY_ID",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

/// The region: the environment's, else the profile's, else `us-east-1`.
pub fn region() -> String {
    for v in ["AWS_REGION", "AWS_DEFAULT_REGION"] {
        if let Some(r) = std::env::var(v).ok().filter(|r| !r.is_empty()) {
            return r;
        }
    }
    let from_file = home_file("AWS_CONFIG_FILE", ".aws/config")
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| {
            let p = profile();
            let name = if p == "default" {
                p
            } else {
                format!("profile {p}")
            };
            ini(&text).get(&name)?.get("region").cloned()
        });
    from_file.unwrap_or_else(|| "us-east-1".to_string())
}

/// The endpoint of an S3-compatible server, if one is named.
pub fn endpoint() -> Option<String> {
    ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.is_empty()))
}

/// How long a request's retries may go on.
pub fn retry_timeout() -> Duration {
    std::env::var(RETRY_TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(DEFAULT_RETRY_TIMEOUT, Duration::from_secs_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_bucket_and_a_plain_prefix() {
        assert_eq!(
            parse_url("s3://my-bucket/a/b/").unwrap(),
            Location {
                bucket: "my-bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(parse_url("s3://my-bucket").unwrap().prefix, "");
        for bad in [
            "s3://",
            "s3://B",
            "s3://ab",
            "s3://bucket/../x",
            "gs://bucket",
            "s3://b_u",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ini_sections_are_read() {
        let s = ini("[default]\naws_access_key_id = A\n# c\n[profile x]\nregion=eu-west-1\n");
        assert_eq!(s["default"]["aws_access_key_id"], "A");
        assert_eq!(s["profile x"]["region"], "eu-west-1");
    }
}
