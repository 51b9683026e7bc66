//! Who may connect, decided at `accept` before a byte is read: the peer's uid (`SO_PEERCRED`)
//! must be the daemon's own or an `--allow-uid` one, and the open connections must stay within
//! `--max-connections-per-uid` and `--max-connections`. A refused connection is never served: it
//! gets one short answer (`403`, or `429` over a limit) once its request head is read, in a way
//! its client can read ([`super::conn::refuse`]: bounded in time and bytes, the connection shut
//! down for writing before it is closed), and a flood of refused connections is bounded
//! ([`super::conn::MAX_REFUSALS_ANSWERING`]).
//!
//! Refusals are logged at a bounded rate: the first refusal of a uid is logged at once; the
//! further ones within [`REFUSAL_LOG_INTERVAL`] are counted and logged as one line with the count
//! when the interval is over ([`Gate::flush_refusals`]). A flood of connections thus writes at most
//! two lines per uid per interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Who is on the other end of a connection (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The peer process's user id.
    pub uid: u32,
    /// The peer process's group id.
    pub gid: u32,
    /// The peer process's pid (`None`: the kernel did not give it).
    pub pid: Option<i32>,
}

impl Peer {
    /// The pid for log lines (`?` when unknown).
    pub fn pid_text(&self) -> String {
        self.pid.map_or_else(|| "?".to_string(), |p| p.to_string())
    }
}

/// How often at most the refusals of one uid are logged (one line, with a count).
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why a connection is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The uid is not served.
    NotServed,
    /// The uid already has `--max-connections-per-uid` open.
    UidLimit,
    /// The daemon already has `--max-connections` open.
    TotalLimit,
}

impl Refusal {
    /// The status line of the answer.
    pub fn status(self) -> &'static str {
        match self {
            Refusal::NotServed => "403 Forbidden",
            Refusal::UidLimit | Refusal::TotalLimit => "429 Too Many Requests",
        }
    }
}

#[derive(Debug)]
struct Window {
    /// When the last line about this uid was written.
    logged_at: Instant,
    /// Refusals since then, not yet logged.
    unlogged: u64,
    last: Refusal,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_uid: HashMap<u32, usize>,
    refusals: HashMap<u32, Window>,
}

/// The connection gate of a daemon.
#[derive(Debug)]
pub struct Gate {
    own_uid: u32,
    allowed: Vec<u32>,
    max_total: usize,
    max_per_uid: usize,
    interval: Duration,
    counts: Mutex<Counts>,
}

/// An admitted connection; its slot is given back when dropped.
#[derive(Debug)]
pub struct Ticket {
    gate: Arc<Gate>,
    uid: u32,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut c = self.gate.lock();
        c.total -= 1;
        if let Some(n) = c.per_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                c.per_uid.remove(&self.uid);
            }
        }
    }
}

impl Gate {
    /// A gate serving `own_uid` and `allowed`, with at most `max_total` connections open and
    /// `max_per_uid` per uid; a uid's refusals are logged at most once per
    /// [`REFUSAL_LOG_INTERVAL`].
    pub fn new(own_uid: u32, allowed: &[u32], max_total: usize, max_per_uid: usize) -> Arc<Gate> {
        Gate::with_interval(
            own_uid,
            allowed,
            max_total,
            max_per_uid,
            REFUSAL_LOG_INTERVAL,
        )
    }

