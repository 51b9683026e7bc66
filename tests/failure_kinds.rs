//! Every kind of failure, produced for real — a tool's exit 3, its SIGSEGV, its SIGKILL (the
//! out-of-memory path), a `--job-timeout`, a missing tool, a full disk (a tmpfs), a simulator
//! setting that does not read, a remote server that is down — and what each consumer makes of it: its typed failure, the exit status, whether
//! the compile cache remembers it, the answer a remote worker gives for it, whether
//! `parallel-compile` tries it again alone, and whether the framework's cache gets a `model.log`.

mod common;

use std::path::{Path, PathBuf};

use common::{cache_entries, text, Scratch, NXCC};
use nxcc::cache::CacheConfig;
use nxcc::compile::Request;
use nxcc::engine::log::Console;
use nxcc::engine::session::Options;
use nxcc::engine::Engine;
use nxcc::plan::{Invocation, SystemProbe};
use nxcc::remote::worker::job::{answer, Answer};
use nxcc::remote::worker::status::Refusal;
use nxcc::remote::worker::With;
use nxcc::result::{Environment, Failure, IoCause, JobEnd, RemoteFailure, Status};

/// One way to fail.
struct Kind {
    name: &'static str,
    /// `NXCC_SIM_FAULT`, if the fault is the simulated tool's.
    fault: Option<&'static str>,
    /// Extra compile arguments.
    args: &'static [&'static str],
    /// Whether the failure is one of the model's (the caches remember it).
    of_the_model: bool,
    /// Whether `parallel-compile` tries it again alone.
    alone: bool,
    /// The failure expected.
    is: fn(&Failure) -> bool,
}

const KINDS: &[Kind] = &[
    Kind {
        name: "exit 3",
        fault: Some("walrus_driver:exit=3"),
        args: &[],
        of_the_model: true,
        alone: false,
        is: |f| matches!(f, Failure::Job { job: Some(job), end: JobEnd::Exited(3) } if job == "WalrusDriver"),
    },
    Kind {
        name: "SIGSEGV",
        fault: Some("walrus_driver:segv"),
        args: &[],
        of_the_model: true,
        alone: false,
        is: |f| {
            matches!(
                f,
                Failure::Job {
                    end: JobEnd::Crashed(libc::SIGSEGV),
                    ..
                }
            )
        },
    },
    Kind {
        name: "SIGKILL",
        fault: Some("walrus_driver:kill"),
        args: &[],
        of_the_model: false,
        alone: true,
        is: |f| matches!(f, Failure::OutOfMemory { job: Some(j), .. } if j == "WalrusDriver"),
    },
    Kind {
        name: "timeout",
        fault: Some("walrus_driver:hang"),
        args: &["--job-timeout", "1"],
        of_the_model: false,
        alone: false,
        is: |f| matches!(f, Failure::Timeout { job, .. } if job == "WalrusDriver"),
    },
    Kind {
        name: "missing tool",
        fault: None,
        args: &[],
        of_the_model: false,
        alone: false,
        is: |f| matches!(f, Failure::Environment(Environment::MissingTool(_))),
    },
    Kind {
        name: "disk full",
        fault: None,
        args: &["--temp-dir", "full/work"],
        of_the_model: false,
        alone: false,
        is: |f| matches!(f, Failure::Environment(Environment::Io(IoCause::DiskFull))),
    },
    Kind {
        name: "a malformed simulator setting",
        fault: Some("walrus_driver:bogus"),
        args: &[],
        of_the_model: false,
        alone: false,
        is: |f| matches!(f, Failure::Environment(Environment::Setting)),
    },
    Kind {
        name: "remote server down",
        fault: None,
        args: &["--remote", "grpc://127.0.0.1:1"],
        of_the_model: false,
        alone: false,
        is: |f| matches!(f, Failure::Remote(RemoteFailure::Unreachable)),
    },
];

/// A small tmpfs, filled but for a few KiB: every tool that writes there finds no space.
struct Full(PathBuf);

impl Full {
    fn mount(dir: PathBuf) -> Full {
        std::fs::create_dir_all(&dir).unwrap();
        let o = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=600k", "tmpfs"])
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(
            o.status.success(),
            "this test needs a small tmpfs and cannot mount one here: {}",
            text(&o.stderr)
        );
        let full = Full(dir);
        full.fill(8192);
        full
    }

