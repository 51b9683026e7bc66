//! `runPipeline`: one compile on nxcc's own pipeline, as the supervising process runs it
//! (04-run.md), in named phases:
//!
//! 1. [`announce`] the plan's warnings and the command line;
//! 2. prepare: the toolchain resolved once, what can be checked checked before anything is
//!    created (every tool the plan runs, `--output`), the model's private snapshot taken (the
//!    worker and every tool are given its path, never the caller's: [`Session::compiled`]), the
//!    work dir made, the outputs' state noted;
//! 3. supervise: the worker started (see [`crate::run::supervisor`]; it runs
//!    [`super::executor`]) and followed to its end, its events written through the session;
//! 4. conclude: how the compile ended, from how the worker ended and what it reported — the
//!    F-code banner when the worker itself was killed, the line for a lost worker;
//! 5. finish: an output the failed compile wrote removed, the work dir removed or kept, the
//!    metrics written (the log's table, `--submit-metrics`, `--timings`, `--trace`), and the last
//!    lines: `Compiler status PASS`, or `Artifacts stored in` and `Diagnostic logs stored in`.

use std::path::{Path, PathBuf};

use super::events::Event;
use super::failure;
use super::log;
use super::metrics;
use super::result::CompileResult;
use super::session::Session;
use super::workdir::{self, WorkDir};
use crate::error::NccError;
use crate::result::{Environment, Failure, Status};
use crate::run::process::End;
use crate::run::supervisor::{self, Output, Start, WorkerOutcome, WorkerSpec};
use crate::toolchain::{Request, Toolchain};

pub use super::worker::WORKER_ARG;

/// What the compile has once it is prepared.
struct Prepared {
    /// The toolchain, resolved once: handed to the worker.
    toolchain: Option<Toolchain>,
    /// The worker's environment: the caller's, and what names the toolchain.
    env: Vec<(String, String)>,
    work: WorkDir,
    /// What is at the outputs now, so a failed compile removes only what it wrote itself.
    outputs: Vec<(PathBuf, Option<(u64, u64)>)>,
}

/// How the worker ended, and what it said about it.
struct Ran {
    outcome: WorkerOutcome,
    reported: Option<Status>,
}

/// Run the session's plan on nxcc's pipeline; the NEFF also written to `product` (see
/// [`super::strategy::Strategy::run`]).
pub fn run(session: &Session, product: Option<&Path>) -> CompileResult {
    announce(session);
    let prepared = match prepare(session) {
        Ok(p) => p,
        Err(failure) => return session.result(Status::Failed(failure)),
    };
    let ran = match supervise(session, &prepared, product) {
        Ok(r) => r,
        Err(failure) => return session.result(Status::Failed(failure)),
    };
    let status = conclude(session, &ran);
    let mut result = session.result(status);
    result.kept = finish(session, &prepared, &result);
    result.work_dir = Some(prepared.work.path);
    result.worker_pid = Some(ran.outcome.pid);
    result
}

/// What a compile says before it runs anything: the plan's warnings (the one saying no NEFF will
/// be written is shown whatever `--verbose` says), its USER-level lines, the command line.
pub fn announce(session: &Session) {
    let (plan, log) = (session.plan(), session.log());
    for w in &plan.warnings {
        if plan.no_neff.as_ref() == Some(w) {
            log.warning_shown(log::DRIVER, w);
        } else {
            log.warning(log::DRIVER, w);
        }
    }
    for m in &plan.user_messages {
        log.user(m);
    }
    log.info(
        log::DRIVER,
        &format!(
            "Command line: {}",
            crate::shell::join(&session.invocation().argv)
        ),
    );
}

