// test_matmul.cu — the matmul kernels (kernels/matmul.cu) against quant.c's reference dot
// (quant_dot_ref: what op_matmul_ref computes per element) for every weight type, on
// random weights (the types with a quantizer in quant.c — floats, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL, I8_G*, I4_G* — through it on random floats; the K-quants and IQ4_XS,
// which have none, as random blocks with small random scales), at n_cols 256, 512 and
// 1024+ (4352 in test_long_rows), n_rows not a multiple of any row group, n_cols not a
// multiple of 256 where the type allows. Also: batch invariance (a row's
// bits are the same computed alone, in any batch size, with a misaligned x, and in a
// grouped launch) and the launchers' refusal of bad arguments.
//
// Tolerance: |got - ref| <= 1e-5 * sum_i |w_i * x_i| + 1e-30 per element — both sides
// accumulate in fp32, in different orders (the kernel: per-lane units, per-unit scale
// factored out, a warp butterfly; the reference: element by element).
#include "cuda_test.h"

#include "matmul.h" /* kernels/ */
extern "C" {
#include "model/quant.h"
}

enum {
    TY_F32 = 0, TY_F16 = 1, TY_Q4_0 = 2, TY_Q4_1 = 3, TY_Q5_0 = 6, TY_Q5_1 = 7, TY_Q8_0 = 8, TY_Q2_K = 10,
    TY_Q3_K = 11, TY_Q4_K = 12, TY_Q5_K = 13, TY_Q6_K = 14, TY_IQ2_XXS = 16, TY_IQ4_NL = 20, TY_IQ4_XS = 23,
    TY_BF16 = 30, TY_I8_G64 = 40, TY_I8_G128 = 41, TY_I4_G64 = 42, TY_I4_G128 = 43
};

static const int ALL_TYPES[] = {TY_F32,    TY_F16,    TY_BF16,   TY_Q8_0,   TY_Q4_0,    TY_Q5_0,   TY_Q4_K,
                                TY_Q6_K,   TY_I4_G128, TY_I4_G64, TY_I8_G128, TY_I8_G64, TY_Q4_1,   TY_Q5_K,
                                TY_IQ4_NL, TY_IQ4_XS, TY_Q3_K,   TY_Q2_K,    TY_Q5_1};
static bool is_super_type(int t) {
    return t == TY_Q2_K || t == TY_Q3_K || t == TY_Q4_K || t == TY_Q5_K || t == TY_Q6_K || t == TY_IQ4_XS;
}

static uint8_t rnd_byte(uint64_t *s) { return (uint8_t)(ct_next(s) >> 56); }
static float rnd_unit(uint64_t *s) { return (float)((ct_next(s) >> 40) * (1.0 / 16777216.0)); }

// GGUF bytes of a random n_rows x n_cols matrix of type t (malloc'd; *row_bytes set).
static uint8_t *make_weights(int t, int64_t n_rows, int64_t n_cols, uint64_t seed, size_t *row_bytes) {
    const quant_traits *qt = quant_traits_of((ggml_type)t);
    const size_t rb = quant_row_bytes((ggml_type)t, n_cols);
    uint8_t *w = (uint8_t *)malloc(rb * (size_t)n_rows);
    uint64_t s = seed;
    if (qt->quantize_row) {
        float *f = (float *)malloc(sizeof(float) * (size_t)n_cols);
        for (int64_t r = 0; r < n_rows; r++) {
            ct_fill(f, (size_t)n_cols, seed * 1000 + (uint64_t)r, -1.0f, 1.0f);
            qt->quantize_row(f, w + (size_t)r * rb, n_cols);
        }
        free(f);
    } else {
        for (size_t i = 0; i < rb * (size_t)n_rows; i++) w[i] = rnd_byte(&s);
        // sane scales: small positive d (and dmin), so the values stay finite and mixed
        const size_t nb = rb * (size_t)n_rows / qt->block_bytes;
        for (size_t b = 0; b < nb; b++) {
            uint8_t *blk = w + b * qt->block_bytes;
            const ifd_fp16 d = ifd_f32_to_fp16(0.002f + 0.02f * rnd_unit(&s));
            if (t == TY_Q5_0) {
                memcpy(blk, &d, 2);
            } else if (t == TY_Q4_K) {
                const ifd_fp16 dm = ifd_f32_to_fp16(0.001f + 0.01f * rnd_unit(&s));
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dm, 2);
            } else if (t == TY_Q6_K) {
                memcpy(blk + 208, &d, 2);
            } else if (t == TY_Q5_K || t == TY_Q2_K) {
                const ifd_fp16 dm = ifd_f32_to_fp16(0.001f + 0.01f * rnd_unit(&s));
                const size_t at = t == TY_Q5_K ? 0 : 80;
                memcpy(blk + at, &d, 2);
                memcpy(blk + at + 2, &dm, 2);
            } else if (t == TY_Q3_K) {
                memcpy(blk + 108, &d, 2);
            } else if (t == TY_IQ4_XS) {
                memcpy(blk, &d, 2);
            }
        }
    }
    *row_bytes = rb;
    return w;
}

