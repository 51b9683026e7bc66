//! The supervisor: runs one worker (this process forked, this binary re-executed, or a process
//! another one starts for it — the daemon's fork server, through [`Launch`]) and survives
//! whatever happens to it. It knows nothing about compiling.
//!
//! - The worker leads its own session (`setsid`) and is a child subreaper, so every process it
//!   starts — tools in their own process groups, and anything they spawn — stays in that session
//!   or comes back to it, and the supervisor can end
//!   all of them by session id even if the worker was killed (the OOM killer, a crash in
//!   in-process work). The worker also dies with the supervisor (`PR_SET_PDEATHSIG`).
//! - The worker reports structured events on a pipe (see `super::events`); its stdout and stderr
//!   are either inherited (a terminal user sees them directly, status line included) or captured
//!   line by line for a sink (the daemon).
//! - Cancellation (a signal to nxcc, a daemon client gone): SIGTERM to the worker, which stops its
//!   running tool (SIGTERM, then SIGKILL after the grace); after [`WORKER_GRACE`], SIGKILL to the
//!   whole session. Within 6 s of the cancellation nothing of the run remains.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::events::{EventWriter, EVENTS_FD_ENV};
use super::os::{pipe, ProcStat};
use super::process::{Cancel, End, Termination};

/// How long a cancelled worker gets to stop its tool and exit before its session is killed.
pub const WORKER_GRACE: Duration = Duration::from_millis(5500);

/// Where the worker's stdout and stderr go.
pub enum Output<'a> {
    /// The worker writes to this process's own stdout and stderr.
    Inherit,
    /// Each line, with whether it came from stderr.
    Lines(&'a (dyn Fn(&str, bool) + Sync)),
}

/// How the worker is started.
pub enum Start<'a> {
    /// Execute a program (this binary with the worker's hidden argument): what the daemon does,
    /// and any process that has threads.
    Exec {
        /// The executable to run.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set in its environment.
        env: Vec<(String, String)>,
        /// Bytes handed to it (`super::handoff`): what it is to do.
        input: Option<Vec<u8>>,
    },
    /// Fork this process — which must be single-threaded (`single_threaded`) — and run `body`
    /// in the child, which exits with its result: no exec, no second parse and plan. The worker's
    /// output is then inherited.
    Fork(&'a (dyn Fn(EventWriter) -> i32 + Sync)),
    /// Ask a launcher to start the worker in a process this one did not fork (the daemon's fork
    /// server): it gets the worker's ends of the report pipe and of its stdout and stderr, and
    /// gives back how to signal and wait for the worker.
    Launch(&'a dyn Launch),
}

/// The worker's ends of its pipes, for a [`Launch`]er to hand over.
pub struct WorkerFds {
    /// The report pipe's writing end.
    pub events: OwnedFd,
    /// The worker's stdout.
    pub stdout: OwnedFd,
    /// The worker's stderr.
    pub stderr: OwnedFd,
}

/// A worker another process started for us.
pub struct Launched {
    /// Its process id (the id of its session, too).
    pub pid: u32,
    /// Send it a signal; race-free against the reuse of its pid (a pidfd).
    pub signal: Box<dyn Fn(i32) + Send + Sync>,
    /// Block until it has ended: its raw wait status and peak RSS in KiB, or why its end cannot
    /// be known (the process that reaps it died first; the worker is then gone too).
    pub wait: Box<dyn FnOnce() -> Result<(i32, u64), String> + Send>,
    /// The live members of a session, found without reading every process's `/proc` entry
    /// (the launcher is a child subreaper and knows where they can be); `None`: it cannot tell,
    /// and every process is looked at.
    pub session_members: Box<dyn Fn(u32) -> Option<Vec<u32>> + Send + Sync>,
}

/// Starts workers in another process.
pub trait Launch: Sync {
    /// Start a worker with these pipe ends, in its own session, dying with its parent.
    fn launch(&self, fds: WorkerFds) -> std::io::Result<Launched>;
    /// What starts it, for messages.
    fn what(&self) -> String;
}

/// What to run.
pub struct WorkerSpec<'a> {
    /// How the worker is started.
    pub start: Start<'a>,
    /// The worker's working directory (for [`Start::Exec`]; a forked worker keeps ours; a
    /// launched one is its launcher's to set).
    pub cwd: &'a Path,
    /// Where its output goes.
    pub output: Output<'a>,
    /// This process is a child subreaper ([`become_subreaper`]) and the worker is its only child:
    /// every process the compile leaves behind is then reparented here, so "no child left" proves
    /// the compile is gone without scanning `/proc`.
    pub sole_child: bool,
}

