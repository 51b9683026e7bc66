//! Lock files that say who holds them and for how long, so that any process, on this host or
//! another one sharing the directory, can tell a live holder from a dead one: the one lock
//! protocol nxcc uses wherever a lock must outlive nothing but its holder.
//!
//! A lock is a plain file `<name>` created whole (written and `flock`ed under a temporary name,
//! then linked to its name, which fails if a lock is there). Its text is its holder's
//! [`Stamp`]: `nxcc pid=<pid> started=<unix s> host=<host name> boot=<boot id> start=<the
//! process's start time, clock ticks after boot> lease=<ms>`. While it lives, the holder keeps an
//! exclusive `flock` on it and refreshes its *lease*: the file's modification time, set to now
//! at least every `refresh_every` (`Lock::refresh`).
//!
//! Whether a lock file is live (`judge`, [`Holder`]):
//! - someone holds an `flock` on it: a live holder of this host ([`Holder::Held`]);
//! - nxcc's, of this host (same host name), nobody holding its `flock`: its holder is proven dead
//!   when its boot id differs, its pid is gone or a zombie (killed, not yet reaped), or its pid
//!   now names a process that started at another time ([`Holder::Dead`]); a live pid with its
//!   start time and no `flock` counts as held; a live pid without a start time proves nothing,
//!   and only the lease tells, as for another host's;
//! - nxcc's, of another host: `flock`s are local to a host on network file systems without a lock
//!   manager, so only the lease tells — live until the modification time plus the lease has
//!   passed ([`Holder::Leased`]), then stale ([`Holder::Expired`]). Hosts' clocks must agree
//!   to well within a lease. A lease is never longer than `lease_max` whatever the stamp says,
//!   and a modification time further ahead of this host's clock than `clock_skew` is no lease
//!   at all ([`Holder::Void`]): a forged or broken lock cannot be made to last;
//! - not nxcc's and not `flock`ed: nothing tells ([`Holder::Foreign`]).
//!
//! A name that holds anything but a regular file (a link, a FIFO) is never opened as a lock: it
//! is refused ([`Acquired::Refused`]; `judge` fails), for that lock alone.
//!
//! A dead or expired lock is taken over ([`acquire`]) by renaming a fresh one onto it while
//! holding an `flock` on the old one, after checking that the name still holds the file judged.
//! Two hosts may still take over one expired lock at once: whoever writes under a lock checks
//! first that it is still its own ([`Lock::verify`]: the same file at the name, the lease
//! running, the directory still linked), and gives up its result otherwise. A lock is removed by
//! its holder before its `flock` goes. A name that keeps changing while it is being taken (a
//! removal a network or FUSE mount's client sees late: `stat` finds the file, `open` does not)
//! is tried again with growing pauses for up to [`SETTLE`], an ordinary event, not an error.
//!
//! [`keeper`] holds locks for a process in a helper that outlives it only long enough to remove
//! them: a killed `parallel-compile` leaves no lock behind. [`object`] is the same protocol on
//! objects in a bucket, where no `flock` exists.

pub mod keeper;
pub mod object;

use std::fs::File;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, OFlags, Timespec, Timestamps};
use serde::{Deserialize, Serialize};

use crate::fsx::{unique, Dir};

/// What an nxcc lock file's text starts with.
pub const MARK: &str = "nxcc ";
/// The lease a holder keeps unless told otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// The environment variable that sets the lease, in milliseconds (tests use short ones).
pub const LEASE_ENV: &str = "NXCC_LOCK_LEASE_MS";
/// The longest lease honoured unless told otherwise: 10 minutes.
pub const DEFAULT_LEASE_MAX: Duration = Duration::from_secs(600);
/// The environment variable that sets the longest lease honoured, in seconds.
pub const LEASE_MAX_ENV: &str = "NXCC_LOCK_LEASE_MAX_S";
/// How far ahead of this host's clock a lock's modification time may be unless told otherwise.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);
/// The environment variable that sets the clock-skew allowance, in seconds.
pub const CLOCK_SKEW_ENV: &str = "NXCC_LOCK_CLOCK_SKEW_S";
/// How long [`acquire`] goes on trying while the lock's name keeps changing under it.
pub const SETTLE: Duration = Duration::from_secs(5);

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The longest lease any lock is granted, its stamp's or this process's: [`LEASE_MAX_ENV`]
/// (at least 1 s), else [`DEFAULT_LEASE_MAX`].
pub(crate) fn lease_max() -> Duration {
    env_u64(LEASE_MAX_ENV)
        .filter(|s| *s >= 1)
        .map_or(DEFAULT_LEASE_MAX, Duration::from_secs)
}

