//! How a compile ended, as data: a [`Status`] — succeeded, failed with a [`Failure`] that says
//! what failed, interrupted by a signal, or cancelled for a [`CancelReason`] — from which the exit
//! status follows. Every decision about a failure (what the compile cache remembers, what
//! `parallel-compile` retries alone, the daemon's answer and counters, a remote worker's result,
//! the framework cache's `model.log`, nxcc's exit status) matches on these types; none reads a
//! compile's printed lines back.
//!
//! The lines the original prints are rendered where a failure is found, once (`engine::failure`);
//! the classification of a tool's end — its signal, and the `strerror` words of its stderr, the
//! one place text is read — is a reconstructed rule (`recon::failure`).

use serde::{Deserialize, Serialize};

use crate::error::EXIT_COMPILE_FAILED;
use crate::job_name::JobName;

/// The exit status of a compile a hit-only cache refused (EX_UNAVAILABLE: no NEFF is available
/// and none may be made).
pub const EXIT_CACHE_MISS: i32 = 69;
use crate::run::signals::{exit_status_for, signal_text};

/// How a compile ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It did its work (wrote its NEFF, or ran the jobs of a plan that writes none).
    Succeeded,
    /// It failed.
    Failed(Failure),
    /// A signal to nxcc (SIGINT, SIGTERM, SIGHUP; the daemon stopping) stopped it: exit status
    /// 128 + the signal (130, 143).
    Interrupted(i32),
    /// It was stopped without a signal of its own, for this reason (exit status 143, as SIGTERM).
    Cancelled(CancelReason),
}

/// Why a compile was cancelled when no signal says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// The daemon's client went away (or could not keep up with the compile's stream).
    ClientGone,
    /// Whoever runs the compile stopped it (a batch, a lease, a caller of the library).
    Stopped,
    /// Its time limit passed (a remote action's `timeout`).
    TimeLimit,
}

/// What failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// A job failed by itself: its tool (or the external compiler, or a library call) ended as
    /// `end`, or the job reported an error of its own.
    Job {
        /// The job (`WalrusDriver`, `ExternalCompiler`); `None` when it was not recorded (a
        /// failure an older nxcc's cache remembers).
        job: Option<JobName>,
        /// How it ended.
        end: JobEnd,
    },
    /// `--job-timeout` elapsed while the job ran.
    Timeout {
        /// The job.
        job: JobName,
        /// The limit, seconds.
        seconds: f64,
    },
    /// A process was killed by SIGKILL — most often the out-of-memory killer (the original's
    /// `[F137]`): a job's tool, or the worker itself (`job` is then `None`).
    OutOfMemory {
        /// The job whose tool was killed; `None`: the worker.
        job: Option<JobName>,
        /// The killed process's peak RSS, KiB.
        peak_rss_kb: u64,
    },
    /// The worker ended without finishing the compile: a signal other than SIGKILL ended it, or
    /// a signal sent to it stopped it, or its end cannot be known (the process that reaped it
    /// died).
    WorkerLost {
        /// The signal, when one is known.
        signal: Option<i32>,
        /// The worker's peak RSS, KiB (0 when unknown).
        peak_rss_kb: u64,
    },
    /// The machine, the moment or a path outside the compile's inputs, not the model.
    Environment(Environment),
    /// The command line cannot be used (exit status 2).
    Usage,
    /// The plan could not be made: the command line or the model is refused after parsing, as
    /// the original refuses them (exit status 70; nothing ran).
    Plan,
    /// The remote server.
    Remote(RemoteFailure),
    /// A hit-only cache had no entry for the compile, and a hit-only cache never compiles
    /// (exit status 69, EX_UNAVAILABLE).
    CacheMiss,
    /// nxcc itself could not do its part.
    Internal,
}

/// How a job that failed by itself ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobEnd {
    /// Its process exited with this status (or its library call returned it).
    Exited(i32),
    /// Its process crashed on this signal of its own (SIGSEGV, SIGABRT, ...).
    Crashed(i32),
    /// The job (run in the worker) reported an error of its own.
    Error,
}

/// A failure of the environment: what was missing or went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    /// A tool (or the compiler, or the toolchain) is not there.
    MissingTool(String),
    /// A process could not be started, or a library loaded.
    Spawn,
    /// An error of the system: a full disk, an I/O error, a permission, ...
    Io(IoCause),
    /// A tool was ended by a signal of the moment (terminated, hung up, a broken pipe, a CPU
    /// or file-size limit).
    Signal(i32),
    /// The log file cannot be opened.
    LogFile,
    /// No work directory could be made (or the one given holds an earlier compile).
    WorkDir,
    /// `--output` cannot be written (or the compiler's output not moved there).
    Output,
    /// A cache directory that must not be used.
    CacheDir,
    /// A framework cache entry that cannot be locked or opened.
    CacheEntry,
    /// The daemon's working directory for the request cannot be made.
    WorkingDirectory,
    /// The model could not be read into the compile's private snapshot, or changed between
    /// the plan and the snapshot (someone wrote it meanwhile).
    Model,
    /// A setting of the environment the tools would run with does not read (the simulated
    /// toolchain's injection variables).
    Setting,
}

/// The system errors a compile meets because of the machine, the moment or a path outside its
/// inputs (the C library's `strerror` classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoCause {
    /// No space left on device.
    DiskFull,
    /// Disk quota exceeded.
    Quota,
    /// Input/output error, or a stale file handle.
    Io,
    /// Permission denied, operation not permitted, a read-only file system, a busy text file.
    Permission,
    /// Cannot allocate memory.
    Memory,
    /// Too many open files.
    Files,
    /// File too large.
    TooLarge,
    /// A path that is not what it must be: a directory, not a directory, too long, a loop.
    Path,
}

