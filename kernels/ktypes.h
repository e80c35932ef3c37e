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
    K_Q5_0 = 6,
    K_Q8_0 = 8,
    K_Q4_K = 12,
    K_Q6_K = 14,
    K_BF16 = 30,
};
/* elements and bytes per block */
enum {
    K_QK8_0 = 32, K_Q8_0_BYTES = 34,
    K_QK4_0 = 32, K_Q4_0_BYTES = 18,
    K_QK5_0 = 32, K_Q5_0_BYTES = 22,
    K_QK_K = 256, K_Q4_K_BYTES = 144, K_Q6_K_BYTES = 210,
};

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
