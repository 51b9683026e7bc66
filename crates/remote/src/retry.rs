//! Trying a failed remote call again: which gRPC codes are worth another try — the ones Bazel's
//! `RemoteRetrier` retries: `UNAVAILABLE`, `RESOURCE_EXHAUSTED`, `DEADLINE_EXCEEDED`, `ABORTED`,
//! `INTERNAL`, `UNKNOWN` — and the pauses between tries: exponential from
//! [`FIRST_PAUSE`], doubling up to [`MAX_PAUSE`], each moved by up to ±[`JITTER_PERCENT`] % at
//! random (so that a fleet's clients do not come back in step after a server restart), all within
//! a budget (`NXCC_REMOTE_RETRY_TIMEOUT`): a call's tries and pauses within a deadline
//! ([`Backoff::pause`]; an operation's news starts it again, [`Backoff::reset`]); a transfer's
//! (a download's, an upload's) time spent failing — each pause, and each attempt's time since it
//! last moved at the minimum rate — summed over every attempt and never given back
//! ([`Backoff::pause_after`]), so a server that trickles, or stalls after each burst, cannot
//! hold a transfer past the budget plus one idle timeout.

use std::time::{Duration, Instant};

/// The first pause.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause.
pub const MAX_PAUSE: Duration = Duration::from_secs(5);

/// How far a pause moves at random, in percent of it.
pub const JITTER_PERCENT: u64 = 20;

/// Whether a call that failed with `code` may be tried again.
pub fn retriable(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        Unavailable | ResourceExhausted | DeadlineExceeded | Aborted | Internal | Unknown
    )
}

/// Whether a call that failed with `status` may be tried again: its code is one of those
/// ([`retriable`]), or it is a `CANCELLED` the transport made (the connection closed under the
/// call, as when the server restarts) rather than one the server sent.
pub fn worth_retrying(status: &tonic::Status) -> bool {
    retriable(status.code())
        || (status.code() == tonic::Code::Cancelled && std::error::Error::source(status).is_some())
}

/// The pauses of one call's tries, within a budget.
#[derive(Debug)]
pub struct Backoff {
    began: Instant,
    start: Instant,
    budget: Duration,
    spent: Duration,
    next: Duration,
    tries: u32,
    rng: u64,
}

impl Backoff {
    /// Pauses for a call that may be tried again for `budget` in all.
    pub fn new(budget: Duration) -> Backoff {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ ((std::process::id() as u64) << 32)
            ^ (&budget as *const Duration as u64);
        let now = Instant::now();
        Backoff {
            began: now,
            start: now,
            budget,
            spent: Duration::ZERO,
            next: FIRST_PAUSE,
            tries: 0,
            rng: seed | 1,
        }
    }

    /// The next pause, doubled for the one after.
    fn next_pause(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(MAX_PAUSE);
        let span = base.as_millis() as u64 * JITTER_PERCENT / 100;
        let r = self.random() % (2 * span + 1);
        base + Duration::from_millis(r) - Duration::from_millis(span)
    }

    /// The pause before the next try of a call, or `None` when its deadline (the budget from
    /// the first try, or from the last [`Backoff::reset`]) does not leave room for one.
    pub fn pause(&mut self) -> Option<Duration> {
        let pause = self.next_pause();
        if self.start.elapsed() + pause > self.budget {
            return None;
        }
        self.tries += 1;
        Some(pause)
    }

    /// The pause before the next attempt of a transfer whose last attempt spent `failing`
    /// without moving at the minimum rate, or `None` when the time spent failing, that and the
    /// pause counted, would pass the budget. Nothing given back, ever.
    pub fn pause_after(&mut self, failing: Duration) -> Option<Duration> {
        self.spent += failing;
        let pause = self.next_pause();
        if self.spent + pause > self.budget {
            return None;
        }
        self.spent += pause;
        self.tries += 1;
        Some(pause)
    }

    /// News of an operation: its pauses, and its deadline, start again ([`Backoff::pause`]).
    pub fn reset(&mut self) {
        self.start = Instant::now();
        self.next = FIRST_PAUSE;
    }

    /// How many pauses were given (tries after the first).
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// The time since the first try.
    pub fn elapsed(&self) -> Duration {
        self.began.elapsed()
    }

    fn random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_bazel_retries() {
        use tonic::Code::*;
        for c in [
            Unavailable,
            ResourceExhausted,
            DeadlineExceeded,
            Aborted,
            Internal,
            Unknown,
        ] {
            assert!(retriable(c), "{c:?}");
        }
        for c in [
            Ok,
            Cancelled,
            InvalidArgument,
            NotFound,
            AlreadyExists,
            PermissionDenied,
            FailedPrecondition,
            OutOfRange,
            Unimplemented,
            DataLoss,
            Unauthenticated,
        ] {
            assert!(!retriable(c), "{c:?}");
        }
    }

    #[test]
    fn a_connection_closed_under_a_call_is_worth_another_try() {
        assert!(!worth_retrying(&tonic::Status::cancelled(
            "the server cancelled it"
        )));
        let closed =
            tonic::Status::from_error(Box::new(std::io::Error::other("connection closed")));
        let mut closed_by_transport = tonic::Status::cancelled("operation was canceled");
        closed_by_transport.set_source(std::sync::Arc::new(std::io::Error::other("closed")));
        assert!(worth_retrying(&closed_by_transport));
        assert_eq!(worth_retrying(&closed), retriable(closed.code()));
    }

    #[test]
    fn pauses_double_with_jitter_up_to_the_maximum() {
        let mut b = Backoff::new(Duration::from_secs(3600));
        let mut base = FIRST_PAUSE;
        for _ in 0..12 {
            let p = b.pause().unwrap();
            let span = base * JITTER_PERCENT as u32 / 100;
            assert!(
                p >= base - span && p <= base + span,
                "{p:?} around {base:?}"
            );
            base = (base * 2).min(MAX_PAUSE);
        }
        assert_eq!(b.tries(), 12);
        b.reset();
        assert!(b.pause().unwrap() <= FIRST_PAUSE + FIRST_PAUSE / 5);
    }

    #[test]
    fn a_transfer_spends_its_budget_failing_and_gets_nothing_back() {
        // Attempts that each fail after 2 s without progress: 2 + 0.1, 2 + 0.2 fit in 5 s; the
        // third does not, however the attempts went.
        let mut b = Backoff::new(Duration::from_secs(5));
        assert!(b.pause_after(Duration::from_secs(2)).is_some());
        assert!(b.pause_after(Duration::from_secs(2)).is_some());
        assert_eq!(b.pause_after(Duration::from_secs(2)), None);
        assert_eq!(b.tries(), 2);
        // Attempts that failed at once (a broken connection after healthy streaming) cost only
        // their pauses.
        let mut b = Backoff::new(Duration::from_secs(5));
        let mut n = 0;
        while b.pause_after(Duration::ZERO).is_some() {
            n += 1;
        }
        assert_eq!(
            n, 5,
            "100 + 200 + 400 + 800 + 1600 ms fit in 5 s, 3.2 s more does not"
        );
    }

    #[test]
    fn the_deadline_ends_the_pauses() {
        let mut b = Backoff::new(Duration::from_millis(50));
        assert_eq!(b.pause(), None, "a pause longer than the whole deadline");
        // Without time passing: 100, 200, 400 and 800 ms (±20 %) each fit in 1 s; 1.6 s does not.
        let mut b = Backoff::new(Duration::from_secs(1));
        while b.pause().is_some() {}
        assert_eq!(b.tries(), 4);
    }
}
