//! A private snapshot of a model: its bytes read once, into a directory only this process made,
//! so that whatever reads them afterwards — the hash a cache key is made of, every tool of the
//! compile, an upload — reads the same bytes, whoever may write the model's own path meanwhile.
//!
//! - The directory, `nxcc-snapshot-<unique>`, is made (mode `0700`) in a directory the caller
//!   names (the compile's work root), opened without following a link and checked to be this
//!   user's and private before anything is put in it; it is removed, with what it holds, when
//!   the [`Snapshot`] is dropped. A private copy the caller made itself with `copy_into` (the
//!   framework cache's graphs) is adopted as it is (`Snapshot::adopt`).
//! - A model file is copied under its own file name (a NEFF records nothing of the path, but a
//!   tool may look at the name), a model directory as a directory of the same name holding the
//!   same tree: the regular files, and the files links point to (as the cache key hashes them);
//!   links to directories, FIFOs, devices and sockets are left out, as the key leaves them out.
//!   Every file and directory of the snapshot is created here, never opened through a link
//!   (`O_CREAT | O_EXCL | O_NOFOLLOW`, from the directory's descriptor), files `0600`.
//! - The copy is the kernel's ([`copy`]): a reflink (`FICLONE`: no byte copied, on file systems
//!   that share extents), else `copy_file_range`, else `sendfile`; the bytes never pass through
//!   this process. A file that changes while it is copied (its size, modification or change
//!   time differ after the copy) is copied again, a few times, then refused.
//!
//! What a snapshot is *of* is the caller's concern: nothing here hashes or compiles.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, Stat};

use crate::fsx::Dir;

/// The prefix of a snapshot's directory.
pub const DIR_PREFIX: &str = "nxcc-snapshot-";

/// How many times a file that changes while it is copied is copied again.
const ATTEMPTS: usize = 3;

/// How a file's bytes were copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Shared extents (`FICLONE`): nothing copied.
    Reflink,
    /// `copy_file_range`: copied inside the kernel.
    CopyFileRange,
    /// `sendfile`: copied inside the kernel.
    Sendfile,
}

impl How {
    /// The words a log uses.
    pub fn describe(self) -> &'static str {
        match self {
            How::Reflink => "reflinked",
            How::CopyFileRange => "copied by the kernel (copy_file_range)",
            How::Sendfile => "copied by the kernel (sendfile)",
        }
    }
}

/// A model's private copy; see the module documentation. Dropping it removes it (unless it
/// was adopted (`Snapshot::adopt`)).
#[derive(Debug)]
pub struct Snapshot {
    /// The directory it was made in, and the private directory's name there (removed on drop).
    made: Option<(Dir, String)>,
    dir: PathBuf,
    path: PathBuf,
    bytes: u64,
    files: usize,
    how: Option<How>,
}

impl Snapshot {
    /// Take a snapshot of `model` (a file, or a directory of files; a link on the way to it is
    /// followed: it is the path the user gave) in a private directory made in `root`.
    pub fn take(model: &Path, root: &Path) -> io::Result<Snapshot> {
        let source = crate::fsx::regular::open_or_dir(model)?;
        let parent = Dir::open(root)?;
        let (name, private) = private_dir(&parent)?;
        let dir = root.join(&name);
        let mut snap = Snapshot {
            made: Some((parent, name)),
            path: dir.join(model_name(model)),
            dir,
            bytes: 0,
            files: 0,
            how: None,
        };
        let entry = model_name(model);
        let entry = entry.to_str().ok_or_else(|| not_utf8(model))?;
        match source {
            crate::fsx::regular::Opened::File(src, _) => snap.file(&src, &private, entry)?,
            crate::fsx::regular::Opened::Dir => {
                let from = Dir::open(model)?;
                private.create_dir(entry, Some(0o700))?;
                snap.tree(&from, &private.open_dir(entry)?, model)?;
            }
        }
        Ok(snap)
    }

