/* elementwise.cu — row and element kernels of the CUDA backend (see elementwise.h):
 * embedding gather, RMSNorm (plain, gathered, fused with the residual add), the per-head
 * q/k norm, bias add, residual add, SwiGLU, and RoPE fused with the paged K/V write.
 *
 * Shapes of work:
 *   - element ops: a grid-stride loop over float4s (when every pointer is 16-byte aligned
 *     and the count allows) or floats, 256 threads a block; add_bias: a 2-D grid, columns
 *     by x and rows by y (the bias element loaded once per thread);
 *   - rmsnorm: one block per row, its size chosen from n only; each thread sums the
 *     squares of its 4-float chunks (c = tid, tid + B, ...), warps reduce by xor
 *     butterflies, and every thread adds the warps' partials in warp order: a fixed
 *     tree per n, whatever the row count or which rows are gathered;
 *   - head_norm: one warp per row (rows of head_dim are short), 4 rows a block;
 *   - embed: one block per token, threads over the row's elements (coalesced writes),
 *     each element dequantized from its own block's bytes;
 *   - rope_store: one block per token: the token's cos/sin pairs into shared memory
 *     first (double, as the reference), then q and k pairs rotated, then the k and v
 *     rows copied to their cache slot.
 * Device code rounds each product where the reference does (mul_rn below): nvcc would
 * otherwise fuse a*b - c into one FMA and differ from the C loop in the last bit. */
#include "simt.h"

#include <string.h>

#include "elementwise.h"
#include "kv_codec.cuh"

extern "C" {
#include "ktypes.h"
}

IFD_NS_BEGIN

