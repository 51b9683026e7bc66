//! How nxcc talks to a Remote Execution API server, read once from the environment (the same for
//! `compile --remote`, `parallel-compile`, the daemon and `nxcc worker`): the deadlines of every
//! call, the time a failing call is tried again for, and the TLS trust and credentials of
//! `grpcs://` servers.
//!
//! | variable | default | what |
//! |---|---|---|
//! | `NXCC_REMOTE_CONNECT_TIMEOUT` | 5 | seconds to connect and get the server's first answer |
//! | `NXCC_REMOTE_CALL_TIMEOUT` | 60 | seconds one lookup, upload batch or other unary call may take |
//! | `NXCC_REMOTE_IDLE_TIMEOUT` | 60 | seconds a stream (a download, an upload, an operation) may go without progress |
//! | `NXCC_REMOTE_RETRY_TIMEOUT` | 60 | seconds a failing call is tried again for, with backoff (a transfer: seconds it may spend failing, over every attempt) |
//! | `NXCC_REMOTE_MIN_RATE` | 64K | bytes per second a download or an upload must move, over each idle timeout, to count as progress (`0`: any byte) |
//! | `NXCC_REMOTE_MAX_BLOB` | 4G | the largest blob downloaded (a size: `4G`, `512M`, bytes); a larger declared size is refused before a byte is written |
//! | `NXCC_REMOTE_CA` | the system's roots | PEM file of the certificate authorities a `grpcs://` server is checked against |
//! | `NXCC_REMOTE_CLIENT_CERT`, `NXCC_REMOTE_CLIENT_KEY` | none | PEM files: the client's certificate and key (mutual TLS) |
//! | `NXCC_REMOTE_TOKEN_FILE` | none | a file holding a bearer token, sent as `authorization: Bearer ...` (`grpcs://` only) |
//! | `NXCC_REMOTE_INVOCATION_ID` | one per process | the correlated invocation id of `RequestMetadata` |
//!
//! Seconds may be fractional (`0.5`). A value that does not parse is an error that names the
//! variable; nothing is connected then.

use std::path::PathBuf;
use std::time::Duration;

/// The default of `NXCC_REMOTE_CONNECT_TIMEOUT`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default of `NXCC_REMOTE_CALL_TIMEOUT`.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The default of `NXCC_REMOTE_IDLE_TIMEOUT`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default of `NXCC_REMOTE_RETRY_TIMEOUT`.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// The default of `NXCC_REMOTE_MIN_RATE`, bytes per second.
pub const MIN_RATE: u64 = 64 << 10;
/// The default of `NXCC_REMOTE_MAX_BLOB`, bytes: well above any NEFF.
pub const MAX_BLOB: u64 = 4 << 30;

/// The variables, by what they set.
pub mod env {
    /// Connect deadline.
    pub const CONNECT_TIMEOUT: &str = "NXCC_REMOTE_CONNECT_TIMEOUT";
    /// Unary call deadline.
    pub const CALL_TIMEOUT: &str = "NXCC_REMOTE_CALL_TIMEOUT";
    /// Stream inactivity deadline.
    pub const IDLE_TIMEOUT: &str = "NXCC_REMOTE_IDLE_TIMEOUT";
    /// Total time of a call's retries.
    pub const RETRY_TIMEOUT: &str = "NXCC_REMOTE_RETRY_TIMEOUT";
    /// The rate a transfer must keep to count as progress.
    pub const MIN_RATE: &str = "NXCC_REMOTE_MIN_RATE";
    /// The largest blob downloaded.
    pub const MAX_BLOB: &str = "NXCC_REMOTE_MAX_BLOB";
    /// The certificate authorities of `grpcs://` servers.
    pub const CA: &str = "NXCC_REMOTE_CA";
    /// The client certificate (mutual TLS).
    pub const CLIENT_CERT: &str = "NXCC_REMOTE_CLIENT_CERT";
    /// The client key (mutual TLS).
    pub const CLIENT_KEY: &str = "NXCC_REMOTE_CLIENT_KEY";
    /// The bearer token file.
    pub const TOKEN_FILE: &str = "NXCC_REMOTE_TOKEN_FILE";
    /// The correlated invocation id.
    pub const INVOCATION_ID: &str = "NXCC_REMOTE_INVOCATION_ID";
}

/// Deadlines, retries, TLS and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// To connect and get the first answer (`GetCapabilities`).
    pub connect: Duration,
    /// One unary call.
    pub call: Duration,
    /// A stream without progress.
    pub idle: Duration,
    /// How long a failing call is tried again for.
    pub retry: Duration,
    /// Bytes per second a transfer must move, over each idle timeout, to count as progress.
    pub min_rate: u64,
    /// The largest blob downloaded, bytes.
    pub max_blob: u64,
    /// PEM certificate authorities for `grpcs://` (`None`: the system's).
    pub ca: Option<PathBuf>,
    /// PEM client certificate and key (mutual TLS).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The bearer token's file.
    pub token_file: Option<PathBuf>,
    /// The correlated invocation id given (`None`: one made for this process).
    pub invocation_id: Option<String>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            connect: CONNECT_TIMEOUT,
            call: CALL_TIMEOUT,
            idle: IDLE_TIMEOUT,
            retry: RETRY_TIMEOUT,
            min_rate: MIN_RATE,
            max_blob: MAX_BLOB,
            ca: None,
            identity: None,
            token_file: None,
            invocation_id: None,
        }
    }
}