    /// A private copy this process already made of a model file (with [`copy_into`], in a
    /// directory of its own no one else can write), taken as the snapshot: compiled where it
    /// is, never copied again, and left in place when dropped (its maker removes it).
    pub(crate) fn adopt(path: &Path) -> io::Result<Snapshot> {
        let st = rustix::fs::lstat(path)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::other(format!(
                "{} is not a file",
                path.display()
            )));
        }
        Ok(Snapshot {
            made: None,
            dir: path.parent().unwrap_or(Path::new("/")).to_path_buf(),
            path: path.to_path_buf(),
            bytes: st.st_size.max(0) as u64,
            files: 1,
            how: None,
        })
    }

    /// The model's copy: a file, or a directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The private directory holding it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bytes copied (a directory: its files').
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The files copied.
    pub fn files(&self) -> usize {
        self.files
    }

    /// How the bytes were copied (the first file's way; `None` when there was no file, or the
    /// snapshot was adopted).
    pub fn how(&self) -> Option<How> {
        self.how
    }

    /// Copy the open file `src` into `dir` as `name`.
    fn file(&mut self, src: &File, dir: &Dir, name: &str) -> io::Result<()> {
        let (n, how) = copy_into(src, dir, name)?;
        self.bytes += n;
        self.files += 1;
        self.how.get_or_insert(how);
        Ok(())
    }

    /// Copy the tree of `from` (at `path`, for messages) into `to`.
    fn tree(&mut self, from: &Dir, to: &Dir, path: &Path) -> io::Result<()> {
        for (name, _) in from.entries()? {
            let child = path.join(&name);
            let Some(n) = name.to_str() else {
                return Err(not_utf8(&child));
            };
            match from.file_type(n)? {
                FileType::Directory => {
                    to.create_dir(n, Some(0o700))?;
                    self.tree(&from.open_dir(n)?, &to.open_dir(n)?, &child)?;
                }
                FileType::RegularFile => self.file(&from.open_file(n)?, to, n)?,
                // A link to a file counts as that file (as the cache key hashes it).
                FileType::Symlink => {
                    if let Some(src) = linked_file(from, n)? {
                        self.file(&src, to, n)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if let Some((parent, name)) = &self.made {
            let _ = parent.remove_all(name);
        }
    }
}

/// The model's own file name (`model` when the path has none).
fn model_name(model: &Path) -> &OsStr {
    model.file_name().unwrap_or(OsStr::new("model"))
}

fn not_utf8(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: a file name that is not UTF-8", path.display()),
    )
}

/// Make `nxcc-snapshot-<unique>` (`0700`) in `parent` and open it, checked: a directory, this
/// user's, no access for anyone else. A name taken by someone else is passed over.
fn private_dir(parent: &Dir) -> io::Result<(String, Dir)> {
    for _ in 0..16 {
        let name = crate::fsx::unique::name(DIR_PREFIX);
        match parent.create_dir(&name, Some(0o700)) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            r => r?,
        }
        let dir = parent.open_dir(&name)?;
        let st = dir.own_stat()?;
        if st.st_uid != rustix::process::geteuid().as_raw() || st.st_mode & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{name} was not made private (another user replaced it?)"),
            ));
        }
        return Ok((name, dir));
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free name for a snapshot directory",
    ))
}

/// The regular file the link `name` of `dir` points to, open; `None` when it points to anything
/// else (or nowhere).
fn linked_file(dir: &Dir, name: &str) -> io::Result<Option<File>> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(_) => return Ok(None),
    };
    let st = rustix::fs::fstat(&fd)?;
    Ok((FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| File::from(fd)))
}

/// Copy `src` into a new file `name` of `dir` (`0600`, created, never opened through a link):
/// the bytes copied and how. A source that changes while it is copied is copied again.
pub(crate) fn copy_into(src: &File, dir: &Dir, name: &str) -> io::Result<(u64, How)> {
    let create = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
    for _ in 0..ATTEMPTS {
        let before = rustix::fs::fstat(src)?;
        let dst = dir.open_file_with(name, create, 0o600)?;
        let copied = copy(src, &dst, before.st_size.max(0) as u64)?;
        let after = rustix::fs::fstat(src)?;
        if same(&before, &after) {
            return Ok(copied);
        }
        drop(dst);
        dir.remove_file(name)?;
    }
    Err(io::Error::other(format!(
        "it kept changing while it was copied ({ATTEMPTS} times)"
    )))
}

/// Whether a file's status says its bytes did not change.
fn same(a: &Stat, b: &Stat) -> bool {
    (
        a.st_size,
        a.st_mtime,
        a.st_mtime_nsec,
        a.st_ctime,
        a.st_ctime_nsec,
    ) == (
        b.st_size,
        b.st_mtime,
        b.st_mtime_nsec,
        b.st_ctime,
        b.st_ctime_nsec,
    )
}

/// Copy the first `len` bytes of `src` (from its start) into the empty file `dst`, in the
/// kernel: a reflink, else `copy_file_range`, else `sendfile`. Returns the bytes copied (fewer
/// when `src` ends first) and how.
pub fn copy(src: &File, dst: &File, len: u64) -> io::Result<(u64, How)> {
    if rustix::fs::ioctl_ficlone(dst, src).is_ok() {
        let n = rustix::fs::fstat(dst)?.st_size.max(0) as u64;
        if n == len {
            return Ok((n, How::Reflink));
        }
        // The source changed size between the two looks: copy what was asked for.
        rustix::fs::ftruncate(dst, 0)?;
    }
    match copy_file_range(src, dst, len) {
        Ok(n) => Ok((n, How::CopyFileRange)),
        Err(e) if kernel_copy_unsupported(&e) => {
            rustix::fs::ftruncate(dst, 0)?;
            Ok((sendfile(src, dst, len)?, How::Sendfile))
        }
        Err(e) => Err(e.into()),
    }
}

