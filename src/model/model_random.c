/* model_random.c — a model built in memory from a shape preset, with seeded
 * pseudo-random weights: `--random-weights SHAPE --dtype TYPE` (benchmarks on a host
 * that multi-GB files cannot reach, and tests). Its output is noise.
 *
 * Every matrix row is a pure function of (seed, tensor id, row): rows are filled by a
 * pool of threads in any order with the same result. Values are scaled like an init,
 * so activations stay finite through every layer: each weight has mean ~0 and
 * standard deviation 1/sqrt(n_cols) (uniform for the float types; random quants with
 * a matching scale for the block types, written directly, never quantized from f32),
 * norms are 1.0 and biases small. The vocabulary is not made here (the model room does
 * not use the tokenizer): model_load_random (tokenizer room) attaches a synthetic one.
 *
 * Runs once at startup on the loading thread (plus its own worker pool). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../util/common.h"
#include "../util/threadpool.h"
#include "model.h"
#include "quant.h"

typedef struct random_shape {
    const char *name;
    model_arch arch;
    uint32_t n_layers, dim, n_heads, n_kv_heads, ffn_dim, n_vocab, n_ctx;
    float rope_base, rms_eps;
    bool tied;
} random_shape;

static const random_shape SHAPES[] = {
    {"tiny", ARCH_LLAMA, 4, 256, 4, 2, 768, 512, 2048, 10000.0f, 1e-5f, false},
    {"llama3-8b", ARCH_LLAMA, 32, 4096, 32, 8, 14336, 128256, 8192, 500000.0f, 1e-5f, false},
    {"qwen2.5-1.5b", ARCH_QWEN2, 28, 1536, 12, 2, 8960, 151936, 32768, 1000000.0f, 1e-6f, true},
};

static const struct {
    const char *name;
    ggml_type type;
} DTYPES[] = {
    {"f32", GGML_TYPE_F32},   {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
    {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_k", GGML_TYPE_Q4_K},
    {"q6_k", GGML_TYPE_Q6_K},
};

const char *model_random_shapes(void) { return "tiny, llama3-8b, qwen2.5-1.5b"; }
const char *model_random_dtypes(void) { return "f32, f16, bf16, q8_0, q4_0, q4_k, q6_k"; }

int model_random_dtype(const char *name, ggml_type *out) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(DTYPES); i++)
        if (!strcmp(name, DTYPES[i].name)) {
            *out = DTYPES[i].type;
            return IFD_OK;
        }
    return IFD_ERR_INVALID;
}

/* ---- the generator: counter-based, so any row can be made alone ---------------------- */

static inline uint64_t mix64(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct row_rng {
    uint64_t s;
} row_rng;

static row_rng rng_for(uint64_t seed, uint32_t tensor, int64_t row) {
    return (row_rng){mix64(seed ^ mix64(((uint64_t)tensor << 40) ^ (uint64_t)row ^ 0x5EEDull))};
}
static inline uint64_t rng_u64(row_rng *r) {
    r->s += 0x9E3779B97F4A7C15ull;
    return mix64(r->s);
}

/* Uniform in [-1, 1) from 32 random bits. */
static inline float unit_f(uint32_t u) { return (float)(int32_t)u * (1.0f / 2147483648.0f); }

/* Standard deviations of the stored integer values of the block types (uniform). */
#define SD_U8 73.9f  /* int8, [-128, 127] */
#define SD_U4 4.61f  /* 4 bits minus the zero point */
#define SD_U6 18.47f /* 6 bits minus 32 */

static void fill_bytes(row_rng *r, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t u = rng_u64(r);
        memcpy(p + i, &u, IFD_MIN((size_t)8, n - i));
    }
}

