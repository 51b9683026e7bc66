//! A connection to a Remote Execution API server: the address (`grpc://HOST:PORT`), the instance
//! name, one HTTP/2 channel and the runtime its calls are driven on; every failure as a
//! [`RemoteError`] that names the address.

use std::fmt;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// How long connecting may take before the server counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a unary call (a lookup, an upload batch) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How many times a call the server refused for now (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`) is
/// tried again, after pauses doubling from 100 ms.
pub const RETRIES: u32 = 6;

/// Where the remote services are: `--remote grpc://HOST:PORT` (or `--remote-cache`) and
/// `--remote-instance NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// As given (`grpc://127.0.0.1:50061`), for messages.
    pub url: String,
    /// `http://HOST:PORT`, what the channel dials.
    pub(crate) dial: String,
    /// The instance name (`""`: the server's default instance).
    pub instance: String,
}

impl Address {
    /// Parse `grpc://HOST:PORT`; anything else (another scheme, no port) is refused with the
    /// reason. TLS (`grpcs://`) is not built in.
    pub fn parse(url: &str, instance: &str) -> Result<Address, String> {
        let rest = match url.split_once("://") {
            Some(("grpc", rest)) => rest,
            Some(("grpcs", _)) => {
                return Err(format!(
                    "{url}: TLS (grpcs://) is not supported; use grpc://HOST:PORT (plain HTTP/2, e.g. on a trusted network or through a local TLS tunnel)"
                ))
            }
            _ => return Err(format!("{url}: expected grpc://HOST:PORT")),
        };
        let hostport = rest.trim_end_matches('/');
        let port_ok = hostport
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !port_ok || hostport.contains('/') || hostport.contains('@') {
            return Err(format!("{url}: expected grpc://HOST:PORT"));
        }
        Ok(Address {
            url: url.to_string(),
            dial: format!("http://{hostport}"),
            instance: instance.to_string(),
        })
    }
}

/// A remote call that failed: what was attempted, at which address, and why.
#[derive(Debug, Clone)]
pub struct RemoteError {
    /// The server's address as given.
    pub url: String,
    /// What failed and why.
    pub what: String,
    /// Whether the server could not be reached at all (connection refused, timed out).
    pub unreachable: bool,
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (remote {})", self.what, self.url)
    }
}

/// A connected client: the channel and the runtime that drives it (calls block the caller).
pub struct Remote {
    /// Where.
    pub address: Address,
    pub(crate) channel: Channel,
    pub(crate) rt: tokio::runtime::Runtime,
}

impl Remote {
    /// Connect (within [`CONNECT_TIMEOUT`]); a server that does not answer is an error naming
    /// the address.
    pub fn connect(address: &Address) -> Result<Remote, RemoteError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| RemoteError {
                url: address.url.clone(),
                what: format!("cannot start the client runtime: {e}"),
                unreachable: false,
            })?;
        let unreachable = |e: String| RemoteError {
            url: address.url.clone(),
            what: format!("cannot connect to the remote execution service: {e}"),
            unreachable: true,
        };
        let endpoint = Endpoint::from_shared(address.dial.clone())
            .map_err(|e| unreachable(e.to_string()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let channel = rt
            .block_on(async {
                tokio::time::timeout(CONNECT_TIMEOUT, endpoint.connect())
                    .await
                    .map_err(|_| format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))?
                    .map_err(|e| error_chain(&e))
            })
            .map_err(unreachable)?;
        Ok(Remote {
            address: address.clone(),
            channel,
            rt,
        })
    }

    /// `GetCapabilities`: whether the server answers (readiness), and what it offers.
    pub fn capabilities(&self) -> Result<super::re::ServerCapabilities, RemoteError> {
        let mut c = super::re::capabilities_client::CapabilitiesClient::new(self.channel.clone());
        let req = super::re::GetCapabilitiesRequest {
            instance_name: self.address.instance.clone(),
        };
        self.rt
            .block_on(c.get_capabilities(Remote::request(req, CALL_TIMEOUT)))
            .map(|r| r.into_inner())
            .map_err(|s| self.error("GetCapabilities", &s))
    }

    /// Run a call, again after a pause when the server refused it for now
    /// (`RESOURCE_EXHAUSTED`: its concurrency limit; `UNAVAILABLE`), at most [`RETRIES`] times.
    pub(crate) fn retry<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T, RemoteError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let mut pause = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            match self.rt.block_on(call()) {
                Ok(v) => return Ok(v),
                Err(s)
                    if attempt < RETRIES
                        && matches!(
                            s.code(),
                            tonic::Code::ResourceExhausted | tonic::Code::Unavailable
                        ) =>
                {
                    attempt += 1;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(s) => return Err(self.error(what, &s)),
            }
        }
    }

    /// The error for a failed call `what`.
    pub fn error(&self, what: &str, status: &tonic::Status) -> RemoteError {
        let unreachable = matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
        );
        let msg = if status.message().is_empty() {
            format!("{:?}", status.code())
        } else {
            format!("{:?}: {}", status.code(), status.message())
        };
        RemoteError {
            url: self.address.url.clone(),
            what: format!("{what} failed: {msg}"),
            unreachable,
        }
    }

    /// An error that is not a gRPC status (a local file, a malformed answer).
    pub fn other(&self, what: impl Into<String>) -> RemoteError {
        RemoteError {
            url: self.address.url.clone(),
            what: what.into(),
            unreachable: false,
        }
    }

    /// A request carrying the call deadline.
    pub(crate) fn request<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.set_timeout(timeout);
        r
    }
}

/// An error with its causes (`transport error: tcp connect error: Connection refused`).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let a = Address::parse("grpc://127.0.0.1:50061", "").unwrap();
        assert_eq!(a.dial, "http://127.0.0.1:50061");
        assert!(Address::parse("grpc://localhost:1/", "x").is_ok());
        for bad in [
            "http://h:1",
            "grpc://h",
            "grpc://h:0",
            "grpc://:80",
            "grpc://h:1/x",
            "h:1",
            "grpc://u@h:1",
        ] {
            assert!(Address::parse(bad, "").is_err(), "{bad}");
        }
        assert!(Address::parse("grpcs://h:1", "")
            .unwrap_err()
            .contains("TLS"));
    }
}
