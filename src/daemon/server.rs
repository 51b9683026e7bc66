//! The daemon process: it takes the pid file, binds the socket, serves connections with hyper on
//! a tokio runtime, and stops cleanly.
//!
//! - Each connection: the peer's credentials (`SO_PEERCRED`) decide whether it is served; hyper
//!   serves HTTP/1.1 on it with a header read timeout and a bounded head; a request head cut off
//!   (end of stream, or no progress within the timeout) gets a `400`/`408` written after hyper
//!   gives up on it.
//! - Each compile runs on a blocking thread ([`super::job::run`]); the registry of compiles lets
//!   the daemon cancel them.
//! - Stopping (`POST /exit`, SIGTERM, SIGINT, SIGHUP, inactivity): stop accepting and remove the
//!   socket, cancel the compiles still queued, let the running ones finish for at most
//!   `--shutdown-grace` (then cancel them as on SIGTERM), let the connections deliver their last
//!   answers, remove the pid file. A second signal cancels the running compiles at once.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify};

use super::config::{self, Config, Endpoint};
use super::engine::{self, CacheUse, Engine};
use super::http;
use super::job::{self, Control, Emit, Ended};
use super::listen::{self, BindError};
use super::log::DaemonLog;
use super::pidfile::{self, Lock, PidFile};
use crate::admission::Admission;
use crate::error::EXIT_COMPILE_FAILED;

/// The exit status of a daemon that could not start (another one holds its place, a socket or
/// log that cannot be opened).
pub const EXIT_START_FAILED: i32 = 1;
/// How long cancelled compiles get to wind down when the daemon stops (cancellation takes ≤ 6 s).
const CANCEL_WAIT: Duration = Duration::from_secs(15);
/// How long connections get to deliver their last answers when the daemon stops.
const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// Who is on the other end of a connection (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

impl Peer {
    pub fn pid_text(&self) -> String {
        self.pid.map_or_else(|| "?".to_string(), |p| p.to_string())
    }
}

#[derive(Debug)]
struct Activity {
    /// Requests being answered (a streamed answer until its last byte).
    active: usize,
    last_finished: Instant,
}

#[derive(Debug, Default)]
struct Totals {
    compiles: u64,
    failed: u64,
    cancelled: u64,
}

/// The daemon's shared state.
pub struct Daemon {
    pub config: Config,
    pub engine: Arc<dyn Engine>,
    pub admission: Arc<Admission>,
    pub log: DaemonLog,
    /// The daemon's own uid (always served).
    pub uid: u32,
    /// Where it listens, as shown (a path, or `@name` for an abstract address).
    pub endpoint: String,
    started: Instant,
    activity: Mutex<Activity>,
    jobs: Mutex<BTreeMap<u64, Arc<Control>>>,
    jobs_changed: Notify,
    next_job: AtomicU64,
    totals: Mutex<Totals>,
    /// `Some(reason)` once the daemon is stopping.
    stop: watch::Sender<Option<String>>,
}

/// Counts a request as active until dropped.
pub struct ActivityGuard {
    daemon: Arc<Daemon>,
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        let mut a = self.daemon.activity_lock();
        a.active -= 1;
        a.last_finished = Instant::now();
    }
}

impl Daemon {
    fn activity_lock(&self) -> std::sync::MutexGuard<'_, Activity> {
        self.activity.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn jobs_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Control>>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count a request as active for the inactivity timeout.
    pub fn activity(self: &Arc<Self>) -> ActivityGuard {
        self.activity_lock().active += 1;
        ActivityGuard {
            daemon: self.clone(),
        }
    }

    /// Whether a peer uid is served.
    pub fn allowed(&self, uid: u32) -> bool {
        uid == self.uid || self.config.allow_uids.contains(&uid)
    }

    /// ` and 65534, 1000` for the messages, or nothing.
    pub fn allow_list_text(&self) -> String {
        if self.config.allow_uids.is_empty() {
            String::new()
        } else {
            let l: Vec<String> = self
                .config
                .allow_uids
                .iter()
                .map(|u| u.to_string())
                .collect();
            format!(" and {}", l.join(", "))
        }
    }

    pub fn stopping(&self) -> bool {
        self.stop.borrow().is_some()
    }

