//! The compile cache as layers of the stack ([`crate::engine::strategy::Layer`]): what `nxcc
//! compile --cache_dir`, `parallel-compile` and the daemon compile through. One
//! [`LocalStore`] — the compile's visit to the local cache — stands in the stack three times,
//! with the secondaries between its two halves and the hit-only refusal innermost:
//!
//! 1. [`LocalStore`] itself, outermost: the lookup.
//!    - Only a plan whose one product is the NEFF at `--output` uses the cache
//!      (`crate::recon::cache::plan_is_cacheable`, for nxcc's pipeline; an external
//!      compiler's product is always the file at `--output`); others compile as without it.
//!    - The cache directory is checked first ([`Cache::check`]): one that others could write
//!      fails the compile (exit 70) with what to fix; what its configuration file says that
//!      does not read is warned about. Then the key is computed (the model read once,
//!      streaming, its digest remembered per stat identity: [`super::digests`]), unless the
//!      caller has it.
//!    - Without any lock, the key is looked up: a good entry is a *hit* — its NEFF is copied to
//!      `--output` (verified against its blake3 on the way), `Using a cached neff at {path}` is
//!      printed at USER level, nothing is run or laid out; a failed entry fails at once with its
//!      error lines and its failure (unless `--retry_failed_compilation`); a corrupt entry is
//!      evicted, with a warning (left as it is in a read-only cache), and compiled again.
//!    - What the visit did is added to the cache's counters ([`super::counters`]) unless the
//!      cache is read-only.
//! 2. [`Secondaries`]: `--cache-secondary DIR`s (`super::layers`), searched in order — a hit
//!    there is served and copied into this cache (unless read-only).
//! 3. [`Keep`]: the miss, explained (`super::explain`: one line in the log) and counted; then
//!    by the cache's mode ([`super::settings::Mode`]):
//!    - read-write: the key's lock is taken (waiting for another compile of the same key, on
//!      any host), the key looked up again (the other compile's result is reused), a temporary
//!      entry made ([`Cache::begin`]) that the compile writes its NEFF into itself (the product
//!      path) besides `--output`, and the rest of the stack runs. Its key is then derived
//!      again from what the compile read — the model's private snapshot
//!      ([`crate::engine::session::Session::snapshot`]), hashed — and a result whose key differs
//!      (the model changed between the lookup and the snapshot) is not stored (a warning). The
//!      result is published: a
//!      success as `model.neff` (the file the compile wrote into the temporary entry, hashed
//!      there), `meta.json`, `log.txt`, and its peak memory in the estimate index; a failure
//!      the cache remembers ([`crate::recon::cache::remembers`]) as `failed.json` (its lines
//!      and its failure), `meta.json`, `log.txt`; the entry listed for explanations
//!      ([`super::index`]), and the cache kept under `max_size` ([`super::evict`]). A cache
//!      that cannot be written costs a warning, never the compile;
//!    - read-only and hit-only: the rest of the stack runs; nothing is stored.
//! 4. [`HitOnly`], innermost (below a remote action cache, which may still answer): a
//!    hit-only cache's miss is refused — NCC_EDRV115, naming what differed, exit 69
//!    ([`Failure::CacheMiss`]) — and nothing runs.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::config::{CacheConfig, CacheStatus};
use super::counters::{self, Counters, MissReason};
use super::digests::Table;
use super::estimate;
use super::explain::{self, Explanation, Verdict};
use super::key::Key;
use super::layers::{self, OnMiss, SecondaryHit};
use super::meta::{
    self, Failed, Meta, NeffInfo, FAILED_FILE, LOG_FILE, META_FILE, NEFF_FILE, ORIGIN_FILE,
};
use super::settings::Mode;
use super::store::{self, Cache, KeyLock, Lookup, ServeError};
use crate::cli::level;
use crate::engine::log;
use crate::engine::metrics;
use crate::engine::result::CompileResult;
use crate::engine::session::Session;
use crate::engine::strategy::{Layer, Strategy};
use crate::engine::Engine;
use crate::error::NccError;
use crate::result::{CancelReason, Environment, Failure, JobEnd, Status};

