/* logprobs.c — log-softmax of the raw logits for the chosen token and the top N, in
 * one pass (online logsumexp + bounded insertion). Pure; any thread. */
#include "logprobs.h"

#include <math.h>

#include "../util/common.h"

/* Online logsumexp state: sum of exp(x - max) over what was seen, in double. */
typedef struct lse_acc {
    double max;
    double sum;
} lse_acc;

static inline void lse_add(lse_acc *a, double x) {
    if (x == -INFINITY) return;
    if (x > a->max) {
        a->sum = a->sum * exp(a->max - x) + 1.0; /* exp(-inf) = 0 on the first one */
        a->max = x;
    } else {
        a->sum += exp(x - a->max);
    }
}

static inline double lse_value(const lse_acc *a) {
    return a->max == -INFINITY ? -INFINITY : a->max + log(a->sum);
}

static inline float clean(float x) { return isnan(x) ? -INFINITY : x; }

double logprobs_logsumexp(const float *logits, int32_t n) {
    lse_acc a = {-INFINITY, 0.0};
    for (int32_t i = 0; i < n; i++) lse_add(&a, clean(logits[i]));
    return lse_value(&a);
}

static inline float lp_of(float logit, double lse) {
    if (logit == -INFINITY || lse == -INFINITY) return -INFINITY;
    return (float)((double)logit - lse);
}

int32_t logprobs_compute(const float *logits, int32_t n_vocab, int32_t chosen, int32_t n_top,
                         logprob_entry *out) {
    IFD_ASSERT(n_vocab > 0 && chosen >= 0 && chosen < n_vocab);
    if (n_top < 0) n_top = 0;
    if (n_top > LOGPROBS_MAX_TOP) n_top = LOGPROBS_MAX_TOP;
    if (n_top > n_vocab) n_top = n_vocab;
    logprob_entry *top = out + 1; /* holds raw logits until the end, best first */
    int32_t k = 0;
    lse_acc a = {-INFINITY, 0.0};
    for (int32_t i = 0; i < n_vocab; i++) {
        const float x = clean(logits[i]);
        lse_add(&a, x);
        /* ids arrive ascending, so an equal logit never displaces an earlier id: the
         * list stays ordered by (logit desc, id asc) */
        if (n_top == 0 || (k == n_top && !(x > top[k - 1].logprob))) continue;
        int32_t j = k < n_top ? k++ : n_top - 1;
        while (j > 0 && x > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (logprob_entry){i, x};
    }
    const double lse = lse_value(&a);
    for (int32_t j = 0; j < k; j++) top[j].logprob = lp_of(top[j].logprob, lse);
    out[0] = (logprob_entry){chosen, lp_of(clean(logits[chosen]), lse)};
    return k;
}
