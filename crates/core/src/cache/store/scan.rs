//! Walking the cache: every entry, shard by shard (one shard's listing in memory at a time), with
//! what else the walk finds — temporary directories of compiles, half-evicted directories, lock
//! files and anything that is not a plain directory or file ([`Leftover`]) — an entry summarised
//! from the few fields of its `meta.json` ([`Summary`]), and the leftovers nobody uses removed.
//!
//! Names starting with `.` are never entries: stats and verify ignore them; `gc` and `clear`
//! remove the temporary directories nobody is writing (their key's lock is free) and the
//! half-evicted ones.

use rustix::fs::{FileType, Stat};
use serde::Deserialize;

use super::{is_key, is_shard, Cache, EVICT_PREFIX, LOCK_SUFFIX, TMP_PREFIX};
use crate::cache::meta::{Status, FAILED_FILE, META_FILE};
use crate::fsx::dir::is_not_plain;
use crate::fsx::Dir;

/// How an entry found by a scan stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// A NEFF.
    Ok,
    /// A failed compile.
    Failed,
    /// Not usable (the reason).
    Corrupt(String),
}

/// One entry found by a scan: what `stats` and `gc` need, read from `meta.json` (its few
/// fields only) and the entry's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The entry's key, its directory's name.
    pub key: String,
    /// Whether it is good, a failed compile or corrupt.
    pub state: State,
    /// The apparent size of its files.
    pub bytes: u64,
    /// `meta.json`'s `created_ms` (0 when unreadable).
    pub created_ms: u64,
    /// See [`Cache::last_used_ms`].
    pub last_used_ms: u64,
}

/// Something a scan found that is not an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The shard it is in; `None`: directly in `nxcc-v1`.
    pub shard: Option<String>,
    /// Its file name.
    pub name: String,
    /// What it is.
    pub kind: LeftoverKind,
}

/// What a [`Leftover`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftoverKind {
    /// A `.tmp-<key>-...` directory of a compile (running, or dead).
    Temp {
        /// The key being compiled.
        key: String,
    },
    /// A `.evict-...` directory, half removed.
    Evicted,
    /// A `<key>.lock` file.
    Lock {
        /// The key it locks.
        key: String,
    },
    /// A shard, entry or lock that is not a plain directory or file (the reason): evicted by
    /// `gc`, `clear` and `verify`.
    NotPlain(String),
}