/// The toolchain, the checks, the work dir (see the module documentation).
fn prepare(session: &Session) -> Result<Prepared, Failure> {
    let plan = session.plan();
    let mut env = session.options().worker_env.clone();
    let toolchain = resolve_toolchain(session, &mut env)?;
    // What can be checked is checked before anything is created.
    if let Some((_, tool)) = plan
        .missing_tools
        .iter()
        .find(|(_, tool)| toolchain.as_ref().and_then(|t| t.resolve(tool)).is_none())
    {
        let what = match &toolchain {
            Some(t) => format!("{tool}: {}", t.why_missing(tool)),
            None => tool.to_string(),
        };
        let missing = Failure::Environment(Environment::MissingTool(tool.to_string()));
        return Err(session.failing(&NccError::tool_not_found(what), missing));
    }
    if let Err(e) = check_output(&plan.output, true) {
        return Err(session.failing(&e, Failure::Environment(Environment::Output)));
    }
    session.compiled()?;
    let options = session.options();
    let work_root = options.work_root.as_deref().unwrap_or(&plan.launch_dir);
    let temp_dir = session.invocation().settings.work_dir.temp_dir.as_deref();
    let work = workdir::prepare(&plan.launch_dir, work_root, temp_dir)
        .map_err(|e| session.failing(&e, Failure::Environment(Environment::WorkDir)))?;
    session.log().info(
        log::DRIVER,
        &format!(
            "Intermediate files stored in {}, output in {}",
            work.path.display(),
            plan.output.display()
        ),
    );
    let outputs = plan
        .outputs()
        .into_iter()
        .map(|p| {
            let was = file_identity(&p);
            (p, was)
        })
        .collect();
    Ok(Prepared {
        toolchain,
        env,
        work,
        outputs,
    })
}

/// The toolchain the plan asks for: the simulated one laid out, an installed package found (and
/// named to the worker), or the directory the plan found.
fn resolve_toolchain(
    session: &Session,
    env: &mut Vec<(String, String)>,
) -> Result<Option<Toolchain>, Failure> {
    let plan = session.plan();
    match &plan.toolchain_request {
        Request::Simulated => crate::toolchain::simulator()
            .ok_or_else(crate::toolchain::no_simulator)
            .and_then(|s| s.ensure_default())
            .map(Some)
            .map_err(|e| {
                let missing = Failure::Environment(Environment::MissingTool(e.to_string()));
                session.failing(&NccError::simulated_toolchain(e), missing)
            }),
        Request::Auto => Ok(crate::toolchain::probe_python_package().map(|bin| {
            session.log().info(
                log::DRIVER,
                &format!(
                    "Using the toolchain of the installed neuronxcc package: {}",
                    bin.display()
                ),
            );
            env.push((
                crate::recon::toolchain::TOOLCHAIN_ENV.to_string(),
                bin.display().to_string(),
            ));
            Toolchain {
                bin,
                simulated: false,
            }
        })),
        Request::Dir(_) => Ok(plan.toolchain.clone()),
    }
}

