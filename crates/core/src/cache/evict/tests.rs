use super::*;
use crate::cache::meta::{META_FILE, NEFF_FILE};
use std::io::Write;

/// A key in part `part` (its first hex digit), unique by `n`.
fn key_in(part: u64, n: u64) -> String {
    format!("{part:x}{:063x}", n * 0x9e37_79b9 + 1)
}

/// Publish an entry of `key` with a NEFF of `size` bytes.
fn put(cache: &Cache, key: &str, size: usize, max: Option<u64>) -> std::io::Result<Published> {
    let p = cache.begin(key).unwrap();
    p.dir()
        .create_file(NEFF_FILE)
        .unwrap()
        .write_all(&vec![7u8; size])
        .unwrap();
    p.dir()
        .create_file(META_FILE)
        .unwrap()
        .write_all(format!("{{\"key\":\"{key}\",\"status\":\"ok\",\"neff\":{{}}}}").as_bytes())
        .unwrap();
    publish(cache, key, p, max)
}

/// Set an entry's last use (its meta.json's modification time), ms since the epoch.
fn used_at(cache: &Cache, key: &str, ms: u64) {
    let f = std::fs::File::options()
        .write(true)
        .open(cache.entry_dir(key).join(META_FILE))
        .unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    f.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
        .unwrap();
}

fn real_bytes(cache: &Cache) -> u64 {
    let mut total = 0;
    cache.scan_summaries(&mut |s| total += s.bytes).unwrap();
    total
}

fn keys(cache: &Cache) -> Vec<String> {
    let mut k = Vec::new();
    cache.scan_summaries(&mut |s| k.push(s.key)).unwrap();
    k.sort();
    k
}

#[test]
fn the_cache_stays_under_max_size_and_keeps_what_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    let max = 16 * 3 * 4096u64;
    // The entry a reader holds: a shared lock on its meta.json, as Cache::serve takes.
    let held_key = key_in(0, 999);
    put(&cache, &held_key, 4000, Some(max)).unwrap();
    let reader = std::fs::File::open(cache.entry_dir(&held_key).join(META_FILE)).unwrap();
    fs4::fs_std::FileExt::lock_shared(&reader).unwrap();
    let mut evicted = 0;
    for i in 0..200u64 {
        let key = key_in(i % 16, i);
        evicted += put(&cache, &key, 4000, Some(max)).unwrap().evicted;
        assert!(real_bytes(&cache) <= max, "over max_size after {i}");
        assert!(
            cache.entry_dir(&key).exists(),
            "{i}: evicted at its own publication"
        );
        assert!(
            cache.entry_dir(&held_key).exists(),
            "the held entry was removed"
        );
    }
    assert!(evicted > 100, "{evicted}");
    let c = counters::read(&cache, None);
    assert_eq!(c.evictions as u64, evicted);
    assert_eq!(c.size_bytes as u64, real_bytes(&cache));
    // Nearly full: what may be kept is kept.
    assert!(real_bytes(&cache) * 10 >= max * 8, "{}", real_bytes(&cache));
    drop(reader);
}

#[test]
fn a_part_never_counted_is_recounted_at_its_first_publication() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    // Entries an older nxcc wrote, uncounted.
    for i in 0..5 {
        crate::cache::store::tests::put(&cache, &format!("5{i}{}", "0".repeat(62)), &[1; 100]);
    }
    assert_eq!(counters::read(&cache, Some(5)).entries, 0);
    let p = put(&cache, &format!("5f{}", "0".repeat(62)), 100, None).unwrap();
    assert_eq!(p.scanned, 1);
    assert_eq!(counters::read(&cache, Some(5)).entries, 6);
    let q = put(&cache, &format!("5e{}", "0".repeat(62)), 100, None).unwrap();
    assert_eq!(q.scanned, 0);
    assert_eq!(counters::read(&cache, Some(5)).entries, 7);
    assert_eq!(
        counters::read(&cache, Some(5)).size_bytes as u64,
        real_bytes(&cache)
    );
}

