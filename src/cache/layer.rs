//! The compile cache as a layer of the stack ([`LocalStore`], a
//! [`crate::engine::strategy::Layer`]): what `nxcc compile --cache_dir`, `parallel-compile` and
//! the daemon compile through.
//!
//! 0. Only a plan whose one product is the NEFF at `--output` uses the cache
//!    ([`crate::recon::cache::plan_is_cacheable`]); others compile as without it.
//! 1. The cache directory is checked first ([`Cache::check`]): one that others could write fails
//!    the compile (exit 70) with what to fix. Then the key is computed (the model read once,
//!    streaming), unless the caller has it.
//! 2. Without any lock, the key is looked up: a good entry is a *hit* — its NEFF is copied to
//!    `--output` (verified against its blake3 on the way), `Using a cached neff at {path}` is
//!    printed at USER level, nothing is run or laid out; a failed entry fails at once with its
//!    error lines and its failure (unless `--retry_failed_compilation`); a corrupt entry is
//!    evicted, with a warning, and compiled again.
//! 3. Otherwise the key's lock is taken (waiting for another compile of the same key), the key
//!    looked up again (the other compile's result is reused), and the rest of the stack runs.
//! 4. Before it runs, a temporary entry is made ([`Cache::begin`]); the compile writes its NEFF
//!    there itself (the product path) besides `--output`.
//! 5. The result is published: a success as `model.neff` (the file the compile wrote into the
//!    temporary entry, hashed there), `meta.json`, `log.txt`, and its peak memory in the
//!    estimate index; a failure the cache remembers ([`crate::recon::cache::remembers`]) as
//!    `failed.json` (its lines and its failure), `meta.json`, `log.txt`. A cache that cannot be
//!    written costs a warning, never the compile.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::config::{CacheConfig, CacheStatus};
use super::estimate;
use super::key::Key;
use super::meta::{
    self, Failed, Meta, NeffInfo, FAILED_FILE, LOG_FILE, META_FILE, NEFF_FILE, ORIGIN_FILE,
};
use super::store::{self, Cache, Lookup, ServeError};
use crate::cli::level;
use crate::engine::log;
use crate::engine::metrics;
use crate::engine::result::CompileResult;
use crate::engine::session::Session;
use crate::engine::strategy::{Layer, Strategy};
use crate::engine::Engine;
use crate::error::NccError;
use crate::result::{CancelReason, Environment, Failure, JobEnd, Status};

/// The local compile cache in front of the rest of the stack, for one compile: its
/// configuration, the engine its entries record, and — once the compile ran through it — what
/// it did ([`LocalStore::status`], [`LocalStore::key`], [`LocalStore::entry`]).
pub struct LocalStore<'a> {
    cfg: &'a CacheConfig,
    engine: &'a Engine,
    record: Mutex<Record>,
}

/// What the store did for the compile.
struct Record {
    status: CacheStatus,
    key: Option<Key>,
    entry: Option<PathBuf>,
}

impl<'a> LocalStore<'a> {
    /// The cache `cfg` says (off when it names no directory), for a compile on `engine`, with
    /// its key when the caller computed it already (by [`Key::compute`] for the same plan and
    /// engine, as a scheduler that estimated memory from it has).
    pub fn new(cfg: &'a CacheConfig, engine: &'a Engine, key: Option<Key>) -> LocalStore<'a> {
        LocalStore {
            cfg,
            engine,
            record: Mutex::new(Record {
                status: CacheStatus::Off,
                key,
                entry: None,
            }),
        }
    }

    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the cache served the compile, stored it, or was not used.
    pub fn status(&self) -> CacheStatus {
        self.record().status
    }

    /// The compile's key, when the cache was used.
    pub fn key(&self) -> Option<Key> {
        let r = self.record();
        (r.status != CacheStatus::Off)
            .then(|| r.key.clone())
            .flatten()
    }

    /// The entry served or published, if any.
    pub fn entry(&self) -> Option<PathBuf> {
        self.record().entry.clone()
    }

    /// Note what the store did.
    fn note(&self, status: CacheStatus, key: Option<&Key>, entry: Option<PathBuf>) {
        let mut r = self.record();
        r.status = status;
        if let Some(k) = key {
            r.key = Some(k.clone());
        }
        r.entry = entry;
    }
}

