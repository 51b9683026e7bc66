//! The process toolbox's tests: real children, real signals.

use super::*;
use rustix::process::Pid;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Environment variable selecting what [`helper_process`] does in a re-executed test binary.
const HELPER_ENV: &str = "NXCC_TEST_PROCESS_HELPER";
const HELPER_TEST: &str = "run::process::tests::helper_process";

/// Whether `pid` has ended: no `/proc` entry, or a zombie nobody has reaped yet (the
/// container's init may not reap re-parented orphans).
pub(crate) fn is_dead(pid: u32) -> bool {
    crate::run::os::ProcStat::read(pid).is_none_or(|s| matches!(s.state, 'Z' | 'X'))
}

/// Wait up to `limit` for `pid` to end.
pub(crate) fn dies_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if is_dead(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kill a stray test process (cleanup after a failed assertion).
fn kill_stray(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
}

fn sh(script: &str) -> Spec {
    Spec::new("/bin/sh", "/").args(["-c", script])
}

struct Captured {
    outcome: Outcome,
    stdout: Vec<String>,
    stderr: Vec<String>,
}

fn capture(spec: &Spec, cancel: &Cancel) -> Captured {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let outcome = run(
        spec,
        &mut |stream, line| match stream {
            Stream::Stdout => stdout.push(line.to_string()),
            Stream::Stderr => stderr.push(line.to_string()),
        },
        cancel,
    )
    .expect("run");
    Captured {
        outcome,
        stdout,
        stderr,
    }
}

fn run_sh(script: &str) -> Captured {
    capture(&sh(script), &Cancel::new())
}

/// Not a test of its own: the body of the child processes the tests below start by
/// re-executing this test binary with [`HELPER_ENV`] set. Without the variable it does
/// nothing.
#[test]
#[ignore = "a helper: the tests run it in a child process (with --ignored)"]
fn helper_process() {
    let Ok(mode) = std::env::var(HELPER_ENV) else {
        panic!("run only as a child of this module's tests, with {HELPER_ENV} set");
    };
    match mode.as_str() {
        // A parent supervising `sleep 100` from a thread; it prints the sleep's pid and is
        // then SIGKILLed by the test.
        "PARENT" => {
            let supervisor = std::thread::spawn(|| {
                let spec = sh("echo $$; exec sleep 100");
                run(
                    &spec,
                    &mut |_, line| {
                        println!("PID {line}");
                        let _ = io::stdout().flush();
                    },
                    &Cancel::new(),
                )
            });
            let _ = supervisor.join();
        }
        other => panic!("unknown helper mode {other}"),
    }
}

#[test]
fn exit_status_is_reported() {
    let failed = run_sh("exit 3").outcome;
    assert_eq!(failed.termination(), Termination::Exited(3));
    assert!(!failed.termination().success());
    assert_eq!(failed.termination().exit_status_like_shell(), 3);
    assert_eq!(failed.termination().signal_name(), None);
    assert_eq!(failed.end, End::Exited(3));
    assert!(failed.pid > 0);

    let ok = run_sh("exit 0").outcome;
    assert!(ok.termination().success());
    assert_eq!(ok.termination().to_string(), "exit status 0");
}

#[test]
fn death_by_signal_is_reported_like_a_shell() {
    for (name, sig, shell_status) in [
        ("SEGV", libc::SIGSEGV, 139),
        ("ABRT", libc::SIGABRT, 134),
        ("KILL", libc::SIGKILL, 137),
    ] {
        let outcome = run_sh(&format!("ulimit -c 0; kill -s {name} $$")).outcome;
        assert_eq!(outcome.termination(), Termination::Signaled(sig), "{name}");
        assert_eq!(outcome.termination().exit_status_like_shell(), shell_status);
        assert_eq!(
            outcome.termination().signal_name(),
            Some(format!("SIG{name}").as_str())
        );
        assert!(!outcome.termination().success());
    }
    assert_eq!(
        Termination::Signaled(libc::SIGSEGV).to_string(),
        "signal 11 (SIGSEGV)"
    );
}

#[test]
fn lines_are_delivered_in_order_per_stream() {
    let captured =
        run_sh("printf 'a\\nb\\n'; printf 'x\\n' >&2; printf 'c\\r\\n\\nd'; printf 'y\\nz' >&2");
    assert_eq!(captured.stdout, ["a", "b", "c", "", "d"]);
    assert_eq!(captured.stderr, ["x", "y", "z"]);
    assert_eq!(captured.outcome.stderr_tail, ["x", "y", "z"]);
    assert!(captured.outcome.termination().success());
}

#[test]
fn invalid_utf8_is_decoded_lossily() {
    let captured = run_sh("printf '\\377\\376ok\\n\\303\\251t\\303\\251\\n'");
    assert_eq!(captured.stdout, ["\u{fffd}\u{fffd}ok", "été"]);
}

#[test]
fn the_stderr_tail_keeps_the_last_50_lines() {
    let captured = run_sh("i=1; while [ $i -le 120 ]; do echo line$i >&2; i=$((i+1)); done");
    assert_eq!(captured.stderr.len(), 120);
    let expected: Vec<String> = (71..=120).map(|i| format!("line{i}")).collect();
    assert_eq!(captured.outcome.stderr_tail, expected);
}

#[test]
fn large_output_arrives_complete() {
    // More than a pipe buffer on each stream, interleaved.
    let captured =
        run_sh("i=0; while [ $i -lt 5000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done");
    assert_eq!(captured.stdout.len(), 5000);
    assert_eq!(captured.stderr.len(), 5000);
    assert_eq!(captured.stdout[4999], "out4999");
    assert_eq!(captured.stderr[1234], "err1234");
}

#[test]
fn peak_memory_and_cpu_time_are_measured() {
    let spec = Spec::new("python3", "/").args(["-c", "b = b'x' * (100 << 20)"]);
    let outcome = capture(&spec, &Cancel::new()).outcome;
    assert!(outcome.termination().success(), "{outcome:?}");
    assert!(
        outcome.max_rss_kb >= 90 * 1024,
        "max RSS {} KiB",
        outcome.max_rss_kb
    );
    assert!(own_memory_mb() > 0);

    let busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass";
    let spec = Spec::new("python3", "/").args(["-c", busy]);
    let outcome = capture(&spec, &Cancel::new()).outcome;
    assert!(outcome.termination().success(), "{outcome:?}");
    assert!(outcome.user > Duration::ZERO);
    assert!(
        outcome.user + outcome.sys >= Duration::from_millis(250),
        "{outcome:?}"
    );
    assert!(outcome.wall >= Duration::from_millis(250), "{outcome:?}");
}

#[test]
fn the_child_leads_its_own_process_group() {
    let captured = run_sh("cut -d' ' -f5 /proc/$$/stat");
    let pgid: u32 = captured.stdout[0].parse().expect("pgid");
    assert_eq!(pgid, captured.outcome.pid);
    let ours = rustix::process::getpgrp().as_raw_nonzero().get() as u32;
    assert_ne!(pgid, ours);
}

#[test]
fn a_grandchild_left_in_the_group_is_killed() {
    let captured = run_sh("sleep 100 & echo $!; exit 0");
    let grandchild: u32 = captured.stdout[0].parse().expect("pid");
    let ended = dies_within(grandchild, Duration::from_secs(2));
    kill_stray(grandchild);
    assert!(ended, "the grandchild {grandchild} outlived the run");
    assert_eq!(captured.outcome.termination(), Termination::Exited(0));
}

#[test]
fn a_process_that_left_the_group_does_not_hold_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The escaped process keeps stdout and stderr open; the leader exits once it has escaped.
    let spec = Spec::new("/bin/sh", dir.path()).args([
        "-c",
        "setsid sh -c 'echo $$ > pid; exec sleep 5' & \
         while [ ! -s pid ]; do sleep 0.02; done; cat pid",
    ]);
    let captured = capture(&spec, &Cancel::new());
    let escaped: u32 = captured.stdout[0].parse().expect("pid");
    let was_alive = !is_dead(escaped);
    kill_stray(escaped);
    assert!(was_alive, "the escaped process should still be running");
    assert!(captured.outcome.termination().success());
}

