//! The cache's settings: a configuration file inside the cache directory, read by every process
//! that uses the directory — so all its users share one limit — and the compile's own flags,
//! which override it ([`Settings::resolve`]).
//!
//! The file is `nxcc-v1/nxcc.conf`: `key = value` lines, `#` comments. `nxcc cache config`
//! prints it and `nxcc cache config KEY=VALUE...` changes it (checked first, written
//! atomically). The keys, each with its flag:
//!
//! | key | flag | value |
//! |---|---|---|
//! | `max_size` | `--cache-max-size` | the size the entries are kept under (`20G`, `512M`; `0`: no limit) |
//! | `sloppiness` | `--cache-sloppiness` | `hlo_metadata` (key the model without its op metadata) or `none` |
//! | `stat_digests` | `--cache-rehash` (= `false`) | `true`: trust remembered digests of unchanged files; `false`: hash every time |
//! | `mode` | `--cache-mode` | `read-write`, `read-only` (never write), `hit-only` (a miss is an error) |
//!
//! A line that does not read (an unknown key, a bad value) is left out with a warning naming the
//! file and line; the rest of the file still counts.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use serde::Serialize;

use super::digests::{now_ns, StatId};
use super::store::Cache;
use crate::fsx::{AtomicFile, Dir, Durability};
use crate::plan::Invocation;

/// The configuration file's name, in `nxcc-v1`.
pub const CONFIG_FILE: &str = "nxcc.conf";
/// The largest configuration file read.
const CONFIG_LIMIT: usize = 64 << 10;
/// The keys the file knows, in the order `nxcc cache config` prints them.
pub const KEYS: [&str; 4] = ["max_size", "sloppiness", "stat_digests", "mode"];

/// What may differ between a compile and the entry that serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Sloppiness {
    /// The model is keyed without its op metadata (`crate::hlo::digest`).
    pub hlo_metadata: bool,
}

impl Sloppiness {
    /// From its spelling: `hlo_metadata`, or `none` / empty for nothing.
    pub fn parse(text: &str) -> Result<Sloppiness, String> {
        let mut s = Sloppiness::default();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "hlo_metadata" => s.hlo_metadata = true,
                "none" => {}
                other => {
                    return Err(format!(
                        "unknown sloppiness {other:?} (known: hlo_metadata, none)"
                    ))
                }
            }
        }
        Ok(s)
    }

    /// Its spelling.
    pub fn spelling(&self) -> &'static str {
        if self.hlo_metadata {
            "hlo_metadata"
        } else {
            "none"
        }
    }
}

/// How a compile may use the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Serve hits, store what it compiles.
    #[default]
    ReadWrite,
    /// Serve hits, write nothing at all (no entry, lock, counter, table or use time): for a
    /// cache baked into an image or on a read-only mount. A miss compiles without storing.
    ReadOnly,
    /// Serve hits; a miss is an error, never a compile: for hosts that must not compile.
    HitOnly,
}

impl Mode {
    /// From its spelling.
    pub fn parse(text: &str) -> Result<Mode, String> {
        match text.trim() {
            "read-write" => Ok(Mode::ReadWrite),
            "read-only" => Ok(Mode::ReadOnly),
            "hit-only" => Ok(Mode::HitOnly),
            other => Err(format!(
                "unknown cache mode {other:?} (known: read-write, read-only, hit-only)"
            )),
        }
    }

    /// Its spelling.
    pub fn spelling(self) -> &'static str {
        match self {
            Mode::ReadWrite => "read-write",
            Mode::ReadOnly => "read-only",
            Mode::HitOnly => "hit-only",
        }
    }

    /// Whether the cache is written in this mode.
    pub fn writes(self) -> bool {
        self != Mode::ReadOnly
    }
}

/// What the configuration file says (each key absent when it does not say it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct File {
    /// `max_size`, bytes (0: no limit).
    pub max_size: Option<u64>,
    /// `sloppiness`.
    pub sloppiness: Option<Sloppiness>,
    /// `stat_digests`.
    pub stat_digests: Option<bool>,
    /// `mode`.
    pub mode: Option<Mode>,
    /// Lines left out, with why (`nxcc.conf:3: ...`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A size as the configuration spells it (`20G`); `auto` is not a size here.
pub fn parse_size(text: &str) -> Result<u64, String> {
    if text.trim().eq_ignore_ascii_case("auto") {
        return Err("invalid size: \"auto\" (give a size: 20G, 512M, 0 for no limit)".into());
    }
    crate::cli::numbers::parse_size(text)
}

fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        other => Err(format!("not true or false: {other:?}")),
    }
}