namespace {

constexpr int EW_THREADS = 256;       /* element ops */
constexpr int EW_MAX_BLOCKS = 4096;   /* grid-stride beyond this */
constexpr int BIAS_MAX_ROW_BLOCKS = 1024; /* add_bias: grid.y, rows beyond it loop */
constexpr int NORM_MAX_THREADS = 512; /* rmsnorm block: up to this, from n */
constexpr int HN_ROWS = 4;            /* head_norm: rows (warps) per block */
constexpr int EMB_THREADS = 256;
constexpr int ROPE_THREADS = 256;
constexpr int ROPE_MAX_HEAD_DIM = 512;


/* Products and sums rounded one at a time (no contraction into an FMA on the device). */
__device__ __forceinline__ float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__device__ __forceinline__ float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
__device__ __forceinline__ float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
static inline int ew_blocks(int64_t work) {
    int64_t b = (work + EW_THREADS - 1) / EW_THREADS;
    return (int)(b < 1 ? 1 : (b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : b));
}

__device__ __forceinline__ int64_t gtid() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t gstride() { return (int64_t)gridDim.x * blockDim.x; }

/* ---- element ops -------------------------------------------------------------------- */

__global__ void k_add_kernel(float *x, const float *y, int64_t n, int vec) {
    int64_t done = 0;
    if (vec) {
        const int64_t n4 = n / 4;
        float4 *x4 = reinterpret_cast<float4 *>(x);
        const float4 *y4 = reinterpret_cast<const float4 *>(y);
        for (int64_t i = gtid(); i < n4; i += gstride()) {
            float4 a = x4[i];
            const float4 b = y4[i];
            a.x += b.x;
            a.y += b.y;
            a.z += b.z;
            a.w += b.w;
            x4[i] = a;
        }
        done = n4 * 4;
    }
    for (int64_t i = done + gtid(); i < n; i += gstride()) x[i] += y[i];
}

/* x: blockIdx.x/threadIdx.x over the columns (float4s when vec), rows from blockIdx.y
 * with a stride of gridDim.y: the bias element is loaded once per thread. */
__global__ void k_add_bias_kernel(float *x, const float *b, int32_t n_rows, int32_t n, int vec) {
    const int32_t c = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (vec) {
        const int32_t n4 = n / 4;
        if (c >= n4) return;
        const float4 bb = reinterpret_cast<const float4 *>(b)[c];
        for (int32_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
            float4 *p = reinterpret_cast<float4 *>(x + (size_t)r * n) + c;
            float4 a = *p;
            a.x += bb.x;
            a.y += bb.y;
            a.z += bb.z;
            a.w += bb.w;
            *p = a;
        }
        return;
    }
    if (c >= n) return;
    const float bb = b[c];
    for (int32_t r = blockIdx.y; r < n_rows; r += gridDim.y) x[(size_t)r * n + c] += bb;
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ void k_swiglu_kernel(float *out, const float *gate, const float *up, int64_t n, int vec) {
    int64_t done = 0;
    if (vec) {
        const int64_t n4 = n / 4;
        float4 *o4 = reinterpret_cast<float4 *>(out);
        const float4 *g4 = reinterpret_cast<const float4 *>(gate);
        const float4 *u4 = reinterpret_cast<const float4 *>(up);
        for (int64_t i = gtid(); i < n4; i += gstride()) {
            const float4 g = g4[i], u = u4[i];
            float4 r;
            r.x = silu_mul(g.x, u.x);
            r.y = silu_mul(g.y, u.y);
            r.z = silu_mul(g.z, u.z);
            r.w = silu_mul(g.w, u.w);
            o4[i] = r;
        }
        done = n4 * 4;
    }
    for (int64_t i = done + gtid(); i < n; i += gstride()) out[i] = silu_mul(gate[i], up[i]);
}

/* ---- row norms ---------------------------------------------------------------------- */

__device__ __forceinline__ float4 ld4(const float *p, bool vec) {
    if (vec) return *reinterpret_cast<const float4 *>(p);
    float4 v;
    v.x = p[0];
    v.y = p[1];
    v.z = p[2];
    v.w = p[3];
    return v;
}
__device__ __forceinline__ void st4(float *p, float4 v, bool vec) {
    if (vec) {
        *reinterpret_cast<float4 *>(p) = v;
        return;
    }
    p[0] = v.x;
    p[1] = v.y;
    p[2] = v.z;
    p[3] = v.w;
}
__device__ __forceinline__ float acc4(float s, float4 v) {
    s += v.x * v.x;
    s += v.y * v.y;
    s += v.z * v.z;
    s += v.w * v.w;
    return s;
}

/* One thread's share of sum(x^2) over a row of n: the 4-float chunks t, t + nth, ...,
 * then (for n % 4 != 0, by the thread after the last chunk's owner) the tail. The same
 * order with or without vector loads. */
__device__ __forceinline__ float part_sumsq(const float *x, int32_t n, int t, int nth, bool vec) {
    float s = 0.0f;
    const int32_t nc = n / 4;
    for (int32_t c = t; c < nc; c += nth) s = acc4(s, ld4(x + 4 * c, vec));
    if (t == nc % nth)
        for (int32_t i = 4 * nc; i < n; i++) s += x[i] * x[i];
    return s;
}

/* out[i] = x[i] * scale * w[i] over the thread's chunks (as the reference: (x*scale)*w). */
__device__ __forceinline__ void scale_row(float *out, const float *x, const float *w, float scale,
                                          int32_t n, int t, int nth, bool vec) {
    const int32_t nc = n / 4;
    for (int32_t c = t; c < nc; c += nth) {
        const float4 a = ld4(x + 4 * c, vec), b = ld4(w + 4 * c, vec);
        float4 r;
        r.x = a.x * scale * b.x;
        r.y = a.y * scale * b.y;
        r.z = a.z * scale * b.z;
        r.w = a.w * scale * b.w;
        st4(out + 4 * c, r, vec);
    }
    if (t == nc % nth)
        for (int32_t i = 4 * nc; i < n; i++) out[i] = x[i] * scale * w[i];
}

__device__ __forceinline__ float warp_sum(float v) {
    /* xor butterfly: every lane ends with the same bits (a + b == b + a) */
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(IFD_FULL_MASK, v, o);
    return v;
}

/* sum over the block (blockDim.x a multiple of 32), the same bits in every thread. */
__device__ __forceinline__ float block_sum(float v, float *part) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float tot = 0.0f;
    for (int i = 0; i < nw; i++) tot += part[i];
    return tot;
}

__device__ __forceinline__ float norm_scale(float ss, int32_t n, float eps) {
    return 1.0f / sqrtf(ss / (float)n + eps);
}

/* One block per output row. y: NULL (plain; rows: optional gather) or the residual
 * added into x first (fused). */
__global__ void k_rmsnorm_kernel(float *out, float *x, const float *y, const int32_t *rows,
                                 const float *w, int32_t n, float eps, int vec) {
    __shared__ float part[32];
    const int32_t i = blockIdx.x;
    const int32_t r = rows ? rows[i] : i;
    float *xr = x + (size_t)r * n;
    const int t = threadIdx.x, nth = blockDim.x;
    if (y) { /* x += y over this thread's chunks (the ones it then reads back) */
        const float *yr = y + (size_t)r * n;
        const int32_t nc = n / 4;
        for (int32_t c = t; c < nc; c += nth) {
            float4 a = ld4(xr + 4 * c, vec);
            const float4 b = ld4(yr + 4 * c, vec);
            a.x += b.x;
            a.y += b.y;
            a.z += b.z;
            a.w += b.w;
            st4(xr + 4 * c, a, vec);
        }
        if (t == nc % nth)
            for (int32_t j = 4 * nc; j < n; j++) xr[j] += yr[j];
    }
    const float ss = block_sum(part_sumsq(xr, n, t, nth, vec), part);
    scale_row(out + (size_t)i * n, xr, w, norm_scale(ss, n, eps), n, t, nth, vec);
}

/* One warp per row, in place. */
__global__ void k_head_norm_kernel(float *x, const float *w, int32_t n_rows, int32_t n, float eps,
                                   int vec) {
    const int32_t r = (int32_t)blockIdx.x * HN_ROWS + (int32_t)(threadIdx.x >> 5);
    if (r >= n_rows) return; /* the whole warp */
    const int lane = threadIdx.x & 31;
    float *xr = x + (size_t)r * n;
    const float ss = warp_sum(part_sumsq(xr, n, lane, 32, vec));
    scale_row(xr, xr, w, norm_scale(ss, n, eps), n, lane, 32, vec);
}

/* ---- embedding ---------------------------------------------------------------------- */

__device__ __forceinline__ float half_at(const uint8_t *p) {
    __half_raw h;
    h.x = (unsigned short)(p[0] | (p[1] << 8));
    return __half2float(__half(h));
}

/* quant_iq4nl_values[q] (IQ4_NL / IQ4_XS), by selects: no table in memory. */
__device__ __forceinline__ int iq4nl_value(int q) {
    const uint32_t w = (q & 8) ? ((q & 4) ? 0x71594535u : 0x26190D01u) : ((q & 4) ? 0xF6EADDCFu : 0xBFAD9881u);
    return (int)(int8_t)(w >> (8 * (q & 3)));
}

/* Element e of a row of the given type (the reference's dequantization, element-wise). */
__device__ __forceinline__ float deq_elem(int type, const uint8_t *row, int64_t e) {
    switch (type) {
    case K_F32: return reinterpret_cast<const float *>(row)[e];
    case K_F16: return half_at(row + 2 * e);
    case K_BF16: {
        const uint32_t bits = (uint32_t)reinterpret_cast<const uint16_t *>(row)[e] << 16;
        return __uint_as_float(bits);
    }
    case K_Q8_0: {
        const uint8_t *b = row + (e / 32) * 34;
        return mul_rn(half_at(b), (float)(int8_t)b[2 + e % 32]);
    }
    case K_Q4_0: {
        const uint8_t *b = row + (e / 32) * 18;
        const int j = (int)(e % 32);
        const int q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
        return mul_rn(half_at(b), (float)(q - 8));
    }
    case K_Q5_0: {
        const uint8_t *b = row + (e / 32) * 22;
        const int j = (int)(e % 32);
        const uint32_t qh = (uint32_t)b[2] | ((uint32_t)b[3] << 8) | ((uint32_t)b[4] << 16) |
                            ((uint32_t)b[5] << 24);
        const int lo4 = j < 16 ? (b[6 + j] & 0xF) : (b[6 + j - 16] >> 4);
        const int q = (int)(lo4 | (((qh >> j) & 1u) << 4)) - 16;
        return mul_rn(half_at(b), (float)q);
    }
    case K_Q4_K: {
        const uint8_t *b = row + (e / 256) * 144;
        const int w = (int)(e % 256), sub = w / 32, l = w % 32;
        const uint8_t *sc6 = b + 4, *qs = b + 16;
        int sc, m;
        if (sub < 4) {
            sc = sc6[sub] & 63;
            m = sc6[sub + 4] & 63;
        } else {
            sc = (sc6[sub + 4] & 0xF) | ((sc6[sub - 4] >> 6) << 4);
            m = (sc6[sub + 4] >> 4) | ((sc6[sub] >> 6) << 4);
        }
        const uint8_t qb = qs[(w / 64) * 32 + l];
        const int q = (sub & 1) ? (qb >> 4) : (qb & 0xF);
        const float d1 = mul_rn(half_at(b), (float)sc), m1 = mul_rn(half_at(b + 2), (float)m);
        return sub_rn(mul_rn(d1, (float)q), m1);
    }
    case K_Q6_K: {
        const uint8_t *b = row + (e / 256) * 210;
        const int w = (int)(e % 256), h = w / 128, g = (w % 128) / 32, l = w % 32;
        const uint8_t *ql = b + h * 64, *qh = b + 128 + h * 32;
        const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192) + h * 8;
        const uint8_t lb = ql[l + 32 * (g & 1)];
        const int lo4 = g < 2 ? (lb & 0xF) : (lb >> 4);
        const int q = (lo4 | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
        return mul_rn(mul_rn(half_at(b + 208), (float)sc[l / 16 + 2 * g]), (float)q);
    }
    case K_Q4_1:
    case K_Q5_1: {
        const bool five = type == K_Q5_1;
        const uint8_t *b = row + (e / 32) * (five ? K_Q5_1_BYTES : K_Q4_1_BYTES);
        const int j = (int)(e % 32);
        const uint8_t *qs = b + (five ? 8 : 4);
        int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        if (five) q |= ((b[4 + j / 8] >> (j % 8)) & 1) << 4;
        return add_rn(mul_rn(half_at(b), (float)q), half_at(b + 2)); /* d * q + m */
    }
    case K_IQ4_NL: {
        const uint8_t *b = row + (e / 32) * K_IQ4_NL_BYTES;
        const int j = (int)(e % 32);
        const int q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
        return mul_rn(half_at(b), (float)iq4nl_value(q));
    }
    case K_I8_G64:
    case K_I8_G128: {
        const int g = type == K_I8_G64 ? 64 : 128;
        const uint8_t *b = row + (e / g) * (2 + g);
        return mul_rn(half_at(b), (float)(int8_t)b[2 + e % g]);
    }
    case K_I4_G64:
    case K_I4_G128: {
        const int g = type == K_I4_G64 ? 64 : 128;
        const uint8_t *b = row + (e / g) * (4 + g / 2);
        const int w = (int)(e % g), j = w % 32; /* sub-block w / 32: 16 bytes, Q4_1's order */
        const uint8_t *qs = b + 4 + 16 * (w / 32);
        const int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        return add_rn(mul_rn(half_at(b), (float)q), half_at(b + 2));
    }
    case K_Q2_K:
    case K_Q3_K: {
        const bool q2 = type == K_Q2_K;
        const uint8_t *b = row + (e / 256) * (q2 ? K_Q2_K_BYTES : K_Q3_K_BYTES);
        /* element w: 2 bits of byte 32*(w/128) + w%32 of qs at shift 2*((w%128)/32);
         * scale w/16 (quant.c's loops) */
        const int w = (int)(e % 256), sg = w / 16;
        const uint8_t *qs = b + (q2 ? 16 : 32);
        const int q = (qs[32 * (w / 128) + w % 32] >> (2 * ((w % 128) / 32))) & 3;
        if (q2) {
            const uint8_t sc = b[sg];
            const float dl = mul_rn(half_at(b + 80), (float)(sc & 0xF));
            const float ml = mul_rn(half_at(b + 82), (float)(sc >> 4));
            return sub_rn(mul_rn(dl, (float)q), ml);
        }
        const uint8_t *sc = b + 96;
        const int s6 = (((sc[sg % 8] >> (4 * (sg / 8))) & 0xF) | (((sc[8 + sg % 4] >> (2 * (sg / 4))) & 3) << 4)) - 32;
        const int v = q - (((b[w % 32] >> (w / 32)) & 1) ? 0 : 4); /* hmask: the third bit */
        return mul_rn(mul_rn(half_at(b + 108), (float)s6), (float)v);
    }
    case K_Q5_K: {
        const uint8_t *b = row + (e / 256) * K_Q5_K_BYTES;
        const int w = (int)(e % 256), sub = w / 32, l = w % 32;
        const uint8_t *sc6 = b + 4, *qh = b + 16, *qs = b + 48;
        int sc, m;
        if (sub < 4) {
            sc = sc6[sub] & 63;
            m = sc6[sub + 4] & 63;
        } else {
            sc = (sc6[sub + 4] & 0xF) | ((sc6[sub - 4] >> 6) << 4);
            m = (sc6[sub + 4] >> 4) | ((sc6[sub] >> 6) << 4);
        }
        const uint8_t qb = qs[(w / 64) * 32 + l];
        const int q = ((sub & 1) ? (qb >> 4) : (qb & 0xF)) + (((qh[l] >> sub) & 1) ? 16 : 0);
        const float d1 = mul_rn(half_at(b), (float)sc), m1 = mul_rn(half_at(b + 2), (float)m);
        return sub_rn(mul_rn(d1, (float)q), m1);
    }
    case K_IQ4_XS: {
        const uint8_t *b = row + (e / 256) * K_IQ4_XS_BYTES;
        const int w = (int)(e % 256), ib = w / 32, j = w % 32;
        const int sh = b[2] | (b[3] << 8);
        const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
        const uint8_t *qs = b + 8 + 16 * ib;
        const int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        return mul_rn(mul_rn(half_at(b), (float)(ls - 32)), (float)iq4nl_value(q));
    }
    default: return 0.0f; /* rejected by the launcher */
    }
}

__global__ void k_embed_kernel(float *out, const uint8_t *emb, int type, int64_t n_cols,
                               size_t row_bytes, const int32_t *ids, int32_t n_vocab, int32_t *bad) {
    const int32_t i = blockIdx.x;
    const int32_t id = ids[i];
    float *o = out + (size_t)i * n_cols;
    if (id < 0 || id >= n_vocab) {
        for (int64_t e = threadIdx.x; e < n_cols; e += blockDim.x) o[e] = 0.0f;
        if (bad && threadIdx.x == 0) *bad = 1;
        return;
    }
    const uint8_t *row = emb + (size_t)id * row_bytes;
    for (int64_t e = threadIdx.x; e < n_cols; e += blockDim.x) o[e] = deq_elem(type, row, e);
}

/* Elements per block and bytes per block of the types embed reads (0: unsupported). */
static void type_geometry(int type, int64_t *bs, int64_t *bb) {
    *bs = 0;
    *bb = 0;
    switch (type) {
    case K_F32: *bs = 1, *bb = 4; break;
    case K_F16:
    case K_BF16: *bs = 1, *bb = 2; break;
    case K_Q8_0: *bs = K_QK8_0, *bb = K_Q8_0_BYTES; break;
    case K_Q4_0: *bs = K_QK4_0, *bb = K_Q4_0_BYTES; break;
    case K_Q5_0: *bs = K_QK4_0, *bb = K_Q5_0_BYTES; break;
    case K_Q4_K: *bs = K_QK_K, *bb = K_Q4_K_BYTES; break;
    case K_Q6_K: *bs = K_QK_K, *bb = K_Q6_K_BYTES; break;
    case K_Q4_1: *bs = K_QK4_0, *bb = K_Q4_1_BYTES; break;
    case K_Q5_1: *bs = K_QK4_0, *bb = K_Q5_1_BYTES; break;
    case K_IQ4_NL: *bs = K_QK4_0, *bb = K_IQ4_NL_BYTES; break;
    case K_Q2_K: *bs = K_QK_K, *bb = K_Q2_K_BYTES; break;
    case K_Q3_K: *bs = K_QK_K, *bb = K_Q3_K_BYTES; break;
    case K_Q5_K: *bs = K_QK_K, *bb = K_Q5_K_BYTES; break;
    case K_IQ4_XS: *bs = K_QK_K, *bb = K_IQ4_XS_BYTES; break;
    case K_I8_G64: *bs = 64, *bb = K_I8_G64_BYTES; break;
    case K_I8_G128: *bs = 128, *bb = K_I8_G128_BYTES; break;
    case K_I4_G64: *bs = 64, *bb = K_I4_G64_BYTES; break;
    case K_I4_G128: *bs = 128, *bb = K_I4_G128_BYTES; break;
    default: break;
    }
}

/* ---- RoPE + K/V store --------------------------------------------------------------- */

/* RoPE of one token's q ([n_heads][head_dim]) and k ([n_kv_heads][head_dim]) rows in
 * place, by the block: its cos/sin pairs into cs_c / cs_s (shared, n_rot / 2 each) first
 * (double, as the reference), then every pair rotated. */
__device__ void rope_rotate_token(float *qt, float *kt, int32_t pos, float *cs_c, float *cs_s, int32_t n_heads,
                                  int32_t n_kv_heads, int32_t head_dim, int32_t n_rot, int neox, float base,
                                  float freq_scale, const float *freq_div) {
    const int32_t half = n_rot / 2;
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
        /* op_rope_ref's angle, operation for operation */
        double theta = (double)pos * freq_scale * pow((double)base, -2.0 * i / n_rot);
        if (freq_div) theta /= freq_div[i];
        cs_c[i] = (float)cos(theta);
        cs_s[i] = (float)sin(theta);
    }
    __syncthreads();
    const int32_t nq = n_heads * half, nk = n_kv_heads * half;
    for (int32_t j = threadIdx.x; j < nq + nk; j += blockDim.x) {
        const int32_t jj = j < nq ? j : j - nq;
        const int32_t h = jj / half, i = jj - h * half;
        float *xh = (j < nq ? qt : kt) + (size_t)h * head_dim;
        const int32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = xh[a], x1 = xh[b], c = cs_c[i], s = cs_s[i];
        xh[a] = sub_rn(mul_rn(x0, c), mul_rn(x1, s));
        xh[b] = add_rn(mul_rn(x0, s), mul_rn(x1, c));
    }
}