#[test]
fn a_timeout_terminates_the_group() {
    let spec = Spec::new("sleep", "/")
        .arg("100")
        .timeout(Some(Duration::from_millis(200)));
    let outcome = capture(&spec, &Cancel::new()).outcome;
    assert_eq!(
        outcome.end,
        End::TimedOut(Termination::Signaled(libc::SIGTERM))
    );
    assert!(outcome.wall >= Duration::from_millis(200));
}

#[test]
fn sigterm_ignored_means_sigkill_after_the_grace() {
    let spec = sh("trap '' TERM; echo ready; sleep 100")
        .timeout(Some(Duration::from_millis(500)))
        .kill_grace(Duration::from_millis(300));
    let captured = capture(&spec, &Cancel::new());
    assert_eq!(captured.stdout, ["ready"]);
    let outcome = captured.outcome;
    assert_eq!(
        outcome.end,
        End::TimedOut(Termination::Signaled(libc::SIGKILL))
    );
    assert!(outcome.wall >= Duration::from_millis(800), "{outcome:?}");
}

#[test]
fn cancellation_from_another_thread_ends_the_run() {
    let cancel = Cancel::new();
    let canceller = cancel.clone();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let seen = started.clone();
    // Cancelled once the run is under way: its grandchild started and said so.
    let thread = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::fs::read_to_string(&seen).map_or(true, |t| !t.ends_with('\n')) {
            assert!(Instant::now() < deadline, "the run never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        canceller.cancel();
    });
    let script = format!(
        "sleep 100 & echo $!; echo $! > '{}'; wait",
        started.display()
    );
    let captured = capture(&sh(&script), &cancel);
    thread.join().expect("canceller");
    let grandchild: u32 = captured.stdout[0].parse().expect("pid");
    let ended = dies_within(grandchild, Duration::from_secs(2));
    kill_stray(grandchild);
    assert!(matches!(captured.outcome.end, End::Cancelled(_)));
    assert_eq!(
        captured.outcome.termination(),
        Termination::Signaled(libc::SIGTERM)
    );
    assert!(ended, "the grandchild {grandchild} outlived the run");
    assert!(cancel.is_cancelled());
}

