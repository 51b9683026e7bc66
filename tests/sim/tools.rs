//! Every simulated tool run as a real process through a link named after it, with the exact
//! command lines the driver's plan produces.

use crate::common::*;
use nxcc_sim::formats;

/// Options that put every native tool, and most optional flags, into the plan.
const RICH: &[&str] = &[
    "--enable-internal-neff-wrapper",
    "--enable-experimental-tensorized-scheduler",
    "--internal-compiler-debug-mode=all",
    "--internal-tensorizer-opt-level",
    "nki",
    "--pipeline",
    "compile",
    "Watchpoint",
    "BIRVerifier",
    "BIRSim",
    "--spmd",
    "--internal-hlo-remat",
    "--internal-hlo-analyze-schedule",
    "--query-compute-placement",
    "--internal-build-with-users",
    "--internal-disable-layer-det",
    "--upcast-all-to-fp32",
    "--experimental-unsafe-fp8e4m3fn-as-fp8e4m3",
    "--internal-smt-allocation",
    "--internal-max-instruction-limit",
    "100000",
    "--internal-print-after",
    "dma_optimization",
    "--internal-dma-qos-class-count",
    "2",
    "--internal-backend-options=--walrus-extra --level=3",
    "--internal-hlo2tensorizer-options=--penguin-extra=1 --flag",
];

fn rich_fixture() -> Fixture {
    let fx = Fixture::new(&ModelSpec::File("tiny.hlo", tiny_hlo()));
    for (i, v) in [[1.0f32, 2.0], [3.0, 4.0]].iter().enumerate() {
        std::fs::write(
            fx.work.join(format!("value_input{i}.npy")),
            formats::npy_f32(&[2], v),
        )
        .unwrap();
    }
    fx
}

