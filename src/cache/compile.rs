//! A compile through the cache (spec 07-cache-parallel.md): [`compile_cached`], what `nxcc compile
//! --cache_dir`, `parallel-compile` and the daemon call.
//!
//! 0. Only a plan whose one product is the NEFF at `--output` uses the cache
//!    ([`crate::recon::cache::plan_is_cacheable`]); others compile as without it.
//! 1. Compute the key (the model read once, streaming).
//! 2. Without any lock, look the key up: a good entry is a *hit* — its NEFF is copied to
//!    `--output` (verified against its blake3 on the way), `Using a cached neff at {path}` is
//!    printed at USER level, nothing is run or laid out (event consumers get `Done`); a failed entry fails at once with its
//!    error lines and status (unless `--retry_failed_compilation`); a corrupt entry is evicted,
//!    with a warning, and compiled again.
//! 3. Otherwise take the key's lock (waiting for another compile of the same key), look again
//!    (the other compile's result is reused), and compile on the engine.
//!    The cache directory is checked first ([`Cache::check`]): one that others could write fails
//!    the compile (exit 70) with what to fix.
//! 4. Before the compile runs, make a temporary entry ([`Cache::begin`]); the compile writes
//!    its NEFF there itself ([`engine::run_producing`]) besides `--output`.
//! 5. Publish the result: a success as `model.neff` (the file the compile wrote into the
//!    temporary entry, hashed there), `meta.json`, `log.txt`, and its peak memory
//!    in the estimate index; a failure the inputs caused (see
//!    [`crate::recon::cache::failure_is_cacheable`]) as `failed.json`, `meta.json`, `log.txt`.
//!    A cache that cannot be written costs a warning, never the compile.

use std::cell::RefCell;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use serde::Serialize;

use super::counters::Counters;
use super::digests::Table;
use super::estimate;
use super::explain::{self, Verdict};
use super::key::Key;
use super::layers::{self, OnMiss};
use super::meta::{
    self, Failed, Meta, NeffInfo, FAILED_FILE, LOG_FILE, META_FILE, NEFF_FILE, ORIGIN_FILE,
};
use super::settings::Settings;
use super::store::{self, Cache, KeyLock, Lookup, ServeError};
use crate::cli::level;
use crate::engine::events::Event;
use crate::engine::log::{self, Logger};
use crate::engine::metrics;
use crate::engine::pipeline::{Options, Outcome};
use crate::engine::{self, Engine};
use crate::error::{NccError, EXIT_COMPILE_FAILED};
use crate::plan::Plan;

/// How the default cache directory is written in help texts ([`default_dir`]).
pub const DEFAULT_DIR_TEXT: &str = "$XDG_CACHE_HOME/nxcc, else ~/.cache/nxcc";

/// The environment variable the ecosystem points *its* compile cache with (CLIENTS: the
/// PyTorch integration reads it). nxcc's own cache never defaults to it.
pub const CACHE_URL_ENV: &str = "NEURON_COMPILE_CACHE_URL";

/// The cache directory `parallel-compile` and the daemon use unless told otherwise: a per-user
/// directory of nxcc's own, `$XDG_CACHE_HOME/nxcc` (else `~/.cache/nxcc`), its entries in its
/// `nxcc-v1/`. Never inside the framework's cache root, where the framework's tools upload,
/// clean and unlock whatever they find.
pub fn default_dir() -> String {
    crate::toolchain::simulated_base().display().to_string()
}

/// Whether and where a compile uses the cache.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheConfig {
    /// The cache directory; `None`: the cache is off.
    pub dir: Option<PathBuf>,
    /// Compile again even if the cache holds a failed result (`--retry_failed_compilation`).
    pub retry_failed: bool,
    /// The compile's cache flags over the cache's configuration file ([`super::settings`]).
    pub settings: Settings,
}

/// Whether the compile's result came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheStatus {
    /// Served from the cache (a NEFF, or a remembered failure); nothing ran.
    Hit,
    /// Compiled (and stored, when the result is cacheable).
    Miss,
    /// The cache was not used.
    Off,
}

impl CacheStatus {
    /// The status as `--json` and the daemon's answer spell it: `hit`, `miss` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Off => "off",
        }
    }
}

