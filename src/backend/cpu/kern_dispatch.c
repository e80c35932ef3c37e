/* kern_dispatch.c — what every kernel level shares: the level -> table lookup, the
 * activation preparation by weight type (through the quant traits) and the one matmul
 * tiling over a row range. The ISA files provide micro-kernels and their tile shape
 * (kern_gemm); they loop over nothing but K.
 *
 * Tiling (batch invariant): every output element is computed by exactly one micro-
 * kernel call whose per-element instruction sequence is the same for all four tile
 * instantiations, so the result does not depend on the tile an element falls in.
 * Thread-safe (no state). */
#include <string.h>

#include "../../util/common.h"
#include "kern.h"

const kern_table *kern_for_level(cpu_level l) {
    if (l > cpu_level_max()) return NULL;
    switch (l) {
    case CPU_LEVEL_SCALAR: return &kern_scalar_table;
    case CPU_LEVEL_AVX2: return kern_avx2_get();
    case CPU_LEVEL_AVX512: return kern_avx512_get();
    default: return NULL;
    }
}

/* The micro-kernels of type t at this level, or NULL (reference dot on f32 rows). */
static const kern_gemm *gemm_of(const kern_table *k, ggml_type t) {
    if ((unsigned)t >= GGML_TYPE_COUNT_ || k->gemm[t].nr == 0) return NULL;
    return &k->gemm[t];
}

size_t kern_act_row_bytes(const kern_table *k, ggml_type t, int64_t K) {
    const quant_traits *qt = quant_traits_of(t);
    if (!qt || !gemm_of(k, t) || qt->act == QUANT_ACT_F32) return 0;
    return k->act_row_bytes(qt, K);
}

void kern_act_prepare(const kern_table *k, ggml_type t, const float *x, void *dst, int64_t K) {
    const quant_traits *qt = quant_traits_of(t);
    IFD_ASSERT(qt && qt->act != QUANT_ACT_F32 && gemm_of(k, t));
    k->act_prepare(qt, x, dst, K);
}

/* One row tile (g->nr rows when big, else 1) across the nt tokens: the full token
 * tiles in one call, then the remaining tokens one by one in another. */
static inline void row_tile(const kern_gemm *g, int big, const uint8_t *wr, size_t rb,
                            const uint8_t *act, size_t as, int32_t nt, int64_t K, float *out,
                            size_t os) {
    const int64_t n = big ? g->nr : 1;
    const int32_t full = nt / g->nt * g->nt;
    if (full > 0) g->tile[big][1](wr, rb, act, as, K, out, os, n, full);
    if (full < nt)
        g->tile[big][0](wr, rb, act + (size_t)full * as, as, K, out + (size_t)full * os, os, n,
                        nt - full);
}

void kern_gemm_rows(const kern_table *k, const wmat *w, int64_t r0, int64_t r1, const void *act,
                    size_t as, int32_t nt, float *out, size_t os) {
    const kern_gemm *g = gemm_of(k, w->type);
    const uint8_t *a = act, *base = w->data;
    const size_t rb = w->row_bytes;
    if (!g) { /* no micro-kernel: the reference dot per element (bit-identical to ops_ref) */
        const quant_traits *qt = quant_traits_of(w->type);
        IFD_ASSERT(qt);
        for (int32_t t = 0; t < nt; t++) {
            const float *x = (const float *)(a + (size_t)t * as);
            for (int64_t r = r0; r < r1; r++)
                out[(size_t)t * os + (size_t)r] = qt->dot(base + (size_t)r * rb, x, w->n_cols);
        }
        return;
    }
    int64_t r = r0;
    /* Decode-sized calls (fewer tokens than a token tile) go one row at a time: one
     * sequential DRAM stream, which a core fetches far faster than interleaved rows. */
    for (; nt >= g->nt && r + g->nr <= r1; r += g->nr)
        row_tile(g, 1, base + (size_t)r * rb, rb, a, as, nt, w->n_cols, out + r, os);
    if (nt == 1 && r < r1) { /* one token: the remaining rows in one call */
        g->tile[0][0](base + (size_t)r * rb, rb, a, as, w->n_cols, out + r, os, r1 - r, 1);
        return;
    }
    for (; r < r1; r++) row_tile(g, 0, base + (size_t)r * rb, rb, a, as, nt, w->n_cols, out + r, os);
}

/* ---- packed weights -------------------------------------------------------------------- */

static const kern_pack *pack_of(const kern_table *k, const wmat *w) {
    if ((unsigned)w->type >= GGML_TYPE_COUNT_) return NULL;
    const kern_pack *p = &k->pack[w->type];
    if (p->nr == 0 || w->n_rows % p->nr != 0 || w->n_cols % 32 != 0 || !gemm_of(k, w->type))
        return NULL;
    return p;
}

size_t kern_packed_bytes(const kern_table *k, const wmat *w) {
    const kern_pack *p = pack_of(k, w);
    if (!p) return 0;
    size_t n;
    if (!ifd_mul_ok(p->group_bytes(w->n_cols), (size_t)(w->n_rows / p->nr), &n)) return 0;
    return n;
}

void kern_pack_float(ggml_type t, int32_t nr, uint8_t *dst, const uint8_t *w, size_t rb,
                     int64_t K) {
    const size_t es = t == GGML_TYPE_F32 ? 4 : 2;
    for (int64_t k0 = 0; k0 < K; k0 += 64) /* 64 positions of all rows: stays in cache */
        for (int32_t i = 0; i < nr; i++)
            for (int64_t k = k0; k < K && k < k0 + 64; k++)
                memcpy(dst + ((size_t)k * (size_t)nr + (size_t)i) * es,
                       w + (size_t)i * rb + (size_t)k * es, es);
}

int32_t kern_packed_rows(const kern_table *k, const wmat *w) {
    const kern_pack *p = pack_of(k, w);
    return p ? p->nr : 0;
}

void kern_pack_weights(const kern_table *k, const wmat *w, uint8_t *dst, int64_t g0, int64_t g1) {
    const kern_pack *p = pack_of(k, w);
    IFD_ASSERT(p && 0 <= g0 && g0 <= g1 && g1 <= w->n_rows / p->nr);
    const size_t gb = p->group_bytes(w->n_cols);
    for (int64_t g = g0; g < g1; g++)
        p->pack(dst + (size_t)g * gb, (const uint8_t *)w->data + (size_t)g * p->nr * w->row_bytes,
                w->row_bytes, w->n_cols);
}

void kern_gemm_rows_packed(const kern_table *k, const wmat *w, const uint8_t *pk, int64_t r0,
                           int64_t r1, const void *act, size_t as, int32_t nt, float *out,
                           size_t os) {
    const kern_pack *p = pack_of(k, w);
    IFD_ASSERT(p && r0 % p->nr == 0 && r1 % p->nr == 0);
    const size_t gb = p->group_bytes(w->n_cols);
    p->gemm(pk + (size_t)(r0 / p->nr) * gb, gb, (r1 - r0) / p->nr, act, as, w->n_cols, out + r0,
            os, nt);
}
