#!/usr/bin/env python3
"""Remote compiles through a real BuildGrid 0.1.9 on loopback, against local baselines measured
in the same run, interleaved.

1. Makespan: 16 simulated compiles of 400 ms of CPU each (NXCC_SIM_WORK_MS=hlo2penguin:400;
   16 distinct models, fresh ones each repetition so that nothing is an action-cache hit),
   through two `nxcc worker`s on this machine (`parallel-compile --jobs 16 --remote`), against a
   local `parallel-compile --jobs 2` of the same kind of batch. Goal: remote <= 1.15 x local.
2. Action-cache hit latency of a fresh `nxcc compile --remote` process (no local cache), p50 and
   p99, against a local compile-cache hit (`--cache_dir`) of a fresh process. Goal: p50 <= 15 ms.
3. Bytes uploaded for a 100 MiB model compiled twice remotely with different flags (the model is
   uploaded once): from the compiles' logs (`Uploaded N blobs (B bytes)`).

Needs target/buildgrid-venv (the remote tests provision it: cargo test --test remote).
Usage: bench/remote.py [path/to/nxcc] [repetitions] [hits] [slots per worker]
Build first: cargo build --release
"""
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from padded_models import varint

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NXCC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
HITS = int(sys.argv[3]) if len(sys.argv) > 3 else 50
# Leases each worker holds at once (its --max-concurrent).
SLOTS = int(sys.argv[4]) if len(sys.argv) > 4 else 2
BGD = os.path.join(ROOT, "target", "buildgrid-venv", "bin", "bgd")
MODEL = open(os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb"), "rb").read()
COMMON = ["--target", "trn2", "--toolchain", "sim"]


def model(tag, pad=0):
    payload = tag.encode() + b"\x5a" * pad
    return MODEL + varint((1000 << 3) | 2) + varint(len(payload)) + payload


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def clean_env(d):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NXCC_SIM_")}
    env.pop("NXCC_TOOLCHAIN", None)
    env["XDG_CACHE_HOME"] = os.path.join(d, "xdg")
    return env


def start_server(d):
    port = free_port()
    cfg = open(os.path.join(ROOT, "tests", "data", "buildgrid", "config.yml")).read()
    cfg = cfg.replace("PORT", str(port)).replace("SCHEDULER_DB", os.path.join(d, "queue.db"))
    path = os.path.join(d, "config.yml")
    open(path, "w").write(cfg)
    log = open(os.path.join(d, "server.log"), "w")
    p = subprocess.Popen([BGD, "server", "start", path], cwd=d, stdout=log, stderr=log,
                         start_new_session=True)
    url = f"grpc://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        # Ready when a remote-cache compile of nothing reaches it: probe with a TCP connect.
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            time.sleep(1.0)
            return p, url
        except OSError:
            time.sleep(0.2)
    raise SystemExit("BuildGrid did not start; see " + os.path.join(d, "server.log"))


def stop(p, grace=5):
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(grace)
    except Exception:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def start_worker(d, url, name, env):
    log = open(os.path.join(d, f"{name}.log"), "w")
    w = subprocess.Popen([NXCC, "worker", "--remote", url, "--toolchain", "sim", "--name", name,
                          "--max-concurrent", str(SLOTS)], cwd=d, env=env, stdout=log, stderr=log,
                         start_new_session=True)
    for _ in range(300):
        if "serving" in open(os.path.join(d, f"{name}.log")).read():
            return w
        time.sleep(0.05)
    raise SystemExit(f"worker {name} did not start")


def batch(d, tag):
    models = os.path.join(d, f"models-{tag}")
    os.mkdir(models)
    for i in range(16):
        open(os.path.join(models, f"g{i:02}.pb"), "wb").write(model(f"{tag}-{i}", 64))
    return models


def main():
    with tempfile.TemporaryDirectory() as d:
        env = clean_env(d)
        server, url = start_server(d)
        wenv = dict(env, NXCC_SIM_WORK_MS="hlo2penguin:400")
        workers = [start_worker(d, url, n, wenv) for n in ("w1", "w2")]
        try:
            # Warm up: lay the simulated toolchain out, one remote compile (not measured).
            open(os.path.join(d, "warm.pb"), "wb").write(model("warm"))
            subprocess.run([NXCC, "compile", "warm.pb", "--output", "warm.neff", "--remote", url]
                           + COMMON, cwd=d, env=env, check=True, stdout=subprocess.DEVNULL)
            print(f"## Makespan: 16 compiles of 400 ms CPU each; 2 workers, --max-concurrent {SLOTS} each")
            print("| run | local --jobs 2 s | remote, 2 workers s | ratio |")
            print("|---|---|---|---|")
            ratios = []
            for rep in range(REPS):
                local_models = batch(d, f"l{rep}")
                t = time.perf_counter()
                subprocess.run([NXCC, "parallel-compile", local_models, "--no_cache", "--jobs", "2",
                                "--output-dir", os.path.join(d, f"lout{rep}"), "--"] + COMMON,
                               cwd=d, env=wenv, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                local = time.perf_counter() - t
                remote_models = batch(d, f"r{rep}")
                t = time.perf_counter()
                o = subprocess.run([NXCC, "parallel-compile", remote_models, "--no_cache", "--jobs",
                                    "16", "--remote", url, "--output-dir",
                                    os.path.join(d, f"rout{rep}"), "--"] + COMMON, cwd=d, env=env,
                                   capture_output=True, text=True)
                if o.returncode != 0:
                    logs = "".join(open(os.path.join(d, f"{n}.log")).read() for n in ("w1", "w2"))
                    raise SystemExit(f"remote batch failed:\n{o.stdout}\n{o.stderr}\n{logs}")
                remote = time.perf_counter() - t
                ratios.append(remote / local)
                print(f"| {rep + 1} | {local:.2f} | {remote:.2f} | {remote / local:.2f} |")
            print(f"median ratio {statistics.median(ratios):.2f} (goal <= 1.15)\n")

            print(f"## Hit latency of a fresh process, {HITS} runs each, interleaved")
            open(os.path.join(d, "hit.pb"), "wb").write(model("hit"))
            subprocess.run([NXCC, "compile", "hit.pb", "--output", "hit.neff", "--remote", url]
                           + COMMON, cwd=d, env=env, check=True, stdout=subprocess.DEVNULL)
            cache = os.path.join(d, "local-cache")
            subprocess.run([NXCC, "compile", "hit.pb", "--output", "hitl.neff", "--cache_dir", cache]
                           + COMMON, cwd=d, env=env, check=True, stdout=subprocess.DEVNULL)
            remote_ms, local_ms = [], []
            for _ in range(HITS):
                t = time.perf_counter()
                o = subprocess.run([NXCC, "compile", "hit.pb", "--output", "hit.neff", "--remote", url]
                                   + COMMON, cwd=d, env=env, check=True, capture_output=True, text=True)
                remote_ms.append((time.perf_counter() - t) * 1000)
                assert "Using a remote cached neff" in o.stdout, o.stdout
                t = time.perf_counter()
                o = subprocess.run([NXCC, "compile", "hit.pb", "--output", "hitl.neff", "--cache_dir",
                                    cache] + COMMON, cwd=d, env=env, check=True, capture_output=True,
                                   text=True)
                local_ms.append((time.perf_counter() - t) * 1000)
                assert "Using a cached neff" in o.stdout, o.stdout

            def pct(v, q):
                v = sorted(v)
                return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]
            print("| hit | p50 ms | p99 ms |")
            print("|---|---|---|")
            print(f"| remote action cache (--remote) | {pct(remote_ms, 0.5):.1f} | {pct(remote_ms, 0.99):.1f} |")
            print(f"| local compile cache (--cache_dir) | {pct(local_ms, 0.5):.1f} | {pct(local_ms, 0.99):.1f} |")
            print("(goal: remote p50 <= 15 ms)\n")

            print("## Bytes uploaded: a 100 MiB model compiled twice with different flags")
            open(os.path.join(d, "big.pb"), "wb").write(model("big", 100 << 20))
            print("| compile | bytes uploaded | blobs |")
            print("|---|---|---|")
            for i, extra in enumerate([[], ["-O1"]]):
                logf = os.path.join(d, f"big{i}.log")
                subprocess.run([NXCC, "compile", "big.pb", "--output", f"big{i}.neff", "--remote", url,
                                "--logfile", logf] + COMMON + extra, cwd=d, env=env, check=True,
                               stdout=subprocess.DEVNULL)
                m = re.search(r"Uploaded (\d+) blobs \((\d+) bytes\)", open(logf).read())
                print(f"| {' '.join(['default'] + extra)} | {int(m.group(2))} | {m.group(1)} |")
        finally:
            for w in workers:
                stop(w, 10)
            stop(server)


if __name__ == "__main__":
    main()