impl WorkerSpec<'_> {
    fn what(&self) -> String {
        match &self.start {
            Start::Exec { program, .. } => program.display().to_string(),
            Start::Fork(_) => "(a forked worker)".to_string(),
            Start::Launch(l) => l.what(),
        }
    }
}

/// Whether this process has only one thread (so it may fork and go on running Rust code in the
/// child).
pub(crate) fn single_threaded() -> bool {
    super::os::own_status_field("Threads") == Some(1)
}

/// Make this process a child subreaper: orphaned descendants are reparented to it instead of
/// init. The worker is one (a tool's escaped background process comes back to it); so is the
/// command line's supervisor, which runs one compile — not the daemon.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reap every exited child; whether any child is still alive.
pub(crate) fn children_left() -> bool {
    loop {
        // SAFETY: siginfo_t is plain data, for which all zeroes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid fills the siginfo we own, through a pointer valid for the call.
        let rc = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOHANG) };
        if rc != 0 {
            return false; // ECHILD: no children at all
        }
        // SAFETY: reading the pid of a siginfo filled by waitid.
        if unsafe { info.si_pid() } == 0 {
            return true; // children exist, none has exited
        }
    }
}

/// SIGKILL this process's children (what a subreaper inherited), scanning `/proc`.
pub(crate) fn kill_children() {
    let me = std::process::id();
    for pid in processes() {
        if ProcStat::read(pid).is_some_and(|s| s.ppid == me) {
            // SAFETY: kill(2) on a child of ours.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// How the worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOutcome {
    /// The worker's process id.
    pub pid: u32,
    /// How it ended ([`End::Cancelled`] once the supervisor signalled it; never a timeout).
    pub end: End,
    /// From the start to the worker's end.
    pub wall: Duration,
    /// Peak resident set size, KiB, of the worker or its largest waited-for descendant.
    pub max_rss_kb: u64,
    /// The worker's end could not be known ([`Start::Launch`]: the process that reaps it died),
    /// and why; [`WorkerOutcome::end`] then says nothing.
    pub lost: Option<String>,
}

/// Why the worker could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the worker {program}: {source}")]
pub struct StartError {
    /// What was to be started (a program, or a forked worker).
    pub program: String,
    /// Why it could not be.
    #[source]
    pub source: std::io::Error,
}

/// SIGKILL every process of a session (scanning `/proc`), until none is left or `rounds` scans
/// found nothing new. Returns how many were signalled.
pub(crate) fn kill_session(sid: u32) -> usize {
    kill_members(sid, &|sid| session_members(sid))
}

/// [`kill_session`], the members found by `members`.
fn kill_members(sid: u32, members: &dyn Fn(u32) -> Vec<u32>) -> usize {
    let mut killed = 0;
    for _ in 0..20 {
        let members = members(sid);
        if members.is_empty() {
            break;
        }
        for pid in members {
            // SAFETY: kill(2) with a pid read from /proc; at worst the pid is gone (ESRCH).
            if unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } == 0 {
                killed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    killed
}

/// The live (non-zombie) processes whose session id is `sid`.
pub(crate) fn session_members(sid: u32) -> Vec<u32> {
    processes()
        .filter(|&pid| ProcStat::read(pid).is_some_and(|s| s.state != 'Z' && s.session == sid))
        .collect()
}

/// Every process id in `/proc`.
fn processes() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
}

/// Run the worker to its end, feeding every line of its report pipe to `on_event`.
pub fn run(
    spec: &WorkerSpec,
    cancel: &Cancel,
    on_started: &mut dyn FnMut(),
    on_event: &mut dyn FnMut(&str),
) -> Result<WorkerOutcome, StartError> {
    let start_err = |source| StartError {
        program: spec.what(),
        source,
    };
    let (events_r, events_w) = pipe().map_err(start_err)?;
    let (tx, rx) = mpsc::channel::<Msg>();
    let started = Instant::now();
    let mut readers = Vec::new();
    let worker = start(spec, &events_w, &tx, &mut readers).map_err(start_err)?;
    drop(events_w);
    on_started();
    let file = std::fs::File::from(events_r);
    let events = tx.clone();
    readers.push(std::thread::spawn(move || {
        super::lines::read_all(file, &mut |line| {
            let _ = events.send(Msg::Event(line.to_string()));
        });
    }));
    drop(tx);
    let mut watch = Watch::default();
    watch.until_ended(spec, &worker, &rx, cancel, on_event);
    clean_up(spec, &worker);
    // Drain the remaining messages (a process that escaped the session may hold a pipe open:
    // stop waiting after a bound).
    let deadline = Instant::now() + Duration::from_millis(500);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(msg) => {
                watch.take(spec, msg, on_event);
            }
            Err(_) => break,
        }
    }
    drop(readers);
    let (status, max_rss_kb) = watch.exited.unwrap_or((0, 0));
    Ok(WorkerOutcome {
        pid: worker.pid,
        end: End::new(
            Termination::from_wait_status(status),
            false,
            watch.term_sent.is_some(),
        ),
        wall: started.elapsed(),
        max_rss_kb,
        lost: watch.lost,
    })
}

/// The live members of a session, as a launcher finds them (`None`: it cannot tell).
type Members = Box<dyn Fn(u32) -> Option<Vec<u32>> + Send + Sync>;

/// A started worker: its pid, and, for one a launcher started, how to signal it and find its
/// session's members.
struct Worker {
    pid: u32,
    signal: Option<Box<dyn Fn(i32) + Send + Sync>>,
    members: Option<Members>,
}

impl Worker {
    fn signal(&self, sig: i32) {
        match &self.signal {
            Some(f) => f(sig),
            // SAFETY: signalling our own child, which has not been reaped yet.
            None => unsafe {
                libc::kill(self.pid as libc::pid_t, sig);
            },
        }
    }
}

/// Start the worker as `spec` says, its events pipe's writing end `events`; its end, and its
/// output lines unless inherited, are sent to `tx` (by threads kept in `readers`).
fn start(
    spec: &WorkerSpec,
    events: &OwnedFd,
    tx: &mpsc::Sender<Msg>,
    readers: &mut Vec<std::thread::JoinHandle<()>>,
) -> std::io::Result<Worker> {
    let plain = |pid| Worker {
        pid,
        signal: None,
        members: None,
    };
    match &spec.start {
        Start::Exec {
            program,
            args,
            env,
            input,
        } => {
            let handoff = input
                .as_deref()
                .map(super::handoff::file_with)
                .transpose()?;
            let mut child = spawn_exec(spec, program, args, env, events, handoff.as_ref())?;
            drop(handoff);
            let pid = child.id();
            if let Output::Lines(_) = spec.output {
                if let Some(s) = child.stdout.take() {
                    readers.push(forward(s, false, false, tx));
                }
                if let Some(s) = child.stderr.take() {
                    readers.push(forward(s, true, false, tx));
                }
            }
            // Reaped by pid below (with its figures); the handle only held the pipes.
            drop(child);
            reap(pid, tx);
            Ok(plain(pid))
        }
        Start::Fork(body) => {
            if !matches!(spec.output, Output::Inherit) || !single_threaded() {
                return Err(std::io::Error::other("a worker is forked only from a single-threaded process, with its output inherited"));
            }
            let pid = fork_worker(*body, events.try_clone()?)?;
            reap(pid, tx);
            Ok(plain(pid))
        }
        Start::Launch(launcher) => launch(spec, *launcher, events, tx, readers),
    }
}

/// Start the worker through a launcher (the fork server): its output through pipes, its end
/// from the launcher.
fn launch(
    spec: &WorkerSpec,
    launcher: &dyn Launch,
    events: &OwnedFd,
    tx: &mpsc::Sender<Msg>,
    readers: &mut Vec<std::thread::JoinHandle<()>>,
) -> std::io::Result<Worker> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let launched = launcher.launch(WorkerFds {
        events: events.try_clone()?,
        stdout: out_w,
        stderr: err_w,
    })?;
    let inherit = matches!(spec.output, Output::Inherit);
    for (stream, is_err) in [(out_r, false), (err_r, true)] {
        readers.push(forward(std::fs::File::from(stream), is_err, inherit, tx));
    }
    let tx = tx.clone();
    let wait = launched.wait;
    std::thread::spawn(move || {
        let _ = tx.send(match wait() {
            Ok(raw) => Msg::Exited(raw),
            Err(why) => Msg::Lost(why),
        });
    });
    Ok(Worker {
        pid: launched.pid,
        signal: Some(launched.signal),
        members: Some(launched.session_members),
    })
}

