/* kern_avx2.c — AVX2 + FMA + F16C kernels (8 lanes), compiled with a target pragma and
 * used only when the CPU has them. Same structure as kern_avx512.c:
 *  - Q8_0 / Q4_0: activations quantized to int8 blocks of 32 once per matmul; per
 *    block VPMADDUBSW + VPMADDWD integer dot (Q4_0: nibble x a plus a precomputed
 *    -8*sum(a) offset; Q8_0: |w| x sign(a, w); neither can saturate the int16 pair
 *    sums: 15*127*2 and 128*127*2 are < 32768), then one f32 FMA per block.
 *  - F32 / F16 / BF16: exact conversion in registers, f32 FMA, 8 lanes over K.
 *  - Q4_K / Q6_K: the same integer dot per 32-element block of their super-blocks
 *    (Q6_K: 6-bit q with a -32 * sum offset per 16-element scale group; Q4_K: nibbles,
 *    d*sc in the FMA, the dmin*m minimum as one 8-lane FMA per super-block against the
 *    activation's per-block d_a * sum(a)).
 *  - Q4_1 / Q5_0 / Q5_1 / IQ4_NL: the same per block with their own unpacking (fifth
 *    bit, table lookup) and, for the "_1" types, one min FMA per block (their section).
 *  - Packed forms (kern_pack) of Q4_0 / Q5_0 / Q8_0 / Q4_K / Q6_K (and more): groups of 8
 *    rows interleaved so one ymm holds the same 4 columns of 8 rows, outputs in lanes (see
 *    the section).
 * Micro-kernels only: the tiling over rows and tokens and the type dispatch are shared
 * (kern_dispatch.c); this file gives each type its tile bodies and shape (k2_table).
 * Every output element runs the same instruction sequence whatever its tile: batch
 * invariant. Thread-safe (no state). */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "../../model/quant.h"
#include "../../util/common.h"
#include "../kv_dtype.h"
#include "kern.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include <immintrin.h>

#define AI static inline __attribute__((always_inline))
/* Full unrolling of the loops over a tile's rows and tokens (constant trip counts):
 * their accumulators must live in registers. */
#define UNROLL _Pragma("GCC unroll 16")

/* Fixed-order horizontal sum of 8 lanes. */
AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* f16 -> f32 of every half (filled once by kern_avx2_get, with the same F16C conversion
 * as bcast_f16): a block scale becomes a broadcast load, no vector-unit work. */
static float k2_f16_tab[65536];

static void k2_tab_init(void) {
    for (int i = 0; i < 65536; i += 8) {
        const __m128i h = _mm_add_epi16(_mm_set1_epi16((short)i), _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_storeu_ps(k2_f16_tab + i, _mm256_cvtph_ps(h));
    }
}

AI __m256 bcast_f16_tab(const uint8_t *p) {
    return _mm256_broadcast_ss(&k2_f16_tab[ld16(p)]);
}

AI __m256 bcast_f16(uint16_t h) {
    return _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))));
}

/* Decode: the 1x1 instantiation takes the rows of one token DR at a time (DR x 1
 * bodies: DR independent accumulator chains, where one row alone would wait on its FMA
 * latency), the remaining rows and tokens one by one. Each element's instruction
 * sequence in a DR x 1 body is that of the 1 x 1 body (its own accumulator, the same
 * reduction order), so the tile shape still cannot change a result. The other three
 * instantiations are kern.h's. */
#define K2_TILES(NAME, BODY, T, NR, NT, DR, KARG)                                          \
    static void NAME##_11(KERN_TILE_ARGS) {                                                \
        int64_t r = 0;                                                                     \
        if (n_tok == 1)                                                                    \
            for (; r + (DR) <= n_rows; r += (DR))                                          \
                BODY(DR, 1, T, w + (size_t)r * rb, rb, a, as, KARG, o + r, os);            \
        for (; r < n_rows; r++)                                                            \
            for (int32_t j = 0; j < n_tok; j++)                                            \
                BODY(1, 1, T, w + (size_t)r * rb, rb, a + (size_t)j * as, as, KARG,        \
                     o + (size_t)j * os + r, os);                                          \
    }                                                                                      \
    KERN_TILE_FN(NAME##_1t, BODY, T, 1, NT, KARG)                                          \
    KERN_TILE_FN(NAME##_r1, BODY, T, NR, 1, KARG)                                          \
    KERN_TILE_FN(NAME##_rt, BODY, T, NR, NT, KARG)

/* ---- integer paths --------------------------------------------------------------------- */

typedef struct a8_block {
    int8_t qs[32];
    int32_t bias[8]; /* lane 0: -8 * sum(qs) for Q4_0; 0 for Q8_0 */
    float d[8];      /* the block scale in every lane */
} a8_block;

/* Row (QUANT_ACT_Q8_32): a8_block[K / 32], then (q_min types) float dsum[K / 32] =
 * d_a * sum(a) per block (Q2_K, q_group 16: dsum[K / 16], per 16 elements); Q6_K: uint32
 * (s0, s1) per block, the int16 sums of its two 16-element halves. */
static size_t k2_act_row_bytes(const quant_traits *qt, int64_t K) {
    const size_t nds = qt->q_min ? (size_t)(K / 32) * (qt->q_group == 16 ? 2 : 1)
                       : qt->type == GGML_TYPE_Q6_K ? (size_t)(K / 32) /* (s0, s1) int16 pairs */
                                                    : 0;
    return (size_t)(K / 32) * sizeof(a8_block) + nds * sizeof(float);
}

/* amax of 32 floats. */
static float amax32(const float *xb) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

/* Q4_K and Q6_K: one activation scale per 256-element super-block (stored in each of
 * its 8 blocks), so their packed kernels sum a super-block's dots in int32. */
static bool act_scale_per_superblock(const quant_traits *qt) {
    return qt->type == GGML_TYPE_Q4_K || qt->type == GGML_TYPE_Q6_K;
}

/* The offset vector: -q_zero * sum(a) per scale group (int32 lanes 0-7 cover 32 elements:
 * groups of 16 = lanes 0-3 and 4-7); Q8_0 (signed, q_zero 0) needs none. */
static void k2_act_prepare(const quant_traits *qt, const float *x, void *dst, int64_t K) {
    IFD_ASSERT(K % 32 == 0);
    a8_block *ab = dst;
    const bool per_sb = act_scale_per_superblock(qt);
    IFD_ASSERT(!per_sb || K % QK_K == 0);
    float amax = 0.0f;
    for (int64_t b = 0; b < K / 32; b++) {
        const float *xb = x + 32 * b;
        if (!per_sb) {
            amax = amax32(xb);
        } else if (b % 8 == 0) {
            amax = 0.0f;
            for (int i = 0; i < 8; i++) amax = fmaxf(amax, amax32(xb + 32 * i));
        }
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * i), vid));
        /* pack 32 int32 -> 32 int8 in order */
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
        __m256i p = _mm256_packs_epi16(p01, p23);
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)ab[b].qs, p);
        int32_t lanes0[8], lanes1[8], s0 = 0, s1 = 0; /* sums of elements 0-15, 16-31 */
        _mm256_storeu_si256((__m256i *)lanes0, _mm256_add_epi32(q[0], q[1]));
        _mm256_storeu_si256((__m256i *)lanes1, _mm256_add_epi32(q[2], q[3]));
        for (int i = 0; i < 8; i++) {
            s0 += lanes0[i];
            s1 += lanes1[i];
        }
        memset(ab[b].bias, 0, sizeof ab[b].bias);
        const int32_t M = qt->q_zero;
        if (qt->q_group == 16) {
            ab[b].bias[0] = -M * s0;
            ab[b].bias[4] = -M * s1;
        } else {
            ab[b].bias[0] = -M * (s0 + s1);
        }
        if (qt->q_min && qt->q_group == 16) { /* Q2_K: a minimum per 16 elements */
            ((float *)(ab + K / 32))[2 * b] = d * (float)s0;
            ((float *)(ab + K / 32))[2 * b + 1] = d * (float)s1;
        } else if (qt->q_min) {
            ((float *)(ab + K / 32))[b] = d * (float)(s0 + s1);
        } else if (qt->type == GGML_TYPE_Q6_K) { /* |s| <= 16 * 127: int16 */
            ((uint32_t *)(ab + K / 32))[b] = (uint32_t)(uint16_t)s0 | (uint32_t)(uint16_t)s1 << 16;
        }
        for (int i = 0; i < 8; i++) ab[b].d[i] = d;
    }
}

#define INR 2
#define INT 3
#define IDR 1 /* decode rows per body */
#define IMR 2 /* max(INR, IDR) */

/* Accumulator chains per output element (all bodies): block / chunk i of K goes to chain
 * i % NACC, each chain in K order; the result is hsum8(chain 0 + chain 1). Small tiles
 * (decode) run the chains interleaved, so one FMA never waits on the previous one's
 * latency; bigger tiles, whose NACC x NR x NT accumulators would not fit in registers,
 * run them one after the other (a pass over K per chain). Either way each element gets
 * the same sequence of operations: the tile shape cannot change a result. */
#define NACC 2
#define FUSED(NR, NT) ((NR) * (NT) <= 4)

AI __m256 acc_combine(__m256 a0, __m256 a1) {
    return _mm256_add_ps(a0, a1);
}

/* One Q8_0 / Q4_0 block b of the tile into the chain acc. */
AI void a8_step(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t b, __m256 (*acc)[INT]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const size_t bb = t == GGML_TYPE_Q4_0 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    __m256i wq[IMR];
    __m256 dw[IMR];
    UNROLL
    for (int r = 0; r < NR; r++) {
        const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)b * bb;
        dw[r] = bcast_f16_tab(blk);
        if (t == GGML_TYPE_Q4_0) { /* the 16 bytes in both halves, the upper one >> 4 */
            const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + 2)));
            wq[r] = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                     _mm256_set1_epi8(0x0F));
        } else {
            wq[r] = _mm256_loadu_si256((const __m256i *)(blk + 2));
        }
    }
    UNROLL
    for (int j = 0; j < NT; j++) {
        const a8_block *ab = (const a8_block *)(act + (size_t)j * act_stride) + b;
        const __m256i a = _mm256_loadu_si256((const __m256i *)ab->qs);
        const __m256 da = _mm256_loadu_ps(ab->d);
        UNROLL
        for (int r = 0; r < NR; r++) {
            __m256i dot;
            if (t == GGML_TYPE_Q4_0) {
                dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], a), ones);
                dot = _mm256_add_epi32(dot, _mm256_loadu_si256((const __m256i *)ab->bias));
            } else {
                const __m256i aw = _mm256_sign_epi8(wq[r], wq[r]);
                const __m256i sa = _mm256_sign_epi8(a, wq[r]);
                dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sa), ones);
            }
            acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw[r], da), acc[r][j]);
        }
    }
}

AI void a8_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nb, float *out, size_t out_stride) {
    __m256 acc[NACC][IMR][INT];
    UNROLL
    for (int c = 0; c < NACC; c++)
        UNROLL
        for (int r = 0; r < NR; r++)
            UNROLL
            for (int j = 0; j < NT; j++) acc[c][r][j] = _mm256_setzero_ps();
    if (FUSED(NR, NT)) {
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            a8_step(NR, NT, t, w0, row_bytes, act, act_stride, b, acc[0]);
            a8_step(NR, NT, t, w0, row_bytes, act, act_stride, b + 1, acc[1]);
        }
        if (b < nb) a8_step(NR, NT, t, w0, row_bytes, act, act_stride, b, acc[0]);
    } else {
        for (int64_t b = 0; b < nb; b += 2) a8_step(NR, NT, t, w0, row_bytes, act, act_stride, b, acc[0]);
        for (int64_t b = 1; b < nb; b += 2) a8_step(NR, NT, t, w0, row_bytes, act, act_stride, b, acc[1]);
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = hsum8(acc_combine(acc[0][r][j], acc[1][r][j]));
}

K2_TILES(q8_0, a8_tile, GGML_TYPE_Q8_0, INR, INT, IDR, K / 32)
K2_TILES(q4_0, a8_tile, GGML_TYPE_Q4_0, INR, INT, IDR, K / 32)

/* ---- K-quants, integer path: one 32-element block of the activation at a time ------- */

/* Q4_K: d * sc[0..7] and dmin * m[0..7] of a super-block. */
AI void q4k_scales8(const uint8_t *blk, float *dsc, __m256 *dm) {
    uint32_t w[3], scw[2], mw[2];
    memcpy(w, blk + 4, 12);
    scw[0] = w[0] & 0x3f3f3f3fu;
    mw[0] = w[1] & 0x3f3f3f3fu;
    scw[1] = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
    mw[1] = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
    uint64_t sc8, m8;
    memcpy(&sc8, scw, 8);
    memcpy(&m8, mw, 8);
    const __m256 d = bcast_f16(ld16(blk)), dmin = bcast_f16(ld16(blk + 2));
    _mm256_storeu_ps(dsc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8)))));
    *dm = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8))));
}

