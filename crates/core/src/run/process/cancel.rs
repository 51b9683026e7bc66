//! Cancellation: a flag shared by whoever may cancel and the runs it applies to, with a wake-up
//! descriptor so a waiting run notices at once.

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A cancellation flag shared by whoever may cancel and the runs it applies to. Cheap to clone
/// (all clones are the same flag); `Send + Sync`. [`Cancel::cancel`] only stores an atomic and
/// writes one byte to a socket (both async-signal-safe), which wakes every [`run`](super::run) using this
/// flag at once.
#[derive(Debug, Clone)]
pub struct Cancel {
    inner: Arc<CancelInner>,
}

#[derive(Debug)]
struct CancelInner {
    flag: AtomicBool,
    /// (read end, write end); the byte written on cancellation is never read, so the read end
    /// stays readable. `None` if the socket pair could not be created: runs then check the flag
    /// every [`CANCEL_POLL`].
    wake: Option<(UnixStream, UnixStream)>,
}

/// How often a run checks a [`Cancel`] that has no wake-up socket.
pub(super) const CANCEL_POLL: Duration = Duration::from_millis(50);

impl Cancel {
    /// A flag not yet cancelled, with its own wake-up socket pair (when one can be made).
    pub fn new() -> Cancel {
        Cancel {
            inner: Arc::new(CancelInner {
                flag: AtomicBool::new(false),
                wake: UnixStream::pair().ok(),
            }),
        }
    }

    /// Cancel every run using this flag (idempotent).
    pub fn cancel(&self) {
        if !self.inner.flag.swap(true, Ordering::SeqCst) {
            if let Some((_, write_end)) = &self.inner.wake {
                let _ = (&*write_end).write(&[1]);
            }
        }
    }

    /// Whether [`Cancel::cancel`] has been called on this flag or any clone of it.
    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    pub(super) fn wake_fd(&self) -> Option<RawFd> {
        self.inner
            .wake
            .as_ref()
            .map(|(read_end, _)| read_end.as_raw_fd())
    }
}

impl Default for Cancel {
    fn default() -> Cancel {
        Cancel::new()
    }
}