/// A compile's outcome and what the cache had to do with it.
#[derive(Debug, Clone)]
pub struct CachedOutcome {
    /// The compile's outcome, or the one the entry recorded (a hit).
    pub outcome: Outcome,
    /// Whether the cache served it, stored it or was not used.
    pub cache: CacheStatus,
    /// The key, when the cache was used.
    pub key: Option<Key>,
    /// The entry served or published, if any.
    pub entry: Option<PathBuf>,
}

/// Refuse a remote cache location (`s3://...`, any `scheme://`): only local directories are
/// supported.
pub fn check_local(dir: &str) -> Result<(), NccError> {
    match dir.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            Err(NccError::remote_cache(dir))
        }
        _ => Ok(()),
    }
}

impl CacheConfig {
    /// The cache off.
    pub fn off() -> CacheConfig {
        CacheConfig::default()
    }

    /// The cache in `dir`, with its configuration file's settings.
    pub fn at(dir: impl Into<PathBuf>) -> CacheConfig {
        let dir = dir.into();
        let file = super::settings::File::read(&Cache::new(&dir));
        CacheConfig {
            settings: Settings::resolve(&Default::default(), &file).unwrap_or_default(),
            dir: Some(dir),
            retry_failed: false,
        }
    }

    /// The cache in `dir` (`None`: off) for a compile of `plan`: its `--retry_failed_compilation`,
    /// its cache flags over the directory's configuration file.
    pub fn for_plan_in(plan: &Plan, dir: Option<PathBuf>) -> Result<CacheConfig, NccError> {
        let cache = dir.as_ref().map(Cache::new);
        let settings = Settings::of_plan(plan, cache.as_ref()).map_err(NccError::cache_setting)?;
        Ok(CacheConfig {
            dir,
            retry_failed: plan.ns.bool("retry_failed_compilation"),
            settings,
        })
    }

    /// Where this compile's digests are remembered ([`super::digests`]): the cache's table
    /// (made and written unless the cache is read-only), this process's memory when the cache
    /// cannot be used, nothing with `--cache-rehash`.
    pub fn table(&self) -> Table {
        if !self.settings.stat_digests {
            return Table::off();
        }
        let writes = self.settings.mode.writes();
        match self
            .cache()
            .and_then(|c| c.open_root(writes).ok().flatten())
        {
            Some(root) => Table::in_cache(root, self.settings.mode.writes()),
            None => Table::memory_only(),
        }
    }

    /// The key of a compile of `plan` on `engine` under these settings.
    pub fn key(&self, plan: &Plan, engine: &Engine) -> std::io::Result<Key> {
        Key::compute(
            plan,
            engine,
            self.settings.sloppiness.hlo_metadata,
            &self.table(),
        )
    }

    /// From a compile's own flags: `--no_cache` turns it off; `--cache_dir DIR` (relative to the
    /// launch dir) turns it on; else `default_dir` (`None` for `nxcc compile`, [`default_dir()`]
    /// for parallel-compile and the daemon). `--retry_failed_compilation` is read too. A remote
    /// URL is refused ([`check_local`]).
    pub fn from_plan(plan: &Plan, default_dir: Option<&Path>) -> Result<CacheConfig, NccError> {
        if plan.ns.bool("no_cache") {
            return CacheConfig::for_plan_in(plan, None);
        }
        let dir = match plan.ns.str("cache_dir").filter(|d| !d.is_empty()) {
            Some(d) => {
                check_local(d)?;
                Some(crate::plan::absolute(&plan.launch_dir, d))
            }
            None => default_dir.map(Path::to_path_buf),
        };
        CacheConfig::for_plan_in(plan, dir)
    }

    /// The cache, when on.
    pub fn cache(&self) -> Option<Cache> {
        self.dir.as_ref().map(Cache::new)
    }
}

fn plain_outcome(exit_status: i32, error_lines: Vec<String>) -> Outcome {
    Outcome {
        exit_status,
        error_lines,
        jobs: Vec::new(),
        work_dir: None,
        kept: false,
        worker_pid: None,
        supervisor_pid: std::process::id(),
    }
}

