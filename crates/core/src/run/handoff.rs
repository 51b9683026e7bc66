//! What a supervisor hands an executed worker: bytes (what they mean is the caller's business),
//! written into an anonymous file (`memfd_create`; an unlinked temporary file where that is not
//! available) whose descriptor the worker inherits across `exec` and finds named in
//! [`HANDOFF_FD_ENV`]. The worker reads them once ([`take`]), from the start, up to
//! [`MAX_HANDOFF`] bytes; the descriptor is closed after.
//!
//! A forked worker needs none of this (it has the bytes already); a worker started by the
//! daemon's fork server gets the same bytes in its request.

use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The environment variable holding the hand-off's file descriptor number in the worker.
pub const HANDOFF_FD_ENV: &str = "NXCC_WORKER_HANDOFF_FD";

/// The most a worker reads (a plan is a few KiB).
pub const MAX_HANDOFF: u64 = 64 << 20;

/// An anonymous file holding `bytes`, positioned at its start, close-on-exec (the caller clears
/// that for the one child it hands it to).
pub(crate) fn file_with(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let mut file = match rustix::fs::memfd_create("nxcc-handoff", rustix::fs::MemfdFlags::CLOEXEC) {
        Ok(fd) => std::fs::File::from(fd),
        Err(_) => tempfile::tempfile()?,
    };
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(OwnedFd::from(file))
}

/// In the worker: the bytes its supervisor handed it, if it was handed any. The descriptor is
/// closed and the variable removed, so nothing the worker starts inherits either.
pub fn take() -> std::io::Result<Option<Vec<u8>>> {
    let Some(text) = std::env::var_os(HANDOFF_FD_ENV) else {
        return Ok(None);
    };
    std::env::remove_var(HANDOFF_FD_ENV);
    let fd: RawFd = text
        .to_str()
        .and_then(|t| t.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| std::io::Error::other(format!("{HANDOFF_FD_ENV} is not a descriptor")))?;
    // SAFETY: F_GETFD only asks whether the number is an open descriptor.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(std::io::Error::other(format!(
            "{HANDOFF_FD_ENV} names no open descriptor"
        )));
    }
    // SAFETY: the supervisor passed this descriptor for exactly this use; nothing else in the
    // worker owns it.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut bytes = Vec::new();
    file.take(MAX_HANDOFF + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_HANDOFF {
        return Err(std::io::Error::other(format!(
            "the hand-off is larger than {MAX_HANDOFF} bytes"
        )));
    }
    Ok(Some(bytes))
}

/// The descriptor's number, for the child's environment.
pub(crate) fn fd_text(fd: &OwnedFd) -> String {
    fd.as_raw_fd().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_read_back_whole() {
        let fd = file_with(b"a plan").unwrap();
        let mut back = String::new();
        std::fs::File::from(fd).read_to_string(&mut back).unwrap();
        assert_eq!(back, "a plan");
    }
}