impl Layer for LocalStore<'_> {
    fn run(&self, session: &Session, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        let Some(cache) = self.cfg.cache() else {
            return next.run(session, product);
        };
        if let Err(u) = cache.check() {
            return session.fail(
                &NccError::unsafe_cache_dir(&u),
                Failure::Environment(Environment::CacheDir),
            );
        }
        let plan = session.plan();
        if !crate::recon::cache::plan_is_cacheable(&plan.pipeline) {
            session.log().info(
                log::DRIVER,
                "Compiling without the cache: the plan's product is not just the NEFF at --output",
            );
            return next.run(session, product);
        }
        let known = self.record().key.take();
        let key = match known
            .map(Ok)
            .unwrap_or_else(|| Key::compute(plan, self.engine))
        {
            Ok(k) => k,
            Err(e) => {
                warn(
                    session,
                    &format!(
                        "cannot compute the cache key of {} ({e}); compiling without the cache",
                        plan.model.display()
                    ),
                );
                return next.run(session, product);
            }
        };
        let visit = Visit {
            store: self,
            session,
            cache: &cache,
            key: &key,
        };
        visit.run(product, next)
    }
}

/// One compile's visit to the cache, once it is keyed.
struct Visit<'v, 's, 'a> {
    store: &'v LocalStore<'v>,
    session: &'v Session<'s>,
    cache: &'v Cache,
    key: &'a Key,
}

/// A warning the user sees at the default console level (and the log records).
fn warn(session: &Session, message: &str) {
    session
        .log()
        .log(log::DRIVER, level::USER, &format!("WARNING: {message}"));
}

