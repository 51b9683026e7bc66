//! Which compile flags are compile semantics, and which reach into the machine a compile runs
//! on: the one rule for compile arguments nxcc takes from others — a remote action the worker
//! runs, a framework cache entry's `compile_flags.json` — where only what changes the NEFF may
//! come from the request, and everything local (a path, the toolchain, a log, a report, metrics,
//! a work directory, the pipeline's SaveTemps, the cache) is decided by the machine itself.
//!
//! [`local_effect`] says why one parsed occurrence is not compile semantics; [`check`] applies it
//! to a whole parse. Every path-typed flag counts as local, whatever its name, so a flag added
//! to the table later is refused until it is listed as harmless here.

use super::argparse::{Occurrence, Parsed};
use super::flags::Kind;
use super::namespace::{Dest, Value};

/// The flags (by dest) that reach into the machine, each with what it reaches: the output and
/// its log, work directories, reports, metrics, the cache, the toolchain, the daemon, a remote
/// service, the console, the dry run, the job time limit.
pub const LOCAL_DESTS: &[(Dest, &str)] = &[
    (Dest::Output, "the output path"),
    (Dest::Logfile, "a log"),
    (Dest::LogfileVerbose, "a log"),
    (Dest::Verbose, "the console log"),
    (Dest::TempDir, "a work directory"),
    (Dest::KeepWorkDir, "a work directory"),
    (Dest::Timings, "a report"),
    (Dest::Trace, "a report"),
    (Dest::GenReproducer, "a report"),
    (Dest::ReproducerDir, "a report"),
    (Dest::ReproducerStripConstants, "a report"),
    (Dest::SubmitMetrics, "metrics"),
    (Dest::RunId, "metrics"),
    (Dest::MetricsTimestamp, "metrics"),
    (Dest::CacheDir, "the cache"),
    (Dest::NoCache, "the cache"),
    (Dest::RetryFailedCompilation, "the cache"),
    (Dest::Toolchain, "the toolchain"),
    (Dest::Daemon, "the compile daemon"),
    (Dest::Remote, "a remote service"),
    (Dest::RemoteCache, "a remote service"),
    (Dest::RemoteInstance, "a remote service"),
    (Dest::DryRun, "a dry run"),
    (Dest::JobTimeout, "the job time limit"),
];

/// The pipeline job that writes outside the compile (it copies the work dir into the launch
/// directory).
pub const SAVE_TEMPS: &str = "SaveTemps";

/// Why `o` is not compile semantics (what it reaches on the machine), or `None` when it is.
pub fn local_effect(o: &Occurrence) -> Option<&'static str> {
    let dest = Dest::named(o.flag.dest);
    if let Some((_, what)) = LOCAL_DESTS.iter().find(|(d, _)| Some(*d) == dest) {
        return Some(what);
    }
    if o.flag.kind == Kind::Path {
        return Some("a local path");
    }
    let save_temps = match &o.value {
        Value::List(items) => items.iter().any(|i| i.split(',').any(|p| p == SAVE_TEMPS)),
        Value::Str(s) => s.split(',').any(|p| p == SAVE_TEMPS),
        _ => false,
    };
    if dest == Some(Dest::Pipeline) && save_temps {
        return Some("the pipeline's SaveTemps (a copy of the work directory)");
    }
    None
}

/// Every occurrence of `parsed` that is not compile semantics, except those `allow` accepts (the
/// worker's own `--output model.neff`): `Err` names the first, in the words
/// `--trace sets a report`.
pub fn check(parsed: &Parsed, allow: impl Fn(&Occurrence) -> bool) -> Result<(), String> {
    for o in &parsed.occurrences {
        if allow(o) {
            continue;
        }
        if let Some(what) = local_effect(o) {
            return Err(format!(
                "{} sets {what}, which only the machine that compiles decides",
                o.option_string
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Parsed {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        crate::cli::compile_parser("neuronx-cc")
            .parse(&args)
            .unwrap()
    }

    #[test]
    fn compile_semantics_pass_and_local_flags_are_named() {
        let ok = parse(&[
            "m.pb",
            "--target=trn2",
            "-O1",
            "--model-type=transformer",
            "--fast-math",
            "fp32-cast-matmult",
            "no-fast-relayout",
            "--pipeline",
            "compile",
        ]);
        assert_eq!(check(&ok, |_| false), Ok(()));
        for (args, says) in [
            (&["m.pb", "--trace=/x"][..], "--trace sets a report"),
            (&["m.pb", "--timings"], "--timings sets a report"),
            (&["m.pb", "--toolchain", "/opt/x"], "the toolchain"),
            (&["m.pb", "--logfile", "/x"], "a log"),
            (&["m.pb", "--submit-metrics"], "metrics"),
            (&["m.pb", "--keep-work-dir"], "a work directory"),
            (&["m.pb", "--compile_workdir", "/w"], "a work directory"),
            (&["m.pb", "--cache_dir=/c"], "the cache"),
            (&["m.pb", "--tfpb", "/x.pb"], "a local path"),
            (&["m.pb", "--pipeline", "compile", "SaveTemps"], "SaveTemps"),
            (&["m.pb", "--output", "/elsewhere.neff"], "the output path"),
        ] {
            let e = check(&parse(args), |_| false).unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
        let out = parse(&["m.pb", "--output", "model.neff"]);
        assert!(check(&out, |o| o.flag.dest == "output").is_ok());
    }
}
