//! What a run shows a person: the Chrome trace of a batch (`parallel-compile --profile`) parsed
//! back — one event per compile, its outcome right for a compile, a hit, a failure and a
//! remembered failure, the memory counter never above the budget — and the `--timings` page
//! loaded in a real browser (headless Chromium): no console error, the bars, the memory chart
//! and the tables in its DOM, a screenshot that shows them; a tool killed by a signal
//! (`compile --profile`) and an interrupted batch said as such in the trace. And the profiles
//! of a batch and of a compile as Perfetto itself reads them (`common::perfetto`): loaded into
//! its own trace processor with no error, each compile, job, memory series and arg where the
//! JSON puts it (asked with SQL); the batch's opened in Perfetto's UI in headless Chromium; a
//! profile cut short, or with a job past its compile, reported by both.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{perfetto, text, Scratch};

const MODEL: &str = "mlp.hlo_module.pb";
use serde_json::Value;

/// Two batches through one cache: the second has a hit (`good`), a remembered failure (`bad`),
/// a fresh failure (`worse`) and a compile (`other`). Returns the second batch's report.
fn two_batches(s: &Scratch, extra: &[&str]) -> Value {
    std::fs::create_dir_all(s.join("g1")).unwrap();
    std::fs::create_dir_all(s.join("g2")).unwrap();
    std::fs::copy(s.join(MODEL), s.join("g1/good.pb")).unwrap();
    std::fs::write(s.join("g1/bad.pb"), b"not a module").unwrap();
    let budget = [
        "--jobs",
        "2",
        "--memory-budget",
        "900M",
        "--cache_dir",
        "cache",
    ];
    let mut first = vec!["g1", "--output-dir", "out1"];
    first.extend(budget);
    let o = s.parallel_run(&first, &[]);
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    for f in ["good.pb", "bad.pb"] {
        std::fs::copy(s.join(&format!("g1/{f}")), s.join(&format!("g2/{f}"))).unwrap();
    }
    std::fs::write(s.join("g2/worse.pb"), b"not a module either").unwrap();
    let mut other = std::fs::read(s.join(MODEL)).unwrap();
    other.extend_from_slice(&[0xc2, 0x3e, 5, b'o', b't', b'h', b'e', b'r']);
    std::fs::write(s.join("g2/other.pb"), other).unwrap();
    let mut second = vec!["g2", "--output-dir", "out2", "--report", "report.json"];
    second.extend(budget);
    second.extend(extra);
    let o = s.parallel_run(&second, &[]);
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    serde_json::from_slice(&std::fs::read(s.join("report.json")).unwrap()).unwrap()
}

