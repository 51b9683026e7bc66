//! Locks of the framework's cache across hosts: two simulated hosts, each a UTS and PID
//! namespace (its own host name, its own pids) that sees the cache through its own FUSE
//! passthrough mount (`bindfs`), so that `flock` and `fcntl` locks are local to each host — as on
//! NFS without a lock manager — while creating with `O_EXCL`, linking and renaming stay atomic.
//! A lock from the other host whose lease is live is not taken over; one whose holder was killed
//! is taken over only after its lease has expired (the order of events is asserted, never a
//! duration). A host goes down as a whole: every process of its namespace is stopped first (so
//! its lock keeper cannot tidy up, as it would on a live host), then killed, and the test waits
//! until each is gone. Needs root, `unshare` and `bindfs` (`.ci/run` installs it); without them
//! the test fails saying why.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{freeze, proc_state, text, Mount, Scratch};

const SIM_VERSION: &str = "2.24.5133.0+nxcc-sim";
const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/models");
/// The lease both hosts use (short, for the test; its length is never asserted).
const LEASE_MS: &str = "3000";

/// `nxcc parallel-compile --neuron-cache <mount>` on the simulated host `host`: a new UTS and
/// PID namespace named `host`, the run its first process (killing `unshare` kills it and
/// everything in its namespace at once, as a host that goes down).
fn on_host(s: &Scratch, host: &str, mount: &Path, work_ms: &str) -> Command {
    let mut c = s.on_host(
        host,
        &format!(
            "parallel-compile --neuron-cache {} --allow-simulated --jobs 1 --no_cache -- --target trn2 --toolchain sim",
            mount.display()
        ),
    );
    c.env("NXCC_SIM_STATE", s.join(".state"))
        .env("NXCC_SIM_RECORD", s.record())
        .env("NXCC_SIM_WORK_MS", work_ms)
        .env("NXCC_LOCK_LEASE_MS", LEASE_MS)
        .env("TMPDIR", s.join(&format!("tmp-{host}")));
    std::fs::create_dir_all(s.join(&format!("tmp-{host}"))).unwrap();
    c
}

