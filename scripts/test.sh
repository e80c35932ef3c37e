#!/usr/bin/env bash
# The whole test suite: build, C tests (ctest), Python-driven tests (pytest), a short
# fuzz run of the GGUF reader. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE fuzz
PY=${PYTHON:-python3}
INFERD_BIN=$PWD/build/inferd $PY -m pytest -q tests/python
if [ -x tests/fuzz/run_fuzz.sh ] || [ -f tests/fuzz/run_fuzz.sh ]; then
  bash tests/fuzz/run_fuzz.sh build-fuzz "${FUZZ_SECONDS:-60}"
fi