/// Start the worker and follow it to its end, handing it the one payload
/// ([`super::handoff::payload`]: the invocation, the toolchain, the work dir, its environment, the
/// product path): forked from the command line (one compile, this process still
/// single-threaded), started by the daemon's fork server, else this binary executed with the
/// payload on a descriptor. A worker the fork server could not start is executed instead.
fn supervise(
    session: &Session,
    prepared: &Prepared,
    product: Option<&Path>,
) -> Result<Ran, Failure> {
    let inv = session.compiled()?;
    let plan = &inv.plan;
    let opts = session.options();
    let tc = prepared.toolchain.as_ref();
    let payload = super::handoff::payload(inv, tc, &prepared.work.path, &prepared.env, product);
    let program = match opts
        .worker_program
        .clone()
        .map(Ok)
        .unwrap_or_else(std::env::current_exe)
    {
        Ok(p) => p,
        Err(e) => {
            let e = NccError::internal(format!("Cannot find nxcc's own executable: {e}"));
            return Err(session.failing(&e, Failure::Internal));
        }
    };
    let body = |events| super::handoff::forked(&payload, events);
    let exec = || Start::Exec {
        program: program.clone(),
        args: vec![WORKER_ARG.to_string()],
        env: Vec::new(),
        input: Some(payload.clone()),
    };
    let sink = match &opts.console {
        super::log::Console::Sink(s) => Some(s.clone()),
        super::log::Console::Terminal => None,
    };
    let forward = |line: &str, is_err: bool| {
        if let Some(s) = &sink {
            s(line, is_err)
        }
    };
    let fork = opts.sole_compile
        && sink.is_none()
        && opts.worker_program.is_none()
        && supervisor::single_threaded();
    let launcher = match &opts.fork_server {
        Some(server) if !fork && opts.worker_program.is_none() => {
            Some(server.launcher(payload.clone()))
        }
        _ => None,
    };
    let start = match (&launcher, fork) {
        (_, true) => Start::Fork(&body),
        (Some(l), false) => Start::Launch(l),
        (None, false) => exec(),
    };
    let spec = |start| WorkerSpec {
        start,
        cwd: &plan.launch_dir,
        output: match sink {
            Some(_) => Output::Lines(&forward),
            None => Output::Inherit,
        },
        sole_child: opts.sole_compile,
    };
    let mut follow = Follow::new(session);
    let mut ran = follow.run(&spec(start));
    if let (Err(e), Some(_)) = (&ran, &launcher) {
        session.log().info(
            log::DRIVER,
            &format!("The fork server did not start the worker ({e}); re-executing nxcc"),
        );
        ran = follow.run(&spec(exec()));
    }
    match ran {
        Ok(outcome) => Ok(Ran {
            outcome,
            reported: follow.reported,
        }),
        Err(e) => Err(session.failing(
            &NccError::internal(e),
            Failure::Environment(Environment::Spawn),
        )),
    }
}

/// Following a worker: its events written through the session, the status it reported kept,
/// nxcc's signal handling installed once it exists.
struct Follow<'s, 'a> {
    session: &'s Session<'a>,
    reported: Option<Status>,
}

impl<'s, 'a> Follow<'s, 'a> {
    fn new(session: &'s Session<'a>) -> Follow<'s, 'a> {
        Follow {
            session,
            reported: None,
        }
    }

    fn run(&mut self, spec: &WorkerSpec) -> Result<WorkerOutcome, supervisor::StartError> {
        let session = self.session;
        let opts = session.options();
        // nxcc's own signal handling starts once the worker exists (a forked worker must not
        // inherit its thread): a signal then cancels the compile.
        let mut on_started = || session.handle_signals();
        let reported = &mut self.reported;
        let mut on_event = |line: &str| match super::events::parse(line) {
            // The worker's end is the supervisor's to report.
            Some(Event::Done { status, .. }) => *reported = status,
            Some(ev) => session.emit(&ev),
            None => {}
        };
        supervisor::run(spec, opts.cancel.flag(), &mut on_started, &mut on_event)
    }
}

