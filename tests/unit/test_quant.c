/* test_quant.c — reference weight formats: fp16/bf16 conversion, Q8_0/Q4_0 quantize
 * round trips, K-quant dequantization of hand-built blocks, and dot == dequantize+dot. */
#include "model/quant.h"
#include "test_util.h"

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65535.0f) * 2.0f - 1.0f;
}

static void test_fp16(void) {
    CHECK(ifd_fp16_to_f32(0x3c00) == 1.0f);
    CHECK(ifd_fp16_to_f32(0xc000) == -2.0f);
    CHECK(ifd_fp16_to_f32(0x7bff) == 65504.0f);
    CHECK(ifd_fp16_to_f32(0x0001) == 5.9604644775390625e-08f); /* smallest subnormal */
    CHECK(ifd_f32_to_fp16(1.0f) == 0x3c00);
    CHECK(ifd_f32_to_fp16(65504.0f) == 0x7bff);
    CHECK(ifd_f32_to_fp16(1e6f) == 0x7c00);
    /* every finite half round-trips exactly */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        float f = ifd_fp16_to_f32((ifd_fp16)h);
        ifd_fp16 back = ifd_f32_to_fp16(f);
        if (back != h && !(f == 0.0f && (back & 0x7fff) == 0)) {
            CHECKF(0, "half 0x%04x -> %g -> 0x%04x", h, (double)f, back);
            break;
        }
    }
    CHECK(ifd_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(ifd_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(ifd_f32_to_bf16(1.00390625f) == 0x3f80); /* ties to even */
}

static void test_q8_0_q4_0_roundtrip(void) {
    enum { N = 256 };
    float x[N], y[N];
    unsigned s = 1;
    for (int i = 0; i < N; i++) x[i] = frand(&s) * 3.0f;
    block_q8_0 q8[N / QK8_0];
    quant_quantize_row_q8_0(x, q8, N);
    quant_dequantize_row_ref(GGML_TYPE_Q8_0, q8, y, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        for (int j = 0; j < 32; j++)
            CHECKF(fabsf(x[b * 32 + j] - y[b * 32 + j]) <= amax / 127.0f * 0.51f + 1e-3f,
                   "q8_0 elem %d: %g vs %g", b * 32 + j, (double)x[b * 32 + j],
                   (double)y[b * 32 + j]);
    }
    block_q4_0 q4[N / QK4_0];
    quant_quantize_row_q4_0(x, q4, N);
    quant_dequantize_row_ref(GGML_TYPE_Q4_0, q4, y, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        for (int j = 0; j < 32; j++)
            /* step amax/8; the one clamped extreme (q = 16 -> 15) errs by a full step */
            CHECKF(fabsf(x[b * 32 + j] - y[b * 32 + j]) <= amax / 8.0f * 1.01f + 1e-3f,
                   "q4_0 elem %d", b * 32 + j);
    }
}

/* Q4_K and Q6_K: hand-built blocks against the format's definition. */
static void test_k_quants(void) {
    block_q4_K b;
    memset(&b, 0, sizeof b);
    b.d = ifd_f32_to_fp16(0.5f);
    b.dmin = ifd_f32_to_fp16(0.25f);
    /* sub-block 0: scale 3, min 1; sub-block 5: scale (hi bits) */
    b.scales[0] = 3;
    b.scales[4] = 1;
    b.scales[9] = 0x21; /* j=5: sc = (q[9]&0xF) | (q[1]>>6)<<4 = 1, m = q[9]>>4 | (q[5]>>6)<<4 = 2 */
    for (int i = 0; i < QK_K / 2; i++) b.qs[i] = (uint8_t)((i % 16) | (((i + 3) % 16) << 4));
    float y[QK_K];
    quant_dequantize_row_ref(GGML_TYPE_Q4_K, &b, y, QK_K);
    CHECK(y[0] == 0.5f * 3 * 0 - 0.25f * 1);
    CHECK(y[5] == 0.5f * 3 * 5 - 0.25f * 1);
    /* element 160 + l: chunk 2 (qs[64..95]), high nibbles -> sub-block 5 */
    CHECK(y[160 + 2] == 0.5f * 1 * ((64 + 2 + 3) % 16) - 0.25f * 2);

    block_q6_K c;
    memset(&c, 0, sizeof c);
    c.d = ifd_f32_to_fp16(0.125f);
    for (int i = 0; i < 16; i++) c.scales[i] = (int8_t)(i - 8);
    c.ql[0] = 0x21; /* elem 0 low nibble 1, elem 64 high nibble 2 */
    c.qh[0] = 0x1b; /* bits: e0 += 3<<4, e32 += 2<<4, e64 += 1<<4, e96 += 0 */
    quant_dequantize_row_ref(GGML_TYPE_Q6_K, &c, y, QK_K);
    CHECK(y[0] == 0.125f * (0 - 8) * ((1 | (3 << 4)) - 32));
    CHECK(y[32] == 0.125f * (2 - 8) * ((0 | (2 << 4)) - 32));
    CHECK(y[64] == 0.125f * (4 - 8) * ((2 | (1 << 4)) - 32));
    CHECK(y[96] == 0.125f * (6 - 8) * (0 - 32));
}

static void test_q5_0(void) {
    block_q5_0 b;
    memset(&b, 0, sizeof b);
    b.d = ifd_f32_to_fp16(0.5f);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    const uint32_t qh = 0x8001A005u; /* fifth bits of elements 0, 2, 13, 15, 16, 31 */
    memcpy(b.qh, &qh, 4);
    float y[32];
    quant_dequantize_row_ref(GGML_TYPE_Q5_0, &b, y, 32);
    for (int j = 0; j < 32; j++) {
        int lo = j < 16 ? j : 15 - (j - 16);
        int q = lo | (int)(((qh >> j) & 1) << 4);
        CHECKF(y[j] == 0.5f * (q - 16), "q5_0 elem %d: %g", j, (double)y[j]);
    }
}

static void test_dot_equals_dequant(void) {
    enum { N = 512 };
    unsigned s = 7;
    static uint8_t raw[N * 4];
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = frand(&s);
    const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                               GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
                               GGML_TYPE_Q4_1, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K,
                               GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS,
                               IFD_TYPE_I8_G64, IFD_TYPE_I8_G128, IFD_TYPE_I4_G64, IFD_TYPE_I4_G128};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t i = 0; i < sizeof raw; i++) raw[i] = (uint8_t)(frand(&s) * 127 + 128);
        /* keep fp16 scale fields finite: overwrite half-floats with sane values */
        const size_t rb = quant_row_bytes(types[t], N);
        if (types[t] == GGML_TYPE_F32)
            for (int i = 0; i < N; i++) {
                float f = frand(&s);
                memcpy(raw + 4 * i, &f, 4);
            }
        if (types[t] == GGML_TYPE_F16 || types[t] == GGML_TYPE_BF16)
            for (int i = 0; i < N; i++) {
                uint16_t h = types[t] == GGML_TYPE_F16 ? ifd_f32_to_fp16(frand(&s))
                                                       : ifd_f32_to_bf16(frand(&s));
                memcpy(raw + 2 * i, &h, 2);
            }
        if (types[t] == GGML_TYPE_Q8_0 || types[t] == GGML_TYPE_Q4_0 || types[t] == GGML_TYPE_Q5_0) {
            size_t bb = types[t] == GGML_TYPE_Q8_0 ? 34 : types[t] == GGML_TYPE_Q4_0 ? 18 : 22;
            for (size_t o = 0; o < rb; o += bb) {
                uint16_t h = ifd_f32_to_fp16(frand(&s) * 0.1f);
                memcpy(raw + o, &h, 2);
            }
        }
        if (types[t] == GGML_TYPE_Q4_K)
            for (size_t o = 0; o < rb; o += 144) {
                uint16_t h = ifd_f32_to_fp16(0.01f), hm = ifd_f32_to_fp16(0.02f);
                memcpy(raw + o, &h, 2);
                memcpy(raw + o + 2, &hm, 2);
            }
        if (types[t] == GGML_TYPE_Q6_K)
            for (size_t o = 0; o < rb; o += 210) {
                uint16_t h = ifd_f32_to_fp16(0.01f);
                memcpy(raw + o + 208, &h, 2);
            }
        /* the newer types: their f16 fields (byte offsets in a block) set to sane scales */
        const ggml_type_info *ti = ggml_type_get((uint32_t)types[t]);
        int f16_off[2] = {-1, -1};
        switch (types[t]) {
        case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_1:
        case GGML_TYPE_Q5_K:
        case IFD_TYPE_I4_G64:
        case IFD_TYPE_I4_G128: f16_off[0] = 0, f16_off[1] = 2; break;
        case IFD_TYPE_I8_G64:
        case IFD_TYPE_I8_G128:
        case GGML_TYPE_IQ4_NL:
        case GGML_TYPE_IQ4_XS: f16_off[0] = 0; break;
        case GGML_TYPE_Q2_K: f16_off[0] = 80, f16_off[1] = 82; break;
        case GGML_TYPE_Q3_K: f16_off[0] = 108; break;
        default: break;
        }
        for (size_t o = 0; o < rb; o += ti->type_bytes)
            for (int k = 0; k < 2; k++)
                if (f16_off[k] >= 0) {
                    uint16_t h = ifd_f32_to_fp16(frand(&s) * 0.05f);
                    memcpy(raw + o + f16_off[k], &h, 2);
                }
        quant_dequantize_row_ref(types[t], raw, y, N);
        float ref = 0.0f;
        for (int i = 0; i < N; i++) ref += y[i] * x[i];
        float got = quant_dot_ref(types[t], raw, x, N);
        CHECKF(got == ref, "%s: dot %g != dequantized dot %g", ggml_type_get(types[t])->name,
               (double)got, (double)ref);
        CHECKF(isfinite(got), "%s: not finite", ggml_type_get(types[t])->name);
    }
}