fn lock_of(entry: &Path) -> PathBuf {
    entry.join("model.hlo_module.pb.lock")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ok() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid namespace of process `pid` (`pid:[inode]`).
fn pid_ns(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// Every process (of this namespace's numbering) in the pid namespace `ns`.
fn processes_in(ns: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| pid_ns(*p).as_deref() == Some(ns))
        .collect()
}

/// A simulated host: its `unshare`, killed — and with it everything in its namespace — when
/// dropped (a failing test leaves nothing running).
struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Host A goes down: every process of its namespace stopped (none can act any more, not even
/// the lock keeper), then killed with its `unshare`; returns once every one of them is gone.
fn host_down(host: Host) {
    let unshare = &host.0;
    let children = format!("/proc/{0}/task/{0}/children", unshare.id());
    let init: u32 = std::fs::read_to_string(children)
        .unwrap()
        .split_whitespace()
        .next()
        .expect("the host's first process")
        .parse()
        .unwrap();
    let ns = pid_ns(init).unwrap();
    let seen = freeze(|| processes_in(&ns));
    drop(host);
    for p in seen.iter().copied().filter(|p| *p != init) {
        // SAFETY: kill(2) on a stopped process of the namespace this test made (it ends).
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    wait_for("every process of host A gone", || {
        seen.iter().all(|p| proc_state(*p).is_none()) && processes_in(&ns).is_empty()
    });
}

#[test]
fn another_hosts_lock_is_taken_over_only_after_its_lease_expires() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root (namespaces and FUSE mounts)"
    );
    let s = Scratch::new();
    let entry = s.join(&format!(
        "nc/neuronxcc-{SIM_VERSION}/MODULE_shared+d41d8cd9"
    ));
    std::fs::create_dir_all(&entry).unwrap();
    std::fs::copy(
        Path::new(MODELS).join("mlp.hlo_module.pb"),
        entry.join("model.hlo_module.pb"),
    )
    .unwrap();
    std::fs::write(entry.join("compile_flags.json"), b"[]").unwrap();
    let a_view = Mount::new(&s.join("nc"), &s.join("host-a-view"));
    let b_view = Mount::new(&s.join("nc"), &s.join("host-b-view"));

    // Host A takes the entry's lock and compiles (slowly).
    let a = Host(
        on_host(&s, "host-a", &a_view.at, "hlo2penguin:600000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unshare runs"),
    );
    wait_for("host A's lock", || {
        std::fs::read_to_string(lock_of(&entry)).is_ok_and(|t| t.contains("host=host-a"))
    });
    // Host B while A lives: A's lease is live, B's flock probe sees nothing (another mount):
    // not taken over.
    let b1 = on_host(&s, "host-b", &b_view.at, "*:0").output().unwrap();
    let err = text(&b1.stderr);
    assert_eq!(b1.status.code(), Some(0), "{err}");
    assert!(
        err.contains("held by an nxcc run on host host-a, its lease running until"),
        "{err}"
    );
    assert!(!entry.join("model.done").exists());
    assert!(std::fs::read_to_string(lock_of(&entry))
        .unwrap()
        .contains("host=host-a"));

    // Host A goes down: no keeper survives to remove its lock.
    host_down(a);
    let stamp = std::fs::read_to_string(lock_of(&entry)).expect("host A's lock stays");
    assert!(stamp.contains("host=host-a"), "{stamp}");
    let mtime = std::fs::metadata(lock_of(&entry))
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let lease_end = mtime + LEASE_MS.parse::<u64>().unwrap();

    // Host B again and again: it compiles the entry only once A's lease has expired.
    let mut runs: Vec<Output> = Vec::new();
    wait_for("host B compiling the entry", || {
        let o = on_host(&s, "host-b", &b_view.at, "*:0").output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        runs.push(o);
        entry.join("model.done").is_file()
    });
    let started: Vec<u64> = s
        .records()
        .iter()
        .filter(|r| r["tool"] == "hlo2penguin")
        .filter(|r| r["cwd"].as_str().unwrap().contains("tmp-host-b"))
        .map(|r| r["start_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(
        started.len(),
        1,
        "host B compiled the entry {} times",
        started.len()
    );
    assert!(
        started[0] >= lease_end,
        "host B compiled at {} before host A's lease ended at {lease_end}",
        started[0]
    );
    for o in &runs[..runs.len() - 1] {
        assert!(
            text(&o.stderr).contains("its lease running until"),
            "a run before the takeover did not see the lease: {}",
            text(&o.stderr)
        );
    }
    assert!(!lock_of(&entry).exists(), "host B's lock stayed");
    assert!(now_ms() >= lease_end);
    drop(a_view);
    drop(b_view);
}

/// A lock file removed behind a FUSE mount's back: for a while the mount's client still finds
/// it (`stat` answers from its cache) while opening it fails. Taking the lock through the mount
/// then is an ordinary wait, not an error.
#[test]
fn a_removal_a_mount_sees_late_is_waited_out_when_taking_a_lock() {
    use nxcc::lockfile::{self, Acquired};
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root (FUSE mounts)"
    );
    let s = Scratch::new();
    std::fs::create_dir_all(s.join("nc")).unwrap();
    let view = Mount::new(&s.join("nc"), &s.join("view"));
    let name = "model.hlo_module.pb.lock";
    let dir = nxcc::fsx::Dir::open(&view.at).unwrap();
    let mut seen_late = 0;
    for round in 0..5 {
        let stamp = format!("nxcc pid=999999999 started=1 host={round}-gone lease=1\n");
        std::fs::write(s.join("nc").join(name), stamp).unwrap();
        // The mount's client looks at it (and keeps what it saw), then it goes behind its back.
        assert!(dir.stat(name).is_ok());
        std::fs::remove_file(s.join("nc").join(name)).unwrap();
        seen_late += usize::from(dir.stat(name).is_ok());
        match lockfile::acquire(&dir, name, Duration::from_secs(60), false) {
            Ok(Acquired::Locked(l)) => drop(l),
            other => panic!("round {round}: {other:?}"),
        }
        assert!(!s.join("nc").join(name).exists());
    }
    assert!(
        seen_late > 0,
        "the mount never showed a removed file: the test shows nothing here"
    );
    drop(view);
}