/// How the compile ended: stopped by the caller; the worker lost, killed or stopped by a signal
/// sent to it (each said in the original's words); or as the worker reported.
fn conclude(session: &Session, ran: &Ran) -> Status {
    let outcome = &ran.outcome;
    let peak_rss_kb = outcome.max_rss_kb;
    let error = |line: String| session.error(log::DRIVER, line);
    if let Some(status) = session.stopped(outcome.end) {
        return status;
    }
    if let Some(why) = &outcome.lost {
        error(failure::worker_lost(why));
        let signal = None;
        return Status::Failed(Failure::WorkerLost {
            signal,
            peak_rss_kb,
        });
    }
    match outcome.end {
        End::Exited(0) => Status::Succeeded,
        End::Signaled(sig) => {
            failure::banner_lines(sig, peak_rss_kb)
                .into_iter()
                .for_each(error);
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
        End::Exited(code) if (129..160).contains(&code) => {
            error(failure::worker_interrupted(code - 128, outcome.pid));
            Status::Failed(Failure::WorkerLost {
                signal: Some(code - 128),
                peak_rss_kb,
            })
        }
        // The worker said what failed.
        _ => match &ran.reported {
            Some(Status::Failed(f)) => Status::Failed(f.clone()),
            _ => Status::Failed(Failure::Internal),
        },
    }
}

/// The compile's last steps (see the module documentation); whether the work dir was kept.
fn finish(session: &Session, prepared: &Prepared, result: &CompileResult) -> bool {
    let (plan, log) = (session.plan(), session.log());
    let work = &prepared.work;
    if !result.ok() {
        remove_written_outputs(session, &prepared.outputs);
    }
    // Without a NEFF, the work dir holds all the compile produced: it is kept.
    let keep = !work.generated
        || session.invocation().settings.work_dir.keep_work_dir
        || plan.pipeline.contains(&crate::jobs::Job::SaveTemps)
        || plan.no_neff.is_some()
        || !result.ok();
    super::reports::write_metrics(
        session.invocation(),
        log,
        &result.jobs,
        result.exit_status(),
    );
    log.info(
        log::DRIVER,
        &format!("nxcc supervisor peak RSS {} KB", metrics::own_peak_rss_kb()),
    );
    if !result.ok() {
        if let Status::Interrupted(sig) = result.status {
            log.error(log::DRIVER, &failure::interrupted(sig));
        }
        log.user(&format!("Artifacts stored in: {}", work.path.display()));
        log.user(&format!(
            "Diagnostic logs stored in {}",
            plan.logfile.display()
        ));
        return keep;
    }
    if !keep {
        if let Err(e) = work.remove() {
            log.warning(
                log::DRIVER,
                &format!(
                    "Could not remove the work directory {}: {e}",
                    work.path.display()
                ),
            );
        }
    }
    log.user("Compiler status PASS");
    if plan.no_neff.is_some() {
        log.user(&format!(
            "No NEFF was written to {}; the compile's artifacts are in {}",
            plan.output.display(),
            work.path.display()
        ));
    }
    keep
}

/// Remove what a failed compile wrote at its outputs (and only that).
fn remove_written_outputs(session: &Session, outputs: &[(PathBuf, Option<(u64, u64)>)]) {
    for (path, was) in outputs {
        let now = file_identity(path);
        if now.is_none() || now == *was {
            continue;
        }
        match std::fs::remove_file(path) {
            Ok(()) => session.log().info(
                log::DRIVER,
                &format!("Removed {} written by the failed compile", path.display()),
            ),
            Err(e) => session.log().warning(
                log::DRIVER,
                &format!("Could not remove {}: {e}", path.display()),
            ),
        }
    }
}

/// `--output` can be written: it is not a directory, what would be its directory is one, and a
/// file can be made there. `probe_by_creating`: proven by making an unnamed file, as the NEFF
/// will be, dropped at once (the compile); else by asking the kernel (`access(2)`), which
/// creates nothing (the dry run) — the same checks, in the same words.
pub fn check_output(output: &Path, probe_by_creating: bool) -> Result<(), NccError> {
    if output.is_dir() {
        return Err(NccError::output_not_written(
            output.display(),
            "it is a directory",
        ));
    }
    let mut parent = output.parent();
    while let Some(dir) = parent {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {
                let name = output
                    .file_name()
                    .unwrap_or(std::ffi::OsStr::new("out.neff"));
                let made = if probe_by_creating {
                    crate::fsx::AtomicFile::create(&dir.join(name)).map(drop)
                } else {
                    let dir = if dir.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        dir
                    };
                    rustix::fs::access(
                        dir,
                        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
                    )
                    .map_err(std::io::Error::from)
                };
                return made.map_err(|e| {
                    NccError::output_not_written(
                        output.display(),
                        format!("no file can be made in {}: {e}", dir.display()),
                    )
                });
            }
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
