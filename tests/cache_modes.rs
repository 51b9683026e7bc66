//! How a compile may use a cache, through the built `nxcc`: `--cache-mode read-only` writes
//! nothing (on a writable directory, compared before and after, and on a read-only bind mount,
//! as root); `--cache-mode hit-only` fails a miss with its own status and what differed, and
//! serves a hit; `--cache-secondary DIR` serves from a read-only cache and copies the entry into
//! the primary; the daemon's `/v1/status` carries the cache's counters.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{text, Scratch};

fn compile(s: &Scratch, cache: &str, output: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--cache_dir",
        cache,
        "--output",
        output,
    ];
    args.extend_from_slice(extra);
    s.run(&args)
}

fn tool_runs(s: &Scratch) -> usize {
    s.records()
        .iter()
        .filter(|r| r["tool"] == "walrus_driver")
        .count()
}

const HIT: &str = "Using a cached neff at ";

/// Every path under `dir` with its type, size, mode and modification time (nanoseconds).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (bool, u64, u32, i128)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.path().symlink_metadata().unwrap();
            let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
            out.insert(e.path(), (m.is_dir(), m.len(), m.mode(), mtime));
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

/// A read-only bind mount of `src` at `dst`, unmounted when dropped.
struct ReadOnlyMount(PathBuf);

