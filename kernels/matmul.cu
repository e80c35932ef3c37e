/* matmul.cu — out[t][r] = dot(weight row r, x[t]) for every weight type inferd reads
 * (matmul.h): F32, F16, BF16; Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL; Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, IQ4_XS; inferd's I8_G64/G128 and I4_G64/G128 (--quantize) — and the
 * host-side repack of a GGUF matrix into the layout these kernels read. Runs on the
 * thread that drives the device. The kernels themselves are in matmul_impl.cuh; this
 * file launches the first eight types, matmul_ext.cu the others.
 *
 * ---- The prepared layout ----------------------------------------------------------------
 * A row is cut into units: 8 elements for the float types, 32 for the quantized ones (a
 * 32-element block, one 32-element sub-block of a 64/128-element group or of a 256-element
 * super-block). The buffer holds up to four regions, each starting at a multiple of 256
 * bytes:
 *   q    [n_rows][n_units][ub]  the unit's values, aligned to ub:
 *          F32 ub=32 (8 floats), F16/BF16 ub=16 (8 halves); a float row's tail past
 *          n_cols (n_cols not a multiple of 8) is zero;
 *          Q8_0, I8_G* ub=32 (the 32 int8 quants);
 *          Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, I4_G*, Q4_K, Q5_K, Q6_K ub=16: 32
 *          four-bit values, byte k = element k in the low nibble and element k+16 in the
 *          high one (the Q4_0 order; Q4_K, Q5_K and Q6_K sub-blocks are re-ordered into
 *          it; Q5_* and Q6_K keep their low four bits here; IQ4_* hold table indices);
 *          Q2_K, Q3_K ub=8: 32 two-bit values, element e at bits 2e..2e+1 of the word;
 *   aux  Q5_0, Q5_1, Q5_K [n_rows][n_units] uint32: bit e = the fifth bit of element e;
 *        Q3_K [n_rows][n_units] uint32: bit e = the third bit of element e (GGUF's hmask);
 *        Q6_K [n_rows][n_units] uint64: bits 2e..2e+1 = the top two bits of element e;
 *   sc   Q8_0/Q4_0/Q5_0/IQ4_NL [n_rows][n_units] fp16 d; I8_G* [n_rows][n_groups] fp16 d;
 *        Q4_1/Q5_1 [n_rows][n_units], I4_G* [n_rows][n_groups]: fp16 d, fp16 m;
 *        Q4_K, Q5_K [n_rows][n_super][16]: the super-block's d, dmin and 12 packed scale
 *             bytes as in GGUF;
 *        Q3_K [n_rows][n_super][16]: the 12 packed scale bytes, fp16 d, 2 bytes of pad;
 *        Q2_K, Q6_K [n_rows][n_super][16]: the 16 scale bytes (one per 16 elements);
 *        IQ4_XS [n_rows][n_super][8]: d, scales_h, scales_l[4] as in GGUF;
 *   d    Q6_K [n_rows][n_super] fp16 d; Q2_K [n_rows][n_super] fp16 d, fp16 dmin.
 * So every type keeps its GGUF bytes per element (Q3_K: 2 bytes more per 256 elements);
 * only the order changes, and every lane's quants come in one aligned 8-, 16- or 32-byte
 * load.
 *
 * ---- The arithmetic of one output element ------------------------------------------------
 * One warp computes out[t][r]. Lane l takes the units l, l+32, l+64, ... in that order.
 * Float types: acc = fmaf(w_i, x_i, acc) over the unit's 8 elements in order. Quantized:
 * part = fmaf(q_i, x_i, part) from 0 over the unit's 32 elements in order (q_i the
 * integer value, zero point removed, or IQ4's table value, converted exactly), then
 * acc = fmaf(scale, part, acc); the types with a minimum (w = scale*q + min: Q4_1, Q5_1,
 * I4_G*, Q4_K, Q5_K) then acc = fmaf(min, sum x_i, acc). Q6_K, Q3_K and Q2_K have a
 * scale per 16 elements: two parts, elements 0..15 and 16..31, folded in that order
 * (Q2_K: each followed by its min times the sum of its 16 x). Scales are products of
 * an fp16 and a small integer, exact in fp32. Then the warp adds its 32 accumulators with the xor
 * butterfly 16, 8, 4, 2, 1. Every launch shape runs exactly this (how many rows a warp
 * holds, R, and how many token rows, TT, only change which elements share loads), with
 * explicit fmaf and exact conversions only, so a row's result never depends on n_tokens
 * or on its neighbours in x, and the GPU must give the emulation's bits (test_matmul
 * checks every type against this order written out on the host, bit for bit).
 *
 * Shapes: n_tokens 1 -> R=2, TT=1 (decode: the weights are streamed once); <= 2, <= 4
 * -> R=4, TT=2/4; more -> R=4, TT=8 token tiles over grid.x, row groups over grid.y, so
 * the blocks that share a weight tile run side by side and read it from L2. x is read
 * through the read-only cache (__ldg), not staged in shared memory: a token tile of
 * x is TT * n_cols floats (458 KB for 8 rows of the 14336-wide FFN down matrix), more
 * than a block's shared memory, and the block's four warps read the same x lines, so
 * L1 serves the reuse; each x load is shared by the R rows a warp holds.
 *
 * Registers (ptxas -v; budgets in tests/cuda/ptxas_budgets.txt): decode 48-95, the
 * 8-token tiles 168-255; no spills but in some 8-token tiles (a few bytes, see the
 * budget file). */
