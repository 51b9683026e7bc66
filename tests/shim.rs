//! `nxcc shim`: many processes calling `neuronx-cc compile` at once through the shim get one real
//! compile per distinct graph, within the daemon's memory budget, each with its own output, log,
//! console and exit status; every other use of `neuronx-cc` is the real compiler; uninstall
//! leaves the directory as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const NXCC: &str = env!("CARGO_BIN_EXE_nxcc");

fn fake_compiler() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake-compiler.sh")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A scratch world: a shim directory, the daemon's socket and cache, callers' directories.
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn shim_dir(&self) -> PathBuf {
        self.path().join("shim")
    }
    fn socket(&self) -> PathBuf {
        self.path().join("d.sock")
    }
    /// `nxcc ARGS` with this world's environment.
    fn nxcc(&self, args: &[&str]) -> Output {
        self.env(&mut Command::new(NXCC))
            .args(args)
            .current_dir(self.path())
            .output()
            .unwrap()
    }
    /// The environment of every process of the world: the shim first on PATH, the cache here.
    fn env<'a>(&self, c: &'a mut Command) -> &'a mut Command {
        let path = format!(
            "{}:{}",
            self.shim_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        c.env("PATH", path)
            .env("NEURON_COMPILE_CACHE_URL", self.path().join("cache"))
            .env("XDG_CACHE_HOME", self.path().join("xdg"))
            .env_remove("NXCC_DAEMON_SOCKET")
            .env_remove("NEURON_CC_FLAGS")
            .env_remove("FAKE_COMPILER_CRASH")
    }
    /// `nxcc shim install DIR --compiler COMPILER EXTRA...`, whatever it answers.
    fn try_install(&self, dir: &Path, compiler: &Path, extra: &[&str]) -> Output {
        let mut args = vec![
            "shim",
            "install",
            dir.to_str().unwrap(),
            "--compiler",
            compiler.to_str().unwrap(),
        ];
        args.extend(extra);
        self.nxcc(&args)
    }
    /// The shim installed in the world's shim directory over the fake compiler, with the
    /// world's socket.
    fn install(&self, extra: &[&str]) {
        let socket = self.socket();
        let mut args = vec!["--socket", socket.to_str().unwrap()];
        args.extend(extra);
        let o = self.try_install(&self.shim_dir(), &fake_compiler(), &args);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
}

impl Drop for World {
    /// Stop the daemon the shim started (it would otherwise wait out its inactivity timeout).
    fn drop(&mut self) {
        if let Ok(mut s) = std::os::unix::net::UnixStream::connect(self.socket()) {
            let _ = s.write_all(b"POST /exit HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut answer = Vec::new();
            let _ = s.read_to_end(&mut answer);
        }
    }
}

/// One run recorded by the fake compiler: start and end (ns), MiB held, the models' checksums.
#[derive(Debug)]
struct Run {
    start: u128,
    end: u128,
    held_mb: u64,
    models: Vec<String>,
}

fn runs(record: &Path) -> Vec<Run> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Run {
                start: f[1].parse().unwrap(),
                end: f[2].parse().unwrap(),
                held_mb: f[3].parse().unwrap(),
                models: f[4..].iter().map(|s| s.to_string()).collect(),
            }
        })
        .collect()
}

/// The largest sum of memory held by runs that overlap in time, MiB.
fn peak_concurrent_mb(runs: &[Run]) -> u64 {
    let mut events: Vec<(u128, i64)> = Vec::new();
    for r in runs {
        events.push((r.start, r.held_mb as i64));
        events.push((r.end, -(r.held_mb as i64)));
    }
    // Ends before starts at the same instant.
    events.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, d) in events {
        now += d;
        peak = peak.max(now);
    }
    peak as u64
}

fn cksum(path: &Path) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg("cksum < \"$1\" | cut -d' ' -f1")
        .arg("sh")
        .arg(path)
        .output()
        .unwrap();
    text(&o.stdout).trim().to_string()
}

/// The budget the shim's daemon is given, and what each compile holds: two fit at once, three
/// do not (the first estimate of a compile is 256 MiB + 4 × its small model).
const BUDGET_MB: u64 = 700;
const HOLD_MB: u64 = 300;

