//! The seam between the daemon and whatever produces a NEFF: an [`Engine`] prepares one planned
//! compile (its memory estimate, and its cache key) and runs it, saying whether the compile cache
//! answered it.
//!
//! The daemon's `--cache_dir DIR` and `--compiler PATH` take effect here, and only here: they are
//! carried in an [`EngineConfig`] to [`select`]. Every compile goes through the compile cache
//! ([`crate::cache`]) — on by default for the daemon, in [`crate::cache::default_dir`] unless
//! `--cache_dir` says otherwise, and subject to the request's own `--cache_dir`, `--no_cache` and
//! `--retry_failed_compilation` — and runs on nxcc's pipeline or, with `--compiler`, on the
//! external-compiler engine ([`crate::engine`]). The memory estimate admission control reserves
//! is the cache's learned one ([`crate::cache::estimate()`]): the peak recorded for the same compile,
//! else for the most similar earlier one, else the formula [`crate::cache::estimate::FORMULA`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cache::{self, CacheConfig, EngineIdentity, Key, ToolchainIdentity};
use crate::compile::{Compiled, Request};
use crate::engine::result::CompileResult;
use crate::engine::session::Options;
use crate::plan::Invocation;
use crate::result::{Environment, Failure};

pub use super::wire::CacheUse;

/// What the daemon's command line says about engines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineConfig {
    /// `--cache_dir DIR` (`None`: not given; [`crate::cache::default_dir`]).
    pub cache_dir: Option<PathBuf>,
    /// `--compiler PATH`: an external compiler run as one supervised job per compile.
    pub compiler: Option<PathBuf>,
    /// `--remote grpc://HOST:PORT` (or `--remote-cache`): every compile goes to a Remote
    /// Execution API server behind the local cache ([`crate::compile`]).
    pub remote: Option<crate::remote::RemoteConfig>,
}

/// A compile made ready to run: what admission control reserves for it, and what the run reuses.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The estimated peak memory, bytes.
    pub estimate: u64,
    cache: Result<CacheConfig, String>,
    key: Option<Key>,
}

/// Runs planned compiles. Shared by every compile of the daemon (several at once).
pub trait Engine: Send + Sync {
    /// Key and estimate one compile (reads the model once). Blocking.
    fn prepare(&self, invocation: &Invocation) -> Prepared;

    /// Run one compile: `options` carries its console sink, events callback, cancellation and
    /// extra worker environment. Blocking; called from a blocking thread.
    fn run(&self, invocation: &Invocation, prepared: Prepared, options: Options<'_>) -> Compiled;

    /// Whether a compile of `invocation` would be a hit of this engine's cache, and on a miss what
    /// differs from the nearest entries (nothing is written); `Err`: the error line. Blocking.
    fn explain(&self, invocation: &Invocation) -> Result<cache::explain::Explanation, String>;

    /// One line for the daemon's log and status: what runs the compiles.
    fn describe(&self) -> String;

    /// What runs the compiles, named as a reproducer bundle names it: nxcc's pipeline, or the
    /// external compiler's path and identity as the cache keys it (remembered in this process
    /// by the compiler's stat identity). What every client may see: nothing of a request.
    /// Blocking (hashes the compiler, asks its version the first time).
    fn identity(&self) -> EngineIdentity;

    /// The toolchain a prepared compile runs with: where its tools are, whether it is the
    /// simulated one, and its identity as the compile's key records it (computed, as the key
    /// would, when the compile has no key). What its client may see. Blocking (may hash tools).
    fn toolchain(&self, invocation: &Invocation, prepared: &Prepared) -> ToolchainIdentity;

    /// The daemon's compile cache (`None` without one), for `GET /v1/status`.
    fn cache_dir(&self) -> Option<&Path>;
}

/// The daemon's engine: the compile cache in front of nxcc's pipeline or an external compiler.
#[derive(Debug, Clone)]
pub struct Cached {
    /// The daemon's cache directory (a request's own `--cache_dir` / `--no_cache` win).
    pub cache_dir: PathBuf,
    /// What runs a compile the cache does not serve.
    pub engine: crate::engine::Engine,
    /// The daemon's remote server, if any (a request's own `--remote*` flags are not used).
    pub remote: Option<crate::remote::RemoteConfig>,
}

impl Engine for Cached {
    fn prepare(&self, invocation: &Invocation) -> Prepared {
        let cache = CacheConfig::of(invocation, Some(&self.cache_dir)).map_err(|e| e.to_string());
        let key = match &cache {
            Ok(cfg) if cfg.dir.is_some() => cfg.key(invocation, &self.engine).ok(),
            _ => None,
        };
        let estimate = match &key {
            Some(k) => {
                cache::estimate(cache.as_ref().ok().and_then(|c| c.cache()).as_ref(), k).bytes
            }
            None => cache::estimate::formula_estimate(&cache::estimate::Features::of_plan(
                &invocation.plan,
            )),
        };
        Prepared {
            estimate,
            cache,
            key,
        }
    }

