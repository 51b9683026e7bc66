//! Looking after a cache directory: [`stats`], [`verify`] (evicting corrupt entries: a NEFF
//! that does not match its record, or that is not a valid NEFF as `neff-info --verify` checks
//! it — whatever produced it, a local compile or a remote server), [`gc`]
//! (least recently used first, down to a size) and [`clear`]. Every removal goes through an
//! eviction (renamed away, then deleted), so the cache stays consistent for compiles running
//! meanwhile; temporary directories of compiles still running are left alone. Whatever is not a
//! plain directory or file where the cache expects one (a link) is removed — the link, never
//! what it points to — with a warning in the report.
//!
//! `stats` and `gc` stream the entries ([`Cache::scan_summaries`]): `stats` keeps a few counters
//! whatever the number of entries; `gc` makes two passes (the total, then the oldest entries
//! that must go) and holds only the entries it evicts.

use std::collections::BinaryHeap;

use serde::Serialize;

use super::meta::NEFF_FILE;
use super::store::{self, Cache, Leftover, LeftoverKind, Lookup, State};
use crate::engine::log::utc_timestamp;

/// What `stats` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// The cache's root, `DIR/nxcc-v1`.
    pub dir: String,
    /// Good entries (a NEFF).
    pub entries: usize,
    /// Failed-compile entries.
    pub failed: usize,
    /// Entries that cannot be used, and shards or entries that are not plain directories
    /// (`verify` evicts them).
    pub corrupt: usize,
    /// Apparent size of every entry's files.
    pub bytes: u64,
    /// Creation time of the oldest and newest entry (UTC).
    pub oldest: Option<String>,
    /// Creation time of the newest entry (UTC); `None` when there is none.
    pub newest: Option<String>,
    /// Temporary or half-removed directories (compiles in progress, or leftovers `gc` removes).
    pub temporary: usize,
}

/// One corrupt entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Corrupt {
    /// The entry's key, or the place of what was not a plain directory (`ab/<key>`).
    pub key: String,
    /// Why it cannot be used.
    pub reason: String,
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Entries looked at, the corrupt ones included.
    pub checked: usize,
    /// Good entries (a NEFF that matches its record).
    pub ok: usize,
    /// Sound failed-compile entries.
    pub failed: usize,
    /// Corrupt entries found (and evicted); a shard or entry that was not a plain directory is
    /// one too, named by its place (`ab/<key>`).
    pub corrupt: Vec<Corrupt>,
}

/// What `gc` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// The size asked for, bytes.
    pub max_bytes: u64,
    /// Entries evicted.
    pub evicted: usize,
    /// Apparent bytes of the evicted entries.
    pub freed_bytes: u64,
    /// Entries still there.
    pub entries_left: usize,
    /// Apparent bytes of the entries still there.
    pub bytes_left: u64,
    /// Leftovers removed: dead compiles' temporary directories, half-removed evictions, stray
    /// locks.
    pub leftovers_removed: usize,
    /// What was removed because it was not a plain directory or file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// What `clear` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClearReport {
    /// Entries evicted.
    pub evicted: usize,
    /// Leftovers removed besides the entries.
    pub leftovers_removed: usize,
    /// What was removed because it was not a plain directory or file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

fn is_temporary(l: &Leftover) -> bool {
    matches!(l.kind, LeftoverKind::Temp { .. } | LeftoverKind::Evicted)
}

fn not_plain(left: &[Leftover]) -> impl Iterator<Item = (&Leftover, &String)> {
    left.iter().filter_map(|l| match &l.kind {
        LeftoverKind::NotPlain(why) => Some((l, why)),
        _ => None,
    })
}

fn warnings(left: &[Leftover]) -> Vec<String> {
    not_plain(left)
        .map(|(l, why)| format!("removed {} ({why})", l.display()))
        .collect()
}

