/* sampler.c — temperature / top-k / top-p / min-p sampling with xoshiro256**.
 * Deterministic for a given seed and logits: candidate order is fixed by (logit desc,
 * id asc), so ties never depend on sort stability. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/common.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(ifd_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(ifd_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(ifd_rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

int sampler_scratch_init(sampler_scratch *s, int32_t n_vocab) {
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->cap = s->cand ? n_vocab : 0;
    return s->cand ? IFD_OK : IFD_ERR_NOMEM;
}

void sampler_scratch_deinit(sampler_scratch *s) {
    free(s->cand);
    s->cand = NULL;
    s->cap = 0;
}

int32_t sampler_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Strict total order: logit descending, then id ascending. NaN logits never reach
 * here (they are mapped to -inf below). */
static int cand_cmp(const void *a, const void *b) {
    const sampler_cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

static inline void cand_swap(sampler_cand *a, sampler_cand *b) {
    sampler_cand t = *a;
    *a = *b;
    *b = t;
}

/* Move the k best candidates (by cand_cmp) to the front, unordered (quickselect). */
static void select_top_k(sampler_cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        sampler_cand pivot = c[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cand_cmp(&c[i], &pivot) < 0) i++;
            while (cand_cmp(&c[j], &pivot) > 0) j--;
            if (i <= j) cand_swap(&c[i++], &c[j--]);
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

int32_t sampler_sample(const sampler_params *p, const float *logits, int32_t n_vocab, ifd_rng *rng,
                       sampler_scratch *scr) {
    IFD_ASSERT(n_vocab > 0 && scr->cap >= n_vocab);
    if (p->temperature <= 0.0f || p->top_k == 1) return sampler_argmax(logits, n_vocab);
    sampler_cand *c = scr->cand;
    const float inv_t = 1.0f / p->temperature;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        c[i].id = i;
        c[i].logit = isnan(l) ? -INFINITY : l * inv_t;
    }
    int32_t n = n_vocab;
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(c, n, p->top_k);
        n = p->top_k;
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    if (c[0].logit == -INFINITY) return c[0].id; /* everything masked: deterministic pick */
    /* softmax over the survivors */
    const float max = c[0].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].logit = expf(c[i].logit - max);
        sum += c[i].logit;
    }
    for (int32_t i = 0; i < n; i++) c[i].logit = (float)(c[i].logit / sum);
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        double cum = 0.0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += c[i].logit;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        const float thresh = c[0].logit * p->min_p;
        int32_t keep = 1;
        while (keep < n && c[keep].logit >= thresh) keep++;
        n = keep;
    }
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += c[i].logit;
    const double u = rng_uniform(rng) * total;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].logit;
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id;
}
