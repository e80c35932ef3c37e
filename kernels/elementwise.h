/* elementwise.h — the CUDA backend's row and element kernels: embedding gather (every
 * weight type the CPU reads), RMSNorm (plain, with a row gather, fused with the residual
 * add), the qwen3 per-head q/k norm, bias add, residual add, SwiGLU, and RoPE fused with
 * the K/V write into the paged cache. Matmul, attention and sampling live elsewhere.
 *
 * Every launcher takes the stream first, validates its sizes (a bad size or a NULL
 * pointer where data is needed is DEV_ERR, never a launch), allocates nothing, and
 * returns DEV_OK / DEV_ERR (dev_check_launch). All pointers are device pointers unless
 * stated. Shapes: activations are row-major f32 [rows][n].
 *
 * Numerics, against the C reference (ops_ref.c, cpu_fwd_ref.c, quant.c):
 *   - embed, add, add_bias: the same bits (device code keeps the reference's order and
 *     rounds each product separately: no fused multiply-add where the reference has none);
 *   - rmsnorm / head_norm: the sum of squares is reduced in a tree (per-thread chunks of
 *     4, then warp butterflies), not the reference's left-to-right loop: ~1e-6 relative;
 *   - swiglu: expf of the device math library (≤ 2 ulp on a GPU; the same bits under the
 *     emulation);
 *   - rope: angles in double as the reference computes them (same bits under the
 *     emulation; on a GPU cos/sin may differ by one float ulp).
 * Batch invariance: the operations producing one output element depend only on that
 * row's data and on n / head_dim (block shapes are chosen from those, never from the
 * row count); the fused add+norm gives the same bits as k_add then k_rmsnorm.
 *
 * Driven by the backend's one thread (kernels run on its stream). */
#ifndef INFERD_KERNELS_ELEMENTWISE_H
#define INFERD_KERNELS_ELEMENTWISE_H
#include "simt.h"

#include "devrt.h"

#include "ktypes.h"

IFD_NS_BEGIN

/* out[i][c] = dequantized element c of row ids[i] of emb (n_vocab rows of n_cols elements,
 * row_bytes apart, of ggml type `type`: every type k_matmul reads, ktypes.h's k_type), for
 * i < n. Ids are validated by the engine (fwd_check_batch, on the host copy); the kernel
 * still never reads outside emb: a row whose id is outside [0, n_vocab) is written as
 * zeros. k_embed_flagged also sets *bad = 1 (a device int, left alone otherwise) so a
 * backend can see such rows when it next reads back; bad may be NULL. DEV_ERR for an
 * unsupported type, n_cols not a multiple of the type's block, row_bytes smaller than
 * a row, or misaligned emb / row_bytes. */
int k_embed(dev_stream s, float *out, const void *emb, int type, int64_t n_cols, size_t row_bytes,
            const int32_t *ids, int32_t n, int32_t n_vocab);
int k_embed_flagged(dev_stream s, float *out, const void *emb, int type, int64_t n_cols,
                    size_t row_bytes, const int32_t *ids, int32_t n, int32_t n_vocab, int32_t *bad);

/* out[i] = x[r] / sqrt(mean(x[r]^2) + eps) * w, r = rows ? rows[i] : i, for i < n_rows
 * (rows of n floats; rows[] entries are validated by the caller: fwd_check_batch).
 * out must not overlap x. */
int k_rmsnorm(dev_stream s, float *out, const float *x, const int32_t *rows, int32_t n_rows,
              const float *w, int32_t n, float eps);
/* x += y; out = rmsnorm(x) * w, over n_rows rows of n (x is updated in place; the same
 * bits as k_add followed by k_rmsnorm). */
int k_add_rmsnorm(dev_stream s, float *out, float *x, const float *y, const float *w, int32_t n_rows,
                  int32_t n, float eps);
/* x[r] = rmsnorm(x[r]) * w in place for r < n_rows, rows of n (the qwen3 per-head q/k
 * norm: n = head_dim, one warp per row). */
int k_head_norm(dev_stream s, float *x, const float *w, int32_t n_rows, int32_t n, float eps);
/* x[r][i] += b[i] for r < n_rows, i < n. */
int k_add_bias(dev_stream s, float *x, const float *b, int32_t n_rows, int32_t n);
/* x[i] += y[i] for i < n. */
int k_add(dev_stream s, float *x, const float *y, int64_t n);
/* out[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up (op_swiglu_ref's formula). */
int k_swiglu(dev_stream s, float *out, const float *gate, const float *up, int64_t n);

/* RoPE and the K/V cache write of one layer: for every token t < n_tokens rotate q[t]
 * ([n_heads][head_dim]) and k[t] ([n_kv_heads][head_dim]) in place at positions[t]
 * (rp: layout, n_rot <= head_dim, base, freq_scale, and llama3's divisors), then store
 * k[t] and v[t] in k_cache / v_cache ([n_slots][n_kv_heads][head_dim]) at slot
 * slot_mapping[t]; -1 (a padding row) stores nothing. Slots are validated by the caller
 * (fwd_check_batch). freq_div: llama3's per-frequency divisors on the device
 * ([n_rot/2]), or NULL. head_dim <= 512, n_rot even and > 0. */
int k_rope_store(dev_stream s, float *q, float *k, const float *v, float *k_cache, float *v_cache,
                 const int32_t *positions, const int32_t *slot_mapping, int32_t n_tokens,
                 int32_t n_heads, int32_t n_kv_heads, k_rope rp, const float *freq_div);
/* The same into a KV cache of any dtype (ktypes.h's k_kv; F32 is k_rope_store): each
 * (token, KV head) row of K and V stored with src/backend/kv_dtype.c's encoding, the same
 * bytes kv_store_row writes (INT8: its scale at k_scale / v_scale[slot * n_kv_heads + h]). */
int k_rope_store_kv(dev_stream s, float *q, float *k, const float *v, const k_kv *cache,
                    const int32_t *positions, const int32_t *slot_mapping, int32_t n_tokens,
                    int32_t n_heads, int32_t n_kv_heads, k_rope rp, const float *freq_div);

IFD_NS_END

#endif
