//! One compile request, from its arguments to its end, as the daemon runs it (on a blocking
//! thread): make the working directory, parse the arguments as `compile` does, plan the compile
//! as if launched in the working directory (nothing ever `chdir`s), wait for admission (arrival
//! order with backfilling, the concurrency limit, the memory budget: [`crate::admission`]), run it through the [`Engine`], and report.
//!
//! Every line the compile prints goes to an [`Emit`] (the `/v1/compile` stream, or nowhere: the
//! compile's log file in its working directory has them all), and so does every worker event.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::engine::{CacheUse, Engine};
use super::memo::{Memo, MemoProbe};
use crate::admission::Admission;
use crate::cli::{self, Command};
use crate::engine::events::Event;
use crate::engine::log::Console;
use crate::engine::session::{Cancellation, Options};
use crate::plan::{Invocation, Refusal, RequestProbe, SystemProbe};
use crate::result::{CancelReason, Environment, Failure, Status};

/// A compile request, as the HTTP layer validated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The compile arguments, with or without a leading `compile`.
    pub argv: Vec<String>,
    /// Absolute; created if missing. Relative paths in `argv` are taken against it.
    pub working_directory: PathBuf,
    /// Extra environment for the compile's worker and tools.
    pub env: Vec<(String, String)>,
}

/// Where a compile's console lines and events go.
pub trait Emit: Send + Sync {
    /// One console line (`stderr`: it belongs on stderr).
    fn log(&self, line: &str, stderr: bool);
    /// One worker event.
    fn event(&self, event: &Event);
    /// What runs the compile, said before anything else.
    fn engine(&self, _named: &crate::cache::EngineIdentity) {}
    /// The toolchain the compile runs with, said once it is planned.
    fn toolchain(&self, _named: &crate::cache::ToolchainIdentity) {}
    /// The compile is over (after the daemon counted it), as it ended.
    fn done(&self, _ended: &Ended) {}
}

/// Lines and events go nowhere.
#[derive(Debug, Default)]
pub struct Discard;

impl Emit for Discard {
    fn log(&self, _: &str, _: bool) {}
    fn event(&self, _: &Event) {}
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Running,
    Done,
}

/// How many compiles are queued and running, kept as their phases change (read without a lock).
#[derive(Debug, Default)]
pub struct PhaseCounts {
    queued: AtomicUsize,
    running: AtomicUsize,
}

impl PhaseCounts {
    /// (running, queued).
    pub fn get(&self) -> (usize, usize) {
        (
            self.running.load(Ordering::SeqCst),
            self.queued.load(Ordering::SeqCst),
        )
    }
}

/// A compile's handle for whoever may cancel it (its client going away, the daemon stopping).
#[derive(Debug)]
pub struct Control {
    /// The compile's cancellation, and why (a signal, or its client gone).
    cancel: Cancellation,
    phase: Mutex<Phase>,
    counts: Arc<PhaseCounts>,
}

impl Control {
    /// A compile's control, counted in no phase counts (tests, one-off runs).
    pub fn new() -> Arc<Control> {
        Control::counted(Arc::default())
    }

