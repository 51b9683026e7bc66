//! Both caches' locks through the one lock protocol ([`nxcc::lockfile`]): a key's lock of nxcc's
//! cache as a compile takes it ([`Cache::lock`]) and an entry's lock of the framework's cache as
//! `parallel-compile` takes it (a [`Locker`] with the entry's lock name), each facing the same
//! holders: a dead nxcc run of this host (taken over), a live process of this host (nxcc's cache
//! waits for it and takes the lock once it is gone; the framework's entry is skipped, saying who
//! holds it), and an nxcc run of another host whose lease is live (reported, left alone).

use std::any::Any;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use nxcc::cache::store::Cache;
use nxcc::lockfile::keeper::{Locker, Taken};
use nxcc::lockfile::{self, Stamp};
use nxcc::neuron_cache::lock::lock_name;
use nxcc::run::process::Cancel;

const LEASE: Duration = Duration::from_secs(60);
const KEY: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
const GRAPH: &str = "model.hlo_module.pb";

/// A lock taken: what it took over (in words), and the lock itself (released when dropped).
type Got = (Option<String>, Box<dyn Any>);

/// One cache's entry lock, taken as nxcc takes it there.
enum Taker {
    /// nxcc's cache: the key's lock, `<2 hex>/<key>.lock`.
    Nxcc(Cache),
    /// The framework's cache: `<version>/<entry>/model.hlo_module.pb.lock`, below `root`.
    Framework { root: PathBuf, rel: Vec<String> },
}

impl Taker {
    fn name(&self) -> &'static str {
        match self {
            Taker::Nxcc(_) => "nxcc's cache",
            Taker::Framework { .. } => "the framework's cache",
        }
    }

    /// Whether a compile waits for a live holder (nxcc's cache) or skips the entry (the
    /// framework's, whose entries `parallel-compile` takes in any order).
    fn waits(&self) -> bool {
        matches!(self, Taker::Nxcc(_))
    }

    fn lock_file(&self) -> PathBuf {
        match self {
            Taker::Nxcc(c) => c.lock_path(KEY),
            Taker::Framework { root, rel } => rel
                .iter()
                .fold(root.clone(), |p, r| p.join(r))
                .join(lock_name(GRAPH)),
        }
    }

    /// Take the lock once as its cache does; `on_busy` is told who holds it and says whether to
    /// go on waiting (where the cache waits). `None`: not taken.
    fn take(&self, on_busy: &mut dyn FnMut(&str) -> bool) -> Option<Got> {
        match self {
            Taker::Nxcc(cache) => {
                let cancel = Cancel::new();
                let got = cache
                    .lock(KEY, Some(&cancel), &mut |who| {
                        if !on_busy(who) {
                            cancel.cancel();
                        }
                    })
                    .unwrap();
                got.map(|l| (l.replaced.clone(), Box::new(l) as Box<dyn Any>))
            }
            Taker::Framework { root, rel } => {
                match Locker::Local(LEASE)
                    .acquire(root, rel, &lock_name(GRAPH), false)
                    .unwrap()
                {
                    Taken::Locked(h) => {
                        let took = h
                            .took_over()
                            .map(|t| format!("took over a lock {}", t.describe()));
                        Some((took, Box::new(h)))
                    }
                    Taken::Busy(h) => {
                        on_busy(&h.describe());
                        None
                    }
                    Taken::Refused(why) => panic!("refused: {why}"),
                }
            }
        }
    }
}

fn takers(dir: &Path) -> Vec<Taker> {
    let rel = vec![
        "neuronxcc-2.24.5133.0+nxcc-sim".to_string(),
        "MODULE_1+4fb1c5e2".to_string(),
    ];
    let cache = Cache::new(dir.join("nxcc"));
    std::fs::create_dir_all(cache.lock_path(KEY).parent().unwrap()).unwrap();
    let root = dir.join("framework");
    std::fs::create_dir_all(rel.iter().fold(root.clone(), |p, r| p.join(r))).unwrap();
    vec![Taker::Nxcc(cache), Taker::Framework { root, rel }]
}

