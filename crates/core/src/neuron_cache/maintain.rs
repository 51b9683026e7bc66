//! Looking after a framework cache, in a directory or a bucket ([`Place`]): [`stats`] (entries
//! per version and class, sizes), [`verify`] (each done entry's NEFF archive) and [`clean`]
//! (failed entries, stale locks, other compiler versions), for `nxcc cache stats|verify|clean
//! --neuron-cache DIR|s3://...`. Nothing is followed through a link; every removal is said, and
//! `dry_run` says it without removing.

use std::io;

use serde::Serialize;

pub use super::cleaning::{CleanReport, CleanRequest, Removal};
use super::place::{Place, Taken};
use super::{Class, Entry, LockOwner, NeuronCache, Scan, GRAPH_FILES};
use super::{LOG_FILE, NEFF_FILE};
use crate::fsx::Dir;

/// One entry as `stats` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryStat {
    /// Its compiler version.
    pub version: String,
    /// Its directory's name.
    pub name: String,
    /// `done`, `locked`, `failed`, `to_do`, `refused` or `foreign`.
    pub class: &'static str,
    /// Why it is refused, or what it is (foreign).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Written by a release up to 2.14.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub legacy: bool,
    /// Who holds its lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockOwner>,
    /// The apparent size of its files.
    pub bytes: u64,
}

/// The counts of one version directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VersionStat {
    /// The compiler version.
    pub version: String,
    /// Entries with a NEFF and the done marker.
    pub done: usize,
    /// Entries with a lock file (not done).
    pub locked: usize,
    /// Of the locked: those whose lock no live holder is known to hold (a dead nxcc run's, an
    /// expired lease, or a foreign one).
    pub locked_unheld: usize,
    /// Entries with a log and no NEFF.
    pub failed: usize,
    /// Entries to compile.
    pub to_do: usize,
    /// Entries that cannot be used as they are (links, missing graph, bad flags).
    pub refused: usize,
    /// Other tools' directories (optimum-neuron's registry and traced models).
    pub foreign: usize,
    /// The apparent size of their files.
    pub bytes: u64,
}

/// What `stats` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// The cache (its directory, its URL).
    pub dir: String,
    /// Per version directory.
    pub versions: Vec<VersionStat>,
    /// Every entry.
    pub entries: Vec<EntryStat>,
    /// Version directory names that are not plain directories (links), with the reason.
    pub refused_versions: Vec<(String, String)>,
}

/// One entry of a scan, as `stats` reports it.
pub(crate) fn entry_stat(e: &Entry) -> EntryStat {
    EntryStat {
        version: e.version.clone(),
        name: e.name.clone(),
        class: e.class.name(),
        reason: match &e.class {
            Class::Refused(r) | Class::Foreign(r) => Some(r.clone()),
            _ => None,
        },
        legacy: e.legacy,
        lock: match &e.class {
            Class::Locked(o) => Some(o.clone()),
            _ => None,
        },
        bytes: e.bytes,
    }
}

/// Counts of a scan of the cache shown as `shown`.
pub(crate) fn stats_of(shown: String, scan: &Scan) -> Stats {
    let mut s = Stats {
        dir: shown,
        versions: Vec::new(),
        entries: Vec::new(),
        refused_versions: scan.refused_versions.clone(),
    };
    for v in &scan.versions {
        let mut vs = VersionStat {
            version: v.version.clone(),
            ..VersionStat::default()
        };
        for e in &v.entries {
            match &e.class {
                Class::Done => vs.done += 1,
                Class::Locked(o) => {
                    vs.locked += 1;
                    if !matches!(o, LockOwner::Held { .. } | LockOwner::Leased { .. }) {
                        vs.locked_unheld += 1;
                    }
                }
                Class::Failed => vs.failed += 1,
                Class::ToDo => vs.to_do += 1,
                Class::Refused(_) => vs.refused += 1,
                Class::Foreign(_) => vs.foreign += 1,
            }
            vs.bytes += e.bytes;
            s.entries.push(entry_stat(e));
        }
        s.versions.push(vs);
    }
    s
}

