//! The compile cache under an unfriendly host, through the built `nxcc` and the simulated
//! toolchain: two models racing for one `--output` (from the command line and through the
//! daemon) never poison each other's entries; a symbolic link anywhere in the cache never leads
//! nxcc outside it; a cache directory others can write is refused; a full disk is not remembered
//! as a failure of the model.

mod common;

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

use common::{cache_entries, text, Scratch};

const HIT: &str = "Using a cached neff at ";

/// The example model as HLO text with its first parameter renamed `x<tag>.1`: a different model
/// per tag, whose NEFF says which one it came from.
fn write_model(s: &Scratch, name: &str, tag: usize) {
    let hlo = std::fs::read_to_string(s.join("mlp.hlo")).unwrap();
    assert!(hlo.contains("x.1"));
    std::fs::write(s.join(name), hlo.replace("x.1", &format!("x{tag}.1"))).unwrap();
}

/// The first input's name in a NEFF (which model it came from).
fn first_input(path: &Path) -> String {
    let neff =
        nxcc::neff::read::Neff::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let map: serde_json::Value =
        serde_json::from_slice(&neff.read_member("sg00/tensor_map.json").unwrap()).unwrap();
    map["inputs"][0]["name"].as_str().unwrap().to_string()
}

fn compile<'a>(model: &'a str, output: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "compile",
        model,
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--output",
        output,
    ];
    v.extend_from_slice(extra);
    v
}

fn both(o: &Output) -> String {
    format!("{}{}", text(&o.stdout), text(&o.stderr))
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\n{}{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    );
}

/// Every entry's key directory and the model its `meta.json` names.
fn entries(cache: &Path) -> Vec<(PathBuf, String)> {
    let mut v = Vec::new();
    for e in cache_entries(cache) {
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(e.join("meta.json")).unwrap()).unwrap();
        let model = meta["model_path"].as_str().unwrap().to_string();
        v.push((e, model));
    }
    v
}

/// The race: `iterations` times, two different models compiled at once to the same `--output`
/// with one cache. Then: `cache verify` finds every entry sound, each entry's NEFF is its own
/// model's, and a hit of every model is byte for byte a plain compile of it.
fn output_race(s: &Scratch, iterations: usize, via_daemon: bool) {
    let mut extra = vec!["--cache_dir", "cache"];
    if via_daemon {
        extra.push("--daemon");
    }
    let mut models = Vec::new();
    for i in 0..iterations {
        let (a, b) = (format!("a{i}.hlo"), format!("b{i}.hlo"));
        write_model(s, &a, 2 * i);
        write_model(s, &b, 2 * i + 1);
        let children: Vec<Child> = [&a, &b]
            .iter()
            .map(|m| {
                s.nxcc(&compile(m, "out.neff", &extra))
                    .env("XDG_RUNTIME_DIR", s.join("runtime"))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            ok(&c.wait_with_output().unwrap());
        }
        models.push((a, 2 * i));
        models.push((b, 2 * i + 1));
    }
    let v = s.run(&["cache", "verify", "--cache_dir", "cache", "--json"]);
    ok(&v);
    let report: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(report["ok"], models.len(), "{report}");
    assert_eq!(report["corrupt"].as_array().unwrap().len(), 0, "{report}");
    let found = entries(&s.join("cache"));
    assert_eq!(found.len(), models.len());
    let mut wrong = Vec::new();
    for (dir, model) in &found {
        let tag: usize = Path::new(model)
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_start_matches(['a', 'b'])
            .parse::<usize>()
            .unwrap();
        let tag = if model.ends_with(&format!("a{tag}.hlo")) {
            2 * tag
        } else {
            2 * tag + 1
        };
        let got = first_input(&dir.join("model.neff"));
        if got != format!("x{tag}.1") {
            wrong.push(format!("{model}: holds {got}"));
        }
    }
    assert!(wrong.is_empty(), "wrong entries: {wrong:?}");
    std::fs::create_dir_all(s.join("hit")).unwrap();
    std::fs::create_dir_all(s.join("plain")).unwrap();
    for (m, tag) in &models {
        let hit = s.run(&compile(m, "hit/out.neff", &["--cache_dir", "cache"]));
        ok(&hit);
        assert!(text(&hit.stdout).contains(HIT), "{m} missed");
        let plain = s.run(&compile(m, "plain/out.neff", &["--no_cache"]));
        ok(&plain);
        assert_eq!(first_input(&s.join("hit/out.neff")), format!("x{tag}.1"));
        assert!(
            std::fs::read(s.join("hit/out.neff")).unwrap()
                == std::fs::read(s.join("plain/out.neff")).unwrap(),
            "{m}: the hit differs from a plain compile"
        );
    }
    if via_daemon {
        stop_daemon(s);
    }
}

fn stop_daemon(s: &Scratch) {
    let sock = s.join("runtime/nxcc/daemon.sock");
    if let Ok(c) = std::os::unix::net::UnixStream::connect(&sock) {
        let mut w = &c;
        let _ = std::io::Write::write_all(
            &mut w,
            b"POST /exit HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut &c, &mut sink);
    }
}

#[test]
fn two_models_racing_for_one_output_never_poison_the_cache_from_the_command_line() {
    let s = Scratch::new();
    output_race(&s, 50, false);
}

#[test]
fn two_models_racing_for_one_output_never_poison_the_cache_through_the_daemon() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.join("runtime")).unwrap();
    std::fs::set_permissions(s.join("runtime"), std::fs::Permissions::from_mode(0o700)).unwrap();
    output_race(&s, 20, true);
}

