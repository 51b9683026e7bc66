//! [`AtomicFile`]: the one way nxcc publishes a file (a NEFF at `--output`, a cache entry's
//! files, reports, metrics, estimates, the simulated tools' outputs).
//!
//! The file is written where no reader can see it — an unnamed file of the target's directory
//! (`O_TMPFILE`), or, where the file system cannot make one, a [`super::unique::name`] beside the
//! target — and put in place by [`AtomicFile::commit`]: a rename over the target, so a reader
//! finds the old file or the whole new one, never a part. Until then nothing is at the target:
//!
//! - dropped without a commit (an error on the way), it leaves nothing behind;
//! - its process killed before the commit, an unnamed file leaves nothing either (the kernel
//!   frees it with the last descriptor); only the named fallback can leave its temporary name;
//! - two writers of one target never share a temporary (each has its own file), the last
//!   commit wins.
//!
//! How far a commit holds is the caller's choice, [`Durability`]. The directory may be given as
//! a [`Dir`] (a descriptor: the target is then reached without following any link, as the compile
//! cache needs) or as the parent of a path.
//!
//! ```
//! use std::io::Write;
//! use nxcc_core::fsx::{AtomicFile, Durability};
//! let dir = tempfile::tempdir().unwrap();
//! let mut f = AtomicFile::create(&dir.path().join("report.json")).unwrap();
//! f.write_all(b"{}\n").unwrap();
//! f.commit(Durability::Visible).unwrap();
//! ```

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::dir::Dir;
use super::unique;

/// What a committed file survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Every reader on the running system sees the old file or the whole new one. Nothing is
    /// synced: after a power loss or a kernel crash the old file, the new one, or (on some file
    /// systems) an empty one may be found. For files that can be made again (NEFFs, reports,
    /// cache entries, which are verified when read).
    Visible,
    /// As [`Durability::Visible`], and once `commit` returns the new file survives a power loss:
    /// the file is synced before the rename, the directory after it.
    Durable,
}

/// A file being written, published at its target by [`AtomicFile::commit`] (see the module
/// documentation).
#[derive(Debug)]
pub struct AtomicFile {
    file: File,
    dir: Dir,
    target: OsString,
    /// The temporary name when the file has one (the fallback without `O_TMPFILE`).
    named: Option<OsString>,
    mode: Option<u32>,
}

fn check_name(name: &OsStr) -> io::Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not name a file", name.to_string_lossy()),
        ));
    }
    Ok(())
}

/// The temporary name of `target`: `.<target>.nxcc-tmp-<unique>`, or `.nxcc-tmp-<unique>` when
/// that would be too long a name.
fn temp_name(target: &OsStr) -> OsString {
    let mut n = OsString::from(".");
    if target.len() <= 200 {
        n.push(target);
        n.push(".");
    }
    n.push(unique::name("nxcc-tmp-"));
    n
}

