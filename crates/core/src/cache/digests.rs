//! Remembered digests: a table from a file's stat identity — device, inode, size, modification
//! and change times in nanoseconds ([`StatId`]) — to what was computed from its bytes (its
//! blake3, its digest without op metadata, an external compiler's version line: [`Kind`]), so
//! that the same unchanged file is hashed once, not on every compile (git's index and ccache's
//! direct mode do the same).
//!
//! A remembered value is used only when the file's identity now is the identity it was
//! computed from: a changed byte (a new size or modification time), a replaced file (a new
//! inode), a touched file (a new change time) are computed again. Git's *racy* rule keeps a
//! change made within the file system's timestamp granularity of the computation from going
//! unseen: a value is remembered only when the file's modification and change times are at
//! least [`RACY_MARGIN_NS`] older than the moment its computation began; a file changed more
//! recently than that is hashed every time until it has aged. The margin covers file systems
//! that keep whole seconds (two, for FAT) and the kernel's coarse clock. Where timestamps cannot
//! be trusted at all (a network file system whose server clock runs behind, a tool that restores
//! times), `--cache-rehash` (or `stat_digests = false` in the cache's configuration) turns the
//! table off: everything is hashed every time.
//!
//! Two tiers: this process's memory (a daemon or `parallel-compile` asks once per file), and the
//! cache directory, `nxcc-v1/digests/<host>-<boot>/<name>`: one small file per file and kind,
//! named by a digest of (kind, device, inode), holding the whole identity and the value, written
//! atomically. Device and inode numbers mean something only on one host until it reboots, so
//! each host and boot has its own directory (`super::host::key`); a host's directories of
//! earlier boots are removed when it makes a new one. A record that does not read back as the
//! identity asked for is not used. A read-only cache's table is read, never written.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use rustix::fs::Stat;

use crate::fsx::{AtomicFile, Dir, Durability};

/// How much older than the start of its computation a file's times must be for its value to be
/// remembered.
pub const RACY_MARGIN_NS: i128 = 2_000_000_000;
/// The subdirectory of `nxcc-v1` the table lives in.
pub const DIGESTS_DIR: &str = "digests";
/// Values this process keeps in memory at most (the table is cleared when full).
const MEMORY_LIMIT: usize = 4096;
/// A record's first word.
const RECORD_MARK: &str = "nxcc-digest-v1";

/// A file's stat identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatId {
    /// The device.
    pub dev: u64,
    /// The inode.
    pub ino: u64,
    /// The size, bytes.
    pub size: u64,
    /// The modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// The status change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
}

impl StatId {
    /// The identity in a `stat` result.
    pub fn of(st: &Stat) -> StatId {
        let ns = |s: i64, n: u64| i128::from(s) * 1_000_000_000 + n as i128;
        StatId {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// The identity of an open file.
    pub fn of_file(f: &File) -> std::io::Result<StatId> {
        Ok(StatId::of(&rustix::fs::fstat(f)?))
    }

    /// Whether a value computed from this file, starting at `start_ns`, may be remembered: its
    /// times are at least [`RACY_MARGIN_NS`] older than that.
    pub fn settled_before(&self, start_ns: i128) -> bool {
        self.mtime_ns.max(self.ctime_ns) + RACY_MARGIN_NS <= start_ns
    }
}

/// What is remembered of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The blake3 of its bytes.
    Blake3,
    /// The digest of an HLO module without its op metadata (`crate::hlo::digest`).
    HloMetadata,
    /// The version line of the external compiler it is.
    Version,
}

impl Kind {
    /// The kind's name in records.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Blake3 => "blake3",
            Kind::HloMetadata => "hlo_metadata",
            Kind::Version => "version",
        }
    }
}

/// A value and whether it was remembered (not computed now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Got {
    /// The value (a digest in hex, or a version line).
    pub value: String,
    /// The file's size when it was computed.
    pub size: u64,
    /// Served from the table.
    pub remembered: bool,
}

/// Where values are remembered, and whether they are trusted at all.
#[derive(Debug, Default)]
pub struct Table {
    trust: bool,
    disk: Option<Disk>,
}

#[derive(Debug)]
struct Disk {
    root: Dir,
    writable: bool,
    dir: OnceLock<Option<Dir>>,
}

type Memory = Mutex<HashMap<(Kind, StatId), String>>;

