//! One compile per key across the hosts sharing a store: the lock object
//! `nxcc-v1/locks/<key>`, the one lock protocol on objects ([`crate::lockfile::object`]: created
//! only if absent, its lease refreshed by conditional rewrites, judged by the rules a lock file
//! is judged by, a stale one taken over by a conditional rewrite, verified before the result is
//! published, removed by its holder when done). A compile that finds the key locked by a live
//! holder waits for it.

use std::sync::Arc;
use std::time::Duration;

use super::objects::TOP;
use super::{Storage, StorageError};
use crate::lockfile::object::{self, Taken};
use crate::run::process::Cancel;

pub use crate::lockfile::object::ObjectLock;

/// The name of `key`'s lock object.
pub fn lock_name(key: &str) -> String {
    format!("{TOP}/locks/{key}")
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
    let mut told = false;
    let mut pause = Duration::from_millis(50);
    loop {
        match object::try_take(store, &name, None, false)? {
            Taken::Locked(lock) => return Ok(Some(lock)),
            Taken::Busy(holder) if !told => {
                on_wait(&holder.describe());
                told = true;
            }
            Taken::Busy(_) => {}
        }
        if cancel.is_some_and(Cancel::is_cancelled) {
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}
