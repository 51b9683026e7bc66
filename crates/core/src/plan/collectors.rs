//! The three collectors (SEED, exact): `collectFrontendPipeline`, `collectWalrusPipeline`,
//! `collectBackendPipeline`. Their results are concatenated, front + walrus + backend, with no
//! sort, no dedup and no graph.

use super::{Decision, Derived};
use crate::cli::inputs::CompileInputs;
use crate::jobs::Job;
use crate::provenance::Source;

/// The front sub-list. With `meta_module != 0` it pins `logical_nc_config = 1` first, then
/// collapses to `[HLOToTensorizer, Frontend]`.
pub(crate) fn collect_frontend(
    inputs: &mut CompileInputs,
    decisions: &mut Vec<Decision>,
) -> Vec<Job> {
    let meta = inputs.meta_module;
    if meta != 0 {
        inputs.logical_nc_config = Some(1);
        decisions.push(Decision::new(
            "meta-module collapse",
            format!("applied (meta_module = {meta}): logical_nc_config pinned to 1; front = HLOToTensorizer, Frontend"),
            Source::Seed,
        ));
        return vec![Job::HLOToTensorizer, Job::Frontend];
    }
    decisions.push(Decision::new(
        "meta-module collapse",
        "not applied (meta_module = 0)",
        Source::Seed,
    ));
    let xla = inputs.framework == "XLA";
    let goldens = if xla {
        Job::XLAInferGoldens
    } else {
        Job::InferGoldens
    };
    decisions.push(Decision::new(
        "golden evaluator",
        format!("{goldens} (framework {})", inputs.framework),
        Source::Seed,
    ));
    vec![
        Job::HLOToTensorizer,
        goldens,
        Job::Frontend,
        Job::StaticIOTranspose,
    ]
}

/// The walrus sub-list: always the one job `WalrusDriver`; the pass list goes to its process.
pub(crate) fn collect_walrus(
    inputs: &CompileInputs,
    bir_simulation: bool,
    decisions: &mut Vec<Decision>,
) -> (Vec<Job>, Vec<&'static str>) {
    let passes = crate::recon::plan::walrus_passes(inputs, bir_simulation);
    decisions.push(Decision::new(
        "walrus sub-list",
        "WalrusDriver (one job; passes forwarded as --pass)",
        Source::Seed,
    ));
    decisions.push(Decision::new(
        "walrus pass list",
        passes.join(","),
        Source::Recon,
    ));
    (vec![Job::WalrusDriver], passes)
}

/// The end of the warning of a plan whose backend gate is closed.
pub const NO_NEFF: &str =
    "Backend, Kelper and NeffWrapper are not scheduled; no NEFF will be written";

/// The backend sub-list, inside the four-condition gate. A closed gate adds the no-NEFF warning
/// (once: -O3 gave its own already).
pub(crate) fn collect_backend(
    inputs: &CompileInputs,
    derived: &Derived,
    decisions: &mut Vec<Decision>,
    warnings: &mut Vec<String>,
) -> Vec<Job> {
    let modular = inputs.enable_internal_modular_compilation;
    let linker = inputs.enable_internal_bir_linker;
    let unroll = inputs.layer_unroll_factor;
    let mut pipeline = Vec::new();
    if !modular && !linker && unroll > 0 {
        decisions.push(Decision::new(
            "backend gate",
            format!("open (not modular, not bir-linker, layer_unroll_factor = {unroll} > 0)"),
            Source::Seed,
        ));
        if derived.internal_run_standalone_legacy_compilation {
            pipeline.push(Job::Backend);
            decisions.push(Decision::new(
                "Backend",
                "scheduled (legacy standalone compilation)",
                Source::Seed,
            ));
        }
        pipeline.push(Job::Kelper);
        if inputs.enable_internal_neff_wrapper {
            pipeline.push(Job::NeffWrapper);
            decisions.push(Decision::new(
                "NeffWrapper",
                "scheduled (--enable-internal-neff-wrapper)",
                Source::Seed,
            ));
        }
    } else {
        let why = if modular {
            "enable_internal_modular_compilation".to_string()
        } else if linker {
            "enable_internal_bir_linker".to_string()
        } else {
            format!("layer_unroll_factor = {unroll} <= 0")
        };
        decisions.push(Decision::new(
            "backend gate",
            format!("closed ({why}): no Backend, Kelper or NeffWrapper"),
            Source::Seed,
        ));
        if !warnings.iter().any(|w| w.ends_with(NO_NEFF)) {
            let cause = if modular {
                "--enable-internal-modular-compilation".to_string()
            } else if linker {
                "--enable-internal-bir-linker".to_string()
            } else {
                format!("layer_unroll_factor={unroll}")
            };
            warnings.push(format!("{cause}: {NO_NEFF}"));
        }
    }
    pipeline
}
