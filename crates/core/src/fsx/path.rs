//! Paths from a command line: made absolute against the directory the command was launched in,
//! without touching the file system.

use std::path::{Component, Path, PathBuf};

/// `p` made absolute against `launch_dir` and normalised lexically, as Python's
/// `os.path.abspath` does (WIKI `getAbsPath`): `.` dropped, `..` taking off the component before
/// it (a link is not followed, as the original does not).
pub fn absolute(launch_dir: &Path, p: &str) -> PathBuf {
    let joined = launch_dir.join(p);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_the_launch_directorys() {
        let l = Path::new("/work/launch");
        assert_eq!(absolute(l, "m.pb"), Path::new("/work/launch/m.pb"));
        assert_eq!(absolute(l, "./a/../b/./c"), Path::new("/work/launch/b/c"));
        assert_eq!(absolute(l, "../../../x"), Path::new("/x"));
        assert_eq!(absolute(l, "/abs/./y"), Path::new("/abs/y"));
    }
}
