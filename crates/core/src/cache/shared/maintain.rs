//! Keeping the shared tier: its configuration object, what it holds (`nxcc cache stats`),
//! `verify`, `gc` and `clear`, and eviction by `max_size` — the local directory's policy
//! (least recently used first) on objects:
//!
//! - `nxcc-v1/nxcc.conf` holds the tier's configuration, in the configuration file's format
//!   (`max_size` is what the tier keeps to; `nxcc cache config --cache_dir s3://...` writes it).
//! - An entry's last use is its marker's last write: a hit rewrites the marker (only if it is
//!   still the version read) when it is older than [`objects::TOUCH_EVERY_MS`], so use is
//!   recorded at most once an hour per entry and costs a hit nothing otherwise.
//! - `nxcc-v1/size` is a running total of the bytes published, added to by each publication
//!   with a conditional replace. Only when it passes `max_size` does the publisher list the
//!   tier — once — and evict least recently used entries until the tier is within
//!   `max_size`, then write the true total back. A publication never lists the bucket
//!   otherwise.
//! - An entry is evicted by removing its marker first (then it is gone for every reader at
//!   once), then its files.
//! - `gc` also removes publications no marker names (killed uploads) once an hour old, and
//!   lock objects whose holder is gone (`crate::lockfile::judge_text`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::objects::{self, key_dir, DONE, SMALL_LIMIT, TOP};
use super::{Put, PutMode, Storage, StorageError};
use crate::cache::settings;

/// The tier's configuration object.
pub const CONFIG: &str = "nxcc-v1/nxcc.conf";
/// The running total of bytes published.
pub const SIZE: &str = "nxcc-v1/size";
/// How old an unnamed publication must be before `gc` removes it (a publication under way
/// writes its files before its marker).
pub const ORPHAN_AGE_MS: u64 = 3_600_000;

/// The tier's configuration (an absent object: nothing set).
pub fn config(store: &dyn Storage) -> Result<settings::File, StorageError> {
    Ok(match store.get(CONFIG, SMALL_LIMIT)? {
        Some(o) => settings::File::parse(&String::from_utf8_lossy(&o.bytes)),
        None => settings::File::default(),
    })
}

/// Write the tier's configuration.
pub fn write_config(store: &dyn Storage, file: &settings::File) -> Result<(), StorageError> {
    store
        .put(CONFIG, file.text().into_bytes(), PutMode::Overwrite)
        .map(|_| ())
}

/// One entry as a listing shows it.
#[derive(Debug, Clone)]
struct Entry {
    key: String,
    /// The marker's last write (the entry's last use).
    used_ms: u64,
    /// Every object of the key but the marker: its names and sizes.
    files: Vec<(String, u64)>,
}

impl Entry {
    fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, s)| s).sum()
    }
}

/// What one listing of the tier shows.
#[derive(Debug, Default)]
struct Survey {
    entries: Vec<Entry>,
    /// Keys with files and no marker: their files and the newest's write.
    unnamed: Vec<(Vec<String>, u64)>,
    locks: Vec<String>,
}

/// A key's objects in a listing: its marker's last write, its other objects (name, size), and
/// the newest one's last write.
type Seen = (Option<u64>, Vec<(String, u64)>, u64);

fn survey(store: &dyn Storage) -> Result<Survey, StorageError> {
    let mut keys: BTreeMap<String, Seen> = BTreeMap::new();
    let mut s = Survey::default();
    for o in store.list(TOP, crate::objstore::LIST_LIMIT)? {
        let parts: Vec<&str> = o.name.split('/').collect();
        match parts.as_slice() {
            [_, "locks", _] => s.locks.push(o.name.clone()),
            [_, _, key, rest @ ..] if !rest.is_empty() => {
                let k = keys.entry(key.to_string()).or_default();
                if rest == [DONE] {
                    k.0 = Some(o.modified_ms);
                } else {
                    k.1.push((o.name.clone(), o.size));
                    k.2 = k.2.max(o.modified_ms);
                }
            }
            _ => {}
        }
    }
    for (key, (marker, files, newest)) in keys {
        match marker {
            Some(used_ms) => s.entries.push(Entry {
                key,
                used_ms,
                files,
            }),
            None => s
                .unnamed
                .push((files.into_iter().map(|(n, _)| n).collect(), newest)),
        }
    }
    Ok(s)
}

/// What the tier holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// The tier's URL.
    pub url: String,
    /// Entries (published keys).
    pub entries: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Keys with files and no entry (publications under way, or killed).
    pub unpublished: usize,
    /// Lock objects (compiles under way, or left by dead ones).
    pub locks: usize,
    /// `max_size` from the tier's configuration.
    pub max_size: Option<u64>,
}

