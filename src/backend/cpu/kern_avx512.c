/* kern_avx512.c — AVX-512 (F/BW/VL + VNNI) kernels, compiled with a target pragma so
 * the rest of the build stays generic x86-64; used only when cpu_features says so.
 *
 * Matmul, per weight type:
 *  - Q8_0 / Q4_0: integer dot. Each activation row is quantized once per matmul to
 *    int8 in blocks of 32 (f32 scale per block, round to nearest), stored in pairs of
 *    blocks (a8_pair: 64 int8, the 16-lane scale vector, the 16-lane int32 offset
 *    vector). Weights are unpacked in registers to unsigned bytes (Q4_0: the nibble
 *    0..15; Q8_0: w + 128) and VPDPBUSD multiplies them with the signed activations;
 *    the offset vector (-8 or -128 times the block's activation sum) starts the
 *    accumulator so the integer result is exactly sum(w * a). Then one f32 FMA per
 *    pair of blocks: acc += float(dot) * (d_w * d_a).
 *  - F32 / F16 / BF16: weights converted in registers (exact), f32 FMA against the
 *    f32 activations, 16 lanes over K.
 *  - Q4_K / Q6_K: the same integer dot per pair of 32-blocks of their super-blocks
 *    (Q6_K: 6-bit q + 32 offset corrected per 16-element scale group through the offset
 *    vector; Q4_K: nibbles, its d*sc per pair in the FMA and its dmin*m minimum as one
 *    extra FMA per super-block against the activation's per-block d_a * sum(a)).
 *  - Q4_1 / Q5_0 / Q5_1 / IQ4_NL: the Q4_0 scheme with their own unpacking (fifth bit,
 *    table lookup) and, for the "_1" types, one min FMA per block (see their section).
 * Tiles: NR weight rows x NT tokens per micro-kernel; the per-element instruction
 * sequence (pairs of blocks / 16-element steps in K order, one accumulator, then the
 * same horizontal sum) is identical for every tile shape, so results are batch
 * invariant. Micro-kernels only: the row/token tiling and the type dispatch are shared
 * (kern_dispatch.c); k5_table gives each type its tile bodies and shape.
 * Thread-safe (no state). */
#include <math.h>
#include <string.h>

#include "../../model/quant.h"
#include "../../util/common.h"
#include "../kv_dtype.h"
#include "kern.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif
#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* ---- activation format for the integer paths --------------------------------------- */

typedef struct a8_pair {
    int8_t qs[64];
    float d[16];     /* lanes 0-7: scale of block 0, lanes 8-15: of block 1 */
    int32_t bias[16]; /* lane 0: -M * sum(block 0), lane 8: -M * sum(block 1), else 0 */
} a8_pair;

/* Offset added to the weights to make them unsigned bytes (VPDPBUSD), from the traits:
 * signed int8 quants (Q8_0) get + 128; unsigned ones already carry their zero point
 * (Q4_0 nibble = w + 8, Q6_K q = w + 32; Q4_K: none, its minimum is a separate float
 * term using dsum, the per-block d_a * sum(a)). The correction sums the activations per
 * scale group (q_group: 32, or 16 for Q6_K). */
static int32_t a8_offset(const quant_traits *qt) {
    return qt->q_signed ? 128 : qt->q_zero;
}

/* Row layout: npairs a8_pair, float da[2 * npairs] and int32 boff[2 * npairs] (the
 * block scales and 32-group offsets again, compact, for the decode kernel), then (Q4_K)
 * float dsum[2 * npairs]. */
static size_t a8_da_offset(int64_t np) {
    return (size_t)np * sizeof(a8_pair);
}
static size_t a8_boff_offset(int64_t np) {
    return a8_da_offset(np) + ((size_t)np * 2 * sizeof(float) + 63) / 64 * 64;
}
static size_t a8_dsum_offset(int64_t np) {
    return a8_boff_offset(np) + ((size_t)np * 2 * sizeof(int32_t) + 63) / 64 * 64;
}

static size_t k5_act_row_bytes(const quant_traits *qt, int64_t K) {
    const int64_t np = (K + 63) / 64;
    /* dsum: one float per q_group elements (per 32-block; Q2_K: per 16) */
    const size_t nds = (size_t)np * (qt->q_group == 16 ? 4 : 2);
    return a8_dsum_offset(np) + (qt->q_min ? (nds * sizeof(float) + 63) / 64 * 64 : 0);
}

static void k5_act_prepare(const quant_traits *qt, const float *x, void *dst, int64_t K) {
    IFD_ASSERT(K % 32 == 0);
    const int32_t M = a8_offset(qt);
    a8_pair *pp = dst;
    const int64_t nb = K / 32, np = (nb + 1) / 2;
    float *da = (float *)((uint8_t *)dst + a8_da_offset(np));
    int32_t *boff = (int32_t *)((uint8_t *)dst + a8_boff_offset(np));
    float *dsum = (float *)((uint8_t *)dst + a8_dsum_offset(np));
    for (int64_t p = 0; p < np; p++) {
        a8_pair *ap = &pp[p];
        memset(ap->bias, 0, sizeof ap->bias);
        for (int h = 0; h < 2; h++) {
            const int64_t b = 2 * p + h;
            if (b >= nb) {
                memset(ap->qs + 32 * h, 0, 32);
                for (int i = 0; i < 8; i++) ap->d[8 * h + i] = 0.0f;
                da[b] = 0.0f;
                boff[b] = 0;
                continue;
            }
            const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
            const __m512 ax = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1));
            const float amax = _mm512_reduce_max_ps(ax);
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            const __m512 vid = _mm512_set1_ps(id);
            const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid));
            const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
            _mm_storeu_si128((__m128i *)(ap->qs + 32 * h), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(ap->qs + 32 * h + 16), _mm512_cvtepi32_epi8(q1));
            const int32_t s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
            for (int i = 0; i < 8; i++) ap->d[8 * h + i] = d;
            da[b] = d;
            if (qt->q_group == 16) { /* groups of 16 = 4 lanes */
                ap->bias[8 * h] = -M * s0;
                ap->bias[8 * h + 4] = -M * s1;
            } else {
                ap->bias[8 * h] = -M * (s0 + s1);
            }
            boff[b] = ap->bias[8 * h];
            if (qt->q_min && qt->q_group == 16) { /* Q2_K: a minimum per 16 elements */
                dsum[2 * b] = d * (float)s0;
                dsum[2 * b + 1] = d * (float)s1;
            } else if (qt->q_min) {
                dsum[b] = d * (float)(s0 + s1);
            }
        }
    }
}

/* ---- weight unpacking for the integer paths ----------------------------------------- */

static inline uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Scale vector of a pair of blocks: lanes 0-7 = f16 h0, lanes 8-15 = f16 h1. */
AI __m512 dw_pair(uint16_t h0, uint16_t h1) {
    const __m256i hv = _mm256_mask_set1_epi16(_mm256_set1_epi16((short)h0), 0xFF00, (short)h1);
    return _mm512_cvtph_ps(hv);
}

/* Unsigned weight bytes of blocks 2p, 2p+1 (only 2p when half). */
AI __m512i ld_pair_q(ggml_type t, const uint8_t *row, int64_t p, int half) {
    if (t == GGML_TYPE_Q4_0) {
        const uint8_t *b0 = row + (size_t)p * 36;
        const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 2)));
        const __m256i hi = half ? _mm256_setzero_si256()
                                : _mm256_broadcastsi128_si256(
                                      _mm_loadu_si128((const __m128i *)(b0 + 20)));
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        const __m512i sh = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                            0x0004000400040004LL, 0x0004000400040004LL, 0, 0);
        return _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0F));
    }
    /* Q8_0 */
    const uint8_t *b0 = row + (size_t)p * 68;
    const __m256i lo = _mm256_loadu_si256((const __m256i *)(b0 + 2));
    const __m256i hi = half ? _mm256_set1_epi8((char)0x80)
                            : _mm256_loadu_si256((const __m256i *)(b0 + 36));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

AI size_t a8_block_bytes(ggml_type t) {
    return t == GGML_TYPE_Q4_0 ? 18 : 34;
}

/* Scale vector of pair p (see dw_pair). */
AI __m512 ld_pair_d(ggml_type t, const uint8_t *row, int64_t p, int half) {
    const uint8_t *b0 = row + (size_t)p * 2 * a8_block_bytes(t);
    return dw_pair(ld16(b0), half ? 0 : ld16(b0 + a8_block_bytes(t)));
}

/* Scale vectors d_w * d_a of pairs p and p+1 (one row, one token): one f16 -> f32
 * conversion of the 4 block scales gathered in a general register and one 4-lane
 * product with the compact activation scales da[2p .. 2p+3]. Each lane holds the same
 * product a8_step forms 16 lanes at a time, so results are identical. */
AI void ld_quad_s(ggml_type t, const uint8_t *row, int64_t p, const float *da, __m512 *d0,
                  __m512 *d1) {
    const size_t bb = a8_block_bytes(t);
    const uint8_t *b0 = row + (size_t)p * 2 * bb;
    const uint64_t h = (uint64_t)ld16(b0) | (uint64_t)ld16(b0 + bb) << 16 |
                       (uint64_t)ld16(b0 + 2 * bb) << 32 | (uint64_t)ld16(b0 + 3 * bb) << 48;
    const __m512 d4 = _mm512_castps128_ps512(
        _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)h)), _mm_loadu_ps(da + 2 * p)));
    *d0 = _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), d4);
    *d1 = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2), d4);
}

#ifndef PF_BYTES
#define PF_BYTES 1024
#endif

/* One pair of blocks for the tile: every (row, token) accumulator gets
 * float(dot + offset) * (d_w * d_a). */
AI void a8_step(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t p, int half, __m512 acc[4][4]) {
    __m512i wq[4];
    __m512 dw[4];
    for (int r = 0; r < NR; r++) {
        /* several rows are interleaved DRAM streams: prefetch ahead (not needed for one) */
        if (NR > 1)
            _mm_prefetch((const char *)w0 + (size_t)r * row_bytes + (size_t)p * (t == GGML_TYPE_Q4_0 ? 36 : 68) + PF_BYTES, _MM_HINT_T0);
        wq[r] = ld_pair_q(t, w0 + (size_t)r * row_bytes, p, half);
        dw[r] = ld_pair_d(t, w0 + (size_t)r * row_bytes, p, half);
    }
    for (int j = 0; j < NT; j++) {
        const a8_pair *ap = (const a8_pair *)(act + (size_t)j * act_stride) + p;
        const __m512i a = _mm512_loadu_si512(ap->qs);
        const __m512i bias = _mm512_loadu_si512(ap->bias);
        const __m512 dv = _mm512_loadu_ps(ap->d);
        for (int r = 0; r < NR; r++) {
            const __m512i dot = _mm512_dpbusd_epi32(bias, wq[r], a);
            acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[r], dv), acc[r][j]);
        }
    }
}

/* One pair for one row and one token with the scale S = d_w * d_a given. */
AI void a8_step11(ggml_type t, const uint8_t *w0, const uint8_t *act, int64_t p, __m512 S,
                  __m512i bias, __m512 *acc) {
    const __m512i wq = ld_pair_q(t, w0, p, 0);
    const a8_pair *ap = (const a8_pair *)act + p;
    const __m512i dot = _mm512_dpbusd_epi32(bias, wq, _mm512_loadu_si512(ap->qs));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), S, *acc);
}

/* Integer micro-kernel: NR rows x NT tokens over nb blocks (a trailing odd block is a
 * half pair whose missing half contributes exactly 0). */
AI void a8_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nb, float *out,
                size_t out_stride) {
    __m512 acc[4][4];
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) acc[r][j] = _mm512_setzero_ps();
    const int64_t np = nb / 2;
    int64_t p = 0;
    if (NR == 1 && NT == 1) { /* decode: two pairs per step, scales formed together */
        const float *da = (const float *)(act + a8_da_offset((nb + 1) / 2));
        const int32_t *boff = (const int32_t *)(act + a8_boff_offset((nb + 1) / 2));
        /* the offset vectors a8_pair holds: lane 0 <- block 2p, lane 8 <- block 2p+1 */
        const __m512i i0 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i i1 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 2);
        for (; p + 2 <= np; p += 2) {
            __m512 s0, s1;
            ld_quad_s(t, w0, p, da, &s0, &s1);
            const __m512i b4 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(boff + 2 * p)));
            a8_step11(t, w0, act, p, s0, _mm512_maskz_permutexvar_epi32(0x0101, i0, b4), &acc[0][0]);
            a8_step11(t, w0, act, p + 1, s1, _mm512_maskz_permutexvar_epi32(0x0101, i1, b4), &acc[0][0]);
        }
    }
    for (; p < np; p++) a8_step(NR, NT, t, w0, row_bytes, act, act_stride, p, 0, acc);
    if (nb & 1) a8_step(NR, NT, t, w0, row_bytes, act, act_stride, np, 1, acc);
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = _mm512_reduce_add_ps(acc[r][j]);
}

KERN_TILES(q8_0, a8_tile, GGML_TYPE_Q8_0, 4, 4, K / 32)
KERN_TILES(q4_0, a8_tile, GGML_TYPE_Q4_0, 4, 4, K / 32)

/* ---- K-quants, integer path ---------------------------------------------------------- */

/* Q4_K super-block: 8 sub-blocks of 32 with 6-bit scale sc and min m;
 * w = d * sc * q - dmin * m. Per pair c (sub-blocks 2c, 2c+1): unsigned nibbles. */
AI __m512i q4k_pair(const uint8_t *blk, int c) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * c)));
    const __m512i sh = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL,
                                        0x0004000400040004LL, 0x0004000400040004LL, 0, 0, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0F));
}

/* d * sc[0..7] (lanes 0-7) and dmin * m[0..7] of a Q4_K super-block. */
AI void q4k_scales(const uint8_t *blk, __m512 *dsc, __m256 *dm) {
    uint32_t w[3], scw[2], mw[2];
    memcpy(w, blk + 4, 12);
    scw[0] = w[0] & 0x3f3f3f3fu;
    mw[0] = w[1] & 0x3f3f3f3fu;
    scw[1] = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
    mw[1] = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
    uint64_t sc8, m8;
    memcpy(&sc8, scw, 8);
    memcpy(&m8, mw, 8);
    const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8)));
    const __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8)));
    const __m256 d = _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk)))));
    const __m256 dmin = _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk + 2)))));
    *dsc = _mm512_castps256_ps512(_mm256_mul_ps(d, scf));
    *dm = _mm256_mul_ps(dmin, mf);
}

/* Q6_K super-block: ql[128], qh[64], int8 scales[16] (one per 16), d; w = d*sc*(q-32).
 * Pair c: elements 64c .. 64c+63 in order, as unsigned 6-bit values. */
AI __m512i q6k_pair(const uint8_t *blk, int c) {
    const int n = c >> 1, hi = c & 1;
    const __m512i a = _mm512_loadu_si512(blk + 64 * n); /* ql[l], ql[l + 32] for this half */
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * n)));
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    if (!hi) { /* low nibbles; qh bits 0-1 (first 32) and 2-3 (next 32) -> bits 4-5 */
        const __m512i sh = _mm512_set_epi64(0x0002000200020002LL, 0x0002000200020002LL,
                                            0x0002000200020002LL, 0x0002000200020002LL,
                                            0x0004000400040004LL, 0x0004000400040004LL,
                                            0x0004000400040004LL, 0x0004000400040004LL);
        return _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_sllv_epi16(h, sh), m30));
    }
    /* high nibbles; qh bits 4-5 (first 32) and 6-7 (next 32) -> bits 4-5 */
    const __m512i sh = _mm512_set_epi64(0x0002000200020002LL, 0x0002000200020002LL,
                                        0x0002000200020002LL, 0x0002000200020002LL, 0, 0, 0, 0);
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
                           _mm512_and_si512(_mm512_srlv_epi16(h, sh), m30));
}

/* d * scales[0..15] of a Q6_K super-block. */
AI __m512 q6k_scales(const uint8_t *blk) {
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))));
    return _mm512_mul_ps(_mm512_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk + 208))))), sc);
}

