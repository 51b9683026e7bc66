//! Jobs: the registry (a name → job table, SEED's `job_factories`) and one module per job kind,
//! each saying what it reads, writes and runs.
//!
//! A job describes itself as [`Step`]s — a native tool invocation (argv, cwd, files) or an
//! in-process action. The same `steps` function serves the plan (with the predicted subgraphs, for
//! the dry run) and the run (with the subgraphs the Frontend really wrote), so what a dry run
//! prints is what a compile runs. The registry adds no ordering (SEED).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cli::inputs::CompileInputs;
use crate::cli::settings::Log;
use crate::error::NccError;
pub use crate::job_name::Job;
use crate::run::process::Spec;
use crate::toolchain::Toolchain;

/// The shell a [`Action::Shell`] step runs its script with.
pub const SHELL: &str = "/bin/bash";

pub(crate) mod backend;
pub(crate) mod bir_verifier;
pub(crate) mod frontend;
pub(crate) mod hlo_to_tensorizer;
pub(crate) mod infer_goldens;
pub(crate) mod kelper;
pub(crate) mod neff_wrapper;
pub(crate) mod save_temps;
pub mod static_io_transpose;
pub mod walrus_driver;
pub(crate) mod watchpoint;
pub(crate) mod xla_infer_goldens;

/// How a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RunsAs {
    /// A native tool in its own process (and process group).
    #[serde(rename = "subprocess")]
    Subprocess,
    /// Inside the worker process.
    #[serde(rename = "in-process")]
    InProcess,
    /// A native tool through `/bin/bash -c` (only the experimental Backend).
    #[serde(rename = "shell")]
    Shell,
}

/// The format of the model file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum ModelFormat {
    /// A binary `HloModuleProto`.
    #[serde(rename = "proto")]
    Proto,
    /// HLO text (the file starts with `HloModule`).
    #[serde(rename = "text")]
    Text,
}

impl ModelFormat {
    /// `--module-type` for `xla_infergoldens`: `text` when the file starts with `HloModule`.
    pub fn detect(first_bytes: &[u8]) -> ModelFormat {
        if first_bytes.starts_with(b"HloModule") {
            ModelFormat::Text
        } else {
            ModelFormat::Proto
        }
    }

    /// The `--module-type` spelling: `proto` or `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelFormat::Proto => "proto",
            ModelFormat::Text => "text",
        }
    }
}

/// Everything a job needs to describe (and later run) itself. Paths that come from the command
/// line are absolute (WIKI `getAbsPath`); work-dir paths are relative to the step's `cwd`.
#[derive(Debug, Clone, Copy)]
pub struct JobContext<'a> {
    /// What can change the NEFF, normalised.
    pub inputs: &'a CompileInputs,
    /// The compile's log and console settings (a tool is told its levels).
    pub log: &'a Log,
    /// The model file or directory, absolute.
    pub model: &'a Path,
    /// Whether the model is a binary proto or HLO text.
    pub model_format: ModelFormat,
    /// `--output`, absolute.
    pub output: &'a Path,
    /// `--logfile`, absolute.
    pub logfile: &'a Path,
    /// The walrus pass list, in order (joined into `walrus_driver --pass`).
    pub walrus_passes: &'a [String],
    /// Sorted.
    pub dge_on_levels: &'a [String],
    /// Subgraph directories relative to the work dir (`sg00`, ...), sorted.
    pub subgraphs: &'a [String],
    /// `value_input*.npy` files in the work dir, sorted.
    pub value_inputs: &'a [String],
    /// `W/gold-000.p` exists.
    pub gold_exists: bool,
    /// The toolchain the native tools come from; `None` when none is known (none was found, or it
    /// is resolved only when the compile runs).
    pub toolchain: Option<&'a Toolchain>,
    /// The work dir when running (`None` while planning: paths stay relative).
    pub work_dir: Option<&'a Path>,
}

