//! The daemon's pid file: `<pid>\n<socket>\n`, held under an exclusive `flock` for as long as the
//! daemon runs. The first line alone is what the original's client reads (`PIDLockFile.read_pid`).
//!
//! The lock, not the content, says whether a daemon is alive: the kernel releases it when its
//! holder dies, so a file left by a killed daemon is stale and is taken over silently. A live
//! holder makes [`lock`] answer [`Lock::Held`] with what the file says about it. Removal on exit
//! happens while the lock is still held, and a taker checks that the file it locked is still the
//! one at the path, so two daemons can never both believe they hold it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

/// A held pid file; removed when dropped.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
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

/// Take the pid file at `path` (its directory is created 0700 if missing).
pub fn lock(path: &Path) -> io::Result<Lock> {
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    loop {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                // The previous holder may have removed the file between our open and our lock:
                // then we hold a lock on a file nobody else can find. Start again.
                let ours = file.metadata()?;
                match std::fs::metadata(path) {
                    Ok(m) if (m.dev(), m.ino()) == (ours.dev(), ours.ino()) => {
                        return Ok(Lock::Acquired(PidFile {
                            path: path.to_path_buf(),
                            file,
                        }))
                    }
                    Ok(_) => continue,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => return Ok(Lock::Held(holder(path))),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Read what a held pid file says. Its holder writes the pid once its socket listens: give it a
/// moment when the file is still empty.
fn holder(path: &Path) -> Holder {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let h = read(path);
        if h.pid.is_some() || Instant::now() >= deadline {
            return h;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Read a pid file without locking it.
pub fn read(path: &Path) -> Holder {
    let mut text = String::new();
    let _ = File::open(path).and_then(|mut f| f.read_to_string(&mut text));
    let mut lines = text.lines();
    Holder {
        pid: lines.next().and_then(|l| l.trim().parse().ok()),
        socket: lines.next().map(str::to_string).filter(|s| !s.is_empty()),
    }
}

impl PidFile {
    /// Write `<pid>\n<socket>\n` (replacing any stale content).
    pub fn publish(&mut self, pid: u32, socket: &str) -> io::Result<()> {
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
        if let (Ok(ours), Ok(now)) = (self.file.metadata(), std::fs::metadata(&self.path)) {
            if (ours.dev(), ours.ino()) == (now.dev(), now.ino()) {
                let _ = std::fs::remove_file(&self.path);
            }
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
    fn private_dirs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("a/b");
        create_private_dir(&d).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
