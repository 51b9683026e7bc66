//! CI's check that a run leaves nothing behind (`.ci/leaks`): it finds every path new since its
//! snapshot and nothing else, and `.ci/run` takes the snapshot of /tmp and $HOME before it builds
//! anything and compares after the test suite.

use std::path::Path;
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn leaks(args: &[&str]) -> Output {
    Command::new(Path::new(ROOT).join(".ci/leaks"))
        .args(args)
        .output()
        .expect(".ci/leaks runs (bash, find, sort and comm are needed)")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_leak_check_finds_what_is_new_and_only_that() {
    let world = tempfile::tempdir().unwrap();
    let (tmp, home) = (world.path().join("tmp"), world.path().join("home"));
    for d in [&tmp, &home.join(".cache/old")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(tmp.join("was-there"), b"").unwrap();
    let snap = world.path().join("before");
    let (snap, tmp_s, home_s) = (
        snap.to_str().unwrap(),
        tmp.to_str().unwrap(),
        home.to_str().unwrap(),
    );
    assert!(leaks(&["snapshot", snap, tmp_s, home_s]).status.success());
    // Nothing new: nothing said but that.
    let o = leaks(&["compare", snap, tmp_s, home_s]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // What was removed, or only changed, is no leak.
    std::fs::remove_file(tmp.join("was-there")).unwrap();
    std::fs::write(home.join(".cache/old/changed"), b"").unwrap();
    std::fs::remove_file(home.join(".cache/old/changed")).unwrap();
    assert!(leaks(&["compare", snap, tmp_s, home_s]).status.success());
    // New files and directories, at any depth, in either place: listed, and a failure.
    std::fs::create_dir_all(tmp.join("nxcc-worker-x/action-1")).unwrap();
    std::fs::create_dir_all(home.join(".cache/nxcc/sim-toolchain-0.1.0-abc")).unwrap();
    let o = leaks(&["compare", snap, tmp_s, home_s]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    for p in [
        tmp.join("nxcc-worker-x"),
        tmp.join("nxcc-worker-x/action-1"),
        home.join(".cache/nxcc"),
        home.join(".cache/nxcc/sim-toolchain-0.1.0-abc"),
    ] {
        assert!(err.contains(&format!("\n  {}\n", p.display())), "{err}");
    }
    assert!(err.contains(": 4 new path(s):"), "{err}");
    // Only what the caller says is its own is passed over.
    let ignore = tmp.join("nxcc-worker-x");
    let o = leaks(&[
        "compare",
        snap,
        "--ignore",
        ignore.to_str().unwrap(),
        tmp_s,
        home_s,
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains(": 2 new path(s):") && !err.contains("nxcc-worker-x"),
        "{err}"
    );
}

/// A clone under /tmp: its target directory holds tens of thousands of paths. Ignored, none is
/// listed; and when thousands of paths are new, the check fails with status 1 (not a writer
/// killed by SIGPIPE) and says how many it did not show.
#[test]
fn the_leak_check_ignores_a_checkout_inside_and_survives_thousands_of_paths() {
    let world = tempfile::tempdir().unwrap();
    let tmp = world.path().join("tmp");
    let checkout = tmp.join("clone");
    std::fs::create_dir_all(checkout.join("target")).unwrap();
    let snap = world.path().join("before");
    let (snap, tmp_s, checkout_s) = (
        snap.to_str().unwrap(),
        tmp.to_str().unwrap(),
        checkout.to_str().unwrap(),
    );
    assert!(leaks(&["snapshot", snap, tmp_s]).status.success());
    // Far more than a pipe's buffer of path names.
    for i in 0..3000 {
        let name = format!("a-rather-long-file-name-to-fill-pipes-{i:05}");
        std::fs::write(checkout.join("target").join(&name), b"").unwrap();
    }
    let o = leaks(&["compare", snap, "--ignore", checkout_s, tmp_s]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = leaks(&["compare", snap, tmp_s]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(": 3000 new path(s):"), "{err}");
    assert!(err.contains("\n  ... and 2950 more\n"), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("  /")).count(), 50);
}

#[test]
fn ci_checks_tmp_and_home_around_the_build_and_the_suite() {
    let run = std::fs::read_to_string(Path::new(ROOT).join(".ci/run")).unwrap();
    let at = |needle: &str| {
        run.find(needle)
            .unwrap_or_else(|| panic!(".ci/run has no {needle:?}"))
    };
    let snapshot = at(".ci/leaks snapshot \"$ci_tmp/before\" /tmp \"${HOME:?}\"");
    let compare = at(
        ".ci/leaks compare \"$ci_tmp/before\" --ignore \"$ci_tmp\" --ignore \"$PWD\" /tmp \"$HOME\"",
    );
    assert!(
        snapshot < at("cargo clippy"),
        "the snapshot comes before anything is built"
    );
    assert!(
        compare > at("bash -euo pipefail -c \"${commands[1]}\""),
        "the check follows the suite"
    );
    // CI's own files outside the checkout are in the one directory it ignores and removes.
    assert!(run.contains("trap 'rm -rf \"$ci_tmp\"' EXIT"));
    assert!(run.contains("export PIP_CACHE_DIR=\"$ci_tmp/pip-cache\""));
    assert_eq!(
        run.matches("XDG_CACHE_HOME=\"$").count(),
        2,
        "both runs of the main command"
    );
}