impl Settings {
    /// From this process's environment.
    pub fn from_env() -> Result<Settings, String> {
        Settings::from_lookup(|k| std::env::var(k).ok())
    }

    /// From `get` (a variable's value, `None` when unset; an empty value counts as unset).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let secs = |k: &str, default: Duration| match get(k) {
            None => Ok(default),
            Some(v) => parse_seconds(&v).ok_or_else(|| {
                format!("{k}={v}: expected a number of seconds greater than 0 (such as 60 or 0.5)")
            }),
        };
        let size = |k: &str, default: u64| match get(k) {
            None => Ok(default),
            Some(v) => nxcc_core::cache::settings::parse_size(&v)
                .map_err(|e| format!("{k}={v}: expected a size (such as 4G, 512M or 65536): {e}")),
        };
        let path = |k: &str| get(k).map(PathBuf::from);
        let identity = match (path(env::CLIENT_CERT), path(env::CLIENT_KEY)) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(format!(
                    "{} is set without {}: mutual TLS needs both",
                    env::CLIENT_CERT,
                    env::CLIENT_KEY
                ))
            }
            (None, Some(_)) => {
                return Err(format!(
                    "{} is set without {}: mutual TLS needs both",
                    env::CLIENT_KEY,
                    env::CLIENT_CERT
                ))
            }
        };
        let invocation_id = get(env::INVOCATION_ID);
        if let Some(id) = &invocation_id {
            if id.len() > 128 || !id.chars().all(|c| c.is_ascii_graphic()) {
                return Err(format!(
                    "{}: at most 128 printable ASCII characters",
                    env::INVOCATION_ID
                ));
            }
        }
        Ok(Settings {
            connect: secs(env::CONNECT_TIMEOUT, CONNECT_TIMEOUT)?,
            call: secs(env::CALL_TIMEOUT, CALL_TIMEOUT)?,
            idle: secs(env::IDLE_TIMEOUT, IDLE_TIMEOUT)?,
            retry: secs(env::RETRY_TIMEOUT, RETRY_TIMEOUT)?,
            min_rate: size(env::MIN_RATE, MIN_RATE)?,
            max_blob: size(env::MAX_BLOB, MAX_BLOB)?,
            ca: path(env::CA),
            identity,
            token_file: path(env::TOKEN_FILE),
            invocation_id,
        })
    }

    /// Whether anything asks for TLS (which a `grpc://` address cannot give).
    pub fn tls_asked(&self) -> Option<&'static str> {
        if self.token_file.is_some() {
            Some(env::TOKEN_FILE)
        } else if self.identity.is_some() {
            Some(env::CLIENT_CERT)
        } else {
            None
        }
    }
}

/// Seconds as `60`, `0.5`, `1e-1`: a finite number greater than 0, at most a day.
fn parse_seconds(s: &str) -> Option<Duration> {
    let x: f64 = s.trim().parse().ok()?;
    (x.is_finite() && x > 0.0 && x <= 86_400.0).then(|| Duration::from_secs_f64(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| owned.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(from(&[]).unwrap(), Settings::default());
        let s = from(&[
            (env::CONNECT_TIMEOUT, "0.5"),
            (env::IDLE_TIMEOUT, "2"),
            (env::CA, "/etc/ca.pem"),
            (env::TOKEN_FILE, "/run/token"),
            (env::MIN_RATE, "0"),
            (env::MAX_BLOB, "512M"),
        ])
        .unwrap();
        assert_eq!((s.min_rate, s.max_blob), (0, 512 << 20));
        assert_eq!(s.connect, Duration::from_millis(500));
        assert_eq!(s.idle, Duration::from_secs(2));
        assert_eq!(s.call, CALL_TIMEOUT);
        assert_eq!(s.ca, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(s.tls_asked(), Some(env::TOKEN_FILE));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for v in ["abc", "0", "-1", "inf", "NaN", "100000"] {
            let e = from(&[(env::CALL_TIMEOUT, v)]).unwrap_err();
            assert!(e.starts_with(&format!("{}={v}:", env::CALL_TIMEOUT)), "{e}");
        }
        for (k, v) in [
            (env::MAX_BLOB, "lots"),
            (env::MIN_RATE, "-1"),
            (env::MAX_BLOB, "auto"),
        ] {
            let e = from(&[(k, v)]).unwrap_err();
            assert!(e.starts_with(&format!("{k}={v}:")), "{e}");
        }
        let e = from(&[(env::CLIENT_CERT, "/c.pem")]).unwrap_err();
        assert!(e.contains(env::CLIENT_KEY), "{e}");
        assert!(from(&[(env::INVOCATION_ID, "a b")]).is_err());
    }
}
