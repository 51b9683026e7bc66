//! The framework's compile cache (the one torch-neuronx / libneuronxla keep, and
//! `neuron_parallel_compile` fills): its layout, read and written with the care of nxcc's own
//! cache. nxcc never computes the framework's hashes; it reads the entries the framework's
//! extraction phase left and completes them.
//!
//! ```text
//! <cache>/neuronxcc-<compiler version>/MODULE_<graph hash>+<flags hash>/
//!     model.hlo_module.pb      the graph (older releases: model.hlo.pb)
//!     compile_flags.json       the compile flags: a JSON list of strings
//!     model.neff               the NEFF, on success
//!     model.done               empty, on success
//!     model.log                on failure (and no model.neff)
//!     model.hlo_module.pb.lock a plain file while a compile runs
//! <cache>/lock                 the cache-wide lock (see [`lock::CacheLock`])
//! ```
//!
//! Entries of releases up to 2.14 (`compile_flags.txt`, done without `model.done`) are read as
//! those releases read them; optimum-neuron's own directories (`0_REGISTRY`, traced
//! `MODULE_<hash>` models) are classified as foreign and sized, never refused.
//!
//! - Trust: the cache directory and its version directories pass nxcc's one trust rule
//!   ([`crate::fsx::trust`]) before anything in them is read ([`NeuronCache::check`],
//!   [`NeuronCache::open`], `NeuronCache::open_version`): an entry's flags are instructions,
//!   so a cache another user can write (owned by them, or writable by others and not sticky)
//!   is refused whole, with the path and the fix.
//! - [`NeuronCache::scan`]: every entry of a cache, classified ([`Class`]): done, failed,
//!   locked, to do, or refused (a link, a FIFO, a file where a directory belongs, no graph,
//!   unreadable flags).
//!   Everything below the cache directory is reached through directory descriptors
//!   ([`crate::fsx::Dir`]), following no symbolic link.
//! - [`lock`]: the entry's lock file (the one lock protocol, [`crate::lockfile`]: the locks of
//!   dead nxcc runs, here or on another host, told from live ones) and the cache-wide lock.
//! - [`publish`]: results put in place so that a reader sees nothing or a whole NEFF.
//! - [`maintain`]: `nxcc cache stats|verify|clean --neuron-cache DIR|s3://BUCKET/PREFIX`, and
//!   [`cleaning`]: what `clean` is asked and reports.
//! - [`place`]: where the cache is kept, as the entry operations that differ between a
//!   [`directory`] and a [`bucket`] (the framework's S3 cache); [`classify`](mod@classify): an entry's state
//!   from its files, by one set of rules for both.

pub mod bucket;
pub mod classify;
pub mod cleaning;
pub mod directory;
pub mod lock;
pub mod maintain;
pub mod place;
pub mod publish;

pub use classify::{classify, Contents, FLAGS_LIMIT};

use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;

use crate::fsx::dir::is_not_plain;
use crate::fsx::trust::{self, Subject, Trusted, Untrusted};
use crate::fsx::Dir;
use crate::lockfile::Holder;

/// The framework's cache directory and its version directories, in the trust rule's messages.
pub const CACHE_DIR: Subject = Subject {
    noun: "the neuron cache directory",
    file: "the neuron cache's file",
    instead: "use a cache directory of your own (--neuron-cache DIR; the framework's NEURON_COMPILE_CACHE_URL)",
};

