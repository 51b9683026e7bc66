//! `nxcc cache stats|verify|gc|clear [--cache_dir DIR] [--max-size SIZE] [--json]`.
//!
//! - `stats`: entries, failed entries, bytes, oldest and newest entry;
//! - `verify`: checks every entry's NEFF against its recorded blake3 and evicts the corrupt ones
//!   (exit 1 when it found any, 0 otherwise);
//! - `gc --max-size SIZE`: evicts least recently used entries until the entries take at most SIZE
//!   (`512M`, `2G`, ...), and removes leftovers of interrupted compiles;
//! - `clear`: evicts everything.
//!
//! The directory defaults to `$NEURON_COMPILE_CACHE_URL`, else [`DEFAULT_DIR`]; a remote URL, or
//! a directory the cache must not use ([`super::store::Cache::check`]: owned by another user,
//! writable by others), is a usage error (exit 2). `--json` prints the report as one JSON
//! object. What was removed because it was not a plain directory or file (a link) is warned
//! about on stderr.

use super::compile::{check_local, DEFAULT_DIR};
use super::maintain;
use super::store::Cache;
use crate::cli::argparse::{self, Nargs, Positional};
use crate::cli::flags::{flag, Action, Choices, Default, Flag, Kind, Scope, Visibility};
use crate::cli::subcommand::{out, Stop, Subcommand, HELP};

/// Exit status of `verify` when it found (and evicted) corrupt entries.
pub const EXIT_CORRUPT: i32 = 1;

const ACTIONS: [&str; 4] = ["stats", "verify", "gc", "clear"];

#[rustfmt::skip]
static CACHE_DIR: Flag = flag("--cache_dir", &["--cache-dir"], "cache_dir", Action::Store, Kind::Path, Default::Str(DEFAULT_DIR), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The cache directory (nxcc's entries are in its nxcc-v1 subdirectory).");
#[rustfmt::skip]
static MAX_SIZE: Flag = flag("--max-size", &[], "max_size", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "gc: the size to shrink the entries to (512M, 2G, ...).");
#[rustfmt::skip]
static JSON: Flag = flag("--json", &[], "json", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Print the report as one JSON object.");

static OWN_FLAGS: [&Flag; 4] = [&HELP, &CACHE_DIR, &MAX_SIZE, &JSON];

const POSITIONALS: [Positional; 1] = [Positional {
    metavar: "{stats,verify,gc,clear}",
    nargs: Nargs::One,
    help: "stats: what the cache holds; verify: check every entry, evict corrupt ones; gc: evict least recently used entries down to --max-size; clear: evict everything.",
}];

static COMMAND: Subcommand = Subcommand {
    name: "cache",
    flags: &OWN_FLAGS,
    positionals: &POSITIONALS,
    about: "Inspect and maintain the compile cache.",
};

fn usage_error(prog: &str, message: String) -> i32 {
    Stop::Usage(COMMAND.usage_error(prog, message)).report()
}

/// A byte count for people: `1.5 MiB (1572864 bytes)`.
pub fn human_bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {} ({n} bytes)", units[u])
    }
}

fn print<T: serde::Serialize>(json: bool, report: &T, text: impl FnOnce() -> String) {
    if json {
        let mut s = serde_json::to_string_pretty(report).unwrap_or_default();
        s.push('\n');
        out(&s);
    } else {
        out(&text());
    }
}

/// Run `cache` with its arguments; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
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
    let dir = parsed
        .str("cache_dir")
        .map(str::to_string)
        .unwrap_or_else(super::compile::default_dir);
    if let Err(e) = check_local(&dir) {
        return usage_error(
            prog,
            format!("argument --cache_dir: {}", e.cause.to_lowercase()),
        );
    }
    let max_size = match (action, parsed.str("max_size")) {
        ("gc", None) => {
            return usage_error(
                prog,
                "the following arguments are required for gc: --max-size".into(),
            )
        }
        ("gc", Some(s)) => match crate::admission::parse_size(s) {
            Ok(n) => n,
            Err(e) => return usage_error(prog, format!("argument --max-size: {e}")),
        },
        (_, Some(_)) => {
            return usage_error(prog, "argument --max-size: only with gc".into());
        }
        (_, None) => 0,
    };
    let json = parsed.flag("json");
    let cache = Cache::new(crate::plan::absolute(
        &std::env::current_dir().unwrap_or_default(),
        &dir,
    ));
    if let Err(u) = cache.check() {
        return usage_error(prog, format!("argument --cache_dir: {u}"));
    }
    let warn = |warnings: &[String]| {
        for w in warnings {
            eprintln!("{prog}: warning: {w}");
        }
    };
    match action {
        "stats" => {
            let s = maintain::stats(&cache);
            print(json, &s, || {
                let mut t = format!("cache: {}\n", s.dir);
                t.push_str(&format!("entries: {}\n", s.entries));
                t.push_str(&format!("failed entries: {}\n", s.failed));
                if s.corrupt > 0 {
                    t.push_str(&format!(
                        "corrupt entries: {} (nxcc cache verify evicts them)\n",
                        s.corrupt
                    ));
                }
                t.push_str(&format!("size: {}\n", human_bytes(s.bytes)));
                t.push_str(&format!(
                    "oldest: {}\nnewest: {}\n",
                    s.oldest.as_deref().unwrap_or("-"),
                    s.newest.as_deref().unwrap_or("-")
                ));
                if s.temporary > 0 {
                    t.push_str(&format!("temporary directories: {}\n", s.temporary));
                }
                t
            });
            0
        }
        "verify" => {
            let r = maintain::verify(&cache);
            print(json, &r, || {
                let mut t = String::new();
                for c in &r.corrupt {
                    t.push_str(&format!("corrupt: {} ({}); evicted\n", c.key, c.reason));
                }
                t.push_str(&format!(
                    "checked {} entries: {} ok, {} failed compiles, {} corrupt\n",
                    r.checked,
                    r.ok,
                    r.failed,
                    r.corrupt.len()
                ));
                t
            });
            if r.corrupt.is_empty() {
                0
            } else {
                EXIT_CORRUPT
            }
        }
        "gc" => {
            let r = maintain::gc(&cache, max_size);
            warn(&r.warnings);
            print(json, &r, || {
                format!(
                    "evicted {} entries ({}); {} entries left ({}); removed {} leftovers\n",
                    r.evicted,
                    human_bytes(r.freed_bytes),
                    r.entries_left,
                    human_bytes(r.bytes_left),
                    r.leftovers_removed
                )
            });
            0
        }
        _ => {
            let r = maintain::clear(&cache);
            warn(&r.warnings);
            print(json, &r, || {
                format!(
                    "evicted {} entries; removed {} leftovers\n",
                    r.evicted, r.leftovers_removed
                )
            });
            0
        }
    }
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