/// The lock file says this process holds it.
fn ours(lock: &Path) -> bool {
    let text = std::fs::read_to_string(lock).unwrap();
    Stamp::parse(&text).is_some_and(|s| s.pid == std::process::id())
}

/// A stamp of this host naming `pid` (with its start time, when it runs).
fn stamp_of(pid: u32) -> String {
    let mut s = Stamp::mine(LEASE);
    s.pid = pid;
    s.start = lockfile::start_ticks(pid);
    s.text()
}

fn dead_holder_is_taken_over(t: &Taker) {
    let lock = t.lock_file();
    std::fs::write(&lock, stamp_of(u32::MAX - 7)).unwrap();
    let mut told = Vec::new();
    let (took, held) = t
        .take(&mut |who| {
            told.push(who.to_string());
            false
        })
        .unwrap_or_else(|| panic!("{}: a dead holder's lock was not taken: {told:?}", t.name()));
    assert!(
        told.is_empty(),
        "{}: waited for a dead holder: {told:?}",
        t.name()
    );
    let took = took.unwrap_or_default();
    assert!(
        took.starts_with("took over a lock left by a dead nxcc run (nxcc pid=4294967288 "),
        "{}: {took}",
        t.name()
    );
    assert!(ours(&lock), "{}", t.name());
    drop(held);
    assert!(!lock.exists(), "{}: a released lock stays", t.name());
}

fn live_holder_is_waited_for(t: &Taker) {
    let lock = t.lock_file();
    let mut holder: Option<Child> = Some(Command::new("sleep").arg("600").spawn().unwrap());
    let pid = holder.as_ref().unwrap().id();
    std::fs::write(&lock, stamp_of(pid)).unwrap();
    assert!(lockfile::start_ticks(pid).is_some());
    let mut told = Vec::new();
    // The holder ends once the taker has said it waits for it.
    let mut end_holder = |who: &str| {
        told.push(who.to_string());
        if let Some(mut c) = holder.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        true
    };
    let first = t.take(&mut end_holder);
    let expect = format!("held by a running process (nxcc pid={pid} ");
    assert_eq!(told.len(), 1, "{}: {told:?}", t.name());
    assert!(told[0].starts_with(&expect), "{}: {told:?}", t.name());
    let (took, held) = match first {
        Some(got) => {
            assert!(t.waits(), "{}: took a live holder's lock", t.name());
            got
        }
        None => {
            assert!(!t.waits(), "{}: gave up waiting", t.name());
            // Skipped while the holder lived; its lock is taken over once it is gone.
            t.take(&mut |who| panic!("{}: still busy: {who}", t.name()))
                .unwrap()
        }
    };
    let took = took.unwrap_or_default();
    assert!(
        took.starts_with(&format!(
            "took over a lock left by a dead nxcc run (nxcc pid={pid} "
        )),
        "{}: {took}",
        t.name()
    );
    assert!(ours(&lock), "{}", t.name());
    drop(held);
}

fn foreign_hosts_live_lease_is_reported(t: &Taker) {
    let lock = t.lock_file();
    let text = format!(
        "nxcc pid=1 started=0 host=far-host-{} lease=600000\n",
        std::process::id()
    );
    std::fs::write(&lock, &text).unwrap();
    let mut told = Vec::new();
    let got = t.take(&mut |who| {
        told.push(who.to_string());
        false
    });
    assert!(
        got.is_none(),
        "{}: another host's live lock was taken",
        t.name()
    );
    assert_eq!(told.len(), 1, "{}: {told:?}", t.name());
    let expect = format!(
        "held by an nxcc run on host far-host-{}, its lease running until ",
        std::process::id()
    );
    assert!(told[0].starts_with(&expect), "{}: {told:?}", t.name());
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        text,
        "{}: the lock was changed",
        t.name()
    );
    std::fs::remove_file(&lock).unwrap();
}

#[test]
fn both_caches_take_over_dead_holders_wait_for_live_ones_and_report_other_hosts_leases() {
    let dir = tempfile::tempdir().unwrap();
    let takers = takers(dir.path());
    for t in &takers {
        dead_holder_is_taken_over(t);
        live_holder_is_waited_for(t);
        foreign_hosts_live_lease_is_reported(t);
    }
}