/// How far ahead of this host's clock a lock's modification time may be and still be a lease:
/// [`CLOCK_SKEW_ENV`], else [`DEFAULT_CLOCK_SKEW`].
pub(crate) fn clock_skew() -> Duration {
    env_u64(CLOCK_SKEW_ENV).map_or(DEFAULT_CLOCK_SKEW, Duration::from_secs)
}

/// The lease this process gives its locks: [`LEASE_ENV`] (at least 100 ms), else
/// [`DEFAULT_LEASE`]; never more than `lease_max`.
pub fn lease() -> Duration {
    env_u64(LEASE_ENV)
        .filter(|ms| *ms >= 100)
        .map_or(DEFAULT_LEASE, Duration::from_millis)
        .min(lease_max())
}

/// How often a holder refreshes a lease of `lease`: a quarter of it.
pub(crate) fn refresh_every(lease: Duration) -> Duration {
    lease / 4
}

/// Who holds a lock: what its text says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The holder's process id (on its host).
    pub pid: u32,
    /// When the lock was taken, seconds since the epoch.
    pub started: u64,
    /// The holder's host name.
    pub host: String,
    /// The holder's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot: Option<String>,
    /// The holder's start time, clock ticks after boot (`/proc/<pid>/stat`).
    pub start: Option<u64>,
    /// The lease, milliseconds.
    pub lease_ms: Option<u64>,
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// This host's name.
pub(crate) fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
}

/// A running process's start time, clock ticks after boot (`None`: gone, or a zombie — a
/// process killed and not yet reaped holds nothing).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    if matches!(fields.next()?, "Z" | "X" | "x") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

impl Stamp {
    /// This process's stamp with `lease`.
    pub fn mine(lease: Duration) -> Stamp {
        let pid = std::process::id();
        Stamp {
            pid,
            started: now_s(),
            host: host_name(),
            boot: boot_id(),
            start: start_ticks(pid),
            lease_ms: Some(lease.as_millis() as u64),
        }
    }

    /// The lock file's text (one line).
    pub fn text(&self) -> String {
        let mut t = format!(
            "{MARK}pid={} started={} host={}",
            self.pid, self.started, self.host
        );
        if let Some(b) = &self.boot {
            t.push_str(&format!(" boot={b}"));
        }
        if let Some(s) = self.start {
            t.push_str(&format!(" start={s}"));
        }
        if let Some(l) = self.lease_ms {
            t.push_str(&format!(" lease={l}"));
        }
        t.push('\n');
        t
    }

    /// Read a lock file's text; `None` if it is not nxcc's (the fields it lacks stay unknown).
    pub fn parse(text: &str) -> Option<Stamp> {
        let rest = text.trim_end().strip_prefix(MARK)?;
        let field = |k: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
        };
        Some(Stamp {
            pid: field("pid")?.parse().ok()?,
            started: field("started").and_then(|v| v.parse().ok()).unwrap_or(0),
            host: field("host")?.to_string(),
            boot: field("boot").map(str::to_string),
            start: field("start").and_then(|v| v.parse().ok()),
            lease_ms: field("lease").and_then(|v| v.parse().ok()),
        })
    }

    /// Whether this host's process it names runs: `Some(false)` when proven gone (another
    /// boot, no such pid, a zombie, or another process under its pid), `Some(true)` when its pid
    /// runs with its start time, `None` when the stamp has no start time and its pid runs (which
    /// proves nothing: pid 1 always runs).
    fn alive_here(&self) -> Option<bool> {
        if self.boot.is_some() && self.boot != boot_id() {
            return Some(false);
        }
        let Some(now) = start_ticks(self.pid) else {
            return Some(false);
        };
        self.start.map(|then| now == then)
    }
}

