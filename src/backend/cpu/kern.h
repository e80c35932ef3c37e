/* kern.h — the per-ISA kernel table behind the fast CPU ops (ops_fast.c).
 *
 * One table per dispatch level: kern_scalar.c (plain C, the reference dot per
 * element), kern_avx2.c (AVX2/FMA/F16C), kern_avx512.c (AVX-512 F/BW/VL + VNNI). The
 * SIMD files compile their functions with target attributes, so the rest of the build
 * stays generic x86-64 and the level is picked at run time.
 *
 * Batch invariance contract for every gemm: out[t][r] is computed by the same
 * instruction sequence (fixed reduction order over K) whatever tile (r, t) falls in,
 * whatever the number of tokens and whatever other rows are in the batch.
 * All kernels are pure functions of their arguments: thread-safe. */
#ifndef INFERD_CPU_KERN_H
#define INFERD_CPU_KERN_H
#include "../../util/layer/kernels.h"

#include <stddef.h>
#include <stdint.h>

#include "../../model/model.h"
#include "../../util/cpu_features.h"
#include "ops.h"

typedef struct kern_table {
    cpu_level level;
    /* Bytes of one prepared activation row of K elements for weight type t; 0 means
     * the gemm reads the f32 row as it is (no preparation). */
    size_t (*act_row_bytes)(ggml_type t, int64_t K);
    /* Prepare (quantize) one activation row x[K] into dst (act_row_bytes bytes). */
    void (*act_prepare)(ggml_type t, const float *x, void *dst, int64_t K);
    /* out[t * out_stride + r] = dot(row r of w, activation row t) for r in [r0, r1),
     * t in [0, nt). act: nt rows act_stride bytes apart (prepared, or f32 rows).
     * scratch: >= KERN_GEMM_SCRATCH_FLOATS(w->n_cols) floats (per thread). */
    void (*gemm)(const wmat *w, int64_t r0, int64_t r1, const void *act, size_t act_stride,
                 int32_t nt, float *out, size_t out_stride, float *scratch);
    void (*rmsnorm)(float *out, const float *x, const float *w, int32_t n, float eps);
    /* out = silu(gate) * up */
    void (*swiglu)(float *out, const float *gate, const float *up, int32_t n);
    /* Attention of the g query heads q[g][hd] (one token, heads sharing KV head kvh)
     * over keys 0..n_keys-1 of the paged cache. out: [g][hd]. scratch: >= (g + 2) * n_keys floats. */
    void (*attn)(float *out, const float *q, int32_t g, int32_t n_keys, const kv_view *kv,
                 int32_t kvh, const int32_t *block_table, float scale, float *scratch);
    /* Optional (NULL: use attn per token): qt consecutive query tokens x g heads; token
     * i's rows at q/out + i * tok_stride, keys 0..n_keys[i]-1. Each row's result equals
     * what the same kernel computes for that row in any other tile.
     * scratch: >= (qt * g + 1) * max(n_keys) + qt * g floats. */
    void (*attn_tile)(float *out, const float *q, size_t tok_stride, int32_t qt, int32_t g,
                      const int32_t *n_keys, const kv_view *kv, int32_t kvh,
                      const int32_t *block_table, float scale, float *scratch);
} kern_table;

/* Query tokens per attention tile (attn_tile). */
#define KERN_ATTN_QT 4

/* Per-thread gemm scratch (room for a tile of 4 rows of K floats; the current kernels
 * work in registers and leave it unused). */
#define KERN_GEMM_SCRATCH_FLOATS(K) ((size_t)4 * (size_t)(K))

extern const kern_table kern_scalar_table;
/* NULL when the file was compiled for a non-x86 target. */
const kern_table *kern_avx2_get(void);
const kern_table *kern_avx512_get(void);

/* The table for a level (NULL when the CPU lacks it). */
const kern_table *kern_for_level(cpu_level l);

#endif