fn open_logger(plan: &Plan, opts: &Options) -> Option<Logger> {
    crate::engine::pipeline::open_log(plan, opts.console.clone()).ok()
}

/// A warning the user sees at the default console level (and the log records).
fn warn(logger: &Option<Logger>, message: &str) {
    if let Some(l) = logger {
        l.log(log::DRIVER, level::USER, &format!("WARNING: {message}"));
    }
}

/// A cache directory that must not be used fails the compile at once (exit 70), saying what to
/// fix; nothing runs.
fn refuse_unsafe_dir(
    u: &store::UnsafeDir,
    logger: &Option<Logger>,
    opts: &Options,
) -> CachedOutcome {
    let line = NccError::unsafe_cache_dir(u).to_string();
    match logger {
        Some(l) => l.error(log::DRIVER, &line),
        None => eprintln!("{line}"),
    }
    if let Some(f) = opts.on_event {
        f(&Event::Error { line: line.clone() });
        f(&Event::Done {
            exit_status: EXIT_COMPILE_FAILED,
        });
    }
    CachedOutcome {
        outcome: plain_outcome(EXIT_COMPILE_FAILED, vec![line]),
        cache: CacheStatus::Off,
        key: None,
        entry: None,
    }
}

/// Compile `plan` on `engine` through the cache (see the module documentation).
pub fn compile_cached(
    plan: &Plan,
    opts: &Options,
    cfg: &CacheConfig,
    engine: &Engine,
) -> CachedOutcome {
    compile_cached_keyed(plan, None, opts, cfg, engine)
}

/// [`compile_cached`] with the key already computed (by [`Key::compute`] for the same plan and
/// engine), as a scheduler that estimated memory from it has.
pub fn compile_cached_keyed(
    plan: &Plan,
    key: Option<Key>,
    opts: &Options,
    cfg: &CacheConfig,
    engine: &Engine,
) -> CachedOutcome {
    compile_cached_with(plan, key, opts, cfg, engine, &engine::run_producing)
}

/// What runs a compile the cache did not answer: [`engine::run_producing`], or a caller's
/// wrapper around it (a remote action cache, remote execution: `crate::remote`).
pub type Runner<'a> = &'a dyn Fn(&Plan, &Options, &Engine, Option<&Path>) -> Outcome;

/// [`compile_cached_keyed`] with the compile run by `run` (the NEFF written to the product path
/// it is given, as [`engine::run_producing`] does). What happened is counted in the cache's
/// counters ([`super::counters`]) unless the cache is read-only.
pub fn compile_cached_with(
    plan: &Plan,
    key: Option<Key>,
    opts: &Options,
    cfg: &CacheConfig,
    engine: &Engine,
    run: Runner,
) -> CachedOutcome {
    let tally = RefCell::new(Counters::default());
    let done = cached(plan, key, opts, cfg, engine, run, &tally);
    if let (Some(cache), Some(k)) = (cfg.cache(), &done.key) {
        if cfg.settings.mode.writes() {
            let _ =
                super::counters::add(&cache, super::counters::shard_of(&k.key), &tally.borrow());
        }
    }
    done
}