/// A file outside the cache that nxcc must neither change nor read: its bytes, and an access
/// time set in the past (a read would move it, unless the file system does not record reads).
struct Bait {
    path: PathBuf,
    bytes: Vec<u8>,
}

const OLD: i64 = 1_000_000;

impl Bait {
    fn new(path: PathBuf, bytes: &[u8]) -> Bait {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&path, bytes).unwrap();
        let b = Bait {
            path,
            bytes: bytes.to_vec(),
        };
        b.age();
        b
    }

    /// Access time in the past, modification time now (so `relatime` records the next read).
    fn age(&self) {
        let f = std::fs::File::options()
            .write(true)
            .open(&self.path)
            .unwrap();
        let times = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: OLD,
                tv_nsec: 0,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: chrono_now(),
                tv_nsec: 0,
            },
        };
        rustix::fs::futimens(&f, &times).unwrap();
    }

    fn untouched_and_unread(&self) {
        let m = std::fs::metadata(&self.path)
            .unwrap_or_else(|e| panic!("{} is gone: {e}", self.path.display()));
        assert_eq!(
            std::fs::read(&self.path).unwrap(),
            self.bytes,
            "{} was changed",
            self.path.display()
        );
        assert_eq!(m.atime(), OLD, "{} was read", self.path.display());
        // Put the access time back (the check above read it).
        self.age();
    }
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A cached compile of the example model in `s`: its entry directory.
fn cached(s: &Scratch, out: &str) -> PathBuf {
    let o = s.run(&compile("mlp.hlo", out, &["--cache_dir", "cache"]));
    ok(&o);
    let e = entries(&s.join("cache"));
    assert_eq!(e.len(), 1);
    e[0].0.clone()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A file system that records reads: the baits' "unread" check means something only there.
fn records_reads(s: &Scratch) {
    let probe = Bait::new(s.join("outside/probe"), b"p");
    let _ = std::fs::read(&probe.path).unwrap();
    let atime = std::fs::metadata(&probe.path).unwrap().atime();
    assert_ne!(
        atime,
        OLD,
        "the file system of {} does not record reads (noatime); the tests of unread files cannot run here",
        s.path().display()
    );
}

#[test]
fn a_linked_entry_or_neff_is_evicted_and_what_it_points_to_is_left_alone() {
    let s = Scratch::new();
    records_reads(&s);
    let entry = cached(&s, "a.neff");
    // The entry replaced by a link to a complete copy of it outside the cache.
    let outside = s.join("outside/entry");
    copy_dir(&entry, &outside);
    let baits: Vec<Bait> = ["model.neff", "meta.json", "log.txt"]
        .iter()
        .map(|f| {
            let p = outside.join(f);
            let b = std::fs::read(&p).unwrap();
            Bait::new(p, &b)
        })
        .collect();
    std::fs::remove_dir_all(&entry).unwrap();
    symlink(&outside, &entry).unwrap();
    let o = s.run(&compile("mlp.hlo", "b.neff", &["--cache_dir", "cache"]));
    ok(&o);
    assert!(!text(&o.stdout).contains(HIT), "served through the link");
    assert!(both(&o).contains("symbolic link"), "{}", both(&o));
    assert!(
        std::fs::symlink_metadata(&entry).unwrap().is_dir(),
        "compiled again"
    );
    for b in &baits {
        b.untouched_and_unread();
    }

    // The entry's NEFF replaced by a link to a root-only file outside: never served.
    let secret = Bait::new(s.join("outside/secret"), b"root only");
    std::fs::set_permissions(&secret.path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(entry.join("model.neff")).unwrap();
    symlink(&secret.path, entry.join("model.neff")).unwrap();
    let o = s.run(&compile("mlp.hlo", "c.neff", &["--cache_dir", "cache"]));
    ok(&o);
    assert!(!text(&o.stdout).contains(HIT));
    assert_ne!(std::fs::read(s.join("c.neff")).unwrap(), b"root only");
    assert!(!std::fs::symlink_metadata(entry.join("model.neff"))
        .unwrap()
        .file_type()
        .is_symlink());
    secret.untouched_and_unread();
    // And verify, with the link placed again, evicts it without reading through it.
    std::fs::remove_file(entry.join("model.neff")).unwrap();
    symlink(&secret.path, entry.join("model.neff")).unwrap();
    let v = s.run(&["cache", "verify", "--cache_dir", "cache"]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v.stdout));
    secret.untouched_and_unread();
}

#[test]
fn a_linked_shard_is_never_read_written_or_cleared_through() {
    let s = Scratch::new();
    records_reads(&s);
    let entry = cached(&s, "a.neff");
    let shard = entry.parent().unwrap().to_path_buf();
    let outside = s.join("outside/shard");
    copy_dir(&entry, &outside.join(entry.file_name().unwrap()));
    let bait = Bait::new(outside.join("bystander"), b"keep me");
    let neff = outside.join(entry.file_name().unwrap()).join("model.neff");
    let neff_bait = Bait::new(neff.clone(), &std::fs::read(&neff).unwrap());
    std::fs::remove_dir_all(&shard).unwrap();
    symlink(&outside, &shard).unwrap();
    // stats counts it as unusable, reading nothing through it.
    let st = s.run(&["cache", "stats", "--cache_dir", "cache", "--json"]);
    ok(&st);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["entries"], 0, "{st}");
    assert_eq!(st["corrupt"], 1, "{st}");
    // A compile: not served through the link; the link is replaced by a real shard.
    let o = s.run(&compile("mlp.hlo", "b.neff", &["--cache_dir", "cache"]));
    ok(&o);
    assert!(!text(&o.stdout).contains(HIT));
    assert!(std::fs::symlink_metadata(&shard).unwrap().is_dir());
    bait.untouched_and_unread();
    neff_bait.untouched_and_unread();
    // clear and gc with the link placed again: the link goes, the files outside stay.
    for action in [&["clear"][..], &["gc", "--max-size", "0"][..]] {
        match std::fs::symlink_metadata(&shard) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&shard).unwrap(),
            Ok(_) => std::fs::remove_file(&shard).unwrap(),
            Err(_) => {}
        }
        symlink(&outside, &shard).unwrap();
        let mut args = vec!["cache"];
        args.extend_from_slice(action);
        args.extend_from_slice(&["--cache_dir", "cache"]);
        let o = s.run(&args);
        ok(&o);
        assert!(both(&o).contains("symbolic link"), "{}", both(&o));
        assert!(std::fs::symlink_metadata(&shard).is_err(), "{action:?}");
        bait.untouched_and_unread();
        neff_bait.untouched_and_unread();
    }
}

