/* test_sampler.c — the sampler without a model: seeded determinism, greedy tie-break,
 * top-k / top-p / min-p masks on known distributions, empirical frequencies against a
 * plain reference (full sort) of the renormalized distribution, exact penalty and
 * logit_bias arithmetic, and logprobs against a direct log-softmax. */
#include <stdbool.h>
#include <stdint.h>

#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "test_util.h"
#include "util/common.h"

static float frand(unsigned *s) { /* [-1, 1) */
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65536.0f) * 2.0f - 1.0f;
}

/* ---- reference: the renormalized distribution after the filters, by full sort ---- */

typedef struct ref_c {
    int32_t id;
    float l;
} ref_c;

static int ref_cmp(const void *a, const void *b) {
    const ref_c *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* probs[n] (by id) of drawing each id; returns the number of ids with p > 0. Uses the
 * same float steps as the sampler (l * (1/T), sampler_expneg(l - max)) so boundaries
 * agree (the sampler's integer weights differ from w by < 2^-42, far below the test's reach). */
static int ref_dist(const sampler_params *p, const float *logits, int n, double *probs) {
    ref_c *c = malloc((size_t)n * sizeof *c);
    const float inv_t = 1.0f / p->temperature;
    for (int i = 0; i < n; i++) c[i] = (ref_c){i, logits[i] * inv_t};
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    int k = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
    double *w = malloc((size_t)n * sizeof *w), z = 0;
    for (int i = 0; i < k; i++) z += (w[i] = sampler_expneg(c[i].l - c[0].l));
    int keep = k;
    if (p->top_p > 0 && p->top_p < 1) {
        double cum = 0;
        for (int i = 0; i < k; i++) {
            cum += w[i];
            if (cum >= p->top_p * z) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) {
        int m = 0;
        while (m < keep && w[m] >= p->min_p) m++;
        keep = m;
    }
    double t = 0;
    for (int i = 0; i < keep; i++) t += w[i];
    for (int i = 0; i < n; i++) probs[i] = 0;
    for (int i = 0; i < keep; i++) probs[c[i].id] = w[i] / t;
    free(c);
    free(w);
    return keep;
}

/* Draw n times; counts[id]. */
static void draw_counts(const sampler_params *p, const float *logits, int32_t nv, uint64_t seed,
                        int n, int *counts) {
    sampler_scratch scr = {0};
    CHECK(sampler_scratch_init(&scr, nv) == IFD_OK);
    ifd_rng r;
    rng_seed(&r, seed);
    memset(counts, 0, (size_t)nv * sizeof *counts);
    for (int i = 0; i < n; i++) {
        int32_t id = sampler_sample(p, logits, nv, &r, &scr);
        CHECK(id >= 0 && id < nv);
        counts[id]++;
    }
    sampler_scratch_deinit(&scr);
}

/* Every id with p = 0 is never drawn; every bin is within 4 sigma of N p (binomial);
 * and the chi-square statistic is below df + 6 sqrt(2 df) (about 4 sigma of the
 * chi-square itself). Seeds are fixed, so the outcome is deterministic. */
static void check_freqs(const double *probs, const int *counts, int nv, int n_draws) {
    double chi2 = 0;
    int df = -1;
    for (int i = 0; i < nv; i++) {
        if (probs[i] == 0) {
            CHECKF(counts[i] == 0, "id %d has p = 0 but was drawn %d times", i, counts[i]);
            continue;
        }
        const double e = n_draws * probs[i], sd = sqrt(n_draws * probs[i] * (1 - probs[i]));
        CHECKF(fabs(counts[i] - e) <= 4 * sd + 1e-9, "id %d: %d draws, expected %.1f +- %.1f", i,
               counts[i], e, sd);
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        df++;
    }
    if (df > 0) CHECKF(chi2 <= df + 6 * sqrt(2.0 * df), "chi2 %.1f with %d dof", chi2, df);
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_rng_seeded(void) {
    ifd_rng a, b, c;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    rng_seed(&c, 43);
    int diff = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_next(&a), y = rng_next(&b), z = rng_next(&c);
        CHECK(x == y);
        diff += x != z;
    }
    CHECK(diff > 990);
    for (int i = 0; i < 1000; i++) {
        double u = rng_uniform(&a);
        CHECK(u >= 0.0 && u < 1.0);
    }
}

/* Philox-4x32-10 known answers (Random123's kat_vectors), and the counter-based
 * generator is a pure function of (key, counter). */
static void test_philox_kat(void) {
    static const uint32_t v[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        sampler_philox4x32(v[i], v[i] + 4, out);
        for (int j = 0; j < 4; j++) CHECKF(out[j] == v[i][6 + j], "vector %d word %d: %08x", i, j, out[j]);
    }
    /* draw j of rng_seed(s) is sampler_draw_bits(s, j), whatever came before */
    ifd_rng r;
    rng_seed(&r, 0x1234567890abcdefull);
    for (uint64_t j = 0; j < 100; j++) CHECK(rng_next(&r) == sampler_draw_bits(0x1234567890abcdefull, j));
    CHECK(r.ctr == 100);
    CHECK(sampler_draw_bits(1, 0) != sampler_draw_bits(2, 0));
    CHECK(sampler_draw_bits(1, 0) != sampler_draw_bits(1, 1ull << 32));
}

/* sampler_expneg against exp in double: within 2 ulp of float over [-86, 0], exact at
 * 0, 0 below -86 and for NaN, and never increasing as d decreases. */
static void test_expneg(void) {
    double worst = 0;
    float prev = 1.0f;
    for (int i = 0; i <= 2000000; i++) {
        const float d = -86.0f * (float)i / 2000000.0f;
        const float got = sampler_expneg(d);
        const double want = exp((double)d);
        const double ulp = ldexp(1.0, ilogb(want) - 23);
        const double e = fabs((double)got - want) / ulp;
        if (e > worst) worst = e;
        CHECKF(got <= prev, "not monotone at %g", (double)d);
        prev = got;
    }
    CHECKF(worst <= 2.0, "worst error %.3f ulp", worst);
    CHECK(sampler_expneg(0.0f) == 1.0f && sampler_expneg(-0.0f) == 1.0f);
    CHECK(sampler_expneg(-86.5f) == 0.0f && sampler_expneg(-INFINITY) == 0.0f);
    CHECK(sampler_expneg(NAN) == 0.0f);
}

/* sampler_sample_seq is sampler_sample_at at counter rng->ctr, which it advances once
 * per call, greedy or not; the position picks the draw. */
static void test_sample_at_position(void) {
    enum { NV = 500 };
    static float logits[NV];
    unsigned s = 11;
    for (int i = 0; i < NV; i++) logits[i] = frand(&s) * 2.0f;
    sampler_scratch scr = {0};
    CHECK(sampler_scratch_init(&scr, NV) == IFD_OK);
    const sampler_params p = {.temperature = 1.0f, .top_p = 0.95f};
    const sampler_params g = {.temperature = 0.0f};
    ifd_rng r;
    rng_seed(&r, 77);
    int differ = 0;
    for (uint64_t j = 0; j < 200; j++) {
        const int32_t want = sampler_sample_at(&p, NULL, logits, NV, 77, j, &scr);
        CHECK(sampler_sample_at(&p, NULL, logits, NV, 77, j, &scr) == want);
        if (j % 3 == 0) {
            CHECK(sampler_sample(&g, logits, NV, &r, &scr) == sampler_argmax(logits, NV));
        } else {
            CHECK(sampler_sample(&p, logits, NV, &r, &scr) == want);
        }
        CHECK(r.ctr == j + 1);
        differ += want != sampler_sample_at(&p, NULL, logits, NV, 77, j + 1, &scr);
    }
    CHECK(differ > 150);
    sampler_scratch_deinit(&scr);
}

/* Same seed + logits + params -> the same token sequence; another seed differs. The
 * penalty state evolves with the draws, so this covers the whole pipeline. */
static void test_seeded_determinism(void) {
    enum { NV = 1000, STEPS = 400 };
    static float logits[NV];
    unsigned s = 7;
    for (int i = 0; i < NV; i++) logits[i] = frand(&s) * 3.0f;
    const sampler_bias bias[] = {{5, 2.0f}, {17, -1.0f}};
    const int32_t banned[] = {3};
    const sampler_params cfgs[] = {
        {.temperature = 1.0f},
        {.temperature = 0.7f, .top_k = 50, .top_p = 0.9f, .min_p = 0.02f},
        {.temperature = 1.3f, .top_p = 0.95f, .repetition_penalty = 1.3f, .presence_penalty = 0.5f,
         .frequency_penalty = 0.3f, .logit_bias = bias, .n_logit_bias = 2, .banned = banned,
         .n_banned = 1},
    };
    sampler_scratch scr = {0};
    sampler_state st = {0};
    CHECK(sampler_scratch_init(&scr, NV) == IFD_OK);
    CHECK(sampler_state_init(&st, NV) == IFD_OK);
    const int32_t prompt[] = {1, 2, 3, 2};
    for (size_t k = 0; k < IFD_ARRAY_LEN(cfgs); k++) {
        int32_t seq[3][STEPS];
        const uint64_t seeds[3] = {1234, 1234, 1235};
        for (int run = 0; run < 3; run++) {
            ifd_rng r;
            rng_seed(&r, seeds[run]);
            sampler_state_reset(&st);
            CHECK(sampler_state_add_prompt(&st, prompt, 4) == IFD_OK);
            for (int i = 0; i < STEPS; i++) {
                seq[run][i] = sampler_sample_seq(&cfgs[k], &st, logits, NV, &r, &scr);
                sampler_state_accept(&st, seq[run][i]);
            }
        }
        CHECKF(!memcmp(seq[0], seq[1], sizeof seq[0]), "config %zu not reproducible", k);
        CHECKF(memcmp(seq[0], seq[2], sizeof seq[0]) != 0, "config %zu ignores the seed", k);
        int same = 0;
        for (int i = 0; i < STEPS; i++) same += seq[0][i] == seq[2][i];
        CHECKF(same < STEPS / 2, "config %zu: seeds 1234/1235 agree on %d of %d", k, same, STEPS);
    }
    sampler_state_deinit(&st);
    sampler_scratch_deinit(&scr);
}

static void test_greedy_tie_break(void) {
    const float l[] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 3.0f};
    CHECK(sampler_argmax(l, 6) == 1);
    const float nan0[] = {NAN, -5.0f, -5.0f};
    CHECK(sampler_argmax(nan0, 3) == 1);
    sampler_scratch scr = {0};
    CHECK(sampler_scratch_init(&scr, 6) == IFD_OK);
    ifd_rng r;
    rng_seed(&r, 1);
    const sampler_params greedy = {0}, tiny = {.temperature = 1e-7f},
                         k1 = {.temperature = 1.0f, .top_k = 1};
    for (int i = 0; i < 100; i++) {
        CHECK(sampler_sample(&greedy, l, 6, &r, &scr) == 1);
        CHECK(sampler_sample(&tiny, l, 6, &r, &scr) == 1);
        CHECK(sampler_sample(&k1, l, 6, &r, &scr) == 1);
    }
    /* penalties and bias apply before the argmax */
    const sampler_bias b = {3, 0.5f};
    const sampler_params biased = {.logit_bias = &b, .n_logit_bias = 1};
    CHECK(sampler_sample(&biased, l, 6, &r, &scr) == 3);
    const int32_t ban[] = {1, 3};
    const sampler_params banned = {.banned = ban, .n_banned = 2};
    CHECK(sampler_sample(&banned, l, 6, &r, &scr) == 5);
    /* a hot sampler must not break ties by array position either: equal logits are
     * equally likely */
    const float eq[] = {0.0f, 0.0f, 0.0f, 0.0f};
    int counts[4];
    const double probs[4] = {0.25, 0.25, 0.25, 0.25};
    draw_counts(&(sampler_params){.temperature = 1.0f}, eq, 4, 9, 40000, counts);
    check_freqs(probs, counts, 4, 40000);
    sampler_scratch_deinit(&scr);
}

/* p = 1/2, 1/4, ..., 1/2^9, 1/2^9 placed on shuffled ids. */
static void halving(float *logits, int32_t *rank_to_id) {
    const int32_t perm[10] = {7, 2, 9, 0, 5, 3, 8, 1, 6, 4};
    for (int r = 0; r < 10; r++) {
        rank_to_id[r] = perm[r];
        logits[perm[r]] = logf(r < 9 ? ldexpf(1.0f, -(r + 1)) : ldexpf(1.0f, -9));
    }
}

static void test_top_p_mask(void) {
    float l[10];
    int32_t rid[10];
    halving(l, rid);
    const sampler_params p = {.temperature = 1.0f, .top_p = 0.8f};
    int counts[10];
    double probs[10];
    draw_counts(&p, l, 10, 11, 10000, counts);
    CHECK(ref_dist(&p, l, 10, probs) == 3);
    for (int r = 0; r < 10; r++) {
        if (r < 3)
            CHECKF(counts[rid[r]] > 0, "rank %d never drawn", r);
        else
            CHECKF(counts[rid[r]] == 0, "rank %d drawn %d times with top_p 0.8", r, counts[rid[r]]);
    }
    /* renormalized: 4/7, 2/7, 1/7 */
    CHECK(fabs(probs[rid[0]] - 4.0 / 7) < 1e-6 && fabs(probs[rid[2]] - 1.0 / 7) < 1e-6);
    check_freqs(probs, counts, 10, 10000);
    /* top_p already reached by the first rank keeps one */
    const sampler_params p1 = {.temperature = 1.0f, .top_p = 0.4f};
    draw_counts(&p1, l, 10, 12, 1000, counts);
    CHECK(counts[rid[0]] == 1000);
}

static void test_top_k_mask(void) {
    float l[10];
    int32_t rid[10];
    halving(l, rid);
    const sampler_params p = {.temperature = 1.0f, .top_k = 2};
    int counts[10];
    double probs[10];
    draw_counts(&p, l, 10, 13, 10000, counts);
    CHECK(ref_dist(&p, l, 10, probs) == 2);
    for (int r = 0; r < 10; r++)
        CHECKF((counts[rid[r]] > 0) == (r < 2), "rank %d drawn %d times with top_k 2", r,
               counts[rid[r]]);
    check_freqs(probs, counts, 10, 10000); /* 2/3, 1/3 */
    /* top_k ties: ids 4 and 6 tie for second; the lower id is kept */
    const float t[] = {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 1.0f, 2.0f};
    const sampler_params p2 = {.temperature = 1.0f, .top_k = 2};
    int c8[8];
    draw_counts(&p2, t, 8, 14, 5000, c8);
    CHECK(c8[7] > 0 && c8[4] > 0 && c8[6] == 0);
    CHECK(c8[0] + c8[1] + c8[2] + c8[3] + c8[5] == 0);
}

static void test_min_p_mask(void) {
    const float pr[] = {0.1f, 0.4f, 0.05f, 0.15f, 0.2f, 0.1f};
    float l[6];
    for (int i = 0; i < 6; i++) l[i] = logf(pr[i]);
    const sampler_params p = {.temperature = 1.0f, .min_p = 0.3f}; /* keep p >= 0.12 */
    int counts[6];
    double probs[6];
    draw_counts(&p, l, 6, 15, 10000, counts);
    CHECK(ref_dist(&p, l, 6, probs) == 3);
    for (int i = 0; i < 6; i++)
        CHECKF((counts[i] > 0) == (pr[i] >= 0.12f), "id %d (p %.2f) drawn %d times", i,
               (double)pr[i], counts[i]);
    check_freqs(probs, counts, 6, 10000);
    /* min_p 1 keeps only the max */
    const sampler_params p1 = {.temperature = 1.0f, .min_p = 1.0f};
    draw_counts(&p1, l, 6, 16, 1000, counts);
    CHECK(counts[1] == 1000);
}

/* Random logits, several filter combinations: frequencies against the reference. */
static void test_empirical_vs_reference(void) {
    enum { NV = 64, N = 200000 };
    float l[NV];
    unsigned s = 99;
    for (int i = 0; i < NV; i++) l[i] = frand(&s) * 2.5f;
    const sampler_params cfgs[] = {
        {.temperature = 1.0f},
        {.temperature = 0.5f},
        {.temperature = 2.0f, .top_k = 10},
        {.temperature = 1.0f, .top_p = 0.7f},
        {.temperature = 0.8f, .min_p = 0.1f},
        {.temperature = 1.2f, .top_k = 20, .top_p = 0.9f, .min_p = 0.05f},
        {.temperature = 1.0f, .top_k = 30, .top_p = 0.5f},
    };
    int counts[NV];
    double probs[NV];
    for (size_t k = 0; k < IFD_ARRAY_LEN(cfgs); k++) {
        draw_counts(&cfgs[k], l, NV, 100 + k, N, counts);
        int kept = ref_dist(&cfgs[k], l, NV, probs);
        CHECK(kept >= 1);
        int before = t_failures;
        check_freqs(probs, counts, NV, N);
        if (t_failures != before) fprintf(stderr, "  (config %zu)\n", k);
    }
}

/* A large, flat vocabulary makes top_p's partial sort grow past its first chunks. */
static void test_top_p_large_vocab(void) {
    enum { NV = 20000, N = 10000 };
    float *l = malloc(NV * sizeof *l);
    double *probs = malloc(NV * sizeof *probs);
    int *counts = malloc(NV * sizeof *counts);
    unsigned s = 5;
    for (int i = 0; i < NV; i++) l[i] = frand(&s);
    const sampler_params p = {.temperature = 1.0f, .top_p = 0.6f};
    int kept = ref_dist(&p, l, NV, probs);
    CHECK(kept > 4096 && kept < NV);
    draw_counts(&p, l, NV, 17, N, counts);
    double pmin = 1;
    for (int i = 0; i < NV; i++)
        if (probs[i] > 0 && probs[i] < pmin) pmin = probs[i];
    int outside = 0, near_edge = 0;
    for (int i = 0; i < NV; i++) {
        if (probs[i] == 0) outside += counts[i];
        else if (probs[i] < pmin * 1.05) near_edge += counts[i];
    }
    CHECK(outside == 0);
    CHECKF(near_edge > 20, "%d draws near the edge", near_edge); /* not cut short */
    /* a few hundred ids: several partition rounds, then every bin against the reference */
    enum { NV2 = 400, N2 = 200000 };
    for (int i = 0; i < NV2; i++) l[i] = frand(&s) * 3.0f;
    const sampler_params p2[] = {{.temperature = 1.0f, .top_p = 0.9f},
                                 {.temperature = 1.0f, .top_p = 0.5f, .min_p = 0.1f},
                                 {.temperature = 0.7f, .top_k = 200, .top_p = 0.95f}};
    for (size_t k = 0; k < IFD_ARRAY_LEN(p2); k++) {
        CHECK(ref_dist(&p2[k], l, NV2, probs) > 32);
        draw_counts(&p2[k], l, NV2, 18 + k, N2, counts);
        check_freqs(probs, counts, NV2, N2);
    }
    free(l);
    free(probs);
    free(counts);
}

static void test_penalties_exact(void) {
    enum { NV = 8 };
    float l[NV] = {2.0f, -2.0f, 1.0f, -1.0f, 0.5f, 3.0f, -0.5f, 0.0f};
    sampler_state st;
    CHECK(sampler_state_init(&st, NV) == IFD_OK);
    const int32_t prompt[] = {0, 1, 1};
    CHECK(sampler_state_add_prompt(&st, prompt, 3) == IFD_OK);
    const int32_t gen[] = {2, 3, 3, 0};
    for (int i = 0; i < 4; i++) sampler_state_accept(&st, gen[i]);
    CHECK(st.n_seen == 4 && st.n_generated == 4);
    const sampler_params p = {.repetition_penalty = 2.0f, .presence_penalty = 0.5f,
                              .frequency_penalty = 0.25f};
    sampler_apply_penalties(&p, &st, l, NV);
    /* id0: prompt + 1 generated: 2/2 - 0.5 - 0.25 = 0.25 (positive logit divided)
     * id1: prompt only: -2*2 = -4 (negative multiplied; no presence/frequency)
     * id2: 1 generated: 1/2 - 0.75 = -0.25
     * id3: 2 generated: -1*2 - 0.5 - 0.5 = -3
     * id4..7 untouched */
    const float want[NV] = {0.25f, -4.0f, -0.25f, -3.0f, 0.5f, 3.0f, -0.5f, 0.0f};
    for (int i = 0; i < NV; i++)
        CHECKF(l[i] == want[i], "id %d: %g want %g", i, (double)l[i], (double)want[i]);

    /* repetition alone and presence/frequency alone */
    float a[NV] = {2.0f, -2.0f, 1.0f, -1.0f, 0.5f, 3.0f, -0.5f, 0.0f};
    sampler_apply_penalties(&(sampler_params){.repetition_penalty = 1.25f}, &st, a, NV);
    CHECK(a[0] == 1.6f && a[1] == -2.5f && a[2] == 0.8f && a[3] == -1.25f && a[4] == 0.5f);
    float b[NV] = {2.0f, -2.0f, 1.0f, -1.0f, 0.5f, 3.0f, -0.5f, 0.0f};
    sampler_apply_penalties(&(sampler_params){.presence_penalty = 1.0f}, &st, b, NV);
    CHECK(b[0] == 1.0f && b[1] == -2.0f && b[2] == 0.0f && b[3] == -2.0f);
    float c[NV] = {2.0f, -2.0f, 1.0f, -1.0f, 0.5f, 3.0f, -0.5f, 0.0f};
    sampler_apply_penalties(&(sampler_params){.frequency_penalty = -0.5f}, &st, c, NV);
    CHECK(c[0] == 2.5f && c[1] == -2.0f && c[2] == 1.5f && c[3] == 0.0f);
    /* penalty 1 / 0 = off; a zero logit stays zero under repetition */
    float d[NV] = {0};
    sampler_apply_penalties(&(sampler_params){.repetition_penalty = 3.0f}, &st, d, NV);
    for (int i = 0; i < NV; i++) CHECK(d[i] == 0.0f);

    /* copy (forking) and reset (O(distinct)) */
    sampler_state st2;
    CHECK(sampler_state_init(&st2, NV) == IFD_OK);
    sampler_state_accept(&st2, 7);
    sampler_state_copy(&st2, &st);
    CHECK(st2.n_seen == 4 && st2.count[3] == 2 && st2.count[7] == 0 && st2.n_generated == 4);
    float e[NV] = {2.0f, -2.0f, 1.0f, -1.0f, 0.5f, 3.0f, -0.5f, 0.0f};
    sampler_apply_penalties(&p, &st2, e, NV);
    CHECK(!memcmp(e, want, sizeof e));
    sampler_state_reset(&st);
    CHECK(st.n_seen == 0);
    for (int i = 0; i < NV; i++) CHECK(st.count[i] == 0 && st.flags[i] == 0);
    const int32_t bad[] = {1, NV, -1};
    CHECK(sampler_state_add_prompt(&st, bad, 3) == IFD_ERR_INVALID);
    CHECK(st.n_seen == 1);

    /* the sampler uses the penalized logits but leaves the caller's alone */
    sampler_scratch scr;
    CHECK(sampler_scratch_init(&scr, NV) == IFD_OK);
    float raw[NV] = {2.0f, -2.0f, 1.0f, -1.0f, 0.5f, 3.0f, -0.5f, 0.0f}, raw2[NV];
    memcpy(raw2, raw, sizeof raw);
    sampler_state_reset(&st);
    sampler_state_accept(&st, 5);
    ifd_rng r;
    rng_seed(&r, 3);
    /* greedy: 3 - 2.5 = 0.5 < 2 -> id 0 */
    CHECK(sampler_sample_seq(&(sampler_params){.presence_penalty = 2.0f, .frequency_penalty = 0.5f},
                             &st, raw, NV, &r, &scr) == 0);
    CHECK(!memcmp(raw, raw2, sizeof raw));
    sampler_scratch_deinit(&scr);
    sampler_state_deinit(&st);
    sampler_state_deinit(&st2);
    sampler_state_deinit(NULL);
}

static void test_logit_bias(void) {
    enum { NV = 8, N = 10000 };
    const float l[NV] = {0.5f, 0.0f, 1.0f, 3.0f, 0.0f, -1.0f, 0.2f, 0.0f};
    int counts[NV];
    /* -100 bans the favourite */
    const sampler_bias ban = {3, -100.0f};
    draw_counts(&(sampler_params){.temperature = 1.0f, .logit_bias = &ban, .n_logit_bias = 1}, l,
                NV, 21, N, counts);
    CHECK(counts[3] == 0);
    CHECK(counts[5] > 0);
    /* +100 forces an unlikely one */
    const sampler_bias force = {5, 100.0f};
    draw_counts(&(sampler_params){.temperature = 1.0f, .logit_bias = &force, .n_logit_bias = 1},
                l, NV, 22, N, counts);
    CHECK(counts[5] == N);
    /* exact effect on the logits; out-of-range ids are skipped, not trusted */
    float m[NV];
    memcpy(m, l, sizeof m);
    const sampler_bias several[] = {{0, 1.5f}, {7, -0.25f}, {NV, 5.0f}, {-1, 5.0f}, {0, 1.0f}};
    const int32_t banned[] = {2, 99};
    const sampler_params p = {.logit_bias = several, .n_logit_bias = 5, .banned = banned,
                              .n_banned = 2};
    sampler_apply_penalties(&p, NULL, m, NV);
    CHECK(m[0] == 3.0f && m[7] == -0.25f && m[2] == -INFINITY && m[3] == 3.0f && m[1] == 0.0f);
    CHECK(sampler_params_validate(&p, NV) == IFD_ERR_INVALID);
    /* banned (ignore_eos style) with sampling */
    const int32_t eos[] = {3, 2};
    draw_counts(&(sampler_params){.temperature = 1.5f, .banned = eos, .n_banned = 2}, l, NV, 23, N,
                counts);
    CHECK(counts[3] == 0 && counts[2] == 0 && counts[0] > 0);
    /* every id banned: deterministic lowest id */
    const int32_t all[] = {0, 1, 2, 3, 4, 5, 6, 7};
    draw_counts(&(sampler_params){.temperature = 1.0f, .banned = all, .n_banned = 8}, l, NV, 24,
                100, counts);
    CHECK(counts[0] == 100);
}

static void test_validate(void) {
    sampler_params p = sampler_params_default();
    CHECK(p.temperature == 1.0f && p.top_p == 1.0f && p.repetition_penalty == 1.0f);
    CHECK(sampler_params_validate(&p, 10) == IFD_OK);
    sampler_params q = p;
    q.temperature = -1.0f;
    CHECK(sampler_params_validate(&q, 10) == IFD_ERR_INVALID);
    q = p;
    q.top_p = NAN;
    CHECK(sampler_params_validate(&q, 10) == IFD_ERR_INVALID);
    q = p;
    q.min_p = 1.5f;
    CHECK(sampler_params_validate(&q, 10) == IFD_ERR_INVALID);
    q = p;
    q.presence_penalty = 2.5f;
    CHECK(sampler_params_validate(&q, 10) == IFD_ERR_INVALID);
    q = p;
    q.repetition_penalty = -1.0f;
    CHECK(sampler_params_validate(&q, 10) == IFD_ERR_INVALID);
    const sampler_bias ok = {9, -100.0f};
    q = p;
    q.logit_bias = &ok;
    q.n_logit_bias = 1;
    CHECK(sampler_params_validate(&q, 10) == IFD_OK);
    CHECK(sampler_params_validate(&q, 9) == IFD_ERR_INVALID);
}

/* Direct log-softmax in double, for the reference. */
static void ref_log_softmax(const float *l, int n, double *out) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) m = fmax(m, l[i]);
    for (int i = 0; i < n; i++) s += exp(l[i] - m);
    for (int i = 0; i < n; i++) out[i] = l[i] - m - log(s);
}

