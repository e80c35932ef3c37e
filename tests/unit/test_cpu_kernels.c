/* test_cpu_kernels.c — every fast CPU op against the plain C reference (ops_ref.c,
 * quant.c) on random inputs (never zeros), for every weight type, at every dispatch
 * level this CPU has (scalar, avx2, avx512: forced through ops_ctx_create's level),
 * with odd shapes (rows not a multiple of any tile, K tails, T = 1, 3, 17, 64).
 * Plus batch invariance: a token row computed alone, inside a batch of 7 and inside
 * a batch of 64 is bit-identical (matmul, multi-matmul, attention, and the whole CPU
 * backend on the shakespeare test models), and a forward asking for every token's
 * logits gives each row bit for bit as forwards asking for that row alone.
 *
 * Tolerances (stated at each check):
 *  - scalar level: the matmul is the reference dot per element: exactly equal.
 *  - F32/F16/BF16 at SIMD levels: only
 *    the summation order differs (16 or 8 lanes, then a tree): |err| <= 1e-5 * S where
 *    S = sum_k |w_k x_k| (worst-case float reassociation error is ~K * 2^-24 * S;
 *    1e-5 leaves room for K up to ~170 blocks of lanes and still catches any wrong
 *    element, whose error would be ~|w_k x_k| >> 1e-5 * S).
 *  - Q8_0/Q4_0/Q4_K/Q6_K at SIMD levels (and Q4_1/Q5_0/Q5_1/IQ4_NL, Q5_K/Q3_K/Q2_K/
 *    IQ4_XS, the INT8 / INT4 groups where is_int8_act says): activations are quantized to
 *    int8 per block of 32 (step amax/127, round to nearest), so |err| <= sum_blocks (sum_k |w_k|) *
 *    amax_b / 254 (half a step per element) + 1e-5 * S. That is ~1e-2 of S on random
 *    data, the usual cost of the q8 activation path. Q4_K and Q6_K at AVX2 share one
 *    activation scale per 256-element super-block: amax_b is then the super-block's. */
#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "backend/kv_dtype.h"
#include "model/model.h"
#include "model/quant.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "util/common.h"
#include "util/cpu_features.h"

