//! Many compiles at once (spec 07-cache-parallel.md, `nxcc parallel-compile`): each input compiled
//! with the same arguments into `<output dir>/<stem>.neff`, with its own work dir and its own log
//! file (`<output dir>/<stem>.log`), through the cache, on nxcc's pipeline or an external compiler.
//!
//! Scheduling ([`run`]): every input is planned and keyed first, and its peak memory estimated
//! ([`crate::cache::estimate()`]: the peak recorded for the same key, else for the same arguments
//! and the nearest graph, else the formula [`crate::cache::estimate::FORMULA`]; the report says
//! which); then the largest estimate goes first. Every compile joins the queue of admission
//! ([`crate::admission::Schedule`]) in that order and waits there, not in a thread: at most
//! `jobs` run at once, each on one of `jobs` worker threads, and, with a memory budget, only
//! while the running estimates plus its own fit; a smaller compile that fits starts while a
//! larger one waits (backfilling, with a reservation that keeps the larger from starving). The
//! dispatcher (the calling thread) admits, hands each admitted compile to an idle worker, and
//! decides what an ended attempt leads to. A compile's console output goes nowhere but its log
//! file; it compiles through the one entry point ([`crate::compile`]).
//! A compile killed for memory (the original's `[F137]`: a process killed by SIGKILL, most often
//! the out-of-memory killer) is retried once *alone* before it counts as failed; other failures
//! are retried `retries` times (a retry compiles again even if the cache remembers the failure).
//!
//! Inputs are model files, or the entries to do of the framework's compile cache
//! (`--neuron-cache`, [`neuron`]): then each compile is wrapped in the entry's lock, its NEFF
//! published into the entry, and a failure of the graph recorded there.
//!
//! With `--gen-reproducer`, a compile whose failure is final (not tried again, not an interrupt)
//! leaves a reproducer bundle ([`crate::reproducer`]), which its row of the report names.
//!
//! - [`command`]: the command line; [`report`]: the final table, the JSON report, the timings
//!   page and the profile; [`progress`]: the live count on a terminal, one line per compile elsewhere;
//!   [`neuron`]: the framework's cache as inputs and outputs.

pub mod command;
pub mod naming;
pub mod neuron;
pub mod progress;
pub mod report;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::admission::{Id, Request, Schedule};
use crate::cache::{self, CacheConfig, CacheStatus, Estimate, Key};
use crate::cli::settings::Settings;
use crate::cli::{self, CliError, Command};
use crate::compile::Compiled;
use crate::engine::result::CompileResult as Ended;
use crate::engine::session::Cancellation;
use crate::engine::session::Options;
use crate::engine::Engine;
use crate::error::EXIT_COMPILE_FAILED;
use crate::plan::{Invocation, Refusal, SystemProbe};
use crate::result::Status as CompileStatus;
use crate::result::{Environment, Failure};

pub use naming::stem_of;
pub use progress::ProgressMode;

/// How to run the batch.
#[derive(Debug, Clone)]
pub struct Config {
    /// `prog` as the compiles' messages name it (`nxcc`).
    pub prog: String,
    /// At most this many compiles at once (at least 1).
    pub jobs: usize,
    /// Bytes of estimated peak memory the running compiles may take together.
    pub memory_budget: Option<u64>,
    /// Where `<stem>.neff` and `<stem>.log` go (absolute).
    pub output_dir: PathBuf,
    /// Retries of a failure other than `[F137]`.
    pub retries: u32,
    /// What every compile runs on: nxcc's pipeline or an external compiler.
    pub engine: Engine,
    /// The cache directory (`None`: off); each compile's `--retry_failed_compilation` applies.
    pub cache_dir: Option<PathBuf>,
    /// Where the compiles are launched (relative paths in the arguments are against it).
    pub launch_dir: PathBuf,
    /// The executable run as the pipeline's worker (default: this one).
    pub worker_program: Option<PathBuf>,
    /// How progress is shown: a live count on a terminal, one line per compile elsewhere.
    pub progress: ProgressMode,
    /// The framework's compile cache the inputs come from (`--neuron-cache`), if they do.
    pub neuron: Option<neuron::Run>,
    /// What this command's own options set in every compile's settings.
    pub overrides: Overrides,
    /// Write a reproducer bundle for every graph that failed (`--gen-reproducer`).
    pub reproducers: Option<Reproducers>,
}

/// What `parallel-compile`'s own options set in every compile's settings, over what its compile
/// arguments say: the remote server, and compiling again what failed before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--remote`.
    pub remote: Option<String>,
    /// `--remote-cache`.
    pub remote_cache: Option<String>,
    /// `--remote-instance`.
    pub remote_instance: Option<String>,
    /// `--retry_failed_compilation`.
    pub retry_failed: bool,
}

