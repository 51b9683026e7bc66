//! `nxcc toolchain sim DIR` and `nxcc toolchain show`, concurrent layouts, and the layout's
//! library.

use std::process::Command;

use crate::common::*;
use nxcc::recon::toolchain::SIM_MARKER;
use nxcc_sim::layout::{self, Kind};

/// What `nxcc toolchain sim` lays out from: nxcc itself and the crate's library.
fn standalone() -> layout::Sources {
    layout::Sources {
        sim: nxcc_exe(),
        lib: Some(lib_path()),
    }
}

fn nxcc(args: &[&str], cwd: &std::path::Path) -> std::process::Output {
    let mut c = Command::new(nxcc_exe());
    c.args(args).current_dir(cwd).env_remove("NXCC_TOOLCHAIN");
    for v in SIM_VARS {
        c.env_remove(v);
    }
    c.output().unwrap()
}

/// Whether two files hold the same bytes.
fn same_bytes(a: &std::path::Path, b: &std::path::Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

#[test]
fn toolchain_sim_lays_out_working_links() {
    let dir = tempfile::tempdir().unwrap();
    // Laid out by a copy of nxcc that is then removed (as `cargo clean` removes a build): the
    // layout holds its own executable and keeps working.
    let gone = dir.path().join("build");
    std::fs::create_dir(&gone).unwrap();
    let exe = gone.join("nxcc");
    std::fs::copy(nxcc_exe(), &exe).unwrap();
    std::fs::copy(lib_path(), gone.join(layout::LIB_FILE)).unwrap();
    let out = Command::new(&exe)
        .args(["toolchain", "sim", "tc"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cannot run on Neuron hardware"), "{text}");
    let root = dir.path().join("tc");
    assert!(root.join("bin").join(SIM_MARKER).is_file());
    assert!(same_bytes(&root.join("bin/nxcc-sim"), &exe));
    for tool in nxcc::toolchain::TOOLS {
        let link = root.join("bin").join(tool);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            std::path::PathBuf::from("nxcc-sim"),
            "{tool} links to the layout's own executable"
        );
    }
    assert!(same_bytes(&root.join("lib/libwalrus.so"), &lib_path()));
    std::fs::remove_dir_all(&gone).unwrap();
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
        (&["toolchain"][..], "Usage: nxcc toolchain <COMMAND>"),
        (&["toolchain", "sim"][..], "were not provided:\n  <DIR>"),
        (
            &["toolchain", "build", "x"][..],
            "unrecognized subcommand 'build'",
        ),
        (
            &["toolchain", "show", "extra"][..],
            "unexpected argument 'extra' found",
        ),
        (
            &["toolchain", "sim", "x", "--bogus"][..],
            "unexpected argument '--bogus' found",
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
            .map(|_| s.spawn(|| layout::lay_out_kind(&root, &standalone(), Kind::Standalone)))
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
    assert!(same_bytes(&root.join("bin/nxcc-sim"), &nxcc_exe()));
    for tool in nxcc::toolchain::TOOLS {
        assert!(same_bytes(&root.join("bin").join(tool), &nxcc_exe()));
    }
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

#[test]
fn standalone_layout_never_replaces_a_file_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("nxcc-sim"), b"mine").unwrap();
    let e = layout::lay_out_kind(dir.path(), &standalone(), Kind::Standalone).unwrap_err();
    assert!(e.to_string().contains("was not laid out by nxcc"), "{e}");
    assert_eq!(std::fs::read(bin.join("nxcc-sim")).unwrap(), b"mine");
    // Once it is a layout (its marker written), laying out again brings its executable up to
    // date.
    std::fs::remove_file(bin.join("nxcc-sim")).unwrap();
    layout::lay_out_kind(dir.path(), &sources(), Kind::Standalone).unwrap();
    assert!(same_bytes(&bin.join("nxcc-sim"), &sim_exe()));
    layout::lay_out_kind(dir.path(), &standalone(), Kind::Standalone).unwrap();
    assert!(same_bytes(&bin.join("nxcc-sim"), &nxcc_exe()));
}

/// `--toolchain sim` from two copies of nxcc at one version: each runs its own tools; a new
/// executable's layout removes those of executables that are gone.
#[test]
fn each_executable_has_its_own_default_layout() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    let model =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo_module.pb");
    let copy = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::copy(nxcc_exe(), d.join("nxcc")).unwrap();
        d.join("nxcc")
    };
    let compile = |exe: &std::path::Path, out: &str| {
        let o = Command::new(exe)
            .args(["compile", model.to_str().unwrap(), "--target", "trn2"])
            .args(["--toolchain", "sim", "--output", out])
            .current_dir(dir.path())
            .env("XDG_CACHE_HOME", &xdg)
            .env_remove("NXCC_TOOLCHAIN")
            .env_remove("NXCC_SIM_FAULT")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    };
    // Which executable each default layout's tools are.
    let homes = || -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(xdg.join("nxcc"))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_link(e.path().join("bin/hlo2penguin")).unwrap())
            .collect();
        v.sort();
        v
    };
    let (a, b) = (copy("a"), copy("b"));
    compile(&a, "a.neff");
    compile(&b, "b.neff");
    assert_eq!(homes(), vec![a.clone(), b.clone()]);
    // The same bytes from either (the NEFF names its file: compare two of one name).
    compile(&a, "x.neff");
    let first = std::fs::read(dir.path().join("x.neff")).unwrap();
    compile(&b, "x.neff");
    assert_eq!(std::fs::read(dir.path().join("x.neff")).unwrap(), first);
    std::fs::remove_file(&a).unwrap();
    let c = copy("c");
    compile(&c, "c.neff");
    assert_eq!(homes(), vec![b, c]);
}
