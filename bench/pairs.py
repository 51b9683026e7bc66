#!/usr/bin/env python3
"""Time whole processes from outside, alone or paired with a baseline: the timing tool of the
benchmarks in BENCHMARKS.md (standard-library Python and bench/peak.c, built on first use).

    python3 bench/pairs.py [-n RUNS] [--warmup N] [--vs 'COMMAND_B'] -- COMMAND [ARG ...]

COMMAND (A) runs RUNS times (default 10) after WARMUP runs that are not counted (default 1).
With --vs, a second command (B: the baseline or the yardstick, one string split as a shell
splits words) runs in turn with it — A B A B ... — and the ratio A/B is taken pair by pair, so
that a machine whose speed drifts during the call still gives a meaningful ratio.

Each run goes through bench/peak.c (compiled with `cc` into target/bench-tools/ the first time):
its wall time (a monotonic clock around fork and wait4), its user + system CPU time and its peak
memory (the kernel's accounting of the reaped child: the largest process among those it waited
for). Standard input is empty; standard output and error are thrown away (a command that needs a
shell, a pipe or a redirection is written as `sh -c '...'`). Every figure is printed as min,
median and max: quote the median; a wide spread says the machine was noisy.

As a module: `measure(argv, cwd=None, env=None)` gives one run's (wall s, cpu s, peak KiB, exit
status), for scripts that lay out their own runs.

Exit status: 0, or 1 when a run of a command did not exit 0 (its runs are still counted).
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SOURCE = os.path.join(ROOT, "bench", "peak.c")
HELPER = os.path.join(ROOT, "target", "bench-tools", "peak")


def helper():
    """bench/peak.c, compiled when missing or older than its source."""
    if not os.path.exists(HELPER) or os.path.getmtime(HELPER) < os.path.getmtime(SOURCE):
        os.makedirs(os.path.dirname(HELPER), exist_ok=True)
        subprocess.run(["cc", "-O2", "-o", HELPER, SOURCE], check=True)
    return HELPER


def measure(argv, cwd=None, env=None):
    """(wall s, cpu s, peak KiB, exit status) of one run of argv."""
    fd, out = tempfile.mkstemp(prefix="nxcc-bench-run-")
    os.close(fd)
    try:
        p = subprocess.run([helper(), out] + list(argv), cwd=cwd, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if p.returncode != 0:
            raise SystemExit(f"bench/peak could not run {shlex.join(argv)} (exit {p.returncode})")
        with open(out) as f:
            wall, cpu, peak, code = f.read().split()
        return float(wall), float(cpu), int(peak), int(code)
    finally:
        os.remove(out)


def spread(values, unit="", scale=1.0, digits=3):
    v = [x * scale for x in values]
    u = f" {unit}" if unit else ""
    return (f"min {min(v):.{digits}f}{u}, median {statistics.median(v):.{digits}f}{u}, "
            f"max {max(v):.{digits}f}{u}")


def report(name, argv, runs):
    walls, cpus, peaks, codes = zip(*runs)
    print(f"{name}: {shlex.join(argv)}")
    print(f"  wall  {spread(walls, 's')}")
    print(f"  cpu   {spread(cpus, 's')}")
    print(f"  peak  {spread(peaks, 'MiB', 1 / 1024, 1)}")
    failed = [c for c in codes if c != 0]
    if failed:
        print(f"  {len(failed)} of {len(runs)} runs did not exit 0 "
              f"(exit statuses {sorted(set(failed))})")
    return not failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--vs", help="the baseline command B, run in turn with A")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    a = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not a:
        ap.error("no COMMAND (give it after --)")
    b = shlex.split(args.vs) if args.vs else None
    for _ in range(args.warmup):
        measure(a)
        if b:
            measure(b)
    runs_a, runs_b = [], []
    for _ in range(args.runs):
        runs_a.append(measure(a))
        if b:
            runs_b.append(measure(b))
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"{args.runs} runs{' in pairs' if b else ''} after {args.warmup} warm-up(s), "
          f"load average {os.getloadavg()[0]:.2f}")
    ok = report("A", a, runs_a)
    if b:
        ok = report("B", b, runs_b) and ok
        wall = [x[0] / y[0] for x, y in zip(runs_a, runs_b) if y[0] > 0]
        cpu = [x[1] / y[1] for x, y in zip(runs_a, runs_b) if y[1] > 0]
        print(f"A/B pair by pair: wall {spread(wall)}")
        if cpu:
            print(f"A/B pair by pair: cpu  {spread(cpu)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
