//! The Python package: installed into a fresh virtual environment, it puts `nxcc` on the
//! environment's PATH at the crate's version, and the installed command compiles with the
//! simulated toolchain outside the checkout, with nothing of the build directory — the
//! fork-walrus path included, through the simulated `libwalrus.so` the wheel carries (staged by
//! the build backend, `packaging/nxcc_build.py`) — and `import nxcc`, the Python client the
//! wheel ships, compiles through a daemon the installed `nxcc` runs.
//!
//! What is installed is the wheel pip builds from the source distribution (what `pip install
//! git+URL` and `pip install nxcc-*.tar.gz` build), and the sdist is checked to hold what that
//! build needs. Both are `$NXCC_TEST_SDIST` and `$NXCC_TEST_WHEEL` when set (CI builds the sdist,
//! then the wheel from it, once, and hands both here); else built here: the sdist by maturin
//! (installed from PyPI into `target/wheel/maturin-venv` on first use), the wheel from it by
//! `pip wheel`, through the build backend as `pip install` calls it, in a target directory of its
//! own (`target/wheel/target`), never the one this test runs from — and kept in
//! `target/wheel/built/<the sdist's digest>/`, so that a source built once is not built again.

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

/// An artifact CI built and hands over in the environment variable `var` (`None`: not set).
fn given(var: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os(var).filter(|v| !v.is_empty())?);
    assert!(path.is_file(), "{var}={}: no such file", path.display());
    eprintln!("{var}: {} (given; not built here)", path.display());
    Some(path)
}

/// The one file of `dir` whose name ends with `suffix`.
fn only_file(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "{suffix} in {}: {found:?}", dir.display());
    found[0].clone()
}

/// maturin, installed from PyPI into `target/wheel/maturin-venv` on first use; pip's cache
/// (`target/wheel/pip-cache`) and its venv's pip.
fn maturin_venv() -> PathBuf {
    let work = target_dir().join("wheel");
    let venv = work.join("maturin-venv");
    if !venv.join("bin/maturin").exists() {
        make_venv(
            &venv,
            "python3 -m venv (python3 with its venv module is needed to build the package)",
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
    venv
}

/// The source distribution, built by maturin from the checkout into `target/wheel/sdist` (a
/// second of work; the same sources give the same bytes).
fn build_sdist() -> PathBuf {
    let dist = target_dir().join("wheel/sdist");
    let _ = std::fs::remove_dir_all(&dist);
    // maturin checks that the data directory pyproject.toml names exists, even for an sdist
    // (which never holds it: the build backend stages it when the wheel is built).
    std::fs::create_dir_all(Path::new(ROOT).join("target/wheel-data")).unwrap();
    check(
        "maturin sdist",
        &Command::new(maturin_venv().join("bin/maturin"))
            .args(["sdist", "--out"])
            .arg(&dist)
            .current_dir(ROOT)
            .output()
            .unwrap(),
    );
    only_file(&dist, ".tar.gz")
}

/// The wheel of `sdist`, built once per distinct sdist: `pip wheel SDIST` — pip unpacks it,
/// installs the build backend's requirements (maturin, from PyPI) and calls the backend, which
/// stages the simulated libwalrus.so and has maturin build the wheel; cargo offline, from the
/// crates already fetched, into `target/wheel/target`. Kept in `target/wheel/built/<digest>/`
/// (moved there whole once built), where a later run finds it.
fn built_wheel(sdist: &Path) -> PathBuf {
    let digest = blake3::hash(&std::fs::read(sdist).unwrap()).to_hex();
    let built = target_dir().join("wheel/built");
    let kept = built.join(&digest[..32]);
    if kept.is_dir() {
        eprintln!(
            "the wheel of this sdist was built before: {}",
            kept.display()
        );
        return only_file(&kept, ".whl");
    }
    std::fs::create_dir_all(&built).unwrap();
    let partial = tempfile::Builder::new()
        .prefix(".partial-")
        .tempdir_in(&built)
        .unwrap();
    let tmp = partial.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    check(
        "pip wheel SDIST (the build `pip install SDIST` runs)",
        &Command::new(maturin_venv().join("bin/python"))
            .args([
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--disable-pip-version-check",
            ])
            .arg("--wheel-dir")
            .arg(partial.path().join("dist"))
            .arg(sdist)
            .env("PIP_CACHE_DIR", target_dir().join("wheel/pip-cache"))
            .env("TMPDIR", &tmp)
            .env("CARGO_TARGET_DIR", target_dir().join("wheel/target"))
            .env("CARGO_NET_OFFLINE", "true")
            .output()
            .unwrap(),
    );
    std::fs::rename(partial.path().join("dist"), &kept).unwrap();
    only_file(&kept, ".whl")
}

/// The sdist holds what `pip install` of it needs: the build backend and its configuration, the
/// lock file, every crate of the workspace, the Python package — and no build directory.
fn check_sdist(sdist: &Path) {
    let name = sdist.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(name, format!("nxcc-{VERSION}.tar.gz"));
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(sdist).unwrap());
    let mut archive = tar::Archive::new(gz);
    let entries: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    let root = format!("nxcc-{VERSION}/");
    let mut needed: Vec<String> = [
        "PKG-INFO",
        "pyproject.toml",
        "packaging/nxcc_build.py",
        "Cargo.toml",
        "Cargo.lock",
        "python/nxcc/__init__.py",
    ]
    .iter()
    .map(|f| f.to_string())
    .collect();
    for entry in std::fs::read_dir(Path::new(ROOT).join("crates")).unwrap() {
        let entry = entry.unwrap();
        if entry.path().join("Cargo.toml").is_file() {
            let krate = entry.file_name().to_string_lossy().into_owned();
            needed.push(format!("crates/{krate}/Cargo.toml"));
        }
    }
    for file in &needed {
        let path = format!("{root}{file}");
        assert!(entries.contains(&path), "the sdist lacks {path}");
    }
    let built: Vec<&String> = entries
        .iter()
        .filter(|e| e.starts_with(&format!("{root}target/")))
        .collect();
    assert!(built.is_empty(), "the sdist holds build output: {built:?}");
}

/// A fresh virtual environment under `world` with `wheel` installed in it: its directory.
fn install(world: &Path, wheel: &Path) -> PathBuf {
    let venv = world.join("venv");
    make_venv(&venv, "python3 -m venv");
    check(
        "pip install the wheel",
        &Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--no-index", "--no-deps"])
            .arg("--disable-pip-version-check")
            .arg(wheel)
            .env("PIP_CACHE_DIR", world.join("pip-cache"))
            .output()
            .unwrap(),
    );
    venv
}

/// The NEFF the build this test comes from writes for the example (in `world/reference`).
fn reference_compile(world: &Path) -> Vec<u8> {
    let reference = world.join("reference");
    std::fs::create_dir(&reference).unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args(["compile", "../work/mlp.hlo_module.pb", "--target", "trn2"])
        .args(["--toolchain", "sim", "--output", "mlp.neff"])
        .current_dir(&reference)
        .env("XDG_CACHE_HOME", world.join("xdg-reference"))
        .env_remove("NXCC_TOOLCHAIN")
        .env_remove("NXCC_SIM_FAULT")
        .env_remove("NXCC_SIM_RECORD")
        .output()
        .unwrap();
    check("the reference compile", &r);
    std::fs::read(reference.join("mlp.neff")).unwrap()
}

/// The fork-walrus path from the installed nxcc (`run`, in `work`): the wheel carries the
/// simulated libwalrus.so, the default simulated toolchain (laid out in `home`) links it, and
/// the Backend runs in process through it (the job log says which library it called).
fn fork_walrus(run: &dyn Fn(&[&str]) -> Output, work: &Path, venv: &Path, home: &Path) {
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
        std::fs::canonicalize(home.join("lib/libwalrus.so")).unwrap(),
        installed_lib,
        "the default simulated toolchain's libwalrus.so is the installed one"
    );
    let log = std::fs::read_to_string(work.join("fork.log")).unwrap();
    assert!(
        log.contains(&format!(
            "Calling run_backend_driver of {}",
            home.join("lib/libwalrus.so").display()
        )),
        "{log}"
    );
    check(
        "nxcc neff-info --verify fork.neff",
        &run(&["neff-info", "--verify", "fork.neff"]),
    );
}

