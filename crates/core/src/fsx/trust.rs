//! The one trust rule for the places nxcc reads instructions from, or writes into, on behalf of
//! whoever runs it — nxcc's compile cache, the framework's compile cache, the shim's directory and
//! configuration, the daemon's socket directory, pid file and log. It is ssh's `StrictModes`:
//!
//! - a **directory** must be owned by the invoking user or root, and not writable by its group or
//!   others — unless the caller allows a sticky one (as `/tmp`) and it is sticky: there others
//!   may add entries but cannot remove or replace those that are not theirs, so every entry nxcc
//!   uses in it is checked in turn;
//! - an **entry** nxcc uses (a file it reads instructions from or writes into, a sub-directory, a
//!   socket) must be owned by the user or root; a file must be a regular file not writable by
//!   group or others, a sub-directory passes the directory rule itself;
//! - **no link another user could have placed is followed**: the path to a directory is resolved
//!   one component at a time ([`Trusted::open`]), a symbolic link followed only where it sits in
//!   a directory that passes the rule, or, in a sticky one, when the link is the user's or root's
//!   (what `fs.protected_symlinks` enforces, whatever the host's setting); entries are opened from
//!   the checked directory's descriptor with `O_NOFOLLOW` ([`Trusted::open_file`]), so nothing
//!   swapped in after the check is reached.
//!
//! A violation is an [`Untrusted`] error naming the path, what is wrong and what fixes it:
//! `the socket directory /srv/s is writable by others (mode 0777); remove that permission (chmod
//! go-w /srv/s) or make it sticky (chmod +t /srv/s)`.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, Stat};

use super::dir::Dir;

/// What a place is, in messages, and where else its user can go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject {
    /// `the cache directory`, `the socket directory`, ...
    pub noun: &'static str,
    /// What a file in it is: `the shim's configuration`, `the daemon's file`, ...
    pub file: &'static str,
    /// What to do instead of using it: `use a cache directory of your own (--cache_dir)`.
    pub instead: &'static str,
}

/// A place that breaks the rule, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// What it is (`the cache directory`).
    pub noun: &'static str,
    /// Its path.
    pub path: PathBuf,
    /// What is wrong (`is owned by uid 65534, not by you (uid 1000) or root`).
    pub problem: String,
    /// What fixes it.
    pub fix: String,
}

impl std::fmt::Display for Untrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}; {}",
            self.noun,
            self.path.display(),
            self.problem,
            self.fix
        )
    }
}

impl std::error::Error for Untrusted {}

impl From<Untrusted> for io::Error {
    fn from(u: Untrusted) -> io::Error {
        io::Error::new(io::ErrorKind::PermissionDenied, u)
    }
}

/// The [`Untrusted`] an error carries, if it is one.
pub fn untrusted(e: &io::Error) -> Option<&Untrusted> {
    e.get_ref().and_then(|i| i.downcast_ref::<Untrusted>())
}

/// The effective uid the rule trusts besides root.
fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn owned_by_us(st: &Stat) -> bool {
    st.st_uid == me() || st.st_uid == 0
}

fn owner_problem(st: &Stat) -> String {
    format!(
        "is owned by uid {}, not by you (uid {}) or root",
        st.st_uid,
        me()
    )
}

fn writers(mode: u32) -> &'static str {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "group and others",
        (true, false) => "its group",
        _ => "others",
    }
}

