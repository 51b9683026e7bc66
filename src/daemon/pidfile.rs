//! The daemon's pid file: `<pid>\n<socket>\n`, held under an exclusive `flock` for as long as the
//! daemon runs. Its directory passes nxcc's trust rule ([`open_parent`], also the socket's and
//! the log's), and the file is opened from it without following a link, so a link planted where
//! the pid file goes is refused, never written through. The first line alone is what the
//! original's client reads (`PIDLockFile.read_pid`).
//!
//! The lock, not the content, says whether a daemon is alive: the kernel releases it when its
//! holder dies, so a file left by a killed daemon is stale and is taken over silently. A live
//! holder makes [`lock`] answer [`Lock::Held`] with what the file says about it. Removal on exit
//! happens while the lock is still held, and a taker checks that the file it locked is still the
//! one at the path, so two daemons can never both believe they hold it.

use std::fs::File;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation, OFlags};

use crate::fsx::{Subject, Trusted};

/// The directories of the daemon's socket, pid file and log, in the trust rule's messages.
pub const DAEMON_DIR: Subject = Subject {
    noun: "the daemon's directory",
    file: "the daemon's file",
    instead: "choose a directory of your own (--socket, --pid-file, --log-file)",
};

/// A held pid file; removed when dropped.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    dir: Trusted,
    name: String,
    file: File,
}

/// What a pid file says about the daemon holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holder's pid (`None`: not written yet, or not a number).
    pub pid: Option<u32>,
    /// Where it listens: the socket's path, or `@<name>` for an abstract address (`None`: not
    /// written yet).
    pub socket: Option<String>,
}

/// The outcome of [`lock`].
#[derive(Debug)]
pub enum Lock {
    /// This process holds the lock now.
    Acquired(PidFile),
    /// Another live process holds it; what its file says.
    Held(Holder),
}

/// Create a directory and its missing parents with mode 0700.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The directory of one of the daemon's files (created 0700 with its missing parents), opened
/// and checked by nxcc's trust rule ([`crate::fsx::trust`]: the user's or root's, not writable by
/// others unless sticky, no link another user placed on the way), and the file's name in it.
pub fn open_parent(path: &Path) -> io::Result<(Trusted, String)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| crate::fsx::trust::is_entry_name(std::ffi::OsStr::new(n)))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} does not name a file (or is not UTF-8)", path.display()),
            )
        })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    create_private_dir(dir)?;
    Ok((Trusted::open(dir, DAEMON_DIR, true)?, name.to_string()))
}

fn same_file(f: &File, dir: &Trusted, name: &str) -> io::Result<bool> {
    let ours = rustix::fs::fstat(f)?;
    match dir.dir().stat(name) {
        Ok(now) => Ok((now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Take the pid file at `path` (its directory is created 0700 if missing). The file is opened
/// from its checked directory without following a link, and must be the user's or root's.
pub fn lock(path: &Path) -> io::Result<Lock> {
    let (dir, name) = open_parent(path)?;
    loop {
        let file = dir.open_file(&name, OFlags::RDWR | OFlags::CREATE, 0o644)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                // The previous holder may have removed the file between our open and our lock:
                // then we hold a lock on a file nobody else can find. Start again.
                if same_file(&file, &dir, &name)? {
                    return Ok(Lock::Acquired(PidFile {
                        path: path.to_path_buf(),
                        dir,
                        name,
                        file,
                    }));
                }
            }
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => return Ok(Lock::Held(holder(&file))),
            Err(e) => return Err(e.into()),
        }
    }
}

/// What a live daemon's pid file at `path` says, `None` when no live daemon holds it (absent,
/// or left by a dead one). Nothing is created.
pub fn live_holder(path: &Path) -> io::Result<Option<Holder>> {
    let (dir, name) = match path.parent().filter(|d| d.exists()) {
        Some(_) => open_parent(path)?,
        None => return Ok(None),
    };
    let file = match dir.open_file(&name, OFlags::RDONLY, 0) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        r => r?,
    };
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(Some(holder(&file))),
        _ => Ok(None),
    }
}

/// Read what a held pid file says. Its holder writes the pid once its socket listens: give it a
/// moment when the file is still empty.
fn holder(file: &File) -> Holder {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let h = read_from(file);
        if h.pid.is_some() || Instant::now() >= deadline {
            return h;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What an open pid file says (its first 4 KiB).
fn read_from(file: &File) -> Holder {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 4096];
    let n = file.read_at(&mut buf, 0).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    let mut lines = text.lines();
    Holder {
        pid: lines.next().and_then(|l| l.trim().parse().ok()),
        socket: lines.next().map(str::to_string).filter(|s| !s.is_empty()),
    }
}

/// Read a pid file without locking it (nothing is created; a file that is not the user's or
/// root's, or a link, reads as empty).
pub fn read(path: &Path) -> Holder {
    let empty = Holder {
        pid: None,
        socket: None,
    };
    let Some(parent) = path.parent().filter(|d| d.exists()) else {
        return empty;
    };
    let (Ok(dir), Some(name)) = (
        Trusted::open(parent, DAEMON_DIR, true),
        path.file_name().and_then(|n| n.to_str()),
    ) else {
        return empty;
    };
    match dir.open_file(name, OFlags::RDONLY, 0) {
        Ok(f) => read_from(&f),
        Err(_) => empty,
    }
}

impl PidFile {
    /// Write `<pid>\n<socket>\n` (replacing any stale content).
    pub fn publish(&mut self, pid: u32, socket: &str) -> io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::FileExt;
        let text = format!("{pid}\n{socket}\n");
        self.file.set_len(0)?;
        self.file.write_all_at(text.as_bytes(), 0)?;
        self.file.flush()
    }

    /// The pid file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Removed while still locked (the lock goes with the descriptor, right after).
        if same_file(&self.file, &self.dir, &self.name).unwrap_or(false) {
            let _ = self.dir.dir().remove_file(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_taker_sees_the_first_and_stale_files_are_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/daemon.pid");
        // A stale file: content, no lock holder.
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "999999\n/old.sock\n").unwrap();
        let Lock::Acquired(mut first) = lock(&path).unwrap() else {
            panic!("a stale pid file is taken over")
        };
        first.publish(4242, "/run/d.sock").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "4242\n/run/d.sock\n"
        );
        match lock(&path).unwrap() {
            Lock::Held(h) => {
                assert_eq!(h.pid, Some(4242));
                assert_eq!(h.socket.as_deref(), Some("/run/d.sock"));
            }
            Lock::Acquired(_) => panic!("two holders"),
        }
        drop(first);
        assert!(!path.exists(), "removed on release");
        assert!(matches!(lock(&path).unwrap(), Lock::Acquired(_)));
    }

    #[test]
    fn a_link_where_the_pid_file_goes_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let path = dir.path().join("d.pid");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let e = lock(&path).unwrap_err();
        let u = crate::fsx::trust::untrusted(&e).expect("refused by the trust rule");
        assert_eq!(u.problem, "is a symbolic link, not a regular file");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(read(&path).pid, None);
        assert!(live_holder(&path).is_err());
    }

    #[test]
    fn private_dirs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("a/b");
        create_private_dir(&d).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
