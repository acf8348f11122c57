#!/usr/bin/env bash
# `make demo-k8s`: the demo's workload on the real Kubernetes control plane. Builds it when
# missing (scripts/k8s-control-plane.sh), starts it with deploy/base applied, runs
# `geometer demo --join` against it, and stops it at the end. Extra arguments go to the demo
# (e.g. `make demo-k8s ARGS="--policy-mode Approve --wait-for-approval"`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/k8s-control-plane.sh >/dev/null
# The dev profile make demo and make test share; GEOMETER_DEMO_PROFILE=release for a release build.
profile="${GEOMETER_DEMO_PROFILE:-debug}"
# One build of both, so that the solver gets geometer's backend feature in testkit's build too.
flags=(-q -p geometer -p geometer-testkit --bin geometer --bin control-plane)
if [ "$profile" = release ]; then cargo build --release "${flags[@]}"; else cargo build "${flags[@]}"; fi
work="$(mktemp -d -t geometer-demo-k8s-XXXXXX)"
"target/$profile/control-plane" > "$work/control-plane.out" 2> "$work/control-plane.log" &
cp_pid=$!
trap 'kill $cp_pid 2>/dev/null; wait $cp_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q '^KUBECONFIG=' "$work/control-plane.out" 2>/dev/null && break
  kill -0 $cp_pid 2>/dev/null || { cat "$work/control-plane.log" >&2; exit 1; }
  sleep 0.5
done
kubeconfig="$(sed -n 's/^KUBECONFIG=//p' "$work/control-plane.out")"
[ -n "$kubeconfig" ] || { echo "demo-k8s: the control plane did not come up; see $work/control-plane.log" >&2; exit 1; }
echo "Real control plane up. Watch it from another terminal with the real kubectl:"
echo "  export KUBECONFIG=$kubeconfig"
echo "  kubectl get nodes,pods -A; kubectl get migplans,mignodes -w"
echo
KUBECONFIG="$kubeconfig" "target/$profile/geometer" demo --join "$work/nodes" "$@"
