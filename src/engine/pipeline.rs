//! `runPipeline`: one compile, end to end, as the supervising process runs it (04-run.md).
//!
//! It prepares the work dir and the log, makes sure the toolchain is there, runs the plan in a
//! worker (see [`crate::run::supervisor`]; the worker runs [`super::executor`]), then reports: `Compiler
//! status PASS`, or the failure with `Artifacts stored in` and `Diagnostic logs stored in`; the
//! F-code banner when the worker itself was killed; exit 130/143 after an interrupt. It removes
//! an output the failed compile wrote, removes or keeps the work dir, and writes the metrics (the log's table,
//! `--submit-metrics`, `--timings`, `--trace`).

use std::path::Path;

use super::events::Event;
use super::failure;
use super::log::{self, Console, Logger};
use super::metrics::{self, JobMetrics};
use super::timeline::{self, Span};
use super::workdir;
use crate::error::NccError;
use crate::plan::Plan;
use crate::result::{Environment, Failure, Status};
use crate::run::process::End;
use crate::run::supervisor::{self, Output, Start, WorkerSpec};
use crate::toolchain::Request;

pub use super::compile::{
    job_timeout, open_log, CompileResult, Options, WORKER_ARG, WORKER_ARGV_ENV, WORKER_WORK_DIR_ENV,
};

fn fail_early(
    logger: Option<&Logger>,
    e: &NccError,
    console: &Console,
    failure: Failure,
) -> CompileResult {
    let line = e.to_string();
    match (logger, console) {
        (Some(l), _) => l.error(log::DRIVER, &line),
        (None, Console::Terminal) => eprintln!("{line}"),
        (None, Console::Sink(s)) => s(&line, true),
    }
    CompileResult::failed(failure, vec![line])
}

/// Run a compile for a plan (not a dry run). Returns how it ended and what was reported.
pub fn run_pipeline(plan: &Plan, opts: &Options) -> CompileResult {
    run_pipeline_producing(plan, opts, None)
}

