//! The form of a remote service's address (`--remote`, `--remote-cache`, the worker's
//! `--remote`): `grpc://HOST:PORT` (plain HTTP/2) or `grpcs://HOST:PORT` (TLS), nothing else —
//! no other scheme, no path, no credentials in it. Checked when the command line is parsed, so a
//! malformed address is a usage error that says the form, never a server that "does not answer".

/// The forms an address takes, as messages say them.
pub const FORM: &str = "grpc://HOST:PORT or grpcs://HOST:PORT";

/// A well-formed address, split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint<'a> {
    /// `grpcs://`: TLS.
    pub tls: bool,
    /// `HOST:PORT`, without a trailing `/`.
    pub host_port: &'a str,
    /// `HOST`.
    pub host: &'a str,
}

/// `url` split, or why it is not an address: `expected grpc://HOST:PORT or grpcs://HOST:PORT`,
/// with what to write instead when that can be told (a missing or an `http` scheme).
pub fn parse(url: &str) -> Result<Endpoint<'_>, String> {
    let (tls, rest) = match url.split_once("://") {
        Some(("grpc", rest)) => (false, rest),
        Some(("grpcs", rest)) => (true, rest),
        Some((scheme @ ("http" | "https"), rest)) => {
            let ours = if scheme == "https" { "grpcs" } else { "grpc" };
            return Err(expected(&format!(
                "{scheme}:// is not one; for a gRPC service at {rest}, {ours}://{rest}"
            )));
        }
        Some((scheme, _)) => return Err(expected(&format!("{scheme}:// is not one"))),
        None => return Err(expected(&format!("no scheme; grpc://{url} for plain gRPC"))),
    };
    let host_port = rest.trim_end_matches('/');
    if host_port.contains('/') || host_port.contains('@') {
        return Err(expected("no path and no credentials"));
    }
    match host_port.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(Endpoint {
                tls,
                host_port,
                host,
            })
        }
        _ => Err(expected("a host and a port from 1 to 65535")),
    }
}

fn expected(detail: &str) -> String {
    format!("expected {FORM} ({detail})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_addresses_split() {
        let e = parse("grpc://127.0.0.1:50061/").unwrap();
        assert_eq!(
            (e.tls, e.host_port, e.host),
            (false, "127.0.0.1:50061", "127.0.0.1")
        );
        assert!(parse("grpcs://build.example:443").unwrap().tls);
    }

    #[test]
    fn malformed_addresses_say_the_form_and_what_to_write() {
        for (bad, says) in [
            (
                "http://127.0.0.1:1",
                "for a gRPC service at 127.0.0.1:1, grpc://127.0.0.1:1",
            ),
            ("https://h:443", "grpcs://h:443"),
            ("127.0.0.1:50051", "no scheme; grpc://127.0.0.1:50051"),
            ("ftp://h:1", "ftp:// is not one"),
            ("grpc://h", "a host and a port"),
            ("grpc://h:0", "a host and a port"),
            ("grpc://:80", "a host and a port"),
            ("grpc://h:1/x", "no path"),
            ("grpc://u@h:1", "no credentials"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.starts_with("expected grpc://HOST:PORT or grpcs://HOST:PORT ("),
                "{bad}: {e}"
            );
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
