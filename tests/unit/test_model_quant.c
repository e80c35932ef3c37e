/* test_model_quant.c — model_quantize (model_quant.h) on models built in memory: its
 * row quantizers against quant.c's reference (the same bytes), the selection (linear
 * matrices only; keep-layers, lm-head), thread-count independence, the bytes-by-type
 * figures, and the --quantize-keep-layers parser. Single-threaded driver. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_quant.h"
#include "model/quant.h"
#include "test_util.h"
#include "util/common.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

/* Rows of several kinds: random at several scales, constant (d = 0), values on the
 * rounding ties of the grid, a single outlier, tiny (subnormal fp16 scales), huge. */
static void fill_row(float *x, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++) {
        switch (kind % 8) {
        case 0: x[i] = frand(); break;
        case 1: x[i] = 0.01f * frand(); break;
        case 2: x[i] = 0.5f; break;
        case 3: x[i] = (float)((i * 7) % 31) * 0.5f - 7.5f; break; /* halves: ties */
        case 4: x[i] = i == 5 ? 40.0f : frand(); break;
        case 5: x[i] = 1e-6f * frand(); break;
        case 6: x[i] = 3000.0f * frand(); break;
        default: x[i] = (float)(i % 16) / 15.0f * 2.0f - 1.0f; break; /* on the int4 grid */
        }
    }
}

static void test_rows_match_reference(void) {
    const int64_t n = 512;
    float x[512];
    uint8_t a[1200], b[1200];
    int bad = 0;
    for (int kind = 0; kind < 400; kind++) {
        fill_row(x, n, kind);
        for (int g = 32; g <= 128; g *= 2) {
            memset(a, 0xAA, sizeof a), memset(b, 0x55, sizeof b);
            quant_quantize_row_int8(x, a, n, g);
            model_quant_row_int8(x, b, n, g);
            const size_t n8 = (size_t)(n / g) * (2 + (size_t)g);
            bad += memcmp(a, b, n8) != 0;
            memset(a, 0xAA, sizeof a), memset(b, 0x55, sizeof b);
            quant_quantize_row_int4(x, a, n, g);
            model_quant_row_int4(x, b, n, g);
            const size_t n4 = (size_t)(n / g) * (4 + (size_t)g / 2);
            bad += memcmp(a, b, n4) != 0;
        }
    }
    CHECKF(bad == 0, "%d rows differ from the reference quantizers", bad);
}

static model *tiny(ggml_type t) {
    model *m = NULL;
    char err[256];
    int rc = model_create_random(&m, "tiny", t, 7, 2, err, sizeof err);
    CHECKF(rc == IFD_OK, "%s", err);
    return m;
}

static size_t mat_bytes(const wmat *w) { return w->row_bytes * (size_t)w->n_rows; }

/* Every linear matrix of a layer not kept: the type asked for, dequantizing close to
 * the original; the embeddings, kept layers (and output unless lm_head) unchanged. */
static void test_selection(void) {
    static const struct {
        int bits, g;
        bool lm_head;
        ggml_type want;
    } C[] = {{8, 128, false, IFD_TYPE_I8_G128}, {8, 32, true, GGML_TYPE_Q8_0},
             {4, 64, false, IFD_TYPE_I4_G64}, {4, 32, true, GGML_TYPE_Q4_1},
             {4, 128, true, IFD_TYPE_I4_G128}};
    for (size_t c = 0; c < IFD_ARRAY_LEN(C); c++) {
        model *ref = tiny(GGML_TYPE_F16), *m = tiny(GGML_TYPE_F16);
        if (!ref || !m) return;
        const bool keep[4] = {false, true, false, false};
        model_quant_opts o = {.bits = C[c].bits, .group_size = C[c].g, .lm_head = C[c].lm_head,
                              .keep = keep, .n_threads = 2};
        char err[256];
        CHECKF(model_quantize(m, &o, err, sizeof err) == IFD_OK, "%s", err);
        CHECK(m->n_quantized == 3 * 7 + (C[c].lm_head ? 1 : 0) && m->n_quant_skipped == 0);
        CHECK(m->quant_type == C[c].want && m->synth_weights == NULL && m->quant_weights != NULL);
        CHECK(m->tok_embd.type == GGML_TYPE_F16 &&
              !memcmp(m->tok_embd.data, ref->tok_embd.data, mat_bytes(&ref->tok_embd)));
        CHECK(m->output.type == (C[c].lm_head ? C[c].want : GGML_TYPE_F16));
        for (uint32_t l = 0; l < 4; l++) {
            const wmat *a[] = {&m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wv, &m->layers[l].wo,
                               &m->layers[l].w_gate, &m->layers[l].w_up, &m->layers[l].w_down};
            const wmat *r[] = {&ref->layers[l].wq, &ref->layers[l].wk, &ref->layers[l].wv, &ref->layers[l].wo,
                               &ref->layers[l].w_gate, &ref->layers[l].w_up, &ref->layers[l].w_down};
            for (int i = 0; i < 7; i++) {
                if (keep[l]) {
                    CHECK(a[i]->type == GGML_TYPE_F16 && !memcmp(a[i]->data, r[i]->data, mat_bytes(r[i])));
                    continue;
                }
                CHECK(a[i]->type == C[c].want && a[i]->n_rows == r[i]->n_rows &&
                      a[i]->row_bytes == quant_row_bytes(C[c].want, r[i]->n_cols));
                /* row 3 dequantized: within half a step of the original */
                float x[768], y[768], amax = 0, md = 0;
                const int64_t k = r[i]->n_cols;
                quant_dequantize_row_ref(GGML_TYPE_F16, (const uint8_t *)r[i]->data + 3 * r[i]->row_bytes, x, k);
                quant_dequantize_row_ref(a[i]->type, (const uint8_t *)a[i]->data + 3 * a[i]->row_bytes, y, k);
                for (int64_t j = 0; j < k; j++) {
                    amax = fmaxf(amax, fabsf(x[j]));
                    md = fmaxf(md, fabsf(x[j] - y[j]));
                }
                const float step = 2 * amax / (C[c].bits == 8 ? 254.0f : 15.0f);
                CHECKF(md <= 0.51f * step + 1e-6f && md > 0, "case %zu layer %u mat %d: %g vs step %g", c, l, i,
                       (double)md, (double)step);
            }
        }
        /* a second call is refused */
        CHECK(model_quantize(m, &o, err, sizeof err) == IFD_ERR_INVALID);
        model_destroy(m);
        model_destroy(ref);
    }
}

