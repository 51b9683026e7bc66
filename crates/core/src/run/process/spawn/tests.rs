//! The clone-based spawn's tests: what the child gets, looked at from inside it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::super::{run, Cancel, SpawnError, Spec, Stream};

/// Run `spec`, return its stdout lines and whether it succeeded.
fn stdout_of(spec: &Spec) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let outcome = run(
        spec,
        &mut |stream, line| {
            if stream == Stream::Stdout {
                lines.push(line.to_string());
            }
        },
        &Cancel::new(),
    )
    .expect("run");
    (lines, outcome.termination().success())
}

/// The hexadecimal signal mask on the `/proc/self/status` line `field` of the child.
fn child_mask(field: &str) -> u64 {
    let (lines, ok) = stdout_of(
        &Spec::new("grep", "/")
            .arg(format!("^{field}:"))
            .arg("/proc/self/status"),
    );
    assert!(ok, "{lines:?}");
    let value = lines[0].split_whitespace().nth(1).expect("mask");
    u64::from_str_radix(value, 16).expect("hex mask")
}

fn write_executable(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn sigpipe_is_default_and_no_signal_is_blocked_in_the_child() {
    // The test process ignores SIGPIPE (the Rust runtime does); block SIGUSR1 in this thread too.
    // SAFETY: changes only this thread's mask, restored below.
    let old = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    };
    let ignored = child_mask("SigIgn");
    let blocked = child_mask("SigBlk");
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    let bit = |sig: i32| 1u64 << (sig - 1);
    assert_eq!(ignored & bit(libc::SIGPIPE), 0, "SigIgn {ignored:x}");
    assert_eq!(blocked, 0, "SigBlk {blocked:x}");
}

#[test]
fn a_file_without_a_shebang_runs_under_sh_and_path_is_the_childs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tool = dir.path().join("nxcc-t-plain-tool");
    write_executable(&tool, "echo via-sh \"$1\"\n", 0o755);
    let (lines, ok) = stdout_of(&Spec::new(&tool, "/").arg("one"));
    assert!(ok);
    assert_eq!(lines, ["via-sh one"]);

    // Looked up in the PATH the child gets, not this process's.
    let spec = Spec::new("nxcc-t-plain-tool", "/")
        .env(
            "PATH",
            format!("/nonexistent-nxcc:{}", dir.path().display()),
        )
        .arg("two");
    let (lines, ok) = stdout_of(&spec);
    assert!(ok);
    assert_eq!(lines, ["via-sh two"]);
}

#[test]
fn path_lookup_skips_a_non_executable_match_and_reports_it_if_nothing_else_runs() {
    let first = tempfile::tempdir().expect("tempdir");
    let second = tempfile::tempdir().expect("tempdir");
    write_executable(&first.path().join("nxcc-t-tool"), "echo first\n", 0o644);
    let path = format!("{}:{}", first.path().display(), second.path().display());
    let spec = Spec::new("nxcc-t-tool", "/").env("PATH", &path);
    let error = run(&spec, &mut |_, _| {}, &Cancel::new()).expect_err("not executable");
    assert!(
        matches!(error, SpawnError::NotExecutable { .. }),
        "{error:?}"
    );

    write_executable(&second.path().join("nxcc-t-tool"), "echo second\n", 0o755);
    let (lines, ok) = stdout_of(&spec);
    assert!(ok);
    assert_eq!(lines, ["second"]);
}

#[test]
fn a_relative_program_runs_from_the_childs_working_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_executable(&dir.path().join("tool"), "#!/bin/sh\npwd -P\n", 0o755);
    let (lines, ok) = stdout_of(&Spec::new("./tool", dir.path()));
    assert!(ok);
    let canonical = dir.path().canonicalize().expect("canonicalize");
    assert_eq!(lines, [canonical.display().to_string()]);
}

#[test]
fn a_nul_byte_in_an_argument_is_an_error_not_a_start() {
    let error = run(
        &Spec::new("/bin/echo", "/").arg("a\0b"),
        &mut |_, _| {},
        &Cancel::new(),
    )
    .expect_err("nul byte");
    assert!(matches!(error, SpawnError::Io { .. }), "{error:?}");
    assert!(error.to_string().contains("nul byte"), "{error}");
}

#[test]
fn the_childs_stdin_is_dev_null_and_its_group_is_its_own() {
    let (lines, ok) = stdout_of(&Spec::new("/bin/sh", "/").args([
        "-c",
        "readlink /proc/self/fd/0; cut -d' ' -f5 /proc/$$/stat; echo $$",
    ]));
    assert!(ok);
    assert_eq!(lines[0], "/dev/null");
    assert_eq!(lines[1], lines[2], "process group = pid");
}
