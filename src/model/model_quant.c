/* model_quant.c — model_quantize and friends (model_quant.h): the linear weights of a
 * loaded model converted in memory, row by row, on a thread pool.
 *
 * Each work unit is a range of rows of one matrix; a row is dequantized to f32 (F16 /
 * BF16, or another quantized type with requantize; F32 rows are read as they are) and
 * quantized into its place in one buffer holding every converted matrix, so the bytes
 * depend only on the weights, never on the thread count. What it does not: choose
 * per-tensor types (one type for the whole selection), or touch embeddings and norms.
 * Loading thread only. */
#include "model_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../util/common.h"
#include "../util/cpu_features.h"
#include "../util/threadpool.h"
#include "quant.h"

/* The matrices of one model in a fixed order: token_embd, output (NULL when tied),
 * then per layer q k v o gate up down. Returns the count. */
static size_t list_mats(model *m, wmat **out, uint32_t *layer_of) {
    size_t n = 0;
    out[n] = &m->tok_embd, layer_of[n++] = UINT32_MAX;
    if (!m->hp.tied_embeddings) out[n] = &m->output, layer_of[n++] = UINT32_MAX;
    for (uint32_t l = 0; l < m->hp.n_layers; l++) {
        layer_weights *w = &m->layers[l];
        wmat *ws[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (size_t i = 0; i < IFD_ARRAY_LEN(ws); i++) out[n] = ws[i], layer_of[n++] = l;
    }
    return n;
}

static size_t n_mats_of(const model *m) { return 2 + 7 * (size_t)m->hp.n_layers; }

void model_weight_bytes_by_type(const model *m, size_t out[GGML_TYPE_COUNT_]) {
    memset(out, 0, GGML_TYPE_COUNT_ * sizeof out[0]);
    const size_t cap = n_mats_of(m);
    wmat **mats = malloc(cap * sizeof *mats);
    uint32_t *lay = malloc(cap * sizeof *lay);
    if (mats && lay) {
        const size_t n = list_mats((model *)m, mats, lay); /* read only */
        for (size_t i = 0; i < n; i++)
            if ((unsigned)mats[i]->type < GGML_TYPE_COUNT_)
                out[mats[i]->type] += mats[i]->row_bytes * (size_t)mats[i]->n_rows;
    }
    free(mats);
    free(lay);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* the type holding the most bytes of v not yet listed (done[]), or -1 */
static int next_biggest(const size_t *v, bool *done) {
    int best = -1;
    for (int t = 0; t < GGML_TYPE_COUNT_; t++)
        if (v[t] && !done[t] && (best < 0 || v[t] > v[best])) best = t;
    if (best >= 0) done[best] = true;
    return best;
}

static const char *tname(int t) {
    const ggml_type_info *ti = ggml_type_get((uint32_t)t);
    return ti && ti->name ? ti->name : "?";
}

/* snprintf at buf + k, k counting what the text would take (as snprintf does) */
#define PUT(...) (k += (size_t)snprintf(buf + (k < cap ? k : cap), k < cap ? cap - k : 0, __VA_ARGS__))

/* "TOTAL MiB (TYPE n MiB, ...)" of v, biggest type first, at buf + k; the new k */
static size_t put_types(const size_t *v, size_t total, char *buf, size_t cap, size_t k) {
    PUT("%.2f MiB (", mib(total));
    bool done[GGML_TYPE_COUNT_] = {false};
    for (int t, i = 0; (t = next_biggest(v, done)) >= 0; i++)
        PUT("%s%s %.2f MiB", i ? ", " : "", tname(t), mib(v[t]));
    PUT(")");
    return k;
}

void model_weight_bytes_str(const size_t *before, const size_t *after, char *buf, size_t cap) {
    size_t tb = 0, ta = 0;
    bool differ = false;
    for (int t = 0; t < GGML_TYPE_COUNT_; t++) {
        ta += after[t];
        if (before) tb += before[t], differ = differ || before[t] != after[t];
    }
    size_t k = 0;
    if (cap) buf[0] = 0;
    if (differ) {
        bool done[GGML_TYPE_COUNT_] = {false};
        const int main_t = next_biggest(before, done);
        if (next_biggest(before, done) < 0) /* one type (an F32 / F16 / BF16 file) */
            PUT("%.2f MiB %s -> ", mib(tb), main_t >= 0 ? tname(main_t) : "?");
        else /* a mixed file (requantized): every type, as after */
            k = put_types(before, tb, buf, cap, k), PUT(" -> ");
    }
    put_types(after, ta, buf, cap, k);
}
#undef PUT

int model_quant_parse_layers(const char *list, uint32_t n_layers, bool *keep, char *err,
                             size_t err_bytes) {
    memset(keep, 0, n_layers * sizeof *keep);
    if (!list) return IFD_OK;
    const char *p = list;
    while (*p) {
        char *end;
        if (*p < '0' || *p > '9') goto bad;
        unsigned long a = strtoul(p, &end, 10), b = a;
        p = end;
        if (*p == '-') {
            p++;
            if (*p < '0' || *p > '9') goto bad;
            b = strtoul(p, &end, 10);
            p = end;
            if (b < a) goto bad;
        }
        if (b >= n_layers)
            return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                            "--quantize-keep-layers '%s': layer %lu is out of range (the model "
                            "has %u layers, 0-%u)",
                            list, b, n_layers, n_layers - 1);
        for (unsigned long l = a; l <= b; l++) keep[l] = true;
        if (*p == ',') {
            p++;
            if (!*p) goto bad;
        } else if (*p) {
            goto bad;
        }
    }
    return IFD_OK;
bad:
    return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                    "--quantize-keep-layers '%s': expected layers and ranges like 0,1,21 or "
                    "0-3,21",
                    list);
}

