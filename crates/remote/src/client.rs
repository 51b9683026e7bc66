//! A handle on a Remote Execution API server: the address (`grpc://HOST:PORT`, or
//! `grpcs://HOST:PORT` for TLS), the instance name, the process's shared channel
//! ([`super::connection`]), the `RequestMetadata` every call carries ([`super::metadata`]), and
//! the compile's cancellation. Calls block the caller; each has a deadline
//! ([`super::settings`]), is tried again with backoff when the server failed for now
//! ([`super::retry`]), and ends at once when the compile is cancelled. Every failure is a
//! [`RemoteError`] that names the address and says what kind of failure it is; what the server
//! wrote in it is made safe to print ([`super::text`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::BinaryMetadataValue;

pub use super::address::Address;
use super::connection::{self, decorate, seconds, Conn, Limits, HEADER_MARGIN};
pub use super::error::{status_text, ErrorKind, RemoteError};
use super::metadata::Metadata;
use super::re;
use super::retry::{worth_retrying, Backoff};
use super::settings::Settings;
use crate::run::process::Cancel;

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

    /// The error for a call still failing when the retry budget ran out: how many times it was
    /// tried, over how long (measured), and the budget.
    pub(crate) fn gave_up(&self, what: &str, status: &tonic::Status, b: &Backoff) -> RemoteError {
        let mut e = self.error(what, status);
        if b.tries() > 0 {
            let tenths = Duration::from_millis(b.elapsed().as_millis() as u64 / 100 * 100);
            e.what.push_str(&format!(
                " (tried {} times over {}; the retry budget is {})",
                b.tries() + 1,
                seconds(tenths),
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
