//! How an entry stands ([`Class`]), from what it holds — the one set of rules for an entry in a
//! directory and an entry in a bucket, each of which says what it holds through [`Contents`].
//!
//! Precedence: refused (something that is not a plain file where a file belongs), done
//! (`model.neff` and `model.done`; a legacy entry's NEFF alone), locked (any `*.lock`, a live one
//! before a stale one), failed (`model.log` and no NEFF), foreign (another tool's directory),
//! refused (no graph, flags that do not read), to do.

use std::collections::BTreeSet;
use std::io;

use super::NEFF_FILE;
use super::{Class, Entry, LockOwner};
use super::{DONE_FILE, FLAGS_FILE, GRAPH_FILES, LEGACY_FLAGS_FILE, LOCK_SUFFIX, LOG_FILE};

/// The largest `compile_flags.json` (or `compile_flags.txt`) read.
pub const FLAGS_LIMIT: u64 = 1 << 20;

/// What an entry holds, as its classification reads it.
pub trait Contents {
    /// The names of its files that the classification looks at (`looked_at`, and every
    /// `*.lock`) which are there; `Err`: why the entry is refused (one is not a plain file).
    fn present(&self) -> Result<BTreeSet<String>, String>;
    /// How its lock `name` (one of those present) stands; `None` if it is gone.
    fn judge(&self, name: &str) -> Result<Option<LockOwner>, String>;
    /// Its file `name` whole, refused past `limit` bytes (`NotFound` if absent).
    fn read(&self, name: &str, limit: u64) -> io::Result<Vec<u8>>;
    /// The apparent size of everything in it.
    fn bytes(&self) -> u64;
}

/// The file names the classification looks at (with the graphs' locks).
pub(crate) fn looked_at() -> Vec<String> {
    let mut names: Vec<String> = vec![
        FLAGS_FILE.into(),
        LEGACY_FLAGS_FILE.into(),
        NEFF_FILE.into(),
        DONE_FILE.into(),
        LOG_FILE.into(),
    ];
    for g in GRAPH_FILES {
        names.push(g.to_string());
        names.push(format!("{g}{LOCK_SUFFIX}"));
    }
    names
}

/// Read the flags of an entry through `read` (a file's bytes, bounded by the caller):
/// `compile_flags.json`, a JSON list of strings (a legacy entry: `compile_flags.txt`, its words).
pub fn read_flags(read: &dyn Fn(&str) -> io::Result<Vec<u8>>) -> Result<Vec<String>, String> {
    match read(FLAGS_FILE) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let text = read(LEGACY_FLAGS_FILE)
                .map_err(|e| format!("{FLAGS_FILE} (or {LEGACY_FLAGS_FILE}): {e}"))?;
            Ok(crate::recon::framework::legacy_flags(
                &String::from_utf8_lossy(&text),
            ))
        }
        Err(e) => Err(format!("{FLAGS_FILE}: {e}")),
        Ok(bytes) => serde_json::from_slice::<Vec<String>>(&bytes)
            .map_err(|e| format!("{FLAGS_FILE} is not a JSON list of strings ({e})")),
    }
}

/// The entry's lock that counts: the first live one, else the first stale one — of those
/// `ignored` does not leave out; `None` if it has none.
fn the_lock(
    c: &dyn Contents,
    present: &BTreeSet<String>,
    ignored: &dyn Fn(&LockOwner) -> bool,
) -> Result<Option<LockOwner>, String> {
    let mut stale = None;
    for name in present.iter().filter(|n| n.ends_with(LOCK_SUFFIX)) {
        match c.judge(name).map_err(|e| format!("{name}: {e}"))? {
            Some(o) if ignored(&o) => {}
            Some(o) if !o.is_stale() => return Ok(Some(o)),
            Some(o) => stale = stale.or(Some(o)),
            None => {}
        }
    }
    Ok(stale)
}

/// Classify the entry `c` into `e` (see the module documentation).
pub fn classify(c: &dyn Contents, e: &mut Entry) {
    classify_with(c, e, &|_| false)
}

/// [`classify`], the locks `ignored` says not counted.
fn classify_with(c: &dyn Contents, e: &mut Entry, ignored: &dyn Fn(&LockOwner) -> bool) {
    e.bytes = c.bytes();
    let present = match c.present() {
        Ok(p) => p,
        Err(why) => {
            e.class = Class::Refused(why);
            return;
        }
    };
    let has = |n: &str| present.contains(n);
    e.legacy = has(LEGACY_FLAGS_FILE) && !has(FLAGS_FILE);
    e.graph = GRAPH_FILES.into_iter().find(|g| has(g));
    if has(NEFF_FILE) && (has(DONE_FILE) || e.legacy) {
        e.class = Class::Done;
        return;
    }
    match the_lock(c, &present, ignored) {
        Ok(Some(owner)) => {
            e.class = Class::Locked(owner);
            return;
        }
        Ok(None) => {}
        Err(why) => {
            e.class = Class::Refused(why);
            return;
        }
    }
    if has(LOG_FILE) && !has(NEFF_FILE) {
        e.class = Class::Failed;
        return;
    }
    if e.graph.is_none() {
        e.class = if !e.name.contains('+') && !has(FLAGS_FILE) && !has(LEGACY_FLAGS_FILE) {
            Class::Foreign("a model optimum-neuron traced and cached (no graph, no flags)".into())
        } else {
            Class::Refused("no graph (model.hlo_module.pb or model.hlo.pb)".into())
        };
        return;
    }
    // Flags that are not compile semantics only refuse the entry here, as `parallel-compile`
    // refuses it: no count calls it to do.
    let flags = read_flags(&|n| c.read(n, FLAGS_LIMIT));
    match flags.and_then(|f| super::compile_flags(&f).map(|_| f)) {
        Ok(f) => {
            e.flags = Some(f);
            e.class = Class::ToDo;
        }
        Err(why) => e.class = Class::Refused(why),
    }
}

/// How the entry `name` stands for the holder of its lock (whose `c` leaves that lock out):
/// done, refused, locked by another live holder (a foreign lock does not count when
/// `break_foreign`; a stale one never does: a failure shows through it), failed (with no NEFF),
/// or to do.
pub fn look(c: &dyn Contents, name: &str, break_foreign: bool) -> Class {
    let mut e = Entry::new("", name, std::path::PathBuf::new());
    let ignored = |o: &LockOwner| o.is_stale() || (break_foreign && o.is_foreign());
    classify_with(c, &mut e, &ignored);
    e.class
}
