//! `nxcc cache ACTION [OPTIONS]`: one typed struct per action, parsed by clap, each `--help`
//! listing its own options.
//!
//! On nxcc's own cache (`--cache_dir DIR`, else `$NEURON_COMPILE_CACHE_URL`, else nxcc's own
//! per-user directory, [`super::config::default_dir`]): `stats` (what it holds and what it did:
//! the counters, `--zero`), `verify` (every entry's NEFF against its recorded blake3; the corrupt
//! ones evicted; exit 1 when it found any), `gc` (least recently used entries evicted down to
//! `--max-size`, else the configured `max_size`, each with its lock file, and the stale files no
//! compile uses removed), `clear` (everything), `explain -- COMPILE-ARGS` (hit or miss, and what
//! differs from the nearest entries) and `config [KEY=VALUE...]` — the actions of
//! `actions`. On the framework's compile cache (`--neuron-cache DIR`): `stats`, `verify`
//! and `clean` (`neuron`).
//!
//! A remote URL, or a directory the cache must not use ([`super::store::Cache::check`]: owned by
//! another user, writable by others), is a usage error (exit 2). `--json` prints the report as
//! one JSON object. What was removed because it was not a plain directory or file (a link) is
//! warned about on stderr.

use super::args::{action_name, CacheAction, CacheCommand, NeuronCache, Stats, Verify};
use crate::cli::subcommand::{parse, usage_error};

pub use super::actions::EXIT_CORRUPT;

/// Run `cache` with its arguments; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let cmd: CacheCommand = match parse(prog, "cache", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    let refused = |action: &str, message: String| {
        usage_error::<CacheCommand>(prog, "cache", Some(action), message).report()
    };
    let json = cmd.json;
    let neuron = |n: &NeuronCache| {
        n.neuron_cache
            .clone()
            .map(|d| (d, n.neuron_version.clone()))
    };
    if let Some(url) = shared_tier(&cmd) {
        return match super::shared::actions::run(prog, &cmd.action, url, json) {
            Ok(status) => status,
            Err(message) => refused(action_name(&cmd.action), message),
        };
    }
    let ended = match &cmd.action {
        CacheAction::Stats(s) => match neuron(&s.neuron) {
            Some((dir, v)) => return super::neuron::stats(prog, &dir, v.as_deref(), json),
            None => super::actions::stats(cmd.cache_dir.as_deref(), s.zero, json),
        },
        CacheAction::Verify(v) => match neuron(&v.neuron) {
            Some((dir, version)) => {
                return super::neuron::verify(prog, &dir, version.as_deref(), json)
            }
            None => super::actions::verify(cmd.cache_dir.as_deref(), json),
        },
        CacheAction::Gc(g) => super::actions::gc(prog, cmd.cache_dir.as_deref(), g, json),
        CacheAction::Clear => super::actions::clear(prog, cmd.cache_dir.as_deref(), json),
        CacheAction::Explain(e) => super::actions::explain(prog, cmd.cache_dir.as_deref(), e, json),
        CacheAction::Config(c) => match &c.max_size {
            Some(size) => Err(format!(
                "config sets the limit as a setting, KEY=VALUE\n\n  tip: did you mean `max_size={size}`?"
            )),
            None => super::actions::config(prog, cmd.cache_dir.as_deref(), &c.pairs, json),
        },
        CacheAction::Clean(c) => return super::neuron::clean(prog, c, json),
    };
    match ended {
        Ok(status) => status,
        Err(message) => refused(action_name(&cmd.action), message),
    }
}

/// The shared tier `--cache_dir s3://...` names, when the action works on it (all but `explain`,
/// which keys the compile against the local tier a compile through the shared tier looks in
/// first, and those on the framework's cache) and the program has a client for it.
fn shared_tier(cmd: &CacheCommand) -> Option<&str> {
    let on_nxcc_cache = match &cmd.action {
        CacheAction::Stats(Stats { neuron, .. }) | CacheAction::Verify(Verify { neuron }) => {
            neuron.neuron_cache.is_none()
        }
        CacheAction::Gc(_) | CacheAction::Clear | CacheAction::Config(_) => true,
        CacheAction::Explain(_) | CacheAction::Clean(_) => false,
    };
    cmd.cache_dir
        .as_deref()
        .filter(|d| on_nxcc_cache && crate::objstore::is_url(d) && crate::objstore::available())
}

/// `cache`'s command line as clap defines it (nxcc's completions and manual page).
pub fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<super::args::CacheCommand>(prog, "cache")
}

#[cfg(test)]
mod tests {
    use super::super::actions::human_bytes;
    use super::*;
    use crate::cli::subcommand::Stop;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(12), "12 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB (3221225472 bytes)");
    }

    fn parsed(args: &[&str]) -> Result<CacheCommand, Stop> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse("nxcc", "cache", &args)
    }

    fn refused(args: &[&str]) -> String {
        match parsed(args) {
            Err(Stop::Refused(t)) => t,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn each_action_takes_its_own_options() {
        let c = parsed(&[
            "explain",
            "--cache_dir",
            "c",
            "--",
            "m.pb",
            "--target",
            "trn2",
        ])
        .unwrap();
        let CacheAction::Explain(e) = c.action else {
            panic!()
        };
        assert_eq!(
            (c.cache_dir.as_deref(), e.compile_args.len()),
            (Some("c"), 3)
        );
        assert!(refused(&["gc", "--zero"]).contains("unexpected argument '--zero'"));
        assert!(refused(&["stats", "--max-size", "1G"]).contains("'--max-size'"));
        assert!(refused(&["clean", "--failed"]).contains("--neuron-cache <DIR>"));
        assert!(refused(&["stats", "--neuron-version", "1"]).contains("--neuron-cache <DIR>"));
        assert!(refused(&["shrink"]).contains("unrecognized subcommand 'shrink'"));
        assert!(refused(&["explain"]).contains("COMPILE-ARGS"));
        // Abbreviated long options, as argparse takes them; the last of a repeated one wins.
        let c = parsed(&["gc", "--max-s", "1G", "--max-size", "2G", "--cache-d", "x"]).unwrap();
        let CacheAction::Gc(g) = c.action else {
            panic!()
        };
        assert_eq!(
            (g.max_size.as_deref(), c.cache_dir.as_deref()),
            (Some("2G"), Some("x"))
        );
    }

    #[test]
    fn an_actions_help_lists_its_own_options_only() {
        let Err(Stop::Help(gc)) = parsed(&["gc", "--help"]) else {
            panic!()
        };
        assert!(
            gc.contains("--max-size") && gc.contains("--cache_dir"),
            "{gc}"
        );
        for other in [
            "--zero",
            "--neuron-cache",
            "--compiler",
            "--failed",
            "--min-age",
        ] {
            assert!(!gc.contains(other), "{other}: {gc}");
        }
        let Err(Stop::Help(clean)) = parsed(&["clean", "--help"]) else {
            panic!()
        };
        assert!(
            clean.contains("--min-age") && !clean.contains("--max-size"),
            "{clean}"
        );
    }
}
