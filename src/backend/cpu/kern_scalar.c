/* kern_scalar.c — the plain C kernel table: the fallback for CPUs without AVX2 (and
 * INFERD_CPU=scalar). It has no matmul micro-kernels, so kern_gemm_rows runs the
 * reference dot per element: this level is bit-identical to the reference ops while
 * still using the thread pool.
 * Thread-safe (no state). */
#include <math.h>
#include <string.h>

#include "../../model/quant.h"
#include "kern.h"

static void sc_attn(float *out, const float *q, int32_t g, int32_t n_keys, const kv_view *kv,
                    int32_t kvh, const int32_t *block_table, float scale, float *scratch) {
    const int32_t hd = kv->head_dim, bs = kv->block_size;
    const size_t slot_stride = (size_t)kv->n_kv_heads * hd;
    for (int32_t h = 0; h < g; h++) {
        const float *qh = q + (size_t)h * hd;
        float *sc = scratch + (size_t)h * n_keys, max = -INFINITY;
        for (int32_t p = 0; p < n_keys; p++) {
            const size_t slot = (size_t)block_table[p / bs] * bs + p % bs;
            const float *kp = kv->k + slot * slot_stride + (size_t)kvh * hd;
            float s = 0.0f;
            for (int32_t d = 0; d < hd; d++) s += qh[d] * kp[d];
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
            const size_t slot = (size_t)block_table[p / bs] * bs + p % bs;
            const float *vp = kv->v + slot * slot_stride + (size_t)kvh * hd;
            const float wgt = sc[p] * inv;
            for (int32_t d = 0; d < hd; d++) oh[d] += wgt * vp[d];
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
