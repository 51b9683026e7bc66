//! The Python package: installed into a fresh virtual environment, it puts `nxcc` on the
//! environment's PATH at the crate's version, and the installed command compiles with the
//! simulated toolchain outside the checkout, with nothing of the build directory — the
//! fork-walrus path included, through the simulated `libwalrus.so` the wheel carries (staged by
//! the build backend, `packaging/nxcc_build.py`) — and `import nxcc`, the Python client the
//! wheel ships, compiles through a daemon the installed `nxcc` runs.
//!
//! What is installed is `$NXCC_TEST_WHEEL` when set (CI builds that wheel from the sdist first),
//! else the source distribution, built here by maturin (installed from PyPI into
//! `target/wheel/maturin-venv` on first use) and installed with one `pip install nxcc-*.tar.gz`,
//! as a user would: the build backend stages the library and maturin builds the wheel, in a
//! target directory of its own (`target/wheel/target`), never the one this test runs from.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn check(what: &str, o: &Output) {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
}

/// The cargo target directory the tests were built in.
fn target_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_nxcc"));
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// A Python virtual environment at `venv` (`python3 -m venv`), `what` naming the step if it fails.
fn make_venv(venv: &Path, what: &str) {
    check(
        what,
        &Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv)
            .output()
            .unwrap(),
    );
}

/// The source distribution, built by maturin from the checkout (what `pip install git+URL` and
/// an index's sdist hold): maturin is installed from PyPI into `target/wheel/maturin-venv` on
/// first use.
fn build_sdist() -> PathBuf {
    let work = target_dir().join("wheel");
    let venv = work.join("maturin-venv");
    let maturin = venv.join("bin/maturin");
    if !maturin.exists() {
        make_venv(
            &venv,
            "python3 -m venv (python3 with its venv module is needed to build the wheel)",
        );
        check(
            "pip install maturin (from PyPI)",
            &Command::new(venv.join("bin/python"))
                .args(["-m", "pip", "install", "--quiet"])
                .args(["--disable-pip-version-check", "maturin>=1.5,<2"])
                .env("PIP_CACHE_DIR", work.join("pip-cache"))
                .output()
                .unwrap(),
        );
    }
    let dist = work.join("sdist");
    let _ = std::fs::remove_dir_all(&dist);
    check(
        "maturin sdist",
        &Command::new(&maturin)
            .args(["sdist", "--out"])
            .arg(&dist)
            .current_dir(ROOT)
            .output()
            .unwrap(),
    );
    let sdists: Vec<PathBuf> = std::fs::read_dir(&dist)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .collect();
    assert_eq!(sdists.len(), 1, "{sdists:?}");
    sdists[0].clone()
}

/// `pip install SDIST` into `venv`, one command: pip unpacks it, installs the build backend's
/// requirements (maturin, from PyPI) and calls the backend, which stages the simulated
/// libwalrus.so and has maturin build the wheel — cargo offline, from the crates already
/// fetched, into a target directory of its own (`target/wheel/target`); pip's cache and its
/// temporary directories in `world`.
fn pip_install_sdist(venv: &Path, sdist: &Path, world: &Path) {
    let tmp = world.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    check(
        "pip install the sdist (one command)",
        &Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--no-deps",
                "--disable-pip-version-check",
            ])
            .arg(sdist)
            .env("PIP_CACHE_DIR", world.join("pip-cache"))
            .env("TMPDIR", &tmp)
            .env("CARGO_TARGET_DIR", target_dir().join("wheel/target"))
            .env("CARGO_NET_OFFLINE", "true")
            .output()
            .unwrap(),
    );
}

