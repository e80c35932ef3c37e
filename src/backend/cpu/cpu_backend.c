/* cpu_backend.c — the CPU backend: owns the paged KV pool and scratch buffers and runs
 * the transformer forward over a flat batch through an op table (reference ops now;
 * SIMD/threaded ops plug into the same table).
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
#include "../backend.h"
#include "ops.h"

typedef struct cpu_backend {
    backend base;
    /* KV pool per layer: [n_blocks * block_size][n_kv_heads][head_dim] for K and V */
    float *kv;
    size_t layer_kv_floats; /* floats of K (== of V) per layer */
    /* scratch, sized for max_batch_tokens */
    float *x, *xb, *q, *k, *v, *att, *gate, *up, *hb, *att_scratch;
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

static int cpu_forward(backend *b, const ifd_batch *bt, float *logits) {
    cpu_backend *cb = (cpu_backend *)b;
    const model *m = b->m;
    const model_hparams *hp = &m->hp;
    const int32_t T = bt->n_tokens, dim = (int32_t)hp->dim;
    const int32_t q_dim = (int32_t)(hp->n_heads * hp->head_dim);
    const int32_t kv_dim = (int32_t)(hp->n_kv_heads * hp->head_dim);
    const int32_t ffn = (int32_t)hp->ffn_dim, hd = (int32_t)hp->head_dim;
    IFD_ASSERT(T > 0 && T <= b->cfg.max_batch_tokens);
    IFD_ASSERT(bt->n_seqs > 0 && bt->n_seqs <= b->cfg.max_batch_seqs);
    IFD_ASSERT(bt->n_logits >= 0 && bt->n_logits <= b->cfg.max_logits);
    for (int32_t t = 0; t < T; t++) {
        IFD_ASSERT(bt->positions[t] >= 0 && bt->positions[t] < b->cfg.max_seq_len);
        IFD_ASSERT(bt->slot_mapping[t] >= 0 &&
                   bt->slot_mapping[t] < b->cfg.n_blocks * b->cfg.block_size);
    }
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
    if (!ok) {
        cpu_destroy(&cb->base);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM,
                        "cpu backend: cannot allocate the KV pool and scratch buffers");
    }
    *out = &cb->base;
    return IFD_OK;
}
