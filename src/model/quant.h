/* quant.h — weight formats we compute with, in plain C (the reference).
 *
 * Every supported type has a row dequantizer and a dot product with an f32 vector that
 * dequantizes in registers, block by block, accumulating in f32 in a fixed order (the
 * reference every optimized kernel is tested against). Thread-safe (pure functions). */
#ifndef INFERD_QUANT_H
#define INFERD_QUANT_H
#include "../util/layer/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ggml_types.h"

#define QK8_0 32
#define QK4_0 32
#define QK_K 256

typedef uint16_t ifd_fp16;
typedef uint16_t ifd_bf16;

typedef struct block_q8_0 {
    ifd_fp16 d;
    int8_t qs[QK8_0];
} block_q8_0;

typedef struct block_q4_0 {
    ifd_fp16 d;
    uint8_t qs[QK4_0 / 2]; /* low nibbles: elements 0..15, high nibbles: 16..31 */
} block_q4_0;

typedef struct block_q5_0 {
    ifd_fp16 d;
    uint8_t qh[4];        /* fifth bit of each of the 32 elements */
    uint8_t qs[QK4_0 / 2]; /* low nibbles: elements 0..15, high nibbles: 16..31 */
} block_q5_0;

typedef struct block_q4_K {
    ifd_fp16 d;
    ifd_fp16 dmin;
    uint8_t scales[12]; /* 8 six-bit scales and mins, packed */
    uint8_t qs[QK_K / 2];
} block_q4_K;

typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    ifd_fp16 d;
} block_q6_K;

float ifd_fp16_to_f32(ifd_fp16 h);
ifd_fp16 ifd_f32_to_fp16(float f);
float ifd_bf16_to_f32(ifd_bf16 h);
ifd_bf16 ifd_f32_to_bf16(float f);

/* Can we compute with (dot/dequantize) this type? */
bool quant_type_supported(ggml_type t);
/* Bytes of one row of n elements (n a multiple of the block size). */
size_t quant_row_bytes(ggml_type t, int64_t n);

/* Reference row kernels. n must be a multiple of the type's block size. */
void quant_dequantize_row_ref(ggml_type t, const void *row, float *out, int64_t n);
float quant_dot_ref(ggml_type t, const void *row, const float *x, int64_t n);

/* Quantize (reference, round-to-nearest like ggml's reference quantizers). */
void quant_quantize_row_q8_0(const float *x, block_q8_0 *out, int64_t n);
void quant_quantize_row_q4_0(const float *x, block_q4_0 *out, int64_t n);

#endif
