//! The framework's cache in a directory ([`Directory`]): its entries reached through directory
//! descriptors (nothing followed through a link), entry locks as lock files (held in this
//! process or in the lock keeper, [`crate::lockfile::keeper`]), the wrapper's cache-wide lock
//! held around scans and publications, results put in place whole ([`super::publish`]).

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::cleaning::{CleanReport, CleanRequest, Removal};
use super::lock::{lock_name, CacheLock};
use super::maintain;
use super::place::{Compiled, EntryLock, Hold, Place, Taken};
use super::publish::{self, NotWritten};
use super::{classify, version_dir_name, Class, Contents, Entry, InDir, LockOwner};
use super::{NeuronCache, Scan};
use crate::fsx::{unique, AtomicFile, Dir, Durability};
use crate::lockfile::keeper::{self, Held, Locker};
use crate::lockfile::{self, Acquired};

/// A framework cache in a directory.
#[derive(Debug)]
pub struct Directory {
    cache: NeuronCache,
    locker: Locker,
    /// The cache-wide lock (absent: not held, as for a dry run).
    cache_lock: Option<Arc<CacheLock>>,
}

impl Directory {
    /// The cache `cache` (checked by the caller), its entries' locks taken by `locker`, its
    /// cache-wide lock `cache_lock` held around scans and writes.
    pub fn new(cache: NeuronCache, locker: Locker, cache_lock: Option<Arc<CacheLock>>) -> Self {
        Directory {
            cache,
            locker,
            cache_lock,
        }
    }

    /// The cache.
    pub fn cache(&self) -> &NeuronCache {
        &self.cache
    }

    fn entry_dir(&self, e: &Entry) -> io::Result<Dir> {
        maintain::open_entry(&self.cache, e)
    }
}

impl Place for Directory {
    fn shown(&self) -> String {
        self.cache.dir().display().to_string()
    }

    fn hold(&self, say: &dyn Fn(&str)) -> io::Result<Hold<'_>> {
        match &self.cache_lock {
            Some(l) => l.hold(say).map(|g| Hold(Some(g))),
            None => Ok(Hold(None)),
        }
    }

    fn scan(&self, only: Option<&str>) -> io::Result<Scan> {
        self.cache.scan(only)
    }

    fn versions(&self) -> io::Result<Vec<String>> {
        let Some(top) = self.cache.open()? else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = top
            .entries()?
            .filter_map(|(n, _)| n.into_string().ok())
            .filter_map(|n| n.strip_prefix(super::VERSION_PREFIX).map(str::to_string))
            .filter(|v| !v.is_empty())
            .collect();
        names.sort();
        Ok(names)
    }

    fn read(&self, e: &Entry, name: &str, limit: u64) -> io::Result<Vec<u8>> {
        let dir = self.entry_dir(e)?;
        InDir {
            dir: &dir,
            skip: None,
        }
        .read(name, limit)
    }

    fn copy(&self, e: &Entry, name: &str, limit: u64, to: &Path) -> io::Result<()> {
        let from = self.entry_dir(e)?.open_file(name)?;
        let mut to = AtomicFile::create(to)?;
        let copied = io::copy(&mut io::Read::take(&from, limit + 1), &mut to)?;
        if copied > limit {
            return Err(io::Error::other(format!(
                "{name} has more than {limit} bytes"
            )));
        }
        to.commit(Durability::Visible)
    }

    fn lock(&self, version: &str, name: &str, graph: &str, break_foreign: bool) -> Taken {
        let rel = vec![version_dir_name(version), name.to_string()];
        let lock = lock_name(graph);
        let taken = self
            .locker
            .acquire(self.cache.dir(), &rel, &lock, break_foreign);
        let held = match taken {
            Ok(keeper::Taken::Locked(l)) => l,
            Ok(keeper::Taken::Busy(o)) => return Taken::Busy(o),
            Ok(keeper::Taken::Refused(why)) => return Taken::Refused(why),
            Err(e) => return Taken::Refused(e.to_string()),
        };
        match keeper::open_below(self.cache.dir(), &rel) {
            Ok(dir) => Taken::Locked(Box::new(DirLock {
                dir,
                held,
                lock,
                name: name.to_string(),
                break_foreign,
                cache_lock: self.cache_lock.clone(),
            })),
            Err(e) => Taken::Refused(e.to_string()),
        }
    }

    fn clean_locks(&self, e: &Entry, req: &CleanRequest, r: &mut CleanReport) -> io::Result<()> {
        let Ok(dir) = self.entry_dir(e) else {
            return Ok(());
        };
        for g in super::GRAPH_FILES {
            clean_lock(&dir, e, &lock_name(g), req, r)?;
        }
        clean_staging(&dir, e, req.dry_run, r)
    }

    fn remove_version(&self, version: &str) -> io::Result<()> {
        let top = self
            .cache
            .open()?
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let name = version_dir_name(version);
        let away = unique::name(&format!(".nxcc-evict-{}", super::VERSION_PREFIX));
        top.rename(&name, &top, &away)?;
        top.remove_all(&away)
    }
}

