//! The one lock protocol on an object in a bucket ([`crate::objstore::Storage`]) instead of a
//! file, where no `flock` exists:
//!
//! - A lock object is taken by creating it only if absent (`If-None-Match: *`), its text the
//!   holder's [`Stamp`], as a lock file's is.
//! - Its lease is refreshed by rewriting it only if it is still the version the holder wrote
//!   (`If-Match`); its last write (the server's clock) is the lease's start, as a lock file's
//!   modification time is. A refresh that finds another version has lost the lock.
//! - It is judged by `super::judge_text`, the rules a lock file is judged by when no `flock` is
//!   seen: this host's holder live while its process is, another host's while its lease runs. An
//!   object whose text is not nxcc's is foreign; where the caller gives such objects a lease
//!   (`judge_text`), it is live until its last write plus that lease, then stale.
//! - A stale lock (or a foreign one, when told to break it) is taken over by rewriting it only if
//!   it is still the version judged: of two hosts taking over at once, one wins.
//! - Before a holder writes under it, it checks the lock is still its own ([`ObjectLock::verify`]).
//! - It is removed by its holder when done, after checking it is still its own; a stale one by
//!   anyone, by taking it over first (`remove_stale`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::{Holder, Stamp};
use crate::objstore::{Put, PutMode, Storage, StorageError};

/// The largest lock object read.
pub const LOCK_LIMIT: u64 = 64 << 10;

/// How a lock object stands: its holder, the version judged and its last write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// Its holder.
    pub holder: Holder,
    /// The entity tag of the version judged.
    pub etag: Option<String>,
    /// Its last write, milliseconds since the epoch (the server's clock).
    pub modified_ms: u64,
}

/// How a lock object whose text is `text` and last write `modified_ms` stands: by
/// `super::judge_text` (an nxcc stamp's lease capped, a last write beyond the clock skew no
/// lease); a foreign one, given `foreign_lease`, live until its last write plus that lease, then
/// stale, and void (stale) if its last write is further ahead than `super::clock_skew`.
pub(crate) fn judge_text(
    text: String,
    modified_ms: u64,
    foreign_lease: Option<Duration>,
) -> Holder {
    match (
        super::judge_text(text, modified_ms as f64 / 1000.0),
        foreign_lease,
    ) {
        (Holder::Foreign { text }, Some(lease)) => {
            let now_ms = super::now_f() * 1000.0;
            let ahead_ms = modified_ms as f64 - now_ms;
            if ahead_ms > super::clock_skew().as_secs_f64() * 1000.0 {
                let ahead_s = (ahead_ms / 1000.0) as u64;
                return Holder::ForeignVoid { text, ahead_s };
            }
            let until_ms = modified_ms.saturating_add(lease.as_millis() as u64);
            if now_ms < until_ms as f64 {
                Holder::ForeignLeased { text, until_ms }
            } else {
                Holder::ForeignExpired { text, until_ms }
            }
        }
        (h, _) => h,
    }
}

/// How the lock object `name` stands; `None` if there is none.
pub(crate) fn judge(
    store: &dyn Storage,
    name: &str,
    foreign_lease: Option<Duration>,
) -> Result<Option<Judged>, StorageError> {
    let Some(obj) = store.get(name, LOCK_LIMIT)? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&obj.bytes).trim_end().to_string();
    Ok(Some(Judged {
        holder: judge_text(text, obj.info.modified_ms, foreign_lease),
        etag: obj.info.etag,
        modified_ms: obj.info.modified_ms,
    }))
}

/// What trying to take a lock object gave.
pub enum Taken {
    /// Taken.
    Locked(ObjectLock),
    /// A live lock is there (or a foreign one, not broken), and stays.
    Busy(Holder),
}

/// Try once to take the lock object `name`: create it, or take over a stale one (and a foreign
/// one, with `break_foreign`). Foreign objects are judged with `foreign_lease`.
pub(crate) fn try_take(
    store: &Arc<dyn Storage>,
    name: &str,
    foreign_lease: Option<Duration>,
    break_foreign: bool,
) -> Result<Taken, StorageError> {
    let lease = super::lease();
    let text = Stamp::mine(lease).text();
    for _ in 0..20 {
        if let Put::Done(etag) = store.put(name, text.clone().into_bytes(), PutMode::Create)? {
            return Ok(Taken::Locked(ObjectLock::hold(
                store, name, text, etag, lease, None,
            )));
        }
        let Some(j) = judge(store.as_ref(), name, foreign_lease)? else {
            continue;
        };
        let take = j.holder.is_stale() || (break_foreign && j.holder.is_foreign());
        let Some(etag) = j.etag.filter(|_| take) else {
            return Ok(Taken::Busy(j.holder));
        };
        let put = store.put(name, text.clone().into_bytes(), PutMode::Replace(etag))?;
        if let Put::Done(etag) = put {
            let lock = ObjectLock::hold(store, name, text, etag, lease, Some(j.holder));
            return Ok(Taken::Locked(lock));
        }
    }
    Err(StorageError::Other(format!(
        "the lock object {name} kept changing while it was being taken"
    )))
}

