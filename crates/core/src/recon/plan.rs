//! RECON rules of plan building (02-plan.md).

use crate::cli::inputs::{CompileInputs, OptLevel};
use crate::cli::lower::Given;
use crate::jobs::Job;

/// `process_serial_tpb_opts`: the seed names the step and fixes its place (after parsing, before
/// validation) but not its content. Reconstructed as the check of `--neuroncore-pipeline-cores`,
/// the one serial-TPB (pipelined NeuronCore) option: an integer ≥ 1. The error is a usage error
/// (exit 2) in argparse's form.
pub(crate) fn process_serial_tpb_opts(inputs: &CompileInputs) -> Result<(), String> {
    match inputs.neuroncore_pipeline_cores {
        n if n >= 1 => Ok(()),
        _ => Err("argument --neuroncore-pipeline-cores: must be >= 1".to_string()),
    }
}

/// `--arch` when not given: the target's own family name.
pub(crate) fn default_arch(target: &str) -> String {
    target.to_string()
}

/// `--enable-experimental-O1` (deprecated; DOCS: replaced by `-O1`) acts as `-O1` when `-O` was
/// not given.
pub(crate) fn experimental_o1_sets_optlevel(inputs: &CompileInputs, given: Given) -> bool {
    inputs.enable_experimental_o1 && !given.optlevel
}

/// BIR simulation (the attribute name `bir_simulation` is ours): on when the tensorizer opt
/// level is `nki` (WIKI: it appends the simulator stage) unless
/// `--internal-disable-birsim-validation`.
pub(crate) fn bir_simulation(inputs: &CompileInputs) -> bool {
    inputs.internal_tensorizer_opt_level.as_deref() == Some("nki")
        && !inputs.internal_disable_birsim_validation
}

/// `--pipeline` items: space- or comma-separated, in order; `compile` stands for the collected
/// names, any other item is a job name taken as is — an empty item too (`--pipeline ""`,
/// `compile,,SaveTemps`), which the registry then refuses as it refuses any unknown name.
pub(crate) fn expand_pipeline(items: &[String], collected: &[Job]) -> Vec<String> {
    let mut out = Vec::new();
    for item in items.iter().flat_map(|i| i.split(',')).map(str::trim) {
        if item == "compile" {
            out.extend(collected.iter().map(|j| j.to_string()));
        } else {
            out.push(item.to_string());
        }
    }
    out
}

/// `--state in:<A>:out:<B>` (WIKI names the form): keep the sub-range from the first job named A
/// through the first job named B, inclusive; an empty A or B means the start or the end.
/// Returns the kept range, or the name that is not in the list.
pub(crate) fn apply_state(
    state: &str,
    names: &[String],
) -> Result<std::ops::Range<usize>, StateError> {
    let rest = state.strip_prefix("in:").ok_or(StateError::Malformed)?;
    let (a, b) = rest.split_once(":out:").ok_or(StateError::Malformed)?;
    let find = |x: &str| {
        names
            .iter()
            .position(|n| n == x)
            .ok_or_else(|| StateError::NotInPipeline(x.to_string()))
    };
    let start = if a.is_empty() { 0 } else { find(a)? };
    let end = if b.is_empty() {
        names.len()
    } else {
        find(b)? + 1
    };
    Ok(start..end.max(start))
}

/// Why `--state` could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// Not of the form `in:<A>:out:<B>`.
    Malformed,
    /// A job name that is not in the pipeline (the name).
    NotInPipeline(String),
}

/// What the name filter (the seed's py-1252 comprehension) does with one name. The seed fixes the
/// four names it tests; what each branch does is reconstructed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterAction {
    /// The name stays in the pipeline.
    Keep,
    /// Dropped, with the warning to print.
    Drop(String),
    /// Dropped silently (the reason is recorded as a decision).
    DropSilently(&'static str),
}

/// The name filter's action for one name.
/// - `Watchpoint`: kept only with `--internal-compiler-debug-mode`;
/// - `BIRSim`: kept only when BIR simulation is on;
/// - `InferGoldens` / `MetaInferGoldens`: dropped when `meta_module != 0` (the sub-module is
///   checked at link time, as the meta-module arm's own omission of goldens says);
/// - every other name passes.
pub(crate) fn name_filter(
    name: &str,
    inputs: &CompileInputs,
    bir_simulation: bool,
) -> FilterAction {
    match Job::named(name) {
        Some(Job::Watchpoint) if inputs.internal_compiler_debug_mode.is_none() => FilterAction::Drop(
            "Watchpoint dropped from the pipeline: it runs only with --internal-compiler-debug-mode".to_string(),
        ),
        Some(Job::BIRSim) if !bir_simulation => FilterAction::Drop(
            "BIRSim dropped from the pipeline: BIR simulation is off (it needs --internal-tensorizer-opt-level=nki)"
                .to_string(),
        ),
        Some(Job::InferGoldens | Job::MetaInferGoldens) if inputs.meta_module != 0 => {
            FilterAction::DropSilently("golden evaluation is done at link time for a meta-module")
        }
        _ => FilterAction::Keep,
    }
}

/// The walrus pass list (`walrus_passes`), forwarded to one `walrus_driver` process per subgraph.
/// The seed fixes the token corpus; WIKI names four of the namespace reads (`allocator`,
/// `scheduler`, `enable_bir_vnsplitter`, `neuroncore_pipeline_cores`); the gates and the order
/// (the corpus order) are reconstructed. `lsa` and `coloring` are allocator option values of the
/// native tool, not passes.
pub fn walrus_passes(inputs: &CompileInputs, bir_simulation: bool) -> Vec<&'static str> {
    let optlevel = inputs.optlevel;
    let scheduler = inputs.scheduler.as_str();
    let allocator = inputs.allocator.as_str();
    let vnsplitter = inputs.enable_bir_vnsplitter;
    let mut p = vec!["unroll", "lower_ac"];
    p.push(match scheduler {
        "experimental-loop-lsa" => "experimental_loop_lsa",
        "experimental-loop-shift-left" => "experimental_loop_shift_left",
        _ => "pre_sched",
    });
    if inputs.neuroncore_pipeline_cores > 1 {
        p.push("partitioner");
    }
    if vnsplitter {
        p.push("bir_splitter");
    }
    p.push(if allocator == "linear_scan" {
        "linear_scan_allocator"
    } else {
        "coloring_allocator"
    });
    if optlevel != OptLevel::O0 {
        p.push("dma_optimization");
    }
    if inputs.enable_internal_anti_dependence_reduction {
        p.push("anti_dependency_analyzer");
    }
    if !vnsplitter {
        p.push("vn_splitter");
    }
    p.push(if scheduler == "experimental-loop-shift-left" {
        "shift_left"
    } else {
        "post_sched"
    });
    if optlevel == OptLevel::O2 {
        p.push("tensorcopy_accel");
    }
    if optlevel != OptLevel::O0 {
        p.push("dep_reduction");
    }
    p.push("print_metrics");
    if !inputs.internal_disable_birverifier_validation {
        p.push("birverifier");
    }
    if bir_simulation {
        p.push("bir_sim");
    }
    p
}
