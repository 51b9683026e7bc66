#!/usr/bin/env python3
"""`nxcc parallel-compile --neuron-cache` under a memory budget against (a) its lower bound and
(b) a fixed worker count chosen the way `neuron_parallel_compile` chooses it, given the same
budget as RAM; and how many compiles the fixed count runs over the budget.

A framework cache of 24 entries (`neuronxcc-<version>/MODULE_*/` with a graph and
`compile_flags.json`, as the framework's extraction phase leaves them) is made fresh for every
run: the example model padded to 4-96 MiB (the padding is a field the module does not define, so
each still reads as the same module, and each rep's padding differs, so nothing is a cache hit).
The simulated tools hold memory that follows the graph (2 x the file, and more) and, with
`NXCC_SIM_WORK_MS_PER_MB=hlo2penguin:MS`, keep a CPU busy for a time that follows it too.

- nxcc: `--memory-budget B` and the default `--jobs` (the CPUs); its estimates come from an
  index of earlier compiles of graphs of the same sizes (one warm-up run, not measured, whose
  graphs differ from the measured ones), as they would on a machine that compiled before.
- nxcc -j W: the same, with `--jobs W` (the fixed count's cap) inside the budget.
- fixed: `--jobs W --no_cache` and no budget, W = ceil(B / M): `neuron_parallel_compile`
  takes ceil(RAM / 64 GiB) workers; here B stands for the RAM and M, for the 64 GiB a compile is
  assumed to need, is the median peak of the 24 compiles (from the warm-up).

The lower bound of nxcc's makespan (one compile per CPU, the default) is max(sum of walls /
CPUs, the longest wall, sum of (peak x wall) / B), each wall and peak from the same run's
`--report`; the runs with more workers than CPUs share the CPUs, so their walls bound nothing and
they are compared with nxcc's makespan of the same rep. A compile "ran over the
budget" when, at some instant while it ran, the peaks of the compiles running then added up to
more than B. (The simulated tools are never killed: the fixed count's makespan is the one it
would have if the out-of-memory killer had spared every compile that ran over.)

Usage: bench/neuron_cache_budget.py NXCC [--reps 3] [--budget-mib 320] [--ms-per-mib 20]
Build first: cargo build --release
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from padded_models import MODEL, sim_env, varint

SIZES = [96, 8, 64, 4, 80, 16, 48, 6, 88, 24, 12, 72, 40, 10, 56, 5, 32, 20, 92, 14, 44, 7, 60, 28]
VERSION = "2.24.5133.0+nxcc-sim"


def make_cache(root, tag):
    """A framework cache under root with one entry per size; tag makes the graphs distinct."""
    base = open(MODEL, "rb").read()
    vd = os.path.join(root, f"neuronxcc-{VERSION}")
    for i, mib in enumerate(SIZES):
        d = os.path.join(vd, f"MODULE_{tag}{i:02}+d41d8cd9")
        os.makedirs(d)
        seed = bytes((i * 31 + j + len(tag) * 7) % 251 for j in range(4096))
        pad = tag.encode() + seed * ((mib << 20) // 4096)
        with open(os.path.join(d, "model.hlo_module.pb"), "wb") as f:
            f.write(base + varint((1000 << 3) | 2) + varint(len(pad)) + pad)
        with open(os.path.join(d, "compile_flags.json"), "w") as f:
            f.write("[]")


def run(nxcc, cache, extra, report, env, cwd):
    t = time.perf_counter()
    subprocess.run([nxcc, "parallel-compile", "--neuron-cache", cache, "--allow-simulated",
                    "--report", report, *extra, "--", "--target", "trn2", "--toolchain", "sim"],
                   env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    makespan = time.perf_counter() - t
    r = json.load(open(report))
    assert r["succeeded"] == len(SIZES), r
    return makespan, r


def over_budget(r, budget):
    """Compiles during which the running compiles' peaks added up to more than budget, and the
    most in use at once (bytes)."""
    spans = [(a["start_s"], a["end_s"], (c["peak_rss_kb"] or 0) << 10)
             for c in r["compiles"] for a in c["attempts"]]
    worst, over = 0, 0
    for (s, e, _) in spans:
        starts = [s2 for (s2, _, _) in spans if s <= s2 < e] + [s]
        peak_here = max(sum(p for (s3, e3, p) in spans if s3 <= t < e3) for t in starts)
        worst = max(worst, peak_here)
        if peak_here > budget:
            over += 1
    return over, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nxcc")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget-mib", type=int, default=320)
    ap.add_argument("--ms-per-mib", type=int, default=20)
    a = ap.parse_args()
    nxcc = os.path.abspath(a.nxcc)
    budget = a.budget_mib << 20
    cpus = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as d:
        env = sim_env(a.ms_per_mib, drop=("NXCC_TOOLCHAIN", "NEURON_CC_FLAGS",
                                          "NEURON_COMPILE_CACHE_URL"))
        env["XDG_CACHE_HOME"] = os.path.join(d, "xdg")
        est = os.path.join(d, "estimates")
        # Warm-up (not measured): lays the simulated toolchain out, teaches the estimate index.
        warm = os.path.join(d, "warm")
        make_cache(warm, "w")
        _, r = run(nxcc, warm, ["--cache_dir", est, "--jobs", "1"], os.path.join(d, "warm.json"),
                   env, d)
        shutil.rmtree(warm)
        peaks = sorted((c["peak_rss_kb"] << 10) for c in r["compiles"])
        per_worker = statistics.median(peaks)
        workers = math.ceil(budget / per_worker)
        print(f"24 entries, graphs {min(SIZES)}-{max(SIZES)} MiB, peaks {peaks[0] >> 20}-"
              f"{peaks[-1] >> 20} MiB (median {per_worker / (1 << 20):.0f} MiB), "
              f"{a.ms_per_mib} ms of CPU per MiB, budget {a.budget_mib} MiB, {cpus} CPUs; "
              f"fixed count ceil({a.budget_mib} / {per_worker / (1 << 20):.0f}) = {workers}")
        print("| rep | run | makespan s | lower bound s | makespan / bound | / nxcc | "
              "compiles over budget | max MiB in use |")
        print("|---|---|---|---|---|---|---|---|")
        rows = []
        for rep in range(a.reps):
            res = {}
            budget_args = ["--cache_dir", est, "--memory-budget", f"{a.budget_mib}M"]
            configs = {
                "nxcc": budget_args,
                f"nxcc -j {workers}": budget_args + ["--jobs", str(workers)],
                f"fixed -j {workers}": ["--no_cache", "--jobs", str(workers)],
            }
            names = list(configs)
            order = names[rep % 3:] + names[:rep % 3]
            for k, who in enumerate(order):
                cache = os.path.join(d, f"c{rep}{k}")
                make_cache(cache, f"r{rep}c{k}")
                res[who] = run(nxcc, cache, configs[who], os.path.join(d, f"c{rep}{k}.json"),
                               env, d)
                shutil.rmtree(cache)
            base = res["nxcc"][0]
            for who in names:
                m, r = res[who]
                walls = [c["wall_s"] for c in r["compiles"]]
                mem = sum(((c["peak_rss_kb"] or 0) << 10) * c["wall_s"]
                          for c in r["compiles"]) / budget
                over, worst = over_budget(r, budget)
                if who == "nxcc":
                    # The bound of a schedule of these walls on the CPUs (one compile per CPU).
                    bound = max(sum(walls) / cpus, max(walls), mem)
                    shown = f"{bound:.2f} | {m / bound:.3f}"
                    rows.append((who, m / bound, 1.0, over))
                else:
                    shown = "- | -"
                    rows.append((who, None, m / base, over))
                print(f"| {rep + 1} | {who} | {m:.2f} | {shown} | {m / base:.3f} | "
                      f"{over} of 24 | {worst >> 20} |")
        med = lambda xs: sorted(xs)[len(xs) // 2]
        for who in names:
            mine = [x for x in rows if x[0] == who]
            bound = med([x[1] for x in mine]) if who == "nxcc" else None
            print(f"{who}: median makespan / bound {'-' if bound is None else f'{bound:.3f}'}, / nxcc "
                  f"{med([x[2] for x in mine]):.3f}, compiles over budget: median "
                  f"{med([x[3] for x in mine])}, most {max(x[3] for x in mine)} of 24")


if __name__ == "__main__":
    main()