#[test]
fn a_cancelled_flag_prevents_the_start() {
    let cancel = Cancel::new();
    cancel.cancel();
    cancel.cancel();
    let error = run(&sh("exit 0"), &mut |_, _| {}, &cancel).expect_err("cancelled");
    assert!(matches!(error, SpawnError::Cancelled { .. }), "{error:?}");
    assert_eq!(error.program(), Path::new("/bin/sh"));
}

/// Start this test binary running the ignored helper test `test` with `env` = `mode`, and read
/// the pid it prints on a `PID <n>` line (libtest may print "test <name> ... " before it on the
/// same line). The helper's stdout is read up to that line; its stderr is discarded.
pub(crate) fn start_helper(test: &str, env: &str, mode: &str) -> (std::process::Child, u32) {
    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn helper");
    let mut pid = None;
    for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let line = line.expect("read helper output");
        if let Some((_, rest)) = line.split_once("PID ") {
            pid = rest.trim().parse::<u32>().ok();
            break;
        }
    }
    let pid = pid.expect("the helper printed a pid");
    (child, pid)
}

#[test]
fn parent_death_kills_the_child() {
    let (mut parent, sleeper) = start_helper(HELPER_TEST, HELPER_ENV, "PARENT");
    let _ = parent.kill();
    let _ = parent.wait();
    let ended = dies_within(sleeper, Duration::from_secs(2));
    kill_stray(sleeper);
    assert!(ended, "the child {sleeper} outlived its parent");
}

