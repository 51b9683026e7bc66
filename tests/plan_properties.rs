//! Invariants of the plan over random valid command lines (proptest). Each expectation is
//! computed from the generated options independently of the plan builder.

use nxcc::plan::{dryrun, Invocation, StaticProbe};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Opts {
    target: &'static str,
    lnc: Option<i64>,
    meta: Option<i64>,
    optlevel: Option<&'static str>,
    unroll: Option<i64>,
    fsdp: bool,
    modular: bool,
    linker: bool,
    neff_wrapper: bool,
    tensorized: bool,
    vnsplitter: bool,
    anti_dep: bool,
    no_birverifier: bool,
    allocator: Option<&'static str>,
    scheduler: Option<&'static str>,
    pipeline_cores: Option<i64>,
    nki: bool,
    equals_form: bool,
}

fn opts() -> impl Strategy<Value = Opts> {
    let targets = prop::sample::select(vec![
        "inf1", "inf2", "trn1", "trn1n", "trn2", "trn2n", "trn3",
    ]);
    (
        (
            targets,
            any::<bool>(),
            prop::option::of(-2i64..6),
            prop::option::of(prop::sample::select(vec!["0", "1", "2", "3"])),
        ),
        (
            prop::option::of(-3i64..6),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        (
            prop::option::of(prop::sample::select(vec!["coloring", "linear_scan"])),
            prop::option::of(prop::sample::select(vec![
                "none",
                "experimental-loop-shift-left",
                "experimental-loop-lsa",
            ])),
            prop::option::of(1i64..5),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (target, lnc2, meta, optlevel),
                (unroll, fsdp, modular, linker, neff_wrapper, tensorized),
                (vnsplitter, anti_dep, no_birverifier),
                (allocator, scheduler, pipeline_cores, nki, equals_form),
            )| {
                let lnc2_ok = ["trn2", "trn2n", "trn3"].contains(&target);
                Opts {
                    target,
                    lnc: if lnc2 {
                        Some(if lnc2_ok { 2 } else { 1 })
                    } else {
                        None
                    },
                    meta,
                    optlevel,
                    unroll,
                    fsdp,
                    modular,
                    linker,
                    neff_wrapper,
                    tensorized,
                    vnsplitter,
                    anti_dep,
                    no_birverifier,
                    allocator,
                    scheduler,
                    pipeline_cores,
                    nki,
                    equals_form,
                }
            },
        )
}

fn argv(o: &Opts) -> Vec<String> {
    let kv = |k: &str, v: String| {
        if o.equals_form {
            vec![format!("{k}={v}")]
        } else {
            vec![k.to_string(), v]
        }
    };
    let mut a = vec![
        "compile".to_string(),
        "m.pb".to_string(),
        "--framework".into(),
        "XLA".into(),
    ];
    a.extend(kv("--target", o.target.into()));
    if let Some(l) = o.lnc {
        a.extend(kv("--lnc", l.to_string()));
    }
    if let Some(m) = o.meta {
        a.extend(kv("--meta-module", m.to_string()));
    }
    if let Some(ol) = o.optlevel {
        a.push(format!("-O{ol}"));
    }
    if let Some(u) = o.unroll {
        a.extend(kv("--layer-unroll-factor", u.to_string()));
    }
    if o.fsdp {
        a.extend(kv("--distribution-strategy", "fsdp".into()));
    }
    for (on, flag) in [
        (o.modular, "--enable-internal-modular-compilation"),
        (o.linker, "--enable-internal-bir-linker"),
        (o.neff_wrapper, "--enable-internal-neff-wrapper"),
        (o.tensorized, "--enable-experimental-tensorized-scheduler"),
        (o.vnsplitter, "--enable-bir-vnsplitter"),
        (o.anti_dep, "--enable-internal-anti-dependence-reduction"),
        (
            o.no_birverifier,
            "--internal-disable-birverifier-validation",
        ),
    ] {
        if on {
            a.push(flag.to_string());
        }
    }
    if let Some(v) = o.allocator {
        a.extend(kv("--allocator", v.into()));
    }
    if let Some(v) = o.scheduler {
        a.extend(kv("--scheduler", v.into()));
    }
    if let Some(v) = o.pipeline_cores {
        a.extend(kv("--neuroncore-pipeline-cores", v.to_string()));
    }
    if o.nki {
        a.extend(kv("--internal-tensorizer-opt-level", "nki".into()));
    }
    a
}

fn build(o: &Opts) -> Invocation {
    Invocation::from_argv("nxcc", &argv(o), &StaticProbe::new("/launch"))
        .unwrap_or_else(|e| panic!("{:?}: {e:?}", argv(o)))
}

/// The unroll factor the gate sees, computed from the options alone.
fn expected_unroll(o: &Opts) -> i64 {
    if o.optlevel == Some("3") {
        0
    } else if let Some(u) = o.unroll {
        u
    } else if o.fsdp {
        4
    } else {
        1
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn collectors_shape(o in opts()) {
        let inv = build(&o);
        let p = &inv.plan;
        let meta = o.meta.unwrap_or(0) != 0;
        // WalrusDriver exactly once, from the walrus collector.
        let collected: Vec<&str> = p.collected.iter().map(|j| j.name()).collect();
        prop_assert_eq!(collected.iter().filter(|n| **n == "WalrusDriver").count(), 1);
        // front + walrus + backend, in that order.
        let w = collected.iter().position(|n| *n == "WalrusDriver").unwrap();
        let front = &collected[..w];
        let backend = &collected[w + 1..];
        if meta {
            prop_assert_eq!(front, &["HLOToTensorizer", "Frontend"][..]);
        } else {
            prop_assert_eq!(front, &["HLOToTensorizer", "XLAInferGoldens", "Frontend", "StaticIOTranspose"][..]);
        }
        let gate = !o.modular && !o.linker && expected_unroll(&o) > 0;
        let mut expected_backend = Vec::new();
        if gate {
            if o.tensorized { expected_backend.push("Backend"); }
            expected_backend.push("Kelper");
            if o.neff_wrapper { expected_backend.push("NeffWrapper"); }
        }
        prop_assert_eq!(backend, &expected_backend[..]);
        // Kelper iff the gate holds.
        prop_assert_eq!(p.pipeline.contains(&nxcc::jobs::Job::Kelper), gate);
        // No --pipeline: the final list is the collected list.
        prop_assert_eq!(&p.pipeline, &p.collected);
        prop_assert_eq!(p.jobs.len(), p.pipeline.len());
    }

    #[test]
    fn meta_module_pins_lnc(o in opts()) {
        let inv = build(&o);
        let p = &inv.plan;
        if o.meta.unwrap_or(0) != 0 {
            prop_assert_eq!(inv.inputs.logical_nc_config(), 1);
        } else {
            let default = if ["trn2", "trn2n", "trn3"].contains(&o.target) { 2 } else { 1 };
            prop_assert_eq!(inv.inputs.logical_nc_config(), o.lnc.unwrap_or(default));
        }
        // Whatever the lnc, hlo2penguin gets the same one.
        let argv = p.jobs[0].steps[0].argv().unwrap();
        let expected = format!("--logical-nc-config={}", inv.inputs.logical_nc_config());
        prop_assert!(argv.contains(&expected));
    }

    #[test]
    fn pass_list_invariants(o in opts()) {
        let inv = build(&o);
        let p = &inv.plan;
        let allocators = p.walrus_passes.iter().filter(|x| x.ends_with("_allocator")).count();
        prop_assert_eq!(allocators, 1);
        prop_assert_eq!(&p.walrus_passes[..2], &["unroll", "lower_ac"][..]);
        prop_assert_eq!(p.walrus_passes.iter().any(|x| x == "partitioner"), o.pipeline_cores.unwrap_or(1) > 1);
        prop_assert_eq!(p.walrus_passes.iter().any(|x| x == "bir_splitter"), o.vnsplitter);
        prop_assert_eq!(p.walrus_passes.iter().any(|x| x == "vn_splitter"), !o.vnsplitter);
        prop_assert_eq!(p.walrus_passes.iter().any(|x| x == "birverifier"), !o.no_birverifier);
        prop_assert_eq!(p.walrus_passes.iter().any(|x| x == "bir_sim"), o.nki);
        prop_assert!(!p.walrus_passes.iter().any(|x| x == "lsa") && !p.walrus_passes.iter().any(|x| x == "coloring"));
        // One walrus_driver process per subgraph (one here), with the whole list.
        let walrus = p.jobs.iter().find(|j| j.name == nxcc::jobs::Job::WalrusDriver).unwrap();
        prop_assert_eq!(walrus.steps.len(), 1);
        let joined = p.walrus_passes.join(",");
        prop_assert!(walrus.steps[0].argv().unwrap().contains(&joined));
    }

    #[test]
    fn optlevel_is_a_string_and_o3_becomes_o2(o in opts()) {
        let inv = build(&o);
        let expected = match o.optlevel { Some("3") | None => "2", Some(x) => x };
        prop_assert_eq!(inv.optlevel(), expected);
        prop_assert_eq!(inv.layer_unroll_factor(), expected_unroll(&o));
    }

    #[test]
    fn equals_and_separate_forms_agree(o in opts()) {
        let mut other = o.clone();
        other.equals_form = !o.equals_form;
        let a = dryrun::to_json(&build(&o));
        let mut b = dryrun::to_json(&build(&other));
        // Only the recorded argv differs.
        b["args"] = a["args"].clone();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn dry_run_json_has_the_stable_keys(o in opts()) {
        let j = dryrun::to_json(&build(&o));
        for key in ["nxcc_plan_version", "pipeline", "walrus_passes", "optlevel", "logical_nc_config", "target",
                    "dge_on_levels", "layer_unroll_factor", "args", "jobs", "output", "decisions", "warnings"] {
            prop_assert!(j.get(key).is_some(), "missing key {}", key);
        }
        for job in j["jobs"].as_array().unwrap() {
            for key in ["name", "runs_as", "tool", "tool_path", "argv", "cwd", "reads", "writes"] {
                prop_assert!(job.get(key).is_some(), "job missing key {}", key);
            }
        }
        for d in j["decisions"].as_array().unwrap() {
            let s = d["source"].as_str().unwrap();
            prop_assert!(["SEED", "WIKI", "DOCS", "CLIENTS", "RECON", "NXCC"].contains(&s));
        }
        let levels: Vec<String> = j["dge_on_levels"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        let mut sorted = levels.clone();
        sorted.sort();
        prop_assert_eq!(levels, sorted);
    }
}
