#!/usr/bin/env python3
"""Driver overhead: `nxcc compile` of the example model with the simulated toolchain
(NXCC_SIM_WORK_MS=0) against a shell script that runs the same recorded tool command lines one
after another (the tools only: the floor any driver pays), measured alternately in one run.
Also reports nxcc's own peak RSS during a compile (the supervisor and the worker, from
wait4/getrusage of their processes, excluding the tools).

Each run is timed by bench/pairs.py's helper: wall time, and the CPU time of the process and
its children (nxcc's supervisor, worker and tools; bash and the tools).

Usage: bench/driver_overhead.py [path/to/nxcc] [runs]
Build first: cargo build --release
"""
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import pairs  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NXCC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 100
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb")


def main():
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"), NXCC_SIM_WORK_MS="*:0")
    env.pop("NXCC_SIM_RECORD", None)
    launch = os.path.join(tmp, "launch")
    os.makedirs(launch)
    args = [NXCC, "compile", MODEL, "--target", "trn2", "--toolchain", "sim", "--output", "out.neff"]
    # One recorded compile, keeping its work dir: the tool command lines and their inputs.
    record = os.path.join(tmp, "record.jsonl")
    subprocess.run(args + ["--temp-dir", os.path.join(tmp, "work")], cwd=launch, env=dict(env, NXCC_SIM_RECORD=record), check=True, stdout=subprocess.DEVNULL)
    calls = [json.loads(l) for l in open(record)]
    jobs = 6
    script = os.path.join(tmp, "replay.sh")
    with open(script, "w") as f:
        f.write("#!/bin/bash\nset -e\n")
        for c in calls:
            f.write(f"cd {shlex.quote(c['cwd'])} && {shlex.join(c['argv'])} >/dev/null\n")
    os.remove(os.path.join(launch, "out.neff"))

    def nxcc_once():
        wall, cpu, _peak, code = pairs.measure(args, cwd=launch, env=env)
        if code != 0:
            raise SystemExit(f"nxcc compile exited {code}")
        os.remove(os.path.join(launch, "out.neff"))
        return wall, cpu

    def replay_once():
        wall, cpu, _peak, code = pairs.measure(["/bin/bash", script], env=env)
        if code != 0:
            raise SystemExit(f"the replay exited {code}")
        return wall, cpu

    for _ in range(3):
        nxcc_once()
        replay_once()
    a, b = [], []
    for _ in range(RUNS):
        a.append(nxcc_once())
        b.append(replay_once())
    ma, mb = statistics.median(w for w, _ in a), statistics.median(w for w, _ in b)
    ca, cb = statistics.median(c for _, c in a), statistics.median(c for _, c in b)
    print(f"tools run: {len(calls)} ({', '.join(c['tool'] for c in calls)}); jobs: {jobs}")
    print(f"nxcc compile, whole process:     median {ma * 1e3:.2f} ms (cpu {ca * 1e3:.2f} ms)")
    print(f"shell replay of the tool lines:  median {mb * 1e3:.2f} ms (cpu {cb * 1e3:.2f} ms)")
    print(f"ratio {ma / mb:.2f}x; added {(ma - mb) * 1e3:.2f} ms in all, {(ma - mb) * 1e3 / jobs:.2f} ms per job")
    pw = statistics.median(x[0] / y[0] for x, y in zip(a, b))
    pc = statistics.median(x[1] / y[1] for x, y in zip(a, b))
    print(f"pair by pair: wall {pw:.2f}x, cpu {pc:.2f}x (cpu: the process and its children)")

    # nxcc's own peak RSS: the supervisor logs its own; the worker's is the in-process jobs'
    # figure (getrusage of the worker) in the log's metrics table. Tools are not nxcc.
    log = os.path.join(tmp, "rss.log")
    for _ in range(5):
        subprocess.run(args + ["--logfile", log], cwd=launch, env=env, check=True, stdout=subprocess.DEVNULL)
        os.remove(os.path.join(launch, "out.neff"))
    sup, work = [], []
    for line in open(log):
        if "nxcc supervisor peak RSS" in line:
            sup.append(int(line.split()[-2]))
        parts = line.split()
        if len(parts) >= 8 and parts[0] in ("Frontend", "StaticIOTranspose", "Kelper"):
            work.append(int(parts[5]))
    print(f"peak RSS: supervisor {max(sup) / 1024:.1f} MB, worker {max(work) / 1024:.1f} MB (max over 5 compiles)")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