/// Count entries, failed entries and bytes; the oldest and newest creation. Streams the
/// entries: memory does not grow with their number.
pub fn stats(cache: &Cache) -> Stats {
    let mut s = Stats {
        dir: cache.root().display().to_string(),
        entries: 0,
        failed: 0,
        corrupt: 0,
        bytes: 0,
        oldest: None,
        newest: None,
        temporary: 0,
    };
    let (mut oldest, mut newest): (Option<u64>, Option<u64>) = (None, None);
    let left = cache
        .scan_summaries(&mut |e| {
            match e.state {
                State::Ok => s.entries += 1,
                State::Failed => s.failed += 1,
                State::Corrupt(_) => s.corrupt += 1,
            }
            s.bytes += e.bytes;
            if !matches!(e.state, State::Corrupt(_)) {
                oldest = Some(oldest.map_or(e.created_ms, |o| o.min(e.created_ms)));
                newest = Some(newest.map_or(e.created_ms, |n| n.max(e.created_ms)));
            }
        })
        .unwrap_or_default();
    let stamp = |ms: Option<u64>| ms.map(|ms| utc_timestamp(ms / 1000));
    s.oldest = stamp(oldest);
    s.newest = stamp(newest);
    s.temporary = left.iter().filter(|l| is_temporary(l)).count();
    s.corrupt += not_plain(&left).count();
    s
}

/// Why an entry is not sound, if it is not: its NEFF must match the recorded blake3 and size.
fn check(shard: &crate::fsx::Dir, key: &str) -> Option<String> {
    let dir = match shard.open_dir(key) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(e.to_string()),
    };
    match store::lookup_in(&dir, key) {
        Lookup::Absent | Lookup::Failed(..) => None,
        Lookup::Corrupt(reason) => Some(reason),
        Lookup::Hit(m) => {
            let neff = m.neff.as_ref()?;
            match store::hash_in(&dir, NEFF_FILE) {
                Err(err) => Some(format!("{NEFF_FILE} cannot be read: {err}")),
                Ok((h, n)) if n != neff.size || h.to_hex().as_str() != neff.blake3 => {
                    // Replaced meanwhile by a new compile? Then it is not this entry's fault.
                    let again = shard.open_dir(key).map(|d| store::lookup_in(&d, key)).ok();
                    match again {
                        Some(Lookup::Hit(again)) if again.created_ms != m.created_ms => None,
                        _ => Some(format!("{NEFF_FILE} does not match its recorded blake3")),
                    }
                }
                Ok(_) => neff_problems(&dir),
            }
        }
    }
}

/// Why an entry's NEFF is not a valid NEFF, if it is not (read through the entry's directory
/// handle: no link in the cache is followed).
fn neff_problems(dir: &crate::fsx::Dir) -> Option<String> {
    use std::os::fd::AsRawFd;
    let f = match dir.open_file(NEFF_FILE) {
        Ok(f) => f,
        Err(e) => return Some(format!("{NEFF_FILE} cannot be read: {e}")),
    };
    let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
    let problems = match crate::neff::Neff::open(&path) {
        Ok(neff) => crate::neff::verify::verify(&neff).problems,
        Err(e) => vec![e.to_string()],
    };
    problems.first().map(|p| {
        format!(
            "{NEFF_FILE} is not a valid NEFF ({}{})",
            p.escape_debug(),
            match problems.len() {
                1 => String::new(),
                n => format!("; and {} more problems", n - 1),
            }
        )
    })
}

/// Check every entry; evict the corrupt ones, and whatever is not a plain directory.
pub fn verify(cache: &Cache) -> VerifyReport {
    let mut report = VerifyReport {
        checked: 0,
        ok: 0,
        failed: 0,
        corrupt: Vec::new(),
    };
    let left = cache
        .scan(&mut |shard, key| {
            report.checked += 1;
            let failed = matches!(
                shard.open_dir(key).map(|d| store::lookup_in(&d, key)),
                Ok(Lookup::Failed(..))
            );
            match check(shard, key) {
                None if failed => report.failed += 1,
                None => report.ok += 1,
                Some(reason) => {
                    let _ = store::evict_in(shard, key);
                    report.corrupt.push(Corrupt {
                        key: key.to_string(),
                        reason,
                    });
                }
            }
        })
        .unwrap_or_default();
    let bad: Vec<Leftover> = not_plain(&left).map(|(l, _)| l.clone()).collect();
    cache.clean_leftovers(&bad);
    for l in &bad {
        if let LeftoverKind::NotPlain(why) = &l.kind {
            report.checked += 1;
            report.corrupt.push(Corrupt {
                key: l.display(),
                reason: format!("{why}; removed it"),
            });
        }
    }
    report
}

