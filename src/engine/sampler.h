/* sampler.h — token sampling from logits with a per-request seeded RNG.
 *
 * Pipeline (fixed order): temperature 0 -> greedy argmax; otherwise logits / T,
 * top-k, top-p (nucleus), min-p, then one draw from the renormalized distribution.
 * Penalties and logit_bias are applied by the caller to the logits first
 * (sampler_apply_penalties). Not thread-safe per sampler_scratch; pure otherwise. */
#ifndef INFERD_SAMPLER_H
#define INFERD_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ifd_rng {
    uint64_t s[4]; /* xoshiro256** state */
} ifd_rng;

void rng_seed(ifd_rng *r, uint64_t seed);
uint64_t rng_next(ifd_rng *r);
double rng_uniform(ifd_rng *r); /* [0, 1) */

typedef struct sampler_params {
    float temperature; /* 0 = greedy */
    int32_t top_k;     /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
} sampler_params;

typedef struct sampler_cand {
    int32_t id;
    float logit; /* then probability */
} sampler_cand;

/* Scratch for one sampling call: n_vocab candidates. Caller-allocated, reused. */
typedef struct sampler_scratch {
    sampler_cand *cand;
    int32_t cap;
} sampler_scratch;

int sampler_scratch_init(sampler_scratch *s, int32_t n_vocab);
void sampler_scratch_deinit(sampler_scratch *s);

/* Index of the largest logit (lowest id on ties). */
int32_t sampler_argmax(const float *logits, int32_t n);

/* Sample one id. logits are not modified. */
int32_t sampler_sample(const sampler_params *p, const float *logits, int32_t n_vocab, ifd_rng *rng,
                       sampler_scratch *scr);

#endif
