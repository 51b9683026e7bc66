//! [`Dir`]: a directory held by its descriptor. Every operation names a single entry of it (no
//! `/` in names) and follows no symbolic link — not the entry, not the path to it — so a tree
//! walked through `Dir`s can never lead outside itself, whatever another process links into it.
//! An entry that is not what was asked for (a link, a FIFO, a device, a file where a directory
//! was expected) is refused with an error [`is_not_plain`] recognises.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

/// An open directory; see the module documentation.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

/// The error of an entry that is not a plain directory or file (see [`is_not_plain`]).
#[derive(Debug)]
struct NotPlain(String);

impl std::fmt::Display for NotPlain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotPlain {}

fn not_plain(name: &str, what: &str, ft: FileType) -> io::Error {
    let is = match ft {
        FileType::Symlink => "a symbolic link",
        FileType::Directory => "a directory",
        FileType::RegularFile => "a file",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Unknown => "of an unknown type",
    };
    io::Error::other(NotPlain(format!("{name} is {is}, not {what}")))
}

/// Whether `e` says an entry was not a plain directory or file (a symbolic link, a FIFO, ...).
pub(crate) fn is_not_plain(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NotPlain>()) || e.raw_os_error() == Some(libc::ELOOP)
}

/// Refuse a name that is not a single entry (empty, `.`, `..`, or holding a `/`).
fn entry(name: &str) -> io::Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} does not name an entry of a directory"),
        ));
    }
    Ok(name)
}

fn io_err(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

impl Dir {
    /// Open the directory at `path` (a path the user gave: symbolic links on the way are
    /// followed; what is opened must be a directory).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)?;
        Ok(Dir { fd })
    }

    /// A directory already open as `fd` (the caller opened it as a directory).
    pub(crate) fn from_fd(fd: OwnedFd) -> Dir {
        Dir { fd }
    }

    /// Create the symbolic link `name` in this directory, pointing to `target`.
    pub fn symlink(&self, target: &std::path::Path, name: &str) -> io::Result<()> {
        rustix::fs::symlinkat(target, &self.fd, entry(name)?).map_err(io_err)
    }

    /// What the symbolic link `name` of this directory points to.
    pub fn read_link(&self, name: &str) -> io::Result<std::path::PathBuf> {
        let name = entry(name)?;
        let target = rustix::fs::readlinkat(&self.fd, name, Vec::new()).map_err(io_err)?;
        Ok(std::path::PathBuf::from(OsString::from_vec(
            target.into_bytes(),
        )))
    }

    /// The directory `name` in this one; a link or anything but a directory is refused.
    pub(crate) fn open_dir(&self, name: &str) -> io::Result<Dir> {
        let name = entry(name)?;
        match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Dir { fd }),
            Err(e) if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR => {
                let ft = self.file_type(name).unwrap_or(FileType::Unknown);
                Err(not_plain(name, "a directory", ft))
            }
            Err(e) => Err(io_err(e)),
        }
    }

    /// Create the directory `name` (mode `0o777` less the umask when `mode` is `None`); an
    /// existing entry is an `AlreadyExists` error.
    pub fn create_dir(&self, name: &str, mode: Option<u32>) -> io::Result<()> {
        let name = entry(name)?;
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode.unwrap_or(0o777)))
            .map_err(io_err)
    }

    /// The directory `name`, created first if absent (with the umask's mode).
    pub(crate) fn open_or_create_dir(&self, name: &str) -> io::Result<Dir> {
        match self.open_dir(name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => match self.create_dir(name, None) {
                Ok(()) => self.open_dir(name),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self.open_dir(name),
                Err(e) => Err(e),
            },
            r => r,
        }
    }

    /// Open the file `name` with `flags` (`O_NOFOLLOW`, `O_NONBLOCK` and `O_CLOEXEC` are added;
    /// `mode` applies when `O_CREAT` creates it); a link, FIFO, device or directory is refused.
    pub(crate) fn open_file_with(&self, name: &str, flags: OFlags, mode: u32) -> io::Result<File> {
        let name = entry(name)?;
        let flags = flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => fd,
            Err(e) if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::ISDIR => {
                let ft = self.file_type(name).unwrap_or(FileType::Unknown);
                return Err(not_plain(name, "a plain file", ft));
            }
            Err(e) => return Err(io_err(e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(io_err)?;
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft != FileType::RegularFile {
            return Err(not_plain(name, "a plain file", ft));
        }
        // O_NONBLOCK only kept the open from waiting on a FIFO; on a regular file it changes
        // nothing, so it stays.
        Ok(File::from(fd))
    }

    /// Open the plain file `name` for reading.
    pub fn open_file(&self, name: &str) -> io::Result<File> {
        self.open_file_with(name, OFlags::RDONLY, 0)
    }

    /// Create the file `name`, which must not exist, for writing (mode `0o666` less the umask).
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        self.open_file_with(name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL, 0o666)
    }

    /// Read the plain file `name` whole.
    pub fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let mut f = self.open_file(name)?;
        let mut v = Vec::new();
        io::Read::read_to_end(&mut f, &mut v)?;
        Ok(v)
    }

    /// The status of the entry `name` itself (a link is not followed).
    pub fn stat(&self, name: &str) -> io::Result<Stat> {
        let name = entry(name)?;
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(io_err)
    }

    /// The type of the entry `name` itself.
    pub fn file_type(&self, name: &str) -> io::Result<FileType> {
        Ok(FileType::from_raw_mode(self.stat(name)?.st_mode))
    }

    /// The status of this directory.
    pub(crate) fn own_stat(&self) -> io::Result<Stat> {
        rustix::fs::fstat(&self.fd).map_err(io_err)
    }

    /// Rename the entry `from` of this directory to `to` in `to_dir` (replacing a file there,
    /// or an empty directory), the entry itself: a link is moved, not what it points to.
    pub fn rename(&self, from: &str, to_dir: &Dir, to: &str) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, entry(from)?, &to_dir.fd, entry(to)?).map_err(io_err)
    }

    /// Remove the entry `name` if it is not a directory (a link is removed, not its target).
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, entry(name)?, AtFlags::empty()).map_err(io_err)
    }

    /// Remove the entry `name` and, if it is a directory, everything in it, depth first; links
    /// are removed, never followed. An absent entry is `NotFound`.
    pub(crate) fn remove_all(&self, name: &str) -> io::Result<()> {
        let name = entry(name)?;
        if self.file_type(name)? != FileType::Directory {
            return self.remove_file(name);
        }
        let sub = self.open_dir(name)?;
        for (child, _) in sub.entries()? {
            if let Some(child) = child.to_str() {
                match sub.remove_all(child) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    r => r?,
                }
            }
        }
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR).map_err(io_err)
    }

    /// The entries of this directory (not `.` and `..`) and their types as the directory
    /// reports them (`Unknown` on file systems that do not say).
    pub fn entries(&self) -> io::Result<Entries> {
        Ok(Entries {
            dir: rustix::fs::Dir::read_from(&self.fd).map_err(io_err)?,
        })
    }

    /// Another descriptor of this directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
        })
    }

    /// Make what was written in this directory (a rename, a new entry) durable.
    pub fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(&self.fd).map_err(io_err)
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The entries of a [`Dir`], read as they are listed (memory independent of their number).
pub struct Entries {
    dir: rustix::fs::Dir,
}

