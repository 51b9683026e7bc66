//! Shared fixtures of the simulated-toolchain tests: a laid-out toolchain of links to the built
//! `nxcc-sim`, invocations made by the real front door (`Invocation::from_argv`), and a runner
//! that executes a plan's native-tool steps as real processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nxcc::jobs::{Action, Step};
use nxcc::plan::{Invocation, SystemProbe};
use nxcc_sim::layout::{lay_out_from, Sources, LIB_FILE};

pub const SIM_VARS: [&str; 7] = [
    "NXCC_SIM_FAULT",
    "NXCC_SIM_WORK_MS",
    "NXCC_SIM_WORK_MS_PER_MB",
    "NXCC_SIM_RSS_MB",
    "NXCC_SIM_RECORD",
    "NXCC_SIM_STATE",
    "NXCC_SIM_SUBGRAPHS",
];

pub fn sim_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nxcc-sim"))
}

pub fn nxcc_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nxcc"))
}

/// The simulated `libwalrus.so` (the `nxcc-walrus` crate's cdylib): cargo keeps the current build in `deps/` (the copy beside the binaries
/// is refreshed only by `cargo build`).
pub fn lib_path() -> PathBuf {
    let dir = sim_exe().parent().unwrap().to_path_buf();
    [dir.join("deps").join(LIB_FILE), dir.join(LIB_FILE)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap()
}

pub fn sources() -> Sources {
    Sources {
        sim: sim_exe(),
        lib: Some(lib_path()),
    }
}

/// A temporary launch directory with a simulated toolchain, a work dir and a model.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub launch: PathBuf,
    pub toolchain: PathBuf,
    pub work: PathBuf,
    pub model: PathBuf,
    pub state: PathBuf,
}

impl Fixture {
    /// `model` is written as a file named `name` (or, for `Model::Dir`, a directory of files).
    pub fn new(model: &ModelSpec) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let launch = dir.path().join("launch");
        let toolchain = dir.path().join("toolchain");
        let work = launch.join("work");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&work).unwrap();
        lay_out_from(&toolchain, &sources()).unwrap();
        let model = match model {
            ModelSpec::File(name, bytes) => {
                let p = launch.join(name);
                std::fs::write(&p, bytes).unwrap();
                p
            }
            ModelSpec::Dir(name, files) => {
                let p = launch.join(name);
                std::fs::create_dir_all(&p).unwrap();
                for (f, bytes) in files {
                    std::fs::write(p.join(f), bytes).unwrap();
                }
                p
            }
        };
        Fixture {
            dir,
            launch,
            toolchain,
            work,
            model,
            state,
        }
    }

    /// The invocation the driver makes of `compile <model> --target trn1 --toolchain <tc> <extra>`.
    pub fn plan(&self, extra: &[&str]) -> Invocation {
        let mut args: Vec<String> = vec![
            "compile".into(),
            self.model.display().to_string(),
            "--target".into(),
            "trn1".into(),
            "--toolchain".into(),
            self.toolchain.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Invocation::from_argv("nxcc", &args, &SystemProbe::at(&self.launch)).unwrap()
    }

    /// A command for `argv` in `cwd` (relative to the work dir), with a clean injection
    /// environment and this fixture's state directory.
    pub fn command(&self, argv: &[String], cwd: &str) -> Command {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).current_dir(self.work.join(cwd));
        for v in SIM_VARS {
            c.env_remove(v);
        }
        c.env("NXCC_SIM_STATE", &self.state);
        c
    }
}

pub enum ModelSpec {
    File(&'static str, Vec<u8>),
    Dir(&'static str, Vec<(&'static str, Vec<u8>)>),
}

pub fn tiny_hlo() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/tiny.hlo")).unwrap()
}

/// A NEFF-shaped file (header + gzip magic), standing in for Kelper's output.
pub fn fake_neff(path: &Path) {
    let mut b = vec![0u8; 1024];
    b[0..8].copy_from_slice(&2u64.to_le_bytes());
    b[8..16].copy_from_slice(&1024u64.to_le_bytes());
    b.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]);
    std::fs::write(path, b).unwrap();
}

/// What ran.
pub struct Ran {
    pub job: &'static str,
    pub argv: Vec<String>,
    pub output: Output,
}

/// Run a plan the way the driver runs it, as far as the simulated toolchain goes: every
/// native-tool step as a real process with the driver's argv and cwd; Frontend through the
/// simulated frontend; Kelper replaced by a NEFF-shaped file. Steps are rebuilt with the work
/// dir's real `value_input*.npy` files, as the driver does at run time. Panics on any failure.
pub fn run_plan(fx: &Fixture, inv: &Invocation) -> Vec<Ran> {
    let plan = &inv.plan;
    let mut ran = Vec::new();
    let mut value_inputs: Vec<String> = std::fs::read_dir(&fx.work)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("value_input") && n.ends_with(".npy"))
        .collect();
    value_inputs.sort();
    let subgraphs = plan.subgraphs.clone();
    for job in &plan.jobs {
        match job.name {
            nxcc::jobs::Job::Frontend => {
                let sgs = nxcc_sim::frontend::run(&plan.model, &fx.work, None).unwrap();
                assert_eq!(
                    sgs, subgraphs,
                    "the plan predicted the frontend's subgraphs"
                );
                continue;
            }
            nxcc::jobs::Job::Kelper => {
                fake_neff(&plan.output);
                continue;
            }
            _ => {}
        }
        let gold = fx.work.join("gold-000.p").exists();
        let ctx = inv.job_context(
            &subgraphs,
            &value_inputs,
            gold,
            plan.toolchain.as_ref(),
            Some(&fx.work),
        );
        let steps: Vec<Step> = (job.name.row().steps)(&ctx).unwrap();
        for step in steps {
            if !matches!(step.action, Action::Exec { .. } | Action::Shell { .. }) {
                continue;
            }
            let argv = step.argv().unwrap();
            let output = fx.command(&argv, &step.cwd).output().unwrap();
            assert!(
                output.status.success(),
                "{} {:?} failed: {:?}\n{}",
                job.name,
                argv,
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            ran.push(Ran {
                job: job.name.name(),
                argv,
                output,
            });
        }
    }
    ran
}

/// Every file under `root`, relative path → bytes, sorted.
pub fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The argv the plan gives the first step of `job`.
pub fn argv_of(inv: &Invocation, job: &str) -> Vec<String> {
    let plan = &inv.plan;
    plan.jobs
        .iter()
        .find(|j| j.name.name() == job)
        .unwrap_or_else(|| panic!("{job} not in the plan {:?}", plan.pipeline))
        .steps[0]
        .argv()
        .unwrap()
}