    /// A queued compile, counted in `counts` as its phase changes.
    pub fn counted(counts: Arc<PhaseCounts>) -> Arc<Control> {
        counts.queued.fetch_add(1, Ordering::SeqCst);
        Arc::new(Control {
            cancel: Cancellation::new(),
            phase: Mutex::new(Phase::Queued),
            counts,
        })
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cancel the compile (idempotent). `signal` (0 for none: its client went away) is what the
    /// compile reports it was interrupted by.
    pub fn cancel(&self, signal: i32) {
        match signal {
            0 => self.cancel.cancel(CancelReason::ClientGone),
            sig => self.cancel.interrupt(sig),
        }
    }

    /// Cancel the compile if it has not started yet; says whether it was cancelled.
    pub fn cancel_if_queued(&self, signal: i32) -> bool {
        let phase = self.phase();
        if *phase == Phase::Queued {
            self.cancel(signal);
            true
        } else {
            false
        }
    }

    /// Whether the compile was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Whether the compile holds an admission place and runs.
    pub fn is_running(&self) -> bool {
        *self.phase() == Phase::Running
    }

    /// Whether the compile still waits for admission.
    pub fn is_queued(&self) -> bool {
        *self.phase() == Phase::Queued
    }

    /// Queued → running, unless cancelled meanwhile.
    fn start(&self) -> bool {
        let mut phase = self.phase();
        if self.cancel.is_cancelled() {
            return false;
        }
        *phase = Phase::Running;
        self.counts.queued.fetch_sub(1, Ordering::SeqCst);
        self.counts.running.fetch_add(1, Ordering::SeqCst);
        true
    }

    fn finish(&self) {
        let mut phase = self.phase();
        match *phase {
            Phase::Queued => self.counts.queued.fetch_sub(1, Ordering::SeqCst),
            Phase::Running => self.counts.running.fetch_sub(1, Ordering::SeqCst),
            Phase::Done => 0,
        };
        *phase = Phase::Done;
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// How the compile ended (its exit status is what the client gets).
    pub status: Status,
    /// The error lines reported, in order.
    pub error_lines: Vec<String>,
    /// The NEFF the compile writes (when it got as far as a plan).
    pub output: Option<PathBuf>,
    /// Whether the cache served it, ran it, or was not used.
    pub cache: CacheUse,
    /// From admission to the end (zero when it never started).
    pub wall: Duration,
}

/// What a compile needs from the daemon.
pub struct Context<'a> {
    /// What runs the compile.
    pub engine: &'a dyn Engine,
    /// The daemon's admission control, which the compile waits on.
    pub admission: &'a Arc<Admission>,
    /// The daemon's fork server, which starts the compile's worker (`None`: re-executed).
    pub fork_server: Option<&'a Arc<crate::forkserver::ForkServer>>,
    /// What the daemon keeps between requests (the probes' readings).
    pub memo: &'a Memo,
}

/// The command line for `cli::parse`: the arguments as given when they already name the
/// subcommand (`compile ...`, `--target=trn1 compile ...`), else with `compile` in front.
pub fn command_line(argv: &[String]) -> Vec<String> {
    if argv.first().is_some_and(|a| a == "compile") {
        return argv.to_vec();
    }
    if argv.iter().any(|a| a == "compile")
        && matches!(cli::parse("nxcc", argv), Ok(Command::Compile(_)))
    {
        return argv.to_vec();
    }
    let mut v = Vec::with_capacity(argv.len() + 1);
    v.push("compile".to_string());
    v.extend(argv.iter().cloned());
    v
}

impl Ended {
    /// The exit status the client gets.
    pub fn exit_status(&self) -> i32 {
        self.status.exit_status()
    }

    /// A request that ended before its compile ran.
    pub fn early(status: Status, error_lines: Vec<String>, output: Option<PathBuf>) -> Ended {
        Ended {
            status,
            error_lines,
            output,
            cache: CacheUse::Off,
            wall: Duration::ZERO,
        }
    }
}

/// Report text (one or more lines) on the client's console and as the error lines.
fn fail(emit: &dyn Emit, status: Status, text: &str, output: Option<PathBuf>) -> Ended {
    let lines: Vec<String> = text.trim_end().lines().map(str::to_string).collect();
    for l in &lines {
        emit.log(l, true);
    }
    Ended::early(status, lines, output)
}

fn say(emit: &dyn Emit, text: &str) -> Ended {
    for l in text.trim_end_matches('\n').lines() {
        emit.log(l, false);
    }
    Ended::early(Status::Succeeded, Vec::new(), None)
}

/// Run one request to its end. Blocking.
pub fn run(ctx: &Context, req: &Request, emit: &Arc<dyn Emit>, control: &Control) -> Ended {
    /// Done however the run ends (a panic included), so the phase counts stay true.
    struct Finish<'a>(&'a Control);
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            self.0.finish();
        }
    }
    let _finish = Finish(control);
    run_inner(ctx, req, emit, control)
}

fn run_inner(ctx: &Context, req: &Request, emit: &Arc<dyn Emit>, control: &Control) -> Ended {
    // First, what runs it: a client that writes the compile's reproducer names that engine,
    // however early the compile ends.
    emit.engine(&ctx.engine.identity());
    match planned(req, ctx.memo, emit.as_ref()) {
        Ok(inv) => compile(ctx, req, emit, control, &inv),
        Err(ended) => *ended,
    }
}

/// The request's invocation; or how the request ended without one (its working directory not
/// made, a usage error, help, the version, a plan refused, a dry run).
fn planned(req: &Request, memo: &Memo, emit: &dyn Emit) -> Result<Invocation, Box<Ended>> {
    let wd = &req.working_directory;
    if let Err(e) = std::fs::create_dir_all(wd) {
        return Err(Box::new(fail(
            emit,
            Status::Failed(Failure::Environment(Environment::WorkingDirectory)),
            &format!(
                "[ERROR] cannot create the working directory {}: {e}",
                wd.display()
            ),
            None,
        )));
    }
    invoke_request(req, memo, emit)
}

