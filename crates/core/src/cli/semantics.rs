//! Which compile flags are compile semantics, and which reach into the machine a compile runs
//! on: the one rule for compile arguments nxcc takes from others — a remote action the worker
//! runs, a framework cache entry's `compile_flags.json` — where only what changes the NEFF may
//! come from the request, and everything local (a path, the toolchain, a log, a report, metrics,
//! a work directory, the pipeline's SaveTemps, the cache, a remote service, the daemon) is
//! decided by the machine itself.
//!
//! It is an allow-list: a flag is compile semantics only when its row of the flag table says so
//! ([`super::flags::Reach`]); every other — each of nxcc's own options, and any flag added to
//! the table without saying it — is refused. `local_effect` says why one parsed occurrence is
//! not compile semantics; [`check`] applies it to a whole parse.

use super::argparse::{Occurrence, Parsed};
use super::flags::Reach;
use super::namespace::{Dest, Value};

/// The pipeline job that writes outside the compile (it copies the work dir into the launch
/// directory).
pub const SAVE_TEMPS: &str = "SaveTemps";

/// Why `o` is not compile semantics (what it reaches on the machine), or `None` when it is.
pub(crate) fn local_effect(o: &Occurrence) -> Option<&'static str> {
    if let Reach::Machine(what) = o.flag.reach {
        return Some(what);
    }
    let save_temps = match &o.value {
        Value::List(items) => items.iter().any(|i| i.split(',').any(|p| p == SAVE_TEMPS)),
        Value::Str(s) => s.split(',').any(|p| p == SAVE_TEMPS),
        _ => false,
    };
    if Dest::named(o.flag.dest) == Some(Dest::Pipeline) && save_temps {
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

    #[test]
    fn every_option_of_nxcc_and_every_path_reaches_the_machine() {
        use crate::cli::flags::{Kind, FLAGS};
        for f in FLAGS {
            if f.is_nxcc_own() || f.kind == Kind::Path || f.dest.is_empty() {
                assert!(matches!(f.reach, Reach::Machine(_)), "{}", f.spelling);
            }
        }
        // A row that does not say is not compile semantics.
        let new = crate::cli::flags::flag(
            "--new-option",
            &[],
            "new_option",
            crate::cli::flags::Action::StoreTrue,
            Kind::Bool,
            crate::cli::flags::Default::Bool(false),
            crate::cli::flags::Choices::Any,
            crate::cli::flags::Visibility::Public,
            crate::cli::flags::Scope::Compile,
            "nxcc",
            "",
        );
        assert_eq!(new.reach, crate::cli::flags::UNLISTED);
        for (args, says) in [
            (&["m.pb", "--cache-max-size=1"][..], "the cache"),
            (&["m.pb", "--cache-mode=hit-only"], "the cache"),
            (&["m.pb", "--cache-secondary=/tmp"], "the cache"),
            (&["m.pb", "--cache-sloppiness=hlo_metadata"], "the cache"),
            (&["m.pb", "--cache-rehash"], "the cache"),
            (&["m.pb", "--remote-cache=grpc://h:1"], "a remote service"),
            (&["m.pb", "--remote-instance=x"], "a remote service"),
            (&["m.pb", "--daemon"], "the compile daemon"),
            (&["m.pb", "--job-timeout=9"], "the job time limit"),
            (&["m.pb", "--dry-run"], "a dry run"),
            (&["m.pb", "--internal-autotune-config=/x"], "a local path"),
        ] {
            let e = check(&parse(args), |_| false).unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }
}