/// How a lock file stands for the process that looks at it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Holder {
    /// A live holder of this host: someone holds its `flock` (or its process still runs).
    Held {
        /// The lock's text.
        text: String,
    },
    /// nxcc's, of this host, and its holder is proven dead.
    Dead {
        /// The lock's text.
        text: String,
    },
    /// nxcc's, of another host, its lease running.
    Leased {
        /// The lock's text.
        text: String,
        /// The holder's host.
        host: String,
        /// When the lease ends, milliseconds since the epoch.
        until_ms: u64,
    },
    /// nxcc's, of another host, its lease over: stale.
    Expired {
        /// The lock's text.
        text: String,
        /// The holder's host.
        host: String,
        /// When the lease ended, milliseconds since the epoch.
        until_ms: u64,
    },
    /// nxcc's, its modification time further ahead of this host's clock than the clock-skew
    /// allowance (`clock_skew`): no lease at all (a forged lock, or a broken clock).
    Void {
        /// The lock's text.
        text: String,
        /// The holder's host.
        host: String,
        /// How far ahead its modification time is, seconds.
        ahead_s: u64,
    },
    /// Not nxcc's, nobody holding an `flock` on it: nothing tells whether it is live.
    Foreign {
        /// The lock's text (often nothing).
        text: String,
    },
    /// Not nxcc's, an object in a bucket given a lease from its last write
    /// (`object::judge_text`), the lease running.
    ForeignLeased {
        /// The lock's text (often nothing).
        text: String,
        /// When the lease it is given ends, milliseconds since the epoch.
        until_ms: u64,
    },
    /// Not nxcc's, an object in a bucket given a lease from its last write, the lease over and
    /// no write since: stale.
    ForeignExpired {
        /// The lock's text (often nothing).
        text: String,
        /// When the lease it was given ended, milliseconds since the epoch.
        until_ms: u64,
    },
    /// Not nxcc's, an object in a bucket whose last write is further ahead of this host's clock
    /// than the clock-skew allowance (`clock_skew`): no lease at all, stale.
    ForeignVoid {
        /// The lock's text (often nothing).
        text: String,
        /// How far ahead its last write is, seconds.
        ahead_s: u64,
    },
}

/// The longest part of a lock's text shown in words.
pub const TEXT_SHOWN: usize = 300;