/// The request's invocation, its argv lowered by the front door as if launched in its working
/// directory (made or not); or how the request ended without one (a usage error, help, the
/// version, a plan refused, a dry run), its lines to `emit`.
pub fn invoke_request(
    req: &Request,
    memo: &Memo,
    emit: &dyn Emit,
) -> Result<Invocation, Box<Ended>> {
    let wd = &req.working_directory;
    let probe = MemoProbe {
        probe: RequestProbe {
            system: SystemProbe::at(wd),
            env: &req.env,
        },
        memo,
    };
    let inv = Invocation::from_argv("nxcc", &command_line(&req.argv), &probe)
        .map_err(|r| Box::new(refused(emit, &r)))?;
    match crate::compile::dry_run(&inv) {
        Some(Ok(text)) => Err(Box::new(say(emit, &text))),
        Some(Err(error)) => {
            let hints = Vec::new();
            Err(Box::new(refused(emit, &Refusal::Plan { error, hints })))
        }
        None => Ok(inv),
    }
}

/// A request the front door refused, as the daemon answers it: help and the version said, any
/// other refusal failed with its text.
fn refused(emit: &dyn Emit, r: &Refusal) -> Ended {
    let text = match r {
        Refusal::Help(text) => return say(emit, text),
        Refusal::Version => {
            let text = format!(
                "nxcc {}\nreproduces the {} compile driver\n",
                crate::VERSION,
                crate::ORIGINAL_VERSION
            );
            return say(emit, &text);
        }
        Refusal::NotACompile(name) => {
            format!("nxcc daemon: error: only compile requests are served, not {name}")
        }
        other => other.render(),
    };
    let failure = r.failure().unwrap_or(Failure::Usage);
    fail(emit, Status::Failed(failure), &text, None)
}