static void test_logprobs(void) {
    enum { NV = 1000 };
    static float l[NV];
    static double ref[NV];
    static ref_c order[NV];
    unsigned s = 31;
    for (int i = 0; i < NV; i++) l[i] = frand(&s) * 4.0f;
    l[10] = l[20] = 5.0f; /* a tie at the top: 10 before 20 */
    ref_log_softmax(l, NV, ref);
    for (int i = 0; i < NV; i++) order[i] = (ref_c){i, l[i]};
    qsort(order, NV, sizeof *order, ref_cmp);
    /* |err| <= 1e-6: logprobs here are in [-15, 0], where half a float ulp is < 1e-6 */
    CHECK(fabs(logprobs_logsumexp(l, NV) - (l[0] - ref[0])) < 1e-9);
    logprob_entry out[1 + LOGPROBS_MAX_TOP];
    for (int32_t chosen = 0; chosen < NV; chosen += 37) {
        int32_t k = logprobs_compute(l, NV, chosen, 20, out);
        CHECK(k == 20);
        CHECK(out[0].id == chosen);
        CHECKF(fabs(out[0].logprob - ref[chosen]) <= 1e-6, "chosen %d: %.9g vs %.9g", chosen,
               (double)out[0].logprob, ref[chosen]);
        for (int j = 0; j < k; j++) {
            CHECKF(out[1 + j].id == order[j].id, "rank %d: id %d want %d", j, out[1 + j].id,
                   order[j].id);
            CHECK(fabs(out[1 + j].logprob - ref[out[1 + j].id]) <= 1e-6);
            if (j) CHECK(out[1 + j].logprob <= out[j].logprob);
        }
    }
    CHECK(out[1].id == 10 && out[2].id == 20);
    /* n_top clamps: 0, > 20, > n_vocab */
    CHECK(logprobs_compute(l, NV, 3, 0, out) == 0 && out[0].id == 3);
    CHECK(logprobs_compute(l, NV, 3, 50, out) == LOGPROBS_MAX_TOP);
    const float eq[5] = {1, 1, 1, 1, 1};
    CHECK(logprobs_compute(eq, 5, 4, 10, out) == 5);
    for (int j = 0; j < 5; j++)
        CHECK(out[1 + j].id == j && fabs(out[1 + j].logprob + log(5.0)) < 1e-6);
    /* -inf logits: finite for the rest, -inf for the masked */
    const float masked[4] = {0.0f, -INFINITY, 0.0f, NAN};
    CHECK(logprobs_compute(masked, 4, 1, 4, out) == 4);
    CHECK(out[0].logprob == -INFINITY);
    CHECK(out[1].id == 0 && out[2].id == 2 && fabs(out[1].logprob + log(2.0)) < 1e-6);
    CHECK(out[3].logprob == -INFINITY && out[4].logprob == -INFINITY);
    /* large logits: no overflow */
    const float big[3] = {1000.0f, 999.0f, -1000.0f};
    logprobs_compute(big, 3, 1, 1, out);
    CHECK(fabs(out[0].logprob - (-1.0 - log1p(exp(-1.0)))) < 1e-6);
}

TEST_MAIN(T(test_rng_seeded), T(test_philox_kat), T(test_expneg), T(test_sample_at_position), T(test_seeded_determinism), T(test_greedy_tie_break),
          T(test_top_p_mask), T(test_top_k_mask), T(test_min_p_mask),
          T(test_empirical_vs_reference), T(test_top_p_large_vocab), T(test_penalties_exact),
          T(test_logit_bias), T(test_validate), T(test_logprobs))