/// The framework's default cache directory.
pub const DEFAULT_DIR: &str = "/var/tmp/neuron-compile-cache";
/// The environment variable of the framework's compiler flags (its `--cache_dir=DIR`).
pub const CC_FLAGS_ENV: &str = "NEURON_CC_FLAGS";
/// The environment variable of the framework's cache location.
pub const CACHE_URL_ENV: &str = "NEURON_COMPILE_CACHE_URL";
/// The start of a version directory's name; the compiler's version follows.
pub const VERSION_PREFIX: &str = "neuronxcc-";
/// The start of an entry directory's name.
pub const ENTRY_PREFIX: &str = "MODULE_";
/// The graph's file names, the current one first.
pub const GRAPH_FILES: [&str; 2] = ["model.hlo_module.pb", "model.hlo.pb"];
/// The compile flags (a JSON list of strings).
pub const FLAGS_FILE: &str = "compile_flags.json";
/// The NEFF.
pub const NEFF_FILE: &str = "model.neff";
/// The success marker.
pub const DONE_FILE: &str = "model.done";
/// The failure log.
pub const LOG_FILE: &str = "model.log";
/// What a lock file's name adds to the graph's.
pub const LOCK_SUFFIX: &str = ".lock";
/// The start of the names of the staging directories earlier releases of nxcc made in an entry
/// (removed once their maker is gone, `publish::remove_leftovers`).
pub const STAGING_PREFIX: &str = ".nxcc-tmp-";

/// The framework's cache directory as the framework finds it: `--cache_dir` in
/// `$NEURON_CC_FLAGS`, else `$NEURON_COMPILE_CACHE_URL`, else [`DEFAULT_DIR`].
pub fn default_dir() -> String {
    let from_flags = std::env::var(CC_FLAGS_ENV)
        .ok()
        .and_then(|f| cache_dir_of_flags(&f));
    from_flags
        .or_else(|| std::env::var(CACHE_URL_ENV).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| DEFAULT_DIR.to_string())
}

/// Whether `path` is the directory `root` or lies below it, each taken with the links of its
/// existing part resolved (the rest as written): nxcc's own files — its cache, the simulated
/// toolchain it lays out — never go inside the framework's cache, where the framework's tools
/// upload, clean and unlock whatever they find.
pub fn within(root: &Path, path: &Path) -> bool {
    fn resolved(p: &Path) -> PathBuf {
        let mut existing = p;
        let mut rest = Vec::new();
        loop {
            if let Ok(real) = std::fs::canonicalize(existing) {
                return rest.iter().rev().fold(real, |acc, part| acc.join(part));
            }
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    existing = parent;
                }
                _ => return p.to_path_buf(),
            }
        }
    }
    resolved(path).starts_with(resolved(root))
}

/// Where a framework cache is kept: a directory, or a bucket and prefix of an object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A directory (as given: the caller makes it absolute).
    Dir(PathBuf),
    /// `s3://BUCKET/PREFIX` ([`bucket`]).
    Bucket(String),
}

/// Where the cache named `text` is: `s3://BUCKET/PREFIX` (the framework's S3 cache, when the
/// program has an object-store client), else a directory; any other `scheme://` is refused.
pub fn location(text: &str) -> Result<Location, String> {
    if crate::objstore::is_url(text) {
        if !crate::objstore::available() {
            return Err(format!(
                "S3 caches are not supported by this program ({text})"
            ));
        }
        return Ok(Location::Bucket(text.trim_end_matches('/').to_string()));
    }
    match text.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            Err(format!(
                "remote caches are not supported ({text}): give a local directory or s3://BUCKET/PREFIX"
            ))
        }
        _ => Ok(Location::Dir(PathBuf::from(text))),
    }
}

/// The last `--cache_dir=DIR` or `--cache_dir DIR` of a flags string (split on white space).
pub(crate) fn cache_dir_of_flags(flags: &str) -> Option<String> {
    let words: Vec<&str> = flags.split_whitespace().collect();
    let mut found = None;
    for (i, w) in words.iter().enumerate() {
        if let Some(d) = w.strip_prefix("--cache_dir=") {
            found = Some(d.to_string());
        } else if *w == "--cache_dir" {
            if let Some(d) = words.get(i + 1) {
                found = Some(d.to_string());
            }
        }
    }
    found.filter(|d| !d.is_empty())
}

/// The version directory's name for a compiler version: `neuronxcc-<version>`.
pub fn version_dir_name(version: &str) -> String {
    format!("{VERSION_PREFIX}{version}")
}

