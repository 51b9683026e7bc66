//! Feeding a file's bytes to blake3, the fastest safe way for its size: a file of at least
//! [`MAP_FROM`] bytes mapped ([`crate::fsx::Mapped`]) and hashed on every core; a smaller one
//! read, the reads overlapped with hashing ([`super::chunks`]). What the key hashes models and
//! tools with, and what a hit verifies the NEFF it copied with.

use std::fs::File;
use std::path::Path;

/// Files at least this large are hashed memory-mapped, on every core (`BENCHMARKS.md`, "Hashing
/// a large model"); smaller ones are read.
pub const MAP_FROM: u64 = 1 << 20;

/// Feed an open file (read from its start; `path` names it in errors) into a hasher; returns
/// the number of bytes hashed. A file of at least [`MAP_FROM`] bytes is mapped
/// ([`crate::fsx::Mapped`]) and hashed by blake3 on every core (`update_rayon`); a smaller one,
/// or one that cannot be mapped, is read, the reads overlapped with hashing (`super::chunks`). A
/// file that shrank while it was mapped, or whose size or modification time changed while it was
/// hashed, is an error: what was hashed is not the file. Never a SIGBUS, even in the daemon.
pub fn hash_open_into(f: &File, path: &Path, h: &mut blake3::Hasher) -> std::io::Result<u64> {
    let len = f.metadata()?.len();
    if len >= MAP_FROM {
        if let Some(r) = hash_mapped_into(f, path, h) {
            return r;
        }
    }
    hash_read_into(f, h)
}

/// Feed an open file into a hasher by reading it (from its current position), the reads
/// overlapped with hashing.
pub fn hash_read_into(f: &std::fs::File, h: &mut blake3::Hasher) -> std::io::Result<u64> {
    super::chunks::for_each_chunk(f, &mut |c| {
        h.update(c);
        Ok(())
    })
}

/// Feed a regular file into a hasher through a mapping, hashed on every core; `None` when it
/// cannot be mapped (nothing was hashed then). `path` names it in the error of a file that
/// changed meanwhile.
pub fn hash_mapped_into(
    f: &std::fs::File,
    path: &Path,
    h: &mut blake3::Hasher,
) -> Option<std::io::Result<u64>> {
    let before = f.metadata().ok().filter(|m| m.is_file())?;
    let m = crate::fsx::Mapped::new(f, before.len())?;
    h.update_rayon(m.bytes());
    let changed = match f.metadata() {
        Ok(after) => {
            m.truncated()
                || after.len() != before.len()
                || after.modified().ok() != before.modified().ok()
        }
        Err(e) => return Some(Err(e)),
    };
    if changed {
        return Some(Err(std::io::Error::other(format!(
            "{} changed while it was being read",
            path.display()
        ))));
    }
    Some(Ok(before.len()))
}
