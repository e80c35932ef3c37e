// test_elementwise.cu — kernels/elementwise.cu against the C reference on random inputs:
// embedding gather for every weight type, rmsnorm (plain, gathered, fused with the
// residual add), the per-head norm, add_bias, add, swiglu, and RoPE fused with the paged
// K/V write (head_dim 64/128, GQA 1/4/8, block sizes 16/32, every rope kind, padding
// slots). Every kernel is also checked for batch invariance: a row computed alone gives
// the same bits as that row inside a larger batch. Tolerances are stated at each check.
#include "cuda_test.h"
#include "elementwise.h"

#include <vector>

extern "C" {
#include "backend/cpu/ops.h"
#include "model/quant.h"
#include "backend/kv_dtype.h"
}

static float *up_f(const float *h, size_t n) { return (float *)ct_upload(h, n * sizeof(float)); }
static float *down_f(float *h, const float *d, size_t n) {
    ct_download(h, d, n * sizeof(float));
    return h;
}
static bool same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// rmsnorm / head_norm: the device sums the squares in a tree (chunks of 4 per thread,
// then warp butterflies), the reference left to right; both in f32. The relative error
// of a sum of n positive terms is at most ~n ulp for the loop and ~log2(n) ulp for the
// tree; on random data it is about sqrt(n) ulp, and the scale (1/sqrt) halves it. For
// n <= 4096 that is within 2e-6 relative (measured worst: 1.3e-6 at n 4096, 6e-7 at 896), plus an
// absolute 1e-6 for outputs near zero.
#define NORM_ATOL 1e-6
#define NORM_RTOL 2e-6

/* ---- embedding ---------------------------------------------------------------------- */

// A random matrix of type t: float types from random floats, block types from random
// bytes (every quant field random) with finite fp16 scales.
static void make_matrix(uint8_t *m, ggml_type t, int64_t n_rows, int64_t n_cols, uint64_t seed) {
    const size_t rb = quant_row_bytes(t, n_cols);
    uint64_t s = seed;
    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        float *f = (float *)malloc((size_t)(n_rows * n_cols) * sizeof(float));
        ct_fill(f, (size_t)(n_rows * n_cols), seed, -2, 2);
        for (int64_t r = 0; r < n_rows; r++) quant_traits_of(t)->quantize_row(f + r * n_cols, m + r * rb, n_cols);
        free(f);
        return;
    }
    for (size_t i = 0; i < rb * n_rows; i++) m[i] = (uint8_t)(ct_next(&s) >> 56);
    const quant_traits *tr = quant_traits_of(t);
    const int64_t nb = n_rows * n_cols / tr->block_size;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = m + b * tr->block_bytes;
        // fp16 scale fields: d first, except Q6_K, Q3_K (d last) and Q2_K (d, dmin last);
        // Q4_K / Q5_K have dmin after d, Q4_1 / Q5_1 / I4_G* their minimum m
        size_t off[2] = {0, 2};
        int nf = t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 ||
                         t == IFD_TYPE_I4_G64 || t == IFD_TYPE_I4_G128 || t == GGML_TYPE_Q2_K
                     ? 2
                     : 1;
        if (t == GGML_TYPE_Q6_K) off[0] = 208;
        if (t == GGML_TYPE_Q3_K) off[0] = 108;
        if (t == GGML_TYPE_Q2_K) off[0] = 80, off[1] = 82;
        for (int f = 0; f < nf; f++) {
            float v = 0.001f + 0.1f * (float)((ct_next(&s) >> 40) * (1.0 / 16777216.0));
            if (ct_next(&s) & 1) v = -v;
            ifd_fp16 h = ifd_f32_to_fp16(v);
            memcpy(blk + off[f], &h, 2);
        }
    }
}

