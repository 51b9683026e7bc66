#!/usr/bin/env python3
"""Latency and throughput of a small compile through the nxcc daemon, beside the same compile as a
fresh `nxcc compile` process. Everything is measured in one run, the modes alternating.

Modes (the same compile each time: the example model, --target trn2, the simulated toolchain):
  process   a fresh `nxcc compile ...` process
  /compile  the original's protocol: POST /compile?working_directory=..., body = shell-quoted args
  /v1       POST /v1/compile, reading the event stream to its `done`
  client    a fresh `nxcc compile --daemon ...` process (client + daemon)

Latency: RUNS compiles per mode, one at a time (p50, p90). Throughput: CLIENTS concurrent clients
doing TOTAL compiles per mode (compiles per second), in ROUNDS rounds with the modes alternating.
Each client compiles in its own directory.

Usage: bench/daemon_latency.py [--nxcc PATH] [--runs N] [--clients N] [--total N] [--rounds N]
                               [--max-concurrent N] [--cache_dir DIR]
       bench/daemon_latency.py --ratios [--nxcc PATH] [--baseline PATH] [--runs N]
--runs 0 skips the latency part.
--ratios measures the two goals of the daemon in one run, everything interleaved: a cache miss
(--no_cache) through the daemon (POST /v1/compile, and a fresh `nxcc compile --daemon` process)
against a fresh `nxcc compile` process, and a cache hit through a fresh `nxcc compile --daemon`
process against a fresh `nxcc compile` process hitting its own cache; p50, p99 and the ratios of
the p50s. With --baseline, a second build (a daemon of its own, its own caches) is measured in
the same rounds, alternating with the first, so before and after share the same conditions.
--ratio-clients 4,16 adds the throughput of every row at 4 and at 16 concurrent clients (TOTAL
compiles per row in ROUNDS rounds, every row in every round).
--cache_dir is given to every compile (daemon and fresh processes), for the cache-hit figures;
without it every compile runs with --no_cache.
Build first: cargo build --release
"""
import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb")


def compile_args(cache_dir):
    args = [MODEL, "--target", "trn2", "--toolchain", "sim", "--output", "out.neff"]
    # The daemon compiles through a cache by default: without --cache_dir every mode runs uncached.
    args += ["--cache_dir", cache_dir] if cache_dir else ["--no_cache"]
    return args


def read_response(sock):
    """Read one HTTP/1.1 response (Content-Length or chunked); returns (status, body)."""
    f = sock.makefile("rb")
    status = int(f.readline().split()[1])
    headers = {}
    while True:
        line = f.readline().strip()
        if not line:
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    body = b""
    if headers.get("transfer-encoding") == "chunked":
        while True:
            n = int(f.readline().strip(), 16)
            if n == 0:
                f.readline()
                break
            body += f.read(n)
            f.read(2)
    else:
        body = f.read(int(headers.get("content-length", "0")))
    return status, body


