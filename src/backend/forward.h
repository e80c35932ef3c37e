/* forward.h — the transformer forward pass, walked once for every backend.
 *
 * forward.c holds the architecture (llama; qwen2's q/k/v biases; qwen3's per-head q/k
 * RMSNorm; RoPE layouts and scalings) as one sequence of calls into a table of backend
 * ops. A backend fills a fwd_ops table (the CPU backend has two: the plain C reference
 * and the fast SIMD/threaded ops), owns the activation buffers (fwd_bufs: device
 * memory for a GPU backend) and the KV cache (ops address it by layer), and calls
 * fwd_run. A backend adds ops, never a second copy of the model.
 *
 * Op contract: output-first arguments; the activation pointers are backend buffers
 * (fwd_bufs) or offsets into them; weights are the model's wmat views (a backend may
 * map them to its own copies); every op returns IFD_OK or a negative status, and
 * fwd_run stops at the first failure. Every row of every op is computed the same way
 * whatever else is in the batch (batch invariance).
 *
 * Driven by the backend's one thread; ops may use their own workers. */
#ifndef INFERD_FORWARD_H
#define INFERD_FORWARD_H
#include "../util/layer/backend.h"

#include <stdint.h>

#include "backend.h"

typedef struct rope_params {
    int32_t head_dim;
    int32_t n_rot;          /* rotated dims (<= head_dim) */
    rope_layout layout;
    float base;
    float freq_scale;       /* 1 / linear factor */
    const float *freq_div;  /* [n_rot/2] llama3 per-frequency divisors, or NULL */
} rope_params;

/* Activation buffers, owned by the backend, sized at create time for T =
 * max_batch_tokens rows (xb: max(max_batch_tokens, max_logits) rows). */
typedef struct fwd_bufs {
    float *x;             /* [T][dim] the residual stream */
    float *xb;            /* [rows][max(dim, q_dim)] normed input / projection output */
    float *q, *k, *v;     /* [T][q_dim], [T][kv_dim], [T][kv_dim] */
    float *att;           /* [T][q_dim] attention output */
    float *gate, *up, *hb; /* [T][ffn_dim] */
    /* The output matrix (NULL: the model's). A view of its first rows writes logits rows
     * of that many columns (the backend spreads them: backend_config.logits_rows). */
    const wmat *output;
} fwd_bufs;

/* Most matrices one matmul call groups (q/k/v: 3, gate/up: 2). */
#define FWD_MAX_GROUP 4

typedef struct fwd_ops {
    const char *name;
    /* Optional (NULL: nothing): once per forward, before the first layer. */
    int (*begin)(void *ctx, const ifd_batch *bt, const rope_params *rp);
    /* out[i] = row ids[i] of emb, dequantized to f32, for i < n. */
    int (*embed)(void *ctx, float *out, const wmat *emb, const int32_t *ids, int32_t n);
    /* out[i] = x[r] / sqrt(mean(x[r]^2) + eps) * w with r = rows ? rows[i] : i, for
     * i < n_rows; rows of n floats. */
    int (*rmsnorm)(void *ctx, float *out, const float *x, const int32_t *rows, int32_t n_rows,
                   const float *w, int32_t n, float eps);
    /* outs[i][t] = ws[i] . x[t] for t < n_tokens, i < n (x: [n_tokens][n_cols]). n > 1
     * only when the matrices share their type and n_cols (the input is prepared once). */
    int (*matmul)(void *ctx, int n, float *const *outs, const wmat *const *ws, const float *x,
                  int32_t n_tokens);
    /* x[r][i] += b[i] for r < n_rows, i < n. */
    int (*add_bias)(void *ctx, float *x, const float *b, int32_t n_rows, int32_t n);
    /* x[r] = rmsnorm(x[r]) * w in place, rows of n (the qwen3 per-head q/k norm). */
    int (*head_norm)(void *ctx, float *x, const float *w, int32_t n_rows, int32_t n, float eps);
    /* Rotate q ([T][n_heads][head_dim]) and k ([T][n_kv_heads][head_dim]) for token t
     * at bt->positions[t], then store k[t], v[t] in this layer's KV cache at
     * bt->slot_mapping[t] (nothing for BACKEND_SLOT_NONE: q and k are still rotated). */
    int (*rope_store)(void *ctx, uint32_t layer, float *q, float *k, const float *v,
                      const ifd_batch *bt, const rope_params *rp);
    /* Causal attention of each sequence's query rows over this layer's KV cache (keys
     * 0..positions[t] through the sequence's block table). out, q: [T][n_heads][head_dim]. */
    int (*attention)(void *ctx, uint32_t layer, float *out, const float *q, const ifd_batch *bt);
    /* x[i] += y[i] */
    int (*add)(void *ctx, float *x, const float *y, int64_t n);
    /* out[i] = silu(gate[i]) * up[i] */
    int (*swiglu)(void *ctx, float *out, const float *gate, const float *up, int64_t n);
} fwd_ops;

/* The RoPE parameters of a model. */
rope_params fwd_rope_params(const model *m);

/* Check a batch against the backend's limits (a malformed batch is a bug in the engine:
 * it asserts). fwd_run checks, then runs the whole forward over ops/ctx with buf:
 * logits[i][n_vocab] = the output of token row bt->logits_index[i], i < n_logits (any
 * rows, in any order, repeats allowed, up to cfg.max_logits). logits is where the output
 * matmul writes: the CPU backend passes the caller's host buffer; a device backend
 * passes its own buffer and copies back. Returns the first failing op's status. */
void fwd_check_batch(const backend *b, const ifd_batch *bt);
int fwd_run(const fwd_ops *ops, void *ctx, const backend *b, const fwd_bufs *buf,
            const ifd_batch *bt, float *logits);

#endif
