//! RECON rules of the jobs' command lines (03-jobs.md): which optional native-tool flags appear
//! when. The spellings themselves are WIKI facts; the gates below are reconstructed.

use crate::cli::inputs::CompileInputs;

/// `hlo2penguin`'s optional flags, in the order they are appended.
pub(crate) fn hlo2penguin_optional_flags(inputs: &CompileInputs) -> Vec<String> {
    let meta = inputs.meta_module;
    let mut v = Vec::new();
    if inputs.enable_internal_modular_compilation || meta != 0 {
        v.push("--partition".to_string());
    }
    if meta != 0 {
        v.push(format!("--layers-per-module={meta}"));
    }
    if inputs.spmd || inputs.enable_experimental_spmd {
        v.push("--spmd".to_string());
    }
    if inputs.internal_hlo_remat {
        v.push("--remat".to_string());
    }
    if inputs.internal_hlo_analyze_schedule {
        v.push("--analyze-schedule".to_string());
    }
    if inputs.query_compute_placement || inputs.internal_compute_engine_placement {
        v.push("--engine-placement-mode".to_string());
    }
    if inputs.internal_build_with_users {
        v.push("--build-with-users".to_string());
    }
    if inputs.internal_disable_layer_det {
        v.push("--disable-layer-det".to_string());
    }
    v
}

/// `xla_infergoldens`' optional flags after the `--input` list.
pub(crate) fn xla_infergoldens_optional_flags(inputs: &CompileInputs) -> Vec<String> {
    let mut v = Vec::new();
    if inputs.spmd || inputs.enable_experimental_spmd {
        v.push("--spmd".to_string());
    }
    if inputs.upcast_all_to_fp32 || inputs.internal_upcast_all_to_fp32 {
        v.push("--upcast-all-to-fp32".to_string());
    }
    if inputs.experimental_unsafe_fp8e4m3fn_as_fp8e4m3
        || inputs.internal_experimental_unsafe_fp8e4m3fn_as_fp8e4m3
    {
        v.push("--experimental-unsafe-fp8e4m3fn-as-fp8e4m3".to_string());
    }
    v
}

/// `walrus_driver`'s optional flags after the fixed ones.
pub(crate) fn walrus_driver_optional_flags(
    inputs: &CompileInputs,
    dge_on_levels: &[String],
) -> Vec<String> {
    let mut v = Vec::new();
    if !dge_on_levels.is_empty() {
        v.push("--dge-levels".to_string());
        v.push(dge_on_levels.join(","));
    }
    if inputs.internal_smt_allocation {
        v.push("--smt-allocation".to_string());
    }
    if let Some(n) = inputs.internal_max_instruction_limit {
        v.push("--max-instruction-limit".to_string());
        v.push(n.to_string());
    }
    if let Some(p) = &inputs.internal_print_after {
        v.push("--print-after".to_string());
        v.push(p.to_string());
    }
    if let Some(n) = inputs.internal_dma_qos_class_count {
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
pub(crate) fn simplify_transpose(
    reshape: &[usize],
    transpose: &[usize],
) -> (Vec<usize>, Vec<usize>) {
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
