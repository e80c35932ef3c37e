/* kern.h — the per-ISA kernel table behind the fast CPU ops (ops_fast.c).
 *
 * One table per dispatch level: kern_scalar.c (plain C, no matmul micro-kernels: the
 * reference dot per element), kern_avx2.c (AVX2/FMA/F16C), kern_avx512.c (AVX-512
 * F/BW/VL + VNNI). The ISA files hold micro-kernels only; the weight-type dispatch and
 * the row/token tiling are shared (kern_dispatch.c), driven by the quant traits and by
 * each table's per-type tile shape. The SIMD files compile their functions with target
 * attributes, so the rest of the build stays generic x86-64 and the level is picked at
 * run time.
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
#include "../../model/quant.h"
#include "../../util/cpu_features.h"
#include "ops.h"

/* One matmul micro-kernel: out[t * out_stride + r] = dot(row r of w, activation row t)
 * over a rectangle of the kernel's tiles: rows r < n_rows by tokens t < n_tok (n_rows a
 * multiple of the tile's rows, n_tok of its tokens), row tile by row tile, token tiles
 * in order within each. One call covers a whole row tile's token range, or (decode) a
 * whole row range for one token, so the call costs nothing per tile. w: the first row
 * (rows row_bytes apart), act: the first activation row (rows act_stride apart,
 * prepared or f32), K: elements per row. */
typedef void (*kern_tile_fn)(const uint8_t *w, size_t row_bytes, const uint8_t *act,
                             size_t act_stride, int64_t K, float *out, size_t out_stride,
                             int64_t n_rows, int32_t n_tok);

/* The micro-kernels of one weight type at one level: its tile shape (nr rows x nt
 * tokens) and the four instantiations of one tile body, tile[nr rows?][nt tokens?].
 * The shared tiling (kern_gemm_rows) decides which rectangles to hand them. nr == 0:
 * no kernel (the reference dot per element on f32 activation rows). */
typedef struct kern_gemm {
    int32_t nr, nt;
    kern_tile_fn tile[2][2]; /* [0][0]: 1x1, [0][1]: 1 x nt, [1][0]: nr x 1, [1][1]: nr x nt */
} kern_gemm;

/* For the ISA files: the four instantiations NAME_11 .. NAME_rt of an always-inline
 * tile body BODY(NR, NT, type, w, row_bytes, act, act_stride, KARG, out, out_stride)
 * (KARG: an expression of K, e.g. K / 32 blocks) over a rectangle of tiles, and their
 * kern_gemm entry. */
#define KERN_TILE_ARGS                                                                     \
    const uint8_t *w, size_t rb, const uint8_t *a, size_t as, int64_t K, float *o, size_t os, \
        int64_t n_rows, int32_t n_tok
#define KERN_TILE_FN(NAME, BODY, T, NR, NT, KARG)                                          \
    static void NAME(KERN_TILE_ARGS) {                                                     \
        for (int64_t r = 0; r < n_rows; r += (NR))                                          \
            for (int32_t j = 0; j < n_tok; j += (NT))                                       \
                BODY(NR, NT, T, w + (size_t)r * rb, rb, a + (size_t)j * as, as, KARG,       \
                     o + (size_t)j * os + r, os);                                          \
    }
