//! `nxcc cache stats|verify|gc|clear [--cache_dir DIR] [--max-size SIZE] [--json]`, and
//! `nxcc cache stats|verify|clean --neuron-cache DIR [--neuron-version V] [--failed] [--locks]
//! [--min-age AGE] [--old-versions] [--dry-run] [--json]` for the framework's compile cache
//! ([`crate::neuron_cache::maintain`]; `clean` only there).
//!
//! - `stats`: entries, failed entries, bytes, oldest and newest entry;
//! - `verify`: checks every entry's NEFF against its recorded blake3 and evicts the corrupt ones
//!   (exit 1 when it found any, 0 otherwise);
//! - `gc --max-size SIZE`: evicts least recently used entries until the entries take at most SIZE
//!   (`512M`, `2G`, ...) — each with its lock file —, and removes the stale files no compile
//!   uses (the unfinished entries of interrupted compiles, free locks of entries gone);
//! - `clear`: evicts everything (and those stale files).
//!
//! The directory defaults to nxcc's own per-user directory ([`super::config::default_dir`]); a remote URL, or
//! a directory the cache must not use ([`super::store::Cache::check`]: owned by another user,
//! writable by others), is a usage error (exit 2). `--json` prints the report as one JSON
//! object. What was removed because it was not a plain directory or file (a link) is warned
//! about on stderr.

use super::config::DEFAULT_DIR_TEXT;
use crate::cli::argparse::{self, Nargs, Positional};
use crate::cli::flags::{flag, Action, Choices, Default, Flag, Kind, Scope, Visibility};
use crate::cli::subcommand::{Stop, Subcommand, HELP};

use super::actions::print;
pub use super::actions::{human_bytes, EXIT_CORRUPT};

const ACTIONS: [&str; 7] = [
    "stats", "verify", "gc", "clear", "clean", "explain", "config",
];

