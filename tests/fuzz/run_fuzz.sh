#!/usr/bin/env bash
# run_fuzz.sh BUILD_DIR SECONDS — build fuzz_gguf with clang in BUILD_DIR, seed
# tests/fuzz/corpus-run/ (gitignored) with the first 64 KiB of every shared GGUF and
# two tiny valid files written here, and fuzz for SECONDS. Exits non-zero on a crash,
# leak, timeout or sanitizer report (the reproducer lands in BUILD_DIR/fuzz_gguf-*).
# Then fuzz_chat (the chat path) for FUZZ_CHAT_SECONDS (default 20), corpus in BUILD_DIR.
# CI: tests/fuzz/run_fuzz.sh build-fuzz 60
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR SECONDS" >&2
    exit 2
fi
build=$1
secs=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
shared=$root/../shared

CC=clang cmake -S . -B "$build" -G Ninja -DINFERD_CUDA=OFF >/dev/null
if ! grep -q '^CMAKE_C_COMPILER:.*clang' "$build/CMakeCache.txt"; then
    echo "run_fuzz: $build was configured with a compiler other than clang; remove it" >&2
    exit 2
fi
cmake --build "$build" --target fuzz_gguf

corpus=tests/fuzz/corpus-run
mkdir -p "$corpus"
n_seeds=0
for f in "$shared"/models/*.gguf "$shared"/tokenizer-tests/*.gguf; do
    if [ ! -f "$f" ]; then
        echo "run_fuzz: no shared GGUF files under $shared" >&2
        exit 1
    fi
    head -c 65536 "$f" >"$corpus/seed-$(basename "$f" .gguf)"
    n_seeds=$((n_seeds + 1))
done

# ---- two tiny valid GGUF files, little-endian, written byte by byte ----------------
le() { # VALUE NBYTES
    local out="" i
    for ((i = 0; i < $2; i++)); do out+=$(printf '\\x%02x' $((($1 >> (8 * i)) & 255))); done
    printf '%b' "$out"
}
str() { le ${#1} 8; printf '%s' "$1"; }
key() { str "$1"; le "$2" 4; } # KEY GGUF_TYPE
pad() { # FILE ALIGN: zero-fill FILE to a multiple of ALIGN
    local n
    n=$(stat -c %s "$1")
    head -c $(((($2 - n % $2) % $2))) /dev/zero >>"$1"
}

tiny1=$corpus/seed-tiny-v3.gguf
{
    printf 'GGUF'; le 3 4; le 1 8; le 6 8                 # version, n_tensors, n_kv
    key general.architecture 8; str llama
    key a.u32 4; le 7 4
    key a.f32 6; le $((0x3f800000)) 4                     # 1.0f
    key a.bool 7; le 1 1
    key a.strs 9; le 8 4; le 2 8; str x; str yz           # ["x", "yz"]
    key a.nest 9; le 9 4; le 1 8; le 5 4; le 1 8; le 1 4  # [[1]] of int32
    str w; le 1 4; le 4 8; le 0 4; le 0 8                 # tensor w: F32 [4] at 0
} >"$tiny1"
pad "$tiny1" 32
head -c 16 /dev/zero >>"$tiny1"

tiny2=$corpus/seed-tiny-v2-align64.gguf
{
    printf 'GGUF'; le 2 4; le 1 8; le 1 8
    key general.alignment 4; le 64 4
    str q; le 2 4; le 32 8; le 2 8; le 8 4; le 0 8         # tensor q: Q8_0 [32, 2] at 0
} >"$tiny2"
pad "$tiny2" 64
head -c 68 /dev/zero >>"$tiny2"
n_seeds=$((n_seeds + 2))

echo "run_fuzz: $n_seeds seeds in $corpus, fuzzing for $secs s"
log=$build/fuzz_gguf.log
set +e
"$build/fuzz_gguf" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz_gguf-" "$corpus" 2>&1 | tee "$log" |
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|Done |==[0-9]+==ERROR|SUMMARY|stat::number_of_executed_units)'
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    echo "run_fuzz: fuzz_gguf failed (exit $rc); full log in $log" >&2
    tail -n 40 "$log" >&2
    exit "$rc"
fi
# ---- fuzz_chat: the chat template + tokenize path, FUZZ_CHAT_SECONDS (default 20) --------
chat_secs=${FUZZ_CHAT_SECONDS:-20}
cmake --build "$build" --target fuzz_chat
chat_corpus=$build/fuzz-chat-corpus
mkdir -p "$chat_corpus"
# seeds: a few byte patterns (the target builds a conversation out of any bytes)
printf '\x00\x00\x0b\x04\x01\x03\x10\x11\x12\x13' >"$chat_corpus/seed-short"
printf '\x04\x04\x03\x05\xa1\x05\x30\x31\x40\x41\x50\x22\x23\x24\x25\x26\x27\x28' >"$chat_corpus/seed-phi3"
seq 1 200 | tr -d '\n' >"$chat_corpus/seed-digits"
echo "run_fuzz: fuzz_chat for $chat_secs s"
chat_log=$build/fuzz_chat.log
set +e
"$build/fuzz_chat" -max_total_time="$chat_secs" -max_len=4096 -rss_limit_mb=2048 -timeout=20 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz_chat-" "$chat_corpus" 2>&1 | tee "$chat_log" |
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|Done |==[0-9]+==ERROR|fuzz_chat:|SUMMARY|stat::number_of_executed_units)'
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    echo "run_fuzz: fuzz_chat failed (exit $rc); full log in $chat_log" >&2
    tail -n 40 "$chat_log" >&2
    exit "$rc"
fi

echo "run_fuzz: ok"
