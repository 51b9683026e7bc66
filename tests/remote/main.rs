//! Remote compiles against a real BuildGrid on loopback (provisioned on first use, see
//! `buildgrid.rs`) and real `nxcc worker`s: byte-identical NEFFs, action-cache hits that run no
//! tool anywhere, misses on a changed flag or model, the remote cache alone, failures reported
//! as local ones and not cached, a server that is down, a killed worker, a refused non-compile
//! action, a worker's memory budget, SIGTERM draining, parallel-compile over two workers.
//! Beside them: the client's faults against a scripted hostile server (`client_faults.rs`,
//! `hostile.rs`), the worker's against hostile actions and a hostile CAS (`worker_faults.rs`),
//! TLS with credentials (`tls.rs`), and a fleet across hosts in network namespaces (`fleet.rs`).

mod buildgrid;
mod client_faults;
#[path = "../common/mod.rs"]
mod common;
mod fleet;
mod hostile;
mod tls;
mod worker_faults;

use std::time::Duration;

use buildgrid::{model_variant, processes_with_env, said, text, Client, Server, Worker};
use common::{compile_spans, max_overlap};

const LIMIT: Duration = Duration::from_secs(120);

/// `compile MODEL --target trn2 --toolchain sim --output OUT EXTRA...`.
fn compile_args<'a>(model: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    common::sim_compile_args(model, "trn2", out, extra)
}

/// The example model compiled into `model.neff` from `c`, with `extra`.
fn compile_mlp(c: &Client, extra: &[&str]) -> std::process::Output {
    c.run(
        &compile_args("mlp.hlo_module.pb", "model.neff", extra),
        &[],
        LIMIT,
    )
}

fn tool_runs(w: &Worker) -> usize {
    w.records().len()
}

#[test]
fn remote_compiles_match_local_ones_and_hit_the_action_cache() {
    let server = Server::start();
    let a = Worker::start(&server, "a", &[], &[]);
    let b = Worker::start(&server, "b", &[], &[]);
    let url = server.url();

    // A local compile, the reference.
    let local = Client::new();
    let o = compile_mlp(&local, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    // The same compile remotely: the same bytes, compiled by a worker.
    let first = Client::new();
    let o = compile_mlp(&first, &["--remote", &url]);
    assert!(
        o.status.success(),
        "{}\n{}",
        text(&o.stderr),
        a.log() + &b.log()
    );
    assert!(
        std::fs::read(first.path().join("model.neff")).unwrap()
            == std::fs::read(local.path().join("model.neff")).unwrap(),
        "a remote NEFF differs from the local one"
    );
    let runs = tool_runs(&a) + tool_runs(&b);
    assert!(runs > 0, "no tool ran on any worker");

    // From a fresh directory: an action-cache hit; no tool runs on any worker.
    let second = Client::new();
    let o = compile_mlp(&second, &["--remote", &url]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("Using a remote cached neff"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(
        tool_runs(&a) + tool_runs(&b),
        runs,
        "an action-cache hit ran tools"
    );
    assert_eq!(
        std::fs::read(second.path().join("model.neff")).unwrap(),
        std::fs::read(local.path().join("model.neff")).unwrap()
    );

    // A different flag misses (the workers compile again) ...
    let o = second.run(
        &compile_args("mlp.hlo_module.pb", "o1.neff", &["--remote", &url, "-O1"]),
        &[],
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stdout).contains("Using a remote cached neff"));
    let after_flag = tool_runs(&a) + tool_runs(&b);
    assert!(after_flag > runs, "a changed flag did not compile");

    // ... and so does a changed model (of 2 MiB: it goes up and down through ByteStream).
    std::fs::write(
        second.path().join("changed.pb"),
        model_variant("changed", 2 << 20),
    )
    .unwrap();
    let o = second.run(
        &compile_args("changed.pb", "changed.neff", &["--remote", &url]),
        &[],
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stdout).contains("Using a remote cached neff"));
    assert!(
        tool_runs(&a) + tool_runs(&b) > after_flag,
        "a changed model did not compile"
    );
    let local_changed = Client::new();
    std::fs::write(
        local_changed.path().join("changed.pb"),
        model_variant("changed", 2 << 20),
    )
    .unwrap();
    // A NEFF names the file it was written as: the local reference is written as model.neff,
    // the name the worker compiles to.
    let o = local_changed.run(&compile_args("changed.pb", "model.neff", &[]), &[], LIMIT);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        std::fs::read(second.path().join("changed.neff")).unwrap()
            == std::fs::read(local_changed.path().join("model.neff")).unwrap(),
        "a large model's remote NEFF differs from the local one"
    );
}

