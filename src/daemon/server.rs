//! The daemon process: it takes the pid file, binds the socket, serves connections with hyper on
//! a tokio runtime, and stops cleanly.
//!
//! - Starting: the engine for `--cache_dir`/`--compiler`, the default directory checked private,
//!   the log, the pid file locked, the socket bound, the pid published — any failure is one
//!   message and exit status 1 (2 for a usage error).
//! - Serving: each accepted connection's peer is checked at once ([`super::peer`]: refused ones
//!   get one short answer, after their request head, that they can read
//!   ([`super::conn::refuse`])); the admitted ones are served by
//!   [`super::conn`]; each compile runs on a blocking thread ([`super::job::run`]), registered in
//!   [`super::state`] so it can be cancelled.
//! - Stopping (`POST /exit`, SIGTERM, SIGINT, SIGHUP, inactivity): stop accepting and remove the
//!   socket, cancel the compiles still queued, let the running ones finish for at most
//!   `--shutdown-grace` (then cancel them as on SIGTERM), let the connections deliver their last
//!   answers, remove the pid file. A second signal cancels the running compiles at once.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::config::{self, Config, Endpoint};
use super::conn::{self, serve_connection, Connections};
use super::engine;
use super::listen::{self, BindError};
use super::log::DaemonLog;
use super::pidfile::{self, Lock, PidFile};
use super::state::Daemon;

/// The exit status of a daemon that could not start (another one holds its place, a socket or
/// log that cannot be opened).
pub const EXIT_START_FAILED: i32 = 1;
/// How long cancelled compiles get to wind down when the daemon stops (cancellation takes ≤ 6 s).
const CANCEL_WAIT: Duration = Duration::from_secs(15);
/// How long connections get to deliver their last answers when the daemon stops.
const DRAIN_WAIT: Duration = Duration::from_secs(5);

async fn watch_signals(daemon: Arc<Daemon>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        daemon
            .log
            .error("cannot handle SIGTERM/SIGINT/SIGHUP; the daemon stops only by POST /exit");
        return;
    };
    let mut seen = 0;
    // A stop signal that came before these streams existed (the socket already listened).
    if let Some(name) = early_signals::caught() {
        seen += 1;
        daemon.request_stop(name);
    }
    loop {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = hup.recv() => "SIGHUP",
        };
        seen += 1;
        if seen == 1 {
            daemon.request_stop(name);
        } else {
            let n = daemon.cancel_all();
            daemon.log.info(&format!(
                "{name} again: cancelling the {n} compile(s) still running"
            ));
        }
    }
}

async fn watch_inactivity(daemon: Arc<Daemon>, timeout: Duration) {
    let mut stop = daemon.stop_signal();
    loop {
        let wait = match daemon.idle_since() {
            None => timeout,
            Some(since) => {
                let idle = since.elapsed();
                if idle >= timeout {
                    daemon.request_stop(&format!(
                        "no request for {} s (--inactivity-timeout)",
                        timeout.as_secs_f64()
                    ));
                    return;
                }
                timeout - idle
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| s.is_some()) => return,
        }
    }
}

/// Log the refusals counted but not yet logged, once per interval.
async fn flush_refusals(daemon: Arc<Daemon>) {
    let mut tick = tokio::time::interval(super::peer::REFUSAL_LOG_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for line in daemon.gate.flush_refusals(std::time::Instant::now()) {
            daemon.log.warning(&line);
        }
    }
}

/// Check a connection just accepted: serve it, or answer and close it at once.
fn admit(daemon: &Arc<Daemon>, stream: tokio::net::UnixStream, conns: &Arc<Connections>) {
    let peer = match conn::peer_of(&stream) {
        Ok(p) => p,
        Err(e) => {
            daemon
                .log
                .warning(&format!("cannot read a connection's credentials: {e}"));
            return;
        }
    };
    match daemon.gate.admit(peer.uid) {
        Ok(ticket) => {
            conns.open.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve_connection(
                daemon.clone(),
                stream,
                peer,
                ticket,
                conns.clone(),
            ));
        }
        Err(why) => {
            conn::refuse(daemon, stream, &peer, why, conns);
            if let Some(line) = daemon
                .gate
                .note_refusal(why, &peer, std::time::Instant::now())
            {
                daemon.log.warning(&line);
            }
        }
    }
}

