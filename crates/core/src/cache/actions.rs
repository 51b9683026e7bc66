//! `nxcc cache`'s actions on nxcc's own cache, each from its typed arguments
//! ([`super::command`]): `stats` (what it holds and what it did: the counters, `--zero`),
//! `verify`, `gc` (down to `--max-size`, else the configured `max_size`), `clear`, `explain --
//! COMPILE-ARGS` (hit or miss, and what differs from the nearest entries) and `config
//! [KEY=VALUE...]` (the configuration file every user of the directory shares). The directory is
//! `--cache_dir`, else `$NEURON_COMPILE_CACHE_URL`, else the default; one that may not be used is
//! a usage error (exit 2).

use serde::Serialize;

use super::config::{check_local, CacheConfig};
use super::counters::{self, Counters};
use super::settings;
use super::store::Cache;
use super::{evict, explain, maintain};
use crate::plan::{Invocation, Refusal};
use crate::words::count;

pub use super::explain::EXIT_MISS;

/// Exit status of `verify` when it found (and evicted) corrupt entries.
pub const EXIT_CORRUPT: i32 = 1;

/// What an action ends with: its exit status, or a usage error's message (exit 2, reported by
/// [`super::command`] with the command's usage).
pub type Ended = Result<i32, String>;

/// A byte count for people: `1.5 MiB (1572864 bytes)`.
pub(crate) fn human_bytes(n: u64) -> String {
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

/// Print a report: JSON with `--json`, else the text.
pub fn print<T: Serialize>(json: bool, report: &T, text: impl FnOnce() -> String) {
    if json {
        let mut s = serde_json::to_string_pretty(report).unwrap_or_default();
        s.push('\n');
        crate::cli::subcommand::out(&s);
    } else {
        crate::cli::subcommand::out(&text());
    }
}

/// Say the warnings of a maintenance action on stderr.
fn warn(prog: &str, warnings: &[String]) {
    for w in warnings {
        eprintln!("{prog}: warning: {w}");
    }
}

/// Add `evictions` to the cache's counters (best effort: a count is not worth failing for).
fn count_evictions(cache: &Cache, evictions: usize) {
    let _ = counters::add(
        cache,
        0,
        &Counters {
            evictions: evictions as i64,
            ..Counters::default()
        },
    );
}

/// `stats`: what the cache holds, its limit and how full it is, and what it did; `zero`: its
/// counters set back to zero after. A cache that does not exist (a mistyped `--cache_dir`, or no
/// compile through it yet) is reported as such, as ccache reports one, with what would create
/// it; the exit status is 0.
pub fn stats(cache_dir: Option<&str>, zero: bool, json: bool) -> Ended {
    let cache = own_cache(cache_dir)?;
    let exists = matches!(cache.open_root(false), Ok(Some(_)));
    let holds = maintain::stats(&cache);
    let max_size = settings::File::read(&cache).max_size.filter(|n| *n > 0);
    let report = StatsReport {
        missing: (!exists).then(|| match cache_dir {
            Some(dir) => format!(
                "no cache here: nothing was ever cached with --cache_dir {dir} (check the path; a compile with it creates the cache)"
            ),
            None => "not created yet: the first compile through it creates it".to_string(),
        }),
        used_percent: max_size.map(|m| holds.bytes as f64 * 100.0 / m as f64),
        holds,
        counters: counters::read(&cache, None),
        max_size,
        exists,
        zeroed: zero,
    };
    if zero {
        counters::zero(&cache);
    }
    print(json, &report, || stats_text(&report));
    Ok(0)
}

/// `verify`: every entry checked, the corrupt ones evicted ([`EXIT_CORRUPT`] when there were).
pub fn verify(cache_dir: Option<&str>, json: bool) -> Ended {
    let cache = own_cache(cache_dir)?;
    let r = maintain::verify(&cache);
    evict::recount(&cache);
    count_evictions(&cache, r.corrupt.len());
    print(json, &r, || {
        let mut t = String::new();
        for c in &r.corrupt {
            t.push_str(&format!("corrupt: {} ({}); evicted\n", c.key, c.reason));
        }
        t.push_str(&format!(
            "checked {}: {} ok, {}, {} corrupt\n",
            count(r.checked, "entry", "entries"),
            r.ok,
            count(r.failed, "failed compile", "failed compiles"),
            r.corrupt.len()
        ));
        t
    });
    Ok(if r.corrupt.is_empty() {
        0
    } else {
        EXIT_CORRUPT
    })
}

/// `gc`: least recently used entries evicted down to `--max-size`, else the configured size.
pub fn gc(prog: &str, cache_dir: Option<&str>, args: &super::args::Gc, json: bool) -> Ended {
    let cache = own_cache(cache_dir)?;
    let max_size = gc_size(&cache, args.max_size.as_deref())?;
    let r = maintain::gc(&cache, max_size);
    evict::recount(&cache);
    count_evictions(&cache, r.evicted);
    warn(prog, &r.warnings);
    print(json, &r, || {
        gc_said(
            (r.evicted, r.freed_bytes),
            (r.entries_left, r.bytes_left),
            &stale_removed(r.leftovers_removed),
        )
    });
    Ok(0)
}

/// `clear`: every entry evicted.
pub fn clear(prog: &str, cache_dir: Option<&str>, json: bool) -> Ended {
    let cache = own_cache(cache_dir)?;
    let r = maintain::clear(&cache);
    evict::recount(&cache);
    warn(prog, &r.warnings);
    print(json, &r, || {
        format!(
            "evicted {}{}\n",
            count(r.evicted, "entry", "entries"),
            stale_removed(r.leftovers_removed)
        )
    });
    Ok(0)
}

/// What `gc` says, of a directory or a shared tier: the entries evicted and left (each a count
/// and their bytes), then `tail`.
pub(crate) fn gc_said(evicted: (usize, u64), left: (usize, u64), tail: &str) -> String {
    format!(
        "evicted {} ({}); {} left ({}){tail}\n",
        count(evicted.0, "entry", "entries"),
        human_bytes(evicted.1),
        count(left.0, "entry", "entries"),
        human_bytes(left.1),
    )
}

/// What `gc` and `clear` say of the stale files they removed (nothing when there were none):
/// the temporary entries of compiles that are gone, half-evicted entries, the lock files of
/// entries no longer there, and whatever in the cache is not a plain file or directory.
fn stale_removed(n: usize) -> String {
    match n {
        0 => String::new(),
        n => format!(
            "; removed {} no compile uses (unfinished entries, free locks)",
            count(n, "stale file", "stale files")
        ),
    }
}

/// The cache `dir` (else the default) names, checked; a usage error's message.
fn own_cache(dir: Option<&str>) -> Result<Cache, String> {
    let dir = dir
        .map(str::to_string)
        .unwrap_or_else(super::config::default_dir);
    if let Err(e) = check_local(&dir) {
        return Err(format!("argument --cache_dir: {}", e.cause.to_lowercase()));
    }
    let cache = Cache::new(crate::fsx::absolute(
        &std::env::current_dir().unwrap_or_default(),
        &dir,
    ));
    match cache.check() {
        Ok(()) => Ok(cache),
        Err(u) => Err(format!("argument --cache_dir: {u}")),
    }
}

/// `gc`'s size: `--max-size`, else the configured `max_size`.
fn gc_size(cache: &Cache, flag: Option<&str>) -> Result<u64, String> {
    match flag {
        Some(s) => settings::parse_size(s).map_err(|e| format!("argument --max-size: {e}")),
        None => settings::File::read(cache)
            .max_size
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                "gc: give --max-size, or configure one (nxcc cache config max_size=20G)".into()
            }),
    }
}

