#!/usr/bin/env bash
# DynamicMIG churn: every GPU a DynamicMIG H100 (NVIDIA's DRA driver makes each instance as a
# claim is allocated; kube-scheduler takes the first free device), first-fit alone against
# Geometer's compaction, on churn traces `geometer simulate --generate` writes (3,000 MIG pods of
# mixed profiles arriving over time, each running for a while: seeds 42-44), on 48, 64 and 80
# GPUs. Writes target/bench-results/dynamic_mig.md for scripts/bench-results.sh (make bench).
#
#   scripts/bench-dynamic-mig.sh
#
# GEOMETER_BIN=path/to/geometer uses that binary instead of a release build (the results are the
# simulator's, the same from any build; only the time taken differs).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-measured.sh
geometer="${GEOMETER_BIN:-}"
build="binary $geometer"
if [ -z "$geometer" ]; then
  cargo build --release -q
  geometer="${CARGO_TARGET_DIR:-target}/release/geometer"
  build="release build"
fi
out="${CARGO_TARGET_DIR:-target}/bench-results"
mkdir -p "$out"
load_avg="$(cut -d' ' -f1 /proc/loadavg)"
started=$(date +%s)

# Field N (1-based, after the policy's own) of a policy's row in a `geometer simulate --dynamic-mig` table.
field() { grep "^| $2 |" "$1" | awk -F' [|] ' -v n="$3" '{ print $(n + 1) }' | sed 's/ *|$//'; }

rows=()
for seed in 42 43 44; do
  trace="$(mktemp)"
  "$geometer" simulate --generate 3000 --seed "$seed" > "$trace"
  for nodes in 6 8 10; do
    run="$(mktemp)"
    "$geometer" simulate --trace "$trace" --format geometer --cluster "${nodes}xH100-80GB:8" --dynamic-mig > "$run"
    ff="first-fit" cp="first-fit + compaction"
    rows+=("| $seed | $((nodes * 8)) | $(field "$run" "$ff" 2) / $(field "$run" "$cp" 2) | $(field "$run" "$ff" 3) / $(field "$run" "$cp" 3) | $(field "$run" "$cp" 4) | $(field "$run" "$cp" 5) | $(field "$run" "$cp" 6) |")
    rm -f "$run"
  done
  rm -f "$trace"
done

{
  measured "$build" "$started" "$load_avg"
  echo "Command: \`scripts/bench-dynamic-mig.sh\`. Load: \`geometer simulate --generate 3000 --seed S\` (S = 42-44; every pod ends), every GPU a DynamicMIG H100-80GB; a moved pod starts again 30 s later (\`--drain-secs\`)."
  echo
  echo "| seed | GPUs | served: first-fit / compaction | p95 wait (s): first-fit / compaction | pods moved | moved per hour | compactions |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} > "$out/dynamic_mig.md"
echo "bench-dynamic-mig: wrote $out/dynamic_mig.md"
