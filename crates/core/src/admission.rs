//! Admission control for many compiles at once (spec 07-cache-parallel.md, 06-daemon.md): the one
//! policy that decides when a waiting compile starts, used by `parallel-compile` and the daemon.
//!
//! At most `max` compiles run at a time and, with a memory budget, a compile starts only while
//! the estimated peak memory of the running compiles plus its own fits. A compile whose estimate
//! exceeds the whole budget starts when nothing else runs (it could never fit otherwise). A
//! compile can also ask to run *alone* (the F137 retry rule: nothing else is admitted while it
//! runs).
//!
//! Order and backfilling ([`Schedule::admit`]): compiles wait in a queue (arrival order; a retry
//! can go first). The head starts as soon as it fits. While it does not, a later compile that
//! fits starts beside the running ones (*backfilling*: a small compile is not held behind a large
//! one). So that the head is not starved by a stream of small compiles, it gets a reservation
//! once it has waited as long as the longest compile that was running when it became the head —
//! once every one of those has ended: from then on nothing passes it, the running compiles drain
//! until it fits, and it starts. A head therefore starts at most two compile durations after it
//! became the head. The rule needs no clock and no duration estimate: it moves only on arrivals
//! and ends, which is what makes it testable as a discrete-event model.
//!
//! [`Schedule`] is the policy as plain data (no threads, no time): `parallel-compile`'s
//! dispatcher drives it itself, handing what it admits to its `--jobs` worker threads;
//! [`Admission`] wraps it for threads that block until their compile may start (`Mutex` +
//! `Condvar`; the daemon and `nxcc worker` call it from their blocking threads).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::run::process::Cancel;

/// What a compile asks of admission control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Estimated peak memory, bytes.
    pub bytes: u64,
    /// Run with nothing else beside it.
    pub alone: bool,
}

/// A place in the queue (or, once started, among the running compiles).
pub type Id = u64;

#[derive(Debug, Clone)]
struct Waiting {
    id: Id,
    req: Request,
    /// Set when it is first the head and cannot start: the compiles running then. It has a
    /// reservation once all of them have ended (the set is empty).
    blockers: Option<BTreeSet<Id>>,
}

/// The admission policy as data: a queue, the running compiles and the rule that moves the one to
/// the other (see the module documentation). No threads and no clock: every change is a call.
#[derive(Debug, Clone)]
pub struct Schedule {
    max: usize,
    budget: Option<u64>,
    running: BTreeMap<Id, Request>,
    in_use: u64,
    exclusive: bool,
    queue: VecDeque<Waiting>,
    next_id: Id,
}

/// What is running and waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// Compiles holding a place now.
    pub running: usize,
    /// Compiles waiting for a place.
    pub queued: usize,
    /// Sum of the running compiles' estimates, bytes.
    pub memory_in_use: u64,
    /// The memory budget, bytes (`None`: no budget).
    pub memory_budget: Option<u64>,
    /// How many compiles may run at once.
    pub max_concurrent: usize,
}

impl Schedule {
    /// `max` compiles at once (at least 1); `budget` bytes of estimated peak memory, if any.
    pub fn new(max: usize, budget: Option<u64>) -> Schedule {
        Schedule {
            max: max.max(1),
            budget,
            running: BTreeMap::new(),
            in_use: 0,
            exclusive: false,
            queue: VecDeque::new(),
            next_id: 0,
        }
    }