/// What `stats` reports: what the cache holds, what it did, its limit.
#[derive(Debug, Serialize)]
struct StatsReport {
    #[serde(flatten)]
    holds: maintain::Stats,
    counters: Counters,
    /// The configured limit (`None`: no limit).
    max_size: Option<u64>,
    /// How full the cache is against its limit, in percent (`None`: no limit).
    used_percent: Option<f64>,
    /// Whether the cache exists (a compile through it creates it).
    exists: bool,
    /// When it does not: that, and what would create it.
    #[serde(skip_serializing_if = "Option::is_none")]
    missing: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    zeroed: bool,
}

fn stats_text(r: &StatsReport) -> String {
    let s = &r.holds;
    let c = &r.counters;
    let mut t = format!("cache: {}\n", s.dir);
    if let Some(why) = &r.missing {
        t.push_str(&format!("({why})\n"));
    }
    t.push_str(&format!("entries: {}\n", s.entries));
    t.push_str(&format!("failed entries: {}\n", s.failed));
    if s.corrupt > 0 {
        t.push_str(&format!(
            "corrupt entries: {} (nxcc cache verify evicts them)\n",
            s.corrupt
        ));
    }
    t.push_str(&format!("size: {}\n", human_bytes(s.bytes)));
    match (r.max_size, r.used_percent) {
        (Some(m), Some(p)) => {
            t.push_str(&format!("max_size: {} ({p:.1} % full)\n", human_bytes(m)))
        }
        _ => t.push_str("max_size: none (no limit; nxcc cache config max_size=20G sets one)\n"),
    }
    t.push_str(&format!(
        "oldest: {}\nnewest: {}\n",
        s.oldest.as_deref().unwrap_or("-"),
        s.newest.as_deref().unwrap_or("-")
    ));
    if s.temporary > 0 {
        t.push_str(&format!("temporary directories: {}\n", s.temporary));
    }
    t.push_str(&format!(
        "hits: {} ({} from secondary caches)\n",
        c.hits, c.hits_secondary
    ));
    t.push_str(&format!(
        "misses: {} (new model {}, arguments {}, toolchain {}, other {})\n",
        c.misses(),
        c.misses_model,
        c.misses_arguments,
        c.misses_toolchain,
        c.misses_other
    ));
    t.push_str(&format!(
        "remembered failures served: {}\n",
        c.failures_served
    ));
    t.push_str(&format!(
        "compiles: {} ({} failed)\n",
        c.compiles, c.compile_failures
    ));
    if c.misses_refused > 0 {
        t.push_str(&format!(
            "misses refused (hit-only): {}\n",
            c.misses_refused
        ));
    }
    t.push_str(&format!("evictions: {}\n", c.evictions));
    t.push_str(&format!(
        "read: {}\nwritten: {}\n",
        human_bytes(c.bytes_read.max(0) as u64),
        human_bytes(c.bytes_written.max(0) as u64)
    ));
    t.push_str(&format!(
        "time saved: {:.1} s\n",
        c.time_saved_ms as f64 / 1000.0
    ));
    if r.zeroed {
        t.push_str("counters set back to zero\n");
    }
    t
}

