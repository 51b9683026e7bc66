#!/usr/bin/env python3
"""Where nxcc's own CPU goes in a small compile, phase by phase, from a CPU profile (no wall
clock): `perf record -g` of RUNS compiles of the example model with the simulated toolchain
(NXCC_SIM_WORK_MS=*:0, the tools doing no work), each sample put in the first phase whose
marks its call chain holds. Samples of the tools after their `exec` (their own process names)
are the tools' — what the bash replay of the same command lines runs too — and are reported
apart; everything in processes still named `nxcc` (the supervisor, the worker, the tools'
children until they exec, their threads) is nxcc's.

    python3 bench/driver_phases.py NXCC [RUNS] [BASELINE_NXCC]

With a baseline, both builds are profiled in turn (A, B, A, B: RUNS/2 compiles each time) and
the table has a column for each. Needs `perf` (the kernel's perf_event_paranoid allowing it).
"""
import collections
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "examples", "models", "mlp.hlo_module.pb")
FREQ = 15000
TOOLS = ("hlo2penguin", "xla_infergolden", "walrus_driver")

# (phase, marks): the first phase with a mark in a sample's call chain takes the sample.
PHASES = [
    ("exec and dynamic loading (the loader, relocation, CPU feature probes)",
     ["load_elf_binary", "begin_new_exec", "bprm_execve", "_dl_start", "dl_main", "_dl_relocate",
      "ld-linux", "init_cpu_features", "intel_check_word", "handle_intel", "__libc_early_init",
      "__cpu_indicator_init", "libgcc_s"]),
    ("fork and copy-on-write faults (the worker, each tool's child)",
     ["copy_process", "dup_mm", "copy_page_range", "do_wp_page", "wp_page_copy", "kernel_clone",
      "_Fork"]),
    ("process exit and address-space teardown",
     ["do_exit", "exit_mmap", "do_group_exit", "exit_mm", "mmput"]),
    ("supervising the tools (spawn set-up, pipes, poll, waiting, reaping)",
     ["run::process", "do_sys_poll", "__poll", "pipe_read", "wait4", "waitid", "pidfd"]),
    ("the in-process jobs (Frontend, StaticIOTranspose, Kelper's gzip)",
     ["nxcc::jobs::", "sim::frontend", "kelper", "flate2", "miniz_oxide", "transpose"]),
    ("the work directory, the NEFF's rename, file system calls",
     ["workdir", "do_unlinkat", "do_rmdir", "do_mkdirat", "do_renameat2", "AtomicFile",
      "ext4_", "path_openat", "do_filp_open", "vfs_statx", "readlink"]),
    ("the log and the report events",
     ["engine::log", "engine::events", "engine::reports", "serde_json"]),
    ("threads: creation, hand-offs, wake-ups",
     ["start_thread", "pthread_create", "futex", "finish_task_switch", "try_to_wake_up",
      "schedule"]),
    ("parsing, planning, the plan's hand-off",
     ["nxcc::plan::", "nxcc::cli::", "handoff", "plan::wire"]),
    ("other page faults (first touch of heap, stack, data)", ["exc_page_fault"]),
]


def profile(nxcc, runs, data, launch, env):
    script = (f"for i in $(seq {runs}); do {nxcc} compile {MODEL} --target trn2 --toolchain sim"
              f" --output out.neff >/dev/null || exit 1; rm out.neff; done")
    subprocess.run(["perf", "record", "-q", "-F", str(FREQ), "-e", "cpu-clock", "-g", "-o", data,
                    "--", "sh", "-c", script], cwd=launch, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def samples(data):
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    comm, frames = None, []
    for line in out.splitlines() + [""]:
        if not line.strip():
            if comm is not None:
                yield comm, " ".join(frames)
            comm, frames = None, []
        elif not line[0].isspace():
            comm, frames = line.split()[0], []
        else:
            frames.append(line.strip())


def classify(data, counts):
    for comm, chain in samples(data):
        if comm.startswith(TOOLS):
            counts["the tools after exec (also in the replay)"] += 1
        elif comm.startswith("nxcc"):
            for phase, marks in PHASES:
                if any(m in chain for m in marks):
                    counts[phase] += 1
                    break
            else:
                counts["other"] += 1


def main():
    builds = [os.path.abspath(sys.argv[1])]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    if len(sys.argv) > 3:
        builds.append(os.path.abspath(sys.argv[3]))
    tmp = tempfile.mkdtemp(prefix="nxcc-bench-phases-", dir=os.path.join(ROOT, "target"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NXCC_SIM_")}
        env.update(XDG_CACHE_HOME=os.path.join(tmp, "xdg"), NXCC_SIM_WORK_MS="*:0")
        launch = os.path.join(tmp, "launch")
        os.makedirs(launch)
        counts = [collections.Counter() for _ in builds]
        for i, nxcc in enumerate(builds):
            profile(nxcc, 3, os.path.join(tmp, "warm.data"), launch, env)
        for half in range(2):
            for i, nxcc in enumerate(builds):
                data = os.path.join(tmp, f"{i}-{half}.data")
                profile(nxcc, runs // 2, data, launch, env)
                classify(data, counts[i])
        per = 1e6 / FREQ / (runs // 2 * 2)
        names = [p for p, _ in PHASES] + ["other"]
        head = " | ".join(f"{'A' if i == 0 else 'B'}: µs per compile" for i in range(len(builds)))
        print(f"| phase (nxcc's own processes) | {head} |")
        print("|---|" + "---|" * len(builds))
        for name in names:
            print(f"| {name} | " + " | ".join(f"{c[name] * per:.0f}" for c in counts) + " |")
        own = [sum(c[n] for n in names) for c in counts]
        print("| **nxcc's own, in all** | " + " | ".join(f"**{o * per:.0f}**" for o in own) + " |")
        tools = "the tools after exec (also in the replay)"
        print(f"| {tools} | " + " | ".join(f"{c[tools] * per:.0f}" for c in counts) + " |")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
