//! The compile cache, through the built `nxcc` and the simulated toolchain: concurrent identical
//! compiles, a lock holder killed mid-compile, corruption, remembered failures, which flags
//! matter to the key, `cache gc`/`verify`/`stats`, remote URLs.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{cached_args, entry_neff, text, verifies, Scratch};

const MODEL: &str = "mlp.hlo_module.pb";

fn compile_args<'a>(output: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["compile"];
    v.extend(cached_args(MODEL));
    v.extend(["--output", output]);
    v.extend_from_slice(extra);
    v
}

fn tool_runs(s: &Scratch, tool: &str) -> usize {
    s.records().iter().filter(|r| r["tool"] == tool).count()
}

fn stats(s: &Scratch) -> serde_json::Value {
    let o = s.run(&["cache", "stats", "--cache_dir", "cache", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

const HIT: &str = "Using a cached neff at ";

#[test]
fn eight_identical_compiles_at_once_run_the_tools_once() {
    let s = Scratch::new();
    let children: Vec<Child> = (0..8)
        .map(|i| {
            let out = format!("out{i}.neff");
            s.nxcc(&compile_args(&out, &[]))
                .env("NXCC_SIM_WORK_MS", "walrus_driver:300")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for o in &outputs {
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    assert_eq!(tool_runs(&s, "walrus_driver"), 1, "{:?}", s.records());
    assert_eq!(tool_runs(&s, "hlo2penguin"), 1);
    let hits = outputs
        .iter()
        .filter(|o| text(&o.stdout).contains(HIT))
        .count();
    assert_eq!(hits, 7);
    let first = std::fs::read(s.join("out0.neff")).unwrap();
    assert!(verifies(&s.join("out0.neff")));
    for i in 1..8 {
        assert_eq!(
            std::fs::read(s.join(&format!("out{i}.neff"))).unwrap(),
            first
        );
    }
    let st = stats(&s);
    assert_eq!(st["entries"], 1);
    assert_eq!(st["temporary"], 0);
}

/// Processes whose command line mentions `needle` and whose environment holds `tag`.
fn tagged_processes(tag: &str, needle: &str) -> Vec<u32> {
    common::processes_with_env("NXCC_TEST_TAG", tag)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn a_lock_holder_killed_mid_compile_leaves_no_stale_lock_and_no_entry() {
    let s = Scratch::new();
    let tag = format!("lock-holder-{}", std::process::id());
    let mut holder = s
        .nxcc(&compile_args("a.neff", &[]))
        .env("NXCC_SIM_WORK_MS", "walrus_driver:10000")
        .env("NXCC_TEST_TAG", &tag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while tagged_processes(&tag, "walrus_driver").is_empty() {
        assert!(Instant::now() < deadline, "walrus_driver never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: killing the process group of the child we started.
    unsafe { libc::killpg(holder.id() as i32, libc::SIGKILL) };
    holder.wait().unwrap();
    // No entry (and nothing but perhaps a temporary directory) for the key.
    let st = stats(&s);
    assert_eq!(st["entries"], 0, "{st}");
    assert_eq!(st["failed"], 0, "{st}");
    let t = Instant::now();
    let o = s.run(&compile_args("b.neff", &[]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "waited {:?} for a dead holder's lock",
        t.elapsed()
    );
    assert!(!text(&o.stdout).contains(HIT));
    assert!(verifies(&s.join("b.neff")));
    assert!(!s.join("a.neff").exists());
    assert_eq!(stats(&s)["entries"], 1);
    let v = s.run(&["cache", "verify", "--cache_dir", "cache"]);
    assert!(v.status.success(), "{}", text(&v.stdout));
    // Whatever the killed compile left behind is gone once nothing holds it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tagged_processes(&tag, "").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the killed compile's processes linger"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_corrupt_entry_is_evicted_and_compiled_again() {
    let s = Scratch::new();
    assert!(s.run(&compile_args("a.neff", &[])).status.success());
    assert_eq!(tool_runs(&s, "walrus_driver"), 1);
    let neff = entry_neff(&s.join("cache"));
    let mut bytes = std::fs::read(&neff).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&neff, &bytes).unwrap();

    let o = s.run(&compile_args("b.neff", &[]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("is corrupt") && !out.contains(HIT), "{out}");
    assert_eq!(tool_runs(&s, "walrus_driver"), 2, "the tools ran again");
    assert!(verifies(&s.join("b.neff")));
    // The entry was replaced by a sound one: the next compile hits, with the new compile's bytes.
    let o = s.run(&compile_args("c.neff", &[]));
    assert!(text(&o.stdout).contains(HIT));
    assert_eq!(tool_runs(&s, "walrus_driver"), 2);
    assert_eq!(
        std::fs::read(s.join("c.neff")).unwrap(),
        std::fs::read(s.join("b.neff")).unwrap()
    );

    // `cache verify` finds corruption too, and evicts it.
    std::fs::write(entry_neff(&s.join("cache")), b"not a neff").unwrap();
    let v = s.run(&["cache", "verify", "--cache_dir", "cache"]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v.stdout));
    assert!(text(&v.stdout).contains("corrupt: "), "{}", text(&v.stdout));
    assert_eq!(stats(&s)["entries"], 0);
    let v = s.run(&["cache", "verify", "--cache_dir", "cache"]);
    assert_eq!(v.status.code(), Some(0));
}

fn error_lines(stderr: &[u8]) -> Vec<String> {
    text(stderr)
        .lines()
        .filter(|l| l.starts_with('['))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_failed_compile_is_remembered_until_retried() {
    let s = Scratch::new();
    let fault = ("NXCC_SIM_FAULT", "walrus_driver:exit=3");
    let first = s
        .nxcc(&compile_args("a.neff", &[]))
        .env(fault.0, fault.1)
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(70));
    let lines = error_lines(&first.stderr);
    assert!(
        lines.iter().any(|l| l.contains("exited abnormally")),
        "{lines:?}"
    );
    assert_eq!(tool_runs(&s, "walrus_driver"), 1);
    assert_eq!(stats(&s)["failed"], 1);

    // The same compile fails at once, with the same error lines, running nothing.
    let again = s
        .nxcc(&compile_args("a.neff", &[]))
        .env(fault.0, fault.1)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(70));
    assert_eq!(error_lines(&again.stderr), lines);
    assert!(text(&again.stdout).contains("--retry_failed_compilation"));
    assert_eq!(tool_runs(&s, "walrus_driver"), 1);
    assert_eq!(tool_runs(&s, "hlo2penguin"), 1);
    // Even without the fault: the cache answers (the key does not include the environment).
    let o = s.run(&compile_args("a.neff", &[]));
    assert_eq!(o.status.code(), Some(70));
    assert_eq!(tool_runs(&s, "walrus_driver"), 1);

    // --retry_failed_compilation compiles again: still failing, then fixed.
    let retried = s
        .nxcc(&compile_args("a.neff", &["--retry_failed_compilation"]))
        .env(fault.0, fault.1)
        .output()
        .unwrap();
    assert_eq!(retried.status.code(), Some(70));
    assert_eq!(tool_runs(&s, "walrus_driver"), 2);
    let fixed = s.run(&compile_args("a.neff", &["--retry_failed_compilation"]));
    assert!(fixed.status.success(), "{}", text(&fixed.stderr));
    assert_eq!(tool_runs(&s, "walrus_driver"), 3);
    assert!(verifies(&s.join("a.neff")));
    let st = stats(&s);
    assert_eq!(
        (st["entries"].as_u64(), st["failed"].as_u64()),
        (Some(1), Some(0))
    );
    let hit = s.run(&compile_args("b.neff", &[]));
    assert!(text(&hit.stdout).contains(HIT));
}

#[test]
fn only_flags_that_can_change_the_output_change_the_key() {
    let s = Scratch::new();
    assert!(s.run(&compile_args("base.neff", &[])).status.success());
    let runs = || tool_runs(&s, "hlo2penguin");
    assert_eq!(runs(), 1);
    std::fs::create_dir(s.join("fresh")).unwrap();
    let neutral: [&[&str]; 4] = [
        &["--verbose", "info"],
        &["--temp-dir", "fresh/work"],
        &["--logfile", "other-log.txt"],
        &["--job-timeout", "100"],
    ];
    for (i, extra) in neutral.iter().enumerate() {
        let out = format!("neutral{i}.neff");
        let o = s.run(&compile_args(&out, extra));
        assert!(o.status.success(), "{extra:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stdout).contains(HIT),
            "{extra:?}: {}",
            text(&o.stdout)
        );
        assert_eq!(runs(), 1, "{extra:?} ran the tools");
        assert_eq!(
            std::fs::read(s.join(&out)).unwrap(),
            std::fs::read(s.join("base.neff")).unwrap()
        );
    }
    assert!(!s.join("fresh/work").exists(), "a hit lays nothing out");
    let relevant: [&[&str]; 4] = [
        &["-O1"],
        &["--lnc", "1"],
        &["--model-type", "transformer"],
        &["--tensorizer-options=--fuse-all"],
    ];
    for (i, extra) in relevant.iter().enumerate() {
        let o = s.run(&compile_args("relevant.neff", extra));
        assert!(o.status.success(), "{extra:?}: {}", text(&o.stderr));
        assert!(!text(&o.stdout).contains(HIT), "{extra:?} hit");
        assert_eq!(runs(), 2 + i, "{extra:?} did not run the tools");
    }
    assert_eq!(stats(&s)["entries"], 5);
}

/// A copy of the example model with distinct trailing bytes (so its key differs).
fn model_variant(s: &Scratch, name: &str) {
    let mut bytes = std::fs::read(s.join(MODEL)).unwrap();
    bytes.extend_from_slice(name.as_bytes());
    std::fs::write(s.join(name), bytes).unwrap();
}

fn compile_model<'a>(model: &'a str, output: &'a str) -> Vec<&'a str> {
    let mut v = compile_args(output, &[]);
    v[1] = model;
    v
}

#[test]
fn gc_evicts_least_recently_used_first_and_leaves_a_consistent_cache() {
    let s = Scratch::new();
    let models = ["m0.pb", "m1.pb", "m2.pb", "m3.pb"];
    for m in models {
        model_variant(&s, m);
        assert!(s.run(&compile_model(m, "out.neff")).status.success());
        std::thread::sleep(Duration::from_millis(5));
    }
    // Use m0 and m1 again: they become the most recently used.
    for m in ["m1.pb", "m0.pb"] {
        let o = s.run(&compile_model(m, "out.neff"));
        assert!(text(&o.stdout).contains(HIT));
        std::thread::sleep(Duration::from_millis(5));
    }
    // A leftover of a compile killed while publishing: ignored by stats, removed by gc.
    let leftover = s.join(&format!("cache/nxcc-v1/ab/.tmp-{}-1-2-3", "ab".repeat(32)));
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::write(leftover.join("model.neff"), b"half").unwrap();
    let st = stats(&s);
    assert_eq!(st["entries"], 4);
    let total = st["bytes"].as_u64().unwrap();
    let limit = (total / 2 + total / 8).to_string();
    let o = s.run(&[
        "cache",
        "gc",
        "--max-size",
        &limit,
        "--cache_dir",
        "cache",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["evicted"], 2, "{report}");
    assert!(report["bytes_left"].as_u64().unwrap() <= limit.parse().unwrap());
    assert!(!leftover.exists());
    let v = s.run(&["cache", "verify", "--cache_dir", "cache"]);
    assert!(v.status.success(), "{}", text(&v.stdout));
    assert_eq!(stats(&s)["entries"], 2);
    let runs_before = tool_runs(&s, "walrus_driver");
    for m in ["m0.pb", "m1.pb"] {
        let o = s.run(&compile_model(m, "out.neff"));
        assert!(text(&o.stdout).contains(HIT), "{m} was evicted");
    }
    assert_eq!(tool_runs(&s, "walrus_driver"), runs_before);
    let o = s.run(&compile_model("m2.pb", "out.neff"));
    assert!(!text(&o.stdout).contains(HIT), "m2 was kept");
    // clear empties it.
    let o = s.run(&["cache", "clear", "--cache_dir", "cache"]);
    assert!(o.status.success());
    assert_eq!(stats(&s)["entries"], 0);
}

/// Every file under `dir` whose name ends with `suffix`.
fn files_ending(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(files_ending(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            found.push(p);
        }
    }
    found
}

#[test]
fn gc_takes_an_evicted_entry_s_lock_along_and_says_what_it_did_in_words() {
    let s = Scratch::new();
    let o = s.run(&compile_args("out.neff", &[]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    // A compile's holder removes its lock when done; a free lock file beside the entry (as an
    // older nxcc or a compile killed before its release leaves one) goes with the entry.
    assert!(files_ending(&s.join("cache"), ".lock").is_empty());
    let entry = entry_neff(&s.join("cache")).parent().unwrap().to_path_buf();
    let lock = entry.with_file_name(format!(
        "{}.lock",
        entry.file_name().unwrap().to_string_lossy()
    ));
    std::fs::File::create(&lock).unwrap();
    let o = s.run(&["cache", "gc", "--max-size", "0", "--cache_dir", "cache"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let said = text(&o.stdout);
    assert!(said.starts_with("evicted 1 entry ("), "{said}");
    assert!(said.ends_with("; 0 entries left (0 bytes)\n"), "{said}");
    assert!(files_ending(&s.join("cache"), ".lock").is_empty());
    // Nothing is left for the next one to clean up.
    let o = s.run(&["cache", "gc", "--max-size", "0", "--cache_dir", "cache"]);
    assert_eq!(
        text(&o.stdout),
        "evicted 0 entries (0 bytes); 0 entries left (0 bytes)\n"
    );
    // What gc removes besides entries is named for what it is.
    let stale = s.join(&format!("cache/nxcc-v1/ab/.tmp-{}-1-2-3", "ab".repeat(32)));
    std::fs::create_dir_all(&stale).unwrap();
    let o = s.run(&["cache", "gc", "--max-size", "0", "--cache_dir", "cache"]);
    assert_eq!(
        text(&o.stdout),
        "evicted 0 entries (0 bytes); 0 entries left (0 bytes); removed 1 stale file no compile uses (unfinished entries, free locks)\n"
    );
    let o = s.run(&["cache", "verify", "--cache_dir", "cache"]);
    assert_eq!(
        text(&o.stdout),
        "checked 0 entries: 0 ok, 0 failed compiles, 0 corrupt\n"
    );
}

#[test]
fn a_plan_whose_product_is_not_just_the_neff_compiles_without_the_cache() {
    let s = Scratch::new();
    for round in 1..=2 {
        // -O3 runs no backend: it writes no NEFF.
        let o = s.run(&compile_args("o3.neff", &["-O3"]));
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(tool_runs(&s, "hlo2penguin"), round);
    }
    assert_eq!(stats(&s)["entries"], 0);
}

#[test]
fn remote_caches_and_bad_cache_commands_are_refused() {
    let s = Scratch::new();
    let mut args = compile_args("a.neff", &[]);
    // (`s3://...` is nxcc's cache in S3: tests/s3/.)
    args[7] = "gs://bucket/prefix";
    let o = s.run(&args);
    assert_eq!(o.status.code(), Some(70));
    assert!(
        text(&o.stderr).contains(
            "[ERROR] [NCC_EDRV110] Remote compile caches are not supported: gs://bucket/prefix"
        ),
        "{}",
        text(&o.stderr)
    );
    assert!(s.records().is_empty());
    for (args, needle) in [
        (
            vec!["cache", "stats", "--cache_dir", "gs://x"],
            "remote compile caches are not supported",
        ),
        (vec!["cache", "gc", "--cache_dir", "c"], "--max-size"),
        (vec!["cache", "shrink"], "unrecognized subcommand 'shrink'"),
        (
            vec!["cache", "gc", "--max-size", "lots", "--cache_dir", "c"],
            "invalid size",
        ),
    ] {
        let o = s.run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(needle),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    // An empty or missing cache directory has nothing in it.
    let st = stats(&s);
    assert_eq!(
        (st["entries"].as_u64(), st["bytes"].as_u64()),
        (Some(0), Some(0))
    );
}

/// The default cache directory of a user whose environment names no home (a service, `env -i`):
/// the home directory the password database gives, never a name in the shared temporary
/// directory that every such user would meet in.
#[test]
fn without_home_the_default_cache_is_under_the_users_home_from_the_password_database() {
    let home = |uid: u32| {
        let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
        let line = passwd
            .lines()
            .find(|l| l.split(':').nth(2) == Some(&uid.to_string()))
            .unwrap_or_else(|| panic!("uid {uid} is not in /etc/passwd"))
            .to_string();
        line.split(':').nth(5).unwrap().to_string()
    };
    let nobody = home(65534);
    let o = std::process::Command::new(common::NXCC)
        .args(["cache", "stats"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let first = text(&o.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert_eq!(first, format!("cache: {nobody}/.cache/nxcc/nxcc-v1"));
}

#[test]
fn stats_of_a_cache_that_is_not_there_says_so_and_shows_the_limit_and_how_full() {
    let s = Scratch::new();
    // A --cache_dir that holds no cache (a mistyped path): the report says so, and what would
    // create it, rather than looking like an empty cache.
    let o = s.run(&["cache", "stats", "--cache_dir", "no-such-cache"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let mut lines = out.lines();
    assert!(
        lines.next().unwrap().ends_with("no-such-cache/nxcc-v1"),
        "{out}"
    );
    assert_eq!(
        lines.next(),
        Some("(no cache here: nothing was ever cached with --cache_dir no-such-cache (check the path; a compile with it creates the cache))"),
        "{out}"
    );
    assert!(!s.join("no-such-cache").exists(), "stats created nothing");
    let o = s.run(&["cache", "stats", "--cache_dir", "no-such-cache", "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["exists"], false);
    assert!(
        j["missing"].as_str().unwrap().starts_with("no cache here"),
        "{j}"
    );
    // The default cache before any compile: reported as not created yet.
    let o = s
        .nxcc(&["cache", "stats"])
        .env("XDG_CACHE_HOME", s.join("fresh-xdg"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("\n(not created yet: the first compile through it creates it)\n"),
        "{}",
        text(&o.stdout)
    );
    // A cache with entries and no limit: says there is none.
    let c = s.run(&compile_args("a.neff", &[]));
    assert!(c.status.success(), "{}", text(&c.stderr));
    let o = s.run(&["cache", "stats", "--cache_dir", "cache"]);
    assert!(
        text(&o.stdout)
            .contains("\nmax_size: none (no limit; nxcc cache config max_size=20G sets one)\n"),
        "{}",
        text(&o.stdout)
    );
    let j = stats(&s);
    assert_eq!(
        (
            j["exists"].as_bool(),
            j["max_size"].is_null(),
            j["used_percent"].is_null()
        ),
        (Some(true), true, true)
    );
    // With a limit: the limit and how full the cache is against it.
    let set = s.run(&["cache", "config", "max_size=1G", "--cache_dir", "cache"]);
    assert!(set.status.success(), "{}", text(&set.stderr));
    let j = stats(&s);
    let bytes = j["bytes"].as_u64().unwrap();
    assert!(bytes > 0);
    assert_eq!(j["max_size"], 1u64 << 30);
    let percent = bytes as f64 * 100.0 / (1u64 << 30) as f64;
    // serde_json reads a float back to within one unit in the last place (its exact parser is an
    // opt-in feature), so the figure is compared to that precision.
    let used = j["used_percent"].as_f64().unwrap();
    assert!(
        (used - percent).abs() <= percent * 1e-12,
        "{used} vs {percent}"
    );
    let o = s.run(&["cache", "stats", "--cache_dir", "cache"]);
    assert!(
        text(&o.stdout).contains(&format!(
            "\nmax_size: 1.0 GiB (1073741824 bytes) ({percent:.1} % full)\n"
        )),
        "{}",
        text(&o.stdout)
    );
}
