//! The three collectors (SEED, exact): `collectFrontendPipeline`, `collectWalrusPipeline`,
//! `collectBackendPipeline`. Their results are concatenated, front + walrus + backend, with no
//! sort, no dedup and no graph.

use super::{Decision, Derived};
use crate::cli::namespace::{Dest, Namespace, Value};
use crate::jobs::Job;
use crate::provenance::Source;

/// The front sub-list. With `meta_module != 0` it pins `logical_nc_config = 1` first, then
/// collapses to `[HLOToTensorizer, Frontend]`.
pub fn collect_frontend(ns: &mut Namespace, decisions: &mut Vec<Decision>) -> Vec<Job> {
    let meta = ns.int(Dest::MetaModule).unwrap_or(0);
    if meta != 0 {
        ns.set(Dest::LogicalNcConfig, Value::Int(1));
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
    let xla = ns.str(Dest::Framework) == Some("XLA");
    let goldens = if xla {
        Job::XLAInferGoldens
    } else {
        Job::InferGoldens
    };
    decisions.push(Decision::new(
        "golden evaluator",
        format!(
            "{goldens} (framework {})",
            ns.str(Dest::Framework).unwrap_or("?")
        ),
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
pub fn collect_walrus(
    ns: &Namespace,
    bir_simulation: bool,
    decisions: &mut Vec<Decision>,
) -> (Vec<Job>, Vec<&'static str>) {
    let optlevel = ns.str(Dest::Optlevel).unwrap_or("2");
    let passes = crate::recon::plan::walrus_passes(ns, optlevel, bir_simulation);
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
pub fn collect_backend(
    ns: &Namespace,
    derived: &Derived,
    decisions: &mut Vec<Decision>,
    warnings: &mut Vec<String>,
) -> Vec<Job> {
    let modular = ns.bool(Dest::EnableInternalModularCompilation);
    let linker = ns.bool(Dest::EnableInternalBirLinker);
    let unroll = ns.int(Dest::LayerUnrollFactor).unwrap_or(0);
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
        if ns.bool(Dest::EnableInternalNeffWrapper) {
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