/// Evict least recently used entries first until the entries take at most `max_bytes`; remove
/// leftovers nobody uses. Two streaming passes: the total, then (only when over the limit) the
/// oldest entries whose sizes make up the excess — the only ones held in memory.
pub fn gc(cache: &Cache, max_bytes: u64) -> GcReport {
    let (mut count, mut total) = (0usize, 0u64);
    let left = cache
        .scan_summaries(&mut |e| {
            count += 1;
            total += e.bytes;
        })
        .unwrap_or_default();
    let mut report = GcReport {
        max_bytes,
        evicted: 0,
        freed_bytes: 0,
        entries_left: count,
        bytes_left: total,
        leftovers_removed: cache.clean_leftovers(&left),
        warnings: warnings(&left),
    };
    if total <= max_bytes {
        return report;
    }
    let excess = total - max_bytes;
    // A max-heap on (last use, key): the newest of the chosen on top, dropped while the rest
    // still make up the excess.
    let mut chosen: BinaryHeap<(u64, String, u64)> = BinaryHeap::new();
    let mut sum = 0u64;
    let _ = cache.scan_summaries(&mut |e| {
        chosen.push((e.last_used_ms, e.key, e.bytes));
        sum += e.bytes;
        while let Some((_, _, b)) = chosen.peek() {
            if sum - b >= excess {
                sum -= b;
                chosen.pop();
            } else {
                break;
            }
        }
    });
    for (_, key, bytes) in chosen.into_sorted_vec() {
        if report.bytes_left <= max_bytes {
            break;
        }
        if matches!(cache.evict(&key), Ok(true)) {
            // Its lock goes with it (a later gc would otherwise find it left over).
            cache.remove_free_lock(&key);
            report.evicted += 1;
            report.freed_bytes += bytes;
            report.entries_left -= 1;
        }
        report.bytes_left = report.bytes_left.saturating_sub(bytes);
    }
    report
}

/// Evict every entry, remove the leftovers nobody uses, the memory-estimate index, the lists
/// of near entries and the remembered digests (the counters and the configuration stay).
pub fn clear(cache: &Cache) -> ClearReport {
    let mut evicted = 0;
    let left = cache
        .scan(&mut |shard, key| {
            if matches!(store::evict_in(shard, key), Ok(true)) {
                evicted += 1;
            }
        })
        .unwrap_or_default();
    let mut leftovers_removed = cache.clean_leftovers(&left);
    if matches!(cache.clear_estimates(), Ok(true)) {
        leftovers_removed += 1;
    }
    // What pointed at entries (the lists of near entries) and what was remembered of files
    // (their digests) go too.
    if let Ok(Some(root)) = cache.open_root(false) {
        for dir in [super::index::NEAR_DIR, super::digests::DIGESTS_DIR] {
            if matches!(store::evict_in(&root, dir), Ok(true)) {
                leftovers_removed += 1;
            }
        }
    }
    ClearReport {
        evicted,
        leftovers_removed,
        warnings: warnings(&left),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::store::tests::put;

    #[test]
    fn gc_evicts_the_least_recently_used_down_to_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let keys: Vec<String> = (0..6).map(|i| format!("{i:02}").repeat(32)).collect();
        for (i, k) in keys.iter().enumerate() {
            put(&cache, k, &vec![b'x'; 1000]);
            // Last used at i seconds after the epoch: keys[0] is the oldest.
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 + i as u64);
            std::fs::File::options()
                .write(true)
                .open(cache.entry_dir(k).join(super::super::meta::META_FILE))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        // Every entry has a free lock file, as an older nxcc or a killed compile leaves it.
        for k in &keys {
            std::fs::File::create(cache.lock_path(k)).unwrap();
        }
        let one = stats(&cache);
        assert_eq!(one.entries, 6);
        let per = one.bytes / 6;
        let r = gc(&cache, per * 4);
        assert_eq!(r.evicted, 2, "{r:?}");
        assert_eq!(r.leftovers_removed, 0, "{r:?}");
        assert!(r.bytes_left <= per * 4);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(cache.entry_dir(k).exists(), i >= 2, "{i}");
            // An evicted entry's lock goes with it.
            assert_eq!(cache.lock_path(k).exists(), i >= 2, "{i}");
        }
        let again = gc(&cache, u64::MAX);
        assert_eq!(
            (again.evicted, again.leftovers_removed),
            (0, 0),
            "{again:?}"
        );
        // A lock a compile holds stays; its holder removes it when released.
        let held = cache.try_lock(&keys[2]).unwrap().unwrap();
        assert_eq!(gc(&cache, per * 3).evicted, 1);
        assert!(cache.lock_path(&keys[2]).exists());
        drop(held);
        assert!(!cache.lock_path(&keys[2]).exists());
        assert_eq!(gc(&cache, u64::MAX).leftovers_removed, 0);
        assert_eq!(clear(&cache).evicted, 3);
        assert_eq!(stats(&cache).entries, 0);
    }
}