impl Iterator for Entries {
    type Item = (OsString, FileType);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let e = match self.dir.read()? {
                Ok(e) => e,
                Err(_) => return None,
            };
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            return Some((OsString::from_vec(name.to_vec()), e.file_type()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_refused_and_removed_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("f")).unwrap();
        let r = Dir::open(&root).unwrap();
        let e = r.open_dir("d").unwrap_err();
        assert!(is_not_plain(&e), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(is_not_plain(&r.open_file("f").unwrap_err()));
        assert!(is_not_plain(&r.open_file("d").unwrap_err()));
        assert!(r
            .open_file_with("f", OFlags::WRONLY | OFlags::CREATE, 0o666)
            .is_err());
        assert!(r.open_dir("../root").is_err());
        r.remove_all("d").unwrap();
        r.remove_all("f").unwrap();
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"s");
        assert_eq!(r.entries().unwrap().count(), 0);
    }

    #[test]
    fn fifos_are_refused_without_blocking() {
        let t = tempfile::tempdir().unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            t.path().join("p"),
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let r = Dir::open(t.path()).unwrap();
        assert!(is_not_plain(&r.open_file("p").unwrap_err()));
    }

    #[test]
    fn remove_all_removes_a_tree() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b/c")).unwrap();
        std::fs::write(t.path().join("a/b/c/x"), b"x").unwrap();
        std::fs::write(t.path().join("a/y"), b"y").unwrap();
        let r = Dir::open(t.path()).unwrap();
        r.remove_all("a").unwrap();
        assert!(!t.path().join("a").exists());
        assert_eq!(
            r.remove_all("a").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
