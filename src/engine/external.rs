//! The external-compiler engine (07): the compile runs as ONE supervised job
//! `PATH compile <args> --output <partial>` ([`crate::run::process::run`]: its own process group,
//! `--job-timeout`, cancellation, `wait4` figures), in the launch directory, instead of nxcc's own
//! pipeline. The output is written to a temporary name beside `--output` and renamed into place
//! only when the compiler succeeded (the last `--output` wins in the compiler's argparse).
//!
//! Reporting is nxcc's: a non-zero exit is `Child process job "ExternalCompiler" exited
//! abnormally!` with the stderr tail; a signal (or the shell-style status 128 + signal) adds the
//! F-code banner (`[F137]` and the memory line for SIGKILL); a timeout is `Job ExternalCompiler
//! timed out after N s`. The figures are one pseudo-job, [`JOB_NAME`], with the process's peak
//! RSS. The compiler's stdout and stderr lines go to the console as they come and to the log file
//! at INFO under `job.ExternalCompiler.0`.

use std::path::Path;

use super::compile::{job_timeout, open_log, stopped, CompileResult, Options};
use super::ExternalCompiler;
use crate::cli::level;
use crate::engine::events::Event;
use crate::engine::failure;
use crate::engine::log::{self, Console, Logger};
use crate::engine::metrics::{self, JobMetrics, JobStatus};
use crate::error::{NccError, EXIT_COMPILE_FAILED};
use crate::plan::Plan;
use crate::result::{Environment, Failure, Status};
use crate::run::process::{self, End, Spec, Stream, Termination};

/// The pseudo-job's name in metrics, events and error lines.
pub const JOB_NAME: &str = "ExternalCompiler";

/// Run `plan` through the external compiler.
pub fn run(plan: &Plan, opts: &Options, ext: &ExternalCompiler) -> CompileResult {
    run_producing(plan, opts, ext, None)
}

