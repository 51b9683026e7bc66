//! The framework's cache in a bucket ([`Bucket`], `s3://BUCKET/PREFIX`): the layout of a
//! directory's under the prefix (`neuronxcc-<version>/MODULE_<hash>+<flags>/<file>` objects),
//! as libneuronxla's S3 cache keeps it ([`crate::recon::framework`]).
//!
//! - **Scan**: a version's objects listed from its folder (page by page, at most
//!   [`crate::objstore::LIST_LIMIT`]), grouped by entry, each entry classified by the rules a
//!   directory's is ([`super::classify`](mod@super::classify)). A listing the client refuses for one name it cannot
//!   address (a `..` segment) is listed again entry by entry: only that entry is refused.
//! - **Names**: every version, entry and file name is checked before it is used in a key or a
//!   path — one segment of letters, digits and `._+-=`, never `.` or `..` — and every key is
//!   built below the store's prefix; an entry whose name is not one the framework writes is
//!   refused, an object in it whose name nxcc does not use is left alone.
//! - **Reads** are bounded before they are read: flags and locks small, a graph the HLO reader's
//!   limit, a NEFF the NEFF reader's.
//! - **Locks**: every `*.lock` object in an entry is a lock; nxcc's own is the one lock protocol
//!   on an object ([`crate::lockfile::object`]) at the name a directory's lock file has
//!   (`<graph>.lock`), a foreign one is given [`FOREIGN_LOCK_LEASE`] from its last write.
//! - **Publication**, only while the entry's lock is still this holder's: `model.neff` created
//!   (or replaced only if it is still the version seen: another writer's is never overwritten
//!   blindly), then `model.done` created only if absent (`If-None-Match: *`) — a publication cut
//!   before it leaves no `model.done`, and one that finds it there gives up; a failure's
//!   `model.log` only when the entry holds no NEFF.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::classify::{self, Contents};
use super::cleaning::{CleanReport, CleanRequest, Removal};
use super::lock::lock_name;
use super::maintain;
use super::place::{Compiled, EntryLock, Hold, Place, Taken};
use super::publish::NotWritten;
use super::VERSION_PREFIX;
use super::{version_dir_name, Class, Entry, LockOwner, Scan, Version};
use super::{DONE_FILE, ENTRY_PREFIX, LOCK_SUFFIX, LOG_FILE, NEFF_FILE, REGISTRY_DIR};
use crate::fsx::{AtomicFile, Durability};
use crate::lockfile::object::{self, ObjectLock};
use crate::objstore::{Info, Put, PutMode, Storage, StorageError, LIST_LIMIT};
use crate::recon::framework::FOREIGN_LOCK_LEASE;

/// Whether `name` may be used as one segment of a key or a path: not empty, not `.` or `..`,
/// only letters, digits and `._+-=` (what the framework's names are made of, and what every
/// client addresses as written).
pub fn plain(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._+-=".contains(c))
}

/// A framework cache in a bucket.
pub struct Bucket {
    store: Arc<dyn Storage>,
}

impl fmt::Debug for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bucket({})", self.store.url())
    }
}

/// A store's error as an I/O error (its words kept).
fn io_err(e: StorageError) -> io::Error {
    match e {
        StorageError::TooLarge(m) => io::Error::new(io::ErrorKind::InvalidData, m),
        e => io::Error::other(e.to_string()),
    }
}

impl Bucket {
    /// The cache in `store`.
    pub fn new(store: Arc<dyn Storage>) -> Bucket {
        Bucket { store }
    }

    /// The cache at `url`, through the registered client.
    pub fn open(url: &str) -> Result<Bucket, StorageError> {
        crate::objstore::open(url).map(Bucket::new)
    }

    /// The key of the entry `name` of `version` (both checked by the caller).
    fn folder(version: &str, name: &str) -> String {
        format!("{}/{name}", version_dir_name(version))
    }

    /// The entries of the version folder `vdir`, by name, each with its objects.
    fn entries_of(&self, vdir: &str) -> io::Result<BTreeMap<String, Result<Vec<Info>, String>>> {
        let listed = match self.store.list(vdir, LIST_LIMIT) {
            Ok(l) => l,
            Err(StorageError::BadName(_)) => return self.entries_one_by_one(vdir),
            Err(e) => return Err(io_err(e)),
        };
        let mut by: BTreeMap<String, Result<Vec<Info>, String>> = BTreeMap::new();
        for info in listed {
            let rest = info.name.strip_prefix(vdir).unwrap_or_default();
            if let Some((entry, _)) = rest.trim_start_matches('/').split_once('/') {
                if let Ok(v) = by.entry(entry.to_string()).or_insert(Ok(Vec::new())) {
                    v.push(info);
                }
            }
        }
        Ok(by)
    }

