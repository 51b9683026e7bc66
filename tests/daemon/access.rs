//! Access control: only the daemon's own uid and `--allow-uid` uids are served, and a uid that
//! is not is refused at `accept`, never served — one short `403` its client can read (written
//! after its request head, the connection shut down for writing, then closed), its refusals
//! logged at a bounded rate — so that hundreds of its connections cost the owner nothing. The other user is created for the test (and removed after it); running a
//! client under its uid needs root, as CI has: without root these tests fail, saying so.

use std::io::Read;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;

/// Fail, saying why, unless running as root: these tests create a user and run a client under
/// its uid. They are never reported as passed without having run.
fn require_root(test: &str) {
    assert!(
        rustix::process::getuid().is_root(),
        "{test} needs root (it creates a user and runs a client under its uid); run the daemon tests as root, as CI does"
    );
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// A user made for one test (`useradd -M`), removed when dropped.
struct TestUser {
    name: String,
    uid: u32,
    gid: u32,
}

impl TestUser {
    fn create() -> TestUser {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "nxcct{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        // Another test may hold the passwd lock for a moment: try again.
        let mut last = String::new();
        for _ in 0..50 {
            let out = Command::new("useradd")
                .args(["-M", "-U", "-s", "/bin/false", &name])
                .output()
                .expect("useradd must be installed to run this test");
            if out.status.success() {
                let id = |flag: &str| -> u32 {
                    let o = Command::new("id").args([flag, &name]).output().unwrap();
                    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
                };
                return TestUser {
                    uid: id("-u"),
                    gid: id("-g"),
                    name,
                };
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("cannot create the user {name}: {last}");
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        for _ in 0..50 {
            let ok = Command::new("userdel")
                .arg(&self.name)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove the test user {}", self.name);
    }
}

/// A place another user can reach: the world's directory, a socket directory and a working
/// directory open to all (the socket itself is made reachable with `--socket-mode`).
fn public_dirs(world: &World) -> PathBuf {
    chmod(world.path(), 0o755);
    let public = world.mkdir("public");
    chmod(&public, 0o777);
    let dir = world.mkdir("public/client");
    chmod(&dir, 0o777);
    dir
}

/// A world whose public client directory (returned) holds `m.hlo`, the `n`th distinct model,
/// readable by every user.
fn public_model(n: usize) -> (World, PathBuf) {
    let world = World::new();
    let dir = public_dirs(&world);
    std::fs::write(dir.join("m.hlo"), distinct_model(n)).unwrap();
    chmod(&dir.join("m.hlo"), 0o644);
    (world, dir)
}

/// `nxcc compile --daemon` as `user`, from `dir`, on `socket`.
fn client_as(user: &TestUser, world: &World, dir: &Path, socket: &Path) -> std::process::Output {
    world
        .daemon_client("out.neff")
        .env("NXCC_DAEMON_SOCKET", socket)
        .current_dir(dir)
        .uid(user.uid)
        .gid(user.gid)
        .output()
        .unwrap()
}

#[test]
fn the_socket_and_its_directory_are_private_by_default() {
    let world = World::new();
    let daemon = Daemon::start(&world, "fresh/dir", &[], &[]);
    assert_eq!(mode(daemon.socket.parent().unwrap()), 0o700);
    assert_eq!(mode(&daemon.socket), 0o600);
    let wider = Daemon::start(&world, "wide", &["--socket-mode", "0666"], &[]);
    assert_eq!(mode(&wider.socket), 0o666);
}

#[test]
fn other_users_get_403_unless_allowed() {
    require_root("other_users_get_403_unless_allowed");
    let user = TestUser::create();
    let (world, dir) = public_model(2);

    let refusing = Daemon::start(&world, "public/refusing", &["--socket-mode", "0666"], &[]);
    chmod(refusing.socket.parent().unwrap(), 0o755);
    // Answered even without sending a byte (once the refusal's wait for a request head is over).
    let answer = refused_answer(&user, &refusing.socket);
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains(&format!("uid {} may not use this nxcc daemon", user.uid)),
        "{answer}"
    );
    // Through nxcc's client, which writes its request at once: it reads the 403 (never a
    // reset), a failed compile, nothing written.
    for _ in 0..10 {
        let out = client_as(&user, &world, &dir, &refusing.socket);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{stderr}");
        assert!(
            stderr.contains("refused the compile (403 Forbidden)")
                && stderr.contains(&format!("uid {} may not use this nxcc daemon", user.uid)),
            "{stderr}"
        );
    }
    assert!(!dir.join("out.neff").exists(), "nothing compiled");
    let tools_before = world.records().len();
    assert!(
        refusing
            .log_text()
            .contains(&format!("refused a connection from uid {} (pid ", user.uid)),
        "{}",
        refusing.log_text()
    );

    let allowing = Daemon::start(
        &world,
        "public/allowing",
        &[
            "--socket-mode",
            "0666",
            "--allow-uid",
            &user.uid.to_string(),
            // The world's simulated toolchain travels with the client's requests.
            "--allow-test-env",
        ],
        &[],
    );
    chmod(allowing.socket.parent().unwrap(), 0o755);
    let out = client_as(&user, &world, &dir, &allowing.socket);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Compiler status PASS"), "{stdout}");
    assert_eq!(neff_first_input(&dir.join("out.neff")), "x2.1");
    assert!(world.records().len() > tools_before);
    assert!(allowing
        .log_text()
        .contains(&format!("(/v1/compile, uid {},", user.uid)));
}

/// Connect to `socket` as `user` (in a forked child), send nothing, and read the answer to EOF.
fn refused_answer(user: &TestUser, socket: &Path) -> String {
    let flood = Flood::start(user, socket, 1, false);
    let (refused, other, answer) = flood.results();
    assert_eq!((refused, other), (1, 0), "{answer}");
    answer
}

/// `n` connections opened by another uid from a forked child, each read to its end (a receive
/// timeout of [`hang_guard`] guards against a daemon that never answers) and then held open
/// until the flood is dropped.
struct Flood {
    pid: libc::pid_t,
    results: std::fs::File,
    hold: Option<std::fs::File>,
}

/// The most bytes of an answer the flooding child keeps (the first connection's is reported).
const ANSWER_BYTES: usize = 1024;

/// The start of an answer read from `fd` (into a buffer on the stack: a forked child calls it),
/// and whether the daemon then ended the stream (only the end of the stream counts: a reset
/// loses the answer).
fn read_answer(fd: libc::c_int) -> ([u8; ANSWER_BYTES], bool) {
    let mut buf = [0u8; ANSWER_BYTES];
    let mut got = 0usize;
    while got < buf.len() {
        // SAFETY: a read into the part of `buf` not yet filled, whose length it is given.
        let r = unsafe {
            libc::read(
                fd,
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
            )
        };
        if r == 0 {
            return (buf, true);
        }
        if r < 0 {
            break;
        }
        got += r as usize;
    }
    (buf, false)
}

impl Flood {
    /// Start the child: every connection writes a request first (`send`), or sends nothing.
    fn start(user: &TestUser, socket: &Path, n: usize, send: bool) -> Flood {
        // Everything the child needs is made before the fork: it only makes system calls.
        // SAFETY: sockaddr_un is plain data, for which all zeroes is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let path = socket.as_os_str().as_bytes();
        assert!(path.len() < addr.sun_path.len());
        for (d, s) in addr.sun_path.iter_mut().zip(path) {
            *d = *s as libc::c_char;
        }
        let request =
            b"POST /v1/compile HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{\"argv\": []}";
        let guard = hang_guard();
        let timeout = libc::timeval {
            tv_sec: guard.as_secs() as libc::time_t,
            tv_usec: guard.subsec_micros() as libc::suseconds_t,
        };
        let mut results = [0 as libc::c_int; 2];
        let mut hold = [0 as libc::c_int; 2];
        // SAFETY: plain pipe creation into arrays of two descriptors.
        unsafe {
            assert_eq!(libc::pipe2(results.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert_eq!(libc::pipe2(hold.as_mut_ptr(), libc::O_CLOEXEC), 0);
        }
        let (uid, gid) = (user.uid, user.gid);
        // SAFETY: the child makes only async-signal-safe system calls on memory prepared above,
        // and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: the forked child: only system calls on memory prepared before the fork, and `_exit`.
            unsafe {
                libc::close(results[0]);
                libc::close(hold[1]);
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    libc::_exit(3);
                }
                let mut counts = [0u32; 2];
                let mut first = [0u8; ANSWER_BYTES];
                for i in 0..n {
                    let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                    libc::setsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_RCVTIMEO,
                        &timeout as *const libc::timeval as *const libc::c_void,
                        std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                    );
                    if libc::connect(
                        fd,
                        &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                        std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                    ) != 0
                    {
                        counts[1] += 1;
                        continue;
                    }
                    let mut sent = true;
                    if send {
                        sent = libc::send(
                            fd,
                            request.as_ptr() as *const libc::c_void,
                            request.len(),
                            libc::MSG_NOSIGNAL,
                        ) == request.len() as isize;
                    }
                    let (buf, closed) = read_answer(fd);
                    if i == 0 {
                        first = buf;
                    }
                    if sent && closed && buf.starts_with(b"HTTP/1.1 403 ") {
                        counts[0] += 1;
                    } else {
                        counts[1] += 1;
                    }
                    // Held open: the daemon must not need it to be closed.
                }
                let mut out = [0u8; 8 + ANSWER_BYTES];
                out[..4].copy_from_slice(&counts[0].to_le_bytes());
                out[4..8].copy_from_slice(&counts[1].to_le_bytes());
                out[8..].copy_from_slice(&first);
                libc::write(results[1], out.as_ptr() as *const libc::c_void, out.len());
                let mut b = [0u8; 1];
                libc::read(hold[0], b.as_mut_ptr() as *mut libc::c_void, 1);
                libc::_exit(0);
            }
        }
        // SAFETY: closing the child's ends in the parent; the others become owned files.
        unsafe {
            libc::close(results[1]);
            libc::close(hold[0]);
            Flood {
                pid,
                results: std::fs::File::from_raw_fd(results[0]),
                hold: Some(std::fs::File::from_raw_fd(hold[1])),
            }
        }
    }

    /// (connections answered 403 and closed by the daemon, others, the first answer); waits for
    /// the child to have opened them all.
    fn results(&self) -> (u32, u32, String) {
        let mut out = vec![0u8; 8 + ANSWER_BYTES];
        (&self.results)
            .read_exact(&mut out)
            .expect("the flooding child ended without reporting");
        let answer = String::from_utf8_lossy(&out[8..]);
        (
            u32::from_le_bytes(out[..4].try_into().unwrap()),
            u32::from_le_bytes(out[4..8].try_into().unwrap()),
            answer.trim_end_matches('\0').to_string(),
        )
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        drop(self.hold.take());
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}

/// The daemon's open descriptors.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
fn a_refused_uid_opening_hundreds_of_connections_does_not_hold_up_the_owner() {
    require_root("a_refused_uid_opening_hundreds_of_connections_does_not_hold_up_the_owner");
    const N: usize = 400;
    let user = TestUser::create();
    let world = World::new();
    public_dirs(&world);
    let daemon = Daemon::start(&world, "public/d", &["--socket-mode", "0666"], &[]);
    chmod(daemon.socket.parent().unwrap(), 0o755);
    let wd = world.mkdir("w");
    std::fs::write(wd.join("m.hlo"), distinct_model(3)).unwrap();
    let fds_before = open_fds(daemon.pid());

    let flood = Flood::start(&user, &daemon.socket, N, true);
    // The owner is served while the flood goes on.
    for _ in 0..5 {
        assert_eq!(daemon.status()["running"], 0);
    }
    let r = daemon.compile(
        &wd,
        "compile m.hlo --target trn2 --toolchain sim --output own.neff",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(neff_first_input(&wd.join("own.neff")), "x3.1");

    // Every one of its connections was answered 403 and closed by the daemon, although the
    // flooding child still holds them all open.
    let (refused, other, answer) = flood.results();
    assert_eq!((refused, other), (N as u32, 0), "{answer}");
    // Each refused connection is closed within the refusal's bounded wait for its client to
    // close, held open or not.
    let deadline = std::time::Instant::now() + hang_guard();
    let mut fds = open_fds(daemon.pid());
    while fds >= fds_before + 16 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        fds = open_fds(daemon.pid());
    }
    assert!(
        fds < fds_before + 16,
        "the daemon holds {fds} descriptors (it held {fds_before} before the flood)"
    );
    assert_eq!(daemon.status()["running"], 0);
    drop(flood);

    // Its log says so in a few lines with a count, not in one line per connection.
    let log = daemon.log_text();
    let lines = log
        .lines()
        .filter(|l| l.contains(&format!("from uid {}", user.uid)))
        .count();
    assert!(
        (1..=4).contains(&lines),
        "{lines} lines about uid {} for {N} connections:\n{log}",
        user.uid
    );
}

#[test]
fn a_default_directory_open_to_others_is_refused_by_daemon_and_client() {
    let world = World::new();
    // Someone made the default directory first, readable by all.
    let dir = world.runtime.join("nxcc");
    std::fs::create_dir_all(&dir).unwrap();
    chmod(&dir, 0o755);
    let expected = format!(
        "refusing to use the directory {}: its mode is 0755",
        dir.display()
    );
    let out = world.nxcc().arg("daemon").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing made in it"
    );
    let wd = world.mkdir("w");
    let out = world
        .nxcc()
        .args(["compile", "--daemon", "m.pb", "--target", "trn2"])
        .current_dir(&wd)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// The name of the entry of `/tmp` that `path` lies under ("" when it is not under `/tmp`).
fn entry_of_tmp_holding(path: &std::path::Path) -> String {
    let path = std::fs::canonicalize(path).unwrap();
    match path.strip_prefix("/tmp").ok().and_then(|p| p.iter().next()) {
        Some(name) => name.to_str().unwrap().to_string(),
        None => String::new(),
    }
}

/// Without `XDG_RUNTIME_DIR` the daemon lives in `/tmp`, where another user (uid 65534, for
/// real) made `/tmp/nxcc-<uid>` first: `compile --daemon` goes on, with a fresh private
/// directory of this user's, which the next compile finds again. The test has a `/tmp` of its
/// own (a mount namespace; the real one is never touched), and everything else outside it.
#[test]
fn a_default_directory_another_user_made_first_in_tmp_is_met_with_a_fresh_private_one() {
    require_root(
        "a_default_directory_another_user_made_first_in_tmp_is_met_with_a_fresh_private_one",
    );
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (tmp, wd) = (base.path().join("tmp"), base.path().join("w"));
    for d in [
        &tmp,
        &wd,
        &base.path().join("cache"),
        &base.path().join("state"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(wd.join("m.hlo"), distinct_model(7)).unwrap();
    let uid = rustix::process::getuid().as_raw();
    // A checkout under /tmp (CI's clone) would vanish under the new /tmp: the entry of /tmp
    // that holds it is opened first and bound back into the new /tmp through its descriptor.
    let script = format!(
        r#"set -e
if [ -n "$1" ]; then exec 3<"/tmp/$1"; fi
mount -t tmpfs -o mode=1777 tmpfs /tmp
if [ -n "$1" ]; then
  mkdir "/tmp/$1" && mount --no-canonicalize --bind /proc/self/fd/3 "/tmp/$1" && exec 3<&-
fi
setpriv --reuid 65534 --regid 65534 --clear-groups mkdir -m 0755 /tmp/nxcc-{uid}
"$0" compile --daemon m.hlo --target trn2 --toolchain sim --output a.neff
"$0" compile --daemon m.hlo --target trn2 --toolchain sim --output b.neff
for d in /tmp/nxcc-{uid}*; do stat -c '%n %u %a' "$d"; done
for d in /tmp/nxcc-{uid}-*; do "$0" daemon stop --socket "$d/daemon.sock"; done
"#
    );
    let mut c = World::new().nxcc();
    c.env_remove("XDG_RUNTIME_DIR")
        .env("XDG_CACHE_HOME", base.path().join("cache"))
        .env("NXCC_SIM_STATE", base.path().join("state"))
        .env("NXCC_SIM_RECORD", base.path().join("record.jsonl"))
        .env(
            "NEURON_COMPILE_CACHE_URL",
            base.path().join("compile-cache"),
        )
        .env("TMPDIR", &tmp);
    let mut ns = Command::new("unshare");
    ns.args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(c.get_program())
        .arg(entry_of_tmp_holding(base.path()))
        .current_dir(&wd);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => ns.env(k, v),
            None => ns.env_remove(k),
        };
    }
    let o = ns.output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        wd.join("a.neff").is_file() && wd.join("b.neff").is_file(),
        "{err}"
    );
    // The squatted name, left alone; one private directory of this user's, used twice.
    let dirs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("/tmp/nxcc-"))
        .collect();
    assert_eq!(dirs.len(), 2, "{out}");
    assert_eq!(dirs[0], format!("/tmp/nxcc-{uid} 65534 755"), "{out}");
    assert!(
        dirs[1].starts_with(&format!("/tmp/nxcc-{uid}-"))
            && dirs[1].ends_with(&format!(" {uid} 700")),
        "{out}"
    );
    assert_eq!(
        err.matches("starting one in the background").count(),
        1,
        "{err}"
    );
}

#[test]
fn a_served_users_bundle_is_written_by_that_user_never_by_the_daemon() {
    use std::os::unix::fs::MetadataExt;
    require_root("a_served_users_bundle_is_written_by_that_user_never_by_the_daemon");
    let user = TestUser::create();
    let (world, dir) = public_model(5);
    // A directory the daemon's user (root) may write and the client's may not.
    let closed = world.mkdir("public/closed");
    chmod(&closed, 0o755);
    let daemon = Daemon::start(
        &world,
        "public/d",
        &[
            "--socket-mode",
            "0666",
            "--allow-uid",
            &user.uid.to_string(),
            "--allow-test-env",
        ],
        &[],
    );
    chmod(daemon.socket.parent().unwrap(), 0o755);
    let failing = |extra: &[&str]| {
        world
            .nxcc()
            .args(["compile", "--daemon"])
            .args(sim_argv(
                "m.hlo",
                "out.neff",
                &["--no_cache", "--gen-reproducer"],
            ))
            .args(extra)
            .env("NXCC_DAEMON_SOCKET", &daemon.socket)
            .env("NXCC_SIM_FAULT", "walrus_driver:exit=3")
            .current_dir(&dir)
            .uid(user.uid)
            .gid(user.gid)
            .output()
            .unwrap()
    };
    let bundles = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
            .collect()
    };
    // Into a directory the client cannot write: none, said, though the daemon could have.
    let out = failing(&["--reproducer-dir", closed.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("WARNING: no reproducer was written: cannot write")
            && stderr.contains("Permission denied"),
        "{stderr}"
    );
    assert!(bundles(&closed).is_empty());
    // Into its current directory: the client's own file.
    let out = failing(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    let found = bundles(&dir);
    assert_eq!(found.len(), 1, "{stderr}");
    let meta = std::fs::metadata(&found[0]).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (user.uid, 0o600));
}
