#!/usr/bin/env python3
"""What the model's private snapshot costs: compiles of a 100 MiB and a 2 GB model by this build
against a baseline build without the snapshot, alternated in one run.

    python3 bench/snapshot_cost.py NXCC BASELINE_NXCC [ROUNDS]

The example model is padded to 100 MiB and to 2.0 GB (bench/padded_models.py; the simulated
tools refuse a model past 2 GiB), written into a directory under target/ — the file system the
snapshots are made on, since they go where the work directories go (the launch directory) — and
left past the racy margin of remembered digests (2 s).

What the snapshot adds is nxcc's own work around the tools, so the compiler is one that costs
nothing: `parallel-compile M --compiler C`, where C writes its output and reads nothing (the
external-compiler engine; its argv names the snapshot with this build, the model with the
baseline). Each round runs, alternating the builds:

- `miss`: into a cache made for the run (removed, untimed, after it) — the model keyed (hashed),
  the compile, the entry stored; with the snapshot, also the kernel's copy and the snapshot
  hashed again before the entry is stored;
- `no cache`: `--no_cache` — the kernel's copy alone;
- `hit`: into a cache that has the compile — no snapshot is taken on a hit;
- the copy's floor: `cp --reflink=never M copy` (removed, untimed, after it).

The simulated toolchain's own compile of the 100 MiB model (`nxcc compile M --target trn2
--toolchain sim --cache_dir C`, a miss) is run too, for the scale of a whole compile. Times by
bench/pairs.py's helper (wall; CPU of the process and its children); each build's median, and the
ratio of the two builds taken pair by pair (median) with the difference of their wall times.
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

# A compiler that writes its output and reads nothing.
COMPILER = """#!/bin/sh
for a; do [ "$prev" = --output ] && out=$a; prev=$a; done
printf 'FAKE-NEFF' > "$out"
"""


def external_argv(exe, model, compiler, cache):
    argv = [exe, "parallel-compile", model, "--output-dir", "out", "--compiler", compiler]
    argv += ["--cache_dir", cache] if cache else ["--no_cache"]
    return argv + ["--", "--target", "trn2"]


def sim_argv(exe, model, cache):
    return [exe, "compile", model, "--target", "trn2", "--toolchain", "sim", "--output",
            "out.neff", "--cache_dir", cache]


def run(argv, tmp, env):
    wall, cpu, _peak, code = pairs.measure(argv, cwd=tmp, env=env)
    if code != 0:
        raise SystemExit(f"exit {code}: {' '.join(argv)}")
    return wall, cpu


def fresh(tmp, name):
    """A path under tmp that does not exist (removed first)."""
    p = os.path.join(tmp, name)
    if os.path.isdir(p):
        shutil.rmtree(p)
    elif os.path.exists(p):
        os.remove(p)
    return p


def rounds_of(model, builds, rounds, tmp, env, compiler, sim):
    """{side: [(wall, cpu)]} for `rounds` rounds on `model`."""
    times = {}
    for name, exe in builds.items():
        run(external_argv(exe, model, compiler, f"hit-{name}"), tmp, env)

    def side(label, argv):
        times.setdefault(label, []).append(run(argv, tmp, env))

    for _ in range(rounds):
        for name, exe in builds.items():
            side(f"miss {name}", external_argv(exe, model, compiler, fresh(tmp, "miss")))
            side(f"no cache {name}", external_argv(exe, model, compiler, None))
            side(f"hit {name}", external_argv(exe, model, compiler, f"hit-{name}"))
            if sim:
                side(f"sim miss {name}", sim_argv(exe, model, fresh(tmp, "miss")))
        side("cp --reflink=never", ["cp", "--reflink=never", model, fresh(tmp, "copy")])
    for name in builds:
        shutil.rmtree(os.path.join(tmp, f"hit-{name}"))
    return times


def report(label, times, sides):
    print(f"{label}:")
    for side, t in times.items():
        w = statistics.median(x for x, _ in t)
        c = statistics.median(y for _, y in t)
        print(f"  {side:20s} wall median {w:8.3f} s  cpu median {c:8.3f} s")
    for side in sides:
        a, b = times[f"{side} A"], times[f"{side} B"]
        pw = statistics.median(x[0] / y[0] for x, y in zip(a, b))
        pc = statistics.median(x[1] / y[1] for x, y in zip(a, b))
        extra = statistics.median(x[0] - y[0] for x, y in zip(a, b))
        print(f"  {side:8s} A/B pair by pair: wall {pw:.3f}, cpu {pc:.3f}; "
              f"A - B wall {extra:+.3f} s")


def main():
    nxcc, base = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-snapshot-", dir=os.path.join(pairs.ROOT, "target"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NXCC_SIM_")}
        env["XDG_CACHE_HOME"] = os.path.join(tmp, "xdg")
        compiler = os.path.join(tmp, "compiler")
        with open(compiler, "w") as f:
            f.write(COMPILER)
        os.chmod(compiler, 0o755)
        padded_models.write_models(tmp, [100, 1908])
        time.sleep(2.5)
        builds = {"A": nxcc, "B": base}
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.2f}; A = {nxcc}, B = {base}")
        for model, sim in (("g00.pb", True), ("g01.pb", False)):
            size = os.path.getsize(os.path.join(tmp, model))
            times = rounds_of(model, builds, rounds, tmp, env, compiler, sim)
            sides = ["miss", "no cache", "hit"] + (["sim miss"] if sim else [])
            report(f"{size / 1e6:.0f} MB model, {rounds} rounds", times, sides)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