/// The tier a hit of this cache is said to come from (in a compile's profile).
pub const TIER_LOCAL: &str = "local";
/// The tier a hit of a secondary cache (`--cache-secondary DIR`) is said to come from.
pub const TIER_SECONDARY: &str = "secondary";
/// The tier a hit fetched from the shared tier's object store (`--cache_dir s3://...`) is said
/// to come from.
pub const TIER_SHARED: &str = "shared";
/// The tier a hit fetched from a shared secondary (`--cache-secondary s3://...`) is said to
/// come from.
pub const TIER_SHARED_SECONDARY: &str = "shared-secondary";

/// The local compile cache for one compile: its configuration, the engine its entries record,
/// and — once the compile ran through it — what it did ([`LocalStore::status`],
/// [`LocalStore::key`], [`LocalStore::entry`]). Its inner layers are [`LocalStore::secondaries`],
/// [`LocalStore::keep`] and [`LocalStore::hit_only`].
pub struct LocalStore<'a> {
    cfg: &'a CacheConfig,
    engine: &'a Engine,
    table: OnceLock<Table>,
    record: Mutex<Record>,
}

/// What the store did for the compile.
#[derive(Default)]
struct Record {
    status: CacheStatus,
    /// The key the caller computed.
    given: Option<Key>,
    /// The key the compile was looked up under and missed (the inner layers act on it).
    keyed: Option<Key>,
    entry: Option<PathBuf>,
    /// Why the key missed.
    explanation: Option<Explanation>,
    /// What to add to the cache's counters.
    tally: Counters,
}

/// The secondary caches, between the lookup and the miss ([`LocalStore`]'s step 2).
pub struct Secondaries<'s> {
    store: &'s LocalStore<'s>,
}

/// A miss of the local cache: explained, counted, compiled under the key's lock and stored
/// ([`LocalStore`]'s step 3).
pub struct Keep<'s> {
    store: &'s LocalStore<'s>,
}

/// A hit-only cache's refusal of a miss, innermost ([`LocalStore`]'s step 4).
pub struct HitOnly<'s> {
    store: &'s LocalStore<'s>,
}

