/* matmul_impl.cuh — the device side of the matmul kernels, shared by the translation
 * units that instantiate them (private to kernels/matmul*.cu; matmul.cu's header comment
 * describes the layout and the arithmetic). matmul.cu launches F32, F16, BF16, Q8_0,
 * Q4_0, Q5_0, Q4_K and Q6_K, matmul_ext.cu the other types: two modules that nvcc
 * compiles in parallel, and the first eight types' kernels come out as the PTX they
 * were tuned as (their code paths here are kept as they were: ptxas's register counts
 * move with small changes of the PTX — an index computed another way took Q8_0's
 * 4-token tile from 168 registers to 255 — so check ptxas_budgets.txt after an edit). */
#ifndef INFERD_KERNELS_MATMUL_IMPL_CUH
#define INFERD_KERNELS_MATMUL_IMPL_CUH

#include "simt.h"

#include "matmul.h"

IFD_NS_BEGIN

enum {
    MM_F32 = 0,
    MM_F16 = 1,
    MM_Q4_0 = 2,
    MM_Q4_1 = 3,
    MM_Q5_0 = 6,
    MM_Q5_1 = 7,
    MM_Q8_0 = 8,
    MM_Q2_K = 10,
    MM_Q3_K = 11,
    MM_Q4_K = 12,
    MM_Q5_K = 13,
    MM_Q6_K = 14,
    MM_IQ4_NL = 20,
    MM_IQ4_XS = 23,
    MM_BF16 = 30,
    MM_I8_G64 = 40, /* inferd's own group types (--quantize; src/model/quant.h) */
    MM_I8_G128 = 41,
    MM_I4_G64 = 42,
    MM_I4_G128 = 43,
};

/* Per-type facts of the prepared layout, shared by the host repack and the kernels. */
static __host__ __device__ constexpr bool mm_is_float(int ty) { return ty == MM_F32 || ty == MM_F16 || ty == MM_BF16; }
/* bytes of a unit in the q region: 32 int8 quants, 32 nibbles, or 32 two-bit values */
static __host__ __device__ constexpr int mm_unit_bytes(int ty) {
    return ty == MM_F32 || ty == MM_Q8_0 || ty == MM_I8_G64 || ty == MM_I8_G128 ? 32
         : ty == MM_Q2_K || ty == MM_Q3_K                                    ? 8
                                                                             : 16;
}
/* units that share one scale entry of the sc region (a group, or a super-block) */
static __host__ __device__ constexpr int mm_units_per_group(int ty) {
    return ty == MM_I8_G64 || ty == MM_I4_G64     ? 2
         : ty == MM_I8_G128 || ty == MM_I4_G128   ? 4
         : ty == MM_Q2_K || ty == MM_Q3_K || ty == MM_Q4_K || ty == MM_Q5_K || ty == MM_Q6_K ||
                   ty == MM_IQ4_XS
             ? 8
             : 1;
}

/* nvcc unrolls the register-array loops (they must stay in registers); the host
 * compiler of the emulation does not know the pragma. */
#if defined(IFD_SIMT_EMU)
#define MM_UNROLL
#else
#define MM_UNROLL _Pragma("unroll")
#endif

/* The float types' decode loop keeps four units in flight per lane; sm_80's ptxas spilled
 * a few bytes there for F16/BF16 (48 registers), so below sm_90 it keeps two: at that
 * register count 10 blocks fit an SM, enough loads in flight for the bandwidth. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define MM_FLOAT_DECODE_UNROLL 2
#else
#define MM_FLOAT_DECODE_UNROLL 4
#endif

#define MM_WARPS 4
#define MM_THREADS (MM_WARPS * 32)
#define MM_MAX_COLS (1 << 26)
#define MM_MAX_ROWS (1 << 28)

/* ---- device side ---------------------------------------------------------------------------- */

/* One matrix as the kernels see it. */
struct mm_w {
    const uint8_t *q, *aux, *sc, *d;
    float *out;
    int64_t n_rows;
    int32_t n_cols, n_units;
};
/* The matrices of one launch; blockIdx.y in [blk0[i], blk0[i+1]) is a row group of w[i]. */
struct mm_job {
    mm_w w[K_MATMUL_MAX_GROUP];
    int32_t blk0[K_MATMUL_MAX_GROUP + 1];
    int32_t n;
};