/// [`run_pipeline`], the worker also writing the NEFF to `product`, a new file in a directory
/// private to the caller (the compile cache's temporary entry; see
/// [`crate::jobs::kelper::PRODUCT_ENV`]).
pub fn run_pipeline_producing(
    plan: &Plan,
    opts: &Options,
    product: Option<&Path>,
) -> CompileResult {
    let ns = &plan.ns;
    let logger = match open_log(plan, opts.console.clone()) {
        Ok(l) => l,
        Err(err) => {
            return fail_early(
                None,
                &err,
                &opts.console,
                Failure::Environment(Environment::LogFile),
            )
        }
    };
    for w in &plan.warnings {
        if plan.no_neff.as_ref() == Some(w) {
            logger.warning_shown(log::DRIVER, w);
        } else {
            logger.warning(log::DRIVER, w);
        }
    }
    for m in &plan.user_messages {
        logger.user(m);
    }
    logger.info(
        log::DRIVER,
        &format!("Command line: {}", crate::shell::join(&plan.argv)),
    );

    let mut worker_env = opts.worker_env.clone();
    // The toolchain, resolved once: handed to a forked worker, or named to a re-executed one.
    let toolchain = match &plan.toolchain_request {
        Request::Simulated => match crate::toolchain::simulator()
            .ok_or_else(crate::toolchain::no_simulator)
            .and_then(|s| s.ensure_default())
        {
            Ok(t) => Some(t),
            Err(e) => {
                let err = NccError::simulated_toolchain(&e);
                return fail_early(
                    Some(&logger),
                    &err,
                    &opts.console,
                    Failure::Environment(Environment::MissingTool(e.to_string())),
                );
            }
        },
        Request::Auto => crate::toolchain::probe_python_package().map(|bin| {
            logger.info(
                log::DRIVER,
                &format!(
                    "Using the toolchain of the installed neuronxcc package: {}",
                    bin.display()
                ),
            );
            worker_env.push((
                crate::recon::toolchain::TOOLCHAIN_ENV.to_string(),
                bin.display().to_string(),
            ));
            crate::toolchain::Toolchain {
                bin,
                simulated: false,
            }
        }),
        Request::Dir(_) => plan.toolchain.clone(),
    };
    // What can be checked is checked before anything is created: every tool the plan runs is
    // in the toolchain, and --output can be written.
    if let Some((_, tool)) = plan
        .missing_tools
        .iter()
        .find(|(_, tool)| toolchain.as_ref().and_then(|t| t.resolve(tool)).is_none())
    {
        return fail_early(
            Some(&logger),
            &NccError::tool_not_found(tool),
            &opts.console,
            Failure::Environment(Environment::MissingTool(tool.to_string())),
        );
    }
    if let Err(e) = check_output(&plan.output) {
        return fail_early(
            Some(&logger),
            &e,
            &opts.console,
            Failure::Environment(Environment::Output),
        );
    }

    let work = match workdir::prepare(&plan.launch_dir, ns.str("temp_dir")) {
        Ok(w) => w,
        Err(e) => {
            return fail_early(
                Some(&logger),
                &e,
                &opts.console,
                Failure::Environment(Environment::WorkDir),
            )
        }
    };
    logger.info(
        log::DRIVER,
        &format!(
            "Intermediate files stored in {}, output in {}",
            work.path.display(),
            plan.output.display()
        ),
    );

    // What is at the outputs now, so a failed compile removes only what it wrote itself.
    let outputs = [
        plan.output.clone(),
        crate::jobs::neff_wrapper::wrapped_path(&plan.output),
    ];
    let before: Vec<Option<(u64, u64)>> = outputs.iter().map(|p| file_identity(p)).collect();
    let mut argv = vec!["compile".to_string()];
    argv.extend(plan.argv.iter().cloned());
    worker_env.push((
        WORKER_ARGV_ENV.to_string(),
        serde_json::to_string(&argv).unwrap_or_default(),
    ));
    worker_env.push((
        WORKER_WORK_DIR_ENV.to_string(),
        work.path.display().to_string(),
    ));
    if let Some(p) = product {
        worker_env.push((
            crate::jobs::kelper::PRODUCT_ENV.to_string(),
            p.display().to_string(),
        ));
    }

    let program = match opts
        .worker_program
        .clone()
        .map(Ok)
        .unwrap_or_else(std::env::current_exe)
    {
        Ok(p) => p,
        Err(e) => {
            return fail_early(
                Some(&logger),
                &NccError::internal(format!("Cannot find nxcc's own executable: {e}")),
                &opts.console,
                Failure::Internal,
            )
        }
    };
    let sink = match &opts.console {
        Console::Sink(s) => Some(s.clone()),
        Console::Terminal => None,
    };
    let forward = |line: &str, is_err: bool| {
        if let Some(s) = &sink {
            s(line, is_err)
        }
    };
    // From the command line (one compile, this process still single-threaded) the worker is
    // forked and handed the plan; otherwise this binary is re-executed as the worker.
    let forked_env = worker_env.clone();
    let body = |events: crate::run::events::EventWriter| {
        for (k, v) in &forked_env {
            // The child is single-threaded: setting its environment (inherited by the tools)
            // races with nothing.
            std::env::set_var(k, v);
        }
        super::worker::run(plan, toolchain.as_ref(), &work.path, Some(&events))
    };
    let fork = opts.sole_compile
        && sink.is_none()
        && opts.worker_program.is_none()
        && supervisor::single_threaded();
    // A process with threads that has a fork server (the daemon) hands it the plan.
    let launcher = match &opts.fork_server {
        Some(server) if !fork && opts.worker_program.is_none() => Some(server.launcher(
            super::handoff::payload(plan, toolchain.as_ref(), &work.path, &worker_env),
        )),
        _ => None,
    };
    let exec = || Start::Exec {
        program: program.clone(),
        args: vec![WORKER_ARG.to_string()],
        env: forked_env.clone(),
    };
    let start = match (&launcher, fork) {
        (_, true) => Start::Fork(&body),
        (Some(l), false) => Start::Launch(l),
        (None, false) => exec(),
    };
    let output = || {
        if sink.is_some() {
            Output::Lines(&forward)
        } else {
            Output::Inherit
        }
    };
    let spec = WorkerSpec {
        start,
        cwd: &plan.launch_dir,
        output: output(),
        sole_child: opts.sole_compile,
    };
    // nxcc's own signal handling starts once the worker exists (a forked worker must not inherit
    // its thread): a signal then cancels the compile.
    let mut on_started = || {
        if opts.install_signals {
            if let Ok(s) = crate::run::signals::install() {
                let cancel = opts.cancel.clone();
                s.on_signal(move |sig| cancel.interrupt(sig));
            }
        }
    };
    let mut jobs: Vec<JobMetrics> = Vec::new();
    let mut error_lines: Vec<String> = Vec::new();
    let mut reported: Option<Status> = None;
    let mut on_event = |line: &str| {
        let Some(ev) = super::events::parse(line) else {
            return;
        };
        if let Some(f) = opts.on_event {
            f(&ev);
        }
        match ev {
            Event::JobFinished(m) => jobs.push(m),
            Event::Error { line } => error_lines.push(line),
            Event::Done { status, .. } => reported = status,
            _ => {}
        }
    };
    let mut ran = supervisor::run(&spec, opts.cancel.flag(), &mut on_started, &mut on_event);
    if let (Err(e), Start::Launch(_)) = (&ran, &spec.start) {
        // The fork server could not start the worker: re-execute this binary as the worker.
        logger.info(
            log::DRIVER,
            &format!("The fork server did not start the worker ({e}); re-executing nxcc"),
        );
        let spec = WorkerSpec {
            start: exec(),
            cwd: &plan.launch_dir,
            output: output(),
            sole_child: opts.sole_compile,
        };
        ran = supervisor::run(&spec, opts.cancel.flag(), &mut on_started, &mut on_event);
    }
    let outcome = match ran {
        Ok(o) => o,
        Err(e) => {
            let err = NccError::internal(e);
            return fail_early(
                Some(&logger),
                &err,
                &opts.console,
                Failure::Environment(Environment::Spawn),
            );
        }
    };

    let stopped = super::compile::stopped(opts, outcome.end);
    let peak_rss_kb = outcome.max_rss_kb;
    let mut error = |line: String| {
        logger.error(log::DRIVER, &line);
        error_lines.push(line);
    };
    let status = match (stopped, outcome.end) {
        (Some(status), _) => status,
        (None, _) if outcome.lost.is_some() => {
            error(failure::worker_lost(
                outcome.lost.as_deref().unwrap_or_default(),
            ));
            Status::Failed(Failure::WorkerLost {
                signal: None,
                peak_rss_kb,
            })
        }
        (None, End::Exited(0)) => Status::Succeeded,
        (None, End::Signaled(sig)) => {
            for line in failure::banner_lines(sig, peak_rss_kb) {
                error(line);
            }
            Status::Failed(match sig {
                libc::SIGKILL => Failure::OutOfMemory {
                    job: None,
                    peak_rss_kb,
                },
                sig => Failure::WorkerLost {
                    signal: Some(sig),
                    peak_rss_kb,
                },
            })
        }
        // The worker stopped on a signal sent to it (not to nxcc): say which.
        (None, End::Exited(code)) if (129..160).contains(&code) => {
            error(failure::worker_interrupted(code - 128, outcome.pid));
            Status::Failed(Failure::WorkerLost {
                signal: Some(code - 128),
                peak_rss_kb,
            })
        }
        // The worker said what failed.
        (None, _) => match reported {
            Some(Status::Failed(f)) => Status::Failed(f),
            _ => Status::Failed(Failure::Internal),
        },
    };
    let exit_status = status.exit_status();

    if exit_status != 0 {
        for (path, was) in outputs.iter().zip(&before) {
            let now = file_identity(path);
            if now.is_some() && now != *was {
                match std::fs::remove_file(path) {
                    Ok(()) => logger.info(
                        log::DRIVER,
                        &format!("Removed {} written by the failed compile", path.display()),
                    ),
                    Err(e) => logger.warning(
                        log::DRIVER,
                        &format!("Could not remove {}: {e}", path.display()),
                    ),
                }
            }
        }
    }
    // Without a NEFF, the work dir holds all the compile produced: it is kept.
    let keep = !work.generated
        || ns.bool("keep_work_dir")
        || plan.pipeline.contains(&"SaveTemps")
        || plan.no_neff.is_some()
        || exit_status != 0;
    write_metrics(plan, &logger, &jobs, exit_status);
    logger.info(
        log::DRIVER,
        &format!("nxcc supervisor peak RSS {} KB", metrics::own_peak_rss_kb()),
    );
    if exit_status == 0 {
        if !keep {
            if let Err(e) = work.remove() {
                logger.warning(
                    log::DRIVER,
                    &format!(
                        "Could not remove the work directory {}: {e}",
                        work.path.display()
                    ),
                );
            }
        }
        logger.user("Compiler status PASS");
        if plan.no_neff.is_some() {
            logger.user(&format!(
                "No NEFF was written to {}; the compile's artifacts are in {}",
                plan.output.display(),
                work.path.display()
            ));
        }
    } else {
        if let Status::Interrupted(sig) = status {
            logger.error(log::DRIVER, &failure::interrupted(sig));
        }
        logger.user(&format!("Artifacts stored in: {}", work.path.display()));
        logger.user(&format!(
            "Diagnostic logs stored in {}",
            plan.logfile.display()
        ));
    }
    let mut result = CompileResult::new(status, error_lines, jobs);
    result.work_dir = Some(work.path.clone());
    result.kept = keep;
    result.worker_pid = Some(outcome.pid);
    result
}