impl JobContext<'_> {
    /// The path of a native tool: resolved in the toolchain (private first), or, for a
    /// simulated toolchain laid out at run time, where it will be.
    pub fn tool_path(&self, tool: &str) -> Option<PathBuf> {
        let tc = self.toolchain?;
        tc.resolve(tool)
            .or_else(|| tc.simulated.then(|| tc.expected(tool)))
    }

    /// `--lnc` after normalisation (1 if unset).
    pub fn logical_nc_config(&self) -> i64 {
        self.inputs.logical_nc_config()
    }

    /// `--target` (or the environment's target; planning refuses a compile without one).
    pub fn target(&self) -> &str {
        self.inputs.target()
    }
}

/// What one step of a job does.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Run a native tool: `program` is `tool` resolved (or the tool name when not found).
    Exec {
        /// The tool's name (`walrus_driver`).
        tool: &'static str,
        /// Its path in the toolchain; `None` when no toolchain provides it.
        program: Option<PathBuf>,
        /// The arguments after the program name.
        args: Vec<String>,
    },
    /// Run a native tool through [`SHELL`] `-c <script>`.
    Shell {
        /// The tool the script runs (`nn_executor`).
        tool: &'static str,
        /// Its path in the toolchain; `None` when no toolchain provides it.
        program: Option<PathBuf>,
        /// The script given to `-c`, the tool's path already quoted in it.
        script: String,
    },
    /// Call `run_backend_driver(argc, argv)` of a loaded library, in process.
    Library {
        /// The shared library (the toolchain's `libwalrus.so`).
        library: PathBuf,
        /// The entry point called (`run_backend_driver`).
        symbol: &'static str,
        /// The argv it is called with, the tool's name first.
        argv: Vec<String>,
    },
    /// Work done inside the worker; the text says what.
    InProcess {
        /// A short description for the dry run (`pack the NEFF`).
        what: String,
    },
    /// Nothing to do, for the reason given (logged).
    Skip {
        /// The line logged at INFO instead of running the job.
        reason: String,
    },
}

/// One step of a job: an action, where it runs, and the files it reads and writes (relative to
/// the work dir unless absolute).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// What the step does.
    pub action: Action,
    /// Relative to the work dir: `.` or `sgNN`.
    pub cwd: String,
    /// The files it reads (relative to [`Step::cwd`] unless absolute; `*` patterns allowed), as the
    /// dry run lists them.
    pub reads: Vec<String>,
    /// The files it writes, named as [`Step::reads`] names them.
    pub writes: Vec<String>,
    /// Files written into `cwd` before the action runs: (name, content, executable).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_write: Vec<(String, String, bool)>,
}

impl Step {
    /// The command this step runs as a process, with `work_dir` as the directory its `cwd` is
    /// relative to (`None` for in-process and library steps). This one value is what the dry run
    /// prints, what the executor logs and spawns, and what a replay script runs. A tool that was
    /// not found appears under its bare name.
    pub fn command(&self, work_dir: &Path) -> Option<Spec> {
        let cwd = if self.cwd == "." {
            work_dir.to_path_buf()
        } else {
            work_dir.join(&self.cwd)
        };
        match &self.action {
            Action::Exec {
                tool,
                program,
                args,
            } => Some(Spec::new(program_text(tool, program), cwd).args(args)),
            Action::Shell { script, .. } => {
                Some(Spec::new(SHELL, cwd).args(["-c", script.as_str()]))
            }
            Action::Library { .. } | Action::InProcess { .. } | Action::Skip { .. } => None,
        }
    }

    /// What this step shows as its command: [`Step::command`] in the work dir, or, for a library
    /// call, the tool invocation it stands for (the call's argv).
    pub(crate) fn shown_command(&self) -> Option<Spec> {
        self.command(Path::new(".")).or_else(|| match &self.action {
            Action::Library { argv, .. } => {
                let (program, args) = argv.split_first()?;
                Some(Spec::new(program, ".").args(args))
            }
            _ => None,
        })
    }

    /// The full argv a subprocess gets (program first), or the library call's argv; `None` for
    /// in-process steps.
    pub fn argv(&self) -> Option<Vec<String>> {
        match &self.action {
            Action::Library { argv, .. } => Some(argv.clone()),
            _ => self.command(Path::new(".")).map(|c| c.argv()),
        }
    }

