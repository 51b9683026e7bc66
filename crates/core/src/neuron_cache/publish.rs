//! Writing results into a framework cache entry: only the framework's own files, each whole,
//! each after checking that the entry is still ours to write.
//!
//! A compile runs in a private work directory outside the cache; nothing of it appears in the
//! entry until it is published. [`publish_neff`] copies the NEFF into the entry as an unnamed
//! file, gives it the name `model.neff` by a rename (a reader sees no NEFF or a whole one), then
//! creates `model.done` and removes an earlier `model.log`; [`write_log`] writes `model.log`
//! whole. Before each of these writes the caller's check runs (the entry's lock still its own,
//! [`crate::lockfile::Lock::verify`]), and the entry must not be done: a result whose lock was
//! lost, or whose entry someone else finished meanwhile, is given up — never a second writer,
//! never a `model.log` beside a finished NEFF.

use std::io::{self, Write};
use std::path::Path;

use super::{DONE_FILE, LOG_FILE, NEFF_FILE, STAGING_PREFIX};
use crate::fsx::{AtomicFile, Dir, Durability};

/// Why a result was not written.
#[derive(Debug)]
pub enum NotWritten {
    /// The entry's lock is no longer ours (why), or the entry was finished by another.
    Lost(String),
    /// The entry's graph is no longer the one compiled (what changed): the result belongs to
    /// another graph.
    Changed(String),
    /// Writing failed.
    Io(io::Error),
}

impl std::fmt::Display for NotWritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotWritten::Lost(why) | NotWritten::Changed(why) => write!(f, "{why}"),
            NotWritten::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for NotWritten {
    fn from(e: io::Error) -> Self {
        NotWritten::Io(e)
    }
}

/// The entry's check before a write: the caller's (`ours`), then not done (a NEFF with its
/// marker, or — `neff_too` — any NEFF).
fn still_ours(
    entry: &Dir,
    ours: &dyn Fn() -> Result<(), String>,
    neff_too: bool,
) -> Result<(), NotWritten> {
    ours().map_err(NotWritten::Lost)?;
    let neff = entry.stat(NEFF_FILE).is_ok();
    if neff && (neff_too || entry.stat(DONE_FILE).is_ok()) {
        return Err(NotWritten::Lost("the entry was finished by another".into()));
    }
    Ok(())
}

/// Publish the NEFF at `neff` (a file of the private work directory) into the entry open at
/// `entry` (see the module documentation).
pub fn publish_neff(
    entry: &Dir,
    neff: &Path,
    ours: &dyn Fn() -> Result<(), String>,
) -> Result<(), NotWritten> {
    let mut from = std::fs::File::open(neff)?;
    still_ours(entry, ours, false)?;
    let mut f = AtomicFile::create_in(entry, NEFF_FILE)?;
    io::copy(&mut from, &mut f)?;
    still_ours(entry, ours, false)?;
    f.commit(Durability::Visible)?;
    ours().map_err(NotWritten::Lost)?;
    AtomicFile::create_in(entry, DONE_FILE)?.commit(Durability::Visible)?;
    match entry.remove_file(LOG_FILE) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Write `text` as the entry's `model.log` (whole or not at all), unless the lock is lost or
/// the entry holds a NEFF.
pub fn write_log(
    entry: &Dir,
    text: &str,
    ours: &dyn Fn() -> Result<(), String>,
) -> Result<(), NotWritten> {
    still_ours(entry, ours, true)?;
    let mut f = AtomicFile::create_in(entry, LOG_FILE)?;
    f.write_all(text.as_bytes())?;
    still_ours(entry, ours, true)?;
    f.commit(Durability::Visible)?;
    Ok(())
}

/// The pid a staging directory's name carries (`.nxcc-tmp-<pid>-<n>-<ns>`, made by earlier
/// releases of nxcc in the entry itself).
fn staging_pid(name: &str) -> Option<u32> {
    name.strip_prefix(STAGING_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// The staging directories in an entry whose maker no longer runs on this host (names only).
pub(crate) fn dead_leftovers(entry: &Dir) -> Vec<String> {
    let Ok(items) = entry.entries() else {
        return Vec::new();
    };
    items
        .filter_map(|(n, _)| n.into_string().ok())
        .filter(|n| n.starts_with(STAGING_PREFIX))
        .filter(|n| staging_pid(n).is_none_or(|pid| crate::lockfile::start_ticks(pid).is_none()))
        .collect()
}

/// Remove the staging directories of dead makers from an entry (the caller holds its lock); how
/// many were removed.
pub(crate) fn remove_leftovers(entry: &Dir) -> usize {
    dead_leftovers(entry)
        .iter()
        .filter(|n| entry.remove_all(n).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_neff_is_published_whole_only_while_ours_and_a_log_never_beside_a_neff() {
        let t = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let e = Dir::open(t.path()).unwrap();
        let neff = work.path().join("model.MODULE_x.neff");
        std::fs::write(&neff, b"neff").unwrap();
        std::fs::write(t.path().join(LOG_FILE), "old failure").unwrap();
        // Not ours: nothing written.
        let lost = || Err::<(), String>("gone".into());
        assert!(matches!(
            publish_neff(&e, &neff, &lost),
            Err(NotWritten::Lost(_))
        ));
        assert!(!t.path().join(NEFF_FILE).exists());
        let ours = || Ok::<(), String>(());
        publish_neff(&e, &neff, &ours).unwrap();
        assert_eq!(std::fs::read(t.path().join(NEFF_FILE)).unwrap(), b"neff");
        assert!(t.path().join(DONE_FILE).exists());
        assert!(!t.path().join(LOG_FILE).exists());
        // Done: neither a second NEFF nor a log.
        assert!(matches!(
            publish_neff(&e, &neff, &ours),
            Err(NotWritten::Lost(_))
        ));
        assert!(matches!(
            write_log(&e, "x", &ours),
            Err(NotWritten::Lost(_))
        ));
        assert!(!t.path().join(LOG_FILE).exists());
        let names: Vec<String> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // Leftovers of a process that does not run go; a live one's stay.
        std::fs::create_dir(t.path().join(".nxcc-tmp-999999999-0-0")).unwrap();
        let live = format!(".nxcc-tmp-{}-0-0", std::process::id());
        std::fs::create_dir(t.path().join(&live)).unwrap();
        assert_eq!(remove_leftovers(&e), 1);
        assert!(t.path().join(&live).exists());
    }
}
