//! The memory estimate of a compile (07), used by `parallel-compile` and the daemon to admit
//! compiles within a memory budget: the peak RSS recorded in the cache for the same key; else the
//! peak of the most similar earlier compile — the same arguments (the same args key), the nearest
//! model size; else [`default_estimate`] (4 × the model size + 256 MiB).
//!
//! Every successful compile through the cache appends one line to a small index,
//! `nxcc-v1/estimates/<args key>.jsonl` (`{"key", "model_size", "peak_rss_kb", "at_ms"}`), so a
//! lookup reads one small file instead of scanning every entry; the index outlives evictions
//! (what a compile needed stays true after its NEFF is gone). A file that grows past
//! [`COMPACT_AT`] lines is rewritten with the newest line per key, keeping [`KEEP`].

use std::io::{BufRead, Write};

use rustix::fs::OFlags;

use serde::{Deserialize, Serialize};

use super::key::Key;
use super::store::{Cache, Lookup};
use crate::fsx::{AtomicFile, Dir, Durability};

/// The fixed part of the default estimate.
pub const DEFAULT_BASE_BYTES: u64 = 256 << 20;
/// The default estimate's multiple of the model size.
pub const DEFAULT_MODEL_FACTOR: u64 = 4;
/// Index lines that trigger a compaction.
pub const COMPACT_AT: usize = 512;
/// Lines a compaction keeps (the newest, one per key).
pub const KEEP: usize = 256;

/// The estimate when nothing is known: 4 × the model size + 256 MiB.
pub fn default_estimate(model_size: u64) -> u64 {
    model_size
        .saturating_mul(DEFAULT_MODEL_FACTOR)
        .saturating_add(DEFAULT_BASE_BYTES)
}

/// Where an estimate comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "basis", rename_all = "snake_case")]
pub enum Basis {
    /// The peak recorded for this very key.
    Recorded,
    /// The peak of an earlier compile with the same arguments and this model size.
    Similar { key: String, model_size: u64 },
    /// Nothing known: [`default_estimate`].
    Default,
}

/// A compile's estimated peak memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Estimate {
    pub bytes: u64,
    #[serde(flatten)]
    pub basis: Basis,
}

/// One line of the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub key: String,
    pub model_size: u64,
    pub peak_rss_kb: u64,
    pub at_ms: u64,
}

fn index_name(args_key: &str) -> String {
    format!("{args_key}.jsonl")
}

/// Open the index file `name` of `dir` under an exclusive lock (the file locked is checked to
/// still be the one at the name: a compaction replaces it). A link there is refused.
fn open_locked(dir: &Dir, name: &str) -> std::io::Result<std::fs::File> {
    loop {
        let f = dir.open_file_with(name, OFlags::RDWR | OFlags::APPEND | OFlags::CREATE, 0o666)?;
        fs4::fs_std::FileExt::lock_exclusive(&f)?;
        let held = rustix::fs::fstat(&f)?;
        match dir.stat(name) {
            Ok(now) if now.st_ino == held.st_ino && now.st_dev == held.st_dev => return Ok(f),
            _ => continue,
        }
    }
}

