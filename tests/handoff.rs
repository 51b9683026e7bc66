//! The hand-off to the worker: an executed worker runs exactly the plan its supervisor built and
//! showed, never one of its own — even when the world it would probe answers differently.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nxcc::cache::CacheConfig;
use nxcc::compile::Request;
use nxcc::engine::log::Console;
use nxcc::engine::session::Options;
use nxcc::engine::Engine;
use nxcc::plan::{dryrun, Invocation, ModelFacts, Probe, SystemProbe, TARGET_OVERRIDE_ENV};
use nxcc::toolchain::{Request as ToolchainRequest, Toolchain};

const NXCC: &str = env!("CARGO_BIN_EXE_nxcc");

/// The system, except that the target override answers `trn1` the first time it is asked and
/// `trn2` every time after: a world that changes between two looks.
struct Twice {
    system: SystemProbe,
    asked: AtomicUsize,
}

impl Probe for Twice {
    fn launch_dir(&self) -> &Path {
        self.system.launch_dir()
    }
    fn env(&self, name: &str) -> Option<String> {
        if name != TARGET_OVERRIDE_ENV {
            return self.system.env(name);
        }
        match self.asked.fetch_add(1, Ordering::SeqCst) {
            0 => Some("trn1".into()),
            _ => Some("trn2".into()),
        }
    }
    fn model(&self, path: &Path) -> Option<ModelFacts> {
        self.system.model(path)
    }
    fn model_graph(&self, path: &Path) -> Option<Result<nxcc::hlo::Module, String>> {
        self.system.model_graph(path)
    }
    fn toolchain(&self, request: &ToolchainRequest) -> Option<Toolchain> {
        self.system.toolchain(request)
    }
    fn cpu_count(&self) -> usize {
        self.system.cpu_count()
    }
}

fn simulated_toolchain(dir: &Path) -> PathBuf {
    let tc = dir.join("tc");
    let o = std::process::Command::new(NXCC)
        .args(["toolchain", "sim"])
        .arg(&tc)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    tc
}

fn plan(dir: &Path, tc: &Path, probe: &dyn Probe) -> Invocation {
    let argv: Vec<String> = ["compile", "m.pb", "--toolchain"]
        .iter()
        .map(|s| s.to_string())
        .chain([tc.display().to_string()])
        .chain(["--output".to_string(), "m.neff".to_string()])
        .collect();
    let _ = dir;
    Invocation::from_argv("nxcc", &argv, probe).unwrap()
}

/// `arg` with the model's private snapshot (`<dir>/nxcc-snapshot-<id>/<name>`, what the tools
/// are given) written as the model's path the plan names (`<dir>/<name>`).
fn as_planned(dir: &Path, arg: &str) -> String {
    let prefix = format!("{}/nxcc-snapshot-", dir.display());
    match arg
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split_once('/'))
    {
        Some((_, name)) => dir.join(name).display().to_string(),
        None => arg.to_string(),
    }
}

/// The tool invocations the simulated tools recorded: (tool, argv after argv[0]).
fn recorded(record: &Path) -> Vec<(String, Vec<String>)> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let argv: Vec<String> = v["argv"]
                .as_array()
                .unwrap()
                .iter()
                .skip(1)
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            (v["tool"].as_str().unwrap().to_string(), argv)
        })
        .collect()
}

#[test]
fn an_executed_worker_runs_exactly_the_plan_its_supervisor_printed() {
    assert!(
        std::env::var_os(TARGET_OVERRIDE_ENV).is_none(),
        "this test needs {TARGET_OVERRIDE_ENV} unset: a worker planning again would find no target"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo_module.pb"),
        d.join("m.pb"),
    )
    .unwrap();
    let tc = simulated_toolchain(d);
    let probe = Twice {
        system: SystemProbe::at(d),
        asked: AtomicUsize::new(0),
    };
    let plan = plan(d, &tc, &probe);
    assert_eq!(plan.inputs.target(), "trn1");
    assert_eq!(probe.asked.load(Ordering::SeqCst), 1);
    let printed = dryrun::to_text(&plan);
    assert!(printed.contains("--target-instance=trn1"), "{printed}");

    let record = d.join("record.jsonl");
    let console = Arc::new(Mutex::new(Vec::new()));
    let c2 = console.clone();
    let options = Options {
        console: Console::Sink(Arc::new(move |l: &str, _| {
            c2.lock().unwrap().push(l.to_string())
        })),
        worker_env: vec![("NXCC_SIM_RECORD".into(), record.display().to_string())],
        // An executed worker (not forked, not the daemon's fork server).
        worker_program: Some(PathBuf::from(NXCC)),
        ..Options::terminal()
    };
    let done = nxcc::compile::compile(Request {
        invocation: &plan,
        options,
        engine: &Engine::Pipeline,
        cache: CacheConfig::off(),
        key: None,
        remote: None,
    });
    assert!(
        done.result.ok(),
        "{:?}\n{:?}",
        done.result,
        console.lock().unwrap()
    );
    assert!(d.join("m.neff").is_file());
    // Nobody looked at the world again: the worker had the plan.
    assert_eq!(probe.asked.load(Ordering::SeqCst), 1);
    // Every native tool step of the printed plan ran with exactly the arguments printed.
    let ran = recorded(&record);
    let mut steps = 0;
    for job in &plan.plan.jobs {
        for step in &job.steps {
            let nxcc::jobs::Action::Exec { tool, args, .. } = &step.action else {
                continue;
            };
            steps += 1;
            let as_planned =
                |a: &[String]| -> Vec<String> { a.iter().map(|x| as_planned(d, x)).collect() };
            assert!(
                ran.iter().any(|(t, a)| t == tool && as_planned(a) == *args),
                "{} {args:?} was not run as planned; ran: {ran:?}",
                job.name
            );
        }
    }
    assert!(steps >= 2, "the plan has native tool steps: {steps}");
    assert!(ran
        .iter()
        .all(|(_, a)| !a.iter().any(|x| x.contains("trn2"))));
}