#define KERN_TILES(NAME, BODY, T, NR, NT, KARG)                                            \
    KERN_TILE_FN(NAME##_11, BODY, T, 1, 1, KARG)                                           \
    KERN_TILE_FN(NAME##_1t, BODY, T, 1, NT, KARG)                                          \
    KERN_TILE_FN(NAME##_r1, BODY, T, NR, 1, KARG)                                          \
    KERN_TILE_FN(NAME##_rt, BODY, T, NR, NT, KARG)
#define KERN_GEMM(NAME, NR, NT) {NR, NT, {{NAME##_11, NAME##_1t}, {NAME##_r1, NAME##_rt}}}

/* Optional packed ("prepared") form of a weight type at one level: groups of nr rows
 * interleaved so that one vector holds the same K position of nr rows (outputs in
 * lanes). Packed once at backend create (ops_ctx_prepare_weights); the gemm then
 * reads only the packed copy. Every output element is computed by the same per-lane
 * instruction sequence whatever the number of tokens (decode included) or the group
 * it falls in, so it is batch invariant. nr == 0: no packed form. */
typedef struct kern_pack {
    int32_t nr;
    /* bytes of one group of nr rows of K elements */
    size_t (*group_bytes)(int64_t K);
    /* pack nr rows (row_bytes apart, original layout) into one group */
    void (*pack)(uint8_t *dst, const uint8_t *w, size_t row_bytes, int64_t K);
    /* out[t * os + g * nr + i] for groups g < n_groups (group_bytes apart), tokens t < nt,
     * rows i < nr of each group; act as for kern_tile_fn */
    void (*gemm)(const uint8_t *grp, size_t group_bytes, int64_t n_groups, const uint8_t *act,
                 size_t as, int64_t K, float *out, size_t os, int32_t nt);
} kern_pack;

typedef struct kern_table {
    cpu_level level;
    /* Bytes of one prepared activation row of K elements in this level's layout of
     * qt->act (never called for QUANT_ACT_F32), and its preparation from x[K]. */
    size_t (*act_row_bytes)(const quant_traits *qt, int64_t K);
    void (*act_prepare)(const quant_traits *qt, const float *x, void *dst, int64_t K);
    kern_gemm gemm[GGML_TYPE_COUNT_]; /* indexed by weight type */
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
    /* Optional packed weight forms, indexed by weight type (zeroed: none). */
    kern_pack pack[GGML_TYPE_COUNT_];
} kern_table;

/* Query tokens per attention tile (attn_tile). */
#define KERN_ATTN_QT 4

extern const kern_table kern_scalar_table;
/* NULL when the file was compiled for a non-x86 target. */
const kern_table *kern_avx2_get(void);
const kern_table *kern_avx512_get(void);

/* ---- shared dispatch (kern_dispatch.c) ---------------------------------------------- */

/* The table for a level (NULL when the CPU lacks it). */
const kern_table *kern_for_level(cpu_level l);
/* Bytes of one prepared activation row for weight type t at this level; 0: the gemm
 * reads the f32 rows as they are (no preparation). */
size_t kern_act_row_bytes(const kern_table *k, ggml_type t, int64_t K);
/* Prepare one activation row x[K] for weight type t (kern_act_row_bytes > 0 only). */
void kern_act_prepare(const kern_table *k, ggml_type t, const float *x, void *dst, int64_t K);
/* out[t * out_stride + r] = dot(row r of w, activation row t) for r in [r0, r1), t in
 * [0, nt): the one tiling every level shares. act: nt rows act_stride bytes apart. */
void kern_gemm_rows(const kern_table *k, const wmat *w, int64_t r0, int64_t r1, const void *act,
                    size_t act_stride, int32_t nt, float *out, size_t out_stride);

/* Bytes of w's packed form at this level, 0 when it has none (type without a packed
 * kernel, or rows not a multiple of the group). */
size_t kern_packed_bytes(const kern_table *k, const wmat *w);
/* The packed float form every level shares (F32 / F16 / BF16, elements as they are):
 * nr rows (row_bytes apart) stored K position by K position, row i of position k at
 * element k * nr + i. */
void kern_pack_float(ggml_type t, int32_t nr, uint8_t *dst, const uint8_t *w, size_t rb,
                     int64_t K);
/* Rows of one packed group of w at this level (a task's row range must be a multiple),
 * 0 when w has no packed form. */
int32_t kern_packed_rows(const kern_table *k, const wmat *w);
/* Pack groups [g0, g1) of w (of n_rows / kern_packed_rows) into dst (kern_packed_bytes(k, w)
 * bytes, 64-byte aligned): disjoint ranges may be packed by different threads. */
void kern_pack_weights(const kern_table *k, const wmat *w, uint8_t *dst, int64_t g0, int64_t g1);
/* kern_gemm_rows over w's packed copy pk; r0 and r1 multiples of the group rows (or
 * r1 == n_rows). */
void kern_gemm_rows_packed(const kern_table *k, const wmat *w, const uint8_t *pk, int64_t r0,
                           int64_t r1, const void *act, size_t act_stride, int32_t nt,
                           float *out, size_t out_stride);

/* The last r < NTILE (<= 8) tokens of a packed group in one body call of that width:
 * each token's lanes see the same sequence of operations whatever the tile's width, so
 * the bits are those of one token at a time, but the group's weights are decoded once
 * instead of once per token (a 5-token verification is not 5 single-token passes).
 * BODY_R(width, ...) is the body at a compile-time width; widths >= NTILE never occur
 * (they map to 1 so that no wider instance is built). */
#define KERN_REM(BODY_R, NTILE, r, ...)                                                       \
    switch (r) {                                                                               \
    case 1: BODY_R(1, __VA_ARGS__); break;                                                     \
    case 2: BODY_R((2 < (NTILE) ? 2 : 1), __VA_ARGS__); break;                                 \
    case 3: BODY_R((3 < (NTILE) ? 3 : 1), __VA_ARGS__); break;                                 \
    case 4: BODY_R((4 < (NTILE) ? 4 : 1), __VA_ARGS__); break;                                 \
    case 5: BODY_R((5 < (NTILE) ? 5 : 1), __VA_ARGS__); break;                                 \
    case 6: BODY_R((6 < (NTILE) ? 6 : 1), __VA_ARGS__); break;                                 \
    case 7: BODY_R((7 < (NTILE) ? 7 : 1), __VA_ARGS__); break;                                 \
    default: break;                                                                            \
    }

#endif