#include "simt.h"

#include "matmul.h"
#include "matmul_impl.cuh"

#include <string.h>

IFD_NS_BEGIN

/* ---- layout (host and launcher) ----------------------------------------------------------- */

typedef struct mm_layout {
    int64_t n_units, n_super; /* per row */
    int ub;                   /* bytes of a unit in q */
    size_t off_aux, off_sc, off_d, total;
} mm_layout;

static size_t mm_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* Elements per block and bytes per block of the GGUF encoding (quant.h's structs). */
static int mm_gguf_block(int type, int *bytes) {
    switch (type) {
    case MM_F32: *bytes = 4; return 1;
    case MM_F16:
    case MM_BF16: *bytes = 2; return 1;
    case MM_Q8_0: *bytes = 34; return 32;
    case MM_Q4_0: *bytes = 18; return 32;
    case MM_Q4_1: *bytes = 20; return 32;
    case MM_Q5_0: *bytes = 22; return 32;
    case MM_Q5_1: *bytes = 24; return 32;
    case MM_IQ4_NL: *bytes = 18; return 32;
    case MM_Q2_K: *bytes = 84; return 256;
    case MM_Q3_K: *bytes = 110; return 256;
    case MM_Q4_K: *bytes = 144; return 256;
    case MM_Q5_K: *bytes = 176; return 256;
    case MM_Q6_K: *bytes = 210; return 256;
    case MM_IQ4_XS: *bytes = 136; return 256;
    case MM_I8_G64: *bytes = 66; return 64;
    case MM_I8_G128: *bytes = 130; return 128;
    case MM_I4_G64: *bytes = 36; return 64;
    case MM_I4_G128: *bytes = 68; return 128;
    default: *bytes = 0; return 0;
    }
}

static bool mm_layout_of(int type, int64_t n_rows, int64_t n_cols, mm_layout *L) {
    int bb;
    const int bs = mm_gguf_block(type, &bb);
    if (!bs || n_rows <= 0 || n_cols <= 0 || n_rows > MM_MAX_ROWS || n_cols > MM_MAX_COLS ||
        n_cols % bs != 0)
        return false;
    const bool fl = mm_is_float(type);
    L->n_units = fl ? (n_cols + 7) / 8 : n_cols / 32;
    L->n_super = n_cols / 256;
    L->ub = fl && type != MM_F32 ? 16 : mm_unit_bytes(type);
    const size_t rows = (size_t)n_rows, nu = (size_t)L->n_units, ns = (size_t)L->n_super;
    const size_t ng = fl ? 0 : nu / (size_t)mm_units_per_group(type);
    size_t off = mm_align(rows * nu * (size_t)L->ub);
    size_t aux = 0, sc = 0, d = 0;
    switch (type) {
    case MM_Q5_0: aux = rows * nu * 4; sc = rows * nu * 2; break;
    case MM_Q5_1: aux = rows * nu * 4; sc = rows * nu * 4; break;
    case MM_Q8_0:
    case MM_Q4_0:
    case MM_IQ4_NL:
    case MM_I8_G64:
    case MM_I8_G128: sc = rows * ng * 2; break;
    case MM_Q4_1:
    case MM_I4_G64:
    case MM_I4_G128: sc = rows * ng * 4; break;
    case MM_Q4_K: sc = rows * ns * 16; break;
    case MM_Q5_K: aux = rows * nu * 4; sc = rows * ns * 16; break;
    case MM_Q3_K: aux = rows * nu * 4; sc = rows * ns * 16; break;
    case MM_Q2_K: sc = rows * ns * 16; d = rows * ns * 4; break;
    case MM_IQ4_XS: sc = rows * ns * 8; break;
    case MM_Q6_K: aux = rows * nu * 8; sc = rows * ns * 16; d = rows * ns * 2; break;
    default: break;
    }
    L->off_aux = off;
    off += mm_align(aux);
    L->off_sc = off;
    off += mm_align(sc);
    L->off_d = off;
    off += mm_align(d);
    L->total = off;
    return true;
}

size_t k_matmul_prepared_bytes(int type, int64_t n_rows, int64_t n_cols) {
    mm_layout L;
    return mm_layout_of(type, n_rows, n_cols, &L) ? L.total : 0;
}

size_t k_matmul_scratch_bytes(int32_t max_tokens, int64_t max_cols) {
    (void)max_tokens, (void)max_cols;
    return 0;
}


int k_matmul_prepare(void *dst, const void *gguf_data, int type, int64_t n_rows, int64_t n_cols) {
    mm_layout L;
    if (!dst || !gguf_data || !mm_layout_of(type, n_rows, n_cols, &L)) return DEV_ERR;
    int bb;
    const int bs = mm_gguf_block(type, &bb);
    const size_t row_bytes = (size_t)(n_cols / bs) * (size_t)bb;
    uint8_t *out = (uint8_t *)dst;
    memset(out, 0, L.total);
    uint8_t *q = out, *aux = out + L.off_aux, *sc = out + L.off_sc, *dd = out + L.off_d;
    const size_t nu = (size_t)L.n_units, ns = (size_t)L.n_super;
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *src = (const uint8_t *)gguf_data + (size_t)r * row_bytes;
        uint8_t *qr = q + (size_t)r * nu * (size_t)L.ub;
        switch (type) {
        case MM_F32:
        case MM_F16:
        case MM_BF16: memcpy(qr, src, row_bytes); break; /* the tail stays zero */
        case MM_Q8_0:
        case MM_Q4_0:
        case MM_Q5_0:
            for (size_t b = 0; b < nu; b++) {
                const uint8_t *blk = src + b * (size_t)bb;
                memcpy(sc + ((size_t)r * nu + b) * 2, blk, 2);
                if (type == MM_Q8_0) {
                    memcpy(qr + b * 32, blk + 2, 32);
                } else if (type == MM_Q4_0) {
                    memcpy(qr + b * 16, blk + 2, 16);
                } else {
                    memcpy(aux + ((size_t)r * nu + b) * 4, blk + 2, 4);
                    memcpy(qr + b * 16, blk + 6, 16);
                }
            }
            break;
        case MM_Q4_K:
            for (size_t s = 0; s < ns; s++) {
                const uint8_t *blk = src + s * 144, *qs = blk + 16;
                memcpy(sc + ((size_t)r * ns + s) * 16, blk, 16); /* d, dmin, scales[12] */
                for (int j = 0; j < 8; j++) {
                    uint8_t *u = qr + (s * 8 + (size_t)j) * 16;
                    const uint8_t *pair = qs + 32 * (j / 2);
                    const int sh = 4 * (j & 1);
                    for (int k = 0; k < 16; k++)
                        u[k] = (uint8_t)(((pair[k] >> sh) & 15) | (((pair[k + 16] >> sh) & 15) << 4));
                }
            }
            break;
        case MM_Q4_1:
        case MM_Q5_1:
        case MM_IQ4_NL:
            for (size_t b = 0; b < nu; b++) {
                const uint8_t *blk = src + b * (size_t)bb;
                if (type == MM_IQ4_NL) {
                    memcpy(sc + ((size_t)r * nu + b) * 2, blk, 2);
                    memcpy(qr + b * 16, blk + 2, 16);
                } else {
                    memcpy(sc + ((size_t)r * nu + b) * 4, blk, 4); /* d, m */
                    if (type == MM_Q5_1) memcpy(aux + ((size_t)r * nu + b) * 4, blk + 4, 4);
                    memcpy(qr + b * 16, blk + (type == MM_Q5_1 ? 8 : 4), 16);
                }
            }
            break;
        case MM_I8_G64:
        case MM_I8_G128:
        case MM_I4_G64:
        case MM_I4_G128: {
            /* a group: [fp16 d (, fp16 m)][its G/32 units' quants, in unit order] */
            const size_t ug = (size_t)mm_units_per_group(type), ng = nu / ug;
            const bool i8 = type == MM_I8_G64 || type == MM_I8_G128;
            const size_t hb = i8 ? 2 : 4;
            for (size_t g = 0; g < ng; g++) {
                const uint8_t *blk = src + g * (size_t)bb;
                memcpy(sc + ((size_t)r * ng + g) * hb, blk, hb);
                memcpy(qr + g * ug * (size_t)L.ub, blk + hb, ug * (size_t)L.ub);
            }
            break;
        }
        case MM_Q5_K:
            for (size_t s = 0; s < ns; s++) {
                const uint8_t *blk = src + s * 176, *qh = blk + 16, *qs = blk + 48;
                memcpy(sc + ((size_t)r * ns + s) * 16, blk, 16); /* d, dmin, scales[12] */
                for (int j = 0; j < 8; j++) {
                    /* sub-block j: nibbles of qs[32*(j/2) + e] (high ones for odd j),
                     * fifth bit j of qh[e] (quant.c's deq_block_q5_K) */
                    uint8_t *u = qr + (s * 8 + (size_t)j) * 16;
                    const uint8_t *pair = qs + 32 * (j / 2);
                    const int sh = 4 * (j & 1);
                    uint32_t hi = 0;
                    for (int k = 0; k < 16; k++)
                        u[k] = (uint8_t)(((pair[k] >> sh) & 15) | (((pair[k + 16] >> sh) & 15) << 4));
                    for (int e = 0; e < 32; e++) hi |= (uint32_t)((qh[e] >> j) & 1) << e;
                    memcpy(aux + ((size_t)r * nu + s * 8 + (size_t)j) * 4, &hi, 4);
                }
            }
            break;
        case MM_Q2_K:
        case MM_Q3_K:
            for (size_t s = 0; s < ns; s++) {
                const uint8_t *blk = src + s * (size_t)bb;
                const uint8_t *qs = blk + (type == MM_Q2_K ? 16 : 32), *hm = blk;
                if (type == MM_Q2_K) {
                    memcpy(sc + ((size_t)r * ns + s) * 16, blk, 16);      /* scales[16] */
                    memcpy(dd + ((size_t)r * ns + s) * 4, blk + 80, 4);   /* d, dmin */
                } else {
                    memcpy(sc + ((size_t)r * ns + s) * 16, blk + 96, 14); /* scales[12], d */
                }
                for (int j = 0; j < 8; j++) {
                    uint64_t lo = 0;
                    uint32_t hi = 0;
                    for (int e = 0; e < 32; e++) {
                        /* element g of the super-block: byte 32*(g/128) + g%32 of qs at
                         * shift 2*((g%128)/32); Q3_K's third bit: bit g/32 of hmask[g%32] */
                        const int g = 32 * j + e;
                        lo |= (uint64_t)((qs[32 * (g / 128) + g % 32] >> (2 * ((g % 128) / 32))) & 3) << (2 * e);
                        hi |= (uint32_t)((hm[g % 32] >> (g / 32)) & 1) << e;
                    }
                    memcpy(qr + (s * 8 + (size_t)j) * 8, &lo, 8);
                    if (type == MM_Q3_K) memcpy(aux + ((size_t)r * nu + s * 8 + (size_t)j) * 4, &hi, 4);
                }
            }
            break;
        case MM_IQ4_XS:
            for (size_t s = 0; s < ns; s++) {
                const uint8_t *blk = src + s * 136;
                memcpy(sc + ((size_t)r * ns + s) * 8, blk, 8); /* d, scales_h, scales_l[4] */
                memcpy(qr + s * 8 * 16, blk + 8, 128);         /* already in unit order */
            }
            break;
        case MM_Q6_K:
            for (size_t s = 0; s < ns; s++) {
                const uint8_t *blk = src + s * 210, *ql = blk, *qh = blk + 128;
                memcpy(sc + ((size_t)r * ns + s) * 16, blk + 192, 16);
                memcpy(dd + ((size_t)r * ns + s) * 2, blk + 208, 2);
                for (int j = 0; j < 8; j++) {
                    uint8_t lo[32];
                    uint64_t hi = 0;
                    for (int e = 0; e < 32; e++) {
                        /* element g of the super-block: half n, quadrant qd, lane l
                         * (the order of quant.c's deq_block_q6_K) */
                        const int g = 32 * j + e, n = g / 128, qd = (g % 128) / 32, l = g % 32;
                        const uint8_t b = ql[64 * n + l + 32 * (qd & 1)];
                        lo[e] = qd < 2 ? (b & 15) : (b >> 4);
                        hi |= (uint64_t)((qh[32 * n + l] >> (2 * qd)) & 3) << (2 * e);
                    }
                    uint8_t *u = qr + (s * 8 + (size_t)j) * 16;
                    for (int k = 0; k < 16; k++) u[k] = (uint8_t)(lo[k] | (lo[k + 16] << 4));
                    memcpy(aux + ((size_t)r * nu + s * 8 + (size_t)j) * 8, &hi, 8);
                }
            }
            break;
        }
    }
    return DEV_OK;
}

