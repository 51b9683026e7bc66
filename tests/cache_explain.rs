//! A cache people can understand, through the built `nxcc`: `nxcc cache explain` and the miss
//! line name what differs (an argument, a tool, "only op metadata differs"); the
//! `hlo_metadata` sloppiness hits on a metadata-only change and misses on a constant or a shape;
//! counters exact after a scripted sequence, also with 8 processes at once; `max_size` kept
//! while entries are published, an entry being read left alone; remembered model digests never
//! trusted for a changed, replaced or touched file.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};

use common::{cache_entries, cached_args, text, Scratch};
use serde_json::Value;

/// A compile of `model` through the cache `cache` with the simulated toolchain.
fn compile(s: &Scratch, model: &str, output: &str, extra: &[&str]) -> Output {
    let mut args = vec!["compile"];
    args.extend(cached_args(model));
    args.extend(["--output", output]);
    args.extend_from_slice(extra);
    s.run(&args)
}

/// How many times the simulated `walrus_driver` ran (once per compile that was not a hit).
fn compiles(s: &Scratch) -> usize {
    s.records()
        .iter()
        .filter(|r| r["tool"] == "walrus_driver")
        .count()
}

fn explain(s: &Scratch, compile_args: &[&str]) -> (i32, Value) {
    let mut args = vec!["cache", "explain", "--json", "--"];
    args.extend_from_slice(compile_args);
    let o = s.run(&args);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", text(&o.stdout), text(&o.stderr)));
    (o.status.code().unwrap_or(-1), v)
}

fn counters(s: &Scratch) -> Value {
    let o = s.run(&["cache", "stats", "--cache_dir", "cache", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["counters"].clone()
}

// ---- editing a binary HloModuleProto at the wire level ----

fn varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    for i in 0..10 {
        let b = buf[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            break;
        }
    }
    v
}

fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// What to do with a field at the end of a path: a new value, or `None` to keep it.
type Edit<'a> = dyn FnMut(u32, u8, &[u8]) -> Option<Vec<u8>> + 'a;

/// The message `buf` with the messages at `path` (field numbers, descended into) rewritten:
/// at the end of the path `edit(field, wire type, value bytes)` returns a new value (`None`:
/// keep the field as it is).
fn rewrite(buf: &[u8], path: &[u32], edit: &mut Edit) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let start = pos;
        let key = varint(buf, &mut pos);
        let (field, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let value_start = pos;
        let value_end = match wire {
            0 => {
                varint(buf, &mut pos);
                pos
            }
            1 => pos + 8,
            2 => {
                let len = varint(buf, &mut pos) as usize;
                pos + len
            }
            5 => pos + 4,
            w => panic!("wire type {w}"),
        };
        let inner = if wire == 2 { pos } else { value_start };
        let replaced = match path.split_first() {
            Some((first, rest)) if *first == field && wire == 2 => {
                Some(rewrite(&buf[inner..value_end], rest, edit))
            }
            None => edit(field, wire, &buf[inner..value_end]),
            _ => None,
        };
        match replaced {
            Some(v) => {
                put_varint(key, &mut out);
                if wire == 2 {
                    put_varint(v.len() as u64, &mut out);
                }
                out.extend_from_slice(&v);
            }
            None => out.extend_from_slice(&buf[start..value_end]),
        }
        pos = value_end;
    }
    out
}

fn model_bytes(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/models")
            .join(name),
    )
    .unwrap()
}

/// The attention example with its op metadata changed: every op renamed, every source line
/// moved, the module's stack frame index replaced.
fn metadata_changed(bytes: &[u8]) -> Vec<u8> {
    let moved = rewrite(bytes, &[3, 2, 7], &mut |field, _, value| match field {
        2 => Some([b"renamed/", value].concat()),
        4 => {
            let mut pos = 0;
            let line = varint(value, &mut pos);
            let mut v = Vec::new();
            put_varint(line + 100, &mut v);
            Some(v)
        }
        _ => None,
    });
    let moved = rewrite(&moved, &[], &mut |field, _, _| {
        (field == 17).then(|| {
            let mut v = vec![0x0a];
            let name = b"/elsewhere/train.py";
            put_varint(name.len() as u64, &mut v);
            v.extend_from_slice(name);
            v
        })
    });
    assert_ne!(moved, bytes);
    moved
}

