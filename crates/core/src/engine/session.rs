//! One compile's session (clang's `Compilation`): what every part of a compile shares, built once
//! per compile and passed down to the cache layers and the way the plan is run
//! ([`super::strategy`]). It holds
//!
//! - the invocation (its inputs, settings and plan);
//! - its log, opened once ([`Session::open`]: a log that cannot be opened fails the compile with
//!   NCC_EDRV091 before anything else);
//! - its events, written here and nowhere else ([`Session::emit`]), and what they carry — every
//!   error line and each job's figures — collected, so that the result is made from them
//!   ([`Session::result`]);
//! - its cancellation and why ([`Cancellation`]: a signal, or a reason without one);
//! - when it started, and where its log file ended then (the cache keeps this compile's lines);
//! - how its worker is started ([`Options`]: console, extra environment, the fork server);
//! - the model's private snapshot ([`Session::compiled`]): taken once, by whatever first needs
//!   the model's bytes to compile them or to publish a result (the pipeline, an external
//!   compiler, remote execution, a cache re-deriving its key), and kept until the session ends,
//!   so that every reader of the compile reads the same bytes — never the caller's path again.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::events::Event;
use super::log::{self, Console, Logger};
use super::metrics::JobMetrics;
use super::result::CompileResult;
use crate::error::NccError;
use crate::job_name::JobName;
use crate::plan::{Invocation, Plan};
use crate::result::{CancelReason, Environment, Failure, Status};
use crate::run::process::{Cancel, End};
use crate::snapshot::Snapshot;

/// A compile's cancellation: the flag its runs watch, and why it was set — the signal nxcc
/// received, or a reason without one. Cheap to clone (every clone is the same cancellation).
#[derive(Debug, Clone, Default)]
pub struct Cancellation {
    flag: Cancel,
    why: Arc<Mutex<Option<Stop>>>,
}

/// Why a compile was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Signal(i32),
    Reason(CancelReason),
}

impl Cancellation {
    /// Not cancelled yet.
    pub fn new() -> Cancellation {
        Cancellation::default()
    }

    /// Stop the compile for `signal`, which it reports (exit 128 + the signal). The first reason
    /// given is kept.
    pub fn interrupt(&self, signal: i32) {
        self.stop(Stop::Signal(signal));
    }

    /// Stop the compile for `reason` (reported as SIGTERM's exit status).
    pub fn cancel(&self, reason: CancelReason) {
        self.stop(Stop::Reason(reason));
    }

    fn stop(&self, why: Stop) {
        self.why
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
        self.flag.cancel();
    }

    /// Whether the compile was stopped.
    pub fn is_cancelled(&self) -> bool {
        self.flag.is_cancelled()
    }

    /// The flag runs watch (a process, a wait for admission or a lock).
    pub fn flag(&self) -> &Cancel {
        &self.flag
    }

    /// The signal that stopped the compile, if a signal did.
    pub fn signal(&self) -> Option<i32> {
        match *self.why.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(Stop::Signal(sig)) => Some(sig),
            _ => None,
        }
    }

    /// The status of the compile it stopped: interrupted by its signal, or cancelled for its
    /// reason; `None` while it is not cancelled.
    pub fn status(&self) -> Option<Status> {
        if !self.is_cancelled() {
            return None;
        }
        Some(match *self.why.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(Stop::Signal(sig)) => Status::Interrupted(sig),
            Some(Stop::Reason(r)) => Status::Cancelled(r),
            // The flag was set by someone holding only the flag.
            None => Status::Cancelled(CancelReason::Stopped),
        })
    }
}