static uint32_t rng = 2024;
static float frand(void) { /* uniform in [-1, 1), never exactly 0 */
    rng = rng * 1664525u + 1013904223u;
    float f = ((float)(rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
    return f == 0.0f ? 0.5f : f;
}

/* Every weight type, at every level, through every tiling. */
static const ggml_type TYPES[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,   GGML_TYPE_Q8_0,
                                  GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,   GGML_TYPE_Q5_0,
                                  GGML_TYPE_Q4_1, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K,
                                  GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS,
                                  IFD_TYPE_I8_G64, IFD_TYPE_I8_G128, IFD_TYPE_I4_G64,
                                  IFD_TYPE_I4_G128};

/* inferd's INT8 / INT4 group types (64- or 128-element groups of 32-element sub-blocks) */
static bool is_grp(ggml_type t) {
    return t == IFD_TYPE_I8_G64 || t == IFD_TYPE_I8_G128 || t == IFD_TYPE_I4_G64 ||
           t == IFD_TYPE_I4_G128;
}

static const char *tname(ggml_type t) {
    return ggml_type_get((uint32_t)t)->name;
}

/* Random rows x cols matrix of type t (data malloc'ed; free with free((void*)w.data)). */
static wmat make_w(ggml_type t, int64_t rows, int64_t cols) {
    wmat w = {.type = t, .n_rows = rows, .n_cols = cols, .row_bytes = quant_row_bytes(t, cols)};
    uint8_t *d = malloc(w.row_bytes * (size_t)rows);
    float *tmp = malloc((size_t)cols * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = d + (size_t)r * w.row_bytes;
        for (int64_t i = 0; i < cols; i++) tmp[i] = frand() * 0.1f;
        const quant_traits *qt = quant_traits_of(t);
        if (qt->quantize_row) {
            qt->quantize_row(tmp, row, cols);
            continue;
        }
        /* K-quants: random bytes (every bit pattern of quants/scales is valid) with
         * positive f16 block scales of a sane size */
        for (size_t i = 0; i < w.row_bytes; i++) row[i] = (uint8_t)(frand() * 127.0f + 128.0f);
        for (int64_t b = 0; b < cols / QK_K; b++) {
            if (t == GGML_TYPE_Q4_K) {
                block_q4_K *blk = (block_q4_K *)row + b;
                blk->d = ifd_f32_to_fp16(0.002f * (1.5f + frand()));
                blk->dmin = ifd_f32_to_fp16(0.002f * (1.5f + frand()));
            } else if (t == GGML_TYPE_Q6_K) {
                block_q6_K *blk = (block_q6_K *)row + b;
                blk->d = ifd_f32_to_fp16(0.0005f * (1.5f + frand()));
            } else if (t == GGML_TYPE_Q2_K) {
                block_q2_K *blk = (block_q2_K *)row + b;
                blk->d = ifd_f32_to_fp16(0.004f * (1.5f + frand()));
                blk->dmin = ifd_f32_to_fp16(0.002f * (1.5f + frand()));
            } else if (t == GGML_TYPE_Q3_K) {
                block_q3_K *blk = (block_q3_K *)row + b;
                blk->d = ifd_f32_to_fp16(0.001f * (1.5f + frand()));
            } else if (t == GGML_TYPE_Q5_K) {
                block_q5_K *blk = (block_q5_K *)row + b;
                blk->d = ifd_f32_to_fp16(0.001f * (1.5f + frand()));
                blk->dmin = ifd_f32_to_fp16(0.001f * (1.5f + frand()));
            } else {
                IFD_ASSERT(t == GGML_TYPE_IQ4_XS);
                block_iq4_xs *blk = (block_iq4_xs *)row + b;
                blk->d = ifd_f32_to_fp16(0.00005f * (1.5f + frand()));
            }
        }
    }
    free(tmp);
    w.data = d;
    return w;
}

static float *rand_vec(size_t n, float scale) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

/* Which types use int8 activations at a level: the block-quantized types with
 * integer kernels at both SIMD levels (stated here, not read from the traits, so a traits entry that
 * wrongly asks for int8 activations fails the tight tolerance). */
static bool is_int8_act(ggml_type t, int level) {
    if (level >= CPU_LEVEL_AVX2 && (t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q3_K ||
                                      t == GGML_TYPE_Q2_K || t == GGML_TYPE_IQ4_XS))
        return true;
    /* the INT8 / INT4 groups: both SIMD levels */
    if (level >= CPU_LEVEL_AVX2 && is_grp(t)) return true;
    /* the 32-element block family (Q4_1, Q5_0, Q5_1, IQ4_NL): both SIMD levels */
    if (level >= CPU_LEVEL_AVX2 && (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 ||
                                      t == GGML_TYPE_Q5_1 || t == GGML_TYPE_IQ4_NL))
        return true;
    return level >= CPU_LEVEL_AVX2 && (t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 ||
                                       t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K);
}

/* Allowed |fast - ref| for out[t][r] at a level (see the file comment). */
static double tolerance(const wmat *w, int64_t r, const float *x, int level, const float *wrow_f) {
    if (level == CPU_LEVEL_SCALAR) return 0.0;
    double S = 0.0, q = 0.0;
    for (int64_t k = 0; k < w->n_cols; k++) S += fabs((double)wrow_f[k] * x[k]);
    /* the elements sharing one activation scale */
    const int64_t ab = level == CPU_LEVEL_AVX2 && (w->type == GGML_TYPE_Q4_K || w->type == GGML_TYPE_Q6_K) ? 256 : 32;
    if (is_int8_act(w->type, level))
        for (int64_t b = 0; b < w->n_cols / ab; b++) {
            double amax = 0.0, wsum = 0.0;
            for (int64_t k = 0; k < ab; k++) {
                amax = fmax(amax, fabs(x[ab * b + k]));
                wsum += fabs(wrow_f[ab * b + k]);
            }
            q += wsum * amax / 254.0;
        }
    return q * 1.001 + 1e-5 * S + 1e-30;
}

static int max_level(void) {
    return (int)cpu_level_max();
}

/* op_matmul == op_matmul_ref within tolerance, for one type/shape at one level; with
 * prepare, through the prepared (packed) copy where the level has one. */
static void check_matmul_p(ops_ctx *c, ggml_type t, int64_t rows, int64_t K, int32_t T,
                           bool prepare) {
    wmat w = make_w(t, rows, K);
    if (prepare) {
        CHECK(ops_ctx_prepare_weights(c, &w) == IFD_OK);
        /* AVX-512 packs Q8_0 / Q4_0 / Q4_K / Q6_K matrices of whole 16-row groups, AVX2
         * ones of the same types in whole 8-row groups; the float types (K a multiple of
         * 32) in 64-row groups at AVX-512, 16-row groups at AVX2 */
        const int lv = ops_ctx_level(c);
        const bool iq = t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_K ||
                        t == GGML_TYPE_Q6_K;
        const bool fl = (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) &&
                        K % 32 == 0;
        /* IQ4_NL: packed in Q4_0's layout (16-row groups at AVX-512, 8-row at AVX2) */
        const bool nl = t == GGML_TYPE_IQ4_NL && ((lv == CPU_LEVEL_AVX512 && rows % 16 == 0) ||
                                                  (lv == CPU_LEVEL_AVX2 && rows % 8 == 0));
        /* Q5_K, IQ4_XS: 16-row groups at AVX-512, 8-row groups at AVX2; Q3_K, Q2_K:
         * 16-row groups at AVX-512 only */
        const bool k16 = t == GGML_TYPE_Q5_K || t == GGML_TYPE_IQ4_XS || t == GGML_TYPE_Q3_K ||
                         t == GGML_TYPE_Q2_K, k8 = t == GGML_TYPE_Q5_K || t == GGML_TYPE_IQ4_XS;
        const bool packs_ksb = (lv == CPU_LEVEL_AVX512 && k16 && rows % 16 == 0) ||
                               (lv == CPU_LEVEL_AVX2 && k8 && rows % 8 == 0);
        /* the INT8 / INT4 groups and Q4_1: 16-row groups at AVX-512, 8-row groups at AVX2 */
        const bool gp = is_grp(t) || t == GGML_TYPE_Q4_1;
        const bool packs_gp = (lv == CPU_LEVEL_AVX512 && gp && rows % 16 == 0) ||
                              (lv == CPU_LEVEL_AVX2 && gp && rows % 8 == 0);
        /* Q5_0: Q4_0's layout plus a fifth-bit plane (16-row groups at AVX-512, 8-row at AVX2) */
        const bool q50 = t == GGML_TYPE_Q5_0 && ((lv == CPU_LEVEL_AVX2 && rows % 8 == 0) ||
                                                 (lv == CPU_LEVEL_AVX512 && rows % 16 == 0));
        const bool packs = nl || q50 || packs_ksb || packs_gp ||
                           (lv == CPU_LEVEL_AVX512 && ((iq && rows % 16 == 0) || (fl && rows % 64 == 0))) ||
                           (lv == CPU_LEVEL_AVX2 && ((iq && rows % 8 == 0) || (fl && rows % 16 == 0)));
        CHECKF((ops_ctx_prepared_bytes(c) > 0) == packs, "%s rows %lld: prepared %zu bytes",
               tname(t), (long long)rows, ops_ctx_prepared_bytes(c));
    }
    float *x = rand_vec((size_t)T * K, 2.0f);
    /* blocks of 32 at magnitudes 1/8 .. 8 (per token, per block): a kernel that applies
     * one block's activation scale to another is then out of tolerance */
    for (size_t i = 0; i < (size_t)T * (size_t)K; i++) x[i] *= ldexpf(1.0f, (int)((i / 32 * 3 + i / (size_t)K) % 7) - 3);
    float *ref = malloc((size_t)T * rows * sizeof(float)), *out = malloc((size_t)T * rows * sizeof(float));
    float *wf = malloc((size_t)K * sizeof(float));
    op_matmul_ref(ref, x, &w, T);
    for (size_t i = 0; i < (size_t)T * rows; i++) out[i] = NAN;
    op_matmul(c, out, x, &w, T);
    int bad = 0;
    double worst = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        quant_dequantize_row_ref(t, (const uint8_t *)w.data + (size_t)r * w.row_bytes, wf, K);
        for (int32_t i = 0; i < T; i++) {
            const double tol = tolerance(&w, r, x + (size_t)i * K, ops_ctx_level(c), wf);
            const double err = fabs((double)out[(size_t)i * rows + r] - ref[(size_t)i * rows + r]);
            if (!(err <= tol)) bad++;
            if (tol > 0 && err / tol > worst) worst = err / tol;
        }
    }
    if (getenv("VERBOSE")) printf("    %s %s T%d worst err/tol %.3f\n", tname(t), cpu_level_name((cpu_level)ops_ctx_level(c)), T, worst);
    CHECKF(bad == 0, "%s level %s rows %lld K %lld T %d: %d elements out of tolerance",
           tname(t), cpu_level_name((cpu_level)ops_ctx_level(c)), (long long)rows, (long long)K, T,
           bad);
    ops_ctx_drop_weights(c);
    free((void *)w.data);
    free(x);
    free(ref);
    free(out);
    free(wf);
}

static void check_matmul(ops_ctx *c, ggml_type t, int64_t rows, int64_t K, int32_t T) {
    check_matmul_p(c, t, rows, K, T, false);
    check_matmul_p(c, t, rows, K, T, true);
}

static void test_matmul_all_types(void) {
    for (int level = 0; level <= max_level(); level++) {
        ops_ctx *c = ops_ctx_create(2, level);
        CHECK(c != NULL);
        if (!c) continue;
        CHECK(ops_ctx_reserve(c, 64, 2048, 64, 4) == IFD_OK);
        printf("  level %s\n", cpu_level_name((cpu_level)level));
        const int32_t Ts[] = {1, 3, 17, 64};
        for (size_t ti = 0; ti < IFD_ARRAY_LEN(TYPES); ti++) {
            const ggml_type t = TYPES[ti];
            if (is_grp(t)) {
                /* K = 128, 256, 384 (an odd number of 128-groups: the INT8 pair layout's
                 * pad), 1152; rows in whole 16-row groups, 8-row groups only, neither */
                const int64_t Kg[] = {128, 256, 384, 1152};
                const int32_t Tg[] = {1, 3, 8, 13, 24};
                for (size_t ki = 0; ki < IFD_ARRAY_LEN(Kg); ki++) {
                    for (size_t i = 0; i < IFD_ARRAY_LEN(Tg); i++) check_matmul(c, t, 48, Kg[ki], Tg[i]);
                    check_matmul(c, t, 37, Kg[ki], 5);
                    check_matmul(c, t, 40, Kg[ki], 9);
                }
                check_matmul(c, t, 1, 256, 5);
                check_matmul(c, t, 70, 1024, 17);
                check_matmul(c, t, 64, 2048, 64);
                continue;
            }
            const bool kq = quant_traits_of(t)->block_size == QK_K;
            /* rows: 1, 37 and 70 are not multiples of any row tile (4, 3, 2) */
            for (size_t i = 0; i < IFD_ARRAY_LEN(Ts); i++) check_matmul(c, t, 37, kq ? 512 : 256, Ts[i]);
            check_matmul(c, t, 1, 256, 5);
            check_matmul(c, t, 70, kq ? 768 : 1024, 6);
            if (!kq) check_matmul(c, t, 13, 96, 7); /* 3 blocks of 32: an odd pair / K tail */
            /* whole 16-row groups (the packed forms): T across the token tiles */
            const int32_t Tp[] = {1, 5, 8, 13, 24};
            for (size_t i = 0; i < IFD_ARRAY_LEN(Tp); i++) check_matmul(c, t, 48, kq ? 512 : 256, Tp[i]);
            if (!kq) check_matmul(c, t, 32, 96, 9);
            check_matmul(c, t, 40, kq ? 512 : 96, 6); /* whole 8-row groups, not 16 (AVX2) */
            if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
                check_matmul(c, t, 11, 100, 5); /* K not a multiple of 8 or 16 */
                /* the packed float forms (64-row groups at AVX-512): K over several
                 * 512-position slices with a short last one, T across the token tiles */
                const int32_t Tf[] = {1, 2, 6, 13, 31};
                for (size_t i = 0; i < IFD_ARRAY_LEN(Tf); i++) check_matmul(c, t, 128, 1056, Tf[i]);
                check_matmul(c, t, 64, 32, 7);
            }
        }
        ops_ctx_destroy(c);
    }
}

