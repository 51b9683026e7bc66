//! Keeping the cache under its `max_size` by itself: after each publication, without scanning
//! every entry each time — amortised, a sixteenth at a time, as ccache does.
//!
//! The cache is sixteen parts (an entry's part is its key's first hex digit), each allowed a
//! sixteenth of `max_size`. Every part's entries and bytes are counted ([`super::counters`]);
//! a publication is committed and counted under that part's counter lock ([`publish`]), and
//! when the part's count goes over its allowance, that part alone is scanned and its least
//! recently used entries evicted until it holds at most [`LIMIT_MULTIPLE`] of its allowance —
//! so a part is scanned once per many publications, not every time. The scan also recounts the
//! part, correcting what other hosts, `gc`, `clear` or a crash left the counts off by; a part
//! never counted yet is recounted at its first publication.
//!
//! An entry being read is never removed under its reader: `super::store::evict_unread` skips
//! an entry whose `meta.json` a reader holds a shared `flock` on (this host's readers; a reader
//! on another host is protected by having just used the entry, which makes it the most recent).

use std::collections::BinaryHeap;
use std::path::PathBuf;

use serde::Serialize;

use super::counters::{self, Counters};
use super::store::{self, Cache, Evicted, Pending};

/// The parts the cache is kept in.
pub const PARTS: u64 = 16;
/// A part over its allowance is cleaned down to this fraction of it.
pub const LIMIT_MULTIPLE: f64 = 0.8;

/// What a publication did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Published {
    /// The entry.
    pub entry: PathBuf,
    /// Its apparent size.
    pub bytes: u64,
    /// Entries evicted to stay under `max_size`.
    pub evicted: u64,
    /// Their bytes.
    pub freed_bytes: u64,
    /// Whether the part was scanned (over its allowance, or never counted).
    pub scanned: bool,
}

/// The allowance of one part of a cache of `max_size` bytes.
pub(crate) fn part_limit(max_size: u64) -> u64 {
    max_size / PARTS
}

/// Publish `pending` (the entry of `key`) and keep its part under a sixteenth of `max_size`
/// (no limit: `None`). The publication and its count happen under the part's counter lock.
pub fn publish(
    cache: &Cache,
    key: &str,
    pending: Pending,
    max_size: Option<u64>,
) -> std::io::Result<Published> {
    let part = counters::shard_of(key);
    let bytes = store::dir_bytes(pending.dir());
    let replaced = cache.entry_bytes(key);
    let never_counted = !counters::counted(cache, part);
    let mut pending = Some(pending);
    let mut result: std::io::Result<Published> = Err(std::io::Error::other("not published"));
    let locked = counters::update(cache, part, &mut |mine| {
        let Some(p) = pending.take() else {
            return;
        };
        result = p.commit().map(|entry| Published {
            entry,
            bytes,
            ..Published::default()
        });
        if let Ok(done) = &mut result {
            mine.entries += 1 - i64::from(replaced.is_some());
            mine.size_bytes += bytes as i64 - replaced.unwrap_or(0) as i64;
            mine.bytes_written += bytes as i64;
            let counted = counters::read_others(cache, part, mine);
            let over = max_size.is_some_and(|m| counted.size_bytes > part_limit(m) as i64);
            if over || never_counted {
                keep_part(cache, part, max_size, mine, &counted, done);
            }
        }
    });
    match (locked, pending) {
        // The counters could not be written: publish uncounted.
        (Err(_), Some(p)) => p.commit().map(|entry| Published {
            entry,
            bytes,
            ..Published::default()
        }),
        _ => result,
    }
}

/// Scan part `part`, evict its least recently used entries down to [`LIMIT_MULTIPLE`] of its
/// allowance (when there is a `max_size`), and set the counts to what is there: `mine` (this
/// host's counts, being written) takes the difference to the sum `counted` of every host's.
fn keep_part(
    cache: &Cache,
    part: usize,
    max_size: Option<u64>,
    mine: &mut Counters,
    counted: &Counters,
    done: &mut Published,
) {
    done.scanned = true;
    let target = max_size.map(|m| (part_limit(m) as f64 * LIMIT_MULTIPLE) as u64);
    let (evicted, freed, entries, bytes) = clean_part(cache, part, target);
    done.evicted = evicted;
    done.freed_bytes = freed;
    mine.evictions += evicted as i64;
    mine.entries += entries as i64 - counted.entries;
    mine.size_bytes += bytes as i64 - counted.size_bytes;
}

