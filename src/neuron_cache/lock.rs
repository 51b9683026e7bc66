//! The lock of a framework cache entry: `<graph>.lock` (`model.hlo_module.pb.lock`), a plain file
//! while a compile runs — the framework's convention — which nxcc also holds an exclusive
//! `flock` on while it compiles, and removes afterwards ([`EntryLock`]).
//!
//! The `flock` is what tells a live lock from a stale one: the kernel releases it when its
//! holder dies, so a lock file that nxcc made (it says `nxcc pid=... started=...`) and that
//! nobody holds is a dead run's, and is taken over. A lock file someone else made (the
//! framework's own compile, `neuron_parallel_compile`) says nothing about its holder: it is
//! left alone unless breaking foreign locks is asked for.
//!
//! A new lock file appears whole: it is written and `flock`ed under a temporary name, then
//! linked to the lock's name (which fails if a lock is there), so no other process ever sees a
//! lock file of nxcc's without its holder. A taken-over lock is replaced by a rename. A lock is
//! removed by its holder before the `flock` is released; a process that locked a file that is no
//! longer at the name starts again.

use std::fs::File;
use std::io::{self, Read, Write};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, OFlags};

use super::LockOwner;
use crate::fsx::{unique, Dir};

/// What an nxcc lock file starts with.
pub const NXCC_MARK: &str = "nxcc ";

/// An entry locked by this process (released, and the lock file removed, when dropped).
#[derive(Debug)]
pub struct EntryLock {
    dir: Dir,
    name: String,
    file: File,
    /// The lock that was taken over, when there was one (its text, and whose it was).
    pub took_over: Option<LockOwner>,
}

/// What trying to lock an entry gave.
#[derive(Debug)]
pub enum Acquire {
    /// Locked.
    Locked(EntryLock),
    /// Another lock is there and stays: a running holder's, or a foreign one (not broken).
    Held(LockOwner),
    /// The lock's name holds something that is not a plain file (the reason).
    Refused(String),
}

/// The text nxcc writes in its lock files: `nxcc pid=<pid> started=<UTC time> host=<name>`.
pub fn lock_text() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!(
        "{NXCC_MARK}pid={} started={now} host={host}\n",
        std::process::id()
    )
}

fn read_text(f: &mut File) -> String {
    let mut b = Vec::new();
    let _ = Read::by_ref(f).take(4096).read_to_end(&mut b);
    String::from_utf8_lossy(&b).trim_end().to_string()
}

fn flocked(f: &File) -> io::Result<bool> {
    fs4::fs_std::FileExt::try_lock_exclusive(f)
}

/// Who holds the lock file `name` of `dir`; `None` if there is none. Probes with a shared
/// `flock`, released at once.
pub fn owner(dir: &Dir, name: &str) -> io::Result<Option<LockOwner>> {
    let mut f = match dir.open_file_with(name, OFlags::RDONLY, 0) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        r => r?,
    };
    let free = fs4::fs_std::FileExt::try_lock_shared(&f)?;
    let text = read_text(&mut f);
    Ok(Some(if !free {
        LockOwner::Running { text }
    } else if text.starts_with(NXCC_MARK) {
        LockOwner::DeadNxcc { text }
    } else {
        LockOwner::Foreign { text }
    }))
}

fn same_file(dir: &Dir, name: &str, f: &File) -> bool {
    match (dir.stat(name), rustix::fs::fstat(f)) {
        (Ok(a), Ok(b)) => a.st_ino == b.st_ino && a.st_dev == b.st_dev,
        _ => false,
    }
}

/// A new lock file under a temporary name of `dir`: `flock`ed, holding [`lock_text`].
fn fresh(dir: &Dir, name: &str) -> io::Result<(String, File)> {
    let tmp = unique::name(&format!(".{name}.nxcc-"));
    let mut f = dir.create_file(&tmp)?;
    let ok = flocked(&f).and_then(|held| {
        if !held {
            return Err(io::Error::other("a new lock file is locked by another"));
        }
        f.write_all(lock_text().as_bytes())
    });
    if let Err(e) = ok {
        let _ = dir.remove_file(&tmp);
        return Err(e);
    }
    Ok((tmp, f))
}

