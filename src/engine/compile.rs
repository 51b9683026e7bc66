//! One compile as every engine takes and gives it: how to run it ([`Options`]), what happened
//! ([`Outcome`]), the log it opens, its job timeout, the signal that stopped it; and the hand-off
//! between a supervisor and the worker it re-executes (the worker's hidden argument and
//! environment).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::events::Event;
use super::log::{Console, Logger};
use super::metrics::JobMetrics;
use crate::cli::level;
use crate::error::NccError;
use crate::plan::Plan;
use crate::run::process::{Cancel, End};

/// The hidden first argument that makes the binary a worker.
pub const WORKER_ARG: &str = "__nxcc_worker";
/// Environment of the worker: the compile's argv (JSON).
pub const WORKER_ARGV_ENV: &str = "NXCC_WORKER_ARGV";
/// Environment of the worker: its work dir.
pub const WORKER_WORK_DIR_ENV: &str = "NXCC_WORKER_WORK_DIR";

/// How to run.
pub struct Options<'a> {
    /// Where console lines go.
    pub console: Console,
    /// Cancels the compile when set (the caller's signal handler, a daemon client gone).
    pub cancel: Cancel,
    /// The signal that cancelled the compile, set by the caller's handler (0: none).
    pub interrupted: Arc<AtomicI32>,
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
    /// line): a signal cancels the compile and sets `interrupted`.
    pub install_signals: bool,
    /// Start the worker through this fork server (the daemon's), handing it the plan, instead of
    /// re-executing this binary; the re-executed worker stays the fallback.
    pub fork_server: Option<std::sync::Arc<crate::forkserver::ForkServer>>,
    /// Where a generated work dir is made (`None`: the launch directory, as the original does;
    /// `parallel-compile` keeps a batch's work dirs in its output directory).
    pub work_root: Option<PathBuf>,
}

impl Options<'_> {
    /// Terminal console, no cancellation source yet.
    pub fn terminal() -> Options<'static> {
        Options {
            console: Console::Terminal,
            cancel: Cancel::new(),
            interrupted: Arc::new(AtomicI32::new(0)),
            worker_env: Vec::new(),
            on_event: None,
            worker_program: None,
            sole_compile: false,
            install_signals: false,
            fork_server: None,
            work_root: None,
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The compile's exit status (0: a NEFF was written).
    pub exit_status: i32,
    /// Every error line printed (for a daemon's answer, a cached failure).
    pub error_lines: Vec<String>,
    /// Each job's figures, in the order they ran.
    pub jobs: Vec<JobMetrics>,
    /// The compile's work dir (`None`: the compile failed before making one, or ran no jobs here).
    pub work_dir: Option<PathBuf>,
    /// The work dir was kept.
    pub kept: bool,
    /// The worker's pid (its lines in the shared log file carry it), if it ran.
    pub worker_pid: Option<u32>,
    /// This (supervising) process's pid, as its log lines carry it.
    pub supervisor_pid: u32,
}

/// The compile's log, as the plan says (`--logfile`, `--logfile-verbose`, `--verbose`), with
/// its console going to `console`; NCC_EDRV091 when the file cannot be opened.
pub fn open_log(plan: &Plan, console: Console) -> Result<Logger, NccError> {
    let console_level = plan.ns.int("verbose").unwrap_or(level::USER);
    let file_level = plan.ns.int("logfile_verbose").unwrap_or(level::INFO);
    Logger::open(Some(&plan.logfile), file_level, console_level, console)
        .map_err(|e| NccError::log_file(plan.logfile.display(), e))
}

/// The signal a compile was stopped by: the one the caller's handler recorded, else SIGTERM when
/// it was cancelled otherwise (its daemon client went away); `None` when it was not stopped.
pub(super) fn stopped_by(opts: &Options, end: End) -> Option<i32> {
    match opts.interrupted.load(Ordering::SeqCst) {
        0 => matches!(end, End::Cancelled(_)).then_some(libc::SIGTERM),
        sig => Some(sig),
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
