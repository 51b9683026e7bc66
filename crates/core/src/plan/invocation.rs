//! The front door: a compile's command line becomes one [`Invocation`] here and nowhere else —
//! parsed as the original's argparse parses it and lowered into its typed parts
//! ([`crate::cli`]), then planned (the original's `buildPipeline`) — or a [`Refusal`] that says
//! why not, in the words and with the exit status of `nxcc compile`. The command line, the daemon,
//! `parallel-compile`, the remote worker and `nxcc cache explain` all come in through it, and
//! nothing after it reads the parsed namespace.
//!
//! An invocation is data: a supervisor hands it whole to its worker (forked, through the daemon's
//! fork server, or an executed binary), which runs exactly what was planned and never plans
//! again; what the worker does not need — the planning record — stays behind ([`Plan`]).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{build, Plan, PlanError, Probe};
use crate::cli::inputs::CompileInputs;
use crate::cli::settings::Settings;
use crate::cli::{CliError, Command, CompileArgs};
use crate::error::NccError;
use crate::jobs::JobContext;
use crate::result::Failure;
use crate::toolchain::Toolchain;

/// One compile as the command line asks for it, in three parts: what can change the NEFF (the
/// cache key hashes it), how this machine runs it, and what planning decided.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Invocation {
    /// `nxcc compile` or `neuronx-cc compile`: how messages name the command.
    pub prog: String,
    /// The command line as given (after delegation), for the log and an external compiler.
    pub argv: Vec<String>,
    /// What can change the NEFF, normalised.
    pub inputs: CompileInputs,
    /// How this machine runs the compile: output, log, work dir, reports, cache, remote, dry run.
    pub settings: Settings,
    /// What planning decided: paths, pipeline, passes, subgraphs, toolchain, and its record.
    pub plan: Plan,
}

/// Why a command line gives no invocation: an answer without a compile (help, the version),
/// another subcommand, or an error with its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `--help`, `--help-hidden`, `--help-hidden-list`: this text, exit 0.
    Help(String),
    /// `--version` / `-V` (exit 0; each door words it).
    Version,
    /// Another subcommand than `compile` (its name).
    NotACompile(String),
    /// A usage error: argparse's words, exit 2.
    Usage(CliError),
    /// The compile is refused before anything runs (exit 70), with, when the model files were
    /// more than one, what each extra one may have been meant as.
    Plan {
        /// The original's error line.
        error: NccError,
        /// `t1.html: did you mean `--timings=t1.html`?` lines.
        hints: Vec<String>,
    },
}

impl Refusal {
    /// The exit status it ends with: 0 for help and the version, 2 for a usage error (another
    /// subcommand included), 70 for a refused compile.
    pub fn exit_status(&self) -> i32 {
        match self {
            Refusal::Help(_) | Refusal::Version => 0,
            Refusal::NotACompile(_) | Refusal::Usage(_) => CliError::EXIT_STATUS,
            Refusal::Plan { .. } => crate::error::EXIT_COMPILE_FAILED,
        }
    }

    /// How a compile refused so ended (`None`: not an error).
    pub fn failure(&self) -> Option<Failure> {
        match self {
            Refusal::Help(_) | Refusal::Version => None,
            Refusal::NotACompile(_) | Refusal::Usage(_) => Some(Failure::Usage),
            Refusal::Plan { .. } => Some(Failure::Plan),
        }
    }

    /// The error's text, as `nxcc compile` prints it on stderr (empty for help and the version).
    pub fn render(&self) -> String {
        match self {
            Refusal::Help(_) | Refusal::Version => String::new(),
            Refusal::NotACompile(name) => format!("{name} is not a compile\n"),
            Refusal::Usage(e) => e.render(),
            Refusal::Plan { error, hints } => {
                let mut text = format!("{error}\n");
                hints.iter().for_each(|h| text.push_str(&format!("{h}\n")));
                text
            }
        }
    }
}

impl Invocation {
    /// The invocation of a whole command line (the subcommand first, or driver options then
    /// it: `compile m.pb ...`, `--target=trn1 compile m.pb ...`), planned with `probe`.
    pub fn from_argv(
        prog: &str,
        argv: &[String],
        probe: &dyn Probe,
    ) -> Result<Invocation, Refusal> {
        match crate::cli::parse(prog, argv).map_err(Refusal::Usage)? {
            Command::Compile(args) => Invocation::from_args(&args, probe),
            Command::Help(text) => Err(Refusal::Help(text)),
            Command::Version { .. } => Err(Refusal::Version),
            Command::Other { name, .. } => Err(Refusal::NotACompile(name)),
        }
    }

    /// The invocation of a parsed `compile` command line (whose settings a caller may have set
    /// first: `parallel-compile` gives each compile its output, log and remote server).
    pub fn from_args(args: &CompileArgs, probe: &dyn Probe) -> Result<Invocation, Refusal> {
        build(args, probe).map_err(|e| match e {
            PlanError::Usage(u) => Refusal::Usage(u),
            PlanError::Compile(error) => Refusal::Plan {
                error,
                hints: match args.model_files.len() {
                    0 | 1 => Vec::new(),
                    _ => args.hints.clone(),
                },
            },
        })
    }

