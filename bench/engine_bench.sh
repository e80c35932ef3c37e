#!/usr/bin/env bash
# Engine benchmarks of issue 3 on a ~1B Llama-shaped model (dim 2048, 16 layers,
# 32 heads, 8 KV heads, FFN 8192, vocab 32000), printed as a table:
#   1. batch-1 decode (tg128) and pp512 through `inferd bench` with one request
#      (prefill tok/s = 512 / TTFT, decode tok/s = 1000 / TPOT), per weight type,
#      and llama.cpp's figures on the same file when llama-cpp-python is importable;
#   2. `inferd bench` 64 requests, input 64-512, output 64-256;
#   3. chunked prefill trade-off: 8 decoding sequences + 2,000-token prompts arriving,
#      decode stall (ITL p99) and TTFT for a fixed token budget (256, 2048) and for
#      --max-step-ms 50, 100, 200, 400 (time-sized mixed steps).
# Usage: bench/engine_bench.sh [BUILD_DIR] [TYPES] [QUICK]
#   TYPES: default "F16 Q8_0 Q4_0"; QUICK=1 shrinks every run to a smoke test (CI).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build}/inferd
TYPES=${2:-"F16 Q8_0 Q4_0"}
QUICK=${3:-0}
PY=${PYTHON:-python3}
THREADS=${THREADS:-$(nproc)}
mkdir -p models-cache
model() { # model TYPE -> path (written once by the test-model writer)
  local p=models-cache/llama1b-$1.gguf
  if [ "$QUICK" = 1 ]; then
    p=models-cache/smoke-$1.gguf
    [ -f "$p" ] || $PY tools/write_test_model.py --arch llama --dim 256 --n-layers 2 --n-heads 4 \
      --n-kv-heads 2 --ffn 512 --vocab 512 --ctx 4096 --type "$1" --out "$p" >/dev/null
  else
    [ -f "$p" ] || $PY tools/write_test_model.py --arch llama --dim 2048 --n-layers 16 --n-heads 32 \
      --n-kv-heads 8 --ffn 8192 --vocab 32000 --ctx 4096 --type "$1" --out "$p" >/dev/null
  fi
  echo "$p"
}
json() { tail -1 | $PY -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(d[k]) for k in sys.argv[1:]))" "$@"; }

echo "== 1. batch-1 decode and pp512 ($THREADS threads)"
printf "%-6s %14s %14s %14s %14s\n" type "inferd tg" "llama.cpp tg" "inferd pp512" "llama.cpp pp512"
for t in $TYPES; do
  m=$(model "$t")
  read -r ttft < <("$BIN" bench -m "$m" --threads "$THREADS" --num-requests 1 --input-len-range 512 \
      --output-len-range 1 --max-num-seqs 1 | json ttft_ms_p50)
  read -r tpot < <("$BIN" bench -m "$m" --threads "$THREADS" --num-requests 1 --input-len-range 8 \
      --output-len-range "$([ "$QUICK" = 1 ] && echo 16 || echo 128)" --max-num-seqs 1 | json tpot_ms_p50)
  tg=$($PY -c "print(f'{1000/$tpot:.1f}')"); pp=$($PY -c "print(f'{512000/$ttft:.1f}')")
  ltg=-; lpp=-
  if [ "$QUICK" != 1 ] && $PY -c "import llama_cpp" 2>/dev/null; then
    read -r lpp ltg < <($PY bench/llamacpp_bench.py "$m" "$THREADS")
  fi
  printf "%-6s %14s %14s %14s %14s\n" "$t" "$tg" "$ltg" "$pp" "$lpp"
done

last=${TYPES##* }
m=$(model "$last")
echo
echo "== 2. inferd bench, 64 requests, input 64-512, output 64-256 ($last)"
if [ "$QUICK" = 1 ]; then N=8; OUT=8:16; else N=64; OUT=64:256; fi
"$BIN" bench -m "$m" --threads "$THREADS" --num-requests $N --input-len-range 64:512 --output-len-range $OUT --seed 1 | tail -15

echo
echo "== 3. chunked prefill: 8 decodes + 2,000-token prompts arriving every 10 s ($last; ms)"
# The decode stall is ITL p99 of the 8 decoding sequences: the step that carries a
# prefill chunk is the one they wait for. "off" rows use the fixed token budget alone;
# the others let the engine size mixed steps from the measured cost per token so they
# take at most max-step-ms (the hard cap 2048 then only bounds prefill-only steps).
# Needs `inferd bench --max-step-ms`.
printf "%-8s %-8s %10s %10s %10s %10s %10s %10s %10s\n" budget step_ms "TPOT p50" "TPOT p99" "ITL p50" "ITL p99" "ITL max" "TTFT p50" "TTFT p99"
for cfg in "256 0" "2048 0" "2048 50" "2048 100" "2048 200" "2048 400"; do
  set -- $cfg
  read -r a b2 i1 i2 i3 c d < <("$BIN" bench -m "$m" --threads "$THREADS" --scenario chunked --request-rate "$([ "$QUICK" = 1 ] && echo 2 || echo 0.1)" \
      --num-requests "$([ "$QUICK" = 1 ] && echo 2 || echo 4)" --max-num-batched-tokens "$1" --max-step-ms "$2" --seed 1 \
      | json tpot_ms_p50 tpot_ms_p99 itl_ms_p50 itl_ms_p99 itl_ms_max ttft_ms_p50 ttft_ms_p99)
  printf "%-8s %-8s %10s %10s %10s %10s %10s %10s %10s\n" "$1" "$([ "$2" = 0 ] && echo off || echo "$2")" "$a" "$b2" "$i1" "$i2" "$i3" "$c" "$d"
done
