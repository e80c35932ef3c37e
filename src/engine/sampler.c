/* sampler.c — penalties, logit_bias, temperature / top-k / top-p / min-p sampling with
 * xoshiro256**. Deterministic for a given seed and logits: which candidates survive is
 * defined by the strict order (logit desc, id asc), and every selection / partition
 * step is a fixed function of its input, so nothing depends on qsort stability.
 * top-k, top-p and min-p are O(n) selections, not sorts. Allocation-free on the step
 * path; runs on whichever thread owns the scratch (the engine thread). */
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


/* ---- parameters ------------------------------------------------------------------- */

sampler_params sampler_params_default(void) {
    return (sampler_params){.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
}

int sampler_params_validate(const sampler_params *p, int32_t n_vocab) {
    if (!(p->temperature >= 0.0f) || isinf(p->temperature)) return IFD_ERR_INVALID;
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) return IFD_ERR_INVALID;
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return IFD_ERR_INVALID;
    if (!(p->repetition_penalty >= 0.0f) || isinf(p->repetition_penalty)) return IFD_ERR_INVALID;
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f)) return IFD_ERR_INVALID;
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f)) return IFD_ERR_INVALID;
    if (p->n_logit_bias < 0 || p->n_banned < 0) return IFD_ERR_INVALID;
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const sampler_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= n_vocab || isnan(b->bias)) return IFD_ERR_INVALID;
    }
    for (int32_t i = 0; i < p->n_banned; i++)
        if (p->banned[i] < 0 || p->banned[i] >= n_vocab) return IFD_ERR_INVALID;
    return IFD_OK;
}

/* ---- penalty state ---------------------------------------------------------------- */

enum {
    SAMPLER_SEEN_LISTED = 1, /* id is in st->seen */
    SAMPLER_SEEN_PROMPT = 2, /* id occurs in the prompt */
};

int sampler_state_init(sampler_state *st, int32_t n_vocab) {
    memset(st, 0, sizeof *st);
    IFD_ASSERT(n_vocab > 0);
    st->count = calloc((size_t)n_vocab, sizeof *st->count);
    st->flags = calloc((size_t)n_vocab, sizeof *st->flags);
    st->seen = malloc((size_t)n_vocab * sizeof *st->seen);
    if (!st->count || !st->flags || !st->seen) {
        sampler_state_deinit(st);
        return IFD_ERR_NOMEM;
    }
    st->n_vocab = n_vocab;
    return IFD_OK;
}

void sampler_state_deinit(sampler_state *st) {
    if (!st) return;
    free(st->count);
    free(st->flags);
    free(st->seen);
    memset(st, 0, sizeof *st);
}

void sampler_state_reset(sampler_state *st) {
    for (int32_t i = 0; i < st->n_seen; i++) {
        st->count[st->seen[i]] = 0;
        st->flags[st->seen[i]] = 0;
    }
    st->n_seen = 0;
    st->n_generated = 0;
}

static inline void state_list(sampler_state *st, int32_t id) {
    if (!(st->flags[id] & SAMPLER_SEEN_LISTED)) {
        st->flags[id] |= SAMPLER_SEEN_LISTED;
        st->seen[st->n_seen++] = id;
    }
}

void sampler_state_copy(sampler_state *dst, const sampler_state *src) {
    IFD_ASSERT(dst->n_vocab == src->n_vocab);
    sampler_state_reset(dst);
    for (int32_t i = 0; i < src->n_seen; i++) {
        const int32_t id = src->seen[i];
        dst->seen[i] = id;
        dst->count[id] = src->count[id];
        dst->flags[id] = src->flags[id];
    }
    dst->n_seen = src->n_seen;
    dst->n_generated = src->n_generated;
}

int sampler_state_add_prompt(sampler_state *st, const int32_t *ids, int32_t n) {
    int rc = IFD_OK;
    for (int32_t i = 0; i < n; i++) {
        const int32_t id = ids[i];
        if (id < 0 || id >= st->n_vocab) {
            rc = IFD_ERR_INVALID;
            continue;
        }
        state_list(st, id);
        st->flags[id] |= SAMPLER_SEEN_PROMPT;
    }
    return rc;
}

