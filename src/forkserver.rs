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
//!   stderr. The helper forks; the child becomes the worker exactly as a re-executed one does —
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

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::run::events::EventWriter;
use crate::run::supervisor::{Launch, Launched, WorkerFds};

/// The hidden first argument that makes the binary a fork server (a restarted one: its socket
/// is descriptor [`HELPER_FD`]).
pub const HELPER_ARG: &str = "__nxcc_fork_server";
/// The descriptor a restarted helper finds its socket on.
pub const HELPER_FD: RawFd = 3;
/// The largest request payload (a plan is a few KiB); a larger one is refused, not truncated.
pub const MAX_PAYLOAD: usize = 1 << 20;
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

const REQ_SPAWN: u8 = b'S';
const REP_STARTED: u8 = b'P';
const REP_FAILED: u8 = b'F';
const REP_EXITED: u8 = b'X';

/// The caller's side: sends requests to the helper, restarts it when it died.
pub struct ForkServer {
    link: Mutex<Option<Arc<Link>>>,
    /// This executable's path (the restarted helper's `argv[0]`).
    program: Option<PathBuf>,
    next_id: AtomicU64,
    restarts: AtomicU64,
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

enum Reply {
    Started { pid: u32, pidfd: OwnedFd },
    Failed(i32),
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

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for socketpair to fill.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded: two open descriptors nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send one message with descriptors (a `SOCK_SEQPACKET` message is whole or not at all).
fn send_msg(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // Room for up to 4 descriptors, aligned for a cmsghdr.
    let mut cbuf = [0u64; 8];
    // SAFETY: a zeroed msghdr, then filled with pointers to buffers that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE of a small constant; the buffer holds it (4 fds at most).
        let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
        assert!(fds.len() <= 4 && space <= std::mem::size_of_val(&cbuf));
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer is set and large enough for one header with `fds`.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(c), bytes);
        }
    }
    loop {
        // SAFETY: msg points at valid buffers; MSG_NOSIGNAL: a closed peer is EPIPE, not a signal.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receive one message into `buf`: its length (0: the peer is gone) and the descriptors it
/// carried (close-on-exec). A message longer than `buf` is an error.
fn recv_msg(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 16];
    // SAFETY: as in send_msg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    let n = loop {
        // SAFETY: msg points at valid buffers we own.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into our buffer.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned((data as *const RawFd).add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::other("a message larger than expected"));
    }
    Ok((n, fds))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: the pidfd_open system call with a pid and no flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nobody else owns (pidfds are close-on-exec).
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn pidfd_signal(pidfd: &OwnedFd, sig: i32) {
    // SAFETY: pidfd_send_signal on a pidfd we own; a process already gone is ESRCH.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

/// Whether the process of `pidfd` ended within `timeout`.
fn pidfd_wait(pidfd: &OwnedFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: poll on one pollfd we own.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

impl ForkServer {
    /// Fork the helper now. The caller must be single-threaded (checked): the child goes on
    /// running Rust code. The helper's workers run `body`; a helper started again later is this
    /// executable with [`HELPER_ARG`], whose `main` must call [`serve_inherited`] with the same
    /// body.
    pub fn start(body: Body) -> io::Result<Arc<ForkServer>> {
        if !crate::run::supervisor::single_threaded() {
            return Err(io::Error::other(
                "a fork server is forked only from a single-threaded process",
            ));
        }
        let (ours, theirs) = seqpacket_pair()?;
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
            // SAFETY: dup2 and close_range on descriptors of this (single-threaded) child.
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
                libc::_exit(serve(OwnedFd::from_raw_fd(HELPER_FD), body));
            }
        }
        drop(theirs);
        let server = Arc::new(ForkServer {
            link: Mutex::new(None),
            program: std::env::current_exe().ok(),
            next_id: AtomicU64::new(1),
            restarts: AtomicU64::new(0),
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

    /// How many times the helper was started again after it died.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::SeqCst)
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
        let (ours, theirs) = seqpacket_pair()?;
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
        let mut msg = Vec::with_capacity(payload.len() + 9);
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
            msg.clear();
            msg.push(REQ_SPAWN);
            msg.extend_from_slice(&id.to_le_bytes());
            msg.extend_from_slice(payload);
            let sent = send_msg(
                link.sock.as_raw_fd(),
                &msg,
                &[
                    fds.events.as_raw_fd(),
                    fds.stdout.as_raw_fd(),
                    fds.stderr.as_raw_fd(),
                ],
            );
            if let Err(e) = sent {
                link.forget(id);
                if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) {
                    continue;
                }
                return Err(e);
            }
            match rx.recv_timeout(ANSWER_BOUND) {
                Ok(Reply::Started { pid, pidfd }) => {
                    return Ok(launched(pid, pidfd, rx, link));
                }
                // A stopped or stuck helper: replaced; this worker starts another way.
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    link.forget(id);
                    link.abandon(&format!(
                        "it did not answer a request within {} s",
                        ANSWER_BOUND.as_secs()
                    ));
                    return Err(io::Error::other(format!(
                        "the fork server did not answer within {} s; it is replaced",
                        ANSWER_BOUND.as_secs()
                    )));
                }
                Ok(Reply::Failed(errno)) => {
                    return Err(io::Error::from_raw_os_error(errno));
                }
                Ok(Reply::Exited { .. }) => {
                    return Err(io::Error::other("the fork server answered out of order"));
                }
                // The helper died after it took the request, before it answered: a worker may
                // have been forked (and is ending on its parent-death signal, holding these
                // pipes). Not asked again on these pipes: the caller starts the worker another
                // way, on new ones.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(io::Error::other("the fork server died before it answered"))
                }
            }
        }
        Err(io::Error::other(
            "the fork server was gone twice when a request was sent",
        ))
    }

    /// A [`Launch`] of one worker with `payload`.
    pub fn launcher(&self, payload: Vec<u8>) -> impl Launch + '_ {
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
        signal: Box::new(move |sig| pidfd_signal(&for_signal, sig)),
        session_members: Box::new(move |sid| helper_children_in(helper, sid)),
        wait: Box::new(move || watch_worker(pid, &pidfd, &rx, &link)),
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
                if ended_at.is_none() && pidfd_wait(pidfd, Duration::ZERO) {
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
                if !pidfd_wait(pidfd, LOST_WAIT) {
                    pidfd_signal(pidfd, libc::SIGKILL);
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
        self.server.spawn(&self.payload, &fds)
    }
    fn what(&self) -> String {
        "a worker of the fork server".to_string()
    }
}