/// What the remote server did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteFailure {
    /// It could not be reached.
    Unreachable,
    /// It refused to run the action (or a call).
    Refused,
    /// The compile ran remotely and failed there, with this exit status.
    FailedRemotely(i32),
    /// The remote compile ran past its time limit.
    TimedOut,
    /// What it answered failed a check (a blob not what its digest says, a result not a NEFF).
    Untrusted,
    /// Another error of the exchange (a malformed answer, a lost output).
    Error,
}

impl Status {
    /// The exit status nxcc ends with: 0, 2 for a usage error, 70 for any other failure,
    /// 128 + the signal after an interrupt (130, 143), 143 after a cancellation.
    pub fn exit_status(&self) -> i32 {
        match self {
            Status::Succeeded => 0,
            Status::Failed(Failure::Usage) => 2,
            Status::Failed(Failure::CacheMiss) => EXIT_CACHE_MISS,
            Status::Failed(_) => EXIT_COMPILE_FAILED,
            Status::Interrupted(sig) => exit_status_for(*sig),
            Status::Cancelled(_) => exit_status_for(libc::SIGTERM),
        }
    }

    /// Whether the compile succeeded.
    pub fn succeeded(&self) -> bool {
        matches!(self, Status::Succeeded)
    }

    /// The failure, when it failed.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Status::Failed(f) => Some(f),
            _ => None,
        }
    }

    /// Whether it was stopped (interrupted or cancelled) rather than ending by itself.
    pub fn stopped(&self) -> bool {
        matches!(self, Status::Interrupted(_) | Status::Cancelled(_))
    }

    /// The words a log uses for it: `succeeded`, `failed: <what>`, `interrupted by SIGINT`,
    /// `cancelled (the client went away)`.
    pub fn describe(&self) -> String {
        match self {
            Status::Succeeded => "succeeded".into(),
            Status::Failed(f) => format!("failed: {}", f.describe()),
            Status::Interrupted(sig) => format!("interrupted by {}", signal_text(*sig)),
            Status::Cancelled(CancelReason::ClientGone) => {
                "cancelled (its client went away)".into()
            }
            Status::Cancelled(CancelReason::Stopped) => "cancelled".into(),
            Status::Cancelled(CancelReason::TimeLimit) => {
                "cancelled (its time limit passed)".into()
            }
        }
    }
}

impl Failure {
    /// The signal a process of the compile ended on, when one did: a job's crash, a kill for
    /// memory (SIGKILL), the worker's signal, a signal of the moment.
    pub fn signal(&self) -> Option<i32> {
        match self {
            Failure::Job {
                end: JobEnd::Crashed(s),
                ..
            } => Some(*s),
            Failure::OutOfMemory { .. } => Some(libc::SIGKILL),
            Failure::WorkerLost { signal, .. } => *signal,
            Failure::Environment(Environment::Signal(s)) => Some(*s),
            _ => None,
        }
    }

    /// A few words saying what failed.
    pub fn describe(&self) -> String {
        match self {
            Failure::Job { job, end } => {
                let job = job.map_or("a job", JobName::name);
                match end {
                    JobEnd::Exited(c) => format!("{job} exited with status {c}"),
                    JobEnd::Crashed(s) => format!("{job} crashed on {}", signal_text(*s)),
                    JobEnd::Error => format!("{job} reported an error"),
                }
            }
            Failure::Timeout { job, seconds } => format!("{job} timed out after {seconds} s"),
            Failure::OutOfMemory { job: Some(j), .. } => format!("{j} was killed (out of memory)"),
            Failure::OutOfMemory { job: None, .. } => {
                "the worker was killed (out of memory)".into()
            }
            Failure::WorkerLost {
                signal: Some(s), ..
            } => {
                format!("the worker ended on {}", signal_text(*s))
            }
            Failure::WorkerLost { signal: None, .. } => "the worker was lost".into(),
            Failure::Environment(e) => format!("the environment: {e:?}"),
            Failure::Usage => "a usage error".into(),
            Failure::Plan => "the compile could not be planned".into(),
            Failure::Remote(r) => format!("the remote server: {r:?}"),
            Failure::CacheMiss => "a miss of a hit-only cache".into(),
            Failure::Internal => "an internal error".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_name::{Job, JobName};

    #[test]
    fn exit_statuses_follow_the_status() {
        assert_eq!(Status::Succeeded.exit_status(), 0);
        assert_eq!(Status::Failed(Failure::Usage).exit_status(), 2);
        assert_eq!(Status::Failed(Failure::Internal).exit_status(), 70);
        assert_eq!(Status::Interrupted(libc::SIGINT).exit_status(), 130);
        assert_eq!(Status::Interrupted(libc::SIGHUP).exit_status(), 143);
        assert_eq!(
            Status::Cancelled(CancelReason::ClientGone).exit_status(),
            143
        );
    }

    #[test]
    fn statuses_survive_json() {
        for s in [
            Status::Succeeded,
            Status::Failed(Failure::Job {
                job: Some(JobName::Registry(Job::WalrusDriver)),
                end: JobEnd::Exited(3),
            }),
            Status::Failed(Failure::Environment(Environment::Io(IoCause::DiskFull))),
            Status::Failed(Failure::Remote(RemoteFailure::FailedRemotely(70))),
            Status::Interrupted(2),
            Status::Cancelled(CancelReason::ClientGone),
        ] {
            let j = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Status>(&j).unwrap(), s, "{j}");
        }
    }
}
