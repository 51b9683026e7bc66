//! The daemon's shared state: its configuration, engine, connection gate and admission control,
//! the registry of compiles (to cancel them), the activity clock of the inactivity timeout, the
//! counters of `GET /v1/status`, and the stop signal.
//!
//! `GET /v1/status` reads running counters (atomics, kept as compiles change phase and end) and
//! never scans the cache; the only lock it takes is admission control's, for a copy of a few
//! numbers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::config::Config;
use super::engine::{CacheUse, Engine};
use super::job::{self, Control, Emit, Ended, PhaseCounts};
use super::log::DaemonLog;
use super::peer::Gate;
pub use super::peer::Peer;
use super::wire;
use crate::admission::Admission;
use crate::result::{Failure, Status};

#[derive(Debug)]
struct Activity {
    /// Requests being answered (a streamed answer until its last byte).
    active: usize,
    last_finished: Instant,
}

/// Running counters of the compiles that ended.
#[derive(Debug, Default)]
struct Totals {
    compiles: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
}

/// The daemon's shared state.
pub struct Daemon {
    /// The daemon's command-line settings.
    pub config: Config,
    /// What runs the compiles.
    pub engine: Arc<dyn Engine>,
    /// Admission control shared by every compile.
    pub admission: Arc<Admission>,
    /// Who may connect, and how many at once.
    pub gate: Arc<Gate>,
    /// The daemon's log (stderr or `--log-file`).
    pub log: DaemonLog,
    /// The daemon's own uid (always served).
    pub uid: u32,
    /// Where it listens, as shown (a path, or `@name` for an abstract address).
    pub endpoint: String,
    started: Instant,
    activity: Mutex<Activity>,
    jobs: Mutex<BTreeMap<u64, Arc<Control>>>,
    /// Queued and running compiles, counted as they change phase.
    phases: Arc<PhaseCounts>,
    jobs_changed: Notify,
    next_job: AtomicU64,
    totals: Totals,
    /// `Some(reason)` once the daemon is stopping.
    stop: watch::Sender<Option<String>>,
    /// The fork server its compiles' workers are started by (set once at start-up; unset: every
    /// worker is re-executed).
    pub fork_server: std::sync::OnceLock<Arc<crate::forkserver::ForkServer>>,
    /// What it keeps between requests because it does not change.
    pub memo: super::memo::Memo,
}

/// Counts a request as active until dropped.
pub struct ActivityGuard {
    daemon: Arc<Daemon>,
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        let mut a = self.daemon.activity_lock();
        a.active -= 1;
        a.last_finished = Instant::now();
    }
}

impl Daemon {
    /// The state of a daemon about to serve.
    pub fn new(
        config: Config,
        engine: Arc<dyn Engine>,
        log: DaemonLog,
        uid: u32,
        endpoint: String,
    ) -> Arc<Daemon> {
        let (stop, _) = watch::channel(None);
        Arc::new(Daemon {
            admission: Admission::new(config.max_concurrent, config.memory_budget),
            gate: Gate::new(
                uid,
                &config.allow_uids,
                config.max_connections,
                config.max_connections_per_uid,
            ),
            uid,
            endpoint,
            started: Instant::now(),
            activity: Mutex::new(Activity {
                active: 0,
                last_finished: Instant::now(),
            }),
            jobs: Mutex::new(BTreeMap::new()),
            phases: Arc::default(),
            jobs_changed: Notify::new(),
            next_job: AtomicU64::new(1),
            totals: Totals::default(),
            stop,
            fork_server: std::sync::OnceLock::new(),
            memo: Default::default(),
            engine,
            log,
            config,
        })
    }

    /// A receiver of the stop signal (`Some(reason)` once stopping).
    pub fn stop_signal(&self) -> watch::Receiver<Option<String>> {
        self.stop.subscribe()
    }

    /// Whether the daemon is idle: no request being answered, no compile registered; if so, since
    /// when.
    pub fn idle_since(&self) -> Option<Instant> {
        let busy = !self.jobs_lock().is_empty();
        let a = self.activity_lock();
        (a.active == 0 && !busy).then_some(a.last_finished)
    }

    fn activity_lock(&self) -> std::sync::MutexGuard<'_, Activity> {
        self.activity.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn jobs_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Control>>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count a request as active for the inactivity timeout.
    pub fn activity(self: &Arc<Self>) -> ActivityGuard {
        self.activity_lock().active += 1;
        ActivityGuard {
            daemon: self.clone(),
        }
    }

    /// Whether the daemon is stopping (it takes no new compile).
    pub fn stopping(&self) -> bool {
        self.stop.borrow().is_some()
    }

    /// Begin stopping (idempotent: the first reason is kept).
    pub fn request_stop(&self, reason: &str) {
        let first = self.stop.send_if_modified(|s| {
            if s.is_none() {
                *s = Some(reason.to_string());
                true
            } else {
                false
            }
        });
        if first {
            self.log.info(&format!("stopping: {reason}"));
        }
    }

    /// Whether compile `id` is still registered (not finished).
    pub fn is_registered(&self, id: u64) -> bool {
        self.jobs_lock().contains_key(&id)
    }

