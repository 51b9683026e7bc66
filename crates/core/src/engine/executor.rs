//! The executor: runs the plan's jobs strictly in plan order (SEED: there is no scheduler), in the
//! worker process. It knows nothing about particular jobs: each job describes its steps (from the
//! registry), and the executor runs them — native tools through [`crate::run::process`], in-process
//! work through the job's own function, the fork-walrus library through `libloading` — measuring
//! each job and reporting failures in the original's words.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::events::Event;
use super::failure;
use super::log::{self, Logger};
use super::metrics::{JobMetrics, JobStatus};
use super::progress::Progress;
use crate::error::NccError;
use crate::jobs::{self, Action, Job, RunContext, Step};
use crate::plan::Invocation;
use crate::result::{Environment, Failure, JobEnd};
use crate::run::events::EventWriter;
use crate::run::process::{self, Cancel, End, Spec, Stream};
use crate::toolchain::Toolchain;

/// Why the pipeline stopped early.
#[derive(Debug, Clone, PartialEq)]
pub enum Halt {
    /// A job failed, so; its error lines were printed.
    Failed(Failure),
    /// Cancelled (a signal, or the daemon's client went away).
    Cancelled,
}

/// Everything the executor needs.
pub struct Executor<'a> {
    /// The invocation whose planned jobs are run.
    pub invocation: &'a Invocation,
    /// The toolchain that provides the native tools; `None` when none was found (a job that needs a
    /// tool then fails with NCC_EDRV082).
    pub toolchain: Option<&'a Toolchain>,
    /// The compile's work directory, where every job runs.
    pub work_dir: &'a Path,
    /// The compile's log (file and console).
    pub logger: &'a Logger,
    /// The report pipe to the supervisor; `None` when nobody supervises the worker.
    pub events: Option<&'a EventWriter>,
    /// Cancels the running job (set on a signal); no further job starts once it is set.
    pub cancel: &'a Cancel,
    /// `--job-timeout`: per job.
    pub job_timeout: Option<Duration>,
    /// Show dots (`--verbose 35`) or a status line while running.
    pub progress: bool,
}

/// The subgraph directories (`sgNN`) in a work dir, sorted.
pub(crate) fn subgraph_dirs(work_dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(work_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| {
            n.len() > 2 && n.starts_with("sg") && n[2..].bytes().all(|b| b.is_ascii_digit())
        })
        .collect();
    v.sort();
    v
}

/// The `value_input*.npy` files in a work dir, sorted.
pub fn value_inputs(work_dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(work_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with("value_input") && n.ends_with(".npy"))
        .collect();
    v.sort();
    v
}

/// This process's user and system CPU time and peak RSS (KiB).
fn self_usage() -> (Duration, Duration, u64) {
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own, through a pointer valid for the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    (tv(u.ru_utime), tv(u.ru_stime), u.ru_maxrss.max(0) as u64)
}

struct JobRun {
    metrics: JobMetrics,
    result: Result<(), Halt>,
}

