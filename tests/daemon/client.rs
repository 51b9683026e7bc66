//! `nxcc compile --daemon`: it starts a daemon when none answers, streams the compile's lines as
//! they come, and exits with the compile's exit status.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;

/// Stops the daemon a client started (it is not our child) when the test ends, however it ends.
struct Started {
    socket: PathBuf,
    pid_file: PathBuf,
}

impl Started {
    fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_file)
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            // SAFETY: a pid read from the daemon's pid file; at worst it is gone already.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The first line of a `compile --daemon` through the daemon's cache by its default.
const CACHE_NOTE: &str = "nxcc compile --daemon: the daemon compiles through its compile cache, on by default there (nxcc compile uses one only with --cache_dir): a hit runs no tool; --no_cache compiles without it\n";

/// The daemon's cache is on by default, `nxcc compile`'s off: a `compile --daemon` that goes
/// through it without asking says so on its first line (stderr), and runs no tool on a hit; one
/// that names its cache, turns it off or silences the console does not say it. A plain compile's
/// console stays the original's, and its log says there was no cache and how to have one.
#[test]
fn a_compile_through_the_daemons_default_cache_says_so_first() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let wd = world.mkdir("w");
    std::fs::write(wd.join("m.hlo"), distinct_model(5)).unwrap();
    let run = |extra: &[&str]| {
        let o = world
            .nxcc()
            .args(["compile", "--daemon"])
            .args(sim_argv("m.hlo", "a.neff", extra))
            .current_dir(&wd)
            .env("NXCC_DAEMON_SOCKET", &daemon.socket)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{extra:?}: {err}");
        (String::from_utf8_lossy(&o.stdout).into_owned(), err)
    };
    let (_, err) = run(&[]);
    assert_eq!(err, CACHE_NOTE);
    let (out, err) = run(&[]);
    assert_eq!(err, CACHE_NOTE);
    assert!(out.contains("Using a cached neff at "), "a hit: {out}");
    let tools = world.records().len();
    let (out, err) = run(&["--no_cache"]);
    assert!(err.is_empty(), "{err}");
    assert!(!out.contains("Using a cached neff"), "{out}");
    assert!(world.records().len() > tools, "--no_cache ran the tools");
    let own = world.path().join("own-cache");
    let (_, err) = run(&["--cache_dir", own.to_str().unwrap()]);
    assert!(err.is_empty(), "{err}");
    let (_, err) = run(&["--verbose", "off"]);
    assert!(err.is_empty(), "{err}");

    // `nxcc compile` alone: no cache, nothing said on its console; its log says it.
    let o = world
        .nxcc()
        .arg("compile")
        .args(sim_argv("m.hlo", "b.neff", &["--logfile", "b.log"]))
        .current_dir(&wd)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let console =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(!console.to_lowercase().contains("cache"), "{console}");
    let log = std::fs::read_to_string(wd.join("b.log")).unwrap();
    assert!(
        log.contains("[neuronx-cc]: Compile cache: off (--cache_dir DIR uses one; parallel-compile, the daemon and compile --daemon use one by default)\n"),
        "{log}"
    );
    let o = world
        .nxcc()
        .arg("compile")
        .args(sim_argv(
            "m.hlo",
            "c.neff",
            &["--logfile", "c.log", "--cache_dir", own.to_str().unwrap()],
        ))
        .current_dir(&wd)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let log = std::fs::read_to_string(wd.join("c.log")).unwrap();
    assert!(
        log.contains(&format!("[neuronx-cc]: Compile cache: {}\n", own.display())),
        "{log}"
    );
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn with_no_daemon_running_the_client_starts_one() {
    let world = World::new();
    let wd = world.mkdir("w");
    std::fs::write(wd.join("m.hlo"), distinct_model(3)).unwrap();
    let dir = world.runtime.join("nxcc");
    let started = Started {
        socket: dir.join("daemon.sock"),
        pid_file: dir.join("daemon.pid"),
    };
    let t = Instant::now();
    let out = world
        .daemon_client("a.neff")
        .current_dir(&wd)
        .output()
        .unwrap();
    let took = t.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Compiler status PASS"));
    assert_eq!(neff_first_input(&wd.join("a.neff")), "x3.1");
    // That the compile goes through the daemon's cache is said first, then that a daemon that
    // outlives the compile is started.
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with(&format!(
            "{CACHE_NOTE}nxcc compile --daemon: no daemon answers on {}; starting one in the background (nxcc daemon, its log in {}; it stops after 300 s without a compile)\n",
            started.socket.display(),
            dir.join("daemon.log").display()
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The first try of the socket comes after the original client's first back-off step.
    assert!(took >= Duration::from_millis(500), "{took:?}");

    // Where the daemon lives by default: $XDG_RUNTIME_DIR/nxcc, 0700; the socket 0600.
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&started.socket), 0o600);
    let pid = started.pid().expect("the daemon's pid file");
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let env = String::from_utf8_lossy(&env);
    assert!(
        !env.contains("NXCC_SIM_RECORD="),
        "request variables are not the daemon's"
    );
    assert!(!world.records().is_empty(), "they travel with the request");
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert!(
        log.contains(&format!("(pid {pid}) serving {}", started.socket.display())),
        "{log}"
    );

    // The next compile uses the same daemon, at once.
    let out = world
        .daemon_client("b.neff")
        .current_dir(&wd)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(started.pid(), Some(pid));
    assert!(wd.join("b.neff").is_file());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("starting one"));

    // Stop it.
    let s = std::os::unix::net::UnixStream::connect(&started.socket).unwrap();
    let mut w = &s;
    std::io::Write::write_all(
        &mut w,
        b"POST /exit HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut BufReader::new(&s)).status, 200);
    wait_until(Duration::from_secs(40), "the daemon to exit", || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true)
    });
    assert!(!started.pid_file.exists());
}