/// `stats`: every version (or only `only`), every entry.
pub fn stats(place: &dyn Place, only: Option<&str>) -> io::Result<Stats> {
    Ok(stats_of(place.shown(), &place.scan(only)?))
}

/// The directory of an entry found by a scan, opened again without following links.
pub(crate) fn open_entry(cache: &NeuronCache, e: &Entry) -> io::Result<Dir> {
    let top = cache
        .open()?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    cache
        .open_version(&top, &super::version_dir_name(&e.version))?
        .open_dir(&e.name)
}

/// One done entry whose NEFF does not verify.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bad {
    /// Its compiler version.
    pub version: String,
    /// Its directory's name.
    pub name: String,
    /// What is wrong.
    pub problems: Vec<String>,
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Done entries checked.
    pub checked: usize,
    /// Those whose NEFF verified.
    pub ok: usize,
    /// Those whose NEFF did not.
    pub bad: Vec<Bad>,
}

/// The largest `model.neff` `verify` reads: what the NEFF reader decompresses at most.
pub const NEFF_LIMIT: u64 = crate::neff::read::MAX_DECOMPRESSED_BYTES;

/// `verify`: read each done entry's NEFF (no link followed, at most [`NEFF_LIMIT`] bytes) and
/// check its archive ([`crate::neff::verify::verify`]). Changes nothing.
pub fn verify(place: &dyn Place, only: Option<&str>) -> io::Result<VerifyReport> {
    let scan = place.scan(only)?;
    let mut r = VerifyReport {
        checked: 0,
        ok: 0,
        bad: Vec::new(),
    };
    for e in scan.versions.iter().flat_map(|v| &v.entries) {
        if e.class != Class::Done {
            continue;
        }
        r.checked += 1;
        let problems = match place.read(e, NEFF_FILE, NEFF_LIMIT) {
            Err(err) => vec![format!("{NEFF_FILE}: {err}")],
            Ok(bytes) => match crate::neff::read::Neff::from_bytes(bytes) {
                Err(err) => vec![format!("{NEFF_FILE}: {err}")],
                Ok(neff) => crate::neff::verify::verify(&neff).problems,
            },
        };
        if problems.is_empty() {
            r.ok += 1;
        } else {
            r.bad.push(Bad {
                version: e.version.clone(),
                name: e.name.clone(),
                problems,
            });
        }
    }
    Ok(r)
}

/// Order of version strings: by their numeric parts, then as text.
fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    let nums = |s: &str| -> Vec<u64> {
        s.split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    nums(a).cmp(&nums(b)).then_with(|| a.cmp(b))
}

/// The newest version of a scan (the one `--old-versions` keeps unless told).
pub(crate) fn newest_version(scan: &Scan) -> Option<String> {
    scan.versions
        .iter()
        .map(|v| v.version.clone())
        .max_by(|a, b| version_order(a, b))
}

/// `clean`: remove what `req` asks for, saying each removal; under the cache-wide lock (`say`
/// hears that it waits for it).
pub fn clean(place: &dyn Place, req: &CleanRequest, say: &dyn Fn(&str)) -> io::Result<CleanReport> {
    let mut r = CleanReport {
        dry_run: req.dry_run,
        ..CleanReport::default()
    };
    let _held = match req.dry_run {
        true => None,
        false => Some(place.hold(say)?),
    };
    let scan = place.scan(None)?;
    for v in &scan.versions {
        let old = req
            .keep_version
            .as_ref()
            .is_some_and(|keep| *keep != v.version);
        if old {
            clean_version(place, v, req, &mut r)?;
            continue;
        }
        for e in &v.entries {
            // What goes wrong in one entry (a FIFO where its lock should be, a file or an
            // object that cannot be read) is said for that entry, and the others are cleaned.
            if let Err(err) = clean_entry(place, e, req, &mut r) {
                r.kept.push(Removal {
                    path: e.path.display().to_string(),
                    why: format!("left alone: {err}"),
                });
            }
        }
    }
    Ok(r)
}

/// `clean` in the entry `e`: its stale locks (and what dead runs left), its log.
fn clean_entry(
    place: &dyn Place,
    e: &Entry,
    req: &CleanRequest,
    r: &mut CleanReport,
) -> io::Result<()> {
    if req.locks {
        place.clean_locks(e, req, r)?;
    }
    if req.failed && e.class == Class::Failed {
        clean_failed(place, e, req.dry_run, r)?;
    }
    Ok(())
}