/* Unsigned quants of sub-block j (32 elements, in order) of a K-quant super-block. */
AI __m256i kq_block(ggml_type t, const uint8_t *blk, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (t == GGML_TYPE_Q4_K) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * (j >> 1)));
        return (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
    }
    /* Q6_K: half n = j / 4, the 4 groups of 32 of that half (see deq_q6_K) */
    const int n = j >> 2, g = j & 3;
    const __m256i a = _mm256_loadu_si256((const __m256i *)(blk + 64 * n + 32 * (g & 1)));
    const __m256i h = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * n));
    const __m256i lo = (g >> 1) ? _mm256_and_si256(_mm256_srli_epi16(a, 4), m4) : _mm256_and_si256(a, m4);
    __m256i hb;
    switch (g) {
    case 0: hb = _mm256_slli_epi16(h, 4); break;
    case 1: hb = _mm256_slli_epi16(h, 2); break;
    case 2: hb = h; break;
    default: hb = _mm256_srli_epi16(h, 2); break;
    }
    return _mm256_or_si256(lo, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
}

#define KQ_NR 2
#define KQ_NT 3
#define KQ_DR 1 /* decode rows per body */
#define KQ_MR 2 /* max(KQ_NR, KQ_DR) */

/* One super-block sb of the tile into the chain acc: (Q4_K) acc -= dmin*m . dsum
 * (8 lanes), then per 32-element block acc += float(dot [+ offset]) * (scale * d_a). */
AI void kq_step(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nsb, int64_t sb, __m256 (*acc)[KQ_NT]) {
    const size_t sbb = t == GGML_TYPE_Q4_K ? sizeof(block_q4_K) : sizeof(block_q6_K);
    const __m256i ones = _mm256_set1_epi16(1);
    float dsc[KQ_MR][16];
    UNROLL
    for (int r = 0; r < NR; r++) {
        const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)sb * sbb;
        if (t == GGML_TYPE_Q4_K) {
            __m256 dm;
            q4k_scales8(blk, dsc[r], &dm);
            UNROLL
            for (int jt = 0; jt < NT; jt++) {
                const float *dsum = (const float *)((const a8_block *)(act + (size_t)jt * act_stride) + 8 * nsb) + 8 * sb;
                acc[r][jt] = _mm256_fnmadd_ps(dm, _mm256_loadu_ps(dsum), acc[r][jt]);
            }
        } else {
            const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk + 208))));
            for (int g = 0; g < 16; g++) dsc[r][g] = d * (float)(int8_t)blk[192 + g];
        }
    }
    UNROLL
    for (int j = 0; j < 8; j++) {
        __m256i wq[KQ_MR];
        __m256 sv[KQ_MR];
        UNROLL
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)sb * sbb;
            wq[r] = kq_block(t, blk, j);
            sv[r] = t == GGML_TYPE_Q4_K
                        ? _mm256_set1_ps(dsc[r][j])
                        : _mm256_setr_ps(dsc[r][2 * j], dsc[r][2 * j], dsc[r][2 * j], dsc[r][2 * j],
                                         dsc[r][2 * j + 1], dsc[r][2 * j + 1], dsc[r][2 * j + 1], dsc[r][2 * j + 1]);
        }
        UNROLL
        for (int jt = 0; jt < NT; jt++) {
            const a8_block *ab = (const a8_block *)(act + (size_t)jt * act_stride) + 8 * sb + j;
            const __m256i a = _mm256_loadu_si256((const __m256i *)ab->qs);
            const __m256 da = _mm256_loadu_ps(ab->d);
            UNROLL
            for (int r = 0; r < NR; r++) {
                __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], a), ones);
                if (t == GGML_TYPE_Q6_K) dot = _mm256_add_epi32(dot, _mm256_loadu_si256((const __m256i *)ab->bias));
                acc[r][jt] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sv[r], da), acc[r][jt]);
            }
        }
    }
}

/* Per element: super-block sb into chain sb % NACC (see NACC). */
AI void kq_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nsb, float *out, size_t out_stride) {
    __m256 acc[NACC][KQ_MR][KQ_NT];
    UNROLL
    for (int c = 0; c < NACC; c++)
        UNROLL
        for (int r = 0; r < NR; r++)
            UNROLL
            for (int jt = 0; jt < NT; jt++) acc[c][r][jt] = _mm256_setzero_ps();
    if (FUSED(NR, NT)) {
        int64_t sb = 0;
        for (; sb + 2 <= nsb; sb += 2) {
            kq_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb, acc[0]);
            kq_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb + 1, acc[1]);
        }
        if (sb < nsb) kq_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb, acc[0]);
    } else {
        for (int64_t sb = 0; sb < nsb; sb += 2) kq_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb, acc[0]);
        for (int64_t sb = 1; sb < nsb; sb += 2) kq_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb, acc[1]);
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int jt = 0; jt < NT; jt++) out[(size_t)jt * out_stride + r] = hsum8(acc_combine(acc[0][r][jt], acc[1][r][jt]));
}

K2_TILES(q4_K, kq_tile, GGML_TYPE_Q4_K, KQ_NR, KQ_NT, KQ_DR, K / QK_K)
K2_TILES(q6_K, kq_tile, GGML_TYPE_Q6_K, KQ_NR, KQ_NT, KQ_DR, K / QK_K)

/* ---- 32-element block family: Q4_1, Q5_0, Q5_1, IQ4_NL (integer path) ---------------
 * The Q4_0 / Q8_0 scheme per block with the weights unpacked per type:
 *  - Q4_1 / Q5_1: q = nibble (| fifth bit << 4) unsigned, w = d*q + m: the minimum is one
 *    more FMA per block, m (lane 0 only) * d_a * sum(a) (the activation's dsum, traits
 *    q_min); 2 * 31 * 127 < 32768: VPMADDUBSW cannot saturate.
 *  - Q5_0: q = w + 16 unsigned, the -16 * sum(a) offset vector (traits q_zero 16).
 *  - IQ4_NL: the table value (VPSHUFB), signed int8: |w| x sign(a, w) as Q8_0 (traits
 *    q_signed; the largest |v| is 127: 2 * 127 * 127 < 32768).
 * The fifth bits (qh, bit j = element j) are spread to bytes with a shuffle and a
 * compare. Chains, tiles and the per-element sequence as a8_tile (block b into chain
 * b % NACC). */

AI int b2_is_i8(ggml_type t) {
    return t == IFD_TYPE_I8_G64 || t == IFD_TYPE_I8_G128;
}
AI int b2_is_i4(ggml_type t) {
    return t == IFD_TYPE_I4_G64 || t == IFD_TYPE_I4_G128;
}
/* Elements per scale group: 32 for the block family, 64 / 128 for the INT8 / INT4 types. */
AI int b2_grp(ggml_type t) {
    return t == IFD_TYPE_I8_G64 || t == IFD_TYPE_I4_G64 ? 64
           : t == IFD_TYPE_I8_G128 || t == IFD_TYPE_I4_G128 ? 128 : 32;
}
/* Bytes of one scale group (a block of the family). */
AI size_t b2_bytes(ggml_type t) {
    if (b2_is_i8(t)) return 2 + (size_t)b2_grp(t);
    if (b2_is_i4(t)) return 4 + (size_t)b2_grp(t) / 2;
    return t == GGML_TYPE_Q4_1 ? 20 : t == GGML_TYPE_Q5_0 ? 22 : t == GGML_TYPE_Q5_1 ? 24 : 18;
}
AI size_t b2_qs_off(ggml_type t) {
    if (b2_is_i8(t)) return 2;
    if (b2_is_i4(t)) return 4;
    return t == GGML_TYPE_Q4_1 ? 4 : t == GGML_TYPE_Q5_0 ? 6 : t == GGML_TYPE_Q5_1 ? 8 : 2;
}
AI int b2_has_min(ggml_type t) {
    return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || b2_is_i4(t);
}
/* Signed weights (|w| x sign(a, w)): IQ4_NL's table values and the INT8 quants. */
AI int b2_signed(ggml_type t) {
    return t == GGML_TYPE_IQ4_NL || b2_is_i8(t);
}
/* The header (f16 d, then m) of the scale group holding 32-element block b. */
AI const uint8_t *b2_hdr(ggml_type t, const uint8_t *row, int64_t b) {
    return row + (size_t)(b / (b2_grp(t) / 32)) * b2_bytes(t);
}

/* The 32 weight bytes of block b (header blk) in element order (unsigned q, or the
 * signed IQ4_NL value / INT8 quant). */
AI __m256i b2_block_q(ggml_type t, const uint8_t *blk, int64_t b) {
    const size_t qo = b2_qs_off(t) + (size_t)(b % (b2_grp(t) / 32)) * (b2_is_i8(t) ? 32 : 16);
    if (b2_is_i8(t)) return _mm256_loadu_si256((const __m256i *)(blk + qo));
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + qo)));
    __m256i q = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                 _mm256_set1_epi8(0x0F));
    if (t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1) {
        int32_t qh;
        memcpy(&qh, blk + (t == GGML_TYPE_Q5_0 ? 2 : 4), 4);
        /* byte j <- byte j / 8 of qh, then its bit j % 8 */
        __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32(qh),
                                        _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                           0x0303030303030303LL));
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
        q = _mm256_or_si256(q, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
    }
    if (t == GGML_TYPE_IQ4_NL)
        q = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values)), q);
    return q;
}

/* One block b of the tile into the chain acc (cf. a8_step). */
AI void b2_step(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nb, int64_t b, __m256 (*acc)[INT]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i wq[IMR];
    __m256 dw[IMR], mw[IMR];
    UNROLL
    for (int r = 0; r < NR; r++) {
        const uint8_t *blk = b2_hdr(t, w0 + (size_t)r * row_bytes, b);
        dw[r] = bcast_f16_tab(blk);
        if (b2_has_min(t)) mw[r] = _mm256_blend_ps(_mm256_setzero_ps(), bcast_f16_tab(blk + 2), 1);
        wq[r] = b2_block_q(t, blk, b);
    }
    UNROLL
    for (int j = 0; j < NT; j++) {
        const uint8_t *aj = act + (size_t)j * act_stride;
        const a8_block *ab = (const a8_block *)aj + b;
        const __m256i a = _mm256_loadu_si256((const __m256i *)ab->qs);
        const __m256 da = _mm256_loadu_ps(ab->d);
        __m256 ds = _mm256_setzero_ps();
        if (b2_has_min(t)) ds = _mm256_broadcast_ss((const float *)((const a8_block *)aj + nb) + b);
        UNROLL
        for (int r = 0; r < NR; r++) {
            __m256i dot;
            if (b2_signed(t)) {
                dot = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wq[r], wq[r]),
                                                             _mm256_sign_epi8(a, wq[r])), ones);
            } else {
                dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], a), ones);
                if (t == GGML_TYPE_Q5_0) dot = _mm256_add_epi32(dot, _mm256_loadu_si256((const __m256i *)ab->bias));
            }
            acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw[r], da), acc[r][j]);
            if (b2_has_min(t)) acc[r][j] = _mm256_fmadd_ps(mw[r], ds, acc[r][j]);
        }
    }
}

AI void b2_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nb, float *out, size_t out_stride) {
    __m256 acc[NACC][IMR][INT];
    UNROLL
    for (int c = 0; c < NACC; c++)
        UNROLL
        for (int r = 0; r < NR; r++)
            UNROLL
            for (int j = 0; j < NT; j++) acc[c][r][j] = _mm256_setzero_ps();
    if (FUSED(NR, NT)) {
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            b2_step(NR, NT, t, w0, row_bytes, act, act_stride, nb, b, acc[0]);
            b2_step(NR, NT, t, w0, row_bytes, act, act_stride, nb, b + 1, acc[1]);
        }
        if (b < nb) b2_step(NR, NT, t, w0, row_bytes, act, act_stride, nb, b, acc[0]);
    } else {
        for (int64_t b = 0; b < nb; b += 2) b2_step(NR, NT, t, w0, row_bytes, act, act_stride, nb, b, acc[0]);
        for (int64_t b = 1; b < nb; b += 2) b2_step(NR, NT, t, w0, row_bytes, act, act_stride, nb, b, acc[1]);
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = hsum8(acc_combine(acc[0][r][j], acc[1][r][j]));
}

K2_TILES(q4_1, b2_tile, GGML_TYPE_Q4_1, INR, INT, IDR, K / 32)
K2_TILES(q5_0, b2_tile, GGML_TYPE_Q5_0, INR, INT, IDR, K / 32)
K2_TILES(q5_1, b2_tile, GGML_TYPE_Q5_1, INR, INT, IDR, K / 32)
K2_TILES(iq4_nl, b2_tile, GGML_TYPE_IQ4_NL, INR, INT, IDR, K / 32)
/* INT8 / INT4 groups: G / 32 blocks under one header (b2_hdr) */
K2_TILES(i8_g64, b2_tile, IFD_TYPE_I8_G64, INR, INT, IDR, K / 32)
K2_TILES(i8_g128, b2_tile, IFD_TYPE_I8_G128, INR, INT, IDR, K / 32)
K2_TILES(i4_g64, b2_tile, IFD_TYPE_I4_G64, INR, INT, IDR, K / 32)
K2_TILES(i4_g128, b2_tile, IFD_TYPE_I4_G128, INR, INT, IDR, K / 32)
/* ---- end of the 32-element block family ---------------------------------------------- */