#[test]
fn with_a_daemon_running_the_client_streams_its_lines_and_exits_with_the_compiles_status() {
    let world = World::new();
    // The client forwards the simulated toolchain's variables of this world.
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let wd = world.mkdir("w");
    std::fs::write(wd.join("m.hlo"), distinct_model(4)).unwrap();
    let client = |extra: &[&str], env: &[(&str, &str)]| {
        let mut c = world.nxcc();
        c.args([
            "compile",
            "m.hlo",
            "--daemon",
            "--target",
            "trn2",
            "--toolchain",
            "sim",
        ])
        .args(extra)
        .env("NXCC_DAEMON_SOCKET", &daemon.socket)
        .current_dir(&wd);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };

    // Lines arrive as the compile runs: the walrus job is announced well before the end.
    let mut child = client(
        &["--output", "s.neff", "--verbose", "info"],
        &[("NXCC_SIM_WORK_MS", "walrus_driver:1500")],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut announced = None;
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.contains("Starting job WalrusDriver") {
            announced = Some(Instant::now());
            assert!(
                child.try_wait().unwrap().is_none(),
                "streamed while the compile runs"
            );
        }
        lines.push(line);
    }
    let status = child.wait().unwrap();
    let ended = Instant::now();
    assert_eq!(status.code(), Some(0), "{lines:?}");
    let announced = announced.unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        ended - announced >= Duration::from_secs(1),
        "{:?}",
        ended - announced
    );
    assert!(
        lines.last().unwrap().ends_with("Compiler status PASS"),
        "{lines:?}"
    );
    assert_eq!(neff_first_input(&wd.join("s.neff")), "x4.1");

    // A failing tool: exit 70, the error on stderr; the fault came with this request only.
    // (--no_cache: the same compile is in the daemon's cache by now, and the fault is not part
    // of its key.)
    let out = client(
        &["--output", "f.neff", "--no_cache"],
        &[("NXCC_SIM_FAULT", "walrus_driver:exit=3")],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(70));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "[ERROR] Child process job \"WalrusDriver\" exited abnormally! Exit status 3."
        ),
        "{stderr}"
    );
    assert!(!wd.join("f.neff").exists());
    assert_eq!(
        client(&["--output", "g.neff"], &[])
            .status()
            .unwrap()
            .code(),
        Some(0)
    );

    // A validation error in the working directory's plan: exit 70, the original's message.
    let out = client(&["--target", "trn1", "--lnc", "2"], &[])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(70));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with(&format!("{CACHE_NOTE}[ERROR] [NCC_EARG001]")));

    // A dry run is answered locally, as `compile` answers it.
    let out = client(&["--dry-run=json"], &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["output"], wd.join("file.neff").display().to_string());
    assert_eq!(daemon.status()["compiles"]["finished"], 4);
}

#[test]
fn a_daemon_that_is_stopping_is_waited_for_and_the_compile_sent_again() {
    use std::io::Write;
    let world = World::new();
    let wd = world.mkdir("w");
    let socket = world.path().join("fake.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // A stand-in daemon: the first request gets the stopping daemon's 503, the second a stream.
    let server = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for answer in [
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 9\r\nconnection: close\r\n\r\nstopping\n".to_string(),
            {
                let body = concat!(
                    r#"{"event":"log","line":"compiled by the second daemon","stream":"stdout"}"#,
                    "\n",
                    r#"{"event":"done","exit_status":0,"output":"/x","cache":"off"}"#,
                    "\n"
                );
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
            },
        ] {
            let (s, _) = listener.accept().unwrap();
            seen.push(read_request(&s));
            (&s).write_all(answer.as_bytes()).unwrap();
        }
        seen
    });
    let t = Instant::now();
    let out = world
        .nxcc()
        .args(["compile", "--daemon", "m.pb", "--target", "trn2"])
        .env("NXCC_DAEMON_SOCKET", &socket)
        .current_dir(&wd)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "compiled by the second daemon\n"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "waited before sending again"
    );
    let seen = server.join().unwrap();
    assert_eq!(seen.len(), 2);
    for (line, body) in &seen {
        assert_eq!(line, "POST /v1/compile HTTP/1.1");
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(v["argv"], serde_json::json!(["m.pb", "--target", "trn2"]));
        assert_eq!(v["working_directory"], wd.display().to_string());
        assert_eq!(
            v["env"]["NXCC_SIM_STATE"],
            world.state.display().to_string()
        );
    }
}

