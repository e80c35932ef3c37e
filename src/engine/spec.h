/* spec.h — speculative decoding's proposers and verification rules (issue 11): pure
 * functions over token ids, no allocation, no engine state. The engine integration
 * (draft model, flat-batch verification, KV rollback, adaptive k) builds on these.
 *
 * N-gram proposer (prompt lookup): the pattern is the last n tokens of the history
 * (prompt + output so far), n from n_max down to n_min (the longest pattern that
 * occurs wins); its most recent earlier occurrence, hist[i .. i+n) with i + n < n_hist,
 * is followed by hist[i+n ..]; up to k of those tokens are the proposal (fewer when the
 * history ends first). Cost: O(n_hist * n_max) compares per call at worst; the scan
 * runs from the end, so a recent repeat is found after few.
 *
 * Greedy verification (temperature 0): the target's argmax at each of the k+1
 * verified positions; the longest prefix of the draft equal to them is accepted, then
 * the target's own token at the first mismatch (or after the last draft token). */
#ifndef INFERD_SPEC_H
#define INFERD_SPEC_H
#include "../util/layer/engine.h"

#include <stdint.h>

#define SPEC_NGRAM_MAX 64 /* the longest pattern spec_ngram_propose accepts */

/* Writes up to k tokens to out and returns how many (0: no pattern length in
 * [n_min, n_max] occurs earlier, or bad arguments: n_min < 1, n_max < n_min,
 * n_max > SPEC_NGRAM_MAX, k < 1, n_hist < 2). */
int32_t spec_ngram_propose(const int32_t *hist, int32_t n_hist, int32_t n_min, int32_t n_max,
                           int32_t k, int32_t *out);

/* draft[0..k), target[0..k] (the target's argmax after each prefix); writes the
 * emitted tokens to out (room for k + 1) and returns their count, 1 .. k + 1; the
 * accepted draft tokens are that count minus one. k = 0 emits target[0]. */
int32_t spec_verify_greedy(const int32_t *draft, const int32_t *target, int32_t k, int32_t *out);

#endif
