//! Many clients at once: every compile ends with its own right output, never more than
//! `--max-concurrent` run at a time, and the daemon's memory stays bounded.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use serde_json::json;

use crate::common::*;

/// Clients at once.
const CLIENTS: usize = 64;
/// `--max-concurrent`.
const MAX: usize = 4;
/// The bound on the daemon's peak resident memory (VmHWM), KiB: 100 MB.
const MEMORY_BOUND_KB: u64 = 100_000;

#[test]
fn sixty_four_clients_at_once() {
    let world = Arc::new(World::new());
    let daemon = Arc::new(Daemon::start(
        &world,
        "d",
        &["--max-concurrent", &MAX.to_string()],
        &[("NXCC_SIM_WORK_MS", "*:30")],
    ));
    // 64 different models, each in its own working directory.
    let mut dirs = Vec::new();
    for i in 0..CLIENTS {
        let wd = world.mkdir(&format!("clients/c{i:02}"));
        std::fs::write(wd.join(format!("m{i}.hlo")), distinct_model(i)).unwrap();
        dirs.push(wd);
    }
    let barrier = Arc::new(std::sync::Barrier::new(CLIENTS));
    let threads: Vec<_> = dirs
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, wd)| {
            let (daemon, barrier) = (daemon.clone(), barrier.clone());
            std::thread::spawn(move || {
                let model = format!("m{i}.hlo");
                barrier.wait();
                // Half through the original's route, half through the streaming one.
                if i % 2 == 0 {
                    let r = daemon.compile(
                        &wd,
                        &shell_join(&["compile", &model, "--target", "trn2", "--toolchain", "sim", "--output", "out.neff"]),
                    );
                    (r.status == 200, r.text())
                } else {
                    let (r, events) = daemon.v1(&json!({
                        "argv": [model, "--target", "trn2", "--toolchain", "sim", "--output", "out.neff"],
                        "working_directory": wd,
                    }));
                    let done = events.last().cloned().unwrap_or_default();
                    (r.status == 200 && done["exit_status"] == 0, r.text())
                }
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let (ok, text) = t.join().unwrap();
        assert!(ok, "client {i}: {text}");
    }
    // Each NEFF is its own model's.
    for (i, wd) in dirs.iter().enumerate() {
        assert_eq!(
            neff_first_input(&wd.join("out.neff")),
            format!("x{i}.1"),
            "client {i}"
        );
    }
    // Never more than MAX compiles at once: each compile's tools span an interval inside the
    // time it held its place; at no instant do more than MAX of those intervals overlap.
    let mut spans: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for r in world.records() {
        let cwd = r["cwd"].as_str().unwrap();
        let i = dirs
            .iter()
            .position(|d| cwd.starts_with(&format!("{}/", d.display())))
            .unwrap_or_else(|| panic!("a tool ran outside every working directory: {cwd}"));
        let (s, e) = (
            r["start_ms"].as_u64().unwrap(),
            r["end_ms"].as_u64().unwrap(),
        );
        let span = spans.entry(i).or_insert((s, e));
        span.0 = span.0.min(s);
        span.1 = span.1.max(e);
    }
    assert_eq!(spans.len(), CLIENTS, "every compile ran its tools");
    let mut edges: Vec<(u64, i32)> = spans
        .values()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    // At equal times, ends before starts.
    edges.sort();
    let (mut now, mut peak) = (0, 0);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    assert!(
        peak <= MAX as i32,
        "{peak} compiles overlapped (limit {MAX})"
    );
    assert!(
        peak >= 2,
        "the compiles did overlap (peak {peak}): the limit was exercised"
    );
    let hwm = vm_hwm_kb(daemon.pid());
    eprintln!(
        "{CLIENTS} clients: peak {peak} compiles at once (limit {MAX}); daemon VmHWM {hwm} KiB"
    );
    assert!(
        hwm < MEMORY_BOUND_KB,
        "the daemon's peak RSS is {hwm} KiB (bound {MEMORY_BOUND_KB})"
    );
    let status = daemon.status();
    assert_eq!(status["compiles"]["finished"], CLIENTS);
    assert_eq!(status["compiles"]["failed"], 0);
    assert_eq!(status["max_concurrent"], MAX);
}

#[test]
fn a_memory_budget_holds_compiles_back_and_status_shows_them() {
    let world = Arc::new(World::new());
    // Each compile is estimated by the formula over its graph (nothing learned: no cache): 320
    // MiB and a little more, so two do not fit in 400 MiB.
    let daemon = Arc::new(Daemon::start(
        &world,
        "d",
        &["--max-concurrent", "4", "--memory-budget", "400M"],
        &[("NXCC_SIM_WORK_MS", "walrus_driver:700")],
    ));
    let model = example_model();
    let size = std::fs::metadata(&model).unwrap().len();
    let graph = nxcc::hlo::read(&model).unwrap();
    // The formula written out: 320 MiB + 4 × file + 8 × (parameter + result bytes) + 16 KiB ×
    // instructions.
    let estimate = (320u64 << 20)
        + 4 * size
        + 8 * (graph.parameter_bytes() + graph.result_bytes())
        + (16 << 10) * graph.instruction_count as u64;
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (daemon, world) = (daemon.clone(), world.clone());
            let model = model.clone();
            std::thread::spawn(move || {
                let wd = world.mkdir(&format!("w{i}"));
                // Three identical compiles: without the cache each one runs.
                let argv = sim_argv(model.to_str().unwrap(), "o.neff", &["--no_cache"]);
                let r = daemon.compile(&wd, &shell_join(&argv));
                assert_eq!(r.status, 200, "{}", r.text());
            })
        })
        .collect();
    let mut seen_queue = false;
    wait_until(
        std::time::Duration::from_secs(30),
        "two compiles to queue",
        || {
            let s = daemon.status();
            assert!(s["running"].as_u64().unwrap() <= 1, "{s}");
            if s["running"] == 1 && s["queued"] == 2 {
                assert_eq!(s["memory"]["in_use"], estimate);
                assert_eq!(s["memory"]["budget"], 400u64 << 20);
                seen_queue = true;
            }
            seen_queue
        },
    );
    for t in threads {
        t.join().unwrap();
    }
    // One at a time: the walrus runs never overlap.
    let mut spans: Vec<(u64, u64)> = world
        .records()
        .iter()
        .filter(|r| r["tool"] == "walrus_driver")
        .map(|r| {
            (
                r["start_ms"].as_u64().unwrap(),
                r["end_ms"].as_u64().unwrap(),
            )
        })
        .collect();
    spans.sort();
    assert_eq!(spans.len(), 3);
    for w in spans.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "overlapping compiles under the budget: {spans:?}"
        );
    }
    assert_eq!(daemon.status()["memory"]["in_use"], 0);
}

