//! `nxcc parallel-compile [--jobs N] [--memory-budget SIZE|auto] [--output-dir DIR]
//! [--retries N] [--report FILE] [--timings[ FILE]] [--profile FILE] [--compiler PATH] [--cache_dir DIR]
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

use std::path::{Path, PathBuf};

use super::{expand_inputs, report, Config, Overrides, ProgressMode};
use crate::cache::{check_local, DEFAULT_DIR_TEXT};
use crate::cli::subcommand::{
    err, out, parse, separated_value_hint, usage_error, values, DriverOptions, RemoteOptions, Stop,
};
use crate::cli::CliError;
use crate::engine::session::Cancellation;
use crate::engine::Engine;
use crate::error::EXIT_COMPILE_FAILED;
use crate::neuron_cache::Location;

/// Compile many models at once, within a memory budget, through the compile cache.
///
/// Each INPUT compiles with the compile arguments given after `--` into <output dir>/<stem>.neff
/// (its log <stem>.log).
#[derive(Debug, Clone, clap::Parser)]
pub(crate) struct ParallelCompile {
    /// A model file, or a directory of *.pb / *.hlo files (none with --neuron-cache).
    #[arg(value_name = "INPUT")]
    pub(crate) inputs: Vec<String>,
    /// The compile arguments every input gets (--target trn2 ...).
    #[arg(last = true, value_name = "COMPILE-ARGS")]
    pub(crate) compile_args: Vec<String>,
    /// At most this many compiles at once (default: the number of CPUs).
    #[arg(long, short = 'j', value_name = "N", value_parser = values::at_least_one)]
    pub(crate) jobs: Option<usize>,
    /// Start a compile only while the estimated peak memory of the running ones plus its own fits
    /// (512M, 16G, ...; auto = 80% of MemAvailable).
    #[arg(long = "memory-budget", value_name = "SIZE", value_parser = values::budget)]
    pub(crate) memory_budget: Option<u64>,
    /// Where <stem>.neff and <stem>.log of each input go (created if missing).
    #[arg(long = "output-dir", value_name = "DIR")]
    pub(crate) output_dir: Option<String>,
    /// Retry a failed compile this many times (a compile ending in [F137] is also retried once
    /// alone first).
    #[arg(long, value_name = "N", value_parser = values::at_least_zero, default_value_t = 0)]
    pub(crate) retries: u32,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: Option<String>,
    /// Print the results as JSON on stdout instead of the table (the report --report writes).
    #[arg(long)]
    pub(crate) json: bool,
    /// Write an HTML page of the batch to FILE (default: nxcc-timings.html, as compile
    /// --timings): a bar per compile coloured by outcome (one lane per worker slot), the memory in
    /// use against the budget, the slowest compiles, the failures by code, the hits.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = crate::cli::flags::TIMINGS_FILE)]
    pub(crate) timings: Option<String>,
    /// Write the batch as a Chrome trace to FILE (opens in Perfetto): a complete event per compile
    /// on its slot's track, its jobs inside it, the memory counter.
    #[arg(long, value_name = "FILE")]
    pub(crate) profile: Option<String>,
    /// Write a reproducer bundle (nxcc-reproducer-<key>.tar.gz) for every graph that failed; the
    /// report and the timings page link them.
    #[arg(long = "gen-reproducer")]
    pub(crate) gen_reproducer: bool,
    /// Where --gen-reproducer writes the bundles (default: the output directory).
    #[arg(long = "reproducer-dir", value_name = "DIR")]
    pub(crate) reproducer_dir: Option<String>,
    /// In the bundles, replace the models' constants by zeros of the same shape.
    #[arg(long = "reproducer-strip-constants")]
    pub(crate) reproducer_strip_constants: bool,
    /// Run each compile as one job `PATH compile <args> --output <out>` (e.g. an installed
    /// neuronx-cc) instead of nxcc's pipeline.
    #[arg(long, value_name = "PATH")]
    pub(crate) compiler: Option<PathBuf>,
    /// The compile cache directory.
    #[arg(long = "cache_dir", visible_alias = "cache-dir", value_name = "DIR", help = format!("The compile cache directory (default: {DEFAULT_DIR_TEXT})"))]
    pub(crate) cache_dir: Option<String>,
    /// Do not use the compile cache.
    #[arg(long = "no_cache", visible_alias = "no-cache")]
    pub(crate) no_cache: bool,
    /// Compile the entries to do of the framework's compile cache DIR (default: --cache_dir of
    /// NEURON_CC_FLAGS, else NEURON_COMPILE_CACHE_URL, else /var/tmp/neuron-compile-cache) into
    /// their model.neff, instead of INPUTs. The value only after `=`.
    #[arg(long = "neuron-cache", value_name = "DIR", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub(crate) neuron_cache: Option<String>,
    /// With --neuron-cache: the compiler version whose neuronxcc-<version> directory is compiled
    /// (default: what --compiler PATH --version says; 2.24.5133.0+nxcc-sim on the simulated
    /// toolchain).
    #[arg(long = "neuron-version", value_name = "VERSION")]
    pub(crate) neuron_version: Option<String>,
    /// With --neuron-cache: let the simulated toolchain write its NEFFs (which cannot run on
    /// hardware) into the cache (for tests).
    #[arg(long = "allow-simulated")]
    pub(crate) allow_simulated: bool,
    /// With --neuron-cache: take over lock files nxcc did not make (a compile the framework is
    /// running loses its entry).
    #[arg(long = "break-locks")]
    pub(crate) break_locks: bool,
    /// Compile again what failed before (a failure nxcc's cache remembers; with --neuron-cache,
    /// entries with a model.log).
    #[arg(
        long = "retry_failed_compilation",
        visible_alias = "retry-failed-compilation"
    )]
    pub(crate) retry_failed_compilation: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) remote: RemoteOptions,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: DriverOptions,
}

