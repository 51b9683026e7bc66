//! The fork server: a single-threaded helper process that forks workers on request, so that a
//! process with threads (the daemon) gets a worker without executing a program — no exec, no
//! dynamic loader, no second parse. It knows nothing about compiling: a request is bytes and three
//! file descriptors, and the worker runs the [`Body`] it was started with.
//!
//! - **Start.** [`ForkServer::start`] forks the helper while the caller is still single-threaded
//!   (the daemon does it before its runtime exists); the two talk over a `SOCK_SEQPACKET`
//!   socketpair (one message per request or reply, descriptors as `SCM_RIGHTS`). The helper
//!   closes every other inherited descriptor, leaves the caller's session (a Ctrl-C meant for the
//!   daemon does not reach it) and lives until its end of the socket reads end-of-file: when the
//!   caller exits, however it exits, the helper exits too.
//! - **A request** carries the payload and the worker's ends of its report pipe, stdout and
//!   stderr. A payload too large for one datagram ([`channel::INLINE_MAX`]) travels in a sealed
//!   memfd passed with them; a request the helper cannot read is refused with the reason. The helper forks; the child becomes the worker exactly as a re-executed one does —
//!   its own session, SIGTERM when its parent (the helper) dies, stdin on `/dev/null`, stdout and
//!   stderr on the pipes — and runs [`Body`] with the payload, then exits with its result.
//! - **Waiting.** The worker is the helper's child, not the caller's, so the helper reaps it
//!   (SIGCHLD through a `signalfd`) and forwards its wait status and peak RSS. Right after the
//!   fork it opens a pidfd on the child and passes it back with the pid: the caller signals the
//!   worker through the pidfd, which names that process and no other even after its pid is
//!   reused. (Its session is killed by id, as for any worker: a session id is not reused while a
//!   member of the session lives.)
//! - **Leftovers.** The helper is a child subreaper: whatever a worker's session still holds
//!   when the worker ends (a worker killed before it could end its tools) is reparented to the
//!   helper, so the caller finds the session's members among the helper's children
//!   (`/proc/PID/task/PID/children`) instead of reading every process on the machine.
//! - **A helper that stops answering** (stopped by a signal, stuck) is noticed by the caller
//!   alone, within [`ANSWER_BOUND`]: a request not answered, or a worker whose pidfd says it has
//!   ended but whose end is not reported. The helper is then killed and replaced as below; the
//!   request waiting re-executes its worker meanwhile.
//! - **The helper dying** (killed, crashed) is seen by the caller's reader as end-of-file: the
//!   helper is reaped, every worker still waited for is reported lost (its parent-death SIGTERM
//!   has stopped it; the caller waits on its pidfd, bounded, then kills its session), and the
//!   next request starts a new helper by executing this binary with [`HELPER_ARG`] (the caller has
//!   threads by then, so it cannot fork one). A request the dead helper never received is sent
//!   to the new one; one it received but never answered fails (the caller then re-executes the
//!   worker, on new pipes).
//! - **A record**: how many workers it started and how many requests it did not start one
//!   for, with the last reason ([`ForkServer::record`]; the daemon's status shows it). Such a
//!   request's compile re-executes its worker, and its log says why.
//!
//! Files: [`wire`] (the messages), [`channel`] (the socket and the memfd), `pidfd` (handles on
//! processes), `helper` (the helper's side); this file is the caller's side.

pub mod channel;
pub(crate) mod helper;
pub(crate) mod pidfd;
pub mod wire;

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::run::events::EventWriter;
use crate::run::supervisor::{Launch, Launched, WorkerFds};

pub(crate) use helper::serve_inherited;
use wire::{Msg, Payload};

