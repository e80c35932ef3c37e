/* kern_avx2.c — AVX2 + FMA + F16C kernels (8 lanes), compiled with a target pragma and
 * used only when the CPU has them. Same structure as kern_avx512.c:
 *  - Q8_0 / Q4_0: activations quantized to int8 blocks of 32 once per matmul; per
 *    block VPMADDUBSW + VPMADDWD integer dot (Q4_0: nibble x a plus a precomputed
 *    -8*sum(a) offset; Q8_0: |w| x sign(a, w); neither can saturate the int16 pair
 *    sums: 15*127*2 and 128*127*2 are < 32768), then one f32 FMA per block.
 *  - F32 / F16 / BF16: exact conversion in registers, f32 FMA, 8 lanes over K.
 *  - Q4_K / Q6_K: rows dequantized (vectorized) into scratch, then the F32 path.
 * Every output element runs the same instruction sequence whatever its tile: batch
 * invariant. Thread-safe (no state). */
#include <math.h>
#include <string.h>

#include "../../model/quant.h"
#include "../../util/common.h"
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

AI __m256 bcast_f16(uint16_t h) {
    return _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))));
}

/* ---- integer paths --------------------------------------------------------------------- */

typedef struct a8_block {
    int8_t qs[32];
    int32_t bias[8]; /* lane 0: -8 * sum(qs) for Q4_0; 0 for Q8_0 */
    float d[8];      /* the block scale in every lane */
} a8_block;

static size_t k2_act_row_bytes(ggml_type t, int64_t K) {
    if (t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0) return (size_t)(K / 32) * sizeof(a8_block);
    return 0;
}

static void k2_act_prepare(ggml_type t, const float *x, void *dst, int64_t K) {
    IFD_ASSERT(K % 32 == 0);
    a8_block *ab = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < K / 32; b++) {
        const float *xb = x + 32 * b;
        __m256 v[4], mx = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
        /* pack 32 int32 -> 32 int8 in order */
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
        __m256i p = _mm256_packs_epi16(p01, p23);
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)ab[b].qs, p);
        const __m256i s4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        int32_t lanes[8], s = 0;
        _mm256_storeu_si256((__m256i *)lanes, s4);
        for (int i = 0; i < 8; i++) s += lanes[i];
        memset(ab[b].bias, 0, sizeof ab[b].bias);
        if (t == GGML_TYPE_Q4_0) ab[b].bias[0] = -8 * s;
        for (int i = 0; i < 8; i++) ab[b].d[i] = d;
    }
}

#define INR 2
#define INT 3

AI void a8_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
                const uint8_t *act, size_t act_stride, int64_t nb, float *out, size_t out_stride) {
    __m256 acc[INR][INT];
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) acc[r][j] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const size_t bb = t == GGML_TYPE_Q4_0 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq[INR];
        __m256 dw[INR];
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w0 + (size_t)r * row_bytes + (size_t)b * bb;
            dw[r] = bcast_f16(ld16(blk));
            if (t == GGML_TYPE_Q4_0) {
                const __m128i x = _mm_loadu_si128((const __m128i *)(blk + 2));
                const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
                wq[r] = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
            } else {
                wq[r] = _mm256_loadu_si256((const __m256i *)(blk + 2));
            }
        }
        for (int j = 0; j < NT; j++) {
            const a8_block *ab = (const a8_block *)(act + (size_t)j * act_stride) + b;
            const __m256i a = _mm256_loadu_si256((const __m256i *)ab->qs);
            const __m256 da = _mm256_loadu_ps(ab->d);
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
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = hsum8(acc[r][j]);
}