    /// Start a compile on a blocking thread; `None` when the daemon is stopping.
    pub fn spawn_compile(
        self: &Arc<Self>,
        request: job::Request,
        emit: Arc<dyn Emit>,
        peer: &Peer,
        route: &str,
    ) -> Option<(u64, Arc<Control>, tokio::task::JoinHandle<Ended>)> {
        let control = Control::counted(self.phases.clone());
        let id = self.next_job.fetch_add(1, Ordering::SeqCst);
        {
            let mut jobs = self.jobs_lock();
            // Checked under the registry's lock: stopping cancels what it finds registered.
            if self.stopping() {
                return None;
            }
            jobs.insert(id, control.clone());
        }
        self.log.info(&format!(
            "compile #{id} ({route}, uid {}, pid {}) in {}: {}",
            peer.uid,
            peer.pid_text(),
            request.working_directory.display(),
            crate::shell::join(&request.argv)
        ));
        let daemon = self.clone();
        let c2 = control.clone();
        let handle = tokio::task::spawn_blocking(move || {
            let ctx = job::Context {
                engine: daemon.engine.as_ref(),
                admission: &daemon.admission,
                fork_server: daemon.fork_server.get(),
                memo: &daemon.memo,
            };
            let ended = job::run(&ctx, &request, &emit, &c2);
            daemon.finished(id, &ended);
            // The end goes out from here, without waiting for this thread to be joined.
            emit.done(&ended);
            drop(emit);
            ended
        });
        Some((id, control, handle))
    }

    fn finished(&self, id: u64, ended: &Ended) {
        let t = &self.totals;
        t.compiles.fetch_add(1, Ordering::Relaxed);
        let cancelled = ended.status.stopped();
        match &ended.status {
            Status::Interrupted(_) | Status::Cancelled(_) => {
                t.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            Status::Failed(_) => {
                t.failed.fetch_add(1, Ordering::Relaxed);
            }
            Status::Succeeded => {}
        }
        match ended.cache {
            CacheUse::Hit => t.cache_hits.fetch_add(1, Ordering::Relaxed),
            CacheUse::Miss => t.cache_misses.fetch_add(1, Ordering::Relaxed),
            CacheUse::Off => 0,
        };
        self.log.info(&format!(
            "compile #{id}: exit status {} in {:.3} s{}",
            ended.exit_status(),
            ended.wall.as_secs_f64(),
            if cancelled { " (cancelled)" } else { "" }
        ));
        self.jobs_lock().remove(&id);
        self.jobs_changed.notify_waiters();
    }

    /// Wait for a compile's end; a compile thread that panicked is reported as a failure.
    pub async fn join(handle: tokio::task::JoinHandle<Ended>) -> Ended {
        match handle.await {
            Ok(e) => e,
            Err(e) => Ended::early(
                Status::Failed(Failure::Internal),
                vec![format!(
                    "[ERROR] nxcc daemon: the compile ended unexpectedly: {e}"
                )],
                None,
            ),
        }
    }

    /// (running, queued) compiles (counters: no lock is taken).
    pub fn counts(&self) -> (usize, usize) {
        self.phases.get()
    }

    /// `GET /v1/status`: counters only (no scan of the cache; `nxcc cache stats` has its
    /// figures): this daemon's, and the cache directory's own ([`crate::cache::counters`]).
    pub fn status(&self) -> wire::DaemonStatus {
        let (running, queued) = self.counts();
        let snap = self.admission.snapshot();
        let t = &self.totals;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let cache = self.engine.cache_dir().map(|dir| wire::Cache {
            dir: dir.display().to_string(),
            hits: n(&t.cache_hits),
            misses: n(&t.cache_misses),
            // The directory's own counters, every process and host that uses it (16 small
            // files per host: no scan).
            counters: crate::cache::counters::read(&crate::cache::Cache::new(dir), None),
        });
        wire::DaemonStatus {
            version: crate::VERSION.to_string(),
            reproduces: crate::ORIGINAL_VERSION.to_string(),
            pid: std::process::id(),
            socket: self.endpoint.clone(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            running,
            queued,
            max_concurrent: snap.max_concurrent,
            memory: wire::Memory {
                budget: snap.memory_budget,
                in_use: snap.memory_in_use,
            },
            admission: Some(snap),
            compiles: wire::Compiles {
                finished: n(&t.compiles),
                failed: n(&t.failed),
                cancelled: n(&t.cancelled),
            },
            connections: wire::Connections {
                open: self.gate.open(self.uid).0,
                max: self.config.max_connections,
                max_per_uid: self.config.max_connections_per_uid,
            },
            engine: self.engine.describe(),
            fork_server: self.fork_server.get().map(|f| {
                let r = f.record();
                wire::ForkServer {
                    pid: f.helper_pid(),
                    restarts: f.restarts(),
                    workers_started: r.started,
                    workers_not_started: r.not_started,
                    last_not_started: r.last_not_started,
                }
            }),
            cache,
            inactivity_timeout_s: self.config.inactivity_timeout.map(|d| d.as_secs_f64()),
            stopping: self.stopping(),
        }
    }

    /// Cancel the compiles that have not started; returns how many.
    pub fn cancel_queued(&self) -> usize {
        self.jobs_lock()
            .values()
            .filter(|c| c.cancel_if_queued(libc::SIGTERM))
            .count()
    }

    /// Cancel every compile, as on SIGTERM; returns how many.
    pub fn cancel_all(&self) -> usize {
        let jobs = self.jobs_lock();
        for c in jobs.values() {
            c.cancel(libc::SIGTERM);
        }
        jobs.len()
    }

    /// Wait until no compile is registered, or `limit` passed; says whether none is left.
    pub async fn wait_for_compiles(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.jobs_changed.notified();
            if self.jobs_lock().is_empty() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.jobs_lock().is_empty();
            }
        }
    }
}
