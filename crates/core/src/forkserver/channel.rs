//! The fork server's socket: a `SOCK_SEQPACKET` pair that carries one [`Msg`] per datagram,
//! whole or not at all, with its descriptors as `SCM_RIGHTS`; and the sealed memfd that a
//! payload too large for one datagram travels in ([`INLINE_MAX`]). Safe calls only (rustix).

use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

use super::wire::{Msg, WireError};

/// The largest message sent in a datagram: well under the socket's default send buffer (a
/// `SOCK_SEQPACKET` message larger than the buffer cannot be sent at all). A request whose
/// payload would make it larger sends the payload in a memfd.
pub const INLINE_MAX: usize = 64 * 1024;

/// The most descriptors one message carries (a request: three pipes and a memfd).
const MAX_FDS: usize = 4;

/// The seals a payload's memfd must have: its bytes cannot change while they are read.
const PAYLOAD_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::WRITE)
    .union(SealFlags::SEAL);

/// A connected pair of sockets (close-on-exec).
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Send `msg` with `fds` (at most four). A closed peer is `EPIPE`, not a signal.
pub fn send(sock: BorrowedFd<'_>, msg: &Msg, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let bytes = msg.encode();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty()
        && (fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds)))
    {
        return Err(io::Error::other(format!(
            "{} descriptors in one message (at most {MAX_FDS})",
            fds.len()
        )));
    }
    loop {
        match rustix::net::sendmsg(
            sock,
            &[io::IoSlice::new(&bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// What one receive gave.
pub enum Received {
    /// The peer is gone (end of file; an empty message reads as it too).
    Gone,
    /// A message, with the descriptors that came with it (close-on-exec; closed when dropped).
    Msg(Msg, Vec<OwnedFd>),
    /// Bytes that are not a message (their descriptors are closed).
    Bad {
        /// The request's id if its first bytes say it (`Msg::id_of`), else 0.
        id: u64,
        /// Why they are not a message.
        error: WireError,
    },
}

/// Receive one message into `buf` (its size bounds a message: a larger one is refused, not
/// cut). An error is the socket's.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Received> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            sock,
            &mut [io::IoSliceMut::new(buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(got) => break got,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if got.bytes == 0 && fds.is_empty() {
        return Ok(Received::Gone);
    }
    let bytes = &buf[..got.bytes.min(buf.len())];
    let msg = if got.flags.contains(ReturnFlags::TRUNC) {
        Err(WireError::TooLong(buf.len()))
    } else if got.flags.contains(ReturnFlags::CTRUNC) {
        Err(WireError::TooManyFds(MAX_FDS))
    } else {
        Msg::decode(bytes)
    };
    Ok(match msg {
        Ok(msg) => Received::Msg(msg, fds),
        Err(error) => Received::Bad {
            id: Msg::id_of(bytes),
            error,
        },
    })
}

/// A sealed memfd holding `bytes`: it can be read, not changed, by whoever receives it.
pub fn sealed_memfd(bytes: &[u8]) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(
        "nxcc-fork-request",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    let fd = OwnedFd::from(file);
    rustix::fs::fcntl_add_seals(&fd, PAYLOAD_SEALS)?;
    Ok(fd)
}

/// The `len` bytes of a payload's memfd (at most `max`), after checking that it is sealed
/// against change and is exactly that long; the error says why not.
pub(crate) fn read_sealed(fd: impl AsFd, len: u64, max: usize) -> Result<Vec<u8>, String> {
    let fd = fd.as_fd();
    if len > max as u64 {
        return Err(format!(
            "a payload of {len} bytes is larger than the fork server takes ({max})"
        ));
    }
    let seals = rustix::fs::fcntl_get_seals(fd)
        .map_err(|e| format!("the payload's descriptor is not a sealed memfd: {e}"))?;
    let needed = SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE;
    if !seals.contains(needed) {
        return Err("the payload's memfd is not sealed against change".to_string());
    }
    let size = rustix::fs::fstat(fd).map_err(|e| e.to_string())?.st_size;
    if u64::try_from(size).ok() != Some(len) {
        return Err(format!(
            "the payload's memfd holds {size} bytes, the request says {len}"
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    let mut at = 0;
    while at < bytes.len() {
        match rustix::io::pread(fd, &mut bytes[at..], at as u64) {
            Ok(0) => return Err("the payload's memfd ended early".to_string()),
            Ok(n) => at += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("the payload's memfd does not read: {e}")),
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forkserver::wire::Payload;
    use std::io::{Read, Write};

    #[test]
    fn messages_carry_bytes_and_descriptors() {
        let (a, b) = pair().unwrap();
        let (r, w) = crate::run::os::pipe().unwrap();
        let hello = Msg::Refused {
            id: 9,
            why: "hello".into(),
        };
        send(a.as_fd(), &hello, &[w.as_fd()]).unwrap();
        drop(w);
        let mut buf = [0u8; 64];
        let Received::Msg(got, fds) = recv(b.as_fd(), &mut buf).unwrap() else {
            panic!("no message");
        };
        assert_eq!(got, hello);
        assert_eq!(fds.len(), 1);
        // The descriptor that came over is the pipe's writing end.
        let mut f = std::fs::File::from(fds.into_iter().next().unwrap());
        f.write_all(b"x").unwrap();
        drop(f);
        let mut got = String::new();
        std::fs::File::from(r).read_to_string(&mut got).unwrap();
        assert_eq!(got, "x");
        // A message larger than the buffer is refused, not cut.
        let big = Msg::Refused {
            id: 1,
            why: "y".repeat(100),
        };
        send(a.as_fd(), &big, &[]).unwrap();
        assert!(matches!(
            recv(b.as_fd(), &mut buf).unwrap(),
            Received::Bad {
                id: 1,
                error: WireError::TooLong(64)
            }
        ));
        drop(a);
        assert!(matches!(recv(b.as_fd(), &mut buf).unwrap(), Received::Gone));
    }

    /// Why the payload is not sent in the datagram past [`INLINE_MAX`]: a datagram larger than
    /// the socket's buffer cannot be sent at all.
    #[test]
    fn a_datagram_larger_than_the_socket_buffer_is_not_sent() {
        let (a, _b) = pair().unwrap();
        let m = Msg::Spawn {
            id: 1,
            payload: Payload::Inline(vec![0; 1 << 20]),
        };
        let e = send(a.as_fd(), &m, &[]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    }

    #[test]
    fn a_payload_travels_in_a_sealed_memfd() {
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let fd = sealed_memfd(&bytes).unwrap();
        assert_eq!(
            read_sealed(&fd, bytes.len() as u64, 4 << 20).unwrap(),
            bytes
        );
        // Sealed: it cannot be written or resized.
        let mut f = std::fs::File::from(fd.try_clone().unwrap());
        assert!(f.write_all(b"z").is_err());
        assert!(f.set_len(1).is_err());
        // The length must be the request's, and within the bound.
        let e = read_sealed(&fd, 5, 4 << 20).unwrap_err();
        assert!(e.contains("holds 3000000 bytes, the request says 5"), "{e}");
        let e = read_sealed(&fd, bytes.len() as u64, 1 << 20).unwrap_err();
        assert!(e.contains("larger than the fork server takes"), "{e}");
    }

    #[test]
    fn an_unsealed_descriptor_is_not_a_payload() {
        let open =
            rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        let e = read_sealed(&open, 0, 10).unwrap_err();
        assert!(e.contains("not sealed"), "{e}");
        let (r, _w) = crate::run::os::pipe().unwrap();
        let e = read_sealed(&r, 0, 10).unwrap_err();
        assert!(e.contains("not a sealed memfd"), "{e}");
    }
}
