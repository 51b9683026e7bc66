//! For each of the cache's sixteen parts, a hint of its oldest entry's last use: `nxcc-v1/evict/
//! oldest`, sixteen fixed-width lines (`<part> <ms since the epoch>`), rewritten whole in one
//! write at offset 0 (it never changes length, so a reader never sees it torn).
//!
//! A hint is the oldest last use found when the part was last scanned (or the scan's time, for a
//! part then empty; 0 when never scanned). It can only be older than the truth: an entry's last
//! use only moves forward (a hit), entries only go away, and a new entry is newer than any scan
//! before it. So any hint ever written is a lower bound of its part's oldest entry — whichever
//! process wrote it, from whichever host, however writers race — and eviction may trust it as one
//! ([`super::keep_under`]). A file that does not read gives no hints (every part is scanned).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;

use rustix::fs::OFlags;

use super::PARTS;
use crate::fsx::Dir;

/// The hints' file, in the eviction's directory.
pub const FILE: &str = "oldest";

const WIDTH: usize = 20;

/// The hints of every part (0: unknown).
pub type Hints = [u64; PARTS as usize];

fn parse(text: &str) -> Hints {
    let mut h = [0u64; PARTS as usize];
    for line in text.lines() {
        let mut w = line.split_whitespace();
        if let (Some(part), Some(ms), None) = (w.next(), w.next(), w.next()) {
            if let (Ok(p), Ok(ms)) = (usize::from_str_radix(part, 16), ms.parse::<u64>()) {
                if p < h.len() {
                    h[p] = ms;
                }
            }
        }
    }
    h
}

fn text(h: &Hints) -> String {
    h.iter()
        .enumerate()
        .map(|(p, ms)| format!("{p:x} {ms:>WIDTH$}\n"))
        .collect()
}

fn read_from(mut f: &File) -> Hints {
    let mut s = String::new();
    match f.read_to_string(&mut s) {
        Ok(_) => parse(&s),
        Err(_) => [0; PARTS as usize],
    }
}

/// The hints in `dir` (none known when the file is absent or unreadable).
pub fn read(dir: &Dir) -> Hints {
    dir.open_file(FILE)
        .map_or([0; PARTS as usize], |f| read_from(&f))
}

/// Set the hints of the parts `set` names (best effort: a hint not written leaves an older one,
/// still a lower bound).
pub fn write(dir: &Dir, set: &[(usize, u64)]) {
    let Ok(f) = dir.open_file_with(FILE, OFlags::RDWR | OFlags::CREATE, 0o666) else {
        return;
    };
    if fs4::fs_std::FileExt::lock_exclusive(&f).is_err() {
        return;
    }
    let mut h = read_from(&f);
    for &(part, ms) in set {
        if let Some(slot) = h.get_mut(part) {
            *slot = ms;
        }
    }
    let _ = f.write_all_at(text(&h).as_bytes(), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_read_back_and_keep_their_length() {
        let dir = tempfile::tempdir().unwrap();
        let d = Dir::open(dir.path()).unwrap();
        assert_eq!(read(&d), [0; 16]);
        write(&d, &[(3, 1_700_000_000_123), (15, 7)]);
        write(&d, &[(3, 1_700_000_000_456)]);
        let h = read(&d);
        assert_eq!((h[3], h[15], h[0]), (1_700_000_000_456, 7, 0));
        let len = std::fs::metadata(dir.path().join(FILE)).unwrap().len();
        assert_eq!(len as usize, 16 * (2 + WIDTH + 1));
        std::fs::write(dir.path().join(FILE), "garbage\n3 x\n").unwrap();
        assert_eq!(read(&d), [0; 16]);
    }
}