fn usage(prog: &str, message: String) -> i32 {
    usage_error::<ParallelCompile>(prog, "parallel-compile", None, message).report()
}

/// A usage error in the compile arguments, found before anything ran: one line naming it (not
/// `compile`'s usage).
fn compile_args_error(prog: &str, e: CliError) -> i32 {
    let (mut message, hints) = match e {
        // `compile`'s own parser or plan builder: the arguments after `--` are at fault.
        CliError::Usage {
            prog: p,
            message,
            hints,
            ..
        } if p.ends_with(" compile") => (
            format!("the compile arguments (after `--`): {message}"),
            hints,
        ),
        CliError::Usage { message, hints, .. } => (message, hints),
        CliError::Unrecognized { args, hints, .. } => (
            format!(
                "the compile arguments (after `--`): unrecognized arguments: {}",
                args.join(" ")
            ),
            hints,
        ),
    };
    for h in hints {
        message.push('\n');
        message.push_str(&h);
    }
    err(&format!("{prog} parallel-compile: error: {message}\n"));
    CliError::EXIT_STATUS
}

/// A phase's end when the command cannot go on: the exit status (what went wrong was said).
type Stopped = i32;

/// Run `parallel-compile` with its arguments; returns the exit status. Its phases: its own
/// options read and checked (`own_options`, `sources`, `cache_dir_of`), the compile arguments
/// every compile shares and what its own options set in each compile's settings
/// (`overrides`), the inputs (files, or the framework cache's entries: `neuron_inputs`), the
/// batch ([`super::run`]), and its reports (`finish`).
pub fn main(prog: &str, args: &[String]) -> i32 {
    match run(prog, args) {
        Ok(status) | Err(status) => status,
    }
}

