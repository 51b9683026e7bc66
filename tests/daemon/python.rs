//! The Python client (`python/nxcc`, `import nxcc`) against a real daemon: compiles, a hit, typed
//! failures, status and explanations over one persistent connection; a connection the daemon
//! closed while idle; a daemon killed during a compile; hostile answers from stand-in servers;
//! sockets and daemons of another user; the daemon page's example of a compile hook, run as
//! written.
//! Each scenario is a function of `tests/daemon/python_client.py`, run by `python3` with
//! `PYTHONPATH=python`, as a framework's process would import the module from a checkout.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `python3 tests/daemon/python_client.py SCENARIO` in `world`'s environment, against `socket`
/// (if any), in the working directory `wd`; fails the test with the scenario's output unless it
/// passed.
fn scenario(world: &World, name: &str, socket: Option<&Path>, wd: &Path) {
    let mut c = Command::new("python3");
    c.arg(repo().join("tests/daemon/python_client.py"))
        .arg(name)
        .env("PYTHONPATH", repo().join("python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NXCC_TEST_WD", wd)
        .env(
            "NXCC_TEST_HANG_GUARD_S",
            hang_guard().as_secs_f64().to_string(),
        )
        .env("TMPDIR", world.path())
        .env("XDG_RUNTIME_DIR", &world.runtime)
        .env("NXCC_SIM_STATE", &world.state)
        .env("NXCC_SIM_RECORD", &world.record)
        .env_remove("NXCC_TOOLCHAIN")
        .env_remove("NEURON_COMPILE_CACHE_URL")
        .current_dir(wd);
    for v in SIM_VARS {
        if v != "NXCC_SIM_STATE" && v != "NXCC_SIM_RECORD" {
            c.env_remove(v);
        }
    }
    match socket {
        Some(s) => c.env("NXCC_DAEMON_SOCKET", s),
        None => c.env_remove("NXCC_DAEMON_SOCKET"),
    };
    let out = c
        .output()
        .expect("python3 must be installed to test the Python client");
    assert!(
        out.status.success(),
        "python3 python_client.py {name}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("ok {name}\n"));
}

/// A world with a working directory holding the example model as `m.hlo`.
fn world_with_model() -> (World, PathBuf) {
    let world = World::new();
    let wd = world.mkdir("w");
    std::fs::write(wd.join("m.hlo"), distinct_model(5)).unwrap();
    (world, wd)
}

#[test]
fn python_client_compiles_hits_fails_and_explains_on_one_connection() {
    let (world, wd) = world_with_model();
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    scenario(
        &world,
        "compile_hit_failure_status_explain",
        Some(&daemon.socket),
        &wd,
    );
    // The daemon saw the compiles the client sent: one miss, hits after it.
    assert_eq!(neff_first_input(&wd.join("a.neff")), "x5.1");
    assert_eq!(neff_first_input(&wd.join("b.neff")), "x5.1");
}

#[test]
fn the_documented_compile_hook_compiles_hits_and_reports_a_failure_through_the_daemon() {
    let (world, wd) = world_with_model();
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    scenario(&world, "documented_hook", Some(&daemon.socket), &wd);
    assert_eq!(neff_first_input(&wd.join("b.neff")), "x5.1");
}

#[test]
fn python_client_sends_on_a_new_connection_after_the_daemon_closed_the_idle_one() {
    let (world, wd) = world_with_model();
    let daemon = Daemon::start(
        &world,
        "d",
        &["--allow-test-env", "--head-timeout", "1"],
        &[],
    );
    scenario(&world, "idle_connection", Some(&daemon.socket), &wd);
}

#[test]
fn python_client_reports_a_daemon_that_goes_away_during_a_compile() {
    let (world, wd) = world_with_model();
    let (k, v) = marker("python_client_goes_away");
    let mut daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[(&k, &v)]);
    scenario(&world, "daemon_goes_away", Some(&daemon.socket), &wd);
    let status = daemon.wait_exit(hang_guard());
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    // Nothing of the compile outlives the daemon: its fork server, worker and tool end with it.
    wait_until(hang_guard(), "the compile's processes to end", || {
        processes_with(&format!("{k}={v}"), 0).is_empty()
    });
}

#[test]
fn python_client_survives_hostile_answers() {
    let world = World::new();
    let wd = world.mkdir("w");
    scenario(&world, "hostile_answers", None, &wd);
}

#[test]
fn python_client_refuses_sockets_and_daemons_of_other_users() {
    assert!(
        rustix::process::getuid().is_root(),
        "python_client_refuses_sockets_and_daemons_of_other_users needs root (it runs a listener as uid 65534 and gives files to it); run the daemon tests as root, as CI does"
    );
    let world = World::new();
    let wd = world.mkdir("w");
    scenario(&world, "untrusted", None, &wd);
}

#[test]
fn python_client_finds_the_socket_and_forwards_the_variables_as_the_rust_client_does() {
    let world = World::new();
    let code = r#"
import json, os, nxcc
out = {
    "allowed": list(nxcc.ALLOWED_ENV),
    "test_prefix": nxcc.client.TEST_ENV_PREFIX,
    "socket_env": nxcc.SOCKET_ENV,
    "version": nxcc.__version__,
    "env_socket": nxcc.socket_path(),
    "given": nxcc.socket_path("rel/d.sock"),
    "forwarded": sorted(nxcc.forwarded_env({"NXCC_TOOLCHAIN": "t", "NXCC_SIM_X": "1",
        "NXCC_SIM_": "no", "PATH": "/bin", "LD_PRELOAD": "x", "NXCC_DAEMON_SOCKET": "s"})),
}
del os.environ["NXCC_DAEMON_SOCKET"]
out["runtime_default"] = nxcc.socket_path()
del os.environ["XDG_RUNTIME_DIR"]
out["tmp_default"] = nxcc.socket_path()
print(json.dumps(out))
"#;
    let out = Command::new("python3")
        .args(["-c", code])
        .env("PYTHONPATH", repo().join("python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NXCC_DAEMON_SOCKET", "sock/d.sock")
        .env("XDG_RUNTIME_DIR", "/run/user/77")
        .current_dir(world.path())
        .output()
        .expect("python3 must be installed to test the Python client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let allowed: Vec<&str> = v["allowed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(allowed, nxcc::environ::ALLOWED);
    assert_eq!(v["test_prefix"], nxcc::environ::TEST_PREFIX);
    assert_eq!(v["socket_env"], nxcc::daemon::client::SOCKET_ENV);
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let here = world.path().display().to_string();
    assert_eq!(v["env_socket"], format!("{here}/sock/d.sock"));
    assert_eq!(v["given"], format!("{here}/rel/d.sock"));
    assert_eq!(
        v["forwarded"],
        serde_json::json!(["NXCC_SIM_X", "NXCC_TOOLCHAIN"])
    );
    for name in ["NXCC_SIM_X", "NXCC_TOOLCHAIN"] {
        assert!(nxcc::environ::is_forwarded(name));
    }
    for name in ["NXCC_SIM_", "PATH", "LD_PRELOAD", "NXCC_DAEMON_SOCKET"] {
        assert!(!nxcc::environ::is_forwarded(name));
    }
    assert_eq!(v["runtime_default"], "/run/user/77/nxcc/daemon.sock");
    assert_eq!(
        v["tmp_default"],
        format!(
            "/tmp/nxcc-{}/daemon.sock",
            rustix::process::getuid().as_raw()
        )
    );
}