fn cached(
    plan: &Plan,
    key: Option<Key>,
    opts: &Options,
    cfg: &CacheConfig,
    engine: &Engine,
    run: Runner,
    tally: &RefCell<Counters>,
) -> CachedOutcome {
    let uncached = || CachedOutcome {
        outcome: run(plan, opts, engine, None),
        cache: CacheStatus::Off,
        key: None,
        entry: None,
    };
    let Some(cache) = cfg.cache() else {
        return uncached();
    };
    let logger = open_logger(plan, opts);
    if let Err(u) = cache.check() {
        return refuse_unsafe_dir(&u, &logger, opts);
    }
    for w in &cfg.settings.warnings {
        warn(&logger, &format!("{}: {w}", cache.root().display()));
    }
    if !crate::recon::cache::plan_is_cacheable(&plan.pipeline) {
        if let Some(l) = &logger {
            l.info(
                log::DRIVER,
                "Compiling without the cache: the plan's product is not just the NEFF at --output",
            );
        }
        return uncached();
    }
    let table = cfg.table();
    let computed = key.map(Ok).unwrap_or_else(|| {
        Key::compute(plan, engine, cfg.settings.sloppiness.hlo_metadata, &table)
    });
    let key = match computed {
        Ok(k) => k,
        Err(e) => {
            warn(
                &logger,
                &format!(
                    "cannot compute the cache key of {} ({e}); compiling without the cache",
                    plan.model.display()
                ),
            );
            return uncached();
        }
    };
    let ctx = Ctx {
        plan,
        opts,
        cache: &cache,
        key: &key,
        cfg,
        logger: &logger,
        table: &table,
        tally,
    };
    if let Some(done) = ctx
        .serve_from_cache()
        .or_else(|| ctx.serve_from_secondary())
    {
        return done;
    }
    let (explained, reason) = ctx.explain_miss();
    match layers::on_miss(cfg.settings.mode, &cache, &explained) {
        OnMiss::Refuse(e) => ctx.refuse(e, reason),
        OnMiss::Compile { store: false } => {
            ctx.count_miss(reason);
            let outcome = run(plan, opts, engine, None);
            ctx.count_compiled(outcome.exit_status);
            ctx.compiled(outcome, None)
        }
        OnMiss::Compile { store: true } => match ctx.lock_key() {
            Ok(Some(_lock)) => match ctx.serve_from_cache() {
                Some(done) => done,
                None => ctx.compile_and_store(reason, engine, run),
            },
            Ok(None) => {
                // Cancelled while waiting: nothing ran.
                let sig = match opts.interrupted.load(Ordering::SeqCst) {
                    0 => libc::SIGTERM,
                    s => s,
                };
                let status = crate::run::signals::exit_status_for(sig);
                ctx.compiled(plain_outcome(status, Vec::new()), None)
            }
            Err(()) => uncached(),
        },
    }
}

struct Ctx<'a> {
    plan: &'a Plan,
    opts: &'a Options<'a>,
    cache: &'a Cache,
    key: &'a Key,
    cfg: &'a CacheConfig,
    logger: &'a Option<Logger>,
    table: &'a Table,
    tally: &'a RefCell<Counters>,
}

