//! Steps 2–4 of `buildPipeline`: `process_serial_tpb_opts`, `validate_args` (both before any
//! collector sees the inputs — SEED), and the normalisation of the typed inputs, in the order
//! 02-plan.md gives. Each rule records a decision with its provenance.

use super::{Decision, PlanError};
use crate::cli::inputs::{CompileInputs, OptLevel};
use crate::cli::lower::Given;
use crate::error::NccError;
use crate::provenance::Source;
use crate::recon::plan as recon;

/// Targets whose Logical NeuronCore size may be 2 (and defaults to 2).
pub const LNC2_TARGETS: &[&str] = &["trn2", "trn2n", "trn3"];

/// Attributes normalisation derives that are not dests of the flag table.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Derived {
    /// Sorted.
    pub dge_on_levels: Vec<String>,
    /// The legacy standalone flow is selected (by `--enable-experimental-tensorized-scheduler`):
    /// the experimental Backend job is scheduled when the backend gate is open.
    pub internal_run_standalone_legacy_compilation: bool,
    /// BIR simulation is on (tensorizer opt level `nki`, unless
    /// `--internal-disable-birsim-validation`): the name filter keeps BIRSim.
    pub bir_simulation: bool,
}

/// The `--lnc` a target gets when none is given: 2 on [`LNC2_TARGETS`], else 1.
pub(crate) fn default_lnc(target: &str) -> i64 {
    if LNC2_TARGETS.contains(&target) {
        2
    } else {
        1
    }
}

/// `process_serial_tpb_opts` (SEED names it; its content is RECON).
pub(crate) fn process_serial_tpb_opts(
    inputs: &CompileInputs,
    decisions: &mut Vec<Decision>,
) -> Result<(), String> {
    recon::process_serial_tpb_opts(inputs)?;
    decisions.push(Decision::new(
        "process_serial_tpb_opts",
        format!(
            "--neuroncore-pipeline-cores = {} (must be >= 1)",
            inputs.neuroncore_pipeline_cores
        ),
        Source::Recon,
    ));
    Ok(())
}

/// `validate_args`: every check that fails a compile (exit 70) before the collectors run.
pub(crate) fn validate_args(
    inputs: &CompileInputs,
    model: &str,
    model_exists: bool,
    decisions: &mut Vec<Decision>,
) -> Result<(), PlanError> {
    if !model_exists {
        return Err(PlanError::Compile(NccError::model_missing(model)));
    }
    let allocator = inputs.allocator.as_str();
    if !["coloring", "linear_scan"].contains(&allocator) {
        return Err(PlanError::Compile(NccError::plain(format!(
            "Unsupported allocator= {allocator}"
        ))));
    }
    let scheduler = inputs.scheduler.as_str();
    if ![
        "none",
        "experimental-loop-shift-left",
        "experimental-loop-lsa",
    ]
    .contains(&scheduler)
    {
        return Err(PlanError::Compile(NccError::plain(format!(
            "Unsupported scheduler= {scheduler}"
        ))));
    }
    if inputs.static_weights && inputs.enable_fast_loading_neuron_binaries {
        return Err(PlanError::Compile(NccError::plain(
            "Option --enable-fast-loading-neuron-binaries cannot be used with --static-weights.",
        )));
    }
    let target = inputs.target();
    let lnc = inputs
        .logical_nc_config
        .unwrap_or_else(|| default_lnc(target));
    let allowed: &[i64] = if LNC2_TARGETS.contains(&target) {
        &[1, 2]
    } else {
        &[1]
    };
    if !allowed.contains(&lnc) {
        let supported = if allowed.len() == 2 { "1 or 2" } else { "1" };
        return Err(PlanError::Compile(NccError::illegal_argument(
            format!(
                "Logical Neuron Core size {lnc} is not supported on {target}. The specified architecture only supports Logical Neuron Core size of {supported}."
            ),
            format!("Update the Logical Neuron Core size to {supported} or check that the target architecture is correct."),
        )));
    }
    let arch = inputs.arch();
    if arch == "sunda" && lnc != 1 {
        return Err(PlanError::Compile(NccError::illegal_argument(
            format!("--arch sunda requires a Logical Neuron Core size of 1, not {lnc}."),
            "Set --lnc 1 for --arch sunda.",
        )));
    }
    decisions.push(Decision::new(
        "validate_args",
        format!("passed (logical NeuronCore size {lnc} on {target})"),
        Source::Wiki,
    ));
    Ok(())
}