/* The traits table: exactly the types we compute with, geometry equal to the GGUF
 * reader's, the quantizers round-trip through the dequantizers, the integer-activation
 * facts (zero points, scale groups, minimum) match each format's definition. */
static void test_traits(void) {
    const ggml_type supported[] = {GGML_TYPE_F32,  GGML_TYPE_F16,   GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                   GGML_TYPE_Q4_0, GGML_TYPE_Q5_0,  GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
                                   GGML_TYPE_Q4_1, GGML_TYPE_Q5_1,  GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                   GGML_TYPE_Q5_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
                                   IFD_TYPE_I8_G64, IFD_TYPE_I8_G128, IFD_TYPE_I4_G64, IFD_TYPE_I4_G128};
    int n = 0;
    for (int t = 0; t < GGML_TYPE_COUNT_ + 3; t++) {
        const quant_traits *qt = quant_traits_of((ggml_type)t);
        if (!qt) continue;
        n++;
        bool listed = false;
        for (size_t i = 0; i < sizeof supported / sizeof supported[0]; i++) listed |= (int)supported[i] == t;
        CHECKF(listed, "type %d has traits", t);
        CHECK(quant_type_supported((ggml_type)t));
        const ggml_type_info *ti = ggml_type_get((uint32_t)t);
        CHECK(ti && qt->type == (ggml_type)t && !strcmp(qt->name, ti->name));
        CHECK(qt->block_size == ti->block_size && qt->block_bytes == ti->type_bytes);
        CHECK(qt->dequantize_row && qt->dot);
        if (qt->act == QUANT_ACT_Q8_32) {
            CHECK(qt->block_size % 32 == 0 && (qt->q_group == 32 || qt->q_group == 16));
            CHECK(!(qt->q_signed && qt->q_zero));
        }
        /* K-quants (256-element blocks): test_kq_roundtrip */
        if (qt->quantize_row && qt->block_size <= 128) { /* round trip of 128 values in [-1, 1] */
            enum { N = 128 };
            float x[N], y[N];
            uint8_t row[N * 4];
            unsigned s = 11;
            for (int i = 0; i < N; i++) x[i] = frand(&s);
            qt->quantize_row(x, row, N);
            qt->dequantize_row(row, y, N);
            float worst = 0;
            for (int i = 0; i < N; i++) worst = fmaxf(worst, fabsf(x[i] - y[i]));
            /* x in [-1, 1]: half a step of amax / 127 (Q8_0), of the range (<= 2) / 15
             * (Q4_1) or / 31 (Q5_1); one step of amax / 8 (Q4_0) or / 16 (Q5_0) at the
             * clamped end; IQ4_NL: 127 lands on the table's 113 at one end (14/127) */
            float tol = 1.0f / 127;
            if (qt->block_size == 1) tol = t == GGML_TYPE_F32 ? 0.0f : 4e-3f;
            if (t == GGML_TYPE_Q4_0) tol = 1.0f / 8 * 1.01f;
            if (t == GGML_TYPE_Q5_0) tol = 1.0f / 16 * 1.01f;
            if (t == GGML_TYPE_Q4_1 || t == IFD_TYPE_I4_G64 || t == IFD_TYPE_I4_G128) tol = 1.0f / 15 * 1.02f;
            if (t == GGML_TYPE_Q5_1) tol = 1.0f / 31 * 1.02f;
            if (t == GGML_TYPE_IQ4_NL) tol = 14.0f / 127 * 1.02f;
            CHECKF(worst <= tol, "%s round trip error %g", qt->name, (double)worst);
        }
    }
    CHECK(n == (int)(sizeof supported / sizeof supported[0]));
    CHECK(quant_traits_of(GGML_TYPE_IQ2_XXS) == NULL && quant_traits_of(GGML_TYPE_COUNT_) == NULL);
    CHECK(quant_traits_of(GGML_TYPE_MXFP4) == NULL && quant_traits_of(GGML_TYPE_TQ1_0) == NULL);
    /* the K-quants have quantizers (quant_kq.c); IQ4_XS stays read only */
    CHECK(quant_traits_of(GGML_TYPE_Q2_K)->quantize_row && quant_traits_of(GGML_TYPE_Q4_K)->quantize_row);
    CHECK(quant_traits_of(GGML_TYPE_Q5_K)->quantize_row && quant_traits_of(GGML_TYPE_Q6_K)->quantize_row);
    CHECK(quant_traits_of(GGML_TYPE_Q3_K)->quantize_row && !quant_traits_of(GGML_TYPE_IQ4_XS)->quantize_row);
    const quant_traits *q8 = quant_traits_of(GGML_TYPE_Q8_0), *q4 = quant_traits_of(GGML_TYPE_Q4_0);
    const quant_traits *q4k = quant_traits_of(GGML_TYPE_Q4_K), *q6k = quant_traits_of(GGML_TYPE_Q6_K);
    CHECK(q8->q_signed && q4->q_zero == 8 && q6k->q_zero == 32 && q6k->q_group == 16);
    CHECK(q4k->q_min && q4k->q_zero == 0 && !q4k->q_signed);
    /* the 32-element block family: int8 activations, the weight's integer relation */
    const quant_traits *q50 = quant_traits_of(GGML_TYPE_Q5_0), *q41 = quant_traits_of(GGML_TYPE_Q4_1);
    const quant_traits *q51 = quant_traits_of(GGML_TYPE_Q5_1), *nl = quant_traits_of(GGML_TYPE_IQ4_NL);
    CHECK(q50->act == QUANT_ACT_Q8_32 && q50->q_zero == 16 && !q50->q_min && !q50->q_signed);
    CHECK(q41->act == QUANT_ACT_Q8_32 && q41->q_min && q41->q_zero == 0 && !q41->q_signed);
    CHECK(q51->act == QUANT_ACT_Q8_32 && q51->q_min && q51->q_zero == 0 && !q51->q_signed);
    CHECK(nl->act == QUANT_ACT_Q8_32 && nl->q_signed && !nl->q_min && nl->q_group == 32);
}