/// A standalone layout from the installed nxcc (`run`, in `work`) holds its own copy of the
/// library, and a fork-walrus compile works with it.
fn standalone_layout(run: &dyn Fn(&[&str]) -> Output, work: &Path) {
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
}

/// The Python client `code` runs as, from the installed wheel (not the checkout's `python/`):
/// it waits for the daemon at `argv[1]`, compiles twice (a miss, then a hit) and prints the
/// package's version.
const PYTHON_CLIENT: &str = r#"
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

/// `import nxcc` from the installed wheel: its client compiles through a daemon the installed
/// nxcc runs.
fn python_client(
    run: &dyn Fn(&[&str]) -> Output,
    world: &Path,
    work: &Path,
    venv: &Path,
    xdg: &Path,
) {
    let bin = venv.join("bin");
    let run_dir = world.join("run");
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
        .arg(world.join("daemon-cache"))
        .env("XDG_CACHE_HOME", xdg)
        .env_remove("NXCC_TOOLCHAIN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let py = Command::new(venv.join("bin/python"))
        .args(["-c", PYTHON_CLIENT, &socket_arg])
        .current_dir(work)
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

#[test]
fn the_installed_wheel_compiles_outside_the_checkout() {
    let sdist = given("NXCC_TEST_SDIST").unwrap_or_else(build_sdist);
    check_sdist(&sdist);
    let wheel = given("NXCC_TEST_WHEEL").unwrap_or_else(|| built_wheel(&sdist));
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("nxcc-{VERSION}-")),
        "the wheel's version is the crate's: {name}"
    );
    // A fresh environment, and a directory outside the checkout.
    let world = tempfile::tempdir().unwrap();
    assert!(!world.path().starts_with(ROOT));
    let venv = install(world.path(), &wheel);
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
    assert_eq!(
        std::fs::read(work.join("mlp.neff")).unwrap(),
        reference_compile(world.path())
    );

    fork_walrus(&run, &work, &venv, &homes[0]);
    standalone_layout(&run, &work);
    python_client(&run, world.path(), &work, &venv, &xdg);
}
