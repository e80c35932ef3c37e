/* test_fwd_ops.c — the CPU backend's two op tables for forward.c, op by op: every op
 * of cpu_fwd_fast against the same op of cpu_fwd_ref (the plain C reference) on random
 * inputs (never zeros), through real backends of the shakespeare test model, plus the
 * grouped matmul against single calls. Tolerances, stated at each check:
 *  - exact (memcmp): embed, add, add_bias, head_norm (the fast table runs the reference
 *    arithmetic per row), rope_store (table RoPE == op_rope_ref, then a copy), and the
 *    grouped matmul vs one call per matrix on the fast table (same kernels per row);
 *  - rmsnorm, swiglu: relative 1e-5 + 1e-7 (SIMD sum order, polynomial exp);
 *  - matmul (F32 weights): 1e-5 * sum |w x| per element (only the summation order
 *    differs);
 *  - attention: 2e-5 absolute with |v| < 1 (SIMD exp, reordered sums). */
#include <math.h>
#include <stdint.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/kv_dtype.h"
#include "model/quant.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"
#include "util/common.h"

static uint32_t rng = 77;
static float frand(void) { /* uniform in [-1, 1), never exactly 0 */
    rng = rng * 1664525u + 1013904223u;
    float f = ((float)(rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
    return f == 0.0f ? 0.5f : f;
}
static float *rand_vec(size_t n, float scale) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}
static float *dup(const float *x, size_t n) {
    float *v = malloc(n * sizeof(float));
    memcpy(v, x, n * sizeof(float));
    return v;
}
static int n_far(const float *a, const float *b, size_t n, float rel, float abs_tol) {
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= rel * fabsf(b[i]) + abs_tol)) bad++;
    return bad;
}

enum { T = 20 };