impl<'a> LocalStore<'a> {
    /// The cache `cfg` says (off when it names no directory), for a compile on `engine`, with
    /// its key when the caller computed it already (by [`CacheConfig::key`] for the same plan
    /// and engine, as a scheduler that estimated memory from it has).
    pub fn new(cfg: &'a CacheConfig, engine: &'a Engine, key: Option<Key>) -> LocalStore<'a> {
        LocalStore {
            cfg,
            engine,
            table: OnceLock::new(),
            record: Mutex::new(Record {
                given: key,
                ..Record::default()
            }),
        }
    }

    /// The layer of the secondary caches.
    pub fn secondaries(&'a self) -> Secondaries<'a> {
        Secondaries { store: self }
    }

    /// The layer that compiles a miss and stores it.
    pub fn keep(&'a self) -> Keep<'a> {
        Keep { store: self }
    }

    /// The layer that refuses a hit-only cache's miss.
    pub fn hit_only(&'a self) -> HitOnly<'a> {
        HitOnly { store: self }
    }

    /// The configuration (for the shared tier).
    pub(crate) fn config(&self) -> &CacheConfig {
        self.cfg
    }

    /// The key the lookup missed, once it has (for the shared tier).
    pub(crate) fn missed_key(&self) -> Option<Key> {
        self.record().keyed.clone()
    }

    /// Serve the missed key from the local cache if it holds it now (an entry the shared tier
    /// fetched, or another compile stored): as the lookup serves a hit, said to come from
    /// `tier` (where the entry came from).
    pub(crate) fn serve_now(&self, session: &Session, tier: &'static str) -> Option<CompileResult> {
        self.visit(session)?.serve(tier)
    }

    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn table(&self) -> &Table {
        self.table.get_or_init(|| self.cfg.table())
    }

    /// Whether the cache served the compile, stored it, or was not used.
    pub fn status(&self) -> CacheStatus {
        self.record().status
    }

    /// The compile's key, when the cache was used.
    pub fn key(&self) -> Option<Key> {
        let r = self.record();
        (r.status != CacheStatus::Off)
            .then(|| r.keyed.clone())
            .flatten()
    }

    /// The entry served or published, if any.
    pub fn entry(&self) -> Option<PathBuf> {
        self.record().entry.clone()
    }

    /// Note what the store did.
    fn note(&self, status: CacheStatus, entry: Option<PathBuf>) {
        let mut r = self.record();
        r.status = status;
        r.entry = entry;
    }

    /// Count into the tally.
    fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut self.record().tally)
    }

    /// The visit of the key the lookup missed, for an inner layer (`None`: the store was not
    /// used for this compile).
    fn visit<'v, 's>(&'v self, session: &'v Session<'s>) -> Option<Visit<'v, 's>> {
        let key = self.record().keyed.clone()?;
        Some(Visit {
            store: self,
            session,
            cache: self.cfg.cache()?,
            key,
        })
    }

    /// The compile's key: the caller's, or computed; `None` (warned): compile without the
    /// cache.
    fn key_of(&self, session: &Session) -> Option<Key> {
        let plan = session.plan();
        let known = self.record().given.take();
        let sloppy = self.cfg.settings.sloppiness.hlo_metadata;
        match known.map(Ok).unwrap_or_else(|| {
            Key::compute(session.invocation(), self.engine, sloppy, self.table())
        }) {
            Ok(k) => Some(k),
            Err(e) => {
                warn(
                    session,
                    &format!(
                        "cannot compute the cache key of {} ({e}); compiling without the cache",
                        plan.model.display()
                    ),
                );
                None
            }
        }
    }

    /// Add the visit's counts to the cache's counters (not for a read-only cache, nor when the
    /// cache ended up unused).
    fn add_counters(&self, cache: &Cache, key: &Key) {
        let r = self.record();
        if self.cfg.settings.mode.writes() && r.status != CacheStatus::Off {
            let _ = counters::add(cache, counters::shard_of(&key.key), &r.tally);
        }
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
        for w in &self.cfg.settings.warnings {
            warn(session, &format!("{}: {w}", cache.root().display()));
        }
        // An external compiler's product is the file at --output, whatever nxcc's own pipeline
        // would have made of the plan.
        let pipeline = &session.plan().pipeline;
        if *self.engine == Engine::Pipeline && !crate::recon::cache::plan_is_cacheable(pipeline) {
            session.log().info(
                log::DRIVER,
                "Compiling without the cache: the plan's product is not just the NEFF at --output",
            );
            return next.run(session, product);
        }
        let Some(key) = self.key_of(session) else {
            return next.run(session, product);
        };
        let visit = Visit {
            store: self,
            session,
            cache,
            key,
        };
        let result = match visit.serve(TIER_LOCAL) {
            Some(done) => done,
            None => {
                self.record().keyed = Some(visit.key.clone());
                next.run(session, product)
            }
        };
        self.add_counters(&visit.cache, &visit.key);
        result
    }
}

impl Layer for Secondaries<'_> {
    fn run(&self, session: &Session, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        let secondaries = &self.store.cfg.settings.secondaries;
        let served = match self.store.visit(session) {
            Some(visit) if !secondaries.is_empty() => {
                let key = &visit.key.key;
                layers::find(secondaries, key, &mut |w: String| warn(session, &w))
                    .and_then(|hit| visit.serve_secondary(hit))
            }
            _ => None,
        };
        served.unwrap_or_else(|| next.run(session, product))
    }
}

impl Layer for Keep<'_> {
    fn run(&self, session: &Session, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        match self.store.visit(session) {
            Some(visit) => visit.miss(product, next),
            None => next.run(session, product),
        }
    }
}

impl Layer for HitOnly<'_> {
    fn run(&self, session: &Session, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        let store = self.store;
        let explained = store.record().explanation.clone();
        let (Some(explained), Some(cache)) = (explained, store.cfg.cache()) else {
            return next.run(session, product);
        };
        match layers::on_miss(store.cfg.settings.mode, &cache, &explained) {
            OnMiss::Refuse(e) => {
                store.count(|t| t.misses_refused += 1);
                session.fail(&e, Failure::CacheMiss)
            }
            OnMiss::Compile { .. } => next.run(session, product),
        }
    }
}