void sampler_state_accept(sampler_state *st, int32_t id) {
    IFD_ASSERT(id >= 0 && id < st->n_vocab);
    state_list(st, id);
    st->count[id]++;
    st->n_generated++;
}

void sampler_apply_penalties(const sampler_params *p, const sampler_state *st, float *logits,
                             int32_t n_vocab) {
    const float rep = p->repetition_penalty;
    const bool do_rep = rep > 0.0f && rep != 1.0f;
    const bool do_pf = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (st && (do_rep || do_pf)) {
        IFD_ASSERT(st->n_vocab == n_vocab);
        for (int32_t i = 0; i < st->n_seen; i++) {
            const int32_t id = st->seen[i];
            float l = logits[id];
            if (do_rep) l = l > 0.0f ? l / rep : l * rep; /* prompt or output */
            const int32_t c = st->count[id];              /* output only */
            if (c > 0) l -= p->presence_penalty + p->frequency_penalty * (float)c;
            logits[id] = l;
        }
    }
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const int32_t id = p->logit_bias[i].id;
        if (id >= 0 && id < n_vocab) logits[id] += p->logit_bias[i].bias;
    }
    for (int32_t i = 0; i < p->n_banned; i++) {
        const int32_t id = p->banned[i];
        if (id >= 0 && id < n_vocab) logits[id] = -INFINITY;
    }
}

/* ---- sampling ---------------------------------------------------------------------- */

int sampler_scratch_init(sampler_scratch *s, int32_t n_vocab) {
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    if (!s->cand || !s->work) {
        sampler_scratch_deinit(s);
        return IFD_ERR_NOMEM;
    }
    s->cap = n_vocab;
    return IFD_OK;
}

void sampler_scratch_deinit(sampler_scratch *s) {
    free(s->cand);
    free(s->work);
    s->cand = NULL;
    s->work = NULL;
    s->cap = 0;
}

int32_t sampler_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    float bl = isnan(logits[0]) ? -INFINITY : logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > bl) { /* false for NaN */
            best = i;
            bl = logits[i];
        }
    return best;
}

/* Strict total order: logit (or weight) descending, then id ascending. NaN never
 * reaches here (mapped to -inf when the candidates are built). */
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
    if (k <= 0 || k >= n) return;
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

/* Move candidates with weight >= thresh to the front; returns how many. */
static int32_t partition_ge(sampler_cand *c, int32_t n, float thresh) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].logit >= thresh) {
            if (i != m) cand_swap(&c[i], &c[m]);
            m++;
        }
    return m;
}

static inline int32_t median3(const sampler_cand *c, int32_t a, int32_t b, int32_t d) {
    if (cand_cmp(&c[a], &c[b]) < 0) {
        if (cand_cmp(&c[b], &c[d]) < 0) return b;
        return cand_cmp(&c[a], &c[d]) < 0 ? d : a;
    }
    if (cand_cmp(&c[a], &c[d]) < 0) return a;
    return cand_cmp(&c[b], &c[d]) < 0 ? d : b;
}

/* top_p: the shortest best-first prefix of c[0..limit) whose weight reaches target.
 * Moves that prefix to the front (unordered) and returns its length. A quickselect on
 * mass instead of a sort: partition around a pivot, then keep only the side where the
 * cumulative weight crosses target; expected O(limit) even when the prefix holds most
 * of a flat vocabulary. cand_cmp is a strict total order, so the set is exactly the
 * sorted prefix. Everything in c[0..limit) is better than everything after it. */