/* --quantize int8 / int4 at every group size: the type, and the round trip on random
 * rows at several magnitudes (outliers included) within half a step of each group's
 * grid (INT8: amax / 127; INT4: (max - min) / 15), plus the fp16 rounding of d and m. */
static void test_int_roundtrip(void) {
    enum { N = 1024 };
    static float x[N], y[N];
    static uint8_t row[N * 2];
    CHECK(quant_int_type(8, 32) == GGML_TYPE_Q8_0 && quant_int_type(4, 32) == GGML_TYPE_Q4_1);
    CHECK(quant_int_type(8, 128) == IFD_TYPE_I8_G128 && quant_int_type(4, 64) == IFD_TYPE_I4_G64);
    CHECK(quant_int_type(4, 16) == GGML_TYPE_COUNT_ && quant_int_type(3, 128) == GGML_TYPE_COUNT_);
    const int gs[] = {32, 64, 128};
    const float mags[] = {1e-3f, 0.05f, 1.0f, 30.0f};
    unsigned s = 5;
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gi = 0; gi < 3; gi++)
            for (int mi = 0; mi < 4; mi++) {
                const int g = gs[gi];
                const ggml_type t = quant_int_type(bits, g);
                for (int i = 0; i < N; i++) x[i] = frand(&s) * mags[mi] + (bits == 4 ? 0.3f * mags[mi] : 0.0f);
                x[17] = 6 * mags[mi]; /* an outlier: only its group pays */
                if (bits == 8) quant_quantize_row_int8(x, row, N, g);
                else quant_quantize_row_int4(x, row, N, g);
                quant_dequantize_row_ref(t, row, y, N);
                CHECK(quant_row_bytes(t, N) == (size_t)(N / g) * (bits == 8 ? 2 + (size_t)g : 4 + (size_t)g / 2));
                int bad = 0;
                double err2 = 0, ref2 = 0;
                for (int b = 0; b < N / g; b++) {
                    float mn = x[b * g], mx = x[b * g], amax = 0;
                    for (int j = 0; j < g; j++) {
                        mn = fminf(mn, x[b * g + j]), mx = fmaxf(mx, x[b * g + j]);
                        amax = fmaxf(amax, fabsf(x[b * g + j]));
                    }
                    const float step = bits == 8 ? amax / 127 : (mx - mn) / 15;
                    for (int j = 0; j < g; j++) {
                        const float e = fabsf(x[b * g + j] - y[b * g + j]);
                        err2 += (double)e * e, ref2 += (double)x[b * g + j] * x[b * g + j];
                        if (e > step * 0.5f * 1.01f + amax * 2e-3f) bad++;
                    }
                }
                CHECKF(bad == 0, "int%d g%d mag %g: %d elements beyond half a step", bits, g,
                       (double)mags[mi], bad);
                /* never zeros: the relative error is that of a real 4 / 8-bit grid */
                const double rel = sqrt(err2 / ref2);
                CHECKF(rel > (bits == 8 ? 1e-4 : 1e-3) && rel < (bits == 8 ? 0.01 : 0.12),
                       "int%d g%d mag %g: relative error %g", bits, g, (double)mags[mi], rel);
            }
}

