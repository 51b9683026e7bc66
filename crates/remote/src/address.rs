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
    /// Parse `grpc://HOST:PORT` or `grpcs://HOST:PORT`; anything else (another scheme, no port, a
    /// path, credentials in the URL) is refused with the reason.
    pub fn parse(url: &str, instance: &str) -> Result<Address, String> {
        let (tls, rest) = match url.split_once("://") {
            Some(("grpc", rest)) => (false, rest),
            Some(("grpcs", rest)) => (true, rest),
            _ => {
                return Err(format!(
                    "{url}: expected grpc://HOST:PORT or grpcs://HOST:PORT"
                ))
            }
        };
        let hostport = rest.trim_end_matches('/');
        let host = hostport
            .rsplit_once(':')
            .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0))
            .map(|(h, _)| h.to_string());
        let Some(host) = host.filter(|_| !hostport.contains('/') && !hostport.contains('@')) else {
            return Err(format!(
                "{url}: expected grpc://HOST:PORT or grpcs://HOST:PORT"
            ));
        };
        Ok(Address {
            url: url.to_string(),
            dial: format!("{}://{hostport}", if tls { "https" } else { "http" }),
            host,
            tls,
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
