/* sampler.h — token sampling from logits with a per-request seeded RNG.
 *
 * Pipeline (fixed order), all on a scratch copy of the logits:
 *   1. penalties   repetition (prompt + output ids), then presence / frequency
 *                  (output ids only), from the per-sequence sampler_state;
 *   2. logit_bias  sparse (id, bias) pairs added; banned ids set to -inf;
 *   3. temperature 0 (or below SAMPLER_GREEDY_EPS): argmax, lowest id on ties;
 *   4. temperature logits / T;
 *   5. top_k       keep the k best;
 *   6. top_p       keep the shortest best-first prefix whose mass (renormalized over
 *                  the top_k survivors) reaches top_p;
 *   7. min_p       keep ids with p >= min_p * p_max;
 *   8. one draw    from the survivors, renormalized.
 *
 * Determinism: for a given seed, params, penalty state and logits the result is a pure
 * function; candidate order is fixed by (logit desc, id asc) and every partition step
 * is deterministic, so nothing depends on qsort stability or the platform's rand().
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

typedef struct ifd_rng {
    uint64_t s[4]; /* xoshiro256** state */
} ifd_rng;

void rng_seed(ifd_rng *r, uint64_t seed);
uint64_t rng_next(ifd_rng *r);
double rng_uniform(ifd_rng *r); /* [0, 1) */

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
} sampler_params;

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
    float logit; /* then the unnormalized weight exp(logit - max) */
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

/* The whole pipeline for one token. logits (n_vocab, raw from the model) are not
 * modified; st may be NULL (no penalties). Does not update st: the caller calls
 * sampler_state_accept with the token it keeps. If every logit is -inf after
 * penalties and bans, returns the lowest id (deterministic, possibly banned). */
int32_t sampler_sample_seq(const sampler_params *p, const sampler_state *st, const float *logits,
                           int32_t n_vocab, ifd_rng *rng, sampler_scratch *scr);

/* Same without penalty state (logit_bias and banned ids still apply). */
int32_t sampler_sample(const sampler_params *p, const float *logits, int32_t n_vocab, ifd_rng *rng,
                       sampler_scratch *scr);

#endif
