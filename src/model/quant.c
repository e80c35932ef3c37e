/* quant.c — the traits table of the weight types inferd computes with (F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) and their reference (plain C) dequantization, dot
 * products and quantizers. Fixed accumulation order: block by block, element by
 * element, in f32. Thread-safe. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "../util/common.h"

float ifd_fp16_to_f32(ifd_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) {
                mant <<= 1;
                exp--;
            }
            mant &= 0x3ff;
            bits = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

ifd_fp16 ifd_f32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (ifd_fp16)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (ifd_fp16)(sign | 0x7c00); /* overflow -> inf */
    if (absx < 0x38800000u) {                                   /* subnormal or zero */
        if (absx < 0x33000000u) return (ifd_fp16)sign;
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (ifd_fp16)(sign | r);
    }
    uint32_t r = absx - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t out = r >> 13;
    uint32_t rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (out & 1))) out++;
    return (ifd_fp16)(sign | out);
}

float ifd_bf16_to_f32(ifd_bf16 h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

ifd_bf16 ifd_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000u) return (ifd_bf16)((x >> 16) | 64); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (ifd_bf16)(x >> 16);
}

size_t quant_row_bytes(ggml_type t, int64_t n) {
    const ggml_type_info *ti = ggml_type_get((uint32_t)t);
    IFD_ASSERT(ti && n % ti->block_size == 0);
    return (size_t)(n / ti->block_size) * ti->type_bytes;
}

/* ---- float types ------------------------------------------------------------------------ */

static void deq_row_f32(const void *row, float *out, int64_t n) {
    memcpy(out, row, (size_t)n * sizeof(float));
}
static float dot_f32(const void *row, const float *x, int64_t n) {
    const uint8_t *p = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float w;
        memcpy(&w, p + 4 * i, 4);
        sum += w * x[i];
    }
    return sum;
}
static void quant_row_f32(const float *x, void *row, int64_t n) {
    memcpy(row, x, (size_t)n * sizeof(float));
}

/* F16 / BF16: one 16-bit value per element; CONV is the exact conversion to f32. */
#define HALF_ROW_FNS(name, CONV, BACK)                                                        \
    static void deq_row_##name(const void *row, float *out, int64_t n) {                    \
        const uint8_t *p = row;                                                             \
        for (int64_t i = 0; i < n; i++) {                                                   \
            uint16_t h;                                                                     \
            memcpy(&h, p + 2 * i, 2);                                                       \
            out[i] = CONV(h);                                                               \
        }                                                                                   \
    }                                                                                       \
    static float dot_##name(const void *row, const float *x, int64_t n) {                   \
        const uint8_t *p = row;                                                             \
        float sum = 0.0f;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                   \
            uint16_t h;                                                                     \
            memcpy(&h, p + 2 * i, 2);                                                       \
            sum += CONV(h) * x[i];                                                          \
        }                                                                                   \
        return sum;                                                                         \
    }                                                                                       \
    static void quant_row_##name(const float *x, void *row, int64_t n) {                    \
        uint8_t *p = row;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                   \
            const uint16_t h = BACK(x[i]);                                                  \
            memcpy(p + 2 * i, &h, 2);                                                       \
        }                                                                                   \
    }
HALF_ROW_FNS(f16, ifd_fp16_to_f32, ifd_f32_to_fp16)
HALF_ROW_FNS(bf16, ifd_bf16_to_f32, ifd_f32_to_bf16)

/* ---- block types: one block dequantizer each -------------------------------------------- */

static void deq_block_q8_0(const uint8_t *blk, float *y) {
    block_q8_0 b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d);
    for (int j = 0; j < QK8_0; j++) y[j] = d * b.qs[j];
}

static void deq_block_q4_0(const uint8_t *blk, float *y) {
    block_q4_0 b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d);
    for (int j = 0; j < QK4_0 / 2; j++) {
        y[j] = d * ((b.qs[j] & 0xF) - 8);
        y[j + QK4_0 / 2] = d * ((b.qs[j] >> 4) - 8);
    }
}

