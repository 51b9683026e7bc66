//! A handle on a Remote Execution API server: the address (`grpc://HOST:PORT`, or
//! `grpcs://HOST:PORT` for TLS), the instance name, the process's shared channel
//! ([`super::connection`]), the `RequestMetadata` every call carries ([`super::metadata`]), and
//! the compile's cancellation. Calls block the caller; each has a deadline
//! ([`super::settings`]), is tried again with backoff when the server failed for now
//! ([`super::retry`]), and ends at once when the compile is cancelled. Every failure is a
//! [`RemoteError`] that names the address and says what kind of failure it is; what the server
//! wrote in it is made safe to print ([`super::text`]).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, BinaryMetadataValue};

use super::connection::{self, seconds, Conn, Limits};
use super::metadata::Metadata;
use super::re;
use super::retry::{worth_retrying, Backoff};
use super::settings::Settings;
use super::text;
use crate::run::process::Cancel;

/// How long connecting may take by default before the server counts as unreachable
/// (`NXCC_REMOTE_CONNECT_TIMEOUT`).
pub const CONNECT_TIMEOUT: Duration = super::settings::CONNECT_TIMEOUT;

/// How much later than nxcc gives up the deadline a request tells the server is (so that nxcc's
/// own deadline, with its message, is the one that ends a call).
const HEADER_MARGIN: Duration = Duration::from_secs(1);

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

/// What kind of failure a [`RemoteError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server could not be reached, or did not answer in time (after the retries).
    Unreachable,
    /// The server answered with a refusal (no permission, an invalid request, ...).
    Refused,
    /// The server's answer failed a check: a blob that is not what its digest says, a stream
    /// longer than declared, a result that is not a NEFF.
    Untrusted,
    /// The compile was cancelled (a signal, a client gone) while the call ran.
    Cancelled,
    /// Something on this machine: a file, a setting.
    Local,
}

/// A remote call that failed: what was attempted, at which address, and why.
#[derive(Debug, Clone)]
pub struct RemoteError {
    /// The server's address as given.
    pub url: String,
    /// What failed and why (server text made safe).
    pub what: String,
    /// What kind of failure.
    pub kind: ErrorKind,
}

impl RemoteError {
    /// Whether the server could not be reached at all (or stopped answering).
    pub fn unreachable(&self) -> bool {
        self.kind == ErrorKind::Unreachable
    }

    /// Whether the call ended because the compile was cancelled.
    pub fn cancelled(&self) -> bool {
        self.kind == ErrorKind::Cancelled
    }
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (remote {})", self.what, self.url)
    }
}

/// A handle on a server (cheap to clone): the shared connection and what this compile's calls
/// carry.
#[derive(Clone)]
pub struct Remote {
    /// Where.
    pub address: Address,
    pub(crate) conn: Arc<Conn>,
    pub(crate) settings: Arc<Settings>,
    pub(crate) rt: &'static tokio::runtime::Runtime,
    metadata: Metadata,
    encoded: BinaryMetadataValue,
    cancel: Option<Cancel>,
}

impl Remote {
    /// The server at `address`, connected on first use in this process (within the connect
    /// deadline; a server that does not answer is an error naming the address).
    pub fn connect(address: &Address) -> Result<Remote, RemoteError> {
        Remote::connect_with(address, None)
    }

    /// [`Remote::connect`] for a compile that `cancel` may end (connecting included).
    pub fn connect_with(address: &Address, cancel: Option<Cancel>) -> Result<Remote, RemoteError> {
        let settings = connection::settings().map_err(|what| RemoteError {
            url: address.url.clone(),
            what,
            kind: ErrorKind::Local,
        })?;
        Remote::connect_using(address, settings, cancel)
    }

    /// [`Remote::connect_with`] with `settings` instead of the environment's.
    pub fn connect_using(
        address: &Address,
        settings: Arc<Settings>,
        cancel: Option<Cancel>,
    ) -> Result<Remote, RemoteError> {
        let local = |what: String| RemoteError {
            url: address.url.clone(),
            what,
            kind: ErrorKind::Local,
        };
        let rt = connection::runtime().map_err(local)?;
        let conn = connection::get(address, &settings, cancel.as_ref())?;
        let metadata = Metadata::new("nxcc", settings.invocation_id.as_deref());
        Ok(Remote {
            address: address.clone(),
            conn,
            encoded: metadata.encode(),
            metadata,
            settings,
            rt,
            cancel,
        })
    }

