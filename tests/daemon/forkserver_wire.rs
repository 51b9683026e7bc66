//! The fork server's protocol against a real helper (`nxcc` started with its hidden argument, as
//! the daemon restarts one, its socket on descriptor 3), played by hand: a peer of another
//! protocol version and garbage are refused with the reason, without a crash, and the helper
//! goes on serving; a payload of 2 MiB reaches the worker whole, in a sealed memfd.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use nxcc::forkserver::channel::{self, Received};
use nxcc::forkserver::wire::{Msg, Payload, VERSION};
use nxcc::forkserver::{HELPER_ARG, HELPER_FD};

use super::common::*;

/// A helper on its own, with the test as its caller.
struct Helper {
    child: Child,
    sock: OwnedFd,
    _dir: tempfile::TempDir,
}

impl Helper {
    fn start() -> Helper {
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = channel::pair().unwrap();
        let fd = theirs.as_raw_fd();
        let mut cmd = Command::new(nxcc_exe());
        cmd.arg(HELPER_ARG)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: only async-signal-safe calls between fork and exec (dup2, fcntl).
        unsafe {
            cmd.pre_exec(move || {
                let ok = if fd == HELPER_FD {
                    libc::fcntl(fd, libc::F_SETFD, 0) == 0
                } else {
                    libc::dup2(fd, HELPER_FD) >= 0
                };
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = cmd.spawn().unwrap();
        drop(theirs);
        Helper {
            child,
            sock: ours,
            _dir: dir,
        }
    }

    /// Send raw bytes as one message, with descriptors.
    fn send_raw(&self, bytes: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) {
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(fds)));
        }
        rustix::net::sendmsg(
            &self.sock,
            &[std::io::IoSlice::new(bytes)],
            &mut control,
            rustix::net::SendFlags::NOSIGNAL,
        )
        .unwrap();
    }

    /// The helper's next message (failing the test if none comes within the hang guard).
    fn answer(&self) -> (Msg, Vec<OwnedFd>) {
        let mut fds = [rustix::event::PollFd::new(
            &self.sock,
            rustix::event::PollFlags::IN,
        )];
        let guard = hang_guard();
        let timeout = rustix::event::Timespec {
            tv_sec: guard.as_secs() as i64,
            tv_nsec: 0,
        };
        let ready = rustix::event::poll(&mut fds, Some(&timeout)).unwrap();
        assert_eq!(ready, 1, "the fork server did not answer");
        let mut buf = vec![0u8; 4096];
        match channel::recv(self.sock.as_fd(), &mut buf).unwrap() {
            Received::Msg(m, fds) => (m, fds),
            Received::Bad { error, .. } => panic!("an answer that does not read: {error}"),
            Received::Gone => panic!("the fork server is gone"),
        }
    }

