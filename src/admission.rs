//! Admission control for many compiles at once (07, 06): at most `max` run at a time, strictly
//! first come first served, and — with a memory budget — a compile starts only while the estimated
//! peak memory of the running compiles plus its own fits. A compile whose estimate exceeds the
//! whole budget starts when nothing else runs (it could never fit otherwise). A compile can also
//! ask to run *alone* (the F137 retry rule: nothing else is admitted while it runs).
//!
//! Blocking (`Mutex` + `Condvar`); the daemon calls it from blocking threads.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::run::process::Cancel;

#[derive(Debug, Default)]
struct State {
    max: usize,
    budget: Option<u64>,
    running: usize,
    in_use: u64,
    exclusive: bool,
    queue: VecDeque<u64>,
    next_ticket: u64,
}

/// The admission controller (shared by `Arc`).
#[derive(Debug)]
pub struct Admission {
    state: Mutex<State>,
    cv: Condvar,
}

/// A running compile's place; released when dropped.
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
    bytes: u64,
    exclusive: bool,
}

/// What is running and waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    pub running: usize,
    pub queued: usize,
    /// Sum of the running compiles' estimates, bytes.
    pub memory_in_use: u64,
    pub memory_budget: Option<u64>,
    pub max_concurrent: usize,
}

impl Admission {
    /// `max` compiles at once (at least 1); `budget` bytes of estimated peak memory, if any.
    pub fn new(max: usize, budget: Option<u64>) -> Arc<Admission> {
        Arc::new(Admission {
            state: Mutex::new(State {
                max: max.max(1),
                budget,
                ..State::default()
            }),
            cv: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for a place for a compile estimated at `bytes`; `None` if cancelled while waiting.
    pub fn acquire(self: &Arc<Self>, bytes: u64, cancel: Option<&Cancel>) -> Option<Permit> {
        self.wait(bytes, false, cancel)
    }

    /// Wait until nothing else runs, then run alone (no other compile is admitted meanwhile).
    pub fn acquire_alone(self: &Arc<Self>, bytes: u64, cancel: Option<&Cancel>) -> Option<Permit> {
        self.wait(bytes, true, cancel)
    }

    fn wait(self: &Arc<Self>, bytes: u64, alone: bool, cancel: Option<&Cancel>) -> Option<Permit> {
        let mut g = self.lock();
        let ticket = g.next_ticket;
        g.next_ticket += 1;
        g.queue.push_back(ticket);
        loop {
            let head = g.queue.front() == Some(&ticket);
            let fits_memory = match g.budget {
                Some(b) => g.running == 0 || g.in_use.saturating_add(bytes) <= b,
                None => true,
            };
            let can = head
                && !g.exclusive
                && g.running < g.max
                && fits_memory
                && (!alone || g.running == 0);
            if can {
                g.queue.pop_front();
                g.running += 1;
                g.in_use += bytes;
                g.exclusive = alone;
                self.cv.notify_all();
                return Some(Permit {
                    admission: self.clone(),
                    bytes,
                    exclusive: alone,
                });
            }
            if cancel.is_some_and(|c| c.is_cancelled()) {
                g.queue.retain(|t| *t != ticket);
                self.cv.notify_all();
                return None;
            }
            g = self
                .cv
                .wait_timeout(g, Duration::from_millis(50))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let g = self.lock();
        Snapshot {
            running: g.running,
            queued: g.queue.len(),
            memory_in_use: g.in_use,
            memory_budget: g.budget,
            max_concurrent: g.max,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut g = self.admission.lock();
        g.running -= 1;
        g.in_use -= self.bytes;
        if self.exclusive {
            g.exclusive = false;
        }
        self.admission.cv.notify_all();
    }
}

/// Parse a size: `512M`, `1G`, `1.5GiB`, `2048` (bytes), `auto` → 80 % of `MemAvailable`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("auto") {
        return mem_available()
            .map(|m| m / 5 * 4)
            .ok_or_else(|| "cannot read MemAvailable from /proc/meminfo".to_string());
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid size: {text:?}"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("invalid size unit in {text:?} (use K, M, G or T)")),
    };
    if !n.is_finite() || n < 0.0 {
        return Err(format!("invalid size: {text:?}"));
    }
    Ok((n * mult as f64) as u64)
}

/// `MemAvailable` in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("2048").unwrap(), 2048);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("auto").unwrap() > 0);
    }

    fn run_many(adm: &Arc<Admission>, estimates: &[u64], hold: Duration) -> usize {
        let peak = Arc::new(AtomicUsize::new(0));
        let now = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = estimates
            .iter()
            .map(|&e| {
                let (adm, peak, now) = (adm.clone(), peak.clone(), now.clone());
                std::thread::spawn(move || {
                    let _p = adm.acquire(e, None).unwrap();
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(hold);
                    now.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        peak.load(Ordering::SeqCst)
    }

    #[test]
    fn concurrency_limit() {
        let adm = Admission::new(3, None);
        assert_eq!(run_many(&adm, &[1; 10], Duration::from_millis(30)), 3);
        assert_eq!(adm.snapshot().running, 0);
    }

    #[test]
    fn memory_budget() {
        let adm = Admission::new(8, Some(1000));
        assert_eq!(run_many(&adm, &[300; 9], Duration::from_millis(30)), 3);
        // Too big for the budget: runs, but alone.
        let adm = Admission::new(8, Some(1000));
        let big = adm.acquire(5000, None).unwrap();
        let a2 = adm.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            let _p = a2.acquire(10, None).unwrap();
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(big);
        assert!(t.join().unwrap() >= Duration::from_millis(90));
    }

    #[test]
    fn alone_means_alone() {
        let adm = Admission::new(4, None);
        let first = adm.acquire(1, None).unwrap();
        let a2 = adm.clone();
        let alone = std::thread::spawn(move || a2.acquire_alone(1, None).unwrap());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            adm.snapshot().running,
            1,
            "the alone compile waits for the running one"
        );
        drop(first);
        let permit = alone.join().unwrap();
        let a3 = adm.clone();
        let later = std::thread::spawn(move || a3.acquire(1, None).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            adm.snapshot().running,
            1,
            "nothing else starts while it runs"
        );
        drop(permit);
        assert!(later.join().unwrap());
    }

    #[test]
    fn cancelled_waiters_leave_the_queue() {
        let adm = Admission::new(1, None);
        let held = adm.acquire(1, None).unwrap();
        let cancel = Cancel::new();
        let (a2, c2) = (adm.clone(), cancel.clone());
        let t = std::thread::spawn(move || a2.acquire(1, Some(&c2)).is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(adm.snapshot().queued, 1);
        cancel.cancel();
        assert!(t.join().unwrap());
        assert_eq!(adm.snapshot().queued, 0);
        drop(held);
    }
}
