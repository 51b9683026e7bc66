//! `nxcc parallel-compile` through the built binary: learned memory estimates keep overlapping
//! compiles within the budget, the `[F137]` retry runs alone, failures and `--retries`, the JSON
//! report and the timeline, and the external-compiler engine with a script that behaves like a
//! compiler (`tests/data/fake-compiler.sh`).

mod common;

use std::path::{Path, PathBuf};

use common::{compile_spans, max_overlap, text, verifies, work_dir_of, Scratch};
use serde_json::Value;

const MODEL: &str = "mlp.hlo_module.pb";

fn fake_compiler() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake-compiler.sh")
}

/// `n` distinct copies of the example model in `dir`: each ends with its own unknown field
/// (number 1000, length-delimited), which a reader skips, so each is still the same module.
fn variants(s: &Scratch, dir: &str, n: usize) {
    std::fs::create_dir_all(s.join(dir)).unwrap();
    let base = std::fs::read(s.join(MODEL)).unwrap();
    for i in 0..n {
        let mut b = base.clone();
        let tag = format!("variant {dir} {i:02}");
        b.extend_from_slice(&[0xc2, 0x3e, tag.len() as u8]);
        b.extend_from_slice(tag.as_bytes());
        std::fs::write(s.join(&format!("{dir}/g{i:02}.pb")), b).unwrap();
    }
}

fn report(s: &Scratch, file: &str) -> Value {
    serde_json::from_slice(&std::fs::read(s.join(file)).unwrap()).unwrap()
}

#[test]
fn learned_estimates_keep_the_compiles_within_the_memory_budget() {
    let s = Scratch::new();
    // One compile teaches the cache what these arguments need: ~300 MiB.
    let o = s
        .sim_cmd("trn2", &["--cache_dir", "cache", "--output", "first.neff"])
        .env("NXCC_SIM_RSS_MB", "*:300")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::remove_file(s.record()).unwrap();
    variants(&s, "graphs", 12);
    let o = s
        .parallel_cmd(
            &[
                "graphs",
                "--memory-budget",
                "1G",
                "--jobs",
                "8",
                "--cache_dir",
                "cache",
                "--output-dir",
                "out",
                "--report",
                "report.json",
            ],
            &[],
        )
        .env("NXCC_SIM_RSS_MB", "*:300")
        .env("NXCC_SIM_WORK_MS", "*:40")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let r = report(&s, "report.json");
    assert_eq!(r["succeeded"], 12);
    // The table says what each estimate came from.
    let table = text(&o.stdout);
    assert!(
        table.lines().next().unwrap().contains("estimate MiB  from"),
        "{table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.contains("  similar  ")).count(),
        12,
        "{table}"
    );
    for c in r["compiles"].as_array().unwrap() {
        assert_eq!(c["estimate"]["basis"], "similar", "{c}");
        let est = c["estimate"]["bytes"].as_u64().unwrap();
        assert!((300 << 20..340 << 20).contains(&est), "{est}");
        assert!(c["peak_rss_kb"].as_u64().unwrap() >= 300 << 10);
        assert!(verifies(Path::new(c["output"].as_str().unwrap())));
    }
    let intervals = compile_spans(&s.records(), work_dir_of);
    assert_eq!(intervals.len(), 12);
    let overlap = max_overlap(&intervals);
    assert!(
        overlap <= 3,
        "{overlap} compiles overlapped within a 1G budget"
    );
    assert!(overlap >= 2, "the compiles did not run in parallel at all");
}

