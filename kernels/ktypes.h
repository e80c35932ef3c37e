/* ktypes.h — the few model facts the kernels need, stated here so that nothing under
 * kernels/ includes src/ (DESIGN.md): the GGUF type ids of the weight formats the
 * kernels read, their block shapes, and the RoPE parameters. The backend glue
 * (src/backend/cuda/cuda_backend.cu) checks at compile time that these agree with
 * src/model/. */
#ifndef INFERD_KERNELS_KTYPES_H
#define INFERD_KERNELS_KTYPES_H

#include <stdint.h>

enum k_type {
    K_F32 = 0,
    K_F16 = 1,
    K_Q4_0 = 2,
    K_Q4_1 = 3,
    K_Q5_0 = 6,
    K_Q5_1 = 7,
    K_Q8_0 = 8,
    K_Q2_K = 10,
    K_Q3_K = 11,
    K_Q4_K = 12,
    K_Q5_K = 13,
    K_Q6_K = 14,
    K_IQ4_NL = 20,
    K_IQ4_XS = 23,
    K_BF16 = 30,
    K_I8_G64 = 40, /* inferd's own INT8 / INT4 group types (src/model/ggml_types.h) */
    K_I8_G128 = 41,
    K_I4_G64 = 42,
    K_I4_G128 = 43,
};
/* elements and bytes per block */
enum {
    K_QK8_0 = 32, K_Q8_0_BYTES = 34,
    K_QK4_0 = 32, K_Q4_0_BYTES = 18, K_Q4_1_BYTES = 20, K_IQ4_NL_BYTES = 18,
    K_QK5_0 = 32, K_Q5_0_BYTES = 22, K_Q5_1_BYTES = 24,
    K_QK_K = 256, K_Q4_K_BYTES = 144, K_Q6_K_BYTES = 210,
    K_Q2_K_BYTES = 84, K_Q3_K_BYTES = 110, K_Q5_K_BYTES = 176, K_IQ4_XS_BYTES = 136,
    K_I8_G64_BYTES = 66, K_I8_G128_BYTES = 130, K_I4_G64_BYTES = 36, K_I4_G128_BYTES = 68,
};

/* The KV cache's element types: src/backend/backend.h's backend_kv_dtype (same values,
 * same row encodings: kv_dtype.c is the reference the kernels match bit for bit). */
enum k_kv_dtype { K_KV_F32 = 0, K_KV_F16 = 1, K_KV_BF16 = 2, K_KV_INT8 = 3, K_KV_FP8 = 4 };
/* One layer's paged K and V pools on the device: rows r = slot * n_kv_heads + kv_head of
 * head_dim elements, row r at k + r * head_dim * k_kv_elem_bytes(dtype) (16-byte aligned
 * pools; every row is then 4-byte aligned at least, as head_dim % 32 == 0). INT8 keeps
 * the row's f32 scale apart, at k_scale[r] / v_scale[r] (NULL for the other dtypes), so
 * that rows stay aligned for vector loads. */
typedef struct k_kv {
    void *k, *v;
    float *k_scale, *v_scale;
    int32_t dtype; /* k_kv_dtype */
} k_kv;
static inline int32_t k_kv_elem_bytes(int32_t dtype) {
    return dtype == K_KV_F32 ? 4 : (dtype == K_KV_F16 || dtype == K_KV_BF16) ? 2 : 1;
}

enum k_rope_layout { K_ROPE_NORM = 0, K_ROPE_NEOX = 1 };
/* RoPE of one model (src/backend/forward.h's rope_params without the host pointer). */
typedef struct k_rope {
    int32_t head_dim;
    int32_t n_rot;   /* rotated dims (<= head_dim, even) */
    int32_t layout;  /* k_rope_layout */
    float base;
    float freq_scale; /* 1 / linear factor */
} k_rope;

#endif
