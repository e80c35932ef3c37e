/* cpu_backend.h — what the CPU backend's pieces share (not a public interface):
 * cpu_backend.c (create/destroy, the KV pool, copy_blocks, dispatch to forward.c) and
 * the two op tables forward.c runs over: cpu_fwd_ref (cpu_fwd_ref.c: the plain C
 * reference ops, the ground truth) and cpu_fwd_fast (cpu_fwd_fast.c: SIMD kernels
 * picked at run time, threaded). An op's ctx is the cpu_backend.
 * Driven by one thread (the engine's). */
#ifndef INFERD_CPU_BACKEND_H
#define INFERD_CPU_BACKEND_H
#include "../../util/layer/kernels.h"

#include "../backend.h"
#include "../forward.h"
#include "ops.h"

typedef struct cpu_backend {
    backend base;
    /* KV pool: per layer K then V, each n_blocks * block_size * n_kv_heads rows of
     * kv_dtype (kv_view: f32 rows [slot][n_kv_heads], other dtypes blocked rows
     * [block][n_kv_heads][block_size]); a block's rows are contiguous either way */
    uint8_t *kv;
    size_t layer_kv_bytes;     /* bytes of K (== of V) per layer */
    backend_kv_dtype kv_dtype; /* resolved (never AUTO) */
    fwd_bufs buf;           /* activations, sized for max_batch_tokens (see forward.h) */
    wmat out_view;          /* cfg.logits_rows: the output matrix's first rows (buf.output) */
    float *att_scratch;     /* reference attention: [max_seq_len] */
    const fwd_ops *fwd;     /* &cpu_fwd_ref or &cpu_fwd_fast */
    /* fast path only (NULL with cfg.reference) */
    ops_ctx *ops;
    float *rope_cs; /* [max_batch_tokens][n_rot/2][cos, sin] of this step's positions */
} cpu_backend;

extern const fwd_ops cpu_fwd_ref;
extern const fwd_ops cpu_fwd_fast;

/* Layer l's K / V in the pool, and its paged view. */
uint8_t *cpu_kv_k(cpu_backend *cb, uint32_t layer);
uint8_t *cpu_kv_v(cpu_backend *cb, uint32_t layer);
/* Bytes of one block of one layer's K (== of V). */
size_t cpu_kv_block_bytes(const cpu_backend *cb);
/* Store token rows k[kv_dim], v[kv_dim] into slot of layer's K and V (converted to the
 * pool's dtype: kv_store_heads). */
void cpu_kv_store(cpu_backend *cb, uint32_t layer, int32_t slot, const float *k, const float *v);
kv_view cpu_kv_view(cpu_backend *cb, uint32_t layer);

/* Shared by both tables (plain C, exact). */
int cpu_embed(void *ctx, float *out, const wmat *emb, const int32_t *ids, int32_t n);
int cpu_add(void *ctx, float *x, const float *y, int64_t n);

#endif
