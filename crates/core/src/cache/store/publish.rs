//! Publication and eviction of entries: an entry is written whole in a fresh `0700` temporary
//! directory (`<2 hex>/.tmp-<key>-...`, [`Pending`]) and published by one rename onto its name,
//! so a reader sees a whole entry or none; it is removed by renaming it away
//! (`.evict-<key>-...`) and deleting it then, so no half-deleted entry is ever visible — and,
//! by eviction for size, never under a reader of this host.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::OFlags;

use super::io::{copy_hashing, CopyError};
use super::scan::dir_bytes;
use super::{shard_of, Cache, EVICT_PREFIX, TMP_PREFIX};
use crate::cache::meta::{Meta, FAILED_FILE, LOG_FILE, META_FILE, NEFF_FILE};
use crate::fsx::dir::is_not_plain;
use crate::fsx::{unique, Dir};

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

impl Cache {
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
    pub(crate) fn begin_copy(
        &self,
        from: &Cache,
        key: &str,
        meta: &Meta,
    ) -> std::io::Result<Pending> {
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
        for name in [META_FILE, LOG_FILE, FAILED_FILE] {
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
}

/// Rename `name` of `dir` away, then delete it. `false` if it was not there. Once renamed away
/// it is gone from the cache: what its deletion leaves is a leftover for `gc`.
pub(crate) fn evict_in(dir: &Dir, name: &str) -> std::io::Result<bool> {
    match rename_away(dir, name)? {
        Some(away) => {
            let _ = delete_away(dir, &away);
            Ok(true)
        }
        None => Ok(false),
    }
}

/// How long [`delete_away`] waits for a file system to let go of files just closed.
const RELEASE_WAIT: Duration = Duration::from_secs(3);

/// Delete `away`, an entry already renamed out of the cache. A file closed a moment ago may still
/// be open to a FUSE file system (its release is asynchronous) or an NFS client: deleting it
/// then leaves it under a hidden name (`.fuse_hidden…`, `.nfs…`) until the file system lets it
/// go, and the directory cannot be removed before. So a removal that finds the directory not
/// empty is tried again until the hidden names are gone — for up to [`RELEASE_WAIT`]; what is
/// still there then (a file another process of this host keeps open) is a leftover for `gc`.
fn delete_away(dir: &Dir, away: &str) -> std::io::Result<()> {
    let deadline = Instant::now() + RELEASE_WAIT;
    let mut pause = Duration::from_millis(2);
    loop {
        match dir.remove_all(away) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if held_by_the_file_system(&e) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether a removal failed because a file system still holds a deleted file (its directory
/// not empty, or busy).
fn held_by_the_file_system(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == libc::ENOTEMPTY || code == libc::EBUSY
    )
}

/// Rename `name` of `dir` to a fresh `.evict-` name, which it returns (`None`: it was not there).
fn rename_away(dir: &Dir, name: &str) -> std::io::Result<Option<String>> {
    let away = unique::name(&format!("{EVICT_PREFIX}{name}-"));
    match dir.rename(name, dir, &away) {
        Ok(()) => Ok(Some(away)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What `evict_unread` did.
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
/// reads under a shared one), so an entry is never removed under its reader. The files are
/// deleted once they are closed, and once the file system has let them go ([`delete_away`]);
/// once renamed away, the entry is gone from the cache, and what its deletion leaves is a
/// leftover for `gc`.
pub(crate) fn evict_unread(shard: &Dir, key: &str) -> std::io::Result<Evicted> {
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
    let Some(away) = rename_away(shard, key)? else {
        return Ok(Evicted::Gone);
    };
    drop(_held);
    drop(dir);
    let _ = delete_away(shard, &away);
    Ok(Evicted::Removed(bytes))
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