    /// `--optlevel` after normalisation (`-O3` is planned as `2`).
    pub fn optlevel(&self) -> &'static str {
        self.inputs.optlevel.as_str()
    }

    /// `--layer-unroll-factor` after normalisation (0: the whole graph is one module).
    pub fn layer_unroll_factor(&self) -> i64 {
        self.inputs.layer_unroll_factor
    }

    /// A job context for the given run-time facts (the plan uses its predictions and no work dir).
    pub fn job_context<'a>(
        &'a self,
        subgraphs: &'a [String],
        value_inputs: &'a [String],
        gold_exists: bool,
        toolchain: Option<&'a Toolchain>,
        work_dir: Option<&'a Path>,
    ) -> JobContext<'a> {
        let plan = &self.plan;
        JobContext {
            inputs: &self.inputs,
            log: &self.settings.log,
            model: &plan.model,
            model_format: plan.model_facts.format,
            output: &plan.output,
            logfile: &plan.logfile,
            walrus_passes: &plan.walrus_passes,
            dge_on_levels: &plan.derived.dge_on_levels,
            subgraphs,
            value_inputs,
            gold_exists,
            toolchain,
            work_dir,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::StaticProbe;

    fn invocation(argv: &str) -> Invocation {
        let argv: Vec<String> = argv.split_whitespace().map(String::from).collect();
        Invocation::from_argv("nxcc", &argv, &StaticProbe::new("/launch")).unwrap()
    }

    #[test]
    fn what_the_worker_reads_survives_the_trip() {
        let inv = invocation(
            "compile m.pb --target trn2 --toolchain sim -O1 --job-timeout 2.5 --skip-pass a --skip-pass b --verbose 35",
        );
        let json = serde_json::to_vec(&inv).unwrap();
        let again: Invocation = serde_json::from_slice(&json).unwrap();
        assert_eq!(again.inputs, inv.inputs);
        assert_eq!(again.settings, inv.settings);
        let (a, b) = (&again.plan, &inv.plan);
        assert_eq!(a.pipeline, b.pipeline);
        assert_eq!(a.collected, b.collected);
        assert_eq!(a.walrus_passes, b.walrus_passes);
        assert_eq!(a.derived, b.derived);
        assert_eq!(
            (&a.model, &a.output, &a.logfile, &a.launch_dir),
            (&b.model, &b.output, &b.logfile, &b.launch_dir)
        );
        assert_eq!(a.toolchain_request, b.toolchain_request);
        assert_eq!(a.subgraphs, b.subgraphs);
        assert_eq!(again.argv, inv.argv);
        // A float stays a float: the job timeout is read back as 2.5 s.
        assert_eq!(again.settings.job_timeout, Some(2.5));
        // The planning record stays with the planner.
        assert!(a.decisions.is_empty() && a.jobs.is_empty() && !b.decisions.is_empty());
        // Every job describes the same steps from the invocation that came back.
        for name in &b.pipeline {
            let job = name.row();
            let x = (job.steps)(&inv.job_context(&b.subgraphs, &[], false, None, None));
            let y = (job.steps)(&again.job_context(&a.subgraphs, &[], false, None, None));
            assert_eq!(format!("{x:?}"), format!("{y:?}"), "{name}");
        }
    }

    #[test]
    fn data_that_does_not_fit_is_refused() {
        let inv = invocation("compile m.pb --target trn2");
        let mut v = serde_json::to_value(&inv).unwrap();
        v["plan"]["pipeline"] = serde_json::json!(["NoSuchJob"]);
        let e = serde_json::from_value::<Invocation>(v.clone()).unwrap_err();
        assert!(e.to_string().contains("NoSuchJob"), "{e}");
        v["plan"]["pipeline"] = serde_json::json!([]);
        v["inputs"]
            .as_object_mut()
            .unwrap()
            .remove("optlevel")
            .unwrap();
        let e = serde_json::from_value::<Invocation>(v).unwrap_err();
        assert!(e.to_string().contains("optlevel"), "{e}");
    }

    #[test]
    fn refusals_say_why_with_the_exit_status() {
        let probe = StaticProbe::new("/launch");
        let refuse = |s: &str| {
            let argv: Vec<String> = s.split_whitespace().map(String::from).collect();
            Invocation::from_argv("nxcc", &argv, &probe).unwrap_err()
        };
        let help = refuse("compile --help");
        assert!(matches!(&help, Refusal::Help(t) if t.starts_with("usage: nxcc compile")));
        assert_eq!((help.exit_status(), help.failure()), (0, None));
        assert_eq!(refuse("--version"), Refusal::Version);
        let other = refuse("neff-info x.neff");
        assert_eq!(other, Refusal::NotACompile("neff-info".into()));
        assert_eq!(other.failure(), Some(Failure::Usage));
        let usage = refuse("compile m.pb");
        assert_eq!(
            (usage.exit_status(), usage.failure()),
            (2, Some(Failure::Usage))
        );
        assert!(
            usage.render().contains("required: --target"),
            "{}",
            usage.render()
        );
        let plan = refuse("compile m.pb --target trn1 --lnc 2");
        assert_eq!(
            (plan.exit_status(), plan.failure()),
            (70, Some(Failure::Plan))
        );
        assert!(plan.render().contains("Logical Neuron Core size 2"));
        // A word meant as an optional value is pointed out after the refusal.
        let two = refuse("compile --target trn2 --timings t1.html m.pb");
        assert!(
            two.render()
                .contains("\nt1.html: did you mean `--timings=t1.html`?"),
            "{}",
            two.render()
        );
    }
}
