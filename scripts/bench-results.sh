#!/usr/bin/env bash
# Puts the tables the benchmarks wrote (target/bench-results/NAME.md, see benches/support/report.rs
# and scripts/bench-simulator.sh) into BENCHMARKS.md, each between its markers
#
#   <!-- bench-results: NAME -->
#   ...replaced...
#   <!-- /bench-results -->
#
# so no figure there is copied by hand. A section whose benchmark did not run keeps its table.
# The last step of `make bench`; run it alone after one benchmark: scripts/bench-results.sh
set -euo pipefail
cd "$(dirname "$0")/.."
results="${CARGO_TARGET_DIR:-target}/bench-results"
doc=BENCHMARKS.md
[ -d "$results" ] || { echo "bench-results: no $results folder; run make bench (or one cargo bench) first" >&2; exit 1; }
for file in "$results"/*.md; do
  name="$(basename "$file" .md)"
  grep -q "^<!-- bench-results: $name -->$" "$doc" || {
    echo "bench-results: $doc has no '<!-- bench-results: $name -->' section for $file" >&2
    exit 1
  }
  awk -v name="$name" -v file="$file" '
    $0 == "<!-- bench-results: " name " -->" { print; while ((getline line < file) > 0) print line; skip = 1; next }
    skip && $0 == "<!-- /bench-results -->" { skip = 0 }
    !skip { print }
  ' "$doc" > "$doc.new"
  mv "$doc.new" "$doc"
  echo "bench-results: $name from $file"
done