#[test]
fn the_remote_cache_alone_shares_a_local_compile() {
    let server = Server::start();
    let url = server.url();
    let first = Client::new();
    let o = compile_mlp(&first, &["--remote-cache", &url]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stdout).contains("Using a remote cached neff"));
    // A fresh directory (and a fresh local cache): served from the remote action cache, no
    // tool run (its log shows no job, and no work dir was made).
    let second = Client::new();
    let o = compile_mlp(&second, &["--remote-cache", &url]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("Using a remote cached neff"),
        "{}",
        text(&o.stdout)
    );
    let log = std::fs::read_to_string(second.path().join("log-neuron-cc.txt")).unwrap();
    assert!(
        !log.contains("[job."),
        "a remote-cache hit ran a job:\n{log}"
    );
    let first_log = std::fs::read_to_string(first.path().join("log-neuron-cc.txt")).unwrap();
    assert!(first_log.contains("[job.HLOToTensorizer"), "{first_log}");
    assert_eq!(
        std::fs::read(first.path().join("model.neff")).unwrap(),
        std::fs::read(second.path().join("model.neff")).unwrap()
    );
    // A host that must never compile takes the remote action cache's hit as a hit, and refuses
    // a model neither cache has with the hit-only exit status, writing nothing.
    let hit_only = [
        "--remote-cache",
        url.as_str(),
        "--cache-mode",
        "hit-only",
        "--cache_dir",
        "cache",
    ];
    let third = Client::new();
    let o = compile_mlp(&third, &hit_only);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("Using a remote cached neff"),
        "{}",
        text(&o.stdout)
    );
    std::fs::write(
        third.path().join("changed.pb"),
        model_variant("hit-only", 1 << 16),
    )
    .unwrap();
    let o = third.run(
        &compile_args("changed.pb", "changed.neff", &hit_only),
        &[],
        LIMIT,
    );
    assert_eq!(
        o.status.code(),
        Some(69),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains("[NCC_EDRV115]"),
        "{}",
        text(&o.stderr)
    );
    assert!(!third.path().join("changed.neff").exists());
}

#[test]
fn a_failing_remote_compile_reports_its_stderr_and_is_not_cached() {
    let server = Server::start();
    let w = Worker::start(&server, "f", &[], &[]);
    let url = server.url();
    let c = Client::new();
    let env = [("NXCC_SIM_FAULT", "walrus_driver:stderr=remote-marker-line")];
    let args = compile_args("mlp.hlo_module.pb", "model.neff", &["--remote", &url]);
    let o = c.run(&args, &env, LIMIT);
    let err = said(&o);
    assert_eq!(o.status.code(), Some(70), "{err}");
    assert!(err.contains("remote-marker-line"), "{err}");
    assert!(
        err.contains("Child process job \"RemoteCompile\" exited abnormally!"),
        "{err}"
    );
    assert!(!c.path().join("model.neff").exists());
    let runs = tool_runs(&w);
    // Not in the action cache: the same compile runs again (and fails again).
    let o = c.run(&args, &env, LIMIT);
    assert_eq!(o.status.code(), Some(70));
    assert!(
        tool_runs(&w) > runs,
        "a failed compile was served from a cache"
    );

    // A crash of a tool: its F-code banner comes back in the remote stderr.
    let o = c.run(&args, &[("NXCC_SIM_FAULT", "walrus_driver:segv")], LIMIT);
    let err = said(&o);
    assert_eq!(o.status.code(), Some(70), "{err}");
    assert!(err.contains("[F139]"), "{err}");
}

#[test]
fn a_server_that_is_down_is_named_and_fails_at_once() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("grpc://127.0.0.1:{port}");
    let c = Client::new();
    let o = compile_mlp(&c, &["--remote", &url]);
    let err = said(&o);
    assert_eq!(o.status.code(), Some(70), "{err}");
    assert!(err.contains("NCC_EDRV130") && err.contains(&url), "{err}");
    assert!(!c.path().join("model.neff").exists());
    // A malformed address is a usage error, refused before anything runs.
    let o = compile_mlp(&c, &["--remote", "http://x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("expected grpc://HOST:PORT"),
        "{}",
        text(&o.stderr)
    );
    // The worker too.
    let o = c.run(
        &["worker", "--remote", &url, "--toolchain", "sim"],
        &[],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(70));
    assert!(text(&o.stderr).contains(&url), "{}", text(&o.stderr));
}