/* Scale lanes of pair c: Q4_K: lanes 0-7 <- sc[2c], 8-15 <- sc[2c+1] (of 8);
 * Q6_K: lanes 4g..4g+3 <- sc[4c+g] (of 16). */
AI __m512 kq_pair_scale(ggml_type t, __m512 s, int c) {
    const __m512i idx = t == GGML_TYPE_Q4_K
                            ? _mm512_set_epi32(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                               2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c)
                            : _mm512_set_epi32(4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2,
                                               4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c, 4 * c, 4 * c, 4 * c);
    return _mm512_permutexvar_ps(idx, s);
}

#define KQ_NR 2
#define KQ_NT 4

/* Integer K-quant micro-kernel, NR rows x NT tokens; per element: for each super-block,
 * (Q4_K) acc -= dmin*m . dsum, then per pair acc += float(dot [+ offset]) * (d*sc * d_a). */
AI void kq_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nsb, float *out, size_t out_stride) {
    const size_t sbb = t == GGML_TYPE_Q4_K ? sizeof(block_q4_K) : sizeof(block_q6_K);
    __m512 acc[KQ_NR][KQ_NT];
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) acc[r][j] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m512 scl[KQ_NR];
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)sb * sbb;
            if (NR > 1) _mm_prefetch((const char *)blk + PF_BYTES, _MM_HINT_T0);
            if (t == GGML_TYPE_Q4_K) {
                __m256 dm;
                q4k_scales(blk, &scl[r], &dm);
                for (int j = 0; j < NT; j++) {
                    const float *dsum = (const float *)(act + (size_t)j * act_stride + a8_dsum_offset(4 * nsb)) + 8 * sb;
                    acc[r][j] = _mm512_fnmadd_ps(_mm512_castps256_ps512(dm),
                                                 _mm512_castps256_ps512(_mm256_loadu_ps(dsum)), acc[r][j]);
                }
            } else {
                scl[r] = q6k_scales(blk);
            }
        }
        for (int c = 0; c < 4; c++) {
            __m512i wq[KQ_NR];
            __m512 sv[KQ_NR];
            for (int r = 0; r < NR; r++) {
                const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)sb * sbb;
                wq[r] = t == GGML_TYPE_Q4_K ? q4k_pair(blk, c) : q6k_pair(blk, c);
                sv[r] = kq_pair_scale(t, scl[r], c);
            }
            for (int j = 0; j < NT; j++) {
                const a8_pair *ap = (const a8_pair *)(act + (size_t)j * act_stride) + 4 * sb + c;
                const __m512i a = _mm512_loadu_si512(ap->qs);
                const __m512 dv = _mm512_loadu_ps(ap->d);
                const __m512i init = t == GGML_TYPE_Q6_K ? _mm512_loadu_si512(ap->bias) : _mm512_setzero_si512();
                for (int r = 0; r < NR; r++) {
                    const __m512i dot = _mm512_dpbusd_epi32(init, wq[r], a);
                    acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sv[r], dv), acc[r][j]);
                }
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = _mm512_reduce_add_ps(acc[r][j]);
}

KERN_TILES(q4_K, kq_tile, GGML_TYPE_Q4_K, KQ_NR, KQ_NT, K / QK_K)
KERN_TILES(q6_K, kq_tile, GGML_TYPE_Q6_K, KQ_NR, KQ_NT, K / QK_K)

/* ---- 32-element block family: Q4_1, Q5_0, Q5_1, IQ4_NL (integer path) ---------------
 * The Q4_0 scheme (pairs of blocks, one VPDPBUSD per pair, one f32 FMA per pair with
 * d_w * d_a) with the weights made unsigned bytes per type:
 *  - Q4_1 / Q5_1: q = nibble (| fifth bit << 4), w = d*q + m: no offset; the minimum is
 *    one more term per block, m * (d_a * sum(a)) (the activation's dsum, traits q_min),
 *    added to lane 0 (block 2p) / lane 8 (block 2p+1) of the pair's accumulator.
 *  - Q5_0: q = nibble | fifth bit << 4 = w + 16 (traits q_zero 16: the offset vector).
 *  - IQ4_NL: the table value of each nibble (VPSHUFB), as Q8_0 stores it (v + 128,
 *    traits q_signed: the -128 * sum offset vector).
 * The fifth bits (qh, bit j = element j) become a byte mask of the pair: one masked add.
 * Per lane the same sequence in every tile: per pair, dot FMA then (min types) the
 * min FMA m * dsum (explicit FMAs: no contraction can differ between bodies); the decode body forms the same lane values for two pairs at a time. */

AI int b32_is_i8(ggml_type t) {
    return t == IFD_TYPE_I8_G64 || t == IFD_TYPE_I8_G128;
}
AI int b32_is_i4(ggml_type t) {
    return t == IFD_TYPE_I4_G64 || t == IFD_TYPE_I4_G128;
}
/* Elements per scale group: 32 for the block family, 64 / 128 for the INT8 / INT4 types. */
AI int b32_grp(ggml_type t) {
    return t == IFD_TYPE_I8_G64 || t == IFD_TYPE_I4_G64 ? 64
           : t == IFD_TYPE_I8_G128 || t == IFD_TYPE_I4_G128 ? 128 : 32;
}
/* Bytes of one scale group (a block of the family). */
AI size_t b32_bytes(ggml_type t) {
    if (b32_is_i8(t)) return 2 + (size_t)b32_grp(t);
    if (b32_is_i4(t)) return 4 + (size_t)b32_grp(t) / 2;
    return t == GGML_TYPE_Q4_1 ? 20 : t == GGML_TYPE_Q5_0 ? 22 : t == GGML_TYPE_Q5_1 ? 24 : 18;
}
AI size_t b32_qs_off(ggml_type t) {
    if (b32_is_i8(t)) return 2;
    if (b32_is_i4(t)) return 4;
    return t == GGML_TYPE_Q4_1 ? 4 : t == GGML_TYPE_Q5_0 ? 6 : t == GGML_TYPE_Q5_1 ? 8 : 2;
}
AI int b32_has_min(ggml_type t) {
    return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || b32_is_i4(t);
}
AI int b32_has_qh(ggml_type t) {
    return t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1;
}
/* The header (f16 d, then m) of the scale group holding 32-element sub-block b, and
 * sub-block b's quants (INT8: 32 bytes; the others: 16 nibble bytes). */
AI const uint8_t *b32_hdr(ggml_type t, const uint8_t *row, int64_t b) {
    return row + (size_t)(b / (b32_grp(t) / 32)) * b32_bytes(t);
}
AI const uint8_t *b32_qs(ggml_type t, const uint8_t *row, int64_t b) {
    const int ns = b32_grp(t) / 32;
    return b32_hdr(t, row, b) + b32_qs_off(t) + (size_t)(b % ns) * (b32_is_i8(t) ? 32 : 16);
}
static inline uint32_t ld32u(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Unsigned weight bytes of blocks 2p, 2p+1 (only 2p when half: the other half's bytes
 * meet zero activations and a zero scale). INT8: q + 128 (traits q_signed: the -128 *
 * sum offset vector). */
AI __m512i b32_pair_q(ggml_type t, const uint8_t *row, int64_t p, int half) {
    const uint8_t *q0 = b32_qs(t, row, 2 * p);
    if (b32_is_i8(t)) {
        const __m256i lo = _mm256_loadu_si256((const __m256i *)q0);
        const __m256i hi = half ? _mm256_set1_epi8((char)0x80)
                                : _mm256_loadu_si256((const __m256i *)b32_qs(t, row, 2 * p + 1));
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q0));
    const __m256i hi = half ? _mm256_setzero_si256()
                            : _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b32_qs(t, row, 2 * p + 1)));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    const __m512i sh = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                        0x0004000400040004LL, 0x0004000400040004LL, 0, 0);
    __m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0F));
    if (b32_has_qh(t)) {
        const size_t ho = t == GGML_TYPE_Q5_0 ? 2 : 4;
        const uint64_t h = (uint64_t)ld32u(b32_hdr(t, row, 2 * p) + ho) |
                           (half ? 0 : (uint64_t)ld32u(b32_hdr(t, row, 2 * p + 1) + ho) << 32);
        q = _mm512_mask_add_epi8(q, (__mmask64)h, q, _mm512_set1_epi8(0x10));
    }
    if (t == GGML_TYPE_IQ4_NL) {
        const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(
            _mm_loadu_si128((const __m128i *)quant_iq4nl_values), _mm_set1_epi8((char)0x80)));
        q = _mm512_shuffle_epi8(tab, q);
    }
    return q;
}

/* f16 field at byte offset off of the headers of blocks 2p, 2p+1 as a pair vector (see dw_pair). */
AI __m512 b32_pair_h(ggml_type t, const uint8_t *row, int64_t p, int half, size_t off) {
    return dw_pair(ld16(b32_hdr(t, row, 2 * p) + off), half ? 0 : ld16(b32_hdr(t, row, 2 * p + 1) + off));
}

/* The min term lanes of pair p for one token: lane 0 dsum[2p], lane 8 dsum[2p+1]
 * (half: only lane 0), others 0. */
AI __m512 b32_pair_ds(const float *dsum, int64_t p, int half) {
    const __m128 d2 = _mm_maskz_loadu_ps(half ? 1 : 3, dsum + 2 * p);
    const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_maskz_permutexvar_ps(0x0101, idx, _mm512_castps128_ps512(d2));
}

/* The f16 field at offset off of blocks 2p .. 2p+3 (pairs p, p+1), to f32, times
 * v4[0..3] (v4 NULL: as they are). */
AI __m128 b32_quad_h(ggml_type t, const uint8_t *row, int64_t p, size_t off, const float *v4) {
    const uint64_t h = (uint64_t)ld16(b32_hdr(t, row, 2 * p) + off) |
                       (uint64_t)ld16(b32_hdr(t, row, 2 * p + 1) + off) << 16 |
                       (uint64_t)ld16(b32_hdr(t, row, 2 * p + 2) + off) << 32 |
                       (uint64_t)ld16(b32_hdr(t, row, 2 * p + 3) + off) << 48;
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
    return v4 ? _mm_mul_ps(f, _mm_loadu_ps(v4)) : f;
}

/* One pair of blocks for the tile (cf. a8_step). */
AI void b32_step(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                 const uint8_t *act, size_t act_stride, int64_t p, int half, int64_t np,
                 __m512 acc[4][4]) {
    __m512i wq[4];
    __m512 dw[4], mw[4];
    for (int r = 0; r < NR; r++) {
        const uint8_t *wr = w0 + (size_t)r * row_bytes;
        if (NR > 1) _mm_prefetch((const char *)b32_hdr(t, wr, 2 * p) + PF_BYTES, _MM_HINT_T0);
        wq[r] = b32_pair_q(t, wr, p, half);
        dw[r] = b32_pair_h(t, wr, p, half, 0);
        if (b32_has_min(t)) mw[r] = _mm512_maskz_mov_ps(0x0101, b32_pair_h(t, wr, p, half, 2));
    }
    for (int j = 0; j < NT; j++) {
        const uint8_t *aj = act + (size_t)j * act_stride;
        const a8_pair *ap = (const a8_pair *)aj + p;
        const __m512i a = _mm512_loadu_si512(ap->qs);
        const __m512i bias = _mm512_loadu_si512(ap->bias);
        const __m512 dv = _mm512_loadu_ps(ap->d);
        __m512 ds = _mm512_setzero_ps();
        if (b32_has_min(t)) ds = b32_pair_ds((const float *)(aj + a8_dsum_offset(np)), p, half);
        for (int r = 0; r < NR; r++) {
            const __m512i dot = _mm512_dpbusd_epi32(bias, wq[r], a);
            acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[r], dv), acc[r][j]);
            if (b32_has_min(t)) acc[r][j] = _mm512_fmadd_ps(mw[r], ds, acc[r][j]);
        }
    }
}

/* NR rows x NT tokens over nb blocks (cf. a8_tile). */
AI void b32_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                 const uint8_t *act, size_t act_stride, int64_t nb, float *out,
                 size_t out_stride) {
    __m512 acc[4][4];
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) acc[r][j] = _mm512_setzero_ps();
    const int64_t np = nb / 2, npa = (nb + 1) / 2;
    int64_t p = 0;
    if (NR == 1 && NT == 1) { /* decode: two pairs per step, scales formed together */
        const float *da = (const float *)(act + a8_da_offset(npa));
        const int32_t *boff = (const int32_t *)(act + a8_boff_offset(npa));
        const float *dsum = (const float *)(act + a8_dsum_offset(npa));
        const __m512i i0 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i i1 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 2);
        const __m512i s0i = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i s1i = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
        for (; p + 2 <= np; p += 2) {
            const __m512 d4 = _mm512_castps128_ps512(b32_quad_h(t, w0, p, 0, da + 2 * p));
            const __m512i b4 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(boff + 2 * p)));
            const a8_pair *ap = (const a8_pair *)act + p;
            const __m512i d0 = _mm512_dpbusd_epi32(_mm512_maskz_permutexvar_epi32(0x0101, i0, b4),
                                                   b32_pair_q(t, w0, p, 0), _mm512_loadu_si512(ap->qs));
            const __m512i d1 = _mm512_dpbusd_epi32(_mm512_maskz_permutexvar_epi32(0x0101, i1, b4),
                                                   b32_pair_q(t, w0, p + 1, 0), _mm512_loadu_si512(ap[1].qs));
            __m512 m4 = _mm512_setzero_ps(), s4 = _mm512_setzero_ps();
            if (b32_has_min(t)) {
                m4 = _mm512_castps128_ps512(b32_quad_h(t, w0, p, 2, NULL));
                s4 = _mm512_castps128_ps512(_mm_loadu_ps(dsum + 2 * p));
            }
            acc[0][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(s0i, d4), acc[0][0]);
            if (b32_has_min(t))
                acc[0][0] = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0x0101, i0, m4),
                                            _mm512_maskz_permutexvar_ps(0x0101, i0, s4), acc[0][0]);
            acc[0][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(s1i, d4), acc[0][0]);
            if (b32_has_min(t))
                acc[0][0] = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0x0101, i1, m4),
                                            _mm512_maskz_permutexvar_ps(0x0101, i1, s4), acc[0][0]);
        }
    }
    for (; p < np; p++) b32_step(NR, NT, t, w0, row_bytes, act, act_stride, p, 0, npa, acc);
    if (nb & 1) b32_step(NR, NT, t, w0, row_bytes, act, act_stride, np, 1, npa, acc);
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = _mm512_reduce_add_ps(acc[r][j]);
}

KERN_TILES(q4_1, b32_tile, GGML_TYPE_Q4_1, 4, 4, K / 32)
KERN_TILES(q5_0, b32_tile, GGML_TYPE_Q5_0, 4, 4, K / 32)
KERN_TILES(q5_1, b32_tile, GGML_TYPE_Q5_1, 4, 4, K / 32)
KERN_TILES(iq4_nl, b32_tile, GGML_TYPE_IQ4_NL, 4, 4, K / 32)
/* INT8 / INT4 groups: G / 32 sub-blocks under one header (b32_hdr / b32_qs) */
KERN_TILES(i8_g64, b32_tile, IFD_TYPE_I8_G64, 4, 4, K / 32)
KERN_TILES(i8_g128, b32_tile, IFD_TYPE_I8_G128, 4, 4, K / 32)
KERN_TILES(i4_g64, b32_tile, IFD_TYPE_I4_G64, 4, 4, K / 32)
KERN_TILES(i4_g128, b32_tile, IFD_TYPE_I4_G128, 4, 4, K / 32)
/* ---- end of the 32-element block family ---------------------------------------------- */

