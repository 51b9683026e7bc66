//! The worker's report pipe: one JSON object per line, from the worker to its supervisor (the
//! worker finds its end in the environment variable [`EVENTS_FD_ENV`]). What the objects mean is
//! the caller's business (a compile's events are `crate::engine::events`); this module only
//! carries lines, so the supervisor learns what the worker said even when the worker later dies.

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;

use serde::Serialize;

/// The environment variable holding the events pipe's file descriptor number in the worker.
pub const EVENTS_FD_ENV: &str = "NXCC_WORKER_EVENTS_FD";

/// The worker's writing end (thread-safe; each event is one `write` of one line).
pub struct EventWriter {
    file: Mutex<std::fs::File>,
}

impl EventWriter {
    /// The writer named by [`EVENTS_FD_ENV`], if the worker was given one.
    pub fn from_env() -> Option<EventWriter> {
        let fd: i32 = std::env::var(EVENTS_FD_ENV).ok()?.parse().ok()?;
        if fd < 3 {
            return None;
        }
        // SAFETY: the number is not -1, and it is only borrowed for one fcntl, which fails
        // harmlessly (EBADF) when nothing is open under it.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if rustix::io::fcntl_getfd(borrowed).is_err() {
            return None;
        }
        // SAFETY: the supervisor passed this descriptor to us for exactly this use, and nothing
        // else in the worker owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(EventWriter::from_fd(owned))
    }

    /// The writer on a descriptor this process owns (a forked worker's end of the pipe).
    pub(crate) fn from_fd(fd: OwnedFd) -> EventWriter {
        // Tools must not inherit it (a straggler would keep the supervisor's reader open).
        let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC);
        EventWriter {
            file: Mutex::new(std::fs::File::from(fd)),
        }
    }

    /// Send one value as one line (a single `write`, so lines of concurrent senders never mix).
    pub fn send<T: Serialize>(&self, event: &T) {
        if let Ok(mut line) = serde_json::to_vec(event) {
            line.push(b'\n');
            let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let _ = f.write_all(&line);
        }
    }
}
