//! The wire protocol: the original client's `POST /compile`, the streaming `/v1/compile`, status,
//! unknown paths and methods, and the original's abstract address.

use std::io::{BufReader, Write};
use std::path::Path;

use serde_json::json;

use crate::common::*;

fn neff_info_verify(world: &World, neff: &Path) -> (i32, String) {
    let out = world
        .nxcc()
        .args(["neff-info", "--verify"])
        .arg(neff)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn the_original_clients_request_compiles_in_its_working_directory() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &[], &[]);
    // The working directory does not exist yet: the daemon creates it, as the original does.
    let wd = world.path().join("job 7/work");
    let model = example_model();
    let body = shell_join(&[
        "compile",
        model.to_str().unwrap(),
        "--framework",
        "XLA",
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--output",
        "out dir/model.neff",
    ]);
    // One keep-alive connection, two requests, as `requests.Session` may send them.
    let mut s = daemon.connect();
    s.write_all(&original_request(&wd, &body, daemon.pid()))
        .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let r = read_response(&mut reader);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.body.is_empty(),
        "a successful compile answers an empty body"
    );
    assert_eq!(r.header("x-nxcc-exit-status"), Some("0"));
    // The relative --output is the working directory's.
    let neff = wd.join("out dir/model.neff");
    assert_eq!(neff_info_verify(&world, &neff), (0, "OK\n".to_string()));
    // And the compile's log is there too, with nothing of it in the daemon's own directory.
    assert!(wd.join("log-neuron-cc.txt").is_file());
    assert!(!world.path().join("d/log-neuron-cc.txt").exists());

    // A failing compile on the same connection: 400, text/plain, the error lines.
    let body = shell_join(&[
        "compile",
        model.to_str().unwrap(),
        "--target",
        "trn1",
        "--lnc",
        "2",
        "--toolchain",
        "sim",
    ]);
    s.write_all(&original_request(&wd, &body, daemon.pid()))
        .unwrap();
    let r = read_response(&mut reader);
    assert_eq!(r.status, 400);
    assert_eq!(r.header("x-nxcc-exit-status"), Some("70"));
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    assert!(
        r.text().starts_with("[ERROR] [NCC_EARG001] Illegal argument(s) - Logical Neuron Core size 2 is not supported on trn1."),
        "{}",
        r.text()
    );

    // Arguments without the leading `compile` are accepted too.
    let r = daemon.compile(
        &wd,
        &shell_join(&sim_argv(model.to_str().unwrap(), "b.neff", &[])),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(neff_info_verify(&world, &wd.join("b.neff")).0, 0);

    // Unknown path: the original's text.
    let r = daemon
        .raw(b"POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 404);
    assert_eq!(r.text(), "Unrecognized command /nope");
    let r = daemon.raw(b"GET /nope?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(
        (r.status, r.text().as_str()),
        (404, "Unrecognized command /nope")
    );
    // Known path, other method: 405.
    for (req, allow) in [
        (&b"GET /compile HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..], "POST"),
        (&b"PUT /exit HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"[..], "POST"),
        (&b"POST /v1/status HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"[..], "GET"),
        (&b"DELETE /v1/compile HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..], "POST"),
    ] {
        let r = daemon.raw(req);
        assert_eq!(r.status, 405, "{}", String::from_utf8_lossy(req));
        assert_eq!(r.header("allow"), Some(allow));
    }
}

#[test]
fn a_fault_in_the_daemons_environment_fails_the_compile_with_its_error_text() {
    let world = World::new();
    let daemon = Daemon::start(
        &world,
        "d",
        &[],
        &[("NXCC_SIM_FAULT", "walrus_driver:exit=3")],
    );
    let wd = world.mkdir("w");
    let body = compile_body("m.neff");
    let r = daemon.compile(&wd, &body);
    assert_eq!(r.status, 400);
    assert_eq!(r.header("x-nxcc-exit-status"), Some("70"));
    assert!(
        r.text().contains(
            "[ERROR] Child process job \"WalrusDriver\" exited abnormally! Exit status 3."
        ),
        "{}",
        r.text()
    );
    assert!(!wd.join("m.neff").exists());
}

#[test]
fn v1_streams_events_and_ends_with_done() {
    let world = World::new();
    // A fault is injected through a request's env below.
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let wd = world.mkdir("w");
    let model = example_model();
    let (r, events) = daemon.v1(&json!({
        "argv": [model, "--target", "trn2", "--toolchain", "sim", "--output", "v.neff"],
        "working_directory": wd,
    }));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.last(), Some(&"done"));
    // First, what runs the compile.
    assert_eq!(
        events[0],
        json!({"event": "engine", "engine": "pipeline", "compiler": null, "identity": null})
    );
    // Once planned, the toolchain it runs with: the simulated one the request names.
    assert_eq!(events[1]["event"], "toolchain", "{events:?}");
    assert_eq!(events[1]["simulated"], true, "{}", events[1]);
    assert_eq!(
        events[1]["identity"],
        json!({"kind": "simulated", "nxcc_version": nxcc::VERSION})
    );
    let done = events.last().unwrap();
    assert_eq!(done["exit_status"], 0);
    assert_eq!(
        done["cache"], "miss",
        "the daemon compiles through its cache"
    );
    assert_eq!(done["output"], wd.join("v.neff").display().to_string());
    // One job_started and one job_finished per job, in order, with its measurements.
    let started: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "job_started")
        .map(|e| e["job"].as_str().unwrap())
        .collect();
    let finished: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "job_finished")
        .collect();
    assert_eq!(started.first(), Some(&"HLOToTensorizer"));
    assert_eq!(started.last(), Some(&"Kelper"));
    assert_eq!(started.len(), finished.len());
    for (s, f) in started.iter().zip(&finished) {
        assert_eq!(f["job"], *s);
        assert!(f["wall_s"].as_f64().unwrap() >= 0.0);
        assert!(f["max_rss_kb"].as_u64().is_some());
    }
    assert!(events.iter().any(|e| e["event"] == "log"
        && e["stream"] == "stdout"
        && e["line"]
            .as_str()
            .unwrap()
            .ends_with("Compiler status PASS")));
    assert_eq!(neff_first_input(&wd.join("v.neff")), "x.1");

    // The request's environment reaches the tools: a fault injected for this compile only.
    let (_, events) = daemon.v1(&json!({
        "argv": ["compile", model, "--target", "trn2", "--toolchain", "sim", "--output", "f.neff", "--no_cache"],
        "working_directory": wd,
        "env": {"NXCC_SIM_FAULT": "walrus_driver:exit=3"},
    }));
    let done = events.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["exit_status"], 70);
    assert!(events.iter().any(|e| e["event"] == "log"
        && e["stream"] == "stderr"
        && e["line"]
            .as_str()
            .unwrap()
            .contains("exited abnormally! Exit status 3")));
    // ... and not the next one, which the cache answers: no job runs.
    let (_, events) = daemon.v1(&json!({
        "argv": [model, "--target", "trn2", "--toolchain", "sim", "--output", "g.neff"],
        "working_directory": wd,
    }));
    assert_eq!(events.last().unwrap()["exit_status"], 0);
    assert_eq!(events.last().unwrap()["cache"], "hit");
    assert!(!events.iter().any(|e| e["event"] == "job_started"));
    assert!(nxcc::neff::read::Neff::open(&wd.join("g.neff")).is_ok());

    // Usage errors come back as the compile's own: exit 2, argparse's text.
    let (r, events) = daemon
        .v1(&json!({"argv": [model, "--target", "trn2", "--bogus"], "working_directory": wd}));
    assert_eq!(r.status, 200);
    let done = events.last().unwrap();
    assert_eq!(done["exit_status"], 2);
    assert!(done["error_lines"][0]
        .as_str()
        .unwrap()
        .contains("NCC_EARG002"));

    let status = daemon.status();
    assert_eq!(status["version"], nxcc::VERSION);
    assert_eq!(status["running"], 0);
    assert_eq!(status["queued"], 0);
    assert!(status["uptime_s"].as_f64().unwrap() > 0.0);
    // Counted as the compiles ended: the first one stored, the one after it answered.
    assert_eq!(status["cache"]["misses"], 1, "{status}");
    assert_eq!(status["cache"]["hits"], 1, "{status}");
    // And in the cache directory's own counters, which every process using it adds to.
    assert_eq!(status["cache"]["counters"]["compiles"], 1, "{status}");
    assert_eq!(status["cache"]["counters"]["hits"], 1, "{status}");
    assert_eq!(status["cache"]["counters"]["misses_model"], 1, "{status}");
    assert_eq!(status["memory"]["in_use"], 0);
    assert_eq!(status["compiles"]["finished"], 4);
}

