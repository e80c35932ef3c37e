#!/usr/bin/env bash
# tests/gpu/run.sh — the one script for a GPU host (issue 9): builds with CUDA for sm_90
# only, runs every kernel test natively (tests/cuda/test_*.cu -> gpu_test_*), runs greedy
# generation on the Shakespeare models on the GPU and on the CPU backend and compares the
# tokens (f32 KV on both; then each KV dtype's first 16 tokens), speculative decoding on
# the device (test_engine_spec's device verification; greedy with a draft = plain), the
# GPU benchmarks (a verification's cost for k = 1..8 drafts against one decode step;
# device copy bandwidth; batch-1 decode of random llama3-8b weights in BF16 / Q4_0 / Q4_K
# and quantized on load to INT8 / INT4-g128; output tok/s at 64 and 256 concurrent
# requests), and prints one summary table. Budget: under 8 minutes on an H200.
#
# What must be on the GPU host (it has nvcc, CMake and Python, but no Debian packages
# and no network):
#   - this checkout (tracked files);
#   - gpu-assets/ (git-ignored), made on a Debian machine by `bash tests/gpu/prepare.sh`:
#       gpu-assets/debs/   libuv1, libuv1-dev, libcjson1, libcjson-dev .deb files
#       gpu-assets/models/ shakespeare-target*.gguf, shakespeare-draft.gguf
# The command, from the checkout's root:
#   bash tests/gpu/run.sh            (with the device tool: run(command="bash tests/gpu/run.sh",
#                                     carry=["gpu-assets"]))
# Environment: GPU_QUICK=1 skips the 8B benchmarks; OUT (if set) receives the logs.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
ASSETS=$ROOT/gpu-assets
B=$ROOT/build-gpu
LOG=${OUT:-$ROOT/build-gpu-logs}
mkdir -p "$LOG"
T0=$(date +%s)
ROWS=()
row() { ROWS+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); }
elapsed() { echo $(( $(date +%s) - T0 ))s; }

if [ ! -d "$ASSETS/debs" ] || [ ! -d "$ASSETS/models" ]; then
  echo "run.sh: gpu-assets/{debs,models} missing (bash tests/gpu/prepare.sh on a Debian machine)"; exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1

# ---- 1. the server libraries from the carried .deb files (no dpkg needed) --------------
PREFIX=$ASSETS/prefix
if [ ! -f "$PREFIX/.done" ]; then
  python3 - "$ASSETS/debs" "$PREFIX" <<'PY'
import io, sys, tarfile, pathlib
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
dst.mkdir(parents=True, exist_ok=True)
for deb in sorted(src.glob("*.deb")):
    data = deb.read_bytes()
    assert data[:8] == b"!<arch>\n", deb
    off = 8
    while off < len(data):
        name = data[off:off + 16].decode().strip().rstrip("/")
        size = int(data[off + 48:off + 58].decode().strip())
        body = data[off + 60:off + 60 + size]
        off += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as t:
                t.extractall(dst, filter="tar") if hasattr(tarfile, "data_filter") else t.extractall(dst)
PY
  touch "$PREFIX/.done"
fi
LIBDIR=$(dirname "$(find "$PREFIX" -name 'libuv.so' | head -1)")
export LD_LIBRARY_PATH=$LIBDIR:${LD_LIBRARY_PATH:-}

# ---- 2. build (sm_90 only) -------------------------------------------------------------
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DINFERD_CUDA=ON -DINFERD_GPU_TESTS=ON -DINFERD_EMU=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DINFERD_SHARED_DIR="$ASSETS" \
  -DCJSON_INCLUDE_DIR="$PREFIX/usr/include" -DCJSON_LIBRARY="$LIBDIR/libcjson.so" \
  -DUV_INCLUDE_DIR="$PREFIX/usr/include" -DUV_LIBRARY="$LIBDIR/libuv.so" >"$LOG/configure.log" 2>&1 \
  || { tail -30 "$LOG/configure.log"; exit 1; }