static void test_embed(void) {
    const ggml_type types[] = {GGML_TYPE_F32,    GGML_TYPE_F16,    GGML_TYPE_BF16,   GGML_TYPE_Q8_0,  GGML_TYPE_Q4_0,
                               GGML_TYPE_Q5_0,   GGML_TYPE_Q4_K,   GGML_TYPE_Q6_K,   GGML_TYPE_Q4_1,  GGML_TYPE_Q5_1,
                               GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K,   GGML_TYPE_Q3_K,   GGML_TYPE_Q5_K,  GGML_TYPE_IQ4_XS,
                               IFD_TYPE_I8_G64,  IFD_TYPE_I8_G128, IFD_TYPE_I4_G64,  IFD_TYPE_I4_G128};
    const int32_t n_vocab = 29, n = 13;
    for (ggml_type t : types) {
        const bool k_quant = quant_traits_of(t)->block_size > 32; // not 32 more columns
        for (int64_t n_cols : {(int64_t)512, (int64_t)96}) {
            if (n_cols % quant_traits_of(t)->block_size) continue;
            const size_t rb = quant_row_bytes(t, n_cols);
            uint8_t *m = (uint8_t *)malloc(rb * n_vocab);
            make_matrix(m, t, n_vocab, n_cols, 100 + (uint64_t)t);
            int32_t ids[n];
            uint64_t s = 7 + (uint64_t)t;
            for (int i = 0; i < n; i++) ids[i] = (int32_t)(ct_next(&s) % n_vocab);
            ids[0] = 0, ids[n - 1] = n_vocab - 1, ids[5] = ids[2]; // both ends, a repeat
            float *want = (float *)malloc((size_t)n * n_cols * sizeof(float));
            float *got = (float *)malloc((size_t)n * n_cols * sizeof(float));
            for (int i = 0; i < n; i++) quant_dequantize_row_ref(t, m + (size_t)ids[i] * rb, want + i * n_cols, n_cols);
            void *dm = ct_upload(m, rb * n_vocab);
            int32_t *dids = (int32_t *)ct_upload(ids, sizeof ids);
            float *dout = (float *)ct_alloc((size_t)n * n_cols * sizeof(float));
            CHECK(k_embed(NULL, dout, dm, t, n_cols, rb, dids, n, n_vocab) == DEV_OK);
            CHECK(ct_sync() == DEV_OK);
            down_f(got, dout, (size_t)n * n_cols);
            // exact: the dequantization is the reference's, product for product
            CHECKF(same_bits(got, want, (size_t)n * n_cols * sizeof(float)), "embed %s n_cols %lld",
                   quant_traits_of(t)->name, (long long)n_cols);

            // ids outside the vocabulary: zero rows and the flag, the others as before
            int32_t bad_ids[5] = {ids[3], -1, n_vocab, ids[7], INT32_MIN};
            int32_t zero = 0, flag = 0;
            int32_t *dbad = (int32_t *)ct_upload(bad_ids, sizeof bad_ids);
            int32_t *dflag = (int32_t *)ct_upload(&zero, sizeof zero);
            CHECK(k_embed_flagged(NULL, dout, dm, t, n_cols, rb, dids, n, n_vocab, dflag) == DEV_OK);
            CHECK(ct_sync() == DEV_OK);
            ct_download(&flag, dflag, sizeof flag);
            CHECK(flag == 0);
            CHECK(k_embed_flagged(NULL, dout, dm, t, n_cols, rb, dbad, 5, n_vocab, dflag) == DEV_OK);
            CHECK(ct_sync() == DEV_OK);
            ct_download(&flag, dflag, sizeof flag);
            CHECK(flag == 1);
            down_f(got, dout, (size_t)5 * n_cols);
            CHECK(same_bits(got, want + 3 * n_cols, n_cols * sizeof(float)));
            CHECK(same_bits(got + 3 * n_cols, want + 7 * n_cols, n_cols * sizeof(float)));
            for (int r : {1, 2, 4})
                for (int64_t c = 0; c < n_cols; c++) CHECK(got[r * n_cols + c] == 0.0f);

            // sizes the launcher rejects
            // not a whole number of blocks (block types), or more than row_bytes hold (floats)
            CHECK(k_embed(NULL, dout, dm, t, n_cols + (k_quant ? 32 : 1), rb, dids, n, n_vocab) == DEV_ERR);
            CHECK(k_embed(NULL, dout, dm, t, n_cols, rb - 1, dids, n, n_vocab) == DEV_ERR);
            CHECK(k_embed(NULL, dout, (uint8_t *)dm + 1, t, n_cols, rb, dids, n, n_vocab) == DEV_ERR);
            CHECK(k_embed(NULL, dout, dm, t, n_cols, rb, dids, -1, n_vocab) == DEV_ERR);
            CHECK(k_embed(NULL, dout, dm, t, n_cols, rb, dids, 0, n_vocab) == DEV_OK);
            ct_free(dm), ct_free(dids), ct_free(dout), ct_free(dbad), ct_free(dflag);
            free(m), free(want), free(got);
        }
    }
    float *d = (float *)ct_alloc(64 * sizeof(float));
    int32_t *di = (int32_t *)ct_alloc(sizeof(int32_t));
    CHECK(k_embed(NULL, d, d, GGML_TYPE_IQ2_XXS, 256, 66, di, 1, 1) == DEV_ERR); // a type we do not read
    CHECK(k_embed(NULL, d, d, 12345, 32, 20, di, 1, 1) == DEV_ERR);
    ct_free(d), ct_free(di);
}

/* ---- rmsnorm, add + rmsnorm, head norm ---------------------------------------------- */

static void ref_norm_rows(float *out, const float *x, const float *w, int32_t n_rows, int32_t n, float eps) {
    for (int32_t r = 0; r < n_rows; r++) op_rmsnorm_ref(out + (size_t)r * n, x + (size_t)r * n, w, n, eps);
}

