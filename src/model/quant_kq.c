/* quant_kq.c — reference quantizers of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): f32
 * rows to the byte-exact ggml blocks that quant.c's dequantizers define.
 *
 * Each 256-element super-block is cut into sub-blocks (32 elements for Q4_K / Q5_K, 16
 * for the others). Every sub-block gets its own scale (and, for the asymmetric Q2_K /
 * Q4_K / Q5_K, a minimum) from a small search over candidate scales that minimises a
 * weighted squared error — the approach of llama.cpp's reference quantizers (the
 * weights are theirs: x^2 for the signed formats, rms + |x| for Q4_K / Q5_K, |x| for
 * Q2_K), not a plain min/max. The sub-block scales are then quantized (6 bits for Q3_K /
 * Q4_K / Q5_K, 4 bits for Q2_K, int8 for Q6_K) against the super-block's fp16 d (and
 * dmin): the rounded code and its neighbours are tried, and the one of least weighted
 * error wins (llama.cpp's reference just rounds; this is where ours gains ~0.9% RMS on
 * Q4_K), each with its quants recomputed with exactly the f32 products the dequantizer
 * will use.
 *
 * The searches run in double on each sub-block divided by its largest magnitude, so
 * inputs from 1e-30 to 1e30 neither overflow nor underflow in the sums; a scale that
 * does not fit fp16 saturates at 65504 (the result stays finite); NaN inputs give some
 * finite or NaN output but never undefined behaviour (every float -> int conversion is
 * clamped first). Deterministic: built with -ffp-contract=off like quant.c.
 * Thread-safe (pure functions). */
#include <math.h>
#include <string.h>

#include "../util/common.h"
#include "quant.h"

/* v rounded to nearest (ties up), clamped to [lo, hi]; NaN gives lo. Truncation of the
 * non-negative v - lo + 0.5 (no libm call: this is the quantizers' inner loop). */
static inline int round_clamp(double v, int lo, int hi) {
    if (!(v > lo)) return lo;
    if (v >= hi) return hi;
    return lo + (int)(v - lo + 0.5);
}

/* fp16 of a scale, saturated at the largest finite half (NaN -> 0). */
static ifd_fp16 fp16_sat(double v) {
    if (v != v) v = 0.0;
    if (v > 65504.0) v = 65504.0;
    if (v < -65504.0) v = -65504.0;
    return ifd_f32_to_fp16((float)v);
}

static double sub_amax(const float *x, int n) {
    double a = 0.0;
    for (int i = 0; i < n; i++) a = fmax(a, fabs((double)x[i]));
    return a;
}

/* ---- the sub-block searches -------------------------------------------------------------- */

/* Asymmetric fit x ~= s * q - m, q in 0..nmax, s >= 0, m >= 0 (the formats subtract the
 * minimum, so the offset -m is kept <= 0). Candidates: the min/max grid, then nstep + 1
 * grids of nmax + rmin + rdelta * k levels over the range, each followed by the weighted
 * least-squares s and offset for its quants; the candidate of the least weighted error
 * (squared, or absolute when mad) wins. w: the weights (any scale). Returns s; *m_out m. */