__global__ void k_rope_store_kernel(float *q, float *k, const float *v, float *k_cache,
                                    float *v_cache, const int32_t *positions,
                                    const int32_t *slot_mapping, int32_t n_heads, int32_t n_kv_heads,
                                    int32_t head_dim, int32_t n_rot, int neox, float base,
                                    float freq_scale, const float *freq_div, int vec) {
    __shared__ float cs_c[ROPE_MAX_HEAD_DIM / 2], cs_s[ROPE_MAX_HEAD_DIM / 2];
    const int32_t t = blockIdx.x;
    float *kt = k + (size_t)t * n_kv_heads * head_dim;
    rope_rotate_token(q + (size_t)t * n_heads * head_dim, kt, positions[t], cs_c, cs_s, n_heads, n_kv_heads,
                      head_dim, n_rot, neox, base, freq_scale, freq_div);
    const int32_t slot = slot_mapping[t];
    if (slot < 0) return; /* padding row (the whole block) */
    __syncthreads();      /* the rotated k row, written by other threads */
    const int32_t kv_dim = n_kv_heads * head_dim;
    const float *vt = v + (size_t)t * kv_dim;
    float *kc = k_cache + (size_t)slot * kv_dim, *vc = v_cache + (size_t)slot * kv_dim;
    if (vec) {
        for (int32_t c = threadIdx.x; c < kv_dim / 4; c += blockDim.x) {
            reinterpret_cast<float4 *>(kc)[c] = reinterpret_cast<const float4 *>(kt)[c];
            reinterpret_cast<float4 *>(vc)[c] = reinterpret_cast<const float4 *>(vt)[c];
        }
        return;
    }
    for (int32_t c = threadIdx.x; c < kv_dim; c += blockDim.x) {
        kc[c] = kt[c];
        vc[c] = vt[c];
    }
}

