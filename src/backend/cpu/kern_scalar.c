/* kern_scalar.c — the plain C kernel table: the fallback for CPUs without AVX2 (and
 * INFERD_CPU=scalar). It has no matmul micro-kernels, so kern_gemm_rows runs the
 * reference dot per element: this level is bit-identical to the reference ops while
 * still using the thread pool.
 * Thread-safe (no state). */
#include <math.h>
#include <string.h>

#include "../../model/quant.h"
#include "../kv_dtype.h"
#include "kern.h"

/* The reference's arithmetic (op_attention_ref) per query head, at every KV dtype. */
static void sc_attn(float *out, const float *q, int32_t g, int32_t n_keys, const kv_view *kv,
                    int32_t kvh, const int32_t *block_table, float scale, float *scratch) {
    const int32_t hd = kv->head_dim, bs = kv->block_size;
    const backend_kv_dtype dt = kv->dtype;
    const size_t rb = kv_view_row_bytes(kv);
    const uint8_t *K = kv->k, *V = kv->v;
    for (int32_t h = 0; h < g; h++) {
        const float *qh = q + (size_t)h * hd;
        float *sc = scratch + (size_t)h * n_keys, max = -INFINITY;
        for (int32_t p = 0; p < n_keys; p++) {
            const int32_t slot = block_table[p / bs] * bs + p % bs;
            const uint8_t *kp = K + kv_row_index(kv, slot, kvh) * rb;
            const float f = kv_row_factor(dt, kp, hd);
            float s = 0.0f;
            for (int32_t d = 0; d < hd; d++) s += qh[d] * (kv_load_elem(dt, kp, d) * f);
            sc[p] = s * scale;
            if (sc[p] > max) max = sc[p];
        }
        float sum = 0.0f;
        for (int32_t p = 0; p < n_keys; p++) {
            sc[p] = expf(sc[p] - max);
            sum += sc[p];
        }
        const float inv = 1.0f / sum;
        float *oh = out + (size_t)h * hd;
        memset(oh, 0, (size_t)hd * sizeof(float));
        for (int32_t p = 0; p < n_keys; p++) {
            const int32_t slot = block_table[p / bs] * bs + p % bs;
            const uint8_t *vp = V + kv_row_index(kv, slot, kvh) * rb;
            const float f = kv_row_factor(dt, vp, hd);
            const float wgt = sc[p] * inv;
            for (int32_t d = 0; d < hd; d++) oh[d] += wgt * (kv_load_elem(dt, vp, d) * f);
        }
    }
}

const kern_table kern_scalar_table = {
    .level = CPU_LEVEL_SCALAR,
    /* no gemm micro-kernels: kern_gemm_rows runs the reference dot per element */
    .rmsnorm = op_rmsnorm_ref,
    .swiglu = op_swiglu_ref,
    .attn = sc_attn,
};