/* ---- Q5_K / Q3_K / Q2_K / IQ4_XS, integer path (unpacked tiles) ----------------------
 * The same scheme as Q4_K / Q6_K: per pair c of 32-element sub-blocks of a super-block
 * (elements 64c .. 64c+63 in order), the 64 weights as unsigned bytes, one VPDPBUSD
 * with the activation pair (started from its offset vector for the zero-point types),
 * then one FMA with (per-lane weight scale * d_a). Per type:
 *  - Q5_K: Q4_K's nibbles plus the fifth bit from qh; its 8 scales and mins as Q4_K
 *    (the same 12-byte packing), minimum per super-block against dsum (q_min).
 *  - Q3_K: 2 low bits from qs, third bit from hmask: 0..7 = v + 4 (q_zero 4 per 16
 *    elements in the activation's offset vector); 16 signed six-bit scales.
 *  - Q2_K: 2-bit q 0..3, 16 four-bit scales and four-bit mins per 16 elements: the
 *    minimum term per super-block is one 16-lane FMA against the per-16 dsum.
 *  - IQ4_XS: nibble indices looked up (VPSHUFB) in the IQ4_NL table + 128 (q_signed:
 *    the -128 * sum offset per 32); 8 six-bit scales - 32.
 * Per element the sequence is fixed (super-blocks in order: the minimum FMA first,
 * then pairs 0..3), whatever the tile: batch invariant. */

/* Q5_K pair c: (nibble | fifth bit << 4), elements 64c .. 64c+63. */
AI __m512i q5k_pair(const uint8_t *blk, int c) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 48 + 32 * c)));
    const __m512i sh = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL,
                                        0x0004000400040004LL, 0x0004000400040004LL, 0, 0, 0, 0);
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0F));
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
    const __m512i bit = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1u << (2 * c)))),
                                           _mm256_set1_epi8((char)(1u << (2 * c + 1))), 1);
    const __mmask64 k = _mm512_test_epi8_mask(h, bit);
    return _mm512_or_si512(lo, _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(0x10)));
}

/* Q2_K / Q3_K pair c: the 2-bit fields of qs bytes 32(c/2) .. +31 at shifts 4(c%2) and
 * 4(c%2) + 2 (sub-blocks 2c, 2c+1). */
AI __m512i q2b_pair(const uint8_t *qs, int c) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (c >> 1))));
    const long long s0 = 4 * (c & 1), s1 = s0 + 2;
    const long long e0 = s0 * 0x0001000100010001LL, e1 = s1 * 0x0001000100010001LL;
    const __m512i sh = _mm512_set_epi64(e1, e1, e1, e1, e0, e0, e0, e0);
    return _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(3));
}

/* Q3_K pair c: 2 low bits | hmask bit << 2 (0..7). */
AI __m512i q3k_pair(const uint8_t *blk, int c) {
    const __m512i lo = q2b_pair(blk + 32, c);
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)blk));
    const int m0 = 4 * (c >> 1) + 2 * (c & 1);
    const __m512i bit = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1u << m0))),
                                           _mm256_set1_epi8((char)(1u << (m0 + 1))), 1);
    const __mmask64 k = _mm512_test_epi8_mask(h, bit);
    return _mm512_or_si512(lo, _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(4)));
}

/* The 16 six-bit Q3_K scales - 32 as int8 (bytes 96..107: low nibbles in 0..7,
 * high 2 bits in 8..11; see q3_K_scale in quant.c), vector only. */
AI __m128i q3k_scales16(const uint8_t *blk) {
    const __m128i raw = _mm_maskz_loadu_epi8(0x0FFF, blk + 96); /* the 12 bytes only */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(raw, 0x44), _mm_setr_epi32(0, 0, 4, 4)),
                                     _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(raw, 0xAA), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi32(hi, 4)), _mm_set1_epi8(32));
}

/* d * scale[0..15] of a Q3_K super-block (six-bit, stored + 32). */
AI __m512 q3k_scales(const uint8_t *blk) {
    const __m128i v = q3k_scales16(blk);
    const __m512 d = _mm512_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk + 108)))));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)));
}

/* d * sc[0..15] and dmin * m[0..15] of a Q2_K super-block. */
AI void q2k_scales(const uint8_t *blk, __m512 *dsc, __m512 *dm) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)blk));
    const __m512 d = _mm512_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk + 80)))));
    const __m512 dmin = _mm512_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk + 82)))));
    *dsc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(0xF))));
    *dm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4)));
}

/* IQ4_XS pair c: table value + 128 of elements 64c .. 64c+63 (sub-block 2c: qs bytes
 * 32c .. +15, low nibbles then high; 2c+1: the next 16). */
AI __m512i iq4xs_pair(const uint8_t *blk, int c) {
    const __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + 8 + 32 * c)));
    const __m512i vv = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0), v);
    const __m512i sh = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                        0x0004000400040004LL, 0x0004000400040004LL, 0, 0);
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi16(vv, sh), _mm512_set1_epi8(0x0F));
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(_mm_loadu_si128((const __m128i *)quant_iq4nl_values),
                                                             _mm_set1_epi8((char)0x80)));
    return _mm512_shuffle_epi8(tab, idx);
}

/* d * (ls - 32) of the 8 sub-blocks of an IQ4_XS super-block (lanes 0-7). */
AI __m512 iq4xs_scales(const uint8_t *blk) {
    uint32_t L;
    memcpy(&L, blk + 4, 4);
    const __m128i lo = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)(L & 0x0F0F0F0Fu)),
                                         _mm_cvtsi32_si128((int)((L >> 4) & 0x0F0F0F0Fu)));
    const __m128i hv = _mm_srlv_epi16(_mm_set1_epi16((short)ld16(blk + 2)), _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14));
    const __m128i hi = _mm_slli_epi16(_mm_and_si128(hv, _mm_set1_epi16(3)), 4);
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(lo), _mm256_cvtepu16_epi32(hi)),
                                        _mm256_set1_epi32(32));
    const __m256 d = _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk)))));
    return _mm512_castps256_ps512(_mm256_mul_ps(d, _mm256_cvtepi32_ps(ls)));
}

AI size_t kx_sb_bytes(ggml_type t) {
    return t == GGML_TYPE_Q5_K ? sizeof(block_q5_K)
           : t == GGML_TYPE_Q3_K ? sizeof(block_q3_K)
           : t == GGML_TYPE_Q2_K ? sizeof(block_q2_K)
                                 : sizeof(block_iq4_xs);
}

/* Micro-kernel for Q5_K / Q3_K / Q2_K / IQ4_XS, NR rows x NT tokens (shape of kq_tile). */
AI void kx_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nsb, float *out, size_t out_stride) {
    const size_t sbb = kx_sb_bytes(t);
    /* 16 scales (one per 16 elements) or 8 (one per 32) */
    const ggml_type sct = (t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q2_K) ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
    const int zp = t == GGML_TYPE_Q3_K || t == GGML_TYPE_IQ4_XS; /* offset vector */
    __m512 acc[KQ_NR][KQ_NT];
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) acc[r][j] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m512 scl[KQ_NR];
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)sb * sbb;
            if (NR > 1) _mm_prefetch((const char *)blk + PF_BYTES, _MM_HINT_T0);
            if (t == GGML_TYPE_Q5_K) {
                __m256 dm;
                q4k_scales(blk, &scl[r], &dm);
                for (int j = 0; j < NT; j++) {
                    const float *dsum = (const float *)(act + (size_t)j * act_stride + a8_dsum_offset(4 * nsb)) + 8 * sb;
                    acc[r][j] = _mm512_fnmadd_ps(_mm512_castps256_ps512(dm),
                                                 _mm512_castps256_ps512(_mm256_loadu_ps(dsum)), acc[r][j]);
                }
            } else if (t == GGML_TYPE_Q2_K) {
                __m512 dm;
                q2k_scales(blk, &scl[r], &dm);
                for (int j = 0; j < NT; j++) {
                    const float *dsum = (const float *)(act + (size_t)j * act_stride + a8_dsum_offset(4 * nsb)) + 16 * sb;
                    acc[r][j] = _mm512_fnmadd_ps(dm, _mm512_loadu_ps(dsum), acc[r][j]);
                }
            } else if (t == GGML_TYPE_Q3_K) {
                scl[r] = q3k_scales(blk);
            } else {
                scl[r] = iq4xs_scales(blk);
            }
        }
        for (int c = 0; c < 4; c++) {
            __m512i wq[KQ_NR];
            __m512 sv[KQ_NR];
            for (int r = 0; r < NR; r++) {
                const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)sb * sbb;
                wq[r] = t == GGML_TYPE_Q5_K   ? q5k_pair(blk, c)
                        : t == GGML_TYPE_Q3_K ? q3k_pair(blk, c)
                        : t == GGML_TYPE_Q2_K ? q2b_pair(blk + 16, c)
                                              : iq4xs_pair(blk, c);
                sv[r] = kq_pair_scale(sct, scl[r], c);
            }
            for (int j = 0; j < NT; j++) {
                const a8_pair *ap = (const a8_pair *)(act + (size_t)j * act_stride) + 4 * sb + c;
                const __m512i a = _mm512_loadu_si512(ap->qs);
                const __m512 dv = _mm512_loadu_ps(ap->d);
                const __m512i init = zp ? _mm512_loadu_si512(ap->bias) : _mm512_setzero_si512();
                for (int r = 0; r < NR; r++) {
                    const __m512i dot = _mm512_dpbusd_epi32(init, wq[r], a);
                    acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sv[r], dv), acc[r][j]);
                }
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = _mm512_reduce_add_ps(acc[r][j]);
}

KERN_TILES(q5_K, kx_tile, GGML_TYPE_Q5_K, KQ_NR, KQ_NT, K / QK_K)
KERN_TILES(q3_K, kx_tile, GGML_TYPE_Q3_K, KQ_NR, KQ_NT, K / QK_K)
KERN_TILES(q2_K, kx_tile, GGML_TYPE_Q2_K, KQ_NR, KQ_NT, K / QK_K)
KERN_TILES(iq4_xs, kx_tile, GGML_TYPE_IQ4_XS, KQ_NR, KQ_NT, K / QK_K)
/* ---- end Q5_K / Q3_K / Q2_K / IQ4_XS ---------------------------------------------------- */

/* ---- packed weights: 16 rows in lanes (Q8_0, Q4_0, Q5_0, Q4_K) -----------------------------
 * Prepared once (kern_pack): a group of 16 rows is interleaved so that one zmm holds
 * the same 4-byte column group of all 16 rows; VPDPBUSD with a {1to16} broadcast of 4
 * activation bytes then advances 16 outputs of one token at once, and per block and
 * token one convert and one FMA with (d_w vector * d_a) finish it: no horizontal sums.
 * Per lane (row, token) the instruction sequence is fixed (blocks in K order; the int
 * dot of a block exact; one float FMA per block, Q4_K: two per pair then the minimum
 * terms per super-block), whatever the token tile, so decode and prefill agree bit for
 * bit. Activations: the k5_act_prepare rows (block qs, compact da / boff / dsum).
 *
 * Q8_0 / Q4_0 group layout, per pair of blocks p: f16 d[2][16] (64 bytes), then block
 * 2p's and block 2p+1's quants, QB bytes each: column group c (4 bytes) of row i at
 * 64 c + 4 i (Q8_0: 8 groups, stored as w + 128; Q4_0: 4 groups of the 16 nibble
 * bytes: low nibbles elements 4c.., high nibbles 16 + 4c..). An odd last block leaves
 * its pair's second half zero (never read). Same bytes as the original up to that pad.
 * Q4_K group layout, per super-block (2368 bytes): f16 d[16], f16 dmin[16], u8 sc[8][16],
 * u8 m[8][16], then per 64-element chunk c the 32 nibble bytes of each row as 8 column
 * groups (low nibbles sub-block 2c, high 2c+1): 148 bytes a row vs 144. */

#define PK_NR 16
#define PK_NT 8   /* tokens per tile, Q8_0 / Q4_0 */
#define PK_KNT 6  /* Q4_K */
#define PK_KSB 2368
/* prefetch distance (bytes) of a group's first token tile, which streams it from DRAM */
#define PK_PF 4096

AI size_t pk_qb(ggml_type t) { /* IQ4_NL: Q4_0's layout; Q5_0: Q4_0's plus a fifth-bit plane */
    return t == GGML_TYPE_Q4_0 || t == GGML_TYPE_IQ4_NL ? 256 : t == GGML_TYPE_Q5_0 ? 320 : 512;
}
AI size_t pk_pb(ggml_type t) {
    return 64 + 2 * pk_qb(t);
}
static inline int32_t ld32i(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static size_t pk_gb_q4_K(int64_t K) {
    return (size_t)(K / QK_K) * PK_KSB;
}

static void pk_pack_a8(ggml_type t, uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    const int64_t nb = K / 32;
    const size_t QB = pk_qb(t), PB = pk_pb(t);
    memset(dst, 0, (size_t)((nb + 1) / 2) * PB);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pd = dst + (size_t)(b / 2) * PB;
        const int h = (int)(b & 1);
        for (int i = 0; i < PK_NR; i++) {
            const uint8_t *row = w + (size_t)i * rb;
            if (t == GGML_TYPE_Q4_0) {
                const block_q4_0 *blk = (const block_q4_0 *)row + b;
                memcpy(pd + 32 * h + 2 * i, &blk->d, 2);
                for (int c = 0; c < 4; c++)
                    for (int k = 0; k < 4; k++) pd[64 + h * QB + 64 * c + 4 * i + k] = blk->qs[4 * c + k];
            } else if (t == GGML_TYPE_Q5_0) { /* Q4_0's nibbles, then the fifth-bit plane */
                const block_q5_0 *blk = (const block_q5_0 *)row + b;
                uint32_t qh;
                memcpy(&qh, blk->qh, 4);
                memcpy(pd + 32 * h + 2 * i, &blk->d, 2);
                for (int c = 0; c < 4; c++)
                    for (int k = 0; k < 4; k++) {
                        pd[64 + h * QB + 64 * c + 4 * i + k] = blk->qs[4 * c + k];
                        pd[64 + h * QB + 256 + 4 * i + k] |=
                            (uint8_t)((((qh >> (4 * c + k)) & 1u) << c) | (((qh >> (16 + 4 * c + k)) & 1u) << (4 + c)));
                    }
            } else {
                const block_q8_0 *blk = (const block_q8_0 *)row + b;
                memcpy(pd + 32 * h + 2 * i, &blk->d, 2);
                for (int c = 0; c < 8; c++)
                    for (int k = 0; k < 4; k++)
                        pd[64 + h * QB + 64 * c + 4 * i + k] = (uint8_t)(blk->qs[4 * c + k] ^ 0x80);
            }
        }
    }
}
/* The kern_pack entries of a pair-of-blocks type: group bytes and the pack. */
#define PK_A8_LAYOUT(name, T)                                                            \
    static size_t pk_gb_##name(int64_t K) {                                              \
        return (size_t)((K / 32 + 1) / 2) * pk_pb(T);                                    \
    }                                                                                    \
    static void pk_pack_##name(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {  \
        pk_pack_a8(T, dst, w, rb, K);                                                    \
    }
PK_A8_LAYOUT(q8_0, GGML_TYPE_Q8_0)
PK_A8_LAYOUT(q4_0, GGML_TYPE_Q4_0)
PK_A8_LAYOUT(q5_0, GGML_TYPE_Q5_0)

static void pk_pack_q4_K(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * PK_KSB;
        for (int i = 0; i < PK_NR; i++) {
            const block_q4_K *blk = (const block_q4_K *)(w + (size_t)i * rb) + s;
            const uint8_t *q = blk->scales;
            memcpy(sb + 2 * i, &blk->d, 2);
            memcpy(sb + 32 + 2 * i, &blk->dmin, 2);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                quant_q4_K_scale_min(j, q, &sc, &m);
                sb[64 + 16 * j + i] = sc;
                sb[192 + 16 * j + i] = m;
            }
            for (int c = 0; c < 4; c++)
                for (int g = 0; g < 8; g++)
                    for (int k = 0; k < 4; k++)
                        sb[320 + 512 * c + 64 * g + 4 * i + k] = blk->qs[32 * c + 4 * g + k];
        }
    }
}

/* IQ4_NL (32-element block family): nibbles -> table value + 128 (as b32_pair_q);
 * other types: as they are. */
AI __m512i pk_nl_val(ggml_type t, __m512i nib) {
    if (t != GGML_TYPE_IQ4_NL) return nib;
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(
        _mm_loadu_si128((const __m128i *)quant_iq4nl_values), _mm_set1_epi8((char)0x80)));
    return _mm512_shuffle_epi8(tab, nib);
}

