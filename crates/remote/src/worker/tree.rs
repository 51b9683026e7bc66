//! An action's input root, fetched and judged whole before anything is created: every distinct
//! `Directory` is read once (a bounded message), its names checked (one component each, at most
//! 255 bytes, unique within the directory, no links), and the tree's size as it would be laid out
//! — directories counted every time they are reused, so a digest repeated at every level (a
//! "bomb" of billions of directories in a few small messages) is counted as what it expands to —
//! checked against the worker's limits on entries, depth and bytes. Only a tree that passes is
//! laid out, file by file, stopping when the lease is cancelled.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use prost::Message;

use super::status::Refusal;
use crate::client::Remote;
use crate::digest;
use crate::re;
use crate::text;

/// The largest `Directory` message read.
pub const DIRECTORY_MAX: u64 = 1 << 20;

/// The longest name in an input tree (bytes; the file system's own limit).
pub const NAME_MAX: usize = 255;

/// How large an input tree may be, as laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Files and directories, every reuse counted.
    pub entries: u64,
    /// Directories nested below the root.
    pub depth: usize,
    /// The files' bytes, every reuse counted.
    pub bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            entries: 10_000,
            depth: 32,
            bytes: 32 << 30,
        }
    }
}

/// What one directory expands to.
#[derive(Debug, Clone, Copy)]
struct Size {
    entries: u64,
    bytes: u64,
    height: usize,
}

/// A fetched input tree that passed the checks.
#[derive(Debug)]
pub struct Tree {
    root: re::Digest,
    dirs: HashMap<String, re::Directory>,
    /// Entries as laid out.
    pub entries: u64,
    /// Bytes as laid out.
    pub bytes: u64,
}

/// Fetch the tree under `root` and check it (see the module documentation).
pub fn fetch(remote: &Remote, root: &re::Digest, limits: &Limits) -> Result<Tree, Refusal> {
    let mut f = Fetcher {
        remote,
        limits,
        dirs: HashMap::new(),
        sizes: HashMap::new(),
    };
    let size = f.size(root, 0)?;
    Ok(Tree {
        root: root.clone(),
        dirs: f.dirs,
        entries: size.entries,
        bytes: size.bytes,
    })
}

struct Fetcher<'a> {
    remote: &'a Remote,
    limits: &'a Limits,
    dirs: HashMap<String, re::Directory>,
    sizes: HashMap<String, Size>,
}

impl Fetcher<'_> {
    fn size(&mut self, d: &re::Digest, depth: usize) -> Result<Size, Refusal> {
        let key = digest::show(d);
        if let Some(s) = self.sizes.get(&key) {
            return self.within(*s, depth);
        }
        if depth > self.limits.depth {
            return Err(Refusal::Invalid(format!(
                "the input root is nested deeper than {} directories",
                self.limits.depth
            )));
        }
        let bytes = self
            .remote
            .read_blob(d, DIRECTORY_MAX)
            .map_err(Refusal::from_cas)?;
        let dir = re::Directory::decode(bytes.as_slice()).map_err(|e| {
            Refusal::Invalid(format!("a malformed Directory in the input root: {e}"))
        })?;
        check_names(&dir)?;
        let mut size = Size {
            entries: (dir.files.len() + dir.directories.len()) as u64,
            bytes: 0,
            height: 0,
        };
        for file in &dir.files {
            let n = file.digest.as_ref().map(|d| d.size_bytes).unwrap_or(0);
            if n < 0 {
                return Err(Refusal::Invalid(format!(
                    "the input file {} has a negative size",
                    text::message(&file.name)
                )));
            }
            size.bytes = size.bytes.saturating_add(n as u64);
        }
        self.within(size, depth)?;
        for sub in &dir.directories {
            let sd = sub.digest.clone().unwrap_or_default();
            let s = self.size(&sd, depth + 1)?;
            size.entries = size.entries.saturating_add(s.entries);
            size.bytes = size.bytes.saturating_add(s.bytes);
            size.height = size.height.max(s.height + 1);
            self.within(size, depth)?;
        }
        self.sizes.insert(key.clone(), size);
        self.dirs.insert(key, dir);
        Ok(size)
    }

    /// `s`, a directory at `depth`, within the limits (its expansion counted whole).
    fn within(&self, s: Size, depth: usize) -> Result<Size, Refusal> {
        let l = self.limits;
        if s.entries > l.entries {
            return Err(Refusal::Invalid(format!(
                "the input root expands to more than {} files and directories (a directory reused over and over?); refused before anything was created",
                l.entries
            )));
        }
        if s.bytes > l.bytes {
            return Err(Refusal::Invalid(format!(
                "the input root holds more than {} of files; refused before anything was created",
                crate::hlo::summary::human(l.bytes)
            )));
        }
        if depth + s.height > l.depth {
            return Err(Refusal::Invalid(format!(
                "the input root is nested deeper than {} directories",
                l.depth
            )));
        }
        Ok(s)
    }
}

