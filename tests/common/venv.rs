//! A Python tool the tests run against (a real server: BuildGrid, moto), provisioned on first use
//! into a virtual environment under `target/` with pinned constraints: `pip`'s cache stays in
//! `target/` too, a lock file keeps parallel test binaries from installing twice, and a stamp
//! (the pin and the constraints) tells a finished install from a stale or broken one. Where it
//! cannot be provisioned, the test fails saying why.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::text;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A tool to provision.
pub struct Venv<'a> {
    /// What it is, in messages (`BuildGrid`).
    pub tool: &'a str,
    /// The tests that need it, in messages (`remote tests`).
    pub tests: &'a str,
    /// Its directory in `target/` (`buildgrid-venv`; its lock is that name with `.lock`).
    pub dir: &'a str,
    /// The pin the stamp names (`buildgrid==0.1.9`).
    pub pin: &'a str,
    /// What `pip install` is given.
    pub packages: &'a [&'a str],
    /// The constraints file, `tests/data/<data>/constraints.txt`.
    pub data: &'a str,
    /// The Pythons it may be made with, the first found on `PATH` taken.
    pub pythons: &'a [&'a str],
    /// A file, relative to the environment, that a finished install has (`bin/bgd`).
    pub marker: &'a str,
}

/// Run `c`; its stdout, or its stderr's last lines when it fails.
pub fn run(c: &mut Command, what: &str) -> Result<String, String> {
    let o = c.output().map_err(|e| format!("{what}: {e}"))?;
    if o.status.success() {
        return Ok(text(&o.stdout));
    }
    let err = text(&o.stderr);
    let tail: Vec<&str> = err.lines().rev().take(15).collect();
    Err(format!(
        "{what} failed ({}): {}",
        o.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Venv<'_> {
    /// The file `tests/data/<data>/<name>`.
    pub fn data_file(&self, name: &str) -> PathBuf {
        Path::new(ROOT)
            .join("tests/data")
            .join(self.data)
            .join(name)
    }

    /// The environment's directory, provisioning it if needed; why not, if it cannot be.
    pub fn provision(&self) -> Result<PathBuf, String> {
        let target = Path::new(ROOT).join("target");
        let venv = target.join(self.dir);
        let constraints = self.data_file("constraints.txt");
        let pinned = std::fs::read(&constraints).map_err(|e| e.to_string())?;
        let stamp_text = format!("{}\n{}", self.pin, String::from_utf8_lossy(&pinned));
        let stamp = venv.join(".nxcc-provisioned");
        let ready = || {
            std::fs::read_to_string(&stamp).is_ok_and(|s| s == stamp_text)
                && venv.join(self.marker).is_file()
        };
        if ready() {
            return Ok(venv);
        }
        std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(target.join(format!("{}.lock", self.dir)))
            .map_err(|e| format!("cannot open the provisioning lock: {e}"))?;
        fs4::fs_std::FileExt::lock_exclusive(&lock).map_err(|e| format!("cannot lock: {e}"))?;
        if ready() {
            return Ok(venv);
        }
        eprintln!(
            "{}: provisioning {} into {} (once)",
            self.tests,
            self.pin,
            venv.display()
        );
        self.install(&venv, &constraints, &target.join("pip-cache"))?;
        std::fs::write(&stamp, &stamp_text).map_err(|e| e.to_string())?;
        Ok(venv)
    }

    /// Make the environment at `venv` afresh and install the packages into it.
    fn install(&self, venv: &Path, constraints: &Path, pip_cache: &Path) -> Result<(), String> {
        let python = self
            .pythons
            .iter()
            .find(|p| {
                Command::new(p)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
            .ok_or_else(|| {
                format!(
                    "no {} on PATH ({} needs one)",
                    self.pythons.join(" or "),
                    self.pin
                )
            })?;
        let _ = std::fs::remove_dir_all(venv);
        run(
            Command::new(python)
                .args(["-m", "venv"])
                .arg(venv)
                .env("PIP_CACHE_DIR", pip_cache),
            &format!("{python} -m venv"),
        )?;
        run(
            Command::new(venv.join("bin/pip"))
                .env("PIP_CACHE_DIR", pip_cache)
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .args(self.packages)
                .arg("-c")
                .arg(constraints),
            &format!("pip install {}", self.pin),
        )?;
        Ok(())
    }

    /// [`Venv::provision`], or a failed test that says why, visibly.
    pub fn must(&self) -> PathBuf {
        self.provision().unwrap_or_else(|why| {
            eprintln!(
                "{}: {} cannot be provisioned here: {why}",
                self.tests, self.tool
            );
            panic!(
                "{} cannot be provisioned here (the {} need it): {why}",
                self.tool, self.tests
            );
        })
    }
}