/* One 16-row group x NT tokens, Q8_0 / Q4_0 (and IQ4_NL, Q5_0): out[j * os + i]. */
AI void pk_a8_body(const int NT, ggml_type t, const uint8_t *grp, const uint8_t *act, size_t as,
                   int64_t nb, float *out, size_t os, int pf) {
    const int64_t np = (nb + 1) / 2;
    const size_t QB = pk_qb(t), PB = pk_pb(t);
    const float *da[PK_NT];
    const int32_t *bo[PK_NT];
    __m512 acc[PK_NT];
    for (int j = 0; j < NT; j++) {
        const uint8_t *aj = act + (size_t)j * as;
        da[j] = (const float *)(aj + a8_da_offset(np));
        bo[j] = (const int32_t *)(aj + a8_boff_offset(np));
        acc[j] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = grp + (size_t)(b >> 1) * PB;
        const int h = (int)(b & 1);
        const uint8_t *q = pb + 64 + h * QB;
        const size_t aoff = (size_t)(b >> 1) * sizeof(a8_pair) + 32 * (size_t)h;
        if (pf) /* the group's first token tile streams it from DRAM: fetch ahead */
            for (size_t l = 0; l < QB; l += 64) _mm_prefetch((const char *)q + PK_PF + l, _MM_HINT_T0);
        __m512i ia[PK_NT];
        for (int j = 0; j < NT; j++) ia[j] = _mm512_set1_epi32(bo[j][b]);
        if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_IQ4_NL || t == GGML_TYPE_Q5_0) {
            /* Q5_0: q = nibble | fifth bit << 4 (0..31); plane byte 4i+k holds bit c (low
             * half, element 4c+k) and bit 4+c (high half, 16+4c+k): each shifted to bit 4
             * (within its byte, as c <= 3) and OR-ed in (VPTERNLOG a | (b & 0x10)). */
            const __m512i p5 = t == GGML_TYPE_Q5_0 ? _mm512_load_si512(q + 256) : _mm512_setzero_si512();
            for (int c = 0; c < 4; c++) {
                const __m512i v = _mm512_load_si512(q + 64 * c);
                __m512i lo = pk_nl_val(t, _mm512_and_si512(v, m4));
                __m512i hi = pk_nl_val(t, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                if (t == GGML_TYPE_Q5_0) {
                    lo = _mm512_ternarylogic_epi32(lo, _mm512_slli_epi16(p5, 4 - c), m10, 0xF8);
                    hi = _mm512_ternarylogic_epi32(hi, _mm512_srli_epi16(p5, c), m10, 0xF8);
                }
                for (int j = 0; j < NT; j++) {
                    const uint8_t *a = act + (size_t)j * as + aoff;
                    ia[j] = _mm512_dpbusd_epi32(ia[j], lo, _mm512_set1_epi32(ld32i(a + 4 * c)));
                    ia[j] = _mm512_dpbusd_epi32(ia[j], hi, _mm512_set1_epi32(ld32i(a + 16 + 4 * c)));
                }
            }
        } else {
            for (int c = 0; c < 8; c++) {
                const __m512i v = _mm512_load_si512(q + 64 * c);
                for (int j = 0; j < NT; j++) {
                    const uint8_t *a = act + (size_t)j * as + aoff;
                    ia[j] = _mm512_dpbusd_epi32(ia[j], v, _mm512_set1_epi32(ld32i(a + 4 * c)));
                }
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pb + 32 * h)));
        for (int j = 0; j < NT; j++)
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[j]), _mm512_mul_ps(dw, _mm512_set1_ps(da[j][b])), acc[j]);
    }
    for (int j = 0; j < NT; j++) _mm512_storeu_ps(out + (size_t)j * os, acc[j]);
}

/* One 16-row group x NT tokens, Q4_K. */
AI void pk_q4k_body(const int NT, const uint8_t *grp, const uint8_t *act, size_t as, int64_t nsb,
                    float *out, size_t os, int pf) {
    const int64_t np = 4 * nsb;
    const float *da[PK_KNT], *ds[PK_KNT];
    __m512 acc[PK_KNT];
    for (int j = 0; j < NT; j++) {
        const uint8_t *aj = act + (size_t)j * as;
        da[j] = (const float *)(aj + a8_da_offset(np));
        ds[j] = (const float *)(aj + a8_dsum_offset(np));
        acc[j] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * PK_KSB;
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sb));
        for (int c = 0; c < 4; c++) {
            __m512i i0[PK_KNT], i1[PK_KNT];
            for (int j = 0; j < NT; j++) i0[j] = i1[j] = _mm512_setzero_si512();
            const uint8_t *q = sb + 320 + 512 * c;
            const size_t aoff = (size_t)(4 * s + c) * sizeof(a8_pair);
            if (pf) /* the group's first token tile streams it from DRAM: fetch ahead */
                for (int l = 0; l < 8; l++) _mm_prefetch((const char *)q + PK_PF + 64 * l, _MM_HINT_T0);
            for (int g = 0; g < 8; g++) {
                const __m512i v = _mm512_load_si512(q + 64 * g);
                const __m512i lo = _mm512_and_si512(v, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                for (int j = 0; j < NT; j++) {
                    const uint8_t *a = act + (size_t)j * as + aoff;
                    i0[j] = _mm512_dpbusd_epi32(i0[j], lo, _mm512_set1_epi32(ld32i(a + 4 * g)));
                    i1[j] = _mm512_dpbusd_epi32(i1[j], hi, _mm512_set1_epi32(ld32i(a + 32 + 4 * g)));
                }
            }
            const __m512 s0 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                    _mm_load_si128((const __m128i *)(sb + 64 + 32 * c)))));
            const __m512 s1 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                    _mm_load_si128((const __m128i *)(sb + 80 + 32 * c)))));
            const int64_t b0 = 8 * s + 2 * c;
            for (int j = 0; j < NT; j++) {
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0[j]), _mm512_mul_ps(s0, _mm512_set1_ps(da[j][b0])), acc[j]);
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[j]), _mm512_mul_ps(s1, _mm512_set1_ps(da[j][b0 + 1])), acc[j]);
            }
        }
        const __m512 mv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sb + 32)));
        for (int k = 0; k < 8; k++) {
            const __m512 mm = _mm512_mul_ps(mv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                    _mm_load_si128((const __m128i *)(sb + 192 + 16 * k)))));
            for (int j = 0; j < NT; j++)
                acc[j] = _mm512_fnmadd_ps(mm, _mm512_set1_ps(ds[j][8 * s + k]), acc[j]);
        }
    }
    for (int j = 0; j < NT; j++) _mm512_storeu_ps(out + (size_t)j * os, acc[j]);
}

/* Groups in order; per group the full token tiles, then the rest in one narrower tile
 * (the same per-lane sequence). */
#define PK_GEMM(NAME, BODY_NT, BODY_R, NTILE)                                                 \
    static void NAME(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act, size_t as, \
                     int64_t K, float *out, size_t os, int32_t nt) {                          \
        _Static_assert((NTILE) <= 8, "KERN_REM covers remainders up to 7");                      \
        for (int64_t g = 0; g < ng; g++) {                                                     \
            const uint8_t *gp = grp + (size_t)g * gb;                                          \
            float *og = out + (size_t)g * PK_NR;                                               \
            int32_t j = 0;                                                                     \
            for (; j + (NTILE) <= nt; j += (NTILE))                                            \
                BODY_NT(gp, act + (size_t)j * as, as, K, og + (size_t)j * os, os, j == 0);      \
            if (j < nt)                                                                        \
                KERN_REM(BODY_R, NTILE, nt - j, gp, act + (size_t)j * as, as, K, og + (size_t)j * os, \
                       os, j == 0)                                                             \
        }                                                                                      \
    }
#define PK_Q8_NT(g, a, as, K, o, os, pf) pk_a8_body(PK_NT, GGML_TYPE_Q8_0, g, a, as, (K) / 32, o, os, pf)
#define PK_Q8_R(r, g, a, as, K, o, os, pf) pk_a8_body((r), GGML_TYPE_Q8_0, g, a, as, (K) / 32, o, os, pf)
#define PK_Q4_NT(g, a, as, K, o, os, pf) pk_a8_body(PK_NT, GGML_TYPE_Q4_0, g, a, as, (K) / 32, o, os, pf)
#define PK_Q4_R(r, g, a, as, K, o, os, pf) pk_a8_body((r), GGML_TYPE_Q4_0, g, a, as, (K) / 32, o, os, pf)
#define PK_Q4K_NT(g, a, as, K, o, os, pf) pk_q4k_body(PK_KNT, g, a, as, (K) / QK_K, o, os, pf)
#define PK_Q4K_R(r, g, a, as, K, o, os, pf) pk_q4k_body((r), g, a, as, (K) / QK_K, o, os, pf)
PK_GEMM(pk_gemm_q8_0, PK_Q8_NT, PK_Q8_R, PK_NT)
PK_GEMM(pk_gemm_q4_0, PK_Q4_NT, PK_Q4_R, PK_NT)
#define PK_Q5_NT(g, a, as, K, o, os, pf) pk_a8_body(PK_NT, GGML_TYPE_Q5_0, g, a, as, (K) / 32, o, os, pf)
#define PK_Q5_R(r, g, a, as, K, o, os, pf) pk_a8_body((r), GGML_TYPE_Q5_0, g, a, as, (K) / 32, o, os, pf)
PK_GEMM(pk_gemm_q5_0, PK_Q5_NT, PK_Q5_R, PK_NT)
PK_GEMM(pk_gemm_q4_K, PK_Q4K_NT, PK_Q4K_R, PK_KNT)
/* 32-element block family: IQ4_NL packs byte for byte as Q4_0 (same block layout: f16 d,
 * 16 nibble bytes), its body adds the table lookup (pk_nl_val). */
#define PK_NL_NT(g, a, as, K, o, os, pf) pk_a8_body(PK_NT, GGML_TYPE_IQ4_NL, g, a, as, (K) / 32, o, os, pf)
#define PK_NL_R(r, g, a, as, K, o, os, pf) pk_a8_body((r), GGML_TYPE_IQ4_NL, g, a, as, (K) / 32, o, os, pf)
PK_GEMM(pk_gemm_iq4_nl, PK_NL_NT, PK_NL_R, PK_NT)

/* ---- packed INT8 / INT4 groups and Q4_1: 16 rows in lanes ------------------------------
 * IFD_TYPE_I8_G64 / I8_G128 (w = d*q, q int8), IFD_TYPE_I4_G64 / I4_G128 and Q4_1 (its
 * group-32 case: w = d*q + m, q 0..15), one body parameterised by the group size G and
 * the bits. The Q8_0 / Q4_0 interleave (column group c of row i at 64 c + 4 i, VPDPBUSD
 * with a {1to16} broadcast of 4 activation bytes), per group of G elements:
 *   per 32-element sub-block s: isum = int dot (I8: started at the activation's -128 *
 *   sum offset, the weights stored as q + 128), ag = fma(float(isum), d_a[s], ag);
 *   then out = fma(d_w, ag, out) and (INT4) out = fma(m_w, dsum_g, out) with dsum_g the
 *   sum in sub-block order of the group's d_a * sum(a) (a scalar per token).
 * The integer dot is exact, so its chains are free: decode (one token) splits INT4's in
 * two (low / high nibbles) to halve the VPDPBUSD latency chain; the isum is the same.
 * Per lane (row, token) the sequence is fixed whatever the token tile: batch invariant,
 * decode and prefill bit-identical.
 *
 * Group layout, unit by unit (INT8: a pair of groups, INT4 / Q4_1: one group): a 64-byte
 * header (INT8: f16 d[2][16], the pair's scales; INT4: f16 d[16], f16 m[16]), then the
 * unit's sub-blocks, SB bytes each of 16 rows (INT8: 8 column groups = 512 bytes, as w +
 * 128; INT4: 4 column groups of the 16 nibble bytes = 256). An odd last INT8 group leaves
 * its pair's second half zero (never read). Exactly the original's bytes up to that pad. */

#define GP_NT 8 /* tokens per tile */

AI int gp_i8(ggml_type t) {
    return t == IFD_TYPE_I8_G64 || t == IFD_TYPE_I8_G128;
}
AI int gp_g(ggml_type t) {
    return t == GGML_TYPE_Q4_1 ? 32 : t == IFD_TYPE_I8_G128 || t == IFD_TYPE_I4_G128 ? 128 : 64;
}
AI int gp_upg(ggml_type t) { /* groups per unit */
    return gp_i8(t) ? 2 : 1;
}
AI size_t gp_sb(ggml_type t) { /* bytes of one sub-block of the 16 rows */
    return gp_i8(t) ? 512 : 256;
}
AI size_t gp_ub(ggml_type t) { /* bytes of one unit */
    return 64 + (size_t)gp_upg(t) * (size_t)(gp_g(t) / 32) * gp_sb(t);
}
AI size_t gp_gb(ggml_type t, int64_t K) {
    const int64_t ng = K / gp_g(t);
    return (size_t)((ng + gp_upg(t) - 1) / gp_upg(t)) * gp_ub(t);
}

AI void gp_pack(ggml_type t, uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    const int G = gp_g(t), NS = G / 32, I8 = gp_i8(t);
    const size_t SB = gp_sb(t), UB = gp_ub(t), GB = I8 ? 2 + (size_t)G : 4 + (size_t)G / 2;
    const int64_t ng = K / G;
    memset(dst, 0, gp_gb(t, K));
    for (int64_t g = 0; g < ng; g++) {
        uint8_t *u = dst + (size_t)(g / gp_upg(t)) * UB;
        const int h = (int)(g % gp_upg(t));
        for (int i = 0; i < PK_NR; i++) {
            const uint8_t *blk = w + (size_t)i * rb + (size_t)g * GB;
            memcpy(u + 32 * h + 2 * i, blk, 2); /* d */
            if (!I8) memcpy(u + 32 + 2 * i, blk + 2, 2); /* m */
            for (int s = 0; s < NS; s++) {
                uint8_t *q = u + 64 + (size_t)(h * NS + s) * SB;
                if (I8) {
                    for (int c = 0; c < 8; c++)
                        for (int k = 0; k < 4; k++)
                            q[64 * c + 4 * i + k] = (uint8_t)(blk[2 + 32 * s + 4 * c + k] ^ 0x80);
                } else {
                    for (int c = 0; c < 4; c++)
                        for (int k = 0; k < 4; k++) q[64 * c + 4 * i + k] = blk[4 + 16 * s + 4 * c + k];
                }
            }
        }
    }
}

