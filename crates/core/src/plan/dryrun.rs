//! The dry run (`compile ... --dry-run[=text|json]`): the plan printed, nothing run — like clang's
//! `-###`. The JSON keys are stable (tests depend on them); `nxcc_plan_version` versions them.
//! When the model file could be read as an HLO module, both show a one-line summary of it
//! (`model_graph`; its `error` when it could not be).

use serde::Serialize;
use serde_json::{json, Value as Json};

use super::{Invocation, Plan, PLAN_VERSION};
use crate::cli::settings::DryRun;
use crate::jobs::{Action, Step};

#[derive(Serialize)]
struct JobJson<'a> {
    name: &'a str,
    runs_as: crate::jobs::RunsAs,
    tool: Option<&'a str>,
    tool_path: Option<String>,
    argv: Option<Vec<String>>,
    cwd: &'a str,
    reads: &'a [String],
    writes: &'a [String],
    /// One entry per step when the job has several (one per subgraph).
    #[serde(skip_serializing_if = "Option::is_none")]
    steps: Option<Vec<StepJson<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

#[derive(Serialize)]
struct StepJson<'a> {
    argv: Option<Vec<String>>,
    cwd: &'a str,
    reads: &'a [String],
    writes: &'a [String],
}

fn note(step: &Step) -> Option<String> {
    match &step.action {
        Action::InProcess { what } => Some(what.clone()),
        Action::Skip { reason } => Some(format!("skipped: {reason}")),
        Action::Library {
            library, symbol, ..
        } => Some(format!("in process: {symbol}() of {}", library.display())),
        Action::Exec {
            tool: "python3", ..
        } => Some(
            "a subprocess: the installed neuronxcc package's own driver runs this job alone"
                .to_string(),
        ),
        _ => None,
    }
}

/// The plan's warnings plus one per tool no toolchain provides.
fn warnings(plan: &Plan) -> Vec<String> {
    let mut w = plan.warnings.clone();
    for (job, tool) in &plan.missing_tools {
        let why = match &plan.toolchain {
            Some(t) => t.why_missing(tool),
            None => "no toolchain resolved".to_string(),
        };
        w.push(format!("{job}: tool {tool} not found ({why})"));
    }
    w
}

/// The `model_graph` object: the module's summary, its reader's error, or `null` (not read).
pub(crate) fn graph_json(plan: &Plan) -> Json {
    match &plan.model_graph {
        Some(Ok(m)) => json!({
            "summary": m.one_line(),
            "module": m.name,
            "format": m.format,
            "entry_computation": m.entry,
            "parameters": m.parameters.len(),
            "results": m.results.len(),
            "parameter_bytes": m.parameter_bytes(),
            "result_bytes": m.result_bytes(),
            "instruction_count": m.instruction_count,
        }),
        Some(Err(e)) => json!({ "error": e }),
        None => Json::Null,
    }
}

/// What the dry run says of the compile's peak memory: the estimate as JSON
/// (`memory_estimate`) and in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// `{bytes, basis, ..., from}`.
    pub json: Json,
    /// `1.2 GiB (from ...)`.
    pub text: String,
}

/// The dry run of `inv` as `format` asks: the JSON object, or the text, with `memory`.
pub fn render(inv: &Invocation, format: DryRun, memory: &Memory) -> String {
    match format {
        DryRun::Json => {
            let mut j = to_json(inv);
            if let Some(o) = j.as_object_mut() {
                o.insert("memory_estimate".into(), memory.json.clone());
            }
            let mut text = serde_json::to_string_pretty(&j).unwrap_or_default();
            text.push('\n');
            text
        }
        DryRun::Text => format!("{}\nmemory estimate: {}\n", to_text(inv), memory.text),
    }
}