static void deq_block_q5_0(const uint8_t *blk, float *y) {
    block_q5_0 b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d);
    uint32_t qh;
    memcpy(&qh, b.qh, 4);
    for (int j = 0; j < QK4_0 / 2; j++) {
        const int lo = (int)((b.qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
        const int hi = (int)((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
        y[j] = d * lo;
        y[j + QK4_0 / 2] = d * hi;
    }
}

void quant_q4_K_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void deq_block_q4_K(const uint8_t *blk, float *y) {
    block_q4_K b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d), dmin = ifd_fp16_to_f32(b.dmin);
    const uint8_t *q = b.qs;
    int is = 0;
    for (int j = 0; j < QK_K; j += 64) {
        uint8_t sc, m;
        quant_q4_K_scale_min(is, b.scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        quant_q4_K_scale_min(is + 1, b.scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        q += 32;
        is += 2;
    }
}

static void deq_block_q6_K(const uint8_t *blk, float *y) {
    block_q6_K b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d);
    const uint8_t *ql = b.ql, *qh = b.qh;
    const int8_t *sc = b.scales;
    for (int n = 0; n < QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

static void deq_block_q4_1(const uint8_t *blk, float *y) {
    block_q4_1 b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d), m = ifd_fp16_to_f32(b.m);
    for (int j = 0; j < QK4_0 / 2; j++) {
        y[j] = d * (float)(b.qs[j] & 0xF) + m;
        y[j + QK4_0 / 2] = d * (float)(b.qs[j] >> 4) + m;
    }
}

static void deq_block_q5_1(const uint8_t *blk, float *y) {
    block_q5_1 b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d), m = ifd_fp16_to_f32(b.m);
    uint32_t qh;
    memcpy(&qh, b.qh, 4);
    for (int j = 0; j < QK4_0 / 2; j++) {
        const unsigned lo = (b.qs[j] & 0xFu) | (((qh >> j) & 1u) << 4);
        const unsigned hi = (b.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * (float)lo + m;
        y[j + QK4_0 / 2] = d * (float)hi + m;
    }
}

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

static void deq_block_iq4_nl(const uint8_t *blk, float *y) {
    block_iq4_nl b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d);
    for (int j = 0; j < QK4_0 / 2; j++) {
        y[j] = d * (float)quant_iq4nl_values[b.qs[j] & 0xF];
        y[j + QK4_0 / 2] = d * (float)quant_iq4nl_values[b.qs[j] >> 4];
    }
}

/* Q2_K: 16 groups of 16; group g's 2-bit quants sit in byte (g/8)*32 + (g%2)*16 + l,
 * at bit shift 2*((g/2)%4): each 32-byte half of qs holds 128 elements, four shifts. */
static void deq_block_q2_K(const uint8_t *blk, float *y) {
    block_q2_K b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d), dmin = ifd_fp16_to_f32(b.dmin);
    const uint8_t *q = b.qs;
    int is = 0;
    for (int n = 0; n < QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int h = 0; h < 2; h++) {
                const uint8_t sc = b.scales[is++];
                const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[16 * h + l] >> shift) & 3) - ml;
            }
        }
        q += 32;
    }
}

/* Q3_K's 16 six-bit scales: low nibbles in bytes 0..7 (scale j: byte j%8, nibble j/8),
 * high 2 bits in bytes 8..11 (scale j: byte 8 + j%4, bits 2*(j/4)); stored + 32. */
