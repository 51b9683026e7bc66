//! Real compiles with the simulated toolchain, through the built binary: every worked example of
//! 02-plan.md that schedules Kelper produces a NEFF that `neff-info --verify` accepts, and the
//! tools that ran are exactly the planned ones, in order, with the planned argv.

mod common;

use common::{text, verifies, Scratch};

/// The native tool invocations the dry run plans: (tool, argv after the program).
fn planned_invocations(s: &Scratch, args: &[&str]) -> Vec<(String, Vec<String>)> {
    let mut a = args.to_vec();
    a.push("--dry-run=json");
    let out = s.run(&a);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut v = Vec::new();
    for job in plan["jobs"].as_array().unwrap() {
        let steps: Vec<serde_json::Value> = match job["steps"].as_array() {
            Some(steps) => steps.clone(),
            None => vec![job.clone()],
        };
        for step in steps {
            let Some(argv) = step["argv"].as_array() else {
                continue;
            };
            let argv: Vec<String> = argv
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            if argv[0] == "/bin/bash" {
                // The Backend runs `ulimit -t N && <tool> ...` through bash.
                let script = argv[2].split_once("&& ").unwrap().1;
                let words = shell_words::split(script).unwrap();
                v.push((tool_name(&words[0]), words[1..].to_vec()));
            } else {
                v.push((tool_name(&argv[0]), argv[1..].to_vec()));
            }
        }
    }
    v
}

fn tool_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

/// `text` with the model's private snapshot (`<launch>/nxcc-snapshot-<id>/<name>`) written as
/// the model it is of (`<launch>/<name>`): the path the plan names.
fn as_planned(s: &Scratch, text: &str) -> String {
    let prefix = format!("{}/nxcc-snapshot-", s.path().display());
    let Some(at) = text.find(&prefix) else {
        return text.to_string();
    };
    let id_end = at + prefix.len() + text[at + prefix.len()..].find('/').unwrap();
    format!(
        "{}{}",
        &text[..at + s.path().as_os_str().len()],
        &text[id_end..]
    )
}

/// Every tool that reads the model was given its private snapshot, never the caller's path.
fn tools_read_the_snapshot(s: &Scratch, commands: &[String]) {
    let model = s.join("mlp.hlo_module.pb").display().to_string();
    for c in commands {
        assert!(
            !c.contains(&format!("{model} ")),
            "the caller's path reached a tool: {c}"
        );
    }
    assert!(
        commands.iter().any(|c| c.contains("/nxcc-snapshot-")),
        "no tool read the snapshot: {commands:?}"
    );
}

