//! The daemon's life: one per pid file, stale pid files taken over, clean stops (`POST /exit`,
//! SIGTERM, inactivity) that let running compiles finish or cancel them after the grace, and a
//! client that goes away cancelling its compile without leaving a process behind.

use std::io::{BufReader, Write};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

/// A second daemon started on `first`'s socket: refused (exit 1); its stderr.
fn second_daemon_refused(world: &World, first: &Daemon) -> String {
    let second = world
        .nxcc()
        .arg("daemon")
        .arg("--socket")
        .arg(&first.socket)
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    String::from_utf8_lossy(&second.stderr).into_owned()
}

#[test]
fn a_second_daemon_refuses_and_names_the_first_and_a_stale_pid_file_is_taken_over() {
    let world = World::new();
    // A stale pid file: written by a process that is gone, no lock held.
    let dir = world.mkdir("d");
    std::fs::write(dir.join("d.pid"), "999999\n/nowhere.sock\n").unwrap();
    let mut first = Daemon::start(&world, "d", &[], &[]);
    let text = std::fs::read_to_string(&first.pid_file).unwrap();
    assert_eq!(
        text,
        format!("{}\n{}\n", first.pid(), first.socket.display())
    );

    let stderr = second_daemon_refused(&world, &first);
    assert!(
        stderr.contains(&format!(
            "another nxcc daemon (pid {}) is running on {}",
            first.pid(),
            first.socket.display()
        )),
        "{stderr}"
    );
    // The first one is untouched and serves.
    assert_eq!(first.status()["pid"], first.pid());
    assert!(first.exit().success());
    assert!(!first.socket.exists(), "socket removed");
    assert!(!first.pid_file.exists(), "pid file removed");
    assert!(first.log_text().contains("stopping: POST /exit from uid"));
}

/// The refusal of a second daemon says the command that stops the first, and that command,
/// run as said, stops it.
#[test]
fn a_second_daemon_says_the_command_that_stops_the_first() {
    let world = World::new();
    let mut first = Daemon::start(&world, "d", &[], &[]);
    let stderr = second_daemon_refused(&world, &first);
    let said = stderr
        .split("stop it first: ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no command said: {stderr}"));
    assert_eq!(
        said,
        format!("nxcc daemon stop --socket {}", first.socket.display())
    );
    assert!(!stderr.contains("POST /exit"), "{stderr}");
    let words = shell_words::split(said).unwrap();
    assert_eq!(&words[..3], ["nxcc", "daemon", "stop"]);
    let o = world.nxcc().args(&words[1..]).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(first.wait_exit(hang_guard()).success());
    assert!(!first.socket.exists() && !first.pid_file.exists());
}

/// `nxcc daemon status` shows the daemon of a socket (`--json`: its answer as sent); with none
/// running it says so on stderr, exit 3; one that holds its pid file but does not answer is an
/// error naming it, exit 1. The default socket is `$NXCC_DAEMON_SOCKET`, as for
/// `nxcc compile --daemon`.
#[test]
fn daemon_status_shows_the_daemon_of_a_socket_and_says_when_none_runs() {
    let world = World::new();
    let mut daemon = Daemon::start(&world, "d", &["--max-concurrent", "3"], &[]);
    let status = |socket: &std::path::Path, extra: &[&str]| {
        world
            .nxcc()
            .args(["daemon", "status", "--socket"])
            .arg(socket)
            .args(extra)
            .output()
            .unwrap()
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let o = status(&daemon.socket, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.starts_with(&format!(
            "nxcc daemon (pid {}) on {}: up ",
            daemon.pid(),
            daemon.socket.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("  compiles: 0 running, 0 queued (at most 3 at once); 0 finished"),
        "{out}"
    );
    let cache = daemon.socket.parent().unwrap().join("compile-cache");
    assert!(
        out.contains(&format!(
            "  cache: {} (0 hits and 0 misses since the daemon started)",
            cache.display()
        )),
        "{out}"
    );
    // A compile later, the counts moved.
    let wd = world.mkdir("w");
    let r = daemon.compile(&wd, &compile_body("m.neff"));
    assert_eq!(r.status, 200, "{}", r.text());
    let o = status(&daemon.socket, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["pid"], daemon.pid());
    assert_eq!(v["max_concurrent"], 3);
    assert_eq!(v["compiles"]["finished"], 1);
    assert_eq!(v["cache"]["misses"], 1);
    // The default socket: the one `nxcc compile --daemon` uses.
    let o = world
        .nxcc()
        .args(["daemon", "status"])
        .env("NXCC_DAEMON_SOCKET", &daemon.socket)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("(pid {})", daemon.pid())));

    // Holding its pid file, not answering (its socket removed): an error that names it.
    std::fs::remove_file(&daemon.socket).unwrap();
    let o = status(&daemon.socket, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        err.starts_with(&format!(
            "nxcc daemon status: error: a daemon (pid {}) holds the pid file {} but does not answer on {}",
            daemon.pid(),
            daemon.pid_file.display(),
            daemon.socket.display()
        )),
        "{err}"
    );
    assert!(text(&o.stdout).is_empty());
    // `stop`'s default socket is the same.
    let o = world
        .nxcc()
        .args(["daemon", "stop"])
        .env("NXCC_DAEMON_SOCKET", &daemon.socket)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(daemon.wait_exit(hang_guard()).success());

    // None running: said on stderr, nothing on stdout, exit 3 (with --json too).
    for extra in [&[][..], &["--json"][..]] {
        let o = status(&daemon.socket, extra);
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stdout));
        assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
        assert!(
            text(&o.stderr).starts_with(&format!(
                "no nxcc daemon runs on {} (",
                daemon.socket.display()
            )),
            "{}",
            text(&o.stderr)
        );
    }
}