/* One row x[hd] stored as dtype at dst (row index r of its pool, for INT8's scale) by one
 * warp: kv_store_row's encoding. INT8's amax is a max (order-free), so the warp
 * reduction gives the reference's scale bit for bit. */
__device__ void kv_store_row_warp(const k_kv &c, int is_v, size_t r, const float *x, int32_t hd, int lane) {
    uint8_t *base = (uint8_t *)(is_v ? c.v : c.k);
    switch (c.dtype) {
    case K_KV_F16:
    case K_KV_BF16: {
        uint16_t *o = (uint16_t *)base + r * hd;
        for (int32_t i = lane; i < hd; i += 32)
            o[i] = c.dtype == K_KV_F16 ? kvc_f16_from_f32(x[i]) : kvc_bf16_from_f32(x[i]);
        return;
    }
    case K_KV_FP8: {
        uint8_t *o = base + r * hd;
        for (int32_t i = lane; i < hd; i += 32) o[i] = kvc_fp8_from_f32(x[i]);
        return;
    }
    default: { /* INT8 */
        float amax = 0.0f;
        for (int32_t i = lane; i < hd; i += 32) {
            const float a = fabsf(x[i]);
            if (a > amax && a <= 3.402823466e38f) amax = a; /* NaN and inf left out */
        }
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(IFD_FULL_MASK, amax, o));
        const float sc = __fdiv_rn(amax, 127.0f);
        int8_t *o = (int8_t *)base + r * hd;
        for (int32_t i = lane; i < hd; i += 32) o[i] = kvc_int8_from_f32(x[i], sc);
        if (lane == 0) (is_v ? c.v_scale : c.k_scale)[r] = sc;
        return;
    }
    }
}

