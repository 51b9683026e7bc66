//! The daemon on a hostile host: links another user planted where its pid file and log go are
//! never followed, and models that are not regular files (a FIFO no one writes, `/dev/zero`,
//! `/dev/urandom`) are refused at once, as is a FIFO no one reads as the compile's log — no
//! request holds a thread, however many come.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use super::common::*;

fn require_root(test: &str) {
    assert!(
        rustix::process::getuid().is_root(),
        "{test} needs root (another uid plants the links); run the daemon tests as root, as CI does"
    );
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A link at `at` to `target`, owned by uid 65534 (the other user).
fn plant(target: &Path, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
    std::os::unix::fs::lchown(at, Some(65534), Some(65534)).unwrap();
}

/// `c` (an `nxcc` command) run so that any `nxcc` it starts from its own executable — a daemon
/// — is a recorder instead, which appends its arguments to `record` and exits 1: in a mount
/// namespace of its own, `nxcc` is opened, the recorder mounted over its path, and the opened
/// file executed (so its own executable's path now names the recorder).
fn recording_starts(c: &std::process::Command, record: &Path) -> std::process::Command {
    let dir = record.parent().unwrap();
    let recorder = dir.join("recorder.sh");
    std::fs::write(
        &recorder,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n", record.display()),
    )
    .unwrap();
    chmod(&recorder, 0o755);
    let mut r = std::process::Command::new("unshare");
    r.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("exec 3<\"$0\" && mount --bind \"$1\" \"$0\" && shift && exec /proc/self/fd/3 \"$@\"")
        .arg(c.get_program())
        .arg(&recorder)
        .args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => r.env(k, v),
            None => r.env_remove(k),
        };
    }
    if let Some(d) = c.get_current_dir() {
        r.current_dir(d);
    }
    r
}