/// A thread reading a worker's output stream line by line: to `tx`, or (`inherit`) to this
/// process's own streams.
fn forward(
    stream: impl std::io::Read + Send + 'static,
    is_err: bool,
    inherit: bool,
    tx: &mpsc::Sender<Msg>,
) -> std::thread::JoinHandle<()> {
    let tx = tx.clone();
    std::thread::spawn(move || {
        super::lines::read_all(stream, &mut |line| match (inherit, is_err) {
            (true, true) => eprintln!("{line}"),
            (true, false) => println!("{line}"),
            (false, _) => {
                let _ = tx.send(Msg::Line(line.to_string(), is_err));
            }
        });
    })
}

/// A thread reaping `pid`, our child, and sending its end.
fn reap(pid: u32, tx: &mpsc::Sender<Msg>) {
    let tx = tx.clone();
    std::thread::spawn(move || {
        let _ = tx.send(Msg::Exited(wait_with_usage(pid)));
    });
}

/// What the supervision saw: the worker's end, and what it did to end it.
#[derive(Default)]
struct Watch {
    term_sent: Option<Instant>,
    killed: bool,
    exited: Option<(i32, u64)>,
    lost: Option<String>,
}

impl Watch {
    /// Take a message: events and lines to their consumers, the end noted. Whether it was the
    /// end.
    fn take(&mut self, spec: &WorkerSpec, msg: Msg, on_event: &mut dyn FnMut(&str)) -> bool {
        match msg {
            Msg::Event(line) => on_event(&line),
            Msg::Line(line, is_err) => {
                if let Output::Lines(f) = spec.output {
                    f(&line, is_err);
                }
            }
            Msg::Exited(raw) => {
                self.exited = Some(raw);
                return true;
            }
            Msg::Lost(why) => {
                self.lost = Some(why);
                return true;
            }
        }
        false
    }