/* One 16-row group x NT tokens: out[j * os + i]. */
AI void gp_body(const int NT, ggml_type t, const uint8_t *grp, const uint8_t *act, size_t as,
                int64_t K, float *out, size_t os, int pf) {
    const int G = gp_g(t), NS = G / 32, I8 = gp_i8(t), UPG = gp_upg(t);
    const int64_t nb = K / 32, np = (nb + 1) / 2, ng = K / G;
    const size_t SB = gp_sb(t), UB = gp_ub(t);
    const float *da[GP_NT], *ds[GP_NT];
    const int32_t *bo[GP_NT];
    __m512 acc[GP_NT];
    for (int j = 0; j < NT; j++) {
        const uint8_t *aj = act + (size_t)j * as;
        da[j] = (const float *)(aj + a8_da_offset(np));
        bo[j] = (const int32_t *)(aj + a8_boff_offset(np));
        ds[j] = (const float *)(aj + a8_dsum_offset(np));
        acc[j] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *u = grp + (size_t)(g / UPG) * UB;
        const int h = (int)(g % UPG);
        __m512 ag[GP_NT];
        for (int j = 0; j < NT; j++) ag[j] = _mm512_setzero_ps();
        for (int s = 0; s < NS; s++) {
            const int64_t b = g * NS + s;
            const uint8_t *q = u + 64 + (size_t)(h * NS + s) * SB;
            const size_t aoff = (size_t)(b >> 1) * sizeof(a8_pair) + 32 * (size_t)(b & 1);
            if (pf) /* the group's first token tile streams it from DRAM: fetch ahead */
                for (size_t l = 0; l < SB; l += 64) _mm_prefetch((const char *)q + PK_PF + l, _MM_HINT_T0);
            __m512i ia[GP_NT];
            for (int j = 0; j < NT; j++) ia[j] = I8 ? _mm512_set1_epi32(bo[j][b]) : _mm512_setzero_si512();
            if (I8) {
                for (int c = 0; c < 8; c++) {
                    const __m512i v = _mm512_load_si512(q + 64 * c);
                    for (int j = 0; j < NT; j++) {
                        const uint8_t *a = act + (size_t)j * as + aoff;
                        ia[j] = _mm512_dpbusd_epi32(ia[j], v, _mm512_set1_epi32(ld32i(a + 4 * c)));
                    }
                }
            } else if (NT == 1) { /* decode: two integer chains (exact: the same isum) */
                __m512i ib = _mm512_setzero_si512();
                for (int c = 0; c < 4; c++) {
                    const __m512i v = _mm512_load_si512(q + 64 * c);
                    ia[0] = _mm512_dpbusd_epi32(ia[0], _mm512_and_si512(v, m4), _mm512_set1_epi32(ld32i(act + aoff + 4 * c)));
                    ib = _mm512_dpbusd_epi32(ib, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                             _mm512_set1_epi32(ld32i(act + aoff + 16 + 4 * c)));
                }
                ia[0] = _mm512_add_epi32(ia[0], ib);
            } else {
                for (int c = 0; c < 4; c++) {
                    const __m512i v = _mm512_load_si512(q + 64 * c);
                    const __m512i lo = _mm512_and_si512(v, m4);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    for (int j = 0; j < NT; j++) {
                        const uint8_t *a = act + (size_t)j * as + aoff;
                        ia[j] = _mm512_dpbusd_epi32(ia[j], lo, _mm512_set1_epi32(ld32i(a + 4 * c)));
                        ia[j] = _mm512_dpbusd_epi32(ia[j], hi, _mm512_set1_epi32(ld32i(a + 16 + 4 * c)));
                    }
                }
            }
            for (int j = 0; j < NT; j++)
                ag[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[j]), _mm512_set1_ps(da[j][b]), ag[j]);
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(u + 32 * h)));
        for (int j = 0; j < NT; j++) acc[j] = _mm512_fmadd_ps(dv, ag[j], acc[j]);
        if (!I8) {
            const __m512 mv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(u + 32)));
            for (int j = 0; j < NT; j++) {
                float sg = ds[j][g * NS];
                for (int s = 1; s < NS; s++) sg += ds[j][g * NS + s];
                acc[j] = _mm512_fmadd_ps(mv, _mm512_set1_ps(sg), acc[j]);
            }
        }
    }
    for (int j = 0; j < NT; j++) _mm512_storeu_ps(out + (size_t)j * os, acc[j]);
}

#define GP_DEC 2 /* groups streamed side by side at decode */

/* Decode: NG 16-row groups (gb bytes apart, outputs 16 apart) x one token. Per row the
 * arithmetic of gp_body(1) (isum is an exact integer whatever order its products are
 * added in; ag and out chain in the same order), so the bits are the same; the groups'
 * weights stream side by side (NG prefetch streams) and each activation broadcast is
 * made once for all. */
AI void gp_body_dec(const int NG, ggml_type t, const uint8_t *grp, size_t gb, const uint8_t *act,
                    int64_t K, float *out) {
    const int G = gp_g(t), NS = G / 32, I8 = gp_i8(t), UPG = gp_upg(t);
    const int64_t nb = K / 32, np = (nb + 1) / 2, ng = K / G;
    const size_t SB = gp_sb(t), UB = gp_ub(t);
    const float *da = (const float *)(act + a8_da_offset(np));
    const int32_t *bo = (const int32_t *)(act + a8_boff_offset(np));
    const float *ds = (const float *)(act + a8_dsum_offset(np));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[GP_DEC];
    for (int r = 0; r < NG; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *u = grp + (size_t)(g / UPG) * UB;
        const int h = (int)(g % UPG);
        __m512 ag[GP_DEC];
        for (int r = 0; r < NG; r++) ag[r] = _mm512_setzero_ps();
        for (int s = 0; s < NS; s++) {
            const int64_t b = g * NS + s;
            const uint8_t *q = u + 64 + (size_t)(h * NS + s) * SB; /* group r's: q + r * gb */
            const uint8_t *a = act + (size_t)(b >> 1) * sizeof(a8_pair) + 32 * (size_t)(b & 1);
            /* PK_PF ahead in each stream's own sequence: past a group's end, the same
             * offset of the next round's group (a hint: may point past the matrix) */
            size_t pf = (size_t)(q - grp) + PK_PF;
            if (pf >= gb) pf += (size_t)(NG - 1) * gb;
            for (size_t l = 0; l < SB; l += 64)
                for (int r = 0; r < NG; r++) _mm_prefetch((const char *)grp + pf + (size_t)r * gb + l, _MM_HINT_T0);
            __m512i ia[GP_DEC];
            if (I8) {
                for (int r = 0; r < NG; r++) ia[r] = _mm512_set1_epi32(bo[b]);
                for (int c = 0; c < 8; c++) {
                    const __m512i av = _mm512_set1_epi32(ld32i(a + 4 * c));
                    for (int r = 0; r < NG; r++)
                        ia[r] = _mm512_dpbusd_epi32(ia[r], _mm512_load_si512(q + (size_t)r * gb + 64 * c), av);
                }
            } else { /* two integer chains per group (exact: the same isum) */
                __m512i ib[GP_DEC];
                for (int r = 0; r < NG; r++) ia[r] = ib[r] = _mm512_setzero_si512();
                for (int c = 0; c < 4; c++) {
                    const __m512i al = _mm512_set1_epi32(ld32i(a + 4 * c)), ah = _mm512_set1_epi32(ld32i(a + 16 + 4 * c));
                    for (int r = 0; r < NG; r++) {
                        const __m512i v = _mm512_load_si512(q + (size_t)r * gb + 64 * c);
                        ia[r] = _mm512_dpbusd_epi32(ia[r], _mm512_and_si512(v, m4), al);
                        ib[r] = _mm512_dpbusd_epi32(ib[r], _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), ah);
                    }
                }
                for (int r = 0; r < NG; r++) ia[r] = _mm512_add_epi32(ia[r], ib[r]);
            }
            const __m512 dav = _mm512_set1_ps(da[b]);
            for (int r = 0; r < NG; r++) ag[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r]), dav, ag[r]);
        }
        for (int r = 0; r < NG; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(u + (size_t)r * gb + 32 * h))),
                                     ag[r], acc[r]);
        if (!I8) {
            float sg = ds[g * NS];
            for (int s = 1; s < NS; s++) sg += ds[g * NS + s];
            const __m512 sv = _mm512_set1_ps(sg);
            for (int r = 0; r < NG; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(u + (size_t)r * gb + 32))),
                                         sv, acc[r]);
        }
    }
    for (int r = 0; r < NG; r++) _mm512_storeu_ps(out + PK_NR * r, acc[r]);
}

/* Groups in order; per group the full token tiles, then the rest in one narrower tile
 * (decode: GP_DEC groups at a time). */
#define GP_R(r, ...) gp_body((r), __VA_ARGS__)
#define GP_FNS(name, T)                                                                        \
    static size_t pk_gb_##name(int64_t K) {                                                    \
        return gp_gb(T, K);                                                                    \
    }                                                                                          \
    static void pk_pack_##name(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {         \
        gp_pack(T, dst, w, rb, K);                                                             \
    }                                                                                          \
    static void pk_gemm_##name(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act,  \
                               size_t as, int64_t K, float *out, size_t os, int32_t nt) {      \
        int64_t g = 0;                                                                         \
        if (nt == 1)                                                                           \
            for (; g + GP_DEC <= ng; g += GP_DEC)                                              \
                gp_body_dec(GP_DEC, T, grp + (size_t)g * gb, gb, act, K, out + (size_t)g * PK_NR); \
        for (; g < ng; g++) {                                                                  \
            const uint8_t *gp = grp + (size_t)g * gb;                                          \
            float *og = out + (size_t)g * PK_NR;                                               \
            int32_t j = 0;                                                                     \
            for (; j + GP_NT <= nt; j += GP_NT)                                                \
                gp_body(GP_NT, T, gp, act + (size_t)j * as, as, K, og + (size_t)j * os, os, j == 0); \
            if (j < nt)                                                                        \
                KERN_REM(GP_R, GP_NT, nt - j, T, gp, act + (size_t)j * as, as, K, og + (size_t)j * os, \
                       os, j == 0)                                                             \
        }                                                                                      \
    }
GP_FNS(i8_g64, IFD_TYPE_I8_G64)
GP_FNS(i8_g128, IFD_TYPE_I8_G128)
GP_FNS(i4_g64, IFD_TYPE_I4_G64)
GP_FNS(i4_g128, IFD_TYPE_I4_G128)
GP_FNS(q4_1, GGML_TYPE_Q4_1)
/* ---- end packed INT8 / INT4 groups and Q4_1 ----------------------------------------------- */

/* Q6_K group layout, per super-block (3392 bytes): f16 d[16] (64 bytes with padding),
 * int8 sc[16][16] (scale group x row), then per 64-element chunk c (elements 64c ..
 * 64c+63): 8 column groups of nibble bytes (low nibble: element 4g+p, high: 32+4g+p,
 * their low 4 bits) and 4 vectors of their top 2 bits (vector k, byte p of row i: bits
 * 0-1 / 2-3 / 4-5 / 6-7 <- elements 8k+p / 32+8k+p / 8k+4+p / 36+8k+p): 212 bytes a row
 * vs 210. Values unsigned 0..63; the -32 offset per 16 elements rides in the
 * activation's bias (as the unpacked kernel). */
/* Tokens per tile: 6, as Q4_K (a verification of up to 5 drafts is one pass over the
 * weights; at 4, T = 5 read them twice). With scale group 4c+0 folded in early, 4 NT
 * integer sums and NT accumulators live at most; 8 was slower (T = 16 and 512). */
#define PK_6NT 6
#define PK_6SB 3392

static size_t pk_gb_q6_K(int64_t K) {
    return (size_t)(K / QK_K) * PK_6SB;
}

static void pk_pack_q6_K(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    memset(dst, 0, pk_gb_q6_K(K));
    uint8_t q[QK_K];
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * PK_6SB;
        for (int i = 0; i < PK_NR; i++) {
            const block_q6_K *blk = (const block_q6_K *)(w + (size_t)i * rb) + s;
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
            for (int j = 0; j < 16; j++) sb[64 + 16 * j + i] = (uint8_t)blk->scales[j];
            for (int c = 0; c < 4; c++) {
                uint8_t *ch = sb + 320 + 768 * c;
                const uint8_t *qc = q + 64 * c;
                for (int g = 0; g < 8; g++)
                    for (int p = 0; p < 4; p++)
                        ch[64 * g + 4 * i + p] = (uint8_t)((qc[4 * g + p] & 0xF) | (qc[32 + 4 * g + p] & 0xF) << 4);
                for (int k = 0; k < 4; k++)
                    for (int p = 0; p < 4; p++)
                        ch[512 + 64 * k + 4 * i + p] =
                            (uint8_t)((qc[8 * k + p] >> 4) | (qc[32 + 8 * k + p] >> 4) << 2 |
                                      (qc[8 * k + 4 + p] >> 4) << 4 | (qc[36 + 8 * k + p] >> 4) << 6);
            }
        }
    }
}

/* Half h of a Q6_K chunk (column groups 4h .. 4h+3: scale groups h (low nibbles) and 2+h
 * (high)) into il / ih. A function of its own so that each accumulator array has a fixed
 * name: indexed by g >> 2 inside one loop, GCC kept them on the stack. */
AI void pk_q6k_half(const int NT, const int h, const uint8_t *ch, const uint8_t *act, size_t as,
                    size_t aoff, __m512i *il, __m512i *ih) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i H = _mm512_load_si512(ch + 512 + 128 * h), H1 = _mm512_load_si512(ch + 576 + 128 * h);
    for (int gg = 0; gg < 4; gg++) {
        const int g = 4 * h + gg;
        const __m512i v = _mm512_load_si512(ch + 64 * g);
        const __m512i Hg = (gg >> 1) ? H1 : H;
        const __m512i lh = (g & 1) ? _mm512_and_si512(Hg, m30) : _mm512_and_si512(_mm512_slli_epi16(Hg, 4), m30);
        const __m512i hh = (g & 1) ? _mm512_and_si512(_mm512_srli_epi16(Hg, 2), m30)
                                   : _mm512_and_si512(_mm512_slli_epi16(Hg, 2), m30);
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), lh);
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), hh);
        for (int j = 0; j < NT; j++) {
            const uint8_t *a = act + (size_t)j * as + aoff;
            il[j] = _mm512_dpbusd_epi32(il[j], lo, _mm512_set1_epi32(ld32i(a + 4 * g)));
            ih[j] = _mm512_dpbusd_epi32(ih[j], hi, _mm512_set1_epi32(ld32i(a + 32 + 4 * g)));
        }
    }
}

/* acc[j] += float(is[j]) * (d * sc) * d_a[j][b] for one scale group (sc: its 16 rows). */
AI void pk_q6k_fold(const int NT, __m512 dv, const uint8_t *sc16, const float *const *da, int64_t b,
                    const __m512i *is, __m512 *acc) {
    const __m512 sc = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)sc16))));
    for (int j = 0; j < NT; j++)
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[j]), _mm512_mul_ps(sc, _mm512_set1_ps(da[j][b])), acc[j]);
}

/* One 16-row group x NT tokens, Q6_K. */
AI void pk_q6k_body(const int NT, const uint8_t *grp, const uint8_t *act, size_t as, int64_t nsb,
                    float *out, size_t os, int pf) {
    const int64_t np = 4 * nsb;
    const float *da[PK_6NT];
    __m512 acc[PK_6NT];
    for (int j = 0; j < NT; j++) {
        da[j] = (const float *)(act + (size_t)j * as + a8_da_offset(np));
        acc[j] = _mm512_setzero_ps();
    }
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * PK_6SB;
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sb));
        for (int c = 0; c < 4; c++) {
            const uint8_t *ch = sb + 320 + 768 * c;
            const size_t aoff = (size_t)(4 * s + c) * sizeof(a8_pair);
            if (pf) /* the group's first token tile streams it from DRAM: fetch ahead */
                for (int l = 0; l < 12; l++) _mm_prefetch((const char *)ch + PK_PF + 64 * l, _MM_HINT_T0);
            __m512i i0[PK_6NT], i1[PK_6NT], i2[PK_6NT], i3[PK_6NT]; /* scale groups 4c .. 4c+3 */
            for (int j = 0; j < NT; j++) {
                const a8_pair *ap = (const a8_pair *)(act + (size_t)j * as + aoff);
                i0[j] = _mm512_set1_epi32(ap->bias[0]);
                i1[j] = _mm512_set1_epi32(ap->bias[4]);
                i2[j] = _mm512_set1_epi32(ap->bias[8]);
                i3[j] = _mm512_set1_epi32(ap->bias[12]);
            }
            const int64_t b0 = 8 * s + 2 * c;
            /* scale group 4c+0 folds in before the second half fills its sums, so that
             * no more than 4 NT of them live at once (the order per lane is unchanged) */
            pk_q6k_half(NT, 0, ch, act, as, aoff, i0, i2);
            pk_q6k_fold(NT, dv, sb + 64 + 16 * (4 * c), da, b0, i0, acc);
            pk_q6k_half(NT, 1, ch, act, as, aoff, i1, i3);
            pk_q6k_fold(NT, dv, sb + 64 + 16 * (4 * c + 1), da, b0, i1, acc);
            pk_q6k_fold(NT, dv, sb + 64 + 16 * (4 * c + 2), da, b0 + 1, i2, acc);
            pk_q6k_fold(NT, dv, sb + 64 + 16 * (4 * c + 3), da, b0 + 1, i3, acc);
        }
    }
    for (int j = 0; j < NT; j++) _mm512_storeu_ps(out + (size_t)j * os, acc[j]);
}
#define PK_Q6K_NT(g, a, as, K, o, os, pf) pk_q6k_body(PK_6NT, g, a, as, (K) / QK_K, o, os, pf)
#define PK_Q6K_R(r, g, a, as, K, o, os, pf) pk_q6k_body((r), g, a, as, (K) / QK_K, o, os, pf)
PK_GEMM(pk_gemm_q6_K, PK_Q6K_NT, PK_Q6K_R, PK_6NT)