#[test]
fn the_profile_has_one_event_per_compile_with_its_outcome_within_the_budget() {
    let s = Scratch::new();
    let report = two_batches(&s, &["--profile", "profile.json"]);
    let trace: Value = serde_json::from_slice(&std::fs::read(s.join("profile.json")).unwrap())
        .expect("the profile is JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let compiles: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "compile")
        .collect();
    let names: Vec<&str> = compiles
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, ["bad", "good", "other", "worse"], "{trace}");
    let outcome = |g: &str| &compiles.iter().find(|e| e["name"] == g).unwrap()["args"];
    assert_eq!(outcome("good")["outcome"], "hit");
    assert_eq!(outcome("good")["tier"], "local");
    assert_eq!(outcome("bad")["outcome"], "remembered");
    assert_eq!(outcome("worse")["outcome"], "failed");
    assert_eq!(outcome("other")["outcome"], "compiled");
    for e in &compiles {
        let a = &e["args"];
        assert_eq!(a["cache_key"].as_str().map(str::len), Some(64), "{e}");
        assert!(a["estimate_bytes"].as_u64().unwrap() > 0, "{e}");
        // Every event is where the report says the compile ran.
        let c = report["compiles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["stem"] == e["name"])
            .unwrap();
        let attempt = &c["attempts"][0];
        assert_eq!(e["tid"].as_u64(), attempt["slot"].as_u64().map(|s| s + 1));
        assert_eq!(attempt["outcome"], a["outcome"]);
        assert_eq!(a["cache_key"], c["key"]);
    }
    // What ran has its jobs nested inside it, on its track; what did not has none.
    let jobs_of = |e: &Value| -> Vec<&Value> {
        let (t0, t1) = (
            e["ts"].as_u64().unwrap(),
            e["ts"].as_u64().unwrap() + e["dur"].as_u64().unwrap(),
        );
        events
            .iter()
            .filter(|j| j["cat"] == "job" && j["tid"] == e["tid"])
            .filter(|j| {
                j["ts"].as_u64().unwrap() >= t0
                    && j["ts"].as_u64().unwrap() + j["dur"].as_u64().unwrap() <= t1
            })
            .collect()
    };
    let other = compiles.iter().find(|e| e["name"] == "other").unwrap();
    assert_eq!(jobs_of(other).len(), 6, "{trace}");
    let worse = compiles.iter().find(|e| e["name"] == "worse").unwrap();
    let worse_jobs = jobs_of(worse);
    assert_eq!(worse_jobs[0]["name"], "HLOToTensorizer");
    assert_eq!(worse_jobs[0]["args"]["status"], "failed");
    // The memory counter: sampled, with the budget, never above it.
    let budget = 900u64 << 20;
    let memory: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert!(memory.len() >= 3, "{trace}");
    for m in &memory {
        assert_eq!(m["name"], "memory");
        assert_eq!(m["args"]["budget"].as_u64(), Some(budget));
        for k in ["admitted", "rss"] {
            assert!(m["args"][k].as_u64().unwrap() <= budget, "{m}");
        }
    }
    assert!(memory
        .iter()
        .any(|m| m["args"]["admitted"].as_u64().unwrap() > 0));
    assert!(memory
        .iter()
        .any(|m| m["args"]["rss"].as_u64().unwrap() > 0));
    // Perfetto's needs: names for the process and every track, whole microseconds.
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "process_name"));
    let tracks = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .count();
    assert_eq!(tracks, 2);
    for e in events.iter().filter(|e| e["ph"] != "M") {
        assert!(
            e["ts"].is_u64() && e["pid"].is_u64() && e["tid"].is_u64(),
            "{e}"
        );
    }
}

/// The profile as Perfetto's own engine holds it (`common::perfetto`), each part checked against
/// the JSON it was read from.
struct Imported {
    /// The top-level slices by name: their thread's name.
    threads: BTreeMap<String, String>,
    /// The slices nested in another, by the name of that one: their names, in time order.
    nested: BTreeMap<String, Vec<String>>,
    /// The counter tracks by name: how many samples, the least and the most.
    counters: BTreeMap<String, (u64, f64, f64)>,
    /// The args of the top-level slices by name: by key (`outcome`), as the engine shows them.
    args: BTreeMap<String, BTreeMap<String, String>>,
}

const TOP: &str = "select s.name, s.ts, s.dur, t.tid, t.name as thread from slice s \
     join thread_track tt on s.track_id = tt.id join thread t using (utid) where s.depth = 0";
const NESTED: &str = "select p.name as parent, s.name, s.ts, s.dur, s.depth from slice s \
     join slice p on s.parent_id = p.id order by s.ts";
const COUNTERS: &str = "select t.name, count(*) as n, min(c.value) as low, \
     max(c.value) as high from counter_track t join counter c on c.track_id = t.id group by t.name";
const ARGS: &str = "select s.name, a.key, a.display_value as value from slice s \
     join args a using (arg_set_id) where s.depth = 0 and a.key glob 'args.*'";
const PROCESS: &str = "select p.pid, p.name, (select count(*) from thread t \
     where t.upid = p.upid and t.tid = p.pid and t.name is not null) as named_main \
     from process p where p.name is not null";

