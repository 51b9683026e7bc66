//! A compile through the cache (07): [`compile_cached`], what `nxcc compile --cache_dir`,
//! `parallel-compile` and the daemon call.
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
//!    [`crate::recon::cache::remembers`]) as `failed.json`, `meta.json`, `log.txt`.
//!    A cache that cannot be written costs a warning, never the compile.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::estimate;
use super::key::Key;
use super::meta::{self, Failed, Meta, NeffInfo, FAILED_FILE, LOG_FILE, META_FILE, NEFF_FILE};
use super::store::{self, Cache, Lookup, ServeError};
use crate::cli::level;
use crate::engine::events::Event;
use crate::engine::log::{self, Logger};
use crate::engine::metrics;
use crate::engine::pipeline::{CompileResult, Options};
use crate::engine::{self, Engine};
use crate::error::{NccError, EXIT_COMPILE_FAILED};
use crate::plan::Plan;
use crate::result::{Environment, Failure, JobEnd, Status};

/// The cache directory `parallel-compile` and the daemon use unless told otherwise (the
/// ecosystem's default).
pub const DEFAULT_DIR: &str = "/var/tmp/neuron-compile-cache";

/// The environment variable the ecosystem points its compile cache with (CLIENTS: the PyTorch
/// integration reads it); when set, it replaces [`DEFAULT_DIR`] as the default.
pub const CACHE_URL_ENV: &str = "NEURON_COMPILE_CACHE_URL";

/// The default cache directory: `$NEURON_COMPILE_CACHE_URL` when set and not empty, else
/// [`DEFAULT_DIR`]. (A remote URL there is refused where it is used, as for `--cache_dir`.)
pub fn default_dir() -> String {
    std::env::var(CACHE_URL_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_DIR.to_string())
}

/// Whether and where a compile uses the cache.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheConfig {
    /// The cache directory; `None`: the cache is off.
    pub dir: Option<PathBuf>,
    /// Compile again even if the cache holds a failed result (`--retry_failed_compilation`).
    pub retry_failed: bool,
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

/// A compile's result and what the cache had to do with it.
#[derive(Debug, Clone)]
pub struct CachedOutcome {
    /// The compile's result, or the one the entry recorded (a hit).
    pub outcome: CompileResult,
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

    /// The cache in `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> CacheConfig {
        CacheConfig {
            dir: Some(dir.into()),
            retry_failed: false,
        }
    }

    /// From a compile's own flags: `--no_cache` turns it off; `--cache_dir DIR` (relative to the
    /// launch dir) turns it on; else `default_dir` (`None` for `nxcc compile`, [`DEFAULT_DIR`]
    /// for parallel-compile and the daemon). `--retry_failed_compilation` is read too. A remote
    /// URL is refused ([`check_local`]).
    pub fn from_plan(plan: &Plan, default_dir: Option<&Path>) -> Result<CacheConfig, NccError> {
        let retry_failed = plan.ns.bool("retry_failed_compilation");
        if plan.ns.bool("no_cache") {
            return Ok(CacheConfig {
                dir: None,
                retry_failed,
            });
        }
        let dir = match plan.ns.str("cache_dir").filter(|d| !d.is_empty()) {
            Some(d) => {
                check_local(d)?;
                Some(crate::plan::absolute(&plan.launch_dir, d))
            }
            None => default_dir.map(Path::to_path_buf),
        };
        Ok(CacheConfig { dir, retry_failed })
    }

    /// The cache, when on.
    pub fn cache(&self) -> Option<Cache> {
        self.dir.as_ref().map(Cache::new)
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
            status: None,
        });
    }
    CachedOutcome {
        outcome: CompileResult::failed(Failure::Environment(Environment::CacheDir), vec![line]),
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
pub type Runner<'a> = &'a dyn Fn(&Plan, &Options, &Engine, Option<&Path>) -> CompileResult;

/// [`compile_cached_keyed`] with the compile run by `run` (the NEFF written to the product path
/// it is given, as [`engine::run_producing`] does).
pub fn compile_cached_with(
    plan: &Plan,
    key: Option<Key>,
    opts: &Options,
    cfg: &CacheConfig,
    engine: &Engine,
    run: Runner,
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
    if !crate::recon::cache::plan_is_cacheable(&plan.pipeline) {
        if let Some(l) = &logger {
            l.info(
                log::DRIVER,
                "Compiling without the cache: the plan's product is not just the NEFF at --output",
            );
        }
        return uncached();
    }
    let key = match key.map(Ok).unwrap_or_else(|| Key::compute(plan, engine)) {
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
    };
    if let Some(done) = ctx.serve_from_cache() {
        return done;
    }
    let lock = cache.lock(&key.key, Some(opts.cancel.flag()), &mut || {
        if let Some(l) = &logger {
            l.info(
                log::DRIVER,
                &format!(
                    "Waiting for another compile of the same model and arguments (lock {})",
                    cache.lock_path(&key.key).display()
                ),
            );
        }
    });
    let _lock = match lock {
        Ok(Some(l)) => {
            if let Some(why) = &l.replaced {
                warn(
                    &logger,
                    &format!("removed the cache lock {} ({why})", l.path.display()),
                );
            }
            l
        }
        Ok(None) => {
            // Cancelled while waiting: nothing ran.
            let status = opts
                .cancel
                .status()
                .unwrap_or(Status::Cancelled(crate::result::CancelReason::Stopped));
            return CachedOutcome {
                outcome: CompileResult::new(status, Vec::new(), Vec::new()),
                cache: CacheStatus::Miss,
                key: Some(key),
                entry: None,
            };
        }
        Err(e) => {
            warn(
                &logger,
                &format!(
                    "cannot lock the cache entry {} ({e}); compiling without the cache",
                    cache.lock_path(&key.key).display()
                ),
            );
            return uncached();
        }
    };
    if let Some(done) = ctx.serve_from_cache() {
        return done;
    }
    let log_start = std::fs::metadata(&plan.logfile)
        .map(|m| m.len())
        .unwrap_or(0);
    // The compile writes the NEFF into a temporary entry only it knows; the entry is made from
    // that file, never from --output (see the module documentation).
    let pending = match cache.begin(&key.key) {
        Ok(p) => Some(p),
        Err(e) => {
            warn(
                &logger,
                &format!(
                    "cannot write to the cache {} ({e}); compiling without storing the result",
                    cache.dir().display()
                ),
            );
            None
        }
    };
    let product = pending.as_ref().map(|p| p.path().join(NEFF_FILE));
    let outcome = run(plan, opts, engine, product.as_deref());
    let entry = match (pending, &outcome.status) {
        (Some(p), Status::Succeeded) => ctx.publish(p, &outcome, engine, log_start),
        (Some(p), Status::Failed(f)) if crate::recon::cache::remembers(f) => {
            ctx.publish(p, &outcome, engine, log_start)
        }
        _ => None,
    };
    CachedOutcome {
        outcome,
        cache: CacheStatus::Miss,
        key: Some(key),
        entry,
    }
}

struct Ctx<'a> {
    plan: &'a Plan,
    opts: &'a Options<'a>,
    cache: &'a Cache,
    key: &'a Key,
    cfg: &'a CacheConfig,
    logger: &'a Option<Logger>,
}

