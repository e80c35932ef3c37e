#!/usr/bin/env bash
# Serving benchmark of issue 4: the same client (bench/serving_bench.py: N streaming
# requests, C at a time, M output tokens) against inferd serve and against llama.cpp's
# server (llama-cpp-python[server]) on the same GGUF file and the same cores.
# Usage: bench/serving_compare.sh MODEL.gguf [BUILD_DIR] [N] [C] [M]
# LLAMA_SERVER=/path/to/llama-server: compare against llama.cpp's own server instead
# (`llama-server -np $NP -c $CTX -t THREADS -tb THREADS`, default NP=16, CTX=8192: the
# issue 8 peer; continuous batching over 16 slots of 512 tokens each).
# INFERD_ONLY=1 / PEER_ONLY=1 run one side only.
# INFERD_ARGS: extra flags for inferd serve (e.g. "--max-num-batched-tokens 2048").
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$1
BIN=${2:-build}/inferd
N=${3:-64}; C=${4:-16}; M=${5:-128}
PY=${PYTHON:-python3}
THREADS=${THREADS:-$(nproc)}
PORT_A=18431; PORT_B=18432
NP=${NP:-16}; CTX=${CTX:-8192}
# EOS is banned through logit_bias so both servers generate exactly M tokens.
EOS=$("$BIN" info -m "$MODEL" | sed -n 's/.*, eos \([0-9]*\).*/\1/p')
wait_up() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$1$2" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }

"$BIN" serve -m "$MODEL" --port $PORT_A --threads "$THREADS" --served-model-name bench \
  --max-num-seqs 64 --no-log-requests ${INFERD_ARGS:-} >/tmp/inferd-serve-bench.log 2>&1 &
PA=$!
trap 'kill $PA 2>/dev/null || true; [ -n "${PB:-}" ] && kill $PB 2>/dev/null || true' EXIT
wait_up $PORT_A /health/ready
if [ "${PEER_ONLY:-0}" != 1 ]; then
  echo "== inferd"
  $PY bench/serving_bench.py --base-url http://127.0.0.1:$PORT_A/v1 --model bench \
    --num-requests "$N" --concurrency "$C" --max-tokens "$M" --ban-token "$EOS" --label inferd | tail -12
fi
kill $PA; wait $PA 2>/dev/null || true

if [ "${INFERD_ONLY:-0}" = 1 ]; then
  :
elif [ -n "${LLAMA_SERVER:-}" ]; then
  "$LLAMA_SERVER" -m "$MODEL" --port $PORT_B -t "$THREADS" -tb "$THREADS" -np "$NP" -c "$CTX" \
    --alias bench >/tmp/llama-server-bench.log 2>&1 &
  PB=$!
  wait_up $PORT_B /health
  echo "== llama.cpp llama-server (-np $NP -c $CTX)"
  $PY bench/serving_bench.py --base-url http://127.0.0.1:$PORT_B/v1 --model bench \
    --num-requests "$N" --concurrency "$C" --max-tokens "$M" --ban-token "$EOS" --label llama-server | tail -12
  kill $PB; wait $PB 2>/dev/null || true
elif $PY -c "import llama_cpp.server" 2>/dev/null; then
  $PY -m llama_cpp.server --model "$MODEL" --port $PORT_B --n_threads "$THREADS" \
    --n_threads_batch "$THREADS" --n_ctx 4096 --model_alias bench --interrupt_requests False \
    >/tmp/llamacpp-serve-bench.log 2>&1 &
  PB=$!
  wait_up $PORT_B /v1/models
  echo "== llama.cpp server (llama-cpp-python)"
  $PY bench/serving_bench.py --base-url http://127.0.0.1:$PORT_B/v1 --model bench \
    --num-requests "$N" --concurrency "$C" --max-tokens "$M" --ban-token "$EOS" --label llama.cpp | tail -12
  kill $PB; wait $PB 2>/dev/null || true
else
  echo "llama-cpp-python[server] not installed: peer not measured"
fi
