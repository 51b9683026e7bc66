//! `nxcc parallel-compile` over many inputs runs on a bounded set of threads: the inputs wait in
//! admission's queue, not each in a thread of its own.

mod common;

use std::time::Duration;

use common::{text, Scratch};

const INPUTS: usize = 2000;
const JOBS: usize = 4;
/// Beside its `--jobs` workers: the dispatcher (the main thread) and a few helpers.
const A_FEW: usize = 4;

/// The `Threads:` line of `/proc/<pid>/status`, while the process lives.
fn threads_of(pid: u32) -> Option<usize> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

#[test]
fn two_thousand_inputs_run_on_jobs_threads_and_a_few() {
    let s = Scratch::new();
    // One compile fills the cache; the batch's compiles are all hits (cheap: no worker, no tool),
    // so the batch is mostly waiting in the queue.
    let o = s.sim_run("trn2", &["--cache_dir", "cache", "--output", "first.neff"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::create_dir(s.join("graphs")).unwrap();
    for i in 0..INPUTS {
        std::fs::hard_link(
            s.join("mlp.hlo_module.pb"),
            s.join(&format!("graphs/g{i:04}.pb")),
        )
        .unwrap();
    }
    let jobs = JOBS.to_string();
    let mut child = s
        .parallel_cmd(
            &[
                "graphs",
                "--jobs",
                &jobs,
                "--cache_dir",
                "cache",
                "--output-dir",
                "out",
                "--report",
                "report.json",
            ],
            &[],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (mut most, mut samples) = (0usize, 0usize);
    let status = loop {
        if let Some(n) = threads_of(pid) {
            most = most.max(n);
            samples += 1;
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(status.success(), "{status:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["succeeded"], INPUTS, "{}", report["failed"]);
    let hits = report["compiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["cache"] == "hit")
        .count();
    assert_eq!(hits, INPUTS);
    assert!(samples > 0, "the batch was never seen running");
    eprintln!("{INPUTS} inputs, --jobs {JOBS}: at most {most} threads in {samples} samples");
    assert!(
        most <= JOBS + A_FEW,
        "{most} threads for {INPUTS} inputs and --jobs {JOBS}"
    );
}
