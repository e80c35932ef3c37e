#!/usr/bin/env bash
# run_fuzz.sh BUILD_DIR SECONDS [TARGET] — build the libFuzzer targets with clang in
# BUILD_DIR and fuzz for SECONDS in all: fuzz_gguf (the GGUF reader) 3/8 of the time,
# fuzz_chat (chat request -> template -> tokenize) 1/4, fuzz_openai (the request
# parser) and fuzz_httpd (raw bytes to the HTTP server) 3/16 each, fuzz_grammar (JSON
# Schema / GBNF / regex -> masks, taken from fuzz_gguf's share) 1/8; with TARGET that one
# alone, for all of it. fuzz_gguf's corpus, tests/fuzz/corpus-run/ (gitignored), is
# seeded with the first 64 KiB of every shared GGUF and two tiny valid files written
# here; fuzz_openai's, tests/fuzz/corpus-run-openai/, with tests/fuzz/openai_seeds.sh's
# requests and tests/fuzz/openai.dict; fuzz_chat's and fuzz_httpd's (in BUILD_DIR) with
# a few seeds written here. Exits non-zero on a crash, leak, timeout, sanitizer report
# or broken property (the reproducer lands in BUILD_DIR/<target>-*).
# CI: tests/fuzz/run_fuzz.sh build-fuzz 60
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 BUILD_DIR SECONDS [fuzz_gguf|fuzz_openai|fuzz_chat|fuzz_httpd|fuzz_grammar]" >&2
    exit 2
fi
build=$1
secs=$2
only=${3:-}
case "$only" in
"" | fuzz_gguf | fuzz_openai | fuzz_chat | fuzz_httpd | fuzz_grammar) ;;
*)
    echo "run_fuzz: unknown target $only" >&2
    exit 2
    ;;
esac
gguf_secs=0 openai_secs=0 chat_secs=0 httpd_secs=0 grammar_secs=0
case "$only" in
"")
    openai_secs=$((secs * 3 / 16))
    httpd_secs=$((secs * 3 / 16))
    chat_secs=$((secs / 4))
    grammar_secs=$((secs / 8))
    gguf_secs=$((secs - openai_secs - httpd_secs - chat_secs - grammar_secs))
    ;;
fuzz_grammar) grammar_secs=$secs ;;
fuzz_gguf) gguf_secs=$secs ;;
fuzz_openai) openai_secs=$secs ;;
fuzz_chat) chat_secs=$secs ;;
fuzz_httpd) httpd_secs=$secs ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
shared=$root/../shared

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DINFERD_CUDA=OFF -DINFERD_EMU=OFF >/dev/null
if ! grep -q '^CMAKE_C_COMPILER:.*clang' "$build/CMakeCache.txt"; then
    echo "run_fuzz: $build was configured with a compiler other than clang; remove it" >&2
    exit 2
fi
targets=()
[ "$gguf_secs" -gt 0 ] && targets+=(fuzz_gguf)
[ "$openai_secs" -gt 0 ] && targets+=(fuzz_openai)
[ "$chat_secs" -gt 0 ] && targets+=(fuzz_chat)
[ "$httpd_secs" -gt 0 ] && targets+=(fuzz_httpd)
[ "$grammar_secs" -gt 0 ] && targets+=(fuzz_grammar)
cmake --build "$build" --target "${targets[@]}"

# fuzz TARGET SECONDS LIBFUZZER-ARGS...: run one target, print its summary lines.
fuzz() {
    local target=$1 t=$2 log=$build/$1.log rc
    shift 2
    echo "run_fuzz: $target for $t s"
    set +e
    "$build/$target" -max_total_time="$t" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$build/$target-" "$@" 2>&1 | tee "$log" |
        grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|Done |==[0-9]+==ERROR|fuzz_[a-z]+:|SUMMARY|stat::number_of_executed_units)'
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -ne 0 ]; then
        echo "run_fuzz: $target failed (exit $rc); full log in $log" >&2
        tail -n 40 "$log" >&2
        exit "$rc"
    fi
}

