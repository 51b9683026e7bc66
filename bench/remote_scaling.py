#!/usr/bin/env python3
"""Remote compiles as a fleet: makespan through 1, 2 and 3 `nxcc worker`s against a local
`parallel-compile --jobs` of the same kind of batch, and the overhead of one compile through the
remote path against the same compile here. A real BuildGrid 0.1.9 on loopback (the tests'
configuration); every run alternates the sides (local, 1, 2, 3 workers, local, ...).

The simulated tools wait rather than spin (NXCC_SIM_WAIT_MS): a compile costs time, not this
machine's CPU, so workers on one machine stand for workers on hosts of their own, and the figures
show the scheduling, not the two cores' contention.

1. Makespan: 24 distinct models per batch (fresh ones every run: nothing is an action-cache
   hit), each compile waiting 1 s in hlo2penguin. Local: `parallel-compile --jobs SLOTS
   --no_cache` (one host with SLOTS slots). Remote: `parallel-compile --jobs 24 --no_cache
   --remote` through K workers of `--max-concurrent SLOTS` each.
2. Overhead: one compile of a fresh model (no waiting), `nxcc compile` against
   `nxcc compile --remote` (a miss executed by one worker), medians.
3. With BASELINE=path/to/another/nxcc: the action-cache hit of a fresh `nxcc compile --remote`
   process (nothing but the client's path: connect, look up, download, check, publish), this
   nxcc against the baseline, alternated.

SECTIONS=makespan,overhead,hits picks what runs (default: all; hits only with BASELINE).

Needs target/buildgrid-venv (the remote tests provision it: cargo test --test remote).
Usage: bench/remote_scaling.py [path/to/nxcc] [repetitions] [slots per worker] [overhead runs]
Build first: cargo build --release
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

from remote import clean_env, model, start_server, stop

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NXCC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SLOTS = int(sys.argv[3]) if len(sys.argv) > 3 else 4
OVERHEAD_RUNS = int(sys.argv[4]) if len(sys.argv) > 4 else 20
MODELS = 24
WAIT = "hlo2penguin:1000"
COMMON = ["--target", "trn2", "--toolchain", "sim"]


def start_worker(d, url, name, env, slots):
    log = open(os.path.join(d, f"{name}.log"), "w")
    w = subprocess.Popen([NXCC, "worker", "--remote", url, "--toolchain", "sim", "--name", name,
                          "--allow-test-env", "--max-concurrent", str(slots)], cwd=d, env=env,
                         stdout=log, stderr=log, start_new_session=True)
    for _ in range(600):
        if "serving" in open(os.path.join(d, f"{name}.log")).read():
            return w
        time.sleep(0.05)
    raise SystemExit(f"worker {name} did not start")


def batch(d, tag):
    models = os.path.join(d, f"models-{tag}")
    os.mkdir(models)
    for i in range(MODELS):
        open(os.path.join(models, f"g{i:02}.pb"), "wb").write(model(f"{tag}-{i}", 64))
    return models


def parallel(d, env, tag, extra):
    models = batch(d, tag)
    t = time.perf_counter()
    o = subprocess.run([NXCC, "parallel-compile", models, "--no_cache", "--output-dir",
                        os.path.join(d, f"out-{tag}")] + extra + ["--"] + COMMON, cwd=d, env=env,
                       capture_output=True, text=True)
    took = time.perf_counter() - t
    if o.returncode != 0:
        raise SystemExit(f"{tag} failed:\n{o.stdout}\n{o.stderr}")
    return took


def makespan(d, env, url):
    wenv = dict(env, NXCC_SIM_WAIT_MS=WAIT)
    print(f"## Makespan: {MODELS} compiles waiting 1 s each; workers of --max-concurrent {SLOTS}")
    print(f"| run | local --jobs {SLOTS} s | 1 worker s | 2 workers s | 3 workers s |")
    print("|---|---|---|---|---|")
    rows = []
    for rep in range(REPS):
        row = [parallel(d, wenv, f"l{rep}", ["--jobs", str(SLOTS)])]
        for k in (1, 2, 3):
            workers = [start_worker(d, url, f"r{rep}k{k}w{i}", env, SLOTS) for i in range(k)]
            try:
                row.append(parallel(d, wenv, f"r{rep}k{k}", ["--jobs", str(MODELS), "--remote", url]))
            finally:
                for w in workers:
                    stop(w, 10)
        rows.append(row)
        print(f"| {rep + 1} | " + " | ".join(f"{x:.2f}" for x in row) + " |")
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print("| median | " + " | ".join(f"{x:.2f}" for x in med) + " |")
    print("| ratio to local | 1.00 | " + " | ".join(f"{x / med[0]:.2f}" for x in med[1:]) + " |")
    ideal = MODELS / SLOTS
    print(f"(ideal: local {ideal:.1f} s; k workers {ideal:.1f}/k s)\n")


def overhead(d, env, url):
    print(f"## One compile, local against remote (a miss run by one worker), {OVERHEAD_RUNS} runs each, interleaved")
    w = start_worker(d, url, "ov", env, 1)
    local_ms, remote_ms = [], []
    try:
        for i in range(OVERHEAD_RUNS):
            for side in ("local", "remote"):
                name = f"ov-{side}-{i}.pb"
                open(os.path.join(d, name), "wb").write(model(f"ov-{side}-{i}"))
                extra = ["--remote", url] if side == "remote" else []
                t = time.perf_counter()
                subprocess.run([NXCC, "compile", name, "--output", f"ov-{side}-{i}.neff"] + COMMON
                               + extra, cwd=d, env=env, check=True, stdout=subprocess.DEVNULL)
                (remote_ms if side == "remote" else local_ms).append((time.perf_counter() - t) * 1000)
    finally:
        stop(w, 10)
    lm, rm = statistics.median(local_ms), statistics.median(remote_ms)
    print("| compile | median ms | p90 ms |")
    print("|---|---|---|")
    for label, v in (("local", local_ms), ("remote (miss)", remote_ms)):
        s = sorted(v)
        print(f"| {label} | {statistics.median(v):.0f} | {s[int(0.9 * (len(s) - 1))]:.0f} |")
    print(f"overhead of the remote path: {rm - lm:.0f} ms per compile ({rm / lm:.2f} x)\n")


def hits(d, env, url, baseline, runs=100):
    print(f"## Action-cache hit of a fresh process, {runs} runs each, alternated with the baseline")
    open(os.path.join(d, "hit.pb"), "wb").write(model("hit"))
    w = start_worker(d, url, "hit", env, 1)
    try:
        subprocess.run([NXCC, "compile", "hit.pb", "--output", "hit.neff", "--remote", url]
                       + COMMON, cwd=d, env=env, check=True, stdout=subprocess.DEVNULL)
    finally:
        stop(w, 10)
    times = {NXCC: [], baseline: []}
    for _ in range(runs):
        for exe in (baseline, NXCC):
            t = time.perf_counter()
            o = subprocess.run([exe, "compile", "hit.pb", "--output", "hit.neff", "--remote", url]
                               + COMMON, cwd=d, env=env, check=True, capture_output=True, text=True)
            times[exe].append((time.perf_counter() - t) * 1000)
            assert "Using a remote cached neff" in o.stdout, o.stdout
    print("| nxcc | p50 ms | p90 ms |")
    print("|---|---|---|")
    for label, exe in (("baseline", baseline), ("this", NXCC)):
        v = sorted(times[exe])
        print(f"| {label} | {statistics.median(v):.1f} | {v[int(0.9 * (len(v) - 1))]:.1f} |")
    ratio = statistics.median(times[NXCC]) / statistics.median(times[baseline])
    print(f"ratio of medians (this / baseline): {ratio:.2f}\n")


def main():
    with tempfile.TemporaryDirectory() as d:
        env = clean_env(d)
        server, url = start_server(d)
        try:
            # Warm up: lay the simulated toolchain out, one remote compile (not measured).
            w = start_worker(d, url, "warm", env, 1)
            open(os.path.join(d, "warm.pb"), "wb").write(model("warm"))
            subprocess.run([NXCC, "compile", "warm.pb", "--output", "warm.neff", "--remote", url]
                           + COMMON, cwd=d, env=env, check=True, stdout=subprocess.DEVNULL)
            stop(w, 10)
            sections = os.environ.get("SECTIONS", "makespan,overhead,hits").split(",")
            if "makespan" in sections:
                makespan(d, env, url)
            if "overhead" in sections:
                overhead(d, env, url)
            baseline = os.environ.get("BASELINE")
            if "hits" in sections and baseline:
                hits(d, env, url, os.path.abspath(baseline))
        finally:
            stop(server)


if __name__ == "__main__":
    main()
