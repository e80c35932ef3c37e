/* cpu_backend.c — the CPU backend: owns the paged KV pool and the activation and
 * scratch buffers, and runs forward.c's one walk of the architecture over one of two op
 * tables: the plain C reference ops (cfg.reference, cpu_fwd_ref.c: the ground truth
 * tests compare against) or the fast ops (cpu_fwd_fast.c: SIMD kernels picked at run
 * time, threads from cfg.n_threads).
 *
 * Batch invariance: every token's activations are computed row by row with the same
 * reduction order whatever else is in the batch, so a sequence's logits do not depend
 * on its batch-mates or on how its prompt was chunked.
 *
 * Driven by one thread (the engine's). forward() allocates nothing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../model/quant.h"
#include "../../util/common.h"
#include "../kv_dtype.h"
#include "cpu_backend.h"

int64_t backend_cpu_mem_available(void) {
    FILE *fp = fopen("/proc/meminfo", "r");
    if (!fp) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(fp);
    return (int64_t)kb * 1024;
}

uint8_t *cpu_kv_k(cpu_backend *cb, uint32_t layer) {
    return cb->kv + (size_t)layer * 2 * cb->layer_kv_bytes;
}
uint8_t *cpu_kv_v(cpu_backend *cb, uint32_t layer) {
    return cpu_kv_k(cb, layer) + cb->layer_kv_bytes;
}
kv_view cpu_kv_view(cpu_backend *cb, uint32_t layer) {
    const model_hparams *hp = &cb->base.m->hp;
    return (kv_view){.k = cpu_kv_k(cb, layer),
                     .v = cpu_kv_v(cb, layer),
                     .n_kv_heads = (int32_t)hp->n_kv_heads,
                     .head_dim = (int32_t)hp->head_dim,
                     .block_size = cb->base.cfg.block_size,
                     .dtype = cb->kv_dtype,
                     .blocked = cb->kv_dtype != BACKEND_KV_F32};
}
size_t cpu_kv_block_bytes(const cpu_backend *cb) {
    const model_hparams *hp = &cb->base.m->hp;
    return (size_t)cb->base.cfg.block_size * hp->n_kv_heads *
           backend_kv_row_bytes(cb->kv_dtype, (int32_t)hp->head_dim);
}

void cpu_kv_store(cpu_backend *cb, uint32_t layer, int32_t slot, const float *k, const float *v) {
    const kv_view kv = cpu_kv_view(cb, layer);
    const size_t rb = kv_view_row_bytes(&kv);
    const size_t row0 = kv_row_index(&kv, slot, 0);
    /* head h's row is row0 + h (slot order) or row0 + h * block_size (blocked) */
    const size_t head_stride = (kv.blocked ? (size_t)kv.block_size : 1) * rb;
    kv_store_heads(kv.dtype, cpu_kv_k(cb, layer) + row0 * rb, head_stride, k, kv.n_kv_heads,
                   kv.head_dim);
    kv_store_heads(kv.dtype, cpu_kv_v(cb, layer) + row0 * rb, head_stride, v, kv.n_kv_heads,
                   kv.head_dim);
}

int cpu_embed(void *ctx, float *out, const wmat *e, const int32_t *ids, int32_t n) {
    (void)ctx;
    for (int32_t t = 0; t < n; t++) {
        IFD_ASSERT(ids[t] >= 0 && ids[t] < e->n_rows);
        quant_dequantize_row_ref(e->type, (const uint8_t *)e->data + (size_t)ids[t] * e->row_bytes,
                                 out + (size_t)t * e->n_cols, e->n_cols);
    }
    return IFD_OK;
}

int cpu_add(void *ctx, float *x, const float *y, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
    return IFD_OK;
}

static int cpu_forward(backend *b, const ifd_batch *bt, float *logits) {
    cpu_backend *cb = (cpu_backend *)b;
    const int rc = fwd_run(cb->fwd, cb, b, &cb->buf, bt, logits);
    if (rc != IFD_OK || !cb->buf.output) return rc;
    /* a restricted lm head wrote rows of N columns: spread them to n_vocab, last first
     * (row i's destination starts at or after every source row j <= i) */
    const size_t N = (size_t)cb->out_view.n_rows, V = (size_t)b->m->hp.n_vocab;
    for (int32_t i = bt->n_logits - 1; i >= 0; i--) {
        float *row = logits + (size_t)i * V;
        memmove(row, logits + (size_t)i * N, N * sizeof(float));
        for (size_t c = N; c < V; c++) row[c] = -INFINITY;
    }
    return IFD_OK;
}