/// Whether `v` can name a version directory (not empty, one path component, printable).
pub fn check_version(v: &str) -> Result<(), String> {
    if v.is_empty()
        || v == "."
        || v == ".."
        || v.contains('/')
        || v.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(format!("{v:?} cannot name a version directory"));
    }
    Ok(())
}

/// The first word of a compiler's `--version` output that reads as a version: digits and dots
/// with at least one dot, then anything but white space (`2.24.5133.0+58f8de22`).
pub fn version_in(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .map(|w| w.trim_start_matches('v'))
        .find(|w| {
            let lead: String = w
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            lead.contains('.')
                && lead.starts_with(|c: char| c.is_ascii_digit())
                && lead.split('.').filter(|p| !p.is_empty()).count() >= 2
        })
        .map(str::to_string)
}

/// Who holds an entry's lock file ([`crate::lockfile::Holder`]).
pub type LockOwner = Holder;

/// How an entry stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// `model.neff` and `model.done`.
    Done,
    /// A lock file (and not done).
    Locked(LockOwner),
    /// `model.log` and no `model.neff`.
    Failed,
    /// A graph and flags, nothing else that settles it (a `model.neff` without `model.done` is
    /// an unfinished write: compiled again).
    ToDo,
    /// Not usable as it is (the reason): a link, something that is not a plain file or
    /// directory, no graph, unreadable flags, flags that are not compile semantics only.
    Refused(String),
    /// A directory of another tool's, not an entry (what it is): optimum-neuron's registry
    /// (`0_REGISTRY`) and the models it traced (`MODULE_<hash>` without flags or graph).
    Foreign(String),
}

impl Class {
    /// `done`, `locked`, `failed`, `to_do` or `refused`.
    pub fn name(&self) -> &'static str {
        match self {
            Class::Done => "done",
            Class::Locked(_) => "locked",
            Class::Failed => "failed",
            Class::ToDo => "to_do",
            Class::Refused(_) => "refused",
            Class::Foreign(_) => "foreign",
        }
    }
}

/// One entry of a version directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The compiler version (the version directory's name without [`VERSION_PREFIX`]).
    pub version: String,
    /// The entry directory's name (`MODULE_...`).
    pub name: String,
    /// The entry directory's path.
    pub path: PathBuf,
    /// The graph's file name ([`GRAPH_FILES`]), when there is one.
    pub graph: Option<&'static str>,
    /// The compile flags, when they read.
    pub flags: Option<Vec<String>>,
    /// How it stands.
    pub class: Class,
    /// The apparent size of its files (all of them, below it), links not followed.
    pub bytes: u64,
    /// Written by a release up to 2.14: flags in `compile_flags.txt`, a NEFF without
    /// `model.done` is a finished compile ([`crate::recon::framework`]).
    pub legacy: bool,
}

impl Entry {
    /// The entry `name` of `version` at `path`, not classified yet (to do, nothing known).
    pub fn new(version: &str, name: &str, path: PathBuf) -> Entry {
        Entry {
            version: version.to_string(),
            name: name.to_string(),
            path,
            graph: None,
            flags: None,
            class: Class::ToDo,
            bytes: 0,
            legacy: false,
        }
    }
}

/// A version directory's entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The compiler version.
    pub version: String,
    /// `neuronxcc-<version>` in the cache directory.
    pub path: PathBuf,
    /// Its entries, sorted by name.
    pub entries: Vec<Entry>,
}

/// Everything a scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// The version directories (only the one asked for, when one was), sorted by name.
    pub versions: Vec<Version>,
    /// Names of the cache directory that look like version directories but are not plain
    /// directories (a link, a file), with the reason.
    pub refused_versions: Vec<(String, String)>,
}

/// The framework's compile cache in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeuronCache {
    dir: PathBuf,
}