/// Lock the entry open at `dir` whose graph is `graph`: create its lock file, or take over one
/// nobody holds that nxcc made (or any nobody holds, with `break_foreign`).
pub fn acquire(dir: &Dir, graph: &str, break_foreign: bool) -> io::Result<Acquire> {
    let name = format!("{graph}{}", super::LOCK_SUFFIX);
    for _ in 0..20 {
        match dir.stat(&name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (tmp, f) = fresh(dir, &name)?;
                let linked =
                    rustix::fs::linkat(dir, tmp.as_str(), dir, name.as_str(), AtFlags::empty());
                let _ = dir.remove_file(&tmp);
                match linked {
                    Ok(()) => {
                        return Ok(Acquire::Locked(EntryLock {
                            dir: dir.try_clone()?,
                            name,
                            file: f,
                            took_over: None,
                        }))
                    }
                    Err(rustix::io::Errno::EXIST) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e),
            Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => {
                return Ok(Acquire::Refused(format!(
                    "{name} is not a plain file ({:?})",
                    FileType::from_raw_mode(st.st_mode)
                )))
            }
            Ok(_) => {}
        }
        let mut old = match dir.open_file_with(&name, OFlags::RDONLY, 0) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            r => r?,
        };
        // A scan probing with a shared lock holds it for an instant: try a few times.
        let mut held = false;
        for i in 0..5 {
            if flocked(&old)? {
                held = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(2 << i));
        }
        let text = read_text(&mut old);
        if !held {
            return Ok(Acquire::Held(LockOwner::Running { text }));
        }
        let was = if text.starts_with(NXCC_MARK) {
            LockOwner::DeadNxcc { text }
        } else {
            LockOwner::Foreign { text }
        };
        if matches!(was, LockOwner::Foreign { .. }) && !break_foreign {
            return Ok(Acquire::Held(was));
        }
        if !same_file(dir, &name, &old) {
            continue;
        }
        // Ours now: replace it by a fresh one in one rename (the old one's holder is dead).
        let (tmp, f) = fresh(dir, &name)?;
        if let Err(e) = dir.rename(&tmp, dir, &name) {
            let _ = dir.remove_file(&tmp);
            return Err(e);
        }
        drop(old);
        return Ok(Acquire::Locked(EntryLock {
            dir: dir.try_clone()?,
            name,
            file: f,
            took_over: Some(was),
        }));
    }
    Err(io::Error::other(format!(
        "the lock {name} kept changing while it was being taken"
    )))
}

impl EntryLock {
    /// The lock file's name in the entry.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for EntryLock {
    fn drop(&mut self) {
        // Removed while still held; then the kernel releases the flock with the descriptor.
        if same_file(&self.dir, &self.name, &self.file) {
            let _ = self.dir.remove_file(&self.name);
        }
    }
}

/// Remove the lock file `name` of `dir` if nobody holds an `flock` on it (whoever made it);
/// `Ok(false)` if it is held or gone.
pub fn remove_if_free(dir: &Dir, name: &str) -> io::Result<bool> {
    let f = match dir.open_file_with(name, OFlags::RDONLY, 0) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        r => r?,
    };
    if !flocked(&f)? || !same_file(dir, name, &f) {
        return Ok(false);
    }
    dir.remove_file(name)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = "model.hlo_module.pb";
    const L: &str = "model.hlo_module.pb.lock";

    #[test]
    fn a_lock_excludes_and_is_removed_when_dropped() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let Acquire::Locked(a) = acquire(&d, G, false).unwrap() else {
            panic!()
        };
        let text = std::fs::read_to_string(t.path().join(L)).unwrap();
        assert!(text.starts_with("nxcc pid="), "{text}");
        assert!(matches!(
            owner(&d, L).unwrap(),
            Some(LockOwner::Running { .. })
        ));
        assert!(matches!(
            acquire(&d, G, true).unwrap(),
            Acquire::Held(LockOwner::Running { .. })
        ));
        assert!(!remove_if_free(&d, L).unwrap());
        drop(a);
        assert!(!t.path().join(L).exists());
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().collect();
        assert!(names.is_empty(), "{names:?}");
    }

    #[test]
    fn dead_runs_locks_are_taken_over_foreign_ones_only_when_broken() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        std::fs::write(t.path().join(L), "nxcc pid=1 started=0 host=x\n").unwrap();
        assert!(matches!(
            owner(&d, L).unwrap(),
            Some(LockOwner::DeadNxcc { .. })
        ));
        let Acquire::Locked(a) = acquire(&d, G, false).unwrap() else {
            panic!()
        };
        assert!(matches!(a.took_over, Some(LockOwner::DeadNxcc { .. })));
        assert!(std::fs::read_to_string(t.path().join(L))
            .unwrap()
            .contains(&format!("pid={}", std::process::id())));
        drop(a);
        std::fs::write(t.path().join(L), "").unwrap();
        assert!(matches!(
            acquire(&d, G, false).unwrap(),
            Acquire::Held(LockOwner::Foreign { .. })
        ));
        assert!(t.path().join(L).exists());
        let Acquire::Locked(b) = acquire(&d, G, true).unwrap() else {
            panic!()
        };
        assert!(matches!(b.took_over, Some(LockOwner::Foreign { .. })));
        drop(b);
        std::os::unix::fs::symlink("/etc/passwd", t.path().join(L)).unwrap();
        assert!(matches!(acquire(&d, G, true).unwrap(), Acquire::Refused(_)));
        std::fs::remove_file(t.path().join(L)).unwrap();
        std::fs::write(t.path().join(L), "").unwrap();
        assert!(remove_if_free(&d, L).unwrap());
    }
}