impl Overrides {
    /// Set them in a compile's settings.
    pub fn apply(&self, settings: &mut Settings) {
        let remote = &mut settings.remote;
        remote.execute = self.remote.clone().or(remote.execute.take());
        remote.cache = self.remote_cache.clone().or(remote.cache.take());
        if let Some(i) = &self.remote_instance {
            remote.instance = i.clone();
        }
        settings.cache.retry_failed |= self.retry_failed;
    }
}

/// Where `--gen-reproducer` writes the bundles of the graphs that failed.
#[derive(Debug, Clone)]
pub struct Reproducers {
    /// The directory (absolute).
    pub dir: PathBuf,
    /// Zero the models' constants (`--reproducer-strip-constants`).
    pub strip: bool,
}

/// One input: a model and the stem its outputs are named after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// As given (or found in a directory given), absolute.
    pub model: PathBuf,
    /// What its outputs are named after (by [`naming`]'s rule: usually [`stem_of`] the model).
    pub stem: String,
    /// The framework cache entry it comes from, whose `model.neff` it compiles (then its
    /// flags follow the compile arguments, and its outputs go into the entry).
    pub neuron: Option<neuron::Target>,
}

/// The inputs a list of INPUT arguments stands for: files as they are, directories by their
/// `*.pb` and `*.hlo` files (sorted), each file once, named by [`naming`]'s rule (distinct
/// outputs for every input). Errors: an input that does not exist, a directory without such files or that cannot be read.
pub fn expand_inputs(args: &[String], launch_dir: &Path) -> Result<Vec<Input>, String> {
    let mut models: Vec<PathBuf> = Vec::new();
    for a in args {
        let path = crate::fsx::absolute(launch_dir, a);
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
                .map_err(|e| format!("cannot read the directory {a}: {e}"))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "pb" || x == "hlo"))
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(format!("the directory {a} holds no *.pb or *.hlo file"));
            }
            models.extend(found);
        } else if std::fs::symlink_metadata(&path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            // Refused before anything runs, as an empty directory is: not found at the end
            // of a batch.
            return Err(format!("{a}: no such file or directory"));
        } else {
            models.push(path);
        }
    }
    let models = naming::distinct(models);
    let names = naming::names(&models);
    Ok(models
        .into_iter()
        .zip(names)
        .map(|(model, stem)| Input {
            model,
            stem,
            neuron: None,
        })
        .collect())
}

/// One run of one compile.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// When it started: seconds from the start of the batch.
    pub start_s: f64,
    /// When it ended, in the same seconds.
    pub end_s: f64,
    /// The compile's exit status (0 on success).
    pub exit_status: i32,
    /// What the cache did for it: hit, miss, or off.
    pub cache: CacheStatus,
    /// Run with nothing else running (the `[F137]` retry).
    pub alone: bool,
    /// The worker slot it ran in (0-based; a lane of the timeline).
    pub slot: usize,
    /// The largest peak RSS of its jobs, KiB (`None` when nothing ran).
    pub peak_rss_kb: Option<u64>,
    /// The error lines the compile printed, in order.
    pub error_lines: Vec<String>,
    /// Its work dir, when it was kept (a failure, no NEFF written, `--keep-work-dir`).
    pub work_dir: Option<String>,
    /// How it ended, as the profile says it (`compiled`, `hit`, `failed`, `remembered`, ...).
    pub outcome: String,
    /// Its bar in the profile and the timings page (its jobs, its outcome in full).
    #[serde(skip)]
    pub bar: Option<crate::profile::Compile>,
}

/// The final state of one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Its last attempt succeeded: the NEFF is at [`CompileResult::output`].
    Ok,
    /// It could not be planned, or its last attempt failed (after the retries).
    Failed,
    /// Not run, or stopped, because the batch was interrupted.
    Cancelled,
    /// Not compiled: its framework cache entry was locked by another, or done, by the time its
    /// turn came (the reason is in its error lines).
    Skipped,
    /// Its compile succeeded but its plan writes no NEFF (`-O3`, a `--pipeline` that stops
    /// before Kelper): why is in its error lines, what it made in its kept work dir.
    #[serde(rename = "no_neff")]
    NoNeff,
}

impl Status {
    /// As the table and the progress lines show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Skipped => "skipped",
            Status::NoNeff => "no NEFF",
        }
    }
}