fn run(prog: &str, args: &[String]) -> Result<i32, Stopped> {
    let own = own_options(prog, args)?;
    let launch_dir = std::env::current_dir().map_err(|e| {
        err(&format!("[ERROR] cannot read the current directory: {e}\n"));
        EXIT_COMPILE_FAILED
    })?;
    timings_not_a_model(prog, &own)?;
    let (neuron_dir, positionals) = sources(prog, &own, args, &launch_dir)?;
    let cache_dir = cache_dir_of(prog, &own, &launch_dir)?;
    let output_dir = crate::fsx::absolute(&launch_dir, own.output_dir.as_deref().unwrap_or("."));
    let mut shared = own.driver.words();
    shared.extend(own.compile_args.iter().cloned());
    let overrides = overrides(prog, &own)?;
    let engine = match &own.compiler {
        Some(c) => Engine::external(c.clone()),
        None => Engine::Pipeline,
    };
    let (neuron, inputs, skipped, cache_dir) = match &neuron_dir {
        None => {
            let inputs = file_inputs(prog, &positionals, &launch_dir, &output_dir)?;
            (None, inputs, Vec::new(), cache_dir)
        }
        Some(dir) => {
            let retry_failed = own.retry_failed_compilation
                || own.compile_args.iter().any(|a| {
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
                .map_err(|message| usage(prog, message))?;
            }
            let req = super::neuron::Request {
                cache: dir,
                version: own.neuron_version.as_deref(),
                allow_simulated: own.allow_simulated,
                break_locks: own.break_locks,
                retry_failed,
            };
            let (run, inputs, skipped) = neuron_inputs(prog, &req, &engine, &shared, &launch_dir)?;
            (Some(run), inputs, skipped, safe_cache_dir(prog, cache_dir))
        }
    };
    let cfg = Config {
        prog: prog.to_string(),
        jobs: own.jobs.unwrap_or_else(cpus),
        memory_budget: own.memory_budget,
        output_dir,
        retries: own.retries,
        engine,
        cache_dir,
        launch_dir,
        worker_program: None,
        progress: ProgressMode::detect(),
        neuron,
        overrides,
        reproducers: None,
    };
    let cfg = Config {
        reproducers: reproducers(prog, &own, &cfg)?,
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
    Ok(finish(prog, &own, &cfg, &report, &cancel))
}

/// `--gen-reproducer`: where the bundles go (`--reproducer-dir`, else the output directory; for
/// the framework's cache, the launch directory), made if missing.
fn reproducers(
    prog: &str,
    own: &ParallelCompile,
    cfg: &Config,
) -> Result<Option<super::Reproducers>, Stopped> {
    if !own.gen_reproducer {
        return match [
            ("--reproducer-dir", own.reproducer_dir.is_some()),
            (
                "--reproducer-strip-constants",
                own.reproducer_strip_constants,
            ),
        ]
        .into_iter()
        .find(|(_, given)| *given)
        {
            Some((f, _)) => Err(usage(
                prog,
                format!("argument {f}: only with --gen-reproducer"),
            )),
            None => Ok(None),
        };
    }
    let dir = match (&own.reproducer_dir, &cfg.neuron) {
        (Some(d), _) => crate::fsx::absolute(&cfg.launch_dir, d),
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
        strip: own.reproducer_strip_constants,
    }))
}

/// How many CPUs this machine offers (at least 1).
fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// This command's own options (a compile's option among them is pointed after `--`).
fn own_options(prog: &str, args: &[String]) -> Result<ParallelCompile, Stopped> {
    match parse::<ParallelCompile>(prog, "parallel-compile", args) {
        Ok(p) => Ok(p),
        Err(Stop::Refused(text)) => {
            let own = args.iter().position(|a| a == "--").unwrap_or(args.len());
            let compile = crate::cli::compile_parser(prog);
            let misplaced = args[..own]
                .iter()
                .find(|t| t.starts_with('-') && compile.recognises(t));
            let hint = misplaced.map(|opt| {
                format!("{opt} is an option of the compile: put the compile arguments after `--` ({prog} parallel-compile INPUT... -- --target trn2 ...)\n")
            });
            err(&format!("{text}{}", hint.unwrap_or_default()));
            Err(CliError::EXIT_STATUS)
        }
        Err(stop) => Err(stop.report()),
    }
}

/// `--timings` takes the next word as its FILE when one follows: a word that names a model (or
/// a directory of them) was meant as an INPUT, and is refused rather than overwritten.
fn timings_not_a_model(prog: &str, own: &ParallelCompile) -> Result<(), Stopped> {
    let Some(file) = own.timings.as_deref() else {
        return Ok(());
    };
    let model = [".pb", ".hlo", ".pbtxt"].iter().any(|x| file.ends_with(x));
    if !model && !Path::new(file).is_dir() {
        return Ok(());
    }
    Err(usage(
        prog,
        format!(
            "argument --timings: {file:?} is an INPUT, not the page to write: put --timings after the INPUTs, write --timings=FILE, or --timings alone for {}",
            crate::cli::flags::TIMINGS_FILE
        ),
    ))
}