static int q3_K_scale(const uint8_t *sc, int j) {
    const int lo = (sc[j % 8] >> (4 * (j / 8))) & 0xF;
    const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

static void deq_block_q3_K(const uint8_t *blk, float *y) {
    block_q3_K b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d);
    const uint8_t *q = b.qs;
    int is = 0;
    unsigned mask = 1;
    for (int n = 0; n < QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int h = 0; h < 2; h++) {
                const float dl = d * (float)q3_K_scale(b.scales, is++);
                for (int l = 16 * h; l < 16 * h + 16; l++) {
                    const int v = ((q[l] >> shift) & 3) - ((b.hmask[l] & mask) ? 0 : 4);
                    *y++ = dl * (float)v;
                }
            }
            mask <<= 1;
        }
        q += 32;
    }
}

static void deq_block_q5_K(const uint8_t *blk, float *y) {
    block_q5_K b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d), dmin = ifd_fp16_to_f32(b.dmin);
    const uint8_t *ql = b.qs;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2) {
        uint8_t sc, m;
        quant_q4_K_scale_min(is, b.scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        quant_q4_K_scale_min(is + 1, b.scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xF) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        u1 <<= 2;
        u2 <<= 2;
    }
}

static void deq_block_iq4_xs(const uint8_t *blk, float *y) {
    block_iq4_xs b;
    memcpy(&b, blk, sizeof b);
    const float d = ifd_fp16_to_f32(b.d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        const uint8_t *qs = b.qs + 16 * ib;
        for (int j = 0; j < 16; j++) {
            y[j] = dl * (float)quant_iq4nl_values[qs[j] & 0xF];
            y[j + 16] = dl * (float)quant_iq4nl_values[qs[j] >> 4];
        }
        y += 32;
    }
}

/* INT8 / INT4 groups (quant.h): G / 32 sub-blocks of 32 in Q8_0 / Q4_1 order. */
static void deq_group_i8(const uint8_t *blk, float *y, int g) {
    ifd_fp16 d16;
    memcpy(&d16, blk, 2);
    const float d = ifd_fp16_to_f32(d16);
    const int8_t *qs = (const int8_t *)(blk + 2);
    for (int j = 0; j < g; j++) y[j] = d * (float)qs[j];
}
static void deq_group_i4(const uint8_t *blk, float *y, int g) {
    ifd_fp16 h[2];
    memcpy(h, blk, 4);
    const float d = ifd_fp16_to_f32(h[0]), m = ifd_fp16_to_f32(h[1]);
    const uint8_t *qs = blk + 4;
    for (int s = 0; s < g / 32; s++, qs += 16, y += 32)
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(qs[j] & 0xF) + m;
            y[j + 16] = d * (float)(qs[j] >> 4) + m;
        }
}
static void deq_block_i8_g64(const uint8_t *blk, float *y) { deq_group_i8(blk, y, 64); }
static void deq_block_i8_g128(const uint8_t *blk, float *y) { deq_group_i8(blk, y, 128); }
static void deq_block_i4_g64(const uint8_t *blk, float *y) { deq_group_i4(blk, y, 64); }
static void deq_block_i4_g128(const uint8_t *blk, float *y) { deq_group_i4(blk, y, 128); }

/* Row dequantizer and dot of a block type: block by block; the dot dequantizes a block
 * and accumulates its products into one running f32 sum, in element order. */
#define BLOCK_ROW_FNS(name, BS, BB)                                                           \
    static void deq_row_##name(const void *row, float *out, int64_t n) {                    \
        const uint8_t *p = row;                                                             \
        for (int64_t b = 0; b < n / (BS); b++) deq_block_##name(p + (size_t)b * (BB), out + b * (BS)); \
    }                                                                                       \
    static float dot_##name(const void *row, const float *x, int64_t n) {                   \
        const uint8_t *p = row;                                                             \
        float sum = 0.0f, tmp[BS];                                                          \
        for (int64_t b = 0; b < n / (BS); b++) {                                            \
            deq_block_##name(p + (size_t)b * (BB), tmp);                                    \
            const float *xb = x + b * (BS);                                                 \
            for (int j = 0; j < (BS); j++) sum += tmp[j] * xb[j];                           \
        }                                                                                   \
        return sum;                                                                         \
    }