/* ---- Q5_K / Q3_K / Q2_K / IQ4_XS, integer path (unpacked tiles) ----------------------
 * As Q4_K / Q6_K above, one 32-element sub-block at a time: unsigned quants (Q5_K:
 * nibble + fifth bit; Q3_K: 2 bits + hmask bit, 0..7 with the -4 * sum per 16 in the
 * offset vector; Q2_K: 2 bits) through VPMADDUBSW + VPMADDWD, IQ4_XS's signed table
 * values (VPSHUFB) through the sign trick of Q8_0. Minimum terms (Q5_K: 8 per
 * super-block against dsum, Q2_K: 16 against the per-16 dsum) first, per super-block.
 * The per-element sequence is the same for every tile (see NACC): batch invariant. */

/* Unsigned (IQ4_XS: signed) quants of sub-block j (32 elements, in order). */
AI __m256i kx_block(ggml_type t, const uint8_t *blk, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (t == GGML_TYPE_IQ4_XS) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(blk + 8 + 16 * j));
        const __m256i vv = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
        const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
        return _mm256_shuffle_epi8(tab, _mm256_and_si256(vv, m4));
    }
    if (t == GGML_TYPE_Q5_K) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 48 + 32 * (j >> 1)));
        const __m256i lo = (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
        const __m256i bm = _mm256_set1_epi8((char)(1u << j));
        const __m256i h = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(blk + 16)), bm);
        return _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(h, bm), _mm256_set1_epi8(0x10)));
    }
    /* Q2_K / Q3_K: 2-bit fields of qs bytes 32(j/4) .. +31 at shift 2(j%4) */
    const uint8_t *qs = blk + (t == GGML_TYPE_Q2_K ? 16 : 32);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j >> 2)));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(v, 2 * (j & 3)), _mm256_set1_epi8(3));
    if (t == GGML_TYPE_Q2_K) return lo;
    const __m256i bm = _mm256_set1_epi8((char)(1u << j));
    const __m256i h = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)blk), bm);
    return _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(h, bm), _mm256_set1_epi8(4)));
}

/* The 16 six-bit Q3_K scales - 32 as int8 (bytes 96..107: low nibbles in 0..7,
 * high 2 bits in 8..11; see q3_K_scale in quant.c). */
AI __m128i q3k_scales16(const uint8_t *blk) {
    uint64_t a0;
    uint32_t a2;
    memcpy(&a0, blk + 96, 8);
    memcpy(&a2, blk + 104, 4);
    const __m128i raw = _mm_insert_epi32(_mm_cvtsi64_si128((long long)a0), (int)a2, 2);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(raw, 0x44), _mm_setr_epi32(0, 0, 4, 4)),
                                     _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(raw, 0xAA), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi32(hi, 4)), _mm_set1_epi8(32));
}

/* Per super-block scales: dsc[0..7] (Q5_K, IQ4_XS: per 32) or dsc[0..15] (Q3_K, Q2_K:
 * per 16); the minimum vectors dm[0..1] (Q5_K: dm[0]; Q2_K: both). */
AI void kx_scales(ggml_type t, const uint8_t *blk, float *dsc, __m256 *dm) {
    if (t == GGML_TYPE_Q5_K) {
        q4k_scales8(blk, dsc, &dm[0]);
    } else if (t == GGML_TYPE_Q2_K) {
        const __m128i b = _mm_loadu_si128((const __m128i *)blk);
        const __m256 d = bcast_f16(ld16(blk + 80)), dmin = bcast_f16(ld16(blk + 82));
        const __m256i s0 = _mm256_cvtepu8_epi32(b), s1 = _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8));
        const __m256i f = _mm256_set1_epi32(0xF);
        _mm256_storeu_ps(dsc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(s0, f))));
        _mm256_storeu_ps(dsc + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(s1, f))));
        dm[0] = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(s0, 4)));
        dm[1] = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(s1, 4)));
    } else if (t == GGML_TYPE_Q3_K) {
        const __m128i v = q3k_scales16(blk);
        const __m256 d = bcast_f16(ld16(blk + 108));
        _mm256_storeu_ps(dsc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
        _mm256_storeu_ps(dsc + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))));
    } else { /* IQ4_XS */
        uint32_t L;
        memcpy(&L, blk + 4, 4);
        const __m128i lo = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)(L & 0x0F0F0F0Fu)),
                                             _mm_cvtsi32_si128((int)((L >> 4) & 0x0F0F0F0Fu)));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(ld16(blk + 2)),
                                                              _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                            _mm256_set1_epi32(3));
        const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(lo), _mm256_slli_epi32(hi, 4)),
                                            _mm256_set1_epi32(32));
        _mm256_storeu_ps(dsc, _mm256_mul_ps(bcast_f16(ld16(blk)), _mm256_cvtepi32_ps(ls)));
    }
}

AI size_t kx_sb_bytes(ggml_type t) {
    return t == GGML_TYPE_Q5_K ? sizeof(block_q5_K)
           : t == GGML_TYPE_Q3_K ? sizeof(block_q3_K)
           : t == GGML_TYPE_Q2_K ? sizeof(block_q2_K)
                                 : sizeof(block_iq4_xs);
}

/* One super-block sb of the tile into the chain acc (the kq_step sequence). */
AI void kx_step(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nsb, int64_t sb, __m256 (*acc)[KQ_NT]) {
    const size_t sbb = kx_sb_bytes(t);
    const int s16 = t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q2_K; /* a scale per 16 */
    const __m256i ones = _mm256_set1_epi16(1);
    float dsc[KQ_MR][16];
    UNROLL
    for (int r = 0; r < NR; r++) {
        const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)sb * sbb;
        __m256 dm[2];
        kx_scales(t, blk, dsc[r], dm);
        if (t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q2_K) {
            UNROLL
            for (int jt = 0; jt < NT; jt++) {
                const float *dsum = (const float *)((const a8_block *)(act + (size_t)jt * act_stride) + 8 * nsb);
                if (t == GGML_TYPE_Q5_K) {
                    acc[r][jt] = _mm256_fnmadd_ps(dm[0], _mm256_loadu_ps(dsum + 8 * sb), acc[r][jt]);
                } else {
                    acc[r][jt] = _mm256_fnmadd_ps(dm[0], _mm256_loadu_ps(dsum + 16 * sb), acc[r][jt]);
                    acc[r][jt] = _mm256_fnmadd_ps(dm[1], _mm256_loadu_ps(dsum + 16 * sb + 8), acc[r][jt]);
                }
            }
        }
    }
    UNROLL
    for (int j = 0; j < 8; j++) {
        __m256i wq[KQ_MR];
        __m256 sv[KQ_MR];
        UNROLL
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)sb * sbb;
            wq[r] = kx_block(t, blk, j);
            sv[r] = !s16 ? _mm256_set1_ps(dsc[r][j])
                         : _mm256_setr_ps(dsc[r][2 * j], dsc[r][2 * j], dsc[r][2 * j], dsc[r][2 * j],
                                          dsc[r][2 * j + 1], dsc[r][2 * j + 1], dsc[r][2 * j + 1], dsc[r][2 * j + 1]);
        }
        UNROLL
        for (int jt = 0; jt < NT; jt++) {
            const a8_block *ab = (const a8_block *)(act + (size_t)jt * act_stride) + 8 * sb + j;
            const __m256i a = _mm256_loadu_si256((const __m256i *)ab->qs);
            const __m256 da = _mm256_loadu_ps(ab->d);
            UNROLL
            for (int r = 0; r < NR; r++) {
                __m256i dot;
                if (t == GGML_TYPE_IQ4_XS) {
                    const __m256i aw = _mm256_sign_epi8(wq[r], wq[r]);
                    const __m256i sa = _mm256_sign_epi8(a, wq[r]);
                    dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sa), ones);
                } else {
                    dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], a), ones);
                }
                if (t == GGML_TYPE_Q3_K) dot = _mm256_add_epi32(dot, _mm256_loadu_si256((const __m256i *)ab->bias));
                acc[r][jt] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sv[r], da), acc[r][jt]);
            }
        }
    }
}

/* Per element: super-block sb into chain sb % NACC (as kq_tile). */
AI void kx_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nsb, float *out, size_t out_stride) {
    __m256 acc[NACC][KQ_MR][KQ_NT];
    UNROLL
    for (int c = 0; c < NACC; c++)
        UNROLL
        for (int r = 0; r < NR; r++)
            UNROLL
            for (int jt = 0; jt < NT; jt++) acc[c][r][jt] = _mm256_setzero_ps();
    if (FUSED(NR, NT)) {
        int64_t sb = 0;
        for (; sb + 2 <= nsb; sb += 2) {
            kx_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb, acc[0]);
            kx_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb + 1, acc[1]);
        }
        if (sb < nsb) kx_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb, acc[0]);
    } else {
        for (int64_t sb = 0; sb < nsb; sb += 2) kx_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb, acc[0]);
        for (int64_t sb = 1; sb < nsb; sb += 2) kx_step(NR, NT, t, w0, row_bytes, act, act_stride, nsb, sb, acc[1]);
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int jt = 0; jt < NT; jt++) out[(size_t)jt * out_stride + r] = hsum8(acc_combine(acc[0][r][jt], acc[1][r][jt]));
}

K2_TILES(q5_K, kx_tile, GGML_TYPE_Q5_K, KQ_NR, KQ_NT, KQ_DR, K / QK_K)
K2_TILES(q3_K, kx_tile, GGML_TYPE_Q3_K, KQ_NR, KQ_NT, KQ_DR, K / QK_K)
K2_TILES(q2_K, kx_tile, GGML_TYPE_Q2_K, KQ_NR, KQ_NT, KQ_DR, K / QK_K)
K2_TILES(iq4_xs, kx_tile, GGML_TYPE_IQ4_XS, KQ_NR, KQ_NT, KQ_DR, K / QK_K)
/* ---- end Q5_K / Q3_K / Q2_K / IQ4_XS ---------------------------------------------------- */

/* ---- packed weights: 8 rows in lanes (Q4_0, Q5_0, Q8_0, IQ4_NL; Q4_K, Q6_K below) --
 * Prepared once (kern_pack): a group of 8 rows is interleaved so that one ymm holds the
 * same 4-byte column group of all 8 rows; VPMADDUBSW against a broadcast of 4 activation
 * bytes then VPMADDWD with ones give each row's 4-element dot in its int32 lane, so a
 * block advances 8 outputs of one token with no horizontal sum; per block and token one
 * convert and one FMA with (d_w vector * d_a) finish it. Q4_0: the 8 int16 products of a
 * block are summed before VPMADDWD (8 * 2 * 15 * 127 < 32768: exact), and the
 * activation's -8 * sum(a) offset is added in int32, as the unpacked kernel does. Q8_0:
 * |w| x sign(a, w) per column group (2 * 128 * 127 < 32768), each widened by VPMADDWD.
 * Per lane (row, token) the sequence is fixed (blocks in K order, one accumulator), the
 * same for every token tile and for decode: batch invariant. Activations: the
 * k2_act_prepare rows.
 *
 * Group layout, per pair of blocks p: f16 d[2][8] (32 bytes), then block 2p's and block
 * 2p+1's quants, QB bytes each: column group c (4 bytes) of row i at 32 c + 4 i (Q4_0: 4
 * groups of the 16 nibble bytes, low nibbles elements 4c.., high 16 + 4c..; Q8_0: 8
 * groups of the int8 quants; Q5_0: Q4_0's 128 bytes, then a 32-byte plane of fifth bits,
 * byte 4 i + k holding bit c <- element 4c + k and bit 4 + c <- element 16 + 4c + k of
 * row i). An odd last block leaves its pair's second half zero
 * (never read). As many bytes as the original up to that pad. */

#define P2_NR 8
#define P2_NT 5  /* tokens per tile, Q4_0 / Q8_0 */
#define P2_PF 4096 /* prefetch distance of a group's first token tile, bytes */
#define P2_KNT 6 /* Q4_K, Q5_K */