/// The normalisation steps 4.1–4.11, in order. Returns the derived attributes; appends warnings
/// and USER-level messages.
pub(crate) fn normalise(
    inputs: &mut CompileInputs,
    given: Given,
    decisions: &mut Vec<Decision>,
    warnings: &mut Vec<String>,
    user_messages: &mut Vec<String>,
) -> Derived {
    let optlevel = defaults(inputs, given, decisions);
    let dge_on_levels = dge_levels(inputs, decisions, optlevel);
    let legacy = backend_flow(inputs, decisions, optlevel);
    unrolling(inputs, given, decisions, warnings, user_messages, optlevel);
    let bir_simulation = simulation_and_casts(inputs, decisions);
    Derived {
        dge_on_levels,
        internal_run_standalone_legacy_compilation: legacy,
        bir_simulation,
    }
}

/// 4.1–4.4: the arch and logical NC config defaults, the distribution strategy, the optlevel
/// (`--enable-experimental-O1`, the default); the optlevel.
fn defaults(inputs: &mut CompileInputs, given: Given, decisions: &mut Vec<Decision>) -> OptLevel {
    let target = inputs.target().to_string();

    // 4.1 arch and logical_nc_config defaults.
    if inputs.arch.is_none() {
        let arch = recon::default_arch(&target);
        decisions.push(Decision::new(
            "arch default",
            format!("arch = {arch} (the target's family)"),
            Source::Recon,
        ));
        inputs.arch = Some(arch);
    }
    if inputs.logical_nc_config.is_none() {
        let lnc = default_lnc(&target);
        decisions.push(Decision::new(
            "logical_nc_config default",
            format!("{lnc} on {target}"),
            Source::Wiki,
        ));
        inputs.logical_nc_config = Some(lnc);
    }

    // 4.2 distribution strategy.
    if inputs.distribution_type_llm_training {
        inputs.distribution_strategy = Some("llm-training".into());
        decisions.push(Decision::new(
            "--distribution-type-llm-training",
            "distribution_strategy = llm-training",
            Source::Wiki,
        ));
    }

    // 4.3 --enable-experimental-O1.
    if recon::experimental_o1_sets_optlevel(inputs, given) {
        inputs.optlevel = OptLevel::O1;
        decisions.push(Decision::new(
            "--enable-experimental-O1",
            "optlevel = 1 (acts as -O1)",
            Source::Recon,
        ));
    }

    // 4.4 optlevel (a string; the table's default is "2").
    let optlevel = inputs.optlevel;
    decisions.push(Decision::new(
        "optlevel",
        if given.optlevel {
            format!("\"{optlevel}\" (given)")
        } else {
            format!("\"{optlevel}\" (default)")
        },
        Source::Seed,
    ));
    optlevel
}

/// 4.5: the DGE levels on.
fn dge_levels(
    inputs: &mut CompileInputs,
    decisions: &mut Vec<Decision>,
    optlevel: OptLevel,
) -> Vec<String> {
    // 4.5 DGE levels.
    inputs.internal_enable_dge_levels.push("io".into());
    let enable = inputs.internal_enable_dge_levels.clone();
    let disable = &inputs.internal_disable_dge_levels;
    let mut levels: Vec<String> = ["io".to_string(), "scalar_dynamic_offset".to_string()]
        .into_iter()
        .chain(enable)
        .collect();
    levels.retain(|l| !disable.contains(l));
    levels.sort();
    levels.dedup();
    if !inputs.enable_dge || optlevel == OptLevel::O0 {
        levels.clear();
        decisions.push(Decision::new(
            "DGE levels",
            "none (DGE disabled or -O0)",
            Source::Wiki,
        ));
    } else {
        decisions.push(Decision::new("DGE levels", levels.join(", "), Source::Wiki));
    }
    levels
}