#[rustfmt::skip]
static CACHE_DIR: Flag = flag("--cache_dir", &["--cache-dir"], "cache_dir", Action::Store, Kind::Path, Default::Derived(DEFAULT_DIR_TEXT), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The cache directory (nxcc's entries are in its nxcc-v1 subdirectory).");
#[rustfmt::skip]
static MAX_SIZE: Flag = flag("--max-size", &[], "max_size", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "gc: the size to shrink the entries to (512M, 2G, ...).");
#[rustfmt::skip]
static JSON: Flag = flag("--json", &[], "json", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Print the report as one JSON object.");

#[rustfmt::skip]
static NEURON_CACHE: Flag = flag("--neuron-cache", &[], "neuron_cache", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Work on the framework's compile cache DIR (its neuronxcc-<version>/MODULE_* entries) instead of nxcc's: stats, verify, clean.");
#[rustfmt::skip]
static NEURON_VERSION: Flag = flag("--neuron-version", &[], "neuron_version", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "With --neuron-cache: only this compiler version's directory (clean --old-versions: the one kept; default: the newest).");
#[rustfmt::skip]
static FAILED: Flag = flag("--failed", &[], "failed", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "clean: remove the model.log of failed entries (they are to do again).");
#[rustfmt::skip]
static LOCKS: Flag = flag("--locks", &[], "locks", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "clean: remove lock files no process holds an flock on and older than --min-age.");
#[rustfmt::skip]
static MIN_AGE: Flag = flag("--min-age", &[], "min_age", Action::Store, Kind::Str, Default::Str("1d"), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "clean --locks: the age a lock file must have (30s, 10m, 2h, 1d; 0: any).");
#[rustfmt::skip]
static OLD_VERSIONS: Flag = flag("--old-versions", &[], "old_versions", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "clean: remove the directories of every compiler version but --neuron-version (default: the newest).");
#[rustfmt::skip]
static DRY_RUN: Flag = flag("--dry-run", &[], "dry_run", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "clean: say what would be removed, remove nothing.");

#[rustfmt::skip]
static ZERO: Flag = flag("--zero", &[], "zero", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "stats: set the counters back to zero (after showing them).");
#[rustfmt::skip]
static COMPILER: Flag = flag("--compiler", &[], "compiler", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "explain: the compile runs on this external compiler (as parallel-compile --compiler PATH).");

static OWN_FLAGS: [&Flag; 13] = [
    &HELP,
    &CACHE_DIR,
    &MAX_SIZE,
    &JSON,
    &ZERO,
    &COMPILER,
    &NEURON_CACHE,
    &NEURON_VERSION,
    &FAILED,
    &LOCKS,
    &MIN_AGE,
    &OLD_VERSIONS,
    &DRY_RUN,
];

const POSITIONALS: [Positional; 2] = [
    Positional {
        metavar: "{stats,verify,gc,clear,clean,explain,config}",
        nargs: Nargs::One,
        help: "stats: what the cache holds and what it did (--zero: reset the counters); verify: check every entry, evict corrupt ones; gc: evict least recently used entries down to --max-size (default: the configured max_size); clear: evict everything; explain -- COMPILE-ARGS: whether that compile hits, and on a miss what differs from the nearest entries; config [KEY=VALUE...]: show or change the cache's configuration (max_size, sloppiness, stat_digests, mode); clean (with --neuron-cache): remove failed entries' logs, stale locks, old versions.",
    },
    Positional {
        metavar: "KEY=VALUE",
        nargs: Nargs::ZeroOrMore,
        help: "config: the settings to change.",
    },
];

static COMMAND: Subcommand = Subcommand {
    name: "cache",
    flags: &OWN_FLAGS,
    positionals: &POSITIONALS,
    about: "Inspect and maintain the compile cache.",
};

fn usage_error(prog: &str, message: String) -> i32 {
    Stop::Usage(COMMAND.usage_error(prog, message)).report()
}

/// Run `cache` with its arguments; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let (args, compile_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &args[args.len()..]),
    };
    let parsed = match COMMAND.parse(prog, args) {
        Ok(p) => p,
        Err(stop) => return stop.report(),
    };
    let action = parsed.positionals[0][0].as_str();
    if !ACTIONS.contains(&action) {
        let choices: Vec<String> = ACTIONS.iter().map(|a| argparse::py_repr(a)).collect();
        return usage_error(
            prog,
            format!(
                "argument action: invalid choice: {} (choose from {})",
                argparse::py_repr(action),
                choices.join(", ")
            ),
        );
    }
    if action != "explain" && !compile_args.is_empty() {
        return usage_error(prog, "arguments after --: only with explain".into());
    }
    if action != "config" && !parsed.positionals[1].is_empty() {
        return usage_error(
            prog,
            format!(
                "unrecognized arguments: {} (KEY=VALUE only with config)",
                parsed.positionals[1].join(" ")
            ),
        );
    }
    for (f, only) in [("zero", "stats"), ("compiler", "explain")] {
        if parsed.last(f).is_some() && action != only {
            return usage_error(prog, format!("argument --{f}: only with {only}"));
        }
    }
    if let Some(dir) = parsed.str("neuron_cache") {
        if matches!(action, "explain" | "config") {
            return usage_error(prog, format!("{action}: not with --neuron-cache"));
        }
        return neuron_main(prog, action, &parsed, dir);
    }
    for f in [
        "neuron_version",
        "failed",
        "locks",
        "old_versions",
        "dry_run",
    ] {
        if parsed.last(f).is_some() {
            return usage_error(
                prog,
                format!(
                    "argument --{}: only with --neuron-cache",
                    f.replace('_', "-")
                ),
            );
        }
    }
    if action == "clean" {
        return usage_error(
            prog,
            "clean: only with --neuron-cache (nxcc's own cache has gc and clear)".into(),
        );
    }
    let shared = parsed.str("cache_dir").filter(|d| {
        action != "explain" && crate::objstore::is_url(d) && crate::objstore::available()
    });
    let ran = match shared {
        Some(url) => super::shared::actions::run(prog, action, &parsed, url),
        None => super::actions::run(prog, action, &parsed, compile_args),
    };
    match ran {
        Ok(status) => status,
        Err(message) => usage_error(prog, message),
    }
}

/// `cache stats|verify|clean --neuron-cache DIR`: the framework's cache
/// ([`crate::neuron_cache::maintain`]). Exit status: 0; `verify`: 1 when a NEFF does not
/// verify; a usage error 2; a cache that cannot be read 70.
fn neuron_main(prog: &str, action: &str, parsed: &argparse::Parsed, dir: &str) -> i32 {
    use crate::neuron_cache::maintain as nm;
    let json = parsed.flag("json");
    if matches!(action, "gc" | "clear") {
        return usage_error(
            prog,
            format!("{action}: not with --neuron-cache (clean removes what is asked of it)"),
        );
    }
    if parsed.str("max_size").is_some() {
        return usage_error(prog, "argument --max-size: only with gc".into());
    }
    let clean_flags = ["failed", "locks", "old_versions", "dry_run"];
    if action != "clean" {
        if let Some(f) = clean_flags.iter().find(|f| parsed.flag(f)) {
            return usage_error(
                prog,
                format!("argument --{}: only with clean", f.replace('_', "-")),
            );
        }
    }
    let version = parsed.str("neuron_version");
    if let Some(v) = version {
        if let Err(e) = crate::neuron_cache::check_version(v) {
            return usage_error(prog, format!("argument --neuron-version: {e}"));
        }
    }
    let writes = action == "clean" && !parsed.flag("dry_run");
    let cache = match neuron_place(dir, version, writes) {
        Ok(p) => p,
        Err(Refusal::Usage(why)) => {
            return usage_error(prog, format!("argument --neuron-cache: {why}"))
        }
        Err(Refusal::Unusable(why)) => {
            crate::cli::subcommand::err(&format!("{prog} cache: error: {why}\n"));
            return crate::error::EXIT_COMPILE_FAILED;
        }
    };
    let cache = cache.as_ref();
    let unreadable = |e: std::io::Error| {
        crate::cli::subcommand::err(&format!(
            "{prog} cache: error: cannot read the neuron cache {}: {e}\n",
            cache.shown()
        ));
        crate::error::EXIT_COMPILE_FAILED
    };
    match action {
        "stats" => {
            let s = match nm::stats(cache, version) {
                Ok(s) => s,
                Err(e) => return unreadable(e),
            };
            print(json, &s, || {
                let mut t = format!("neuron cache: {}\n", s.dir);
                if s.versions.is_empty() {
                    t.push_str("no neuronxcc-<version> directory\n");
                }
                for v in &s.versions {
                    t.push_str(&format!(
                        "neuronxcc-{}: {} done, {} failed, {} locked ({} held by nobody), {} to do, {} refused{}; {}\n",
                        v.version, v.done, v.failed, v.locked, v.locked_unheld, v.to_do, v.refused,
                        match v.foreign {
                            0 => String::new(),
                            n => format!(", {n} of other tools"),
                        },
                        human_bytes(v.bytes)
                    ));
                }
                for e in &s.entries {
                    if let Some(r) = &e.reason {
                        t.push_str(&format!("  {} {}/{}: {r}\n", e.class, e.version, e.name));
                    }
                    if let Some(l) = &e.lock {
                        t.push_str(&format!(
                            "  locked {}/{}: {}\n",
                            e.version,
                            e.name,
                            l.describe()
                        ));
                    }
                }
                for (name, why) in &s.refused_versions {
                    t.push_str(&format!("  refused {name}: {why}\n"));
                }
                t
            });
            0
        }
        "verify" => {
            let r = match nm::verify(cache, version) {
                Ok(r) => r,
                Err(e) => return unreadable(e),
            };
            print(json, &r, || {
                let mut t = String::new();
                for b in &r.bad {
                    t.push_str(&format!(
                        "bad: neuronxcc-{}/{}: {}\n",
                        b.version,
                        b.name,
                        b.problems.join("; ")
                    ));
                }
                t.push_str(&format!(
                    "checked {} NEFFs: {} ok, {} bad\n",
                    r.checked,
                    r.ok,
                    r.bad.len()
                ));
                t
            });
            if r.bad.is_empty() {
                0
            } else {
                EXIT_CORRUPT
            }
        }
        _ => {
            if !clean_flags[..3].iter().any(|f| parsed.flag(f)) {
                return usage_error(
                    prog,
                    "clean: say what to remove: --failed, --locks, --old-versions".into(),
                );
            }
            let min_age_s = match nm::parse_age(parsed.str("min_age").unwrap_or("1d")) {
                Ok(n) => n,
                Err(e) => return usage_error(prog, format!("argument --min-age: {e}")),
            };
            let keep_version = if parsed.flag("old_versions") {
                match version.map(str::to_string) {
                    Some(v) => Some(v),
                    None => match cache.scan(None) {
                        Ok(scan) => nm::newest_version(&scan),
                        Err(e) => return unreadable(e),
                    },
                }
            } else {
                None
            };
            let req = nm::CleanRequest {
                failed: parsed.flag("failed"),
                locks: parsed.flag("locks"),
                min_age_s,
                keep_version,
                dry_run: parsed.flag("dry_run"),
            };
            let r = match nm::clean(cache, &req, &|m| {
                crate::cli::subcommand::err(&format!("{prog} cache: {m}\n"))
            }) {
                Ok(r) => r,
                Err(e) => return unreadable(e),
            };
            print(json, &r, || {
                let verb = if r.dry_run { "would remove" } else { "removed" };
                let mut t = String::new();
                for x in &r.removed {
                    t.push_str(&format!("{verb} {} ({})\n", x.path, x.why));
                }
                for x in &r.kept {
                    t.push_str(&format!("kept {} ({})\n", x.path, x.why));
                }
                t.push_str(&if r.dry_run {
                    format!(
                        "dry run: {} to remove, {} kept\n",
                        r.removed.len(),
                        r.kept.len()
                    )
                } else {
                    format!("{} removed, {} kept\n", r.removed.len(), r.kept.len())
                });
                t
            });
            0
        }
    }
}

/// Why the framework's cache cannot be worked on: a usage error, or a cache that cannot be used.
enum Refusal {
    Usage(String),
    Unusable(String),
}

/// The framework's cache named `dir`: a directory (checked by the trust rule; its cache-wide
/// lock opened when the command `writes`), or a bucket (`s3://BUCKET/PREFIX`).
fn neuron_place(
    dir: &str,
    version: Option<&str>,
    writes: bool,
) -> Result<Box<dyn crate::neuron_cache::place::Place>, Refusal> {
    use crate::neuron_cache::{bucket::Bucket, directory::Directory, Location, NeuronCache};
    use crate::objstore::StorageError;
    let path = match crate::neuron_cache::location(dir).map_err(Refusal::Usage)? {
        Location::Bucket(url) => {
            return Bucket::open(&url)
                .map(|b| Box::new(b) as Box<dyn crate::neuron_cache::place::Place>)
                .map_err(|e| match e {
                    // A URL the client does not take (a bucket name that is not one).
                    StorageError::Other(why) => Refusal::Usage(why),
                    e => Refusal::Unusable(format!("cannot read the neuron cache {url}: {e}")),
                });
        }
        Location::Dir(d) => d,
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let cache = NeuronCache::new(crate::plan::absolute(&cwd, &path.to_string_lossy()));
    cache
        .check(version)
        .map_err(|u| Refusal::Usage(u.to_string()))?;
    let unreadable = |e: std::io::Error| {
        Refusal::Unusable(format!(
            "cannot read the neuron cache {}: {e}",
            cache.dir().display()
        ))
    };
    let lock = match (writes, cache.open().map_err(unreadable)?) {
        (true, Some(top)) => {
            let l = crate::neuron_cache::lock::CacheLock::open(&top, cache.dir());
            Some(std::sync::Arc::new(l.map_err(unreadable)?))
        }
        _ => None,
    };
    let locker = crate::lockfile::keeper::Locker::Local(crate::lockfile::lease());
    Ok(Box::new(Directory::new(cache, locker, lock)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(12), "12 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB (3221225472 bytes)");
    }
}