#[test]
fn the_installed_wheel_compiles_outside_the_checkout() {
    // A fresh environment, and a directory outside the checkout.
    let world = tempfile::tempdir().unwrap();
    assert!(!world.path().starts_with(ROOT));
    let venv = world.path().join("venv");
    make_venv(&venv, "python3 -m venv");
    match std::env::var_os("NXCC_TEST_WHEEL") {
        Some(w) if !w.is_empty() => {
            let wheel = PathBuf::from(w);
            let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with(&format!("nxcc-{VERSION}-")),
                "the wheel's version is the crate's: {name}"
            );
            check(
                "pip install the wheel",
                &Command::new(venv.join("bin/pip"))
                    .args(["install", "--quiet", "--no-index", "--no-deps"])
                    .arg("--disable-pip-version-check")
                    .arg(&wheel)
                    .env("PIP_CACHE_DIR", world.path().join("pip-cache"))
                    .output()
                    .unwrap(),
            );
        }
        _ => {
            let sdist = build_sdist();
            let name = sdist.file_name().unwrap().to_string_lossy().into_owned();
            assert_eq!(name, format!("nxcc-{VERSION}.tar.gz"));
            pip_install_sdist(&venv, &sdist, world.path());
        }
    }
    let bin = venv.join("bin");
    assert!(bin.join("nxcc").is_file());
    let work = world.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::copy(
        Path::new(ROOT).join("examples/models/mlp.hlo_module.pb"),
        work.join("mlp.hlo_module.pb"),
    )
    .unwrap();
    let xdg = world.path().join("xdg");
    let run = |args: &[&str]| -> Output {
        Command::new("nxcc")
            .args(args)
            .current_dir(&work)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .env("XDG_CACHE_HOME", &xdg)
            .env_remove("NXCC_TOOLCHAIN")
            .env_remove("NXCC_SIM_FAULT")
            .env_remove("NXCC_SIM_RECORD")
            .output()
            .unwrap()
    };
    let v = run(&["--version"]);
    check("nxcc --version", &v);
    assert!(text(&v.stdout).contains(VERSION), "{}", text(&v.stdout));

    // The default simulated toolchain: laid out for the installed executable.
    let c = run(&[
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--output",
        "mlp.neff",
    ]);
    check("nxcc compile --toolchain sim", &c);
    check(
        "nxcc neff-info --verify",
        &run(&["neff-info", "--verify", "mlp.neff"]),
    );
    let homes: Vec<PathBuf> = std::fs::read_dir(xdg.join("nxcc"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(homes.len(), 1, "{homes:?}");
    assert_eq!(
        std::fs::read_link(homes[0].join("bin/walrus_driver")).unwrap(),
        std::fs::canonicalize(bin.join("nxcc")).unwrap(),
        "the installed nxcc is every simulated tool"
    );
    // The same NEFF as the build this test comes from writes.
    let reference = world.path().join("reference");
    std::fs::create_dir(&reference).unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args(["compile", "../work/mlp.hlo_module.pb", "--target", "trn2"])
        .args(["--toolchain", "sim", "--output", "mlp.neff"])
        .current_dir(&reference)
        .env("XDG_CACHE_HOME", world.path().join("xdg-reference"))
        .env_remove("NXCC_TOOLCHAIN")
        .env_remove("NXCC_SIM_FAULT")
        .env_remove("NXCC_SIM_RECORD")
        .output()
        .unwrap();
    check("the reference compile", &r);
    assert_eq!(
        std::fs::read(work.join("mlp.neff")).unwrap(),
        std::fs::read(reference.join("mlp.neff")).unwrap()
    );

    // The fork-walrus path from the installed nxcc: the wheel carries the simulated
    // libwalrus.so, the default simulated toolchain links it, and the Backend runs in process
    // through it (the job log says which library it called).
    let f = run(&[
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--enable-internal-fork-walrus",
        "--output",
        "fork.neff",
        "--logfile",
        "fork.log",
    ]);
    check(
        "nxcc compile --toolchain sim --enable-internal-fork-walrus",
        &f,
    );
    let installed_lib = std::fs::canonicalize(venv.join("lib/nxcc/libnxcc_walrus.so")).unwrap();
    assert_eq!(
        std::fs::canonicalize(homes[0].join("lib/libwalrus.so")).unwrap(),
        installed_lib,
        "the default simulated toolchain's libwalrus.so is the installed one"
    );
    let log = std::fs::read_to_string(work.join("fork.log")).unwrap();
    assert!(
        log.contains(&format!(
            "Calling run_backend_driver of {}",
            homes[0].join("lib/libwalrus.so").display()
        )),
        "{log}"
    );
    check(
        "nxcc neff-info --verify fork.neff",
        &run(&["neff-info", "--verify", "fork.neff"]),
    );

    // A standalone layout from the installed nxcc holds its own copy of the library, and a
    // fork-walrus compile works with it.
    let t = run(&["toolchain", "sim", "tc"]);
    check("nxcc toolchain sim", &t);
    assert!(
        text(&t.stdout).contains("library: ") && !text(&t.stdout).contains("library: none"),
        "{}",
        text(&t.stdout)
    );
    assert!(work.join("tc/lib/libwalrus.so").is_file());
    check(
        "nxcc compile --toolchain tc --enable-internal-fork-walrus",
        &run(&[
            "compile",
            "mlp.hlo_module.pb",
            "--target",
            "trn2",
            "--toolchain",
            "tc",
            "--enable-internal-fork-walrus",
            "--output",
            "tc.neff",
        ]),
    );

    // `import nxcc` from the installed wheel (not the checkout's python/): its client compiles
    // through a daemon the installed nxcc runs.
    let run_dir = world.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::set_permissions(
        &run_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let socket = run_dir.join("d.sock");
    let socket_arg = socket.display().to_string();
    let mut daemon = Command::new(bin.join("nxcc"))
        .args(["daemon", "--socket", &socket_arg, "--cache_dir"])
        .arg(world.path().join("daemon-cache"))
        .env("XDG_CACHE_HOME", &xdg)
        .env_remove("NXCC_TOOLCHAIN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let code = r#"
import os, sys, time, nxcc
assert nxcc.__file__.startswith(sys.prefix), nxcc.__file__
deadline = time.monotonic() + 60
while True:
    try:
        client = nxcc.connect(sys.argv[1])
        break
    except nxcc.DaemonUnavailable:
        assert time.monotonic() < deadline, "no daemon answered"
        time.sleep(0.05)
argv = ["mlp.hlo_module.pb", "--target", "trn2", "--toolchain", "sim", "--output", "py.neff"]
first, second = client.compile(argv), client.compile(argv)
assert first.ok and first.cache == "miss", first
assert second.ok and second.cache == "hit", second
assert second.neff == os.path.abspath("py.neff"), second.neff
print(nxcc.__version__)
"#;
    let py = Command::new(venv.join("bin/python"))
        .args(["-c", code, &socket_arg])
        .current_dir(&work)
        .env_remove("PYTHONPATH")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("NXCC_TOOLCHAIN")
        .output()
        .unwrap();
    let stopped = Command::new(bin.join("nxcc"))
        .args(["daemon", "stop", "--socket", &socket_arg])
        .output()
        .unwrap();
    let _ = daemon.kill();
    let _ = daemon.wait();
    check(
        "import nxcc from the installed wheel, and compile through it",
        &py,
    );
    assert_eq!(text(&py.stdout).trim(), VERSION);
    check("nxcc daemon stop", &stopped);
    check(
        "nxcc neff-info --verify py.neff",
        &run(&["neff-info", "--verify", "py.neff"]),
    );
}