/* ---- packed Q5_K: 16 rows in lanes ---------------------------------------------------
 * Q4_K's group layout plus the fifth bits, per super-block (2880 bytes): f16 d[16],
 * f16 dmin[16], u8 sc[8][16], u8 m[8][16], then per 64-element chunk c (640 bytes):
 * the 32 nibble bytes of each row as 8 column groups (low nibbles sub-block 2c, high
 * 2c+1; as Q4_K) and two 64-byte vectors of fifth bits (sub-block 2c, then 2c+1): byte
 * 4i + k of row i holds bit g <- the fifth bit of element 4g + k of the sub-block.
 * 180 bytes a row vs 176. The per-lane sequence is pk_q4k_body's (two FMAs per chunk,
 * then the 8 minimum terms per super-block), whatever the token tile. */
#define PK_5SB 2880
#define PK_5NT 6

static size_t pk_gb_q5_K(int64_t K) {
    return (size_t)(K / QK_K) * PK_5SB;
}

static void pk_pack_q5_K(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    memset(dst, 0, pk_gb_q5_K(K));
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * PK_5SB;
        for (int i = 0; i < PK_NR; i++) {
            const block_q5_K *blk = (const block_q5_K *)(w + (size_t)i * rb) + s;
            memcpy(sb + 2 * i, &blk->d, 2);
            memcpy(sb + 32 + 2 * i, &blk->dmin, 2);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                quant_q4_K_scale_min(j, blk->scales, &sc, &m);
                sb[64 + 16 * j + i] = sc;
                sb[192 + 16 * j + i] = m;
            }
            for (int c = 0; c < 4; c++) {
                uint8_t *ch = sb + 320 + 640 * c;
                for (int g = 0; g < 8; g++)
                    for (int k = 0; k < 4; k++) {
                        const int l = 4 * g + k;
                        ch[64 * g + 4 * i + k] = blk->qs[32 * c + l];
                        for (int h = 0; h < 2; h++)
                            if (blk->qh[l] & (1u << (2 * c + h))) ch[512 + 64 * h + 4 * i + k] |= (uint8_t)(1u << g);
                    }
            }
        }
    }
}

/* Fifth bit of column group g (the vector H of a sub-block) at bit 4 of each byte. */
AI __m512i pk5_hbit(__m512i H, int g) {
    const __m512i v = g <= 4 ? _mm512_slli_epi16(H, (unsigned)(4 - g)) : _mm512_srli_epi16(H, (unsigned)(g - 4));
    return _mm512_and_si512(v, _mm512_set1_epi8(0x10));
}

/* One 16-row group x NT tokens, Q5_K. */
AI void pk_q5k_body(const int NT, const uint8_t *grp, const uint8_t *act, size_t as, int64_t nsb,
                    float *out, size_t os, int pf) {
    const int64_t np = 4 * nsb;
    const float *da[PK_5NT], *ds[PK_5NT];
    __m512 acc[PK_5NT];
    for (int j = 0; j < NT; j++) {
        const uint8_t *aj = act + (size_t)j * as;
        da[j] = (const float *)(aj + a8_da_offset(np));
        ds[j] = (const float *)(aj + a8_dsum_offset(np));
        acc[j] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * PK_5SB;
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sb));
        for (int c = 0; c < 4; c++) {
            __m512i i0[PK_5NT], i1[PK_5NT];
            for (int j = 0; j < NT; j++) i0[j] = i1[j] = _mm512_setzero_si512();
            const uint8_t *q = sb + 320 + 640 * c;
            const size_t aoff = (size_t)(4 * s + c) * sizeof(a8_pair);
            if (pf) /* the group's first token tile streams it from DRAM: fetch ahead */
                for (int l = 0; l < 10; l++) _mm_prefetch((const char *)q + PK_PF + 64 * l, _MM_HINT_T0);
            const __m512i H0 = _mm512_load_si512(q + 512), H1 = _mm512_load_si512(q + 576);
            for (int g = 0; g < 8; g++) {
                const __m512i v = _mm512_load_si512(q + 64 * g);
                const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), pk5_hbit(H0, g));
                const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), pk5_hbit(H1, g));
                for (int j = 0; j < NT; j++) {
                    const uint8_t *a = act + (size_t)j * as + aoff;
                    i0[j] = _mm512_dpbusd_epi32(i0[j], lo, _mm512_set1_epi32(ld32i(a + 4 * g)));
                    i1[j] = _mm512_dpbusd_epi32(i1[j], hi, _mm512_set1_epi32(ld32i(a + 32 + 4 * g)));
                }
            }
            const __m512 s0 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                    _mm_load_si128((const __m128i *)(sb + 64 + 32 * c)))));
            const __m512 s1 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                    _mm_load_si128((const __m128i *)(sb + 80 + 32 * c)))));
            const int64_t b0 = 8 * s + 2 * c;
            for (int j = 0; j < NT; j++) {
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0[j]), _mm512_mul_ps(s0, _mm512_set1_ps(da[j][b0])), acc[j]);
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[j]), _mm512_mul_ps(s1, _mm512_set1_ps(da[j][b0 + 1])), acc[j]);
            }
        }
        const __m512 mv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sb + 32)));
        for (int k = 0; k < 8; k++) {
            const __m512 mm = _mm512_mul_ps(mv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                    _mm_load_si128((const __m128i *)(sb + 192 + 16 * k)))));
            for (int j = 0; j < NT; j++)
                acc[j] = _mm512_fnmadd_ps(mm, _mm512_set1_ps(ds[j][8 * s + k]), acc[j]);
        }
    }
    for (int j = 0; j < NT; j++) _mm512_storeu_ps(out + (size_t)j * os, acc[j]);
}
#define PK_Q5K_NT(g, a, as, K, o, os, pf) pk_q5k_body(PK_5NT, g, a, as, (K) / QK_K, o, os, pf)
#define PK_Q5K_R(r, g, a, as, K, o, os, pf) pk_q5k_body((r), g, a, as, (K) / QK_K, o, os, pf)
PK_GEMM(pk_gemm_q5_K, PK_Q5K_NT, PK_Q5K_R, PK_5NT)
/* ---- end packed Q5_K -------------------------------------------------------------------- */

/* ---- packed IQ4_XS: 16 rows in lanes -------------------------------------------------
 * Per super-block (2240 bytes): f16 d[16] (64 bytes with padding), int8 (ls - 32)[8][16]
 * (sub-block x row), then per 32-element sub-block b 256 bytes: the 16 index bytes of
 * each row as 4 column groups (low nibbles: elements 4c .., high: 16 + 4c ..; as packed
 * Q4_0). VPSHUFB turns indices into table values + 128 (the -128 * sum offset starts
 * each sub-block's integer dot), then one FMA per sub-block and token with
 * (d * (ls - 32)) * d_a. 140 bytes a row vs 136. Per lane the sequence is fixed
 * (sub-blocks in K order) whatever the token tile. */
#define PK_XSB 2240
#define PK_XNT 8

static size_t pk_gb_iq4_xs(int64_t K) {
    return (size_t)(K / QK_K) * PK_XSB;
}

static void pk_pack_iq4_xs(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    memset(dst, 0, pk_gb_iq4_xs(K));
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * PK_XSB;
        for (int i = 0; i < PK_NR; i++) {
            const block_iq4_xs *blk = (const block_iq4_xs *)(w + (size_t)i * rb) + s;
            memcpy(sb + 2 * i, &blk->d, 2);
            for (int b = 0; b < 8; b++) {
                const int ls = ((blk->scales_l[b / 2] >> (4 * (b % 2))) & 0xF) | (((blk->scales_h >> (2 * b)) & 3) << 4);
                sb[64 + 16 * b + i] = (uint8_t)(int8_t)(ls - 32);
                for (int c = 0; c < 4; c++)
                    for (int k = 0; k < 4; k++) sb[192 + 256 * b + 64 * c + 4 * i + k] = blk->qs[16 * b + 4 * c + k];
            }
        }
    }
}

/* One 16-row group x NT tokens, IQ4_XS. */
AI void pk_iq4xs_body(const int NT, const uint8_t *grp, const uint8_t *act, size_t as, int64_t nsb,
                      float *out, size_t os, int pf) {
    const int64_t np = 4 * nsb;
    const float *da[PK_XNT];
    const int32_t *bo[PK_XNT];
    __m512 acc[PK_XNT];
    for (int j = 0; j < NT; j++) {
        const uint8_t *aj = act + (size_t)j * as;
        da[j] = (const float *)(aj + a8_da_offset(np));
        bo[j] = (const int32_t *)(aj + a8_boff_offset(np));
        acc[j] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(_mm_loadu_si128((const __m128i *)quant_iq4nl_values),
                                                             _mm_set1_epi8((char)0x80)));
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * PK_XSB;
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sb));
        for (int b = 0; b < 8; b++) {
            const uint8_t *q = sb + 192 + 256 * b;
            const int64_t bi = 8 * s + b;
            const size_t aoff = (size_t)(bi >> 1) * sizeof(a8_pair) + 32 * (size_t)(bi & 1);
            if (pf) /* the group's first token tile streams it from DRAM: fetch ahead */
                for (int l = 0; l < 4; l++) _mm_prefetch((const char *)q + PK_PF + 64 * l, _MM_HINT_T0);
            __m512i ia[PK_XNT];
            for (int j = 0; j < NT; j++) ia[j] = _mm512_set1_epi32(bo[j][bi]);
            for (int c = 0; c < 4; c++) {
                const __m512i v = _mm512_load_si512(q + 64 * c);
                const __m512i lo = _mm512_shuffle_epi8(tab, _mm512_and_si512(v, m4));
                const __m512i hi = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                for (int j = 0; j < NT; j++) {
                    const uint8_t *a = act + (size_t)j * as + aoff;
                    ia[j] = _mm512_dpbusd_epi32(ia[j], lo, _mm512_set1_epi32(ld32i(a + 4 * c)));
                    ia[j] = _mm512_dpbusd_epi32(ia[j], hi, _mm512_set1_epi32(ld32i(a + 16 + 4 * c)));
                }
            }
            const __m512 sv = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                    _mm_load_si128((const __m128i *)(sb + 64 + 16 * b)))));
            for (int j = 0; j < NT; j++)
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[j]), _mm512_mul_ps(sv, _mm512_set1_ps(da[j][bi])), acc[j]);
        }
    }
    for (int j = 0; j < NT; j++) _mm512_storeu_ps(out + (size_t)j * os, acc[j]);
}
#define PK_XS_NT(g, a, as, K, o, os, pf) pk_iq4xs_body(PK_XNT, g, a, as, (K) / QK_K, o, os, pf)
#define PK_XS_R(r, g, a, as, K, o, os, pf) pk_iq4xs_body((r), g, a, as, (K) / QK_K, o, os, pf)
PK_GEMM(pk_gemm_iq4_xs, PK_XS_NT, PK_XS_R, PK_XNT)
/* ---- end packed IQ4_XS ------------------------------------------------------------------ */

/* ---- packed Q3_K / Q2_K: 16 rows in lanes --------------------------------------------
 * Per super-block: f16 d[16], (Q2_K) f16 dmin[16] (64 bytes), the 16 scales of each row
 * as [16][16] bytes (scale group x row; Q3_K: int8 ls - 32; Q2_K: the original byte,
 * scale in the low nibble, min in the high one), then per 32-element sub-block b two
 * 64-byte vectors of 2-bit fields (vector h, byte 4i + k of row i, bits 2u..2u+1 <-
 * element 4(4h + u) + k) and (Q3_K) one vector of third bits (bit g <- element 4g + k).
 * Q3_K: 1856 bytes (116 a row vs 110), Q2_K: 1344 (84, as the original). Per sub-block
 * and token: two integer dots of 16 elements (Q3_K: from the -4 * sum offsets of the
 * activation), each one FMA with (d * scale) * d_a; Q2_K then 16 minimum FMAs per
 * super-block against the per-16 dsum. A fixed per-lane sequence whatever the tile. */
#define PK_3SB 1856
#define PK_2SB 1344
#define PK_23NT 6

AI size_t pk23_sbb(ggml_type t) {
    return t == GGML_TYPE_Q3_K ? PK_3SB : PK_2SB;
}
static size_t pk_gb_q3_K(int64_t K) {
    return (size_t)(K / QK_K) * PK_3SB;
}
static size_t pk_gb_q2_K(int64_t K) {
    return (size_t)(K / QK_K) * PK_2SB;
}

/* Element e (0..255) of a Q2_K / Q3_K super-block: 2-bit field and (Q3_K) third bit. */
static void pk23_elem(ggml_type t, const uint8_t *blk, int e, int *q2, int *h) {
    const int s = e / 32, l = e % 32, n = s / 4, j = s % 4;
    const uint8_t *qs = blk + (t == GGML_TYPE_Q3_K ? 32 : 16);
    *q2 = (qs[32 * n + l] >> (2 * j)) & 3;
    *h = t == GGML_TYPE_Q3_K ? (blk[l] >> s) & 1 : 0;
}

static void pk_pack_q23(ggml_type t, uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    const size_t sbb = pk23_sbb(t), bb = t == GGML_TYPE_Q3_K ? sizeof(block_q3_K) : sizeof(block_q2_K);
    const size_t q0 = 320, vb = t == GGML_TYPE_Q3_K ? 192 : 128;
    memset(dst, 0, (size_t)(K / QK_K) * sbb);
    for (int64_t s = 0; s < K / QK_K; s++) {
        uint8_t *sb = dst + (size_t)s * sbb;
        for (int i = 0; i < PK_NR; i++) {
            const uint8_t *blk = w + (size_t)i * rb + (size_t)s * bb;
            if (t == GGML_TYPE_Q3_K) {
                memcpy(sb + 2 * i, blk + 108, 2);
                uint8_t sc[16];
                _mm_storeu_si128((__m128i *)sc, q3k_scales16(blk));
                for (int g = 0; g < 16; g++) sb[64 + 16 * g + i] = sc[g];
            } else {
                memcpy(sb + 2 * i, blk + 80, 2);
                memcpy(sb + 32 + 2 * i, blk + 82, 2);
                for (int g = 0; g < 16; g++) sb[64 + 16 * g + i] = blk[g];
            }
            for (int e = 0; e < QK_K; e++) {
                int q2, h;
                pk23_elem(t, blk, e, &q2, &h);
                const int b = e / 32, g = (e % 32) / 4, k = e % 4;
                uint8_t *v = sb + q0 + vb * (size_t)b;
                v[64 * (g / 4) + 4 * i + k] |= (uint8_t)(q2 << (2 * (g % 4)));
                if (t == GGML_TYPE_Q3_K) v[128 + 4 * i + k] |= (uint8_t)(h << g);
            }
        }
    }
}
static void pk_pack_q3_K(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    pk_pack_q23(GGML_TYPE_Q3_K, dst, w, rb, K);
}
static void pk_pack_q2_K(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    pk_pack_q23(GGML_TYPE_Q2_K, dst, w, rb, K);
}

