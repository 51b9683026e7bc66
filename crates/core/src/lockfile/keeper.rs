//! A helper process that holds a process's locks for it ([`Keeper`]), so that no lock outlives
//! its process however it dies.
//!
//! The keeper is forked while its parent (the *run*) is single-threaded, in a session of its
//! own — a kill of the run's process group (what a job scheduler sends) does not reach it — and
//! watches the run through a pidfd: when the run ends, however it ended (even by `SIGKILL`, even
//! left unreaped as a zombie), the keeper removes every lock it holds and exits at once. It
//! takes, refreshes (a thread of its own, every quarter lease), verifies and releases locks on
//! request, one message each over a socket pair.
//!
//! The run watches the keeper in turn (a thread waiting on the keeper's pidfd): a keeper killed
//! first is reaped and its locks — now a dead holder's — are taken again by the run itself, held
//! and refreshed in the run from then on and removed when released, so the run's compiles go on
//! and leave no lock file behind. What is left after a kill: nothing after a kill of the run or
//! of its group; after a kill of both (every process), lock files whose holder is proven dead,
//! which the next run or `nxcc cache clean --locks` takes over at once.
//!
//! [`Locker`] is what callers use: locks in this process ([`Locker::Local`], for short holds that
//! need no refresh) or in a keeper ([`Locker::Kept`]), behind one interface ([`Held`]).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{acquire, refresh_every, Acquired, Holder, Lock};
use crate::fsx::Dir;

/// The directory `rel` (plain names, no link followed) below `root` (a path the user gave).
pub(crate) fn open_below(root: &Path, rel: &[String]) -> io::Result<Dir> {
    let mut d = Dir::open(root)?;
    for name in rel {
        d = d.open_dir(name)?;
    }
    Ok(d)
}

/// A lock to take: where, and whether a foreign one is broken.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Target {
    root: PathBuf,
    rel: Vec<String>,
    name: String,
    break_foreign: bool,
}