static void test_rmsnorm(void) {
    const float eps = 1e-5f;
    const int32_t n_rows = 11;
    for (int32_t n : {64, 128, 67, 896, 4096}) {
        const size_t sz = (size_t)n_rows * n;
        float *x = (float *)malloc((sz + 4) * sizeof(float)), *w = (float *)malloc(n * sizeof(float));
        float *want = (float *)malloc(sz * sizeof(float)), *got = (float *)malloc(sz * sizeof(float));
        float *got2 = (float *)malloc(sz * sizeof(float));
        ct_fill(x, sz + 4, 11 + n, -2, 2);
        ct_fill(w, n, 12 + n, 0.5f, 1.5f);
        ref_norm_rows(want, x, w, n_rows, n, eps);
        float *dx = up_f(x, sz), *dw = up_f(w, n), *dout = (float *)ct_alloc(sz * sizeof(float));
        CHECK(k_rmsnorm(NULL, dout, dx, NULL, n_rows, dw, n, eps) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got, dout, sz);
        CHECKF(ct_compare(got, want, sz, NORM_ATOL, NORM_RTOL, "rmsnorm") <= 1.0, "n %d", n);

        // batch invariance: each row alone (n_rows 1) gives the batch's bits
        for (int32_t r = 0; r < n_rows; r += 3) {
            CHECK(k_rmsnorm(NULL, dout, dx + (size_t)r * n, NULL, 1, dw, n, eps) == DEV_OK);
            CHECK(ct_sync() == DEV_OK);
            down_f(got2, dout, n);
            CHECKF(same_bits(got2, got + (size_t)r * n, n * sizeof(float)), "rmsnorm row %d alone, n %d", r, n);
        }
        // the gather: listed rows (repeats, any order) give the plain call's bits
        const int32_t rows[6] = {5, 0, 10, 5, 3, 9};
        int32_t *drows = (int32_t *)ct_upload(rows, sizeof rows);
        CHECK(k_rmsnorm(NULL, dout, dx, drows, 6, dw, n, eps) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got2, dout, (size_t)6 * n);
        for (int i = 0; i < 6; i++)
            CHECKF(same_bits(got2 + (size_t)i * n, got + (size_t)rows[i] * n, n * sizeof(float)), "gather %d", i);
        // misaligned rows (the scalar path) give the vector path's bits
        float *dxu = (float *)ct_alloc((sz + 4) * sizeof(float)), *doutu = (float *)ct_alloc((sz + 4) * sizeof(float));
        CHECK(dev_h2d(dxu + 1, x, sz * sizeof(float), NULL) == DEV_OK);
        CHECK(k_rmsnorm(NULL, doutu + 1, dxu + 1, NULL, n_rows, dw, n, eps) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got2, doutu + 1, sz);
        CHECKF(same_bits(got2, got, sz * sizeof(float)), "rmsnorm misaligned n %d", n);

        // fused: x += y; out = norm(x) * w
        float *y = (float *)malloc(sz * sizeof(float)), *xs = (float *)malloc(sz * sizeof(float));
        ct_fill(y, sz, 13 + n, -1, 1);
        for (size_t i = 0; i < sz; i++) xs[i] = x[i] + y[i];
        ref_norm_rows(want, xs, w, n_rows, n, eps);
        float *dy = up_f(y, sz);
        CHECK(k_add_rmsnorm(NULL, dout, dx, dy, dw, n_rows, n, eps) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got, dout, sz);
        down_f(got2, dx, sz);
        CHECKF(same_bits(got2, xs, sz * sizeof(float)), "add_rmsnorm residual n %d (exact)", n);
        CHECKF(ct_compare(got, want, sz, NORM_ATOL, NORM_RTOL, "add_rmsnorm") <= 1.0, "n %d", n);
        // the same bits as k_rmsnorm of the summed x, and as a row alone
        CHECK(k_rmsnorm(NULL, dout, dx, NULL, n_rows, dw, n, eps) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got2, dout, sz);
        CHECKF(same_bits(got2, got, sz * sizeof(float)), "add_rmsnorm == add then rmsnorm, n %d", n);
        const int32_t r1 = n_rows - 2;
        CHECK(dev_h2d(dx + (size_t)r1 * n, x + (size_t)r1 * n, n * sizeof(float), NULL) == DEV_OK);
        CHECK(k_add_rmsnorm(NULL, dout, dx + (size_t)r1 * n, dy + (size_t)r1 * n, dw, 1, n, eps) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got2, dout, n);
        CHECKF(same_bits(got2, got + (size_t)r1 * n, n * sizeof(float)), "add_rmsnorm row alone n %d", n);

        CHECK(k_rmsnorm(NULL, dout, dx, NULL, -1, dw, n, eps) == DEV_ERR);
        CHECK(k_rmsnorm(NULL, dout, dx, NULL, 1, dw, 0, eps) == DEV_ERR);
        CHECK(k_add_rmsnorm(NULL, dout, dx, NULL, dw, 1, n, eps) == DEV_ERR);
        CHECK(k_rmsnorm(NULL, dout, dx, NULL, 0, dw, n, eps) == DEV_OK);
        ct_free(dx), ct_free(dw), ct_free(dout), ct_free(drows), ct_free(dxu), ct_free(doutu), ct_free(dy);
        free(x), free(w), free(want), free(got), free(got2), free(y), free(xs);
    }
}