/* One row of n_cols weights of type t with standard deviation sd into row. */
static void gen_row(ggml_type t, float sd, row_rng *r, uint8_t *row, int64_t n) {
    const float a = sd * 1.7320508f; /* uniform on [-a, a] has sd a / sqrt(3) */
    switch (t) {
    case GGML_TYPE_F32:
        for (int64_t i = 0; i < n; i += 2) { /* n is even (a multiple of 32) */
            const uint64_t u = rng_u64(r);
            const float v[2] = {a * unit_f((uint32_t)u), a * unit_f((uint32_t)(u >> 32))};
            memcpy(row + 4 * i, v, sizeof v);
        }
        return;
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16: {
        /* 16 random bits a value are plenty for an 8- or 11-bit mantissa */
        const float a16 = a * (1.0f / 32768.0f);
        for (int64_t i = 0; i < n; i += 4) { /* n is a multiple of 4 */
            const uint64_t u = rng_u64(r);
            uint16_t h[4];
            for (int k = 0; k < 4; k++) {
                const float v = a16 * (float)(int16_t)(u >> (16 * k));
                if (t == GGML_TYPE_F16) {
                    h[k] = ifd_f32_to_fp16(v);
                } else { /* truncated to bf16: the top half of the f32 */
                    uint32_t bits;
                    memcpy(&bits, &v, 4);
                    h[k] = (uint16_t)(bits >> 16);
                }
            }
            memcpy(row + 2 * i, h, sizeof h);
        }
        return;
    }
    case GGML_TYPE_Q8_0: {
        const ifd_fp16 d = ifd_f32_to_fp16(sd / SD_U8);
        for (int64_t b = 0; b < n / QK8_0; b++) {
            block_q8_0 blk;
            blk.d = d;
            fill_bytes(r, (uint8_t *)blk.qs, sizeof blk.qs);
            memcpy(row + (size_t)b * sizeof blk, &blk, sizeof blk);
        }
        return;
    }
    case GGML_TYPE_Q4_0: {
        /* q - 8 has mean -0.5: the scale's sign alternates per block so rows average 0 */
        const ifd_fp16 d[2] = {ifd_f32_to_fp16(sd / SD_U4), ifd_f32_to_fp16(-sd / SD_U4)};
        for (int64_t b = 0; b < n / QK4_0; b++) {
            block_q4_0 blk;
            blk.d = d[b & 1];
            fill_bytes(r, blk.qs, sizeof blk.qs);
            memcpy(row + (size_t)b * sizeof blk, &blk, sizeof blk);
        }
        return;
    }
    case GGML_TYPE_Q4_K:
        /* w = d*sc*q - dmin*m; sc = m in [16, 31] and dmin = 7.5 d give w = d*sc*(q - 7.5):
         * mean 0, sd d * sc * 4.61 (sc averages 23.5) */
        for (int64_t b = 0; b < n / QK_K; b++) {
            block_q4_K blk;
            const float d = sd / (SD_U4 * 23.5f);
            blk.d = ifd_f32_to_fp16(d);
            blk.dmin = ifd_f32_to_fp16(7.5f * d);
            uint8_t sc[8];
            const uint64_t u = rng_u64(r);
            for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(16 + ((u >> (4 * j)) & 15));
            memset(blk.scales, 0, sizeof blk.scales);
            for (int j = 0; j < 8; j++) { /* the inverse of quant_q4_K_scale_min, with m = sc */
                if (j < 4) {
                    blk.scales[j] = sc[j];
                    blk.scales[j + 4] = sc[j];
                } else {
                    blk.scales[j + 4] = (uint8_t)((sc[j] & 0xF) | ((sc[j] & 0xF) << 4));
                    blk.scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
                    blk.scales[j] |= (uint8_t)((sc[j] >> 4) << 6);
                }
            }
            fill_bytes(r, blk.qs, sizeof blk.qs);
            memcpy(row + (size_t)b * sizeof blk, &blk, sizeof blk);
        }
        return;
    case GGML_TYPE_Q6_K:
        /* w = d * scale * (q - 32), scale = +-[4, 7] (mean magnitude 5.5) */
        for (int64_t b = 0; b < n / QK_K; b++) {
            block_q6_K blk;
            blk.d = ifd_f32_to_fp16(sd / (SD_U6 * 5.5f));
            fill_bytes(r, blk.ql, sizeof blk.ql);
            fill_bytes(r, blk.qh, sizeof blk.qh);
            const uint64_t u = rng_u64(r);
            for (int j = 0; j < QK_K / 16; j++) {
                const int v = 4 + (int)((u >> (3 * j)) & 3);
                blk.scales[j] = (int8_t)((u >> (48 + j)) & 1 ? -v : v);
            }
            memcpy(row + (size_t)b * sizeof blk, &blk, sizeof blk);
        }
        return;
    default:
        IFD_ASSERT(!"model_random: unsupported type");
    }
}

/* ---- building the model ---------------------------------------------------------------- */

typedef struct mat_job {
    wmat *w;
    uint32_t id; /* tensor id: the generator's key */
} mat_job;

typedef struct unit {
    int32_t mat;
    int64_t r0, r1;
} unit;

typedef struct gen_ctx {
    const mat_job *mats;
    const unit *units;
    uint64_t seed;
} gen_ctx;

static void gen_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    (void)n_tasks;
    (void)thread;
    const gen_ctx *g = p;
    const unit *u = &g->units[task];
    const mat_job *mj = &g->mats[u->mat];
    const wmat *w = mj->w;
    const float sd = 1.0f / sqrtf((float)w->n_cols);
    for (int64_t r = u->r0; r < u->r1; r++) {
        row_rng rng = rng_for(g->seed, mj->id, r);
        gen_row(w->type, sd, &rng, (uint8_t *)w->data + (size_t)r * w->row_bytes, w->n_cols);
    }
}