/* k_rope_store_kernel with a KV cache of a non-f32 dtype: the same rotation, then each
 * warp stores (token, KV head) rows of K and V. */
__global__ void k_rope_store_kv_kernel(float *q, float *k, const float *v, k_kv cache,
                                       const int32_t *positions, const int32_t *slot_mapping,
                                       int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                                       int32_t n_rot, int neox, float base, float freq_scale,
                                       const float *freq_div) {
    __shared__ float cs_c[ROPE_MAX_HEAD_DIM / 2], cs_s[ROPE_MAX_HEAD_DIM / 2];
    const int32_t t = blockIdx.x;
    float *kt = k + (size_t)t * n_kv_heads * head_dim;
    rope_rotate_token(q + (size_t)t * n_heads * head_dim, kt, positions[t], cs_c, cs_s, n_heads, n_kv_heads,
                      head_dim, n_rot, neox, base, freq_scale, freq_div);
    const int32_t slot = slot_mapping[t];
    if (slot < 0) return;
    __syncthreads();
    const float *vt = v + (size_t)t * n_kv_heads * head_dim;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int32_t j = w; j < 2 * n_kv_heads; j += nw) {
        const int is_v = j >= n_kv_heads;
        const int32_t h = is_v ? j - n_kv_heads : j;
        kv_store_row_warp(cache, is_v, (size_t)slot * n_kv_heads + h, (is_v ? vt : kt) + (size_t)h * head_dim,
                          head_dim, lane);
    }
}

} /* namespace */

