//! Building the plan — the original's `CompileCommand.buildPipeline`, as a pure function of the
//! parsed command line and a [`Probe`] (the only way it learns about the world; it spawns nothing
//! and writes nothing) — behind the front door ([`invocation`]): a command line becomes one
//! [`Invocation`], its typed inputs normalised and its [`Plan`] decided, or a [`Refusal`].
//!
//! The steps, in the seed's firm order: parse (done by [`crate::cli`]) → `process_serial_tpb_opts`
//! → `validate_args` → normalise → the three collectors concatenated → `--pipeline` / `--state` →
//! the name filter → the registry. Then each job describes its steps.

pub(crate) mod collectors;
pub mod dryrun;
pub mod invocation;
pub(crate) mod normalise;
pub(crate) mod probe;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cli::inputs::CompileInputs;
use crate::cli::settings::Settings;
use crate::cli::{help, CliError, CompileArgs};
use crate::error::NccError;
use crate::jobs::{self, Job, RunsAs, Step};
use crate::provenance::Source;
use crate::recon::plan::{self as recon, FilterAction, StateError};
use crate::toolchain::{Request, Toolchain};

pub use invocation::{Invocation, Refusal};
pub use normalise::Derived;
pub use probe::{ModelFacts, Probe, RequestProbe, StaticProbe, SystemProbe};

/// The environment variable that supplies `--target` when it is not given (the ecosystem's).
pub const TARGET_OVERRIDE_ENV: &str = "NEURON_PLATFORM_TARGET_OVERRIDE";
pub use crate::toolchain::SIM_SUBGRAPHS_ENV;
/// The version of the plan format (dry-run JSON and cache keys).
pub const PLAN_VERSION: u32 = 1;

/// One rule's outcome, with where the rule comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The rule's name (`-O3`, `DGE levels`, `process_serial_tpb_opts`).
    pub rule: String,
    /// What it decided for this command line, in words.
    pub outcome: String,
    /// Where the rule is known from.
    pub source: Source,
}

impl Decision {
    /// A decision of `rule` with its `outcome`, known from `source`.
    pub fn new(rule: impl Into<String>, outcome: impl Into<String>, source: Source) -> Decision {
        Decision {
            rule: rule.into(),
            outcome: outcome.into(),
            source,
        }
    }
}

/// Why a plan could not be built (the front door says it as a [`Refusal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlanError {
    /// The command line is not usable (exit 2).
    Usage(CliError),
    /// The compile fails (exit 70).
    Compile(NccError),
}

/// A job of the plan: its registry row and its steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedJob {
    /// The job (`WalrusDriver`).
    pub name: Job,
    /// How its steps run (the registry's kind when they disagree or are skipped): a real
    /// toolchain's Frontend is a subprocess, a fork-walrus backend in process.
    pub runs_as: RunsAs,
    /// The registry's native tool for the job, if it has one.
    pub tool: Option<&'static str>,
    /// Its steps as the plan predicts them (no work dir yet: paths relative).
    pub steps: Vec<Step>,
}

