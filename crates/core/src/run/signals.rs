//! Signals sent to nxcc itself, and the parent-death signal of the worker.
//!
//! [`install`] handles SIGINT, SIGTERM and SIGHUP (04-run.md "Timeouts and signals"). The handler
//! is minimal and async-signal-safe: it records the first signal number in an atomic and writes
//! one byte (the signal number) to a self-pipe. A watcher thread reads the pipe and runs what the
//! program registered with [`Signals::on_signal`] — typically `move |_| cancel.cancel()` on the
//! [`Cancel`](super::process::Cancel) of the running job, which then gets SIGTERM on its process
//! group and SIGKILL after the grace period. The program waits with [`Signals::wait_timeout`] or
//! polls `Signals::received`, and exits with [`exit_status_for`] the signal.
//!
//! SIGPIPE is left as the Rust runtime sets it: ignored, so a write to a closed pipe returns
//! `EPIPE` instead of killing nxcc. Children get the default disposition back (the standard
//! library resets it before `exec`), and handlers installed here are reset by `exec` too.
//!
//! Child processes run in their own process groups ([`super::process`]), so a Ctrl-C at the
//! terminal reaches nxcc only; nxcc decides what its children get.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The signals [`install`] handles.
pub const HANDLED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The first handled signal received (0: none yet). Written by the signal handler.
static FIRST: AtomicI32 = AtomicI32::new(0);
/// The write end of the self-pipe (-1 until installed). Read by the signal handler.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// The installed state; `install` is idempotent.
static INSTALLED: Mutex<Option<Signals>> = Mutex::new(None);

type Callback = Arc<dyn Fn(i32) + Send + Sync>;

/// State shared by the handle and the watcher thread (leaked: it lives as long as the process).
struct Shared {
    callbacks: Mutex<Vec<Callback>>,
    /// Guards nothing but the condition variable's wake-ups; the predicate is [`FIRST`].
    lock: Mutex<()>,
    seen: Condvar,
}

/// A handle on the installed handlers (cheap to copy; all copies see the same state).
#[derive(Clone, Copy)]
pub struct Signals {
    shared: &'static Shared,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals")
            .field("received", &self.received())
            .finish()
    }
}

/// Handle SIGINT, SIGTERM and SIGHUP from now on (idempotent: a second call returns the same
/// handle). Fails only if the self-pipe, the watcher thread or `sigaction` cannot be set up.
pub fn install() -> io::Result<Signals> {
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(signals) = *installed {
        return Ok(signals);
    }
    let (read_end, write_end) = self_pipe()?;
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        callbacks: Mutex::new(Vec::new()),
        lock: Mutex::new(()),
        seen: Condvar::new(),
    }));
    std::thread::Builder::new()
        .name("nxcc-signals".into())
        .stack_size(64 * 1024)
        .spawn(move || watch(File::from(read_end), shared))?;
    // The write end lives as long as the process: the handler may use it at any time.
    WAKE_FD.store(
        std::os::fd::IntoRawFd::into_raw_fd(write_end),
        Ordering::SeqCst,
    );
    for sig in HANDLED {
        // SAFETY: a zeroed `sigaction` is a valid value; `handler` only performs
        // async-signal-safe operations (atomics, `write`, errno save/restore).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    let signals = Signals { shared };
    *installed = Some(signals);
    Ok(signals)
}

/// The exit status of nxcc after `sig` (04-run.md): 130 for SIGINT, 143 for SIGTERM and SIGHUP,
/// 128 + the number for any other signal.
pub fn exit_status_for(sig: i32) -> i32 {
    match sig {
        libc::SIGINT => 130,
        libc::SIGTERM | libc::SIGHUP => 143,
        other => 128 + other,
    }
}

/// The name of a signal for messages: `SIGSEGV`, or `signal N` for one without a conventional
/// name.
pub fn signal_text(sig: i32) -> String {
    signal_name(sig).map_or_else(|| format!("signal {sig}"), str::to_string)
}

/// The conventional name of a signal number (`"SIGSEGV"`), for messages.
pub(crate) fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

