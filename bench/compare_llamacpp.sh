#!/usr/bin/env bash
# Side-by-side engine benchmark of issue 8: inferd against llama.cpp's own llama-bench on
# the same GGUF files and the same threads, with the rooflines. Not run in CI (minutes
# per type, needs a llama.cpp build); run by hand.
#
# Usage: bench/compare_llamacpp.sh BUILD_DIR PEER_BIN_DIR MODELS_DIR [TYPES] [ISA]
#   BUILD_DIR     inferd build (needs BUILD_DIR/inferd; membw is built there if missing)
#   PEER_BIN_DIR  llama.cpp bin dir holding llama-bench (e.g. build-native/bin)
#   MODELS_DIR    holds llama1b-TYPE.gguf, the synthetic 1.1B Llama:
#                   tools/write_test_model.py --arch llama --dim 2048 --n-layers 16 \
#                     --n-heads 32 --n-kv-heads 8 --ffn 8192 --vocab 32000 --ctx 4096 \
#                     --type TYPE --out MODELS_DIR/llama1b-TYPE.gguf
#                 (Q4_K_M, which the writer lacks: llama-quantize llama1b-F16.gguf
#                  llama1b-Q4_K_M.gguf Q4_K_M)
#   TYPES         default "F16 Q8_0 Q4_0 Q4_K_M"
#   ISA           avx512 (default) or avx2: sets INFERD_CPU=avx2 for inferd and picks the
#                 AVX2 int8 peak; PEER_BIN_DIR must then be an AVX2-only llama.cpp build.
# Env: THREADS (default 2), REPS (runs per figure, best kept; default 2), CC, BW (read
# bandwidth GB/s to use instead of measuring it now with membw).
#
# Per type it prints: decode tok/s (tg128) of both and the ratio; the byte roofline
# fraction = weight bytes read per decode token x inferd tok/s / measured read bandwidth
# (membw, THREADS threads); pp512 tok/s of both and the ratio; pp512 as a fraction of
# the compute peak: matmul ops per prompt token (2 x the multiply-adds of the layer
# matrices) x pp512 tok/s / peak, with peak = clock x threads x instructions/cycle x
# ops/instruction measured by bench/cpu_peak.c (int8: VPDPBUSD zmm = 128 ops, AVX2
# maddubs+madd = 64 ops; F16 runs on f32 FMA: zmm 32, ymm 16 ops).
#
# inferd figures: `inferd bench` with one request (as engine_bench.sh): decode = 1000 /
# tpot_ms_p50 of 8 prompt + 128 output tokens; pp512 = 512000 / ttft_ms of a 512-token
# prompt (one output token; the whole prompt in one 512-token step like llama-bench's
# n_ubatch 512). llama.cpp: `llama-bench -p 512 -n 128 -t THREADS -r 1 -o json` (avg_ts)
# once per rep, alternating with inferd's runs; each side's best rep is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?build dir}; PEER=${2:?peer bin dir}; MODELS=${3:?models dir}
TYPES=${4:-"F16 Q8_0 Q4_0 Q4_K_M"}
ISA=${5:-avx512}
THREADS=${THREADS:-2}
REPS=${REPS:-2}
PY=${PYTHON:-python3}
CC=${CC:-cc}
BIN=$BUILD/inferd
[ -x "$BIN" ] || { echo "no $BIN" >&2; exit 1; }
[ -x "$PEER/llama-bench" ] || { echo "no $PEER/llama-bench" >&2; exit 1; }
case $ISA in
  avx512) unset INFERD_CPU ;;
  avx2) export INFERD_CPU=avx2 ;;
  *) echo "ISA must be avx512 or avx2" >&2; exit 1 ;;
esac