    /// [`Bucket::entries_of`] one entry at a time: an entry whose listing holds a name the
    /// client cannot address is refused, the others listed.
    fn entries_one_by_one(
        &self,
        vdir: &str,
    ) -> io::Result<BTreeMap<String, Result<Vec<Info>, String>>> {
        let level = self.store.list_dir(vdir, LIST_LIMIT).map_err(io_err)?;
        let mut by = BTreeMap::new();
        for entry in level.folders {
            let listed = match plain(&entry) {
                true => self
                    .store
                    .list(&format!("{vdir}/{entry}"), LIST_LIMIT)
                    .map_err(|e| e.to_string()),
                false => Err(String::new()),
            };
            by.insert(entry, listed);
        }
        Ok(by)
    }

    /// The entries of one version, classified.
    fn scan_version(&self, version: &str) -> io::Result<Vec<Entry>> {
        let vdir = version_dir_name(version);
        let mut out = Vec::new();
        for (name, objects) in self.entries_of(&vdir)? {
            if !name.starts_with(ENTRY_PREFIX) && name != REGISTRY_DIR {
                continue;
            }
            let mut e = Entry::new(version, &name, self.entry_path(version, &name));
            let objects = match (plain(&name), objects) {
                (true, Ok(o)) => o,
                (false, _) => {
                    e.class = Class::Refused("its name is not one the framework writes".into());
                    out.push(e);
                    continue;
                }
                (true, Err(why)) => {
                    e.class = Class::Refused(format!("its objects cannot be listed: {why}"));
                    out.push(e);
                    continue;
                }
            };
            let c = InBucket {
                store: self.store.as_ref(),
                folder: Bucket::folder(version, &name),
                objects: &objects,
                skip: None,
            };
            if name == REGISTRY_DIR {
                e.bytes = c.bytes();
                e.class = Class::Foreign("optimum-neuron's registry of cached models".into());
            } else {
                classify::classify(&c, &mut e);
            }
            out.push(e);
        }
        Ok(out)
    }
}

/// An entry in a bucket, as its classification reads it: the objects listed in its folder;
/// `skip` (its holder's own lock) left out.
struct InBucket<'a> {
    store: &'a dyn Storage,
    /// The entry's folder, relative to the store's prefix.
    folder: String,
    objects: &'a [Info],
    skip: Option<&'a str>,
}

impl InBucket<'_> {
    /// The names directly in the folder, and those of the folders in it.
    fn names(&self) -> (Vec<&str>, BTreeSet<&str>) {
        let mut files = Vec::new();
        let mut folders = BTreeSet::new();
        for o in self.objects {
            let Some(rest) = o.name.strip_prefix(&self.folder) else {
                continue;
            };
            match rest.trim_start_matches('/').split_once('/') {
                Some((f, _)) => {
                    folders.insert(f);
                }
                None => files.push(rest.trim_start_matches('/')),
            }
        }
        (files, folders)
    }
}

impl Contents for InBucket<'_> {
    fn present(&self) -> Result<BTreeSet<String>, String> {
        let looked = classify::looked_at();
        let (files, folders) = self.names();
        if let Some(f) = looked.iter().find(|n| folders.contains(n.as_str())) {
            return Err(format!("{f} is a folder"));
        }
        let mut present = BTreeSet::new();
        for f in files {
            if self.skip == Some(f) || !(looked.iter().any(|n| n == f) || f.ends_with(LOCK_SUFFIX))
            {
                continue;
            }
            if !plain(f) {
                return Err(format!("{f:?}: a lock object nxcc cannot address"));
            }
            present.insert(f.to_string());
        }
        Ok(present)
    }

    fn judge(&self, name: &str) -> Result<Option<LockOwner>, String> {
        let key = format!("{}/{name}", self.folder);
        object::judge(self.store, &key, Some(FOREIGN_LOCK_LEASE))
            .map(|j| j.map(|j| j.holder))
            .map_err(|e| e.to_string())
    }

    fn read(&self, name: &str, limit: u64) -> io::Result<Vec<u8>> {
        read(self.store, &format!("{}/{name}", self.folder), limit)
    }

    fn bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.size).sum()
    }
}

/// The object `key` whole, at most `limit` bytes (`NotFound` if absent).
fn read(store: &dyn Storage, key: &str, limit: u64) -> io::Result<Vec<u8>> {
    match store.get(key, limit).map_err(io_err)? {
        Some(o) => Ok(o.bytes),
        None => Err(io::ErrorKind::NotFound.into()),
    }
}

impl Place for Bucket {
    fn shown(&self) -> String {
        self.store.url().to_string()
    }

