/* quant_report.c — the per-layer sensitivity report (quant_report.h). */
#include "quant_report.h"

#include <stdlib.h>
#include <string.h>

#include "../backend/calib.h"
#include "../model/model_awq.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"

#define REPORT_TOKENS 2048 /* of the calibration text: statistics and perplexity */
#define REPORT_WINDOW 256

typedef struct ranked {
    double err;
    uint32_t layer;
    int mat;
} ranked;

static int by_err_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->err != y->err) return x->err < y->err ? 1 : -1;
    return x->layer != y->layer ? (x->layer < y->layer ? -1 : 1) : x->mat - y->mat;
}

typedef struct rctx {
    const quant_report_opts *o;
    model_calib *c;
    const int32_t *ids;
    int64_t n_ids;
    int32_t window, bos;
} rctx;

/* Perplexity of the calibration text under the model quantized with keep (NULL:
 * nothing quantized). */
static int ppl_with(const rctx *r, const bool *keep, bool quantize, double *ppl) {
    char err[512];
    model *m = NULL;
    int rc = model_load(&m, r->o->model_path, err, sizeof err);
    if (rc == IFD_OK && quantize) {
        r->c->m = m;
        rc = model_awq_apply(m, r->c, r->o->type, keep, r->o->qo.n_threads, err, sizeof err);
        model_quant_opts qo = r->o->qo;
        qo.keep = keep;
        if (rc == IFD_OK)
            rc = r->o->bits ? model_quantize(m, &qo, err, sizeof err)
                            : model_quantize_to(m, &qo, r->o->type, err, sizeof err);
        model_awq_trim(m);
    }
    if (rc == IFD_OK)
        rc = backend_perplexity(m, r->ids, r->n_ids, r->window, r->bos, REPORT_TOKENS, r->o->qo.n_threads, ppl,
                                err, sizeof err);
    if (rc) fprintf(stderr, "inferd quantize: report: %s\n", err);
    model_destroy(m);
    return rc;
}

static void keep_list(const ranked *layers, int k, uint32_t n_layers, char *buf, size_t cap) {
    bool *on = calloc(n_layers, sizeof *on);
    size_t at = 0;
    buf[0] = 0;
    if (!on) return;
    for (int i = 0; i < k; i++) on[layers[i].layer] = true;
    for (uint32_t l = 0; l < n_layers && at + 12 < cap; l++)
        if (on[l]) at += (size_t)snprintf(buf + at, cap - at, "%s%u", at ? "," : "", l);
    free(on);
}