impl Ctx<'_> {
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
        let done = |outcome: CompileResult| {
            if let Some(f) = self.opts.on_event {
                for line in &outcome.lines {
                    f(&Event::Error { line: line.clone() });
                }
                f(&Event::Done {
                    exit_status: outcome.exit_status(),
                    status: None,
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
                        self.cache.touch(key);
                        self.announce();
                        if let Some(l) = self.logger {
                            l.user(&format!(
                                "Using a cached neff at {}",
                                dir.join(NEFF_FILE).display()
                            ));
                            // A hit is a successful compile: say so as a compile does.
                            l.user("Compiler status PASS");
                        }
                        done(CompileResult::succeeded(Vec::new()))
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
                        done(CompileResult::failed(
                            Failure::Environment(Environment::Output),
                            vec![line],
                        ))
                    }
                }
            }
            Lookup::Failed(_, failed) if !self.cfg.retry_failed => {
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
                // Entries written before the failure was recorded: a failure of the model's
                // (nothing else was remembered).
                let failure = failed.failure.unwrap_or(Failure::Job {
                    job: String::new(),
                    end: JobEnd::Error,
                });
                done(CompileResult::failed(failure, failed.error_lines))
            }
            Lookup::Failed(..) => None,
            Lookup::Corrupt(reason) => {
                self.evict_corrupt(&reason, None);
                None
            }
        }
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

    /// Store the compile's result; the entry's path, or `None` (with a warning) if it could not
    /// be stored.
    fn publish(
        &self,
        pending: store::Pending,
        outcome: &CompileResult,
        engine: &Engine,
        log_start: u64,
    ) -> Option<PathBuf> {
        let ok = outcome.ok();
        let plan = self.plan;
        let key = self.key;
        let now = meta::now_ms();
        let meta = Meta {
            format: meta::META_FORMAT,
            key: key.key.clone(),
            args_key: key.args_key.clone(),
            inputs: key.inputs.clone(),
            model_path: plan.model.display().to_string(),
            model_blake3: key.model_digest.clone(),
            model_size: key.model_size,
            status: if ok { "ok" } else { "failed" }.to_string(),
            exit_status: outcome.exit_status(),
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
                        exit_status: outcome.exit_status(),
                        error_lines: outcome.lines.clone(),
                        failure: outcome.failure().cloned(),
                    },
                )?;
            }
            tmp.create_file(LOG_FILE)?.write_all(log_text.as_bytes())?;
            store::write_json_in(tmp, META_FILE, &m)?;
            Ok(m)
        };
        let written = fill(pending.dir()).and_then(|_| pending.commit());
        match written {
            Ok(dir) => {
                if let Some(l) = self.logger {
                    l.debug(
                        log::DRIVER,
                        &format!("Stored the compile in the cache at {}", dir.display()),
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

/// The lines this compile appended to the shared log file: those written after `start` that
/// carry the supervising process's or the worker's pid (`<ts> <LEVEL> <pid> [<logger>]: ...`).
pub fn compile_log(logfile: &Path, start: u64, outcome: &CompileResult) -> String {
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
        let mut o = CompileResult::succeeded(Vec::new());
        o.supervisor_pid = 11;
        o.worker_pid = Some(12);
        let text = compile_log(&log, start, &o);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("mine (supervisor)") && text.contains("mine (worker)"));
    }
}
