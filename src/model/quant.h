/* quant.h — weight formats we compute with, in plain C (the reference).
 *
 * One traits entry per supported type (quant_traits_of) holds every per-type fact the
 * rest of the code needs: block geometry, the reference row dequantizer, the reference
 * dot with an f32 vector (dequantizes block by block, accumulates in f32 in a fixed
 * order: the ground truth every optimized kernel is tested against), the reference
 * quantizer where there is one, and which activation format the fast kernels want.
 * Adding a type is one entry here plus its kernels. Thread-safe (pure functions). */
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

typedef struct block_q4_1 {
    ifd_fp16 d, m;          /* w = d * q + m */
    uint8_t qs[QK4_0 / 2]; /* low nibbles: elements 0..15, high nibbles: 16..31 */
} block_q4_1;

typedef struct block_q5_1 {
    ifd_fp16 d, m;          /* w = d * q + m, q five bits */
    uint8_t qh[4];
    uint8_t qs[QK4_0 / 2];
} block_q5_1;

/* IQ4_NL: 32 four-bit indices into a fixed non-linear table (quant_iq4nl_values), w = d * v. */
typedef struct block_iq4_nl {
    ifd_fp16 d;
    uint8_t qs[QK4_0 / 2];
} block_iq4_nl;
extern const int8_t quant_iq4nl_values[16];

typedef struct block_q2_K {
    uint8_t scales[QK_K / 16]; /* per 16 elements: low nibble scale, high nibble min */
    uint8_t qs[QK_K / 4];      /* 2-bit quants */
    ifd_fp16 d, dmin;
} block_q2_K;

typedef struct block_q3_K {
    uint8_t hmask[QK_K / 8]; /* third bit (set = no -4 offset) */
    uint8_t qs[QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];      /* 16 six-bit scales, packed */
    ifd_fp16 d;
} block_q3_K;

typedef struct block_q5_K {
    ifd_fp16 d, dmin;
    uint8_t scales[12]; /* as Q4_K */
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;

typedef struct block_iq4_xs {
    ifd_fp16 d;
    uint16_t scales_h;         /* high 2 bits of the 8 six-bit sub-block scales */
    uint8_t scales_l[QK_K / 64]; /* low 4 bits */
    uint8_t qs[QK_K / 2];      /* IQ4_NL table indices, 16 bytes per 32 elements */
} block_iq4_xs;

typedef struct block_q4_K {
    ifd_fp16 d;
    ifd_fp16 dmin;
    uint8_t scales[12]; /* 8 six-bit scales and mins, packed */
    uint8_t qs[QK_K / 2];
} block_q4_K;
/* Sub-block j (0..7) of a Q4_K super-block: its 6-bit scale and minimum, unpacked from
 * the 12 packed scale bytes (the one decoder; the reference and the weight packers use it). */
void quant_q4_K_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    ifd_fp16 d;
} block_q6_K;

/* inferd's INT8 / INT4 weight-only layouts (group sizes 64 and 128; group 32 is Q8_0 /
 * Q4_1). INT8: symmetric, w = d * q. INT4: asymmetric (the GPTQ/AWQ grid), w = d * q + m
 * with q in 0..15 and m = -d * z the fp16 value of the zero point z. The quants of a
 * group are G / 32 sub-blocks of 32 in Q8_0 / Q4_1 order (INT4: 16 bytes per sub-block,
 * low nibbles its elements 0..15, high nibbles 16..31), so the integer-dot kernels read
 * them 32 elements at a time against Q8_32 activations. */
typedef struct block_i8_g64 {
    ifd_fp16 d;
    int8_t qs[64];
} block_i8_g64;
typedef struct block_i8_g128 {
    ifd_fp16 d;
    int8_t qs[128];
} block_i8_g128;
typedef struct block_i4_g64 {
    ifd_fp16 d, m;
    uint8_t qs[32];
} block_i4_g64;
typedef struct block_i4_g128 {
    ifd_fp16 d, m;
    uint8_t qs[64];
} block_i4_g128;

/* byte-exact ggml layouts (ggml-common.h) */
#ifdef __cplusplus
#define QUANT_STATIC_ASSERT static_assert
#else
#define QUANT_STATIC_ASSERT _Static_assert
#endif
QUANT_STATIC_ASSERT(sizeof(block_q8_0) == 34 && sizeof(block_q4_0) == 18 && sizeof(block_q5_0) == 22, "layout");
QUANT_STATIC_ASSERT(sizeof(block_q4_1) == 20 && sizeof(block_q5_1) == 24 && sizeof(block_iq4_nl) == 18, "layout");
QUANT_STATIC_ASSERT(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110 && sizeof(block_q4_K) == 144, "layout");
QUANT_STATIC_ASSERT(sizeof(block_i8_g64) == 66 && sizeof(block_i8_g128) == 130, "layout");
QUANT_STATIC_ASSERT(sizeof(block_i4_g64) == 36 && sizeof(block_i4_g128) == 68, "layout");
QUANT_STATIC_ASSERT(sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210 && sizeof(block_iq4_xs) == 136, "layout");