#[test]
fn a_linked_layout_dir_is_refused_with_what_to_fix() {
    let s = Scratch::new();
    records_reads(&s);
    cached(&s, "a.neff");
    let outside = s.join("outside/layout");
    std::fs::rename(s.join("cache/nxcc-v1"), &outside).unwrap();
    let baits: Vec<Bait> = entries_under(&outside)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            Bait::new(p, &b)
        })
        .collect();
    assert!(!baits.is_empty());
    symlink(&outside, s.join("cache/nxcc-v1")).unwrap();
    let o = s.run(&compile("mlp.hlo", "b.neff", &["--cache_dir", "cache"]));
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("[NCC_EDRV113]") && err.contains("nxcc-v1 is not a directory"),
        "{err}"
    );
    assert!(err.contains("remove it"), "{err}");
    assert!(!s.join("b.neff").exists(), "nothing ran");
    for action in ["stats", "clear"] {
        let o = s.run(&["cache", action, "--cache_dir", "cache"]);
        assert_eq!(o.status.code(), Some(2), "{action}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("not a directory"));
    }
    for b in &baits {
        b.untouched_and_unread();
    }
}

fn entries_under(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            v.extend(entries_under(&e.path()));
        } else if ft.is_file() && e.metadata().unwrap().len() > 0 {
            v.push(e.path());
        }
    }
    v
}