impl Target {
    /// Take it in this process.
    fn take(&self, lease: Duration) -> io::Result<Acquired> {
        let dir = open_below(&self.root, &self.rel)?;
        acquire(&dir, &self.name, lease, self.break_foreign)
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Take { id: u64, target: Target },
    Verify { id: u64 },
    Release { id: u64 },
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Locked { took_over: Option<Holder> },
    Busy { holder: Holder },
    Refused { why: String },
    Failed { message: String },
    Ok,
    Lost { why: String },
}

impl From<io::Result<Acquired>> for Reply {
    fn from(r: io::Result<Acquired>) -> Reply {
        match r {
            Ok(Acquired::Locked(l)) => Reply::Locked {
                took_over: l.took_over.clone(),
            },
            Ok(Acquired::Busy(holder)) => Reply::Busy { holder },
            Ok(Acquired::Refused(why)) => Reply::Refused { why },
            Err(e) => Reply::Failed {
                message: e.to_string(),
            },
        }
    }
}

/// Locks held in one process, by request id.
type Holds = Arc<Mutex<HashMap<u64, Lock>>>;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Answer `req` with the locks of `held` (this process's), taking them with `lease`.
fn answer(held: &Holds, req: Request, lease: Duration) -> Reply {
    match req {
        Request::Take { id, target } => match target.take(lease) {
            Ok(Acquired::Locked(l)) => {
                let took_over = l.took_over.clone();
                locked(held).insert(id, l);
                Reply::Locked { took_over }
            }
            other => Reply::from(other),
        },
        Request::Verify { id } => match locked(held).get(&id).map(Lock::verify) {
            Some(Ok(())) => Reply::Ok,
            Some(Err(why)) => Reply::Lost { why },
            None => Reply::Lost {
                why: "it is not held (its keeper died and another process took it meanwhile)"
                    .into(),
            },
        },
        Request::Release { id } => {
            locked(held).remove(&id);
            Reply::Ok
        }
    }
}

/// A thread of the keeper refreshing the leases of `held` every quarter `lease`, for as long as
/// it runs.
fn refresh_thread(held: Holds, lease: Duration) -> io::Result<JoinHandle<()>> {
    let every = refresh_every(lease);
    std::thread::Builder::new()
        .name("nxcc-lock-lease".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            for l in locked(&held).values() {
                let _ = l.refresh();
            }
        })
}

/// [`crate::run::os::poll`], tried again when a signal interrupts it.
fn ready(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    loop {
        match crate::run::os::poll(fds, timeout) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
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

/// The keeper's side: serve requests until the run ends (its pidfd `run` readable; without a
/// pidfd, its parent id changing, looked at every second) or closes the socket, then release
/// everything (each lock removed before its `flock` goes) and remove `remove`.
fn serve(sock: RawFd, run: Option<RawFd>, parent: u32, lease: Duration, remove: Option<&Path>) {
    let held: Holds = Arc::default();
    let _refresher = refresh_thread(held.clone(), lease);
    let mut fds = vec![sock];
    fds.extend(run);
    let wait = run.is_none().then_some(Duration::from_secs(1));
    loop {
        let ppid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
        if ppid != parent {
            break;
        }
        let Ok(now) = ready(&fds, wait) else {
            break;
        };
        if now.get(1) == Some(&true) {
            break;
        }
        if !now[0] {
            continue;
        }
        let msg = match recv(sock) {
            Ok(m) if !m.is_empty() => m,
            _ => break,
        };
        let reply = match serde_json::from_slice::<Request>(&msg) {
            Err(e) => Reply::Failed {
                message: format!("a malformed request: {e}"),
            },
            Ok(req) => answer(&held, req, lease),
        };
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        if send(sock, &bytes).is_err() {
            break;
        }
    }
    locked(&held).clear();
    if let Some(dir) = remove {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// In the forked child: its own session; `keep` moved to descriptors 3, 4, ... and every other
/// descriptor above 2 closed (0, 1 and 2 become `/dev/null`). The new numbers, in order.
fn isolate(keep: &[RawFd]) -> Vec<RawFd> {
    // SAFETY: plain process and descriptor calls in the single-threaded child.
    unsafe {
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        // Out of the way first (above every number they move to), then into place.
        let first_free = 3 + keep.len() as RawFd;
        let high: Vec<RawFd> = keep
            .iter()
            .map(|&fd| libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, first_free))
            .collect();
        let placed: Vec<RawFd> = (0..high.len())
            .map(|i| {
                let to = 3 + i as RawFd;
                libc::dup3(high[i], to, libc::O_CLOEXEC);
                to
            })
            .collect();
        if libc::syscall(libc::SYS_close_range, first_free, RawFd::MAX, 0) != 0 {
            for fd in first_free..65536 {
                libc::close(fd);
            }
        }
        placed
    }
}

/// A pidfd on `pid` (`None` where the kernel has none).
fn pidfd(pid: u32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// The run's side of a keeper: the socket while the keeper lives; once it is gone, the locks
/// taken again here.
#[derive(Debug)]
struct State {
    /// To the keeper (`None` once it is gone).
    sock: Option<OwnedFd>,
    /// The next request id.
    next: u64,
    /// What the keeper holds, by id (to be taken again if it dies).
    kept: HashMap<u64, Target>,
    /// Why a lock the keeper held could not be taken again, by id.
    lost: HashMap<u64, String>,
}

#[derive(Debug)]
struct Shared {
    pid: u32,
    lease: Duration,
    state: Mutex<State>,
    /// The locks held here once the keeper is gone.
    here: Holds,
}

impl Shared {
    /// The keeper is gone (or no longer answers): make sure of it, reap it, and take its locks
    /// again in this process (each now a dead holder's, unless someone took it meanwhile).
    fn fall_back(&self, st: &mut State) {
        if st.sock.take().is_none() {
            return;
        }
        // Our child, not reaped until here: its pid is still its own.
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        let _ = crate::run::os::reap(self.pid);
        for (id, target) in st.kept.drain() {
            match target.take(self.lease) {
                Ok(Acquired::Locked(l)) => {
                    locked(&self.here).insert(id, l);
                }
                Ok(Acquired::Busy(h)) => {
                    st.lost.insert(
                        id,
                        format!("its keeper died and it is now {}", h.describe()),
                    );
                }
                Ok(Acquired::Refused(why)) => {
                    st.lost.insert(id, format!("its keeper died, and {why}"));
                }
                Err(e) => {
                    st.lost.insert(
                        id,
                        format!("its keeper died, and taking it again failed: {e}"),
                    );
                }
            }
        }
    }
}

/// A helper process holding locks for this one (see the module documentation).
#[derive(Debug)]
pub struct Keeper {
    shared: Arc<Shared>,
    /// The watcher of the keeper (it ends when this closes), and its thread.
    watcher: Option<(OwnedFd, JoinHandle<()>)>,
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
        let lease = lease.min(super::lease_max());
        let (mine, theirs) = seqpacket_pair()?;
        let parent = std::process::id();
        // Opened before the fork: it names this process, whatever happens to its pid.
        let me = pidfd(parent);
        // SAFETY: this process has one thread (checked above), so the child may run any code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(mine);
            let mut keep = vec![theirs.as_raw_fd()];
            keep.extend(me.as_ref().map(|fd| fd.as_raw_fd()));
            let placed = isolate(&keep);
            serve(placed[0], placed.get(1).copied(), parent, lease, remove);
            // SAFETY: leave at once, running none of the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        drop((theirs, me));
        let shared = Arc::new(Shared {
            pid: pid as u32,
            lease,
            state: Mutex::new(State {
                sock: Some(mine),
                next: 1,
                kept: HashMap::new(),
                lost: HashMap::new(),
            }),
            here: Arc::default(),
        });
        let watcher = pidfd(pid as u32).and_then(|fd| Keeper::watch(shared.clone(), fd).ok());
        Ok(Arc::new(Keeper { shared, watcher }))
    }

    /// A thread of this process waiting for the keeper's end (its pidfd): then its locks are
    /// taken again here ([`Shared::fall_back`]) and refreshed by it until the keeper handle goes.
    fn watch(shared: Arc<Shared>, keeper: OwnedFd) -> io::Result<(OwnedFd, JoinHandle<()>)> {
        let (stop_r, stop_w) = crate::run::os::pipe()?;
        let thread = std::thread::Builder::new()
            .name("nxcc-lock-watch".into())
            .spawn(move || {
                let fds = [stop_r.as_raw_fd(), keeper.as_raw_fd()];
                match ready(&fds, None) {
                    Ok(now) if now[1] && !now[0] => {}
                    _ => return,
                }
                shared.fall_back(&mut locked(&shared.state));
                let every = refresh_every(shared.lease);
                while ready(&[stop_r.as_raw_fd()], Some(every)).is_ok_and(|now| !now[0]) {
                    for l in locked(&shared.here).values() {
                        let _ = l.refresh();
                    }
                }
            })?;
        Ok((stop_w, thread))
    }

    /// The helper's process id.
    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    fn next_id(&self) -> u64 {
        let mut st = locked(&self.shared.state);
        st.next += 1;
        st.next
    }

    /// Send `req` to the keeper, or, once it is gone, answer it here.
    fn call(&self, req: Request) -> Reply {
        let shared = &self.shared;
        {
            let mut st = locked(&shared.state);
            if let Some(sock) = st.sock.as_ref().map(|s| s.as_raw_fd()) {
                match round_trip(sock, &req) {
                    Ok(reply) => {
                        match (&req, &reply) {
                            (Request::Take { id, target }, Reply::Locked { .. }) => {
                                st.kept.insert(*id, target.clone());
                            }
                            (Request::Release { id }, _) => {
                                st.kept.remove(id);
                            }
                            _ => {}
                        }
                        return reply;
                    }
                    // Gone, or answering nonsense: given up, its locks taken again here.
                    Err(_) => shared.fall_back(&mut st),
                }
            }
            if let Request::Verify { id } = &req {
                if let Some(why) = st.lost.get(id) {
                    return Reply::Lost { why: why.clone() };
                }
            }
        }
        answer(&shared.here, req, shared.lease)
    }
}

/// One request to the keeper and its reply.
fn round_trip(sock: RawFd, req: &Request) -> io::Result<Reply> {
    send(sock, &serde_json::to_vec(req).map_err(io::Error::other)?)?;
    let msg = recv(sock)?;
    if msg.is_empty() {
        return Err(io::Error::other("the lock keeper is gone"));
    }
    serde_json::from_slice(&msg).map_err(io::Error::other)
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.watcher.take() {
            drop(stop);
            let _ = thread.join();
        }
        // Its end of file makes the helper release everything and exit; then it is reaped.
        let sock = locked(&self.shared.state).sock.take();
        if sock.is_some() {
            drop(sock);
            let _ = crate::run::os::reap(self.shared.pid);
        }
        locked(&self.shared.here).clear();
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
        let _ = self.keeper.call(Request::Release { id: self.id });
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
            Held::Kept(k) => match k.keeper.call(Request::Verify { id: k.id }) {
                Reply::Ok => Ok(()),
                Reply::Lost { why } => Err(why),
                other => Err(format!("the lock keeper answered {other:?}")),
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
        let target = Target {
            root: root.to_path_buf(),
            rel: rel.to_vec(),
            name: name.to_string(),
            break_foreign,
        };
        let k = match self {
            Locker::Local(lease) => return target.take(*lease).map(Taken::from),
            Locker::Kept(k) => k,
        };
        let id = k.next_id();
        match k.call(Request::Take { id, target }) {
            Reply::Locked { took_over } => Ok(Taken::Locked(Held::Kept(KeptLock {
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
