/* cpu_fwd_fast.c — the fast op table for forward.c: the SIMD kernels of ops_fast.c
 * (picked at run time) on the backend's worker pool, plus the per-token attention
 * prologue pieces (q/k/v bias, per-head q/k norm, RoPE through a per-step table, the
 * K/V store) split over tokens. Each op computes every row exactly as it would alone
 * (batch invariant); the per-token pieces are the reference arithmetic, so they are
 * bit-identical to cpu_fwd_ref. Not thread-safe (the backend's one thread drives it). */
#include <string.h>

#include "../../util/common.h"
#include "../../util/threadpool.h"
#include "cpu_backend.h"

/* The per-token pieces are ~n_heads * head_dim flops a token: threads pay from ~16
 * tokens. */
#define TOKENS_PER_THREAD_MIN 16

static int32_t token_tasks(cpu_backend *cb, int32_t n_tokens) {
    return n_tokens >= TOKENS_PER_THREAD_MIN ? ops_ctx_n_threads(cb->ops) : 1;
}

static int fast_begin(void *ctx, const ifd_batch *bt, const rope_params *rp) {
    cpu_backend *cb = ctx;
    op_rope_table(cb->rope_cs, bt->positions, bt->n_tokens, rp);
    return IFD_OK;
}

static int fast_rmsnorm(void *ctx, float *out, const float *x, const int32_t *rows,
                        int32_t n_rows, const float *w, int32_t n, float eps) {
    cpu_backend *cb = ctx;
    op_rmsnorm_gather(cb->ops, out, x, rows, n_rows, w, n, eps);
    return IFD_OK;
}

static int fast_matmul(void *ctx, int n, float *const *outs, const wmat *const *ws,
                       const float *x, int32_t n_tokens) {
    cpu_backend *cb = ctx;
    op_matmul_multi(cb->ops, n, outs, ws, x, n_tokens);
    return IFD_OK;
}

/* Rows [r0, r1) of a job split evenly over tasks. */
#define TASK_RANGE(n, task, n_tasks, r0, r1)                       \
    const int32_t r0 = (int32_t)((int64_t)(n) * (task) / (n_tasks)); \
    const int32_t r1 = (int32_t)((int64_t)(n) * ((task) + 1) / (n_tasks))

typedef struct rows_job {
    float *x;
    const float *w;
    int32_t n_rows, n;
    float eps;
} rows_job;

static void bias_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const rows_job *j = p;
    TASK_RANGE(j->n_rows, task, n_tasks, r0, r1);
    for (int32_t r = r0; r < r1; r++)
        for (int32_t i = 0; i < j->n; i++) j->x[(size_t)r * j->n + i] += j->w[i];
}

static int fast_add_bias(void *ctx, float *x, const float *b, int32_t n_rows, int32_t n) {
    cpu_backend *cb = ctx;
    rows_job j = {.x = x, .w = b, .n_rows = n_rows, .n = n};
    tp_run(ops_ctx_pool(cb->ops), bias_task, &j, token_tasks(cb, n_rows));
    return IFD_OK;
}

/* The reference rmsnorm (as cpu_fwd_ref) per head row. */
static void head_norm_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const rows_job *j = p;
    TASK_RANGE(j->n_rows, task, n_tasks, r0, r1);
    for (int32_t r = r0; r < r1; r++) {
        float *xr = j->x + (size_t)r * j->n;
        op_rmsnorm_ref(xr, xr, j->w, j->n, j->eps);
    }
}

static int fast_head_norm(void *ctx, float *x, const float *w, int32_t n_rows, int32_t n,
                          float eps) {
    cpu_backend *cb = ctx;
    rows_job j = {.x = x, .w = w, .n_rows = n_rows, .n = n, .eps = eps};
    /* below ~16k elements a task is cheaper than waking the pool */
    const int32_t tasks = (int64_t)n_rows * n < 16384 ? 1 : IFD_MIN(n_rows, ops_ctx_n_threads(cb->ops));
    tp_run(ops_ctx_pool(cb->ops), head_norm_task, &j, tasks);
    return IFD_OK;
}

typedef struct rope_job {
    cpu_backend *cb;
    uint32_t layer;
    float *q, *k;
    const float *v;
    const ifd_batch *bt;
    const rope_params *rp;
} rope_job;

static void rope_store_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const rope_job *j = p;
    const model_hparams *hp = &j->cb->base.m->hp;
    const size_t q_dim = (size_t)hp->n_heads * hp->head_dim;
    const size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    const size_t half = (size_t)hp->n_rot / 2;
    TASK_RANGE(j->bt->n_tokens, task, n_tasks, t0, t1);
    for (int32_t t = t0; t < t1; t++) {
        float *kt = j->k + (size_t)t * kv_dim;
        const float *cs = j->cb->rope_cs + (size_t)t * half * 2;
        op_rope_apply(j->q + (size_t)t * q_dim, (int32_t)hp->n_heads, cs, j->rp);
        op_rope_apply(kt, (int32_t)hp->n_kv_heads, cs, j->rp);
        if (j->bt->slot_mapping[t] == BACKEND_SLOT_NONE) continue; /* a padding row */
        /* the reference's conversion (kv_dtype.c): the stored bytes equal cpu_fwd_ref's */
        cpu_kv_store(j->cb, j->layer, j->bt->slot_mapping[t], kt, j->v + (size_t)t * kv_dim);
    }
}

static int fast_rope_store(void *ctx, uint32_t layer, float *q, float *k, const float *v,
                           const ifd_batch *bt, const rope_params *rp) {
    cpu_backend *cb = ctx;
    rope_job j = {.cb = cb, .layer = layer, .q = q, .k = k, .v = v, .bt = bt, .rp = rp};
    tp_run(ops_ctx_pool(cb->ops), rope_store_task, &j, token_tasks(cb, bt->n_tokens));
    return IFD_OK;
}

static int fast_attention(void *ctx, uint32_t layer, float *out, const float *q,
                          const ifd_batch *bt) {
    cpu_backend *cb = ctx;
    const kv_view kv = cpu_kv_view(cb, layer);
    op_attention(cb->ops, out, q, bt->n_seqs, bt->seq_start, bt->positions,
                 (int32_t)cb->base.m->hp.n_heads, &kv, bt->block_table, bt->max_blocks_per_seq);
    return IFD_OK;
}

static int fast_swiglu(void *ctx, float *out, const float *gate, const float *up, int64_t n) {
    cpu_backend *cb = ctx;
    op_swiglu(cb->ops, out, gate, up, n);
    return IFD_OK;
}

const fwd_ops cpu_fwd_fast = {
    .name = "cpu-fast",
    .begin = fast_begin,
    .embed = cpu_embed,
    .rmsnorm = fast_rmsnorm,
    .matmul = fast_matmul,
    .add_bias = fast_add_bias,
    .head_norm = fast_head_norm,
    .rope_store = fast_rope_store,
    .attention = fast_attention,
    .add = cpu_add,
    .swiglu = fast_swiglu,
};