/// The hidden first argument that makes the binary a fork server (a restarted one: its socket
/// is descriptor [`HELPER_FD`]).
pub const HELPER_ARG: &str = "__nxcc_fork_server";
/// The descriptor a restarted helper finds its socket on.
pub const HELPER_FD: RawFd = 3;
/// The largest request payload (a plan is a few KiB, a large one a few MiB); a larger one is
/// refused, not truncated.
pub const MAX_PAYLOAD: usize = 64 << 20;
/// The helper's process name (`/proc/PID/comm`).
pub const HELPER_NAME: &std::ffi::CStr = c"nxcc-forkserver";
/// A forked worker's process name.
pub const WORKER_NAME: &std::ffi::CStr = c"nxcc-worker";
/// How long the caller waits for a worker whose helper died to end (its parent-death SIGTERM
/// gives it the supervisor's grace to stop its tool) before its session is killed.
const LOST_WAIT: Duration = Duration::from_secs(7);
/// How long the helper may take to answer: to report a worker started, or the end of a worker
/// whose pidfd says it has ended. A helper that does not (stopped, stuck) is killed and replaced;
/// its workers' compiles are reported lost, and the request waiting re-executes its worker.
/// A helper that answers takes microseconds: the bound is for a machine under heavy load.
pub const ANSWER_BOUND: Duration = Duration::from_secs(5);
/// How often a waiting compile looks at its worker's pidfd while no report comes.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// What a forked worker runs: the request's payload and its report pipe; returns its exit status.
pub type Body = fn(&[u8], EventWriter) -> i32;

/// The caller's side: sends requests to the helper, restarts it when it died.
pub struct ForkServer {
    link: Mutex<Option<Arc<Link>>>,
    /// This executable's path (the restarted helper's `argv[0]`).
    program: Option<PathBuf>,
    next_id: AtomicU64,
    restarts: AtomicU64,
    record: Mutex<Record>,
}

/// How the fork server's requests went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Workers it started.
    pub started: u64,
    /// Requests it started no worker for (each such compile's worker was started another way).
    pub not_started: u64,
    /// Why the last of those was not.
    pub last_not_started: Option<String>,
}

/// One running helper and the requests it has not finished.
struct Link {
    sock: OwnedFd,
    helper: u32,
    /// A pidfd of the helper (our child, opened before it could be reaped): it is killed through
    /// it when it stops answering.
    helper_pidfd: OwnedFd,
    pending: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
    closed: AtomicBool,
    /// Why the helper was given up on while it still ran ([`Link::abandon`]).
    abandoned: Mutex<Option<String>>,
}

/// The helper's answer to one request, as its waiter gets it.
enum Reply {
    Started { pid: u32, pidfd: OwnedFd },
    Failed(i32),
    Refused(String),
    Exited { status: i32, max_rss_kb: u64 },
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkServer")
            .field("helper", &self.helper_pid())
            .field("restarts", &self.restarts())
            .finish()
    }
}

/// The bytes of a request's header before an inline payload.
const SPAWN_HEADER: usize = 11;