float ifd_fp16_to_f32(ifd_fp16 h);
ifd_fp16 ifd_f32_to_fp16(float f);
float ifd_bf16_to_f32(ifd_bf16 h);
ifd_bf16 ifd_f32_to_bf16(float f);

/* The activation rows the fast (SIMD) matmul kernels of a weight type read. */
typedef enum quant_act {
    QUANT_ACT_F32 = 0, /* the f32 rows as they are */
    QUANT_ACT_Q8_32,   /* int8 in blocks of 32 with an f32 scale per block (integer dot) */
} quant_act;

typedef struct quant_traits {
    ggml_type type;
    const char *name;
    uint32_t block_size;  /* elements per block */
    uint32_t block_bytes; /* bytes per block */
    /* reference row kernels; n a multiple of block_size */
    void (*dequantize_row)(const void *row, float *out, int64_t n);
    float (*dot)(const void *row, const float *x, int64_t n);
    /* reference quantizer (round to nearest; K-quants: a scale search), or NULL */
    void (*quantize_row)(const float *x, void *row, int64_t n);
    quant_act act;
    /* QUANT_ACT_Q8_32: how the stored quants q relate to the weight's integer value v */
    bool q_signed;   /* q stored as int8, v = q (Q8_0) */
    uint8_t q_zero;  /* unsigned q: v = q - q_zero (Q4_0 8, Q6_K 32; 0 when none) */
    uint8_t q_group; /* elements sharing one scale, over which the zero correction sums
                      * the activations (32; Q6_K 16) */
    bool q_min;      /* a float minimum per 32-element sub-block (Q4_K: w = d*sc*q - dmin*m):
                      * the activations carry d_a * sum(a) per block (per 16 elements
                      * when q_group is 16: Q2_K) */
} quant_traits;

/* The traits of a type we can compute with, or NULL. */
const quant_traits *quant_traits_of(ggml_type t);

/* Can we compute with (dot/dequantize) this type? (quant_traits_of(t) != NULL) */
bool quant_type_supported(ggml_type t);
/* Bytes of one row of n elements (n a multiple of the block size). */
size_t quant_row_bytes(ggml_type t, int64_t n);

/* Reference row kernels (through the traits). n must be a multiple of the block size. */
void quant_dequantize_row_ref(ggml_type t, const void *row, float *out, int64_t n);
float quant_dot_ref(ggml_type t, const void *row, const float *x, int64_t n);

/* Quantize (reference, round-to-nearest like ggml's reference quantizers). */
void quant_quantize_row_q8_0(const float *x, block_q8_0 *out, int64_t n);
void quant_quantize_row_q4_0(const float *x, block_q4_0 *out, int64_t n);
void quant_quantize_row_q4_1(const float *x, block_q4_1 *out, int64_t n);
void quant_quantize_row_q5_0(const float *x, block_q5_0 *out, int64_t n);
void quant_quantize_row_q5_1(const float *x, block_q5_1 *out, int64_t n);
void quant_quantize_row_iq4_nl(const float *x, block_iq4_nl *out, int64_t n);
/* K-quants (quant_kq.c): per sub-block a scale (and minimum) from a weighted
 * least-squares search over candidate grids (llama.cpp's approach), the sub-block scales
 * quantized against the super-block's fp16 d (and dmin), the quants recomputed with
 * the rounded scales. Finite output for any finite input (scales saturate at the fp16
 * range). n a multiple of QK_K. The quant_kq_row_* are the same with the traits'
 * signature (quant_traits.quantize_row). */
void quant_quantize_row_q2_K(const float *x, block_q2_K *out, int64_t n);
void quant_quantize_row_q3_K(const float *x, block_q3_K *out, int64_t n);
void quant_quantize_row_q4_K(const float *x, block_q4_K *out, int64_t n);
void quant_quantize_row_q5_K(const float *x, block_q5_K *out, int64_t n);
void quant_quantize_row_q6_K(const float *x, block_q6_K *out, int64_t n);
void quant_kq_row_q2_K(const float *x, void *row, int64_t n);
void quant_kq_row_q3_K(const float *x, void *row, int64_t n);
void quant_kq_row_q4_K(const float *x, void *row, int64_t n);
void quant_kq_row_q5_K(const float *x, void *row, int64_t n);
void quant_kq_row_q6_K(const float *x, void *row, int64_t n);
/* INT8 / INT4 at group g (32: Q8_0 / Q4_1 blocks; 64, 128: the IFD_TYPE_I* blocks):
 * INT8 d = amax / 127, q = round(x / d); INT4 d = (max - min) / 15, m = min (both in
 * fp16), q = round((x - m) / d) clamped to 0..15, computed with the fp16-rounded d, m. */
void quant_quantize_row_int8(const float *x, void *out, int64_t n, int g);
void quant_quantize_row_int4(const float *x, void *out, int64_t n, int g);
/* The weight type of --quantize int8|int4 at group size g (32, 64, 128), or
 * GGML_TYPE_COUNT_ when g is not one of them. */
ggml_type quant_int_type(int bits, int g);

#endif
