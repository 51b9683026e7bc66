//! What the cache did, counted: hits, misses by reason, remembered failures served, compiles,
//! evictions, bytes read and written, the compile time hits saved — and, for the size limit,
//! the entries and bytes each sixteenth of the cache holds.
//!
//! Counted without a lock on the whole cache, as ccache does: one small file per sixteenth
//! (the key's first hex digit) and per host (`nxcc-v1/counters/<host>-<boot>/<0-f>`), each
//! updated in place under an `flock` — which holds among the processes of one host; another host
//! sharing the directory has files of its own, so no two hosts ever write one file. A file is
//! a fixed list of fixed-width lines (`<name> <value>`), rewritten whole in one write at offset
//! 0, so it never changes length and a reader never sees it torn. `nxcc cache stats` sums every
//! file; `nxcc cache stats --zero` sets the activity counters back to zero (the entries and size
//! stay: they describe what is there, not what happened).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;

use rustix::fs::{AtFlags, OFlags};
use serde::Serialize;

use super::store::Cache;
use crate::fsx::{unique, Dir};

/// The subdirectory of `nxcc-v1` the counters live in.
pub const COUNTERS_DIR: &str = "counters";

/// Why a compile missed: how its key differs from the nearest entry (`super::explain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MissReason {
    /// A model no entry has with these arguments and toolchain (or nothing near at all).
    Model,
    /// The nearest entry was compiled with other arguments.
    Arguments,
    /// The nearest entry was compiled by another toolchain.
    Toolchain,
    /// Anything else: another plan format, a corrupt entry, a failure compiled again.
    Other,
}

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// The counters (summed over files when read; one compile's increments when written).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct Counters {
            $( $(#[$doc])* pub $name: i64, )*
        }

        impl Counters {
            /// Every counter's name, in file order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// (name, value) pairs, in file order.
            pub fn pairs(&self) -> Vec<(&'static str, i64)> {
                vec![$((stringify!($name), self.$name)),*]
            }

            fn get_mut(&mut self, name: &str) -> Option<&mut i64> {
                match name {
                    $(stringify!($name) => Some(&mut self.$name),)*
                    _ => None,
                }
            }
        }
    };
}

counters! {
    /// NEFFs served (from this cache or a secondary one).
    hits,
    /// Of the hits, those found in a secondary cache.
    hits_secondary,
    /// Remembered failed compiles served.
    failures_served,
    /// Misses of a model no entry had with these arguments and toolchain.
    misses_model,
    /// Misses whose nearest entry had other arguments.
    misses_arguments,
    /// Misses whose nearest entry had another toolchain.
    misses_toolchain,
    /// Other misses (plan format, corrupt entry, a failure compiled again).
    misses_other,
    /// Misses refused by a hit-only cache (nothing compiled).
    misses_refused,
    /// Compiles run through the cache.
    compiles,
    /// Of the compiles, those that failed (stored or not).
    compile_failures,
    /// Entries removed (size limit, `gc`, corrupt).
    evictions,
    /// NEFF bytes served.
    bytes_read,
    /// Entry bytes published.
    bytes_written,
    /// The recorded compile time of every entry served, milliseconds.
    time_saved_ms,
    /// Entries held (changed by publications and evictions; recounted by the size keeper).
    entries,
    /// Bytes held, as [`Counters::entries`].
    size_bytes,
}

/// Width of a counter's name in the file.
const NAME_WIDTH: usize = 20;
/// Width of its value.
const VALUE_WIDTH: usize = 20;

impl Counters {
    /// A miss counted for `reason`.
    pub fn miss(reason: MissReason) -> Counters {
        let mut c = Counters::default();
        match reason {
            MissReason::Model => c.misses_model = 1,
            MissReason::Arguments => c.misses_arguments = 1,
            MissReason::Toolchain => c.misses_toolchain = 1,
            MissReason::Other => c.misses_other = 1,
        }
        c
    }

    /// Add `other` to this.
    pub fn add(&mut self, other: &Counters) {
        for (name, v) in other.pairs() {
            if let Some(mine) = self.get_mut(name) {
                *mine = mine.saturating_add(v);
            }
        }
    }

    /// Whether every counter is zero.
    pub(crate) fn is_zero(&self) -> bool {
        self.pairs().iter().all(|(_, v)| *v == 0)
    }