TARGETS=(inferd gpu_membw test_engine_spec)
for t in tests/cuda/test_*.cu; do TARGETS+=("gpu_$(basename "$t" .cu)"); done
if cmake --build "$B" -j "$(nproc)" --target "${TARGETS[@]}" >"$LOG/build.log" 2>&1; then
  row "build (sm_90)" ok "$(elapsed)"
else
  grep -E "error|warning" "$LOG/build.log" | head -30
  row "build (sm_90)" FAIL "see build.log"
  printf '%s\n' "${ROWS[@]}"; exit 1
fi

# ---- 3. every kernel test, natively ----------------------------------------------------
FAILS=0
for t in tests/cuda/test_*.cu; do
  n=gpu_$(basename "$t" .cu)
  s=$(date +%s.%N)
  if timeout 120 "$B/$n" >"$LOG/$n.log" 2>&1; then r=ok; else r=FAIL; FAILS=$((FAILS+1)); fi
  row "$n" $r "$(tail -1 "$LOG/$n.log") ($(python3 -c "print(f'{$(date +%s.%N)-$s:.1f}s')"))"
done

# ---- 4. end to end: greedy tokens on the GPU vs the CPU backend -------------------------
for m in "$ASSETS"/models/shakespeare-*.gguf; do
  name=$(basename "$m" .gguf)
  for p in "ROMEO:" "The king"; do
    # an f32 KV cache on both (the defaults differ: bf16 on CUDA, f16 on the CPU)
    a=$("$B/inferd" generate -m "$m" -p "$p" -n 48 --temp 0 --ids --device cuda --kv-cache-dtype f32 2>"$LOG/e2e-$name.err")
    b=$("$B/inferd" generate -m "$m" -p "$p" -n 48 --temp 0 --ids --device cpu --kv-cache-dtype f32 2>>"$LOG/e2e-$name.err")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then r=same; else r=DIFF; FAILS=$((FAILS+1)); fi
    row "greedy $name '$p'" "$r" "$(echo "$a" | wc -w) tokens"
  done
done
# every KV dtype on the GPU: the first 16 greedy tokens as the CPU backend's with that dtype
m=$ASSETS/models/shakespeare-target.gguf
for kd in f16 bf16 int8 fp8; do
  a=$("$B/inferd" generate -m "$m" -p "ROMEO:" -n 16 --temp 0 --ids --device cuda --kv-cache-dtype $kd 2>"$LOG/e2e-kv-$kd.err")
  b=$("$B/inferd" generate -m "$m" -p "ROMEO:" -n 16 --temp 0 --ids --device cpu --kv-cache-dtype $kd 2>>"$LOG/e2e-kv-$kd.err")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then r=same; else r=DIFF; FAILS=$((FAILS+1)); fi
  row "greedy kv $kd (16 tokens)" "$r" "$(echo "$a" | wc -w) tokens"
done

# ---- 4a. PD disaggregation: KV blocks out of and into the device pool (issue 13) ----------
s=$(date +%s.%N)
if INFERD_TEST_DEVICE=cuda timeout 300 "$B/test_pd" test_identical_device >"$LOG/pd-device.log" 2>&1; then r=ok
else r=FAIL; FAILS=$((FAILS+1)); fi
row "pd: colocated vs disaggregated (cuda)" $r "$(tail -1 "$LOG/pd-device.log") ($(python3 -c "print(f'{$(date +%s.%N)-$s:.1f}s')"))"

# ---- 4b. speculative decoding on the GPU (issue 11) -------------------------------------
# verification rows drawn by the device sampler: greedy and seeded output as plain decoding
s=$(date +%s.%N)
if INFERD_TEST_DEVICE=cuda timeout 300 "$B/test_engine_spec" test_device_verify >"$LOG/spec-device.log" 2>&1; then r=ok
else r=FAIL; FAILS=$((FAILS+1)); fi
row "speculative: verify on the device" $r "$(tail -1 "$LOG/spec-device.log") ($(python3 -c "print(f'{$(date +%s.%N)-$s:.1f}s')"))"
m=$ASSETS/models/shakespeare-target.gguf
a=$("$B/inferd" generate -m "$m" -p "ROMEO:" -n 64 --temp 0 --ids --device cuda 2>"$LOG/spec-e2e.err")
b=$("$B/inferd" generate -m "$m" -p "ROMEO:" -n 64 --temp 0 --ids --device cuda \
    --draft-model "$ASSETS/models/shakespeare-draft.gguf" --no-speculative-adaptive 2>>"$LOG/spec-e2e.err")
