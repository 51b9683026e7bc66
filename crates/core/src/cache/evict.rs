//! Keeping the cache under its `max_size` by itself, after each publication: the least recently
//! used entries of the whole cache go first, and no publication scans every entry.
//!
//! **Counting.** The cache is counted in sixteen parts (an entry's part is its key's first hex
//! digit): each part's entries and bytes, per host ([`super::counters`]). Every change of a
//! part's entries that nxcc counts — a publication, an eviction, a corrupt entry's removal — and
//! its count are one step under the part's lock (`nxcc-v1/evict/<part>.lock`, taken by the one
//! lock protocol, [`crate::lockfile`], so it holds across hosts sharing the directory, whose
//! `flock`s do not); so is a recount, which sets this host's count to what is there less every
//! other host's count. Under the lock no other host's change is half done, so a recount makes
//! the counts of every host add up to exactly what is there, and every counted change after it
//! keeps them so. What changes the cache without counting (`gc`, `clear`, `verify`, a crash
//! between a change and its count) is made right by the next recount of the part: the one
//! `gc`, `clear` and `verify` run after, or an eviction's scan. A part never counted yet
//! (entries an older nxcc wrote) is recounted at its first publication.
//!
//! **When.** After the commit, when the parts' bytes add up to more than `max_size`, the
//! publication evicts until they do not. One process evicts at a time, for the whole cache and
//! every host sharing it: the lock `nxcc-v1/evict/lock`, taken by the one lock protocol
//! ([`crate::lockfile`]) without waiting — a process that finds it held leaves the eviction to
//! its holder, which reads the sizes again once it holds it.
//!
//! **Which entries.** The oldest of the whole cache. Each part has a hint of its oldest entry's
//! last use (`evict::oldest`: a lower bound, never newer than the truth). Eviction merges the parts
//! by age: the part whose next candidate is the oldest — by the hint for a part not scanned yet, by
//! its entries for one scanned — goes next: a part not scanned is scanned then (each entry's size
//! and `meta.json`'s modification time: its last use; no file read), its count set to what is there
//! (correcting what `gc`, `clear`, a crash or another host left it off by), and its entries join
//! the merge; a scanned part's oldest entry is evicted. Since a hint is a lower bound, the entry
//! evicted is always older than every entry of the parts not scanned: the order is least recently
//! used across the whole cache, and only the parts holding the oldest entries are scanned. Once
//! under `max_size`, the last part evicted from gives up to a fifth of its share (`max_size / 16`)
//! more — its next oldest entries that fit in that — so that a full cache of many small entries
//! scans about one part per many publications, as many as a fifth of a share holds, not one per
//! publication.
//!
//! **Limits.** An entry larger than `max_size` is refused before it is committed (the publication
//! fails, saying so, and the cache is left as it was). The entry being published is never evicted
//! by its own publication, whatever its size. An entry being read is never removed under its
//! reader: `super::store::evict_unread` passes over an entry whose `meta.json` a reader holds a
//! shared `flock` on (this host's readers; a reader on another host is protected by having just
//! used the entry, which makes it the most recent).

mod oldest;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;

use serde::Serialize;

use super::counters::{self, Counters};
use super::keylock::{self, Attempt};
use super::store::{self, Cache, Evicted, Pending};
use crate::fsx::Dir;

/// The parts the cache is counted in.
pub const PARTS: u64 = 16;
/// What the last part evicted from gives beyond what was needed, at most: this fraction of a
/// part's share of `max_size`.
pub const BATCH_OF_SHARE: f64 = 0.2;
/// The eviction's directory in `nxcc-v1`: its lock, the parts' locks and hints.
pub const EVICT_DIR: &str = "evict";
/// The eviction's lock file, in [`EVICT_DIR`].
pub const LOCK: &str = "lock";
/// What a part's lock file is called after the part's hex digit, in [`EVICT_DIR`].
pub const PART_LOCK_SUFFIX: &str = ".lock";

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
    /// Parts scanned (never counted before, or evicted from).
    pub scanned: u64,
}

/// A part's share of a cache of `max_size` bytes.
pub(crate) fn part_share(max_size: u64) -> u64 {
    max_size / PARTS
}

/// The refusal of an entry of `bytes` in a cache of `max_size`.
fn too_large(bytes: u64, max_size: u64) -> std::io::Error {
    std::io::Error::other(format!(
        "the entry takes {}, more than the cache's max_size of {}; it is not stored (raise max_size: nxcc cache config max_size=SIZE)",
        crate::hlo::summary::human(bytes),
        crate::hlo::summary::human(max_size)
    ))
}