#[test]
fn a_non_compile_action_is_refused_by_the_worker() {
    use nxcc::remote::{cas::Blob, digest, re};
    let server = Server::start();
    let w = Worker::start(&server, "r", &[], &[]);
    let remote = server.remote();
    let platform =
        nxcc::remote::action::platform(&format!("nxcc-sim-{}", env!("CARGO_PKG_VERSION")));
    #[allow(deprecated)]
    let command = re::Command {
        arguments: vec![
            "sh".into(),
            "-c".into(),
            "touch /tmp/nxcc-should-not-exist".into(),
        ],
        platform: Some(platform.clone()),
        ..Default::default()
    };
    let root = re::Directory::default();
    let (cb, cd) = digest::of_message(&command);
    let (rb, rd) = digest::of_message(&root);
    let action = re::Action {
        command_digest: Some(cd.clone()),
        input_root_digest: Some(rd.clone()),
        platform: Some(platform),
        ..Default::default()
    };
    let (ab, ad) = digest::of_message(&action);
    remote
        .upload_missing(&[
            (cd, Blob::Bytes(cb)),
            (rd, Blob::Bytes(rb)),
            (ad.clone(), Blob::Bytes(ab)),
        ])
        .unwrap();
    let resp = remote.execute(&ad, true).unwrap();
    let st = resp.status.unwrap_or_default();
    assert_ne!(st.code, 0, "the worker ran a non-compile action");
    assert!(
        st.message.contains("only compile actions"),
        "{}",
        st.message
    );
    assert!(w.log().contains("refused"), "{}", w.log());
    assert!(w.records().is_empty());
}

#[test]
fn a_workers_memory_budget_holds_under_eight_leases() {
    let server = Server::start();
    // The estimate of each compile is the formula's ~320 MiB: 700M admits two at once.
    let w = Worker::start(
        &server,
        "m",
        &["--max-concurrent", "8", "--memory-budget", "700M"],
        &[("NXCC_SIM_WORK_MS", "hlo2penguin:300")],
    );
    let url = server.url();
    let c = Client::new();
    for i in 0..8 {
        std::fs::write(
            c.path().join(format!("g{i}.pb")),
            model_variant(&format!("budget-{i}"), 8),
        )
        .unwrap();
    }
    let children: Vec<_> = (0..8)
        .map(|i| {
            let m = format!("g{i}.pb");
            let out = format!("g{i}.neff");
            c.spawn(&compile_args(&m, &out, &["--remote", &url]))
        })
        .collect();
    for ch in children {
        let o = ch.wait_with_output().unwrap();
        assert!(o.status.success(), "{}\n{}", text(&o.stderr), w.log());
    }
    let log = w.log();
    let mut running_max = 0;
    let (mut held, mut held_max) = (0i32, 0i32);
    for line in log.lines() {
        if let Some(n) = line.split("started (running: ").nth(1) {
            running_max = running_max.max(n.trim_end_matches(')').parse::<usize>().unwrap());
        }
        if line.contains("waiting for memory") {
            held += 1;
            held_max = held_max.max(held);
        }
        if line.contains(" finished with exit status") {
            held -= 1;
        }
    }
    assert_eq!(
        log.matches(" finished with exit status 0").count(),
        8,
        "{log}"
    );
    assert!(
        running_max <= 2,
        "more compiles ran than the budget admits:\n{log}"
    );
    assert!(held_max > 2, "the worker never held more leases than it ran (the budget was not what limited it):\n{log}");
    let overlap = max_overlap(&compile_spans(&w.records(), |cwd| {
        // .../action-XXXX/neuronxcc-YYYY[/sg00]: the action's directory identifies the compile.
        cwd.split("/neuronxcc-").next().unwrap_or(cwd).to_string()
    }));
    assert!(overlap <= 2, "{overlap} compiles' tools overlapped in time");
}