/// The directory rule on a directory's status: owned by the user or root; not writable by group
/// or others unless `sticky_ok` and it is sticky.
pub(crate) fn check_dir(
    st: &Stat,
    subject: &Subject,
    path: &Path,
    sticky_ok: bool,
) -> Result<(), Untrusted> {
    let fail = |problem: String, fix: String| Untrusted {
        noun: subject.noun,
        path: path.to_path_buf(),
        problem,
        fix,
    };
    if !owned_by_us(st) {
        return Err(fail(
            owner_problem(st),
            format!(
                "{}, or give it to yourself (chown {} {})",
                subject.instead,
                me(),
                path.display()
            ),
        ));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 && !(sticky_ok && mode & 0o1000 != 0) {
        let p = path.display();
        return Err(fail(
            format!("is writable by {} (mode {mode:04o})", writers(mode)),
            if sticky_ok {
                format!("remove that permission (chmod go-w {p}) or make it sticky (chmod +t {p})")
            } else {
                format!("remove that permission (chmod go-w {p})")
            },
        ));
    }
    Ok(())
}

/// The entry rule on a file's status: a regular file, owned by the user or root, not writable
/// by group or others.
pub(crate) fn check_file(st: &Stat, subject: &Subject, path: &Path) -> Result<(), Untrusted> {
    let fail = |problem: String, fix: String| Untrusted {
        noun: subject.file,
        path: path.to_path_buf(),
        problem,
        fix,
    };
    let p = path.display();
    let ft = FileType::from_raw_mode(st.st_mode);
    if ft != FileType::RegularFile {
        return Err(fail(
            format!("is {}, not a regular file", super::regular::kind_name(ft)),
            format!("remove it (rm {p})"),
        ));
    }
    if !owned_by_us(st) {
        return Err(fail(
            owner_problem(st),
            format!(
                "remove it if it is not yours (rm {p}), or give it to yourself (chown {} {p})",
                me()
            ),
        ));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(fail(
            format!("is writable by {} (mode {mode:04o})", writers(mode)),
            format!("remove that permission (chmod go-w {p})"),
        ));
    }
    Ok(())
}

/// The owner part of the entry rule, for an entry of any type (a socket).
pub(crate) fn check_owner(st: &Stat, subject: &Subject, path: &Path) -> Result<(), Untrusted> {
    if owned_by_us(st) {
        return Ok(());
    }
    let p = path.display();
    Err(Untrusted {
        noun: subject.file,
        path: path.to_path_buf(),
        problem: owner_problem(st),
        fix: format!(
            "remove it if it is not yours (rm {p}), or {}",
            subject.instead
        ),
    })
}

/// A directory that passed the rule, held by its descriptor.
#[derive(Debug)]
pub struct Trusted {
    dir: Dir,
    path: PathBuf,
    subject: Subject,
}

/// Whether a symbolic link with status `link` in the directory with status `dir` may be
/// followed: only one the user or root could have placed.
fn link_is_trusted(dir: &Stat, link: &Stat) -> bool {
    let mode = dir.st_mode & 0o7777;
    if !owned_by_us(dir) {
        return false;
    }
    if mode & 0o022 == 0 {
        return true;
    }
    mode & 0o1000 != 0 && owned_by_us(link)
}

/// The most symbolic links one resolution follows (the kernel's limit).
const MAX_LINKS: usize = 40;

fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

fn open_root() -> io::Result<Dir> {
    Dir::open(Path::new("/"))
}

/// Open the directory at `path` component by component, following only the symbolic links the
/// user or root placed ([`link_is_trusted`]). `subject` names it in the error of a link refused.
fn resolve(path: &Path, subject: &Subject) -> io::Result<Dir> {
    let path = std::path::absolute(path)?;
    let mut pending = Vec::new();
    push_components(&mut pending, &path);
    let mut cur = open_root()?;
    let mut shown = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = pending.pop() {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let err = match rustix::fs::openat(&cur, name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => {
                cur = Dir::from_fd(fd);
                if name == ".." {
                    shown.pop();
                } else {
                    shown.push(&name);
                }
                continue;
            }
            Err(e) => e,
        };
        // A link opened with O_DIRECTORY | O_NOFOLLOW: ELOOP or ENOTDIR.
        let maybe_link = err == rustix::io::Errno::LOOP || err == rustix::io::Errno::NOTDIR;
        let Some(text) = name.to_str().filter(|_| maybe_link) else {
            return Err(io::Error::from(err));
        };
        let link = cur.stat(text)?;
        let at = shown.join(text);
        if FileType::from_raw_mode(link.st_mode) != FileType::Symlink {
            return Err(io::Error::from(err));
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(io::Error::from(rustix::io::Errno::LOOP));
        }
        if !link_is_trusted(&cur.own_stat()?, &link) {
            return Err(Untrusted {
                noun: subject.noun,
                path: path.clone(),
                problem: format!(
                    "is reached through the symbolic link {}, which uid {} could have placed (it is in a directory others can write)",
                    at.display(),
                    link.st_uid
                ),
                fix: format!("give the path without the link, or {}", subject.instead),
            }
            .into());
        }
        let target = cur.read_link(text)?;
        if target.is_absolute() {
            cur = open_root()?;
            shown = PathBuf::from("/");
        }
        push_components(&mut pending, &target);
    }
    Ok(cur)
}

impl Trusted {
    /// Open the directory at `path` (a path the user gave; see the module documentation for the
    /// links followed) and check it; `sticky_ok`: a sticky directory others can write passes.
    pub fn open(path: &Path, subject: Subject, sticky_ok: bool) -> io::Result<Trusted> {
        let dir = resolve(path, &subject)?;
        check_dir(&dir.own_stat()?, &subject, path, sticky_ok)?;
        Ok(Trusted {
            dir,
            path: path.to_path_buf(),
            subject,
        })
    }

    /// Open the entry `name` as a regular file with `flags` (`O_NOFOLLOW`, `O_NONBLOCK` and
    /// `O_CLOEXEC` added; `mode` when `O_CREAT` makes it), then check it: owned by the user or
    /// root, not writable by group or others. Opening changes nothing in the file (no `O_TRUNC`
    /// here: truncate after the check).
    pub fn open_file(&self, name: &str, flags: OFlags, mode: u32) -> io::Result<File> {
        let path = self.path.join(name);
        let f = match self.dir.open_file_with(name, flags & !OFlags::TRUNC, mode) {
            Ok(f) => f,
            // What is there says why better than the open's error (a link another user placed
            // in a sticky directory may be refused with EACCES).
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                if let Ok(st) = self.dir.stat(name) {
                    check_file(&st, &self.subject, &path)?;
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        check_file(&rustix::fs::fstat(&f)?, &self.subject, &path)?;
        Ok(f)
    }

    /// The status of the entry `name` (not followed), `None` when absent, refused when it is not
    /// the user's or root's.
    pub fn entry(&self, name: &str) -> io::Result<Option<Stat>> {
        match self.dir.stat(name) {
            Ok(st) => {
                check_owner(&st, &self.subject, &self.path.join(name))?;
                Ok(Some(st))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The directory's descriptor, kept.
    pub(crate) fn into_dir(self) -> Dir {
        self.dir
    }

    /// The directory's descriptor.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The directory's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `/proc/self/fd/<descriptor>/<name>`: a path to the entry `name` that goes through this
    /// directory's descriptor (for calls that take only a path, as `bind`), or `None` when `name`
    /// is not one entry.
    pub fn fd_path(&self, name: &str) -> Option<PathBuf> {
        use std::os::fd::{AsFd, AsRawFd};
        let ok = !name.is_empty() && name != "." && name != ".." && !name.contains('/');
        ok.then(|| {
            PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_fd().as_raw_fd())).join(name)
        })
    }
}

/// Whether `name` is a single file name (no `/`, not `.` or `..`, not empty).
pub fn is_entry_name(name: &std::ffi::OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const T: Subject = Subject {
        noun: "the test directory",
        file: "the test file",
        instead: "use another",
    };

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_mode_rule() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        chmod(&d, 0o755);
        Trusted::open(&d, T, false).unwrap();
        chmod(&d, 0o777);
        let e = Trusted::open(&d, T, true).unwrap_err();
        let u = untrusted(&e).unwrap();
        assert_eq!(u.problem, "is writable by group and others (mode 0777)");
        assert!(u.fix.contains("chmod +t"), "{u}");
        chmod(&d, 0o1777);
        Trusted::open(&d, T, true).unwrap();
        let e = Trusted::open(&d, T, false).unwrap_err();
        assert!(untrusted(&e).unwrap().to_string().starts_with(&format!(
            "the test directory {} is writable by group and others (mode 1777); remove that permission",
            d.display()
        )));
        chmod(&d, 0o775);
        assert!(Trusted::open(&d, T, true).is_err(), "group-writable");
    }

    #[test]
    fn files_must_be_plain_private_and_not_links() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"x").unwrap();
        std::os::unix::fs::symlink(t.path().join("f"), t.path().join("l")).unwrap();
        let d = Trusted::open(t.path(), T, false).unwrap();
        d.open_file("f", OFlags::RDONLY, 0).unwrap();
        assert!(d.open_file("l", OFlags::RDONLY, 0).is_err());
        chmod(&t.path().join("f"), 0o666);
        let e = d.open_file("f", OFlags::RDONLY, 0).unwrap_err();
        assert!(untrusted(&e).unwrap().problem.contains("mode 0666"), "{e}");
        let made = d
            .open_file("new", OFlags::WRONLY | OFlags::CREATE, 0o600)
            .unwrap();
        drop(made);
        assert_eq!(
            std::fs::metadata(t.path().join("new"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
    }

    #[test]
    fn links_are_followed_only_where_others_could_not_place_them() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        // A link in a private directory: followed.
        std::os::unix::fs::symlink(&real, t.path().join("ok")).unwrap();
        let d = Trusted::open(&t.path().join("ok"), T, false).unwrap();
        assert_eq!(
            d.dir().own_stat().unwrap().st_ino,
            rustix::fs::stat(&real).unwrap().st_ino
        );
        // Relative links and `..` resolve as the kernel resolves them.
        std::fs::create_dir(real.join("sub")).unwrap();
        std::os::unix::fs::symlink("real/sub/..", t.path().join("rel")).unwrap();
        let d = Trusted::open(&t.path().join("rel/sub"), T, false).unwrap();
        assert_eq!(
            d.dir().own_stat().unwrap().st_ino,
            rustix::fs::stat(real.join("sub")).unwrap().st_ino
        );
        // A link in a directory others can write (not sticky): refused.
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::os::unix::fs::symlink(&real, open.join("l")).unwrap();
        chmod(&open, 0o777);
        let e = Trusted::open(&open.join("l"), T, false).unwrap_err();
        let u = untrusted(&e).expect("refused as untrusted");
        assert!(u.problem.contains("symbolic link"), "{u}");
        // Sticky: a link of the user's own is followed.
        chmod(&open, 0o1777);
        Trusted::open(&open.join("l"), T, false).unwrap();
        // A loop ends.
        std::os::unix::fs::symlink("loop", t.path().join("loop")).unwrap();
        assert!(Trusted::open(&t.path().join("loop"), T, false).is_err());
    }

    #[test]
    fn fd_paths_go_through_the_descriptor() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("x"), b"1").unwrap();
        let d = Trusted::open(t.path(), T, false).unwrap();
        let p = d.fd_path("x").unwrap();
        assert_eq!(std::fs::read(p).unwrap(), b"1");
        assert!(d.fd_path("../x").is_none());
    }
}