#[test]
fn environment_and_working_directory_are_applied() {
    let before = std::env::current_dir().expect("cwd");
    let dir = tempfile::tempdir().expect("tempdir");
    let captured = capture(
        &Spec::new("/bin/sh", dir.path()).args(["-c", "pwd -P"]),
        &Cancel::new(),
    );
    let canonical = dir.path().canonicalize().expect("canonicalize");
    assert_eq!(captured.stdout, [canonical.display().to_string()]);
    assert_eq!(std::env::current_dir().expect("cwd"), before);

    // Some variable this process has, to see it inherited and then removed.
    let (inherited, value) = std::env::vars()
        .find(|(key, _)| !key.is_empty() && !key.contains('='))
        .expect("the test process has an environment");
    let printed = |spec: &Spec| capture(spec, &Cancel::new()).stdout;
    assert!(printed(&Spec::new("env", "/")).contains(&format!("{inherited}={value}")));
    let spec = Spec::new("env", "/")
        .env("NXCC_T_SET", "value with spaces")
        .env_remove(inherited.clone())
        .env_remove("NXCC_T_BOTH")
        .env("NXCC_T_BOTH", "set wins");
    let env = printed(&spec);
    assert!(
        env.contains(&"NXCC_T_SET=value with spaces".to_string()),
        "{env:?}"
    );
    assert!(env.contains(&"NXCC_T_BOTH=set wins".to_string()), "{env:?}");
    let prefix = format!("{inherited}=");
    assert!(!env.iter().any(|line| line.starts_with(&prefix)), "{env:?}");
}

#[test]
fn stdin_is_empty() {
    let captured = run_sh("wc -c");
    assert_eq!(captured.stdout, ["0"]);
}

