//! Running one child process under supervision (04-run.md "Process model", "Measuring every
//! job", "Timeouts and signals"; 03-jobs.md "Running a tool").
//!
//! [`run`] starts the program described by a [`Spec`] and blocks the calling thread until the
//! child is gone:
//! - the child is started by `spawn` (a `vfork`-style clone, no copy of this process's memory);
//!   it gets its own process group (`setpgid(0, 0)`) and `PR_SET_PDEATHSIG` = SIGKILL, set
//!   before `exec`; if the parent has already died by then, the child exits at once.
//!   The kernel sends the parent-death signal when the *thread* that started it exits, so `run` must
//!   be called from a thread that lives until it returns — which it does by construction, as the
//!   calling thread blocks until the child has ended. (A thread-pool thread is fine for the same
//!   reason: it cannot retire while blocked in `run`.)
//! - the child's working directory is set in the child; the parent's never changes;
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
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::lines::Lines;
pub use super::lines::MAX_LINE_BYTES;
pub(crate) use super::os::own_memory_mb;
use super::os::{poll, reap, signal_group, timeval, wait_for_exit};

mod cancel;
mod outcome;
mod spawn;
mod spec;
#[cfg(test)]
pub(crate) mod tests;

pub use cancel::Cancel;
use cancel::CANCEL_POLL;
use outcome::classify_spawn_error;
pub use outcome::{End, Outcome, SpawnError, Termination};
pub use spec::Spec;

/// Time between SIGTERM and SIGKILL unless the [`Spec`] says otherwise (04-run.md: 5 s).
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// How many of the last stderr lines an [`Outcome`] keeps (03-jobs.md: 50).
pub const STDERR_TAIL_LINES: usize = 50;
/// How long output is still read after the group leader has exited and its group was killed.
/// Only a process that left the group and kept the pipes open makes `run` wait this long.
pub const OUTPUT_DRAIN_LIMIT: Duration = Duration::from_millis(500);

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The child's standard output.
    Stdout,
    /// The child's standard error.
    Stderr,
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

    let started = Instant::now();
    let spawned = spawn::spawn(spec, std::process::id())
        .map_err(|error| classify_spawn_error(spec, error))?;
    let pid = spawned.pid;
    // From here on the guard kills and reaps the child on every early return (or panic).
    let mut guard = Reaper { pid, armed: true };

    let exit_watch = ExitWatch::start(pid).map_err(io_error)?;

    let mut pipes = [
        Some(Pipe::new(Stream::Stdout, spawned.stdout)),
        Some(Pipe::new(Stream::Stderr, spawned.stderr)),
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
    let mut watch = Watch {
        deadline: spec.timeout.map(|timeout| started + timeout),
        kill_grace: spec.kill_grace,
        cancel_fd: cancel.wake_fd(),
        timed_out: false,
        cancelled: false,
        kill_at: None,
        exited_at: None,
    };
    pump(
        pid,
        &mut pipes,
        &exit_watch,
        &mut watch,
        cancel,
        &mut deliver,
    )
    .map_err(io_error)?;
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
    exit_watch.finish();
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

/// Deliver the child's output until the leader has exited and its pipes are drained (or the
/// drain limit passed), enforcing the deadline and the cancellation meanwhile.
fn pump(
    pid: u32,
    pipes: &mut [Option<Pipe>; 2],
    exit_watch: &ExitWatch,
    watch: &mut Watch,
    cancel: &Cancel,
    deliver: &mut dyn FnMut(Stream, &str),
) -> io::Result<()> {
    let mut read_buf = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        if watch.exited_at.is_none() {
            watch.enforce(pid, cancel, now);
        } else if watch.drained(&pipes[..], now) {
            return Ok(());
        }

        // Wait for output, the leader's exit, a cancellation, or the next deadline.
        let mut fds: Vec<RawFd> = pipes.iter().flatten().map(|pipe| pipe.fd()).collect();
        let exit_slot = watch.exited_at.is_none().then(|| {
            fds.push(exit_watch.fd());
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
            Err(error) => return Err(error),
        };

        let mut slot = 0;
        for entry in pipes.iter_mut() {
            let Some(pipe) = entry else { continue };
            let readable = ready[slot];
            slot += 1;
            if readable && !pipe.read_some(&mut read_buf, deliver) {
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
}

/// What tells a run that the group leader has exited, without reaping it: a pidfd (readable once
/// the process has ended), or where the kernel has none, a small thread blocked in
/// `waitid(WNOWAIT)` that closes its end of a socket pair then.
enum ExitWatch {
    Pidfd(OwnedFd),
    Thread {
        seen: UnixStream,
        waiter: std::thread::JoinHandle<()>,
    },
}

impl ExitWatch {
    fn start(pid: u32) -> io::Result<ExitWatch> {
        let raw = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw);
        if let Some(fd) = raw
            .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
        {
            return Ok(ExitWatch::Pidfd(fd));
        }
        ExitWatch::thread(pid)
    }

    fn thread(pid: u32) -> io::Result<ExitWatch> {
        let (seen, notify) = UnixStream::pair()?;
        let waiter = std::thread::Builder::new()
            .name("nxcc-wait".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                wait_for_exit(pid);
                drop(notify);
            })?;
        Ok(ExitWatch::Thread { seen, waiter })
    }

    /// The descriptor that becomes readable when the leader has exited.
    fn fd(&self) -> RawFd {
        match self {
            ExitWatch::Pidfd(fd) => fd.as_raw_fd(),
            ExitWatch::Thread { seen, .. } => seen.as_raw_fd(),
        }
    }

    /// After the leader was reaped: the waiter thread, if any, is done.
    fn finish(self) {
        if let ExitWatch::Thread { waiter, .. } = self {
            let _ = waiter.join();
        }
    }
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
