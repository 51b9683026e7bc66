//! `nxcc worker --remote grpc://HOST:PORT`: a bot of the Remote Workers API. It advertises its
//! platform (`OSFamily`, `ISA`, the toolchain identity), holds `--max-concurrent` bot sessions
//! (the server hands one lease per session), and runs each lease's action through the one
//! admission ([`crate::admission`]: `--memory-budget`, the cache's estimates) in a fresh
//! directory ([`job`]: only compile actions, checked whole before anything is created, with the
//! environment allow-list of [`crate::environ`], within the action's timeout, compiled through
//! the one entry point (`nxcc::compile`, handed down by the driver) on nxcc's pipeline or
//! `--compiler PATH`, and answered from the compile's typed result; refusals answered with the
//! status code that says why, [`status`]). The input tree is judged before it is laid out ([`tree`]). While a
//! lease runs, the bot keeps its session alive and obeys the server: a lease it cancels ends
//! the compile ([`lease`]). SIGTERM (or SIGINT) drains: no new leases; the running ones have
//! `--drain-timeout` to finish and be reported, then are ended (reported `UNAVAILABLE`, so the
//! server gives them to another worker); a second signal ends them at once; then exit 0. A
//! server that goes away (a restart) is waited for: the sessions are made again.

pub mod job;
pub mod lease;
pub mod status;
pub mod tree;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::action::{self, OUTPUT, PROGRAM};
use super::bots::{self, BotSession, BotStatus, Device, LeaseState, Property};
use super::client::{Address, Remote, RemoteError};
use super::retry::Backoff;
use crate::admission::Admission;
use crate::cli::subcommand::values;
use crate::engine::Engine;
use crate::toolchain::Request;
use lease::{Ended, Running};

/// How long a poll for a lease waits (BuildGrid answers with a lease or at the deadline).
pub const POLL: Duration = Duration::from_secs(5);

/// How long running compiles may go on after SIGTERM unless `--drain-timeout` says otherwise.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest pause between two attempts to make a session with a server that went away.
const SESSION_PAUSE_MAX: Duration = Duration::from_secs(5);

/// Run compile actions for a Remote Execution API server (the Remote Workers API).
#[derive(Debug, clap::Parser)]
pub(crate) struct WorkerCommand {
    /// The server's bots service: grpc://HOST:PORT.
    #[arg(long, value_name = "URL")]
    pub(crate) remote: String,
    /// The instance name (default: the server's default).
    #[arg(long = "remote-instance", value_name = "NAME", default_value = "")]
    pub(crate) remote_instance: String,
    /// Leases held at once (one bot session each), 1 to 256.
    #[arg(long = "max-concurrent", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) max_concurrent: u16,
    /// Run an action only while the estimated peak memory of the running ones plus its own fits
    /// (512M, 16G, ...; auto = 80% of MemAvailable).
    #[arg(long = "memory-budget", value_name = "SIZE", value_parser = values::budget)]
    pub(crate) memory_budget: Option<u64>,
    /// Compile with this toolchain directory, or sim (the simulated toolchain).
    #[arg(long, value_name = "DIR", conflicts_with = "compiler")]
    pub(crate) toolchain: Option<String>,
    /// Compile with this external compiler (PATH compile <args> --output model.neff).
    #[arg(long, value_name = "PATH")]
    pub(crate) compiler: Option<String>,
    /// Where each action gets its fresh directory (default: a private temporary directory).
    #[arg(long = "work-dir", value_name = "DIR")]
    pub(crate) work_dir: Option<String>,
    /// The bot id prefix (default: HOST-PID).
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// Seconds running compiles may take to finish after SIGTERM before they are ended and given
    /// back to the server (a second signal ends them at once).
    #[arg(long = "drain-timeout", value_name = "SECONDS", value_parser = positive_seconds, default_value = "60")]
    pub(crate) drain_timeout: Duration,
    /// The longest an action may run, in seconds (an action's own timeout is lowered to it; one
    /// without gets it). Default: the action's timeout, or none.
    #[arg(long = "max-timeout", value_name = "SECONDS", value_parser = positive_seconds)]
    pub(crate) max_timeout: Option<Duration>,
    /// The most an action's input tree may hold, as laid out (512M, 16G, ...; default 32G);
    /// larger ones are refused before anything is created.
    #[arg(long = "max-input-bytes", value_name = "SIZE", value_parser = values::size)]
    pub(crate) max_input_bytes: Option<u64>,
    /// Accept the simulated toolchain's NXCC_SIM_* variables in actions (tests).
    #[arg(long = "allow-test-env")]
    pub(crate) allow_test_env: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: crate::cli::subcommand::DriverOptions,
}