/// The per-job table (log), `--submit-metrics`, `--timings` and `--trace`.
fn write_metrics(plan: &Plan, logger: &Logger, jobs: &[JobMetrics], exit_status: i32) {
    logger.file_only(&metrics::table(jobs));
    let ns = &plan.ns;
    if ns.bool("submit_metrics") {
        let run_id = ns
            .str("run_id")
            .map(str::to_string)
            .unwrap_or_else(metrics::generated_run_id);
        let stamp = ns
            .str("metrics_timestamp")
            .map(str::to_string)
            .unwrap_or_else(log::now);
        let record = metrics::Record {
            run_id: &run_id,
            metrics_timestamp: &stamp,
            target: plan.target(),
            optlevel: plan.optlevel(),
            logical_nc_config: plan.logical_nc_config(),
            exit_status,
            jobs,
        };
        if let Err(e) = metrics::submit(&plan.launch_dir, &record) {
            logger.warning(log::DRIVER, &format!("Could not submit metrics: {e}"));
        }
    }
    let spans: Vec<Span> = jobs
        .iter()
        .map(|j| Span {
            lane: "compile".to_string(),
            label: j.job.clone(),
            start_s: j.start_s,
            end_s: j.start_s + j.wall_s,
            status: serde_json::to_value(j.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            details: vec![
                ("user s".into(), format!("{:.3}", j.user_s)),
                ("sys s".into(), format!("{:.3}", j.sys_s)),
                ("peak RSS KB".into(), j.max_rss_kb.to_string()),
                ("processes".into(), j.processes.to_string()),
                (
                    "exit status".into(),
                    j.exit_status.map(|c| c.to_string()).unwrap_or_default(),
                ),
                (
                    "signal".into(),
                    j.signal
                        .map(crate::run::signals::signal_text)
                        .unwrap_or_default(),
                ),
            ],
        })
        .collect();
    let title = format!(
        "nxcc compile {}",
        plan.model
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
    );
    if let Some(path) = ns.str("timings") {
        write_report(
            logger,
            &crate::plan::absolute(&plan.launch_dir, path),
            &timeline::html(&title, &spans),
            "timings",
        );
    }
    if let Some(path) = ns.str("trace") {
        write_report(
            logger,
            &crate::plan::absolute(&plan.launch_dir, path),
            &timeline::chrome_trace(&spans),
            "trace",
        );
    }
}

fn write_report(logger: &Logger, path: &Path, text: &str, what: &str) {
    let r = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| {
            crate::fsx::atomic::write_file(path, text.as_bytes(), crate::fsx::Durability::Visible)
        });
    match r {
        Ok(()) => logger.info(
            log::DRIVER,
            &format!("Wrote the {what} to {}", path.display()),
        ),
        Err(e) => {
            logger.warning(
                log::DRIVER,
                &format!("Could not write the {what} to {}: {e}", path.display()),
            );
        }
    }
}

/// `--output` can be written: it is not a directory, and what would be its directory is one.
fn check_output(output: &Path) -> Result<(), NccError> {
    if output.is_dir() {
        return Err(NccError::output_not_written(
            output.display(),
            "it is a directory",
        ));
    }
    let mut parent = output.parent();
    while let Some(dir) = parent {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(NccError::output_not_written(
                    output.display(),
                    format!("{} is not a directory", dir.display()),
                ))
            }
            Err(_) => parent = dir.parent(),
        }
    }
    Ok(())
}

/// A file's (device, inode) and modification time, to tell whether a compile replaced it.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((
        m.ino(),
        m.mtime_nsec() as u64 ^ (m.mtime() as u64).rotate_left(32),
    ))
}
