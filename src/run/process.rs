//! Running one child process under supervision (04-run.md "Process model", "Measuring every
//! job", "Timeouts and signals"; 03-jobs.md "Running a tool").
//!
//! [`run`] starts the program described by a [`Spec`] and blocks the calling thread until the
//! child is gone:
//! - the child gets its own process group (`setpgid(0, 0)`) and `PR_SET_PDEATHSIG` = SIGKILL, set
//!   between `fork` and `exec`; if the parent has already died by then, the child exits at once.
//!   The kernel sends the parent-death signal when the *thread* that forked exits, so `run` must
//!   be called from a thread that lives until it returns — which it does by construction, as the
//!   calling thread blocks until the child has ended. (A thread-pool thread is fine for the same
//!   reason: it cannot retire while blocked in `run`.)
//! - the child's working directory is set with `Command::current_dir`; the parent's never changes;
//!   its stdin is `/dev/null`, it inherits the environment with [`Spec::env_remove`] then
//!   [`Spec::env_set`] applied;
//! - stdout and stderr are read line by line (lossy UTF-8, without the line end; a final
//!   unterminated line is delivered too) and handed to the `on_line` callback in the calling
//!   thread, in arrival order per stream; the last [`STDERR_TAIL_LINES`] stderr lines are kept
//!   in the [`Outcome`];
//! - a timeout or a [`Cancel`] sends SIGTERM to the whole group, then SIGKILL after the grace;
//! - when the group leader exits, whatever is left of its group is SIGKILLed, the remaining output
//!   is drained for at most [`OUTPUT_DRAIN_LIMIT`] (a process that left the group may hold the
//!   pipes forever), and the leader is reaped with `wait4`, which gives the CPU times and the peak
//!   RSS of the child and its waited-for descendants.
//!
//! The leader is observed with `waitid(WNOWAIT)` by a small waiter thread and reaped only by the
//! calling thread after every group signal has been sent, so its pid — which is also the group id
//! — cannot be reused by an unrelated process while it is still signalled.
//!
//! `run` is thread-safe: every call owns its child, pipes and waiter thread; several threads may
//! supervise children concurrently. It relies on nothing global but one condition: SIGCHLD must
//! keep its default disposition (if it were ignored, the kernel would reap children itself and
//! `run` would report [`SpawnError::Wait`]).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal, WaitId, WaitIdOptions};

use super::signals;

/// Time between SIGTERM and SIGKILL unless the [`Spec`] says otherwise (04-run.md: 5 s).
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// How many of the last stderr lines an [`Outcome`] keeps (03-jobs.md: 50).
pub const STDERR_TAIL_LINES: usize = 50;
/// How long output is still read after the group leader has exited and its group was killed.
/// Only a process that left the group and kept the pipes open makes `run` wait this long.
pub const OUTPUT_DRAIN_LIMIT: Duration = Duration::from_millis(500);
/// A line longer than this is delivered in pieces of this size (bounds the memory a tool that
/// never writes a newline can make nxcc use).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What to run, where, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// A path, or a bare name looked up in `PATH`.
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The child's working directory (required: nxcc never relies on its own).
    pub cwd: PathBuf,
    /// Variables set in the child, applied after [`Spec::env_remove`].
    pub env_set: Vec<(String, String)>,
    /// Variables removed from the inherited environment.
    pub env_remove: Vec<String>,
    /// After this long, the group gets SIGTERM, then SIGKILL after [`Spec::kill_grace`].
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL, for a timeout or a cancellation.
    pub kill_grace: Duration,
}

impl Spec {
    /// `program` run in `cwd`, no arguments, the inherited environment, no timeout.
    pub fn new(program: impl Into<PathBuf>, cwd: impl Into<PathBuf>) -> Spec {
        Spec {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env_set: Vec::new(),
            env_remove: Vec::new(),
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Spec {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Spec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Set `key` to `value` in the child's environment.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Spec {
        self.env_set.push((key.into(), value.into()));
        self
    }

    /// Remove `key` from the child's environment (unless [`Spec::env`] sets it again).
    pub fn env_remove(mut self, key: impl Into<String>) -> Spec {
        self.env_remove.push(key.into());
        self
    }

    pub fn timeout(mut self, timeout: Option<Duration>) -> Spec {
        self.timeout = timeout;
        self
    }

    pub fn kill_grace(mut self, grace: Duration) -> Spec {
        self.kill_grace = grace;
        self
    }

    /// The program and its arguments as text (lossy UTF-8), program first.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.to_string_lossy().into_owned())
            .chain(self.args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect()
    }
}

impl fmt::Display for Spec {
    /// The command as a POSIX shell would run it, every word quoted as needed: the environment
    /// changes first (`env -u NAME` for a removal, `NAME=value` for a setting), then the program
    /// and its arguments. The one rendering of a command nxcc shows: the dry run, the log's
    /// `Executing` and replay lines, spawn errors and replay scripts all print this.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words: Vec<String> = Vec::new();
        if !self.env_remove.is_empty() {
            words.push("env".into());
            for key in &self.env_remove {
                words.push("-u".into());
                words.push(crate::shell::quote(key));
            }
        }
        for (key, value) in &self.env_set {
            words.push(format!("{}={}", key, crate::shell::quote(value)));
        }
        words.extend(self.argv().iter().map(|w| crate::shell::quote(w)));
        f.write_str(&words.join(" "))
    }
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// It exited with this status.
    Exited(i32),
    /// It was killed by this signal number.
    Signaled(i32),
}

impl Termination {
    /// From a raw `wait` status.
    pub fn from_wait_status(status: i32) -> Termination {
        if libc::WIFSIGNALED(status) {
            Termination::Signaled(libc::WTERMSIG(status))
        } else {
            Termination::Exited(libc::WEXITSTATUS(status))
        }
    }

