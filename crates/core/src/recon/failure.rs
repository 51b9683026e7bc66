//! RECON rules: how the end of a job is read as a [`Failure`]. The original tells a user what
//! happened (its `[F137]`, `[F134]`, `[F139]` banners, the exit status and stderr tail); which of
//! those ends are the model's and which the machine's or the moment's is written down nowhere.
//! This file is the one place that decides it — for a tool's end ([`of_tool`]), for an error a
//! job run in the worker reports ([`of_job_error`]) — and the one place a compile's text is read:
//! the `strerror` words in a real tool's stderr ([`environment_in_stderr`]).

use std::time::Duration;

use crate::error::NccError;
use crate::job_name::JobName;
use crate::result::{Environment, Failure, IoCause, JobEnd};
use crate::run::process::End;

/// The C library's `strerror` texts (Rust's `io::Error` and Python's `OSError` print the same
/// words) of the errors a tool meets because of the machine, the moment or a path outside the
/// compile's inputs, with their class.
pub const ENVIRONMENT_ERRORS: &[(&str, IoCause)] = &[
    ("No space left on device", IoCause::DiskFull),
    ("Disk quota exceeded", IoCause::Quota),
    ("Input/output error", IoCause::Io),
    ("Stale file handle", IoCause::Io),
    ("Permission denied", IoCause::Permission),
    ("Operation not permitted", IoCause::Permission),
    ("Read-only file system", IoCause::Permission),
    ("Text file busy", IoCause::Permission),
    ("Cannot allocate memory", IoCause::Memory),
    ("Out of memory", IoCause::Memory),
    ("Too many open files", IoCause::Files),
    ("File too large", IoCause::TooLarge),
    ("Is a directory", IoCause::Path),
    ("Not a directory", IoCause::Path),
    ("File name too long", IoCause::Path),
    ("Too many levels of symbolic links", IoCause::Path),
];

/// The same errors by number, for nxcc's own I/O errors (which carry it).
pub const ENVIRONMENT_ERRNOS: &[(i32, IoCause)] = &[
    (libc::ENOSPC, IoCause::DiskFull),
    (libc::EDQUOT, IoCause::Quota),
    (libc::EIO, IoCause::Io),
    (libc::ESTALE, IoCause::Io),
    (libc::EACCES, IoCause::Permission),
    (libc::EPERM, IoCause::Permission),
    (libc::EROFS, IoCause::Permission),
    (libc::ETXTBSY, IoCause::Permission),
    (libc::ENOMEM, IoCause::Memory),
    (libc::EMFILE, IoCause::Files),
    (libc::ENFILE, IoCause::Files),
    (libc::EFBIG, IoCause::TooLarge),
    (libc::EISDIR, IoCause::Path),
    (libc::ENOTDIR, IoCause::Path),
    (libc::ENAMETOOLONG, IoCause::Path),
    (libc::ELOOP, IoCause::Path),
];

/// Signals that end a tool because of the moment, not of its input: terminated, interrupted,
/// hung up, a broken pipe, a CPU or file-size limit, an alarm. (SIGKILL, most often the
/// out-of-memory killer, is a failure of its own: [`Failure::OutOfMemory`].)
pub const ENVIRONMENT_SIGNALS: &[i32] = &[
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGPIPE,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGALRM,
];

/// The signal an exit status stands for when a tool reports a crash the shell way (134, 137,
/// 139).
pub(crate) fn signal_of_status(status: i32) -> Option<i32> {
    match status {
        134 => Some(libc::SIGABRT),
        137 => Some(libc::SIGKILL),
        139 => Some(libc::SIGSEGV),
        _ => None,
    }
}

/// The error of the environment a tool's stderr shows, if any: the one function that reads a
/// compile's text, and only a real tool's.
pub(crate) fn environment_in_stderr(lines: &[String]) -> Option<IoCause> {
    lines.iter().find_map(|l| {
        ENVIRONMENT_ERRORS
            .iter()
            .find(|(words, _)| l.contains(words))
            .map(|(_, cause)| *cause)
    })
}

/// The class of an operating-system error number, when it is one of the environment's.
pub(crate) fn io_cause(errno: i32) -> Option<IoCause> {
    ENVIRONMENT_ERRNOS
        .iter()
        .find(|(n, _)| *n == errno)
        .map(|(_, c)| *c)
}

/// How `job`, whose tool ended as `end` with this stderr tail, failed; `None` when it did not
/// (it exited 0, or it was cancelled: a cancellation is the compile's, not the job's).
///
/// - a timeout is [`Failure::Timeout`] (`timeout` is the limit it had);
/// - SIGKILL, or the shell's status 137, is [`Failure::OutOfMemory`];
/// - a stderr that shows an error of the environment ([`environment_in_stderr`]) is that error;
/// - a signal of the moment ([`ENVIRONMENT_SIGNALS`]) is [`Environment::Signal`];
/// - anything else is the job's own failure: [`JobEnd::Exited`] or [`JobEnd::Crashed`].
pub(crate) fn of_tool(
    job: JobName,
    end: End,
    stderr_tail: &[String],
    peak_rss_kb: u64,
    timeout: Option<Duration>,
) -> Option<Failure> {
    let by_itself = match end {
        End::Exited(0) | End::Cancelled(_) => return None,
        End::TimedOut(_) => {
            return Some(Failure::Timeout {
                job,
                seconds: timeout.unwrap_or_default().as_secs_f64(),
            })
        }
        End::Exited(code) if signal_of_status(code) == Some(libc::SIGKILL) => None,
        End::Signaled(libc::SIGKILL) => None,
        End::Exited(code) => Some(JobEnd::Exited(code)),
        End::Signaled(sig) => Some(JobEnd::Crashed(sig)),
    };
    let Some(how) = by_itself else {
        return Some(Failure::OutOfMemory {
            job: Some(job),
            peak_rss_kb,
        });
    };
    if let Some(cause) = environment_in_stderr(stderr_tail) {
        return Some(Failure::Environment(Environment::Io(cause)));
    }
    match how {
        JobEnd::Crashed(sig) if ENVIRONMENT_SIGNALS.contains(&sig) => {
            Some(Failure::Environment(Environment::Signal(sig)))
        }
        how => Some(Failure::Job {
            job: Some(job),
            end: how,
        }),
    }
}

