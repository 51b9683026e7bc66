//! Running child processes under supervision: the toolbox the executor, the supervisor (which
//! runs the worker, this same binary re-executed), the parallel compiler and the daemon share.
//!
//! This layer knows nothing about compiling — no job names, no NEFF. It owns:
//! - [`process`]: running one child in its own process group with line-by-line output capture,
//!   `wait4` measurements (wall, user and system CPU time, peak RSS), a timeout, cancellation,
//!   and the guarantee that nothing the child started outlives the run;
//! - [`signals`]: reacting to SIGINT, SIGTERM and SIGHUP sent to nxcc itself (a minimal
//!   async-signal-safe handler, a self-pipe and a watcher thread), the exit status each of them
//!   maps to, and the parent-death signal for the worker.

pub mod process;
pub mod signals;
