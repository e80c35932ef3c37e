/* ops.h — the CPU backend's op set. Each op has a plain C reference (ops_ref.c) that
 * optimized versions are tested against. Output-first arguments (llama2.c style).
 * All ops are pure functions of their arguments: thread-safe. */
#ifndef INFERD_CPU_OPS_H
#define INFERD_CPU_OPS_H

#include <stdint.h>

#include "../../model/model.h"

typedef struct rope_params {
    int32_t head_dim;
    int32_t n_rot;          /* rotated dims (<= head_dim) */
    rope_layout layout;
    float base;
    float freq_scale;       /* 1 / linear factor */
    const float *freq_div;  /* [n_rot/2] llama3 per-frequency divisors, or NULL */
} rope_params;

/* Paged KV cache geometry of one layer: K and V are [n_slots][n_kv_heads][head_dim]. */
typedef struct kv_view {
    const float *k;
    const float *v;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t block_size;
} kv_view;

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

#endif