/// Seconds greater than 0, at most 10^7.
fn positive_seconds(text: &str) -> Result<Duration, String> {
    match crate::cli::subcommand::values::seconds(text)? {
        x if x > 0.0 => Ok(Duration::from_secs_f64(x)),
        x => Err(format!("expected seconds greater than 0, not {x}")),
    }
}

/// What the worker compiles with.
#[derive(Debug, Clone)]
pub enum With {
    /// `nxcc compile --toolchain X` (this executable), X as given.
    Toolchain(String),
    /// `PATH compile ...`.
    Compiler(PathBuf),
}

/// A running worker: what it compiles with, its limits, and its leases.
pub struct Worker {
    address: Address,
    with: With,
    /// The one entry point every action compiles through.
    compile: crate::engine::strategy::Entry,
    toolchain_id: String,
    admission: Arc<Admission>,
    work_dir: PathBuf,
    allow_test_env: bool,
    limits: tree::Limits,
    max_timeout: Option<Duration>,
    drain: Duration,
    /// When draining began, and when the drain time ends (a second signal: now).
    drain_until: Mutex<Option<Instant>>,
    draining: AtomicBool,
    running: AtomicUsize,
    leases: Mutex<HashMap<String, Arc<Running>>>,
    bot_prefix: String,
    log: Mutex<()>,
}

impl Worker {
    /// A line of the worker's log (what a server or an action chose in it — a lease id, a
    /// message — made safe to print).
    fn say(&self, line: &str) {
        let line = super::text::message(line);
        let _g = self.log.lock().unwrap_or_else(|p| p.into_inner());
        eprintln!("nxcc worker: {line}");
    }

    /// The leases running now, by id.
    fn running_leases(&self) -> MutexGuard<'_, HashMap<String, Arc<Running>>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A signal: the first starts draining (the running compiles get `--drain-timeout`), another
    /// ends the drain time now.
    fn signalled(&self) {
        let mut until = self.drain_until.lock().unwrap_or_else(|p| p.into_inner());
        *until = Some(match *until {
            None => Instant::now() + self.drain,
            Some(_) => Instant::now(),
        });
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether the drain time is over.
    fn draining_past_deadline(&self) -> bool {
        let until = self.drain_until.lock().unwrap_or_else(|p| p.into_inner());
        until.is_some_and(|t| Instant::now() >= t)
    }

    /// End the running leases once the drain time is over; until every slot has ended.
    fn watch_drain(&self, done: &AtomicBool) {
        while !done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
            if self.draining_past_deadline() {
                for r in self.running_leases().values() {
                    r.end(Ended::Drained);
                }
            }
        }
    }
}

