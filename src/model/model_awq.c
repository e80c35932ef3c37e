/* model_awq.c — calibration statistics, activation-aware scales, quantization error per
 * matrix (model_awq.h). */
#include "model_awq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/common.h"
#include "../util/threadpool.h"
#include "quant.h"

/* ---- statistics --------------------------------------------------------------------- */

static int32_t input_width(const model *m, int which) {
    const model_hparams *hp = &m->hp;
    switch (which) {
    case CALIB_ATTN_OUT: return (int32_t)(hp->n_heads * hp->head_dim);
    case CALIB_FFN_OUT: return (int32_t)hp->ffn_dim;
    default: return (int32_t)hp->dim;
    }
}

int model_calib_init(model_calib *c, const model *m, int32_t sample_rows, int64_t expected_rows) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->n_layers = m->hp.n_layers;
    const size_t n_in = (size_t)c->n_layers * CALIB_N;
    c->in = calloc(n_in, sizeof *c->in);
    c->alpha = malloc(n_in * sizeof *c->alpha);
    c->scale = calloc(n_in, sizeof *c->scale);
    if (!c->in || !c->alpha || !c->scale) goto nomem;
    if (sample_rows < 1) sample_rows = 1;
    const int64_t stride = expected_rows > sample_rows ? expected_rows / sample_rows : 1;
    for (size_t i = 0; i < n_in; i++) {
        calib_input *in = &c->in[i];
        c->alpha[i] = -1.0f;
        in->n = input_width(m, (int)(i % CALIB_N));
        in->cap = sample_rows;
        in->stride = stride;
        in->abs_sum = calloc((size_t)in->n, sizeof(double));
        in->sq_sum = calloc((size_t)in->n, sizeof(double));
        in->rows = malloc((size_t)in->cap * (size_t)in->n * sizeof(float));
        if (!in->abs_sum || !in->sq_sum || !in->rows) goto nomem;
    }
    return IFD_OK;
nomem:
    model_calib_free(c);
    return IFD_ERR_NOMEM;
}

void model_calib_free(model_calib *c) {
    if (c->in)
        for (size_t i = 0; i < (size_t)c->n_layers * CALIB_N; i++) {
            free(c->in[i].abs_sum);
            free(c->in[i].sq_sum);
            free(c->in[i].rows);
        }
    if (c->scale)
        for (size_t i = 0; i < (size_t)c->n_layers * CALIB_N; i++) free(c->scale[i]);
    free(c->in);
    free(c->alpha);
    free(c->scale);
    memset(c, 0, sizeof *c);
}

void model_calib_observe(void *user, const wmat *w, const float *x, int32_t n_rows) {
    model_calib *c = user;
    const model *m = c->m;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const layer_weights *lw = &m->layers[l];
        int which = w == &lw->wq ? CALIB_ATTN_IN : w == &lw->wo ? CALIB_ATTN_OUT
                  : w == &lw->w_gate ? CALIB_FFN_IN : w == &lw->w_down ? CALIB_FFN_OUT : -1;
        if (which < 0) continue;
        calib_input *in = &c->in[l * CALIB_N + (uint32_t)which];
        if (w->n_cols != in->n) return;
        for (int32_t r = 0; r < n_rows; r++, in->count++) {
            const float *xr = x + (size_t)r * (size_t)in->n;
            for (int32_t k = 0; k < in->n; k++) {
                in->abs_sum[k] += fabsf(xr[k]);
                in->sq_sum[k] += (double)xr[k] * xr[k];
            }
            if (in->count % in->stride == 0 && in->n_rows < in->cap)
                memcpy(in->rows + (size_t)in->n_rows++ * (size_t)in->n, xr, (size_t)in->n * sizeof(float));
        }
        return;
    }
}

/* ---- the model's f32 copies ----------------------------------------------------------- */

typedef struct awq_store {
    float **bufs;
    size_t n, cap;
} awq_store;

static awq_store *store_of(model *m) {
    if (!m->awq) m->awq = calloc(1, sizeof(awq_store));
    return m->awq;
}

void model_awq_free(model *m) {
    awq_store *s = m->awq;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->bufs[i]);
    free(s->bufs);
    free(s);
    m->awq = NULL;
}

const char *model_qm_name(int i) {
    static const char *const N[QM_N] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                        "ffn_gate", "ffn_up", "ffn_down"};
    return i >= 0 && i < QM_N ? N[i] : "?";
}

wmat *model_layer_mat(model *m, uint32_t l, int i) {
    layer_weights *lw = &m->layers[l];
    wmat *ws[QM_N] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_up, &lw->w_down};
    return i >= 0 && i < QM_N ? ws[i] : NULL;
}

