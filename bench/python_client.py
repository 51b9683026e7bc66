#!/usr/bin/env python3
"""A cache hit through the Python client (`import nxcc`, python/nxcc) from a running Python
process, against what a framework does today: start a fresh `nxcc compile` process that hits its
own cache (and, for reference, a fresh `nxcc compile --daemon` process). Figures in BENCHMARKS.md.

The same compile each time (the example model, --target trn2, the simulated toolchain with no
injected work). A daemon of the build under test is started on a socket in a temporary
directory, with its own cache; the fresh processes hit a cache of their own. Both are filled by a
first compile, then left 2 s so that the model's digest is trusted by its stat identity (as it is
for any model compiled again), and the modes alternate round by round (the order rotating): the
client's `compile()` timed in this process, the fresh processes timed from `subprocess.run` to
their exit, as a framework's compile hook starts the compiler. The ratio is taken round by round;
medians of ratios are quoted.

Usage: bench/python_client.py [path/to/nxcc] [rounds]
Build first: cargo build --release
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import nxcc  # noqa: E402

NXCC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 300
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb")
ARGV = ["mlp.hlo_module.pb", "--target", "trn2", "--toolchain", "sim", "--output", "out.neff"]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-")
    daemon = None
    try:
        run = os.path.join(tmp, "run")
        os.mkdir(run, 0o700)
        sock = os.path.join(run, "d.sock")
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"), NXCC_SIM_WORK_MS="*:0")
        for k in ("NXCC_TOOLCHAIN", "NXCC_DAEMON_SOCKET", "NEURON_COMPILE_CACHE_URL"):
            env.pop(k, None)
        os.environ.update({k: v for k, v in env.items() if k.startswith("NXCC_SIM")})
        dirs = {m: os.path.join(tmp, m) for m in ("client", "process", "daemon-process")}
        for d in dirs.values():
            os.mkdir(d)
            shutil.copy(MODEL, d)
        daemon = subprocess.Popen(
            [NXCC, "daemon", "--socket", sock, "--log-file", os.path.join(tmp, "d.log"),
             "--cache_dir", os.path.join(tmp, "daemon-cache"), "--allow-test-env"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                client = nxcc.connect(sock)
                break
            except nxcc.DaemonUnavailable:
                if time.monotonic() > deadline:
                    raise SystemExit("no daemon answered on " + sock)
                time.sleep(0.05)
        fresh = [NXCC, "compile"] + ARGV + ["--cache_dir", os.path.join(tmp, "process-cache")]
        through = [NXCC, "compile", "--daemon"] + ARGV
        denv = dict(env, NXCC_DAEMON_SOCKET=sock)

        def client_hit():
            r = client.compile(ARGV, cwd=dirs["client"])
            assert r.ok, r

        def process_hit():
            subprocess.run(fresh, cwd=dirs["process"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True)

        def daemon_process_hit():
            subprocess.run(through, cwd=dirs["daemon-process"], env=denv,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

        modes = [("client", client_hit), ("process", process_hit), ("daemon-process", daemon_process_hit)]
        for _, f in modes:
            f()  # fills the caches
        time.sleep(2.1)  # past the racy margin: the model's digest is trusted from now on
        for _, f in modes:
            f()
        assert client.compile(ARGV, cwd=dirs["client"]).cache == "hit"
        times = {m: [] for m, _ in modes}
        for i in range(ROUNDS):
            order = modes[i % 3:] + modes[: i % 3]
            for name, f in order:
                t = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - t)
        base = times["process"]
        print(f"## a cache hit, {ROUNDS} rounds alternated ({NXCC})")
        print("| mode | p50 | p90 | / fresh process (median of rounds) |")
        print("|---|---|---|---|")
        labels = {
            "client": "`nxcc.connect().compile(argv)` from a running Python process",
            "process": "a fresh `nxcc compile` process (subprocess.run)",
            "daemon-process": "a fresh `nxcc compile --daemon` process (subprocess.run)",
        }
        for name, _ in modes:
            xs = times[name]
            ratio = statistics.median(a / b for a, b in zip(xs, base))
            print(f"| {labels[name]} | {pct(xs, 0.5) * 1e3:.2f} ms | {pct(xs, 0.9) * 1e3:.2f} ms | {ratio:.2f}× |")
        client.close()
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