/// What happened to one input.
#[derive(Debug, Clone, Serialize)]
pub struct CompileResult {
    /// The model, absolute.
    pub input: String,
    /// What its outputs are named after.
    pub stem: String,
    /// Its NEFF: `<output dir>/<stem>.neff`.
    pub output: String,
    /// Its log file: `<output dir>/<stem>.log`; for an entry of the framework's cache, its
    /// `model.log` when the entry has one after the compile (`None`: no log is kept, the entry
    /// stays to do).
    pub log: Option<String>,
    /// Its final state.
    pub status: Status,
    /// The last attempt's exit status (70 when it could not be planned, 0 when it never ran).
    pub exit_status: i32,
    /// The last attempt's cache status.
    pub cache: CacheStatus,
    /// Its estimated peak memory and what the estimate is based on; `None` when it could not be
    /// planned.
    pub estimate: Option<Estimate>,
    /// Its cache key; `None` without a cache or when it could not be planned.
    pub key: Option<String>,
    /// Wall time of every attempt together.
    pub wall_s: f64,
    /// The largest peak RSS of the jobs of the last attempt that ran any, KiB (`None`: no job ran).
    pub peak_rss_kb: Option<u64>,
    /// The last attempt's error lines (a planning error if it never ran).
    pub error_lines: Vec<String>,
    /// Every attempt, in order (the first run, then the retries).
    pub attempts: Vec<Attempt>,
    /// The last attempt's work dir, when it was kept (in the output directory).
    pub work_dir: Option<String>,
    /// The reproducer bundle written for its failure (`--gen-reproducer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reproducer: Option<String>,
}

/// The whole batch.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The version of nxcc that ran the batch.
    pub nxcc_version: String,
    /// The most compiles run at once (`--jobs`, at least 1).
    pub jobs: usize,
    /// The memory budget in bytes (`None`: no budget).
    pub memory_budget: Option<u64>,
    /// `pipeline` or `external`.
    pub engine: String,
    /// The cache directory (`None`: no cache).
    pub cache_dir: Option<String>,
    /// Where the NEFFs and logs were written, absolute.
    pub output_dir: String,
    /// Seconds from the start of the batch to the end of its last compile.
    pub makespan_s: f64,
    /// How many inputs ended [`Status::Ok`].
    pub succeeded: usize,
    /// How many inputs ended [`Status::Failed`].
    pub failed: usize,
    /// How many inputs ended [`Status::Cancelled`].
    pub cancelled: usize,
    /// How many inputs ended [`Status::Skipped`].
    pub skipped: usize,
    /// How many inputs ended [`Status::NoNeff`].
    pub no_neff: usize,
    /// With `--neuron-cache`: the cache, its version directory, and the entries not compiled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neuron_cache: Option<serde_json::Value>,
    /// Every input's result, in input order.
    pub compiles: Vec<CompileResult>,
}

impl Report {
    /// 0 when every compile succeeded (a skipped entry counts as none), else 70 — a compile
    /// that wrote no NEFF included.
    pub fn exit_status(&self) -> i32 {
        if self.failed == 0 && self.cancelled == 0 && self.no_neff == 0 {
            0
        } else {
            EXIT_COMPILE_FAILED
        }
    }
}

/// A compile ready to run.
struct Task {
    index: usize,
    invocation: Arc<Invocation>,
    key: Option<Key>,
    cache: CacheConfig,
    estimate: u64,
    /// What the estimate came from (`recorded`, `similar`, the formula's name).
    basis: String,
    alone: bool,
    /// The retry alone after a kill for memory was used.
    alone_retry_used: bool,
    retries_used: u32,
    /// Compile again even if the cache remembers a failure (a retry).
    force: bool,
}

impl Task {
    /// What it asks of admission.
    fn request(&self) -> Request {
        Request {
            bytes: self.estimate,
            alone: self.alone,
        }
    }
}

/// An attempt that ended, as its worker reports it to the dispatcher.
struct Finished {
    task: Task,
    attempt: Attempt,
    /// How the attempt ended.
    status: CompileStatus,
    /// Not compiled after all, and why (its framework cache entry was locked or done meanwhile).
    skipped: Option<String>,
    /// The reproducer bundle written for its failure.
    reproducer: Option<String>,
    /// Where it wrote its framework cache entry's `model.log` (a path, or an `s3://` URL).
    entry_log: Option<String>,
}

/// Whether a failed attempt of `task` is tried again: once alone after a kill for memory (the
/// original's `[F137]`), else while `retries` last; never a failure the cache remembered (the
/// one rule of the dispatcher, also told to a compile's framework cache entry before it records
/// a failure).
fn tried_again(task: &Task, retries: u32, from_cache: bool, failure: &Failure) -> bool {
    !from_cache
        && ((out_of_memory(failure) && !task.alone_retry_used) || task.retries_used < retries)
}

/// Whether a failure is a kill for memory, retried alone.
fn out_of_memory(failure: &Failure) -> bool {
    matches!(failure, Failure::OutOfMemory { .. })
}