impl Link {
    fn new(sock: OwnedFd, helper: u32) -> io::Result<Arc<Link>> {
        // Our child, not reaped before its reader ends: the pid is still its.
        let helper_pidfd = pidfd_open(helper)?;
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
        pidfd_signal(&self.helper_pidfd, libc::SIGKILL);
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
    /// every request still waiting (their workers are reported lost).
    fn read_replies(&self) {
        let mut buf = [0u8; 64];
        loop {
            let (n, mut fds) = match recv_msg(self.sock.as_raw_fd(), &mut buf) {
                Ok((0, _)) | Err(_) => break,
                Ok(m) => m,
            };
            let msg = &buf[..n];
            let Some(id) = u64_at(msg, 1) else { continue };
            let reply = match msg[0] {
                REP_STARTED => match (u32_at(msg, 9), fds.pop()) {
                    (Some(pid), Some(pidfd)) => Reply::Started { pid, pidfd },
                    _ => continue,
                },
                REP_FAILED => Reply::Failed(u32_at(msg, 9).unwrap_or(0) as i32),
                REP_EXITED => Reply::Exited {
                    status: u32_at(msg, 9).unwrap_or(0) as i32,
                    max_rss_kb: u64_at(msg, 13).unwrap_or(0),
                },
                _ => continue,
            };
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
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            self.closed.store(true, Ordering::SeqCst);
            pending.clear();
        }
        let mut status = 0;
        // SAFETY: waitpid on our own child, the helper.
        unsafe { libc::waitpid(self.helper as libc::pid_t, &mut status, 0) };
    }
}

/// The `main` of a helper started again ([`HELPER_ARG`]): serve on [`HELPER_FD`]; returns the
/// exit status.
pub fn serve_inherited(body: Body) -> i32 {
    // SAFETY: fcntl on a descriptor number; F_GETFD only asks whether it is open.
    if unsafe { libc::fcntl(HELPER_FD, libc::F_GETFD) } < 0 {
        eprintln!(
            "[ERROR] nxcc fork server: started without its socket (it is run by nxcc daemon)"
        );
        return 2;
    }
    // SAFETY: the daemon passed this descriptor for exactly this use.
    let sock = unsafe { OwnedFd::from_raw_fd(HELPER_FD) };
    let _ = rustix::io::fcntl_setfd(&sock, rustix::io::FdFlags::CLOEXEC);
    serve(sock, body)
}

/// The helper's loop: fork a worker per request, report its pid (with a pidfd), reap it and
/// report its end; return when the caller is gone.
fn serve(sock: OwnedFd, body: Body) -> i32 {
    // Its own session: signals for the caller's terminal or process group are not its.
    // SAFETY: setsid, sigprocmask and signalfd on this single-threaded process.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut chld: libc::sigset_t = unsafe { std::mem::zeroed() };
    let sfd = unsafe {
        libc::setsid();
        libc::prctl(libc::PR_SET_NAME, HELPER_NAME.as_ptr());
        // What a worker's session leaves when the worker ends comes back here (and is reaped).
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut old);
        libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    };
    if sfd < 0 {
        return 1;
    }
    // SAFETY: a new descriptor nobody else owns.
    let sfd = unsafe { OwnedFd::from_raw_fd(sfd) };
    let me = std::process::id();
    let mut children: HashMap<libc::pid_t, u64> = HashMap::new();
    let mut buf = vec![0u8; MAX_PAYLOAD + 64];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll on two pollfds we own.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return 1;
        }
        if fds[1].revents != 0 {
            let mut info = [0u8; 128];
            // SAFETY: reading signalfd records into our buffer (non-blocking).
            while unsafe { libc::read(sfd.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) } > 0 {
            }
            reap(&sock, &mut children);
        }
        if fds[0].revents == 0 {
            continue;
        }
        let (n, received) = match recv_msg(sock.as_raw_fd(), &mut buf) {
            Ok((0, _)) => return 0,
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A message that does not fit is dropped (its descriptors with it); anything else
            // means the socket is unusable.
            Err(e) if e.kind() == io::ErrorKind::Other => continue,
            Err(_) => return 1,
        };
        let msg = &buf[..n];
        let (Some(id), true, [events, stdout, stderr]) = (
            u64_at(msg, 1),
            msg.first() == Some(&REQ_SPAWN),
            &received[..],
        ) else {
            continue;
        };
        let payload = &msg[9..];
        // SAFETY: this process is single-threaded; the child runs `body` and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            let mut r = vec![REP_FAILED];
            r.extend_from_slice(&id.to_le_bytes());
            r.extend_from_slice(&(errno as u32).to_le_bytes());
            let _ = send_msg(sock.as_raw_fd(), &r, &[]);
            continue;
        }
        if pid == 0 {
            let status = worker(
                me,
                &old,
                [&sock, &sfd],
                [events, stdout, stderr],
                payload,
                body,
            );
            // SAFETY: end the child here, without returning into the helper's loop.
            unsafe { libc::_exit(status) };
        }
        drop(received);
        let reply = match pidfd_open(pid as u32) {
            Ok(pidfd) => {
                children.insert(pid, id);
                let mut r = vec![REP_STARTED];
                r.extend_from_slice(&id.to_le_bytes());
                r.extend_from_slice(&(pid as u32).to_le_bytes());
                send_msg(sock.as_raw_fd(), &r, &[pidfd.as_raw_fd()])
            }
            Err(e) => {
                // Without a pidfd the caller could not signal it safely: it goes at once (our
                // own unreaped child, so the pid is still its).
                // SAFETY: kill(2) on our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let mut r = vec![REP_FAILED];
                r.extend_from_slice(&id.to_le_bytes());
                r.extend_from_slice(&(e.raw_os_error().unwrap_or(0) as u32).to_le_bytes());
                send_msg(sock.as_raw_fd(), &r, &[])
            }
        };
        if reply.is_err() {
            return 1;
        }
    }
}