AI size_t p2_qb(ggml_type t) { /* Q4_0 and IQ4_NL: nibbles; Q5_0: nibbles + fifth-bit plane */
    return t == GGML_TYPE_Q8_0 ? 256 : t == GGML_TYPE_Q5_0 ? 160 : 128;
}
AI size_t p2_pb(ggml_type t) {
    return 32 + 2 * p2_qb(t);
}
static inline int32_t ld32i(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static size_t p2_gb_q4_0(int64_t K) {
    return (size_t)((K / 32 + 1) / 2) * p2_pb(GGML_TYPE_Q4_0);
}
static size_t p2_gb_q5_0(int64_t K) {
    return (size_t)((K / 32 + 1) / 2) * p2_pb(GGML_TYPE_Q5_0);
}
static size_t p2_gb_q8_0(int64_t K) {
    return (size_t)((K / 32 + 1) / 2) * p2_pb(GGML_TYPE_Q8_0);
}

static void p2_pack_a8(ggml_type t, uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    const int64_t nb = K / 32;
    const size_t QB = p2_qb(t), PB = p2_pb(t);
    memset(dst, 0, (size_t)((nb + 1) / 2) * PB);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pd = dst + (size_t)(b / 2) * PB;
        const int h = (int)(b & 1);
        for (int i = 0; i < P2_NR; i++) {
            const uint8_t *row = w + (size_t)i * rb;
            if (t == GGML_TYPE_Q5_0) { /* Q4_0's nibbles, then the fifth-bit plane */
                const block_q5_0 *blk = (const block_q5_0 *)row + b;
                uint32_t qh;
                memcpy(&qh, blk->qh, 4);
                memcpy(pd + 16 * h + 2 * i, &blk->d, 2);
                for (int c = 0; c < 4; c++) {
                    memcpy(pd + 32 + h * QB + 32 * c + 4 * i, blk->qs + 4 * c, 4);
                    for (int k = 0; k < 4; k++) /* byte 4i + k: bit c <- element 4c + k, */
                        pd[32 + h * QB + 128 + 4 * i + k] |= /* bit 4 + c <- 16 + 4c + k */
                            (uint8_t)((((qh >> (4 * c + k)) & 1u) << c) |
                                      (((qh >> (16 + 4 * c + k)) & 1u) << (4 + c)));
                }
            } else if (t != GGML_TYPE_Q8_0) { /* Q4_0, IQ4_NL: f16 d, 16 nibble bytes */
                const block_q4_0 *blk = (const block_q4_0 *)row + b;
                memcpy(pd + 16 * h + 2 * i, &blk->d, 2);
                for (int c = 0; c < 4; c++)
                    memcpy(pd + 32 + h * QB + 32 * c + 4 * i, blk->qs + 4 * c, 4);
            } else {
                const block_q8_0 *blk = (const block_q8_0 *)row + b;
                memcpy(pd + 16 * h + 2 * i, &blk->d, 2);
                for (int c = 0; c < 8; c++)
                    memcpy(pd + 32 + h * QB + 32 * c + 4 * i, blk->qs + 4 * c, 4);
            }
        }
    }
}
static void p2_pack_q4_0(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    p2_pack_a8(GGML_TYPE_Q4_0, dst, w, rb, K);
}
static void p2_pack_q5_0(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    p2_pack_a8(GGML_TYPE_Q5_0, dst, w, rb, K);
}
static void p2_pack_q8_0(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    p2_pack_a8(GGML_TYPE_Q8_0, dst, w, rb, K);
}
static void p2_pack_iq4_nl(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    p2_pack_a8(GGML_TYPE_IQ4_NL, dst, w, rb, K);
}

AI __m256i bc32(const uint8_t *p) {
    return _mm256_set1_epi32(ld32i(p));
}

/* The signed 4-bit-table families' (IQ4_NL, IQ4_XS) block dot of one token: w[c] the
 * table values of column group c (c < 4: low nibbles, elements 4c..; c >= 4: high,
 * 16 + 4(c - 4)..), aw[c] = |w[c]|; |w| x sign(a, w) per group (2 * 127 * 127 < 32768),
 * each widened by VPMADDWD, summed in a fixed tree (exact int32). */
AI __m256i sdot_nib8(const __m256i *aw, const __m256i *w, const uint8_t *a, __m256i ones) {
    __m256i p[8];
    UNROLL
    for (int c = 0; c < 8; c++) {
        const uint8_t *ac = a + (c < 4 ? 4 * c : 16 + 4 * (c - 4));
        p[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(bc32(ac), w[c])), ones);
    }
    return _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3])),
                            _mm256_add_epi32(_mm256_add_epi32(p[4], p[5]), _mm256_add_epi32(p[6], p[7])));
}

/* One 8-row group x NT tokens, Q4_0 / Q8_0 / IQ4_NL. IQ4_NL: each nibble's table value
 * (VPSHUFB), a signed int8, then |w| x sign(a, w) per column group and half as Q8_0
 * (2 * 127 * 127 < 32768), each widened by VPMADDWD. */
AI void p2_a8_body(const int NT, ggml_type t, const uint8_t *grp, const uint8_t *act, size_t as,
                   int64_t nb, float *out, size_t os, int pf) {
    const size_t QB = p2_qb(t), PB = p2_pb(t);
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[P2_NT];
    UNROLL
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = grp + (size_t)(b >> 1) * PB;
        const int h = (int)(b & 1);
        const uint8_t *q = pb + 32 + h * QB;
        if (pf) /* a group's first token tile streams it from DRAM: fetch ahead (a hint) */
            for (size_t l = 0; l < QB; l += 64) _mm_prefetch((const char *)q + P2_PF + l, _MM_HINT_T0);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pb + 16 * h)));
        if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q5_0) {
            /* Q5_0: q = nibble | fifth bit << 4 (0..31); the plane's bit c (low half) or
             * 4 + c (high half) moved to bit 4 by a 16-bit shift (the mask keeps each
             * byte's own bit). Its products sum in int16 two groups at a time (2 * 2 * 2 *
             * 31 * 127 < 32768), Q4_0's all four; the offset (-8 or -16 * sum(a)) in int32. */
            const bool q5 = t == GGML_TYPE_Q5_0;
            const __m256i m5 = _mm256_set1_epi8(0x10);
            const __m256i hp = q5 ? _mm256_loadu_si256((const __m256i *)(q + 128)) : _mm256_setzero_si256();
            __m256i wl[4], wh[4];
            UNROLL
            for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                wl[c] = _mm256_and_si256(v, m4);
                wh[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (q5) {
                    wl[c] = _mm256_or_si256(wl[c], _mm256_and_si256(_mm256_slli_epi16(hp, 4 - c), m5));
                    wh[c] = _mm256_or_si256(wh[c], _mm256_and_si256(_mm256_srli_epi16(hp, c), m5));
                }
            }
            UNROLL
            for (int j = 0; j < NT; j++) {
                const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + b;
                const uint8_t *a = (const uint8_t *)ab->qs;
                __m256i s[4];
                UNROLL
                for (int c = 0; c < 4; c++)
                    s[c] = _mm256_add_epi16(_mm256_maddubs_epi16(wl[c], bc32(a + 4 * c)),
                                            _mm256_maddubs_epi16(wh[c], bc32(a + 16 + 4 * c)));
                const __m256i s01 = _mm256_add_epi16(s[0], s[1]), s23 = _mm256_add_epi16(s[2], s[3]);
                const __m256i d32 = q5 ? _mm256_add_epi32(_mm256_madd_epi16(s01, ones), _mm256_madd_epi16(s23, ones))
                                       : _mm256_madd_epi16(_mm256_add_epi16(s01, s23), ones);
                const __m256i dot = _mm256_add_epi32(d32, _mm256_set1_epi32(ab->bias[0]));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(ab->d[0])), acc[j]);
            }
        } else if (t == GGML_TYPE_IQ4_NL) {
            const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
            __m256i w[8], aw[8]; /* column group c: low nibbles w[c], high w[4 + c] */
            UNROLL
            for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                w[c] = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
                w[4 + c] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            }
            UNROLL
            for (int c = 0; c < 8; c++) aw[c] = _mm256_abs_epi8(w[c]);
            UNROLL
            for (int j = 0; j < NT; j++) {
                const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + b;
                const __m256i dot = sdot_nib8(aw, w, (const uint8_t *)ab->qs, ones);
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(ab->d[0])), acc[j]);
            }
        } else {
            __m256i aw[8];
            UNROLL
            for (int c = 0; c < 8; c++) aw[c] = _mm256_abs_epi8(_mm256_loadu_si256((const __m256i *)(q + 32 * c)));
            UNROLL
            for (int j = 0; j < NT; j++) {
                const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + b;
                const uint8_t *a = (const uint8_t *)ab->qs;
                __m256i s[8];
                UNROLL
                for (int c = 0; c < 8; c++) {
                    const __m256i wv = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                    s[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(bc32(a + 4 * c), wv)), ones);
                }
                const __m256i dot = _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3])),
                    _mm256_add_epi32(_mm256_add_epi32(s[4], s[5]), _mm256_add_epi32(s[6], s[7])));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(ab->d[0])), acc[j]);
            }
        }
    }
    UNROLL
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + (size_t)j * os, acc[j]);
}

/* Groups in order; per group the full token tiles, then the rest in one narrower tile
 * (KERN_REM: the same per-lane sequence). */
#define P2_A8_R(r, ...) p2_a8_body((r), __VA_ARGS__)
#define P2_GEMM(NAME, T)                                                                       \
    static void NAME(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act, size_t as, \
                     int64_t K, float *out, size_t os, int32_t nt) {                          \
        for (int64_t g = 0; g < ng; g++) {                                                     \
            const uint8_t *gp = grp + (size_t)g * gb;                                          \
            float *og = out + (size_t)g * P2_NR;                                               \
            int32_t j = 0;                                                                     \
            for (; j + P2_NT <= nt; j += P2_NT)                                                \
                p2_a8_body(P2_NT, T, gp, act + (size_t)j * as, as, K / 32, og + (size_t)j * os, os, j == 0); \
            if (j < nt)                                                                        \
                KERN_REM(P2_A8_R, P2_NT, nt - j, T, gp, act + (size_t)j * as, as, K / 32,      \
                         og + (size_t)j * os, os, j == 0)                                      \
        }                                                                                      \
    }
P2_GEMM(p2_gemm_q4_0, GGML_TYPE_Q4_0)
P2_GEMM(p2_gemm_q5_0, GGML_TYPE_Q5_0)
P2_GEMM(p2_gemm_q8_0, GGML_TYPE_Q8_0)
P2_GEMM(p2_gemm_iq4_nl, GGML_TYPE_IQ4_NL)

/* ---- packed INT8 / INT4 groups and Q4_1: 8 rows in lanes -------------------------------
 * IFD_TYPE_I8_G64 / I8_G128, IFD_TYPE_I4_G64 / I4_G128 and Q4_1 (the group-32 INT4), one
 * body parameterised by the group size G and the bits, in the Q4_0 / Q8_0 interleave
 * above (column group c of row i at 32 c + 4 i). Per group of G elements:
 *   per 32-element sub-block s: isum = int dot (INT8: |w| x sign(a, w) per column group,
 *   each widened by VPMADDWD; INT4: the 8 int16 products of the sub-block summed before
 *   VPMADDWD, 8 * 2 * 15 * 127 < 32768: exact), ag = fma(float(isum), d_a[s], ag);
 *   then out = fma(d_w, ag, out) and (INT4) out = fma(m_w, dsum_g, out), dsum_g the sum
 *   in sub-block order of the group's d_a * sum(a).
 * Per lane the sequence is fixed whatever the token tile: batch invariant. Loop orders
 * (measured, process CPU time at T = 512): INT8 column group by column group across the
 * tokens; INT4 the sub-block's 8 weight vectors once, then token by token (as Q4_0).
 *
 * Group layout, unit by unit (INT8: a pair of groups, INT4 / Q4_1: one group): a 32-byte
 * header (INT8: f16 d[2][8]; INT4: f16 d[8], f16 m[8]), then the unit's sub-blocks, SB
 * bytes each of 8 rows (INT8: 8 column groups = 256 bytes of int8 quants; INT4: 4 column
 * groups of the 16 nibble bytes = 128). An odd last INT8 group leaves its pair's second
 * half zero (never read). Exactly the original's bytes up to that pad. */

#define G2_NT 4 /* tokens per tile */
#ifndef G2_DEC
#define G2_DEC 2 /* groups streamed side by side at decode (4: INT8 slower, INT4 within noise, measured) */
#endif

AI int g2_i8(ggml_type t) {
    return t == IFD_TYPE_I8_G64 || t == IFD_TYPE_I8_G128;
}
AI int g2_g(ggml_type t) {
    return t == GGML_TYPE_Q4_1 ? 32 : t == IFD_TYPE_I8_G128 || t == IFD_TYPE_I4_G128 ? 128 : 64;
}
AI int g2_upg(ggml_type t) { /* groups per unit */
    return g2_i8(t) ? 2 : 1;
}
AI size_t g2_sb(ggml_type t) { /* bytes of one sub-block of the 8 rows */
    return g2_i8(t) ? 256 : 128;
}
AI size_t g2_ub(ggml_type t) { /* bytes of one unit */
    return 32 + (size_t)g2_upg(t) * (size_t)(g2_g(t) / 32) * g2_sb(t);
}
AI size_t g2_gb(ggml_type t, int64_t K) {
    const int64_t ng = K / g2_g(t);
    return (size_t)((ng + g2_upg(t) - 1) / g2_upg(t)) * g2_ub(t);
}

AI void g2_pack(ggml_type t, uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    const int G = g2_g(t), NS = G / 32, I8 = g2_i8(t);
    const size_t SB = g2_sb(t), UB = g2_ub(t), GB = I8 ? 2 + (size_t)G : 4 + (size_t)G / 2;
    const int64_t ng = K / G;
    memset(dst, 0, g2_gb(t, K));
    for (int64_t g = 0; g < ng; g++) {
        uint8_t *u = dst + (size_t)(g / g2_upg(t)) * UB;
        const int h = (int)(g % g2_upg(t));
        for (int i = 0; i < P2_NR; i++) {
            const uint8_t *blk = w + (size_t)i * rb + (size_t)g * GB;
            memcpy(u + 16 * h + 2 * i, blk, 2); /* d */
            if (!I8) memcpy(u + 16 + 2 * i, blk + 2, 2); /* m */
            for (int s = 0; s < NS; s++) {
                uint8_t *q = u + 32 + (size_t)(h * NS + s) * SB;
                for (int c = 0; c < (I8 ? 8 : 4); c++)
                    memcpy(q + 32 * c + 4 * i, blk + (I8 ? 2 + 32 * s : 4 + 16 * s) + 4 * c, 4);
            }
        }
    }
}