/// Run `worker`, each action compiled through `compile` (the one entry point, handed down by
/// the driver); returns the exit status.
pub fn main(prog: &str, args: &[String], compile: crate::engine::strategy::Entry) -> i32 {
    let cmd: WorkerCommand = match crate::cli::subcommand::parse(prog, "worker", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    let usage = |m: String| {
        crate::cli::subcommand::usage_error::<WorkerCommand>(prog, "worker", None, m).report()
    };
    let address = match Address::parse(&cmd.remote, &cmd.remote_instance) {
        Ok(a) => a,
        Err(e) => return usage(format!("argument --remote: {e}")),
    };
    let launch = std::env::current_dir().unwrap_or_default();
    let (with, toolchain_id) = match compiler_of(&cmd, &launch) {
        Ok(w) => w,
        Err(e) => return usage(e),
    };
    let own_tmp;
    let work_dir = match &cmd.work_dir {
        Some(d) => {
            let p = crate::fsx::absolute(&launch, d);
            if let Err(e) = std::fs::create_dir_all(&p) {
                return usage(format!(
                    "argument --work-dir: cannot create {}: {e}",
                    p.display()
                ));
            }
            p
        }
        None => match tempfile::Builder::new()
            .prefix("nxcc-worker-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
        {
            Ok(d) => {
                own_tmp = d;
                own_tmp.path().to_path_buf()
            }
            Err(e) => {
                eprintln!("nxcc worker: cannot make a work directory: {e}");
                return nxcc_core::error::EXIT_COMPILE_FAILED;
            }
        },
    };
    let max = usize::from(cmd.max_concurrent);
    let mut limits = tree::Limits::default();
    if let Some(n) = cmd.max_input_bytes {
        limits.bytes = n;
    }
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let worker = Arc::new(Worker {
        address: address.clone(),
        with,
        compile,
        toolchain_id,
        admission: Admission::new(max, cmd.memory_budget),
        work_dir,
        allow_test_env: cmd.allow_test_env,
        limits,
        max_timeout: cmd.max_timeout,
        drain: cmd.drain_timeout,
        drain_until: Mutex::new(None),
        draining: AtomicBool::new(false),
        running: AtomicUsize::new(0),
        leases: Mutex::new(HashMap::new()),
        bot_prefix: cmd
            .name
            .clone()
            .unwrap_or_else(|| format!("{host}-{}", std::process::id())),
        log: Mutex::new(()),
    });
    serve(&worker, max, cmd.memory_budget)
}

/// What the worker compiles with (`--toolchain` or `--compiler`) and its identity; a usage
/// error's message otherwise.
fn compiler_of(cmd: &WorkerCommand, launch: &std::path::Path) -> Result<(With, String), String> {
    match (&cmd.toolchain, &cmd.compiler) {
        (_, Some(c)) => {
            let p = crate::fsx::absolute(launch, c);
            if !p.is_file() {
                return Err(format!(
                    "argument --compiler: {} is not a file",
                    p.display()
                ));
            }
            let id = action::toolchain_id(&Request::Auto, None, &Engine::external(&p));
            Ok((With::Compiler(p), id))
        }
        (t, None) => {
            let req = Request::from(t.as_deref(), None, launch);
            let Some(located) = crate::toolchain::locate(&req) else {
                return Err(
                    "no toolchain found: give --toolchain DIR, --toolchain sim or --compiler PATH"
                        .into(),
                );
            };
            let spelled = match &req {
                Request::Dir(d) => d.display().to_string(),
                Request::Simulated => "sim".to_string(),
                Request::Auto => located.bin.display().to_string(),
            };
            let id = action::toolchain_id(&req, Some(&located), &Engine::Pipeline);
            Ok((With::Toolchain(spelled), id))
        }
    }
}

/// Handle signals (drain), check the server is there, and run the slots until drained; the
/// exit status.
fn serve(worker: &Arc<Worker>, max: usize, budget: Option<u64>) -> i32 {
    match crate::run::signals::install() {
        Ok(sig) => {
            let w = worker.clone();
            sig.on_signal(move |_| w.signalled());
        }
        Err(e) => eprintln!("nxcc worker: warning: signals are not handled ({e})"),
    }
    // Fail fast when the server is not there at all.
    if let Err(e) = Remote::connect(&worker.address) {
        eprintln!("nxcc worker: {e}");
        return nxcc_core::error::EXIT_COMPILE_FAILED;
    }
    worker.say(&format!(
        "serving {} with {} slot(s), memory budget {}, toolchain {}",
        worker.address.url,
        max,
        budget
            .map(crate::hlo::summary::human)
            .unwrap_or_else(|| "none".into()),
        worker.toolchain_id
    ));
    let done = AtomicBool::new(false);
    let status = std::thread::scope(|s| {
        s.spawn(|| worker.watch_drain(&done));
        let handles: Vec<_> = (0..max)
            .map(|i| {
                let w = &**worker;
                s.spawn(move || slot(w, i))
            })
            .collect();
        let mut status = 0;
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    worker.say(&format!("stopped: {e}"));
                    status = nxcc_core::error::EXIT_COMPILE_FAILED;
                }
                Err(_) => status = nxcc_core::error::EXIT_COMPILE_FAILED,
            }
        }
        done.store(true, Ordering::SeqCst);
        status
    });
    if status == 0 {
        worker.say("drained; exiting");
    }
    status
}

fn properties(toolchain_id: &str) -> Vec<Property> {
    action::platform(toolchain_id)
        .properties
        .into_iter()
        .map(|p| Property {
            key: p.name,
            value: p.value,
        })
        .collect()
}

/// One bot session: poll for a lease, run it, report, until drained. A failing server (a
/// restart) costs a new session, made again with backoff for as long as it takes.
fn slot(w: &Worker, index: usize) -> Result<(), RemoteError> {
    let remote = Remote::connect(&w.address)?;
    let bot_id = format!("{}-{index}", w.bot_prefix);
    let fresh = BotSession {
        bot_id: bot_id.clone(),
        status: BotStatus::Ok as i32,
        worker: Some(bots::Worker {
            devices: vec![Device {
                handle: bot_id.clone(),
                properties: properties(&w.toolchain_id),
            }],
            ..Default::default()
        }),
        version: format!("nxcc-{}", crate::VERSION),
        ..Default::default()
    };
    let Some(mut session) = create(&remote, w, &fresh) else {
        return Ok(());
    };
    loop {
        if w.draining.load(Ordering::SeqCst) && session.leases.is_empty() {
            session.status = BotStatus::BotTerminating as i32;
            let _ = remote.update_bot_session(session, Duration::from_secs(2));
            return Ok(());
        }
        match step(w, &remote, &bot_id, session) {
            Ok(s) => session = s,
            Err(e) => {
                w.say(&format!("{bot_id}: {e}; starting a new session"));
                match create(&remote, w, &fresh) {
                    Some(s) => session = s,
                    None => return Ok(()),
                }
            }
        }
    }
}

