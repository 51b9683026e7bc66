//! A fleet across hosts: network namespaces the test makes — a server host, three worker hosts
//! and a client host, each with its own address on a bridge in 198.18.0.0/24 (the benchmarking
//! range) in a namespace of its own, and no route anywhere else — running
//! `parallel-compile --remote` over 24 models while one worker host is killed mid-action, another
//! is frozen (SIGSTOP: its lease expires and the action runs elsewhere) and the server is
//! restarted (its queue and CAS lost). Where namespaces cannot be made, the test fails saying
//! why.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::buildgrid::{model_variant, text, wait_limited, Client, Launch, Server, Worker};
use crate::common::netns::Net;

const LIMIT: Duration = Duration::from_secs(240);

/// The hosts, in address order (198.18.0.1, .2, ...).
const HOSTS: [&str; 5] = ["server", "w1", "w2", "w3", "client"];

/// The ids of the leases a worker's log says started and did not finish.
fn running_leases(log: &str) -> BTreeSet<String> {
    let id = |l: &str, after: &str| {
        l.split(after)
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .map(str::to_string)
    };
    let mut running = BTreeSet::new();
    for l in log.lines() {
        if l.contains(" started (running: ") {
            running.extend(id(l, ": lease "));
        }
        if l.contains(" finished with exit status") {
            if let Some(i) = id(l, ": lease ") {
                running.remove(&i);
            }
        }
    }
    running
}

/// Freeze the worker host `host` (SIGSTOP) while it runs an action: once its log shows a lease
/// running, the host is stopped and its log — which a stopped host no longer writes — read
/// again; if every lease it showed finished meanwhile, the host goes on and the test waits for
/// the next. The leases it holds, frozen mid-action.
fn freeze_mid_action(
    fleet: &Net,
    host: &str,
    log: impl Fn() -> String,
    logs: impl Fn() -> String,
) -> BTreeSet<String> {
    loop {
        until(
            &format!("{host} runs an action"),
            || !running_leases(&log()).is_empty(),
            &logs,
        );
        fleet.signal(host, libc::SIGSTOP);
        let running = running_leases(&log());
        if !running.is_empty() {
            return running;
        }
        fleet.signal(host, libc::SIGCONT);
    }
}

/// Wait until `what` holds (a failure naming it after [`LIMIT`]).
fn until(what: &str, mut cond: impl FnMut() -> bool, context: &dyn Fn() -> String) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < LIMIT, "never: {what}\n{}", context());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each model compiled here the reference way (to model.neff), on a thread of its own.
fn compile_references(models: Vec<Vec<u8>>) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    std::thread::spawn(move || {
        models
            .iter()
            .map(|m| {
                let local = Client::new();
                std::fs::write(local.path().join("m.pb"), m).unwrap();
                let o = local.run(
                    &[
                        "compile",
                        "m.pb",
                        "--target",
                        "trn2",
                        "--toolchain",
                        "sim",
                        "--output",
                        "model.neff",
                    ],
                    &[],
                    LIMIT,
                );
                assert!(o.status.success(), "{}", text(&o.stderr));
                std::fs::read(local.path().join("model.neff")).unwrap()
            })
            .collect::<Vec<_>>()
    })
}

/// Each output is its local compile's NEFF, downloaded exactly once.
fn check_outputs(dir: &std::path::Path, references: &[Vec<u8>]) {
    for (i, reference) in references.iter().enumerate() {
        let got = std::fs::read(dir.join(format!("out/g{i:02}.neff")))
            .unwrap_or_else(|e| panic!("g{i:02}.neff was lost: {e}"));
        assert!(
            &got == reference,
            "g{i:02}.neff differs from its local compile"
        );
        let log = std::fs::read_to_string(dir.join(format!("out/g{i:02}.log"))).unwrap();
        assert_eq!(
            log.matches("Downloaded the NEFF").count(),
            1,
            "g{i:02}.neff was not written exactly once:\n{log}"
        );
    }
}

#[test]
fn a_fleet_across_hosts_survives_a_killed_worker_a_frozen_one_and_a_server_restart() {
    let fleet = match Net::make(&HOSTS) {
        Ok(f) => f,
        Err(why) => panic!(
            "the fleet test cannot run here (it needs root, iproute2 and network namespaces): {why}"
        ),
    };
    // The models, and each compiled here the reference way (to model.neff), meanwhile.
    let c = Client::new();
    let graphs = c.path().join("graphs");
    std::fs::create_dir(&graphs).unwrap();
    let models: Vec<Vec<u8>> = (0..24)
        .map(|i| model_variant(&format!("fleet-{i}"), 8))
        .collect();
    for (i, m) in models.iter().enumerate() {
        std::fs::write(graphs.join(format!("g{i:02}.pb")), m).unwrap();
    }
    let references = compile_references(models.clone());

    let mut server = Server::launch(Launch {
        host: Some(fleet.address("server")),
        port: Some(50061),
        netns: Some(fleet.ns("server")),
        ..Default::default()
    });
    let url = server.url();
    let slots = ["--max-concurrent", "2"];
    let w1 = Worker::start_in(Some(&fleet.ns("w1")), &url, "w1", &slots, &[]);
    let w2 = Worker::start_in(Some(&fleet.ns("w2")), &url, "w2", &slots, &[]);
    let w3 = Worker::start_in(Some(&fleet.ns("w3")), &url, "w3", &slots, &[]);
    let logs = || format!("w1:\n{}\nw2:\n{}\nw3:\n{}", w1.log(), w2.log(), w3.log());

    let mut cmd = c.nxcc_in(
        Some(&fleet.ns("client")),
        &[
            "parallel-compile",
            "graphs",
            "--output-dir",
            "out",
            "--jobs",
            "24",
            "--no_cache",
            "--remote",
            &url,
            "--",
            "--target",
            "trn2",
            "--toolchain",
            "sim",
        ],
    );
    cmd.env("NXCC_SIM_WAIT_MS", "hlo2penguin:2000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut client = cmd.spawn().unwrap();

    // A worker host dies mid-action (frozen first, so that what it holds is known for sure);
    // another freezes mid-action.
    let lost = freeze_mid_action(&fleet, "w1", || w1.log(), logs);
    fleet.signal("w1", libc::SIGKILL);
    let frozen = freeze_mid_action(&fleet, "w2", || w2.log(), logs);
    // Their leases expire; the actions run on w3.
    for id in lost.iter().chain(&frozen) {
        let done = format!("lease {id} finished with exit status 0");
        until(
            &format!("lease {id} completes on w3"),
            || w3.log().contains(&done),
            &logs,
        );
    }
    fleet.signal("w2", libc::SIGCONT);

    // The server restarts while compiles are under way; the client's retries carry them.
    assert!(
        client.try_wait().unwrap().is_none(),
        "the compiles ended before the server restart"
    );
    server.restart();
    let o = wait_limited(client, LIMIT);
    assert!(
        o.status.success(),
        "{}\n{}\n{}\nserver:\n{}",
        text(&o.stdout),
        text(&o.stderr),
        logs(),
        server.log()
    );
    check_outputs(c.path(), &references.join().unwrap());
    let leftovers: Vec<_> = std::fs::read_dir(c.path().join("out"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
