//! The one entry point of a compile: the command line, `parallel-compile`, the daemon (and, through
//! the daemon, the shim) and `nxcc worker` all compile through [`compile`], and show a dry run
//! through [`dry_run`]. A [`Request`] — the invocation the front door made
//! ([`crate::plan::Invocation`]), how to run it, and the caller's cache and remote settings —
//! becomes one session
//! ([`Session`]: the log opened once, the events written in one place, the cancellation) and one
//! stack of cache layers over one way of running the plan ([`Stack`]), composed here and
//! nowhere else ([`compile`]):
//!
//! 1. the local store's lookup ([`LocalStore`]), outermost (it answers a hit before anything
//!    else is asked; it is off when the configuration says so);
//! 2. the read-only secondary caches (`--cache-secondary`, [`crate::cache::layer::Secondaries`]);
//! 3. the shared tier (`--cache_dir s3://...`, [`crate::cache::shared::tier::SharedTier`]): the
//!    key fetched from the object store into the local directory, or compiled under the key's
//!    lock object and published there;
//! 4. the local store's miss ([`crate::cache::layer::Keep`]: explained, counted, compiled under
//!    the key's lock and stored, unless the cache is read-only or hit-only);
//! 5. with `--remote-cache`, the server's action cache ([`ActionCache`]);
//! 6. a hit-only cache's refusal of a miss ([`crate::cache::layer::HitOnly`]), innermost;
//! 7. the way the plan runs: with `--remote`, remote execution ([`Execution`]); else the
//!    [`Engine`] — nxcc's pipeline, or an external compiler.
//!
//! A cache layer to come (the framework's cache) is one more entry in the layer list.
//!
//! When the plan asks for them, the compile's `--timings` page and `--trace` (`--profile`)
//! Chrome trace are written here, once the whole stack has answered ([`crate::profile`]: one
//! bar, the jobs inside it, its outcome — a hit and its tier too).

use std::path::{Path, PathBuf};

use crate::cache::shared::tier::SharedTier;
use crate::cache::{CacheConfig, CacheStatus, Key, LocalStore};
use crate::engine::log;
use crate::engine::result::CompileResult;
use crate::engine::session::{Options, Session};
use crate::engine::strategy::{Layer, Stack, Strategy};
use crate::engine::{check_output, Engine};
use crate::error::NccError;
use crate::plan::{dryrun, Invocation, Plan};
use crate::profile::{self, Outcome, Phase};
use crate::remote::compile::{ActionCache, Execution};
use crate::remote::{Mode, RemoteConfig};
use crate::result::Status;

/// What to compile and how.
pub struct Request<'a> {
    /// The invocation.
    pub invocation: &'a Invocation,
    /// How the compile runs: console, cancellation, events, worker.
    pub options: Options<'a>,
    /// What runs the plan here: nxcc's pipeline or an external compiler.
    pub engine: &'a Engine,
    /// Whether and where the local cache is used.
    pub cache: CacheConfig,
    /// The cache key, when the caller computed it already (a scheduler that estimated memory
    /// from it).
    pub key: Option<Key>,
    /// A Remote Execution API server, and what it is used for.
    pub remote: Option<RemoteConfig>,
}

/// What a compile gave: its result, and what the local cache had to do with it.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The compile's result (or the one the cache recorded, on a hit).
    pub result: CompileResult,
    /// Whether the cache served it, stored it, or was not used.
    pub cache: CacheStatus,
    /// The key, when the cache was used.
    pub key: Option<Key>,
    /// The cache entry served or published, if any.
    pub entry: Option<PathBuf>,
    /// The cache tier that served it (`local`, `secondary`, `shared`, `shared-secondary`, `remote`), on a hit.
    pub tier: Option<&'static str>,
    /// The model's private snapshot the compile read, kept while this value lives (a
    /// reproducer bundle then holds exactly what was compiled); `None` when none was taken (a
    /// hit, a compile that failed before reading its model).
    pub snapshot: Option<std::sync::Arc<crate::snapshot::Snapshot>>,
}

