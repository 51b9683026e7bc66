//! One admitted connection (its peer already checked by [`super::peer`]): hyper serving HTTP/1.1
//! on it (a header read timeout, a bounded head), a graceful end when the daemon stops, and a
//! last answer (`400`/`408`) for a request head hyper gave up on (cut off by the end of the
//! stream, or not complete in time), or (`503`) for a request the stop closed the connection on
//! before it was answered.
//!
//! A connection is closed so that its client reads what it was sent: when an answer is still
//! owed or request bytes are unread, the answer is written, the connection shut down for writing
//! and what the client still sends read until it closes (bounded in bytes and time) — closing a
//! Unix socket with unread input resets it, and the client would see `ECONNRESET` instead of the
//! answer.
//!
//! A client may half-close (`shutdown(SHUT_WR)` after its request) and still gets its answer:
//! the end of the request stream is not taken for the client going away. A client that has gone
//! (both directions closed: the socket reports a hang-up) ends the connection at once, which
//! drops the request it was waiting for and so cancels its compile.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::http;
use super::peer::{Refusal, Ticket};
use super::state::{Daemon, Peer};

/// A stream that notes whether request bytes arrived since the last answer bytes went out —
/// i.e. whether a request is in progress when hyper gives up on the connection. With
/// `keep_open`, hyper's shutdown of the stream only flushes it: the connection is closed after
/// hyper, by [`close_lingering`], which may still owe the client an answer.
struct Tapped {
    inner: tokio::net::UnixStream,
    pending: Arc<AtomicBool>,
    keep_open: bool,
}

impl AsyncRead for Tapped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.pending.store(true, Ordering::SeqCst);
        }
        r
    }
}

impl AsyncWrite for Tapped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.pending.store(false, Ordering::SeqCst);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.pending.store(false, Ordering::SeqCst);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.keep_open {
            return Pin::new(&mut self.inner).poll_flush(cx);
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A short plain-text answer that closes the connection.
fn answer_text(status: &str, reason: &str) -> String {
    let body = format!("{reason}\n");
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Write a short answer on a connection that is given up on (one non-blocking write) and close
/// it.
fn last_word(fd: OwnedFd, status: &str, reason: &str) {
    let s = std::os::unix::net::UnixStream::from(fd);
    let _ = s.set_nonblocking(true);
    let _ = (&s).write(answer_text(status, reason).as_bytes());
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Refused connections being answered at once, at most ([`refuse`]); past this many, a refused
/// connection gets its answer in one write and is closed at once, so a flood of connections
/// costs the daemon no more than this many descriptors and small tasks.
pub const MAX_REFUSALS_ANSWERING: usize = 512;
/// How long a refused connection's request head may take to arrive; then, once a connection is
/// answered and shut down for writing, how long its client has to read the answer and close.
pub const REFUSAL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// The most bytes read from a refused connection before its answer, and from any connection
/// after its answer.
const REFUSAL_READ_LIMIT: usize = 64 << 10;

/// Counts open connections.
#[derive(Default)]
pub struct Connections {
    /// Connections open now.
    pub open: AtomicUsize,
    /// Woken each time a connection closes (shutdown waits on it until `open` is 0).
    pub closed: Notify,
    /// Refused connections being answered now ([`MAX_REFUSALS_ANSWERING`]).
    pub refusing: AtomicUsize,
}

/// The peer of a connection just accepted (`SO_PEERCRED`).
pub fn peer_of(stream: &tokio::net::UnixStream) -> io::Result<Peer> {
    let c = stream.peer_cred()?;
    Ok(Peer {
        uid: c.uid(),
        gid: c.gid(),
        pid: c.pid(),
    })
}

/// Answer a refused connection so that its client reads the answer: its request head is read
/// first (within [`REFUSAL_WAIT`], at most 64 KiB), then the answer is
/// written and the connection shut down for writing, and what the client still sends is read
/// until it closes (within [`REFUSAL_WAIT`] again) — closing with unread input would reset the
/// connection, and the client would see `ECONNRESET` or `EPIPE` instead of the answer. Past
/// [`MAX_REFUSALS_ANSWERING`] at once, the answer is one write and the connection is closed.
pub fn refuse(
    daemon: &Daemon,
    stream: tokio::net::UnixStream,
    peer: &Peer,
    why: Refusal,
    conns: &Arc<Connections>,
) {
    let reason = daemon.gate.reason(why, peer);
    if conns.refusing.fetch_add(1, Ordering::SeqCst) >= MAX_REFUSALS_ANSWERING {
        conns.refusing.fetch_sub(1, Ordering::SeqCst);
        if let Ok(s) = stream.into_std() {
            last_word(OwnedFd::from(s), why.status(), &reason);
        }
        return;
    }
    let conns = conns.clone();
    tokio::spawn(async move {
        answer_refused(stream, why.status(), &reason).await;
        conns.refusing.fetch_sub(1, Ordering::SeqCst);
    });
}

/// Read from `stream` until end of stream, an error, `deadline`, [`REFUSAL_READ_LIMIT`] bytes,
/// or (`head`) the end of a request head.
async fn read_until(
    stream: &mut tokio::net::UnixStream,
    deadline: tokio::time::Instant,
    head: bool,
) {
    use tokio::io::AsyncReadExt;
    let mut seen: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut total = 0;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => {
                total += n;
                if head {
                    seen.extend_from_slice(&chunk[..n]);
                    if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        return;
                    }
                }
                if total >= REFUSAL_READ_LIMIT {
                    return;
                }
            }
            _ => return,
        }
    }
}