void model_awq_trim(model *m) {
    awq_store *s = m->awq;
    if (!s) return;
    size_t kept = 0;
    for (size_t i = 0; i < s->n; i++) {
        bool used = false;
        for (uint32_t l = 0; l < m->hp.n_layers && !used; l++)
            for (int j = 0; j < QM_N && !used; j++) used = model_layer_mat(m, l, j)->data == s->bufs[i];
        if (used) s->bufs[kept++] = s->bufs[i];
        else free(s->bufs[i]);
    }
    s->n = kept;
}

static bool is_float(ggml_type t) {
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

/* w becomes an f32 copy the model owns (already one: nothing to do). */
static int to_f32(model *m, wmat *w) {
    awq_store *s = store_of(m);
    if (!s) return IFD_ERR_NOMEM;
    for (size_t i = 0; i < s->n; i++)
        if (s->bufs[i] == w->data) return IFD_OK;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        float **nb = realloc(s->bufs, nc * sizeof *nb);
        if (!nb) return IFD_ERR_NOMEM;
        s->bufs = nb, s->cap = nc;
    }
    float *f = malloc((size_t)w->n_rows * (size_t)w->n_cols * sizeof(float));
    if (!f) return IFD_ERR_NOMEM;
    const uint8_t *src = w->data;
    for (int64_t r = 0; r < w->n_rows; r++)
        quant_dequantize_row_ref(w->type, src + (size_t)r * w->row_bytes, f + (size_t)r * (size_t)w->n_cols,
                                 w->n_cols);
    s->bufs[s->n++] = f;
    w->type = GGML_TYPE_F32;
    w->row_bytes = (size_t)w->n_cols * sizeof(float);
    w->data = f;
    return IFD_OK;
}

/* ---- the search ------------------------------------------------------------------------ */

#define AWQ_GRID 21        /* alpha = 0, 0.05, ..., 1 */
#define AWQ_SEARCH_ROWS 128 /* rows of each matrix the search's error estimate reads */
#define AWQ_MAX_X 64        /* sampled input rows it reads */

typedef struct search_job {
    const quant_traits *qt;
    const wmat *const *mats;
    int n_mats;
    const double *mean_abs, *mean_sq; /* [K] */
    const float *xT;                  /* [K][n_x] sampled input rows, transposed, or NULL */
    int32_t n_x;
    int64_t K;
    double loss[AWQ_GRID];
    float *scratch; /* [threads][3 * K] floats */
    uint8_t *qbuf;  /* [threads][row bytes] */
    size_t qrow;
} search_job;

/* The first nx sampled rows of an input, transposed ([K][nx]) so that one weight row's
 * outputs for every sampled row come out of one loop over rows (it vectorises), each
 * divided by the scales s folded into the weights (NULL: none). malloc'ed; NULL when
 * out of memory. */
static float *transposed_rows(const calib_input *in, int32_t nx, const float *s) {
    const int64_t K = in->n;
    float *xT = malloc((size_t)K * (size_t)nx * sizeof(float));
    if (!xT) return NULL;
    for (int32_t t = 0; t < nx; t++)
        for (int64_t k = 0; k < K; k++)
            xT[(size_t)k * (size_t)nx + (size_t)t] = in->rows[(size_t)t * (size_t)K + (size_t)k] / (s ? s[k] : 1.0f);
    return xT;
}

/* s = mean|x|^alpha, normalised so that sqrt(max * min) = 1, never below 1e-4. */
static void make_scales(const double *mean_abs, int64_t K, float alpha, float *s) {
    double mx = 0, mn = INFINITY;
    for (int64_t k = 0; k < K; k++) {
        const double v = pow(fmax(mean_abs[k], 1e-8), (double)alpha);
        s[k] = (float)v;
        mx = fmax(mx, v), mn = fmin(mn, v);
    }
    const double norm = sqrt(mx * mn);
    for (int64_t k = 0; k < K; k++) s[k] = fmaxf((float)(s[k] / norm), 1e-4f);
}

/* The output error of alpha = task / (GRID - 1) over a sample of each matrix's rows:
 * d_k = Q(w s)_k / s_k - w_k, summed (d . x)^2 over the sampled input rows x (or, without
 * rows, the diagonal sum_k d_k^2 E[x_k^2]). */