int quant_report(const quant_report_opts *o, FILE *out) {
    char err[512];
    model *m = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n_text = 0, n_ids = 0;
    model_calib c = {0};
    double *rel = NULL;
    ranked *mats = NULL, *layers = NULL;
    bool *keep = NULL;
    int ret = 1;
    if (model_load(&m, o->model_path, err, sizeof err)) {
        fprintf(stderr, "inferd quantize: report: %s\n", err);
        return 1;
    }
    if (ifd_read_file(o->calibration, &text, &n_text, err, sizeof err) ||
        tok_encode(m->tok, text, n_text, TOK_ENC_ADD_BOS, &ids, &n_ids)) {
        fprintf(stderr, "inferd quantize: report: --calibration %s: %s\n", o->calibration,
                n_text ? "cannot tokenize it" : err);
        goto done;
    }
    const uint32_t L = m->hp.n_layers;
    int32_t window = REPORT_WINDOW;
    if (m->hp.n_ctx_train > 0 && (uint32_t)window > m->hp.n_ctx_train) window = (int32_t)m->hp.n_ctx_train;
    rctx r = {.o = o, .c = &c, .ids = ids, .n_ids = (int64_t)n_ids, .window = window, .bos = tok_bos(m->tok)};
    if ((int64_t)n_ids < window) {
        fprintf(stderr, "inferd quantize: report: --calibration %s has %zu tokens, fewer than one window (%d)\n",
                o->calibration, n_ids, window);
        goto done;
    }
    /* statistics and scales on the original; the errors of the scaled matrices */
    if (backend_awq(m, ids, (int64_t)n_ids, window, r.bos, REPORT_TOKENS, o->type, NULL, o->qo.n_threads, &c, err,
                    sizeof err)) {
        fprintf(stderr, "inferd quantize: report: %s\n", err);
        goto done;
    }
    rel = malloc((size_t)L * QM_N * sizeof *rel);
    mats = malloc((size_t)L * QM_N * sizeof *mats);
    layers = malloc((size_t)L * sizeof *layers);
    keep = calloc(L, sizeof *keep);
    if (!rel || !mats || !layers || !keep || model_quant_errors(m, &c, o->type, o->qo.n_threads, rel)) {
        fprintf(stderr, "inferd quantize: report: out of memory\n");
        goto done;
    }
    const ggml_type_info *ti = ggml_type_get((uint32_t)o->type);
    fprintf(out, "# per-matrix output error quantized to %s (AWQ-scaled), on %d sampled rows of %lld tokens of %s\n",
            ti ? ti->name : "?", c.in[0].n_rows,
            (long long)(n_ids < REPORT_TOKENS ? n_ids : REPORT_TOKENS), o->calibration);
    fprintf(out, "%-6s %-6s %-12s %-10s %s\n", "rank", "layer", "matrix", "rel_error", "awq_alpha");
    int n = 0;
    for (uint32_t l = 0; l < L; l++) {
        layers[l] = (ranked){.err = 0, .layer = l, .mat = -1};
        for (int i = 0; i < QM_N; i++) {
            const double e = rel[l * QM_N + (uint32_t)i];
            if (e < 0) continue;
            mats[n++] = (ranked){.err = e, .layer = l, .mat = i};
            if (e > layers[l].err) layers[l].err = e, layers[l].mat = i;
        }
    }
    qsort(mats, (size_t)n, sizeof *mats, by_err_desc);
    for (int i = 0; i < n; i++) {
        const int in = mats[i].mat <= QM_V ? CALIB_ATTN_IN : mats[i].mat == QM_O ? CALIB_ATTN_OUT
                     : mats[i].mat == QM_DOWN ? CALIB_FFN_OUT : CALIB_FFN_IN;
        fprintf(out, "%-6d %-6u %-12s %-10.5f %.2f\n", i + 1, mats[i].layer, model_qm_name(mats[i].mat),
                mats[i].err, (double)c.alpha[mats[i].layer * CALIB_N + (uint32_t)in]);
    }
    qsort(layers, L, sizeof *layers, by_err_desc);
    fprintf(out, "# layers by their worst matrix:");
    for (uint32_t i = 0; i < L; i++) fprintf(out, " %u", layers[i].layer);
    fprintf(out, "\n");

    /* the fewest top-ranked layers kept that meet the budget (perplexity taken as
     * monotone in the number kept: a binary search) */
    double base = 0, p = 0;
    if (ppl_with(&r, NULL, false, &base) || ppl_with(&r, NULL, true, &p)) goto done;
    const double limit = base * (1.0 + o->budget_pct / 100.0);
    fprintf(out, "# perplexity of the calibration text: original %.4f, budget +%.2f%% = %.4f\n", base,
            o->budget_pct, limit);
    fprintf(out, "keep 0 layers: ppl %.4f (%+.2f%%)\n", p, (p / base - 1) * 100);
    int best = 0;
    double best_p = p;
    if (p > limit) {
        int lo = 1, hi = (int)L;
        best = (int)L, best_p = base;
        while (lo <= hi) {
            const int k = (lo + hi) / 2;
            memset(keep, 0, L * sizeof *keep);
            for (int i = 0; i < k; i++) keep[layers[i].layer] = true;
            double pk = 0;
            if (ppl_with(&r, keep, true, &pk)) goto done;
            char list[256];
            keep_list(layers, k, L, list, sizeof list);
            fprintf(out, "keep %d layers (%s): ppl %.4f (%+.2f%%)\n", k, list, pk, (pk / base - 1) * 100);
            if (pk <= limit) best = k, best_p = pk, hi = k - 1;
            else lo = k + 1;
        }
    }
    char list[256];
    keep_list(layers, best, L, list, sizeof list);
    if (best == 0)
        fprintf(out, "suggested: no --quantize-keep-layers needed (ppl %+.2f%% <= +%.2f%%)\n",
                (best_p / base - 1) * 100, o->budget_pct);
    else
        fprintf(out, "suggested: --quantize-keep-layers %s (ppl %+.2f%% <= +%.2f%%)\n", list,
                (best_p / base - 1) * 100, o->budget_pct);
    ret = 0;
done:
    free(rel), free(mats), free(layers), free(keep), free(ids), free(text);
    model_calib_free(&c);
    model_destroy(m);
    return ret;
}