impl Executor<'_> {
    /// The one place the worker writes its events: to its supervisor's report pipe.
    fn emit(&self, event: &Event) {
        if let Some(ev) = self.events {
            ev.send(event);
        }
    }

    fn error(&self, logger: &str, line: &str) {
        self.logger.error(logger, line);
        self.emit(&Event::Error {
            line: line.to_string(),
        });
    }

    /// Run every job; returns the figures of the jobs that ran and how the pipeline ended.
    pub fn run(&self) -> (Vec<JobMetrics>, Result<(), Halt>) {
        let pipeline = &self.invocation.plan.pipeline;
        self.emit(&Event::Pipeline {
            jobs: pipeline.iter().map(|&j| j.into()).collect(),
        });
        let dots = self.invocation.settings.log.dots();
        let progress = self.progress.then(|| Progress::start(self.logger, dots));
        self.logger
            .info(log::PIPELINE, "Running pipeline compile 0");
        let start = Instant::now();
        let mut all = Vec::with_capacity(pipeline.len());
        let total = pipeline.len();
        for (i, &job) in pipeline.iter().enumerate() {
            if self.cancel.is_cancelled() {
                return (all, Err(Halt::Cancelled));
            }
            if let Some(p) = &progress {
                p.job(i + 1, total, job.name());
            }
            self.emit(&Event::JobStarted {
                job: job.into(),
                index: i,
                total,
            });
            self.logger
                .info(log::PIPELINE, &format!("Starting job {job}"));
            let run = self.run_job(job, start);
            self.logger.info(
                log::PIPELINE,
                &format!("Finished job {job} in {:.3}s", run.metrics.wall_s),
            );
            self.emit(&Event::JobFinished(run.metrics.clone()));
            all.push(run.metrics);
            if let Err(f) = run.result {
                return (all, Err(f));
            }
        }
        drop(progress);
        self.logger.info(log::PIPELINE, "Finished pipeline compile");
        (all, Ok(()))
    }

    fn run_job(&self, job: Job, pipeline_start: Instant) -> JobRun {
        let (name, row) = (job.name(), job.row());
        let logger_name = log::job_logger(name);
        let started = Instant::now();
        let (u0, s0, _) = self.self_usage_if_in_process(row.runs_as);
        let mut m = JobMetrics {
            job: job.into(),
            status: JobStatus::Ok,
            start_s: (started - pipeline_start).as_secs_f64(),
            wall_s: 0.0,
            user_s: 0.0,
            sys_s: 0.0,
            max_rss_kb: 0,
            exit_status: None,
            signal: None,
            processes: 0,
        };
        let actual = subgraph_dirs(self.work_dir);
        let subgraphs = if actual.is_empty() {
            self.invocation.plan.subgraphs.clone()
        } else {
            actual
        };
        let inputs = value_inputs(self.work_dir);
        let gold = self.work_dir.join("gold-000.p").exists();
        let ctx = self.invocation.job_context(
            &subgraphs,
            &inputs,
            gold,
            self.toolchain,
            Some(self.work_dir),
        );
        let mut result = match (row.steps)(&ctx) {
            Ok(steps) => {
                let mut r = Ok(());
                for step in &steps {
                    r = self.run_step(job, &logger_name, row.run, &ctx, step, &mut m);
                    if r.is_err() || self.cancel.is_cancelled() {
                        break;
                    }
                }
                r
            }
            Err(e) => {
                self.error(&logger_name, &e.to_string());
                Err(Halt::Failed(crate::recon::failure::of_job_error(
                    job.into(),
                    &e,
                )))
            }
        };
        if result.is_ok() && self.cancel.is_cancelled() {
            result = Err(Halt::Cancelled);
        }
        m.wall_s = started.elapsed().as_secs_f64();
        if row.runs_as == jobs::RunsAs::InProcess {
            let (u1, s1, rss) = self_usage();
            m.user_s = (u1.saturating_sub(u0)).as_secs_f64();
            m.sys_s = (s1.saturating_sub(s0)).as_secs_f64();
            m.max_rss_kb = m.max_rss_kb.max(rss);
        }
        match (&result, m.status) {
            (Err(Halt::Cancelled), _) => m.status = JobStatus::Cancelled,
            (Err(Halt::Failed(_)), JobStatus::Ok) => m.status = JobStatus::Failed,
            _ => {}
        }
        JobRun { metrics: m, result }
    }

    fn self_usage_if_in_process(&self, runs_as: jobs::RunsAs) -> (Duration, Duration, u64) {
        if runs_as == jobs::RunsAs::InProcess {
            self_usage()
        } else {
            (Duration::ZERO, Duration::ZERO, 0)
        }
    }

    fn run_step(
        &self,
        job: Job,
        logger_name: &str,
        run: Option<jobs::RunFn>,
        ctx: &jobs::JobContext,
        step: &Step,
        m: &mut JobMetrics,
    ) -> Result<(), Halt> {
        let cwd = if step.cwd == "." {
            self.work_dir.to_path_buf()
        } else {
            self.work_dir.join(&step.cwd)
        };
        for (file, content, executable) in &step.also_write {
            let path = cwd.join(file);
            let written = std::fs::create_dir_all(&cwd)
                .and_then(|_| std::fs::write(&path, content))
                .and_then(|_| {
                    if *executable {
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    } else {
                        Ok(())
                    }
                });
            if let Err(e) = written {
                let err = NccError::internal(format!("Could not write {}: {e}", path.display()))
                    .caused_by(&e);
                self.error(logger_name, &err.to_string());
                return Err(Halt::Failed(crate::recon::failure::of_job_error(
                    job.into(),
                    &err,
                )));
            }
        }
        match &step.action {
            Action::Skip { reason } => {
                self.logger.info(logger_name, reason);
                m.status = JobStatus::Skipped;
                Ok(())
            }
            Action::InProcess { .. } => {
                let Some(run) = run else {
                    self.error(
                        logger_name,
                        &NccError::internal(format!(
                            "{job} has no in-process implementation; remove it from --pipeline"
                        ))
                        .to_string(),
                    );
                    return Err(Halt::Failed(Failure::Internal));
                };
                let log_fn = |lvl: i64, msg: &str| self.logger.log(logger_name, lvl, msg);
                let rc = RunContext {
                    job: *ctx,
                    work_dir: self.work_dir,
                    launch_dir: &self.invocation.plan.launch_dir,
                    log: &log_fn,
                };
                run(&rc).map_err(|e| {
                    self.error(logger_name, &e.to_string());
                    Halt::Failed(crate::recon::failure::of_job_error(job.into(), &e))
                })
            }
            Action::Exec { tool, program, .. } | Action::Shell { tool, program, .. } => {
                if program.is_none() {
                    return Err(self.missing_tool(logger_name, tool));
                }
                match step.command(self.work_dir) {
                    Some(command) => {
                        self.run_process(job, logger_name, command.timeout(self.job_timeout), m)
                    }
                    None => Err(self.missing_tool(logger_name, tool)),
                }
            }
            Action::Library {
                library,
                symbol,
                argv,
            } => self.run_library(job, logger_name, library, symbol, argv, m),
        }
    }

    fn missing_tool(&self, logger_name: &str, tool: &str) -> Halt {
        let e = NccError::tool_not_found(tool);
        self.error(logger_name, &e.to_string());
        Halt::Failed(Failure::Environment(Environment::MissingTool(
            tool.to_string(),
        )))
    }

    fn run_process(
        &self,
        job: Job,
        logger_name: &str,
        spec: Spec,
        m: &mut JobMetrics,
    ) -> Result<(), Halt> {
        self.logger.info(logger_name, &format!("Executing {spec}"));
        self.logger.info(
            logger_name,
            &format!("Working directory is {}", spec.cwd.display()),
        );
        self.logger
            .debug(logger_name, &format!("Replay this job by calling: {spec}"));
        let logger = self.logger.clone();
        let mut on_line = |_stream: Stream, line: &str| logger.info(logger_name, line);
        let outcome = match process::run(&spec, &mut on_line, self.cancel) {
            Ok(o) => o,
            Err(e) => {
                let (err, failure) = if matches!(e, process::SpawnError::ProgramNotFound { .. }) {
                    let tool = spec.program.display().to_string();
                    (
                        NccError::tool_not_found(&tool),
                        Environment::MissingTool(tool),
                    )
                } else {
                    (
                        NccError::internal(format!("Could not start {spec}: {e}")),
                        Environment::Spawn,
                    )
                };
                self.error(logger_name, &err.to_string());
                return Err(Halt::Failed(Failure::Environment(failure)));
            }
        };
        m.processes += 1;
        m.user_s += outcome.user.as_secs_f64();
        m.sys_s += outcome.sys.as_secs_f64();
        m.max_rss_kb = m.max_rss_kb.max(outcome.max_rss_kb);
        for line in failure::job_lines(
            job.name(),
            outcome.end,
            &outcome.stderr_tail,
            outcome.max_rss_kb,
            spec.timeout,
        ) {
            self.error(logger_name, &line);
        }
        let failed = crate::recon::failure::of_tool(
            job.into(),
            outcome.end,
            &outcome.stderr_tail,
            outcome.max_rss_kb,
            spec.timeout,
        );
        match (outcome.end, failed) {
            (End::Exited(0), _) => Ok(()),
            (End::Cancelled(t), _) => {
                m.signal = t.signal();
                Err(Halt::Cancelled)
            }
            (End::TimedOut(t), f) => {
                m.status = failure::job_status(outcome.end);
                m.signal = t.signal();
                Err(Halt::Failed(f.unwrap_or(Failure::Internal)))
            }
            (End::Exited(code), f) => {
                m.exit_status = Some(code);
                Err(Halt::Failed(f.unwrap_or(Failure::Internal)))
            }
            (End::Signaled(sig), f) => {
                m.signal = Some(sig);
                Err(Halt::Failed(f.unwrap_or(Failure::Internal)))
            }
        }
    }

    fn run_library(
        &self,
        job: Job,
        logger_name: &str,
        library: &Path,
        symbol: &str,
        argv: &[String],
        m: &mut JobMetrics,
    ) -> Result<(), Halt> {
        self.logger.info(
            logger_name,
            &format!(
                "Calling {symbol} of {} with {}",
                library.display(),
                argv.join(" ")
            ),
        );
        let fail = |what: String| {
            let cause = format!("{what} (check the toolchain's lib/libwalrus.so, or run without --enable-internal-fork-walrus)");
            self.error(logger_name, &NccError::internal(cause).to_string());
            Halt::Failed(Failure::Environment(Environment::Spawn))
        };
        let c_args: Vec<CString> = match argv.iter().map(|a| CString::new(a.as_str())).collect() {
            Ok(v) => v,
            Err(_) => return Err(fail("an argument holds a NUL byte".into())),
        };
        let mut ptrs: Vec<*const libc::c_char> = c_args.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        // SAFETY: loading the toolchain's backend library and calling its documented entry point
        // `int run_backend_driver(int argc, char **argv)` with a NUL-terminated argv that outlives
        // the call. A crash inside it takes the worker down, which the supervisor reports.
        let rc = unsafe {
            let lib = match libloading::Library::new(library) {
                Ok(l) => l,
                Err(e) => return Err(fail(format!("Could not load {}: {e}", library.display()))),
            };
            let f: libloading::Symbol<
                unsafe extern "C" fn(libc::c_int, *const *const libc::c_char) -> libc::c_int,
            > = match lib.get(symbol.as_bytes()) {
                Ok(f) => f,
                Err(e) => return Err(fail(format!("{} has no {symbol}: {e}", library.display()))),
            };
            f(c_args.len() as libc::c_int, ptrs.as_ptr())
        };
        m.processes += 0;
        if rc != 0 {
            m.exit_status = Some(rc);
            self.error(
                logger_name,
                &failure::exited_abnormally(job.name(), &format!("{symbol} returned {rc}.")),
            );
            return Err(Halt::Failed(Failure::Job {
                job: Some(job.into()),
                end: JobEnd::Exited(rc),
            }));
        }
        Ok(())
    }
}
