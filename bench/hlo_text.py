#!/usr/bin/env python3
"""Whole-process benchmark of the HLO text reader (figures in BENCHMARKS.md): `nxcc hlo-info
--json` on a generated 50 MB HLO text module — a parameter, then a chain of `add`s, each
instruction on its own line with a shape, operands and metadata, as XLA prints a module — paired
and interleaved by bench/pairs.py in one run against a baseline build's `hlo-info` of the same
file (when given), and against reading the file (`cat FILE > /dev/null`). Then the same module
with every line break made a space (one line: only a reader that tokenises reads it).

With --million: a module of 1,000,000 short instructions instead (`  aN = f32[8] add(aM, p)`,
35 MB: the reader's cost per instruction, not per byte), against `cat` and the baseline.

The modules are written here, under $TMPDIR, not committed, and removed at the end.

Usage: bench/hlo_text.py [--million] [path/to/nxcc] [runs] [path/to/baseline-nxcc]
Build first: cargo build --release
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MILLION = "--million" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != "--million"]
NXCC = os.path.abspath(ARGS[0]) if len(ARGS) > 0 else os.path.join(ROOT, "target", "release", "nxcc")
RUNS = ARGS[1] if len(ARGS) > 1 else "10"
BASE = os.path.abspath(ARGS[2]) if len(ARGS) > 2 else None
TARGET_BYTES = 50 * 1000 * 1000


def write_million(path):
    """1,000,000 instructions of about 35 bytes: a parameter, then a chain of adds."""
    with open(path, "w") as f:
        f.write("HloModule jit_chain\n\nENTRY main {\n  a0 = f32[8] parameter(0)\n  p = f32[8] parameter(1)\n")
        f.writelines(f"  a{n} = f32[8] add(a{n - 1}, p)\n" for n in range(1, 999_998))
        f.write("  ROOT r = f32[8] negate(a999997)\n}\n")
    return 1_000_000


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
        if MILLION:
            text = os.path.join(tmp, "million.hlo")
            count = write_million(text)
            print(f"## {count:,} instructions, {os.path.getsize(text) / 1e6:.1f} MB of HLO text", flush=True)
            check = subprocess.run([NXCC, "hlo-info", "--json", text], stdout=subprocess.PIPE, check=True)
            assert f'"instruction_count": {count},' in check.stdout.decode(), "not every instruction read"
            print("## hlo-info --json (A) against cat (B)", flush=True)
            pairs([NXCC, "hlo-info", "--json", text], f"sh -c 'cat {text} > /dev/null'")
            if BASE:
                print(f"## hlo-info --json: A {NXCC}, B {BASE}", flush=True)
                pairs([NXCC, "hlo-info", "--json", text], f"{BASE} hlo-info --json {text}")
            return
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
