//! One connection: the peer's credentials, hyper serving HTTP/1.1 on it (a header read timeout,
//! a bounded head), a graceful end when the daemon stops, and a last answer (`400`/`408`) for a
//! request head hyper gave up on (cut off by the end of the stream, or not complete in time).

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::http;
use super::state::{Daemon, Peer};

/// A stream that notes whether request bytes arrived since the last answer bytes went out —
/// i.e. whether a request is in progress when hyper gives up on the connection.
struct Tapped {
    inner: tokio::net::UnixStream,
    pending: Arc<AtomicBool>,
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
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Write a short answer on a connection hyper has given up on (one non-blocking write).
fn last_word(fd: OwnedFd, status: &str, reason: &str) {
    let s = std::os::unix::net::UnixStream::from(fd);
    let body = format!("{reason}\n");
    let msg = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = (&s).write(msg.as_bytes());
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Counts open connections.
#[derive(Default)]
pub struct Connections {
    pub open: AtomicUsize,
    pub closed: Notify,
}

pub async fn serve_connection(
    daemon: Arc<Daemon>,
    stream: tokio::net::UnixStream,
    conns: Arc<Connections>,
) {
    let peer = match stream.peer_cred() {
        Ok(c) => Peer {
            uid: c.uid(),
            gid: c.gid(),
            pid: c.pid(),
        },
        Err(e) => {
            daemon
                .log
                .warning(&format!("cannot read a connection's credentials: {e}"));
            return;
        }
    };
    let spare = stream.as_fd().try_clone_to_owned().ok();
    let pending = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Tapped {
        inner: stream,
        pending: pending.clone(),
    });
    let d2 = daemon.clone();
    let svc = service_fn(move |req| http::handle(d2.clone(), peer, req));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(http::HEAD_TIMEOUT)
        .max_buf_size(http::HARD_HEAD_LIMIT)
        .max_header_size(http::HARD_HEAD_LIMIT)
        .keep_alive(true);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let mut stop = daemon.stop_signal();
    let mut asked = false;
    let result = loop {
        tokio::select! {
            r = conn.as_mut() => break r,
            _ = stop.wait_for(|s| s.is_some()), if !asked => {
                asked = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    };
    if let Err(e) = result {
        if pending.load(Ordering::SeqCst) {
            if let Some(fd) = spare {
                if e.is_timeout() {
                    last_word(
                        fd,
                        "408 Request Timeout",
                        &format!(
                            "the request head did not arrive within {} s",
                            http::HEAD_TIMEOUT.as_secs()
                        ),
                    );
                } else if e.is_incomplete_message() {
                    last_word(
                        fd,
                        "400 Bad Request",
                        "the request ended before its head was complete",
                    );
                }
            }
        }
    }
    conns.open.fetch_sub(1, Ordering::SeqCst);
    conns.closed.notify_waiters();
}