/// Publish `pending` (the entry of `key`) and keep the cache under `max_size` (no limit: `None`).
/// The publication and its count are one step under the part's lock (see the module
/// documentation); an entry larger than `max_size` is refused, and `pending` removed.
pub fn publish(
    cache: &Cache,
    key: &str,
    pending: Pending,
    max_size: Option<u64>,
) -> std::io::Result<Published> {
    let part = counters::shard_of(key);
    let bytes = store::dir_bytes(pending.dir());
    if let Some(max) = max_size.filter(|m| bytes > *m) {
        return Err(too_large(bytes, max));
    }
    let never_counted = !counters::counted(cache, part);
    let mut pending = Some(pending);
    let mut hint = None;
    let counted = in_part(cache, part, |mine| {
        let p = pending.take()?;
        let replaced = cache.entry_bytes(key);
        let entry = p.commit();
        if entry.is_ok() {
            mine.entries += 1 - i64::from(replaced.is_some());
            mine.size_bytes += bytes as i64 - replaced.unwrap_or(0) as i64;
            mine.bytes_written += bytes as i64;
            if never_counted {
                hint = Some(recount_part(cache, part, mine));
            }
        }
        Some(entry)
    });
    let entry = match (counted, pending) {
        // The counters could not be written: publish uncounted.
        (Err(_), Some(p)) => p.commit(),
        (Ok(Some(entry)), _) => entry,
        _ => Err(std::io::Error::other("not published")),
    }?;
    let mut done = Published {
        entry,
        bytes,
        ..Published::default()
    };
    if let Some(h) = hint {
        done.scanned = 1;
        with_evict_dir(cache, |dir| oldest::write(dir, &[(part, h)]));
    }
    if let Some(max) = max_size {
        if counters::total_bytes(cache) > max as i64 {
            keep_under(cache, max, key, &mut done);
        }
    }
    Ok(done)
}

/// Remove the entry of `key` (one found corrupt), counted; whether there was one.
pub fn remove(cache: &Cache, key: &str) -> std::io::Result<bool> {
    let part = counters::shard_of(key);
    let mut removed = None;
    let counted = in_part(cache, part, |mine| {
        let bytes = cache.entry_bytes(key);
        let r = cache.evict(key);
        if let (Ok(true), Some(b)) = (&r, bytes) {
            mine.entries -= 1;
            mine.size_bytes -= b as i64;
        }
        removed = Some(r);
    });
    match (counted, removed) {
        (_, Some(r)) => r,
        (Err(_), None) => cache.evict(key),
        (Ok(()), None) => Err(std::io::Error::other("not removed")),
    }
}

/// Run `change` on this host's count of part `part` while holding the part's lock, so that what
/// `change` does to the part's entries and its count are one step for every process of every
/// host sharing the cache. Without the part's lock (a cache whose eviction directory cannot be
/// made, a lock that cannot be taken), under this host's counter file's `flock` alone; `Err`
/// when `change` did not run: the counters cannot be written.
fn in_part<T>(
    cache: &Cache,
    part: usize,
    change: impl FnOnce(&mut Counters) -> T,
) -> std::io::Result<T> {
    let _lock = part_lock(cache, part);
    let mut change = Some(change);
    let mut out = None;
    let written = counters::update(cache, part, &mut |mine| {
        out = change.take().map(|f| f(mine));
    });
    // Once `change` ran, what it did stands, counted or not.
    match (out, written) {
        (Some(t), _) => Ok(t),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Err(std::io::Error::other("not counted")),
    }
}

/// Take part `part`'s lock, waiting while another process (of any host) holds it; `None` when
/// it cannot be taken.
fn part_lock(cache: &Cache, part: usize) -> Option<keylock::KeyLock> {
    let name = format!("{:x}{PART_LOCK_SUFFIX}", part & 15);
    let path = cache.root().join(EVICT_DIR).join(&name);
    with_evict_dir(cache, |dir| {
        keylock::take(dir, &name, &path, None, &mut |_| {})
            .ok()
            .flatten()
    })
    .flatten()
}

/// Set this host's count of part `part` (`mine`, being written under the part's lock) so that
/// every host's add up to what is there; the part's hint.
fn recount_part(cache: &Cache, part: usize, mine: &mut Counters) -> u64 {
    let scan = scan_part(cache, part, None);
    let counted = counters::read_others(cache, part, mine);
    mine.entries += scan.entries.len() as i64 - counted.entries;
    mine.size_bytes += scan.bytes as i64 - counted.size_bytes;
    scan.hint(None)
}