    /// All misses.
    pub fn misses(&self) -> i64 {
        self.misses_model + self.misses_arguments + self.misses_toolchain + self.misses_other
    }

    /// The file's text: one fixed-width line per counter.
    fn text(&self) -> String {
        self.pairs()
            .iter()
            .map(|(n, v)| format!("{n:<NAME_WIDTH$} {v:>VALUE_WIDTH$}\n"))
            .collect()
    }

    /// Read a file's text; lines that do not read are left out.
    fn parse(text: &str) -> Counters {
        let mut c = Counters::default();
        for line in text.lines() {
            let mut w = line.split_whitespace();
            if let (Some(name), Some(v), None) = (w.next(), w.next(), w.next()) {
                if let (Some(slot), Ok(v)) = (c.get_mut(name), v.parse::<i64>()) {
                    *slot = v;
                }
            }
        }
        c
    }
}

/// The shard (0-15) a key is counted in: its first hex digit.
pub(crate) fn shard_of(key: &str) -> usize {
    key.chars().next().and_then(|c| c.to_digit(16)).unwrap_or(0) as usize
}

fn shard_name(shard: usize) -> String {
    format!("{:x}", shard & 15)
}

/// This host's counters directory, made when absent.
fn host_dir(cache: &Cache) -> std::io::Result<Dir> {
    let root = cache
        .open_root(true)?
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    root.open_or_create_dir(COUNTERS_DIR)?
        .open_or_create_dir(super::host::key())
}

/// Open `name` of `dir` for update under an exclusive `flock`, made first if absent
/// ([`create_whole`]).
fn open_locked(dir: &Dir, name: &str) -> std::io::Result<File> {
    let f = match dir.open_file_with(name, OFlags::RDWR, 0) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create_whole(dir, name)?;
            dir.open_file_with(name, OFlags::RDWR, 0)?
        }
        f => f?,
    };
    fs4::fs_std::FileExt::lock_exclusive(&f)?;
    Ok(f)
}

/// Make the file `name` of `dir`, every counter zero, unless it is there: written under a
/// temporary name, then linked to its name. So a file is never seen shorter than it stays — a
/// reader on another host, whose client may keep a file's length for a while, would read a
/// file it first saw empty as empty.
fn create_whole(dir: &Dir, name: &str) -> std::io::Result<()> {
    let tmp = unique::name(&format!(".{name}-"));
    let made = dir
        .create_file(&tmp)
        .and_then(|mut f| f.write_all(Counters::default().text().as_bytes()))
        .and_then(
            |()| match rustix::fs::linkat(dir, tmp.as_str(), dir, name, AtFlags::empty()) {
                Err(rustix::io::Errno::EXIST) => Ok(()),
                linked => linked.map_err(std::io::Error::from),
            },
        );
    let _ = dir.remove_file(&tmp);
    made
}

fn read_all(mut f: &File) -> Counters {
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    Counters::parse(&text)
}

/// Add `delta` to shard `shard`'s counters of this host (best effort: a cache that cannot be
/// written is not counted in).
pub fn add(cache: &Cache, shard: usize, delta: &Counters) -> std::io::Result<()> {
    if delta.is_zero() {
        return Ok(());
    }
    update(cache, shard, &mut |c| c.add(delta))
}

/// Change shard `shard`'s counters of this host under its lock.
pub fn update(
    cache: &Cache,
    shard: usize,
    change: &mut dyn FnMut(&mut Counters),
) -> std::io::Result<()> {
    let dir = host_dir(cache)?;
    let f = open_locked(&dir, &shard_name(shard))?;
    let mut c = read_all(&f);
    change(&mut c);
    f.write_all_at(c.text().as_bytes(), 0)
}

/// Every host's counters of shard `shard` (`None`: every shard), summed.
pub fn read(cache: &Cache, shard: Option<usize>) -> Counters {
    let mut total = Counters::default();
    for_each_file(cache, shard, &mut |dir, name| {
        if let Ok(f) = dir.open_file(name) {
            total.add(&read_all(&f));
        }
    });
    total
}

/// Every host's bytes held, over every shard: what `max_size` is kept against.
pub fn total_bytes(cache: &Cache) -> i64 {
    read(cache, None).size_bytes
}

