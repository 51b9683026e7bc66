//! The worker's report to its supervisor: one JSON object per line on a pipe (the worker finds its
//! end in the environment variable [`EVENTS_FD_ENV`]). The supervisor learns what ran and how,
//! even when the worker later dies; the daemon forwards the same events to its clients.

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::metrics::JobMetrics;

/// The environment variable holding the events pipe's file descriptor number in the worker.
pub const EVENTS_FD_ENV: &str = "NXCC_WORKER_EVENTS_FD";

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The jobs about to run, in order.
    Pipeline {
        jobs: Vec<String>,
    },
    JobStarted {
        job: String,
        index: usize,
        total: usize,
    },
    JobFinished(JobMetrics),
    /// An error line the worker printed (`[ERROR] ...`, an F-code banner, a stderr tail line).
    Error {
        line: String,
    },
    /// The worker is done; its exit status follows.
    Done {
        exit_status: i32,
    },
}

/// The worker's writing end (thread-safe; each event is one `write` of one line).
pub struct EventWriter {
    file: Mutex<std::fs::File>,
}

impl EventWriter {
    /// The writer named by [`EVENTS_FD_ENV`], if the worker was given one.
    pub fn from_env() -> Option<EventWriter> {
        let fd: i32 = std::env::var(EVENTS_FD_ENV).ok()?.parse().ok()?;
        if fd < 3
            || rustix::io::fcntl_getfd(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }).is_err()
        {
            return None;
        }
        // SAFETY: the supervisor passed this descriptor to us for exactly this use, and nothing
        // else in the worker owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(EventWriter::from_fd(owned))
    }

    /// The writer on a descriptor this process owns (a forked worker's end of the pipe).
    pub fn from_fd(fd: OwnedFd) -> EventWriter {
        // Tools must not inherit it (a straggler would keep the supervisor's reader open).
        let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC);
        EventWriter {
            file: Mutex::new(std::fs::File::from(fd)),
        }
    }

    pub fn send(&self, event: &Event) {
        if let Ok(mut line) = serde_json::to_vec(event) {
            line.push(b'\n');
            let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let _ = f.write_all(&line);
        }
    }
}

/// Parse one line of the events pipe (unknown or malformed lines are ignored by the reader).
pub fn parse(line: &str) -> Option<Event> {
    serde_json::from_str(line).ok()
}
