//! The on-disk cache: `DIR/nxcc-v1/<2 hex>/<key>/` holding `model.neff`, `meta.json` and
//! `log.txt` (or, for a failed compile, `failed.json`, `meta.json` and `log.txt`).
//!
//! Trust: the cache believes nothing it did not make.
//! - The directory is checked before use by nxcc's one trust rule ([`crate::fsx::trust`], ssh's
//!   `StrictModes`; [`Cache::check`]): `DIR` must be owned by the user or root and not writable
//!   by group or others unless sticky, and is reached through no link another user could have
//!   placed; `nxcc-v1` must be a real directory, owned by the user or root, writable by nobody
//!   else. Otherwise nothing in it is used, and the error says what to fix ([`UnsafeDir`]).
//! - Below `nxcc-v1` every entry is reached through directory descriptors ([`crate::fsx::Dir`]),
//!   one name at a time, following no symbolic link: a shard, entry, file, lock or estimate
//!   index that is a link (or a FIFO, a device, a file where a directory belongs) is never
//!   opened through; entries and shards that are not plain are evicted (the link itself
//!   removed), so nothing outside the cache is ever read, written or removed.
//! - Directories are created with the user's umask, or narrower: an entry is made in a `0700`
//!   temporary directory and keeps that mode.
//!
//! Consistency rules, for any number of processes sharing the directory:
//! - an entry is published by renaming a fully written temporary directory
//!   (`<2 hex>/.tmp-<key>-...`, [`Cache::begin`]) to its name, so a reader sees a whole entry or
//!   none;
//! - an entry is removed by renaming it away first (`<2 hex>/.evict-<key>-...`) and deleting it
//!   then, so no half-deleted entry is ever visible;
//! - one compile per key at a time: an exclusive `flock` on `<2 hex>/<key>.lock`, which the kernel
//!   releases when its holder dies (no stale locks). A locker checks after locking that the file
//!   it locked is still the one at the path, so maintenance may delete lock files it holds;
//! - a reader verifies the NEFF against the blake3 recorded in `meta.json` as it copies it out;
//!   a mismatch makes the entry corrupt, and the caller evicts it.
//!
//! Names starting with `.` are never entries: stats and verify ignore them; `gc` and `clear`
//! remove the temporary directories nobody is writing (their key's lock is free) and the
//! half-evicted ones. [`Cache::scan`] streams the entries, one shard open at a time, so its
//! memory does not grow with their number.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, OFlags, Stat};
use serde::Deserialize;

use super::meta::{Failed, Meta, NeffInfo, FAILED_FILE, META_FILE, NEFF_FILE};
use crate::fsx::dir::is_not_plain;
use crate::fsx::trust::{self, Subject, Trusted};
use crate::fsx::{unique, AtomicFile, Dir, Durability};
use crate::run::process::Cancel;

/// The subdirectory of the cache directory nxcc's entries live in.
pub const LAYOUT_DIR: &str = "nxcc-v1";
/// The subdirectory (of [`LAYOUT_DIR`]) of the memory-estimate index.
pub const ESTIMATES_DIR: &str = "estimates";
const TMP_PREFIX: &str = ".tmp-";
const EVICT_PREFIX: &str = ".evict-";
const LOCK_SUFFIX: &str = ".lock";

/// A compile cache rooted at a directory (nothing is created until something is written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    dir: PathBuf,
    root: PathBuf,
}

/// A cache directory that must not be used, and what to do about it (the trust rule's refusal,
/// [`crate::fsx::trust`]).
pub type UnsafeDir = crate::fsx::Untrusted;

/// The cache directory, in the trust rule's messages.
pub const CACHE_DIR: Subject = Subject {
    noun: "the cache directory",
    file: "the cache's file",
    instead: "use a cache directory of your own (--cache_dir)",
};

/// What the cache holds for a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// No entry for the key (or its directory cannot be opened).
    Absent,
    /// A successful compile.
    Hit(Box<Meta>),
    /// A failed compile.
    Failed(Box<Meta>, Failed),
    /// An entry that cannot be used (the reason).
    Corrupt(String),
}

/// Why a hit could not be served.
#[derive(Debug)]
pub enum ServeError {
    /// The entry's NEFF is missing or does not match its recorded blake3.
    Corrupt(String),
    /// The output could not be written.
    Output(std::io::Error),
}

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

pub use super::keylock::KeyLock;
use super::keylock::{self, Hold};