# ---- rooflines ------------------------------------------------------------------------
[ -x "$BUILD/membw" ] || cmake --build "$BUILD" --target membw >/dev/null
[ -x "$BUILD/cpu_peak" ] || $CC -O2 -pthread bench/cpu_peak.c -o "$BUILD/cpu_peak"
membw() { "$BUILD/membw" 1024 | sed -n "s/.*threads $THREADS: *\([0-9.]*\) GB\/s/\1/p"; }
BW_FIXED=${BW:-}
BW=${BW:-$(membw)}
PEAK_JSON=$("$BUILD/cpu_peak" "$THREADS" | tail -1)
peak() { $PY -c "import json,sys; d=json.loads(sys.argv[1]); print(d[sys.argv[2]][sys.argv[3]] if sys.argv[2] in d else 'nan')" "$PEAK_JSON" "$1" "${2:-gops}"; }
CLK=$($PY -c "import json,sys; print(json.loads(sys.argv[1])['clock_ghz'])" "$PEAK_JSON")
if [ "$ISA" = avx512 ]; then I8K=avx512vnni; F32K=avx512f; I8N="VPDPBUSD zmm/cycle x 128 ops"; F32N="FMA zmm/cycle x 32 ops"
else I8K=avx2; F32K=fma; I8N="(maddubs+madd+add ymm)/cycle x 64 ops"; F32N="FMA ymm/cycle x 16 ops"; fi
I8=$(peak $I8K); F32=$(peak $F32K); I8IPC=$(peak $I8K ipc); F32IPC=$(peak $F32K ipc)
echo "== $ISA, $THREADS threads; inferd $(git rev-parse --short HEAD 2>/dev/null || echo ?), peer $PEER"
echo "read bandwidth (membw, $THREADS threads): $BW GB/s now${BW_FIXED:+ (given)}; per row: the BW column"
echo "clock $CLK GHz (bench/cpu_peak.c); peaks measured on $THREADS threads:"
echo "  int8: $I8 GOPS  (~ $CLK GHz x $THREADS threads x $I8IPC $I8N)"
echo "  f32 : $F32 GFLOPS (~ $CLK GHz x $THREADS threads x $F32IPC $F32N)"

# weight bytes per decode token and matmul ops per prompt token, from the file
shape() { $PY - "$1" <<'EOF'
import sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
names = {t.name for t in r.tensors}
read = 0; macs = 0
for t in r.tensors:
    nb = int(t.n_bytes)
    rows = int(t.shape[1]) if len(t.shape) > 1 else 1
    if t.name == "token_embd.weight":
        # one embedding row per token; the whole matrix when it is also the output
        read += nb if "output.weight" not in names else nb // rows
        continue
    read += nb
    if len(t.shape) == 2 and t.name.startswith("blk."):
        macs += int(t.shape[0]) * int(t.shape[1])
print(read, 2 * macs)
EOF
}
json() { tail -1 | $PY -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(d[k]) for k in sys.argv[1:]))" "$@"; }
# run a command under /usr/bin/time; appends (user+sys) / (wall x THREADS) to $UTIL_FILE:
# how much of the THREADS cores the run got (well below 1 = the machine was shared)
timed() { local tf; tf=$(mktemp); /usr/bin/time -f "%e %U %S" -o "$tf" "$@"; local rc=$?
  $PY -c "import sys; e,u,s=map(float,open(sys.argv[1]).read().split()[-3:]); print(f'{(u+s)/(e*int(sys.argv[2])):.2f}')" "$tf" "$THREADS" >>"$UTIL_FILE"; rm -f "$tf"; return $rc; }
UTIL_FILE=$(mktemp); trap 'rm -f "$UTIL_FILE" "$UTIL_FILE.l"' EXIT
util_take() { $PY -c "import sys; v=[float(x) for x in open(sys.argv[1]).read().split()]; print(f'{min(v):.2f}-{max(v):.2f}' if v else '-')" "$1"; }
best_min() { $PY -c "import sys; print(min(float(x) for x in sys.argv[1:]))" "$@"; }
best_max() { $PY -c "import sys; print(max(float(x) for x in sys.argv[1:]))" "$@"; }

printf "\n%-7s | %8s %8s %6s %6s | %8s %8s %6s %7s | %s\n" type "tg inf" "tg lcpp" ratio "roof" \
  "pp inf" "pp lcpp" ratio "peak" "bytes/tok, ops/tok"