/* One 8-row group x NT tokens: out[j * os + i]. */
AI void g2_body(const int NT, ggml_type t, const uint8_t *grp, const uint8_t *act, size_t as,
                int64_t K, float *out, size_t os, int pf) {
    const int G = g2_g(t), NS = G / 32, I8 = g2_i8(t), UPG = g2_upg(t);
    const int64_t nb = K / 32, ng = K / G;
    const size_t SB = g2_sb(t), UB = g2_ub(t);
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[G2_NT];
    UNROLL
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *u = grp + (size_t)(g / UPG) * UB;
        const int h = (int)(g % UPG);
        __m256 ag[G2_NT];
        UNROLL
        for (int j = 0; j < NT; j++) ag[j] = _mm256_setzero_ps();
        for (int s = 0; s < NS; s++) {
            const int64_t b = g * NS + s;
            const uint8_t *q = u + 32 + (size_t)(h * NS + s) * SB;
            if (pf) /* a group's first token tile streams it from DRAM: fetch ahead (a hint) */
                for (size_t l = 0; l < SB; l += 64) _mm_prefetch((const char *)q + P2_PF + l, _MM_HINT_T0);
            __m256i ia[G2_NT];
            if (I8) {
                UNROLL
                for (int c = 0; c < 8; c++) {
                    const __m256i wv = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                    const __m256i aw = _mm256_abs_epi8(wv);
                    UNROLL
                    for (int j = 0; j < NT; j++) {
                        const uint8_t *a = (const uint8_t *)((const a8_block *)(act + (size_t)j * as) + b)->qs;
                        const __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(bc32(a + 4 * c), wv)), ones);
                        ia[j] = c == 0 ? d : _mm256_add_epi32(ia[j], d);
                    }
                }
            } else { /* the sub-block's 8 weight vectors once, then token by token (as Q4_0) */
                __m256i wl[4], wh[4];
                UNROLL
                for (int c = 0; c < 4; c++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                    wl[c] = _mm256_and_si256(v, m4);
                    wh[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                }
                UNROLL
                for (int j = 0; j < NT; j++) {
                    const uint8_t *a = (const uint8_t *)((const a8_block *)(act + (size_t)j * as) + b)->qs;
                    __m256i p[4];
                    UNROLL
                    for (int c = 0; c < 4; c++)
                        p[c] = _mm256_add_epi16(_mm256_maddubs_epi16(wl[c], bc32(a + 4 * c)),
                                                _mm256_maddubs_epi16(wh[c], bc32(a + 16 + 4 * c)));
                    const __m256i s16 = _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
                    ia[j] = _mm256_madd_epi16(s16, ones);
                }
            }
            UNROLL
            for (int j = 0; j < NT; j++) {
                const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + b;
                ag[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[j]), _mm256_set1_ps(ab->d[0]), ag[j]);
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(u + 16 * h)));
        UNROLL
        for (int j = 0; j < NT; j++) acc[j] = _mm256_fmadd_ps(dv, ag[j], acc[j]);
        if (!I8) {
            const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(u + 16)));
            UNROLL
            for (int j = 0; j < NT; j++) {
                const float *ds = (const float *)((const a8_block *)(act + (size_t)j * as) + nb) + g * NS;
                float sg = ds[0];
                for (int s = 1; s < NS; s++) sg += ds[s];
                acc[j] = _mm256_fmadd_ps(mv, _mm256_set1_ps(sg), acc[j]);
            }
        }
    }
    UNROLL
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + (size_t)j * os, acc[j]);
}

/* Decode: NG 8-row groups (gb bytes apart, outputs 8 apart) x one token. Per row the
 * arithmetic of g2_body(1) (isum is an exact integer whatever order its products are
 * added in; ag and out chain in the same order), so the bits are the same; the groups'
 * weights stream side by side (NG prefetch streams) and each activation vector is
 * loaded once for all. */
AI void g2_body_dec(const int NG, ggml_type t, const uint8_t *grp, size_t gb, const uint8_t *act,
                    int64_t K, float *out) {
    const int G = g2_g(t), NS = G / 32, I8 = g2_i8(t), UPG = g2_upg(t);
    const int64_t nb = K / 32, ng = K / G;
    const size_t SB = g2_sb(t), UB = g2_ub(t);
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const a8_block *ab = (const a8_block *)act;
    const float *dsum = (const float *)(ab + nb);
    __m256 acc[G2_DEC];
    UNROLL
    for (int r = 0; r < NG; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *u = grp + (size_t)(g / UPG) * UB;
        const int h = (int)(g % UPG);
        __m256 ag[G2_DEC];
        UNROLL
        for (int r = 0; r < NG; r++) ag[r] = _mm256_setzero_ps();
        for (int s = 0; s < NS; s++) {
            const int64_t b = g * NS + s;
            const uint8_t *q = u + 32 + (size_t)(h * NS + s) * SB; /* group r's: q + r * gb */
            const uint8_t *a = (const uint8_t *)ab[b].qs;
            /* P2_PF ahead in each stream's own sequence: past a group's end, the same
             * offset of the next round's group (a hint: may point past the matrix) */
            size_t pf = (size_t)(q - grp) + P2_PF;
            if (pf >= gb) pf += (size_t)(NG - 1) * gb;
            for (size_t l = 0; l < SB; l += 64)
                UNROLL
                for (int r = 0; r < NG; r++) _mm_prefetch((const char *)grp + pf + (size_t)r * gb + l, _MM_HINT_T0);
            __m256i is[G2_DEC];
            if (I8) {
                UNROLL
                for (int c = 0; c < 8; c++) {
                    const __m256i av = bc32(a + 4 * c);
                    UNROLL
                    for (int r = 0; r < NG; r++) {
                        const __m256i w = _mm256_loadu_si256((const __m256i *)(q + (size_t)r * gb + 32 * c));
                        const __m256i d = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(av, w)), ones);
                        is[r] = c == 0 ? d : _mm256_add_epi32(is[r], d);
                    }
                }
            } else {
                __m256i p[G2_DEC];
                UNROLL
                for (int r = 0; r < NG; r++) p[r] = _mm256_setzero_si256();
                UNROLL
                for (int c = 0; c < 4; c++) {
                    const __m256i al = bc32(a + 4 * c), ah = bc32(a + 16 + 4 * c);
                    UNROLL
                    for (int r = 0; r < NG; r++) {
                        const __m256i v = _mm256_loadu_si256((const __m256i *)(q + (size_t)r * gb + 32 * c));
                        p[r] = _mm256_add_epi16(p[r], _mm256_add_epi16(
                            _mm256_maddubs_epi16(_mm256_and_si256(v, m4), al),
                            _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), ah)));
                    }
                }
                UNROLL
                for (int r = 0; r < NG; r++) is[r] = _mm256_madd_epi16(p[r], ones);
            }
            const __m256 da = _mm256_set1_ps(ab[b].d[0]);
            UNROLL
            for (int r = 0; r < NG; r++) ag[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r]), da, ag[r]);
        }
        UNROLL
        for (int r = 0; r < NG; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(u + (size_t)r * gb + 16 * h))),
                                     ag[r], acc[r]);
        if (!I8) {
            const float *ds = dsum + g * NS;
            float sg = ds[0];
            for (int s = 1; s < NS; s++) sg += ds[s];
            const __m256 sv = _mm256_set1_ps(sg);
            UNROLL
            for (int r = 0; r < NG; r++)
                acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(u + (size_t)r * gb + 16))),
                                         sv, acc[r]);
        }
    }
    UNROLL
    for (int r = 0; r < NG; r++) _mm256_storeu_ps(out + 8 * r, acc[r]);
}

/* Groups in order; per group the full token tiles, then the rest in one narrower tile
 * (decode: G2_DEC groups at a time). */
#define G2_R(r, ...) g2_body((r), __VA_ARGS__)
#define G2_FNS(name, T)                                                                        \
    static size_t p2_gb_##name(int64_t K) {                                                    \
        return g2_gb(T, K);                                                                    \
    }                                                                                          \
    static void p2_pack_##name(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {         \
        g2_pack(T, dst, w, rb, K);                                                             \
    }                                                                                          \
    static void p2_gemm_##name(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act,  \
                               size_t as, int64_t K, float *out, size_t os, int32_t nt) {      \
        int64_t g = 0;                                                                         \
        if (nt == 1)                                                                           \
            for (; g + G2_DEC <= ng; g += G2_DEC)                                              \
                g2_body_dec(G2_DEC, T, grp + (size_t)g * gb, gb, act, K, out + (size_t)g * P2_NR); \
        for (; g < ng; g++) {                                                                  \
            const uint8_t *gp = grp + (size_t)g * gb;                                          \
            float *og = out + (size_t)g * P2_NR;                                               \
            int32_t j = 0;                                                                     \
            for (; j + G2_NT <= nt; j += G2_NT)                                                \
                g2_body(G2_NT, T, gp, act + (size_t)j * as, as, K, og + (size_t)j * os, os, j == 0); \
            if (j < nt)                                                                        \
                KERN_REM(G2_R, G2_NT, nt - j, T, gp, act + (size_t)j * as, as, K,              \
                         og + (size_t)j * os, os, j == 0)                                      \
        }                                                                                      \
    }
G2_FNS(i8_g64, IFD_TYPE_I8_G64)
G2_FNS(i8_g128, IFD_TYPE_I8_G128)
G2_FNS(i4_g64, IFD_TYPE_I4_G64)
G2_FNS(i4_g128, IFD_TYPE_I4_G128)
G2_FNS(q4_1, GGML_TYPE_Q4_1)
/* ---- end packed INT8 / INT4 groups and Q4_1 ----------------------------------------------- */

/* Q4_K group layout, per super-block (1184 bytes): f16 d[8], f16 dmin[8], u8 sc[8][8]
 * (sub-block x row), u8 m[8][8], then per 64-element chunk c the 32 nibble bytes of each
 * row as 8 column groups of 32 bytes (low nibbles: sub-block 2c, high: 2c+1): 148 bytes
 * a row against 144. Per sub-block and token the 8 int16 products are summed (8 * 2 * 15
 * * 127 < 32768), then VPMADDWD by the row scales into an int32 sum per super-block, one
 * FMA with d * d_a (the activation's scale is one per super-block); per super-block the
 * minimum as 8 FMAs of dmin * m against the activation's d_a * sum(a) per block. */
#define P2_KSB 1184

static size_t p2_gb_q4_K(int64_t K) {
    return (size_t)(K / QK_K) * P2_KSB;
}

static void p2_pack_q4_K(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * P2_KSB;
        for (int i = 0; i < P2_NR; i++) {
            const block_q4_K *blk = (const block_q4_K *)(w + (size_t)i * rb) + s;
            const uint8_t *q = blk->scales;
            memcpy(sb + 2 * i, &blk->d, 2);
            memcpy(sb + 16 + 2 * i, &blk->dmin, 2);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                quant_q4_K_scale_min(j, q, &sc, &m);
                sb[32 + 8 * j + i] = sc;
                sb[96 + 8 * j + i] = m;
            }
            for (int c = 0; c < 4; c++)
                for (int g = 0; g < 8; g++) memcpy(sb + 160 + 256 * c + 32 * g + 4 * i, blk->qs + 32 * c + 4 * g, 4);
        }
    }
}

AI __m256 u8x8_ps(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* (sc, sc) int16 pairs, one per row lane, from 8 u8 scales: VPMADDWD's multiplier. */
AI __m256i sc_pairs(const uint8_t *p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

/* One 8-row group x NT tokens, Q4_K. The activation's scale is one per super-block (see
 * k2_act_prepare), so the 8 sub-blocks' dots, each times its row scale (VPMADDWD by
 * (sc, sc) pairs: 2 * 30480 * 63 per lane), sum in int32 and meet the floats once per
 * super-block. */
AI void p2_q4k_body(const int NT, const uint8_t *grp, const uint8_t *act, size_t as, int64_t nsb,
                    float *out, size_t os, int pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[P2_KNT];
    UNROLL
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * P2_KSB;
        if (pf)
            for (int l = 0; l < P2_KSB; l += 64) _mm_prefetch((const char *)sb + P2_PF + l, _MM_HINT_T0);
        __m256i isum[P2_KNT];
        UNROLL
        for (int j = 0; j < NT; j++) isum[j] = _mm256_setzero_si256();
        for (int k = 0; k < 8; k++) {
            const uint8_t *q = sb + 160 + 256 * (k >> 1);
            const __m256i scp = sc_pairs(sb + 32 + 8 * k);
            UNROLL
            for (int u = 0; u < 2; u++) { /* half a sub-block: 4 weight vectors live */
                __m256i wq[4];
                UNROLL
                for (int g = 0; g < 4; g++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 128 * u + 32 * g));
                    wq[g] = (k & 1) ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
                }
                UNROLL
                for (int j = 0; j < NT; j++) {
                    const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + 8 * s + k;
                    const uint8_t *a = (const uint8_t *)ab->qs + 16 * u;
                    const __m256i s16 = _mm256_add_epi16(
                        _mm256_add_epi16(_mm256_maddubs_epi16(wq[0], bc32(a)), _mm256_maddubs_epi16(wq[1], bc32(a + 4))),
                        _mm256_add_epi16(_mm256_maddubs_epi16(wq[2], bc32(a + 8)), _mm256_maddubs_epi16(wq[3], bc32(a + 12))));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(s16, scp));
                }
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb));
        UNROLL
        for (int j = 0; j < NT; j++) {
            const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + 8 * s;
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dv, _mm256_set1_ps(ab->d[0])), acc[j]);
        }
        const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 16)));
        for (int k = 0; k < 8; k++) {
            const __m256 mm = _mm256_mul_ps(mv, u8x8_ps(sb + 96 + 8 * k));
            UNROLL
            for (int j = 0; j < NT; j++) {
                const float *dsum = (const float *)((const a8_block *)(act + (size_t)j * as) + 8 * nsb);
                acc[j] = _mm256_fnmadd_ps(mm, _mm256_set1_ps(dsum[8 * s + k]), acc[j]);
            }
        }
    }
    UNROLL
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + (size_t)j * os, acc[j]);
}

