#!/usr/bin/env bash
# Issue 10's decode goals: batch-1 decode of --quantize int8 / int4 against the F16 file
# they come from (INT8 >= 1.7x F16, INT4-g128 >= 2.8x), each beside its byte roofline, and
# the resident memory of each (INT4's linear weights <= 0.3x F16's).
#
#   bench/quant_decode.sh BUILD MODEL.gguf [avx512|avx2]   (REPS=2, THREADS=2, GROUP=128)
#
# decode tok/s = 1000 / tpot_ms_p50 of `inferd bench` with one request of 8 prompt and
# 128 output tokens (the engine benchmarks' measure), best of REPS; the three runs
# alternate rep by rep so that they see the same machine. bytes/token: the startup log's
# weight bytes less the embedding matrix (one row of it is read per token), i.e. what one
# decode step streams; roof = bytes/token x tok/s over the read bandwidth bench/membw.c
# measures now. RSS: VmHWM of the run (/usr/bin/time %M).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?build dir}; MODEL=${2:?model.gguf}; ISA=${3:-avx512}
REPS=${REPS:-2}; THREADS=${THREADS:-2}; GROUP=${GROUP:-128}; PY=${PYTHON:-python3}
BIN=$BUILD/inferd
[ -x "$BIN" ] && [ -f "$MODEL" ] || { echo "usage: $0 BUILD MODEL.gguf [avx512|avx2]" >&2; exit 1; }
case $ISA in avx512) unset INFERD_CPU ;; avx2) export INFERD_CPU=avx2 ;; *) echo "avx512|avx2" >&2; exit 1 ;; esac
[ -x "$BUILD/membw" ] || cmake --build "$BUILD" --target membw >/dev/null
BW=$("$BUILD/membw" 1024 | sed -n "s/.*threads $THREADS: *\([0-9.]*\) GB\/s/\1/p")
EMB=$($PY - "$MODEL" <<'EOF'
import sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
names = {t.name for t in r.tensors}
e = [int(t.n_bytes) for t in r.tensors if t.name == "token_embd.weight"]
print(e[0] if e and "output.weight" in names else 0)  # tied: the matrix is read whole
EOF
)
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
run() { # name, flags... -> prints "tpot_ms rss_kb weight_bytes"
  local name=$1; shift
  /usr/bin/time -f "%M" -o "$TMP/t" "$BIN" bench -m "$MODEL" --threads "$THREADS" --num-requests 1 \
    --input-len-range 8 --output-len-range 128 --max-num-seqs 1 --kv-cache-memory 256M "$@" \
    >"$TMP/out" 2>"$TMP/err"
  $PY - "$TMP/out" "$TMP/err" "$TMP/t" <<'EOF'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
wb = 0
for line in open(sys.argv[2]):
    if '"weight_bytes"' in line:
        wb = json.loads(line)["weight_bytes"]
print(d["tpot_ms_p50"], open(sys.argv[3]).read().split()[-1], wb)
EOF
}
declare -A TP RSS WB
CONFIGS=("F16" "INT8" "INT4")
flags() { case $1 in F16) ;; INT8) echo "--quantize int8 --quantize-group-size $GROUP" ;;
  INT4) echo "--quantize int4 --quantize-group-size $GROUP" ;; esac; }
for _ in $(seq 1 "$REPS"); do
  for c in "${CONFIGS[@]}"; do
    # shellcheck disable=SC2046
    read -r tp rss wb < <(run "$c" $(flags "$c"))
    if [ -z "${TP[$c]:-}" ] || $PY -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "$tp" "${TP[$c]}"; then
      TP[$c]=$tp
    fi
    RSS[$c]=$rss; WB[$c]=$wb
  done
done
echo "== $ISA, $THREADS threads, $(basename "$MODEL"), group $GROUP; inferd $(git rev-parse --short HEAD 2>/dev/null || echo ?); read bandwidth $BW GB/s (membw)"
printf "%-5s | %9s %7s | %12s %6s | %9s %7s\n" config "decode" "x F16" "bytes/token" "roof" "RSS MiB" "x F16"
for c in "${CONFIGS[@]}"; do
  $PY - "$c" "${TP[$c]}" "${TP[F16]}" "${WB[$c]}" "$EMB" "$BW" "${RSS[$c]}" "${RSS[F16]}" <<'EOF'
import sys
c, tp, tp16, wb, emb, bw, rss, rss16 = sys.argv[1], *map(float, sys.argv[2:])
tok = 1000 / tp
bpt = wb - emb
print(f"{c:<5} | {tok:7.1f}/s {tp16 / tp:6.2f}x | {bpt / 1e6:9.1f} MB {bpt * tok / 1e9 / bw * 100:5.0f}% | "
      f"{rss / 1024:9.0f} {rss / rss16:6.2f}x")
EOF
done
