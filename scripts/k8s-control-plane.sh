#!/usr/bin/env bash
# Builds the real Kubernetes control plane that the end-to-end suite runs against:
# kube-apiserver, kube-scheduler and kube-controller-manager from the k8s.io/kubernetes module,
# and etcd from go.etcd.io/etcd/server/v3, into a cache folder keyed by version; and, into the
# same folder, kubectl from the same k8s.io/kubernetes release (so the tests' kubectl matches the
# control plane's version), helm from helm.sh/helm/v3 (the chart tests) and promtool from
# github.com/prometheus/prometheus (the alert and metrics checks). Nothing built here is committed;
# a second run builds only the binaries that are missing, and nothing when all are present.
#
#   scripts/k8s-control-plane.sh          build (or reuse) and print the bin folder
#   scripts/k8s-control-plane.sh --print  print the bin folder without building
#
# k8s.io/kubernetes is not meant to be required as a module: its go.mod replaces every staging
# module k8s.io/<name> with ./staging/src/k8s.io/<name>. A module that requires it must replace
# each of those with its published tag v0.<minor>.<patch>; the list is read from the release's
# own go.mod (the approach kubernetes/kubernetes documents in its README "To use Kubernetes
# code as a library in other applications, see the list of published components").
# The version ldflags follow kubernetes/kubernetes hack/lib/version.sh (kube::version::ldflags).
set -euo pipefail

K8S_VERSION="${GEOMETER_K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${GEOMETER_ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${GEOMETER_HELM_VERSION:-v3.17.3}"
# Prometheus 3.x is tagged v0.3xx.y as a Go module.
PROMETHEUS_VERSION="${GEOMETER_PROMETHEUS_VERSION:-v0.316.0}"
TOOLS=(kubectl helm promtool)
CACHE_ROOT="${GEOMETER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/geometer/control-plane}"
BIN="$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION/bin"
BINARIES=(kube-apiserver kube-scheduler kube-controller-manager etcd)
# The commands built from k8s.io/kubernetes (k8s.io/kubernetes/cmd/<name>).
KUBE_COMMANDS=(kube-apiserver kube-scheduler kube-controller-manager kubectl)

if [ "${1:-}" = "--print" ]; then
  echo "$BIN"
  exit 0
fi

have_all() {
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}
have_tools() {
  for b in "${TOOLS[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}
if have_all && have_tools; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null 2>&1 || { echo "k8s-control-plane: needs Go (https://go.dev/dl) and the Go module proxy" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$BIN"
started=$(date +%s)

# Builds the named commands of k8s.io/kubernetes (some of KUBE_COMMANDS) into $BIN.
build_kubernetes() {
  local dir="$work/kubernetes" minor patch gomod cmd
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  patch="$(echo "$K8S_VERSION" | cut -d. -f3)"
  mkdir -p "$dir" && cd "$dir"
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  [ -f "$gomod" ] || { echo "k8s-control-plane: could not fetch k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
  {
    echo "module geometer.local/control-plane"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    # Every `k8s.io/<name> => ./staging/src/k8s.io/<name>` of the release, pointed at its tag.
    sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9.-]*\) => \./staging/src/.*#\1#p' "$gomod" |
      while read -r m; do echo "replace $m => $m v0.$minor.$patch"; done
  } > go.mod
  grep -q '^replace ' go.mod || { echo "k8s-control-plane: no staging replaces found in $gomod" >&2; exit 1; }
  # kubectl's code is the staging module k8s.io/kubectl; its command is k8s.io/kubernetes/cmd/kubectl.
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for cmd in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd"; done
    printf ')\n'
  } > tools.go
  go mod tidy
  local ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  go build -trimpath -ldflags "$ldflags" -o "$BIN/" "${@/#/k8s.io/kubernetes/cmd/}"
}

build_etcd() {
  local dir="$work/etcd"
  mkdir -p "$dir" && cd "$dir"
  cat > go.mod <<EOF
module geometer.local/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
  cat > tools.go <<'EOF'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
EOF
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
}

# helm's module has no replace directives, so `go install` builds it as released.
build_helm() {
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

# etcd, helm and promtool do not depend on the Kubernetes release: take them from another
# release's folder of this cache when Go's build information says they are built from the
# module version asked for, rather than build them again when only Kubernetes moves.
reuse_built() {
  local name="$1" module="$2" version="$3" found
  [ -x "$BIN/$name" ] && return 0
  for found in "$CACHE_ROOT"/*/bin/"$name"; do
    [ -x "$found" ] || continue
    if go version -m "$found" 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+$module[[:space:]]+$version[[:space:]]"; then
      cp "$found" "$BIN/$name" && echo "k8s-control-plane: reusing $found ($module $version)" >&2
      return 0
    fi
  done
}
reuse_built etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
reuse_built helm helm.sh/helm/v3 "$HELM_VERSION"
reuse_built promtool github.com/prometheus/prometheus "$PROMETHEUS_VERSION"

kube_missing=()
for b in "${KUBE_COMMANDS[@]}"; do [ -x "$BIN/$b" ] || kube_missing+=("$b"); done
if [ ${#kube_missing[@]} -gt 0 ]; then
  echo "k8s-control-plane: building ${kube_missing[*]} (Kubernetes $K8S_VERSION) into $BIN" >&2
  (build_kubernetes "${kube_missing[@]}")
fi
if [ ! -x "$BIN/etcd" ]; then
  echo "k8s-control-plane: building etcd $ETCD_VERSION into $BIN" >&2
  (build_etcd)
fi
have_all || { echo "k8s-control-plane: build finished without every binary in $BIN" >&2; exit 1; }
if [ ! -x "$BIN/helm" ]; then
  echo "k8s-control-plane: building helm $HELM_VERSION into $BIN" >&2
  (build_helm)
fi
if [ ! -x "$BIN/promtool" ]; then
  echo "k8s-control-plane: building promtool (prometheus $PROMETHEUS_VERSION) into $BIN" >&2
  (GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION")
fi
have_tools || { echo "k8s-control-plane: kubectl, helm or promtool was not built into $BIN" >&2; exit 1; }
echo "k8s-control-plane: built in $(( $(date +%s) - started ))s ($(du -sh "$BIN" | cut -f1))" >&2
echo "$BIN"