    fn run(&self, invocation: &Invocation, prepared: Prepared, options: Options<'_>) -> Compiled {
        let cache = match prepared.cache {
            Ok(cfg) => cfg,
            Err(line) => {
                return Compiled::uncached(CompileResult::failed(
                    Failure::Environment(Environment::CacheDir),
                    vec![line],
                ))
            }
        };
        crate::compile::compile(Request {
            invocation,
            options,
            engine: &self.engine,
            cache,
            key: prepared.key,
            remote: self.remote.clone(),
        })
    }

    fn explain(&self, invocation: &Invocation) -> Result<cache::explain::Explanation, String> {
        let cfg = CacheConfig::of(invocation, Some(&self.cache_dir)).map_err(|e| e.to_string())?;
        cache::explain::of_invocation(invocation, &cfg, &self.engine)
    }

    fn describe(&self) -> String {
        let engine = match &self.engine {
            crate::engine::Engine::Pipeline => "nxcc's pipeline".to_string(),
            crate::engine::Engine::External(e) => {
                format!("the external compiler {}", e.program.display())
            }
        };
        let remote = match &self.remote {
            Some(r) => format!(
                ", and the {} at {}",
                match r.mode {
                    crate::remote::Mode::Execute => "remote execution service",
                    crate::remote::Mode::CacheOnly => "remote action cache",
                },
                r.address.url
            ),
            None => String::new(),
        };
        format!(
            "{engine}, through the compile cache in {}{remote}",
            self.cache_dir.display()
        )
    }

    fn identity(&self) -> EngineIdentity {
        EngineIdentity::of(&self.engine, &cache::digests::Table::memory_only())
    }

    fn toolchain(&self, invocation: &Invocation, prepared: &Prepared) -> ToolchainIdentity {
        ToolchainIdentity::planned(
            &invocation.plan,
            &self.engine,
            prepared.key.as_ref(),
            &cache::digests::Table::memory_only(),
        )
    }

    fn cache_dir(&self) -> Option<&Path> {
        Some(&self.cache_dir)
    }
}

/// The engine for a daemon's configuration, or why there is none.
pub fn select(config: &EngineConfig) -> Result<Arc<dyn Engine>, String> {
    let cache_dir = config
        .cache_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(cache::default_dir()));
    if let Some(d) = cache_dir.to_str() {
        cache::check_local(d).map_err(|e| format!("argument --cache_dir: {}", e.cause))?;
    }
    let engine = match &config.compiler {
        Some(program) => {
            let resolved = crate::engine::resolve_program(program);
            if !resolved.is_file() {
                return Err(format!(
                    "argument --compiler: {} is not an executable file",
                    program.display()
                ));
            }
            crate::engine::Engine::external(resolved)
        }
        None => crate::engine::Engine::Pipeline,
    };
    Ok(Arc::new(Cached {
        cache_dir,
        engine,
        remote: config.remote.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::StaticProbe;

    fn plan_for(size: u64, extra: &[&str]) -> Invocation {
        let mut argv: Vec<String> = ["compile", "m.pb", "--target", "trn2"]
            .map(String::from)
            .to_vec();
        argv.extend(extra.iter().map(|s| s.to_string()));
        let probe = StaticProbe {
            model_size: size,
            ..StaticProbe::new("/launch")
        };
        Invocation::from_argv("nxcc", &argv, &probe).unwrap()
    }

    #[test]
    fn without_a_cache_the_estimate_is_the_formula() {
        let dir = tempfile::tempdir().unwrap();
        let engine = select(&EngineConfig {
            cache_dir: Some(dir.path().into()),
            compiler: None,
            remote: None,
        })
        .unwrap();
        let p = engine.prepare(&plan_for(1000, &["--no_cache"]));
        // The static probe reads no graph: the formula over the file size alone.
        assert_eq!(p.estimate, 4000 + (320 << 20));
        assert!(p.key.is_none());
    }

    #[test]
    fn selection() {
        let dir = tempfile::tempdir().unwrap();
        let e = select(&EngineConfig {
            cache_dir: Some(dir.path().into()),
            compiler: None,
            remote: None,
        })
        .unwrap();
        assert!(
            e.describe()
                .contains("nxcc's pipeline, through the compile cache in"),
            "{}",
            e.describe()
        );
        assert_eq!(e.cache_dir(), Some(dir.path()));
        let e = select(&EngineConfig {
            cache_dir: Some(dir.path().into()),
            compiler: Some("/bin/sh".into()),
            remote: None,
        })
        .unwrap();
        assert!(
            e.describe().contains("the external compiler /bin/sh"),
            "{}",
            e.describe()
        );
        let err = select(&EngineConfig {
            cache_dir: None,
            compiler: Some("/nonexistent/neuronx-cc".into()),
            remote: None,
        })
        .err()
        .unwrap();
        assert!(err.contains("/nonexistent/neuronx-cc"), "{err}");
        let err = select(&EngineConfig {
            cache_dir: Some("s3://bucket/x".into()),
            compiler: None,
            remote: None,
        })
        .err()
        .unwrap();
        assert!(err.starts_with("argument --cache_dir:"), "{err}");
        assert_eq!(CacheUse::Hit.as_str(), "hit");
        assert_eq!(
            CacheUse::from(crate::cache::CacheStatus::Miss),
            CacheUse::Miss
        );
        assert_eq!(CacheUse::Off.as_str(), "off");
    }
}