/* The K-quant quantizers (quant_kq.c) on random rows at several magnitudes, with an
 * outlier, an offset (the asymmetric formats' minimum) and a quiet sub-block (its scale
 * far below the super-block's). Per element the error is within
 *     KQ_C * (R_sub / nmax + R_sup / S)
 * R_sub: the sub-block's range (max(x, 0) - min(x, 0); signed formats: max |x|), nmax its
 * levels - 1 (signed: the most negative code's magnitude), R_sup the largest R_sub of the
 * super-block, S the sub-block scale's code range (Q2_K 15, Q3_K 32, Q4_K / Q5_K 63,
 * Q6_K 128). The first term is the grid step (the search may pick a grid up to one level
 * narrower than the range, clipping its end: one step, not half), the second the rounding
 * of the sub-block scale (and minimum) to S codes: half a code of d times nmax levels,
 * plus half a code of dmin; KQ_C = 1 (these rows need 0.6). Plus S * nmax * 2^-25, the
 * absolute rounding of a subnormal fp16 d (small magnitudes) times the largest code
 * product. The row's RMS error is also checked against the format's expected size
 * (never zero: no stub passes). */
#define KQ_C 1.0f
static void test_kq_roundtrip(void) {
    enum { N = 1024 };
    static float x[N], y[N], xd[N];
    static uint8_t row[N];
    const struct {
        ggml_type t;
        int sub, nmax, S;
        bool sym;
        double rel_lo, rel_hi; /* the row's RMS error / RMS of x */
    } F[] = {
        {GGML_TYPE_Q2_K, 16, 3, 15, false, 0.05, 0.5},  {GGML_TYPE_Q3_K, 16, 4, 32, true, 0.03, 0.3},
        {GGML_TYPE_Q4_K, 32, 15, 63, false, 0.01, 0.12}, {GGML_TYPE_Q5_K, 32, 31, 63, false, 0.005, 0.06},
        {GGML_TYPE_Q6_K, 16, 32, 128, true, 0.002, 0.03},
    };
    const float mags[] = {1e-3f, 0.05f, 1.0f, 30.0f};
    unsigned s = 9;
    for (size_t f = 0; f < sizeof F / sizeof F[0]; f++) {
        const quant_traits *qt = quant_traits_of(F[f].t);
        CHECK(qt && qt->quantize_row && qt->block_size == QK_K);
        if (!qt || !qt->quantize_row) continue;
        CHECK(quant_row_bytes(F[f].t, N) <= sizeof row);
        for (int mi = 0; mi < 4; mi++) {
            const float mg = mags[mi];
            for (int i = 0; i < N; i++) x[i] = frand(&s) * mg + (F[f].sym ? 0.0f : 0.3f * mg);
            x[17] = 6 * mg;                                           /* an outlier */
            for (int i = 300; i < 332; i++) x[i] = frand(&s) * mg * 0.01f; /* a quiet stretch */
            qt->quantize_row(x, row, N);
            qt->dequantize_row(row, y, N);
            /* the dot agrees with the dequantized row (the reference dot's own f32 sum) */
            float dot = 0.0f, dsum = 0.0f;
            for (int i = 0; i < N; i++) xd[i] = frand(&s);
            for (int i = 0; i < N; i++) dot += y[i] * xd[i], dsum += fabsf(y[i] * xd[i]);
            const float rdot = quant_dot_ref(F[f].t, row, xd, N);
            CHECKF(fabsf(rdot - dot) <= 1e-5f * dsum, "%s dot %g vs dequantized %g", qt->name, (double)rdot,
                   (double)dot);
            int bad = 0;
            double err2 = 0, ref2 = 0;
            for (int b = 0; b < N / QK_K; b++) {
                float rsub[16], rsup = 0;
                const int nsub = QK_K / F[f].sub;
                for (int j = 0; j < nsub; j++) {
                    float mn = 0, mx = 0, am = 0;
                    for (int l = 0; l < F[f].sub; l++) {
                        const float v = x[b * QK_K + j * F[f].sub + l];
                        mn = fminf(mn, v), mx = fmaxf(mx, v), am = fmaxf(am, fabsf(v));
                    }
                    rsub[j] = F[f].sym ? am : mx - mn;
                    rsup = fmaxf(rsup, rsub[j]);
                }
                for (int i = b * QK_K; i < (b + 1) * QK_K; i++) {
                    const float e = fabsf(x[i] - y[i]);
                    const float bound = KQ_C * (rsub[(i - b * QK_K) / F[f].sub] / F[f].nmax + rsup / F[f].S) +
                                        (float)(F[f].S * F[f].nmax) * 0x1p-25f;
                    err2 += (double)e * e, ref2 += (double)x[i] * x[i];
                    if (!(e <= bound)) {
                        if (!bad)
                            fprintf(stderr, "  %s mag %g elem %d: %g vs %g (bound %g)\n", qt->name, (double)mg, i,
                                    (double)x[i], (double)y[i], (double)bound);
                        bad++;
                    }
                }
            }
            CHECKF(bad == 0, "%s mag %g: %d elements beyond the bound", qt->name, (double)mg, bad);
            const double rel = sqrt(err2 / ref2);
            CHECKF(rel > F[f].rel_lo && rel < F[f].rel_hi, "%s mag %g: relative RMS error %g", qt->name, (double)mg,
                   rel);
        }
        /* all zeros: zeros; a constant: reproduced within the fp16 rounding of d (or
         * dmin): relative 2^-11 while d is a normal half, absolute 2^-25 once it is
         * subnormal, times the largest code product S * nmax */
        const float consts[] = {0.0f, 0.7f, -0.7f, 3e-3f, -12.5f};
        for (int c = 0; c < 5; c++) {
            for (int i = 0; i < N; i++) x[i] = consts[c];
            qt->quantize_row(x, row, N);
            qt->dequantize_row(row, y, N);
            int bad = 0;
            for (int i = 0; i < N; i++)
                bad += !(fabsf(y[i] - consts[c]) <= fabsf(consts[c]) * 2e-3f + (float)(F[f].S * F[f].nmax) * 0x1p-25f);
            CHECKF(bad == 0, "%s constant %g: %d elements off (first %g)", qt->name, (double)consts[c], bad,
                   (double)y[0]);
        }
        /* huge and tiny inputs: finite (scales saturate at the fp16 range; tiny ones
         * flush to zero), and tiny ones no larger than the input */
        const float ext[] = {1e30f, 1e-30f};
        for (int e = 0; e < 2; e++) {
            for (int i = 0; i < N; i++) x[i] = frand(&s) * ext[e];
            qt->quantize_row(x, row, N);
            qt->dequantize_row(row, y, N);
            int bad = 0;
            for (int i = 0; i < N; i++) bad += !isfinite(y[i]) || (e == 1 && !(fabsf(y[i]) <= 2e-30f));
            CHECKF(bad == 0, "%s inputs ~%g: %d elements not finite / too large", qt->name, (double)ext[e], bad);
        }
        /* NaN / infinity in the input: no crash, and the other super-blocks unharmed */
        for (int i = 0; i < N; i++) x[i] = frand(&s);
        x[5] = NAN, x[6] = INFINITY;
        qt->quantize_row(x, row, N);
        qt->dequantize_row(row, y, N);
        int bad = 0;
        for (int i = QK_K; i < N; i++) bad += !(fabsf(x[i] - y[i]) <= 0.6f);
        CHECKF(bad == 0, "%s: NaN in block 0 spoilt %d elements of the others", qt->name, bad);
    }
}

TEST_MAIN(T(test_traits), T(test_int_roundtrip), T(test_fp16), T(test_q8_0_q4_0_roundtrip), T(test_k_quants), T(test_q5_0),
          T(test_dot_equals_dequant), T(test_kq_roundtrip))
