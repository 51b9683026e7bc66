//! The compile cache (07): a directory of finished compiles, keyed on everything that can change
//! the output, safe for any number of concurrent compiles and processes.
//!
//! - [`key`]: the key — the model's bytes, the normalised arguments minus
//!   [`key::EXCLUDED_ARGS`], the toolchain's identity, the plan format version;
//! - [`store`]: the layout `DIR/nxcc-v1/<2 hex>/<key>/` (`model.neff`, `meta.json`, `log.txt`, or
//!   `failed.json`), publishing by rename, eviction by rename, per-key `flock`s, verified reads;
//! - [`meta`]: `meta.json` and `failed.json`;
//! - [`compile`]: [`compile_cached`] — a compile through the cache, what `nxcc compile
//!   --cache_dir`, `parallel-compile` and the daemon call;
//! - [`estimate`]: the memory estimate of a compile, learned from earlier compiles;
//! - [`maintain`]: stats, verify, gc, clear; [`command`]: `nxcc cache ...`;
//! - [`chunks`]: large files read with the reads overlapped with hashing.
//!
//! ```no_run
//! use nxcc::cache::{compile_cached, CacheConfig};
//! use nxcc::engine::Engine;
//! use nxcc::run::pipeline::Options;
//! # fn plan() -> nxcc::plan::Plan { unimplemented!() }
//! let plan = plan();
//! let cfg = CacheConfig::at("/var/tmp/neuron-compile-cache");
//! let done = compile_cached(&plan, &Options::terminal(), &cfg, &Engine::Pipeline);
//! println!("exit {} cache {}", done.outcome.exit_status, done.cache.as_str());
//! ```

pub mod chunks;
pub mod command;
pub mod compile;
pub mod estimate;
pub mod key;
pub mod maintain;
pub mod meta;
pub mod store;

pub use compile::{
    check_local, compile_cached, compile_cached_keyed, CacheConfig, CacheStatus, CachedOutcome,
    DEFAULT_DIR,
};
pub use estimate::{estimate, Basis, Estimate};
pub use key::{Key, EXCLUDED_ARGS};
pub use store::{Cache, Lookup};
