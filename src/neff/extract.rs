//! `neff-info --extract-all DIR`: unpack every member under a directory and never outside it.
//!
//! The whole archive is checked first (names, entry types, limits), so a hostile archive writes
//! nothing at all. Then the members are written relative to a directory descriptor: every
//! directory component is opened with `O_NOFOLLOW`, so a symbolic link already inside the target
//! (planted, or left by an earlier run) cannot lead a write elsewhere; each file is written to a
//! temporary name beside it and renamed into place, so no member is left half-written.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{mkdirat, openat, renameat, unlinkat, AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::read::{Member, Neff};
use super::{names, NeffError};

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Open (creating it when missing) the directory `name` inside `parent`, refusing symbolic links
/// and non-directories.
fn enter(parent: &OwnedFd, name: &str, shown_path: &str) -> Result<OwnedFd, NeffError> {
    match mkdirat(parent, name, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(NeffError::io(shown_path, e.into())),
    }
    openat(parent, name, dir_flags(), Mode::empty()).map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR => NeffError::Unsafe(format!(
            "'{shown_path}' in the target directory is not a directory (or is a symbolic link); \
             nothing is written through it"
        )),
        e => NeffError::io(shown_path, e.into()),
    })
}

/// Write one file's data into `dir` under `name`: a temporary name, then a rename.
fn write_file(
    dir: &OwnedFd,
    name: &str,
    shown_path: &str,
    serial: u64,
    fill: &mut dyn FnMut(&mut dyn Write) -> Result<u64, NeffError>,
) -> Result<(), NeffError> {
    let mut tmp = format!(".{name}.nxcc-{}-{serial}.tmp", std::process::id());
    if tmp.len() > 255 {
        tmp = format!(".nxcc-{}-{serial}.tmp", std::process::id());
    }
    let fd = openat(
        dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| NeffError::io(shown_path, e.into()))?;
    let mut file = std::io::BufWriter::new(std::fs::File::from(fd));
    let written = fill(&mut file).and_then(|_| {
        file.flush().map_err(|e| NeffError::io(shown_path, e))?;
        renameat(dir, tmp.as_str(), dir, name).map_err(|e| NeffError::io(shown_path, e.into()))
    });
    if written.is_err() {
        let _ = unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    written
}

/// Unpack every member under `dir` (created when missing). Returns the members written.
pub fn extract_all(neff: &Neff, dir: &Path) -> Result<Vec<Member>, NeffError> {
    // The whole archive is checked before anything is created.
    let members = neff.members()?;
    std::fs::create_dir_all(dir).map_err(|e| NeffError::io(dir, e))?;
    let root = openat(
        rustix::fs::CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| NeffError::io(dir, e.into()))?;
    let mut scan = neff.scan();
    let mut serial = 0u64;
    while let Some(entry) = scan.next_entry()? {
        // The scanner hands out normalised names only; check again before touching the disk.
        let name = names::normalise(&entry.name).map_err(NeffError::Unsafe)?;
        let parts: Vec<&str> = name.split('/').collect();
        let (dirs, file) = if entry.is_dir {
            (&parts[..], None)
        } else {
            (&parts[..parts.len() - 1], parts.last().copied())
        };
        let mut cur = root
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| NeffError::io(dir, e))?;
        let mut shown = String::new();
        for d in dirs {
            if !shown.is_empty() {
                shown.push('/');
            }
            shown.push_str(d);
            cur = enter(&cur, d, &shown)?;
        }
        if let Some(f) = file {
            serial += 1;
            write_file(&cur, f, &name, serial, &mut |out| scan.copy_data(out))?;
        }
    }
    Ok(members)
}