/// One caller's end: the compiler's NEFF and a PASS for a graph that compiles (`reference`), the
/// compiler's error and no NEFF for the one that fails; a log of its own either way.
fn check_caller(g: usize, cwd: &Path, o: &Output, reference: Option<&[u8]>) {
    let neff = cwd.join("model.neff");
    let log = std::fs::read_to_string(cwd.join("log-neuron-cc.txt")).unwrap_or_default();
    match reference {
        Some(bytes) => {
            assert_eq!(
                o.status.code(),
                Some(0),
                "{}: {}{}",
                cwd.display(),
                text(&o.stdout),
                text(&o.stderr)
            );
            assert_eq!(
                &std::fs::read(&neff).unwrap(),
                bytes,
                "{}: the NEFF is the compiler's for graph {g}",
                cwd.display()
            );
            assert!(
                text(&o.stdout).contains("Compiler status PASS"),
                "{}",
                text(&o.stdout)
            );
            assert!(
                log.contains("Compiler status PASS"),
                "{}: a log of its own: {log}",
                cwd.display()
            );
        }
        None => {
            assert_eq!(
                o.status.code(),
                Some(70),
                "{}: {}",
                cwd.display(),
                text(&o.stderr)
            );
            let err = text(&o.stderr);
            assert!(
                err.contains("fake-compiler: error: compilation failed"),
                "{}: the compiler's error lines reach every caller: {err}",
                cwd.display()
            );
            assert!(!neff.exists(), "a failed compile writes no NEFF");
            assert!(!log.is_empty(), "{}: a log of its own", cwd.display());
        }
    }
}

/// Exactly one real compile per graph (of those `record` lists), and never more memory held at
/// once than the budget.
fn one_compile_per_graph_within_the_budget(record: &Path, graphs: &[PathBuf]) {
    let runs = runs(record);
    let mut per_graph: BTreeMap<String, usize> = BTreeMap::new();
    for r in &runs {
        assert_eq!(r.models.len(), 1, "{r:?}");
        *per_graph.entry(r.models[0].clone()).or_default() += 1;
    }
    let expected: BTreeSet<String> = graphs.iter().map(|g| cksum(g)).collect();
    assert_eq!(
        per_graph.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "{runs:?}"
    );
    assert!(per_graph.values().all(|&n| n == 1), "{per_graph:?}");
    let peak = peak_concurrent_mb(&runs);
    assert!(peak >= HOLD_MB, "the runs held memory: {runs:?}");
    assert!(
        peak <= BUDGET_MB,
        "{peak} MiB held at once, over the daemon's budget of {BUDGET_MB} MiB: {runs:?}"
    );
}