if [ "$openai_secs" -gt 0 ]; then
    ocorpus=tests/fuzz/corpus-run-openai
    bash tests/fuzz/openai_seeds.sh "$ocorpus"
    fuzz fuzz_openai "$openai_secs" -max_len=16384 -dict=tests/fuzz/openai.dict "$ocorpus"
fi
if [ "$chat_secs" -gt 0 ]; then
    chat_corpus=$build/fuzz-chat-corpus
    mkdir -p "$chat_corpus"
    # the target builds a conversation out of any bytes: a few byte patterns
    printf '\x00\x00\x0b\x04\x01\x03\x10\x11\x12\x13' >"$chat_corpus/seed-short"
    printf '\x04\x04\x03\x05\xa1\x05\x30\x31\x40\x41\x50\x22\x23\x24\x25\x26\x27\x28' >"$chat_corpus/seed-phi3"
    seq 1 200 | tr -d '\n' >"$chat_corpus/seed-digits"
    # found by CI: raw bytes spelling the oracle's closing fence inside a user message
    printf '\x04\x04\x03\x05\xe2\x9f\xa6\xef\xb7\x91\xe2\x9f\xa7\x03\x05\xa1\x05\x30\x31\x40\x41\x50\x22\x23\x01\x00\x61' >"$chat_corpus/seed-fence-r"
    fuzz fuzz_chat "$chat_secs" -max_len=4096 -timeout=20 "$chat_corpus"
fi
if [ "$httpd_secs" -gt 0 ]; then
    hcorpus=$build/fuzz-httpd-corpus
    mkdir -p "$hcorpus"
    # the first byte of an input is where it is split into two writes
    printf '\x10GET /health HTTP/1.1\r\nHost: x\r\n\r\n' >"$hcorpus/seed-get"
    printf '\x05POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc' >"$hcorpus/seed-post"
    printf '\x30POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n' >"$hcorpus/seed-chunked"
    printf '\x00GET /stream HTTP/1.1\r\n\r\nGET /x HTTP/1.0\r\nX-Deny: 1\r\nExpect: 100-continue\r\n\r\n' >"$hcorpus/seed-pipe"
    fuzz fuzz_httpd "$httpd_secs" -max_len=4096 -timeout=20 "$hcorpus"
fi
if [ "$grammar_secs" -gt 0 ]; then
    gcorpus=$build/fuzz-grammar-corpus
    mkdir -p "$gcorpus"
    # the JSON Schema corpus (first byte 0: a schema), a GBNF grammar (1), regexes (2)
    i=0
    for f in tests/data/json_schema/own/*.json; do
        [ -f "$f" ] || continue
        { printf '\x00'; head -c 4000 "$f"; } >"$gcorpus/seed-schema-$i"
        i=$((i + 1))
        [ "$i" -ge 40 ] && break
    done
    printf '\x01root ::= obj\nobj ::= "{" ws (str ws ":" ws val ("," ws str ws ":" ws val)*)? "}"\nval ::= str | [0-9]+ | obj\nstr ::= "\\"" [a-z]* "\\""\nws ::= [ \\n]{0,2}\n' >"$gcorpus/seed-gbnf"
    printf '\x01root ::=' >"$gcorpus/seed-gbnf-empty" # once a NULL + 0 in the compiler (UBSan)
    printf '\x02^[A-Z][a-z]{2,8}(, [a-z]+)*\\.$' >"$gcorpus/seed-regex"
    printf '\x02(\\d{3}-)?\\w+@[a-z]+\\.(com|org)' >"$gcorpus/seed-regex2"
    fuzz fuzz_grammar "$grammar_secs" -max_len=4096 -timeout=20 "$gcorpus"
fi
if [ "$gguf_secs" -eq 0 ]; then
    echo "run_fuzz: ok"
    exit 0
fi

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

echo "run_fuzz: $n_seeds seeds in $corpus"
fuzz fuzz_gguf "$gguf_secs" -max_len=65536 "$corpus"
echo "run_fuzz: ok"
