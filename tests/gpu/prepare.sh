#!/usr/bin/env bash
# tests/gpu/prepare.sh — fill gpu-assets/ (git-ignored) with what tests/gpu/run.sh needs on
# a GPU host that has no Debian packages and no network: the server libraries' .deb files
# (libuv, cJSON) and the shared Shakespeare models. Run on a Debian 12 machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
A=gpu-assets
mkdir -p "$A/debs" "$A/models"
( cd "$A/debs" && apt-get download libuv1 libuv1-dev libcjson1 libcjson-dev >/dev/null )
cp ../shared/models/shakespeare-*.gguf "$A/models/"
du -sh "$A"