#define P2_Q4K_BODY_R(r, ...) p2_q4k_body((r), __VA_ARGS__)
static void p2_gemm_q4_K(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act, size_t as,
                         int64_t K, float *out, size_t os, int32_t nt) {
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = grp + (size_t)g * gb;
        float *og = out + (size_t)g * P2_NR;
        int32_t j = 0;
        for (; j + P2_KNT <= nt; j += P2_KNT)
            p2_q4k_body(P2_KNT, gp, act + (size_t)j * as, as, K / QK_K, og + (size_t)j * os, os, j == 0);
        if (j < nt)
            KERN_REM(P2_Q4K_BODY_R, P2_KNT, nt - j, gp, act + (size_t)j * as, as, K / QK_K, og + (size_t)j * os, os,
                     j == 0)
    }
}

/* Q6_K group layout, per super-block (1696 bytes, 212 a row against 210): f16 d[8] (32
 * bytes with padding), int8 sc[16][8] (scale group x row), then per 64-element chunk c:
 * 8 column groups of nibble bytes (vector g, byte p of row i: low nibble the low 4 bits
 * of element 4g+p of the chunk, high nibble those of element 32+4g+p) and 4 vectors of
 * the top 2 bits (vector k, byte p of row i: bits 2m..2m+1 those of element 4(4m+k)+p).
 * Per 16-element scale group and token: 4 VPMADDUBSW summed in pairs (2 * 2 * 63 * 127
 * < 32768), VPMADDWD by the row scale, the -32 * sum(a) offset, all in an int32 sum per
 * super-block (see p2_q6k_body); one FMA with d * d_a per super-block. */
/* Tokens per tile: 5 (at 4, a verification of 4 drafts read the weights twice; 6 spills
 * more than it saves at T = 16 and in prefill). */
#define P2_6NT 5
#define P2_6SB 1696

static size_t p2_gb_q6_K(int64_t K) {
    return (size_t)(K / QK_K) * P2_6SB;
}

static void p2_pack_q6_K(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    memset(dst, 0, (size_t)(K / QK_K) * P2_6SB);
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * P2_6SB;
        for (int i = 0; i < P2_NR; i++) {
            const block_q6_K *blk = (const block_q6_K *)(w + (size_t)i * rb) + s;
            uint8_t q[QK_K];
            for (int n = 0; n < 2; n++) {
                const uint8_t *ql = blk->ql + 64 * n, *qh = blk->qh + 32 * n;
                for (int l = 0; l < 32; l++) {
                    q[128 * n + l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
                    q[128 * n + l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                    q[128 * n + l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                    q[128 * n + l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                }
            }
            memcpy(sb + 2 * i, &blk->d, 2);
            for (int g = 0; g < 16; g++) sb[32 + 8 * g + i] = (uint8_t)blk->scales[g];
            for (int c = 0; c < 4; c++) {
                uint8_t *qc = sb + 160 + 384 * c;
                const uint8_t *e = q + 64 * c;
                for (int g = 0; g < 8; g++)
                    for (int p = 0; p < 4; p++)
                        qc[32 * g + 4 * i + p] = (uint8_t)((e[4 * g + p] & 0xF) | ((e[32 + 4 * g + p] & 0xF) << 4));
                for (int k = 0; k < 4; k++)
                    for (int p = 0; p < 4; p++) {
                        uint8_t hb = 0;
                        for (int m = 0; m < 4; m++) hb |= (uint8_t)((e[4 * (4 * m + k) + p] >> 4) << (2 * m));
                        qc[256 + 32 * k + 4 * i + p] = hb;
                    }
            }
        }
    }
}

/* (sc, sc) int16 pairs, one per row lane, from 8 int8 scales. */
AI __m256i sc_pairs_i8(const uint8_t *p) {
    const __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_set_m128i(_mm_unpackhi_epi16(w, w), _mm_unpacklo_epi16(w, w));
}

/* One 8-row group x NT tokens, Q6_K. The activation's scale is one per super-block (see
 * k2_act_prepare), so a super-block's 16 scale groups sum in int32: each group's dot
 * times its row scale (VPMADDWD by (sc, sc) pairs: 2 * 32004 * 128 per lane), and the
 * -32 offset of a block's two groups as one VPMADDWD of (-32 sc0, -32 sc1) by the
 * activation's (s0, s1) int16 sums; the floats once per super-block. */
AI void p2_q6k_body(const int NT, const uint8_t *grp, const uint8_t *act, size_t as, int64_t nsb,
                    float *out, size_t os, int pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), m32 = _mm256_set1_epi16(-32);
    __m256 acc[P2_6NT];
    UNROLL
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * P2_6SB;
        if (pf)
            for (int l = 0; l < P2_6SB; l += 64) _mm_prefetch((const char *)sb + P2_PF + l, _MM_HINT_T0);
        __m256i isum[P2_6NT];
        UNROLL
        for (int j = 0; j < NT; j++) isum[j] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = sb + 160 + 384 * c;
            UNROLL
            for (int h = 0; h < 2; h++) {
                const int sg = 4 * c + 2 * h;
                const __m256i sc0 = sc_pairs_i8(sb + 32 + 8 * sg), sc1 = sc_pairs_i8(sb + 32 + 8 * (sg + 1));
                const __m256i scb = _mm256_mullo_epi16(_mm256_blend_epi16(sc0, sc1, 0xAA), m32);
                UNROLL
                for (int u = 0; u < 2; u++) { /* one scale group: 4 weight vectors live */
                    __m256i wq[4];
                    UNROLL
                    for (int gg = 0; gg < 4; gg++) {
                        const int g = 4 * u + gg;
                        const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * g));
                        const __m256i nib = h ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
                        const int G = 8 * h + g, k = G & 3, m = G >> 2;
                        const __m256i hv = _mm256_loadu_si256((const __m256i *)(q + 256 + 32 * k));
                        const __m256i hb = m == 0 ? _mm256_slli_epi16(hv, 4)
                                           : m == 1 ? _mm256_slli_epi16(hv, 2)
                                           : m == 2 ? hv
                                                    : _mm256_srli_epi16(hv, 2);
                        wq[gg] = _mm256_or_si256(nib, _mm256_and_si256(hb, m30));
                    }
                    const __m256i sc = u ? sc1 : sc0;
                    UNROLL
                    for (int j = 0; j < NT; j++) {
                        const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + 8 * s + 2 * c + h;
                        const uint8_t *a = (const uint8_t *)ab->qs + 16 * u;
                        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(wq[0], bc32(a)),
                                                            _mm256_maddubs_epi16(wq[1], bc32(a + 4)));
                        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(wq[2], bc32(a + 8)),
                                                            _mm256_maddubs_epi16(wq[3], bc32(a + 12)));
                        __m256i d = _mm256_add_epi32(_mm256_madd_epi16(p0, sc), _mm256_madd_epi16(p1, sc));
                        if (u == 0) { /* the block's (s0, s1) half sums, after the blocks */
                            const int32_t *hs = (const int32_t *)((const a8_block *)(act + (size_t)j * as) + 8 * nsb);
                            d = _mm256_add_epi32(d, _mm256_madd_epi16(scb, _mm256_set1_epi32(hs[8 * s + 2 * c + h])));
                        }
                        isum[j] = _mm256_add_epi32(isum[j], d);
                    }
                }
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb));
        UNROLL
        for (int j = 0; j < NT; j++) {
            const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + 8 * s;
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dv, _mm256_set1_ps(ab->d[0])), acc[j]);
        }
    }
    UNROLL
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + (size_t)j * os, acc[j]);
}

#define P2_Q6K_BODY_R(r, ...) p2_q6k_body((r), __VA_ARGS__)
static void p2_gemm_q6_K(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act, size_t as,
                         int64_t K, float *out, size_t os, int32_t nt) {
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = grp + (size_t)g * gb;
        float *og = out + (size_t)g * P2_NR;
        int32_t j = 0;
        for (; j + P2_6NT <= nt; j += P2_6NT)
            p2_q6k_body(P2_6NT, gp, act + (size_t)j * as, as, K / QK_K, og + (size_t)j * os, os, j == 0);
        if (j < nt)
            KERN_REM(P2_Q6K_BODY_R, P2_6NT, nt - j, gp, act + (size_t)j * as, as, K / QK_K, og + (size_t)j * os, os,
                     j == 0)
    }
}

/* ---- packed Q5_K: 8 rows in lanes ----------------------------------------------------
 * Q4_K's group layout plus the fifth bits, per super-block (1440 bytes): f16 d[8], f16
 * dmin[8], u8 sc[8][8], u8 m[8][8], then per 64-element chunk c (320 bytes) the nibble
 * bytes as Q4_K (8 column groups of 32 bytes) and two 32-byte vectors of fifth bits
 * (sub-block 2c, then 2c+1): byte 4i + k of row i holds bit g <- the fifth bit of
 * element 4g + k. 180 bytes a row vs 176. Quants reach 31, so the int16 products are
 * summed four at a time (4 * 31 * 127 * 2 < 32768) before VPMADDWD, two VPMADDWD per
 * sub-block; otherwise p2_q4k_body's per-lane sequence, whatever the token tile. */
#define P2_5SB 1440

static size_t p2_gb_q5_K(int64_t K) {
    return (size_t)(K / QK_K) * P2_5SB;
}

static void p2_pack_q5_K(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    memset(dst, 0, p2_gb_q5_K(K));
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * P2_5SB;
        for (int i = 0; i < P2_NR; i++) {
            const block_q5_K *blk = (const block_q5_K *)(w + (size_t)i * rb) + s;
            memcpy(sb + 2 * i, &blk->d, 2);
            memcpy(sb + 16 + 2 * i, &blk->dmin, 2);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                quant_q4_K_scale_min(j, blk->scales, &sc, &m);
                sb[32 + 8 * j + i] = sc;
                sb[96 + 8 * j + i] = m;
            }
            for (int c = 0; c < 4; c++) {
                uint8_t *ch = sb + 160 + 320 * c;
                for (int g = 0; g < 8; g++)
                    for (int k = 0; k < 4; k++) {
                        const int l = 4 * g + k;
                        ch[32 * g + 4 * i + k] = blk->qs[32 * c + l];
                        for (int h = 0; h < 2; h++)
                            if (blk->qh[l] & (1u << (2 * c + h))) ch[256 + 32 * h + 4 * i + k] |= (uint8_t)(1u << g);
                    }
            }
        }
    }
}

/* Fifth bit of column group g (the vector H of a sub-block) at bit 4 of each byte. */
AI __m256i p25_hbit(__m256i H, int g) {
    const __m256i v = g <= 4 ? _mm256_slli_epi16(H, 4 - g) : _mm256_srli_epi16(H, g - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* One 8-row group x NT tokens, Q5_K. */
AI void p2_q5k_body(const int NT, const uint8_t *grp, const uint8_t *act, size_t as, int64_t nsb,
                    float *out, size_t os, int pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[P2_KNT];
    UNROLL
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * P2_5SB;
        if (pf)
            for (int l = 0; l < P2_5SB; l += 64) _mm_prefetch((const char *)sb + P2_PF + l, _MM_HINT_T0);
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb));
        for (int k = 0; k < 8; k++) {
            const uint8_t *q = sb + 160 + 320 * (k >> 1);
            const __m256i H = _mm256_loadu_si256((const __m256i *)(q + 256 + 32 * (k & 1)));
            __m256i wq[8];
            UNROLL
            for (int g = 0; g < 8; g++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * g));
                const __m256i n = (k & 1) ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
                wq[g] = _mm256_or_si256(n, p25_hbit(H, g));
            }
            const __m256 sv = _mm256_mul_ps(dv, u8x8_ps(sb + 32 + 8 * k));
            UNROLL
            for (int j = 0; j < NT; j++) {
                const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + 8 * s + k;
                const uint8_t *a = (const uint8_t *)ab->qs;
                __m256i p[4];
                UNROLL
                for (int g = 0; g < 4; g++)
                    p[g] = _mm256_add_epi16(_mm256_maddubs_epi16(wq[2 * g], bc32(a + 8 * g)),
                                            _mm256_maddubs_epi16(wq[2 * g + 1], bc32(a + 8 * g + 4)));
                const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[0], p[1]), ones),
                                                     _mm256_madd_epi16(_mm256_add_epi16(p[2], p[3]), ones));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sv, _mm256_set1_ps(ab->d[0])), acc[j]);
            }
        }
        const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 16)));
        for (int k = 0; k < 8; k++) {
            const __m256 mm = _mm256_mul_ps(mv, u8x8_ps(sb + 96 + 8 * k));
            UNROLL
            for (int j = 0; j < NT; j++) {
                const float *dsum = (const float *)((const a8_block *)(act + (size_t)j * as) + 8 * nsb);
                acc[j] = _mm256_fnmadd_ps(mm, _mm256_set1_ps(dsum[8 * s + k]), acc[j]);
            }
        }
    }
    UNROLL
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + (size_t)j * os, acc[j]);
}

