//! nxcc — a compile driver for the AWS Neuron compiler.
//!
//! It accepts the `neuronx-cc` 2.24 command line, builds the compile plan exactly as the original
//! driver's `buildPipeline` does (three collectors concatenated, the `--meta-module` collapse, the
//! backend gate, the walrus pass list), prints it (`--dry-run`) or runs it under supervision.
//!
//! Layers, bottom to top (a module imports only from layers below its own; the README's Layout
//! table assigns them and `tests/layers.rs` checks every `crate::` path against it):
//! 0. [`error`], [`shell`], [`npy`], [`provenance`], [`fsx`] (atomic files, unique names,
//!    directories walked without following links), [`words`] (counts with their nouns);
//! 1. [`run`] (running child processes under supervision: process groups, timeouts, signals,
//!    the supervisor and its report pipe — nothing about compiling), [`cli`];
//! 2. [`admission`], [`neff`], [`hlo`] (reading HLO modules), [`toolchain`] (with the simulated toolchain's seam, [`toolchain::Simulator`]),
//!    [`result`] (how a compile ended, as data),
//!    [`forkserver`] (a single-threaded helper that forks workers for a process with threads);
//! 3. [`jobs`]: the registry and one module per job kind;
//! 4. [`plan`]: normalisation, collectors, walrus passes, the name filter, the dry run;
//! 5. [`engine`]: what runs a compile — the session, the seam (the ways to run a plan and the
//!    cache layers in front of them), the pipeline (work dir, log, worker, executor, metrics,
//!    failure reports) and an external compiler as one job; [`sim`]: the simulated toolchain (a
//!    test instrument);
//! 6. [`cache`]: the compile cache and the memory estimates;
//! 7. [`environ`]: which environment variables a compile request may carry;
//! 8. [`remote`]: the Remote Execution API client (remote cache, remote execution) and
//!    `nxcc worker`;
//! 9. [`compile`]: the one entry point of a compile — a session, and the cache layers and the
//!    way the plan runs composed into one stack;
//! 10. [`parallel`]: many compiles at once; [`daemon`]: the compile daemon and its client;
//! 11. [`shim`]: `neuronx-cc` on PATH served by the host's compile daemon (`nxcc shim`);
//! 12. [`driver`]: the thin entry point `main` calls.
//!
//! [`recon`] holds every reconstructed rule, each in one named place, in the layer of what it
//! decides.

#![warn(missing_docs)]

pub mod admission;
pub mod cache;
pub mod cli;
pub mod compile;
pub mod daemon;
pub mod driver;
pub mod engine;
pub mod environ;
pub mod error;
pub mod forkserver;
pub mod fsx;
pub mod hlo;
pub mod jobs;
pub mod lockfile;
pub mod neff;
pub mod neuron_cache;
pub mod npy;
pub mod parallel;
pub mod plan;
pub mod provenance;
pub mod recon;
pub mod remote;
pub mod result;
pub mod run;
pub mod shell;
pub mod shim;
pub mod sim;
pub mod toolchain;
pub mod words;

/// nxcc's own version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The version of the original driver whose behaviour nxcc reproduces.
pub const ORIGINAL_VERSION: &str = "neuronx-cc 2.24.5133.0";