/* A 4-bit (or 5/6-bit) integer plus 2^23 as a float, minus (2^23 + zero): q - zero exactly. */
static __device__ __forceinline__ float mm_int_f(uint32_t q, float bias) {
    return __uint_as_float(0x4B000000u | q) - bias;
}

/* Q4_K sub-block j's 6-bit scale and min (quant_q4_K_scale_min) from the super-block's
 * first 16 bytes as four words (d, dmin, then the 12 packed scale bytes: byte k of the
 * scales is byte 4+k of the words), with shifts so that nothing goes to local memory. */
static __device__ __forceinline__ uint32_t mm_byte(const uint32_t *w, int k) {
    const int i = k >> 2; /* selects, not an indexed load: w stays in registers */
    const uint32_t wd = i == 0 ? w[0] : i == 1 ? w[1] : i == 2 ? w[2] : w[3];
    return (wd >> (8 * (k & 3))) & 0xffu;
}
static __device__ __forceinline__ void mm_q4k_scale_min_w(int j, const uint32_t *w, int *sc, int *m) {
    if (j < 4) {
        *sc = (int)(mm_byte(w, 4 + j) & 63);
        *m = (int)(mm_byte(w, 8 + j) & 63);
    } else {
        *sc = (int)((mm_byte(w, 8 + j) & 0xF) | ((mm_byte(w, j) >> 6) << 4));
        *m = (int)((mm_byte(w, 8 + j) >> 4) | ((mm_byte(w, 4 + j) >> 6) << 4));
    }
}

/* x[c .. c+N) of one token row (N = 4 or 8), zeros past n_cols; VX: c+N <= n_cols and
 * the row is 16-byte aligned (N/4 vector loads, no branch). */
template <int N, bool VX>
static __device__ __forceinline__ void mm_ld_x(float *v, const float *xr, int32_t c, int32_t n_cols) {
    if (VX) {
MM_UNROLL
        for (int j = 0; j < N / 4; j++) {
            const float4 a = __ldg(reinterpret_cast<const float4 *>(xr + c + 4 * j));
            v[4 * j] = a.x, v[4 * j + 1] = a.y, v[4 * j + 2] = a.z, v[4 * j + 3] = a.w;
        }
    } else {
MM_UNROLL
        for (int i = 0; i < N; i++) v[i] = c + i < n_cols ? __ldg(xr + c + i) : 0.0f;
    }
}
template <bool VX>
static __device__ __forceinline__ void mm_ld_x8(float *v, const float *xr, int32_t c, int32_t n_cols) {
    mm_ld_x<8, VX>(v, xr, c, n_cols);
}

__device__ __forceinline__ float mm_bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float mm_bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
static __device__ __forceinline__ float mm_f16(uint32_t bits) {
    __half_raw r;
    r.x = (unsigned short)bits;
    return __half2float(__half(r));
}

/* Float types: unit u = elements 8u .. 8u+7. */
template <int TY, int R, int TT, bool VX>
static __device__ __forceinline__ void mm_unit_float(float (&acc)[R][TT], const mm_w &W, const int64_t *rows,
                                                     int32_t u, const float *const *xr) {
    float xs[TT][8];
MM_UNROLL
    for (int t = 0; t < TT; t++) mm_ld_x8<VX>(xs[t], xr[t], 8 * u, W.n_cols);
    float w[R][8];
MM_UNROLL
    for (int r = 0; r < R; r++) {
        const uint8_t *p = W.q + ((size_t)rows[r] * (size_t)W.n_units + (size_t)u) * (TY == MM_F32 ? 32 : 16);
        if (TY == MM_F32) {
            const float4 a = __ldg(reinterpret_cast<const float4 *>(p));
            const float4 b = __ldg(reinterpret_cast<const float4 *>(p + 16));
            w[r][0] = a.x, w[r][1] = a.y, w[r][2] = a.z, w[r][3] = a.w;
            w[r][4] = b.x, w[r][5] = b.y, w[r][6] = b.z, w[r][7] = b.w;
        } else {
            const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
            const uint32_t vw[4] = {v.x, v.y, v.z, v.w};
MM_UNROLL
            for (int k = 0; k < 4; k++) {
                if (TY == MM_BF16) {
                    w[r][2 * k] = mm_bf16_lo(vw[k]);
                    w[r][2 * k + 1] = mm_bf16_hi(vw[k]);
                } else {
                    w[r][2 * k] = mm_f16(vw[k] & 0xffffu);
                    w[r][2 * k + 1] = mm_f16(vw[k] >> 16);
                }
            }
        }
    }
MM_UNROLL
    for (int r = 0; r < R; r++)
MM_UNROLL
        for (int t = 0; t < TT; t++)
MM_UNROLL
            for (int i = 0; i < 8; i++) acc[r][t] = fmaf(w[r][i], xs[t][i], acc[r][t]);
}

