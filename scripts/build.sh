#!/usr/bin/env bash
# Configure and build inferd into build/ (CUDA backend when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)" ${INFERD_TARGET:+--target "$INFERD_TARGET"}
