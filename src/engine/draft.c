/* draft.c — the draft model's runner (engine thread only). See draft.h. */
#include "draft.h"

#include <stdlib.h>
#include <string.h>

#include "../tokenizer/tokenizer.h"
#include "../util/common.h"

int draft_check_vocab(const model *target, const model *dm, char *err, size_t err_bytes) {
    const tokenizer *a = target->tok, *b = dm->tok;
    if (!a || !b) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "draft model: no vocabulary");
    const int32_t na = tok_n_vocab(a), nb = tok_n_vocab(b);
    if (na != nb || (int64_t)target->hp.n_vocab != (int64_t)dm->hp.n_vocab)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "draft model: its vocabulary has %d tokens, the target's %d: they must share one",
                        nb, na);
    if (tok_bos(a) != tok_bos(b) || tok_eos(a) != tok_eos(b))
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "draft model: BOS/EOS ids %d/%d differ from the target's %d/%d", tok_bos(b),
                        tok_eos(b), tok_bos(a), tok_eos(a));
    char pa[512], pb[512];
    for (int32_t id = 0; id < na; id++) {
        const size_t la = tok_piece(a, id, true, pa, sizeof pa);
        const size_t lb = tok_piece(b, id, true, pb, sizeof pb);
        const bool same_text = la == lb && (la > sizeof pa || !memcmp(pa, pb, la));
        if (!same_text || tok_get_type(a, id) != tok_get_type(b, id) ||
            tok_is_eog(a, id) != tok_is_eog(b, id)) {
            pa[la < sizeof pa ? la : sizeof pa - 1] = 0;
            pb[lb < sizeof pb ? lb : sizeof pb - 1] = 0;
            return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                            "draft model: token %d differs from the target's (\"%.40s\" vs \"%.40s\", "
                            "type %d vs %d): the draft must share the target's vocabulary",
                            id, pb, pa, (int)tok_get_type(b, id), (int)tok_get_type(a, id));
        }
    }
    return IFD_OK;
}

int draft_open(model **out, const char *path, const model *target, char *err, size_t err_bytes) {
    *out = NULL;
    char e1[384];
    model *dm = NULL;
    int rc = model_load(&dm, path, e1, sizeof e1);
    if (rc) return ifd_errf(err, err_bytes, rc, "draft model %s: %s", path, e1);
    if ((rc = draft_check_vocab(target, dm, err, err_bytes))) {
        model_destroy(dm);
        return rc;
    }
    *out = dm;
    return IFD_OK;
}

int draft_create(draft **out, model *dm, backend_kind kind, const backend_config *cfg,
                 bool prefix_caching, char *err, size_t err_bytes) {
    *out = NULL;
    draft *d = calloc(1, sizeof *d);
    if (!d) {
        model_destroy(dm);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "draft: out of memory");
    }
    d->m = dm;
    d->n_vocab = (int32_t)dm->hp.n_vocab;
    d->max_tokens = cfg->max_batch_tokens;
    d->max_seqs = cfg->max_batch_seqs;
    d->block_size = cfg->block_size;
    d->max_blocks_per_seq = (cfg->max_seq_len + cfg->block_size - 1) / cfg->block_size;
    backend_config bc = *cfg;
    bc.max_logits = cfg->max_batch_seqs;
    char e1[384];
    int rc = backend_create(&d->be, kind, dm, &bc, e1, sizeof e1);
    if (rc) {
        draft_destroy(d);
        return ifd_errf(err, err_bytes, rc, "draft model: %s", e1);
    }
    if ((rc = kv_create(&d->kv, cfg->n_blocks, cfg->block_size, d->max_blocks_per_seq, prefix_caching))) {
        draft_destroy(d);
        return ifd_errf(err, err_bytes, rc, "draft model: cannot create its KV block manager");
    }
    const size_t T = (size_t)d->max_tokens, S = (size_t)d->max_seqs;
    d->logits = malloc(S * (size_t)d->n_vocab * sizeof(float));
    if (step_batch_init(&d->batch, T, S, S, d->max_blocks_per_seq) != IFD_OK || !d->logits) {
        draft_destroy(d);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "draft: out of memory");
    }
    *out = d;
    return IFD_OK;
}