/* Row `probe` of x computed alone, at row 3 of a batch of 7 and at row 50 of a batch
 * of 64 (other rows random) must be bit-identical. K = 512, and K with an odd number
 * of blocks (768: 3 super-blocks; 800: 25 blocks of 32, 100 chunks of 8 floats) for the
 * kernels that spread blocks over several accumulator chains; 384: 3 groups of 128 (the
 * INT8 pair layout's pad). */
static void matmul_batch_invariance(int64_t rows, int64_t rows2, bool prepare) {
    const int64_t Ks[] = {512, 768, 800, 384};
    for (int level = 0; level <= max_level(); level++) {
        ops_ctx *c = ops_ctx_create(2, level);
        CHECK(c && ops_ctx_reserve(c, 64, 800, 64, 4) == IFD_OK);
        if (!c) continue;
        for (size_t ki = 0; ki < IFD_ARRAY_LEN(Ks); ki++)
        for (size_t ti = 0; ti < IFD_ARRAY_LEN(TYPES); ti++) {
            const int64_t K = Ks[ki];
            if (K % (int64_t)quant_traits_of(TYPES[ti])->block_size) continue;
            wmat w = make_w(TYPES[ti], rows, K), w2 = make_w(TYPES[ti], rows2, K);
            if (prepare) {
                CHECK(ops_ctx_prepare_weights(c, &w) == IFD_OK);
                CHECK(ops_ctx_prepare_weights(c, &w2) == IFD_OK);
            }
            float *probe = rand_vec((size_t)K, 3.0f);
            float *x = rand_vec((size_t)64 * K, 3.0f);
            float *alone = malloc(rows * sizeof(float)), *out = malloc((size_t)64 * rows * sizeof(float));
            float *out2 = malloc((size_t)64 * rows2 * sizeof(float));
            op_matmul(c, alone, probe, &w, 1);
            /* 5 and 13: the probe in a remainder tile (narrower than the type's token
             * tile: one body call of that width, which must give its rows' bits) */
            const int32_t Ts[] = {7, 64, 5, 13}, at[] = {3, 50, 4, 12};
            for (int k = 0; k < 4; k++) {
                memcpy(x + (size_t)at[k] * K, probe, (size_t)K * sizeof(float));
                op_matmul(c, out, x, &w, Ts[k]);
                CHECKF(memcmp(out + (size_t)at[k] * rows, alone, rows * sizeof(float)) == 0,
                       "%s K %lld level %s: row differs inside a batch of %d", tname(TYPES[ti]), (long long)K,
                       cpu_level_name((cpu_level)level), Ts[k]);
                /* and through the fused multi-matrix path */
                float *outs[2] = {out2, out};
                const wmat *ws[2] = {&w2, &w};
                memset(out, 0, (size_t)64 * rows * sizeof(float));
                op_matmul_multi(c, 2, outs, ws, x, Ts[k]);
                CHECKF(memcmp(out + (size_t)at[k] * rows, alone, rows * sizeof(float)) == 0,
                       "%s level %s: multi-matmul row differs in a batch of %d",
                       tname(TYPES[ti]), cpu_level_name((cpu_level)level), Ts[k]);
            }
            ops_ctx_drop_weights(c);
            free((void *)w.data);
            free((void *)w2.data);
            free(probe);
            free(x);
            free(alone);
            free(out);
            free(out2);
        }
        ops_ctx_destroy(c);
    }
}