#[test]
fn every_tool_accepts_the_driver_command_lines() {
    let fx = rich_fixture();
    let plan = fx.plan(RICH);
    let ran = run_plan(&fx, &plan);
    let jobs: Vec<&str> = ran.iter().map(|r| r.job).collect();
    for job in [
        "HLOToTensorizer",
        "XLAInferGoldens",
        "WalrusDriver",
        "Backend",
        "NeffWrapper",
        "Watchpoint",
        "BIRVerifier",
        "BIRSim",
    ] {
        assert!(jobs.contains(&job), "{job} did not run: {jobs:?}");
    }
    // The tools ran through the links of the laid-out toolchain.
    let walrus = ran.iter().find(|r| r.job == "WalrusDriver").unwrap();
    assert_eq!(
        walrus.argv[0],
        fx.toolchain.join("bin/walrus_driver").display().to_string()
    );
    assert!(walrus.argv.contains(&"--walrus-extra".to_string()));

    // hlo2penguin: the model's digest, the target and every option, no path.
    let penguin = std::fs::read_to_string(fx.work.join("penguin.py")).unwrap();
    let digest = blake3::hash(&tiny_hlo()).to_hex().to_string();
    assert!(penguin.contains(&format!("# model-blake3: {digest}")));
    assert!(penguin.contains("TARGET_INSTANCE = \"trn1\""));
    assert!(penguin.contains("LOGICAL_NC_CONFIG = 1"));
    for o in [
        "--spmd",
        "--remat",
        "--analyze-schedule",
        "--engine-placement-mode",
        "--build-with-users",
        "--disable-layer-det",
    ] {
        assert!(penguin.contains(&format!("\"{o}\"")), "{o} missing");
    }
    assert!(penguin.contains("EXTRA_OPTIONS = [\"--penguin-extra=1\", \"--flag\"]"));
    assert!(!penguin.contains(&fx.launch.display().to_string()));

    // xla_infergoldens: a valid .npy and a pickle.
    let npy = std::fs::read(fx.work.join("value_output0.npy")).unwrap();
    assert!(formats::is_npy(&npy));
    // Shaped like the module's result, f32[8,8].
    assert!(String::from_utf8_lossy(&npy[..128]).contains("'shape': (8, 8)"));
    let gold = std::fs::read(fx.work.join("gold-000.p")).unwrap();
    assert_eq!(&gold[..3], b"\x80\x02X");
    assert_eq!(gold.last(), Some(&b'.'));

    // walrus_driver: def.json, neff.json, tensor_map.json and one .bin per engine.
    let sg = fx.work.join("sg00");
    let def = json(&sg.join("def.json"));
    assert_eq!(def["schema_version"], "0.6");
    assert_eq!(def["options"]["smt_allocation"], true);
    assert_eq!(def["options"]["max_instruction_limit"], 100000);
    assert_eq!(def["options"]["dma_qos_class_count"], 2);
    assert_eq!(def["options"]["print_after"], "dma_optimization");
    assert_eq!(
        def["options"]["dge_levels"],
        serde_json::json!(["io", "scalar_dynamic_offset"])
    );
    assert_eq!(
        def["options"]["extra"],
        serde_json::json!(["--walrus-extra", "--level=3"])
    );
    let passes: Vec<&str> = def["passes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(passes, plan.plan.walrus_passes);
    let neff = json(&sg.join("neff.json"));
    assert_eq!(neff["schema_version"], "0.5");
    assert_eq!(neff["sg"], "sg00");
    let engines = neff["engines"].as_array().unwrap();
    assert!(engines.iter().any(|e| e == "PE"));
    for e in engines {
        assert!(sg.join(format!("{}.bin", e.as_str().unwrap())).is_file());
    }
    let tm = json(&sg.join("tensor_map.json"));
    assert!(tm["inputs"].is_array() && tm["alias_map"].is_array());
    assert!(walrus
        .output
        .stdout
        .starts_with(b"walrus_driver: IR after dma_optimization"));

    // nn_executor, watchpoint_insert, hlo-neff-wrapper.
    let backend = json(&fx.work.join("backend.bir"));
    assert_eq!(backend["sg"], "sg00");
    let bir = json(&sg.join("bir.json"));
    assert_eq!(bir["watchpoint"]["mode"], "all");
    let wrapped = std::fs::read(fx.launch.join("file.wrapped.hlo.pb")).unwrap();
    assert!(wrapped.starts_with(&tiny_hlo()));
    let neff_digest = blake3::hash(&std::fs::read(&plan.plan.output).unwrap())
        .to_hex()
        .to_string();
    assert!(String::from_utf8_lossy(&wrapped).contains(&format!("# neff-blake3: {neff_digest}")));
    // The check-only walrus runs wrote nothing new and said so.
    let verifier = ran.iter().find(|r| r.job == "BIRVerifier").unwrap();
    assert!(String::from_utf8_lossy(&verifier.output.stdout).contains("birverifier: sg00"));
}

#[test]
fn outputs_are_the_same_bytes_in_two_different_work_dirs() {
    let trees: Vec<_> = (0..2)
        .map(|_| {
            let fx = rich_fixture();
            let plan = fx.plan(RICH);
            run_plan(&fx, &plan);
            (
                tree(&fx.work),
                std::fs::read(fx.launch.join("file.wrapped.hlo.pb")).unwrap(),
            )
        })
        .collect();
    assert!(
        trees[0].0.len() > 12,
        "{:?}",
        trees[0].0.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    let names = |t: &Vec<(String, Vec<u8>)>| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&trees[0].0), names(&trees[1].0));
    for ((name, a), (_, b)) in trees[0].0.iter().zip(&trees[1].0) {
        assert!(a == b, "{name} differs between the two runs");
    }
    assert_eq!(trees[0].1, trees[1].1);
}