/// The attention example with one constant's value changed.
fn constant_changed(bytes: &[u8]) -> Vec<u8> {
    let mut done = false;
    let changed = rewrite(bytes, &[3, 2, 8], &mut |field, _, value| {
        // LiteralProto.f32s (8), packed: the first constant's first value.
        (field == 8 && !done && !value.is_empty()).then(|| {
            done = true;
            let mut v = value.to_vec();
            v[0] ^= 0x01;
            v
        })
    });
    assert!(done, "no f32 constant found");
    changed
}

/// The attention example with one instruction's shape changed (its first dimension).
fn shape_changed(bytes: &[u8]) -> Vec<u8> {
    let mut done = false;
    let changed = rewrite(bytes, &[3, 2, 3], &mut |field, wire, value| {
        // ShapeProto.dimensions (3), packed.
        (field == 3 && wire == 2 && !done && !value.is_empty() && value[0] < 0x7f).then(|| {
            done = true;
            let mut v = value.to_vec();
            v[0] += 1;
            v
        })
    });
    assert!(done, "no shape with dimensions found");
    changed
}

// ---- explanations ----

#[test]
fn explain_and_the_miss_line_name_the_one_changed_argument() {
    let s = Scratch::new();
    let base = cached_args("mlp.hlo_module.pb");
    let o = compile(&s, "mlp.hlo_module.pb", "a.neff", &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (status, hit) = explain(&s, &base);
    assert_eq!((status, hit["verdict"].as_str()), (0, Some("hit")), "{hit}");
    let mut changed = base.to_vec();
    changed.extend_from_slice(&["--model-type", "transformer"]);
    let (status, e) = explain(&s, &changed);
    assert_eq!(status, 1, "{e}");
    assert_eq!(e["verdict"], "miss");
    assert_eq!(e["reason"], "arguments");
    let near = &e["nearest"][0];
    assert_eq!(near["found_by"], "same model");
    let diffs = near["differences"].as_array().unwrap();
    assert_eq!(diffs.len(), 1, "{near}");
    assert_eq!(diffs[0]["what"], "argument");
    assert_eq!(diffs[0]["name"], "--model-type");
    assert_eq!(diffs[0]["entry"], "generic");
    assert_eq!(diffs[0]["now"], "transformer");
    // The compile that misses says it at --verbose info, and nothing at the default level.
    let quiet = compile(
        &s,
        "mlp.hlo_module.pb",
        "b.neff",
        &["--model-type", "transformer"],
    );
    assert!(
        !text(&quiet.stdout).contains("Cache miss"),
        "{}",
        text(&quiet.stdout)
    );
    let loud = compile(
        &s,
        "mlp.hlo_module.pb",
        "c.neff",
        &["--model-type", "cnn-training", "--verbose", "info"],
    );
    let line = text(&loud.stdout)
        .lines()
        .find(|l| l.contains("Cache miss, key "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no miss line: {}", text(&loud.stdout)));
    assert!(
        line.contains("argument --model-type: ") && line.contains("→ cnn-training"),
        "{line}"
    );
}

/// A toolchain directory of the simulated tools (links to nxcc) at `dir`.
fn sim_toolchain(s: &Scratch, dir: &str) {
    let o = s.run(&["toolchain", "sim", dir]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn explain_names_the_changed_tool_and_the_same_tools_elsewhere_hit() {
    let s = Scratch::new();
    sim_toolchain(&s, "tc");
    let args = |tc: &'static str| {
        vec![
            "mlp.hlo_module.pb",
            "--target",
            "trn2",
            "--toolchain",
            tc,
            "--cache_dir",
            "cache",
        ]
    };
    let o = s.run(&[&["compile"][..], &args("tc"), &["--output", "a.neff"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The same toolchain copied elsewhere (other paths, inodes and times): a hit.
    let cp = std::process::Command::new("cp")
        .args(["-r", "tc", "moved"])
        .current_dir(s.path())
        .status()
        .unwrap();
    assert!(cp.success());
    let (status, e) = explain(&s, &args("moved"));
    assert_eq!((status, e["verdict"].as_str()), (0, Some("hit")), "{e}");
    // One tool's bytes changed: the explanation names it, and only it.
    let tool = s.join("moved/bin/walrus_driver");
    std::fs::remove_file(&tool).unwrap();
    std::fs::write(&tool, "#!/bin/sh\nexit 0\n").unwrap();
    let (status, e) = explain(&s, &args("moved"));
    assert_eq!(status, 1, "{e}");
    assert_eq!(e["reason"], "toolchain", "{e}");
    let diffs = e["nearest"][0]["differences"].as_array().unwrap().clone();
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert_eq!(diffs[0]["what"], "tool");
    assert_eq!(diffs[0]["name"], "walrus_driver");
}

#[test]
fn explain_says_only_op_metadata_differs() {
    let s = Scratch::new();
    let original = model_bytes("attention.hlo_module.pb");
    std::fs::write(s.join("m.pb"), &original).unwrap();
    let o = compile(&s, "m.pb", "a.neff", &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::write(s.join("m.pb"), metadata_changed(&original)).unwrap();
    let args = cached_args("m.pb");
    let (status, e) = explain(&s, &args);
    assert_eq!(status, 1, "{e}");
    assert_eq!(e["reason"], "model");
    let diffs = e["nearest"][0]["differences"].as_array().unwrap().clone();
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert_eq!(diffs[0]["what"], "model");
    assert_eq!(diffs[0]["note"], "only op metadata differs");
    // A constant changed: the model differs, and not only in metadata.
    std::fs::write(s.join("m.pb"), constant_changed(&original)).unwrap();
    let (_, e) = explain(&s, &args);
    let diffs = e["nearest"][0]["differences"].as_array().unwrap().clone();
    assert_eq!(diffs[0]["what"], "model");
    assert!(diffs[0].get("note").is_none(), "{diffs:?}");
}

// ---- sloppiness ----

#[test]
fn with_hlo_metadata_sloppiness_metadata_hits_and_a_constant_or_a_shape_misses() {
    let s = Scratch::new();
    let original = model_bytes("attention.hlo_module.pb");
    let put = |bytes: &[u8]| std::fs::write(s.join("m.pb"), bytes).unwrap();
    put(&original);
    let sloppy = ["--cache-sloppiness", "hlo_metadata"];
    assert!(compile(&s, "m.pb", "a.neff", &sloppy).status.success());
    assert_eq!(compiles(&s), 1);
    put(&metadata_changed(&original));
    let o = compile(&s, "m.pb", "b.neff", &sloppy);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("Using a cached neff at "),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(compiles(&s), 1, "a metadata-only change hits");
    // Without the sloppiness the same model misses.
    assert!(compile(&s, "m.pb", "c.neff", &[]).status.success());
    assert_eq!(compiles(&s), 2);
    // Set in the cache's configuration instead of the flag: the same.
    let cfg = s.run(&[
        "cache",
        "config",
        "sloppiness=hlo_metadata",
        "--cache_dir",
        "cache",
    ]);
    assert!(cfg.status.success(), "{}", text(&cfg.stderr));
    put(&metadata_changed(&original));
    assert!(text(&compile(&s, "m.pb", "d.neff", &[]).stdout).contains("Using a cached neff"));
    assert_eq!(compiles(&s), 2);
    // The entry says it was keyed without op metadata; explain says what was served.
    let args = cached_args("m.pb");
    let (status, e) = explain(&s, &args);
    assert_eq!(status, 0, "{e}");
    assert!(
        e["sloppy"]
            .as_str()
            .unwrap()
            .contains("only op metadata differs"),
        "{e}"
    );
    let meta: Value = serde_json::from_slice(
        &std::fs::read(Path::new(e["entry"].as_str().unwrap()).join("meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["model_digest_kind"], "hlo_metadata");
    // A constant or a shape changed: a miss each.
    for (what, bytes) in [
        ("a constant", constant_changed(&original)),
        ("a shape", shape_changed(&original)),
    ] {
        let before = compiles(&s);
        put(&bytes);
        let o = compile(&s, "m.pb", "e.neff", &sloppy);
        assert!(!text(&o.stdout).contains("Using a cached neff"), "{what}");
        assert_eq!(compiles(&s), before + 1, "{what} must compile");
    }
}

// ---- counters ----

#[test]
fn counters_are_exact_after_a_scripted_sequence_of_hits_misses_and_failures() {
    let s = Scratch::new();
    sim_toolchain(&s, "tc");
    let ok = |out: &str, extra: &[&str]| {
        let o = compile(&s, "mlp.hlo_module.pb", out, extra);
        assert!(o.status.success(), "{}", text(&o.stderr));
        o
    };
    ok("1.neff", &[]); // miss (a new model), compile
    ok("2.neff", &[]); // hit
    ok("3.neff", &[]); // hit
    ok("4.neff", &["-O1"]); // miss (arguments), compile
                            // A failed compile of another model: miss, compile, failure; then served twice.
    std::fs::copy(s.join("mlp.hlo"), s.join("f.hlo")).unwrap();
    for _ in 0..3 {
        let o = s
            .nxcc(&[
                "compile",
                "f.hlo",
                "--target",
                "trn2",
                "--toolchain",
                "sim",
                "--cache_dir",
                "cache",
                "--output",
                "f.neff",
            ])
            .env("NXCC_SIM_FAULT", "walrus_driver:exit=3")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(70), "{}", text(&o.stdout));
    }
    // Another toolchain, everything else the same: miss (toolchain), compile.
    let o = s.run(&[
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn2",
        "--toolchain",
        "tc",
        "--cache_dir",
        "cache",
        "--output",
        "5.neff",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let neff_size = std::fs::metadata(s.join("2.neff")).unwrap().len() as i64;
    let c = counters(&s);
    let expect = [
        ("hits", 2),
        ("hits_secondary", 0),
        ("failures_served", 2),
        ("misses_model", 2),
        ("misses_arguments", 1),
        ("misses_toolchain", 1),
        ("misses_other", 0),
        ("misses_refused", 0),
        ("compiles", 4),
        ("compile_failures", 1),
        ("evictions", 0),
        ("entries", 4),
        ("bytes_read", 2 * neff_size),
    ];
    for (name, want) in expect {
        assert_eq!(c[name], want, "{name}: {c}");
    }
    assert!(c["time_saved_ms"].as_i64().unwrap() >= 0);
    assert!(c["bytes_written"].as_i64().unwrap() > 0);
    // Zeroed: the activity, not what the cache holds.
    let z = s.run(&["cache", "stats", "--cache_dir", "cache", "--zero"]);
    assert!(z.status.success());
    assert!(text(&z.stdout).contains("hits: 2"), "shown before zeroing");
    let c = counters(&s);
    assert_eq!(
        (c["hits"].as_i64(), c["compiles"].as_i64()),
        (Some(0), Some(0))
    );
    assert_eq!(c["entries"], 4);
}

#[test]
fn counters_are_exact_with_8_processes_at_once() {
    let s = Scratch::new();
    let original = model_bytes("mlp.hlo_module.pb");
    // Eight models: the example with one unknown field appended (another model each).
    for i in 0..8u8 {
        let mut b = original.clone();
        b.extend_from_slice(&[0xc2, 0x3e, 1, i]);
        std::fs::write(s.join(&format!("m{i}.pb")), b).unwrap();
    }
    let round = |model: &dyn Fn(usize) -> String| {
        let children: Vec<_> = (0..8)
            .map(|i| {
                let m = model(i);
                let out = format!("out-{i}-{}.neff", m.replace('.', "_"));
                s.nxcc(&[
                    "compile",
                    &m,
                    "--target",
                    "trn2",
                    "--toolchain",
                    "sim",
                    "--cache_dir",
                    "cache",
                    "--output",
                    &out,
                ])
                .env("NXCC_SIM_WORK_MS", "walrus_driver:200")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
            })
            .collect();
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", text(&o.stderr));
        }
    };
    // Eight processes, one model: one compiles, seven wait and hit.
    round(&|_| "m0.pb".to_string());
    // Eight processes, eight models: eight misses; then eight hits.
    round(&|i| format!("m{i}.pb"));
    round(&|i| format!("m{i}.pb"));
    let c = counters(&s);
    assert_eq!(compiles(&s), 8, "m0 once, m1..m7 once each");
    assert_eq!(c["compiles"], 8, "{c}");
    assert_eq!(c["misses_model"], 8, "{c}");
    assert_eq!(c["hits"], 7 + 1 + 8, "{c}");
    assert_eq!(c["entries"], 8, "{c}");
}

// ---- max_size ----

fn entries_bytes(cache: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        std::fs::read_dir(p)
            .unwrap()
            .flatten()
            .map(|e| {
                let m = e.metadata().unwrap();
                if m.is_dir() {
                    walk(&e.path())
                } else {
                    m.len()
                }
            })
            .sum()
    }
    cache_entries(cache).iter().map(|e| walk(e)).sum()
}

/// The key `nxcc compile MODEL --target trn2 --toolchain sim` has (computed in this process,
/// as the cache computes it).
fn key_of(s: &Scratch, model: &str) -> String {
    let argv: Vec<String> = ["compile", model, "--target", "trn2", "--toolchain", "sim"]
        .map(String::from)
        .to_vec();
    let probe = nxcc::plan::SystemProbe::at(s.path());
    let plan = nxcc::plan::Invocation::from_argv("nxcc", &argv, &probe).unwrap();
    nxcc::cache::CacheConfig::off()
        .key(&plan, &nxcc::engine::Engine::Pipeline)
        .unwrap()
        .key
}

#[test]
fn the_configured_max_size_is_kept_as_entries_are_published_and_a_read_entry_stays() {
    let s = Scratch::new();
    let original = model_bytes("mlp.hlo_module.pb");
    // The first entry, held by a reader (a shared lock on its meta.json, as a hit takes).
    assert!(compile(&s, "mlp.hlo_module.pb", "held.neff", &[])
        .status
        .success());
    let one = entries_bytes(&s.join("cache"));
    let held_key = key_of(&s, "mlp.hlo_module.pb");
    let held = s.join(&format!("cache/nxcc-v1/{}/{held_key}", &held_key[..2]));
    assert!(held.is_dir());
    let reader = std::fs::File::open(held.join("meta.json")).unwrap();
    fs4::fs_std::FileExt::lock_shared(&reader).unwrap();
    // Room for six entries and a half.
    let max = one * 6 + one / 2;
    let set = s.run(&[
        "cache",
        "config",
        &format!("max_size={max}"),
        "--cache_dir",
        "cache",
    ]);
    assert!(set.status.success(), "{}", text(&set.stderr));
    // Twenty models: the held entry, the least recently used, would be the first to go.
    for i in 0..20u8 {
        let mut b = original.clone();
        b.extend_from_slice(&[0xc2, 0x3e, 1, i]);
        std::fs::write(s.join("m.pb"), b).unwrap();
        let o = compile(&s, "m.pb", "o.neff", &[]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let bytes = entries_bytes(&s.join("cache"));
        assert!(bytes <= max, "{bytes} > {max} after {i}");
        // Once full, what may be kept is kept (the least recently used go, no more).
        assert!(
            i < 6 || bytes + one * 2 > max,
            "{bytes} kept of {max} after {i}"
        );
        assert!(
            held.join("model.neff").exists(),
            "the read entry was removed"
        );
    }
    drop(reader);
    let c = counters(&s);
    assert!(c["evictions"].as_i64().unwrap() >= 13, "{c}");
    assert_eq!(
        c["size_bytes"].as_i64().unwrap() as u64,
        entries_bytes(&s.join("cache"))
    );
}

/// `cache config` takes `--cache_dir DIR` before or after its settings; a setting written as
/// ccache's option or as two words, or a key misspelt, is refused (nothing written, exit 2) with
/// a tip naming the setting meant.
#[test]
fn cache_config_takes_its_options_in_any_order_and_points_a_misspelt_setting_to_its_form() {
    let s = Scratch::new();
    let conf = |dir: &str| s.join(dir).join("nxcc-v1/nxcc.conf");
    for (dir, args) in [
        ("a", ["cache", "config", "--cache_dir", "a", "max_size=20G"]),
        ("b", ["cache", "config", "max_size=20G", "--cache_dir", "b"]),
        ("c", ["cache", "--cache_dir", "c", "config", "max_size=20G"]),
    ] {
        let o = s.run(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        let written = std::fs::read_to_string(conf(dir)).unwrap();
        assert!(written.contains("max_size = 21474836480\n"), "{written}");
    }
    for (args, tip) in [
        (
            &["cache", "config", "--cache_dir", "d", "max_size", "20G"][..],
            "tip: a setting is one word, KEY=VALUE: did you mean `max_size=20G`?",
        ),
        (
            &["cache", "config", "--cache_dir", "d", "max-size=20G"][..],
            "tip: did you mean `max_size=20G`?",
        ),
        (
            &["cache", "config", "--cache_dir", "d", "--max-size", "20G"][..],
            "tip: did you mean `max_size=20G`?",
        ),
    ] {
        let o = s.run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains(&format!("\n\n  {tip}\n")), "{args:?}: {err}");
        assert!(!s.join("d").exists(), "{args:?}: nothing is written");
    }
    // A value that does not read has no tip: the key is right.
    let o = s.run(&["cache", "config", "--cache_dir", "d", "max_size=lots"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!text(&o.stderr).contains("tip:"), "{}", text(&o.stderr));
}

#[test]
fn a_compile_larger_than_max_size_is_written_and_not_stored_and_the_user_is_told() {
    let s = Scratch::new();
    let set = s.run(&["cache", "config", "max_size=1K", "--cache_dir", "cache"]);
    assert!(set.status.success(), "{}", text(&set.stderr));
    let o = compile(&s, "mlp.hlo_module.pb", "big.neff", &[]);
    // The console's lines: the warning is one of them.
    let err = text(&o.stdout) + &text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        s.join("big.neff").is_file(),
        "the compile's NEFF was not written"
    );
    assert!(
        err.contains("could not store the compile in the cache")
            && err.contains("more than the cache's max_size of 1.0 KiB; it is not stored"),
        "{err}"
    );
    assert!(cache_entries(&s.join("cache")).is_empty());
    // Compiled again: a miss again (nothing was stored), told again.
    let again = compile(&s, "mlp.hlo_module.pb", "again.neff", &[]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(text(&again.stdout).contains("it is not stored"));
    assert_eq!(compiles(&s), 2);
    assert_eq!(counters(&s)["entries"], 0);
}

// ---- remembered digests ----

#[test]
fn a_remembered_model_digest_is_never_trusted_for_a_changed_replaced_or_touched_file() {
    let s = Scratch::new();
    let original = model_bytes("mlp.hlo_module.pb");
    std::fs::write(s.join("m.pb"), &original).unwrap();
    // Old enough to be remembered (the racy rule: 2 s after its last change).
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert!(compile(&s, "m.pb", "a.neff", &[]).status.success());
    let digests = s.join("cache/nxcc-v1/digests");
    let remembered = std::fs::read_dir(&digests)
        .map(|d| {
            d.flatten()
                .map(|h| std::fs::read_dir(h.path()).unwrap().count())
                .sum::<usize>()
        })
        .unwrap_or(0);
    assert!(remembered >= 1, "the model's digest was not remembered");
    assert!(text(&compile(&s, "m.pb", "b.neff", &[]).stdout).contains("Using a cached neff"));
    // One byte changed, same size, the modification time put back.
    let mtime = std::fs::metadata(s.join("m.pb"))
        .unwrap()
        .modified()
        .unwrap();
    let mut changed = original.clone();
    // A byte of the module's name (its first field): still a module, another one.
    assert_eq!(&changed[2..5], b"jit");
    changed[2] = b'J';
    std::fs::write(s.join("m.pb"), &changed).unwrap();
    std::fs::File::options()
        .write(true)
        .open(s.join("m.pb"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let before = compiles(&s);
    let o = compile(&s, "m.pb", "c.neff", &[]);
    assert!(
        !text(&o.stdout).contains("Using a cached neff"),
        "a changed byte was not seen"
    );
    assert_eq!(compiles(&s), before + 1);
    // Replaced by the original bytes (a new inode), then touched: the original's entry, found
    // by hashing again.
    std::fs::write(s.join("m.new"), &original).unwrap();
    std::fs::rename(s.join("m.new"), s.join("m.pb")).unwrap();
    assert!(text(&compile(&s, "m.pb", "d.neff", &[]).stdout).contains("Using a cached neff"));
    // --cache-rehash: nothing remembered is used or written.
    let fresh = Scratch::new();
    std::fs::write(fresh.join("m.pb"), &original).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert!(compile(&fresh, "m.pb", "a.neff", &["--cache-rehash"])
        .status
        .success());
    assert!(!fresh.join("cache/nxcc-v1/digests").exists());
}