/// How a compile is run: where its console goes, who may cancel it, who hears its events, and
/// how its worker is started.
pub struct Options<'a> {
    /// Where console lines go.
    pub console: Console,
    /// Cancels the compile (the caller's signal handler, a daemon client gone), and says why.
    pub cancel: Cancellation,
    /// Extra environment for the worker (and so for the tools).
    pub worker_env: Vec<(String, String)>,
    /// Called with every event of the compile (the daemon streams them).
    pub on_event: Option<&'a (dyn Fn(&Event) + Sync)>,
    /// The executable to run as the worker (default: this one).
    pub worker_program: Option<PathBuf>,
    /// This process runs this one compile and is a child subreaper
    /// ([`crate::run::supervisor::become_subreaper`]): leftovers are found without a `/proc` scan, and
    /// the worker may be forked rather than executed.
    pub sole_compile: bool,
    /// Install nxcc's SIGINT/SIGTERM/SIGHUP handling once the worker has started (the command
    /// line): a signal cancels the compile and says which.
    pub install_signals: bool,
    /// Start the worker through this fork server (the daemon's), handing it the plan, instead of
    /// executing this binary; the executed worker stays the fallback.
    pub fork_server: Option<Arc<crate::forkserver::ForkServer>>,
    /// Where a generated work dir is made (`None`: the launch directory, as the original does;
    /// `parallel-compile` keeps a batch's work dirs in its output directory).
    pub work_root: Option<PathBuf>,
    /// The model is already a private copy this process made, in a directory no one else can
    /// write (a framework cache entry's graph, copied by `parallel-compile` with
    /// `crate::snapshot::copy_into`): it is the compile's snapshot as it is, not copied again.
    pub private_model: bool,
}

impl Options<'_> {
    /// Terminal console, no cancellation source yet.
    pub fn terminal() -> Options<'static> {
        Options {
            console: Console::Terminal,
            cancel: Cancellation::new(),
            worker_env: Vec::new(),
            on_event: None,
            worker_program: None,
            sole_compile: false,
            install_signals: false,
            fork_server: None,
            work_root: None,
            private_model: false,
        }
    }

    /// A console that goes nowhere (a batch keeps each compile's lines in its log file only).
    pub fn quiet() -> Options<'static> {
        Options {
            console: Console::Sink(Arc::new(|_: &str, _: bool| {})),
            ..Options::terminal()
        }
    }
}

/// What the session collected from its events.
#[derive(Default)]
struct Seen {
    lines: Vec<String>,
    jobs: Vec<JobMetrics>,
    /// The cache tier that served the compile, if one did.
    served_by: Option<&'static str>,
}

/// One compile (see the module documentation).
pub struct Session<'a> {
    invocation: &'a Invocation,
    log: Logger,
    options: Options<'a>,
    started: Instant,
    log_start: u64,
    seen: Mutex<Seen>,
    taken: OnceLock<Result<Taken, Failure>>,
}

/// The model's snapshot, and the invocation as it is compiled: the same invocation, its plan's
/// model the snapshot.
struct Taken {
    snapshot: Arc<Snapshot>,
    invocation: Invocation,
}

/// The compile's log, as the invocation says (`--logfile`, `--logfile-verbose`, `--verbose`),
/// with its console going to `console`; NCC_EDRV091 when the file cannot be opened.
pub fn open_log(inv: &Invocation, console: Console) -> Result<Logger, NccError> {
    let (log, logfile) = (&inv.settings.log, &inv.plan.logfile);
    Logger::open(Some(logfile), log.file_level, log.verbose, console)
        .map_err(|e| NccError::log_file(logfile.display(), e))
}

/// Where a compile's snapshot is made: `--temp-dir` (made if missing, as the pipeline makes
/// it), else where the caller keeps work directories, else the launch directory.
pub fn snapshot_root(inv: &Invocation, options: &Options) -> PathBuf {
    let launch_dir = &inv.plan.launch_dir;
    match inv.settings.work_dir.temp_dir.as_deref() {
        Some(d) => crate::fsx::absolute(launch_dir, d),
        None => options
            .work_root
            .clone()
            .unwrap_or_else(|| launch_dir.clone()),
    }
}

/// Whether the snapshot reads as the plan saw the model (a file or a directory, HLO text or a
/// binary module): the tools' command lines follow from that, and the cache key does not hold
/// it. `Err` says what changed.
fn reads_as_planned(plan: &Plan, snapshot: &std::path::Path) -> Result<(), String> {
    use crate::plan::Probe;
    let probe = crate::plan::SystemProbe::at(&plan.launch_dir);
    let was = &plan.model_facts;
    let what = |is_dir: bool, f: crate::jobs::ModelFormat| match is_dir {
        true => "a directory".to_string(),
        false => format!("HLO {}", f.as_str()),
    };
    match probe.model(snapshot) {
        Some(now) if (now.is_dir, now.format) == (was.is_dir, was.format) => Ok(()),
        Some(now) => Err(format!(
            "it changed meanwhile: planned as {}, read as {}",
            what(was.is_dir, was.format),
            what(now.is_dir, now.format)
        )),
        None => Err("it was gone when it was read".into()),
    }
}