/* The bytes do not depend on the thread count; byte counts by type add up. */
static void test_threads_and_bytes(void) {
    model *a = tiny(GGML_TYPE_BF16), *b = tiny(GGML_TYPE_BF16);
    if (!a || !b) return;
    size_t before[GGML_TYPE_COUNT_], after[GGML_TYPE_COUNT_];
    model_weight_bytes_by_type(a, before);
    const size_t emb = 512 * 256 * 2, lin = 4 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 768 * 256);
    CHECK(before[GGML_TYPE_BF16] == 2 * emb + 2 * lin);
    char err[256];
    model_quant_opts o = {.bits = 4, .group_size = 128, .n_threads = 1};
    CHECK(model_quantize(a, &o, err, sizeof err) == IFD_OK);
    o.n_threads = 2;
    CHECK(model_quantize(b, &o, err, sizeof err) == IFD_OK);
    for (uint32_t l = 0; l < 4; l++)
        CHECK(!memcmp(a->layers[l].w_down.data, b->layers[l].w_down.data, mat_bytes(&a->layers[l].w_down)) &&
              !memcmp(a->layers[l].wq.data, b->layers[l].wq.data, mat_bytes(&a->layers[l].wq)));
    model_weight_bytes_by_type(a, after);
    CHECK(after[GGML_TYPE_BF16] == 2 * emb && after[IFD_TYPE_I4_G128] == lin / 128 * 68);
    char s[256];
    model_weight_bytes_str(before, after, s, sizeof s);
    /* 6 MiB of linear BF16 + 0.5 MiB of embeddings; 3 Mi weights at 68 bytes per 128 */
    CHECKF(!strcmp(s, "6.50 MiB BF16 -> 2.09 MiB (I4_G128 1.59 MiB, BF16 0.50 MiB)"), "%s", s);
    model_weight_bytes_str(NULL, after, s, sizeof s);
    CHECKF(!strstr(s, " -> ") && strstr(s, "I4_G128"), "%s", s);
    model_destroy(a);
    model_destroy(b);
}

/* Types that are not float, and bad options. */
static void test_skips_and_errors(void) {
    model *m = tiny(GGML_TYPE_Q8_0);
    if (!m) return;
    char err[256];
    model_quant_opts o = {.bits = 4, .group_size = 128};
    CHECK(model_quantize(m, &o, err, sizeof err) == IFD_OK);
    CHECK(m->n_quantized == 0 && m->n_quant_skipped == 28 && m->layers[0].wq.type == GGML_TYPE_Q8_0);
    o.bits = 3;
    CHECK(model_quantize(m, &o, err, sizeof err) == IFD_ERR_INVALID && strstr(err, "3 bits"));
    o.bits = 8, o.group_size = 96;
    CHECK(model_quantize(m, &o, err, sizeof err) == IFD_ERR_INVALID && strstr(err, "96"));
    o.bits = 0;
    CHECK(model_quantize(m, &o, err, sizeof err) == IFD_OK);
    model_destroy(m);
    m = tiny(GGML_TYPE_F32);
    if (!m) return;
    o = (model_quant_opts){.lm_head = true};
    CHECK(model_quantize_to(m, &o, GGML_TYPE_Q4_0, err, sizeof err) == IFD_OK);
    CHECK(m->n_quantized == 29 && m->output.type == GGML_TYPE_Q4_0 && m->tok_embd.type == GGML_TYPE_F32);
    model_destroy(m);
}

static void test_parse_layers(void) {
    bool k[8];
    char err[256];
    CHECK(model_quant_parse_layers("0-2,5,7", 8, k, err, sizeof err) == IFD_OK);
    CHECK(k[0] && k[1] && k[2] && !k[3] && !k[4] && k[5] && !k[6] && k[7]);
    CHECK(model_quant_parse_layers(NULL, 8, k, err, sizeof err) == IFD_OK && !k[0] && !k[7]);
    CHECK(model_quant_parse_layers("", 8, k, err, sizeof err) == IFD_OK && !k[5]);
    CHECK(model_quant_parse_layers("3,3", 8, k, err, sizeof err) == IFD_OK && k[3]);
    const char *bad[] = {"8", "0-8", "a", "1,", ",1", "1-", "-1", "3-2", "1;2", "1 2", "99999999999999999999"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(bad); i++)
        CHECKF(model_quant_parse_layers(bad[i], 8, k, err, sizeof err) == IFD_ERR_INVALID &&
                   strstr(err, "--quantize-keep-layers"),
               "'%s': %s", bad[i], err);
    CHECK(model_quant_parse_layers("8", 8, k, err, sizeof err) && strstr(err, "out of range"));
}

TEST_MAIN(T(test_rows_match_reference), T(test_selection), T(test_threads_and_bytes),
          T(test_skips_and_errors), T(test_parse_layers))