/// The invocation as the dry-run JSON object (without its memory estimate).
pub fn to_json(inv: &Invocation) -> Json {
    let plan = &inv.plan;
    let args = crate::cli::lower::args(&inv.inputs, &inv.settings);
    let jobs: Vec<Json> = plan
        .jobs
        .iter()
        .map(|job| {
            let first = job.steps.first();
            let empty: &[String] = &[];
            let j = JobJson {
                name: job.name.name(),
                runs_as: job.runs_as,
                tool: job.tool,
                tool_path: first
                    .and_then(|s| s.tool_path())
                    .map(|p| p.display().to_string()),
                argv: first.and_then(Step::argv),
                cwd: first.map_or(".", |s| s.cwd.as_str()),
                reads: first.map_or(empty, |s| &s.reads),
                writes: first.map_or(empty, |s| &s.writes),
                steps: (job.steps.len() > 1).then(|| {
                    job.steps
                        .iter()
                        .map(|s| StepJson {
                            argv: s.argv(),
                            cwd: &s.cwd,
                            reads: &s.reads,
                            writes: &s.writes,
                        })
                        .collect()
                }),
                note: first.and_then(note),
            };
            serde_json::to_value(j).unwrap_or(Json::Null)
        })
        .collect();
    json!({
        "nxcc_plan_version": PLAN_VERSION,
        "pipeline": plan.pipeline,
        "collected": plan.collected,
        "walrus_passes": plan.walrus_passes,
        "optlevel": inv.optlevel(),
        "logical_nc_config": inv.inputs.logical_nc_config(),
        "target": inv.inputs.target(),
        "dge_on_levels": plan.derived.dge_on_levels,
        "layer_unroll_factor": inv.layer_unroll_factor(),
        "derived": plan.derived,
        "model": plan.model.display().to_string(),
        "model_format": plan.model_facts.format,
        "model_graph": graph_json(plan),
        "subgraphs": plan.subgraphs,
        "subgraphs_known": plan.subgraphs_known,
        "toolchain": plan.toolchain.as_ref().map(|t| json!({"bin": t.bin.display().to_string(), "simulated": t.simulated})),
        "args": Json::Object(args),
        "jobs": jobs,
        "output": plan.output.display().to_string(),
        "logfile": plan.logfile.display().to_string(),
        "decisions": plan.decisions,
        "warnings": warnings(plan),
    })
}

/// The invocation as human-readable text (without its memory estimate).
pub fn to_text(inv: &Invocation) -> String {
    let plan = &inv.plan;
    let mut o = String::new();
    o.push_str("nxcc dry run: the plan below was built; nothing was run, written or created.\n\n");
    o.push_str(&header_text(inv));
    o.push_str(&format!(
        "\npipeline ({}): {}\n",
        crate::words::count(plan.pipeline.len(), "job", "jobs"),
        plan.pipeline
            .iter()
            .map(|j| j.name())
            .collect::<Vec<_>>()
            .join(" → ")
    ));
    for (i, job) in plan.jobs.iter().enumerate() {
        o.push_str(&job_text(plan, i, job));
    }
    o.push_str(&format!(
        "\nwalrus passes ({}): {}\n",
        plan.walrus_passes.len(),
        plan.walrus_passes.join(",")
    ));
    o.push_str("\ndecisions:\n");
    for d in &plan.decisions {
        o.push_str(&format!("  [{}] {}: {}\n", d.source, d.rule, d.outcome));
    }
    let warnings = warnings(plan);
    if !warnings.is_empty() {
        o.push_str("\nwarnings:\n");
        for w in &warnings {
            o.push_str(&format!("  {w}\n"));
        }
    }
    o
}

