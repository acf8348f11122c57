#!/usr/bin/env bash
# A READ-ONLY device check for a machine with NVIDIA GPUs: it collects what the driver, NVML
# (through `geometer agent probe`) and nvidia-smi report into one JSON file, for comparing with
# Geometer's catalog. It NEVER changes MIG mode or geometry and never resets anything: no
# `nvidia-smi -mig`, no `nvidia-smi mig -cgi/-dgi/-cci/-dci`, no `nvidia-smi -r/--gpu-reset`, no
# `nvidia-mig-parted apply`, nothing that writes to a GPU.
#
# These are the only commands it runs (each with `timeout`, where present; a failing command is
# recorded in the report with its exit code, never fatal):
#   uname -n, uname -r, uname -a, hostname, date -u         (host, kernel, time)
#   git -C <repo> describe --always --dirty                  (which Geometer, when in a checkout)
#   cat /proc/driver/nvidia/version                          (kernel driver)
#   ls -l /dev/nvidia-caps
#   ls -ld /dev/nvidia*
#   nvidia-smi -L
#   nvidia-smi --query-gpu=index,name,pci.device_id,memory.total,mig.mode.current,mig.mode.pending,driver_version --format=csv,noheader
#   nvidia-smi mig -lgip                                     (GPU-instance profiles)
#   nvidia-smi mig -lgipp                                    (their possible placements)
#   nvidia-smi mig -lcip                                     (compute-instance profiles)
#   nvidia-smi mig -lgi                                      (existing GPU instances)
#   nvidia-smi mig -lci                                      (existing compute instances)
#   nvidia-smi -q -d MEMORY                                  (trimmed to 32 KiB)
#   nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader
#   a scan of /proc/<pid>/fd for open /dev/nvidia* and /dev/nvidia-caps/* (who holds the GPUs:
#                                                             the clients a MIG change must stop)
#   a scan of /proc/<pid>/environ for MIG_STRATEGY           (the device plugin's MIG strategy)
#   geometer --version
#   geometer agent probe -o json [--catalog FILE]            (NVML, read-only)
#   geometer agent probe [--catalog FILE]                    (the same as text)
#   geometer catalog show <pci.device_id> -o json [--catalog FILE]   (offline; once per model)
#   cargo build --release --bin geometer                     (only when no geometer binary is
#                                                             found, cargo is present, a GPU was
#                                                             seen and --no-build is not given)
# plus python3 (or jq) to assemble the JSON, env, and mktemp/cat/wc/head/tail/grep/tr/sed/cut/mv/rm
# on its own temporary files and the report.
#
# Without an NVIDIA driver it still writes a report, with "nvidia": false and the reason, and
# exits 0; with --require-gpu it then exits 1.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/device-check.sh [--out PATH] [--require-gpu] [--catalog FILE] [--no-build]
                               [--timeout SECONDS]

Read-only device check: collects nvidia-smi listings, `geometer agent probe -o json` (NVML
compared with the catalog), /dev/nvidia* and driver/kernel versions into one JSON report.
Never changes MIG mode or geometry, never resets a GPU.

Options:
  --out PATH         where to write the report
                     (default: device-check-<hostname>-<UTC date and time>.json)
  --require-gpu      exit 1 when no usable NVIDIA GPU is found (the report is still written)
  --catalog FILE     extra catalog models, passed to `geometer agent probe` and `catalog show`
  --no-build         never run `cargo build --release` to get a geometer binary
  --timeout SECONDS  limit for each command (default 120; needs `timeout`)
  -h, --help         this text

The geometer binary: $GEOMETER, else target/release/geometer, else target/debug/geometer
(under $CARGO_TARGET_DIR or the repository's target/), else `geometer` on PATH, else built
with `cargo build --release --bin geometer` when cargo is present and a GPU was seen.

The report is assembled with python3, or jq when python3 is missing
(DEVICE_CHECK_ASSEMBLER=python3|jq forces one; the tests use it).

Exit status: 0 report written; 1 --require-gpu and no usable GPU; 2 bad usage;
3 neither python3 nor jq (raw outputs are left in a directory named on stderr).
EOF
}