/// What planning decided from an invocation's inputs and settings and the world its probe saw:
/// the paths, the pipeline, the walrus passes, the subgraphs, the toolchain, what to tell the
/// user — all a worker needs to run it — and the planning record the dry run shows (the
/// decisions, the model's graph, each job's predicted steps, the tools not found), which stays
/// with the planner: a worker describes each job's steps from its context when it runs it, and
/// the supervisor checks the tools before the worker starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    /// What normalisation derived beside the inputs (DGE levels, the legacy flow, BIR
    /// simulation).
    pub derived: Derived,
    /// The directory nxcc was launched in, against which every relative path is resolved.
    pub launch_dir: PathBuf,
    /// Absolute.
    pub model: PathBuf,
    /// What the probe found about the model path (directory or file, format, size).
    pub model_facts: ModelFacts,
    /// Absolute.
    pub output: PathBuf,
    /// Absolute.
    pub logfile: PathBuf,
    /// The collectors' concatenation, before `--pipeline`.
    pub collected: Vec<Job>,
    /// The final jobs, in run order.
    pub pipeline: Vec<Job>,
    /// The walrus pass list for `walrus_driver --pass`, in order.
    pub walrus_passes: Vec<String>,
    /// The subgraph directories the plan expects the Frontend to write.
    pub subgraphs: Vec<String>,
    /// Whether [`Plan::subgraphs`] is what the Frontend will write (the simulated frontend, a
    /// model directory) or only a prediction (a real frontend decides when it runs).
    pub subgraphs_known: bool,
    /// Which toolchain the command line and environment ask for.
    pub toolchain_request: Request,
    /// The toolchain found for the request; `None` when none is (yet): an automatic request finds
    /// the installed package only when a tool is needed.
    pub toolchain: Option<Toolchain>,
    /// Warnings the dry run prints, and the compile logs.
    pub warnings: Vec<String>,
    /// Lines the original prints at USER level while planning (the -O3 notice).
    pub user_messages: Vec<String>,
    /// The backend gate is closed, so no NEFF will be written: the warning that says why (one of
    /// [`Plan::warnings`]). A compile shows it on the console before its jobs run.
    pub no_neff: Option<String>,
    /// The model file's HLO module as the probe read it (`None`: not read, e.g. a directory;
    /// `Some(Err)`: why it cannot be read). Shown by the dry run, used by the memory estimate.
    #[serde(skip)]
    pub model_graph: Option<Result<crate::hlo::Module, String>>,
    /// The jobs of [`Plan::pipeline`] with their predicted steps, in run order.
    #[serde(skip)]
    pub jobs: Vec<PlannedJob>,
    /// Every rule's outcome, in the order they were applied, for the dry run.
    #[serde(skip)]
    pub decisions: Vec<Decision>,
    /// Tools the plan's jobs need that no toolchain provides yet: (job, tool). A dry run warns
    /// about each; a compile fails at the job (NCC_EDRV082) if the tool is still missing then.
    #[serde(skip)]
    pub missing_tools: Vec<(Job, &'static str)>,
}

