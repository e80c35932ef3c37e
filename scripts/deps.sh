#!/usr/bin/env bash
# Install what building and testing inferd needs on Debian 12 (idempotent; skips
# what is already there). Run as root or with sudo available.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(build-essential cmake ninja-build pkg-config clang libclang-rt-dev
          libcjson-dev libuv1-dev libucx-dev python3 python3-pip curl
          systemd prometheus
          iproute2 util-linux)  # the PD tests' network namespaces (ip, tc), pd_bench's taskset
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
# Debian 12's system python is "externally managed" (PEP 668): pip needs
# --break-system-packages there (the packages go to /usr/local, apt's stay untouched).
PIP_FLAGS=()
if $PY -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
  PIP_FLAGS+=(--break-system-packages)
fi
# llama-cpp-python (the tokenizer cross-check) compiles llama.cpp from source the first
# time (about 10 minutes on 2 cores; later runs find it installed): a portable CPU-only
# build (no -march=native, no CUDA even where nvcc exists), without llama.cpp's tests
# and examples.
export CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
t0=$(date +%s)
$PY -m pip install -q "${PIP_FLAGS[@]}" -r requirements-dev.txt
echo "deps: python packages ready ($(( $(date +%s) - t0 )) s)"
