//! The flag table: every option of the `neuronx-cc` 2.24 command line (and nxcc's own), one row
//! each — spelling, aliases, dest, argparse action, value kind, default, choices, visibility,
//! scope, provenance, and what the flag reaches ([`Reach`]: compile semantics, or the machine;
//! a row is compile semantics only when it says so, `.compile()`).
//!
//! This table is the single source the parser, the help surfaces and the dry-run `args` object
//! are driven by. It mirrors `tests/data/flags.tsv` (the specification's table) row for row; the
//! test `flags_table_matches_the_specification` keeps the two in step.

/// How the parser treats an option (argparse's `action`, plus the variants the original adds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// One value; repeated occurrences: the right-most wins.
    Store,
    /// No value; sets `true`.
    StoreTrue,
    /// `nargs='?'`: an optional value, `constant` when absent.
    StoreOptional {
        /// The value stored when the option is given without one.
        constant: &'static str,
    },
    /// `--enable-X` / `--disable-X` pair on one boolean dest; last one wins.
    EnableDisable,
    /// `--X` / `--no-X` pair on one boolean dest; last one wins.
    Noable,
    /// One string value per occurrence; occurrences are joined with one space.
    ExtendStr,
    /// One value per occurrence, collected into a list.
    Append,
    /// `nargs='+'`: every following value-looking token, at least one.
    OneOrMore,
    /// `store_true` that prints a deprecation warning.
    DeprecatedStoreTrue {
        /// The warning printed each time the option is given.
        warning: &'static str,
    },
    /// `store` that prints a deprecation warning.
    DeprecatedStore {
        /// The warning printed each time the option is given.
        warning: &'static str,
    },
    /// `--help`: public options.
    Help,
    /// `--help-hidden`: public, hidden and experimental options.
    HelpHidden,
    /// `--help-hidden-list`: internal options with their defaults.
    HelpHiddenList,
    /// `--version` / `-V`.
    Version,
}

/// The file `--timings` writes when given without one (`compile`, `parallel-compile`), in the
/// launch directory.
pub const TIMINGS_FILE: &str = "nxcc-timings.html";

/// The durations a [`Kind::Seconds`] option takes, in seconds: at least 1 s (a shorter limit
/// cannot let any tool start), at most 10^7 s (about 16 weeks; larger is a typo, and beyond what
/// the clocks nxcc waits on can represent).
pub const SECONDS_RANGE: (f64, f64) = (1.0, 1e7);

/// The type a value is converted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true`/`false`, set by the action itself (the option takes no value).
    Bool,
    /// An integer as Python's `int()` reads it.
    Int,
    /// A number as Python's `float()` reads it.
    Float,
    /// Text, kept as given.
    Str,
    /// A file or directory path, kept as given.
    Path,
    /// Text that must be one of the [`Choices`].
    Choice,
    /// A log level: a name (any case) or an integer.
    Level,
    /// A duration: a number of seconds within [`SECONDS_RANGE`] (no NaN, no infinity).
    Seconds,
    /// A remote service's address ([`super::endpoint`]), kept as given.
    Endpoint,
    /// Several values (`nargs='+'` or one per occurrence), kept as given.
    List,
}

/// The default value of a dest when the option is not given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Default {
    /// No default (`None` in the namespace).
    None,
    /// This boolean.
    Bool(bool),
    /// This integer.
    Int(i64),
    /// This number.
    Float(f64),
    /// This text (also the default of path and choice options).
    Str(&'static str),
    /// This list of values.
    List(&'static [&'static str]),
    /// A level name, converted like a command-line value.
    Level(&'static str),
    /// Derived during normalisation (the text says from what).
    Derived(&'static str),
    /// Required (`--target`; the environment may supply it).
    Required,
}

/// The values an option accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choices {
    /// Any value the [`Kind`] converts.
    Any,
    /// Exactly one of these spellings (argparse `choices=`).
    OneOf(&'static [&'static str]),
    /// Compared after lower-casing (argparse `type=str.lower`).
    OneOfIgnoreCase(&'static [&'static str]),
    /// A level name or an integer.
    Level,
    /// `default`, `all`, `none`, or a comma list of operator names.
    IntegerDowncast,
}

/// Which help surface lists an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Listed by `--help` and `--help-hidden`.
    Public,
    /// Listed by `--help-hidden` only.
    Hidden,
    /// Listed by `--help-hidden-list` only, with its default.
    Internal,
    /// Listed by `--help-hidden`, its help prefixed `[experimental]`.
    Experimental,
    /// Listed by no help surface; still accepted, with its deprecation warning.
    Deprecated,
}

/// Whether an option belongs to the driver (before or after the subcommand) or to `compile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A driver option, accepted before or after the subcommand name.
    Driver,
    /// An option of `compile` only.
    Compile,
}