out=""
require_gpu=false
catalog=""
no_build=false
timeout_s=120
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "device-check: --out needs a path" >&2; exit 2; }; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    --require-gpu) require_gpu=true; shift ;;
    --catalog) [ $# -ge 2 ] || { echo "device-check: --catalog needs a file" >&2; exit 2; }; catalog="$2"; shift 2 ;;
    --catalog=*) catalog="${1#--catalog=}"; shift ;;
    --no-build) no_build=true; shift ;;
    --timeout) [ $# -ge 2 ] || { echo "device-check: --timeout needs seconds" >&2; exit 2; }; timeout_s="$2"; shift 2 ;;
    --timeout=*) timeout_s="${1#--timeout=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "device-check: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$timeout_s" in ''|*[!0-9]*|0) echo "device-check: --timeout wants a positive number of seconds" >&2; exit 2 ;; esac
if [ -n "$catalog" ] && [ ! -r "$catalog" ]; then
  echo "device-check: cannot read --catalog $catalog" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
host="$(hostname 2>/dev/null || uname -n 2>/dev/null || echo unknown)"
generated_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
if [ -z "$out" ]; then
  safe_host="$(printf '%s' "$host" | tr -c 'A-Za-z0-9._-' '_')"
  out="device-check-${safe_host}-$(date -u +%Y%m%dT%H%M%SZ).json"
fi
out_dir="$(dirname "$out")"
[ -d "$out_dir" ] || { echo "device-check: directory $out_dir (of --out $out) does not exist" >&2; exit 2; }

raw="$(mktemp -d -t geometer-device-check-XXXXXX)"
keep_raw=false
# shellcheck disable=SC2317 # called by the trap
cleanup() { if [ "$keep_raw" = false ]; then rm -rf "$raw"; fi; }
trap cleanup EXIT
mkdir -p "$raw/cmds"

have_timeout=false
command -v timeout >/dev/null 2>&1 && have_timeout=true
seq_no=0
default_limit=262144

next_dir() {
  seq_no=$((seq_no + 1))
  cmd_dir="$raw/cmds/$(printf '%03d' "$seq_no")"
  mkdir -p "$cmd_dir"
}

# trim FILE LIMIT head|tail: keeps LIMIT bytes of FILE and records its size and whether it was cut.
trim() {
  local file="$1" limit="$2" end="$3" bytes
  bytes="$(wc -c <"$file" | tr -d ' ')"
  printf '%s' "$bytes" >"$file.bytes"
  if [ "$bytes" -gt "$limit" ]; then
    if [ "$end" = tail ]; then tail -c "$limit" "$file" >"$file.cut"; else head -c "$limit" "$file" >"$file.cut"; fi
    mv "$file.cut" "$file"
    printf 'true' >"$file.truncated"
  else
    printf 'false' >"$file.truncated"
  fi
}

# run KEY LIMIT head|tail TIMEOUT(yes|no) ARGV...: runs ARGV, stdin from /dev/null, and keeps its
# exit code, stdout and stderr under KEY. Never fails.
run() {
  local key="$1" limit="$2" end="$3" use_timeout="$4" rc
  shift 4
  next_dir
  printf '%s' "$key" >"$cmd_dir/key"
  if [ "$use_timeout" = yes ] && [ "$have_timeout" = true ]; then
    if timeout -k 5 "$timeout_s" "$@" </dev/null >"$cmd_dir/stdout" 2>"$cmd_dir/stderr"; then rc=0; else rc=$?; fi
    if [ "$rc" -eq 124 ]; then printf 'true' >"$cmd_dir/timed_out"; fi
  else
    if "$@" </dev/null >"$cmd_dir/stdout" 2>"$cmd_dir/stderr"; then rc=0; else rc=$?; fi
  fi
  printf '%s' "$rc" >"$cmd_dir/rc"
  trim "$cmd_dir/stdout" "$limit" "$end"
  trim "$cmd_dir/stderr" "$limit" "$end"
  last_rc="$rc"
  last_stdout="$cmd_dir/stdout"
  last_stderr="$cmd_dir/stderr"
}

