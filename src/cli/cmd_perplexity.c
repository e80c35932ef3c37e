/* cmd_perplexity.c — `inferd perplexity -m FILE -f TEXT [--ctx N] [--kl-base BASE]`:
 * the perplexity of a text by llama.cpp's llama-perplexity method, so the figures
 * compare with its table:
 *   - the whole file is tokenized once, BOS added when the vocabulary asks (control
 *     tokens in the text are not parsed), and must give at least 2 * N tokens;
 *   - it is cut into floor(n / N) consecutive windows of N tokens; a window's first
 *     token is replaced by BOS when the vocabulary adds one;
 *   - in each window the positions N/2 .. N-2 predict the next token (N - 1 - N/2
 *     scored tokens a window); nll and nll^2 are summed over all scored tokens;
 *   - PPL = exp(mean nll), error = PPL * sqrt((mean nll^2 - mean nll^2) / (count - 1)).
 * Every window is one prompt-logprob request (max_tokens 0, top-N 0: the logprob of
 * the actual next token), all submitted at once so continuous batching runs them
 * together. The running figure after each window (in window order) goes to stderr as
 * llama.cpp's "[1]x,[2]y,"; the last stdout line is "ppl VALUE +/- ERROR".
 *
 * --kl-base: the same windows through a second engine on the base model, whose full
 * logits rows are read through the engine's private logits tap (engine_tap.h: the
 * public API returns at most the top 20). Windows run in groups (base first, its
 * log-softmax rows kept, then this model's rows compared as they come) so memory stays
 * bounded; it reports the mean KL divergence (base || this) over the scored positions
 * and the fraction where both argmaxes agree, as llama.cpp's --kl-divergence.
 *
 * Options: the shared engine entries and perplexity's own in src/server/config.c.
 * CLI thread only (the engines are driven non-threaded in this thread). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/engine_model.h"
#include "../engine/engine_tap.h"
#include "../model/model.h"
#include "../server/config.h"
#include "../util/common.h"
#include "cli.h"
#include "inferd.h"

#define PPL_KL_GROUP_BYTES ((size_t)256 << 20) /* base rows kept at once for --kl-base */

typedef struct ppl_window {
    uint64_t id;  /* engine request id (of the engine now running it) */
    float *lp;    /* [n_scored] logprob of each scored next token */
    bool got_lp;  /* the prompt logprobs arrived */
    bool done;    /* finished (ok or not) */
    bool ok;      /* finished with INFERD_FINISH_LENGTH and got_lp */
} ppl_window;

typedef struct ppl_run {
    int32_t ctx, first, n_scored, n_windows, n_vocab;
    ppl_window *w;
    /* KL: the group [g0, g1) of windows under way; base rows [g1-g0][n_scored][n_vocab]
     * as log-softmax, and the base argmax of each */
    int32_t g0, g1;
    float *base_ls;
    int32_t *base_top;
    bool base_pass; /* the tap stores (base) rather than compares (this model) */
    double kl_sum;
    int64_t kl_count, top1_same;
    bool tap_bad;
    /* the running sums over windows [0, next), taken in window order */
    double nll, nll2;
    int64_t count;
    int32_t next;
} ppl_run;

typedef struct ppl_cb {
    ppl_run *r;
    int32_t i; /* window index */
} ppl_cb;

static void on_output(const inferd_output *o, void *user) {
    ppl_cb *c = user;
    ppl_run *r = c->r;
    ppl_window *w = &r->w[c->i];
    if (o->prompt_logprobs && !r->base_pass && o->n_prompt_logprobs == r->ctx - 1) {
        const int32_t stride = 1 + o->n_prompt_top;
        /* entry k is the logprob of prompt token k + 1: the scored ones are first .. ctx-2 */
        for (int32_t k = 0; k < r->n_scored; k++)
            w->lp[k] = o->prompt_logprobs[(size_t)(r->first + k) * (size_t)stride].logprob;
        w->got_lp = true;
    }
    if (o->finished) {
        w->done = true;
        w->ok = o->finish_reason == INFERD_FINISH_LENGTH && (w->got_lp || r->base_pass);
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = ((const ppl_window *)b)->id;
    return (x > y) - (x < y);
}

/* log-softmax of row into out[n] (float logits, double sum as llama.cpp); returns the argmax */
static int32_t log_softmax(const float *row, int32_t n, float *out) {
    int32_t top = 0;
    for (int32_t i = 1; i < n; i++)
        if (row[i] > row[top]) top = i;
    const float mx = row[top];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(row[i] - mx));
    const double ls = log(sum);
    for (int32_t i = 0; i < n; i++) out[i] = (float)((double)(row[i] - mx) - ls);
    return top;
}

