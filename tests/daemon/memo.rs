//! What the daemon keeps between requests: a hit is answered in the daemon (no worker is
//! started, by the fork server or otherwise), and what it keeps — the toolchain's identity, the
//! cache's configuration, the probes' readings — is seen to change by the next request when a
//! tool or the configuration file changes.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

/// The fork server's count of the workers it started.
fn workers_started(daemon: &Daemon) -> u64 {
    let s = daemon.status();
    s["fork_server"]["workers_started"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fork server record in the status: {s}"))
}

/// `POST /v1/compile`; its `done` event.
fn compile(daemon: &Daemon, wd: &Path, argv: &[&str]) -> Value {
    let (r, events) = daemon.v1(&json!({"argv": argv, "working_directory": wd}));
    assert_eq!(r.status, 200);
    let done = events.last().unwrap().clone();
    assert_eq!(done["event"], "done", "{events:?}");
    done
}

#[test]
fn a_hit_through_the_client_starts_no_worker() {
    let world = World::new();
    // The client passes on the world's simulator variables.
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let wd = world.mkdir("w");
    let model = example_model();
    let model = model.to_str().unwrap();
    let argv = [model, "--target", "trn2", "--toolchain", "sim", "--output"];
    let done = compile(&daemon, &wd, &[&argv[..], &["a.neff"]].concat());
    assert_eq!(
        (done["exit_status"].as_i64(), done["cache"].as_str()),
        (Some(0), Some("miss"))
    );
    assert_eq!(workers_started(&daemon), 1, "the miss's worker");
    let out = world
        .nxcc()
        .args(["compile", "--daemon"])
        .args(argv)
        .arg("b.neff")
        .current_dir(&wd)
        .env("NXCC_DAEMON_SOCKET", &daemon.socket)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Only the line that says the compile went through the daemon's cache (its default).
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        ["nxcc compile --daemon: the daemon compiles through its compile cache, on by default there (nxcc compile uses one only with --cache_dir): a hit runs no tool; --no_cache compiles without it"]
    );
    assert_eq!(
        std::fs::read(wd.join("a.neff")).unwrap(),
        std::fs::read(wd.join("b.neff")).unwrap()
    );
    let status = daemon.status();
    assert_eq!(status["cache"]["hits"], 1, "{status}");
    assert_eq!(
        workers_started(&daemon),
        1,
        "a hit starts no worker: {status}"
    );
    // Nor one executed in its place (a request the fork server did not take).
    assert_eq!(status["fork_server"]["workers_not_started"], 0, "{status}");
}

#[test]
fn a_changed_tool_is_seen_by_the_next_request() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &[], &[]);
    let wd = world.mkdir("w");
    let tc = sim_toolchain(&world, "tc");
    let model = example_model();
    let (model, tc) = (model.to_str().unwrap(), tc.to_str().unwrap());
    let argv = |out: &'static str| {
        vec![
            model,
            "--target",
            "trn2",
            "--toolchain",
            tc,
            "--output",
            out,
        ]
    };
    let cache = |done: Value| done["cache"].as_str().unwrap_or_default().to_string();
    assert_eq!(cache(compile(&daemon, &wd, &argv("1.neff"))), "miss");
    assert_eq!(cache(compile(&daemon, &wd, &argv("2.neff"))), "hit");
    // A tool the plan runs, rewritten in place: same path, new bytes and times.
    let tool = Path::new(tc).join("bin/walrus_driver");
    let mut bytes = std::fs::read(&tool).unwrap();
    bytes.extend_from_slice(b"\n# changed\n");
    std::fs::remove_file(&tool).unwrap();
    std::fs::write(&tool, &bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let done = compile(&daemon, &wd, &argv("3.neff"));
    assert_eq!(
        cache(done.clone()),
        "miss",
        "the changed tool was not seen: {done}"
    );
    assert_eq!(cache(compile(&daemon, &wd, &argv("4.neff"))), "hit");
}

#[test]
fn a_changed_configuration_is_seen_by_the_next_request() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &[], &[]);
    let wd = world.mkdir("w");
    let model = example_model();
    let model = model.to_str().unwrap();
    let argv = |out: &'static str| {
        vec![
            model,
            "--target",
            "trn2",
            "--toolchain",
            "sim",
            "--output",
            out,
        ]
    };
    let conf = daemon_cache(&world).join("nxcc-v1/nxcc.conf");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    // Two configurations of the same size: rewritten in place, only the file's times change.
    let (read_write, hit_only) = ("mode=read-write\n", "mode = hit-only\n");
    assert_eq!(read_write.len(), hit_only.len());
    std::fs::write(&conf, read_write).unwrap();
    // Old enough to be kept by the daemon (a file younger than the racy margin never is).
    settle(&conf);
    assert_eq!(compile(&daemon, &wd, &argv("1.neff"))["exit_status"], 0);
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before = inode(&conf);
    std::fs::write(&conf, hit_only).unwrap();
    assert_eq!(inode(&conf), before, "rewritten in place");
    // A model not in the cache: a hit-only cache refuses it.
    let miss = world.path().join("other.hlo");
    std::fs::write(&miss, distinct_model(7)).unwrap();
    let other = [
        miss.to_str().unwrap(),
        "--target",
        "trn2",
        "--toolchain",
        "sim",
    ];
    let done = compile(
        &daemon,
        &wd,
        &[&other[..], &["--output", "2.neff"]].concat(),
    );
    assert_ne!(done["exit_status"], 0, "hit-only was not seen: {done}");
    // A line it does not read is reported: the file read again, not remembered.
    std::fs::write(&conf, "mode = read-write\nbogus = 1\n").unwrap();
    let third = [&other[..], &["--output", "3.neff"]].concat();
    let (_, events) = daemon.v1(&json!({"argv": third, "working_directory": wd}));
    assert_eq!(events.last().unwrap()["exit_status"], 0, "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["line"].as_str().is_some_and(|l| l.contains("bogus"))),
        "{events:?}"
    );
}

/// Wait until `path` last changed more than the racy margin ago (2 s), by the file's own times.
fn settle(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let changed = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        let secs = |s: i64, n: i64| std::time::Duration::new(s as u64, n as u32);
        secs(m.mtime(), m.mtime_nsec()).max(secs(m.ctime(), m.ctime_nsec()))
    };
    let margin = std::time::Duration::from_millis(2_100);
    wait_until(hang_guard(), "the file to settle", || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        now > changed(path) + margin
    });
}

/// The compile cache of the daemon `d` ([`Daemon::start`] gives each daemon its own).
fn daemon_cache(world: &World) -> std::path::PathBuf {
    world.path().join("d/compile-cache")
}
