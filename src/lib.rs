//! nxcc — a compile driver for the AWS Neuron compiler.
//!
//! It accepts the `neuronx-cc` 2.24 command line, builds the compile plan exactly as the original
//! driver's `buildPipeline` does (three collectors concatenated, the `--meta-module` collapse, the
//! backend gate, the walrus pass list), prints it (`--dry-run`) or runs it under supervision.
//!
//! Layers, bottom to top (no module imports from a layer above it):
//! - [`cli`], [`error`], [`provenance`], [`neff`], [`hlo`] (reading HLO modules), [`toolchain`], [`run`] (running child
//!   processes under supervision: process groups, timeouts, signals, measurements);
//! - [`jobs`]: the registry and one module per job kind;
//! - [`plan`]: normalisation, collectors, walrus passes, the name filter, the dry run;
//!   [`recon`]: every reconstructed rule, each in one named place;
//! - [`engine`]: what runs a compile (nxcc's pipeline, or an external compiler as one job);
//!   [`cache`]: the compile cache and the memory estimates; [`parallel`]: many compiles at once;
//! - [`sim`]: the simulated toolchain (a test instrument);
//! - [`admission`]: admission control for many compiles at once;
//! - [`daemon`]: the compile daemon (`nxcc daemon`) and its client (`nxcc compile --daemon`);
//! - [`driver`]: the thin entry point `main` calls.

pub mod admission;
pub mod cache;
pub mod cli;
pub mod daemon;
pub mod driver;
pub mod engine;
pub mod error;
pub mod hlo;
pub mod jobs;
pub mod neff;
pub mod npy;
pub mod parallel;
pub mod plan;
pub mod provenance;
pub mod recon;
pub mod run;
pub mod shell;
pub mod sim;
pub mod toolchain;

/// nxcc's own version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The version of the original driver whose behaviour nxcc reproduces.
pub const ORIGINAL_VERSION: &str = "neuronx-cc 2.24.5133.0";
