//! The layers a compile's key goes through after its own cache: read-only *secondary* caches
//! (`--cache-secondary DIR`, repeatable), searched in order — a hit there is served and copied
//! into the primary cache, unless the primary may not be written — and what the cache's mode
//! makes of a miss ([`on_miss`]): compile and store (`read-write`), compile and store nothing
//! (`read-only`), or refuse (`hit-only`: an error with its own exit status,
//! [`EXIT_CACHE_MISS`](crate::result::EXIT_CACHE_MISS), naming what differed).
//!
//! A secondary is checked as the primary is ([`Cache::check`]: owned by you or root, writable by
//! nobody else) and read without following links; it is never written: no lock, no use time, no
//! counter. A secondary that may not be used is skipped with a warning.

use std::path::PathBuf;

use super::explain::Explanation;
use super::meta::{Failed, Meta};
use super::settings::Mode;
use super::store::{Cache, Lookup};
use crate::error::NccError;

/// What a miss leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnMiss {
    /// Compile; `store`: keep the result in the cache.
    Compile {
        /// Whether the result is stored.
        store: bool,
    },
    /// Refuse, with this error (exit [`EXIT_CACHE_MISS`](crate::result::EXIT_CACHE_MISS)).
    Refuse(NccError),
}

/// What `mode` makes of a miss `explanation` explains.
pub(crate) fn on_miss(mode: Mode, cache: &Cache, explanation: &Explanation) -> OnMiss {
    match mode {
        Mode::ReadWrite => OnMiss::Compile { store: true },
        Mode::ReadOnly => OnMiss::Compile { store: false },
        Mode::HitOnly => OnMiss::Refuse(NccError::cache_miss_refused(
            cache.dir().display(),
            explanation.line(),
        )),
    }
}

/// An entry found in a secondary cache.
#[derive(Debug, Clone)]
pub struct SecondaryHit {
    /// The secondary cache.
    pub cache: Cache,
    /// The entry's `meta.json`.
    pub meta: Box<Meta>,
    /// Its `failed.json`, for a remembered failure.
    pub failed: Option<Failed>,
}

/// The first secondary cache holding `key` (a NEFF or a remembered failure); `warn` is told of
/// a secondary that may not be used.
pub fn find(
    secondaries: &[PathBuf],
    key: &str,
    warn: &mut dyn FnMut(String),
) -> Option<SecondaryHit> {
    for dir in secondaries {
        if dir.to_str().is_some_and(crate::objstore::is_url) {
            // A shared tier: searched by its own layer (`super::shared::tier`).
            continue;
        }
        let cache = Cache::new(dir);
        if let Err(u) = cache.check() {
            warn(format!("skipping the secondary cache: {u}"));
            continue;
        }
        match cache.lookup(key) {
            Lookup::Hit(meta) => {
                return Some(SecondaryHit {
                    cache,
                    meta,
                    failed: None,
                })
            }
            Lookup::Failed(meta, failed) => {
                return Some(SecondaryHit {
                    cache,
                    meta,
                    failed: Some(failed),
                })
            }
            Lookup::Absent | Lookup::Corrupt(_) => {}
        }
    }
    None
}

/// Copy a secondary's entry into `primary` (its NEFF verified on the way), kept under
/// `max_size` there as any publication is; `None` when another compile of the key holds its
/// lock (it will publish the same).
pub(crate) fn copy_into(
    primary: &Cache,
    hit: &SecondaryHit,
    key: &str,
    max_size: Option<u64>,
) -> std::io::Result<Option<PathBuf>> {
    let Some(_lock) = primary.try_lock(key)? else {
        return Ok(None);
    };
    let pending = primary.begin_copy(&hit.cache, key, &hit.meta)?;
    super::evict::publish(primary, key, pending, max_size).map(|p| Some(p.entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::meta::NEFF_FILE;
    use crate::cache::store::tests::put;

    #[test]
    fn a_secondary_entry_is_found_and_copied_verified() {
        let dir = tempfile::tempdir().unwrap();
        let (primary, image) = (Cache::new(dir.path().join("p")), dir.path().join("image"));
        let key = "ab".repeat(32);
        put(&Cache::new(&image), &key, b"neff from the image");
        let mut warnings = Vec::new();
        let missing = dir.path().join("absent");
        let hit = find(&[missing, image.clone()], &key, &mut |w| warnings.push(w)).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(hit.cache.dir(), image);
        let entry = copy_into(&primary, &hit, &key, None).unwrap().unwrap();
        assert_eq!(
            std::fs::read(entry.join(NEFF_FILE)).unwrap(),
            b"neff from the image"
        );
        assert!(matches!(primary.lookup(&key), Lookup::Hit(_)));
        // A secondary's NEFF that does not match its record is not copied.
        let other = "cd".repeat(32);
        put(&Cache::new(&image), &other, b"good");
        std::fs::write(
            Cache::new(&image).entry_dir(&other).join(NEFF_FILE),
            b"evil",
        )
        .unwrap();
        let bad = find(std::slice::from_ref(&image), &other, &mut |_| {}).unwrap();
        assert!(copy_into(&primary, &bad, &other, None).is_err());
        assert_eq!(primary.lookup(&other), Lookup::Absent);
    }
}