impl NeuronCache {
    /// The cache in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> NeuronCache {
        NeuronCache { dir: dir.into() }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache directory (a path the user gave), checked by nxcc's trust rule
    /// ([`crate::fsx::trust`]: the user's or root's, not writable by others unless sticky, no
    /// link another user placed on the way); `None` if absent.
    pub fn open(&self) -> io::Result<Option<Dir>> {
        match Trusted::open(&self.dir, CACHE_DIR, true) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            r => r.map(|t| Some(t.into_dir())),
        }
    }

    /// The version directory `name` of the cache directory `top` (a link, or anything but a
    /// directory, is refused as not plain), checked by the trust rule: the user's or root's, and
    /// writable by nobody else.
    pub(crate) fn open_version(&self, top: &Dir, name: &str) -> io::Result<Dir> {
        let dir = top.open_dir(name)?;
        trust::check_dir(&dir.own_stat()?, &CACHE_DIR, &self.dir.join(name), false)?;
        Ok(dir)
    }

    /// Whether the cache may be used: the cache directory and its version directories (only
    /// `only`'s, when given) pass the trust rule. An absent directory passes; other errors are
    /// left to the operations.
    pub fn check(&self, only: Option<&str>) -> Result<(), Untrusted> {
        let refused = |e: io::Error| trust::untrusted(&e).cloned();
        let top = match self.open() {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(()),
            Err(e) => return refused(e).map_or(Ok(()), Err),
        };
        let names: Vec<String> = match only {
            Some(v) => vec![version_dir_name(v)],
            None => top
                .entries()
                .map(|es| {
                    es.filter_map(|(n, _)| n.into_string().ok())
                        .filter(|n| n.starts_with(VERSION_PREFIX))
                        .collect()
                })
                .unwrap_or_default(),
        };
        for name in names {
            if let Err(e) = self.open_version(&top, &name) {
                if let Some(u) = refused(e) {
                    return Err(u);
                }
            }
        }
        Ok(())
    }

    /// Every version directory (or only `only`'s) and its entries, classified. An absent cache
    /// or version directory has none.
    pub fn scan(&self, only: Option<&str>) -> io::Result<Scan> {
        let mut scan = Scan::default();
        let Some(top) = self.open()? else {
            return Ok(scan);
        };
        let mut names: Vec<String> = match only {
            Some(v) => vec![version_dir_name(v)],
            None => top
                .entries()?
                .filter_map(|(n, _)| n.into_string().ok())
                .filter(|n| n.starts_with(VERSION_PREFIX) && n.len() > VERSION_PREFIX.len())
                .collect(),
        };
        names.sort();
        for name in names {
            let dir = match self.open_version(&top, &name) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if is_not_plain(&e) => {
                    scan.refused_versions.push((name, e.to_string()));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let version = name[VERSION_PREFIX.len()..].to_string();
            let path = self.dir.join(&name);
            let entries = scan_version(&dir, &version, &path)?;
            scan.versions.push(Version {
                version,
                path,
                entries,
            });
        }
        Ok(scan)
    }
}

/// The entries (`MODULE_*`) of one version directory, classified, sorted by name.
pub(crate) fn scan_version(dir: &Dir, version: &str, path: &Path) -> io::Result<Vec<Entry>> {
    let mut names: Vec<String> = dir
        .entries()?
        .filter_map(|(n, _)| n.into_string().ok())
        .filter(|n| n.starts_with(ENTRY_PREFIX) || n == REGISTRY_DIR)
        .collect();
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let mut e = Entry::new(version, &name, path.join(&name));
        match dir.open_dir(&name) {
            Ok(d) if name == REGISTRY_DIR => {
                e.bytes = tree_bytes(&d, 0);
                e.class = Class::Foreign("optimum-neuron's registry of cached models".into());
            }
            Ok(d) => classify(
                &InDir {
                    dir: &d,
                    skip: None,
                },
                &mut e,
            ),
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => e.class = Class::Refused(err.to_string()),
        }
        out.push(e);
    }
    Ok(out)
}

/// optimum-neuron's registry directory in a version directory.
pub const REGISTRY_DIR: &str = "0_REGISTRY";
/// A legacy entry's flags (releases up to 2.14).
pub const LEGACY_FLAGS_FILE: &str = "compile_flags.txt";