/// 4.6–4.7: which backend flow runs; whether the legacy standalone flow is selected.
fn backend_flow(
    inputs: &mut CompileInputs,
    decisions: &mut Vec<Decision>,
    optlevel: OptLevel,
) -> bool {
    let mut legacy = false;
    // 4.6 -O0 disables the new backend.
    if optlevel == OptLevel::O0 {
        inputs.enable_internal_new_backend = false;
        decisions.push(Decision::new(
            "-O0",
            "enable_internal_new_backend = False",
            Source::Seed,
        ));
    }

    // 4.7 the tensorized scheduler selects the legacy standalone flow.
    if inputs.enable_experimental_tensorized_scheduler {
        legacy = true;
        inputs.enable_internal_new_backend = false;
        decisions.push(Decision::new(
            "--enable-experimental-tensorized-scheduler",
            "internal_run_standalone_legacy_compilation = True, enable_internal_new_backend = False",
            Source::Wiki,
        ));
    }
    legacy
}

/// 4.8–4.9: layer unrolling (fsdp, -O3).
fn unrolling(
    inputs: &mut CompileInputs,
    given: Given,
    decisions: &mut Vec<Decision>,
    warnings: &mut Vec<String>,
    user_messages: &mut Vec<String>,
    optlevel: OptLevel,
) {
    // 4.8 fsdp unrolls by 4 unless the user set the factor.
    if inputs.distribution_strategy.as_deref() == Some("fsdp") {
        if given.layer_unroll_factor {
            decisions.push(Decision::new(
                "fsdp layer unroll",
                "not applied (--layer-unroll-factor given)",
                Source::Wiki,
            ));
        } else {
            inputs.layer_unroll_factor = 4;
            decisions.push(Decision::new(
                "fsdp layer unroll",
                "layer_unroll_factor = 4",
                Source::Wiki,
            ));
        }
    }

    // 4.9 -O3 is compiled as -O2 with no layer unrolling (and so no backend).
    if optlevel == OptLevel::O3 {
        inputs.optlevel = OptLevel::O2;
        inputs.layer_unroll_factor = 0;
        user_messages.push(
            "The -O3 setting is not optimized for compilation time. Please refer to the neuron documentation for the recommended optimization level.".into(),
        );
        warnings.push(format!(
            "-O3 sets layer_unroll_factor=0: {}",
            super::collectors::NO_NEFF
        ));
        decisions.push(Decision::new(
            "-O3",
            "optlevel = \"2\", layer_unroll_factor = 0",
            Source::Wiki,
        ));
    }
}

/// 4.10–4.11: BIR simulation (whether on), the auto-cast type as forwarded.
fn simulation_and_casts(inputs: &mut CompileInputs, decisions: &mut Vec<Decision>) -> bool {
    // 4.10 BIR simulation.
    let bir_simulation = recon::bir_simulation(inputs);
    if inputs.internal_tensorizer_opt_level.as_deref() == Some("nki") {
        decisions.push(Decision::new(
            "BIR simulation",
            if bir_simulation {
                "on (tensorizer opt level nki)"
            } else {
                "off (--internal-disable-birsim-validation)"
            },
            Source::Recon,
        ));
    }

    // 4.11 fp8_e4m3 is forwarded as fp8e4.
    if inputs.auto_cast_type == "fp8_e4m3" {
        inputs.auto_cast_type = "fp8e4".into();
        decisions.push(Decision::new(
            "--auto-cast-type fp8_e4m3",
            "forwarded as fp8e4",
            Source::Wiki,
        ));
    }
    bir_simulation
}