#[test]
fn thirty_two_callers_for_four_graphs_get_four_compiles_within_the_budget() {
    let w = World::new();
    w.install(&["--memory-budget", &format!("{BUDGET_MB}M")]);
    let record = w.path().join("record");
    // Four graphs that compile, one that fails.
    let graphs: Vec<PathBuf> = (0..5)
        .map(|i| {
            let p = w.path().join(format!("g{i}.pb"));
            let body = if i == 4 {
                "graph 4\nfake-compiler: fail\n".to_string()
            } else {
                format!("graph {i}\n{}\n", "x".repeat(100 * (i + 1)))
            };
            std::fs::write(&p, body).unwrap();
            p
        })
        .collect();
    // What the real compiler writes for each, run directly (not recorded).
    let reference: Vec<Option<Vec<u8>>> = graphs
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let out = w.path().join(format!("ref{i}.neff"));
            let o = Command::new(fake_compiler())
                .args(["compile", "--framework", "XLA"])
                .arg(g)
                .args(["--target", "trn2", "--output"])
                .arg(&out)
                .env_remove("FAKE_COMPILER_RECORD")
                .output()
                .unwrap();
            if i == 4 {
                assert_eq!(o.status.code(), Some(70));
                assert!(text(&o.stderr).contains("compilation failed"));
                None
            } else {
                assert!(o.status.success(), "{}", text(&o.stderr));
                Some(std::fs::read(&out).unwrap())
            }
        })
        .collect();
    // 32 callers for the four good graphs (8 each) and 4 for the failing one, all at once, each
    // in its own directory with its own copy of its graph, as framework processes do.
    let callers: Vec<(usize, PathBuf)> = (0..36)
        .map(|i| {
            let g = if i < 32 { i % 4 } else { 4 };
            let cwd = w.path().join(format!("rank{i}"));
            std::fs::create_dir(&cwd).unwrap();
            std::fs::copy(&graphs[g], cwd.join("model.hlo_module.pb")).unwrap();
            (g, cwd)
        })
        .collect();
    let children: Vec<_> = callers
        .iter()
        .map(|(_, cwd)| {
            w.env(&mut Command::new("neuronx-cc"))
                .args([
                    "compile",
                    "--framework=XLA",
                    "model.hlo_module.pb",
                    "--target=trn2",
                    "--output",
                    "model.neff",
                ])
                .current_dir(cwd)
                .env("FAKE_COMPILER_HOLD_MB", HOLD_MB.to_string())
                .env("FAKE_COMPILER_SLEEP", "0.3")
                .env("FAKE_COMPILER_RECORD", &record)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for ((g, cwd), o) in callers.iter().zip(&outputs) {
        check_caller(*g, cwd, o, reference[*g].as_deref());
    }
    one_compile_per_graph_within_the_budget(&record, &graphs);
    // status sees the daemon.
    let s = w.nxcc(&["shim", "status", w.shim_dir().to_str().unwrap()]);
    assert!(s.status.success(), "{}", text(&s.stderr));
    let st = text(&s.stdout);
    assert!(st.contains("first on PATH: yes"), "{st}");
    assert!(st.contains("daemon: answers on"), "{st}");
    assert!(st.contains("the external compiler"), "{st}");
    // The same, as JSON.
    let s = w.nxcc(&["shim", "status", "--json", w.shim_dir().to_str().unwrap()]);
    assert!(s.status.success(), "{}", text(&s.stderr));
    let j: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(j["installed"], true, "{j}");
    assert_eq!(j["is_first_on_path"], true, "{j}");
    assert_eq!(j["daemon"]["state"], "answers", "{j}");
    assert!(j["daemon"]["status"]["pid"].as_u64().unwrap() > 0, "{j}");
    assert_eq!(j["daemon"]["socket"], w.socket().to_str().unwrap(), "{j}");
}

#[test]
fn status_json_has_the_fields_of_the_text() {
    let w = World::new();
    w.install(&["--memory-budget", "8G"]);
    let dir = w.shim_dir();
    let s = w.nxcc(&["shim", "status", "--json", dir.to_str().unwrap()]);
    assert!(s.status.success(), "{}", text(&s.stderr));
    let j: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(j["installed"], true, "{j}");
    assert_eq!(j["dir"], dir.to_str().unwrap(), "{j}");
    assert_eq!(j["memory_budget"], "8G", "{j}");
    assert_eq!(j["compiler"], fake_compiler().to_str().unwrap(), "{j}");
    assert_eq!(j["compiler_state"], "ok", "{j}");
    assert_eq!(j["link_target_exists"], true, "{j}");
    assert_eq!(j["daemon"]["state"], "not_running", "{j}");
    assert_eq!(j["daemon"]["shared"], true, "installed with --socket: {j}");
    assert_eq!(j["daemon"]["socket"], w.socket().to_str().unwrap(), "{j}");
    assert!(j["daemon"]["status"].is_null(), "{j}");
    // Uninstalled: no shim, exit 1, and why.
    let o = w.nxcc(&["shim", "uninstall", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = w.nxcc(&["shim", "status", "--json", dir.to_str().unwrap()]);
    assert_eq!(s.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(j["installed"], false, "{j}");
    assert!(
        j["why"].as_str().unwrap().contains("is not an nxcc shim"),
        "{j}"
    );
}

#[test]
fn everything_but_a_compile_is_the_real_compiler() {
    let w = World::new();
    w.install(&[]);
    for args in [
        &["--version"][..],
        &["list-operators", "--framework", "XLA"][..],
        &["frobnicate", "a b", "--x=1"][..],
        // A compile nxcc cannot parse: the real compiler judges it.
        &["compile", "m.pb", "--no-such-flag-anywhere"][..],
    ] {
        let run = |program: &Path| {
            w.env(&mut Command::new(program))
                .args(args)
                .env("FAKE_COMPILER_ECHO", "from the caller")
                .current_dir(w.path())
                .output()
                .unwrap()
        };
        let through = run(&w.shim_dir().join("neuronx-cc"));
        let direct = run(&fake_compiler());
        assert_eq!(through.status.code(), direct.status.code(), "{args:?}");
        assert_eq!(text(&through.stdout), text(&direct.stdout), "{args:?}");
        assert_eq!(text(&through.stderr), text(&direct.stderr), "{args:?}");
        if args[0] != "compile" {
            assert!(
                text(&direct.stdout).contains("from the caller")
                    || text(&direct.stderr).contains("from the caller"),
                "{args:?}: the environment reaches the compiler"
            );
        }
    }
    // The same through PATH, as a framework calls it.
    let o = w
        .env(&mut Command::new("neuronx-cc"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        text(&o.stdout).starts_with("fake-compiler 2.24.0.0"),
        "{}",
        text(&o.stdout)
    );
    // Nothing started a daemon.
    assert!(!w.socket().exists());
}

/// Every entry of `dir`: name → (kind, contents or link target).
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let v = if m.file_type().is_symlink() {
            format!("link {}", std::fs::read_link(&p).unwrap().display())
        } else if m.is_dir() {
            "dir".to_string()
        } else {
            format!("file {}", text(&std::fs::read(&p).unwrap()))
        };
        out.insert(e.file_name().to_string_lossy().into_owned(), v);
    }
    out
}

#[test]
fn uninstall_leaves_the_directory_as_it_was() {
    let w = World::new();
    // A directory with things of its own.
    let dir = w.shim_dir();
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("python3"), "#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("/bin/true", dir.join("tool")).unwrap();
    let before = snapshot(&dir);
    w.install(&[]);
    let installed = snapshot(&dir);
    assert_eq!(installed.len(), before.len() + 2, "{installed:?}");
    assert_eq!(
        installed["neuronx-cc"],
        format!("link {}", std::fs::canonicalize(NXCC).unwrap().display())
    );
    // Installing again changes nothing but the configuration.
    w.install(&["--memory-budget", "8G"]);
    assert_eq!(snapshot(&dir).len(), installed.len());
    let s = w.nxcc(&["shim", "status"]);
    assert!(s.status.success(), "{}", text(&s.stderr));
    assert!(
        text(&s.stdout).contains("memory budget: 8G"),
        "{}",
        text(&s.stdout)
    );
    assert!(
        text(&s.stdout).contains("daemon: not running"),
        "{}",
        text(&s.stdout)
    );
    let o = w.nxcc(&["shim", "uninstall", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(snapshot(&dir), before);
    // Nothing left to uninstall, and status says there is no shim.
    let again = w.nxcc(&["shim", "uninstall", dir.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("no nxcc shim in"),
        "{}",
        text(&again.stderr)
    );
    let s = w.nxcc(&["shim", "status", dir.to_str().unwrap()]);
    assert_eq!(s.status.code(), Some(1));

    // A directory install created is removed again.
    let fresh = w.path().join("fresh/bin");
    std::fs::create_dir(w.path().join("fresh")).unwrap();
    let o = w.try_install(&fresh, &fake_compiler(), &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // Installed without --socket: each user's daemon of it on a socket of the same name in
    // their daemon directory — the one status shows (this user's, in the world).
    let runtime = w.path().join("runtime");
    let per_user = |args: &[&str]| {
        w.env(&mut Command::new(NXCC))
            .args(args)
            .env("XDG_RUNTIME_DIR", &runtime)
            .current_dir(w.path())
            .output()
            .unwrap()
    };
    let s = per_user(&["shim", "status", fresh.to_str().unwrap()]);
    let status = text(&s.stdout);
    let socket = status
        .split("daemon: not running on ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        Path::new(socket).starts_with(runtime.join("nxcc")),
        "{status}"
    );
    let socket_name = Path::new(socket).file_name().unwrap().to_str().unwrap();
    assert!(socket_name.starts_with("shim-"), "{status}");
    let o = per_user(&["shim", "uninstall", fresh.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!fresh.exists());
    // What it says of other users' daemons names their socket, not a command that needs the
    // directory it has just removed.
    let said = text(&o.stdout);
    assert!(
        said.contains(&format!(
            "nxcc daemon stop --socket DIR/{socket_name} (run as them; DIR is their daemon directory"
        )),
        "{said}"
    );
    assert!(!said.contains("shim status"), "{said}");
    assert!(w.path().join("fresh").is_dir());
}

#[test]
fn install_refuses_what_it_must_not_touch() {
    let w = World::new();
    let dir = w.shim_dir();
    std::fs::create_dir(&dir).unwrap();
    // A neuronx-cc of someone else's.
    std::fs::write(dir.join("neuronx-cc"), "#!/bin/sh\necho mine\n").unwrap();
    let fake = fake_compiler();
    let o = w.try_install(&dir, &fake, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("is not an nxcc shim; refusing to replace it"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("neuronx-cc")).unwrap(),
        "#!/bin/sh\necho mine\n"
    );
    std::fs::remove_file(dir.join("neuronx-cc")).unwrap();
    // A compiler that is not there, a budget the daemon would not take, a shim as the compiler.
    for (args, needle) in [
        (
            vec!["--compiler", "/nonexistent/neuronx-cc"],
            "not an executable file",
        ),
        (
            vec!["--compiler", "no-such-compiler-on-path"],
            "no executable no-such-compiler-on-path on PATH",
        ),
        (
            vec![
                "--compiler",
                fake.to_str().unwrap(),
                "--memory-budget",
                "lots",
            ],
            "--memory-budget",
        ),
    ] {
        let mut a = vec!["shim", "install", dir.to_str().unwrap()];
        a.extend(args.iter().copied());
        let o = w.nxcc(&a);
        assert_ne!(o.status.code(), Some(0), "{args:?}");
        assert!(
            text(&o.stderr).contains(needle),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    assert!(snapshot(&dir).is_empty(), "{:?}", snapshot(&dir));
    w.install(&[]);
    let other = w.path().join("other");
    let shim = dir.join("neuronx-cc");
    let o = w.try_install(&other, &shim, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("is an nxcc shim itself"),
        "{}",
        text(&o.stderr)
    );
    // Usage errors.
    for (args, needle) in [
        (&["shim"][..], "Usage: nxcc shim <COMMAND>"),
        (
            &["shim", "install", "d"][..],
            "were not provided:\n  --compiler <REAL>",
        ),
        (&["shim", "uninstall"][..], "were not provided:\n  <DIR>"),
        (
            &["shim", "status", "--compiler", "x"][..],
            "unexpected argument '--compiler' found",
        ),
        (
            &["shim", "remove", "d"][..],
            "unrecognized subcommand 'remove'",
        ),
    ] {
        let o = w.nxcc(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(needle),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn a_daemon_that_cannot_start_leaves_the_compile_to_the_real_compiler() {
    let w = World::new();
    // A socket where no daemon can listen: its directory is a file.
    std::fs::write(w.path().join("not-a-dir"), "").unwrap();
    let socket = w.path().join("not-a-dir/d.sock");
    let o = w.try_install(
        &w.shim_dir(),
        &fake_compiler(),
        &["--socket", socket.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::write(w.path().join("m.pb"), "graph\n").unwrap();
    let o = w
        .env(&mut Command::new("neuronx-cc"))
        .args(["compile", "m.pb", "--target", "trn2", "--output", "m.neff"])
        .current_dir(w.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("compiling with") && text(&o.stderr).contains("directly"),
        "{}",
        text(&o.stderr)
    );
    assert!(std::fs::read(w.path().join("m.neff"))
        .unwrap()
        .starts_with(b"FAKE-NEFF"));
}

/// The daemon the shim starts runs the compiler without the shim's directory on its PATH: a
/// compiler that runs `neuronx-cc` itself does not come back to the shim.
#[test]
fn the_compiler_behind_the_shim_does_not_find_the_shim() {
    let w = World::new();
    w.install(&[]);
    std::fs::write(w.path().join("m.pb"), "graph\n").unwrap();
    let which = w.path().join("which");
    let o = w
        .env(&mut Command::new("neuronx-cc"))
        .args(["compile", "m.pb", "--target", "trn2", "--output", "m.neff"])
        .env("FAKE_COMPILER_WHICH", &which)
        .current_dir(w.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(w.socket().exists(), "the compile went to the daemon");
    let found = std::fs::read_to_string(&which).unwrap();
    assert!(
        !found.trim().starts_with(w.shim_dir().to_str().unwrap()),
        "the compiler's neuronx-cc: {found}"
    );
    // While the caller itself finds the shim first.
    let o = w
        .env(&mut Command::new("sh"))
        .args(["-c", "command -v neuronx-cc"])
        .output()
        .unwrap();
    assert_eq!(
        text(&o.stdout).trim(),
        w.shim_dir().join("neuronx-cc").to_str().unwrap()
    );
}

// ---- trust: other users, loops, what uninstall removes ----

/// The other user of the trust tests (`nobody`).
const OTHER: u32 = 65534;

fn require_root(test: &str) {
    assert!(
        rustix::process::geteuid().is_root(),
        "{test} plays another user (uid {OTHER}): run it as root, as CI does"
    );
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory of the world owned by `uid`, mode 0700 (0755 when `open`).
fn own_dir(w: &World, rel: &str, uid: u32, open: bool) -> PathBuf {
    let d = w.path().join(rel);
    std::fs::create_dir_all(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(uid), Some(uid)).unwrap();
    chmod(&d, if open { 0o755 } else { 0o700 });
    d
}

/// Run `cmd`, or kill it and fail as hung after a generous guard (never a latency assertion).
fn guarded(cmd: &mut Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let guard = std::time::Duration::from_secs(90);
    let deadline = std::time::Instant::now() + guard;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {guard:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The lines of `err` that are warnings.
fn warning_lines(err: &str) -> Vec<&str> {
    err.lines().filter(|l| l.contains("WARNING")).collect()
}

/// `neuronx-cc ARGS` through the world's PATH, as `uid`, in `cwd`, with that user's daemon
/// directory and compile cache.
fn as_user(w: &World, uid: u32, cwd: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("neuronx-cc");
    w.env(&mut c)
        .args(args)
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", w.path().join(format!("run-{uid}")))
        .env(
            "NEURON_COMPILE_CACHE_URL",
            w.path().join(format!("cache-{uid}")),
        );
    if uid != 0 {
        use std::os::unix::process::CommandExt;
        c.uid(uid).gid(uid);
    }
    guarded(&mut c, &format!("neuronx-cc {args:?} as uid {uid}"))
}

/// Stops the daemons of the given sockets, as their users, when dropped.
struct Daemons<'a>(&'a World, Vec<(u32, PathBuf)>);

impl Drop for Daemons<'_> {
    fn drop(&mut self) {
        for (uid, socket) in &self.1 {
            let mut c = Command::new(NXCC);
            c.args(["daemon", "stop", "--socket"]).arg(socket);
            if *uid != 0 {
                use std::os::unix::process::CommandExt;
                c.uid(*uid).gid(*uid);
            }
            let _ = c.output();
        }
        let _ = self.0;
    }
}

/// The shim sockets in a user's daemon directory.
fn shim_sockets(w: &World, uid: u32) -> Vec<PathBuf> {
    let dir = w.path().join(format!("run-{uid}/nxcc"));
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect()
}

/// A world two users share: reachable by both, a daemon directory, a cache and a working
/// directory with a model for each.
fn shared_world() -> World {
    let w = World::new();
    chmod(w.path(), 0o755);
    for uid in [0, OTHER] {
        own_dir(&w, &format!("run-{uid}"), uid, false);
        own_dir(&w, &format!("cache-{uid}"), uid, false);
        let wd = own_dir(&w, &format!("work-{uid}"), uid, false);
        std::fs::write(wd.join("m.pb"), format!("graph of {uid}\n")).unwrap();
        std::os::unix::fs::chown(wd.join("m.pb"), Some(uid), Some(uid)).unwrap();
    }
    w
}

fn compile_as(w: &World, uid: u32) -> Output {
    let wd = w.path().join(format!("work-{uid}"));
    as_user(
        w,
        uid,
        &wd,
        &["compile", "m.pb", "--target", "trn2", "--output", "m.neff"],
    )
}

/// Two users on one shim: each compile goes to its own user's daemon (per-user sockets by
/// default), both served, no warning. With one socket configured and no `--allow-uid`, the user
/// the daemon does not serve gets one warning line and the real compiler; with `--allow-uid`,
/// that user is served by the shared daemon.
#[test]
fn two_users_on_one_shim() {
    require_root("two_users_on_one_shim");
    let w = shared_world();
    let dir = w.shim_dir();
    let install = |extra: &[&str]| {
        let mut a = vec!["shim", "install", dir.to_str().unwrap(), "--compiler"];
        let fake = fake_compiler();
        a.push(fake.to_str().unwrap());
        a.extend(extra);
        let o = w.nxcc(&a);
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    install(&[]);
    chmod(&dir, 0o755);
    let mut daemons = Daemons(&w, Vec::new());
    for uid in [0, OTHER] {
        let o = compile_as(&w, uid);
        assert_eq!(o.status.code(), Some(0), "uid {uid}: {}", text(&o.stderr));
        assert!(
            !text(&o.stderr).contains("WARNING"),
            "uid {uid}: {}",
            text(&o.stderr)
        );
        let sockets = shim_sockets(&w, uid);
        assert_eq!(sockets.len(), 1, "uid {uid}: its own daemon: {sockets:?}");
        daemons.1.push((uid, sockets[0].clone()));
        let neff = w.path().join(format!("work-{uid}/m.neff"));
        assert!(std::fs::read(neff).unwrap().starts_with(b"FAKE-NEFF"));
    }
    // One socket for all, its daemon started by the other user first: root does not use a
    // daemon of another user's; it compiles with the real compiler, saying so in one line.
    let shared = w.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    let socket = shared.join("s.sock");
    install(&["--socket", socket.to_str().unwrap()]);
    let o = compile_as(&w, OTHER);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    daemons.1.push((OTHER, socket.clone()));
    assert!(socket.exists(), "the other user's daemon listens");
    let o = compile_as(&w, 0);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let warnings = warning_lines(&err);
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("is owned by uid 65534") && warnings[0].contains("directly"),
        "{err}"
    );
    // A daemon of root's that serves another uid, not this one: it refuses the other user
    // (403), who gets one warning line and the real compiler.
    drop(daemons);
    let socket = shared.join("r.sock");
    install(&["--socket", socket.to_str().unwrap(), "--allow-uid", "1"]);
    let daemons = Daemons(&w, vec![(0, socket.clone())]);
    let o = compile_as(&w, 0);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("WARNING"), "{}", text(&o.stderr));
    let o = compile_as(&w, OTHER);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let warnings = warning_lines(&err);
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("403 Forbidden") && warnings[0].contains("directly"),
        "{err}"
    );
    // Shared with --allow-uid (a socket directory both reach): the other user is served.
    drop(daemons);
    let both = w.path().join("both");
    std::fs::create_dir(&both).unwrap();
    chmod(&both, 0o755);
    let socket = both.join("s.sock");
    install(&[
        "--socket",
        socket.to_str().unwrap(),
        "--allow-uid",
        &OTHER.to_string(),
    ]);
    let _daemons = Daemons(&w, vec![(0, socket.clone())]);
    for uid in [0, OTHER] {
        let o = compile_as(&w, uid);
        assert_eq!(o.status.code(), Some(0), "uid {uid}: {}", text(&o.stderr));
        assert!(
            !text(&o.stderr).contains("WARNING"),
            "uid {uid}: {}",
            text(&o.stderr)
        );
    }
}

/// `shim install` into a directory others can write is refused, nothing written; a shim whose
/// directory became writable by others, or whose configuration another user replaced, refuses
/// to start — the other user's "compiler" never runs.
#[test]
fn a_shim_configuration_others_could_write_is_refused() {
    require_root("a_shim_configuration_others_could_write_is_refused");
    let w = World::new();
    chmod(w.path(), 0o755);
    let dir = w.shim_dir();
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o777);
    let fake = fake_compiler();
    let install = || w.try_install(&dir, &fake, &[]);
    let o = install();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!(
            "the shim's directory {} is writable by group and others (mode 0777)",
            dir.display()
        )),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
    chmod(&dir, 0o755);
    let o = install();
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The other user's "compiler", and the configuration that names it, written as that user.
    let evil = own_dir(&w, "evil", OTHER, true);
    let marker = evil.join("ran-as");
    let script = evil.join("compiler");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nid -u > {}\n", marker.display()),
    )
    .unwrap();
    chmod(&script, 0o755);
    let config = dir.join("neuronx-cc.nxcc-shim.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    v["compiler"] = serde_json::Value::from(script.to_str().unwrap());
    let draft = w.path().join("draft.json");
    std::fs::write(&draft, serde_json::to_vec(&v).unwrap()).unwrap();
    chmod(&draft, 0o644);
    let replaced = evil.join("config.json");
    chmod(&dir, 0o777);
    let as_other = |program: &str, args: &[&Path]| {
        use std::os::unix::process::CommandExt;
        let o = Command::new(program)
            .args(args)
            .uid(OTHER)
            .gid(OTHER)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{program} as the other user: {}",
            text(&o.stderr)
        );
    };
    as_other("cp", &[&draft, &replaced]);
    as_other("mv", &[&replaced, &config]);
    let run = |w: &World| {
        guarded(
            w.env(&mut Command::new(dir.join("neuronx-cc")))
                .arg("--version")
                .current_dir(w.path()),
            "the shim's --version",
        )
    };
    for (mode, needle) in [
        (
            0o777,
            "is writable by group and others (mode 0777)".to_string(),
        ),
        (
            0o755,
            format!(
                "the shim's configuration {} is owned by uid {OTHER}",
                config.display()
            ),
        ),
    ] {
        chmod(&dir, mode);
        let o = run(&w);
        assert_eq!(
            o.status.code(),
            Some(70),
            "{}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains("refusing the shim configuration"),
            "{}",
            text(&o.stderr)
        );
        assert!(text(&o.stderr).contains(&needle), "{}", text(&o.stderr));
        assert!(!marker.exists(), "the other user's compiler ran");
    }
}

/// Point the installed shim's configuration at `compiler`, behind install's back.
fn set_compiler(w: &World, compiler: &Path) {
    let config = w.shim_dir().join("neuronx-cc.nxcc-shim.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    v["compiler"] = serde_json::Value::from(compiler.to_str().unwrap());
    std::fs::write(&config, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// A real compiler that resolves to nxcc — re-pointed to the shim after install, or the shim
/// named as its own compiler — is a loop, refused at every start (exit 70, saying so) instead of
/// answering as nxcc or running itself forever; install refuses one from the start.
#[test]
fn a_shim_loop_is_refused() {
    let w = World::new();
    let real_dir = w.path().join("real");
    std::fs::create_dir(&real_dir).unwrap();
    let real = real_dir.join("neuronx-cc");
    std::os::unix::fs::symlink(fake_compiler(), &real).unwrap();
    let o = w.try_install(&w.shim_dir(), &real, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let shim = w.shim_dir().join("neuronx-cc");
    let version = |w: &World| {
        guarded(
            w.env(&mut Command::new(&shim))
                .arg("--version")
                .current_dir(w.path()),
            "the shim's --version",
        )
    };
    let o = version(&w);
    assert!(
        text(&o.stdout).starts_with("fake-compiler"),
        "{}",
        text(&o.stdout)
    );
    // The real compiler re-pointed to the shim.
    std::fs::remove_file(&real).unwrap();
    std::os::unix::fs::symlink(&shim, &real).unwrap();
    let o = version(&w);
    assert_eq!(
        o.status.code(),
        Some(70),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains(&format!(
            "the real compiler {} is nxcc itself",
            real.display()
        )),
        "{}",
        text(&o.stderr)
    );
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    // The shim configured as its own compiler.
    set_compiler(&w, &shim);
    let o = version(&w);
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("is nxcc itself"),
        "{}",
        text(&o.stderr)
    );
    // A "compiler" that runs whatever `neuronx-cc` comes first on PATH: the shim again, and
    // again; the chain ends at the fourth shim, saying so.
    let wrapper = real_dir.join("wrapper.sh");
    std::fs::write(&wrapper, "#!/bin/sh\nexec neuronx-cc \"$@\"\n").unwrap();
    chmod(&wrapper, 0o755);
    set_compiler(&w, &wrapper);
    let o = version(&w);
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("4 nxcc shims ran one another (NXCC_SHIM_HOPS)"),
        "{}",
        text(&o.stderr)
    );
    // Install refuses a compiler that is nxcc under another name.
    let alias = real_dir.join("compiler-alias");
    std::os::unix::fs::symlink(NXCC, &alias).unwrap();
    let o = w.try_install(&w.path().join("other"), &alias, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("is nxcc itself"),
        "{}",
        text(&o.stderr)
    );
    assert!(!w.path().join("other").exists());
}

/// `shim uninstall` removes every directory install created (not only the last one), and
/// stops the shim's daemon.
#[test]
fn uninstall_removes_the_directories_install_made_and_stops_the_daemon() {
    let w = World::new();
    let top = w.path().join("a");
    let dir = top.join("b/c");
    let fake = fake_compiler();
    let o = w.try_install(&dir, &fake, &["--socket", w.socket().to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::write(w.path().join("m.pb"), "graph\n").unwrap();
    let o = guarded(
        w.env(&mut Command::new(dir.join("neuronx-cc")))
            .args(["compile", "m.pb", "--target", "trn2", "--output", "m.neff"])
            .current_dir(w.path()),
        "a compile through the shim",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(w.socket().exists(), "the daemon runs");
    let o = w.nxcc(&["shim", "uninstall", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let said = text(&o.stdout);
    assert!(said.contains("Stopped the daemon (pid "), "{said}");
    assert!(!top.exists(), "{said}");
    assert!(!w.socket().exists(), "the daemon is gone");
    assert!(!w.path().join("d.pid").exists());
}