    fn hold(&self, _say: &dyn Fn(&str)) -> io::Result<Hold<'_>> {
        Ok(Hold(None))
    }

    fn scan(&self, only: Option<&str>) -> io::Result<Scan> {
        let mut scan = Scan::default();
        let names = match only {
            Some(v) => vec![version_dir_name(v)],
            None => self.version_folders()?,
        };
        for name in names {
            let version = name[VERSION_PREFIX.len()..].to_string();
            if !plain(&name) || super::check_version(&version).is_err() {
                let why = "its name is not one the framework writes".to_string();
                scan.refused_versions.push((name, why));
                continue;
            }
            let entries = self.scan_version(&version)?;
            if entries.is_empty() && only.is_some() {
                continue;
            }
            scan.versions.push(Version {
                path: Path::new(&self.shown()).join(&name),
                version,
                entries,
            });
        }
        Ok(scan)
    }

    fn versions(&self) -> io::Result<Vec<String>> {
        Ok(self
            .version_folders()?
            .into_iter()
            .map(|n| n[VERSION_PREFIX.len()..].to_string())
            .collect())
    }

    fn read(&self, e: &Entry, name: &str, limit: u64) -> io::Result<Vec<u8>> {
        read(self.store.as_ref(), &self.key(e, name)?, limit)
    }

    fn copy(&self, e: &Entry, name: &str, limit: u64, to: &Path) -> io::Result<()> {
        let key = self.key(e, name)?;
        let mut out = AtomicFile::create(to)?;
        match self.store.get_into(&key, limit, &mut out).map_err(io_err)? {
            Some(_) => out.commit(Durability::Visible),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn lock(&self, version: &str, name: &str, graph: &str, break_foreign: bool) -> Taken {
        if !plain(name) || !plain(&version_dir_name(version)) {
            return Taken::Refused(format!("{name:?} is not a name the framework writes"));
        }
        let folder = Bucket::folder(version, name);
        let key = format!("{folder}/{}", lock_name(graph));
        let store = Arc::clone(&self.store);
        match object::try_take(&store, &key, Some(FOREIGN_LOCK_LEASE), break_foreign) {
            Ok(object::Taken::Locked(lock)) => Taken::Locked(Box::new(BucketLock {
                store,
                folder,
                name: name.to_string(),
                break_foreign,
                lock,
            })),
            Ok(object::Taken::Busy(o)) => Taken::Busy(o),
            Err(e) => Taken::Refused(e.to_string()),
        }
    }

    fn clean_locks(&self, e: &Entry, req: &CleanRequest, r: &mut CleanReport) -> io::Result<()> {
        if !plain(&e.name) {
            return Ok(());
        }
        let folder = Bucket::folder(&e.version, &e.name);
        let listed = self.store.list(&folder, LIST_LIMIT).map_err(io_err)?;
        let c = InBucket {
            store: self.store.as_ref(),
            folder: folder.clone(),
            objects: &listed,
            skip: None,
        };
        let Ok(present) = c.present() else {
            return Ok(());
        };
        for name in present.iter().filter(|n| n.ends_with(LOCK_SUFFIX)) {
            let key = format!("{folder}/{name}");
            let Some(j) = object::judge(self.store.as_ref(), &key, Some(FOREIGN_LOCK_LEASE))
                .map_err(io_err)?
            else {
                continue;
            };
            let age = now_ms().saturating_sub(j.modified_ms) / 1000;
            let path = e.path.join(name).display().to_string();
            let Some(why) = maintain::why_stale(&j.holder, age, req, r, &path) else {
                continue;
            };
            let foreign = j.holder.is_foreign();
            let removed = req.dry_run
                || object::remove_stale(&self.store, &key, &j, foreign).map_err(io_err)?;
            if removed {
                r.removed.push(Removal {
                    path,
                    why: format!(
                        "{why}, {age} s old ({})",
                        crate::lockfile::shown(j.holder.text())
                    ),
                });
            }
        }
        Ok(())
    }

    fn remove_version(&self, version: &str) -> io::Result<()> {
        let vdir = version_dir_name(version);
        for o in self.store.list(&vdir, LIST_LIMIT).map_err(io_err)? {
            self.store.delete(&o.name).map_err(io_err)?;
        }
        Ok(())
    }
}

impl Bucket {
    /// The version folders under the prefix (`neuronxcc-*`), sorted.
    fn version_folders(&self) -> io::Result<Vec<String>> {
        let level = self.store.list_dir("", LIST_LIMIT).map_err(io_err)?;
        let mut names: Vec<String> = level
            .folders
            .into_iter()
            .filter(|n| n.starts_with(VERSION_PREFIX) && n.len() > VERSION_PREFIX.len())
            .collect();
        names.sort();
        Ok(names)
    }

    /// The key of the file `name` of `e`, its names checked.
    fn key(&self, e: &Entry, name: &str) -> io::Result<String> {
        let vdir = version_dir_name(&e.version);
        if [vdir.as_str(), &e.name, name].iter().all(|n| plain(n)) {
            return Ok(format!("{vdir}/{}/{name}", e.name));
        }
        Err(io::Error::other(format!(
            "{}/{name}: not a name the framework writes",
            e.name
        )))
    }
}

/// An entry of a bucket locked: its lock object held.
struct BucketLock {
    store: Arc<dyn Storage>,
    folder: String,
    name: String,
    break_foreign: bool,
    lock: ObjectLock,
}

impl fmt::Debug for BucketLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BucketLock({})", self.lock.name())
    }
}

