//! `nxcc toolchain sim DIR` and `nxcc toolchain show`, concurrent layouts, and the layout's
//! library.

use std::process::Command;

use crate::common::*;
use nxcc::recon::toolchain::SIM_MARKER;
use nxcc::sim::layout;

fn nxcc(args: &[&str], cwd: &std::path::Path) -> std::process::Output {
    let mut c = Command::new(nxcc_exe());
    c.args(args).current_dir(cwd).env_remove("NXCC_TOOLCHAIN");
    for v in SIM_VARS {
        c.env_remove(v);
    }
    c.output().unwrap()
}

#[test]
fn toolchain_sim_lays_out_working_links() {
    let dir = tempfile::tempdir().unwrap();
    let out = nxcc(&["toolchain", "sim", "tc"], dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cannot run on Neuron hardware"), "{text}");
    let root = dir.path().join("tc");
    assert!(root.join("bin").join(SIM_MARKER).is_file());
    for tool in nxcc::toolchain::TOOLS {
        let link = root.join("bin").join(tool);
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::canonicalize(&link).unwrap(),
            std::fs::canonicalize(sim_exe()).unwrap()
        );
    }
    assert_eq!(
        std::fs::canonicalize(root.join("lib/libwalrus.so")).unwrap(),
        std::fs::canonicalize(lib_path()).unwrap()
    );
    // The driver's toolchain code recognises it as simulated and resolves every tool in it.
    let tc = nxcc::toolchain::from_dir(&root);
    assert!(tc.simulated);
    assert_eq!(
        tc.resolve("walrus_driver"),
        Some(root.join("bin/walrus_driver"))
    );

    // Run a tool through its link.
    let model = dir.path().join("m.hlo");
    std::fs::write(&model, tiny_hlo()).unwrap();
    let run = Command::new(root.join("bin/hlo2penguin"))
        .args([
            "--input",
            model.to_str().unwrap(),
            "--out-dir",
            "./",
            "--output",
            "penguin.py",
            "--target-instance=inf2",
            "--logical-nc-config=1",
            "--verbose=user",
            "--logfile=/tmp/log-neuron-cc.txt",
            "--logfile-verbose=info",
        ])
        .current_dir(dir.path())
        .env_remove("NXCC_SIM_FAULT")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr(&run));
    let penguin = std::fs::read_to_string(dir.path().join("penguin.py")).unwrap();
    assert!(penguin.contains("TARGET_INSTANCE = \"inf2\""));

    // Again: idempotent.
    let again = nxcc(&["toolchain", "sim", "tc"], dir.path());
    assert!(again.status.success(), "{}", stderr(&again));

    // show describes it.
    let show = nxcc(&["toolchain", "show", "--toolchain", "tc"], dir.path());
    assert!(show.status.success(), "{}", stderr(&show));
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(text.contains("source: --toolchain"), "{text}");
    assert!(text.contains("(simulated)"), "{text}");
    assert!(
        text.contains(&root.join("bin/nn_executor").display().to_string()),
        "{text}"
    );
}

#[test]
fn toolchain_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (&["toolchain"][..], "required: {sim,show}"),
        (&["toolchain", "sim"][..], "required: DIR"),
        (&["toolchain", "build", "x"][..], "invalid choice: 'build'"),
        (
            &["toolchain", "show", "extra"][..],
            "unrecognized arguments: extra",
        ),
        (
            &["toolchain", "sim", "x", "--bogus"][..],
            "unrecognized arguments: --bogus",
        ),
    ] {
        let out = nxcc(args, dir.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
    let help = nxcc(&["toolchain", "--help"], dir.path());
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("test instrument"));
}

#[test]
fn layout_never_replaces_what_is_not_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("walrus_driver"), b"#!/bin/sh\necho real\n").unwrap();
    let e = layout::lay_out_from(dir.path(), &sources()).unwrap_err();
    assert!(e.to_string().contains("is not a link"), "{e}");
    assert_eq!(
        std::fs::read(bin.join("walrus_driver")).unwrap(),
        b"#!/bin/sh\necho real\n"
    );
    assert!(!bin.join(SIM_MARKER).exists());
}

#[test]
fn concurrent_layouts_of_one_directory_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tc");
    // Two processes and four threads at once.
    let procs: Vec<_> = (0..2)
        .map(|_| {
            Command::new(nxcc_exe())
                .args(["toolchain", "sim", root.to_str().unwrap()])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| layout::lay_out_from(&root, &sources())))
            .collect();
        for h in handles {
            let tc = h.join().unwrap().unwrap();
            assert_eq!(tc.bin, root.join("bin"));
            assert!(tc.simulated);
        }
    });
    for mut p in procs {
        assert!(p.wait().unwrap().success());
    }
    assert!(layout::is_complete(&root, &sources()));
    // No temporaries left behind.
    for d in ["bin", "lib"] {
        for e in std::fs::read_dir(root.join(d)).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(!name.contains(".tmp"), "left over: {name}");
        }
    }
}

#[test]
fn ensure_at_lays_out_once() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("cache/nxcc/sim");
    assert!(!layout::is_complete(&home, &sources()));
    let tc = layout::ensure_at(&home, &sources()).unwrap();
    assert_eq!(tc.bin, home.join("bin"));
    assert!(layout::is_complete(&home, &sources()));
    let marker = home.join("bin").join(SIM_MARKER);
    let before = std::fs::metadata(&marker).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    layout::ensure_at(&home, &sources()).unwrap();
    let after = std::fs::metadata(&marker).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        before.ino(),
        after.ino(),
        "a complete layout is not rewritten"
    );
    // A layout pointing elsewhere is brought up to date.
    let stale = dir.path().join("stale");
    layout::lay_out_from(
        &stale,
        &layout::Sources {
            sim: std::path::PathBuf::from("/bin/true"),
            lib: None,
        },
    )
    .unwrap();
    assert!(!layout::is_complete(&stale, &sources()));
    layout::ensure_at(&stale, &sources()).unwrap();
    assert!(layout::is_complete(&stale, &sources()));
}
