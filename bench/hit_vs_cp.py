#!/usr/bin/env python3
"""A cache hit of a 100 MB model, whole process, against `cp` of its NEFF alone (the floor of a
hit whose model digest is remembered), and against a baseline build, alternated in one run.

    python3 bench/hit_vs_cp.py NXCC [RUNS] [BASELINE_NXCC]

The example model padded to 100 MiB (bench/padded_models.py) is written, left to settle past
the racy margin of remembered digests (2 s), and compiled once per build into that build's own
cache (`--toolchain sim`; the simulated NEFF of a 100 MiB model is about 12.5 MB). After a
second settling wait and two warm-up hits each (digests remembered), every round runs: the
hit (`nxcc compile big.pb --target trn2 --toolchain sim --cache_dir C --output out.neff`, the
output removed before each run, untimed), `cp` of the cached NEFF to a new file, and the
baseline's hit if given. Times by bench/pairs.py's helper (wall; CPU of the process and its
children); ratios of medians and pair by pair.
"""
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import padded_models  # noqa: E402
import pairs  # noqa: E402


def entry_neff(cache):
    for root, _dirs, files in os.walk(os.path.join(cache, "nxcc-v1")):
        if "model.neff" in files:
            return os.path.join(root, "model.neff")
    raise SystemExit(f"no entry in {cache}")


def main():
    nxcc = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    base = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-hit-", dir=os.path.join(pairs.ROOT, "target"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NXCC_SIM_")}
        env["XDG_CACHE_HOME"] = os.path.join(tmp, "xdg")
        padded_models.write_models(tmp, [100])
        os.rename(os.path.join(tmp, "g00.pb"), os.path.join(tmp, "big.pb"))
        time.sleep(2.5)
        builds = {"A": nxcc}
        if base:
            builds["B"] = base

        def hit_argv(exe, cache):
            return [exe, "compile", "big.pb", "--target", "trn2", "--toolchain", "sim",
                    "--cache_dir", cache, "--output", "out.neff"]

        for name, exe in builds.items():
            pairs.measure(hit_argv(exe, f"cache-{name}"), cwd=tmp, env=env)
        time.sleep(2.5)
        neff = entry_neff(os.path.join(tmp, "cache-A"))
        sides = [(f"hit {n}", hit_argv(exe, f"cache-{n}")) for n, exe in builds.items()]
        sides.append(("cp NEFF", ["cp", neff, "out.neff"]))
        times = {name: [] for name, _ in sides}
        out = os.path.join(tmp, "out.neff")
        for i in range(runs + 2):
            for name, argv in sides:
                if os.path.exists(out):
                    os.remove(out)
                wall, cpu, _peak, code = pairs.measure(argv, cwd=tmp, env=env)
                if code != 0:
                    raise SystemExit(f"{name} exited {code}")
                if i >= 2:
                    times[name].append((wall, cpu))
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {runs} rounds, "
              f"load average {os.getloadavg()[0]:.2f}; NEFF {os.path.getsize(neff) / 1e6:.1f} MB")
        med = {n: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
               for n, t in times.items()}
        for n, (w, c) in med.items():
            print(f"  {n:8s} wall median {w * 1e3:7.2f} ms  cpu median {c * 1e3:7.2f} ms")
        cp = times["cp NEFF"]
        for n in builds:
            t = times[f"hit {n}"]
            pw = statistics.median(a[0] / b[0] for a, b in zip(t, cp))
            print(f"  hit {n} / cp: wall {med[f'hit {n}'][0] / med['cp NEFF'][0]:.2f} "
                  f"(pair by pair {pw:.2f})")
        if base:
            a, b = times["hit A"], times["hit B"]
            print(f"  hit A / hit B: wall {statistics.median(x[0] / y[0] for x, y in zip(a, b)):.2f}"
                  f", cpu {statistics.median(x[1] / y[1] for x, y in zip(a, b)):.2f} (pair by pair)")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