impl Leftover {
    /// `ab/<name>` or `<name>`, for messages.
    pub fn display(&self) -> String {
        match &self.shard {
            Some(s) => format!("{s}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The apparent size of the files of a directory (and of its directories), links not followed.
pub(crate) fn dir_bytes(dir: &Dir) -> u64 {
    let Ok(entries) = dir.entries() else {
        return 0;
    };
    entries
        .filter_map(|(name, _)| name.into_string().ok())
        .map(|name| match dir.stat(&name) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                dir.open_dir(&name).map_or(0, |d| dir_bytes(&d))
            }
            Ok(st) => st.st_size as u64,
            Err(_) => 0,
        })
        .sum()
}

/// The modification time in a file's status, ms since the Unix epoch.
pub(super) fn mtime_ms(st: &Stat) -> u64 {
    (st.st_mtime as u64).saturating_mul(1000) + st.st_mtime_nsec / 1_000_000
}

/// The few fields of `meta.json` a scan reads.
#[derive(Deserialize)]
struct MetaHead {
    key: String,
    status: Status,
    #[serde(default)]
    neff: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    created_ms: u64,
    #[serde(default)]
    last_used_ms: u64,
}

impl Cache {
    /// Walk every entry, shard by shard, calling `on_entry` with each one's shard directory and
    /// key; returns what else was found (an absent cache has nothing). Memory is one shard's
    /// listing at a time, never the whole cache.
    pub fn scan(&self, on_entry: &mut dyn FnMut(&Dir, &str)) -> std::io::Result<Vec<Leftover>> {
        self.scan_shards(&|_| true, on_entry)
    }

    /// [`Cache::scan`] over the shards whose name `wanted` accepts (the sixteenth of the cache
    /// whose keys start with one hex digit, for the size keeper).
    pub(crate) fn scan_shards(
        &self,
        wanted: &dyn Fn(&str) -> bool,
        on_entry: &mut dyn FnMut(&Dir, &str),
    ) -> std::io::Result<Vec<Leftover>> {
        let mut left = Vec::new();
        let Some(root) = self.open_root(false)? else {
            return Ok(left);
        };
        let mut shards: Vec<String> = root
            .entries()?
            .filter_map(|(n, _)| n.into_string().ok())
            .collect();
        shards.sort();
        for name in shards {
            if name.starts_with(EVICT_PREFIX) {
                left.push(Leftover {
                    shard: None,
                    name,
                    kind: LeftoverKind::Evicted,
                });
                continue;
            }
            if !is_shard(&name) || !wanted(&name) {
                continue;
            }
            match root.open_dir(&name) {
                Ok(shard) => scan_shard(&shard, &name, on_entry, &mut left),
                Err(e) if is_not_plain(&e) => left.push(Leftover {
                    shard: None,
                    kind: LeftoverKind::NotPlain(format!("the shard {e}")),
                    name,
                }),
                Err(_) => {}
            }
        }
        Ok(left)
    }

    /// [`Cache::scan`], summarising each entry from the few fields of `meta.json` it needs.
    pub fn scan_summaries(
        &self,
        on_entry: &mut dyn FnMut(Summary),
    ) -> std::io::Result<Vec<Leftover>> {
        self.scan(&mut |shard, key| on_entry(summarise(shard, key)))
    }

    /// Remove the leftovers nobody is using: temporary directories whose key lock is free,
    /// half-evicted directories, free lock files of keys without an entry, and whatever is not
    /// a plain directory or file (the link itself). Returns how many were removed.
    pub(crate) fn clean_leftovers(&self, left: &[Leftover]) -> usize {
        let Ok(Some(root)) = self.open_root(false) else {
            return 0;
        };
        let mut n = 0;
        for l in left {
            let dir = match &l.shard {
                None => root.try_clone(),
                Some(s) => root.open_dir(s),
            };
            let Ok(dir) = dir else {
                continue;
            };
            let removed = match &l.kind {
                LeftoverKind::Temp { key } => match self.try_lock_in(&dir, key) {
                    Ok(Some(_lock)) => dir.remove_all(&l.name).is_ok(),
                    _ => false,
                },
                LeftoverKind::Evicted | LeftoverKind::NotPlain(_) => {
                    dir.remove_all(&l.name).is_ok()
                }
                LeftoverKind::Lock { key } => self.remove_free_lock_in(&dir, key),
            };
            if removed {
                n += 1;
            }
        }
        n
    }
}

/// Walk the shard `name` open at `shard`: its entries to `on_entry`, the rest to `left`.
fn scan_shard(
    shard: &Dir,
    name: &str,
    on_entry: &mut dyn FnMut(&Dir, &str),
    left: &mut Vec<Leftover>,
) {
    let Ok(items) = shard.entries() else {
        return;
    };
    let mut items: Vec<(String, FileType)> = items
        .filter_map(|(n, t)| Some((n.into_string().ok()?, t)))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    for (item, ft) in items {
        let kind = match item_kind(shard, &item, ft) {
            Item::Entry => {
                on_entry(shard, &item);
                continue;
            }
            Item::Other => continue,
            Item::Leftover(kind) => kind,
        };
        left.push(Leftover {
            shard: Some(name.to_string()),
            name: item,
            kind,
        });
    }
}

/// What a name in a shard is.
enum Item {
    /// An entry (a directory named by a key).
    Entry,
    /// Something a scan reports.
    Leftover(LeftoverKind),
    /// Nothing of the cache's.
    Other,
}

/// What `item` of `shard` is, its type as listed being `ft`.
fn item_kind(shard: &Dir, item: &str, ft: FileType) -> Item {
    if let Some(rest) = item.strip_prefix(TMP_PREFIX) {
        return Item::Leftover(LeftoverKind::Temp {
            key: rest.chars().take(64).collect(),
        });
    }
    if item.starts_with(EVICT_PREFIX) {
        return Item::Leftover(LeftoverKind::Evicted);
    }
    if let Some(k) = item.strip_suffix(LOCK_SUFFIX).filter(|k| is_key(k)) {
        return Item::Leftover(match shard.file_type(item) {
            Ok(FileType::RegularFile) | Err(_) => LeftoverKind::Lock { key: k.to_string() },
            Ok(t) => LeftoverKind::NotPlain(format!("the lock {item} is not a plain file ({t:?})")),
        });
    }
    if !is_key(item) {
        return Item::Other;
    }
    let ft = match ft {
        FileType::Unknown => shard.file_type(item).unwrap_or(FileType::Unknown),
        t => t,
    };
    if ft == FileType::Directory {
        return Item::Entry;
    }
    Item::Leftover(LeftoverKind::NotPlain(format!(
        "the entry {item} is not a plain directory ({ft:?})"
    )))
}

/// An entry's size and last use, from its directory alone (its files' sizes and `meta.json`'s
/// modification time; `meta.json` is not read): what eviction orders entries by. `None` when
/// the entry is gone.
pub(crate) fn usage(shard: &Dir, key: &str) -> Option<(u64, u64)> {
    let dir = shard.open_dir(key).ok()?;
    let used = dir.stat(META_FILE).map_or(0, |st| mtime_ms(&st));
    Some((dir_bytes(&dir), used))
}

/// An entry's [`Summary`], from the few fields of its `meta.json` and its directory.
fn summarise(shard: &Dir, key: &str) -> Summary {
    let mut s = Summary {
        key: key.to_string(),
        state: State::Corrupt(String::new()),
        bytes: 0,
        created_ms: 0,
        last_used_ms: 0,
    };
    let dir = match shard.open_dir(key) {
        Ok(d) => d,
        Err(e) => {
            s.state = State::Corrupt(e.to_string());
            return s;
        }
    };
    s.bytes = dir_bytes(&dir);
    // One open of meta.json gives its modification time (the last hit) and its fields.
    let read = dir.open_file(META_FILE).and_then(|mut f| {
        let mtime = rustix::fs::fstat(&f).map_or(0, |st| mtime_ms(&st));
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut bytes)?;
        let head: MetaHead = serde_json::from_slice(&bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        Ok((mtime, head))
    });
    let (mtime, head) = match read {
        Ok(r) => r,
        Err(e) => {
            s.state = State::Corrupt(format!("{META_FILE}: {e}"));
            return s;
        }
    };
    s.created_ms = head.created_ms;
    s.last_used_ms = mtime.max(head.last_used_ms);
    s.state = if head.key != key {
        State::Corrupt(format!("{META_FILE} names another key"))
    } else if head.status == Status::Failed {
        match dir.file_type(FAILED_FILE) {
            Ok(FileType::RegularFile) => State::Failed,
            _ => State::Corrupt(format!("{FAILED_FILE} is missing")),
        }
    } else if head.neff.is_none() {
        State::Corrupt(format!("{META_FILE} records no NEFF"))
    } else {
        State::Ok
    };
    s
}
