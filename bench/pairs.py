#!/usr/bin/env python3
"""Time whole processes from outside, alone or paired with a baseline: the timing tool the
benchmarks of BENCHMARKS.md use (standard library only).

    python3 bench/pairs.py [-n RUNS] [--warmup N] [--vs 'COMMAND_B'] -- COMMAND [ARG ...]

COMMAND (A) runs RUNS times (default 10) after WARMUP runs that are not counted (default 1).
With --vs, a second command (B: the baseline or the yardstick, one string split as a shell
splits words) runs in turn with it — A B A B ... — and the ratio A/B is taken pair by pair, so
that a machine whose speed drifts during the call still gives a meaningful ratio.

Each run: its wall time (a monotonic clock read just before the start and just after the child
is reaped), its user + system CPU time and its peak memory (the kernel's accounting of the
reaped child, `wait4`: the largest process among those it waited for; it cannot read below this
script's own, which the first line says). Standard input is empty;
standard output and error are thrown away (a command that needs a shell, a pipe or a
redirection is written as `sh -c '...'`). Every figure is printed as min, median and max: quote
the median; a wide spread says the machine was noisy.

Exit status: 0, or 1 when a run of a command did not exit 0 (its runs are still counted).
"""
import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time


def run_once(argv):
    """(wall s, cpu s, peak KiB, exit status) of one run of argv."""
    start = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - start
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, p.returncode


def spread(values, unit, scale=1.0, digits=3):
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
        print(f"  {len(failed)} of {len(runs)} runs did not exit 0 (exit statuses {sorted(set(failed))})")
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
        run_once(a)
        if b:
            run_once(b)
    runs_a, runs_b = [], []
    for _ in range(args.runs):
        runs_a.append(run_once(a))
        if b:
            runs_b.append(run_once(b))
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"{args.runs} runs{' in pairs' if b else ''} after {args.warmup} warm-up(s); "
          f"a peak cannot read below this script's own, {floor:.1f} MiB (a child starts as a "
          f"copy of it)")
    ok = report("A", a, runs_a)
    if b:
        ok = report("B", b, runs_b) and ok
        wall = [x[0] / y[0] for x, y in zip(runs_a, runs_b) if y[0] > 0]
        cpu = [x[1] / y[1] for x, y in zip(runs_a, runs_b) if y[1] > 0]
        print(f"A/B pair by pair: wall {spread(wall, '', 1, 3)}")
        if cpu:
            print(f"A/B pair by pair: cpu  {spread(cpu, '', 1, 3)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