#[test]
fn the_abstract_address_is_found_through_the_pid_file_as_the_original_client_does() {
    let world = World::new();
    let dir = world.mkdir("client");
    let pid_file = dir.join("neuron.pid");
    let log = dir.join("daemon.log");
    let mut child = world
        .nxcc()
        .args(["daemon", "--abstract", "--pid-file"])
        .arg(&pid_file)
        .arg("--log-file")
        .arg(&log)
        .spawn()
        .unwrap();
    // The original client: poll the pid file, read the pid, connect to \0com.amazon.neuronxcc.<pid>.
    let mut pid = None;
    wait_until(std::time::Duration::from_secs(20), "the pid file", || {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<u32>().ok()));
        pid.is_some()
    });
    let pid = pid.unwrap();
    assert_eq!(pid, child.id());
    let s = nxcc::daemon::listen::connect_abstract(&format!("com.amazon.neuronxcc.{pid}")).unwrap();
    let body = compile_body("a.neff");
    (&s).write_all(&original_request(&dir, &body, pid)).unwrap();
    let r = read_response(&mut BufReader::new(&s));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(dir.join("a.neff").is_file());
    drop(s);
    // SAFETY: our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(!pid_file.exists(), "the pid file is removed on exit");
}

#[test]
fn the_daemon_runs_an_external_compiler_through_its_cache() {
    let world = World::new();
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake-compiler.sh");
    let record = world.path().join("fake.record");
    let daemon = Daemon::start(
        &world,
        "d",
        &["--compiler", fake.to_str().unwrap()],
        &[("FAKE_COMPILER_RECORD", record.to_str().unwrap())],
    );
    let wd = world.mkdir("w");
    let model = example_model();
    for out in ["a.neff", "b.neff"] {
        let r = daemon.compile(
            &wd,
            &shell_join(&[model.to_str().unwrap(), "--target", "trn2", "--output", out]),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            std::fs::read(wd.join(out))
                .unwrap()
                .starts_with(b"FAKE-NEFF"),
            "the external compiler wrote {out}"
        );
    }
    // One run of the external compiler: the second compile was a cache hit.
    assert_eq!(std::fs::read_to_string(&record).unwrap().lines().count(), 1);
    assert_eq!(
        std::fs::read(wd.join("a.neff")).unwrap(),
        std::fs::read(wd.join("b.neff")).unwrap()
    );
    assert!(
        daemon.log_text().contains("the external compiler"),
        "{}",
        daemon.log_text()
    );
    // The stream opens with the compiler, named as the cache keys it, even for a compile that
    // ends before it runs (a usage error).
    let (r, events) = daemon.v1(&json!({
        "argv": [model, "--target", "trn2", "--bogus"],
        "working_directory": wd,
    }));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(events.last().unwrap()["exit_status"], 2, "{events:?}");
    let engine = &events[0];
    assert_eq!(engine["event"], "engine", "{events:?}");
    assert_eq!(engine["engine"], "external");
    assert_eq!(engine["compiler"], fake.display().to_string());
    let bytes = std::fs::read(&fake).unwrap();
    assert_eq!(
        engine["identity"]["compiler"],
        json!({"blake3": blake3::hash(&bytes).to_hex().to_string(), "size": bytes.len()})
    );
    assert!(
        engine["identity"]["version"]
            .as_str()
            .unwrap()
            .starts_with("fake-compiler 2.24"),
        "{engine}"
    );
}

