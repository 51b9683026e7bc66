#!/usr/bin/env python3
"""`nxcc parallel-compile` makespan against its lower bound, measured and computed in one run.

16 simulated compiles whose costs differ: 16 models (the example model padded to 1-8 MiB) and
`NXCC_SIM_WORK_MS_PER_MB=hlo2penguin:MS` (CPU-bound work per MiB of the model, so a compile's
cost follows its model's size). The batch runs with `--jobs J` (default: the number of CPUs),
no cache, and writes `--report`. Each compile's own wall time comes from that report; the lower
bound is

    max(sum(wall) / J, max(wall))

and the makespan is the whole `nxcc parallel-compile` process, planning and hashing included.
Prints the figures of each repetition and their ratio (target: <= 1.15).

Usage: bench/parallel_makespan.py [path/to/nxcc] [jobs] [ms per MiB] [repetitions]
Build first: cargo build --release
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from padded_models import SIM_COMPILE, lay_out_toolchain, sim_env, write_models

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NXCC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
JOBS = int(sys.argv[2]) if len(sys.argv) > 2 else os.cpu_count()
MS_PER_MB = int(sys.argv[3]) if len(sys.argv) > 3 else 100
REPS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
# Model sizes in MiB: varied, in no particular order.
SIZES = [7, 1, 5, 3, 8, 2, 6, 4, 7, 3, 5, 1, 6, 2, 8, 4]


def main():
    with tempfile.TemporaryDirectory() as d:
        models = os.path.join(d, "models")
        os.mkdir(models)
        write_models(models, SIZES)
        env = sim_env(MS_PER_MB)
        env["XDG_CACHE_HOME"] = os.path.join(d, "xdg")
        lay_out_toolchain(NXCC, os.path.join(models, "g01.pb"), os.path.join(d, "warm"), env, d)
        print(f"16 compiles, models {min(SIZES)}-{max(SIZES)} MiB, {MS_PER_MB} ms of CPU per MiB, "
              f"--jobs {JOBS}")
        print("| run | makespan s | sum of walls s | longest s | lower bound s | ratio |")
        print("|---|---|---|---|---|---|")
        worst = 0.0
        for rep in range(REPS):
            out = os.path.join(d, f"out{rep}")
            report = os.path.join(d, f"report{rep}.json")
            t = time.perf_counter()
            subprocess.run([NXCC, "parallel-compile", models, "--no_cache", "--jobs", str(JOBS),
                            "--output-dir", out, "--report", report] + SIM_COMPILE,
                           env=env, cwd=d, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            makespan = time.perf_counter() - t
            r = json.load(open(report))
            assert r["succeeded"] == len(SIZES), r
            walls = [c["wall_s"] for c in r["compiles"]]
            bound = max(sum(walls) / JOBS, max(walls))
            ratio = makespan / bound
            worst = max(worst, ratio)
            print(f"| {rep + 1} | {makespan:.3f} | {sum(walls):.3f} | {max(walls):.3f} | "
                  f"{bound:.3f} | {ratio:.3f} |")
        print(f"worst ratio {worst:.3f} (target: <= 1.15)")


if __name__ == "__main__":
    main()
