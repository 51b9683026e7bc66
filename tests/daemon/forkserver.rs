//! The daemon's fork server: every compile's worker is forked by it (not re-executed), and such a
//! worker is cancelled, timed out and reported as a re-executed one was; the fork server killed
//! is noticed, the compile it took with it fails cleanly, and it is started again.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::common::*;

/// `(pid, ppid, comm)` of a process.
fn stat(pid: u32) -> Option<(u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some((ppid, comm.trim().to_string()))
}

/// The daemon's fork server, as its status reports it, checked against `/proc`.
fn fork_server(daemon: &Daemon) -> (u32, u64) {
    let s = daemon.status();
    let pid = s["fork_server"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fork server in the status: {s}")) as u32;
    // It names itself first thing, which a loaded machine may not have let it do yet.
    wait_until(
        Duration::from_secs(10),
        "the fork server to name itself",
        || stat(pid).is_some_and(|(_, comm)| comm == "nxcc-forkserver"),
    );
    assert_eq!(
        stat(pid).map(|(ppid, _)| ppid),
        Some(daemon.pid()),
        "the fork server is the daemon's child"
    );
    (pid, s["fork_server"]["restarts"].as_u64().unwrap())
}

/// The workers (`nxcc-worker`) whose parent is `parent`.
fn workers_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat(p) == Some((parent, "nxcc-worker".to_string())))
        .collect()
}

fn done(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["event"] == "done")
        .unwrap_or_else(|| panic!("no done event: {events:?}"))
}

fn errors(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["event"] == "log" && e["stream"] == "stderr")
        .map(|e| e["line"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn workers_are_forked_by_it_and_cancelled_when_their_client_goes() {
    let world = World::new();
    let (k, v) = marker("fs-cancel");
    let kv = format!("{k}={v}");
    let daemon = Daemon::start(
        &world,
        "d",
        &[],
        &[("NXCC_SIM_WORK_MS", "walrus_driver:20000"), (&k, &v)],
    );
    let (helper, restarts) = fork_server(&daemon);
    assert_eq!(restarts, 0);
    let wd = world.mkdir("w");
    let request = json!({
        "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", "c.neff"],
        "working_directory": wd,
    });
    let (s, _) = stream_until(&daemon, &request, |e| {
        e["event"] == "job_started" && e["job"] == "WalrusDriver"
    });
    wait_until(Duration::from_secs(20), "walrus_driver to run", || {
        processes_with(&kv, daemon.pid())
            .iter()
            .any(|(_, c)| c == "walrus_driver")
    });
    // The worker is the fork server's child — no worker was re-executed by the daemon.
    let workers = workers_of(helper);
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert!(processes_with(&kv, daemon.pid())
        .iter()
        .all(|(_, c)| c != "nxcc"));
    drop(s);
    let t = Instant::now();
    wait_until(
        Duration::from_secs(7),
        "the compile's processes to go",
        || processes_with(&kv, daemon.pid()).is_empty(),
    );
    eprintln!("client gone: processes ended within {:?}", t.elapsed());
    wait_until(Duration::from_secs(10), "the compile to be counted", || {
        daemon.status()["compiles"]["cancelled"] == 1
    });
    assert!(workers_of(helper).is_empty());
    // The fork server is still the same one, and serves the next compile.
    assert_eq!(fork_server(&daemon), (helper, 0));
}

#[test]
fn a_forked_worker_times_out_a_hanging_tool_and_reports_it() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let (helper, _) = fork_server(&daemon);
    let wd = world.mkdir("w");
    let (_, events) = daemon.v1(&json!({
        "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", "t.neff",
                 "--job-timeout", "1", "--no_cache"],
        "working_directory": wd,
        "env": {"NXCC_SIM_FAULT": "walrus_driver:hang"},
    }));
    let d = done(&events);
    assert_eq!(d["exit_status"], 70, "{events:?}");
    let errors = errors(&events);
    assert!(
        errors
            .iter()
            .any(|l| l == "[ERROR] Job WalrusDriver timed out after 1 s"),
        "{errors:?}"
    );
    assert!(!wd.join("t.neff").exists());
    let finished: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "job_finished")
        .collect();
    assert_eq!(
        finished.last().unwrap()["job"],
        "WalrusDriver",
        "{finished:?}"
    );
    assert_eq!(
        finished.last().unwrap()["status"],
        "timed_out",
        "{finished:?}"
    );
    assert!(workers_of(helper).is_empty());
    // The same compile without the fault: a NEFF.
    let (_, events) = daemon.v1(&json!({
        "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", "t.neff",
                 "--job-timeout", "100", "--no_cache"],
        "working_directory": wd,
    }));
    assert_eq!(done(&events)["exit_status"], 0, "{events:?}");
    assert!(wd.join("t.neff").is_file());
}

