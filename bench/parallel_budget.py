#!/usr/bin/env python3
"""`nxcc parallel-compile` under a memory budget: makespan against its lower bound, two builds
interleaved in one run, and the budget checked against the recorded intervals.

12 simulated compiles of models padded to 3-24 MiB, `NXCC_SIM_WORK_MS_PER_MB=hlo2penguin:MS`
(CPU-bound work per MiB, so a compile's cost follows its model's size), no cache, so each
compile's estimate is the formula's: about 320 MiB + 4 x the file size, 332-416 MiB. With
`--memory-budget 778M` two compiles share the budget only when their models add up to at most
34 MiB; the four largest (18-24 MiB, estimates over half the budget) can never run beside each
other. (Under the earlier default estimate, 256 MiB + 4 x the file size, `--budget 650M` gives
the same pairs.) The lower bound is

    max(sum(wall) / J, max(wall), sum(wall of the compiles estimated over budget / 2))

(the last: those compiles run one after another whatever the order), each wall taken from the
same run's `--report`. The sizes are chosen so the bound can be reached: each large compile has
small ones that fit beside it. The makespan is the whole process, planning included. Every
attempt's recorded interval is checked: the estimates of the attempts running at any start add
up to at most the budget.

Usage: bench/parallel_budget.py NXCC [NXCC ...] [--reps N] [--ms-per-mib MS] [--budget 778M]
Build first: cargo build --release
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

from padded_models import SIM_COMPILE, lay_out_toolchain, sim_env, write_models

SIZES = [24, 5, 14, 3, 20, 10, 16, 6, 22, 12, 4, 18]
JOBS = 2


def run_once(nxcc, models, out, report, env, cwd, budget):
    t = time.perf_counter()
    subprocess.run([nxcc, "parallel-compile", models, "--no_cache", "--jobs", str(JOBS),
                    "--memory-budget", f"{budget >> 20}M", "--output-dir", out, "--report", report]
                   + SIM_COMPILE,
                   env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    makespan = time.perf_counter() - t
    r = json.load(open(report))
    assert r["succeeded"] == len(SIZES), r
    walls = [c["wall_s"] for c in r["compiles"]]
    est = [c["estimate"]["bytes"] for c in r["compiles"]]
    chain = sum(w for w, e in zip(walls, est) if 2 * e > budget)
    bound = max(sum(walls) / JOBS, max(walls), chain)
    # The budget, checked on the recorded intervals.
    spans = [(a["start_s"], a["end_s"], e) for c, e in zip(r["compiles"], est) for a in c["attempts"]]
    worst = 0
    for s, _, _ in spans:
        live = [e for (s2, e2, e) in spans if s2 <= s < e2]
        if len(live) > 1:
            worst = max(worst, sum(live))
    return makespan, sum(walls), chain, bound, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nxcc", nargs="+")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ms-per-mib", type=int, default=40)
    ap.add_argument("--budget", default="778M", help="MiB, with an M")
    a = ap.parse_args()
    budget = int(a.budget.rstrip("Mm")) << 20
    with tempfile.TemporaryDirectory() as d:
        models = os.path.join(d, "models")
        os.mkdir(models)
        write_models(models, SIZES)
        env = sim_env(a.ms_per_mib)
        builds = [os.path.abspath(n) for n in a.nxcc]
        for k, nxcc in enumerate(builds):
            env_k = dict(env, XDG_CACHE_HOME=os.path.join(d, f"xdg{k}"))
            lay_out_toolchain(nxcc, os.path.join(models, "g00.pb"), os.path.join(d, f"warm{k}"),
                              env_k, d)
        print(f"12 compiles, models {min(SIZES)}-{max(SIZES)} MiB, {a.ms_per_mib} ms of CPU per MiB, "
              f"--jobs {JOBS} --memory-budget {a.budget}")
        print("| build | run | makespan s | sum of walls s | over-half chain s | lower bound s | "
              "ratio | max MiB in use |")
        print("|---|---|---|---|---|---|---|---|")
        ratios = {n: [] for n in builds}
        for rep in range(a.reps):
            for k, nxcc in enumerate(builds):
                env_k = dict(env, XDG_CACHE_HOME=os.path.join(d, f"xdg{k}"))
                out = os.path.join(d, f"out{k}-{rep}")
                report = os.path.join(d, f"report{k}-{rep}.json")
                m, s, c, b, worst = run_once(nxcc, models, out, report, env_k, d, budget)
                ratios[nxcc].append(m / b)
                assert worst <= budget, f"budget exceeded: {worst} bytes"
                print(f"| {a.nxcc[k]} | {rep + 1} | {m:.3f} | {s:.3f} | {c:.3f} | {b:.3f} | "
                      f"{m / b:.3f} | {worst >> 20} |")
        for k, nxcc in enumerate(builds):
            r = sorted(ratios[nxcc])
            print(f"{a.nxcc[k]}: median ratio {r[len(r) // 2]:.3f}, worst {r[-1]:.3f} (goal <= 1.10)")


if __name__ == "__main__":
    main()
