/* draft.h — the draft model of speculative decoding (issue 11): a second model with its
 * own backend and its own paged KV pool (kv_cache), run by the engine thread in a few
 * cheap batched rounds per step to propose tokens for the target to verify.
 *
 * What it does: loads the draft, checks that it shares the target's vocabulary (same
 * size, same special ids, the same text and type for every id; the first difference is
 * the error), and runs rounds: each job feeds a sequence's next tokens into the draft's
 * KV and may ask for the logits row of its last token. Per sequence (draft_seq) it
 * keeps how many positions of the draft KV are written and how many of those hold
 * tokens that are final (verified); draft_seq_rollback cuts the KV back to the
 * verified ones (a length change: blocks left empty go back to the pool). Only final
 * tokens reach the draft's prefix cache.
 * What it does not: choose k, pick tokens or verify (speculate.c does).
 * Not thread-safe: the engine thread owns it. Nothing on the step path allocates. */
#ifndef INFERD_DRAFT_H
#define INFERD_DRAFT_H
#include "../util/layer/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../model/model.h"
#include "batch.h"
#include "kv_cache.h"

typedef struct draft_seq {
    kv_seq kv;
    bool ready;          /* kv_seq_init done */
    int32_t n_computed;  /* draft KV positions written (== kv.n_tokens after a round) */
    int32_t n_verified;  /* leading positions among them whose tokens are final */
} draft_seq;

typedef struct draft_job {
    draft_seq *ds;
    const int32_t *tokens; /* the sequence's tokens; positions ds->n_computed .. + n_feed fed */
    int32_t n_feed;        /* >= 1 */
    bool want_logits;      /* the row of the last fed token (draft_logits) */
    bool failed;           /* out: no KV for it (the job did not run; ds untouched) */
    int32_t row;           /* out: its logits row, or -1 */
} draft_job;

typedef struct draft {
    model *m;
    backend *be;
    kv_cache *kv;
    int32_t n_vocab, max_tokens, max_seqs, max_blocks_per_seq, block_size;
    step_batch batch;
    float *logits; /* [max_seqs][n_vocab] */
} draft;

/* The first difference between the two vocabularies, or IFD_OK. */
int draft_check_vocab(const model *target, const model *dm, char *err, size_t err_bytes);

/* Load path (vocabulary checked against target). *out NULL on failure. */
int draft_open(model **out, const char *path, const model *target, char *err, size_t err_bytes);

/* The draft's runner over dm (ownership taken, also on failure): a backend of kind
 * with cfg (n_blocks, block_size, max_seq_len, batch limits as the target's) and a
 * KV block manager of cfg->n_blocks (prefix caching as asked). */
int draft_create(draft **out, model *dm, backend_kind kind, const backend_config *cfg,
                 bool prefix_caching, char *err, size_t err_bytes);
void draft_destroy(draft *d); /* accepts NULL; every draft_seq must be released first */

/* One forward over jobs[0..n) (n <= max_seqs, fed tokens <= max_tokens in all; the
 * caller cuts them): allocates each job's slots (a job without them is `failed`), runs
 * the batch, advances each ds->n_computed. Returns the backend's status. */
int draft_run(draft *d, draft_job *jobs, int32_t n);
static inline const float *draft_logits(const draft *d, int32_t row) {
    return d->logits + (size_t)row * (size_t)d->n_vocab;
}

/* Make ds usable (its table); IFD_OK or IFD_ERR_NOMEM. */
int draft_seq_prepare(draft *d, draft_seq *ds);
/* Cut the KV back to n_verified positions (and to at most n_max of them), commit the
 * verified full blocks to the prefix cache (tokens: the sequence's). */
void draft_seq_rollback(draft *d, draft_seq *ds, const int32_t *tokens, int32_t n_max);
/* An empty ds: a prefix-cache match over tokens[0..n) (at least one token left). */
void draft_seq_match(draft *d, draft_seq *ds, const int32_t *tokens, int32_t n);
/* Give all of ds's blocks back (it stays prepared, empty). */
void draft_seq_clear(draft *d, draft_seq *ds);
void draft_seq_release(draft *d, draft_seq *ds); /* clear + free the table; zeroed ok */

#endif
