//! What can change the NEFF: one typed field for every flag of the original's command line that
//! reaches the compile (and the few of nxcc's own that cannot be told apart from one), lowered
//! once from the parsed namespace ([`super::lower`]) and normalised by the plan
//! ([`crate::plan`]). The cache key hashes this struct whole — a flag is keyed because its field
//! lives here, and not keyed because it lives in the driver's [`super::settings::Settings`] —, the
//! dry run's `args` shows it, and the jobs read their command lines from it.
//!
//! The fields follow the flag table's order; each is named after its dest (the table's spelling
//! of the attribute, which serialisation keeps) and typed by the row's kind: `bool` for a switch,
//! `i64`/`f64` for a number with a default (`Option` without one), `String` for text with a
//! default (`Option` without one), `Vec<String>` for a repeatable or `nargs='+'` option.

use serde::{Deserialize, Deserializer, Serialize};

/// A float whose value may be `NaN` or infinite (Python's `float()` reads `nan` and `inf`),
/// which JSON writes as `null`: read back as `NaN`, so it is written as `null` again.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// `--optlevel`/`-O`: the optimisation level, as the original keeps it (a string `"0"`–`"3"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OptLevel {
    /// `-O0`: no DGE, no new backend.
    #[serde(rename = "0")]
    O0,
    /// `-O1`.
    #[serde(rename = "1")]
    O1,
    /// `-O2`, the default.
    #[serde(rename = "2")]
    O2,
    /// `-O3`: compiled as `-O2` with no layer unrolling (normalisation rewrites it).
    #[serde(rename = "3")]
    O3,
}

impl OptLevel {
    /// Its spelling: `"0"` to `"3"`.
    pub fn as_str(self) -> &'static str {
        match self {
            OptLevel::O0 => "0",
            OptLevel::O1 => "1",
            OptLevel::O2 => "2",
            OptLevel::O3 => "3",
        }
    }
}