static void test_head_norm(void) {
    const float eps = 1e-6f;
    for (int32_t n : {64, 128, 66}) {
        const int32_t n_rows = 5 * 14; // 5 tokens of 14 heads: not a multiple of the 4 rows a block
        const size_t sz = (size_t)n_rows * n;
        float *x = (float *)malloc(sz * sizeof(float)), *w = (float *)malloc(n * sizeof(float));
        float *want = (float *)malloc(sz * sizeof(float)), *got = (float *)malloc(sz * sizeof(float));
        float *one = (float *)malloc(n * sizeof(float));
        ct_fill(x, sz, 21 + n, -3, 3);
        ct_fill(w, n, 22 + n, 0.2f, 2.0f);
        ref_norm_rows(want, x, w, n_rows, n, eps);
        float *dx = up_f(x, sz), *dw = up_f(w, n);
        CHECK(k_head_norm(NULL, dx, dw, n_rows, n, eps) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got, dx, sz);
        CHECKF(ct_compare(got, want, sz, NORM_ATOL, NORM_RTOL, "head_norm") <= 1.0, "n %d", n);
        for (int32_t r : {0, 37, n_rows - 1}) { // a row alone: the batch's bits
            CHECK(dev_h2d(dx, x + (size_t)r * n, n * sizeof(float), NULL) == DEV_OK);
            CHECK(k_head_norm(NULL, dx, dw, 1, n, eps) == DEV_OK);
            CHECK(ct_sync() == DEV_OK);
            down_f(one, dx, n);
            CHECKF(same_bits(one, got + (size_t)r * n, n * sizeof(float)), "head_norm row %d alone n %d", r, n);
        }
        CHECK(k_head_norm(NULL, dx, dw, 1, -4, eps) == DEV_ERR);
        CHECK(k_head_norm(NULL, dx, NULL, 1, n, eps) == DEV_ERR);
        ct_free(dx), ct_free(dw);
        free(x), free(w), free(want), free(got), free(one);
    }
}

/* ---- add_bias, add, swiglu ---------------------------------------------------------- */

static void test_add_bias(void) {
    // rows beyond the kernel's 1024 row blocks loop (1030 rows)
    const int32_t shapes[3][2] = {{7, 896}, {7, 130}, {1030, 132}};
    for (const auto &sh : shapes) {
        const int32_t n_rows = sh[0], n = sh[1];
        const size_t sz = (size_t)n_rows * n;
        float *x = (float *)malloc(sz * sizeof(float)), *b = (float *)malloc(n * sizeof(float));
        float *want = (float *)malloc(sz * sizeof(float)), *got = (float *)malloc(sz * sizeof(float));
        ct_fill(x, sz, 31 + n, -2, 2);
        ct_fill(b, n, 32 + n, -1, 1);
        for (int32_t r = 0; r < n_rows; r++)
            for (int32_t i = 0; i < n; i++) want[(size_t)r * n + i] = x[(size_t)r * n + i] + b[i];
        float *dx = up_f(x, sz), *db = up_f(b, n);
        CHECK(k_add_bias(NULL, dx, db, n_rows, n) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got, dx, sz);
        CHECKF(same_bits(got, want, sz * sizeof(float)), "add_bias n %d (exact)", n);
        CHECK(dev_h2d(dx, x + 3 * n, n * sizeof(float), NULL) == DEV_OK); // row 3 alone
        CHECK(k_add_bias(NULL, dx, db, 1, n) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got, dx, n);
        CHECK(same_bits(got, want + 3 * n, n * sizeof(float)));
        CHECK(k_add_bias(NULL, dx, db, -1, n) == DEV_ERR);
        ct_free(dx), ct_free(db);
        free(x), free(b), free(want), free(got);
    }
}