AI void gemm_a8(const ggml_type t, const wmat *w, int64_t r0, int64_t r1, const uint8_t *act,
                size_t as, int32_t nt, float *out, size_t os) {
    const int64_t nb = w->n_cols / 32;
    const size_t rb = w->row_bytes;
    int64_t r = r0;
    /* decode-sized calls: one row at a time = one sequential DRAM stream (faster) */
    for (; nt >= INT && r + INR <= r1; r += INR) {
        const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * rb;
        int32_t j = 0;
        for (; j + INT <= nt; j += INT)
            a8_tile(INR, INT, t, wr, rb, act + (size_t)j * as, as, nb, out + (size_t)j * os + r, os);
        for (; j < nt; j++)
            a8_tile(INR, 1, t, wr, rb, act + (size_t)j * as, as, nb, out + (size_t)j * os + r, os);
    }
    for (; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * rb;
        int32_t j = 0;
        for (; j + INT <= nt; j += INT)
            a8_tile(1, INT, t, wr, rb, act + (size_t)j * as, as, nb, out + (size_t)j * os + r, os);
        for (; j < nt; j++)
            a8_tile(1, 1, t, wr, rb, act + (size_t)j * as, as, nb, out + (size_t)j * os + r, os);
    }
}

static void gemm_q4_0(const wmat *w, int64_t r0, int64_t r1, const uint8_t *act, size_t as,
                      int32_t nt, float *out, size_t os) {
    gemm_a8(GGML_TYPE_Q4_0, w, r0, r1, act, as, nt, out, os);
}
static void gemm_q8_0(const wmat *w, int64_t r0, int64_t r1, const uint8_t *act, size_t as,
                      int32_t nt, float *out, size_t os) {
    gemm_a8(GGML_TYPE_Q8_0, w, r0, r1, act, as, nt, out, os);
}

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

AI void f_tile(const int NR, const int NT, ggml_type t, const uint8_t *w0, size_t row_bytes,
               const uint8_t *act, size_t act_stride, int64_t K, float *out, size_t out_stride) {
    __m256 acc[FNR][FNT];
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) acc[r][j] = _mm256_setzero_ps();
    const float *x[FNT];
    for (int j = 0; j < NT; j++) x[j] = (const float *)(act + (size_t)j * act_stride);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[FNR];
        for (int r = 0; r < NR; r++) wv[r] = ld_w8(t, w0 + (size_t)r * row_bytes, k);
        for (int j = 0; j < NT; j++) {
            const __m256 xv = _mm256_loadu_ps(x[j] + k);
            for (int r = 0; r < NR; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    if (k < K) {
        __m256 wv[FNR];
        for (int r = 0; r < NR; r++) wv[r] = ld_w8_tail(t, w0 + (size_t)r * row_bytes, k, K - k);
        for (int j = 0; j < NT; j++) {
            const __m256 xv = ld_x8_tail(x[j] + k, K - k);
            for (int r = 0; r < NR; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NT; j++) out[(size_t)j * out_stride + r] = hsum8(acc[r][j]);
}

AI void gemm_f_rows(ggml_type t, const uint8_t *base, size_t rb, int64_t K, int64_t nr,
                    const uint8_t *act, size_t as, int32_t nt, float *out, size_t os) {
    int64_t r = 0;
    for (; nt >= FNT && r + FNR <= nr; r += FNR) { /* see gemm_a8 */
        const uint8_t *wr = base + (size_t)r * rb;
        int32_t j = 0;
        for (; j + FNT <= nt; j += FNT)
            f_tile(FNR, FNT, t, wr, rb, act + (size_t)j * as, as, K, out + (size_t)j * os + r, os);
        for (; j < nt; j++)
            f_tile(FNR, 1, t, wr, rb, act + (size_t)j * as, as, K, out + (size_t)j * os + r, os);
    }
    for (; r < nr; r++) {
        const uint8_t *wr = base + (size_t)r * rb;
        int32_t j = 0;
        for (; j + FNT <= nt; j += FNT)
            f_tile(1, FNT, t, wr, rb, act + (size_t)j * as, as, K, out + (size_t)j * os + r, os);
        for (; j < nt; j++)
            f_tile(1, 1, t, wr, rb, act + (size_t)j * as, as, K, out + (size_t)j * os + r, os);
    }
}

static void gemm_f32(const uint8_t *b, size_t rb, int64_t K, int64_t nr, const uint8_t *a,
                     size_t as, int32_t nt, float *o, size_t os) {
    gemm_f_rows(GGML_TYPE_F32, b, rb, K, nr, a, as, nt, o, os);
}
static void gemm_f16(const uint8_t *b, size_t rb, int64_t K, int64_t nr, const uint8_t *a,
                     size_t as, int32_t nt, float *o, size_t os) {
    gemm_f_rows(GGML_TYPE_F16, b, rb, K, nr, a, as, nt, o, os);
}
static void gemm_bf16(const uint8_t *b, size_t rb, int64_t K, int64_t nr, const uint8_t *a,
                      size_t as, int32_t nt, float *o, size_t os) {
    gemm_f_rows(GGML_TYPE_BF16, b, rb, K, nr, a, as, nt, o, os);
}

/* ---- K-quant dequantization (same values as quant_dequantize_row_ref) ---------------- */

static void scale_min_k4(const uint8_t *q, uint8_t *sc, uint8_t *m) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] = q[j] & 63;
            m[j] = q[j + 4] & 63;
        } else {
            sc[j] = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
            m[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
        }
    }
}

