//! The locks of the cache's keys, `<2 hex>/<key>.lock`: one compile per key at a time, taken and
//! judged by the one lock protocol ([`crate::lockfile`], through [`crate::cache::keylock`]), and
//! a key's lock file removed once its entry is gone and nobody holds it.

use super::{Cache, LOCK_SUFFIX};
use crate::cache::keylock;
pub use crate::cache::keylock::KeyLock;
use crate::fsx::Dir;
use crate::run::process::Cancel;

/// The name of the lock file of `key` in its shard.
fn lock_name(key: &str) -> String {
    format!("{key}{LOCK_SUFFIX}")
}

impl Cache {
    /// Take the lock of `key` for a compile (`keylock`: across processes and hosts,
    /// its lease refreshed while held), waiting for another holder; `on_wait` is told once who
    /// holds it. `Ok(None)` if `cancel` was cancelled while waiting.
    pub fn lock(
        &self,
        key: &str,
        cancel: Option<&Cancel>,
        on_wait: &mut dyn FnMut(&str),
    ) -> std::io::Result<Option<KeyLock>> {
        let name = lock_name(key);
        let shard = self.made_shard(key)?;
        keylock::take(&shard, &name, &self.lock_path(key), cancel, on_wait)
    }

    /// Take the lock of `key` for a moment if it is free. Something at the lock's name that is
    /// not a plain file (a link) is removed first — the link, never its target — and said in
    /// [`KeyLock::replaced`].
    pub(crate) fn try_lock(&self, key: &str) -> std::io::Result<Option<KeyLock>> {
        self.try_lock_in(&self.made_shard(key)?, key)
    }

    /// [`Cache::try_lock`] in the key's shard, open at `shard`.
    pub(super) fn try_lock_in(&self, shard: &Dir, key: &str) -> std::io::Result<Option<KeyLock>> {
        let name = lock_name(key);
        let lease = crate::lockfile::lease();
        Ok(
            match keylock::try_take(shard, &name, &self.lock_path(key), lease)? {
                keylock::Attempt::Locked(l) => Some(l),
                keylock::Attempt::Busy(_) => None,
            },
        )
    }

    /// Remove the lock file of `key` once its entry is gone (an eviction), unless a compile
    /// holds it. `true` if it was removed.
    pub(crate) fn remove_free_lock(&self, key: &str) -> bool {
        let Ok(Some(root)) = self.open_root(false) else {
            return false;
        };
        match self.shard(&root, key, false) {
            Ok(Some(shard)) => self.remove_free_lock_in(&shard, key),
            _ => false,
        }
    }

    /// [`Cache::remove_free_lock`] in the key's shard: the lock is taken first, so that no
    /// compile holding or waiting for it loses it to the removal.
    pub(super) fn remove_free_lock_in(&self, shard: &Dir, key: &str) -> bool {
        if shard.stat(key).is_ok() {
            return false;
        }
        match self.try_lock_in(shard, key) {
            Ok(Some(lock)) => {
                let ok = shard.remove_file(&lock_name(key)).is_ok();
                drop(lock);
                ok
            }
            _ => false,
        }
    }
}