/// What setting a flag reaches: only what is compiled, or something of the machine the compile
/// runs on. Compile arguments nxcc takes from others — a framework cache entry's
/// `compile_flags.json`, a remote action — may carry compile semantics only
/// ([`super::semantics`]). A row is [`Reach::Compile`] only when the table says so: a flag added
/// without saying it (every option of nxcc's own, whatever it does) reaches the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The compiler's own compile semantics: it changes what is compiled and nothing else.
    Compile,
    /// Something of the machine that compiles (the words say what: `the cache`, `a log`, `the
    /// toolchain`, ...), which only that machine decides.
    Machine(&'static str),
}

/// What a row reaches when it does not say: nothing it may be taken from others for.
pub const UNLISTED: Reach = Reach::Machine("a setting that is not listed as compile semantics");

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// The primary option string (`--target`), shown first in help and errors.
    pub spelling: &'static str,
    /// Further option strings for the same option (`-O` for `--optlevel`), possibly none.
    pub aliases: &'static [&'static str],
    /// The namespace attribute; empty for help and version.
    pub dest: &'static str,
    /// How the parser treats an occurrence.
    pub action: Action,
    /// The type the value is converted to.
    pub kind: Kind,
    /// The value of [`Flag::dest`] when the option is absent.
    pub default: Default,
    /// The values the option accepts.
    pub choices: Choices,
    /// Which help surface lists it.
    pub visibility: Visibility,
    /// Whether it is a driver option or an option of `compile`.
    pub scope: Scope,
    /// Where the flag is known from (`wiki-catalog:CERTAIN`, `clients`, `nxcc`, ...).
    pub source: &'static str,
    /// The help text, as the help surfaces print it (wrapped there).
    pub help: &'static str,
    /// What it reaches: compile semantics only when the row says so ([`Flag::compile`]).
    pub reach: Reach,
}

impl Flag {
    /// Every option string of this flag, in declaration order (spelling, then aliases).
    pub fn option_strings(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.spelling).chain(self.aliases.iter().copied())
    }

    /// The companion spelling that sets the dest to `false`, for `enable_disable` and `noable`.
    pub fn negation(&self) -> Option<String> {
        match self.action {
            Action::EnableDisable => Some(self.spelling.replacen("--enable-", "--disable-", 1)),
            Action::Noable => Some(format!("--no-{}", &self.spelling[2..])),
            _ => None,
        }
    }

    /// Whether the option consumes a value (or values) from the command line.
    pub fn takes_value(&self) -> bool {
        matches!(
            self.action,
            Action::Store
                | Action::ExtendStr
                | Action::Append
                | Action::OneOrMore
                | Action::DeprecatedStore { .. }
        )
    }

    /// Whether the flag is nxcc's own (not an option of the original driver).
    pub fn is_nxcc_own(&self) -> bool {
        self.source == "nxcc"
    }

    /// This row, marked as the compiler's own compile semantics ([`Reach::Compile`]).
    pub const fn compile(self) -> Flag {
        Flag {
            reach: Reach::Compile,
            ..self
        }
    }

    /// This row, marked as reaching `what` of the machine ([`Reach::Machine`]).
    pub const fn reaches(self, what: &'static str) -> Flag {
        Flag {
            reach: Reach::Machine(what),
            ..self
        }
    }
}

/// A [`Flag`] from its fields in the table's column order (keeps each row of [`FLAGS`] on one
/// line), reaching the machine ([`UNLISTED`]) until it is marked otherwise.
#[allow(clippy::too_many_arguments)]
pub const fn flag(
    spelling: &'static str,
    aliases: &'static [&'static str],
    dest: &'static str,
    action: Action,
    kind: Kind,
    default: Default,
    choices: Choices,
    visibility: Visibility,
    scope: Scope,
    source: &'static str,
    help: &'static str,
) -> Flag {
    Flag {
        spelling,
        aliases,
        dest,
        action,
        kind,
        default,
        choices,
        visibility,
        scope,
        source,
        help,
        reach: UNLISTED,
    }
}