void draft_destroy(draft *d) {
    if (!d) return;
    kv_destroy(d->kv);
    backend_destroy(d->be);
    model_destroy(d->m);
    step_batch_free(&d->batch);
    free(d->logits);
    free(d);
}

int draft_seq_prepare(draft *d, draft_seq *ds) {
    if (ds->ready) return IFD_OK;
    if (kv_seq_init(d->kv, &ds->kv)) return IFD_ERR_NOMEM;
    ds->ready = true;
    ds->n_computed = ds->n_verified = 0;
    return IFD_OK;
}

void draft_seq_clear(draft *d, draft_seq *ds) {
    if (ds->ready) kv_free(d->kv, &ds->kv);
    ds->n_computed = ds->n_verified = 0;
}

void draft_seq_release(draft *d, draft_seq *ds) {
    if (ds->ready) kv_seq_deinit(d->kv, &ds->kv);
    memset(ds, 0, sizeof *ds);
}

void draft_seq_match(draft *d, draft_seq *ds, const int32_t *tokens, int32_t n) {
    if (!ds->ready || ds->kv.n_tokens != 0 || n < 2) return;
    const int32_t hit = kv_match_prefix(d->kv, &ds->kv, tokens, n);
    ds->n_computed = ds->n_verified = hit;
}

void draft_seq_rollback(draft *d, draft_seq *ds, const int32_t *tokens, int32_t n_max) {
    if (!ds->ready) return;
    if (ds->n_verified > n_max) ds->n_verified = IFD_MAX(n_max, 0);
    if (ds->n_computed > ds->n_verified) {
        kv_truncate(d->kv, &ds->kv, ds->n_verified);
        ds->n_computed = ds->n_verified;
    }
    kv_commit(d->kv, &ds->kv, tokens, ds->n_verified);
}

int draft_run(draft *d, draft_job *jobs, int32_t n) {
    IFD_ASSERT(n <= d->max_seqs);
    int32_t fed = 0;
    for (int32_t i = 0; i < n; i++) {
        draft_job *j = &jobs[i];
        j->row = -1;
        j->failed = !j->ds->ready || j->n_feed < 1 || fed + j->n_feed > d->max_tokens ||
                    !kv_can_alloc_slots(d->kv, &j->ds->kv, j->n_feed);
        if (j->failed) continue;
        kv_alloc_slots(d->kv, &j->ds->kv, j->n_feed);
        fed += j->n_feed;
    }
    /* copy-on-write copies (a shared partial block after a prefix match) before the forward */
    int32_t nc;
    int32_t src[64], dst[64];
    while ((nc = kv_take_copies(d->kv, src, dst, 64)) > 0) {
        const int rc = backend_copy_blocks(d->be, src, dst, nc);
        if (rc != IFD_OK) return rc;
    }
    step_batch *bt = &d->batch;
    step_batch_reset(bt);
    for (int32_t i = 0; i < n; i++) {
        draft_job *j = &jobs[i];
        if (j->failed) continue;
        j->row = j->want_logits ? bt->n_logits : -1;
        step_batch_add(bt, d->kv, &j->ds->kv, j->tokens, j->ds->n_computed, j->n_feed, j->want_logits ? 1 : 0,
                       bt->n_logits);
    }
    if (bt->n_seqs == 0) return IFD_OK;
    const ifd_batch b = step_batch_view(bt);
    const int rc = backend_forward(d->be, &b, d->logits);
    if (rc != IFD_OK) {
        /* the written KV is garbage: forget it */
        for (int32_t i = 0; i < n; i++)
            if (!jobs[i].failed) kv_truncate(d->kv, &jobs[i].ds->kv, jobs[i].ds->n_computed);
        return rc;
    }
    for (int32_t i = 0; i < n; i++)
        if (!jobs[i].failed) jobs[i].ds->n_computed += jobs[i].n_feed;
    return IFD_OK;
}