    /// Exited with status 0.
    pub fn success(self) -> bool {
        self == Termination::Exited(0)
    }

    /// The status a shell would report: the exit status, or 128 + the signal number.
    pub fn exit_status_like_shell(self) -> i32 {
        match self {
            Termination::Exited(code) => code,
            Termination::Signaled(sig) => 128 + sig,
        }
    }

    /// The signal number, if the child was killed by one.
    pub fn signal(self) -> Option<i32> {
        match self {
            Termination::Exited(_) => None,
            Termination::Signaled(sig) => Some(sig),
        }
    }

    /// The signal's name (`"SIGSEGV"`), if the child was killed by a known signal.
    pub fn signal_name(self) -> Option<&'static str> {
        self.signal().and_then(signals::signal_name)
    }
}

impl fmt::Display for Termination {
    /// `exit status 3`, `signal 11 (SIGSEGV)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Termination::Exited(code) => write!(f, "exit status {code}"),
            Termination::Signaled(sig) => match signals::signal_name(sig) {
                Some(name) => write!(f, "signal {sig} ({name})"),
                None => write!(f, "signal {sig}"),
            },
        }
    }
}

/// How a run ended — one value, matched exhaustively, so no consumer re-derives which of a
/// timeout, a cancellation and the child's own end came first. (A child that could not be
/// started is the [`SpawnError`] of [`run`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// It exited with this status on its own.
    Exited(i32),
    /// A signal nxcc did not send killed it.
    Signaled(i32),
    /// Its timeout elapsed; nxcc terminated its group, which then ended this way.
    TimedOut(Termination),
    /// The run was cancelled; nxcc terminated its group, which then ended this way.
    Cancelled(Termination),
}

impl End {
    /// From how the child ended and what nxcc did to it (a timeout or a cancellation, at most one).
    pub fn new(termination: Termination, timed_out: bool, cancelled: bool) -> End {
        match (cancelled, timed_out, termination) {
            (true, _, t) => End::Cancelled(t),
            (false, true, t) => End::TimedOut(t),
            (false, false, Termination::Exited(code)) => End::Exited(code),
            (false, false, Termination::Signaled(sig)) => End::Signaled(sig),
        }
    }

    /// How the child itself ended (its wait status), whatever the reason.
    pub fn termination(self) -> Termination {
        match self {
            End::Exited(code) => Termination::Exited(code),
            End::Signaled(sig) => Termination::Signaled(sig),
            End::TimedOut(t) | End::Cancelled(t) => t,
        }
    }

    /// It exited with status 0 on its own.
    pub fn success(self) -> bool {
        self == End::Exited(0)
    }
}

/// What happened to a child that was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub pid: u32,
    /// How it ended.
    pub end: End,
    /// From just before the spawn to the moment the group leader exited.
    pub wall: Duration,
    /// CPU time of the child and its waited-for descendants (`wait4` rusage).
    pub user: Duration,
    pub sys: Duration,
    /// Peak resident set size, KiB, of the child or its largest waited-for descendant.
    pub max_rss_kb: u64,
    /// The last [`STDERR_TAIL_LINES`] lines of stderr, oldest first.
    pub stderr_tail: Vec<String>,
}

impl Outcome {
    /// How the child itself ended.
    pub fn termination(&self) -> Termination {
        self.end.termination()
    }
}

/// The child could not be started (or, rarely, could not be waited for).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot run {}: program not found", program.display())]
    ProgramNotFound { program: PathBuf },
    #[error("cannot run {}: not executable ({source})", program.display())]
    NotExecutable { program: PathBuf, source: io::Error },
    #[error(
        "cannot run {}: working directory {} does not exist",
        program.display(),
        cwd.display()
    )]
    CwdMissing { program: PathBuf, cwd: PathBuf },
    #[error("cannot run {}: cancelled before it started", program.display())]
    Cancelled { program: PathBuf },
    #[error("cannot run {}: {source}", program.display())]
    Io { program: PathBuf, source: io::Error },
    #[error("cannot wait for {} (pid {pid}): {source}", program.display())]
    Wait {
        program: PathBuf,
        pid: u32,
        source: io::Error,
    },
}

impl SpawnError {
    /// The program the error is about.
    pub fn program(&self) -> &Path {
        match self {
            SpawnError::ProgramNotFound { program }
            | SpawnError::NotExecutable { program, .. }
            | SpawnError::CwdMissing { program, .. }
            | SpawnError::Cancelled { program }
            | SpawnError::Io { program, .. }
            | SpawnError::Wait { program, .. } => program,
        }
    }
}

/// A cancellation flag shared by whoever may cancel and the runs it applies to. Cheap to clone
/// (all clones are the same flag); `Send + Sync`. [`Cancel::cancel`] only stores an atomic and
/// writes one byte to a socket (both async-signal-safe), which wakes every [`run`] using this
/// flag at once.
#[derive(Debug, Clone)]
pub struct Cancel {
    inner: Arc<CancelInner>,
}