/// The apparent size of the plain files below `dir`, no link followed (at most 16 levels).
pub(crate) fn tree_bytes(dir: &Dir, depth: usize) -> u64 {
    let Ok(items) = dir.entries() else { return 0 };
    let mut total = 0u64;
    for (name, _) in items {
        let Some(name) = name.to_str() else { continue };
        let Ok(st) = dir.stat(name) else { continue };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => total += st.st_size as u64,
            FileType::Directory if depth < 16 => {
                if let Ok(sub) = dir.open_dir(name) {
                    total += tree_bytes(&sub, depth + 1);
                }
            }
            _ => {}
        }
    }
    total
}

/// What an entry's name holds: absent, a plain file, or something refused (the reason).
enum Item {
    Absent,
    File,
    Refused(String),
}

fn item(dir: &Dir, name: &str) -> Item {
    match dir.stat(name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Item::Absent,
        Err(e) => Item::Refused(format!("{name}: {e}")),
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Item::File,
            FileType::Symlink => Item::Refused(format!("{name} is a symbolic link")),
            FileType::Directory => Item::Refused(format!("{name} is a directory")),
            _ => Item::Refused(format!("{name} is not a plain file")),
        },
    }
}

/// An entry in a directory, as its classification reads it ([`Contents`]): nothing followed
/// through a link; `skip` (its holder's own lock) left out.
pub struct InDir<'a> {
    /// The entry directory.
    pub dir: &'a Dir,
    /// A lock file not to count (its holder's own).
    pub skip: Option<&'a str>,
}

impl Contents for InDir<'_> {
    fn present(&self) -> Result<std::collections::BTreeSet<String>, String> {
        let mut present = std::collections::BTreeSet::new();
        for n in classify::looked_at() {
            if self.skip == Some(n.as_str()) {
                continue;
            }
            match item(self.dir, &n) {
                Item::Absent => {}
                Item::File => {
                    present.insert(n);
                }
                Item::Refused(why) => return Err(why),
            }
        }
        Ok(present)
    }

    fn judge(&self, name: &str) -> Result<Option<LockOwner>, String> {
        crate::lockfile::judge(self.dir, name).map_err(|e| e.to_string())
    }

    fn read(&self, name: &str, limit: u64) -> io::Result<Vec<u8>> {
        crate::fsx::regular::read_limited(&self.dir.open_file(name)?, limit)
    }

    fn bytes(&self) -> u64 {
        tree_bytes(self.dir, 0)
    }
}

/// Read the flags of the entry open at `dir` ([`classify::read_flags`]).
pub fn read_flags(dir: &Dir) -> Result<Vec<String>, String> {
    let c = InDir { dir, skip: None };
    classify::read_flags(&|n| c.read(n, FLAGS_LIMIT))
}

/// An entry's flags as the compiler gets them ([`compile_flags`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFlags {
    /// The flags the compiler gets.
    pub flags: Vec<String>,
    /// The wrapper's own flags, dropped as the wrapper drops them.
    pub dropped: Vec<String>,
}

