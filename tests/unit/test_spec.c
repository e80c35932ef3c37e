/* test_spec.c — speculative decoding's pure parts (engine/spec.h): the n-gram proposer
 * on hand cases and against a brute-force reference over random histories on small
 * alphabets (where repeats are common), and greedy verification. */
#include <stdbool.h>
#include <stdint.h>

#include "engine/spec.h"
#include "test_util.h"

/* Every (n, i) with hist[i..i+n) == the last n tokens and i + n < n_hist; the largest
 * n wins, then the largest i. Returns the count, fills out. */
static int32_t ref_propose(const int32_t *h, int32_t nh, int32_t nmin, int32_t nmax, int32_t k,
                           int32_t *out) {
    int32_t bn = 0, bi = -1;
    for (int32_t n = nmin; n <= nmax; n++)
        for (int32_t i = 0; i + n < nh; i++) {
            bool eq = true;
            for (int32_t j = 0; j < n; j++) eq = eq && h[i + j] == h[nh - n + j];
            if (eq && (n > bn || (n == bn && i > bi))) bn = n, bi = i;
        }
    if (bi < 0) return 0;
    int32_t m = 0;
    for (int32_t j = bi + bn; j < nh && m < k; j++) out[m++] = h[j];
    return m;
}

static void test_ngram_cases(void) {
    int32_t out[8];
    const int32_t a[] = {1, 2, 3, 4, 1, 2};
    CHECK(spec_ngram_propose(a, 6, 1, 3, 4, out) == 4);
    CHECK(out[0] == 3 && out[1] == 4 && out[2] == 1 && out[3] == 2);
    CHECK(spec_ngram_propose(a, 6, 1, 3, 2, out) == 2 && out[0] == 3 && out[1] == 4);
    /* only n = 3 allowed: [4 1 2] never occurred before */
    CHECK(spec_ngram_propose(a, 6, 3, 3, 4, out) == 0);
    const int32_t b[] = {1, 2, 3};
    CHECK(spec_ngram_propose(b, 3, 1, 3, 4, out) == 0);
    /* the most recent occurrence: [7] at 0 (-> 8) and at 2 (-> 9) */
    const int32_t c[] = {7, 8, 7, 9, 7};
    CHECK(spec_ngram_propose(c, 5, 1, 1, 3, out) == 2 && out[0] == 9 && out[1] == 7);
    /* the longer pattern beats a more recent shorter one: [5 6] at 0, [6] also at 3 */
    const int32_t d[] = {5, 6, 1, 6, 2, 5, 6};
    CHECK(spec_ngram_propose(d, 7, 1, 2, 2, out) == 2 && out[0] == 1 && out[1] == 6);
    /* a run: the occurrence may overlap the pattern; the proposal stops at the end */
    const int32_t e[] = {5, 5, 5, 5};
    CHECK(spec_ngram_propose(e, 4, 1, 2, 4, out) == 1 && out[0] == 5);
    /* bad arguments propose nothing and write nothing */
    out[0] = -1;
    CHECK(spec_ngram_propose(a, 6, 0, 3, 4, out) == 0);
    CHECK(spec_ngram_propose(a, 6, 3, 2, 4, out) == 0);
    CHECK(spec_ngram_propose(a, 6, 1, SPEC_NGRAM_MAX + 1, 4, out) == 0);
    CHECK(spec_ngram_propose(a, 6, 1, 3, 0, out) == 0);
    CHECK(spec_ngram_propose(a, 1, 1, 3, 4, out) == 0);
    CHECK(spec_ngram_propose(NULL, 6, 1, 3, 4, out) == 0);
    CHECK(out[0] == -1);
    /* n_max longer than the history is clipped, not refused */
    CHECK(spec_ngram_propose(a, 6, 1, SPEC_NGRAM_MAX, 4, out) == 4 && out[0] == 3);
}

static void test_ngram_random(void) {
    uint32_t s = 2024;
#define RND(n) ((s = s * 1664525u + 1013904223u), (int32_t)((s >> 8) % (uint32_t)(n)))
    int32_t h[200], out[16], ref[16];
    int hits = 0;
    for (int iter = 0; iter < 20000; iter++) {
        const int32_t nh = 2 + RND(199), alpha = 2 + RND(6);
        for (int32_t j = 0; j < nh; j++) h[j] = RND(alpha);
        const int32_t nmin = 1 + RND(4), nmax = nmin + RND(5), k = 1 + RND(12);
        const int32_t got = spec_ngram_propose(h, nh, nmin, nmax, k, out);
        const int32_t want = ref_propose(h, nh, nmin, nmax, k, ref);
        bool same = got == want;
        for (int32_t j = 0; same && j < got; j++) same = out[j] == ref[j];
        CHECKF(same, "iter %d: n_hist %d alphabet %d n %d..%d k %d: got %d want %d", iter, nh,
               alpha, nmin, nmax, k, got, want);
        if (!same) return;
        hits += got > 0;
    }
    CHECKF(hits > 5000 && hits < 20000,
           "%d of 20000 random histories proposed (both outcomes must be exercised)", hits);
#undef RND
}

static void test_verify_greedy(void) {
    int32_t out[8];
    const int32_t d1[] = {1, 2, 3}, t1[] = {1, 2, 9, 7};
    CHECK(spec_verify_greedy(d1, t1, 3, out) == 3 && out[0] == 1 && out[1] == 2 && out[2] == 9);
    const int32_t d2[] = {1, 2}, t2[] = {1, 2, 3};
    CHECK(spec_verify_greedy(d2, t2, 2, out) == 3 && out[0] == 1 && out[1] == 2 && out[2] == 3);
    const int32_t d3[] = {4, 2}, t3[] = {5, 2, 3};
    CHECK(spec_verify_greedy(d3, t3, 2, out) == 1 &&
          out[0] == 5); /* a later match counts for nothing */
    CHECK(spec_verify_greedy(NULL, t3, 0, out) == 1 && out[0] == 5);
}

TEST_MAIN(T(test_ngram_cases), T(test_ngram_random), T(test_verify_greedy))
