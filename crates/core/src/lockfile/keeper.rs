//! A helper process that holds a process's locks for it ([`Keeper`]), so that no lock outlives
//! its process: forked while its parent is single-threaded, it takes, refreshes, verifies and
//! releases locks on request (one message each over a socket pair), and when its parent goes —
//! the socket's end of file, or its parent id changing, checked at least every second — it
//! removes every lock it holds and exits. A killed parent (even by `SIGKILL`) therefore leaves its
//! locks for at most about a second; a killed keeper leaves lock files whose holder (the keeper)
//! is proven dead, and its parent's next verification fails.
//!
//! [`Locker`] is what callers use: locks in this process ([`Locker::Local`], for short holds that
//! need no refresh) or in a keeper ([`Locker::Kept`]), behind one interface ([`Held`]).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{acquire, refresh_every, Acquired, Holder, Lock};
use crate::fsx::Dir;

/// The directory `rel` (plain names, no link followed) below `root` (a path the user gave).
pub fn open_below(root: &Path, rel: &[String]) -> io::Result<Dir> {
    let mut d = Dir::open(root)?;
    for name in rel {
        d = d.open_dir(name)?;
    }
    Ok(d)
}

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Take {
        root: PathBuf,
        rel: Vec<String>,
        name: String,
        break_foreign: bool,
    },
    Verify {
        id: u64,
    },
    Release {
        id: u64,
    },
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Locked { id: u64, took_over: Option<Holder> },
    Busy { holder: Holder },
    Refused { why: String },
    Failed { message: String },
    Ok,
    Lost { why: String },
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for socketpair to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded: two open descriptors nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn send(sock: RawFd, bytes: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: `bytes` is a valid buffer; MSG_NOSIGNAL: a closed peer is EPIPE, not a signal.
        let n = unsafe { libc::send(sock, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One message (empty: the peer is gone).
fn recv(sock: RawFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: `buf` is a valid, writable buffer of its length.
        let n = unsafe { libc::recv(sock, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The helper's side: serve requests until the parent goes, then release everything.
fn serve(sock: RawFd, parent: u32, lease: Duration, remove: Option<&Path>) {
    let mut held: HashMap<u64, Lock> = HashMap::new();
    let mut next = 1u64;
    let every = refresh_every(lease);
    let mut refreshed = Instant::now();
    loop {
        let ppid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
        if ppid != parent {
            break;
        }
        if refreshed.elapsed() >= every {
            for l in held.values() {
                let _ = l.refresh();
            }
            refreshed = Instant::now();
        }
        let wait = every.min(Duration::from_secs(1));
        let mut pfd = libc::pollfd {
            fd: sock,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as libc::c_int) };
        if r <= 0 {
            continue;
        }
        let Ok(msg) = recv(sock) else { break };
        if msg.is_empty() {
            break;
        }
        let reply = match serde_json::from_slice::<Request>(&msg) {
            Err(e) => Reply::Failed {
                message: format!("a malformed request: {e}"),
            },
            Ok(Request::Take {
                root,
                rel,
                name,
                break_foreign,
            }) => {
                let taken =
                    open_below(&root, &rel).and_then(|d| acquire(&d, &name, lease, break_foreign));
                match taken {
                    Ok(Acquired::Locked(l)) => {
                        let id = next;
                        next += 1;
                        let took_over = l.took_over.clone();
                        held.insert(id, l);
                        Reply::Locked { id, took_over }
                    }
                    Ok(Acquired::Busy(holder)) => Reply::Busy { holder },
                    Ok(Acquired::Refused(why)) => Reply::Refused { why },
                    Err(e) => Reply::Failed {
                        message: e.to_string(),
                    },
                }
            }
            Ok(Request::Verify { id }) => match held.get(&id).map(Lock::verify) {
                Some(Ok(())) => Reply::Ok,
                Some(Err(why)) => Reply::Lost { why },
                None => Reply::Lost {
                    why: "the keeper does not hold it".into(),
                },
            },
            Ok(Request::Release { id }) => {
                held.remove(&id);
                Reply::Ok
            }
        };
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        if send(sock, &bytes).is_err() {
            break;
        }
    }
    // Removed before the flocks go (each Lock's drop).
    held.clear();
    if let Some(dir) = remove {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Make `sock` the child's only descriptor besides 0, 1 and 2 (which become `/dev/null`).
fn isolate(sock: RawFd) -> RawFd {
    // SAFETY: plain descriptor calls in the single-threaded child.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        let kept = libc::fcntl(sock, libc::F_DUPFD_CLOEXEC, 3);
        let kept = if kept >= 3 { kept } else { sock };
        let close = |from: RawFd, to: RawFd| {
            if from <= to && libc::syscall(libc::SYS_close_range, from, to, 0) != 0 {
                for fd in from..=to.min(65535) {
                    libc::close(fd);
                }
            }
        };
        close(3, kept - 1);
        close(kept + 1, RawFd::MAX);
        kept
    }
}

/// A helper process holding locks for this one (see the module documentation).
#[derive(Debug)]
pub struct Keeper {
    sock: Mutex<Option<OwnedFd>>,
    pid: u32,
}

impl Keeper {
    /// Fork the helper, with `lease` for its locks; when it ends it also removes the directory
    /// `remove` (the parent's private work directory). Refused (an error) unless this process
    /// has a single thread: the helper runs on after `fork`, which is safe only then.
    pub fn start(lease: Duration, remove: Option<&Path>) -> io::Result<Arc<Keeper>> {
        if crate::run::os::own_status_field("Threads") != Some(1) {
            return Err(io::Error::other(
                "the lock keeper must be started while the process has one thread",
            ));
        }
        let (mine, theirs) = seqpacket_pair()?;
        let parent = std::process::id();
        // SAFETY: this process has one thread (checked above), so the child may run any code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(mine);
            let sock = isolate(theirs.as_raw_fd());
            serve(sock, parent, lease, remove);
            // SAFETY: leave at once, running none of the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        drop(theirs);
        Ok(Arc::new(Keeper {
            sock: Mutex::new(Some(mine)),
            pid: pid as u32,
        }))
    }

    /// The helper's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn call(&self, req: &Request) -> io::Result<Reply> {
        let guard = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        let sock = guard
            .as_ref()
            .ok_or_else(|| io::Error::other("the lock keeper is stopped"))?
            .as_raw_fd();
        send(sock, &serde_json::to_vec(req).map_err(io::Error::other)?)?;
        let msg = recv(sock)?;
        if msg.is_empty() {
            return Err(io::Error::other("the lock keeper is gone"));
        }
        serde_json::from_slice(&msg).map_err(io::Error::other)
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // Its end of file makes the helper release everything and exit; then it is reaped.
        drop(self.sock.lock().unwrap_or_else(|p| p.into_inner()).take());
        let _ = crate::run::os::reap(self.pid);
    }
}

/// A lock held in a [`Keeper`] (released when dropped).
#[derive(Debug)]
pub struct KeptLock {
    keeper: Arc<Keeper>,
    id: u64,
    took_over: Option<Holder>,
}

impl Drop for KeptLock {
    fn drop(&mut self) {
        let _ = self.keeper.call(&Request::Release { id: self.id });
    }
}

/// A lock held here or in a keeper.
#[derive(Debug)]
pub enum Held {
    /// In this process.
    Local(Lock),
    /// In a [`Keeper`].
    Kept(KeptLock),
}

impl Held {
    /// The lock it took over, if it did.
    pub fn took_over(&self) -> Option<&Holder> {
        match self {
            Held::Local(l) => l.took_over.as_ref(),
            Held::Kept(k) => k.took_over.as_ref(),
        }
    }

    /// Whether it is still ours ([`Lock::verify`]); `Err`: why not.
    pub fn verify(&self) -> Result<(), String> {
        match self {
            Held::Local(l) => l.verify(),
            Held::Kept(k) => match k.keeper.call(&Request::Verify { id: k.id }) {
                Ok(Reply::Ok) => Ok(()),
                Ok(Reply::Lost { why }) => Err(why),
                Ok(other) => Err(format!("the lock keeper answered {other:?}")),
                Err(e) => Err(format!("the lock keeper: {e}")),
            },
        }
    }
}

/// What taking a lock through a [`Locker`] gave.
#[derive(Debug)]
pub enum Taken {
    /// Taken.
    Locked(Held),
    /// A live lock (or a foreign one, not broken) is there.
    Busy(Holder),
    /// The name holds something that is not a plain file.
    Refused(String),
}

impl From<Acquired> for Taken {
    /// A lock taken in this process, or why not.
    fn from(a: Acquired) -> Taken {
        match a {
            Acquired::Locked(l) => Taken::Locked(Held::Local(l)),
            Acquired::Busy(h) => Taken::Busy(h),
            Acquired::Refused(w) => Taken::Refused(w),
        }
    }
}

/// Where locks are held.
#[derive(Debug, Clone)]
pub enum Locker {
    /// In this process, with this lease, never refreshed (short holds).
    Local(Duration),
    /// In a keeper process.
    Kept(Arc<Keeper>),
}

impl Locker {
    /// Take the lock `name` in the directory `rel` below `root` (see [`acquire`]).
    pub fn acquire(
        &self,
        root: &Path,
        rel: &[String],
        name: &str,
        break_foreign: bool,
    ) -> io::Result<Taken> {
        match self {
            Locker::Local(lease) => {
                let dir = open_below(root, rel)?;
                acquire(&dir, name, *lease, break_foreign).map(Taken::from)
            }
            Locker::Kept(k) => {
                let req = Request::Take {
                    root: root.to_path_buf(),
                    rel: rel.to_vec(),
                    name: name.to_string(),
                    break_foreign,
                };
                match k.call(&req)? {
                    Reply::Locked { id, took_over } => Ok(Taken::Locked(Held::Kept(KeptLock {
                        keeper: k.clone(),
                        id,
                        took_over,
                    }))),
                    Reply::Busy { holder } => Ok(Taken::Busy(holder)),
                    Reply::Refused { why } => Ok(Taken::Refused(why)),
                    Reply::Failed { message } => Err(io::Error::other(message)),
                    other => Err(io::Error::other(format!(
                        "the lock keeper answered {other:?}"
                    ))),
                }
            }
        }
    }
}