/// The flags of an entry as the compiler gets them: the framework wrapper's own dropped
/// (`crate::recon::framework::drop_wrapper_flags`), and the rest compile semantics only
/// ([`crate::cli::semantics`]: an entry's flags are data whoever can write the cache wrote).
/// `Err`: why the entry is refused. Flags that do not parse pass: the compile says what is
/// wrong with them.
pub fn compile_flags(raw: &[String]) -> Result<EntryFlags, String> {
    let (flags, dropped) = crate::recon::framework::drop_wrapper_flags(raw);
    let mut args = vec!["model.hlo_module.pb".to_string()];
    args.extend(flags.iter().cloned());
    if let Ok(parsed) = crate::cli::compile_parser("neuronx-cc").parse(&args) {
        crate::cli::semantics::check(&parsed, |_| false)
            .map_err(|e| format!("its flags are not compile semantics only: {e}"))?;
    }
    Ok(EntryFlags { flags, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_found_in_version_output() {
        assert_eq!(
            version_in("NeuronX Compiler version 2.24.5133.0+58f8de22\n\nPython version 3.10")
                .as_deref(),
            Some("2.24.5133.0+58f8de22")
        );
        assert_eq!(
            version_in("fake-compiler 2.24.0.0 (arguments: --version)").as_deref(),
            Some("2.24.0.0")
        );
        assert_eq!(version_in("no version here 3"), None);
        assert!(check_version("2.24.5133.0+58f8de22").is_ok());
        for bad in ["", "..", "a/b", "a b"] {
            assert!(check_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_cache_dir_comes_from_the_flags() {
        assert_eq!(
            cache_dir_of_flags("--model-type=transformer --cache_dir=/c1 -O1").as_deref(),
            Some("/c1")
        );
        assert_eq!(
            cache_dir_of_flags("--cache_dir /c2 --cache_dir=/c3").as_deref(),
            Some("/c3")
        );
        assert_eq!(cache_dir_of_flags("--retry_failed_compilation"), None);
    }

    #[test]
    fn entries_are_classified_and_links_refused() {
        let t = tempfile::tempdir().unwrap();
        let v = t.path().join("neuronxcc-2.24.1");
        let mk = |name: &str, files: &[&str]| {
            let d = v.join(name);
            std::fs::create_dir_all(&d).unwrap();
            for f in files {
                let body: &[u8] = if *f == FLAGS_FILE { b"[\"-O1\"]" } else { b"x" };
                std::fs::write(d.join(f), body).unwrap();
            }
        };
        mk("MODULE_a+1", &["model.hlo_module.pb", FLAGS_FILE]);
        mk(
            "MODULE_b+1",
            &["model.hlo_module.pb", FLAGS_FILE, NEFF_FILE, DONE_FILE],
        );
        mk("MODULE_c+1", &["model.hlo_module.pb", FLAGS_FILE, LOG_FILE]);
        mk(
            "MODULE_d+1",
            &["model.hlo.pb", FLAGS_FILE, "model.hlo.pb.lock"],
        );
        mk("MODULE_e+1", &["model.hlo_module.pb", FLAGS_FILE]);
        std::os::unix::fs::symlink("/etc/passwd", v.join("MODULE_e+1").join(NEFF_FILE)).unwrap();
        std::os::unix::fs::symlink(v.join("MODULE_a+1"), v.join("MODULE_f+1")).unwrap();
        mk("MODULE_g+1", &[FLAGS_FILE]);
        mk("MODULE_h+1", &["model.hlo_module.pb", NEFF_FILE]);
        std::fs::write(v.join("MODULE_h+1").join(FLAGS_FILE), b"{}").unwrap();
        std::fs::create_dir_all(t.path().join("nxcc-v1")).unwrap();
        let scan = NeuronCache::new(t.path()).scan(None).unwrap();
        assert_eq!(scan.versions.len(), 1);
        let classes: Vec<(&str, &str)> = scan.versions[0]
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.class.name()))
            .collect();
        assert_eq!(
            classes,
            [
                ("MODULE_a+1", "to_do"),
                ("MODULE_b+1", "done"),
                ("MODULE_c+1", "failed"),
                ("MODULE_d+1", "locked"),
                ("MODULE_e+1", "refused"),
                ("MODULE_f+1", "refused"),
                ("MODULE_g+1", "refused"),
                ("MODULE_h+1", "refused"),
            ]
        );
        let e = &scan.versions[0].entries;
        assert_eq!(e[0].flags.as_deref(), Some(&["-O1".to_string()][..]));
        assert_eq!(e[3].graph, Some("model.hlo.pb"));
        assert!(matches!(
            &e[3].class,
            Class::Locked(LockOwner::Foreign { .. })
        ));
        assert!(matches!(&e[4].class, Class::Refused(w) if w.contains("symbolic link")));
        assert!(matches!(&e[5].class, Class::Refused(w) if w.contains("symbolic link")));
    }
}