    /// Begin stopping (idempotent: the first reason is kept).
    pub fn request_stop(&self, reason: &str) {
        let first = self.stop.send_if_modified(|s| {
            if s.is_none() {
                *s = Some(reason.to_string());
                true
            } else {
                false
            }
        });
        if first {
            self.log.info(&format!("stopping: {reason}"));
        }
    }

    /// Whether compile `id` is still registered (not finished).
    pub fn is_registered(&self, id: u64) -> bool {
        self.jobs_lock().contains_key(&id)
    }

    /// Start a compile on a blocking thread; `None` when the daemon is stopping.
    pub fn spawn_compile(
        self: &Arc<Self>,
        request: job::Request,
        emit: Arc<dyn Emit>,
        peer: &Peer,
        route: &str,
    ) -> Option<(u64, Arc<Control>, tokio::task::JoinHandle<Ended>)> {
        let control = Control::new();
        let id = self.next_job.fetch_add(1, Ordering::SeqCst);
        {
            let mut jobs = self.jobs_lock();
            // Checked under the registry's lock: stopping cancels what it finds registered.
            if self.stopping() {
                return None;
            }
            jobs.insert(id, control.clone());
        }
        self.log.info(&format!(
            "compile #{id} ({route}, uid {}, pid {}) in {}: {}",
            peer.uid,
            peer.pid_text(),
            request.working_directory.display(),
            crate::shell::join(&request.argv)
        ));
        let daemon = self.clone();
        let c2 = control.clone();
        let handle = tokio::task::spawn_blocking(move || {
            let ctx = job::Context {
                engine: daemon.engine.as_ref(),
                admission: &daemon.admission,
            };
            let ended = job::run(&ctx, &request, &emit, &c2);
            drop(emit);
            daemon.finished(id, &ended, c2.is_cancelled());
            ended
        });
        Some((id, control, handle))
    }

    fn finished(&self, id: u64, ended: &Ended, cancelled: bool) {
        {
            let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
            t.compiles += 1;
            if cancelled {
                t.cancelled += 1;
            } else if ended.exit_status != 0 {
                t.failed += 1;
            }
        }
        self.log.info(&format!(
            "compile #{id}: exit status {} in {:.3} s{}",
            ended.exit_status,
            ended.wall.as_secs_f64(),
            if cancelled { " (cancelled)" } else { "" }
        ));
        self.jobs_lock().remove(&id);
        self.jobs_changed.notify_waiters();
    }

    /// Wait for a compile's end; a compile thread that panicked is reported as a failure.
    pub async fn join(handle: tokio::task::JoinHandle<Ended>) -> Ended {
        match handle.await {
            Ok(e) => e,
            Err(e) => Ended {
                exit_status: EXIT_COMPILE_FAILED,
                error_lines: vec![format!(
                    "[ERROR] nxcc daemon: the compile ended unexpectedly: {e}"
                )],
                output: None,
                cache: CacheUse::Off,
                wall: Duration::ZERO,
            },
        }
    }

    /// (running, queued) compiles.
    fn counts(&self) -> (usize, usize) {
        let jobs = self.jobs_lock();
        let running = jobs.values().filter(|c| c.is_running()).count();
        (running, jobs.len() - running)
    }

    /// `GET /v1/status`.
    pub fn status(&self) -> Value {
        let (running, queued) = self.counts();
        let snap = self.admission.snapshot();
        let t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        json!({
            "version": crate::VERSION,
            "reproduces": crate::ORIGINAL_VERSION,
            "pid": std::process::id(),
            "socket": self.endpoint,
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "running": running,
            "queued": queued,
            "max_concurrent": snap.max_concurrent,
            "memory": {
                "budget": snap.memory_budget,
                "in_use": snap.memory_in_use,
            },
            "admission": snap,
            "compiles": {
                "finished": t.compiles,
                "failed": t.failed,
                "cancelled": t.cancelled,
            },
            "engine": self.engine.describe(),
            "cache": self.engine.cache_stats(),
            "inactivity_timeout_s": self.config.inactivity_timeout.map(|d| d.as_secs_f64()),
            "stopping": self.stopping(),
        })
    }

    /// Cancel the compiles that have not started; returns how many.
    fn cancel_queued(&self) -> usize {
        self.jobs_lock()
            .values()
            .filter(|c| c.cancel_if_queued(libc::SIGTERM))
            .count()
    }