class Modes:
    def __init__(self, nxcc, sock, env, cache_dir):
        self.nxcc, self.sock, self.env, self.cache_dir = nxcc, sock, env, cache_dir

    def request(self, raw):
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.sock)
        s.sendall(raw)
        status, body = read_response(s)
        s.close()
        return status, body

    def process(self, wd):
        subprocess.run([self.nxcc, "compile"] + compile_args(self.cache_dir), cwd=wd, env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    def client(self, wd):
        subprocess.run([self.nxcc, "compile", "--daemon"] + compile_args(self.cache_dir), cwd=wd,
                       env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    def compile(self, wd):
        body = " ".join(shlex.quote(a) for a in ["compile"] + compile_args(self.cache_dir)).encode()
        q = urllib.parse.urlencode({"working_directory": wd})
        raw = (f"POST /compile?{q} HTTP/1.1\r\nHost: nxcc\r\nContent-Length: {len(body)}\r\n"
               f"Connection: close\r\n\r\n").encode() + body
        status, _ = self.request(raw)
        assert status == 200, status

    def v1(self, wd):
        body = json.dumps({"argv": compile_args(self.cache_dir), "working_directory": wd}).encode()
        raw = (f"POST /v1/compile HTTP/1.1\r\nHost: nxcc\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
        status, events = self.request(raw)
        done = json.loads(events.decode().strip().splitlines()[-1])
        assert status == 200 and done["event"] == "done" and done["exit_status"] == 0, done


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def start_daemon(nxcc, tmp, name, extra):
    """A daemon of `nxcc` on a socket of its own; returns (process, socket, env)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NXCC_", "NEURON_"))}
    env.update(XDG_CACHE_HOME=os.path.join(tmp, name, "cache"),
               XDG_RUNTIME_DIR=os.path.join(tmp, name, "run"))
    sock = os.path.join(tmp, name, "run", "nxcc", "daemon.sock")
    env["NXCC_DAEMON_SOCKET"] = sock
    cmd = [nxcc, "daemon", "--socket", sock, "--log-file", os.path.join(tmp, name, "daemon.log"),
           "--inactivity-timeout", "0"] + extra
    os.makedirs(os.path.join(tmp, name), exist_ok=True)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    return proc, sock, env


def clients_run(dirs, n, f):
    """`n` calls of `f(dir)` shared by one thread per directory of `dirs`; the wall time, s."""
    counter = iter(range(n))
    lock = threading.Lock()

    def worker(d):
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            f(d)

    t = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(d,)) for d in dirs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t


def ratios(o):
    """Both goals, every mode and build interleaved in each round."""
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-")
    builds = [("after", o.nxcc)] + ([("before", o.baseline)] if o.baseline else [])
    daemons, rows = [], []
    try:
        for label, nxcc in builds:
            cache = os.path.join(tmp, label, "compile-cache")
            extra = ["--max-concurrent", str(o.max_concurrent)] if o.max_concurrent else []
            proc, sock, env = start_daemon(nxcc, tmp, label, extra + ["--cache_dir", cache])
            daemons.append(proc)
            miss = Modes(nxcc, sock, env, None)
            hit = Modes(nxcc, sock, env, cache)
            rows += [(label, "miss", "fresh `nxcc compile` process", miss.process),
                     (label, "miss", "daemon, POST /v1/compile", miss.v1),
                     (label, "miss", "fresh `nxcc compile --daemon` process", miss.client),
                     (label, "hit", "fresh `nxcc compile` process", hit.process),
                     (label, "hit", "daemon, POST /v1/compile", hit.v1),
                     (label, "hit", "fresh `nxcc compile --daemon` process", hit.client)]
        wd = os.path.join(tmp, "latency")
        os.makedirs(wd)
        for row in rows:  # warm up; the hit rows fill their caches
            row[3](wd)
        times = {row[:3]: [] for row in rows}
        for _ in range(o.runs):
            for row in rows:
                t = time.perf_counter()
                row[3](wd)
                times[row[:3]].append(time.perf_counter() - t)
        print(f"Latency, one compile at a time, {o.runs} runs per row, every row in every round:\n")
        print("| build | cache | mode | p50 | p99 | p50 / fresh process |")
        print("|---|---|---|---|---|---|")
        for label, _ in builds:
            for cache in ("miss", "hit"):
                base = statistics.median(times[(label, cache, "fresh `nxcc compile` process")])
                for row in rows:
                    if row[0] != label or row[1] != cache:
                        continue
                    xs = times[row[:3]]
                    p50 = statistics.median(xs)
                    print(f"| {label} | {cache} | {row[2]} | {p50 * 1e3:.2f} ms | "
                          f"{pct(xs, 0.99) * 1e3:.2f} ms | {p50 / base:.2f}× |")
        for clients in [int(c) for c in o.ratio_clients.split(",") if c]:
            walls = {row[:3]: 0.0 for row in rows}
            per_round = max(1, o.total // o.rounds)
            for _ in range(o.rounds):
                for k, row in enumerate(rows):
                    dirs = [os.path.join(tmp, "throughput", f"row{k}", f"client{c}")
                            for c in range(clients)]
                    for d in dirs:
                        os.makedirs(d, exist_ok=True)
                    walls[row[:3]] += clients_run(dirs, per_round, row[3])
            n = per_round * o.rounds
            print(f"\nThroughput, {clients} concurrent clients, {n} compiles per row "
                  f"(in {o.rounds} rounds, every row in every round):\n")
            print("| build | cache | mode | compiles/s | / fresh process |")
            print("|---|---|---|---|---|")
            for label, _ in builds:
                for cache in ("miss", "hit"):
                    base = n / walls[(label, cache, "fresh `nxcc compile` process")]
                    for row in rows:
                        if row[0] == label and row[1] == cache:
                            rate = n / walls[row[:3]]
                            print(f"| {label} | {cache} | {row[2]} | {rate:.1f} | {rate / base:.2f}× |")
    finally:
        for d in daemons:
            d.terminate()
            d.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nxcc", default=os.path.join(ROOT, "target", "release", "nxcc"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--total", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--max-concurrent", type=int, default=None)
    ap.add_argument("--cache_dir", default=None)
    ap.add_argument("--ratios", action="store_true")
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--ratio-clients", default="", help="with --ratios: throughput at these "
                    "numbers of concurrent clients too (comma-separated: 4,16)")
    o = ap.parse_args()
    # Every compile runs in a directory of its own: the executables are taken from here.
    o.nxcc = os.path.abspath(o.nxcc)
    o.baseline = o.baseline and os.path.abspath(o.baseline)
    if o.ratios:
        return ratios(o)

    tmp = tempfile.mkdtemp(prefix="nxcc-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NXCC_", "NEURON_"))}
    env.update(XDG_CACHE_HOME=os.path.join(tmp, "cache"), XDG_RUNTIME_DIR=os.path.join(tmp, "run"))
    sock = os.path.join(tmp, "run", "nxcc", "daemon.sock")
    env["NXCC_DAEMON_SOCKET"] = sock
    daemon_cmd = [o.nxcc, "daemon", "--socket", sock, "--log-file", os.path.join(tmp, "daemon.log"),
                  "--inactivity-timeout", "0"]
    if o.max_concurrent:
        daemon_cmd += ["--max-concurrent", str(o.max_concurrent)]
    if o.cache_dir:
        daemon_cmd += ["--cache_dir", o.cache_dir]
    daemon = subprocess.Popen(daemon_cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(500):
            if os.path.exists(sock):
                break
            time.sleep(0.01)
        m = Modes(o.nxcc, sock, env, o.cache_dir)
        modes = [("fresh `nxcc compile` process", m.process), ("daemon, POST /compile", m.compile),
                 ("daemon, POST /v1/compile", m.v1), ("fresh `nxcc compile --daemon` process", m.client)]
        wd = os.path.join(tmp, "latency")
        os.makedirs(wd)
        for _, f in modes:  # warm up: lays out the simulated toolchain, fills the page cache
            f(wd)
        if o.runs > 0:
            times = {name: [] for name, _ in modes}
            for _ in range(o.runs):
                for name, f in modes:
                    t = time.perf_counter()
                    f(wd)
                    times[name].append(time.perf_counter() - t)
            print(f"Latency, one compile at a time, {o.runs} runs per mode (alternating):\n")
            print("| mode | p50 | p90 |")
            print("|---|---|---|")
            for name, _ in modes:
                xs = times[name]
                print(f"| {name} | {statistics.median(xs) * 1e3:.1f} ms | {pct(xs, 0.9) * 1e3:.1f} ms |")
        print(f"\nThroughput, {o.clients} concurrent clients, {o.total} compiles per mode "
              f"(in {o.rounds} rounds, the modes alternating):\n")
        print("| mode | compiles/s | wall |")
        print("|---|---|---|")
        walls = {name: 0.0 for name, _ in modes}
        per_round = max(1, o.total // o.rounds)
        for _ in range(o.rounds):
            for k, (name, f) in enumerate(modes):
                dirs = []
                for c in range(o.clients):
                    d = os.path.join(tmp, "throughput", f"mode{k}", f"client{c}")
                    os.makedirs(d, exist_ok=True)
                    dirs.append(d)
                walls[name] += clients_run(dirs, per_round, f)
        for name, _ in modes:
            n = per_round * o.rounds
            print(f"| {name} | {n / walls[name]:.1f} | {walls[name]:.2f} s |")
        status = json.loads(m.request(b"GET /v1/status HTTP/1.1\r\nHost: nxcc\r\nConnection: close\r\n\r\n")[1])
        print(f"\ndaemon: max_concurrent {status['max_concurrent']}, {status['compiles']['finished']} compiles, "
              f"{status['compiles']['failed']} failed; engine: {status['engine']}")
        with open(f"/proc/{daemon.pid}/status") as s:
            hwm = [l for l in s if l.startswith("VmHWM")][0].split()[1]
        print(f"daemon peak RSS (VmHWM): {int(hwm) / 1024:.1f} MiB")
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


if __name__ == "__main__":
    main()