async fn answer_refused(mut stream: tokio::net::UnixStream, status: &str, reason: &str) {
    let deadline = tokio::time::Instant::now() + REFUSAL_WAIT;
    read_until(&mut stream, deadline, true).await;
    answer_and_drain(stream, Some(answer_text(status, reason))).await;
}

/// Write `answer` (if any), shut the connection down for writing, and read what the client still
/// sends until it closes (within [`REFUSAL_WAIT`], at most [`REFUSAL_READ_LIMIT`] bytes); then
/// close it.
async fn answer_and_drain(mut stream: tokio::net::UnixStream, answer: Option<String>) {
    use tokio::io::AsyncWriteExt;
    if let Some(text) = answer {
        let wrote = tokio::time::timeout(REFUSAL_WAIT, stream.write_all(text.as_bytes())).await;
        if !matches!(wrote, Ok(Ok(()))) {
            return;
        }
    }
    let _ = stream.shutdown().await;
    read_until(
        &mut stream,
        tokio::time::Instant::now() + REFUSAL_WAIT,
        false,
    )
    .await;
}

/// Close a connection hyper has let go (`fd`, a duplicate of its descriptor) so that its client
/// reads what it was sent: with an answer still owed or request bytes unread (`unread`), the
/// answer is written and the input drained before the close ([`answer_and_drain`]); else it is
/// shut down and closed at once.
async fn close_lingering(fd: OwnedFd, answer: Option<String>, unread: u64) {
    let s = std::os::unix::net::UnixStream::from(fd);
    if answer.is_none() && unread == 0 {
        let _ = s.shutdown(std::net::Shutdown::Write);
        return;
    }
    let stream = s
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixStream::from_std(s));
    if let Ok(stream) = stream {
        answer_and_drain(stream, answer).await;
    }
}

/// The answer a connection hyper has let go (`result`) still owes its client: `408`/`400` for a
/// request head given up on, `503` for a request that reached the stopping daemon unanswered —
/// read in part (`pending`) or not at all (`unread` bytes: the stop closed an idle connection
/// before hyper read them).
fn owed_answer(
    daemon: &Daemon,
    result: &Result<(), hyper::Error>,
    pending: bool,
    unread: u64,
) -> Option<String> {
    match result {
        Err(e) if pending && e.is_timeout() => Some(answer_text(
            "408 Request Timeout",
            &format!(
                "the request head did not arrive within {} s",
                daemon.config.head_timeout.as_secs_f64()
            ),
        )),
        Err(e) if pending && e.is_incomplete_message() => Some(answer_text(
            "400 Bad Request",
            "the request ended before its head was complete",
        )),
        _ if daemon.stopping() && (pending || unread > 0) => {
            Some(answer_text("503 Service Unavailable", http::STOPPING))
        }
        _ => None,
    }
}

/// Resolves once the peer has closed both directions (a hang-up), never for a half-close.
async fn hung_up(fd: &AsyncFd<OwnedFd>) {
    loop {
        match fd.ready(Interest::WRITABLE).await {
            Ok(mut guard) => {
                if guard.ready().is_write_closed() {
                    return;
                }
                guard.clear_ready();
            }
            Err(_) => return std::future::pending().await,
        }
    }
}

/// Serve one admitted connection until it ends; its slot (`ticket`) is given back then.
pub async fn serve_connection(
    daemon: Arc<Daemon>,
    stream: tokio::net::UnixStream,
    peer: Peer,
    ticket: Ticket,
    conns: Arc<Connections>,
) {
    // SAFETY: the descriptor is an `OwnedFd` the `AsyncFd` owns: it stays open, and the same,
    // for as long as it is registered.
    let watch = stream
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::WRITABLE).ok() });
    let pending = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Tapped {
        inner: stream,
        pending: pending.clone(),
        keep_open: watch.is_some(),
    });
    let d2 = daemon.clone();
    let svc = service_fn(move |req| http::handle(d2.clone(), peer, req));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(daemon.config.head_timeout)
        .max_buf_size(http::HARD_HEAD_LIMIT)
        .max_header_size(http::HARD_HEAD_LIMIT)
        .half_close(true)
        .keep_alive(true);
    let mut stop = daemon.stop_signal();
    let mut asked = false;
    // The connection lives in this block: leaving it (the client gone) drops what the request
    // was waiting for.
    let result = {
        let gone = async {
            match &watch {
                Some(w) => hung_up(w).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(gone);
        let conn = builder.serve_connection(io, svc);
        tokio::pin!(conn);
        loop {
            tokio::select! {
                r = conn.as_mut() => break Some(r),
                _ = stop.wait_for(|s| s.is_some()), if !asked => {
                    asked = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ = gone.as_mut() => break None,
            }
        }
    };
    // The watching descriptor, a duplicate of the connection's, gives the last word and closes
    // it (the client gone: at once).
    if let (Some(result), Some(fd)) = (result, watch.map(AsyncFd::into_inner)) {
        let unread = rustix::io::ioctl_fionread(&fd).unwrap_or(0);
        let answer = owed_answer(&daemon, &result, pending.load(Ordering::SeqCst), unread);
        close_lingering(fd, answer, unread).await;
    }
    drop(ticket);
    conns.open.fetch_sub(1, Ordering::SeqCst);
    conns.closed.notify_waiters();
}