static int cpu_copy_blocks(backend *b, const int32_t *src, const int32_t *dst, int32_t n) {
    cpu_backend *cb = (cpu_backend *)b;
    const model_hparams *hp = &b->m->hp;
    const size_t bb = cpu_kv_block_bytes(cb); /* a block's rows are contiguous */
    for (int32_t i = 0; i < n; i++) /* block ids come from the engine's KV manager */
        IFD_ASSERT(src[i] >= 0 && src[i] < b->cfg.n_blocks && dst[i] >= 0 &&
                   dst[i] < b->cfg.n_blocks);
    for (uint32_t l = 0; l < hp->n_layers; l++)
        for (int32_t i = 0; i < n; i++) {
            uint8_t *K = cpu_kv_k(cb, l), *V = cpu_kv_v(cb, l);
            memcpy(K + (size_t)dst[i] * bb, K + (size_t)src[i] * bb, bb);
            memcpy(V + (size_t)dst[i] * bb, V + (size_t)src[i] * bb, bb);
        }
    return IFD_OK;
}

static int cpu_kv_rw(backend *b, const int32_t *blocks, int32_t n, void *buf, int write) {
    cpu_backend *cb = (cpu_backend *)b;
    const uint32_t n_layers = b->m->hp.n_layers;
    const size_t bb = cpu_kv_block_bytes(cb);
    for (int32_t i = 0; i < n; i++)
        if (blocks[i] < 0 || blocks[i] >= b->cfg.n_blocks) return IFD_ERR_INVALID;
    uint8_t *p = buf;
    for (int32_t i = 0; i < n; i++)
        for (uint32_t l = 0; l < n_layers; l++) {
            uint8_t *K = cpu_kv_k(cb, l) + (size_t)blocks[i] * bb, *V = cpu_kv_v(cb, l) + (size_t)blocks[i] * bb;
            if (write) {
                memcpy(K, p, bb);
                memcpy(V, p + bb, bb);
            } else {
                memcpy(p, K, bb);
                memcpy(p + bb, V, bb);
            }
            p += 2 * bb;
        }
    return IFD_OK;
}

static int cpu_kv_region(backend *b, void **base, size_t *bytes, size_t *seg_off, size_t *stride) {
    cpu_backend *cb = (cpu_backend *)b;
    const uint32_t n_layers = b->m->hp.n_layers;
    *base = cb->kv;
    *bytes = (size_t)n_layers * 2 * cb->layer_kv_bytes;
    for (uint32_t l = 0; l < n_layers; l++) {
        seg_off[2 * l] = (size_t)(cpu_kv_k(cb, l) - cb->kv);
        seg_off[2 * l + 1] = (size_t)(cpu_kv_v(cb, l) - cb->kv);
    }
    *stride = cpu_kv_block_bytes(cb);
    return IFD_OK;
}

