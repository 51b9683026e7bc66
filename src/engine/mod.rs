//! What runs a compile once the cache decided it must run (07, 04-run.md): nxcc's own pipeline
//! ([`pipeline::run_pipeline`]: the worker, the jobs, the native tools), or an external compiler
//! run as one supervised job (`--compiler PATH`, see [`external`]). Both give the same
//! [`result::CompileResult`] — a typed status, error lines in the original's words, per-job figures — so the
//! cache, the memory-aware scheduling and the reports work the same with either.
//!
//! - [`compile`] — one compile's options and outcome, as every engine takes and gives them;
//! - [`pipeline`] — `runPipeline`: work dir, log, toolchain, the worker, the final report, metrics;
//! - [`worker`] — the worker's entry point; [`handoff`] — a worker's plan through the daemon's
//!   fork server; [`executor`] — in the worker: the plan's jobs in
//!   order, each job's steps; it knows nothing about particular jobs;
//! - [`failure`] — how a failed job or worker is reported, in the original's words;
//! - [`external`] — the external-compiler engine;
//! - helpers: [`workdir`], [`log`], [`progress`], [`metrics`], [`timeline`], [`events`].

pub mod compile;
pub mod events;
pub mod executor;
pub mod external;
pub mod failure;
pub mod handoff;
pub mod log;
pub mod metrics;
pub mod pipeline;
pub mod progress;
pub mod result;
pub mod timeline;
pub mod workdir;
pub mod worker;

use std::path::{Path, PathBuf};

use crate::engine::pipeline::{run_pipeline_producing, CompileResult, Options};
use crate::plan::Plan;

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
}

/// Run a compile of `plan` on `engine` (no cache involved).
pub fn run(plan: &Plan, opts: &Options, engine: &Engine) -> CompileResult {
    run_producing(plan, opts, engine, None)
}

/// [`run`], the NEFF written to `product` too: a new file in a directory private to the caller
/// (the compile cache's temporary entry), written by the compile itself — never copied from
/// `--output`, which another process may replace at any time. A product that cannot be written
/// costs the compile nothing; the file is then absent.
pub fn run_producing(
    plan: &Plan,
    opts: &Options,
    engine: &Engine,
    product: Option<&Path>,
) -> CompileResult {
    match engine {
        Engine::Pipeline => run_pipeline_producing(plan, opts, product),
        Engine::External(ext) => external::run_producing(plan, opts, ext, product),
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
        .find(|c| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(c).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
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
