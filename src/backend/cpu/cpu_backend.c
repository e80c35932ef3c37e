/* cpu_backend.c — the CPU backend: owns the paged KV pool and scratch buffers and runs
 * the transformer forward over a flat batch, either with the plain C reference ops
 * (cfg.reference: the ground truth tests compare against) or with the fast ops
 * (ops_fast.c: SIMD kernels picked at run time, threads from cfg.n_threads).
 *
 * Batch invariance: every token's activations are computed row by row with the same
 * reduction order whatever else is in the batch, so a sequence's logits do not depend
 * on its batch-mates or on how its prompt was chunked.
 *
 * Driven by one thread (the engine's). forward() allocates nothing. */
#include <math.h>
#include <string.h>

#include "../../model/quant.h"
#include "../../util/common.h"
#include "../../util/threadpool.h"
#include "../backend.h"
#include "ops.h"

typedef struct cpu_backend {
    backend base;
    /* KV pool per layer: [n_blocks * block_size][n_kv_heads][head_dim] for K and V */
    float *kv;
    size_t layer_kv_floats; /* floats of K (== of V) per layer */
    /* scratch, sized for max_batch_tokens */
    float *x, *xb, *q, *k, *v, *att, *gate, *up, *hb, *att_scratch;
    /* fast path only (NULL with cfg.reference) */
    ops_ctx *ops;
    float *rope_cs; /* [max_batch_tokens][n_rot/2][cos, sin] */
} cpu_backend;

size_t backend_kv_block_bytes(const model *m, int32_t block_size) {
    return (size_t)2 * m->hp.n_layers * (size_t)block_size * m->hp.n_kv_heads * m->hp.head_dim *
           sizeof(float);
}

static float *kv_k(cpu_backend *cb, uint32_t layer) {
    return cb->kv + (size_t)layer * 2 * cb->layer_kv_floats;
}
static float *kv_v(cpu_backend *cb, uint32_t layer) {
    return kv_k(cb, layer) + cb->layer_kv_floats;
}

/* out[t] = embedding row of token ids[t] */
static void embed(const model *m, const int32_t *ids, int32_t n, float *out) {
    const wmat *e = &m->tok_embd;
    for (int32_t t = 0; t < n; t++) {
        IFD_ASSERT(ids[t] >= 0 && ids[t] < e->n_rows);
        quant_dequantize_row_ref(e->type, (const uint8_t *)e->data + (size_t)ids[t] * e->row_bytes,
                                 out + (size_t)t * e->n_cols, e->n_cols);
    }
}

