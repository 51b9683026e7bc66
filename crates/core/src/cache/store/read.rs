//! Reading an entry: what the cache holds for a key (from `meta.json` and `failed.json`), a hit
//! served to its output with its NEFF verified against the recorded blake3 on the way, and an
//! entry's use recorded and read back.

use std::fs::File;
use std::path::Path;

use rustix::fs::OFlags;

use super::io::{copy_hashing, copy_plain, read_json_in, CopyError};
use super::scan::{dir_bytes, mtime_ms};
use super::Cache;
use crate::cache::digests::{now_ns, Kind, StatId, Table};
use crate::cache::meta::{Failed, Meta, NeffInfo, Status, FAILED_FILE, META_FILE, NEFF_FILE};
use crate::fsx::dir::is_not_plain;
use crate::fsx::{AtomicFile, Dir, Durability};

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

impl Cache {
    /// What the cache holds for `key` (reads `meta.json` and `failed.json` only).
    pub(crate) fn lookup(&self, key: &str) -> Lookup {
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
    /// an [`AtomicFile`] at `output`, committed only when it matches. A NEFF verified before and
    /// unchanged since (its blake3 remembered for its stat identity in `table`,
    /// [`crate::cache::digests`]) is copied without reading the copy back.
    pub fn serve(
        &self,
        key: &str,
        neff: &NeffInfo,
        output: &Path,
        table: &Table,
    ) -> Result<(), ServeError> {
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
        match copy_verified(&src, dst.file(), neff, table) {
            Ok(true) => {}
            Ok(false) => {
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
    pub(crate) fn entry_bytes(&self, key: &str) -> Option<u64> {
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
}

/// Copy an entry's NEFF `src` to `dst`; whether what was copied matches `neff`. When `table`
/// remembers `src`'s blake3 for its stat identity, that is the check (and the size copied);
/// else what `dst` holds is hashed, and `src`'s blake3 remembered when it did not change
/// meanwhile.
fn copy_verified(
    src: &File,
    dst: &File,
    neff: &NeffInfo,
    table: &Table,
) -> Result<bool, CopyError> {
    let start = now_ns();
    let before = StatId::of_file(src).map_err(CopyError::Read)?;
    let remembered = table.recall_of(Kind::Blake3, &before);
    if before.size == neff.size && remembered.as_ref() == Some(&neff.blake3) {
        return Ok(copy_plain(src, dst)? == neff.size);
    }
    let (hash, size) = copy_hashing(src, dst)?;
    if hash.to_hex().as_str() != neff.blake3 || size != neff.size {
        return Ok(false);
    }
    if StatId::of_file(src).is_ok_and(|after| after == before) {
        table.remember_of(Kind::Blake3, &before, &neff.blake3, start);
    }
    Ok(true)
}

/// What the entry open at `dir` holds, `key` being its name.
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
    if meta.status == Status::Failed {
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