// The kernel's arithmetic written out on the host (matmul.cu's header: lane l takes the
// units l, l+32, ...; fmaf per element; the per-unit scale; the xor butterfly), from the
// GGUF bytes through quant.c's element order. fmaf is correctly rounded on both sides,
// so the device must give these bits exactly: under emulation this pins the documented
// order, on a GPU it shows that nvcc contracted or reordered nothing.
static bool is_float_type(int t) { return t == TY_F32 || t == TY_F16 || t == TY_BF16; }
// The integer values, scales and min coefficients of one quantized unit (32 elements):
// w_e = s0 * q_e + m0 (elements 0..15: s0, m0; with halves, 16..31: s1, m1; without,
// s0 and m0 for all 32). m0 = m1 = 0 for the types without a minimum.
struct unit_vals {
    int q[32];
    float s0, s1, m0, m1;
};
static bool has_halves(int t) { return t == TY_Q6_K || t == TY_Q3_K || t == TY_Q2_K; }
static bool has_min(int t) {
    return t == TY_Q4_K || t == TY_Q5_K || t == TY_Q4_1 || t == TY_Q5_1 || t == TY_I4_G64 || t == TY_I4_G128 ||
           t == TY_Q2_K;
}
static float f16_at(const uint8_t *p) {
    ifd_fp16 h;
    memcpy(&h, p, 2);
    return ifd_fp16_to_f32(h);
}
static void unit_ints(int t, const uint8_t *row, int64_t u, unit_vals *uv) {
    int *q = uv->q;
    uv->s1 = uv->m0 = uv->m1 = 0.0f;
    if (t == TY_Q8_0 || t == TY_Q4_0 || t == TY_Q5_0 || t == TY_Q4_1 || t == TY_Q5_1 || t == TY_IQ4_NL) {
        const int bb = (int)quant_traits_of((ggml_type)t)->block_bytes;
        const uint8_t *b = row + u * bb;
        uv->s0 = f16_at(b);
        const bool dm = t == TY_Q4_1 || t == TY_Q5_1;
        if (dm) uv->m0 = f16_at(b + 2);
        uint32_t qh = 0;
        if (t == TY_Q5_0) memcpy(&qh, b + 2, 4);
        if (t == TY_Q5_1) memcpy(&qh, b + 4, 4);
        const uint8_t *qs = b + (t == TY_Q5_0 ? 6 : t == TY_Q5_1 ? 8 : dm ? 4 : 2);
        for (int e = 0; e < 32; e++) {
            if (t == TY_Q8_0) {
                q[e] = (int8_t)qs[e];
            } else {
                const int nib = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
                const int fifth = (int)((qh >> e) & 1) << 4;
                q[e] = t == TY_Q4_0 ? nib - 8 : t == TY_Q5_0 ? (nib | fifth) - 16 : t == TY_Q4_1 ? nib
                     : t == TY_Q5_1 ? (nib | fifth) : quant_iq4nl_values[nib];
            }
        }
        return;
    }
    if (t == TY_I8_G64 || t == TY_I8_G128 || t == TY_I4_G64 || t == TY_I4_G128) {
        const int g = t == TY_I8_G64 || t == TY_I4_G64 ? 64 : 128;
        const bool i8 = t == TY_I8_G64 || t == TY_I8_G128;
        const int bb = (int)quant_traits_of((ggml_type)t)->block_bytes;
        const uint8_t *b = row + (u / (g / 32)) * bb;
        const int sub = (int)(u % (g / 32));
        uv->s0 = f16_at(b);
        if (!i8) uv->m0 = f16_at(b + 2);
        for (int e = 0; e < 32; e++) {
            if (i8) {
                q[e] = (int8_t)b[2 + 32 * sub + e];
            } else {
                const uint8_t *qs = b + 4 + 16 * sub;
                q[e] = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
            }
        }
        return;
    }
    int all[256]; // the super-block's integers in quant.c's deq loop order
    const int j = (int)(u % 8);
    if (t == TY_Q4_K || t == TY_Q5_K) {
        const int bb = t == TY_Q4_K ? 144 : 176;
        const uint8_t *b = row + (u / 8) * bb, *qs = b + (t == TY_Q4_K ? 16 : 48), *qh = b + 16;
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                all[64 * k + l] = qs[32 * k + l] & 15;
                all[64 * k + 32 + l] = qs[32 * k + l] >> 4;
                if (t == TY_Q5_K) {
                    all[64 * k + l] += ((qh[l] >> (2 * k)) & 1) << 4;
                    all[64 * k + 32 + l] += ((qh[l] >> (2 * k + 1)) & 1) << 4;
                }
            }
        uint8_t sc, m;
        quant_q4_K_scale_min(j, b + 4, &sc, &m);
        uv->s0 = f16_at(b) * (float)sc;
        uv->m0 = -(f16_at(b + 2) * (float)m);
    } else if (t == TY_Q6_K) {
        const uint8_t *b = row + (u / 8) * 210;
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < 2; n++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *L = ql + 64 * n, *H = qh + 32 * n;
                all[128 * n + l] = (int)((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32;
                all[128 * n + l + 32] = (int)((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32;
                all[128 * n + l + 64] = (int)((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32;
                all[128 * n + l + 96] = (int)((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32;
            }
        uv->s0 = f16_at(b + 208) * (float)sc[2 * j];
        uv->s1 = f16_at(b + 208) * (float)sc[2 * j + 1];
    } else if (t == TY_Q2_K || t == TY_Q3_K) {
        // quant.c's loops: per 128 elements, four shifts, two 16-element halves of 32 bytes
        const int bb = t == TY_Q2_K ? 84 : 110;
        const uint8_t *b = row + (u / 8) * bb, *qs = b + (t == TY_Q2_K ? 16 : 32), *hm = b;
        int i = 0;
        for (int n = 0; n < 2; n++)
            for (int shift = 0; shift < 8; shift += 2)
                for (int l = 0; l < 32; l++, i++) {
                    all[i] = (qs[32 * n + l] >> shift) & 3;
                    if (t == TY_Q3_K) all[i] -= (hm[l] >> (4 * n + shift / 2)) & 1 ? 0 : 4;
                }
        if (t == TY_Q2_K) {
            const float d = f16_at(b + 80), dmin = f16_at(b + 82);
            uv->s0 = d * (float)(b[2 * j] & 15);
            uv->m0 = -(dmin * (float)(b[2 * j] >> 4));
            uv->s1 = d * (float)(b[2 * j + 1] & 15);
            uv->m1 = -(dmin * (float)(b[2 * j + 1] >> 4));
        } else {
            const uint8_t *sc = b + 96;
            const float d = f16_at(b + 108);
            for (int h = 0; h < 2; h++) {
                const int k = 2 * j + h;
                const int v = (((sc[k % 8] >> (4 * (k / 8))) & 15) | (((sc[8 + k % 4] >> (2 * (k / 4))) & 3) << 4)) - 32;
                (h ? uv->s1 : uv->s0) = d * (float)v;
            }
        }
    } else { // IQ4_XS
        const uint8_t *b = row + (u / 8) * 136;
        uint16_t sh;
        memcpy(&sh, b + 2, 2);
        const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
        uv->s0 = f16_at(b) * (float)(ls - 32);
        const uint8_t *qs = b + 8 + 16 * j;
        for (int e = 0; e < 32; e++) q[e] = quant_iq4nl_values[e < 16 ? qs[e] & 15 : qs[e - 16] >> 4];
        return;
    }
    for (int e = 0; e < 32; e++) q[e] = all[32 * j + e];
}
static float model_dot(int t, const uint8_t *row, const float *x, int64_t n_cols) {
    float v[32];
    const int64_t n_units = is_float_type(t) ? (n_cols + 7) / 8 : n_cols / 32;
    float *deq = (float *)malloc(sizeof(float) * (size_t)n_cols);
    if (is_float_type(t)) quant_dequantize_row_ref((ggml_type)t, row, deq, n_cols); // exact
    const bool halves = has_halves(t), mins = has_min(t);
    for (int l = 0; l < 32; l++) {
        float acc = 0.0f;
        for (int64_t u = l; u < n_units; u += 32) {
            if (is_float_type(t)) {
                for (int64_t c = 8 * u; c < 8 * u + 8; c++)
                    acc = fmaf(c < n_cols ? deq[c] : 0.0f, c < n_cols ? x[c] : 0.0f, acc);
                continue;
            }
            unit_vals uv;
            float p0 = 0.0f, p1 = 0.0f, sx = 0.0f;
            unit_ints(t, row, u, &uv);
            const float *xu = x + 32 * u;
            for (int e = 0; e < 32; e++) {
                if (halves && e >= 16)
                    p1 = fmaf((float)uv.q[e], xu[e], p1);
                else
                    p0 = fmaf((float)uv.q[e], xu[e], p0);
                sx += xu[e];
                if (halves && e == 15) { // the first half folded (and its min, its sum of x restarting)
                    acc = fmaf(uv.s0, p0, acc);
                    if (mins) acc = fmaf(uv.m0, sx, acc);
                    sx = 0.0f;
                }
            }
            if (!halves) {
                acc = fmaf(uv.s0, p0, acc);
                if (mins) acc = fmaf(uv.m0, sx, acc);
            } else {
                acc = fmaf(uv.s1, p1, acc);
                if (mins) acc = fmaf(uv.m1, sx, acc);
            }
        }
        v[l] = acc;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float nv[32];
        for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ o];
        memcpy(v, nv, sizeof v);
    }
    free(deq);
    return v[0];
}

struct dev_mat {
    k_wmat w;
    void *d;
};
static dev_mat upload_mat(int t, int64_t n_rows, int64_t n_cols, const uint8_t *gguf) {
    dev_mat m;
    const size_t pb = k_matmul_prepared_bytes(t, n_rows, n_cols);
    CHECK(pb > 0);
    void *h = malloc(pb);
    CHECK(k_matmul_prepare(h, gguf, t, n_rows, n_cols) == DEV_OK);
    m.d = ct_upload(h, pb);
    free(h);
    m.w.data = m.d;
    m.w.type = t;
    m.w.n_rows = n_rows;
    m.w.n_cols = n_cols;
    return m;
}

// out [n_tok][n_rows] from the device.
static void run_mm(const dev_mat &m, const float *dx, int32_t n_tok, float *host_out) {
    const size_t bytes = sizeof(float) * (size_t)n_tok * (size_t)m.w.n_rows;
    float *dout = (float *)ct_alloc(bytes);
    CHECK(k_matmul(NULL, dout, &m.w, dx, n_tok, NULL, 0) == DEV_OK);
    CHECK(ct_sync() == DEV_OK);
    ct_download(host_out, dout, bytes);
    ct_free(dout);
}

// One type and shape: the reference over N token rows, batch invariance (every n_tokens
// of ns below N: rows k0 .. k0+n as a batch of their own) and a misaligned x.
static void check_type_shape(int t, int64_t n_rows, int64_t n_cols, uint64_t seed, int32_t N = 130) {
    size_t rb;
    uint8_t *gguf = make_weights(t, n_rows, n_cols, seed, &rb);
    float *x = (float *)malloc(sizeof(float) * (size_t)N * (size_t)n_cols);
    ct_fill(x, (size_t)N * (size_t)n_cols, seed + 77, -1.0f, 1.0f);
    dev_mat m = upload_mat(t, n_rows, n_cols, gguf);
    float *dx = (float *)ct_upload(x, sizeof(float) * (size_t)N * (size_t)n_cols);
    const size_t on = (size_t)N * (size_t)n_rows;
    float *big = (float *)malloc(sizeof(float) * on), *got = (float *)malloc(sizeof(float) * on);
    run_mm(m, dx, N, big);

    // against the reference
    float *deq = (float *)malloc(sizeof(float) * (size_t)n_cols);
    double worst = 0;
    int bad = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *row = gguf + (size_t)r * rb;
        quant_dequantize_row_ref((ggml_type)t, row, deq, n_cols);
        for (int32_t k = 0; k < N; k++) {
            const float *xk = x + (size_t)k * (size_t)n_cols;
            const float want = quant_dot_ref((ggml_type)t, row, xk, n_cols);
            double mag = 0;
            for (int64_t i = 0; i < n_cols; i++) mag += fabs((double)deq[i] * xk[i]);
            const double err = fabs((double)big[(size_t)k * (size_t)n_rows + (size_t)r] - want);
            const double q = err / (1e-5 * mag + 1e-30);
            if (q > worst) worst = q;
            if (q > 1.0 && bad++ < 3)
                fprintf(stderr, "  %s %lldx%lld: row %lld tok %d: got %.9g want %.9g (sum|wx| %.3g)\n",
                        quant_traits_of((ggml_type)t)->name, (long long)n_rows, (long long)n_cols, (long long)r,
                        k, (double)big[(size_t)k * (size_t)n_rows + (size_t)r], (double)want, mag);
        }
    }
    CHECKF(bad == 0, "%s %lldx%lld: %d elements off (worst %.3g of the tolerance)", quant_traits_of((ggml_type)t)->name,
           (long long)n_rows, (long long)n_cols, bad, worst);

    // the documented arithmetic, bit for bit (first and last token rows)
    int off = 0;
    for (int64_t r = 0; r < n_rows; r++)
        for (int32_t k : {0, N - 1}) {
            const float want = model_dot(t, gguf + (size_t)r * rb, x + (size_t)k * (size_t)n_cols, n_cols);
            const float g = big[(size_t)k * (size_t)n_rows + (size_t)r];
            if (memcmp(&g, &want, sizeof g) != 0 && off++ < 3)
                fprintf(stderr, "  %s: row %lld tok %d: %.9g, the documented order gives %.9g\n",
                        quant_traits_of((ggml_type)t)->name, (long long)r, k, (double)g, (double)want);
        }
    CHECKF(off == 0, "%s %lldx%lld: %d elements not in the documented order's bits", quant_traits_of((ggml_type)t)->name,
           (long long)n_rows, (long long)n_cols, off);

    // batch invariance: rows k0 .. k0+n computed as a batch of n give the same bits
    // 1: the decode shape; 2, 3..4, 5..8: the skinny ones; more: 8-token tiles
    static const int32_t ns[] = {1, 2, 3, 4, 5, 8, 9, 37, 130};
    for (int32_t n : ns) {
        if (n > N) continue;
        const int32_t k0 = n == N ? 0 : (int32_t)((seed * 31 + (uint64_t)n) % (uint64_t)(N - n));
        run_mm(m, dx + (size_t)k0 * (size_t)n_cols, n, got);
        CHECKF(memcmp(got, big + (size_t)k0 * (size_t)n_rows, sizeof(float) * (size_t)n * (size_t)n_rows) == 0,
               "%s %lldx%lld: n_tokens %d (rows from %d) differ from the 130-row batch",
               quant_traits_of((ggml_type)t)->name, (long long)n_rows, (long long)n_cols, n, k0);
    }
    // an x that is not 16-byte aligned takes the scalar loads: same bits
    {
        const int32_t n = N < 5 ? N : 5;
        float *dx1 = (float *)ct_alloc(sizeof(float) * ((size_t)n * (size_t)n_cols + 1));
        CHECK(dev_h2d(dx1 + 1, x, sizeof(float) * (size_t)n * (size_t)n_cols, NULL) == DEV_OK);
        run_mm(m, dx1 + 1, n, got);
        CHECKF(memcmp(got, big, sizeof(float) * (size_t)n * (size_t)n_rows) == 0, "%s: misaligned x differs",
               quant_traits_of((ggml_type)t)->name);
        ct_free(dx1);
    }
    free(deq), free(big), free(got), free(x), free(gguf);
    ct_free(dx), ct_free(m.d);
}

static void test_float_types(void) {
    for (int t : {TY_F32, TY_F16, TY_BF16}) {
        check_type_shape(t, 37, 301, 11 + (uint64_t)t); // n_cols odd: scalar x, a partial unit
        check_type_shape(t, 70, 1028, 12 + (uint64_t)t); // > 32 units per row, a half unit
    }
}

static void test_block_types(void) {
    for (int t : {TY_Q8_0, TY_Q4_0, TY_Q5_0, TY_Q4_1, TY_IQ4_NL, TY_Q5_1}) {
        check_type_shape(t, 37, 320, 21 + (uint64_t)t);  // 10 blocks: lanes without a unit
        check_type_shape(t, 70, 1088, 22 + (uint64_t)t); // 34 blocks: lanes with two
    }
    for (int t : {TY_Q4_1, TY_IQ4_NL, TY_Q5_1}) check_type_shape(t, 45, 512, 23 + (uint64_t)t);
}

// inferd's group types (--quantize): a scale (and minimum) per 64 or 128 elements, shared
// by 2 or 4 units: groups split across lanes, one group per row, 8 to 36 of them.
static void test_int_group_types(void) {
    for (int t : {TY_I4_G128, TY_I4_G64, TY_I8_G128, TY_I8_G64}) {
        check_type_shape(t, 37, 256, 25 + (uint64_t)t);
        check_type_shape(t, 45, 512, 26 + (uint64_t)t);
        check_type_shape(t, 70, 1152, 27 + (uint64_t)t); // 36 units: lanes with two
        check_type_shape(t, 3, 128, 28 + (uint64_t)t, 9); // one group per row, 3 rows
    }
}

static void test_k_types(void) {
    for (int t : {TY_Q4_K, TY_Q6_K, TY_Q5_K, TY_IQ4_XS, TY_Q3_K, TY_Q2_K}) {
        check_type_shape(t, 37, 256, 31 + (uint64_t)t);
        check_type_shape(t, 70, 1280, 32 + (uint64_t)t); // 40 sub-blocks
    }
    for (int t : {TY_Q5_K, TY_IQ4_XS, TY_Q3_K, TY_Q2_K}) check_type_shape(t, 45, 512, 33 + (uint64_t)t);
}

// Long rows (the decode loop's unrolled body and its remainder on a GPU: n_units not a
// multiple of 4*32), fewer token rows.
static void test_long_rows(void) {
    for (int t : ALL_TYPES) check_type_shape(t, 19, t == TY_F32 || t == TY_F16 || t == TY_BF16 ? 4100 : 4352, 50 + (uint64_t)t, 9);
}

// A grouped launch (q/k/v-like: three matrices of different heights sharing x) gives
// each matrix the bits k_matmul gives it.
static void test_group(void) {
    for (int t : ALL_TYPES) {
        const int64_t n_cols = is_super_type(t) || quant_traits_of((ggml_type)t)->block_size > 32 ? 512 : 352;
        const int64_t heights[3] = {37, 16, 70};
        const int32_t n_tok[2] = {1, 11};
        dev_mat m[3];
        uint8_t *g[3];
        for (int i = 0; i < 3; i++) {
            size_t rb;
            g[i] = make_weights(t, heights[i], n_cols, 40 + (uint64_t)(t * 3 + i), &rb);
            m[i] = upload_mat(t, heights[i], n_cols, g[i]);
        }
        for (int32_t n : n_tok) {
            float *x = (float *)malloc(sizeof(float) * (size_t)n * (size_t)n_cols);
            ct_fill(x, (size_t)n * (size_t)n_cols, 99 + (uint64_t)n, -2.0f, 2.0f);
            float *dx = (float *)ct_upload(x, sizeof(float) * (size_t)n * (size_t)n_cols);
            float *douts[3];
            const k_wmat *ws[3];
            for (int i = 0; i < 3; i++) {
                douts[i] = (float *)ct_alloc(sizeof(float) * (size_t)n * (size_t)heights[i]);
                ws[i] = &m[i].w;
            }
            CHECK(k_matmul_group(NULL, 3, douts, ws, dx, n, NULL, 0) == DEV_OK);
            CHECK(ct_sync() == DEV_OK);
            for (int i = 0; i < 3; i++) {
                const size_t bytes = sizeof(float) * (size_t)n * (size_t)heights[i];
                float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes);
                ct_download(a, douts[i], bytes);
                run_mm(m[i], dx, n, b);
                CHECKF(memcmp(a, b, bytes) == 0, "%s: grouped matrix %d (n_tokens %d) differs from k_matmul",
                       quant_traits_of((ggml_type)t)->name, i, n);
                free(a), free(b);
                ct_free(douts[i]);
            }
            ct_free(dx);
            free(x);
        }
        for (int i = 0; i < 3; i++) ct_free(m[i].d), free(g[i]);
    }
}

// Bad arguments are DEV_ERR with nothing launched, never a crash.
static void test_bad_args(void) {
    CHECK(k_matmul_prepared_bytes(TY_IQ2_XXS, 16, 256) == 0); // a type without kernels
    CHECK(k_matmul_prepared_bytes(TY_I8_G128, 16, 64) == 0); // not a whole group
    CHECK(k_matmul_prepared_bytes(TY_I4_G64, 16, 96) == 0);
    CHECK(k_matmul_prepared_bytes(TY_Q2_K, 16, 128) == 0);
    CHECK(k_matmul_prepared_bytes(TY_Q8_0, 16, 100) == 0); // not a multiple of 32
    CHECK(k_matmul_prepared_bytes(TY_Q4_K, 16, 320) == 0); // not a multiple of 256
    CHECK(k_matmul_prepared_bytes(TY_F32, 0, 16) == 0);
    CHECK(k_matmul_prepared_bytes(TY_F32, 16, -1) == 0);
    CHECK(k_matmul_prepared_bytes(999, 16, 256) == 0);
    CHECK(k_matmul_scratch_bytes(512, 14336) == 0);
    uint8_t buf[64] = {0};
    CHECK(k_matmul_prepare(buf, buf, TY_IQ2_XXS, 1, 256) == DEV_ERR);
    CHECK(k_matmul_prepare(NULL, buf, TY_F32, 1, 8) == DEV_ERR);
    CHECK(k_matmul_prepare(buf, NULL, TY_F32, 1, 8) == DEV_ERR);

    size_t rb;
    uint8_t *g = make_weights(TY_Q8_0, 8, 64, 5, &rb);
    dev_mat m = upload_mat(TY_Q8_0, 8, 64, g);
    float x[64];
    ct_fill(x, 64, 6, -1, 1);
    float *dx = (float *)ct_upload(x, sizeof x), *dout = (float *)ct_alloc(8 * sizeof(float));
    CHECK(k_matmul(NULL, dout, &m.w, dx, 0, NULL, 0) == DEV_OK); // nothing to do
    CHECK(k_matmul(NULL, dout, &m.w, dx, -1, NULL, 0) == DEV_ERR);
    CHECK(k_matmul(NULL, dout, &m.w, NULL, 1, NULL, 0) == DEV_ERR);
    CHECK(k_matmul(NULL, NULL, &m.w, dx, 1, NULL, 0) == DEV_ERR);
    CHECK(k_matmul(NULL, dout, NULL, dx, 1, NULL, 0) == DEV_ERR);
    k_wmat bad = m.w;
    bad.type = TY_IQ2_XXS;
    CHECK(k_matmul(NULL, dout, &bad, dx, 1, NULL, 0) == DEV_ERR);
    bad = m.w;
    bad.n_cols = 48;
    CHECK(k_matmul(NULL, dout, &bad, dx, 1, NULL, 0) == DEV_ERR);
    bad = m.w;
    bad.data = (const uint8_t *)m.w.data + 4; // not 16-byte aligned
    CHECK(k_matmul(NULL, dout, &bad, dx, 1, NULL, 0) == DEV_ERR);
    bad = m.w;
    bad.n_rows = (int64_t)1 << 40;
    CHECK(k_matmul(NULL, dout, &bad, dx, 1, NULL, 0) == DEV_ERR);
    // a group must share type and n_cols, and hold 1..K_MATMUL_MAX_GROUP matrices
    k_wmat other = m.w;
    other.n_cols = 32;
    const k_wmat *ws[2] = {&m.w, &other};
    float *outs[2] = {dout, dout};
    CHECK(k_matmul_group(NULL, 2, outs, ws, dx, 1, NULL, 0) == DEV_ERR);
    CHECK(k_matmul_group(NULL, 0, outs, ws, dx, 1, NULL, 0) == DEV_ERR);
    CHECK(k_matmul_group(NULL, K_MATMUL_MAX_GROUP + 1, outs, ws, dx, 1, NULL, 0) == DEV_ERR);
    CHECK(dev_check_launch() == DEV_OK); // none of these launched anything
    ct_free(dx), ct_free(dout), ct_free(m.d);
    free(g);
}

#if !CT_EMULATED
#include <time.h>
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// On a GPU only: the llama3-8b FFN shapes (14336 x 4096 and 4096 x 14336) of every type,
// checked on sampled rows against the reference (same tolerance as above), and timed:
// batch-1 decode as GB/s of the prepared weights (the figure to hold against the
// device-to-device copy bandwidth measured here first), 8 and 128 token rows as TFLOP/s.
static void test_gpu_timing(void) {
    const size_t cb = (size_t)1 << 30;
    void *ca = ct_alloc(cb), *cbuf = ct_alloc(cb);
    CHECK(dev_d2d(cbuf, ca, cb, NULL) == DEV_OK);
    CHECK(ct_sync() == DEV_OK);
    double t0 = now_s();
    for (int i = 0; i < 10; i++) CHECK(dev_d2d(cbuf, ca, cb, NULL) == DEV_OK);
    CHECK(ct_sync() == DEV_OK);
    const double copy_gbs = 10.0 * 2.0 * (double)cb / (now_s() - t0) / 1e9;
    printf("  device copy: %.0f GB/s (read + write)\n", copy_gbs);
    ct_free(ca), ct_free(cbuf);
    const int64_t shapes[2][2] = {{14336, 4096}, {4096, 14336}};
    for (int t : ALL_TYPES)
        for (int si = 0; si < 2; si++) {
            const int64_t n_rows = shapes[si][0], n_cols = shapes[si][1];
            size_t rb;
            uint8_t *g = make_weights(t, n_rows, n_cols, 70 + (uint64_t)t, &rb);
            dev_mat m = upload_mat(t, n_rows, n_cols, g);
            const size_t pb = k_matmul_prepared_bytes(t, n_rows, n_cols);
            const int32_t NT = 128;
            float *x = (float *)malloc(sizeof(float) * (size_t)NT * (size_t)n_cols);
            ct_fill(x, (size_t)NT * (size_t)n_cols, 71, -1.0f, 1.0f);
            float *dx = (float *)ct_upload(x, sizeof(float) * (size_t)NT * (size_t)n_cols);
            float *dout = (float *)ct_alloc(sizeof(float) * (size_t)NT * (size_t)n_rows);
            float *out = (float *)malloc(sizeof(float) * (size_t)NT * (size_t)n_rows);
            double rate[3];
            const int32_t nts[3] = {1, 8, NT};
            for (int k = 0; k < 3; k++) {
                const int32_t nt = nts[k], reps = nt == 1 ? 50 : 10;
                CHECK(k_matmul(NULL, dout, &m.w, dx, nt, NULL, 0) == DEV_OK);
                CHECK(ct_sync() == DEV_OK);
                t0 = now_s();
                for (int i = 0; i < reps; i++) CHECK(k_matmul(NULL, dout, &m.w, dx, nt, NULL, 0) == DEV_OK);
                CHECK(ct_sync() == DEV_OK);
                const double dt = (now_s() - t0) / reps;
                rate[k] = nt == 1 ? (double)pb / dt / 1e9 : 2.0 * (double)nt * (double)n_rows * (double)n_cols / dt / 1e12;
                if (nt == NT) { // the last run's output, sampled rows
                    ct_download(out, dout, sizeof(float) * (size_t)NT * (size_t)n_rows);
                    float *deq = (float *)malloc(sizeof(float) * (size_t)n_cols);
                    int bad = 0;
                    for (int64_t r = 0; r < n_rows; r += 997) {
                        const uint8_t *row = g + (size_t)r * rb;
                        quant_dequantize_row_ref((ggml_type)t, row, deq, n_cols);
                        for (int32_t tk = 0; tk < NT; tk += 37) {
                            const float *xk = x + (size_t)tk * (size_t)n_cols;
                            double mag = 0;
                            for (int64_t i = 0; i < n_cols; i++) mag += fabs((double)deq[i] * xk[i]);
                            const double want = quant_dot_ref((ggml_type)t, row, xk, n_cols);
                            bad += fabs((double)out[(size_t)tk * (size_t)n_rows + (size_t)r] - want) > 1e-5 * mag + 1e-30;
                        }
                    }
                    CHECKF(bad == 0, "%s %lldx%lld: %d sampled elements off", quant_traits_of((ggml_type)t)->name,
                           (long long)n_rows, (long long)n_cols, bad);
                    free(deq);
                }
            }
            printf("  %-5s %5lld x %5lld: decode %6.0f GB/s (%.0f%% of copy), 8 rows %.2f TFLOP/s, %d rows %.2f TFLOP/s\n",
                   quant_traits_of((ggml_type)t)->name, (long long)n_rows, (long long)n_cols, rate[0],
                   100.0 * rate[0] / copy_gbs, rate[1], NT, rate[2]);
            free(x), free(out), free(g);
            ct_free(dx), ct_free(dout), ct_free(m.d);
        }
}
#endif

TEST_MAIN(T(test_float_types), T(test_block_types), T(test_int_group_types), T(test_k_types), T(test_long_rows), T(test_group), T(test_bad_args)
#if !CT_EMULATED
              ,
          T(test_gpu_timing)
#endif
)