static void test_add_swiglu(void) {
    const int64_t n = 100003; // not a multiple of 4: the float4 path and its tail
    float *x = (float *)malloc((n + 1) * sizeof(float)), *y = (float *)malloc((n + 1) * sizeof(float));
    float *want = (float *)malloc(n * sizeof(float)), *got = (float *)malloc(n * sizeof(float));
    ct_fill(x, n + 1, 41, -8, 8);
    ct_fill(y, n + 1, 42, -2, 2);
    for (int off : {0, 1}) { // aligned (float4) and misaligned (scalar) pointers
        for (int64_t i = 0; i < n; i++) want[i] = x[i] + y[i];
        float *dx = (float *)ct_alloc((n + 1) * sizeof(float)), *dy = (float *)ct_alloc((n + 1) * sizeof(float));
        CHECK(dev_h2d(dx + off, x, n * sizeof(float), NULL) == DEV_OK);
        CHECK(dev_h2d(dy, y, n * sizeof(float), NULL) == DEV_OK);
        CHECK(k_add(NULL, dx + off, dy, n) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got, dx + off, n);
        CHECKF(same_bits(got, want, n * sizeof(float)), "add offset %d (exact)", off);

        // swiglu: gate x, up y; the reference's formula with the device expf: the same bits
        // under the emulation, within 4 ulp (2 for expf, 1 each for the add and the divide)
        // on a GPU: rtol 1e-6
        op_swiglu_ref(want, x, y, (int32_t)n);
        float *dout = (float *)ct_alloc((n + 1) * sizeof(float));
        CHECK(dev_h2d(dx + off, x, n * sizeof(float), NULL) == DEV_OK);
        CHECK(k_swiglu(NULL, dout + off, dx + off, dy, n) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(got, dout + off, n);
        if (CT_EMULATED)
            CHECKF(same_bits(got, want, n * sizeof(float)), "swiglu offset %d (exact under emulation)", off);
        else
            CHECK_CLOSE(got, want, (size_t)n, 1e-30, 1e-6, "swiglu");
        // a short call (one row) gives the long one's bits
        CHECK(k_swiglu(NULL, dout, dx + off + 1000, dy + 1000, 37) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        float part[37];
        down_f(part, dout, 37);
        CHECK(same_bits(part, got + 1000, sizeof part));
        CHECK(k_add(NULL, dx, dy, -1) == DEV_ERR);
        CHECK(k_swiglu(NULL, dout, NULL, dy, 4) == DEV_ERR);
        CHECK(k_swiglu(NULL, dout, dx, dy, 0) == DEV_OK);
        ct_free(dx), ct_free(dy), ct_free(dout);
    }
    free(x), free(y), free(want), free(got);
}

/* ---- RoPE + paged K/V store --------------------------------------------------------- */

typedef struct rope_kind {
    const char *name;
    rope_layout layout;
    int rot_div; // n_rot = head_dim / rot_div
    float base, freq_scale;
    bool llama3;
} rope_kind;

static const rope_kind ROPE_KINDS[] = {
    {"norm", ROPE_NORM, 1, 10000.0f, 1.0f, false},
    {"neox", ROPE_NEOX, 1, 1000000.0f, 1.0f, false},
    {"neox n_rot/2", ROPE_NEOX, 2, 10000.0f, 1.0f, false},
    {"norm n_rot/4 linear", ROPE_NORM, 4, 10000.0f, 0.25f, false},
    {"llama3", ROPE_NORM, 1, 500000.0f, 1.0f, true},
};

// Rotated q/k and the K cache: the same bits under the emulation (the angle is the
// reference's double computation, on the same libm); on a GPU the device's double
// cos/sin may round to a float one ulp off: |x| <= 1 inputs, atol 1e-6. V and every
// byte not written (padding rows, other slots) are compared exactly in both.
static void check_rot(const float *got, const float *want, size_t n, const char *what) {
    if (CT_EMULATED)
        CHECKF(same_bits(got, want, n * sizeof(float)), "%s: bits differ", what);
    else
        CHECK_CLOSE(got, want, n, 1e-6, 0, what);
}

static void rope_case(int32_t hd, int32_t group, int32_t bs, const rope_kind *rk) {
    const int32_t n_kv = 2, n_heads = n_kv * group, q_dim = n_heads * hd, kv_dim = n_kv * hd;
    const int32_t n_blocks = 8, n_slots = n_blocks * bs;
    // A ragged step: a prefill chunk at positions 19..31, a padding row, a decode far out
    // (position 131071: the angle needs double precision), a chunk from position 0, and
    // two padding rows at the end (a batch padded to a graph's size).
    int32_t pos[32], seq[32], T = 0;
    for (int32_t p = 19; p < 32; p++) pos[T] = p, seq[T++] = 0;
    pos[T] = 0, seq[T++] = -1;
    pos[T] = 131071, seq[T++] = 1;
    for (int32_t p = 0; p < 6; p++) pos[T] = p, seq[T++] = 2;
    pos[T] = 0, seq[T++] = -1;
    pos[T] = 0, seq[T++] = -1;
    // slots through block tables: each (sequence, logical block) gets the next block of a
    // shuffled pool at first use
    int32_t perm[8], slots[32], used = 0, map_seq[8], map_lb[8];
    uint64_t s = 51 + (uint64_t)(hd * 100 + group * 10 + bs);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(ct_next(&s) % (uint64_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    for (int32_t t = 0; t < T; t++) {
        if (seq[t] < 0) {
            slots[t] = -1;
            continue;
        }
        const int32_t lb = pos[t] / bs;
        int u = 0;
        while (u < used && !(map_seq[u] == seq[t] && map_lb[u] == lb)) u++;
        if (u == used) map_seq[used] = seq[t], map_lb[used] = lb, used++;
        slots[t] = perm[u] * bs + pos[t] % bs;
    }

    const size_t qn = (size_t)T * q_dim, kn = (size_t)T * kv_dim, cn = (size_t)n_slots * kv_dim;
    float *q = (float *)malloc(qn * 4), *k = (float *)malloc(kn * 4), *v = (float *)malloc(kn * 4);
    float *K0 = (float *)malloc(cn * 4), *V0 = (float *)malloc(cn * 4);
    ct_fill(q, qn, s + 1, -1, 1), ct_fill(k, kn, s + 2, -1, 1), ct_fill(v, kn, s + 3, -1, 1);
    ct_fill(K0, cn, s + 4, -1, 1), ct_fill(V0, cn, s + 5, -1, 1);
    float fdiv[256];
    rope_params rp = {hd, hd / rk->rot_div, rk->layout, rk->base, rk->freq_scale, NULL};
    if (rk->llama3) {
        ct_fill(fdiv, (size_t)rp.n_rot / 2, s + 6, 1.0f, 8.0f);
        rp.freq_div = fdiv;
    }
    // the reference: cpu_fwd_ref's rope_store, skipping padding rows
    float *qw = (float *)malloc(qn * 4), *kw = (float *)malloc(kn * 4);
    float *Kw = (float *)malloc(cn * 4), *Vw = (float *)malloc(cn * 4);
    memcpy(qw, q, qn * 4), memcpy(kw, k, kn * 4), memcpy(Kw, K0, cn * 4), memcpy(Vw, V0, cn * 4);
    for (int32_t t = 0; t < T; t++) {
        op_rope_ref(qw + (size_t)t * q_dim, n_heads, pos[t], &rp);
        op_rope_ref(kw + (size_t)t * kv_dim, n_kv, pos[t], &rp);
        if (slots[t] < 0) continue;
        memcpy(Kw + (size_t)slots[t] * kv_dim, kw + (size_t)t * kv_dim, kv_dim * 4);
        memcpy(Vw + (size_t)slots[t] * kv_dim, v + (size_t)t * kv_dim, kv_dim * 4);
    }

    float *dq = up_f(q, qn), *dk = up_f(k, kn), *dv = up_f(v, kn), *dK = up_f(K0, cn), *dV = up_f(V0, cn);
    int32_t *dpos = (int32_t *)ct_upload(pos, T * 4), *dslot = (int32_t *)ct_upload(slots, T * 4);
    float *dfdiv = rk->llama3 ? up_f(fdiv, (size_t)rp.n_rot / 2) : NULL;
    const k_rope kr = {rp.head_dim, rp.n_rot, (int32_t)rp.layout, rp.base, rp.freq_scale};
    CHECK(k_rope_store(NULL, dq, dk, dv, dK, dV, dpos, dslot, T, n_heads, n_kv, kr, dfdiv) == DEV_OK);
    CHECK(ct_sync() == DEV_OK);
    float *gq = (float *)malloc(qn * 4), *gk = (float *)malloc(kn * 4);
    float *gK = (float *)malloc(cn * 4), *gV = (float *)malloc(cn * 4);
    down_f(gq, dq, qn), down_f(gk, dk, kn), down_f(gK, dK, cn), down_f(gV, dV, cn);
    char what[128];
    snprintf(what, sizeof what, "rope %s hd %d group %d bs %d", rk->name, hd, group, bs);
    check_rot(gq, qw, qn, what);
    check_rot(gk, kw, kn, what);
    CHECKF(same_bits(gV, Vw, cn * 4), "%s: v cache", what);
    bool written[256] = {false};
    for (int32_t t = 0; t < T; t++)
        if (slots[t] >= 0) written[slots[t]] = true;
    for (int32_t sl = 0; sl < n_slots; sl++) {
        const size_t o = (size_t)sl * kv_dim;
        if (written[sl])
            check_rot(gK + o, Kw + o, kv_dim, what);
        else // padding rows and slots of no token: the bytes are untouched
            CHECKF(same_bits(gK + o, K0 + o, kv_dim * 4) && same_bits(gV + o, V0 + o, kv_dim * 4),
                   "%s: slot %d changed", what, sl);
    }

    // batch invariance: each token alone (n_tokens 1, fresh inputs and caches) writes the
    // batch's bits
    float *aq = (float *)malloc((size_t)q_dim * 4), *ak = (float *)malloc((size_t)kv_dim * 4);
    float *aK = (float *)malloc(cn * 4);
    for (int32_t t = 0; t < T; t++) {
        CHECK(dev_h2d(dq, q + (size_t)t * q_dim, q_dim * 4, NULL) == DEV_OK);
        CHECK(dev_h2d(dk, k + (size_t)t * kv_dim, kv_dim * 4, NULL) == DEV_OK);
        CHECK(dev_h2d(dK, K0, cn * 4, NULL) == DEV_OK);
        CHECK(k_rope_store(NULL, dq, dk, dv + (size_t)t * kv_dim, dK, dV, dpos + t, dslot + t, 1, n_heads,
                           n_kv, kr, dfdiv) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        down_f(aq, dq, q_dim), down_f(ak, dk, kv_dim), down_f(aK, dK, cn);
        CHECKF(same_bits(aq, gq + (size_t)t * q_dim, q_dim * 4) && same_bits(ak, gk + (size_t)t * kv_dim, kv_dim * 4),
               "%s: token %d alone", what, t);
        if (slots[t] >= 0)
            CHECKF(same_bits(aK + (size_t)slots[t] * kv_dim, gK + (size_t)slots[t] * kv_dim, kv_dim * 4),
                   "%s: token %d alone, cache", what, t);
        else
            CHECKF(same_bits(aK, K0, cn * 4), "%s: padding token %d alone wrote", what, t);
    }

    ct_free(dq), ct_free(dk), ct_free(dv), ct_free(dK), ct_free(dV), ct_free(dpos), ct_free(dslot);
    if (dfdiv) ct_free(dfdiv);
    free(q), free(k), free(v), free(K0), free(V0), free(qw), free(kw), free(Kw), free(Vw);
    free(gq), free(gk), free(gK), free(gV), free(aq), free(ak), free(aK);
}

static void test_rope_store(void) {
    for (int32_t hd : {64, 128})
        for (int32_t group : {1, 4, 8})
            for (int32_t bs : {16, 32})
                for (const rope_kind &rk : ROPE_KINDS) rope_case(hd, group, bs, &rk);
}

// k_rope_store_kv, every non-f32 dtype: the rotated q and k are k_rope_store's bits, and
// each written (slot, KV head) row holds exactly the bytes kv_store_row writes for the
// rotated f32 row (INT8: its scale too); rows of other slots are untouched. The v rows
// carry the codecs' edge cases: NaN, +-inf, values past f16's and fp8's range, f16 and
// fp8 subnormals, an all-zero row (INT8 scale 0), ties.
static void test_rope_store_kv(void) {
    const int32_t hd = 64, n_heads = 8, n_kv = 2, T = 5, n_slots = 12, kv_dim = n_kv * hd, q_dim = n_heads * hd;
    const int32_t pos[T] = {0, 7, 300, 12, 4095}, slots[T] = {3, -1, 0, 11, 6};
    const size_t qn = (size_t)T * q_dim, kn = (size_t)T * kv_dim, rows = (size_t)n_slots * n_kv;
    std::vector<float> q(qn), k(kn), v(kn);
    ct_fill(q.data(), qn, 41, -2, 2), ct_fill(k.data(), kn, 42, -2, 2), ct_fill(v.data(), kn, 43, -3, 3);
    const float edge[] = {NAN, INFINITY, -INFINITY, 1e30f, -70000.0f, 65520.0f, 500.0f, -449.0f,
                          3e-8f, 1e-42f, 0.0f, -0.0f, 0.0009765625f, 0.001953125f * 1.0625f, 1.5f * 0.0078125f, 6e-5f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) v[(size_t)hd + 3 * i] = edge[i]; // token 0, head 1
    for (int32_t i = 0; i < hd; i++) v[(size_t)3 * kv_dim + i] = 0.0f;                         // token 3, head 0
    for (int32_t i = 0; i < hd; i++) v[(size_t)2 * kv_dim + hd + i] = (float)(i - 32) * 0.5f;  // ties for int8
    const k_rope kr = {hd, hd, K_ROPE_NEOX, 10000.0f, 1.0f};
    int32_t *dpos = (int32_t *)ct_upload(pos, sizeof pos), *dslot = (int32_t *)ct_upload(slots, sizeof slots);
    // the f32 path: rotated q, k and the f32 rows
    float *dq = up_f(q.data(), qn), *dk = up_f(k.data(), kn), *dv = up_f(v.data(), kn);
    float *dK = (float *)ct_alloc(rows * hd * 4), *dV = (float *)ct_alloc(rows * hd * 4);
    CHECK(k_rope_store(NULL, dq, dk, dv, dK, dV, dpos, dslot, T, n_heads, n_kv, kr, NULL) == DEV_OK);
    CHECK(ct_sync() == DEV_OK);
    std::vector<float> fq(qn), fk(kn), fK(rows * hd), fV(rows * hd);
    down_f(fq.data(), dq, qn), down_f(fk.data(), dk, kn), down_f(fK.data(), dK, rows * hd), down_f(fV.data(), dV, rows * hd);
    const backend_kv_dtype ds[] = {BACKEND_KV_F16, BACKEND_KV_BF16, BACKEND_KV_INT8, BACKEND_KV_FP8};
    for (backend_kv_dtype d : ds) {
        const size_t eb = (size_t)hd * k_kv_elem_bytes((int32_t)d), rb = backend_kv_row_bytes(d, hd);
        std::vector<uint8_t> init(rows * eb, 0xA5), got_k(rows * eb), got_v(rows * eb);
        std::vector<float> init_s(rows, -7.0f), got_ks(rows), got_vs(rows);
        k_kv c = {ct_upload(init.data(), init.size()), ct_upload(init.data(), init.size()),
                  (float *)ct_upload(init_s.data(), rows * 4), (float *)ct_upload(init_s.data(), rows * 4), (int32_t)d};
        if (d != BACKEND_KV_INT8) ct_free(c.k_scale), ct_free(c.v_scale), c.k_scale = c.v_scale = NULL;
        CHECK(dev_h2d(dq, q.data(), qn * 4, NULL) == DEV_OK && dev_h2d(dk, k.data(), kn * 4, NULL) == DEV_OK);
        CHECK(k_rope_store_kv(NULL, dq, dk, dv, &c, dpos, dslot, T, n_heads, n_kv, kr, NULL) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        std::vector<float> gq(qn), gk(kn);
        down_f(gq.data(), dq, qn), down_f(gk.data(), dk, kn);
        CHECKF(same_bits(gq.data(), fq.data(), qn * 4) && same_bits(gk.data(), fk.data(), kn * 4), "kv %s: rope",
               backend_kv_dtype_name(d));
        CHECK(dev_d2h(got_k.data(), c.k, rows * eb, NULL) == DEV_OK && dev_d2h(got_v.data(), c.v, rows * eb, NULL) == DEV_OK);
        if (c.k_scale)
            CHECK(dev_d2h(got_ks.data(), c.k_scale, rows * 4, NULL) == DEV_OK &&
                  dev_d2h(got_vs.data(), c.v_scale, rows * 4, NULL) == DEV_OK);
        CHECK(ct_sync() == DEV_OK);
        bool written[n_slots] = {false};
        for (int32_t t = 0; t < T; t++)
            if (slots[t] >= 0) written[slots[t]] = true;
        std::vector<uint8_t> want(rb);
        for (size_t r = 0; r < rows; r++) {
            const int32_t sl = (int32_t)(r / n_kv);
            for (int pv = 0; pv < 2; pv++) {
                const uint8_t *g = (pv ? got_v : got_k).data() + r * eb;
                const float gs = (pv ? got_vs : got_ks)[r];
                if (!written[sl]) {
                    CHECKF(same_bits(g, init.data(), eb) && (d != BACKEND_KV_INT8 || gs == -7.0f),
                           "kv %s: slot %d written", backend_kv_dtype_name(d), sl);
                    continue;
                }
                kv_store_row(d, want.data(), (pv ? fV : fK).data() + r * hd, hd);
                CHECKF(same_bits(g, want.data(), eb), "kv %s: %s row %zu", backend_kv_dtype_name(d), pv ? "v" : "k", r);
                if (d == BACKEND_KV_INT8)
                    CHECKF(same_bits(&gs, want.data() + eb, 4), "kv int8: %s scale of row %zu: %g", pv ? "v" : "k", r, gs);
            }
        }
        ct_free(c.k), ct_free(c.v), ct_free(c.k_scale), ct_free(c.v_scale);
    }
    // refused: an unknown dtype, INT8 without scales
    k_kv bad = {dK, dV, NULL, NULL, 9};
    CHECK(k_rope_store_kv(NULL, dq, dk, dv, &bad, dpos, dslot, T, n_heads, n_kv, kr, NULL) == DEV_ERR);
    bad.dtype = K_KV_INT8;
    CHECK(k_rope_store_kv(NULL, dq, dk, dv, &bad, dpos, dslot, T, n_heads, n_kv, kr, NULL) == DEV_ERR);
    CHECK(k_rope_store_kv(NULL, dq, dk, dv, NULL, dpos, dslot, T, n_heads, n_kv, kr, NULL) == DEV_ERR);
    ct_free(dq), ct_free(dk), ct_free(dv), ct_free(dK), ct_free(dV), ct_free(dpos), ct_free(dslot);
}

static void test_rope_args(void) {
    float *d = (float *)ct_alloc(4096 * sizeof(float));
    int32_t zero[2] = {0, 0};
    int32_t *di = (int32_t *)ct_upload(zero, sizeof zero);
    const k_rope ok = {64, 64, K_ROPE_NORM, 10000.0f, 1.0f};
    CHECK(k_rope_store(NULL, d, d + 1024, d + 2048, d + 3072, d + 3584, di, di, 1, 2, 1, ok, NULL) == DEV_OK);
    CHECK(ct_sync() == DEV_OK);
    CHECK(k_rope_store(NULL, d, d, d, d, d, di, di, 0, 2, 1, ok, NULL) == DEV_OK);
    k_rope bad = ok;
    bad.n_rot = 63; // odd
    CHECK(k_rope_store(NULL, d, d, d, d, d, di, di, 1, 2, 1, bad, NULL) == DEV_ERR);
    bad = ok, bad.n_rot = 66; // > head_dim
    CHECK(k_rope_store(NULL, d, d, d, d, d, di, di, 1, 2, 1, bad, NULL) == DEV_ERR);
    bad = ok, bad.head_dim = 1024, bad.n_rot = 1024; // beyond the kernel's shared table
    CHECK(k_rope_store(NULL, d, d, d, d, d, di, di, 1, 2, 1, bad, NULL) == DEV_ERR);
    bad = ok;
    bad.layout = 7; // a layout we do not know
    CHECK(k_rope_store(NULL, d, d, d, d, d, di, di, 1, 2, 1, bad, NULL) == DEV_ERR);
    CHECK(k_rope_store(NULL, d, d, d, d, d, di, di, -1, 2, 1, ok, NULL) == DEV_ERR);
    CHECK(k_rope_store(NULL, d, d, d, d, d, di, di, 1, 0, 1, ok, NULL) == DEV_ERR);
    CHECK(k_rope_store(NULL, d, d, d, NULL, d, di, di, 1, 2, 1, ok, NULL) == DEV_ERR);
    ct_free(d), ct_free(di);
}

#if CT_EMULATED
static void test_no_faults(void) { CHECK(ifd_simt::n_faults() == 0); }
#endif

TEST_MAIN(T(test_embed), T(test_rmsnorm), T(test_head_norm), T(test_add_bias), T(test_add_swiglu),
          T(test_rope_store), T(test_rope_store_kv), T(test_rope_args)
#if CT_EMULATED
              ,
          T(test_no_faults)
#endif
)