#[test]
fn a_linked_lock_or_estimate_index_never_creates_or_changes_a_file_outside() {
    let s = Scratch::new();
    records_reads(&s);
    let entry = cached(&s, "a.neff");
    let key = entry.file_name().unwrap().to_str().unwrap().to_string();
    let shard = entry.parent().unwrap().to_path_buf();
    let index_dir = s.join("cache/nxcc-v1/estimates");
    let index = std::fs::read_dir(&index_dir)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    // A dangling lock link, an index link to a file outside; then a compile of the same key.
    std::fs::remove_dir_all(&entry).unwrap();
    // (A compile removes its lock file when it is done: none is left here.)
    let lock = shard.join(format!("{key}.lock"));
    assert!(!lock.exists());
    let target = s.join("outside/created-by-the-lock");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    symlink(&target, &lock).unwrap();
    let appended = Bait::new(s.join("outside/appended"), b"{\"not\": \"an index\"}\n");
    std::fs::remove_file(&index).unwrap();
    symlink(&appended.path, &index).unwrap();
    let o = s.run(&compile("mlp.hlo", "b.neff", &["--cache_dir", "cache"]));
    ok(&o);
    let err = both(&o);
    assert!(err.contains("removed the cache lock"), "{err}");
    assert!(err.contains("memory estimate"), "{err}");
    assert!(!target.exists(), "the lock link's target was created");
    appended.untouched_and_unread();
    // The link is gone (and the lock made in its place was removed when released).
    assert!(std::fs::symlink_metadata(&lock).is_err());
    // The whole index directory a link: the same.
    let outside_index = s.join("outside/index");
    std::fs::create_dir_all(&outside_index).unwrap();
    let in_dir = Bait::new(outside_index.join(index.file_name().unwrap()), b"x\n");
    std::fs::remove_dir_all(&index_dir).unwrap();
    symlink(&outside_index, &index_dir).unwrap();
    let o = s.run(&compile(
        "mlp.hlo",
        "c.neff",
        &["--cache_dir", "cache", "-O1"],
    ));
    ok(&o);
    in_dir.untouched_and_unread();
    assert_eq!(std::fs::read_dir(&outside_index).unwrap().count(), 1);
    let o = s.run(&["cache", "clear", "--cache_dir", "cache"]);
    ok(&o);
    in_dir.untouched_and_unread();
    appended.untouched_and_unread();
}

