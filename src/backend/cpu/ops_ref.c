/* ops_ref.c — plain C reference ops: simple loops, f32 accumulation in a fixed order.
 * These are the ground truth for every optimized CPU kernel and every CUDA kernel;
 * keep them obvious. Thread-safe (no state). */
#include <math.h>
#include <string.h>

#include "../../model/quant.h"
#include "../kv_dtype.h"
#include "ops.h"

void op_rmsnorm_ref(float *out, const float *x, const float *w, int32_t n, float eps) {
    float ss = 0.0f;
    for (int32_t i = 0; i < n; i++) ss += x[i] * x[i];
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int32_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void op_matmul_ref(float *out, const float *x, const wmat *w, int32_t n_tokens) {
    for (int32_t t = 0; t < n_tokens; t++) {
        const float *xt = x + (size_t)t * w->n_cols;
        float *ot = out + (size_t)t * w->n_rows;
        for (int64_t r = 0; r < w->n_rows; r++)
            ot[r] = quant_dot_ref(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes,
                                  xt, w->n_cols);
    }
}

void op_rope_ref(float *x, int32_t n_heads, int32_t pos, const rope_params *rp) {
    const int32_t half = rp->n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        double theta = (double)pos * rp->freq_scale * pow((double)rp->base, -2.0 * i / rp->n_rot);
        if (rp->freq_div) theta /= rp->freq_div[i];
        const float c = (float)cos(theta), s = (float)sin(theta);
        for (int32_t h = 0; h < n_heads; h++) {
            float *xh = x + (size_t)h * rp->head_dim;
            int32_t a, b;
            if (rp->layout == ROPE_NORM) {
                a = 2 * i;
                b = 2 * i + 1;
            } else {
                a = i;
                b = i + half;
            }
            const float x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * c - x1 * s;
            xh[b] = x0 * s + x1 * c;
        }
    }
}

void op_swiglu_ref(float *out, const float *gate, const float *up, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void op_attention_ref(float *out, const float *q, int32_t n_q, const int32_t *pos,
                      int32_t n_heads, const kv_view *kv, const int32_t *block_table,
                      float *scratch) {
    const int32_t hd = kv->head_dim, group = n_heads / kv->n_kv_heads;
    const backend_kv_dtype dt = kv->dtype;
    const size_t rb = kv_view_row_bytes(kv);
    const uint8_t *K = kv->k, *V = kv->v;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int32_t i = 0; i < n_q; i++) {
        const int32_t n_keys = pos[i] + 1;
        for (int32_t h = 0; h < n_heads; h++) {
            const int32_t kvh = h / group;
            const float *qh = q + ((size_t)i * n_heads + h) * hd;
            float *oh = out + ((size_t)i * n_heads + h) * hd;
            float max = -INFINITY;
            for (int32_t p = 0; p < n_keys; p++) {
                const int32_t slot = block_table[p / kv->block_size] * kv->block_size +
                                     p % kv->block_size;
                const uint8_t *kp = K + kv_row_index(kv, slot, kvh) * rb;
                const float f = kv_row_factor(dt, kp, hd);
                float s = 0.0f;
                for (int32_t d = 0; d < hd; d++) s += qh[d] * (kv_load_elem(dt, kp, d) * f);
                s *= scale;
                scratch[p] = s;
                if (s > max) max = s;
            }
            float sum = 0.0f;
            for (int32_t p = 0; p < n_keys; p++) {
                scratch[p] = expf(scratch[p] - max);
                sum += scratch[p];
            }
            const float inv = 1.0f / sum;
            memset(oh, 0, (size_t)hd * sizeof(float));
            for (int32_t p = 0; p < n_keys; p++) {
                const int32_t slot = block_table[p / kv->block_size] * kv->block_size +
                                     p % kv->block_size;
                const uint8_t *vp = V + kv_row_index(kv, slot, kvh) * rb;
                const float f = kv_row_factor(dt, vp, hd);
                const float wgt = scratch[p] * inv;
                for (int32_t d = 0; d < hd; d++) oh[d] += wgt * (kv_load_elem(dt, vp, d) * f);
            }
        }
    }
}