impl Plan {
    /// The files the planned jobs declare they write outside the work dir — the absolute paths
    /// among their steps' `writes` (Kelper's NEFF, NeffWrapper's wrapped module) —, each once:
    /// what a failed compile removes if it wrote them.
    pub fn outputs(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        let writes = self
            .jobs
            .iter()
            .flat_map(|j| &j.steps)
            .flat_map(|s| &s.writes);
        for p in writes.map(PathBuf::from).filter(|p| p.is_absolute()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

fn subgraph_names(n: usize) -> Vec<String> {
    (0..n.max(1)).map(|i| format!("sg{i:02}")).collect()
}

/// What planning tells as it goes: the decisions, the warnings, the USER-level lines.
#[derive(Debug, Default)]
struct Notes {
    decisions: Vec<Decision>,
    warnings: Vec<String>,
    user_messages: Vec<String>,
}

/// The jobs steps 5–8 select: the collectors' concatenation, the final pipeline, the walrus
/// passes, and the no-NEFF warning when the backend gate is closed.
struct Selected {
    collected: Vec<Job>,
    pipeline: Vec<Job>,
    walrus_passes: Vec<String>,
    no_neff: Option<String>,
}

/// Build the invocation of a parsed `compile` command line: its inputs normalised and its plan.
pub(crate) fn build(args: &CompileArgs, probe: &dyn Probe) -> Result<Invocation, PlanError> {
    let mut inputs = args.inputs.clone();
    let mut notes = Notes {
        warnings: args.warnings.clone(),
        ..Notes::default()
    };
    let prog = &args.prog;
    // 1. Parse (done) — what argparse would have required.
    require_target(&mut inputs, probe, &mut notes.decisions, prog)?;
    if args.model_files.len() > 1 {
        return Err(PlanError::Compile(NccError::one_model_only()));
    }
    let model_arg = args.model_files.first().cloned().unwrap_or_default();
    // 2. process_serial_tpb_opts.
    normalise::process_serial_tpb_opts(&inputs, &mut notes.decisions)
        .map_err(|m| usage(prog, m))?;
    // 3. validate_args.
    let launch_dir = probe.launch_dir().to_path_buf();
    let model = crate::fsx::absolute(&launch_dir, &model_arg);
    let facts = probe.model(&model);
    normalise::validate_args(&inputs, &model_arg, facts.is_some(), &mut notes.decisions)?;
    if let Some(what) = facts.as_ref().and_then(|f| f.not_regular.as_deref()) {
        return Err(PlanError::Compile(NccError::model_not_regular(
            &model_arg, what,
        )));
    }
    let model_facts = facts.expect("checked by validate_args");
    // 4. Normalise; 5.–8. the jobs.
    let derived = normalise::normalise(
        &mut inputs,
        args.given,
        &mut notes.decisions,
        &mut notes.warnings,
        &mut notes.user_messages,
    );
    let selected = select_jobs(&mut inputs, &derived, prog, &mut notes)?;
    let settings = args.settings.clone();
    let (toolchain_request, toolchain) =
        toolchain_of(&settings, probe, &launch_dir, &mut notes.decisions);
    let plan = Plan {
        subgraphs: predicted_subgraphs(&model_facts, toolchain.as_ref(), probe),
        subgraphs_known: toolchain.as_ref().is_some_and(|t| t.simulated) || model_facts.is_dir,
        output: crate::fsx::absolute(&launch_dir, &settings.output),
        logfile: crate::fsx::absolute(&launch_dir, &settings.log.logfile),
        model_graph: probe.model_graph(&model),
        derived,
        launch_dir,
        model,
        model_facts,
        collected: selected.collected,
        pipeline: selected.pipeline,
        walrus_passes: selected.walrus_passes,
        toolchain_request,
        toolchain,
        jobs: Vec::new(),
        decisions: notes.decisions,
        no_neff: selected.no_neff,
        warnings: notes.warnings,
        missing_tools: Vec::new(),
        user_messages: notes.user_messages,
    };
    let mut inv = Invocation {
        prog: prog.clone(),
        argv: args.argv.clone(),
        inputs,
        settings,
        plan,
    };
    inv.plan.jobs = plan_jobs(&inv)?;
    inv.plan.missing_tools = missing_tools(&inv.plan.jobs);
    Ok(inv)
}

/// Steps 5–8: the three collectors concatenated, `--pipeline` and `--state`, the name filter,
/// the registry.
fn select_jobs(
    inputs: &mut CompileInputs,
    derived: &Derived,
    prog: &str,
    notes: &mut Notes,
) -> Result<Selected, PlanError> {
    let decisions = &mut notes.decisions;
    let front = collectors::collect_frontend(inputs, decisions);
    let (walrus, walrus_passes) =
        collectors::collect_walrus(inputs, derived.bir_simulation, decisions);
    let backend = collectors::collect_backend(inputs, derived, decisions, &mut notes.warnings);
    let backend_closed = backend.is_empty();
    let collected: Vec<Job> = front.into_iter().chain(walrus).chain(backend).collect();
    let selected = select(inputs, &collected, decisions, prog)?;
    let filtered = name_filter(
        selected.clone(),
        inputs,
        derived.bir_simulation,
        decisions,
        &mut notes.warnings,
    );
    let pipeline = registry(&filtered, &selected)?;
    let no_neff = (backend_closed && !pipeline.contains(&Job::Kelper)).then(|| {
        notes
            .warnings
            .iter()
            .find(|w| w.ends_with(collectors::NO_NEFF))
            .cloned()
            .unwrap_or_default()
    });
    Ok(Selected {
        collected,
        pipeline,
        walrus_passes: walrus_passes.iter().map(|p| p.to_string()).collect(),
        no_neff,
    })
}

/// A usage error of `compile` (its usage, then the message).
fn usage(prog: &str, message: String) -> PlanError {
    let base = prog.trim_end_matches(" compile").to_string();
    PlanError::Usage(CliError::usage(
        help::usage(&crate::cli::compile_parser(&base)),
        prog.to_string(),
        message,
    ))
}

/// `--target`, required unless the ecosystem's environment variable supplies it.
fn require_target(
    inputs: &mut CompileInputs,
    probe: &dyn Probe,
    decisions: &mut Vec<Decision>,
    prog: &str,
) -> Result<(), PlanError> {
    if inputs.target.is_some() {
        return Ok(());
    }
    let Some(t) = probe.env(TARGET_OVERRIDE_ENV).filter(|t| !t.is_empty()) else {
        let why = "the following arguments are required: --target".to_string();
        return Err(usage(prog, why));
    };
    let flag = crate::cli::flags::by_dest("target").expect("target row");
    let v = crate::cli::argparse::convert(flag, "--target", &t).map_err(|e| {
        usage(
            prog,
            format!(
                "{TARGET_OVERRIDE_ENV}: {}",
                e.message.trim_start_matches("argument --target: ")
            ),
        )
    })?;
    inputs.target = v.as_str().map(str::to_string);
    decisions.push(Decision::new(
        "target",
        format!("{t} (from {TARGET_OVERRIDE_ENV})"),
        Source::Clients,
    ));
    Ok(())
}

/// The jobs `--pipeline` and `--state` select of the collected ones (step 6).
fn select(
    inputs: &CompileInputs,
    collected: &[Job],
    decisions: &mut Vec<Decision>,
    prog: &str,
) -> Result<Vec<String>, PlanError> {
    let items = &inputs.pipeline;
    let names = recon::expand_pipeline(items, collected);
    if items.iter().any(|i| i != "compile") {
        decisions.push(Decision::new(
            "--pipeline",
            format!("{} → {}", items.join(" "), names.join(" ")),
            Source::Recon,
        ));
    }
    let Some(state) = inputs.state.clone() else {
        return Ok(names);
    };
    match recon::apply_state(&state, &names) {
        Ok(range) if range.is_empty() && !names.is_empty() => {
            Err(PlanError::Compile(NccError::empty_plan(format!(
                "--state {state} selects no job of [{}]",
                names.join(", ")
            ))))
        }
        Ok(range) => {
            let names = names[range].to_vec();
            decisions.push(Decision::new(
                "--state",
                format!("{state} → {}", names.join(" ")),
                Source::Wiki,
            ));
            Ok(names)
        }
        Err(StateError::NotInPipeline(x)) => Err(PlanError::Compile(NccError::plain(format!(
            "--state names {x}, which is not in the pipeline [{}]",
            names.join(", ")
        )))),
        Err(StateError::Malformed) => Err(usage(
            prog,
            format!(
                "argument --state: expected in:<job>:out:<job>, got {}",
                crate::cli::argparse::py_repr(&state)
            ),
        )),
    }
}

/// The selected jobs the name filter keeps (step 7).
fn name_filter(
    names: Vec<String>,
    inputs: &CompileInputs,
    bir_simulation: bool,
    decisions: &mut Vec<Decision>,
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let mut filtered = Vec::with_capacity(names.len());
    for name in names {
        match recon::name_filter(&name, inputs, bir_simulation) {
            FilterAction::Keep => filtered.push(name),
            FilterAction::Drop(w) => {
                decisions.push(Decision::new(
                    "name filter",
                    format!("{name} dropped"),
                    Source::Recon,
                ));
                warnings.push(w);
            }
            FilterAction::DropSilently(why) => decisions.push(Decision::new(
                "name filter",
                format!("{name} dropped ({why})"),
                Source::Recon,
            )),
        }
    }
    filtered
}

/// The filtered names as the registry's jobs (step 8); a plan with none is refused.
fn registry(filtered: &[String], selected: &[String]) -> Result<Vec<Job>, PlanError> {
    let pipeline = filtered
        .iter()
        .map(|name| Job::named(name).ok_or_else(|| PlanError::Compile(jobs::unknown_job(name))))
        .collect::<Result<Vec<Job>, PlanError>>()?;
    if pipeline.is_empty() {
        let cause = if selected.is_empty() {
            "the collectors and --pipeline select no job".to_string()
        } else {
            format!(
                "the name filter dropped every selected job ({})",
                selected.join(", ")
            )
        };
        return Err(PlanError::Compile(NccError::empty_plan(cause)));
    }
    Ok(pipeline)
}

/// The toolchain asked for (`--toolchain`, its environment variable) and the one found.
fn toolchain_of(
    settings: &Settings,
    probe: &dyn Probe,
    launch_dir: &Path,
    decisions: &mut Vec<Decision>,
) -> (Request, Option<Toolchain>) {
    let request = Request::from(
        settings.toolchain.as_deref(),
        probe.env(crate::recon::toolchain::TOOLCHAIN_ENV).as_deref(),
        launch_dir,
    );
    let toolchain = probe.toolchain(&request);
    decisions.push(Decision::new(
        "toolchain",
        match (&request, &toolchain) {
            (Request::Auto, _) => {
                "auto: an installed neuronxcc package is looked for when a tool is needed"
                    .to_string()
            }
            (_, Some(tc)) => format!(
                "{}{}",
                tc.bin.display(),
                if tc.simulated { " (simulated)" } else { "" }
            ),
            (_, None) => "none".to_string(),
        },
        Source::Recon,
    ));
    (request, toolchain)
}

/// Each job's steps, and how they run — which is what the dry run shows: the Frontend of a
/// real toolchain is a subprocess of the installed driver; a fork-walrus backend runs in the
/// worker. The registry's kind stands when the steps do not agree or skip.
fn plan_jobs(inv: &Invocation) -> Result<Vec<PlannedJob>, PlanError> {
    let plan = &inv.plan;
    let ctx = inv.job_context(&plan.subgraphs, &[], false, plan.toolchain.as_ref(), None);
    let mut planned = Vec::with_capacity(plan.pipeline.len());
    for job in &plan.pipeline {
        let row = job.row();
        let steps = (row.steps)(&ctx).map_err(PlanError::Compile)?;
        let mut kinds = steps.iter().filter_map(Step::runs_as);
        let runs_as = match kinds.next() {
            Some(first) if kinds.all(|k| k == first) => first,
            _ => row.runs_as,
        };
        planned.push(PlannedJob {
            name: *job,
            runs_as,
            tool: row.tool,
            steps,
        });
    }
    Ok(planned)
}

/// The tools the planned steps need that the toolchain does not have (each once).
fn missing_tools(planned: &[PlannedJob]) -> Vec<(Job, &'static str)> {
    let mut missing = Vec::new();
    for job in planned {
        for step in &job.steps {
            if let (Some(tool), None) = (step.tool(), step.tool_path()) {
                if tool != "python3" && !missing.contains(&(job.name, tool)) {
                    missing.push((job.name, tool));
                }
            }
        }
    }
    missing
}

/// The subgraphs the Frontend is expected to write: the simulated frontend writes one per `*.pb`
/// of a model directory, or `NXCC_SIM_SUBGRAPHS`; otherwise one.
fn predicted_subgraphs(
    facts: &ModelFacts,
    toolchain: Option<&Toolchain>,
    probe: &dyn Probe,
) -> Vec<String> {
    let simulated = toolchain.is_some_and(|t| t.simulated);
    let from_env = probe
        .env(SIM_SUBGRAPHS_ENV)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0);
    let n = match (simulated, from_env) {
        (true, Some(n)) => n,
        _ if facts.is_dir => facts.pb_files.max(1),
        _ => 1,
    };
    subgraph_names(n)
}
