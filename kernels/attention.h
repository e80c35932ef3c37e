/* attention.h — paged causal attention over the KV cache for one forward step: decode
 * rows, prefill chunks (any cached prefix) and k+1-token verification rows in one ragged
 * batch (kernels/attention.cu). Runs on the caller's stream; allocates nothing.
 *
 * Every query row (token t, head h) is computed by one fixed arithmetic sequence that
 * depends only on its own q, its keys 0..positions[t] and the model shapes: keys in
 * tiles of ATT_KEY_TILE at absolute key positions, online softmax per split-KV
 * partition of ATT_PART keys, the partitions folded in order by a log-sum-exp merge.
 * Whether the partitions of a row run in one block (prefill tiles) or in separate
 * blocks merged afterwards (split-KV decode) changes nothing in the bits, so a row's
 * output is the same whatever else is in the batch (batch invariance). */
#ifndef INFERD_KERNELS_ATTENTION_H
#define INFERD_KERNELS_ATTENTION_H

#include "devrt.h"

extern "C" {
#include "ktypes.h"
}

IFD_NS_BEGIN

enum {
    ATT_KEY_TILE = 32, /* keys per shared-memory tile (one per lane) */
    ATT_PART = 256,    /* keys per split-KV partition (a multiple of ATT_KEY_TILE) */
    ATT_ROWS = 16,     /* query rows (token x head of one KV group) per block */
    ATT_SPLIT_Q = 8,   /* sequences of at most this many query tokens may split KV */
};

typedef struct k_attn_batch {
    int32_t n_tokens, n_seqs, max_blocks_per_seq;
    /* device copies of the ifd_batch arrays */
    const int32_t *positions, *seq_start, *context_len, *block_table;
    /* the same arrays on the host (for planning grids; never dereference device ones on the host) */
    const int32_t *h_positions, *h_seq_start, *h_context_len;
} k_attn_batch;

/* Scratch bytes k_attention wants for split-KV decode of up to max_seqs single-token
 * rows with up to max_context keys. Less scratch (even none) is still correct and gives
 * the same bits; only long-context decodes run with less parallelism. */
size_t k_attention_scratch_bytes(int32_t max_tokens, int32_t max_seqs, int32_t n_heads,
                                 int32_t head_dim, int32_t max_context);

/* out[t][h][:] = softmax(q[t][h] . K[0..positions[t]] / sqrt(head_dim)) V, keys of the
 * token's sequence through its block table (slot = block * block_size + offset).
 * out, q: [n_tokens][n_heads][head_dim]; k_cache, v_cache: [n_slots][n_kv_heads][head_dim]
 * (device f32). head_dim: 32, 64, 96 or 128. Validates the sizes and the host arrays
 * (seq_start from 0 to n_tokens, ascending; 0 <= positions < context_len <=
 * max_blocks_per_seq * block_size); returns DEV_ERR on a bad one, launching nothing.
 * Grids are planned from the host arrays. */
int k_attention(dev_stream s, float *out, const float *q, const float *k_cache, const float *v_cache,
                const k_attn_batch *b, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                int32_t block_size, void *scratch, size_t scratch_bytes);

/* The same, with grids planned from bounds instead of the host arrays (the h_* fields
 * are not read): every sequence has at most max_q query tokens and every position is
 * below max_keys. For CUDA-graph capture, where the grid must serve later steps whose
 * contexts have grown: rows beyond the actual sizes exit at once. The device arrays
 * must respect the bounds (not checked on the device beyond keeping reads inside the
 * block table). */
int k_attention_bounded(dev_stream s, float *out, const float *q, const float *k_cache,
                        const float *v_cache, const k_attn_batch *b, int32_t n_heads,
                        int32_t n_kv_heads, int32_t head_dim, int32_t block_size, int32_t max_q,
                        int32_t max_keys, void *scratch, size_t scratch_bytes);

/* k_attention and k_attention_bounded over a KV cache of any dtype (ktypes.h's k_kv;
 * the f32 functions above are these with K_KV_F32). Each stored element is widened to
 * the f32 value kv_load_row gives (INT8: q * its row's scale) as the tile is loaded; the
 * arithmetic after that is the f32 kernel's, so batch invariance holds for every dtype.
 * DEV_ERR for a dtype outside the enum or INT8 without its scale arrays. */
int k_attention_kv(dev_stream s, float *out, const float *q, const k_kv *cache, const k_attn_batch *b,
                   int32_t n_heads, int32_t n_kv_heads, int32_t head_dim, int32_t block_size, void *scratch,
                   size_t scratch_bytes);
int k_attention_bounded_kv(dev_stream s, float *out, const float *q, const k_kv *cache,
                           const k_attn_batch *b, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                           int32_t block_size, int32_t max_q, int32_t max_keys, void *scratch,
                           size_t scratch_bytes);

IFD_NS_END

#endif
