//! Every rule nxcc reconstructed where all sources are silent (provenance tag RECON), each in one
//! small, named, documented place, so that any of them can be corrected without touching anything
//! else. Nothing outside this module decides a RECON question on its own: the plan builder, the
//! jobs and the NEFF writer call these functions and constants.
//!
//! - `cli`: defaults of the flag table;
//! - `plan`: defaults and normalisation steps, `--pipeline`, the name filter, the walrus pass
//!   list gates;
//! - `jobs`: which optional tool flags appear when;
//! - [`toolchain`]: where tools are looked for;
//! - [`neff`]: header field placement, UUID and IR-signature derivation, engine flags, arch mode;
//! - `failure`: how a job's end is read as a failure (the model's, the environment's, a kill);
//! - [`cache`]: which failed compiles the compile cache remembers;
//! - [`framework`]: how the framework's compile wrapper runs the compiler on a cache entry (argv,
//!   work directory, its own flags, legacy entries) and locks its cache.

pub mod cache;
pub(crate) mod cli;
pub(crate) mod failure;
pub mod framework;
pub(crate) mod jobs;
pub mod neff;
pub(crate) mod plan;
pub mod toolchain;