#[derive(Debug)]
struct CancelInner {
    flag: AtomicBool,
    /// (read end, write end); the byte written on cancellation is never read, so the read end
    /// stays readable. `None` if the socket pair could not be created: runs then check the flag
    /// every [`CANCEL_POLL`].
    wake: Option<(UnixStream, UnixStream)>,
}

/// How often a run checks a [`Cancel`] that has no wake-up socket.
const CANCEL_POLL: Duration = Duration::from_millis(50);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel {
            inner: Arc::new(CancelInner {
                flag: AtomicBool::new(false),
                wake: UnixStream::pair().ok(),
            }),
        }
    }

    /// Cancel every run using this flag (idempotent).
    pub fn cancel(&self) {
        if !self.inner.flag.swap(true, Ordering::SeqCst) {
            if let Some((_, write_end)) = &self.inner.wake {
                let _ = (&*write_end).write(&[1]);
            }
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    fn wake_fd(&self) -> Option<RawFd> {
        self.inner
            .wake
            .as_ref()
            .map(|(read_end, _)| read_end.as_raw_fd())
    }
}

impl Default for Cancel {
    fn default() -> Cancel {
        Cancel::new()
    }
}

/// Run `spec` to completion; see the module documentation. `on_line` runs in the calling thread.
pub fn run(
    spec: &Spec,
    on_line: &mut dyn FnMut(Stream, &str),
    cancel: &Cancel,
) -> Result<Outcome, SpawnError> {
    let program = || spec.program.clone();
    if cancel.is_cancelled() {
        return Err(SpawnError::Cancelled { program: program() });
    }
    if !spec.cwd.is_dir() {
        return Err(SpawnError::CwdMissing {
            program: program(),
            cwd: spec.cwd.clone(),
        });
    }
    let io_error = |source| SpawnError::Io {
        program: program(),
        source,
    };

    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for key in &spec.env_remove {
        command.env_remove(key);
    }
    for (key, value) in &spec.env_set {
        command.env(key, value);
    }
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before `exec`; it only makes raw system calls
    // through rustix (setpgid, prctl, getppid — async-signal-safe, no allocation, no locks) and
    // builds an `io::Error` from an errno, which does not allocate.
    unsafe {
        command.pre_exec(move || child_setup(parent));
    }

    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|error| classify_spawn_error(spec, error))?;
    let pid = child.id();
    // From here on the guard kills and reaps the child on every early return (or panic).
    let mut guard = Reaper { pid, armed: true };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io_error(io::Error::other(
            "the child's output pipes are missing",
        )));
    };

    let (exit_seen, exit_notify) = UnixStream::pair().map_err(io_error)?;
    let waiter = std::thread::Builder::new()
        .name("nxcc-wait".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            wait_for_exit(pid);
            drop(exit_notify);
        })
        .map_err(io_error)?;

    let mut pipes = [
        Some(Pipe::new(Stream::Stdout, OwnedFd::from(stdout).into())),
        Some(Pipe::new(Stream::Stderr, OwnedFd::from(stderr).into())),
    ];
    let mut tail: VecDeque<String> = VecDeque::with_capacity(STDERR_TAIL_LINES);
    let mut deliver = |stream: Stream, line: &str| {
        on_line(stream, line);
        if stream == Stream::Stderr {
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.to_string());
        }
    };
    let mut read_buf = vec![0u8; 64 * 1024];

    let mut watch = Watch {
        deadline: spec.timeout.map(|timeout| started + timeout),
        kill_grace: spec.kill_grace,
        cancel_fd: cancel.wake_fd(),
        timed_out: false,
        cancelled: false,
        kill_at: None,
        exited_at: None,
    };
    loop {
        let now = Instant::now();
        if watch.exited_at.is_none() {
            watch.enforce(pid, cancel, now);
        } else if watch.drained(&pipes, now) {
            break;
        }

        // Wait for output, the leader's exit, a cancellation, or the next deadline.
        let mut fds: Vec<RawFd> = pipes.iter().flatten().map(|pipe| pipe.fd()).collect();
        let exit_slot = watch.exited_at.is_none().then(|| {
            fds.push(exit_seen.as_raw_fd());
            fds.len() - 1
        });
        let cancel_slot = watch.cancel_fd_to_poll().map(|fd| {
            fds.push(fd);
            fds.len() - 1
        });
        let ready = match poll(
            &fds,
            watch
                .wake_at(now)
                .map(|at| at.saturating_duration_since(now)),
        ) {
            Ok(ready) => ready,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(io_error(error)),
        };

        let mut slot = 0;
        for entry in pipes.iter_mut() {
            let Some(pipe) = entry else { continue };
            let readable = ready[slot];
            slot += 1;
            if readable && !pipe.read_some(&mut read_buf, &mut deliver) {
                *entry = None;
            }
        }
        if exit_slot.is_some_and(|slot| ready[slot]) {
            watch.exited_at = Some(Instant::now());
            // The leader is a zombie, not reaped: its pid still names the group. Kill whatever
            // is left of the group so nothing outlives the run.
            signal_group(pid, Signal::KILL);
        }
        if cancel_slot.is_some_and(|slot| ready[slot]) {
            // `cancel()` sets the flag before it writes; the next turn acts on it.
            watch.cancel_fd = None;
        }
    }
    // Whatever is still open belongs to a process that left the group: stop listening, but keep
    // what was already read.
    for pipe in pipes.iter_mut().filter_map(Option::take) {
        pipe.finish(&mut deliver);
    }

    let reaped = reap(pid);
    // Reaped now, or (if `wait4` failed) no longer this process's child: either way the pid must
    // not be signalled any more.
    guard.armed = false;
    let (status, usage) = reaped.map_err(|source| SpawnError::Wait {
        program: program(),
        pid,
        source,
    })?;
    let _ = waiter.join();
    let wall = watch
        .exited_at
        .map_or_else(|| started.elapsed(), |at| at - started);
    Ok(Outcome {
        pid,
        end: End::new(
            Termination::from_wait_status(status),
            watch.timed_out,
            watch.cancelled,
        ),
        wall,
        user: timeval(usage.ru_utime),
        sys: timeval(usage.ru_stime),
        max_rss_kb: u64::try_from(usage.ru_maxrss).unwrap_or(0),
        stderr_tail: tail.into(),
    })
}

