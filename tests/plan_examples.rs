//! The worked examples of 02-plan.md, each a test: the job list a command line produces, and the
//! notes beside it (LNC, unroll factor, warnings, errors).

use nxcc::plan::{Invocation, Refusal, StaticProbe};

fn build(extra: &str) -> Result<Invocation, Refusal> {
    build_with(extra, StaticProbe::new("/work/launch"))
}

fn build_with(extra: &str, probe: StaticProbe) -> Result<Invocation, Refusal> {
    let line = format!("compile m.pb --framework XLA {extra}");
    let argv = shell_words::split(&line).unwrap();
    Invocation::from_argv("nxcc", &argv, &probe)
}

fn jobs(extra: &str) -> Vec<&'static str> {
    names(
        &build(extra)
            .unwrap_or_else(|e| panic!("{extra}: {e:?}"))
            .plan
            .pipeline,
    )
}

/// The jobs' names, as the seed spells them.
fn names(jobs: &[nxcc::jobs::Job]) -> Vec<&'static str> {
    jobs.iter().map(|j| j.name()).collect()
}

const DEFAULT: [&str; 6] = [
    "HLOToTensorizer",
    "XLAInferGoldens",
    "Frontend",
    "StaticIOTranspose",
    "WalrusDriver",
    "Kelper",
];
const FRONT_AND_WALRUS: [&str; 5] = [
    "HLOToTensorizer",
    "XLAInferGoldens",
    "Frontend",
    "StaticIOTranspose",
    "WalrusDriver",
];

fn with(base: &[&'static str], tail: &[&'static str]) -> Vec<&'static str> {
    base.iter().chain(tail).copied().collect()
}

#[test]
fn trn1_default_flow_with_lnc_1() {
    let p = build("--target trn1").unwrap();
    assert_eq!(names(&p.plan.pipeline), DEFAULT);
    assert_eq!(p.inputs.logical_nc_config(), 1);
    assert_eq!(p.optlevel(), "2");
    assert_eq!(p.layer_unroll_factor(), 1);
}

#[test]
fn trn2_default_flow_with_lnc_2() {
    let p = build("--target trn2").unwrap();
    assert_eq!(names(&p.plan.pipeline), DEFAULT);
    assert_eq!(p.inputs.logical_nc_config(), 2);
}

#[test]
fn meta_module_collapses_the_front_and_pins_lnc_1() {
    let p = build("--target trn2 --meta-module 4").unwrap();
    assert_eq!(
        names(&p.plan.pipeline),
        ["HLOToTensorizer", "Frontend", "WalrusDriver", "Kelper"]
    );
    assert_eq!(p.inputs.logical_nc_config(), 1);
    // The pin also reaches the tools: hlo2penguin gets lnc 1 and the module partition flags.
    let argv = p.plan.jobs[0].steps[0].argv().unwrap();
    assert!(
        argv.contains(&"--logical-nc-config=1".to_string()),
        "{argv:?}"
    );
    assert!(
        argv.contains(&"--partition".to_string())
            && argv.contains(&"--layers-per-module=4".to_string()),
        "{argv:?}"
    );
}

#[test]
fn meta_module_zero_means_no_collapse() {
    let p = build("--target trn2 --meta-module 0").unwrap();
    assert_eq!(names(&p.plan.pipeline), DEFAULT);
    assert_eq!(p.inputs.logical_nc_config(), 2);
}

#[test]
fn neff_wrapper_follows_kelper() {
    assert_eq!(
        jobs("--target trn1 --enable-internal-neff-wrapper"),
        with(&DEFAULT, &["NeffWrapper"])
    );
}

#[test]
fn tensorized_scheduler_schedules_backend_before_kelper() {
    let p = build("--target trn1 --enable-experimental-tensorized-scheduler").unwrap();
    assert_eq!(
        names(&p.plan.pipeline),
        with(&FRONT_AND_WALRUS, &["Backend", "Kelper"])
    );
    assert!(p.plan.derived.internal_run_standalone_legacy_compilation);
    assert!(!p.inputs.enable_internal_new_backend);
}

