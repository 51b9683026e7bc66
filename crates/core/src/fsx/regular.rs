//! A file the user named, opened only if it is a regular file (or, where asked, a directory), and
//! read within a limit.
//!
//! The open never waits: it is made with `O_NONBLOCK`, so a FIFO with no writer cannot hold it
//! (nor a device that would), and what was opened is judged on its descriptor (`fstat`), not on
//! its path — a FIFO, a device or a socket is refused before a byte is read (`is_not_regular`
//! recognises the error). `O_NONBLOCK` stays on the descriptor: on a regular file it changes
//! nothing, and a special file of a pseudo file system that would block answers `EAGAIN`.
//!
//! Reads stop at their limit by the bytes actually read, never by the size the file reports
//! (a `/proc` file reports 0 and may hold more; a file may grow while it is read):
//! [`read_limited`] reads at most one byte past its limit, and a file with more is refused
//! (`is_too_large`).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

/// What [`open_or_dir`] found.
#[derive(Debug)]
pub enum Opened {
    /// A regular file, open for reading, and the size it reports.
    File(File, u64),
    /// A directory (opened, then closed).
    Dir,
}

#[derive(Debug)]
struct NotRegular(String);

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRegular {}

#[derive(Debug)]
struct TooLarge(u64);

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "larger than {} bytes", self.0)
    }
}

impl std::error::Error for TooLarge {}

/// What a file type is called in messages: `a FIFO`, `a device`, ...
pub fn kind_name(ft: FileType) -> &'static str {
    match ft {
        FileType::Symlink => "a symbolic link",
        FileType::Directory => "a directory",
        FileType::RegularFile => "a regular file",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Unknown => "a file of an unknown type",
    }
}

/// Whether `e` is the refusal of something that is not a regular file.
pub(crate) fn is_not_regular(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<NotRegular>())
}

/// Whether `e` is the refusal of a file larger than the read's limit.
pub(crate) fn is_too_large(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<TooLarge>())
}

fn not_regular(ft: FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotRegular(format!("{}, not a regular file", kind_name(ft))),
    )
}

/// Open `path` (links on the way followed: it is the user's path) without waiting, and say what
/// it is: a regular file (open) or a directory; anything else is refused.
pub fn open_or_dir(path: &Path) -> io::Result<Opened> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(Opened::File(File::from(fd), st.st_size.max(0) as u64)),
        FileType::Directory => Ok(Opened::Dir),
        ft => Err(not_regular(ft)),
    }
}

/// Open the regular file at `path` for reading without waiting; a directory and anything that
/// is not a regular file are refused.
pub fn open(path: &Path) -> io::Result<File> {
    match open_or_dir(path)? {
        Opened::File(f, _) => Ok(f),
        Opened::Dir => Err(not_regular(FileType::Directory)),
    }
}

/// Read `file` from its position to its end, refusing it when that is more than `limit` bytes
/// (counted as read).
pub fn read_limited(file: &File, limit: u64) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut v)?;
    if v.len() as u64 > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, TooLarge(limit)));
    }
    Ok(v)
}

/// Read the regular file at `path` whole, at most `limit` bytes ([`open`], [`read_limited`]).
pub fn read(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_limited(&open(path)?, limit)
}

/// Open `path` for appending (created `0666` less the umask when absent) without waiting: a FIFO
/// nobody reads is refused (`ENXIO`) instead of holding the open forever; the descriptor is then
/// made blocking again, so writes behave as usual.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC
            | OFlags::NOCTTY,
        Mode::from_raw_mode(0o666),
    )?;
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("p");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o600)).unwrap();
        // No writer: the open would wait forever without O_NONBLOCK.
        let e = read(&fifo, 10).unwrap_err();
        assert!(is_not_regular(&e), "{e}");
        assert_eq!(e.to_string(), "a FIFO, not a regular file");
        for dev in ["/dev/zero", "/dev/urandom", "/dev/null"] {
            let e = read(Path::new(dev), 10).unwrap_err();
            assert_eq!(e.to_string(), "a device, not a regular file", "{dev}");
        }
        assert!(is_not_regular(&read(t.path(), 10).unwrap_err()));
        assert!(matches!(open_or_dir(t.path()).unwrap(), Opened::Dir));
        let f = t.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read(&f, 5).unwrap(), b"12345");
        let e = read(&f, 4).unwrap_err();
        assert!(is_too_large(&e), "{e}");
        assert_eq!(
            read(Path::new("/nonexistent/x"), 1).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn appending_never_waits_on_a_fifo_nobody_reads() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("p");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o600)).unwrap();
        assert_eq!(
            open_append(&fifo).unwrap_err().raw_os_error(),
            Some(libc::ENXIO)
        );
        let f = t.path().join("log");
        use std::io::Write;
        open_append(&f).unwrap().write_all(b"a").unwrap();
        open_append(&f).unwrap().write_all(b"b").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"ab");
    }

    #[test]
    fn a_file_reporting_no_size_is_read_by_what_it_holds() {
        // /proc files report a size of 0.
        let v = read(Path::new("/proc/self/status"), 1 << 20).unwrap();
        assert!(v.starts_with(b"Name:"), "{}", String::from_utf8_lossy(&v));
        assert!(is_too_large(
            &read(Path::new("/proc/self/status"), 8).unwrap_err()
        ));
    }
}