    /// This handle with `cancel` ending its calls (a compile's signal handling, a client gone,
    /// a lease the server cancelled).
    pub fn with_cancel(mut self, cancel: Cancel) -> Remote {
        self.cancel = Some(cancel);
        self
    }

    /// This handle with its calls' `RequestMetadata` from `metadata`.
    pub fn with_metadata(mut self, metadata: Metadata) -> Remote {
        self.encoded = metadata.encode();
        self.metadata = metadata;
        self
    }

    /// This handle's calls about `action` (their `RequestMetadata` names it).
    pub fn for_action(self, action: &re::Digest) -> Remote {
        let m = self.metadata.clone().for_action(action);
        self.with_metadata(m)
    }

    /// What this handle's calls say about themselves.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The deadlines and retry budget.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// What the server accepts.
    pub fn limits(&self) -> Limits {
        self.conn.limits
    }

    /// `GetCapabilities`: whether the server answers (readiness), and what it offers.
    pub fn capabilities(&self) -> Result<re::ServerCapabilities, RemoteError> {
        let c = re::capabilities_client::CapabilitiesClient::new(self.conn.channel.clone());
        let req = re::GetCapabilitiesRequest {
            instance_name: self.address.instance.clone(),
        };
        self.unary("GetCapabilities", || {
            let (mut c, req) = (c.clone(), self.request(req.clone()));
            async move { c.get_capabilities(req?).await.map(|r| r.into_inner()) }
        })
    }

    /// Drive `fut` on the runtime until it ends or the compile is cancelled (`None`).
    pub(crate) fn block<T>(&self, fut: impl Future<Output = T>) -> Option<T> {
        let cancel = self.cancel.clone();
        self.rt.block_on(async move {
            tokio::select! {
                v = fut => Some(v),
                () = connection::cancelled(cancel.as_ref()) => None,
            }
        })
    }

    /// Sleep `d`, or less when the compile is cancelled (`None`).
    pub(crate) fn pause(&self, d: Duration) -> Option<()> {
        self.block(async move { tokio::time::sleep(d).await })
    }

    /// A unary call: each try within the call deadline, tried again with backoff on the codes
    /// worth it ([`retriable`]) within the retry budget; the compile's cancellation ends it.
    pub(crate) fn unary<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T, RemoteError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let deadline = self.settings.call;
        let mut backoff = Backoff::new(self.settings.retry);
        loop {
            let tried = self.block(async {
                match tokio::time::timeout(deadline, call()).await {
                    Ok(r) => r,
                    Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                        "no answer within {}",
                        seconds(deadline)
                    ))),
                }
            });
            let status = match tried {
                None => return Err(self.cancelled_error(what)),
                Some(Ok(v)) => return Ok(v),
                Some(Err(s)) => s,
            };
            if !worth_retrying(&status) {
                return Err(self.error(what, &status));
            }
            match backoff.pause() {
                Some(p) => self.pause(p).ok_or_else(|| self.cancelled_error(what))?,
                None => return Err(self.gave_up(what, &status, &backoff)),
            }
        }
    }

    /// A request carrying the call deadline, this compile's `RequestMetadata` and the bearer
    /// token; an error (a `Status` the caller reports) when the token cannot be read.
    pub(crate) fn request<T>(&self, msg: T) -> Result<tonic::Request<T>, tonic::Status> {
        self.request_within(msg, Some(self.settings.call))
    }

    /// [`Remote::request`] with another deadline (`None`: a stream, bounded by inactivity).
    pub(crate) fn request_within<T>(
        &self,
        msg: T,
        deadline: Option<Duration>,
    ) -> Result<tonic::Request<T>, tonic::Status> {
        let mut r = tonic::Request::new(msg);
        if let Some(d) = deadline {
            r.set_timeout(d + HEADER_MARGIN);
        }
        decorate(&mut r, &self.encoded, &self.conn)?;
        Ok(r)
    }

    /// The error for a failed call `what`.
    pub fn error(&self, what: &str, status: &tonic::Status) -> RemoteError {
        let kind = match status.code() {
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => ErrorKind::Unreachable,
            // The connection closed under the call.
            tonic::Code::Cancelled if std::error::Error::source(status).is_some() => {
                ErrorKind::Unreachable
            }
            _ => ErrorKind::Refused,
        };
        RemoteError {
            url: self.address.url.clone(),
            what: format!("{what} failed: {}", status_text(status)),
            kind,
        }
    }

    /// The error for a call still failing when the retry budget ran out.
    pub(crate) fn gave_up(&self, what: &str, status: &tonic::Status, b: &Backoff) -> RemoteError {
        let mut e = self.error(what, status);
        if b.tries() > 0 {
            e.what.push_str(&format!(
                " (tried {} times over {})",
                b.tries() + 1,
                seconds(self.settings.retry)
            ));
        }
        e
    }

    /// The error for a call the compile's cancellation ended.
    pub(crate) fn cancelled_error(&self, what: &str) -> RemoteError {
        RemoteError {
            url: self.address.url.clone(),
            what: format!("{what}: cancelled"),
            kind: ErrorKind::Cancelled,
        }
    }

    /// An answer that failed a check (a digest, a size, a NEFF).
    pub fn untrusted(&self, what: impl Into<String>) -> RemoteError {
        RemoteError {
            url: self.address.url.clone(),
            what: what.into(),
            kind: ErrorKind::Untrusted,
        }
    }

    /// An error on this machine (a local file).
    pub fn other(&self, what: impl Into<String>) -> RemoteError {
        RemoteError {
            url: self.address.url.clone(),
            what: what.into(),
            kind: ErrorKind::Local,
        }
    }
}