/// A lock's text as it is shown: control characters escaped (`\u{1b}`), cut at [`TEXT_SHOWN`]
/// characters; an empty one said so (a lock file holds whatever its writer put there).
pub fn shown(text: &str) -> String {
    if text.is_empty() {
        return "an empty lock file".to_string();
    }
    let mut out = String::new();
    for (n, (i, c)) in text.char_indices().enumerate() {
        if n >= TEXT_SHOWN {
            out.push_str(&format!("... ({} more bytes)", text.len() - i));
            break;
        }
        match c {
            c if c.is_control() || ('\u{200b}'..='\u{206f}').contains(&c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

impl Holder {
    /// Whether its holder is proven gone (dead, its lease expired or void).
    pub fn is_stale(&self) -> bool {
        matches!(
            self,
            Holder::Dead { .. }
                | Holder::Expired { .. }
                | Holder::Void { .. }
                | Holder::ForeignExpired { .. }
                | Holder::ForeignVoid { .. }
        )
    }

    /// Whether it is not nxcc's (its liveness unknown, or told only by a lease it was given).
    pub fn is_foreign(&self) -> bool {
        matches!(
            self,
            Holder::Foreign { .. }
                | Holder::ForeignLeased { .. }
                | Holder::ForeignExpired { .. }
                | Holder::ForeignVoid { .. }
        )
    }

    /// The lock's text.
    pub fn text(&self) -> &str {
        match self {
            Holder::Held { text }
            | Holder::Dead { text }
            | Holder::Leased { text, .. }
            | Holder::Expired { text, .. }
            | Holder::Void { text, .. }
            | Holder::Foreign { text }
            | Holder::ForeignLeased { text, .. }
            | Holder::ForeignExpired { text, .. }
            | Holder::ForeignVoid { text, .. } => text,
        }
    }

    /// In words: `held by a running process (...)`, `left by a dead nxcc run (...)`, ... (the
    /// lock's text escaped and cut: it is whatever the file holds).
    pub fn describe(&self) -> String {
        let text = shown(self.text());
        match self {
            Holder::Held { .. } => format!("held by a running process ({text})"),
            Holder::Dead { .. } => format!("left by a dead nxcc run ({text})"),
            Holder::Leased { host, until_ms, .. } => format!(
                "held by an nxcc run on host {}, its lease running until {:.3} ({text})",
                shown(host),
                *until_ms as f64 / 1000.0
            ),
            Holder::Expired { host, until_ms, .. } => format!(
                "left by an nxcc run on host {} whose lease ended at {:.3} ({text})",
                shown(host),
                *until_ms as f64 / 1000.0
            ),
            Holder::Void { host, ahead_s, .. } => format!(
                "left by an nxcc run on host {} whose lease is void: its modification time is {ahead_s} s ahead of this host's clock ({text})",
                shown(host)
            ),
            Holder::Foreign { text } if text.is_empty() => {
                "a lock file nxcc did not make (the framework's?)".to_string()
            }
            Holder::Foreign { .. } => format!("a lock file nxcc did not make ({text})"),
            Holder::ForeignLeased { text, until_ms } => format!(
                "a lock object nxcc did not make, honoured until {:.3} (its last write plus the lease such a lock is given){}",
                *until_ms as f64 / 1000.0,
                shown_text(text)
            ),
            Holder::ForeignExpired { text, until_ms } => format!(
                "a lock object nxcc did not make, unchanged since the lease such a lock is given ended at {:.3}{}",
                *until_ms as f64 / 1000.0,
                shown_text(text)
            ),
            Holder::ForeignVoid { text, ahead_s } => format!(
                "a lock object nxcc did not make whose lease is void: its last write is {ahead_s} s ahead of this host's clock{}",
                shown_text(text)
            ),
        }
    }
}

/// A foreign lock's text in a description: ` (<text>)`, [`shown`]; nothing when it is empty.
fn shown_text(text: &str) -> String {
    match text {
        "" => String::new(),
        t => format!(" ({})", shown(t)),
    }
}

fn read_text(f: &mut File) -> String {
    let mut b = Vec::new();
    let _ = Read::by_ref(f).take(4096).read_to_end(&mut b);
    String::from_utf8_lossy(&b).trim_end().to_string()
}

fn mtime_s(f: &File) -> io::Result<f64> {
    let st = rustix::fs::fstat(f)?;
    Ok(st.st_mtime as f64 + st.st_mtime_nsec as f64 / 1e9)
}

fn now_f() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How the lock file open at `f` stands, its `flock` being free (`free`).
fn classify(f: &mut File, free: bool) -> io::Result<Holder> {
    let text = read_text(f);
    if !free {
        return Ok(Holder::Held { text });
    }
    let modified = mtime_s(f)?;
    Ok(judge_text(text, modified))
}

/// How a lock whose holder's own lock (its `flock`) is not seen stands, from its text and when
/// its lease was last refreshed (`modified_s`, seconds since the epoch): the rules above, for a
/// lock file and for a lock kept where no `flock` exists (an object in a bucket).
pub(crate) fn judge_text(text: String, modified_s: f64) -> Holder {
    let Some(stamp) = Stamp::parse(&text) else {
        return Holder::Foreign { text };
    };
    if stamp.host == host_name() {
        match stamp.alive_here() {
            Some(false) => return Holder::Dead { text },
            Some(true) => return Holder::Held { text },
            None => {}
        }
    }
    by_lease(text, stamp, modified_s)
}

/// How a lock whose holder only its lease tells stands: its modification time `mtime` (seconds
/// since the epoch) plus its lease (at most [`lease_max`]); void when `mtime` is further ahead
/// than [`clock_skew`].
fn by_lease(text: String, stamp: Stamp, mtime: f64) -> Holder {
    let now = now_f();
    let host = stamp.host;
    if mtime > now + clock_skew().as_secs_f64() {
        return Holder::Void {
            text,
            host,
            ahead_s: (mtime - now) as u64,
        };
    }
    let lease = stamp
        .lease_ms
        .map_or(DEFAULT_LEASE, Duration::from_millis)
        .min(lease_max());
    let until = mtime + lease.as_secs_f64();
    let until_ms = (until * 1000.0) as u64;
    if now < until {
        Holder::Leased {
            text,
            host,
            until_ms,
        }
    } else {
        Holder::Expired {
            text,
            host,
            until_ms,
        }
    }
}

/// How the lock file `name` of `dir` stands; `None` if there is none. Probes its `flock` with a
/// shared lock, released at once.
pub(crate) fn judge(dir: &Dir, name: &str) -> io::Result<Option<Holder>> {
    let mut f = match dir.open_file_with(name, OFlags::RDONLY, 0) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        r => r?,
    };
    let free = fs4::fs_std::FileExt::try_lock_shared(&f)?;
    classify(&mut f, free).map(Some)
}

fn same_file(dir: &Dir, name: &str, f: &File) -> bool {
    match (dir.stat(name), rustix::fs::fstat(f)) {
        (Ok(a), Ok(b)) => a.st_ino == b.st_ino && a.st_dev == b.st_dev,
        _ => false,
    }
}

fn try_flock(f: &File) -> io::Result<bool> {
    fs4::fs_std::FileExt::try_lock_exclusive(f)
}

/// A new lock file under a temporary name of `dir`: `flock`ed, holding `stamp`.
fn fresh(dir: &Dir, name: &str, stamp: &Stamp) -> io::Result<(String, File)> {
    let tmp = unique::name(&format!(".{name}.nxcc-"));
    let mut f = dir.create_file(&tmp)?;
    let ok = try_flock(&f).and_then(|held| {
        if !held {
            return Err(io::Error::other("a new lock file is locked by another"));
        }
        f.write_all(stamp.text().as_bytes())
    });
    if let Err(e) = ok {
        let _ = dir.remove_file(&tmp);
        return Err(e);
    }
    Ok((tmp, f))
}

/// A lock this process holds (released, its file removed, when dropped).
#[derive(Debug)]
pub struct Lock {
    dir: Dir,
    name: String,
    file: File,
    lease: Duration,
    /// The lock that was taken over, if one was.
    pub took_over: Option<Holder>,
}

/// What trying to take a lock gave.
#[derive(Debug)]
pub enum Acquired {
    /// Taken.
    Locked(Lock),
    /// A live lock is there (or a foreign one, not broken), and stays.
    Busy(Holder),
    /// The name holds something that is not a plain file (the reason).
    Refused(String),
}

/// What one try at taking a lock gave.
enum Try {
    /// A final answer.
    Done(Acquired),
    /// The name changed under the taker: try again.
    Again,
}

/// Take the lock `name` in `dir` with `lease` (at most `lease_max`): create it, or take over a
/// stale one (and a foreign one nobody `flock`s, with `break_foreign`). While the name keeps
/// changing under the taker it is tried again, with pauses doubling from 1 ms to 200 ms, for
/// up to [`SETTLE`].
pub fn acquire(
    dir: &Dir,
    name: &str,
    lease: Duration,
    break_foreign: bool,
) -> io::Result<Acquired> {
    let lease = lease.min(lease_max());
    let stamp = Stamp::mine(lease);
    let began = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match try_once(dir, name, &stamp, lease, break_foreign)? {
            Try::Done(done) => return Ok(done),
            Try::Again if began.elapsed() >= SETTLE => {
                return Err(io::Error::other(format!(
                    "the lock {name} kept changing while it was being taken (for {} s)",
                    SETTLE.as_secs()
                )))
            }
            Try::Again => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }
}

/// One try at taking `name` (see [`acquire`]).
fn try_once(
    dir: &Dir,
    name: &str,
    stamp: &Stamp,
    lease: Duration,
    break_foreign: bool,
) -> io::Result<Try> {
    let locked = |file: File, took_over| -> io::Result<Try> {
        Ok(Try::Done(Acquired::Locked(Lock {
            dir: dir.try_clone()?,
            name: name.to_string(),
            file,
            lease,
            took_over,
        })))
    };
    match dir.stat(name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let (tmp, f) = fresh(dir, name, stamp)?;
            let linked = rustix::fs::linkat(dir, tmp.as_str(), dir, name, AtFlags::empty());
            let _ = dir.remove_file(&tmp);
            return match linked {
                Ok(()) => locked(f, None),
                Err(rustix::io::Errno::EXIST) => Ok(Try::Again),
                Err(e) => Err(e.into()),
            };
        }
        Err(e) => return Err(e),
        Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => {
            return Ok(Try::Done(Acquired::Refused(format!(
                "{name} is not a plain file ({})",
                crate::fsx::regular::kind_name(FileType::from_raw_mode(st.st_mode))
            ))))
        }
        Ok(_) => {}
    }
    let mut old = match dir.open_file_with(name, OFlags::RDONLY, 0) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Try::Again),
        // Replaced by something else since the stat: look again.
        Err(e) if crate::fsx::dir::is_not_plain(&e) => return Ok(Try::Again),
        r => r?,
    };
    // A scan probing with a shared lock holds it for an instant: try a few times.
    let mut free = false;
    for i in 0..5 {
        if try_flock(&old)? {
            free = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(2 << i));
    }
    let was = classify(&mut old, free)?;
    let take = was.is_stale() || (break_foreign && matches!(was, Holder::Foreign { .. }));
    if !take {
        return Ok(Try::Done(Acquired::Busy(was)));
    }
    if !same_file(dir, name, &old) {
        return Ok(Try::Again);
    }
    // Ours now: replace it by a fresh one in one rename (its holder is gone).
    let (tmp, f) = fresh(dir, name, stamp)?;
    if let Err(e) = dir.rename(&tmp, dir, name) {
        let _ = dir.remove_file(&tmp);
        return Err(e);
    }
    drop(old);
    locked(f, Some(was))
}