#[test]
fn the_least_recently_used_entries_of_the_whole_cache_go_first() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    // Nine entries in eight parts (two in part 9), published in another order than their uses:
    // the oldest uses are part 4's and part 9's first. (Uses after the publications, as hits
    // make them: the parts' hints, taken when each was first counted, stay lower bounds.)
    let uses = [
        (9u64, 8),
        (4, 1),
        (12, 2),
        (0, 3),
        (7, 4),
        (2, 5),
        (15, 6),
        (5, 7),
        (9, 0),
    ];
    let base = super::super::meta::now_ms() + 3_600_000;
    let mut made = vec![String::new(); uses.len()];
    for (n, (part, age)) in uses.iter().enumerate() {
        let k = key_in(*part, n as u64);
        put(&cache, &k, 10_000, None).unwrap();
        used_at(&cache, &k, base + age * 60_000);
        made[*age as usize] = k;
    }
    let one = real_bytes(&cache) / 9;
    // Room for nine: a tenth of twice the size, in part 12, takes the oldest two out — not
    // part 12's own, nor part 9's newer one.
    let max = one * 9 + one / 2;
    let new = key_in(12, 99);
    let p = put(&cache, &new, 20_000, Some(max)).unwrap();
    assert_eq!(p.evicted, 2, "{p:?}");
    let left = keys(&cache);
    assert!(
        !left.contains(&made[0]) && !left.contains(&made[1]),
        "{left:?}"
    );
    for k in made[2..].iter().chain([&new]) {
        assert!(left.contains(k), "{k} evicted: {left:?}");
    }
    assert!(real_bytes(&cache) <= max);
    // A hit makes an entry the most recent: the next to go is the next oldest. (The entry
    // published is used now, before the others' uses: it is used later too.)
    used_at(&cache, &new, base + 3_600_000);
    used_at(&cache, &made[2], base + 3_600_000);
    let p = put(&cache, &key_in(1, 100), 10_000, Some(max)).unwrap();
    assert!(p.evicted >= 1, "{p:?}");
    let left = keys(&cache);
    assert!(
        left.contains(&made[2]) && !left.contains(&made[3]),
        "{left:?}"
    );
    assert!(left.contains(&made[8]), "{left:?}");
}

#[test]
fn small_limits_keep_what_they_may() {
    // 40 entries of 16 KiB published under max_size=256K: at least 12 kept at every step.
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    let max = 256 << 10;
    let mut least = usize::MAX;
    for i in 0..40u64 {
        put(&cache, &key_in(i % 16, i), 16 << 10, Some(max)).unwrap();
        let kept = keys(&cache).len();
        if i >= 16 {
            least = least.min(kept);
        }
        assert!(real_bytes(&cache) <= max, "over max_size after {i}");
    }
    assert!(least >= 12, "{least} kept");
    assert!(real_bytes(&cache) * 4 >= max * 3, "{}", real_bytes(&cache));
}

#[test]
fn an_entry_larger_than_a_part_is_kept_and_one_larger_than_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    let max = 1 << 20;
    // Three entries of half a share each, then one of half the limit (eight shares).
    for i in 0..3 {
        put(&cache, &key_in(3, i), 32 << 10, Some(max)).unwrap();
    }
    let big = key_in(3, 9);
    let p = put(&cache, &big, 512 << 10, Some(max)).unwrap();
    assert_eq!(p.evicted, 0);
    assert!(cache.entry_dir(&big).exists());
    // Another of half the limit: the cache goes over; the oldest go, never the new one.
    let big2 = key_in(3, 10);
    let p = put(&cache, &big2, 512 << 10, Some(max)).unwrap();
    assert!(p.evicted >= 1, "{p:?}");
    assert!(cache.entry_dir(&big2).exists());
    assert!(real_bytes(&cache) <= max);
    // Larger than the whole limit: refused, and nothing of it is left.
    let before = keys(&cache);
    let huge = key_in(7, 1);
    let e = put(&cache, &huge, (1 << 20) + 1, Some(max)).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "the entry takes 1.0 MiB, more than the cache's max_size of 1.0 MiB; it is not stored"
        ),
        "{e}"
    );
    assert_eq!(keys(&cache), before);
    assert!(!cache.entry_dir(&huge).exists());
    let mut leftovers = Vec::new();
    cache
        .scan(&mut |_, _| {})
        .unwrap()
        .into_iter()
        .for_each(|l| leftovers.push(l.name));
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn concurrent_publications_leave_the_cache_under_max_size_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    let max = 48 * 4096u64;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let cache = &cache;
            s.spawn(move || {
                for i in 0..40u64 {
                    put(
                        cache,
                        &key_in((t * 5 + i) % 16, t * 1000 + i),
                        4000,
                        Some(max),
                    )
                    .unwrap();
                }
            });
        }
    });
    let real = real_bytes(&cache);
    assert!(real <= max, "{real} over {max}");
    assert!(real * 10 >= max * 7, "{real}");
    let c = counters::read(&cache, None);
    assert_eq!(c.size_bytes as u64, real);
    assert_eq!(c.entries as usize, keys(&cache).len());
    assert_eq!(c.evictions as usize + keys(&cache).len(), 160);
}

#[test]
fn a_removed_entry_is_counted_out_and_no_part_lock_stays() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    let (a, b) = (key_in(7, 1), key_in(7, 2));
    put(&cache, &a, 3000, None).unwrap();
    put(&cache, &b, 5000, None).unwrap();
    assert!(remove(&cache, &a).unwrap());
    assert!(!remove(&cache, &a).unwrap());
    let c = counters::read(&cache, Some(7));
    assert_eq!((c.entries, c.size_bytes as u64), (1, real_bytes(&cache)));
    assert_eq!(keys(&cache), vec![b]);
    let evict_dir = dir.path().join("nxcc-v1").join(EVICT_DIR);
    let locks: Vec<_> = std::fs::read_dir(&evict_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().ends_with(PART_LOCK_SUFFIX))
        .collect();
    assert!(locks.is_empty(), "{locks:?}");
}
