//! The external-compiler engine (spec 07-cache-parallel.md): the compile runs as ONE supervised
//! job `PATH compile <args>` ([`crate::run::process::run`]: its own process group,
//! `--job-timeout`, cancellation, `wait4` figures), in the launch directory, instead of nxcc's own
//! pipeline. The arguments are the compile's own, in their order, with the model naming its
//! private snapshot ([`Session::compiled`]: the compiler reads the bytes the cache key was
//! made of, never the caller's path) and `--output` naming the output's own file name in a
//! fresh directory beside it (a NEFF records its file name); the output is renamed into place
//! only when the compiler succeeded.
//!
//! Reporting is nxcc's: a non-zero exit is `Child process job "ExternalCompiler" exited
//! abnormally!` with the stderr tail; a signal (or the shell-style status 128 + signal) adds the
//! F-code banner (`[F137]` and the memory line for SIGKILL); a timeout is `Job ExternalCompiler
//! timed out after N s`. The figures are one pseudo-job, [`JOB_NAME`], with the process's peak
//! RSS. The compiler's stdout and stderr lines go to the console as they come and to the log file
//! at INFO under `job.ExternalCompiler.0`.

use std::path::{Path, PathBuf};

use super::events::Event;
use super::failure;
use super::log::{self, Console};
use super::metrics::{self, JobMetrics, JobStatus};
use super::result::CompileResult;
use super::session::Session;
use super::ExternalCompiler;
use crate::error::NccError;
use crate::job_name::JobName;
use crate::result::{Environment, Failure, Status};
use crate::run::process::{self, End, Outcome as ProcessOutcome, Spec, Stream, Termination};

/// The pseudo-job's name in metrics, events and error lines.
pub const JOB_NAME: JobName = JobName::ExternalCompiler;

/// Run the session's plan through the external compiler; its output also copied to `product`
/// (a new file in a directory private to the caller) from its temporary name, before that is
/// renamed to `--output`.
pub fn run(session: &Session, ext: &ExternalCompiler, product: Option<&Path>) -> CompileResult {
    let plan = session.plan();
    let argv = match session.compiled() {
        Ok(compiled) => with_model(&session.invocation().argv, plan, &compiled.plan.model),
        Err(f) => return session.result(Status::Failed(f)),
    };
    let Some(argv) = argv else {
        let e = NccError::internal("cannot tell the model apart in the command line");
        return session.fail(&e, Failure::Internal);
    };
    let (partial_dir, partial) = partial_output(&plan.output);
    if let Err(e) = std::fs::create_dir(&partial_dir) {
        let why = NccError::compiler_output(partial_dir.display(), plan.output.display(), e);
        return session.fail(&why, Failure::Environment(Environment::Output));
    }
    let spec = command(session, ext, &argv, &partial);
    session.pseudo_job(JOB_NAME);
    let out = match process::run(&spec, &mut console_lines(session), session.cancel().flag()) {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial_dir);
            let not_found = matches!(e, process::SpawnError::ProgramNotFound { .. });
            let failure = Failure::Environment(if not_found {
                Environment::MissingTool(spec.program.display().to_string())
            } else {
                Environment::Spawn
            });
            return session.fail(&NccError::compiler_not_run(not_found, e), failure);
        }
    };
    let mut m = figures(&out);
    let status = conclude(session, &out, &partial, product, &mut m, spec.timeout);
    let _ = std::fs::remove_dir_all(&partial_dir);
    session.emit(&Event::JobFinished(m.clone()));
    if !status.succeeded() {
        session.log().user(&format!(
            "Diagnostic logs stored in {}",
            plan.logfile.display()
        ));
    }
    session
        .log()
        .file_only(&metrics::table(std::slice::from_ref(&m)));
    let mut result = session.result(status);
    result.worker_pid = Some(out.pid);
    result
}

/// Where the compiler writes its output: under the output's own name (which a NEFF records) in
/// a fresh directory beside it — (the directory, the file).
fn partial_output(output: &Path) -> (PathBuf, PathBuf) {
    let name = output
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file.neff");
    let dir = output.with_file_name(crate::fsx::unique::name(&format!(
        ".{name}.nxcc-partial-ext-"
    )));
    let file = dir.join(name);
    (dir, file)
}