/// Every other host's counters of shard `shard`, plus `mine` (this host's, as being written).
pub(crate) fn read_others(cache: &Cache, shard: usize, mine: &Counters) -> Counters {
    let mut total = *mine;
    for_each_host_file(cache, Some(shard), &mut |host, dir, name| {
        if host != super::host::key() {
            if let Ok(f) = dir.open_file(name) {
                total.add(&read_all(&f));
            }
        }
    });
    total
}

/// Whether any host has counted shard `shard` yet.
pub fn counted(cache: &Cache, shard: usize) -> bool {
    let mut any = false;
    for_each_file(cache, Some(shard), &mut |dir, name| {
        any = any || dir.stat(name).is_ok();
    });
    any
}

fn for_each_file(cache: &Cache, shard: Option<usize>, each: &mut dyn FnMut(&Dir, &str)) {
    for_each_host_file(cache, shard, &mut |_, dir, name| each(dir, name));
}

fn for_each_host_file(cache: &Cache, shard: Option<usize>, each: &mut dyn FnMut(&str, &Dir, &str)) {
    let Ok(Some(root)) = cache.open_root(false) else {
        return;
    };
    let Ok(top) = root.open_dir(COUNTERS_DIR) else {
        return;
    };
    let Ok(hosts) = top.entries() else {
        return;
    };
    for (host, _) in hosts {
        let Some(host) = host.to_str().map(str::to_string) else {
            continue;
        };
        let Ok(dir) = top.open_dir(&host) else {
            continue;
        };
        let names: Vec<String> = match shard {
            Some(s) => vec![shard_name(s)],
            None => (0..16).map(shard_name).collect(),
        };
        for name in names {
            each(&host, &dir, &name);
        }
    }
}

/// Set every activity counter of every file back to zero (`nxcc cache stats --zero`); the
/// entries and size stay.
pub fn zero(cache: &Cache) {
    for_each_file(cache, None, &mut |dir, name| {
        if let Ok(f) = dir.open_file_with(name, OFlags::RDWR, 0) {
            if fs4::fs_std::FileExt::lock_exclusive(&f).is_ok() {
                let c = read_all(&f);
                let kept = Counters {
                    entries: c.entries,
                    size_bytes: c.size_bytes,
                    ..Counters::default()
                };
                let _ = f.write_all_at(kept.text().as_bytes(), 0);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_across_shards_and_zero_keeps_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let hit = Counters {
            hits: 1,
            bytes_read: 100,
            time_saved_ms: 2500,
            ..Counters::default()
        };
        add(&cache, 3, &hit).unwrap();
        add(&cache, 3, &hit).unwrap();
        add(&cache, 12, &Counters::miss(MissReason::Toolchain)).unwrap();
        add(
            &cache,
            12,
            &Counters {
                entries: 1,
                size_bytes: 4096,
                ..Counters::default()
            },
        )
        .unwrap();
        let all = read(&cache, None);
        assert_eq!(
            (all.hits, all.bytes_read, all.time_saved_ms),
            (2, 200, 5000)
        );
        assert_eq!((all.misses_toolchain, all.misses()), (1, 1));
        assert_eq!(read(&cache, Some(3)).hits, 2);
        assert_eq!(read(&cache, Some(12)).hits, 0);
        // Every file keeps its length.
        let f = dir
            .path()
            .join("nxcc-v1/counters")
            .join(super::super::host::key())
            .join("3");
        let len = std::fs::metadata(&f).unwrap().len();
        assert_eq!(
            len as usize,
            Counters::NAMES.len() * (NAME_WIDTH + VALUE_WIDTH + 2)
        );
        // Each file was made whole under a temporary name, which is gone.
        let mut names: Vec<_> = std::fs::read_dir(f.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["3", "c"]);
        zero(&cache);
        let z = read(&cache, None);
        assert_eq!(
            (z.hits, z.misses(), z.entries, z.size_bytes),
            (0, 0, 1, 4096)
        );
        assert_eq!(std::fs::metadata(&f).unwrap().len(), len);
    }

    #[test]
    fn the_file_reads_back() {
        let c = Counters {
            hits: 7,
            size_bytes: -3,
            ..Counters::default()
        };
        assert_eq!(Counters::parse(&c.text()), c);
        assert_eq!(shard_of("f0"), 15);
        assert_eq!(shard_of("0a"), 0);
    }
}
