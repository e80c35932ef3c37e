#!/usr/bin/env bash
# Issue 11's speculative decoding figures: output tokens/s with and without speculation
# (draft model, n-gram), acceptance rate and mean accepted length, per batch size and
# prompt set, all in one run on one machine (modes alternate batch by batch).
#
#   bench/spec_bench.sh BUILD TARGET.gguf DRAFT.gguf [OUT_TOKENS] [PROMPT_FILE ...]
#
# Defaults: OUT_TOKENS 128; prompt files bench/prompts/shakespeare-prose.txt and
# bench/prompts/repeat.txt (texts whose continuation repeats them). Batch sizes: BATCHES
# (default "1 4 16"); each run has 2 x batch requests (max-num-seqs = batch), greedy,
# ignore_eos, THREADS threads (default 2). Modes: plain, draft (adaptive K=4), ngram
# (adaptive K=4), and with FIXED=1 the draft at fixed K too; MODES="plain draft ngram both
# draft-fixed" picks them (both: the draft and the n-gram proposer together). tok/s = output_tok_per_s of
# `inferd bench` (its JSON line), the best of REPS runs (default 1) that alternate mode by
# mode (a shared machine drifts by 10%: compare only alternating runs); x = over plain in
# the same batch and prompt set. tpot = TPOT p50 (ms per output token after the first, per
# request: the decode speed speculation changes; prefill and queueing are outside it), dx =
# plain's TPOT over the mode's (the per-sequence decode speed-up; x also counts prefill).
# DRAFT_ARGS: more options of the draft modes (e.g. "--draft-vocab 32768 --num-speculative-tokens 3").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?build dir}; TARGET=${2:?target.gguf}; DRAFT=${3:?draft.gguf}; OUT=${4:-128}
shift $(( $# < 4 ? $# : 4 ))
FILES=("$@"); [ ${#FILES[@]} -gt 0 ] || FILES=(bench/prompts/shakespeare-prose.txt bench/prompts/repeat.txt)
BATCHES=${BATCHES:-1 4 16}; THREADS=${THREADS:-2}; PY=${PYTHON:-python3}
BIN=$BUILD/inferd
[ -x "$BIN" ] && [ -f "$TARGET" ] && [ -f "$DRAFT" ] || { echo "usage: $0 BUILD TARGET DRAFT [OUT] [PROMPTS...]" >&2; exit 1; }
if [ -n "${MODES:-}" ]; then
  read -r -a MODES <<<"$MODES"
  for m in "${MODES[@]}"; do
    case $m in plain|draft|ngram|both|draft-fixed) ;; *) echo "$0: unknown mode '$m' in MODES" >&2; exit 1 ;; esac
  done
  [ "${MODES[0]}" = plain ] || { echo "$0: MODES must start with plain (x is over it)" >&2; exit 1; }
else
  MODES=(plain draft ngram); [ "${FIXED:-0}" = 1 ] && MODES+=(draft-fixed)
fi
args_of() {
  case $1 in
    plain) ;;
    draft) echo "--draft-model $DRAFT ${DRAFT_ARGS:-}" ;;
    ngram) echo "--speculative-ngram" ;;
    both) echo "--draft-model $DRAFT --speculative-ngram ${DRAFT_ARGS:-}" ;;
    draft-fixed) echo "--draft-model $DRAFT --no-speculative-adaptive ${DRAFT_ARGS:-}" ;;
  esac
}
printf "%-26s %5s %-12s %9s %7s %8s %7s %8s %8s\n" prompts batch mode "tok/s" x tpot dx accept "mean acc"
REPS=${REPS:-1}
for f in "${FILES[@]}"; do
  for b in $BATCHES; do
    declare -A best=() accs=() mals=() tpots=()
    for _ in $(seq "$REPS"); do
      for m in "${MODES[@]}"; do
        # shellcheck disable=SC2046  # the mode's options are words
        line=$("$BIN" bench -m "$TARGET" -t "$THREADS" --prompt-file "$f" --num-requests $((2 * b)) \
               --max-num-seqs "$b" --output-len-range "$OUT" $(args_of "$m") 2>/dev/null | tail -1)
        read -r tps acc mal tpot < <($PY -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["output_tok_per_s"], j["spec_acceptance"], j["spec_mean_accepted"], j["tpot_ms_p50"])' "$line")
        if [ -z "${best[$m]:-}" ] || $PY -c "import sys; sys.exit(0 if $tps > ${best[$m]} else 1)"; then
          best[$m]=$tps; accs[$m]=$acc; mals[$m]=$mal; tpots[$m]=$tpot
        fi
      done
    done
    for m in "${MODES[@]}"; do
      x=$($PY -c "print(f'{${best[$m]} / ${best[plain]}:.2f}')")
      dx=$($PY -c "t=${tpots[$m]}; print(f'{${tpots[plain]} / t:.2f}' if t > 0 else '-')")
      printf "%-26s %5d %-12s %9.1f %7s %8.2f %7s %8.3f %8.3f\n" "$(basename "$f")" "$b" "$m" "${best[$m]}" "$x" "${tpots[$m]}" "$dx" "${accs[$m]}" "${mals[$m]}"
    done
    unset best accs mals tpots
  done
done