/// Plan one input: `compile <args> <model> --output <dir>/<stem>.neff --logfile <dir>/<stem>.log`,
/// with this command's own settings over the compile arguments' ([`Overrides`]).
fn plan_input(
    cfg: &Config,
    input: &Input,
    compile_args: &[String],
) -> Result<Result<Invocation, String>, CliError> {
    let mut argv: Vec<String> = vec!["compile".into()];
    match &input.neuron {
        // The framework's own argv, in the entry's private work directory.
        Some(t) => argv.extend(t.compile_args(compile_args)),
        None => {
            argv.extend(compile_args.iter().cloned());
            argv.push(input.model.display().to_string());
            argv.push("--output".into());
            argv.push(output_path(cfg, input).display().to_string());
            argv.push("--logfile".into());
            argv.push(log_path(cfg, input).display().to_string());
        }
    }
    let usage = |message: String| {
        CliError::usage(
            String::new(),
            format!("{} parallel-compile", cfg.prog),
            message,
        )
    };
    let mut args = match cli::parse(&cfg.prog, &argv)? {
        Command::Compile(a) => a,
        _ => {
            return Err(usage(
                "the compile arguments ask for help or the version".into(),
            ))
        }
    };
    let settings = &mut args.settings;
    for (given, why) in [
        (settings.dry_run.is_some(), "--dry-run"),
        (
            settings.work_dir.temp_dir.is_some(),
            "--temp-dir (each compile gets its own work dir)",
        ),
        (settings.daemon, "--daemon"),
    ] {
        if given {
            return Err(usage(format!("the compile arguments may not use {why}")));
        }
    }
    cfg.overrides.apply(settings);
    let remote = &settings.remote;
    let (execute, cache) = (remote.execute(), remote.cache());
    if let Err(e) = crate::remote::RemoteConfig::from_flags(
        execute.map(str::to_string),
        cache.map(str::to_string),
        "",
    ) {
        return Err(usage(format!(
            "the compile arguments' --remote: {}",
            e.cause
        )));
    }
    let probe = SystemProbe::at(match &input.neuron {
        Some(t) => &t.work_dir,
        None => &cfg.launch_dir,
    });
    match Invocation::from_args(&args, &probe) {
        Ok(inv) => Ok(Ok(inv)),
        Err(Refusal::Plan { error, .. }) => Ok(Err(error.to_string())),
        Err(Refusal::Usage(u)) => Err(u),
        Err(_) => Err(usage(
            "the compile arguments ask for help or the version".into(),
        )),
    }
}

/// `<output dir>/<stem>.neff` (for an entry of the framework's cache, its staging `model.neff`).
pub fn output_path(cfg: &Config, input: &Input) -> PathBuf {
    match &input.neuron {
        Some(t) => t.output(),
        None => cfg.output_dir.join(format!("{}.neff", input.stem)),
    }
}

/// `<output dir>/<stem>.log` (for an entry of the framework's cache, in its staging directory).
pub fn log_path(cfg: &Config, input: &Input) -> PathBuf {
    match &input.neuron {
        Some(t) => t.log(),
        None => cfg.output_dir.join(format!("{}.log", input.stem)),
    }
}

/// Compile every input (see the module documentation). `Err` is a usage error in the compile
/// arguments, found before anything ran. `cancel` stops the batch, and says why.
pub fn run(
    cfg: &Config,
    inputs: &[Input],
    compile_args: &[String],
    cancel: &Cancellation,
) -> Result<Report, CliError> {
    let started = Instant::now();
    let mut results = initial_results(cfg, inputs);
    let tasks = plan_all(cfg, inputs, compile_args, &mut results)?;
    let failed_early = results.iter().filter(|r| r.status == Status::Failed);
    let progress = progress::Progress::start(cfg.progress, inputs.len(), failed_early.count());
    for r in results.iter().filter(|r| r.status == Status::Failed) {
        progress.finished(r);
    }
    let batch = Batch {
        cfg,
        inputs,
        cancel,
        started,
    };
    batch.dispatch(tasks, &mut results, &progress);
    drop(progress);
    Ok(report(cfg, results, started))
}

/// Every input's row of the report, before anything ran (cancelled until it ends otherwise).
fn initial_results(cfg: &Config, inputs: &[Input]) -> Vec<CompileResult> {
    inputs
        .iter()
        .map(|i| CompileResult {
            input: i.model.display().to_string(),
            stem: i.stem.clone(),
            // An entry's NEFF ends up in the entry; its compile log is kept only as model.log.
            output: match &i.neuron {
                Some(t) => t.entry.join(crate::neuron_cache::NEFF_FILE),
                None => output_path(cfg, i),
            }
            .display()
            .to_string(),
            // An entry's compile log is kept only as its model.log, once written.
            log: match &i.neuron {
                Some(_) => None,
                None => Some(log_path(cfg, i).display().to_string()),
            },
            status: Status::Cancelled,
            exit_status: 0,
            cache: CacheStatus::Off,
            estimate: None,
            key: None,
            wall_s: 0.0,
            peak_rss_kb: None,
            error_lines: Vec::new(),
            attempts: Vec::new(),
            work_dir: None,
            reproducer: None,
        })
        .collect()
}