impl ForkServer {
    /// Fork the helper now. The caller must be single-threaded (checked): the child goes on
    /// running Rust code. The helper's workers run `body`; a helper started again later is this
    /// executable with [`HELPER_ARG`], whose `main` must call `serve_inherited` with the same
    /// body.
    pub fn start(body: Body) -> io::Result<Arc<ForkServer>> {
        if !crate::run::supervisor::single_threaded() {
            return Err(io::Error::other(
                "a fork server is forked only from a single-threaded process",
            ));
        }
        let (ours, theirs) = channel::pair()?;
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: this process has one thread, so the child may go on running ordinary Rust
        // code; it never returns from `serve`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(ours);
            // Keep only stdio and the socket, as HELPER_FD: the caller's pid file lock, its
            // listening socket and its log are none of the helper's business.
            // SAFETY: dup2 and close_range on descriptors of this (single-threaded) child; the
            // socket is then owned as HELPER_FD alone; the child ends without returning.
            unsafe {
                if theirs.as_raw_fd() != HELPER_FD {
                    libc::dup2(theirs.as_raw_fd(), HELPER_FD);
                }
                libc::syscall(
                    libc::SYS_close_range,
                    HELPER_FD as libc::c_uint + 1,
                    libc::c_uint::MAX,
                    0,
                );
                std::mem::forget(theirs);
                libc::_exit(helper::serve(OwnedFd::from_raw_fd(HELPER_FD), body));
            }
        }
        drop(theirs);
        let server = Arc::new(ForkServer {
            link: Mutex::new(None),
            program: std::env::current_exe().ok(),
            next_id: AtomicU64::new(1),
            restarts: AtomicU64::new(0),
            record: Mutex::new(Record::default()),
        });
        let link = Link::new(ours, pid as u32)?;
        *server.link.lock().unwrap_or_else(|p| p.into_inner()) = Some(link);
        Ok(server)
    }

    /// The helper's pid (`None` while none runs: it died and no request started a new one yet).
    pub fn helper_pid(&self) -> Option<u32> {
        let link = self.link.lock().unwrap_or_else(|p| p.into_inner());
        link.as_ref()
            .filter(|l| !l.closed.load(Ordering::SeqCst))
            .map(|l| l.helper)
    }

    /// Stop the helper (its owner is exiting): its socket is shut down, which ends it, and it
    /// is waited for up to `wait`, then killed; so that no process of the owner's outlives it.
    pub fn stop(&self, wait: Duration) {
        let link = self.link.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(link) = link else { return };
        link.closed.store(true, Ordering::SeqCst);
        // The reader thread holds the link too: shutting the socket down ends both sides.
        let _ = rustix::net::shutdown(&link.sock, rustix::net::Shutdown::Both);
        if !pidfd::wait(&link.helper_pidfd, wait) {
            pidfd::signal(&link.helper_pidfd, libc::SIGKILL);
            pidfd::wait(&link.helper_pidfd, wait);
        }
    }

    /// How many times the helper was started again after it died.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::SeqCst)
    }

    /// How its requests went so far.
    pub fn record(&self) -> Record {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn note(&self, result: &io::Result<Launched>) {
        let mut r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(_) => r.started += 1,
            Err(e) => {
                r.not_started += 1;
                r.last_not_started = Some(e.to_string());
            }
        }
    }

    /// The running helper, started again if it died.
    fn link(&self) -> io::Result<Arc<Link>> {
        let mut guard = self.link.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = guard.as_ref().filter(|l| !l.closed.load(Ordering::SeqCst)) {
            return Ok(l.clone());
        }
        let name = self.program.clone().ok_or_else(|| {
            io::Error::other("cannot find this executable to restart the fork server")
        })?;
        let (ours, theirs) = channel::pair()?;
        let fd = theirs.as_raw_fd();
        use std::os::unix::process::CommandExt;
        // This very executable, even if its file was replaced since (an upgrade): the request
        // format is this build's.
        let mut cmd = std::process::Command::new("/proc/self/exe");
        cmd.arg0(name)
            .arg(HELPER_ARG)
            .stdin(std::process::Stdio::null())
            .current_dir("/");
        // SAFETY: only async-signal-safe calls between fork and exec (dup2, fcntl, setsid).
        unsafe {
            cmd.pre_exec(move || {
                if fd == HELPER_FD {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, HELPER_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(theirs);
        let link = Link::new(ours, child.id())?;
        // Reaped by the link's reader when the helper ends.
        drop(child);
        self.restarts.fetch_add(1, Ordering::SeqCst);
        *guard = Some(link.clone());
        Ok(link)
    }

    /// Start one worker running the body on `payload`.
    pub fn spawn(&self, payload: &[u8], fds: &WorkerFds) -> io::Result<Launched> {
        if payload.len() > MAX_PAYLOAD {
            return Err(io::Error::other(format!(
                "a request of {} bytes is larger than the fork server takes ({MAX_PAYLOAD})",
                payload.len()
            )));
        }
        // A payload too large for one datagram goes in a sealed memfd, the fourth descriptor.
        let memfd = if SPAWN_HEADER + payload.len() > channel::INLINE_MAX {
            Some(channel::sealed_memfd(payload)?)
        } else {
            None
        };
        let mut carried = vec![fds.events.as_fd(), fds.stdout.as_fd(), fds.stderr.as_fd()];
        carried.extend(memfd.as_ref().map(|m| m.as_fd()));
        // A helper found dead when the request is sent is started again once, and asked again.
        for _ in 0..2 {
            let link = self.link()?;
            let id = self.next_id.fetch_add(1, Ordering::SeqCst);
            let (tx, rx) = mpsc::channel();
            {
                let mut pending = link.pending.lock().unwrap_or_else(|p| p.into_inner());
                if link.closed.load(Ordering::SeqCst) {
                    continue;
                }
                pending.insert(id, tx);
            }
            let payload = match &memfd {
                Some(_) => Payload::Memfd {
                    len: payload.len() as u64,
                },
                None => Payload::Inline(payload.to_vec()),
            };
            let request = Msg::Spawn { id, payload };
            if let Err(e) = channel::send(link.sock.as_fd(), &request, &carried) {
                link.forget(id);
                if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) {
                    continue;
                }
                return Err(e);
            }
            return answer(id, rx, link);
        }
        Err(io::Error::other(
            "the fork server was gone twice when a request was sent",
        ))
    }

    /// A [`Launch`] of one worker with `payload`.
    pub(crate) fn launcher(&self, payload: Vec<u8>) -> impl Launch + '_ {
        Request {
            server: self,
            payload,
        }
    }
}

/// The live members of session `sid` among the helper's children: once a worker has ended,
/// whatever its session left is there (the helper is a child subreaper; a member whose parent
/// lives is found when that parent is killed). `None` when the helper's children cannot be read
/// (it is gone: its orphans went elsewhere).
fn helper_children_in(helper: u32, sid: u32) -> Option<Vec<u32>> {
    let list = std::fs::read_to_string(format!("/proc/{helper}/task/{helper}/children")).ok()?;
    Some(
        list.split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .filter(|&p| {
                crate::run::os::ProcStat::read(p)
                    .is_some_and(|s| s.state != 'Z' && s.session == sid && s.ppid == helper)
            })
            .collect(),
    )
}

fn launched(pid: u32, pidfd: OwnedFd, rx: mpsc::Receiver<Reply>, link: Arc<Link>) -> Launched {
    let pidfd = Arc::new(pidfd);
    let for_signal = pidfd.clone();
    let helper = link.helper;
    Launched {
        pid,
        signal: Box::new(move |sig| pidfd::signal(&for_signal, sig)),
        session_members: Box::new(move |sid| helper_children_in(helper, sid)),
        wait: Box::new(move || watch_worker(pid, &pidfd, &rx, &link)),
    }
}

/// The helper's answer to request `id`: the worker started, or why not.
fn answer(id: u64, rx: mpsc::Receiver<Reply>, link: Arc<Link>) -> io::Result<Launched> {
    match rx.recv_timeout(ANSWER_BOUND) {
        Ok(Reply::Started { pid, pidfd }) => Ok(launched(pid, pidfd, rx, link)),
        // A stopped or stuck helper: replaced; this worker starts another way.
        Err(mpsc::RecvTimeoutError::Timeout) => {
            link.forget(id);
            link.abandon(&format!(
                "it did not answer a request within {} s",
                ANSWER_BOUND.as_secs()
            ));
            Err(io::Error::other(format!(
                "the fork server did not answer within {} s; it is replaced",
                ANSWER_BOUND.as_secs()
            )))
        }
        Ok(Reply::Failed(errno)) => Err(io::Error::from_raw_os_error(errno)),
        Ok(Reply::Refused(why)) => Err(io::Error::other(format!(
            "the fork server refused the request: {why}"
        ))),
        Ok(Reply::Exited { .. }) => Err(io::Error::other("the fork server answered out of order")),
        // The helper died after it took the request, before it answered: a worker may have been
        // forked (and is ending on its parent-death signal, holding these pipes). Not asked
        // again on these pipes: the caller starts the worker another way, on new ones.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(io::Error::other("the fork server died before it answered"))
        }
    }
}

