//! `nxcc parallel-compile [--jobs N] [--memory-budget SIZE|auto] [--output-dir DIR]
//! [--retries N] [--report FILE] [--timings FILE] [--profile FILE] [--compiler PATH] [--cache_dir DIR]
//! [--no_cache] INPUT... -- COMPILE-ARGS...`
//!
//! Everything after the first `--` is the compile's command line, shared by every input; each
//! compile gets `INPUT --output <output dir>/<stem>.neff --logfile <output dir>/<stem>.log`
//! appended (so those two, if given, are overridden). `--dry-run`, `--temp-dir` and `--daemon`
//! are refused there. Driver options given before the subcommand (`--verbose`, ...) are passed
//! to every compile.
//!
//! The cache is on by default in [`crate::cache::default_dir`] (nxcc's own per-user directory, never inside the framework's cache); `--cache_dir DIR` (here or in
//! the compile arguments) moves it, `--no_cache` turns it off; a remote URL is a usage error.
//!
//! `--neuron-cache [DIR]` compiles the entries to do of the framework's compile cache instead of
//! INPUTs (see [`super::neuron`]): `--neuron-version V`, `--allow-simulated` (the simulated
//! toolchain is refused otherwise), `--break-locks`, `--retry_failed_compilation`. nxcc's own
//! optional values need `=`, so `--neuron-cache DIR` reads the one word after it as DIR.
//!
//! Exit status: 0 when every compile succeeded, 70 when any failed, 130/143 when interrupted, 2
//! for a usage error (nothing compiled).

use std::path::PathBuf;

use super::{expand_inputs, report, Config, ProgressMode};
use crate::cache::{check_local, DEFAULT_DIR_TEXT};
use crate::cli::argparse::{Nargs, Parsed, Positional};
use crate::cli::flags::{flag, Action, Choices, Default, Flag, Kind, Scope, Visibility};
use crate::cli::subcommand::{err, out, Stop, Subcommand, HELP};
use crate::cli::CliError;
use crate::engine::session::Cancellation;
use crate::engine::Engine;
use crate::error::EXIT_COMPILE_FAILED;
use crate::neuron_cache::Location;

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
    "Write an HTML page of the batch to FILE: a bar per compile coloured by outcome (one lane per worker slot), the memory in use against the budget, the slowest compiles, the failures by code, the hits.");