/* Tensor ids: 0 embedding, 1 output, 2 output norm; layer l: 16 + 16 l + k. */
enum { T_WQ, T_WK, T_WV, T_WO, T_GATE, T_UP, T_DOWN, T_BQ, T_BK, T_BV };

static float *vec_take(model *m, size_t *used, size_t n) {
    float *p = m->vec_pool + *used;
    *used += n;
    return p;
}

static void vec_fill(float *v, size_t n, float value) {
    for (size_t i = 0; i < n; i++) v[i] = value;
}

/* A bias: uniform with sd 0.02 (small next to the unit-scale projections). */
static void vec_bias(float *v, size_t n, uint64_t seed, uint32_t id) {
    row_rng r = rng_for(seed, id, 0);
    for (size_t i = 0; i < n; i++) v[i] = 0.02f * 1.7320508f * unit_f((uint32_t)rng_u64(&r));
}

int model_create_random(model **out, const char *shape, ggml_type type, uint64_t seed,
                        int n_threads, char *err, size_t err_bytes) {
    *out = NULL;
    const random_shape *sh = NULL;
    for (size_t i = 0; i < IFD_ARRAY_LEN(SHAPES); i++)
        if (!strcmp(shape, SHAPES[i].name)) sh = &SHAPES[i];
    if (!sh)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "--random-weights '%s': unknown shape (presets: %s)", shape,
                        model_random_shapes());
    const char *tname = NULL;
    for (size_t i = 0; i < IFD_ARRAY_LEN(DTYPES); i++)
        if (DTYPES[i].type == type) tname = DTYPES[i].name;
    const quant_traits *qt = quant_traits_of(type);
    if (!tname || !qt)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "--dtype: not one of %s",
                        model_random_dtypes());
    model *m = calloc(1, sizeof *m);
    if (!m) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "model: out of memory");
    model_hparams *hp = &m->hp;
    hp->arch = sh->arch;
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", model_arch_name(sh->arch));
    hp->n_vocab = sh->n_vocab;
    hp->n_ctx_train = sh->n_ctx;
    hp->dim = sh->dim;
    hp->n_layers = sh->n_layers;
    hp->n_heads = sh->n_heads;
    hp->n_kv_heads = sh->n_kv_heads;
    hp->head_dim = sh->dim / sh->n_heads;
    hp->ffn_dim = sh->ffn_dim;
    hp->n_rot = hp->head_dim;
    hp->rms_eps = sh->rms_eps;
    hp->rope_base = sh->rope_base;
    hp->rope_freq_scale = 1.0f;
    hp->rope_layout = sh->arch == ARCH_LLAMA ? ROPE_NORM : ROPE_NEOX;
    hp->tied_embeddings = sh->tied;
    hp->has_qkv_bias = sh->arch == ARCH_QWEN2;
    hp->has_qk_norm = sh->arch == ARCH_QWEN3;
    snprintf(m->name, sizeof m->name, "random-%s-%s", sh->name, tname);

    const int64_t dim = hp->dim, q_dim = (int64_t)hp->n_heads * hp->head_dim,
                  kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim, ffn = hp->ffn_dim;
    const uint32_t L = hp->n_layers;
    /* 1-D tensors (f32): norms, biases */
    const size_t per_layer = 2 * (size_t)dim + (hp->has_qkv_bias ? (size_t)(q_dim + 2 * kv_dim) : 0);
    m->vec_pool = malloc((per_layer * L + (size_t)dim) * sizeof(float));
    m->layers = calloc(L, sizeof(layer_weights));
    const size_t n_mats = 2 + 7 * (size_t)L;
    mat_job *mats = calloc(n_mats, sizeof *mats);
    unit *units = NULL;
    tp *pool = NULL;
    int rc = IFD_OK;
    if (!m->vec_pool || !m->layers || !mats) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "model: out of memory");
        goto done;
    }
    size_t nm = 0;