impl Lock {
    /// The lock file's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Refresh the lease: the file's modification time set to now.
    pub(crate) fn refresh(&self) -> io::Result<()> {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let t = Timespec {
            tv_sec: d.as_secs() as _,
            tv_nsec: d.subsec_nanos() as _,
        };
        rustix::fs::futimens(
            &self.file,
            &Timestamps {
                last_access: t,
                last_modification: t,
            },
        )?;
        Ok(())
    }

    /// Whether the lock is still this process's: the same file at its name, its lease running,
    /// its directory still linked. `Err`: why not.
    pub fn verify(&self) -> Result<(), String> {
        if !same_file(&self.dir, &self.name, &self.file) {
            return Err(format!("{} was removed or replaced", self.name));
        }
        match self.dir.own_stat() {
            Ok(st) if st.st_nlink == 0 => return Err("its directory was removed".into()),
            Err(e) => return Err(format!("its directory: {e}")),
            Ok(_) => {}
        }
        let until = mtime_s(&self.file).map_err(|e| e.to_string())? + self.lease.as_secs_f64();
        if now_f() >= until {
            return Err(format!("its lease ended at {until:.1} without a refresh"));
        }
        Ok(())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Removed while still held; then the kernel releases the flock with the descriptor.
        if same_file(&self.dir, &self.name, &self.file) {
            let _ = self.dir.remove_file(&self.name);
        }
    }
}

