//! Looking after a cache directory: [`stats`], [`verify`] (evicting corrupt entries), [`gc`]
//! (least recently used first, down to a size) and [`clear`]. Every removal goes through
//! [`Cache::evict`] (renamed away, then deleted), so the cache stays consistent for compiles
//! running meanwhile; temporary directories of compiles still running are left alone.

use serde::Serialize;

use super::key::hash_file_into;
use super::meta::NEFF_FILE;
use super::store::{Cache, Listed, Lookup};
use crate::engine::log::utc_timestamp;

/// What `stats` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub dir: String,
    /// Good entries (a NEFF).
    pub entries: usize,
    /// Failed-compile entries.
    pub failed: usize,
    /// Entries that cannot be used (`verify` evicts them).
    pub corrupt: usize,
    /// Apparent size of every entry's files.
    pub bytes: u64,
    /// Creation time of the oldest and newest entry (UTC).
    pub oldest: Option<String>,
    pub newest: Option<String>,
    /// Temporary or half-removed directories (compiles in progress, or leftovers `gc` removes).
    pub temporary: usize,
}

/// One corrupt entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Corrupt {
    pub key: String,
    pub reason: String,
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub checked: usize,
    pub ok: usize,
    pub failed: usize,
    /// Corrupt entries found (and evicted).
    pub corrupt: Vec<Corrupt>,
}

/// What `gc` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub max_bytes: u64,
    pub evicted: usize,
    pub freed_bytes: u64,
    pub entries_left: usize,
    pub bytes_left: u64,
    pub leftovers_removed: usize,
}

/// What `clear` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClearReport {
    pub evicted: usize,
    pub leftovers_removed: usize,
}

/// Count entries, failed entries and bytes; the oldest and newest creation.
pub fn stats(cache: &Cache) -> Stats {
    let (entries, left) = cache.scan();
    let created: Vec<u64> = entries
        .iter()
        .filter_map(|e| e.meta.as_ref().map(|m| m.created_ms))
        .collect();
    let stamp = |ms: Option<&u64>| ms.map(|ms| utc_timestamp(ms / 1000));
    Stats {
        dir: cache.root().display().to_string(),
        entries: entries
            .iter()
            .filter(|e| e.meta.is_some() && !e.failed)
            .count(),
        failed: entries.iter().filter(|e| e.failed).count(),
        corrupt: entries.iter().filter(|e| e.meta.is_none()).count(),
        bytes: entries.iter().map(|e| e.bytes).sum(),
        oldest: stamp(created.iter().min()),
        newest: stamp(created.iter().max()),
        temporary: left.temp.len() + left.evicted.len(),
    }
}

/// Why an entry is not sound, if it is not: its NEFF must match the recorded blake3 and size.
fn check(cache: &Cache, e: &Listed) -> Option<String> {
    match cache.lookup(&e.key) {
        Lookup::Absent => None,
        Lookup::Corrupt(reason) => Some(reason),
        Lookup::Failed(..) => None,
        Lookup::Hit(m) => {
            let neff = m.neff.as_ref()?;
            let mut h = blake3::Hasher::new();
            match hash_file_into(&e.dir.join(NEFF_FILE), &mut h) {
                Err(err) => Some(format!("{NEFF_FILE} cannot be read: {err}")),
                Ok(n) if n != neff.size || h.finalize().to_hex().as_str() != neff.blake3 => {
                    // Replaced meanwhile by a new compile? Then it is not this entry's fault.
                    match cache.lookup(&e.key) {
                        Lookup::Hit(again) if again.created_ms != m.created_ms => None,
                        _ => Some(format!("{NEFF_FILE} does not match its recorded blake3")),
                    }
                }
                Ok(_) => None,
            }
        }
    }
}

/// Check every entry; evict the corrupt ones.
pub fn verify(cache: &Cache) -> VerifyReport {
    let (entries, _) = cache.scan();
    let mut report = VerifyReport {
        checked: entries.len(),
        ok: 0,
        failed: 0,
        corrupt: Vec::new(),
    };
    for e in &entries {
        match check(cache, e) {
            None if e.failed => report.failed += 1,
            None => report.ok += 1,
            Some(reason) => {
                let _ = cache.evict(&e.key);
                report.corrupt.push(Corrupt {
                    key: e.key.clone(),
                    reason,
                });
            }
        }
    }
    report
}

/// Evict least recently used entries first until the entries take at most `max_bytes`; remove
/// leftovers nobody uses.
pub fn gc(cache: &Cache, max_bytes: u64) -> GcReport {
    let (mut entries, left) = cache.scan();
    let leftovers_removed = cache.clean_leftovers(&left);
    entries.sort_by_key(|e| (e.last_used_ms, e.key.clone()));
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut report = GcReport {
        max_bytes,
        evicted: 0,
        freed_bytes: 0,
        entries_left: entries.len(),
        bytes_left: total,
        leftovers_removed,
    };
    for e in &entries {
        if total <= max_bytes {
            break;
        }
        if matches!(cache.evict(&e.key), Ok(true)) {
            report.evicted += 1;
            report.freed_bytes += e.bytes;
            report.entries_left -= 1;
        }
        total -= e.bytes;
    }
    report.bytes_left = total;
    report
}

/// Evict every entry, remove the leftovers nobody uses and the memory-estimate index.
pub fn clear(cache: &Cache) -> ClearReport {
    let (entries, left) = cache.scan();
    let mut evicted = 0;
    for e in &entries {
        if matches!(cache.evict(&e.key), Ok(true)) {
            evicted += 1;
        }
    }
    let mut leftovers_removed = cache.clean_leftovers(&left);
    let index = cache.root().join(super::store::ESTIMATES_DIR);
    if index.exists() {
        let away = cache
            .root()
            .join(format!(".evict-estimates-{}", std::process::id()));
        if std::fs::rename(&index, &away).is_ok() && std::fs::remove_dir_all(&away).is_ok() {
            leftovers_removed += 1;
        }
    }
    ClearReport {
        evicted,
        leftovers_removed,
    }
}
