//! The on-disk cache: `DIR/nxcc-v1/<2 hex>/<key>/` holding `model.neff`, `meta.json` and
//! `log.txt` (or, for a failed compile, `failed.json`, `meta.json` and `log.txt`).
//!
//! Consistency rules, for any number of processes sharing the directory:
//! - an entry is published by renaming a fully written temporary directory
//!   (`<2 hex>/.tmp-<key>-...`) to its name, so a reader sees a whole entry or none;
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
//! half-evicted ones.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::meta::{self, Failed, Meta, NeffInfo, FAILED_FILE, META_FILE, NEFF_FILE};
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

/// What the cache holds for a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
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

/// One entry found by a scan.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub key: String,
    pub dir: PathBuf,
    /// `None` when `meta.json` is missing or unreadable.
    pub meta: Option<Meta>,
    pub failed: bool,
    /// The apparent size of its files.
    pub bytes: u64,
    /// See [`Cache::last_used_ms`].
    pub last_used_ms: u64,
}

/// What a scan found besides entries: temporary and half-evicted directories, lock files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// `.tmp-<key>-...` directories: (key, path).
    pub temp: Vec<(String, PathBuf)>,
    /// `.evict-...` directories.
    pub evicted: Vec<PathBuf>,
    /// `<key>.lock` files: (key, path).
    pub locks: Vec<(String, PathBuf)>,
}

/// The exclusive right to compile one key (released when dropped, or by the kernel if the
/// process dies).
#[derive(Debug)]
pub struct KeyLock {
    _file: File,
    pub path: PathBuf,
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
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

/// The apparent size of the files under a directory.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
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

    fn shard(&self, key: &str) -> PathBuf {
        self.root.join(&key[..2.min(key.len())])
    }