#[test]
fn sigterm_lets_a_running_compile_finish_then_cleans_up() {
    let world = World::new();
    let mut daemon = Daemon::start(
        &world,
        "d",
        &[],
        &[("NXCC_SIM_WORK_MS", "walrus_driver:1500")],
    );
    let wd = world.mkdir("w");
    let s = daemon.connect();
    (&s).write_all(&original_request(
        &wd,
        &compile_body("t.neff"),
        daemon.pid(),
    ))
    .unwrap();
    wait_until(Duration::from_secs(20), "the compile to run", || {
        world
            .records()
            .iter()
            .any(|r| r["tool"] == "xla_infergoldens")
    });
    daemon.signal(libc::SIGTERM);
    // No new connections once stopping.
    wait_until(Duration::from_secs(5), "the socket to go", || {
        !daemon.socket.exists()
    });
    let r = read_response(&mut BufReader::new(&s));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(neff_first_input(&wd.join("t.neff")), "x.1");
    let status = daemon.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    assert!(!daemon.pid_file.exists());
    let log = daemon.log_text();
    assert!(log.contains("stopping: SIGTERM"), "{log}");
    assert!(log.contains("1 compile(s) running"), "{log}");
}

#[test]
fn compiles_still_running_after_the_grace_are_cancelled_without_leftovers() {
    let world = World::new();
    let (k, v) = marker("grace");
    let mut daemon = Daemon::start(
        &world,
        "d",
        &["--shutdown-grace", "1"],
        &[("NXCC_SIM_WORK_MS", "walrus_driver:20000"), (&k, &v)],
    );
    let wd = world.mkdir("w");
    let s = daemon.connect();
    (&s).write_all(&original_request(
        &wd,
        &compile_body("g.neff"),
        daemon.pid(),
    ))
    .unwrap();
    let kv = format!("{k}={v}");
    wait_until(Duration::from_secs(20), "walrus_driver to run", || {
        processes_with(&kv, daemon.pid())
            .iter()
            .any(|(_, c)| c == "walrus_driver")
    });
    let t = Instant::now();
    daemon.signal(libc::SIGTERM);
    let r = read_response(&mut BufReader::new(&s));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.header("x-nxcc-exit-status"), Some("143"));
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(daemon.wait_exit(Duration::from_secs(20)).success());
    assert!(processes_with(&kv, daemon.pid()).is_empty());
    assert!(!wd.join("g.neff").exists());
    assert!(daemon
        .log_text()
        .contains("cancelling the 1 compile(s) still running after 1 s"));
}

#[test]
fn a_client_that_goes_away_cancels_its_compile_and_leaves_no_process() {
    let world = World::new();
    let (k, v) = marker("disconnect");
    let kv = format!("{k}={v}");
    let daemon = Daemon::start(
        &world,
        "d",
        &[],
        &[("NXCC_SIM_WORK_MS", "walrus_driver:20000"), (&k, &v)],
    );
    let wd = world.mkdir("w");
    let tools_running = || processes_with(&kv, daemon.pid());
    let walrus_runs = || {
        wait_until(Duration::from_secs(20), "walrus_driver to run", || {
            tools_running().iter().any(|(_, c)| c == "walrus_driver")
        })
    };
    // The compile's processes end once its client is gone (how long it took is shown, not
    // asserted).
    let processes_go = |client: &str| {
        let t = Instant::now();
        wait_until(
            Duration::from_secs(7),
            "the compile's processes to go",
            || tools_running().is_empty(),
        );
        eprintln!(
            "{client} client gone: processes ended within {:?}",
            t.elapsed()
        );
    };

    // The streaming route: leave once the WalrusDriver job has started.
    let model = example_model();
    let (s, _) = stream_until(
        &daemon,
        &json!({
            "argv": [model, "--target", "trn2", "--toolchain", "sim", "--output", "v.neff"],
            "working_directory": wd,
        }),
        |e| e["event"] == "job_started" && e["job"] == "WalrusDriver",
    );
    walrus_runs();
    drop(s);
    processes_go("streaming");

    // The original's route: leave while the compile runs.
    let s = daemon.connect();
    (&s).write_all(&original_request(
        &wd,
        &compile_body("c.neff"),
        daemon.pid(),
    ))
    .unwrap();
    walrus_runs();
    drop(s);
    processes_go("original");
    wait_until(
        Duration::from_secs(10),
        "both compiles to be reported",
        || daemon.status()["compiles"]["cancelled"] == 2,
    );
    assert!(!wd.join("v.neff").exists() && !wd.join("c.neff").exists());
    assert_eq!(
        daemon
            .log_text()
            .matches("the client went away; cancelling it")
            .count(),
        2
    );
}

