/* batch.h — the host buffers of one flat batch (ifd_batch) and how a sequence's chunk
 * is appended to them: shared by the target's runner (runner.c) and the draft model's
 * rounds (draft.c). Engine thread only; nothing here allocates after step_batch_init. */
#ifndef INFERD_BATCH_H
#define INFERD_BATCH_H
#include "../util/layer/engine.h"

#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "kv_cache.h"

typedef struct step_batch {
    int32_t *tokens, *pos, *slot;    /* [max_tokens] */
    int32_t *seq_start;              /* [max_seqs + 1] */
    int32_t *ctx_len;                /* [max_seqs] */
    int32_t *block_table;            /* [max_seqs][max_blocks_per_seq] */
    int32_t *logits_idx;             /* [max_logits] */
    int32_t max_blocks_per_seq;
    int32_t n_tokens, n_seqs, n_logits; /* this batch so far */
} step_batch;

/* IFD_OK or IFD_ERR_NOMEM (b is then freeable). */
int step_batch_init(step_batch *b, size_t max_tokens, size_t max_seqs, size_t max_logits,
                    int32_t max_blocks_per_seq);
void step_batch_free(step_batch *b); /* zeroed ok */

static inline void step_batch_reset(step_batch *b) { b->n_tokens = b->n_seqs = b->n_logits = 0; }

/* Append one sequence: tokens[first .. first + n) at positions first.., their KV slots
 * in s, its block table, and the logits rows of its last n_logits tokens as batch rows
 * at_row .. at_row + n_logits (the caller keeps at_row + n_logits <= max_logits). */
void step_batch_add(step_batch *b, const kv_cache *kv, const kv_seq *s, const int32_t *tokens,
                    int32_t first, int32_t n, int32_t n_logits, int32_t at_row);

/* The descriptor of what was appended (seq_start closed), for backend_forward. */
ifd_batch step_batch_view(step_batch *b);

#endif