# skip KEY REASON: records that KEY was not run, and why.
skip() {
  next_dir
  printf '%s' "$1" >"$cmd_dir/key"
  printf '%s' "$2" >"$cmd_dir/skipped"
}

first_line() { head -n 1 "$1" 2>/dev/null | tr -d '\r' | cut -c1-300; }

# --- host --------------------------------------------------------------------------------------
run "uname -a" "$default_limit" head yes uname -a
kernel="$(uname -r 2>/dev/null || echo unknown)"
if command -v git >/dev/null 2>&1 && [ -e "$root/.git" ]; then
  run "git describe --always --dirty" "$default_limit" head yes git -C "$root" describe --always --dirty
else
  skip "git describe --always --dirty" "not in a git checkout, or git is missing"
fi

# --- driver and device nodes --------------------------------------------------------------------
run "cat /proc/driver/nvidia/version" "$default_limit" head yes cat /proc/driver/nvidia/version
run "ls -l /dev/nvidia-caps" "$default_limit" head yes ls -l /dev/nvidia-caps
shopt -s nullglob
dev_nodes=(/dev/nvidia*)
shopt -u nullglob
if [ ${#dev_nodes[@]} -gt 0 ]; then
  run "ls -ld /dev/nvidia*" "$default_limit" head yes ls -ld -- "${dev_nodes[@]}"
else
  skip "ls -ld /dev/nvidia*" "no /dev/nvidia* device nodes"
fi

# --- nvidia-smi (listing only) ------------------------------------------------------------------
query_key="nvidia-smi --query-gpu=index,name,pci.device_id,memory.total,mig.mode.current,mig.mode.pending,driver_version --format=csv,noheader"
persistence_key="nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader"
listing_keys=("nvidia-smi mig -lgip" "nvidia-smi mig -lgipp" "nvidia-smi mig -lcip" "nvidia-smi mig -lgi" "nvidia-smi mig -lci")
nvidia=false
nvidia_reason=""
query_out=""
nvsmi="$(command -v nvidia-smi 2>/dev/null || true)"
if [ -z "$nvsmi" ]; then
  nvidia_reason="nvidia-smi not found on PATH"
  if [ -r /proc/driver/nvidia/version ]; then
    nvidia_reason="$nvidia_reason (the kernel driver is loaded: /proc/driver/nvidia/version exists, but its user-space tools are not on PATH)"
  else
    nvidia_reason="$nvidia_reason and no NVIDIA kernel driver is loaded (/proc/driver/nvidia/version is absent)"
  fi
  skip "nvidia-smi -L" "$nvidia_reason"
else
  run "nvidia-smi -L" "$default_limit" head yes "$nvsmi" -L
  gpu_lines="$(grep -c '^GPU ' "$last_stdout" || true)"
  if [ "$last_rc" -ne 0 ]; then
    msg="$(first_line "$last_stdout")"
    [ -n "$msg" ] || msg="$(first_line "$last_stderr")"
    nvidia_reason="nvidia-smi -L failed (exit $last_rc): ${msg:-no output}"
  elif [ "$gpu_lines" -eq 0 ]; then
    nvidia_reason="nvidia-smi -L listed no GPUs"
  else
    nvidia=true
    nvidia_reason="nvidia-smi -L listed $gpu_lines GPU(s)"
  fi
fi
if [ "$nvidia" = true ]; then
  run "$query_key" "$default_limit" head yes "$nvsmi" \
    --query-gpu=index,name,pci.device_id,memory.total,mig.mode.current,mig.mode.pending,driver_version \
    --format=csv,noheader
  [ "$last_rc" -eq 0 ] && query_out="$last_stdout"
  run "nvidia-smi mig -lgip" "$default_limit" head yes "$nvsmi" mig -lgip
  run "nvidia-smi mig -lgipp" "$default_limit" head yes "$nvsmi" mig -lgipp
  run "nvidia-smi mig -lcip" "$default_limit" head yes "$nvsmi" mig -lcip
  run "nvidia-smi mig -lgi" "$default_limit" head yes "$nvsmi" mig -lgi
  run "nvidia-smi mig -lci" "$default_limit" head yes "$nvsmi" mig -lci
  run "nvidia-smi -q -d MEMORY" 32768 head yes "$nvsmi" -q -d MEMORY
  run "$persistence_key" "$default_limit" head yes "$nvsmi" --query-gpu=index,persistence_mode --format=csv,noheader
else
  for key in "$query_key" "${listing_keys[@]}" "nvidia-smi -q -d MEMORY" "$persistence_key"; do
    skip "$key" "no usable NVIDIA GPU: $nvidia_reason"
  done
fi

# --- who holds the GPUs (read-only: /proc only) ------------------------------------------------
# What blocks a GPU-instance destroy or a MIG mode change: every process with a GPU device node
# open, and the device plugin's MIG strategy (only `mixed` advertises each profile on its own).
# shellcheck disable=SC2016 # expanded by the inner bash
holders_script='for fd in /proc/[0-9]*/fd/*; do t="$(readlink "$fd" 2>/dev/null)" || continue; case "$t" in /dev/nvidia*) p="${fd#/proc/}"; p="${p%%/*}"; printf "%s %s %s\n" "$p" "$(cat "/proc/$p/comm" 2>/dev/null)" "$t";; esac; done | sort -u'
run "open /dev/nvidia* handles (/proc/*/fd)" "$default_limit" head yes bash -c "$holders_script"
# shellcheck disable=SC2016 # expanded by the inner bash
strategy_script='for e in /proc/[0-9]*/environ; do s="$( { tr "\0" "\n" <"$e"; } 2>/dev/null | grep "^MIG_STRATEGY=")" || continue; p="${e#/proc/}"; p="${p%%/*}"; printf "%s %s %s\n" "$p" "$(cat "/proc/$p/comm" 2>/dev/null)" "$s"; done | sort -u'
run "MIG_STRATEGY of running processes (/proc/*/environ)" "$default_limit" head yes bash -c "$strategy_script"

# --- geometer -----------------------------------------------------------------------------------
target_dir="${CARGO_TARGET_DIR:-$root/target}"
geometer=""
geometer_source=""
geometer_note=""
if [ -n "${GEOMETER:-}" ]; then
  if [ -f "$GEOMETER" ] && [ -x "$GEOMETER" ]; then
    geometer="$GEOMETER"
  elif command -v "$GEOMETER" >/dev/null 2>&1; then
    geometer="$(command -v "$GEOMETER")"
  else
    geometer_note="GEOMETER=$GEOMETER is not an executable; no probe"
    echo "device-check: warning: $geometer_note" >&2
  fi
  [ -z "$geometer" ] || geometer_source="\$GEOMETER"
elif [ -x "$target_dir/release/geometer" ]; then
  geometer="$target_dir/release/geometer"; geometer_source="target/release"
elif [ -x "$target_dir/debug/geometer" ]; then
  geometer="$target_dir/debug/geometer"; geometer_source="target/debug"
elif command -v geometer >/dev/null 2>&1; then
  geometer="$(command -v geometer)"; geometer_source="PATH"
elif [ "$no_build" = true ]; then
  geometer_note="no geometer binary found and --no-build given"
elif ! command -v cargo >/dev/null 2>&1; then
  geometer_note="no geometer binary found (\$GEOMETER, target/release, target/debug, PATH) and no cargo to build one"
elif [ "$nvidia" != true ]; then
  geometer_note="no geometer binary found; not building one without a usable NVIDIA GPU ($nvidia_reason)"
else
  echo "device-check: no geometer binary; running cargo build --release --bin geometer (minutes)" >&2
  # shellcheck disable=SC2016 # $1 is expanded by the inner bash
  run "cargo build --release --bin geometer" 65536 tail no bash -c 'cd "$1" && cargo build --release --bin geometer' _ "$root"
  if [ "$last_rc" -eq 0 ] && [ -x "$target_dir/release/geometer" ]; then
    geometer="$target_dir/release/geometer"; geometer_source="built with cargo build --release"
  else
    geometer_note="cargo build --release --bin geometer failed (exit $last_rc); see its entry under commands"
  fi
fi

catalog_args=()
[ -z "$catalog" ] || catalog_args=(--catalog "$catalog")
catalog_keys=()
probe_json_key="geometer agent probe -o json"
probe_text_key="geometer agent probe"
if [ -n "$geometer" ]; then
  run "geometer --version" "$default_limit" head yes "$geometer" --version
  run "$probe_json_key" "$default_limit" head yes env -u GEOMETER_LOG_JSON "$geometer" agent probe -o json ${catalog_args[@]+"${catalog_args[@]}"}
  run "$probe_text_key" "$default_limit" head yes env -u GEOMETER_LOG_JSON "$geometer" agent probe ${catalog_args[@]+"${catalog_args[@]}"}
  # The catalog's record of each model nvidia-smi reports (names the device plugin advertises).
  if [ -n "$query_out" ]; then
    seen=" "
    while IFS=, read -r _ _ pci _; do
      pci="$(printf '%s' "$pci" | tr -d ' \r')"
      case "$pci" in 0x*|0X*) ;; *) continue ;; esac
      case "$seen" in *" $pci "*) continue ;; esac
      seen="$seen$pci "
      key="geometer catalog show $pci -o json"
      catalog_keys+=("$key")
      run "$key" "$default_limit" head yes env -u GEOMETER_LOG_JSON "$geometer" catalog show "$pci" -o json ${catalog_args[@]+"${catalog_args[@]}"}
    done <"$query_out"
  fi