/// Plan, key and estimate every input, largest estimate first; an input that does not plan is
/// failed in `results` (a usage error in the shared arguments is the batch's).
fn plan_all(
    cfg: &Config,
    inputs: &[Input],
    compile_args: &[String],
    results: &mut [CompileResult],
) -> Result<Vec<Task>, CliError> {
    let mut tasks: Vec<Task> = Vec::new();
    for (index, input) in inputs.iter().enumerate() {
        // An entry's own flags that do not make a compile fail that entry, not the batch.
        let planned = match plan_input(cfg, input, compile_args) {
            Err(e) if input.neuron.is_some() => Ok(Err(format!(
                "[ERROR] the entry's {} do not make a compile: {}",
                crate::neuron_cache::FLAGS_FILE,
                e.render().trim_end().replace('\n', " ")
            ))),
            r => r,
        };
        let r = &mut results[index];
        match planned?.and_then(|inv| task_of(cfg, index, inv, r)) {
            Ok(task) => tasks.push(task),
            Err(line) => {
                r.status = Status::Failed;
                r.exit_status = EXIT_COMPILE_FAILED;
                r.error_lines = vec![line];
            }
        }
    }
    tasks.sort_by_key(|t| std::cmp::Reverse(t.estimate));
    // Said up front: compiles no budget can hold together with another, and compiles that will
    // write no NEFF.
    if cfg.progress != ProgressMode::Quiet {
        let planned: Vec<report::Planned> = tasks
            .iter()
            .map(|t| report::Planned {
                name: &inputs[t.index].stem,
                estimate: t.estimate,
                no_neff: cfg.engine.no_neff(&t.invocation.plan),
            })
            .collect();
        // A batch's work dirs are kept in its output directory; an entry's of the framework's
        // cache go with the run's private directory.
        let kept_in = cfg.neuron.is_none().then_some(cfg.output_dir.as_path());
        crate::cli::subcommand::err(&report::before(cfg.memory_budget, &planned, kept_in));
    }
    Ok(tasks)
}

/// A planned input as a task: its cache, its key and its memory estimate (also in its row);
/// `Err`: its cache flags do not read (the line that says so).
fn task_of(
    cfg: &Config,
    index: usize,
    invocation: Invocation,
    row: &mut CompileResult,
) -> Result<Task, String> {
    let dir = cfg
        .cache_dir
        .clone()
        .filter(|_| !invocation.settings.cache.no_cache);
    let cache_cfg = CacheConfig::at(&invocation, dir).map_err(|e| e.to_string())?;
    let key = cache_cfg
        .dir
        .as_ref()
        .and_then(|_| cache_cfg.key(&invocation, &cfg.engine).ok());
    let estimate = match &key {
        Some(k) => cache::estimate(cache_cfg.cache().as_ref(), k),
        None => Estimate {
            bytes: cache::estimate::formula_estimate(&cache::estimate::Features::of_plan(
                &invocation.plan,
            )),
            basis: cache::Basis::formula(),
        },
    };
    row.key = key.as_ref().map(|k| k.key.clone());
    row.estimate = Some(estimate.clone());
    Ok(Task {
        index,
        invocation: Arc::new(invocation),
        key,
        cache: cache_cfg,
        estimate: estimate.bytes,
        basis: estimate.basis.name().to_string(),
        alone: false,
        alone_retry_used: false,
        retries_used: 0,
        force: false,
    })
}

/// The batch's report from its rows.
fn report(cfg: &Config, results: Vec<CompileResult>, started: Instant) -> Report {
    let count = |s: Status| results.iter().filter(|r| r.status == s).count();
    Report {
        nxcc_version: crate::VERSION.to_string(),
        jobs: cfg.jobs.max(1),
        memory_budget: cfg.memory_budget,
        engine: cfg.engine.name().to_string(),
        cache_dir: cfg.cache_dir.as_ref().map(|d| d.display().to_string()),
        output_dir: cfg.output_dir.display().to_string(),
        makespan_s: started.elapsed().as_secs_f64(),
        succeeded: count(Status::Ok),
        failed: count(Status::Failed),
        cancelled: count(Status::Cancelled),
        skipped: count(Status::Skipped),
        no_neff: count(Status::NoNeff),
        neuron_cache: None,
        compiles: results,
    }
}

/// How often the dispatcher, waiting for an attempt to end, looks whether the batch was
/// cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// What every attempt of the batch shares.
struct Batch<'a> {
    cfg: &'a Config,
    inputs: &'a [Input],
    cancel: &'a Cancellation,
    started: Instant,
}

