//! `nxcc parallel-compile [--jobs N] [--memory-budget SIZE|auto] [--output-dir DIR]
//! [--retries N] [--report FILE] [--timings FILE] [--compiler PATH] [--cache_dir DIR]
//! [--no_cache] INPUT... -- COMPILE-ARGS...`
//!
//! Everything after the first `--` is the compile's command line, shared by every input; each
//! compile gets `INPUT --output <output dir>/<stem>.neff --logfile <output dir>/<stem>.log`
//! appended (so those two, if given, are overridden). `--dry-run`, `--temp-dir` and `--daemon`
//! are refused there. Driver options given before the subcommand (`--verbose`, ...) are passed
//! to every compile.
//!
//! The cache is on by default in [`crate::cache::default_dir`] (`$NEURON_COMPILE_CACHE_URL`, else `/var/tmp/neuron-compile-cache`); `--cache_dir DIR` (here or in
//! the compile arguments) moves it, `--no_cache` turns it off; a remote URL is a usage error.
//!
//! Exit status: 0 when every compile succeeded, 70 when any failed, 130/143 when interrupted, 2
//! for a usage error (nothing compiled).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use super::{expand_inputs, report, Config, ProgressMode};
use crate::cache::{check_local, DEFAULT_DIR};
use crate::cli::argparse::{Nargs, Positional};
use crate::cli::flags::{flag, Action, Choices, Default, Flag, Kind, Scope, Visibility};
use crate::cli::subcommand::{err, out, Stop, Subcommand, HELP};
use crate::engine::Engine;
use crate::error::EXIT_COMPILE_FAILED;
use crate::run::process::Cancel;