/// What the `i`th setting given to `config` was probably meant to be, when it cannot be read:
/// a key and its value written as two words (`max_size 20G`), a key misspelt (`max-size=20G`).
fn config_tip(pairs: &[String], i: usize) -> Option<String> {
    use crate::cli::suggest::nearest;
    let p = &pairs[i];
    match p.split_once('=') {
        None => {
            let key = settings::KEYS
                .iter()
                .copied()
                .find(|k| k == p)
                .or_else(|| nearest(p, settings::KEYS))?;
            let value = pairs.get(i + 1).filter(|v| !v.contains('='));
            Some(match value {
                Some(v) => format!("a setting is one word, KEY=VALUE: did you mean `{key}={v}`?"),
                None => format!("a setting is one word, KEY=VALUE: `{key}=...`"),
            })
        }
        Some((key, value)) => {
            let known = nearest(key.trim(), settings::KEYS)?;
            Some(format!("did you mean `{known}={}`?", value.trim()))
        }
    }
}

/// `config`: print the configuration, or change the keys given (each checked first; nothing is
/// written if one does not read).
pub fn config(prog: &str, cache_dir: Option<&str>, pairs: &[String], json: bool) -> Ended {
    let cache = &own_cache(cache_dir)?;
    let mut file = settings::File::read(cache);
    for w in &file.warnings {
        eprintln!("{prog}: warning: {}: {w}", cache.root().display());
    }
    file.warnings.clear();
    if pairs.is_empty() {
        print(json, &file, || {
            let mut t = format!(
                "config: {}\n",
                cache.root().join(settings::CONFIG_FILE).display()
            );
            let lines: Vec<String> = file.text().lines().skip(1).map(str::to_string).collect();
            if lines.is_empty() {
                t.push_str(
                    "(nothing set: no size limit, no sloppiness, stat digests on, read-write)\n",
                );
            }
            for l in lines {
                t.push_str(&l);
                t.push('\n');
            }
            t
        });
        return Ok(0);
    }
    for (i, p) in pairs.iter().enumerate() {
        file.set_line(p).map_err(|e| {
            let tip = config_tip(pairs, i).map_or(String::new(), |t| format!("\n\n  tip: {t}"));
            format!("argument KEY=VALUE: {e}{tip}")
        })?;
    }
    match file.write(cache) {
        Ok(path) => {
            print(json, &file, || {
                format!(
                    "wrote {}:\n{}",
                    path.display(),
                    file.text()
                        .lines()
                        .skip(1)
                        .map(|l| format!("{l}\n"))
                        .collect::<String>()
                )
            });
            Ok(0)
        }
        Err(e) => {
            eprintln!(
                "[ERROR] cannot write the cache configuration in {}: {e}",
                cache.root().display()
            );
            Ok(crate::error::EXIT_COMPILE_FAILED)
        }
    }
}

