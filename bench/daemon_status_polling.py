#!/usr/bin/env python3
"""Cache-hit latency through the nxcc daemon while clients poll GET /v1/status, beside the same
daemon unpolled, in one run with the two conditions alternating.

One daemon serves a compile cache holding ENTRIES entries (one real entry, compiled first, and
copies of it under other keys, so that anything that walks the cache has that much to walk).
Then ROUNDS rounds, each: RUNS cache-hit compiles (POST /v1/compile read to its `done`) with no
poller, then RUNS with POLLERS processes each sending GET /v1/status one after another, pausing
INTERVAL ms between requests (0: back to back). Prints the p50 and p90 of both and their ratio,
and how many status answers the pollers got.

Usage: bench/daemon_status_polling.py [--nxcc PATH] [--entries N] [--runs N] [--rounds N]
                                      [--pollers N] [--interval MS]
Build first: cargo build --release
"""
import argparse
import hashlib
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_latency import ROOT, compile_args, pct, read_response  # noqa: E402

STATUS = b"GET /v1/status HTTP/1.1\r\nHost: nxcc\r\nConnection: close\r\n\r\n"


def request(sock, raw):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(raw)
    status, body = read_response(s)
    s.close()
    return status, body


def v1_hit(sock, wd, cache_dir):
    body = json.dumps({"argv": compile_args(cache_dir), "working_directory": wd}).encode()
    raw = (f"POST /v1/compile HTTP/1.1\r\nHost: nxcc\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    status, events = request(sock, raw)
    done = json.loads(events.decode().strip().splitlines()[-1])
    assert status == 200 and done["exit_status"] == 0 and done["cache"] == "hit", done


def poller(sock, interval_s, go, stop, count):
    while not stop.is_set():
        go.wait()
        if stop.is_set():
            return
        status, _ = request(sock, STATUS)
        assert status == 200, status
        with count.get_lock():
            count.value += 1
        if interval_s > 0:
            time.sleep(interval_s)


def fill(cache_dir, n):
    """Copy the cache's one entry under n-1 other keys."""
    root = os.path.join(cache_dir, "nxcc-v1")
    entries = [os.path.join(root, s, k) for s in os.listdir(root) if len(s) == 2
               for k in os.listdir(os.path.join(root, s)) if not k.endswith(".lock")]
    assert len(entries) == 1, entries
    src = entries[0]
    with open(os.path.join(src, "meta.json")) as f:
        meta = json.load(f)
    for i in range(n - 1):
        key = hashlib.sha256(f"copy-{i}".encode()).hexdigest()
        dst = os.path.join(root, key[:2], key)
        shutil.copytree(src, dst)
        meta["key"] = key
        with open(os.path.join(dst, "meta.json"), "w") as f:
            json.dump(meta, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nxcc", default=os.path.join(ROOT, "target", "release", "nxcc"))
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--pollers", type=int, default=4)
    ap.add_argument("--interval", type=float, default=10.0, help="ms between one poller's requests")
    o = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="nxcc-bench-")
    cache_dir = os.path.join(tmp, "compile-cache")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NXCC_", "NEURON_"))}
    env.update(XDG_CACHE_HOME=os.path.join(tmp, "cache"), XDG_RUNTIME_DIR=os.path.join(tmp, "run"))
    wd = os.path.join(tmp, "w")
    os.makedirs(wd)
    # The one real entry.
    subprocess.run([o.nxcc, "compile"] + compile_args(cache_dir), cwd=wd, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    fill(cache_dir, o.entries)
    sock = os.path.join(tmp, "run", "nxcc", "daemon.sock")
    daemon = subprocess.Popen([o.nxcc, "daemon", "--socket", sock, "--log-file",
                               os.path.join(tmp, "daemon.log"), "--inactivity-timeout", "0",
                               "--cache_dir", cache_dir],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    go, stop = multiprocessing.Event(), multiprocessing.Event()
    count = multiprocessing.Value("l", 0)
    procs = []
    try:
        for _ in range(500):
            if os.path.exists(sock):
                break
            time.sleep(0.01)
        for _ in range(5):  # warm up
            v1_hit(sock, wd, cache_dir)
        procs = [multiprocessing.Process(target=poller, args=(sock, o.interval / 1e3, go, stop, count))
                 for _ in range(o.pollers)]
        for p in procs:
            p.start()
        times = {0: [], o.pollers: []}
        polled_s, answers = 0.0, 0
        for _ in range(o.rounds):
            for n in (0, o.pollers):
                if n:
                    go.set()
                    time.sleep(0.05)  # let the pollers get going
                t0, c0 = time.perf_counter(), count.value
                for _ in range(o.runs):
                    t = time.perf_counter()
                    v1_hit(sock, wd, cache_dir)
                    times[n].append(time.perf_counter() - t)
                if n:
                    polled_s += time.perf_counter() - t0
                    answers += count.value - c0
                    go.clear()
        p50 = {n: statistics.median(xs) for n, xs in times.items()}
        print(f"Cache-hit POST /v1/compile, {o.entries} cache entries, {o.runs * o.rounds} compiles "
              f"per condition ({o.rounds} rounds, alternating); {o.pollers} pollers, "
              f"{o.interval:g} ms between one poller's requests:\n")
        print("| /v1/status pollers | p50 | p90 |")
        print("|---|---|---|")
        for n, xs in times.items():
            print(f"| {n} | {p50[n] * 1e3:.2f} ms | {pct(xs, 0.9) * 1e3:.2f} ms |")
        print(f"\np50 ratio, {o.pollers} pollers / none: {p50[o.pollers] / p50[0]:.2f}x; "
              f"{answers} status answers while measured ({answers / polled_s:.0f}/s)")
        with open(f"/proc/{daemon.pid}/status") as s:
            hwm = [line for line in s if line.startswith("VmHWM")][0].split()[1]
        print(f"daemon peak RSS (VmHWM): {int(hwm) / 1024:.1f} MiB")
    finally:
        stop.set()
        go.set()
        for p in procs:
            p.join(timeout=30)
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