/// A store's error as a result not written.
fn not_written(e: StorageError) -> NotWritten {
    NotWritten::Io(io_err(e))
}

impl BucketLock {
    fn key(&self, file: &str) -> String {
        format!("{}/{file}", self.folder)
    }

    fn ours(&self) -> Result<(), NotWritten> {
        self.lock.verify().map_err(NotWritten::Lost)
    }

    /// Whether the entry's graph object is still the one `compiled` (downloaded, bounded by
    /// the HLO reader's limit, and hashed).
    fn graph_unchanged(&self, compiled: &Compiled) -> Result<(), NotWritten> {
        let key = self.key(compiled.graph);
        compiled.check(
            |w| match self.store.get_into(&key, crate::hlo::READ_LIMIT, w) {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(io::ErrorKind::NotFound.into()),
                Err(e) => Err(io_err(e)),
            },
        )
    }

    fn own_lock(&self) -> &str {
        self.lock
            .name()
            .rsplit_once('/')
            .map_or(self.lock.name(), |(_, n)| n)
    }
}

impl EntryLock for BucketLock {
    fn took_over(&self) -> Option<&LockOwner> {
        self.lock.replaced.as_ref()
    }

    fn verify(&self) -> Result<(), String> {
        self.lock.verify()
    }

    fn look(&self) -> Class {
        let listed = match self.store.list(&self.folder, LIST_LIMIT) {
            Ok(l) => l,
            Err(e) => return Class::Refused(format!("its objects cannot be listed: {e}")),
        };
        let c = InBucket {
            store: self.store.as_ref(),
            folder: self.folder.clone(),
            objects: &listed,
            skip: Some(self.own_lock()),
        };
        classify::look(&c, &self.name, self.break_foreign)
    }

    fn publish_neff(&self, neff: &Path, compiled: &Compiled) -> Result<(), NotWritten> {
        let file = std::fs::File::open(neff)?;
        self.ours()?;
        self.graph_unchanged(compiled)?;
        let (neff_key, done_key) = (self.key(NEFF_FILE), self.key(DONE_FILE));
        let seen = self.store.head(&neff_key).map_err(not_written)?;
        let done = self.store.head(&done_key).map_err(not_written)?;
        if seen.is_some() && done.is_some() {
            return Err(NotWritten::Lost("the entry was finished by another".into()));
        }
        let mode = match seen {
            None => PutMode::Create,
            Some(Info { etag: Some(t), .. }) => PutMode::Replace(t),
            Some(_) => PutMode::Overwrite,
        };
        if let Put::Refused = self
            .store
            .put_file(&neff_key, file, mode)
            .map_err(not_written)?
        {
            return Err(NotWritten::Lost(format!(
                "another wrote its {NEFF_FILE} meanwhile"
            )));
        }
        self.ours()?;
        let put = self.store.put(&done_key, Vec::new(), PutMode::Create);
        if let Put::Refused = put.map_err(not_written)? {
            return Err(NotWritten::Lost(format!(
                "another published it first (its {DONE_FILE} is there)"
            )));
        }
        self.store.delete(&self.key(LOG_FILE)).map_err(not_written)
    }

    fn write_log(&self, text: &str, compiled: &Compiled) -> Result<(), NotWritten> {
        self.ours()?;
        self.graph_unchanged(compiled)?;
        if self
            .store
            .head(&self.key(NEFF_FILE))
            .map_err(not_written)?
            .is_some()
        {
            return Err(NotWritten::Lost("the entry was finished by another".into()));
        }
        let bytes = text.as_bytes().to_vec();
        self.store
            .put(&self.key(LOG_FILE), bytes, PutMode::Overwrite)
            .map(|_| ())
            .map_err(not_written)
    }

    fn remove_log(&self) -> io::Result<()> {
        self.store.delete(&self.key(LOG_FILE)).map_err(io_err)
    }
}

/// Now, milliseconds since the epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