/// The supervision state of one run: the limits, what was done about them, the leader's exit.
struct Watch {
    deadline: Option<Instant>,
    kill_grace: Duration,
    /// The [`Cancel`] wake-up descriptor, until it fired.
    cancel_fd: Option<RawFd>,
    timed_out: bool,
    cancelled: bool,
    /// When SIGKILL follows the SIGTERM already sent.
    kill_at: Option<Instant>,
    /// When the group leader was seen to exit.
    exited_at: Option<Instant>,
}

impl Watch {
    fn terminating(&self) -> bool {
        self.timed_out || self.cancelled
    }

    /// While the leader runs: SIGTERM on cancellation or timeout, SIGKILL when the grace is over.
    fn enforce(&mut self, pid: u32, cancel: &Cancel, now: Instant) {
        if !self.terminating() {
            if cancel.is_cancelled() {
                self.cancelled = true;
            } else if self.deadline.is_some_and(|deadline| now >= deadline) {
                self.timed_out = true;
            }
            if self.terminating() {
                signal_group(pid, Signal::TERM);
                self.kill_at = Some(now + self.kill_grace);
            }
        }
        if self.kill_at.is_some_and(|at| now >= at) {
            signal_group(pid, Signal::KILL);
            self.kill_at = None;
        }
    }

    /// After the leader exited: all output read, or no more waiting for it.
    fn drained(&self, pipes: &[Option<Pipe>], now: Instant) -> bool {
        pipes.iter().all(Option::is_none)
            || self
                .exited_at
                .is_some_and(|at| now >= at + OUTPUT_DRAIN_LIMIT)
    }

    /// The cancellation descriptor, while a cancellation would still change anything.
    fn cancel_fd_to_poll(&self) -> Option<RawFd> {
        self.cancel_fd
            .filter(|_| self.exited_at.is_none() && !self.terminating())
    }

    /// The latest moment the next wait may end without an event (`None`: no limit).
    fn wake_at(&self, now: Instant) -> Option<Instant> {
        let candidates = match self.exited_at {
            Some(at) => [Some(at + OUTPUT_DRAIN_LIMIT), None, None],
            None if self.terminating() => [self.kill_at, None, None],
            None => [
                self.deadline,
                self.cancel_fd.is_none().then(|| now + CANCEL_POLL),
                None,
            ],
        };
        candidates.into_iter().flatten().min()
    }
}

/// This process's current RSS and the peak RSS of its reaped children, both in MiB — for the
/// This process's resident memory now, MiB (`/proc/self/statm`; 0 if it cannot be read).
pub fn own_memory_mb() -> u64 {
    // SAFETY: `sysconf` has no preconditions.
    let page_size = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page_size / (1024 * 1024))
}

/// In the child, between `fork` and `exec`: own process group, parent-death signal, and exit
/// (through the error path, which `_exit`s) if the parent is already gone.
fn child_setup(parent: Pid) -> io::Result<()> {
    rustix::process::setpgid(None, None)?;
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
    if rustix::process::getppid() != Some(parent) {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

fn classify_spawn_error(spec: &Spec, error: io::Error) -> SpawnError {
    let program = spec.program.clone();
    match error.kind() {
        // `chdir` in the child fails with ENOENT too if the directory vanished meanwhile.
        io::ErrorKind::NotFound if !spec.cwd.is_dir() => SpawnError::CwdMissing {
            program,
            cwd: spec.cwd.clone(),
        },
        io::ErrorKind::NotFound => SpawnError::ProgramNotFound { program },
        io::ErrorKind::PermissionDenied => SpawnError::NotExecutable {
            program,
            source: error,
        },
        _ if error.raw_os_error() == Some(libc::ENOEXEC) => SpawnError::NotExecutable {
            program,
            source: error,
        },
        _ => SpawnError::Io {
            program,
            source: error,
        },
    }
}

/// Send `sig` to the process group led by `pid` (errors ignored: the group may be empty).
fn signal_group(pid: u32, sig: Signal) {
    if let Some(pgid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process_group(pgid, sig);
    }
}

/// Block until `pid` has exited, without reaping it.
fn wait_for_exit(pid: u32) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    loop {
        match rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            // Exited, or an error (no such child): either way there is nothing more to wait for.
            _ => return,
        }
    }
}

