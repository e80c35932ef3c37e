/* cpu_fwd_ref.c — the reference op table for forward.c: every op a plain loop over the
 * reference ops (ops_ref.c, quant.c), one token row at a time, single-threaded. The
 * fast table (cpu_fwd_fast.c) and any other backend's ops are tested against it.
 * Not thread-safe (the backend's one thread). */
#include <string.h>

#include "../../util/common.h"
#include "cpu_backend.h"

static int ref_rmsnorm(void *ctx, float *out, const float *x, const int32_t *rows, int32_t n_rows,
                       const float *w, int32_t n, float eps) {
    (void)ctx;
    for (int32_t i = 0; i < n_rows; i++)
        op_rmsnorm_ref(out + (size_t)i * n, x + (size_t)(rows ? rows[i] : i) * n, w, n, eps);
    return IFD_OK;
}

static int ref_matmul(void *ctx, int n, float *const *outs, const wmat *const *ws, const float *x,
                      int32_t n_tokens) {
    (void)ctx;
    for (int i = 0; i < n; i++) op_matmul_ref(outs[i], x, ws[i], n_tokens);
    return IFD_OK;
}

static int ref_add_bias(void *ctx, float *x, const float *b, int32_t n_rows, int32_t n) {
    (void)ctx;
    for (int32_t r = 0; r < n_rows; r++)
        for (int32_t i = 0; i < n; i++) x[(size_t)r * n + i] += b[i];
    return IFD_OK;
}

static int ref_head_norm(void *ctx, float *x, const float *w, int32_t n_rows, int32_t n, float eps) {
    (void)ctx;
    for (int32_t r = 0; r < n_rows; r++) op_rmsnorm_ref(x + (size_t)r * n, x + (size_t)r * n, w, n, eps);
    return IFD_OK;
}

static int ref_rope_store(void *ctx, uint32_t layer, float *q, float *k, const float *v,
                          const ifd_batch *bt, const rope_params *rp) {
    cpu_backend *cb = ctx;
    const model_hparams *hp = &cb->base.m->hp;
    const size_t q_dim = (size_t)hp->n_heads * hp->head_dim;
    const size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    for (int32_t t = 0; t < bt->n_tokens; t++) {
        float *kt = k + (size_t)t * kv_dim;
        op_rope_ref(q + (size_t)t * q_dim, (int32_t)hp->n_heads, bt->positions[t], rp);
        op_rope_ref(kt, (int32_t)hp->n_kv_heads, bt->positions[t], rp);
        if (bt->slot_mapping[t] == BACKEND_SLOT_NONE) continue; /* a padding row */
        cpu_kv_store(cb, layer, bt->slot_mapping[t], kt, v + (size_t)t * kv_dim);
    }
    return IFD_OK;
}

static int ref_attention(void *ctx, uint32_t layer, float *out, const float *q, const ifd_batch *bt) {
    cpu_backend *cb = ctx;
    const model_hparams *hp = &cb->base.m->hp;
    const size_t q_dim = (size_t)hp->n_heads * hp->head_dim;
    const kv_view kv = cpu_kv_view(cb, layer);
    for (int32_t s = 0; s < bt->n_seqs; s++) {
        const int32_t t0 = bt->seq_start[s], n_q = bt->seq_start[s + 1] - t0;
        op_attention_ref(out + (size_t)t0 * q_dim, q + (size_t)t0 * q_dim, n_q, bt->positions + t0,
                         (int32_t)hp->n_heads, &kv,
                         bt->block_table + (size_t)s * bt->max_blocks_per_seq, cb->att_scratch);
    }
    return IFD_OK;
}

static int ref_swiglu(void *ctx, float *out, const float *gate, const float *up, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i += INT32_MAX) /* op_swiglu_ref counts in int32 */
        op_swiglu_ref(out + i, gate + i, up + i, (int32_t)IFD_MIN(n - i, (int64_t)INT32_MAX));
    return IFD_OK;
}

const fwd_ops cpu_fwd_ref = {
    .name = "cpu-ref",
    .embed = cpu_embed,
    .rmsnorm = ref_rmsnorm,
    .matmul = ref_matmul,
    .add_bias = ref_add_bias,
    .head_norm = ref_head_norm,
    .rope_store = ref_rope_store,
    .attention = ref_attention,
    .add = cpu_add,
    .swiglu = ref_swiglu,
};
