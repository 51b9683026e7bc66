//! One cache for a fleet: two simulated hosts, each a UTS and PID namespace (its own host name,
//! its own pids) that sees one cache directory through its own FUSE passthrough mount
//! (`bindfs`) — so `flock` is local to each host, as on NFS without a lock manager, while
//! renaming and linking stay atomic — and each with its compiler installed at another path with
//! other times, compile the same 20 models into that directory at once: the compiler runs 20
//! times in all, and both hosts get every NEFF. And two such hosts publishing models of their
//! own into one directory with a `max_size` leave it under that size, counted right; an entry
//! whose file the mount still holds a moment after it is closed is deleted whole once the file
//! is let go, not left half deleted. Needs
//! root, `unshare` and `bindfs` (`.ci/run` installs it); without them the test fails saying why.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, UNIX_EPOCH};

use common::{cache_entries, shard_items, text, Mount, Scratch};

const MODELS: usize = 20;

/// The fake compiler installed at `rel` under the scratch dir, its times set to `mtime_s`.
fn install_compiler(s: &Scratch, rel: &str, mtime_s: u64) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let to = s.join(rel);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake-compiler.sh"),
        &to,
    )
    .unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&to)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(mtime_s))
        .unwrap();
    to
}

/// `nxcc parallel-compile` of every model on the simulated host `host`, through `cache` with
/// `compiler`, into `out-<host>`.
fn on_host(s: &Scratch, host: &str, cache: &Path, compiler: &Path) -> Command {
    let models: Vec<String> = (0..MODELS)
        .map(|i| s.join(&format!("models/m{i:02}.pb")).display().to_string())
        .collect();
    let mut c = s.on_host(
        host,
        &format!(
            "parallel-compile --compiler {} --cache_dir {} --jobs 2 --output-dir out-{host} --report report-{host}.json {} -- --target trn2",
            compiler.display(),
            cache.display(),
            models.join(" ")
        ),
    );
    c.env("FAKE_COMPILER_RECORD", s.join("compiler-runs.txt"))
        .env("FAKE_COMPILER_SLEEP", "0.3")
        .env("NXCC_LOCK_LEASE_MS", "3000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Whether an exclusive `flock` taken through one mount excludes one through the other.
fn flock_crosses(a: &Path, b: &Path) -> bool {
    std::fs::write(a.join("probe"), b"").unwrap();
    let fa = std::fs::File::open(a.join("probe")).unwrap();
    let fb = std::fs::File::open(b.join("probe")).unwrap();
    assert!(fs4::fs_std::FileExt::try_lock_exclusive(&fa).unwrap());
    let crosses = !fs4::fs_std::FileExt::try_lock_exclusive(&fb).unwrap();
    std::fs::remove_file(a.join("probe")).unwrap();
    crosses
}

fn lock_files(root: &Path) -> Vec<String> {
    shard_items(root)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".lock"))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect()
}