#[test]
fn a_killed_worker_s_compile_finishes_on_another_worker() {
    let server = Server::start();
    // The first worker's compiles take long: it is killed while one runs.
    let mut slow = Worker::start(
        &server,
        "slow",
        &[],
        &[
            ("NXCC_SIM_WORK_MS", "hlo2penguin:60000"),
            ("NXCC_REMOTE_TEST_MARK", "slow-worker"),
        ],
    );
    let url = server.url();
    let c = Client::new();
    let client = c.spawn(&compile_args(
        "mlp.hlo_module.pb",
        "model.neff",
        &["--remote", &url, "-O1"],
    ));
    slow.wait_for("started (running: 1)", LIMIT);
    let fast = Worker::start(&server, "fast", &[], &[]);
    slow.kill();
    // The killed worker's compile (its own process group) is an orphan now: end it too.
    for pid in processes_with_env("NXCC_REMOTE_TEST_MARK", "slow-worker") {
        // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let o = client.wait_with_output().unwrap();
    assert!(o.status.success(), "{}\n{}", text(&o.stderr), fast.log());
    assert!(
        fast.log().contains("finished with exit status 0"),
        "{}",
        fast.log()
    );
    let v = std::process::Command::new(buildgrid::NXCC)
        .args(["neff-info", "--verify"])
        .arg(c.path().join("model.neff"))
        .output()
        .unwrap();
    assert!(v.status.success(), "{}", text(&v.stdout));
}

#[test]
fn sigterm_drains_a_worker_after_its_running_compile() {
    let server = Server::start();
    let mut w = Worker::start(
        &server,
        "d",
        &[],
        &[("NXCC_SIM_WORK_MS", "hlo2penguin:1500")],
    );
    let url = server.url();
    let c = Client::new();
    let client = c.spawn(&compile_args(
        "mlp.hlo_module.pb",
        "model.neff",
        &["--remote", &url, "-O1"],
    ));
    w.wait_for("started (running: 1)", LIMIT);
    let status = w.terminate(LIMIT);
    assert_eq!(status, Some(0), "{}", w.log());
    let log = w.log();
    assert!(
        log.contains("finished with exit status 0") && log.contains("drained"),
        "{log}"
    );
    let o = client.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn parallel_compile_remote_spreads_sixteen_models_over_two_workers() {
    let server = Server::start();
    let env = [("NXCC_SIM_WORK_MS", "hlo2penguin:150")];
    let a = Worker::start(&server, "pa", &["--max-concurrent", "2"], &env);
    let b = Worker::start(&server, "pb", &["--max-concurrent", "2"], &env);
    let c = Client::new();
    let graphs = c.path().join("graphs");
    std::fs::create_dir(&graphs).unwrap();
    for i in 0..16 {
        std::fs::write(
            graphs.join(format!("g{i:02}.pb")),
            model_variant(&format!("par-{i}"), 8),
        )
        .unwrap();
    }
    let url = server.url();
    let o = c.run(
        &[
            "parallel-compile",
            "graphs",
            "--output-dir",
            "out",
            "--jobs",
            "8",
            "--no_cache",
            "--remote",
            &url,
            "--",
            "--target",
            "trn2",
            "--toolchain",
            "sim",
        ],
        &[],
        Duration::from_secs(300),
    );
    assert!(
        o.status.success(),
        "{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    for i in 0..16 {
        assert!(c.path().join(format!("out/g{i:02}.neff")).is_file());
    }
    let (na, nb) = (
        a.log().matches("finished with exit status 0").count(),
        b.log().matches("finished with exit status 0").count(),
    );
    assert_eq!(na + nb, 16, "{}\n{}", a.log(), b.log());
    assert!(na > 0 && nb > 0, "one worker ran everything: {na} / {nb}");
}

#[test]
fn the_daemon_sends_its_compiles_to_the_remote_workers() {
    use std::os::unix::process::CommandExt;
    let server = Server::start();
    let w = Worker::start(&server, "dw", &[], &[]);
    let c = Client::new();
    let socket = c.path().join("d.sock");
    let log = std::fs::File::create(c.path().join("daemon.log")).unwrap();
    let mut daemon = c.nxcc(&["daemon", "--socket"]);
    daemon
        .arg(&socket)
        .arg("--cache_dir")
        .arg(c.path().join("daemon-cache"))
        .args(["--remote", &server.url()])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0);
    let mut child = daemon.spawn().unwrap();
    let t = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(t.elapsed() < LIMIT, "the daemon did not listen");
        assert!(child.try_wait().unwrap().is_none(), "the daemon exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let sock = socket.display().to_string();
    let o = c.run(
        &compile_args("mlp.hlo_module.pb", "model.neff", &["--daemon", "-O1"]),
        &[("NXCC_DAEMON_SOCKET", sock.as_str())],
        LIMIT,
    );
    // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
    assert!(
        o.status.success(),
        "{}\n{}",
        text(&o.stderr),
        std::fs::read_to_string(c.path().join("daemon.log")).unwrap_or_default()
    );
    assert!(c.path().join("model.neff").is_file());
    assert!(
        w.log().contains("finished with exit status 0"),
        "{}",
        w.log()
    );
}