/// `explain -- COMPILE-ARGS`: plan the compile as `nxcc compile` would, key it as the cache
/// would (writing nothing), and explain. Exit 0 on a hit, [`EXIT_MISS`] on a miss.
pub fn explain(
    prog: &str,
    cache_dir: Option<&str>,
    args: &super::args::Explain,
    json: bool,
) -> Ended {
    let argv: Vec<String> = std::iter::once("compile".to_string())
        .chain(args.compile_args.iter().cloned())
        .collect();
    let probe = match crate::plan::SystemProbe::new() {
        Ok(p) => p,
        Err(e) => {
            crate::cli::subcommand::err(&format!(
                "[ERROR] cannot read the current directory: {e}\n"
            ));
            return Ok(crate::error::EXIT_COMPILE_FAILED);
        }
    };
    let inv = match Invocation::from_argv(prog, &argv, &probe) {
        Ok(inv) => inv,
        Err(Refusal::Help(_) | Refusal::Version | Refusal::NotACompile(_)) => {
            return Err("the arguments after -- are not a compile's".into())
        }
        Err(r) => {
            crate::cli::subcommand::err(&r.render());
            return Ok(r.exit_status());
        }
    };
    let dir = inv
        .settings
        .cache
        .dir
        .as_deref()
        .filter(|d| !d.is_empty())
        .or(cache_dir);
    let cache = own_cache(dir)?;
    let cfg = match CacheConfig::in_dir(&inv, Some(cache.dir().to_path_buf())) {
        Ok(c) => c,
        Err(e) => {
            crate::cli::subcommand::err(&format!("{e}\n"));
            return Ok(crate::error::EXIT_COMPILE_FAILED);
        }
    };
    let engine = match &args.compiler {
        Some(c) => crate::engine::Engine::external(crate::fsx::absolute(&inv.plan.launch_dir, c)),
        None => crate::engine::Engine::Pipeline,
    };
    match explain::of_invocation(&inv, &cfg, &engine) {
        Ok(e) => {
            print(json, &e, || explain::text(&e));
            Ok(match e.verdict {
                explain::Verdict::Miss { .. } => EXIT_MISS,
                _ => 0,
            })
        }
        Err(line) => {
            crate::cli::subcommand::err(&format!("{line}\n"));
            Ok(crate::error::EXIT_COMPILE_FAILED)
        }
    }
}