static int32_t top_p_prefix(sampler_cand *c, int32_t limit, double target) {
    int32_t lo = 0, hi = limit; /* the cut lies in [lo, hi); c[0..lo) is kept */
    double acc = 0.0;           /* weight of c[0..lo) */
    while (hi - lo > 32) {
        const int32_t pi = median3(c, lo, lo + (hi - lo) / 2, hi - 1);
        cand_swap(&c[pi], &c[hi - 1]);
        const sampler_cand pivot = c[hi - 1];
        int32_t p = lo;
        double mass = 0.0; /* of the candidates better than the pivot */
        for (int32_t j = lo; j < hi - 1; j++)
            if (cand_cmp(&c[j], &pivot) < 0) {
                mass += c[j].logit;
                cand_swap(&c[j], &c[p++]);
            }
        cand_swap(&c[p], &c[hi - 1]);
        if (acc + mass >= target) {
            hi = p; /* the cut is among the better ones */
        } else if (acc + mass + pivot.logit >= target) {
            return p + 1;
        } else {
            acc += mass + pivot.logit;
            lo = p + 1;
        }
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp);
    for (int32_t i = lo; i < hi; i++) {
        acc += c[i].logit;
        if (acc >= target) return i + 1;
    }
    return hi; /* float rounding: the cut was established at hi */
}

int32_t sampler_sample_seq(const sampler_params *p, const sampler_state *st, const float *logits,
                           int32_t n_vocab, ifd_rng *rng, sampler_scratch *scr) {
    IFD_ASSERT(n_vocab > 0 && scr->cap >= n_vocab);
    const bool greedy = !(p->temperature >= SAMPLER_GREEDY_EPS) || p->top_k == 1;
    const bool adjust = p->n_logit_bias > 0 || p->n_banned > 0 ||
                        (st && st->n_seen > 0 &&
                         ((p->repetition_penalty > 0.0f && p->repetition_penalty != 1.0f) ||
                          p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f));
    const float *l = logits;
    if (adjust) {
        memcpy(scr->work, logits, (size_t)n_vocab * sizeof *logits);
        sampler_apply_penalties(p, st, scr->work, n_vocab);
        l = scr->work;
    }
    if (greedy) return sampler_argmax(l, n_vocab);

    /* candidates: (id, logit / T), NaN -> -inf */
    sampler_cand *c = scr->cand;
    const float inv_t = 1.0f / p->temperature;
    float max = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float x = isnan(l[i]) ? -INFINITY : l[i] * inv_t;
        c[i].id = i;
        c[i].logit = x;
        if (x > max) max = x;
    }
    if (max == -INFINITY) return sampler_argmax(l, n_vocab); /* all masked */
    int32_t n = n_vocab;
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(c, n, p->top_k);
        n = p->top_k;
    }
    /* logits -> unnormalized weights exp(logit - max) in (0, 1]; the max weighs 1.
     * Order is unchanged except that logits too close to tell apart in float tie,
     * which cand_cmp then breaks by id: still a fixed total order. */
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].logit = expf(c[i].logit - max);
        z += c[i].logit;
    }
    /* min_p keeps a best-first prefix (weight >= min_p, as p_max's weight is 1); so
     * does top_p. Their intersection is the shorter prefix, and top_p's mass is
     * measured against z (all top_k survivors), not against the min_p survivors. */
    int32_t limit = n;
    if (p->min_p > 0.0f) limit = partition_ge(c, n, fminf(p->min_p, 1.0f)); /* >= 1: max */
    if (p->top_p > 0.0f && p->top_p < 1.0f) limit = top_p_prefix(c, limit, p->top_p * z);

    double total = 0.0;
    for (int32_t i = 0; i < limit; i++) total += c[i].logit;
    const double u = rng_uniform(rng) * total;
    double cum = 0.0;
    for (int32_t i = 0; i < limit; i++) {
        cum += c[i].logit;
        if (u < cum) return c[i].id;
    }
    return c[limit - 1].id;
}

int32_t sampler_sample(const sampler_params *p, const float *logits, int32_t n_vocab, ifd_rng *rng,
                       sampler_scratch *scr) {
    return sampler_sample_seq(p, NULL, logits, n_vocab, rng, scr);
}
