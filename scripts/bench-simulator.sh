#!/usr/bin/env bash
# The simulator's benchmark on Alibaba's GPU-sharing trace (cluster-trace-gpu-v2023, Weng et al.,
# ATC '23; research-use data: download it yourself, it is not part of this repository):
#
#   scripts/bench-simulator.sh /path/to/alibaba-gpu-v2023     (make bench does this when
#                                                              GEOMETER_TRACE names that folder)
#
# Load mode as the trace's authors run it (shuffled pods, one a second, until requests reach 130%
# of 512 GPUs: 32 A100-80GB + 32 H100-80GB nodes of 8) on four pod lists and three seeds, every
# strategy at the simulator's defaults; then the default list replayed by its own timestamps on
# 64 GPUs. Writes target/bench-results/simulator.md for scripts/bench-results.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-measured.sh
trace="${1:?usage: scripts/bench-simulator.sh TRACE_DIR (the folder holding openb_pod_list_*.csv)}"
[ -f "$trace/openb_pod_list_default.csv" ] || { echo "bench-simulator: no openb_pod_list_default.csv in $trace" >&2; exit 1; }
cargo build --release -q
geometer="${CARGO_TARGET_DIR:-target}/release/geometer"
out="${CARGO_TARGET_DIR:-target}/bench-results"
mkdir -p "$out"
map=G2=H100-80GB,G3=A100-80GB,T4=A100-80GB,P100=A100-80GB,V100M16=A100-80GB,V100M32=A100-80GB,A10=A100-80GB
load_avg="$(cut -d' ' -f1 /proc/loadavg)"
started=$(date +%s)

# Field N (1-based, after the strategy's own) of a strategy's row in a `geometer simulate` table.
field() { grep "^| $2 |" "$1" | awk -F' [|] ' -v n="$3" '{ print $(n + 1) }'; }

rows=()
for list in default gpushare80 gpuspec33 multigpu40; do
  for seed in 42 43 44; do
    run="$(mktemp)"
    "$geometer" simulate --trace "$trace/openb_pod_list_$list.csv" --cluster 32xA100-80GB:8,32xH100-80GB:8 \
      --model-map "$map" --load 1.3 --seed "$seed" > "$run"
    served=() p95=() reconfigured=()
    for s in greedy geometer geometer-evict; do
      served+=("$(field "$run" "$s" 1)"); p95+=("$(field "$run" "$s" 4)"); reconfigured+=("$(field "$run" "$s" 11)")
    done
    rows+=("| $list | $seed | ${served[0]} / ${served[1]} / ${served[2]} | $(field "$run" "upper bound (capacity)" 1) | ${p95[0]} / ${p95[1]} / ${p95[2]} | $(field "$run" geometer 8) | ${reconfigured[0]} / ${reconfigured[1]} / ${reconfigured[2]} | $(field "$run" geometer-evict 13) | $(field "$run" whole-gpu 1) |")
    rm -f "$run"
  done
done
timestamps="$(mktemp)"
"$geometer" simulate --trace "$trace/openb_pod_list_default.csv" --cluster 4xA100-80GB:8,4xH100-80GB:8 > "$timestamps"

{
  measured "release build" "$started" "$load_avg"
  echo "Command: \`scripts/bench-simulator.sh TRACE_DIR\`. Load: \`openb_pod_list_{default,gpushare80,gpuspec33,multigpu40}.csv\`, seeds 42-44, load mode to 130% of 512 GPUs; then \`openb_pod_list_default.csv\` by its timestamps on 64 GPUs."
  echo
  echo "| pod list | seed | pods served: greedy / geometer / geometer-evict | upper bound (capacity) | wait p95 (s): greedy / geometer / geometer-evict | memory allocated / usable while demand > capacity (geometer) | GPUs reconfigured: greedy / geometer / geometer-evict | evictions (geometer-evict) | pods served: whole-gpu |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "The default list by its own timestamps, 4 A100-80GB + 4 H100-80GB nodes of 8 GPUs:"
  echo
  grep '^|' "$timestamps"
} > "$out/simulator.md"
rm -f "$timestamps"
echo "wrote $out/simulator.md"