impl<'a> Session<'a> {
    /// The session of a compile of `inv`: its log opened. A log that cannot be opened is the
    /// compile's end: the error on the console (and as an event), and the result.
    pub fn open(
        inv: &'a Invocation,
        options: Options<'a>,
    ) -> Result<Session<'a>, Box<CompileResult>> {
        let log_start = std::fs::metadata(&inv.plan.logfile)
            .map(|m| m.len())
            .unwrap_or(0);
        let log = match open_log(inv, options.console.clone()) {
            Ok(l) => l,
            Err(e) => {
                let line = e.to_string();
                match &options.console {
                    Console::Terminal => eprintln!("{line}"),
                    Console::Sink(s) => s(&line, true),
                }
                if let Some(f) = options.on_event {
                    f(&Event::Error { line: line.clone() });
                }
                let failure = Failure::Environment(Environment::LogFile);
                return Err(Box::new(CompileResult::failed(failure, vec![line])));
            }
        };
        Ok(Session {
            invocation: inv,
            log,
            options,
            started: Instant::now(),
            log_start,
            seen: Mutex::default(),
            taken: OnceLock::new(),
        })
    }

    /// The invocation compiled.
    pub fn invocation(&self) -> &'a Invocation {
        self.invocation
    }

    /// The invocation's plan.
    pub fn plan(&self) -> &'a Plan {
        &self.invocation.plan
    }

    /// The invocation as it is compiled: its plan's model replaced by its private snapshot,
    /// taken on the first call ([`crate::snapshot`]) in the compile's work root (`--temp-dir`,
    /// else where the caller keeps work directories, else the launch directory). A snapshot that cannot be
    /// taken, or whose model no longer reads as the plan saw it (someone wrote it meanwhile),
    /// fails the compile — said once, a failure of the environment (NCC_EDRV118).
    pub fn compiled(&self) -> Result<&Invocation, Failure> {
        match self.taken.get_or_init(|| self.take()) {
            Ok(t) => Ok(&t.invocation),
            Err(f) => Err(f.clone()),
        }
    }

    /// The model's snapshot, once [`Session::compiled`] took it: what the compile read, from
    /// which a result's key is derived again before it is published.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        match self.taken.get() {
            Some(Ok(t)) => Some(&t.snapshot),
            _ => None,
        }
    }

    /// The model's snapshot, if one was taken, kept for as long as the caller holds it (after
    /// the session ends: a reproducer bundle is made from what was compiled).
    pub fn kept_snapshot(&self) -> Option<Arc<Snapshot>> {
        match self.taken.get() {
            Some(Ok(t)) => Some(t.snapshot.clone()),
            _ => None,
        }
    }

    fn take(&self) -> Result<Taken, Failure> {
        let plan = &self.invocation.plan;
        let fail = |e: NccError| {
            let cause = e
                .os_error
                .and_then(crate::recon::failure::io_cause)
                .map_or(Environment::Model, Environment::Io);
            Err(self.failing(&e, Failure::Environment(cause)))
        };
        let root = snapshot_root(self.invocation, &self.options);
        let taken = match self.options.private_model {
            true => Snapshot::adopt(&plan.model),
            false => {
                std::fs::create_dir_all(&root).and_then(|()| Snapshot::take(&plan.model, &root))
            }
        };
        let taken = taken.map_err(|e| {
            let why = format!("{e} (in {})", root.display());
            NccError::model_snapshot(plan.model.display(), why).caused_by(&e)
        });
        let snapshot = match taken {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        if let Err(why) = reads_as_planned(plan, snapshot.path()) {
            return fail(NccError::model_snapshot(plan.model.display(), why));
        }
        if let Some(how) = snapshot.how() {
            self.log.info(
                log::DRIVER,
                &format!(
                    "Read the model {} into the private snapshot {} ({} bytes, {}); the compile reads that",
                    plan.model.display(),
                    snapshot.path().display(),
                    snapshot.bytes(),
                    how.describe(),
                ),
            );
        }
        let mut compiled = self.invocation.clone();
        compiled.plan.model = snapshot.path().to_path_buf();
        Ok(Taken {
            snapshot: Arc::new(snapshot),
            invocation: compiled,
        })
    }

    /// The compile's log (file and console).
    pub fn log(&self) -> &Logger {
        &self.log
    }

    /// How the compile is run.
    pub fn options(&self) -> &Options<'a> {
        &self.options
    }

    /// The compile's cancellation.
    pub fn cancel(&self) -> &Cancellation {
        &self.options.cancel
    }

    /// Time since the compile started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The log file's length when the compile started (its own lines follow).
    pub fn log_start(&self) -> u64 {
        self.log_start
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one place a compile's events are written: to the caller's listener, and the error
    /// lines and job figures they carry into the session's record.
    pub fn emit(&self, event: &Event) {
        match event {
            Event::Error { line } => self.seen().lines.push(line.clone()),
            Event::JobFinished(m) => self.seen().jobs.push(m.clone()),
            _ => {}
        }
        if let Some(f) = self.options.on_event {
            f(event);
        }
    }

    /// A cache layer served the compile (`local`, `secondary`, `shared`, `shared-secondary`, `remote`): said in its profile.
    pub fn served_by(&self, tier: &'static str) {
        self.seen().served_by = Some(tier);
    }

    /// The cache tier that served the compile, if one did.
    pub fn served(&self) -> Option<&'static str> {
        self.seen().served_by
    }

    /// An error line of the compile, under `logger`: logged at ERROR (and shown), and an event.
    pub fn error(&self, logger: &str, line: impl Into<String>) {
        let line = line.into();
        self.log.error(logger, &line);
        self.emit(&Event::Error { line });
    }

    /// A pseudo-job that stands for the whole compile (an external compiler, a remote compile):
    /// the pipeline of that one job has started.
    pub fn pseudo_job(&self, name: JobName) {
        self.emit(&Event::Pipeline { jobs: vec![name] });
        self.emit(&Event::JobStarted {
            job: name,
            index: 1,
            total: 1,
        });
    }

    /// The compile's result with `status`: the error lines and job figures seen so far.
    pub fn result(&self, status: Status) -> CompileResult {
        let seen = self.seen();
        CompileResult::new(status, seen.lines.clone(), seen.jobs.clone())
    }

    /// The compile failed, so, on `e` (an error line under the driver's logger).
    pub fn fail(&self, e: &NccError, failure: Failure) -> CompileResult {
        let failure = self.failing(e, failure);
        self.result(Status::Failed(failure))
    }

    /// Say `e` (an error line under the driver's logger); the compile fails, so.
    pub(crate) fn failing(&self, e: &NccError, failure: Failure) -> Failure {
        self.error(log::DRIVER, e.to_string());
        failure
    }

    /// How a compile whose process ended as `end` was stopped: interrupted by the signal the
    /// caller's handler recorded, or cancelled for its reason; `None` when it was not stopped.
    pub fn stopped(&self, end: End) -> Option<Status> {
        let cancel = &self.options.cancel;
        match cancel.status() {
            Some(s) if cancel.signal().is_some() || matches!(end, End::Cancelled(_)) => Some(s),
            _ => None,
        }
    }

    /// When the caller asks for it ([`Options::install_signals`]), nxcc's SIGINT/SIGTERM/SIGHUP
    /// handling from now on: a signal cancels the compile and says which. (A worker about to be
    /// forked must not inherit its thread: the pipeline calls this once its worker exists.)
    pub fn handle_signals(&self) {
        if !self.options.install_signals {
            return;
        }
        if let Ok(s) = crate::run::signals::install() {
            let cancel = self.options.cancel.clone();
            s.on_signal(move |sig| cancel.interrupt(sig));
        }
    }

    /// The compile is over: its last event.
    pub fn done(&self, result: &CompileResult) {
        self.emit(&Event::Done {
            exit_status: result.exit_status(),
            status: Some(result.status.clone()),
        });
    }
}