/* ---- launchers ---------------------------------------------------------------------- */

int k_add(dev_stream s, float *x, const float *y, int64_t n) {
    if (n < 0 || (n > 0 && (!x || !y))) return DEV_ERR;
    if (n == 0) return DEV_OK;
    const int vec = aligned16(x) && aligned16(y);
    IFD_LAUNCH(k_add_kernel, ew_blocks(vec ? n / 4 : n), EW_THREADS, 0, s, x, y, n, vec);
    return dev_check_launch();
}

int k_add_bias(dev_stream s, float *x, const float *b, int32_t n_rows, int32_t n) {
    if (n_rows < 0 || n < 0) return DEV_ERR;
    if (n_rows == 0 || n == 0) return DEV_OK;
    if (!x || !b) return DEV_ERR;
    const int vec = n % 4 == 0 && aligned16(x) && aligned16(b);
    const int32_t cols = vec ? n / 4 : n;
    const dim3 grid((unsigned)((cols + EW_THREADS - 1) / EW_THREADS),
                    (unsigned)(n_rows < BIAS_MAX_ROW_BLOCKS ? n_rows : BIAS_MAX_ROW_BLOCKS));
    IFD_LAUNCH(k_add_bias_kernel, grid, EW_THREADS, 0, s, x, b, n_rows, n, vec);
    return dev_check_launch();
}

