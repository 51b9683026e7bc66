//! One compile per key across the hosts sharing a store: the lock object
//! `nxcc-v1/locks/<key>`, the one lock protocol ([`crate::lockfile`]) on an object instead of a
//! file.
//!
//! - It is taken by creating it only if absent (`If-None-Match: *`), its text the holder's
//!   [`Stamp`], as a lock file's is.
//! - Its lease is refreshed by rewriting it only if it is still the version the holder wrote
//!   (`If-Match`); its last write (the server's clock) is the lease's start, as a lock file's
//!   modification time is. A refresh that finds another version has lost the lock.
//! - It is judged by [`crate::lockfile::judge_text`], the rules a lock file is judged by when
//!   no `flock` is seen: this host's holder live while its process is, another host's while its
//!   lease runs.
//! - A dead or expired lock is taken over by rewriting it only if it is still the version
//!   judged: of two hosts taking over at once, one wins.
//! - Before its result is published, the holder checks that the lock is still its own
//!   ([`ObjectLock::verify`]); the entry's marker is created only if absent besides.
//! - It is removed by its holder when done, after checking it is still its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::objects::{SMALL_LIMIT, TOP};
use super::{Put, PutMode, Storage, StorageError};
use crate::lockfile::{self, Holder, Stamp};
use crate::run::process::Cancel;

/// The name of `key`'s lock object.
pub fn lock_name(key: &str) -> String {
    format!("{TOP}/locks/{key}")
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

/// How the lock object stands: absent, or its holder and version.
fn judge(
    store: &dyn Storage,
    name: &str,
) -> Result<Option<(Holder, Option<String>)>, StorageError> {
    let Some(obj) = store.get(name, SMALL_LIMIT)? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&obj.bytes).trim_end().to_string();
    let holder = lockfile::judge_text(text, obj.info.modified_ms as f64 / 1000.0);
    Ok(Some((holder, obj.info.etag)))
}

/// Take `key`'s lock in `store`, waiting while another live holder has it (`on_wait` is told
/// once who); `Ok(None)` if `cancel` was cancelled while waiting.
pub fn acquire(
    store: &Arc<dyn Storage>,
    key: &str,
    cancel: Option<&Cancel>,
    on_wait: &mut dyn FnMut(&str),
) -> Result<Option<ObjectLock>, StorageError> {
    let name = lock_name(key);
    let lease = lockfile::lease();
    let text = Stamp::mine(lease).text();
    let mut told = false;
    let mut pause = Duration::from_millis(50);
    loop {
        if let Put::Done(etag) = store.put(&name, text.clone().into_bytes(), PutMode::Create)? {
            return Ok(Some(ObjectLock::hold(store, name, text, etag, lease, None)));
        }
        match judge(store.as_ref(), &name)? {
            None => continue,
            Some((holder, Some(etag))) if holder.is_stale() => {
                let put = store.put(&name, text.clone().into_bytes(), PutMode::Replace(etag))?;
                if let Put::Done(etag) = put {
                    let lock = ObjectLock::hold(store, name, text, etag, lease, Some(holder));
                    return Ok(Some(lock));
                }
            }
            Some((holder, _)) => {
                if !told {
                    on_wait(&holder.describe());
                    told = true;
                }
            }
        }
        if cancel.is_some_and(Cancel::is_cancelled) {
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

impl ObjectLock {
    fn hold(
        store: &Arc<dyn Storage>,
        name: String,
        text: String,
        etag: Option<String>,
        lease: Duration,
        replaced: Option<Holder>,
    ) -> ObjectLock {
        let shared = Arc::new(Shared {
            store: Arc::clone(store),
            name,
            text,
            etag: Mutex::new(etag),
            lost: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let every = lockfile::refresh_every(lease);
        let refresher = std::thread::Builder::new()
            .name("nxcc-s3-lease".into())
            .spawn(move || s.keep(every))
            .ok();
        ObjectLock {
            shared,
            refresher,
            replaced,
        }
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
