/* sampler.h — token sampling from logits with a counter-based RNG keyed by (seed, position).
 *
 * Pipeline (fixed order), all on a scratch copy of the logits:
 *   1. penalties   repetition (prompt + output ids), then presence / frequency
 *                  (output ids only), from the per-sequence sampler_state;
 *   2. logit_bias  sparse (id, bias) pairs added in list order; ids a grammar disallows
 *                  (allow) and banned ids set to -inf;
 *   3. temperature 0 (or below SAMPLER_GREEDY_EPS), or top_k 1: argmax of the penalized
 *                  logits, lowest id on ties, NaN as -inf;
 *   4. temperature x = l * (1/T) (one float multiply, 1/T a float division; NaN -> -inf,
 *                  -0 counts as +0); m = max x; if m is -inf, the argmax of step 3;
 *   5. top_k       keep the k best in the order (x desc, id asc): a strict total order;
 *   6. weights     w = 1 if x == m, else sampler_expneg(x - m) (float, below);
 *                  q = (uint64) trunc(w * 2^SAMPLER_Q_BITS), an integer weight; the
 *                  normaliser Z = sum of q over the top_k survivors (integer, exact);
 *   7. min_p       keep ids with w >= min(min_p, 1) (p >= min_p * p_max);
 *   8. top_p       keep the shortest best-first prefix (same order) of the min_p
 *                  survivors whose sum of q reaches t = ceil(top_p * (double)Z) (the
 *                  mass is renormalized over the top_k survivors, not the min_p ones);
 *   9. one draw    total = sum of q over the survivors; r = the 64-bit Philox draw for
 *                  (key, position); u = floor(r * total / 2^64) (an exact 64x64->128
 *                  multiply); the token is the first survivor, best first, at which the
 *                  running sum of q exceeds u.
 *
 * Why integers: every sum above is a sum of uint64, so it is exact and the same in any
 * order. The device op (kernels/sample.cu) computes it with a parallel radix select and
 * block reductions in whatever order its threads run and still gets the same bits,
 * hence exactly this function's token for the same logits, params, key and position.
 * The float steps (penalties, x, expneg) are single IEEE operations, written so that
 * no compiler may fuse a multiply and an add (sampler.c turns contraction off; the
 * kernel uses __fmul_rn / __fadd_rn). Cost of the integers: a weight below 2^-42 of the
 * best (a logit more than 29 nats below the maximum after temperature) counts as 0 and
 * is never drawn; such ids carry less than 2^-42 * n_vocab of the mass in total.
 *
 * RNG: Philox-4x32-10 (Salmon et al., Random123) — the draw is a pure function of a
 * 64-bit key (the request seed, decorrelated per choice by the engine) and a 64-bit
 * counter, the position of the token being sampled. ifd_rng carries the key and the
 * next counter; sampler_sample_seq uses counter rng->ctr and then advances it (once
 * per call, greedy included), so the counter of a sequence's j-th sampled token is j.
 * A device sampling the same row is handed (rng->key, rng->ctr) and advances ctr too.
 *
 * Determinism: for a given key, position, params, penalty state and logits the result
 * is a pure function; nothing depends on qsort stability, summation order or the
 * platform's rand().
 *
 * Memory: nothing is allocated on the step path. sampler_scratch (n_vocab candidates
 * and a logits copy) is allocated once per engine or request; sampler_state (penalty
 * counts) once per sequence.
 *
 * Not thread-safe per sampler_scratch / sampler_state; pure otherwise.
 * Logprobs (from the raw logits) live in logprobs.h. */
#ifndef INFERD_SAMPLER_H
#define INFERD_SAMPLER_H
#include "../util/layer/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A counter-based generator: draw j is philox(key, j). Copyable; no hidden state. */
typedef struct ifd_rng {
    uint64_t key; /* the seed */
    uint64_t ctr; /* the counter of the next draw */
} ifd_rng;

void rng_seed(ifd_rng *r, uint64_t seed); /* key = seed, ctr = 0 */
uint64_t rng_next(ifd_rng *r);            /* sampler_draw_bits(key, ctr++) */
double rng_uniform(ifd_rng *r);           /* [0, 1), 53 bits of rng_next */

/* Philox-4x32-10 of counter (ctr[0..3]) under key (key[0..1]) into out[4]. */
void sampler_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The 64-bit draw for (key, counter): philox of counter words (lo, hi, 0, 0) and key
 * words (lo, hi); out[0] | out[1] << 32. */
uint64_t sampler_draw_bits(uint64_t key, uint64_t counter);

/* exp(d) for d <= 0 from single float operations in a fixed order (Cody-Waite
 * reduction by ln 2, a degree-7 Horner polynomial, exact scaling by 2^k): within 2 ulp
 * of exp, the same bits on every IEEE platform (the device op repeats it). Returns 0
 * for d < -86 (and NaN), 1 for d >= 0. */
float sampler_expneg(float d);

/* Integer weights: q = trunc(w * 2^SAMPLER_Q_BITS) with w in [0, 1]; with at most
 * SAMPLER_MAX_VOCAB ids their sum stays below 2^63. */
#define SAMPLER_Q_BITS 42
#define SAMPLER_MAX_VOCAB (1 << 21)

/* Temperatures below this are greedy (logits / T would overflow float). */
#define SAMPLER_GREEDY_EPS 1e-5f

/* One logit_bias entry; same layout as inferd_logit_bias. */
typedef struct sampler_bias {
    int32_t id;
    float bias; /* added to the logit; -100 effectively bans, +100 effectively forces */
} sampler_bias;