static double fit_scale_min(const float *x, const double *w, int n, int nmax, double rmin,
                            double rdelta, int nstep, bool mad, uint8_t *q, double *m_out) {
    const double amax = sub_amax(x, n);
    if (!(amax > 0.0)) { /* zeros (or NaN): everything at q = 0 */
        memset(q, 0, (size_t)n);
        *m_out = 0.0;
        return 0.0;
    }
    double y[32], lo, hi, sw = 0.0, sx = 0.0;
    for (int i = 0; i < n; i++) y[i] = (double)x[i] / amax;
    lo = hi = y[0];
    for (int i = 0; i < n; i++) {
        lo = fmin(lo, y[i]);
        hi = fmax(hi, y[i]);
        sw += w[i];
        sx += w[i] * y[i];
    }
    if (lo > 0.0) lo = 0.0;
    if (!(hi > lo)) { /* constant <= 0: all of it in the minimum */
        memset(q, 0, (size_t)n);
        *m_out = -lo * amax;
        return 0.0;
    }
    double best_s = (hi - lo) / nmax, best_off = lo, best = 0.0;
    for (int i = 0; i < n; i++) {
        q[i] = (uint8_t)round_clamp((y[i] - lo) / best_s, 0, nmax);
        const double e = best_s * q[i] + lo - y[i];
        best += w[i] * (mad ? fabs(e) : e * e);
    }
    for (int k = 0; k <= nstep; k++) {
        const double inv = (nmax + rmin + rdelta * k) / (hi - lo);
        uint8_t t[32];
        double sl = 0.0, sl2 = 0.0, sxl = 0.0;
        for (int i = 0; i < n; i++) {
            t[i] = (uint8_t)round_clamp(inv * (y[i] - lo), 0, nmax);
            sl += w[i] * t[i];
            sl2 += w[i] * t[i] * t[i];
            sxl += w[i] * t[i] * y[i];
        }
        const double det = sw * sl2 - sl * sl;
        if (!(det > 0.0)) continue;
        double s = (sw * sxl - sx * sl) / det, off = (sl2 * sx - sl * sxl) / det;
        if (off > 0.0) { /* an offset above zero cannot be stored: refit s alone */
            off = 0.0;
            s = sxl / sl2;
        }
        double err = 0.0;
        for (int i = 0; i < n; i++) {
            const double e = s * t[i] + off - y[i];
            err += w[i] * (mad ? fabs(e) : e * e);
        }
        if (err < best) {
            best = err;
            best_s = s;
            best_off = off;
            memcpy(q, t, (size_t)n);
        }
    }
    *m_out = -best_off * amax;
    return best_s * amax;
}

/* Symmetric fit x ~= s * q, q in -nmax..nmax-1, weights x^2: the element of largest
 * magnitude maps to -nmax, then 18 neighbouring grids (-(nmax +- 0.1 k) over it); each
 * grid's best s is sum(w x q) / sum(w q^2), and the grid maximising sum(w x q)^2 /
 * sum(w q^2) (the least weighted squared error) wins. Returns s (signed). */
static double fit_scale_signed(const float *x, int n, int nmax) {
    const double amax = sub_amax(x, n);
    if (!(amax > 0.0)) return 0.0;
    double y[16], max = 0.0;
    for (int i = 0; i < n; i++) {
        y[i] = (double)x[i] / amax;
        if (fabs(y[i]) > fabs(max)) max = y[i];
    }
    double best = -1.0, best_s = 0.0;
    for (int k = 0; k <= 18; k++) {
        const int step = k == 0 ? 0 : k <= 9 ? -k : k - 9; /* 0 first, then -1..-9, 1..9 */
        const double inv = -(nmax + 0.1 * step) / max;
        double sxl = 0.0, sl2 = 0.0;
        for (int i = 0; i < n; i++) {
            const int l = round_clamp(inv * y[i], -nmax, nmax - 1);
            const double wi = y[i] * y[i];
            sxl += wi * y[i] * l;
            sl2 += wi * l * l;
        }
        if (sl2 > 0.0 && sxl * sxl / sl2 > best) {
            best = sxl * sxl / sl2;
            best_s = sxl / sl2;
        }
    }
    return best_s * amax;
}

/* ---- Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scale and minimum each -------------------- */