impl AtomicFile {
    /// A new file to be published at `path` (its directory must exist; a link at the directory's
    /// path is followed — it is the caller's path; the target itself is replaced, never followed).
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} does not name a file", path.display()),
            )
        })?;
        let parent = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        AtomicFile::create_at(Dir::open(parent)?, name)
    }

    /// A new file to be published as `name` in `dir` (reached through the descriptor only).
    pub fn create_in(dir: &Dir, name: &str) -> io::Result<AtomicFile> {
        AtomicFile::create_at(dir.try_clone()?, OsStr::new(name))
    }

    fn create_at(dir: Dir, name: &OsStr) -> io::Result<AtomicFile> {
        check_name(name)?;
        let anonymous = rustix::fs::openat(
            &dir,
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        );
        let (fd, named) = match anonymous {
            Ok(fd) => (fd, None),
            // The file system cannot make unnamed files: a uniquely named one.
            Err(e)
                if [
                    rustix::io::Errno::OPNOTSUPP,
                    rustix::io::Errno::ISDIR,
                    rustix::io::Errno::INVAL,
                    rustix::io::Errno::NOENT,
                ]
                .contains(&e) =>
            {
                let tmp = temp_name(name);
                let fd = rustix::fs::openat(
                    &dir,
                    tmp.as_os_str(),
                    OFlags::RDWR
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o666),
                )?;
                (fd, Some(tmp))
            }
            Err(e) => return Err(e.into()),
        };
        Ok(AtomicFile {
            file: File::from(fd),
            dir,
            target: name.to_os_string(),
            named,
            mode: None,
        })
    }

    /// Give the file this mode when committed (default: `0o666` less the umask).
    pub fn with_mode(mut self, mode: u32) -> AtomicFile {
        self.mode = Some(mode);
        self
    }

    /// The file being written, open for reading too (to copy into it by other means, such as a
    /// reflink, and read back what was written).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Publish the file at its target, replacing what is there, as `durability` says. On an
    /// error nothing is at the target that was not there before, and no temporary is left.
    pub fn commit(mut self, durability: Durability) -> io::Result<()> {
        if let Some(mode) = self.mode {
            rustix::fs::fchmod(&self.file, Mode::from_raw_mode(mode))?;
        }
        self.file.flush()?;
        if durability == Durability::Durable {
            self.file.sync_all()?;
        }
        let tmp = match self.named.clone() {
            Some(t) => t,
            None => {
                // Give the unnamed file a unique name, then rename that over the target
                // (`linkat` cannot replace).
                let tmp = temp_name(&self.target);
                let linked = rustix::fs::linkat(
                    &self.file,
                    "",
                    &self.dir,
                    tmp.as_os_str(),
                    AtFlags::EMPTY_PATH,
                )
                .or_else(|_| {
                    let proc = format!("/proc/self/fd/{}", self.file.as_raw_fd());
                    rustix::fs::linkat(
                        rustix::fs::CWD,
                        proc.as_str(),
                        &self.dir,
                        tmp.as_os_str(),
                        AtFlags::SYMLINK_FOLLOW,
                    )
                });
                linked?;
                self.named = Some(tmp.clone());
                tmp
            }
        };
        rustix::fs::renameat(
            &self.dir,
            tmp.as_os_str(),
            &self.dir,
            self.target.as_os_str(),
        )?;
        self.named = None;
        if durability == Durability::Durable {
            self.dir.sync()?;
        }
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(tmp) = &self.named {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_os_str(), AtFlags::empty());
        }
    }
}

/// Publish `bytes` at `path` in one go ([`AtomicFile::create`], write, commit).
pub fn write_file(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)?;
    f.commit(durability)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn nothing_is_visible_before_the_commit_and_the_last_commit_wins() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.neff");
        std::fs::write(&p, b"old").unwrap();
        let mut a = AtomicFile::create(&p).unwrap();
        let mut b = AtomicFile::create(&p).unwrap();
        a.write_all(b"from a").unwrap();
        b.write_all(b"from b").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(names(d.path()), ["out.neff"]);
        a.commit(Durability::Durable).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"from a");
        b.commit(Durability::Visible).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"from b");
        assert_eq!(names(d.path()), ["out.neff"]);
    }

    #[test]
    fn dropped_or_failed_leaves_nothing_and_modes_apply() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"half").unwrap();
        drop(f);
        assert!(names(d.path()).is_empty());
        // A directory in the way: the commit fails, the directory stays, no temporary is left.
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/keep"), b"k").unwrap();
        let f = AtomicFile::create(&d.path().join("sub")).unwrap();
        assert!(f.commit(Durability::Visible).is_err());
        assert_eq!(names(d.path()), ["sub"]);
        let f = AtomicFile::create(&p).unwrap().with_mode(0o640);
        f.commit(Durability::Visible).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
    }

    #[test]
    fn a_link_at_the_target_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"v").unwrap();
        let dir = d.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("t")).unwrap();
        let r = Dir::open(&dir).unwrap();
        let mut f = AtomicFile::create_in(&r, "t").unwrap();
        f.write_all(b"new").unwrap();
        f.commit(Durability::Visible).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"v");
        assert!(!std::fs::symlink_metadata(dir.join("t"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(AtomicFile::create_in(&r, "../escape").is_err());
    }

    #[test]
    fn write_file_creates_and_replaces() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.json");
        write_file(&p, b"1", Durability::Visible).unwrap();
        write_file(&p, b"22", Durability::Durable).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"22");
        assert_eq!(names(d.path()), ["r.json"]);
    }
}
