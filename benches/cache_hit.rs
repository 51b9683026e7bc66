//! A cache hit for a 100 MB model, as a whole process, against its floor.
//!
//! The model is older than the racy margin of remembered digests
//! ([`nxcc::cache::digests`]), as a graph compiled again is: a hit trusts its remembered digest
//! and hashes none of it; `--cache-rehash` hits, which hash every byte (the hit before digests
//! were remembered), run alternated with them, and so does `cp` of the NEFF alone (the floor of
//! a hit that hashes no model).
//!
//! `nxcc compile big.pb --target trn2 --toolchain sim --cache_dir D --output out.neff` after a
//! first compile populated `D` must take at most 1.3 × the time of a process that only does what
//! a hit cannot avoid: hash the model with blake3 and copy the cached NEFF (`std::fs::copy`).
//! Two floors, both separate processes started the same way from this harness (this same
//! executable re-run with `--baseline`), alternated with nxcc in one run:
//! - `reader`: blake3's own streaming API, `Hasher::update_reader` (what `b3sum --no-mmap` does);
//! - `overlapped`: nxcc's reading routine (`nxcc::cache::key::hash_read_into`, reads
//!   overlapped with hashing on two threads);
//! - `mapped`: nxcc's mapped routine (`nxcc::cache::key::hash_mapped_into`, the file mapped and
//!   hashed on every core, what a hit of a large model does) — the strict floor: it leaves nxcc
//!   no advantage of method.
//!
//! Every side writes to an output that does not exist yet (it is removed, untimed, before each
//! run): replacing an existing file makes ext4 flush the new file's data (`auto_da_alloc`), a
//! cost of the file system, not of the hit; the bench reports that case too.
//!
//! A third floor is what a user's own tools reach: `b3sum` (memory-mapped, every core) and `cp`
//! of the NEFF, two processes — when a `b3sum` is on `PATH` or named by `NXCC_BENCH_B3SUM`
//! (`cargo install b3sum`).
//!
//! Then the threshold between reading and mapping ([`nxcc::cache::key::MAP_FROM`]): files of
//! 256 KiB to 32 MiB hashed by a process that reads them and by one that maps them, alternated.
//!
//! ```sh
//! cargo bench --bench cache_hit            # NXCC_BENCH_ROUNDS=N to change the rounds (30)
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cached_args, entry_neff};

const MODEL_BYTES: usize = 100_000_000;

/// The floor: hash the model, copy the NEFF.
fn baseline(mode: &str, model: &Path, neff: &Path, out: &Path) {
    let mut h = blake3::Hasher::new();
    let f = std::fs::File::open(model).expect("model");
    match mode {
        "reader" => {
            h.update_reader(f).expect("read");
        }
        "overlapped" => {
            nxcc::cache::key::hash_read_into(&f, &mut h).expect("read");
        }
        _ => {
            nxcc::cache::key::hash_mapped_into(&f, model, &mut h)
                .expect("mappable")
                .expect("read");
        }
    }
    if neff != Path::new("-") {
        std::fs::copy(neff, out).expect("copy");
    }
    println!("{}", h.finalize().to_hex());
}

fn time(mut c: Command, check: &dyn Fn(&str)) -> Duration {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let t = Instant::now();
    let o = c.output().expect("spawn");
    let d = t.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check(&String::from_utf8_lossy(&o.stdout));
    d
}

fn percentile(v: &[Duration], p: f64) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The example model padded to 100 MB with pseudo-random bytes, as one field no reader knows
/// (number 1000, length-delimited), so it still reads as the same module: written to `path`.
fn write_model(path: &Path) {
    let mut model = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo_module.pb"),
    )
    .unwrap();
    let varint = |mut v: u64| {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    };
    let tag = varint((1000 << 3) | 2);
    let pad = (MODEL_BYTES - model.len() - tag.len() - 4) as u64;
    model.extend_from_slice(&tag);
    model.extend_from_slice(&varint(pad));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let end = model.len() + pad as usize;
    while model.len() < end {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        model.extend_from_slice(&x.to_le_bytes());
    }
    model.truncate(end);
    std::fs::write(path, &model).unwrap();
}

/// The `b3sum` named by `NXCC_BENCH_B3SUM`, else the first on `PATH`.
fn find_b3sum() -> Option<PathBuf> {
    std::env::var_os("NXCC_BENCH_B3SUM")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("b3sum"))
                    .find(|c| c.is_file())
            })
        })
}

