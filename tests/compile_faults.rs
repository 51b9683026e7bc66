//! Failures, for real: every subprocess job under every fault the simulated toolchain can inject
//! (`segv`, `abort`, `kill`, `exit=3`, `stderr=...`, `hang` with `--job-timeout`), interrupts
//! (SIGINT, SIGTERM, SIGHUP), and the worker or the supervisor itself killed. Each time: the
//! right message and banner, the right exit status, no file at `--output`, the work dir kept, and
//! no process of the compile left behind.

mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{processes_with_env, text, Scratch};

/// (job, tool, extra compile flags that schedule the job).
const SUBPROCESS_JOBS: &[(&str, &str, &[&str])] = &[
    ("HLOToTensorizer", "hlo2penguin", &[]),
    ("XLAInferGoldens", "xla_infergoldens", &[]),
    ("WalrusDriver", "walrus_driver", &[]),
    (
        "NeffWrapper",
        "hlo-neff-wrapper",
        &["--enable-internal-neff-wrapper"],
    ),
    (
        "Backend",
        "nn_executor",
        &["--enable-experimental-tensorized-scheduler"],
    ),
    (
        "Watchpoint",
        "watchpoint_insert",
        &[
            "--internal-compiler-debug-mode=all",
            "--pipeline",
            "compile",
            "Watchpoint",
        ],
    ),
];

fn fault_matrix_for(job: &str, tool: &str, extra: &[&str]) {
    for fault in [
        "segv",
        "abort",
        "kill",
        "exit=3",
        "stderr=the tool broke",
        "hang",
    ] {
        let s = Scratch::new();
        let mut args = vec![
            "compile",
            "mlp.hlo_module.pb",
            "--target",
            "trn1",
            "--toolchain",
            "sim",
            "--output",
            "out.neff",
        ];
        args.extend(extra);
        if fault == "hang" {
            args.extend(["--job-timeout", "1"]);
        }
        let started = Instant::now();
        let out = s
            .nxcc(&args)
            .env("NXCC_SIM_FAULT", format!("{tool}:{fault}"))
            .output()
            .unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let ctx = format!("{job} / {fault}:\n--- stdout\n{stdout}--- stderr\n{stderr}");
        assert_eq!(out.status.code(), Some(70), "{ctx}");
        let expected: &[&str] = match fault {
            "segv" => &["[F139] neuronx-cc terminated abnormally - Please open a support ticket at https://github.com/aws-neuron/aws-neuron-sdk/issues/new"],
            "abort" => &["[F134] neuronx-cc terminated abnormally - Please open a support ticket"],
            "kill" => &[
                "[F137] neuronx-cc was forcibly killed - This most commonly occurs due to insufficient system memory.",
                "Current memory usage for neuronxcc is ",
            ],
            "exit=3" => &["Exit status 3."],
            "hang" => &[],
            _ => &["the tool broke"],
        };
        if fault == "hang" {
            assert!(
                stderr.contains(&format!("[ERROR] Job {job} timed out after 1 s")),
                "{ctx}"
            );
            assert!(started.elapsed() < Duration::from_secs(20), "{ctx}");
        } else {
            assert!(
                stderr.contains(&format!(
                    "[ERROR] Child process job \"{job}\" exited abnormally!"
                )),
                "{ctx}"
            );
        }
        for e in expected {
            assert!(stderr.contains(e), "missing {e:?} in {ctx}");
        }
        assert!(
            !s.join("out.neff").exists(),
            "{ctx}: a file was left at --output"
        );
        assert!(!s.join("out.wrapped.hlo.pb").exists(), "{ctx}");
        let kept = s.work_dirs();
        assert_eq!(kept.len(), 1, "{ctx}: the work dir is kept after a failure");
        assert!(
            stdout.contains(&format!("Artifacts stored in: {}", kept[0].display())),
            "{ctx}"
        );
        assert!(
            stdout.contains("Diagnostic logs stored in ") && stdout.contains("log-neuron-cc.txt"),
            "{ctx}"
        );
        assert!(!stderr.contains("panicked"), "{ctx}");
    }
}

#[test]
fn faults_in_hlo2penguin() {
    fault_matrix_for(
        SUBPROCESS_JOBS[0].0,
        SUBPROCESS_JOBS[0].1,
        SUBPROCESS_JOBS[0].2,
    );
}