static void cpu_destroy(backend *b) {
    cpu_backend *cb = (cpu_backend *)b;
    if (!cb) return;
    free(cb->kv);
    free(cb->buf.x);
    free(cb->buf.xb);
    free(cb->buf.q);
    free(cb->buf.k);
    free(cb->buf.v);
    free(cb->buf.att);
    free(cb->buf.gate);
    free(cb->buf.up);
    free(cb->buf.hb);
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
    .kv_rw = cpu_kv_rw,
    .kv_region = cpu_kv_region,
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
    cb->fwd = cfg->reference ? &cpu_fwd_ref : &cpu_fwd_fast;
    const model_hparams *hp = &m->hp;
    const size_t T = (size_t)cfg->max_batch_tokens;
    const size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    const size_t q_dim = (size_t)hp->n_heads * hp->head_dim;
    bool ok = true;
    cb->kv_dtype = backend_kv_dtype_resolve(BACKEND_CPU, cfg->kv_dtype);
    if (cb->kv_dtype < 0 || cb->kv_dtype >= BACKEND_KV_N_DTYPES ||
        (int64_t)cfg->n_blocks * cfg->block_size * (int64_t)hp->n_kv_heads > INT32_MAX) {
        cpu_destroy(&cb->base);
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "cpu backend: invalid KV cache dtype or more than 2^31 KV rows a layer");
    }
    cb->base.cfg.kv_dtype = cb->kv_dtype;
    /* the attention kernels index rows (slot x KV head) in int32 (checked above) */
    cb->layer_kv_bytes = (size_t)cfg->n_blocks * cpu_kv_block_bytes(cb);
    {
        size_t total;
        if (!ifd_mul_ok(cb->layer_kv_bytes, 2 * (size_t)hp->n_layers, &total) ||
            !(cb->kv = calloc(1, total ? total : 1)))
            ok = false;
    }
    const size_t rows = T > (size_t)cfg->max_logits ? T : (size_t)cfg->max_logits;
    fwd_bufs *buf = &cb->buf;
    buf->x = alloc_floats(T, hp->dim, &ok);
    /* the logits rows' final norm lands here too: max_logits may reach max_batch_tokens
     * (prompt logprobs, speculative verification) or exceed it (repeated rows) */
    buf->xb = alloc_floats(rows, hp->dim > q_dim ? hp->dim : q_dim, &ok);
    buf->q = alloc_floats(T, q_dim, &ok);
    buf->k = alloc_floats(T, kv_dim, &ok);
    buf->v = alloc_floats(T, kv_dim, &ok);
    buf->att = alloc_floats(T, q_dim, &ok);
    buf->gate = alloc_floats(T, hp->ffn_dim, &ok);
    buf->up = alloc_floats(T, hp->ffn_dim, &ok);
    buf->hb = alloc_floats(T, hp->ffn_dim, &ok);
    cb->att_scratch = alloc_floats((size_t)cfg->max_seq_len, 1, &ok);
    if (cfg->logits_rows > 0 && (int64_t)cfg->logits_rows < (int64_t)hp->n_vocab) {
        cb->out_view = m->output; /* a view of the first rows (rows are contiguous) */
        cb->out_view.n_rows = cfg->logits_rows;
        buf->output = &cb->out_view;
    }
    if (ok && !cfg->reference) {
        cb->rope_cs = alloc_floats(T, (size_t)hp->n_rot / 2 * 2 + 1, &ok);
        const cpu_backend *owner = cfg->share_threads && cfg->share_threads->ops == &CPU_OPS
                                       ? (const cpu_backend *)cfg->share_threads
                                       : NULL;
        cb->ops = owner && owner->ops ? ops_ctx_create_shared(owner->ops, -1)
                                      : ops_ctx_create(cfg->n_threads, -1);
        const size_t max_cols = IFD_MAX(IFD_MAX((size_t)hp->dim, (size_t)hp->ffn_dim), q_dim);
        if (!cb->ops ||
            ops_ctx_reserve(cb->ops, (int32_t)rows, (int64_t)max_cols, cfg->max_seq_len,
                            (int32_t)(hp->n_heads / hp->n_kv_heads)) != IFD_OK)
            ok = false;
        /* prepare weights: backend-owned packed copies of the matmul weights where the
         * kernel level has a packed form (the mmapped originals stay for the embedding
         * rows and the reference path; their pages are then no longer read) */
        for (uint32_t l = 0; ok && l < hp->n_layers; l++) {
            const layer_weights *lw = &m->layers[l];
            const wmat *ws[] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_up, &lw->w_down};
            for (size_t i = 0; ok && i < IFD_ARRAY_LEN(ws); i++)
                if (ops_ctx_prepare_weights(cb->ops, ws[i]) != IFD_OK) ok = false;
        }
        if (ok && ops_ctx_prepare_weights(cb->ops, buf->output ? buf->output : &m->output) != IFD_OK) ok = false;
    }
    if (!ok) {
        cpu_destroy(&cb->base);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM,
                        "cpu backend: cannot allocate the KV pool and scratch buffers");
    }
    *out = &cb->base;
    return IFD_OK;
}