/// Reap every ended child and report it.
fn reap(sock: &OwnedFd, children: &mut HashMap<libc::pid_t, u64>) {
    loop {
        let mut status = 0;
        // SAFETY: wait4 for any child, into a status and a zeroed rusage we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
        if pid <= 0 {
            return;
        }
        if let Some(id) = children.remove(&pid) {
            let mut r = vec![REP_EXITED];
            r.extend_from_slice(&id.to_le_bytes());
            r.extend_from_slice(&(status as u32).to_le_bytes());
            r.extend_from_slice(&u64::try_from(usage.ru_maxrss).unwrap_or(0).to_le_bytes());
            let _ = send_msg(sock.as_raw_fd(), &r, &[]);
        }
    }
}

/// In the forked child: become the worker and run the body.
fn worker(
    helper: u32,
    old_mask: &libc::sigset_t,
    close: [&OwnedFd; 2],
    [events, stdout, stderr]: [&OwnedFd; 3],
    payload: &[u8],
    body: Body,
) -> i32 {
    // SAFETY: this child is single-threaded; restoring the signal mask, closing the helper's
    // descriptors and setting up stdio before any other code runs.
    unsafe {
        libc::sigprocmask(libc::SIG_SETMASK, old_mask, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_NAME, WORKER_NAME.as_ptr());
        for fd in close {
            libc::close(fd.as_raw_fd());
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null < 0
            || libc::dup2(null, 0) < 0
            || libc::dup2(stdout.as_raw_fd(), 1) < 0
            || libc::dup2(stderr.as_raw_fd(), 2) < 0
        {
            return 1;
        }
        libc::close(null);
        libc::close(stdout.as_raw_fd());
        libc::close(stderr.as_raw_fd());
    }
    if rustix::process::setsid().is_err()
        || crate::run::os::die_with_parent(helper, rustix::process::Signal::TERM).is_err()
    {
        return 1;
    }
    let events = match events.try_clone() {
        Ok(e) => e,
        Err(_) => return 1,
    };
    let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        body(payload, EventWriter::from_fd(events))
    }))
    .unwrap_or(101);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_bytes_and_descriptors() {
        let (a, b) = seqpacket_pair().unwrap();
        let (r, w) = crate::run::os::pipe().unwrap();
        send_msg(a.as_raw_fd(), b"hello", &[w.as_raw_fd()]).unwrap();
        drop(w);
        let mut buf = [0u8; 16];
        let (n, fds) = recv_msg(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        // The descriptor that came over is the pipe's writing end.
        let mut f = std::fs::File::from(fds.into_iter().next().unwrap());
        use std::io::{Read, Write};
        f.write_all(b"x").unwrap();
        drop(f);
        let mut got = String::new();
        std::fs::File::from(r).read_to_string(&mut got).unwrap();
        assert_eq!(got, "x");
        // A message larger than the buffer is refused, not cut.
        send_msg(a.as_raw_fd(), &[7u8; 32], &[]).unwrap();
        assert!(recv_msg(b.as_raw_fd(), &mut buf).is_err());
        drop(a);
        assert_eq!(recv_msg(b.as_raw_fd(), &mut buf).unwrap().0, 0);
    }
}