impl Compiled {
    /// A result the cache had nothing to do with.
    pub fn uncached(result: CompileResult) -> Compiled {
        Compiled {
            result,
            cache: CacheStatus::Off,
            key: None,
            entry: None,
            tier: None,
            snapshot: None,
        }
    }

    /// How it ended, as a profile says it: compiled, a hit and its tier, failed (its code or
    /// signal), a failure the cache remembered, cancelled; `no_neff`: its plan writes no NEFF.
    pub fn outcome(&self, no_neff: bool) -> Outcome {
        let r = &self.result;
        match &r.status {
            Status::Succeeded if self.cache == CacheStatus::Hit => Outcome::Hit {
                tier: self.tier.unwrap_or(crate::cache::TIER_LOCAL).to_string(),
            },
            Status::Succeeded if self.tier.is_some() => Outcome::Hit {
                tier: self.tier.unwrap_or_default().to_string(),
            },
            Status::Succeeded if no_neff => Outcome::NoNeff,
            Status::Succeeded => Outcome::Compiled,
            Status::Failed(f) => {
                let signal = f.signal();
                let code = profile::code_in(&r.lines)
                    .or_else(|| signal.map(|s| crate::engine::failure::code(s).to_string()));
                let what = f.describe();
                if self.cache == CacheStatus::Hit {
                    Outcome::Remembered { code, what }
                } else {
                    let signal = signal.map(crate::run::signals::signal_text);
                    Outcome::Failed { code, signal, what }
                }
            }
            Status::Interrupted(_) | Status::Cancelled(_) => Outcome::Cancelled,
        }
    }
}

/// A compile's bar: `slot`, from `start_s` to `end_s` of its run, its jobs placed from its
/// start (the pipeline's clock starts with the compile).
pub fn bar(
    plan: &Plan,
    done: &Compiled,
    graph: &str,
    (slot, start_s, end_s): (usize, f64, f64),
) -> profile::Compile {
    let r = &done.result;
    profile::Compile {
        graph: graph.to_string(),
        input: plan.model.display().to_string(),
        slot,
        attempt: 0,
        start_s,
        end_s,
        outcome: done.outcome(plan.no_neff.is_some()),
        peak_rss_kb: r.peak_rss_kb(),
        estimate: None,
        basis: None,
        key: done.key.as_ref().map(|k| k.key.clone()),
        phases: r
            .jobs
            .iter()
            .map(|j| Phase {
                name: j.job.to_string(),
                start_s: start_s + j.start_s,
                end_s: start_s + j.start_s + j.wall_s,
                status: serde_json::to_value(j.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                peak_rss_kb: j.max_rss_kb,
            })
            .collect(),
        error: r.lines.first().cloned(),
        log: Some(plan.logfile.display().to_string()),
        reproducer: None,
    }
}

/// The compile's `--timings` page and `--trace` profile, when its plan asks for them; where each
/// went is said on the console (a plain `--timings` writes to a file the user did not name).
fn write_reports(session: &Session, done: &Compiled) {
    let plan = session.plan();
    let reports = &session.invocation().settings.reports;
    let (timings, trace) = (reports.timings.as_deref(), reports.trace.as_deref());
    if timings.is_none() && trace.is_none() {
        return;
    }
    let name = plan
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let elapsed = session.elapsed().as_secs_f64();
    let run = profile::Run {
        title: format!("nxcc compile {name}"),
        process: "nxcc compile".into(),
        lanes: vec!["compile".into()],
        budget: None,
        compiles: vec![bar(plan, done, &name, (0, 0.0, elapsed))],
    };
    for (path, text, what) in [
        (timings, profile::page::html(&run), "timings"),
        (trace, profile::trace::text(&run), "profile"),
    ] {
        let Some(path) = path else { continue };
        let path = crate::fsx::absolute(&plan.launch_dir, path);
        match write_file(&path, &text) {
            Ok(()) => session
                .log()
                .user(&format!("Wrote the {what} to {}", path.display())),
            Err(e) => session.log().warning(
                log::DRIVER,
                &format!("Could not write the {what} to {}: {e}", path.display()),
            ),
        }
    }
}

/// Write a report file whole (its directory made first).
fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    crate::fsx::atomic::write_file(path, text.as_bytes(), crate::fsx::Durability::Visible)
}

