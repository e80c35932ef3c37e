/* kv_dtype.c — the KV cache's element conversions (see kv_dtype.h): plain C, one
 * function per direction and dtype, shared by the reference and the fast CPU paths.
 * Thread-safe (no state). */
#include "kv_dtype.h"

#include <float.h>
#include <math.h>

#include "../model/quant.h"

uint8_t kv_fp8_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7f;   /* NaN */
    if (a >= 0x43e00000u) return sign | 0x7e;  /* >= 448 (inf too): saturate */
    if (a < 0x3c800000u) {                     /* below 2^-6: subnormal steps of 2^-9 */
        float f;
        memcpy(&f, &a, 4);
        /* f * 512 is exact; nearest even; 8 steps is the smallest normal (code 0x08) */
        return (uint8_t)(sign | (uint8_t)nearbyintf(f * 512.0f));
    }
    /* normal: round the f32 mantissa to 3 bits, nearest even (a carry bumps the
     * exponent, which is what it should do) */
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1);
    uint32_t c = (((r >> 23) - 120) << 3) | ((r >> 20) & 7);
    if (c > 0x7e) c = 0x7e; /* [440, 448) may round up to 448, never past it */
    return (uint8_t)(sign | c);
}

float kv_fp8_to_f32(uint8_t c) {
    const uint32_t sign = (uint32_t)(c & 0x80) << 24, e = (c >> 3) & 15, m = c & 7;
    uint32_t b;
    float f;
    if ((c & 0x7f) == 0x7f) {
        b = sign | 0x7fc00000u;
    } else if (e == 0) {
        f = (float)m * (1.0f / 512.0f);
        return sign ? -f : f;
    } else {
        b = sign | ((e + 120) << 23) | (m << 20);
    }
    memcpy(&f, &b, 4);
    return f;
}

static int8_t int8_round(float v) {
    if (v != v) return 0;
    if (v > 127.0f) v = 127.0f;
    if (v < -127.0f) v = -127.0f;
    return (int8_t)nearbyintf(v);
}

void kv_store_row(backend_kv_dtype d, void *dst, const float *x, int32_t n) {
    uint8_t *o = dst;
    switch (d) {
    case BACKEND_KV_F16:
        for (int32_t i = 0; i < n; i++) {
            const uint16_t h = ifd_f32_to_fp16(x[i]);
            memcpy(o + 2 * (size_t)i, &h, 2);
        }
        return;
    case BACKEND_KV_BF16:
        for (int32_t i = 0; i < n; i++) {
            const uint16_t h = ifd_f32_to_bf16(x[i]);
            memcpy(o + 2 * (size_t)i, &h, 2);
        }
        return;
    case BACKEND_KV_INT8: {
        float amax = 0.0f;
        for (int32_t i = 0; i < n; i++) {
            const float a = fabsf(x[i]);
            if (a > amax && a <= FLT_MAX) amax = a; /* NaN and inf left out */
        }
        const float s = amax / 127.0f;
        for (int32_t i = 0; i < n; i++) {
            const float v = x[i];
            /* s == 0 (all zero, or amax below 127 denormal steps): store 0, or the
             * clamp for an infinity */
            o[i] = (uint8_t)int8_round(s > 0.0f ? v / s : (isinf(v) ? v : 0.0f));
        }
        memcpy(o + n, &s, sizeof s);
        return;
    }
    case BACKEND_KV_FP8:
        for (int32_t i = 0; i < n; i++) o[i] = kv_fp8_from_f32(x[i]);
        return;
    default: memcpy(o, x, (size_t)n * sizeof(float)); return;
    }
}

void kv_store_heads(backend_kv_dtype d, uint8_t *dst, size_t head_stride, const float *x,
                    int32_t n_heads, int32_t n) {
    for (int32_t h = 0; h < n_heads; h++)
        kv_store_row(d, dst + (size_t)h * head_stride, x + (size_t)h * n, n);
}

void kv_load_row(backend_kv_dtype d, const void *src, float *y, int32_t n) {
    const uint8_t *row = src;
    const float f = kv_row_factor(d, row, n);
    for (int32_t i = 0; i < n; i++) y[i] = kv_load_elem(d, row, i) * f;
}
