//! What a publication costs with 10,000 entries in the cache, as a compile's result is stored:
//! the entry committed and counted, the size kept ([`nxcc::cache::evict::publish`]), the entry
//! listed for explanations ([`nxcc::cache::index::record`]). Three caches of 10,000 entries
//! (3 KiB NEFFs, the same `meta.json` shape as real entries), publications alternated between
//! them in one run:
//!
//! - `no limit`: no `max_size`;
//! - `full, amortised`: `max_size` set to what the cache held, so it stays full: a publication
//!   that takes it over evicts the least recently used entries of the whole cache, scanning the
//!   parts that hold them, and a fifth of a sixteenth's share more from the last part evicted
//!   from — measured after every sixteenth was scanned once (the steady state);
//! - `full, gc each time`: the same limit kept by a whole `nxcc cache gc` pass after every
//!   publication (what a cron job or a wrapper would do without the size keeper) — fewer rounds,
//!   it scans every entry each time.
//!
//! ```sh
//! cargo bench --bench cache_publish      # NXCC_BENCH_ROUNDS=N publications per cache (2000)
//! ```

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use nxcc::cache::meta::{META_FILE, NEFF_FILE};
use nxcc::cache::store::Cache;
use nxcc::cache::{evict, index, maintain};

const ENTRIES: usize = 10_000;

fn key_of(cache_tag: u64, i: u64) -> String {
    let h = blake3::hash(format!("{cache_tag}-{i}").as_bytes());
    h.to_hex().to_string()
}

/// Publish one entry of `key` the way a compile stores its result.
fn publish(cache: &Cache, key: &str, max: Option<u64>) -> evict::Published {
    let p = cache.begin(key).unwrap();
    p.dir()
        .create_file(NEFF_FILE)
        .unwrap()
        .write_all(&[7u8; 3 << 10])
        .unwrap();
    let meta = serde_json::json!({
        "format": 1, "key": key, "args_key": "a".repeat(64), "inputs": {"args": {"optlevel": "2"}},
        "model_path": "/m.pb", "model_blake3": "b".repeat(64), "model_size": 1000,
        "status": "ok", "exit_status": 0, "neff": {"blake3": "c".repeat(64), "size": 3072},
        "engine": "pipeline", "jobs": [], "peak_rss_kb": 1000, "wall_s": 1.0,
        "nxcc_version": "0", "created": "2026-01-01T00:00:00Z", "created_ms": 1, "last_used_ms": 1,
    });
    p.dir()
        .create_file(META_FILE)
        .unwrap()
        .write_all(&serde_json::to_vec_pretty(&meta).unwrap())
        .unwrap();
    let done = evict::publish(cache, key, p, max).unwrap();
    let groups = index::Groups {
        model: key.to_string(),
        args: "a".repeat(64),
        name: "m.pb".into(),
    };
    index::record(cache, key, &groups).unwrap();
    done
}

fn fill(dir: &Path, tag: u64) -> Cache {
    let cache = Cache::new(dir);
    for i in 0..ENTRIES as u64 {
        publish(&cache, &key_of(tag, i), None);
    }
    cache
}

fn total_bytes(cache: &Cache) -> u64 {
    let mut t = 0;
    cache.scan_summaries(&mut |s| t += s.bytes).unwrap();
    t
}

fn pct(v: &[Duration], p: f64) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let rounds: usize = std::env::var("NXCC_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    eprintln!(
        "filling three caches of {ENTRIES} entries in {}",
        dir.path().display()
    );
    let free = fill(&dir.path().join("free"), 1);
    let full = fill(&dir.path().join("full"), 2);
    let gc = fill(&dir.path().join("gc"), 3);
    let limit = total_bytes(&full);
    // The limit set on a cache already at it: publications (untimed) until sixteen parts were
    // scanned. What follows is the steady state of a full cache.
    let (mut warm, mut warm_scans) = (0u64, 0u64);
    while warm_scans < 16 {
        warm_scans += publish(&full, &key_of(10, warm), Some(limit)).scanned;
        warm += 1;
    }
    eprintln!("{warm} publications until sixteen parts were scanned");
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (mut evicted, mut scans) = (0u64, 0u64);
    let gc_every = 100;
    for i in 0..rounds as u64 {
        // Which of the two goes first alternates from round to round.
        let mut free_one = || {
            let t = Instant::now();
            publish(&free, &key_of(11, i), None);
            a.push(t.elapsed());
        };
        if i % 2 == 0 {
            free_one();
        }
        let t = Instant::now();
        let done = publish(&full, &key_of(12, i), Some(limit));
        b.push(t.elapsed());
        evicted += done.evicted;
        scans += done.scanned;
        if i % 2 == 1 {
            free_one();
        }
        if (i as usize).is_multiple_of(gc_every) {
            let t = Instant::now();
            publish(&gc, &key_of(13, i), None);
            maintain::gc(&gc, limit);
            c.push(t.elapsed());
        }
    }
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    println!(
        "publication with {ENTRIES} entries, {rounds} publications alternated (gc: every {gc_every}th round)"
    );
    println!("| cache | mean (amortised) | median | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (name, v) in [
        ("no limit", &a),
        ("full, amortised", &b),
        ("full, gc each time", &c),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} | {} |",
            ms(mean(v)),
            ms(pct(v, 0.5)),
            ms(pct(v, 0.9)),
            ms(pct(v, 0.99)),
            ms(pct(v, 1.0))
        );
    }
    println!(
        "full, amortised: {evicted} entries evicted, {scans} parts scanned in {rounds} publications; held {} of {limit} bytes at the end",
        total_bytes(&full)
    );
    println!(
        "full amortised / no limit (means): {:.2}; gc each time / no limit: {:.1}",
        mean(&b).as_secs_f64() / mean(&a).as_secs_f64(),
        mean(&c).as_secs_f64() / mean(&a).as_secs_f64()
    );
}