static void test_matmul_batch_invariance(void) {
    matmul_batch_invariance(45, 29, false);
    matmul_batch_invariance(48, 32, true); /* the packed forms (whole 16-row groups) */
    matmul_batch_invariance(32, 45, true); /* packed and unpacked in one multi-matmul */
    matmul_batch_invariance(40, 24, true); /* 8-row groups (AVX2), unpacked at AVX-512 */
    matmul_batch_invariance(128, 64, true); /* the packed float forms (64-row groups) */
}

/* rmsnorm and swiglu: SIMD reductions / exp differ from libm in the last bits.
 * rmsnorm: relative 1e-5 (sum of squares reordered, then one sqrt).
 * swiglu: the polynomial exp is within ~2 ulp: relative 1e-5 of |out| + 1e-7. */
static void test_elementwise(void) {
    for (int level = 0; level <= max_level(); level++) {
        ops_ctx *c = ops_ctx_create(2, level);
        CHECK(c != NULL);
        if (!c) continue;
        const int32_t ns[] = {1, 7, 64, 100, 2048};
        for (size_t i = 0; i < IFD_ARRAY_LEN(ns); i++) {
            const int32_t n = ns[i], R = 5;
            float *x = rand_vec((size_t)R * n, 4.0f), *w = rand_vec((size_t)n, 1.0f);
            float *a = malloc((size_t)R * n * 4), *b = malloc((size_t)R * n * 4);
            op_rmsnorm_rows(c, a, x, w, R, n, 1e-5f);
            int bad = 0;
            for (int r = 0; r < R; r++) {
                op_rmsnorm_ref(b + (size_t)r * n, x + (size_t)r * n, w, n, 1e-5f);
                for (int32_t k = 0; k < n; k++) {
                    const float e = b[(size_t)r * n + k];
                    if (!(fabsf(a[(size_t)r * n + k] - e) <= 1e-5f * fabsf(e) + 1e-7f)) bad++;
                }
            }
            CHECKF(bad == 0, "rmsnorm n=%d level %d: %d bad", n, level, bad);
            /* swiglu over R*n elements, gates in [-20, 20] to exercise exp's range */
            float *g = rand_vec((size_t)R * n, 20.0f), *u = rand_vec((size_t)R * n, 2.0f);
            op_swiglu(c, a, g, u, (int64_t)R * n);
            op_swiglu_ref(b, g, u, R * n);
            bad = 0;
            for (int32_t k = 0; k < R * n; k++)
                if (!(fabsf(a[k] - b[k]) <= 1e-5f * fabsf(b[k]) + 1e-7f)) bad++;
            CHECKF(bad == 0, "swiglu n=%d level %d: %d bad", R * n, level, bad);
            free(x);
            free(w);
            free(a);
            free(b);
            free(g);
            free(u);
        }
        ops_ctx_destroy(c);
    }
}

