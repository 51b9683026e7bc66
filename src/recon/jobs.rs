//! RECON rules of the jobs' command lines (03-jobs.md): which optional native-tool flags appear
//! when. The spellings themselves are WIKI facts; the gates below are reconstructed.

use crate::cli::namespace::Namespace;

/// `hlo2penguin`'s optional flags, in the order they are appended.
pub fn hlo2penguin_optional_flags(ns: &Namespace) -> Vec<String> {
    let meta = ns.int("meta_module").unwrap_or(0);
    let mut v = Vec::new();
    if ns.bool("enable_internal_modular_compilation") || meta != 0 {
        v.push("--partition".to_string());
    }
    if meta != 0 {
        v.push(format!("--layers-per-module={meta}"));
    }
    if ns.bool("spmd") || ns.bool("enable_experimental_spmd") {
        v.push("--spmd".to_string());
    }
    if ns.bool("internal_hlo_remat") {
        v.push("--remat".to_string());
    }
    if ns.bool("internal_hlo_analyze_schedule") {
        v.push("--analyze-schedule".to_string());
    }
    if ns.bool("query_compute_placement") || ns.bool("internal_compute_engine_placement") {
        v.push("--engine-placement-mode".to_string());
    }
    if ns.bool("internal_build_with_users") {
        v.push("--build-with-users".to_string());
    }
    if ns.bool("internal_disable_layer_det") {
        v.push("--disable-layer-det".to_string());
    }
    v
}

/// `xla_infergoldens`' optional flags after the `--input` list.
pub fn xla_infergoldens_optional_flags(ns: &Namespace) -> Vec<String> {
    let mut v = Vec::new();
    if ns.bool("spmd") || ns.bool("enable_experimental_spmd") {
        v.push("--spmd".to_string());
    }
    if ns.bool("upcast_all_to_fp32") || ns.bool("internal_upcast_all_to_FP32") {
        v.push("--upcast-all-to-fp32".to_string());
    }
    if ns.bool("experimental_unsafe_fp8e4m3fn_as_fp8e4m3")
        || ns.bool("internal_experimental_unsafe_fp8e4m3fn_as_fp8e4m3")
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
    if ns.bool("internal_smt_allocation") {
        v.push("--smt-allocation".to_string());
    }
    if let Some(n) = ns.int("internal_max_instruction_limit") {
        v.push("--max-instruction-limit".to_string());
        v.push(n.to_string());
    }
    if let Some(p) = ns.str("internal_print_after") {
        v.push("--print-after".to_string());
        v.push(p.to_string());
    }
    if let Some(n) = ns.int("internal_dma_qos_class_count") {
        v.push("--dma-qos-class-count".to_string());
        v.push(n.to_string());
    }
    v
}

/// The CPU-time limit (seconds) of the experimental Backend job's `ulimit -t` (WIKI gives the
/// form; the value is ours).
pub const BACKEND_CPU_LIMIT_S: u64 = 3600;