/* One 16-row group x NT tokens, Q3_K / Q2_K. */
AI void pk_q23_body(const int NT, ggml_type t, const uint8_t *grp, const uint8_t *act, size_t as,
                    int64_t nsb, float *out, size_t os, int pf) {
    const int64_t np = 4 * nsb;
    const size_t sbb = pk23_sbb(t), vb = t == GGML_TYPE_Q3_K ? 192 : 128;
    const float *da[PK_23NT], *ds[PK_23NT];
    __m512 acc[PK_23NT];
    for (int j = 0; j < NT; j++) {
        const uint8_t *aj = act + (size_t)j * as;
        da[j] = (const float *)(aj + a8_da_offset(np));
        ds[j] = (const float *)(aj + a8_dsum_offset(np));
        acc[j] = _mm512_setzero_ps();
    }
    const __m512i m3 = _mm512_set1_epi8(3), m4b = _mm512_set1_epi8(4), mf = _mm512_set1_epi32(0xF);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *sb = grp + (size_t)s * sbb;
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sb));
        for (int b = 0; b < 8; b++) {
            const uint8_t *q = sb + 320 + vb * (size_t)b;
            const int64_t bi = 8 * s + b;
            const size_t aoff = (size_t)(bi >> 1) * sizeof(a8_pair);
            const int hh = (int)(bi & 1);
            if (pf) /* the group's first token tile streams it from DRAM: fetch ahead */
                for (size_t l = 0; l < vb; l += 64) _mm_prefetch((const char *)q + PK_PF + l, _MM_HINT_T0);
            __m512i ia[2][PK_23NT];
            for (int j = 0; j < NT; j++) {
                const a8_pair *ap = (const a8_pair *)(act + (size_t)j * as + aoff);
                for (int u = 0; u < 2; u++)
                    ia[u][j] = t == GGML_TYPE_Q3_K ? _mm512_set1_epi32(ap->bias[8 * hh + 4 * u]) : _mm512_setzero_si512();
            }
            const __m512i H = t == GGML_TYPE_Q3_K ? _mm512_load_si512(q + 128) : _mm512_setzero_si512();
            for (int g = 0; g < 8; g++) {
                const __m512i V = _mm512_load_si512(q + 64 * (g >> 2));
                __m512i wq = _mm512_and_si512(_mm512_srli_epi16(V, (unsigned)(2 * (g & 3))), m3);
                if (t == GGML_TYPE_Q3_K) {
                    const __m512i hb = g <= 2 ? _mm512_slli_epi16(H, (unsigned)(2 - g)) : _mm512_srli_epi16(H, (unsigned)(g - 2));
                    wq = _mm512_or_si512(wq, _mm512_and_si512(hb, m4b));
                }
                for (int j = 0; j < NT; j++) {
                    const uint8_t *a = act + (size_t)j * as + aoff + 32 * (size_t)hh;
                    ia[g >> 2][j] = _mm512_dpbusd_epi32(ia[g >> 2][j], wq, _mm512_set1_epi32(ld32i(a + 4 * g)));
                }
            }
            for (int u = 0; u < 2; u++) {
                const __m128i sc8 = _mm_load_si128((const __m128i *)(sb + 64 + 16 * (2 * b + u)));
                const __m512i sci = t == GGML_TYPE_Q3_K ? _mm512_cvtepi8_epi32(sc8)
                                                        : _mm512_and_si512(_mm512_cvtepu8_epi32(sc8), mf);
                const __m512 sv = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(sci));
                for (int j = 0; j < NT; j++)
                    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[u][j]), _mm512_mul_ps(sv, _mm512_set1_ps(da[j][bi])), acc[j]);
            }
        }
        if (t == GGML_TYPE_Q2_K) {
            const __m512 mv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sb + 32)));
            for (int g = 0; g < 16; g++) {
                const __m512i m = _mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(sb + 64 + 16 * g))), 4);
                const __m512 mm = _mm512_mul_ps(mv, _mm512_cvtepi32_ps(m));
                for (int j = 0; j < NT; j++)
                    acc[j] = _mm512_fnmadd_ps(mm, _mm512_set1_ps(ds[j][16 * s + g]), acc[j]);
            }
        }
    }
    for (int j = 0; j < NT; j++) _mm512_storeu_ps(out + (size_t)j * os, acc[j]);
}
#define PK_Q3K_NT(g, a, as, K, o, os, pf) pk_q23_body(PK_23NT, GGML_TYPE_Q3_K, g, a, as, (K) / QK_K, o, os, pf)
#define PK_Q3K_R(r, g, a, as, K, o, os, pf) pk_q23_body((r), GGML_TYPE_Q3_K, g, a, as, (K) / QK_K, o, os, pf)
#define PK_Q2K_NT(g, a, as, K, o, os, pf) pk_q23_body(PK_23NT, GGML_TYPE_Q2_K, g, a, as, (K) / QK_K, o, os, pf)
#define PK_Q2K_R(r, g, a, as, K, o, os, pf) pk_q23_body((r), GGML_TYPE_Q2_K, g, a, as, (K) / QK_K, o, os, pf)
PK_GEMM(pk_gemm_q3_K, PK_Q3K_NT, PK_Q3K_R, PK_23NT)
PK_GEMM(pk_gemm_q2_K, PK_Q2K_NT, PK_Q2K_R, PK_23NT)
/* ---- end packed Q3_K / Q2_K ------------------------------------------------------------- */

/* ---- float paths ----------------------------------------------------------------------- */

/* 16 weights at element k of a row of type t (F32 for dequantized scratch rows). */
AI __m512 ld_w16(ggml_type t, const uint8_t *row, int64_t k, __mmask16 m, int masked) {
    if (t == GGML_TYPE_F16) {
        const __m256i h = masked ? _mm256_maskz_loadu_epi16(m, row + 2 * k)
                                 : _mm256_loadu_si256((const __m256i *)(row + 2 * k));
        return _mm512_cvtph_ps(h);
    }
    if (t == GGML_TYPE_BF16) {
        const __m256i h = masked ? _mm256_maskz_loadu_epi16(m, row + 2 * k)
                                 : _mm256_loadu_si256((const __m256i *)(row + 2 * k));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return masked ? _mm512_maskz_loadu_ps(m, row + 4 * k) : _mm512_loadu_ps(row + 4 * k);
}

/* Float micro-kernel: NR rows (type t, row_bytes apart) x NT f32 token rows. */
AI void f_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
               const uint8_t *act, size_t act_stride, int64_t K, float *out, size_t out_stride) {
    __m512 acc[4][6];
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) acc[r][j] = _mm512_setzero_ps();
    const float *x[6];
    for (int j = 0; j < NT; j++) x[j] = (const float *)(act + (size_t)j * act_stride);
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv[4];
        for (int r = 0; r < NR; r++) wv[r] = ld_w16(t, w0 + (size_t)r * row_bytes, k, 0, 0);
        for (int j = 0; j < NT; j++) {
            const __m512 xv = _mm512_loadu_ps(x[j] + k);
            for (int r = 0; r < NR; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    if (k < K) {
        const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 wv[4];
        for (int r = 0; r < NR; r++) wv[r] = ld_w16(t, w0 + (size_t)r * row_bytes, k, m, 1);
        for (int j = 0; j < NT; j++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x[j] + k);
            for (int r = 0; r < NR; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = _mm512_reduce_add_ps(acc[r][j]);
}

#define FNR 4
#define FNT 6

KERN_TILES(f32, f_tile, GGML_TYPE_F32, FNR, FNT, K)
KERN_TILES(f16, f_tile, GGML_TYPE_F16, FNR, FNT, K)
KERN_TILES(bf16, f_tile, GGML_TYPE_BF16, FNR, FNT, K)

/* ---- packed float weights ----------------------------------------------------------------
 * Prepared once (kern_pack) for F32 / F16 / BF16: a group of FP_NR = 64 rows is stored K
 * position by K position, the 64 rows' elements of one K position side by side (row i of
 * position k at k * 64 + i, in the original element type), so that FP_NV = 4 vectors hold
 * 64 outputs of one token and each activation element is one broadcast. Per lane (row,
 * token) the sum is one f32 FMA chain over k in order from 0 (the weights converted
 * exactly), whatever the token tile: decode reads the group straight through (the four
 * vectors are four independent chains), prefill walks it in FP_KC-position slices
 * across all its token tiles (partial sums parked in out, which changes no bit), so
 * decode and prefill agree bit for bit. No horizontal sums. */

#define FP_NR 64
#define FP_NV (FP_NR / 16)
#define FP_NT 6
#define FP_KC 512
#define FP_PF 4096 /* decode prefetch distance, bytes */

AI size_t fp_esz(ggml_type t) {
    return t == GGML_TYPE_F32 ? 4 : 2;
}
static size_t fp_gb_f32(int64_t K) {
    return (size_t)K * FP_NR * 4;
}
static size_t fp_gb_h(int64_t K) {
    return (size_t)K * FP_NR * 2;
}
static void fp_pack_f32(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    kern_pack_float(GGML_TYPE_F32, FP_NR, dst, w, rb, K);
}
static void fp_pack_f16(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    kern_pack_float(GGML_TYPE_F16, FP_NR, dst, w, rb, K);
}
static void fp_pack_bf16(uint8_t *dst, const uint8_t *w, size_t rb, int64_t K) {
    kern_pack_float(GGML_TYPE_BF16, FP_NR, dst, w, rb, K);
}

/* 16 packed weights (rows 16v.. of position k) as f32. */
AI __m512 fp_ld(ggml_type t, const uint8_t *g, int64_t k, int v) {
    const uint8_t *p = g + ((size_t)k * FP_NR + 16 * (size_t)v) * fp_esz(t);
    if (t == GGML_TYPE_F32) return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (t == GGML_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One group x NT tokens over positions [k0, k1): out[j * os + i]; first: chains start
 * at 0, else they continue from out. */
AI void fp_body(const int NT, ggml_type t, const uint8_t *g, int64_t k0, int64_t k1,
                const uint8_t *act, size_t as, float *out, size_t os, int first) {
    __m512 acc[FP_NT][FP_NV];
    const float *x[FP_NT];
    for (int j = 0; j < NT; j++) {
        x[j] = (const float *)(act + (size_t)j * as);
        for (int v = 0; v < FP_NV; v++)
            acc[j][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + (size_t)j * os + 16 * v);
    }
    for (int64_t k = k0; k < k1; k++) {
        __m512 wv[FP_NV];
        if (NT == 1) /* decode streams the group from DRAM: fetch ahead */
            for (size_t l = 0; l < FP_NR * fp_esz(t); l += 64)
                _mm_prefetch((const char *)g + (size_t)k * FP_NR * fp_esz(t) + FP_PF + l, _MM_HINT_T0);
        for (int v = 0; v < FP_NV; v++) wv[v] = fp_ld(t, g, k, v);
        for (int j = 0; j < NT; j++) {
            const __m512 xv = _mm512_set1_ps(x[j][k]);
            for (int v = 0; v < FP_NV; v++) acc[j][v] = _mm512_fmadd_ps(wv[v], xv, acc[j][v]);
        }
    }
    for (int j = 0; j < NT; j++)
        for (int v = 0; v < FP_NV; v++) _mm512_storeu_ps(out + (size_t)j * os + 16 * v, acc[j][v]);
}

AI void fp_gemm(ggml_type t, const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act,
                size_t as, int64_t K, float *out, size_t os, int32_t nt) {
    for (int64_t gi = 0; gi < ng; gi++) {
        const uint8_t *g = grp + (size_t)gi * gb;
        float *og = out + (size_t)gi * FP_NR;
        if (nt == 1) {
            fp_body(1, t, g, 0, K, act, as, og, os, 1);
            continue;
        }
        for (int64_t k0 = 0; k0 < K; k0 += FP_KC) {
            const int64_t k1 = IFD_MIN(K, k0 + FP_KC);
            const int first = k0 == 0;
            int32_t j = 0;
            for (; j + FP_NT <= nt; j += FP_NT)
                fp_body(FP_NT, t, g, k0, k1, act + (size_t)j * as, as, og + (size_t)j * os, os, first);
            const uint8_t *aj = act + (size_t)j * as;
            float *oj = og + (size_t)j * os;
            switch (nt - j) {
            case 1: fp_body(1, t, g, k0, k1, aj, as, oj, os, first); break;
            case 2: fp_body(2, t, g, k0, k1, aj, as, oj, os, first); break;
            case 3: fp_body(3, t, g, k0, k1, aj, as, oj, os, first); break;
            case 4: fp_body(4, t, g, k0, k1, aj, as, oj, os, first); break;
            case 5: fp_body(5, t, g, k0, k1, aj, as, oj, os, first); break;
            default: break;
            }
        }
    }
}
#define FP_GEMM(NAME, T)                                                                       \
    static void NAME(const uint8_t *grp, size_t gb, int64_t ng, const uint8_t *act, size_t as, \
                     int64_t K, float *out, size_t os, int32_t nt) {                          \
        fp_gemm(T, grp, gb, ng, act, as, K, out, os, nt);                                     \
    }
FP_GEMM(fp_gemm_f32, GGML_TYPE_F32)
FP_GEMM(fp_gemm_f16, GGML_TYPE_F16)
FP_GEMM(fp_gemm_bf16, GGML_TYPE_BF16)

/* ---- elementwise ops ------------------------------------------------------------------- */

/* exp(x) for x in [-87, 88]: 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], degree-7
 * Taylor polynomial (relative error < 1e-7 before rounding). */
AI __m512 exp16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static void k5_rmsnorm(float *out, const float *x, const float *w, int32_t n, float eps) {
    __m512 ss = _mm512_setzero_ps();
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        ss = _mm512_fmadd_ps(v, v, ss);
    }
    if (i < n) {
        const __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), x + i);
        ss = _mm512_fmadd_ps(v, v, ss);
    }
    const float scale = 1.0f / sqrtf(_mm512_reduce_add_ps(ss) / (float)n + eps);
    const __m512 vs = _mm512_set1_ps(scale);
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i,
                         _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vs), _mm512_loadu_ps(w + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(out + i, m,
                              _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs),
                                            _mm512_maskz_loadu_ps(m, w + i)));
    }
}

AI __m512 silu_mul16(__m512 g, __m512 u) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

static void k5_swiglu(float *out, const float *gate, const float *up, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, silu_mul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(out + i, m,
                              silu_mul16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
    }
}

/* ---- attention ------------------------------------------------------------------------- */

#define MAX_HD16 16 /* head_dim up to 256 */

/* out[i] = sum of the 16 lanes of v[i], for 16 vectors (a fixed shuffle/add tree). */
AI __m512 hsum16x16(const __m512 *v) {
    __m512 w[8], x[4];
    for (int k = 0; k < 8; k++)
        w[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                             _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++) {
        const __m512d a = _mm512_castps_pd(w[2 * k]), b = _mm512_castps_pd(w[2 * k + 1]);
        x[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    const __m512 z0 = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 z1 = _mm512_add_ps(_mm512_shuffle_f32x4(x[2], x[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(x[2], x[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(z0, z1, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* 16 elements of a stored KV row from element i, as f32, converted in registers
 * (vcvtph2ps, bf16 shifts, int8 widening, FP8 E4M3 through its exact f16 image): INT8
 * without its scale and FP8 as value / 256 — kv_factor16 is what the row's products
 * are multiplied by. */
AI __m512 kv_ld16(const int DT, const uint8_t *row, int32_t i) {
    switch (DT) {
    case BACKEND_KV_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)i)));
    case BACKEND_KV_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)i))), 16));
    case BACKEND_KV_INT8:
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + i))));
    case BACKEND_KV_FP8: {
        /* E4M3 -> f16 bits (sign << 15 | magnitude << 7) is the value * 2^-8, exactly
         * (subnormals included); 0x7F magnitudes are NaN */
        const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(row + i)));
        const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi16(0x7f));
        const __m256i sign = _mm256_and_si256(x, _mm256_set1_epi16(0x80));
        const __m256i h = _mm256_or_si256(_mm256_slli_epi16(sign, 8), _mm256_slli_epi16(mag, 7));
        const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f));
        return _mm512_mask_mov_ps(_mm512_cvtph_ps(h), nan, _mm512_set1_ps(NAN));
    }
    default: return _mm512_loadu_ps((const float *)(const void *)row + i);
    }
}
AI float kv_factor16(const int DT, const uint8_t *row, int32_t hd) {
    return DT == BACKEND_KV_INT8 ? kv_int8_scale(row, hd) : DT == BACKEND_KV_FP8 ? 256.0f : 1.0f;
}
#define KV_SCALED(DT) ((DT) == BACKEND_KV_INT8 || (DT) == BACKEND_KV_FP8)