/// A directory's names: one component each, at most [`NAME_MAX`] bytes, unique; no links.
fn check_names(dir: &re::Directory) -> Result<(), Refusal> {
    if !dir.symlinks.is_empty() {
        return Err(Refusal::Invalid(
            "the input root holds symbolic links; compile actions take files and directories only"
                .into(),
        ));
    }
    let mut seen = HashSet::new();
    let names = dir
        .files
        .iter()
        .map(|f| &f.name)
        .chain(dir.directories.iter().map(|d| &d.name));
    for n in names {
        let ok = !n.is_empty() && n != "." && n != ".." && !n.contains('/') && !n.contains('\0');
        if !ok || n.len() > NAME_MAX {
            return Err(Refusal::Invalid(format!(
                "a bad name in the input root: {:?}",
                text::line(n, 80)
            )));
        }
        if !seen.insert(n.as_str()) {
            return Err(Refusal::Invalid(format!(
                "the name {:?} appears twice in one directory of the input root",
                text::line(n, 80)
            )));
        }
    }
    Ok(())
}

impl Tree {
    /// Whether the root holds `name` (as a file or a directory).
    pub fn root_has(&self, name: &str) -> bool {
        self.dirs.get(&digest::show(&self.root)).is_some_and(|d| {
            d.files.iter().any(|f| f.name == name) || d.directories.iter().any(|s| s.name == name)
        })
    }

    /// Lay the tree out under `dir` (which exists and is empty); the remote's cancellation
    /// stops it between and during downloads.
    pub fn materialize(&self, remote: &Remote, dir: &Path) -> Result<(), Refusal> {
        self.lay_out(remote, &self.root, dir)
    }

    fn lay_out(&self, remote: &Remote, d: &re::Digest, dir: &Path) -> Result<(), Refusal> {
        let Some(tree) = self.dirs.get(&digest::show(d)) else {
            return Err(Refusal::Internal(
                "an input directory was not fetched".into(),
            ));
        };
        for f in &tree.files {
            let path = dir.join(&f.name);
            remote
                .download_input(&f.digest.clone().unwrap_or_default(), &path)
                .map_err(Refusal::from_cas)?;
            if f.is_executable {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(
                    |e| Refusal::Internal(format!("cannot set {}'s mode: {e}", path.display())),
                )?;
            }
        }
        for sub in &tree.directories {
            let p = dir.join(&sub.name);
            std::fs::create_dir(&p)
                .map_err(|e| Refusal::Internal(format!("cannot create {}: {e}", p.display())))?;
            self.lay_out(remote, &sub.digest.clone().unwrap_or_default(), &p)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> re::FileNode {
        re::FileNode {
            name: name.into(),
            digest: Some(digest::of_bytes(b"x")),
            ..Default::default()
        }
    }

    #[test]
    fn names_are_single_unique_and_short() {
        let ok = re::Directory {
            files: vec![node("a.pb"), node("b")],
            ..Default::default()
        };
        assert!(check_names(&ok).is_ok());
        for bad in [
            vec![node("a"), node("a")],
            vec![node("../x")],
            vec![node("")],
            vec![node(&"n".repeat(5000))],
        ] {
            let d = re::Directory {
                files: bad,
                ..Default::default()
            };
            let e = check_names(&d).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        }
        let dup = re::Directory {
            files: vec![node("m")],
            directories: vec![re::DirectoryNode {
                name: "m".into(),
                digest: None,
            }],
            ..Default::default()
        };
        assert!(check_names(&dup).unwrap_err().message().contains("twice"));
    }
}