impl Signals {
    /// The first handled signal nxcc received, if any.
    pub(crate) fn received(&self) -> Option<i32> {
        match FIRST.load(Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }

    /// Wait up to `timeout` for a handled signal; the first one received, if any.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let mut guard = self
            .shared
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(sig) = self.received() {
                return Some(sig);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            guard = self
                .shared
                .seen
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Run `callback` (on the watcher thread) with the number of every handled signal received
    /// from now on; if one was already received, it also runs once right away, on this thread.
    /// It may therefore run more than once for the same event and must be idempotent —
    /// [`Cancel::cancel`](super::process::Cancel::cancel) is.
    pub fn on_signal(&self, callback: impl Fn(i32) + Send + Sync + 'static) {
        let callback: Callback = Arc::new(callback);
        self.shared
            .callbacks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(callback.clone());
        if let Some(sig) = self.received() {
            callback(sig);
        }
    }
}

/// The signal handler: async-signal-safe operations only.
extern "C" fn handler(sig: libc::c_int) {
    // SAFETY: `__errno_location` returns this thread's errno; saving and restoring it keeps the
    // interrupted code's view of errno intact.
    let saved_errno = unsafe { *libc::__errno_location() };
    let _ = FIRST.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: `write` is async-signal-safe; the buffer is one valid byte. The pipe is
        // non-blocking: if it is full, the byte is dropped (the watcher is already awake).
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// The watcher thread: one byte per signal received.
fn watch(mut pipe: File, shared: &'static Shared) {
    let mut buf = [0u8; 16];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        {
            let _guard = shared.lock.lock().unwrap_or_else(PoisonError::into_inner);
            shared.seen.notify_all();
        }
        let callbacks = shared
            .callbacks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for &sig in &buf[..n] {
            for callback in &callbacks {
                callback(i32::from(sig));
            }
        }
    }
}

/// A close-on-exec pipe whose write end is non-blocking (the handler must never block).
fn self_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read_end, write_end) = super::os::pipe()?;
    let write_flags = rustix::fs::fcntl_getfl(&write_end)?;
    rustix::fs::fcntl_setfl(&write_end, write_flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok((read_end, write_end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::process::{getpid, kill_process, Signal};
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    /// The worker's start-up: the parent-death signal, and SIGKILL at once if the parent is not
    /// `parent` (already gone), exactly as if it had died a moment later.
    fn die_with_parent_or_kill(parent: u32) {
        if crate::run::os::die_with_parent(parent, Signal::KILL).is_err() {
            kill_process(getpid(), Signal::KILL).expect("kill self");
        }
    }

    /// Environment variable selecting what [`helper_process`] does in a re-executed test binary.
    const HELPER_ENV: &str = "NXCC_TEST_SIGNALS_HELPER";
    const HELPER_TEST: &str = "run::signals::tests::helper_process";

    /// Not a test of its own: the body of the child processes the tests below start by
    /// re-executing this test binary with [`HELPER_ENV`] set (signal handlers are process-wide,
    /// so they are installed in a child, never in the test process). Without the variable it
    /// does nothing.
    #[test]
    #[ignore = "a helper: the tests run it in a child process (with --ignored)"]
    fn helper_process() {
        let Ok(mode) = std::env::var(HELPER_ENV) else {
            panic!("run only as a child of this module's tests, with {HELPER_ENV} set");
        };
        let signals = install().expect("install");
        match mode.as_str() {
            // Send ourselves a signal; report what the handle and a callback observed.
            "INT" | "TERM" | "HUP" => helper_signal(&signals, &mode),
            // A signal while a child runs cancels it (the supervisor's wiring).
            "CANCEL" => helper_cancel(&signals),
            // The parent is not who we expect: the call kills us with SIGKILL.
            "WRONG-PARENT" => {
                let real = std::os::unix::process::parent_id();
                die_with_parent_or_kill(real.wrapping_add(1));
                println!("RESULT survived");
                std::process::exit(0);
            }
            "RIGHT-PARENT" => {
                let real = std::os::unix::process::parent_id();
                die_with_parent_or_kill(real);
                println!("RESULT survived");
                std::process::exit(0);
            }
            // A parent of a worker that asks for the parent-death signal itself.
            "MIDDLE" => helper_middle(),
            "WORKER" => {
                let parent = std::os::unix::process::parent_id();
                die_with_parent_or_kill(parent);
                println!("PID {}", std::process::id());
                let _ = std::io::Write::flush(&mut std::io::stdout());
                std::thread::sleep(Duration::from_secs(100));
            }
            other => panic!("unknown helper mode {other}"),
        }
    }

    /// Send ourselves a signal; report what the handle and a callback observed.
    fn helper_signal(signals: &Signals, mode: &str) -> ! {
        let sig = match mode {
            "INT" => Signal::INT,
            "TERM" => Signal::TERM,
            _ => Signal::HUP,
        };
        let observed = Arc::new(AtomicI32::new(0));
        let seen = observed.clone();
        signals.on_signal(move |sig| seen.store(sig, Ordering::SeqCst));
        assert_eq!(signals.received(), None);
        assert_eq!(signals.wait_timeout(Duration::from_millis(50)), None);
        kill_process(getpid(), sig).expect("kill self");
        let got = signals.wait_timeout(Duration::from_secs(5));
        let deadline = Instant::now() + Duration::from_secs(5);
        while observed.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        println!(
            "RESULT waited={got:?} callback={} received={:?}",
            observed.load(Ordering::SeqCst),
            signals.received()
        );
        std::process::exit(exit_status_for(got.unwrap_or(0)));
    }

    /// A signal while a child runs cancels it (the supervisor's wiring).
    fn helper_cancel(signals: &Signals) -> ! {
        use crate::run::process::{run, Cancel, Spec};
        let cancel = Cancel::new();
        let on_signal = cancel.clone();
        signals.on_signal(move |_| on_signal.cancel());
        let spec = Spec::new("/bin/sh", "/").args(["-c", "echo ready; exec sleep 100"]);
        let outcome = run(
            &spec,
            &mut |_, line| {
                if line == "ready" {
                    kill_process(getpid(), Signal::TERM).expect("kill self");
                }
            },
            &cancel,
        )
        .expect("run");
        println!(
            "RESULT cancelled={};termination={};wall_ms={}",
            matches!(outcome.end, crate::run::process::End::Cancelled(_)),
            outcome.termination(),
            outcome.wall.as_millis()
        );
        std::process::exit(exit_status_for(signals.received().unwrap_or(0)));
    }

    /// A parent of a worker that asks for the parent-death signal itself.
    fn helper_middle() {
        let mut worker = Command::new(std::env::current_exe().expect("current_exe"))
            .args([
                "--exact",
                HELPER_TEST,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, "WORKER")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn worker");
        let _ = worker.wait();
    }

    /// Run the helper in `mode`; its exit status (code or signal) and its `RESULT` line.
    fn helper(mode: &str) -> (std::process::ExitStatus, String) {
        let mut child = Command::new(std::env::current_exe().expect("current_exe"))
            .args([
                "--exact",
                HELPER_TEST,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn helper");
        let mut result = String::new();
        for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
            let line = line.expect("read helper output");
            // libtest may print "test <name> ... " on the same line first.
            if let Some((_, rest)) = line.split_once("RESULT ") {
                result = rest.to_string();
            }
        }
        (child.wait().expect("wait helper"), result)
    }

    #[test]
    fn sigterm_is_observed_and_maps_to_143() {
        let (status, result) = helper("TERM");
        assert_eq!(result, "waited=Some(15) callback=15 received=Some(15)");
        assert_eq!(status.code(), Some(143), "{status:?}");
    }

    #[test]
    fn sigint_is_observed_and_maps_to_130() {
        let (status, result) = helper("INT");
        assert_eq!(result, "waited=Some(2) callback=2 received=Some(2)");
        assert_eq!(status.code(), Some(130), "{status:?}");
    }

    #[test]
    fn sighup_is_observed_and_maps_to_143() {
        let (status, result) = helper("HUP");
        assert_eq!(result, "waited=Some(1) callback=1 received=Some(1)");
        assert_eq!(status.code(), Some(143), "{status:?}");
    }

    #[test]
    fn a_signal_cancels_the_running_child() {
        let (status, result) = helper("CANCEL");
        let fields: Vec<&str> = result.split(';').collect();
        assert_eq!(
            fields[..2],
            ["cancelled=true", "termination=signal 15 (SIGTERM)"]
        );
        let wall_ms: u64 = fields[2]
            .strip_prefix("wall_ms=")
            .and_then(|ms| ms.parse().ok())
            .expect("wall_ms");
        assert!(wall_ms < 3000, "the child took {wall_ms} ms to end");
        assert_eq!(status.code(), Some(143), "{status:?}");
    }

    #[test]
    fn parent_death_signal_kills_at_once_when_the_parent_is_not_the_expected_one() {
        use std::os::unix::process::ExitStatusExt;
        let (status, result) = helper("WRONG-PARENT");
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        assert_eq!(result, "");
        let (status, result) = helper("RIGHT-PARENT");
        assert_eq!(status.code(), Some(0), "{status:?}");
        assert_eq!(result, "survived");
    }

    #[test]
    fn a_worker_with_the_parent_death_signal_dies_with_its_parent() {
        use crate::run::process::tests::{dies_within, is_dead, start_helper};
        let (mut middle, worker) = start_helper(HELPER_TEST, HELPER_ENV, "MIDDLE");
        let alive_before = !is_dead(worker);
        let _ = middle.kill();
        let _ = middle.wait();
        let ended = dies_within(worker, Duration::from_secs(2));
        if let Some(pid) = i32::try_from(worker)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = kill_process(pid, Signal::KILL);
        }
        assert!(alive_before, "the worker should run until its parent dies");
        assert!(ended, "the worker {worker} outlived its parent");
    }

    #[test]
    fn exit_status_for_follows_the_spec() {
        assert_eq!(exit_status_for(libc::SIGINT), 130);
        assert_eq!(exit_status_for(libc::SIGTERM), 143);
        assert_eq!(exit_status_for(libc::SIGHUP), 143);
        assert_eq!(exit_status_for(libc::SIGKILL), 137);
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(libc::SIGSEGV), Some("SIGSEGV"));
        assert_eq!(signal_name(libc::SIGABRT), Some("SIGABRT"));
        assert_eq!(signal_name(libc::SIGKILL), Some("SIGKILL"));
        assert_eq!(signal_name(libc::SIGTERM), Some("SIGTERM"));
        assert_eq!(signal_name(0), None);
        assert_eq!(signal_name(200), None);
    }
}