#[test]
fn a_killed_fork_server_fails_its_compile_cleanly_and_is_started_again() {
    let world = World::new();
    let (k, v) = marker("fs-kill");
    let kv = format!("{k}={v}");
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[(&k, &v)]);
    let (helper, _) = fork_server(&daemon);
    let wd = world.mkdir("w");
    let request = json!({
        "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", "k.neff",
                 "--no_cache"],
        "working_directory": wd,
        "env": {"NXCC_SIM_WORK_MS": "walrus_driver:20000"},
    });
    let (s, mut events) = stream_until(&daemon, &request, |e| {
        e["event"] == "job_started" && e["job"] == "WalrusDriver"
    });
    wait_until(Duration::from_secs(20), "walrus_driver to run", || {
        processes_with(&kv, daemon.pid())
            .iter()
            .any(|(_, c)| c == "walrus_driver")
    });
    // SAFETY: kill(2) on the daemon's fork server, a process this test identified by /proc.
    assert_eq!(unsafe { libc::kill(helper as i32, libc::SIGKILL) }, 0);
    // The compile in flight ends, failed, with the reason; nothing of it is left.
    read_rest(s, &mut events);
    let d = done(&events);
    assert_eq!(d["exit_status"], 70, "{events:?}");
    let errors = errors(&events);
    assert!(
        errors
            .iter()
            .any(|l| l.contains("The compile's worker was lost")
                && l.contains("fork server")
                && l.contains("died")),
        "{errors:?}"
    );
    wait_until(
        Duration::from_secs(7),
        "the compile's processes to go",
        || processes_with(&kv, daemon.pid()).is_empty(),
    );
    assert!(!wd.join("k.neff").exists());
    // The next compile succeeds, through a new fork server.
    let (_, events) = daemon.v1(&json!({
        "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", "k.neff",
                 "--no_cache"],
        "working_directory": wd,
    }));
    assert_eq!(done(&events)["exit_status"], 0, "{events:?}");
    assert!(wd.join("k.neff").is_file());
    let (again, restarts) = fork_server(&daemon);
    assert_ne!(again, helper);
    assert_eq!(restarts, 1);
    // The daemon reaped the one it lost: no zombie is left behind.
    assert!(stat(helper).is_none_or(|(ppid, _)| ppid != daemon.pid()));
}