fn recorded_invocations(s: &Scratch) -> Vec<(String, Vec<String>)> {
    s.records()
        .iter()
        .map(|r| {
            let argv: Vec<String> = r["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| as_planned(s, a.as_str().unwrap()))
                .collect();
            (r["tool"].as_str().unwrap().to_string(), argv[1..].to_vec())
        })
        .collect()
}

const WORKED_EXAMPLES_WITH_KELPER: &[&str] = &[
    "--target trn1",
    "--target trn2",
    "--target trn2 --meta-module 4",
    "--target trn2 --meta-module 0",
    "--target trn1 --enable-internal-neff-wrapper",
    "--target trn1 --enable-experimental-tensorized-scheduler",
    "--target trn1 --distribution-strategy fsdp",
    "--target trn1 --pipeline compile SaveTemps",
];

#[test]
fn worked_examples_compile_to_verified_neffs_running_exactly_the_planned_tools() {
    for (i, example) in WORKED_EXAMPLES_WITH_KELPER.iter().enumerate() {
        let s = Scratch::new();
        let output = format!("out{i}.neff");
        let line = format!(
            "compile mlp.hlo_module.pb --framework XLA {example} --toolchain sim --output {output}"
        );
        let args = shell_words::split(&line).unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let planned = planned_invocations(&s, &args);
        let out = s.run(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{example}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("Compiler status PASS"),
            "{example}"
        );
        assert!(
            verifies(&s.join(&output)),
            "{example}: the NEFF does not verify"
        );
        assert_eq!(
            recorded_invocations(&s),
            planned,
            "{example}: tools run differ from the plan"
        );
        tools_read_the_snapshot(&s, &logged_commands(&s));
        if example.contains("neff-wrapper") {
            assert!(s.join(&format!("out{i}.wrapped.hlo.pb")).is_file());
        }
        if example.contains("SaveTemps") {
            // The work dir was copied into the launch dir, and kept.
            assert!(s.join("penguin.py").is_file() && s.join("sg00/def.json").is_file());
            assert_eq!(s.work_dirs().len(), 1);
        } else {
            assert!(
                s.work_dirs().is_empty(),
                "{example}: the generated work dir is removed after success"
            );
        }
    }
}

#[test]
fn text_model_runs_static_io_transpose_for_real() {
    let s = Scratch::new();
    // A prepared work dir with an input for parameter x.1 (f32[8,16]) and existing goldens.
    let work = s.join("work");
    std::fs::create_dir_all(work.join("inputs")).unwrap();
    let data: Vec<u8> = (0..128u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
    std::fs::write(
        work.join("inputs/value_x.1.npy"),
        nxcc::npy::write("<f4", &[8, 16], &data),
    )
    .unwrap();
    std::fs::write(work.join("gold-000.p"), b"goldens").unwrap();
    let out = s.run(&[
        "compile",
        "mlp.hlo",
        "--target",
        "trn1",
        "--toolchain",
        "sim",
        "--temp-dir",
        "work",
        "--output",
        "t.neff",
        "--logfile-verbose",
        "debug",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The simulated frontend wrote one entry per rank-2 parameter; they were simplified in place.
    let entries: serde_json::Value =
        serde_json::from_slice(&std::fs::read(work.join("sg00/io_transposes.json")).unwrap())
            .unwrap();
    let names: Vec<&str> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["input_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["x.1", "w.1"]);
    assert_eq!(entries[0]["reshape"], serde_json::json!([8, 16]));
    assert_eq!(entries[0]["transpose"], serde_json::json!([1, 0]));
    // The input was transposed to (16, 8) and linked into the subgraph.
    let t = nxcc::npy::parse(&std::fs::read(work.join("transposed_inputs/value_x.1.npy")).unwrap())
        .unwrap();
    assert_eq!(t.shape, [16, 8]);
    let at = |d: &[u8], i: usize| f32::from_le_bytes(d[i * 4..i * 4 + 4].try_into().unwrap());
    for r in 0..16 {
        for c in 0..8 {
            assert_eq!(at(&t.data, r * 8 + c), (c * 16 + r) as f32);
        }
    }
    let link = std::fs::read_link(work.join("sg00/value_x.1.npy")).unwrap();
    assert_eq!(
        link,
        std::path::Path::new("../transposed_inputs/value_x.1.npy")
    );
    // gold-000.p was there: XLAInferGoldens was skipped, with the original's log line.
    assert!(!s.records().iter().any(|r| r["tool"] == "xla_infergoldens"));
    let log = std::fs::read_to_string(s.join("log-neuron-cc.txt")).unwrap();
    assert!(log.contains("Detected gold-000.p, dumping goldens and skipping XLAInferGoldens"));
    // The --temp-dir is kept, and a second compile into it is refused (DRV077).
    let again = s.run(&[
        "compile",
        "mlp.hlo",
        "--target",
        "trn1",
        "--toolchain",
        "sim",
        "--temp-dir",
        "work",
    ]);
    assert_eq!(again.status.code(), Some(70));
    assert!(text(&again.stderr).contains(
        "[ERROR] [NCC_DRV077] Compilation artifacts already exist in the output directory"
    ));
}

#[test]
fn two_compiles_with_different_work_dirs_give_identical_neffs() {
    let s = Scratch::new();
    // Same output file name (it is recorded in the NEFF), different directories and work dirs.
    for (dir, out) in [("w1", "o1/m.neff"), ("w2", "o2/m.neff")] {
        let o = s.run(&[
            "compile",
            "mlp.hlo_module.pb",
            "--target",
            "trn2",
            "--toolchain",
            "sim",
            "--temp-dir",
            dir,
            "--output",
            out,
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let o = s.sim_run("trn2", &["--output", "o3/m.neff"]);
    assert!(o.status.success());
    let a = std::fs::read(s.join("o1/m.neff")).unwrap();
    assert!(
        a == std::fs::read(s.join("o2/m.neff")).unwrap(),
        "--temp-dir changed the NEFF"
    );
    assert!(
        a == std::fs::read(s.join("o3/m.neff")).unwrap(),
        "a generated work dir changed the NEFF"
    );
    // A fast-loading NEFF (uncompressed) differs, and verifies.
    let o = s.sim_run(
        "trn2",
        &[
            "--output",
            "o4/m.neff",
            "--enable-fast-loading-neuron-binaries",
        ],
    );
    assert!(o.status.success());
    assert!(a != std::fs::read(s.join("o4/m.neff")).unwrap());
    assert!(verifies(&s.join("o4/m.neff")));
}

#[test]
fn several_subgraphs_run_walrus_once_each_and_pack_them_all() {
    let s = Scratch::new();
    let out = s
        .sim_cmd(
            "trn1",
            &["--output", "m.neff", "--enable-internal-neff-wrapper"],
        )
        .env("NXCC_SIM_SUBGRAPHS", "3")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let walrus: Vec<String> = s
        .records()
        .iter()
        .filter(|r| r["tool"] == "walrus_driver")
        .map(|r| r["cwd"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(walrus.len(), 3);
    assert!(walrus[0].ends_with("/sg00") && walrus[2].ends_with("/sg02"));
    let wrapper = s
        .records()
        .into_iter()
        .find(|r| r["tool"] == "hlo-neff-wrapper")
        .unwrap();
    assert!(wrapper["argv"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "--modular-io-transposes"));
    let info = s.run(&["neff-info", "--json", "m.neff"]);
    let j: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let sgs: Vec<&str> = j["subgraphs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["sg"].as_str().unwrap())
        .collect();
    assert_eq!(sgs, ["sg00", "sg01", "sg02"], "{j}");
}

#[test]
fn fork_walrus_runs_the_backend_library_in_process() {
    let s = Scratch::new();
    let out = s.sim_run(
        "trn1",
        &[
            "--output",
            "f.neff",
            "--enable-internal-fork-walrus",
            "--enable-internal-walrus-replay-script",
            "--keep-work-dir",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(verifies(&s.join("f.neff")));
    // The walrus backend ran in the library (argv[0] is the bare name, the input absolute), not
    // as a walrus_driver process from the toolchain's bin/.
    let walrus: Vec<serde_json::Value> = s
        .records()
        .into_iter()
        .filter(|r| r["tool"] == "walrus_driver")
        .collect();
    assert_eq!(walrus.len(), 1);
    assert_eq!(walrus[0]["argv"][0], "walrus_driver");
    assert!(walrus[0]["argv"][1]
        .as_str()
        .unwrap()
        .ends_with("/sg00/bir.json"));
    let log = std::fs::read_to_string(s.join("log-neuron-cc.txt")).unwrap();
    assert!(log.contains("Calling run_backend_driver of "), "{log}");
    let work = &s.work_dirs()[0];
    let script = std::fs::read_to_string(work.join("sg00/replay_walrus.sh")).unwrap();
    assert!(script.starts_with("#!/bin/bash\n") && script.contains("--pass unroll,lower_ac"));
    // A crash inside the library takes the worker down; the supervisor reports it.
    let out = s
        .sim_cmd(
            "trn1",
            &["--output", "g.neff", "--enable-internal-fork-walrus"],
        )
        .env("NXCC_SIM_FAULT", "walrus_driver:segv")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(70));
    assert!(
        text(&out.stderr).contains("[F139] neuronx-cc terminated abnormally"),
        "{}",
        text(&out.stderr)
    );
    assert!(!s.join("g.neff").exists());
}

#[test]
fn log_metrics_timings_and_trace() {
    let s = Scratch::new();
    let out = s.sim_run(
        "trn1",
        &[
            "--output",
            "m.neff",
            "--submit-metrics",
            "--run-id",
            "r-1",
            "--timings",
            "--trace",
            "trace.json",
            "--verbose",
            "info",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let console = text(&out.stdout);
    // Below user level the console gets the log-file format.
    assert!(
        console.contains("INFO")
            && console.contains("[pipeline.Pipeline.0]: Starting job WalrusDriver"),
        "{console}"
    );
    let log = std::fs::read_to_string(s.join("log-neuron-cc.txt")).unwrap();
    for line in [
        "Running pipeline compile 0",
        "Starting job HLOToTensorizer",
        "Finished job Kelper in ",
        "Finished pipeline compile",
        "Executing ",
        "Working directory is ",
        "Intermediate files stored in ",
        "Job metrics:",
        "Compiler status PASS",
    ] {
        assert!(log.contains(line), "log lacks {line:?}");
    }
    let record: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(s.join("global_metric_store.json"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(record["run_id"], "r-1");
    assert_eq!(record["target"], "trn1");
    assert_eq!(record["jobs"].as_array().unwrap().len(), 6);
    assert!(record["jobs"][4]["max_rss_kb"].as_u64().unwrap() > 0);
    let html = std::fs::read_to_string(s.join("nxcc-timings.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("WalrusDriver"));
    assert!(html.contains("data-outcome=\"compiled\""), "{html}");
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.join("trace.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let x = |cat: &str| -> Vec<&serde_json::Value> {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == cat)
            .collect()
    };
    // One event for the compile, its six jobs inside it.
    let (compile, jobs) = (x("compile"), x("job"));
    assert_eq!((compile.len(), jobs.len()), (1, 6), "{trace}");
    assert_eq!(compile[0]["args"]["outcome"], "compiled");
    let (c0, c1) = (
        compile[0]["ts"].as_u64().unwrap(),
        compile[0]["ts"].as_u64().unwrap() + compile[0]["dur"].as_u64().unwrap(),
    );
    for j in jobs {
        let (s0, d) = (j["ts"].as_u64().unwrap(), j["dur"].as_u64().unwrap());
        assert!(c0 <= s0 && s0 + d <= c1, "{j} outside {}", compile[0]);
    }
}

#[test]
fn dots_mode_prints_dots_and_the_status() {
    let s = Scratch::new();
    let out = s
        .sim_cmd("trn1", &["--verbose=35"])
        .env("NXCC_SIM_WORK_MS", "walrus_driver:5600")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(".\n") || stdout.contains(".."),
        "{stdout:?}"
    );
    assert!(stdout.contains("Compiler status PASS"));
}

#[test]
fn a_terminal_gets_a_live_status_line_and_a_pipe_does_not() {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let s = Scratch::new();
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two new descriptors we then own.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    // Close-on-exec, so the children other tests start meanwhile do not hold the terminal open
    // (its reader waits for the last holder); the compile gets the slave as its stderr by dup2.
    for fd in [master, slave] {
        // SAFETY: setting a flag on descriptors this test owns.
        assert_eq!(
            // SAFETY: fcntl on descriptors this test owns; no pointers.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) },
            0
        );
    }
    // SAFETY: openpty gave this test the descriptor; this File is its only owner.
    let slave_file = unsafe { std::fs::File::from_raw_fd(slave) };
    // SAFETY: openpty gave this test the descriptor; this File is its only owner.
    let mut master_file = unsafe { std::fs::File::from_raw_fd(master) };
    let mut child = s
        .sim_cmd("trn1", &["--output", "t.neff"])
        .env("NXCC_SIM_WORK_MS", "walrus_driver:700")
        .stdout(std::process::Stdio::piped())
        .stderr(slave_file)
        .spawn()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        // The master reads until the last slave handle closes (EIO).
        while let Ok(n) = master_file.read(&mut chunk) {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&buf).into_owned()
    });
    let status = child.wait().unwrap();
    assert!(status.success());
    let tty = reader.join().unwrap();
    assert!(tty.contains("\r\x1b[K[5/6] WalrusDriver"), "{tty:?}");
    assert!(
        tty.ends_with("\r\x1b[K"),
        "the status line is cleared at the end: {tty:?}"
    );
    // Through a pipe: no status line at all.
    let out = s.sim_cmd("trn1", &["--output", "u.neff"]).output().unwrap();
    assert!(!text(&out.stderr).contains("\x1b[K"));
}

#[test]
fn verify_and_simulate_jobs_and_the_goldens_jobs_nxcc_cannot_run() {
    let s = Scratch::new();
    let out = s.sim_run(
        "trn1",
        &[
            "--output",
            "v.neff",
            "--internal-tensorizer-opt-level",
            "nki",
            "--pipeline",
            "compile",
            "BIRVerifier",
            "BIRSim",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let passes: Vec<String> = s
        .records()
        .iter()
        .filter(|r| r["tool"] == "walrus_driver")
        .map(|r| {
            let argv = r["argv"].as_array().unwrap();
            argv[argv.iter().position(|a| a == "--pass").unwrap() + 1]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(passes.len(), 3, "{passes:?}");
    assert!(
        passes[0].ends_with(",birverifier,bir_sim"),
        "nki turns the simulator pass on: {}",
        passes[0]
    );
    assert_eq!(&passes[1..], ["birverifier", "bir_sim"]);
    for job in ["InferGoldens", "MetaInferGoldens"] {
        let out = s.run(&[
            "compile",
            "mlp.hlo_module.pb",
            "--target",
            "trn1",
            "--toolchain",
            "sim",
            "--pipeline",
            job,
        ]);
        assert_eq!(out.status.code(), Some(70));
        assert!(
            text(&out.stderr).contains(&format!(
                "[ERROR] [NCC_EDRV083] {job} is only available for non-XLA frameworks, which nxcc does not compile - Remove it from --pipeline."
            )),
            "{}",
            text(&out.stderr)
        );
    }
}

/// The `$ ...` command lines of a text dry run, in order.
fn dry_run_commands(s: &Scratch, args: &[&str]) -> Vec<String> {
    let mut a = args.to_vec();
    a.push("--dry-run");
    let out = s.run(&a);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("$ ").map(str::to_string))
        .collect()
}

/// The `Executing ...` lines of the log file, in order.
fn logged_commands(s: &Scratch) -> Vec<String> {
    std::fs::read_to_string(s.join("log-neuron-cc.txt"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once("]: Executing ").map(|(_, c)| c.to_string()))
        .collect()
}

#[test]
fn the_command_the_dry_run_prints_is_the_command_the_run_logs() {
    // Every job kind that runs a tool: the worked examples, the verifier and the simulator
    // (walrus_driver), the watchpoint tool, the Backend's shell, a model path that needs quoting.
    let mut examples: Vec<String> = WORKED_EXAMPLES_WITH_KELPER
        .iter()
        .map(|e| format!("compile mlp.hlo_module.pb --framework XLA {e}"))
        .collect();
    examples.extend(
        [
            "compile mlp.hlo_module.pb --target trn1 --internal-tensorizer-opt-level nki --pipeline compile BIRVerifier BIRSim",
            "compile mlp.hlo_module.pb --target trn1 --internal-compiler-debug-mode all --pipeline compile Watchpoint",
            "compile 'model with space.pb' --target trn2",
        ]
        .map(str::to_string),
    );
    let mut kinds = std::collections::BTreeSet::new();
    for (i, example) in examples.iter().enumerate() {
        let s = Scratch::new();
        std::fs::copy(s.join("mlp.hlo_module.pb"), s.join("model with space.pb")).unwrap();
        let line = format!("{example} --toolchain sim --output out{i}.neff");
        let args = shell_words::split(&line).unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let planned = dry_run_commands(&s, &args);
        let out = s.run(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{example}: {}",
            text(&out.stderr)
        );
        let logged: Vec<String> = logged_commands(&s)
            .iter()
            .map(|c| as_planned(&s, c))
            .collect();
        assert!(!planned.is_empty(), "{example}");
        assert_eq!(logged, planned, "{example}: the run logged other commands");
        for c in &planned {
            let words = shell_words::split(c).unwrap();
            kinds.insert(tool_name(&words[0]));
        }
        if example.contains("space") {
            assert!(planned[0].contains("'"), "{}", planned[0]);
        }
    }
    for tool in [
        "hlo2penguin",
        "xla_infergoldens",
        "walrus_driver",
        "hlo-neff-wrapper",
        "watchpoint_insert",
        "bash",
    ] {
        assert!(kinds.contains(tool), "no example ran {tool}: {kinds:?}");
    }
}

#[test]
fn a_compile_that_writes_no_neff_says_so_on_the_console() {
    for (flag, cause) in [
        ("-O3", "-O3 sets layer_unroll_factor=0"),
        (
            "--enable-internal-modular-compilation",
            "--enable-internal-modular-compilation",
        ),
        (
            "--enable-internal-bir-linker",
            "--enable-internal-bir-linker",
        ),
    ] {
        let s = Scratch::new();
        let out = s.sim_run("trn1", &["--output", "none.neff", flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        let stdout = text(&out.stdout);
        assert!(
            err.contains(&format!(
                " WARNING: {cause}: Backend, Kelper and NeffWrapper are not scheduled; no NEFF will be written"
            )),
            "{flag}: {err}"
        );
        // The warning comes before the jobs run; the end names what was produced instead.
        let work = s.work_dirs();
        assert_eq!(work.len(), 1, "{flag}: the work dir is kept");
        assert!(!s.join("none.neff").exists(), "{flag}");
        let last = stdout.lines().last().unwrap_or_default();
        assert!(
            last.ends_with(&format!(
                "No NEFF was written to {}; the compile's artifacts are in {}",
                s.join("none.neff").display(),
                work[0].display()
            )),
            "{flag}: {stdout}"
        );
        let log = std::fs::read_to_string(s.join("log-neuron-cc.txt")).unwrap();
        let warned = log.find("no NEFF will be written").unwrap();
        let first_job = log.find("Starting job").unwrap();
        assert!(warned < first_job, "{flag}: warned after the jobs started");
    }
}

#[test]
fn what_can_be_checked_is_checked_before_anything_is_created() {
    let s = Scratch::new();
    std::fs::create_dir(s.join("a-directory")).unwrap();
    std::fs::write(s.join("a-file"), b"x").unwrap();
    // (--toolchain, --output, what is said)
    for (toolchain, output, expected) in [
        (
            "/nonexistent",
            "o.neff",
            "[ERROR] [NCC_EDRV082] Could not find hlo2penguin: the toolchain directory /nonexistent does not exist - ",
        ),
        ("a-file", "o.neff", "is not a directory - "),
        ("a-directory", "o.neff", "a-directory/private or "),
        // A directory no file can be made in (procfs, even for root).
        (
            "sim",
            "/proc/o.neff",
            "[ERROR] [NCC_EDRV111] Cannot write the output /proc/o.neff: no file can be made in /proc: ",
        ),
        ("sim", "a-directory", "[ERROR] [NCC_EDRV111] Cannot write the output "),
        ("sim", "a-file/o.neff", "a-file is not a directory"),
    ] {
        let args = ["--toolchain", toolchain, "--output", output];
        let mut all = vec!["compile", "mlp.hlo_module.pb", "--target", "trn1"];
        all.extend(&args);
        let out = s.run(&all);
        assert_eq!(out.status.code(), Some(70), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(s.work_dirs().is_empty(), "{args:?}: a work dir was made");
        assert!(s.records().is_empty(), "{args:?}: a tool ran");
    }
    // The dry run says the same of the missing directory.
    let out = s.run(&[
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn1",
        "--toolchain",
        "/nonexistent",
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains(
        "HLOToTensorizer: tool hlo2penguin not found (the toolchain directory /nonexistent does not exist)"
    ));
}