/* A zero-initialized struct is greedy with every filter and penalty off. */
typedef struct sampler_params {
    float temperature;        /* 0 = greedy */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* <= 0 or >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* 0 or 1: off; > 1 discourages repeats (HF / vLLM) */
    float presence_penalty;   /* 0: off; OpenAI semantics, generated tokens only */
    float frequency_penalty;  /* 0: off; OpenAI semantics, generated tokens only */
    const sampler_bias *logit_bias; /* borrowed; [n_logit_bias] */
    int32_t n_logit_bias;
    const int32_t *banned;    /* borrowed; ids never drawn (ignore_eos: the EOG ids) */
    int32_t n_banned;
    /* constrained decoding (borrowed): an id whose bit is clear in allow (bit id of word
     * id / 32) is never drawn, unless it is one of allow_extra; NULL: no constraint.
     * Applied after logit_bias, before the bans (step 2). */
    const uint32_t *allow;
    const int32_t *allow_extra; /* at most SAMPLER_MAX_EXTRA count */
    int32_t n_allow_extra;
} sampler_params;
#define SAMPLER_MAX_EXTRA 65 /* SAMP_MAX_EXTRA: the device op keeps as many */

/* OpenAI defaults: temperature 1, everything else off. */
sampler_params sampler_params_default(void);

/* IFD_OK, or IFD_ERR_INVALID for values a request must not carry (NaN, negative
 * temperature, top_p / min_p outside [0, 1], negative repetition penalty,
 * presence / frequency outside [-2, 2], bias or banned ids outside [0, n_vocab)). The
 * sampler itself never trusts these: out-of-range ids are skipped, not asserted. */
int sampler_params_validate(const sampler_params *p, int32_t n_vocab);

/* ---- per-sequence penalty state --------------------------------------------------
 * Dense counts (n_vocab int32) plus the list of distinct ids seen, so an update is
 * O(1) and applying the penalties is O(distinct ids), never O(n_vocab). The prompt's
 * ids count for repetition_penalty only; generated ids count for all three. */
typedef struct sampler_state {
    int32_t *count;   /* (n_vocab) occurrences among generated tokens */
    uint8_t *flags;   /* (n_vocab) SAMPLER_SEEN_* bits */
    int32_t *seen;    /* (n_vocab) distinct ids in prompt or output, first-seen order */
    int32_t n_seen;
    int32_t n_vocab;
    int32_t n_generated;
} sampler_state;

int sampler_state_init(sampler_state *st, int32_t n_vocab); /* IFD_OK / IFD_ERR_NOMEM */
void sampler_state_deinit(sampler_state *st);                /* NULL / zeroed ok */
/* Forget every id in O(distinct ids) (reuse for a new request or a restart). */
void sampler_state_reset(sampler_state *st);
/* Copy src's counts into dst (same n_vocab): forking n > 1 choices. O(distinct ids)
 * after a reset of dst. */
void sampler_state_copy(sampler_state *dst, const sampler_state *src);
/* Record the prompt's ids. IFD_ERR_INVALID if one is outside [0, n_vocab) (it is
 * skipped; the rest are recorded). */
int sampler_state_add_prompt(sampler_state *st, const int32_t *ids, int32_t n);
/* Record one generated id. O(1). id must be in range (it came from the sampler). */
void sampler_state_accept(sampler_state *st, int32_t id);

/* Steps 1-2 in place on logits[n_vocab]: penalties (st may be NULL: none), logit_bias,
 * banned ids. O(distinct ids + n_logit_bias + n_banned). */
void sampler_apply_penalties(const sampler_params *p, const sampler_state *st, float *logits,
                             int32_t n_vocab);

/* ---- sampling ---------------------------------------------------------------------- */
typedef struct sampler_cand {
    int32_t id;
    float x;    /* the logit after penalties and temperature (the order key) */
    uint64_t q; /* the integer weight (step 6) */
} sampler_cand;

/* Scratch for one sampling call at a time. Caller-allocated, reused across steps. */
typedef struct sampler_scratch {
    sampler_cand *cand; /* (cap) */
    float *work;        /* (cap) the penalized logits */
    int32_t cap;
} sampler_scratch;

int sampler_scratch_init(sampler_scratch *s, int32_t n_vocab); /* IFD_OK / IFD_ERR_NOMEM */
void sampler_scratch_deinit(sampler_scratch *s);                /* zeroed ok */

/* Index of the largest logit (lowest id on ties; NaN counts as -inf). */
int32_t sampler_argmax(const float *logits, int32_t n);

/* The whole pipeline for one token, drawn with counter `position` under `key`.
 * logits (n_vocab <= SAMPLER_MAX_VOCAB, raw from the model) are not modified; st may
 * be NULL (no penalties). Does not update st: the caller calls sampler_state_accept
 * with the token it keeps. If every logit is -inf after penalties and bans, returns
 * the lowest id (deterministic, possibly banned). */
int32_t sampler_sample_at(const sampler_params *p, const sampler_state *st, const float *logits,
                          int32_t n_vocab, uint64_t key, uint64_t position, sampler_scratch *scr);

/* sampler_sample_at(key = rng->key, position = rng->ctr), then rng->ctr++. */
int32_t sampler_sample_seq(const sampler_params *p, const sampler_state *st, const float *logits,
                           int32_t n_vocab, ifd_rng *rng, sampler_scratch *scr);

/* Same without penalty state (logit_bias and banned ids still apply). */
int32_t sampler_sample(const sampler_params *p, const float *logits, int32_t n_vocab, ifd_rng *rng,
                       sampler_scratch *scr);

#endif