/// The example model padded with `mib` MiB in a field the module does not define (a reader skips
/// it): the same graph, a larger file, so a larger estimate.
fn padded_model(dir: &std::path::Path, mib: usize) -> std::path::PathBuf {
    fn varint(mut n: usize, out: &mut Vec<u8>) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    let mut data = std::fs::read(example_model()).unwrap();
    let pad = vec![7u8; mib << 20];
    varint((1000 << 3) | 2, &mut data);
    varint(pad.len(), &mut data);
    data.extend_from_slice(&pad);
    let path = dir.join(format!("big{mib}.hlo_module.pb"));
    std::fs::write(&path, data).unwrap();
    path
}

#[test]
fn a_compile_that_fits_passes_a_larger_one_waiting_for_memory() {
    let world = Arc::new(World::new());
    // Estimates (the formula, no cache): the example ~320 MiB, the padded one ~416 MiB. In 780
    // MiB a small one fits beside a big one, two big ones do not.
    let daemon = Arc::new(Daemon::start(
        &world,
        "d",
        &[
            "--max-concurrent",
            "4",
            "--memory-budget",
            "780M",
            "--allow-test-env",
        ],
        &[],
    ));
    let big = padded_model(world.path(), 24);
    let small = example_model();
    let body = |model: &std::path::Path, wd: &std::path::Path, hang: bool| {
        let mut v = json!({
            "argv": [model, "--target", "trn2", "--toolchain", "sim", "--output", "o.neff", "--no_cache"],
            "working_directory": wd,
        });
        if hang {
            v["env"] = json!({"NXCC_SIM_FAULT": "walrus_driver:hang"});
        }
        v1_request(&v)
    };
    // A: big, and it runs until its client goes away.
    let mut a = daemon.connect();
    a.write_all(&body(&big, &world.mkdir("a"), true)).unwrap();
    wait_until(hang_guard(), "the first big compile to run", || {
        daemon.status()["running"] == 1
    });
    let big_estimate = daemon.status()["memory"]["in_use"].as_u64().unwrap();
    // B: big, waits for memory.
    let (d2, b_wd) = (daemon.clone(), world.mkdir("b"));
    let b_body = body(&big, &b_wd, false);
    let b = std::thread::spawn(move || d2.raw(&b_body));
    wait_until(hang_guard(), "the second big compile to queue", || {
        daemon.status()["queued"] == 1
    });
    // C: small, arrives last and fits beside A: it runs and ends while B still waits.
    let r = daemon.raw(&body(&small, &world.mkdir("c"), false));
    assert_eq!(r.status, 200);
    assert_eq!(r.events().last().unwrap()["exit_status"], 0, "{}", r.text());
    let s = daemon.status();
    assert_eq!(s["running"], 1, "{s}");
    assert_eq!(s["queued"], 1, "the big one still waits: {s}");
    assert_eq!(s["memory"]["in_use"], big_estimate, "{s}");
    // A's client goes away: A is cancelled, B fits and runs.
    drop(a);
    let r = b.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.events().last().unwrap()["exit_status"], 0, "{}", r.text());
    assert!(b_wd.join("o.neff").is_file());
}
