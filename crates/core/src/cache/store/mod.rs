//! The on-disk cache: `DIR/nxcc-v1/<2 hex>/<key>/` holding `model.neff`, `meta.json` and
//! `log.txt` (or, for a failed compile, `failed.json`, `meta.json` and `log.txt`). This file owns
//! the [`Cache`] value, its layout and its trust in the directory; the rest is by concern:
//! reading an entry (`read.rs`), the keys' locks (`lock.rs`), publication and eviction
//! (`publish.rs`), walking the cache (`scan.rs`), the estimate index's place (`estimates.rs`)
//! and the copying and hashing of files (`io.rs`).
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
//! - one compile per key at a time: the lock file `<2 hex>/<key>.lock`, taken by the one lock
//!   protocol ([`crate::lockfile`]), which tells a live holder from a dead one on this host and
//!   on others;
//! - a reader verifies the NEFF against the blake3 recorded in `meta.json` as it copies it out;
//!   a mismatch makes the entry corrupt, and the caller evicts it.
//!
//! [`Cache::scan`] streams the entries, one shard open at a time, so its memory does not grow
//! with their number.

mod estimates;
mod io;
mod lock;
mod publish;
mod read;
mod scan;

use std::path::{Path, PathBuf};

use crate::fsx::dir::is_not_plain;
use crate::fsx::trust::{self, Subject, Trusted};
use crate::fsx::Dir;

pub use estimates::ESTIMATES_DIR;
pub(crate) use io::{hash_in, write_json_in};
pub use lock::KeyLock;
pub(crate) use publish::evict_in;
pub(crate) use publish::evict_unread;
pub use publish::{Evicted, Pending};
pub(crate) use read::lookup_in;
pub use read::{Lookup, ServeError};
pub(crate) use scan::{dir_bytes, usage};
pub use scan::{Leftover, LeftoverKind, State, Summary};

/// The subdirectory of the cache directory nxcc's entries live in.
pub const LAYOUT_DIR: &str = "nxcc-v1";
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

