#!/usr/bin/env bash
# quant_ppl.sh — perplexity and weight bytes of the shakespeare target under every
# weight format inferd has: F32, llama.cpp's Q8_0 / Q4_0 / Q4_K_M files (../shared),
# inferd's --quantize int8 (g32, g128) / int4 (g32, g64, g128) on load, plain and
# calibrated (--calibration: AWQ on the first half of the text, cut at a speech), and
# inferd-made q4_k / q5_k / q6_k files.
#
# usage: bench/quant_ppl.sh [BUILD_DIR] [CTX]     (defaults: build, 256; KV=f32, the KV
#        cache dtype, as llama.cpp's reference figures in ../shared/models/README.md)
#
# For each row: PPL of ../shared/models/shakespeare-valid.txt (`inferd perplexity --ctx
# CTX`, llama-perplexity's method), the bytes of the linear weights (the seven matrices
# of every layer) and of the whole file. The INT rows run --quantize on load; their file
# bytes are those of the same quantization written by `inferd quantize` (which gives the
# same logits bit for bit, tests/python/test_quantize.py).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CTX=${2:-256}
BIN=$BUILD/inferd
SHARED=../shared/models
SRC=$SHARED/shakespeare-target.gguf
TEXT=$SHARED/shakespeare-valid.txt
KV=${KV:-f32}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CALIB=$TMP/calib.txt
python3 - "$TEXT" "$CALIB" <<'EOF'
import sys
t = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(t[:t.index(b"\n\n", len(t) // 2) + 2])
EOF

# bytes of the linear weights and of the file, read from the GGUF header
gguf_bytes() {
  python3 - "$1" <<'EOF'
import os, re, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
_, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
o = 24
SC = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def rstr(o):
    n = struct.unpack_from("<Q", b, o)[0]
    return b[o + 8:o + 8 + n], o + 8 + n
def skip(t, o):
    if t == 8: return rstr(o)[1]
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o); o += 12
        if et in SC: return o + n * SC[et]
        for _ in range(n): o = skip(et, o)
        return o
    return o + SC[t]
for _ in range(n_kv):
    _, o = rstr(o)
    t = struct.unpack_from("<I", b, o)[0]
    o = skip(t, o + 4)
# (elements per block, bytes per block) of the types these files hold
G = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 12: (256, 144), 13: (256, 176),
     14: (256, 210), 30: (1, 2), 40: (64, 66), 41: (128, 130), 42: (64, 36), 43: (128, 68)}
lin = 0
for _ in range(n_t):
    name, o = rstr(o)
    nd = struct.unpack_from("<I", b, o)[0]
    ne = struct.unpack_from(f"<{nd}Q", b, o + 4)
    o += 4 + 8 * nd
    tt, _ = struct.unpack_from("<IQ", b, o); o += 12
    n = 1
    for d in ne: n *= d
    bs, bb = G[tt]
    if re.match(rb"blk\.\d+\.(attn_(q|k|v|output)|ffn_(gate|up|down))\.weight$", name):
        lin += n // bs * bb
print(lin, os.path.getsize(p))
EOF
}

ppl() { # FILE [on-load flags...] -> "PPL +/- ERR"
  local f=$1; shift
  "$BIN" perplexity -m "$f" -f "$TEXT" --ctx "$CTX" --kv-cache-dtype "$KV" "$@" 2>/dev/null | sed -n 's/^ppl //p'
}

F32_LIN=$(gguf_bytes "$SRC" | cut -d' ' -f1)
printf '%-22s %-20s %14s %8s %12s\n' "weights" "PPL (ctx $CTX)" "linear bytes" "x F32" "file bytes"
row() { # NAME PPL FILE_FOR_BYTES
  read -r lin file < <(gguf_bytes "$3")
  printf '%-22s %-20s %14s %8.3f %12s\n' "$1" "$2" "$lin" "$(echo "$lin / $F32_LIN" | bc -l)" "$file"
}
row "F32" "$(ppl "$SRC")" "$SRC"
row "Q8_0 (llama.cpp file)" "$(ppl "$SHARED/shakespeare-target-Q8_0.gguf")" "$SHARED/shakespeare-target-Q8_0.gguf"
"$BIN" quantize "$SRC" "$TMP/int8.gguf" --type int8 2>/dev/null
row "INT8 g128 (on load)" "$(ppl "$SRC" --quantize int8)" "$TMP/int8.gguf"
"$BIN" quantize "$SRC" "$TMP/int8-32.gguf" --type int8 --quantize-group-size 32 2>/dev/null
row "INT8 g32 (on load)" "$(ppl "$SRC" --quantize int8 --quantize-group-size 32)" "$TMP/int8-32.gguf"
row "Q4_0 (llama.cpp file)" "$(ppl "$SHARED/shakespeare-target-Q4_0.gguf")" "$SHARED/shakespeare-target-Q4_0.gguf"
row "Q4_K_M (llama.cpp)" "$(ppl "$SHARED/shakespeare-target-Q4_K_M.gguf")" "$SHARED/shakespeare-target-Q4_K_M.gguf"
for g in 32 64 128; do
  "$BIN" quantize "$SRC" "$TMP/int4-$g.gguf" --type int4 --quantize-group-size $g 2>/dev/null
  row "INT4 g$g (on load)" "$(ppl "$SRC" --quantize int4 --quantize-group-size $g)" "$TMP/int4-$g.gguf"
done
for g in 32 64 128; do
  row "INT4 g$g calibrated" "$(ppl "$SRC" --quantize int4 --quantize-group-size $g --calibration "$CALIB")" \
    "$TMP/int4-$g.gguf"
done
for t in q4_k q5_k q6_k; do
  "$BIN" quantize "$SRC" "$TMP/$t.gguf" --type $t 2>/dev/null
  row "${t^^} (inferd file)" "$(ppl "$TMP/$t.gguf")" "$TMP/$t.gguf"
done
