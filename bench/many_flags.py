#!/usr/bin/env python3
"""Planning with 10,000 occurrences of one repeatable option, whole process, timed by
bench/pairs.py with two commands interleaved.

`--skip-pass` (append: a list) and `--tensorizer-options` (occurrences joined with a space), for a
build against a baseline build; then `--skip-pass` against 10,000 `--target` (store: the
right-most wins), the yardstick, on the same build. Each run is `compile MODEL --dry-run=json`;
one argument may not exceed 128 KiB, so every command (A and B alike) is
`sh -c 'exec NXCC ... $(cat ARGS)'`.

Usage: bench/many_flags.py NXCC [BASELINE_NXCC]
"""
import os
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb")
N = 10000


def main():
    nxcc = os.path.abspath(sys.argv[1])
    base = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else nxcc
    with tempfile.TemporaryDirectory() as d:
        files = {
            "skip-pass": " ".join(f"--skip-pass p{i}" for i in range(N)),
            "tensorizer-options": " ".join(f"--tensorizer-options=--o{i}" for i in range(N)),
            "target": " ".join("--target trn2" for _ in range(N)),
        }
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        common = f"compile {MODEL} --dry-run=json --output {d}/m.neff --target trn2"

        def cmd(exe, args):
            return f"exec {exe} {common} $(cat {d}/{args}) >/dev/null"

        def bench(label, a, b, runs):
            print(f"## {label}", flush=True)
            pairs = os.path.join(ROOT, "bench", "pairs.py")
            subprocess.run([sys.executable, pairs, "-n", str(runs),
                            "--vs", "sh -c " + shlex.quote(b), "--", "sh", "-c", a], check=True)

        for opt in ("skip-pass", "tensorizer-options"):
            bench(f"{N:,} --{opt}: A {nxcc}, B {base}", cmd(nxcc, opt), cmd(base, opt), 5)
        bench(f"{N:,} --skip-pass (A) against {N:,} --target (B), {nxcc}",
              cmd(nxcc, "skip-pass"), cmd(nxcc, "target"), 20)


if __name__ == "__main__":
    main()
