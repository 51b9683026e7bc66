//! The compile cache (07): a directory of finished compiles, keyed on everything that can change
//! the output, safe for any number of concurrent compiles and processes.
//!
//! - [`key`]: the key — the model's bytes, the normalised arguments minus
//!   [`key::EXCLUDED_ARGS`], the toolchain's identity, the plan format version;
//! - [`store`]: the layout `DIR/nxcc-v1/<2 hex>/<key>/` (`model.neff`, `meta.json`, `log.txt`, or
//!   `failed.json`), publishing by rename, eviction by rename, per-key `flock`s, verified reads;
//! - [`meta`]: `meta.json` and `failed.json`;
//! - [`config`]: whether and where a compile uses the cache ([`CacheConfig`]);
//! - [`layer`]: [`LocalStore`] — the cache as a layer of the compile stack, what `nxcc compile
//!   --cache_dir`, `parallel-compile` and the daemon compile through;
//! - [`mod@estimate`]: the memory estimate of a compile, learned from earlier compiles;
//! - [`maintain`]: stats, verify, gc, clear; [`command`]: `nxcc cache ...`;
//! - [`chunks`]: large files read with the reads overlapped with hashing.
//!
//! Guarantees:
//! - **An entry holds only what its compile wrote.** The NEFF of an entry is the file the
//!   compile itself wrote into the entry's temporary directory — a fresh `0700` directory under
//!   the cache root that no other compile knows — and its blake3 is computed from that file. It
//!   is never read back from `--output` or any other path another process can write, so two
//!   compiles racing for one `--output` each store their own NEFF under their own key.
//! - **Nothing outside the cache is touched.** The root is checked as ssh checks its files, and
//!   everything below it is reached without following links (see [`store`]).
//! - **Only failures of the model are remembered** ([`crate::recon::cache::remembers`]).
//! - **A hit is verified**: the NEFF is copied out against its recorded blake3, or not at all.
//!
//! A scheduler (the daemon, `parallel-compile`) keys the compile once, estimates its memory from
//! the key, admits it, and compiles with the same key (through `crate::compile`, which puts the
//! store in front of the way the plan runs):
//!
//! ```no_run
//! use std::path::Path;
//! use nxcc::cache::{self, CacheConfig, Key};
//! use nxcc::engine::Engine;
//! # fn plan() -> nxcc::plan::Plan { unimplemented!() }
//! let plan = plan();
//! // The compile's own --cache_dir / --no_cache / --retry_failed_compilation, else the default.
//! let cfg = CacheConfig::from_plan(&plan, Some(Path::new(&cache::default_dir()))).unwrap();
//! let engine = Engine::Pipeline; // or Engine::external("/opt/venv/bin/neuronx-cc")
//! let key = Key::compute(&plan, &engine).ok();
//! let bytes = match &key {
//!     Some(k) => cache::estimate(cfg.cache().as_ref(), k).bytes,
//!     None => cache::estimate::formula_estimate(&cache::estimate::Features::of_plan(&plan)),
//! };
//! // ... admission.acquire(bytes, ...), then compile with `key` ...
//! # let _ = bytes;
//! ```

pub mod chunks;
pub mod command;
pub mod config;
pub mod estimate;
pub mod features;
pub mod key;
pub mod layer;
pub mod maintain;
pub mod meta;
pub mod store;

pub use config::{
    check_local, default_dir, CacheConfig, CacheStatus, CACHE_URL_ENV, DEFAULT_DIR_TEXT,
};
pub use estimate::{estimate, Basis, Estimate};
pub use key::{Key, EXCLUDED_ARGS};
pub use layer::LocalStore;
pub use store::{Cache, Lookup};
