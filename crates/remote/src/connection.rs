//! One runtime and one HTTP/2 channel per server for the whole process: every compile of a
//! `parallel-compile` run, every request of the daemon and every slot of `nxcc worker` shares
//! them (calls are multiplexed on the connection, which reconnects by itself after the server
//! restarts). The first connection to a server must answer `GetCapabilities` within the connect
//! deadline; what it answers sets the upload batch limit. Threads that wait on a first connection
//! another thread is making get its result rather than trying again one after the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tonic::metadata::{AsciiMetadataValue, BinaryMetadataValue};
use tonic::transport::{Channel, Endpoint};

use super::address::Address;
use super::credentials::{self, Token};
use super::error::{error_chain, status_text, ErrorKind, RemoteError};
use super::metadata::Metadata;
use super::re;
use super::settings::Settings;
use crate::run::process::Cancel;

/// How much later than nxcc gives up the deadline a request tells the server is (so that nxcc's
/// own deadline, with its message, is the one that ends a call).
pub(crate) const HEADER_MARGIN: Duration = Duration::from_secs(1);

/// At most this many bytes in one upload batch unless the server allows fewer.
pub const BATCH_BYTES_DEFAULT: i64 = 3 << 20;

/// What the server said it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes in one `BatchUpdateBlobs` request (blobs larger go through ByteStream).
    pub batch_bytes: i64,
}

impl Limits {
    /// From the server's capabilities: its `max_batch_total_size_bytes` (0: no limit of its own),
    /// within [`BATCH_BYTES_DEFAULT`].
    pub fn from_capabilities(c: Option<&re::ServerCapabilities>) -> Limits {
        let server = c
            .and_then(|c| c.cache_capabilities.as_ref())
            .map(|c| c.max_batch_total_size_bytes)
            .unwrap_or(0);
        Limits {
            batch_bytes: if server > 0 {
                server.min(BATCH_BYTES_DEFAULT)
            } else {
                BATCH_BYTES_DEFAULT
            },
        }
    }
}

/// A connected server: the channel, what the server accepts, the token to present.
#[derive(Debug)]
pub struct Conn {
    /// The HTTP/2 channel (cheap to clone; one connection).
    pub channel: Channel,
    /// From `GetCapabilities`.
    pub limits: Limits,
    /// The bearer token, when one is configured.
    pub token: Option<Token>,
}

/// The process's remote runtime: two threads drive every call; callers block on it.
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("nxcc-remote")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the remote client's runtime: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The settings of this process (read from the environment once).
pub fn settings() -> Result<Arc<Settings>, String> {
    static S: OnceLock<Result<Arc<Settings>, String>> = OnceLock::new();
    S.get_or_init(|| Settings::from_env().map(Arc::new)).clone()
}

#[derive(Default)]
struct Slot {
    conn: Option<Arc<Conn>>,
    failed: Option<(Instant, RemoteError)>,
}

/// The connected server at `address` (connecting on first use; see the module documentation).
pub fn get(
    address: &Address,
    settings: &Settings,
    cancel: Option<&Cancel>,
) -> Result<Arc<Conn>, RemoteError> {
    static SLOTS: OnceLock<Mutex<HashMap<String, Arc<Mutex<Slot>>>>> = OnceLock::new();
    let asked = Instant::now();
    let slot = {
        let mut all = SLOTS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // One channel per server and per way of reaching it (the trust and the credentials).
        let key = format!(
            "{}|{:?}|{:?}|{:?}",
            address.dial, settings.ca, settings.identity, settings.token_file
        );
        all.entry(key).or_default().clone()
    };
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = &slot.conn {
        return Ok(c.clone());
    }
    if let Some((at, e)) = &slot.failed {
        if *at >= asked {
            return Err(e.clone());
        }
    }
    match connect(address, settings, cancel) {
        Ok(c) => {
            let c = Arc::new(c);
            slot.conn = Some(c.clone());
            slot.failed = None;
            Ok(c)
        }
        Err(e) => {
            // One compile's cancellation is not the server's answer to the others.
            if e.kind != ErrorKind::Cancelled {
                slot.failed = Some((Instant::now(), e.clone()));
            }
            Err(e)
        }
    }
}