impl std::fmt::Display for OptLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every flag that can change the NEFF, typed (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompileInputs {
    /// `--fork-subcommand`: Run the subcommand in a child process (always done by nxcc; accepted for compatibility).
    pub fork_subcommand: bool,
    /// `--allocator`.
    pub allocator: String,
    /// `--arch`: Architecture family to compile for (defaults to the target).
    pub arch: Option<String>,
    /// `--auto-cast`: Automatically cast FP32 operations: none, matmult or all.
    pub auto_cast: String,
    /// `--auto-cast-type`: Data type to auto-cast to.
    pub auto_cast_type: String,
    /// `--auto-compare-mismatch`.
    pub auto_compare_mismatch: bool,
    /// `--cc-pipeline-tiling-factor`.
    pub cc_pipeline_tiling_factor: i64,
    /// `--cnn-training-model`.
    pub cnn_training_model: bool,
    /// `--cpu-arch`.
    pub cpu_arch: Option<String>,
    /// `--disable-concat-delinearizer`.
    pub disable_concat_delinearizer: bool,
    /// `--disable-degraded-fusion`.
    pub disable_degraded_fusion: bool,
    /// `--disable-prefer-par-on-non-broadcast`.
    pub disable_prefer_par_on_non_broadcast: bool,
    /// `--disable-stream-shuffle`.
    pub disable_stream_shuffle: bool,
    /// `--disable-stream-transpose-small`.
    pub disable_stream_transpose_small: bool,
    /// `--disable-tiling-of-non-overlapping-mem-access`.
    pub disable_tiling_of_non_overlapping_mem_access: bool,
    /// `--distribution-strategy`: fsdp sets layer_unroll_factor=4 unless the user set it
    pub distribution_strategy: Option<String>,
    /// `--distribution-type-llm-training`.
    pub distribution_type_llm_training: bool,
    /// `--enable-arch-legalize`: Legalize operators for the target architecture.
    pub enable_arch_legalize: bool,
    /// `--enable-bir-vnsplitter`.
    pub enable_bir_vnsplitter: bool,
    /// `--enable-ccop-compute-overlap`.
    pub enable_ccop_compute_overlap: bool,
    /// `--enable-dge`: Enable descriptor generation engine levels (companion --disable-dge).
    pub enable_dge: bool,
    /// `--enable-experimental-bir-backend`.
    pub enable_experimental_bir_backend: bool,
    /// `--enable-experimental-bir-partitioner`.
    pub enable_experimental_bir_partitioner: bool,
    /// `--enable-experimental-fallback-scheduler`.
    pub enable_experimental_fallback_scheduler: bool,
    /// `--enable-experimental-legacy-partitioner`.
    pub enable_experimental_legacy_partitioner: bool,
    /// `--enable-experimental-no-split-dram`.
    pub enable_experimental_no_split_dram: bool,
    /// `--enable-experimental-O1`: warns: "Option --enable-experimental-O1 is deprecated and will be removed in a future release."; acts as -O1
    #[serde(rename = "enable_experimental_O1")]
    pub enable_experimental_o1: bool,
    /// `--enable-experimental-sb-xfer`.
    pub enable_experimental_sb_xfer: bool,
    /// `--enable-experimental-spmd`.
    pub enable_experimental_spmd: bool,
    /// `--enable-experimental-tensorized-scheduler`.
    pub enable_experimental_tensorized_scheduler: bool,
    /// `--enable-explicit-bwd-convs-padding`: Pad backward convolutions explicitly.
    pub enable_explicit_bwd_convs_padding: bool,
    /// `--enable-fast-context-switch`: Optimize for fast context switching between models.
    pub enable_fast_context_switch: bool,
    /// `--enable-fast-loading-neuron-binaries`: Write the NEFF archive uncompressed for faster loading.
    pub enable_fast_loading_neuron_binaries: bool,
    /// `--enable-internal-anti-dependence-reduction`.
    pub enable_internal_anti_dependence_reduction: bool,
    /// `--enable-internal-arch-legalize`.
    pub enable_internal_arch_legalize: bool,
    /// `--enable-internal-bir-e2e-compilation`.
    pub enable_internal_bir_e2e_compilation: bool,
    /// `--enable-internal-bir-linker`.
    pub enable_internal_bir_linker: bool,
    /// `--enable-internal-call-graph`.
    pub enable_internal_call_graph: bool,
    /// `--enable-internal-data-race-checker`.
    pub enable_internal_data_race_checker: bool,
    /// `--enable-internal-dma-desc-reuse`.
    pub enable_internal_dma_desc_reuse: bool,
    /// `--enable-internal-fork-backend`.
    pub enable_internal_fork_backend: bool,
    /// `--enable-internal-fork-walrus`: run the walrus backend in-process (EmbeddedWalrusDriver) instead of forking walrus_driver
    pub enable_internal_fork_walrus: bool,
    /// `--enable-internal-io-dge`: companion --disable-internal-io-dge
    pub enable_internal_io_dge: bool,
    /// `--enable-internal-lnc-single-graph-compilation`.
    pub enable_internal_lnc_single_graph_compilation: bool,
    /// `--enable-internal-memory-analysis`.
    pub enable_internal_memory_analysis: bool,
    /// `--enable-internal-micro-modular-compilation`.
    pub enable_internal_micro_modular_compilation: bool,
    /// `--enable-internal-modular-compilation`.
    pub enable_internal_modular_compilation: bool,
    /// `--enable-internal-neff-wrapper`.
    pub enable_internal_neff_wrapper: bool,
    /// `--enable-internal-new-backend`.
    pub enable_internal_new_backend: bool,
    /// `--enable-internal-relaxed-order`.
    pub enable_internal_relaxed_order: bool,
    /// `--enable-internal-walrus-replay-script`.
    pub enable_internal_walrus_replay_script: bool,
    /// `--enable-mixed-precision-accumulation`: Accumulate in higher precision (companion --disable-mixed-precision-accumulation).
    pub enable_mixed_precision_accumulation: bool,
    /// `--enable-native-kernel`: Enable native kernels.
    pub enable_native_kernel: bool,
    /// `--enable-native-kernel-select-and-scatter`.
    pub enable_native_kernel_select_and_scatter: bool,
    /// `--enable-p-to-pp-broadcast`.
    pub enable_p_to_pp_broadcast: bool,
    /// `--enable-parallel-queues`: Enable parallel DMA queues.
    pub enable_parallel_queues: bool,
    /// `--enable-saturate-infinity`: Convert +/-infinity to MAX/MIN_FLOAT in computations that overflow.
    pub enable_saturate_infinity: bool,
    /// `--enable-tritium-loopfusion`: companion --no-enable-tritium-loopfusion
    pub enable_tritium_loopfusion: bool,
    /// `--execute-repetition`.
    pub execute_repetition: i64,
    /// `--expand-batch-norm-training`.
    pub expand_batch_norm_training: bool,
    /// `--expand-batch-norm-training-and-grad`.
    pub expand_batch_norm_training_and_grad: bool,
    /// `--experimental-convolution-kernel-match`.
    pub experimental_convolution_kernel_match: bool,
    /// `--experimental-unsafe-fp8e4m3fn-as-fp8e4m3`.
    pub experimental_unsafe_fp8e4m3fn_as_fp8e4m3: bool,
    /// `--fast-math`: nargs='+'
    pub fast_math: Vec<String>,
    /// `--fork`.
    pub fork: bool,
    /// `--framework`: Framework the model comes from (only XLA).
    pub framework: String,
    /// `--hbm-scratchpad-page-size`.
    pub hbm_scratchpad_page_size: Option<i64>,
    /// `--images`: Input images (framework specific).
    pub images: Vec<String>,
    /// `--implicit-integer-downcast`: Implicit integer downcast: default, all, none, or a comma list of dot,scatter,all_reduce,reduce_scatter,pow.
    pub implicit_integer_downcast: String,
    /// `--inst-count-limit`.
    pub inst_count_limit: i64,
    /// `--internal-autotune`.
    pub internal_autotune: bool,
    /// `--internal-autotune-config`.
    pub internal_autotune_config: Option<String>,
    /// `--internal-autotune-subprocess`.
    pub internal_autotune_subprocess: bool,
    /// `--internal-backend-options`: repeatable; occurrences joined with one space; forwarded (shell-split) to walrus_driver
    pub internal_backend_options: Option<String>,
    /// `--internal-bir-enable-sb-allocation`.
    pub internal_bir_enable_sb_allocation: bool,
    /// `--internal-build-with-users`.
    pub internal_build_with_users: bool,
    /// `--internal-compiler-debug-mode`: nargs='?' const='all' (clients pass =all, =penguin)
    pub internal_compiler_debug_mode: Option<String>,
    /// `--internal-compiler-debug-mode-numerical`.
    pub internal_compiler_debug_mode_numerical: bool,
    /// `--internal-compute-engine-placement`.
    pub internal_compute_engine_placement: bool,
    /// `--internal-disable-birsim-validation`.
    pub internal_disable_birsim_validation: bool,
    /// `--internal-disable-birverifier-validation`.
    pub internal_disable_birverifier_validation: bool,
    /// `--internal-disable-dge-levels`: nargs='+'
    pub internal_disable_dge_levels: Vec<String>,
    /// `--internal-disable-fma-on-ios`.
    pub internal_disable_fma_on_ios: bool,
    /// `--internal-disable-layer-det`.
    pub internal_disable_layer_det: bool,
    /// `--internal-dma-order-constraints`: JSON text
    pub internal_dma_order_constraints: Option<String>,
    /// `--internal-dma-qos-class-count`.
    pub internal_dma_qos_class_count: Option<i64>,
    /// `--internal-dma-qos-for-spill-code`.
    pub internal_dma_qos_for_spill_code: Option<String>,
    /// `--internal-dynamic-dma-scratch-size-per-partition`.
    pub internal_dynamic_dma_scratch_size_per_partition: Option<i64>,
    /// `--internal-enable-bir-debugger-launch-configuration`.
    pub internal_enable_bir_debugger_launch_configuration: bool,
    /// `--internal-enable-dge-levels`: nargs='+'; 'io' is appended during normalisation
    pub internal_enable_dge_levels: Vec<String>,
    /// `--internal-enable-dma-qos-labeling`.
    pub internal_enable_dma_qos_labeling: bool,
    /// `--internal-experimental-unsafe-fp8e4m3fn-as-fp8e4m3`.
    pub internal_experimental_unsafe_fp8e4m3fn_as_fp8e4m3: bool,
    /// `--internal-force-all-uniq`.
    pub internal_force_all_uniq: bool,
    /// `--internal-hlo-analyze-schedule`.
    pub internal_hlo_analyze_schedule: bool,
    /// `--internal-hlo-remat`: companion --no-internal-hlo-remat
    pub internal_hlo_remat: bool,
    /// `--internal-hlo2tensorizer-options`: repeatable; shell-split and appended verbatim to the hlo2penguin argv
    pub internal_hlo2tensorizer_options: Option<String>,
    /// `--internal-hoist-allgather`.
    pub internal_hoist_allgather: bool,
    /// `--internal-inject-error`: nargs='?' const='default'
    pub internal_inject_error: Option<String>,
    /// `--internal-interleave-kind`.
    pub internal_interleave_kind: Option<String>,
    /// `--internal-log-additional-qor-metrics`.
    pub internal_log_additional_qor_metrics: bool,
    /// `--internal-max-instruction-limit`: forwarded to walrus_driver as --max-instruction-limit
    pub internal_max_instruction_limit: Option<i64>,
    /// `--internal-num-neuroncores-per-sengine`.
    pub internal_num_neuroncores_per_sengine: Option<i64>,
    /// `--internal-num-semaphores-per-dma-queue`.
    pub internal_num_semaphores_per_dma_queue: Option<i64>,
    /// `--internal-print-after`: forwarded to walrus_driver as --print-after
    pub internal_print_after: Option<String>,
    /// `--internal-skip-backend-allocation-opt-nki`.
    pub internal_skip_backend_allocation_opt_nki: bool,
    /// `--internal-smt-allocation`: forwarded to walrus_driver as --smt-allocation
    pub internal_smt_allocation: bool,
    /// `--internal-suppress-error`.
    pub internal_suppress_error: Option<String>,
    /// `--internal-tensorizer-opt-level`: a mode string ('nki', 'eager', 'codegen_only', or a number as text); 'nki' enables BIR simulation
    pub internal_tensorizer_opt_level: Option<String>,
    /// `--internal-upcast-all-to-FP32`.
    #[serde(rename = "internal_upcast_all_to_FP32")]
    pub internal_upcast_all_to_fp32: bool,
    /// `--io-config`: Input/output configuration (JSON text).
    pub io_config: Option<String>,
    /// `--jit-infergoldens`.
    pub jit_infergoldens: bool,
    /// `--jobs`: Number of parallel jobs the compiler may use.
    pub jobs: Option<i64>,
    /// `--keep-remat-dma-transpose`: companion --no-keep-remat-dma-transpose
    pub keep_remat_dma_transpose: bool,
    /// `--layer-unroll-factor`: reconstruction: default 1 (the seed's default flow schedules Kelper, which needs a value > 0); -O3 sets 0; fsdp sets 4 unless user-set; records layer_unroll_factor_Used
    pub layer_unroll_factor: i64,
    /// `--layout-transform-heuristic`.
    pub layout_transform_heuristic: String,
    /// `--lnc`: Logical NeuronCore size: 1, or 2 on trn2/trn2n/trn3 (the default there).
    pub logical_nc_config: Option<i64>,
    /// `--meta-module`: 0 = whole graph is one module; non-zero triggers the --meta-module collapse and pins logical_nc_config=1
    pub meta_module: i64,
    /// `--model-specific-opt`.
    pub model_specific_opt: Option<String>,
    /// `--model-type`: repeated: right-most wins
    pub model_type: String,
    /// `--native-int64`: Native 64-bit integer support.
    pub native_int64: String,
    /// `--native-kernel-auto-cast`.
    pub native_kernel_auto_cast: Option<String>,
    /// `--native-to-custom-softmax`.
    pub native_to_custom_softmax: bool,
    /// `--neuroncore-pipeline-cores`: Number of NeuronCores to pipeline the model across.
    pub neuroncore_pipeline_cores: i64,
    /// `--nn-executor`.
    pub nn_executor: Option<String>,
    /// `--non-local-tensors`.
    pub non_local_tensors: Option<String>,
    /// `--num-parallel-jobs`: Number of parallel jobs the compiler may use.
    pub num_parallel_jobs: Option<i64>,
    /// `--option-preset`.
    pub option_preset: Option<String>,
    /// `--optlevel`: Optimization level 0-3 (default 2; 3 is compiled as 2 with no backend).
    pub optlevel: OptLevel,
    /// `--partitioner-opts`.
    pub partitioner_opts: String,
    /// `--partitions-per-bank`.
    pub partitions_per_bank: i64,
    /// `--pipeline`: nargs='+'; items may also be comma-separated; 'compile' expands to the canonical job list; other items are job names
    pub pipeline: Vec<String>,
    /// `--policy`.
    pub policy: Option<String>,
    /// `--query-compute-placement`.
    pub query_compute_placement: bool,
    /// `--rtol`.
    pub rtol: Option<f64>,
    /// `--run-pg-layout-and-tiling`: companion --no-run-pg-layout-and-tiling
    pub run_pg_layout_and_tiling: bool,
    /// `--run-simulator-after`.
    pub run_simulator_after: String,
    /// `--scheduler`.
    pub scheduler: String,
    /// `--skip-pass`: repeatable
    pub skip_pass: Vec<String>,
    /// `--softmax-division-delay`.
    pub softmax_division_delay: bool,
    /// `--softmax-epsilon`.
    #[serde(deserialize_with = "nan_if_null")]
    pub softmax_epsilon: f64,
    /// `--spmd`.
    pub spmd: bool,
    /// `--state`: `in:<S>:out:<S>`
    pub state: Option<String>,
    /// `--static-weights`: Keep weights static (incompatible with --enable-fast-loading-neuron-binaries).
    pub static_weights: bool,
    /// `--target`: Target instance family (required unless NEURON_PLATFORM_TARGET_OVERRIDE is set).
    pub target: Option<String>,
    /// `--tensorizer-options`: repeatable; occurrences joined with one space; forwarded to the Frontend
    pub tensorizer_options: Option<String>,
    /// `--tensorizer-parallel-compile`.
    pub tensorizer_parallel_compile: bool,
    /// `--tfpb`.
    pub tfpb: Option<String>,
    /// `--upcast-all-to-fp32`: Upcast every operation to FP32.
    pub upcast_all_to_fp32: bool,
    /// `--vectorize-strided-dma`.
    pub vectorize_strided_dma: bool,
}

impl CompileInputs {
    /// `--target` (normalisation makes sure there is one: the flag, or the environment's).
    pub fn target(&self) -> &str {
        self.target.as_deref().unwrap_or("")
    }

    /// `--arch` (normalisation defaults it to the target's family).
    pub(crate) fn arch(&self) -> &str {
        self.arch.as_deref().unwrap_or_else(|| self.target())
    }

    /// `--lnc` (normalisation defaults it by the target; 1 before that).
    pub fn logical_nc_config(&self) -> i64 {
        self.logical_nc_config.unwrap_or(1)
    }
}
