//! Running child processes under supervision — the toolbox at the bottom, knowing nothing about
//! compiling, plans or jobs:
//!
//! - [`process`] — one child in its own process group with line capture, `wait4` measurements,
//!   timeout and cancellation;
//! - [`signals`] — nxcc's own SIGINT/SIGTERM/SIGHUP handling and the signal names;
//! - [`supervisor`] — runs a worker child in its own session and survives it;
//! - `events` — the worker's report pipe (lines of JSON; what they mean is the caller's);
//! - `handoff` — the bytes an executed worker is handed (what they mean is the caller's);
//! - `lines` — the one line reader; [`os`] — the operating system's plumbing, each piece once.

pub(crate) mod events;
pub(crate) mod handoff;
pub(crate) mod lines;
pub mod os;
pub mod process;
pub mod signals;
pub mod supervisor;
