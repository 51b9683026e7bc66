//! The byte-moving of the cache store: copying a NEFF in or out (a reflink when the file system
//! can, else an in-kernel copy, else a copy through this process) while hashing exactly the bytes
//! written, hashing a file of an entry, and writing an entry's JSON files.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::cache::{chunks, hashing};
use crate::fsx::Dir;

/// Why a copy failed: reading its source or writing its destination.
pub(super) enum CopyError {
    /// The source could not be read.
    Read(std::io::Error),
    /// The destination could not be written.
    Write(std::io::Error),
}

/// `FICLONE` (`_IOW(0x94, 9, int)`): share the source's extents (btrfs, XFS, ...).
const FICLONE: libc::c_ulong = 0x4004_9409;

/// Copy `src` into `dst` and return the blake3 and size of what `dst` now holds. A reflink when
/// the file system can, else an in-kernel copy (`copy_file_range`); then `dst` is read back and
/// hashed ([`hashing::hash_open_into`]'s ways: mapped on every core when large). Where neither
/// works, a copy through this process, hashing what it writes. Either way the bytes hashed are
/// the bytes written.
pub(super) fn copy_hashing(src: &File, dst: &File) -> Result<(blake3::Hash, u64), CopyError> {
    if copy_shared_or_in_kernel(src, dst)? {
        return hash_back(dst).map_err(CopyError::Write);
    }
    let mut h = blake3::Hasher::new();
    let n = copy_through(src, dst, &mut |c| {
        h.update(c);
    })?;
    Ok((h.finalize(), n))
}

/// Copy `src` into `dst` as [`copy_hashing`] does, without hashing what `dst` holds (the
/// caller knows the source's bytes); returns the size of what `dst` now holds.
pub(super) fn copy_plain(src: &File, dst: &File) -> Result<u64, CopyError> {
    if !copy_shared_or_in_kernel(src, dst)? {
        copy_through(src, dst, &mut |_| {})?;
    }
    dst.metadata().map(|m| m.len()).map_err(CopyError::Write)
}

/// A reflink, else an in-kernel copy; `Ok(false)` when neither works for these files and nothing
/// was copied.
fn copy_shared_or_in_kernel(src: &File, dst: &File) -> Result<bool, CopyError> {
    // SAFETY: ioctl(FICLONE) with two descriptors we own; on failure nothing was changed.
    let cloned = unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE as _, src.as_raw_fd()) } == 0;
    Ok(cloned || copy_in_kernel(src, dst)?)
}

/// Copy `src` into `dst` through this process, each chunk shown to `seen` first; the size.
fn copy_through(src: &File, dst: &File, seen: &mut dyn FnMut(&[u8])) -> Result<u64, CopyError> {
    let mut w = dst;
    let mut write_error: Option<std::io::Error> = None;
    let read = chunks::for_each_chunk(src, &mut |c| {
        seen(c);
        w.write_all(c).map_err(|e| {
            let kind = e.kind();
            write_error = Some(e);
            std::io::Error::from(kind)
        })
    });
    match (read, write_error) {
        (_, Some(e)) => Err(CopyError::Write(e)),
        (Err(e), None) => Err(CopyError::Read(e)),
        (Ok(n), None) => Ok(n),
    }
}

/// Copy all of `src` (from its position) to `dst` with `copy_file_range`. `Ok(false)` when the
/// kernel cannot do it for these files and nothing was copied (the caller copies itself).
fn copy_in_kernel(src: &File, dst: &File) -> Result<bool, CopyError> {
    let mut copied = 0u64;
    loop {
        // SAFETY: copy_file_range between two descriptors we own, at their file positions.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                std::ptr::null_mut(),
                dst.as_raw_fd(),
                std::ptr::null_mut(),
                1 << 30,
                0,
            )
        };
        if n > 0 {
            copied += n as u64;
            continue;
        }
        if n == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL | libc::EBADF)
                if copied == 0 =>
            {
                return Ok(false)
            }
            _ => return Err(CopyError::Write(e)),
        }
    }
}

/// The blake3 and size of what `dst` holds, read back from its start.
fn hash_back(dst: &File) -> std::io::Result<(blake3::Hash, u64)> {
    let mut h = blake3::Hasher::new();
    let len = dst.metadata()?.len();
    if len >= hashing::MAP_FROM {
        if let Some(r) = hashing::hash_mapped_into(dst, Path::new("the output"), &mut h) {
            return r.map(|n| (h.finalize(), n));
        }
    }
    let mut d = dst;
    d.seek(std::io::SeekFrom::Start(0))?;
    let n = hashing::hash_read_into(dst, &mut h)?;
    Ok((h.finalize(), n))
}

/// The blake3 and size of a plain file of a directory (opened without following a link).
pub(crate) fn hash_in(dir: &Dir, name: &str) -> std::io::Result<(blake3::Hash, u64)> {
    let f = dir.open_file(name)?;
    let mut h = blake3::Hasher::new();
    let n = chunks::for_each_chunk(&f, &mut |c| {
        h.update(c);
        Ok(())
    })?;
    Ok((h.finalize(), n))
}

/// Write JSON to a new file of a directory (pretty, newline-terminated).
pub(crate) fn write_json_in<T: serde::Serialize>(
    dir: &Dir,
    name: &str,
    value: &T,
) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    text.push(b'\n');
    dir.create_file(name)?.write_all(&text)
}

/// Read and parse a JSON file of a directory (opened without following a link).
pub(super) fn read_json_in<T: for<'de> serde::Deserialize<'de>>(
    dir: &Dir,
    name: &str,
) -> std::io::Result<T> {
    let bytes = dir.read(name)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