/* RoPE through the table == op_rope_ref exactly (same angles, same arithmetic). */
static void test_rope(void) {
    const float div[32] = {1, 1, 2, 2, 4, 4, 8, 8, 1, 1, 2, 2, 4, 4, 8, 8,
                           1, 1, 2, 2, 4, 4, 8, 8, 1, 1, 2, 2, 4, 4, 8, 8};
    for (int layout = 0; layout < 2; layout++)
        for (int variant = 0; variant < 3; variant++) {
            rope_params rp = {.head_dim = 64, .n_rot = variant == 2 ? 32 : 64,
                              .layout = (rope_layout)layout, .base = 10000.0f,
                              .freq_scale = variant == 1 ? 0.25f : 1.0f,
                              .freq_div = variant == 1 ? div : NULL};
            const int32_t pos[3] = {0, 17, 1000};
            float cs[3 * 64];
            op_rope_table(cs, pos, 3, &rp);
            for (int i = 0; i < 3; i++) {
                float *a = rand_vec(4 * 64, 1.0f), b[4 * 64];
                memcpy(b, a, sizeof b);
                op_rope_apply(a, 4, cs + (size_t)i * rp.n_rot, &rp);
                op_rope_ref(b, 4, pos[i], &rp);
                CHECKF(memcmp(a, b, sizeof b) == 0, "rope layout %d variant %d pos %d", layout,
                       variant, pos[i]);
                free(a);
            }
        }
}

/* The KV layouts and dtypes the attention cases run over: f32 in both row orders, the
 * other dtypes blocked (as the CPU backend stores them). */
static const struct {
    backend_kv_dtype dt;
    int32_t blocked;
} KV_CASES[] = {{BACKEND_KV_F32, 0}, {BACKEND_KV_F32, 1}, {BACKEND_KV_F16, 1},
                {BACKEND_KV_BF16, 1}, {BACKEND_KV_INT8, 1}, {BACKEND_KV_FP8, 1}};

/* A paged cache of n_slots slots: K and V from f32 values kf/vf ([slot][n_kv][hd]),
 * stored as the view's dtype and row order through kv_store_row (what rope_store does). */
static void kv_fill(kv_view *kv, int32_t n_slots, const float *kf, const float *vf) {
    const size_t rb = kv_view_row_bytes(kv), hd = (size_t)kv->head_dim;
    uint8_t *K = malloc((size_t)n_slots * kv->n_kv_heads * rb);
    uint8_t *V = malloc((size_t)n_slots * kv->n_kv_heads * rb);
    for (int32_t sl = 0; sl < n_slots; sl++)
        for (int32_t h = 0; h < kv->n_kv_heads; h++) {
            const size_t src = ((size_t)sl * kv->n_kv_heads + h) * hd, row = kv_row_index(kv, sl, h);
            kv_store_row(kv->dtype, K + row * rb, kf + src, kv->head_dim);
            kv_store_row(kv->dtype, V + row * rb, vf + src, kv->head_dim);
        }
    kv->k = K;
    kv->v = V;
}

/* The same cache as f32 rows (slot order): each stored row read back (kv_load_row). */
static kv_view kv_dequantized(const kv_view *kv, int32_t n_slots) {
    const size_t rb = kv_view_row_bytes(kv), hd = (size_t)kv->head_dim;
    float *K = malloc((size_t)n_slots * kv->n_kv_heads * hd * 4);
    float *V = malloc((size_t)n_slots * kv->n_kv_heads * hd * 4);
    for (int32_t sl = 0; sl < n_slots; sl++)
        for (int32_t h = 0; h < kv->n_kv_heads; h++) {
            const size_t dst = ((size_t)sl * kv->n_kv_heads + h) * hd, row = kv_row_index(kv, sl, h);
            kv_load_row(kv->dtype, (const uint8_t *)kv->k + row * rb, K + dst, kv->head_dim);
            kv_load_row(kv->dtype, (const uint8_t *)kv->v + row * rb, V + dst, kv->head_dim);
        }
    return (kv_view){.k = K, .v = V, .n_kv_heads = kv->n_kv_heads, .head_dim = kv->head_dim,
                     .block_size = kv->block_size};
}

/* Attention: two sequences with scrambled block tables, GQA (8 heads over 2 KV heads),
 * several query tokens each, against op_attention_ref per sequence, at every KV dtype
 * and row order (KV_CASES). Tolerance: 2e-5 absolute with |v| < 1 (the SIMD exp and
 * reordered sums; INT8 / FP8 multiply a row's scale into the dot / the weight instead
 * of into each element: a few ulps more). Then batch invariance: sequence 0 alone gives
 * the same bits as inside the two-sequence batch, and each query alone (a decode step)
 * the same bits as inside a multi-token call. And the reference reading a dtype
 * directly gives the same bits as the reference over that cache read back to f32. */