AI __m256 u8x8_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

static void deq_q4_K(const uint8_t *blk, float *y) {
    const float d = ifd_fp16_to_f32(ld16(blk)), dmin = ifd_fp16_to_f32(ld16(blk + 2));
    uint8_t sc[8], m[8];
    scale_min_k4(blk + 4, sc, m);
    const uint8_t *q = blk + 16;
    for (int c = 0; c < 4; c++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
        __m256i nib[2];
        nib[0] = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
        nib[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
        for (int h = 0; h < 2; h++) {
            const __m256 dv = _mm256_set1_ps(d * sc[2 * c + h]), mv = _mm256_set1_ps(dmin * m[2 * c + h]);
            uint8_t bytes[32];
            _mm256_storeu_si256((__m256i *)bytes, nib[h]);
            float *yc = y + 64 * c + 32 * h;
            for (int i = 0; i < 4; i++)
                _mm256_storeu_ps(yc + 8 * i, _mm256_sub_ps(_mm256_mul_ps(dv, u8x8_ps(_mm_loadl_epi64((const __m128i *)(bytes + 8 * i)))), mv));
        }
    }
}

static void deq_q6_K(const uint8_t *blk, float *y) {
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t *sc = (const int8_t *)(blk + 192);
    const float d = ifd_fp16_to_f32(ld16(blk + 208));
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int n = 0; n < 2; n++) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(ql + 64 * n));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(ql + 64 * n + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i *)(qh + 32 * n));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
        q[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(h, m30));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
        const int8_t *s = sc + 8 * n;
        float *yn = y + 128 * n;
        for (int g = 0; g < 4; g++) {
            uint8_t bytes[32];
            _mm256_storeu_si256((__m256i *)bytes, q[g]);
            for (int i = 0; i < 4; i++) {
                const __m256 qf = _mm256_cvtepi32_ps(_mm256_sub_epi32(
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(bytes + 8 * i))), _mm256_set1_epi32(32)));
                _mm256_storeu_ps(yn + 32 * g + 8 * i, _mm256_mul_ps(_mm256_set1_ps(d * s[2 * g + i / 2]), qf));
            }
        }
    }
}

#define KR 4
static void gemm_kquant(const wmat *w, int64_t r0, int64_t r1, const uint8_t *act, size_t as,
                        int32_t nt, float *out, size_t os, float *scratch) {
    const int64_t K = w->n_cols, nsb = K / QK_K;
    const size_t sb_bytes = w->type == GGML_TYPE_Q4_K ? sizeof(block_q4_K) : sizeof(block_q6_K);
    for (int64_t r = r0; r < r1; r += KR) {
        const int64_t nr = IFD_MIN(KR, r1 - r);
        for (int64_t i = 0; i < nr; i++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
            for (int64_t s = 0; s < nsb; s++) {
                if (w->type == GGML_TYPE_Q4_K)
                    deq_q4_K(row + (size_t)s * sb_bytes, scratch + i * K + s * QK_K);
                else
                    deq_q6_K(row + (size_t)s * sb_bytes, scratch + i * K + s * QK_K);
            }
        }
        gemm_f32((const uint8_t *)scratch, (size_t)K * sizeof(float), K, nr, act, as, nt, out + r, os);
    }
}