int k_matmul_group(dev_stream s, int n, float *const *outs, const k_wmat *const *ws, const float *x,
                   int32_t n_tokens, void *scratch, size_t scratch_bytes) {
    (void)scratch, (void)scratch_bytes;
    if (n < 1 || n > K_MATMUL_MAX_GROUP || !outs || !ws || !x || n_tokens < 0) return DEV_ERR;
    mm_job job;
    memset(&job, 0, sizeof job);
    job.n = n;
    int64_t total_groups = 0;
    for (int i = 0; i < n; i++) {
        const k_wmat *w = ws[i];
        mm_layout L;
        if (!w || !w->data || !outs[i] || !mm_layout_of(w->type, w->n_rows, w->n_cols, &L)) return DEV_ERR;
        if (w->type != ws[0]->type || w->n_cols != ws[0]->n_cols) return DEV_ERR;
        if (((uintptr_t)w->data & 15) != 0) return DEV_ERR; /* the 16-byte loads */
        const uint8_t *b = (const uint8_t *)w->data;
        job.w[i].q = b;
        job.w[i].aux = b + L.off_aux;
        job.w[i].sc = b + L.off_sc;
        job.w[i].d = b + L.off_d;
        job.w[i].out = outs[i];
        job.w[i].n_rows = w->n_rows;
        job.w[i].n_cols = (int32_t)w->n_cols;
        job.w[i].n_units = (int32_t)L.n_units;
        total_groups += (w->n_rows + 7) / 8; /* the fewest rows per group any shape uses */
    }
    if (total_groups > 65535) return DEV_ERR; /* grid.y */
    if (n_tokens == 0) return DEV_OK;
    const int32_t xv = ((uintptr_t)x & 15) == 0 && ws[0]->n_cols % 4 == 0;
    switch (ws[0]->type) {
    case MM_F32: mm_launch_type<MM_F32>(s, job, x, n_tokens, xv); break;
    case MM_F16: mm_launch_type<MM_F16>(s, job, x, n_tokens, xv); break;
    case MM_BF16: mm_launch_type<MM_BF16>(s, job, x, n_tokens, xv); break;
    case MM_Q8_0: mm_launch_type<MM_Q8_0>(s, job, x, n_tokens, xv); break;
    case MM_Q4_0: mm_launch_type<MM_Q4_0>(s, job, x, n_tokens, xv); break;
    case MM_Q5_0: mm_launch_type<MM_Q5_0>(s, job, x, n_tokens, xv); break;
    case MM_Q4_K: mm_launch_type<MM_Q4_K>(s, job, x, n_tokens, xv); break;
    case MM_Q6_K: mm_launch_type<MM_Q6_K>(s, job, x, n_tokens, xv); break;
    default:
        if (!mm_launch_ext(ws[0]->type, s, job, x, n_tokens, xv)) return DEV_ERR;
    }
    return dev_check_launch();
}

int k_matmul(dev_stream s, float *out, const k_wmat *w, const float *x, int32_t n_tokens, void *scratch,
             size_t scratch_bytes) {
    return k_matmul_group(s, 1, &out, &w, x, n_tokens, scratch, scratch_bytes);
}

IFD_NS_END
