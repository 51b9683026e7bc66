//! The compile cache (spec 07-cache-parallel.md): a directory of finished compiles, keyed on
//! everything that can change the output, safe for any number of concurrent compiles and processes.
//!
//! - [`key`]: the key — the model's digest, the invocation's normalised inputs (every flag
//!   that can change the output), the toolchain's identity ([`identity`]: what the tools are, one rule
//!   for the key and a remote action), the plan format version;
//! - [`digests`]: digests remembered per stat identity (git's racy rule), so an unchanged model
//!   or tool is not hashed again; `hashing`: feeding a file to blake3;
//! - [`store`]: the layout `DIR/nxcc-v1/<2 hex>/<key>/` (`model.neff`, `meta.json`, `log.txt`, or
//!   `failed.json`), publishing by rename, eviction by rename, verified reads; `keylock`: one
//!   compile per key across processes and hosts (a lease lock);
//! - [`meta`]: `meta.json` and `failed.json`;
//! - `config`: whether and where a compile uses the cache ([`CacheConfig`]);
//! - [`layer`]: [`LocalStore`] — the cache as a layer of the compile stack, what `nxcc compile
//!   --cache_dir`, `parallel-compile` and the daemon compile through;
//! - [`shared`]: the shared tier — the same entries in an object store (`--cache_dir
//!   s3://...`) behind the local directory, through a storage interface a backend implements;
//! - [`mod@estimate`]: the memory estimate of a compile, learned from earlier compiles;
//! - [`maintain`]: stats, verify, gc, clear; [`command`]: `nxcc cache ...` (one typed struct per
//!   action), `actions` on nxcc's cache and `neuron` on the framework's;
//! - `chunks`: large files read with the reads overlapped with hashing; `host`: the host and
//!   boot the per-host files are named by.
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
//! use nxcc_core::cache::{self, CacheConfig};
//! use nxcc_core::engine::Engine;
//! # fn invocation() -> nxcc_core::plan::Invocation { unimplemented!() }
//! let inv = invocation();
//! // The compile's own --cache_dir / --no_cache / --retry_failed_compilation, else the default.
//! let cfg = CacheConfig::of(&inv, Some(Path::new(&cache::default_dir()))).unwrap();
//! let engine = Engine::Pipeline; // or Engine::external("/opt/venv/bin/neuronx-cc")
//! // Keyed with the cache's settings (its configuration file, the compile's cache flags).
//! let key = cfg.key(&inv, &engine).ok();
//! let bytes = match &key {
//!     Some(k) => cache::estimate(cfg.cache().as_ref(), k).bytes,
//!     None => cache::estimate::formula_estimate(&cache::estimate::Features::of_plan(&inv.plan)),
//! };
//! // ... admission.acquire(bytes, ...), then compile with `key` ...
//! # let _ = bytes;
//! ```

pub(crate) mod actions;
pub(crate) mod args;
pub(crate) mod chunks;
pub mod command;
pub(crate) mod config;
pub mod counters;
pub mod digests;
pub mod engine_identity;
pub mod estimate;
pub mod evict;
pub mod explain;
pub mod features;
pub(crate) mod hashing;
pub(crate) mod host;
pub mod identity;
pub mod index;
pub mod key;
pub(crate) mod keylock;
pub mod layer;
pub(crate) mod layers;
pub mod maintain;
pub mod meta;
pub(crate) mod neuron;
pub mod settings;
pub mod shared;
pub mod store;

pub use config::{
    check_local, default_dir, CacheConfig, CacheStatus, CACHE_URL_ENV, DEFAULT_DIR_TEXT,
};
pub use engine_identity::{EngineIdentity, ToolchainIdentity};
pub use estimate::{estimate, Basis, Estimate};
pub use key::Key;
pub use layer::{LocalStore, TIER_LOCAL, TIER_SECONDARY, TIER_SHARED, TIER_SHARED_SECONDARY};
pub use store::{Cache, Lookup};