static void k2_gemm(const wmat *w, int64_t r0, int64_t r1, const void *act, size_t as,
                    int32_t nt, float *out, size_t os, float *scratch) {
    const uint8_t *base = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    switch (w->type) {
    case GGML_TYPE_Q8_0:
        gemm_q8_0(w, r0, r1, act, as, nt, out, os);
        break;
    case GGML_TYPE_Q4_0:
        gemm_q4_0(w, r0, r1, act, as, nt, out, os);
        break;
    case GGML_TYPE_F32:
        gemm_f32(base, w->row_bytes, w->n_cols, r1 - r0, act, as, nt, out + r0, os);
        break;
    case GGML_TYPE_F16:
        gemm_f16(base, w->row_bytes, w->n_cols, r1 - r0, act, as, nt, out + r0, os);
        break;
    case GGML_TYPE_BF16:
        gemm_bf16(base, w->row_bytes, w->n_cols, r1 - r0, act, as, nt, out + r0, os);
        break;
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q6_K:
        gemm_kquant(w, r0, r1, act, as, nt, out, os, scratch);
        break;
    default: /* types without a SIMD kernel (e.g. Q5_0): the reference dot on f32 rows */
        kern_scalar_table.gemm(w, r0, r1, act, as, nt, out, os, scratch);
    }
}

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

static void k2_attn(float *out, const float *q, int32_t g, int32_t n_keys, const kv_view *kv,
                    int32_t kvh, const int32_t *block_table, float scale, float *scratch) {
    const int32_t hd = kv->head_dim, bs = kv->block_size, nv = hd / 8;
    if (hd % 8 || nv > MAX_HD8) {
        kern_scalar_table.attn(out, q, g, n_keys, kv, kvh, block_table, scale, scratch);
        return;
    }
    const size_t slot_stride = (size_t)kv->n_kv_heads * hd;
    const float *kbase = kv->k + (size_t)kvh * hd, *vbase = kv->v + (size_t)kvh * hd;
    for (int32_t h = 0; h < g; h++) {
        const float *qh = q + (size_t)h * hd;
        float *sc = scratch + (size_t)h * n_keys, max = -INFINITY;
        for (int32_t p = 0; p < n_keys; p++) {
            const size_t slot = (size_t)block_table[p / bs] * bs + p % bs;
            const float *kp = kbase + slot * slot_stride;
            __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qh), _mm256_loadu_ps(kp));
            for (int32_t c = 1; c < nv; c++)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8 * c), _mm256_loadu_ps(kp + 8 * c), acc);
            const float s = hsum8(acc) * scale;
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
            const size_t slot = (size_t)block_table[p / bs] * bs + p % bs;
            const float *vp = vbase + slot * slot_stride;
            const __m256 wgt = _mm256_set1_ps(sc[p]);
            for (int32_t c = 0; c < nv; c++)
                _mm256_storeu_ps(oh + 8 * c, _mm256_fmadd_ps(wgt, _mm256_loadu_ps(vp + 8 * c), _mm256_loadu_ps(oh + 8 * c)));
        }
        const __m256 vinv = _mm256_set1_ps(1.0f / sum);
        for (int32_t c = 0; c < nv; c++) _mm256_storeu_ps(oh + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(oh + 8 * c), vinv));
    }
}

static const kern_table k2_table = {
    .level = CPU_LEVEL_AVX2,
    .act_row_bytes = k2_act_row_bytes,
    .act_prepare = k2_act_prepare,
    .gemm = k2_gemm,
    .rmsnorm = k2_rmsnorm,
    .swiglu = k2_swiglu,
    .attn = k2_attn,
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const kern_table *kern_avx2_get(void) {
    return &k2_table;
}

#else
const kern_table *kern_avx2_get(void) {
    return NULL;
}
#endif
