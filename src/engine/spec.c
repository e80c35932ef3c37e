/* spec.c — n-gram proposer and greedy verification (spec.h). */
#include "spec.h"

#include <string.h>

int32_t spec_ngram_propose(const int32_t *hist, int32_t n_hist, int32_t n_min, int32_t n_max,
                           int32_t k, int32_t *out) {
    if (!hist || !out || n_min < 1 || n_max < n_min || n_max > SPEC_NGRAM_MAX || k < 1 ||
        n_hist < 2)
        return 0;
    if (n_max > n_hist - 1) n_max = n_hist - 1;
    for (int32_t n = n_max; n >= n_min; n--) {
        const int32_t *pat = hist + n_hist - n;
        /* most recent first: start i, the occurrence ends before the pattern does */
        for (int32_t i = n_hist - n - 1; i >= 0; i--) {
            if (hist[i + n - 1] != pat[n - 1] ||
                memcmp(hist + i, pat, (size_t)n * sizeof *hist) != 0)
                continue;
            int32_t m = n_hist - (i + n);
            if (m > k) m = k;
            memcpy(out, hist + i + n, (size_t)m * sizeof *out);
            return m;
        }
    }
    return 0;
}

int32_t spec_verify_greedy(const int32_t *draft, const int32_t *target, int32_t k, int32_t *out) {
    int32_t a = 0;
    while (a < k && draft[a] == target[a]) {
        out[a] = draft[a];
        a++;
    }
    out[a] = target[a];
    return a + 1;
}
