//! Where the remote services are: `grpc://HOST:PORT` (plain HTTP/2) or `grpcs://HOST:PORT`
//! (TLS), and the instance name; parsed strictly (no path, no credentials in the URL).

/// Where the remote services are: `--remote grpc://HOST:PORT` (or `grpcs://`, or
/// `--remote-cache`) and `--remote-instance NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// As given (`grpc://127.0.0.1:50061`), for messages.
    pub url: String,
    /// `http://HOST:PORT` (or `https://`), what the channel dials.
    pub(crate) dial: String,
    /// The host, as TLS checks the server's certificate against it.
    pub(crate) host: String,
    /// `grpcs://`: TLS.
    pub tls: bool,
    /// The instance name (`""`: the server's default instance).
    pub instance: String,
}

impl Address {
    /// Parse `grpc://HOST:PORT` or `grpcs://HOST:PORT` ([`nxcc_core::cli::endpoint`]); anything
    /// else (another scheme, no port, a path, credentials in the URL) is refused with the reason.
    pub fn parse(url: &str, instance: &str) -> Result<Address, String> {
        let e = nxcc_core::cli::endpoint::parse(url).map_err(|e| format!("{url}: {e}"))?;
        Ok(Address {
            url: url.to_string(),
            dial: format!("{}://{}", if e.tls { "https" } else { "http" }, e.host_port),
            host: e.host.to_string(),
            tls: e.tls,
            instance: instance.to_string(),
        })
    }

    /// A resource name in this instance (`blobs/...`, `uploads/...`).
    pub(crate) fn resource(&self, rest: &str) -> String {
        if self.instance.is_empty() {
            rest.to_string()
        } else {
            format!("{}/{rest}", self.instance)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let a = Address::parse("grpc://127.0.0.1:50061", "").unwrap();
        assert_eq!(a.dial, "http://127.0.0.1:50061");
        assert!(!a.tls);
        let s = Address::parse("grpcs://build.example:443", "main").unwrap();
        assert_eq!(s.dial, "https://build.example:443");
        assert_eq!(s.host, "build.example");
        assert!(s.tls);
        assert_eq!(s.resource("blobs/x/1"), "main/blobs/x/1");
        assert!(Address::parse("grpc://localhost:1/", "x").is_ok());
        for bad in [
            "http://h:1",
            "grpc://h",
            "grpc://h:0",
            "grpc://:80",
            "grpc://h:1/x",
            "h:1",
            "grpc://u@h:1",
            "grpcs://h",
        ] {
            assert!(Address::parse(bad, "").is_err(), "{bad}");
        }
    }
}