int k_swiglu(dev_stream s, float *out, const float *gate, const float *up, int64_t n) {
    if (n < 0 || (n > 0 && (!out || !gate || !up))) return DEV_ERR;
    if (n == 0) return DEV_OK;
    const int vec = aligned16(out) && aligned16(gate) && aligned16(up);
    IFD_LAUNCH(k_swiglu_kernel, ew_blocks(vec ? n / 4 : n), EW_THREADS, 0, s, out, gate, up, n, vec);
    return dev_check_launch();
}

/* The rmsnorm block size: a function of n alone (batch invariance). */
static int norm_threads(int32_t n) {
    int b = ((n + 3) / 4 + 31) / 32 * 32;
    return b < 32 ? 32 : (b > NORM_MAX_THREADS ? NORM_MAX_THREADS : b);
}

static int rmsnorm_launch(dev_stream s, float *out, float *x, const float *y, const int32_t *rows,
                          int32_t n_rows, const float *w, int32_t n, float eps) {
    if (n_rows < 0 || n <= 0) return DEV_ERR;
    if (n_rows == 0) return DEV_OK;
    if (!out || !x || !w) return DEV_ERR;
    const int vec = n % 4 == 0 && aligned16(out) && aligned16(x) && aligned16(w) && (!y || aligned16(y));
    IFD_LAUNCH(k_rmsnorm_kernel, n_rows, norm_threads(n), 0, s, out, x, y, rows, w, n, eps, vec);
    return dev_check_launch();
}

int k_rmsnorm(dev_stream s, float *out, const float *x, const int32_t *rows, int32_t n_rows,
              const float *w, int32_t n, float eps) {
    /* the kernel writes x only when given a residual */
    return rmsnorm_launch(s, out, const_cast<float *>(x), NULL, rows, n_rows, w, n, eps);
}

int k_add_rmsnorm(dev_stream s, float *out, float *x, const float *y, const float *w, int32_t n_rows,
                  int32_t n, float eps) {
    if (n_rows > 0 && !y) return DEV_ERR;
    return rmsnorm_launch(s, out, x, y, NULL, n_rows, w, n, eps);
}

int k_head_norm(dev_stream s, float *x, const float *w, int32_t n_rows, int32_t n, float eps) {
    if (n_rows < 0 || n <= 0) return DEV_ERR;
    if (n_rows == 0) return DEV_OK;
    if (!x || !w) return DEV_ERR;
    const int vec = n % 4 == 0 && aligned16(x) && aligned16(w);
    IFD_LAUNCH(k_head_norm_kernel, (n_rows + HN_ROWS - 1) / HN_ROWS, HN_ROWS * 32, 0, s, x, w, n_rows, n,
               eps, vec);
    return dev_check_launch();
}

int k_embed_flagged(dev_stream s, float *out, const void *emb, int type, int64_t n_cols,
                    size_t row_bytes, const int32_t *ids, int32_t n, int32_t n_vocab, int32_t *bad) {
    int64_t bs, bb;
    type_geometry(type, &bs, &bb);
    if (bs == 0 || n_cols <= 0 || n_cols % bs != 0 || n < 0 || n_vocab <= 0) return DEV_ERR;
    if ((uint64_t)row_bytes < (uint64_t)(n_cols / bs) * (uint64_t)bb) return DEV_ERR;
    /* 16-bit fields (every type's scales) and f32 elements are read in place */
    const size_t align = type == K_F32 ? 4 : 2;
    if (((uintptr_t)emb % align) != 0 || row_bytes % align != 0) return DEV_ERR;
    if (n == 0) return DEV_OK;
    if (!out || !emb || !ids) return DEV_ERR;
    IFD_LAUNCH(k_embed_kernel, n, EMB_THREADS, 0, s, out, static_cast<const uint8_t *>(emb), type, n_cols,
               row_bytes, ids, n_vocab, bad);
    return dev_check_launch();
}