#[test]
fn a_compile_that_fails_in_the_daemon_leaves_a_bundle_the_client_wrote_that_replays() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let wd = world.mkdir("w");
    let bundles = world.mkdir("w/bundles");
    std::fs::write(wd.join("m.hlo"), distinct_model(7)).unwrap();
    let model = std::fs::read(wd.join("m.hlo")).unwrap();
    let client = |extra: &[&str], fault: Option<&str>| {
        let mut c = world.nxcc();
        c.args(["compile", "--daemon"])
            .args(sim_argv("m.hlo", "f.neff", extra))
            .env("NXCC_DAEMON_SOCKET", &daemon.socket)
            .current_dir(&wd);
        if let Some(f) = fault {
            c.env("NXCC_SIM_FAULT", f);
        }
        c.output().unwrap()
    };
    // A success asks for no bundle (`=error`, the default).
    let out = client(&["--gen-reproducer", "--reproducer-dir", "bundles"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(bundles_in(&bundles).is_empty());
    assert!(bundles_in(&wd).is_empty());

    // A failure (the same compile is in the daemon's cache by now: --no_cache).
    let out = client(
        &[
            "--no_cache",
            "--gen-reproducer",
            "--reproducer-dir",
            "bundles",
        ],
        Some("walrus_driver:exit=3"),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    let found = bundles_in(&bundles);
    assert_eq!(found.len(), 1, "{stderr}");
    let bundle = &found[0];
    assert!(
        stderr.contains(&format!("Wrote a reproducer to {}", bundle.display())),
        "{stderr}"
    );
    // What the local compile's bundle holds: the model as sent, how it failed, the jobs' figures.
    assert_eq!(bundle_member(bundle, "model/m.hlo"), model);
    let failure: serde_json::Value =
        serde_json::from_slice(&bundle_member(bundle, "failure.json")).unwrap();
    assert_eq!(failure["signature"]["job"], "WalrusDriver", "{failure}");
    assert_eq!(failure["signature"]["status"], "exit status 3");
    assert!(failure["peak_rss_kb"].as_u64().unwrap() > 0, "{failure}");
    let log = String::from_utf8(bundle_member(bundle, "log.txt")).unwrap();
    assert!(
        log.contains("Child process job \"WalrusDriver\" exited abnormally"),
        "{log}"
    );
    // Nothing of the client's snapshot is left behind.
    let left: Vec<String> = std::fs::read_dir(&wd)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nxcc-snapshot-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // The model gone, the bundle replays from another directory.
    std::fs::remove_file(wd.join("m.hlo")).unwrap();
    let elsewhere = world.mkdir("elsewhere");
    let scratch = world.mkdir("scratch");
    let out = world
        .nxcc()
        .arg("reproduce")
        .arg(bundle)
        .current_dir(&elsewhere)
        .env("TMPDIR", &scratch)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", text(&out.stderr));
    assert!(
        said.contains("the replay:           failed at WalrusDriver: exit status 3"),
        "{said}"
    );
    assert!(
        said.contains("reproduced: the same failure recurred"),
        "{said}"
    );
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
}

#[test]
fn a_client_interrupted_while_its_compile_runs_leaves_no_snapshot_and_no_bundle() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let wd = world.mkdir("w");
    std::fs::write(wd.join("m.hlo"), distinct_model(8)).unwrap();
    let before = world.records().len();
    let mut child = world
        .nxcc()
        .args(["compile", "--daemon"])
        .args(sim_argv("m.hlo", "f.neff", &["--gen-reproducer=always"]))
        .env("NXCC_DAEMON_SOCKET", &daemon.socket)
        .env("NXCC_SIM_FAULT", "walrus_driver:hang")
        .current_dir(&wd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once a tool of the compile has finished, the client waits on the daemon.
    wait_until(hang_guard(), "a tool of the compile", || {
        world.records().len() > before
    });
    let snapshots = || -> Vec<String> {
        std::fs::read_dir(&wd)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("nxcc-snapshot-"))
            .collect()
    };
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(130));
    // The daemon cancels the compile (its own snapshot goes with it); the client's is gone.
    wait_until(hang_guard(), "the compile cancelled", || {
        daemon.status()["compiles"]["cancelled"] == 1
    });
    assert!(snapshots().is_empty(), "{:?}", snapshots());
    assert!(bundles_in(&wd).is_empty());
}
