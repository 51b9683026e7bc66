//! Writing results into a framework cache entry so that a reader sees nothing or a whole NEFF.
//!
//! A compile writes into a [`Staging`] directory of the entry (`.nxcc-tmp-<unique>`, mode
//! `0700`, made through the entry's descriptor): its NEFF there is named `model.neff` (the name
//! the NEFF records), so it is the same file a compile straight to `model.neff` writes.
//! [`Staging::publish`] then renames it to the entry's `model.neff` (one rename between two
//! directories of one file system: the name holds nothing, or the whole file) and, after it,
//! creates `model.done` and removes an earlier `model.log`. A failure of the graph is written
//! as `model.log` ([`write_log`]) through an atomic file. The staging directory is removed when
//! dropped, whatever happened.

use std::io::{self, Write};

use super::{DONE_FILE, LOG_FILE, NEFF_FILE, STAGING_PREFIX};
use crate::fsx::{unique, AtomicFile, Dir, Durability};

/// A fresh staging directory name ([`STAGING_PREFIX`] and a unique part).
pub fn staging_name() -> String {
    unique::name(STAGING_PREFIX)
}

/// A staging directory of an entry (removed when dropped).
#[derive(Debug)]
pub struct Staging {
    entry: Dir,
    name: String,
    dir: Dir,
}

impl Staging {
    /// Make the staging directory `name` ([`staging_name`]) in the entry open at `entry`.
    pub fn create(entry: &Dir, name: &str) -> io::Result<Staging> {
        entry.create_dir(name, Some(0o700))?;
        let dir = entry.open_dir(name)?;
        Ok(Staging {
            entry: entry.try_clone()?,
            name: name.to_string(),
            dir,
        })
    }

    /// Its name in the entry.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Put the NEFF the compile wrote here in place: renamed to the entry's `model.neff`, then
    /// `model.done` created and any `model.log` removed.
    pub fn publish(self) -> io::Result<()> {
        // The file must be a plain file of ours (not a link someone put there).
        drop(self.dir.open_file(NEFF_FILE)?);
        self.dir.rename(NEFF_FILE, &self.entry, NEFF_FILE)?;
        AtomicFile::create_in(&self.entry, DONE_FILE)?.commit(Durability::Visible)?;
        match self.entry.remove_file(LOG_FILE) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.entry.remove_all(&self.name);
    }
}

/// Write `text` as the entry's `model.log` (whole or not at all).
pub fn write_log(entry: &Dir, text: &str) -> io::Result<()> {
    let mut f = AtomicFile::create_in(entry, LOG_FILE)?;
    f.write_all(text.as_bytes())?;
    f.commit(Durability::Visible)
}

/// Remove the staging directories left in an entry by runs that died (the caller holds the
/// entry's lock, so none of them is in use); how many were removed.
pub fn remove_leftovers(entry: &Dir) -> usize {
    let Ok(items) = entry.entries() else {
        return 0;
    };
    let names: Vec<String> = items
        .filter_map(|(n, _)| n.into_string().ok())
        .filter(|n| n.starts_with(STAGING_PREFIX))
        .collect();
    names.iter().filter(|n| entry.remove_all(n).is_ok()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_neff_arrives_whole_then_done() {
        let t = tempfile::tempdir().unwrap();
        let e = Dir::open(t.path()).unwrap();
        std::fs::write(t.path().join(LOG_FILE), "old failure").unwrap();
        let name = staging_name();
        let s = Staging::create(&e, &name).unwrap();
        std::fs::write(t.path().join(&name).join(NEFF_FILE), b"neff").unwrap();
        s.publish().unwrap();
        assert_eq!(std::fs::read(t.path().join(NEFF_FILE)).unwrap(), b"neff");
        assert!(t.path().join(DONE_FILE).exists());
        assert!(!t.path().join(LOG_FILE).exists());
        assert!(!t.path().join(&name).exists());
        // Nothing written: nothing published, the staging directory gone.
        let s = Staging::create(&e, &staging_name()).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", t.path().join(s.name()).join(NEFF_FILE)).unwrap();
        assert!(s.publish().is_err());
        assert_eq!(std::fs::read(t.path().join(NEFF_FILE)).unwrap(), b"neff");
        let left: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(STAGING_PREFIX))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        write_log(&e, "error lines\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(t.path().join(LOG_FILE)).unwrap(),
            "error lines\n"
        );
        std::fs::create_dir(t.path().join(".nxcc-tmp-dead")).unwrap();
        assert_eq!(remove_leftovers(&e), 1);
    }
}