/// `--old-versions`: the version `v` removed whole, unless an nxcc run compiles in it.
fn clean_version(
    place: &dyn Place,
    v: &super::Version,
    req: &CleanRequest,
    r: &mut CleanReport,
) -> io::Result<()> {
    let held = v.entries.iter().any(|e| {
        matches!(
            e.class,
            Class::Locked(LockOwner::Held { .. } | LockOwner::Leased { .. })
        )
    });
    let path = v.path.display().to_string();
    if held {
        r.kept.push(Removal {
            path,
            why: "an nxcc run is compiling in it".into(),
        });
        return Ok(());
    }
    if !req.dry_run {
        place.remove_version(&v.version)?;
    }
    r.removed.push(Removal {
        path,
        why: format!(
            "another compiler version than {} ({} entries)",
            req.keep_version.as_deref().unwrap_or_default(),
            v.entries.len()
        ),
    });
    Ok(())
}

/// `--failed`: a failed entry's `model.log` removed under the entry's lock (the entry becomes
/// to do); a locked entry's kept.
fn clean_failed(
    place: &dyn Place,
    e: &Entry,
    dry_run: bool,
    r: &mut CleanReport,
) -> io::Result<()> {
    let path = e.path.join(LOG_FILE).display().to_string();
    let why = "a failed compile (the entry becomes to do)";
    if dry_run {
        r.removed.push(Removal {
            path,
            why: why.into(),
        });
        return Ok(());
    }
    let graph = e.graph.unwrap_or(GRAPH_FILES[0]);
    match place.lock(&e.version, &e.name, graph, false) {
        Taken::Locked(l) => {
            l.remove_log()?;
            r.removed.push(Removal {
                path,
                why: why.into(),
            });
        }
        _ => r.kept.push(Removal {
            path,
            why: "the entry is locked".into(),
        }),
    }
    Ok(())
}

/// Why `clean --locks` removes a lock held by `holder`, `age_s` seconds old: its holder proven
/// gone (at any age), or foreign and at least `--min-age` old (in a bucket: past the lease such a
/// lock is given, too). `None` when it stays, said in `r`.
pub(crate) fn why_stale(
    holder: &LockOwner,
    age_s: u64,
    req: &CleanRequest,
    r: &mut CleanReport,
    path: &str,
) -> Option<&'static str> {
    let kept = |why: String, r: &mut CleanReport| {
        r.kept.push(Removal {
            path: path.to_string(),
            why,
        })
    };
    match holder {
        LockOwner::Dead { .. } => Some("its holder, a process of this host, is gone"),
        LockOwner::Expired { .. } => Some("its holder's lease ended"),
        LockOwner::Void { .. } => {
            Some("its lease is void (its modification time is in the future)")
        }
        LockOwner::ForeignVoid { .. } => {
            Some("a lock nxcc did not make, its lease void (its last write is in the future)")
        }
        LockOwner::Foreign { .. } | LockOwner::ForeignExpired { .. } if age_s >= req.min_age_s => {
            Some("a lock nxcc did not make, unheld")
        }
        LockOwner::Foreign { .. } | LockOwner::ForeignExpired { .. } => {
            let why = format!("a lock nxcc did not make, younger than --min-age ({age_s} s old)");
            kept(why, r);
            None
        }
        live => {
            kept(live.describe(), r);
            None
        }
    }
}

