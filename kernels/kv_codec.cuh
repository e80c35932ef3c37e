/* kv_codec.cuh — the KV cache's element conversions on the device: the same encodings
 * as src/backend/kv_dtype.c (the reference), operation for operation, so that a row
 * stored by k_rope_store_kv holds the bytes kv_store_row would write (integer steps, and
 * the few float steps rounded exactly as IEEE: x * 512 exact, divisions __fdiv_rn,
 * rintf nearest even). Header-only; included by elementwise.cu and attention.cu.
 *
 * f16 / bf16: nearest even, inf stays inf, NaN stays NaN; INT8: q = nearest even of
 * x / s clamped to +-127 (NaN -> 0), s = amax / 127 over the finite elements; FP8 E4M3
 * (OCP FN): nearest even, saturating at +-448, NaN -> 0x7F | sign. */
#ifndef INFERD_KERNELS_KV_CODEC_CUH
#define INFERD_KERNELS_KV_CODEC_CUH

#include "simt.h"

IFD_NS_BEGIN

__device__ __forceinline__ uint16_t kvc_f16_from_f32(float f) {
    const uint32_t x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return (uint16_t)sign;
        const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    const uint32_t r = ax - 0x38000000u;
    uint32_t out = r >> 13;
    const uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (out & 1))) out++;
    return (uint16_t)(sign | out);
}

__device__ __forceinline__ float kvc_f16_to_f32(uint32_t h) {
    /* exact: normal and subnormal halves widen without rounding */
    const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        const float f = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */
        return sign ? -f : f;
    }
    return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}

__device__ __forceinline__ uint16_t kvc_bf16_from_f32(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

__device__ __forceinline__ float kvc_bf16_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

__device__ __forceinline__ uint8_t kvc_fp8_from_f32(float x) {
    const uint32_t u = __float_as_uint(x), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7eu);
    if (a < 0x3c800000u) return (uint8_t)(sign | (uint32_t)rintf(__uint_as_float(a) * 512.0f));
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    uint32_t c = (((r >> 23) - 120) << 3) | ((r >> 20) & 7u);
    if (c > 0x7eu) c = 0x7eu;
    return (uint8_t)(sign | c);
}

__device__ __forceinline__ float kvc_fp8_to_f32(uint32_t c) {
    const uint32_t sign = (c & 0x80u) << 24, e = (c >> 3) & 15u, m = c & 7u;
    if ((c & 0x7fu) == 0x7fu) return __uint_as_float(sign | 0x7fc00000u);
    if (e == 0) {
        const float f = (float)m * (1.0f / 512.0f);
        return sign ? -f : f;
    }
    return __uint_as_float(sign | ((e + 120) << 23) | (m << 20));
}

/* kv_dtype.c's int8_round: NaN -> 0, clamp to +-127, nearest even. */
__device__ __forceinline__ int8_t kvc_int8_round(float v) {
    if (v != v) return 0;
    v = fminf(fmaxf(v, -127.0f), 127.0f);
    return (int8_t)rintf(v);
}

/* The INT8 store of one element given the row's scale s (kv_store_row's loop body). */
__device__ __forceinline__ int8_t kvc_int8_from_f32(float v, float s) {
    return kvc_int8_round(s > 0.0f ? __fdiv_rn(v, s) : (isinf(v) ? v : 0.0f));
}

IFD_NS_END

#endif
