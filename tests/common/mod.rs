//! Shared helpers of the compile tests: a scratch launch directory with the example model, the
//! simulated toolchain laid out under a private cache dir, and runs of the built `nxcc`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod bundles;
pub mod netns;
pub mod perfetto;
pub mod swap;
pub mod venv;

pub const NXCC: &str = env!("CARGO_BIN_EXE_nxcc");

/// A scratch launch directory with the example models, and a private environment.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models");
        for m in ["mlp.hlo_module.pb", "mlp.hlo"] {
            std::fs::copy(models.join(m), dir.path().join(m)).unwrap();
        }
        for d in [".cache", ".state"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Scratch { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn record(&self) -> PathBuf {
        self.join("record.jsonl")
    }

    /// A `nxcc` command in the launch dir with the private environment.
    pub fn nxcc(&self, args: &[&str]) -> Command {
        let mut c = Command::new(NXCC);
        c.args(args)
            .current_dir(self.path())
            .env("XDG_CACHE_HOME", self.join(".cache"))
            .env("NXCC_SIM_STATE", self.join(".state"))
            .env("NXCC_SIM_RECORD", self.record())
            .env_remove("NXCC_SIM_FAULT")
            .env_remove("NXCC_SIM_WORK_MS")
            .env_remove("NXCC_SIM_WORK_MS_PER_MB")
            .env_remove("NXCC_SIM_RSS_MB")
            .env_remove("NXCC_SIM_SUBGRAPHS")
            .env_remove("NXCC_TOOLCHAIN")
            .env_remove("NEURON_PLATFORM_TARGET_OVERRIDE");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.nxcc(args).output().unwrap()
    }

    /// `nxcc compile mlp.hlo_module.pb --target TARGET --toolchain sim EXTRA...`.
    pub fn sim_cmd(&self, target: &str, extra: &[&str]) -> Command {
        let mut args = vec![
            "compile",
            "mlp.hlo_module.pb",
            "--target",
            target,
            "--toolchain",
            "sim",
        ];
        args.extend(extra);
        self.nxcc(&args)
    }

    /// [`Scratch::sim_cmd`], run to completion.
    pub fn sim_run(&self, target: &str, extra: &[&str]) -> Output {
        self.sim_cmd(target, extra).output().unwrap()
    }

    /// `nxcc parallel-compile ARGS -- --target trn2 --toolchain sim EXTRA...`.
    pub fn parallel_cmd(&self, args: &[&str], extra: &[&str]) -> Command {
        let mut all = vec!["parallel-compile"];
        all.extend(args);
        all.extend(["--", "--target", "trn2", "--toolchain", "sim"]);
        all.extend(extra);
        self.nxcc(&all)
    }

    /// [`Scratch::parallel_cmd`], run to completion.
    pub fn parallel_run(&self, args: &[&str], extra: &[&str]) -> Output {
        self.parallel_cmd(args, extra).output().unwrap()
    }

    /// `sh -c "hostname HOST && exec nxcc ARGS"` as the first process of a new UTS and PID
    /// namespace (a simulated host: killing `unshare` kills it and everything in its namespace at
    /// once, as a host that goes down), in the launch dir with the private cache home. `args` is
    /// shell text.
    pub fn on_host(&self, host: &str, args: &str) -> Command {
        let mut c = Command::new("unshare");
        c.args([
            "--uts",
            "--pid",
            "--fork",
            "--kill-child=SIGKILL",
            "sh",
            "-c",
        ])
        .arg(format!("hostname {host} && exec \"$0\" {args}"))
        .arg(NXCC)
        .current_dir(self.path())
        .env("XDG_CACHE_HOME", self.join(".cache"))
        .env_remove("NXCC_TOOLCHAIN");
        c
    }

    /// The tool invocations recorded so far.
    pub fn records(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.record())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Directories of the launch dir named `neuronxcc-*`.
    pub fn work_dirs(&self) -> Vec<PathBuf> {
        items_named(self.path(), "neuronxcc-")
    }
}

/// The items of `dir` whose names start with `prefix`, sorted (none when `dir` cannot be read).
pub fn items_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The argv of a simulated compile: `compile MODEL --target TARGET --toolchain sim --output OUT
/// EXTRA...`.
pub fn sim_compile_args<'a>(
    model: &'a str,
    target: &'a str,
    out: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut v = vec![
        "compile",
        model,
        "--target",
        target,
        "--toolchain",
        "sim",
        "--output",
        out,
    ];
    v.extend(extra);
    v
}

/// `MODEL --target trn2 --toolchain sim --cache_dir cache`: a simulated compile through the cache
/// `cache` of the launch dir (what follows `compile`, or `cache explain --`).
pub fn cached_args(model: &str) -> [&str; 7] {
    [
        model,
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--cache_dir",
        "cache",
    ]
}