    /// How this step runs (a library call runs inside the worker); `None` for a skipped step.
    pub fn runs_as(&self) -> Option<RunsAs> {
        match &self.action {
            Action::Exec { .. } => Some(RunsAs::Subprocess),
            Action::Shell { .. } => Some(RunsAs::Shell),
            Action::Library { .. } | Action::InProcess { .. } => Some(RunsAs::InProcess),
            Action::Skip { .. } => None,
        }
    }

    /// The native tool the step stands for (`walrus_driver` for a library call); `None` for
    /// in-process and skipped steps.
    pub fn tool(&self) -> Option<&'static str> {
        match &self.action {
            Action::Exec { tool, .. } | Action::Shell { tool, .. } => Some(tool),
            Action::Library { .. } => Some("walrus_driver"),
            _ => None,
        }
    }

    /// Where that tool is: the program's path, or the library's; `None` when it was not found or
    /// there is no tool.
    pub fn tool_path(&self) -> Option<&Path> {
        match &self.action {
            Action::Exec { program, .. } | Action::Shell { program, .. } => program.as_deref(),
            Action::Library { library, .. } => Some(library),
            _ => None,
        }
    }
}

fn program_text(tool: &str, program: &Option<PathBuf>) -> String {
    program
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| tool.to_string())
}

/// Convenience: an exec step.
pub(crate) fn exec(
    ctx: &JobContext,
    tool: &'static str,
    args: Vec<String>,
    cwd: &str,
    reads: Vec<String>,
    writes: Vec<String>,
) -> Step {
    Step {
        action: Action::Exec {
            tool,
            program: ctx.tool_path(tool),
            args,
        },
        cwd: cwd.to_string(),
        reads,
        writes,
        also_write: Vec::new(),
    }
}

/// Convenience: an in-process step.
pub(crate) fn in_process(
    what: impl Into<String>,
    cwd: &str,
    reads: Vec<String>,
    writes: Vec<String>,
) -> Step {
    Step {
        action: Action::InProcess { what: what.into() },
        cwd: cwd.to_string(),
        reads,
        writes,
        also_write: Vec::new(),
    }
}

/// Split a user option string the way the original forwards it (shell rules).
pub(crate) fn shell_split(option: &str, dest: &str) -> Result<Vec<String>, NccError> {
    let text = option;
    shell_words::split(text).map_err(|e| NccError::unsplittable(dest, text, e))
}

/// Describe a job's steps for the given context.
pub type StepsFn = fn(&JobContext) -> Result<Vec<Step>, NccError>;

/// What an in-process job gets when it runs: the job context with the real subgraphs, the work
/// and launch directories, and a log function.
pub struct RunContext<'a> {
    /// The job's context, with the subgraphs and inputs the run really has.
    pub job: JobContext<'a>,
    /// The compile's work directory, absolute.
    pub work_dir: &'a Path,
    /// The directory nxcc was launched in (where SaveTemps copies the work dir to).
    pub launch_dir: &'a Path,
    /// `log(level, message)` under the job's logger.
    pub log: &'a dyn Fn(i64, &str),
}

impl RunContext<'_> {
    /// Log `message` at INFO under the job's logger.
    pub fn info(&self, message: &str) {
        (self.log)(crate::cli::level::INFO, message)
    }
}

/// Run an in-process job.
pub type RunFn = fn(&RunContext) -> Result<(), NccError>;

impl Job {
    /// Its row of the registry.
    pub fn row(self) -> &'static Row {
        REGISTRY
            .iter()
            .find(|r| r.job == self)
            .expect("every job has a registry row")
    }
}

/// One row of the registry.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The job (its class name in the original, as `--pipeline` names it).
    pub job: Job,
    /// How the job runs, unless its steps say otherwise (a real toolchain's Frontend, a fork-walrus
    /// backend).
    pub runs_as: RunsAs,
    /// The native tool, for subprocess jobs.
    pub tool: Option<&'static str>,
    /// Describes the job's steps for a context (the plan's or the run's).
    pub steps: StepsFn,
    /// The in-process work, for jobs that have some.
    pub run: Option<RunFn>,
}