static void search_task(void *ctx, int32_t task, int32_t n_tasks, int32_t thread) {
    (void)n_tasks;
    search_job *j = ctx;
    const int64_t K = j->K;
    float *s = j->scratch + (size_t)thread * 3 * (size_t)K, *row = s + K, *deq = row + K;
    uint8_t *q = j->qbuf + (size_t)thread * j->qrow;
    make_scales(j->mean_abs, K, (float)task / (AWQ_GRID - 1), s);
    double loss = 0;
    for (int i = 0; i < j->n_mats; i++) {
        const wmat *w = j->mats[i];
        const int64_t step = w->n_rows > AWQ_SEARCH_ROWS ? w->n_rows / AWQ_SEARCH_ROWS : 1;
        for (int64_t r = 0; r < w->n_rows; r += step) {
            const float *wr = (const float *)w->data + (size_t)r * (size_t)K;
            for (int64_t k = 0; k < K; k++) row[k] = wr[k] * s[k];
            j->qt->quantize_row(row, q, K);
            j->qt->dequantize_row(q, deq, K);
            for (int64_t k = 0; k < K; k++) deq[k] = deq[k] / s[k] - wr[k];
            if (j->xT) { /* e_t = d . x_t for every t at once (a loop over t vectorises) */
                float e[AWQ_MAX_X] = {0};
                const int32_t nx = j->n_x;
                for (int64_t k = 0; k < K; k++) {
                    const float dk = deq[k], *xk = j->xT + (size_t)k * (size_t)nx;
                    for (int32_t t = 0; t < nx; t++) e[t] += dk * xk[t];
                }
                for (int32_t t = 0; t < nx; t++) loss += (double)e[t] * e[t];
            } else {
                for (int64_t k = 0; k < K; k++) loss += (double)deq[k] * deq[k] * j->mean_sq[k];
            }
        }
    }
    j->loss[task] = loss;
}

/* The alpha of the least weighted error for the matrices sharing one input (f32 copies),
 * its scales in s[K]. */
static float search_alpha(tp *pool, const quant_traits *qt, const wmat *const *mats, int n_mats,
                          const double *mean_abs, const double *mean_sq, const calib_input *in,
                          int64_t K, float *s, bool *ok) {
    search_job j = {.qt = qt, .mats = mats, .n_mats = n_mats, .mean_abs = mean_abs,
                    .mean_sq = mean_sq, .K = K};
    const int nt = tp_n_threads(pool);
    float *xT = NULL;
    if (in->n_rows >= 8) {
        j.n_x = in->n_rows < AWQ_MAX_X ? in->n_rows : AWQ_MAX_X;
        xT = transposed_rows(in, j.n_x, NULL);
        if (!xT) {
            *ok = false;
            return 0.0f;
        }
        j.xT = xT;
    }
    j.qrow = quant_row_bytes(qt->type, K);
    j.scratch = malloc((size_t)nt * 3 * (size_t)K * sizeof(float));
    j.qbuf = malloc((size_t)nt * j.qrow);
    if (!j.scratch || !j.qbuf) {
        free(j.scratch);
        free(j.qbuf);
        free(xT);
        *ok = false;
        return 0.0f;
    }
    tp_run(pool, search_task, &j, AWQ_GRID);
    free(xT);
    int best = 0;
    for (int i = 1; i < AWQ_GRID; i++)
        if (j.loss[i] < j.loss[best]) best = i;
    free(j.scratch);
    free(j.qbuf);
    const float alpha = (float)best / (AWQ_GRID - 1);
    make_scales(mean_abs, K, alpha, s);
    return alpha;
}

static void scale_cols(wmat *w, const float *s) {
    float *f = (float *)w->data;
    for (int64_t r = 0; r < w->n_rows; r++)
        for (int64_t k = 0; k < w->n_cols; k++) f[(size_t)r * (size_t)w->n_cols + (size_t)k] *= s[k];
}

static void scale_rows(wmat *w, const float *s) {
    float *f = (float *)w->data;
    for (int64_t r = 0; r < w->n_rows; r++)
        for (int64_t k = 0; k < w->n_cols; k++) f[(size_t)r * (size_t)w->n_cols + (size_t)k] /= s[r];
}

