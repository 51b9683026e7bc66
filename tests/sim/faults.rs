//! Fault and cost injection, observed from outside: real signals, exit statuses, stderr text,
//! hangs, `@first`, the invocation record, memory and CPU use.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

fn penguin_fixture(model: &[u8]) -> (Fixture, Vec<String>) {
    let fx = Fixture::new(&ModelSpec::File("m.hlo", model.to_vec()));
    let plan = fx.plan(&["--pipeline", "HLOToTensorizer"]);
    let argv = argv_of(&plan, "HLOToTensorizer");
    (fx, argv)
}

/// No core files from the signals these tests raise on purpose.
fn no_core(c: &mut Command) -> &mut Command {
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            let zero = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &zero);
            Ok(())
        })
    }
}

/// Wait for a child with `wait4`, returning its wait status and resource usage.
fn wait4(child: std::process::Child) -> (std::process::ExitStatus, libc::rusage) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, into a status and a rusage we own.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid);
    (std::process::ExitStatus::from_raw(status), usage)
}

fn records(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

#[test]
fn signal_faults_really_kill_the_tool_after_recording() {
    for (fault, signal) in [
        ("segv", libc::SIGSEGV),
        ("abort", libc::SIGABRT),
        ("kill", libc::SIGKILL),
    ] {
        let (fx, argv) = penguin_fixture(&tiny_hlo());
        let rec = fx.dir.path().join("rec.jsonl");
        let out = no_core(
            fx.command(&argv, ".")
                .env("NXCC_SIM_FAULT", format!("hlo2penguin:{fault}"))
                .env("NXCC_SIM_RECORD", &rec),
        )
        .output()
        .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(signal),
            "{fault}: {:?}",
            out.status
        );
        assert!(!fx.work.join("penguin.py").exists());
        let r = records(&rec);
        assert_eq!(r.len(), 1, "{fault}");
        assert_eq!(r[0]["tool"], "hlo2penguin");
    }
}

#[test]
fn exit_and_stderr_faults() {
    let (fx, argv) = penguin_fixture(&tiny_hlo());
    let out = fx
        .command(&argv, ".")
        .env("NXCC_SIM_FAULT", "hlo2penguin:exit=7")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let out = fx
        .command(&argv, ".")
        .env(
            "NXCC_SIM_FAULT",
            "*:stderr=Internal tensorizer error: boom, at op 3",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), "Internal tensorizer error: boom, at op 3\n");
    assert!(!fx.work.join("penguin.py").exists());
    // A fault aimed at another tool leaves this one alone.
    let out = fx
        .command(&argv, ".")
        .env("NXCC_SIM_FAULT", "walrus_driver:segv")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(fx.work.join("penguin.py").is_file());
    // A malformed setting is an error, not silently ignored.
    let out = fx
        .command(&argv, ".")
        .env("NXCC_SIM_FAULT", "hlo2pengiun:segv")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown tool \"hlo2pengiun\""));
}

#[test]
fn hang_hangs_until_killed() {
    let (fx, argv) = penguin_fixture(&tiny_hlo());
    let mut child = fx
        .command(&argv, ".")
        .env("NXCC_SIM_FAULT", "hlo2penguin:hang")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // It reaches its hang — asleep in the kernel (`nanosleep`, `clock_nanosleep`) — and stays.
    let pid = child.id();
    let asleep = || {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<i64>().ok())
            .is_some_and(|n| n == libc::SYS_nanosleep || n == libc::SYS_clock_nanosleep)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !asleep() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the hanging tool exited"
        );
        assert!(std::time::Instant::now() < deadline, "the tool never hung");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(child.try_wait().unwrap().is_none());
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(!fx.work.join("penguin.py").exists());
}