static void on_row(void *user, uint64_t id, int32_t pos, const float *row, int32_t n_vocab) {
    ppl_run *r = user;
    if (pos < r->first || pos > r->ctx - 2) return; /* not a scored position */
    /* the group's windows have increasing ids (submitted in order) */
    ppl_window *w = bsearch(&id, r->w + r->g0, (size_t)(r->g1 - r->g0), sizeof *w, cmp_u64);
    if (!w || n_vocab != r->n_vocab) {
        r->tap_bad = true;
        return;
    }
    const size_t slot = ((size_t)(w - (r->w + r->g0)) * (size_t)r->n_scored + (size_t)(pos - r->first));
    float *base = r->base_ls + slot * (size_t)n_vocab;
    if (r->base_pass) {
        r->base_top[slot] = log_softmax(row, n_vocab, base);
        return;
    }
    /* KL(base || this) = sum_v p_base(v) (log p_base(v) - log p_this(v)) */
    int32_t top = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (row[i] > row[top]) top = i;
    const float mx = row[top];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)(row[i] - mx));
    const double ls = log(sum);
    double kl = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const double lb = base[i], lt = (double)(row[i] - mx) - ls;
        kl += exp(lb) * (lb - lt);
    }
    r->kl_sum += kl;
    r->kl_count++;
    r->top1_same += top == r->base_top[slot];
}

/* Adds the windows finished since the last call, in window order (the figure is then
 * independent of the order they finish in), printing the running PPL of each. */
static void ppl_advance(ppl_run *r) {
    const int32_t next0 = r->next;
    for (; r->next < r->g1 && r->w[r->next].ok; r->next++) {
        const ppl_window *w = &r->w[r->next];
        for (int32_t k = 0; k < r->n_scored; k++) {
            const double v = -(double)w->lp[k];
            r->nll += v;
            r->nll2 += v * v;
        }
        r->count += r->n_scored;
        fprintf(stderr, "[%d]%.4f,", r->next + 1, exp(r->nll / (double)r->count));
    }
    if (r->next != next0) fflush(stderr);
}

/* Runs windows [g0, g1) of tokens through e (all submitted, then stepped until done).
 * Returns 0, or 1 with a message printed. */
static int run_group(inferd_engine *e, ppl_run *r, const int32_t *tokens, int32_t bos, int32_t g0,
                     int32_t g1, ppl_cb *cbs, int32_t *buf, const char *what) {
    char err[512];
    for (int32_t i = g0; i < g1; i++) {
        ppl_window *w = &r->w[i];
        w->done = w->ok = w->got_lp = false;
        memcpy(buf, tokens + (size_t)i * (size_t)r->ctx, (size_t)r->ctx * sizeof(int32_t));
        if (bos >= 0) buf[0] = bos;
        inferd_request q = {.prompt = buf, .n_prompt = r->ctx, .cb = on_output, .user = &cbs[i]};
        inferd_sampling_default(&q.sampling);
        q.sampling.max_tokens = 0;
        q.sampling.prompt_logprobs = 0;
        if (inferd_submit(e, &q, &w->id, err, sizeof err)) {
            fprintf(stderr, "inferd perplexity: %s: window %d: %s\n", what, i + 1, err);
            while (inferd_engine_step(e) > 0) {
            }
            return 1;
        }
    }
    while (inferd_engine_step(e) > 0)
        if (!r->base_pass) ppl_advance(r);
    if (!r->base_pass) ppl_advance(r);
    for (int32_t i = g0; i < g1; i++)
        if (!r->w[i].ok) {
            fprintf(stderr, "inferd perplexity: %s: window %d failed\n", what, i + 1);
            return 1;
        }
    if (r->tap_bad) {
        fprintf(stderr, "inferd perplexity: %s: unexpected logits rows\n", what);
        return 1;
    }
    return 0;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(b, cap);
            if (!nb) {
                free(b);
                fclose(f);
                return NULL;
            }
            b = nb;
        }
        size_t got = fread(b + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    const bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return NULL;
    }
    *n = len;
    return b;
}