/// A dry run is rendered in one place: the daemon shows exactly what `nxcc compile` shows in the
/// same directory, memory estimate included, as text and as JSON.
#[test]
fn the_daemons_dry_run_is_the_command_lines() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &[], &[]);
    let wd = world.mkdir("w");
    std::fs::copy(example_model(), wd.join("m.hlo")).unwrap();
    for flag in ["--dry-run", "--dry-run=json"] {
        let argv = sim_argv("m.hlo", "m.neff", &[flag]);
        let (r, events) = daemon.v1(&json!({
            "argv": argv,
            "working_directory": wd.display().to_string(),
        }));
        assert_eq!(r.status, 200, "{}", r.text());
        let shown: String = events
            .iter()
            .filter(|e| e["event"] == "log" && e["stream"] == "stdout")
            .map(|e| format!("{}\n", e["line"].as_str().unwrap()))
            .collect();
        let done = events.last().unwrap();
        assert_eq!(
            (done["event"].as_str(), done["exit_status"].as_i64()),
            (Some("done"), Some(0))
        );
        assert_eq!(done["status"], "succeeded", "{done}");
        let local = world
            .nxcc()
            .arg("compile")
            .args(&argv)
            .current_dir(&wd)
            .output()
            .unwrap();
        assert_eq!(local.status.code(), Some(0));
        assert_eq!(shown, String::from_utf8_lossy(&local.stdout), "{flag}");
        assert!(
            shown.contains("memory estimate") || shown.contains("memory_estimate"),
            "{flag}"
        );
    }
}

