/* test_awq.c — the calibration pass, activation-aware scaling and the per-matrix error,
 * on the shakespeare target (F32) with the held-out text as calibration:
 *  - the observer sees every linear input once per token (row counts, widths);
 *  - scaling alone (no quantization) leaves the model's function unchanged: logits of a
 *    prompt within 2e-4 relative of the original (only f32 rounding of w * s and x / s);
 *  - the alphas are on the grid (steps of 0.05), and some input gets alpha > 0;
 *  - quantized to INT4-g128, the output error on the sampled rows summed over every
 *    matrix is lower with the scales than without (plain round-to-nearest). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/calib.h"
#include "model/model_awq.h"
#include "model/quant.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"
#include "util/common.h"

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* logits of the last position of ids[0..n) through a fresh fast CPU backend */
static int last_logits(const model *m, const int32_t *ids, int32_t n, float *out) {
    char err[256];
    backend_config cfg = {.n_threads = 2, .block_size = 16, .n_blocks = 8, .max_batch_tokens = n,
                          .max_batch_seqs = 1, .max_logits = 1, .max_seq_len = 128};
    backend *b = NULL;
    if (backend_create(&b, BACKEND_CPU, m, &cfg, err, sizeof err)) return -1;
    int32_t pos[128], table[8] = {0, 1, 2, 3, 4, 5, 6, 7}, ss[2] = {0, n}, ctx[1] = {n}, li[1] = {n - 1};
    for (int32_t i = 0; i < n; i++) pos[i] = i;
    ifd_batch bt = {.n_tokens = n, .token_ids = ids, .positions = pos, .slot_mapping = pos, .n_seqs = 1,
                    .seq_start = ss, .context_len = ctx, .block_table = table, .max_blocks_per_seq = 8,
                    .n_logits = 1, .logits_index = li};
    int rc = b->ops->forward(b, &bt, out);
    b->ops->destroy(b);
    return rc;
}

static void test_awq(void) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/shakespeare-target.gguf", INFERD_SHARED_DIR);
    model *m = NULL;
    if (model_load(&m, path, err, sizeof err)) {
        CHECKF(0, "cannot load %s: %s", path, err);
        return;
    }
    snprintf(path, sizeof path, "%s/models/shakespeare-valid.txt", INFERD_SHARED_DIR);
    size_t n_text = 0;
    char *text = read_all(path, &n_text);
    CHECKF(text != NULL, "cannot read %s", path);
    if (!text) {
        model_destroy(m);
        return;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    CHECK(tok_encode(m->tok, text, n_text, TOK_ENC_ADD_BOS, &ids, &n_ids) == IFD_OK && n_ids > 2048);
    const uint32_t L = m->hp.n_layers;

    model_calib c;
    CHECK(model_calib_init(&c, m, 64, 2048) == IFD_OK);
    CHECK(backend_calibrate(m, ids, (int64_t)n_ids, 256, tok_bos(m->tok), 2048, 2, model_calib_observe, &c,
                            err, sizeof err) == IFD_OK);
    for (uint32_t l = 0; l < L; l++)
        for (int w = 0; w < CALIB_N; w++) {
            const calib_input *in = &c.in[l * CALIB_N + (uint32_t)w];
            CHECKF(in->count == 2048, "layer %u input %d: %lld rows", l, w, (long long)in->count);
            CHECK(in->n_rows == 64 && in->abs_sum[0] > 0 && in->sq_sum[in->n - 1] > 0);
        }
    /* a foreign matrix is ignored */
    wmat foreign = m->layers[0].wq;
    float junk[256] = {1};
    model_calib_observe(&c, &foreign, junk, 1);
    CHECK(c.in[0].count == 2048);

    /* plain round-to-nearest error first (no scales applied yet) */
    const ggml_type qt = IFD_TYPE_I4_G128;
    double *rtn = malloc(L * QM_N * sizeof(double)), *awq = malloc(L * QM_N * sizeof(double));
    CHECK(model_quant_errors(m, &c, qt, 2, rtn) == IFD_OK);

    float before[1024], after[1024];
    const int32_t prompt[12] = {1, 45, 300, 17, 900, 22, 5, 611, 80, 3, 400, 29};
    CHECK((int32_t)m->hp.n_vocab <= 1024);
    CHECK(last_logits(m, prompt, 12, before) == IFD_OK);
    CHECK(model_awq_apply(m, &c, qt, NULL, 2, err, sizeof err) == IFD_OK);
    CHECK(m->layers[0].wq.type == GGML_TYPE_F32 && m->layers[L - 1].w_down.type == GGML_TYPE_F32);
    CHECK(last_logits(m, prompt, 12, after) == IFD_OK);
    int far = 0;
    float amax = 0;
    for (uint32_t i = 0; i < m->hp.n_vocab; i++) amax = fmaxf(amax, fabsf(before[i]));
    for (uint32_t i = 0; i < m->hp.n_vocab; i++)
        if (!(fabsf(after[i] - before[i]) <= 2e-4f * amax)) far++;
    CHECKF(far == 0, "scaling changed %d logits", far);

    int positive = 0;
    for (uint32_t i = 0; i < L * CALIB_N; i++) {
        const float a = c.alpha[i];
        CHECKF(a >= 0 && a <= 1 && fabsf(a * 20 - roundf(a * 20)) < 1e-4f, "alpha %g", (double)a);
        positive += a > 0;
        CHECK(c.scale[i] != NULL);
    }
    CHECKF(positive > 0, "no input was scaled");

    CHECK(model_quant_errors(m, &c, qt, 2, awq) == IFD_OK);
    double s_rtn = 0, s_awq = 0;
    for (uint32_t i = 0; i < L * QM_N; i++) {
        CHECK(rtn[i] > 0 && awq[i] > 0);
        s_rtn += rtn[i] * rtn[i], s_awq += awq[i] * awq[i];
    }
    printf("# int4-g128 output error (rms over matrices): rtn %.5f awq %.5f\n", sqrt(s_rtn / (L * QM_N)),
           sqrt(s_awq / (L * QM_N)));
    CHECKF(s_awq < s_rtn, "awq %g >= rtn %g", s_awq, s_rtn);
    model_awq_trim(m); /* every copy is still in use */
    CHECK(m->layers[0].wq.type == GGML_TYPE_F32);

    /* a kept layer stays as loaded */
    model *m2 = NULL;
    snprintf(path, sizeof path, "%s/models/shakespeare-target.gguf", INFERD_SHARED_DIR);
    CHECK(model_load(&m2, path, err, sizeof err) == IFD_OK);
    if (m2) {
        bool keep[64] = {false};
        keep[1] = true;
        c.m = m2;
        CHECK(model_awq_apply(m2, &c, qt, keep, 2, err, sizeof err) == IFD_OK);
        const uint8_t *lo = m2->gguf.base, *hi = lo + m2->gguf.size;
        const uint8_t *p0 = m2->layers[0].wq.data, *p1 = m2->layers[1].wq.data;
        CHECK(p1 >= lo && p1 < hi);    /* layer 1: still the file's weights */
        CHECK(!(p0 >= lo && p0 < hi)); /* layer 0: a scaled copy */
        CHECK(c.alpha[1 * CALIB_N] == -1.0f && c.scale[1 * CALIB_N + CALIB_FFN_OUT] == NULL);
        CHECK(c.alpha[0] >= 0.0f && c.scale[0] != NULL);
        model_destroy(m2);
    }

    free(rtn), free(awq), free(ids), free(text);
    model_calib_free(&c);
    model_destroy(m);
}

TEST_MAIN(T(test_awq))