impl Ctx<'_> {
    /// Why the key missed ([`explain`]), logged in one line at `info` with the key; the reason
    /// the miss is counted under.
    fn explain_miss(&self) -> (explain::Explanation, super::counters::MissReason) {
        let (key, plan) = (self.key, self.plan);
        let explained = explain::explain(self.cache, &[], key, &plan.model, self.table);
        if let Some(l) = self.logger {
            l.info(
                log::DRIVER,
                &format!("Cache miss, key {}: {}", key.key, explained.line()),
            );
        }
        let reason = match &explained.verdict {
            Verdict::Miss { reason, .. } => *reason,
            _ => super::counters::MissReason::Other,
        };
        (explained, reason)
    }

    /// The key's lock, waiting for another compile of it; `Ok(None)`: cancelled while waiting;
    /// `Err`: it cannot be taken (warned: the compile goes on without the cache).
    fn lock_key(&self) -> Result<Option<KeyLock>, ()> {
        let (cache, key, logger) = (self.cache, &self.key.key, self.logger);
        let lock = cache.lock(key, Some(&self.opts.cancel), &mut |who: &str| {
            if let Some(l) = logger {
                l.info(
                    log::DRIVER,
                    &format!(
                        "Waiting for another compile of the same model and arguments (lock {}, {who})",
                        cache.lock_path(key).display()
                    ),
                );
            }
        });
        match lock {
            Ok(Some(l)) => {
                if let Some(why) = &l.replaced {
                    warn(
                        logger,
                        &format!("removed the cache lock {} ({why})", l.path.display()),
                    );
                }
                Ok(Some(l))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                warn(
                    logger,
                    &format!(
                        "cannot lock the cache entry {} ({e}); compiling without the cache",
                        cache.lock_path(key).display()
                    ),
                );
                Err(())
            }
        }
    }

    /// A compile's outcome as a miss of this key.
    fn compiled(&self, outcome: Outcome, entry: Option<PathBuf>) -> CachedOutcome {
        CachedOutcome {
            outcome,
            cache: CacheStatus::Miss,
            key: Some(self.key.clone()),
            entry,
        }
    }

    /// Compile (the key's lock held) into a temporary entry, and publish the result when it is
    /// one the cache keeps.
    fn compile_and_store(
        &self,
        reason: super::counters::MissReason,
        engine: &Engine,
        run: Runner,
    ) -> CachedOutcome {
        let (plan, opts) = (self.plan, self.opts);
        self.count_miss(reason);
        let log_start = std::fs::metadata(&plan.logfile)
            .map(|m| m.len())
            .unwrap_or(0);
        // The compile writes the NEFF into a temporary entry only it knows; the entry is made
        // from that file, never from --output (see the module documentation).
        let pending = match self.cache.begin(&self.key.key) {
            Ok(p) => Some(p),
            Err(e) => {
                warn(
                    self.logger,
                    &format!(
                        "cannot write to the cache {} ({e}); compiling without storing the result",
                        self.cache.dir().display()
                    ),
                );
                None
            }
        };
        let product = pending.as_ref().map(|p| p.path().join(NEFF_FILE));
        let outcome = run(plan, opts, engine, product.as_deref());
        self.count_compiled(outcome.exit_status);
        let interrupted =
            opts.interrupted.load(Ordering::SeqCst) != 0 || opts.cancel.is_cancelled();
        let entry = match pending {
            Some(p) if outcome.exit_status == 0 => {
                self.publish(p, &outcome, engine, log_start, true)
            }
            Some(p)
                if crate::recon::cache::failure_is_cacheable(
                    outcome.exit_status,
                    outcome.worker_pid.is_some(),
                    &outcome.jobs,
                    &outcome.error_lines,
                    interrupted,
                ) =>
            {
                self.publish(p, &outcome, engine, log_start, false)
            }
            _ => None,
        };
        self.compiled(outcome, entry)
    }

    /// What a compile says before it runs anything: the plan's warnings and USER-level lines.
    fn announce(&self) {
        if let Some(l) = self.logger {
            for w in &self.plan.warnings {
                l.warning(log::DRIVER, w);
            }
            for m in &self.plan.user_messages {
                l.user(m);
            }
        }
    }

    /// Serve the key from the cache if it holds a usable result. Event consumers get the error
    /// lines and `Done`, as from a compile that ran.
    fn serve_from_cache(&self) -> Option<CachedOutcome> {
        let key = &self.key.key;
        let dir = self.cache.entry_dir(key);
        let done = |outcome: Outcome| {
            if let Some(f) = self.opts.on_event {
                for line in &outcome.error_lines {
                    f(&Event::Error { line: line.clone() });
                }
                f(&Event::Done {
                    exit_status: outcome.exit_status,
                });
            }
            Some(CachedOutcome {
                outcome,
                cache: CacheStatus::Hit,
                key: Some(self.key.clone()),
                entry: Some(dir.clone()),
            })
        };
        match self.cache.lookup(key) {
            Lookup::Absent => None,
            Lookup::Hit(m) => {
                let neff = m.neff.clone().unwrap_or(NeffInfo {
                    blake3: String::new(),
                    size: 0,
                });
                match self.cache.serve(key, &neff, &self.plan.output) {
                    Ok(()) => {
                        if self.writes() {
                            self.cache.touch(key);
                        }
                        self.count_hit(&m, false);
                        self.announce();
                        if let (Some(l), true) = (self.logger, self.key.sloppy) {
                            l.info(
                                log::DRIVER,
                                &format!("Cache hit, key {key} (the model keyed without its op metadata)"),
                            );
                        }
                        if let Some(l) = self.logger {
                            l.user(&format!(
                                "Using a cached neff at {}",
                                dir.join(NEFF_FILE).display()
                            ));
                            // A hit is a successful compile: say so as a compile does.
                            l.user("Compiler status PASS");
                        }
                        done(plain_outcome(0, Vec::new()))
                    }
                    Err(ServeError::Corrupt(reason)) => {
                        self.evict_corrupt(&reason, Some(&m));
                        None
                    }
                    Err(ServeError::Output(e)) => {
                        let line =
                            NccError::output_not_written(self.plan.output.display(), e).to_string();
                        if let Some(l) = self.logger {
                            l.error(log::DRIVER, &line);
                        }
                        done(plain_outcome(EXIT_COMPILE_FAILED, vec![line]))
                    }
                }
            }
            Lookup::Failed(m, failed) if !self.cfg.retry_failed => {
                self.count_hit(&m, true);
                self.announce();
                if let Some(l) = self.logger {
                    for line in &failed.error_lines {
                        l.error(log::DRIVER, line);
                    }
                    l.user(&format!(
                        "Using a cached failed compile at {} (its log: {}); rerun with --retry_failed_compilation to compile again",
                        dir.display(),
                        dir.join(LOG_FILE).display()
                    ));
                }
                let status = if failed.exit_status == 0 {
                    EXIT_COMPILE_FAILED
                } else {
                    failed.exit_status
                };
                done(plain_outcome(status, failed.error_lines))
            }
            Lookup::Failed(..) => None,
            Lookup::Corrupt(reason) => {
                self.evict_corrupt(&reason, None);
                None
            }
        }
    }

    /// Whether this compile may write to the cache.
    fn writes(&self) -> bool {
        self.cfg.settings.mode.writes()
    }

    /// Count an entry served (`failed`: a remembered failure).
    fn count_hit(&self, m: &Meta, failed: bool) {
        let mut t = self.tally.borrow_mut();
        if failed {
            t.failures_served += 1;
        } else {
            t.hits += 1;
            t.bytes_read += m.neff.as_ref().map_or(0, |n| n.size) as i64;
        }
        t.time_saved_ms += (m.wall_s * 1000.0).round() as i64;
    }

    /// Count a miss that compiles (or is refused).
    fn count_miss(&self, reason: super::counters::MissReason) {
        self.tally.borrow_mut().add(&Counters::miss(reason));
    }

    /// Count a compile that ran, and whether it failed.
    fn count_compiled(&self, exit_status: i32) {
        let mut t = self.tally.borrow_mut();
        t.compiles += 1;
        if exit_status != 0 {
            t.compile_failures += 1;
        }
    }

    /// A hit-only cache's refusal of a miss: the error, exit [`layers::EXIT_CACHE_MISS`].
    fn refuse(&self, e: NccError, reason: super::counters::MissReason) -> CachedOutcome {
        self.count_miss(reason);
        self.tally.borrow_mut().misses_refused += 1;
        let line = e.to_string();
        match self.logger {
            Some(l) => l.error(log::DRIVER, &line),
            None => eprintln!("{line}"),
        }
        if let Some(f) = self.opts.on_event {
            f(&Event::Error { line: line.clone() });
            f(&Event::Done {
                exit_status: layers::EXIT_CACHE_MISS,
            });
        }
        CachedOutcome {
            outcome: plain_outcome(layers::EXIT_CACHE_MISS, vec![line]),
            cache: CacheStatus::Miss,
            key: Some(self.key.clone()),
            entry: None,
        }
    }

    /// Serve the key from the first secondary cache that has it, and copy its entry into this
    /// cache (unless read-only).
    fn serve_from_secondary(&self) -> Option<CachedOutcome> {
        let key = &self.key.key;
        let hit = layers::find(&self.cfg.settings.secondaries, key, &mut |w: String| {
            warn(self.logger, &w)
        })?;
        let dir = hit.cache.entry_dir(key);
        let outcome = match &hit.failed {
            Some(_) if self.cfg.retry_failed => return None,
            Some(failed) => {
                self.count_hit(&hit.meta, true);
                self.announce();
                if let Some(l) = self.logger {
                    for line in &failed.error_lines {
                        l.error(log::DRIVER, line);
                    }
                    l.user(&format!(
                        "Using a cached failed compile at {} (its log: {}); rerun with --retry_failed_compilation to compile again",
                        dir.display(),
                        dir.join(LOG_FILE).display()
                    ));
                }
                let status = if failed.exit_status == 0 {
                    EXIT_COMPILE_FAILED
                } else {
                    failed.exit_status
                };
                plain_outcome(status, failed.error_lines.clone())
            }
            None => {
                let neff = hit.meta.neff.clone()?;
                if let Err(e) = hit.cache.serve(key, &neff, &self.plan.output) {
                    let why = match e {
                        ServeError::Corrupt(r) => r,
                        ServeError::Output(e) => e.to_string(),
                    };
                    warn(
                        self.logger,
                        &format!("cannot use the entry {} ({why})", dir.display()),
                    );
                    return None;
                }
                self.count_hit(&hit.meta, false);
                self.tally.borrow_mut().hits_secondary += 1;
                self.announce();
                if let Some(l) = self.logger {
                    l.user(&format!(
                        "Using a cached neff at {}",
                        dir.join(NEFF_FILE).display()
                    ));
                    l.user("Compiler status PASS");
                }
                plain_outcome(0, Vec::new())
            }
        };
        if self.writes() {
            match layers::copy_into(self.cache, &hit, key, self.cfg.settings.max_size) {
                Ok(Some(entry)) => {
                    if let Some(l) = self.logger {
                        l.info(
                            log::DRIVER,
                            &format!("Copied the entry into the cache at {}", entry.display()),
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => warn(
                    self.logger,
                    &format!(
                        "could not copy the entry {} into the cache {} ({e})",
                        dir.display(),
                        self.cache.dir().display()
                    ),
                ),
            }
        }
        if let Some(f) = self.opts.on_event {
            for line in &outcome.error_lines {
                f(&Event::Error { line: line.clone() });
            }
            f(&Event::Done {
                exit_status: outcome.exit_status,
            });
        }
        Some(CachedOutcome {
            outcome,
            cache: CacheStatus::Hit,
            key: Some(self.key.clone()),
            entry: Some(dir),
        })
    }

    /// Evict the entry found corrupt — unless it changed meanwhile (evicted by maintenance, or
    /// replaced by another compile): then there is nothing to warn about. A read-only cache is
    /// left as it is.
    fn evict_corrupt(&self, reason: &str, seen: Option<&Meta>) {
        let dir = self.cache.entry_dir(&self.key.key);
        if !self.writes() {
            warn(
                self.logger,
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
        let evicted = self.cache.evict(&self.key.key);
        if matches!(evicted, Ok(true)) {
            self.tally.borrow_mut().evictions += 1;
        }
        warn(
            self.logger,
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

    /// The model's blake3 and its digest without op metadata (a binary HLO module only), as
    /// `meta.json` records them: the one the key took, the other computed (remembered digests
    /// make that cheap).
    fn model_digests(&self) -> (String, Option<String>) {
        let (key, model) = (self.key, &self.plan.model);
        if key.sloppy {
            let exact = super::key::hash_model_with(model, self.table)
                .map(|(h, _)| h.to_hex().to_string())
                .unwrap_or_default();
            return (exact, Some(key.model_digest.clone()));
        }
        let hlo = model
            .is_file()
            .then(|| {
                super::key::hlo_metadata_digest(model, self.table)
                    .ok()
                    .flatten()
            })
            .flatten()
            .map(|(d, _)| d);
        (key.model_digest.clone(), hlo)
    }

    /// Store the compile's result; the entry's path, or `None` (with a warning) if it could not
    /// be stored.
    fn publish(
        &self,
        pending: store::Pending,
        outcome: &Outcome,
        engine: &Engine,
        log_start: u64,
        ok: bool,
    ) -> Option<PathBuf> {
        let plan = self.plan;
        let key = self.key;
        let now = meta::now_ms();
        let (model_blake3, model_hlo_metadata) = self.model_digests();
        let meta = Meta {
            format: meta::META_FORMAT,
            key: key.key.clone(),
            args_key: key.args_key.clone(),
            inputs: key.inputs.clone(),
            model_path: plan.model.display().to_string(),
            model_blake3: model_blake3.clone(),
            model_size: key.model_size,
            model_digest_kind: Some(key.model_digest_kind().to_string()),
            model_hlo_metadata,
            status: if ok { "ok" } else { "failed" }.to_string(),
            exit_status: outcome.exit_status,
            neff: None,
            engine: engine.name().to_string(),
            jobs: outcome.jobs.clone(),
            peak_rss_kb: outcome.jobs.iter().map(|j| j.max_rss_kb).max().unwrap_or(0),
            wall_s: outcome.jobs.iter().map(|j| j.wall_s).sum(),
            nxcc_version: crate::VERSION.to_string(),
            created: log::utc_timestamp(now / 1000),
            created_ms: now,
            last_used_ms: now,
        };
        let mut log_text = compile_log(&plan.logfile, log_start, outcome);
        log_text.push_str(&metrics::table(&outcome.jobs));
        let fill = |tmp: &crate::fsx::Dir| -> std::io::Result<Meta> {
            let mut m = meta.clone();
            if ok {
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
                store::write_json_in(
                    tmp,
                    FAILED_FILE,
                    &Failed {
                        exit_status: outcome.exit_status,
                        error_lines: outcome.error_lines.clone(),
                    },
                )?;
            }
            tmp.create_file(LOG_FILE)?.write_all(log_text.as_bytes())?;
            store::write_json_in(tmp, META_FILE, &with_origin(tmp, &m)?)?;
            Ok(m)
        };
        let max_size = self.cfg.settings.max_size;
        let written = fill(pending.dir())
            .and_then(|_| super::evict::publish(self.cache, &key.key, pending, max_size));
        match written {
            Ok(done) => {
                let dir = done.entry;
                if let Some(l) = self.logger {
                    l.debug(
                        log::DRIVER,
                        &format!("Stored the compile in the cache at {}", dir.display()),
                    );
                    if done.evicted > 0 {
                        l.info(
                            log::DRIVER,
                            &format!(
                                "Evicted {} least recently used cache entries ({} bytes) to stay under max_size",
                                done.evicted, done.freed_bytes
                            ),
                        );
                    }
                }
                let groups = explain::groups(key, &plan.model, &model_blake3);
                if let Err(e) = super::index::record(self.cache, &key.key, &groups) {
                    warn(
                        self.logger,
                        &format!("could not list the entry for explanations ({e})"),
                    );
                }
                if ok && meta.peak_rss_kb > 0 {
                    let rec = estimate::Record {
                        key: key.key.clone(),
                        features: key.features,
                        peak_rss_kb: meta.peak_rss_kb,
                        at_ms: now,
                    };
                    if let Err(e) = estimate::record(self.cache, &key.args_key, &rec) {
                        warn(
                            self.logger,
                            &format!("could not record the memory estimate ({e})"),
                        );
                    }
                }
                Some(dir)
            }
            Err(e) => {
                warn(
                    self.logger,
                    &format!(
                        "could not store the compile in the cache {} ({e})",
                        self.cache.dir().display()
                    ),
                );
                None
            }
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
pub fn compile_log(logfile: &Path, start: u64, outcome: &Outcome) -> String {
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
    let pids: Vec<String> = std::iter::once(outcome.supervisor_pid)
        .chain(outcome.worker_pid)
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
    fn remote_locations_are_refused() {
        for url in ["s3://bucket/prefix", "gs://b", "https://x/y", "file://tmp"] {
            let e = check_local(url).unwrap_err().to_string();
            assert!(
                e.starts_with("[ERROR] [NCC_EDRV110] Remote compile caches are not supported: "),
                "{e}"
            );
        }
        for local in ["/var/tmp/c", "cache", "./a:b", "dir/with://inside"] {
            assert!(check_local(local).is_ok(), "{local}");
        }
    }

    #[test]
    fn the_compile_log_is_this_compiles_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.txt");
        std::fs::write(&log, "2026-01-01T00:00:00Z INFO 11 [x]: before\n").unwrap();
        let start = std::fs::metadata(&log).unwrap().len();
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        use std::io::Write;
        writeln!(f, "2026-01-01T00:00:01Z INFO 11 [x]: mine (supervisor)").unwrap();
        writeln!(f, "2026-01-01T00:00:01Z INFO 99 [x]: another compile").unwrap();
        writeln!(f, "2026-01-01T00:00:01Z INFO 12 [x]: mine (worker)").unwrap();
        let mut o = plain_outcome(0, Vec::new());
        o.supervisor_pid = 11;
        o.worker_pid = Some(12);
        let text = compile_log(&log, start, &o);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("mine (supervisor)") && text.contains("mine (worker)"));
    }
}
