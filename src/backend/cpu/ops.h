/* ops.h — the CPU backend's op set. Each op has a plain C reference (ops_ref.c) that
 * optimized versions are tested against. Output-first arguments (llama2.c style).
 * All ops are pure functions of their arguments: thread-safe. */
#ifndef INFERD_CPU_OPS_H
#define INFERD_CPU_OPS_H
#include "../../util/layer/kernels.h"

#include <stdint.h>

#include "../../model/model.h"
#include "../forward.h" /* rope_params */

/* Paged KV cache of one layer: K and V are each n_slots x n_kv_heads rows of head_dim
 * elements of dtype (backend_kv_row_bytes(dtype, head_dim) bytes a row, see backend.h),
 * slot = block * block_size + offset. The rows' order:
 *   blocked == 0: [slot][n_kv_heads] (the f32 layout every backend had first; a view
 *                 that sets only the first five fields is this, in f32);
 *   blocked == 1: [block][n_kv_heads][block_size]: one block's rows of one head are
 *                 contiguous (the attention of a KV head streams them).
 * kv_row_index gives a row's index in either. */
typedef struct kv_view {
    const void *k;
    const void *v;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t block_size;
    backend_kv_dtype dtype; /* 0: BACKEND_KV_F32 */
    int32_t blocked;
} kv_view;

static inline size_t kv_row_index(const kv_view *kv, int32_t slot, int32_t kvh) {
    if (!kv->blocked) return (size_t)slot * kv->n_kv_heads + kvh;
    const int32_t bs = kv->block_size;
    return ((size_t)(slot / bs) * kv->n_kv_heads + kvh) * bs + slot % bs;
}
static inline size_t kv_view_row_bytes(const kv_view *kv) {
    return backend_kv_row_bytes(kv->dtype, kv->head_dim);
}

/* out[d] = x[d] / sqrt(mean(x^2) + eps) * w[d] */
void op_rmsnorm_ref(float *out, const float *x, const float *w, int32_t n, float eps);
/* out[t][r] = dot(w row r, x[t]) for t < n_tokens (x: [n_tokens][w->n_cols]) */
void op_matmul_ref(float *out, const float *x, const wmat *w, int32_t n_tokens);
/* rotate n_heads heads of x (each head_dim long) in place for position pos */
void op_rope_ref(float *x, int32_t n_heads, int32_t pos, const rope_params *rp);
/* out = silu(gate) * up */
void op_swiglu_ref(float *out, const float *gate, const float *up, int32_t n);
/* Causal attention of the n_q query tokens of one sequence (q: [n_q][n_heads][head_dim],
 * at positions pos[i]) over its KV cache (keys 0..pos[i] through the block table).
 * out: [n_q][n_heads][head_dim]. scratch: >= max position + 1 floats. */
void op_attention_ref(float *out, const float *q, int32_t n_q, const int32_t *pos,
                      int32_t n_heads, const kv_view *kv, const int32_t *block_table,
                      float *scratch);


/* ---- fast ops (ops_fast.c): SIMD kernels picked at run time, threaded ------------------
 * An ops_ctx owns the worker pool, the kernel level and the scratch memory; after
 * ops_ctx_reserve the ops allocate nothing. One thread at a time drives a context.
 * Every op is batch invariant: a token row's result does not depend on how many other
 * rows are in the call, on the thread count or on timing. */
typedef struct ops_ctx ops_ctx;
struct tp;

/* n_threads: 0 = all online CPUs. level: a cpu_level, or -1 for cpu_level_default()
 * (the best the CPU has, capped by INFERD_CPU). Fails (NULL) when the CPU lacks level. */
ops_ctx *ops_ctx_create(int n_threads, int level);
/* The same on another context's worker pool (borrowed: it must outlive this one). */
ops_ctx *ops_ctx_create_shared(const ops_ctx *owner, int level);
void ops_ctx_destroy(ops_ctx *c); /* accepts NULL */
/* Size the scratch for matmuls of up to max_tokens rows of up to max_cols columns and
 * attention over up to max_keys keys with up to max_group query heads per KV head.
 * Grows only; returns IFD_OK or IFD_ERR_NOMEM. */
int ops_ctx_reserve(ops_ctx *c, int32_t max_tokens, int64_t max_cols, int32_t max_keys,
                    int32_t max_group);
/* Prepare w for this context's kernels (backend create): a packed copy (see kern.h,
 * kern_pack) that every later matmul with the same matrix (same data pointer, type and
 * shape) reads instead of w's data, for any number of tokens. No-op (IFD_OK) where the
 * level has no packed form for w. The original must stay valid (other paths read it).
 * IFD_ERR_NOMEM on allocation failure. */
int ops_ctx_prepare_weights(ops_ctx *c, const wmat *w);
/* Free every packed copy (before the originals go away while the context lives on). */
void ops_ctx_drop_weights(ops_ctx *c);
/* Bytes of all packed copies. */
size_t ops_ctx_prepared_bytes(const ops_ctx *c);
int ops_ctx_level(const ops_ctx *c);
int ops_ctx_n_threads(const ops_ctx *c);
struct tp *ops_ctx_pool(ops_ctx *c);

/* out[t][r] = dot(w row r, x[t]) (like op_matmul_ref). */
void op_matmul(ops_ctx *c, float *out, const float *x, const wmat *w, int32_t n_tokens);
/* n matrices of the same type and n_cols applied to the same x (q/k/v, gate/up): the
 * activations are prepared once and all rows share one parallel loop. n <= 4. */
void op_matmul_multi(ops_ctx *c, int n, float *const *outs, const wmat *const *ws,
                     const float *x, int32_t n_tokens);
/* n_rows rows of n: out[i] = rmsnorm(x[i]) * w */
void op_rmsnorm_rows(ops_ctx *c, float *out, const float *x, const float *w, int32_t n_rows,
                     int32_t n, float eps);
/* The same over listed rows: out[i] = rmsnorm(x[rows[i]]) * w for i < n_rows. */
void op_rmsnorm_gather(ops_ctx *c, float *out, const float *x, const int32_t *rows,
                       int32_t n_rows, const float *w, int32_t n, float eps);
/* out = silu(gate) * up over n elements */
void op_swiglu(ops_ctx *c, float *out, const float *gate, const float *up, int64_t n);
/* Attention for a flat batch: sequence s owns query rows [seq_start[s], seq_start[s+1])
 * (positions pos[], keys 0..pos[i]) and block table block_tables + s * max_blocks.
 * q/out: [n_tokens][n_heads][head_dim]. */
void op_attention(ops_ctx *c, float *out, const float *q, int32_t n_seqs,
                  const int32_t *seq_start, const int32_t *pos, int32_t n_heads,
                  const kv_view *kv, const int32_t *block_tables, int32_t max_blocks);
/* RoPE as a table: cs[i][j] = (cos, sin) of pair j at position pos[i] (the reference's
 * angles), for n positions; then op_rope_apply rotates with one row of it. */
void op_rope_table(float *cs, const int32_t *pos, int32_t n, const rope_params *rp);
void op_rope_apply(float *x, int32_t n_heads, const float *cs_row, const rope_params *rp);

#endif