/// Compile the request's plan once admission lets it start (cancelled before it starts when
/// its client went away or the daemon is stopping), its lines and events to `emit`.
fn compile(
    ctx: &Context,
    req: &Request,
    emit: &Arc<dyn Emit>,
    control: &Control,
    invocation: &Invocation,
) -> Ended {
    let emit_ref: &dyn Emit = emit.as_ref();
    let output = Some(invocation.plan.output.clone());
    let prepared = ctx.engine.prepare(invocation);
    // A client that writes the compile's reproducer names this toolchain (the daemon's own
    // when the request names none), as the compile's key records it.
    emit.toolchain(&ctx.engine.toolchain(invocation, &prepared));
    let estimate = prepared.estimate;
    let permit = if control.is_cancelled() {
        None
    } else {
        ctx.admission.acquire(estimate, Some(control.cancel.flag()))
    };
    if permit.is_none() || !control.start() {
        return fail(
            emit_ref,
            control
                .cancel
                .status()
                .unwrap_or(Status::Cancelled(CancelReason::Stopped)),
            "[ERROR] The compile was cancelled before it started (its client went away, or the daemon is stopping).",
            output,
        );
    }
    let started = Instant::now();
    let sink_emit = emit.clone();
    let sink: crate::engine::log::Sink = Arc::new(move |line: &str, stderr: bool| {
        sink_emit.log(line, stderr);
    });
    let on_event = |ev: &Event| emit_ref.event(ev);
    let opts = Options {
        console: Console::Sink(sink),
        cancel: control.cancel.clone(),
        worker_env: req.env.clone(),
        on_event: Some(&on_event),
        worker_program: None,
        // Many compiles share this process: leftovers are found by each worker's session.
        sole_compile: false,
        install_signals: false,
        fork_server: ctx.fork_server.cloned(),
        work_root: None,
        private_model: false,
    };
    let finished = ctx.engine.run(invocation, prepared, opts);
    drop(permit);
    Ended {
        status: finished.result.status,
        error_lines: finished.result.lines,
        output,
        cache: finished.cache.into(),
        wall: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_subcommand_is_optional() {
        assert_eq!(
            command_line(&v("compile m.pb --target trn1")),
            v("compile m.pb --target trn1")
        );
        assert_eq!(
            command_line(&v("m.pb --target trn1")),
            v("compile m.pb --target trn1")
        );
        assert_eq!(
            command_line(&v("--target=trn1 compile m.pb")),
            v("--target=trn1 compile m.pb")
        );
        assert_eq!(command_line(&[]), v("compile"));
    }

    #[derive(Default)]
    struct Collect(Mutex<Vec<(String, bool)>>);
    impl Emit for Collect {
        fn log(&self, line: &str, stderr: bool) {
            self.0.lock().unwrap().push((line.to_string(), stderr));
        }
        fn event(&self, _: &Event) {}
    }

    fn run_argv(argv: &str, wd: &Path) -> (Ended, Vec<(String, bool)>) {
        let engine = super::super::engine::select(&Default::default()).unwrap();
        let admission = Admission::new(1, None);
        let ctx = Context {
            engine: engine.as_ref(),
            admission: &admission,
            fork_server: None,
            memo: &Memo::default(),
        };
        let collect = Arc::new(Collect::default());
        let emit: Arc<dyn Emit> = collect.clone();
        let req = Request {
            argv: v(argv),
            working_directory: wd.to_path_buf(),
            env: Vec::new(),
        };
        let control = Control::new();
        let e = run(&ctx, &req, &emit, &control);
        assert!(!control.is_running() && !control.is_queued());
        let lines = collect.0.lock().unwrap().clone();
        (e, lines)
    }

    #[test]
    fn early_answers_need_no_worker() {
        let dir = tempfile::tempdir().unwrap();
        let wd = dir.path().join("new/dir");
        // Usage error: exit 2, argparse's text on stderr; the working directory is created.
        let (e, lines) = run_argv("m.pb --target trn1 --bogus", &wd);
        assert_eq!(e.exit_status(), 2);
        assert!(wd.is_dir());
        assert!(lines.iter().all(|(_, err)| *err));
        assert!(
            e.error_lines[0].contains("NCC_EARG002"),
            "{:?}",
            e.error_lines
        );
        // A validation error from the plan: exit 70.
        std::fs::write(wd.join("m.pb"), b"\x0a\x03abc").unwrap();
        let (e, _) = run_argv("m.pb --target trn1 --lnc 2", &wd);
        assert_eq!(e.exit_status(), 70);
        assert!(
            e.error_lines[0].contains("Logical Neuron Core size 2"),
            "{:?}",
            e.error_lines
        );
        // Relative paths are the working directory's: m.pb is found there, missing.pb is not.
        let (e, _) = run_argv("missing.pb --target trn1", &wd);
        assert_eq!(e.exit_status(), 70);
        assert!(
            e.error_lines[0].contains("missing.pb doesn't exist"),
            "{:?}",
            e.error_lines
        );
        // A dry run prints the plan on stdout and runs nothing.
        let (e, lines) = run_argv("compile m.pb --target trn1 --dry-run=json", &wd);
        assert_eq!(e.exit_status(), 0);
        let text: String = lines.iter().map(|(l, _)| format!("{l}\n")).collect();
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(j["output"], wd.join("file.neff").display().to_string());
        assert!(!wd.join("file.neff").exists());
        // Help.
        let (e, lines) = run_argv("--help", &wd);
        assert_eq!(e.exit_status(), 0);
        assert!(lines[0].0.starts_with("usage: nxcc compile"), "{lines:?}");
        // Other subcommands are not served.
        let (e, _) = run_argv("neff-info x.neff", &wd);
        assert_eq!(e.exit_status(), 2);
    }

    #[test]
    fn a_cancelled_queued_compile_never_starts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.pb"), b"\x0a\x03abc").unwrap();
        let engine = super::super::engine::select(&Default::default()).unwrap();
        let admission = Admission::new(1, None);
        let held = admission.acquire(1, None).unwrap();
        let watched = admission.clone();
        let counts: Arc<PhaseCounts> = Arc::default();
        let control = Control::counted(counts.clone());
        assert_eq!(counts.get(), (0, 1), "queued from the start");
        let c2 = control.clone();
        let dir_path = dir.path().to_path_buf();
        let t = std::thread::spawn(move || {
            let ctx = Context {
                engine: engine.as_ref(),
                admission: &admission,
                fork_server: None,
                memo: &Memo::default(),
            };
            let emit: Arc<dyn Emit> = Arc::new(Discard);
            let req = Request {
                argv: v("m.pb --target trn1 --no_cache"),
                working_directory: dir_path,
                env: Vec::new(),
            };
            run(&ctx, &req, &emit, &c2)
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while watched.snapshot().queued == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(control.is_queued());
        assert!(control.cancel_if_queued(libc::SIGINT));
        let e = t.join().unwrap();
        assert_eq!(e.exit_status(), 130);
        assert!(e.error_lines[0].contains("cancelled before it started"));
        assert!(!control.cancel_if_queued(libc::SIGINT), "done, not queued");
        assert_eq!(counts.get(), (0, 0));
        drop(held);
    }
}