    /// A gate whose refusal lines are at most one per `interval` and uid.
    pub fn with_interval(
        own_uid: u32,
        allowed: &[u32],
        max_total: usize,
        max_per_uid: usize,
        interval: Duration,
    ) -> Arc<Gate> {
        Arc::new(Gate {
            own_uid,
            allowed: allowed.to_vec(),
            max_total,
            max_per_uid,
            interval,
            counts: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a uid is served at all.
    pub fn serves(&self, uid: u32) -> bool {
        uid == self.own_uid || self.allowed.contains(&uid)
    }

    /// `uid 0` or `uid 0 and 65534, 1000`, for the messages.
    pub fn served_text(&self) -> String {
        let mut t = format!("uid {}", self.own_uid);
        if !self.allowed.is_empty() {
            let l: Vec<String> = self.allowed.iter().map(|u| u.to_string()).collect();
            t.push_str(&format!(" and {}", l.join(", ")));
        }
        t
    }

    /// Admit a connection from `uid`, or say why not.
    pub fn admit(self: &Arc<Self>, uid: u32) -> Result<Ticket, Refusal> {
        if !self.serves(uid) {
            return Err(Refusal::NotServed);
        }
        let mut c = self.lock();
        let mine = c.per_uid.get(&uid).copied().unwrap_or(0);
        if mine >= self.max_per_uid {
            return Err(Refusal::UidLimit);
        }
        if c.total >= self.max_total {
            return Err(Refusal::TotalLimit);
        }
        c.total += 1;
        *c.per_uid.entry(uid).or_default() += 1;
        Ok(Ticket {
            gate: self.clone(),
            uid,
        })
    }

    /// Open connections: (all, this uid's).
    pub fn open(&self, uid: u32) -> (usize, usize) {
        let c = self.lock();
        (c.total, c.per_uid.get(&uid).copied().unwrap_or(0))
    }

    /// The answer's text for a refused peer.
    pub fn reason(&self, refusal: Refusal, peer: &Peer) -> String {
        match refusal {
            Refusal::NotServed => format!(
                "uid {} may not use this nxcc daemon (it serves {}; see --allow-uid)",
                peer.uid,
                self.served_text()
            ),
            Refusal::UidLimit => format!(
                "uid {} already has {} connections open to this nxcc daemon (--max-connections-per-uid); close one and try again",
                peer.uid, self.max_per_uid
            ),
            Refusal::TotalLimit => format!(
                "this nxcc daemon already has {} connections open (--max-connections); try again later",
                self.max_total
            ),
        }
    }

    /// Note a refusal at `now`; returns the log line to write now, if any (the first refusal of
    /// a uid in an interval).
    pub fn note_refusal(&self, refusal: Refusal, peer: &Peer, now: Instant) -> Option<String> {
        let mut c = self.lock();
        match c.refusals.get_mut(&peer.uid) {
            Some(w) if now.duration_since(w.logged_at) < self.interval => {
                w.unlogged += 1;
                w.last = refusal;
                None
            }
            _ => {
                c.refusals.insert(
                    peer.uid,
                    Window {
                        logged_at: now,
                        unlogged: 0,
                        last: refusal,
                    },
                );
                drop(c);
                Some(format!(
                    "refused a connection from uid {} (pid {}): {}",
                    peer.uid,
                    peer.pid_text(),
                    self.reason(refusal, peer)
                ))
            }
        }
    }

    /// The lines for the refusals counted but not logged, of the uids whose interval is over at
    /// `now` (a uid with nothing left to say is forgotten).
    pub fn flush_refusals(&self, now: Instant) -> Vec<String> {
        let mut c = self.lock();
        let interval = self.interval;
        let mut lines = Vec::new();
        c.refusals.retain(|uid, w| {
            if now.duration_since(w.logged_at) < interval {
                return true;
            }
            if w.unlogged == 0 {
                return false;
            }
            lines.push(format!(
                "refused {} more connection(s) from uid {uid} in the last {} s (the last: {})",
                w.unlogged,
                now.duration_since(w.logged_at).as_secs(),
                match w.last {
                    Refusal::NotServed => "a uid not served",
                    Refusal::UidLimit => "over --max-connections-per-uid",
                    Refusal::TotalLimit => "over --max-connections",
                }
            ));
            w.logged_at = now;
            w.unlogged = 0;
            true
        });
        lines.sort();
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32) -> Peer {
        Peer {
            uid,
            gid: uid,
            pid: Some(7),
        }
    }

    #[test]
    fn uids_and_limits() {
        let g = Gate::new(1000, &[65534], 3, 2);
        assert_eq!(g.admit(4242).unwrap_err(), Refusal::NotServed);
        let a = g.admit(1000).unwrap();
        let _b = g.admit(1000).unwrap();
        assert_eq!(g.admit(1000).unwrap_err(), Refusal::UidLimit);
        let _c = g.admit(65534).unwrap();
        assert_eq!(g.open(1000), (3, 2));
        // Another uid may be under its own limit while the daemon is at its total.
        assert_eq!(g.admit(65534).unwrap_err(), Refusal::TotalLimit);
        drop(a);
        assert_eq!(g.open(1000), (2, 1));
        let _d = g.admit(65534).unwrap();
        assert!(g
            .reason(Refusal::NotServed, &peer(4242))
            .contains("uid 4242 may not use this nxcc daemon (it serves uid 1000 and 65534"));
        assert_eq!(Refusal::NotServed.status(), "403 Forbidden");
        assert_eq!(Refusal::UidLimit.status(), "429 Too Many Requests");
    }

    #[test]
    fn refusals_are_logged_once_per_interval_with_a_count() {
        let g = Gate::with_interval(0, &[], 10, 10, Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let first = g.note_refusal(Refusal::NotServed, &peer(5), at(0)).unwrap();
        assert!(first.starts_with("refused a connection from uid 5 (pid 7): uid 5 may not use"));
        for i in 0..500 {
            assert_eq!(
                g.note_refusal(Refusal::NotServed, &peer(5), at(i % 9)),
                None
            );
        }
        // Another uid has its own line.
        assert!(g
            .note_refusal(Refusal::NotServed, &peer(6), at(1))
            .is_some());
        assert!(
            g.flush_refusals(at(9)).is_empty(),
            "the interval is not over"
        );
        let lines = g.flush_refusals(at(10));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("refused 500 more connection(s) from uid 5 in the last 10 s"),
            "{}",
            lines[0]
        );
        // The count starts again; a quiet uid is forgotten and logged at once next time.
        assert_eq!(g.note_refusal(Refusal::NotServed, &peer(5), at(11)), None);
        assert_eq!(g.flush_refusals(at(20)).len(), 1);
        assert!(g.flush_refusals(at(40)).is_empty());
        assert!(g
            .note_refusal(Refusal::NotServed, &peer(5), at(41))
            .is_some());
    }
}