impl Batch<'_> {
    /// Run every task on `--jobs` worker threads (one per slot, each running one compile at a
    /// time): the inputs wait in admission's queue ([`Schedule`]), not in threads. The dispatcher
    /// — this thread — admits, hands an admitted task to an idle worker, and decides what an
    /// ended attempt leads to (its final state, or a retry at the front of the queue).
    fn dispatch(
        &self,
        tasks: Vec<Task>,
        results: &mut [CompileResult],
        progress: &progress::Progress,
    ) {
        let jobs = self.cfg.jobs.max(1);
        let (done_tx, done_rx) = mpsc::channel::<(usize, Finished)>();
        std::thread::scope(|scope| {
            let workers: Vec<mpsc::Sender<Task>> = (0..jobs)
                .map(|slot| {
                    let (tx, rx) = mpsc::channel::<Task>();
                    let done = done_tx.clone();
                    scope.spawn(move || {
                        for task in rx {
                            if done.send((slot, self.attempt(task, slot))).is_err() {
                                break;
                            }
                        }
                    });
                    tx
                })
                .collect();
            drop(done_tx);
            let mut queue = Queue::new(jobs, self.cfg.memory_budget, tasks);
            loop {
                if self.cancel.is_cancelled() {
                    // What has not started never will; what runs is being cancelled.
                    queue.withdraw_all();
                }
                for (slot, task) in queue.admit() {
                    progress.started(slot, &self.inputs[task.index].stem);
                    let _ = workers[slot].send(task);
                }
                let snap = queue.schedule.snapshot();
                progress.set_running(snap.running);
                progress.set_queued(snap.queued);
                if queue.is_empty() {
                    break;
                }
                match done_rx.recv_timeout(CANCEL_POLL) {
                    Ok((slot, finished)) => {
                        queue.finish(slot);
                        progress.stopped(slot);
                        if let Some(retry) = self.conclude(finished, results, progress) {
                            // A retry goes ahead of the compiles that have not started yet.
                            queue.push_front(retry);
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            drop(workers);
        });
    }

    /// One attempt of `task` in worker slot `slot`: the framework cache entry's lock first (it
    /// may be taken by now), the compile through the one entry point, the entry's result.
    fn attempt(&self, task: Task, slot: usize) -> Finished {
        let start_s = self.started.elapsed().as_secs_f64();
        let log_start = std::fs::metadata(&task.invocation.plan.logfile).map_or(0, |m| m.len());
        let target = self.inputs[task.index].neuron.as_ref();
        let neuron_run = self.cfg.neuron.as_ref();
        let (prepared, skipped, refused) = match (neuron_run, target) {
            (Some(run), Some(t)) => match neuron::before(run, t) {
                Ok(neuron::Before::Go(p)) => (Some(p), None, None),
                Ok(neuron::Before::Skip(why)) => (None, Some(why), None),
                Err(line) => (None, None, Some(line)),
            },
            _ => (None, None, None),
        };
        let mut done = match (&skipped, refused) {
            (_, Some(line)) => Compiled::uncached(Ended::failed(
                Failure::Environment(Environment::CacheEntry),
                vec![line],
            )),
            (Some(_), None) => Compiled::uncached(Ended::succeeded(Vec::new())),
            (None, None) => self.compile(&task),
        };
        let entry_log = match (prepared, target) {
            (Some(p), Some(t)) => self.record_in_entry(p, t, &task, &mut done),
            _ => None,
        };
        let end_s = self.started.elapsed().as_secs_f64();
        let bar = self.bar(&task, &done, slot, (start_s, end_s));
        let o = &done.result;
        let attempt = Attempt {
            start_s,
            end_s,
            exit_status: o.exit_status(),
            cache: done.cache,
            alone: task.alone,
            slot,
            peak_rss_kb: o.peak_rss_kb(),
            error_lines: o.lines.clone(),
            work_dir: o
                .work_dir
                .as_ref()
                .filter(|_| o.kept)
                .map(|d| d.display().to_string()),
            outcome: bar.outcome.name().to_string(),
            bar: Some(bar),
        };
        let reproducer = self.reproducer(&task, &done, log_start);
        Finished {
            status: o.status.clone(),
            task,
            attempt,
            skipped,
            reproducer,
            entry_log,
        }
    }

    /// `--gen-reproducer`: the bundle of a failure that is final (not tried again, not an
    /// interrupt); a bundle that cannot be written is said on stderr.
    fn reproducer(&self, task: &Task, done: &Compiled, log_start: u64) -> Option<String> {
        let settings = self.cfg.reproducers.as_ref()?;
        let failure = done.result.failure()?;
        let from_cache = done.cache == CacheStatus::Hit;
        if self.cancel.is_cancelled() || tried_again(task, self.cfg.retries, from_cache, failure) {
            return None;
        }
        let input = &self.inputs[task.index];
        let req = crate::reproducer::write::Request {
            invocation: &task.invocation,
            ran: crate::reproducer::write::Ran::Here(&self.cfg.engine),
            result: &done.result,
            key: done.key.as_ref().or(task.key.as_ref()),
            log_start,
            dir: &settings.dir,
            strip: settings.strip,
            entry: input.neuron.as_ref().map(|t| t.work_dir.as_path()),
            compiled: done.snapshot.as_deref(),
        };
        match crate::reproducer::write::write(&req) {
            Ok(p) => Some(p.display().to_string()),
            Err(e) => {
                crate::cli::subcommand::err(&format!(
                    "parallel-compile: warning: no reproducer for {}: {e}\n",
                    input.stem
                ));
                None
            }
        }
    }

    /// The attempt's bar in the profile: its outcome, jobs, estimate and key.
    fn bar(
        &self,
        task: &Task,
        done: &Compiled,
        slot: usize,
        times: (f64, f64),
    ) -> crate::profile::Compile {
        let input = &self.inputs[task.index];
        let mut bar = crate::compile::bar(
            &task.invocation.plan,
            done,
            &input.stem,
            (slot, times.0, times.1),
        );
        bar.input = input.model.display().to_string();
        bar.estimate = Some(task.estimate);
        bar.basis = Some(task.basis.clone());
        bar.key = bar.key.or_else(|| task.key.as_ref().map(|k| k.key.clone()));
        bar
    }

    /// Compile `task` through the one entry point; its console goes nowhere but its log file
    /// (many compiles share this process). A compile with --remote or --remote-cache goes
    /// through the remote server (its flags were checked before anything started).
    fn compile(&self, task: &Task) -> Compiled {
        let mut cache = task.cache.clone();
        if task.force {
            cache.retry_failed = true;
        }
        let options = Options {
            cancel: self.cancel.clone(),
            worker_program: self.cfg.worker_program.clone(),
            // A batch's work dirs (kept on failure, or when no NEFF is written) are in its
            // output directory, not the launch directory; an entry of the framework's cache is
            // launched in a work directory of its own already.
            work_root: self.inputs[task.index]
                .neuron
                .is_none()
                .then(|| self.cfg.output_dir.clone()),
            // An entry's graph is a private copy already (copied by the kernel at discovery).
            private_model: self.inputs[task.index].neuron.is_some(),
            ..Options::quiet()
        };
        let remote = crate::remote::RemoteConfig::of(&task.invocation)
            .ok()
            .flatten();
        crate::compile::compile(crate::compile::Request {
            invocation: &task.invocation,
            options,
            engine: &self.cfg.engine,
            cache,
            key: task.key.clone(),
            remote,
        })
    }

    /// What a framework cache entry gets from the attempt (a published NEFF, or a `model.log`
    /// for a failure of the graph that will not be retried); a result that cannot be put there
    /// fails the attempt. Where the `model.log` went, if one was written.
    fn record_in_entry(
        &self,
        prepared: neuron::Prepared,
        target: &neuron::Target,
        task: &Task,
        done: &mut Compiled,
    ) -> Option<String> {
        let o = &done.result;
        let interrupted_now = self.cancel.is_cancelled();
        let from_cache = done.cache == CacheStatus::Hit;
        let again = !interrupted_now
            && o.failure()
                .is_some_and(|f| tried_again(task, self.cfg.retries, from_cache, f));
        match neuron::after(prepared, target, o, again, interrupted_now) {
            Ok(log) => log,
            Err(line) => {
                done.result.lines.push(line);
                if done.result.ok() {
                    done.result.status =
                        CompileStatus::Failed(Failure::Environment(Environment::CacheEntry));
                }
                None
            }
        }
    }

    /// What a finished attempt leads to: a final state in its row, or a retry (returned).
    fn conclude(
        &self,
        f: Finished,
        results: &mut [CompileResult],
        progress: &progress::Progress,
    ) -> Option<Task> {
        let mut task = f.task;
        let a = f.attempt;
        let r = &mut results[task.index];
        if f.reproducer.is_some() {
            r.reproducer = f.reproducer;
        }
        if let Some(why) = f.skipped {
            r.status = Status::Skipped;
            r.error_lines = vec![why];
            progress.finished(r);
            return None;
        }
        r.wall_s += a.end_s - a.start_s;
        r.exit_status = a.exit_status;
        r.cache = a.cache;
        r.peak_rss_kb = a.peak_rss_kb.or(r.peak_rss_kb);
        r.error_lines = a.error_lines.clone();
        r.work_dir = a.work_dir.clone();
        if let Some(t) = &self.inputs[task.index].neuron {
            r.log = f.entry_log.or_else(|| neuron::kept_log(t));
        }
        r.attempts.push(a);
        let failure = match f.status {
            CompileStatus::Succeeded => match self.cfg.engine.no_neff(&task.invocation.plan) {
                Some(why) => {
                    r.error_lines = vec![why.to_string()];
                    Err(Status::NoNeff)
                }
                None => Err(Status::Ok),
            },
            _ if self.cancel.is_cancelled() => Err(Status::Cancelled),
            CompileStatus::Failed(failure) => Ok(failure),
            CompileStatus::Interrupted(_) | CompileStatus::Cancelled(_) => Err(Status::Cancelled),
        };
        let failure = match failure {
            Ok(f) => f,
            Err(end) => {
                r.status = end;
                progress.finished(r);
                return None;
            }
        };
        // A remembered failure is the cache's answer, not an accident: no retry.
        let from_cache = r.cache == CacheStatus::Hit;
        if !tried_again(&task, self.cfg.retries, from_cache, &failure) {
            r.status = Status::Failed;
            progress.finished(r);
            return None;
        }
        let oom = out_of_memory(&failure);
        if oom && !task.alone_retry_used {
            task.alone_retry_used = true;
            task.alone = true;
        } else {
            task.retries_used += 1;
            task.alone = oom;
        }
        task.force = true;
        progress.retrying(r, &failure, task.alone);
        Some(task)
    }
}

/// The tasks waiting and running: admission's schedule, the tasks behind its ids, and which
/// worker slot runs which.
struct Queue {
    schedule: Schedule,
    waiting: HashMap<Id, Task>,
    running: HashMap<usize, Id>,
    idle: Vec<usize>,
}

impl Queue {
    fn new(jobs: usize, budget: Option<u64>, tasks: Vec<Task>) -> Queue {
        let mut q = Queue {
            schedule: Schedule::new(jobs, budget),
            waiting: HashMap::new(),
            running: HashMap::new(),
            idle: (0..jobs).rev().collect(),
        };
        for t in tasks {
            let id = q.schedule.push_back(t.request());
            q.waiting.insert(id, t);
        }
        q
    }

    fn push_front(&mut self, task: Task) {
        let id = self.schedule.push_front(task.request());
        self.waiting.insert(id, task);
    }

    /// The tasks admission lets start now, each with the idle slot it runs in (admission never
    /// admits more than `--jobs`, so one is idle).
    fn admit(&mut self) -> Vec<(usize, Task)> {
        let mut out = Vec::new();
        for id in self.schedule.admit() {
            let (Some(task), Some(slot)) = (self.waiting.remove(&id), self.idle.pop()) else {
                continue;
            };
            self.running.insert(slot, id);
            out.push((slot, task));
        }
        out
    }

    /// The attempt in `slot` ended.
    fn finish(&mut self, slot: usize) {
        if let Some(id) = self.running.remove(&slot) {
            self.schedule.finish(id);
        }
        self.idle.push(slot);
    }

    /// Nothing that has not started will.
    fn withdraw_all(&mut self) {
        for (id, _) in self.waiting.drain() {
            self.schedule.withdraw(id);
        }
    }

    fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_expand_each_file_once_with_distinct_names() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("graphs/nested")).unwrap();
        for f in [
            "graphs/b.pb",
            "graphs/a.hlo",
            "graphs/notes.txt",
            "graphs/nested/c.pb",
            "x.pb",
        ] {
            std::fs::write(d.join(f), b"m").unwrap();
        }
        let got = expand_inputs(&["graphs".into(), "x.pb".into()], d).unwrap();
        let stems: Vec<&str> = got.iter().map(|i| i.stem.as_str()).collect();
        assert_eq!(stems, ["a", "b", "x"]);
        assert_eq!(got[0].model, d.join("graphs/a.hlo"));
        // A file given again through its directory is one input; a name met twice is
        // told apart.
        let got =
            expand_inputs(&["graphs".into(), "graphs/b.pb".into(), "x.pb".into()], d).unwrap();
        let stems: Vec<&str> = got.iter().map(|i| i.stem.as_str()).collect();
        assert_eq!(stems, ["a", "b", "x"]);
        std::fs::write(d.join("graphs/x.hlo"), b"m").unwrap();
        let got = expand_inputs(&["graphs".into(), "x.pb".into()], d).unwrap();
        let stems: Vec<&str> = got.iter().map(|i| i.stem.as_str()).collect();
        assert_eq!(stems, ["a", "b", "x.hlo", "x.pb"]);
        std::fs::create_dir(d.join("empty")).unwrap();
        assert!(expand_inputs(&["empty".into()], d)
            .unwrap_err()
            .contains("no *.pb or *.hlo"));
        // A missing file is refused up front, with the others.
        assert_eq!(
            expand_inputs(&["x.pb".into(), "nope.pb".into()], d).unwrap_err(),
            "nope.pb: no such file or directory"
        );
    }
}