static int forward_ref(backend *b, const ifd_batch *bt, float *logits) {
    cpu_backend *cb = (cpu_backend *)b;
    const model *m = b->m;
    const model_hparams *hp = &m->hp;
    const int32_t T = bt->n_tokens, dim = (int32_t)hp->dim;
    const int32_t q_dim = (int32_t)(hp->n_heads * hp->head_dim);
    const int32_t kv_dim = (int32_t)(hp->n_kv_heads * hp->head_dim);
    const int32_t ffn = (int32_t)hp->ffn_dim, hd = (int32_t)hp->head_dim;
    const rope_params rp = {.head_dim = hd,
                            .n_rot = (int32_t)hp->n_rot,
                            .layout = hp->rope_layout,
                            .base = hp->rope_base,
                            .freq_scale = hp->rope_freq_scale,
                            .freq_div = m->rope_freqs};

    embed(m, bt->token_ids, T, cb->x);
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const layer_weights *w = &m->layers[l];
        float *K = kv_k(cb, l), *V = kv_v(cb, l);
        for (int32_t t = 0; t < T; t++)
            op_rmsnorm_ref(cb->xb + (size_t)t * dim, cb->x + (size_t)t * dim, w->attn_norm, dim,
                           hp->rms_eps);
        op_matmul_ref(cb->q, cb->xb, &w->wq, T);
        op_matmul_ref(cb->k, cb->xb, &w->wk, T);
        op_matmul_ref(cb->v, cb->xb, &w->wv, T);
        for (int32_t t = 0; t < T; t++) {
            float *qt = cb->q + (size_t)t * q_dim, *kt = cb->k + (size_t)t * kv_dim,
                  *vt = cb->v + (size_t)t * kv_dim;
            if (w->bq) {
                for (int32_t i = 0; i < q_dim; i++) qt[i] += w->bq[i];
                for (int32_t i = 0; i < kv_dim; i++) kt[i] += w->bk[i];
                for (int32_t i = 0; i < kv_dim; i++) vt[i] += w->bv[i];
            }
            if (w->q_norm) {
                for (uint32_t h = 0; h < hp->n_heads; h++)
                    op_rmsnorm_ref(qt + h * hd, qt + h * hd, w->q_norm, hd, hp->rms_eps);
                for (uint32_t h = 0; h < hp->n_kv_heads; h++)
                    op_rmsnorm_ref(kt + h * hd, kt + h * hd, w->k_norm, hd, hp->rms_eps);
            }
            op_rope_ref(qt, (int32_t)hp->n_heads, bt->positions[t], &rp);
            op_rope_ref(kt, (int32_t)hp->n_kv_heads, bt->positions[t], &rp);
            const size_t slot = (size_t)bt->slot_mapping[t];
            memcpy(K + slot * kv_dim, kt, (size_t)kv_dim * sizeof(float));
            memcpy(V + slot * kv_dim, vt, (size_t)kv_dim * sizeof(float));
        }
        const kv_view kv = {.k = K,
                            .v = V,
                            .n_kv_heads = (int32_t)hp->n_kv_heads,
                            .head_dim = hd,
                            .block_size = b->cfg.block_size};
        for (int32_t s = 0; s < bt->n_seqs; s++) {
            const int32_t t0 = bt->seq_start[s], n_q = bt->seq_start[s + 1] - t0;
            op_attention_ref(cb->att + (size_t)t0 * q_dim, cb->q + (size_t)t0 * q_dim, n_q,
                             bt->positions + t0, (int32_t)hp->n_heads, &kv,
                             bt->block_table + (size_t)s * bt->max_blocks_per_seq,
                             cb->att_scratch);
        }
        op_matmul_ref(cb->xb, cb->att, &w->wo, T);
        for (size_t i = 0; i < (size_t)T * dim; i++) cb->x[i] += cb->xb[i];

        for (int32_t t = 0; t < T; t++)
            op_rmsnorm_ref(cb->xb + (size_t)t * dim, cb->x + (size_t)t * dim, w->ffn_norm, dim,
                           hp->rms_eps);
        op_matmul_ref(cb->gate, cb->xb, &w->w_gate, T);
        op_matmul_ref(cb->up, cb->xb, &w->w_up, T);
        op_swiglu_ref(cb->hb, cb->gate, cb->up, T * ffn);
        op_matmul_ref(cb->xb, cb->hb, &w->w_down, T);
        for (size_t i = 0; i < (size_t)T * dim; i++) cb->x[i] += cb->xb[i];
    }
    for (int32_t i = 0; i < bt->n_logits; i++) {
        const int32_t t = bt->logits_index[i];
        IFD_ASSERT(t >= 0 && t < T);
        op_rmsnorm_ref(cb->xb + (size_t)i * dim, cb->x + (size_t)t * dim, m->output_norm, dim,
                       hp->rms_eps);
    }
    op_matmul_ref(logits, cb->xb, &m->output, bt->n_logits);
    return IFD_OK;
}

/* ---- fast path -------------------------------------------------------------------------- */

/* Per-token attention prologue: q/k/v bias, qwen3 q/k norm, RoPE, K/V store. */
typedef struct qkv_job {
    cpu_backend *cb;
    const layer_weights *w;
    const ifd_batch *bt;
    const rope_params *rp;
    float *K, *V;
} qkv_job;