#[test]
fn faults_in_xla_infergoldens() {
    fault_matrix_for(
        SUBPROCESS_JOBS[1].0,
        SUBPROCESS_JOBS[1].1,
        SUBPROCESS_JOBS[1].2,
    );
}

#[test]
fn faults_in_walrus_driver() {
    fault_matrix_for(
        SUBPROCESS_JOBS[2].0,
        SUBPROCESS_JOBS[2].1,
        SUBPROCESS_JOBS[2].2,
    );
}

#[test]
fn faults_in_hlo_neff_wrapper() {
    fault_matrix_for(
        SUBPROCESS_JOBS[3].0,
        SUBPROCESS_JOBS[3].1,
        SUBPROCESS_JOBS[3].2,
    );
}

#[test]
fn faults_in_nn_executor_through_bash() {
    fault_matrix_for(
        SUBPROCESS_JOBS[4].0,
        SUBPROCESS_JOBS[4].1,
        SUBPROCESS_JOBS[4].2,
    );
}

#[test]
fn faults_in_watchpoint_insert() {
    fault_matrix_for(
        SUBPROCESS_JOBS[5].0,
        SUBPROCESS_JOBS[5].1,
        SUBPROCESS_JOBS[5].2,
    );
}

/// Start a compile whose walrus_driver runs long, tagged with a unique marker; wait until the tool
/// is running. The caller waits for the returned child.
#[allow(clippy::zombie_processes)]
fn start_long_compile(s: &Scratch, marker: &str) -> Child {
    let mut child = s
        .sim_cmd("trn1", &["--output", "out.neff"])
        .env("NXCC_SIM_WORK_MS", "walrus_driver:60000")
        .env("NXCC_TEST_MARK", marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let running = processes_with_env("NXCC_TEST_MARK", marker)
            .into_iter()
            .any(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains("walrus_driver"))
                    .unwrap_or(false)
            });
        if running {
            return child;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("walrus_driver never started");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn marker(name: &str) -> String {
    format!("{name}-{}-{:?}", std::process::id(), Instant::now())
}

fn wait_with_deadline(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < deadline, "nxcc did not exit in {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_nothing_left(marker: &str, since: Instant) {
    loop {
        let left = processes_with_env("NXCC_TEST_MARK", marker);
        if left.is_empty() {
            return;
        }
        assert!(
            since.elapsed() < Duration::from_secs(6),
            "processes of the compile remain 6 s later: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn interrupt(sig: i32, expected: i32) {
    let s = Scratch::new();
    let m = marker(&format!("sig{sig}"));
    let mut child = start_long_compile(&s, &m);
    let sent = Instant::now();
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(child.id() as i32, sig) };
    let status = wait_with_deadline(&mut child, Duration::from_secs(8));
    assert_eq!(status.code(), Some(expected));
    assert_nothing_left(&m, sent);
    assert!(!s.join("out.neff").exists());
    let partials: Vec<_> = std::fs::read_dir(s.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("nxcc-partial"))
        .collect();
    assert!(partials.is_empty());
    assert_eq!(
        s.work_dirs().len(),
        1,
        "the work dir is kept after an interrupt"
    );
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("Compilation interrupted by"), "{err}");
}

#[test]
fn sigint_exits_130_and_leaves_nothing_behind() {
    interrupt(libc::SIGINT, 130);
}

#[test]
fn sigterm_exits_143_and_leaves_nothing_behind() {
    interrupt(libc::SIGTERM, 143);
}

#[test]
fn sighup_exits_143() {
    interrupt(libc::SIGHUP, 143);
}

/// The worker of a compile started by [`start_long_compile`]: the supervisor's child (the tools
/// are the worker's children).
fn worker_of(child: &Child, marker: &str) -> u32 {
    let supervisor = child.id().to_string();
    processes_with_env("NXCC_TEST_MARK", marker)
        .into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|st| {
                    st.rsplit_once(')')
                        .and_then(|(_, r)| r.split_whitespace().nth(1).map(|p| p == supervisor))
                        .unwrap_or(false)
                })
                .unwrap_or(false)
        })
        .expect("the worker process")
}