/* One input: means, the search, and the store of the chosen scales in c. */
static int scale_input(tp *pool, const quant_traits *qt, model_calib *c, uint32_t l, int which,
                       wmat *const *mats, int n_mats, int64_t K, const int32_t *kv_map, int32_t kv_n,
                       float **s_out, float **s_kv_out) {
    const calib_input *in = &c->in[l * CALIB_N + (uint32_t)which];
    double *ma = malloc((size_t)K * sizeof(double)), *ms = malloc((size_t)K * sizeof(double));
    float *s = malloc((size_t)K * sizeof(float));
    float *skv = kv_map ? malloc((size_t)kv_n * sizeof(float)) : NULL;
    double *ka = kv_map ? calloc((size_t)kv_n, sizeof(double)) : NULL;
    if (!ma || !ms || !s || (kv_map && (!skv || !ka))) {
        free(ma), free(ms), free(s), free(skv), free(ka);
        return IFD_ERR_NOMEM;
    }
    const double inv = 1.0 / (double)in->count;
    for (int64_t k = 0; k < K; k++) ma[k] = in->abs_sum[k] * inv, ms[k] = in->sq_sum[k] * inv;
    if (kv_map) { /* one scale per KV channel: the mean over the query heads sharing it */
        int32_t *cnt = calloc((size_t)kv_n, sizeof(int32_t));
        if (!cnt) {
            free(ma), free(ms), free(s), free(skv), free(ka);
            return IFD_ERR_NOMEM;
        }
        for (int64_t k = 0; k < K; k++) ka[kv_map[k]] += ma[k], cnt[kv_map[k]]++;
        for (int64_t k = 0; k < K; k++) ma[k] = ka[kv_map[k]] / cnt[kv_map[k]];
        free(cnt);
    }
    bool ok = true;
    c->alpha[l * CALIB_N + (uint32_t)which] =
        search_alpha(pool, qt, (const wmat *const *)mats, n_mats, ma, ms, in, K, s, &ok);
    if (kv_map)
        for (int64_t k = 0; k < K; k++) skv[kv_map[k]] = s[k];
    free(ma), free(ka);
    if (!ok) {
        free(s), free(skv), free(ms);
        return IFD_ERR_NOMEM;
    }
    for (int i = 0; i < n_mats; i++) scale_cols(mats[i], s);
    free(ms);
    free(c->scale[l * CALIB_N + (uint32_t)which]);
    c->scale[l * CALIB_N + (uint32_t)which] = s;
    *s_out = s;
    if (s_kv_out) *s_kv_out = skv;
    else free(skv);
    return IFD_OK;
}

int model_awq_apply(model *m, model_calib *c, ggml_type qtype, const bool *keep, int n_threads,
                    char *err, size_t err_bytes) {
    const quant_traits *qt = quant_traits_of(qtype);
    if (!qt || !qt->quantize_row)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "calibration: no quantizer for the target type");
    if (!c->in || c->m != m || c->n_layers != m->hp.n_layers || c->in[0].count == 0)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "calibration: no activation statistics");
    const model_hparams *hp = &m->hp;
    const int32_t hd = (int32_t)hp->head_dim, q_dim = (int32_t)(hp->n_heads * hp->head_dim);
    const int32_t kv_dim = (int32_t)(hp->n_kv_heads * hp->head_dim);
    const int32_t group = (int32_t)(hp->n_heads / hp->n_kv_heads);
    int32_t *kv_map = malloc((size_t)q_dim * sizeof(int32_t));
    tp *pool = tp_create(n_threads);
    int rc = IFD_OK;
    if (!kv_map || !pool) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "calibration: out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)c->n_layers * CALIB_N; i++) { /* this run's choices only */
        c->alpha[i] = -1.0f;
        free(c->scale[i]);
        c->scale[i] = NULL;
    }
    for (int32_t c2 = 0; c2 < q_dim; c2++) kv_map[c2] = (c2 / hd) / group * hd + c2 % hd;
    for (uint32_t l = 0; l < hp->n_layers && rc == IFD_OK; l++) {
        if (keep && keep[l]) continue;
        bool usable = true;
        for (int i = 0; i < QM_N; i++) {
            const wmat *w = model_layer_mat(m, l, i);
            usable = usable && is_float(w->type) && w->n_cols % qt->block_size == 0;
        }
        for (int w = 0; w < CALIB_N; w++) usable = usable && c->in[l * CALIB_N + (uint32_t)w].count > 0;
        if (!usable) continue;
        for (int i = 0; i < QM_N && rc == IFD_OK; i++) rc = to_f32(m, model_layer_mat(m, l, i));
        if (rc != IFD_OK) break;
        layer_weights *lw = &m->layers[l];
        float *s = NULL, *skv = NULL;
        /* the order makes every search see its matrices' final rows: o before q/k/v (o's
         * scales divide V's rows), down before gate/up (down's divide up's rows) */
        wmat *o[1] = {&lw->wo};
        rc = scale_input(pool, qt, c, l, CALIB_ATTN_OUT, o, 1, q_dim, kv_map, kv_dim, &s, &skv);
        if (rc != IFD_OK) break;
        scale_rows(&lw->wv, skv);
        if (lw->bv)
            for (int32_t i = 0; i < kv_dim; i++) ((float *)lw->bv)[i] /= skv[i];
        free(skv);
        wmat *qkv[3] = {&lw->wq, &lw->wk, &lw->wv};
        rc = scale_input(pool, qt, c, l, CALIB_ATTN_IN, qkv, 3, hp->dim, NULL, 0, &s, NULL);
        if (rc != IFD_OK) break;
        for (uint32_t i = 0; i < hp->dim; i++) ((float *)lw->attn_norm)[i] /= s[i];
        wmat *down[1] = {&lw->w_down};
        rc = scale_input(pool, qt, c, l, CALIB_FFN_OUT, down, 1, hp->ffn_dim, NULL, 0, &s, NULL);
        if (rc != IFD_OK) break;
        scale_rows(&lw->w_up, s);
        wmat *gu[2] = {&lw->w_gate, &lw->w_up};
        rc = scale_input(pool, qt, c, l, CALIB_FFN_IN, gu, 2, hp->dim, NULL, 0, &s, NULL);
        if (rc != IFD_OK) break;
        for (uint32_t i = 0; i < hp->dim; i++) ((float *)lw->ffn_norm)[i] /= s[i];
    }
    if (rc == IFD_ERR_NOMEM) rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "calibration: out of memory");