/// Put this compile's `RequestMetadata` and the bearer token (when one is configured) on a
/// request.
fn decorate<T>(
    r: &mut tonic::Request<T>,
    metadata: &BinaryMetadataValue,
    conn: &Conn,
) -> Result<(), tonic::Status> {
    r.metadata_mut()
        .insert_bin(super::metadata::HEADER, metadata.clone());
    if let Some(t) = &conn.token {
        let token = t.get().map_err(tonic::Status::unauthenticated)?;
        let v = AsciiMetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|e| tonic::Status::unauthenticated(e.to_string()))?;
        r.metadata_mut().insert("authorization", v);
    }
    Ok(())
}

/// `GetCapabilities` on a connection being made, within `deadline`, one try.
pub(crate) fn capabilities_on(
    conn: &Conn,
    address: &Address,
    settings: &Settings,
    deadline: Duration,
) -> Result<re::ServerCapabilities, tonic::Status> {
    let rt = connection::runtime().map_err(tonic::Status::internal)?;
    let mut c = re::capabilities_client::CapabilitiesClient::new(conn.channel.clone());
    let mut req = tonic::Request::new(re::GetCapabilitiesRequest {
        instance_name: address.instance.clone(),
    });
    req.set_timeout(deadline + HEADER_MARGIN);
    let metadata = Metadata::new("nxcc", settings.invocation_id.as_deref()).encode();
    decorate(&mut req, &metadata, conn)?;
    rt.block_on(async {
        match tokio::time::timeout(deadline, c.get_capabilities(req)).await {
            Ok(r) => r.map(|r| r.into_inner()),
            Err(_) => Err(tonic::Status::deadline_exceeded("no answer")),
        }
    })
}

/// A status as messages show it: `Code: message` (the server's words made safe), with the
/// transport's causes when the message alone says little.
pub fn status_text(s: &tonic::Status) -> String {
    let mut msg = text::message(s.message());
    if let Some(src) = std::error::Error::source(s) {
        let chain = text::message(&error_chain(src));
        if !chain.is_empty() && !msg.contains(&chain) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&chain);
        }
    }
    if msg.is_empty() {
        format!("{:?}", s.code())
    } else {
        format!("{:?}: {msg}", s.code())
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

    #[test]
    fn status_text_is_safe() {
        let s = tonic::Status::internal("\x1b[2Jboom\nsecond line");
        assert_eq!(status_text(&s), "Internal: \\u{1b}[2Jboom\\nsecond line");
        assert_eq!(status_text(&tonic::Status::unavailable("")), "Unavailable");
    }
}