#[test]
fn spawn_errors_name_the_program() {
    let missing = Path::new("/nonexistent/nxcc-test/tool");
    let error =
        run(&Spec::new(missing, "/"), &mut |_, _| {}, &Cancel::new()).expect_err("missing program");
    assert!(
        matches!(error, SpawnError::ProgramNotFound { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("/nonexistent/nxcc-test/tool"));

    let error = run(
        &Spec::new("nxcc-no-such-tool-on-path", "/"),
        &mut |_, _| {},
        &Cancel::new(),
    )
    .expect_err("missing program on PATH");
    assert!(
        matches!(error, SpawnError::ProgramNotFound { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("nxcc-no-such-tool-on-path"));

    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write");
    let error =
        run(&Spec::new(&script, "/"), &mut |_, _| {}, &Cancel::new()).expect_err("not executable");
    assert!(
        matches!(error, SpawnError::NotExecutable { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains(&script.display().to_string()));

    let gone = dir.path().join("no-such-dir");
    let error =
        run(&Spec::new("/bin/sh", &gone), &mut |_, _| {}, &Cancel::new()).expect_err("missing cwd");
    assert!(matches!(error, SpawnError::CwdMissing { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("/bin/sh"), "{message}");
    assert!(message.contains(&gone.display().to_string()), "{message}");
}

#[test]
fn concurrent_runs_keep_their_own_output() {
    let threads: Vec<_> = (0..4)
        .map(|n| {
            std::thread::spawn(move || {
                let spec =
                    sh("for i in 1 2 3; do echo $0-$i; sleep 0.05; done").arg(format!("t{n}"));
                (n, capture(&spec, &Cancel::new()))
            })
        })
        .collect();
    for thread in threads {
        let (n, captured) = thread.join().expect("thread");
        let expected: Vec<String> = (1..=3).map(|i| format!("t{n}-{i}")).collect();
        assert_eq!(captured.stdout, expected);
        assert!(captured.outcome.termination().success());
    }
}

#[test]
fn a_panicking_callback_leaves_no_child_behind() {
    let spec = sh("echo $$; exec sleep 100");
    let mut pid = 0u32;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(
            &spec,
            &mut |_, line| {
                pid = line.parse().expect("pid");
                panic!("callback failure");
            },
            &Cancel::new(),
        )
    }));
    assert!(result.is_err());
    assert!(pid > 0);
    // The guard killed and reaped it: no process, not even a zombie.
    let gone = !Path::new(&format!("/proc/{pid}")).exists();
    kill_stray(pid);
    assert!(gone, "the child {pid} outlived the run");
}

#[test]
fn line_splitting() {
    let mut lines = Lines::default();
    let mut got = Vec::new();
    let mut emit = |line: &str| got.push(line.to_string());
    lines.feed(b"one\ntw", &mut emit);
    lines.feed(b"o\r\n\nthr", &mut emit);
    lines.feed(b"ee", &mut emit);
    lines.finish(&mut emit);
    lines.finish(&mut emit);
    assert_eq!(got, ["one", "two", "", "three"]);

    // A UTF-8 character split across reads survives.
    let mut got = Vec::new();
    let mut emit = |line: &str| got.push(line.to_string());
    lines.feed(b"\xc3", &mut emit);
    lines.feed(b"\xa9\n", &mut emit);
    assert_eq!(got, ["é"]);

    // An endless line comes out in bounded pieces.
    let mut sizes = Vec::new();
    let mut emit = |line: &str| sizes.push(line.len());
    lines.feed(&vec![b'a'; MAX_LINE_BYTES * 2 + 10], &mut emit);
    lines.feed(b"\n", &mut emit);
    assert_eq!(sizes, [MAX_LINE_BYTES, MAX_LINE_BYTES, 10]);
}

#[test]
fn wait_statuses_decode() {
    assert_eq!(
        Termination::from_wait_status(3 << 8),
        Termination::Exited(3)
    );
    assert_eq!(
        Termination::from_wait_status(libc::SIGKILL),
        Termination::Signaled(libc::SIGKILL)
    );
    assert_eq!(
        Termination::Signaled(libc::SIGKILL).exit_status_like_shell(),
        137
    );
}

#[test]
fn spec_builder() {
    let spec = Spec::new("tool", "/w")
        .arg("--a")
        .args(["b", "c"])
        .timeout(Some(Duration::from_secs(2)));
    assert_eq!(spec.args, ["--a", "b", "c"]);
    assert_eq!(spec.cwd, Path::new("/w"));
    assert_eq!(spec.kill_grace, DEFAULT_KILL_GRACE);
    assert_eq!(spec.timeout, Some(Duration::from_secs(2)));
}

#[test]
fn both_ways_of_seeing_the_leader_exit_see_it_without_reaping_it() {
    for use_thread in [false, true] {
        // Reaped below by `reap`, the way `run` reaps.
        #[allow(clippy::zombie_processes)]
        let mut child = Command::new("/bin/sh")
            .args(["-c", "read _; exit 3"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let watch = if use_thread {
            ExitWatch::thread(pid).unwrap()
        } else {
            ExitWatch::start(pid).unwrap()
        };
        assert!(matches!(watch, ExitWatch::Thread { .. }) == use_thread);
        // Still running: not readable.
        assert_eq!(
            poll(&[watch.fd()], Some(Duration::from_millis(50))).unwrap(),
            [false]
        );
        drop(child.stdin.take());
        assert_eq!(
            poll(&[watch.fd()], Some(Duration::from_secs(60))).unwrap(),
            [true]
        );
        // Seen, not reaped: the pid is still this process's zombie child.
        assert!(is_dead(pid));
        let (status, _) = reap(pid).unwrap();
        assert_eq!(
            Termination::from_wait_status(status),
            Termination::Exited(3)
        );
        watch.finish();
    }
}
