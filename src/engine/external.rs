//! The external-compiler engine (spec 07-cache-parallel.md): the compile runs as ONE supervised
//! job `PATH compile <args>` ([`crate::run::process::run`]: its own process group,
//! `--job-timeout`, cancellation, `wait4` figures), in the launch directory, instead of nxcc's own
//! pipeline. The arguments are the compile's own, in their order, with `--output` naming the
//! output's own file name in a fresh directory beside it (a NEFF records its file name); the
//! output is renamed into place only when the compiler succeeded.
//!
//! Reporting is nxcc's: a non-zero exit is `Child process job "ExternalCompiler" exited
//! abnormally!` with the stderr tail; a signal (or the shell-style status 128 + signal) adds the
//! F-code banner (`[F137]` and the memory line for SIGKILL); a timeout is `Job ExternalCompiler
//! timed out after N s`. The figures are one pseudo-job, [`JOB_NAME`], with the process's peak
//! RSS. The compiler's stdout and stderr lines go to the console as they come and to the log file
//! at INFO under `job.ExternalCompiler.0`.

use std::path::Path;

use super::compile::{job_timeout, open_log, stopped_by, Options, Outcome};
use super::ExternalCompiler;
use crate::cli::level;
use crate::engine::events::Event;
use crate::engine::failure;
use crate::engine::log::{self, Console, Logger};
use crate::engine::metrics::{self, JobMetrics, JobStatus};
use crate::error::{NccError, EXIT_COMPILE_FAILED};
use crate::plan::Plan;
use crate::run::process::{self, End, Spec, Stream, Termination};

/// The pseudo-job's name in metrics, events and error lines.
pub const JOB_NAME: &str = "ExternalCompiler";

fn outcome(exit_status: i32, error_lines: Vec<String>, jobs: Vec<JobMetrics>) -> Outcome {
    Outcome {
        exit_status,
        error_lines,
        jobs,
        work_dir: None,
        kept: false,
        worker_pid: None,
        supervisor_pid: std::process::id(),
    }
}

/// Run `plan` through the external compiler.
pub fn run(plan: &Plan, opts: &Options, ext: &ExternalCompiler) -> Outcome {
    run_producing(plan, opts, ext, None)
}

/// [`run`], the compiler's output also copied to `product` (a new file in a directory private
/// to the caller) from its temporary name, before that is renamed to `--output`.
pub fn run_producing(
    plan: &Plan,
    opts: &Options,
    ext: &ExternalCompiler,
    product: Option<&Path>,
) -> Outcome {
    let ns = &plan.ns;
    let console_level = ns.int("verbose").unwrap_or(level::USER);
    let file_level = ns.int("logfile_verbose").unwrap_or(level::INFO);
    let emit = |ev: Event| {
        if let Some(f) = opts.on_event {
            f(&ev);
        }
    };
    let fail = |logger: Option<&Logger>, e: NccError| {
        let line = e.to_string();
        match (logger, &opts.console) {
            (Some(l), _) => l.error(log::DRIVER, &line),
            (None, Console::Terminal) => eprintln!("{line}"),
            (None, Console::Sink(s)) => s(&line, true),
        }
        emit(Event::Error { line: line.clone() });
        emit(Event::Done {
            exit_status: EXIT_COMPILE_FAILED,
        });
        outcome(EXIT_COMPILE_FAILED, vec![line], Vec::new())
    };
    let logger = match open_log(plan, opts.console.clone()) {
        Ok(l) => l,
        Err(e) => return fail(None, e),
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
    // The compiler writes its output under the output's own name (which a NEFF records) in a
    // fresh directory beside it; renamed into place only on success.
    let name = plan
        .output
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file.neff");
    let partial_dir = plan
        .output
        .with_file_name(crate::fsx::unique::name(&format!(
            ".{name}.nxcc-partial-ext-"
        )));
    if let Err(e) = std::fs::create_dir(&partial_dir) {
        let why = NccError::compiler_output(partial_dir.display(), plan.output.display(), e);
        return fail(Some(&logger), why);
    }
    let partial = partial_dir.join(name);
    let mut args: Vec<String> = vec!["compile".into()];
    args.extend(with_output(&plan.argv, &partial.display().to_string()));
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
    let run = process::run(&spec, &mut on_line, &opts.cancel);
    let out = match run {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial_dir);
            let not_found = matches!(e, process::SpawnError::ProgramNotFound { .. });
            return fail(Some(&logger), NccError::compiler_not_run(not_found, e));
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
    let exit_status = match (stopped_by(opts, out.end), out.end) {
        (Some(sig), _) => {
            m.status = JobStatus::Cancelled;
            error(failure::interrupted(sig));
            crate::run::signals::exit_status_for(sig)
        }
        (None, End::Exited(0)) => match copy_product(&partial, product, &logger)
            .and_then(|()| std::fs::rename(&partial, &plan.output))
        {
            Ok(()) => 0,
            Err(e) => {
                m.status = JobStatus::Failed;
                error(
                    NccError::compiler_output(partial.display(), plan.output.display(), e)
                        .to_string(),
                );
                EXIT_COMPILE_FAILED
            }
        },
        (None, end) => {
            for line in failure::job_lines(JOB_NAME, end, &out.stderr_tail, out.max_rss_kb, timeout)
            {
                error(line);
            }
            EXIT_COMPILE_FAILED
        }
    };
    let _ = std::fs::remove_dir_all(&partial_dir);
    emit(Event::JobFinished(m.clone()));
    if exit_status != 0 {
        logger.user(&format!(
            "Diagnostic logs stored in {}",
            plan.logfile.display()
        ));
    }
    logger.file_only(&metrics::table(std::slice::from_ref(&m)));
    emit(Event::Done { exit_status });
    let mut o = outcome(exit_status, errors, vec![m]);
    o.worker_pid = Some(out.pid);
    o
}

/// Copy the compiler's output to `product`, if asked (an error there is a warning: the compile
/// stands without the cache).
/// `argv` with its `--output` (`-o`, `--output=`) naming `output` in place — the same argument
/// list in the same order — or `--output <output>` appended when it has none.
fn with_output(argv: &[String], output: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len() + 2);
    let mut found = false;
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == "--output" || a == "-o" {
            out.push(a.clone());
            out.push(output.to_string());
            let _ = it.next();
            found = true;
        } else if a.starts_with("--output=") {
            out.push(format!("--output={output}"));
            found = true;
        } else {
            out.push(a.clone());
        }
    }
    if !found {
        out.extend(["--output".to_string(), output.to_string()]);
    }
    out
}

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