static int create_engine(inferd_engine **e, const server_config *c, const char *model_path,
                         int32_t max_len) {
    char err[512];
    inferd_engine_options eo;
    inferd_engine_options_default(&eo);
    config_engine_options(c, &eo);
    if (model_path) { /* --kl-base: the reference runs as it is, never quantized */
        eo.model_path = model_path;
        eo.quantize_bits = 0;
        eo.quantize_lm_head = false;
        eo.quantize_keep_layers = NULL;
        eo.calibration_file = NULL;
    }
    eo.threaded = false;
    if (!config_given(c, "max-model-len")) eo.max_model_len = max_len;
    if (inferd_engine_create(e, &eo, err, sizeof err)) {
        fprintf(stderr, "inferd perplexity: %s: %s\n", eo.model_path ? eo.model_path : "model", err);
        return 1;
    }
    if (err[0]) fprintf(stderr, "inferd perplexity: warning: %s\n", err);
    return 0;
}

int cli_perplexity(int argc, char **argv) {
    server_config c;
    config_init(&c, CFG_CMD_PERPLEXITY);
    char err[512];
    int rc = config_load(&c, argc, argv, err, sizeof err);
    if (rc) {
        if (rc < 0) fprintf(stderr, "inferd perplexity: %s\n", err);
        server_config_deinit(&c);
        return rc > 0 ? 0 : 2;
    }
    if (!c.model || !c.text_file) {
        fprintf(stderr, "inferd perplexity: -m FILE and -f TEXT are required (see --help)\n");
        server_config_deinit(&c);
        return 2;
    }
    if (c.ppl_ctx < 4) {
        fprintf(stderr, "inferd perplexity: --ctx must be at least 4 (got %lld)\n", (long long)c.ppl_ctx);
        server_config_deinit(&c);
        return 2;
    }
    inferd_engine *e = NULL, *eb = NULL;
    char *text = NULL;
    int32_t *tokens = NULL, *buf = NULL;
    ppl_run r = {0};
    ppl_cb *cbs = NULL;
    int ret = 1;
    size_t n_text = 0;
    text = read_file(c.text_file, &n_text);
    if (!text) {
        fprintf(stderr, "inferd perplexity: cannot read %s\n", c.text_file);
        goto done;
    }
    if (n_text == 0) {
        fprintf(stderr, "inferd perplexity: %s is empty\n", c.text_file);
        goto done;
    }
    /* the engine's context must hold a whole window (a prompt shorter than max-model-len) */
    const bool ctx_given = config_given(&c, "ctx");
    int32_t ctx = (int32_t)c.ppl_ctx;
    if (create_engine(&e, &c, NULL, ctx + 1)) goto done;
    const int32_t n_ctx_train = (int32_t)inferd_model(e)->hp.n_ctx_train;
    if (n_ctx_train > 0 && ctx > n_ctx_train) {
        if (ctx_given) {
            fprintf(stderr, "inferd perplexity: --ctx %d is larger than the model's context (%d)\n", ctx,
                    n_ctx_train);
            goto done;
        }
        ctx = n_ctx_train;
    }
    if (inferd_max_model_len(e) <= ctx) {
        fprintf(stderr, "inferd perplexity: a window of %d tokens does not fit the engine's context (%d)\n",
                ctx, inferd_max_model_len(e));
        goto done;
    }
    const int32_t bos = inferd_token_bos(e);
    const bool add_bos = inferd_tokenize(e, "", 0, true, false, NULL, 0) > 0 && bos >= 0;
    int32_t n_tok = inferd_tokenize(e, text, n_text, true, false, NULL, 0);
    if (n_tok > 0 && (tokens = malloc((size_t)n_tok * sizeof(int32_t))))
        n_tok = inferd_tokenize(e, text, n_text, true, false, tokens, n_tok);
    if (n_tok < 0 || !tokens) {
        fprintf(stderr, "inferd perplexity: cannot tokenize %s\n", c.text_file);
        goto done;
    }
    if ((int64_t)n_tok < 2 * (int64_t)ctx) {
        fprintf(stderr,
                "inferd perplexity: %s tokenizes to only %d tokens; a context of %d needs at least %d\n",
                c.text_file, n_tok, ctx, 2 * ctx);
        goto done;
    }
    r.ctx = ctx;
    r.first = ctx / 2;
    r.n_scored = ctx - 1 - r.first;
    r.n_windows = n_tok / ctx;
    r.n_vocab = inferd_n_vocab(e);
    r.w = calloc((size_t)r.n_windows, sizeof *r.w);
    cbs = calloc((size_t)r.n_windows, sizeof *cbs);
    buf = malloc((size_t)ctx * sizeof(int32_t));
    if (!r.w || !cbs || !buf) goto oom;
    for (int32_t i = 0; i < r.n_windows; i++) {
        if (!(r.w[i].lp = malloc((size_t)r.n_scored * sizeof(float)))) goto oom;
        cbs[i] = (ppl_cb){.r = &r, .i = i};
    }
    fprintf(stderr, "perplexity: %d tokens, %d windows of %d, %d scored tokens each\n", n_tok,
            r.n_windows, ctx, r.n_scored);
    int32_t group = r.n_windows;
    if (c.kl_base) {
        if (create_engine(&eb, &c, c.kl_base, ctx + 1)) goto done;
        if (inferd_n_vocab(eb) != r.n_vocab || inferd_max_model_len(eb) <= ctx) {
            fprintf(stderr, "inferd perplexity: the base model's vocabulary (%d) or context (%d) does not "
                            "match (%d, %d needed)\n",
                    inferd_n_vocab(eb), inferd_max_model_len(eb), r.n_vocab, ctx + 1);
            goto done;
        }
        const size_t per_window = (size_t)r.n_scored * (size_t)r.n_vocab * sizeof(float);
        group = (int32_t)IFD_MAX((size_t)1, IFD_MIN((size_t)r.n_windows, PPL_KL_GROUP_BYTES / per_window));
        r.base_ls = malloc((size_t)group * per_window);
        r.base_top = malloc((size_t)group * (size_t)r.n_scored * sizeof(int32_t));
        if (!r.base_ls || !r.base_top) goto oom;
        engine_set_logits_tap(eb, on_row, &r);
        engine_set_logits_tap(e, on_row, &r);
    }
    const double t0 = ifd_now_s(); /* the models are loaded: the windows only */
    for (int32_t g0 = 0; g0 < r.n_windows; g0 += group) {
        r.g0 = g0;
        r.g1 = IFD_MIN(r.n_windows, g0 + group);
        if (eb) {
            r.base_pass = true;
            if (run_group(eb, &r, tokens, add_bos ? bos : -1, r.g0, r.g1, cbs, buf, "base")) goto done;
            r.base_pass = false;
        }
        if (run_group(e, &r, tokens, add_bos ? bos : -1, r.g0, r.g1, cbs, buf, "model")) goto done;
    }
    fprintf(stderr, "\n");
    const double secs = ifd_now_s() - t0;
    const int64_t count = r.count;
    IFD_ASSERT(r.next == r.n_windows && count == (int64_t)r.n_windows * r.n_scored);
    const double mean = r.nll / (double)count, ppl = exp(mean);
    const double var = r.nll2 / (double)count - mean * mean;
    const double ppl_err = var > 0 && count > 1 ? sqrt(var / (double)(count - 1)) * ppl : 0.0;
    fprintf(stderr, "perplexity: %lld scored tokens in %.2f s (%.1f window tokens/s%s)\n",
            (long long)count, secs, (double)r.n_windows * ctx / (secs > 0 ? secs : 1e-9),
            eb ? ", both models" : "");
    if (eb) {
        if (r.kl_count != count) {
            fprintf(stderr, "inferd perplexity: KL: %lld rows compared, %lld expected\n",
                    (long long)r.kl_count, (long long)count);
            goto done;
        }
        printf("kl %.6f\n", r.kl_sum / (double)r.kl_count + 0.0); /* + 0.0: no "-0" */
        printf("top1 %.4f\n", (double)r.top1_same / (double)r.kl_count);
    }
    printf("ppl %.4f +/- %.5f\n", ppl, ppl_err);
    ret = 0;
    goto done;
oom:
    fprintf(stderr, "inferd perplexity: out of memory\n");
done:
    inferd_engine_destroy(eb);
    inferd_engine_destroy(e);
    for (int32_t i = 0; r.w && i < r.n_windows; i++) free(r.w[i].lp);
    free(r.w);
    free(r.base_ls);
    free(r.base_top);
    free(cbs);
    free(buf);
    free(tokens);
    free(text);
    server_config_deinit(&c);
    return ret;
}