fn memory() -> &'static Memory {
    static MEMORY: OnceLock<Memory> = OnceLock::new();
    MEMORY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

impl Table {
    /// No table: every value is computed every time.
    pub fn off() -> Table {
        Table::default()
    }

    /// This process's memory only.
    pub fn memory_only() -> Table {
        Table {
            trust: true,
            disk: None,
        }
    }

    /// This process's memory and the table of the cache whose `nxcc-v1` is `root` (written only
    /// when `writable`).
    pub(crate) fn in_cache(root: Dir, writable: bool) -> Table {
        Table {
            trust: true,
            disk: Some(Disk {
                root,
                writable,
                dir: OnceLock::new(),
            }),
        }
    }

    /// Whether remembered values are used at all.
    pub fn trusted(&self) -> bool {
        self.trust
    }

    /// The value of `kind` for the file at `path` (links followed): remembered for its stat
    /// identity, else computed by `compute` from the open file and remembered when the file
    /// has settled. A file whose identity changed while it was read is an error.
    pub fn get(
        &self,
        path: &Path,
        kind: Kind,
        compute: &mut dyn FnMut(&File) -> std::io::Result<String>,
    ) -> std::io::Result<Got> {
        let start = now_ns();
        // A regular file only, opened without waiting on a FIFO or a device.
        let f = crate::fsx::regular::open(path)?;
        let before = StatId::of_file(&f)?;
        if self.trust {
            if let Some(value) = self.recall(kind, &before) {
                return Ok(Got {
                    value,
                    size: before.size,
                    remembered: true,
                });
            }
        }
        let value = compute(&f)?;
        let after = StatId::of_file(&f)?;
        if after != before {
            return Err(std::io::Error::other(format!(
                "{} changed while it was being read",
                path.display()
            )));
        }
        if self.trust && before.settled_before(start) {
            self.remember(kind, &before, &value);
        }
        Ok(Got {
            value,
            size: before.size,
            remembered: false,
        })
    }

    /// The value of `kind` remembered for a file of identity `id` (one already open), if the
    /// table is trusted and has one.
    pub(crate) fn recall_of(&self, kind: Kind, id: &StatId) -> Option<String> {
        self.trust.then(|| self.recall(kind, id)).flatten()
    }

    /// Remember `value` of `kind` for a file of identity `id` whose computation began at
    /// `start_ns` ([`now_ns`]), when the table is trusted and the file had settled by then.
    pub(crate) fn remember_of(&self, kind: Kind, id: &StatId, value: &str, start_ns: i128) {
        if self.trust && id.settled_before(start_ns) {
            self.remember(kind, id, value);
        }
    }

    fn recall(&self, kind: Kind, id: &StatId) -> Option<String> {
        if let Some(v) = memory().lock().ok()?.get(&(kind, *id)) {
            return Some(v.clone());
        }
        let disk = self.disk.as_ref()?;
        let dir = disk.dir(false)?;
        let text = dir.read(&record_name(kind, id)).ok()?;
        let value = parse_record(&String::from_utf8(text).ok()?, kind, id)?;
        self.remember_in_memory(kind, id, &value);
        Some(value)
    }

    fn remember(&self, kind: Kind, id: &StatId, value: &str) {
        self.remember_in_memory(kind, id, value);
        let Some(disk) = self.disk.as_ref().filter(|d| d.writable) else {
            return;
        };
        if let Some(dir) = disk.dir(true) {
            // Best effort: a table that cannot be written costs a hash next time.
            let _ = write_record(dir, kind, id, value);
        }
    }

    fn remember_in_memory(&self, kind: Kind, id: &StatId, value: &str) {
        if let Ok(mut m) = memory().lock() {
            if m.len() >= MEMORY_LIMIT {
                m.clear();
            }
            m.insert((kind, *id), value.to_string());
        }
    }
}

impl Disk {
    /// `digests/<host>-<boot>`, opened once (made when `create` and writable; a host's
    /// directories of earlier boots are removed then).
    fn dir(&self, create: bool) -> Option<&Dir> {
        if let Some(d) = self.dir.get() {
            return d.as_ref();
        }
        let name = super::host::key();
        let opened = match self
            .root
            .open_dir(DIGESTS_DIR)
            .and_then(|d| d.open_dir(name))
        {
            Ok(d) => Some(d),
            Err(_) if create && self.writable => self.make(name),
            Err(_) => return None,
        };
        self.dir.get_or_init(|| opened).as_ref()
    }

