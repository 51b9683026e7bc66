//! One lease, from acceptance to its report: the action runs in a thread while this one tells
//! the server every [`KEEPALIVE`] that the bot is alive, and listens to the answer — a lease
//! the server cancelled (`CancelOperation`, its own timeout) or no longer gives this bot ends the
//! running compile at once. What is reported: `COMPLETED` with the action's status and result;
//! `CANCELLED` (the bot's acknowledgement) for a lease the server cancelled; `COMPLETED` with
//! `UNAVAILABLE` for one the worker ended while stopping (the server gives it to another
//! worker); nothing for a lease the server took away.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;

use super::job;
use super::status::Refusal;
use super::Worker;
use crate::bots::{BotSession, Lease, LeaseState};
use crate::client::Remote;
use crate::run::process::Cancel;

/// How often a bot with a running lease tells the server it is alive.
pub const KEEPALIVE: Duration = Duration::from_secs(2);

/// How long one keep-alive call may take.
const KEEPALIVE_DEADLINE: Duration = Duration::from_secs(5);

/// Why a running lease was ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Ended {
    /// It was not.
    No = 0,
    /// The server cancelled it.
    ByServer = 1,
    /// The server no longer gives it to this bot.
    Lost = 2,
    /// The worker is stopping and its drain time ran out.
    Drained = 3,
}

/// A lease running on this worker: how to end it, and why it was.
#[derive(Debug)]
pub struct Running {
    /// Ends the action (its downloads, its compile).
    pub cancel: Cancel,
    why: AtomicU8,
}

impl Running {
    /// End the lease for `why` (the first reason stays).
    pub fn end(&self, why: Ended) {
        let _ = self
            .why
            .compare_exchange(0, why as u8, Ordering::SeqCst, Ordering::SeqCst);
        self.cancel.cancel();
    }

    fn why(&self) -> Ended {
        match self.why.load(Ordering::SeqCst) {
            1 => Ended::ByServer,
            2 => Ended::Lost,
            3 => Ended::Drained,
            _ => Ended::No,
        }
    }
}

/// Run a lease while keeping the session alive; the lease as it is reported back, or `None`
/// when the server took it away.
pub fn run(
    w: &Worker,
    remote: &Remote,
    bot_id: &str,
    session: BotSession,
    lease: Lease,
) -> Option<Lease> {
    let running = Arc::new(Running {
        cancel: Cancel::new(),
        why: AtomicU8::new(0),
    });
    w.running_leases().insert(lease.id.clone(), running.clone());
    if w.draining_past_deadline() {
        running.end(Ended::Drained);
    }
    let finished = std::sync::atomic::AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let r = job::run(w, remote, bot_id, &lease, &running.cancel);
            finished.store(true, Ordering::SeqCst);
            r
        });
        let mut last = Instant::now();
        while !finished.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() >= KEEPALIVE {
                last = Instant::now();
                keep_alive(w, remote, bot_id, &session, &lease, &running);
            }
        }
        h.join()
    });
    w.running_leases().remove(&lease.id);
    let outcome = match result {
        Ok(r) => r,
        Err(_) => Err(Refusal::Internal(
            "the worker failed while running the action".into(),
        )),
    };
    report(lease, running.why(), outcome)
}

/// Tell the server the bot is alive; end the lease when the answer says it is cancelled or
/// gone. A failed call changes nothing (the server may be restarting).
fn keep_alive(
    w: &Worker,
    remote: &Remote,
    bot_id: &str,
    session: &BotSession,
    lease: &Lease,
    running: &Running,
) {
    let mut s = session.clone();
    let mut active = lease.clone();
    active.state = LeaseState::Active as i32;
    s.leases = vec![active];
    let Ok(answer) = remote.update_bot_session(s, KEEPALIVE_DEADLINE) else {
        return;
    };
    let why = match answer.leases.iter().find(|l| l.id == lease.id) {
        Some(l) if l.state == LeaseState::Cancelled as i32 => Ended::ByServer,
        Some(_) => return,
        None => Ended::Lost,
    };
    if running.why() == Ended::No {
        w.say(&format!(
            "{bot_id}: lease {} {}; ending its compile",
            lease.id,
            match why {
                Ended::ByServer => "was cancelled by the server",
                _ => "is no longer this bot's",
            }
        ));
    }
    running.end(why);
}

/// The lease to report for `outcome`, ended (or not) for `why`.
fn report(lease: Lease, why: Ended, outcome: Result<job::Ran, Refusal>) -> Option<Lease> {
    let mut done = lease;
    let (status, result) = match (why, outcome) {
        (Ended::Lost, _) => return None,
        (Ended::ByServer, _) => {
            done.state = LeaseState::Cancelled as i32;
            (
                Refusal::Cancelled("the server cancelled the lease".into()).status(),
                None,
            )
        }
        (Ended::Drained, Err(_)) => (
            Refusal::Unavailable("the worker stopped before the action finished".into()).status(),
            None,
        ),
        (_, Ok(ran)) => (ran.status, Some(ran.result)),
        (_, Err(refusal)) => (refusal.status(), None),
    };
    if done.state != LeaseState::Cancelled as i32 {
        done.state = LeaseState::Completed as i32;
    }
    done.status = Some(status);
    done.result = result.map(|r| bazel_remote_apis::google::protobuf::Any {
        type_url: "type.googleapis.com/build.bazel.remote.execution.v2.ActionResult".into(),
        value: r.encode_to_vec(),
    });
    Some(done)
}
