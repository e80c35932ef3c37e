#!/usr/bin/env bash
# Configure and build inferd into build/ (CUDA backend when nvcc is found).
# CUDA_ARCHS (default 90): the GPU architectures; CI builds sm_90 only, as compiling every
# kernel for four architectures triples the nvcc time; the cuda_ptxas_budgets test checks
# sm_80/86/89/90 separately, and a release (docker) build asks for all four.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ARCH_ARGS=()
case " ${CMAKE_ARGS:-} " in
*"INFERD_CUDA=OFF"*) ;;
*) ARCH_ARGS=("-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90}") ;;
esac
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of words
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "${ARCH_ARGS[@]}" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)" ${INFERD_TARGET:+--target "$INFERD_TARGET"}