static void pack_scale_min_k4(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] |= sc[j];
            out[j + 4] |= mn[j];
        } else { /* low nibbles in bytes 8..11, high 2 bits on top of bytes j-4 and j */
            out[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
            out[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            out[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

/* Weighted error (squared, or absolute when mad) of sub-block x[n] stored with the f32
 * step dj and minimum mj (the dequantizer's products), each element at its nearest
 * level 0..nmax; q: those levels. */
static double sub_error_min(const float *x, const double *w, int n, float dj, float mj, int nmax,
                            bool mad, uint8_t *q) {
    double err = 0.0;
    for (int l = 0; l < n; l++) {
        q[l] = dj > 0.0f ? (uint8_t)round_clamp(((double)x[l] + mj) / dj, 0, nmax) : 0;
        const double e = (double)(dj * (float)q[l] - mj) - x[l];
        err += w[l] * (mad ? fabs(e) : e * e);
    }
    return err;
}

/* The stored (code, minimum code) of a sub-block: the rounded ones (c0, m0) and their
 * neighbours one either side (9 pairs, within 0..cmax), the pair of least error with its
 * quants recomputed wins; q: its quants. The rounding of a small sub-block scale to a
 * few bits moves its grid by up to half a code, which the sub-block search did not see. */
static void pick_codes_min(const float *x, const double *w, int n, float d, float dmin, int c0,
                           int m0, int cmax, int nmax, bool mad, uint8_t *c_out, uint8_t *m_out,
                           uint8_t *q) {
    double best = -1.0;
    for (int a = c0 - 1; a <= c0 + 1; a++)
        for (int b = m0 - 1; b <= m0 + 1; b++) {
            if (a < 0 || a > cmax || b < 0 || b > cmax) continue;
            uint8_t t[32];
            const double e = sub_error_min(x, w, n, d * (float)a, dmin * (float)b, nmax, mad, t);
            if (best < 0.0 || e < best) {
                best = e;
                *c_out = (uint8_t)a;
                *m_out = (uint8_t)b;
                memcpy(q, t, (size_t)n);
            }
        }
}

/* One super-block x[256] to d, dmin, the packed scales and L[256] in 0..nmax; the 6-bit
 * codes by pick_codes_min. */
static void quant_super_scale_min(const float *x, int nmax, double rmin, int nstep, ifd_fp16 *d16,
                                  ifd_fp16 *dmin16, uint8_t scales[12], uint8_t *L) {
    double s[8], m[8], smax = 0.0, mmax = 0.0, w[8][32];
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        /* weights rms + |x| of the sub-block divided by its largest magnitude */
        const double amax = sub_amax(xs, 32), inv = amax > 0.0 ? 1.0 / amax : 0.0;
        double s2 = 0.0;
        for (int l = 0; l < 32; l++) s2 += ((double)xs[l] * inv) * ((double)xs[l] * inv);
        const double rms = sqrt(s2 / 32);
        for (int l = 0; l < 32; l++) w[j][l] = rms + fabs((double)xs[l] * inv);
        s[j] = fit_scale_min(xs, w[j], 32, nmax, rmin, 0.1, nstep, false, L + 32 * j, &m[j]);
        smax = fmax(smax, s[j]);
        mmax = fmax(mmax, m[j]);
    }
    *d16 = fp16_sat(smax / 63);
    *dmin16 = fp16_sat(mmax / 63);
    const float d = ifd_fp16_to_f32(*d16), dmin = ifd_fp16_to_f32(*dmin16);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        const int sc0 = d > 0.0f ? round_clamp(s[j] / d, 0, 63) : 0;
        const int mn0 = dmin > 0.0f ? round_clamp(m[j] / dmin, 0, 63) : 0;
        pick_codes_min(x + 32 * j, w[j], 32, d, dmin, sc0, mn0, 63, nmax, false, &sc[j], &mn[j],
                       L + 32 * j);
    }
    pack_scale_min_k4(sc, mn, scales);
}

void quant_quantize_row_q4_K(const float *x, block_q4_K *out, int64_t n) {
    IFD_ASSERT(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        uint8_t L[QK_K];
        block_q4_K *y = &out[b];
        quant_super_scale_min(x, 15, -1.0, 20, &y->d, &y->dmin, y->scales, L);
        /* 64 elements per 32 bytes: low nibbles the first 32, high nibbles the next */
        for (int c = 0; c < QK_K / 64; c++)
            for (int l = 0; l < 32; l++)
                y->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

void quant_quantize_row_q5_K(const float *x, block_q5_K *out, int64_t n) {
    IFD_ASSERT(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        uint8_t L[QK_K];
        block_q5_K *y = &out[b];
        quant_super_scale_min(x, 31, -0.5, 15, &y->d, &y->dmin, y->scales, L);
        memset(y->qh, 0, sizeof y->qh);
        /* as Q4_K, the fifth bits of chunk c's two halves in qh bits 2c and 2c + 1 */
        for (int c = 0; c < QK_K / 64; c++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                y->qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                y->qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
    }
}

/* ---- Q6_K / Q3_K: 16 sub-blocks of 16, a signed scale each ------------------------------ */

/* One super-block's 16 signed sub-block scales quantized against d = s_max / -smin
 * (s_max: the scale of largest magnitude, which lands on the most negative code -smin),
 * sc[] in -smin..smin-1, L[] the quants q + nmax with q in -nmax..nmax-1.
 * Returns false (nothing written) for an all-zero block. */
static bool quant_super_signed(const float *x, int nmax, int smin, ifd_fp16 *d16, int sc[16],
                               uint8_t *L) {
    double s[16], smax = 0.0;
    for (int j = 0; j < 16; j++) {
        s[j] = fit_scale_signed(x + 16 * j, 16, nmax);
        if (fabs(s[j]) > fabs(smax)) smax = s[j];
    }
    *d16 = fp16_sat(smax / -smin);
    const double d = ifd_fp16_to_f32(*d16);
    if (!(fabs(d) > 0.0)) return false;
    for (int j = 0; j < 16;
         j++) { /* the rounded code and its neighbours, as pick_codes_min (weights x^2) */
        const int c0 = round_clamp(s[j] / d, -smin, smin - 1);
        double best = -1.0;
        for (int c = c0 - 1; c <= c0 + 1; c++) {
            if (c < -smin || c > smin - 1) continue;
            const float dj = (float)d * (float)c;
            uint8_t q[16];
            double err = 0.0;
            for (int l = 0; l < 16; l++) {
                const double v = x[16 * j + l];
                const int k = dj != 0.0f ? round_clamp(v / dj, -nmax, nmax - 1) : 0;
                q[l] = (uint8_t)(nmax + k);
                const double e = (double)(dj * (float)k) - v;
                err += v * v * e * e;
            }
            if (best < 0.0 || err < best) {
                best = err;
                sc[j] = c;
                memcpy(L + 16 * j, q, 16);
            }
        }
    }
    return true;
}

void quant_quantize_row_q6_K(const float *x, block_q6_K *out, int64_t n) {
    IFD_ASSERT(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        uint8_t L[QK_K];
        int sc[16];
        block_q6_K *y = &out[b];
        memset(y, 0, sizeof *y);
        if (!quant_super_signed(x, 32, 128, &y->d, sc, L)) {
            y->d = 0;
            continue;
        }
        for (int j = 0; j < 16; j++) y->scales[j] = (int8_t)sc[j];
        /* per 128: ql[l] low/high nibbles elements l / l + 64, ql[l + 32] l + 32 / l + 96;
         * qh[l] the top 2 bits of l, l + 32, l + 64, l + 96 at shifts 0, 2, 4, 6 */
        for (int h = 0; h < 2; h++) {
            const uint8_t *Lh = L + 128 * h;
            uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                  ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/* 2-bit fields of 256 elements: element e in byte 32 * (e / 128) + e % 32, at bit shift
 * 2 * ((e % 128) / 32) (Q2_K's and Q3_K's qs). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    memset(qs, 0, QK_K / 4);
    for (int e = 0; e < QK_K; e++)
        qs[32 * (e / 128) + e % 32] |= (uint8_t)((L[e] & 3) << (2 * ((e % 128) / 32)));
}

void quant_quantize_row_q3_K(const float *x, block_q3_K *out, int64_t n) {
    IFD_ASSERT(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        uint8_t L[QK_K];
        int sc[16];
        block_q3_K *y = &out[b];
        memset(y, 0, sizeof *y);
        if (!quant_super_signed(x, 4, 32, &y->d, sc, L)) {
            y->d = 0;
            continue;
        }
        /* scale j + 32: low nibble in byte j % 8 (nibble j / 8), top 2 bits in byte
         * 8 + j % 4 at bit 2 * (j / 4) */
        for (int j = 0; j < 16; j++) {
            const int v = sc[j] + 32;
            y->scales[j % 8] |= (uint8_t)((v & 0xF) << (4 * (j / 8)));
            y->scales[8 + j % 4] |= (uint8_t)((v >> 4) << (2 * (j / 4)));
        }
        /* L in 0..7: bit 2 set means no -4 offset, kept in hmask bit e / 32 of byte e % 32 */
        for (int e = 0; e < QK_K; e++)
            if (L[e] & 4) y->hmask[e % 32] |= (uint8_t)(1u << (e / 32));
        pack_2bit(L, y->qs);
    }
}

/* ---- Q2_K: 16 sub-blocks of 16, a 4-bit scale and minimum each ------------------------- */

void quant_quantize_row_q2_K(const float *x, block_q2_K *out, int64_t n) {
    IFD_ASSERT(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        uint8_t L[QK_K];
        double s[16], m[16], smax = 0.0, mmax = 0.0, w[16][16];
        block_q2_K *y = &out[b];
        for (int j = 0; j < 16; j++) {
            const double amax = sub_amax(x + 16 * j, 16), inv = amax > 0.0 ? 1.0 / amax : 0.0;
            for (int l = 0; l < 16; l++) w[j][l] = fabs((double)x[16 * j + l]) * inv;
            s[j] = fit_scale_min(x + 16 * j, w[j], 16, 3, -0.5, 0.1, 15, true, L + 16 * j, &m[j]);
            smax = fmax(smax, s[j]);
            mmax = fmax(mmax, m[j]);
        }
        y->d = fp16_sat(smax / 15);
        y->dmin = fp16_sat(mmax / 15);
        const float d = ifd_fp16_to_f32(y->d), dmin = ifd_fp16_to_f32(y->dmin);
        for (int j = 0; j < 16; j++) {
            const int sc0 = d > 0.0f ? round_clamp(s[j] / d, 0, 15) : 0;
            const int mn0 = dmin > 0.0f ? round_clamp(m[j] / dmin, 0, 15) : 0;
            uint8_t sc = 0, mn = 0;
            pick_codes_min(x + 16 * j, w[j], 16, d, dmin, sc0, mn0, 15, 3, true, &sc, &mn,
                           L + 16 * j);
            y->scales[j] = (uint8_t)(sc | (mn << 4));
        }
        pack_2bit(L, y->qs);
    }
}

/* ---- the traits' form (void *row) ------------------------------------------------------ */

void quant_kq_row_q2_K(const float *x, void *row, int64_t n) { quant_quantize_row_q2_K(x, row, n); }
void quant_kq_row_q3_K(const float *x, void *row, int64_t n) { quant_quantize_row_q3_K(x, row, n); }
void quant_kq_row_q4_K(const float *x, void *row, int64_t n) { quant_quantize_row_q4_K(x, row, n); }
void quant_kq_row_q5_K(const float *x, void *row, int64_t n) { quant_quantize_row_q5_K(x, row, n); }
void quant_kq_row_q6_K(const float *x, void *row, int64_t n) { quant_quantize_row_q6_K(x, row, n); }