/// A temporary entry being written ([`Cache::begin`]): a fresh `0700` directory only this
/// compile knows, published by [`Pending::commit`], removed if dropped.
#[derive(Debug)]
pub struct Pending {
    shard: Dir,
    name: String,
    dir: Dir,
    path: PathBuf,
    key: String,
    entry: PathBuf,
    done: bool,
}

/// Whether `s` looks like a key (64 lower-case hex digits).
pub fn is_key(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_shard(s: &str) -> bool {
    s.len() == 2
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn unsafe_dir(path: &Path, problem: String, fix: String) -> std::io::Error {
    UnsafeDir {
        noun: CACHE_DIR.noun,
        path: path.to_path_buf(),
        problem,
        fix,
    }
    .into()
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

fn mtime_ms(st: &Stat) -> u64 {
    (st.st_mtime as u64).saturating_mul(1000) + st.st_mtime_nsec / 1_000_000
}

/// The few fields of `meta.json` a scan reads.
#[derive(Deserialize)]
struct MetaHead {
    key: String,
    status: String,
    #[serde(default)]
    neff: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    created_ms: u64,
    #[serde(default)]
    last_used_ms: u64,
}

fn read_json_in<T: for<'de> Deserialize<'de>>(dir: &Dir, name: &str) -> std::io::Result<T> {
    let bytes = dir.read(name)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

impl Cache {
    /// The cache in `dir` (its entries under `dir/nxcc-v1`).
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        let dir = dir.into();
        let root = dir.join(LAYOUT_DIR);
        Cache { dir, root }
    }

    /// The directory given.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `DIR/nxcc-v1`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the entry of `key` is (or would be).
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        self.root.join(shard_of(key)).join(key)
    }

    /// The lock file of `key`.
    pub fn lock_path(&self, key: &str) -> PathBuf {
        self.root
            .join(shard_of(key))
            .join(format!("{key}{LOCK_SUFFIX}"))
    }

    /// Whether the cache directory may be used (see the module documentation); an absent one
    /// may. Other errors (a directory that cannot be read) are left to the operations.
    pub fn check(&self) -> Result<(), UnsafeDir> {
        match self.open_root(false) {
            Err(e) => match e.into_inner().map(|i| i.downcast::<UnsafeDir>()) {
                Some(Ok(u)) => Err(*u),
                _ => Ok(()),
            },
            Ok(_) => Ok(()),
        }
    }

    /// `nxcc-v1`, checked; `None` if absent and not to be created.
    pub fn open_root(&self, create: bool) -> std::io::Result<Option<Dir>> {
        let top = match Trusted::open(&self.dir, CACHE_DIR, true) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                std::fs::create_dir_all(&self.dir)?;
                Trusted::open(&self.dir, CACHE_DIR, true)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            r => r?,
        };
        let top = top.dir();
        let root = match top.open_dir(LAYOUT_DIR) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                top.open_or_create_dir(LAYOUT_DIR)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if is_not_plain(&e) => {
                return Err(unsafe_dir(
                    &self.root,
                    format!("is not a directory ({e})"),
                    format!(
                        "remove it (rm {}); nxcc makes it again",
                        self.root.display()
                    ),
                ))
            }
            r => r,
        }?;
        trust::check_dir(&root.own_stat()?, &CACHE_DIR, &self.root, false)?;
        Ok(Some(root))
    }

    /// The shard of `key` in `root`; `None` if absent and not to be created.
    fn shard(&self, root: &Dir, key: &str, create: bool) -> std::io::Result<Option<Dir>> {
        subdir(root, shard_of(key), create)
    }

    /// The shard of `key`, created (with `nxcc-v1`) if absent.
    fn made_shard(&self, key: &str) -> std::io::Result<Dir> {
        let absent = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let root = self.open_root(true)?.ok_or_else(absent)?;
        self.shard(&root, key, true)?.ok_or_else(absent)
    }

    /// The shard and entry directories of `key`, if there is an entry.
    fn open_entry(&self, key: &str) -> std::io::Result<Option<(Dir, Dir)>> {
        let Some(root) = self.open_root(false)? else {
            return Ok(None);
        };
        let Some(shard) = self.shard(&root, key, false)? else {
            return Ok(None);
        };
        match shard.open_dir(key) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            r => r.map(|d| Some((shard, d))),
        }
    }

    /// What the cache holds for `key` (reads `meta.json` and `failed.json` only).
    pub fn lookup(&self, key: &str) -> Lookup {
        let dir = match self.open_entry(key) {
            Ok(Some((_, d))) => d,
            Ok(None) => return Lookup::Absent,
            Err(e) if is_not_plain(&e) => return Lookup::Corrupt(e.to_string()),
            Err(_) => return Lookup::Absent,
        };
        lookup_in(&dir, key)
    }

    /// Copy the entry's NEFF to `output` (a reflink when the file system can, else a copy; never
    /// a hard link, the user may modify the output), verifying its blake3 on the way: written to
    /// an [`AtomicFile`] at `output`, committed only when it matches.
    pub fn serve(&self, key: &str, neff: &NeffInfo, output: &Path) -> Result<(), ServeError> {
        let unreadable = |e: std::io::Error| ServeError::Corrupt(format!("{NEFF_FILE}: {e}"));
        let entry = match self.open_entry(key) {
            Ok(Some((_, d))) => d,
            Ok(None) => return Err(ServeError::Corrupt("the entry is gone".into())),
            Err(e) => return Err(unreadable(e)),
        };
        // Read under a shared lock on meta.json: eviction leaves an entry being read alone
        // ([`evict_unread`]). Once the NEFF is open, its bytes stay readable whatever happens.
        let _reading = entry
            .open_file(META_FILE)
            .ok()
            .filter(|f| fs4::fs_std::FileExt::lock_shared(f).is_ok());
        let src = entry.open_file(NEFF_FILE).map_err(unreadable)?;
        // As a compile would, create the output's directory.
        if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(ServeError::Output)?;
        }
        let dst = AtomicFile::create(output).map_err(ServeError::Output)?;
        match copy_hashing(&src, dst.file()) {
            Ok((hash, size)) if hash.to_hex().as_str() == neff.blake3 && size == neff.size => {}
            Ok(_) => {
                return Err(ServeError::Corrupt(format!(
                    "{NEFF_FILE} does not match its recorded blake3"
                )))
            }
            Err(CopyError::Read(e)) => return Err(unreadable(e)),
            Err(CopyError::Write(e)) => return Err(ServeError::Output(e)),
        }
        dst.commit(Durability::Visible).map_err(ServeError::Output)
    }

    /// The apparent size of the entry of `key`, if there is one.
    pub fn entry_bytes(&self, key: &str) -> Option<u64> {
        match self.open_entry(key) {
            Ok(Some((_, d))) => Some(dir_bytes(&d)),
            _ => None,
        }
    }

    /// Record a use of the entry: its `meta.json`'s modification time becomes now (a metadata
    /// update, no rewrite). Best effort: a read-only cache or an entry evicted meanwhile is left
    /// alone.
    pub fn touch(&self, key: &str) {
        if let Ok(Some((_, d))) = self.open_entry(key) {
            if let Ok(f) = d.open_file_with(META_FILE, OFlags::WRONLY, 0) {
                let _ = f.set_modified(std::time::SystemTime::now());
            }
        }
    }

    /// When the entry was last used, ms since the Unix epoch: the later of `meta.json`'s
    /// `last_used_ms` (its creation) and the file's modification time (its last hit).
    pub fn last_used_ms(&self, key: &str, meta: Option<&Meta>) -> u64 {
        let mtime = match self.open_entry(key) {
            Ok(Some((_, d))) => d.stat(META_FILE).map_or(0, |st| mtime_ms(&st)),
            _ => 0,
        };
        mtime.max(meta.map_or(0, |m| m.last_used_ms))
    }

    /// Take the lock of `key` for a compile ([`super::keylock`]: across processes and hosts,
    /// its lease refreshed while held), waiting for another holder; `on_wait` is told once who
    /// holds it. `Ok(None)` if `cancel` was cancelled while waiting.
    pub fn lock(
        &self,
        key: &str,
        cancel: Option<&Cancel>,
        on_wait: &mut dyn FnMut(&str),
    ) -> std::io::Result<Option<KeyLock>> {
        let name = format!("{key}{LOCK_SUFFIX}");
        let shard = self.made_shard(key)?;
        keylock::take(
            &shard,
            &name,
            &self.lock_path(key),
            Hold::Long,
            cancel,
            on_wait,
        )
    }

    /// Take the lock of `key` for a moment if it is free. Something at the lock's name that is
    /// not a plain file (a link) is removed first — the link, never its target — and said in
    /// [`KeyLock::replaced`].
    pub fn try_lock(&self, key: &str) -> std::io::Result<Option<KeyLock>> {
        self.try_lock_in(&self.made_shard(key)?, key)
    }

    fn try_lock_in(&self, shard: &Dir, key: &str) -> std::io::Result<Option<KeyLock>> {
        let name = format!("{key}{LOCK_SUFFIX}");
        let lease = crate::lockfile::lease();
        Ok(
            match keylock::try_take(shard, &name, &self.lock_path(key), lease)? {
                keylock::Attempt::Locked(l) => Some(l),
                keylock::Attempt::Busy(_) => None,
            },
        )
    }

    /// A fresh temporary entry for `key`, to be filled and then [`Pending::commit`]ted. The
    /// caller holds the key's lock.
    pub fn begin(&self, key: &str) -> std::io::Result<Pending> {
        let shard = self.made_shard(key)?;
        let name = unique::name(&format!("{TMP_PREFIX}{key}-"));
        shard.create_dir(&name, Some(0o700))?;
        let dir = shard.open_dir(&name)?;
        Ok(Pending {
            path: self.root.join(shard_of(key)).join(&name),
            shard,
            name,
            dir,
            key: key.to_string(),
            entry: self.entry_dir(key),
            done: false,
        })
    }

    /// A fresh temporary entry of `key` in this cache holding a copy of `from`'s entry of the
    /// same key: its `meta.json`, `log.txt` and `failed.json` as they are, its NEFF checked
    /// against the blake3 and size `meta` (read from `from`) records — a NEFF that does not
    /// match is an error and nothing is kept. Everything is read without following a link.
    pub fn begin_copy(&self, from: &Cache, key: &str, meta: &Meta) -> std::io::Result<Pending> {
        let src = from
            .open_entry(key)?
            .map(|(_, d)| d)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        let pending = self.begin(key)?;
        let tmp = pending.dir();
        if let Some(neff) = &meta.neff {
            let from_file = src.open_file(NEFF_FILE)?;
            let to_file = tmp.open_file_with(
                NEFF_FILE,
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
                0o666,
            )?;
            match copy_hashing(&from_file, &to_file) {
                Ok((h, n)) if h.to_hex().as_str() == neff.blake3 && n == neff.size => {}
                Ok(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{NEFF_FILE} does not match its recorded blake3"),
                    ))
                }
                Err(CopyError::Read(e) | CopyError::Write(e)) => return Err(e),
            }
        }
        for name in [META_FILE, super::meta::LOG_FILE, FAILED_FILE] {
            match src.read(name) {
                Ok(bytes) => tmp.create_file(name)?.write_all(&bytes)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && name != META_FILE => {}
                Err(e) => return Err(e),
            }
        }
        Ok(pending)
    }

    /// Publish an entry for `key` in one go: `write` fills a fresh temporary directory, which
    /// then replaces whatever entry the key had. The caller holds the key's lock.
    pub fn publish(
        &self,
        key: &str,
        write: &dyn Fn(&Dir) -> std::io::Result<()>,
    ) -> std::io::Result<PathBuf> {
        let pending = self.begin(key)?;
        write(pending.dir())?;
        pending.commit()
    }

    /// Remove the entry of `key`: renamed away, then deleted; a shard that is not a plain
    /// directory is removed itself (the link, never its target). `false` if there was none.
    pub fn evict(&self, key: &str) -> std::io::Result<bool> {
        let Some(root) = self.open_root(false)? else {
            return Ok(false);
        };
        match self.shard(&root, key, false) {
            Ok(Some(shard)) => evict_in(&shard, key),
            Ok(None) => Ok(false),
            Err(e) if is_not_plain(&e) => evict_in(&root, shard_of(key)),
            Err(e) => Err(e),
        }
    }

    /// Walk every entry, shard by shard, calling `on_entry` with each one's shard directory and
    /// key; returns what else was found (an absent cache has nothing). Memory is one shard's
    /// listing at a time, never the whole cache.
    pub fn scan(&self, on_entry: &mut dyn FnMut(&Dir, &str)) -> std::io::Result<Vec<Leftover>> {
        self.scan_shards(&|_| true, on_entry)
    }

    /// [`Cache::scan`] over the shards whose name `wanted` accepts (the sixteenth of the cache
    /// whose keys start with one hex digit, for the size keeper).
    pub fn scan_shards(
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
            let shard = match root.open_dir(&name) {
                Ok(d) => d,
                Err(e) if is_not_plain(&e) => {
                    left.push(Leftover {
                        shard: None,
                        kind: LeftoverKind::NotPlain(format!("the shard {e}")),
                        name,
                    });
                    continue;
                }
                Err(_) => continue,
            };
            let Ok(items) = shard.entries() else {
                continue;
            };
            let mut items: Vec<(String, FileType)> = items
                .filter_map(|(n, t)| Some((n.into_string().ok()?, t)))
                .collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            for (item, ft) in items {
                let kind = if let Some(rest) = item.strip_prefix(TMP_PREFIX) {
                    LeftoverKind::Temp {
                        key: rest.chars().take(64).collect(),
                    }
                } else if item.starts_with(EVICT_PREFIX) {
                    LeftoverKind::Evicted
                } else if let Some(k) = item.strip_suffix(LOCK_SUFFIX).filter(|k| is_key(k)) {
                    match shard.file_type(&item) {
                        Ok(FileType::RegularFile) | Err(_) => {
                            LeftoverKind::Lock { key: k.to_string() }
                        }
                        Ok(t) => LeftoverKind::NotPlain(format!(
                            "the lock {item} is not a plain file ({t:?})"
                        )),
                    }
                } else if is_key(&item) {
                    let ft = match ft {
                        FileType::Unknown => shard.file_type(&item).unwrap_or(FileType::Unknown),
                        t => t,
                    };
                    if ft == FileType::Directory {
                        on_entry(&shard, &item);
                        continue;
                    }
                    LeftoverKind::NotPlain(format!(
                        "the entry {item} is not a plain directory ({ft:?})"
                    ))
                } else {
                    continue;
                };
                left.push(Leftover {
                    shard: Some(name.clone()),
                    name: item,
                    kind,
                });
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
    pub fn clean_leftovers(&self, left: &[Leftover]) -> usize {
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

    /// Remove the lock file of `key` once its entry is gone (an eviction), unless a compile
    /// holds it. `true` if it was removed.
    pub fn remove_free_lock(&self, key: &str) -> bool {
        let Ok(Some(root)) = self.open_root(false) else {
            return false;
        };
        match self.shard(&root, key, false) {
            Ok(Some(shard)) => self.remove_free_lock_in(&shard, key),
            _ => false,
        }
    }

    /// [`Cache::remove_free_lock`] in the key's shard: the lock is taken first, so that no
    /// compile holding or waiting for it loses it to the removal.
    fn remove_free_lock_in(&self, shard: &Dir, key: &str) -> bool {
        if shard.stat(key).is_ok() {
            return false;
        }
        match self.try_lock_in(shard, key) {
            Ok(Some(lock)) => {
                let ok = shard.remove_file(&format!("{key}{LOCK_SUFFIX}")).is_ok();
                drop(lock);
                ok
            }
            _ => false,
        }
    }

    /// The estimate index directory, `nxcc-v1/estimates` (created when `create`).
    pub fn estimates_dir(&self, create: bool) -> std::io::Result<Option<Dir>> {
        match self.open_root(create)? {
            Some(root) => subdir(&root, ESTIMATES_DIR, create),
            None => Ok(None),
        }
    }

    /// Remove the estimate index (renamed away, then deleted; a link is removed, not followed).
    pub fn clear_estimates(&self) -> std::io::Result<bool> {
        let Some(root) = self.open_root(false)? else {
            return Ok(false);
        };
        let away = unique::name(&format!("{EVICT_PREFIX}{ESTIMATES_DIR}-"));
        match root.rename(ESTIMATES_DIR, &root, &away) {
            Ok(()) => root.remove_all(&away).map(|_| true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The directory `name` of `dir` (created when `create`); `None` if absent.
fn subdir(dir: &Dir, name: &str, create: bool) -> std::io::Result<Option<Dir>> {
    let r = if create {
        dir.open_or_create_dir(name)
    } else {
        dir.open_dir(name)
    };
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        r => r.map(Some),
    }
}

fn shard_of(key: &str) -> &str {
    &key[..2.min(key.len())]
}

/// Rename `name` of `dir` away, then delete it. `false` if it was not there.
pub(crate) fn evict_in(dir: &Dir, name: &str) -> std::io::Result<bool> {
    let away = unique::name(&format!("{EVICT_PREFIX}{name}-"));
    match dir.rename(name, dir, &away) {
        Ok(()) => {
            dir.remove_all(&away)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// What [`evict_unread`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evicted {
    /// The entry was removed; its apparent size.
    Removed(u64),
    /// A reader holds it (a shared `flock` on its `meta.json`): left alone.
    Held,
    /// It was not there any more.
    Gone,
}

/// Remove the entry `key` of `shard` unless a process of this host is reading it: an exclusive
/// `flock` on its `meta.json`, not waited for, is held while it is renamed away ([`Cache::serve`]
/// reads under a shared one), so an entry is never removed under its reader.
pub fn evict_unread(shard: &Dir, key: &str) -> std::io::Result<Evicted> {
    let dir = match shard.open_dir(key) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Evicted::Gone),
        Err(e) if is_not_plain(&e) => {
            return evict_in(shard, key).map(|_| Evicted::Removed(0));
        }
        Err(e) => return Err(e),
    };
    let bytes = dir_bytes(&dir);
    let _held = match dir.open_file(META_FILE) {
        Ok(f) => {
            if !fs4::fs_std::FileExt::try_lock_exclusive(&f)? {
                return Ok(Evicted::Held);
            }
            Some(f)
        }
        Err(_) => None,
    };
    // The entry at the name must still be the one locked (it may have been replaced).
    let (now, then) = (shard.stat(key)?, dir.own_stat()?);
    if now.st_ino != then.st_ino || now.st_dev != then.st_dev {
        return Ok(Evicted::Held);
    }
    Ok(if evict_in(shard, key)? {
        Evicted::Removed(bytes)
    } else {
        Evicted::Gone
    })
}

pub(crate) fn lookup_in(dir: &Dir, key: &str) -> Lookup {
    let meta: Meta = match read_json_in(dir, META_FILE) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Lookup::Corrupt(format!("{META_FILE} is missing"));
        }
        Err(e) => return Lookup::Corrupt(format!("{META_FILE} is unreadable: {e}")),
    };
    if meta.key != key {
        return Lookup::Corrupt(format!("{META_FILE} names another key"));
    }
    if meta.status == "failed" {
        return match read_json_in::<Failed>(dir, FAILED_FILE) {
            Ok(f) => Lookup::Failed(Box::new(meta), f),
            Err(e) => Lookup::Corrupt(format!("{FAILED_FILE} is unreadable: {e}")),
        };
    }
    if meta.neff.is_none() {
        return Lookup::Corrupt(format!("{META_FILE} records no NEFF"));
    }
    Lookup::Hit(Box::new(meta))
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
pub(crate) fn summarise(shard: &Dir, key: &str) -> Summary {
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
    } else if head.status == "failed" {
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

impl Pending {
    /// The temporary directory's path (for a process that writes into it by name: the worker).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary directory.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Publish the entry: the temporary directory replaces whatever entry the key had. Returns
    /// the entry's path.
    pub fn commit(mut self) -> std::io::Result<PathBuf> {
        for attempt in 0..3 {
            if self.shard.stat(&self.key).is_ok() {
                evict_in(&self.shard, &self.key)?;
            }
            match self.shard.rename(&self.name, &self.shard, &self.key) {
                Ok(()) => {
                    self.done = true;
                    return Ok(self.entry.clone());
                }
                Err(_) if attempt < 2 && self.shard.stat(&self.key).is_ok() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("the entry kept reappearing"))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.shard.remove_all(&self.name);
        }
    }
}

enum CopyError {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// `FICLONE` (`_IOW(0x94, 9, int)`): share the source's extents (btrfs, XFS, ...).
const FICLONE: libc::c_ulong = 0x4004_9409;

/// Copy `src` into `dst` and return the blake3 and size of what `dst` now holds. A reflink when
/// the file system can, else an in-kernel copy (`copy_file_range`); then `dst` is read back and
/// hashed ([`super::hashing::hash_file_into`]'s ways: mapped on every core when large). Where neither
/// works, a copy through this process, hashing what it writes. Either way the bytes hashed are
/// the bytes written.
fn copy_hashing(src: &File, dst: &File) -> Result<(blake3::Hash, u64), CopyError> {
    // SAFETY: ioctl(FICLONE) with two descriptors we own; on failure nothing was changed.
    let cloned = unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE as _, src.as_raw_fd()) } == 0;
    if cloned || copy_in_kernel(src, dst)? {
        return hash_back(dst).map_err(CopyError::Write);
    }
    let mut h = blake3::Hasher::new();
    let mut w = dst;
    let mut write_error: Option<std::io::Error> = None;
    let read = super::chunks::for_each_chunk(src, &mut |c| {
        h.update(c);
        w.write_all(c).map_err(|e| {
            let kind = e.kind();
            write_error = Some(e);
            std::io::Error::from(kind)
        })
    });
    match (read, write_error) {
        (_, Some(e)) => Err(CopyError::Write(e)),
        (Err(e), None) => Err(CopyError::Read(e)),
        (Ok(n), None) => Ok((h.finalize(), n)),
    }
}

/// Copy all of `src` (from its position) to `dst` with `copy_file_range`. `Ok(false)` when the
/// kernel cannot do it for these files and nothing was copied (the caller copies itself).
fn copy_in_kernel(src: &File, dst: &File) -> Result<bool, CopyError> {
    let mut copied = 0u64;
    loop {
        // SAFETY: copy_file_range between two descriptors we own, at their file positions.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                std::ptr::null_mut(),
                dst.as_raw_fd(),
                std::ptr::null_mut(),
                1 << 30,
                0,
            )
        };
        if n > 0 {
            copied += n as u64;
            continue;
        }
        if n == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL | libc::EBADF)
                if copied == 0 =>
            {
                return Ok(false)
            }
            _ => return Err(CopyError::Write(e)),
        }
    }
}