impl ReadOnlyMount {
    fn new(src: &Path, dst: &Path) -> ReadOnlyMount {
        std::fs::create_dir_all(dst).unwrap();
        let run = |args: &[&str]| {
            let o = std::process::Command::new("mount").args(args).output();
            match o {
                Ok(o) if o.status.success() => {}
                Ok(o) => panic!(
                    "this test needs a read-only bind mount and cannot make one here (uid {}; run the tests as root): mount {args:?}: {}",
                    rustix::process::geteuid().as_raw(),
                    text(&o.stderr)
                ),
                Err(e) => panic!("this test needs mount(8): {e}"),
            }
        };
        let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
        run(&["--bind", s, d]);
        let m = ReadOnlyMount(dst.to_path_buf());
        run(&["-o", "remount,bind,ro", d]);
        m
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn read_only_writes_nothing_here_or_on_a_read_only_mount() {
    let s = Scratch::new();
    assert!(compile(&s, "cache", "a.neff", &[]).status.success());
    let before = snapshot(&s.join("cache"));
    let ro = ["--cache-mode", "read-only"];
    // A hit: served, the entry's use time not even touched.
    let hit = compile(&s, "cache", "b.neff", &ro);
    assert!(hit.status.success(), "{}", text(&hit.stderr));
    assert!(text(&hit.stdout).contains(HIT));
    // A miss: compiled, stored nowhere.
    let runs = tool_runs(&s);
    let miss = compile(&s, "cache", "c.neff", &[&ro[..], &["-O1"]].concat());
    assert!(miss.status.success(), "{}", text(&miss.stderr));
    assert_eq!(tool_runs(&s), runs + 1);
    assert_eq!(
        snapshot(&s.join("cache")),
        before,
        "the read-only cache changed"
    );
    // The same on a read-only bind mount: no warning (nothing was even tried), hits served.
    let _mount = ReadOnlyMount::new(&s.join("cache"), &s.join("ro"));
    let hit = compile(&s, "ro", "d.neff", &ro);
    assert!(hit.status.success(), "{}", text(&hit.stderr));
    assert!(text(&hit.stdout).contains(HIT));
    let miss = compile(&s, "ro", "e.neff", &[&ro[..], &["-O1"]].concat());
    assert!(miss.status.success(), "{}", text(&miss.stderr));
    for o in [&hit, &miss] {
        let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
        assert!(!all.contains("WARNING"), "{all}");
    }
    // Read-write on that mount tries to store, and says it cannot: the mount is read-only.
    let rw = compile(&s, "ro", "f.neff", &["-O1"]);
    assert!(rw.status.success());
    assert!(
        format!("{}{}", text(&rw.stdout), text(&rw.stderr)).contains("WARNING"),
        "{}",
        text(&rw.stdout)
    );
    assert_eq!(snapshot(&s.join("cache")), before);
}

#[test]
fn hit_only_fails_a_miss_naming_what_differed_and_serves_a_hit() {
    let s = Scratch::new();
    assert!(compile(&s, "cache", "a.neff", &[]).status.success());
    let hit_only = ["--cache-mode", "hit-only"];
    let runs = tool_runs(&s);
    let hit = compile(&s, "cache", "b.neff", &hit_only);
    assert_eq!(hit.status.code(), Some(0), "{}", text(&hit.stderr));
    assert!(text(&hit.stdout).contains(HIT));
    let miss = compile(&s, "cache", "c.neff", &[&hit_only[..], &["-O1"]].concat());
    assert_eq!(miss.status.code(), Some(69), "{}", text(&miss.stdout));
    let all = format!("{}{}", text(&miss.stdout), text(&miss.stderr));
    assert!(all.contains("[NCC_EDRV115]"), "{all}");
    assert!(all.contains("argument --optlevel: 2 → 1"), "{all}");
    assert_eq!(tool_runs(&s), runs, "a hit-only cache compiled");
    assert!(!s.join("c.neff").exists());
    // Set in the cache's configuration: the same.
    let cfg = s.run(&["cache", "config", "mode=hit-only", "--cache_dir", "cache"]);
    assert!(cfg.status.success(), "{}", text(&cfg.stderr));
    let miss = compile(&s, "cache", "d.neff", &["-O1"]);
    assert_eq!(miss.status.code(), Some(69));
    let o = s.run(&["cache", "stats", "--cache_dir", "cache", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["counters"]["misses_refused"], 2, "{v}");
    // Without a cache (none given, or --no_cache) hit-only has nothing to hit: refused before
    // anything runs, rather than compiling on a host that must never compile.
    for off in [&[][..], &["--cache_dir", "cache", "--no_cache"][..]] {
        let mut args = vec![
            "compile",
            "mlp.hlo_module.pb",
            "--target",
            "trn2",
            "--toolchain",
            "sim",
            "--output",
            "e.neff",
            "--cache-mode",
            "hit-only",
        ];
        args.extend_from_slice(off);
        let o = s.run(&args);
        let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
        assert_ne!(o.status.code(), Some(0), "{all}");
        assert!(all.contains("[NCC_EDRV116]"), "{all}");
        assert!(all.contains("hit-only needs a cache"), "{all}");
        assert_eq!(
            tool_runs(&s),
            runs,
            "hit-only without a cache compiled: {all}"
        );
        assert!(!s.join("e.neff").exists());
    }
}

#[test]
fn a_secondary_hit_is_served_and_lands_in_the_primary() {
    let s = Scratch::new();
    assert!(compile(&s, "image", "a.neff", &[]).status.success());
    let image = snapshot(&s.join("image"));
    let runs = tool_runs(&s);
    let secondary = ["--cache-secondary", "image"];
    // A read-only primary: served from the image, nothing copied.
    let o = compile(
        &s,
        "primary",
        "b.neff",
        &[&secondary[..], &["--cache-mode", "read-only"]].concat(),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(HIT), "{}", text(&o.stdout));
    assert!(!s.join("primary/nxcc-v1").exists());
    // A writable primary: served from the image and copied in; then a hit of its own.
    let o = compile(&s, "primary", "c.neff", &secondary);
    assert!(text(&o.stdout).contains(&format!("{HIT}{}", s.join("image").display())));
    let o = compile(&s, "primary", "d.neff", &[]);
    assert!(
        text(&o.stdout).contains(&format!("{HIT}{}", s.join("primary").display())),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(tool_runs(&s), runs, "nothing compiled");
    for out in ["b.neff", "c.neff", "d.neff"] {
        assert_eq!(
            std::fs::read(s.join(out)).unwrap(),
            std::fs::read(s.join("a.neff")).unwrap()
        );
    }
    assert_eq!(
        snapshot(&s.join("image")),
        image,
        "the secondary was written"
    );
    let o = s.run(&["cache", "stats", "--cache_dir", "primary", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["entries"], 1);
    assert_eq!(v["counters"]["hits_secondary"], 1, "{v}");
    assert_eq!(v["counters"]["hits"], 2, "{v}");
}