#[rustfmt::skip]
static PROFILE: Flag = flag("--profile", &[], "profile", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Write the batch as a Chrome trace to FILE (opens in Perfetto): a complete event per compile on its slot's track, its jobs inside it, the memory counter.");
#[rustfmt::skip]
static COMPILER: Flag = flag("--compiler", &[], "compiler", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Run each compile as one job `PATH compile <args> --output <out>` (e.g. an installed neuronx-cc) instead of nxcc's pipeline.");
#[rustfmt::skip]
static CACHE_DIR: Flag = flag("--cache_dir", &["--cache-dir"], "cache_dir", Action::Store, Kind::Path, Default::Derived(DEFAULT_DIR_TEXT), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The compile cache directory.");
#[rustfmt::skip]
static NO_CACHE: Flag = flag("--no_cache", &["--no-cache"], "no_cache", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Do not use the compile cache.");

#[rustfmt::skip]
static NEURON_CACHE: Flag = flag("--neuron-cache", &[], "neuron_cache", Action::StoreOptional { constant: "" }, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Compile the entries to do of the framework's compile cache DIR (default: --cache_dir of NEURON_CC_FLAGS, else NEURON_COMPILE_CACHE_URL, else /var/tmp/neuron-compile-cache) into their model.neff, instead of INPUTs.");
#[rustfmt::skip]
static NEURON_VERSION: Flag = flag("--neuron-version", &[], "neuron_version", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "With --neuron-cache: the compiler version whose neuronxcc-<version> directory is compiled (default: what --compiler PATH --version says; 2.24.5133.0+nxcc-sim on the simulated toolchain).");
#[rustfmt::skip]
static ALLOW_SIMULATED: Flag = flag("--allow-simulated", &[], "allow_simulated", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "With --neuron-cache: let the simulated toolchain write its NEFFs (which cannot run on hardware) into the cache (for tests).");
#[rustfmt::skip]
static BREAK_LOCKS: Flag = flag("--break-locks", &[], "break_locks", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "With --neuron-cache: take over lock files nxcc did not make (a compile the framework is running loses its entry).");
#[rustfmt::skip]
static RETRY_FAILED: Flag = flag("--retry_failed_compilation", &["--retry-failed-compilation"], "retry_failed_compilation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Compile again what failed before (a failure nxcc's cache remembers; with --neuron-cache, entries with a model.log).");

#[rustfmt::skip]
static REMOTE: Flag = flag("--remote", &[], "remote", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Compile on a Remote Execution API service (grpc://HOST:PORT): each compile's --remote (raise --jobs: the compiles run on the server's workers).");
#[rustfmt::skip]
static REMOTE_CACHE: Flag = flag("--remote-cache", &[], "remote_cache", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Share results through a Remote Execution API action cache (grpc://HOST:PORT): each compile's --remote-cache.");
#[rustfmt::skip]
static REMOTE_INSTANCE: Flag = flag("--remote-instance", &[], "remote_instance", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The instance name on the remote server.");

#[rustfmt::skip]
static GEN_REPRODUCER: Flag = flag("--gen-reproducer", &[], "gen_reproducer", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Write a reproducer bundle (nxcc-reproducer-<key>.tar.gz) for every graph that failed; the report and the timings page link them.");
#[rustfmt::skip]
static REPRODUCER_DIR: Flag = flag("--reproducer-dir", &[], "reproducer_dir", Action::Store, Kind::Path, Default::Derived("the output directory"), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Where --gen-reproducer writes the bundles.");
#[rustfmt::skip]
static REPRODUCER_STRIP: Flag = flag("--reproducer-strip-constants", &[], "reproducer_strip_constants", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "In the bundles, replace the models' constants by zeros of the same shape.");

static OWN_FLAGS: [&Flag; 22] = [
    &HELP,
    &JOBS,
    &BUDGET,
    &OUTPUT_DIR,
    &RETRIES,
    &REPORT,
    &TIMINGS,
    &PROFILE,
    &GEN_REPRODUCER,
    &REPRODUCER_DIR,
    &REPRODUCER_STRIP,
    &COMPILER,
    &CACHE_DIR,
    &NO_CACHE,
    &NEURON_CACHE,
    &NEURON_VERSION,
    &ALLOW_SIMULATED,
    &BREAK_LOCKS,
    &RETRY_FAILED,
    &REMOTE,
    &REMOTE_CACHE,
    &REMOTE_INSTANCE,
];

const POSITIONALS: [Positional; 1] = [Positional {
    metavar: "INPUT",
    nargs: Nargs::ZeroOrMore,
    help: "A model file, or a directory of *.pb / *.hlo files (none with --neuron-cache); the compile arguments follow `--`.",
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

/// The first of this command's arguments that is no option of its own but one of `compile`'s
/// (the compile arguments given before `--`).
fn misplaced_compile_option<'a>(prog: &str, own: &'a [String]) -> Option<&'a String> {
    let ours = COMMAND.full_parser(prog);
    let compile = crate::cli::compile_parser(prog);
    own.iter()
        .find(|t| !ours.recognises(t) && compile.recognises(t))
}

/// A usage error in the compile arguments, found before anything ran: one line naming it (not
/// `compile`'s usage).
fn compile_args_error(prog: &str, e: CliError) -> i32 {
    let message = match e {
        // `compile`'s own parser or plan builder: the arguments after `--` are at fault.
        CliError::Usage {
            prog: p, message, ..
        } if p.ends_with(" compile") => {
            format!("the compile arguments (after `--`): {message}")
        }
        CliError::Usage { message, .. } => message,
        CliError::Unrecognized { args, hints, .. } => {
            let mut m = format!(
                "the compile arguments (after `--`): unrecognized arguments: {}",
                args.join(" ")
            );
            for h in hints {
                m.push('\n');
                m.push_str(&h);
            }
            m
        }
    };
    err(&format!("{prog} parallel-compile: error: {message}\n"));
    CliError::EXIT_STATUS
}

/// A phase's end when the command cannot go on: the exit status (what went wrong was said).
type Stopped = i32;

/// Run `parallel-compile` with its arguments; returns the exit status. Its phases: its own
/// options read and checked (`own_options`, `limits`, `sources`, `cache_dir_of`), the compile
/// arguments every compile shares (`shared_args`), the inputs (files, or the framework cache's
/// entries: `neuron_inputs`), the batch ([`super::run`]), and its reports (`finish`).
pub fn main(prog: &str, args: &[String]) -> i32 {
    match run(prog, args) {
        Ok(status) | Err(status) => status,
    }
}

fn run(prog: &str, args: &[String]) -> Result<i32, Stopped> {
    let (own, compile_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &args[args.len()..]),
    };
    let parsed = own_options(prog, own)?;
    let launch_dir = std::env::current_dir().map_err(|e| {
        err(&format!("[ERROR] cannot read the current directory: {e}\n"));
        EXIT_COMPILE_FAILED
    })?;
    let (jobs, retries, memory_budget) = limits(prog, &parsed)?;
    let (neuron_dir, positionals) = sources(prog, &parsed, &launch_dir)?;
    let cache_dir = cache_dir_of(prog, &parsed, compile_args, &launch_dir)?;
    let output_dir = crate::plan::absolute(&launch_dir, parsed.str("output_dir").unwrap_or("."));
    let mut shared = shared_args(prog, &parsed, compile_args)?;
    let engine = match parsed.str("compiler") {
        Some(c) => Engine::external(PathBuf::from(c)),
        None => Engine::Pipeline,
    };
    let (neuron, inputs, skipped, cache_dir) = match &neuron_dir {
        None => {
            let inputs = file_inputs(prog, &positionals, &launch_dir, &output_dir)?;
            (None, inputs, Vec::new(), cache_dir)
        }
        Some(dir) => {
            let retry_failed = parsed.flag("retry_failed_compilation")
                || compile_args.iter().any(|a| {
                    a == "--retry_failed_compilation" || a == "--retry-failed-compilation"
                });
            shared = super::neuron::anchor_toolchain(&shared, &launch_dir);
            // (Nothing of nxcc's is ever laid out in a bucket.)
            if let crate::neuron_cache::Location::Dir(d) = dir {
                super::neuron::outside(
                    prog,
                    d,
                    cache_dir.as_deref(),
                    &engine,
                    &shared,
                    &launch_dir,
                )
                .map_err(|message| usage_error(prog, message))?;
            }
            let req = super::neuron::Request {
                cache: dir,
                version: parsed.str("neuron_version"),
                allow_simulated: parsed.flag("allow_simulated"),
                break_locks: parsed.flag("break_locks"),
                retry_failed,
            };
            let (run, inputs, skipped) = neuron_inputs(prog, &req, &engine, &shared, &launch_dir)?;
            (Some(run), inputs, skipped, safe_cache_dir(prog, cache_dir))
        }
    };
    let cfg = Config {
        prog: prog.to_string(),
        jobs,
        memory_budget,
        output_dir,
        retries,
        engine,
        cache_dir,
        launch_dir,
        worker_program: None,
        progress: ProgressMode::detect(),
        neuron,
        reproducers: None,
    };
    let cfg = Config {
        reproducers: reproducers(prog, &parsed, &cfg)?,
        ..cfg
    };
    let cancel = Cancellation::new();
    if let Ok(s) = crate::run::signals::install() {
        let c = cancel.clone();
        s.on_signal(move |sig| c.interrupt(sig));
    }
    let mut report = match super::run(&cfg, &inputs, &shared, &cancel) {
        Ok(r) => r,
        Err(e) => return Err(compile_args_error(prog, e)),
    };
    if let Some(run) = &cfg.neuron {
        report.neuron_cache = Some(super::neuron::report_json(run, &skipped));
    }
    Ok(finish(prog, &parsed, &cfg, &report, &cancel))
}

/// `--gen-reproducer`: where the bundles go (`--reproducer-dir`, else the output directory; for
/// the framework's cache, the launch directory), made if missing.
fn reproducers(
    prog: &str,
    parsed: &Parsed,
    cfg: &Config,
) -> Result<Option<super::Reproducers>, Stopped> {
    if !parsed.flag("gen_reproducer") {
        return match ["reproducer_dir", "reproducer_strip_constants"]
            .into_iter()
            .find(|f| parsed.last(f).is_some())
        {
            Some(f) => Err(usage_error(
                prog,
                format!(
                    "argument --{}: only with --gen-reproducer",
                    f.replace('_', "-")
                ),
            )),
            None => Ok(None),
        };
    }
    let dir = match (parsed.str("reproducer_dir"), &cfg.neuron) {
        (Some(d), _) => crate::plan::absolute(&cfg.launch_dir, d),
        (None, Some(_)) => cfg.launch_dir.clone(),
        (None, None) => cfg.output_dir.clone(),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        err(&format!(
            "{prog} parallel-compile: error: cannot create the reproducer directory {}: {e}\n",
            dir.display()
        ));
        return Err(EXIT_COMPILE_FAILED);
    }
    Ok(Some(super::Reproducers {
        dir,
        strip: parsed.flag("reproducer_strip_constants"),
    }))
}

/// This command's own options (a compile's option among them is pointed after `--`).
fn own_options(prog: &str, own: &[String]) -> Result<Parsed, Stopped> {
    match COMMAND.parse(prog, own) {
        Ok(p) => Ok(p),
        Err(Stop::Usage(CliError::Usage { message, .. })) => {
            let hint = misplaced_compile_option(prog, own).map(|opt| {
                format!("\n{opt} is an option of the compile: put the compile arguments after `--` ({prog} parallel-compile INPUT... -- --target trn2 ...)")
            });
            Err(usage_error(prog, message + &hint.unwrap_or_default()))
        }
        Err(stop) => Err(stop.report()),
    }
}

/// `--jobs` (default: the CPUs), `--retries`, `--memory-budget`.
fn limits(prog: &str, parsed: &Parsed) -> Result<(usize, u32, Option<u64>), Stopped> {
    let jobs = match parsed.last("jobs").and_then(|o| o.value.as_int()) {
        None => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        Some(n) if n >= 1 => n as usize,
        Some(n) => {
            let why = format!("argument --jobs/-j: must be at least 1, got {n}");
            return Err(usage_error(prog, why));
        }
    };
    let retries = match parsed.last("retries").and_then(|o| o.value.as_int()) {
        None => 0,
        Some(n) if n >= 0 => n as u32,
        Some(n) => {
            let why = format!("argument --retries: must be at least 0, got {n}");
            return Err(usage_error(prog, why));
        }
    };
    let memory_budget = match parsed.str("memory_budget") {
        None => None,
        Some(s) => match crate::admission::parse_budget(s) {
            Ok(n) => Some(n),
            Err(e) => return Err(usage_error(prog, format!("argument --memory-budget: {e}"))),
        },
    };
    Ok((jobs, retries, memory_budget))
}

/// Where the inputs come from: the framework's cache (`--neuron-cache`: a directory, made
/// absolute, or a bucket), or the INPUT arguments; the options that go with only one of them are
/// checked.
fn sources(
    prog: &str,
    parsed: &Parsed,
    launch_dir: &std::path::Path,
) -> Result<(Option<Location>, Vec<String>), Stopped> {
    // `--neuron-cache DIR` (nxcc's own optional values need `=`: the one word after it is DIR).
    let mut positionals = parsed.positionals[0].clone();
    let neuron_dir = parsed.str("neuron_cache").map(|d| match d {
        "" if positionals.len() == 1 => positionals.remove(0),
        "" => crate::neuron_cache::default_dir(),
        d => d.to_string(),
    });
    let located = neuron_dir.as_deref().map(crate::neuron_cache::location);
    let neuron = match located.transpose() {
        Err(why) => return Err(usage_error(prog, format!("argument --neuron-cache: {why}"))),
        Ok(Some(Location::Dir(d))) => Some(Location::Dir(crate::plan::absolute(
            launch_dir,
            &d.to_string_lossy(),
        ))),
        Ok(other) => other,
    };
    let refused = match (&neuron, positionals.is_empty()) {
        (Some(_), false) => {
            let mut message =
                "argument INPUT: not allowed with --neuron-cache (its entries are the inputs)"
                    .to_string();
            for hint in parsed.value_hints(&positionals) {
                message.push('\n');
                message.push_str(&hint);
            }
            Some(message)
        }
        (None, true) => {
            Some("the following arguments are required: INPUT (or --neuron-cache)".into())
        }
        (Some(_), true) if parsed.last("output_dir").is_some() => Some(
            "argument --output-dir: not with --neuron-cache (the NEFFs go into the entries)".into(),
        ),
        (None, false) => ["neuron_version", "allow_simulated", "break_locks"]
            .into_iter()
            .find(|f| parsed.last(f).is_some())
            .map(|f| {
                format!(
                    "argument --{}: only with --neuron-cache",
                    f.replace('_', "-")
                )
            }),
        _ => None,
    };
    match refused {
        Some(message) => Err(usage_error(prog, message)),
        None => Ok((neuron, positionals)),
    }
}

/// nxcc's own cache: this command's `--cache_dir`, else the compile arguments', else the
/// default (never inside the framework's cache, `--neuron-cache` or not); `None` with
/// `--no-cache`.
fn cache_dir_of(
    prog: &str,
    parsed: &Parsed,
    compile_args: &[String],
    launch_dir: &std::path::Path,
) -> Result<Option<PathBuf>, Stopped> {
    if parsed.flag("no_cache") {
        return Ok(None);
    }
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
    let d = parsed
        .str("cache_dir")
        .map(str::to_string)
        .or(compile_cache_dir)
        .unwrap_or_else(crate::cache::default_dir);
    if let Err(e) = check_local(&d) {
        let why = format!("argument --cache_dir: {}", e.cause.to_lowercase());
        return Err(usage_error(prog, why));
    }
    if crate::objstore::is_url(&d) {
        // A shared tier (s3://...): each compile's cache is its local tier and the URL.
        return Ok(Some(PathBuf::from(d)));
    }
    Ok(Some(crate::plan::absolute(launch_dir, &d)))
}

/// The arguments every compile gets: the driver options given before the subcommand, the
/// compile arguments, the remote server's options (checked), `--retry_failed_compilation`.
fn shared_args(
    prog: &str,
    parsed: &Parsed,
    compile_args: &[String],
) -> Result<Vec<String>, Stopped> {
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
        return Err(usage_error(prog, format!("argument --remote: {}", e.cause)));
    }
    if parsed.flag("retry_failed_compilation") {
        shared.push("--retry_failed_compilation".into());
    }
    Ok(shared)
}

/// The INPUT arguments as inputs, and the output directory made.
fn file_inputs(
    prog: &str,
    positionals: &[String],
    launch_dir: &std::path::Path,
    output_dir: &std::path::Path,
) -> Result<Vec<super::Input>, Stopped> {
    let inputs = expand_inputs(positionals, launch_dir)
        .map_err(|e| usage_error(prog, format!("argument INPUT: {e}")))?;
    if let Err(e) = std::fs::create_dir_all(output_dir) {
        err(&format!(
            "{prog} parallel-compile: error: cannot create the output directory {}: {e}\n",
            output_dir.display()
        ));
        return Err(EXIT_COMPILE_FAILED);
    }
    Ok(inputs)
}

/// The framework cache's run, its entries to compile, and those it skips (announced).
fn neuron_inputs(
    prog: &str,
    req: &super::neuron::Request,
    engine: &Engine,
    shared: &[String],
    launch_dir: &std::path::Path,
) -> Result<
    (
        super::neuron::Run,
        Vec<super::Input>,
        Vec<super::neuron::Skipped>,
    ),
    Stopped,
> {
    let run = match super::neuron::prepare(prog, req, engine, shared, launch_dir) {
        Ok(run) => run,
        Err(super::neuron::Refused::Usage(message)) => return Err(usage_error(prog, message)),
        Err(super::neuron::Refused::Unusable(message)) => {
            err(&format!("{prog} parallel-compile: error: {message}\n"));
            return Err(EXIT_COMPILE_FAILED);
        }
    };
    let found = match super::neuron::discover(&run) {
        Ok(f) => f,
        Err(e) => {
            err(&format!(
                "{prog} parallel-compile: error: cannot read the neuron cache {}: {e}\n",
                run.version_shown()
            ));
            return Err(EXIT_COMPILE_FAILED);
        }
    };
    err(&super::neuron::announce(&run, &found));
    Ok((run, found.inputs, found.skipped))
}

/// nxcc's own cache where the framework's is: used only when it is safe to.
fn safe_cache_dir(prog: &str, cache_dir: Option<PathBuf>) -> Option<PathBuf> {
    let local = |d: &PathBuf| match d.to_str() {
        Some(url) if crate::objstore::is_url(url) => PathBuf::from(crate::cache::default_dir()),
        _ => d.clone(),
    };
    cache_dir.filter(|d| match crate::cache::Cache::new(local(d)).check() {
        Ok(()) => true,
        Err(u) => {
            err(&format!(
                "{prog} parallel-compile: warning: compiling without nxcc's cache: {u}\n"
            ));
            false
        }
    })
}

/// The table, the failures, `--report` and `--timings`; the exit status (a signal's when one
/// stopped the batch).
fn finish(
    prog: &str,
    parsed: &Parsed,
    cfg: &Config,
    report: &super::Report,
    cancel: &Cancellation,
) -> i32 {
    out(&report::table(report));
    err(&report::failures(report));
    let mut status = report.exit_status();
    for (flag, text, what) in [
        ("report", report::json(report), "report"),
        ("timings", report::timings_html(report), "timings page"),
        ("profile", report::trace(report), "profile"),
    ] {
        if let Some(path) = parsed.str(flag) {
            let path = crate::plan::absolute(&cfg.launch_dir, path);
            match report::write_atomic(&path, &text) {
                Ok(()) => err(&format!("Wrote the {what} to {}\n", path.display())),
                Err(e) => {
                    err(&format!(
                        "{prog} parallel-compile: error: cannot write the {what} {}: {e}\n",
                        path.display()
                    ));
                    status = EXIT_COMPILE_FAILED;
                }
            }
        }
    }
    match cancel.signal() {
        None => status,
        Some(sig) => crate::run::signals::exit_status_for(sig),
    }
}