static void test_tables(void) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/shakespeare-target.gguf", INFERD_SHARED_DIR);
    model *m = NULL;
    if (model_load(&m, path, err, sizeof err)) {
        CHECKF(0, "cannot load %s: %s", path, err);
        return;
    }
    backend_config cfg = {.n_threads = 2, .block_size = 4, .n_blocks = 16, .max_batch_tokens = T,
                          .max_batch_seqs = 2, .max_logits = T, .max_seq_len = 64};
    backend *rb = NULL, *fb = NULL;
    cfg.reference = 1;
    CHECK(backend_create(&rb, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK);
    cfg.reference = 0;
    CHECK(backend_create(&fb, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK);
    if (!rb || !fb) goto out;
    cpu_backend *R = (cpu_backend *)rb, *F = (cpu_backend *)fb;
    const fwd_ops *ro = &cpu_fwd_ref, *fo = &cpu_fwd_fast;
    CHECK(R->fwd == ro && F->fwd == fo);
    const model_hparams *hp = &m->hp;
    const int32_t dim = (int32_t)hp->dim, hd = (int32_t)hp->head_dim;
    const int32_t q_dim = (int32_t)hp->n_heads * hd, kv_dim = (int32_t)hp->n_kv_heads * hd;
    const size_t nq = (size_t)T * q_dim, nkv = (size_t)T * kv_dim;

    /* a batch: seq 0 = 12 tokens at 0..11, seq 1 = 8 tokens at 3..10; scrambled blocks */
    int32_t ids[T], pos[T], slot[T], ss[3] = {0, 12, T}, ctx[2] = {12, 11}, bt[2 * 4];
    const int32_t blocks[2][4] = {{9, 2, 14, 5}, {0, 11, 7, 3}};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 4; k++) bt[s * 4 + k] = blocks[s][k];
    for (int32_t t = 0; t < T; t++) {
        const int s = t >= 12;
        ids[t] = 3 + (t * 53) % 900;
        pos[t] = s ? 3 + t - 12 : t;
        slot[t] = blocks[s][pos[t] / 4] * 4 + pos[t] % 4;
    }
    const ifd_batch batch = {.n_tokens = T, .token_ids = ids, .positions = pos, .slot_mapping = slot,
                             .n_seqs = 2, .seq_start = ss, .context_len = ctx, .block_table = bt,
                             .max_blocks_per_seq = 4, .n_logits = 0};
    const rope_params rp = fwd_rope_params(m);
    CHECK(fo->begin(F, &batch, &rp) == IFD_OK);
    /* seq 1's keys 0..2 are not written by this batch: fill both caches alike */
    {
        float *kc = (float *)(void *)cpu_kv_k(R, 0), *vc = (float *)(void *)cpu_kv_v(R, 0);
        for (size_t i = 0; i < R->layer_kv_bytes / 4; i++) kc[i] = frand(), vc[i] = frand();
        memcpy(cpu_kv_k(F, 0), kc, R->layer_kv_bytes);
        memcpy(cpu_kv_v(F, 0), vc, R->layer_kv_bytes);
    }

    /* embed */
    float *a = malloc(nq * 4 > (size_t)T * dim * 4 ? nq * 4 : (size_t)T * dim * 4);
    float *b = malloc(nq * 4 > (size_t)T * dim * 4 ? nq * 4 : (size_t)T * dim * 4);
    CHECK(ro->embed(R, a, &m->tok_embd, ids, T) == IFD_OK && fo->embed(F, b, &m->tok_embd, ids, T) == IFD_OK);
    CHECK(memcmp(a, b, (size_t)T * dim * 4) == 0);

    /* rmsnorm over listed rows (repeats, out of order) and over all rows */
    float *x = rand_vec((size_t)T * dim, 3.0f);
    const int32_t rows[5] = {7, 0, 7, 19, 3};
    CHECK(ro->rmsnorm(R, a, x, rows, 5, m->output_norm, dim, 1e-5f) == IFD_OK);
    CHECK(fo->rmsnorm(F, b, x, rows, 5, m->output_norm, dim, 1e-5f) == IFD_OK);
    CHECKF(n_far(b, a, (size_t)5 * dim, 1e-5f, 1e-7f) == 0, "gathered rmsnorm");
    CHECK(ro->rmsnorm(R, a, x, NULL, T, m->layers[0].attn_norm, dim, 1e-5f) == IFD_OK);
    CHECK(fo->rmsnorm(F, b, x, NULL, T, m->layers[0].attn_norm, dim, 1e-5f) == IFD_OK);
    CHECKF(n_far(b, a, (size_t)T * dim, 1e-5f, 1e-7f) == 0, "rmsnorm");

    /* matmul: q/k/v grouped vs single calls (fast: exact) vs reference (tolerance) */
    const layer_weights *w = &m->layers[0];
    float *qr = malloc(nq * 4), *kr = malloc(nkv * 4), *vr = malloc(nkv * 4);
    float *qf = malloc(nq * 4), *kf = malloc(nkv * 4), *vf = malloc(nkv * 4);
    float *q1 = malloc(nq * 4), *k1 = malloc(nkv * 4), *v1 = malloc(nkv * 4);
    const wmat *ws[3] = {&w->wq, &w->wk, &w->wv};
    float *outs_r[3] = {qr, kr, vr}, *outs_f[3] = {qf, kf, vf}, *outs_1[3] = {q1, k1, v1};
    CHECK(ro->matmul(R, 3, outs_r, ws, x, T) == IFD_OK);
    CHECK(fo->matmul(F, 3, outs_f, ws, x, T) == IFD_OK);
    for (int i = 0; i < 3; i++) CHECK(fo->matmul(F, 1, &outs_1[i], &ws[i], x, T) == IFD_OK);
    CHECK(memcmp(qf, q1, nq * 4) == 0 && memcmp(kf, k1, nkv * 4) == 0 && memcmp(vf, v1, nkv * 4) == 0);
    int bad = 0;
    float *wrow = malloc((size_t)dim * 4);
    for (int i = 0; i < 3; i++)
        for (int64_t r = 0; r < ws[i]->n_rows; r++) {
            quant_dequantize_row_ref(ws[i]->type, (const uint8_t *)ws[i]->data + (size_t)r * ws[i]->row_bytes, wrow, dim);
            for (int32_t t = 0; t < T; t++) {
                double S = 0;
                for (int32_t k = 0; k < dim; k++) S += fabs((double)wrow[k] * x[(size_t)t * dim + k]);
                const size_t e = (size_t)t * ws[i]->n_rows + (size_t)r;
                if (!(fabs((double)outs_f[i][e] - outs_r[i][e]) <= 1e-5 * S + 1e-30)) bad++;
            }
        }
    CHECKF(bad == 0, "grouped matmul: %d elements out of tolerance", bad);
    free(wrow);

    /* add_bias, head_norm: exact */
    float *bias = rand_vec((size_t)q_dim, 0.5f), *hw = rand_vec((size_t)hd, 1.0f);
    memcpy(qf, qr, nq * 4);
    CHECK(ro->add_bias(R, qr, bias, T, q_dim) == IFD_OK && fo->add_bias(F, qf, bias, T, q_dim) == IFD_OK);
    CHECK(memcmp(qf, qr, nq * 4) == 0);
    CHECK(ro->head_norm(R, qr, hw, T * (int32_t)hp->n_heads, hd, 1e-6f) == IFD_OK);
    CHECK(fo->head_norm(F, qf, hw, T * (int32_t)hp->n_heads, hd, 1e-6f) == IFD_OK);
    CHECK(memcmp(qf, qr, nq * 4) == 0);

    /* rope_store: q, k and the cache, exact */
    memcpy(kf, kr, nkv * 4);
    memcpy(vf, vr, nkv * 4);
    CHECK(ro->rope_store(R, 0, qr, kr, vr, &batch, &rp) == IFD_OK);
    CHECK(fo->rope_store(F, 0, qf, kf, vf, &batch, &rp) == IFD_OK);
    CHECK(memcmp(qf, qr, nq * 4) == 0 && memcmp(kf, kr, nkv * 4) == 0);
    CHECK(memcmp(cpu_kv_k(F, 0), cpu_kv_k(R, 0), R->layer_kv_bytes) == 0);
    CHECK(memcmp(cpu_kv_v(F, 0), cpu_kv_v(R, 0), R->layer_kv_bytes) == 0);
    const uint8_t *v_slot = cpu_kv_v(R, 0) + (size_t)slot[13] * kv_dim * 4;
    CHECK(memcmp(v_slot, vr + (size_t)13 * kv_dim, (size_t)kv_dim * 4) == 0);

    /* attention over the two sequences' paged keys */
    CHECK(ro->attention(R, 0, a, qr, &batch) == IFD_OK && fo->attention(F, 0, b, qf, &batch) == IFD_OK);
    CHECKF(n_far(b, a, nq, 0.0f, 2e-5f) == 0, "attention");

    /* add: exact; swiglu: tolerance */
    float *y = rand_vec((size_t)T * dim, 1.0f), *x2 = dup(x, (size_t)T * dim);
    CHECK(ro->add(R, x, y, (int64_t)T * dim) == IFD_OK && fo->add(F, x2, y, (int64_t)T * dim) == IFD_OK);
    CHECK(memcmp(x, x2, (size_t)T * dim * 4) == 0);
    float *g = rand_vec((size_t)T * dim, 20.0f);
    CHECK(ro->swiglu(R, a, g, y, (int64_t)T * dim) == IFD_OK && fo->swiglu(F, b, g, y, (int64_t)T * dim) == IFD_OK);
    CHECKF(n_far(b, a, (size_t)T * dim, 1e-5f, 1e-7f) == 0, "swiglu");

    free(a), free(b), free(x), free(x2), free(y), free(g), free(bias), free(hw);
    free(qr), free(kr), free(vr), free(qf), free(kf), free(vf), free(q1), free(k1), free(v1);
out:
    backend_destroy(rb);
    backend_destroy(fb);
    model_destroy(m);
}