static void test_attention(void) {
    enum { NKV = 2, NH = 8, BS = 4, NB = 40 };
    const int32_t hds[] = {64, 128, 40};
    for (int level = 0; level <= max_level(); level++) {
        ops_ctx *c = ops_ctx_create(2, level);
        CHECK(c && ops_ctx_reserve(c, 64, 256, NB * BS, NH / NKV) == IFD_OK);
        if (!c) continue;
        for (size_t hi = 0; hi < IFD_ARRAY_LEN(hds); hi++)
        for (size_t ci = 0; ci < IFD_ARRAY_LEN(KV_CASES); ci++) {
            const int32_t HD = hds[hi];
            const size_t kvn = (size_t)NB * BS * NKV * HD;
            float *kf = rand_vec(kvn, 1.0f), *vf = rand_vec(kvn, 1.0f);
            kv_view kv = {.n_kv_heads = NKV, .head_dim = HD, .block_size = BS,
                          .dtype = KV_CASES[ci].dt, .blocked = KV_CASES[ci].blocked};
            kv_fill(&kv, NB * BS, kf, vf);
            const char *dn = backend_kv_dtype_name(kv.dtype);
            /* seq 0: 20 blocks (keys up to 77), 3 queries at 75..77; seq 1: 17 queries
             * at 0..16 (a prefill chunk from the start) */
            int32_t bt[2][20];
            for (int i = 0; i < 20; i++) {
                bt[0][i] = (i * 7 + 3) % NB;
                bt[1][i] = NB - 1 - i;
            }
            const int32_t n0 = 3, n1 = 17, nq = n0 + n1;
            int32_t pos[20], ss[3] = {0, n0, nq};
            for (int i = 0; i < n0; i++) pos[i] = 75 + i;
            for (int i = 0; i < n1; i++) pos[n0 + i] = i;
            float *q = rand_vec((size_t)nq * NH * HD, 1.0f);
            float *o = malloc((size_t)nq * NH * HD * 4), *r = malloc((size_t)nq * NH * HD * 4);
            float scratch[NB * BS];
            op_attention(c, o, q, 2, ss, pos, NH, &kv, &bt[0][0], 20);
            op_attention_ref(r, q, n0, pos, NH, &kv, bt[0], scratch);
            op_attention_ref(r + (size_t)n0 * NH * HD, q + (size_t)n0 * NH * HD, n1, pos + n0, NH,
                             &kv, bt[1], scratch);
            int bad = 0;
            for (size_t i = 0; i < (size_t)nq * NH * HD; i++)
                if (!(fabsf(o[i] - r[i]) <= 2e-5f)) bad++;
            CHECKF(bad == 0, "attention hd %d level %s kv %s%s: %d bad", HD,
                   cpu_level_name((cpu_level)level), dn, kv.blocked ? " blocked" : "", bad);
            if (level == 0) {
                /* the reference over the stored dtype == over its f32 read-back */
                kv_view f32 = kv_dequantized(&kv, NB * BS);
                float *r2 = malloc((size_t)n0 * NH * HD * 4);
                op_attention_ref(r2, q, n0, pos, NH, &f32, bt[0], scratch);
                CHECKF(memcmp(r2, r, (size_t)n0 * NH * HD * 4) == 0,
                       "reference attention kv %s differs from its f32 read-back", dn);
                free(r2);
                free((void *)f32.k);
                free((void *)f32.v);
            }
            float *alone = malloc((size_t)n1 * NH * HD * 4);
            int32_t ss1[2] = {0, n0};
            op_attention(c, alone, q, 1, ss1, pos, NH, &kv, &bt[0][0], 20);
            CHECK(memcmp(alone, o, (size_t)n0 * NH * HD * 4) == 0);
            /* every query of sequence 1 computed on its own (a decode step) equals its
             * row in the 17-query call (tiles of several tokens) */
            int bad_rows = 0;
            for (int i = 0; i < n1; i++) {
                const int32_t ti = n0 + i, ss_one[2] = {0, 1};
                op_attention(c, alone, q + (size_t)ti * NH * HD, 1, ss_one, pos + ti, NH, &kv,
                             &bt[1][0], 20);
                bad_rows += memcmp(alone, o + (size_t)ti * NH * HD, (size_t)NH * HD * 4) != 0;
            }
            CHECKF(bad_rows == 0, "attention hd %d level %s kv %s: %d rows differ alone vs in a tile",
                   HD, cpu_level_name((cpu_level)level), dn, bad_rows);
            free(alone);
            free(kf);
            free(vf);
            free((void *)kv.k);
            free((void *)kv.v);
            free(q);
            free(o);
            free(r);
        }
        ops_ctx_destroy(c);
    }
}

/* ---- whole backend on the shakespeare models ------------------------------------------ */

typedef struct be_run {
    backend *b;
    int32_t block_table[2][16];
} be_run;

static backend *make_backend(const model *m, int reference, backend_kv_dtype kv_dtype) {
    backend_config cfg = {.n_threads = 2, .block_size = 16, .n_blocks = 32, .max_batch_tokens = 64,
                          .max_batch_seqs = 4, .max_logits = 64, .max_seq_len = 256,
                          .reference = reference, .kv_dtype = kv_dtype};
    backend *b = NULL;
    char err[256];
    if (backend_create(&b, BACKEND_CPU, m, &cfg, err, sizeof err)) fprintf(stderr, "  %s\n", err);
    return b;
}

/* Prefill `n` tokens of seq s (blocks s*16..), positions from p0, logits of every row. */
static void feed(backend *b, int32_t n_seqs, const int32_t *ns, const int32_t *p0,
                 const int32_t *toks, float *logits) {
    int32_t ids[64], pos[64], slot[64], lidx[64], ss[5] = {0}, ctx[4], bt[4 * 16];
    int32_t T = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int i = 0; i < ns[s]; i++, T++) {
            ids[T] = toks[(s * 37 + p0[s] + i) % 64];
            pos[T] = p0[s] + i;
            slot[T] = s * 16 * 16 + pos[T]; /* sequence s owns blocks 16s .. 16s+15 */
            lidx[T] = T;
        }
        ss[s + 1] = T;
        ctx[s] = p0[s] + ns[s];
        for (int k = 0; k < 16; k++) bt[s * 16 + k] = s * 16 + k;
    }
    ifd_batch batch = {.n_tokens = T, .token_ids = ids, .positions = pos, .slot_mapping = slot,
                       .n_seqs = n_seqs, .seq_start = ss, .context_len = ctx, .block_table = bt,
                       .max_blocks_per_seq = 16, .n_logits = T, .logits_index = lidx};
    CHECK(backend_forward(b, &batch, logits) == IFD_OK);
}

/* For each shakespeare model (F32, Q8_0, Q4_0, Q4_K_M; the F32 one at every KV cache
 * dtype, the others with an f32 cache): (1) the fast backend's logits
 * for a 40-token prefill + 1 decode match the reference backend (tolerance: 2e-2 of the
 * logits' max magnitude for the quantized models (int8 activations), 1e-3 for F32 — errors compound over 4
 * layers); (2) batch invariance: sequence 0's logits computed alone (prefill 40 then
 * decode 1) are bit-identical to those computed with a second sequence in the same
 * batches (and chunked differently for sequence 1). */
