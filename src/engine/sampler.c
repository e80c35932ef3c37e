/* sampler.c — penalties, logit_bias, temperature / top-k / top-p / min-p sampling with
 * a counter-based RNG (Philox-4x32-10 keyed by seed, counted by position). The
 * arithmetic is the one sampler.h spells out, step by step, so that the device op
 * (kernels/sample.cu) reproduces every token: integer weights (exact sums in any
 * order), one total order (x desc, id asc) for every filter, single float operations
 * that no compiler may contract into an FMA. top-k, top-p and the draw are O(n)
 * selections (quickselect), not sorts. Allocation-free on the step path; runs on
 * whichever thread owns the scratch (the engine thread). */

/* x*y+z must stay two roundings (the kernel does the same with __fmul_rn/__fadd_rn):
 * GCC's default in gnu11 is -ffp-contract=fast, which fuses them where FMA exists
 * (-march=native). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/common.h"

/* ---- Philox-4x32-10 ------------------------------------------------------------------ */

void sampler_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t h0 = (uint32_t)(p0 >> 32), l0 = (uint32_t)p0;
        const uint32_t h1 = (uint32_t)(p1 >> 32), l1 = (uint32_t)p1;
        c0 = h1 ^ c1 ^ k0;
        c1 = l1;
        c2 = h0 ^ c3 ^ k1;
        c3 = l0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint64_t sampler_draw_bits(uint64_t key, uint64_t counter) {
    const uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    uint32_t o[4];
    sampler_philox4x32(c, k, o);
    return (uint64_t)o[0] | (uint64_t)o[1] << 32;
}

void rng_seed(ifd_rng *r, uint64_t seed) {
    r->key = seed;
    r->ctr = 0;
}

uint64_t rng_next(ifd_rng *r) { return sampler_draw_bits(r->key, r->ctr++); }

