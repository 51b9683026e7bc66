//! The simulated tools reject anything but the driver's exact command lines: a wrong command
//! line exits 2 (or 1 for an unusable input) with a message, and writes nothing.

use crate::common::*;

/// A fixture whose work dir holds the frontend's output (so every tool has its inputs).
fn ready() -> (Fixture, nxcc::plan::Invocation) {
    let fx = Fixture::new(&ModelSpec::File("tiny.hlo", tiny_hlo()));
    let prepare = fx.plan(&["--pipeline", "HLOToTensorizer", "Frontend", "Kelper"]);
    run_plan(&fx, &prepare);
    let plan = fx.plan(&[
        "--enable-internal-neff-wrapper",
        "--internal-compiler-debug-mode=all",
        "--enable-experimental-tensorized-scheduler",
        "--pipeline",
        "compile",
        "Watchpoint",
    ]);
    (fx, plan)
}

fn replace(argv: &[String], from: &str, to: &[&str]) -> Vec<String> {
    let i = argv
        .iter()
        .position(|a| a == from)
        .unwrap_or_else(|| panic!("{from} not in {argv:?}"));
    let mut v = argv[..i].to_vec();
    v.extend(to.iter().map(|s| s.to_string()));
    v.extend(argv[i + 1..].iter().cloned());
    v
}

fn remove_pair(argv: &[String], flag: &str) -> Vec<String> {
    let i = argv.iter().position(|a| a == flag).unwrap();
    let mut v = argv.to_vec();
    v.drain(i..i + 2);
    v
}

fn with_tail(argv: &[String], extra: &[&str]) -> Vec<String> {
    let mut v = argv.to_vec();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// Run `argv` in `cwd` and assert the status and a stderr message containing `needle`.
fn expect(fx: &Fixture, argv: &[String], cwd: &str, status: i32, needle: &str) {
    let out = fx.command(argv, cwd).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(status), "{argv:?}: {err}");
    assert!(err.contains(needle), "{argv:?}: {needle:?} not in {err:?}");
}

#[test]
fn hlo2penguin_is_strict() {
    let (fx, plan) = ready();
    let good = argv_of(&plan, "HLOToTensorizer");
    std::fs::remove_file(fx.work.join("penguin.py")).unwrap();
    let model = fx.model.display().to_string();
    let target = good
        .iter()
        .find(|a| a.starts_with("--target-instance="))
        .unwrap()
        .clone();
    let lnc = good
        .iter()
        .find(|a| a.starts_with("--logical-nc-config="))
        .unwrap()
        .clone();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            replace(&good, &lnc, &[]),
            2,
            "required: --logical-nc-config",
        ),
        (
            replace(&good, &target, &["--target-instance", "trn1"]),
            2,
            "attached",
        ),
        (
            replace(&good, &target, &["--target-instance=trn9"]),
            2,
            "invalid choice",
        ),
        (
            replace(&good, &model, &["tiny.hlo"]),
            2,
            "not an absolute path",
        ),
        (
            replace(&good, &model, &["/nonexistent/model.hlo"]),
            2,
            "does not exist",
        ),
        (
            replace(&good, "--input", &["--bogus", "--input"]),
            2,
            "must follow every required option",
        ),
        (
            with_tail(&good, &["--extra", "value"]),
            2,
            "only --flag or --flag=value",
        ),
        (
            with_tail(&good, &["--layers-per-module=2"]),
            2,
            "requires --partition",
        ),
        (
            with_tail(&remove_pair(&good, "--output"), &["--output"]),
            2,
            "expected one argument",
        ),
    ];
    for (argv, status, needle) in cases {
        expect(&fx, &argv, ".", status, needle);
        assert!(
            !fx.work.join("penguin.py").exists(),
            "{argv:?} wrote penguin.py"
        );
    }
    // The unmodified command line works, extra --flag options after the known ones too.
    let ok = fx
        .command(&with_tail(&good, &["--x", "--y=1"]), ".")
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", stderr(&ok));
}