    fn make(&self, name: &str) -> Option<Dir> {
        let digests = self.root.open_or_create_dir(DIGESTS_DIR).ok()?;
        let mine = digests.open_or_create_dir(name).ok()?;
        let host = format!("{}-", super::host::name_key());
        if let Ok(entries) = digests.entries() {
            for (other, _) in entries {
                let Ok(other) = other.into_string() else {
                    continue;
                };
                if other.starts_with(&host) && other != name {
                    let _ = digests.remove_all(&other);
                }
            }
        }
        Some(mine)
    }
}

/// The record's file name: 32 hex digits of blake3(kind, device, inode).
fn record_name(kind: Kind, id: &StatId) -> String {
    let mut h = blake3::Hasher::new();
    h.update(format!("{}\0{}\0{}", kind.name(), id.dev, id.ino).as_bytes());
    h.finalize().to_hex()[..32].to_string()
}

fn record_text(kind: Kind, id: &StatId, value: &str) -> String {
    let value: String = value.chars().filter(|c| !c.is_control()).collect();
    format!(
        "{RECORD_MARK} {} {} {} {} {} {} {value}\n",
        kind.name(),
        id.dev,
        id.ino,
        id.size,
        id.mtime_ns,
        id.ctime_ns
    )
}

/// The value of a record, if it is one of `kind` for exactly `id`.
fn parse_record(text: &str, kind: Kind, id: &StatId) -> Option<String> {
    let line = text.strip_suffix('\n')?;
    let mut parts = line.splitn(8, ' ');
    let mut next = || parts.next();
    if next()? != RECORD_MARK || next()? != kind.name() {
        return None;
    }
    let dev: u64 = next()?.parse().ok()?;
    let ino: u64 = next()?.parse().ok()?;
    let size: u64 = next()?.parse().ok()?;
    let mtime_ns: i128 = next()?.parse().ok()?;
    let ctime_ns: i128 = next()?.parse().ok()?;
    let value = next()?;
    let read = StatId {
        dev,
        ino,
        size,
        mtime_ns,
        ctime_ns,
    };
    (read == *id && !value.is_empty()).then(|| value.to_string())
}