/// The plan's first lines: the model, its graph, the output, the target, the optlevel, DGE,
/// the toolchain, the work dir, the subgraphs.
fn header_text(inv: &Invocation) -> String {
    let plan = &inv.plan;
    let mut o = String::new();
    o.push_str(&format!(
        "model      {} ({})\n",
        plan.model.display(),
        if plan.model_facts.is_dir {
            "directory".to_string()
        } else if plan.model_facts.unreadable {
            "cannot be read".to_string()
        } else {
            format!("HLO {}", plan.model_facts.format.as_str())
        }
    ));
    match &plan.model_graph {
        Some(Ok(m)) => o.push_str(&format!("graph      {}\n", m.one_line())),
        Some(Err(e)) => o.push_str(&format!("graph      cannot be read: {e}\n")),
        None => {}
    }
    o.push_str(&format!("output     {}\n", plan.output.display()));
    o.push_str(&format!(
        "target     {} (arch {}), logical NeuronCore size {}\n",
        inv.inputs.target(),
        inv.inputs.arch.as_deref().unwrap_or("?"),
        inv.inputs.logical_nc_config()
    ));
    o.push_str(&format!(
        "optlevel   \"{}\"   layer_unroll_factor {}\n",
        inv.optlevel(),
        inv.layer_unroll_factor()
    ));
    let dge = if plan.derived.dge_on_levels.is_empty() {
        "(none)".to_string()
    } else {
        plan.derived.dge_on_levels.join(", ")
    };
    o.push_str(&format!("DGE levels {dge}\n"));
    o.push_str(&format!(
        "toolchain  {}\n",
        match &plan.toolchain {
            Some(t) => format!(
                "{}{}",
                t.bin.display(),
                if t.simulated { " (simulated)" } else { "" }
            ),
            None => "not resolved (an installed neuronxcc package is looked for at run time)"
                .to_string(),
        }
    ));
    let work = match &inv.settings.work_dir.temp_dir {
        Some(d) => crate::fsx::absolute(&plan.launch_dir, d)
            .display()
            .to_string(),
        None => format!(
            "{}/neuronxcc-XXXXXXXX (generated at run time)",
            plan.launch_dir.display()
        ),
    };
    o.push_str(&format!("work dir   {work}\n"));
    o.push_str(&format!(
        "subgraphs  {}{}\n",
        plan.subgraphs.join(", "),
        if plan.subgraphs_known {
            ""
        } else {
            " (predicted: the Frontend decides when it runs)"
        }
    ));
    o
}

/// Job `i` of the plan, each of its steps.
fn job_text(plan: &Plan, i: usize, job: &super::PlannedJob) -> String {
    let mut o = String::new();
    let runs = serde_json::to_value(job.runs_as)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    o.push_str(&format!(
        "\n{}. {}  [{}{}]\n",
        i + 1,
        job.name,
        runs,
        job.tool.map(|t| format!(", {t}")).unwrap_or_default()
    ));
    let per_subgraph = job.steps.iter().any(|s| s.cwd.starts_with("sg"));
    if per_subgraph && !plan.subgraphs_known {
        o.push_str("   per subgraph: one call for each sgNN directory the Frontend writes\n");
    }
    for step in &job.steps {
        o.push_str(&step_text(step));
    }
    o
}

/// One step: its tool, where it runs, its command, what it reads and writes.
fn step_text(step: &crate::jobs::Step) -> String {
    let mut o = String::new();
    if let Some(command) = step.shown_command() {
        if let Some(t) = step.tool() {
            let path = step
                .tool_path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "<not found>".into());
            o.push_str(&format!("   tool    {t} = {path}\n"));
        }
        let cwd = match (&step.action, step.cwd.as_str()) {
            // A library call runs inside the worker, which never changes directory.
            (Action::Library { .. }, _) => "<launch dir> (inside the worker)".to_string(),
            (_, ".") => "<work dir>".to_string(),
            (_, sg) => format!("<work dir>/{sg}"),
        };
        o.push_str(&format!("   cwd     {cwd}\n"));
        o.push_str(&format!("   $ {command}\n"));
    }
    if let Some(n) = note(step) {
        o.push_str(&format!("   {n}\n"));
    }
    if !step.reads.is_empty() {
        o.push_str(&format!("   reads   {}\n", step.reads.join(" ")));
    }
    if !step.writes.is_empty() {
        o.push_str(&format!("   writes  {}\n", step.writes.join(" ")));
    }
    o
}