    /// Fill it again, leaving about `free` bytes.
    fn fill(&self, free: u64) {
        let _ = std::fs::remove_file(self.0.join("filler"));
        let st = rustix::fs::statvfs(&self.0).unwrap();
        let avail = st.f_bavail * st.f_frsize;
        std::fs::write(self.0.join("filler"), vec![0u8; (avail - free) as usize]).unwrap();
    }
}

impl Drop for Full {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A scratch directory where `kind` fails: the simulated toolchain laid out in `tc/` (without
/// `walrus_driver` for a missing tool), and the full tmpfs at `full/` (kept mounted while the
/// caller holds it).
fn scratch_for(kind: &Kind) -> (Scratch, Option<Full>) {
    let s = Scratch::new();
    let o = s.run(&["toolchain", "sim", "tc"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    if kind.name == "missing tool" {
        std::fs::remove_file(s.join("tc/bin/walrus_driver")).unwrap();
    }
    let full = (kind.name == "disk full").then(|| Full::mount(s.join("full")));
    (s, full)
}

/// `compile MODEL --target trn2 --output OUTPUT` and the kind's arguments (its paths absolute:
/// a framework cache entry is compiled in a directory of its own).
fn argv(s: &Scratch, kind: &Kind, model: &str, output: &str) -> Vec<String> {
    let mut a: Vec<String> = ["compile", model, "--target", "trn2", "--output", output]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend([
        "--toolchain".to_string(),
        s.join("tc").display().to_string(),
    ]);
    a.extend(kind.args.iter().map(|a| match *a {
        "full/work" => s.join(a).display().to_string(),
        _ => a.to_string(),
    }));
    a
}

fn entries(cache: &Path, file: &str) -> usize {
    cache_entries(cache)
        .iter()
        .filter(|e| e.join(file).is_file())
        .count()
}

#[test]
fn each_failure_is_typed_and_each_consumer_decides_on_its_kind() {
    for kind in KINDS {
        let (s, _full) = scratch_for(kind);
        let mut a = argv(&s, kind, "mlp.hlo_module.pb", "out.neff");
        a.extend(["--cache_dir".to_string(), "cache".to_string()]);
        let plan = Invocation::from_argv("nxcc", &a, &SystemProbe::at(s.path())).unwrap();
        let mut env = vec![(
            "NXCC_SIM_STATE".to_string(),
            s.join(".state").display().to_string(),
        )];
        if let Some(f) = kind.fault {
            env.push(("NXCC_SIM_FAULT".into(), f.into()));
        }
        let options = Options {
            console: Console::Sink(std::sync::Arc::new(|_: &str, _| {})),
            worker_env: env,
            worker_program: Some(PathBuf::from(NXCC)),
            ..Options::terminal()
        };
        let done = nxcc::compile::compile(Request {
            invocation: &plan,
            options,
            engine: &Engine::Pipeline,
            cache: CacheConfig::of(&plan, None).unwrap(),
            key: None,
            remote: nxcc::remote::RemoteConfig::of(&plan).unwrap(),
        });
        let r = &done.result;
        let ctx = format!("{}: {:?}\n{}", kind.name, r.status, r.lines.join("\n"));
        let Status::Failed(failure) = &r.status else {
            panic!("{ctx}")
        };
        assert!((kind.is)(failure), "{ctx}");
        // The exit status.
        assert_eq!(r.exit_status(), 70, "{ctx}");
        // The compile cache: only a failure of the model is remembered.
        assert_eq!(
            nxcc::recon::cache::remembers(failure),
            kind.of_the_model,
            "{ctx}"
        );
        let remembered = entries(&s.join("cache"), "failed.json");
        assert_eq!(remembered, usize::from(kind.of_the_model), "{ctx}");
        assert_eq!(entries(&s.join("cache"), "model.neff"), 0, "{ctx}");
        // A remote worker's answer: the compile's exit status in its ActionResult, but a worker
        // whose disk filled up refuses (another worker may have room).
        let worker = answer(&With::Toolchain("sim".into()), r);
        match kind.name {
            "disk full" => assert!(
                matches!(worker, Answer::Refuse(Refusal::Exhausted(_))),
                "{ctx}: {worker:?}"
            ),
            _ => assert_eq!(
                worker,
                Answer::Result {
                    exit_code: 70,
                    timed_out: false
                },
                "{ctx}"
            ),
        }
        // An external compiler's own exit code, as a shell reports it.
        let external = answer(&With::Compiler(PathBuf::from("/c")), r);
        let code = match kind.name {
            "exit 3" => 3,
            "SIGSEGV" => 128 + libc::SIGSEGV,
            "SIGKILL" => 128 + libc::SIGKILL,
            "timeout" => 124,
            "missing tool" => 127,
            _ => -1,
        };
        if code >= 0 {
            assert_eq!(
                external,
                Answer::Result {
                    exit_code: code,
                    timed_out: false
                },
                "{ctx}"
            );
        }
    }
}

#[test]
fn parallel_compile_retries_alone_only_a_kill_and_the_framework_cache_logs_only_the_models() {
    for kind in KINDS {
        let (s, full) = scratch_for(kind);
        // A plain batch of one input: tried again alone, or not.
        let mut a = vec![
            "parallel-compile".to_string(),
            "mlp.hlo_module.pb".into(),
            "--cache_dir".into(),
            "cache".into(),
            "--output-dir".into(),
            "out".into(),
            "--report".into(),
            "report.json".into(),
            "--".into(),
            "--target".into(),
            "trn2".into(),
        ];
        // parallel-compile makes each compile's work dir itself: in its output directory, or for
        // a framework cache entry in $TMPDIR; a full disk is put there.
        let disk_full = kind.name == "disk full";
        if disk_full {
            a[5] = "full/out".into();
        }
        let compile: Vec<String> = argv(&s, kind, "x", "x")
            .into_iter()
            .skip(6)
            .filter(|a| !a.starts_with("--temp-dir") && !a.contains("full/work"))
            .collect();
        a.extend(compile.iter().cloned());
        let mut cmd = s.nxcc(&a.iter().map(String::as_str).collect::<Vec<_>>());
        if let Some(f) = kind.fault {
            cmd.env("NXCC_SIM_FAULT", f);
        }
        let o = cmd.output().unwrap();
        let ctx = format!("{}:\n{}", kind.name, text(&o.stderr));
        assert_eq!(o.status.code(), Some(70), "{ctx}");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(s.join("report.json")).unwrap()).unwrap();
        let attempts = report["compiles"][0]["attempts"]
            .as_array()
            .unwrap()
            .clone();
        let alone: Vec<bool> = attempts
            .iter()
            .map(|a| a["alone"].as_bool().unwrap())
            .collect();
        if disk_full {
            let lines = report["compiles"][0]["error_lines"].to_string();
            assert!(lines.contains("No space left on device"), "{ctx}\n{lines}");
        }
        let expected: &[bool] = if kind.alone { &[false, true] } else { &[false] };
        assert_eq!(alone, expected, "{ctx}");
        assert_eq!(
            entries(&s.join("cache"), "failed.json"),
            usize::from(kind.of_the_model),
            "{ctx}"
        );

        // An entry of the framework's cache: a model.log only for a failure of the model.
        let entry = s.join("nc/neuronxcc-2.24.5133.0+nxcc-sim/MODULE_k+d41d8cd9");
        std::fs::create_dir_all(&entry).unwrap();
        std::fs::copy(
            s.join("mlp.hlo_module.pb"),
            entry.join("model.hlo_module.pb"),
        )
        .unwrap();
        std::fs::write(entry.join("compile_flags.json"), b"[]").unwrap();
        let tmp = s.join(if disk_full { "full/tmp" } else { "tmp" });
        std::fs::create_dir_all(&tmp).unwrap();
        if let Some(full) = &full {
            // Room for the entry's graph and its lock, none for the tools' files.
            full.fill(16 << 10);
        }
        let mut a = vec![
            "parallel-compile".to_string(),
            "--neuron-cache".into(),
            "nc".into(),
            "--allow-simulated".into(),
            "--".into(),
            "--target".into(),
            "trn2".into(),
        ];
        a.extend(compile.iter().cloned());
        let mut cmd = s.nxcc(&a.iter().map(String::as_str).collect::<Vec<_>>());
        cmd.env("TMPDIR", &tmp);
        if let Some(f) = kind.fault {
            cmd.env("NXCC_SIM_FAULT", f);
        }
        let o = cmd.output().unwrap();
        let ctx = format!("{} (framework cache):\n{}", kind.name, text(&o.stderr));
        assert_eq!(o.status.code(), Some(70), "{ctx}");
        assert!(!entry.join("model.neff").exists(), "{ctx}");
        if disk_full {
            assert!(ctx.contains("No space left on device"), "{ctx}");
        }
        assert_eq!(
            entry.join("model.log").is_file(),
            kind.of_the_model,
            "{ctx}"
        );
    }
}