fn write_record(dir: &Dir, kind: Kind, id: &StatId, value: &str) -> std::io::Result<()> {
    let mut f = AtomicFile::create_in(dir, &record_name(kind, id))?;
    f.write_all(record_text(kind, id, value).as_bytes())?;
    f.commit(Durability::Visible)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A table in a fresh cache root, and a file old enough to be remembered.
    fn setup() -> (tempfile::TempDir, Table, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("nxcc-v1");
        std::fs::create_dir(&root).unwrap();
        let table = Table::in_cache(Dir::open(&root).unwrap(), true);
        let file = dir.path().join("model.pb");
        std::fs::write(&file, b"model bytes").unwrap();
        (dir, table, file)
    }

    fn hash_counting(calls: &Cell<u32>) -> impl FnMut(&File) -> std::io::Result<String> + '_ {
        move |f: &File| {
            calls.set(calls.get() + 1);
            let mut h = blake3::Hasher::new();
            h.update_reader(f)?;
            Ok(h.finalize().to_hex().to_string())
        }
    }

    /// Remember `file` as if its computation began `RACY_MARGIN_NS` after now (the way a file
    /// that has aged is remembered), without waiting.
    fn remember_aged(table: &Table, file: &Path) {
        let f = File::open(file).unwrap();
        let id = StatId::of_file(&f).unwrap();
        assert!(id.settled_before(now_ns() + RACY_MARGIN_NS + 1_000_000));
        let mut h = blake3::Hasher::new();
        h.update_reader(&f).unwrap();
        table.remember(Kind::Blake3, &id, &h.finalize().to_hex());
    }

    #[test]
    fn a_fresh_file_is_not_remembered_an_aged_one_is() {
        let (_d, table, file) = setup();
        let calls = Cell::new(0);
        let mut compute = hash_counting(&calls);
        // Just written: racy, computed every time.
        let a = table.get(&file, Kind::Blake3, &mut compute).unwrap();
        let b = table.get(&file, Kind::Blake3, &mut compute).unwrap();
        assert_eq!((a.remembered, b.remembered, calls.get()), (false, false, 2));
        assert_eq!(a.value, blake3::hash(b"model bytes").to_hex().as_str());
        remember_aged(&table, &file);
        let c = table.get(&file, Kind::Blake3, &mut compute).unwrap();
        assert!(c.remembered);
        assert_eq!((c.value, calls.get()), (a.value, 2));
    }

    #[test]
    fn a_changed_byte_a_replaced_file_and_a_touched_file_are_hashed_again() {
        let (_d, table, file) = setup();
        let calls = Cell::new(0);
        let mut compute = hash_counting(&calls);
        remember_aged(&table, &file);
        assert!(
            table
                .get(&file, Kind::Blake3, &mut compute)
                .unwrap()
                .remembered
        );
        // A changed byte, same size, the modification time put back: the change time moved.
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, b"model bytez").unwrap();
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let got = table.get(&file, Kind::Blake3, &mut compute).unwrap();
        assert!(!got.remembered);
        assert_eq!(got.value, blake3::hash(b"model bytez").to_hex().as_str());
        // A replaced file (same bytes, a new inode).
        remember_aged(&table, &file);
        let tmp = file.with_extension("new");
        std::fs::write(&tmp, b"model bytez").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        assert!(
            !table
                .get(&file, Kind::Blake3, &mut compute)
                .unwrap()
                .remembered
        );
        // A touched file.
        remember_aged(&table, &file);
        assert!(
            table
                .get(&file, Kind::Blake3, &mut compute)
                .unwrap()
                .remembered
        );
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(std::time::SystemTime::now())
            .unwrap();
        assert!(
            !table
                .get(&file, Kind::Blake3, &mut compute)
                .unwrap()
                .remembered
        );
    }

    #[test]
    fn the_disk_table_serves_another_process_and_an_off_table_nothing() {
        let (d, table, file) = setup();
        remember_aged(&table, &file);
        let id = StatId::of_file(&File::open(&file).unwrap()).unwrap();
        // Forget this process's memory: the record on disk answers.
        memory().lock().unwrap().clear();
        let calls = Cell::new(0);
        let mut compute = hash_counting(&calls);
        let got = table.get(&file, Kind::Blake3, &mut compute).unwrap();
        assert!(got.remembered && calls.get() == 0);
        // Another kind of the same file is not that record.
        let other = table.get(&file, Kind::HloMetadata, &mut compute).unwrap();
        assert!(!other.remembered);
        // A record naming another identity is not used.
        let dir = Dir::open(
            &d.path()
                .join("nxcc-v1/digests")
                .join(super::super::host::key()),
        )
        .unwrap();
        let lie = StatId { size: 999, ..id };
        let mut f = AtomicFile::create_in(&dir, &record_name(Kind::Blake3, &id)).unwrap();
        f.write_all(record_text(Kind::Blake3, &lie, "ff").as_bytes())
            .unwrap();
        f.commit(Durability::Visible).unwrap();
        memory().lock().unwrap().clear();
        assert!(
            !table
                .get(&file, Kind::Blake3, &mut compute)
                .unwrap()
                .remembered
        );
        // Off: never remembered, never recalled.
        remember_aged(&table, &file);
        let off = Table::off();
        assert!(
            !off.get(&file, Kind::Blake3, &mut compute)
                .unwrap()
                .remembered
        );
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_waiting() {
        let (d, table, _) = setup();
        let fifo = d.path().join("fifo.pb");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let calls = Cell::new(0);
        let mut compute = hash_counting(&calls);
        for p in [fifo.as_path(), Path::new("/dev/zero")] {
            let e = table.get(p, Kind::Blake3, &mut compute).unwrap_err();
            assert!(crate::fsx::regular::is_not_regular(&e), "{e}");
        }
        assert_eq!(calls.get(), 0);
    }

    #[test]
    fn records_read_back_exactly() {
        let id = StatId {
            dev: 2049,
            ino: 77,
            size: 10,
            mtime_ns: 1_700_000_000_123_456_789,
            ctime_ns: -5,
        };
        let t = record_text(Kind::Version, &id, "tool 1.2 (build\n7)");
        assert_eq!(
            parse_record(&t, Kind::Version, &id).as_deref(),
            Some("tool 1.2 (build7)")
        );
        assert_eq!(parse_record(&t, Kind::Blake3, &id), None);
        assert_eq!(parse_record(&t[..t.len() - 1], Kind::Version, &id), None);
        let other = StatId { ino: 78, ..id };
        assert_eq!(parse_record(&t, Kind::Version, &other), None);
    }
}
