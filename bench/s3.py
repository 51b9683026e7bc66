#!/usr/bin/env python3
"""nxcc's cache in S3 against a real S3-compatible server on loopback (moto's server mode, from
the virtual environment the S3 tests provision, target/moto-venv; made here the same way if
missing).

    python3 bench/s3.py NXCC [RUNS] [hits|fleet|framework]

1. Hits, alternated in one run, RUNS rounds (default 10), each a whole process:
   - a hit from S3: `nxcc compile big.pb ... --cache_dir s3://bench/p` on a host whose local
     directory is emptied before each run (untimed) — the marker, meta.json and the 12.5 MB NEFF
     fetched, verified, kept locally, copied to the output;
   - the server's own client downloading the same NEFF object (boto3's `download_file`, a
     Python process: tests/data/moto/admin.py get; and, after the rounds, the same download
     timed inside one Python process with one client, without its start-up);
   - a local-tier hit: the same compile on a host whose local directory holds the entry;
   - a plain local-cache hit: `--cache_dir DIR` holding the same entry.
   `big.pb` is the example model padded to 100 MiB (bench/padded_models.py).
2. A fleet: 3 hosts (each its own local directory and toolchain state) each compile the same 24
   models (`parallel-compile --jobs 1`, each compile 300 ms of simulated work), all three at once
   through one bucket, against each host compiling them alone (`--cache_dir` of its own): the
   compiles run, the bytes uploaded and downloaded (from the compiles' own log lines), the wall
   time of the whole fleet.
3. The framework's cache in a bucket: a framework cache of 200 entries (a graph and
   `compile_flags.json` each, as the extraction phase leaves them), compiled once in a directory
   and once in the bucket (untimed); then, alternated, RUNS rounds of a second `parallel-compile
   --neuron-cache=s3://bench/fw` (every entry listed and found done, nothing compiled) against the
   same on the directory (`--neuron-cache=DIR`), and the server's own client listing the same
   objects (boto3, a Python process: tests/data/moto/admin.py list).
"""
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import padded_models  # noqa: E402
import pairs  # noqa: E402

VENV = os.path.join(pairs.ROOT, "target", "moto-venv")
DATA = os.path.join(pairs.ROOT, "tests", "data", "moto")
BUCKET = "bench"


