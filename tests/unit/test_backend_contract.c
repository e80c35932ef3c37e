/* test_backend_contract.c — the engine <-> backend contract of backend.h on the CPU
 * backend (both op tables), with the in-memory `tiny` model:
 *  - padding slots: a batch with BACKEND_SLOT_NONE rows added leaves the KV cache
 *    byte for byte as the batch without them leaves it, and the other rows' logits
 *    equal bit for bit;
 *  - copy_blocks returns a status and copies every layer's K and V;
 *  - the factory: CPU by kind, AUTO -> CPU without a device, CUDA / EMU refused with a
 *    message in a build without the CUDA backend;
 *  - KV sizing per kind: bytes per block from the shape, the CPU budget from
 *    MemAvailable and kv_cache_fraction. */
#include <math.h>
#include <stdint.h>

#include "backend/cpu/cpu_backend.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"
#include "util/common.h"

enum { BS = 4, NB = 12, MAXB = 3 };

static model *tiny(void) {
    model *m = NULL;
    char err[256];
    if (model_load_random(&m, "tiny", "f32", 7, 1, err, sizeof err)) CHECKF(0, "%s", err);
    return m;
}

static backend_config cfg_for(int reference) {
    return (backend_config){.n_threads = 2, .block_size = BS, .n_blocks = NB, .max_batch_tokens = 16,
                            .max_batch_seqs = 8, .max_logits = 8, .max_seq_len = BS * MAXB,
                            .reference = reference};
}

static uint32_t rs = 99;
static float frand(void) { /* uniform in [-1, 1), never 0 */
    rs = rs * 1664525u + 1013904223u;
    const float f = ((float)(rs >> 8) / 16777216.0f) * 2.0f - 1.0f;
    return f == 0.0f ? 0.25f : f;
}

/* Fill every layer's K and V with the same random values on both backends. */
static void fill_kv(cpu_backend *a, cpu_backend *b) {
    /* f32 pools (cfg_for leaves kv_dtype at BACKEND_KV_F32) */
    const size_t n = a->layer_kv_bytes / sizeof(float) * 2 * a->base.m->hp.n_layers;
    float *ka = (float *)(void *)a->kv, *kb = (float *)(void *)b->kv;
    for (size_t i = 0; i < n; i++) ka[i] = kb[i] = frand();
}

static size_t kv_bytes(const cpu_backend *c) {
    return c->layer_kv_bytes * 2 * c->base.m->hp.n_layers;
}