/// `nxcc daemon ARGS` run to its end (it is expected to refuse to start), guarded.
fn daemon_refusal(world: &World, args: &[&Path]) -> (Option<i32>, String) {
    let mut child = world
        .nxcc()
        .arg("daemon")
        .args(args)
        .args(["--inactivity-timeout", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + hang_guard();
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the daemon started with planted links and kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// In a socket directory anyone can write (0777, then 1777), another user planted `s.pid` and
/// `s.log` as links to root's files: the daemon refuses to start — the directory, or each link
/// — and root's files are as they were.
#[test]
fn planted_pid_and_log_links_in_a_shared_socket_directory_are_not_followed() {
    require_root("planted_pid_and_log_links_in_a_shared_socket_directory_are_not_followed");
    let world = World::new();
    let shared = world.mkdir("shared");
    let (victim_pid, victim_log) = (world.path().join("root.pid"), world.path().join("root.log"));
    for v in [&victim_pid, &victim_log] {
        std::fs::write(v, "root's own data\n").unwrap();
        chmod(v, 0o600);
    }
    let (socket, pid, log) = (
        shared.join("s.sock"),
        shared.join("s.pid"),
        shared.join("s.log"),
    );
    plant(&victim_pid, &pid);
    plant(&victim_log, &log);
    chmod(&shared, 0o777);
    let socket_and_log = [
        Path::new("--socket"),
        &socket,
        Path::new("--log-file"),
        &log,
    ];
    let (code, err) = daemon_refusal(&world, &socket_and_log);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the daemon's directory {} is writable by group and others (mode 0777)",
            shared.display()
        )),
        "{err}"
    );
    // Sticky: the directory passes, each planted link is refused.
    chmod(&shared, 0o1777);
    let (code, err) = daemon_refusal(&world, &socket_and_log);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("s.log is a symbolic link"), "{err}");
    let (code, err) = daemon_refusal(&world, &[Path::new("--socket"), &socket]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot take the pid file") && err.contains("s.pid is a symbolic link"),
        "{err}"
    );
    for v in [&victim_pid, &victim_log] {
        assert_eq!(
            std::fs::read_to_string(v).unwrap(),
            "root's own data\n",
            "{}",
            v.display()
        );
        assert_eq!(
            std::fs::metadata(v).unwrap().permissions().mode() & 0o7777,
            0o600
        );
    }
    assert!(!socket.exists(), "no socket bound");
    // The client does not talk to, nor start, a daemon in a directory others can write (any
    // daemon it started would be recorded); in the sticky one, with the links planted, it
    // would start one (which refuses them): the recorder shows it.
    let wd = world.mkdir("w");
    let started = world.path().join("started");
    let client = |dir_mode: u32| {
        chmod(&shared, dir_mode);
        let mut c = world.nxcc();
        c.args(["compile", "--daemon", "m.pb", "--target", "trn2"])
            .env("NXCC_DAEMON_SOCKET", &socket)
            .current_dir(&wd);
        recording_starts(&c, &started)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let o = client(0o777).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{err}");
    assert!(err.contains("not using the daemon on"), "{err}");
    assert!(!err.contains("starting one"), "{err}");
    assert!(!started.exists(), "a daemon was started: {err}");
    let mut c = client(0o1777);
    let deadline = Instant::now() + hang_guard();
    while !started.exists() {
        assert!(
            Instant::now() < deadline && c.try_wait().unwrap().is_none(),
            "the recorder never saw the client start a daemon"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    c.kill().unwrap();
    c.wait().unwrap();
    let recorded = std::fs::read_to_string(&started).unwrap();
    assert!(recorded.starts_with("daemon --socket"), "{recorded:?}");
    assert_eq!(
        std::fs::read_to_string(&victim_log).unwrap(),
        "root's own data\n"
    );
    assert!(!socket.exists(), "no socket bound");
}

/// The threads of a process.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

/// 500 compile requests whose model is a FIFO no one writes, `/dev/zero` or `/dev/urandom`:
/// each is answered at once with the refusal, none holds a thread (the daemon's thread count
/// comes back to where it was), and a normal compile is served after them.
#[test]
fn models_that_are_not_regular_files_hold_no_daemon_thread() {
    const N: usize = 500;
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &[], &[]);
    let wd = world.mkdir("w");
    let fifo = wd.join("model.pb");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let before = threads(daemon.pid());
    let models = [
        fifo.display().to_string(),
        "/dev/zero".into(),
        "/dev/urandom".into(),
    ];
    for i in 0..N {
        let model = &models[i % models.len()];
        let (r, events) = daemon.v1(&json!({
            "argv": [model, "--target", "trn2", "--toolchain", "sim", "--output", "o.neff"],
            "working_directory": wd,
        }));
        assert_eq!(r.status, 200);
        let done = events
            .iter()
            .find(|e| e["event"] == "done")
            .expect("a done event");
        assert_eq!(done["exit_status"], 70, "{events:?}");
        assert!(
            events.iter().any(|e| e["line"]
                .as_str()
                .is_some_and(|l| l.contains("[NCC_EDRV114]") && l.contains(model.as_str()))),
            "{events:?}"
        );
    }
    // Idle threads of the runtime's pool end by themselves; none may stay blocked.
    let deadline = Instant::now() + hang_guard();
    while threads(daemon.pid()) > before + 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = threads(daemon.pid());
    assert!(
        after <= before + 4,
        "{after} threads after {N} requests ({before} before)"
    );
    // A FIFO no one reads as the compile's log: refused, not waited on.
    let (_, events) = daemon.v1(&json!({
        "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", "f.neff",
                 "--logfile", fifo],
        "working_directory": wd,
    }));
    let done = events
        .iter()
        .find(|e| e["event"] == "done")
        .expect("a done event");
    assert_eq!(done["exit_status"], 70, "{events:?}");
    assert!(!wd.join("f.neff").exists());
    let (_, events) = daemon.v1(&json!({
        "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", "ok.neff"],
        "working_directory": wd,
    }));
    let done = events
        .iter()
        .find(|e| e["event"] == "done")
        .expect("a done event");
    assert_eq!(done["exit_status"], 0, "{events:?}");
    assert!(wd.join("ok.neff").is_file());
}
