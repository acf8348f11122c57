#!/usr/bin/env bash
# Installs what building Geometer needs on a fresh Debian/Ubuntu machine:
# cmake and a C++ compiler for HiGHS (the MIP solver), libclang for its bindings.
# Idempotent: does nothing when everything is already there.
set -euo pipefail

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v c++ >/dev/null 2>&1 || need+=(g++)
# libclang itself (libclang.so or libclang-N.so), not libclang-cpp, which LLVM packages bring
# without the C API that bindgen loads.
if ! ldconfig -p 2>/dev/null | grep -Eq 'libclang(-[0-9.]+)?\.so' && ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1; then
  need+=(libclang-dev clang)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${need[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: need root or sudo to install ${need[*]}; or build with --no-default-features --features microlp (pure Rust, no cmake)" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