static void test_backend_models(void) {
    const char *files[] = {"shakespeare-target.gguf", "shakespeare-target-Q8_0.gguf",
                           "shakespeare-target-Q4_0.gguf", "shakespeare-target-Q4_K_M.gguf"};
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 3 + (i * 131) % 900;
    for (size_t f = 0; f < IFD_ARRAY_LEN(files); f++)
    for (int kd = 0; kd < (f == 0 ? BACKEND_KV_N_DTYPES : 1); kd++) {
        char path[1024], err[256];
        snprintf(path, sizeof path, "%s/models/%s", INFERD_SHARED_DIR, files[f]);
        model *m = NULL;
        if (model_load(&m, path, err, sizeof err)) {
            CHECKF(0, "cannot load %s: %s", path, err);
            continue;
        }
        const int32_t V = (int32_t)m->hp.n_vocab;
        const backend_kv_dtype kvd = (backend_kv_dtype)kd;
        backend *ref = make_backend(m, 1, kvd), *fast = make_backend(m, 0, kvd),
                *fast2 = make_backend(m, 0, kvd);
        CHECK(ref && fast && fast2);
        float *lr = malloc((size_t)64 * V * 4), *lf = malloc((size_t)64 * V * 4);
        float *la = malloc((size_t)64 * V * 4), *lb = malloc((size_t)64 * V * 4);
        /* (1) fast vs reference */
        int32_t n40 = 40, p0 = 0, n1 = 1, p40 = 40;
        feed(ref, 1, &n40, &p0, toks, lr);
        feed(fast, 1, &n40, &p0, toks, lf);
        float mx = 0.0f, err_max = 0.0f;
        for (size_t i = 0; i < (size_t)40 * V; i++) {
            mx = fmaxf(mx, fabsf(lr[i]));
            err_max = fmaxf(err_max, fabsf(lr[i] - lf[i]));
        }
        const bool i8 = f != 0; /* int8 activations (Q4_K_M: at the AVX-512 level) */
        CHECKF(err_max <= (i8 ? 2e-2f : 1e-3f) * mx,
               "%s kv %s: fast vs reference prefill max err %g (max %g)", files[f],
               backend_kv_dtype_name(kvd), err_max, mx);
        feed(ref, 1, &n1, &p40, toks, lr);
        feed(fast, 1, &n1, &p40, toks, la); /* la: seq 0's decode logits, alone */
        err_max = 0.0f;
        for (int32_t i = 0; i < V; i++) err_max = fmaxf(err_max, fabsf(lr[i] - la[i]));
        CHECKF(err_max <= (i8 ? 2e-2f : 1e-3f) * mx, "%s kv %s: decode max err %g", files[f],
               backend_kv_dtype_name(kvd), err_max);
        /* (2) batch invariance: seq 0 (40 + 1 tokens) alongside seq 1 (7 then 23 tokens
         * at positions 30.., so the batches are 47 and 24 rows) */
        int32_t ns_a[2] = {40, 7}, p_a[2] = {0, 30}, ns_b[2] = {1, 23}, p_b[2] = {40, 37};
        feed(fast2, 2, ns_a, p_a, toks, lb);
        CHECKF(memcmp(lb, lf, (size_t)40 * V * 4) == 0, "%s kv %s: prefill logits depend on the batch",
               files[f], backend_kv_dtype_name(kvd));
        feed(fast2, 2, ns_b, p_b, toks, lb);
        CHECKF(memcmp(lb, la, (size_t)V * 4) == 0, "%s kv %s: decode logits depend on the batch",
               files[f], backend_kv_dtype_name(kvd));
        free(lr);
        free(lf);
        free(la);
        free(lb);
        backend_destroy(ref);
        backend_destroy(fast);
        backend_destroy(fast2);
        model_destroy(m);
    }
}


/* Many logits rows per forward (prompt logprobs: every prompt token; speculative
 * verification: k+1 rows), with max_logits == max_batch_tokens: a forward asking for
 * every token's logits gives, bit for bit, what forwards asking for one row each give
 * (the same batch rerun writes the same K/V, so each rerun sees the same cache), for
 * the reference and the fast backend. Then arbitrary rows: a scrambled list with
 * repeats, longer than the batch (max_logits 2 x max_batch_tokens), and none at all. */