    fn push(&mut self, req: Request, front: bool) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        let w = Waiting {
            id,
            req,
            blockers: None,
        };
        if front {
            self.queue.push_front(w);
        } else {
            self.queue.push_back(w);
        }
        id
    }

    /// Queue a compile behind every waiting one.
    pub fn push_back(&mut self, req: Request) -> Id {
        self.push(req, false)
    }

    /// Queue a compile ahead of every waiting one (a retry).
    pub fn push_front(&mut self, req: Request) -> Id {
        self.push(req, true)
    }

    /// Take a waiting compile out of the queue (cancelled); `false` if it was not waiting.
    pub fn withdraw(&mut self, id: Id) -> bool {
        let before = self.queue.len();
        self.queue.retain(|w| w.id != id);
        self.queue.len() != before
    }

    /// A running compile ended; `false` if it was not running.
    pub fn finish(&mut self, id: Id) -> bool {
        let Some(req) = self.running.remove(&id) else {
            return false;
        };
        self.in_use -= req.bytes;
        if req.alone {
            self.exclusive = false;
        }
        for w in &mut self.queue {
            if let Some(b) = &mut w.blockers {
                b.remove(&id);
            }
        }
        true
    }

    /// Whether `req` may start now, whatever waits: below the concurrency limit, nothing running
    /// alone, alone only when nothing runs, and within the budget (or nothing runs).
    pub(crate) fn fits(&self, req: &Request) -> bool {
        let fits_memory = match self.budget {
            Some(b) => self.running.is_empty() || self.in_use.saturating_add(req.bytes) <= b,
            None => true,
        };
        !self.exclusive
            && self.running.len() < self.max
            && fits_memory
            && (!req.alone || self.running.is_empty())
    }

    /// Whether the head of the queue holds a reservation: it has waited out every compile that was
    /// running when it became the head, and nothing passes it any more.
    #[cfg(test)]
    pub(crate) fn head_reserved(&self) -> bool {
        self.queue
            .front()
            .and_then(|w| w.blockers.as_ref())
            .is_some_and(|b| b.is_empty())
    }

    /// Start every waiting compile the rule lets start now, in queue order; returns their ids.
    /// Call it after every change (a push, a withdrawal, an end).
    pub fn admit(&mut self) -> Vec<Id> {
        let mut started = Vec::new();
        let mut i = 0;
        while i < self.queue.len() {
            let req = self.queue[i].req;
            if self.fits(&req) {
                let w = self.queue.remove(i).expect("index in range");
                self.running.insert(w.id, w.req);
                self.in_use += w.req.bytes;
                self.exclusive = w.req.alone;
                started.push(w.id);
                continue;
            }
            if i == 0 {
                let running = &self.running;
                let blockers = self.queue[0]
                    .blockers
                    .get_or_insert_with(|| running.keys().copied().collect());
                if blockers.is_empty() {
                    break;
                }
            }
            i += 1;
        }
        started
    }

    /// Whether the compile `id` holds a place.
    pub fn is_running(&self, id: Id) -> bool {
        self.running.contains_key(&id)
    }

    /// What is running and waiting, as counts.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            running: self.running.len(),
            queued: self.queue.len(),
            memory_in_use: self.in_use,
            memory_budget: self.budget,
            max_concurrent: self.max,
        }
    }
}

/// How often a waiting thread looks at its [`Cancel`] (a cancellation does not notify the
/// condition variable).
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// The admission controller for threads (shared by `Arc`): a [`Schedule`] behind a lock, and a
/// condition variable that wakes the waiting threads when compiles start or end.
#[derive(Debug)]
pub struct Admission {
    state: Mutex<Schedule>,
    cv: Condvar,
}

/// A place in the queue, held by the thread that will wait for it ([`Ticket::wait`]); dropped
/// unused, it leaves the queue (or gives back the place it was granted).
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    id: Id,
    live: bool,
}

/// A running compile's place; released when dropped.
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
    id: Id,
}