/// The model's digests as `meta.json` records them: the blake3 of its bytes, and of a binary
/// HLO module without its op metadata.
struct ModelDigests {
    blake3: String,
    hlo_metadata: Option<String>,
}

/// One compile's visit to the cache, once it is keyed.
struct Visit<'v, 's> {
    store: &'v LocalStore<'v>,
    session: &'v Session<'s>,
    cache: Cache,
    key: Key,
}

/// A warning the user sees at the default console level (and the log records).
pub(crate) fn warn(session: &Session, message: &str) {
    session
        .log()
        .log(log::DRIVER, level::USER, &format!("WARNING: {message}"));
}

impl Visit<'_, '_> {
    /// Whether this compile may write to the cache.
    fn writes(&self) -> bool {
        self.store.cfg.settings.mode.writes()
    }

    /// Why the key missed ([`explain`]), logged in one line at `info` with the key and kept for
    /// a refusal; the reason the miss is counted under.
    fn explain_miss(&self) -> MissReason {
        let table = self.store.table();
        let explained = explain::explain(
            &self.cache,
            &[],
            &self.key,
            &self.session.plan().model,
            table,
        );
        self.session.log().info(
            log::DRIVER,
            &format!("Cache miss, key {}: {}", self.key.key, explained.line()),
        );
        let reason = match &explained.verdict {
            Verdict::Miss { reason, .. } => *reason,
            _ => MissReason::Other,
        };
        self.store.record().explanation = Some(explained);
        reason
    }

    /// The miss: explained and counted, then compiled — stored under the key's lock in a
    /// read-write cache; else the rest of the stack runs and nothing is stored.
    fn miss(&self, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        let reason = self.explain_miss();
        let count_miss = || self.store.count(|t| t.add(&Counters::miss(reason)));
        if self.store.cfg.settings.mode != Mode::ReadWrite {
            count_miss();
            let result = next.run(self.session, product);
            self.count_compiled(&result);
            self.store.note(CacheStatus::Miss, None);
            return result;
        }
        let _lock = match self.lock_key() {
            Ok(Some(l)) => l,
            Ok(None) => {
                // Cancelled while waiting: nothing ran.
                self.store.note(CacheStatus::Miss, None);
                let stopped = self.session.cancel().status();
                return self
                    .session
                    .result(stopped.unwrap_or(Status::Cancelled(CancelReason::Stopped)));
            }
            Err(()) => {
                self.store.note(CacheStatus::Off, None);
                return next.run(self.session, product);
            }
        };
        // Another compile of the key may have stored it meanwhile: then it is a hit.
        if let Some(done) = self.serve(TIER_LOCAL) {
            return done;
        }
        count_miss();
        self.compile(next)
    }

    /// The key's lock, waiting for another compile of it; `Ok(None)`: cancelled while waiting;
    /// `Err`: it cannot be taken (warned: the compile goes on without the cache).
    fn lock_key(&self) -> Result<Option<KeyLock>, ()> {
        let (session, cache, key) = (self.session, &self.cache, &self.key.key);
        let lock = cache.lock(key, Some(session.cancel().flag()), &mut |who: &str| {
            session.log().info(
                log::DRIVER,
                &format!(
                    "Waiting for another compile of the same model and arguments (lock {}, {who})",
                    cache.lock_path(key).display()
                ),
            )
        });
        match lock {
            Ok(Some(l)) => {
                if let Some(why) = &l.replaced {
                    let what = format!("removed the cache lock {} ({why})", l.path.display());
                    warn(session, &what);
                }
                Ok(Some(l))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                let lock = cache.lock_path(key);
                warn(
                    session,
                    &format!(
                        "cannot lock the cache entry {} ({e}); compiling without the cache",
                        lock.display()
                    ),
                );
                Err(())
            }
        }
    }

    /// Count a compile that ran (not a refusal), and whether it failed.
    fn count_compiled(&self, result: &CompileResult) {
        if matches!(result.failure(), Some(Failure::CacheMiss)) {
            return;
        }
        self.store.count(|t| {
            t.compiles += 1;
            if !result.ok() {
                t.compile_failures += 1;
            }
        });
    }

