#!/usr/bin/env python3
"""32 framework processes compiling at once: through `nxcc shim` against calling the compiler
directly, measured in one run, the two alternated.

The compiler is tests/data/fake-compiler.sh holding HOLD MiB and keeping a CPU busy for WORK
seconds per compile (FAKE_COMPILER_HOLD_MB, FAKE_COMPILER_SLEEP, FAKE_COMPILER_BUSY=1). CALLERS
processes start at once, each in its own directory with its own copy of one of GRAPHS graphs
(caller i compiles graph i % GRAPHS), each running

    neuronx-cc compile --framework=XLA model.hlo_module.pb --target=trn2 --output model.neff

- direct: `neuronx-cc` is the compiler itself: CALLERS compiles at once;
- shim: `neuronx-cc` is `nxcc shim install DIR --compiler fake-compiler.sh` (memory budget auto),
  first on PATH; every run starts with no daemon and an empty cache (the first compile of the
  host), and the daemon is stopped after the run.

Wall time: from the first caller's start to the last caller's exit. Peak memory: the largest sum
of the resident memory of every process of the run (callers, compilers, the daemon — this
program is their subreaper, so none escapes), sampled every 10 ms. Compiles: the runs the fake
compiler recorded. Every caller's exit status is checked (0).

Usage: bench/shim_burst.py [path/to/nxcc] [pairs] [callers] [graphs] [hold MiB] [work s]
Build first: cargo build --release
"""
import ctypes
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NXCC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
PAIRS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
CALLERS = int(sys.argv[3]) if len(sys.argv) > 3 else 32
GRAPHS = int(sys.argv[4]) if len(sys.argv) > 4 else 4
HOLD_MB = int(sys.argv[5]) if len(sys.argv) > 5 else 128
WORK_S = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
FAKE = os.path.join(ROOT, "tests", "data", "fake-compiler.sh")
PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants():
    """Every process whose parent chain reaches this one."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    me, out = os.getpid(), []
    for pid in parent:
        p, seen = pid, 0
        while p in parent and p != me and seen < 64:
            p, seen = parent[p], seen + 1
        if p == me and pid != me:
            out.append(pid)
    return out


def rss_sum():
    total = 0
    for pid in descendants():
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_sum())
            time.sleep(0.01)


def stop_daemon(sock):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(b"POST /exit HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        while s.recv(4096):
            pass
        s.close()
    except OSError:
        pass
    # Reap every orphan handed to this subreaper (the daemon), so the next run starts clean.
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


def burst(world, mode, run_no):
    base = os.path.join(world, f"{mode}-{run_no}")
    os.makedirs(base)
    record = os.path.join(base, "record")
    env = dict(os.environ)
    env.update(
        FAKE_COMPILER_HOLD_MB=str(HOLD_MB),
        FAKE_COMPILER_SLEEP=str(WORK_S),
        FAKE_COMPILER_BUSY="1",
        FAKE_COMPILER_RECORD=record,
        NEURON_COMPILE_CACHE_URL=os.path.join(base, "cache"),
    )
    env.pop("NXCC_DAEMON_SOCKET", None)
    if mode == "shim":
        env["PATH"] = os.path.join(world, "shim") + ":" + env["PATH"]
        program = "neuronx-cc"
    else:
        program = FAKE
    dirs = []
    for i in range(CALLERS):
        d = os.path.join(base, f"rank{i}")
        os.makedirs(d)
        shutil.copy(os.path.join(world, f"g{i % GRAPHS}.pb"), os.path.join(d, "model.hlo_module.pb"))
        dirs.append(d)
    sampler = Sampler()
    sampler.start()
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [program, "compile", "--framework=XLA", "model.hlo_module.pb", "--target=trn2", "--output", "model.neff"],
            cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for d in dirs
    ]
    statuses = [p.wait() for p in procs]
    wall = time.monotonic() - start
    sampler.stop.set()
    sampler.join()
    if mode == "shim":
        stop_daemon(os.path.join(world, "d.sock"))
    bad = [s for s in statuses if s != 0]
    if bad:
        sys.exit(f"{mode}: {len(bad)} callers failed: {bad[:5]}")
    with open(record) as f:
        compiles = sum(1 for _ in f)
    return wall, sampler.peak, compiles


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        sys.exit("cannot become a subreaper")
    world = tempfile.mkdtemp(prefix="nxcc-shim-bench-")
    try:
        for g in range(GRAPHS):
            with open(os.path.join(world, f"g{g}.pb"), "w") as f:
                f.write(f"graph {g}\n" + "x" * (1000 * (g + 1)) + "\n")
        subprocess.run(
            [NXCC, "shim", "install", os.path.join(world, "shim"), "--compiler", FAKE,
             "--socket", os.path.join(world, "d.sock")],
            check=True, stdout=subprocess.DEVNULL,
        )
        results = {"direct": [], "shim": []}
        for n in range(PAIRS):
            order = ("direct", "shim") if n % 2 == 0 else ("shim", "direct")
            for mode in order:
                wall, peak, compiles = burst(world, mode, n)
                results[mode].append((wall, peak, compiles))
                print(f"pair {n + 1} {mode:6}  wall {wall:6.2f} s  peak {peak / 2**20:7.0f} MiB  compiles {compiles}")
        print(f"\n{CALLERS} callers, {GRAPHS} graphs, {HOLD_MB} MiB and {WORK_S} s of CPU per compile, {PAIRS} pairs (medians):")
        print("| | wall | peak memory (all processes) | real compiles |")
        print("|---|---|---|---|")
        med = {}
        for mode in ("direct", "shim"):
            rows = results[mode]
            w = statistics.median(r[0] for r in rows)
            p = statistics.median(r[1] for r in rows)
            c = statistics.median(r[2] for r in rows)
            med[mode] = (w, p)
            label = "the compiler directly" if mode == "direct" else "through nxcc shim"
            print(f"| {label} | {w:.2f} s | {p / 2**20:.0f} MiB | {c:.0f} |")
        ratios_w = [s[0] / d[0] for d, s in zip(results["direct"], results["shim"])]
        ratios_p = [s[1] / d[1] for d, s in zip(results["direct"], results["shim"])]
        print(f"\nshim / direct, pair by pair (median): wall {statistics.median(ratios_w):.2f}, "
              f"peak memory {statistics.median(ratios_p):.2f}")
    finally:
        shutil.rmtree(world, ignore_errors=True)


if __name__ == "__main__":
    main()