#[test]
fn a_killed_worker_is_reported_as_f137() {
    let s = Scratch::new();
    let m = marker("worker");
    let mut child = start_long_compile(&s, &m);
    let worker = worker_of(&child, &m);
    let sent = Instant::now();
    // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
    unsafe { libc::kill(worker as i32, libc::SIGKILL) };
    let status = wait_with_deadline(&mut child, Duration::from_secs(8));
    assert_eq!(status.code(), Some(70));
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(
        err.contains("[F137] neuronx-cc was forcibly killed"),
        "{err}"
    );
    assert!(
        err.contains("Current memory usage for neuronxcc is "),
        "{err}"
    );
    assert_nothing_left(&m, sent);
}

#[test]
fn a_killed_supervisor_takes_the_whole_compile_with_it() {
    let s = Scratch::new();
    let m = marker("supervisor");
    let mut child = start_long_compile(&s, &m);
    let sent = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_nothing_left(&m, sent);
}

/// `nxcc compile ... --pipeline HLOToTensorizer` with a toolchain whose `hlo2penguin` is the
/// shell `script`, tagged with `marker`.
fn hlo2penguin_command(s: &Scratch, marker: &str, script: &str) -> std::process::Command {
    use std::os::unix::fs::PermissionsExt;
    let tc = s.join("tc");
    std::fs::create_dir_all(&tc).unwrap();
    std::fs::write(tc.join("hlo2penguin"), format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(
        tc.join("hlo2penguin"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let mut c = s.nxcc(&[
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn1",
        "--toolchain",
        tc.to_str().unwrap(),
        "--pipeline",
        "HLOToTensorizer",
    ]);
    c.env("NXCC_TEST_MARK", marker);
    c
}

/// [`hlo2penguin_command`], run to completion.
fn hlo2penguin_compile(s: &Scratch, marker: &str, script: &str) -> std::process::Output {
    hlo2penguin_command(s, marker, script).output().unwrap()
}

#[test]
fn a_tool_that_leaves_background_processes_behind_does_not_leave_them_running() {
    let s = Scratch::new();
    // A tool that escapes its process group and its session, then exits successfully.
    let m = marker("strays");
    let out = hlo2penguin_compile(
        &s,
        &m,
        "(setsid sleep 1000 >/dev/null 2>&1 &)\nsleep 1000 >/dev/null 2>&1 &\ntouch penguin.py\nexit 0",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_nothing_left(&m, Instant::now());
    assert!(
        processes_with_env("NXCC_TEST_MARK", &m).is_empty(),
        "background processes survived the compile"
    );
}

#[test]
fn a_killed_supervisor_takes_a_tools_escaped_grandchildren_with_it() {
    let s = Scratch::new();
    // A tool that leaves one process in a new session, one in its group, says it is running,
    // and keeps running.
    let ready = s.join("ready");
    let m = marker("grandchildren");
    let script = format!(
        "(setsid sleep 1000 >/dev/null 2>&1 &)\nsleep 1000 >/dev/null 2>&1 &\ntouch '{}'\nexec sleep 1000",
        ready.display()
    );
    let mut child = hlo2penguin_command(&s, &m, &script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the tool never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The tool, its two background processes and the worker are running.
    assert!(processes_with_env("NXCC_TEST_MARK", &m).len() >= 4);
    let sent = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_nothing_left(&m, sent);
}

#[test]
fn every_kind_of_worker_death_ends_with_its_banner_or_a_line_naming_the_signal() {
    for (sig, expected) in [
        (libc::SIGSEGV, "[F139] neuronx-cc terminated abnormally"),
        (libc::SIGABRT, "[F134] neuronx-cc terminated abnormally"),
        (
            libc::SIGTERM,
            "[ERROR] Compilation interrupted by SIGTERM sent to its worker (pid ",
        ),
        (
            libc::SIGINT,
            "[ERROR] Compilation interrupted by SIGINT sent to its worker (pid ",
        ),
    ] {
        let s = Scratch::new();
        let m = marker(&format!("worker-sig{sig}"));
        let mut child = start_long_compile(&s, &m);
        let worker = worker_of(&child, &m);
        let sent = Instant::now();
        // Once: the signal must not be swallowed.
        // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
        unsafe { libc::kill(worker as i32, sig) };
        let status = wait_with_deadline(&mut child, Duration::from_secs(15));
        assert_eq!(status.code(), Some(70), "signal {sig}");
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert!(err.contains(expected), "signal {sig}: {err}");
        assert_nothing_left(&m, sent);
        assert!(!s.join("out.neff").exists());
    }
}