/* rope_store and attention at every KV cache dtype: the fast table stores the same
 * bytes as the reference (the one conversion, kv_dtype.c), a stored row reads back
 * within the dtype's rounding, and the fast attention over the stored dtype is within
 * the f32 tolerance of the reference's (2e-5 absolute, |v| < 1). The pool takes the
 * dtype's bytes: 1/2 (f16, bf16), (hd + 4) / 4hd (int8), 1/4 (fp8) of f32's. */
static void test_kv_dtypes(void) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/shakespeare-target.gguf", INFERD_SHARED_DIR);
    model *m = NULL;
    if (model_load(&m, path, err, sizeof err)) {
        CHECKF(0, "cannot load %s: %s", path, err);
        return;
    }
    const model_hparams *hp = &m->hp;
    const int32_t hd = (int32_t)hp->head_dim, nkv = (int32_t)hp->n_kv_heads;
    const int32_t q_dim = (int32_t)hp->n_heads * hd, kv_dim = nkv * hd;
    const size_t nq = (size_t)T * q_dim, nkvt = (size_t)T * kv_dim;
    size_t f32_bytes = 0;
    for (int d = 0; d < BACKEND_KV_N_DTYPES; d++) {
        const backend_kv_dtype dt = (backend_kv_dtype)d;
        const char *dn = backend_kv_dtype_name(dt);
        backend_config cfg = {.n_threads = 2, .block_size = 4, .n_blocks = 16, .max_batch_tokens = T,
                              .max_batch_seqs = 2, .max_logits = T, .max_seq_len = 64,
                              .kv_dtype = dt};
        backend *rb = NULL, *fb = NULL;
        cfg.reference = 1;
        CHECKF(backend_create(&rb, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK, "%s", err);
        cfg.reference = 0;
        CHECKF(backend_create(&fb, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK, "%s", err);
        if (!rb || !fb) {
            backend_destroy(rb);
            backend_destroy(fb);
            continue;
        }
        cpu_backend *R = (cpu_backend *)rb, *F = (cpu_backend *)fb;
        CHECK(R->kv_dtype == dt && F->kv_dtype == dt);
        if (dt == BACKEND_KV_F32) f32_bytes = R->layer_kv_bytes;
        const size_t want = f32_bytes / (4 * (size_t)hd) * backend_kv_row_bytes(dt, hd);
        CHECKF(R->layer_kv_bytes == want, "kv %s: layer pool %zu bytes, want %zu", dn,
               R->layer_kv_bytes, want);
        /* the batch of test_tables: seq 0 = 12 tokens at 0..11, seq 1 = 8 at 3..10 */
        int32_t ids[T], pos[T], slot[T], ss[3] = {0, 12, T}, ctx[2] = {12, 11}, bt[2 * 4];
        const int32_t blocks[2][4] = {{9, 2, 14, 5}, {0, 11, 7, 3}};
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 4; k++) bt[s * 4 + k] = blocks[s][k];
        for (int32_t t = 0; t < T; t++) {
            const int s = t >= 12;
            ids[t] = 3 + (t * 53) % 900;
            pos[t] = s ? 3 + t - 12 : t;
            slot[t] = blocks[s][pos[t] / 4] * 4 + pos[t] % 4;
        }
        const ifd_batch batch = {.n_tokens = T, .token_ids = ids, .positions = pos, .slot_mapping = slot,
                                 .n_seqs = 2, .seq_start = ss, .context_len = ctx, .block_table = bt,
                                 .max_blocks_per_seq = 4, .n_logits = 0};
        const rope_params rp = fwd_rope_params(m);
        CHECK(cpu_fwd_fast.begin(F, &batch, &rp) == IFD_OK);
        /* every slot of layer 0 holds random rows, stored alike in both pools */
        float *rk = rand_vec((size_t)kv_dim, 1.0f), *rv = rand_vec((size_t)kv_dim, 1.0f);
        for (int32_t sl = 0; sl < 16 * 4; sl++) {
            for (int32_t i = 0; i < kv_dim; i++) rk[i] = frand(), rv[i] = frand();
            cpu_kv_store(R, 0, sl, rk, rv);
            cpu_kv_store(F, 0, sl, rk, rv);
        }
        float *qr = rand_vec(nq, 1.0f), *kr = rand_vec(nkvt, 1.0f), *vr = rand_vec(nkvt, 1.0f);
        float *qf = dup(qr, nq), *kf = dup(kr, nkvt), *vf = dup(vr, nkvt);
        CHECK(cpu_fwd_ref.rope_store(R, 0, qr, kr, vr, &batch, &rp) == IFD_OK);
        CHECK(cpu_fwd_fast.rope_store(F, 0, qf, kf, vf, &batch, &rp) == IFD_OK);
        CHECKF(memcmp(cpu_kv_k(F, 0), cpu_kv_k(R, 0), R->layer_kv_bytes) == 0 &&
                   memcmp(cpu_kv_v(F, 0), cpu_kv_v(R, 0), R->layer_kv_bytes) == 0,
               "kv %s: rope_store stored different bytes", dn);
        /* token 13's V, head by head, read back from its slot */
        const kv_view kv = cpu_kv_view(R, 0);
        const double tol[] = {0, 1.0 / 2048, 1.0 / 256, 1.0 / 254, 1.0 / 16}; /* of amax */
        int bad = 0;
        for (int32_t h = 0; h < nkv; h++) {
            float back[512], amax = 0;
            const float *want_v = vr + (size_t)13 * kv_dim + (size_t)h * hd;
            kv_load_row(dt, (const uint8_t *)kv.v + kv_row_index(&kv, slot[13], h) * kv_view_row_bytes(&kv),
                        back, hd);
            for (int32_t i = 0; i < hd; i++) amax = fmaxf(amax, fabsf(want_v[i]));
            for (int32_t i = 0; i < hd; i++)
                if (!(fabs((double)back[i] - want_v[i]) <= tol[d] * amax * 1.0001)) bad++;
        }
        CHECKF(bad == 0, "kv %s: %d stored V elements past the rounding bound", dn, bad);
        float *a = malloc(nq * 4), *b = malloc(nq * 4);
        CHECK(cpu_fwd_ref.attention(R, 0, a, qr, &batch) == IFD_OK &&
              cpu_fwd_fast.attention(F, 0, b, qf, &batch) == IFD_OK);
        CHECKF(n_far(b, a, nq, 0.0f, 2e-5f) == 0, "kv %s: attention", dn);
        free(a), free(b), free(rk), free(rv);
        free(qr), free(kr), free(vr), free(qf), free(kf), free(vf);
        backend_destroy(rb);
        backend_destroy(fb);
    }
    model_destroy(m);
}

TEST_MAIN(T(test_tables), T(test_kv_dtypes))