/// Wait for the helper's report of the worker's end. While none comes, the worker's pidfd is
/// watched: a worker that has ended and is not reported within [`ANSWER_BOUND`] has a helper
/// that stopped answering, which is then killed and replaced. A helper gone (died, or killed
/// so) loses the worker: its parent-death SIGTERM gives it the time to stop its tool, then
/// whatever is left is killed with its session.
fn watch_worker(
    pid: u32,
    pidfd: &OwnedFd,
    rx: &mpsc::Receiver<Reply>,
    link: &Link,
) -> Result<(i32, u64), String> {
    let mut ended_at: Option<std::time::Instant> = None;
    loop {
        match rx.recv_timeout(WATCH_EVERY) {
            Ok(Reply::Exited { status, max_rss_kb }) => return Ok((status, max_rss_kb)),
            Ok(_) => continue,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if ended_at.is_none() && pidfd::wait(pidfd, Duration::ZERO) {
                    ended_at = Some(std::time::Instant::now());
                }
                if ended_at.is_some_and(|t| t.elapsed() >= ANSWER_BOUND) {
                    link.abandon(&format!(
                        "it did not report the end of the worker (pid {pid}) within {} s",
                        ANSWER_BOUND.as_secs()
                    ));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if !pidfd::wait(pidfd, LOST_WAIT) {
                    pidfd::signal(pidfd, libc::SIGKILL);
                }
                return Err(match link.abandoned() {
                    Some(why) => format!(
                        "the fork server that started the worker (pid {pid}) stopped answering ({why}) and was replaced; the worker's result is lost"
                    ),
                    None => format!(
                        "the fork server that started the worker (pid {pid}) died while it ran"
                    ),
                });
            }
        }
    }
}