impl File {
    /// Read `text` (the file's contents).
    pub fn parse(text: &str) -> File {
        let mut f = File::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Err(e) = f.set_line(line) {
                f.warnings
                    .push(format!("{CONFIG_FILE}:{}: {e}; line left out", n + 1));
            }
        }
        f
    }

    /// Apply one `key = value` line.
    pub(crate) fn set_line(&mut self, line: &str) -> Result<(), String> {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("not key = value: {line:?}"))?;
        let (key, value) = (key.trim(), value.trim());
        match key {
            "max_size" => self.max_size = Some(parse_size(value)?),
            "sloppiness" => self.sloppiness = Some(Sloppiness::parse(value)?),
            "stat_digests" => self.stat_digests = Some(parse_bool(value)?),
            "mode" => self.mode = Some(Mode::parse(value)?),
            other => {
                return Err(format!(
                    "unknown key {other:?} (known: {})",
                    KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// The file's text (the keys set, in [`KEYS`] order).
    pub fn text(&self) -> String {
        let mut t = String::from("# nxcc cache configuration (nxcc cache config KEY=VALUE)\n");
        if let Some(n) = self.max_size {
            t.push_str(&format!("max_size = {n}\n"));
        }
        if let Some(s) = self.sloppiness {
            t.push_str(&format!("sloppiness = {}\n", s.spelling()));
        }
        if let Some(b) = self.stat_digests {
            t.push_str(&format!("stat_digests = {b}\n"));
        }
        if let Some(m) = self.mode {
            t.push_str(&format!("mode = {}\n", m.spelling()));
        }
        t
    }

    /// The configuration of the cache whose `nxcc-v1` is `root` (none when it has no file).
    ///
    /// What a file said is remembered in this process's memory for the file's stat identity
    /// (a daemon reads the file once, not on every request): a file rewritten, replaced or
    /// touched is read again, and a file changed within [`super::digests::RACY_MARGIN_NS`] of the read is not
    /// remembered at all ([`super::digests`]'s rule).
    pub(crate) fn read_in(root: &Dir) -> File {
        let start = now_ns();
        match root.open_file(CONFIG_FILE) {
            Ok(f) => {
                let id = StatId::of_file(&f).ok();
                if let Some(known) = id.and_then(|id| remembered().get(&id)) {
                    return known;
                }
                let file = File::read_open(f);
                if let Some(id) = id.filter(|id| id.settled_before(start)) {
                    remembered().put(id, &file);
                }
                file
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => File::default(),
            Err(e) => File::unreadable(e.to_string()),
        }
    }

    fn read_open(f: std::fs::File) -> File {
        let mut bytes = Vec::new();
        let read = std::io::Read::read_to_end(
            &mut std::io::Read::take(f, CONFIG_LIMIT as u64 + 1),
            &mut bytes,
        );
        match read {
            Err(e) => File::unreadable(e.to_string()),
            Ok(_) if bytes.len() > CONFIG_LIMIT => {
                File::unreadable(format!("larger than {CONFIG_LIMIT} bytes"))
            }
            Ok(_) => File::parse(&String::from_utf8_lossy(&bytes)),
        }
    }

    fn unreadable(why: String) -> File {
        File {
            warnings: vec![format!("{CONFIG_FILE} cannot be read ({why}); left out")],
            ..File::default()
        }
    }

    /// The configuration of `cache` (none when the cache does not exist yet or may not be
    /// used).
    pub fn read(cache: &Cache) -> File {
        match cache.open_root(false) {
            Ok(Some(root)) => File::read_in(&root),
            _ => File::default(),
        }
    }

    /// Write this configuration into `cache` (made if absent), atomically.
    pub fn write(&self, cache: &Cache) -> std::io::Result<PathBuf> {
        let root = cache
            .open_root(true)?
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        let mut f = AtomicFile::create_in(&root, CONFIG_FILE)?;
        f.write_all(self.text().as_bytes())?;
        f.commit(Durability::Durable)?;
        Ok(cache.root().join(CONFIG_FILE))
    }
}

/// Configuration files read by this process, by stat identity (cleared when full).
struct Remembered(Mutex<HashMap<StatId, File>>);

/// Files remembered at most.
const REMEMBERED_LIMIT: usize = 64;

fn remembered() -> &'static Remembered {
    static R: OnceLock<Remembered> = OnceLock::new();
    R.get_or_init(|| Remembered(Mutex::new(HashMap::new())))
}

impl Remembered {
    fn get(&self, id: &StatId) -> Option<File> {
        self.0.lock().ok()?.get(id).cloned()
    }

    fn put(&self, id: StatId, file: &File) {
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= REMEMBERED_LIMIT {
                m.clear();
            }
            m.insert(id, file.clone());
        }
    }
}

/// A compile's cache settings: its flags over the cache's configuration file over the defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// The size the entries are kept under (`None`: no limit).
    pub max_size: Option<u64>,
    /// What may differ.
    pub sloppiness: Sloppiness,
    /// Whether remembered digests of unchanged files are trusted ([`super::digests`]).
    pub stat_digests: bool,
    /// How the cache is used.
    pub mode: Mode,
    /// Read-only caches searched after this one (`--cache-secondary`, in order).
    pub secondaries: Vec<PathBuf>,
    /// What was wrong in the configuration file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_size: None,
            sloppiness: Sloppiness::default(),
            stat_digests: true,
            mode: Mode::ReadWrite,
            secondaries: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// A compile's cache flags (each `None` when not given).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Flags {
    /// `--cache-max-size`.
    pub max_size: Option<String>,
    /// `--cache-sloppiness`.
    pub sloppiness: Option<String>,
    /// `--cache-rehash`.
    pub rehash: bool,
    /// `--cache-mode`.
    pub mode: Option<String>,
    /// `--cache-secondary`, in order (absolute).
    pub secondaries: Vec<PathBuf>,
}

impl Flags {
    /// The flags of a compile's plan (`--cache-secondary` made absolute against its launch
    /// directory, unless it names a shared tier).
    pub fn of(inv: &Invocation) -> Flags {
        let flags = &inv.settings.cache;
        let s = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        Flags {
            max_size: s(&flags.max_size),
            sloppiness: s(&flags.sloppiness),
            rehash: flags.rehash,
            mode: s(&flags.mode),
            secondaries: flags
                .secondary
                .iter()
                .filter(|d| !d.is_empty())
                .map(|d| match crate::objstore::is_url(d) {
                    // A shared tier (`s3://...`), searched by its layer.
                    true => PathBuf::from(d),
                    false => crate::fsx::absolute(&inv.plan.launch_dir, d),
                })
                .collect(),
        }
    }
}

impl Settings {
    /// The flags over the file over the defaults; an error names a flag whose value does not
    /// read.
    pub fn resolve(flags: &Flags, file: &File) -> Result<Settings, String> {
        let max_size = match &flags.max_size {
            Some(v) => Some(parse_size(v).map_err(|e| format!("argument --cache-max-size: {e}"))?),
            None => file.max_size,
        };
        let sloppiness = match &flags.sloppiness {
            Some(v) => {
                Sloppiness::parse(v).map_err(|e| format!("argument --cache-sloppiness: {e}"))?
            }
            None => file.sloppiness.unwrap_or_default(),
        };
        let mode = match &flags.mode {
            Some(v) => Mode::parse(v).map_err(|e| format!("argument --cache-mode: {e}"))?,
            None => file.mode.unwrap_or_default(),
        };
        Ok(Settings {
            max_size: max_size.filter(|n| *n > 0),
            sloppiness,
            stat_digests: !flags.rehash && file.stat_digests.unwrap_or(true),
            mode,
            secondaries: flags.secondaries.clone(),
            warnings: file.warnings.clone(),
        })
    }

    /// The settings of a compile of `inv` through `cache`: its flags over the cache's file.
    pub fn of(inv: &Invocation, cache: Option<&Cache>) -> Result<Settings, String> {
        let file = cache.map(File::read).unwrap_or_default();
        Settings::resolve(&Flags::of(inv), &file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_reads_writes_and_says_what_it_left_out() {
        let f = File::parse(
            "# a comment\nmax_size = 20G\nsloppiness=hlo_metadata\nbogus = 1\nmode = read-only\nstat_digests = maybe\n",
        );
        assert_eq!(f.max_size, Some(20 << 30));
        assert_eq!(f.sloppiness, Some(Sloppiness { hlo_metadata: true }));
        assert_eq!(f.mode, Some(Mode::ReadOnly));
        assert_eq!(f.stat_digests, None);
        assert_eq!(f.warnings.len(), 2, "{:?}", f.warnings);
        assert!(f.warnings[0].starts_with("nxcc.conf:4: unknown key \"bogus\""));
        assert!(f.warnings[1].starts_with("nxcc.conf:6: not true or false"));
        let again = File::parse(&f.text());
        assert_eq!(
            (again.max_size, again.sloppiness, again.mode),
            (f.max_size, f.sloppiness, f.mode)
        );
        assert!(again.warnings.is_empty());
        assert!(parse_size("auto").is_err());
    }

    #[test]
    fn flags_override_the_file() {
        let file = File::parse("max_size = 1G\nsloppiness = hlo_metadata\nmode = hit-only\n");
        let s = Settings::resolve(&Flags::default(), &file).unwrap();
        assert_eq!(s.max_size, Some(1 << 30));
        assert!(s.sloppiness.hlo_metadata && s.stat_digests);
        assert_eq!(s.mode, Mode::HitOnly);
        let flags = Flags {
            max_size: Some("0".into()),
            sloppiness: Some("none".into()),
            rehash: true,
            mode: Some("read-write".into()),
            secondaries: vec![PathBuf::from("/images/cache")],
        };
        let s = Settings::resolve(&flags, &file).unwrap();
        assert_eq!(s.max_size, None, "0: no limit");
        assert!(!s.sloppiness.hlo_metadata && !s.stat_digests);
        assert_eq!(s.mode, Mode::ReadWrite);
        assert_eq!(s.secondaries, [PathBuf::from("/images/cache")]);
        let bad = Flags {
            max_size: Some("lots".into()),
            ..Flags::default()
        };
        assert!(Settings::resolve(&bad, &file)
            .unwrap_err()
            .starts_with("argument --cache-max-size: invalid size"));
    }
}