    /// Count an entry served (`failed`: a remembered failure).
    fn count_hit(&self, m: &Meta, failed: bool) {
        self.store.count(|t| {
            if failed {
                t.failures_served += 1;
            } else {
                t.hits += 1;
                t.bytes_read += m.neff.as_ref().map_or(0, |n| n.size) as i64;
            }
            t.time_saved_ms += (m.wall_s * 1000.0).round() as i64;
        });
    }

    /// Compile into a temporary entry only this compile knows, and publish what it made: the
    /// entry is made from that file, never from `--output` (see the module documentation).
    fn compile(&self, next: &dyn Strategy) -> CompileResult {
        let (session, cache) = (self.session, &self.cache);
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
        self.count_compiled(&result);
        let kept = match &result.status {
            Status::Succeeded => true,
            Status::Failed(f) => crate::recon::cache::remembers(f),
            _ => false,
        };
        let entry = match pending {
            Some(p) if kept => self
                .rederive()
                .and_then(|digests| self.publish(p, &result, log_start, digests)),
            _ => None,
        };
        self.store.note(CacheStatus::Miss, entry);
        result
    }

    /// The key derived again from what the compile read — its snapshot of the model
    /// ([`Session::snapshot`]), hashed now — with the model's two digests for `meta.json`;
    /// `None` (warned) when that is not this visit's key: the model changed between the lookup
    /// and the snapshot (or nothing was read), and the result is not stored under a key it does
    /// not belong to.
    fn rederive(&self) -> Option<ModelDigests> {
        let (session, model) = (self.session, &self.session.plan().model);
        let Some(snapshot) = session.snapshot() else {
            let what = "the compile read no snapshot of the model";
            warn(
                session,
                &format!("{what}: its result is not stored in the cache"),
            );
            return None;
        };
        let (path, off) = (snapshot.path(), Table::off());
        let digests = super::key::hash_model_with(path, &off).map(|(h, size)| {
            let hlo = path
                .is_file()
                .then(|| super::key::hlo_metadata_digest(path, &off).ok().flatten())
                .flatten();
            (h.to_hex().to_string(), size, hlo)
        });
        let (blake3, size, hlo) = match digests {
            Ok(d) => d,
            Err(e) => {
                let what = format!("cannot hash the model's snapshot {} ({e})", path.display());
                warn(
                    session,
                    &format!("{what}: the result is not stored in the cache"),
                );
                return None;
            }
        };
        let again = match (&hlo, self.store.cfg.settings.sloppiness.hlo_metadata) {
            (Some((d, n)), true) => Key::from_digest(self.key.inputs.clone(), d, *n, true),
            _ => Key::from_digest(self.key.inputs.clone(), &blake3, size, false),
        };
        if again.key != self.key.key {
            let what = format!(
                "the model {} changed between the cache lookup and the compile's snapshot of it (it keys as {} now, not {})",
                model.display(),
                again.key,
                self.key.key
            );
            warn(
                session,
                &format!("{what}: the result is not stored in the cache"),
            );
            return None;
        }
        Some(ModelDigests {
            blake3,
            hlo_metadata: hlo.map(|(d, _)| d),
        })
    }

    /// What a compile says before it runs anything: on nxcc's pipeline, the plan's warnings
    /// and USER-level lines (an external compiler says its own).
    fn announce(&self) {
        if *self.store.engine != Engine::Pipeline {
            return;
        }
        let (plan, log) = (self.session.plan(), self.session.log());
        for w in &plan.warnings {
            log.warning(log::DRIVER, w);
        }
        for m in &plan.user_messages {
            log.user(m);
        }
    }

    /// A hit on `dir`.
    fn hit(
        &self,
        result: CompileResult,
        dir: PathBuf,
        tier: &'static str,
    ) -> Option<CompileResult> {
        self.session.served_by(tier);
        self.store.record().keyed = Some(self.key.clone());
        self.store.note(CacheStatus::Hit, Some(dir));
        Some(result)
    }

