//! `nxcc cache stats|verify|clean --neuron-cache DIR`: the framework's compile cache
//! ([`crate::neuron_cache::maintain`]) through nxcc's cache command. Exit status: 0; `verify`: 1
//! when a NEFF does not verify; a usage error 2; a cache that cannot be read 70.

use super::actions::{human_bytes, print, EXIT_CORRUPT};
use super::args::{usage, Clean};
use crate::neuron_cache::{maintain as nm, NeuronCache};

/// The framework's cache in `dir` (only `version`'s directory, when given), checked: a remote
/// location, a version that is no version and a directory the cache must not use are usage
/// errors (the exit status, said).
fn opened(prog: &str, action: &str, dir: &str, version: Option<&str>) -> Result<NeuronCache, i32> {
    let refuse = |m: String| usage(prog, action, m).report();
    if let Err(why) = crate::neuron_cache::check_local(dir) {
        return Err(refuse(format!("argument --neuron-cache: {why}")));
    }
    if let Some(v) = version {
        if let Err(e) = crate::neuron_cache::check_version(v) {
            return Err(refuse(format!("argument --neuron-version: {e}")));
        }
    }
    let cache = NeuronCache::new(crate::fsx::absolute(
        &std::env::current_dir().unwrap_or_default(),
        dir,
    ));
    match cache.check(version) {
        Ok(()) => Ok(cache),
        Err(u) => Err(refuse(format!("argument --neuron-cache: {u}"))),
    }
}

/// A cache that cannot be read: said, exit 70.
fn unreadable(prog: &str, cache: &NeuronCache, e: std::io::Error) -> i32 {
    crate::cli::subcommand::err(&format!(
        "{prog} cache: error: cannot read the neuron cache {}: {e}\n",
        cache.dir().display()
    ));
    crate::error::EXIT_COMPILE_FAILED
}

/// `stats --neuron-cache DIR`: each version directory's entries by state, and why entries are
/// refused or locked.
pub fn stats(prog: &str, dir: &str, version: Option<&str>, json: bool) -> i32 {
    let cache = match opened(prog, "stats", dir, version) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let s = match nm::stats(&cache, version) {
        Ok(s) => s,
        Err(e) => return unreadable(prog, &cache, e),
    };
    print(json, &s, || stats_text(&s));
    0
}

fn stats_text(s: &nm::Stats) -> String {
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
}

/// `verify --neuron-cache DIR`: every done entry's NEFF checked ([`EXIT_CORRUPT`] when one does
/// not verify).
pub fn verify(prog: &str, dir: &str, version: Option<&str>, json: bool) -> i32 {
    let cache = match opened(prog, "verify", dir, version) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let r = match nm::verify(&cache, version) {
        Ok(r) => r,
        Err(e) => return unreadable(prog, &cache, e),
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

/// `clean --neuron-cache DIR`: what it is asked to remove (failed entries' logs, stale locks, the
/// other versions' directories), or with `--dry-run` what it would.
pub fn clean(prog: &str, args: &Clean, json: bool) -> i32 {
    let version = args.neuron_version.as_deref();
    let cache = match opened(prog, "clean", &args.neuron_cache, version) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let req = match request(prog, args, &cache) {
        Ok(r) => r,
        Err(status) => return status,
    };
    let said = |m: &str| crate::cli::subcommand::err(&format!("{prog} cache: {m}\n"));
    let r = match nm::clean(&cache, &req, &said) {
        Ok(r) => r,
        Err(e) => return unreadable(prog, &cache, e),
    };
    print(json, &r, || clean_text(&r));
    0
}

/// What `clean` is asked to do (something must be), checked.
fn request(prog: &str, args: &Clean, cache: &NeuronCache) -> Result<nm::CleanRequest, i32> {
    let refuse = |m: String| usage(prog, "clean", m).report();
    if !(args.failed || args.locks || args.old_versions) {
        return Err(refuse(
            "say what to remove: --failed, --locks, --old-versions".into(),
        ));
    }
    let min_age_s =
        nm::parse_age(&args.min_age).map_err(|e| refuse(format!("argument --min-age: {e}")))?;
    let keep_version = match (args.old_versions, &args.neuron_version) {
        (false, _) => None,
        (true, Some(v)) => Some(v.clone()),
        (true, None) => match cache.scan(None) {
            Ok(scan) => nm::newest_version(&scan),
            Err(e) => return Err(unreadable(prog, cache, e)),
        },
    };
    Ok(nm::CleanRequest {
        failed: args.failed,
        locks: args.locks,
        min_age_s,
        keep_version,
        dry_run: args.dry_run,
    })
}

fn clean_text(r: &nm::CleanReport) -> String {
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
}