#[test]
fn xla_infergoldens_is_strict() {
    let (fx, plan) = ready();
    let good = argv_of(&plan, "XLAInferGoldens");
    std::fs::write(
        fx.work.join("value_input0.npy"),
        nxcc_sim::formats::npy_f32(&[1], &[1.0]),
    )
    .unwrap();
    std::fs::write(
        fx.work.join("value_input1.npy"),
        nxcc_sim::formats::npy_f32(&[1], &[2.0]),
    )
    .unwrap();
    std::fs::write(fx.work.join("value_input2.npy"), b"not numpy").unwrap();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            with_tail(&good, &["--bogus"]),
            2,
            "unrecognized option \"--bogus\"",
        ),
        (replace(&good, "text", &["proto"]), 1, "is HLO text"),
        (replace(&good, "numpy", &["torch"]), 2, "invalid choice"),
        (remove_pair(&good, "--output"), 2, "required: --output"),
        (
            with_tail(
                &good,
                &["--input", "value_input1.npy", "--input", "value_input0.npy"],
            ),
            2,
            "sorted order",
        ),
        (
            with_tail(&good, &["--input", "value_input9.npy"]),
            2,
            "does not exist",
        ),
        (
            with_tail(&good, &["--input", "value_input2.npy"]),
            1,
            "not a .npy file",
        ),
        (with_tail(&good, &["--spmd=1"]), 2, "takes no value"),
    ];
    for (argv, status, needle) in cases {
        expect(&fx, &argv, ".", status, needle);
        assert!(!fx.work.join("value_output0.npy").exists());
    }
}

/// `walrus_driver --pass P bir.json ...`.
fn input_moved_after_pass(argv: &[String]) -> Vec<String> {
    let mut v = argv.to_vec();
    let input = v.remove(1);
    v.insert(3, input);
    v
}

#[test]
fn walrus_driver_is_strict_and_rejects_optlevel_and_allocator_with_pass() {
    let (fx, plan) = ready();
    let good = argv_of(&plan, "WalrusDriver");
    let passes = good[good.iter().position(|a| a == "--pass").unwrap() + 1].clone();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            with_tail(&good, &["--optlevel", "2"]),
            2,
            "[ERROR] [NCC_DVR003]",
        ),
        (with_tail(&good, &["--optlevel=3"]), 2, "[NCC_DVR003]"),
        (
            with_tail(&good, &["--allocator", "coloring"]),
            2,
            "[ERROR] [NCC_DVR005]",
        ),
        (
            with_tail(&good, &["--something", "--allocator=lsa"]),
            2,
            "[NCC_DVR005]",
        ),
        (
            replace(&good, "bir.json", &["missing.json"]),
            2,
            "does not exist",
        ),
        (
            input_moved_after_pass(&good),
            2,
            "must be the first argument",
        ),
        (
            replace(&good, &passes, &["unroll,fuse_everything"]),
            2,
            "unknown pass \"fuse_everything\"",
        ),
        (
            replace(&good, &passes, &["unroll,unroll"]),
            2,
            "given twice",
        ),
        (remove_pair(&good, "--pass"), 2, "required: --pass"),
        (
            replace(
                &good,
                "io,scalar_dynamic_offset",
                &["scalar_dynamic_offset,io"],
            ),
            2,
            "not sorted",
        ),
        (
            with_tail(&good, &["--print-after", "shift_left"]),
            2,
            "not in the --pass list",
        ),
        (
            replace(
                &good,
                "--memory-analysis-dump=memory-pressure",
                &["--memory-analysis-dump", "memory-pressure"],
            ),
            2,
            "attached",
        ),
        (
            with_tail(&good, &["--max-instruction-limit"]),
            2,
            "expected one argument",
        ),
    ];
    for (argv, status, needle) in cases {
        expect(&fx, &argv, "sg00", status, needle);
        assert!(
            !fx.work.join("sg00/def.json").exists(),
            "{argv:?} wrote def.json"
        );
    }
    // `--optlevel` smuggled through --internal-backend-options by the driver is rejected too.
    let smuggled = fx.plan(&[
        "--internal-backend-options=--optlevel=2",
        "--pipeline",
        "WalrusDriver",
    ]);
    expect(
        &fx,
        &argv_of(&smuggled, "WalrusDriver"),
        "sg00",
        2,
        "[NCC_DVR003]",
    );
}