/// [`compile`] without a cache or a remote server: what a caller below this layer is handed as
/// its entry point ([`crate::engine::strategy::Entry`]: `nxcc worker`).
pub fn here(invocation: &Invocation, options: Options<'_>, engine: &Engine) -> CompileResult {
    compile(Request {
        invocation,
        options,
        engine,
        cache: CacheConfig::off(),
        key: None,
        remote: None,
    })
    .result
}

/// The dry run the invocation's settings ask for (`--dry-run[=text|json]`): the plan and its
/// memory estimate, rendered as `nxcc compile` and the daemon both show it; `None` when the
/// invocation asks for a compile. An `--output` the compile could not write (a directory, or
/// under a file) is refused as the compile refuses it, in the same words ([`check_output`],
/// asking the kernel rather than making a file).
pub fn dry_run(invocation: &Invocation) -> Option<Result<String, NccError>> {
    let format = invocation.settings.dry_run?;
    if let Err(e) = check_output(&invocation.plan.output, false) {
        return Some(Err(e));
    }
    let memory = crate::cache::estimate::dry_run_memory(invocation);
    Some(Ok(dryrun::render(invocation, format, &memory)))
}

/// The log's line on the compile cache: where it is, or that there is none and how to have one
/// (`compile` uses one only with `--cache_dir`, where `parallel-compile` and the daemon use
/// theirs by default).
fn cache_line(invocation: &Invocation, cache: &CacheConfig) -> String {
    match (&cache.dir, &cache.shared) {
        (Some(dir), Some(url)) => format!("Compile cache: {url}, through {}", dir.display()),
        (Some(dir), None) => format!("Compile cache: {}", dir.display()),
        (None, _) if invocation.settings.cache.no_cache => "Compile cache: off (--no_cache)".into(),
        (None, _) => "Compile cache: off (--cache_dir DIR uses one; parallel-compile, the daemon and compile --daemon use one by default)".into(),
    }
}

/// Compile (see the module documentation).
pub fn compile(request: Request) -> Compiled {
    let Request {
        invocation,
        options,
        engine,
        cache,
        key,
        remote,
    } = request;
    let session = match Session::open(invocation, options) {
        Ok(s) => s,
        Err(result) => return Compiled::uncached(*result),
    };
    session
        .log()
        .info(log::DRIVER, &cache_line(invocation, &cache));
    let store = LocalStore::new(&cache, engine, key);
    let remote_cache = remote
        .as_ref()
        .filter(|r| r.mode == Mode::CacheOnly)
        .map(|r| ActionCache {
            address: &r.address,
            engine,
        });
    let execution = remote
        .as_ref()
        .filter(|r| r.mode == Mode::Execute)
        .map(|r| Execution {
            address: &r.address,
            engine,
        });
    let (secondaries, keep, hit_only) = (store.secondaries(), store.keep(), store.hit_only());
    let shared = SharedTier::new(&store);
    let mut layers: Vec<&dyn Layer> = vec![&store, &secondaries, &shared, &keep];
    if let Some(c) = &remote_cache {
        layers.push(c);
    }
    layers.push(&hit_only);
    let base: &dyn Strategy = match &execution {
        Some(e) => e,
        None => engine,
    };
    let result = Stack::new(&layers, base).run(&session, None);
    let done = Compiled {
        result,
        cache: store.status(),
        key: store.key(),
        entry: store.entry(),
        tier: session.served(),
        snapshot: session.kept_snapshot(),
    };
    write_reports(&session, &done);
    session.done(&done.result);
    done
}