impl Visit<'_, '_, '_> {
    /// Serve the key, or compile it under its lock and keep the result (see the module
    /// documentation).
    fn run(&self, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        let (session, cache, key) = (self.session, self.cache, &self.key.key);
        if let Some(done) = self.serve() {
            return done;
        }
        let lock = cache.lock(key, Some(session.cancel().flag()), &mut || {
            session.log().info(
                log::DRIVER,
                &format!(
                    "Waiting for another compile of the same model and arguments (lock {})",
                    cache.lock_path(key).display()
                ),
            )
        });
        let _lock = match lock {
            Ok(Some(l)) => {
                if let Some(why) = &l.replaced {
                    let what = format!("removed the cache lock {} ({why})", l.path.display());
                    warn(session, &what);
                }
                l
            }
            Ok(None) => {
                // Cancelled while waiting: nothing ran.
                self.store.note(CacheStatus::Miss, Some(self.key), None);
                let stopped = session.cancel().status();
                return session.result(stopped.unwrap_or(Status::Cancelled(CancelReason::Stopped)));
            }
            Err(e) => {
                let lock = cache.lock_path(key);
                warn(
                    session,
                    &format!(
                        "cannot lock the cache entry {} ({e}); compiling without the cache",
                        lock.display()
                    ),
                );
                return next.run(session, product);
            }
        };
        if let Some(done) = self.serve() {
            return done;
        }
        self.compile(next)
    }

    /// Compile into a temporary entry only this compile knows, and publish what it made: the
    /// entry is made from that file, never from `--output` (see the module documentation).
    fn compile(&self, next: &dyn Strategy) -> CompileResult {
        let (session, cache) = (self.session, self.cache);
        let log_start = std::fs::metadata(&session.plan().logfile)
            .map(|m| m.len())
            .unwrap_or(0);
        let pending = match cache.begin(&self.key.key) {
            Ok(p) => Some(p),
            Err(e) => {
                warn(
                    session,
                    &format!(
                        "cannot write to the cache {} ({e}); compiling without storing the result",
                        cache.dir().display()
                    ),
                );
                None
            }
        };
        let product = pending.as_ref().map(|p| p.path().join(NEFF_FILE));
        let result = next.run(session, product.as_deref());
        let entry = match (pending, &result.status) {
            (Some(p), Status::Succeeded) => self.publish(p, &result, log_start),
            (Some(p), Status::Failed(f)) if crate::recon::cache::remembers(f) => {
                self.publish(p, &result, log_start)
            }
            _ => None,
        };
        self.store.note(CacheStatus::Miss, Some(self.key), entry);
        result
    }

    /// What a compile says before it runs anything: the plan's warnings and USER-level lines.
    fn announce(&self) {
        let (plan, log) = (self.session.plan(), self.session.log());
        for w in &plan.warnings {
            log.warning(log::DRIVER, w);
        }
        for m in &plan.user_messages {
            log.user(m);
        }
    }

    /// Serve the key from the cache if it holds a usable result (the error lines of a remembered
    /// failure are said again, as from a compile that ran).
    fn serve(&self) -> Option<CompileResult> {
        let (session, key) = (self.session, &self.key.key);
        let dir = self.cache.entry_dir(key);
        let hit = |result: CompileResult| {
            self.store
                .note(CacheStatus::Hit, Some(self.key), Some(dir.clone()));
            Some(result)
        };
        match self.cache.lookup(key) {
            Lookup::Absent => None,
            Lookup::Hit(m) => match self.serve_neff(&m) {
                Ok(()) => {
                    let neff = dir.join(NEFF_FILE);
                    let log = session.log();
                    log.user(&format!("Using a cached neff at {}", neff.display()));
                    // A hit is a successful compile: say so as a compile does.
                    log.user("Compiler status PASS");
                    hit(session.result(Status::Succeeded))
                }
                Err(ServeError::Corrupt(reason)) => {
                    self.evict_corrupt(&reason, Some(&m));
                    None
                }
                Err(ServeError::Output(e)) => {
                    let e = NccError::output_not_written(session.plan().output.display(), e);
                    hit(session.fail(&e, Failure::Environment(Environment::Output)))
                }
            },
            Lookup::Failed(_, failed) if !self.store.cfg.retry_failed => {
                hit(self.remembered(&dir, failed))
            }
            Lookup::Failed(..) => None,
            Lookup::Corrupt(reason) => {
                self.evict_corrupt(&reason, None);
                None
            }
        }
    }

    /// Copy a hit's NEFF to `--output` (verified), and say the compile's first lines.
    fn serve_neff(&self, m: &Meta) -> Result<(), ServeError> {
        let neff = m.neff.clone().unwrap_or(NeffInfo {
            blake3: String::new(),
            size: 0,
        });
        let key = &self.key.key;
        self.cache.serve(key, &neff, &self.session.plan().output)?;
        self.cache.touch(key);
        self.announce();
        Ok(())
    }

    /// A failed compile the cache remembers: its lines said again, its failure its end.
    fn remembered(&self, dir: &Path, failed: Failed) -> CompileResult {
        let session = self.session;
        self.announce();
        for line in failed.error_lines {
            session.error(log::DRIVER, line);
        }
        session.log().user(&format!(
            "Using a cached failed compile at {} (its log: {}); rerun with --retry_failed_compilation to compile again",
            dir.display(),
            dir.join(LOG_FILE).display()
        ));
        // Entries written before the failure was recorded: a failure of the model's (nothing
        // else was remembered).
        let failure = failed.failure.unwrap_or(Failure::Job {
            job: String::new(),
            end: JobEnd::Error,
        });
        session.result(Status::Failed(failure))
    }

    /// Evict the entry found corrupt — unless it changed meanwhile (evicted by maintenance, or
    /// replaced by another compile): then there is nothing to warn about.
    fn evict_corrupt(&self, reason: &str, seen: Option<&Meta>) {
        let dir = self.cache.entry_dir(&self.key.key);
        if let Some(seen) = seen {
            match self.cache.lookup(&self.key.key) {
                Lookup::Hit(now) if now.created_ms == seen.created_ms => {}
                _ => return,
            }
        }
        let evicted = self.cache.evict(&self.key.key);
        warn(
            self.session,
            &format!(
                "the cache entry {} is corrupt ({reason}); {}",
                dir.display(),
                match evicted {
                    Ok(_) => "evicted it, compiling again".to_string(),
                    Err(e) => format!("could not evict it ({e}), compiling again"),
                }
            ),
        );
    }

    /// The entry's `meta.json` for `result`.
    fn meta(&self, result: &CompileResult) -> Meta {
        let (plan, key) = (self.session.plan(), self.key);
        let now = meta::now_ms();
        Meta {
            format: meta::META_FORMAT,
            key: key.key.clone(),
            args_key: key.args_key.clone(),
            inputs: key.inputs.clone(),
            model_path: plan.model.display().to_string(),
            model_blake3: key.model_digest.clone(),
            model_size: key.model_size,
            status: if result.ok() { "ok" } else { "failed" }.to_string(),
            exit_status: result.exit_status(),
            neff: None,
            engine: self.store.engine.name().to_string(),
            jobs: result.jobs.clone(),
            peak_rss_kb: result.peak_rss_kb().unwrap_or(0),
            wall_s: result.jobs.iter().map(|j| j.wall_s).sum(),
            nxcc_version: crate::VERSION.to_string(),
            created: log::utc_timestamp(now / 1000),
            created_ms: now,
            last_used_ms: now,
        }
    }

    /// Store the compile's result; the entry's path, or `None` (with a warning) if it could not
    /// be stored.
    fn publish(
        &self,
        pending: store::Pending,
        result: &CompileResult,
        log_start: u64,
    ) -> Option<PathBuf> {
        let meta = self.meta(result);
        let mut log_text = compile_log(&self.session.plan().logfile, log_start, result);
        log_text.push_str(&metrics::table(&result.jobs));
        let fill = |tmp: &crate::fsx::Dir| -> std::io::Result<Meta> {
            let mut m = meta.clone();
            if result.ok() {
                let (hash, size) = store::hash_in(tmp, NEFF_FILE).map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("the compile left no NEFF for the cache ({e})"),
                    )
                })?;
                m.neff = Some(NeffInfo {
                    blake3: hash.to_hex().to_string(),
                    size,
                });
            } else {
                let failed = Failed {
                    exit_status: result.exit_status(),
                    error_lines: result.lines.clone(),
                    failure: result.failure().cloned(),
                };
                store::write_json_in(tmp, FAILED_FILE, &failed)?;
            }
            tmp.create_file(LOG_FILE)?.write_all(log_text.as_bytes())?;
            store::write_json_in(tmp, META_FILE, &with_origin(tmp, &m)?)?;
            Ok(m)
        };
        match fill(pending.dir()).and_then(|_| pending.commit()) {
            Ok(dir) => {
                self.session.log().debug(
                    log::DRIVER,
                    &format!("Stored the compile in the cache at {}", dir.display()),
                );
                if result.ok() && meta.peak_rss_kb > 0 {
                    self.learn_estimate(&meta);
                }
                Some(dir)
            }
            Err(e) => {
                let dir = self.cache.dir().display();
                warn(
                    self.session,
                    &format!("could not store the compile in the cache {dir} ({e})"),
                );
                None
            }
        }
    }

    /// Record what the compile needed, for the memory estimates of later ones.
    fn learn_estimate(&self, meta: &Meta) {
        let rec = estimate::Record {
            key: self.key.key.clone(),
            features: self.key.features,
            peak_rss_kb: meta.peak_rss_kb,
            at_ms: meta.created_ms,
        };
        if let Err(e) = estimate::record(self.cache, &self.key.args_key, &rec) {
            warn(
                self.session,
                &format!("could not record the memory estimate ({e})"),
            );
        }
    }
}

