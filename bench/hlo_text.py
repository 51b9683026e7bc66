#!/usr/bin/env python3
"""Whole-process benchmark of the HLO text reader (figures in BENCHMARKS.md): `nxcc hlo-info
--json` on a generated 50 MB HLO text module — a parameter, then a chain of `add`s, each
instruction on its own line with a shape, operands and metadata, as XLA prints a module — paired
and interleaved by bench/pairs.py in one run against a baseline build's `hlo-info` of the same
file (when given), and against reading the file (`cat FILE > /dev/null`). Then the same module
with every line break made a space (one line: only a reader that tokenises reads it).

The module is written here, under $TMPDIR, not committed, and removed at the end.

Usage: bench/hlo_text.py [path/to/nxcc] [runs] [path/to/baseline-nxcc]
Build first: cargo build --release
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NXCC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
RUNS = sys.argv[2] if len(sys.argv) > 2 else "10"
BASE = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
TARGET_BYTES = 50 * 1000 * 1000


def write_module(path):
    """A chain of adds of f32[128,256]: about 110 bytes an instruction."""
    shape = "f32[128,256]{1,0}"
    n = 0
    with open(path, "w") as f:
        f.write("HloModule jit_chain, entry_computation_layout={(f32[128,256]{1,0})->f32[128,256]{1,0}}\n\n")
        f.write("ENTRY main.1 {\n")
        f.write(f'  p.0 = {shape} parameter(0), metadata={{op_name="jit(f)/x"}}\n')
        prev = "p.0"
        while f.tell() < TARGET_BYTES:
            n += 1
            name = f"add.{n}"
            f.write(f'  {name} = {shape} add({prev}, p.0), metadata={{op_name="jit(f)/add" '
                    f'source_file="/src/model.py" source_line={n % 1000}}}\n')
            prev = name
        f.write(f"  ROOT r = {shape} negate({prev})\n}}\n")
    return n + 2


def pairs(a, b):
    script = os.path.join(ROOT, "bench", "pairs.py")
    subprocess.run([sys.executable, script, "-n", RUNS, "--warmup", "2", "--vs", b, "--"] + a,
                   check=True)


def main():
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-")
    try:
        text = os.path.join(tmp, "chain.hlo")
        count = write_module(text)
        one = os.path.join(tmp, "one-line.hlo")
        with open(text) as f, open(one, "w") as g:
            g.write(f.read().replace("\n", " "))
        print(f"## {count:,} instructions, {os.path.getsize(text) / 1e6:.1f} MB of HLO text", flush=True)
        for f in (text, one):
            check = subprocess.run([NXCC, "hlo-info", "--json", f], stdout=subprocess.DEVNULL)
            if check.returncode != 0:
                raise SystemExit(f"{NXCC} hlo-info {f} exited {check.returncode}")
        if BASE:
            print(f"## hlo-info --json: A {NXCC}, B {BASE}", flush=True)
            pairs([NXCC, "hlo-info", "--json", text], f"{BASE} hlo-info --json {text}")
        print("## hlo-info --json (A) against cat (B)", flush=True)
        pairs([NXCC, "hlo-info", "--json", text], f"sh -c 'cat {text} > /dev/null'")
        print("## the same module on one line (A) against its usual layout (B)", flush=True)
        pairs([NXCC, "hlo-info", "--json", one], f"{NXCC} hlo-info --json {text}")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