/// An entry of a directory locked: its lock file held.
#[derive(Debug)]
struct DirLock {
    dir: Dir,
    held: Held,
    lock: String,
    name: String,
    break_foreign: bool,
    cache_lock: Option<Arc<CacheLock>>,
}

impl DirLock {
    /// Whether the entry's graph is still the one `compiled` (read through no link, bounded).
    fn graph_unchanged(&self, compiled: &Compiled) -> Result<(), NotWritten> {
        compiled.check(|w| {
            let f = self.dir.open_file(compiled.graph)?;
            io::copy(&mut io::Read::take(&f, crate::hlo::READ_LIMIT), w).map(|_| ())
        })
    }

    /// Run `write` under the cache-wide lock (when there is one).
    fn under_cache_lock(
        &self,
        write: impl FnOnce() -> Result<(), NotWritten>,
    ) -> Result<(), NotWritten> {
        let say = |m: &str| crate::cli::subcommand::err(&format!("{m}\n"));
        let _held = match &self.cache_lock {
            Some(l) => Some(l.hold(&say)?),
            None => None,
        };
        write()
    }
}

impl EntryLock for DirLock {
    fn took_over(&self) -> Option<&LockOwner> {
        self.held.took_over()
    }

    fn verify(&self) -> Result<(), String> {
        self.held.verify()
    }

    fn look(&self) -> Class {
        let c = InDir {
            dir: &self.dir,
            skip: Some(&self.lock),
        };
        classify::look(&c, &self.name, self.break_foreign)
    }

    fn tidy(&self) {
        publish::remove_leftovers(&self.dir);
    }

    fn publish_neff(&self, neff: &Path, compiled: &Compiled) -> Result<(), NotWritten> {
        let ours = || self.held.verify();
        self.under_cache_lock(|| {
            self.graph_unchanged(compiled)?;
            publish::publish_neff(&self.dir, neff, &ours)
        })
    }

    fn write_log(&self, text: &str, compiled: &Compiled) -> Result<(), NotWritten> {
        let ours = || self.held.verify();
        self.under_cache_lock(|| {
            self.graph_unchanged(compiled)?;
            publish::write_log(&self.dir, text, &ours)
        })
    }

    fn remove_log(&self) -> io::Result<()> {
        self.dir.remove_file(super::LOG_FILE)
    }
}

fn age_s(st: &rustix::fs::Stat) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    now.saturating_sub(st.st_mtime.max(0) as u64)
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
    let Some(why) = maintain::why_stale(&holder, age, req, r, &path) else {
        return Ok(());
    };
    let removed = req.dry_run || lockfile::remove_stale(dir, name, holder.is_foreign())?.is_some();
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
    let names = publish::dead_leftovers(dir);
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
    let graph = e.graph.unwrap_or(super::GRAPH_FILES[0]);
    match lockfile::acquire(dir, &lock_name(graph), lockfile::lease(), false)? {
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