fn connect(
    address: &Address,
    settings: &Settings,
    cancel: Option<&Cancel>,
) -> Result<Conn, RemoteError> {
    let fail = |kind: ErrorKind, what: String| RemoteError {
        url: address.url.clone(),
        what,
        kind,
    };
    let rt = runtime().map_err(|e| fail(ErrorKind::Local, e))?;
    let endpoint = endpoint(address, settings).map_err(|e| fail(ErrorKind::Local, e))?;
    let token = settings.token_file.clone().map(Token::new);
    if let Some(t) = &token {
        t.get().map_err(|e| fail(ErrorKind::Local, e))?;
    }
    let unreachable = |e: String| {
        fail(
            ErrorKind::Unreachable,
            format!("cannot connect to the remote execution service: {e}"),
        )
    };
    let deadline = settings.connect;
    let connected = rt.block_on(async {
        tokio::select! {
            r = tokio::time::timeout(deadline, endpoint.connect()) => Some(r),
            () = cancelled(cancel) => None,
        }
    });
    let channel = match connected {
        None => return Err(fail(ErrorKind::Cancelled, "connecting: cancelled".into())),
        Some(Err(_)) => {
            let within = format!("no connection within {}", seconds(deadline));
            return Err(unreachable(within));
        }
        Some(Ok(r)) => r.map_err(|e| unreachable(error_chain(&e)))?,
    };
    let conn = Conn {
        channel,
        limits: Limits::from_capabilities(None),
        token,
    };
    // The first answer: a peer that accepts connections but does not speak gRPC (or not at all)
    // fails here, within the connect deadline.
    match capabilities_on(&conn, address, settings, deadline) {
        Ok(c) => Ok(Conn {
            limits: Limits::from_capabilities(Some(&c)),
            ..conn
        }),
        Err(s) if s.code() == tonic::Code::Unimplemented => Ok(conn),
        Err(s) if s.code() == tonic::Code::DeadlineExceeded => Err(unreachable(format!(
            "no answer to GetCapabilities within {}",
            seconds(deadline)
        ))),
        Err(s) if s.code() == tonic::Code::Unavailable => Err(unreachable(status_text(&s))),
        Err(s) => Err(fail(
            ErrorKind::Refused,
            format!("GetCapabilities failed: {}", status_text(&s)),
        )),
    }
}

/// The endpoint of `address`: the connect deadline, HTTP/2 keep-alive pings (a peer that
/// vanished is noticed), TLS for `grpcs://` (credentials for any other scheme are an error).
fn endpoint(address: &Address, settings: &Settings) -> Result<Endpoint, String> {
    if !address.tls {
        if let Some(var) = settings.tls_asked() {
            return Err(format!(
                "{var} is set, but {} is not TLS: credentials are sent only to grpcs:// servers",
                address.url
            ));
        }
    }
    let endpoint = Endpoint::from_shared(address.dial.clone())
        .map_err(|e| format!("a malformed address: {e}"))?
        .connect_timeout(settings.connect)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if !address.tls {
        return Ok(endpoint);
    }
    let tls = credentials::tls_config(settings, &address.host)?;
    endpoint
        .tls_config(tls)
        .map_err(|e| format!("cannot set up TLS: {e}"))
}

/// Put this compile's `RequestMetadata` and the bearer token (when one is configured) on a
/// request.
pub(crate) fn decorate<T>(
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
    let rt = runtime().map_err(tonic::Status::internal)?;
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

/// Resolves when `cancel` is cancelled (never without one).
pub(crate) async fn cancelled(cancel: Option<&Cancel>) {
    let Some(c) = cancel else {
        return std::future::pending().await;
    };
    while !c.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A duration as messages say it: `5 s`, `0.5 s`.
pub fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{} s", s as u64)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_limits_follow_the_server() {
        let caps = |n: i64| re::ServerCapabilities {
            cache_capabilities: Some(re::CacheCapabilities {
                max_batch_total_size_bytes: n,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            Limits::from_capabilities(None).batch_bytes,
            BATCH_BYTES_DEFAULT
        );
        assert_eq!(
            Limits::from_capabilities(Some(&caps(0))).batch_bytes,
            BATCH_BYTES_DEFAULT
        );
        assert_eq!(
            Limits::from_capabilities(Some(&caps(65536))).batch_bytes,
            65536
        );
        assert_eq!(
            Limits::from_capabilities(Some(&caps(1 << 30))).batch_bytes,
            BATCH_BYTES_DEFAULT
        );
        assert_eq!(seconds(Duration::from_secs(5)), "5 s");
        assert_eq!(seconds(Duration::from_millis(500)), "0.5 s");
    }
}