/* Raw scores q.k of keys p0 .. p0+nk-1 (nk <= 16; the other lanes are 0), each times
 * its row's kv_factor16. NV = head_dim/16, a constant in the hot instantiations so the
 * 16 accumulators stay in registers. rows[p]: key p's row index (rb bytes a row). */
AI __m512 scores16(const int DT, const int32_t NV, const __m512 *qv, const uint8_t *K, size_t rb,
                   const int32_t *rows, int32_t p0, int32_t nk) {
    __m512 acc[16];
    float f[16];
    for (int32_t i = 0; i < 16; i++) {
        const int32_t p = p0 + IFD_MIN(i, nk - 1); /* past the end: recompute the last key */
        const uint8_t *kp = K + (size_t)rows[p] * rb;
        __m512 a = _mm512_mul_ps(qv[0], kv_ld16(DT, kp, 0));
        for (int32_t c = 1; c < NV; c++) a = _mm512_fmadd_ps(qv[c], kv_ld16(DT, kp, 16 * c), a);
        acc[i] = a;
        if (DT == BACKEND_KV_INT8) f[i] = kv_int8_scale(kp, 16 * NV);
    }
    const __m512 s = hsum16x16(acc);
    if (DT == BACKEND_KV_INT8) return _mm512_mul_ps(s, _mm512_loadu_ps(f));
    if (DT == BACKEND_KV_FP8) return _mm512_mul_ps(s, _mm512_set1_ps(256.0f));
    return s;
}

/* Query rows r < R of a tile: token r / g, head r % g. */
typedef struct attn_rows {
    const float *q;
    float *out;
    size_t tok_stride;
    int32_t g, hd;
    const int32_t *n_keys; /* per token */
} attn_rows;

/* PV for RC rows at once: acc[rr] += w_rr[p] * f_p * v_p over each row's own keys, in
 * key order (keys every row has go through the shared loop, the rest row by row: the
 * per-row FMA sequence is the same either way). */
AI void pv_rows(const int DT, const int32_t RC, const int32_t NV, const attn_rows *ar, int32_t r0,
                const float *sc, size_t sc_stride, const float *inv, const uint8_t *V, size_t rb,
                const int32_t *rows) {
    __m512 acc[4][MAX_HD16];
    int32_t nk[4], kmin = INT32_MAX;
    for (int32_t rr = 0; rr < RC; rr++) {
        nk[rr] = ar->n_keys[(r0 + rr) / ar->g];
        kmin = IFD_MIN(kmin, nk[rr]);
        for (int32_t c = 0; c < NV; c++) acc[rr][c] = _mm512_setzero_ps();
    }
    int32_t p = 0;
    for (; p < kmin; p++) {
        const uint8_t *vp = V + (size_t)rows[p] * rb;
        __m512 v[MAX_HD16];
        for (int32_t c = 0; c < NV; c++) v[c] = kv_ld16(DT, vp, 16 * c);
        const float f = kv_factor16(DT, vp, ar->hd);
        for (int32_t rr = 0; rr < RC; rr++) {
            const float w = sc[(size_t)(r0 + rr) * sc_stride + p];
            const __m512 wgt = _mm512_set1_ps(KV_SCALED(DT) ? w * f : w);
            for (int32_t c = 0; c < NV; c++) acc[rr][c] = _mm512_fmadd_ps(wgt, v[c], acc[rr][c]);
        }
    }
    for (int32_t rr = 0; rr < RC; rr++) {
        const float *w = sc + (size_t)(r0 + rr) * sc_stride;
        for (int32_t k = p; k < nk[rr]; k++) {
            const uint8_t *vp = V + (size_t)rows[k] * rb;
            const float f = kv_factor16(DT, vp, ar->hd);
            const __m512 wgt = _mm512_set1_ps(KV_SCALED(DT) ? w[k] * f : w[k]);
            for (int32_t c = 0; c < NV; c++)
                acc[rr][c] = _mm512_fmadd_ps(wgt, kv_ld16(DT, vp, 16 * c), acc[rr][c]);
        }
        const int32_t r = r0 + rr;
        float *oh = ar->out + (size_t)(r / ar->g) * ar->tok_stride + (size_t)(r % ar->g) * ar->hd;
        const __m512 vinv = _mm512_set1_ps(inv[r]);
        for (int32_t c = 0; c < NV; c++) _mm512_storeu_ps(oh + 16 * c, _mm512_mul_ps(acc[rr][c], vinv));
    }
}

/* A tile of qt consecutive query tokens x g heads over one KV head: K and V rows are
 * fetched once per tile instead of once per query row. Two-pass softmax per row. */
AI void k5_attn_tile_dt(const int DT, float *out, const float *q, size_t tok_stride, int32_t qt,
                        int32_t g, const int32_t *n_keys, const kv_view *kv, int32_t kvh,
                        const int32_t *block_table, float scale, float *scratch) {
    const int32_t hd = kv->head_dim, bs = kv->block_size, nv = hd / 16, R = qt * g;
    int32_t nmax = 0;
    for (int32_t i = 0; i < qt; i++) nmax = IFD_MAX(nmax, n_keys[i]);
    const size_t rb = kv_view_row_bytes(kv);
    const uint8_t *K = kv->k, *V = kv->v;
    const size_t sc_stride = (size_t)nmax;
    float *sc = scratch;                                   /* [R][nmax] */
    float *inv = scratch + (size_t)R * nmax;               /* [R] */
    int32_t *rows = (int32_t *)(inv + R);                  /* [nmax]: < 2^31 (cpu_backend.c) */
    for (int32_t p = 0, b = 0, o = 0; p < nmax; p++) {
        rows[p] = (int32_t)kv_row_index(kv, block_table[b] * bs + o, kvh);
        if (++o == bs) {
            o = 0;
            b++;
        }
    }
    const attn_rows ar = {.q = q, .out = out, .tok_stride = tok_stride, .g = g, .hd = hd, .n_keys = n_keys};
    /* scores, 16 keys at a time; a key block is reused from L1 by every row */
    for (int32_t p0 = 0; p0 < nmax; p0 += 16) {
        for (int32_t r = 0; r < R; r++) {
            const int32_t nkr = n_keys[r / g];
            if (p0 >= nkr) continue;
            const int32_t nk = IFD_MIN(16, nkr - p0);
            const float *qh = q + (size_t)(r / g) * tok_stride + (size_t)(r % g) * hd;
            __m512 qv[MAX_HD16];
            for (int32_t c = 0; c < nv; c++) qv[c] = _mm512_loadu_ps(qh + 16 * c);
            __m512 sv;
            if (nv == 4) sv = scores16(DT, 4, qv, K, rb, rows, p0, nk);
            else if (nv == 8) sv = scores16(DT, 8, qv, K, rb, rows, p0, nk);
            else sv = scores16(DT, nv, qv, K, rb, rows, p0, nk);
            sv = _mm512_mul_ps(sv, _mm512_set1_ps(scale));
            _mm512_mask_storeu_ps(sc + (size_t)r * sc_stride + p0, (__mmask16)((1u << nk) - 1), sv);
        }
    }
    /* softmax numerators per row; inv = 1 / sum */
    for (int32_t r = 0; r < R; r++) {
        float *s = sc + (size_t)r * sc_stride;
        const int32_t nk = n_keys[r / g];
        __m512 vmx = _mm512_set1_ps(-INFINITY);
        int32_t p = 0;
        for (; p + 16 <= nk; p += 16) vmx = _mm512_max_ps(vmx, _mm512_loadu_ps(s + p));
        const __mmask16 mt = (__mmask16)((1u << (nk - p)) - 1);
        if (p < nk) vmx = _mm512_mask_max_ps(vmx, mt, vmx, _mm512_maskz_loadu_ps(mt, s + p));
        const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
        __m512 vsum = _mm512_setzero_ps();
        for (p = 0; p + 16 <= nk; p += 16) {
            const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + p), vmax));
            _mm512_storeu_ps(s + p, e);
            vsum = _mm512_add_ps(vsum, e);
        }
        if (p < nk) {
            const __m512 e = _mm512_maskz_mov_ps(mt, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mt, s + p), vmax)));
            _mm512_mask_storeu_ps(s + p, mt, e);
            vsum = _mm512_add_ps(vsum, e);
        }
        inv[r] = 1.0f / _mm512_reduce_add_ps(vsum);
    }
    /* weighted sum of V: rows in chunks that fit the registers */
    int32_t r = 0;
    if (nv <= 4) {
        for (; r + 4 <= R; r += 4)
            nv == 4 ? pv_rows(DT, 4, 4, &ar, r, sc, sc_stride, inv, V, rb, rows)
                    : pv_rows(DT, 4, nv, &ar, r, sc, sc_stride, inv, V, rb, rows);
    } else if (nv <= 8) {
        for (; r + 2 <= R; r += 2)
            nv == 8 ? pv_rows(DT, 2, 8, &ar, r, sc, sc_stride, inv, V, rb, rows)
                    : pv_rows(DT, 2, nv, &ar, r, sc, sc_stride, inv, V, rb, rows);
    }
    for (; r < R; r++) pv_rows(DT, 1, nv, &ar, r, sc, sc_stride, inv, V, rb, rows);
}

static void k5_attn_tile(float *out, const float *q, size_t tok_stride, int32_t qt, int32_t g,
                         const int32_t *n_keys, const kv_view *kv, int32_t kvh,
                         const int32_t *block_table, float scale, float *scratch) {
    const int32_t hd = kv->head_dim;
    if (hd % 16 || hd / 16 > MAX_HD16) {
        for (int32_t i = 0; i < qt; i++)
            kern_scalar_table.attn(out + (size_t)i * tok_stride, q + (size_t)i * tok_stride, g,
                                   n_keys[i], kv, kvh, block_table, scale, scratch);
        return;
    }
#define K5_TILE(DT) \
    k5_attn_tile_dt(DT, out, q, tok_stride, qt, g, n_keys, kv, kvh, block_table, scale, scratch)
    switch (kv->dtype) {
    case BACKEND_KV_F16: K5_TILE(BACKEND_KV_F16); break;
    case BACKEND_KV_BF16: K5_TILE(BACKEND_KV_BF16); break;
    case BACKEND_KV_INT8: K5_TILE(BACKEND_KV_INT8); break;
    case BACKEND_KV_FP8: K5_TILE(BACKEND_KV_FP8); break;
    default: K5_TILE(BACKEND_KV_F32); break;
    }
#undef K5_TILE
}

static void k5_attn(float *out, const float *q, int32_t g, int32_t n_keys, const kv_view *kv,
                    int32_t kvh, const int32_t *block_table, float scale, float *scratch) {
    k5_attn_tile(out, q, (size_t)g * kv->head_dim, 1, g, &n_keys, kv, kvh, block_table, scale,
                 scratch);
}

static const kern_table k5_table = {
    .level = CPU_LEVEL_AVX512,
    .act_row_bytes = k5_act_row_bytes,
    .act_prepare = k5_act_prepare,
    /* tile shapes: 4x4 (Q8_0/Q4_0), 2x4 (K-quants), 4x6 (float) */
    .gemm = {[GGML_TYPE_Q8_0] = KERN_GEMM(q8_0, 4, 4),
             [GGML_TYPE_Q4_0] = KERN_GEMM(q4_0, 4, 4),
             [GGML_TYPE_Q4_K] = KERN_GEMM(q4_K, KQ_NR, KQ_NT),
             [GGML_TYPE_Q6_K] = KERN_GEMM(q6_K, KQ_NR, KQ_NT),
             [GGML_TYPE_Q5_K] = KERN_GEMM(q5_K, KQ_NR, KQ_NT),
             [GGML_TYPE_Q3_K] = KERN_GEMM(q3_K, KQ_NR, KQ_NT),
             [GGML_TYPE_Q2_K] = KERN_GEMM(q2_K, KQ_NR, KQ_NT),
             [GGML_TYPE_IQ4_XS] = KERN_GEMM(iq4_xs, KQ_NR, KQ_NT),
             [GGML_TYPE_Q4_1] = KERN_GEMM(q4_1, 4, 4), /* 32-element block family */
             [GGML_TYPE_Q5_0] = KERN_GEMM(q5_0, 4, 4),
             [GGML_TYPE_Q5_1] = KERN_GEMM(q5_1, 4, 4),
             [GGML_TYPE_IQ4_NL] = KERN_GEMM(iq4_nl, 4, 4),
             [IFD_TYPE_I8_G64] = KERN_GEMM(i8_g64, 4, 4), /* INT8 / INT4 groups */
             [IFD_TYPE_I8_G128] = KERN_GEMM(i8_g128, 4, 4),
             [IFD_TYPE_I4_G64] = KERN_GEMM(i4_g64, 4, 4),
             [IFD_TYPE_I4_G128] = KERN_GEMM(i4_g128, 4, 4),
             [GGML_TYPE_F32] = KERN_GEMM(f32, FNR, FNT),
             [GGML_TYPE_F16] = KERN_GEMM(f16, FNR, FNT),
             [GGML_TYPE_BF16] = KERN_GEMM(bf16, FNR, FNT)},
    .pack = {[GGML_TYPE_Q8_0] = {PK_NR, pk_gb_q8_0, pk_pack_q8_0, pk_gemm_q8_0},
             [GGML_TYPE_Q4_0] = {PK_NR, pk_gb_q4_0, pk_pack_q4_0, pk_gemm_q4_0},
             [GGML_TYPE_Q4_K] = {PK_NR, pk_gb_q4_K, pk_pack_q4_K, pk_gemm_q4_K},
             [GGML_TYPE_Q6_K] = {PK_NR, pk_gb_q6_K, pk_pack_q6_K, pk_gemm_q6_K},
             [GGML_TYPE_Q5_K] = {PK_NR, pk_gb_q5_K, pk_pack_q5_K, pk_gemm_q5_K},
             [GGML_TYPE_IQ4_XS] = {PK_NR, pk_gb_iq4_xs, pk_pack_iq4_xs, pk_gemm_iq4_xs},
             [GGML_TYPE_Q3_K] = {PK_NR, pk_gb_q3_K, pk_pack_q3_K, pk_gemm_q3_K},
             [GGML_TYPE_Q2_K] = {PK_NR, pk_gb_q2_K, pk_pack_q2_K, pk_gemm_q2_K},
             [GGML_TYPE_IQ4_NL] = {PK_NR, pk_gb_q4_0, pk_pack_q4_0, pk_gemm_iq4_nl}, /* Q4_0's layout */
             [IFD_TYPE_I8_G64] = {PK_NR, pk_gb_i8_g64, pk_pack_i8_g64, pk_gemm_i8_g64},
             [IFD_TYPE_I8_G128] = {PK_NR, pk_gb_i8_g128, pk_pack_i8_g128, pk_gemm_i8_g128},
             [IFD_TYPE_I4_G64] = {PK_NR, pk_gb_i4_g64, pk_pack_i4_g64, pk_gemm_i4_g64},
             [IFD_TYPE_I4_G128] = {PK_NR, pk_gb_i4_g128, pk_pack_i4_g128, pk_gemm_i4_g128},
             [GGML_TYPE_Q4_1] = {PK_NR, pk_gb_q4_1, pk_pack_q4_1, pk_gemm_q4_1},
             [GGML_TYPE_Q5_0] = {PK_NR, pk_gb_q5_0, pk_pack_q5_0, pk_gemm_q5_0}, /* Q4_0's + a bit plane */
             [GGML_TYPE_F32] = {FP_NR, fp_gb_f32, fp_pack_f32, fp_gemm_f32},
             [GGML_TYPE_F16] = {FP_NR, fp_gb_h, fp_pack_f16, fp_gemm_f16},
             [GGML_TYPE_BF16] = {FP_NR, fp_gb_h, fp_pack_bf16, fp_gemm_bf16}},
    .rmsnorm = k5_rmsnorm,
    .swiglu = k5_swiglu,
    .attn = k5_attn,
    .attn_tile = k5_attn_tile,
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const kern_table *kern_avx512_get(void) {
    return &k5_table;
}

#else
const kern_table *kern_avx512_get(void) {
    return NULL;
}
#endif