#[test]
fn what_the_cache_creates_is_no_wider_than_the_umask() {
    use std::os::unix::process::CommandExt;
    let s = Scratch::new();
    let mut cmd = s.nxcc(&compile("mlp.hlo", "a.neff", &["--cache_dir", "cache"]));
    // SAFETY: umask is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o077);
            Ok(())
        });
    }
    ok(&cmd.output().unwrap());
    let entry = entries(&s.join("cache"))[0].0.clone();
    let shard = entry.parent().unwrap().to_path_buf();
    let key = entry.file_name().unwrap().to_str().unwrap().to_string();
    let made = [
        s.join("cache"),
        s.join("cache/nxcc-v1"),
        s.join("cache/nxcc-v1/estimates"),
        shard.clone(),
        entry.clone(),
        entry.join("model.neff"),
        entry.join("meta.json"),
        s.join("cache/nxcc-v1/counters"),
        s.join("cache/nxcc-v1/near"),
    ];
    // (The key's lock file is removed when released; its mode is the umask's, as these.)
    assert!(!shard.join(format!("{key}.lock")).exists());
    for p in &made {
        let mode = std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} has mode {mode:04o}", p.display());
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn a_cache_dir_others_can_write_is_refused_with_what_to_fix() {
    let s = Scratch::new();
    let cache = s.join("cache");
    std::fs::create_dir(&cache).unwrap();
    let refused = |what: &str, fix: &str| {
        let o = s.run(&compile("mlp.hlo", "a.neff", &["--cache_dir", "cache"]));
        assert_eq!(o.status.code(), Some(70), "{what}: {}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(err.contains("[NCC_EDRV113]") && err.contains(what), "{err}");
        assert!(err.contains(fix), "{err}");
        assert!(!s.join("a.neff").exists());
        let o = s.run(&["cache", "stats", "--cache_dir", "cache"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains(what), "{}", text(&o.stderr));
    };
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused("is writable by group and others (mode 0777)", "chmod go-w");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o775)).unwrap();
    refused("is writable by its group", "chmod go-w");
    // Sticky, like /var/tmp: usable, and what nxcc creates in it is not world-writable.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o1777)).unwrap();
    ok(&s.run(&compile("mlp.hlo", "a.neff", &["--cache_dir", "cache"])));
    let layout = cache.join("nxcc-v1");
    assert_eq!(std::fs::metadata(&layout).unwrap().mode() & 0o022, 0);
    // The layout dir itself writable by others: refused even in a sticky dir.
    std::fs::remove_file(s.join("a.neff")).unwrap();
    std::fs::set_permissions(&layout, std::fs::Permissions::from_mode(0o1777)).unwrap();
    refused("nxcc-v1 is writable by group and others", "chmod go-w");
}

