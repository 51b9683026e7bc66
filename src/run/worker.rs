//! The worker: the child process that runs the jobs (the original's `--fork-subcommand`
//! isolation, made the default). It rebuilds the plan from the same command line in the same
//! launch directory, then runs [`super::executor`] and reports to its supervisor on the events pipe.
//! It is started only by the supervisor, with the hidden first argument
//! [`super::pipeline::WORKER_ARG`].

use std::path::PathBuf;

use super::events::{Event, EventWriter};
use super::executor::{partial_output, Executor, Failure};
use super::log::{Console, Logger};
use super::pipeline::{job_timeout, WORKER_ARGV_ENV, WORKER_WORK_DIR_ENV};
use super::process::Cancel;
use crate::cli::{self, level, Command};
use crate::error::EXIT_COMPILE_FAILED;
use crate::plan::{self, SystemProbe};
use crate::toolchain::{self, Request};

/// The worker's exit status when it stopped because it was cancelled.
pub const EXIT_CANCELLED: i32 = 75;

fn fatal(events: Option<&EventWriter>, message: &str) -> i32 {
    eprintln!("{message}");
    if let Some(ev) = events {
        ev.send(&Event::Error {
            line: message.to_string(),
        });
        ev.send(&Event::Done {
            exit_status: EXIT_COMPILE_FAILED,
        });
    }
    EXIT_COMPILE_FAILED
}

/// Run as the worker; returns the exit status.
pub fn main() -> i32 {
    let events = EventWriter::from_env();
    // Orphans of the tools (a background process a tool left, even in a new session) come back
    // to the worker, which ends them before it exits.
    let _ = super::supervisor::become_subreaper();
    let cancel = Cancel::new();
    let signals = super::signals::install();
    if let Ok(s) = &signals {
        let c = cancel.clone();
        s.on_signal(move |_| c.cancel());
    }
    let argv: Vec<String> =
        match std::env::var(WORKER_ARGV_ENV)
            .ok()
            .and_then(|a| serde_json::from_str(&a).ok())
        {
            Some(a) => a,
            None => return fatal(
                events.as_ref(),
                "[ERROR] nxcc worker: started without a command line (it is run by nxcc compile)",
            ),
        };
    let Some(work_dir) = std::env::var_os(WORKER_WORK_DIR_ENV).map(PathBuf::from) else {
        return fatal(
            events.as_ref(),
            "[ERROR] nxcc worker: started without a work directory",
        );
    };
    let args = match cli::parse("nxcc", &argv) {
        Ok(Command::Compile(a)) => a,
        _ => {
            return fatal(
                events.as_ref(),
                "[ERROR] nxcc worker: the command line is not a compile",
            )
        }
    };
    let probe = match SystemProbe::new() {
        Ok(p) => p,
        Err(e) => return fatal(events.as_ref(), &format!("[ERROR] nxcc worker: {e}")),
    };
    let plan = match plan::build(&args, &probe) {
        Ok(p) => p,
        Err(plan::PlanError::Compile(e)) => return fatal(events.as_ref(), &e.to_string()),
        Err(plan::PlanError::Usage(u)) => return fatal(events.as_ref(), u.render().trim_end()),
    };
    let toolchain = match &plan.toolchain_request {
        Request::Auto => None,
        other => toolchain::locate(other),
    };
    let console_level = plan.ns.int("verbose").unwrap_or(level::USER);
    let file_level = plan.ns.int("logfile_verbose").unwrap_or(level::INFO);
    let logger = match Logger::open(
        Some(&plan.logfile),
        file_level,
        console_level,
        Console::Terminal,
    ) {
        Ok(l) => l,
        Err(e) => {
            return fatal(
                events.as_ref(),
                &format!(
                    "[ERROR] [NCC_EDRV091] Cannot open the log file {}: {e} - Check --logfile.",
                    plan.logfile.display()
                ),
            )
        }
    };
    let partial = partial_output(&plan.output, std::process::id());
    let executor = Executor {
        plan: &plan,
        toolchain: toolchain.as_ref(),
        work_dir: &work_dir,
        logger: &logger,
        events: events.as_ref(),
        cancel: &cancel,
        job_timeout: job_timeout(&plan),
        output_partial: &partial,
        progress: true,
    };
    let (_metrics, result) = executor.run();
    for _ in 0..50 {
        if !super::supervisor::children_left() {
            break;
        }
        super::supervisor::kill_children();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let status = match result {
        Ok(()) => 0,
        Err(Failure::Failed) => EXIT_COMPILE_FAILED,
        Err(Failure::Cancelled) => EXIT_CANCELLED,
    };
    if let Some(ev) = &events {
        ev.send(&Event::Done {
            exit_status: status,
        });
    }
    status
}