#[test]
fn neff_wrapper_backend_and_watchpoint_are_strict() {
    let (fx, plan) = ready();
    let wrapper = argv_of(&plan, "NeffWrapper");
    let wrapped = fx.launch.join("file.wrapped.hlo.pb");
    let not_neff = fx.launch.join("not.neff");
    std::fs::write(&not_neff, b"plain bytes").unwrap();
    let neff = plan.plan.output.display().to_string();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            with_tail(
                &wrapper,
                &[
                    "--modular-io-transposes",
                    "sg00/io_transposes.json sg00/io_transposes.json",
                ],
            ),
            2,
            "mutually exclusive",
        ),
        (
            replace(
                &remove_pair(&wrapper, "--io_transposes"),
                "--netlist",
                &[
                    "--modular-io-transposes",
                    "sg00/io_transposes.json",
                    "--netlist",
                ],
            ),
            2,
            "two or more files",
        ),
        (
            remove_pair(&wrapper, "--io_transposes"),
            2,
            "one of --io_transposes or --modular-io-transposes",
        ),
        (
            replace(&wrapper, "hlo_netlist.json", &["missing_netlist.json"]),
            2,
            "does not exist",
        ),
        (
            replace(&wrapper, &neff, &[not_neff.to_str().unwrap()]),
            1,
            "is not a NEFF",
        ),
    ];
    for (argv, status, needle) in cases {
        expect(&fx, &argv, ".", status, needle);
        assert!(!wrapped.exists());
    }

    let backend = argv_of(&plan, "Backend");
    assert_eq!(backend[..2], ["/bin/bash".to_string(), "-c".to_string()]);
    let script = &backend[2];
    for (bad, needle) in [
        (script.replace(" --sunda", ""), "required: --sunda"),
        (
            script.replace("backend.json", "backend.txt"),
            "not a .json file name",
        ),
        (
            script.replace("--tensor_map", "--tensor-map"),
            "unrecognized option",
        ),
        (
            script.replace("sg00/bir.json", "sg07/bir.json"),
            "does not exist",
        ),
    ] {
        let argv = vec!["/bin/bash".to_string(), "-c".to_string(), bad];
        expect(&fx, &argv, ".", 2, needle);
        assert!(!fx.work.join("backend.bir").exists());
    }

    let watch = argv_of(&plan, "Watchpoint");
    let before = std::fs::read(fx.work.join("sg00/bir.json")).unwrap();
    for (argv, needle) in [
        (remove_pair(&watch, "--mode"), "required: --mode"),
        (replace(&watch, "all", &["all modes"]), "invalid mode"),
        (
            replace(&watch, "sg00/bir.json", &["sg01/bir.json"]),
            "does not exist",
        ),
        (
            with_tail(&watch, &["--bir", "sg00/bir.json"]),
            "more than once",
        ),
    ] {
        expect(&fx, &argv, ".", 2, needle);
    }
    assert_eq!(
        std::fs::read(fx.work.join("sg00/bir.json")).unwrap(),
        before
    );
}

#[test]
fn nxcc_sim_itself_names_the_tool_or_explains() {
    let fx = Fixture::new(&ModelSpec::File("tiny.hlo", tiny_hlo()));
    let sim = sim_exe().display().to_string();
    let help = fx
        .command(&[sim.clone(), "--help".into()], ".")
        .output()
        .unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("cannot run on Neuron hardware"));
    for tool in nxcc::toolchain::TOOLS {
        assert!(text.contains(tool), "{tool} not in the help");
    }
    expect(
        &fx,
        &[sim.clone(), "gcc".into()],
        ".",
        2,
        "unknown tool \"gcc\"",
    );
    expect(&fx, std::slice::from_ref(&sim), ".", 2, "no tool given");
    // `nxcc-sim <tool> args...` is the tool.
    let out = fx
        .command(
            &[
                sim,
                "watchpoint_insert".into(),
                "--mode".into(),
                "all".into(),
            ],
            ".",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out)
        .contains("watchpoint_insert: error: the following arguments are required: --bir"));
}