/// What the shards of nxcc's cache in `cache` hold (`nxcc-v1/<2 chars>/*`: entries, their locks,
/// staging directories), sorted; nothing when there is no cache.
pub fn shard_items(cache: &Path) -> Vec<PathBuf> {
    let Ok(shards) = std::fs::read_dir(cache.join("nxcc-v1")) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = shards
        .flatten()
        .filter(|s| s.file_name().len() == 2 && s.path().is_dir())
        .flat_map(|s| std::fs::read_dir(s.path()).unwrap().flatten())
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// The entries of nxcc's cache in `cache`: the key directories (64 characters) in its shards.
pub fn cache_entries(cache: &Path) -> Vec<PathBuf> {
    shard_items(cache)
        .into_iter()
        .filter(|p| p.file_name().map_or(0, |n| n.len()) == 64 && p.is_dir())
        .collect()
}

/// The NEFF of the first entry of nxcc's cache in `cache` that has one.
pub fn entry_neff(cache: &Path) -> PathBuf {
    cache_entries(cache)
        .into_iter()
        .map(|e| e.join("model.neff"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no cache entry with a NEFF under {}", cache.display()))
}

/// A bindfs mount of `src` at `at` (a FUSE passthrough: `flock` through it is local to it),
/// unmounted when dropped.
pub struct Mount {
    pub at: PathBuf,
}

impl Mount {
    pub fn new(src: &Path, at: &Path) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        match Command::new("bindfs").arg(src).arg(at).output() {
            Ok(o) if o.status.success() => Mount {
                at: at.to_path_buf(),
            },
            other => panic!(
                "cannot mount {} with bindfs (root, /dev/fuse and the bindfs package are needed; .ci/run installs it): {other:?}",
                at.display()
            ),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `nxcc neff-info --verify FILE` succeeds.
pub fn verifies(neff: &Path) -> bool {
    Command::new(NXCC)
        .args(["neff-info", "--verify"])
        .arg(neff)
        .output()
        .unwrap()
        .status
        .success()
}

/// Every live process whose environment holds `KEY=value`.
pub fn processes_with_env(key: &str, value: &str) -> Vec<u32> {
    let needle = format!("{key}={value}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
                    .unwrap_or(false)
            })
            .unwrap_or(true);
        if !zombie && env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// Each compile's span in time (its tools' first start, last end, in ms) from the simulated
/// tools' records, the compile a record belongs to named by `compile_of(its cwd)`.
pub fn compile_spans(
    records: &[serde_json::Value],
    compile_of: impl Fn(&str) -> String,
) -> Vec<(u64, u64)> {
    let mut by: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for r in records {
        let key = compile_of(r["cwd"].as_str().expect("a record's cwd"));
        let (a, b) = (
            r["start_ms"].as_u64().unwrap(),
            r["end_ms"].as_u64().unwrap(),
        );
        let e = by.entry(key).or_insert((a, b));
        e.0 = e.0.min(a);
        e.1 = e.1.max(b);
    }
    by.into_values().collect()
}

/// The compile a tool ran for, by its work dir: the `neuronxcc-*` component of its cwd.
pub fn work_dir_of(cwd: &str) -> String {
    cwd.split('/')
        .find(|c| c.starts_with("neuronxcc-"))
        .unwrap_or_else(|| panic!("no work dir in {cwd}"))
        .to_string()
}

/// The largest number of spans open at one instant (one ending when another starts: not both).
pub fn max_overlap(spans: &[(u64, u64)]) -> usize {
    let mut events: Vec<(u64, i32)> = spans.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as usize
}

/// The state letter of process `pid` (`R`, `S`, `D`, `T`, `Z`, ...; `None`: gone).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Whether `pid` can run no more code of its own: stopped, a zombie, gone, or in the kernel with
/// a SIGSTOP pending, which stops it on its way out (a parent of a vfork-style clone waits there
/// until its child, stopped too, goes on).
fn frozen(pid: u32) -> bool {
    match proc_state(pid) {
        None | Some('T' | 't' | 'Z' | 'X') => true,
        Some('D') => std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
            s.lines()
                .filter_map(|l| l.strip_prefix("ShdPnd:").or(l.strip_prefix("SigPnd:")))
                .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
                .any(|mask| mask & (1 << (libc::SIGSTOP - 1)) != 0)
        }),
        _ => false,
    }
}

/// Stop (SIGSTOP) every process `list` names, again and again as new ones appear, until none
/// of them can run code of its own; every pid it named. Nothing of them acts afterwards (a lock
/// keeper cannot tidy up): the state of a machine that went down at once.
pub fn freeze(mut list: impl FnMut() -> Vec<u32>) -> Vec<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen: Vec<u32> = Vec::new();
    loop {
        let now = list();
        let running: Vec<u32> = now.iter().copied().filter(|p| !frozen(*p)).collect();
        for p in &now {
            if !seen.contains(p) {
                seen.push(*p);
            }
        }
        if running.is_empty() {
            return seen;
        }
        if std::time::Instant::now() >= deadline {
            let states: Vec<_> = running.iter().map(|p| (*p, proc_state(*p))).collect();
            for p in &seen {
                // SAFETY: as below; nothing of them is left stopped behind the failure.
                unsafe { libc::kill(*p as i32, libc::SIGKILL) };
            }
            panic!("cannot stop {states:?}");
        }
        for p in running {
            // SAFETY: kill(2) on a process the caller's test started.
            unsafe { libc::kill(p as i32, libc::SIGSTOP) };
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