/// `argv` (the command line after `compile`, of a plan launched in `plan.launch_dir`) with the
/// model argument — the one word that, replaced, leaves the model files `[snapshot]` when the
/// command line is read again — naming `snapshot`; `None` when no word does.
fn with_model(argv: &[String], plan: &crate::plan::Plan, snapshot: &Path) -> Option<Vec<String>> {
    let snapshot = snapshot.display().to_string();
    let parser = crate::cli::compile_parser("neuronx-cc");
    let reads_as_model = |candidate: &[String]| {
        parser
            .parse(candidate)
            .is_ok_and(|p| p.positionals.first() == Some(&vec![snapshot.clone()]))
    };
    (0..argv.len())
        .filter(|&i| crate::fsx::absolute(&plan.launch_dir, &argv[i]) == plan.model)
        .map(|i| {
            let mut v = argv.to_vec();
            v[i] = snapshot.clone();
            v
        })
        .find(|v| reads_as_model(v))
}

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

/// `PATH compile <argv> --output <partial>` in the launch directory, with the worker's
/// environment and `--job-timeout`; logged as it will run.
fn command(session: &Session, ext: &ExternalCompiler, argv: &[String], partial: &Path) -> Spec {
    let (inv, log) = (session.invocation(), session.log());
    let plan = &inv.plan;
    let program = super::resolve_program(&ext.program);
    let mut args: Vec<String> = vec!["compile".into()];
    args.extend(with_output(argv, &partial.display().to_string()));
    let job_logger = log::job_logger(JOB_NAME.name());
    log.info(
        log::DRIVER,
        &format!("Command line: {}", crate::shell::join(&inv.argv)),
    );
    let mut shown = vec![program.display().to_string()];
    shown.extend(args.iter().cloned());
    log.info(
        &job_logger,
        &format!("Executing {}", crate::shell::join(&shown)),
    );
    log.info(
        &job_logger,
        &format!("Working directory is {}", plan.launch_dir.display()),
    );
    let mut spec = Spec::new(&program, &plan.launch_dir)
        .args(args.iter())
        .timeout(inv.settings.job_timeout());
    for (k, v) in &session.options().worker_env {
        spec = spec.env(k.clone(), v.clone());
    }
    spec
}

/// Where the compiler's own lines go: the log file, and the console as they are (unless it is
/// `off`).
fn console_lines<'s>(session: &'s Session) -> impl FnMut(Stream, &str) + 's {
    let job_logger = log::job_logger(JOB_NAME.name());
    let quiet = session.invocation().settings.log.quiet();
    move |stream: Stream, line: &str| {
        session
            .log()
            .to_file(&job_logger, crate::cli::level::INFO, line);
        if quiet {
            return;
        }
        let is_err = stream == Stream::Stderr;
        match &session.options().console {
            Console::Sink(s) => s(line, is_err),
            Console::Terminal => write_line(is_err, line),
        }
    }
}

/// The pseudo-job's figures.
fn figures(out: &ProcessOutcome) -> JobMetrics {
    let termination = out.termination();
    JobMetrics {
        job: JOB_NAME,
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
    }
}

/// How the compile ended: stopped; the output put in place; or how the compiler failed, said in
/// the original's words.
fn conclude(
    session: &Session,
    out: &ProcessOutcome,
    partial: &Path,
    product: Option<&Path>,
    m: &mut JobMetrics,
    timeout: Option<std::time::Duration>,
) -> Status {
    let plan = session.plan();
    let job_logger = log::job_logger(JOB_NAME.name());
    let error = |line: String| session.error(&job_logger, line);
    if let Some(status) = session.stopped(out.end) {
        m.status = JobStatus::Cancelled;
        // Reported as the signal's end (SIGTERM when it was cancelled without one).
        let sig = match status {
            Status::Interrupted(sig) => sig,
            _ => libc::SIGTERM,
        };
        error(failure::interrupted(sig));
        return status;
    }
    if out.end == End::Exited(0) {
        let placed = copy_product(partial, product, session)
            .and_then(|()| std::fs::rename(partial, &plan.output));
        return match placed {
            Ok(()) => Status::Succeeded,
            Err(e) => {
                m.status = JobStatus::Failed;
                let e = NccError::compiler_output(partial.display(), plan.output.display(), e);
                error(e.to_string());
                Status::Failed(Failure::Environment(Environment::Output))
            }
        };
    }
    let tail = &out.stderr_tail;
    for line in failure::job_lines(JOB_NAME.name(), out.end, tail, out.max_rss_kb, timeout) {
        error(line);
    }
    let failed = crate::recon::failure::of_tool(JOB_NAME, out.end, tail, out.max_rss_kb, timeout);
    Status::Failed(failed.unwrap_or(Failure::Internal))
}

/// Copy the compiler's output to `product`, if asked (an error there is a note: the compile
/// stands without the cache).
fn copy_product(partial: &Path, product: Option<&Path>, session: &Session) -> std::io::Result<()> {
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
        session.log().info(
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
