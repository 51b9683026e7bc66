//! File handling shared by the simulated tools and frontend: paths resolved against an explicit
//! working directory (nothing here changes the process's current directory), atomic writes
//! (through [`crate::fsx::AtomicFile`]), and reading a model — a file, or a
//! directory of files — with its blake3 digest.

use std::io::Write;
use std::path::{Path, PathBuf};

/// `p` as given when absolute, else relative to `cwd`.
pub fn resolve(cwd: &Path, p: &str) -> PathBuf {
    let path = Path::new(p);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

/// Write `bytes` to `path` as one [`crate::fsx::AtomicFile`], so a reader never sees a
/// half-written file. The file gets mode 0644.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = crate::fsx::AtomicFile::create(path)?.with_mode(0o644);
    f.write_all(bytes)?;
    f.commit(crate::fsx::Durability::Visible)
}

/// A model as the tools see it.
#[derive(Debug, Clone)]
pub struct Model {
    /// The model path is a directory (a multi-module model).
    pub is_dir: bool,
    /// A file: one part named after the file. A directory: its regular files, by name.
    pub parts: Vec<(String, Vec<u8>)>,
    /// A file: blake3 of its bytes. A directory: blake3 over every part (name, length, bytes).
    pub digest: blake3::Hash,
}

impl Model {
    /// Its size in bytes (a directory: all its parts).
    pub fn size(&self) -> u64 {
        self.parts.iter().map(|(_, b)| b.len() as u64).sum()
    }

    /// Read a model file or directory.
    pub fn read(path: &Path) -> std::io::Result<Model> {
        use crate::fsx::regular::{self, Opened};
        // A regular file or a directory only, opened without waiting, read within the limit.
        if let Opened::File(file, _) = regular::open_or_dir(path)? {
            let bytes = regular::read_limited(&file, crate::hlo::READ_LIMIT)?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Ok(Model {
                is_dir: false,
                digest: blake3::hash(&bytes),
                parts: vec![(name, bytes)],
            });
        }
        let mut names: Vec<(String, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if entry.file_type()?.is_file() || entry.path().is_file() {
                names.push((
                    entry.file_name().to_string_lossy().into_owned(),
                    entry.path(),
                ));
            }
        }
        names.sort();
        let mut hasher = blake3::Hasher::new();
        let mut parts = Vec::with_capacity(names.len());
        for (name, p) in names {
            let bytes = crate::fsx::regular::read(&p, crate::hlo::READ_LIMIT)?;
            hasher.update(name.as_bytes());
            hasher.update(&[0]);
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(&bytes);
            parts.push((name, bytes));
        }
        Ok(Model {
            is_dir: true,
            digest: hasher.finalize(),
            parts,
        })
    }

    /// Every byte of the model, parts in name order.
    pub fn bytes(&self) -> Vec<u8> {
        self.parts
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .collect()
    }

    /// Total size in bytes.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|(_, b)| b.len()).sum()
    }

    /// Whether the model has no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of an HLO text model (a file starting with `HloModule`), if it is one.
    pub fn hlo_text(&self) -> Option<&str> {
        match (self.is_dir, self.parts.first()) {
            (false, Some((_, b))) if b.starts_with(b"HloModule") => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The HLO modules of the model, as a frontend reads them: a file is one module (HLO text or
    /// a binary `HloModuleProto`); a directory holds one per `*.pb` file, in name order. What is
    /// not a module is refused with the reader's message (naming `path`, or the directory's
    /// file).
    pub fn graphs(&self, path: &Path) -> Result<Vec<crate::hlo::Module>, String> {
        if !self.is_dir {
            let (_, bytes) = self.parts.first().ok_or("no model bytes")?;
            let m = crate::hlo::parse(bytes).map_err(|e| e.render(path))?;
            return refuse_overflow(m, path).map(|m| vec![m]);
        }
        let pbs = self.pb_parts();
        if pbs.is_empty() {
            return Err(format!(
                "{}: a model directory holds no *.pb module",
                path.display()
            ));
        }
        pbs.iter()
            .map(|(name, bytes)| {
                let p = path.join(name);
                refuse_overflow(crate::hlo::parse(bytes).map_err(|e| e.render(&p))?, &p)
            })
            .collect()
    }

    /// The parts that are `*.pb` files, in name order.
    pub fn pb_parts(&self) -> Vec<&(String, Vec<u8>)> {
        self.parts
            .iter()
            .filter(|(n, _)| n.ends_with(".pb"))
            .collect()
    }
}

/// A module whose tensors all have sizes that fit in 64 bits; one that does not is refused with
/// a message naming the tensor (a frontend could not lay it out, and the simulated costs follow
/// the sizes).
fn refuse_overflow(m: crate::hlo::Module, path: &Path) -> Result<crate::hlo::Module, String> {
    match m.overflowing() {
        None => Ok(m),
        Some(t) => Err(format!(
            "{}: the tensor {} has the shape {}, whose size overflows 64 bits: refused",
            path.display(),
            t.name,
            t.shape
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }

    #[test]
    fn model_file_and_directory_digests() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.hlo");
        std::fs::write(&f, b"HloModule m\n").unwrap();
        let m = Model::read(&f).unwrap();
        assert_eq!(m.digest, blake3::hash(b"HloModule m\n"));
        assert!(m.hlo_text().is_some());
        let d = dir.path().join("graphs");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("b.pb"), b"bb").unwrap();
        std::fs::write(d.join("a.pb"), b"a").unwrap();
        std::fs::write(d.join("notes.txt"), b"n").unwrap();
        let md = Model::read(&d).unwrap();
        assert!(md.is_dir);
        assert_eq!(md.pb_parts().len(), 2);
        assert_eq!(md.parts[0].0, "a.pb");
        assert_eq!(md.bytes(), b"abbn");
        assert!(md.hlo_text().is_none());
        // The digest covers names: renaming a file changes it.
        std::fs::rename(d.join("notes.txt"), d.join("other.txt")).unwrap();
        assert_ne!(Model::read(&d).unwrap().digest, md.digest);
    }

    #[test]
    fn resolve_keeps_absolute_paths() {
        let cwd = Path::new("/w");
        assert_eq!(resolve(cwd, "/a/b"), PathBuf::from("/a/b"));
        assert_eq!(
            resolve(cwd, "sg00/bir.json"),
            PathBuf::from("/w/sg00/bir.json")
        );
    }
}