/* IQ4_NL / IQ4_XS: the table value of a 4-bit index (quant_iq4nl_values), as the bytes
 * of four words picked by selects (no indexed load: it stays in registers). */
__device__ __forceinline__ float mm_iq4(uint32_t v) {
    const uint32_t wd = (v & 8) ? ((v & 4) ? 0x71594535u : 0x26190D01u) : ((v & 4) ? 0xF6EADDCFu : 0xBFAD9881u);
    return (float)(int8_t)(wd >> (8 * (v & 3)));
}

/* Quantized types: unit u = elements 32u .. 32u+31 (a block, one 32-element sub-block of
 * a group or of a super-block). */
template <int TY, int R, int TT, bool VX>
static __device__ __forceinline__ void mm_unit_quant(float (&acc)[R][TT], const mm_w &W, const int64_t *rows,
                                                     int32_t u, const float *const *xr) {
    /* 2^23 plus the zero point: mm_int_f(q, bias) = q - zero */
    constexpr float bias = TY == MM_Q4_0 ? 8388616.0f
                         : TY == MM_Q5_0 ? 8388624.0f
                         : TY == MM_Q6_K ? 8388640.0f
                         : TY == MM_Q3_K ? 8388612.0f
                                         : 8388608.0f;
    constexpr int UB = mm_unit_bytes(TY), UG = mm_units_per_group(TY);
    /* two scales per unit (one per 16 elements) */
    constexpr bool kHalves = TY == MM_Q6_K || TY == MM_Q3_K || TY == MM_Q2_K;
    /* w = scale * q + min: the min against the sum of x */
    constexpr bool kMin = TY == MM_Q4_K || TY == MM_Q5_K || TY == MM_Q4_1 || TY == MM_Q5_1 || TY == MM_I4_G64 ||
                          TY == MM_I4_G128 || TY == MM_Q2_K;
    constexpr bool kI8 = TY == MM_Q8_0 || TY == MM_I8_G64 || TY == MM_I8_G128;
    constexpr bool kTable = TY == MM_IQ4_NL || TY == MM_IQ4_XS;
    constexpr bool kFifth = TY == MM_Q5_0 || TY == MM_Q5_1 || TY == MM_Q5_K; /* aux: bit e */
    uint32_t qw[R][8];      /* the unit's quant bytes (8, 16 or 32) */
    uint32_t hb[R][2];      /* Q5_*: fifth bits; Q3_K: third bits; Q6_K: the 64 high bits */
    float s0[R], s1[R];     /* scales (two halves for kHalves) */
    float m0[R], m1[R];     /* the min coefficients (Q2_K: one per half) */
    const size_t nu = (size_t)W.n_units;
MM_UNROLL
    for (int r = 0; r < R; r++) {
        const size_t ru = (size_t)rows[r] * nu + (size_t)u;
        if (UB == 32) {
            const uint4 a = __ldg(reinterpret_cast<const uint4 *>(W.q + ru * 32));
            const uint4 b = __ldg(reinterpret_cast<const uint4 *>(W.q + ru * 32 + 16));
            qw[r][0] = a.x, qw[r][1] = a.y, qw[r][2] = a.z, qw[r][3] = a.w;
            qw[r][4] = b.x, qw[r][5] = b.y, qw[r][6] = b.z, qw[r][7] = b.w;
        } else if (UB == 16) {
            const uint4 a = __ldg(reinterpret_cast<const uint4 *>(W.q + ru * 16));
            qw[r][0] = a.x, qw[r][1] = a.y, qw[r][2] = a.z, qw[r][3] = a.w;
            qw[r][4] = qw[r][5] = qw[r][6] = qw[r][7] = 0;
        } else {
            const uint2 a = __ldg(reinterpret_cast<const uint2 *>(W.q + ru * 8));
            qw[r][0] = a.x, qw[r][1] = a.y;
            qw[r][2] = qw[r][3] = qw[r][4] = qw[r][5] = qw[r][6] = qw[r][7] = 0;
        }
        hb[r][0] = hb[r][1] = 0;
        m0[r] = m1[r] = 0.0f;
        if (TY == MM_Q8_0 || TY == MM_Q4_0 || TY == MM_Q5_0) {
            s0[r] = mm_f16(__ldg(reinterpret_cast<const unsigned short *>(W.sc) + ru));
            s1[r] = 0.0f;
            if (TY == MM_Q5_0) hb[r][0] = __ldg(reinterpret_cast<const uint32_t *>(W.aux) + ru);
        } else if (TY == MM_IQ4_NL || TY == MM_I8_G64 || TY == MM_I8_G128) {
            const size_t rg = (size_t)rows[r] * (size_t)(W.n_units / UG) + (size_t)(u / UG); /* its scale group */
            s0[r] = mm_f16(__ldg(reinterpret_cast<const unsigned short *>(W.sc) + rg));
            s1[r] = 0.0f;
        } else if (TY == MM_Q4_1 || TY == MM_Q5_1 || TY == MM_I4_G64 || TY == MM_I4_G128) {
            const size_t rg = (size_t)rows[r] * (size_t)(W.n_units / UG) + (size_t)(u / UG); /* its scale group */
            const uint32_t dm = __ldg(reinterpret_cast<const uint32_t *>(W.sc) + rg);
            s0[r] = mm_f16(dm & 0xffffu); /* w = d * q + m */
            s1[r] = 0.0f;
            m0[r] = mm_f16(dm >> 16);
            if (TY == MM_Q5_1) hb[r][0] = __ldg(reinterpret_cast<const uint32_t *>(W.aux) + ru);
        } else if (TY == MM_Q5_K) {
            const size_t rg = (size_t)rows[r] * (size_t)(W.n_units / UG) + (size_t)(u / UG); /* its scale group */
            /* sub-block j's 6-bit scale and min (quant_q4_K_scale_min) from the packed
             * scale bytes j%4, 4+j%4 and 8+j%4: three byte loads, no word selects */
            const uint8_t *sp = W.sc + rg * 16 + 4;
            const int j = u % 8;
            const uint32_t b0 = __ldg(sp + (j & 3)), b1 = __ldg(sp + 4 + (j & 3)), b2 = __ldg(sp + 8 + (j & 3));
            const uint32_t dm = __ldg(reinterpret_cast<const uint32_t *>(W.sc + rg * 16));
            const int sc = j < 4 ? (int)(b0 & 63) : (int)((b2 & 15) | ((b0 >> 6) << 4));
            const int mn = j < 4 ? (int)(b1 & 63) : (int)((b2 >> 4) | ((b1 >> 6) << 4));
            s0[r] = mm_f16(dm & 0xffffu) * (float)sc; /* exact: 11 x 6 bits */
            s1[r] = 0.0f;
            m0[r] = -(mm_f16(dm >> 16) * (float)mn);
            hb[r][0] = __ldg(reinterpret_cast<const uint32_t *>(W.aux) + ru);
        } else if (TY == MM_Q4_K) {
            const size_t rg = (size_t)rows[r] * (size_t)(W.n_units / UG) + (size_t)(u / UG); /* its scale group */
            const uint4 mv = __ldg(reinterpret_cast<const uint4 *>(W.sc + rg * 16));
            const uint32_t mw[4] = {mv.x, mv.y, mv.z, mv.w};
            int sc, mn;
            mm_q4k_scale_min_w(u % 8, mw, &sc, &mn);
            const float d = mm_f16(mw[0] & 0xffffu), dmin = mm_f16(mw[0] >> 16);
            s0[r] = d * (float)sc;     /* exact: 11 x 6 bits */
            s1[r] = 0.0f;
            m0[r] = -(dmin * (float)mn);
        } else if (TY == MM_Q3_K) {
            const size_t rg = (size_t)rows[r] * (size_t)(W.n_units / UG) + (size_t)(u / UG); /* its scale group */
            /* scales 2j and 2j+1 of the 16 (sub-block j = u%8): their low nibbles in the
             * two bytes at 2*(j%4) (nibble j/4), their high bits in the two at 8+2*(j%2)
             * (bits 2*(j/2)); three 2-byte loads, no word selects */
            const unsigned short *sp = reinterpret_cast<const unsigned short *>(W.sc + rg * 16);
            const int j = u % 8;
            const uint32_t lo = __ldg(sp + (j & 3)), hi = __ldg(sp + 4 + (j & 1));
            const float d = mm_f16(__ldg(sp + 6));
            const int sl = 4 * (j >> 2), sh = 2 * (j >> 1);
            const int c0 = (int)(((lo >> sl) & 15u) | (((hi >> sh) & 3u) << 4)) - 32;
            const int c1 = (int)(((lo >> (8 + sl)) & 15u) | (((hi >> (8 + sh)) & 3u) << 4)) - 32;
            s0[r] = d * (float)c0; /* exact: 11 x 6 bits */
            s1[r] = d * (float)c1;
            hb[r][0] = __ldg(reinterpret_cast<const uint32_t *>(W.aux) + ru);
        } else if (TY == MM_Q2_K) {
            const size_t rg = (size_t)rows[r] * (size_t)(W.n_units / UG) + (size_t)(u / UG); /* its scale group */
            const unsigned short sp = __ldg(reinterpret_cast<const unsigned short *>(W.sc + rg * 16) + (u % 8));
            const uint32_t dm = __ldg(reinterpret_cast<const uint32_t *>(W.d) + rg);
            const float d = mm_f16(dm & 0xffffu), dmin = mm_f16(dm >> 16);
            s0[r] = d * (float)(sp & 15); /* exact: 11 x 4 bits */
            m0[r] = -(dmin * (float)((sp >> 4) & 15));
            s1[r] = d * (float)((sp >> 8) & 15);
            m1[r] = -(dmin * (float)(sp >> 12));
        } else if (TY == MM_IQ4_XS) {
            const size_t rg = (size_t)rows[r] * (size_t)(W.n_units / UG) + (size_t)(u / UG); /* its scale group */
            const uint2 h = __ldg(reinterpret_cast<const uint2 *>(W.sc) + rg); /* d, scales_h, scales_l */
            const int j = u % 8;
            const int ls = (int)(((h.y >> (4 * j)) & 15) | (((h.x >> (16 + 2 * j)) & 3) << 4));
            s0[r] = mm_f16(h.x & 0xffffu) * (float)(ls - 32); /* exact: 11 x 6 bits */
            s1[r] = 0.0f;
        } else { /* Q6_K */
            const size_t rg = (size_t)rows[r] * (size_t)(W.n_units / UG) + (size_t)(u / UG); /* its scale group */
            const uint2 h = __ldg(reinterpret_cast<const uint2 *>(W.aux) + ru);
            hb[r][0] = h.x, hb[r][1] = h.y;
            const unsigned short sp = __ldg(reinterpret_cast<const unsigned short *>(W.sc + rg * 16) + (u % 8));
            const float d = mm_f16(__ldg(reinterpret_cast<const unsigned short *>(W.d) + rg));
            s0[r] = d * (float)(int8_t)(sp & 0xff); /* exact: 11 x 8 bits */
            s1[r] = d * (float)(int8_t)(sp >> 8);
        }
    }
    float p0[R][TT], p1[R][TT], sx[TT];
MM_UNROLL
    for (int t = 0; t < TT; t++) {
        sx[t] = 0.0f;
MM_UNROLL
        for (int r = 0; r < R; r++) p0[r][t] = p1[r][t] = 0.0f;
    }
    /* The unit's elements in chunks of CH, in order: 8 at a time, but 4 in the 8-token
     * tiles, where x[TT][8] would not fit beside the accumulators (ptxas spilled there).
     * Every part still takes its elements in order, so the chunk size changes no result. */
    constexpr int CH = TT >= 8 ? 4 : 8;
MM_UNROLL
    for (int pc = 0; pc < 32 / CH; pc++) { /* elements CH*pc .. CH*pc+CH-1 */
        float xs[TT][CH];
MM_UNROLL
        for (int t = 0; t < TT; t++) {
            mm_ld_x<CH, VX>(xs[t], xr[t], 32 * u + CH * pc, W.n_cols);
            if (kMin)
MM_UNROLL
                for (int i = 0; i < CH; i++) sx[t] += xs[t][i];
        }
MM_UNROLL
        for (int r = 0; r < R; r++) {
            float qf[CH];
MM_UNROLL
            for (int i = 0; i < CH; i++) {
                const int e = CH * pc + i;
                if (kI8) {
                    qf[i] = (float)(int8_t)(qw[r][e >> 2] >> (8 * (e & 3)));
                } else if (UB == 8) { /* two bits per element, element e at bits 2e */
                    uint32_t v = (qw[r][e >> 4] >> (2 * (e & 15))) & 3u;
                    if (TY == MM_Q3_K) v |= ((hb[r][0] >> e) & 1u) << 2;
                    qf[i] = mm_int_f(v, bias);
                } else {
                    const int k = e & 15; /* the byte; low nibble for e < 16 */
                    uint32_t v = (qw[r][k >> 2] >> (8 * (k & 3) + (e < 16 ? 0 : 4))) & 15u;
                    if (kFifth) v |= ((hb[r][0] >> e) & 1u) << 4;
                    if (TY == MM_Q6_K) v |= ((hb[r][e >> 4] >> (2 * (e & 15))) & 3u) << 4;
                    qf[i] = kTable ? mm_iq4(v) : mm_int_f(v, bias);
                }
            }
MM_UNROLL
            for (int t = 0; t < TT; t++)
MM_UNROLL
                for (int i = 0; i < CH; i++) {
                    if (kHalves && CH * pc + i >= 16)
                        p1[r][t] = fmaf(qf[i], xs[t][i], p1[r][t]);
                    else
                        p0[r][t] = fmaf(qf[i], xs[t][i], p0[r][t]);
                }
        }
        /* two scales: the first half's part is complete; fold it now (acc's first
         * operation, as before) so that its registers serve the second half (Q2_K:
         * and its min, against the first half's sum of x, which then restarts) */
        if (kHalves && CH * pc + CH == 16)
MM_UNROLL
            for (int r = 0; r < R; r++)
MM_UNROLL
                for (int t = 0; t < TT; t++) {
                    acc[r][t] = fmaf(s0[r], p0[r][t], acc[r][t]);
                    if (kMin) acc[r][t] = fmaf(m0[r], sx[t], acc[r][t]);
                    if (kMin && r == R - 1) sx[t] = 0.0f;
                }
    }
MM_UNROLL
    for (int r = 0; r < R; r++)
MM_UNROLL
        for (int t = 0; t < TT; t++) {
            if (!kHalves) acc[r][t] = fmaf(s0[r], p0[r][t], acc[r][t]);
            if (!kHalves && kMin) acc[r][t] = fmaf(m0[r], sx[t], acc[r][t]);
            if (kHalves) acc[r][t] = fmaf(s1[r], p1[r][t], acc[r][t]);
            if (kHalves && kMin) acc[r][t] = fmaf(m1[r], sx[t], acc[r][t]);
        }
}

