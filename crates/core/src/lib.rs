//! nxcc's core: everything a compile needs below the remote client and the product.
//!
//! It accepts the `neuronx-cc` 2.24 command line, builds the compile plan exactly as the original
//! driver's `buildPipeline` does (three collectors concatenated, the `--meta-module` collapse, the
//! backend gate, the walrus pass list), prints it (`--dry-run`) or runs it under supervision, and
//! keeps the compile cache.
//!
//! Layers, bottom to top (a module imports only from layers below its own; the Layout table of
//! CONTRIBUTING.md assigns them):
//! 0. [`error`], [`shell`], [`npy`], `provenance`, [`fsx`] (atomic files, unique names,
//!    directories walked without following links), [`words`] (counts with their nouns),
//!    [`job_name`] (which job a failure, an event or a figure is about), [`objstore`] (the
//!    object-store seam a registered client implements);
//! 1. [`run`] (running child processes under supervision: process groups, timeouts, signals,
//!    the supervisor and its report pipe — nothing about compiling), [`cli`], [`profile`] (a run
//!    of compiles as a Chrome trace and an HTML page), [`snapshot`] (a model's bytes read once,
//!    by the kernel, into a private copy);
//! 2. [`admission`], [`neff`], [`hlo`] (reading HLO modules), [`toolchain`] (with the simulated
//!    toolchain's seam, [`toolchain::Simulator`], and `nxcc toolchain`), [`result`] (how a
//!    compile ended, as data), [`forkserver`] (a single-threaded helper that forks workers for a
//!    process with threads), [`lockfile`];
//! 3. [`jobs`]: the registry and one module per job kind; [`neuron_cache`]: the framework's
//!    compile cache;
//! 4. [`plan`]: normalisation, collectors, walrus passes, the name filter, the dry run;
//! 5. [`engine`]: what runs a compile — the session, the seam (the ways to run a plan and the
//!    cache layers in front of them), the pipeline (work dir, log, worker, executor, metrics,
//!    failure reports) and an external compiler as one job;
//! 6. [`cache`]: the compile cache and the memory estimates;
//! 7. [`environ`]: which environment variables a compile request may carry.
//!
//! [`recon`] holds every reconstructed rule, each in one named place, in the layer of what it
//! decides.

#![warn(missing_docs)]

pub mod admission;
pub mod cache;
pub mod cli;
pub mod engine;
pub mod environ;
pub mod error;
pub mod forkserver;
pub mod fsx;
pub mod hlo;
pub mod job_name;
pub mod jobs;
pub mod lockfile;
pub mod neff;
pub mod neuron_cache;
pub mod npy;
pub mod objstore;
pub mod plan;
pub mod profile;
pub(crate) mod provenance;
pub mod recon;
pub mod result;
pub mod run;
pub mod shell;
pub mod snapshot;
pub mod toolchain;
pub mod words;

/// nxcc's own version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The version of the original driver whose behaviour nxcc reproduces.
pub const ORIGINAL_VERSION: &str = "neuronx-cc 2.24.5133.0";