else
  skip "geometer --version" "$geometer_note"
  skip "$probe_json_key" "$geometer_note"
  skip "$probe_text_key" "$geometer_note"
fi

# --- assemble -----------------------------------------------------------------------------------
export DC_RAW="$raw" DC_GENERATED_AT="$generated_at" DC_HOSTNAME="$host" DC_KERNEL="$kernel"
export DC_NVIDIA="$nvidia" DC_NVIDIA_REASON="$nvidia_reason" DC_QUERY_KEY="$query_key"
export DC_GEOMETER="$geometer" DC_GEOMETER_SOURCE="$geometer_source" DC_GEOMETER_NOTE="$geometer_note"
export DC_PROBE_JSON_KEY="$probe_json_key" DC_PROBE_TEXT_KEY="$probe_text_key"
export DC_CATALOG_FILE="$catalog"
DC_CATALOG_KEYS="$(printf '%s\n' ${catalog_keys[@]+"${catalog_keys[@]}"})"
export DC_CATALOG_KEYS

assemble_python() {
  python3 - "$1" <<'PY'
import csv, json, os, re, sys

raw = os.environ["DC_RAW"]

def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return None

commands = {}
cmds = os.path.join(raw, "cmds")
for d in sorted(os.listdir(cmds)):
    p = os.path.join(cmds, d)
    key = read(os.path.join(p, "key"))
    entry = {"command": key}
    skipped = read(os.path.join(p, "skipped"))
    if skipped is not None:
        entry.update(exitCode=None, skipped=skipped)
    else:
        entry.update(
            exitCode=int(read(os.path.join(p, "rc"))),
            timedOut=read(os.path.join(p, "timed_out")) == "true",
            stdout=read(os.path.join(p, "stdout")),
            stderr=read(os.path.join(p, "stderr")),
            stdoutBytes=int(read(os.path.join(p, "stdout.bytes"))),
            stderrBytes=int(read(os.path.join(p, "stderr.bytes"))),
            stdoutTruncated=read(os.path.join(p, "stdout.truncated")) == "true",
            stderrTruncated=read(os.path.join(p, "stderr.truncated")) == "true",
        )
    commands[key] = entry

def ok(key):
    c = commands.get(key)
    return c if c is not None and c.get("exitCode") == 0 else None

def parse_json(key):
    c = ok(key)
    if c is None:
        return None
    try:
        return json.loads(c["stdout"])
    except ValueError:
        return None

env = os.environ
fields = ["index", "name", "pciDeviceId", "memoryTotal", "migModeCurrent", "migModePending", "driverVersion"]
gpus = []
q = ok(env["DC_QUERY_KEY"])
if q is not None:
    for row in csv.reader(q["stdout"].splitlines(), skipinitialspace=True):
        if not row:
            continue
        gpu = dict(zip(fields, (v.strip() for v in row)))
        if gpu.get("index", "").isdigit():
            gpu["index"] = int(gpu["index"])
        gpus.append(gpu)

probe_cmd = commands.get(env["DC_PROBE_JSON_KEY"], {})
probe_report = parse_json(env["DC_PROBE_JSON_KEY"])
probe_text = commands.get(env["DC_PROBE_TEXT_KEY"], {})
probe = {
    "ran": probe_cmd.get("exitCode") is not None,
    "exitCode": probe_cmd.get("exitCode"),
    "ok": probe_report is not None,
    "report": probe_report,
    "error": None if probe_report is not None else (probe_cmd.get("stderr") or probe_cmd.get("skipped")),
    "text": probe_text.get("stdout"),
}

driver_version, driver_source = None, None
if isinstance(probe_report, dict) and probe_report.get("driverVersion"):
    driver_version, driver_source = probe_report["driverVersion"], "geometer agent probe (NVML)"
elif gpus and gpus[0].get("driverVersion"):
    driver_version, driver_source = gpus[0]["driverVersion"], "nvidia-smi --query-gpu"
else:
    c = ok("cat /proc/driver/nvidia/version")
    m = re.search(r"Kernel Module(?: for [^ ]+)?\s+([0-9][0-9.]*)", c["stdout"]) if c else None
    if m:
        driver_version, driver_source = m.group(1), "/proc/driver/nvidia/version"

NAME_KEYS = {"devicePluginName", "devicePluginNames", "advertisedName", "advertisedNames",
             "resourceName", "resourceNames"}

def find_names(value):
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k in NAME_KEYS:
                found.extend(x for x in (v if isinstance(v, list) else [v]) if isinstance(x, str))
            else:
                found.extend(find_names(v))
    elif isinstance(value, list):
        for v in value:
            found.extend(find_names(v))
    return found

catalog = []
for key in filter(None, env.get("DC_CATALOG_KEYS", "").split("\n")):
    doc = parse_json(key)
    query = key.split(" ")[3]
    models = doc.get("models", []) if isinstance(doc, dict) else []
    if not models:
        catalog.append({"query": query, "model": None,
                        "note": "the catalog does not know this GPU, or `catalog show` failed; see commands"})
        continue
    m = models[0]
    profiles = [{"profile": p.get("name"), "devicePluginName": p.get("device_plugin_name"),
                 "resource": "nvidia.com/mig-" + p["device_plugin_name"] if p.get("device_plugin_name") else None}
                for p in m.get("profiles", [])]
    catalog.append({"query": query, "model": m.get("key"), "profiles": profiles})

names = find_names(probe_report)
if names:
    plugin = {"computed": True, "source": "geometer agent probe", "names": names, "reason": None}
else:
    plugin = {"computed": False, "source": None, "names": [],
              "reason": "not computed: the probe gave no device-plugin names (it did not run, or MIG mode is "
                        "off); compare catalog (what Geometer expects the device plugin to advertise) with "
                        "the profile names of `nvidia-smi mig -lgip`"}
plugin["catalog"] = catalog

report = {
    "schema": "geometer-device-check/v1",
    "readOnly": True,
    "assembler": "python3",
    "generatedAt": env["DC_GENERATED_AT"],
    "hostname": env["DC_HOSTNAME"],
    "kernel": env["DC_KERNEL"],
    "nvidia": env["DC_NVIDIA"] == "true",
    "nvidiaReason": env["DC_NVIDIA_REASON"],
    "driverVersion": driver_version,
    "driverVersionSource": driver_source,
    "gpus": gpus,
    "geometer": {
        "binary": env["DC_GEOMETER"] or None,
        "source": env["DC_GEOMETER_SOURCE"] or None,
        "note": env["DC_GEOMETER_NOTE"] or None,
        "version": (ok("geometer --version") or {}).get("stdout", "").strip() or None,
        "gitDescribe": (ok("git describe --always --dirty") or {}).get("stdout", "").strip() or None,
        "catalogFile": env["DC_CATALOG_FILE"] or None,
    },
    "probe": probe,
    "devicePluginNames": plugin,
    "commands": commands,
}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(report, f, indent=2, ensure_ascii=False)
    f.write("\n")
PY
}