/* grid: x = token tiles of TT rows, y = row groups of MM_WARPS*R rows (over the job's
 * matrices); block: MM_THREADS. Each warp: R rows x TT tokens. */
template <int TY, int R, int TT>
__global__ void __launch_bounds__(MM_THREADS) k_mm(const mm_job job, const float *x, int32_t n_tokens, int32_t xv) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t by = (int32_t)blockIdx.y;
    int mi = 0;
    while (mi + 1 < job.n && by >= job.blk0[mi + 1]) mi++;
    const mm_w &W = job.w[mi];
    const int64_t row0 = ((int64_t)(by - job.blk0[mi]) * MM_WARPS + warp) * R;
    if (row0 >= W.n_rows) return; /* whole warps only; no block barrier follows */
    const int32_t t0 = (int32_t)blockIdx.x * TT;
    int64_t rows[R];
MM_UNROLL
    for (int r = 0; r < R; r++) rows[r] = row0 + r < W.n_rows ? row0 + r : W.n_rows - 1;
    const float *xr[TT];
MM_UNROLL
    for (int t = 0; t < TT; t++)
        xr[t] = x + (size_t)(t0 + t < n_tokens ? t0 + t : n_tokens - 1) * (size_t)W.n_cols;
    float acc[R][TT];
MM_UNROLL
    for (int r = 0; r < R; r++)