    /// Serve the key from the cache if it holds a usable result (the error lines of a remembered
    /// failure are said again, as from a compile that ran); a hit is said to come from `tier`
    /// (the local directory's, or the store its entry was just fetched from).
    fn serve(&self, tier: &'static str) -> Option<CompileResult> {
        let (session, key) = (self.session, &self.key.key);
        let dir = self.cache.entry_dir(key);
        match self.cache.lookup(key) {
            Lookup::Absent => None,
            Lookup::Hit(m) => match self.serve_neff(&m) {
                Ok(()) => {
                    self.count_hit(&m, false);
                    if self.key.sloppy {
                        session.log().info(
                            log::DRIVER,
                            &format!(
                                "Cache hit, key {key} (the model keyed without its op metadata)"
                            ),
                        );
                    }
                    self.say_served(&dir);
                    self.hit(session.result(Status::Succeeded), dir, tier)
                }
                Err(ServeError::Corrupt(reason)) => {
                    self.evict_corrupt(&reason, Some(&m));
                    None
                }
                Err(ServeError::Output(e)) => {
                    let e = NccError::output_not_written(session.plan().output.display(), e);
                    let failed = session.fail(&e, Failure::Environment(Environment::Output));
                    self.hit(failed, dir, tier)
                }
            },
            Lookup::Failed(m, failed) if !self.store.cfg.retry_failed => {
                self.count_hit(&m, true);
                self.hit(self.remembered(&dir, failed), dir, tier)
            }
            Lookup::Failed(..) => None,
            Lookup::Corrupt(reason) => {
                self.evict_corrupt(&reason, None);
                None
            }
        }
    }

    /// `Using a cached neff at ...` and, as a compile says it, `Compiler status PASS`.
    fn say_served(&self, dir: &Path) {
        let log = self.session.log();
        log.user(&format!(
            "Using a cached neff at {}",
            dir.join(NEFF_FILE).display()
        ));
        log.user("Compiler status PASS");
    }

    /// Copy a hit's NEFF to `--output` (verified), and say the compile's first lines.
    fn serve_neff(&self, m: &Meta) -> Result<(), ServeError> {
        let neff = m.neff.clone().unwrap_or(NeffInfo {
            blake3: String::new(),
            size: 0,
        });
        let key = &self.key.key;
        self.cache
            .serve(key, &neff, &self.session.plan().output, self.store.table())?;
        if self.writes() {
            self.cache.touch(key);
        }
        self.announce();
        Ok(())
    }

    /// Serve the key from the secondary cache that has it, and copy its entry into this cache
    /// (unless read-only); `None`: it cannot be used (warned), or is a failure to retry.
    fn serve_secondary(&self, hit: SecondaryHit) -> Option<CompileResult> {
        let key = &self.key.key;
        let dir = hit.cache.entry_dir(key);
        let result = match &hit.failed {
            Some(_) if self.store.cfg.retry_failed => return None,
            Some(failed) => {
                self.count_hit(&hit.meta, true);
                self.remembered(&dir, failed.clone())
            }
            None => {
                let neff = hit.meta.neff.clone()?;
                let output = &self.session.plan().output;
                // A secondary cache is verified byte by byte: its files are not this cache's.
                if let Err(e) = hit.cache.serve(key, &neff, output, &Table::off()) {
                    let why = match e {
                        ServeError::Corrupt(r) => r,
                        ServeError::Output(e) => e.to_string(),
                    };
                    let what = format!("cannot use the entry {} ({why})", dir.display());
                    warn(self.session, &what);
                    return None;
                }
                self.count_hit(&hit.meta, false);
                self.store.count(|t| t.hits_secondary += 1);
                self.announce();
                self.say_served(&dir);
                self.session.result(Status::Succeeded)
            }
        };
        if self.writes() {
            self.copy_in(&hit, &dir);
        }
        self.hit(result, dir, TIER_SECONDARY)
    }

