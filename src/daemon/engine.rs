//! The seam between the daemon and whatever produces a NEFF: an [`Engine`] takes one planned
//! compile and runs it, and says whether a compile cache answered it.
//!
//! The daemon's `--cache_dir DIR` and `--compiler PATH` take effect here, and only here: they are
//! carried in an [`EngineConfig`] to [`select`], which picks the engine every compile of the
//! daemon goes through. This build has one engine, [`Pipeline`]: nxcc's own pipeline
//! ([`run_pipeline`]), uncached (`cache: "off"`). The memory estimate the admission control uses
//! is [`memory_estimate`], the documented default rule (07-cache-parallel.md) — the one place a
//! learned estimate (the peak recorded for the same compile) would replace it.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::plan::Plan;
use crate::run::metrics::JobMetrics;
use crate::run::pipeline::{run_pipeline, Options};

/// Whether a compile cache answered a compile (the `cache` field of the `done` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// The NEFF came from the cache; no tool ran.
    Hit,
    /// The cache was consulted and the compile ran (its result is stored).
    Miss,
    /// No cache was involved.
    Off,
}

impl CacheUse {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheUse::Hit => "hit",
            CacheUse::Miss => "miss",
            CacheUse::Off => "off",
        }
    }
}

/// What the daemon's command line says about engines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineConfig {
    /// `--cache_dir DIR` (`None`: not given; the engine applies its default).
    pub cache_dir: Option<PathBuf>,
    /// `--compiler PATH`: an external compiler run as one supervised job per compile.
    pub compiler: Option<PathBuf>,
}

/// How one compile ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub exit_status: i32,
    /// The error lines reported (the `/compile` route answers them).
    pub error_lines: Vec<String>,
    pub cache: CacheUse,
    /// Per-job figures (empty for a cache hit).
    pub jobs: Vec<JobMetrics>,
}

/// Runs planned compiles. Shared by every compile of the daemon (several at once).
pub trait Engine: Send + Sync {
    /// Run one compile: `opts` carries its console sink, events callback, cancellation and extra
    /// worker environment. Blocking; called from a blocking thread.
    fn run(&self, plan: &Plan, opts: &Options<'_>) -> Finished;

    /// The estimated peak memory of a compile, bytes (what admission control reserves).
    fn memory_estimate(&self, plan: &Plan) -> u64 {
        memory_estimate(plan)
    }

    /// One line for the daemon's log and status: what runs the compiles.
    fn describe(&self) -> String;

    /// Cache statistics for `GET /v1/status` (`null` without a cache).
    fn cache_stats(&self) -> Value {
        Value::Null
    }
}

/// 256 MiB: the fixed part of the default estimate.
pub const ESTIMATE_BASE: u64 = 256 << 20;
/// The model-size factor of the default estimate.
pub const ESTIMATE_FACTOR: u64 = 4;

/// The default peak-memory estimate of a compile (07): 4 × the model's size + 256 MiB.
pub fn memory_estimate(plan: &Plan) -> u64 {
    plan.model_facts
        .size
        .saturating_mul(ESTIMATE_FACTOR)
        .saturating_add(ESTIMATE_BASE)
}

/// nxcc's own pipeline, run by [`run_pipeline`] in a worker process, without a cache.
#[derive(Debug, Clone, Default)]
pub struct Pipeline {
    /// The `--cache_dir` the daemon was given (this engine compiles without a cache).
    pub cache_dir: Option<PathBuf>,
}

impl Engine for Pipeline {
    fn run(&self, plan: &Plan, opts: &Options<'_>) -> Finished {
        let outcome = run_pipeline(plan, opts);
        Finished {
            exit_status: outcome.exit_status,
            error_lines: outcome.error_lines,
            cache: CacheUse::Off,
            jobs: outcome.jobs,
        }
    }

    fn describe(&self) -> String {
        match &self.cache_dir {
            None => "nxcc's pipeline, no compile cache".to_string(),
            Some(dir) => format!(
                "nxcc's pipeline; the compile cache is not available in this build, so --cache_dir {} is not used and compiles run uncached",
                dir.display()
            ),
        }
    }
}

/// The engine for a daemon's configuration, or why there is none.
pub fn select(config: &EngineConfig) -> Result<Arc<dyn Engine>, String> {
    if let Some(compiler) = &config.compiler {
        return Err(format!(
            "argument --compiler: the external-compiler engine is not available in this build (cannot run {} for compiles)",
            compiler.display()
        ));
    }
    Ok(Arc::new(Pipeline {
        cache_dir: config.cache_dir.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::StaticProbe;

    fn plan_for(size: u64) -> Plan {
        let args = match crate::cli::parse(
            "nxcc",
            &["compile", "m.pb", "--target", "trn2"].map(String::from),
        )
        .unwrap()
        {
            crate::cli::Command::Compile(c) => c,
            _ => unreachable!(),
        };
        let probe = StaticProbe {
            model_size: size,
            ..StaticProbe::new("/launch")
        };
        crate::plan::build(&args, &probe).unwrap()
    }

    #[test]
    fn default_estimate_is_four_times_the_model_plus_256_mib() {
        assert_eq!(memory_estimate(&plan_for(0)), 256 << 20);
        assert_eq!(memory_estimate(&plan_for(1 << 20)), (4 << 20) + (256 << 20));
        assert_eq!(
            memory_estimate(&plan_for(u64::MAX / 2)),
            u64::MAX,
            "saturates"
        );
        let engine = select(&EngineConfig::default()).unwrap();
        assert_eq!(engine.memory_estimate(&plan_for(1000)), 4000 + (256 << 20));
    }

    #[test]
    fn selection() {
        let e = select(&EngineConfig::default()).unwrap();
        assert!(e.cache_stats().is_null());
        assert!(e.describe().contains("no compile cache"));
        let e = select(&EngineConfig {
            cache_dir: Some("/c".into()),
            compiler: None,
        })
        .unwrap();
        assert!(e.describe().contains("--cache_dir /c"), "{}", e.describe());
        let err = select(&EngineConfig {
            cache_dir: None,
            compiler: Some("/opt/neuronx-cc".into()),
        })
        .err()
        .unwrap();
        assert!(err.contains("/opt/neuronx-cc"), "{err}");
        assert_eq!(CacheUse::Hit.as_str(), "hit");
        assert_eq!(CacheUse::Miss.as_str(), "miss");
        assert_eq!(CacheUse::Off.as_str(), "off");
    }
}