/// The table, in the specification's order (which is also the order argparse would report
/// ambiguous prefixes in).
#[rustfmt::skip]
pub static FLAGS: &[Flag] = &[
    flag("--fork-subcommand", &[], "fork_subcommand", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Driver, "wiki-catalog:HIGH",
         "Run the subcommand in a child process (always done by nxcc; accepted for compatibility).").compile(),
    flag("--logfile", &[], "logfile", Action::Store, Kind::Path, Default::Str("log-neuron-cc.txt"), Choices::Any, Visibility::Public, Scope::Driver, "wiki-catalog:CERTAIN",
         "Write the compiler log to this file (appended; relative to the launch directory).").reaches("a log"),
    flag("--logfile-verbose", &[], "logfile_verbose", Action::Store, Kind::Level, Default::Level("info"), Choices::Level, Visibility::Public, Scope::Driver, "wiki-catalog:CERTAIN",
         "Level of the log file: a level name or an integer.").reaches("a log"),
    flag("--verbose", &[], "verbose", Action::Store, Kind::Level, Default::Level("user"), Choices::Level, Visibility::Public, Scope::Driver, "wiki-catalog:CERTAIN",
         "Console level: a level name or an integer (35 = user level plus progress dots).").reaches("the console log"),
    flag("--version", &["-V"], "", Action::Version, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "wiki-catalog:CERTAIN",
         "Print nxcc's version, the driver version it reproduces and the toolchain it would use.").reaches("help or the version"),
    flag("--allocator", &[], "allocator", Action::Store, Kind::Choice, Default::Str("coloring"), Choices::OneOf(&["coloring", "linear_scan"]), Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--arch", &[], "arch", Action::Store, Kind::Choice, Default::Derived("derived from --target"), Choices::OneOf(&["inf1", "inf2", "trn1", "trn1n", "trn2", "trn2n", "trn3", "sunda"]), Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Architecture family to compile for (defaults to the target).").compile(),
    flag("--auto-cast", &[], "auto_cast", Action::Store, Kind::Choice, Default::Str("none"), Choices::OneOf(&["none", "matmult", "all"]), Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Automatically cast FP32 operations: none, matmult or all.").compile(),
    flag("--auto-cast-type", &[], "auto_cast_type", Action::Store, Kind::Choice, Default::Str("bf16"), Choices::OneOf(&["fp16", "bf16", "tf32", "fp8_e4m3"]), Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Data type to auto-cast to.").compile(),
    flag("--auto-compare-mismatch", &[], "auto_compare_mismatch", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--cache-max-size", &[], "cache_max_size", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Keep the cache's entries under this size (20G, 512M; 0: no limit), overriding its configuration.").reaches("the cache"),
    flag("--cache-mode", &[], "cache_mode", Action::Store, Kind::Choice, Default::None, Choices::OneOf(&["read-write", "read-only", "hit-only"]), Visibility::Public, Scope::Compile, "nxcc",
         "How to use the cache: read-write; read-only (never write to it); hit-only (a miss is an error, nothing compiles).").reaches("the cache"),
    flag("--cache-rehash", &[], "cache_rehash", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Hash the model and the tools every time: trust no digest remembered for an unchanged file (for file systems whose timestamps cannot be trusted).").reaches("the cache"),
    flag("--cache-secondary", &[], "cache_secondary", Action::Append, Kind::List, Default::List(&[]), Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "A read-only cache to search after --cache_dir (repeatable); a hit there is copied into --cache_dir.").reaches("the cache"),
    flag("--cache-sloppiness", &[], "cache_sloppiness", Action::Store, Kind::Choice, Default::None, Choices::OneOf(&["hlo_metadata", "none"]), Visibility::Public, Scope::Compile, "nxcc",
         "What may differ between a compile and the entry that serves it: hlo_metadata (the model's op metadata: op names, source locations, stack frames) or none.").reaches("the cache"),
    flag("--cache_dir", &["--cache-dir"], "cache_dir", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "ecosystem (NEURON_CC_FLAGS spelling)",
         "Use a compile cache in this directory.").reaches("the cache"),
    flag("--cc-pipeline-tiling-factor", &[], "cc_pipeline_tiling_factor", Action::Store, Kind::Int, Default::Int(2), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--cnn-training-model", &[], "cnn_training_model", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--cpu-arch", &[], "cpu_arch", Action::Store, Kind::Choice, Default::None, Choices::OneOf(&["skylake-avx512", "skylake"]), Visibility::Hidden, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--daemon", &[], "daemon", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Send the compile to the nxcc daemon (started if none answers).").reaches("the compile daemon"),
    flag("--disable-concat-delinearizer", &[], "disable_concat_delinearizer", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--disable-degraded-fusion", &[], "disable_degraded_fusion", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--disable-prefer-par-on-non-broadcast", &[], "disable_prefer_par_on_non_broadcast", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--disable-stream-shuffle", &[], "disable_stream_shuffle", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--disable-stream-transpose-small", &[], "disable_stream_transpose_small", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--disable-tiling-of-non-overlapping-mem-access", &[], "disable_tiling_of_non_overlapping_mem_access", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--distribution-strategy", &[], "distribution_strategy", Action::Store, Kind::Choice, Default::None, Choices::OneOfIgnoreCase(&["fsdp", "nemo", "llm-training"]), Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "fsdp sets layer_unroll_factor=4 unless the user set it").compile(),
    flag("--distribution-type-llm-training", &[], "distribution_type_llm_training", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--dry-run", &[], "dry_run", Action::StoreOptional { constant: "text" }, Kind::Choice, Default::None, Choices::OneOf(&["text", "json"]), Visibility::Public, Scope::Compile, "nxcc",
         "Print the plan (jobs, commands, passes, decisions) and run nothing; text or json.").reaches("a dry run"),
    flag("--enable-arch-legalize", &[], "enable_arch_legalize", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:HIGH",
         "Legalize operators for the target architecture.").compile(),
    flag("--enable-bir-vnsplitter", &[], "enable_bir_vnsplitter", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-ccop-compute-overlap", &[], "enable_ccop_compute_overlap", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-dge", &[], "enable_dge", Action::EnableDisable, Kind::Bool, Default::Bool(true), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Enable descriptor generation engine levels (companion --disable-dge).").compile(),
    flag("--enable-experimental-bir-backend", &[], "enable_experimental_bir_backend", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-experimental-bir-partitioner", &[], "enable_experimental_bir_partitioner", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-experimental-fallback-scheduler", &[], "enable_experimental_fallback_scheduler", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-experimental-legacy-partitioner", &[], "enable_experimental_legacy_partitioner", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-experimental-no-split-dram", &[], "enable_experimental_no_split_dram", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-experimental-O1", &[], "enable_experimental_O1", Action::DeprecatedStoreTrue { warning: "Option --enable-experimental-O1 is deprecated and will be removed in a future release." }, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:HIGH",
         "warns: \"Option --enable-experimental-O1 is deprecated and will be removed in a future release.\"; acts as -O1").compile(),
    flag("--enable-experimental-sb-xfer", &[], "enable_experimental_sb_xfer", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-experimental-spmd", &[], "enable_experimental_spmd", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-experimental-tensorized-scheduler", &[], "enable_experimental_tensorized_scheduler", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-explicit-bwd-convs-padding", &[], "enable_explicit_bwd_convs_padding", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:HIGH",
         "Pad backward convolutions explicitly.").compile(),
    flag("--enable-fast-context-switch", &[], "enable_fast_context_switch", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Optimize for fast context switching between models.").compile(),
    flag("--enable-fast-loading-neuron-binaries", &[], "enable_fast_loading_neuron_binaries", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Write the NEFF archive uncompressed for faster loading.").compile(),
    flag("--enable-internal-anti-dependence-reduction", &[], "enable_internal_anti_dependence_reduction", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-internal-arch-legalize", &[], "enable_internal_arch_legalize", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-internal-bir-e2e-compilation", &[], "enable_internal_bir_e2e_compilation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-internal-bir-linker", &[], "enable_internal_bir_linker", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-internal-call-graph", &[], "enable_internal_call_graph", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-internal-data-race-checker", &[], "enable_internal_data_race_checker", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-internal-dma-desc-reuse", &[], "enable_internal_dma_desc_reuse", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-internal-fork-backend", &[], "enable_internal_fork_backend", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-internal-fork-walrus", &[], "enable_internal_fork_walrus", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "seed",
         "run the walrus backend in-process (EmbeddedWalrusDriver) instead of forking walrus_driver").compile(),
    flag("--enable-internal-io-dge", &[], "enable_internal_io_dge", Action::EnableDisable, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "companion --disable-internal-io-dge").compile(),
    flag("--enable-internal-lnc-single-graph-compilation", &[], "enable_internal_lnc_single_graph_compilation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-internal-memory-analysis", &[], "enable_internal_memory_analysis", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-internal-micro-modular-compilation", &[], "enable_internal_micro_modular_compilation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-internal-modular-compilation", &[], "enable_internal_modular_compilation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-internal-neff-wrapper", &[], "enable_internal_neff_wrapper", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-internal-new-backend", &[], "enable_internal_new_backend", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--enable-internal-relaxed-order", &[], "enable_internal_relaxed_order", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-internal-walrus-replay-script", &[], "enable_internal_walrus_replay_script", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-mixed-precision-accumulation", &[], "enable_mixed_precision_accumulation", Action::EnableDisable, Kind::Bool, Default::Bool(true), Choices::Any, Visibility::Public, Scope::Compile, "public-docs",
         "Accumulate in higher precision (companion --disable-mixed-precision-accumulation).").compile(),
    flag("--enable-native-kernel", &[], "enable_native_kernel", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:HIGH",
         "Enable native kernels.").compile(),
    flag("--enable-native-kernel-select-and-scatter", &[], "enable_native_kernel_select_and_scatter", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-p-to-pp-broadcast", &[], "enable_p_to_pp_broadcast", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--enable-parallel-queues", &[], "enable_parallel_queues", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Enable parallel DMA queues.").compile(),
    flag("--enable-saturate-infinity", &[], "enable_saturate_infinity", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "public-docs",
         "Convert +/-infinity to MAX/MIN_FLOAT in computations that overflow.").compile(),
    flag("--enable-tritium-loopfusion", &[], "enable_tritium_loopfusion", Action::Noable, Kind::Bool, Default::Bool(true), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "companion --no-enable-tritium-loopfusion").compile(),
    flag("--execute-repetition", &[], "execute_repetition", Action::Store, Kind::Int, Default::Int(1), Choices::Any, Visibility::Hidden, Scope::Compile, "clients",
         "").compile(),
    flag("--expand-batch-norm-training", &[], "expand_batch_norm_training", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--expand-batch-norm-training-and-grad", &[], "expand_batch_norm_training_and_grad", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--experimental-convolution-kernel-match", &[], "experimental_convolution_kernel_match", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--experimental-unsafe-fp8e4m3fn-as-fp8e4m3", &[], "experimental_unsafe_fp8e4m3fn_as_fp8e4m3", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Experimental, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--fast-math", &[], "fast_math", Action::OneOrMore, Kind::List, Default::List(&[]), Choices::OneOf(&["all", "none", "fp32-cast-all", "fp32-cast-all-fp16", "fp32-cast-all-fp32r", "fp32-cast-all-fp8e4", "fp32-cast-matmult", "fp32-cast-matmult-bf16", "fp32-cast-matmult-fp16", "fp32-cast-matmult-fp32r", "fp32-cast-matmult-fp8e4", "fp32-cast-none", "fast-relayout", "fast-relayout-fp32", "fast-relayout-fp32r", "fast-relayout-fp8e4", "no-fast-relayout"]), Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "nargs='+'").compile(),
    flag("--fork", &[], "fork", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:MEDIUM",
         "").compile(),
    flag("--framework", &[], "framework", Action::Store, Kind::Choice, Default::Str("XLA"), Choices::OneOf(&["XLA"]), Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Framework the model comes from (only XLA).").compile(),
    flag("--hbm-scratchpad-page-size", &[], "hbm_scratchpad_page_size", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "public-docs",
         "").compile(),
    flag("--help", &["-h"], "", Action::Help, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Show this help message and exit.").reaches("help or the version"),
    flag("--help-hidden", &[], "", Action::HelpHidden, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:CERTAIN",
         "Show help for public, hidden and experimental options and exit.").reaches("help or the version"),
    flag("--help-hidden-list", &[], "", Action::HelpHiddenList, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:CERTAIN",
         "List internal options with their defaults, one per line, and exit.").reaches("help or the version"),
    flag("--images", &[], "images", Action::OneOrMore, Kind::List, Default::List(&[]), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:HIGH",
         "Input images (framework specific).").compile(),
    flag("--implicit-integer-downcast", &[], "implicit_integer_downcast", Action::Store, Kind::Str, Default::Str("default"), Choices::IntegerDowncast, Visibility::Public, Scope::Compile, "public-docs",
         "Implicit integer downcast: default, all, none, or a comma list of dot,scatter,all_reduce,reduce_scatter,pow.").compile(),
    flag("--inst-count-limit", &[], "inst_count_limit", Action::Store, Kind::Int, Default::Int(100000000), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-autotune", &[], "internal_autotune", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-autotune-config", &[], "internal_autotune_config", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").reaches("a local path"),
    flag("--internal-autotune-subprocess", &[], "internal_autotune_subprocess", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-backend-options", &[], "internal_backend_options", Action::ExtendStr, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "repeatable; occurrences joined with one space; forwarded (shell-split) to walrus_driver").compile(),
    flag("--internal-bir-enable-sb-allocation", &[], "internal_bir_enable_sb_allocation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "clients",
         "").compile(),
    flag("--internal-build-with-users", &[], "internal_build_with_users", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-compiler-debug-mode", &[], "internal_compiler_debug_mode", Action::StoreOptional { constant: "all" }, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "nargs='?' const='all' (clients pass =all, =penguin)").compile(),
    flag("--internal-compiler-debug-mode-numerical", &[], "internal_compiler_debug_mode_numerical", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-compute-engine-placement", &[], "internal_compute_engine_placement", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-disable-birsim-validation", &[], "internal_disable_birsim_validation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-disable-birverifier-validation", &[], "internal_disable_birverifier_validation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-disable-dge-levels", &[], "internal_disable_dge_levels", Action::OneOrMore, Kind::List, Default::List(&[]), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "nargs='+'").compile(),
    flag("--internal-disable-fma-on-ios", &[], "internal_disable_fma_on_ios", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-disable-layer-det", &[], "internal_disable_layer_det", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-dma-order-constraints", &[], "internal_dma_order_constraints", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "clients",
         "JSON text").compile(),
    flag("--internal-dma-qos-class-count", &[], "internal_dma_qos_class_count", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-dma-qos-for-spill-code", &[], "internal_dma_qos_for_spill_code", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-dynamic-dma-scratch-size-per-partition", &[], "internal_dynamic_dma_scratch_size_per_partition", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-enable-bir-debugger-launch-configuration", &[], "internal_enable_bir_debugger_launch_configuration", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-enable-dge-levels", &[], "internal_enable_dge_levels", Action::OneOrMore, Kind::List, Default::List(&[]), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "nargs='+'; 'io' is appended during normalisation").compile(),
    flag("--internal-enable-dma-qos-labeling", &[], "internal_enable_dma_qos_labeling", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-experimental-unsafe-fp8e4m3fn-as-fp8e4m3", &[], "internal_experimental_unsafe_fp8e4m3fn_as_fp8e4m3", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-force-all-uniq", &[], "internal_force_all_uniq", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-hlo-analyze-schedule", &[], "internal_hlo_analyze_schedule", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-hlo-remat", &[], "internal_hlo_remat", Action::Noable, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "companion --no-internal-hlo-remat").compile(),
    flag("--internal-hlo2tensorizer-options", &[], "internal_hlo2tensorizer_options", Action::ExtendStr, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "clients+wiki",
         "repeatable; shell-split and appended verbatim to the hlo2penguin argv").compile(),
    flag("--internal-hoist-allgather", &[], "internal_hoist_allgather", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "clients",
         "").compile(),
    flag("--internal-inject-error", &[], "internal_inject_error", Action::StoreOptional { constant: "default" }, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "nargs='?' const='default'").compile(),
    flag("--internal-interleave-kind", &[], "internal_interleave_kind", Action::Store, Kind::Choice, Default::None, Choices::OneOf(&["dst_reduce", "first_mm"]), Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-log-additional-qor-metrics", &[], "internal_log_additional_qor_metrics", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-max-instruction-limit", &[], "internal_max_instruction_limit", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "clients+wiki",
         "forwarded to walrus_driver as --max-instruction-limit").compile(),
    flag("--internal-num-neuroncores-per-sengine", &[], "internal_num_neuroncores_per_sengine", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-num-semaphores-per-dma-queue", &[], "internal_num_semaphores_per_dma_queue", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--internal-print-after", &[], "internal_print_after", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki",
         "forwarded to walrus_driver as --print-after").compile(),
    flag("--internal-skip-backend-allocation-opt-nki", &[], "internal_skip_backend_allocation_opt_nki", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "clients",
         "").compile(),
    flag("--internal-smt-allocation", &[], "internal_smt_allocation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki",
         "forwarded to walrus_driver as --smt-allocation").compile(),
    flag("--internal-suppress-error", &[], "internal_suppress_error", Action::StoreOptional { constant: "" }, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--internal-tensorizer-opt-level", &[], "internal_tensorizer_opt_level", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:HIGH",
         "a mode string ('nki', 'eager', 'codegen_only', or a number as text); 'nki' enables BIR simulation").compile(),
    flag("--internal-upcast-all-to-FP32", &[], "internal_upcast_all_to_FP32", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--io-config", &[], "io_config", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:HIGH",
         "Input/output configuration (JSON text).").compile(),
    flag("--jit-infergoldens", &[], "jit_infergoldens", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--job-timeout", &[], "job_timeout", Action::Store, Kind::Seconds, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Fail a job that runs longer than this many seconds.").reaches("the job time limit"),
    flag("--jobs", &[], "jobs", Action::Store, Kind::Int, Default::Derived("cpu count"), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Number of parallel jobs the compiler may use.").compile(),
    flag("--keep-remat-dma-transpose", &[], "keep_remat_dma_transpose", Action::Noable, Kind::Bool, Default::Bool(true), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "companion --no-keep-remat-dma-transpose").compile(),
    flag("--keep-work-dir", &[], "keep_work_dir", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Keep the generated work directory after a successful compile.").reaches("a work directory"),
    flag("--layer-unroll-factor", &[], "layer_unroll_factor", Action::Store, Kind::Int, Default::Int(crate::recon::cli::LAYER_UNROLL_FACTOR_DEFAULT), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "reconstruction: default 1 (the seed's default flow schedules Kelper, which needs a value > 0); -O3 sets 0; fsdp sets 4 unless user-set; records layer_unroll_factor_Used").compile(),
    flag("--layout-transform-heuristic", &[], "layout_transform_heuristic", Action::Store, Kind::Str, Default::Str("mcts"), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--lnc", &["-lnc"], "logical_nc_config", Action::Store, Kind::Int, Default::Derived("2 on trn2/trn2n/trn3, else 1"), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Logical NeuronCore size: 1, or 2 on trn2/trn2n/trn3 (the default there).").compile(),
    flag("--logical-nc-config", &[], "logical_nc_config", Action::Store, Kind::Int, Default::Derived("2 on trn2/trn2n/trn3, else 1"), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Same as --lnc.").compile(),
    flag("--meta-module", &[], "meta_module", Action::Store, Kind::Int, Default::Int(0), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:CERTAIN",
         "0 = whole graph is one module; non-zero triggers the --meta-module collapse and pins logical_nc_config=1").compile(),
    flag("--metrics-timestamp", &[], "metrics_timestamp", Action::Store, Kind::Str, Default::Derived("utc now, ISO 8601"), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").reaches("metrics"),
    flag("--model-specific-opt", &[], "model_specific_opt", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--model-type", &[], "model_type", Action::Store, Kind::Choice, Default::Str("generic"), Choices::OneOf(&["generic", "transformer", "transformer-inference", "cnn-training", "unet-inference", "vae-inference", "operator-fusion"]), Visibility::Internal, Scope::Compile, "wiki-catalog:CERTAIN",
         "repeated: right-most wins").compile(),
    flag("--native-int64", &[], "native_int64", Action::Store, Kind::Choice, Default::Str("default"), Choices::OneOf(&["default", "enabled", "disabled"]), Visibility::Public, Scope::Compile, "public-docs",
         "Native 64-bit integer support.").compile(),
    flag("--native-kernel-auto-cast", &[], "native_kernel_auto_cast", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--native-to-custom-softmax", &[], "native_to_custom_softmax", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--neuroncore-pipeline-cores", &[], "neuroncore_pipeline_cores", Action::Store, Kind::Int, Default::Int(1), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Number of NeuronCores to pipeline the model across.").compile(),
    flag("--nn-executor", &[], "nn_executor", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--no_cache", &["--no-cache"], "no_cache", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "ecosystem (NEURON_CC_FLAGS spelling)",
         "Do not use the compile cache.").reaches("the cache"),
    flag("--non-local-tensors", &[], "non_local_tensors", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--num-neuroncores", &[], "logical_nc_config", Action::DeprecatedStore { warning: "DEPRECATED. Prefer --lnc instead." }, Kind::Int, Default::None, Choices::Any, Visibility::Deprecated, Scope::Compile, "wiki-catalog:CERTAIN",
         "DEPRECATED. Prefer --lnc instead.").compile(),
    flag("--num-parallel-jobs", &[], "num_parallel_jobs", Action::Store, Kind::Int, Default::Derived("cpu count"), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Number of parallel jobs the compiler may use.").compile(),
    flag("--option-preset", &[], "option_preset", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--optlevel", &["-O"], "optlevel", Action::Store, Kind::Choice, Default::Str("2"), Choices::OneOf(&["0", "1", "2", "3"]), Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Optimization level 0-3 (default 2; 3 is compiled as 2 with no backend).").compile(),
    flag("--output", &["-o"], "output", Action::Store, Kind::Path, Default::Str("file.neff"), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Write the NEFF to this file.").reaches("the output path"),
    flag("--partitioner-opts", &[], "partitioner_opts", Action::Store, Kind::Str, Default::Str("--transformer"), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--partitions-per-bank", &[], "partitions_per_bank", Action::Store, Kind::Int, Default::Int(64), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--pipeline", &[], "pipeline", Action::OneOrMore, Kind::List, Default::List(&["compile"]), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "nargs='+'; items may also be comma-separated; 'compile' expands to the canonical job list; other items are job names").compile(),
    flag("--policy", &[], "policy", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--query-compute-placement", &[], "query_compute_placement", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--remote", &[], "remote", Action::Store, Kind::Endpoint, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Compile on a Remote Execution API service (grpc://HOST:PORT): its action cache first, else its workers.").reaches("a remote service"),
    flag("--remote-cache", &[], "remote_cache", Action::Store, Kind::Endpoint, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Share results through a Remote Execution API action cache (grpc://HOST:PORT); compile locally on a miss.").reaches("a remote service"),
    flag("--remote-instance", &[], "remote_instance", Action::Store, Kind::Str, Default::Str(""), Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "The instance name on the --remote or --remote-cache server (default: the server's default).").reaches("a remote service"),
    flag("--retry_failed_compilation", &["--retry-failed-compilation"], "retry_failed_compilation", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "ecosystem (NEURON_CC_FLAGS spelling)",
         "Recompile even if the cache holds a failed result for this compile.").reaches("the cache"),
    flag("--rtol", &[], "rtol", Action::Store, Kind::Float, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--run-id", &[], "run_id", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").reaches("metrics"),
    flag("--run-pg-layout-and-tiling", &[], "run_pg_layout_and_tiling", Action::Noable, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "companion --no-run-pg-layout-and-tiling").compile(),
    flag("--run-simulator-after", &[], "run_simulator_after", Action::Store, Kind::Str, Default::Str("BirCodeGenLoop"), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--scheduler", &[], "scheduler", Action::Store, Kind::Choice, Default::Str("none"), Choices::OneOf(&["none", "experimental-loop-shift-left", "experimental-loop-lsa"]), Visibility::Hidden, Scope::Compile, "wiki-catalog:CERTAIN",
         "").compile(),
    flag("--skip-pass", &[], "skip_pass", Action::Append, Kind::List, Default::List(&[]), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "repeatable").compile(),
    flag("--softmax-division-delay", &[], "softmax_division_delay", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--softmax-epsilon", &[], "softmax_epsilon", Action::Store, Kind::Float, Default::Float(-100000000.0), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--spmd", &[], "spmd", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--state", &[], "state", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:CERTAIN",
         "in:<S>:out:<S>").compile(),
    flag("--static-weights", &[], "static_weights", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Keep weights static (incompatible with --enable-fast-loading-neuron-binaries).").compile(),
    flag("--submit-metrics", &[], "submit_metrics", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").reaches("metrics"),
    flag("--target", &[], "target", Action::Store, Kind::Choice, Default::Required, Choices::OneOf(&["inf1", "inf2", "trn1", "trn1n", "trn2", "trn2n", "trn3", "sunda"]), Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Target instance family (required unless NEURON_PLATFORM_TARGET_OVERRIDE is set).").compile(),
    flag("--temp-dir", &["--compile_workdir", "--workdir"], "temp_dir", Action::Store, Kind::Path, Default::Derived("generated ./neuronxcc-XXXXXXXX"), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:HIGH",
         "Work directory for intermediate files (kept; must not hold earlier artifacts).").reaches("a work directory"),
    flag("--tensorizer-options", &[], "tensorizer_options", Action::ExtendStr, Kind::Str, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "clients",
         "repeatable; occurrences joined with one space; forwarded to the Frontend").compile(),
    flag("--tensorizer-parallel-compile", &[], "tensorizer_parallel_compile", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
    flag("--tfpb", &[], "tfpb", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").reaches("a local path"),
    flag("--gen-reproducer", &[], "gen_reproducer", Action::StoreOptional { constant: "error" }, Kind::Choice, Default::None, Choices::OneOf(&["error", "always"]), Visibility::Public, Scope::Compile, "nxcc",
         "Write a reproducer bundle (nxcc-reproducer-<key>.tar.gz: the model, the arguments, versions, environment, log and failure) when the compile fails (error, the default) or always.").reaches("a report"),
    flag("--reproducer-dir", &[], "reproducer_dir", Action::Store, Kind::Path, Default::Derived("the current directory"), Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Where --gen-reproducer writes its bundle.").reaches("a report"),
    flag("--reproducer-strip-constants", &[], "reproducer_strip_constants", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "In a reproducer bundle, replace the model's constants by zeros of the same shape (for graphs that carry weights).").reaches("a report"),
    flag("--timings", &[], "timings", Action::StoreOptional { constant: TIMINGS_FILE }, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Write an HTML timeline of the jobs (default nxcc-timings.html).").reaches("a report"),
    flag("--toolchain", &[], "toolchain", Action::Store, Kind::Str, Default::Derived("auto"), Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Directory holding the native tools, or \"sim\" for the simulated toolchain.").reaches("the toolchain"),
    flag("--trace", &["--profile"], "trace", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Compile, "nxcc",
         "Write a profile of the compile and its jobs as a Chrome trace to FILE (opens in Perfetto).").reaches("a report"),
    flag("--upcast-all-to-fp32", &[], "upcast_all_to_fp32", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Compile, "wiki-catalog:CERTAIN",
         "Upcast every operation to FP32.").compile(),
    flag("--vectorize-strided-dma", &[], "vectorize_strided_dma", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Hidden, Scope::Compile, "wiki-catalog:HIGH",
         "").compile(),
];

/// The row for a dest (the first one, for dests shared by several spellings).
pub fn by_dest(dest: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.dest == dest)
}

/// Every distinct dest, in table order.
pub fn dests() -> impl Iterator<Item = &'static str> {
    FLAGS.iter().enumerate().filter_map(|(i, f)| {
        let first = !f.dest.is_empty() && FLAGS[..i].iter().all(|g| g.dest != f.dest);
        first.then_some(f.dest)
    })
}