/// Where the inputs come from: the framework's cache (`--neuron-cache`: a directory, made
/// absolute, or a bucket), or the INPUT arguments; the options that go with only one of them are
/// checked.
fn sources(
    prog: &str,
    own: &ParallelCompile,
    args: &[String],
    launch_dir: &Path,
) -> Result<(Option<Location>, Vec<String>), Stopped> {
    // `--neuron-cache DIR` (nxcc's own optional values need `=`: the one word after it is DIR).
    let mut positionals = own.inputs.clone();
    let neuron_dir = own.neuron_cache.as_deref().map(|d| match d {
        "" if positionals.len() == 1 => positionals.remove(0),
        "" => crate::neuron_cache::default_dir(),
        d => d.to_string(),
    });
    let located = neuron_dir.as_deref().map(crate::neuron_cache::location);
    let neuron = match located.transpose() {
        Err(why) => return Err(usage(prog, format!("argument --neuron-cache: {why}"))),
        Ok(Some(Location::Dir(d))) => Some(Location::Dir(crate::fsx::absolute(
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
            if let Some(hint) = separated_value_hint(args, "--neuron-cache") {
                message.push('\n');
                message.push_str(&hint);
            }
            Some(message)
        }
        (None, true) => {
            Some("the following arguments are required: INPUT (or --neuron-cache)".into())
        }
        (Some(_), true) if own.output_dir.is_some() => Some(
            "argument --output-dir: not with --neuron-cache (the NEFFs go into the entries)".into(),
        ),
        (None, false) => [
            ("--neuron-version", own.neuron_version.is_some()),
            ("--allow-simulated", own.allow_simulated),
            ("--break-locks", own.break_locks),
        ]
        .into_iter()
        .find(|(_, given)| *given)
        .map(|(f, _)| format!("argument {f}: only with --neuron-cache")),
        _ => None,
    };
    match refused {
        Some(message) => Err(usage(prog, message)),
        None => Ok((neuron, positionals)),
    }
}

/// nxcc's own cache: this command's `--cache_dir`, else the compile arguments', else the
/// default (never inside the framework's cache, `--neuron-cache` or not); `None` with
/// `--no-cache`.
fn cache_dir_of(
    prog: &str,
    own: &ParallelCompile,
    launch_dir: &Path,
) -> Result<Option<PathBuf>, Stopped> {
    if own.no_cache {
        return Ok(None);
    }
    let compile_args = &own.compile_args;
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
    let d = own
        .cache_dir
        .clone()
        .or(compile_cache_dir)
        .unwrap_or_else(crate::cache::default_dir);
    if let Err(e) = check_local(&d) {
        let why = format!("argument --cache_dir: {}", e.cause.to_lowercase());
        return Err(usage(prog, why));
    }
    if crate::objstore::is_url(&d) {
        // A shared tier (s3://...): each compile's cache is its local tier and the URL.
        return Ok(Some(PathBuf::from(d)));
    }
    Ok(Some(crate::fsx::absolute(launch_dir, &d)))
}

/// What this command's own options set in every compile's settings: the remote server
/// (checked), `--retry_failed_compilation`.
fn overrides(prog: &str, own: &ParallelCompile) -> Result<Overrides, Stopped> {
    let o = Overrides {
        remote: own.remote.remote.clone(),
        remote_cache: own.remote.remote_cache.clone(),
        remote_instance: own.remote.remote_instance.clone(),
        retry_failed: own.retry_failed_compilation,
    };
    if let Err(e) =
        crate::remote::RemoteConfig::from_flags(o.remote.clone(), o.remote_cache.clone(), "")
    {
        return Err(usage(prog, format!("argument --remote: {}", e.cause)));
    }
    Ok(o)
}

/// The INPUT arguments as inputs, and the output directory made.
fn file_inputs(
    prog: &str,
    positionals: &[String],
    launch_dir: &Path,
    output_dir: &Path,
) -> Result<Vec<super::Input>, Stopped> {
    let inputs = expand_inputs(positionals, launch_dir)
        .map_err(|e| usage(prog, format!("argument INPUT: {e}")))?;
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
    launch_dir: &Path,
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
        Err(super::neuron::Refused::Usage(message)) => return Err(usage(prog, message)),
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
    own: &ParallelCompile,
    cfg: &Config,
    report: &super::Report,
    cancel: &Cancellation,
) -> i32 {
    if own.json {
        out(&report::json(report));
    } else {
        out(&report::table_painted(
            report,
            crate::cli::color::enabled(false),
        ));
    }
    err(&report::failures(report));
    let mut status = report.exit_status();
    for (file, text, what) in [
        (&own.report, report::json(report), "report"),
        (&own.timings, report::timings_html(report), "timings page"),
        (&own.profile, report::trace(report), "profile"),
    ] {
        if let Some(path) = file {
            let path = crate::fsx::absolute(&cfg.launch_dir, path);
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

/// `parallel-compile`'s command line as clap defines it (nxcc's completions and manual page).
pub(crate) fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<ParallelCompile>(prog, "parallel-compile")
}