/// Reap `pid`: its wait status and resource usage.
fn reap(pid: u32) -> io::Result<(i32, libc::rusage)> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    loop {
        let mut status = 0;
        // SAFETY: a zeroed `rusage` is valid; `status` and `usage` are valid out-pointers.
        let (result, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let result = libc::wait4(pid, &mut status, 0, &mut usage);
            (result, usage)
        };
        if result == pid {
            return Ok((status, usage));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u32::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

/// `poll(2)` for input on `fds`, with an optional timeout (rounded up to whole milliseconds);
/// for each descriptor, whether it is ready (readable, at its end, or in error).
fn poll(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut entries: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout_ms = timeout.map_or(-1, |timeout| {
        let ms = timeout.as_millis() + u128::from(timeout.subsec_nanos() % 1_000_000 != 0);
        libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: `entries` is a valid, exclusively borrowed array of `pollfd` of the given length.
    let result = unsafe {
        libc::poll(
            entries.as_mut_ptr(),
            entries.len() as libc::nfds_t,
            timeout_ms,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(entries.iter().map(|entry| entry.revents != 0).collect())
}

/// Kills and reaps the child if `run` leaves early (an error after the spawn, or a panic in
/// `on_line`), so no child outlives a run in any case.
struct Reaper {
    pid: u32,
    armed: bool,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pid, Signal::KILL);
            let _ = reap(self.pid);
        }
    }
}

/// One of the child's output pipes and the line being assembled from it.
struct Pipe {
    stream: Stream,
    reader: File,
    lines: Lines,
}

impl Pipe {
    fn new(stream: Stream, reader: File) -> Pipe {
        Pipe {
            stream,
            reader,
            lines: Lines::default(),
        }
    }

    fn fd(&self) -> RawFd {
        self.reader.as_raw_fd()
    }

    /// Read what is available (poll said so) and deliver the complete lines. `false` at the end
    /// of the stream (or on a read error), after delivering the last unterminated line.
    fn read_some(&mut self, buf: &mut [u8], deliver: &mut dyn FnMut(Stream, &str)) -> bool {
        loop {
            match self.reader.read(buf) {
                Ok(0) => {
                    let stream = self.stream;
                    self.lines.finish(&mut |line| deliver(stream, line));
                    return false;
                }
                Ok(n) => {
                    let stream = self.stream;
                    self.lines
                        .feed(&buf[..n], &mut |line| deliver(stream, line));
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    let stream = self.stream;
                    self.lines.finish(&mut |line| deliver(stream, line));
                    return false;
                }
            }
        }
    }

    fn finish(mut self, deliver: &mut dyn FnMut(Stream, &str)) {
        let stream = self.stream;
        self.lines.finish(&mut |line| deliver(stream, line));
    }
}

/// Splits a byte stream into lines: `\n` ends a line (a `\r` before it is dropped too), bytes are
/// decoded as lossy UTF-8 per line, a line reaching [`MAX_LINE_BYTES`] is delivered as it is.
#[derive(Debug, Default)]
struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    fn feed(&mut self, mut data: &[u8], emit: &mut dyn FnMut(&str)) {
        while let Some(end) = data.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                emit_line(&data[..end], emit);
            } else {
                self.partial.extend_from_slice(&data[..end]);
                emit_line(&self.partial, emit);
                self.partial.clear();
            }
            data = &data[end + 1..];
        }
        self.partial.extend_from_slice(data);
        while self.partial.len() >= MAX_LINE_BYTES {
            let rest = self.partial.split_off(MAX_LINE_BYTES);
            emit_line(&self.partial, emit);
            self.partial = rest;
        }
    }

    /// The end of the stream: deliver an unterminated last line.
    fn finish(&mut self, emit: &mut dyn FnMut(&str)) {
        if !self.partial.is_empty() {
            emit_line(&self.partial, emit);
            self.partial.clear();
        }
    }
}

