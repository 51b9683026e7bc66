//! The `/v1/compile` event stream: the compile's console lines and worker events as
//! newline-delimited JSON, written by the compile's thread into a channel and sent by hyper as a
//! chunked body, ending with `done`. A client that goes away (its request's future or its
//! response body dropped) cancels its compile; so does one that leaves more than
//! [`STREAM_BACKLOG_LIMIT`] bytes unread.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use hyper::body::{Bytes, Frame};
use tokio::sync::mpsc;

use super::job::{self, Emit, Ended};
use super::state::{ActivityGuard, Daemon, Peer};
use super::wire::{Done, Line, Said, Stream};
use crate::engine::events::Event;

/// Event bytes a `/v1/compile` client may leave unread before it counts as gone.
pub const STREAM_BACKLOG_LIMIT: usize = 16 << 20;

/// Cancels a compile whose client went away (the guard is dropped with the request's future or
/// its response body) unless disarmed first.
pub struct CancelOnDrop {
    daemon: Arc<Daemon>,
    id: u64,
    control: Arc<job::Control>,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed && !self.control.is_cancelled() && self.daemon.is_registered(self.id) {
            self.daemon.log.info(&format!(
                "compile #{}: the client went away; cancelling it",
                self.id
            ));
            self.control.cancel(0);
        }
    }
}

impl CancelOnDrop {
    /// An armed guard for compile `id` of `daemon`, cancelling through `control`.
    pub fn new(daemon: Arc<Daemon>, id: u64, control: Arc<job::Control>) -> CancelOnDrop {
        CancelOnDrop {
            daemon,
            id,
            control,
            armed: true,
        }
    }