static void qkv_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const qkv_job *j = p;
    cpu_backend *cb = j->cb;
    const model_hparams *hp = &cb->base.m->hp;
    const layer_weights *w = j->w;
    const int32_t hd = (int32_t)hp->head_dim, q_dim = (int32_t)(hp->n_heads * hd);
    const int32_t kv_dim = (int32_t)(hp->n_kv_heads * hd), half = (int32_t)hp->n_rot / 2;
    const int32_t T = j->bt->n_tokens;
    const int32_t t0 = (int32_t)((int64_t)T * task / n_tasks);
    const int32_t t1 = (int32_t)((int64_t)T * (task + 1) / n_tasks);
    for (int32_t t = t0; t < t1; t++) {
        float *qt = cb->q + (size_t)t * q_dim, *kt = cb->k + (size_t)t * kv_dim,
              *vt = cb->v + (size_t)t * kv_dim;
        if (w->bq) {
            for (int32_t i = 0; i < q_dim; i++) qt[i] += w->bq[i];
            for (int32_t i = 0; i < kv_dim; i++) kt[i] += w->bk[i];
            for (int32_t i = 0; i < kv_dim; i++) vt[i] += w->bv[i];
        }
        if (w->q_norm) {
            for (uint32_t h = 0; h < hp->n_heads; h++)
                op_rmsnorm_ref(qt + h * hd, qt + h * hd, w->q_norm, hd, hp->rms_eps);
            for (uint32_t h = 0; h < hp->n_kv_heads; h++)
                op_rmsnorm_ref(kt + h * hd, kt + h * hd, w->k_norm, hd, hp->rms_eps);
        }
        const float *cs = cb->rope_cs + (size_t)t * half * 2;
        op_rope_apply(qt, (int32_t)hp->n_heads, cs, j->rp);
        op_rope_apply(kt, (int32_t)hp->n_kv_heads, cs, j->rp);
        const size_t slot = (size_t)j->bt->slot_mapping[t];
        memcpy(j->K + slot * kv_dim, kt, (size_t)kv_dim * sizeof(float));
        memcpy(j->V + slot * kv_dim, vt, (size_t)kv_dim * sizeof(float));
    }
}

/* y = W x for several matrices sharing x: one parallel loop when their types match. */
static void matmul_group(ops_ctx *ops, int n, float *const *outs, const wmat *const *ws,
                         const float *x, int32_t T) {
    bool same = true;
    for (int i = 1; i < n; i++) same = same && ws[i]->type == ws[0]->type;
    if (same) {
        op_matmul_multi(ops, n, outs, ws, x, T);
        return;
    }
    for (int i = 0; i < n; i++) op_matmul(ops, outs[i], x, ws[i], T);
}