rows=()
for t in $TYPES; do
  m=$MODELS/llama1b-$t.gguf
  [ -f "$m" ] || { echo "$t: no $m, skipped"; continue; }
  read -r BYTES OPS < <(shape "$m")
  # bandwidth moves with other load on a shared machine: measured next to each row
  # (before and after it, the higher kept) unless BW was given
  [ -n "$BW_FIXED" ] || BW0=$(membw)
  # the two engines alternate, rep by rep, so both see the same load; best rep kept
  tp=(); tt=(); lpp=(); ltg=(); : >"$UTIL_FILE"; : >"$UTIL_FILE.l"
  for _ in $(seq 1 "$REPS"); do
    tt+=("$(timed "$BIN" bench -m "$m" --threads "$THREADS" --num-requests 1 --input-len-range 512 \
      --output-len-range 1 --max-num-seqs 1 --max-num-batched-tokens 512 | json ttft_ms_p50)")
    tp+=("$(timed "$BIN" bench -m "$m" --threads "$THREADS" --num-requests 1 --input-len-range 8 \
      --output-len-range 128 --max-num-seqs 1 | json tpot_ms_p50)")
    read -r a b < <(UTIL_FILE=$UTIL_FILE.l timed "$PEER/llama-bench" -m "$m" -p 512 -n 128 -t "$THREADS" -r 1 -o json 2>/dev/null |
      $PY -c "
import json,sys
d=json.load(sys.stdin); pp=tg=float('nan')
for e in d:
    if e['n_prompt']==512 and e['n_gen']==0: pp=e['avg_ts']
    if e['n_gen']==128 and e['n_prompt']==0: tg=e['avg_ts']
print(pp, tg)")
    lpp+=("$a"); ltg+=("$b")
  done
  TTFT=$(best_min "${tt[@]}"); TPOT=$(best_min "${tp[@]}")
  LPP=$(best_max "${lpp[@]}"); LTG=$(best_max "${ltg[@]}")
  UI=$(util_take "$UTIL_FILE"); UL=$(util_take "$UTIL_FILE.l")
  [ -n "$BW_FIXED" ] || BW=$($PY -c "import sys; print(max(map(float, sys.argv[1:])))" "$BW0" "$(membw)")
  PK=$I8; [ "$t" = F16 ] && PK=$F32
  line=$($PY - "$t" "$TTFT" "$TPOT" "$LPP" "$LTG" "$BYTES" "$OPS" "$BW" "$PK" "$UI" "$UL" <<'EOF'
import sys
t, ttft, tpot, lpp, ltg, nbytes, ops, bw, pk, ui, ul = sys.argv[1:]
ttft, tpot, lpp, ltg, nbytes, ops, bw, pk = map(float, (ttft, tpot, lpp, ltg, nbytes, ops, bw, pk))
tg = 1000 / tpot; pp = 512000 / ttft
roof = tg * nbytes / (bw * 1e9)
frac = pp * ops / (pk * 1e9)
lroof = ltg * nbytes / (bw * 1e9); lfrac = lpp * ops / (pk * 1e9)
print(f"{t:7s} | {tg:8.1f} {ltg:8.1f} {tg / ltg:5.2f}x {roof:6.0%} | {pp:8.1f} {lpp:8.1f} {pp / lpp:5.2f}x "
      f"{frac:7.1%} | {nbytes / 1e6:.1f} MB, {ops / 1e9:.3f} GOP, BW {bw:.1f} GB/s  (llama.cpp: roof {lroof:.0%}, peak {lfrac:.1%}; cpu share inferd {ui}, llama.cpp {ul})")
EOF
)
  echo "$line"
done
echo "tg: decode tok/s (inferd 1000/TPOT p50, best of $REPS; llama-bench tg128, best of $REPS); roof: inferd bytes/s over read bandwidth"
echo "cpu share: min-max over the runs behind a row of (user+sys)/(wall x $THREADS) (model load included); well below 1 = other load"
echo "pp: pp512 tok/s (inferd 512000/TTFT, best of $REPS; llama-bench pp512, best of $REPS); peak: inferd matmul ops/s over the $ISA peak (F16: f32 FMA peak)"
