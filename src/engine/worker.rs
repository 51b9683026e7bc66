//! The worker: the child process that runs the jobs (the original's `--fork-subcommand`
//! isolation, made the default). It runs [`super::executor`] and reports to its supervisor on the
//! events pipe ([`run`]). It is started by the supervisor in one of two ways: re-executed with the
//! hidden first argument [`WORKER_ARG`] ([`main`] rebuilds the plan from the same
//! command line in the same launch directory), or — from the command line, whose process is
//! single-threaded when it starts the worker — forked, calling [`run`] with the plan it has, or
//! — in the daemon — forked by its fork server, calling [`run`] with the plan the daemon sent
//! ([`super::handoff`]).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use super::events::Event;
use super::executor::{Executor, Halt};
use super::log::Console;
use super::session::{job_timeout, open_log};
use crate::cli::{self, level, Command};
use crate::error::EXIT_COMPILE_FAILED;
use crate::plan::{self, Plan, SystemProbe};
use crate::result::{Environment, Failure, Status};
use crate::run::events::EventWriter;
use crate::run::process::Cancel;
use crate::toolchain::{self, Request, Toolchain};

/// The hidden first argument that makes the binary a worker.
pub const WORKER_ARG: &str = "__nxcc_worker";
/// Environment of the worker: the compile's argv (JSON).
pub const WORKER_ARGV_ENV: &str = "NXCC_WORKER_ARGV";
/// Environment of the worker: its work dir.
pub const WORKER_WORK_DIR_ENV: &str = "NXCC_WORKER_WORK_DIR";

/// The worker's exit status when it stopped because it was cancelled without a signal of its
/// own; a signal it received itself makes it exit with 128 + that signal, which the supervisor
/// reports by name.
pub const EXIT_CANCELLED: i32 = 75;

/// Report a worker that cannot run at all (an error line, then `Done` with exit 70 and the
/// failure).
pub(super) fn fatal(events: Option<&EventWriter>, failure: Failure, message: &str) -> i32 {
    eprintln!("{message}");
    if let Some(ev) = events {
        ev.send(&Event::Error {
            line: message.to_string(),
        });
        ev.send(&Event::Done {
            exit_status: EXIT_COMPILE_FAILED,
            status: Some(Status::Failed(failure)),
        });
    }
    EXIT_COMPILE_FAILED
}

/// Run as the re-executed worker; returns the exit status.
pub fn main() -> i32 {
    let events = EventWriter::from_env();
    let argv: Vec<String> =
        match std::env::var(WORKER_ARGV_ENV)
            .ok()
            .and_then(|a| serde_json::from_str(&a).ok())
        {
            Some(a) => a,
            None => return fatal(
                events.as_ref(),
                Failure::Internal,
                "[ERROR] nxcc worker: started without a command line (it is run by nxcc compile)",
            ),
        };
    let Some(work_dir) = std::env::var_os(WORKER_WORK_DIR_ENV).map(PathBuf::from) else {
        return fatal(
            events.as_ref(),
            Failure::Internal,
            "[ERROR] nxcc worker: started without a work directory",
        );
    };
    let args = match cli::parse("nxcc", &argv) {
        Ok(Command::Compile(a)) => a,
        _ => {
            return fatal(
                events.as_ref(),
                Failure::Internal,
                "[ERROR] nxcc worker: the command line is not a compile",
            )
        }
    };
    let probe = match SystemProbe::new() {
        Ok(p) => p,
        Err(e) => {
            return fatal(
                events.as_ref(),
                Failure::Internal,
                &format!("[ERROR] nxcc worker: {e}"),
            )
        }
    };
    let plan = match plan::build(&args, &probe) {
        Ok(p) => p,
        Err(plan::PlanError::Compile(e)) => {
            return fatal(events.as_ref(), Failure::Internal, &e.to_string())
        }
        Err(plan::PlanError::Usage(u)) => {
            return fatal(events.as_ref(), Failure::Usage, u.render().trim_end())
        }
    };
    let toolchain = match &plan.toolchain_request {
        Request::Auto => None,
        other => toolchain::locate(other),
    };
    run(&plan, toolchain.as_ref(), &work_dir, events.as_ref())
}

/// The worker's work, once it has its plan, toolchain and work dir: run the jobs, end whatever
/// the tools left behind, report `Done`; returns the exit status.
pub fn run(
    plan: &Plan,
    toolchain: Option<&Toolchain>,
    work_dir: &Path,
    events: Option<&EventWriter>,
) -> i32 {
    // Orphans of the tools (a background process a tool left, even in a new session) come back
    // to the worker, which ends them before it exits.
    let _ = crate::run::supervisor::become_subreaper();
    // A crash signal sent to the worker ends it at once, as it would any process: the runtime's
    // stack-overflow handler would otherwise swallow the first one. The supervisor reports it.
    // SAFETY: restoring the default disposition of two signals; no handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGSEGV, libc::SIG_DFL);
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
    let cancel = Cancel::new();
    let signals = crate::run::signals::install().ok();
    if let Some(s) = &signals {
        let c = cancel.clone();
        s.on_signal(move |_| c.cancel());
    }
    let console_level = plan.ns.int("verbose").unwrap_or(level::USER);
    let logger = match open_log(plan, Console::Terminal) {
        Ok(l) => l,
        Err(e) => {
            return fatal(
                events,
                Failure::Environment(Environment::LogFile),
                &e.to_string(),
            )
        }
    };
    let executor = Executor {
        plan,
        toolchain,
        work_dir,
        logger: &logger,
        events,
        cancel: &cancel,
        job_timeout: job_timeout(plan),
        // Dots (`--verbose 35`) or a live status line on a terminal; nothing to draw otherwise.
        progress: console_level == level::DOTS || std::io::stderr().is_terminal(),
    };
    let (_metrics, result) = executor.run();
    for _ in 0..50 {
        if !crate::run::supervisor::children_left() {
            break;
        }
        crate::run::supervisor::kill_children();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (exit_status, status) = match result {
        Ok(()) => (0, Status::Succeeded),
        Err(Halt::Failed(f)) => (EXIT_COMPILE_FAILED, Status::Failed(f)),
        Err(Halt::Cancelled) => match signals.as_ref().and_then(|s| s.received()) {
            Some(sig) => (128 + sig, Status::Interrupted(sig)),
            None => (
                EXIT_CANCELLED,
                Status::Cancelled(crate::result::CancelReason::Stopped),
            ),
        },
    };
    if let Some(ev) = events {
        ev.send(&Event::Done {
            exit_status,
            status: Some(status),
        });
    }
    exit_status
}