static void add_inplace(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static int forward_fast(backend *b, const ifd_batch *bt, float *logits) {
    cpu_backend *cb = (cpu_backend *)b;
    ops_ctx *ops = cb->ops;
    const model *m = b->m;
    const model_hparams *hp = &m->hp;
    const int32_t T = bt->n_tokens, dim = (int32_t)hp->dim;
    const int32_t ffn = (int32_t)hp->ffn_dim, hd = (int32_t)hp->head_dim;
    const rope_params rp = {.head_dim = hd,
                            .n_rot = (int32_t)hp->n_rot,
                            .layout = hp->rope_layout,
                            .base = hp->rope_base,
                            .freq_scale = hp->rope_freq_scale,
                            .freq_div = m->rope_freqs};
    IFD_ASSERT(bt->seq_start[0] == 0 && bt->seq_start[bt->n_seqs] == T);
    op_rope_table(cb->rope_cs, bt->positions, T, &rp);
    embed(m, bt->token_ids, T, cb->x);
    /* the prologue is ~n_heads * head_dim flops per token: threads pay from ~16 tokens */
    const int32_t qkv_tasks = T >= 16 ? ops_ctx_n_threads(ops) : 1;
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const layer_weights *w = &m->layers[l];
        float *K = kv_k(cb, l), *V = kv_v(cb, l);
        op_rmsnorm_rows(ops, cb->xb, cb->x, w->attn_norm, T, dim, hp->rms_eps);
        float *qkv_out[3] = {cb->q, cb->k, cb->v};
        const wmat *qkv_w[3] = {&w->wq, &w->wk, &w->wv};
        matmul_group(ops, 3, qkv_out, qkv_w, cb->xb, T);
        qkv_job qj = {.cb = cb, .w = w, .bt = bt, .rp = &rp, .K = K, .V = V};
        tp_run(ops_ctx_pool(ops), qkv_task, &qj, qkv_tasks);
        const kv_view kv = {.k = K,
                            .v = V,
                            .n_kv_heads = (int32_t)hp->n_kv_heads,
                            .head_dim = hd,
                            .block_size = b->cfg.block_size};
        op_attention(ops, cb->att, cb->q, bt->n_seqs, bt->seq_start, bt->positions,
                     (int32_t)hp->n_heads, &kv, bt->block_table, bt->max_blocks_per_seq);
        op_matmul(ops, cb->xb, cb->att, &w->wo, T);
        add_inplace(cb->x, cb->xb, (size_t)T * dim);

        op_rmsnorm_rows(ops, cb->xb, cb->x, w->ffn_norm, T, dim, hp->rms_eps);
        float *gu_out[2] = {cb->gate, cb->up};
        const wmat *gu_w[2] = {&w->w_gate, &w->w_up};
        matmul_group(ops, 2, gu_out, gu_w, cb->xb, T);
        op_swiglu(ops, cb->hb, cb->gate, cb->up, (int64_t)T * ffn);
        op_matmul(ops, cb->xb, cb->hb, &w->w_down, T);
        add_inplace(cb->x, cb->xb, (size_t)T * dim);
    }
    if (bt->n_logits == 0) return IFD_OK;
    for (int32_t i = 0; i < bt->n_logits; i++) {
        const int32_t t = bt->logits_index[i];
        IFD_ASSERT(t >= 0 && t < T);
        op_rmsnorm_rows(ops, cb->xb + (size_t)i * dim, cb->x + (size_t)t * dim, m->output_norm,
                        1, dim, hp->rms_eps);
    }
    op_matmul(ops, logits, cb->xb, &m->output, bt->n_logits);
    return IFD_OK;
}

static int cpu_forward(backend *b, const ifd_batch *bt, float *logits) {
    cpu_backend *cb = (cpu_backend *)b;
    const int32_t T = bt->n_tokens;
    IFD_ASSERT(T > 0 && T <= b->cfg.max_batch_tokens);
    IFD_ASSERT(bt->n_seqs > 0 && bt->n_seqs <= b->cfg.max_batch_seqs);
    IFD_ASSERT(bt->n_logits >= 0 && bt->n_logits <= b->cfg.max_logits);
    for (int32_t t = 0; t < T; t++) {
        IFD_ASSERT(bt->positions[t] >= 0 && bt->positions[t] < b->cfg.max_seq_len);
        IFD_ASSERT(bt->slot_mapping[t] >= 0 &&
                   bt->slot_mapping[t] < b->cfg.n_blocks * b->cfg.block_size);
    }
    return cb->ops ? forward_fast(b, bt, logits) : forward_ref(b, bt, logits);
}

static void cpu_copy_blocks(backend *b, const int32_t *src, const int32_t *dst, int32_t n) {
    cpu_backend *cb = (cpu_backend *)b;
    const model_hparams *hp = &b->m->hp;
    const size_t block_floats = (size_t)b->cfg.block_size * hp->n_kv_heads * hp->head_dim;
    for (uint32_t l = 0; l < hp->n_layers; l++)
        for (int32_t i = 0; i < n; i++) {
            float *K = kv_k(cb, l), *V = kv_v(cb, l);
            memcpy(K + (size_t)dst[i] * block_floats, K + (size_t)src[i] * block_floats,
                   block_floats * sizeof(float));
            memcpy(V + (size_t)dst[i] * block_floats, V + (size_t)src[i] * block_floats,
                   block_floats * sizeof(float));
        }
}

