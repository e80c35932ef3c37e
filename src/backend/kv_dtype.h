/* kv_dtype.h — the one place the KV cache's element types are converted: f32 rows to
 * the stored form (RoPE-and-store of the reference and the fast CPU ops both call
 * kv_store_row) and stored elements back to f32 (the reference attention and the
 * scalar kernels; the SIMD kernels convert in registers and are tested against these).
 * Row layouts: backend.h (backend_kv_dtype).
 *
 * Every function is defined for every input: NaN and infinities never trap or hit
 * undefined behaviour (f16 / bf16: IEEE rounding, inf stays inf, NaN stays NaN; INT8:
 * NaN stores 0, +-inf the row's extreme, the scale comes from the finite elements;
 * FP8: NaN stores 0x7F (sign kept), everything beyond +-448, inf included, stores
 * +-448). Pure functions: thread-safe. */
#ifndef INFERD_KV_DTYPE_H
#define INFERD_KV_DTYPE_H
#include "../util/layer/backend.h"

#include <stdint.h>
#include <string.h>

#include "../model/quant.h" /* ifd_fp16_to_f32 */
#include "backend.h"

#define KV_FP8_MAX 448.0f

/* FP8 E4M3 (OCP): nearest even, saturating; NaN -> 0x7F | sign. */
uint8_t kv_fp8_from_f32(float x);
/* Exact; 0x7F / 0xFF -> NaN. */
float kv_fp8_to_f32(uint8_t c);

/* INT8 with scale s: q = nearest even of x / s clamped to [-127, 127] (NaN -> 0). */
static inline float kv_int8_scale(const uint8_t *row, int32_t n) {
    float s;
    memcpy(&s, row + n, sizeof s);
    return s;
}

/* What every element of a stored row is multiplied by: INT8: its scale; else 1. */
static inline float kv_row_factor(backend_kv_dtype d, const uint8_t *row, int32_t n) {
    return d == BACKEND_KV_INT8 ? kv_int8_scale(row, n) : 1.0f;
}

/* Store one row x[n] (one token's one KV head) as dtype d at dst
 * (backend_kv_row_bytes(d, n) bytes; no alignment needed). */
void kv_store_row(backend_kv_dtype d, void *dst, const float *x, int32_t n);
/* Every KV head of one token: x[n_heads][n] into n_heads rows, row h at
 * dst + h * head_stride bytes. */
void kv_store_heads(backend_kv_dtype d, uint8_t *dst, size_t head_stride, const float *x,
                    int32_t n_heads, int32_t n);
/* The f32 values of one stored row (tests, debugging). */
void kv_load_row(backend_kv_dtype d, const void *src, float *y, int32_t n);

/* Element i of a stored row, without the INT8 scale (q as a float; multiply by
 * kv_int8_scale) — what the reference loops read. */
static inline float kv_load_elem(backend_kv_dtype d, const uint8_t *row, int32_t i) {
    switch (d) {
    case BACKEND_KV_F16: {
        uint16_t h;
        memcpy(&h, row + 2 * (size_t)i, 2);
        return ifd_fp16_to_f32(h);
    }
    case BACKEND_KV_BF16: {
        uint16_t h;
        memcpy(&h, row + 2 * (size_t)i, 2);
        const uint32_t b = (uint32_t)h << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case BACKEND_KV_INT8: return (float)(int8_t)row[i];
    case BACKEND_KV_FP8: return kv_fp8_to_f32(row[i]);
    default: {
        float f;
        memcpy(&f, row + 4 * (size_t)i, 4);
        return f;
    }
    }
}

#endif
