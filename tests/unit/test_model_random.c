/* test_model_random.c — models built in memory (--random-weights, src/model/model_random.c)
 * and their synthetic vocabulary (src/tokenizer/tok_synth.c):
 *  - the same (shape, dtype, seed) gives the same weight bytes whatever the thread
 *    count; another seed gives other bytes;
 *  - every dtype's weights, dequantized by the reference, have mean ~0 and standard
 *    deviation 1/sqrt(n_cols) (tolerance: 10 % of the sd for the sd, 5 % of it for
 *    the mean, over >= 64k samples);
 *  - the forward logits through the CPU backend are finite and not flat, for every
 *    dtype of `tiny` and for qwen2.5-1.5b (biases, tied embeddings) at q4_0;
 *  - the vocabulary: BOS/EOS/byte tokens where documented, any text round-trips. */
#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/quant.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"
#include "util/common.h"

static const char *DT[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"};

static model *load(const char *shape, const char *dtype, uint64_t seed, int threads) {
    model *m = NULL;
    char err[256];
    if (model_load_random(&m, shape, dtype, seed, threads, err, sizeof err))
        CHECKF(0, "%s %s: %s", shape, dtype, err);
    return m;
}

static size_t mat_bytes(const wmat *w) { return w->row_bytes * (size_t)w->n_rows; }

/* Every matrix of a and b equal (want_equal) or each different. */
static void compare(const model *a, const model *b, bool want_equal, const char *what) {
    int differ = 0, n = 0;
    const wmat *wa[] = {&a->tok_embd, &a->output}, *wb[] = {&b->tok_embd, &b->output};
    for (int i = 0; i < 2; i++, n++) differ += memcmp(wa[i]->data, wb[i]->data, mat_bytes(wa[i])) != 0;
    for (uint32_t l = 0; l < a->hp.n_layers; l++) {
        const layer_weights *x = &a->layers[l], *y = &b->layers[l];
        const wmat *xs[] = {&x->wq, &x->wk, &x->wv, &x->wo, &x->w_gate, &x->w_up, &x->w_down};
        const wmat *ys[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
        for (int i = 0; i < 7; i++, n++) differ += memcmp(xs[i]->data, ys[i]->data, mat_bytes(xs[i])) != 0;
    }
    CHECKF(want_equal ? differ == 0 : differ == n, "%s: %d of %d matrices differ", what, differ, n);
}

static void test_same_seed_same_weights(void) {
    for (size_t d = 0; d < IFD_ARRAY_LEN(DT); d++) {
        model *a = load("tiny", DT[d], 5, 1), *b = load("tiny", DT[d], 5, 2), *c = load("tiny", DT[d], 6, 2);
        if (a && b && c) {
            compare(a, b, true, DT[d]);
            compare(a, c, false, DT[d]);
            CHECK(a->tok_embd.type == b->tok_embd.type && a->layers[0].wq.type == a->tok_embd.type);
        }
        model_destroy(a);
        model_destroy(b);
        model_destroy(c);
    }
}

static void stats(const wmat *w, double *mean, double *sd) {
    float *row = malloc((size_t)w->n_cols * sizeof(float));
    double s = 0, s2 = 0;
    for (int64_t r = 0; r < w->n_rows; r++) {
        quant_dequantize_row_ref(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, row, w->n_cols);
        for (int64_t i = 0; i < w->n_cols; i++) s += row[i], s2 += (double)row[i] * row[i];
    }
    const double n = (double)w->n_rows * (double)w->n_cols;
    *mean = s / n;
    *sd = sqrt(s2 / n - *mean * *mean);
    free(row);
}

static void test_weight_scale(void) {
    for (size_t d = 0; d < IFD_ARRAY_LEN(DT); d++) {
        model *m = load("tiny", DT[d], 1, 2);
        if (!m) continue;
        const wmat *ws[] = {&m->layers[0].wq, &m->layers[1].w_down, &m->tok_embd};
        for (int i = 0; i < 3; i++) {
            double mean, sd;
            stats(ws[i], &mean, &sd);
            const double want = 1.0 / sqrt((double)ws[i]->n_cols);
            CHECKF(fabs(sd - want) < 0.10 * want && fabs(mean) < 0.05 * want, "%s matrix %d: mean %g sd %g, want sd %g",
                   DT[d], i, mean, sd, want);
        }
        CHECK(m->layers[0].attn_norm[0] == 1.0f && m->output_norm[m->hp.dim - 1] == 1.0f);
        model_destroy(m);
    }
}

/* One forward of a 6-token prompt: every logit finite, the row not flat. */
static void forward_ok(model *m, const char *what) {
    backend_config cfg = {.n_threads = 2, .block_size = 16, .n_blocks = 2, .max_batch_tokens = 8,
                          .max_batch_seqs = 1, .max_logits = 2, .max_seq_len = 32};
    backend *b = NULL;
    char err[256];
    CHECKF(backend_create(&b, BACKEND_CPU, m, &cfg, err, sizeof err) == IFD_OK, "%s", err);
    if (!b) return;
    const int32_t V = (int32_t)m->hp.n_vocab;
    const int32_t ids[6] = {1, 300, 301, 5, 400, 259}, pos[6] = {0, 1, 2, 3, 4, 5}, slot[6] = {16, 17, 18, 19, 20, 21};
    const int32_t ss[2] = {0, 6}, ctx[1] = {6}, bt[2] = {1, 0}, li[2] = {5, 0};
    const ifd_batch bt_ = {.n_tokens = 6, .token_ids = ids, .positions = pos, .slot_mapping = slot, .n_seqs = 1,
                           .seq_start = ss, .context_len = ctx, .block_table = bt, .max_blocks_per_seq = 2,
                           .n_logits = 2, .logits_index = li};
    float *lg = malloc((size_t)2 * V * sizeof(float));
    CHECK(backend_forward(b, &bt_, lg) == IFD_OK);
    bool finite = true;
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < (int64_t)2 * V; i++) {
        finite = finite && isfinite(lg[i]);
        lo = fminf(lo, lg[i]);
        hi = fmaxf(hi, lg[i]);
    }
    CHECKF(finite && hi - lo > 0.5f && hi - lo < 1e4f, "%s: logits [%g, %g]", what, lo, hi);
    free(lg);
    backend_destroy(b);
}

static void test_forward_finite(void) {
    for (size_t d = 0; d < IFD_ARRAY_LEN(DT); d++) {
        model *m = load("tiny", DT[d], 3, 2);
        if (m) forward_ok(m, DT[d]);
        model_destroy(m);
    }
}

static void test_qwen_shape(void) {
    model *m = load("qwen2.5-1.5b", "q4_0", 1, 0);
    if (!m) return;
    const model_hparams *hp = &m->hp;
    CHECK(hp->arch == ARCH_QWEN2 && hp->n_layers == 28 && hp->dim == 1536 && hp->n_heads == 12);
    CHECK(hp->n_kv_heads == 2 && hp->ffn_dim == 8960 && hp->n_vocab == 151936 && hp->rope_base == 1e6f);
    CHECK(hp->tied_embeddings && m->output.data == m->tok_embd.data && hp->rope_layout == ROPE_NEOX);
    CHECK(m->layers[27].bq && m->layers[27].bk && m->layers[27].bv && m->layers[0].bq[0] != 0.0f);
    CHECK(!strcmp(m->name, "random-qwen2.5-1.5b-q4_0") && tok_n_vocab(m->tok) == 151936);
    forward_ok(m, "qwen2.5-1.5b q4_0");
    model_destroy(m);
}

static void test_errors(void) {
    model *m = (model *)1;
    char err[256] = "";
    CHECK(model_load_random(&m, "llama-9000", "f32", 0, 1, err, sizeof err) == IFD_ERR_INVALID && !m);
    CHECKF(strstr(err, "llama-9000") && strstr(err, "llama3-8b"), "%s", err);
    CHECK(model_load_random(&m, "tiny", "q5_0", 0, 1, err, sizeof err) == IFD_ERR_INVALID && !m);
    CHECKF(strstr(err, "q5_0") && strstr(err, "q6_k"), "%s", err);
    tokenizer *t = (tokenizer *)1;
    CHECK(tok_create_synthetic(&t, 100, err, sizeof err) == IFD_ERR_INVALID && !t);
}

static void test_vocabulary(void) {
    model *m = load("tiny", "f32", 0, 1);
    if (!m) return;
    const tokenizer *t = m->tok;
    CHECK(tok_n_vocab(t) == 512 && tok_bos(t) == 1 && tok_eos(t) == 2 && tok_is_eog(t, 2));
    CHECK(tok_get_type(t, 3) == TOK_TYPE_BYTE && tok_get_type(t, 300) == TOK_TYPE_NORMAL);
    CHECK(tok_find(t, "<0x41>", 6) == 3 + 0x41 && tok_find(t, "\xE2\x96\x81" "a", 4) >= 259);
    const char *text = "hello world, caf\xC3\xA9 \xF0\x9F\x99\x82!\n";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tok_encode(t, text, strlen(text), TOK_ENC_ADD_BOS, &ids, &n) == IFD_OK && n > 3 && ids[0] == 1);
    char *back = NULL;
    size_t nb = 0;
    CHECK(ids && tok_decode(t, ids + 1, n - 1, false, &back, &nb) == IFD_OK);
    /* SentencePiece adds one leading space */
    CHECKF(back && nb == strlen(text) + 1 && back[0] == ' ' && !memcmp(back + 1, text, strlen(text)), "'%s'",
           back ? back : "");
    bool normal = false;
    for (size_t i = 1; i < n; i++) normal = normal || tok_get_type(t, ids[i]) == TOK_TYPE_NORMAL;
    CHECK(normal); /* letters become filler pieces, not only bytes */
    free(ids);
    free(back);
    model_destroy(m);
}

TEST_MAIN(T(test_same_seed_same_weights), T(test_weight_scale), T(test_forward_finite), T(test_qwen_shape),
          T(test_errors), T(test_vocabulary))