/// The blake3 and size of what `dst` holds, read back from its start.
fn hash_back(dst: &File) -> std::io::Result<(blake3::Hash, u64)> {
    let mut h = blake3::Hasher::new();
    let len = dst.metadata()?.len();
    if len >= super::hashing::MAP_FROM {
        if let Some(r) = super::hashing::hash_mapped_into(dst, Path::new("the output"), &mut h) {
            return r.map(|n| (h.finalize(), n));
        }
    }
    let mut d = dst;
    d.seek(std::io::SeekFrom::Start(0))?;
    let n = super::hashing::hash_read_into(dst, &mut h)?;
    Ok((h.finalize(), n))
}

/// The blake3 and size of a plain file of a directory (opened without following a link).
pub fn hash_in(dir: &Dir, name: &str) -> std::io::Result<(blake3::Hash, u64)> {
    let f = dir.open_file(name)?;
    let mut h = blake3::Hasher::new();
    let n = super::chunks::for_each_chunk(&f, &mut |c| {
        h.update(c);
        Ok(())
    })?;
    Ok((h.finalize(), n))
}

/// Write JSON to a new file of a directory (pretty, newline-terminated).
pub fn write_json_in<T: serde::Serialize>(dir: &Dir, name: &str, value: &T) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    text.push(b'\n');
    dir.create_file(name)?.write_all(&text)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::meta;

    fn meta(key: &str, neff: Option<NeffInfo>) -> Meta {
        Meta {
            format: meta::META_FORMAT,
            key: key.into(),
            args_key: "a".repeat(64),
            inputs: serde_json::json!({}),
            model_path: "/m.pb".into(),
            model_blake3: "b".repeat(64),
            model_size: 10,
            model_digest_kind: None,
            model_hlo_metadata: None,
            status: if neff.is_some() { "ok" } else { "failed" }.into(),
            exit_status: if neff.is_some() { 0 } else { 70 },
            neff,
            engine: "pipeline".into(),
            jobs: Vec::new(),
            peak_rss_kb: 1000,
            wall_s: 0.5,
            nxcc_version: crate::VERSION.into(),
            created: "2026-01-01T00:00:00Z".into(),
            created_ms: 1,
            last_used_ms: 1,
        }
    }

    pub(crate) fn put(cache: &Cache, key: &str, neff: &[u8]) {
        let info = NeffInfo {
            blake3: blake3::hash(neff).to_hex().to_string(),
            size: neff.len() as u64,
        };
        let m = meta(key, Some(info));
        cache
            .publish(key, &|d| {
                d.create_file(NEFF_FILE)?.write_all(neff)?;
                write_json_in(d, META_FILE, &m)
            })
            .unwrap();
    }

    fn summaries(cache: &Cache) -> (Vec<Summary>, Vec<Leftover>) {
        let mut v = Vec::new();
        let left = cache.scan_summaries(&mut |s| v.push(s)).unwrap();
        (v, left)
    }

    #[test]
    fn publish_lookup_serve_and_evict() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().join("c"));
        let key = "ab".repeat(32);
        assert_eq!(cache.lookup(&key), Lookup::Absent);
        put(&cache, &key, b"neff bytes");
        assert!(cache
            .entry_dir(&key)
            .starts_with(dir.path().join("c/nxcc-v1/ab")));
        let Lookup::Hit(m) = cache.lookup(&key) else {
            panic!()
        };
        let out = dir.path().join("out.neff");
        cache.serve(&key, m.neff.as_ref().unwrap(), &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"neff bytes");
        // The output is a copy: changing it leaves the entry alone.
        std::fs::write(&out, b"changed").unwrap();
        assert_eq!(
            std::fs::read(cache.entry_dir(&key).join(NEFF_FILE)).unwrap(),
            b"neff bytes"
        );
        // A corrupted NEFF is detected; the output is left as it was.
        std::fs::write(cache.entry_dir(&key).join(NEFF_FILE), b"neff bytez").unwrap();
        let e = cache
            .serve(&key, m.neff.as_ref().unwrap(), &out)
            .unwrap_err();
        assert!(matches!(e, ServeError::Corrupt(_)));
        assert_eq!(std::fs::read(&out).unwrap(), b"changed");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            2,
            "no temp left"
        );
        assert!(cache.evict(&key).unwrap());
        assert!(!cache.evict(&key).unwrap());
        assert_eq!(cache.lookup(&key), Lookup::Absent);
        let (entries, left) = summaries(&cache);
        assert!(entries.is_empty() && left.is_empty(), "{left:?}");
    }

    #[test]
    fn publishing_replaces_an_entry_and_touch_records_use() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let key = "cd".repeat(32);
        put(&cache, &key, b"one");
        put(&cache, &key, b"two");
        let Lookup::Hit(m) = cache.lookup(&key) else {
            panic!()
        };
        assert_eq!(m.neff.as_ref().unwrap().size, 3);
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(cache.entry_dir(&key).join(META_FILE))
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(cache.last_used_ms(&key, Some(&m)), 1_000_000_000);
        cache.touch(&key);
        assert!(cache.last_used_ms(&key, Some(&m)) >= meta::now_ms() - 1000);
        let (entries, _) = summaries(&cache);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].state, State::Ok);
        assert!(entries[0].bytes > 3);
        assert!(entries[0].last_used_ms >= meta::now_ms() - 1000);
    }

    #[test]
    fn broken_entries_are_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let key = "ef".repeat(32);
        std::fs::create_dir_all(cache.entry_dir(&key)).unwrap();
        assert!(matches!(cache.lookup(&key), Lookup::Corrupt(_)));
        std::fs::write(cache.entry_dir(&key).join(META_FILE), b"{not json").unwrap();
        assert!(matches!(cache.lookup(&key), Lookup::Corrupt(_)));
        let m = meta(&key, None);
        meta::write_json(&cache.entry_dir(&key).join(META_FILE), &m).unwrap();
        assert!(
            matches!(cache.lookup(&key), Lookup::Corrupt(_)),
            "no failed.json"
        );
        assert!(matches!(summaries(&cache).0[0].state, State::Corrupt(_)));
        meta::write_json(
            &cache.entry_dir(&key).join(FAILED_FILE),
            &Failed {
                exit_status: 70,
                error_lines: vec!["[ERROR] x".into()],
                failure: None,
            },
        )
        .unwrap();
        assert!(matches!(cache.lookup(&key), Lookup::Failed(..)));
        assert_eq!(summaries(&cache).0[0].state, State::Failed);
    }

    #[test]
    fn locks_exclude_and_free_leftovers_are_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let key = "01".repeat(32);
        let held = cache.try_lock(&key).unwrap().unwrap();
        assert!(held.replaced.is_none());
        assert!(cache.try_lock(&key).unwrap().is_none());
        let cancel = Cancel::new();
        cancel.cancel();
        let mut waited = 0;
        assert!(cache
            .lock(&key, Some(&cancel), &mut |_| waited += 1)
            .unwrap()
            .is_none());
        assert_eq!(waited, 1);
        // A temp dir of a held key stays; once free, it goes, and so does the lock file.
        let pending = cache.begin(&key).unwrap();
        let tmp = pending.path().to_path_buf();
        std::mem::forget(pending);
        let (_, left) = summaries(&cache);
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left
            .iter()
            .any(|l| l.kind == LeftoverKind::Temp { key: key.clone() }));
        cache.clean_leftovers(&left);
        assert!(tmp.exists());
        // A released lock's file goes with it; one a dead process left is cleaned.
        drop(held);
        assert!(!cache.lock_path(&key).exists());
        let mut dead = crate::lockfile::Stamp::mine(crate::lockfile::DEFAULT_LEASE);
        dead.pid = u32::MAX - 7;
        std::fs::write(cache.lock_path(&key), dead.text()).unwrap();
        let (_, left) = summaries(&cache);
        assert_eq!(cache.clean_leftovers(&left), 2);
        assert!(!tmp.exists() && !cache.lock_path(&key).exists());
        // Locking still works after the lock file was removed.
        let again = cache.try_lock(&key).unwrap();
        assert!(again.is_some());
    }

    #[test]
    fn a_dropped_pending_entry_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let key = "02".repeat(32);
        let p = cache.begin(&key).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(p.path()).unwrap().permissions().mode() & 0o777,
            0o700
        );
        p.dir().create_file(NEFF_FILE).unwrap();
        drop(p);
        assert_eq!(
            std::fs::read_dir(dir.path().join("nxcc-v1/02"))
                .unwrap()
                .count(),
            0
        );
    }
}