done:
    free(kv_map);
    tp_destroy(pool);
    return rc;
}

/* ---- the error of a quantization on the sampled rows ------------------------------------ */

typedef struct err_job {
    const model *m;
    const model_calib *c;
    const quant_traits *qt;
    double *rel;
} err_job;

static int input_of(int i) {
    return i <= QM_V ? CALIB_ATTN_IN : i == QM_O ? CALIB_ATTN_OUT : i == QM_DOWN ? CALIB_FFN_OUT
                                                                                 : CALIB_FFN_IN;
}

#define ERR_MAX_X 64 /* sampled input rows the error reads */

static void err_task(void *ctx, int32_t task, int32_t n_tasks, int32_t thread) {
    (void)n_tasks, (void)thread;
    err_job *j = ctx;
    const uint32_t l = (uint32_t)task / QM_N;
    const int i = task % QM_N;
    const wmat *w = model_layer_mat((model *)j->m, l, i);
    const calib_input *in = &j->c->in[l * CALIB_N + (uint32_t)input_of(i)];
    const float *s = j->c->scale[l * CALIB_N + (uint32_t)input_of(i)];
    const int64_t K = w->n_cols;
    const int32_t nx = in->n_rows < ERR_MAX_X ? in->n_rows : ERR_MAX_X;
    j->rel[task] = -1;
    if (!quant_type_supported(w->type) || K % j->qt->block_size || nx == 0 || K != in->n) return;
    float *wf = malloc((size_t)K * sizeof(float)), *wq = malloc((size_t)K * sizeof(float));
    float *xT = transposed_rows(in, nx, s);
    uint8_t *q = malloc(quant_row_bytes(j->qt->type, K));
    if (!wf || !wq || !xT || !q) {
        free(wf), free(wq), free(xT), free(q);
        return;
    }
    double e2 = 0, y2 = 0;
    const uint8_t *base = w->data;
    for (int64_t r = 0; r < w->n_rows; r++) {
        quant_dequantize_row_ref(w->type, base + (size_t)r * w->row_bytes, wf, K);
        j->qt->quantize_row(wf, q, K);
        j->qt->dequantize_row(q, wq, K);
        float y[ERR_MAX_X] = {0}, e[ERR_MAX_X] = {0};
        for (int64_t k = 0; k < K; k++) {
            const float wk = wf[k], dk = wq[k] - wf[k], *xk = xT + (size_t)k * (size_t)nx;
            for (int32_t t = 0; t < nx; t++) y[t] += wk * xk[t], e[t] += dk * xk[t];
        }
        for (int32_t t = 0; t < nx; t++) e2 += (double)e[t] * e[t], y2 += (double)y[t] * y[t];
    }
    j->rel[task] = y2 > 0 ? sqrt(e2 / y2) : 0.0;
    free(wf), free(wq), free(xT), free(q);
}

int model_quant_errors(const model *m, const model_calib *c, ggml_type qtype, int n_threads,
                       double *rel) {
    const quant_traits *qt = quant_traits_of(qtype);
    if (!qt || !qt->quantize_row || !c->in || c->n_layers != m->hp.n_layers) return IFD_ERR_INVALID;
    tp *pool = tp_create(n_threads);
    if (!pool) return IFD_ERR_NOMEM;
    err_job j = {.m = m, .c = c, .qt = qt, .rel = rel};
    tp_run(pool, err_task, &j, (int32_t)(m->hp.n_layers * QM_N));
    tp_destroy(pool);
    return IFD_OK;
}
