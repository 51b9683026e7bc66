//! What a run shows a person: the Chrome trace of a batch (`parallel-compile --profile`) parsed
//! back — one event per compile, its outcome right for a compile, a hit, a failure and a
//! remembered failure, the memory counter never above the budget — and the `--timings` page
//! loaded in a real browser (headless Chromium): no console error, the bars, the memory chart
//! and the tables in its DOM, a screenshot that shows them; a tool killed by a signal
//! (`compile --profile`) and an interrupted batch said as such in the trace.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{text, Scratch};

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
