//! The commit nxcc is built from, read from git when the package is built in a checkout of its
//! own repository (a source archive has no git: then there is none, and `--version` says the
//! package version alone). Used by the build script; its tests include it too.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The commit checked out in `dir`: its hash (12 digits) and its date (`YYYY-MM-DD`); `None`
/// when `dir` is not the top of a git work tree (a source archive, even one unpacked inside
/// another repository) or git is missing.
pub fn head(dir: &Path) -> Option<(String, String)> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    if std::fs::canonicalize(top).ok()? != std::fs::canonicalize(dir).ok()? {
        return None;
    }
    let line = git(dir, &["log", "-1", "--format=%H %cs"])?;
    let (hash, date) = line.split_once(' ')?;
    let hex = hash.len() >= 12 && hash.chars().all(|c| c.is_ascii_hexdigit());
    hex.then(|| (hash[..12].to_string(), date.to_string()))
}

/// The files whose change means another commit is checked out: `HEAD`, the branch it names,
/// the packed references.
pub fn watched(dir: &Path) -> Vec<PathBuf> {
    let (Some(git_dir), Some(common)) = (
        git(dir, &["rev-parse", "--absolute-git-dir"]),
        git(dir, &["rev-parse", "--git-common-dir"]),
    ) else {
        return Vec::new();
    };
    let common = dir.join(common);
    let mut files = vec![
        PathBuf::from(&git_dir).join("HEAD"),
        common.join("packed-refs"),
    ];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        files.push(common.join(branch));
    }
    files
}

/// One line git prints, trimmed; `None` if it fails or prints nothing.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