#[test]
fn a_compile_killed_by_sigkill_is_retried_alone() {
    let s = Scratch::new();
    variants(&s, "graphs", 3);
    let o = s
        .parallel_cmd(
            &[
                "graphs",
                "--jobs",
                "3",
                "--cache_dir",
                "cache",
                "--output-dir",
                "out",
                "--report",
                "report.json",
                "--timings",
                "timeline.html",
            ],
            &[],
        )
        .env("NXCC_SIM_FAULT", "walrus_driver:kill@first")
        .env("NXCC_SIM_WORK_MS", "*:30")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        text(&o.stderr).contains("alone after [F137]"),
        "{}",
        text(&o.stderr)
    );
    // Where the report and the timings page went is said.
    for (what, file) in [("report", "report.json"), ("timings page", "timeline.html")] {
        let said = format!("Wrote the {what} to {}\n", s.join(file).display());
        assert!(
            text(&o.stderr).contains(&said),
            "{said}: {}",
            text(&o.stderr)
        );
    }
    let r = report(&s, "report.json");
    let mut all: Vec<(f64, f64, bool)> = Vec::new();
    for c in r["compiles"].as_array().unwrap() {
        assert_eq!(c["status"], "ok");
        let attempts = c["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{c}");
        assert!(attempts[0]["error_lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l
                .as_str()
                .unwrap()
                .starts_with("[F137] neuronx-cc was forcibly killed")));
        assert_eq!(attempts[0]["alone"], false);
        assert_eq!(attempts[1]["alone"], true);
        assert_eq!(attempts[1]["exit_status"], 0);
        for a in attempts {
            all.push((
                a["start_s"].as_f64().unwrap(),
                a["end_s"].as_f64().unwrap(),
                a["alone"].as_bool().unwrap(),
            ));
        }
    }
    // Nothing else ran while a retry ran alone.
    for (i, (a0, a1, alone)) in all.iter().enumerate() {
        if !alone {
            continue;
        }
        for (j, (b0, b1, _)) in all.iter().enumerate() {
            if i != j {
                assert!(b1 <= a0 || b0 >= a1, "{:?} overlaps {:?}", all[j], all[i]);
            }
        }
    }
    let html = std::fs::read_to_string(s.join("timeline.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("slot 1") && html.contains("g00 (retry 1)"));
}

#[test]
fn failures_retries_exit_status_and_the_report() {
    let s = Scratch::new();
    variants(&s, "graphs", 2);
    let args = |retries: &str, report: &str| -> Vec<String> {
        [
            "parallel-compile",
            "graphs/g00.pb",
            "graphs/g01.pb",
            "fifo.pb",
            "--jobs",
            "2",
            "--retries",
            retries,
            "--cache_dir",
            "cache",
            "--output-dir",
            "out",
            "--report",
            report,
            "--",
            "--target",
            "trn2",
            "--toolchain",
            "sim",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let run = |a: Vec<String>, fault: &str| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        s.nxcc(&a).env("NXCC_SIM_FAULT", fault).output().unwrap()
    };
    // An input that is a FIFO fails at planning (a missing one is refused before the batch).
    let fifo = std::ffi::CString::new(s.join("fifo.pb").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    // The first run of walrus_driver per graph fails; no retries: those fail, and the FIFO
    // fails at planning.
    let o = run(args("0", "r0.json"), "walrus_driver:exit=3@first");
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let r = report(&s, "r0.json");
    assert_eq!(
        (r["succeeded"].as_u64(), r["failed"].as_u64()),
        (Some(0), Some(3))
    );
    assert_eq!(r["jobs"], 2);
    assert_eq!(r["engine"], "pipeline");
    let c = &r["compiles"][0];
    for field in [
        "input",
        "stem",
        "output",
        "log",
        "status",
        "exit_status",
        "cache",
        "estimate",
        "key",
        "wall_s",
        "peak_rss_kb",
        "error_lines",
        "attempts",
    ] {
        assert!(c.get(field).is_some(), "no {field} in {c}");
    }
    assert_eq!(c["status"], "failed");
    assert_eq!(c["exit_status"], 70);
    assert!(c["error_lines"][0]
        .as_str()
        .unwrap()
        .contains("Child process job \"WalrusDriver\" exited abnormally"));
    assert!(Path::new(c["log"].as_str().unwrap()).exists());
    let fifo = &r["compiles"][2];
    assert_eq!(fifo["status"], "failed");
    assert!(fifo["attempts"].as_array().unwrap().is_empty());
    assert!(fifo["error_lines"][0]
        .as_str()
        .unwrap()
        .starts_with("[ERROR]"));
    assert!(text(&o.stdout).contains("3 compiles: 0 succeeded, 3 failed"));

    // A remembered failure is not retried: the same batch fails at once, and says how to
    // compile it again, as a single compile does.
    remembered_failures(&s, &args, &run);

    // With fresh graphs, --retries 1 retries the failed first runs, which then succeed.
    variants(&s, "graphs2", 2);
    let mut a = args("1", "r2.json");
    a[1] = "graphs2".into();
    a.remove(2);
    a.remove(2);
    let o = run(a, "walrus_driver:exit=3@first");
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let r = report(&s, "r2.json");
    assert_eq!(r["succeeded"], 2);
    for c in r["compiles"].as_array().unwrap() {
        let attempts = c["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[0]["exit_status"], 70);
        assert_eq!(attempts[1]["alone"], false);
        assert!(verifies(Path::new(c["output"].as_str().unwrap())));
    }
}

/// The batch of `failures_retries_exit_status_and_the_report` run again (`args(retries,
/// report)`, `run(args, fault)`) on what the cache remembers as failed: not retried, said how to
/// compile again, and compiled again with `--retry_failed_compilation`.
fn remembered_failures(
    s: &Scratch,
    args: &dyn Fn(&str, &str) -> Vec<String>,
    run: &dyn Fn(Vec<String>, &str) -> std::process::Output,
) {
    let o = run(args("1", "r1.json"), "");
    assert_eq!(o.status.code(), Some(70));
    let err = text(&o.stderr);
    assert!(
        err.contains(
            "cache hit (a remembered failure: --retry_failed_compilation compiles it again)"
        ),
        "{err}"
    );
    assert!(
        err.contains("  a failure the cache remembers (nothing ran): add --retry_failed_compilation to the compile arguments (after --) to compile it again\n"),
        "{err}"
    );
    let r = report(s, "r1.json");
    assert_eq!(r["compiles"][0]["cache"], "hit");
    assert_eq!(r["compiles"][0]["attempts"].as_array().unwrap().len(), 1);
    // As the hint says: with --retry_failed_compilation after --, they compile again.
    let mut a = args("0", "r1b.json");
    a.push("--retry_failed_compilation".into());
    let o = run(a, "");
    assert_eq!(o.status.code(), Some(70), "the FIFO still fails");
    let r = report(s, "r1b.json");
    for c in &r["compiles"].as_array().unwrap()[..2] {
        assert_eq!(
            (c["status"].as_str(), c["cache"].as_str()),
            (Some("ok"), Some("miss")),
            "{c}"
        );
    }
}

#[test]
fn usage_errors_compile_nothing() {
    let s = Scratch::new();
    for (args, needle) in [
        (
            vec![
                "parallel-compile",
                MODEL,
                "missing.pb",
                "--",
                "--target",
                "trn2",
                "--toolchain",
                "sim",
            ],
            "argument INPUT: missing.pb: no such file or directory",
        ),
        (
            vec!["parallel-compile", MODEL, "--", "--toolchain", "sim"],
            "required: --target",
        ),
        (
            vec![
                "parallel-compile",
                MODEL,
                "--",
                "--target",
                "trn2",
                "--dry-run",
            ],
            "may not use --dry-run",
        ),
        (
            vec![
                "parallel-compile",
                MODEL,
                "--cache_dir",
                "gs://b/c",
                "--",
                "--target",
                "trn2",
            ],
            "remote compile caches are not supported",
        ),
        (
            vec![
                "parallel-compile",
                MODEL,
                "--jobs",
                "0",
                "--",
                "--target",
                "trn2",
            ],
            "must be at least 1",
        ),
        // Compile options before `--`: said, with where they go.
        (
            vec!["parallel-compile", MODEL, "--target", "trn2"],
            "\n--target is an option of the compile: put the compile arguments after `--` (nxcc parallel-compile INPUT... -- --target trn2 ...)\n",
        ),
    ] {
        let o = s.run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(needle),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    assert!(s.records().is_empty());
    // An error in the compile arguments is one line, not `compile`'s usage.
    let o = s.run(&["parallel-compile", MODEL, "--", "--toolchain", "sim"]);
    assert_eq!(
        text(&o.stderr),
        "nxcc parallel-compile: error: the compile arguments (after `--`): the following arguments are required: --target\n"
    );
}

/// The files of the shipped examples directory that are models (`*.pb`, `*.hlo`).
fn example_models() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pb" || x == "hlo"))
        .collect();
    v.sort();
    v
}

#[test]
fn the_examples_directory_compiles_every_file_to_its_own_neff() {
    let s = Scratch::new();
    let models = example_models();
    assert_eq!(
        models.len(),
        15,
        "the examples directory docs/parallel-compile.md speaks of"
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models");
    let o = s.parallel_run(
        &[
            dir.to_str().unwrap(),
            "--output-dir",
            "out",
            "--cache_dir",
            "cache",
            "--report",
            "report.json",
        ],
        &[],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let r = report(&s, "report.json");
    assert_eq!(r["succeeded"], 15, "{r}");
    let compiles = r["compiles"].as_array().unwrap();
    let inputs: Vec<PathBuf> = compiles
        .iter()
        .map(|c| PathBuf::from(c["input"].as_str().unwrap()))
        .collect();
    assert_eq!(inputs, models);
    let mut outputs: Vec<&str> = compiles
        .iter()
        .map(|c| c["output"].as_str().unwrap())
        .collect();
    for o in &outputs {
        assert!(verifies(Path::new(o)), "{o}");
    }
    outputs.sort();
    outputs.dedup();
    assert_eq!(outputs.len(), 15, "every input has its own NEFF");
    // The documented rule: a stem shared by a text and a binary twin gives way to the file
    // names; a stem of its own stays.
    let name_of = |file: &str| {
        compiles
            .iter()
            .find(|c| c["input"].as_str().unwrap().ends_with(&format!("/{file}")))
            .map(|c| c["stem"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(name_of("attention.hlo"), "attention.hlo");
    assert_eq!(
        name_of("attention.hlo_module.pb"),
        "attention.hlo_module.pb"
    );
    assert_eq!(name_of("tiny.hlo"), "tiny");
    assert!(s.join("out/attention.hlo.neff").is_file());
    assert!(s.join("out/attention.hlo_module.pb.log").is_file());
    assert!(
        s.work_dirs().is_empty(),
        "no work dir is left in the launch directory"
    );
}

#[test]
fn compiles_that_write_no_neff_are_reported_so_and_leave_their_work_in_the_output_dir() {
    let s = Scratch::new();
    variants(&s, "graphs", 2);
    let o = s.parallel_run(
        &[
            "graphs",
            "--output-dir",
            "out",
            "--no_cache",
            "--report",
            "report.json",
        ],
        &["-O3"],
    );
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(70), "{stdout}{stderr}");
    // Said before they run, in the table, in the summary, and after.
    assert!(
        stderr.starts_with("parallel-compile: warning: 2 of 2 compiles will write no NEFF (-O3 sets layer_unroll_factor=0"),
        "{stderr}"
    );
    assert_eq!(
        stdout.lines().filter(|l| l.contains("  no NEFF  ")).count(),
        2,
        "{stdout}"
    );
    assert!(
        stdout.contains("\n2 compiles: 0 succeeded, 0 failed, 2 wrote no NEFF; "),
        "{stdout}"
    );
    let r = report(&s, "report.json");
    assert_eq!(r["no_neff"], 2);
    for c in r["compiles"].as_array().unwrap() {
        assert_eq!(c["status"], "no_neff", "{c}");
        assert!(!Path::new(c["output"].as_str().unwrap()).exists());
        // What it made is kept, in the output directory.
        let work = PathBuf::from(c["work_dir"].as_str().unwrap());
        assert_eq!(work.parent(), Some(s.join("out").as_path()), "{c}");
        assert!(work.join("sg00").is_dir(), "{c}");
        assert!(stderr.contains(&format!("wrote no NEFF (-O3 sets layer_unroll_factor=0: Backend, Kelper and NeffWrapper are not scheduled; no NEFF will be written); what it made is in {}", work.display())), "{stderr}");
    }
    assert!(
        s.work_dirs().is_empty(),
        "a work dir was left in the launch directory"
    );
}

#[test]
fn a_budget_smaller_than_the_estimates_is_said_up_front() {
    let s = Scratch::new();
    variants(&s, "graphs", 3);
    let o = s.parallel_run(
        &[
            "graphs",
            "--memory-budget",
            "100M",
            "--jobs",
            "2",
            "--output-dir",
            "out",
            "--no_cache",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let stderr = text(&o.stderr);
    let first = stderr.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        "parallel-compile: warning: the memory budget of 100.0 MiB is smaller than the estimated peak of 3 of 3 compiles; each of them will run alone, with no other compile beside it:",
        "{stderr}"
    );
    for g in ["g00", "g01", "g02"] {
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&format!("  {g}  320.")) && l.ends_with(" MiB")),
            "{stderr}"
        );
    }
    // And so they did.
    let spans = compile_spans(&s.records(), work_dir_of);
    assert_eq!(spans.len(), 3);
    assert_eq!(max_overlap(&spans), 1);
    // A budget that holds them says nothing.
    let o = s.parallel_run(
        &[
            "graphs",
            "--memory-budget",
            "2G",
            "--output-dir",
            "out2",
            "--no_cache",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(!text(&o.stderr).contains("warning"), "{}", text(&o.stderr));
}

/// `parallel-compile INPUT` through the fake compiler (recording its runs in `record`), its
/// cache in `cache`, writing `OUT` and the report `REPORT` (`[input, report, out]`), with `env`.
fn run_external(
    s: &Scratch,
    record: &Path,
    [input, report, out]: [&str; 3],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut c = s.nxcc(&[
        "parallel-compile",
        input,
        "--compiler",
        fake_compiler().to_str().unwrap(),
        "--cache_dir",
        "cache",
        "--output-dir",
        out,
        "--report",
        report,
        "--",
        "--target",
        "trn2",
    ]);
    c.env("FAKE_COMPILER_RECORD", record);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn the_external_compiler_engine() {
    let s = Scratch::new();
    variants(&s, "graphs", 2);
    let record = s.join("fake-record.txt");
    let run = |input: &str, report: &str, out: &str, env: &[(&str, &str)]| {
        run_external(&s, &record, [input, report, out], env)
    };
    let runs = || {
        std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .count()
    };
    // Success: the compiler's output lands at <stem>.neff; its peak memory is measured.
    let o = run(
        "graphs",
        "r1.json",
        "out",
        &[("FAKE_COMPILER_HOLD_MB", "64")],
    );
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(runs(), 2);
    let r = report(&s, "r1.json");
    assert_eq!(r["engine"], "external");
    for c in r["compiles"].as_array().unwrap() {
        assert_eq!(c["cache"], "miss");
        assert!(c["peak_rss_kb"].as_u64().unwrap() >= 64 << 10, "{c}");
        let neff = std::fs::read_to_string(c["output"].as_str().unwrap()).unwrap();
        assert!(neff.starts_with("FAKE-NEFF 1\n"), "{neff}");
        let log = std::fs::read_to_string(c["log"].as_str().unwrap()).unwrap();
        assert!(
            log.contains("[job.ExternalCompiler.0]: Executing "),
            "{log}"
        );
        assert!(log.contains("Compiler status PASS"));
    }
    // No partial output is left beside the outputs.
    let names: Vec<String> = std::fs::read_dir(s.join("out"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");

    // The second run is served from the cache: the compiler does not run.
    let o = run("graphs", "r2.json", "out2", &[]);
    assert!(o.status.success());
    assert_eq!(runs(), 2);
    let r = report(&s, "r2.json");
    assert!(r["compiles"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["cache"] == "hit"));
    assert_eq!(
        std::fs::read(s.join("out2/g00.neff")).unwrap(),
        std::fs::read(s.join("out/g00.neff")).unwrap()
    );
}

#[test]
fn the_external_compiler_engine_reports_a_crash_and_retries_a_kill_alone() {
    let s = Scratch::new();
    let record = s.join("fake-record.txt");
    let run = |input: &str, report: &str, out: &str, env: &[(&str, &str)]| {
        run_external(&s, &record, [input, report, out], env)
    };
    // A crash is reported with the F-code banner; a SIGKILL is retried alone first.
    variants(&s, "crashing", 1);
    let o = run(
        "crashing",
        "r3.json",
        "out3",
        &[("FAKE_COMPILER_CRASH", "segv")],
    );
    assert_eq!(o.status.code(), Some(70));
    let r = report(&s, "r3.json");
    let lines: Vec<&str> = r["compiles"][0]["error_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(lines[0].starts_with("[ERROR] Child process job \"ExternalCompiler\" exited abnormally! Killed by signal 11 (SIGSEGV)."), "{lines:?}");
    assert!(lines
        .iter()
        .any(|l| l.starts_with("[F139] neuronx-cc terminated abnormally")));
    assert!(lines.iter().any(|l| l.contains("fake-compiler: crashing")));
    assert!(!s.join("out3/g00.neff").exists());

    variants(&s, "killed", 1);
    let o = run(
        "killed",
        "r4.json",
        "out4",
        &[("FAKE_COMPILER_CRASH", "kill")],
    );
    assert_eq!(o.status.code(), Some(70));
    let r = report(&s, "r4.json");
    let c = &r["compiles"][0];
    assert_eq!(c["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(c["attempts"][1]["alone"], true);
    assert!(c["error_lines"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l.as_str().unwrap().starts_with("[F137] ")));
}

#[test]
fn the_external_compiler_engine_refuses_a_compiler_that_writes_nothing_or_cannot_run() {
    let s = Scratch::new();
    // A compiler that succeeds without writing its output, and one that cannot be run.
    variants(&s, "odd", 1);
    for (compiler, needle) in [
        (
            "/bin/true",
            "[ERROR] [NCC_EDRV112] The compiler succeeded but its output ",
        ),
        (
            "/no/such/compiler",
            "[ERROR] [NCC_EDRV082] Could not run the compiler: ",
        ),
    ] {
        let o = s
            .nxcc(&[
                "parallel-compile",
                "odd",
                "--compiler",
                compiler,
                "--no_cache",
                "--output-dir",
                "out5",
                "--report",
                "r5.json",
                "--",
                "--target",
                "trn2",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(70), "{compiler}");
        let r = report(&s, "r5.json");
        let line = r["compiles"][0]["error_lines"][0]
            .as_str()
            .unwrap()
            .to_string();
        assert!(line.starts_with(needle), "{compiler}: {line}");
        assert!(!s.join("out5/g00.neff").exists());
    }
}

/// A failure report with what legitimately differs between engines made uniform: the job's name,
/// the stderr tail (the simulated tool and the script print different words, or none), the
/// figures of the memory line.
fn report_shape(lines: &[Value], job: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in lines {
        let l = l.as_str().unwrap().replace(job, "<job>");
        let shaped = if l.starts_with("  ")
            || (l.starts_with("Last ") && l.ends_with(" lines of the tool's stderr:"))
        {
            continue;
        } else if l.starts_with("Current memory usage for neuronxcc is ") {
            l.chars()
                .map(|c| if c.is_ascii_digit() { 'N' } else { c })
                .collect::<String>()
                .split("NN")
                .collect::<Vec<_>>()
                .join("N")
        } else {
            l
        };
        if out.last() != Some(&shaped) {
            out.push(shaped);
        }
    }
    out
}

#[test]
fn each_kind_of_failure_is_reported_alike_by_the_pipeline_and_the_external_engine() {
    let s = Scratch::new();
    let compiler = fake_compiler();
    // (sim fault of walrus_driver, fake compiler crash, extra compile arguments)
    let kinds = [
        ("walrus_driver:exit=3", "exit=3", None),
        ("walrus_driver:exit=137", "exit=137", None),
        ("walrus_driver:segv", "segv", None),
        ("walrus_driver:abort", "abort", None),
        ("walrus_driver:kill", "kill", None),
        ("walrus_driver:hang", "", Some("1")),
    ];
    for (i, (fault, crash, timeout)) in kinds.iter().enumerate() {
        let dir = format!("k{i}");
        variants(&s, &dir, 1);
        let mut reports = Vec::new();
        for engine in ["pipeline", "external"] {
            let file = format!("r-{i}-{engine}.json");
            let out_dir = format!("out-{i}-{engine}");
            let mut args = vec![
                "parallel-compile",
                dir.as_str(),
                "--no_cache",
                "--output-dir",
                out_dir.as_str(),
                "--report",
                file.as_str(),
            ];
            let compiler_arg = compiler.to_str().unwrap();
            if engine == "external" {
                args.extend(["--compiler", compiler_arg]);
            }
            args.extend(["--", "--target", "trn2", "--toolchain", "sim"]);
            if let Some(t) = timeout {
                args.extend(["--job-timeout", t]);
            }
            let mut c = s.nxcc(&args);
            if engine == "pipeline" {
                c.env("NXCC_SIM_FAULT", fault);
            } else if crash.is_empty() {
                c.env("FAKE_COMPILER_SLEEP", "100");
            } else {
                c.env("FAKE_COMPILER_CRASH", crash);
            }
            let o = c.output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(70),
                "{fault} {engine}: {}",
                text(&o.stderr)
            );
            let r = report(&s, &file);
            let job = if engine == "pipeline" {
                "WalrusDriver"
            } else {
                "ExternalCompiler"
            };
            let lines = r["compiles"][0]["error_lines"].as_array().unwrap().clone();
            reports.push(report_shape(&lines, job));
        }
        assert_eq!(
            reports[0], reports[1],
            "{fault}: the engines report differently"
        );
        let expected_first = match *crash {
            "" => "[ERROR] Job <job> timed out after 1 s",
            "exit=3" => "[ERROR] Child process job \"<job>\" exited abnormally! Exit status 3.",
            "exit=137" => "[ERROR] Child process job \"<job>\" exited abnormally! Exit status 137.",
            "segv" => "[ERROR] Child process job \"<job>\" exited abnormally! Killed by signal 11 (SIGSEGV).",
            "abort" => "[ERROR] Child process job \"<job>\" exited abnormally! Killed by signal 6 (SIGABRT).",
            _ => "[ERROR] Child process job \"<job>\" exited abnormally! Killed by signal 9 (SIGKILL).",
        };
        assert_eq!(reports[0][0], expected_first, "{fault}");
        let banner = match *crash {
            "exit=137" | "kill" => Some("[F137] "),
            "segv" => Some("[F139] "),
            "abort" => Some("[F134] "),
            _ => None,
        };
        if let Some(b) = banner {
            assert!(
                reports[0].iter().any(|l| l.starts_with(b)),
                "{fault}: {:?}",
                reports[0]
            );
        }
        if banner == Some("[F137] ") {
            assert!(
                reports[0].iter().any(|l| l.starts_with(
                    "Current memory usage for neuronxcc is N MB; peak of its children N MB"
                )),
                "{fault}: {:?}",
                reports[0]
            );
        }
    }
}

/// `--timings` alone writes `nxcc-timings.html` in the launch directory, as `compile --timings`
/// does; `--timings FILE` and `--timings=FILE` still name the page; a model written after a plain
/// `--timings` is refused as its FILE (exit 2, nothing compiled), never overwritten.
#[test]
fn timings_alone_writes_the_default_page_and_never_takes_a_model_for_it() {
    let s = Scratch::new();
    variants(&s, "graphs", 2);
    let page = s.join("nxcc-timings.html");
    let o = s.parallel_run(
        &[
            "graphs",
            "--cache_dir",
            "cache",
            "--output-dir",
            "out",
            "--timings",
        ],
        &[],
    );
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("nxcc parallel-compile (2 compiles)"),
        "{html}"
    );
    // Where it went is said, as compile --timings says it.
    assert!(
        text(&o.stderr).contains(&format!("Wrote the timings page to {}\n", page.display())),
        "{}",
        text(&o.stderr)
    );
    for (args, file) in [
        (&["--timings", "t1.html", "graphs"][..], "t1.html"),
        (&["graphs", "--timings=t2.html"][..], "t2.html"),
    ] {
        let mut all = args.to_vec();
        all.extend(["--cache_dir", "cache", "--output-dir", "out"]);
        let o = s.parallel_run(&all, &[]);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        assert!(s.join(file).is_file(), "{args:?}");
    }
    let before = std::fs::read(s.join("graphs/g00.pb")).unwrap();
    for word in ["graphs/g00.pb", "graphs"] {
        let o = s.parallel_run(&["--timings", word, "--output-dir", "refused"], &[]);
        assert_eq!(o.status.code(), Some(2), "{word}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(&format!(
                "argument --timings: {word:?} is an INPUT, not the page to write"
            )),
            "{}",
            text(&o.stderr)
        );
        assert!(!s.join("refused").exists(), "nothing compiled");
    }
    assert_eq!(std::fs::read(s.join("graphs/g00.pb")).unwrap(), before);
}

#[test]
fn a_memory_budget_without_its_unit_or_of_zero_is_a_usage_error_naming_the_units() {
    let dir = tempfile::tempdir().unwrap();
    for budget in ["100", "0", "1K"] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_nxcc"))
            .args(["parallel-compile", "--memory-budget", budget, "x.pb"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{budget}: {err}");
        assert!(
            err.contains("'--memory-budget <SIZE>': ")
                && err.contains("below the smallest budget (64M)")
                && err.contains("K, M, G or T"),
            "{budget}: {err}"
        );
    }
}

#[test]
fn an_interrupted_batch_names_the_work_directories_it_leaves() {
    let s = Scratch::new();
    variants(&s, "graphs", 2);
    let child = s
        .nxcc(&[
            "parallel-compile",
            "graphs",
            "--jobs",
            "2",
            "--no_cache",
            "--output-dir",
            "out",
            "--",
            "--target",
            "trn2",
            "--toolchain",
            "sim",
        ])
        .env("NXCC_SIM_WAIT_MS", "walrus_driver:600000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Both compiles are past their Frontend, at walrus_driver (the event), then Ctrl-C.
    let at_walrus = || -> usize {
        std::fs::read_dir(s.join("out"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().join("sg00/bir.json").is_file())
                    .count()
            })
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while at_walrus() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the compiles never reached walrus_driver"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: kill(2) of our own child, which has not been waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let left = common::items_named(&s.join("out"), "neuronxcc-");
    // Whatever is left is named in the summary.
    for d in &left {
        assert!(
            err.contains(&d.display().to_string()),
            "{} not named:\n{err}",
            d.display()
        );
    }
    // An interrupted compile keeps what it made, as `nxcc compile` does: both, named.
    assert_eq!(left.len(), 2, "{left:?}\n{err}");
    assert_eq!(
        err.matches(" was interrupted; what it made is in ").count(),
        2,
        "{err}"
    );
}

/// `cmd` run with stdout and stderr on a terminal (`script` gives it a pty): what the terminal
/// showed. Fails, saying so, without `script`.
fn on_a_terminal(cmd: &std::process::Command) -> String {
    let has_script = std::process::Command::new("sh")
        .args(["-c", "command -v script"])
        .output()
        .unwrap()
        .status
        .success();
    assert!(has_script, "this test needs `script` (util-linux) on PATH");
    let words: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|w| shell_words::quote(&w.to_string_lossy()).into_owned())
        .collect();
    let mut c = std::process::Command::new("script");
    c.args(["-qec", &words.join(" "), "/dev/null"])
        .current_dir(cmd.get_current_dir().unwrap())
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stdout));
    text(&o.stdout)
}

#[test]
fn on_a_terminal_progress_names_the_running_graphs_and_an_eta() {
    let s = Scratch::new();
    variants(&s, "graphs", 3);
    let mut cmd = s.parallel_cmd(&["graphs", "--jobs", "2", "--output-dir", "out"], &[]);
    cmd.env("NXCC_SIM_WAIT_MS", "hlo2penguin:1200");
    let shown = on_a_terminal(&cmd);
    // The live line, redrawn in place: the running graphs with their time, then an estimate once
    // a compile has ended.
    assert!(
        shown.contains("\r\x1b[Kparallel-compile: 0/3 done, "),
        "{shown:?}"
    );
    assert!(
        shown.contains(" | g00 ") || shown.contains(" | g01 ") || shown.contains(" | g02 "),
        "{shown:?}"
    );
    assert!(shown.contains(", ETA "), "{shown:?}");
    assert!(
        !shown.contains("[1/3]"),
        "no plain lines on a terminal: {shown:?}"
    );
    // The table's heading is bold on a terminal.
    assert!(shown.contains("\x1b[1minput "), "{shown:?}");
}

#[test]
fn json_prints_the_report_instead_of_the_table_and_a_pipe_gets_plain_lines() {
    let s = Scratch::new();
    variants(&s, "graphs", 3);
    let o = s.parallel_run(
        &[
            "graphs",
            "--jobs",
            "2",
            "--output-dir",
            "out",
            "--json",
            "--report",
            "r.json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let printed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(printed, report(&s, "r.json"), "the same report as --report");
    assert_eq!(printed["succeeded"], 3);
    let stems: Vec<&str> = printed["compiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["input"].as_str().unwrap())
        .collect();
    assert_eq!(stems.len(), 3, "{printed}");
    // Not a terminal: one plain line per compile, nothing redrawn, no colour.
    let err = text(&o.stderr);
    assert_eq!(
        err.lines().filter(|l| l.starts_with('[')).count(),
        3,
        "{err}"
    );
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
}