MM_UNROLL
        for (int t = 0; t < TT; t++) acc[r][t] = 0.0f;
    /* Lane l takes units l, l+32, ... in order: first those whose x can be read with
     * vector loads (every unit when x is 16-byte aligned, but a float row's partial
     * last one), then the rest with guarded scalar loads. Same units, same order, same
     * arithmetic either way; the split only keeps branches out of the main loop. */
    constexpr bool kFloat = mm_is_float(TY);
    const int32_t n_vec = !xv ? 0 : kFloat ? W.n_cols / 8 : W.n_units;
    /* decode shapes: four units in flight per lane (an unrolled body's loads are issued
     * before its FMAs: __ldg cannot alias a store) */
    int32_t u = lane;
#if !defined(IFD_SIMT_EMU)
    constexpr int kUnroll = R * TT <= 2 ? (kFloat ? MM_FLOAT_DECODE_UNROLL : 4) : 1;
#pragma unroll kUnroll
#endif
    for (; u < n_vec; u += 32) {
        if (kFloat)
            mm_unit_float<TY, R, TT, true>(acc, W, rows, u, xr);
        else
            mm_unit_quant<TY, R, TT, true>(acc, W, rows, u, xr);
    }
    for (; u < W.n_units; u += 32) {
        if (kFloat)
            mm_unit_float<TY, R, TT, false>(acc, W, rows, u, xr);
        else
            mm_unit_quant<TY, R, TT, false>(acc, W, rows, u, xr);
    }
