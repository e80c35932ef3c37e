/* batch.c — see batch.h. */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

#include "../util/common.h"

int step_batch_init(step_batch *b, size_t T, size_t S, size_t L, int32_t mb) {
    memset(b, 0, sizeof *b);
    b->max_blocks_per_seq = mb;
    b->tokens = malloc(T * sizeof(int32_t));
    b->pos = malloc(T * sizeof(int32_t));
    b->slot = malloc(T * sizeof(int32_t));
    b->seq_start = malloc((S + 1) * sizeof(int32_t));
    b->ctx_len = malloc(S * sizeof(int32_t));
    b->block_table = calloc(S * (size_t)mb, sizeof(int32_t));
    b->logits_idx = malloc(L * sizeof(int32_t));
    return b->tokens && b->pos && b->slot && b->seq_start && b->ctx_len && b->block_table && b->logits_idx
               ? IFD_OK
               : IFD_ERR_NOMEM;
}

void step_batch_free(step_batch *b) {
    free(b->tokens);
    free(b->pos);
    free(b->slot);
    free(b->seq_start);
    free(b->ctx_len);
    free(b->block_table);
    free(b->logits_idx);
    memset(b, 0, sizeof *b);
}

void step_batch_add(step_batch *b, const kv_cache *kv, const kv_seq *s, const int32_t *tokens,
                    int32_t first, int32_t n, int32_t n_logits, int32_t at_row) {
    const int32_t i = b->n_seqs++;
    int32_t t = b->n_tokens;
    b->seq_start[i] = t;
    for (int32_t j = 0; j < n; j++, t++) {
        const int32_t pos = first + j;
        b->tokens[t] = tokens[pos];
        b->pos[t] = pos;
        b->slot[t] = kv_slot(kv, s, pos);
    }
    b->n_tokens = t;
    b->ctx_len[i] = first + n;
    memcpy(b->block_table + (size_t)i * b->max_blocks_per_seq, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
    for (int32_t j = 0; j < n_logits; j++) b->logits_idx[at_row + j] = t - n_logits + j;
    b->n_logits += n_logits;
}

ifd_batch step_batch_view(step_batch *b) {
    b->seq_start[b->n_seqs] = b->n_tokens;
    return (ifd_batch){.n_tokens = b->n_tokens,
                       .token_ids = b->tokens,
                       .positions = b->pos,
                       .slot_mapping = b->slot,
                       .n_seqs = b->n_seqs,
                       .seq_start = b->seq_start,
                       .context_len = b->ctx_len,
                       .block_table = b->block_table,
                       .max_blocks_per_seq = b->max_blocks_per_seq,
                       .n_logits = b->n_logits,
                       .logits_index = b->logits_idx};
}