#[rustfmt::skip]
static JOBS: Flag = flag("--jobs", &["-j"], "jobs", Action::Store, Kind::Int, Default::Derived("the number of CPUs"), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "At most this many compiles at once.");
#[rustfmt::skip]
static BUDGET: Flag = flag("--memory-budget", &[], "memory_budget", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Start a compile only while the estimated peak memory of the running ones plus its own fits (512M, 16G, ...; auto = 80% of MemAvailable).");
#[rustfmt::skip]
static OUTPUT_DIR: Flag = flag("--output-dir", &[], "output_dir", Action::Store, Kind::Path, Default::Str("."), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Where <stem>.neff and <stem>.log of each input go (created if missing).");
#[rustfmt::skip]
static RETRIES: Flag = flag("--retries", &[], "retries", Action::Store, Kind::Int, Default::Int(0), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Retry a failed compile this many times (a compile ending in [F137] is also retried once alone first).");
#[rustfmt::skip]
static REPORT: Flag = flag("--report", &[], "report", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Write the results as JSON to FILE.");
#[rustfmt::skip]
static TIMINGS: Flag = flag("--timings", &[], "timings", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Write an HTML timeline (one lane per worker slot) to FILE.");
#[rustfmt::skip]
static COMPILER: Flag = flag("--compiler", &[], "compiler", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Run each compile as one job `PATH compile <args> --output <out>` (e.g. an installed neuronx-cc) instead of nxcc's pipeline.");
#[rustfmt::skip]
static CACHE_DIR: Flag = flag("--cache_dir", &["--cache-dir"], "cache_dir", Action::Store, Kind::Path, Default::Str(DEFAULT_DIR), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The compile cache directory.");
#[rustfmt::skip]
static NO_CACHE: Flag = flag("--no_cache", &["--no-cache"], "no_cache", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Do not use the compile cache.");

#[rustfmt::skip]
static REMOTE: Flag = flag("--remote", &[], "remote", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Compile on a Remote Execution API service (grpc://HOST:PORT): each compile's --remote (raise --jobs: the compiles run on the server's workers).");
#[rustfmt::skip]
static REMOTE_CACHE: Flag = flag("--remote-cache", &[], "remote_cache", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Share results through a Remote Execution API action cache (grpc://HOST:PORT): each compile's --remote-cache.");
#[rustfmt::skip]
static REMOTE_INSTANCE: Flag = flag("--remote-instance", &[], "remote_instance", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The instance name on the remote server.");

static OWN_FLAGS: [&Flag; 13] = [
    &HELP,
    &JOBS,
    &BUDGET,
    &OUTPUT_DIR,
    &RETRIES,
    &REPORT,
    &TIMINGS,
    &COMPILER,
    &CACHE_DIR,
    &NO_CACHE,
    &REMOTE,
    &REMOTE_CACHE,
    &REMOTE_INSTANCE,
];

const POSITIONALS: [Positional; 1] = [Positional {
    metavar: "INPUT",
    nargs: Nargs::OneOrMore,
    help: "A model file, or a directory of *.pb / *.hlo files; the compile arguments follow `--`.",
}];

static COMMAND: Subcommand = Subcommand {
    name: "parallel-compile",
    flags: &OWN_FLAGS,
    positionals: &POSITIONALS,
    about: "Compile many models at once, within a memory budget, through the compile cache.",
};

fn usage_error(prog: &str, message: String) -> i32 {
    Stop::Usage(COMMAND.usage_error(prog, message)).report()
}

/// Run `parallel-compile` with its arguments; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let (own, compile_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &args[args.len()..]),
    };
    let parsed = match COMMAND.parse(prog, own) {
        Ok(p) => p,
        Err(stop) => return stop.report(),
    };
    let launch_dir = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            err(&format!("[ERROR] cannot read the current directory: {e}\n"));
            return EXIT_COMPILE_FAILED;
        }
    };
    let jobs = match parsed.last("jobs").and_then(|o| o.value.as_int()) {
        None => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        Some(n) if n >= 1 => n as usize,
        Some(n) => {
            return usage_error(
                prog,
                format!("argument --jobs/-j: must be at least 1, got {n}"),
            )
        }
    };
    let retries = match parsed.last("retries").and_then(|o| o.value.as_int()) {
        None => 0,
        Some(n) if n >= 0 => n as u32,
        Some(n) => {
            return usage_error(
                prog,
                format!("argument --retries: must be at least 0, got {n}"),
            )
        }
    };
    let memory_budget = match parsed.str("memory_budget") {
        None => None,
        Some(s) => match crate::admission::parse_size(s) {
            Ok(n) => Some(n),
            Err(e) => return usage_error(prog, format!("argument --memory-budget: {e}")),
        },
    };
    let no_cache = parsed.flag("no_cache");
    // The cache dir: this command's option, else the compile arguments', else the default.
    let compile_cache_dir = compile_args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            a.strip_prefix("--cache_dir=")
                .or_else(|| a.strip_prefix("--cache-dir="))
                .map(str::to_string)
                .or_else(|| {
                    (a == "--cache_dir" || a == "--cache-dir")
                        .then(|| compile_args.get(i + 1).cloned())
                        .flatten()
                })
        })
        .next_back();
    let cache_dir = if no_cache {
        None
    } else {
        let d = parsed
            .str("cache_dir")
            .map(str::to_string)
            .or(compile_cache_dir)
            .unwrap_or_else(crate::cache::default_dir);
        if let Err(e) = check_local(&d) {
            return usage_error(
                prog,
                format!("argument --cache_dir: {}", e.cause.to_lowercase()),
            );
        }
        Some(crate::plan::absolute(&launch_dir, &d))
    };
    let output_dir = crate::plan::absolute(&launch_dir, parsed.str("output_dir").unwrap_or("."));
    let inputs = match expand_inputs(&parsed.positionals[0], &launch_dir) {
        Ok(i) => i,
        Err(e) => return usage_error(prog, format!("argument INPUT: {e}")),
    };
    if let Err(e) = std::fs::create_dir_all(&output_dir) {
        err(&format!(
            "{prog} parallel-compile: error: cannot create the output directory {}: {e}\n",
            output_dir.display()
        ));
        return EXIT_COMPILE_FAILED;
    }
    // Driver options given before the subcommand go to every compile.
    let mut shared: Vec<String> = Vec::new();
    for occ in &parsed.occurrences {
        if occ.flag.scope == Scope::Driver && !OWN_FLAGS.iter().any(|f| std::ptr::eq(*f, occ.flag))
        {
            shared.push(occ.option_string.clone());
            if let Some(v) = occ.value.as_str() {
                shared.push(v.to_string());
            } else if let Some(n) = occ.value.as_int().filter(|_| occ.flag.takes_value()) {
                shared.push(n.to_string());
            }
        }
    }
    shared.extend(compile_args.iter().cloned());
    // The remote server: every compile's own --remote / --remote-cache / --remote-instance.
    for dest in ["remote", "remote_cache", "remote_instance"] {
        if let Some(v) = parsed.str(dest) {
            shared.push(format!("--{}={v}", dest.replace('_', "-")));
        }
    }
    if let Err(e) = crate::remote::RemoteConfig::from_flags(
        parsed.str("remote").map(str::to_string),
        parsed.str("remote_cache").map(str::to_string),
        "",
    ) {
        return usage_error(prog, format!("argument --remote: {}", e.cause));
    }
    let cfg = Config {
        prog: prog.to_string(),
        jobs,
        memory_budget,
        output_dir,
        retries,
        engine: match parsed.str("compiler") {
            Some(c) => Engine::external(PathBuf::from(c)),
            None => Engine::Pipeline,
        },
        cache_dir,
        launch_dir,
        worker_program: None,
        progress: ProgressMode::detect(),
    };
    let cancel = Cancel::new();
    let interrupted = Arc::new(AtomicI32::new(0));
    if let Ok(s) = crate::run::signals::install() {
        let (c, which) = (cancel.clone(), interrupted.clone());
        s.on_signal(move |sig| {
            let _ = which.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
            c.cancel();
        });
    }
    let report = match super::run(&cfg, &inputs, &shared, &cancel, &interrupted) {
        Ok(r) => r,
        Err(e) => return Stop::Usage(e).report(),
    };
    out(&report::table(&report));
    err(&report::failures(&report));
    let mut status = report.exit_status();
    for (flag, text, what) in [
        ("report", report::json(&report), "report"),
        ("timings", report::timings_html(&report), "timeline"),
    ] {
        if let Some(path) = parsed.str(flag) {
            let path = crate::plan::absolute(&cfg.launch_dir, path);
            if let Err(e) = report::write_atomic(&path, &text) {
                err(&format!(
                    "{prog} parallel-compile: error: cannot write the {what} {}: {e}\n",
                    path.display()
                ));
                status = EXIT_COMPILE_FAILED;
            }
        }
    }
    match interrupted.load(Ordering::SeqCst) {
        0 => status,
        sig => crate::run::signals::exit_status_for(sig),
    }
}