/// The errors with which `copy_file_range` says it cannot copy between these two files.
fn kernel_copy_unsupported(e: &rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [
        Errno::XDEV,
        Errno::INVAL,
        Errno::NOSYS,
        Errno::OPNOTSUPP,
        Errno::PERM,
    ]
    .contains(e)
}

fn copy_file_range(src: &File, dst: &File, len: u64) -> rustix::io::Result<u64> {
    let (mut from, mut to, mut done) = (0u64, 0u64, 0u64);
    while done < len {
        let chunk = (len - done).min(1 << 30) as usize;
        let n = rustix::fs::copy_file_range(src, Some(&mut from), dst, Some(&mut to), chunk)?;
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    Ok(done)
}

fn sendfile(src: &File, dst: &File, len: u64) -> io::Result<u64> {
    let mut offset = 0u64;
    while offset < len {
        let chunk = (len - offset).min(1 << 30) as usize;
        let n = rustix::fs::sendfile(dst, src, Some(&mut offset), chunk)?;
        if n == 0 {
            break;
        }
    }
    Ok(offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn a_file_is_copied_privately_under_its_own_name_and_removed_with_the_snapshot() {
        let d = tempfile::tempdir().unwrap();
        let model = d.path().join("m.hlo_module.pb");
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&model, &bytes).unwrap();
        let snap = Snapshot::take(&model, d.path()).unwrap();
        assert_eq!(snap.path().file_name(), model.file_name());
        assert_eq!(std::fs::read(snap.path()).unwrap(), bytes);
        assert_eq!((snap.bytes(), snap.files()), (bytes.len() as u64, 1));
        let dir_mode = std::fs::metadata(snap.dir()).unwrap().mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let file_mode = std::fs::metadata(snap.path()).unwrap().mode();
        assert_eq!(file_mode & 0o777, 0o600);
        assert!(snap.how().is_some());
        // Another inode: writing the model's path later changes nothing in the snapshot.
        std::fs::write(&model, b"another model").unwrap();
        assert_eq!(std::fs::read(snap.path()).unwrap(), bytes);
        let dir = snap.dir().to_path_buf();
        drop(snap);
        assert!(!dir.exists());
    }

    #[test]
    fn a_directory_is_copied_as_the_key_hashes_it() {
        let d = tempfile::tempdir().unwrap();
        let m = d.path().join("graphs");
        std::fs::create_dir_all(m.join("sub")).unwrap();
        std::fs::write(m.join("a.pb"), b"a").unwrap();
        std::fs::write(m.join("sub/b.pb"), b"bb").unwrap();
        std::fs::write(d.path().join("outside.pb"), b"ccc").unwrap();
        std::os::unix::fs::symlink(d.path().join("outside.pb"), m.join("l.pb")).unwrap();
        std::os::unix::fs::symlink(d.path(), m.join("up")).unwrap();
        nix_fifo(&m.join("fifo"));
        let snap = Snapshot::take(&m, d.path()).unwrap();
        let p = snap.path();
        assert_eq!(std::fs::read(p.join("a.pb")).unwrap(), b"a");
        assert_eq!(std::fs::read(p.join("sub/b.pb")).unwrap(), b"bb");
        // The link became the file it points to; a link to a directory and a FIFO are left out.
        let l = std::fs::symlink_metadata(p.join("l.pb")).unwrap();
        assert!(l.file_type().is_file() && l.permissions().mode() & 0o777 == 0o600);
        assert!(!p.join("up").exists() && !p.join("fifo").exists());
        assert_eq!((snap.bytes(), snap.files()), (6, 3));
    }

    fn nix_fifo(p: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_and_nothing_is_left() {
        let d = tempfile::tempdir().unwrap();
        nix_fifo(&d.path().join("m.pb"));
        let e = Snapshot::take(&d.path().join("m.pb"), d.path()).unwrap_err();
        assert!(crate::fsx::regular::is_not_regular(&e), "{e}");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn a_link_where_a_copy_goes_is_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let model = d.path().join("m.pb");
        std::fs::write(&model, b"model").unwrap();
        let (_, private) = private_dir(&Dir::open(d.path()).unwrap()).unwrap();
        let target = d.path().join("target");
        private.symlink(&target, "m.pb").unwrap();
        let e = copy_into(&File::open(&model).unwrap(), &private, "m.pb").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert!(!target.exists(), "nothing was written through the link");
    }
}