#define P2_Q5K_BODY_R(r, ...) p2_q5k_body((r), __VA_ARGS__)
static void p2_gemm_q5_K(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act, size_t as,
                         int64_t K, float *out, size_t os, int32_t nt) {
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = grp + (size_t)g * gb;
        float *og = out + (size_t)g * P2_NR;
        int32_t j = 0;
        for (; j + P2_KNT <= nt; j += P2_KNT)
            p2_q5k_body(P2_KNT, gp, act + (size_t)j * as, as, K / QK_K, og + (size_t)j * os, os, j == 0);
        if (j < nt)
            KERN_REM(P2_Q5K_BODY_R, P2_KNT, nt - j, gp, act + (size_t)j * as, as, K / QK_K, og + (size_t)j * os, os,
                     j == 0)
    }
}
/* ---- end packed Q5_K -------------------------------------------------------------------- */

/* ---- packed IQ4_XS: 8 rows in lanes --------------------------------------------------
 * Per super-block (1120 bytes): f16 d[8], int8 (ls - 32)[8][8] (sub-block x row, 80
 * bytes with padding), then per 32-element sub-block 128 bytes: the 16 index bytes of
 * each row as 4 column groups of 32 bytes (low nibbles: elements 4c .., high: 16 + 4c ..;
 * as packed Q4_0). VPSHUFB gives the signed table values; the dot is packed Q8_0's
 * (|w| against the activation with w's sign, each VPMADDUBSW widened on its own), then
 * one FMA per sub-block and token with (d * (ls - 32)) * d_a. 140 bytes a row vs 136. */
#define P2_XSB 1120
#define P2_XNT 4

static size_t p2_gb_iq4_xs(int64_t K) {
    return (size_t)(K / QK_K) * P2_XSB;
}

static void p2_pack_iq4_xs(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    memset(dst, 0, p2_gb_iq4_xs(K));
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * P2_XSB;
        for (int i = 0; i < P2_NR; i++) {
            const block_iq4_xs *blk = (const block_iq4_xs *)(w + (size_t)i * rb) + s;
            memcpy(sb + 2 * i, &blk->d, 2);
            for (int b = 0; b < 8; b++) {
                const int ls = ((blk->scales_l[b / 2] >> (4 * (b % 2))) & 0xF) | (((blk->scales_h >> (2 * b)) & 3) << 4);
                sb[16 + 8 * b + i] = (uint8_t)(int8_t)(ls - 32);
                for (int c = 0; c < 4; c++) memcpy(sb + 96 + 128 * b + 32 * c + 4 * i, blk->qs + 16 * b + 4 * c, 4);
            }
        }
    }
}

/* One 8-row group x NT tokens, IQ4_XS. */
AI void p2_iq4xs_body(const int NT, const uint8_t *grp, const uint8_t *act, size_t as, int64_t nsb,
                      float *out, size_t os, int pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    __m256 acc[P2_XNT];
    UNROLL
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * P2_XSB;
        if (pf)
            for (int l = 0; l < P2_XSB; l += 64) _mm_prefetch((const char *)sb + P2_PF + l, _MM_HINT_T0);
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb));
        for (int b = 0; b < 8; b++) {
            const uint8_t *q = sb + 96 + 128 * b;
            __m256i wv[8], aw[8];
            UNROLL
            for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                wv[c] = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
                wv[4 + c] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            }
            UNROLL
            for (int c = 0; c < 8; c++) aw[c] = _mm256_abs_epi8(wv[c]);
            const __m256 sv = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sb + 16 + 8 * b)))));
            UNROLL
            for (int j = 0; j < NT; j++) {
                const a8_block *ab = (const a8_block *)(act + (size_t)j * as) + 8 * s + b;
                const __m256i dot = sdot_nib8(aw, wv, (const uint8_t *)ab->qs, ones);
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sv, _mm256_set1_ps(ab->d[0])), acc[j]);
            }
        }
    }
    UNROLL
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + (size_t)j * os, acc[j]);
}

#define P2_IQ4XS_BODY_R(r, ...) p2_iq4xs_body((r), __VA_ARGS__)
static void p2_gemm_iq4_xs(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act, size_t as,
                           int64_t K, float *out, size_t os, int32_t nt) {
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = grp + (size_t)g * gb;
        float *og = out + (size_t)g * P2_NR;
        int32_t j = 0;
        for (; j + P2_XNT <= nt; j += P2_XNT)
            p2_iq4xs_body(P2_XNT, gp, act + (size_t)j * as, as, K / QK_K, og + (size_t)j * os, os, j == 0);
        if (j < nt)
            KERN_REM(P2_IQ4XS_BODY_R, P2_XNT, nt - j, gp, act + (size_t)j * as, as, K / QK_K, og + (size_t)j * os, os,
                     j == 0)
    }
}
/* ---- end packed IQ4_XS ------------------------------------------------------------------ */

/* ---- float paths ----------------------------------------------------------------------- */

AI __m256 ld_w8(ggml_type t, const uint8_t *row, int64_t k) {
    if (t == GGML_TYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
    if (t == GGML_TYPE_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * k))), 16));
    return _mm256_loadu_ps((const float *)(row + 4 * k));
}

/* The last K % 8 elements: zero-padded copies, then the same FMA. */
AI __m256 ld_w8_tail(ggml_type t, const uint8_t *row, int64_t k, int64_t n) {
    uint8_t buf[32] = {0};
    const size_t es = t == GGML_TYPE_F32 ? 4 : 2;
    memcpy(buf, row + es * k, (size_t)n * es);
    return ld_w8(t, buf, 0);
}
AI __m256 ld_x8_tail(const float *x, int64_t n) {
    float buf[8] = {0};
    memcpy(buf, x, (size_t)n * sizeof(float));
    return _mm256_loadu_ps(buf);
}

#define FNR 3
#define FNT 4
#define FDR 4 /* decode rows per body */
#define FMR 4 /* max(FNR, FDR) */

AI void f_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
               const uint8_t *act, size_t act_stride, int64_t K, float *out, size_t out_stride) {
    __m256 acc[FMR][FNT];
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int j = 0; j < NT; j++) acc[r][j] = _mm256_setzero_ps();
    const float *x[FNT];
    UNROLL
    for (int j = 0; j < NT; j++) x[j] = (const float *)(act + (size_t)j * act_stride);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[FMR];
        UNROLL
        for (int r = 0; r < NR; r++) wv[r] = ld_w8(t, w0 + (size_t)r * row_bytes, k);
        UNROLL
        for (int j = 0; j < NT; j++) {
            const __m256 xv = _mm256_loadu_ps(x[j] + k);
            UNROLL
            for (int r = 0; r < NR; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    if (k < K) {
        __m256 wv[FMR];
        UNROLL
        for (int r = 0; r < NR; r++) wv[r] = ld_w8_tail(t, w0 + (size_t)r * row_bytes, k, K - k);
        UNROLL
        for (int j = 0; j < NT; j++) {
            const __m256 xv = ld_x8_tail(x[j] + k, K - k);
            UNROLL
            for (int r = 0; r < NR; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = hsum8(acc[r][j]);
}

K2_TILES(f32, f_tile, GGML_TYPE_F32, FNR, FNT, FDR, K)
K2_TILES(f16, f_tile, GGML_TYPE_F16, FNR, FNT, FDR, K)
K2_TILES(bf16, f_tile, GGML_TYPE_BF16, FNR, FNT, FDR, K)

/* ---- packed float weights ----------------------------------------------------------------
 * Prepared once (kern_pack, layout of kern_pack_float) for F32 / F16 / BF16 in groups of
 * F2_NR = 16 rows: row i of K position k at element k * 16 + i, so two vectors hold 16
 * outputs of one token and each activation element is one broadcast. Per lane (row,
 * token) the sum is one f32 FMA chain over k in order from 0 (weights converted
 * exactly), whatever the tile: decode reads two groups side by side (four independent
 * chains), prefill walks a group in F2_KC-position slices across all its token tiles
 * (partial sums parked in out, which changes no bit). Decode and prefill agree bit for
 * bit; no horizontal sums. */

#define F2_NR 16
#define F2_NT 6
#define F2_KC 512
#define F2_PF 4096 /* decode prefetch distance, bytes */

AI size_t f2_esz(ggml_type t) {
    return t == GGML_TYPE_F32 ? 4 : 2;
}
static size_t f2_gb_f32(int64_t K) {
    return (size_t)K * F2_NR * 4;
}
static size_t f2_gb_h(int64_t K) {
    return (size_t)K * F2_NR * 2;
}
static void f2_pack_f32(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    kern_pack_float(GGML_TYPE_F32, F2_NR, dst, w, rb, K);
}
static void f2_pack_f16(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    kern_pack_float(GGML_TYPE_F16, F2_NR, dst, w, rb, K);
}
static void f2_pack_bf16(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    kern_pack_float(GGML_TYPE_BF16, F2_NR, dst, w, rb, K);
}

/* 8 packed weights (rows 8v.. of position k) as f32. */
AI __m256 f2_ld(ggml_type t, const uint8_t *g, int64_t k, int v) {
    return ld_w8(t, g, (int64_t)(k * F2_NR + 8 * v));
}

/* One group x NT tokens over positions [k0, k1): out[j * os + i]; first: chains start
 * at 0, else they continue from out. */
AI void f2_body(const int NT, ggml_type t, const uint8_t *g, int64_t k0, int64_t k1,
                const uint8_t *act, size_t as, float *out, size_t os, int first) {
    __m256 acc[F2_NT][2];
    const float *x[F2_NT];
    UNROLL
    for (int j = 0; j < NT; j++) {
        x[j] = (const float *)(act + (size_t)j * as);
        UNROLL
        for (int v = 0; v < 2; v++)
            acc[j][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + (size_t)j * os + 8 * v);
    }
    for (int64_t k = k0; k < k1; k++) {
        const __m256 w0 = f2_ld(t, g, k, 0), w1 = f2_ld(t, g, k, 1);
        UNROLL
        for (int j = 0; j < NT; j++) {
            const __m256 xv = _mm256_broadcast_ss(x[j] + k);
            acc[j][0] = _mm256_fmadd_ps(w0, xv, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(w1, xv, acc[j][1]);
        }
    }
    UNROLL
    for (int j = 0; j < NT; j++)
        UNROLL
        for (int v = 0; v < 2; v++) _mm256_storeu_ps(out + (size_t)j * os + 8 * v, acc[j][v]);
}

/* Decode: two groups (gb bytes apart, outputs 16 apart) x one token, whole K. */
AI void f2_body_dec2(ggml_type t, const uint8_t *g, size_t gb, int64_t K, const float *x,
                     float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const uint8_t *h = g + gb;
    for (int64_t k = 0; k < K; k++) {
        if ((k & 1) == 0) { /* a line of each group per two positions, F2_PF ahead */
            const size_t o = (size_t)k * F2_NR * f2_esz(t) + F2_PF;
            _mm_prefetch((const char *)g + o, _MM_HINT_T0);
            _mm_prefetch((const char *)h + o, _MM_HINT_T0);
            if (t == GGML_TYPE_F32) {
                _mm_prefetch((const char *)g + o + 64, _MM_HINT_T0);
                _mm_prefetch((const char *)h + o + 64, _MM_HINT_T0);
            }
        }
        const __m256 xv = _mm256_broadcast_ss(x + k);
        a0 = _mm256_fmadd_ps(f2_ld(t, g, k, 0), xv, a0);
        a1 = _mm256_fmadd_ps(f2_ld(t, g, k, 1), xv, a1);
        a2 = _mm256_fmadd_ps(f2_ld(t, h, k, 0), xv, a2);
        a3 = _mm256_fmadd_ps(f2_ld(t, h, k, 1), xv, a3);
    }
    _mm256_storeu_ps(out, a0);
    _mm256_storeu_ps(out + 8, a1);
    _mm256_storeu_ps(out + 16, a2);
    _mm256_storeu_ps(out + 24, a3);
}

AI void f2_gemm(ggml_type t, const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act,
                size_t as, int64_t K, float *out, size_t os, int32_t nt) {
    int64_t gi = 0;
    if (nt == 1) {
        for (; gi + 2 <= ng; gi += 2)
            f2_body_dec2(t, grp + (size_t)gi * gb, gb, K, (const float *)act, out + (size_t)gi * F2_NR);
        if (gi < ng) f2_body(1, t, grp + (size_t)gi * gb, 0, K, act, as, out + (size_t)gi * F2_NR, os, 1);
        return;
    }
    for (; gi < ng; gi++) {
        const uint8_t *g = grp + (size_t)gi * gb;
        float *og = out + (size_t)gi * F2_NR;
        for (int64_t k0 = 0; k0 < K; k0 += F2_KC) {
            const int64_t k1 = IFD_MIN(K, k0 + F2_KC);
            const int first = k0 == 0;
            int32_t j = 0;
            for (; j + F2_NT <= nt; j += F2_NT)
                f2_body(F2_NT, t, g, k0, k1, act + (size_t)j * as, as, og + (size_t)j * os, os, first);
            const uint8_t *aj = act + (size_t)j * as;
            float *oj = og + (size_t)j * os;
            switch (nt - j) {
            case 1: f2_body(1, t, g, k0, k1, aj, as, oj, os, first); break;
            case 2: f2_body(2, t, g, k0, k1, aj, as, oj, os, first); break;
            case 3: f2_body(3, t, g, k0, k1, aj, as, oj, os, first); break;
            case 4: f2_body(4, t, g, k0, k1, aj, as, oj, os, first); break;
            case 5: f2_body(5, t, g, k0, k1, aj, as, oj, os, first); break;
            default: break;
            }
        }
    }
}
#define F2_GEMM(NAME, T)                                                                       \
    static void NAME(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act, size_t as, \
                     int64_t K, float *out, size_t os, int32_t nt) {                          \
        f2_gemm(T, grp, gb, ng, act, as, K, out, os, nt);                                     \
    }
F2_GEMM(f2_gemm_f32, GGML_TYPE_F32)
F2_GEMM(f2_gemm_f16, GGML_TYPE_F16)
F2_GEMM(f2_gemm_bf16, GGML_TYPE_BF16)

/* ---- elementwise ----------------------------------------------------------------------- */

/* exp(x), x clamped to [-87, 88]: 2^n * p(r) with a degree-7 Taylor polynomial. */
AI __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n for n in [-126, 127]: build the exponent field */
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static void k2_rmsnorm(float *out, const float *x, const float *w, int32_t n, float eps) {
    __m256 ss = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        ss = _mm256_fmadd_ps(v, v, ss);
    }
    float s = hsum8(ss);
    for (; i < n; i++) s += x[i] * x[i];
    const float scale = 1.0f / sqrtf(s / (float)n + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = x[i] * scale * w[i];
}

AI __m256 silu_mul8(__m256 g, __m256 u) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static void k2_swiglu(float *out, const float *gate, const float *up, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0}, o[8];
        memcpy(g, gate + i, (size_t)(n - i) * sizeof(float));
        memcpy(u, up + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(o, silu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(out + i, o, (size_t)(n - i) * sizeof(float));
    }
}

/* ---- attention ------------------------------------------------------------------------- */

#define MAX_HD8 32 /* head_dim up to 256 */

/* 8 elements of a stored KV row from element i, as f32, converted in registers (F16C,
 * bf16 shifts, int8 widening, FP8 E4M3 through its exact f16 image): INT8 without its
 * scale and FP8 as value / 256 — kv_factor8 is what the row's products are multiplied
 * by. */
AI __m256 kv_ld8(const int DT, const uint8_t *row, int32_t i) {
    switch (DT) {
    case BACKEND_KV_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)i)));
    case BACKEND_KV_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)i))), 16));
    case BACKEND_KV_INT8:
        return _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + i))));
    case BACKEND_KV_FP8: {
        /* E4M3 -> f16 bits (sign << 15 | magnitude << 7) is the value * 2^-8, exactly
         * (subnormals included); 0x7F magnitudes are NaN */
        const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(row + i)));
        const __m128i mag = _mm_and_si128(x, _mm_set1_epi16(0x7f));
        const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(x, _mm_set1_epi16(0x80)), 8),
                                       _mm_slli_epi16(mag, 7));
        const __m128i nan = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f));
        return _mm256_or_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan)));
    }
    default: return _mm256_loadu_ps((const float *)(const void *)row + i);
    }
}
AI float kv_factor8(const int DT, const uint8_t *row, int32_t hd) {
    return DT == BACKEND_KV_INT8 ? kv_int8_scale(row, hd) : DT == BACKEND_KV_FP8 ? 256.0f : 1.0f;
}
#define KV_SCALED(DT) ((DT) == BACKEND_KV_INT8 || (DT) == BACKEND_KV_FP8)