#[test]
fn a_cache_dir_owned_by_another_user_is_refused() {
    assert!(
        is_root(),
        "this test needs root (to give a directory to another user); it cannot run as uid {}",
        rustix::process::geteuid().as_raw()
    );
    let s = Scratch::new();
    let cache = s.join("cache");
    std::fs::create_dir(&cache).unwrap();
    // nobody (65534) where it exists; any uid but ours and root's will do.
    let other = 65534;
    std::os::unix::fs::chown(&cache, Some(other), None).unwrap();
    let o = s.run(&compile("mlp.hlo", "a.neff", &["--cache_dir", "cache"]));
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!(
            "is owned by uid {other}, not by you (uid 0) or root"
        )),
        "{err}"
    );
    assert!(err.contains("chown 0"), "{err}");
    let o = s.run(&["cache", "gc", "--max-size", "0", "--cache_dir", "cache"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    // Given back: usable.
    std::os::unix::fs::chown(&cache, Some(0), None).unwrap();
    ok(&s.run(&compile("mlp.hlo", "a.neff", &["--cache_dir", "cache"])));
}

/// A small tmpfs at `dir` (needs root and a kernel that lets this process mount).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&dir).unwrap();
        let o = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(
            o.status.success(),
            "this test needs a small tmpfs and cannot mount one here (uid {}): {}",
            rustix::process::geteuid().as_raw(),
            text(&o.stderr)
        );
        Tmpfs(dir)
    }

    /// Fill it, leaving `free` bytes.
    fn fill(&self, free: u64) {
        let st = rustix::fs::statvfs(&self.0).unwrap();
        let avail = st.f_bavail * st.f_frsize;
        std::fs::write(
            self.0.join("filler"),
            vec![0u8; avail.saturating_sub(free) as usize],
        )
        .unwrap();
    }

    fn empty(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_is_not_remembered_as_a_failure_of_the_model() {
    let s = Scratch::new();
    let full = Tmpfs::mount(s.join("full"), "256k");
    let cache = s.join("cache").display().to_string();
    // The output's disk full: Kelper cannot write --output.
    full.fill(0);
    let o = s.run(&compile("mlp.hlo", "full/a.neff", &["--cache_dir", &cache]));
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("No space left on device"));
    full.empty();
    let o = s.run(&compile("mlp.hlo", "full/a.neff", &["--cache_dir", &cache]));
    ok(&o);
    assert!(
        !text(&o.stdout).contains("cached failed"),
        "{}",
        text(&o.stdout)
    );

    // The work dir's disk full: a tool fails writing; then the same compile succeeds.
    let launch = full.0.join("launch");
    std::fs::create_dir(&launch).unwrap();
    let model = s.join("mlp.hlo").display().to_string();
    let log = s.join("log.txt").display().to_string();
    let out = s.join("b.neff").display().to_string();
    let args = compile(
        &model,
        &out,
        &["--cache_dir", &cache, "-O1", "--logfile", &log],
    );
    full.fill(4096);
    let o = s.nxcc(&args).current_dir(&launch).output().unwrap();
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("No space left on device"),
        "{}",
        text(&o.stderr)
    );
    std::fs::remove_dir_all(&launch).unwrap();
    full.empty();
    std::fs::create_dir(&launch).unwrap();
    let o = s.nxcc(&args).current_dir(&launch).output().unwrap();
    ok(&o);
    assert!(!text(&o.stdout).contains("cached failed"));
}

#[test]
fn a_nul_byte_in_an_argument_is_a_usage_error_and_poisons_nothing() {
    let s = Scratch::new();
    // argv cannot carry a NUL; the parser every front end shares (the daemon's requests go
    // through it) refuses one before anything is planned.
    let args: Vec<String> = compile("mlp.hlo", "a\0b.neff", &["--cache_dir", "cache"])
        .iter()
        .map(|a| a.to_string())
        .collect();
    match nxcc::cli::parse("nxcc", &args) {
        Err(e) => {
            assert!(matches!(e, nxcc::cli::CliError::Usage { .. }));
            assert!(e.render().contains("contains a NUL byte"), "{}", e.render());
        }
        Ok(_) => panic!("a NUL byte was accepted"),
    }
    // Through the daemon: refused (400) before a compile starts; then the model compiles and
    // is cached.
    std::fs::create_dir_all(s.join("runtime")).unwrap();
    std::fs::set_permissions(s.join("runtime"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = s
        .nxcc(&compile(
            "mlp.hlo",
            "warm.neff",
            &["--daemon", "--cache_dir", "cache"],
        ))
        .env("XDG_RUNTIME_DIR", s.join("runtime"))
        .output()
        .unwrap();
    ok(&o);
    let body = serde_json::json!({
        "argv": args,
        "working_directory": s.path(),
    });
    let reply = post(
        &s.join("runtime/nxcc/daemon.sock"),
        "/v1/compile",
        &body.to_string(),
    );
    assert!(
        reply.contains("contains a NUL byte"),
        "the daemon did not refuse it: {reply}"
    );
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    let o = s.run(&compile(
        "mlp.hlo",
        "b.neff",
        &["--cache_dir", "cache", "-O1"],
    ));
    ok(&o);
    assert!(!text(&o.stdout).contains("cached failed"));
    stop_daemon(&s);
}

fn post(sock: &Path, path: &str, body: &str) -> String {
    let c = std::os::unix::net::UnixStream::connect(sock).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut w = &c;
    std::io::Write::write_all(&mut w, req.as_bytes()).unwrap();
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut &c, &mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}
