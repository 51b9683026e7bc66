#!/usr/bin/env python3
"""`nxcc cache stats` and `nxcc cache gc` at 100, 1,000 and 10,000 entries: wall time and peak RSS,
against `cat` of every entry's meta.json (the floor of reading them), measured interleaved in one
run (stats, gc, cat, stats, gc, cat, ...). Entries are copies of one real entry (a compile of the
example model with the simulated toolchain), each under its own key, with its own meta.json.

gc is measured twice: with a --max-size above the total (its first pass only: count and size), and
with one that evicts the oldest tenth (both passes and the evictions), on a fresh copy of the cache
each time (the copy is not timed).

With a third argument, another nxcc (an earlier build, say) is measured in the same rounds: its
stats and gc without eviction.

Usage: bench/cache_scan.py [path/to/nxcc] [runs] [path/to/baseline-nxcc]
Build first: cargo build --release. The caches are made under $TMPDIR (a tmpfs, such as
TMPDIR=/dev/shm, keeps the disk's noise out of the figures).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pairs  # noqa: E402  (bench/pairs.py: the timing tool of the benchmarks)
NXCC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 7
BASE = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo")
SIZES = [100, 1000, 10000]


def timed(argv, cwd=None):
    """(wall seconds, peak RSS KiB) of one run of argv, measured by bench/pairs.py (through
    bench/peak.c: the process's own peak, not this script's)."""
    wall, _, rss, code = pairs.measure(argv, cwd=cwd)
    if code != 0:
        raise SystemExit(f"{argv} exited {code}")
    return wall, rss


def one_entry(tmp):
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"))
    env.pop("NXCC_SIM_RECORD", None)
    cache = os.path.join(tmp, "seed")
    subprocess.run([NXCC, "compile", MODEL, "--target", "trn2", "--toolchain", "sim", "--cache_dir", cache,
                    "--output", os.path.join(tmp, "out.neff")], cwd=tmp, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    root = os.path.join(cache, "nxcc-v1")
    for shard in os.listdir(root):
        if len(shard) == 2:
            for e in os.listdir(os.path.join(root, shard)):
                if len(e) == 64:
                    return os.path.join(root, shard, e)
    raise SystemExit("no entry was made")


def make_cache(entry, dest, n):
    meta = json.load(open(os.path.join(entry, "meta.json")))
    files = {f: open(os.path.join(entry, f), "rb").read() for f in os.listdir(entry) if f != "meta.json"}
    root = os.path.join(dest, "nxcc-v1")
    for i in range(n):
        key = f"{i:064x}"[::-1]
        d = os.path.join(root, key[:2], key)
        os.makedirs(d)
        for f, b in files.items():
            with open(os.path.join(d, f), "wb") as out:
                out.write(b)
        meta["key"] = key
        meta["created_ms"] = meta["last_used_ms"] = 1_700_000_000_000 + i
        with open(os.path.join(d, "meta.json"), "w") as out:
            json.dump(meta, out, indent=2)
    return sum(len(b) for b in files.values()) * n


def med(xs):
    return statistics.median(xs)


def main():
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-cache-")
    try:
        entry = one_entry(tmp)
        print(f"nxcc: {NXCC}; baseline: {BASE}; {RUNS} interleaved runs of each; medians (min-max)")
        print("| entries | command | wall ms | peak RSS MiB | wall / cat |")
        print("|---:|---|---:|---:|---:|")
        for n in SIZES:
            cache = os.path.join(tmp, f"c{n}")
            make_cache(entry, cache, n)
            metas = [os.path.join(dp, "meta.json") for dp, _, fs in os.walk(cache) if "meta.json" in fs]
            with open(os.path.join(tmp, "metas.txt"), "w") as f:
                f.write("\n".join(metas))
            cat = ["sh", "-c", f"xargs cat < {tmp}/metas.txt > /dev/null"]
            stats = [NXCC, "cache", "stats", "--cache_dir", cache]
            gc_scan = [NXCC, "cache", "gc", "--cache_dir", cache, "--max-size", "1T"]
            total = int(json.loads(subprocess.run(stats + ["--json"], capture_output=True, check=True).stdout)["bytes"])
            work = os.path.join(tmp, "gc-work")
            gc_evict = [NXCC, "cache", "gc", "--cache_dir", work, "--max-size", str(total * 9 // 10)]
            res = {"stats": [], "gc (no eviction)": [], "gc (evicts 10%)": [], "cat meta.json": []}
            if BASE:
                res["baseline stats"] = []
                res["baseline gc (no eviction)"] = []
            for r in range(RUNS + 1):
                shutil.rmtree(work, ignore_errors=True)
                shutil.copytree(cache, work, symlinks=True)
                row = {
                    "stats": timed(stats),
                    "gc (no eviction)": timed(gc_scan),
                    "gc (evicts 10%)": timed(gc_evict),
                    "cat meta.json": timed(cat),
                }
                if BASE:
                    row["baseline stats"] = timed([BASE] + stats[1:])
                    row["baseline gc (no eviction)"] = timed([BASE] + gc_scan[1:])
                if r > 0:  # the first round warms the page cache
                    for k, v in row.items():
                        res[k].append(v)
            floor = med([w for w, _ in res["cat meta.json"]])
            for k, v in res.items():
                walls = [w * 1000 for w, _ in v]
                rss = [m / 1024 for _, m in v]
                print(f"| {n:,} | {k} | {med(walls):.1f} ({min(walls):.1f}-{max(walls):.1f}) | "
                      f"{med(rss):.1f} | {med(walls) / (floor * 1000):.2f} |")
            shutil.rmtree(cache)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
