//! One compile as every engine takes it: how to run it ([`Options`]), its [`Cancellation`], the
//! log it opens, its job timeout, how it was stopped; and the hand-off
//! between a supervisor and the worker it re-executes (the worker's hidden argument and
//! environment).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::events::Event;
use super::log::{Console, Logger};
use crate::cli::level;
use crate::error::NccError;
use crate::plan::Plan;
use crate::result::{CancelReason, Status};
use crate::run::process::{Cancel, End};

pub use super::result::CompileResult;

/// The hidden first argument that makes the binary a worker.
pub const WORKER_ARG: &str = "__nxcc_worker";
/// Environment of the worker: the compile's argv (JSON).
pub const WORKER_ARGV_ENV: &str = "NXCC_WORKER_ARGV";
/// Environment of the worker: its work dir.
pub const WORKER_WORK_DIR_ENV: &str = "NXCC_WORKER_WORK_DIR";

/// A compile's cancellation: the flag its runs watch, and why it was set — the signal nxcc
/// received, or a reason without one. Cheap to clone (every clone is the same cancellation).
#[derive(Debug, Clone, Default)]
pub struct Cancellation {
    flag: Cancel,
    why: Arc<Mutex<Option<Stop>>>,
}

/// Why a compile was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Signal(i32),
    Reason(CancelReason),
}

impl Cancellation {
    /// Not cancelled yet.
    pub fn new() -> Cancellation {
        Cancellation::default()
    }

    /// Stop the compile for `signal`, which it reports (exit 128 + the signal). The first reason
    /// given is kept.
    pub fn interrupt(&self, signal: i32) {
        self.stop(Stop::Signal(signal));
    }

    /// Stop the compile for `reason` (reported as SIGTERM's exit status).
    pub fn cancel(&self, reason: CancelReason) {
        self.stop(Stop::Reason(reason));
    }

    fn stop(&self, why: Stop) {
        self.why
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
        self.flag.cancel();
    }

    /// Whether the compile was stopped.
    pub fn is_cancelled(&self) -> bool {
        self.flag.is_cancelled()
    }

    /// The flag runs watch (a process, a wait for admission or a lock).
    pub fn flag(&self) -> &Cancel {
        &self.flag
    }

    /// The signal that stopped the compile, if a signal did.
    pub fn signal(&self) -> Option<i32> {
        match *self.why.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(Stop::Signal(sig)) => Some(sig),
            _ => None,
        }
    }

    /// The status of the compile it stopped: interrupted by its signal, or cancelled for its
    /// reason; `None` while it is not cancelled.
    pub fn status(&self) -> Option<Status> {
        if !self.is_cancelled() {
            return None;
        }
        Some(match *self.why.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(Stop::Signal(sig)) => Status::Interrupted(sig),
            Some(Stop::Reason(r)) => Status::Cancelled(r),
            // The flag was set by someone holding only the flag.
            None => Status::Cancelled(CancelReason::Stopped),
        })
    }
}

/// How to run.
pub struct Options<'a> {
    /// Where console lines go.
    pub console: Console,
    /// Cancels the compile (the caller's signal handler, a daemon client gone), and says why.
    pub cancel: Cancellation,
    /// Extra environment for the worker (and so for the tools).
    pub worker_env: Vec<(String, String)>,
    /// Called with every worker event (the daemon streams them).
    pub on_event: Option<&'a (dyn Fn(&Event) + Sync)>,
    /// The executable to re-run as the worker (default: this one).
    pub worker_program: Option<PathBuf>,
    /// This process runs this one compile and is a child subreaper
    /// ([`crate::run::supervisor::become_subreaper`]): leftovers are found without a `/proc` scan, and
    /// the worker may be forked rather than re-executed.
    pub sole_compile: bool,
    /// Install nxcc's SIGINT/SIGTERM/SIGHUP handling once the worker has started (the command
    /// line): a signal cancels the compile and says which.
    pub install_signals: bool,
    /// Start the worker through this fork server (the daemon's), handing it the plan, instead of
    /// re-executing this binary; the re-executed worker stays the fallback.
    pub fork_server: Option<std::sync::Arc<crate::forkserver::ForkServer>>,
}

impl Options<'_> {
    /// Terminal console, no cancellation source yet.
    pub fn terminal() -> Options<'static> {
        Options {
            console: Console::Terminal,
            cancel: Cancellation::new(),
            worker_env: Vec::new(),
            on_event: None,
            worker_program: None,
            sole_compile: false,
            install_signals: false,
            fork_server: None,
        }
    }
}

/// The compile's log, as the plan says (`--logfile`, `--logfile-verbose`, `--verbose`), with
/// its console going to `console`; NCC_EDRV091 when the file cannot be opened.
pub fn open_log(plan: &Plan, console: Console) -> Result<Logger, NccError> {
    let console_level = plan.ns.int("verbose").unwrap_or(level::USER);
    let file_level = plan.ns.int("logfile_verbose").unwrap_or(level::INFO);
    Logger::open(Some(&plan.logfile), file_level, console_level, console)
        .map_err(|e| NccError::log_file(plan.logfile.display(), e))
}

/// How a compile whose process ended as `end` was stopped: interrupted by the signal the
/// caller's handler recorded, or cancelled for its reason; `None` when it was not stopped.
pub(super) fn stopped(opts: &Options, end: End) -> Option<Status> {
    match opts.cancel.status() {
        Some(s) if opts.cancel.signal().is_some() || matches!(end, End::Cancelled(_)) => Some(s),
        _ => None,
    }
}

/// `--job-timeout` as a duration.
pub fn job_timeout(plan: &Plan) -> Option<Duration> {
    plan.ns
        .get("job_timeout")
        .as_float()
        .filter(|s| *s > 0.0 && s.is_finite())
        .map(Duration::from_secs_f64)
}
