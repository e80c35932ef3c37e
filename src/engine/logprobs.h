/* logprobs.h — per-token log-probabilities for the API's `logprobs` / `top_logprobs`.
 *
 * Computed from the log-softmax of the model's RAW logits: before penalties,
 * logit_bias, bans and temperature, and before top-k / top-p / min-p. This is vLLM's
 * default ("raw_logprobs"): the numbers describe the model, not the sampling
 * settings, so a token that the filters made impossible still has a finite logprob.
 *
 * One pass over the vocabulary: an online logsumexp (running max, rescaled sum in
 * double) together with a bounded insertion list for the top N (N <= 20), so it costs
 * O(n_vocab * small) and never sorts the vocabulary. Pure and thread-safe. */
#ifndef INFERD_LOGPROBS_H
#define INFERD_LOGPROBS_H
#include "../util/layer/engine.h"

#include <stdint.h>

#define LOGPROBS_MAX_TOP 20

/* Same layout as inferd_token_logprob. */
typedef struct logprob_entry {
    int32_t id;
    float logprob; /* natural log; -INFINITY for a -inf (or NaN) logit */
} logprob_entry;

/* log(sum(exp(logits))) over n; NaN logits count as -inf. -INFINITY if all are. */
double logprobs_logsumexp(const float *logits, int32_t n);

/* out[0] = (chosen, its logprob); out[1 .. 1 + k] = the k = min(n_top, n_vocab) most
 * likely ids, logprob descending then id ascending. n_top is clamped to
 * [0, LOGPROBS_MAX_TOP]; out needs 1 + k entries. Returns k. */
int32_t logprobs_compute(const float *logits, int32_t n_vocab, int32_t chosen, int32_t n_top,
                         logprob_entry *out);

#endif
