//! `neff-info --extract-all DIR`: unpack every member into a new directory, all or nothing, and
//! never outside it.
//!
//! The whole archive is checked first (names, entry types, limits). Then the members are written
//! into a fresh temporary directory beside `DIR` (made with the user's umask), relative to its
//! descriptor, every directory component opened with `O_NOFOLLOW`; only when every member is
//! written is the temporary directory renamed to `DIR`. An archive that fails on the way (a member
//! `a` and then `a/b`, a full disk) leaves nothing: the temporary directory is removed. `DIR` must
//! not exist, or be an empty directory (which the rename replaces); a non-empty directory or
//! anything else there is refused before anything is written, and is never changed.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{mkdirat, openat, Mode, OFlags};
use rustix::io::Errno;

use super::read::{Member, Neff};
use super::{names, NeffError};

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Open (creating it when missing) the directory `name` inside `parent`, refusing symbolic links
/// and non-directories.
fn enter(parent: &OwnedFd, name: &str, shown_path: &str) -> Result<OwnedFd, NeffError> {
    match mkdirat(parent, name, Mode::from_raw_mode(0o777)) {
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

/// Write one new file's data into `dir` under `name` (which must not exist: in a fresh
/// directory, a second member of the same path is refused by the archive check).
fn write_file(
    dir: &OwnedFd,
    name: &str,
    shown_path: &str,
    fill: &mut dyn FnMut(&mut dyn Write) -> Result<u64, NeffError>,
) -> Result<(), NeffError> {
    let fd = openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )
    .map_err(|e| match e {
        Errno::EXIST | Errno::ISDIR => NeffError::Unsafe(format!(
            "member '{shown_path}' is written where the archive already made a directory or file"
        )),
        e => NeffError::io(shown_path, e.into()),
    })?;
    let mut file = std::io::BufWriter::new(std::fs::File::from(fd));
    fill(&mut file)?;
    file.flush().map_err(|e| NeffError::io(shown_path, e))
}

/// What is at the target now, and whether extraction may replace it.
fn check_target(dir: &Path) -> Result<(), NeffError> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(NeffError::io(dir, e)),
        Ok(m) if m.is_dir() => {
            let mut entries = std::fs::read_dir(dir).map_err(|e| NeffError::io(dir, e))?;
            if entries.next().is_some() {
                Err(target(
                    dir,
                    "it exists and is not empty; extract into a new or empty directory",
                ))
            } else {
                Ok(())
            }
        }
        Ok(_) => Err(target(
            dir,
            "it exists and is not a directory (or is a symbolic link); extract into a new or empty directory",
        )),
    }
}

fn target(dir: &Path, reason: &str) -> NeffError {
    NeffError::Target {
        path: dir.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// A temporary directory beside the target, removed unless kept.
struct Staging {
    path: std::path::PathBuf,
    kept: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Make a fresh directory beside `dir` (mode 0777 less the umask).
fn staging_for(dir: &Path) -> Result<Staging, NeffError> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| NeffError::io(&parent, e))?;
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base: String = base.chars().take(100).collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    for attempt in 0u32..100 {
        let path = parent.join(format!(
            ".{base}.nxcc-extract-{}-{nanos:x}-{attempt}",
            std::process::id()
        ));
        match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o777)) {
            Ok(()) => return Ok(Staging { path, kept: false }),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(NeffError::io(&parent, e.into())),
        }
    }
    Err(NeffError::io(
        &parent,
        std::io::Error::other("cannot make a unique temporary directory"),
    ))
}

/// Unpack every member into `dir` (new, or an empty directory), all or nothing. Returns the
/// members written.
pub fn extract_all(neff: &Neff, dir: &Path) -> Result<Vec<Member>, NeffError> {
    // The whole archive and the target are checked before anything is created.
    let members = neff.members()?;
    check_target(dir)?;
    let mut staging = staging_for(dir)?;
    let root = openat(rustix::fs::CWD, &staging.path, dir_flags(), Mode::empty())
        .map_err(|e| NeffError::io(&staging.path, e.into()))?;
    unpack(neff, &root, dir)?;
    drop(root);
    std::fs::rename(&staging.path, dir).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTEMPTY) | Some(libc::EEXIST) | Some(libc::ENOTDIR) | Some(libc::EISDIR) => {
            target(
                dir,
                "it changed while extracting (it is no longer missing or empty); nothing was extracted",
            )
        }
        _ => NeffError::io(dir, e),
    })?;
    staging.kept = true;
    Ok(members)
}

/// Write every member under the directory `root` (`dir`: the target's name, for messages).
fn unpack(neff: &Neff, root: &OwnedFd, dir: &Path) -> Result<(), NeffError> {
    let mut scan = neff.scan();
    while let Some(entry) = scan.next_entry()? {
        // The scanner hands out normalised names only; check again before touching the disk.
        let name = names::normalise(&entry.name).map_err(|e| NeffError::Unsafe(e.to_string()))?;
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
            write_file(&cur, f, &name, &mut |out| scan.copy_data(out))?;
        }
    }
    Ok(())
}