/// [`run`], the compiler's output also copied to `product` (a new file in a directory private
/// to the caller) from its temporary name, before that is renamed to `--output`.
pub fn run_producing(
    plan: &Plan,
    opts: &Options,
    ext: &ExternalCompiler,
    product: Option<&Path>,
) -> CompileResult {
    let ns = &plan.ns;
    let console_level = ns.int("verbose").unwrap_or(level::USER);
    let file_level = ns.int("logfile_verbose").unwrap_or(level::INFO);
    let emit = |ev: Event| {
        if let Some(f) = opts.on_event {
            f(&ev);
        }
    };
    let fail = |logger: Option<&Logger>, e: NccError, failure: Failure| {
        let line = e.to_string();
        match (logger, &opts.console) {
            (Some(l), _) => l.error(log::DRIVER, &line),
            (None, Console::Terminal) => eprintln!("{line}"),
            (None, Console::Sink(s)) => s(&line, true),
        }
        emit(Event::Error { line: line.clone() });
        emit(Event::Done {
            exit_status: EXIT_COMPILE_FAILED,
            status: None,
        });
        CompileResult::failed(failure, vec![line])
    };
    let logger = match open_log(plan, opts.console.clone()) {
        Ok(l) => l,
        Err(e) => return fail(None, e, Failure::Environment(Environment::LogFile)),
    };
    // The compiler's own lines: the log file only (the console gets them raw, below).
    let file_log = Logger::open(
        Some(&plan.logfile),
        file_level,
        level::OFF,
        Console::Terminal,
    )
    .unwrap_or_else(|_| logger.clone());
    let program = super::resolve_program(&ext.program);
    let name = plan
        .output
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file.neff");
    let partial = plan
        .output
        .with_file_name(crate::fsx::unique::name(&format!(
            ".{name}.nxcc-partial-ext-"
        )));
    let mut args: Vec<String> = vec!["compile".into()];
    args.extend(plan.argv.iter().cloned());
    args.push("--output".into());
    args.push(partial.display().to_string());
    let job_logger = log::job_logger(JOB_NAME);
    logger.info(
        log::DRIVER,
        &format!("Command line: {}", crate::shell::join(&plan.argv)),
    );
    let mut shown = vec![program.display().to_string()];
    shown.extend(args.iter().cloned());
    logger.info(
        &job_logger,
        &format!("Executing {}", crate::shell::join(&shown)),
    );
    logger.info(
        &job_logger,
        &format!("Working directory is {}", plan.launch_dir.display()),
    );
    let timeout = job_timeout(plan);
    let mut spec = Spec::new(&program, &plan.launch_dir)
        .args(args.iter())
        .timeout(timeout);
    for (k, v) in &opts.worker_env {
        spec = spec.env(k.clone(), v.clone());
    }
    emit(Event::Pipeline {
        jobs: vec![JOB_NAME.to_string()],
    });
    emit(Event::JobStarted {
        job: JOB_NAME.to_string(),
        index: 1,
        total: 1,
    });
    let console = opts.console.clone();
    let quiet = console_level >= level::OFF;
    let mut on_line = |stream: Stream, line: &str| {
        file_log.info(&job_logger, line);
        if quiet {
            return;
        }
        let is_err = stream == Stream::Stderr;
        match &console {
            Console::Sink(s) => s(line, is_err),
            Console::Terminal => write_line(is_err, line),
        }
    };
    let run = process::run(&spec, &mut on_line, opts.cancel.flag());
    let out = match run {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            let not_found = matches!(e, process::SpawnError::ProgramNotFound { .. });
            let failure = Failure::Environment(if not_found {
                Environment::MissingTool(program.display().to_string())
            } else {
                Environment::Spawn
            });
            return fail(
                Some(&logger),
                NccError::compiler_not_run(not_found, e),
                failure,
            );
        }
    };
    let termination = out.termination();
    let mut m = JobMetrics {
        job: JOB_NAME.to_string(),
        status: failure::job_status(out.end),
        start_s: 0.0,
        wall_s: out.wall.as_secs_f64(),
        user_s: out.user.as_secs_f64(),
        sys_s: out.sys.as_secs_f64(),
        max_rss_kb: out.max_rss_kb,
        exit_status: match termination {
            Termination::Exited(c) => Some(c),
            Termination::Signaled(_) => None,
        },
        signal: termination.signal(),
        processes: 1,
    };
    let mut errors: Vec<String> = Vec::new();
    let mut error = |line: String| {
        logger.error(&job_logger, &line);
        emit(Event::Error { line: line.clone() });
        errors.push(line);
    };
    let status = match (stopped(opts, out.end), out.end) {
        (Some(status), _) => {
            m.status = JobStatus::Cancelled;
            // Reported as the signal's end (SIGTERM when it was cancelled without one).
            let sig = match status {
                Status::Interrupted(sig) => sig,
                _ => libc::SIGTERM,
            };
            error(failure::interrupted(sig));
            status
        }
        (None, End::Exited(0)) => match copy_product(&partial, product, &logger)
            .and_then(|()| std::fs::rename(&partial, &plan.output))
        {
            Ok(()) => Status::Succeeded,
            Err(e) => {
                m.status = JobStatus::Failed;
                error(
                    NccError::compiler_output(partial.display(), plan.output.display(), e)
                        .to_string(),
                );
                Status::Failed(Failure::Environment(Environment::Output))
            }
        },
        (None, end) => {
            for line in failure::job_lines(JOB_NAME, end, &out.stderr_tail, out.max_rss_kb, timeout)
            {
                error(line);
            }
            Status::Failed(
                crate::recon::failure::of_tool(
                    JOB_NAME,
                    end,
                    &out.stderr_tail,
                    out.max_rss_kb,
                    timeout,
                )
                .unwrap_or(Failure::Internal),
            )
        }
    };
    let exit_status = status.exit_status();
    let _ = std::fs::remove_file(&partial);
    emit(Event::JobFinished(m.clone()));
    if exit_status != 0 {
        logger.user(&format!(
            "Diagnostic logs stored in {}",
            plan.logfile.display()
        ));
    }
    logger.file_only(&metrics::table(std::slice::from_ref(&m)));
    emit(Event::Done {
        exit_status,
        status: None,
    });
    let mut result = CompileResult::new(status, errors, vec![m]);
    result.worker_pid = Some(out.pid);
    result
}

/// Copy the compiler's output to `product`, if asked (an error there is a warning: the compile
/// stands without the cache).
fn copy_product(partial: &Path, product: Option<&Path>, logger: &Logger) -> std::io::Result<()> {
    let Some(product) = product else {
        return Ok(());
    };
    let copied = std::fs::File::open(partial).and_then(|mut src| {
        let mut dst = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(product)?;
        std::io::copy(&mut src, &mut dst)
    });
    if let Err(e) = copied {
        let _ = std::fs::remove_file(product);
        logger.info(
            log::DRIVER,
            &format!("Could not keep a copy of the NEFF for the cache: {e}"),
        );
    }
    Ok(())
}

/// A line on this process's stderr or stdout (a closed pipe is ignored).
fn write_line(to_stderr: bool, line: &str) {
    use std::io::Write;
    let text = format!("{line}\n");
    if to_stderr {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    } else {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
    }
}
