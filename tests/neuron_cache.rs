//! `parallel-compile --neuron-cache` and `cache stats|verify|clean --neuron-cache` on a
//! framework compile cache each test builds itself (`neuronxcc-<version>/MODULE_*/` with a
//! graph and `compile_flags.json`): NEFFs byte-identical to plain compiles, done and failed
//! entries untouched, foreign locks skipped, dead runs' locks taken over, links refused, an
//! interrupt or a kill leaving nothing half-made, the memory budget kept, and a framework-side
//! reader written here from the layout alone agreeing with `cache stats`.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    compile_spans, freeze, max_overlap, proc_state, processes_with_env, text, verifies,
    work_dir_of, Scratch,
};
use serde_json::Value;

/// The version directory nxcc's pipeline on the simulated toolchain compiles by default.
const SIM_VERSION: &str = "2.24.5133.0+nxcc-sim";
const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/models");

fn version_dir(s: &Scratch) -> PathBuf {
    s.join(&format!("nc/neuronxcc-{SIM_VERSION}"))
}

/// An entry `MODULE_<name>+<flags hash>` with the graph `model` (a file of the example zoo, or
/// raw bytes) under `graph_name`, and `flags`.
fn entry(s: &Scratch, name: &str, graph: &[u8], graph_name: &str, flags: &[&str]) -> PathBuf {
    let d = version_dir(s).join(format!("MODULE_{name}+d41d8cd9"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(graph_name), graph).unwrap();
    std::fs::write(
        d.join("compile_flags.json"),
        serde_json::to_vec(&flags).unwrap(),
    )
    .unwrap();
    d
}

/// [`entry`] with the graph under the framework's usual name, `model.hlo_module.pb`.
fn module_entry(s: &Scratch, name: &str, graph: &[u8], flags: &[&str]) -> PathBuf {
    entry(s, name, graph, "model.hlo_module.pb", flags)
}

fn zoo(model: &str) -> Vec<u8> {
    std::fs::read(Path::new(MODELS).join(model)).unwrap()
}

/// The example model made distinct by an unknown field a reader skips.
fn variant(tag: &str) -> Vec<u8> {
    let mut b = zoo("mlp.hlo_module.pb");
    b.extend_from_slice(&[0xc2, 0x3e, tag.len() as u8]);
    b.extend_from_slice(tag.as_bytes());
    b
}

/// `nxcc parallel-compile --neuron-cache nc --allow-simulated EXTRA -- <a simulated compile>`.
fn parallel(s: &Scratch, extra: &[&str]) -> Command {
    let mut args = vec!["--neuron-cache", "nc", "--allow-simulated"];
    args.extend(extra);
    let mut c = s.parallel_cmd(&args, &[]);
    c.env("TMPDIR", tmp_dir(s));
    c
}

/// `parallel-compile` of the framework's cache `nc` by the external `compiler`, with `extra`
/// options, and the scratch's own temporary directory.
fn with_compiler(s: &Scratch, compiler: &Path, extra: &[&str]) -> Command {
    let own = ["parallel-compile", "--neuron-cache", "nc", "--compiler"];
    let compiler = compiler.to_str().unwrap();
    let args = [&own[..], &[compiler], extra, &["--", "--target", "trn2"]].concat();
    let mut c = s.nxcc(&args);
    c.env("TMPDIR", tmp_dir(s));
    c
}

/// The scratch's own temporary directory (the entries' private work directories go there).
fn tmp_dir(s: &Scratch) -> PathBuf {
    let t = s.join("tmp");
    std::fs::create_dir_all(&t).unwrap();
    t
}

/// This host's name, as nxcc writes it in its lock files.
fn host() -> String {
    String::from_utf8(Command::new("uname").arg("-n").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string()
}

/// A plain `nxcc compile GRAPH FLAGS --target trn2 --toolchain sim` to
/// `<dir>/model.<entry>.neff`: the name the framework's wrapper gives the NEFF it compiles for
/// the entry, which the NEFF's header records.
fn plain_compile(s: &Scratch, graph: &Path, flags: &[&str], dir: &str) -> Vec<u8> {
    std::fs::create_dir_all(s.join(dir)).unwrap();
    let entry = graph
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let out = s.join(&format!("{dir}/model.{entry}.neff"));
    let mut args = vec!["compile", "--target", "trn2", "--toolchain", "sim"];
    args.extend(flags);
    let g = graph.display().to_string();
    let o = out.display().to_string();
    let log = s.join(&format!("{dir}/log.txt")).display().to_string();
    args.extend([
        g.as_str(),
        "--output",
        o.as_str(),
        "--logfile",
        log.as_str(),
    ]);
    let r = s.run(&args);
    assert!(r.status.success(), "{}", text(&r.stderr));
    std::fs::read(out).unwrap()
}

/// Every path below `dir` whose name satisfies `pred`.
fn find(dir: &Path, pred: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if pred(&e.file_name().to_string_lossy()) {
            out.push(p.clone());
        }
        if e.file_type().unwrap().is_dir() {
            out.extend(find(&p, pred));
        }
    }
    out
}

fn no_leftovers(dir: &Path) {
    let left = find(dir, &|n| {
        n.ends_with(".lock") && n.starts_with("model.")
            || n.starts_with(".nxcc-tmp-")
            || n.contains(".nxcc-")
    });
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An entry to do: its name, its graph, the graph's file name, its flags.
type Todo = (&'static str, Vec<u8>, &'static str, Vec<&'static str>);

/// Entries to do: graphs of the zoo with several flag sets, one in the older layout.
fn todo_entries() -> Vec<Todo> {
    vec![
        (
            "mlp",
            zoo("mlp.hlo_module.pb"),
            "model.hlo_module.pb",
            vec![],
        ),
        (
            "mlpO1",
            zoo("mlp.hlo_module.pb"),
            "model.hlo_module.pb",
            vec!["-O1"],
        ),
        (
            "attn",
            zoo("attention.hlo_module.pb"),
            "model.hlo_module.pb",
            vec!["--model-type=transformer", "-O2"],
        ),
        (
            "conv",
            zoo("conv.hlo_module.pb"),
            "model.hlo.pb",
            vec!["--lnc", "1"],
        ),
    ]
}

/// Each entry to do now holds the NEFF a plain compile of its graph writes, and the marker.
fn completed_as_plain_compiles(s: &Scratch, todo: &[Todo]) {
    for (name, graph, file, flags) in todo {
        let d = version_dir(s).join(format!("MODULE_{name}+d41d8cd9"));
        let neff = std::fs::read(d.join("model.neff")).unwrap();
        let plain = plain_compile(s, &d.join(file), flags, &format!("plain-{name}"));
        assert!(
            neff == plain,
            "{name}: the NEFF differs from a plain compile's"
        );
        assert!(d.join("model.done").is_file(), "{name}");
        assert!(!d.join("model.log").exists(), "{name}");
        assert_eq!(&std::fs::read(d.join(file)).unwrap(), graph);
        assert!(verifies(&d.join("model.neff")));
    }
}

/// The report: five compiled, each output in its entry; the entries skipped, by class.
fn check_report(s: &Scratch) {
    let report: Value =
        serde_json::from_slice(&std::fs::read(s.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["succeeded"], 5);
    for c in report["compiles"].as_array().unwrap() {
        let out = c["output"].as_str().unwrap();
        assert!(
            out.starts_with(version_dir(s).to_str().unwrap())
                && out.ends_with("+d41d8cd9/model.neff"),
            "{out}"
        );
        assert!(Path::new(out).is_file(), "{out}");
    }
    assert_eq!(report["neuron_cache"]["version"], SIM_VERSION);
    let skipped: Vec<&str> = report["neuron_cache"]["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["class"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, ["refused", "done", "failed", "locked", "refused"]);
}

#[test]
fn a_framework_cache_is_completed_and_what_is_not_to_do_is_left_alone() {
    let s = Scratch::new();
    // To do: graphs of the zoo with several flag sets, one in the older layout.
    let todo = todo_entries();
    for (name, graph, file, flags) in &todo {
        entry(&s, name, graph, file, flags);
    }
    // Done: a NEFF and the marker, a day old.
    let done = module_entry(&s, "done", &zoo("matmul.hlo_module.pb"), &[]);
    std::fs::write(done.join("model.neff"), b"the framework's own NEFF").unwrap();
    std::fs::write(done.join("model.done"), b"").unwrap();
    let day_ago = std::time::SystemTime::now() - Duration::from_secs(86400);
    std::fs::File::options()
        .write(true)
        .open(done.join("model.neff"))
        .unwrap()
        .set_modified(day_ago)
        .unwrap();
    let done_mtime = std::fs::metadata(done.join("model.neff")).unwrap().mtime();
    // Failed: a log and no NEFF (its graph compiles: only a retry shows it).
    let failed = module_entry(&s, "failed", &zoo("mlp2.hlo_module.pb"), &[]);
    std::fs::write(failed.join("model.log"), "the framework's failure\n").unwrap();
    // Locked by another (the framework's plain lock file) and by a dead nxcc run.
    let foreign = module_entry(&s, "foreign", &variant("foreign"), &[]);
    std::fs::write(foreign.join("model.hlo_module.pb.lock"), b"").unwrap();
    let dead = module_entry(&s, "dead", &variant("dead"), &["-O1"]);
    std::fs::write(
        dead.join("model.hlo_module.pb.lock"),
        format!("nxcc pid=999999999 started=1 host={}\n", host()),
    )
    .unwrap();
    std::fs::create_dir(dead.join(".nxcc-tmp-999999999-0-0")).unwrap();
    // A symlinked model.neff: refused, its target untouched.
    let linked = module_entry(&s, "linked", &variant("linked"), &[]);
    std::fs::write(s.join("victim"), b"victim").unwrap();
    std::os::unix::fs::symlink(s.join("victim"), linked.join("model.neff")).unwrap();
    // A symlinked entry directory: refused.
    std::os::unix::fs::symlink(&failed, version_dir(&s).join("MODULE_dirlink+d41d8cd9")).unwrap();

    let o = parallel(&s, &["--report", "report.json"]).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}\n{}", text(&o.stdout));
    completed_as_plain_compiles(&s, &todo);
    // The simulated toolchain's NEFFs say so.
    let info = s.run(&[
        "neff-info",
        version_dir(&s)
            .join("MODULE_mlp+d41d8cd9/model.neff")
            .to_str()
            .unwrap(),
    ]);
    assert!(
        text(&info.stdout)
            .contains("producer: nxcc 0.1.0 (simulated toolchain: cannot run on Neuron hardware)"),
        "{}",
        text(&info.stdout)
    );
    // The dead run's lock taken over: compiled, lock and staging gone.
    assert!(dead.join("model.done").is_file());
    // Done: untouched, bytes and mtime.
    assert_eq!(
        std::fs::read(done.join("model.neff")).unwrap(),
        b"the framework's own NEFF"
    );
    assert_eq!(
        std::fs::metadata(done.join("model.neff")).unwrap().mtime(),
        done_mtime
    );
    // Failed: untouched.
    assert_eq!(
        std::fs::read_to_string(failed.join("model.log")).unwrap(),
        "the framework's failure\n"
    );
    assert!(!failed.join("model.neff").exists());
    // Foreign lock: skipped, reported, left.
    assert!(foreign.join("model.hlo_module.pb.lock").is_file());
    assert!(!foreign.join("model.neff").exists());
    assert!(
        err.contains("MODULE_foreign+d41d8cd9 (locked): a lock file nxcc did not make"),
        "{err}"
    );
    // Links: refused, reported, their targets untouched.
    assert_eq!(std::fs::read(s.join("victim")).unwrap(), b"victim");
    assert!(std::fs::symlink_metadata(linked.join("model.neff"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(
        err.contains("MODULE_linked+d41d8cd9 (refused): refused: model.neff is a symbolic link"),
        "{err}"
    );
    assert!(err.contains("MODULE_dirlink+d41d8cd9 (refused)"), "{err}");
    check_report(&s);
    // Only the foreign lock is left; no staging directory anywhere.
    let locks = find(&s.join("nc"), &|n| n.ends_with(".pb.lock"));
    assert_eq!(locks, [foreign.join("model.hlo_module.pb.lock")]);
    assert!(find(&s.join("nc"), &|n| n.starts_with(".nxcc-tmp-")).is_empty());

    // Retrying the failed entry: compiled, its log gone; the rest as it was.
    let o = parallel(&s, &["--retry_failed_compilation"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(failed.join("model.done").is_file() && !failed.join("model.log").exists());
    assert_eq!(
        std::fs::metadata(done.join("model.neff")).unwrap().mtime(),
        done_mtime
    );
    // Breaking the foreign lock compiles that entry too.
    let o = parallel(&s, &["--break-locks"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(foreign.join("model.done").is_file());
    assert!(!foreign.join("model.hlo_module.pb.lock").exists());
}

#[test]
fn a_failure_of_the_graph_leaves_model_log_and_no_neff() {
    let s = Scratch::new();
    let bad = module_entry(&s, "bad", b"not a module at all", &[]);
    let good = module_entry(&s, "good", &zoo("mlp.hlo_module.pb"), &[]);
    let o = parallel(&s, &[]).output().unwrap();
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    assert!(good.join("model.done").is_file());
    assert!(!bad.join("model.neff").exists() && !bad.join("model.done").exists());
    let log = std::fs::read_to_string(bad.join("model.log")).unwrap();
    assert!(
        log.contains("Child process job \"HLOToTensorizer\" exited abnormally"),
        "{log}"
    );
    assert!(log.contains("lines of the compile's log ---"), "{log}");
    no_leftovers(&s.join("nc"));
    // Again: the failed entry is skipped, nothing compiled, success.
    let o = parallel(&s, &[]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("MODULE_bad+d41d8cd9 (failed): failed earlier"));
}

#[test]
fn the_simulated_toolchain_is_refused_without_allow_simulated() {
    let s = Scratch::new();
    let e = module_entry(&s, "m", &zoo("mlp.hlo_module.pb"), &[]);
    let o = s.parallel_run(&["--neuron-cache", "nc"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--allow-simulated"),
        "{}",
        text(&o.stderr)
    );
    let names: Vec<_> = std::fs::read_dir(&e)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(!s.join("nc/nxcc-v1").exists());
    // A missing cache or version directory: said, with the versions there are.
    let o = s.parallel_run(&["--neuron-cache", "nowhere", "--allow-simulated"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("nowhere does not exist"),
        "{}",
        text(&o.stderr)
    );
    let o = s.parallel_run(
        &[
            "--neuron-cache",
            "nc",
            "--allow-simulated",
            "--neuron-version",
            "9.9",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains(&format!(
            "has no neuronxcc-9.9 directory (it has: {SIM_VERSION})"
        )),
        "{}",
        text(&o.stderr)
    );
    // Usage: INPUTs and --neuron-cache exclude each other; --break-locks needs it.
    let usage_error = |own: &[&str]| {
        let args = [&["parallel-compile"], own, &["--", "--target", "trn2"]].concat();
        assert_eq!(s.run(&args).status.code(), Some(2), "{args:?}");
    };
    usage_error(&["--neuron-cache=nc", "x.pb"]);
    usage_error(&["x.pb", "--break-locks"]);
    usage_error(&["--neuron-cache", "nc", "--output-dir", "o"]);
    assert!(!s.join("o").exists());
}

/// An entry the framework wrote for an external compiler (`neuronxcc-2.24.0.0`, the example
/// model) with `flags` as its `compile_flags.json`: its directory.
fn external_entry(s: &Scratch, flags: &[u8]) -> PathBuf {
    let d = s.join("nc/neuronxcc-2.24.0.0/MODULE_x+d41d8cd9");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("model.hlo_module.pb"), zoo("mlp.hlo_module.pb")).unwrap();
    std::fs::write(d.join("compile_flags.json"), flags).unwrap();
    d
}

/// The executable script `name` in the scratch directory, of `text`.
fn script(s: &Scratch, name: &str, text: &str) -> PathBuf {
    let p = s.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

#[test]
fn an_external_compiler_names_the_version_directory() {
    let s = Scratch::new();
    let d = external_entry(&s, br#"["--model-type=transformer"]"#);
    let compiler = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake-compiler.sh");
    let o = s.run(&[
        "parallel-compile",
        "--neuron-cache",
        "nc",
        "--compiler",
        compiler.to_str().unwrap(),
        "--",
        "--target",
        "trn2",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(d.join("model.done").is_file());
    assert!(std::fs::read(d.join("model.neff"))
        .unwrap()
        .starts_with(b"FAKE-NEFF"));
}

/// Start a batch of `n` slow entries tagged with `marker`; returns the child once some entry is
/// locked (a compile is running).
fn start_slow(s: &Scratch, n: usize, marker: &str) -> std::process::Child {
    let mut c = slow_batch(s, n, marker);
    let child = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until_compiling(s);
    child
}

/// `n` slow entries and the batch that compiles them (2 at once), tagged with `marker`.
fn slow_batch(s: &Scratch, n: usize, marker: &str) -> Command {
    for i in 0..n {
        module_entry(
            s,
            &format!("slow{i:02}"),
            &variant(&format!("slow {i}")),
            &[],
        );
    }
    let mut c = parallel(s, &["--jobs", "2", "--no_cache"]);
    c.env("NXCC_SIM_WORK_MS", "hlo2penguin:1500")
        .env("NXCC_TEST_MARK", marker);
    c
}

/// Wait until some entry is locked and its compile's tool runs.
fn until_compiling(s: &Scratch) {
    let limit = Duration::from_secs(60);
    by_deadline(limit, "an entry locked", || !locks(s).is_empty());
    // And its compile really started (its tool is recording).
    by_deadline(limit, "a tool running", || s.record().exists());
}

/// The entries' lock files.
fn locks(s: &Scratch) -> Vec<PathBuf> {
    find(&version_dir(s), &|n| n.ends_with(".pb.lock"))
}

fn wait_gone(marker: &str) {
    by_deadline(
        Duration::from_secs(30),
        "the batch's processes gone",
        || processes_with_env("NXCC_TEST_MARK", marker).is_empty(),
    );
}

#[test]
fn an_interrupt_leaves_no_log_no_partial_neff_and_no_lock() {
    let s = Scratch::new();
    let marker = format!("ncache-int-{}", std::process::id());
    let mut child = start_slow(&s, 4, &marker);
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    wait_gone(&marker);
    assert!(find(&s.join("nc"), &|n| n == "model.log").is_empty());
    for e in std::fs::read_dir(version_dir(&s)).unwrap().flatten() {
        let p = e.path();
        // A NEFF is only ever there whole, with its marker.
        assert_eq!(
            p.join("model.neff").exists(),
            p.join("model.done").exists(),
            "{p:?}"
        );
    }
    no_leftovers(&s.join("nc"));
}

#[test]
fn sigkill_then_a_default_clean_leaves_no_lock_and_no_staging_dir() {
    let s = Scratch::new();
    let marker = format!("ncache-kill-{}", std::process::id());
    let mut child = start_slow(&s, 3, &marker);
    child.kill().unwrap();
    child.wait().unwrap();
    // The killed run's lock keeper removes its locks and work directories, then ends.
    wait_gone(&marker);
    let locks = find(&version_dir(&s), &|n| n.ends_with(".pb.lock"));
    assert!(locks.is_empty(), "locks outlived the killed run: {locks:?}");
    // A run of this host that died a moment ago without a keeper: its lock and staging
    // directory.
    let earlier = module_entry(&s, "earlier", &variant("earlier"), &[]);
    std::fs::write(
        earlier.join("model.hlo_module.pb.lock"),
        format!("nxcc pid=999999999 started=1 host={}\n", host()),
    )
    .unwrap();
    std::fs::create_dir(earlier.join(".nxcc-tmp-999999999-0-0")).unwrap();
    let work: Vec<_> = std::fs::read_dir(tmp_dir(&s)).unwrap().flatten().collect();
    assert!(
        work.is_empty(),
        "work directories outlived the run: {work:?}"
    );
    let stats = s.run(&["cache", "stats", "--neuron-cache", "nc", "--json"]);
    let v: Value = serde_json::from_slice(&stats.stdout).unwrap();
    let dead: Vec<&Value> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["lock"]["by"] == "dead")
        .collect();
    assert_eq!(dead.len(), 1, "{v}");
    // A default clean (--min-age 1d) removes a dead holder's lock and staging directory at
    // any age.
    let o = s.run(&["cache", "clean", "--neuron-cache", "nc", "--locks"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("its holder, a process of this host, is gone"),
        "{out}"
    );
    no_leftovers(&s.join("nc"));
    let o = parallel(&s, &["--no_cache"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    for e in std::fs::read_dir(version_dir(&s)).unwrap().flatten() {
        assert!(e.path().join("model.done").is_file(), "{:?}", e.path());
    }
    no_leftovers(&s.join("nc"));
}

/// Wait until `what` holds, polling, for at most `limit` (an outcome by a deadline, never a
/// duration measured).
fn by_deadline(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_kill_of_the_runs_process_group_leaves_no_lock() {
    use std::os::unix::process::CommandExt;
    let s = Scratch::new();
    let marker = format!("ncache-group-{}", std::process::id());
    // The run leads a process group of its own, as a job scheduler starts it.
    let mut child = slow_batch(&s, 3, &marker)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until_compiling(&s);
    // SAFETY: killing the process group of the child we started.
    assert_eq!(unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) }, 0);
    child.wait().unwrap();
    // The lock keeper, in a session of its own, saw its run end and removed its locks.
    by_deadline(Duration::from_secs(5), "the run's locks removed", || {
        locks(&s).is_empty()
    });
    wait_gone(&marker);
    no_leftovers(&s.join("nc"));
}

#[test]
fn every_process_of_a_run_killed_under_a_parent_that_never_reaps_leaves_locks_clean_removes() {
    use std::os::unix::process::CommandExt;
    let s = Scratch::new();
    let marker = format!("ncache-zombie-{}", std::process::id());
    let batch = slow_batch(&s, 3, &marker);
    // The run's parent execs `sleep`, which never reaps: its children, and the orphans it
    // adopts as a subreaper (the keeper, once the run is dead), stay zombies.
    let mut parent = Command::new("sh");
    parent
        .arg("-c")
        .arg("\"$0\" \"$@\" >/dev/null 2>&1 & exec sleep 600")
        .arg(batch.get_program())
        .args(batch.get_args())
        .current_dir(batch.get_current_dir().unwrap());
    for (k, v) in batch.get_envs() {
        match v {
            Some(v) => parent.env(k, v),
            None => parent.env_remove(k),
        };
    }
    // SAFETY: prctl(2) with integer arguments, between fork and exec.
    unsafe {
        parent.pre_exec(|| {
            if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut parent = parent.spawn().unwrap();
    until_compiling(&s);
    // Every process of the run frozen (none can clean up), then killed.
    let pids = freeze(|| {
        processes_with_env("NXCC_TEST_MARK", &marker)
            .into_iter()
            .filter(|p| *p != parent.id())
            .collect()
    });
    let held = locks(&s);
    assert!(!held.is_empty());
    for p in &pids {
        // SAFETY: kill(2) on a process of the run this test started.
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    by_deadline(
        Duration::from_secs(60),
        "every process of the run dead",
        || {
            pids.iter()
                .all(|p| matches!(proc_state(*p), Some('Z') | None))
        },
    );
    // The locks stay (nobody could remove them), their holder a zombie: dead.
    assert_eq!(locks(&s), held);
    let o = s.run(&["cache", "clean", "--neuron-cache", "nc", "--locks"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert_eq!(
        out.matches("its holder, a process of this host, is gone")
            .count(),
        held.len(),
        "{out}"
    );
    assert!(locks(&s).is_empty(), "{out}");
    parent.kill().unwrap();
    parent.wait().unwrap();
    wait_gone(&marker);
}

#[test]
fn a_killed_lock_keeper_neither_fails_the_runs_entries_nor_leaves_locks() {
    let s = Scratch::new();
    let marker = format!("ncache-keeper-{}", std::process::id());
    let mut c = slow_batch(&s, 4, &marker);
    let child = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until_compiling(&s);
    // The lock names its holder: the keeper.
    let stamp = std::fs::read_to_string(&locks(&s)[0]).unwrap();
    let keeper: u32 = stamp
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(keeper, child.id(), "{stamp}");
    // SAFETY: kill(2) on the run's keeper, a process this test identified by its lock.
    assert_eq!(unsafe { libc::kill(keeper as i32, libc::SIGKILL) }, 0);
    // The run takes its locks again itself.
    let run_pid = format!("pid={} ", child.id());
    by_deadline(Duration::from_secs(60), "the run holding its locks", || {
        locks(&s)
            .iter()
            .any(|l| std::fs::read_to_string(l).is_ok_and(|t| t.contains(&run_pid)))
    });
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("lost the lock"), "{err}");
    for e in std::fs::read_dir(version_dir(&s)).unwrap().flatten() {
        assert!(
            e.path().join("model.done").is_file(),
            "{:?}\n{err}",
            e.path()
        );
        assert!(!e.path().join("model.log").exists(), "{:?}", e.path());
    }
    wait_gone(&marker);
    no_leftovers(&s.join("nc"));
}

#[test]
fn forged_locks_are_taken_over_and_a_fifo_lock_is_refused_for_its_entry_alone() {
    let s = Scratch::new();
    let lock = "model.hlo_module.pb.lock";
    let at = |ago: i64| {
        let now = std::time::SystemTime::now();
        if ago >= 0 {
            now - Duration::from_secs(ago as u64)
        } else {
            now + Duration::from_secs(ago.unsigned_abs())
        }
    };
    let forged = [
        // This host, pid 1 (always running), no start time: its lease ended.
        (
            "pid1",
            format!("nxcc pid=1 started=0 host={}\n", host()),
            120,
        ),
        // Another host's, its modification time years ahead: no lease at all.
        (
            "future",
            "nxcc pid=7 started=0 host=elsewhere lease=60000\n".to_string(),
            -3 * 365 * 86_400,
        ),
        // A lease of u64::MAX ms: no longer than the maximum (10 minutes).
        (
            "forever",
            format!("nxcc pid=7 started=0 host=elsewhere lease={}\n", u64::MAX),
            11 * 60,
        ),
    ];
    for (name, text, ago) in &forged {
        let e = module_entry(&s, name, &variant(name), &[]);
        std::fs::write(e.join(lock), text).unwrap();
        let f = std::fs::File::options()
            .write(true)
            .open(e.join(lock))
            .unwrap();
        f.set_modified(at(*ago)).unwrap();
    }
    let fifo = module_entry(&s, "fifo", &variant("fifo"), &[]);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fifo.join(lock).as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    // The clean: every forged lock goes; the FIFO stays, said, for its entry alone.
    let o = s.run(&["cache", "clean", "--neuron-cache", "nc", "--locks"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    for (name, _, _) in &forged {
        assert!(
            !version_dir(&s)
                .join(format!("MODULE_{name}+d41d8cd9/{lock}"))
                .exists(),
            "{name}: {out}"
        );
    }
    assert!(out.contains("its lease is void"), "{out}");
    assert!(
        out.contains("refused: a FIFO where a lock file belongs"),
        "{out}"
    );
    assert!(std::fs::symlink_metadata(fifo.join(lock)).is_ok());
    // The batch compiles the others and skips the FIFO's entry.
    for (name, text, ago) in &forged {
        let e = version_dir(&s).join(format!("MODULE_{name}+d41d8cd9"));
        std::fs::write(e.join(lock), text).unwrap();
        let f = std::fs::File::options()
            .write(true)
            .open(e.join(lock))
            .unwrap();
        f.set_modified(at(*ago)).unwrap();
    }
    let o = parallel(&s, &["--no_cache"]).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    for (name, _, _) in &forged {
        let e = version_dir(&s).join(format!("MODULE_{name}+d41d8cd9"));
        assert!(e.join("model.done").is_file(), "{name}: {err}");
        assert!(!e.join(lock).exists(), "{name}");
    }
    assert!(!fifo.join("model.done").exists());
    assert!(
        err.lines()
            .any(|l| l.contains("MODULE_fifo") && l.contains("is not a plain file")),
        "{err}"
    );
}

#[test]
fn twelve_entries_keep_to_the_memory_budget() {
    let s = Scratch::new();
    let flag_sets: [&[&str]; 3] = [&[], &["-O1"], &["--model-type=transformer"]];
    for i in 0..12 {
        module_entry(
            &s,
            &format!("m{i:02}"),
            &variant(&format!("mem {i}")),
            flag_sets[i % 3],
        );
    }
    let o = parallel(
        &s,
        &[
            "--jobs",
            "8",
            "--memory-budget",
            "1G",
            "--report",
            "report.json",
        ],
    )
    .env("NXCC_SIM_RSS_MB", "*:300")
    .env("NXCC_SIM_WORK_MS", "*:40")
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let report: Value =
        serde_json::from_slice(&std::fs::read(s.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["succeeded"], 12);
    for c in report["compiles"].as_array().unwrap() {
        assert_eq!(
            c["attempts"].as_array().unwrap().len(),
            1,
            "a compile was retried: {c}"
        );
        assert!(c["estimate"]["bytes"].as_u64().unwrap() >= 300 << 20);
    }
    // Each compile's interval from its tools' records (by work dir): never more than 3 x 300 MiB
    // (the estimates, at least 320 MiB each, let at most 3 share 1 GiB).
    let spans = compile_spans(&s.records(), work_dir_of);
    assert_eq!(spans.len(), 12);
    let most = max_overlap(&spans);
    assert!(
        most * 300 <= 1024,
        "{most} compiles of 300 MiB ran at once under 1 GiB"
    );
    assert!(most >= 2, "the budget left room for more than one at once");
    for e in std::fs::read_dir(version_dir(&s)).unwrap().flatten() {
        assert!(e.path().join("model.done").is_file());
    }
}

/// A reader of the framework's cache written from the layout alone (as a framework would read
/// it), plus nxcc's one rule of its own: a link anywhere in an entry refuses it.
const FRAMEWORK_READER: &str = r#"
import json, os, stat, sys
root = sys.argv[1]
out = {}
for v in sorted(os.listdir(root)):
    if not v.startswith("neuronxcc-"):
        continue
    vd = os.path.join(root, v)
    for name in sorted(os.listdir(vd)):
        if not name.startswith("MODULE_"):
            continue
        d = os.path.join(vd, name)
        key = v[len("neuronxcc-"):] + "/" + name
        if os.path.islink(d) or not os.path.isdir(d):
            out[key] = "refused"; continue
        files = {}
        refused = False
        for f in os.listdir(d):
            st = os.lstat(os.path.join(d, f))
            files[f] = stat.S_ISREG(st.st_mode)
        layout = ["model.hlo_module.pb", "model.hlo.pb", "compile_flags.json", "model.neff",
                  "model.done", "model.log", "model.hlo_module.pb.lock", "model.hlo.pb.lock"]
        if any(f in files and not files[f] for f in layout):
            out[key] = "refused"; continue
        has = lambda f: files.get(f, False)
        graph = has("model.hlo_module.pb") or has("model.hlo.pb")
        if has("model.neff") and has("model.done"):
            out[key] = "done"
        elif has("model.hlo_module.pb.lock") or has("model.hlo.pb.lock"):
            out[key] = "locked"
        elif has("model.log") and not has("model.neff"):
            out[key] = "failed"
        elif not graph:
            out[key] = "refused"
        else:
            try:
                flags = json.load(open(os.path.join(d, "compile_flags.json")))
                ok = isinstance(flags, list) and all(isinstance(x, str) for x in flags)
            except Exception:
                ok = False
            out[key] = "to_do" if ok else "refused"
print(json.dumps(out))
"#;

#[test]
fn a_framework_side_reader_agrees_with_cache_stats() {
    let s = Scratch::new();
    let g = zoo("mlp.hlo_module.pb");
    module_entry(&s, "todo", &g, &["-O1"]);
    let old = entry(&s, "old", &g, "model.hlo.pb", &[]);
    std::fs::write(old.join("model.neff"), b"n").unwrap();
    std::fs::write(old.join("model.done"), b"").unwrap();
    let f = module_entry(&s, "failed", &g, &[]);
    std::fs::write(f.join("model.log"), b"x").unwrap();
    let l = module_entry(&s, "locked", &g, &[]);
    std::fs::write(l.join("model.hlo_module.pb.lock"), b"").unwrap();
    let half = module_entry(&s, "half", &g, &[]);
    std::fs::write(half.join("model.neff"), b"no done marker yet").unwrap();
    let bad = module_entry(&s, "badflags", &g, &[]);
    std::fs::write(bad.join("compile_flags.json"), b"{\"not\": \"a list\"}").unwrap();
    let nograph = module_entry(&s, "nograph", &g, &[]);
    std::fs::remove_file(nograph.join("model.hlo_module.pb")).unwrap();
    let link = module_entry(&s, "link", &g, &[]);
    std::fs::remove_file(link.join("compile_flags.json")).unwrap();
    std::os::unix::fs::symlink(
        bad.join("compile_flags.json"),
        link.join("compile_flags.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&f, version_dir(&s).join("MODULE_dirlink+1")).unwrap();
    // A second version, with a done entry.
    let v2 = s.join("nc/neuronxcc-2.9.0.0+0/MODULE_v2+1");
    std::fs::create_dir_all(&v2).unwrap();
    for (n, b) in [
        ("model.hlo_module.pb", &g[..]),
        ("compile_flags.json", b"[]"),
        ("model.neff", b"n"),
        ("model.done", b""),
    ] {
        std::fs::write(v2.join(n), b).unwrap();
    }
    let py = Command::new("python3")
        .args(["-c", FRAMEWORK_READER])
        .arg(s.join("nc"))
        .output();
    // python3 is a test requirement (README): a reader that cannot run fails the test.
    let py = match py {
        Ok(o) if o.status.success() => o,
        other => panic!("the framework-side reader (python3) did not run: {other:?}"),
    };
    let theirs: BTreeMap<String, String> = serde_json::from_slice(&py.stdout).unwrap();
    let o = s.run(&["cache", "stats", "--neuron-cache", "nc", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let ours: BTreeMap<String, String> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                format!(
                    "{}/{}",
                    e["version"].as_str().unwrap(),
                    e["name"].as_str().unwrap()
                ),
                e["class"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(ours, theirs);
    assert_eq!(ours.len(), 10);
    let classes: Vec<&str> = ours.values().map(String::as_str).collect();
    for c in ["done", "failed", "locked", "to_do", "refused"] {
        assert!(classes.contains(&c), "no {c} entry: {ours:?}");
    }
    // The text form counts per version.
    let o = s.run(&["cache", "stats", "--neuron-cache", "nc"]);
    let t = text(&o.stdout);
    assert!(t.contains(&format!("neuronxcc-{SIM_VERSION}: 1 done, 1 failed, 1 locked (1 held by nobody), 2 to do, 4 refused")), "{t}");
    assert!(t.contains("neuronxcc-2.9.0.0+0: 1 done"), "{t}");
}

#[test]
fn verify_and_clean_say_what_they_find_and_remove() {
    let s = Scratch::new();
    module_entry(&s, "good", &zoo("mlp.hlo_module.pb"), &[]);
    let o = parallel(&s, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let corrupt = module_entry(&s, "corrupt", &zoo("mlp.hlo_module.pb"), &[]);
    std::fs::write(corrupt.join("model.neff"), b"not a NEFF").unwrap();
    std::fs::write(corrupt.join("model.done"), b"").unwrap();
    let o = s.run(&["cache", "verify", "--neuron-cache", "nc"]);
    assert_eq!(o.status.code(), Some(1));
    let t = text(&o.stdout);
    assert!(
        t.contains("bad: ") && t.contains("MODULE_corrupt+d41d8cd9"),
        "{t}"
    );
    assert!(t.contains("checked 2 NEFFs: 1 ok, 1 bad"), "{t}");

    let f = module_entry(&s, "failed", &zoo("mlp.hlo_module.pb"), &[]);
    std::fs::write(f.join("model.log"), b"x").unwrap();
    let l = module_entry(&s, "stale", &zoo("mlp.hlo_module.pb"), &[]);
    std::fs::write(l.join("model.hlo_module.pb.lock"), b"").unwrap();
    let old = s.join("nc/neuronxcc-2.0.0.0/MODULE_o+1");
    std::fs::create_dir_all(&old).unwrap();
    let all = [
        "cache",
        "clean",
        "--neuron-cache",
        "nc",
        "--failed",
        "--locks",
        "--min-age",
        "0",
        "--old-versions",
    ];
    let mut dry = all.to_vec();
    dry.push("--dry-run");
    let o = s.run(&dry);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = text(&o.stdout);
    assert_eq!(t.matches("would remove ").count(), 3, "{t}");
    assert!(
        f.join("model.log").exists() && l.join("model.hlo_module.pb.lock").exists() && old.exists()
    );
    let o = s.run(&all);
    let t = text(&o.stdout);
    assert_eq!(t.matches("removed ").count(), 3, "{t}");
    assert!(
        t.contains("neuronxcc-2.0.0.0 (another compiler version"),
        "{t}"
    );
    assert!(!f.join("model.log").exists() && !l.join("model.hlo_module.pb.lock").exists());
    assert!(!s.join("nc/neuronxcc-2.0.0.0").exists());
    assert!(
        !s.join("nc/nxcc-v1").exists(),
        "nxcc's own cache is never inside the framework's"
    );
    let o = s.run(&["cache", "clean", "--neuron-cache", "nc"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn two_runs_at_once_compile_each_entry_once() {
    let s = Scratch::new();
    let marker = format!("ncache-two-{}", std::process::id());
    let n = 4;
    let mut first = start_slow(&s, n, &marker);
    // The second run sees the first's lock held, and races it for the rest.
    let second = parallel(&s, &["--jobs", "1", "--no_cache"])
        .env("NXCC_SIM_WORK_MS", "hlo2penguin:1500")
        .output()
        .unwrap();
    let first_status = first.wait().unwrap();
    let mut first_err = String::new();
    use std::io::Read;
    first
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut first_err)
        .unwrap();
    assert_eq!(first_status.code(), Some(0), "{first_err}");
    let err = text(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{err}");
    assert!(
        err.contains("(locked): held by a running process (nxcc pid="),
        "{err}"
    );
    for e in std::fs::read_dir(version_dir(&s)).unwrap().flatten() {
        assert!(e.path().join("model.done").is_file(), "{:?}", e.path());
    }
    let frontends = s
        .records()
        .into_iter()
        .filter(|r| r["tool"] == "hlo2penguin")
        .count();
    assert_eq!(frontends, n, "an entry was compiled twice");
    no_leftovers(&s.join("nc"));
}

/// A stand-in compiler that records its working directory and arguments (one JSON line each
/// run, in `$ARGV_RECORD`) and writes `FAKE-NEFF` to its last `--output`.
const ARGV_COMPILER: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "argv-compiler 2.24.0.0"; exit 0; fi
python3 -c 'import json, os, sys; open(os.environ["ARGV_RECORD"], "a").write(json.dumps({"cwd": os.getcwd(), "argv": sys.argv[1:]}) + "\n")' "$@"
out=""; prev=""
for a in "$@"; do [ "$prev" = "--output" ] && out="$a"; prev="$a"; done
printf 'FAKE-NEFF' > "$out"
"#;

#[test]
fn the_compiler_gets_the_frameworks_argv_in_a_private_work_directory() {
    let s = Scratch::new();
    // An nargs='+' flag, and a flag the framework's wrapper keeps to itself.
    let d = external_entry(
        &s,
        br#"["--fast-math", "fp32-cast-matmult", "no-fast-relayout", "--log_level=INFO"]"#,
    );
    let compiler = script(&s, "argv-compiler", ARGV_COMPILER);
    let record = s.join("argv.jsonl");
    let o = with_compiler(&s, &compiler, &[])
        .env("ARGV_RECORD", &record)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("dropped --log_level=INFO from the flags of"),
        "{err}"
    );
    let line = std::fs::read_to_string(&record).unwrap();
    let run: Value = serde_json::from_str(line.trim()).unwrap();
    let cwd = run["cwd"].as_str().unwrap();
    let argv: Vec<&str> = run["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    // `compile`, the arguments after `--`, then the framework's argv exactly.
    assert_eq!(argv.len(), 10, "{argv:?}");
    assert_eq!(&argv[..3], ["compile", "--target", "trn2"], "{argv:?}");
    let argv = &argv[2..];
    assert_eq!(argv[1], "--framework=XLA", "{argv:?}");
    assert_eq!(
        argv[2],
        format!("{cwd}/model.MODULE_x+d41d8cd9.hlo_module.pb"),
        "the graph is read from the work directory"
    );
    assert_eq!(argv[3], "--output");
    let out = Path::new(argv[4]);
    assert_eq!(out.file_name().unwrap(), "model.MODULE_x+d41d8cd9.neff");
    assert!(out.starts_with(cwd), "{argv:?}");
    assert_eq!(
        &argv[5..],
        ["--fast-math", "fp32-cast-matmult", "no-fast-relayout"]
    );
    // The work directory is private, outside the cache, and gone afterwards.
    assert!(Path::new(cwd).starts_with(tmp_dir(&s)), "{cwd}");
    assert!(!Path::new(cwd).exists());
    assert_eq!(std::fs::read(d.join("model.neff")).unwrap(), b"FAKE-NEFF");
    assert!(d.join("model.done").is_file());
}

/// Every path below the framework's root that is not one of the framework's own files.
fn not_the_frameworks(root: &Path) -> Vec<PathBuf> {
    let own = [
        "model.hlo_module.pb",
        "model.hlo.pb",
        "compile_flags.json",
        "model.neff",
        "model.done",
        "model.log",
    ];
    let mut bad = Vec::new();
    for top in std::fs::read_dir(root).unwrap().flatten() {
        let name = top.file_name().into_string().unwrap();
        if name == "lock" {
            continue;
        }
        if !name.starts_with("neuronxcc-") {
            bad.push(top.path());
            continue;
        }
        for e in std::fs::read_dir(top.path()).unwrap().flatten() {
            if !e.file_name().to_str().unwrap().starts_with("MODULE_") {
                bad.push(e.path());
                continue;
            }
            for f in std::fs::read_dir(e.path()).unwrap().flatten() {
                if !own.contains(&f.file_name().to_str().unwrap()) {
                    bad.push(f.path());
                }
            }
        }
    }
    bad
}

#[test]
fn a_default_run_leaves_nothing_but_the_frameworks_files_under_its_root() {
    let s = Scratch::new();
    for (i, m) in ["mlp.hlo_module.pb", "attention.hlo_module.pb"]
        .iter()
        .enumerate()
    {
        module_entry(&s, &format!("m{i}"), &zoo(m), &["-O1"]);
    }
    let o = parallel(&s, &[]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(not_the_frameworks(&s.join("nc")), Vec::<PathBuf>::new());
    // nxcc's own cache is in its own per-user directory, and was used.
    let own = s.join(".cache/nxcc/nxcc-v1");
    assert!(own.is_dir(), "nxcc's cache is not at {own:?}");
    let o = parallel(&s, &["--retry_failed_compilation"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(not_the_frameworks(&s.join("nc")), Vec::<PathBuf>::new());
}

#[test]
fn entry_flags_that_reach_into_the_machine_are_refused_and_touch_nothing() {
    let s = Scratch::new();
    let victim = s.join("victim.json");
    std::fs::write(&victim, "root's file").unwrap();
    std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // A toolchain whose frontend would leave a marker if it ever ran.
    let evil = s.join("evil");
    std::fs::create_dir_all(&evil).unwrap();
    let marker = s.join("evil-ran");
    for tool in ["hlo2penguin", "walrus_driver"] {
        let p = evil.join(tool);
        std::fs::write(&p, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let trace = format!("--trace={}", victim.display());
    let toolchain = format!("--toolchain={}", evil.display());
    let logfile = format!("--logfile={}", victim.display());
    let workdir = format!("--temp-dir={}", s.join("elsewhere").display());
    let sets: Vec<Vec<&str>> = vec![
        vec![&trace],
        vec![&toolchain],
        vec![&logfile],
        vec!["--timings"],
        vec!["--submit-metrics"],
        vec!["--keep-work-dir"],
        vec![&workdir],
        vec!["--pipeline", "compile", "SaveTemps"],
    ];
    let mut dirs = Vec::new();
    for (i, flags) in sets.iter().enumerate() {
        dirs.push(module_entry(
            &s,
            &format!("bad{i}"),
            &variant(&format!("bad {i}")),
            flags,
        ));
    }
    let before: Vec<String> = std::fs::read_dir(s.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let o = parallel(&s, &[]).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(
        err.matches("refused: its flags are not compile semantics only")
            .count(),
        sets.len(),
        "{err}"
    );
    assert!(!marker.exists(), "the entry's toolchain ran");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file");
    let mode = std::fs::metadata(&victim).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    for d in &dirs {
        let names: Vec<_> = std::fs::read_dir(d).unwrap().flatten().collect();
        assert_eq!(names.len(), 2, "{d:?}: {names:?}");
    }
    let after: Vec<String> = std::fs::read_dir(s.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !before.contains(n) && n != "tmp")
        .collect();
    assert!(
        after.is_empty(),
        "written in the launch directory: {after:?}"
    );
}

#[test]
fn remote_caches_but_s3_are_refused_clearly_and_legacy_and_foreign_directories_are_sized() {
    let s = Scratch::new();
    for args in [
        &[
            "parallel-compile",
            "--neuron-cache",
            "gs://b/p",
            "--",
            "--target",
            "trn2",
        ][..],
        &["cache", "stats", "--neuron-cache", "gs://b/p"],
    ] {
        let o = s.run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains("remote caches are not supported (gs://b/p)"),
            "{}",
            text(&o.stderr)
        );
    }
    let o = s
        .nxcc(&[
            "parallel-compile",
            "--neuron-cache",
            "--",
            "--target",
            "trn2",
        ])
        .env("NEURON_COMPILE_CACHE_URL", "gs://bucket/prefix")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("remote caches are not supported"));
    // Releases up to 2.14: compile_flags.txt, done without model.done.
    let v = s.join("nc/neuronxcc-2.14.182.0+a56cbff7");
    let legacy_done = v.join("MODULE_1+d41d8cd9");
    let legacy_todo = v.join("MODULE_2+d41d8cd9");
    for d in [&legacy_done, &legacy_todo] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("model.hlo_module.pb"), zoo("mlp.hlo_module.pb")).unwrap();
        std::fs::write(d.join("compile_flags.txt"), b"").unwrap();
    }
    std::fs::write(legacy_done.join("model.neff"), vec![7u8; 1000]).unwrap();
    // optimum-neuron's registry and a model it traced.
    let reg = v.join("0_REGISTRY/0.0.28/training/llama");
    std::fs::create_dir_all(&reg).unwrap();
    std::fs::write(reg.join("abc.json"), vec![b'x'; 300]).unwrap();
    let traced = v.join("MODULE_0123abcd");
    std::fs::create_dir_all(traced.join("text_encoder")).unwrap();
    std::fs::write(traced.join("text_encoder/model.neuron"), vec![1u8; 500]).unwrap();
    let o = s.run(&["cache", "stats", "--neuron-cache", "nc", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let st: Value = serde_json::from_slice(&o.stdout).unwrap();
    let by: BTreeMap<String, (String, u64)> = st["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                (
                    e["class"].as_str().unwrap().to_string(),
                    e["bytes"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(by["MODULE_1+d41d8cd9"].0, "done");
    assert_eq!(by["MODULE_2+d41d8cd9"].0, "to_do");
    assert_eq!(by["0_REGISTRY"], ("foreign".to_string(), 300));
    assert_eq!(by["MODULE_0123abcd"], ("foreign".to_string(), 500));
    assert_eq!(st["versions"][0]["refused"], 0, "{st}");
    assert_eq!(st["versions"][0]["foreign"], 2, "{st}");
}

/// Hold `<cache>/lock` as the framework's wrapper might (`flock` or `lockf`), print `held`,
/// wait for a line on stdin, print the release time (ms since the epoch), release.
const HOLD_CACHE_LOCK: &str = r#"
import fcntl, sys, time
f = open(sys.argv[1], "w")
if sys.argv[2] == "flock":
    fcntl.flock(f, fcntl.LOCK_EX)
else:
    fcntl.lockf(f, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
print(int(time.time() * 1000), flush=True)
f.close()
"#;

#[test]
fn a_held_cache_lock_makes_nxcc_wait_and_say_so() {
    use std::io::{BufRead, BufReader, Write};
    for kind in ["flock", "lockf"] {
        let s = Scratch::new();
        module_entry(&s, "m", &zoo("mlp.hlo_module.pb"), &[]);
        let mut holder = Command::new("python3")
            .args(["-c", HOLD_CACHE_LOCK])
            .arg(s.join("nc/lock"))
            .arg(kind)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 (a test requirement) runs");
        let mut said = BufReader::new(holder.stdout.take().unwrap());
        let mut line = String::new();
        said.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "held");
        let mut run = parallel(&s, &["--no_cache"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(run.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut l = String::new();
            assert!(
                err.read_line(&mut l).unwrap() > 0,
                "{kind}: no wait said: {seen}"
            );
            seen.push_str(&l);
            if l.contains("waiting for the cache lock") {
                break;
            }
        }
        assert!(
            seen.contains(&s.join("nc/lock").display().to_string()),
            "{seen}"
        );
        // Nothing compiled while it waits.
        assert!(
            s.records().is_empty(),
            "{kind}: a tool ran under the framework's lock"
        );
        holder.stdin.take().unwrap().write_all(b"go\n").unwrap();
        line.clear();
        said.read_line(&mut line).unwrap();
        let released: u64 = line.trim().parse().unwrap();
        holder.wait().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        assert_eq!(run.wait().unwrap().code(), Some(0), "{kind}: {seen}{rest}");
        let first = s
            .records()
            .iter()
            .map(|r| r["start_ms"].as_u64().unwrap())
            .min()
            .expect("the entry was compiled");
        assert!(
            first >= released,
            "{kind}: a tool started before the lock was released"
        );
        assert!(version_dir(&s)
            .join("MODULE_m+d41d8cd9/model.done")
            .is_file());
    }
}

#[test]
fn locks_removed_by_another_process_mid_run_leave_done_entries_alone() {
    let s = Scratch::new();
    let marker = format!("ncache-steal-{}", std::process::id());
    let n = 4;
    let mut first = start_slow(&s, n, &marker);
    // optimum-neuron's cleanup (its Hub synchronisation runs it): every `*.lock` removed.
    for l in find(&s.join("nc"), &|n| n.ends_with(".lock")) {
        let _ = std::fs::remove_file(l);
    }
    // A second run compiles the entries it finds unlocked, while the first still runs.
    let second = parallel(&s, &["--jobs", "2", "--no_cache"])
        .env("NXCC_SIM_WORK_MS", "hlo2penguin:1500")
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    use std::os::unix::fs::MetadataExt;
    let snapshot = || -> BTreeMap<PathBuf, (u64, i64, i64)> {
        find(&version_dir(&s), &|n| n == "model.neff")
            .into_iter()
            .map(|p| {
                let m = std::fs::metadata(&p).unwrap();
                (p, (m.ino(), m.mtime(), m.mtime_nsec()))
            })
            .collect()
    };
    let done_before = snapshot();
    let status = first.wait().unwrap();
    let mut first_err = String::new();
    std::io::Read::read_to_string(&mut first.stderr.take().unwrap(), &mut first_err).unwrap();
    wait_gone(&marker);
    // The first run lost the locks it compiled under: it says so and writes nothing.
    assert!(
        first_err.contains("lost the lock of") || status.success(),
        "{first_err}"
    );
    for (p, id) in &done_before {
        assert_eq!(&snapshot()[p], id, "a done entry changed: {p:?}");
    }
    for e in std::fs::read_dir(version_dir(&s)).unwrap().flatten() {
        let p = e.path();
        assert!(
            !(p.join("model.done").exists() && p.join("model.log").exists()),
            "{p:?} is done and failed at once"
        );
        assert!(p.join("model.done").is_file(), "{p:?}: {first_err}");
        assert!(verifies(&p.join("model.neff")));
    }
    no_leftovers(&s.join("nc"));
}

/// A toolchain of another user's: every tool writes the uid it runs as to `marker` and fails.
fn attacker_toolchain(s: &Scratch, marker: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = s.join("evil-tools");
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!("#!/bin/sh\nid -u > {}\nexit 1\n", marker.display());
    for tool in [
        "hlo2penguin",
        "xla_infergoldens",
        "walrus_driver",
        "hlo-neff-wrapper",
        "nn_executor",
        "watchpoint_insert",
    ] {
        std::fs::write(dir.join(tool), &script).unwrap();
        std::fs::set_permissions(dir.join(tool), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// A framework cache another user can write — owned by uid 65534, or writable by all without
/// the sticky bit, or a version directory of theirs — is refused whole by `parallel-compile
/// --neuron-cache` and by every `cache ... --neuron-cache` command, with the path and the fix:
/// an entry's flags (here `--toolchain=` the other user's tools) are never read, nothing runs.
/// Needs root (it gives files to another uid), as CI has.
#[test]
fn a_framework_cache_others_can_write_is_refused_before_anything_runs() {
    use std::os::unix::fs::PermissionsExt;
    assert!(
        rustix::process::geteuid().is_root(),
        "this test gives a cache to uid 65534: run it as root, as CI does"
    );
    let chmod =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    let give = |p: &Path| std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    type Setup = fn(&Path, &Path, &dyn Fn(&Path, u32), &dyn Fn(&Path));
    let cases: [(&str, Setup, &str); 4] = [
        (
            "owned by another user",
            |nc, _, _, give| give(nc),
            "is owned by uid 65534, not by you (uid 0) or root",
        ),
        (
            "writable by all",
            |nc, _, chmod, _| chmod(nc, 0o777),
            "is writable by group and others (mode 0777)",
        ),
        (
            "a version directory of another user's",
            |nc, v, chmod, give| {
                chmod(nc, 0o1777);
                give(v);
            },
            "is owned by uid 65534",
        ),
        (
            "a version directory writable by all",
            |_, v, chmod, _| chmod(v, 0o777),
            "is writable by group and others (mode 0777)",
        ),
    ];
    for (case, setup, needle) in cases {
        let s = Scratch::new();
        let marker = s.join("ran-as");
        let tools = attacker_toolchain(&s, &marker);
        let flag = format!("--toolchain={}", tools.display());
        let e = module_entry(&s, "evil", &zoo("mlp.hlo_module.pb"), &[&flag]);
        setup(&s.join("nc"), &version_dir(&s), &chmod, &give);
        let o = parallel(&s, &[]).output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{case}: {err}");
        assert!(err.contains(needle), "{case}: {err}");
        assert!(err.contains("the neuron cache directory"), "{case}: {err}");
        assert!(!marker.exists(), "{case}: the other user's tool ran");
        for f in ["model.neff", "model.done", "model.log"] {
            assert!(!e.join(f).exists(), "{case}: {f} written");
        }
        for args in [
            &["cache", "stats", "--neuron-cache", "nc"][..],
            &["cache", "verify", "--neuron-cache", "nc"][..],
            &[
                "cache",
                "clean",
                "--neuron-cache",
                "nc",
                "--locks",
                "--failed",
            ][..],
        ] {
            let o = s.run(args);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{case}: {args:?}: {err}");
            assert!(err.contains(needle), "{case}: {args:?}: {err}");
        }
        assert!(e.join("model.hlo_module.pb").exists());
    }
}

/// One occurrence of `f`, as an entry's `compile_flags.json` would carry it (a value it takes).
fn occurrence(f: &nxcc::cli::flags::Flag) -> Vec<String> {
    use nxcc::cli::flags::{Action, Choices, Kind};
    let value = match (f.choices, f.kind) {
        (Choices::OneOf(c) | Choices::OneOfIgnoreCase(c), _) => c[c.len() - 1].to_string(),
        (_, Kind::Seconds | Kind::Int | Kind::Float) => "5".into(),
        _ if f.dest.starts_with("remote") => "grpc://127.0.0.1:9".into(),
        _ => "/tmp".into(),
    };
    match f.action {
        Action::StoreTrue | Action::StoreOptional { .. } => vec![f.spelling.to_string()],
        _ => vec![format!("{}={value}", f.spelling)],
    }
}

/// What is below `dir`: every path with its bytes' digest (directories: empty).
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    find(dir, &|_| true)
        .into_iter()
        .map(|p| {
            let d = std::fs::read(&p)
                .map(|b| blake3::hash(&b).to_hex().to_string())
                .unwrap_or_default();
            (p, d)
        })
        .collect()
}

/// Every option of nxcc's own (the flag table's, whatever is added to it), carried by an entry's
/// flags, refuses the entry — the cache's settings among them: `--cache-max-size=1` no longer
/// evicts the run's own cache, nor `--cache-mode`, `--cache-secondary`, `--cache-sloppiness`,
/// `--remote-cache` change how it is used. Nothing runs, the entry stays as it was, the run's own
/// cache is byte for byte what it was, and `cache stats` counts such an entry refused, as the run
/// does, never to do.
#[test]
fn every_option_of_nxccs_own_in_an_entry_refuses_it_and_the_runs_cache_is_untouched() {
    let s = Scratch::new();
    // The run's own cache, holding a compile already.
    let own = s.join("own-cache");
    let own_arg = own.display().to_string();
    let o = s.sim_run("trn2", &["--output", "pre.neff", "--cache_dir", &own_arg]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let before = tree(&own);
    assert!(before.keys().any(|p| p.ends_with("model.neff")));
    let flags: Vec<Vec<String>> = nxcc::cli::flags::FLAGS
        .iter()
        .filter(|f| f.is_nxcc_own())
        .map(occurrence)
        .collect();
    assert!(flags.len() >= 14, "{flags:?}");
    let mut dirs = Vec::new();
    for (i, f) in flags.iter().enumerate() {
        let f: Vec<&str> = f.iter().map(String::as_str).collect();
        dirs.push(module_entry(
            &s,
            &format!("own{i}"),
            &variant(&format!("own {i}")),
            &f,
        ));
    }
    let records = s.records().len();
    let o = parallel(&s, &["--cache_dir", &own_arg]).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    for f in &flags {
        let spelling = f[0].split('=').next().unwrap().to_string();
        assert!(
            err.contains(&format!(
                "its flags are not compile semantics only: {spelling} sets "
            )),
            "{spelling} was not refused: {err}"
        );
    }
    assert_eq!(s.records().len(), records, "a tool ran");
    for d in &dirs {
        let names: Vec<_> = std::fs::read_dir(d).unwrap().flatten().collect();
        assert_eq!(names.len(), 2, "{d:?}: {names:?}");
    }
    assert_eq!(tree(&own), before, "the run's own cache changed");
    // `cache stats` says what the run did: refused, not to do.
    let o = s.run(&["cache", "stats", "--neuron-cache", "nc", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    for e in v["entries"].as_array().unwrap() {
        assert_eq!(e["class"], "refused", "{e}");
    }
}

/// nxcc's own cache and the simulated toolchain it lays out are refused inside the framework's
/// cache — given as a path into it, reached through a link, or by XDG_CACHE_HOME — before
/// anything is created: exit 2, both named, and the fix.
#[test]
fn nxccs_own_cache_and_toolchain_are_refused_inside_the_framework_cache() {
    let s = Scratch::new();
    module_entry(&s, "m", &zoo("mlp.hlo_module.pb"), &[]);
    std::os::unix::fs::symlink(s.join("nc"), s.join("link")).unwrap();
    let nc = std::fs::canonicalize(s.join("nc")).unwrap();
    let cases: [(&str, Vec<&str>, Option<PathBuf>, &str); 5] = [
        (
            "--cache_dir inside",
            vec!["--cache_dir", "nc/own"],
            None,
            "argument --cache_dir: nxcc's cache",
        ),
        (
            "--cache_dir through a link",
            vec!["--cache_dir", "link/own"],
            None,
            "argument --cache_dir: nxcc's cache",
        ),
        (
            "the default cache under XDG_CACHE_HOME",
            vec![],
            Some(s.join("nc/xdg")),
            "argument --cache_dir: nxcc's cache",
        ),
        (
            "a shared tier's local tier under XDG_CACHE_HOME",
            vec!["--cache_dir", "s3://bucket/prefix"],
            Some(s.join("nc/xdg")),
            "argument --cache_dir: nxcc's cache",
        ),
        (
            "the simulated toolchain under XDG_CACHE_HOME",
            vec!["--cache_dir", "own"],
            Some(s.join("link/xdg")),
            "argument --toolchain: the simulated toolchain would be laid out in",
        ),
    ];
    for (case, args, xdg, says) in cases {
        let mut c = parallel(&s, &args);
        if let Some(x) = &xdg {
            c.env("XDG_CACHE_HOME", x);
        }
        let o = c.output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{case}: {err}");
        assert!(err.contains(says), "{case}: {err}");
        assert!(
            err.contains(&format!("inside the framework's cache {}", nc.display()))
                || err.contains(&format!(
                    "inside the framework's cache {}",
                    s.join("nc").display()
                )),
            "{case}: {err}"
        );
        assert!(
            err.contains("outside"),
            "{case}: the fix is not said: {err}"
        );
        assert_eq!(
            not_the_frameworks(&s.join("nc")),
            Vec::<PathBuf>::new(),
            "{case}"
        );
        assert!(
            !s.join("nc/own").exists() && !s.join("nc/xdg").exists(),
            "{case}"
        );
        assert!(!s.join("own").exists(), "{case}");
    }
    // Outside, the same run compiles.
    let o = parallel(&s, &["--cache_dir", "own"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// An external compiler's result is what it did: with `-O3` in an entry's flags (nxcc's own
/// pipeline would write no NEFF for it) the compiler writes a NEFF, the entry is done with it,
/// and nothing says "no NEFF"; the compile is kept in nxcc's cache like any other.
#[test]
fn an_external_compilers_neff_with_o3_is_its_result() {
    let s = Scratch::new();
    let e = module_entry(&s, "o3", &zoo("mlp.hlo_module.pb"), &["-O3"]);
    let compiler = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake-compiler.sh");
    let compiler = compiler.display().to_string();
    let run = || {
        s.nxcc(&[
            "parallel-compile",
            "--neuron-cache",
            "nc",
            "--neuron-version",
            SIM_VERSION,
            "--compiler",
            &compiler,
            "--",
            "--target",
            "trn2",
        ])
        .env("TMPDIR", tmp_dir(&s))
        .output()
        .unwrap()
    };
    let o = run();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    let neff = std::fs::read(e.join("model.neff")).unwrap();
    assert!(neff.starts_with(b"FAKE-NEFF"), "{neff:?}");
    assert!(e.join("model.done").is_file());
    for says in [&out, &err] {
        assert!(!says.contains("no NEFF"), "{out}{err}");
    }
    assert!(out.contains("1 compile: 1 succeeded, 0 failed;"), "{out}");
    // Again, the entry to do: nxcc's cache serves the compiler's NEFF.
    for f in ["model.neff", "model.done"] {
        std::fs::remove_file(e.join(f)).unwrap();
    }
    let o = run();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.lines().any(|l| l.contains(" hit ")), "{out}");
    assert_eq!(std::fs::read(e.join("model.neff")).unwrap(), neff);
}

/// An entry whose compile failed without a failure of its own graph (a hit-only cache's miss,
/// flags that do not make a compile) gets no `model.log` and is not said to have one: the
/// report names no log; the entries' work directories are in a directory only this user can
/// read.
#[test]
fn no_message_names_a_model_log_that_was_not_written() {
    let s = Scratch::new();
    let missed = module_entry(&s, "missed", &zoo("mlp.hlo_module.pb"), &[]);
    let bad = module_entry(&s, "bad", &zoo("mlp.hlo_module.pb"), &["--lnc", "many"]);
    let report = s.join("report.json");
    let r = report.display().to_string();
    let mut c = parallel(&s, &["--report", &r]);
    c.args(["--cache-mode", "hit-only"]);
    let o = c.output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{err}");
    for e in [&missed, &bad] {
        assert!(!e.join("model.log").exists(), "{e:?}");
        assert!(
            err.contains(&format!(
                "{} failed (no log kept)",
                e.join("model.hlo_module.pb").display()
            )),
            "{err}"
        );
    }
    assert!(!err.contains("model.log"), "{err}");
    let v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    for c in v["compiles"].as_array().unwrap() {
        assert!(c["log"].is_null(), "{c}");
    }
}

/// The entries' work directories — each named after its entry's key — are in a directory of the
/// run's that only its user can read or list (`0700`), as each of them is.
#[test]
fn the_entries_work_directories_are_private_and_so_is_their_parent() {
    let s = Scratch::new();
    module_entry(&s, "a", &zoo("mlp.hlo_module.pb"), &[]);
    let modes = s.join("modes.txt");
    let compiler = script(
        &s,
        "mode-compiler",
        "#!/bin/sh\nstat -c %a \"$(dirname \"$PWD\")\" \"$PWD\" >> \"$MODES\"\nfor a; do [ \"$prev\" = --output ] && out=$a; prev=$a; done\nprintf FAKE-NEFF > \"$out\"\n",
    );
    let o = with_compiler(
        &s,
        &compiler,
        &["--neuron-version", SIM_VERSION, "--no_cache"],
    )
    .env("MODES", &modes)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(&modes).unwrap(), "700\n700\n");
}