BLOCK_ROW_FNS(q8_0, QK8_0, sizeof(block_q8_0))
BLOCK_ROW_FNS(q4_0, QK4_0, sizeof(block_q4_0))
BLOCK_ROW_FNS(q5_0, QK4_0, sizeof(block_q5_0))
BLOCK_ROW_FNS(q4_1, QK4_0, sizeof(block_q4_1))
BLOCK_ROW_FNS(q5_1, QK4_0, sizeof(block_q5_1))
BLOCK_ROW_FNS(iq4_nl, QK4_0, sizeof(block_iq4_nl))
BLOCK_ROW_FNS(q2_K, QK_K, sizeof(block_q2_K))
BLOCK_ROW_FNS(q3_K, QK_K, sizeof(block_q3_K))
BLOCK_ROW_FNS(q4_K, QK_K, sizeof(block_q4_K))
BLOCK_ROW_FNS(q5_K, QK_K, sizeof(block_q5_K))
BLOCK_ROW_FNS(iq4_xs, QK_K, sizeof(block_iq4_xs))
BLOCK_ROW_FNS(q6_K, QK_K, sizeof(block_q6_K))
BLOCK_ROW_FNS(i8_g64, 64, sizeof(block_i8_g64))
BLOCK_ROW_FNS(i8_g128, 128, sizeof(block_i8_g128))
BLOCK_ROW_FNS(i4_g64, 64, sizeof(block_i4_g64))
BLOCK_ROW_FNS(i4_g128, 128, sizeof(block_i4_g128))

static void quant_row_q8_0(const float *x, void *row, int64_t n) {
    quant_quantize_row_q8_0(x, row, n);
}
static void quant_row_q4_0(const float *x, void *row, int64_t n) {
    quant_quantize_row_q4_0(x, row, n);
}
static void quant_row_q4_1(const float *x, void *row, int64_t n) {
    quant_quantize_row_q4_1(x, row, n);
}
static void quant_row_q5_0(const float *x, void *row, int64_t n) {
    quant_quantize_row_q5_0(x, row, n);
}
static void quant_row_q5_1(const float *x, void *row, int64_t n) {
    quant_quantize_row_q5_1(x, row, n);
}
static void quant_row_iq4_nl(const float *x, void *row, int64_t n) {
    quant_quantize_row_iq4_nl(x, row, n);
}
static void quant_row_i8_g64(const float *x, void *row, int64_t n) {
    quant_quantize_row_int8(x, row, n, 64);
}
static void quant_row_i8_g128(const float *x, void *row, int64_t n) {
    quant_quantize_row_int8(x, row, n, 128);
}
static void quant_row_i4_g64(const float *x, void *row, int64_t n) {
    quant_quantize_row_int4(x, row, n, 64);
}
static void quant_row_i4_g128(const float *x, void *row, int64_t n) {
    quant_quantize_row_int4(x, row, n, 128);
}

/* ---- the traits table ------------------------------------------------------------------- */

#define FLOAT_TYPE(T, n, bytes)                                                               \
    [GGML_TYPE_##T] = {.type = GGML_TYPE_##T, .name = #T, .block_size = 1, .block_bytes = bytes, \
                       .dequantize_row = deq_row_##n, .dot = dot_##n, .quantize_row = quant_row_##n, \
                       .act = QUANT_ACT_F32}