/* ---- row kernels ------------------------------------------------------------------------ */

/* The reference quantizers (quant.c) call libm's roundf / fminf / fmaxf per element
 * (no SSE4.1 in the x86-64 baseline: they are calls, not instructions), which made a
 * 1.3B-weight conversion CPU-bound on them. These produce the same bytes (the unit test
 * test_model_quant compares them on random rows, edge values included) with the
 * rounding done inline: for v in (0, 15], roundf(v) = (int)v + (frac >= 0.5), the
 * fraction v - (int)v being exact in float. */
static inline int round_half_away(float v) { /* v in [0, 2^23) */
    const int i = (int)v;
    return i + (v - (float)i >= 0.5f);
}

/* min / max of g floats (g a multiple of 8) in 8 lanes, so the compiler can keep them
 * in vector registers: min and max do not depend on the order (no NaN in weights the
 * reference could quantize either), so the result is the reference's serial one. */
static void minmax8(const float *x, int g, float *mn_out, float *mx_out) {
    float mn[8], mx[8];
    for (int k = 0; k < 8; k++) mn[k] = mx[k] = x[k];
    for (int j = 8; j < g; j += 8)
        for (int k = 0; k < 8; k++) {
            mn[k] = x[j + k] < mn[k] ? x[j + k] : mn[k];
            mx[k] = x[j + k] > mx[k] ? x[j + k] : mx[k];
        }
    for (int k = 1; k < 8; k++) {
        mn[0] = mn[k] < mn[0] ? mn[k] : mn[0];
        mx[0] = mx[k] > mx[0] ? mx[k] : mx[0];
    }
    *mn_out = mn[0], *mx_out = mx[0];
}

static float amax8(const float *x, int g) {
    float am[8] = {0};
    for (int j = 0; j < g; j += 8)
        for (int k = 0; k < 8; k++) {
            const float a = fabsf(x[j + k]);
            am[k] = a > am[k] ? a : am[k];
        }
    for (int k = 1; k < 8; k++) am[0] = am[k] > am[0] ? am[k] : am[0];
    return am[0];
}

