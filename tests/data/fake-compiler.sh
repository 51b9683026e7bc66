#!/bin/sh
# A stand-in for an installed `neuronx-cc`, for the tests of nxcc's external-compiler engine
# (`parallel-compile --compiler PATH`). It takes the compiler's command line,
#
#     fake-compiler.sh compile [ARGS...] --output OUT
#
# (the last --output wins, as in argparse) and writes OUT: a header and the checksum of every
# `*.pb` / `*.hlo` argument, so the same model gives the same bytes. Driven by the environment:
#
#   FAKE_COMPILER_CRASH=segv|abort|kill|exit=N   die by that signal (or exit N) instead
#   FAKE_COMPILER_HOLD_MB=N                      hold N MiB (through python3) while working
#   FAKE_COMPILER_SLEEP=SECONDS                  work this long (default with HOLD_MB: 0.2)
#   FAKE_COMPILER_BUSY=1                         with HOLD_MB: that work keeps a CPU busy
#   FAKE_COMPILER_RECORD=FILE                    append "<pid> <start ns> <end ns> <held MiB>
#                                                <checksum of each model>" per run
#   FAKE_COMPILER_ECHO=TEXT                      shown by --version and by usage errors
#   FAKE_COMPILER_WHICH=FILE                     write where `neuronx-cc` is on its PATH (or
#                                                "none") into FILE
#
# A model whose bytes contain the line "fake-compiler: fail" fails to compile: two error lines
# on stderr, exit status 70 (the real compiler's status for a failed compile). `--version`
# prints a version line and the arguments; any other subcommand is a usage error (status 2)
# naming its arguments.
set -eu
if [ "${1:-}" = --version ]; then
    echo "fake-compiler 2.24.0.0 (arguments: $*) (FAKE_COMPILER_ECHO=${FAKE_COMPILER_ECHO:-})"
    exit 0
fi
if [ "${1:-}" != compile ]; then
    echo "usage: $0 compile [ARGS...] --output OUT" >&2
    echo "fake-compiler: error: unknown subcommand in: $* (FAKE_COMPILER_ECHO=${FAKE_COMPILER_ECHO:-})" >&2
    exit 2
fi
shift
out=""
prev=""
for a in "$@"; do
    case "$prev" in --output | -o) out=$a ;; esac
    case "$a" in --output=*) out=${a#--output=} ;; esac
    prev=$a
done
if [ -z "$out" ]; then
    echo "fake-compiler: error: the following arguments are required: --output" >&2
    exit 2
fi
start=$(date +%s%N)
if [ -n "${FAKE_COMPILER_WHICH:-}" ]; then
    command -v neuronx-cc >"$FAKE_COMPILER_WHICH" || echo none >"$FAKE_COMPILER_WHICH"
fi
echo "fake-compiler: compiling into $out"
if [ -n "${FAKE_COMPILER_HOLD_MB:-}" ]; then
    python3 -c '
import sys, time
b = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
if sys.argv[3] == "1":
    end = time.process_time() + float(sys.argv[2])
    while time.process_time() < end:
        pass
else:
    time.sleep(float(sys.argv[2]))
' "$FAKE_COMPILER_HOLD_MB" "${FAKE_COMPILER_SLEEP:-0.2}" "${FAKE_COMPILER_BUSY:-0}"
elif [ -n "${FAKE_COMPILER_SLEEP:-}" ]; then
    sleep "$FAKE_COMPILER_SLEEP"
fi
models=""
failing=""
for a in "$@"; do
    case "$a" in *.pb | *.hlo)
        if [ -f "$a" ]; then
            models="$models $(cksum <"$a" | cut -d' ' -f1)"
            if grep -qx 'fake-compiler: fail' "$a"; then failing=$a; fi
        fi ;;
    esac
done
if [ -n "${FAKE_COMPILER_RECORD:-}" ]; then
    echo "$$ $start $(date +%s%N) ${FAKE_COMPILER_HOLD_MB:-0}$models" >>"$FAKE_COMPILER_RECORD"
fi
if [ -n "$failing" ]; then
    echo "fake-compiler: error: $failing cannot be compiled" >&2
    echo "fake-compiler: error: compilation failed" >&2
    exit 70
fi
case "${FAKE_COMPILER_CRASH:-}" in
    segv) echo "fake-compiler: crashing" >&2; kill -SEGV $$ ;;
    abort) echo "fake-compiler: aborting" >&2; kill -ABRT $$ ;;
    kill) kill -KILL $$ ;;
    exit=*) echo "fake-compiler: error: failing on purpose" >&2; exit "${FAKE_COMPILER_CRASH#exit=}" ;;
esac
{
    echo "FAKE-NEFF 1"
    for a in "$@"; do
        case "$a" in *.pb | *.hlo) [ -f "$a" ] && cksum <"$a" ;; esac
    done
} >"$out"
echo "Compiler status PASS"
