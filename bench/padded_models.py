"""The example model padded to sizes of a benchmark's choosing, for the benchmark scripts, and
the simulated toolchain's environment those models are compiled in.

The padding is one field the module does not define (number 1000, length-delimited), which a
reader skips: each file still reads as the same module, so the simulated tools accept it, and
each differs from the others by its padding bytes.
"""

import os
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb")


def varint(n):
    """A protobuf varint."""
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


def write_models(directory, sizes_mib):
    """Write g00.pb, g01.pb, ... into `directory`, the i-th padded with about sizes_mib[i] MiB."""
    base = open(MODEL, "rb").read()
    for i, mib in enumerate(sizes_mib):
        pad = bytes((i * 31 + j) % 251 for j in range(4096)) * ((mib << 20) // 4096)
        with open(os.path.join(directory, f"g{i:02}.pb"), "wb") as f:
            f.write(base + varint((1000 << 3) | 2) + varint(len(pad)) + pad)


SIM_COMPILE = ["--", "--target", "trn2", "--toolchain", "sim"]


def sim_env(ms_per_mib, drop=()):
    """This process's environment without the simulated tools' fault, work, memory and record
    settings (nor the names in `drop`), hlo2penguin working `ms_per_mib` ms of CPU per MiB."""
    env = dict(os.environ)
    for v in ("NXCC_SIM_FAULT", "NXCC_SIM_WORK_MS", "NXCC_SIM_RSS_MB", "NXCC_SIM_RECORD") + tuple(drop):
        env.pop(v, None)
    env["NXCC_SIM_WORK_MS_PER_MB"] = f"hlo2penguin:{ms_per_mib}"
    return env


def lay_out_toolchain(nxcc, model, out_dir, env, cwd):
    """Lay the simulated toolchain out (not measured): `parallel-compile` of `model`, no cache."""
    subprocess.run([nxcc, "parallel-compile", model, "--no_cache", "--output-dir", out_dir]
                   + SIM_COMPILE, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
