# Sourced by the benchmark scripts: `measured BUILD STARTED LOAD_AVG` prints the line every
# BENCHMARKS.md table starts with (date, commit, machine, load, build, time taken since STARTED,
# a `date +%s`).
measured() {
  local cpu mem commit
  cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  mem="$(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)"
  commit="$(git rev-parse --short=7 HEAD)"
  git diff --quiet HEAD -- 2>/dev/null || commit="$commit+changes"
  echo "Measured $(date -u +%Y-%m-%d) at commit \`$commit\` on $cpu, $(nproc) cores, $mem GiB (load average $3 at the start); $1, $(( $(date +%s) - $2 )) s for every run."
}
