#!/usr/bin/env python3
"""Whole-process benchmark: `nxcc compile <example> --target trn2 --dry-run=json` against the floor of
the original driver (bench/argparse_floor.py: python3 + argparse + the same flag table, parsing the
same command line). Both are measured in the same run, alternating, N times each; prints medians.

Usage: bench/dry_run_vs_argparse.py [path/to/nxcc] [runs]
Build first: cargo build --release
"""
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NXCC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 200
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb")
ARGS = ["compile", MODEL, "--target", "trn2", "--dry-run=json"]


def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def main():
    floor = [sys.executable, os.path.join(ROOT, "bench", "argparse_floor.py")] + ARGS
    nxcc = [NXCC] + ARGS
    for cmd in (nxcc, floor):  # warm the page cache
        timed(cmd)
    a, b = [], []
    for _ in range(RUNS):
        a.append(timed(nxcc))
        b.append(timed(floor))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"nxcc dry run (json), whole process: median {ma * 1e3:.2f} ms  (p10 {sorted(a)[len(a) // 10] * 1e3:.2f}, p90 {sorted(a)[len(a) * 9 // 10] * 1e3:.2f})")
    print(f"python3 + argparse floor:           median {mb * 1e3:.2f} ms  (p10 {sorted(b)[len(b) // 10] * 1e3:.2f}, p90 {sorted(b)[len(b) * 9 // 10] * 1e3:.2f})")
    print(f"speed-up: {mb / ma:.1f}x over {RUNS} runs each")


if __name__ == "__main__":
    main()
