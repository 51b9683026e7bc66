#!/usr/bin/env python3
"""The daemon's `python3` probe for an installed toolchain package: how often it runs and what a
request pays for it, a build against a baseline, alternated in one run.

    python3 bench/daemon_probe.py NXCC BASELINE_NXCC [RUNS]

Without `--toolchain` or NXCC_TOOLCHAIN a compile looks for an installed `neuronxcc` package by
asking `python3`. Here `python3` (first on the daemons' PATH) is a shell script that counts its
calls and names a simulated toolchain laid out as a package's `neuronxcc/starfish/bin`; the
compile fails in its worker (the layout is not a real package: its Frontend needs the real
compiler), after the request was keyed for the cache. Each build runs its own daemon; requests
(`nxcc compile --daemon MODEL --target trn2 --cache_dir C`) alternate between the two. Reported:
python3's calls per request and the median wall time of a request (a fresh client process).
"""
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb")


def main():
    builds = {"A": os.path.abspath(sys.argv[1]), "B": os.path.abspath(sys.argv[2])}
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-probe-", dir=os.path.join(ROOT, "target"))
    daemons = []
    try:
        starfish = os.path.join(tmp, "site", "neuronxcc", "starfish")
        subprocess.run([builds["A"], "toolchain", "sim", starfish], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fakebin = os.path.join(tmp, "fakebin")
        os.makedirs(fakebin)
        python = os.path.join(fakebin, "python3")
        with open(python, "w") as f:
            f.write(f"#!/bin/sh\necho x >> \"$NXCC_BENCH_ASKED\"\necho {starfish}/bin\n")
        os.chmod(python, 0o755)
        time.sleep(2.5)  # older than the racy margin, as an installed package is
        env = {k: v for k, v in os.environ.items() if not k.startswith("NXCC_")}
        env.update(PATH=f"{fakebin}:{env.get('PATH', '/usr/bin:/bin')}",
                   XDG_CACHE_HOME=os.path.join(tmp, "xdg"))
        asked, sockets = {}, {}
        for name, exe in builds.items():
            d = os.path.join(tmp, f"d{name}")
            os.makedirs(d, mode=0o700)
            asked[name] = os.path.join(tmp, f"asked-{name}")
            sockets[name] = os.path.join(d, "s")
            daemons.append(subprocess.Popen(
                [exe, "daemon", "--socket", sockets[name], "--log-file", os.path.join(d, "log")],
                env=dict(env, NXCC_BENCH_ASKED=asked[name]), stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        deadline = time.time() + 30
        while not all(os.path.exists(s) for s in sockets.values()):
            if time.time() > deadline:
                raise SystemExit("a daemon did not start")
            time.sleep(0.05)
        times = {n: [] for n in builds}
        for i in range(runs + 2):
            for name, exe in builds.items():
                if i == 2:
                    open(asked[name], "w").close()
                t = time.perf_counter()
                subprocess.run([exe, "compile", "--daemon", MODEL, "--target", "trn2",
                                "--cache_dir", os.path.join(tmp, f"cache-{name}"),
                                "--output", os.path.join(tmp, f"out-{name}.neff")],
                               cwd=tmp, env=dict(env, NXCC_DAEMON_SOCKET=sockets[name]),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if i >= 2:
                    times[name].append(time.perf_counter() - t)
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {runs} requests per build, "
              f"alternated, load average {os.getloadavg()[0]:.2f}")
        for name, exe in builds.items():
            calls = sum(1 for _ in open(asked[name]))
            print(f"  {name} {exe}: python3 asked {calls / runs:.2f} times per request; "
                  f"request median {statistics.median(times[name]) * 1e3:.2f} ms")
        a, b = times["A"], times["B"]
        print(f"  A/B pair by pair: wall median {statistics.median(x / y for x, y in zip(a, b)):.2f}")
    finally:
        for p in daemons:
            p.send_signal(signal.SIGTERM)
        for p in daemons:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