/// Evict the least recently used entries of part `part` (not those being read) until its
/// entries take at most `target` bytes (`None`: evict nothing). Returns (evicted, freed bytes,
/// entries left, bytes left).
pub(crate) fn clean_part(cache: &Cache, part: usize, target: Option<u64>) -> (u64, u64, u64, u64) {
    let prefix = format!("{:x}", part & 15);
    let mut all: Vec<(u64, String, u64, String)> = Vec::new();
    let (mut entries, mut total) = (0u64, 0u64);
    let _ = cache.scan_shards(&|name| name.starts_with(&prefix), &mut |shard, key| {
        // Sizes and last uses only: no meta.json is read (an entry that is not sound is
        // evicted by age like any other).
        let Some((bytes, used)) = store::usage(shard, key) else {
            return;
        };
        entries += 1;
        total += bytes;
        all.push((used, key.to_string(), bytes, key[..2].to_string()));
    });
    let Some(target) = target.filter(|t| total > *t) else {
        return (0, 0, entries, total);
    };
    // Oldest first: a min-heap on last use.
    let mut heap: BinaryHeap<std::cmp::Reverse<(u64, String, u64, String)>> =
        all.into_iter().map(std::cmp::Reverse).collect();
    let (mut evicted, mut freed) = (0u64, 0u64);
    let root = match cache.open_root(false) {
        Ok(Some(r)) => r,
        _ => return (0, 0, entries, total),
    };
    while total > target {
        let Some(std::cmp::Reverse((_, key, bytes, shard))) = heap.pop() else {
            break;
        };
        let Ok(dir) = root.open_dir(&shard) else {
            continue;
        };
        match store::evict_unread(&dir, &key) {
            Ok(Evicted::Removed(b)) => {
                evicted += 1;
                freed += b;
                entries -= 1;
                total = total.saturating_sub(b);
            }
            Ok(Evicted::Gone) => {
                entries -= 1;
                total = total.saturating_sub(bytes);
            }
            Ok(Evicted::Held) | Err(_) => {}
        }
    }
    (evicted, freed, entries, total)
}

/// Recount every part (after `gc`, `clear` or `verify`, which change the cache without counting):
/// this host's counts take the difference to what is there.
pub(crate) fn recount(cache: &Cache) {
    for part in 0..PARTS as usize {
        let (_, _, entries, bytes) = clean_part(cache, part, None);
        let _ = counters::update(cache, part, &mut |mine| {
            let counted = counters::read_others(cache, part, mine);
            mine.entries += entries as i64 - counted.entries;
            mine.size_bytes += bytes as i64 - counted.size_bytes;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::meta::{META_FILE, NEFF_FILE};
    use std::io::Write;

    fn put(cache: &Cache, key: &str, size: usize, max: Option<u64>) -> Published {
        let p = cache.begin(key).unwrap();
        p.dir()
            .create_file(NEFF_FILE)
            .unwrap()
            .write_all(&vec![7u8; size])
            .unwrap();
        p.dir()
            .create_file(META_FILE)
            .unwrap()
            .write_all(format!("{{\"key\":\"{key}\",\"status\":\"ok\",\"neff\":{{}}}}").as_bytes())
            .unwrap();
        publish(cache, key, p, max).unwrap()
    }

    fn real_bytes(cache: &Cache) -> u64 {
        let mut total = 0;
        cache.scan_summaries(&mut |s| total += s.bytes).unwrap();
        total
    }

    #[test]
    fn the_cache_stays_under_max_size_and_keeps_what_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let max = 16 * 3 * 4096u64;
        // The entry a reader holds: a shared lock on its meta.json, as Cache::serve takes.
        let held_key = format!("0{}", "a".repeat(63));
        put(&cache, &held_key, 4000, Some(max));
        let reader = std::fs::File::open(cache.entry_dir(&held_key).join(META_FILE)).unwrap();
        fs4::fs_std::FileExt::lock_shared(&reader).unwrap();
        let mut evicted = 0;
        for i in 0..200u32 {
            let key = format!("{:064x}", u128::from(i) * 0x0123_4567_89ab_cdef_0011 + 7);
            let key = format!("{}{}", &format!("{:x}", i % 16), &key[1..]);
            evicted += put(&cache, &key, 4000, Some(max)).evicted;
            assert!(real_bytes(&cache) <= max, "over max_size after {i}");
            assert!(
                cache.entry_dir(&held_key).exists(),
                "the held entry was removed"
            );
        }
        assert!(evicted > 100, "{evicted}");
        let c = counters::read(&cache, None);
        assert_eq!(c.evictions as u64, evicted);
        assert_eq!(c.size_bytes as u64, real_bytes(&cache));
        drop(reader);
    }

    #[test]
    fn a_part_never_counted_is_recounted_at_its_first_publication() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        // Entries an older nxcc wrote, uncounted.
        for i in 0..5 {
            crate::cache::store::tests::put(&cache, &format!("5{i}{}", "0".repeat(62)), &[1; 100]);
        }
        assert_eq!(counters::read(&cache, Some(5)).entries, 0);
        let p = put(&cache, &format!("5f{}", "0".repeat(62)), 100, None);
        assert!(p.scanned);
        assert_eq!(counters::read(&cache, Some(5)).entries, 6);
        let q = put(&cache, &format!("5e{}", "0".repeat(62)), 100, None);
        assert!(!q.scanned);
        assert_eq!(counters::read(&cache, Some(5)).entries, 7);
        assert_eq!(
            counters::read(&cache, Some(5)).size_bytes as u64,
            real_bytes(&cache)
        );
    }
}