fn read_records(dir: Option<&Dir>, name: &str) -> Vec<Record> {
    let Some(Ok(f)) = dir.map(|d| d.open_file(name)) else {
        return Vec::new();
    };
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// Append a compile's figures to the index of its arguments.
pub fn record(cache: &Cache, args_key: &str, rec: &Record) -> std::io::Result<()> {
    let dir = cache
        .estimates_dir(true)?
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    let name = index_name(args_key);
    let mut f = open_locked(&dir, &name)?;
    let mut line = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
    line.push(b'\n');
    f.write_all(&line)?;
    let records = read_records(Some(&dir), &name);
    if records.len() >= COMPACT_AT {
        let mut newest: Vec<Record> = Vec::new();
        for r in records.into_iter().rev() {
            if newest.len() < KEEP && !newest.iter().any(|n| n.key == r.key) {
                newest.push(r);
            }
        }
        newest.reverse();
        let mut out = AtomicFile::create_in(&dir, &name)?;
        for r in &newest {
            out.write_all(&serde_json::to_vec(r).map_err(std::io::Error::other)?)?;
            out.write_all(b"\n")?;
        }
        out.commit(Durability::Visible)?;
    }
    Ok(())
}

/// The estimate for a compile with this key (see the module documentation). With no cache, the
/// default.
pub fn estimate(cache: Option<&Cache>, key: &Key) -> Estimate {
    let default = Estimate {
        bytes: default_estimate(key.model_size),
        basis: Basis::Default,
    };
    let Some(cache) = cache else {
        return default;
    };
    if let Lookup::Hit(m) = cache.lookup(&key.key) {
        if m.peak_rss_kb > 0 {
            return Estimate {
                bytes: m.peak_rss_kb.saturating_mul(1024),
                basis: Basis::Recorded,
            };
        }
    }
    let dir = cache.estimates_dir(false).ok().flatten();
    let records = read_records(dir.as_ref(), &index_name(&key.args_key));
    if let Some(r) = records
        .iter()
        .rev()
        .find(|r| r.key == key.key && r.peak_rss_kb > 0)
    {
        return Estimate {
            bytes: r.peak_rss_kb.saturating_mul(1024),
            basis: Basis::Recorded,
        };
    }
    let nearest = records
        .iter()
        .filter(|r| r.peak_rss_kb > 0)
        .min_by_key(|r| {
            (
                r.model_size.abs_diff(key.model_size),
                u64::MAX - r.peak_rss_kb,
            )
        });
    match nearest {
        Some(r) => Estimate {
            bytes: r.peak_rss_kb.saturating_mul(1024),
            basis: Basis::Similar {
                key: r.key.clone(),
                model_size: r.model_size,
            },
        },
        None => default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(args: &str, model: &str, size: u64) -> Key {
        Key::from_parts(
            serde_json::json!({ "args": args }),
            &blake3::hash(model.as_bytes()),
            size,
        )
    }

    fn rec(k: &Key, peak_mb: u64) -> Record {
        Record {
            key: k.key.clone(),
            model_size: k.model_size,
            peak_rss_kb: peak_mb * 1024,
            at_ms: 1,
        }
    }

    #[test]
    fn recorded_then_similar_then_default() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let small = key("O2", "small", 1_000);
        let big = key("O2", "big", 100_000);
        let other_args = key("O1", "x", 1_000);
        assert_eq!(
            estimate(Some(&cache), &small),
            Estimate {
                bytes: 4_000 + (256 << 20),
                basis: Basis::Default
            }
        );
        assert_eq!(estimate(None, &small).basis, Basis::Default);
        record(&cache, &small.args_key, &rec(&small, 300)).unwrap();
        record(&cache, &big.args_key, &rec(&big, 900)).unwrap();
        record(&cache, &other_args.args_key, &rec(&other_args, 5)).unwrap();
        assert_eq!(
            estimate(Some(&cache), &small),
            Estimate {
                bytes: 300 << 20,
                basis: Basis::Recorded
            }
        );
        // A new model near the small one's size takes its peak; near the big one, the big one's.
        let near_small = key("O2", "near small", 1_200);
        let e = estimate(Some(&cache), &near_small);
        assert_eq!(e.bytes, 300 << 20);
        assert!(matches!(
            e.basis,
            Basis::Similar {
                model_size: 1_000,
                ..
            }
        ));
        assert_eq!(
            estimate(Some(&cache), &key("O2", "near big", 90_000)).bytes,
            900 << 20
        );
        // Other arguments know nothing of these.
        assert_eq!(
            estimate(Some(&cache), &key("O3", "small", 1_000)).basis,
            Basis::Default
        );
        // The newest record of a key wins.
        record(&cache, &small.args_key, &rec(&small, 310)).unwrap();
        assert_eq!(estimate(Some(&cache), &small).bytes, 310 << 20);
    }

    #[test]
    fn the_index_is_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let mut last = key("a", "m0", 0);
        for i in 0..COMPACT_AT + 10 {
            last = key("a", &format!("m{}", i % 300), i as u64);
            record(&cache, &last.args_key, &rec(&last, 1 + i as u64)).unwrap();
        }
        let dir = cache.estimates_dir(false).unwrap();
        let lines = read_records(dir.as_ref(), &index_name(&last.args_key));
        assert!(lines.len() <= COMPACT_AT, "{}", lines.len());
        assert!(lines.len() >= KEEP.min(300) / 2);
        assert_eq!(estimate(Some(&cache), &last).basis, Basis::Recorded);
    }
}