#[test]
fn first_applies_once_per_model() {
    let (fx, argv) = penguin_fixture(&tiny_hlo());
    let run = |fx: &Fixture, argv: &[String]| {
        fx.command(argv, ".")
            .env("NXCC_SIM_FAULT", "hlo2penguin:exit=9@first")
            .env("NXCC_SIM_STATE", fx.dir.path().join("shared-state"))
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(run(&fx, &argv), Some(9));
    assert!(!fx.work.join("penguin.py").exists());
    assert_eq!(run(&fx, &argv), Some(0));
    assert_eq!(run(&fx, &argv), Some(0));
    assert!(fx.work.join("penguin.py").is_file());
    // Another model (same state directory): its first run fails again.
    let mut other = tiny_hlo();
    other.extend_from_slice(b"\n// another model\n");
    let other_model = fx.launch.join("other.hlo");
    std::fs::write(&other_model, other).unwrap();
    let model = fx.model.display().to_string();
    let argv2: Vec<String> = argv
        .iter()
        .map(|a| {
            if *a == model {
                other_model.display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    assert_eq!(run(&fx, &argv2), Some(9));
    assert_eq!(run(&fx, &argv2), Some(0));
}

#[test]
fn the_record_has_one_json_line_per_invocation_even_concurrently() {
    let (fx, argv) = penguin_fixture(&tiny_hlo());
    let rec = fx.dir.path().join("rec.jsonl");
    let children: Vec<_> = (0..6)
        .map(|_| {
            fx.command(&argv, ".")
                .env("NXCC_SIM_RECORD", &rec)
                .env("NXCC_SIM_WORK_MS", "hlo2penguin:50")
                .spawn()
                .unwrap()
        })
        .collect();
    let mut pids = Vec::new();
    for mut c in children {
        pids.push(c.id() as u64);
        assert!(c.wait().unwrap().success());
    }
    let r = records(&rec);
    assert_eq!(r.len(), 6);
    let mut seen: Vec<u64> = r.iter().map(|l| l["pid"].as_u64().unwrap()).collect();
    seen.sort();
    pids.sort();
    assert_eq!(seen, pids);
    for l in &r {
        assert_eq!(l["tool"], "hlo2penguin");
        assert_eq!(l["argv"], serde_json::json!(argv));
        assert_eq!(l["cwd"], fx.work.display().to_string());
        let (s, e) = (
            l["start_ms"].as_u64().unwrap(),
            l["end_ms"].as_u64().unwrap(),
        );
        assert!(e >= s + 50, "{l}");
    }
}

#[test]
fn rss_raises_the_childs_peak_memory() {
    let (fx, argv) = penguin_fixture(&tiny_hlo());
    let peak_kib = |rss: Option<&str>| {
        let mut c = fx.command(&argv, ".");
        if let Some(v) = rss {
            c.env("NXCC_SIM_RSS_MB", v);
        }
        let child = c.spawn().unwrap();
        let (status, usage) = wait4(child);
        assert!(status.success());
        usage.ru_maxrss
    };
    let base = peak_kib(None);
    let with = peak_kib(Some("hlo2penguin:64"));
    assert!(with >= 64 * 1024, "peak {with} KiB");
    assert!(base < 48 * 1024, "baseline peak {base} KiB");
}

#[test]
fn work_ms_spends_cpu_time() {
    let (fx, argv) = penguin_fixture(&tiny_hlo());
    let t = Instant::now();
    let child = fx
        .command(&argv, ".")
        .env("NXCC_SIM_WORK_MS", "*:400")
        .spawn()
        .unwrap();
    let (status, usage) = wait4(child);
    assert!(status.success());
    assert!(t.elapsed() >= Duration::from_millis(400));
    let cpu_ms = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000
        + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000;
    assert!(cpu_ms >= 150, "only {cpu_ms} ms of CPU");
}

#[test]
fn work_per_mib_scales_with_the_model() {
    let cpu_ms = |model: &[u8], per_mb: &str| {
        let (fx, argv) = penguin_fixture(model);
        let child = fx
            .command(&argv, ".")
            .env("NXCC_SIM_WORK_MS_PER_MB", per_mb)
            .spawn()
            .unwrap();
        let (status, usage) = wait4(child);
        assert!(status.success());
        (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000
            + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000
    };
    let mut big = tiny_hlo();
    big.resize(big.len() + (3 << 20), b' ');
    // What reading the 3 MiB model costs the tool by itself (more on a loaded machine).
    let base = cpu_ms(&big, "hlo2penguin:0");
    // 3 MiB at 100 ms per MiB: about 300 ms more; the tiny model costs (almost) nothing more.
    let spent = cpu_ms(&big, "hlo2penguin:100");
    assert!(
        spent >= base + 200,
        "only {spent} ms of CPU for 3 MiB ({base} ms without the setting)"
    );
    let small = cpu_ms(&tiny_hlo(), "hlo2penguin:100");
    assert!(small < base + 100, "{small} ms of CPU for a tiny model");
    // Another tool's setting does not apply.
    let other = cpu_ms(&big, "walrus_driver:100");
    assert!(
        other < base + 150,
        "{other} ms of CPU ({base} ms without the setting)"
    );
}

/// A host process for the library: loads `libwalrus.so` and calls `run_backend_driver` with the
/// argv given, exiting with what it returns.
const LIB_HOST: &str = r#"
import ctypes, json, os, sys
lib = ctypes.CDLL(os.environ["NXCC_SIM_TEST_LIB_HOST"])
argv = [a.encode() for a in json.loads(os.environ["NXCC_SIM_TEST_LIB_ARGV"])]
array = (ctypes.c_char_p * (len(argv) + 1))(*argv, None)
sys.exit(lib.run_backend_driver(len(argv), array))
"#;

/// The library entry point under injected faults: a child process (python3, through `ctypes`)
/// loads `libwalrus.so` and calls `run_backend_driver`.
#[test]
fn faults_apply_in_the_library_and_end_the_host() {
    let fx = Fixture::new(&ModelSpec::File("tiny.hlo", tiny_hlo()));
    let plan = fx.plan(&["--pipeline", "HLOToTensorizer", "Frontend"]);
    run_plan(&fx, &plan);
    let bir = fx.work.join("sg00/bir.json").display().to_string();
    let argv = serde_json::json!(["walrus_driver", bir, "--pass", "unroll,post_sched"]).to_string();
    let host = |fault: &str| {
        let mut c = Command::new("python3");
        c.args(["-c", LIB_HOST])
            .env(
                "NXCC_SIM_TEST_LIB_HOST",
                fx.toolchain.join("lib/libwalrus.so"),
            )
            .env("NXCC_SIM_TEST_LIB_ARGV", &argv)
            .env("NXCC_SIM_FAULT", fault)
            .env("NXCC_SIM_STATE", &fx.state)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        no_core(&mut c).status().unwrap()
    };
    assert_eq!(host("walrus_driver:segv").signal(), Some(libc::SIGSEGV));
    assert_eq!(host("walrus_driver:kill").signal(), Some(libc::SIGKILL));
    assert_eq!(host("walrus_driver:exit=7").code(), Some(7));
    assert!(!fx.work.join("sg00/def.json").exists());
    assert_eq!(host("hlo2penguin:exit=7").code(), Some(0));
    assert!(fx.work.join("sg00/def.json").is_file());
}
