//! What runs a compile once the cache layers decided it must run (07, 04-run.md), and what every
//! way of running one shares:
//!
//! - [`session`] — one compile's session (the plan, its log, its events, its cancellation, its
//!   timings), built once per compile and passed down; [`result`] — what a compile gives back;
//! - [`strategy`] — the seam: the ways to run a plan ([`strategy::Strategy`]) and the caches in
//!   front of them ([`strategy::Layer`]), composed in a [`strategy::Stack`];
//! - [`Engine`] — nxcc's own `pipeline` (the worker, the jobs, the native tools) or an
//!   `external` compiler run as one supervised job (`--compiler PATH`): both strategies give
//!   the same result — a typed status, error lines in the original's words, per-job figures —
//!   so the cache, the memory-aware scheduling and the reports work the same with either;
//! - [`worker`] — the worker's entry point; [`handoff`] — a worker's plan through the daemon's
//!   fork server; `executor` — in the worker: the plan's jobs in order, each job's steps; it
//!   knows nothing about particular jobs;
//! - [`failure`] — how a failed job or worker is reported, in the original's words;
//! - helpers: `workdir`, [`log`], `progress`, [`metrics`], `reports`, [`events`].

pub mod events;
pub(crate) mod executor;
pub(crate) mod external;
pub mod failure;
pub mod handoff;
pub mod log;
pub mod metrics;
pub(crate) mod pipeline;
pub(crate) mod progress;
pub(crate) mod reports;
pub mod result;
pub mod session;
pub mod strategy;
pub(crate) mod workdir;
pub mod worker;

/// What a compile checks of `--output` before anything runs (a dry run checks the same).
pub use pipeline::check_output;

use std::path::{Path, PathBuf};

use crate::plan::Plan;
use result::CompileResult;
use session::Session;
use strategy::Strategy;

/// The engine a compile runs on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Engine {
    /// nxcc's own pipeline.
    #[default]
    Pipeline,
    /// `PATH compile <args> --output <out>`, one supervised job.
    External(ExternalCompiler),
}

/// An external compiler (an installed `neuronx-cc`, or anything that takes its command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalCompiler {
    /// A path, or a bare name looked up in `PATH`.
    pub program: PathBuf,
}

impl Engine {
    /// The external-compiler engine for `program`.
    pub fn external(program: impl Into<PathBuf>) -> Engine {
        Engine::External(ExternalCompiler {
            program: program.into(),
        })
    }

    /// `pipeline` or `external` (for reports and `meta.json`).
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Pipeline => "pipeline",
            Engine::External(_) => "external",
        }
    }

    /// Why a compile of `plan` on this engine will write no NEFF, when it is known beforehand:
    /// the plan's prediction for nxcc's own pipeline (`-O3`, a `--pipeline` that stops before
    /// Kelper). An external compiler's result is what it does: nothing is predicted for it.
    pub fn no_neff<'p>(&self, plan: &'p Plan) -> Option<&'p str> {
        match self {
            Engine::Pipeline => plan.no_neff.as_deref(),
            Engine::External(_) => None,
        }
    }
}

impl Strategy for Engine {
    fn run(&self, session: &Session, product: Option<&Path>) -> CompileResult {
        match self {
            Engine::Pipeline => pipeline::run(session, product),
            Engine::External(ext) => external::run(session, ext, product),
        }
    }
}

/// A program as `execvp` would find it: a path with a `/` as is (made absolute against the
/// current directory), a bare name through `PATH`; the name itself if nothing is found.
pub fn resolve_program(program: &Path) -> PathBuf {
    if program.components().count() > 1 || program.is_absolute() {
        return std::env::current_dir()
            .map(|d| d.join(program))
            .unwrap_or_else(|_| program.to_path_buf());
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|c| crate::toolchain::is_executable(c))
        .unwrap_or_else(|| program.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_like_execvp() {
        let sh = resolve_program(Path::new("sh"));
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(
            resolve_program(Path::new("/bin/true")),
            PathBuf::from("/bin/true")
        );
        let rel = resolve_program(Path::new("./x/y"));
        assert!(rel.is_absolute() && rel.ends_with("x/y"));
        assert_eq!(
            resolve_program(Path::new("no-such-program-anywhere")),
            PathBuf::from("no-such-program-anywhere")
        );
        assert_eq!(Engine::default().name(), "pipeline");
        assert_eq!(Engine::external("x").name(), "external");
    }
}