/* A block type computed by its reference kernels only (act F32). */
#define REF_TYPE(T, n, bs, quant)                                                             \
    [GGML_TYPE_##T] = {.type = GGML_TYPE_##T, .name = #T, .block_size = bs,                   \
                       .block_bytes = sizeof(block_##n), .dequantize_row = deq_row_##n,       \
                       .dot = dot_##n, .quantize_row = quant, .act = QUANT_ACT_F32}

/* A 32-element block type with integer-dot SIMD kernels (int8 activations), its
 * weight -> integer relation given by Q (Q5_0: q - 16; Q4_1 / Q5_1: d*q + m, the minimum
 * against d_a * sum(a); IQ4_NL: the table value, a signed int8 as Q8_0's). */
#define B32_TYPE(T, n, ...)                                                                   \
    [GGML_TYPE_##T] = {.type = GGML_TYPE_##T, .name = #T, .block_size = QK4_0,                \
                       .block_bytes = sizeof(block_##n), .dequantize_row = deq_row_##n,       \
                       .dot = dot_##n, .quantize_row = quant_row_##n, .act = QUANT_ACT_Q8_32, \
                       .q_group = 32, __VA_ARGS__}

/* One of inferd's INT8 / INT4 group types (IFD_TYPE_*, g elements per group). */
#define GRP_TYPE(T, n, g, ...)                                                                \
    [IFD_TYPE_##T] = {.type = IFD_TYPE_##T, .name = #T, .block_size = g,                      \
                      .block_bytes = sizeof(block_##n), .dequantize_row = deq_row_##n,        \
                      .dot = dot_##n, .quantize_row = quant_row_##n, .act = QUANT_ACT_Q8_32,  \
                      .q_group = 32, __VA_ARGS__}

static const quant_traits TRAITS[GGML_TYPE_COUNT_] = {
    FLOAT_TYPE(F32, f32, 4),
    FLOAT_TYPE(F16, f16, 2),
    FLOAT_TYPE(BF16, bf16, 2),
    [GGML_TYPE_Q8_0] = {.type = GGML_TYPE_Q8_0, .name = "Q8_0", .block_size = QK8_0,
                        .block_bytes = sizeof(block_q8_0), .dequantize_row = deq_row_q8_0,
                        .dot = dot_q8_0, .quantize_row = quant_row_q8_0, .act = QUANT_ACT_Q8_32,
                        .q_signed = true, .q_group = 32},
    [GGML_TYPE_Q4_0] = {.type = GGML_TYPE_Q4_0, .name = "Q4_0", .block_size = QK4_0,
                        .block_bytes = sizeof(block_q4_0), .dequantize_row = deq_row_q4_0,
                        .dot = dot_q4_0, .quantize_row = quant_row_q4_0, .act = QUANT_ACT_Q8_32,
                        .q_zero = 8, .q_group = 32},
    /* no SIMD kernel (act F32): the fast path runs the reference dot on f32 rows */
    /* the 32-element block family: integer kernels (kern_avx512.c, kern_avx2.c) */
    B32_TYPE(Q5_0, q5_0, .q_zero = 16),
    B32_TYPE(Q4_1, q4_1, .q_min = true),
    B32_TYPE(Q5_1, q5_1, .q_min = true),
    B32_TYPE(IQ4_NL, iq4_nl, .q_signed = true),
    /* Q2_K / Q3_K / Q5_K / IQ4_XS: integer kernels (int8 activations) */
    [GGML_TYPE_Q2_K] = {.type = GGML_TYPE_Q2_K, .name = "Q2_K", .block_size = QK_K,
                        .block_bytes = sizeof(block_q2_K), .dequantize_row = deq_row_q2_K,
                        .quantize_row = quant_kq_row_q2_K,
                        .dot = dot_q2_K, .act = QUANT_ACT_Q8_32, .q_group = 16, .q_min = true},
    [GGML_TYPE_Q3_K] = {.type = GGML_TYPE_Q3_K, .name = "Q3_K", .block_size = QK_K,
                        .block_bytes = sizeof(block_q3_K), .dequantize_row = deq_row_q3_K,
                        .quantize_row = quant_kq_row_q3_K,
                        .dot = dot_q3_K, .act = QUANT_ACT_Q8_32, .q_zero = 4, .q_group = 16},
    [GGML_TYPE_Q5_K] = {.type = GGML_TYPE_Q5_K, .name = "Q5_K", .block_size = QK_K,
                        .block_bytes = sizeof(block_q5_K), .dequantize_row = deq_row_q5_K,
                        .quantize_row = quant_kq_row_q5_K,
                        .dot = dot_q5_K, .act = QUANT_ACT_Q8_32, .q_group = 32, .q_min = true},
    [GGML_TYPE_IQ4_XS] = {.type = GGML_TYPE_IQ4_XS, .name = "IQ4_XS", .block_size = QK_K,
                          .block_bytes = sizeof(block_iq4_xs), .dequantize_row = deq_row_iq4_xs,
                          .dot = dot_iq4_xs, .act = QUANT_ACT_Q8_32, .q_signed = true, .q_group = 32},
    [GGML_TYPE_Q4_K] = {.type = GGML_TYPE_Q4_K, .name = "Q4_K", .block_size = QK_K,
                        .block_bytes = sizeof(block_q4_K), .dequantize_row = deq_row_q4_K,
                        .quantize_row = quant_kq_row_q4_K,
                        .dot = dot_q4_K, .act = QUANT_ACT_Q8_32, .q_group = 32, .q_min = true},
    /* inferd's INT8 / INT4 groups: integer kernels against Q8_32 activations, 32
     * elements at a time (INT4: the minimum against d_a * sum(a) per 32, like Q4_1) */
    GRP_TYPE(I8_G64, i8_g64, 64, .q_signed = true),
    GRP_TYPE(I8_G128, i8_g128, 128, .q_signed = true),
    GRP_TYPE(I4_G64, i4_g64, 64, .q_min = true),
    GRP_TYPE(I4_G128, i4_g128, 128, .q_min = true),
    [GGML_TYPE_Q6_K] = {.type = GGML_TYPE_Q6_K, .name = "Q6_K", .block_size = QK_K,
                        .block_bytes = sizeof(block_q6_K), .dequantize_row = deq_row_q6_K,
                        .quantize_row = quant_kq_row_q6_K,
                        .dot = dot_q6_K, .act = QUANT_ACT_Q8_32, .q_zero = 32, .q_group = 16},
};

const quant_traits *quant_traits_of(ggml_type t) {
    if ((unsigned)t >= GGML_TYPE_COUNT_ || !TRAITS[t].dot) return NULL;
    return &TRAITS[t];
}

bool quant_type_supported(ggml_type t) {
    return quant_traits_of(t) != NULL;
}

void quant_dequantize_row_ref(ggml_type t, const void *row, float *out, int64_t n) {
    const quant_traits *qt = quant_traits_of(t);
    IFD_ASSERT(qt && n % qt->block_size == 0);
    qt->dequantize_row(row, out, n);
}

float quant_dot_ref(ggml_type t, const void *row, const float *x, int64_t n) {
    const quant_traits *qt = quant_traits_of(t);
    IFD_ASSERT(qt && n % qt->block_size == 0);
    return qt->dot(row, x, n);
}

/* (int)v for a quantizer's rounding, defined for every float: NaN -> 0, beyond +-2^30
 * saturated (a weight file may hold NaN or huge values; the cast alone would be
 * undefined). Finite values in range cast as before, so the bytes do not change. */
static inline int cast_int(float v) {
    return v != v ? 0 : v < -1073741824.0f ? -1073741824 : v > 1073741824.0f ? 1073741824 : (int)v;
}

void quant_quantize_row_q8_0(const float *x, block_q8_0 *out, int64_t n) {
    IFD_ASSERT(n % QK8_0 == 0);
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        out[b].d = ifd_f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) out[b].qs[j] = (int8_t)cast_int(roundf(xb[j] * id));
    }
}

/* The element of largest magnitude, with its sign (the first of equal ones): the
 * round-to-nearest quantizers' scale is it over the most negative code. */
static float block_signed_max(const float *xb, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(xb[j]) > amax) {
            amax = fabsf(xb[j]);
            max = xb[j];
        }
    return max;
}

void quant_quantize_row_q4_0(const float *x, block_q4_0 *out, int64_t n) {
    IFD_ASSERT(n % QK4_0 == 0);
    for (int64_t b = 0; b < n / QK4_0; b++) {
        const float *xb = x + b * QK4_0;
        const float max = block_signed_max(xb, QK4_0);
        const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
        out[b].d = ifd_f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int q0 = cast_int(xb[j] * id + 8.5f), q1 = cast_int(xb[j + QK4_0 / 2] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            out[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min, q = round((x - min) / d)
 * (ggml's reference: truncation of + 0.5, clamped). */
static void quant_block_min(const float *xb, int qmax, ifd_fp16 *d16, ifd_fp16 *m16, uint8_t *q) {
    float mn = xb[0], mx = xb[0];
    for (int j = 1; j < 32; j++) {
        mn = fminf(mn, xb[j]);
        mx = fmaxf(mx, xb[j]);
    }
    const float d = (mx - mn) / (float)qmax, id = d ? 1.0f / d : 0.0f;
    *d16 = ifd_f32_to_fp16(d);
    *m16 = ifd_f32_to_fp16(mn);
    for (int j = 0; j < 32; j++) {
        const int v = cast_int((xb[j] - mn) * id + 0.5f);
        q[j] = (uint8_t)(v < 0 ? 0 : v > qmax ? qmax : v);
    }
}

void quant_quantize_row_q4_1(const float *x, block_q4_1 *out, int64_t n) {
    IFD_ASSERT(n % QK4_0 == 0);
    for (int64_t b = 0; b < n / QK4_0; b++) {
        uint8_t q[32];
        quant_block_min(x + b * QK4_0, 15, &out[b].d, &out[b].m, q);
        for (int j = 0; j < 16; j++) out[b].qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
}

void quant_quantize_row_q5_1(const float *x, block_q5_1 *out, int64_t n) {
    IFD_ASSERT(n % QK4_0 == 0);
    for (int64_t b = 0; b < n / QK4_0; b++) {
        uint8_t q[32];
        quant_block_min(x + b * QK4_0, 31, &out[b].d, &out[b].m, q);
        uint32_t qh = 0;
        for (int j = 0; j < 32; j++) qh |= (uint32_t)(q[j] >> 4) << j;
        for (int j = 0; j < 16; j++) out[b].qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        memcpy(out[b].qh, &qh, 4);
    }
}

/* Q5_0: d = max / -16 (max: the element of largest magnitude), q = round(x / d) + 16. */
void quant_quantize_row_q5_0(const float *x, block_q5_0 *out, int64_t n) {
    IFD_ASSERT(n % QK4_0 == 0);
    for (int64_t b = 0; b < n / QK4_0; b++) {
        const float *xb = x + b * QK4_0;
        const float max = block_signed_max(xb, QK4_0);
        const float d = max / -16.0f, id = d ? 1.0f / d : 0.0f;
        out[b].d = ifd_f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK4_0; j++) {
            int v = cast_int(xb[j] * id + 16.5f);
            v = v < 0 ? 0 : v > 31 ? 31 : v;
            qh |= (uint32_t)(v >> 4) << j;
            if (j < 16)
                out[b].qs[j] = (uint8_t)(v & 0xF);
            else
                out[b].qs[j - 16] |= (uint8_t)((v & 0xF) << 4);
        }
        memcpy(out[b].qh, &qh, 4);
    }
}

/* IQ4_NL, the simple way: d = max / -127 (so the largest-magnitude element maps to the
 * table's end), each element the nearest table value. ggml searches scales for a lower
 * error; this round-to-nearest is the cheap, deterministic reference. */
void quant_quantize_row_iq4_nl(const float *x, block_iq4_nl *out, int64_t n) {
    IFD_ASSERT(n % QK4_0 == 0);
    for (int64_t b = 0; b < n / QK4_0; b++) {
        const float *xb = x + b * QK4_0;
        const float max = block_signed_max(xb, QK4_0);
        const ifd_fp16 d16 = ifd_f32_to_fp16(max / -127.0f);
        const float d = ifd_fp16_to_f32(d16), id = d ? 1.0f / d : 0.0f;
        out[b].d = d16;
        for (int j = 0; j < QK4_0; j++) {
            const float v = xb[j] * id;
            int best = 0;
            float err = fabsf(v - quant_iq4nl_values[0]);
            for (int k = 1; k < 16; k++) {
                const float e = fabsf(v - quant_iq4nl_values[k]);
                if (e < err) {
                    err = e;
                    best = k;
                }
            }
            if (j < 16)
                out[b].qs[j] = (uint8_t)best;
            else
                out[b].qs[j - 16] |= (uint8_t)(best << 4);
        }
    }
}

/* ---- INT8 / INT4 (--quantize) ---------------------------------------------------------- */

ggml_type quant_int_type(int bits, int g) {
    if (bits == 8) return g == 32 ? GGML_TYPE_Q8_0 : g == 64 ? IFD_TYPE_I8_G64
                          : g == 128 ? IFD_TYPE_I8_G128 : GGML_TYPE_COUNT_;
    if (bits == 4) return g == 32 ? GGML_TYPE_Q4_1 : g == 64 ? IFD_TYPE_I4_G64
                          : g == 128 ? IFD_TYPE_I4_G128 : GGML_TYPE_COUNT_;
    return GGML_TYPE_COUNT_;
}

/* Group layout: [fp16 d][int8 q x g] (INT8; g == 32 is block_q8_0). */
void quant_quantize_row_int8(const float *x, void *out, int64_t n, int g) {
    IFD_ASSERT((g == 32 || g == 64 || g == 128) && n % g == 0);
    uint8_t *p = out;
    for (int64_t b = 0; b < n / g; b++, x += g, p += 2 + (size_t)g) {
        float amax = 0.0f;
        for (int j = 0; j < g; j++) amax = fmaxf(amax, fabsf(x[j]));
        const ifd_fp16 d16 = ifd_f32_to_fp16(amax / 127.0f);
        const float d = ifd_fp16_to_f32(d16), id = d ? 1.0f / d : 0.0f;
        memcpy(p, &d16, 2);
        int8_t *q = (int8_t *)(p + 2);
        for (int j = 0; j < g; j++) {
            const float v = roundf(x[j] * id);
            /* NaN -> 127, as model_quant.c's inline rounding */
            q[j] = (int8_t)(v != v ? 127 : v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
        }
    }
}

/* Group layout: [fp16 d][fp16 m][nibbles, 16 bytes per 32] (INT4; g == 32 is block_q4_1). */
void quant_quantize_row_int4(const float *x, void *out, int64_t n, int g) {
    IFD_ASSERT((g == 32 || g == 64 || g == 128) && n % g == 0);
    uint8_t *p = out;
    for (int64_t b = 0; b < n / g; b++, x += g, p += 4 + (size_t)g / 2) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < g; j++) {
            mn = fminf(mn, x[j]);
            mx = fmaxf(mx, x[j]);
        }
        const ifd_fp16 h[2] = {ifd_f32_to_fp16((mx - mn) / 15.0f), ifd_f32_to_fp16(mn)};
        const float d = ifd_fp16_to_f32(h[0]), m = ifd_fp16_to_f32(h[1]);
        const float id = d ? 1.0f / d : 0.0f;
        memcpy(p, h, 4);
        for (int s = 0; s < g / 32; s++) {
            uint8_t q[32];
            for (int j = 0; j < 32; j++) {
                const float v = roundf((x[s * 32 + j] - m) * id);
                q[j] = (uint8_t)(!(v > 0.0f) ? 0 : v > 15.0f ? 15 : (int)v); /* NaN -> 0 */
            }
            for (int j = 0; j < 16; j++) p[4 + s * 16 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
        }
    }
}