/// How `job` failed when the worker, doing the job's work itself, reported `e`: a missing tool
/// or toolchain, an I/O error of the environment (by its number), nxcc failing at its own part,
/// or else the job's own error (the model's).
pub(crate) fn of_job_error(job: JobName, e: &NccError) -> Failure {
    if e.is_missing_tool() {
        return Failure::Environment(Environment::MissingTool(e.cause.clone()));
    }
    if let Some(cause) = e.os_error.and_then(io_cause) {
        return Failure::Environment(Environment::Io(cause));
    }
    if e.is_internal() {
        return Failure::Internal;
    }
    Failure::Job {
        job: Some(job),
        end: JobEnd::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_name::{Job, JobName};
    use crate::run::process::Termination;

    fn tool(end: End, tail: &[&str]) -> Option<Failure> {
        let tail: Vec<String> = tail.iter().map(|s| s.to_string()).collect();
        of_tool(
            JobName::Registry(Job::WalrusDriver),
            end,
            &tail,
            7,
            Some(Duration::from_secs(2)),
        )
    }

    fn job(end: JobEnd) -> Option<Failure> {
        Some(Failure::Job {
            job: Some(JobName::Registry(Job::WalrusDriver)),
            end,
        })
    }

    #[test]
    fn a_tools_end_is_read_as_a_failure() {
        assert_eq!(tool(End::Exited(0), &[]), None);
        assert_eq!(
            tool(End::Cancelled(Termination::Signaled(libc::SIGTERM)), &[]),
            None
        );
        assert_eq!(tool(End::Exited(3), &["bad graph"]), job(JobEnd::Exited(3)));
        assert_eq!(tool(End::Exited(134), &[]), job(JobEnd::Exited(134)));
        assert_eq!(
            tool(End::Signaled(libc::SIGSEGV), &[]),
            job(JobEnd::Crashed(libc::SIGSEGV))
        );
        for end in [End::Signaled(libc::SIGKILL), End::Exited(137)] {
            assert_eq!(
                tool(end, &[]),
                Some(Failure::OutOfMemory {
                    job: Some(JobName::Registry(Job::WalrusDriver)),
                    peak_rss_kb: 7
                })
            );
        }
        assert_eq!(
            tool(End::TimedOut(Termination::Signaled(libc::SIGTERM)), &[]),
            Some(Failure::Timeout {
                job: JobName::Registry(Job::WalrusDriver),
                seconds: 2.0
            })
        );
        for sig in [libc::SIGTERM, libc::SIGPIPE, libc::SIGXFSZ] {
            assert_eq!(
                tool(End::Signaled(sig), &[]),
                Some(Failure::Environment(Environment::Signal(sig)))
            );
        }
        assert_eq!(
            tool(
                End::Exited(1),
                &["OSError: [Errno 28] No space left on device"]
            ),
            Some(Failure::Environment(Environment::Io(IoCause::DiskFull)))
        );
        assert_eq!(
            tool(End::Exited(1), &["open(/out): Permission denied"]),
            Some(Failure::Environment(Environment::Io(IoCause::Permission)))
        );
    }

    #[test]
    fn a_jobs_own_error_is_read_by_its_kind() {
        let e = NccError::neff_pack("Kelper could not pack the NEFF: invalid JSON", "Check");
        assert_eq!(of_job_error(JobName::Registry(Job::Kelper), &e), {
            Failure::Job {
                job: Some(JobName::Registry(Job::Kelper)),
                end: JobEnd::Error,
            }
        });
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let e = NccError::neff_pack(format!("Kelper could not write /o: {full}"), "Check")
            .caused_by(&full);
        assert_eq!(
            of_job_error(JobName::Registry(Job::Kelper), &e),
            Failure::Environment(Environment::Io(IoCause::DiskFull))
        );
        // The words alone do not make it the environment's: only the error number does.
        let e = NccError::neff_pack("No space left on device", "Check");
        assert!(matches!(
            of_job_error(JobName::Registry(Job::Kelper), &e),
            Failure::Job { .. }
        ));
        assert!(matches!(
            of_job_error(
                JobName::Registry(Job::Frontend),
                &NccError::tool_not_found("a toolchain")
            ),
            Failure::Environment(Environment::MissingTool(_))
        ));
        assert_eq!(
            of_job_error(
                JobName::Registry(Job::Kelper),
                &NccError::internal("Could not write x")
            ),
            Failure::Internal
        );
    }
}