assemble_jq() {
  local dest="$1" d all="$raw/commands.jsonl"
  : >"$all"
  for d in "$raw"/cmds/*/; do
    d="${d%/}"
    if [ -f "$d/skipped" ]; then
      jq -n --rawfile key "$d/key" --rawfile skipped "$d/skipped" \
        '{($key): {command: $key, exitCode: null, skipped: $skipped}}' >>"$all"
    else
      jq -n --rawfile key "$d/key" --rawfile stdout "$d/stdout" --rawfile stderr "$d/stderr" \
        --argjson rc "$(cat "$d/rc")" --argjson to "$([ -f "$d/timed_out" ] && echo true || echo false)" \
        --argjson ob "$(cat "$d/stdout.bytes")" --argjson eb "$(cat "$d/stderr.bytes")" \
        --argjson ot "$(cat "$d/stdout.truncated")" --argjson et "$(cat "$d/stderr.truncated")" \
        '{($key): {command: $key, exitCode: $rc, timedOut: $to, stdout: $stdout, stderr: $stderr,
                   stdoutBytes: $ob, stderrBytes: $eb, stdoutTruncated: $ot, stderrTruncated: $et}}' >>"$all"
    fi
  done
  jq -s 'add' "$all" >"$raw/commands.json"
  jq -n --slurpfile cmds "$raw/commands.json" '
    def nn: if . == "" then null else . end;
    def ok($k): $cmds[0][$k] | select(. != null and .exitCode == 0);
    def parse($k): [ok($k) | .stdout | try fromjson catch empty] | first // null;
    def names: [.. | objects | to_entries[]
                | select(.key as $k | ["devicePluginName","devicePluginNames","advertisedName",
                                       "advertisedNames","resourceName","resourceNames"] | index($k))
                | .value | if type == "array" then .[] else . end | strings];
    $ENV as $env
    | $cmds[0] as $commands
    | ([ok($env.DC_QUERY_KEY) | .stdout | split("\n")[] | select(length > 0)
         | split(",") | map(sub("^\\s+"; "") | sub("\\s+$"; ""))
         | [["index","name","pciDeviceId","memoryTotal","migModeCurrent","migModePending","driverVersion"], .]
         | transpose | map(select(.[0] != null and .[1] != null) | {(.[0]): .[1]}) | add
         | if ((.index // "") | test("^[0-9]+$")) then .index |= tonumber else . end]) as $gpus
    | parse($env.DC_PROBE_JSON_KEY) as $probe
    | ($commands[$env.DC_PROBE_JSON_KEY] // {}) as $pc
    | ([ok("cat /proc/driver/nvidia/version") | .stdout
         | capture("Kernel Module(?: for [^ ]+)?\\s+(?<v>[0-9][0-9.]*)").v] | first // null) as $procv
    | (if ($probe | type) == "object" and (($probe.driverVersion // "") != "")
         then [$probe.driverVersion, "geometer agent probe (NVML)"]
       elif ($gpus | length) > 0 and (($gpus[0].driverVersion // "") != "")
         then [$gpus[0].driverVersion, "nvidia-smi --query-gpu"]
       elif $procv != null then [$procv, "/proc/driver/nvidia/version"]
       else [null, null] end) as $driver
    | [($env.DC_CATALOG_KEYS // "") | split("\n")[] | select(length > 0) | . as $key
       | (parse($key) | if type == "object" then .models // [] else [] end) as $models
       | ($key | split(" ")[3]) as $query
       | if ($models | length) == 0
           then {query: $query, model: null,
                 note: "the catalog does not know this GPU, or `catalog show` failed; see commands"}
           else {query: $query, model: $models[0].key,
                 profiles: [$models[0].profiles[]? | {profile: .name, devicePluginName: .device_plugin_name,
                   resource: (if .device_plugin_name then "nvidia.com/mig-" + .device_plugin_name else null end)}]}
         end] as $catalog
    | ($probe | names) as $names
    | {
        schema: "geometer-device-check/v1",
        readOnly: true,
        assembler: "jq",
        generatedAt: $env.DC_GENERATED_AT,
        hostname: $env.DC_HOSTNAME,
        kernel: $env.DC_KERNEL,
        nvidia: ($env.DC_NVIDIA == "true"),
        nvidiaReason: $env.DC_NVIDIA_REASON,
        driverVersion: $driver[0],
        driverVersionSource: $driver[1],
        gpus: $gpus,
        geometer: {
          binary: ($env.DC_GEOMETER | nn),
          source: ($env.DC_GEOMETER_SOURCE | nn),
          note: ($env.DC_GEOMETER_NOTE | nn),
          version: ([ok("geometer --version") | .stdout | sub("\\s+$"; "")] | first // "" | nn),
          gitDescribe: ([ok("git describe --always --dirty") | .stdout | sub("\\s+$"; "")] | first // "" | nn),
          catalogFile: ($env.DC_CATALOG_FILE | nn)
        },
        probe: {
          ran: ($pc.exitCode != null),
          exitCode: $pc.exitCode,
          ok: ($probe != null),
          report: $probe,
          error: (if $probe != null then null else ($pc.stderr // $pc.skipped) end),
          text: ($commands[$env.DC_PROBE_TEXT_KEY].stdout // null)
        },
        devicePluginNames: ((if ($names | length) > 0
          then {computed: true, source: "geometer agent probe", names: $names, reason: null}
          else {computed: false, source: null, names: [],
                reason: "not computed: the probe gave no device-plugin names (it did not run, or MIG mode is off); compare catalog (what Geometer expects the device plugin to advertise) with the profile names of `nvidia-smi mig -lgip`"}
          end) + {catalog: $catalog}),
        commands: $commands
      }' >"$dest"
}

assembler="${DEVICE_CHECK_ASSEMBLER:-}"
if [ -z "$assembler" ]; then
  if command -v python3 >/dev/null 2>&1; then
    assembler=python3
  elif command -v jq >/dev/null 2>&1; then
    echo "device-check: python3 not found; assembling the report with jq instead" >&2
    assembler=jq
  else
    keep_raw=true
    echo "device-check: neither python3 nor jq is installed, so no JSON report; the raw outputs are in $raw" >&2
    exit 3
  fi
fi
tmp_out="$out.tmp.$$"
case "$assembler" in
  python3) assemble_python "$tmp_out" ;;
  jq) assemble_jq "$tmp_out" ;;
  *) echo "device-check: DEVICE_CHECK_ASSEMBLER must be python3 or jq, not $assembler" >&2; exit 2 ;;
esac
mv "$tmp_out" "$out"

# --- summary ------------------------------------------------------------------------------------
if [ "$nvidia" = true ]; then
  gpu_name=""
  driver=""
  if [ -n "$query_out" ]; then
    IFS=, read -r _ gpu_name _ _ _ _ driver <"$query_out" || true
  fi
  slug="$(printf '%s' "${gpu_name# }" | sed -e 's/^NVIDIA //' | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9.\n' '-' | sed -e 's/--*/-/g' -e 's/^-//' -e 's/-$//')"
  driver="$(printf '%s' "$driver" | tr -d ' \r')"
  echo "device-check: $nvidia_reason; report written to $out" >&2
  echo "device-check: to keep it: cp $out docs/hardware/${slug:-gpu}-${driver:-driver}.json" >&2
else
  echo "device-check: no usable NVIDIA GPU ($nvidia_reason); report written to $out with \"nvidia\": false" >&2
fi
if [ "$require_gpu" = true ] && [ "$nvidia" != true ]; then
  echo "device-check: error: --require-gpu given but no usable NVIDIA GPU was found: $nvidia_reason" >&2
  exit 1
fi
exit 0