#[test]
fn a_model_directory_runs_one_walrus_per_subgraph_and_the_modular_wrapper() {
    // Three modules of the example zoo, of different sizes (1 KiB, 29 KiB, 4 KiB).
    let zoo = |stem: &str| {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("examples/models/{stem}.hlo_module.pb")),
        )
        .unwrap()
    };
    let files = vec![
        ("g0.pb", zoo("mlp")),
        ("g1.pb", zoo("many_params")),
        ("g2.pb", zoo("attention")),
    ];
    let fx = Fixture::new(&ModelSpec::Dir("graphs", files));
    let plan = fx.plan(&["--meta-module", "2", "--enable-internal-neff-wrapper"]);
    assert_eq!(plan.plan.subgraphs, ["sg00", "sg01", "sg02"]);
    let ran = run_plan(&fx, &plan);
    let penguin = ran.iter().find(|r| r.job == "HLOToTensorizer").unwrap();
    assert!(penguin.argv.contains(&"--partition".to_string()));
    assert!(penguin.argv.contains(&"--layers-per-module=2".to_string()));
    let walrus: Vec<_> = ran.iter().filter(|r| r.job == "WalrusDriver").collect();
    assert_eq!(walrus.len(), 3);
    let size = |sg: &str| {
        std::fs::read_dir(fx.work.join(sg))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "bin"))
            .map(|e| e.metadata().unwrap().len())
            .sum::<u64>()
    };
    assert!(size("sg01") > size("sg02") && size("sg02") > size("sg00"));
    let wrapper = ran.iter().find(|r| r.job == "NeffWrapper").unwrap();
    assert!(wrapper
        .argv
        .contains(&"--modular-io-transposes".to_string()));
    let wrapped = std::fs::read(fx.launch.join("file.wrapped.hlo.pb")).unwrap();
    let mut model = Vec::new();
    for f in ["g0.pb", "g1.pb", "g2.pb"] {
        model.extend(std::fs::read(fx.model.join(f)).unwrap());
    }
    assert!(wrapped.starts_with(&model));
}

#[test]
fn the_library_runs_the_fork_walrus_argv_beside_an_absolute_input() {
    let fx = Fixture::new(&ModelSpec::File("tiny.hlo", tiny_hlo()));
    let plan = fx.plan(&[
        "--enable-internal-fork-walrus",
        "--pipeline",
        "HLOToTensorizer",
        "Frontend",
        "WalrusDriver",
    ]);
    run_plan(&fx, &plan);
    let step = &plan
        .plan
        .jobs
        .iter()
        .find(|j| j.name == nxcc::jobs::Job::WalrusDriver)
        .unwrap()
        .steps[0];
    let nxcc::jobs::Action::Library {
        library,
        symbol,
        argv,
    } = &step.action
    else {
        panic!("not a library step: {:?}", step.action)
    };
    assert_eq!(library, &fx.toolchain.join("lib/libwalrus.so"));
    // The driver passes the input as an absolute path (it never changes directory).
    let sg = fx.work.join("sg00");
    let argv: Vec<String> = argv
        .iter()
        .map(|a| {
            if a == "<work dir>/sg00/bir.json" {
                sg.join("bir.json").display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let c: Vec<std::ffi::CString> = argv
        .iter()
        .map(|a| std::ffi::CString::new(a.as_str()).unwrap())
        .collect();
    let ptrs: Vec<*const std::ffi::c_char> = c.iter().map(|s| s.as_ptr()).collect();
    // SAFETY: the library is this crate's cdylib; the symbol has this signature.
    let status = unsafe {
        let lib = libloading::Library::new(library).unwrap();
        let f: libloading::Symbol<
            unsafe extern "C" fn(
                std::ffi::c_int,
                *const *const std::ffi::c_char,
            ) -> std::ffi::c_int,
        > = lib.get(symbol.as_bytes()).unwrap();
        f(ptrs.len() as std::ffi::c_int, ptrs.as_ptr())
    };
    assert_eq!(status, 0);
    assert_eq!(json(&sg.join("def.json"))["schema_version"], "0.6");
    assert_eq!(json(&sg.join("neff.json"))["sg"], "sg00");
    assert!(sg.join("PE.bin").is_file());
    // The same argv through the executable gives the same bytes.
    let other = Fixture::new(&ModelSpec::File("tiny.hlo", tiny_hlo()));
    let plan2 = other.plan(&["--pipeline", "HLOToTensorizer", "Frontend", "WalrusDriver"]);
    run_plan(&other, &plan2);
    assert_eq!(tree(&fx.work), tree(&other.work));
}