/// Run `f` on the eviction's directory (made if missing), if the cache can be written.
fn with_evict_dir<T>(cache: &Cache, f: impl FnOnce(&Dir) -> T) -> Option<T> {
    let root = cache.open_root(false).ok()??;
    let dir = root.open_or_create_dir(EVICT_DIR).ok()?;
    Some(f(&dir))
}

/// One entry of a part, as a scan sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    used: u64,
    key: String,
    bytes: u64,
}

/// A part as scanned: its entries oldest first, the next one to evict, and what it keeps.
#[derive(Debug, Default)]
struct Scanned {
    entries: Vec<Candidate>,
    bytes: u64,
    next: usize,
    /// The oldest last use among the entries passed over (being read, or being published).
    kept: Option<u64>,
    evicted: u64,
    freed: u64,
    /// When it was scanned.
    at: u64,
}

impl Scanned {
    /// The part's oldest last use left, as a hint (the scan's time for a part left empty);
    /// `published`: the key being published, not a candidate.
    fn hint(&self, published: Option<&str>) -> u64 {
        let left = self.entries[self.next..]
            .iter()
            .filter(|c| Some(c.key.as_str()) != published)
            .map(|c| c.used)
            .min();
        [left, self.kept, Some(self.at)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.at)
    }
}

/// Every entry of part `part`, oldest first; `published` (the key being published) is counted
/// but is no candidate.
fn scan_part(cache: &Cache, part: usize, published: Option<&str>) -> Scanned {
    let prefix = format!("{:x}", part & 15);
    let mut s = Scanned {
        at: super::meta::now_ms(),
        ..Scanned::default()
    };
    let _ = cache.scan_shards(&|name| name.starts_with(&prefix), &mut |shard, key| {
        let Some((bytes, used)) = store::usage(shard, key) else {
            return;
        };
        s.bytes += bytes;
        if Some(key) == published {
            s.kept = Some(s.kept.map_or(used, |k| k.min(used)));
        }
        s.entries.push(Candidate {
            used,
            key: key.to_string(),
            bytes,
        });
    });
    s.entries.sort();
    s
}

/// How many rounds one publication runs at most (each after another process's publication
/// took the cache over `max_size` again during the previous one).
const ROUNDS: usize = 8;

/// Evict the least recently used entries of the whole cache until its parts' bytes add up to at
/// most `max` (see the module documentation); `published` is never evicted. When another
/// process holds the eviction's lock, the eviction is left to it: every evicting process reads
/// the sizes again once it has let the lock go, and goes on while the cache is over, so what
/// was published meanwhile is never left over `max_size` with nobody evicting.
fn keep_under(cache: &Cache, max: u64, published: &str, done: &mut Published) {
    let Ok(Some(root)) = cache.open_root(false) else {
        return;
    };
    let Ok(dir) = root.open_or_create_dir(EVICT_DIR) else {
        return;
    };
    let path = cache.root().join(EVICT_DIR).join(LOCK);
    for _ in 0..ROUNDS {
        let lock = match keylock::try_take(&dir, LOCK, &path, crate::lockfile::lease()) {
            Ok(Attempt::Locked(lock)) => lock,
            // Held: its holder evicts, and checks again once it has let it go.
            Ok(Attempt::Busy(_)) | Err(_) => return,
        };
        let Ok(root) = root.try_clone() else {
            return;
        };
        let round = Round {
            cache,
            root,
            published,
            total: counters::total_bytes(cache).max(0) as u64,
            parts: std::array::from_fn(|_| None),
        };
        if round.total > max {
            round.run(&dir, max, done);
        }
        drop(lock);
        if counters::total_bytes(cache) <= max as i64 {
            return;
        }
    }
}

/// One eviction, under the eviction's lock.
struct Round<'a> {
    cache: &'a Cache,
    root: Dir,
    published: &'a str,
    /// The cache's bytes, as counted, then less what was evicted.
    total: u64,
    parts: [Option<Scanned>; PARTS as usize],
}

