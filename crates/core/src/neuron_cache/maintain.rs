//! Looking after a framework cache: [`stats`] (entries per version and class, sizes),
//! [`verify`] (each done entry's NEFF archive) and [`clean`] (failed entries, stale locks, other
//! compiler versions), for `nxcc cache stats|verify|clean --neuron-cache DIR`. Nothing is
//! followed through a link; every removal is said, and `dry_run` says it without removing.

use std::io;

use serde::Serialize;

use super::{lock, Class, Entry, LockOwner, NeuronCache, Scan, GRAPH_FILES};
use super::{LOG_FILE, NEFF_FILE, VERSION_PREFIX};
use crate::fsx::{unique, Dir};
use crate::lockfile::{self, Acquired};

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
    /// The cache directory.
    pub dir: String,
    /// Per version directory.
    pub versions: Vec<VersionStat>,
    /// Every entry.
    pub entries: Vec<EntryStat>,
    /// Version directory names that are not plain directories (links), with the reason.
    pub refused_versions: Vec<(String, String)>,
}

/// One entry of a scan, as `stats` reports it.
pub fn entry_stat(e: &Entry) -> EntryStat {
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

/// Counts of a scan.
pub fn stats_of(cache: &NeuronCache, scan: &Scan) -> Stats {
    let mut s = Stats {
        dir: cache.dir().display().to_string(),
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
pub fn stats(cache: &NeuronCache, only: Option<&str>) -> io::Result<Stats> {
    Ok(stats_of(cache, &cache.scan(only)?))
}

/// The directory of an entry found by a scan, opened again without following links.
pub fn open_entry(cache: &NeuronCache, e: &Entry) -> io::Result<Dir> {
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

/// `verify`: read each done entry's NEFF (no link followed) and check its archive
/// ([`crate::neff::verify::verify`]). Changes nothing.
pub fn verify(cache: &NeuronCache, only: Option<&str>) -> io::Result<VerifyReport> {
    let scan = cache.scan(only)?;
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
        let problems = match open_entry(cache, e).and_then(|d| d.read(NEFF_FILE)) {
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

/// What `clean` is asked to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanRequest {
    /// Failed entries' logs (`--failed`): the entry is to do again.
    pub failed: bool,
    /// Stale locks: those whose holder is proven gone (at any age), and foreign ones nobody
    /// `flock`s at least [`CleanRequest::min_age_s`] old; the staging directories of dead runs.
    pub locks: bool,
    /// The minimum age of a foreign lock removed, seconds.
    pub min_age_s: u64,
    /// Every version directory but this one (`--old-versions`).
    pub keep_version: Option<String>,
    /// Say what would be removed, remove nothing.
    pub dry_run: bool,
}

/// One thing `clean` removed (or would remove).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Removal {
    /// Its path.
    pub path: String,
    /// Why.
    pub why: String,
}

/// What `clean` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CleanReport {
    /// Nothing was removed: this is what would have been.
    pub dry_run: bool,
    /// What was removed (or would be).
    pub removed: Vec<Removal>,
    /// What was left, and why (a lock held, too young, an entry locked).
    pub kept: Vec<Removal>,
}

fn age_s(st: &rustix::fs::Stat) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    now.saturating_sub(st.st_mtime.max(0) as u64)
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
pub fn newest_version(scan: &Scan) -> Option<String> {
    scan.versions
        .iter()
        .map(|v| v.version.clone())
        .max_by(|a, b| version_order(a, b))
}

/// `clean`: remove what `req` asks for, saying each removal; under the cache-wide lock (`say`
/// hears that it waits for it).
pub fn clean(
    cache: &NeuronCache,
    req: &CleanRequest,
    say: &dyn Fn(&str),
) -> io::Result<CleanReport> {
    let mut r = CleanReport {
        dry_run: req.dry_run,
        ..CleanReport::default()
    };
    let Some(top) = cache.open()? else {
        return Ok(r);
    };
    let cache_lock = match req.dry_run {
        true => None,
        false => Some(lock::CacheLock::open(&top, cache.dir())?),
    };
    let _held = match &cache_lock {
        Some(l) => Some(l.hold(say)?),
        None => None,
    };
    let scan = cache.scan(None)?;
    for v in &scan.versions {
        let old = req
            .keep_version
            .as_ref()
            .is_some_and(|keep| *keep != v.version);
        if old {
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
            } else {
                if !req.dry_run {
                    let name = super::version_dir_name(&v.version);
                    let away = unique::name(&format!(".nxcc-evict-{VERSION_PREFIX}"));
                    top.rename(&name, &top, &away)?;
                    top.remove_all(&away)?;
                }
                r.removed.push(Removal {
                    path,
                    why: format!(
                        "another compiler version than {} ({} entries)",
                        req.keep_version.as_deref().unwrap_or_default(),
                        v.entries.len()
                    ),
                });
            }
            continue;
        }
        for e in &v.entries {
            let Ok(dir) = open_entry(cache, e) else {
                continue;
            };
            // What goes wrong in one entry (a FIFO where its lock should be, a file that
            // cannot be read) is said for that entry, and the others are cleaned.
            if let Err(err) = clean_entry(&dir, e, req, &mut r) {
                r.kept.push(Removal {
                    path: e.path.display().to_string(),
                    why: format!("left alone: {err}"),
                });
            }
        }
    }
    Ok(r)
}

/// `clean` in the entry `e`, open at `dir`: its stale locks and staging directories, its log.
fn clean_entry(dir: &Dir, e: &Entry, req: &CleanRequest, r: &mut CleanReport) -> io::Result<()> {
    let shown = |name: &str| e.path.join(name).display().to_string();
    if req.locks {
        for g in GRAPH_FILES {
            clean_lock(dir, e, &lock::lock_name(g), req, r)?;
        }
        clean_staging(dir, e, req.dry_run, r)?;
    }
    if !(req.failed && e.class == Class::Failed) {
        return Ok(());
    }
    let removal = Removal {
        path: shown(LOG_FILE),
        why: "a failed compile (the entry becomes to do)".into(),
    };
    if req.dry_run {
        r.removed.push(removal);
        return Ok(());
    }
    let graph = e.graph.unwrap_or(GRAPH_FILES[0]);
    match lockfile::acquire(dir, &lock::lock_name(graph), lockfile::lease(), false)? {
        Acquired::Locked(_l) => {
            dir.remove_file(LOG_FILE)?;
            r.removed.push(removal);
        }
        _ => r.kept.push(Removal {
            path: shown(LOG_FILE),
            why: "the entry is locked".into(),
        }),
    }
    Ok(())
}

/// One lock file of an entry: removed when its holder is proven gone (at any age), or when
/// it is foreign, nobody `flock`s it and it is at least `--min-age` old; kept otherwise.
fn clean_lock(
    dir: &Dir,
    e: &Entry,
    name: &str,
    req: &CleanRequest,
    r: &mut CleanReport,
) -> io::Result<()> {
    let Ok(st) = dir.stat(name) else {
        return Ok(());
    };
    let age = age_s(&st);
    let path = e.path.join(name).display().to_string();
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    if kind != rustix::fs::FileType::RegularFile {
        r.kept.push(Removal {
            path,
            why: format!(
                "refused: {} where a lock file belongs (never opened; remove it by hand)",
                crate::fsx::regular::kind_name(kind)
            ),
        });
        return Ok(());
    }
    let Some(holder) = lockfile::judge(dir, name)? else {
        return Ok(());
    };
    let why = match &holder {
        LockOwner::Dead { .. } => "its holder, a process of this host, is gone",
        LockOwner::Expired { .. } => "its holder's lease ended",
        LockOwner::Void { .. } => "its lease is void (its modification time is in the future)",
        LockOwner::Foreign { .. } if age >= req.min_age_s => "a lock nxcc did not make, unheld",
        LockOwner::Foreign { .. } => {
            r.kept.push(Removal {
                path,
                why: format!("a lock nxcc did not make, younger than --min-age ({age} s old)"),
            });
            return Ok(());
        }
        live => {
            r.kept.push(Removal {
                path,
                why: live.describe(),
            });
            return Ok(());
        }
    };
    let removed = req.dry_run
        || lockfile::remove_stale(dir, name, matches!(holder, LockOwner::Foreign { .. }))?
            .is_some();
    if removed {
        r.removed.push(Removal {
            path,
            why: format!("{why}, {age} s old ({})", lockfile::shown(holder.text())),
        });
    }
    Ok(())
}

/// The staging directories dead nxcc runs left in an entry (`.nxcc-tmp-*` whose maker no
/// longer runs): removed (an entry whose lock someone holds is left alone).
fn clean_staging(dir: &Dir, e: &Entry, dry_run: bool, r: &mut CleanReport) -> io::Result<()> {
    let names = super::publish::dead_leftovers(dir);
    if names.is_empty() {
        return Ok(());
    }
    let why = "the staging directory of a dead nxcc run";
    let shown = |n: &String| e.path.join(n).display().to_string();
    if dry_run {
        for n in &names {
            r.removed.push(Removal {
                path: shown(n),
                why: why.into(),
            });
        }
        return Ok(());
    }
    let graph = e.graph.unwrap_or(GRAPH_FILES[0]);
    match lockfile::acquire(dir, &lock::lock_name(graph), lockfile::lease(), false)? {
        Acquired::Locked(_l) => {
            for n in &names {
                dir.remove_all(n)?;
                r.removed.push(Removal {
                    path: shown(n),
                    why: why.into(),
                });
            }
        }
        _ => r.kept.push(Removal {
            path: e.path.display().to_string(),
            why: "its staging directories stay: the entry is locked".into(),
        }),
    }
    Ok(())
}

/// `30`, `30s`, `10m`, `2h`, `1d`: seconds.
pub fn parse_age(text: &str) -> Result<u64, String> {
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
        let cache = NeuronCache::new(t.path());
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
        assert_eq!(done.removed, dry.removed);
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