    /// Copy a secondary's entry (at `dir`) into this cache.
    fn copy_in(&self, hit: &SecondaryHit, dir: &Path) {
        let max_size = self.store.cfg.settings.max_size;
        match layers::copy_into(&self.cache, hit, &self.key.key, max_size) {
            Ok(Some(entry)) => self.session.log().info(
                log::DRIVER,
                &format!("Copied the entry into the cache at {}", entry.display()),
            ),
            Ok(None) => {}
            Err(e) => warn(
                self.session,
                &format!(
                    "could not copy the entry {} into the cache {} ({e})",
                    dir.display(),
                    self.cache.dir().display()
                ),
            ),
        }
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
            job: None,
            end: JobEnd::Error,
        });
        session.result(Status::Failed(failure))
    }

    /// Evict the entry found corrupt — unless it changed meanwhile (evicted by maintenance, or
    /// replaced by another compile): then there is nothing to warn about. A read-only cache is
    /// left as it is.
    fn evict_corrupt(&self, reason: &str, seen: Option<&Meta>) {
        let dir = self.cache.entry_dir(&self.key.key);
        if !self.writes() {
            warn(
                self.session,
                &format!(
                    "the cache entry {} is corrupt ({reason}); the cache is read-only, compiling without it",
                    dir.display()
                ),
            );
            return;
        }
        if let Some(seen) = seen {
            match self.cache.lookup(&self.key.key) {
                Lookup::Hit(now) if now.created_ms == seen.created_ms => {}
                _ => return,
            }
        }
        let evicted = super::evict::remove(&self.cache, &self.key.key);
        if matches!(evicted, Ok(true)) {
            self.store.count(|t| t.evictions += 1);
        }
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
    fn meta(&self, result: &CompileResult, model_blake3: String, hlo: Option<String>) -> Meta {
        let (plan, key) = (self.session.plan(), &self.key);
        let now = meta::now_ms();
        Meta {
            format: meta::META_FORMAT,
            key: key.key.clone(),
            args_key: key.args_key.clone(),
            inputs: key.inputs.clone(),
            model_path: plan.model.display().to_string(),
            model_blake3,
            model_size: key.model_size,
            model_digest_kind: Some(key.model_digest_kind().to_string()),
            model_hlo_metadata: hlo,
            status: if result.ok() {
                meta::Status::Ok
            } else {
                meta::Status::Failed
            },
            exit_status: result.exit_status(),
            neff: None,
            engine: self.store.engine.into(),
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
        digests: ModelDigests,
    ) -> Option<PathBuf> {
        let model_blake3 = digests.blake3.clone();
        let meta = self.meta(result, digests.blake3, digests.hlo_metadata);
        let mut log_text = compile_log(&self.session.plan().logfile, log_start, result);
        log_text.push_str(&metrics::table(&result.jobs));
        let max_size = self.store.cfg.settings.max_size;
        let written = fill(pending.dir(), &meta, result, &log_text)
            .and_then(|_| super::evict::publish(&self.cache, &self.key.key, pending, max_size));
        match written {
            Ok(done) => {
                self.published(&done);
                let groups = explain::groups(&self.key, &self.session.plan().model, &model_blake3);
                if let Err(e) = super::index::record(&self.cache, &self.key.key, &groups) {
                    let what = format!("could not list the entry for explanations ({e})");
                    warn(self.session, &what);
                }
                if result.ok() && meta.peak_rss_kb > 0 {
                    self.learn_estimate(&meta);
                }
                Some(done.entry)
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

    /// Say where the entry went, and what was evicted to stay under `max_size`.
    fn published(&self, done: &super::evict::Published) {
        let log = self.session.log();
        log.debug(
            log::DRIVER,
            &format!(
                "Stored the compile in the cache at {}",
                done.entry.display()
            ),
        );
        if done.evicted > 0 {
            log.info(
                log::DRIVER,
                &format!(
                    "Evicted {} least recently used cache entries ({} bytes) to stay under max_size",
                    done.evicted, done.freed_bytes
                ),
            );
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
        if let Err(e) = estimate::record(&self.cache, &self.key.args_key, &rec) {
            warn(
                self.session,
                &format!("could not record the memory estimate ({e})"),
            );
        }
    }
}

/// Fill a temporary entry: the NEFF's record (a success; the compile wrote the NEFF there) or
/// `failed.json`, `log.txt`, `meta.json`.
fn fill(
    tmp: &crate::fsx::Dir,
    meta: &Meta,
    result: &CompileResult,
    log_text: &str,
) -> std::io::Result<Meta> {
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
pub(crate) fn compile_log(logfile: &Path, start: u64, result: &CompileResult) -> String {
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
