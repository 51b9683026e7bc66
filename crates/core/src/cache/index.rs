//! Which entries are near a key: for explaining a miss without reading every entry. Each
//! publication appends its key to three small lists in `nxcc-v1/near/` — the entries of the same
//! model (its blake3), of the same arguments (the args key: arguments, plan and toolchain), and
//! of the same model file name — so `nxcc cache explain` and a compile's miss read three files
//! and a few entries' `meta.json`, whatever the number of entries.
//!
//! A list is `<32 hex>.keys` (a digest of what it groups by), one key per line, appended under
//! an `flock`; past [`COMPACT_AT`] lines it is rewritten with the newest [`KEEP`]. Keys of
//! entries evicted since stay until then: readers skip entries that are gone.

use std::io::{BufRead, Write};

use crate::fsx::{AtomicFile, Dir, Durability};

use super::store::{is_key, Cache};

/// The subdirectory of `nxcc-v1` the lists are in.
pub const NEAR_DIR: &str = "near";
/// Lines that make a list be compacted.
pub const COMPACT_AT: usize = 512;
/// Lines a compaction keeps (the newest, each key once).
pub const KEEP: usize = 256;

/// What entries are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// The model's blake3.
    Model,
    /// The args key.
    Arguments,
    /// The model's file name.
    Name,
}

impl By {
    /// Every grouping, in the order candidates are taken.
    pub const ALL: [By; 3] = [By::Model, By::Arguments, By::Name];

    /// In words, for explanations: `same model`, ...
    pub fn words(self) -> &'static str {
        match self {
            By::Model => "same model",
            By::Arguments => "same arguments",
            By::Name => "same model name",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Arguments => "args",
            By::Name => "name",
        }
    }
}

/// What an entry is listed under: its model's blake3, its args key, its model's file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    /// The model's blake3 (hex).
    pub model: String,
    /// The args key.
    pub args: String,
    /// The model's file name.
    pub name: String,
}

impl Groups {
    fn value(&self, by: By) -> &str {
        match by {
            By::Model => &self.model,
            By::Arguments => &self.args,
            By::Name => &self.name,
        }
    }
}

fn list_name(by: By, value: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(by.tag().as_bytes());
    h.update(&[0]);
    h.update(value.as_bytes());
    format!("{}.keys", &h.finalize().to_hex()[..32])
}

/// List the entry `key` under its groups (best effort: the caller warns on an error).
pub fn record(cache: &Cache, key: &str, groups: &Groups) -> std::io::Result<()> {
    let root = cache
        .open_root(true)?
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    let dir = root.open_or_create_dir(NEAR_DIR)?;
    for by in By::ALL {
        append(&dir, &list_name(by, groups.value(by)), key)?;
    }
    Ok(())
}

fn append(dir: &Dir, name: &str, key: &str) -> std::io::Result<()> {
    let mut f = super::estimate::open_locked(dir, name)?;
    f.write_all(format!("{key}\n").as_bytes())?;
    // Every line is a key and a newline: the length says how many there are.
    if f.metadata()?.len() >= (COMPACT_AT * 65) as u64 {
        let keys = read_keys(dir, name);
        let mut newest: Vec<String> = Vec::new();
        for k in keys.into_iter().rev() {
            if newest.len() < KEEP && !newest.contains(&k) {
                newest.push(k);
            }
        }
        newest.reverse();
        let mut out = AtomicFile::create_in(dir, name)?;
        for k in &newest {
            out.write_all(format!("{k}\n").as_bytes())?;
        }
        out.commit(Durability::Visible)?;
    }
    Ok(())
}

fn read_keys(dir: &Dir, name: &str) -> Vec<String> {
    let Ok(f) = dir.open_file(name) else {
        return Vec::new();
    };
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter(|l| is_key(l))
        .collect()
}

/// The keys listed under each group of `groups`, newest first, at most `per_group` each, each
/// key once (with the first group it was found under), leaving out `except`.
pub fn near(cache: &Cache, groups: &Groups, per_group: usize, except: &str) -> Vec<(By, String)> {
    let Some(dir) = cache
        .open_root(false)
        .ok()
        .flatten()
        .and_then(|r| r.open_dir(NEAR_DIR).ok())
    else {
        return Vec::new();
    };
    let mut out: Vec<(By, String)> = Vec::new();
    for by in By::ALL {
        let mut keys = read_keys(&dir, &list_name(by, groups.value(by)));
        keys.reverse();
        let mut taken = 0;
        for k in keys {
            if taken == per_group {
                break;
            }
            if k != except && !out.iter().any(|(_, o)| *o == k) {
                out.push((by, k));
                taken += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_model_arguments_and_name() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let g = |m: &str, a: &str, n: &str| Groups {
            model: m.into(),
            args: a.into(),
            name: n.into(),
        };
        let k = |c: char| c.to_string().repeat(64);
        record(&cache, &k('a'), &g("m1", "a1", "x.pb")).unwrap();
        record(&cache, &k('b'), &g("m1", "a2", "x.pb")).unwrap();
        record(&cache, &k('c'), &g("m2", "a1", "y.pb")).unwrap();
        let found = near(&cache, &g("m1", "a1", "y.pb"), 8, &k('a'));
        assert_eq!(
            found,
            [(By::Model, k('b')), (By::Arguments, k('c'))],
            "newest first, each once, the key itself left out"
        );
        // Compaction keeps the newest, each once.
        for i in 0..COMPACT_AT {
            let key = format!("{:064x}", i % 300);
            record(&cache, &key, &g("m3", "a3", "z.pb")).unwrap();
        }
        let all = near(&cache, &g("m3", "-", "-"), usize::MAX, "");
        assert_eq!(all.len(), KEEP);
        assert_eq!(all[0].1, format!("{:064x}", (COMPACT_AT - 1) % 300));
    }
}