def venv_bin():
    b = os.path.join(VENV, "bin")
    if not os.path.exists(os.path.join(b, "moto_server")):
        py = shutil.which("python3.11") or "python3"
        subprocess.run([py, "-m", "venv", VENV], check=True)
        subprocess.run([os.path.join(b, "pip"), "install", "--quiet", "moto[s3]==5.2.6", "flask",
                        "flask-cors", "-c", os.path.join(DATA, "constraints.txt")], check=True)
    return b


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp):
    b = venv_bin()
    port = free_port()
    log = open(os.path.join(tmp, "moto.log"), "w")
    p = subprocess.Popen([os.path.join(b, "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                         stdout=log, stderr=log, start_new_session=True)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    endpoint = f"http://127.0.0.1:{port}"
    admin(endpoint, "mkbucket", BUCKET)
    return p, endpoint


def admin_argv(endpoint, *args):
    return [os.path.join(venv_bin(), "python"), os.path.join(DATA, "admin.py"), endpoint,
            "bench", "bench", *args]


def admin(endpoint, *args):
    return subprocess.run(admin_argv(endpoint, *args), check=True, capture_output=True,
                          text=True).stdout


def s3_env(endpoint, xdg):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NXCC_SIM_", "AWS_"))}
    env.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
               AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1", XDG_CACHE_HOME=xdg)
    return env


def hits(nxcc, runs, tmp, endpoint):
    padded_models.write_models(tmp, [100])
    os.rename(os.path.join(tmp, "g00.pb"), os.path.join(tmp, "big.pb"))
    time.sleep(2.5)
    url = f"s3://{BUCKET}/hits"

    def compile_argv(cache):
        return [nxcc, "compile", "big.pb", "--target", "trn2", "--toolchain", "sim",
                "--cache_dir", cache, "--output", "out.neff"]

    env_a = s3_env(endpoint, os.path.join(tmp, "host-a"))
    env_b = s3_env(endpoint, os.path.join(tmp, "host-b"))
    subprocess.run(compile_argv(url), cwd=tmp, env=env_a, check=True, capture_output=True)
    subprocess.run(compile_argv(os.path.join(tmp, "plain")), cwd=tmp, env=env_a, check=True,
                   capture_output=True)
    neff_key = next(line.split()[0] for line in admin(endpoint, "list", BUCKET).splitlines()
                    if line.split()[0].endswith("/model.neff"))
    size = int(next(line.split()[1] for line in admin(endpoint, "list", BUCKET).splitlines()
                    if line.split()[0] == neff_key))
    time.sleep(2.5)
    sides = [
        ("hit from S3 (local directory empty)", compile_argv(url), env_b, "host-b"),
        ("boto3 download_file of the NEFF", admin_argv(endpoint, "get", BUCKET, neff_key,
                                                       "out.neff"), env_b, None),
        ("local-tier hit (--cache_dir s3://...)", compile_argv(url), env_a, None),
        ("plain local-cache hit (--cache_dir DIR)", compile_argv(os.path.join(tmp, "plain")),
         env_a, None),
    ]
    for _name, argv, env, _fresh in sides:
        pairs.measure(argv, cwd=tmp, env=env)
    times = {name: [] for name, *_ in sides}
    for _ in range(runs):
        for name, argv, env, fresh in sides:
            if fresh:
                shutil.rmtree(os.path.join(tmp, fresh), ignore_errors=True)
            if os.path.exists(os.path.join(tmp, "out.neff")):
                os.remove(os.path.join(tmp, "out.neff"))
            wall, _cpu, _peak, code = pairs.measure(argv, cwd=tmp, env=env)
            if code != 0:
                raise SystemExit(f"{name} exited {code}")
            times[name].append(wall)
    print(f"hits: the NEFF is {size} bytes; {runs} rounds, alternated; wall, ms")
    print("| | median | p10 | p90 |\n|---|---|---|---|")
    for name, t in times.items():
        q = statistics.quantiles(t, n=10)
        print(f"| {name} | {statistics.median(t) * 1e3:.1f} | {q[0] * 1e3:.1f} | "
              f"{q[-1] * 1e3:.1f} |")
    inproc = [float(x) for x in admin(endpoint, "timeget", BUCKET, neff_key,
                                      os.path.join(tmp, "out2.neff"), str(runs)).split()]
    q = statistics.quantiles(inproc, n=10)
    print(f"| boto3 download_file, in process (one client, no start-up) | "
          f"{statistics.median(inproc) * 1e3:.1f} | {q[0] * 1e3:.1f} | {q[-1] * 1e3:.1f} |")
    names = list(times)
    med = {n: statistics.median(t) for n, t in times.items()}
    print(f"hit from S3 / boto3 download: {med[names[0]] / med[names[1]]:.2f}; "
          f"local-tier hit / plain local hit: {med[names[2]] / med[names[3]]:.2f}")


def fleet_run(nxcc, tmp, endpoint, models, shared):
    url = f"s3://{BUCKET}/fleet"
    procs = []
    t0 = time.monotonic()
    for h in range(3):
        host = os.path.join(tmp, f"fleet-{'shared' if shared else 'alone'}-{h}")
        os.makedirs(os.path.join(host, "state"), exist_ok=True)
        env = s3_env(endpoint, os.path.join(host, "xdg"))
        env.update(NXCC_SIM_WORK_MS="hlo2penguin:300", NXCC_SIM_STATE=os.path.join(host, "state"),
                   NXCC_SIM_RECORD=os.path.join(host, "record.jsonl"))
        cache = url if shared else os.path.join(host, "cache")
        argv = [nxcc, "parallel-compile", "--jobs", "1", "--cache_dir", cache, "--output-dir",
                os.path.join(host, "out"), "--verbose", "info", *models, "--", "--target", "trn2",
                "--toolchain", "sim"]
        procs.append(subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate()[0] for p in procs]
    wall = time.monotonic() - t0
    for p, o in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit(f"a host failed:\n{o[-3000:]}")
    logs = ""
    for h in range(3):
        out = os.path.join(tmp, f"fleet-{'shared' if shared else 'alone'}-{h}", "out")
        for f in os.listdir(out):
            if f.endswith(".log"):
                with open(os.path.join(out, f), errors="replace") as fh:
                    logs += fh.read()
    published = {m.group(1): int(m.group(2)) for m in
                 re.finditer(r"Published the entry of key (\w+) to \S+ \((\d+) bytes\)", logs)}
    fetched = re.findall(r"Fetched the entry of key (\w+)", logs)
    compiles = 0
    for h in range(3):
        rec = os.path.join(tmp, f"fleet-{'shared' if shared else 'alone'}-{h}", "record.jsonl")
        if os.path.exists(rec):
            with open(rec) as fh:
                compiles += sum(1 for line in fh if json.loads(line).get("tool") == "hlo2penguin")
    up = sum(published.values())
    down = sum(published.get(k, 0) for k in fetched)
    return wall, compiles, up, down, len(fetched)


def fleet(nxcc, tmp, endpoint):
    with open(os.path.join(pairs.ROOT, "examples", "models", "mlp.hlo_module.pb"), "rb") as f:
        original = f.read()
    models = []
    for i in range(24):
        path = os.path.join(tmp, f"m{i:02}.pb")
        with open(path, "wb") as f:
            f.write(original + bytes([0xc2, 0x3e, 1, i]))
        models.append(path)
    print("\nfleet: 3 hosts x the same 24 models, 300 ms of simulated work per compile")
    print("| | compiles (hlo2penguin runs) | uploaded | downloaded (entries) | fleet wall |")
    print("|---|---|---|---|---|")
    for shared in (False, True):
        wall, compiles, up, down, n = fleet_run(nxcc, tmp, endpoint, models, shared)
        name = "one bucket shared" if shared else "each host alone"
        print(f"| {name} | {compiles} | {up} B | {down} B ({n}) | {wall:.1f} s |")


FW_VERSION = "2.24.5133.0+nxcc-sim"
FW_ENTRIES = 200


def framework(nxcc, runs, tmp, endpoint):
    with open(os.path.join(pairs.ROOT, "examples", "models", "mlp.hlo_module.pb"), "rb") as f:
        original = f.read()
    fw = os.path.join(tmp, "fw")
    vdir = os.path.join(fw, f"neuronxcc-{FW_VERSION}")
    for i in range(FW_ENTRIES):
        e = os.path.join(vdir, f"MODULE_{i:04}+d41d8cd9")
        os.makedirs(e)
        with open(os.path.join(e, "model.hlo_module.pb"), "wb") as f:
            f.write(original + bytes([0xc2, 0x3e, 2, i // 256, i % 256]))
        with open(os.path.join(e, "compile_flags.json"), "w") as f:
            f.write("[]")
    admin(endpoint, "putdir", BUCKET, "fw", fw)
    work = os.path.join(tmp, "fw-tmp")
    os.makedirs(work)
    env = s3_env(endpoint, os.path.join(tmp, "fw-xdg"))
    env.update(TMPDIR=work, NXCC_SIM_STATE=os.path.join(tmp, "fw-state"))

    def argv(cache):
        return [nxcc, "parallel-compile", f"--neuron-cache={cache}", "--allow-simulated", "--",
                "--target", "trn2", "--toolchain", "sim"]

    sides = [("bucket (--neuron-cache=s3://...)", argv(f"s3://{BUCKET}/fw")),
             ("directory (--neuron-cache=DIR)", argv(fw))]
    for name, a in sides[:2]:
        p = subprocess.run(a, cwd=tmp, env=env, capture_output=True, text=True)
        if p.returncode != 0 or f"{FW_ENTRIES} entries to compile" not in p.stdout + p.stderr:
            raise SystemExit(f"{name}: the first run did not compile every entry:\n"
                             f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    for name, a in sides:
        p = subprocess.run(a, cwd=tmp, env=env, capture_output=True, text=True)
        if p.returncode != 0 or f"0 entries to compile, {FW_ENTRIES} done" not in p.stdout + p.stderr:
            raise SystemExit(f"{name}: a second run found work:\n{p.stdout[-2000:]}"
                             f"{p.stderr[-2000:]}")
    # The floor of the bucket's side: the server's own client listing the same objects.
    sides.append(("boto3 listing the bucket's objects, a Python process",
                  admin_argv(endpoint, "list", BUCKET)))
    times = {name: [] for name, _ in sides}
    for _ in range(runs):
        for name, a in sides:
            wall, _cpu, _peak, code = pairs.measure(a, cwd=tmp, env=env)
            if code != 0:
                raise SystemExit(f"{name} exited {code}")
            times[name].append(wall)
    print(f"\nframework: a second parallel-compile over {FW_ENTRIES} done entries; {runs} rounds, "
          "alternated; wall, ms")
    print("| | median | p10 | p90 |\n|---|---|---|---|")
    for name, t in times.items():
        q = statistics.quantiles(t, n=10)
        print(f"| {name} | {statistics.median(t) * 1e3:.1f} | {q[0] * 1e3:.1f} | "
              f"{q[-1] * 1e3:.1f} |")
    med = [statistics.median(t) for t in times.values()]
    print(f"bucket / directory: {med[0] / med[1]:.2f}; bucket / boto3 listing: "
          f"{med[0] / med[2]:.2f}")


def main():
    nxcc = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    only = sys.argv[3] if len(sys.argv) > 3 else None
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-s3-", dir=os.path.join(pairs.ROOT, "target"))
    server = None
    try:
        server, endpoint = start_server(tmp)
        if only in (None, "hits"):
            hits(nxcc, runs, tmp, endpoint)
        if only in (None, "fleet"):
            fleet(nxcc, tmp, endpoint)
        if only in (None, "framework"):
            framework(nxcc, runs, tmp, endpoint)
    finally:
        if server:
            os.killpg(server.pid, 9)
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
