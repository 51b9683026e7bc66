//! The framework cache's two locks.
//!
//! - An entry's lock, `<graph>.lock` (`model.hlo_module.pb.lock`): a plain file while a compile
//!   runs — the framework's convention — which nxcc makes and judges with the one lock protocol
//!   ([`crate::lockfile`]: its holder's host, pid, start time and a refreshed lease), so that the
//!   locks of dead nxcc runs, here or on another host, are told from live ones. A lock file the
//!   framework made says nothing of its holder ([`Holder::Foreign`]).
//! - The cache-wide lock, `<cache>/lock` ([`CacheLock`]), which the framework's wrapper holds
//!   around its cache operations ([`crate::recon::framework`]): nxcc holds it — an `flock` and an
//!   open-file-description `fcntl` lock, as the wrapper's kind is not established — around its
//!   scans and its writes into entries, and waits for it, saying so, when someone else holds it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use rustix::fs::OFlags;

use super::LOCK_SUFFIX;
use crate::fsx::Dir;
pub use crate::lockfile::Holder;
use crate::recon::framework::CACHE_LOCK;

/// The name of the lock of an entry whose graph is `graph`.
pub fn lock_name(graph: &str) -> String {
    format!("{graph}{LOCK_SUFFIX}")
}

/// `<cache>/lock`, opened once (created if absent, as the wrapper creates it).
#[derive(Debug)]
pub struct CacheLock {
    file: File,
    path: PathBuf,
    inside: Mutex<()>,
}

/// The cache-wide lock held (released when dropped).
#[derive(Debug)]
pub struct CacheGuard<'a> {
    lock: &'a CacheLock,
    _inside: MutexGuard<'a, ()>,
}

fn ofd_lock(f: &File, kind: libc::c_int, wait: bool) -> io::Result<bool> {
    // SAFETY: a zeroed flock is a valid value to fill in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        // SAFETY: a valid descriptor and a valid flock struct.
        if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &fl) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if !wait => return Ok(false),
            _ => return Err(e),
        }
    }
}

impl CacheLock {
    /// Open (or create) `lock` in the cache directory open at `top`, whose path is `dir`; the
    /// name must be a plain file (no link followed).
    pub fn open(top: &Dir, dir: &std::path::Path) -> io::Result<CacheLock> {
        let file = top.open_file_with(CACHE_LOCK, OFlags::RDWR | OFlags::CREATE, 0o666)?;
        Ok(CacheLock {
            file,
            path: dir.join(CACHE_LOCK),
            inside: Mutex::new(()),
        })
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Hold it (one holder in this process at a time); when another process holds it, `say` is
    /// told once, then this waits.
    pub fn hold(&self, say: &dyn Fn(&str)) -> io::Result<CacheGuard<'_>> {
        let inside = self.inside.lock().unwrap_or_else(|p| p.into_inner());
        let mut said = false;
        let mut tell = || {
            if !said {
                said = true;
                say(&format!(
                    "waiting for the cache lock {} (another process holds it)",
                    self.path.display()
                ));
            }
        };
        if !fs4::fs_std::FileExt::try_lock_exclusive(&self.file)? {
            tell();
            fs4::fs_std::FileExt::lock_exclusive(&self.file)?;
        }
        let held = ofd_lock(&self.file, libc::F_WRLCK, false).and_then(|got| {
            if got {
                return Ok(());
            }
            tell();
            ofd_lock(&self.file, libc::F_WRLCK, true).map(|_| ())
        });
        if let Err(e) = held {
            let _ = fs4::fs_std::FileExt::unlock(&self.file);
            return Err(e);
        }
        Ok(CacheGuard {
            lock: self,
            _inside: inside,
        })
    }
}

impl Drop for CacheGuard<'_> {
    fn drop(&mut self) {
        let _ = ofd_lock(&self.lock.file, libc::F_UNLCK, false);
        let _ = fs4::fs_std::FileExt::unlock(&self.lock.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_lock_excludes_flock_and_fcntl_holders_and_says_it_waits() {
        let t = tempfile::tempdir().unwrap();
        let top = Dir::open(t.path()).unwrap();
        let lock = CacheLock::open(&top, t.path()).unwrap();
        let said = std::sync::Mutex::new(Vec::<String>::new());
        drop(lock.hold(&|m| said.lock().unwrap().push(m.into())).unwrap());
        assert!(said.lock().unwrap().is_empty());
        // Another open file description holding an OFD lock makes hold() wait.
        let other = File::options()
            .read(true)
            .write(true)
            .open(t.path().join("lock"))
            .unwrap();
        assert!(ofd_lock(&other, libc::F_WRLCK, false).unwrap());
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let _g = lock.hold(&|m| said.lock().unwrap().push(m.into())).unwrap();
            });
            while said.lock().unwrap().is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            ofd_lock(&other, libc::F_UNLCK, false).unwrap();
            h.join().unwrap();
        });
        let said = said.into_inner().unwrap();
        assert_eq!(said.len(), 1);
        assert!(said[0].contains("waiting for the cache lock"), "{said:?}");
    }
}