/// The timings of the hits and their floors (each a vector of the rounds' durations).
struct Figures {
    /// nxcc's hit, new output.
    a: Vec<Duration>,
    /// nxcc's `--cache-rehash` hit.
    h: Vec<Duration>,
    /// `cp` of the NEFF alone.
    p: Vec<Duration>,
    /// The `reader` floor.
    b: Vec<Duration>,
    /// The `overlapped` floor.
    c: Vec<Duration>,
    /// The `mapped` floor.
    m: Vec<Duration>,
    /// nxcc's hit replacing its output.
    r: Vec<Duration>,
    /// `b3sum` + `cp` (empty without a `b3sum`).
    t: Vec<Duration>,
}

fn med(v: &[Duration]) -> f64 {
    percentile(v, 0.5).as_secs_f64()
}

/// The hits' table and their ratios to the floors.
fn print_hits(neff_mb: u64, rounds: usize, f: &Figures) {
    let Figures {
        a,
        h,
        p,
        b,
        c,
        m,
        r,
        t,
    } = f;
    println!(
        "cache hit, 100 MB model ({} MB NEFF), {rounds} rounds alternated",
        neff_mb
    );
    println!("| | median | p10 | p90 |");
    println!("|---|---|---|---|");
    for (name, v) in [
        ("nxcc compile, cache hit, new output", a),
        ("nxcc compile --cache-rehash, cache hit, new output", h),
        ("floor `cp` of the NEFF alone", p),
        ("floor `reader`: update_reader + copy", b),
        ("floor `overlapped`: nxcc's read hashing + copy", c),
        ("floor `mapped`: nxcc's mapped hashing + copy", m),
        ("nxcc compile, cache hit, replacing the output", r),
        ("floor `b3sum` + `cp` (two processes)", t),
    ] {
        if v.is_empty() {
            println!("| {name} | (no b3sum found) | | |");
            continue;
        }
        println!(
            "| {name} | {} | {} | {} |",
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.1)),
            ms(percentile(v, 0.9))
        );
    }
    println!(
        "hit / cp alone: {:.3} (target: <= 1.3); --cache-rehash hit / cp alone: {:.3}; hit / --cache-rehash hit: {:.3}",
        med(a) / med(p),
        med(h) / med(p),
        med(a) / med(h)
    );
    println!(
        "hit / reader floor: {:.3}; hit / overlapped floor: {:.3}; hit / mapped floor: {:.3}",
        med(a) / med(b),
        med(a) / med(c),
        med(a) / med(m)
    );
    if !t.is_empty() {
        println!("hit / b3sum + cp: {:.3} (target: <= 1.15)", med(a) / med(t));
    }
}

/// The threshold: a process hashing a file by reading it against one mapping it.
fn threshold(d: &Path, rounds: usize) {
    println!();
    println!("reading against mapping, whole processes, {rounds} rounds alternated");
    println!("| file | read (median) | mapped (median) | mapped / read |");
    println!("|---|---|---|---|");
    let big = std::fs::read(d.join("big.pb")).unwrap();
    for kib in [256usize, 1024, 2048, 4096, 8192, 32768] {
        let f = d.join(format!("f{kib}"));
        std::fs::write(&f, &big[..kib << 10]).unwrap();
        let cmd = |mode: &str| {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.arg("--baseline").arg(mode).arg(&f).arg("-").arg("-");
            c
        };
        time(cmd("overlapped"), &|_| {});
        time(cmd("mapped"), &|_| {});
        let (mut rd, mut mp) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            rd.push(time(cmd("overlapped"), &|_| {}));
            mp.push(time(cmd("mapped"), &|_| {}));
        }
        println!(
            "| {} KiB | {} | {} | {:.3} |",
            kib,
            ms(percentile(&rd, 0.5)),
            ms(percentile(&mp, 0.5)),
            med(&mp) / med(&rd)
        );
    }
}

/// `nxcc compile` of the big model in `d`, cached, to `output`, with `extra` arguments.
fn nxcc_command(d: &Path, output: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nxcc"));
    c.arg("compile")
        .args(cached_args("big.pb"))
        .args(["--output", output])
        .args(extra)
        .current_dir(d)
        .env("XDG_CACHE_HOME", d.join("xdg"));
    for v in [
        "NXCC_SIM_FAULT",
        "NXCC_SIM_WORK_MS",
        "NXCC_SIM_WORK_MS_PER_MB",
        "NXCC_SIM_RSS_MB",
        "NXCC_SIM_RECORD",
    ] {
        c.env_remove(v);
    }
    c
}