    /// Until the worker has ended: its messages taken; once cancelled, SIGTERM, then after
    /// [`WORKER_GRACE`] its session killed.
    fn until_ended(
        &mut self,
        spec: &WorkerSpec,
        worker: &Worker,
        rx: &mpsc::Receiver<Msg>,
        cancel: &Cancel,
        on_event: &mut dyn FnMut(&str),
    ) {
        loop {
            match rx.recv_timeout(Duration::from_millis(25)) {
                Ok(msg) => {
                    if self.take(spec, msg, on_event) {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if cancel.is_cancelled() {
                match self.term_sent {
                    None => {
                        worker.signal(libc::SIGTERM);
                        self.term_sent = Some(Instant::now());
                    }
                    Some(t) if !self.killed && t.elapsed() >= WORKER_GRACE => {
                        kill_session(worker.pid);
                        self.killed = true;
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Whatever the worker left behind goes now.
fn clean_up(spec: &WorkerSpec, worker: &Worker) {
    let pid = worker.pid;
    if !spec.sole_child {
        match &worker.members {
            Some(m) => kill_members(pid, &|sid| m(sid).unwrap_or_else(|| session_members(sid))),
            None => kill_session(pid),
        };
        return;
    }
    for _ in 0..50 {
        if !children_left() {
            break;
        }
        kill_session(pid);
        kill_children();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Start the worker by executing a program: its own session, the parent-death signal, and the
/// events pipe's writing end (and the hand-off's descriptor) kept open across the exec.
fn spawn_exec(
    spec: &WorkerSpec,
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    events_w: &OwnedFd,
    handoff: Option<&OwnedFd>,
) -> std::io::Result<std::process::Child> {
    let events_fd = events_w.as_raw_fd();
    let handoff_fd = handoff.map(|h| h.as_raw_fd());
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(spec.cwd).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env(EVENTS_FD_ENV, events_fd.to_string());
    if let Some(h) = handoff {
        cmd.env(super::handoff::HANDOFF_FD_ENV, super::handoff::fd_text(h));
    }
    match spec.output {
        Output::Inherit => {
            cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
        }
        Output::Lines(_) => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    let parent = std::process::id();
    // SAFETY: only async-signal-safe calls between fork and exec: setsid, prctl, getppid, fcntl.
    unsafe {
        cmd.pre_exec(move || {
            enter_worker_session(parent)?;
            // Let the events pipe's writing end, and the hand-off, survive exec.
            for fd in std::iter::once(events_fd).chain(handoff_fd) {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// In a new worker, before anything else: its own session, SIGTERM when the supervisor dies, and
/// an error if the supervisor is already gone. Async-signal-safe.
///
/// SIGTERM, not SIGKILL: a worker whose supervisor is gone ends its compile the way an interrupt
/// does — it terminates the running tool's group and then, as the child subreaper every orphan
/// of its tools was handed to, kills whatever they left behind, at any depth. (Before its signal
/// handling is installed, SIGTERM simply ends it: no tool runs yet.)
fn enter_worker_session(parent: u32) -> std::io::Result<()> {
    rustix::process::setsid()?;
    super::os::die_with_parent(parent, rustix::process::Signal::TERM)
}

/// Fork this (single-threaded) process; the child becomes the worker, runs `body` and exits with
/// its result. Returns the child's pid.
fn fork_worker(
    body: &(dyn Fn(EventWriter) -> i32 + Sync),
    events_w: OwnedFd,
) -> std::io::Result<u32> {
    use std::io::Write;
    let parent = std::process::id();
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: the caller checked this process has one thread, so the child may go on running
    // ordinary Rust code: no lock is held by a thread that does not exist in the child.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        let status = match enter_worker_session(parent) {
            Ok(()) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                body(EventWriter::from_fd(events_w))
            }))
            .unwrap_or(101),
            Err(_) => 1,
        };
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: end the child here, without running the parent's remaining code.
        unsafe { libc::_exit(status) };
    }
    Ok(pid as u32)
}

/// Wait for our child `pid` (retrying on EINTR); its raw wait status and peak RSS in KiB.
fn wait_with_usage(pid: u32) -> (i32, u64) {
    let mut status = 0;
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, into a status and a rusage we own, through pointers valid
    // for the call.
    while unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) } < 0 {
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return (0, 0);
        }
    }
    (status, u64::try_from(usage.ru_maxrss).unwrap_or(0))
}

enum Msg {
    /// A line of the report pipe.
    Event(String),
    Line(String, bool),
    Exited((i32, u64)),
    /// A launched worker's end cannot be known.
    Lost(String),
}
