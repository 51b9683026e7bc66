//! `nxcc cache stats|verify|clean --neuron-cache DIR|s3://...`: the framework's compile cache
//! ([`crate::neuron_cache::maintain`]) through nxcc's cache command. Exit status: 0; `verify`: 1
//! when a NEFF does not verify; a usage error 2; a cache that cannot be read 70.

use super::actions::{human_bytes, print, EXIT_CORRUPT};
use super::args::{usage, Clean};
use crate::neuron_cache::bucket::Bucket;
use crate::neuron_cache::directory::Directory;
use crate::neuron_cache::place::Place;
use crate::neuron_cache::{maintain as nm, Location, NeuronCache};
use crate::objstore::StorageError;

/// The framework's cache `dir` names (only `version`'s directory, when given), checked: a version
/// that is no version, a location that is neither a directory nor a bucket and a directory the
/// cache must not use are usage errors; a bucket that cannot be reached a cache that cannot be
/// used (the exit status, said). `writes`: the command changes the cache (a directory's
/// cache-wide lock is opened).
fn opened(
    prog: &str,
    action: &str,
    dir: &str,
    version: Option<&str>,
    writes: bool,
) -> Result<Box<dyn Place>, i32> {
    let refuse = |m: String| usage(prog, action, m).report();
    if let Some(v) = version {
        if let Err(e) = crate::neuron_cache::check_version(v) {
            return Err(refuse(format!("argument --neuron-version: {e}")));
        }
    }
    match place(dir, version, writes) {
        Ok(p) => Ok(p),
        Err(Refusal::Usage(why)) => Err(refuse(format!("argument --neuron-cache: {why}"))),
        Err(Refusal::Unusable(why)) => {
            crate::cli::subcommand::err(&format!("{prog} cache: error: {why}\n"));
            Err(crate::error::EXIT_COMPILE_FAILED)
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
fn place(dir: &str, version: Option<&str>, writes: bool) -> Result<Box<dyn Place>, Refusal> {
    let path = match crate::neuron_cache::location(dir).map_err(Refusal::Usage)? {
        Location::Bucket(url) => {
            return Bucket::open(&url)
                .map(|b| Box::new(b) as Box<dyn Place>)
                .map_err(|e| match e {
                    // A URL the client does not take (a bucket name that is not one).
                    StorageError::Other(why) => Refusal::Usage(why),
                    e => Refusal::Unusable(format!("cannot read the neuron cache {url}: {e}")),
                });
        }
        Location::Dir(d) => d,
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let cache = NeuronCache::new(crate::fsx::absolute(&cwd, &path.to_string_lossy()));
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

/// A cache that cannot be read: said, exit 70.
fn unreadable(prog: &str, cache: &dyn Place, e: std::io::Error) -> i32 {
    crate::cli::subcommand::err(&format!(
        "{prog} cache: error: cannot read the neuron cache {}: {e}\n",
        cache.shown()
    ));
    crate::error::EXIT_COMPILE_FAILED
}

/// `stats --neuron-cache DIR`: each version directory's entries by state, and why entries are
/// refused or locked.
pub fn stats(prog: &str, dir: &str, version: Option<&str>, json: bool) -> i32 {
    let cache = match opened(prog, "stats", dir, version, false) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let s = match nm::stats(cache.as_ref(), version) {
        Ok(s) => s,
        Err(e) => return unreadable(prog, cache.as_ref(), e),
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
    let cache = match opened(prog, "verify", dir, version, false) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let r = match nm::verify(cache.as_ref(), version) {
        Ok(r) => r,
        Err(e) => return unreadable(prog, cache.as_ref(), e),
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
    let writes = !args.dry_run;
    let cache = match opened(prog, "clean", &args.neuron_cache, version, writes) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let req = match request(prog, args, cache.as_ref()) {
        Ok(r) => r,
        Err(status) => return status,
    };
    let said = |m: &str| crate::cli::subcommand::err(&format!("{prog} cache: {m}\n"));
    let r = match nm::clean(cache.as_ref(), &req, &said) {
        Ok(r) => r,
        Err(e) => return unreadable(prog, cache.as_ref(), e),
    };
    print(json, &r, || clean_text(&r));
    0
}

/// What `clean` is asked to do (something must be), checked.
fn request(prog: &str, args: &Clean, cache: &dyn Place) -> Result<nm::CleanRequest, i32> {
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
