//! The HLO reader and `nxcc hlo-info`: the example zoo against what each JAX program defines
//! (`examples/models/zoo.json`, written by `make_models.py` from the programs, not from nxcc), HLO
//! text and proto of the same module agreeing, the committed corpus of refused inputs
//! (`tests/data/hlo-corpus/`), compiles of the zoo whose NEFFs list exactly the model's inputs and
//! outputs, garbage refused by a compile, and property tests over arbitrary bytes.

mod common;

use std::path::{Path, PathBuf};

use nxcc::hlo::{self, ReadError};
use proptest::prelude::*;
use serde_json::Value;

use common::{text, Scratch};

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models")
}

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/hlo-corpus")
        .join(name)
}

/// `zoo.json`: stem → what the program defines.
fn zoo() -> Vec<(String, Value)> {
    let v: Value =
        serde_json::from_slice(&std::fs::read(models().join("zoo.json")).unwrap()).unwrap();
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn hlo_info(args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::NXCC)
        .arg("hlo-info")
        .args(args)
        .output()
        .unwrap()
}

/// (dtype, shape, bytes) of each tensor of a JSON list.
fn signature(list: &Value) -> Vec<(String, Value, u64)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["dtype"].as_str().unwrap().to_string(),
                t["shape"].clone(),
                t["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn hlo_info_matches_what_each_zoo_program_defines() {
    let zoo = zoo();
    assert!(zoo.len() >= 7, "the zoo has its seven models");
    for (stem, want) in &zoo {
        for form in ["hlo_module.pb", "hlo"] {
            let file = models().join(format!("{stem}.{form}"));
            let out = hlo_info(&["--json", file.to_str().unwrap()]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{stem}.{form}: {}",
                text(&out.stderr)
            );
            let got: Value = serde_json::from_slice(&out.stdout).unwrap();
            let what = format!("{stem}.{form}");
            assert_eq!(got["module"], want["module"], "{what}");
            assert_eq!(
                signature(&got["parameters"]),
                signature(&want["parameters"]),
                "{what}"
            );
            assert_eq!(
                signature(&got["results"]),
                signature(&want["results"]),
                "{what}"
            );
            assert_eq!(got["parameter_bytes"], want["parameter_bytes"], "{what}");
            assert_eq!(got["result_bytes"], want["result_bytes"], "{what}");
            assert_eq!(
                got["file_size"].as_u64().unwrap(),
                std::fs::metadata(&file).unwrap().len()
            );
            // Parameters are numbered 0..n in order.
            for (i, p) in got["parameters"].as_array().unwrap().iter().enumerate() {
                assert_eq!(p["number"], i, "{what}");
            }
            // The histogram counts every instruction; the entry computation is one of them.
            let ops: u64 = got["opcodes"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .sum();
            assert_eq!(ops, got["instruction_count"].as_u64().unwrap(), "{what}");
            assert!(
                got["opcodes"]["parameter"].as_u64().unwrap() as usize
                    >= want["parameters"].as_array().unwrap().len(),
                "{what}"
            );
            let entries: Vec<&Value> = got["computations"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["entry"] == true)
                .collect();
            assert_eq!(entries.len(), 1, "{what}");
            assert_eq!(entries[0]["name"], got["entry_computation"], "{what}");
        }
    }
}

#[test]
fn the_zoo_holds_what_its_programs_are_about() {
    // Opcodes that make each model what it is, from the JAX programs.
    let ops = |stem: &str| -> Value {
        let out = hlo_info(&[
            "--json",
            models()
                .join(format!("{stem}.hlo_module.pb"))
                .to_str()
                .unwrap(),
        ]);
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert!(ops("matmul")["opcodes"]["dot"].as_u64() >= Some(1));
    assert!(ops("conv")["opcodes"]["convolution"].as_u64() >= Some(1));
    let attention = ops("attention");
    assert!(
        attention["opcodes"]["dot"].as_u64() >= Some(5),
        "q, k, v, scores, out: {attention}"
    );
    assert!(attention["opcodes"]["exponential"].as_u64() >= Some(1));
    let many = ops("many_params");
    assert_eq!(many["parameters"].as_array().unwrap().len(), 48);
    assert_eq!(many["results"].as_array().unwrap().len(), 2);
    // The big model's weight is a 4 MiB constant: its largest tensor, and most of the file.
    let big = ops("big");
    assert_eq!(big["largest_tensors"][0]["bytes"], 4 << 20);
    assert_eq!(
        big["largest_tensors"][0]["shape"],
        serde_json::json!([1024, 1024])
    );
    assert!(big["file_size"].as_u64().unwrap() > 4 << 20);
    // The binary form carries each instruction's metadata: the framework op behind a tensor.
    let op = big["largest_tensors"][1]["op_name"].as_str().unwrap();
    assert!(op.contains("dot_general") || op.contains("tanh"), "{big}");
}

#[test]
fn hlo_info_text_lists_parameters_results_and_opcodes() {
    let out = hlo_info(&[models().join("mlp.hlo_module.pb").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let t = text(&out.stdout);
    assert!(t.starts_with("module       jit_layer (HLO proto, "), "{t}");
    assert!(t.contains("parameters (3, 2688 bytes):"), "{t}");
    assert!(
        t.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
            == ["1", "w.1", "f32[16,32]", "2048", "bytes"]),
        "{t}"
    );
    assert!(t.contains("results (1, 1024 bytes):"), "{t}");
    assert!(t.contains("ENTRY main.1  10"), "{t}");
    assert!(t.contains("largest tensors:"), "{t}");
    // A usage error names what is missing.
    let out = hlo_info(&[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("the following required arguments were not provided:\n  <MODEL>"),
        "{err}"
    );
}

#[test]
fn text_and_proto_of_the_same_module_agree() {
    for (stem, _) in zoo() {
        let p = hlo::read(&models().join(format!("{stem}.hlo_module.pb"))).unwrap();
        let t = hlo::read(&models().join(format!("{stem}.hlo"))).unwrap();
        assert_eq!((p.format, t.format), ("proto", "text"));
        assert_eq!(p.name, t.name, "{stem}");
        assert_eq!(p.entry, t.entry, "{stem}");
        assert_eq!(p.parameters, t.parameters, "{stem}");
        assert_eq!(p.results, t.results, "{stem}");
        assert_eq!(p.instruction_count, t.instruction_count, "{stem}");
        assert_eq!(p.opcodes, t.opcodes, "{stem}");
        assert_eq!(p.computations, t.computations, "{stem}");
        assert_eq!(p.aliases, t.aliases, "{stem}");
        let sizes = |m: &hlo::Module| {
            m.largest
                .iter()
                .map(|x| x.tensor.bytes())
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(&p), sizes(&t), "{stem}");
    }
}

/// Each committed corpus file and the message it is refused with.
const REFUSED: &[(&str, &str)] = &[
    ("empty.pb", "not an HLO module: the file is empty"),
    (
        "truncated.hlo_module.pb",
        "not an HloModuleProto: field 3 at byte ",
    ),
    (
        "length-past-end.pb",
        "not an HLO module (not an HloModuleProto: field 3 at byte 3 runs past the end (computations)).",
    ),
    (
        "wrong-wire-type.pb",
        "not an HloModuleProto: field 1 at byte 0 has wire type 0, not 2 (a string) (name)",
    ),
    (
        "zero-field.pb",
        "field 0 at byte 0 has the invalid field number 0",
    ),
    ("garbage.pb", "not an HLO module (not an HloModuleProto: "),
    (
        "deep-tuple.pb",
        "nests too deeply (host_program_shape[0].result[0].tuple_shapes[0]",
    ),
    ("no-computations.pb", "it has no computations"),
    (
        "no-entry.pb",
        "no entry computation: no computation has the entry computation id 7",
    ),
    ("not-utf8.hlo", "HLO text does not parse: line 2: not UTF-8"),
    (
        "bad-instruction.hlo",
        "HLO text does not parse: line 5: expected an instruction",
    ),
    (
        "unclosed.hlo",
        "HLO text does not parse: line 3: the computation e is not closed",
    ),
    ("no-entry.hlo", "no ENTRY computation"),
];

#[test]
fn the_corpus_is_refused_with_messages_that_say_where() {
    let listed: Vec<&str> = REFUSED.iter().map(|(f, _)| *f).collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(corpus(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(
        on_disk, sorted,
        "every corpus file has its expected message"
    );
    for (file, want) in REFUSED {
        let path = corpus(file);
        let e = hlo::read(&path).unwrap_err();
        let m = e.render(&path);
        assert!(m.starts_with(&format!("{}: ", path.display())), "{m}");
        assert!(m.contains(want), "{file}: {m}");
        let out = hlo_info(&[path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{file}");
        let err = text(&out.stderr);
        assert!(err.contains(want), "{file}: {err}");
        assert!(out.stdout.is_empty());
        assert!(!err.contains("panicked"));
    }
    // The truncated file names the computation it cut through.
    let m = hlo::read(&corpus("truncated.hlo_module.pb"))
        .unwrap_err()
        .render(Path::new("model.pb"));
    assert!(m.contains("runs past the end"), "{m}");
    // A directory and a missing file are read errors.
    assert!(matches!(hlo::read(&models()), Err(ReadError::Io(_))));
    let out = hlo_info(&["/nonexistent/model.pb"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot read"));
}

/// A compile of `model` (in the scratch dir) to `out.neff`.
fn compile(s: &Scratch, model: &str) -> std::process::Output {
    s.run(&[
        "compile",
        model,
        "--framework",
        "XLA",
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--output",
        "out.neff",
    ])
}

#[test]
fn the_neff_of_each_zoo_model_lists_exactly_its_inputs_and_outputs() {
    for (stem, want) in zoo() {
        let s = Scratch::new();
        let file = format!("{stem}.hlo_module.pb");
        std::fs::copy(models().join(&file), s.join(&file)).unwrap();
        let out = compile(&s, &file);
        assert_eq!(out.status.code(), Some(0), "{stem}: {}", text(&out.stderr));
        let neff = nxcc::neff::read::Neff::open(&s.join("out.neff")).unwrap();
        assert!(nxcc::neff::verify::verify(&neff).is_ok(), "{stem}");
        let def: Value =
            serde_json::from_slice(&neff.read_member("sg00/def.json").unwrap()).unwrap();
        let map: Value =
            serde_json::from_slice(&neff.read_member("sg00/tensor_map.json").unwrap()).unwrap();
        for doc in [&def, &map] {
            assert_eq!(
                signature(&doc["inputs"]),
                signature(&want["parameters"]),
                "{stem}"
            );
            assert_eq!(
                signature(&doc["outputs"]),
                signature(&want["results"]),
                "{stem}"
            );
        }
        // The names are the module's own parameter names.
        let m = hlo::read(&models().join(&file)).unwrap();
        let names = |l: &Value| -> Vec<String> {
            l.as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect()
        };
        let want_names: Vec<String> = m.parameters.iter().map(|t| t.name.clone()).collect();
        assert_eq!(names(&def["inputs"]), want_names, "{stem}");
    }
}

#[test]
fn three_inputs_of_known_shapes_give_a_neff_that_says_so() {
    let s = Scratch::new();
    std::fs::write(
        s.join("three.hlo"),
        "HloModule three\n\nENTRY main {\n  a = f32[2,3]{1,0} parameter(0)\n  b = bf16[7]{0} parameter(1)\n  c = s32[4,5,6]{2,1,0} parameter(2)\n  ROOT r = f32[2,3]{1,0} negate(a)\n}\n",
    )
    .unwrap();
    let out = compile(&s, "three.hlo");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let neff = nxcc::neff::read::Neff::open(&s.join("out.neff")).unwrap();
    let def: Value = serde_json::from_slice(&neff.read_member("sg00/def.json").unwrap()).unwrap();
    assert_eq!(
        def["inputs"],
        serde_json::json!([
            {"name": "a", "dtype": "f32", "shape": [2, 3], "bytes": 24},
            {"name": "b", "dtype": "bf16", "shape": [7], "bytes": 14},
            {"name": "c", "dtype": "s32", "shape": [4, 5, 6], "bytes": 480},
        ])
    );
    assert_eq!(
        def["outputs"],
        serde_json::json!([{"name": "r", "dtype": "f32", "shape": [2, 3], "bytes": 24}])
    );
}

#[test]
fn garbage_truncated_and_empty_models_fail_the_compile_at_hlo_to_tensorizer() {
    for file in [
        "garbage.pb",
        "truncated.hlo_module.pb",
        "empty.pb",
        "bad-instruction.hlo",
    ] {
        let s = Scratch::new();
        std::fs::copy(corpus(file), s.join(file)).unwrap();
        let out = compile(&s, file);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{file}: {err}");
        assert!(!s.join("out.neff").exists(), "{file}: no NEFF");
        assert!(err.contains("HLOToTensorizer"), "{file}: {err}");
        let want = REFUSED.iter().find(|(f, _)| f == &file).unwrap().1;
        let shown = if file == "empty.pb" { "is empty" } else { want };
        assert!(err.contains(shown), "{file}: {err}");
        // Nothing after the frontend's first tool ran.
        let tools: Vec<String> = s
            .records()
            .iter()
            .map(|r| r["tool"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(tools, ["hlo2penguin"], "{file}");
    }
}

/// Files that are not HLO modules, each as a user might hand one over, and what the message says
/// it looks like.
fn not_hlo_files() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let mut tar = vec![0u8; 1024];
    tar[..9].copy_from_slice(b"model.pb\0");
    tar[257..263].copy_from_slice(b"ustar\0");
    // A NEFF's header: its format version, then the header size (1024).
    let mut neff = vec![0u8; 2048];
    neff[0] = 2;
    neff[8..16].copy_from_slice(&1024u64.to_le_bytes());
    vec![
        (
            "model.zip",
            b"PK\x03\x04\x14\x00\x00\x00\x08\x00".to_vec(),
            "it looks like a zip archive",
        ),
        ("model.tar", tar, "it looks like a tar archive"),
        (
            "model.pb.gz",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03".to_vec(),
            "it looks like a gzip-compressed file",
        ),
        (
            "model.json",
            b"{\"module\": \"jit_f\", \"ops\": []}\n".to_vec(),
            "it looks like a JSON document",
        ),
        (
            "model.txt",
            b"the weights are elsewhere\n".to_vec(),
            "it looks like a text file",
        ),
        (
            "model.mlir",
            b"module @jit_f {\n  func.func public @main() {\n    return\n  }\n}\n".to_vec(),
            "it looks like MLIR text",
        ),
        (
            "model.neff",
            neff,
            "a NEFF (a compiled model), not an HLO module",
        ),
        (
            "model.pb",
            Vec::new(),
            "not an HLO module: the file is empty",
        ),
    ]
}

#[test]
fn a_file_that_is_not_hlo_is_named_for_what_it_is_by_hlo_info_the_dry_run_and_the_compile() {
    let reads = "nxcc reads an HLO module: a binary HloModuleProto";
    for (name, bytes, looks) in not_hlo_files() {
        let s = Scratch::new();
        std::fs::write(s.join(name), &bytes).unwrap();
        let full = s.join(name).display().to_string();
        // hlo-info: the message, exit 1.
        let out = hlo_info(&[&full]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(
            err.contains(&format!("{full}: ")) && err.contains(looks),
            "{name}: {err}"
        );
        if !name.ends_with(".neff") {
            assert!(err.contains(reads), "{name}: {err}");
            assert!(
                !err.contains("wire type"),
                "{name}: no protobuf jargon: {err}"
            );
        }
        // The dry run: the graph line says the same.
        let out = s.run(&[
            "compile",
            name,
            "--target",
            "trn2",
            "--toolchain",
            "sim",
            "--dry-run",
        ]);
        let dry = text(&out.stdout);
        let graph = dry
            .lines()
            .find(|l| l.starts_with("graph "))
            .unwrap_or_default();
        assert!(
            graph.contains("cannot be read") && graph.contains(looks),
            "{name}: {dry}"
        );
        // The compile: the frontend's first tool refuses it with the same words.
        let out = compile(&s, name);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{name}: {err}");
        assert!(err.contains("HLOToTensorizer"), "{name}: {err}");
        let shown = if bytes.is_empty() { "is empty" } else { looks };
        assert!(err.contains(shown), "{name}: {err}");
        assert!(!s.join("out.neff").exists(), "{name}");
    }
}

fn check_outcome(bytes: &[u8]) {
    match hlo::parse(bytes) {
        Ok(m) => {
            // A module that reads has its entry computation among its computations.
            assert!(m
                .computations
                .iter()
                .any(|c| c.is_entry && c.name == m.entry));
        }
        Err(e) => {
            let msg = e.render(Path::new("m"));
            assert!(msg.starts_with("m: "), "{msg}");
        }
    }
}

/// Whether prost decodes the bytes; the wire walk finds a problem exactly when it does not.
fn walker_agrees_with_prost(bytes: &[u8]) {
    let prost_ok = hlo::proto::decodes(bytes).is_ok();
    let problem = hlo::wire::locate(bytes, &hlo::proto::MODULE);
    assert_eq!(prost_ok, problem.is_none(), "{problem:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_bytes_read_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check_outcome(&bytes);
        walker_agrees_with_prost(&bytes);
    }

    #[test]
    fn any_text_after_the_header_reads_or_is_refused(tail in ".{0,600}") {
        check_outcome(format!("HloModule m\n{tail}").as_bytes());
    }

    #[test]
    fn a_truncated_or_altered_module_reads_or_is_refused(
        cut in 0usize..4250,
        at in 0usize..4250,
        byte in any::<u8>(),
    ) {
        for stem in ["mlp", "attention", "conv"] {
            let pb = std::fs::read(models().join(format!("{stem}.hlo_module.pb"))).unwrap();
            let cut = cut % (pb.len() + 1);
            check_outcome(&pb[..cut]);
            walker_agrees_with_prost(&pb[..cut]);
            let mut altered = pb.clone();
            let at = at % pb.len();
            altered[at] = byte;
            check_outcome(&altered);
            walker_agrees_with_prost(&altered);
            let text = std::fs::read(models().join(format!("{stem}.hlo"))).unwrap();
            check_outcome(&text[..cut % (text.len() + 1)]);
            let mut t = text.clone();
            t[at % text.len()] = byte;
            check_outcome(&t);
        }
    }
}

#[test]
fn the_dry_run_shows_the_graph_and_the_estimate_it_came_from() {
    let s = Scratch::new();
    std::fs::copy(models().join("big.hlo_module.pb"), s.join("big.pb")).unwrap();
    std::fs::copy(corpus("garbage.pb"), s.join("garbage.pb")).unwrap();
    let dry = |model: &str, extra: &[&str]| -> Value {
        let mut args = vec!["compile", model, "--target", "trn2", "--toolchain", "sim"];
        args.extend(extra);
        args.push("--dry-run=json");
        let out = s.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let j = dry("big.pb", &[]);
    let g = &j["model_graph"];
    assert_eq!(
        g["summary"],
        "jit_big: 1 parameter (32.0 KiB) → 1 result (32.0 KiB), 4 instructions in 1 computation"
    );
    assert_eq!(
        (g["parameter_bytes"].as_u64(), g["result_bytes"].as_u64()),
        (Some(32768), Some(32768))
    );
    // The existing keys are all there, unchanged in kind.
    assert_eq!(j["model_format"], "proto");
    assert!(j["jobs"].is_array() && j["decisions"].is_array());
    // Nothing learned: the formula over the graph, written out here.
    let size = std::fs::metadata(s.join("big.pb")).unwrap().len();
    let e = &j["memory_estimate"];
    assert_eq!(e["basis"], "formula");
    assert_eq!(e["formula"], "graph-v1");
    assert_eq!(
        e["bytes"].as_u64().unwrap(),
        (320 << 20) + 4 * size + 8 * (32768 + 32768) + 4 * (16 << 10)
    );
    assert!(e["from"].as_str().unwrap().contains("graph-v1"));
    // A model that is not one: the reader's message, and the formula over the file size.
    let j = dry("garbage.pb", &[]);
    assert!(
        j["model_graph"]["error"]
            .as_str()
            .unwrap()
            .contains("garbage.pb: not an HLO module (not an HloModuleProto"),
        "{}",
        j["model_graph"]
    );
    assert_eq!(j["memory_estimate"]["bytes"], (320u64 << 20) + 4 * 300);
    // The text form says the same in a line each.
    let out = s.run(&["compile", "big.pb", "--target", "trn2", "--dry-run"]);
    let t = text(&out.stdout);
    assert!(
        t.contains("\ngraph      jit_big: 1 parameter (32.0 KiB)"),
        "{t}"
    );
    assert!(
        t.contains("memory estimate: ") && t.contains("(from the formula graph-v1"),
        "{t}"
    );
    // After a compile through the cache, the dry run reports the recorded peak.
    let out = s.run(&[
        "compile",
        "big.pb",
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--cache_dir",
        "c",
        "--output",
        "big.neff",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let j = dry("big.pb", &["--cache_dir", "c"]);
    assert_eq!(
        j["memory_estimate"]["basis"], "recorded",
        "{}",
        j["memory_estimate"]
    );
    // The simulated tools held memory in proportion to the graph: 2 × the 4 MiB file at least.
    assert!(j["memory_estimate"]["bytes"].as_u64().unwrap() > 8 << 20);
}

/// Run `cmd` to its end, or kill it and fail as hung after a generous guard
/// (`NXCC_TEST_HANG_GUARD_S`, default 90 s; never a latency assertion).
fn run_guarded(mut cmd: std::process::Command, what: &str) -> std::process::Output {
    use std::process::Stdio;
    let guard = std::env::var("NXCC_TEST_HANG_GUARD_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(
            std::time::Duration::from_secs(90),
            std::time::Duration::from_secs_f64,
        );
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + guard;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {guard:?} (hung on the model?)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A FIFO with no writer, `/dev/zero` and `/dev/urandom` as the model: `hlo-info`, a dry run and
/// a compile each refuse it at once — never waiting on the FIFO, never reading the device — and
/// say what it is.
#[test]
fn models_that_are_not_regular_files_are_refused_at_once() {
    let s = Scratch::new();
    let fifo = s.join("model.pb");
    nix_mkfifo(&fifo);
    let fifo = fifo.display().to_string();
    for (model, what) in [
        ("/dev/urandom", "a device"),
        (fifo.as_str(), "a FIFO"),
        ("/dev/zero", "a device"),
    ] {
        let mut c = std::process::Command::new(common::NXCC);
        c.args(["hlo-info", model]);
        let o = run_guarded(c, &format!("hlo-info {model}"));
        assert_eq!(o.status.code(), Some(1), "{model}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(&format!("{model}: cannot read: {what}, not a regular file")),
            "{model}: {}",
            text(&o.stderr)
        );
        for extra in [&["--dry-run"][..], &[][..]] {
            let mut args = vec![
                "compile",
                model,
                "--target",
                "trn2",
                "--toolchain",
                "sim",
                "--output",
                "o.neff",
            ];
            args.extend(extra);
            let o = run_guarded(s.nxcc(&args), &format!("compile {model} {extra:?}"));
            assert_eq!(o.status.code(), Some(70), "{model}: {}", text(&o.stderr));
            assert!(
                text(&o.stderr).contains(&format!(
                    "[NCC_EDRV114] HLO module {model} is {what}, not a regular file or a directory"
                )),
                "{model} {extra:?}: {}",
                text(&o.stderr)
            );
            assert!(!s.join("o.neff").exists());
        }
    }
    assert!(s.work_dirs().is_empty(), "nothing was run");
}

fn nix_mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// An HLO text module whose parameter is named `name` and has the shape `shape`.
fn module_with(name: &str, shape: &str) -> String {
    format!(
        "HloModule m\n\nENTRY main {{\n  {name} = {shape} parameter(0)\n  ROOT r = f32[4]{{0}} constant({{1, 2, 3, 4}})\n}}\n"
    )
}

/// A name of 70,000 characters and a shape whose size overflows 64 bits: `hlo-info` shows both
/// (no panic: the formatter's widths are bounded, the renderer's are not), the size as
/// overflowing, not as a saturated figure.
#[test]
fn long_names_and_overflowing_sizes_are_rendered() {
    let s = Scratch::new();
    let name = format!("p{}", "x".repeat(69_999));
    let dim = u64::MAX;
    std::fs::write(
        s.join("long.hlo"),
        module_with(&name, &format!("f32[{dim},2]{{1,0}}")),
    )
    .unwrap();
    let o = s.run(&["hlo-info", "long.hlo"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(&name), "the name is shown whole");
    assert!(
        out.contains("parameters (1, size overflows 64 bits):"),
        "{}",
        &out[..400.min(out.len())]
    );
    assert!(
        !out.contains("GiB") && !out.contains("6442450944"),
        "no saturated figure"
    );
    let o = s.run(&["hlo-info", "--json", "long.hlo"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["parameters"][0]["name"], name.as_str());
    assert_eq!(v["parameters"][0]["bytes"], Value::Null);
    assert_eq!(v["parameter_bytes"], Value::Null);
    assert_eq!(v["result_bytes"], 16);
    // The dry run's one-line summary too.
    let o = s.run(&[
        "compile",
        "long.hlo",
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--output",
        "o.neff",
        "--dry-run",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("(size overflows 64 bits) → 1 result (16 B)"),
        "{}",
        text(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("graph"))
            .collect::<String>()
    );
}

/// The simulated frontend refuses a shape whose size overflows 64 bits with a message (it used
/// to panic with "capacity overflow"), so the compile fails at HLOToTensorizer, cleanly.
#[test]
fn the_simulated_tools_refuse_overflowing_shapes() {
    let s = Scratch::new();
    std::fs::write(
        s.join("huge.hlo"),
        module_with("p0", &format!("f32[{}]{{0}}", u64::MAX)),
    )
    .unwrap();
    let o = compile(&s, "huge.hlo");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{err}");
    assert!(
        err.contains("Child process job \"HLOToTensorizer\" exited abnormally! Exit status 1."),
        "{err}"
    );
    assert!(
        err.contains("the tensor p0 has the shape f32[18446744073709551615], whose size overflows 64 bits: refused"),
        "{err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("overflow\n"),
        "{err}"
    );
}

/// A module summary of any names, shapes and lengths.
fn module_strategy() -> impl Strategy<Value = hlo::Module> {
    use hlo::{Dtype, Shape};
    let dtype = prop_oneof![
        Just(Dtype::F32),
        Just(Dtype::Bf16),
        Just(Dtype::S4),
        Just(Dtype::Pred),
        Just(Dtype::C128),
        Just(Dtype::Token),
    ];
    let dim = prop_oneof![0u64..8, Just(u64::MAX), Just(1u64 << 32), any::<u64>(),];
    let array = (dtype, proptest::collection::vec(dim, 0..4))
        .prop_map(|(dtype, dims)| Shape::Array { dtype, dims });
    let shape = array.prop_recursive(2, 8, 3, |inner| {
        proptest::collection::vec(inner, 0..3).prop_map(Shape::Tuple)
    });
    // Names of any characters and of lengths past what a formatter's width takes.
    let name = prop_oneof![".{0,12}", (1usize..3).prop_map(|k| "n".repeat(k * 40_000)),];
    let tensor = (name.clone(), shape).prop_map(|(name, shape)| hlo::Tensor {
        number: 0,
        name,
        shape,
    });
    (
        name.clone(),
        proptest::collection::vec(tensor.clone(), 0..3),
        proptest::collection::vec(tensor.clone(), 0..3),
        proptest::collection::vec((tensor, ".{0,8}"), 0..3),
        name,
    )
        .prop_map(
            |(mname, parameters, results, largest, opcode)| hlo::Module {
                format: "text",
                name: mname.clone(),
                id: 0,
                entry: mname.clone(),
                parameters,
                results,
                computations: vec![hlo::Computation {
                    name: mname,
                    instructions: 1,
                    is_entry: true,
                }],
                instruction_count: 1,
                opcodes: [(opcode, 1usize)].into_iter().collect(),
                largest: largest
                    .into_iter()
                    .map(|(tensor, op_name)| hlo::Largest { tensor, op_name })
                    .collect(),
                aliases: Vec::new(),
            },
        )
}

/// The size of a shape computed here, independently: `None` when it overflows 64 bits.
fn size_of(s: &hlo::Shape) -> Option<u64> {
    match s {
        hlo::Shape::Array { dtype, dims } => {
            if dims.contains(&0) {
                return Some(0);
            }
            let mut e: u128 = 1;
            for d in dims {
                e = e
                    .checked_mul(u128::from(*d))
                    .filter(|e| *e <= u128::from(u64::MAX))?;
            }
            u64::try_from((e * u128::from(dtype.bits())).div_ceil(8)).ok()
        }
        hlo::Shape::Tuple(parts) => parts
            .iter()
            .try_fold(0u64, |a, p| a.checked_add(size_of(p)?)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every renderer takes any module: the text, the JSON, the one-line summary and the shapes;
    /// every name is shown whole, every size exactly or as overflowing.
    #[test]
    fn every_renderer_takes_any_names_and_shapes(m in module_strategy()) {
        let text = m.to_text(123);
        let json = m.to_json(123);
        let line = m.one_line();
        for t in m.parameters.iter().chain(&m.results) {
            prop_assert!(text.contains(&t.name));
            let shown = t.shape.to_string();
            prop_assert!(text.contains(&shown));
        }
        for (list, ts) in [("parameters", &m.parameters), ("results", &m.results)] {
            for (i, t) in ts.iter().enumerate() {
                let bytes = &json[list][i]["bytes"];
                match size_of(&t.shape) {
                    Some(n) => prop_assert_eq!(bytes.as_u64(), Some(n)),
                    None => prop_assert!(bytes.is_null()),
                }
            }
        }
        let total = m.parameters.iter().try_fold(0u64, |a, t| a.checked_add(size_of(&t.shape)?));
        match total {
            Some(n) => prop_assert_eq!(json["parameter_bytes"].as_u64(), Some(n)),
            None => {
                prop_assert!(json["parameter_bytes"].is_null());
                prop_assert!(line.contains("size overflows 64 bits"), "{}", line);
                prop_assert!(text.contains("size overflows 64 bits"));
            }
        }
        prop_assert!(line.starts_with(&m.name));
    }
}

#[test]
fn a_neff_given_as_a_model_is_recognised() {
    let s = Scratch::new();
    std::fs::copy(models().join("mlp.hlo"), s.join("mlp.hlo")).unwrap();
    let out = compile(&s, "mlp.hlo");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let neff = s.join("out.neff");
    let out = hlo_info(&[neff.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "nxcc hlo-info: error: {}: a NEFF (a compiled model), not an HLO module: nxcc neff-info describes it\n",
            neff.display()
        )
    );
    // A compile of it is refused by the frontend with the same words.
    std::fs::rename(&neff, s.join("given.neff")).unwrap();
    let out = compile(&s, "given.neff");
    assert_eq!(out.status.code(), Some(70));
    assert!(
        text(&out.stderr).contains("given.neff: a NEFF (a compiled model), not an HLO module"),
        "{}",
        text(&out.stderr)
    );
}

/// `text` with every token on a line of its own (XLA's lexer: line breaks only separate tokens).
fn token_per_line(text: &str) -> String {
    use nxcc::hlo::lexer::{Lexer, Tok};
    let mut lx = Lexer::new(text);
    let mut out = String::new();
    loop {
        let t = lx.next_token().unwrap();
        if t.tok == Tok::Eof {
            return out;
        }
        out.push_str(&text[t.start..t.end]);
        out.push('\n');
    }
}

#[test]
fn hlo_text_reads_the_same_however_it_is_laid_out() {
    // The module of the first report, on one line and on several.
    let one_line = "HloModule m ENTRY e { ROOT p = f32[4] parameter(0) }";
    let m = hlo::parse(one_line.as_bytes()).unwrap();
    assert_eq!((m.name.as_str(), m.entry.as_str()), ("m", "e"));
    assert_eq!(m.parameters[0].shape.dims(), [4]);
    assert_eq!(m.results[0].name, "p");
    for layout in [
        "HloModule m\nENTRY e { ROOT p = f32[4] parameter(0) }\n",
        "HloModule m\n\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n}\n",
        "HloModule\tm\r\nENTRY\te\r\n{\r\nROOT\r\np\r\n=\r\nf32[4]\r\nparameter(0)\r\n}\r\n",
        "HloModule m /* a comment */ ENTRY e { // the entry\n ROOT p = f32 [ 4 ] parameter ( 0 ) }",
    ] {
        assert_eq!(hlo::parse(layout.as_bytes()).unwrap(), m, "{layout:?}");
    }
    // Every module of the zoo: one line, a token per line, indented and with Windows line ends,
    // instructions several to a line — the same summary as the file as written.
    for (stem, _) in zoo() {
        let file = models().join(format!("{stem}.hlo"));
        let written = std::fs::read_to_string(&file).unwrap();
        let want = hlo::parse(written.as_bytes()).unwrap();
        let layouts = [
            written.replace('\n', " "),
            token_per_line(&written),
            written
                .lines()
                .map(|l| format!("\t  {l}  \r\n\r\n"))
                .collect::<String>(),
            written.replace(")\n  ", ") ").replace("}\n  ", "} "),
        ];
        for (i, t) in layouts.iter().enumerate() {
            let got = hlo::parse(t.trim_start().as_bytes())
                .unwrap_or_else(|e| panic!("{stem}, layout {i}: {}", e.render(&file)));
            assert_eq!(got, want, "{stem}, layout {i}");
        }
        // And the binary form of the same module agrees with the one-line text.
        let proto = hlo::read(&models().join(format!("{stem}.hlo_module.pb"))).unwrap();
        let one = hlo::parse(layouts[0].as_bytes()).unwrap();
        assert_eq!(one.parameters, proto.parameters, "{stem}");
        assert_eq!(one.results.len(), proto.results.len(), "{stem}");
        // A compile reads it too: the simulated frontend is the same reader.
        if stem == "mlp" {
            let s = Scratch::new();
            std::fs::write(s.join("one.hlo"), &layouts[0]).unwrap();
            let out = compile(&s, "one.hlo");
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        }
    }
}
