#!/usr/bin/env bash
# The whole test suite: build, C tests (ctest), a short libFuzzer run of the GGUF
# reader, then the Python-driven tests (pytest). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE fuzz
bash tests/fuzz/run_fuzz.sh build-fuzz "${FUZZ_SECONDS:-60}"
bash bench/engine_bench.sh build Q4_0 1   # benchmark smoke test (tiny model, seconds)
PY=${PYTHON:-python3}
INFERD_BIN=$PWD/build/inferd $PY -m pytest -q tests/python