struct Request<'a> {
    server: &'a ForkServer,
    payload: Vec<u8>,
}

impl Launch for Request<'_> {
    fn launch(&self, fds: WorkerFds) -> io::Result<Launched> {
        // The descriptors are copied into the message; ours close when `fds` drops.
        let result = self.server.spawn(&self.payload, &fds);
        self.server.note(&result);
        result
    }
    fn what(&self) -> String {
        "a worker of the fork server".to_string()
    }
}

impl Link {
    fn new(sock: OwnedFd, helper: u32) -> io::Result<Arc<Link>> {
        // Our child, not reaped before its reader ends: the pid is still its.
        let helper_pidfd = pidfd::open(helper)?;
        let link = Arc::new(Link {
            sock,
            helper,
            helper_pidfd,
            pending: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            abandoned: Mutex::new(None),
        });
        let reader = link.clone();
        std::thread::Builder::new()
            .name("nxcc-fork-server".into())
            .spawn(move || reader.read_replies())?;
        Ok(link)
    }

    /// Give up on a helper that stopped answering (`why`): no request goes to it any more (the
    /// next one starts a new helper), and it is killed — a stopped process too — so that its
    /// end reaches the reader, which drops its requests: their workers are reported lost.
    fn abandon(&self, why: &str) {
        {
            let _pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let mut reason = self.abandoned.lock().unwrap_or_else(|p| p.into_inner());
            if reason.is_some() {
                return;
            }
            *reason = Some(why.to_string());
            self.closed.store(true, Ordering::SeqCst);
        }
        pidfd::signal(&self.helper_pidfd, libc::SIGKILL);
    }

    /// Why the helper was given up on, if it was.
    fn abandoned(&self) -> Option<String> {
        self.abandoned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn forget(&self, id: u64) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Route the helper's replies to their requests until it is gone; then reap it and drop
    /// every request still waiting (their workers are reported lost). A reply that does not
    /// read (another protocol version, garbage) gives the helper up.
    fn read_replies(&self) {
        let mut buf = [0u8; 2 * wire::WHY_MAX];
        loop {
            let (msg, mut fds) = match channel::recv(self.sock.as_fd(), &mut buf) {
                Ok(channel::Received::Msg(msg, fds)) => (msg, fds),
                Ok(channel::Received::Bad { error, .. }) => {
                    self.abandon(&format!("it answered {error}"));
                    continue;
                }
                Ok(channel::Received::Gone) | Err(_) => break,
            };
            let (id, reply) = match msg {
                Msg::Started { id, pid } if fds.len() == 1 => {
                    let pidfd = fds.pop().expect("one descriptor");
                    (id, Reply::Started { pid, pidfd })
                }
                Msg::Failed { id, errno } => (id, Reply::Failed(errno)),
                Msg::Refused { id, why } if id != 0 => (id, Reply::Refused(why)),
                Msg::Exited {
                    id,
                    status,
                    max_rss_kb,
                } => (id, Reply::Exited { status, max_rss_kb }),
                other => {
                    self.abandon(&format!("it answered {other:?}"));
                    continue;
                }
            };
            self.route(id, reply);
        }
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            self.closed.store(true, Ordering::SeqCst);
            pending.clear();
        }
        if let Some(pid) = i32::try_from(self.helper)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
        }
    }

    /// Hand `reply` to the request `id` waits for (the last one it gets: all but `Started`).
    fn route(&self, id: u64, reply: Reply) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let last = !matches!(reply, Reply::Started { .. });
        let tx = if last {
            pending.remove(&id)
        } else {
            pending.get(&id).cloned()
        };
        if let Some(tx) = tx {
            let _ = tx.send(reply);
        }
    }
}