    /// Cancel every compile, as on SIGTERM; returns how many.
    fn cancel_all(&self) -> usize {
        let jobs = self.jobs_lock();
        for c in jobs.values() {
            c.cancel(libc::SIGTERM);
        }
        jobs.len()
    }

    /// Wait until no compile is registered, or `limit` passed; says whether none is left.
    async fn wait_for_compiles(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.jobs_changed.notified();
            if self.jobs_lock().is_empty() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.jobs_lock().is_empty();
            }
        }
    }
}

/// A stream that notes whether request bytes arrived since the last answer bytes went out —
/// i.e. whether a request is in progress when hyper gives up on the connection.
struct Tapped {
    inner: tokio::net::UnixStream,
    pending: Arc<AtomicBool>,
}

impl AsyncRead for Tapped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.pending.store(true, Ordering::SeqCst);
        }
        r
    }
}

impl AsyncWrite for Tapped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.pending.store(false, Ordering::SeqCst);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.pending.store(false, Ordering::SeqCst);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Write a short answer on a connection hyper has given up on (one non-blocking write).
fn last_word(fd: OwnedFd, status: &str, reason: &str) {
    let s = std::os::unix::net::UnixStream::from(fd);
    let body = format!("{reason}\n");
    let msg = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = (&s).write(msg.as_bytes());
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Counts open connections.
#[derive(Default)]
struct Connections {
    open: AtomicUsize,
    closed: Notify,
}

async fn serve_connection(
    daemon: Arc<Daemon>,
    stream: tokio::net::UnixStream,
    conns: Arc<Connections>,
) {
    let peer = match stream.peer_cred() {
        Ok(c) => Peer {
            uid: c.uid(),
            gid: c.gid(),
            pid: c.pid(),
        },
        Err(e) => {
            daemon
                .log
                .warning(&format!("cannot read a connection's credentials: {e}"));
            return;
        }
    };
    let spare = stream.as_fd().try_clone_to_owned().ok();
    let pending = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Tapped {
        inner: stream,
        pending: pending.clone(),
    });
    let d2 = daemon.clone();
    let svc = service_fn(move |req| http::handle(d2.clone(), peer, req));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(http::HEAD_TIMEOUT)
        .max_buf_size(http::HARD_HEAD_LIMIT)
        .max_header_size(http::HARD_HEAD_LIMIT)
        .keep_alive(true);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let mut stop = daemon.stop.subscribe();
    let mut asked = false;
    let result = loop {
        tokio::select! {
            r = conn.as_mut() => break r,
            _ = stop.wait_for(|s| s.is_some()), if !asked => {
                asked = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    };
    if let Err(e) = result {
        if pending.load(Ordering::SeqCst) {
            if let Some(fd) = spare {
                if e.is_timeout() {
                    last_word(
                        fd,
                        "408 Request Timeout",
                        &format!(
                            "the request head did not arrive within {} s",
                            http::HEAD_TIMEOUT.as_secs()
                        ),
                    );
                } else if e.is_incomplete_message() {
                    last_word(
                        fd,
                        "400 Bad Request",
                        "the request ended before its head was complete",
                    );
                }
            }
        }
    }
    conns.open.fetch_sub(1, Ordering::SeqCst);
    conns.closed.notify_waiters();
}

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
    let mut stop = daemon.stop.subscribe();
    loop {
        let wait = {
            let busy = !daemon.jobs_lock().is_empty();
            let a = daemon.activity_lock();
            if a.active > 0 || busy {
                timeout
            } else {
                let idle = a.last_finished.elapsed();
                if idle >= timeout {
                    drop(a);
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

async fn serve(
    daemon: Arc<Daemon>,
    listener: tokio::net::UnixListener,
    socket: Option<&listen::SocketFile>,
) {
    tokio::spawn(watch_signals(daemon.clone()));
    if let Some(t) = daemon.config.inactivity_timeout {
        tokio::spawn(watch_inactivity(daemon.clone(), t));
    }
    let conns = Arc::new(Connections::default());
    let mut stop = daemon.stop.subscribe();
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| s.is_some()) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.open.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve_connection(daemon.clone(), stream, conns.clone()));
                }
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

/// Run the daemon until it stops; returns the exit status.
pub fn run(config: Config) -> i32 {
    let engine = match engine::select(&config.engine) {
        Ok(e) => e,
        Err(e) => {
            super::err(&config::usage_error("nxcc", e).render());
            return crate::cli::CliError::EXIT_STATUS;
        }
    };
    if let Err(e) = check_default_dir(&config) {
        return start_error(None, &e);
    }
    let log = match DaemonLog::open(config.log_file.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            return start_error(
                None,
                &format!(
                    "cannot open the log file {}: {e}",
                    config
                        .log_file
                        .as_deref()
                        .unwrap_or(std::path::Path::new(""))
                        .display()
                ),
            )
        }
    };
    let mut pid_file: PidFile = match pidfile::lock(&config.pid_file) {
        Ok(Lock::Acquired(p)) => p,
        Ok(Lock::Held(h)) => {
            return start_error(
                Some(&log),
                &format!(
                    "another nxcc daemon (pid {}) is running on {}: it holds the pid file {}; stop it first (POST /exit, or kill {})",
                    h.pid.map_or("unknown".to_string(), |p| p.to_string()),
                    h.socket.as_deref().unwrap_or("an unknown socket"),
                    config.pid_file.display(),
                    h.pid.map_or("it".to_string(), |p| p.to_string()),
                ),
            )
        }
        Err(e) => {
            return start_error(
                Some(&log),
                &format!("cannot take the pid file {}: {e}", config.pid_file.display()),
            )
        }
    };
    let pid = std::process::id();
    let bound = match &config.endpoint {
        Endpoint::Path(p) => listen::bind_path(p, config.socket_mode)
            .map(|(l, f)| (l, Some(f), p.display().to_string())),
        Endpoint::Abstract => {
            let name = listen::abstract_name(pid);
            listen::bind_abstract(&name).map(|l| (l, None, format!("@{name}")))
        }
    };
    let (std_listener, socket_file, endpoint) = match bound {
        Ok(b) => b,
        Err(e @ BindError::InUse(_)) => {
            return start_error(
                Some(&log),
                &format!(
                    "{e} (not the daemon of the pid file {})",
                    config.pid_file.display()
                ),
            )
        }
        Err(e) => return start_error(Some(&log), &e.to_string()),
    };
    let give_up = |text: String| {
        if let Some(s) = &socket_file {
            s.remove();
        }
        start_error(Some(&log), &text)
    };
    if let Err(e) = pid_file.publish(pid, &endpoint) {
        return give_up(format!(
            "cannot write the pid file {}: {e}",
            config.pid_file.display()
        ));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("nxcc-daemon")
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return give_up(format!("cannot start the runtime: {e}")),
    };
    let uid = rustix::process::getuid().as_raw();
    let served_uids: Vec<String> = std::iter::once(uid)
        .chain(config.allow_uids.iter().copied())
        .map(|u| u.to_string())
        .collect();
    log.info(&format!(
        "nxcc daemon {} (pid {pid}) serving {endpoint}; pid file {}; up to {} compile(s) at once; memory budget {}; inactivity timeout {}; uids served: {}; engine: {}",
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
        engine.describe()
    ));
    let (stop, _) = watch::channel(None);
    let daemon = Arc::new(Daemon {
        admission: Admission::new(config.max_concurrent, config.memory_budget),
        uid,
        endpoint,
        started: Instant::now(),
        activity: Mutex::new(Activity {
            active: 0,
            last_finished: Instant::now(),
        }),
        jobs: Mutex::new(BTreeMap::new()),
        jobs_changed: Notify::new(),
        next_job: AtomicU64::new(1),
        totals: Mutex::new(Totals::default()),
        stop,
        engine,
        log,
        config,
    });
    let served = runtime.block_on(async {
        std_listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(std_listener)?;
        serve(daemon.clone(), listener, socket_file.as_ref()).await;
        Ok::<(), io::Error>(())
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    if let Some(s) = &socket_file {
        // Already gone when serving stopped normally.
        s.remove();
    }
    drop(pid_file);
    match served {
        Ok(()) => {
            daemon.log.info("stopped");
            0
        }
        Err(e) => {
            daemon.log.error(&format!("cannot serve: {e}"));
            EXIT_START_FAILED
        }
    }
}