MM_UNROLL
    for (int r = 0; r < R; r++)
MM_UNROLL
        for (int t = 0; t < TT; t++) {
            float v = acc[r][t];
MM_UNROLL
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(IFD_FULL_MASK, v, o);
            /* every lane holds the same sum; lane (r*TT+t)%32 stores it */
            if (lane == (r * TT + t) % 32 && row0 + r < W.n_rows && t0 + t < n_tokens)
                W.out[(size_t)(t0 + t) * (size_t)W.n_rows + (size_t)(row0 + r)] = v;
        }
}

/* ---- launchers ------------------------------------------------------------------------------ */

template <int TY, int R, int TT>
static void mm_launch(dev_stream s, mm_job &job, const float *x, int32_t n_tokens, int32_t xv) {
    int32_t by = 0;
    for (int i = 0; i < job.n; i++) {
        job.blk0[i] = by;
        by += (int32_t)((job.w[i].n_rows + MM_WARPS * R - 1) / (MM_WARPS * R));
    }
    job.blk0[job.n] = by;
    const dim3 grid((unsigned)((n_tokens + TT - 1) / TT), (unsigned)by);
    auto kf = k_mm<TY, R, TT>;
    IFD_LAUNCH(kf, grid, MM_THREADS, 0, s, job, x, n_tokens, xv);
}

template <int TY>
static void mm_launch_type(dev_stream s, mm_job &job, const float *x, int32_t n_tokens, int32_t xv) {
    if (n_tokens == 1)
        mm_launch<TY, 2, 1>(s, job, x, n_tokens, xv);
    else if (n_tokens <= 2)
        mm_launch<TY, 4, 2>(s, job, x, n_tokens, xv);
    else if (n_tokens <= 4)
        mm_launch<TY, 4, 4>(s, job, x, n_tokens, xv);
    else
        mm_launch<TY, 4, 8>(s, job, x, n_tokens, xv);
}

/* matmul_ext.cu: launch a type matmul.cu does not (false: not one of them). */
bool mm_launch_ext(int type, dev_stream s, mm_job &job, const float *x, int32_t n_tokens, int32_t xv);

IFD_NS_END

#endif
