/* forward.c — the architecture, walked once over a backend's op table (see forward.h).
 *
 * Per layer: attention RMSNorm -> q/k/v projections (one grouped matmul when the three
 * share a type) -> q/k/v biases (qwen2) -> per-head q/k RMSNorm (qwen3) -> RoPE and
 * the K/V store -> paged causal attention -> output projection -> residual -> FFN
 * RMSNorm -> gate/up (grouped) -> SwiGLU -> down projection -> residual. Then the final
 * RMSNorm of the logits rows only (gathered, batched) and the output matmul over them.
 *
 * Not thread-safe: the backend's one thread runs it. Allocates nothing. */
#include "forward.h"

#include <stdbool.h>

#include "../util/common.h"

#define TRY(call)                         \
    do {                                  \
        const int rc_ = (call);           \
        if (rc_ != IFD_OK) return rc_;    \
    } while (0)

rope_params fwd_rope_params(const model *m) {
    const model_hparams *hp = &m->hp;
    return (rope_params){.head_dim = (int32_t)hp->head_dim,
                         .n_rot = (int32_t)hp->n_rot,
                         .layout = hp->rope_layout,
                         .base = hp->rope_base,
                         .freq_scale = hp->rope_freq_scale,
                         .freq_div = m->rope_freqs};
}

void fwd_check_batch(const backend *b, const ifd_batch *bt) {
    const backend_config *cfg = &b->cfg;
    const int32_t T = bt->n_tokens;
    IFD_ASSERT(T > 0 && T <= cfg->max_batch_tokens);
    IFD_ASSERT(bt->n_seqs > 0 && bt->n_seqs <= cfg->max_batch_seqs);
    IFD_ASSERT(bt->n_logits >= 0 && bt->n_logits <= cfg->max_logits);
    IFD_ASSERT(bt->seq_start[0] == 0 && bt->seq_start[bt->n_seqs] == T);
    for (int32_t s = 0; s < bt->n_seqs; s++) IFD_ASSERT(bt->seq_start[s] <= bt->seq_start[s + 1]);
    for (int32_t t = 0; t < T; t++) {
        IFD_ASSERT(bt->positions[t] >= 0 && bt->positions[t] < cfg->max_seq_len);
        IFD_ASSERT(bt->slot_mapping[t] == BACKEND_SLOT_NONE ||
                   (bt->slot_mapping[t] >= 0 &&
                    bt->slot_mapping[t] < cfg->n_blocks * cfg->block_size));
    }
    for (int32_t i = 0; i < bt->n_logits; i++)
        IFD_ASSERT(bt->logits_index[i] >= 0 && bt->logits_index[i] < T);
}

/* y_i = W_i x for matrices sharing x: one grouped call when their types (and widths)
 * match, else one call each. */
static int matmul_group(const fwd_ops *o, void *ctx, int n, float *const *outs,
                        const wmat *const *ws, const float *x, int32_t T) {
    bool same = true;
    for (int i = 1; i < n; i++)
        same = same && ws[i]->type == ws[0]->type && ws[i]->n_cols == ws[0]->n_cols;
    if (same) return o->matmul(ctx, n, outs, ws, x, T);
    for (int i = 0; i < n; i++) TRY(o->matmul(ctx, 1, &outs[i], &ws[i], x, T));
    return IFD_OK;
}

static inline void observe(const backend *b, const wmat *w, const float *x, int32_t T) {
    if (b->cfg.observe) b->cfg.observe(b->cfg.observe_user, w, x, T);
}

int fwd_run(const fwd_ops *o, void *ctx, const backend *b, const fwd_bufs *buf,
            const ifd_batch *bt, float *logits) {
    const model *m = b->m;
    const model_hparams *hp = &m->hp;
    const int32_t T = bt->n_tokens, dim = (int32_t)hp->dim, hd = (int32_t)hp->head_dim;
    const int32_t q_dim = (int32_t)hp->n_heads * hd, kv_dim = (int32_t)hp->n_kv_heads * hd;
    const int64_t ffn = hp->ffn_dim;
    const float eps = hp->rms_eps;
    const rope_params rp = fwd_rope_params(m);
    fwd_check_batch(b, bt);

    if (o->begin) TRY(o->begin(ctx, bt, &rp));
    TRY(o->embed(ctx, buf->x, &m->tok_embd, bt->token_ids, T));
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const layer_weights *w = &m->layers[l];
        /* attention block */
        TRY(o->rmsnorm(ctx, buf->xb, buf->x, NULL, T, w->attn_norm, dim, eps));
        float *qkv_out[3] = {buf->q, buf->k, buf->v};
        const wmat *qkv_w[3] = {&w->wq, &w->wk, &w->wv};
        observe(b, &w->wq, buf->xb, T);
        TRY(matmul_group(o, ctx, 3, qkv_out, qkv_w, buf->xb, T));
        if (w->bq) { /* qwen2 */
            TRY(o->add_bias(ctx, buf->q, w->bq, T, q_dim));
            TRY(o->add_bias(ctx, buf->k, w->bk, T, kv_dim));
            TRY(o->add_bias(ctx, buf->v, w->bv, T, kv_dim));
        }
        if (w->q_norm) { /* qwen3: every head's q and k */
            TRY(o->head_norm(ctx, buf->q, w->q_norm, T * (int32_t)hp->n_heads, hd, eps));
            TRY(o->head_norm(ctx, buf->k, w->k_norm, T * (int32_t)hp->n_kv_heads, hd, eps));
        }
        TRY(o->rope_store(ctx, l, buf->q, buf->k, buf->v, bt, &rp));
        TRY(o->attention(ctx, l, buf->att, buf->q, bt));
        observe(b, &w->wo, buf->att, T);
        TRY(o->matmul(ctx, 1, &buf->xb, (const wmat *const[]){&w->wo}, buf->att, T));
        TRY(o->add(ctx, buf->x, buf->xb, (int64_t)T * dim));
        /* feed-forward block */
        TRY(o->rmsnorm(ctx, buf->xb, buf->x, NULL, T, w->ffn_norm, dim, eps));
        float *gu_out[2] = {buf->gate, buf->up};
        const wmat *gu_w[2] = {&w->w_gate, &w->w_up};
        observe(b, &w->w_gate, buf->xb, T);
        TRY(matmul_group(o, ctx, 2, gu_out, gu_w, buf->xb, T));
        TRY(o->swiglu(ctx, buf->hb, buf->gate, buf->up, (int64_t)T * ffn));
        observe(b, &w->w_down, buf->hb, T);
        TRY(o->matmul(ctx, 1, &buf->xb, (const wmat *const[]){&w->w_down}, buf->hb, T));
        TRY(o->add(ctx, buf->x, buf->xb, (int64_t)T * dim));
    }
    if (bt->n_logits == 0) return IFD_OK;
    /* the logits rows only: gathered final norm, then one batched output matmul */
    TRY(o->rmsnorm(ctx, buf->xb, buf->x, bt->logits_index, bt->n_logits, m->output_norm, dim, eps));
    const wmat *ow = buf->output ? buf->output : &m->output;
    TRY(o->matmul(ctx, 1, &logits, (const wmat *const[]){ow}, buf->xb, bt->n_logits));
    return IFD_OK;
}