void model_quant_row_int4(const float *x, void *out, int64_t n, int g) {
    IFD_ASSERT((g == 32 || g == 64 || g == 128) && n % g == 0);
    uint8_t *p = out;
    for (int64_t b = 0; b < n / g; b++, x += g, p += 4 + (size_t)g / 2) {
        float mn, mx;
        minmax8(x, g, &mn, &mx);
        const ifd_fp16 h[2] = {ifd_f32_to_fp16((mx - mn) / 15.0f), ifd_f32_to_fp16(mn)};
        const float d = ifd_fp16_to_f32(h[0]), m = ifd_fp16_to_f32(h[1]);
        const float id = d ? 1.0f / d : 0.0f;
        memcpy(p, h, 4);
        for (int s = 0; s < g / 32; s++) {
            uint8_t q[32];
            for (int j = 0; j < 32; j++) {
                float v = (x[s * 32 + j] - m) * id;
                v = v > 0.0f ? v : 0.0f; /* the reference clamps after rounding: the same */
                v = v < 15.0f ? v : 15.0f;
                q[j] = (uint8_t)round_half_away(v);
            }
            for (int j = 0; j < 16; j++) p[4 + s * 16 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
        }
    }
}

void model_quant_row_int8(const float *x, void *out, int64_t n, int g) {
    IFD_ASSERT((g == 32 || g == 64 || g == 128) && n % g == 0);
    uint8_t *p = out;
    for (int64_t b = 0; b < n / g; b++, x += g, p += 2 + (size_t)g) {
        const float amax = amax8(x, g);
        const ifd_fp16 d16 = ifd_f32_to_fp16(amax / 127.0f);
        const float d = ifd_fp16_to_f32(d16), id = d ? 1.0f / d : 0.0f;
        memcpy(p, &d16, 2);
        int8_t *q = (int8_t *)(p + 2);
        for (int j = 0; j < g; j++) {
            const float v = x[j] * id;
            float a = fabsf(v);
            a = a < 127.0f ? a : 127.0f;
            const int r = round_half_away(a); /* roundf is symmetric: round |v|, then sign */
            q[j] = (int8_t)(v < 0.0f ? -r : r);
        }
    }
}

/* F16 -> f32 (exact both ways, so the same floats as the reference dequantizer) */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
__attribute__((target("avx,f16c"))) static void f16_row_f16c(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = ifd_fp16_to_f32(src[i]);
}
#define HAVE_F16C_ROW 1
#endif

static void row_to_f32(ggml_type t, const void *src, float *dst, int64_t n, bool f16c) {
#ifdef HAVE_F16C_ROW
    if (t == GGML_TYPE_F16 && f16c) {
        f16_row_f16c(src, dst, n);
        return;
    }
#endif
    (void)f16c;
    quant_dequantize_row_ref(t, src, dst, n);
}

/* ---- the conversion ------------------------------------------------------------------- */

typedef struct conv {
    wmat src;        /* the original view */
    uint8_t *dst;    /* its rows in the new buffer */
    bool convert;    /* false: copied as it is (an in-memory model's buffer is freed) */
} conv;

typedef struct unit {
    int32_t c;
    int64_t r0, r1;
} unit;

typedef struct job {
    conv *convs;
    unit *units;
    ggml_type to;
    int bits, group;           /* 8 / 4 with the group: quant_quantize_row_int8/int4 */
    void (*quantize_row)(const float *x, void *row, int64_t n); /* otherwise */
    float *scratch;            /* [n_threads][max_cols] */
    int64_t max_cols;
    bool f16c;                 /* the CPU converts F16 rows in hardware */
} job;

static void run_unit(void *ctx, int32_t task, int32_t n_tasks, int32_t thread) {
    (void)n_tasks;
    job *j = ctx;
    const unit *u = &j->units[task];
    const conv *c = &j->convs[u->c];
    const size_t dst_row = quant_row_bytes(j->to, c->src.n_cols);
    float *x = j->scratch + (size_t)thread * (size_t)j->max_cols;
    for (int64_t r = u->r0; r < u->r1; r++) {
        const uint8_t *src = (const uint8_t *)c->src.data + (size_t)r * c->src.row_bytes;
        if (!c->convert) {
            memcpy(c->dst + (size_t)r * c->src.row_bytes, src, c->src.row_bytes);
            continue;
        }
        const float *row = x;
        if (c->src.type == GGML_TYPE_F32)
            row = (const float *)src; /* 4-byte aligned: GGUF data offsets are aligned */
        else
            row_to_f32(c->src.type, src, x, c->src.n_cols, j->f16c);
        uint8_t *out = c->dst + (size_t)r * dst_row;
        if (j->bits == 8)
            model_quant_row_int8(row, out, c->src.n_cols, j->group);
        else if (j->bits == 4)
            model_quant_row_int4(row, out, c->src.n_cols, j->group);
        else
            j->quantize_row(row, out, c->src.n_cols);
    }
}

static bool is_float_type(ggml_type t) {
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

/* Drop the resident pages of a mapped range (whole pages inside it only: neighbours may
 * share the edge pages). The mapping is private and read-only, backed by the file. */
static size_t release_pages(const gguf_file *f, const void *p, size_t n) {
    const uint8_t *base = f->map, *a = p;
    if (!base || a < base || a + n > base + f->map_bytes) return 0;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)a + pg - 1) / pg * pg, hi = ((uintptr_t)a + n) / pg * pg;
    if (hi <= lo) return 0;
    return madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0 ? hi - lo : 0;
}