/// What the tier holds (one listing).
pub fn stats(store: &dyn Storage) -> Result<Stats, StorageError> {
    let s = survey(store)?;
    Ok(Stats {
        url: store.url().to_string(),
        entries: s.entries.len(),
        bytes: s.entries.iter().map(Entry::bytes).sum(),
        unpublished: s.unnamed.len(),
        locks: s.locks.len(),
        max_size: config(store)?.max_size.filter(|n| *n > 0),
    })
}

/// Remove `key`'s entry: its marker, then its files.
fn evict(store: &dyn Storage, e: &Entry) -> Result<(), StorageError> {
    store.delete(&format!("{}/{DONE}", key_dir(&e.key)))?;
    for (name, _) in &e.files {
        store.delete(name)?;
    }
    Ok(())
}

/// What `gc` or an eviction did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Entries evicted.
    pub evicted: usize,
    /// Their bytes.
    pub freed_bytes: u64,
    /// Entries left.
    pub entries_left: usize,
    /// Their bytes.
    pub bytes_left: u64,
    /// Unnamed publications and stale lock objects removed.
    pub leftovers_removed: usize,
}

/// Evict least recently used entries until the tier holds at most `max_bytes`; remove unnamed
/// publications older than [`ORPHAN_AGE_MS`] and lock objects whose holder is gone.
pub fn gc(store: &dyn Storage, max_bytes: u64, now_ms: u64) -> Result<GcReport, StorageError> {
    let mut s = survey(store)?;
    let mut r = GcReport::default();
    for (files, newest) in &s.unnamed {
        if now_ms.saturating_sub(*newest) >= ORPHAN_AGE_MS {
            for f in files {
                store.delete(f)?;
            }
            r.leftovers_removed += 1;
        }
    }
    for name in &s.locks {
        let Some(o) = store.get(name, SMALL_LIMIT)? else {
            continue;
        };
        let text = String::from_utf8_lossy(&o.bytes).trim_end().to_string();
        if crate::lockfile::judge_text(text, o.info.modified_ms as f64 / 1000.0).is_stale() {
            store.delete(name)?;
            r.leftovers_removed += 1;
        }
    }
    s.entries.sort_by_key(|e| e.used_ms);
    let mut total: u64 = s.entries.iter().map(Entry::bytes).sum();
    let mut kept = 0;
    for e in &s.entries {
        if total > max_bytes {
            evict(store, e)?;
            total -= e.bytes();
            r.evicted += 1;
            r.freed_bytes += e.bytes();
        } else {
            kept += 1;
        }
    }
    r.entries_left = kept;
    r.bytes_left = total;
    store.put(SIZE, total.to_string().into_bytes(), PutMode::Overwrite)?;
    Ok(r)
}

/// After a publication of `bytes`: add them to the running total, and evict down to the tier's
/// `max_size` once the total passes it; what was evicted, if anything.
pub(crate) fn after_publish(
    store: &dyn Storage,
    bytes: u64,
    now_ms: u64,
) -> Result<Option<GcReport>, StorageError> {
    let Some(max) = config(store)?.max_size.filter(|n| *n > 0) else {
        return Ok(None);
    };
    for _ in 0..8 {
        let (total, mode) = match store.get(SIZE, SMALL_LIMIT)? {
            Some(o) => {
                let n = String::from_utf8_lossy(&o.bytes)
                    .trim()
                    .parse()
                    .unwrap_or(0u64);
                let mode = o.info.etag.map_or(PutMode::Overwrite, PutMode::Replace);
                (n, mode)
            }
            None => (0, PutMode::Create),
        };
        let total = total.saturating_add(bytes);
        if let Put::Done(_) = store.put(SIZE, total.to_string().into_bytes(), mode)? {
            return if total > max {
                gc(store, max, now_ms).map(Some)
            } else {
                Ok(None)
            };
        }
    }
    Ok(None)
}

/// What `verify` found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Entries looked at.
    pub checked: usize,
    /// Good entries.
    pub ok: usize,
    /// Entries that cannot be used (evicted), with why.
    pub corrupt: Vec<(String, String)>,
}

/// Check every entry (its `meta.json` of its key, its NEFF's size and blake3, read whole);
/// evict the bad ones.
pub fn verify(store: &dyn Storage) -> Result<VerifyReport, StorageError> {
    let s = survey(store)?;
    let mut r = VerifyReport::default();
    for e in &s.entries {
        r.checked += 1;
        match objects::check(store, &e.key) {
            Ok(()) => r.ok += 1,
            Err(objects::FetchError::Store(err)) => return Err(err),
            Err(why) => {
                evict(store, e)?;
                r.corrupt.push((e.key.clone(), why.to_string()));
            }
        }
    }
    Ok(r)
}

/// Evict every entry (lock objects and unnamed publications are left to `gc`).
pub fn clear(store: &dyn Storage) -> Result<usize, StorageError> {
    let s = survey(store)?;
    for e in &s.entries {
        evict(store, e)?;
    }
    store.put(SIZE, b"0".to_vec(), PutMode::Overwrite)?;
    Ok(s.entries.len())
}