static void cpu_destroy(backend *b) {
    cpu_backend *cb = (cpu_backend *)b;
    if (!cb) return;
    free(cb->kv);
    free(cb->x);
    free(cb->xb);
    free(cb->q);
    free(cb->k);
    free(cb->v);
    free(cb->att);
    free(cb->gate);
    free(cb->up);
    free(cb->hb);
    free(cb->att_scratch);
    free(cb->rope_cs);
    ops_ctx_destroy(cb->ops);
    free(cb);
}

static const backend_ops CPU_OPS = {
    .name = "cpu",
    .forward = cpu_forward,
    .copy_blocks = cpu_copy_blocks,
    .destroy = cpu_destroy,
};

static float *alloc_floats(size_t n, size_t m, bool *ok) {
    size_t total;
    if (!ifd_mul_ok(n, m, &total) || !ifd_mul_ok(total, sizeof(float), &total)) {
        *ok = false;
        return NULL;
    }
    float *p = calloc(1, total ? total : 1);
    if (!p) *ok = false;
    return p;
}

int backend_cpu_create(backend **out, const model *m, const backend_config *cfg, char *err,
                       size_t err_bytes) {
    *out = NULL;
    if (cfg->block_size < 1 || cfg->n_blocks < 1 || cfg->max_batch_tokens < 1 ||
        cfg->max_batch_seqs < 1 || cfg->max_logits < 1 || cfg->max_seq_len < 1)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "cpu backend: invalid configuration");
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "cpu backend: out of memory");
    cb->base.ops = &CPU_OPS;
    cb->base.m = m;
    cb->base.cfg = *cfg;
    const model_hparams *hp = &m->hp;
    const size_t T = (size_t)cfg->max_batch_tokens;
    const size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    const size_t q_dim = (size_t)hp->n_heads * hp->head_dim;
    bool ok = true;
    cb->layer_kv_floats = (size_t)cfg->n_blocks * cfg->block_size * kv_dim;
    cb->kv = alloc_floats(cb->layer_kv_floats, 2 * (size_t)hp->n_layers, &ok);
    const size_t rows = T > (size_t)cfg->max_logits ? T : (size_t)cfg->max_logits;
    cb->x = alloc_floats(T, hp->dim, &ok);
    cb->xb = alloc_floats(rows, hp->dim > q_dim ? hp->dim : q_dim, &ok);
    cb->q = alloc_floats(T, q_dim, &ok);
    cb->k = alloc_floats(T, kv_dim, &ok);
    cb->v = alloc_floats(T, kv_dim, &ok);
    cb->att = alloc_floats(T, q_dim, &ok);
    cb->gate = alloc_floats(T, hp->ffn_dim, &ok);
    cb->up = alloc_floats(T, hp->ffn_dim, &ok);
    cb->hb = alloc_floats(T, hp->ffn_dim, &ok);
    cb->att_scratch = alloc_floats((size_t)cfg->max_seq_len, 1, &ok);
    if (ok && !cfg->reference) {
        cb->rope_cs = alloc_floats(T, (size_t)hp->n_rot / 2 * 2 + 1, &ok);
        cb->ops = ops_ctx_create(cfg->n_threads, -1);
        const size_t max_cols = IFD_MAX(IFD_MAX((size_t)hp->dim, (size_t)hp->ffn_dim), q_dim);
        if (!cb->ops ||
            ops_ctx_reserve(cb->ops, (int32_t)rows, (int64_t)max_cols, cfg->max_seq_len,
                            (int32_t)(hp->n_heads / hp->n_kv_heads)) != IFD_OK)
            ok = false;
    }
    if (!ok) {
        cpu_destroy(&cb->base);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM,
                        "cpu backend: cannot allocate the KV pool and scratch buffers");
    }
    *out = &cb->base;
    return IFD_OK;
}