static int convert(model *m, const model_quant_opts *o, ggml_type to, int bits, char *err,
                   size_t err_bytes) {
    const quant_traits *qt = quant_traits_of(to);
    if (!qt)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "quantize: type %s cannot be computed",
                        tname(to));
    if (!bits && !qt->quantize_row)
        return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED,
                        "quantize: %s has no quantizer in this build", qt->name);
    if (m->quant_weights || m->n_quantized)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "quantize: the model is already quantized");
    const size_t cap = n_mats_of(m);
    const bool in_memory = m->synth_weights != NULL;
    wmat **mats = malloc(cap * sizeof *mats);
    uint32_t *lay = malloc(cap * sizeof *lay);
    conv *convs = calloc(cap, sizeof *convs);
    unit *units = NULL;
    float *scratch = NULL;
    uint8_t *mem = NULL;
    tp *pool = NULL;
    int rc = IFD_OK;
    if (!mats || !lay || !convs) goto nomem;
    const size_t n = list_mats(m, mats, lay);
    size_t total = 0, n_units = 0;
    int64_t max_cols = 1;
    uint32_t n_conv = 0, n_skip = 0;
    for (size_t i = 0; i < n; i++) {
        const wmat *w = mats[i];
        const bool linear = lay[i] != UINT32_MAX || (w == &m->output && o->lm_head);
        const bool kept = lay[i] != UINT32_MAX && o->keep && o->keep[lay[i]];
        bool cv = false;
        if (linear && !kept) {
            const quant_traits *st = quant_traits_of(w->type);
            const bool src_ok = is_float_type(w->type) ||
                                (o->requantize && w->type != to && st && st->dequantize_row);
            cv = src_ok && w->n_cols % qt->block_size == 0;
            if (!cv) n_skip++;
        }
        /* an in-memory model's matrices are all copied out, so its buffer can go */
        if (!cv && !in_memory) continue;
        convs[i] = (conv){.src = *w, .convert = cv};
        const size_t bytes = (cv ? quant_row_bytes(to, w->n_cols) : w->row_bytes) * (size_t)w->n_rows;
        total += (bytes + 63) & ~(size_t)63;
        if (w->n_cols > max_cols) max_cols = w->n_cols;
        const size_t rb = cv ? quant_row_bytes(to, w->n_cols) : w->row_bytes;
        const int64_t per = IFD_MAX((int64_t)1, (int64_t)((256u << 10) / (rb ? rb : 1)));
        n_units += (size_t)((w->n_rows + per - 1) / per);
        n_conv += cv;
    }
    m->n_quant_skipped = n_skip;
    if (n_conv == 0) { /* nothing to do: the model stays as it is */
        m->n_quantized = 0;
        goto done;
    }
    if (posix_memalign((void **)&mem, (size_t)1 << 21, total ? total : 64)) {
        mem = NULL;
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM,
                      "quantize: cannot allocate %.2f MiB for the quantized weights", mib(total));
        goto done;
    }
    if (total >= ((size_t)1 << 21)) (void)madvise(mem, total & ~(((size_t)1 << 21) - 1), MADV_HUGEPAGE);
    pool = tp_create(o->n_threads); /* NULL: tp_run runs the units inline */
    const int nt = pool ? tp_n_threads(pool) : 1;
    units = malloc((n_units ? n_units : 1) * sizeof *units);
    scratch = malloc((size_t)nt * (size_t)max_cols * sizeof(float));
    if (!units || !scratch || n_units > INT32_MAX) goto nomem;
    size_t off = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        conv *c = &convs[i];
        if (!c->src.data) continue;
        c->dst = mem + off;
        const size_t rb = c->convert ? quant_row_bytes(to, c->src.n_cols) : c->src.row_bytes;
        off += (rb * (size_t)c->src.n_rows + 63) & ~(size_t)63;
        const int64_t per = IFD_MAX((int64_t)1, (int64_t)((256u << 10) / (rb ? rb : 1)));
        for (int64_t r = 0; r < c->src.n_rows; r += per)
            units[k++] = (unit){.c = (int32_t)i, .r0 = r, .r1 = IFD_MIN(r + per, c->src.n_rows)};
    }
    job j = {.convs = convs, .units = units, .to = to, .bits = bits, .group = (int)qt->block_size,
             .quantize_row = qt->quantize_row, .scratch = scratch, .max_cols = max_cols,
             .f16c = cpu_features_get()->f16c};
    tp_run(pool, run_unit, &j, (int32_t)k);

    /* rewrite the views; then let the originals go */
    for (size_t i = 0; i < n; i++) {
        const conv *c = &convs[i];
        if (!c->src.data) continue;
        wmat *w = mats[i];
        w->data = c->dst;
        if (c->convert) {
            w->type = to;
            w->row_bytes = quant_row_bytes(to, w->n_cols);
            if (!in_memory) release_pages(&m->gguf, c->src.data, c->src.row_bytes * (size_t)c->src.n_rows);
        }
    }
    if (m->hp.tied_embeddings) m->output = m->tok_embd;
    if (in_memory) {
        free(m->synth_weights);
        m->synth_weights = NULL;
    }
    m->quant_weights = mem;
    mem = NULL;
    m->quant_type = to;
    m->n_quantized = n_conv;
    goto done;
nomem:
    rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "quantize: out of memory");
done:
    tp_destroy(pool);
    free(mem);
    free(scratch);
    free(units);
    free(convs);
    free(lay);
    free(mats);
    return rc;
}

int model_quantize(model *m, const model_quant_opts *o, char *err, size_t err_bytes) {
    if (o->bits == 0) return IFD_OK;
    if (o->bits != 8 && o->bits != 4)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "--quantize: %d bits is not supported "
                        "(int8 or int4)", o->bits);
    const int g = o->group_size ? o->group_size : 128;
    const ggml_type t = quant_int_type(o->bits, g);
    if (t == GGML_TYPE_COUNT_)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "--quantize-group-size %d: expected 32, 64 or 128", o->group_size);
    return convert(m, o, t, o->bits, err, err_bytes);
}

int model_quantize_to(model *m, const model_quant_opts *o, ggml_type t, char *err,
                      size_t err_bytes) {
    return convert(m, o, t, 0, err, err_bytes);
}