/// The state letter of process `pid` (`None`: gone).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The fork server stopped (SIGSTOP) while its worker compiles: the worker finishes (its tool
/// ends) but its end cannot be reported — it stays a zombie of the stopped helper — so the
/// daemon, watching the worker, notices the helper no longer answers, replaces it, and reports
/// that compile as lost (exit 70, no NEFF). A helper stopped while idle: the compile sent to it
/// is not answered, the helper is replaced, and the compile served all the same.
#[test]
fn a_stopped_fork_server_is_replaced_and_its_compile_reported() {
    let world = World::new();
    let (k, v) = marker("fs-stop");
    let kv = format!("{k}={v}");
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[(&k, &v)]);
    let (helper, _) = fork_server(&daemon);
    let wd = world.mkdir("w");
    let request = |out: &str, fault: Option<&str>| {
        let env = match fault {
            Some(f) => json!({"NXCC_SIM_FAULT": f}),
            None => json!({}),
        };
        json!({
            "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", out,
                     "--no_cache"],
            "working_directory": wd,
            "env": env,
        })
    };
    // The worker's tool waits until this test ends it: the helper is stopped mid-compile.
    let (s, mut events) = stream_until(
        &daemon,
        &request("a.neff", Some("walrus_driver:hang")),
        |e| e["event"] == "job_started" && e["job"] == "WalrusDriver",
    );
    let tool = || {
        processes_with(&kv, daemon.pid())
            .into_iter()
            .find(|(_, c)| c == "walrus_driver")
            .map(|(p, _)| p)
    };
    wait_until(hang_guard(), "walrus_driver to run", || tool().is_some());
    let workers = workers_of(helper);
    assert_eq!(workers.len(), 1, "{workers:?}");
    let worker = workers[0];
    // SAFETY: kill(2) on the daemon's fork server, a process this test identified by /proc.
    assert_eq!(unsafe { libc::kill(helper as i32, libc::SIGSTOP) }, 0);
    let tool_pid = tool().unwrap() as i32;
    // SAFETY: kill(2) on the compile's tool, identified by its marker and name.
    assert_eq!(unsafe { libc::kill(tool_pid, libc::SIGKILL) }, 0);
    // The worker finishes; its parent, stopped, can neither reap it nor report its end.
    wait_until(hang_guard(), "the worker to finish", || {
        state(worker) == Some('Z')
    });
    assert_eq!(state(helper), Some('T'));
    read_rest(s, &mut events);
    let d = done(&events);
    assert_eq!(d["exit_status"], 70, "{events:?}");
    let errors = errors(&events);
    assert!(
        errors
            .iter()
            .any(|l| l.contains("The compile's worker was lost")
                && l.contains("stopped answering")
                && l.contains(&format!(
                    "it did not report the end of the worker (pid {worker})"
                ))
                && l.contains("replaced")),
        "{errors:?}"
    );
    assert!(!wd.join("a.neff").exists());
    // The stopped helper is gone (killed and reaped), and its worker with it.
    wait_until(hang_guard(), "the stopped fork server to go", || {
        stat(helper).is_none_or(|(ppid, _)| ppid != daemon.pid())
    });
    assert!(stat(worker).is_none_or(|(ppid, _)| ppid != helper));
    // A new helper serves the next compile; stopped while idle, the compile sent to it is
    // served all the same, and it is replaced in turn.
    let (_, events) = daemon.v1(&request("b.neff", None));
    assert_eq!(done(&events)["exit_status"], 0, "{events:?}");
    let (idle, restarts) = fork_server(&daemon);
    assert_ne!(idle, helper);
    assert_eq!(restarts, 1);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(idle as i32, libc::SIGSTOP) }, 0);
    let (_, events) = daemon.v1(&request("c.neff", None));
    assert_eq!(done(&events)["exit_status"], 0, "{events:?}");
    assert!(wd.join("b.neff").is_file() && wd.join("c.neff").is_file());
    wait_until(hang_guard(), "the idle stopped fork server to go", || {
        stat(idle).is_none_or(|(ppid, _)| ppid != daemon.pid())
    });
    // The next compile starts a third.
    let (_, events) = daemon.v1(&request("d.neff", None));
    assert_eq!(done(&events)["exit_status"], 0, "{events:?}");
    let (again, restarts) = fork_server(&daemon);
    assert!(
        again != helper && again != idle && restarts == 2,
        "{again} {restarts}"
    );
}

/// A plan of a megabyte (the request's environment, carried with the plan: ten variables of
/// 100,000 bytes — as much as a request body may hold) goes to the fork server in a sealed memfd
/// — one datagram cannot carry it — and its worker is the fork server's child: the compile did
/// not fall back to a re-executed worker, and the fork server's record says so.
#[test]
fn a_megabyte_plan_goes_through_the_fork_server() {
    let world = World::new();
    let (k, v) = marker("fs-large");
    let kv = format!("{k}={v}");
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[(&k, &v)]);
    let (helper, _) = fork_server(&daemon);
    let wd = world.mkdir("w");
    let mut env = serde_json::Map::new();
    env.insert("NXCC_SIM_WORK_MS".into(), json!("walrus_driver:3000"));
    for i in 0..10 {
        let filler = format!("{i}").repeat(100_000);
        env.insert(format!("NXCC_SIM_PAD_{i}"), json!(filler));
    }
    let request = json!({
        "argv": [example_model(), "--target", "trn2", "--toolchain", "sim", "--output", "big.neff",
                 "--no_cache"],
        "working_directory": wd,
        "env": env,
    });
    assert!(v1_request(&request).len() > 1_000_000);
    let (s, mut events) = stream_until(&daemon, &request, |e| {
        e["event"] == "job_started" && e["job"] == "WalrusDriver"
    });
    wait_until(Duration::from_secs(20), "walrus_driver to run", || {
        processes_with(&kv, daemon.pid())
            .iter()
            .any(|(_, c)| c == "walrus_driver")
    });
    // The worker is the fork server's child, not nxcc re-executed by the daemon.
    assert_eq!(workers_of(helper).len(), 1, "{events:?}");
    assert!(processes_with(&kv, daemon.pid())
        .iter()
        .all(|(_, c)| c != "nxcc"));
    read_rest(s, &mut events);
    assert_eq!(done(&events)["exit_status"], 0, "{events:?}");
    assert!(wd.join("big.neff").is_file());
    let status = daemon.status();
    let record = &status["fork_server"];
    assert_eq!(record["workers_started"], 1, "{status}");
    assert_eq!(record["workers_not_started"], 0, "{status}");
    assert_eq!(record["last_not_started"], Value::Null, "{status}");
    assert_eq!(record["restarts"], 0, "{status}");
}
