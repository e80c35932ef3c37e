#!/usr/bin/env bash
# Install what building and testing inferd needs on Debian 12 (idempotent; skips
# what is already there). Run as root or with sudo available.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(build-essential cmake ninja-build pkg-config clang libclang-rt-dev
          libcjson-dev libuv1-dev python3 python3-pip curl
          systemd prometheus)
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
if ! $PY -m pip install -q -r requirements-dev.txt 2>/dev/null; then
  $PY -m pip install -q --break-system-packages -r requirements-dev.txt
fi