static void test_padding_slot(void) {
    model *m = tiny();
    if (!m) return;
    const int32_t V = (int32_t)m->hp.n_vocab;
    for (int reference = 0; reference < 2; reference++) {
        backend_config cfg = cfg_for(reference);
        backend *ba = NULL, *bb = NULL;
        char err[256];
        CHECKF(backend_create(&ba, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK, "%s", err);
        CHECKF(backend_create(&bb, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK, "%s", err);
        if (!ba || !bb) goto next;
        cpu_backend *A = (cpu_backend *)ba, *B = (cpu_backend *)bb;
        fill_kv(A, B);
        float *init = malloc(kv_bytes(A));
        memcpy(init, A->kv, kv_bytes(A));
        /* batch a: seq 0 a 3-token prefill chunk at 2..4 (blocks 5, 1), seq 1 a decode
         * at position 6 (blocks 8, 3). Batch b: the same with padding rows around and
         * between them: a padded "sequence" of one row before, one of two rows in the
         * middle (their block tables point at live blocks of seq 0 and 1: stores there
         * would show) and one after. */
        const int32_t tok_a[] = {11, 300, 42, 77};
        const int32_t pos_a[] = {2, 3, 4, 6};
        const int32_t slot_a[] = {5 * BS + 2, 5 * BS + 3, 1 * BS + 0, 3 * BS + 2};
        const int32_t ss_a[] = {0, 3, 4}, ctx_a[] = {5, 7};
        const int32_t bt_a[] = {5, 1, 0, 8, 3, 0};
        const int32_t li_a[] = {2, 3, 0};
        const ifd_batch a = {.n_tokens = 4, .token_ids = tok_a, .positions = pos_a, .slot_mapping = slot_a,
                             .n_seqs = 2, .seq_start = ss_a, .context_len = ctx_a, .block_table = bt_a,
                             .max_blocks_per_seq = MAXB, .n_logits = 3, .logits_index = li_a};
        const int32_t N = BACKEND_SLOT_NONE;
        const int32_t tok_b[] = {5, 11, 300, 42, 9, 9, 77, 500};
        const int32_t pos_b[] = {1, 2, 3, 4, 4, 5, 6, 0};
        const int32_t slot_b[] = {N, 5 * BS + 2, 5 * BS + 3, 1 * BS + 0, N, N, 3 * BS + 2, N};
        const int32_t ss_b[] = {0, 1, 4, 6, 7, 8}, ctx_b[] = {2, 5, 6, 7, 1};
        const int32_t bt_b[] = {5, 1, 0, /**/ 5, 1, 0, /**/ 8, 3, 0, /**/ 8, 3, 0, /**/ 1, 0, 0};
        const int32_t li_b[] = {3, 6, 1, 0, 7};
        const ifd_batch b = {.n_tokens = 8, .token_ids = tok_b, .positions = pos_b, .slot_mapping = slot_b,
                             .n_seqs = 5, .seq_start = ss_b, .context_len = ctx_b, .block_table = bt_b,
                             .max_blocks_per_seq = MAXB, .n_logits = 5, .logits_index = li_b};
        float *la = malloc((size_t)3 * V * sizeof(float)), *lb = malloc((size_t)5 * V * sizeof(float));
        CHECK(backend_forward(ba, &a, la) == IFD_OK);
        CHECK(backend_forward(bb, &b, lb) == IFD_OK);
        CHECKF(memcmp(A->kv, B->kv, kv_bytes(A)) == 0, "%s: padding rows changed the KV cache",
               reference ? "ref" : "fast");
        /* a's rows 2, 3, 0 are b's rows 3, 6, 1 */
        CHECKF(memcmp(la, lb, (size_t)3 * V * sizeof(float)) == 0, "%s: logits differ",
               reference ? "ref" : "fast");
        bool finite = true;
        for (size_t i = 0; i < (size_t)5 * V; i++) finite = finite && isfinite(lb[i]);
        CHECK(finite); /* the padding rows' logits too (noise, but numbers) */
        /* the real rows did store (the cache is no longer the initial fill) */
        CHECK(memcmp(init, A->kv, kv_bytes(A)) != 0);
        free(init);
        free(la);
        free(lb);
    next:
        backend_destroy(ba);
        backend_destroy(bb);
    }
    model_destroy(m);
}

static void test_copy_blocks(void) {
    model *m = tiny();
    if (!m) return;
    backend_config cfg = cfg_for(0);
    backend *b = NULL;
    char err[256];
    CHECKF(backend_create(&b, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK, "%s", err);
    if (b) {
        cpu_backend *C = (cpu_backend *)b;
        float *kc = (float *)(void *)C->kv;
        for (size_t i = 0; i < C->layer_kv_bytes / sizeof(float) * 2 * m->hp.n_layers; i++) kc[i] = frand();
        const int32_t src[] = {2, 7}, dst[] = {9, 0};
        CHECK(backend_copy_blocks(b, src, dst, 2) == IFD_OK);
        const size_t bf = (size_t)BS * m->hp.n_kv_heads * m->hp.head_dim * sizeof(float);
        for (uint32_t l = 0; l < m->hp.n_layers; l++)
            for (int i = 0; i < 2; i++) {
                CHECK(!memcmp(cpu_kv_k(C, l) + dst[i] * bf, cpu_kv_k(C, l) + src[i] * bf, bf));
                CHECK(!memcmp(cpu_kv_v(C, l) + dst[i] * bf, cpu_kv_v(C, l) + src[i] * bf, bf));
            }
        CHECK(memcmp(cpu_kv_k(C, 0) + 1 * bf, cpu_kv_k(C, 0) + 2 * bf, bf) != 0);
        CHECK(backend_copy_blocks(b, src, dst, 0) == IFD_OK);
    }
    backend_destroy(b);
    model_destroy(m);
}

static void test_factory(void) {
    model *m = tiny();
    if (!m) return;
    backend_config cfg = cfg_for(1);
    char err[256] = "";
    backend *b = NULL;
    CHECK(backend_create(&b, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK && b);
    CHECK(b && b->m == m && b->cfg.n_blocks == NB && !strcmp(b->ops->name, "cpu"));
    backend_destroy(b);
    CHECK(!strcmp(backend_kind_name(BACKEND_EMU), "emu") && !strcmp(backend_kind_name(BACKEND_AUTO), "auto"));
#ifndef INFERD_HAVE_CUDA_BACKEND
    CHECK(backend_resolve_kind(BACKEND_AUTO) == BACKEND_CPU);
    b = NULL;
    CHECK(backend_create(&b, BACKEND_AUTO, m, &cfg, err, sizeof err) == IFD_OK && b &&
          !strcmp(b->ops->name, "cpu"));
    backend_destroy(b);
    const backend_kind gpu[] = {BACKEND_CUDA, BACKEND_EMU};
    for (int i = 0; i < 2; i++) {
        err[0] = 0;
        b = (backend *)&cfg; /* must be reset */
        CHECK(backend_create(&b, gpu[i], m, &cfg, err, sizeof err) == IFD_ERR_UNSUPPORTED && !b);
        CHECKF(strstr(err, "this build has no CUDA backend"), "%s", err);
        int64_t kv = 1;
        err[0] = 0;
        CHECK(backend_kv_budget(gpu[i], m, &cfg, &kv, err, sizeof err) == IFD_ERR_UNSUPPORTED && kv == 0);
        CHECKF(strstr(err, "no CUDA backend"), "%s", err);
    }
#endif
    b = (backend *)&cfg;
    CHECK(backend_create(&b, (backend_kind)42, m, &cfg, err, sizeof err) == IFD_ERR_INVALID && !b);
    model_destroy(m);
}

static void test_kv_sizing(void) {
    model *m = tiny();
    if (!m) return;
    const model_hparams *hp = &m->hp;
    const size_t want = (size_t)2 * hp->n_layers * 16 * hp->n_kv_heads * hp->head_dim * sizeof(float);
    CHECK(backend_kv_block_bytes(BACKEND_CPU, m, 16, BACKEND_KV_F32) == want);
    CHECK(backend_kv_block_bytes(BACKEND_CPU, m, 32, BACKEND_KV_F32) == 2 * want);
    /* the other dtypes: f16 / bf16 half, fp8 a quarter, int8 a quarter plus an f32 scale
     * per (token, KV head); auto is f16 on the CPU */
    const size_t rows = (size_t)2 * hp->n_layers * 16 * hp->n_kv_heads;
    CHECK(backend_kv_block_bytes(BACKEND_CPU, m, 16, BACKEND_KV_F16) == want / 2);
    CHECK(backend_kv_block_bytes(BACKEND_CPU, m, 16, BACKEND_KV_BF16) == want / 2);
    CHECK(backend_kv_block_bytes(BACKEND_CPU, m, 16, BACKEND_KV_FP8) == want / 4);
    CHECK(backend_kv_block_bytes(BACKEND_CPU, m, 16, BACKEND_KV_INT8) == want / 4 + rows * 4);
    CHECK(backend_kv_block_bytes(BACKEND_CPU, m, 16, BACKEND_KV_AUTO) == want / 2);
    backend_config cfg = cfg_for(0);
    char err[256] = "";
    const int64_t avail = backend_cpu_mem_available();
    CHECK(avail > 0); /* Linux: /proc/meminfo */
    int64_t q = 0, h = 0;
    cfg.kv_cache_fraction = 0.25;
    CHECK(backend_kv_budget(BACKEND_CPU, m, &cfg, &q, err, sizeof err) == IFD_OK);
    cfg.kv_cache_fraction = 0.5;
    CHECK(backend_kv_budget(BACKEND_AUTO, m, &cfg, &h, err, sizeof err) == IFD_OK ||
          backend_resolve_kind(BACKEND_AUTO) != BACKEND_CPU);
    /* MemAvailable moves between reads: within 10 % of the rule */
    CHECKF(q > avail / 4 * 0.9 && q < avail / 4 * 1.1, "%lld vs %lld", (long long)q, (long long)avail);
    if (backend_resolve_kind(BACKEND_AUTO) == BACKEND_CPU)
        CHECKF(h > q * 1.8 && h < q * 2.2, "%lld vs %lld", (long long)h, (long long)q);
    model_destroy(m);
}

TEST_MAIN(T(test_padding_slot), T(test_copy_blocks), T(test_factory), T(test_kv_sizing))
