/* runner.c — flatten the step plan into the backend's batch descriptor and run one
 * forward (engine thread only). Pending copy-on-write block copies are applied first;
 * a failed copy or forward returns its status and the engine fails the step's
 * sequences (engine.c). */
#include <string.h>

#include "../util/common.h"
#include "engine_internal.h"

int runner_execute(inferd_engine *e) {
    const sched_plan *p = e->plan;
    if (p->n_seqs == 0) return IFD_OK;
    int32_t n_copies;
    while ((n_copies = kv_take_copies(e->kv, e->copy_src, e->copy_dst, e->opt.max_num_seqs)) > 0) {
        /* a failed copy leaves a scheduled sequence's block wrong: the step fails (its
         * sequences end with an error, the caller's rule for any backend failure) */
        const int rc = backend_copy_blocks(e->be, e->copy_src, e->copy_dst, n_copies);
        if (rc != IFD_OK) return rc;
    }

    const int32_t mb = e->max_blocks_per_seq;
    int32_t t = 0;
    for (int32_t i = 0; i < p->n_seqs; i++) {
        const sched_entry *en = &p->entries[i];
        const sched_seq *s = en->seq;
        e->b_seq_start[i] = t;
        for (int32_t j = 0; j < en->n_tokens; j++, t++) {
            const int32_t pos = s->n_computed + j;
            e->b_tokens[t] = s->tokens[pos];
            e->b_pos[t] = pos;
            e->b_slot[t] = kv_slot(e->kv, &s->kv, pos);
        }
        e->b_ctx_len[i] = s->n_computed + en->n_tokens;
        memcpy(e->b_block_table + (size_t)i * mb, s->kv.blocks,
               (size_t)s->kv.n_blocks * sizeof(int32_t));
        /* the rows of the entry's last n_logits tokens */
        for (int32_t j = 0; j < en->n_logits; j++)
            e->b_logits_idx[en->logits_first + j] = t - en->n_logits + j;
    }
    e->b_seq_start[p->n_seqs] = t;
    IFD_ASSERT(t == p->n_tokens && p->n_logits <= e->max_logits);
    const ifd_batch b = {.n_tokens = t,
                         .token_ids = e->b_tokens,
                         .positions = e->b_pos,
                         .slot_mapping = e->b_slot,
                         .n_seqs = p->n_seqs,
                         .seq_start = e->b_seq_start,
                         .context_len = e->b_ctx_len,
                         .block_table = e->b_block_table,
                         .max_blocks_per_seq = mb,
                         .n_logits = p->n_logits,
                         .logits_index = e->b_logits_idx};
    /* with the draws on the device (e->dev_sample) the logits stay there */
    return backend_forward(e->be, &b, e->dev_sample ? NULL : e->logits);
}
