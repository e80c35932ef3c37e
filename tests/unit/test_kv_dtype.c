/* test_kv_dtype.c — the KV cache element conversions (src/backend/kv_dtype.c) and the
 * dtype names, sizes and row order (backend.h, ops.h kv_row_index), without a model.
 *
 * Bounds asserted (from the formats, not from a run):
 *  - FP8 E4M3: every finite code round-trips exactly; a stored value is the nearest
 *    code (ties to the even code); |err| <= 2^-4 |x| for normals, <= 2^-10 in the
 *    subnormal range; beyond +-448 (inf too) saturates; NaN -> 0x7F with its sign.
 *  - F16: |err| <= 2^-11 |x| (normals), BF16: <= 2^-8 |x|; ties to even; inf / NaN kept.
 *  - INT8: scale = amax / 127 of the row's finite elements; |err| <= scale / 2 per
 *    element (plus the float rounding of x / scale: a few ulps); NaN stores 0. */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "backend/kv_dtype.h"
#include "test_util.h"
#include "util/common.h"

static uint32_t rng = 4242;
static float frand(void) { /* uniform in [-1, 1), never exactly 0 */
    rng = rng * 1664525u + 1013904223u;
    float f = ((float)(rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
    return f == 0.0f ? 0.5f : f;
}

static float bits_f(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static void test_fp8_codes(void) {
    /* every finite code decodes to a value that encodes back to it; values increase
     * with the code; 0x7F / 0xFF are NaN */
    int bad = 0;
    float prev = -1.0f;
    for (int c = 0; c < 256; c++) {
        const float v = kv_fp8_to_f32((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            CHECKF(isnan(v), "code %#x is not NaN", c);
            continue;
        }
        bad += kv_fp8_from_f32(v) != (uint8_t)c;
        if (c < 0x80) {
            bad += !(v > prev || (c == 0 && v == 0.0f));
            prev = v;
        } else {
            bad += kv_fp8_to_f32((uint8_t)c) != -kv_fp8_to_f32((uint8_t)(c & 0x7f));
        }
    }
    CHECKF(bad == 0, "%d fp8 codes do not round-trip / order", bad);
    CHECK(kv_fp8_to_f32(0x7e) == 448.0f && kv_fp8_to_f32(0x08) == ldexpf(1.0f, -6));
    CHECK(kv_fp8_to_f32(0x01) == ldexpf(1.0f, -9) && kv_fp8_to_f32(0x38) == 1.0f);
    CHECK(signbit(kv_fp8_to_f32(0x80)) && kv_fp8_to_f32(0x80) == 0.0f);
}

static void test_fp8_rounding(void) {
    /* nearest code, ties to even, relative / absolute bounds, over magnitudes from the
     * subnormal range to the top */
    int bad_near = 0, bad_bound = 0;
    for (int i = 0; i < 200000; i++) {
        const float x = frand() * ldexpf(1.0f, (int)(i % 20) - 11); /* |x| < 2^-11 .. 2^8 */
        const uint8_t c = kv_fp8_from_f32(x);
        const float d = kv_fp8_to_f32(c), err = fabsf(d - x);
        /* no other finite code is strictly nearer */
        for (int k = -1; k <= 1; k += 2) {
            const int nb = (c & 0x7f) + k;
            if (nb < 0 || nb > 0x7e) continue;
            const float o = kv_fp8_to_f32((uint8_t)((c & 0x80) | nb));
            if (fabsf(o - x) < err) bad_near++;
        }
        if (fabsf(x) >= ldexpf(1.0f, -6) ? err > ldexpf(fabsf(x), -4) : err > ldexpf(1.0f, -10))
            bad_bound++;
    }
    CHECKF(bad_near == 0, "%d values not stored as the nearest fp8 code", bad_near);
    CHECKF(bad_bound == 0, "%d values past the fp8 error bound", bad_bound);
    /* ties: 1 + 2^-4 lies halfway between 1 (0x38, even) and 1.125 (0x39): -> 0x38;
     * 1 + 3 * 2^-4 between 0x39 and 0x3A (even): -> 0x3A; in the subnormals 2.5 * 2^-9 -> 2 * 2^-9 */
    CHECK(kv_fp8_from_f32(1.0625f) == 0x38 && kv_fp8_from_f32(1.1875f) == 0x3a);
    CHECK(kv_fp8_from_f32(2.5f / 512.0f) == 0x02 && kv_fp8_from_f32(3.5f / 512.0f) == 0x04);
    CHECK(kv_fp8_from_f32(-1.0625f) == 0xb8);
    /* 7.5 * 2^-9 (between the top subnormal and the smallest normal, tie -> 8 = 0x08) */
    CHECK(kv_fp8_from_f32(7.5f / 512.0f) == 0x08);
    /* saturation and the specials */
    CHECK(kv_fp8_from_f32(448.0f) == 0x7e && kv_fp8_from_f32(460.0f) == 0x7e);
    CHECK(kv_fp8_from_f32(1e6f) == 0x7e && kv_fp8_from_f32(-1e30f) == 0xfe);
    CHECK(kv_fp8_from_f32(INFINITY) == 0x7e && kv_fp8_from_f32(-INFINITY) == 0xfe);
    CHECK(kv_fp8_from_f32(FLT_MAX) == 0x7e);
    CHECK((kv_fp8_from_f32(NAN) & 0x7f) == 0x7f && kv_fp8_from_f32(-NAN) == 0xff);
    CHECK(kv_fp8_from_f32(bits_f(0x7fc00001u)) == 0x7f); /* a NaN payload */
    /* f32 denormals and tiny values round to (signed) zero */
    CHECK(kv_fp8_from_f32(1e-40f) == 0x00 && kv_fp8_from_f32(-1e-40f) == 0x80);
    CHECK(kv_fp8_from_f32(ldexpf(1.0f, -11)) == 0x00); /* a quarter of the 2^-9 step */
    CHECK(kv_fp8_from_f32(ldexpf(1.0f, -10) * 1.01f) == 0x01);
}

/* One row of n of dtype d through store and load. */
static void round_trip(backend_kv_dtype d, const float *x, float *y, int32_t n) {
    uint8_t buf[4096];
    CHECK(backend_kv_row_bytes(d, n) <= sizeof buf);
    memset(buf, 0xa5, sizeof buf);
    kv_store_row(d, buf, x, n);
    kv_load_row(d, buf, y, n);
}

static void test_half_types(void) {
    enum { N = 256 };
    float x[N], y[N];
    const backend_kv_dtype ds[2] = {BACKEND_KV_F16, BACKEND_KV_BF16};
    const int mant[2] = {10, 7};
    for (int k = 0; k < 2; k++) {
        int bad = 0;
        for (int rep = 0; rep < 200; rep++) {
            for (int i = 0; i < N; i++) x[i] = frand() * ldexpf(1.0f, rep % 24 - 12);
            round_trip(ds[k], x, y, N);
            for (int i = 0; i < N; i++)
                /* f16 has subnormals below 2^-14 (steps of 2^-24) */
                if (fabsf(y[i] - x[i]) > fmaxf(ldexpf(fabsf(x[i]), -(mant[k] + 1)), k ? 0.0f : ldexpf(1.0f, -25)))
                    bad++;
        }
        CHECKF(bad == 0, "%s: %d elements past half an ulp", backend_kv_dtype_name(ds[k]), bad);
        /* ties to even: 1 + half an ulp -> 1; 1 + 3 half ulps -> 1 + 2 ulps */
        const float ulp = ldexpf(1.0f, -mant[k]);
        x[0] = 1.0f + ulp / 2;
        x[1] = 1.0f + 3 * ulp / 2;
        x[2] = INFINITY;
        x[3] = -INFINITY;
        x[4] = NAN;
        x[5] = 1e-40f; /* an f32 denormal */
        x[6] = -0.0f;
        round_trip(ds[k], x, y, 8);
        CHECK(y[0] == 1.0f && y[1] == 1.0f + 2 * ulp);
        CHECK(isinf(y[2]) && y[2] > 0 && isinf(y[3]) && y[3] < 0 && isnan(y[4]));
        CHECK(isfinite(y[5]) && fabsf(y[5]) <= 1e-39f && y[6] == 0.0f && signbit(y[6]));
    }
    /* f16 overflows to inf (IEEE rounding, as F16C does), bf16 keeps f32's range */
    x[0] = 1e5f;
    round_trip(BACKEND_KV_F16, x, y, 1);
    CHECK(isinf(y[0]));
    round_trip(BACKEND_KV_BF16, x, y, 1);
    CHECK(fabsf(y[0] - 1e5f) <= 1e5f / 256);
}

static void test_int8(void) {
    enum { N = 128 };
    float x[N], y[N];
    uint8_t buf[N + 4];
    int bad = 0;
    for (int rep = 0; rep < 500; rep++) {
        const float mag = ldexpf(1.0f, rep % 40 - 20);
        for (int i = 0; i < N; i++) x[i] = frand() * mag;
        kv_store_row(BACKEND_KV_INT8, buf, x, N);
        float amax = 0;
        for (int i = 0; i < N; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float s = kv_int8_scale(buf, N);
        CHECK(s == amax / 127.0f);
        kv_load_row(BACKEND_KV_INT8, buf, y, N);
        for (int i = 0; i < N; i++) {
            if (fabsf(y[i] - x[i]) > s * 0.5f * (1 + 1e-4f)) bad++;
            if ((int8_t)buf[i] < -127) bad++;
        }
    }
    CHECKF(bad == 0, "int8: %d elements past half a step", bad);
    /* the row's extreme stores +-127 exactly */
    for (int i = 0; i < N; i++) x[i] = frand();
    x[17] = -2.0f;
    kv_store_row(BACKEND_KV_INT8, buf, x, N);
    CHECK((int8_t)buf[17] == -127 && kv_int8_scale(buf, N) == 2.0f / 127.0f);
    /* zeros: scale 0, every value 0 */
    memset(x, 0, sizeof x);
    round_trip(BACKEND_KV_INT8, x, y, N);
    for (int i = 0; i < N; i++) CHECK(y[i] == 0.0f);
    /* NaN stores 0, infinities the row's extreme; the scale from the finite ones */
    for (int i = 0; i < N; i++) x[i] = frand();
    x[0] = 0.75f;
    for (int i = 1; i < N; i++) x[i] = fminf(fmaxf(x[i], -0.7f), 0.7f);
    x[3] = NAN;
    x[4] = INFINITY;
    x[5] = -INFINITY;
    kv_store_row(BACKEND_KV_INT8, buf, x, N);
    CHECK(kv_int8_scale(buf, N) == 0.75f / 127.0f);
    CHECK(buf[3] == 0 && (int8_t)buf[4] == 127 && (int8_t)buf[5] == -127 && (int8_t)buf[0] == 127);
    /* all non-finite / all denormal rows: no trap, finite results */
    for (int i = 0; i < N; i++) x[i] = i % 2 ? NAN : INFINITY;
    round_trip(BACKEND_KV_INT8, x, y, N);
    for (int i = 0; i < N; i++) CHECK(isfinite(y[i]));
    for (int i = 0; i < N; i++) x[i] = (i % 3 - 1) * 1e-44f;
    round_trip(BACKEND_KV_INT8, x, y, N);
    for (int i = 0; i < N; i++) CHECK(isfinite(y[i]) && fabsf(y[i]) <= 2e-44f);
    /* unaligned rows (the scale is read with memcpy) */
    uint8_t ub[N + 8];
    for (int i = 0; i < N; i++) x[i] = frand();
    kv_store_row(BACKEND_KV_INT8, ub + 1, x, 37);
    kv_load_row(BACKEND_KV_INT8, ub + 1, y, 37);
    for (int i = 0; i < 37; i++) CHECK(fabsf(y[i] - x[i]) <= kv_int8_scale(ub + 1, 37));
}

static void test_fp8_rows(void) {
    enum { N = 64 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = frand() * 600.0f; /* some beyond 448 */
    x[0] = NAN;
    x[1] = -INFINITY;
    round_trip(BACKEND_KV_FP8, x, y, N);
    CHECK(isnan(y[0]) && y[1] == -448.0f);
    for (int i = 2; i < N; i++) {
        const float t = fminf(fmaxf(x[i], -448.0f), 448.0f);
        CHECK(fabsf(y[i] - t) <= fmaxf(ldexpf(fabsf(t), -4), ldexpf(1.0f, -10)));
    }
    CHECK(backend_kv_row_bytes(BACKEND_KV_FP8, N) == N);
}

static void test_names_sizes(void) {
    char err[256];
    backend_kv_dtype d = BACKEND_KV_F32;
    CHECK(backend_kv_dtype_parse(NULL, &d, err, sizeof err) == IFD_OK && d == BACKEND_KV_AUTO);
    CHECK(backend_kv_dtype_parse("auto", &d, err, sizeof err) == IFD_OK && d == BACKEND_KV_AUTO);
    for (int i = 0; i < BACKEND_KV_N_DTYPES; i++) {
        const char *n = backend_kv_dtype_name((backend_kv_dtype)i);
        CHECK(backend_kv_dtype_parse(n, &d, err, sizeof err) == IFD_OK && d == (backend_kv_dtype)i);
    }
    CHECK(backend_kv_dtype_parse("f64", &d, err, sizeof err) == IFD_ERR_INVALID);
    CHECKF(strstr(err, "f64") != NULL, "%s", err);
    CHECK(backend_kv_dtype_parse("INT8 ", &d, err, sizeof err) == IFD_ERR_INVALID);
    CHECK(!strcmp(backend_kv_dtype_name((backend_kv_dtype)77), "?"));
    /* auto: f16 on the CPU, bf16 on CUDA / EMU; explicit values as they are */
    CHECK(backend_kv_dtype_resolve(BACKEND_CPU, BACKEND_KV_AUTO) == BACKEND_KV_F16);
    CHECK(backend_kv_dtype_resolve(BACKEND_CUDA, BACKEND_KV_AUTO) == BACKEND_KV_BF16);
    CHECK(backend_kv_dtype_resolve(BACKEND_EMU, BACKEND_KV_AUTO) == BACKEND_KV_BF16);
    CHECK(backend_kv_dtype_resolve(BACKEND_CPU, BACKEND_KV_INT8) == BACKEND_KV_INT8);
    CHECK(backend_kv_dtype_resolve(BACKEND_EMU, BACKEND_KV_F32) == BACKEND_KV_F32);
    /* every backend stores every dtype */
    for (int i = BACKEND_KV_AUTO; i < BACKEND_KV_N_DTYPES; i++) {
        CHECK(backend_kv_dtype_check(BACKEND_CPU, (backend_kv_dtype)i, err, sizeof err) == IFD_OK);
        CHECK(backend_kv_dtype_check(BACKEND_EMU, (backend_kv_dtype)i, err, sizeof err) == IFD_OK);
        CHECK(backend_kv_dtype_check(BACKEND_CUDA, (backend_kv_dtype)i, err, sizeof err) == IFD_OK);
    }
    CHECK(backend_kv_dtype_check(BACKEND_EMU, (backend_kv_dtype)5, err, sizeof err) == IFD_ERR_INVALID);
    CHECK(backend_kv_dtype_check(BACKEND_CPU, (backend_kv_dtype)9, err, sizeof err) == IFD_ERR_INVALID);
    /* bytes per row of 64 */
    CHECK(backend_kv_row_bytes(BACKEND_KV_F32, 64) == 256 && backend_kv_row_bytes(BACKEND_KV_F16, 64) == 128);
    CHECK(backend_kv_row_bytes(BACKEND_KV_BF16, 64) == 128 && backend_kv_row_bytes(BACKEND_KV_INT8, 64) == 68);
    CHECK(backend_kv_row_bytes(BACKEND_KV_FP8, 64) == 64);
}

/* The blocked row order keeps a block's rows of one head contiguous; slot order is the
 * f32 layout [slot][n_kv_heads]. */
static void test_row_order(void) {
    const kv_view slot = {.n_kv_heads = 3, .head_dim = 8, .block_size = 4};
    kv_view blk = slot;
    blk.blocked = 1;
    CHECK(kv_row_index(&slot, 9, 2) == 9 * 3 + 2);
    for (int32_t b = 0; b < 5; b++)
        for (int32_t h = 0; h < 3; h++)
            for (int32_t o = 0; o < 4; o++)
                CHECK(kv_row_index(&blk, b * 4 + o, h) == ((size_t)b * 3 + h) * 4 + o);
    /* every (slot, head) of 5 blocks maps to a distinct row of the 60 */
    int seen[60] = {0};
    for (int32_t s = 0; s < 20; s++)
        for (int32_t h = 0; h < 3; h++) {
            const size_t r = kv_row_index(&blk, s, h);
            CHECK(r < 60);
            if (r < 60) seen[r]++;
        }
    for (int i = 0; i < 60; i++) CHECK(seen[i] == 1);
}

TEST_MAIN(T(test_fp8_codes), T(test_fp8_rounding), T(test_half_types), T(test_int8),
          T(test_fp8_rows), T(test_names_sizes), T(test_row_order))
