//! nxcc — a compile driver for the AWS Neuron compiler.
//!
//! It accepts the `neuronx-cc` 2.24 command line, builds the compile plan exactly as the original
//! driver's `buildPipeline` does (three collectors concatenated, the `--meta-module` collapse, the
//! backend gate, the walrus pass list), prints it (`--dry-run`) or runs it under supervision.
//!
//! The product, over the crates below it (`nxcc-core`: layers 0–7; `nxcc-remote`: layer 8), which
//! it re-exports under their own names. Its layers, bottom to top (a module imports only from
//! layers below its own; the Layout table of CONTRIBUTING.md assigns them):
//! 9. [`compile`]: the one entry point of a compile — a session, and the cache layers and the
//!    way the plan runs composed into one stack; [`reproducer`]: a failed compile's bundle, and
//!    its replay (`nxcc reproduce`, handed the entry point);
//! 10. [`parallel`]: many compiles at once; [`daemon`]: the compile daemon and its client;
//! 11. [`shim`]: `neuronx-cc` on PATH served by the host's compile daemon (`nxcc shim`);
//! 12. [`manual`]: the whole command line described once, and what is generated from it
//!     (shell completions, the manual pages);
//! 13. [`driver`]: the thin entry point `main` calls.
//!
//! The simulated toolchain (`nxcc-sim`) is no part of it: `nxcc`'s `main` registers it behind
//! [`toolchain::Simulator`].

#![warn(missing_docs)]

pub use nxcc_core::{
    admission, cache, cli, engine, environ, error, forkserver, fsx, hlo, job_name, jobs, lockfile,
    neff, neuron_cache, npy, objstore, plan, profile, recon, result, run, shell, snapshot,
    toolchain, words, ORIGINAL_VERSION, VERSION,
};
pub use nxcc_remote as remote;

pub mod compile;
pub mod daemon;
pub mod driver;
pub mod manual;
pub mod parallel;
pub mod reproducer;
pub mod shim;