#[test]
fn an_idle_daemon_exits_but_never_during_a_compile() {
    let world = World::new();
    // The compile lasts longer than the inactivity timeout.
    let mut daemon = Daemon::start(
        &world,
        "d",
        &["--inactivity-timeout", "1"],
        &[("NXCC_SIM_WORK_MS", "walrus_driver:2500")],
    );
    let wd = world.mkdir("w");
    let t = Instant::now();
    let r = daemon.compile(&wd, &compile_body("i.neff"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(t.elapsed() >= Duration::from_millis(2500));
    let finished = Instant::now();
    let status = daemon.wait_exit(Duration::from_secs(20));
    assert!(status.success());
    assert!(
        finished.elapsed() >= Duration::from_millis(500),
        "counted from the last request's end"
    );
    assert!(!daemon.socket.exists() && !daemon.pid_file.exists());
    assert!(daemon.log_text().contains("stopping: no request for 1 s"));
}

#[test]
fn post_exit_stops_the_daemon() {
    let world = World::new();
    let mut daemon = Daemon::start(&world, "d", &["--inactivity-timeout", "0"], &[]);
    assert!(daemon.status()["inactivity_timeout_s"].is_null());
    let status = daemon.exit();
    assert!(status.success());
    assert!(!daemon.socket.exists() && !daemon.pid_file.exists());
}

#[test]
fn a_request_that_arrives_while_stopping_gets_503() {
    let world = World::new();
    let mut daemon = Daemon::start(&world, "d", &[], &[]);
    let wd = world.mkdir("w");
    // A request whose body is still coming when the daemon is told to stop.
    let body = compile_body("late.neff");
    let request = original_request(&wd, &body, daemon.pid());
    let (first, rest) = request.split_at(request.len() - 5);
    let s = daemon.connect();
    (&s).write_all(first).unwrap();
    let r = daemon
        .raw(b"POST /exit HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    wait_until(Duration::from_secs(10), "the socket to go", || {
        !daemon.socket.exists()
    });
    // The daemon may answer (and close) before the rest of the body arrives: the write can then
    // fail, and the answer is what this test is about.
    let _ = (&s).write_all(rest);
    let r = read_response(&mut BufReader::new(&s));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("the nxcc daemon is stopping"));
    assert!(daemon.wait_exit(Duration::from_secs(20)).success());
    assert!(!wd.join("late.neff").exists());
}

/// `nxcc daemon stop --socket S` stops the daemon of that socket cleanly and waits until it is
/// gone (socket and pid file removed); a daemon that holds its pid file but no longer answers on
/// its socket is stopped through its pid; with none running it says so, exit 0.
#[test]
fn daemon_stop_stops_the_daemon_of_a_socket() {
    let world = World::new();
    let stop = |d: &Daemon| {
        world
            .nxcc()
            .args(["daemon", "stop", "--socket"])
            .arg(&d.socket)
            .output()
            .unwrap()
    };
    let mut daemon = Daemon::start(&world, "d", &[], &[]);
    let o = stop(&daemon);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        out,
        format!(
            "nxcc daemon (pid {}) on {} stopped\n",
            daemon.pid(),
            daemon.socket.display()
        )
    );
    assert!(daemon.wait_exit(hang_guard()).success());
    assert!(!daemon.socket.exists() && !daemon.pid_file.exists());
    let o = stop(&daemon);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("no nxcc daemon runs on {}\n", daemon.socket.display())
    );
    // Its socket gone (removed by someone), the daemon still holds its pid file: SIGTERM.
    let mut daemon = Daemon::start(&world, "e", &[], &[]);
    std::fs::remove_file(&daemon.socket).unwrap();
    let o = stop(&daemon);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("stopped"));
    assert!(daemon.wait_exit(hang_guard()).success());
    assert!(
        daemon.log_text().contains("SIGTERM"),
        "{}",
        daemon.log_text()
    );
}