#define MAT(wp, rows, cols, tid)                                                     \
    do {                                                                             \
        (wp)->type = type;                                                           \
        (wp)->n_rows = (rows);                                                       \
        (wp)->n_cols = (cols);                                                       \
        (wp)->row_bytes = quant_row_bytes(type, (cols));                             \
        mats[nm++] = (mat_job){.w = (wp), .id = (tid)};                              \
    } while (0)
    MAT(&m->tok_embd, (int64_t)hp->n_vocab, dim, 0);
    if (!sh->tied) MAT(&m->output, (int64_t)hp->n_vocab, dim, 1);
    for (uint32_t l = 0; l < L; l++) {
        layer_weights *w = &m->layers[l];
        const uint32_t base = 16 + 16 * l;
        MAT(&w->wq, q_dim, dim, base + T_WQ);
        MAT(&w->wk, kv_dim, dim, base + T_WK);
        MAT(&w->wv, kv_dim, dim, base + T_WV);
        MAT(&w->wo, dim, q_dim, base + T_WO);
        MAT(&w->w_gate, ffn, dim, base + T_GATE);
        MAT(&w->w_up, ffn, dim, base + T_UP);
        MAT(&w->w_down, dim, ffn, base + T_DOWN);
    }
#undef MAT
    /* one allocation for every matrix, each 64-byte aligned */
    size_t total = 0;
    for (size_t i = 0; i < nm; i++) {
        size_t bytes;
        if (!ifd_mul_ok(mats[i].w->row_bytes, (size_t)mats[i].w->n_rows, &bytes) ||
            !ifd_add_ok(total, (bytes + 63) & ~(size_t)63, &total)) {
            rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "model: weights too large");
            goto done;
        }
    }
    void *mem = NULL;
    /* 2 MiB aligned, and transparent huge pages asked for: page faults of a 16 GB
     * allocation would otherwise cost as much as filling it */
    if (posix_memalign(&mem, (size_t)1 << 21, total ? total : 64)) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM,
                      "model: cannot allocate %.2f GiB for the random %s weights",
                      (double)total / (1 << 30), tname);
        goto done;
    }
    if (total >= ((size_t)1 << 21)) (void)madvise(mem, total & ~(((size_t)1 << 21) - 1), MADV_HUGEPAGE);
    m->synth_weights = mem;
    m->weight_bytes = total;
    size_t off = 0;
    for (size_t i = 0; i < nm; i++) {
        mats[i].w->data = (uint8_t *)mem + off;
        off += (mats[i].w->row_bytes * (size_t)mats[i].w->n_rows + 63) & ~(size_t)63;
    }
    if (sh->tied) m->output = m->tok_embd;
    /* work units of ~1 MiB of rows: enough for any thread count, cheap to hand out */
    size_t n_units = 0;
    for (size_t i = 0; i < nm; i++) {
        const int64_t rows_per = IFD_MAX((int64_t)1, (int64_t)((1u << 20) / mats[i].w->row_bytes));
        n_units += (size_t)((mats[i].w->n_rows + rows_per - 1) / rows_per);
    }
    units = malloc(n_units * sizeof *units);
    if (!units || n_units > INT32_MAX) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "model: out of memory");
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < nm; i++) {
        const int64_t rows_per = IFD_MAX((int64_t)1, (int64_t)((1u << 20) / mats[i].w->row_bytes));
        for (int64_t r = 0; r < mats[i].w->n_rows; r += rows_per)
            units[k++] = (unit){.mat = (int32_t)i, .r0 = r, .r1 = IFD_MIN(r + rows_per, mats[i].w->n_rows)};
    }
    pool = tp_create(n_threads); /* NULL: tp_run runs the tasks inline */
    gen_ctx g = {.mats = mats, .units = units, .seed = seed};
    tp_run(pool, gen_task, &g, (int32_t)n_units);

    size_t used = 0;
    m->output_norm = vec_take(m, &used, (size_t)dim);
    vec_fill((float *)m->output_norm, (size_t)dim, 1.0f);
    for (uint32_t l = 0; l < L; l++) {
        layer_weights *w = &m->layers[l];
        const uint32_t base = 16 + 16 * l;
        float *v = vec_take(m, &used, (size_t)dim);
        vec_fill(v, (size_t)dim, 1.0f);
        w->attn_norm = v;
        v = vec_take(m, &used, (size_t)dim);
        vec_fill(v, (size_t)dim, 1.0f);
        w->ffn_norm = v;
        if (hp->has_qkv_bias) {
            v = vec_take(m, &used, (size_t)q_dim);
            vec_bias(v, (size_t)q_dim, seed, base + T_BQ);
            w->bq = v;
            v = vec_take(m, &used, (size_t)kv_dim);
            vec_bias(v, (size_t)kv_dim, seed, base + T_BK);
            w->bk = v;
            v = vec_take(m, &used, (size_t)kv_dim);
            vec_bias(v, (size_t)kv_dim, seed, base + T_BV);
            w->bv = v;
        }
    }
done:
    tp_destroy(pool);
    free(units);
    free(mats);
    if (rc) {
        model_destroy(m);
        return rc;
    }
    *out = m;
    return IFD_OK;
}
