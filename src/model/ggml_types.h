/* ggml_types.h — the GGUF/ggml tensor element types and their block geometry.
 *
 * Only geometry lives here (so the GGUF reader can size every tensor, even of types
 * we cannot compute with). Compute support is in quant.h. Thread-safe. */
#ifndef INFERD_GGML_TYPES_H
#define INFERD_GGML_TYPES_H
#include "../util/layer/model.h"

#include <stdint.h>
#include <stdbool.h>

typedef enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_MXFP4 = 39,
    /* inferd's own weight-only layouts (--quantize int8|int4 at group sizes 64 / 128;
     * group 32 is Q8_0 / Q4_1). Not ggml types: a GGUF file may name them only when it
     * declares them (gguf.c), and llama.cpp cannot read them. */
    IFD_TYPE_I8_G64 = 40,   /* symmetric int8, fp16 scale per 64 */
    IFD_TYPE_I8_G128 = 41,  /* symmetric int8, fp16 scale per 128 */
    IFD_TYPE_I4_G64 = 42,   /* asymmetric uint4, fp16 scale and minimum per 64 */
    IFD_TYPE_I4_G128 = 43,  /* asymmetric uint4, fp16 scale and minimum per 128 */
    GGML_TYPE_COUNT_ = 44,
} ggml_type;

typedef struct ggml_type_info {
    const char *name;     /* NULL for ids that are not a known type */
    uint32_t block_size;  /* elements per block */
    uint32_t type_bytes;  /* bytes per block */
} ggml_type_info;

/* Geometry of a type id read from a file; returns NULL for unknown ids. */
const ggml_type_info *ggml_type_get(uint32_t type);

#endif