fn emit_line(bytes: &[u8], emit: &mut dyn FnMut(&str)) {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    emit(&String::from_utf8_lossy(bytes));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    /// Environment variable selecting what [`helper_process`] does in a re-executed test binary.
    const HELPER_ENV: &str = "NXCC_TEST_PROCESS_HELPER";
    const HELPER_TEST: &str = "run::process::tests::helper_process";

    /// Whether `pid` has ended: no `/proc` entry, or a zombie nobody has reaped yet (the
    /// container's init may not reap re-parented orphans).
    pub(crate) fn is_dead(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => {
                let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
                matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X') | None)
            }
        }
    }

    /// Wait up to `limit` for `pid` to end.
    pub(crate) fn dies_within(pid: u32, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if is_dead(pid) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kill a stray test process (cleanup after a failed assertion).
    fn kill_stray(pid: u32) {
        if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }

    fn sh(script: &str) -> Spec {
        Spec::new("/bin/sh", "/").args(["-c", script])
    }

    struct Captured {
        outcome: Outcome,
        stdout: Vec<String>,
        stderr: Vec<String>,
    }

    fn capture(spec: &Spec, cancel: &Cancel) -> Captured {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let outcome = run(
            spec,
            &mut |stream, line| match stream {
                Stream::Stdout => stdout.push(line.to_string()),
                Stream::Stderr => stderr.push(line.to_string()),
            },
            cancel,
        )
        .expect("run");
        Captured {
            outcome,
            stdout,
            stderr,
        }
    }

    fn run_sh(script: &str) -> Captured {
        capture(&sh(script), &Cancel::new())
    }

    /// Not a test of its own: the body of the child processes the tests below start by
    /// re-executing this test binary with [`HELPER_ENV`] set. Without the variable it does
    /// nothing.
    #[test]
    fn helper_process() {
        let Ok(mode) = std::env::var(HELPER_ENV) else {
            return;
        };
        match mode.as_str() {
            // A parent supervising `sleep 100` from a thread; it prints the sleep's pid and is
            // then SIGKILLed by the test.
            "PARENT" => {
                let supervisor = std::thread::spawn(|| {
                    let spec = sh("echo $$; exec sleep 100");
                    run(
                        &spec,
                        &mut |_, line| {
                            println!("PID {line}");
                            let _ = io::stdout().flush();
                        },
                        &Cancel::new(),
                    )
                });
                let _ = supervisor.join();
            }
            other => panic!("unknown helper mode {other}"),
        }
    }

    #[test]
    fn exit_status_is_reported() {
        let failed = run_sh("exit 3").outcome;
        assert_eq!(failed.termination(), Termination::Exited(3));
        assert!(!failed.termination().success());
        assert_eq!(failed.termination().exit_status_like_shell(), 3);
        assert_eq!(failed.termination().signal_name(), None);
        assert_eq!(failed.end, End::Exited(3));
        assert!(failed.pid > 0);

        let ok = run_sh("exit 0").outcome;
        assert!(ok.termination().success());
        assert_eq!(ok.termination().to_string(), "exit status 0");
    }

    #[test]
    fn death_by_signal_is_reported_like_a_shell() {
        for (name, sig, shell_status) in [
            ("SEGV", libc::SIGSEGV, 139),
            ("ABRT", libc::SIGABRT, 134),
            ("KILL", libc::SIGKILL, 137),
        ] {
            let outcome = run_sh(&format!("ulimit -c 0; kill -s {name} $$")).outcome;
            assert_eq!(outcome.termination(), Termination::Signaled(sig), "{name}");
            assert_eq!(outcome.termination().exit_status_like_shell(), shell_status);
            assert_eq!(
                outcome.termination().signal_name(),
                Some(format!("SIG{name}").as_str())
            );
            assert!(!outcome.termination().success());
        }
        assert_eq!(
            Termination::Signaled(libc::SIGSEGV).to_string(),
            "signal 11 (SIGSEGV)"
        );
    }

    #[test]
    fn lines_are_delivered_in_order_per_stream() {
        let captured = run_sh(
            "printf 'a\\nb\\n'; printf 'x\\n' >&2; printf 'c\\r\\n\\nd'; printf 'y\\nz' >&2",
        );
        assert_eq!(captured.stdout, ["a", "b", "c", "", "d"]);
        assert_eq!(captured.stderr, ["x", "y", "z"]);
        assert_eq!(captured.outcome.stderr_tail, ["x", "y", "z"]);
        assert!(captured.outcome.termination().success());
    }

    #[test]
    fn invalid_utf8_is_decoded_lossily() {
        let captured = run_sh("printf '\\377\\376ok\\n\\303\\251t\\303\\251\\n'");
        assert_eq!(captured.stdout, ["\u{fffd}\u{fffd}ok", "été"]);
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_50_lines() {
        let captured = run_sh("i=1; while [ $i -le 120 ]; do echo line$i >&2; i=$((i+1)); done");
        assert_eq!(captured.stderr.len(), 120);
        let expected: Vec<String> = (71..=120).map(|i| format!("line{i}")).collect();
        assert_eq!(captured.outcome.stderr_tail, expected);
    }

    #[test]
    fn large_output_arrives_complete() {
        // More than a pipe buffer on each stream, interleaved.
        let captured =
            run_sh("i=0; while [ $i -lt 5000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done");
        assert_eq!(captured.stdout.len(), 5000);
        assert_eq!(captured.stderr.len(), 5000);
        assert_eq!(captured.stdout[4999], "out4999");
        assert_eq!(captured.stderr[1234], "err1234");
    }

    #[test]
    fn peak_memory_and_cpu_time_are_measured() {
        let spec = Spec::new("python3", "/").args(["-c", "b = b'x' * (100 << 20)"]);
        let outcome = capture(&spec, &Cancel::new()).outcome;
        assert!(outcome.termination().success(), "{outcome:?}");
        assert!(
            outcome.max_rss_kb >= 90 * 1024,
            "max RSS {} KiB",
            outcome.max_rss_kb
        );
        assert!(own_memory_mb() > 0);

        let busy =
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass";
        let spec = Spec::new("python3", "/").args(["-c", busy]);
        let outcome = capture(&spec, &Cancel::new()).outcome;
        assert!(outcome.termination().success(), "{outcome:?}");
        assert!(outcome.user > Duration::ZERO);
        assert!(
            outcome.user + outcome.sys >= Duration::from_millis(250),
            "{outcome:?}"
        );
        assert!(outcome.wall >= Duration::from_millis(250), "{outcome:?}");
    }

    #[test]
    fn the_child_leads_its_own_process_group() {
        let captured = run_sh("cut -d' ' -f5 /proc/$$/stat");
        let pgid: u32 = captured.stdout[0].parse().expect("pgid");
        assert_eq!(pgid, captured.outcome.pid);
        let ours = rustix::process::getpgrp().as_raw_nonzero().get() as u32;
        assert_ne!(pgid, ours);
    }

    #[test]
    fn a_grandchild_left_in_the_group_is_killed() {
        let started = Instant::now();
        let captured = run_sh("sleep 100 & echo $!; exit 0");
        let grandchild: u32 = captured.stdout[0].parse().expect("pid");
        let ended = dies_within(grandchild, Duration::from_secs(2));
        kill_stray(grandchild);
        assert!(ended, "the grandchild {grandchild} outlived the run");
        assert_eq!(captured.outcome.termination(), Termination::Exited(0));
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_process_that_left_the_group_does_not_hold_the_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The escaped process keeps stdout and stderr open; the leader exits once it has escaped.
        let spec = Spec::new("/bin/sh", dir.path()).args([
            "-c",
            "setsid sh -c 'echo $$ > pid; exec sleep 5' & \
             while [ ! -s pid ]; do sleep 0.02; done; cat pid",
        ]);
        let started = Instant::now();
        let captured = capture(&spec, &Cancel::new());
        let elapsed = started.elapsed();
        let escaped: u32 = captured.stdout[0].parse().expect("pid");
        let was_alive = !is_dead(escaped);
        kill_stray(escaped);
        assert!(was_alive, "the escaped process should still be running");
        assert!(captured.outcome.termination().success());
        assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    }

    #[test]
    fn a_timeout_terminates_the_group() {
        let started = Instant::now();
        let spec = Spec::new("sleep", "/")
            .arg("100")
            .timeout(Some(Duration::from_millis(200)));
        let outcome = capture(&spec, &Cancel::new()).outcome;
        assert_eq!(
            outcome.end,
            End::TimedOut(Termination::Signaled(libc::SIGTERM))
        );
        assert!(outcome.wall >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn sigterm_ignored_means_sigkill_after_the_grace() {
        let started = Instant::now();
        let spec = sh("trap '' TERM; echo ready; sleep 100")
            .timeout(Some(Duration::from_millis(500)))
            .kill_grace(Duration::from_millis(300));
        let captured = capture(&spec, &Cancel::new());
        assert_eq!(captured.stdout, ["ready"]);
        let outcome = captured.outcome;
        assert_eq!(
            outcome.end,
            End::TimedOut(Termination::Signaled(libc::SIGKILL))
        );
        assert!(outcome.wall >= Duration::from_millis(800), "{outcome:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn cancellation_from_another_thread_ends_the_run() {
        let cancel = Cancel::new();
        let canceller = cancel.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            canceller.cancel();
        });
        let started = Instant::now();
        let captured = capture(&sh("sleep 100 & echo $!; wait"), &cancel);
        let elapsed = started.elapsed();
        thread.join().expect("canceller");
        let grandchild: u32 = captured.stdout[0].parse().expect("pid");
        let ended = dies_within(grandchild, Duration::from_secs(2));
        kill_stray(grandchild);
        assert!(matches!(captured.outcome.end, End::Cancelled(_)));
        assert_eq!(
            captured.outcome.termination(),
            Termination::Signaled(libc::SIGTERM)
        );
        assert!(elapsed >= Duration::from_millis(200));
        assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
        assert!(ended, "the grandchild {grandchild} outlived the run");
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn a_cancelled_flag_prevents_the_start() {
        let cancel = Cancel::new();
        cancel.cancel();
        cancel.cancel();
        let error = run(&sh("exit 0"), &mut |_, _| {}, &cancel).expect_err("cancelled");
        assert!(matches!(error, SpawnError::Cancelled { .. }), "{error:?}");
        assert_eq!(error.program(), Path::new("/bin/sh"));
    }

    #[test]
    fn parent_death_kills_the_child() {
        let mut parent = Command::new(std::env::current_exe().expect("current_exe"))
            .args(["--exact", HELPER_TEST, "--nocapture", "--test-threads=1"])
            .env(HELPER_ENV, "PARENT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn helper");
        let mut pid = None;
        for line in BufReader::new(parent.stdout.take().expect("stdout")).lines() {
            let line = line.expect("read helper output");
            // libtest may print "test <name> ... " on the same line first.
            if let Some((_, rest)) = line.split_once("PID ") {
                pid = rest.parse::<u32>().ok();
                break;
            }
        }
        let _ = parent.kill();
        let _ = parent.wait();
        let sleeper = pid.expect("the helper printed the child's pid");
        let ended = dies_within(sleeper, Duration::from_secs(2));
        kill_stray(sleeper);
        assert!(ended, "the child {sleeper} outlived its parent");
    }

    #[test]
    fn environment_and_working_directory_are_applied() {
        let before = std::env::current_dir().expect("cwd");
        let dir = tempfile::tempdir().expect("tempdir");
        let captured = capture(
            &Spec::new("/bin/sh", dir.path()).args(["-c", "pwd -P"]),
            &Cancel::new(),
        );
        let canonical = dir.path().canonicalize().expect("canonicalize");
        assert_eq!(captured.stdout, [canonical.display().to_string()]);
        assert_eq!(std::env::current_dir().expect("cwd"), before);

        // Some variable this process has, to see it inherited and then removed.
        let (inherited, value) = std::env::vars()
            .find(|(key, _)| !key.is_empty() && !key.contains('='))
            .expect("the test process has an environment");
        let printed = |spec: &Spec| capture(spec, &Cancel::new()).stdout;
        assert!(printed(&Spec::new("env", "/")).contains(&format!("{inherited}={value}")));
        let spec = Spec::new("env", "/")
            .env("NXCC_T_SET", "value with spaces")
            .env_remove(inherited.clone())
            .env_remove("NXCC_T_BOTH")
            .env("NXCC_T_BOTH", "set wins");
        let env = printed(&spec);
        assert!(
            env.contains(&"NXCC_T_SET=value with spaces".to_string()),
            "{env:?}"
        );
        assert!(env.contains(&"NXCC_T_BOTH=set wins".to_string()), "{env:?}");
        let prefix = format!("{inherited}=");
        assert!(!env.iter().any(|line| line.starts_with(&prefix)), "{env:?}");
    }

    #[test]
    fn stdin_is_empty() {
        let captured = run_sh("wc -c");
        assert_eq!(captured.stdout, ["0"]);
    }

    #[test]
    fn spawn_errors_name_the_program() {
        let missing = Path::new("/nonexistent/nxcc-test/tool");
        let error = run(&Spec::new(missing, "/"), &mut |_, _| {}, &Cancel::new())
            .expect_err("missing program");
        assert!(
            matches!(error, SpawnError::ProgramNotFound { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("/nonexistent/nxcc-test/tool"));

        let error = run(
            &Spec::new("nxcc-no-such-tool-on-path", "/"),
            &mut |_, _| {},
            &Cancel::new(),
        )
        .expect_err("missing program on PATH");
        assert!(
            matches!(error, SpawnError::ProgramNotFound { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("nxcc-no-such-tool-on-path"));

        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("not-executable.sh");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write");
        let error = run(&Spec::new(&script, "/"), &mut |_, _| {}, &Cancel::new())
            .expect_err("not executable");
        assert!(
            matches!(error, SpawnError::NotExecutable { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains(&script.display().to_string()));

        let gone = dir.path().join("no-such-dir");
        let error = run(&Spec::new("/bin/sh", &gone), &mut |_, _| {}, &Cancel::new())
            .expect_err("missing cwd");
        assert!(matches!(error, SpawnError::CwdMissing { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("/bin/sh"), "{message}");
        assert!(message.contains(&gone.display().to_string()), "{message}");
    }

    #[test]
    fn concurrent_runs_keep_their_own_output() {
        let threads: Vec<_> = (0..4)
            .map(|n| {
                std::thread::spawn(move || {
                    let spec =
                        sh("for i in 1 2 3; do echo $0-$i; sleep 0.05; done").arg(format!("t{n}"));
                    (n, capture(&spec, &Cancel::new()))
                })
            })
            .collect();
        for thread in threads {
            let (n, captured) = thread.join().expect("thread");
            let expected: Vec<String> = (1..=3).map(|i| format!("t{n}-{i}")).collect();
            assert_eq!(captured.stdout, expected);
            assert!(captured.outcome.termination().success());
        }
    }

    #[test]
    fn a_panicking_callback_leaves_no_child_behind() {
        let spec = sh("echo $$; exec sleep 100");
        let mut pid = 0u32;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(
                &spec,
                &mut |_, line| {
                    pid = line.parse().expect("pid");
                    panic!("callback failure");
                },
                &Cancel::new(),
            )
        }));
        assert!(result.is_err());
        assert!(pid > 0);
        // The guard killed and reaped it: no process, not even a zombie.
        let gone = !Path::new(&format!("/proc/{pid}")).exists();
        kill_stray(pid);
        assert!(gone, "the child {pid} outlived the run");
    }

    #[test]
    fn line_splitting() {
        let mut lines = Lines::default();
        let mut got = Vec::new();
        let mut emit = |line: &str| got.push(line.to_string());
        lines.feed(b"one\ntw", &mut emit);
        lines.feed(b"o\r\n\nthr", &mut emit);
        lines.feed(b"ee", &mut emit);
        lines.finish(&mut emit);
        lines.finish(&mut emit);
        assert_eq!(got, ["one", "two", "", "three"]);

        // A UTF-8 character split across reads survives.
        let mut got = Vec::new();
        let mut emit = |line: &str| got.push(line.to_string());
        lines.feed(b"\xc3", &mut emit);
        lines.feed(b"\xa9\n", &mut emit);
        assert_eq!(got, ["é"]);

        // An endless line comes out in bounded pieces.
        let mut sizes = Vec::new();
        let mut emit = |line: &str| sizes.push(line.len());
        lines.feed(&vec![b'a'; MAX_LINE_BYTES * 2 + 10], &mut emit);
        lines.feed(b"\n", &mut emit);
        assert_eq!(sizes, [MAX_LINE_BYTES, MAX_LINE_BYTES, 10]);
    }

    #[test]
    fn wait_statuses_decode() {
        assert_eq!(
            Termination::from_wait_status(3 << 8),
            Termination::Exited(3)
        );
        assert_eq!(
            Termination::from_wait_status(libc::SIGKILL),
            Termination::Signaled(libc::SIGKILL)
        );
        assert_eq!(
            Termination::Signaled(libc::SIGKILL).exit_status_like_shell(),
            137
        );
    }

    #[test]
    fn spec_builder() {
        let spec = Spec::new("tool", "/w")
            .arg("--a")
            .args(["b", "c"])
            .timeout(Some(Duration::from_secs(2)));
        assert_eq!(spec.args, ["--a", "b", "c"]);
        assert_eq!(spec.cwd, Path::new("/w"));
        assert_eq!(spec.kill_grace, DEFAULT_KILL_GRACE);
        assert_eq!(spec.timeout, Some(Duration::from_secs(2)));
    }
}