#[test]
fn two_hosts_compiling_the_same_20_models_into_one_directory_run_the_compiler_20_times() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root (namespaces and FUSE mounts)"
    );
    let s = Scratch::new();
    let original = std::fs::read(s.join("mlp.hlo_module.pb")).unwrap();
    std::fs::create_dir_all(s.join("models")).unwrap();
    for i in 0..MODELS {
        // The example with one unknown field appended: another model each.
        let mut b = original.clone();
        b.extend_from_slice(&[0xc2, 0x3e, 1, i as u8]);
        std::fs::write(s.join(&format!("models/m{i:02}.pb")), b).unwrap();
    }
    std::fs::create_dir_all(s.join("server/cache")).unwrap();
    let a_view = Mount::new(&s.join("server"), &s.join("host-a-view"));
    let b_view = Mount::new(&s.join("server"), &s.join("host-b-view"));
    assert!(
        !flock_crosses(&a_view.at, &b_view.at),
        "flock through one mount excludes the other: the two hosts would not be apart"
    );
    let a_compiler = install_compiler(&s, "host-a/usr/local/bin/neuronx-cc", 1_600_000_000);
    let b_compiler = install_compiler(&s, "host-b/opt/venv/bin/neuronx-cc", 1_700_000_000);

    // Host A starts; host B starts once A holds its first lock, so the two meet on the same
    // models (both take them in the same order).
    let a = on_host(&s, "host-a", &a_view.at.join("cache"), &a_compiler)
        .spawn()
        .expect("unshare runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lock_files(&s.join("server/cache"))
        .iter()
        .any(|t| t.contains("host=host-a"))
    {
        assert!(Instant::now() < deadline, "host A never took a lock");
        std::thread::sleep(Duration::from_millis(5));
    }
    let b = on_host(&s, "host-b", &b_view.at.join("cache"), &b_compiler)
        .spawn()
        .expect("unshare runs");
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for (host, o) in [("host-a", &a), ("host-b", &b)] {
        assert!(
            o.status.success(),
            "{host}: {} {}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    let runs = std::fs::read_to_string(s.join("compiler-runs.txt")).unwrap();
    assert_eq!(
        runs.lines().count(),
        MODELS,
        "compiler runs:\n{runs}\nhost A: {}\nhost B: {}",
        text(&a.stderr),
        text(&b.stderr)
    );
    for i in 0..MODELS {
        let name = format!("m{i:02}.neff");
        let (na, nb) = (
            std::fs::read(s.join("out-host-a").join(&name)).unwrap(),
            std::fs::read(s.join("out-host-b").join(&name)).unwrap(),
        );
        assert_eq!(na, nb, "{name}");
    }
    // Both hosts compiled some and were served the rest: they shared the work.
    let misses = |host: &str| {
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(s.join(&format!("report-{host}.json"))).unwrap())
                .unwrap();
        r["compiles"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["cache"] == "miss")
            .count()
    };
    assert_eq!(misses("host-a") + misses("host-b"), MODELS);
    assert!(
        lock_files(&s.join("server/cache")).is_empty(),
        "a lock stayed"
    );
    drop(a_view);
    drop(b_view);
}

/// The bytes of every file of every entry of nxcc's cache in `cache`.
fn entry_bytes(cache: &Path) -> u64 {
    cache_entries(cache)
        .iter()
        .flat_map(|e| std::fs::read_dir(e).unwrap().flatten())
        .map(|f| f.metadata().unwrap().len())
        .sum()
}

#[test]
fn two_hosts_publishing_into_one_directory_keep_it_under_max_size() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test needs root (namespaces and FUSE mounts)");
    let s = Scratch::new();
    let original = std::fs::read(s.join("mlp.hlo_module.pb")).unwrap();
    std::fs::create_dir_all(s.join("models")).unwrap();
    let model = |host: &str, i: usize| s.join(&format!("models/{host}-{i:02}.pb"));
    for (h, host) in ["host-a", "host-b"].iter().enumerate() {
        for i in 0..MODELS {
            let mut b = original.clone();
            b.extend_from_slice(&[0xc2, 0x3e, 2, h as u8, i as u8]);
            std::fs::write(model(host, i), b).unwrap();
        }
    }
    let compiler = install_compiler(&s, "usr/local/bin/neuronx-cc", 1_600_000_000);
    // One entry's size, from a compile into a cache of its own: the limit holds ten of them.
    let probe = s
        .nxcc(&["parallel-compile", "--compiler"])
        .arg(&compiler)
        .args(["--cache_dir", "probe-cache", "--output-dir", "probe-out"])
        .arg(model("host-a", 0))
        .args(["--", "--target", "trn2"])
        .output()
        .unwrap();
    assert!(probe.status.success(), "{}", text(&probe.stderr));
    let one = entry_bytes(&s.join("probe-cache"));
    let max = one * 10 + one / 2;
    std::fs::create_dir_all(s.join("server/cache")).unwrap();
    let views = [
        Mount::new(&s.join("server"), &s.join("host-a-view")),
        Mount::new(&s.join("server"), &s.join("host-b-view")),
    ];
    let runs: Vec<_> = ["host-a", "host-b"]
        .iter()
        .zip(&views)
        .map(|(host, view)| {
            let models: Vec<String> = (0..MODELS)
                .map(|i| model(host, i).display().to_string())
                .collect();
            s.on_host(
                host,
                &format!(
                    "parallel-compile --compiler {} --cache_dir {} --jobs 2 --output-dir out-{host} {} -- --target trn2 --cache-max-size {max}",
                    compiler.display(),
                    view.at.join("cache").display(),
                    models.join(" ")
                ),
            )
            .env("NXCC_LOCK_LEASE_MS", "3000")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare runs")
        })
        .collect();
    for (host, run) in ["host-a", "host-b"].iter().zip(runs) {
        let o = run.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "{host}: {} {}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    let cache = s.join("server/cache");
    let (real, kept) = (entry_bytes(&cache), cache_entries(&cache).len());
    assert!(real <= max, "{real} bytes kept, over {max}");
    assert!(kept >= 8, "{kept} entries kept of the 10 that fit");
    // What was evicted is gone, not left behind as a directory still being deleted.
    let left: Vec<_> = shard_items(&cache)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".evict-")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Every host's counts add up to what is there.
    let counted: i64 = std::fs::read_dir(cache.join("nxcc-v1/counters"))
        .unwrap()
        .flatten()
        .flat_map(|h| std::fs::read_dir(h.path()).unwrap().flatten())
        .map(|f| {
            let t = std::fs::read_to_string(f.path()).unwrap();
            t.lines()
                .find_map(|l| l.strip_prefix("size_bytes"))
                .map_or(0, |v| v.trim().parse::<i64>().unwrap())
        })
        .sum();
    assert_eq!(counted, real as i64);
    // No lock stayed: a key's, the eviction's or a part's.
    let evict_locks: Vec<_> = std::fs::read_dir(cache.join("nxcc-v1/evict"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n == "lock" || n.ends_with(".lock"))
        .collect();
    assert!(
        lock_files(&cache).is_empty() && evict_locks.is_empty(),
        "a lock stayed: {evict_locks:?}"
    );
    drop(views);
}

/// The names of the items of `dir` that start with `prefix`.
fn named(dir: &Path, prefix: &str) -> Vec<String> {
    common::items_named(dir, prefix)
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect()
}

#[test]
fn an_entry_whose_file_a_fuse_mount_still_holds_is_deleted_once_the_file_is_let_go() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root (FUSE mounts)"
    );
    let s = Scratch::new();
    std::fs::create_dir_all(s.join("server")).unwrap();
    let compiler = install_compiler(&s, "usr/local/bin/neuronx-cc", 1_600_000_000);
    let compiled = s
        .nxcc(&["parallel-compile", "--compiler"])
        .arg(&compiler)
        .args(["--cache_dir", "server/cache", "--output-dir", "out"])
        .arg(s.join("mlp.hlo_module.pb"))
        .args(["--", "--target", "trn2"])
        .output()
        .unwrap();
    assert!(compiled.status.success(), "{}", text(&compiled.stderr));
    let entries = cache_entries(&s.join("server/cache"));
    assert_eq!(entries.len(), 1, "{entries:?}");
    let (entry, shard) = (&entries[0], entries[0].parent().unwrap().to_path_buf());
    let view = Mount::new(&s.join("server"), &s.join("view"));
    let neff = view
        .at
        .join(entry.strip_prefix(s.join("server")).unwrap())
        .join("model.neff");
    // A process holds the NEFF open through the mount until its input ends: deleting the file
    // then leaves it under a hidden name, and its directory not empty, until it is let go.
    let mut holder = Command::new("sh")
        .args(["-c", "exec 3<\"$0\" && echo open && read _"])
        .arg(&neff)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    assert_eq!(said, "open\n", "the holder did not open {}", neff.display());
    let clear = s
        .nxcc(&["cache", "clear", "--cache_dir"])
        .arg(view.at.join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the entry is renamed away and its NEFF hidden, the holder lets it go.
    let deadline = Instant::now() + Duration::from_secs(60);
    let hidden = loop {
        let away = named(&shard, ".evict-");
        if let Some(h) = away
            .iter()
            .find_map(|a| named(&shard.join(a), ".fuse_hidden").pop())
        {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "the NEFF was never hidden: {away:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    drop(holder.stdin.take());
    holder.wait().unwrap();
    let o = clear.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{} {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let left: Vec<_> = named(&shard, ".evict-");
    assert!(
        left.is_empty() && cache_entries(&s.join("server/cache")).is_empty(),
        "{hidden} held the entry: {left:?} left behind"
    );
    drop(view);
}