static void test_logits_rows(void) {
    const char *files[] = {"shakespeare-target.gguf", "shakespeare-target-Q4_K_M.gguf"};
    for (size_t f = 0; f < IFD_ARRAY_LEN(files); f++) {
        char path[1024], err[256];
        snprintf(path, sizeof path, "%s/models/%s", INFERD_SHARED_DIR, files[f]);
        model *m = NULL;
        if (model_load(&m, path, err, sizeof err)) {
            CHECKF(0, "cannot load %s: %s", path, err);
            continue;
        }
        const int32_t V = (int32_t)m->hp.n_vocab;
        enum { TMAX = 48 };
        for (int reference = 0; reference < 2; reference++) {
            backend_config cfg = {.n_threads = 2, .block_size = 16, .n_blocks = 16,
                                  .max_batch_tokens = TMAX, .max_batch_seqs = 2,
                                  .max_logits = 2 * TMAX, .max_seq_len = 128,
                                  .reference = reference};
            backend *b = NULL;
            CHECKF(backend_create(&b, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK, "%s", err);
            if (!b) continue;
            /* seq 0: 30 tokens at 0..29, seq 1: 17 tokens at 5..21 (blocks 8..) */
            int32_t ids[TMAX], pos[TMAX], slot[TMAX], lidx[2 * TMAX], ss[3] = {0, 30, 47}, ctx[2] = {30, 22};
            int32_t bt[2 * 8];
            const int32_t T = 47;
            for (int32_t t = 0; t < T; t++) {
                const int s = t >= 30;
                ids[t] = 3 + (t * 97 + s * 11) % (V - 3);
                pos[t] = s ? 5 + (t - 30) : t;
                slot[t] = s * 8 * 16 + pos[t];
                lidx[t] = t;
            }
            for (int k = 0; k < 8; k++) bt[k] = k, bt[8 + k] = 8 + k;
            ifd_batch batch = {.n_tokens = T, .token_ids = ids, .positions = pos, .slot_mapping = slot,
                               .n_seqs = 2, .seq_start = ss, .context_len = ctx, .block_table = bt,
                               .max_blocks_per_seq = 8, .n_logits = T, .logits_index = lidx};
            float *all = malloc((size_t)2 * TMAX * V * 4), *one = malloc((size_t)V * 4);
            CHECK(backend_forward(b, &batch, all) == IFD_OK);
            /* a restricted lm head (logits_rows, a draft's): the first N columns as the
             * full head's, bit for bit where N is a multiple of the packed row groups
             * (64 covers every level's), the rest -inf; an unaligned N: the same tail */
            const int32_t NR[2] = {(V / 3) & ~63, (V / 3) | 5};
            for (int n = 0; n < 2; n++) {
                backend_config rc = cfg;
                rc.logits_rows = NR[n];
                backend *br = NULL;
                CHECKF(backend_create(&br, BACKEND_CPU, m, &rc, err, sizeof err) == IFD_OK, "%s", err);
                if (!br) continue;
                float *part = malloc((size_t)2 * TMAX * V * 4);
                for (size_t i = 0; i < (size_t)2 * TMAX * V; i++) part[i] = 1.0f;
                CHECK(backend_forward(br, &batch, part) == IFD_OK);
                int head = 0, tail = 0;
                double maxd = 0;
                for (int32_t t = 0; t < T; t++) {
                    const float *pr = part + (size_t)t * V, *ar = all + (size_t)t * V;
                    head += memcmp(pr, ar, (size_t)NR[n] * 4) != 0;
                    for (int32_t c = 0; c < NR[n]; c++) maxd = fmax(maxd, fabs((double)pr[c] - ar[c]));
                    for (int32_t c = NR[n]; c < V; c++) tail += !(isinf(pr[c]) && pr[c] < 0);
                }
                if (n == 0)
                    CHECKF(head == 0, "%s %s logits_rows %d: %d rows differ from the full head's", files[f],
                           reference ? "ref" : "fast", NR[n], head);
                CHECKF(maxd < 1e-3, "%s logits_rows %d: max difference %g", files[f], NR[n], maxd);
                CHECKF(tail == 0, "%s logits_rows %d: %d tail entries not -inf", files[f], NR[n], tail);
                free(part);
                backend_destroy(br);
            }
            {
                backend_config rc = cfg;
                backend *br = NULL;
                rc.logits_rows = V + 1;
                CHECK(backend_create(&br, BACKEND_CPU, m, &rc, err, sizeof err) == IFD_ERR_INVALID && !br);
                rc.logits_rows = -1;
                CHECK(backend_create(&br, BACKEND_CPU, m, &rc, err, sizeof err) == IFD_ERR_INVALID && !br);
            }
            int bad = 0;
            for (int32_t t = 0; t < T; t++) {
                int32_t row = t;
                batch.n_logits = 1;
                batch.logits_index = &row;
                CHECK(backend_forward(b, &batch, one) == IFD_OK);
                bad += memcmp(one, all + (size_t)t * V, (size_t)V * 4) != 0;
            }
            CHECKF(bad == 0, "%s %s: %d of %d rows differ between all-rows and one-row forwards",
                   files[f], reference ? "ref" : "fast", bad, T);
            /* scrambled rows with repeats, 2T of them */
            float *many = malloc((size_t)2 * TMAX * V * 4);
            for (int32_t i = 0; i < 2 * T; i++) lidx[i] = (i * 29 + 7) % T;
            batch.n_logits = 2 * T;
            batch.logits_index = lidx;
            CHECK(backend_forward(b, &batch, many) == IFD_OK);
            bad = 0;
            for (int32_t i = 0; i < 2 * T; i++)
                bad += memcmp(many + (size_t)i * V, all + (size_t)lidx[i] * V, (size_t)V * 4) != 0;
            CHECKF(bad == 0, "%s %s: %d scrambled rows differ", files[f], reference ? "ref" : "fast",
                   bad);
            batch.n_logits = 0;
            CHECK(backend_forward(b, &batch, NULL) == IFD_OK);
            free(all);
            free(one);
            free(many);
            backend_destroy(b);
        }
        model_destroy(m);
    }
}

static void test_features(void) {
    const cpu_features *f = cpu_features_get();
    printf("  avx2 %d fma %d f16c %d avx512f %d bw %d vl %d vnni %d bf16 %d avxvnni %d -> %s (default %s)\n",
           f->avx2, f->fma, f->f16c, f->avx512f, f->avx512bw, f->avx512vl, f->avx512vnni,
           f->avx512bf16, f->avxvnni, cpu_level_name(cpu_level_max()),
           cpu_level_name(cpu_level_default()));
    cpu_level l;
    CHECK(cpu_level_parse("avx2", &l) && l == CPU_LEVEL_AVX2);
    CHECK(!cpu_level_parse("sse9", &l));
    CHECK(cpu_level_default() <= cpu_level_max());
    CHECK(ops_ctx_create(1, CPU_LEVEL_COUNT_) == NULL);
    if (f->avx512f) CHECK(f->avx2); /* sanity of the OS-state gating */
}

TEST_MAIN(T(test_features), T(test_matmul_all_types), T(test_matmul_batch_invariance),
          T(test_elementwise), T(test_rope), T(test_attention), T(test_backend_models),
          T(test_logits_rows))