/// Load `trace` into Perfetto's engine: it loads with no error stat; every compile event is a
/// top-level slice at its time (µs as ns) on its track, named as its `thread_name` says, every
/// job event a slice nested in the compile whose time holds it; every series of the `memory`
/// counter a track `memory <series>` with all its samples; the process named.
fn imported_as_written(trace: &Path) -> Imported {
    let json: Value = serde_json::from_slice(&std::fs::read(trace).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let loaded = perfetto::engine().load(
        trace,
        &[perfetto::ERRORS, TOP, NESTED, COUNTERS, ARGS, PROCESS],
    );
    assert_eq!(loaded.error, None, "Perfetto's engine could not load it");
    let [errors, top, nested, counters, args, process] = &loaded.results[..] else {
        panic!("{loaded:?}")
    };
    assert!(
        errors.is_empty(),
        "Perfetto's engine found errors: {errors:?}"
    );
    let meta = |name: &'static str| {
        events
            .iter()
            .filter(move |e| e["ph"] == "M" && e["name"] == name)
    };
    let thread_name = |tid: &Value| -> String {
        let m = meta("thread_name").find(|m| &m["tid"] == tid).unwrap();
        m["args"]["name"].as_str().unwrap().to_string()
    };
    let process_meta = meta("process_name").next().unwrap();
    assert_eq!(process.len(), 1, "{process:?}");
    assert_eq!(process[0]["name"], process_meta["args"]["name"]);
    assert_eq!(process[0]["pid"], process_meta["pid"]);
    // No slot is taken for the process's main thread (a thread whose id is the process's).
    assert_eq!(process[0]["named_main"], 0, "{process:?}");
    let of = |cat: &str| -> Vec<&Value> {
        let e = events.iter().filter(|e| e["ph"] == "X" && e["cat"] == cat);
        e.collect()
    };
    let (compiles, jobs) = (of("compile"), of("job"));
    let ns = |v: &Value| v.as_u64().unwrap() * 1000;
    // An event (its times in µs) and a slice (in ns), each as (name, start, duration) in ns.
    let event = |e: &Value| (e["name"].to_string(), ns(&e["ts"]), ns(&e["dur"]));
    let slice = |r: &perfetto::Row| {
        let n = |k: &str| r[k].as_u64().unwrap();
        (r["name"].to_string(), n("ts"), n("dur"))
    };
    // The compiles, where the JSON puts them.
    let mut want: Vec<_> = compiles
        .iter()
        .map(|e| (event(e), thread_name(&e["tid"])))
        .collect();
    let mut got: Vec<_> = top
        .iter()
        .map(|r| {
            assert_eq!(thread_name(&r["tid"]), r["thread"], "{r:?}");
            let thread = r["thread"].as_str().unwrap().to_string();
            (slice(r), thread)
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "the compiles, as Perfetto's engine has them");
    // The jobs, each nested in its compile.
    let parent = |j: &Value| -> String {
        let (t0, t1) = (ns(&j["ts"]), ns(&j["ts"]) + ns(&j["dur"]));
        let holds = |c: &&&Value| {
            c["tid"] == j["tid"] && ns(&c["ts"]) <= t0 && t1 <= ns(&c["ts"]) + ns(&c["dur"])
        };
        compiles.iter().find(holds).unwrap()["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut want: Vec<_> = jobs.iter().map(|j| (parent(j), event(j))).collect();
    let mut got: Vec<_> = nested
        .iter()
        .map(|r| {
            assert_eq!(r["depth"], 1, "{r:?}");
            let parent = r["parent"].as_str().unwrap().to_string();
            (parent, slice(r))
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "the jobs, as Perfetto's engine has them");
    let mut by_parent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in nested {
        let name = r["name"].as_str().unwrap().to_string();
        by_parent
            .entry(r["parent"].as_str().unwrap().to_string())
            .or_default()
            .push(name);
    }
    Imported {
        threads: want_threads(top),
        nested: by_parent,
        counters: counters_as_written(events, counters),
        args: args_by_slice(&compiles, args),
    }
}

/// The top-level slices' threads, by slice name.
fn want_threads(top: &[perfetto::Row]) -> BTreeMap<String, String> {
    let s = |v: &Value| v.as_str().unwrap().to_string();
    top.iter()
        .map(|r| (s(&r["name"]), s(&r["thread"])))
        .collect()
}

/// The engine's counter tracks, checked against the JSON's `memory` samples: a track per series,
/// with every sample, the same least and most.
fn counters_as_written(
    events: &[Value],
    counters: &[perfetto::Row],
) -> BTreeMap<String, (u64, f64, f64)> {
    let mut want: BTreeMap<String, (u64, f64, f64)> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "C") {
        assert_eq!(e["name"], "memory", "{e}");
        for (series, v) in e["args"].as_object().unwrap() {
            let v = v.as_u64().unwrap() as f64;
            let w = want
                .entry(format!("memory {series}"))
                .or_insert((0, f64::MAX, f64::MIN));
            *w = (w.0 + 1, w.1.min(v), w.2.max(v));
        }
    }
    let got: BTreeMap<String, (u64, f64, f64)> = counters
        .iter()
        .map(|r| {
            let f = |k: &str| r[k].as_f64().unwrap();
            let name = r["name"].as_str().unwrap().to_string();
            (name, (r["n"].as_u64().unwrap(), f("low"), f("high")))
        })
        .collect();
    assert_eq!(got, want, "the memory counter, as Perfetto's engine has it");
    got
}

/// The args of the top-level slices, by slice name and key (`args.` taken off), checked against
/// the compile events': each of theirs that is not null is there, with the same value.
fn args_by_slice(
    compiles: &[&Value],
    rows: &[perfetto::Row],
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut args: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for r in rows {
        let s = |k: &str| r[k].as_str().unwrap().to_string();
        let key = s("key").trim_start_matches("args.").to_string();
        args.entry(s("name")).or_default().insert(key, s("value"));
    }
    for e in compiles {
        let got = &args[e["name"].as_str().unwrap()];
        for (k, v) in e["args"].as_object().unwrap() {
            let want = match v {
                Value::Null => continue,
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            assert_eq!(got.get(k), Some(&want), "{k} of {}", e["name"]);
        }
    }
    args
}

#[test]
fn the_profile_imports_into_perfettos_own_engine_without_an_error() {
    let s = Scratch::new();
    let report = two_batches(&s, &["--profile", "profile.json"]);
    let p = imported_as_written(&s.join("profile.json"));
    // Each compile on the track of the slot the report says it ran in, with its outcome and key.
    for c in report["compiles"].as_array().unwrap() {
        let graph = c["stem"].as_str().unwrap();
        let slot = c["attempts"][0]["slot"].as_u64().unwrap();
        assert_eq!(p.threads[graph], format!("slot {}", slot + 1));
        assert_eq!(p.args[graph]["outcome"], c["attempts"][0]["outcome"]);
        assert_eq!(p.args[graph]["cache_key"], c["key"]);
    }
    let outcomes: BTreeMap<&str, &str> = p
        .args
        .iter()
        .map(|(g, a)| (g.as_str(), a["outcome"].as_str()))
        .collect();
    let want = [
        ("bad", "remembered"),
        ("good", "hit"),
        ("other", "compiled"),
        ("worse", "failed"),
    ];
    assert_eq!(outcomes, BTreeMap::from(want));
    assert_eq!(p.args["good"]["tier"], "local");
    // The jobs where nxcc ran them: the whole pipeline of the compile, the failed job of the
    // failure, none for the hit and the remembered failure.
    assert_eq!(p.nested["other"], PIPELINE);
    assert_eq!(p.nested["worse"], ["HLOToTensorizer"]);
    assert!(!p.nested.contains_key("good") && !p.nested.contains_key("bad"));
    // The memory: admitted and measured, both seen, both within the budget.
    let budget = (900u64 << 20) as f64;
    let names: Vec<&String> = p.counters.keys().collect();
    assert_eq!(names, ["memory admitted", "memory budget", "memory rss"]);
    assert_eq!(p.counters["memory budget"].1, budget);
    assert_eq!(p.counters["memory budget"].2, budget);
    for series in ["memory admitted", "memory rss"] {
        let (_, low, high) = p.counters[series];
        assert!(
            low >= 0.0 && high > 0.0 && high <= budget,
            "{series}: {low}..{high}"
        );
    }
}

/// The jobs of a compile of the simulated toolchain, in order.
const PIPELINE: [&str; 6] = [
    "HLOToTensorizer",
    "XLAInferGoldens",
    "Frontend",
    "StaticIOTranspose",
    "WalrusDriver",
    "Kelper",
];

/// A simulated compile of the example through a cache, its profile written to `one.json`.
fn profiled_compile(s: &Scratch) {
    let o = s.sim_run(
        "trn2",
        &[
            "--output",
            "m.neff",
            "--profile",
            "one.json",
            "--cache_dir",
            "cache",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn a_compiles_profile_imports_into_perfettos_own_engine_without_an_error() {
    let s = Scratch::new();
    profiled_compile(&s);
    let p = imported_as_written(&s.join("one.json"));
    assert_eq!(
        p.threads,
        BTreeMap::from([(MODEL.into(), "compile".into())])
    );
    assert_eq!(p.args[MODEL]["outcome"], "compiled");
    assert_eq!(p.args[MODEL]["cache_key"].len(), 64);
    assert_eq!(p.nested[MODEL], PIPELINE);
    let names: Vec<&String> = p.counters.keys().collect();
    assert_eq!(names, ["memory admitted", "memory rss"]);
    assert!(p.counters["memory rss"].2 > 0.0);
}

/// The trace `whole` with the job that starts last running 1 µs past the end of its compile.
fn overrun(whole: &[u8]) -> String {
    let mut trace: Value = serde_json::from_slice(whole).unwrap();
    let events = trace["traceEvents"].as_array_mut().unwrap();
    let n = |e: &Value, k: &str| e[k].as_u64().unwrap();
    let job = (0..events.len())
        .filter(|&i| events[i]["cat"] == "job")
        .max_by_key(|&i| n(&events[i], "ts"))
        .unwrap();
    let (tid, ts) = (events[job]["tid"].clone(), n(&events[job], "ts"));
    let compile = events
        .iter()
        .find(|c| {
            c["cat"] == "compile"
                && c["tid"] == tid
                && n(c, "ts") <= ts
                && ts < n(c, "ts") + n(c, "dur")
        })
        .unwrap();
    let end = n(compile, "ts") + n(compile, "dur");
    events[job]["dur"] = (end - ts + 1).into();
    trace.to_string()
}

#[test]
fn perfettos_engine_reports_a_truncated_profile_and_a_job_outside_its_compile() {
    // The check can fail: the same profile, broken two ways, is refused by the engine.
    let s = Scratch::new();
    profiled_compile(&s);
    let whole = std::fs::read(s.join("one.json")).unwrap();
    let engine = perfetto::engine();
    let loaded = engine.load(&s.join("one.json"), &[perfetto::ERRORS]);
    assert_eq!((loaded.error, &loaded.results[..]), (None, &[vec![]][..]));
    // Cut short (a profile half-written): it does not load.
    std::fs::write(s.join("cut.json"), &whole[..whole.len() / 2]).unwrap();
    let loaded = engine.load(&s.join("cut.json"), &[perfetto::ERRORS]);
    let error = loaded.error.expect("a truncated profile loaded");
    assert!(error.contains("incomplete"), "{error}");
    // Its last job running past the end of its compile: the engine drops it, and says so.
    std::fs::write(s.join("overrun.json"), overrun(&whole)).unwrap();
    let loaded = engine.load(&s.join("overrun.json"), &[perfetto::ERRORS]);
    assert_eq!(loaded.error, None);
    let errors = &loaded.results[0];
    assert!(
        errors
            .iter()
            .any(|r| r["name"] == "slice_drop_overlapping_complete_event"),
        "{errors:?}"
    );
}

/// Headless Chromium (Debian's `chromium`): a page loaded from a file, its DOM after load, its
/// console, and a screenshot.
mod chromium {
    use super::*;

    /// What the browser made of a page.
    pub struct Visit {
        /// The DOM once the page loaded (its scripts ran).
        pub dom: String,
        /// Every console message (errors, uncaught exceptions, failed loads).
        pub console: Vec<String>,
        /// A screenshot, PNG.
        pub screenshot: PathBuf,
    }

    /// The browser, or a failure that says why there is none.
    pub fn program() -> PathBuf {
        for p in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
            if Path::new(p).is_file() {
                return PathBuf::from(p);
            }
        }
        panic!(
            "headless Chromium is not installed (apt-get install chromium): the timings page cannot be tested in a browser"
        );
    }

    fn run(page: &Path, dir: &Path, what: &[&str]) -> std::process::Output {
        let mut c = Command::new(program());
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(what)
        .arg(format!("file://{}", page.display()))
        // Everything the browser writes stays in the test's directory.
        .env("HOME", dir)
        .env("TMPDIR", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_CACHE_HOME", dir.join("cache"));
        c.output().expect("run chromium")
    }

    /// Load `page`: its DOM once loaded and its console, then a screenshot (in `dir`).
    pub fn visit(page: &Path, dir: &Path) -> Visit {
        let o = run(page, dir, &["--dump-dom"]);
        assert!(o.status.success(), "chromium: {}", text(&o.stderr));
        let console = text(&o.stderr)
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(str::to_string)
            .collect();
        let screenshot = dir.join("page.png");
        let arg = format!("--screenshot={}", screenshot.display());
        let s = run(page, dir, &[&arg, "--window-size=1280,1000"]);
        assert!(
            s.status.success() && screenshot.is_file(),
            "chromium: {}",
            text(&s.stderr)
        );
        Visit {
            dom: text(&o.stdout).to_string(),
            console,
            screenshot,
        }
    }
}

/// The pixels of an 8-bit RGB or RGBA PNG (as Chromium writes screenshots), RGB each.
fn png_pixels(path: &Path) -> Vec<[u8; 3]> {
    use std::io::Read;
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut pos, mut idat) = (8, Vec::new());
    let (mut w, mut h, mut channels) = (0usize, 0usize, 0usize);
    while pos + 8 <= b.len() {
        let len = u32::from_be_bytes(b[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = &b[pos + 4..pos + 8];
        let data = &b[pos + 8..pos + 8 + len];
        match kind {
            b"IHDR" => {
                w = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                h = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                assert_eq!(data[8], 8, "8-bit samples");
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    t => panic!("PNG colour type {t}"),
                };
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        pos += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .unwrap();
    let stride = w * channels;
    let mut prev = vec![0u8; stride];
    let mut out = Vec::with_capacity(w * h);
    for y in 0..h {
        let line = &raw[y * (stride + 1)..(y + 1) * (stride + 1)];
        let mut cur = line[1..].to_vec();
        for i in 0..stride {
            let a = if i >= channels {
                cur[i - channels] as i32
            } else {
                0
            };
            let (up, c) = (
                prev[i] as i32,
                if i >= channels {
                    prev[i - channels] as i32
                } else {
                    0
                },
            );
            let add = match line[0] {
                0 => 0,
                1 => a,
                2 => up,
                3 => (a + up) / 2,
                4 => {
                    let p = a + up - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - up).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        up
                    } else {
                        c
                    }
                }
                f => panic!("PNG filter {f}"),
            };
            cur[i] = (cur[i] as i32 + add) as u8;
        }
        for px in cur.chunks(channels) {
            out.push([px[0], px[1], px[2]]);
        }
        prev = cur;
    }
    out
}

/// How many pixels are (nearly) the colour `#rrggbb`.
fn count_colour(pixels: &[[u8; 3]], hex: &str) -> usize {
    let c = |i: usize| u8::from_str_radix(&hex[1 + 2 * i..3 + 2 * i], 16).unwrap() as i32;
    pixels
        .iter()
        .filter(|p| (0..3).all(|i| (p[i] as i32 - c(i)).abs() <= 6))
        .count()
}

#[test]
fn the_console_of_headless_chromium_is_read() {
    // The check the page must pass catches an error when there is one.
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("broken.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><p id=\"x\">x</p><script>document.getElementById('x').setAttribute('data-ran','yes');undefinedFunction();</script></body></html>",
    )
    .unwrap();
    let v = chromium::visit(&page, dir.path());
    assert!(v.dom.contains("data-ran=\"yes\""), "{}", v.dom);
    assert!(
        v.console.iter().any(|l| l.contains("undefinedFunction")),
        "{:?}",
        v.console
    );
}

#[test]
fn the_timings_page_in_headless_chromium() {
    let s = Scratch::new();
    two_batches(&s, &["--timings", "timings.html"]);
    let page = s.join("timings.html");
    let browser = tempfile::tempdir().unwrap();
    let v = chromium::visit(&page, browser.path());
    assert!(v.console.is_empty(), "console messages: {:#?}", v.console);
    let dom = &v.dom;
    // Every compile a bar, coloured by its outcome.
    for (graph, outcome) in [
        ("good", "hit"),
        ("bad", "remembered"),
        ("worse", "failed"),
        ("other", "compiled"),
    ] {
        let bar = format!("data-graph=\"{graph}\" data-outcome=\"{outcome}\"");
        assert!(dom.contains(&bar), "no {bar} in the page");
    }
    // The memory chart against the budget, the tables, the summary first.
    for needle in [
        "data-series=\"memory\"",
        "data-series=\"budget\"",
        "<section id=\"slowest\">",
        "<section id=\"failures\">",
        "<section id=\"hits\">",
        "<td>local</td>",
        "class=\"summary\" id=\"summary\">4 compiles in ",
        "1 compiled, 1 hit (1 local), 1 failed, 1 remembered failure; memory: at most ",
        "of a 900 MiB budget",
    ] {
        assert!(dom.contains(needle), "{needle} not in the DOM");
    }
    // The tables link to the bars.
    let bar_id = |graph: &str| -> String {
        let at = dom.find(&format!("data-graph=\"{graph}\"")).unwrap();
        let id = dom[..at].rfind("id=\"bar-").unwrap();
        dom[id + 4..].split('"').next().unwrap().to_string()
    };
    let failures = &dom[dom.find("<section id=\"failures\">").unwrap()..];
    assert!(failures.contains(&format!("href=\"#{}\"", bar_id("worse"))));
    assert!(failures.contains(&format!("href=\"#{}\"", bar_id("bad"))));
    // What a person sees: the page, its failed bar in red, its hit in blue.
    let pixels = png_pixels(&v.screenshot);
    let white = count_colour(&pixels, "#ffffff");
    assert!(white < pixels.len() * 97 / 100, "the screenshot is blank");
    assert!(
        count_colour(&pixels, "#c8453d") > 50,
        "no failed bar to see"
    );
    assert!(count_colour(&pixels, "#4a78c2") > 50, "no hit bar to see");
    // (A legend swatch is 10 × 10 pixels: the compiled bar is far more.)
    assert!(
        count_colour(&pixels, "#3d8b5f") > 1000,
        "no compiled bar to see"
    );
}

#[test]
fn the_profile_in_perfettos_ui_in_headless_chromium() {
    let s = Scratch::new();
    two_batches(&s, &["--profile", "profile.json"]);
    let engine = perfetto::engine();
    let browser = tempfile::tempdir().unwrap();
    let show = |trace: &str| {
        let shot = browser.path().join(format!("{trace}.png"));
        let work = browser.path().join(trace);
        std::fs::create_dir(&work).unwrap();
        let shown = engine.show(&chromium::program(), &s.join(trace), &shot, &work);
        (shown, shot)
    };
    let (ui, shot) = show("profile.json");
    // No error dialog, no console error, no error in the UI's engine; every event in it.
    assert_eq!(ui.dialog, None);
    assert!(ui.console.is_empty(), "console errors: {:#?}", ui.console);
    assert_eq!(ui.errors, Some(0));
    assert_eq!(ui.slices, Some(4 + PIPELINE.len() as u64 + 1));
    // The process, a track per slot, the memory series.
    let written: Value =
        serde_json::from_slice(&std::fs::read(s.join("profile.json")).unwrap()).unwrap();
    let p = format!("nxcc parallel-compile {}", written["traceEvents"][0]["pid"]);
    let tracks: Vec<String> = ["", "/slot 1 1", "/slot 2 2"]
        .iter()
        .chain(&["/memory admitted", "/memory budget", "/memory rss"])
        .map(|t| format!("{p}{t}"))
        .collect();
    assert_eq!(ui.tracks, tracks);
    let pixels = png_pixels(&shot);
    let white = count_colour(&pixels, "#ffffff");
    assert!(white < pixels.len() * 97 / 100, "the screenshot is blank");

    // The same check fails: a profile cut short is the UI's error dialog, no track.
    let whole = std::fs::read(s.join("profile.json")).unwrap();
    std::fs::write(s.join("cut.json"), &whole[..whole.len() / 2]).unwrap();
    let (ui, _) = show("cut.json");
    let dialog = ui.dialog.expect("no error dialog for a truncated profile");
    assert!(dialog.contains("JSON trace file is incomplete"), "{dialog}");
    assert!(ui.tracks.is_empty(), "{:?}", ui.tracks);
    // A job past the end of its compile: the UI shows the trace, its engine counts the error.
    std::fs::write(s.join("overrun.json"), overrun(&whole)).unwrap();
    let (ui, _) = show("overrun.json");
    assert!(ui.errors.is_some_and(|n| n > 0), "{ui:?}");
}

/// The args of the compile events of a trace, by graph.
fn compile_args(trace: &Path) -> Vec<(String, Value)> {
    let trace: Value = serde_json::from_slice(&std::fs::read(trace).unwrap()).unwrap();
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "compile")
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["args"].clone()))
        .collect()
}

#[test]
fn a_tool_killed_by_a_signal_and_an_interrupted_batch_are_said_in_the_trace() {
    let s = Scratch::new();
    // `compile --profile`: a tool that crashes is a failure with its signal.
    let o = s
        .sim_cmd("trn2", &["--output", "m.neff", "--profile", "one.json"])
        .env("NXCC_SIM_FAULT", "walrus_driver:segv")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let one = compile_args(&s.join("one.json"));
    assert_eq!(one.len(), 1, "{one:?}");
    let a = &one[0].1;
    assert_eq!(a["outcome"], "failed", "{a}");
    assert_eq!(a["signal"], "SIGSEGV", "{a}");
    assert!(a["code"].as_str().is_some_and(|c| !c.is_empty()), "{a}");

    // An interrupted batch (one slot, the first compile's Backend hanging): that compile is
    // cancelled.
    std::fs::create_dir_all(s.join("g")).unwrap();
    for g in ["a.pb", "b.pb"] {
        std::fs::copy(s.join(MODEL), s.join("g").join(g)).unwrap();
    }
    let before = s.records().len();
    let mut child = s
        .parallel_cmd(
            &[
                "g",
                "--jobs",
                "1",
                "--output-dir",
                "out",
                "--profile",
                "p.json",
            ],
            &[],
        )
        .env("NXCC_SIM_FAULT", "walrus_driver:hang")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Once a tool of the first compile has finished, the compile is under way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while s.records().len() == before {
        assert!(std::time::Instant::now() < deadline, "no tool ever ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let batch = compile_args(&s.join("p.json"));
    let outcomes: Vec<(&str, &str)> = batch
        .iter()
        .map(|(g, a)| (g.as_str(), a["outcome"].as_str().unwrap()))
        .collect();
    // The one that never started has no bar.
    assert_eq!(outcomes, [("a", "cancelled")]);
}