impl Admission {
    /// `max` compiles at once (at least 1); `budget` bytes of estimated peak memory, if any.
    pub fn new(max: usize, budget: Option<u64>) -> Arc<Admission> {
        Arc::new(Admission {
            state: Mutex::new(Schedule::new(max, budget)),
            cv: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Schedule> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run the rule and wake the waiting threads if anything started.
    fn admit(&self, s: &mut Schedule) {
        if !s.admit().is_empty() {
            self.cv.notify_all();
        }
    }

    /// Take a place in the queue now (behind the waiting compiles, or ahead of them with
    /// `first`); wait for it with [`Ticket::wait`].
    pub(crate) fn enqueue(self: &Arc<Self>, req: Request, first: bool) -> Ticket {
        let mut s = self.lock();
        let id = if first {
            s.push_front(req)
        } else {
            s.push_back(req)
        };
        self.admit(&mut s);
        Ticket {
            admission: self.clone(),
            id,
            live: true,
        }
    }

    /// Wait for a place for a compile estimated at `bytes`; `None` if cancelled while waiting.
    pub fn acquire(self: &Arc<Self>, bytes: u64, cancel: Option<&Cancel>) -> Option<Permit> {
        self.enqueue(
            Request {
                bytes,
                alone: false,
            },
            false,
        )
        .wait(cancel)
    }

    /// What is running and waiting now.
    pub fn snapshot(&self) -> Snapshot {
        self.lock().snapshot()
    }
}

impl Ticket {
    /// Block until the compile may start; `None` if `cancel` is cancelled first (it then leaves
    /// the queue).
    pub fn wait(mut self, cancel: Option<&Cancel>) -> Option<Permit> {
        let adm = self.admission.clone();
        let mut s = adm.lock();
        loop {
            if s.is_running(self.id) {
                self.live = false;
                return Some(Permit {
                    admission: adm.clone(),
                    id: self.id,
                });
            }
            if cancel.is_some_and(|c| c.is_cancelled()) {
                // Dropping the ticket withdraws it.
                drop(s);
                return None;
            }
            s = adm
                .cv
                .wait_timeout(s, CANCEL_POLL)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.live {
            let mut s = self.admission.lock();
            if !s.withdraw(self.id) {
                s.finish(self.id);
            }
            self.admission.admit(&mut s);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut s = self.admission.lock();
        s.finish(self.id);
        self.admission.admit(&mut s);
        // Waiters of a compile that ended without anything starting still look again.
        self.admission.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn req(bytes: u64) -> Request {
        Request {
            bytes,
            alone: false,
        }
    }

    #[test]
    fn concurrency_limit() {
        let mut s = Schedule::new(3, None);
        let ids: Vec<Id> = (0..10).map(|_| s.push_back(req(1))).collect();
        assert_eq!(s.admit(), ids[..3]);
        assert_eq!(s.snapshot().queued, 7);
        assert!(s.finish(ids[1]));
        assert_eq!(s.admit(), [ids[3]], "one ends, the next in order starts");
        assert!(!s.finish(ids[1]), "an ended compile ends once");
    }

    #[test]
    fn memory_budget() {
        let mut s = Schedule::new(8, Some(1000));
        let ids: Vec<Id> = (0..9).map(|_| s.push_back(req(300))).collect();
        assert_eq!(s.admit(), ids[..3], "three fit in 1000");
        assert_eq!(s.snapshot().memory_in_use, 900);
        // Too big for the budget: runs, but only when nothing else does.
        let mut s = Schedule::new(8, Some(1000));
        let big = s.push_back(req(5000));
        let small = s.push_back(req(10));
        assert_eq!(s.admit(), [big]);
        assert!(
            s.admit().is_empty(),
            "nothing fits beside the too-big compile"
        );
        s.finish(big);
        assert_eq!(s.admit(), [small]);
    }

    #[test]
    fn a_compile_that_fits_passes_a_larger_head() {
        // 650 MiB: a 352 MiB compile runs; the next 352 does not fit, a 260 does.
        let mut s = Schedule::new(4, Some(650 * MIB));
        let a = s.push_back(req(352 * MIB));
        let b = s.push_back(req(352 * MIB));
        let c = s.push_back(req(260 * MIB));
        assert_eq!(s.admit(), [a, c]);
        assert!(
            !s.head_reserved(),
            "the head has not waited out the compile running before it"
        );
        s.finish(c);
        let d = s.push_back(req(200 * MIB));
        assert_eq!(
            s.admit(),
            [d],
            "still backfilling while the first compile runs"
        );
        // The compile the head waited behind ends: the head fits and starts.
        s.finish(a);
        assert_eq!(s.admit(), [b]);
    }

    #[test]
    fn the_head_gets_a_reservation_once_its_blockers_end() {
        let mut s = Schedule::new(4, Some(650 * MIB));
        let a = s.push_back(req(300 * MIB));
        let b = s.push_back(req(300 * MIB));
        let head = s.push_back(req(500 * MIB));
        assert_eq!(s.admit(), [a, b]);
        let small = s.push_back(req(100 * MIB));
        assert!(s.admit().is_empty(), "100 + 600 > 650");
        s.finish(a);
        // The head (500) does not fit beside b (300); small does, and the head still waits for b.
        assert_eq!(s.admit(), [small]);
        s.finish(b);
        // b has ended: the head fits beside `small` (600 <= 650) and starts.
        assert_eq!(s.admit(), [head]);

        // Now one where the backfilled compile is still in the way when the reservation begins.
        let mut s = Schedule::new(4, Some(650 * MIB));
        let a = s.push_back(req(400 * MIB));
        let head = s.push_back(req(500 * MIB));
        assert_eq!(s.admit(), [a]);
        let fill = s.push_back(req(200 * MIB));
        assert_eq!(s.admit(), [fill]);
        s.finish(a);
        assert!(s.admit().is_empty(), "500 + 200 > 650");
        assert!(s.head_reserved());
        let late = s.push_back(req(100 * MIB));
        assert!(s.fits(&req(100 * MIB)));
        assert!(s.admit().is_empty(), "nothing passes a reserved head");
        s.finish(fill);
        assert_eq!(s.admit(), [head, late]);
    }

    #[test]
    fn alone_means_alone() {
        let mut s = Schedule::new(4, None);
        let first = s.push_back(req(1));
        assert_eq!(s.admit(), [first]);
        let alone = s.push_back(Request {
            bytes: 1,
            alone: true,
        });
        assert!(
            s.admit().is_empty(),
            "the alone compile waits for the running one"
        );
        // The running one was there when the alone compile became the head, so a later one may
        // still pass until it ends...
        let passer = s.push_back(req(1));
        assert_eq!(s.admit(), [passer]);
        s.finish(first);
        // ... and then nothing passes it.
        let later = s.push_back(req(1));
        assert!(s.admit().is_empty());
        s.finish(passer);
        assert_eq!(s.admit(), [alone]);
        assert!(s.admit().is_empty(), "nothing else starts while it runs");
        assert!(!s.fits(&req(1)));
        s.finish(alone);
        assert_eq!(s.admit(), [later]);
    }

    #[test]
    fn a_withdrawn_compile_leaves_the_queue() {
        let mut s = Schedule::new(1, None);
        let held = s.push_back(req(1));
        let waiting = s.push_back(req(1));
        assert_eq!(s.admit(), [held]);
        assert!(s.withdraw(waiting));
        assert!(!s.withdraw(waiting));
        assert_eq!(s.snapshot().queued, 0);
        s.finish(held);
        assert!(s.admit().is_empty());
    }

    // The threaded wrapper: the queue is joined synchronously (`enqueue`), places are granted when
    // a permit drops, so each step is an explicit event.

    #[test]
    fn permits_are_granted_as_permits_drop() {
        let adm = Admission::new(2, Some(1000));
        let p1 = adm.acquire(600, None).unwrap();
        let big = adm.enqueue(req(600), false);
        let small = adm.enqueue(req(300), false);
        assert_eq!(
            adm.snapshot().running,
            2,
            "the small one passed the big one"
        );
        let p_small = small.wait(None).unwrap();
        assert_eq!(adm.snapshot().queued, 1);
        drop(p1);
        // The big one was granted when p1 dropped: 600 + 300 <= 1000.
        assert_eq!(adm.snapshot().running, 2);
        let p_big = big.wait(None).unwrap();
        drop((p_small, p_big));
        assert_eq!(adm.snapshot(), Schedule::new(2, Some(1000)).snapshot());
    }

    #[test]
    fn a_blocked_thread_wakes_when_a_place_frees() {
        let adm = Admission::new(1, None);
        let held = adm.acquire(1, None).unwrap();
        let ticket = adm.enqueue(req(1), false);
        let t = std::thread::spawn(move || ticket.wait(None).is_some());
        drop(held);
        assert!(t.join().unwrap());
        assert_eq!(adm.snapshot().running, 0);
    }

    #[test]
    fn cancelled_waiters_leave_the_queue() {
        let adm = Admission::new(1, None);
        let held = adm.acquire(1, None).unwrap();
        let cancel = Cancel::new();
        let ticket = adm.enqueue(req(1), false);
        assert_eq!(adm.snapshot().queued, 1);
        let c2 = cancel.clone();
        let t = std::thread::spawn(move || ticket.wait(Some(&c2)).is_none());
        cancel.cancel();
        assert!(t.join().unwrap());
        assert_eq!(adm.snapshot().queued, 0);
        drop(held);
        assert_eq!(adm.snapshot().running, 0);
    }

    #[test]
    fn an_unused_ticket_gives_back_its_place() {
        let adm = Admission::new(1, None);
        let granted = adm.enqueue(req(1), false);
        let next = adm.enqueue(req(1), false);
        assert_eq!(adm.snapshot().running, 1);
        drop(granted);
        assert_eq!(adm.snapshot().running, 1, "the next one took the place");
        assert!(next.wait(None).is_some());
    }

    // A discrete-event model: compiles arrive at given times and run for given durations; time
    // moves from event to event, and after each batch of events the schedule admits.

    #[derive(Debug, Clone)]
    struct Job {
        arrive: u64,
        dur: u64,
        req: Request,
    }

    struct Run {
        start: Vec<u64>,
        end: Vec<u64>,
    }

    /// Check the invariants after each admission step; returns when everything ended.
    fn simulate(max: usize, budget: Option<u64>, jobs: &[Job]) -> Result<Run, TestCaseError> {
        let mut s = Schedule::new(max, budget);
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&i| (jobs[i].arrive, i));
        let mut arrivals = order.into_iter().peekable();
        let mut job_of: BTreeMap<Id, usize> = BTreeMap::new();
        let mut ends: BTreeMap<Id, u64> = BTreeMap::new();
        let mut start = vec![u64::MAX; jobs.len()];
        let mut end = vec![u64::MAX; jobs.len()];
        let mut head_since: BTreeMap<Id, u64> = BTreeMap::new();
        let longest = jobs.iter().map(|j| j.dur).max().unwrap_or(0);
        let mut now = 0u64;
        loop {
            let next_arrival = arrivals.peek().map(|&i| jobs[i].arrive);
            let next_end = ends.values().min().copied();
            now = match (next_arrival, next_end) {
                (None, None) => break,
                (a, e) => a.unwrap_or(u64::MAX).min(e.unwrap_or(u64::MAX)),
            };
            let ended: Vec<Id> = ends
                .iter()
                .filter(|(_, &t)| t == now)
                .map(|(&id, _)| id)
                .collect();
            for id in ended {
                ends.remove(&id);
                prop_assert!(s.finish(id));
                end[job_of[&id]] = now;
            }
            while arrivals.peek().is_some_and(|&i| jobs[i].arrive == now) {
                let i = arrivals.next().unwrap();
                job_of.insert(s.push_back(jobs[i].req), i);
            }
            for id in s.admit() {
                let i = job_of[&id];
                start[i] = now;
                ends.insert(id, now + jobs[i].dur);
            }
            check(&s, budget)?;
            if let Some(h) = s.queue.front() {
                head_since.entry(h.id).or_insert(now);
            }
        }
        prop_assert!(s.queue.is_empty(), "compiles left waiting: {:?}", s.queue);
        prop_assert_eq!(s.snapshot().running, 0);
        // No starvation: a head starts within two of the longest durations.
        for (id, since) in head_since {
            let i = job_of[&id];
            prop_assert!(
                start[i] <= since + 2 * longest,
                "compile {i} head at {since}, started at {}",
                start[i]
            );
        }
        let _ = now;
        Ok(Run { start, end })
    }

    /// The state after an admission step.
    fn check(s: &Schedule, budget: Option<u64>) -> Result<(), TestCaseError> {
        let snap = s.snapshot();
        prop_assert!(snap.running <= snap.max_concurrent);
        if let Some(b) = budget {
            prop_assert!(
                snap.memory_in_use <= b || snap.running == 1,
                "{} in use of {b} by {} compiles",
                snap.memory_in_use,
                snap.running
            );
        }
        if s.running.values().any(|r| r.alone) {
            prop_assert_eq!(snap.running, 1, "an alone compile runs alone");
        }
        // A compile that fits waits only behind a reserved head it would delay.
        for (pos, w) in s.queue.iter().enumerate() {
            if s.fits(&w.req) {
                prop_assert!(
                    pos > 0 && s.head_reserved(),
                    "compile at {pos} fits and waits ({:?})",
                    s.queue
                );
            }
        }
        Ok(())
    }

    fn jobs_strategy() -> impl Strategy<Value = Vec<Job>> {
        proptest::collection::vec(
            (
                0u64..50,
                1u64..40,
                1u64..1200,
                proptest::bool::weighted(0.1),
            ),
            1..40,
        )
        .prop_map(|v| {
            v.into_iter()
                .map(|(arrive, dur, bytes, alone)| Job {
                    arrive,
                    dur,
                    req: Request { bytes, alone },
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn budget_kept_everything_starts_nothing_held_needlessly(
            max in 1usize..5,
            budget in proptest::option::weighted(0.8, 100u64..2000),
            jobs in jobs_strategy(),
        ) {
            let run = simulate(max, budget, &jobs)?;
            // Intervals, checked afresh: at every start, the estimates overlapping it fit.
            for (i, j) in jobs.iter().enumerate() {
                prop_assert!(run.start[i] >= j.arrive);
                prop_assert_eq!(run.end[i], run.start[i] + j.dur);
                let overlapping: Vec<usize> = (0..jobs.len())
                    .filter(|&k| run.start[k] <= run.start[i] && run.start[i] < run.end[k])
                    .collect();
                prop_assert!(overlapping.len() <= max);
                if let Some(b) = budget {
                    let sum: u64 = overlapping.iter().map(|&k| jobs[k].req.bytes).sum();
                    prop_assert!(sum <= b || overlapping.len() == 1);
                }
            }
        }

        #[test]
        fn without_a_budget_compiles_start_in_arrival_order(
            max in 1usize..5,
            jobs in jobs_strategy(),
        ) {
            let jobs: Vec<Job> = jobs
                .into_iter()
                .map(|j| Job { req: Request { alone: false, ..j.req }, ..j })
                .collect();
            let run = simulate(max, None, &jobs)?;
            let mut order: Vec<usize> = (0..jobs.len()).collect();
            order.sort_by_key(|&i| (jobs[i].arrive, i));
            for w in order.windows(2) {
                prop_assert!(run.start[w[0]] <= run.start[w[1]]);
            }
        }
    }

    #[test]
    fn a_stream_of_small_compiles_does_not_starve_a_large_one() {
        // One large compile among small ones arriving without end: it starts within two of the
        // longest durations of becoming the head (checked by `simulate`), and does start.
        let mut jobs = vec![Job {
            arrive: 0,
            dur: 10,
            req: req(600),
        }];
        jobs.push(Job {
            arrive: 0,
            dur: 10,
            req: req(600),
        });
        for t in 0..400 {
            jobs.push(Job {
                arrive: t,
                dur: 3,
                req: req(100),
            });
        }
        let run = simulate(4, Some(1000), &jobs).unwrap();
        assert!(
            run.start[1] < 30,
            "the second large compile started at {}",
            run.start[1]
        );
    }
}