/// `meta.json`'s content: `m`, and the origin the runner left beside the product (a NEFF from a
/// remote server), which is removed from the entry.
fn with_origin(tmp: &crate::fsx::Dir, m: &Meta) -> std::io::Result<serde_json::Value> {
    let mut v = serde_json::to_value(m).map_err(std::io::Error::other)?;
    match tmp.read(ORIGIN_FILE) {
        Ok(bytes) => {
            let origin: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            v["origin"] = origin;
            tmp.remove_file(ORIGIN_FILE)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(v)
}

/// The lines this compile appended to the shared log file: those written after `start` that
/// carry the supervising process's or the worker's pid (`<ts> <LEVEL> <pid> [<logger>]: ...`).
pub fn compile_log(logfile: &Path, start: u64, result: &CompileResult) -> String {
    let mut text = String::new();
    let Ok(mut f) = std::fs::File::open(logfile) else {
        return text;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = if start > len { 0 } else { start };
    if f.seek(std::io::SeekFrom::Start(start)).is_err() {
        return text;
    }
    let mut bytes = Vec::new();
    if f.read_to_end(&mut bytes).is_err() {
        return text;
    }
    let pids: Vec<String> = std::iter::once(result.supervisor_pid)
        .chain(result.worker_pid)
        .map(|p| p.to_string())
        .collect();
    for line in String::from_utf8_lossy(&bytes).lines() {
        if line
            .split(' ')
            .nth(2)
            .is_some_and(|pid| pids.iter().any(|p| p == pid))
        {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compile_log_is_this_compiles_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.txt");
        std::fs::write(&log, "2026-01-01T00:00:00Z INFO 11 [x]: before\n").unwrap();
        let start = std::fs::metadata(&log).unwrap().len();
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        writeln!(f, "2026-01-01T00:00:01Z INFO 11 [x]: mine (supervisor)").unwrap();
        writeln!(f, "2026-01-01T00:00:01Z INFO 99 [x]: another compile").unwrap();
        writeln!(f, "2026-01-01T00:00:01Z INFO 12 [x]: mine (worker)").unwrap();
        let mut o = CompileResult::succeeded(Vec::new());
        o.supervisor_pid = 11;
        o.worker_pid = Some(12);
        let text = compile_log(&log, start, &o);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("mine (supervisor)") && text.contains("mine (worker)"));
    }
}
