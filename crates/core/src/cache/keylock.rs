//! One compile per key at a time, across the processes of a host and across hosts sharing the
//! cache directory (a network file system whose `flock`s are local to each host): the key's lock
//! file `<2 hex>/<key>.lock` is a [`crate::lockfile`] lock — stamped with its holder's host, pid,
//! start time and boot, its lease refreshed while the compile runs — so a waiter on this host
//! sees a live holder by its `flock` or pid and a dead one at once, and a waiter on another host
//! sees a live holder by its lease and a vanished one when the lease ends.
//!
//! A held lock is removed by its holder when released. While a compile holds it, a thread
//! refreshes the lease every quarter lease. (Not a lock keeper process,
//! [`crate::lockfile::keeper`]: `nxcc compile`'s supervisor, a child subreaper, kills every
//! child it has once its worker ends, and the compile's result is published after that.) An
//! empty lock file nobody `flock`s (one an older nxcc left) is taken over; something at the
//! lock's name that is not a plain file (a link) is removed — the link, never its target — and
//! said.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::fsx::Dir;
use crate::lockfile::keeper::{Held, Taken};
use crate::lockfile::{self, Holder};
use crate::run::process::Cancel;

/// The exclusive right to compile one key (released, its file removed, when dropped).
#[derive(Debug)]
pub struct KeyLock {
    held: Option<Arc<Held>>,
    refresher: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    /// The lock file, `<key>.lock` in the key's shard.
    pub path: PathBuf,
    /// What was at the lock's name and is gone: not a plain file, or a stale holder's lock.
    pub replaced: Option<String>,
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.refresher.take() {
            drop(stop);
            let _ = thread.join();
        }
        drop(self.held.take());
    }
}

/// How long taking a lock may keep failing before the failure is reported.
pub const TRANSIENT: Duration = Duration::from_secs(10);

/// Whether a failure to take a lock may pass: the lock file changing (or vanishing) under the
/// taker, not a permission or a read-only file system.
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::Other
            | std::io::ErrorKind::NotFound
            | std::io::ErrorKind::AlreadyExists
    )
}

/// What one attempt gave: the lock, or who holds it.
pub enum Attempt {
    /// Taken.
    Locked(KeyLock),
    /// Held by someone else (how, in words).
    Busy(String),
}

/// Try to take `name` in `shard` (its path, for messages: `path`) once, with `lease`.
pub(crate) fn try_take(
    shard: &Dir,
    name: &str,
    path: &Path,
    lease: Duration,
) -> std::io::Result<Attempt> {
    let mut replaced = None;
    for _ in 0..3 {
        match Taken::from(lockfile::acquire(shard, name, lease, true)?) {
            Taken::Locked(held) => {
                let took = held.took_over().map(Holder::describe);
                return Ok(Attempt::Locked(KeyLock {
                    held: Some(Arc::new(held)),
                    refresher: None,
                    path: path.to_path_buf(),
                    replaced: replaced.or(took.map(|t| format!("took over a lock {t}"))),
                }));
            }
            Taken::Busy(h) => return Ok(Attempt::Busy(h.describe())),
            Taken::Refused(why) => {
                shard.remove_all(name)?;
                replaced = Some(why);
            }
        }
    }
    Err(std::io::Error::other(format!(
        "{} keeps being replaced by something that is not a plain file",
        path.display()
    )))
}

/// Take `name` in `shard` for a compile (its lease refreshed while held), waiting while someone
/// else holds it; `on_wait` is told once who. `Ok(None)` if `cancel` was cancelled while waiting.
pub fn take(
    shard: &Dir,
    name: &str,
    path: &Path,
    cancel: Option<&Cancel>,
    on_wait: &mut dyn FnMut(&str),
) -> std::io::Result<Option<KeyLock>> {
    let lease = lockfile::lease();
    let mut waited = false;
    let mut pause = Duration::from_millis(2);
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        match try_take(shard, name, path, lease) {
            Ok(Attempt::Locked(mut l)) => {
                l.keep_alive();
                return Ok(Some(l));
            }
            Ok(Attempt::Busy(who)) => {
                failing_since = None;
                if !waited {
                    waited = true;
                    on_wait(&who);
                }
            }
            // A network file system's client may go on seeing a lock file that was just
            // removed (its cached attributes) while opening it fails: the lock keeps changing
            // under the taker. Try again for a while before giving up.
            Err(e) if !transient(&e) => return Err(e),
            Err(e) => match failing_since {
                Some(t) if t.elapsed() >= TRANSIENT => return Err(e),
                Some(_) => {}
                None => failing_since = Some(std::time::Instant::now()),
            },
        }
        if cancel.is_some_and(Cancel::is_cancelled) {
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

impl KeyLock {
    /// Refresh the lease every quarter lease from a thread, until released.
    fn keep_alive(&mut self) {
        let Some(held) = self.held.clone() else {
            return;
        };
        let every = lockfile::refresh_every(lockfile::lease());
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                if let Held::Local(l) = held.as_ref() {
                    let _ = l.refresh();
                }
            }
        });
        self.refresher = Some((stop, thread));
    }

    /// Whether the lock is still this process's (its file at its name, its lease running).
    pub fn verify(&self) -> Result<(), String> {
        match &self.held {
            Some(h) => h.verify(),
            None => Err("released".into()),
        }
    }
}