int k_embed(dev_stream s, float *out, const void *emb, int type, int64_t n_cols, size_t row_bytes,
            const int32_t *ids, int32_t n, int32_t n_vocab) {
    return k_embed_flagged(s, out, emb, type, n_cols, row_bytes, ids, n, n_vocab, NULL);
}

/* k_rope_store's size checks: DEV_ERR for a bad one, DEV_OK for an empty batch (nothing to
 * launch), 1 to go on. The layout is checked (any int may arrive from the host; C++ may
 * not load an enum outside its values). */
static int rope_args(int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads, const k_rope &rp) {
    const int32_t hd = rp.head_dim;
    if (n_tokens < 0 || n_heads <= 0 || n_kv_heads <= 0 || hd <= 0 || hd > ROPE_MAX_HEAD_DIM)
        return DEV_ERR;
    if (rp.n_rot <= 0 || rp.n_rot > hd || rp.n_rot % 2 != 0) return DEV_ERR;
    if (rp.layout != K_ROPE_NORM && rp.layout != K_ROPE_NEOX) return DEV_ERR;
    if ((int64_t)n_heads * hd > INT32_MAX || (int64_t)n_kv_heads * hd > INT32_MAX) return DEV_ERR;
    return n_tokens == 0 ? DEV_OK : 1;
}

int k_rope_store(dev_stream s, float *q, float *k, const float *v, float *k_cache, float *v_cache,
                 const int32_t *positions, const int32_t *slot_mapping, int32_t n_tokens,
                 int32_t n_heads, int32_t n_kv_heads, k_rope rp, const float *freq_div) {
    const int32_t hd = rp.head_dim;
    const int rc = rope_args(n_tokens, n_heads, n_kv_heads, rp);
    if (rc != 1) return rc;
    const int layout = rp.layout;
    if (!q || !k || !v || !k_cache || !v_cache || !positions || !slot_mapping) return DEV_ERR;
    const int vec = ((int64_t)n_kv_heads * hd) % 4 == 0 && aligned16(k) && aligned16(v) &&
                    aligned16(k_cache) && aligned16(v_cache);
    IFD_LAUNCH(k_rope_store_kernel, n_tokens, ROPE_THREADS, 0, s, q, k, v, k_cache, v_cache, positions,
               slot_mapping, n_heads, n_kv_heads, hd, rp.n_rot, layout == K_ROPE_NEOX ? 1 : 0, rp.base,
               rp.freq_scale, freq_div, vec);
    return dev_check_launch();
}

int k_rope_store_kv(dev_stream s, float *q, float *k, const float *v, const k_kv *cache,
                    const int32_t *positions, const int32_t *slot_mapping, int32_t n_tokens,
                    int32_t n_heads, int32_t n_kv_heads, k_rope rp, const float *freq_div) {
    if (!cache) return DEV_ERR;
    if (cache->dtype == K_KV_F32)
        return k_rope_store(s, q, k, v, (float *)cache->k, (float *)cache->v, positions, slot_mapping,
                            n_tokens, n_heads, n_kv_heads, rp, freq_div);
    const int32_t hd = rp.head_dim;
    if (cache->dtype < K_KV_F16 || cache->dtype > K_KV_FP8) return DEV_ERR;
    const int rc = rope_args(n_tokens, n_heads, n_kv_heads, rp);
    if (rc != 1) return rc;
    const int layout = rp.layout;
    if (!q || !k || !v || !cache->k || !cache->v || !positions || !slot_mapping) return DEV_ERR;
    if (cache->dtype == K_KV_INT8 && (!cache->k_scale || !cache->v_scale)) return DEV_ERR;
    const k_kv c = *cache; /* by value: a captured graph replays the launch after *cache is gone */
    IFD_LAUNCH(k_rope_store_kv_kernel, n_tokens, ROPE_THREADS, 0, s, q, k, v, c, positions,
               slot_mapping, n_heads, n_kv_heads, hd, rp.n_rot, layout == K_ROPE_NEOX ? 1 : 0, rp.base,
               rp.freq_scale, freq_div);
    return dev_check_launch();
}

IFD_NS_END
