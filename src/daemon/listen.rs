//! Binding the daemon's listening socket: a socket file (its directory created 0700 and checked
//! by nxcc's trust rule, the socket made 0600 or `--socket-mode`), or the original's abstract
//! address.
//!
//! A socket file left by a daemon that died is replaced; one that still answers is another
//! daemon's, and is left alone. Nothing that is not a socket, and no socket of another user, is
//! ever removed.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use rustix::fs::FileType;

use super::config::ABSTRACT_PREFIX;
use super::pidfile::open_parent;
use crate::fsx::Trusted;

/// Why the socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A live daemon answers there (the socket's path, or `the abstract address @<name>`).
    #[error("another daemon answers on {0}")]
    InUse(String),
    /// The socket's path holds something else (the path).
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(String),
    /// A directory nxcc made in a shared place is not this user's private one
    /// ([`check_private_dir`]).
    #[error("refusing to use the directory {dir}: {why}")]
    UnsafeDir {
        /// The directory.
        dir: String,
        /// What is wrong with it (`it belongs to uid 0, not 1000`).
        why: String,
    },
    /// A directory of the daemon's files breaks nxcc's trust rule.
    #[error("{0}")]
    Untrusted(crate::fsx::Untrusted),
    /// A system call failed.
    #[error("cannot listen on {what}: {source}")]
    Io {
        /// What was being bound or removed (a path, or `the abstract address @<name>`).
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn io_err(what: &Path) -> impl FnOnce(io::Error) -> BindError + '_ {
    move |source| BindError::Io {
        what: what.display().to_string(),
        source,
    }
}

/// Check that a directory nxcc made for itself in a shared place (`/tmp/nxcc-<uid>`) is really
/// this user's and private: another user could have created it first.
pub fn check_private_dir(dir: &Path) -> Result<(), BindError> {
    let m = std::fs::symlink_metadata(dir).map_err(io_err(dir))?;
    let uid = rustix::process::getuid().as_raw();
    let why = if !m.is_dir() {
        Some("it is not a directory".to_string())
    } else if m.uid() != uid {
        Some(format!("it belongs to uid {}, not {uid}", m.uid()))
    } else if m.permissions().mode() & 0o077 != 0 {
        Some(format!(
            "its mode is {:04o}; other users may enter it (expected 0700)",
            m.permissions().mode() & 0o7777
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(BindError::UnsafeDir {
            dir: dir.display().to_string(),
            why,
        }),
        None => Ok(()),
    }
}

/// A socket file this process bound, removed only while it is still the same file.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dir: Trusted,
    name: String,
    id: (u64, u64),
}

impl SocketFile {
    /// The socket file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Remove the socket file, unless it is gone or another socket has taken its place.
    pub fn remove(&self) {
        if let Ok(st) = self.dir.dir().stat(&self.name) {
            if (st.st_dev, st.st_ino) == self.id {
                let _ = self.dir.dir().remove_file(&self.name);
            }
        }
    }
}

/// The error of a daemon file's place: the trust rule's refusal as itself, anything else as a
/// failed system call on `what`.
fn place_err(what: &Path) -> impl FnOnce(io::Error) -> BindError + '_ {
    move |e| match crate::fsx::trust::untrusted(&e) {
        Some(u) => BindError::Untrusted(u.clone()),
        None => io_err(what)(e),
    }
}

/// Bind a socket file at `path` with permission bits `mode`. Its directory is created 0700 if
/// missing and must pass nxcc's trust rule; what is at `path` is looked at, removed (a dead
/// daemon's socket of the user's or root's) and bound through the directory's descriptor, never
/// through a link.
///
/// The process umask is narrowed to 0177 for the duration of the `bind` so the socket is never
/// reachable with wider permissions: call this before starting any thread.
pub fn bind_path(path: &Path, mode: u32) -> Result<(UnixListener, SocketFile), BindError> {
    let (dir, name) = open_parent(path).map_err(place_err(path))?;
    // `bind` and `connect` take a path: one through the checked directory's descriptor when it
    // fits in a socket address, else the path itself.
    let via = dir
        .fd_path(&name)
        .filter(|p| p.as_os_str().len() < 100)
        .unwrap_or_else(|| path.to_path_buf());
    match dir.entry(&name).map_err(place_err(path))? {
        Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Socket => {
            match UnixStream::connect(&via) {
                Ok(_) => return Err(BindError::InUse(path.display().to_string())),
                // Nobody listens: a dead daemon's socket.
                Err(_) => dir.dir().remove_file(&name).map_err(io_err(path))?,
            }
        }
        Some(_) => return Err(BindError::NotASocket(path.display().to_string())),
        None => {}
    }
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = UnixListener::bind(&via);
    rustix::process::umask(old);
    let listener = bound.map_err(io_err(path))?;
    let st = dir.dir().stat(&name).map_err(io_err(path))?;
    let file = SocketFile {
        path: path.to_path_buf(),
        dir,
        name,
        id: (st.st_dev, st.st_ino),
    };
    let chmod = rustix::fs::chmodat(
        file.dir.dir(),
        file.name.as_str(),
        rustix::fs::Mode::from_raw_mode(mode),
        rustix::fs::AtFlags::empty(),
    );
    if let Err(e) = chmod {
        file.remove();
        return Err(io_err(path)(e.into()));
    }
    Ok((listener, file))
}

/// The original's abstract name for a daemon pid: `com.amazon.neuronxcc.<pid>` (bound with a
/// leading NUL byte).
pub fn abstract_name(pid: u32) -> String {
    format!("{ABSTRACT_PREFIX}{pid}")
}

/// Bind the abstract address `\0<name>`.
pub fn bind_abstract(name: &str) -> Result<UnixListener, BindError> {
    use std::os::linux::net::SocketAddrExt;
    let what = || format!("the abstract address @{name}");
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).map_err(|source| {
            BindError::Io {
                what: what(),
                source,
            }
        })?;
    UnixListener::bind_addr(&addr).map_err(|source| {
        if source.kind() == io::ErrorKind::AddrInUse {
            BindError::InUse(what())
        } else {
            BindError::Io {
                what: what(),
                source,
            }
        }
    })
}

/// Connect to an abstract address (the original's client does this; so do the tests).
pub fn connect_abstract(name: &str) -> io::Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixStream::connect_addr(&addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dir_check() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("priv");
        crate::daemon::pidfile::create_private_dir(&p).unwrap();
        check_private_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_private_dir(&p).unwrap_err().to_string();
        assert!(e.contains("mode is 0755"), "{e}");
        let f = dir.path().join("file");
        std::fs::write(&f, "").unwrap();
        assert!(check_private_dir(&f)
            .unwrap_err()
            .to_string()
            .contains("not a directory"));
    }

    #[test]
    fn abstract_names_follow_the_original() {
        assert_eq!(abstract_name(40912), "com.amazon.neuronxcc.40912");
        let name = format!("nxcc-test-{}", std::process::id());
        let l = bind_abstract(&name).unwrap();
        assert!(matches!(bind_abstract(&name), Err(BindError::InUse(_))));
        let _c = connect_abstract(&name).unwrap();
        drop(l);
    }
}