#[test]
fn v1_says_the_daemons_own_toolchain_when_the_request_names_none() {
    let world = World::new();
    let tc = sim_toolchain(&world, "tc");
    let daemon = Daemon::start(
        &world,
        "d",
        &[],
        &[("NXCC_TOOLCHAIN", tc.to_str().unwrap())],
    );
    let wd = world.mkdir("w");
    let model = example_model();
    let request = json!({
        "argv": [model, "--target", "trn2", "--output", "t.neff"],
        "working_directory": wd,
    });
    let (r, events) = daemon.v1(&request);
    assert_eq!(r.status, 200);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds[..2], ["engine", "toolchain"], "{events:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "toolchain").count(),
        1,
        "{kinds:?}"
    );
    let done = events.last().unwrap();
    assert_eq!(done["exit_status"], 0, "{events:?}");
    // The daemon's NXCC_TOOLCHAIN: its directory, simulated, and the identity the key records
    // (the digest of the tools the plan runs, as they are in that directory).
    let said = &events[1];
    assert_eq!(said["bin"], tc.join("bin").display().to_string(), "{said}");
    assert_eq!(said["simulated"], true, "{said}");
    assert_eq!(said["identity"]["kind"], "simulated-dir", "{said}");
    let walrus = std::fs::read(tc.join("bin/walrus_driver")).unwrap();
    assert_eq!(
        said["identity"]["tools"]["walrus_driver"],
        json!({"blake3": blake3::hash(&walrus).to_hex().to_string(), "size": walrus.len()}),
        "{said}"
    );
    // The same identity with no cache (computed, not read off the key).
    let mut uncached = request.clone();
    uncached["argv"] = json!([
        model,
        "--target",
        "trn2",
        "--output",
        "u.neff",
        "--no_cache"
    ]);
    let (_, events) = daemon.v1(&uncached);
    assert_eq!(events.last().unwrap()["cache"], "off", "{events:?}");
    assert_eq!(events[1], *said);
    // A request that names a toolchain: that one.
    let mut named = request.clone();
    named["argv"] = json!(sim_argv(model.to_str().unwrap(), "s.neff", &[]));
    let (_, events) = daemon.v1(&named);
    assert_eq!(events[1]["event"], "toolchain", "{events:?}");
    assert_eq!(events[1]["identity"]["kind"], "simulated", "{}", events[1]);
    // A request refused before it is planned says no toolchain.
    let mut refused = request;
    refused["argv"] = json!([model, "--target", "nonsuch", "--output", "r.neff"]);
    let (_, events) = daemon.v1(&refused);
    assert!(
        events.iter().all(|e| e["event"] != "toolchain"),
        "{events:?}"
    );
    assert_ne!(events.last().unwrap()["exit_status"], 0, "{events:?}");
}