    /// The compile is over (or its end was delivered): nothing to cancel.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

/// Start a compile whose events go to the returned stream; `None` when the daemon is stopping.
pub fn stream_compile(
    daemon: &Arc<Daemon>,
    request: job::Request,
    peer: &Peer,
) -> Option<(u64, EventStream)> {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let backlog = Arc::new(AtomicUsize::new(0));
    let control_slot: Arc<OnceLock<Arc<job::Control>>> = Arc::default();
    let emit = Arc::new(StreamEmit {
        tx,
        backlog: backlog.clone(),
        overflowed: AtomicBool::new(false),
        done_sent: AtomicBool::new(false),
        control: control_slot.clone(),
    });
    let (id, control, handle) = daemon.spawn_compile(request, emit.clone(), peer, "/v1/compile")?;
    let _ = control_slot.set(control.clone());
    let guard = CancelOnDrop::new(daemon.clone(), id, control);
    // The last event comes from the compile's thread as it ends ([`Emit::done`]); if that thread
    // panicked, from here once it is joined.
    tokio::spawn(async move {
        let ended = Daemon::join(handle).await;
        if !emit.done_sent.load(Ordering::SeqCst) {
            emit.send(&done_line(&ended));
        }
    });
    Some((
        id,
        EventStream {
            rx,
            first: None,
            backlog,
            _cancel: guard,
            _activity: daemon.activity(),
        },
    ))
}

/// The last line of a `/v1/compile` stream: how the compile ended, its typed status included.
pub fn done_line(e: &Ended) -> Line {
    Line::Said(Said::Done(Done {
        exit_status: e.exit_status(),
        output: e.output.as_ref().map(|p| p.display().to_string()),
        cache: e.cache,
        error_lines: e.error_lines.clone(),
        failure: e.status.failure().cloned(),
        wall_s: e.wall.as_secs_f64(),
        status: Some(e.status.clone()),
    }))
}

/// Feeds a `/v1/compile` stream from the compile's thread.
struct StreamEmit {
    tx: mpsc::UnboundedSender<Bytes>,
    backlog: Arc<AtomicUsize>,
    overflowed: AtomicBool,
    done_sent: AtomicBool,
    control: Arc<std::sync::OnceLock<Arc<job::Control>>>,
}

impl StreamEmit {
    fn send(&self, l: &Line) {
        if self.overflowed.load(Ordering::SeqCst) {
            return;
        }
        let line = l.to_bytes();
        let n = line.len();
        if self.backlog.fetch_add(n, Ordering::SeqCst) + n > STREAM_BACKLOG_LIMIT {
            // The client does not read its stream: treat it as gone.
            self.overflowed.store(true, Ordering::SeqCst);
            if let Some(c) = self.control.get() {
                c.cancel(0);
            }
            return;
        }
        let _ = self.tx.send(Bytes::from(line));
    }
}

impl Emit for StreamEmit {
    fn log(&self, line: &str, stderr: bool) {
        let stream = if stderr {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        self.send(&Line::log(line, stream));
    }
    fn event(&self, event: &Event) {
        if let Some(l) = Line::worker(event) {
            self.send(&l);
        }
    }
    fn engine(&self, named: &crate::cache::EngineIdentity) {
        self.send(&Line::Said(Said::Engine(named.clone())));
    }
    fn toolchain(&self, named: &crate::cache::ToolchainIdentity) {
        self.send(&Line::Said(Said::Toolchain(named.clone())));
    }
    fn done(&self, ended: &Ended) {
        self.done_sent.store(true, Ordering::SeqCst);
        self.send(&done_line(ended));
    }
}

/// The response body of `/v1/compile`: event lines as they come. Dropping it (the client went
/// away) cancels the compile.
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<Bytes>,
    /// A line taken early ([`EventStream::wait_first`]), sent first.
    first: Option<Bytes>,
    backlog: Arc<AtomicUsize>,
    _cancel: CancelOnDrop,
    _activity: ActivityGuard,
}

impl EventStream {
    /// Wait at most `within` for the first lines — the engine line every stream opens with,
    /// and the compile's own first line —, so that the answer's head goes out with them in one
    /// write (a compile the cache answers is over by then: head, lines and `done` at once).
    pub async fn wait_first(&mut self, within: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + within;
        for _ in 0..2 {
            let Ok(Some(b)) = tokio::time::timeout_at(deadline, self.rx.recv()).await else {
                return;
            };
            self.first = Some(match self.first.take() {
                Some(before) => [before, b].concat().into(),
                None => b,
            });
        }
    }
}

impl hyper::body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let ready = match this.first.take() {
            Some(b) => Poll::Ready(Some(b)),
            None => this.rx.poll_recv(cx),
        };
        match ready {
            Poll::Ready(Some(first)) => {
                // Lines already waiting go out with this one, in one chunk (one write).
                let b = match this.rx.try_recv() {
                    Ok(next) => {
                        let mut all = Vec::with_capacity(first.len() + next.len());
                        all.extend_from_slice(&first);
                        all.extend_from_slice(&next);
                        while all.len() < 64 << 10 {
                            match this.rx.try_recv() {
                                Ok(more) => all.extend_from_slice(&more),
                                Err(_) => break,
                            }
                        }
                        Bytes::from(all)
                    }
                    Err(_) => first,
                };
                this.backlog.fetch_sub(b.len(), Ordering::SeqCst);
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Poll::Ready(None) => {
                // Everything was sent: the compile is over.
                this._cancel.disarm();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_done_line_says_how_the_compile_ended() {
        let status = crate::result::Status::Failed(crate::result::Failure::Internal);
        let d = serde_json::to_value(done_line(&Ended {
            status: status.clone(),
            error_lines: vec!["[ERROR] x".into()],
            output: Some("/w/m.neff".into()),
            cache: super::super::wire::CacheUse::Off,
            wall: Duration::from_millis(1500),
        }))
        .unwrap();
        assert_eq!(d["event"], "done");
        assert_eq!(d["exit_status"], 70);
        assert_eq!(d["output"], "/w/m.neff");
        assert_eq!(d["cache"], "off");
        assert_eq!(d["error_lines"][0], "[ERROR] x");
        assert_eq!(d["wall_s"], 1.5);
        assert_eq!(d["failure"], "internal");
        assert_eq!(d["status"], serde_json::to_value(&status).unwrap());
    }
}
