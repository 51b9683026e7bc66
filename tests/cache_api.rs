//! The library's entry point, as the daemon uses it: `compile::compile` through the cache, with a
//! console sink and an event callback, through the built binary as the worker.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nxcc::cache::{self, CacheConfig, CacheStatus};
use nxcc::compile::{Compiled, Request};
use nxcc::engine::events::Event;
use nxcc::engine::log::Console;
use nxcc::engine::session::{Cancellation, Options};
use nxcc::engine::Engine;
use nxcc::plan::{Invocation, SystemProbe};
use nxcc::result::Status;

const NXCC: &str = env!("CARGO_BIN_EXE_nxcc");

fn plan(dir: &Path, args: &[&str]) -> Invocation {
    let argv: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    Invocation::from_argv("nxcc", &argv, &SystemProbe::at(dir)).unwrap()
}

struct Run {
    events: Vec<Event>,
    console: Vec<String>,
    done: Compiled,
}

fn compile(plan: &Invocation, cfg: &CacheConfig, record: &Path) -> Run {
    let events = Mutex::new(Vec::new());
    let console = Arc::new(Mutex::new(Vec::new()));
    let c2 = console.clone();
    let on_event = |e: &Event| events.lock().unwrap().push(e.clone());
    let opts = Options {
        console: Console::Sink(Arc::new(move |l: &str, _| {
            c2.lock().unwrap().push(l.to_string())
        })),
        cancel: Cancellation::new(),
        worker_env: vec![("NXCC_SIM_RECORD".into(), record.display().to_string())],
        on_event: Some(&on_event),
        worker_program: Some(PathBuf::from(NXCC)),
        sole_compile: false,
        install_signals: false,
        fork_server: None,
        work_root: None,
        private_model: false,
    };
    let done = nxcc::compile::compile(Request {
        invocation: plan,
        options: opts,
        engine: &Engine::Pipeline,
        cache: cfg.clone(),
        key: None,
        remote: None,
    });
    let console = console.lock().unwrap().clone();
    Run {
        events: events.into_inner().unwrap(),
        console,
        done,
    }
}

#[test]
fn compile_cached_serves_hits_with_events_and_learns_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo_module.pb"),
        d.join("m.pb"),
    )
    .unwrap();
    let tc = d.join("tc");
    let o = std::process::Command::new(NXCC)
        .args(["toolchain", "sim"])
        .arg(&tc)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tc = tc.display().to_string();
    let record = d.join("record.jsonl");
    let args = |out: &'static str| {
        vec![
            "compile",
            "m.pb",
            "--target",
            "trn2",
            "--toolchain",
            &tc,
            "--output",
            out,
        ]
    };
    let first = plan(d, &args("a.neff"));
    let default_dir = d.join("cache");
    let cfg = CacheConfig::of(&first, Some(&default_dir)).unwrap();
    assert_eq!(cfg.dir.as_deref(), Some(default_dir.as_path()));

    let miss = compile(&first, &cfg, &record);
    assert_eq!(miss.done.result.exit_status(), 0);
    assert_eq!(miss.done.cache, CacheStatus::Miss);
    assert!(miss
        .done
        .entry
        .as_ref()
        .unwrap()
        .join("model.neff")
        .is_file());
    assert!(miss
        .events
        .iter()
        .any(|e| matches!(e, Event::JobFinished(m) if m.job == "WalrusDriver")));
    let runs = std::fs::read_to_string(&record).unwrap().lines().count();
    assert!(runs >= 3);

    let hit = compile(&plan(d, &args("b.neff")), &cfg, &record);
    assert_eq!(hit.done.result.exit_status(), 0);
    assert_eq!(hit.done.cache, CacheStatus::Hit);
    assert_eq!(
        hit.events,
        vec![Event::Done {
            exit_status: 0,
            status: Some(Status::Succeeded)
        }]
    );
    assert!(
        hit.console
            .iter()
            .any(|l| l.contains("Using a cached neff at ")),
        "{:?}",
        hit.console
    );
    assert_eq!(
        std::fs::read(d.join("b.neff")).unwrap(),
        std::fs::read(d.join("a.neff")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(&record).unwrap().lines().count(),
        runs
    );

    // What the compile needed is known now, for this key and for similar ones.
    let key = miss.done.key.unwrap();
    let est = cache::estimate(cfg.cache().as_ref(), &key);
    assert_eq!(est.basis, cache::Basis::Recorded);
    let peak = miss
        .done
        .result
        .jobs
        .iter()
        .map(|j| j.max_rss_kb)
        .max()
        .unwrap();
    assert_eq!(est.bytes, peak * 1024);

    // --no_cache turns the default off.
    let mut no = args("c.neff");
    no.push("--no_cache");
    let off_plan = plan(d, &no);
    let off = CacheConfig::of(&off_plan, Some(&default_dir)).unwrap();
    assert_eq!(off.dir, None);
    let r = compile(&off_plan, &off, &record);
    assert_eq!(r.done.cache, CacheStatus::Off);
    assert!(std::fs::read_to_string(&record).unwrap().lines().count() > runs);
}