    /// Where the entry of `key` is (or would be).
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        self.shard(key).join(key)
    }

    /// The lock file of `key`.
    pub fn lock_path(&self, key: &str) -> PathBuf {
        self.shard(key).join(format!("{key}{LOCK_SUFFIX}"))
    }

    /// What the cache holds for `key` (reads `meta.json` and `failed.json` only).
    pub fn lookup(&self, key: &str) -> Lookup {
        let dir = self.entry_dir(key);
        let meta: Meta = match meta::read_json(&dir.join(META_FILE)) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return if dir.exists() {
                    Lookup::Corrupt(format!("{META_FILE} is missing"))
                } else {
                    Lookup::Absent
                };
            }
            Err(e) => return Lookup::Corrupt(format!("{META_FILE} is unreadable: {e}")),
        };
        if meta.key != key {
            return Lookup::Corrupt(format!("{META_FILE} names another key"));
        }
        if meta.status == "failed" {
            return match meta::read_json::<Failed>(&dir.join(FAILED_FILE)) {
                Ok(f) => Lookup::Failed(Box::new(meta), f),
                Err(e) => Lookup::Corrupt(format!("{FAILED_FILE} is unreadable: {e}")),
            };
        }
        if meta.neff.is_none() {
            return Lookup::Corrupt(format!("{META_FILE} records no NEFF"));
        }
        Lookup::Hit(Box::new(meta))
    }

    /// Copy the entry's NEFF to `output` (a reflink when the file system can, else a copy; never
    /// a hard link, the user may modify the output), verifying its blake3 on the way: written to a
    /// temporary name beside `output`, renamed into place only when it matches.
    pub fn serve(&self, key: &str, neff: &NeffInfo, output: &Path) -> Result<(), ServeError> {
        let src_path = self.entry_dir(key).join(NEFF_FILE);
        let src = File::open(&src_path)
            .map_err(|e| ServeError::Corrupt(format!("{NEFF_FILE} cannot be read: {e}")))?;
        let name = output
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file.neff");
        let tmp = output.with_file_name(format!(".{name}.nxcc-cache-{}", unique_suffix()));
        // As a compile would, create the output's directory.
        if let Some(dir) = output.parent() {
            std::fs::create_dir_all(dir).map_err(ServeError::Output)?;
        }
        let dst = File::create(&tmp).map_err(ServeError::Output)?;
        let result = copy_hashing(&src, &dst, &tmp);
        drop(dst);
        let fail = |e: ServeError| {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        };
        match result {
            Ok((hash, size)) if hash.to_hex().as_str() == neff.blake3 && size == neff.size => {}
            Ok(_) => {
                return fail(ServeError::Corrupt(format!(
                    "{NEFF_FILE} does not match its recorded blake3"
                )))
            }
            Err(CopyError::Read(e)) => {
                return fail(ServeError::Corrupt(format!(
                    "{NEFF_FILE} cannot be read: {e}"
                )))
            }
            Err(CopyError::Write(e)) => return fail(ServeError::Output(e)),
        }
        if let Err(e) = std::fs::rename(&tmp, output) {
            return fail(ServeError::Output(e));
        }
        Ok(())
    }

    /// Record a use of the entry: its `meta.json`'s modification time becomes now (a metadata
    /// update, no rewrite). Best effort: a read-only cache or an entry evicted meanwhile is left
    /// alone.
    pub fn touch(&self, key: &str) {
        let path = self.entry_dir(key).join(META_FILE);
        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
    }

    /// When the entry was last used, ms since the Unix epoch: the later of `meta.json`'s
    /// `last_used_ms` (its creation) and the file's modification time (its last hit).
    pub fn last_used_ms(&self, key: &str, meta: Option<&Meta>) -> u64 {
        let mtime = std::fs::metadata(self.entry_dir(key).join(META_FILE))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        mtime.max(meta.map_or(0, |m| m.last_used_ms))
    }

    /// Take the lock of `key`, waiting for another holder; `on_wait` is called once if it has
    /// to wait. `Ok(None)` if `cancel` was cancelled while waiting.
    pub fn lock(
        &self,
        key: &str,
        cancel: Option<&Cancel>,
        on_wait: &mut dyn FnMut(),
    ) -> std::io::Result<Option<KeyLock>> {
        let mut waited = false;
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(l) = self.try_lock(key)? {
                return Ok(Some(l));
            }
            if !waited {
                waited = true;
                on_wait();
            }
            if cancel.is_some_and(Cancel::is_cancelled) {
                return Ok(None);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Take the lock of `key` if it is free.
    pub fn try_lock(&self, key: &str) -> std::io::Result<Option<KeyLock>> {
        let path = self.lock_path(key);
        loop {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)?;
            if !fs4::fs_std::FileExt::try_lock_exclusive(&file)? {
                return Ok(None);
            }
            // The file locked must still be the one at the path (maintenance may have removed
            // it between our open and our lock).
            let held = file.metadata()?;
            match std::fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Some(KeyLock { _file: file, path }))
                }
                _ => continue,
            }
        }
    }

    /// Publish an entry for `key`: `write` fills a fresh temporary directory, which then replaces
    /// whatever entry the key had. The caller holds the key's lock.
    pub fn publish(
        &self,
        key: &str,
        write: &dyn Fn(&Path) -> std::io::Result<()>,
    ) -> std::io::Result<PathBuf> {
        let shard = self.shard(key);
        std::fs::create_dir_all(&shard)?;
        let tmp = shard.join(format!("{TMP_PREFIX}{key}-{}", unique_suffix()));
        std::fs::create_dir(&tmp)?;
        if let Err(e) = write(&tmp) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        let dest = self.entry_dir(key);
        for attempt in 0..3 {
            if dest.exists() {
                self.evict(key)?;
            }
            match std::fs::rename(&tmp, &dest) {
                Ok(()) => return Ok(dest),
                Err(e) if attempt < 2 && dest.exists() => {
                    let _ = e;
                    continue;
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    return Err(e);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&tmp);
        Err(std::io::Error::other("the entry kept reappearing"))
    }

    /// Remove the entry of `key`: renamed away first, then deleted. `false` if there was none.
    pub fn evict(&self, key: &str) -> std::io::Result<bool> {
        let dir = self.entry_dir(key);
        let away = self
            .shard(key)
            .join(format!("{EVICT_PREFIX}{key}-{}", unique_suffix()));
        match std::fs::rename(&dir, &away) {
            Ok(()) => {
                std::fs::remove_dir_all(&away)?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every entry and every leftover, shard by shard (an absent cache has none).
    pub fn scan(&self) -> (Vec<Listed>, Leftovers) {
        let mut entries = Vec::new();
        let mut left = Leftovers::default();
        let Ok(shards) = std::fs::read_dir(&self.root) else {
            return (entries, left);
        };
        let mut shards: Vec<PathBuf> = shards
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(is_shard))
            .map(|e| e.path())
            .collect();
        shards.sort();
        for shard in shards {
            let Ok(rd) = std::fs::read_dir(&shard) else {
                continue;
            };
            let mut items: Vec<(String, PathBuf)> = rd
                .flatten()
                .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
                .collect();
            items.sort();
            for (name, path) in items {
                if let Some(rest) = name.strip_prefix(TMP_PREFIX) {
                    left.temp.push((rest.chars().take(64).collect(), path));
                } else if name.starts_with(EVICT_PREFIX) {
                    left.evicted.push(path);
                } else if let Some(k) = name.strip_suffix(LOCK_SUFFIX).filter(|k| is_key(k)) {
                    left.locks.push((k.to_string(), path));
                } else if is_key(&name) && path.is_dir() {
                    let (meta, failed) = match self.lookup(&name) {
                        Lookup::Hit(m) => (Some(*m), false),
                        Lookup::Failed(m, _) => (Some(*m), true),
                        Lookup::Absent | Lookup::Corrupt(_) => (None, false),
                    };
                    entries.push(Listed {
                        last_used_ms: self.last_used_ms(&name, meta.as_ref()),
                        key: name,
                        bytes: dir_bytes(&path),
                        dir: path,
                        meta,
                        failed,
                    });
                }
            }
        }
        (entries, left)
    }

    /// Remove the leftovers nobody is using: temporary directories whose key lock is free,
    /// half-evicted directories, and free lock files of keys without an entry. Returns how many
    /// were removed.
    pub fn clean_leftovers(&self, left: &Leftovers) -> usize {
        let mut n = 0;
        for (key, path) in &left.temp {
            if let Ok(Some(_lock)) = self.try_lock(key) {
                if std::fs::remove_dir_all(path).is_ok() {
                    n += 1;
                }
            }
        }
        for path in &left.evicted {
            if std::fs::remove_dir_all(path).is_ok() {
                n += 1;
            }
        }
        for (key, path) in &left.locks {
            if self.entry_dir(key).exists() {
                continue;
            }
            if let Ok(Some(lock)) = self.try_lock(key) {
                if std::fs::remove_file(path).is_ok() {
                    n += 1;
                }
                drop(lock);
            }
        }
        n
    }
}

enum CopyError {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// `FICLONE` (`_IOW(0x94, 9, int)`): share the source's extents (btrfs, XFS, ...).
const FICLONE: libc::c_ulong = 0x4004_9409;

/// Copy `src` into `dst` (a reflink when possible) and return the blake3 and size of what `dst`
/// now holds: the bytes written are the bytes hashed.
fn copy_hashing(src: &File, dst: &File, dst_path: &Path) -> Result<(blake3::Hash, u64), CopyError> {
    // SAFETY: ioctl(FICLONE) with two descriptors we own; on failure nothing was changed.
    let cloned = unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE as _, src.as_raw_fd()) } == 0;
    let mut h = blake3::Hasher::new();
    if cloned {
        let n = super::key::hash_file_into(dst_path, &mut h).map_err(CopyError::Read)?;
        return Ok((h.finalize(), n));
    }
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

/// Copy a file into a directory while hashing it: (blake3, size) of the bytes written.
pub fn copy_in(src: &Path, dst: &Path) -> std::io::Result<(blake3::Hash, u64)> {
    let s = File::open(src)?;
    let d = File::create(dst)?;
    copy_hashing(&s, &d, dst).map_err(|e| match e {
        CopyError::Read(e) | CopyError::Write(e) => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(key: &str, neff: Option<NeffInfo>) -> Meta {
        Meta {
            format: meta::META_FORMAT,
            key: key.into(),
            args_key: "a".repeat(64),
            inputs: serde_json::json!({}),
            model_path: "/m.pb".into(),
            model_blake3: "b".repeat(64),
            model_size: 10,
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

    fn put(cache: &Cache, key: &str, neff: &[u8]) {
        let info = NeffInfo {
            blake3: blake3::hash(neff).to_hex().to_string(),
            size: neff.len() as u64,
        };
        let m = meta(key, Some(info));
        cache
            .publish(key, &|d| {
                std::fs::write(d.join(NEFF_FILE), neff)?;
                meta::write_json(&d.join(META_FILE), &m)
            })
            .unwrap();
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
        let (entries, left) = cache.scan();
        assert!(entries.is_empty() && left.evicted.is_empty() && left.temp.is_empty());
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
        let old = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(cache.entry_dir(&key).join(META_FILE))
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(cache.last_used_ms(&key, Some(&m)), 1_000_000_000);
        cache.touch(&key);
        assert!(cache.last_used_ms(&key, Some(&m)) >= meta::now_ms() - 1000);
        let (entries, _) = cache.scan();
        assert_eq!(entries.len(), 1);
        assert!(entries[0].bytes > 3);
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
        meta::write_json(
            &cache.entry_dir(&key).join(FAILED_FILE),
            &Failed {
                exit_status: 70,
                error_lines: vec!["[ERROR] x".into()],
            },
        )
        .unwrap();
        assert!(matches!(cache.lookup(&key), Lookup::Failed(..)));
    }

    #[test]
    fn locks_exclude_and_free_leftovers_are_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let key = "01".repeat(32);
        let held = cache.try_lock(&key).unwrap().unwrap();
        assert!(cache.try_lock(&key).unwrap().is_none());
        let cancel = Cancel::new();
        cancel.cancel();
        let mut waited = 0;
        assert!(cache
            .lock(&key, Some(&cancel), &mut || waited += 1)
            .unwrap()
            .is_none());
        assert_eq!(waited, 1);
        // A temp dir of a held key stays; once free, it goes, and so does the lock file.
        let tmp = cache.shard(&key).join(format!("{TMP_PREFIX}{key}-1-2-3"));
        std::fs::create_dir_all(&tmp).unwrap();
        let (_, left) = cache.scan();
        assert_eq!(left.temp.len(), 1);
        assert_eq!(left.temp[0].0, key);
        cache.clean_leftovers(&left);
        assert!(tmp.exists());
        drop(held);
        let (_, left) = cache.scan();
        assert_eq!(cache.clean_leftovers(&left), 2);
        assert!(!tmp.exists() && !cache.lock_path(&key).exists());
        // Locking still works after the lock file was removed.
        let again = cache.try_lock(&key).unwrap();
        assert!(again.is_some());
    }
}