#[test]
fn modular_compilation_empties_the_backend() {
    assert_eq!(
        jobs("--target trn1 --enable-internal-modular-compilation"),
        FRONT_AND_WALRUS
    );
}

#[test]
fn bir_linker_empties_the_backend() {
    assert_eq!(
        jobs("--target trn1 --enable-internal-bir-linker"),
        FRONT_AND_WALRUS
    );
}

#[test]
fn non_positive_unroll_factor_empties_the_backend() {
    assert_eq!(
        jobs("--target trn1 --layer-unroll-factor 0"),
        FRONT_AND_WALRUS
    );
    assert_eq!(
        jobs("--target trn1 --layer-unroll-factor -3"),
        FRONT_AND_WALRUS
    );
}

#[test]
fn o3_is_o2_with_no_backend_and_says_so() {
    let p = build("--target trn1 -O3").unwrap();
    assert_eq!(names(&p.plan.pipeline), FRONT_AND_WALRUS);
    assert_eq!(p.optlevel(), "2");
    assert_eq!(p.layer_unroll_factor(), 0);
    assert!(p
        .plan
        .user_messages
        .iter()
        .any(|m| m.starts_with("The -O3 setting is not optimized for compilation time.")));
    assert!(p
        .plan
        .warnings
        .contains(&"-O3 sets layer_unroll_factor=0: Backend, Kelper and NeffWrapper are not scheduled; no NEFF will be written".to_string()));
    // -O3 became -O2, so the -O2 pass tensorcopy_accel is in the list.
    assert!(p.plan.walrus_passes.iter().any(|x| x == "tensorcopy_accel"));
}

#[test]
fn fsdp_unrolls_by_four() {
    let p = build("--target trn1 --distribution-strategy fsdp").unwrap();
    assert_eq!(names(&p.plan.pipeline), DEFAULT);
    assert_eq!(p.layer_unroll_factor(), 4);
    // Unless the user set the factor.
    let p = build("--target trn1 --distribution-strategy fsdp --layer-unroll-factor 2").unwrap();
    assert_eq!(p.layer_unroll_factor(), 2);
}

#[test]
fn pipeline_compile_then_save_temps() {
    assert_eq!(
        jobs("--target trn1 --pipeline compile SaveTemps"),
        with(&DEFAULT, &["SaveTemps"])
    );
}

#[test]
fn pipeline_of_named_jobs() {
    assert_eq!(
        jobs("--target trn1 --pipeline Frontend WalrusDriver"),
        ["Frontend", "WalrusDriver"]
    );
}