    /// Send `bytes` and expect them refused, for request `id`, with a reason containing `why`.
    fn refused(&self, bytes: &[u8], fds: &[std::os::fd::BorrowedFd<'_>], id: u64, why: &str) {
        self.send_raw(bytes, fds);
        match self.answer() {
            (
                Msg::Refused {
                    id: got,
                    why: reason,
                },
                fds,
            ) => {
                assert_eq!(got, id, "{reason}");
                assert!(reason.contains(why), "{reason:?} does not say {why:?}");
                assert!(fds.is_empty());
            }
            (other, _) => panic!("{bytes:?}: not refused but {other:?}"),
        }
    }

    /// Run one request through it: its worker's exit status, stderr and report-pipe text.
    fn run(&self, id: u64, payload: &[u8]) -> (i32, String, String) {
        let (ev_r, ev_w) = nxcc::run::os::pipe().unwrap();
        let (out_r, out_w) = nxcc::run::os::pipe().unwrap();
        let (err_r, err_w) = nxcc::run::os::pipe().unwrap();
        let memfd = (payload.len() > channel::INLINE_MAX / 2)
            .then(|| channel::sealed_memfd(payload).unwrap());
        let request = Msg::Spawn {
            id,
            payload: match &memfd {
                Some(_) => Payload::Memfd {
                    len: payload.len() as u64,
                },
                None => Payload::Inline(payload.to_vec()),
            },
        };
        let mut fds = vec![ev_w.as_fd(), out_w.as_fd(), err_w.as_fd()];
        fds.extend(memfd.as_ref().map(|m| m.as_fd()));
        channel::send(self.sock.as_fd(), &request, &fds).unwrap();
        drop((ev_w, out_w, err_w, memfd));
        let (Msg::Started { id: started, .. }, pidfd) = self.answer() else {
            panic!("the worker was not started");
        };
        assert_eq!((started, pidfd.len()), (id, 1));
        let read = |fd: OwnedFd| {
            let mut s = String::new();
            std::fs::File::from(fd).read_to_string(&mut s).unwrap();
            s
        };
        let (events, _, stderr) = (read(ev_r), read(out_r), read(err_r));
        let (
            Msg::Exited {
                id: ended, status, ..
            },
            _,
        ) = self.answer()
        else {
            panic!("the worker's end was not reported");
        };
        assert_eq!(ended, id);
        (status, stderr, events)
    }

    /// End it (its caller gone) and return what it wrote on stderr.
    fn finish(mut self) -> String {
        drop(self.sock);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
        let mut s = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    }
}

/// A payload the worker cannot read as a hand-off, whose error says how far it read: all of it.
fn unreadable_payload(len: usize) -> Vec<u8> {
    let mut p = b"{\"filler\": \"".to_vec();
    p.resize(len - 2, b'a');
    p.extend_from_slice(b"\"}");
    p
}

fn wait_status_exit(status: i32) -> i32 {
    assert!(libc::WIFEXITED(status), "{status:#x}");
    libc::WEXITSTATUS(status)
}

#[test]
fn a_payload_of_two_mebibytes_reaches_the_worker_whole() {
    let helper = Helper::start();
    let len = 2 << 20;
    let (status, stderr, events) = helper.run(7, &unreadable_payload(len));
    // The worker read every byte: the hand-off's JSON ends at the payload's last one.
    assert_eq!(wait_status_exit(status), 70, "{stderr}");
    assert!(
        stderr.contains("the fork server's request does not read")
            && stderr.contains(&format!("column {len}")),
        "{stderr}"
    );
    assert!(events.contains("does not read"), "{events}");
    helper.finish();
}

#[test]
fn a_peer_of_another_version_is_refused_and_the_helper_serves_on() {
    let helper = Helper::start();
    let mut request = Msg::Spawn {
        id: 5,
        payload: Payload::Inline(b"{}".to_vec()),
    }
    .encode();
    let (_r, w) = nxcc::run::os::pipe().unwrap();
    let fds = [w.as_fd(), w.as_fd(), w.as_fd()];
    for version in [VERSION + 1, 0, b'S'] {
        request[0] = version;
        let why = format!("protocol version {version}, while this nxcc speaks version {VERSION}");
        helper.refused(&request, &fds, 0, &why);
    }
    // The format before the version byte ('S', the id, the payload) is another version too.
    let mut old = vec![b'S'];
    old.extend_from_slice(&9u64.to_le_bytes());
    old.extend_from_slice(b"{}");
    helper.refused(&old, &fds, 0, "protocol version 83");
    // Still serving: a request of this version starts a worker.
    let (status, stderr, _) = helper.run(6, &unreadable_payload(100));
    assert_eq!(wait_status_exit(status), 70, "{stderr}");
    let log = helper.finish();
    assert!(
        log.contains("a request refused: a message of protocol version"),
        "{log}"
    );
}

#[test]
fn garbage_and_cut_requests_are_refused_without_a_crash() {
    let helper = Helper::start();
    let (_r, w) = nxcc::run::os::pipe().unwrap();
    let three = [w.as_fd(), w.as_fd(), w.as_fd()];
    let spawn = Msg::Spawn {
        id: 11,
        payload: Payload::Memfd { len: 4 },
    }
    .encode();
    // Cut anywhere before its end (the version, the kind, the id, the payload's length).
    for n in 1..spawn.len() {
        let id = if n >= 10 { 11 } else { 0 };
        helper.refused(&spawn[..n], &three, id, "cut short");
    }
    helper.refused(
        &[VERSION, b'Q', 1, 0, 0, 0, 0, 0, 0, 0],
        &[],
        1,
        "unknown kind 0x51",
    );
    helper.refused(&[0xff; 300], &[], 0, "protocol version 255");
    // Not a request; wrong descriptors; a payload kind it does not know.
    let started = Msg::Started { id: 12, pid: 1 }.encode();
    helper.refused(&started, &[], 12, "is not a request");
    let inline = Msg::Spawn {
        id: 13,
        payload: Payload::Inline(b"{}".to_vec()),
    }
    .encode();
    helper.refused(&inline, &three[..1], 13, "1 descriptors (3 expected)");
    let mut odd = inline.clone();
    odd[10] = 7;
    helper.refused(&odd, &three, 13, "payload is of unknown kind 0x07");
    // A payload "in a memfd" that is a pipe, or a memfd that is not sealed, or of another length.
    let four = [w.as_fd(), w.as_fd(), w.as_fd(), w.as_fd()];
    helper.refused(&spawn, &four, 11, "not a sealed memfd");
    let open = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
    let with_open = [w.as_fd(), w.as_fd(), w.as_fd(), open.as_fd()];
    helper.refused(&spawn, &with_open, 11, "not sealed against change");
    let sealed = channel::sealed_memfd(b"12345").unwrap();
    let with_sealed = [w.as_fd(), w.as_fd(), w.as_fd(), sealed.as_fd()];
    helper.refused(
        &spawn,
        &with_sealed,
        11,
        "holds 5 bytes, the request says 4",
    );
    // A message longer than any request the socket carries inline.
    let mut long = vec![0u8; channel::INLINE_MAX + 1];
    long[..2].copy_from_slice(&[VERSION, b'S']);
    helper.refused(&long, &[], 0, "larger than");
    // Alive and serving.
    let (status, stderr, _) = helper.run(14, &unreadable_payload(100));
    assert_eq!(wait_status_exit(status), 70, "{stderr}");
    let log = helper.finish();
    assert!(!log.contains("panicked"), "{log}");
}
