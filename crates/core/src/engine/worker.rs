//! The worker: the child process that runs the jobs (the original's `--fork-subcommand`
//! isolation, made the default). It runs `super::executor` and reports to its supervisor on the
//! events pipe ([`run`]). However it was started — forked from the command line, forked by the
//! daemon's fork server, or this binary executed with the hidden first argument [`WORKER_ARG`]
//! — it runs the plan its supervisor handed it ([`super::handoff`]), never one of its own.

use std::io::IsTerminal;
use std::path::Path;

use super::events::Event;
use super::executor::{Executor, Halt};
use super::log::Console;
use super::session::open_log;
use crate::error::EXIT_COMPILE_FAILED;
use crate::plan::Invocation;
use crate::result::{Environment, Failure, Status};
use crate::run::events::EventWriter;
use crate::run::process::Cancel;
use crate::toolchain::Toolchain;

/// The hidden first argument that makes the binary a worker.
pub const WORKER_ARG: &str = "__nxcc_worker";

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

/// The worker's work, once it has its plan, toolchain and work dir: run the jobs, end whatever
/// the tools left behind, report `Done`; returns the exit status.
pub fn run(
    inv: &Invocation,
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
    let logger = match open_log(inv, Console::Terminal) {
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
        invocation: inv,
        toolchain,
        work_dir,
        logger: &logger,
        events,
        cancel: &cancel,
        job_timeout: inv.settings.job_timeout(),
        // Dots (`--verbose 35`) or a live status line on a terminal; nothing to draw otherwise.
        progress: inv.settings.log.dots() || std::io::stderr().is_terminal(),
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
