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

    step_batch *bt = &e->batch;
    step_batch_reset(bt);
    for (int32_t i = 0; i < p->n_seqs; i++) {
        const sched_entry *en = &p->entries[i];
        const sched_seq *s = en->seq;
        /* the rows of the entry's last n_logits tokens, at its plan rows */
        step_batch_add(bt, e->kv, &s->kv, s->tokens, s->n_computed, en->n_tokens, en->n_logits,
                       en->logits_first);
    }
    IFD_ASSERT(bt->n_tokens == p->n_tokens && bt->n_logits == p->n_logits && p->n_logits <= e->max_logits);
    const ifd_batch b = step_batch_view(bt);
    /* with the draws on the device (e->dev_sample) the logits stay there */
    return backend_forward(e->be, &b, e->dev_sample ? NULL : e->logits);
}