AI void k2_attn_dt(const int DT, float *out, const float *q, int32_t g, int32_t n_keys,
                   const kv_view *kv, int32_t kvh, const int32_t *block_table, float scale,
                   float *scratch) {
    const int32_t hd = kv->head_dim, bs = kv->block_size, nv = hd / 8;
    const size_t rb = kv_view_row_bytes(kv);
    const uint8_t *K = kv->k, *V = kv->v;
    for (int32_t h = 0; h < g; h++) {
        const float *qh = q + (size_t)h * hd;
        float *sc = scratch + (size_t)h * n_keys, max = -INFINITY;
        for (int32_t p = 0; p < n_keys; p++) {
            const int32_t slot = block_table[p / bs] * bs + p % bs;
            const uint8_t *kp = K + kv_row_index(kv, slot, kvh) * rb;
            __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qh), kv_ld8(DT, kp, 0));
            for (int32_t c = 1; c < nv; c++)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8 * c), kv_ld8(DT, kp, 8 * c), acc);
            float s = hsum8(acc);
            if (KV_SCALED(DT)) s *= kv_factor8(DT, kp, hd);
            s *= scale;
            sc[p] = s;
            max = s > max ? s : max;
        }
        const __m256 vmax = _mm256_set1_ps(max);
        __m256 vsum = _mm256_setzero_ps();
        int32_t p = 0;
        for (; p + 8 <= n_keys; p += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + p), vmax));
            _mm256_storeu_ps(sc + p, e);
            vsum = _mm256_add_ps(vsum, e);
        }
        float sum = hsum8(vsum);
        if (p < n_keys) {
            float tmp[8];
            for (int i = 0; i < 8; i++) tmp[i] = p + i < n_keys ? sc[p + i] - max : -87.0f;
            _mm256_storeu_ps(tmp, exp8(_mm256_loadu_ps(tmp)));
            for (int i = 0; p + i < n_keys; i++) {
                sc[p + i] = tmp[i];
                sum += tmp[i];
            }
        }
        float *oh = out + (size_t)h * hd;
        for (int32_t c = 0; c < nv; c++) _mm256_storeu_ps(oh + 8 * c, _mm256_setzero_ps());
        for (p = 0; p < n_keys; p++) {
            const int32_t slot = block_table[p / bs] * bs + p % bs;
            const uint8_t *vp = V + kv_row_index(kv, slot, kvh) * rb;
            const __m256 wgt =
                _mm256_set1_ps(KV_SCALED(DT) ? sc[p] * kv_factor8(DT, vp, hd) : sc[p]);
            for (int32_t c = 0; c < nv; c++)
                _mm256_storeu_ps(oh + 8 * c, _mm256_fmadd_ps(wgt, kv_ld8(DT, vp, 8 * c),
                                                             _mm256_loadu_ps(oh + 8 * c)));
        }
        const __m256 vinv = _mm256_set1_ps(1.0f / sum);
        for (int32_t c = 0; c < nv; c++) _mm256_storeu_ps(oh + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(oh + 8 * c), vinv));
    }
}

static void k2_attn(float *out, const float *q, int32_t g, int32_t n_keys, const kv_view *kv,
                    int32_t kvh, const int32_t *block_table, float scale, float *scratch) {
    const int32_t hd = kv->head_dim;
    if (hd % 8 || hd / 8 > MAX_HD8) {
        kern_scalar_table.attn(out, q, g, n_keys, kv, kvh, block_table, scale, scratch);
        return;
    }
#define K2_ATTN(DT) k2_attn_dt(DT, out, q, g, n_keys, kv, kvh, block_table, scale, scratch)
    switch (kv->dtype) {
    case BACKEND_KV_F16: K2_ATTN(BACKEND_KV_F16); break;
    case BACKEND_KV_BF16: K2_ATTN(BACKEND_KV_BF16); break;
    case BACKEND_KV_INT8: K2_ATTN(BACKEND_KV_INT8); break;
    case BACKEND_KV_FP8: K2_ATTN(BACKEND_KV_FP8); break;
    default: K2_ATTN(BACKEND_KV_F32); break;
    }
#undef K2_ATTN
}

static const kern_table k2_table = {
    .level = CPU_LEVEL_AVX2,
    .act_row_bytes = k2_act_row_bytes,
    .act_prepare = k2_act_prepare,
    /* tile shapes: 2x3 (integer paths; 16 accumulators would spill), 3x4 (float) */
    .gemm = {[GGML_TYPE_Q8_0] = KERN_GEMM(q8_0, INR, INT),
             [GGML_TYPE_Q4_0] = KERN_GEMM(q4_0, INR, INT),
             [GGML_TYPE_Q4_K] = KERN_GEMM(q4_K, KQ_NR, KQ_NT),
             [GGML_TYPE_Q6_K] = KERN_GEMM(q6_K, KQ_NR, KQ_NT),
             [GGML_TYPE_Q5_K] = KERN_GEMM(q5_K, KQ_NR, KQ_NT),
             [GGML_TYPE_Q3_K] = KERN_GEMM(q3_K, KQ_NR, KQ_NT),
             [GGML_TYPE_Q2_K] = KERN_GEMM(q2_K, KQ_NR, KQ_NT),
             [GGML_TYPE_IQ4_XS] = KERN_GEMM(iq4_xs, KQ_NR, KQ_NT),
             [GGML_TYPE_Q4_1] = KERN_GEMM(q4_1, INR, INT), /* 32-element block family */
             [GGML_TYPE_Q5_0] = KERN_GEMM(q5_0, INR, INT),
             [GGML_TYPE_Q5_1] = KERN_GEMM(q5_1, INR, INT),
             [GGML_TYPE_IQ4_NL] = KERN_GEMM(iq4_nl, INR, INT),
             [IFD_TYPE_I8_G64] = KERN_GEMM(i8_g64, INR, INT), /* INT8 / INT4 groups */
             [IFD_TYPE_I8_G128] = KERN_GEMM(i8_g128, INR, INT),
             [IFD_TYPE_I4_G64] = KERN_GEMM(i4_g64, INR, INT),
             [IFD_TYPE_I4_G128] = KERN_GEMM(i4_g128, INR, INT),
             [GGML_TYPE_F32] = KERN_GEMM(f32, FNR, FNT),
             [GGML_TYPE_F16] = KERN_GEMM(f16, FNR, FNT),
             [GGML_TYPE_BF16] = KERN_GEMM(bf16, FNR, FNT)},
    .rmsnorm = k2_rmsnorm,
    .swiglu = k2_swiglu,
    .attn = k2_attn,
    .pack = {[GGML_TYPE_Q4_0] = {P2_NR, p2_gb_q4_0, p2_pack_q4_0, p2_gemm_q4_0},
             [GGML_TYPE_Q8_0] = {P2_NR, p2_gb_q8_0, p2_pack_q8_0, p2_gemm_q8_0},
             [GGML_TYPE_IQ4_NL] = {P2_NR, p2_gb_q4_0, p2_pack_iq4_nl, p2_gemm_iq4_nl},
             [GGML_TYPE_Q5_0] = {P2_NR, p2_gb_q5_0, p2_pack_q5_0, p2_gemm_q5_0},
             [IFD_TYPE_I8_G64] = {P2_NR, p2_gb_i8_g64, p2_pack_i8_g64, p2_gemm_i8_g64},
             [IFD_TYPE_I8_G128] = {P2_NR, p2_gb_i8_g128, p2_pack_i8_g128, p2_gemm_i8_g128},
             [IFD_TYPE_I4_G64] = {P2_NR, p2_gb_i4_g64, p2_pack_i4_g64, p2_gemm_i4_g64},
             [IFD_TYPE_I4_G128] = {P2_NR, p2_gb_i4_g128, p2_pack_i4_g128, p2_gemm_i4_g128},
             [GGML_TYPE_Q4_1] = {P2_NR, p2_gb_q4_1, p2_pack_q4_1, p2_gemm_q4_1},
             [GGML_TYPE_Q4_K] = {P2_NR, p2_gb_q4_K, p2_pack_q4_K, p2_gemm_q4_K},
             [GGML_TYPE_Q6_K] = {P2_NR, p2_gb_q6_K, p2_pack_q6_K, p2_gemm_q6_K},
             [GGML_TYPE_Q5_K] = {P2_NR, p2_gb_q5_K, p2_pack_q5_K, p2_gemm_q5_K},
             [GGML_TYPE_IQ4_XS] = {P2_NR, p2_gb_iq4_xs, p2_pack_iq4_xs, p2_gemm_iq4_xs},
             [GGML_TYPE_F32] = {F2_NR, f2_gb_f32, f2_pack_f32, f2_gemm_f32},
             [GGML_TYPE_F16] = {F2_NR, f2_gb_h, f2_pack_f16, f2_gemm_f16},
             [GGML_TYPE_BF16] = {F2_NR, f2_gb_h, f2_pack_bf16, f2_gemm_bf16}},
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

static pthread_once_t k2_once = PTHREAD_ONCE_INIT;

const kern_table *kern_avx2_get(void) {
    pthread_once(&k2_once, k2_tab_init);
    return &k2_table;
}

#else
const kern_table *kern_avx2_get(void) {
    return NULL;
}
#endif
