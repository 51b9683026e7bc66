//! RECON rules of the jobs' command lines (03-jobs.md): which optional native-tool flags appear
//! when. The spellings themselves are WIKI facts; the gates below are reconstructed.

use crate::cli::namespace::{Dest, Namespace};

/// `hlo2penguin`'s optional flags, in the order they are appended.
pub fn hlo2penguin_optional_flags(ns: &Namespace) -> Vec<String> {
    let meta = ns.int(Dest::MetaModule).unwrap_or(0);
    let mut v = Vec::new();
    if ns.bool(Dest::EnableInternalModularCompilation) || meta != 0 {
        v.push("--partition".to_string());
    }
    if meta != 0 {
        v.push(format!("--layers-per-module={meta}"));
    }
    if ns.bool(Dest::Spmd) || ns.bool(Dest::EnableExperimentalSpmd) {
        v.push("--spmd".to_string());
    }
    if ns.bool(Dest::InternalHloRemat) {
        v.push("--remat".to_string());
    }
    if ns.bool(Dest::InternalHloAnalyzeSchedule) {
        v.push("--analyze-schedule".to_string());
    }
    if ns.bool(Dest::QueryComputePlacement) || ns.bool(Dest::InternalComputeEnginePlacement) {
        v.push("--engine-placement-mode".to_string());
    }
    if ns.bool(Dest::InternalBuildWithUsers) {
        v.push("--build-with-users".to_string());
    }
    if ns.bool(Dest::InternalDisableLayerDet) {
        v.push("--disable-layer-det".to_string());
    }
    v
}

/// `xla_infergoldens`' optional flags after the `--input` list.
pub fn xla_infergoldens_optional_flags(ns: &Namespace) -> Vec<String> {
    let mut v = Vec::new();
    if ns.bool(Dest::Spmd) || ns.bool(Dest::EnableExperimentalSpmd) {
        v.push("--spmd".to_string());
    }
    if ns.bool(Dest::UpcastAllToFp32) || ns.bool(Dest::InternalUpcastAllToFP32) {
        v.push("--upcast-all-to-fp32".to_string());
    }
    if ns.bool(Dest::ExperimentalUnsafeFp8e4m3fnAsFp8e4m3)
        || ns.bool(Dest::InternalExperimentalUnsafeFp8e4m3fnAsFp8e4m3)
    {
        v.push("--experimental-unsafe-fp8e4m3fn-as-fp8e4m3".to_string());
    }
    v
}

/// `walrus_driver`'s optional flags after the fixed ones.
pub fn walrus_driver_optional_flags(ns: &Namespace, dge_on_levels: &[String]) -> Vec<String> {
    let mut v = Vec::new();
    if !dge_on_levels.is_empty() {
        v.push("--dge-levels".to_string());
        v.push(dge_on_levels.join(","));
    }
    if ns.bool(Dest::InternalSmtAllocation) {
        v.push("--smt-allocation".to_string());
    }
    if let Some(n) = ns.int(Dest::InternalMaxInstructionLimit) {
        v.push("--max-instruction-limit".to_string());
        v.push(n.to_string());
    }
    if let Some(p) = ns.str(Dest::InternalPrintAfter) {
        v.push("--print-after".to_string());
        v.push(p.to_string());
    }
    if let Some(n) = ns.int(Dest::InternalDmaQosClassCount) {
        v.push("--dma-qos-class-count".to_string());
        v.push(n.to_string());
    }
    v
}

/// The CPU-time limit (seconds) of the experimental Backend job's `ulimit -t` (WIKI gives the
/// form; the value is ours).
pub const BACKEND_CPU_LIMIT_S: u64 = 3600;

/// StaticIOTranspose's simplification (a reconstruction of the original's
/// `simplifyWeightTransform`): drop size-1 dims, then merge runs of axes that stay adjacent and in
/// order under the permutation. `transpose[i]` is the input axis that becomes output axis `i`.
/// The result moves every element to the same place as the original entry does.
pub fn simplify_transpose(reshape: &[usize], transpose: &[usize]) -> (Vec<usize>, Vec<usize>) {
    // Drop size-1 dims, renumbering the remaining axes.
    let keep: Vec<usize> = (0..reshape.len()).filter(|&a| reshape[a] != 1).collect();
    let renumber = |a: usize| keep.iter().position(|&k| k == a);
    let dims: Vec<usize> = keep.iter().map(|&a| reshape[a]).collect();
    let perm: Vec<usize> = transpose.iter().filter_map(|&a| renumber(a)).collect();
    if perm.is_empty() {
        return (vec![], vec![]);
    }
    // Group consecutive output axes whose input axes are consecutive and increasing.
    let mut groups: Vec<Vec<usize>> = vec![vec![perm[0]]];
    for w in perm.windows(2) {
        if w[1] == w[0] + 1 {
            groups.last_mut().expect("non-empty").push(w[1]);
        } else {
            groups.push(vec![w[1]]);
        }
    }
    // Input order of the groups gives the new reshape; output order gives the new permutation.
    let mut by_input: Vec<usize> = (0..groups.len()).collect();
    by_input.sort_by_key(|&g| groups[g][0]);
    let new_reshape: Vec<usize> = by_input
        .iter()
        .map(|&g| groups[g].iter().map(|&a| dims[a]).product())
        .collect();
    let new_perm: Vec<usize> = (0..groups.len())
        .map(|g| by_input.iter().position(|&x| x == g).expect("group"))
        .collect();
    (new_reshape, new_perm)
}