#[test]
fn unknown_job_fails_with_edrv081() {
    match build("--target trn1 --pipeline compile Nope") {
        Err(e @ Refusal::Plan { .. }) => {
            assert_eq!(e.exit_status(), 70);
            let Refusal::Plan { error: c, .. } = e else {
                unreachable!()
            };
            let text = c.to_string();
            assert!(text.starts_with("[ERROR] [NCC_EDRV081] Unknown job 'Nope' - Known jobs: BIRSim, BIRVerifier, Backend,"), "{text}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lnc_2_on_trn1_fails_with_earg001() {
    match build("--target trn1 --lnc 2") {
        Err(Refusal::Plan { error: c, .. }) => assert_eq!(
            c.to_string(),
            "[ERROR] [NCC_EARG001] Illegal argument(s) - Logical Neuron Core size 2 is not supported on trn1. The specified architecture only supports Logical Neuron Core size of 1. - Update the Logical Neuron Core size to 1 or check that the target architecture is correct."
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn validation_runs_before_the_meta_module_pin() {
    // The seed's order: validate_args before any collector. --meta-module would pin lnc to 1, but
    // the user's lnc 2 on trn1 is rejected first.
    assert!(matches!(
        build("--target trn1 --lnc 2 --meta-module 4"),
        Err(Refusal::Plan { .. })
    ));
}

#[test]
fn target_from_the_environment() {
    let mut probe = StaticProbe::new("/work/launch");
    probe
        .env
        .push(("NEURON_PLATFORM_TARGET_OVERRIDE".into(), "trn2".into()));
    let p = build_with("", probe).unwrap();
    assert_eq!(p.inputs.target(), "trn2");
    assert_eq!(p.inputs.logical_nc_config(), 2);
    // The command line wins over the environment.
    let mut probe = StaticProbe::new("/work/launch");
    probe
        .env
        .push(("NEURON_PLATFORM_TARGET_OVERRIDE".into(), "trn2".into()));
    assert_eq!(
        build_with("--target trn1", probe).unwrap().inputs.target(),
        "trn1"
    );
    // No target anywhere: argparse's required-argument error, exit 2.
    match build("") {
        Err(e @ Refusal::Usage(_)) => assert_eq!(e.exit_status(), 2),
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_model_fails_with_drv068() {
    let mut probe = StaticProbe::new("/work/launch");
    probe.missing.push("/work/launch/m.pb".into());
    match build_with("--target trn1", probe) {
        Err(Refusal::Plan { error: c, .. }) => {
            assert_eq!(c.to_string(), "[ERROR] [NCC_DRV068] HLO module m.pb doesn't exist - Check the path of the model file.")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn default_walrus_pass_list() {
    let p = build("--target trn1").unwrap();
    assert_eq!(
        p.plan.walrus_passes,
        [
            "unroll",
            "lower_ac",
            "pre_sched",
            "coloring_allocator",
            "dma_optimization",
            "vn_splitter",
            "post_sched",
            "tensorcopy_accel",
            "dep_reduction",
            "print_metrics",
            "birverifier"
        ]
    );
    // -O0: no dma_optimization, tensorcopy_accel or dep_reduction, and no DGE levels.
    let p = build("--target trn1 -O0").unwrap();
    assert!(!p.plan.walrus_passes.iter().any(|x| [
        "dma_optimization",
        "tensorcopy_accel",
        "dep_reduction"
    ]
    .contains(&x.as_str())));
    assert!(p.plan.derived.dge_on_levels.is_empty());
    assert!(!p.inputs.enable_internal_new_backend);
}

#[test]
fn walrus_runs_as_one_process_with_the_whole_pass_list() {
    let p = build("--target trn1 --scheduler experimental-loop-shift-left --allocator linear_scan --neuroncore-pipeline-cores 2").unwrap();
    let walrus = p
        .plan
        .jobs
        .iter()
        .find(|j| j.name == nxcc::jobs::Job::WalrusDriver)
        .unwrap();
    assert_eq!(walrus.steps.len(), 1);
    let argv = walrus.steps[0].argv().unwrap();
    let pass = &argv[argv.iter().position(|a| a == "--pass").unwrap() + 1];
    assert_eq!(pass, &p.plan.walrus_passes.join(","));
    assert!(
        pass.contains("experimental_loop_shift_left")
            && pass.contains("shift_left")
            && pass.contains("linear_scan_allocator")
    );
    assert!(pass.contains("partitioner"));
    assert!(
        !argv
            .iter()
            .any(|a| a.starts_with("--optlevel") || a.starts_with("--allocator")),
        "{argv:?}"
    );
    assert_eq!(walrus.steps[0].cwd, "sg00");
}

#[test]
fn dge_levels_from_the_command_line() {
    let p = build("--target trn1 --internal-enable-dge-levels vector_dynamic_offsets spill_reload --internal-disable-dge-levels scalar_dynamic_offset").unwrap();
    assert_eq!(
        p.plan.derived.dge_on_levels,
        ["io", "spill_reload", "vector_dynamic_offsets"]
    );
    assert!(build("--target trn1 --disable-dge")
        .unwrap()
        .plan
        .derived
        .dge_on_levels
        .is_empty());
}

#[test]
fn name_filter_drops_debug_jobs_unless_enabled() {
    let p = build("--target trn1 --pipeline compile Watchpoint BIRSim").unwrap();
    assert_eq!(names(&p.plan.pipeline), DEFAULT);
    assert_eq!(
        p.plan
            .warnings
            .iter()
            .filter(|w| w.contains("dropped from the pipeline"))
            .count(),
        2
    );
    let p = build("--target trn1 --internal-compiler-debug-mode --internal-tensorizer-opt-level nki --pipeline compile Watchpoint BIRSim").unwrap();
    assert_eq!(
        names(&p.plan.pipeline),
        with(&DEFAULT, &["Watchpoint", "BIRSim"])
    );
    assert!(p
        .plan
        .walrus_passes
        .ends_with(&["birverifier".into(), "bir_sim".into()]));
    // Goldens named explicitly are dropped under --meta-module.
    let p = build("--target trn1 --meta-module 2 --pipeline compile InferGoldens").unwrap();
    assert_eq!(
        names(&p.plan.pipeline),
        ["HLOToTensorizer", "Frontend", "WalrusDriver", "Kelper"]
    );
}

#[test]
fn state_selects_a_sub_range() {
    assert_eq!(
        jobs("--target trn1 --state in:Frontend:out:WalrusDriver"),
        ["Frontend", "StaticIOTranspose", "WalrusDriver"]
    );
    assert_eq!(
        jobs("--target trn1 --state in::out:XLAInferGoldens"),
        ["HLOToTensorizer", "XLAInferGoldens"]
    );
    assert_eq!(
        jobs("--target trn1 --state in:WalrusDriver:out:"),
        ["WalrusDriver", "Kelper"]
    );
    match build("--target trn1 --state in:Nope:out:") {
        Err(Refusal::Plan { error: c, .. }) => assert!(c
            .to_string()
            .contains("--state names Nope, which is not in the pipeline")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn paths_are_absolute_against_the_launch_dir() {
    let p = build("--target trn1 --output ../out/./m.neff --logfile logs/x.txt").unwrap();
    assert_eq!(p.plan.model, std::path::Path::new("/work/launch/m.pb"));
    assert_eq!(p.plan.output, std::path::Path::new("/work/out/m.neff"));
    assert_eq!(
        p.plan.logfile,
        std::path::Path::new("/work/launch/logs/x.txt")
    );
    let argv = p.plan.jobs[0].steps[0].argv().unwrap();
    assert!(argv.contains(&"--logfile=/work/launch/logs/x.txt".to_string()));
}

#[test]
fn selections_that_leave_no_job_are_errors_that_name_the_selector() {
    let compile_error = |extra: &str| match build(extra) {
        Err(e @ Refusal::Plan { .. }) => {
            assert_eq!(e.exit_status(), 70, "{extra}");
            let Refusal::Plan { error: c, .. } = e else {
                unreachable!()
            };
            c.to_string()
        }
        other => panic!("{extra}: {other:?}"),
    };
    // An empty item is not a job name.
    for extra in [
        "--target trn1 --pipeline ''",
        "--target trn1 --pipeline compile,,SaveTemps",
        "--target trn1 --pipeline compile,",
    ] {
        let text = compile_error(extra);
        assert!(
            text.starts_with("[ERROR] [NCC_EDRV081] Unknown job '' - Known jobs: "),
            "{extra}: {text}"
        );
    }
    // A range that selects nothing.
    let text = compile_error("--target trn1 --state in:Kelper:out:Frontend");
    assert_eq!(
        text,
        "[ERROR] [NCC_EDRV093] No job to run: --state in:Kelper:out:Frontend selects no job of [HLOToTensorizer, XLAInferGoldens, Frontend, StaticIOTranspose, WalrusDriver, Kelper] - Select at least one job with --pipeline and --state."
    );
    // The name filter dropping the only job.
    let text = compile_error("--target trn1 --pipeline Watchpoint");
    assert!(
        text.starts_with("[ERROR] [NCC_EDRV093] No job to run: the name filter dropped every selected job (Watchpoint)"),
        "{text}"
    );
    // What still selects jobs still works.
    assert_eq!(
        jobs("--target trn1 --pipeline 'compile, SaveTemps'"),
        with(&DEFAULT, &["SaveTemps"])
    );
    assert_eq!(
        jobs("--target trn1 --state in:Frontend:out:Frontend"),
        ["Frontend"]
    );
}
