//! Reproducer bundles as the tests find and read them: the `nxcc-reproducer-*.tar.gz` files of a
//! directory, and one member's bytes (shared by the compile, snapshot and daemon tests).

use std::io::Read;
use std::path::{Path, PathBuf};

/// The reproducer bundles in `dir`, sorted (none when it cannot be read).
pub fn bundles_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        n.starts_with("nxcc-reproducer-") && n.ends_with(".tar.gz")
    });
    v.sort();
    v
}

/// The bytes of a bundle's member `name` (a gzip'd tar, as `--gen-reproducer` writes it).
pub fn member(bundle: &Path, name: &str) -> Option<Vec<u8>> {
    let f = std::fs::File::open(bundle).unwrap();
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_str() == Some(name) {
            let mut b = Vec::new();
            e.read_to_end(&mut b).unwrap();
            return Some(b);
        }
    }
    None
}