/// This harness re-run as the floor `mode`: hash the big model in `d`, copy `neff` to `out`.
fn baseline_command(d: &Path, neff: &Path, mode: &str, out: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.arg("--baseline")
        .arg(mode)
        .arg(d.join("big.pb"))
        .arg(neff)
        .arg(d.join(out))
        .current_dir(d);
    c
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--baseline") {
        baseline(
            &args[2],
            Path::new(&args[3]),
            Path::new(&args[4]),
            Path::new(&args[5]),
        );
        return;
    }
    let rounds: usize = std::env::var("NXCC_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(30);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let d = dir.path();
    write_model(&d.join("big.pb"));
    // A model that has not changed since it was written (a training script's graph, compiled
    // again): older than the racy margin, so its digest is remembered.
    std::thread::sleep(Duration::from_nanos(
        nxcc::cache::digests::RACY_MARGIN_NS as u64 + 500_000_000,
    ));
    let nxcc_with = |output: &str, extra: &[&str]| nxcc_command(d, output, extra);
    let nxcc_cmd = |output: &str| nxcc_with(output, &[]);
    // The hit as it was before digests were remembered: every byte of the model hashed.
    let rehash_cmd = |output: &str| nxcc_with(output, &["--cache-rehash"]);
    let o = nxcc_cmd("first.neff").output().unwrap();
    assert!(
        o.status.success(),
        "populating the cache failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let neff = entry_neff(&d.join("cache"));
    let hit = |out: &str| {
        assert!(out.contains("Using a cached neff at "), "not a hit: {out}");
    };
    let base_cmd = |mode: &str, out: &str| baseline_command(d, &neff, mode, out);
    let fresh = |out: &str| {
        let _ = std::fs::remove_file(d.join(out));
    };
    let b3sum = find_b3sum();
    // `b3sum MODEL` then `cp NEFF OUT`, timed together.
    let tools = |out: &str| -> Option<Duration> {
        let b3 = b3sum.as_ref()?;
        let mut sum = Command::new(b3);
        sum.arg(d.join("big.pb")).current_dir(d);
        let mut cp = Command::new("cp");
        cp.arg(&neff).arg(d.join(out)).current_dir(d);
        Some(time(sum, &|_| {}) + time(cp, &|_| {}))
    };
    // `cp NEFF OUT` alone: what a hit that hashes no model cannot avoid.
    let cp_alone = |out: &str| {
        let mut cp = Command::new("cp");
        cp.arg(&neff).arg(d.join(out)).current_dir(d);
        time(cp, &|_| {})
    };
    // Warm the page cache and the executables.
    time(nxcc_cmd("out.neff"), &hit);
    time(rehash_cmd("out-rehash.neff"), &hit);
    cp_alone("out-cp.neff");
    time(base_cmd("reader", "out-reader.neff"), &|_| {});
    time(base_cmd("overlapped", "out-overlapped.neff"), &|_| {});
    time(base_cmd("mapped", "out-mapped.neff"), &|_| {});
    let _ = tools("out-tools.neff");
    let (mut a, mut b, mut c, mut r) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut m = Vec::new();
    let mut t = Vec::new();
    let (mut h, mut p) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        fresh("out-rehash.neff");
        h.push(time(rehash_cmd("out-rehash.neff"), &hit));
        fresh("out-cp.neff");
        p.push(cp_alone("out-cp.neff"));
        fresh("out-tools.neff");
        if let Some(d) = tools("out-tools.neff") {
            t.push(d);
        }
        fresh("out.neff");
        a.push(time(nxcc_cmd("out.neff"), &hit));
        fresh("out-reader.neff");
        b.push(time(base_cmd("reader", "out-reader.neff"), &|_| {}));
        fresh("out-overlapped.neff");
        c.push(time(base_cmd("overlapped", "out-overlapped.neff"), &|_| {}));
        fresh("out-mapped.neff");
        m.push(time(base_cmd("mapped", "out-mapped.neff"), &|_| {}));
        // The output exists: a hit replaces it.
        r.push(time(nxcc_cmd("out.neff"), &hit));
    }
    let neff_mb = std::fs::metadata(&neff).unwrap().len() / 1_000_000;
    print_hits(
        neff_mb,
        rounds,
        &Figures {
            a,
            h,
            p,
            b,
            c,
            m,
            r,
            t,
        },
    );

    threshold(d, rounds);
}