/// `30`, `30s`, `10m`, `2h`, `1d`: seconds.
pub(crate) fn parse_age(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1),
        Some((i, 'm')) => (&t[..i], 60),
        Some((i, 'h')) => (&t[..i], 3600),
        Some((i, 'd')) => (&t[..i], 86400),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{text:?} is not an age (30s, 10m, 2h, 1d)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neuron_cache::directory::Directory;

    /// The directory's place for maintenance, its cache-wide lock held around a clean.
    fn place(dir: &std::path::Path) -> Directory {
        let top = Dir::open(dir).unwrap();
        let lock = crate::neuron_cache::lock::CacheLock::open(&top, dir).unwrap();
        let locker = crate::lockfile::keeper::Locker::Local(crate::lockfile::lease());
        Directory::new(
            NeuronCache::new(dir),
            locker,
            Some(std::sync::Arc::new(lock)),
        )
    }

    #[test]
    fn ages_and_versions_order() {
        assert_eq!(parse_age("90").unwrap(), 90);
        assert_eq!(parse_age("10m").unwrap(), 600);
        assert_eq!(parse_age("2h").unwrap(), 7200);
        assert_eq!(parse_age("1d").unwrap(), 86400);
        assert!(parse_age("h").is_err() && parse_age("-1").is_err());
        assert_eq!(
            version_order("2.9.1.0+aa", "2.24.5133.0+58f8de22"),
            std::cmp::Ordering::Less
        );
    }

    #[test]
    fn clean_says_what_it_removes_and_dry_run_removes_nothing() {
        let t = tempfile::tempdir().unwrap();
        let mk = |v: &str, name: &str, files: &[(&str, &str)]| {
            let d = t.path().join(format!("neuronxcc-{v}")).join(name);
            std::fs::create_dir_all(&d).unwrap();
            for (f, body) in files {
                std::fs::write(d.join(f), body).unwrap();
            }
            d
        };
        let base = [("model.hlo_module.pb", "g"), ("compile_flags.json", "[]")];
        let failed = mk(
            "2.24.1",
            "MODULE_f+1",
            &[base[0], base[1], (LOG_FILE, "err")],
        );
        let locked = mk(
            "2.24.1",
            "MODULE_l+1",
            &[base[0], base[1], ("model.hlo_module.pb.lock", "")],
        );
        let old = mk("2.9.0", "MODULE_o+1", &base);
        std::fs::create_dir_all(locked.join(".nxcc-tmp-999999999-0-0")).unwrap();
        let cache = place(t.path());
        let req = CleanRequest {
            failed: true,
            locks: true,
            min_age_s: 0,
            keep_version: newest_version(&cache.scan(None).unwrap()),
            dry_run: true,
        };
        assert_eq!(req.keep_version.as_deref(), Some("2.24.1"));
        let dry = clean(&cache, &req, &|_| {}).unwrap();
        assert_eq!(dry.removed.len(), 4, "{dry:?}");
        assert!(failed.join(LOG_FILE).exists() && old.exists());
        assert!(locked.join("model.hlo_module.pb.lock").exists());
        let done = clean(
            &cache,
            &CleanRequest {
                dry_run: false,
                ..req.clone()
            },
            &|_| {},
        )
        .unwrap();
        // The same removals for the same reasons; an age said in a reason ("N s old") may have
        // grown by a second between the two runs.
        let said = |r: &CleanReport| -> Vec<(String, String)> {
            let ageless = |why: &str| {
                let part = |p: &str| match p.split_once(" s old") {
                    Some((n, rest)) if n.bytes().all(|c| c.is_ascii_digit()) => {
                        format!("N s old{rest}")
                    }
                    _ => p.to_string(),
                };
                why.split(", ").map(part).collect::<Vec<_>>().join(", ")
            };
            let by = |x: &Removal| (x.path.clone(), ageless(&x.why));
            r.removed.iter().map(by).collect()
        };
        assert_eq!(said(&done), said(&dry));
        assert!(!failed.join(LOG_FILE).exists() && failed.join(base[0].0).exists());
        assert!(!old.exists());
        assert!(!locked.join("model.hlo_module.pb.lock").exists());
        assert!(!locked.join(".nxcc-tmp-999999999-0-0").exists());
        let s = stats(&cache, None).unwrap();
        assert_eq!(s.versions.len(), 1);
        assert_eq!(s.versions[0].to_do, 2);
        // A young lock stays.
        std::fs::write(locked.join("model.hlo_module.pb.lock"), "").unwrap();
        let young = clean(
            &cache,
            &CleanRequest {
                locks: true,
                min_age_s: 3600,
                ..CleanRequest::default()
            },
            &|_| {},
        )
        .unwrap();
        assert!(
            young.removed.is_empty() && young.kept.len() == 1,
            "{young:?}"
        );
    }
}