async fn serve(
    daemon: Arc<Daemon>,
    listener: tokio::net::UnixListener,
    socket: Option<&listen::SocketFile>,
) {
    tokio::spawn(watch_signals(daemon.clone()));
    tokio::spawn(flush_refusals(daemon.clone()));
    if let Some(t) = daemon.config.inactivity_timeout {
        tokio::spawn(watch_inactivity(daemon.clone(), t));
    }
    let conns = Arc::new(Connections::default());
    let mut stop = daemon.stop_signal();
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| s.is_some()) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => admit(&daemon, stream, &conns),
                Err(e) => {
                    // Out of descriptors, most likely: let connections finish, then go on.
                    daemon.log.warning(&format!("accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    drop(listener);
    if let Some(s) = socket {
        s.remove();
    }
    let queued = daemon.cancel_queued();
    let (running, _) = daemon.counts();
    daemon.log.info(&format!(
        "no longer accepting connections; {running} compile(s) running, {queued} queued compile(s) cancelled"
    ));
    let grace = daemon.config.shutdown_grace;
    if !daemon.wait_for_compiles(grace).await {
        let n = daemon.cancel_all();
        daemon.log.info(&format!(
            "cancelling the {n} compile(s) still running after {} s",
            grace.as_secs_f64()
        ));
        if !daemon.wait_for_compiles(CANCEL_WAIT).await {
            daemon
                .log
                .error("compiles are still winding down; exiting anyway");
        }
    }
    let deadline = tokio::time::Instant::now() + DRAIN_WAIT;
    loop {
        let closed = conns.closed.notified();
        if conns.open.load(Ordering::SeqCst) == 0 {
            break;
        }
        if tokio::time::timeout_at(deadline, closed).await.is_err() {
            break;
        }
    }
}

fn start_error(log: Option<&DaemonLog>, text: &str) -> i32 {
    if let Some(l) = log.filter(|l| l.to_file()) {
        l.error(text);
    }
    super::err(&format!("nxcc daemon: error: {text}\n"));
    EXIT_START_FAILED
}

/// Make sure the default directory, when used, is this user's and private before anything is
/// opened in it: without `XDG_RUNTIME_DIR` it lives in `/tmp`, where another user could have made
/// it first.
fn check_default_dir(config: &Config) -> Result<(), String> {
    let dir = config::default_dir();
    let in_dir = |p: &std::path::Path| p.parent() == Some(dir.as_path());
    let used = matches!(&config.endpoint, Endpoint::Path(p) if in_dir(p))
        || in_dir(&config.pid_file)
        || config.log_file.as_deref().is_some_and(in_dir);
    if !used {
        return Ok(());
    }
    pidfile::create_private_dir(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    listen::check_private_dir(&dir).map_err(|e| e.to_string())
}

/// Raise the soft limit of open descriptors to the hard one (at most 65,536): every connection
/// admitted holds two, every compile a few.
fn raise_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    let want = l.maximum.map_or(1 << 16, |m| m.min(1 << 16));
    if l.current.is_some_and(|c| c < want) {
        l.current = Some(want);
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// Run the daemon until it stops; returns the exit status.
pub fn run(config: Config) -> i32 {
    match start_and_serve(config) {
        Ok(status) | Err(status) => status,
    }
}

/// A start-up's end when the daemon cannot start: the exit status (the reason was said).
type NotStarted = i32;

/// The daemon's log (`--log-file`, else stderr).
fn open_log(config: &Config) -> Result<DaemonLog, NotStarted> {
    DaemonLog::open(config.log_file.as_deref()).map_err(|e| {
        let file = config
            .log_file
            .as_deref()
            .unwrap_or(std::path::Path::new(""));
        start_error(
            None,
            &format!("cannot open the log file {}: {e}", file.display()),
        )
    })
}

/// The fork server started before any thread, kept by the daemon (or why there is none, logged).
fn adopt_fork_server(
    daemon: &Daemon,
    fork_server: io::Result<std::sync::Arc<crate::forkserver::ForkServer>>,
) {
    match fork_server {
        Ok(f) => {
            daemon.log.info(&format!(
                "fork server (pid {}) starts the compiles' workers",
                f.helper_pid().unwrap_or(0)
            ));
            let _ = daemon.fork_server.set(f);
        }
        Err(e) => daemon.log.info(&format!(
            "no fork server ({e}): every compile's worker is nxcc re-executed"
        )),
    }
}

/// The daemon's phases: its engine, its log, its pid file, its socket, the fork server (before
/// any thread), the runtime, then serving until it stops.
fn start_and_serve(config: Config) -> Result<i32, NotStarted> {
    raise_descriptor_limit();
    let engine = engine::select(&config.engine).map_err(|e| {
        super::err(&config::usage_error("nxcc", e));
        crate::cli::CliError::EXIT_STATUS
    })?;
    check_default_dir(&config).map_err(|e| start_error(None, &e))?;
    let log = open_log(&config)?;
    let mut pid_file = take_pid_file(&config, &log)?;
    let pid = std::process::id();
    // Before any thread: the fork server that starts every compile's worker (without it, each
    // worker is this binary re-executed). Before the early signal handler too: its helper and
    // the workers it forks keep the default dispositions.
    let fork_server = crate::engine::handoff::start_fork_server();
    // Before the socket listens: a stop signal sent as soon as it answers is kept, not fatal.
    early_signals::catch();
    let (std_listener, socket_file, endpoint) = bind(&config, &log, pid)?;
    let give_up = |text: String| {
        if let Some(s) = &socket_file {
            s.remove();
        }
        start_error(Some(&log), &text)
    };
    if let Err(e) = pid_file.publish(pid, &endpoint) {
        return Err(give_up(format!(
            "cannot write the pid file {}: {e}",
            config.pid_file.display()
        )));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("nxcc-daemon")
        .enable_all()
        .build()
        .map_err(|e| give_up(format!("cannot start the runtime: {e}")))?;
    let uid = rustix::process::getuid().as_raw();
    log.info(&serving_line(
        &config,
        pid,
        &pid_file,
        &endpoint,
        uid,
        engine.describe(),
    ));
    let daemon = Daemon::new(config, engine, log, uid, endpoint);
    adopt_fork_server(&daemon, fork_server);
    let served = runtime.block_on(async {
        std_listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(std_listener)?;
        serve(daemon.clone(), listener, socket_file.as_ref()).await;
        Ok::<(), io::Error>(())
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    if let Some(f) = daemon.fork_server.get() {
        f.stop(Duration::from_secs(2));
    }
    if let Some(s) = &socket_file {
        // Already gone when serving stopped normally.
        s.remove();
    }
    drop(pid_file);
    match served {
        Ok(()) => {
            daemon.log.info("stopped");
            Ok(0)
        }
        Err(e) => {
            daemon.log.error(&format!("cannot serve: {e}"));
            Ok(EXIT_START_FAILED)
        }
    }
}

/// The pid file, taken (another daemon holding it is named).
fn take_pid_file(config: &Config, log: &DaemonLog) -> Result<PidFile, NotStarted> {
    match pidfile::lock(&config.pid_file) {
        Ok(Lock::Acquired(p)) => Ok(p),
        Ok(Lock::Held(h)) => Err(start_error(
            Some(log),
            &format!(
                "another nxcc daemon (pid {}) is running on {}: it holds the pid file {}; stop it first: {}",
                h.pid.map_or("unknown".to_string(), |p| p.to_string()),
                h.socket.as_deref().unwrap_or("an unknown socket"),
                config.pid_file.display(),
                stop_command(config, h.pid, h.socket.as_deref()),
            ),
        )),
        Err(e) => Err(start_error(
            Some(log),
            &format!("cannot take the pid file {}: {e}", config.pid_file.display()),
        )),
    }
}

/// How to stop the daemon holding `config`'s pid file, whose pid file says it is `pid` on
/// `socket`: `nxcc daemon stop --socket ...` for a socket file; `kill PID` for a daemon on an
/// abstract address (no file `stop` could reach it by).
fn stop_command(config: &Config, pid: Option<u32>, socket: Option<&str>) -> String {
    let quote = |p: &std::path::Path| crate::shell::quote(&p.to_string_lossy());
    match socket.map(std::path::Path::new).filter(|s| s.is_absolute()) {
        Some(s) if config::pid_file_for(s) == config.pid_file => {
            format!("nxcc daemon stop --socket {}", quote(s))
        }
        Some(s) => format!(
            "nxcc daemon stop --socket {} --pid-file {}",
            quote(s),
            quote(&config.pid_file)
        ),
        None => format!("kill {}", pid.map_or("it".to_string(), |p| p.to_string())),
    }
}

/// The socket, bound: its listener, its file (`None`: abstract), and how it is named.
fn bind(
    config: &Config,
    log: &DaemonLog,
    pid: u32,
) -> Result<
    (
        std::os::unix::net::UnixListener,
        Option<listen::SocketFile>,
        String,
    ),
    NotStarted,
> {
    let bound = match &config.endpoint {
        Endpoint::Path(p) => listen::bind_path(p, config.socket_mode)
            .map(|(l, f)| (l, Some(f), p.display().to_string())),
        Endpoint::Abstract => {
            let name = listen::abstract_name(pid);
            listen::bind_abstract(&name).map(|l| (l, None, format!("@{name}")))
        }
    };
    bound.map_err(|e| match e {
        e @ BindError::InUse(_) => start_error(
            Some(log),
            &format!(
                "{e} (not the daemon of the pid file {})",
                config.pid_file.display()
            ),
        ),
        e => start_error(Some(log), &e.to_string()),
    })
}

/// The log's first line: what the daemon serves, where, and its limits.
fn serving_line(
    config: &Config,
    pid: u32,
    pid_file: &PidFile,
    endpoint: &str,
    uid: u32,
    engine: String,
) -> String {
    let served_uids: Vec<String> = std::iter::once(uid)
        .chain(config.allow_uids.iter().copied())
        .map(|u| u.to_string())
        .collect();
    format!(
        "nxcc daemon {} (pid {pid}) serving {endpoint}; pid file {}; up to {} compile(s) at once; memory budget {}; inactivity timeout {}; uids served: {}; connections: at most {} ({} per uid); engine: {engine}",
        crate::VERSION,
        pid_file.path().display(),
        config.max_concurrent,
        config
            .memory_budget
            .map_or("none".to_string(), |b| format!("{} MiB", b >> 20)),
        config
            .inactivity_timeout
            .map_or("none".to_string(), |d| format!("{} s", d.as_secs_f64())),
        served_uids.join(", "),
        config.max_connections,
        config.max_connections_per_uid,
    )
}

/// Stop signals between the socket's first listen and the signal streams of
/// [`watch_signals`]: without a handler they would kill the daemon before its cleanup.
mod early_signals {
    use std::sync::atomic::{AtomicI32, Ordering};

    static CAUGHT: AtomicI32 = AtomicI32::new(0);

    extern "C" fn record(sig: libc::c_int) {
        // Async-signal-safe: one atomic store.
        let _ = CAUGHT.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Record SIGTERM, SIGINT and SIGHUP until the streams replace this handler.
    pub fn catch() {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            // SAFETY: `record` only stores into an atomic, which is async-signal-safe; the
            // action is fully initialised before it is installed.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut action.sa_mask);
                action.sa_flags = libc::SA_RESTART;
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    }

    /// The name of the first stop signal caught, if one was.
    pub fn caught() -> Option<&'static str> {
        match CAUGHT.load(Ordering::SeqCst) {
            libc::SIGTERM => Some("SIGTERM"),
            libc::SIGINT => Some("SIGINT"),
            libc::SIGHUP => Some("SIGHUP"),
            _ => None,
        }
    }
}