double rng_uniform(ifd_rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* ---- exp(d), d <= 0, in a fixed sequence of float operations ----------------------- */

float sampler_expneg(float d) {
    if (!(d >= -86.0f)) return 0.0f; /* NaN too; the result would be subnormal below */
    if (d >= 0.0f) return 1.0f;
    /* k = round(d / ln 2) in [-124, 0]; r = d - k ln 2 in about [-0.35, 0.35], with
     * ln 2 split so that k * LN2_HI is exact */
    const float t = d * 0x1.715476p+0f; /* 1/ln 2 */
    const int k = (int)floorf(t + 0.5f);
    const float kf = (float)k;
    const float r = (d - kf * 0x1.62e4p-1f) - kf * 0x1.7f7d1cp-20f; /* ln 2 = hi + lo */
    float p = 0x1.a01a02p-13f; /* 1/5040, then 1/720, 1/120, 1/24, 1/6 as floats */
    p = p * r + 0x1.6c16c2p-10f;
    p = p * r + 0x1.111112p-7f;
    p = p * r + 0x1.555556p-5f;
    p = p * r + 0x1.555556p-3f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { uint32_t u; float f; } s = {.u = (uint32_t)(k + 127) << 23};
    return p * s.f;
}

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
    if (p->allow) {
        float keep[SAMPLER_MAX_EXTRA];
        const int32_t n_keep = IFD_MIN(p->n_allow_extra, SAMPLER_MAX_EXTRA);
        for (int32_t i = 0; i < n_keep; i++) {
            const int32_t id = p->allow_extra[i];
            keep[i] = id >= 0 && id < n_vocab ? logits[id] : -INFINITY;
        }
        const int32_t n_words = (n_vocab + 31) / 32;
        for (int32_t w = 0; w < n_words; w++) {
            uint32_t off = ~p->allow[w];
            if (w == n_words - 1 && (n_vocab & 31)) off &= (1u << (n_vocab & 31)) - 1;
            if (off == 0xFFFFFFFFu) {
                for (int32_t i = 0; i < 32; i++) logits[w * 32 + i] = -INFINITY;
                continue;
            }
            for (; off; off &= off - 1) logits[w * 32 + __builtin_ctz(off)] = -INFINITY;
        }
        for (int32_t i = 0; i < n_keep; i++) {
            const int32_t id = p->allow_extra[i];
            if (id >= 0 && id < n_vocab) logits[id] = keep[i];
        }
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

/* The strict total order of sampler.h: x descending, then id ascending. NaN never
 * reaches here (mapped to -inf when the candidates are built); -0 == +0. */
static int cand_cmp(const void *a, const void *b) {
    const sampler_cand *x = a, *y = b;
    if (x->x > y->x) return -1;
    if (x->x < y->x) return 1;
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

static inline int32_t median3(const sampler_cand *c, int32_t a, int32_t b, int32_t d) {
    if (cand_cmp(&c[a], &c[b]) < 0) {
        if (cand_cmp(&c[b], &c[d]) < 0) return b;
        return cand_cmp(&c[a], &c[d]) < 0 ? d : a;
    }
    if (cand_cmp(&c[a], &c[d]) < 0) return a;
    return cand_cmp(&c[b], &c[d]) < 0 ? d : b;
}

/* The shortest best-first prefix of c[0..n) whose sum of q reaches target (>= 1).
 * Moves that prefix to the front (unordered) and returns its length L; *cross is the
 * index of its worst member (the one at which the running sum reaches target). If all
 * of c falls short, returns n and *cross = -1. A quickselect on mass instead of a
 * sort: partition around a pivot, keep only the side where the running sum crosses
 * target; expected O(n) even when the prefix holds most of a flat vocabulary.
 * cand_cmp is a strict total order and the sums are exact integers, so the set (and
 * the crossing member) is exactly that of the sorted scan. */
static int32_t mass_prefix(sampler_cand *c, int32_t n, uint64_t target, int32_t *cross) {
    int32_t lo = 0, hi = n; /* the crossing lies in [lo, hi); c[0..lo) is kept */
    uint64_t acc = 0;       /* mass of c[0..lo) */
    while (hi - lo > 32) {
        const int32_t pi = median3(c, lo, lo + (hi - lo) / 2, hi - 1);
        cand_swap(&c[pi], &c[hi - 1]);
        const sampler_cand pivot = c[hi - 1];
        int32_t p = lo;
        uint64_t mass = 0; /* of the candidates better than the pivot */
        for (int32_t j = lo; j < hi - 1; j++)
            if (cand_cmp(&c[j], &pivot) < 0) {
                mass += c[j].q;
                cand_swap(&c[j], &c[p++]);
            }
        cand_swap(&c[p], &c[hi - 1]);
        if (acc + mass >= target) {
            hi = p; /* the crossing is among the better ones */
        } else if (acc + mass + pivot.q >= target) {
            *cross = p;
            return p + 1;
        } else {
            acc += mass + pivot.q;
            lo = p + 1;
        }
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp);
    for (int32_t i = lo; i < hi; i++) {
        acc += c[i].q;
        if (acc >= target) {
            *cross = i;
            return i + 1;
        }
    }
    *cross = -1;
    return hi; /* hi == n here: every narrowing above left the crossing inside */
}

static inline uint64_t mulhi64(uint64_t a, uint64_t b) {
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
}

int32_t sampler_sample_at(const sampler_params *p, const sampler_state *st, const float *logits,
                          int32_t n_vocab, uint64_t key, uint64_t position, sampler_scratch *scr) {
    IFD_ASSERT(n_vocab > 0 && n_vocab <= SAMPLER_MAX_VOCAB && scr->cap >= n_vocab);
    const bool greedy = !(p->temperature >= SAMPLER_GREEDY_EPS) || p->top_k == 1;
    const bool adjust = p->n_logit_bias > 0 || p->n_banned > 0 || p->allow ||
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

    /* 4. candidates: (id, logit / T), NaN -> -inf */
    sampler_cand *c = scr->cand;
    const float inv_t = 1.0f / p->temperature;
    float m = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float x = isnan(l[i]) ? -INFINITY : l[i] * inv_t;
        c[i].id = i;
        c[i].x = x;
        if (x > m) m = x;
    }
    if (m == -INFINITY) return sampler_argmax(l, n_vocab); /* all masked */
    /* 5. top_k */
    int32_t n = n_vocab;
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(c, n, p->top_k);
        n = p->top_k;
    }
    /* 6-7. integer weights, Z over the top_k survivors; min_p's survivors to the front
     * (w >= min_p: as w_max = 1, that is p >= min_p * p_max; the best one always stays) */
    const float mp = p->min_p > 0.0f ? fminf(p->min_p, 1.0f) : 0.0f;
    uint64_t z = 0;
    int32_t limit = 0;
    for (int32_t i = 0; i < n; i++) {
        const float w = c[i].x == m ? 1.0f : sampler_expneg(c[i].x - m);
        c[i].q = (uint64_t)(w * 0x1p42f);
        z += c[i].q;
        if (mp == 0.0f || w >= mp) {
            if (i != limit) cand_swap(&c[i], &c[limit]);
            limit++;
        }
    }
    int32_t cross;
    /* 8. top_p against Z (z >= 2^42: the best one is in, so t >= 1) */
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        const uint64_t t = (uint64_t)ceil((double)p->top_p * (double)z);
        limit = mass_prefix(c, limit, t < 1 ? 1 : t, &cross);
    }
    /* 9. the draw: the first survivor, best first, whose running sum exceeds u */
    uint64_t total = 0;
    for (int32_t i = 0; i < limit; i++) total += c[i].q;
    const uint64_t u = mulhi64(sampler_draw_bits(key, position), total);
    mass_prefix(c, limit, u + 1, &cross);
    return cross >= 0 ? c[cross].id : c[0].id; /* cross < 0 cannot happen: u < total */
}

int32_t sampler_sample_seq(const sampler_params *p, const sampler_state *st, const float *logits,
                           int32_t n_vocab, ifd_rng *rng, sampler_scratch *scr) {
    return sampler_sample_at(p, st, logits, n_vocab, rng->key, rng->ctr++, scr);
}

int32_t sampler_sample(const sampler_params *p, const float *logits, int32_t n_vocab, ifd_rng *rng,
                       sampler_scratch *scr) {
    return sampler_sample_seq(p, NULL, logits, n_vocab, rng, scr);
}
