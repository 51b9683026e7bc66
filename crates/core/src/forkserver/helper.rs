//! The helper's side of the fork server: its loop (a request in, a worker forked, its pid and
//! pidfd out; `SIGCHLD` through a `signalfd`, each ended worker reaped and reported) and the
//! forked child becoming the worker. A request it cannot read — another protocol version,
//! garbage, the wrong descriptors, a payload that does not read — is answered
//! [`Msg::Refused`] with the reason, and the helper goes on serving.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, Signal};

use super::channel::{self, Received, INLINE_MAX};
use super::wire::{Msg, Payload};
use super::{pidfd, Body, HELPER_FD, HELPER_NAME, MAX_PAYLOAD, WORKER_NAME};
use crate::run::events::EventWriter;

/// The `main` of a helper started again ([`super::HELPER_ARG`]): serve on [`HELPER_FD`];
/// returns the exit status.
pub(crate) fn serve_inherited(body: Body) -> i32 {
    // SAFETY: F_GETFD only asks whether the descriptor number is open; if it is, the daemon
    // passed it for exactly this use, and nothing else in this process owns it.
    let sock = unsafe {
        if libc::fcntl(HELPER_FD, libc::F_GETFD) < 0 {
            None
        } else {
            Some(OwnedFd::from_raw_fd(HELPER_FD))
        }
    };
    let Some(sock) = sock else {
        eprintln!(
            "[ERROR] nxcc fork server: started without its socket (it is run by nxcc daemon)"
        );
        return 2;
    };
    let _ = rustix::io::fcntl_setfd(&sock, rustix::io::FdFlags::CLOEXEC);
    serve(sock, body)
}

/// What the helper keeps between requests.
struct Helper {
    sock: OwnedFd,
    /// `SIGCHLD`s, read (the signal is blocked).
    sigchld: OwnedFd,
    /// The signal mask before `SIGCHLD` was blocked (a worker gets it back).
    old_mask: libc::sigset_t,
    /// Its workers, by pid: their requests' ids.
    children: HashMap<i32, u64>,
    body: Body,
}

/// The helper's loop: fork a worker per request, report its pid (with a pidfd), reap it and
/// report its end; return when the caller is gone.
pub(super) fn serve(sock: OwnedFd, body: Body) -> i32 {
    // Its own session: signals for the caller's terminal or process group are not its.
    let _ = rustix::process::setsid();
    let _ = rustix::thread::set_name(HELPER_NAME);
    // What a worker's session leaves when the worker ends comes back here (and is reaped).
    let _ = rustix::process::set_child_subreaper(Pid::from_raw(1));
    let Ok((sigchld, old_mask)) = block_sigchld() else {
        return 1;
    };
    let mut helper = Helper {
        sock,
        sigchld,
        old_mask,
        children: HashMap::new(),
        body,
    };
    let mut buf = vec![0u8; INLINE_MAX];
    loop {
        let mut fds = [
            PollFd::new(&helper.sock, PollFlags::IN),
            PollFd::new(&helper.sigchld, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return 1,
        }
        let (request, ended) = (!fds[0].revents().is_empty(), !fds[1].revents().is_empty());
        if ended {
            let mut info = [0u8; 128];
            while matches!(rustix::io::read(&helper.sigchld, &mut info), Ok(n) if n > 0) {}
            helper.reap();
        }
        if !request {
            continue;
        }
        let request = match channel::recv(helper.sock.as_fd(), &mut buf) {
            Ok(Received::Gone) => return 0,
            Ok(Received::Msg(msg, fds)) => {
                let id = msg.id();
                take(msg, fds).map_err(|why| (id, why))
            }
            Ok(Received::Bad { id, error }) => Err((id, error.to_string())),
            Err(_) => return 1,
        };
        let reply = match request {
            Ok((id, payload, fds)) => {
                let sent;
                (helper, sent) = helper.spawn(id, &payload, fds);
                sent
            }
            Err((id, why)) => {
                eprintln!("[WARNING] nxcc fork server: a request refused: {why}");
                channel::send(helper.sock.as_fd(), &Msg::Refused { id, why }, &[])
            }
        };
        if reply.is_err() {
            return 1;
        }
    }
}

/// A request's id, payload and the worker's descriptors (report pipe, stdout, stderr), or why
/// it is not one the helper takes.
fn take(msg: Msg, mut fds: Vec<OwnedFd>) -> Result<(u64, Vec<u8>, [OwnedFd; 3]), String> {
    let Msg::Spawn { id, payload } = msg else {
        return Err(format!("a {msg:?} is not a request"));
    };
    let expected = match payload {
        Payload::Inline(_) => 3,
        Payload::Memfd { .. } => 4,
    };
    if fds.len() != expected {
        return Err(format!(
            "a request with {} descriptors ({expected} expected)",
            fds.len()
        ));
    }
    let payload = match payload {
        Payload::Inline(bytes) => bytes,
        Payload::Memfd { len } => {
            let memfd = fds.pop().expect("four descriptors");
            channel::read_sealed(&memfd, len, MAX_PAYLOAD)?
        }
    };
    let [events, stdout, stderr]: [OwnedFd; 3] = fds.try_into().expect("three descriptors");
    Ok((id, payload, [events, stdout, stderr]))
}

/// Block `SIGCHLD` and open a `signalfd` that reads it; the mask before.
fn block_sigchld() -> io::Result<(OwnedFd, libc::sigset_t)> {
    // SAFETY: sigprocmask and signalfd on this single-threaded process, with sets we own; the
    // signalfd is a new descriptor nobody else owns.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut old);
        let sfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if sfd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(sfd), old))
    }
}

