#!/usr/bin/env python3
"""Whole-process benchmarks of the HLO reader (figures in BENCHMARKS.md):

1. `nxcc hlo-info --json` on two generated 50 MB binary HloModuleProtos against reading the same
   file (`cat FILE > /dev/null`), paired and interleaved by bench/pairs.py in one run: one made of
   500,000 instructions, one whose size is its weights (12 constants of 4 MiB);
2. `nxcc compile <the zoo's largest model> --dry-run=json` (which reads the model's graph) against
   the same dry run of a directory holding that file (a directory's graph is not read), paired.

The 50 MB modules are written here, not committed: one entry computation of parameters and a long
chain of `add`s, each instruction with a shape, operands and metadata, as a framework writes them;
and one of a parameter, twelve f32[1024,1024] constants and an add.

Usage: bench/hlo_info.py [path/to/nxcc] [runs]
Build first: cargo build --release
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NXCC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "nxcc")
RUNS = sys.argv[2] if len(sys.argv) > 2 else "20"
BIG = os.path.join(ROOT, "examples", "models", "big.hlo_module.pb")
TARGET_BYTES = 50 * 1000 * 1000


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(tag, body):
    return varint(tag << 3 | 2) + varint(len(body)) + body


def num(tag, n):
    return varint(tag << 3) + varint(n)


def shape(dims):
    return num(2, 11) + field(3, b"".join(varint(d) for d in dims))  # f32, packed dimensions


def instruction(i, opcode, operands, param=None):
    body = field(1, b"add.%d" % i) + field(2, opcode) + field(3, shape([128, 256]))
    body += field(7, field(1, b"add") + field(2, b"jit(f)/layer_%d/add" % i)
                  + field(3, b"/work/model/layers.py") + num(4, 100 + i % 900))
    if param is not None:
        body += num(9, param)
    body += num(35, i)
    if operands:
        body += field(36, b"".join(varint(o) for o in operands))
    return field(2, body)


def module(path):
    parts = [instruction(1, b"parameter", [], 0), instruction(2, b"parameter", [], 1)]
    size = sum(len(p) for p in parts)
    i = 3
    while size < TARGET_BYTES:
        p = instruction(i, b"add", [i - 1, i - 2])
        parts.append(p)
        size += len(p)
        i += 1
    computation = field(1, b"main.1") + b"".join(parts) + num(5, 1) + num(6, i - 1)
    with open(path, "wb") as f:
        f.write(field(1, b"jit_chain") + field(3, computation) + num(5, 7) + num(6, 1))
    return i - 1


def weights(path):
    """A module whose size is its weights: 12 constants of f32[1024,1024] (4 MiB literals each)."""
    w = shape([1024, 1024])
    literal = field(1, w) + field(8, bytes(4 << 20))  # LiteralProto { shape, f32s (packed) }
    parts = [instruction(1, b"parameter", [], 0)]
    for k in range(12):
        body = field(1, b"w.%d" % k) + field(2, b"constant") + field(3, w) + field(8, literal) + num(35, 100 + k)
        parts.append(field(2, body))
    parts.append(instruction(2, b"add", [1, 100]))
    computation = field(1, b"main.1") + b"".join(parts) + num(5, 1) + num(6, 2)
    with open(path, "wb") as f:
        f.write(field(1, b"jit_weights") + field(3, computation) + num(5, 8) + num(6, 1))


def farm(a, b):
    pairs = os.path.join(ROOT, "bench", "pairs.py")
    subprocess.run([sys.executable, pairs, "-n", RUNS, "--warmup", "2", "--vs", b, "--"] + a,
                   check=True)


def main():
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-")
    try:
        pb = os.path.join(tmp, "chain.hlo_module.pb")
        n = module(pb)
        print(f"{pb}: {os.path.getsize(pb)} bytes, {n} instructions")
        subprocess.run([NXCC, "hlo-info", pb], check=True, stdout=subprocess.DEVNULL)
        print("\n== hlo-info --json on the 50 MB module of 500k instructions (A) vs cat > /dev/null (B)")
        farm([NXCC, "hlo-info", "--json", pb], f"sh -c 'exec cat {pb} > /dev/null'")
        wpb = os.path.join(tmp, "weights.hlo_module.pb")
        weights(wpb)
        print(f"\n{wpb}: {os.path.getsize(wpb)} bytes")
        subprocess.run([NXCC, "hlo-info", wpb], check=True, stdout=subprocess.DEVNULL)
        print("== hlo-info --json on the 50 MB module of weights (A) vs cat > /dev/null (B)")
        farm([NXCC, "hlo-info", "--json", wpb], f"sh -c 'exec cat {wpb} > /dev/null'")
        d = os.path.join(tmp, "dir")
        os.mkdir(d)
        shutil.copy(BIG, d)
        dry = ["compile", "--target", "trn2", "--toolchain", "sim", "--dry-run=json"]
        print("\n== --dry-run of big.hlo_module.pb, graph read (A) vs the same file in a directory, not read (B)")
        farm([NXCC] + dry[:1] + [BIG] + dry[1:], " ".join([NXCC] + dry[:1] + [d] + dry[1:]))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
