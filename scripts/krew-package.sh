#!/usr/bin/env bash
# Packs a built `geometer` binary for krew: OUT/geometer-<os>-<arch>.tar.gz holding it as
# `kubectl-geometer`, and OUT/geometer.yaml, deploy/krew/geometer.yaml with the version, the
# platform, the archive's URI and its sha256 filled in.
#
#   scripts/krew-package.sh BINARY OUT [URI]     (URI defaults to the archive's file:// path)
#   kubectl krew install --manifest=OUT/geometer.yaml --archive=OUT/geometer-linux-amd64.tar.gz
set -euo pipefail
binary="${1:?usage: krew-package.sh BINARY OUT [URI]}"
out="${2:?usage: krew-package.sh BINARY OUT [URI]}"
[ -x "$binary" ] || { echo "krew-package: $binary is not an executable (build it: cargo build --release)" >&2; exit 2; }
here="$(cd "$(dirname "$0")/.." && pwd)"
os="$(uname -s | tr '[:upper:]' '[:lower:]')"
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "krew-package: unknown machine $(uname -m)" >&2; exit 2 ;;
esac
version="v$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -1)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$binary" "$stage/kubectl-geometer"
archive="$out/geometer-$os-$arch.tar.gz"
# Fixed owner, mode and time, so the same binary packs to the same sha256.
tar --owner=0 --group=0 --mode=0755 --mtime='1970-01-01' -C "$stage" -czf "$archive" kubectl-geometer
sha="$(sha256sum "$archive" | cut -d' ' -f1)"
uri="${3:-file://$archive}"
sed -e "s|^  version: VERSION|  version: $version|" -e "s|os: OS|os: $os|" -e "s|arch: ARCH|arch: $arch|" \
  -e "s|uri: URI|uri: $uri|" -e "s|sha256: SHA256|sha256: $sha|" \
  "$here/deploy/krew/geometer.yaml" > "$out/geometer.yaml"
echo "$out/geometer.yaml"
