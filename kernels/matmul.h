/* matmul.h — the matmul kernels of the CUDA backend: out[t][r] = dot(weight row r, x[t])
 * for every weight type inferd reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS and inferd's I8_G64/G128, I4_G64/G128), the
 * contract of op_matmul_ref (src/backend/cpu/ops_ref.c) on a device copy of a wmat.
 *
 * Weights are repacked once at backend start (k_matmul_prepare, host side) into the
 * layout the kernels read with 16-byte loads; quantized weights stay quantized there
 * (the same bytes per element as in the GGUF file; Q3_K 2 bytes more per 256 elements)
 * and are dequantized in registers.
 * The prepared layout is described in matmul.cu.
 *
 * Batch invariance: every launch shape (decode, skinny, token-tiled) computes out[t][r]
 * with the same sequence of fp32 operations — one warp per output element, lane l owns
 * the 8- or 32-element units l, l+32, l+64, ... of the row, accumulates them in that
 * order with fmaf, and the warp sums its lanes with one fixed xor butterfly. So the bits
 * of a row's result do not depend on n_tokens, on the other rows of x, nor on the path.
 *
 * Launchers are not thread-safe against the same stream (one thread drives a device). */
#ifndef INFERD_KERNELS_MATMUL_H
#define INFERD_KERNELS_MATMUL_H

#include "devrt.h"
#include "simt.h"

IFD_NS_BEGIN

/* Host side, once per matrix at backend start: bytes of the device layout (0: type
 * unsupported or sizes invalid), and the repack of the GGUF bytes (n_rows rows of the
 * type's row bytes, contiguous) into a host buffer of that size (the backend uploads
 * it). DEV_ERR: type unsupported, sizes invalid or a NULL pointer. */
size_t k_matmul_prepared_bytes(int type, int64_t n_rows, int64_t n_cols);
int k_matmul_prepare(void *dst, const void *gguf_data, int type, int64_t n_rows, int64_t n_cols);

typedef struct k_wmat {
    const void *data; /* device, prepared layout, 16-byte aligned (256 best) */
    int type;         /* ggml type value */
    int64_t n_rows, n_cols;
} k_wmat;

/* Scratch the matmul launchers need for up to max_tokens rows of up to max_cols columns
 * (0 today: nothing is staged outside the kernels; callers may pass NULL). */
size_t k_matmul_scratch_bytes(int32_t max_tokens, int64_t max_cols);

/* out[t][r] = w_r . x[t]; x: [n_tokens][n_cols], out: [n_tokens][n_rows], device f32.
 * DEV_ERR (nothing launched) on an unsupported type, bad sizes or NULL pointers;
 * n_tokens == 0 is DEV_OK with nothing done. */
int k_matmul(dev_stream s, float *out, const k_wmat *w, const float *x, int32_t n_tokens,
             void *scratch, size_t scratch_bytes);

/* The matmuls of up to K_MATMUL_MAX_GROUP matrices that share x, their type and n_cols
 * (q/k/v, gate/up) in one launch: outs[i][t][r] = ws[i]_r . x[t]. Each output element
 * has the same bits as k_matmul gives it. */
#define K_MATMUL_MAX_GROUP 4
int k_matmul_group(dev_stream s, int n, float *const *outs, const k_wmat *const *ws, const float *x,
                   int32_t n_tokens, void *scratch, size_t scratch_bytes);

IFD_NS_END

#endif
