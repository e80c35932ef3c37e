#!/usr/bin/env bash
# structured_bench.sh BUILD MODEL.gguf [TOKENS] — end-to-end inter-token latency with and
# without a JSON schema (response_format json_schema, strict) at batch 1 and 16, through
# a real `inferd serve` and bench/serving_bench.py (chat, streaming). The two variants
# alternate REPS times (default 2); each row is the best of its runs (the least
# disturbed by the machine), and the last column is ITL(schema) / ITL(plain): the
# constrained decoding's cost per token at that batch size (goal: within 1.05).
#   BATCHES="1 16" REPS=2 bash bench/structured_bench.sh build models-cache/default.gguf 64
# The plain runs ignore EOS (every request writes TOKENS tokens); the schema runs end
# where the JSON ends, so the schema asks for an array of records (a long output).
set -euo pipefail
BUILD=${1:?usage: structured_bench.sh BUILD MODEL.gguf [TOKENS]}
MODEL=${2:?usage: structured_bench.sh BUILD MODEL.gguf [TOKENS]}
TOKENS=${3:-64}
BATCHES=${BATCHES:-"1 16"}
REPS=${REPS:-2}
cd "$(dirname "$0")/.."
PORT=${PORT:-18531}
tmp=$(mktemp -d)
trap 'kill $srv 2>/dev/null || true; rm -rf "$tmp"' EXIT
cat >"$tmp/schema.json" <<'JSON'
{"response_format": {"type": "json_schema", "json_schema": {"name": "people", "strict": true, "schema": {
  "type": "object", "properties": {"people": {"type": "array", "maxItems": 40, "items": {
    "type": "object", "properties": {
      "name": {"type": "string", "maxLength": 24},
      "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "city": {"type": "string", "maxLength": 24},
      "tags": {"type": "array", "items": {"enum": ["poet", "king", "soldier", "lover"]}, "maxItems": 3}},
    "required": ["name", "age", "city", "tags"], "additionalProperties": false}}},
  "required": ["people"], "additionalProperties": false}}}}
JSON
"$BUILD/inferd" serve -m "$MODEL" --port "$PORT" --served-model-name m --max-num-seqs 16 >"$tmp/serve.log" 2>&1 &
srv=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/health/ready" >/dev/null 2>&1 && break
  kill -0 $srv 2>/dev/null || { cat "$tmp/serve.log"; exit 1; }
  sleep 0.2
done
run() { # BATCH VARIANT -> itl_p50_ms itl_mean tokens/s
  local b=$1 v=$2 extra=()
  [ "$v" = schema ] && extra=(--extra-body-file "$tmp/schema.json" --no-ignore-eos)
  python3 bench/serving_bench.py --base-url "http://127.0.0.1:$PORT/v1" --model m --endpoint chat \
    --num-requests $((b * 2)) --concurrency "$b" --max-tokens "$TOKENS" --prompt-len 24 --temperature 0.7 \
    --seed 7 "${extra[@]}" | tail -1
}
printf '%-6s %-7s %14s %14s %12s\n' batch variant itl_p50_ms itl_p99_ms tokens/s
for b in $BATCHES; do
  best_plain="" best_schema=""
  for r in $(seq 1 "$REPS"); do
    for v in plain schema; do
      j=$(run "$b" "$v")
      p50=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["itl_p50_ms"])' "$j")
      line=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["itl_p50_ms"], d["itl_p99_ms"], d["output_tokens_per_s"], d["failed"])' "$j")
      if [ "$v" = plain ]; then
        if [ -z "$best_plain" ] || python3 -c "import sys; sys.exit(not $p50 < ${best_plain%% *})"; then best_plain=$line; fi
      else
        if [ -z "$best_schema" ] || python3 -c "import sys; sys.exit(not $p50 < ${best_schema%% *})"; then best_schema=$line; fi
      fi
    done
  done
  read -r a1 a2 a3 af <<<"$best_plain"
  read -r s1 s2 s3 sf <<<"$best_schema"
  printf '%-6s %-7s %14s %14s %12s\n' "$b" plain "$a1" "$a2" "$a3"
  printf '%-6s %-7s %14s %14s %12s   x%s\n' "$b" schema "$s1" "$s2" "$s3" \
    "$(python3 -c "print(round($s1 / $a1, 3) if $a1 else 'nan')")"
  [ "$af" = 0 ] && [ "$sf" = 0 ] || { echo "structured_bench: failed requests" >&2; exit 1; }
done
grep -o '"grammar[^}]*' "$tmp/serve.log" | tail -1 || true