impl Helper {
    /// Fork the worker of request `id` and report it started (or why not); the helper is handed
    /// back (the forked child takes it, to close its descriptors, and never returns).
    fn spawn(mut self, id: u64, payload: &[u8], fds: [OwnedFd; 3]) -> (Helper, io::Result<()>) {
        let me = std::process::id();
        // SAFETY: this process is single-threaded; the child runs the body and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            let sent = channel::send(self.sock.as_fd(), &Msg::Failed { id, errno }, &[]);
            return (self, sent);
        }
        if pid == 0 {
            let (mask, body) = (self.old_mask, self.body);
            // The worker holds none of the helper's descriptors: the helper's end of the socket
            // must close when the helper dies.
            drop(self);
            let status = worker(me, &mask, fds, payload, body);
            // SAFETY: end the child here, without returning into the helper's loop.
            unsafe { libc::_exit(status) };
        }
        drop(fds);
        let sent = self.report_started(id, pid);
        (self, sent)
    }

    /// Report the worker `pid` of request `id` started, with a pidfd on it.
    fn report_started(&mut self, id: u64, pid: i32) -> io::Result<()> {
        match pidfd::open(pid as u32) {
            Ok(pidfd) => {
                self.children.insert(pid, id);
                let started = Msg::Started {
                    id,
                    pid: pid as u32,
                };
                channel::send(self.sock.as_fd(), &started, &[pidfd.as_fd()])
            }
            Err(e) => {
                // Without a pidfd the caller could not signal it safely: it goes at once (our
                // own unreaped child, so the pid is still its).
                if let Some(p) = Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(p, Signal::KILL);
                }
                let errno = e.raw_os_error().unwrap_or(0);
                channel::send(self.sock.as_fd(), &Msg::Failed { id, errno }, &[])
            }
        }
    }

    /// Reap every ended child and report the workers among them.
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: wait4 for any child, into a status and a zeroed rusage we own.
            let (pid, usage) = unsafe {
                let mut usage: libc::rusage = std::mem::zeroed();
                (
                    libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage),
                    usage,
                )
            };
            if pid <= 0 {
                return;
            }
            if let Some(id) = self.children.remove(&pid) {
                let exited = Msg::Exited {
                    id,
                    status,
                    max_rss_kb: u64::try_from(usage.ru_maxrss).unwrap_or(0),
                };
                let _ = channel::send(self.sock.as_fd(), &exited, &[]);
            }
        }
    }
}

/// In the forked child: become the worker and run the body.
fn worker(
    helper: u32,
    old_mask: &libc::sigset_t,
    [events, stdout, stderr]: [OwnedFd; 3],
    payload: &[u8],
    body: Body,
) -> i32 {
    // SAFETY: sigprocmask in this single-threaded child, with a set we own: the mask it had
    // before the helper blocked SIGCHLD.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, old_mask, std::ptr::null_mut()) };
    let _ = rustix::thread::set_name(WORKER_NAME);
    let stdio = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .and_then(|null| rustix::stdio::dup2_stdin(&null))
    .and_then(|()| rustix::stdio::dup2_stdout(&stdout))
    .and_then(|()| rustix::stdio::dup2_stderr(&stderr));
    drop((stdout, stderr));
    if stdio.is_err()
        || rustix::process::setsid().is_err()
        || crate::run::os::die_with_parent(helper, Signal::TERM).is_err()
    {
        return 1;
    }
    let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        body(payload, EventWriter::from_fd(events))
    }))
    .unwrap_or(101);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    status
}