/// Whether `s` looks like a key (64 lower-case hex digits).
pub(crate) fn is_key(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `s` looks like a shard's name (2 lower-case hex digits).
fn is_shard(s: &str) -> bool {
    s.len() == 2
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The trust rule's refusal of `path`, as an I/O error.
fn unsafe_dir(path: &Path, problem: String, fix: String) -> std::io::Error {
    UnsafeDir {
        noun: CACHE_DIR.noun,
        path: path.to_path_buf(),
        problem,
        fix,
    }
    .into()
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
    pub(crate) fn entry_dir(&self, key: &str) -> PathBuf {
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
    pub(crate) fn open_root(&self, create: bool) -> std::io::Result<Option<Dir>> {
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
    pub(crate) fn open_entry(&self, key: &str) -> std::io::Result<Option<(Dir, Dir)>> {
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

/// The shard of `key`: its first two hex digits.
fn shard_of(key: &str) -> &str {
    &key[..2.min(key.len())]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::digests::Table;
    use crate::cache::meta::{
        self, Failed, Meta, NeffInfo, Status, FAILED_FILE, META_FILE, NEFF_FILE,
    };
    use crate::run::process::Cancel;
    use std::io::Write;

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
            status: if neff.is_some() {
                Status::Ok
            } else {
                Status::Failed
            },
            exit_status: if neff.is_some() { 0 } else { 70 },
            neff,
            engine: meta::EngineKind::Pipeline,
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
        let off = Table::off();
        cache
            .serve(&key, m.neff.as_ref().unwrap(), &out, &off)
            .unwrap();
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
            .serve(&key, m.neff.as_ref().unwrap(), &out, &off)
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
    fn a_neff_verified_once_is_trusted_until_it_changes() {
        use crate::cache::digests::{now_ns, Kind, StatId};
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().join("c"));
        let key = "cd".repeat(32);
        put(&cache, &key, b"neff bytes");
        let Lookup::Hit(m) = cache.lookup(&key) else {
            panic!()
        };
        let neff = m.neff.unwrap();
        let path = cache.entry_dir(&key).join(NEFF_FILE);
        let id = || StatId::of(&rustix::fs::stat(&path).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !id().settled_before(now_ns()) {
            assert!(std::time::Instant::now() < deadline, "never settled");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let (out, table) = (dir.path().join("out.neff"), Table::memory_only());
        // Not trusted: hashed, and not remembered.
        cache.serve(&key, &neff, &out, &Table::off()).unwrap();
        assert_eq!(table.recall_of(Kind::Blake3, &id()), None);
        // Verified once, remembered for its identity; served again from it.
        cache.serve(&key, &neff, &out, &table).unwrap();
        assert_eq!(
            table.recall_of(Kind::Blake3, &id()),
            Some(neff.blake3.clone())
        );
        std::fs::remove_file(&out).unwrap();
        cache.serve(&key, &neff, &out, &table).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"neff bytes");
        // Changed in place (same size): verified again, and refused.
        std::fs::write(&path, b"neff bytez").unwrap();
        let e = cache.serve(&key, &neff, &out, &table).unwrap_err();
        assert!(matches!(e, ServeError::Corrupt(_)));
        assert_eq!(std::fs::read(&out).unwrap(), b"neff bytes");
        // Trusted while its identity holds, the hash is skipped: a memory planted for these
        // (wrong) bytes serves them as they are — which only a server that does not hash can do.
        while !id().settled_before(now_ns()) {
            assert!(std::time::Instant::now() < deadline, "never settled");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        table.remember_of(Kind::Blake3, &id(), &neff.blake3, now_ns());
        cache.serve(&key, &neff, &out, &table).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"neff bytez");
        // Once it changes again, the memory no longer applies: hashed, and refused.
        std::fs::write(&path, b"neff bytey").unwrap();
        let e = cache.serve(&key, &neff, &out, &table).unwrap_err();
        assert!(matches!(e, ServeError::Corrupt(_)));
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

    /// A `meta.json` as nxcc writes it (a compile of `examples/models/mlp.hlo_module.pb` with
    /// the simulated toolchain, its inputs and jobs shortened).
    const META_OK: &str = r#"{
  "format": 1,
  "key": "7024e100d097f6c109bad748e21ab6a9d6fb00f3cde3a91f61f425ae330d7b02",
  "args_key": "e840d912de98f47627931c66ac55405a3c46e5fc5e4f4fd828a8147b48e8f87a",
  "inputs": {
    "plan_version": 1,
    "args": {
      "arch": "trn2",
      "softmax_epsilon": -100000000.0
    },
    "toolchain": {
      "kind": "simulated",
      "nxcc_version": "0.1.0"
    }
  },
  "model_path": "/work/examples/models/mlp.hlo_module.pb",
  "model_blake3": "70e8e9a435dfa293e0072e42fa2b3755c8f49b4f810f45180120d26aa771aabb",
  "model_size": 1192,
  "model_digest_kind": "blake3",
  "model_hlo_metadata": "96f72c4f13fc160bd1563568fa8ebfc21ead64eacdfc96504331db63aebccc4a",
  "status": "ok",
  "exit_status": 0,
  "neff": {
    "blake3": "d2482f10a312b3e9aa367ae62dbe4c20339bc759f29db476ff126303449fb36d",
    "size": 3221
  },
  "engine": "pipeline",
  "jobs": [
    {
      "job": "HLOToTensorizer",
      "status": "ok",
      "start_s": 0.000020942,
      "wall_s": 0.006162073,
      "user_s": 0.005306,
      "sys_s": 0.0,
      "max_rss_kb": 16280,
      "exit_status": null,
      "signal": null,
      "processes": 1
    }
  ],
  "peak_rss_kb": 18072,
  "wall_s": 0.022502263,
  "nxcc_version": "0.1.0",
  "created": "2026-12-02T08:13:42Z",
  "created_ms": 1796199222659,
  "last_used_ms": 1796199222659
}
"#;

    #[test]
    fn meta_json_reads_into_typed_status_and_engine_and_writes_back_byte_identical() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let key = "7024e100d097f6c109bad748e21ab6a9d6fb00f3cde3a91f61f425ae330d7b02";
        // The same file for a failed compile of an external engine.
        let failed_text = META_OK
            .replace(r#""status": "ok""#, r#""status": "failed""#)
            .replace(r#""exit_status": 0,"#, r#""exit_status": 70,"#)
            .replace(
                "\"neff\": {\n    \"blake3\": \"d2482f10a312b3e9aa367ae62dbe4c20339bc759f29db476ff126303449fb36d\",\n    \"size\": 3221\n  },",
                "\"neff\": null,",
            )
            .replace(r#""engine": "pipeline""#, r#""engine": "external""#);
        assert!(failed_text.contains(r#""neff": null,"#));
        let failed = Failed {
            exit_status: 70,
            error_lines: vec!["[ERROR] x".into()],
            failure: None,
        };
        for (text, status, engine) in [
            (META_OK.to_string(), Status::Ok, meta::EngineKind::Pipeline),
            (failed_text, Status::Failed, meta::EngineKind::External),
        ] {
            let entry = cache.entry_dir(key);
            std::fs::create_dir_all(&entry).unwrap();
            std::fs::write(entry.join(META_FILE), &text).unwrap();
            meta::write_json(&entry.join(FAILED_FILE), &failed).unwrap();
            let m = match cache.lookup(key) {
                Lookup::Hit(m) if status == Status::Ok => m,
                Lookup::Failed(m, f) if status == Status::Failed && f == failed => m,
                other => panic!("{status:?}: {other:?}"),
            };
            assert_eq!((m.status, m.engine), (status, engine));
            let out = Dir::open(dir.path()).unwrap();
            let _ = std::fs::remove_file(dir.path().join("written.json"));
            write_json_in(&out, "written.json", &*m).unwrap();
            let written = std::fs::read_to_string(dir.path().join("written.json")).unwrap();
            assert_eq!(written, text);
            // A scan reads the same status.
            let want = match status {
                Status::Ok => State::Ok,
                Status::Failed => State::Failed,
            };
            assert_eq!(summaries(&cache).0[0].state, want);
            std::fs::remove_dir_all(&entry).unwrap();
        }
        // Their JSON strings, one by one.
        for (v, s) in [
            (serde_json::to_string(&Status::Ok), "\"ok\""),
            (serde_json::to_string(&Status::Failed), "\"failed\""),
            (
                serde_json::to_string(&meta::EngineKind::Pipeline),
                "\"pipeline\"",
            ),
            (
                serde_json::to_string(&meta::EngineKind::External),
                "\"external\"",
            ),
        ] {
            assert_eq!(v.unwrap(), s);
        }
        let engine = crate::engine::Engine::Pipeline;
        assert_eq!(meta::EngineKind::from(&engine), meta::EngineKind::Pipeline);
    }
}
