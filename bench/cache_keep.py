#!/usr/bin/env python3
"""How much of a small `max_size` the compile cache keeps (figures in BENCHMARKS.md): 40 distinct
models (the example model's HLO text, each with its first parameter renamed) compiled one after
another with the simulated toolchain into a fresh cache with `--cache-max-size 256K`. Each
entry (NEFF, meta.json, log) takes about 16 KiB, so the limit holds 15 or 16 of them. After
every compile the entries and their bytes are counted; the figures are the fewest entries kept
from the 17th compile on (when 16 KiB entries can no longer all fit), and what is kept at the
end.

Each build given is run in turn on its own cache (a baseline build after the one under test,
for the before/after row).

Usage: bench/cache_keep.py [path/to/nxcc] [path/to/baseline-nxcc]
Build first: cargo build --release
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILDS = [os.path.abspath(a) for a in sys.argv[1:]] or [os.path.join(ROOT, "target", "release", "nxcc")]
MAX = 256 << 10
MODELS = 40


def entries(cache):
    """(entries, bytes) of nxcc's cache in `cache`: every file of every entry."""
    root = os.path.join(cache, "nxcc-v1")
    count, total = 0, 0
    for shard in os.listdir(root) if os.path.isdir(root) else []:
        if len(shard) != 2:
            continue
        for key in os.listdir(os.path.join(root, shard)):
            d = os.path.join(root, shard, key)
            if len(key) == 64 and os.path.isdir(d):
                count += 1
                total += sum(os.lstat(os.path.join(d, f)).st_size for f in os.listdir(d))
    return count, total


def run(nxcc, tmp):
    text = open(os.path.join(ROOT, "examples", "models", "mlp.hlo")).read()
    cache = os.path.join(tmp, "cache")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"), NXCC_SIM_WORK_MS="*:0")
    env.pop("NXCC_TOOLCHAIN", None)
    kept = []
    for n in range(MODELS):
        model = os.path.join(tmp, f"m{n}.hlo")
        with open(model, "w") as f:
            f.write(text.replace("x.1", f"x{n}.1"))
        subprocess.run([nxcc, "compile", model, "--target", "trn2", "--toolchain", "sim",
                        "--cache_dir", cache, "--cache-max-size", "256K",
                        "--output", os.path.join(tmp, f"m{n}.neff")],
                       env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True)
        kept.append(entries(cache))
    return kept


def main():
    print(f"## {MODELS} models compiled into a cache of max_size 256K (16 KiB entries)")
    print("| build | entries kept from the 17th compile on (fewest) | kept at the end | bytes at the end | of the limit |")
    print("|---|---|---|---|---|")
    for nxcc in BUILDS:
        tmp = tempfile.mkdtemp(prefix="nxcc-bench-")
        try:
            kept = run(nxcc, tmp)
        finally:
            shutil.rmtree(tmp)
        fewest = min(c for c, _ in kept[16:])
        count, total = kept[-1]
        print(f"| {nxcc} | {fewest} | {count} | {total} | {100 * total / MAX:.0f} % |")
        print("   kept after each compile: " + " ".join(str(c) for c, _ in kept), flush=True)


if __name__ == "__main__":
    main()
