//! Running the plan (04-run.md), in layers:
//!
//! - [`process`] and [`signals`] — the toolbox, knowing nothing about compiling: one child in its
//!   own process group with line capture, `wait4` measurements, timeout and cancellation; and
//!   nxcc's own SIGINT/SIGTERM/SIGHUP handling;
//! - [`supervisor`] — runs the worker child in its own session and survives it (still nothing about
//!   compiling);
//! - [`executor`] — in the worker: the plan's jobs in order, each job's steps, failures in the
//!   original's words; it knows nothing about particular jobs;
//! - [`pipeline`] — `runPipeline`: work dir, log, toolchain, the worker, the final report, metrics;
//! - [`worker`] — the worker's entry point;
//! - helpers: [`workdir`], [`log`], [`progress`], [`metrics`], [`timeline`], [`failure`],
//!   [`events`].

pub mod events;
pub mod executor;
pub mod failure;
pub mod log;
pub mod metrics;
pub mod pipeline;
pub mod process;
pub mod progress;
pub mod signals;
pub mod supervisor;
pub mod timeline;
pub mod workdir;
pub mod worker;