/// Remove the lock `name` of `dir` if its holder is proven gone (or, with `foreign`, if it is a
/// foreign one nobody `flock`s): taken over first, so a lock someone else took meanwhile
/// stays. What it was, when removed.
pub(crate) fn remove_stale(dir: &Dir, name: &str, foreign: bool) -> io::Result<Option<Holder>> {
    match acquire(dir, name, DEFAULT_LEASE, foreign)? {
        Acquired::Locked(l) => Ok(l.took_over.clone()),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;
    use std::path::Path;

    const L: &str = "model.hlo_module.pb.lock";
    const LEASE: Duration = Duration::from_secs(60);

    #[test]
    fn a_stamp_reads_back_and_old_stamps_read() {
        let s = Stamp::mine(LEASE);
        assert_eq!(Stamp::parse(&s.text()), Some(s.clone()));
        let old = Stamp::parse("nxcc pid=7 started=1 host=h").unwrap();
        assert_eq!((old.pid, old.host.as_str(), old.lease_ms), (7, "h", None));
        assert_eq!(Stamp::parse(""), None);
        assert_eq!(Stamp::parse("someone else's"), None);
    }

    #[test]
    fn a_lock_excludes_verifies_and_is_removed_when_dropped() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let Acquired::Locked(a) = acquire(&d, L, LEASE, false).unwrap() else {
            panic!()
        };
        assert!(a.verify().is_ok());
        assert!(matches!(judge(&d, L).unwrap(), Some(Holder::Held { .. })));
        assert!(matches!(
            acquire(&d, L, LEASE, true).unwrap(),
            Acquired::Busy(Holder::Held { .. })
        ));
        // Someone removes it: no longer ours.
        std::fs::remove_file(t.path().join(L)).unwrap();
        assert!(a.verify().unwrap_err().contains("removed or replaced"));
        let Acquired::Locked(b) = acquire(&d, L, LEASE, false).unwrap() else {
            panic!()
        };
        drop(a);
        assert!(
            t.path().join(L).exists(),
            "a lost lock's drop removed another's"
        );
        drop(b);
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().collect();
        assert!(names.is_empty(), "{names:?}");
    }

    #[test]
    fn dead_and_expired_locks_are_taken_over_live_and_foreign_ones_not() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let host = host_name();
        // This host, a pid that does not run: dead at once.
        std::fs::write(
            t.path().join(L),
            format!("nxcc pid=999999999 started=0 host={host}\n"),
        )
        .unwrap();
        assert!(matches!(judge(&d, L).unwrap(), Some(Holder::Dead { .. })));
        let Acquired::Locked(a) = acquire(&d, L, LEASE, false).unwrap() else {
            panic!()
        };
        assert!(matches!(a.took_over, Some(Holder::Dead { .. })));
        drop(a);
        // This host, this very process (alive), no flock: held.
        let me = Stamp::mine(LEASE);
        std::fs::write(t.path().join(L), me.text()).unwrap();
        assert!(matches!(judge(&d, L).unwrap(), Some(Holder::Held { .. })));
        // Another host: live while its lease runs, whatever its pid.
        std::fs::write(
            t.path().join(L),
            "nxcc pid=1 started=0 host=elsewhere lease=60000\n",
        )
        .unwrap();
        assert!(matches!(
            acquire(&d, L, LEASE, true).unwrap(),
            Acquired::Busy(Holder::Leased { .. })
        ));
        let past = SystemTime::now() - Duration::from_secs(120);
        let f = File::options().write(true).open(t.path().join(L)).unwrap();
        f.set_modified(past).unwrap();
        assert!(matches!(
            judge(&d, L).unwrap(),
            Some(Holder::Expired { .. })
        ));
        assert!(matches!(
            remove_stale(&d, L, false).unwrap(),
            Some(Holder::Expired { .. })
        ));
        assert!(!t.path().join(L).exists());
        // Foreign: only when broken.
        std::fs::write(t.path().join(L), "").unwrap();
        assert!(matches!(
            acquire(&d, L, LEASE, false).unwrap(),
            Acquired::Busy(Holder::Foreign { .. })
        ));
        assert!(remove_stale(&d, L, true).unwrap().is_some());
        std::os::unix::fs::symlink("/etc/passwd", t.path().join(L)).unwrap();
        assert!(matches!(
            acquire(&d, L, LEASE, true).unwrap(),
            Acquired::Refused(_)
        ));
    }

    /// Write `text` at `L` in `t` with its modification time `ago` in the past (negative: ahead).
    fn plant(t: &Path, text: &str, ago: i64) {
        std::fs::write(t.join(L), text).unwrap();
        let now = SystemTime::now();
        let when = if ago >= 0 {
            now - Duration::from_secs(ago as u64)
        } else {
            now + Duration::from_secs(ago.unsigned_abs())
        };
        let f = File::options().write(true).open(t.join(L)).unwrap();
        f.set_modified(when).unwrap();
    }

    #[test]
    fn a_zombie_holder_holds_nothing() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let mut stamp = Stamp::mine(LEASE);
        stamp.pid = child.id();
        stamp.start = start_ticks(child.id());
        assert!(stamp.start.is_some());
        std::fs::write(t.path().join(L), stamp.text()).unwrap();
        assert!(matches!(judge(&d, L).unwrap(), Some(Holder::Held { .. })));
        // Killed, not reaped: a zombie.
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let state = || {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
            stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while state() != 'Z' {
            assert!(Instant::now() < deadline, "never a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(start_ticks(child.id()), None);
        assert!(matches!(judge(&d, L).unwrap(), Some(Holder::Dead { .. })));
        let Acquired::Locked(l) = acquire(&d, L, LEASE, false).unwrap() else {
            panic!("a zombie's lock was not taken over")
        };
        assert!(matches!(l.took_over, Some(Holder::Dead { .. })));
        child.wait().unwrap();
    }

    #[test]
    fn forged_locks_are_taken_over() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let host = host_name();
        let taken = |what: &str| match acquire(&d, L, LEASE, false).unwrap() {
            Acquired::Locked(l) => l.took_over.clone().unwrap(),
            other => panic!("{what}: not taken over: {other:?}"),
        };
        // This host, pid 1 (always running), no start time: only its lease tells.
        let pid1 = format!("nxcc pid=1 started=0 host={host}\n");
        plant(t.path(), &pid1, 0);
        assert!(
            matches!(judge(&d, L).unwrap(), Some(Holder::Leased { .. })),
            "{:?}",
            judge(&d, L)
        );
        plant(t.path(), &pid1, 2 * DEFAULT_LEASE.as_secs() as i64);
        assert!(matches!(taken("pid 1"), Holder::Expired { .. }));
        // Another host's lock, its modification time years ahead: void at once.
        let far = "nxcc pid=7 started=0 host=elsewhere lease=60000\n";
        plant(t.path(), far, -3 * 365 * 86_400);
        let h = judge(&d, L).unwrap().unwrap();
        assert!(matches!(h, Holder::Void { .. }), "{h:?}");
        assert!(
            h.describe().contains("s ahead of this host's clock"),
            "{}",
            h.describe()
        );
        assert!(matches!(taken("years ahead"), Holder::Void { .. }));
        // Ahead within the clock-skew allowance: a lease.
        plant(t.path(), far, -10);
        assert!(matches!(judge(&d, L).unwrap(), Some(Holder::Leased { .. })));
        // A lease of u64::MAX ms lasts no longer than the maximum.
        for host in ["elsewhere", host.as_str()] {
            let forever = format!("nxcc pid=1 started=0 host={host} lease={}\n", u64::MAX);
            plant(t.path(), &forever, DEFAULT_LEASE_MAX.as_secs() as i64 - 60);
            assert!(
                matches!(judge(&d, L).unwrap(), Some(Holder::Leased { .. })),
                "{host}"
            );
            plant(t.path(), &forever, DEFAULT_LEASE_MAX.as_secs() as i64 + 60);
            assert!(matches!(taken(&forever), Holder::Expired { .. }), "{host}");
        }
    }

    #[test]
    fn a_fifo_at_a_locks_name_is_refused_never_opened() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            t.path().join(L).as_path(),
            FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = judge(&d, L).unwrap_err();
        assert!(crate::fsx::dir::is_not_plain(&e), "{e}");
        let Acquired::Refused(why) = acquire(&d, L, LEASE, true).unwrap() else {
            panic!("a FIFO was taken as a lock")
        };
        assert_eq!(why, format!("{L} is not a plain file (a FIFO)"));
        assert!(std::fs::symlink_metadata(t.path().join(L))
            .unwrap()
            .file_type()
            .is_fifo());
    }

    #[test]
    fn lock_text_is_shown_escaped_and_an_empty_one_said() {
        let h = Holder::Held {
            text: String::new(),
        };
        assert_eq!(
            h.describe(),
            "held by a running process (an empty lock file)"
        );
        let h = Holder::Held {
            text: "nxcc pid=1 \x1b[2J\u{202e}x".into(),
        };
        assert_eq!(
            h.describe(),
            "held by a running process (nxcc pid=1 \\u{1b}[2J\\u{202e}x)"
        );
        let long = shown(&"y".repeat(5000));
        assert!(long.ends_with(&format!("... ({} more bytes)", 5000 - TEXT_SHOWN)));
    }
}
