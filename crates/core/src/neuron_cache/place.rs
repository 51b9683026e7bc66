//! Where a framework cache is kept, as the operations on its entries that differ between a
//! directory ([`super::directory::Directory`]) and a bucket ([`super::bucket::Bucket`]): the
//! scan, reading an entry's files (bounded), an entry's lock, and what is written under it.
//! Everything else — which entries are compiled, the compile, the flags' checks, what a result
//! leaves, `stats`, `verify`, `clean` — is written once, over this interface.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::cleaning::{CleanReport, CleanRequest};
use super::lock::CacheGuard;
use super::publish::NotWritten;
use super::{version_dir_name, Class, Entry, LockOwner, Scan};

/// The cache held for a scan and the reads that follow it (a directory's cache-wide lock;
/// nothing in a bucket), released when dropped.
pub struct Hold<'a>(pub Option<CacheGuard<'a>>);

/// A framework cache's entries, wherever they are kept.
pub trait Place: Send + Sync + fmt::Debug {
    /// The cache as the user named it: a directory's path, `s3://BUCKET/PREFIX`.
    fn shown(&self) -> String;
    /// Where the entry `name` of `version` is, as shown (its path, its URL).
    fn entry_path(&self, version: &str, name: &str) -> PathBuf {
        Path::new(&self.shown())
            .join(version_dir_name(version))
            .join(name)
    }
    /// Hold the cache for a scan and what follows it (`say` hears that this waits).
    fn hold(&self, say: &dyn Fn(&str)) -> io::Result<Hold<'_>>;
    /// Every version (or only `only`) and its entries, classified.
    fn scan(&self, only: Option<&str>) -> io::Result<Scan>;
    /// The versions the cache holds (their names without `neuronxcc-`), sorted.
    fn versions(&self) -> io::Result<Vec<String>>;
    /// The file `name` of `e` whole, refused past `limit` bytes (`NotFound` if absent).
    fn read(&self, e: &Entry, name: &str, limit: u64) -> io::Result<Vec<u8>>;
    /// Copy the file `name` of `e` into the new file `to` (a private work directory's), refused
    /// past `limit` bytes.
    fn copy(&self, e: &Entry, name: &str, limit: u64, to: &Path) -> io::Result<()>;
    /// Take the lock of the entry `name` of `version` whose graph is `graph` (a stale lock
    /// taken over; a foreign one too with `break_foreign`).
    fn lock(&self, version: &str, name: &str, graph: &str, break_foreign: bool) -> Taken;
    /// `clean --locks` on `e`: its stale locks removed as `req` says, into `r`.
    fn clean_locks(&self, e: &Entry, req: &CleanRequest, r: &mut CleanReport) -> io::Result<()>;
    /// `clean --old-versions`: remove the version `version` whole.
    fn remove_version(&self, version: &str) -> io::Result<()>;
}

/// What trying to lock an entry gave.
pub enum Taken {
    /// Taken.
    Locked(Box<dyn EntryLock>),
    /// Another holds it (and keeps it).
    Busy(LockOwner),
    /// It cannot be locked (why).
    Refused(String),
}

/// An entry's lock held: what may be done to the entry under it. Every write checks first that
/// the lock is still this holder's.
pub trait EntryLock: Send + fmt::Debug {
    /// The lock taken over, if one was.
    fn took_over(&self) -> Option<&LockOwner>;
    /// Whether the lock is still this holder's; why not.
    fn verify(&self) -> Result<(), String>;
    /// How the entry stands now, its own lock left out ([`super::classify::look`]; foreign locks
    /// not counted when it was taken breaking them).
    fn look(&self) -> Class;
    /// Remove what dead earlier runs left in the entry (nothing by default).
    fn tidy(&self) {}
    /// Publish the NEFF at `neff` (a file of the private work directory) as `model.neff`, then
    /// `model.done`, only while the entry's graph is still the one `compiled`; an earlier
    /// `model.log` goes.
    fn publish_neff(&self, neff: &Path, compiled: &Compiled) -> Result<(), NotWritten>;
    /// Write `text` as the entry's `model.log`, unless it holds a NEFF, only while the entry's
    /// graph is still the one `compiled`.
    fn write_log(&self, text: &str, compiled: &Compiled) -> Result<(), NotWritten>;
    /// Remove the entry's `model.log` (`clean --failed`).
    fn remove_log(&self) -> io::Result<()>;
}

/// The graph a result was compiled from: the entry's graph file and the blake3 of its copy. A
/// result is written into the entry only while the entry's graph still has that blake3.
#[derive(Debug, Clone, Copy)]
pub struct Compiled<'a> {
    /// The graph file's name in the entry.
    pub graph: &'a str,
    /// The blake3 (hex) of the copy that was compiled.
    pub blake3: &'a str,
}

impl Compiled<'_> {
    /// Whether the entry's graph, streamed into a writer by `read` (bounded by the caller), is
    /// still the one compiled; `Err` says what changed.
    pub fn check(
        &self,
        read: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
    ) -> Result<(), NotWritten> {
        let mut h = blake3::Hasher::new();
        let now = read(&mut h)
            .map(|()| h.finalize().to_hex().to_string())
            .map_err(|e| NotWritten::Changed(format!("its {} cannot be read: {e}", self.graph)))?;
        if now != self.blake3 {
            return Err(NotWritten::Changed(format!(
                "its {} is not the graph compiled (blake3 {}, compiled {})",
                self.graph,
                &now[..12],
                self.blake3.get(..12).unwrap_or(self.blake3)
            )));
        }
        Ok(())
    }
}