/// The registry: every job the original's `loadAllJobs` finds.
#[rustfmt::skip]
pub static REGISTRY: &[Row] = &[
    //    job                          runs as               native tool                 steps                            in-process work
    Row { job: Job::HLOToTensorizer,   runs_as: RunsAs::Subprocess, tool: Some("hlo2penguin"),       steps: hlo_to_tensorizer::steps,    run: None },
    Row { job: Job::XLAInferGoldens,   runs_as: RunsAs::Subprocess, tool: Some("xla_infergoldens"),  steps: xla_infer_goldens::steps,    run: None },
    Row { job: Job::InferGoldens,      runs_as: RunsAs::InProcess,  tool: None,                      steps: infer_goldens::steps_infer,  run: Some(infer_goldens::run_infer) },
    Row { job: Job::MetaInferGoldens,  runs_as: RunsAs::InProcess,  tool: None,                      steps: infer_goldens::steps_meta,   run: Some(infer_goldens::run_meta) },
    Row { job: Job::Frontend,          runs_as: RunsAs::InProcess,  tool: None,                      steps: frontend::steps,             run: Some(frontend::run) },
    Row { job: Job::StaticIOTranspose, runs_as: RunsAs::InProcess,  tool: None,                      steps: static_io_transpose::steps,  run: Some(static_io_transpose::run) },
    Row { job: Job::WalrusDriver,      runs_as: RunsAs::Subprocess, tool: Some("walrus_driver"),     steps: walrus_driver::steps,        run: None },
    Row { job: Job::Backend,           runs_as: RunsAs::Shell,      tool: Some("nn_executor"),       steps: backend::steps,              run: None },
    Row { job: Job::Kelper,            runs_as: RunsAs::InProcess,  tool: None,                      steps: kelper::steps,               run: Some(kelper::run) },
    Row { job: Job::NeffWrapper,       runs_as: RunsAs::Subprocess, tool: Some("hlo-neff-wrapper"),  steps: neff_wrapper::steps,         run: None },
    Row { job: Job::BIRVerifier,       runs_as: RunsAs::Subprocess, tool: Some("walrus_driver"),     steps: bir_verifier::steps_verify,  run: None },
    Row { job: Job::BIRSim,            runs_as: RunsAs::Subprocess, tool: Some("walrus_driver"),     steps: bir_verifier::steps_sim,     run: None },
    Row { job: Job::SaveTemps,         runs_as: RunsAs::InProcess,  tool: None,                      steps: save_temps::steps,           run: Some(save_temps::run) },
    Row { job: Job::Watchpoint,        runs_as: RunsAs::Subprocess, tool: Some("watchpoint_insert"), steps: watchpoint::steps,           run: None },
];

/// Look a name up (SEED `__getJob`): its registry row.
#[cfg(test)]
pub(crate) fn lookup(name: &str) -> Option<&'static Row> {
    Job::named(name).map(Job::row)
}

/// Every job name, sorted (for the unknown-job error).
pub(crate) fn known_names() -> Vec<&'static str> {
    let mut v: Vec<&str> = Job::ALL.iter().map(|j| j.name()).collect();
    v.sort_unstable();
    v
}

/// The unknown-job error (nxcc's code EDRV081; the original raises a keyed
/// CompilerInvalidInputException).
pub(crate) fn unknown_job(name: &str) -> NccError {
    NccError::unknown_job(name, &known_names())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_are_named_as_the_seed_names_them_and_each_has_one_row() {
        for job in Job::ALL {
            assert_eq!(Job::named(&job.to_string()), Some(job));
            assert_eq!(job.row().job, job);
            assert_eq!(REGISTRY.iter().filter(|r| r.job == job).count(), 1);
            assert_eq!(serde_json::to_value(job).unwrap(), job.name());
        }
        assert_eq!(REGISTRY.len(), Job::ALL.len());
        assert_eq!(Job::WalrusDriver.to_string(), "WalrusDriver");
        assert_eq!(Job::named("walrusdriver"), None, "names are exact");
        assert!(lookup("NoSuchJob").is_none());
        let j: Job = serde_json::from_str("\"SaveTemps\"").unwrap();
        assert_eq!(j, Job::SaveTemps);
        assert!(serde_json::from_str::<Job>("\"Nope\"").is_err());
    }
}