/// One exchange with the server: accept and run a pending lease and report it, acknowledge a
/// cancelled one, or wait for one.
fn step(
    w: &Worker,
    remote: &Remote,
    bot_id: &str,
    mut session: BotSession,
) -> Result<BotSession, RemoteError> {
    let lease = session.leases.first().cloned();
    match lease {
        Some(l) if l.state == LeaseState::Pending as i32 => {
            let mut accepted = l.clone();
            accepted.state = LeaseState::Active as i32;
            session.leases = vec![accepted.clone()];
            let s = remote.update_bot_session(session, POLL)?;
            if !s
                .leases
                .first()
                .is_some_and(|x| x.id == accepted.id && x.state == LeaseState::Active as i32)
            {
                return Ok(s);
            }
            let done = lease::run(w, remote, bot_id, s.clone(), accepted);
            let mut s = s;
            s.leases = done.into_iter().collect();
            if s.leases.is_empty() {
                // Taken away while it ran: the server gives this session new work afresh.
                return Err(remote.other("the server took the lease away"));
            }
            remote.update_bot_session(s, POLL)
        }
        Some(l) if l.state == LeaseState::Cancelled as i32 => {
            remote.update_bot_session(session, POLL)
        }
        Some(_) | None => {
            session.leases.clear();
            remote.update_bot_session(session, POLL)
        }
    }
}

/// A new session, tried again with backoff until the server answers (`None`: the worker began
/// draining meanwhile).
fn create(remote: &Remote, w: &Worker, s: &BotSession) -> Option<BotSession> {
    let mut backoff = Backoff::new(Duration::MAX);
    loop {
        if w.draining.load(Ordering::SeqCst) {
            return None;
        }
        match remote.create_bot_session(s.clone(), POLL) {
            Ok(s) => return Some(s),
            Err(e) => {
                let pause = backoff
                    .pause()
                    .unwrap_or(SESSION_PAUSE_MAX)
                    .min(SESSION_PAUSE_MAX);
                if backoff.tries() == 1 || backoff.tries().is_multiple_of(10) {
                    w.say(&format!("{}: {e}; trying again", s.bot_id));
                }
                std::thread::sleep(pause);
            }
        }
    }
}

/// A compile action's arguments (after `compile`) must name one model, a plain name in the input
/// root, and set nothing local to a machine ([`crate::cli::semantics`]: where logs, reports, work
/// dirs and caches go, which toolchain, SaveTemps) but the final `--output model.neff`: an action cannot
/// make the worker write outside the action's directory.
pub fn check_compile_args(args: &[String]) -> Result<(), String> {
    let parsed = crate::cli::compile_parser(PROGRAM)
        .parse(args)
        .map_err(|e| format!("the compile arguments do not parse: {e:?}"))?;
    if !parsed.extras.is_empty() {
        return Err(format!(
            "unknown compile arguments: {}",
            crate::shell::join(&parsed.extras)
        ));
    }
    crate::cli::semantics::check(&parsed, |o| {
        o.flag.dest == "output" && o.value.as_str() == Some(OUTPUT)
    })
    .map_err(|e| format!("the action's {e}"))?;
    let models: Vec<&String> = parsed.positionals.iter().flatten().collect();
    match models.as_slice() {
        [m] if !m.is_empty() && !m.contains('/') && *m != "." && *m != ".." => Ok(()),
        _ => Err("a compile action names exactly one model, a plain name in its input root".into()),
    }
}

/// `worker`'s command line as clap defines it (nxcc's completions and manual page).
pub fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<WorkerCommand>(prog, "worker")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_plain_compile_arguments_are_run() {
        assert!(check_compile_args(&v(&[
            "m.pb",
            "--target=trn2",
            "-O1",
            "--output",
            "model.neff"
        ]))
        .is_ok());
        for bad in [
            &["m.pb", "--logfile=/etc/x", "--output", "model.neff"][..],
            &["m.pb", "--timings", "/tmp/t.html", "--output", "model.neff"],
            &["m.pb", "--cache_dir=/x", "--output", "model.neff"],
            &["m.pb", "--output", "/tmp/elsewhere.neff"],
            &["m.pb", "--temp-dir", "/tmp/w", "--output", "model.neff"],
            &["../m.pb", "--output", "model.neff"],
            &["a.pb", "b.pb", "--output", "model.neff"],
            &["m.pb", "--toolchain", "/opt/x", "--output", "model.neff"],
        ] {
            assert!(check_compile_args(&v(bad)).is_err(), "{bad:?}");
        }
    }
}
