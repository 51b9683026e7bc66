//! How a child ended: its wait status ([`Termination`]), how a run ended ([`End`]: on its own, by
//! a timeout, by a cancellation), the figures of a run ([`Outcome`]), and why a child could not
//! be started ([`SpawnError`]).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Spec;
use crate::run::signals;

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// It exited with this status.
    Exited(i32),
    /// It was killed by this signal number.
    Signaled(i32),
}

impl Termination {
    /// From a raw `wait` status.
    pub(crate) fn from_wait_status(status: i32) -> Termination {
        if libc::WIFSIGNALED(status) {
            Termination::Signaled(libc::WTERMSIG(status))
        } else {
            Termination::Exited(libc::WEXITSTATUS(status))
        }
    }

    /// Exited with status 0.
    pub fn success(self) -> bool {
        self == Termination::Exited(0)
    }

    /// The status a shell would report: the exit status, or 128 + the signal number.
    #[cfg(test)]
    pub(crate) fn exit_status_like_shell(self) -> i32 {
        match self {
            Termination::Exited(code) => code,
            Termination::Signaled(sig) => 128 + sig,
        }
    }

    /// The signal number, if the child was killed by one.
    pub fn signal(self) -> Option<i32> {
        match self {
            Termination::Exited(_) => None,
            Termination::Signaled(sig) => Some(sig),
        }
    }

    /// The signal's name (`"SIGSEGV"`), if the child was killed by a known signal.
    #[cfg(test)]
    pub(crate) fn signal_name(self) -> Option<&'static str> {
        self.signal().and_then(signals::signal_name)
    }
}

impl fmt::Display for Termination {
    /// `exit status 3`, `signal 11 (SIGSEGV)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Termination::Exited(code) => write!(f, "exit status {code}"),
            Termination::Signaled(sig) => match signals::signal_name(sig) {
                Some(name) => write!(f, "signal {sig} ({name})"),
                None => write!(f, "signal {sig}"),
            },
        }
    }
}

/// How a run ended — one value, matched exhaustively, so no consumer re-derives which of a
/// timeout, a cancellation and the child's own end came first. (A child that could not be
/// started is the [`SpawnError`] of [`run`](super::run).)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// It exited with this status on its own.
    Exited(i32),
    /// A signal nxcc did not send killed it.
    Signaled(i32),
    /// Its timeout elapsed; nxcc terminated its group, which then ended this way.
    TimedOut(Termination),
    /// The run was cancelled; nxcc terminated its group, which then ended this way.
    Cancelled(Termination),
}

impl End {
    /// From how the child ended and what nxcc did to it (a timeout or a cancellation, at most one).
    pub fn new(termination: Termination, timed_out: bool, cancelled: bool) -> End {
        match (cancelled, timed_out, termination) {
            (true, _, t) => End::Cancelled(t),
            (false, true, t) => End::TimedOut(t),
            (false, false, Termination::Exited(code)) => End::Exited(code),
            (false, false, Termination::Signaled(sig)) => End::Signaled(sig),
        }
    }

    /// How the child itself ended (its wait status), whatever the reason.
    pub(crate) fn termination(self) -> Termination {
        match self {
            End::Exited(code) => Termination::Exited(code),
            End::Signaled(sig) => Termination::Signaled(sig),
            End::TimedOut(t) | End::Cancelled(t) => t,
        }
    }

    /// It exited with status 0 on its own.
    pub fn success(self) -> bool {
        self == End::Exited(0)
    }
}

/// What happened to a child that was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The child's process id (also its process group id).
    pub pid: u32,
    /// How it ended.
    pub end: End,
    /// From just before the spawn to the moment the group leader exited.
    pub wall: Duration,
    /// CPU time of the child and its waited-for descendants (`wait4` rusage).
    pub user: Duration,
    /// System CPU time of the child and its waited-for descendants (`wait4` rusage).
    pub sys: Duration,
    /// Peak resident set size, KiB, of the child or its largest waited-for descendant.
    pub max_rss_kb: u64,
    /// The last [`STDERR_TAIL_LINES`](super::STDERR_TAIL_LINES) lines of stderr, oldest first.
    pub stderr_tail: Vec<String>,
}

impl Outcome {
    /// How the child itself ended.
    pub(crate) fn termination(&self) -> Termination {
        self.end.termination()
    }
}

/// The child could not be started (or, rarely, could not be waited for).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// No file at the program's path, or no such name in `PATH`.
    #[error("cannot run {}: program not found", program.display())]
    ProgramNotFound {
        /// The program as the [`Spec`] names it.
        program: PathBuf,
    },
    /// The program exists but cannot be executed (no permission, or not a format the kernel runs).
    #[error("cannot run {}: not executable ({source})", program.display())]
    NotExecutable {
        /// The program as the [`Spec`] names it.
        program: PathBuf,
        /// The error of `exec` (EACCES, ENOEXEC, ...).
        source: io::Error,
    },
    /// The [`Spec::cwd`] is not a directory (checked before the spawn, and again if it fails).
    #[error(
        "cannot run {}: working directory {} does not exist",
        program.display(),
        cwd.display()
    )]
    CwdMissing {
        /// The program as the [`Spec`] names it.
        program: PathBuf,
        /// The missing working directory.
        cwd: PathBuf,
    },
    /// The [`Cancel`](super::Cancel) was already set when the run was asked for; nothing started.
    #[error("cannot run {}: cancelled before it started", program.display())]
    Cancelled {
        /// The program as the [`Spec`] names it.
        program: PathBuf,
    },
    /// Any other failure to start it or to set up its pipes and waiter thread.
    #[error("cannot run {}: {source}", program.display())]
    Io {
        /// The program as the [`Spec`] names it.
        program: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// It started but could not be waited for (e.g. SIGCHLD ignored, so the kernel reaped it).
    #[error("cannot wait for {} (pid {pid}): {source}", program.display())]
    Wait {
        /// The program as the [`Spec`] names it.
        program: PathBuf,
        /// The child's process id.
        pid: u32,
        /// The error of `wait4`.
        source: io::Error,
    },
}

impl SpawnError {
    /// The program the error is about.
    pub fn program(&self) -> &Path {
        match self {
            SpawnError::ProgramNotFound { program }
            | SpawnError::NotExecutable { program, .. }
            | SpawnError::CwdMissing { program, .. }
            | SpawnError::Cancelled { program }
            | SpawnError::Io { program, .. }
            | SpawnError::Wait { program, .. } => program,
        }
    }
}

/// The [`SpawnError`] for an `io::Error` of `Command::spawn`.
pub(super) fn classify_spawn_error(spec: &Spec, error: io::Error) -> SpawnError {
    let program = spec.program.clone();
    match error.kind() {
        // `chdir` in the child fails with ENOENT too if the directory vanished meanwhile.
        io::ErrorKind::NotFound if !spec.cwd.is_dir() => SpawnError::CwdMissing {
            program,
            cwd: spec.cwd.clone(),
        },
        io::ErrorKind::NotFound => SpawnError::ProgramNotFound { program },
        io::ErrorKind::PermissionDenied => SpawnError::NotExecutable {
            program,
            source: error,
        },
        _ if error.raw_os_error() == Some(libc::ENOEXEC) => SpawnError::NotExecutable {
            program,
            source: error,
        },
        _ => SpawnError::Io {
            program,
            source: error,
        },
    }
}