impl Round<'_> {
    /// Evict down to `max` and a batch more ([`BATCH_OF_SHARE`]), count it, write the hints.
    fn run(mut self, dir: &Dir, max: u64, done: &mut Published) {
        let last = self.merge(&oldest::read(dir), max);
        if let Some(part) = last {
            self.batch(part, (part_share(max) as f64 * BATCH_OF_SHARE) as u64);
        }
        self.finish(dir, done);
    }

    /// Merge the parts by age, evicting the oldest entry while over `max`; the last part evicted
    /// from.
    fn merge(&mut self, hints: &oldest::Hints, max: u64) -> Option<usize> {
        // (the next candidate's last use, whether the part is scanned, the part): a part not
        // scanned comes first among equals, so no entry of it may be older.
        let mut heap: BinaryHeap<Reverse<(u64, bool, usize)>> = (0..PARTS as usize)
            .map(|p| Reverse((hints[p], false, p)))
            .collect();
        let mut last = None;
        while self.total > max {
            let Some(Reverse((_, scanned, part))) = heap.pop() else {
                break;
            };
            if !scanned {
                self.parts[part] = Some(self.scan(part));
            } else if self.evict_next(part) {
                last = Some(part);
            }
            if let Some(c) = self.next_candidate(part) {
                heap.push(Reverse((c, true, part)));
            }
        }
        last
    }

    /// Scan `part` under its lock, setting its count to what is there.
    fn scan(&mut self, part: usize) -> Scanned {
        let (cache, published) = (self.cache, self.published);
        in_part(cache, part, |mine| {
            let s = scan_part(cache, part, Some(published));
            let others = counters::read_others(cache, part, mine);
            mine.entries += s.entries.len() as i64 - others.entries;
            mine.size_bytes += s.bytes as i64 - others.size_bytes;
            s
        })
        .unwrap_or_else(|_| scan_part(cache, part, Some(published)))
    }

    /// The last use of `part`'s next candidate (the entry being published is none).
    fn next_candidate(&mut self, part: usize) -> Option<u64> {
        let s = self.parts[part].as_mut()?;
        while let Some(c) = s.entries.get(s.next) {
            if c.key != self.published {
                return Some(c.used);
            }
            s.next += 1;
        }
        None
    }

    /// Evict `part`'s next candidate; whether it was removed.
    fn evict_next(&mut self, part: usize) -> bool {
        let Some(s) = self.parts[part].as_mut() else {
            return false;
        };
        let Some(c) = s.entries.get(s.next).cloned() else {
            return false;
        };
        s.next += 1;
        let root = &self.root;
        let evict = |mine: Option<&mut Counters>| {
            let outcome = root
                .open_dir(&c.key[..2])
                .and_then(|shard| store::evict_unread(&shard, &c.key));
            if let (Ok(Evicted::Removed(b)), Some(mine)) = (&outcome, mine) {
                mine.entries -= 1;
                mine.size_bytes -= *b as i64;
                mine.evictions += 1;
            }
            outcome
        };
        // Counted as it is made; uncounted if the counters cannot be written.
        let outcome =
            in_part(self.cache, part, |mine| evict(Some(mine))).unwrap_or_else(|_| evict(None));
        match outcome {
            Ok(Evicted::Removed(b)) => {
                s.evicted += 1;
                s.freed += b;
                self.total = self.total.saturating_sub(b);
                true
            }
            Ok(Evicted::Gone) => {
                self.total = self.total.saturating_sub(c.bytes);
                false
            }
            Ok(Evicted::Held) | Err(_) => {
                s.kept = Some(s.kept.map_or(c.used, |k| k.min(c.used)));
                false
            }
        }
    }

    /// Evict `part`'s next oldest entries while they fit in `budget` bytes in all.
    fn batch(&mut self, part: usize, budget: u64) {
        let mut spent = 0u64;
        while let Some(bytes) = self.next_candidate(part).and_then(|_| {
            let s = self.parts[part].as_ref()?;
            Some(s.entries[s.next].bytes)
        }) {
            if spent + bytes > budget {
                break;
            }
            spent += bytes;
            self.evict_next(part);
        }
    }

    /// Report what was evicted (each eviction was counted as it was made), and write the hints
    /// of the parts scanned.
    fn finish(self, dir: &Dir, done: &mut Published) {
        let mut hints = Vec::new();
        for (part, s) in self.parts.iter().enumerate() {
            let Some(s) = s else {
                continue;
            };
            done.scanned += 1;
            done.evicted += s.evicted;
            done.freed_bytes += s.freed;
            hints.push((part, s.hint(Some(self.published))));
        }
        oldest::write(dir, &hints);
    }
}

/// Recount every part (after `gc`, `clear` or `verify`, which change the cache without counting):
/// this host's counts take the difference to what is there, and every part's hint is set.
pub(crate) fn recount(cache: &Cache) {
    let mut hints = Vec::new();
    for part in 0..PARTS as usize {
        if let Ok(h) = in_part(cache, part, |mine| recount_part(cache, part, mine)) {
            hints.push((part, h));
        }
    }
    with_evict_dir(cache, |dir| oldest::write(dir, &hints));
}

#[cfg(test)]
mod tests;