/// Remove the lock object `name` if it is still the version `judged` and stale (or foreign,
/// with `break_foreign`): taken over first, so a lock someone took meanwhile stays. Whether it
/// was removed.
pub(crate) fn remove_stale(
    store: &Arc<dyn Storage>,
    name: &str,
    judged: &Judged,
    break_foreign: bool,
) -> Result<bool, StorageError> {
    let take = judged.holder.is_stale() || (break_foreign && judged.holder.is_foreign());
    let Some(etag) = judged.etag.clone().filter(|_| take) else {
        return Ok(false);
    };
    let text = Stamp::mine(super::lease()).text().into_bytes();
    match store.put(name, text, PutMode::Replace(etag))? {
        Put::Refused => Ok(false),
        // Ours now: nothing else holds it.
        Put::Done(_) => store.delete(name).map(|()| true),
    }
}

/// A lock object held, its lease refreshed by a thread until it is dropped (and removed).
pub struct ObjectLock {
    shared: Arc<Shared>,
    refresher: Option<std::thread::JoinHandle<()>>,
    /// How the lock stood when it was taken over, if it was.
    pub replaced: Option<Holder>,
}

struct Shared {
    store: Arc<dyn Storage>,
    name: String,
    text: String,
    etag: Mutex<Option<String>>,
    lost: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl ObjectLock {
    fn hold(
        store: &Arc<dyn Storage>,
        name: &str,
        text: String,
        etag: Option<String>,
        lease: Duration,
        replaced: Option<Holder>,
    ) -> ObjectLock {
        let shared = Arc::new(Shared {
            store: Arc::clone(store),
            name: name.to_string(),
            text,
            etag: Mutex::new(etag),
            lost: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let every = super::refresh_every(lease);
        let refresher = std::thread::Builder::new()
            .name("nxcc-lock-lease".into())
            .spawn(move || s.keep(every))
            .ok();
        ObjectLock {
            shared,
            refresher,
            replaced,
        }
    }

    /// The lock object's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Whether the lock is still this holder's: never lost, the object still the version it
    /// wrote.
    pub fn verify(&self) -> Result<(), String> {
        let s = &self.shared;
        if s.lost.load(Ordering::SeqCst) {
            return Err("another holder took it over".into());
        }
        let mine = s.etag.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match s.store.head(&s.name) {
            Ok(Some(info)) if mine.is_none() || info.etag == mine => Ok(()),
            Ok(Some(_)) => Err("another holder took it over".into()),
            Ok(None) => Err("it was removed".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Shared {
    /// Refresh the lease every `every` until told to stop or the lock is lost.
    fn keep(&self, every: Duration) {
        let mut stop = self.stop.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if *stop {
                return;
            }
            let (s, _) = self
                .wake
                .wait_timeout(stop, every)
                .unwrap_or_else(|p| p.into_inner());
            stop = s;
            if *stop {
                return;
            }
            let etag = self.etag.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let mode = etag.map_or(PutMode::Overwrite, PutMode::Replace);
            match self
                .store
                .put(&self.name, self.text.clone().into_bytes(), mode)
            {
                Ok(Put::Done(tag)) => *self.etag.lock().unwrap_or_else(|p| p.into_inner()) = tag,
                Ok(Put::Refused) => {
                    self.lost.store(true, Ordering::SeqCst);
                    return;
                }
                // A refresh that did not get through is tried again at the next turn.
                Err(_) => {}
            }
        }
    }
}

impl Drop for ObjectLock {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.refresher.take() {
            let _ = t.join();
        }
        if self.verify().is_ok() {
            let _ = self.shared.store.delete(&self.shared.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objstore::memory::Memory;

    const NAME: &str = "v/MODULE_1+2/model.hlo_module.pb.lock";

    #[test]
    fn lock_objects_exclude_take_over_the_stale_and_notice_a_loss() {
        let mem = Arc::new(Memory::default());
        let store: Arc<dyn Storage> = mem.clone();
        let Taken::Locked(held) = try_take(&store, NAME, None, false).unwrap() else {
            panic!("not taken")
        };
        assert!(held.verify().is_ok());
        assert!(matches!(
            try_take(&store, NAME, None, true).unwrap(),
            Taken::Busy(Holder::Held { .. })
        ));
        drop(held);
        assert!(store.head(NAME).unwrap().is_none(), "released locks go");

        // Another host's, its lease running: busy; its lease over: taken over.
        let other = "nxcc pid=1 started=1 host=elsewhere lease=1000\n";
        store
            .put(NAME, other.as_bytes().to_vec(), PutMode::Create)
            .unwrap();
        assert!(matches!(
            try_take(&store, NAME, None, false).unwrap(),
            Taken::Busy(Holder::Leased { .. })
        ));
        mem.age(NAME, 1_000);
        let Taken::Locked(took) = try_take(&store, NAME, None, false).unwrap() else {
            panic!("an expired lock was not taken over")
        };
        assert!(matches!(took.replaced, Some(Holder::Expired { .. })));
        // Rewritten behind the holder's back: no longer its own, and not removed by it.
        store.put(NAME, b"x".to_vec(), PutMode::Overwrite).unwrap();
        assert!(took.verify().is_err());
        drop(took);
        assert!(store.head(NAME).unwrap().is_some());
    }

    #[test]
    fn a_foreign_lock_object_lives_for_the_lease_it_is_given() {
        let mem = Arc::new(Memory::default());
        let store: Arc<dyn Storage> = mem.clone();
        store.put(NAME, Vec::new(), PutMode::Create).unwrap();
        let lease = Some(Duration::from_secs(3600));
        // Without a lease: foreign, kept unless broken.
        assert!(matches!(
            try_take(&store, NAME, None, false).unwrap(),
            Taken::Busy(Holder::Foreign { .. })
        ));
        let j = judge(store.as_ref(), NAME, lease).unwrap().unwrap();
        assert!(matches!(j.holder, Holder::ForeignLeased { .. }));
        assert!(!remove_stale(&store, NAME, &j, false).unwrap());
        assert!(store.head(NAME).unwrap().is_some());
        assert!(matches!(
            try_take(&store, NAME, lease, false).unwrap(),
            Taken::Busy(Holder::ForeignLeased { .. })
        ));
        // Older than its lease: stale, removed (only the version judged).
        let now = crate::objstore::memory::now_ms();
        mem.age(NAME, now - 3_700_000);
        let j = judge(store.as_ref(), NAME, lease).unwrap().unwrap();
        assert!(matches!(j.holder, Holder::ForeignExpired { .. }), "{j:?}");
        store
            .put(NAME, b"rewritten".to_vec(), PutMode::Overwrite)
            .unwrap();
        assert!(!remove_stale(&store, NAME, &j, false).unwrap());
        let j = Judged {
            etag: store.head(NAME).unwrap().unwrap().etag,
            ..j
        };
        assert!(remove_stale(&store, NAME, &j, false).unwrap());
        assert!(store.head(NAME).unwrap().is_none());
        // Broken: taken over at once.
        store.put(NAME, Vec::new(), PutMode::Create).unwrap();
        let Taken::Locked(l) = try_take(&store, NAME, lease, true).unwrap() else {
            panic!("a broken foreign lock was not taken over")
        };
        assert!(matches!(l.replaced, Some(Holder::ForeignLeased { .. })));
    }

    #[test]
    fn lock_objects_get_no_lease_past_the_cap_and_none_from_a_future_last_write() {
        let mem = Arc::new(Memory::default());
        let store: Arc<dyn Storage> = mem.clone();
        let now = crate::objstore::memory::now_ms();
        let lease = Some(Duration::from_secs(3600));
        // A stamp claiming a year: its lease is capped (DEFAULT_LEASE_MAX here), so written
        // an hour ago it has expired.
        let forever = "nxcc pid=1 started=1 host=elsewhere lease=31536000000\n";
        store
            .put(NAME, forever.as_bytes().to_vec(), PutMode::Create)
            .unwrap();
        mem.age(NAME, now - 3_600_000);
        let j = judge(store.as_ref(), NAME, lease).unwrap().unwrap();
        assert!(matches!(j.holder, Holder::Expired { .. }), "{j:?}");
        // Written "a day from now" by the server's clock: void, taken over.
        mem.age(NAME, now + 86_400_000);
        let j = judge(store.as_ref(), NAME, lease).unwrap().unwrap();
        assert!(matches!(j.holder, Holder::Void { .. }), "{j:?}");
        let Taken::Locked(took) = try_take(&store, NAME, lease, false).unwrap() else {
            panic!("a void lock object was not taken over")
        };
        assert!(matches!(took.replaced, Some(Holder::Void { .. })));
        drop(took);
        // A foreign one a day ahead: void too, stale though its lease would not have begun.
        store
            .put(NAME, b"\x1b[2J".to_vec(), PutMode::Create)
            .unwrap();
        mem.age(NAME, now + 86_400_000);
        let j = judge(store.as_ref(), NAME, lease).unwrap().unwrap();
        assert!(matches!(j.holder, Holder::ForeignVoid { .. }), "{j:?}");
        assert!(
            j.holder.describe().contains("\\u{1b}[2J"),
            "{}",
            j.holder.describe()
        );
        assert!(remove_stale(&store, NAME, &j, false).unwrap());
        // Within the clock-skew allowance: an ordinary lease.
        store.put(NAME, Vec::new(), PutMode::Create).unwrap();
        mem.age(NAME, now + 10_000);
        let j = judge(store.as_ref(), NAME, lease).unwrap().unwrap();
        assert!(matches!(j.holder, Holder::ForeignLeased { .. }), "{j:?}");
    }
}