if [ -n "$a" ] && [ "$a" = "$b" ]; then r=same; else r=DIFF; FAILS=$((FAILS+1)); fi
row "speculative: greedy, draft K=4 vs plain (cuda)" "$r" "$(echo "$a" | wc -w) tokens"

# ---- 5. benchmarks -----------------------------------------------------------------------
BW=$("$B/gpu_membw" 4096 2>"$LOG/membw.err")
COPY=$(echo "$BW" | python3 -c 'import json,sys; print(json.load(sys.stdin)["copy_gbps"])' 2>/dev/null || echo 0)
row "device copy bandwidth" "$COPY" "GB/s (read + write)"
bench() { # NAME DTYPE N_REQ IN OUT MAX_SEQS [more options]
  local name=$1 dt=$2 nr=$3 il=$4 ol=$5 ms=$6; shift 6
  "$B/inferd" bench --device cuda --random-weights llama3-8b --dtype "$dt" --num-requests "$nr" \
    --input-len-range "$il" --output-len-range "$ol" --max-num-seqs "$ms" "$@" >"$LOG/bench-$name.log" 2>&1
  tail -1 "$LOG/bench-$name.log"
}
if [ "${GPU_QUICK:-0}" != 1 ]; then
  for dt in bf16 q4_0 q4_k; do
    j=$(bench "b1-$dt" $dt 1 128 256 1)
    # inferd bench's last line is JSON; batch-1 decode rate = 1000 / TPOT p50 (ms)
    row "llama3-8b $dt batch-1 decode" "$(echo "$j" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(1000.0 / d["tpot_ms_p50"], 1) if d.get("tpot_ms_p50") else "?")' 2>/dev/null || echo '?')" "tok/s  (bench-b1-$dt.log)"
  done
  # issue 10: weight-only INT8 / INT4-g128 quantized on load from BF16, batch 1
  for q in int8 int4; do
    j=$(bench "b1-$q" bf16 1 128 256 1 --quantize $q)
    row "llama3-8b bf16 --quantize $q batch-1 decode" "$(echo "$j" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(1000.0 / d["tpot_ms_p50"], 1) if d.get("tpot_ms_p50") else "?")' 2>/dev/null || echo '?')" "tok/s  (bench-b1-$q.log: weight_bytes)"
  done
  # issue 11: a verification of k drafts against one decode step (startup measurement)
  "$B/inferd" bench --device cuda --random-weights llama3-8b --dtype bf16 --speculative-ngram \
    --num-speculative-tokens 8 --num-requests 1 --input-len-range 8 --output-len-range 2 \
    >"$LOG/bench-verify-cost.log" 2>&1
  row "llama3-8b verify cost t(1+k)/t(1), k=1..8" "$(python3 - "$LOG/bench-verify-cost.log" <<'PY'
import re, sys
m = re.search(r"target forward ms ([0-9.: ]+)", open(sys.argv[1]).read())
d = dict((int(float(a)), float(b)) for a, b in (p.split(":") for p in m.group(1).split())) if m else {}
print(" ".join(f"{d[k + 1] / d[1]:.2f}" if k + 1 in d and 1 in d else "?" for k in range(1, 9)))
PY
)" "(bench-verify-cost.log)"
  for c in 64 256; do
    j=$(bench "c$c" bf16 $c 128 512 $c)
    row "llama3-8b bf16 $c concurrent (128 in, 512 out)" "$(echo "$j" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["output_tok_per_s"], 1))' 2>/dev/null || echo '?')" "output tok/s"
  done
fi

echo
echo "== tests/gpu/run.sh summary ($(elapsed)) =="
printf '%s\n' "${ROWS[@]}"
exit $(( FAILS > 0 ))
