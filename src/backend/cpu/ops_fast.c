/* ops_fast.c — the fast CPU ops: picks the kernel table for the dispatch level, owns
 * the worker pool and scratch, and splits each op into tasks.
 *
 * Work split (deterministic): a matmul is cut into row blocks (tasks) of a fixed size
 * that depends only on the shapes and the thread count; each task walks the tokens in
 * chunks that keep the prepared activations in L2, and the kernel tiles rows x
 * tokens inside. Every output element is computed by one kernel call with a fixed
 * reduction order, so results never depend on timing, on which thread ran a task, or
 * on the other rows of the batch.
 *
 * One thread drives a context (the engine's); the pool's workers only run tasks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../model/quant.h"
#include "../../util/common.h"
#include "../../util/threadpool.h"
#include "kern.h"
#include "ops.h"

/* One prepared matrix: the original's identity and its packed copy. */
typedef struct packed_w {
    const void *data;
    ggml_type type;
    int64_t n_rows, n_cols;
    uint8_t *pk;
} packed_w;

struct ops_ctx {
    tp *pool;
    bool borrowed_pool; /* ops_ctx_create_shared: not ours to destroy */
    int n_threads;
    const kern_table *k;
    /* scratch */
    uint8_t *act;       /* prepared activations: max_tokens rows */
    size_t act_bytes;
    float *attn_scr;    /* n_threads * attn_scr_floats */
    size_t attn_scr_floats;
    /* prepared (packed) weights: open-addressing table keyed by the original data */
    packed_w *pw;
    int32_t pw_cap, pw_n;
    size_t pw_bytes;
};

/* Prepared activations of one token chunk should stay in L2 while a row block walks
 * over them (this machine: 1-2 MiB of L2 per core). */
#define ACT_CHUNK_BYTES (768u << 10)
/* Chunks are a multiple of every micro-kernel token tile (kern_gemm.nt: 3, 4, 6). */
#define TOKEN_TILE_LCM 12
/* Row blocks per thread: enough for load balance, few enough to amortize dispatch. */
#define TASKS_PER_THREAD 8

ops_ctx *ops_ctx_create(int n_threads, int level) {
    if (level < 0) level = (int)cpu_level_default();
    const kern_table *k = kern_for_level((cpu_level)level);
    if (!k) return NULL;
    ops_ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->k = k;
    c->pool = tp_create(n_threads);
    if (!c->pool) {
        free(c);
        return NULL;
    }
    c->n_threads = tp_n_threads(c->pool);
    return c;
}

ops_ctx *ops_ctx_create_shared(const ops_ctx *owner, int level) {
    if (level < 0) level = (int)cpu_level_default();
    const kern_table *k = kern_for_level((cpu_level)level);
    if (!k || !owner) return NULL;
    ops_ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->k = k;
    c->pool = owner->pool;
    c->borrowed_pool = true;
    c->n_threads = owner->n_threads;
    return c;
}

void ops_ctx_drop_weights(ops_ctx *c) {
    for (int32_t i = 0; i < c->pw_cap; i++) free(c->pw[i].pk);
    free(c->pw);
    c->pw = NULL;
    c->pw_cap = c->pw_n = 0;
    c->pw_bytes = 0;
}

static uint32_t pw_hash(const void *p) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

/* The packed copy of w, or NULL. */
static const uint8_t *pw_find(const ops_ctx *c, const wmat *w) {
    if (!c->pw_n) return NULL;
    for (uint32_t i = pw_hash(w->data) & (uint32_t)(c->pw_cap - 1);; i = (i + 1) & (uint32_t)(c->pw_cap - 1)) {
        const packed_w *e = &c->pw[i];
        if (!e->data) return NULL;
        if (e->data == w->data && e->type == w->type && e->n_rows == w->n_rows &&
            e->n_cols == w->n_cols)
            return e->pk;
    }
}

typedef struct pack_job {
    const kern_table *k;
    const wmat *w;
    uint8_t *dst;
    int64_t n_groups;
} pack_job;

static void pack_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const pack_job *j = p;
    (void)thread;
    kern_pack_weights(j->k, j->w, j->dst, j->n_groups * task / n_tasks,
                      j->n_groups * (task + 1) / n_tasks);
}

int ops_ctx_prepare_weights(ops_ctx *c, const wmat *w) {
    const size_t bytes = w->data ? kern_packed_bytes(c->k, w) : 0;
    if (bytes == 0 || pw_find(c, w)) return IFD_OK;
    if ((c->pw_n + 1) * 2 > c->pw_cap) { /* grow (and rehash) at half load */
        const int32_t cap = c->pw_cap ? c->pw_cap * 2 : 64;
        packed_w *n = calloc((size_t)cap, sizeof *n);
        if (!n) return IFD_ERR_NOMEM;
        for (int32_t i = 0; i < c->pw_cap; i++) {
            if (!c->pw[i].data) continue;
            uint32_t j = pw_hash(c->pw[i].data) & (uint32_t)(cap - 1);
            while (n[j].data) j = (j + 1) & (uint32_t)(cap - 1);
            n[j] = c->pw[i];
        }
        free(c->pw);
        c->pw = n;
        c->pw_cap = cap;
    }
    void *pk = NULL;
    if (posix_memalign(&pk, 64, bytes)) return IFD_ERR_NOMEM;
    pack_job pj = {.k = c->k, .w = w, .dst = pk,
                   .n_groups = w->n_rows / kern_packed_rows(c->k, w)};
    tp_run(c->pool, pack_task, &pj, (int32_t)IFD_MIN(pj.n_groups, (int64_t)c->n_threads * 4));
    uint32_t j = pw_hash(w->data) & (uint32_t)(c->pw_cap - 1);
    while (c->pw[j].data) j = (j + 1) & (uint32_t)(c->pw_cap - 1);
    c->pw[j] = (packed_w){.data = w->data, .type = w->type, .n_rows = w->n_rows,
                          .n_cols = w->n_cols, .pk = pk};
    c->pw_n++;
    c->pw_bytes += bytes;
    return IFD_OK;
}

size_t ops_ctx_prepared_bytes(const ops_ctx *c) {
    return c->pw_bytes;
}

void ops_ctx_destroy(ops_ctx *c) {
    if (!c) return;
    ops_ctx_drop_weights(c);
    if (!c->borrowed_pool) tp_destroy(c->pool);
    free(c->act);
    free(c->attn_scr);
    free(c);
}

int ops_ctx_level(const ops_ctx *c) {
    return (int)c->k->level;
}
int ops_ctx_n_threads(const ops_ctx *c) {
    return c->n_threads;
}
struct tp *ops_ctx_pool(ops_ctx *c) {
    return c->pool;
}

static int grow(void **p, size_t *have, size_t want) {
    if (want <= *have) return IFD_OK;
    void *n = NULL;
    if (posix_memalign(&n, 64, want ? want : 64)) return IFD_ERR_NOMEM;
    free(*p);
    *p = n;
    *have = want;
    return IFD_OK;
}

int ops_ctx_reserve(ops_ctx *c, int32_t max_tokens, int64_t max_cols, int32_t max_keys,
                    int32_t max_group) {
    const int64_t cols = (max_cols + 255) / 256 * 256;
    size_t row = 0;
    for (int t = 0; t < GGML_TYPE_COUNT_; t++)
        if (quant_traits_of((ggml_type)t)) row = IFD_MAX(row, kern_act_row_bytes(c->k, (ggml_type)t, cols));
    size_t act = 0, a = 0, have;
    if (!ifd_mul_ok(row, (size_t)IFD_MAX(max_tokens, 1), &act)) return IFD_ERR_NOMEM;
    const size_t rows = (size_t)KERN_ATTN_QT * (size_t)IFD_MAX(max_group, 1);
    const size_t a_floats = (size_t)IFD_MAX(max_keys, 1) * (rows + 2) + rows;
    if (!ifd_mul_ok(a_floats * sizeof(float), (size_t)c->n_threads, &a)) return IFD_ERR_NOMEM;
    if (grow((void **)&c->act, &c->act_bytes, act)) return IFD_ERR_NOMEM;
    have = c->attn_scr_floats * sizeof(float) * (size_t)c->n_threads;
    if (a_floats > c->attn_scr_floats) {
        if (grow((void **)&c->attn_scr, &have, a)) return IFD_ERR_NOMEM;
        c->attn_scr_floats = a_floats;
    }
    return IFD_OK;
}

/* ---- matmul ---------------------------------------------------------------------------- */

typedef struct prep_job {
    const kern_table *k;
    ggml_type type;
    const float *x;
    int64_t K;
    uint8_t *act;
    size_t stride;
    int32_t n_tokens;
} prep_job;

static void prep_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const prep_job *j = p;
    const int32_t t0 = (int32_t)((int64_t)j->n_tokens * task / n_tasks);
    const int32_t t1 = (int32_t)((int64_t)j->n_tokens * (task + 1) / n_tasks);
    for (int32_t t = t0; t < t1; t++)
        kern_act_prepare(j->k, j->type, j->x + (size_t)t * j->K, j->act + (size_t)t * j->stride,
                         j->K);
}

#define MAX_MULTI 4

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

typedef struct mm_job {
    ops_ctx *c;
    int n;
    const wmat *ws[MAX_MULTI];
    const uint8_t *pks[MAX_MULTI]; /* packed copies, or NULL */
    float *outs[MAX_MULTI];
    int32_t first_task[MAX_MULTI + 1]; /* task range of matrix i */
    int64_t row_block;
    const uint8_t *act;
    size_t act_stride;
    int32_t n_tokens, chunk;
} mm_job;

static void mm_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const mm_job *j = p;
    int i = 0;
    while (task >= j->first_task[i + 1]) i++;
    const wmat *w = j->ws[i];
    const int64_t r0 = (int64_t)(task - j->first_task[i]) * j->row_block;
    const int64_t r1 = IFD_MIN(r0 + j->row_block, w->n_rows);
    const size_t rows = (size_t)w->n_rows;
    for (int32_t t0 = 0; t0 < j->n_tokens; t0 += j->chunk) {
        const int32_t nt = IFD_MIN(j->chunk, j->n_tokens - t0);
        if (j->pks[i])
            kern_gemm_rows_packed(j->c->k, w, j->pks[i], r0, r1, j->act + (size_t)t0 * j->act_stride,
                                  j->act_stride, nt, j->outs[i] + (size_t)t0 * rows, rows);
        else
            kern_gemm_rows(j->c->k, w, r0, r1, j->act + (size_t)t0 * j->act_stride, j->act_stride,
                           nt, j->outs[i] + (size_t)t0 * rows, rows);
    }
}

void op_matmul_multi(ops_ctx *c, int n, float *const *outs, const wmat *const *ws,
                     const float *x, int32_t n_tokens) {
    IFD_ASSERT(n >= 1 && n <= MAX_MULTI && n_tokens >= 1);
    const kern_table *k = c->k;
    const ggml_type type = ws[0]->type;
    const int64_t K = ws[0]->n_cols;
    for (int i = 1; i < n; i++) IFD_ASSERT(ws[i]->type == type && ws[i]->n_cols == K);

    mm_job j = {.c = c, .n = n, .n_tokens = n_tokens};
    const size_t arb = kern_act_row_bytes(k, type, K);
    if (arb == 0) {
        j.act = (const uint8_t *)x;
        j.act_stride = (size_t)K * sizeof(float);
    } else {
        IFD_ASSERT(arb * (size_t)n_tokens <= c->act_bytes);
        prep_job pj = {.k = k, .type = type, .x = x, .K = K, .act = c->act, .stride = arb,
                       .n_tokens = n_tokens};
        tp_run(c->pool, prep_task, &pj, IFD_MIN(n_tokens, c->n_threads));
        j.act = c->act;
        j.act_stride = arb;
    }
    int32_t chunk = (int32_t)(ACT_CHUNK_BYTES / j.act_stride) / TOKEN_TILE_LCM * TOKEN_TILE_LCM;
    j.chunk = IFD_MAX(chunk, TOKEN_TILE_LCM);

    /* one row-block size for all matrices: total rows / (threads * TASKS_PER_THREAD),
     * a multiple of 16 (whole micro-kernel row tiles) and of every packed group */
    int64_t total_rows = 0, unit = 16;
    for (int i = 0; i < n; i++) {
        total_rows += ws[i]->n_rows;
        const int64_t g = kern_packed_rows(k, ws[i]);
        if (g > 0 && unit % g != 0) unit = unit * g / gcd64(unit, g);
    }
    int64_t rb = total_rows / ((int64_t)c->n_threads * TASKS_PER_THREAD);
    rb = IFD_MAX(unit, (rb + unit - 1) / unit * unit);
    j.row_block = rb;
    j.first_task[0] = 0;
    for (int i = 0; i < n; i++) {
        j.ws[i] = ws[i];
        j.pks[i] = pw_find(c, ws[i]);
        j.outs[i] = outs[i];
        j.first_task[i + 1] = j.first_task[i] + (int32_t)((ws[i]->n_rows + rb - 1) / rb);
    }
    tp_run(c->pool, mm_task, &j, j.first_task[n]);
}

void op_matmul(ops_ctx *c, float *out, const float *x, const wmat *w, int32_t n_tokens) {
    op_matmul_multi(c, 1, &out, &w, x, n_tokens);
}

/* ---- row-wise ops ---------------------------------------------------------------------- */

typedef struct rows_job {
    const kern_table *k;
    float *out;
    const float *x, *w, *y;
    const int32_t *idx; /* rmsnorm: source rows, or NULL for 0.. */
    int64_t n_rows, n;
    float eps;
} rows_job;

static void rmsnorm_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const rows_job *j = p;
    const int64_t r0 = j->n_rows * task / n_tasks, r1 = j->n_rows * (task + 1) / n_tasks;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t src = j->idx ? j->idx[r] : r;
        j->k->rmsnorm(j->out + r * j->n, j->x + src * j->n, j->w, (int32_t)j->n, j->eps);
    }
}

void op_rmsnorm_gather(ops_ctx *c, float *out, const float *x, const int32_t *rows,
                       int32_t n_rows, const float *w, int32_t n, float eps) {
    rows_job j = {.k = c->k, .out = out, .x = x, .w = w, .idx = rows, .n_rows = n_rows, .n = n,
                  .eps = eps};
    /* below ~16k elements a task is cheaper than waking the pool */
    const int32_t tasks = (int64_t)n_rows * n < 16384 ? 1 : IFD_MIN(n_rows, c->n_threads);
    tp_run(c->pool, rmsnorm_task, &j, tasks);
}

void op_rmsnorm_rows(ops_ctx *c, float *out, const float *x, const float *w, int32_t n_rows,
                     int32_t n, float eps) {
    op_rmsnorm_gather(c, out, x, NULL, n_rows, w, n, eps);
}

#define SWIGLU_SPLIT 4096 /* elements; task boundaries on multiples of it */

static void swiglu_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const rows_job *j = p;
    const int64_t n_units = (j->n + SWIGLU_SPLIT - 1) / SWIGLU_SPLIT;
    const int64_t e0 = IFD_MIN(j->n, n_units * task / n_tasks * SWIGLU_SPLIT);
    const int64_t e1 = IFD_MIN(j->n, n_units * (task + 1) / n_tasks * SWIGLU_SPLIT);
    for (int64_t e = e0; e < e1; e += SWIGLU_SPLIT) {
        const int64_t m = IFD_MIN(SWIGLU_SPLIT, e1 - e);
        j->k->swiglu(j->out + e, j->x + e, j->y + e, (int32_t)m);
    }
}

void op_swiglu(ops_ctx *c, float *out, const float *gate, const float *up, int64_t n) {
    /* elementwise: the vector body and the masked tail compute the same expression */
    rows_job j = {.k = c->k, .out = out, .x = gate, .y = up, .n = n};
    const int64_t units = (n + SWIGLU_SPLIT - 1) / SWIGLU_SPLIT;
    /* a decode step's 8-16k elements take ~5 us: not worth waking the pool */
    const int64_t tasks = n < 8 * SWIGLU_SPLIT ? 1 : IFD_MIN(units, (int64_t)c->n_threads * 2);
    tp_run(c->pool, swiglu_task, &j, (int32_t)tasks);
}

/* ---- attention ------------------------------------------------------------------------- */

typedef struct attn_job {
    ops_ctx *c;
    float *out;
    const float *q;
    const int32_t *seq_start, *pos, *block_tables;
    int32_t n_seqs, n_heads, max_blocks, group, qt;
    const kv_view *kv;
    float scale;
} attn_job;

/* Items in sequence order: (sequence, tile of qt query tokens, kv head). */
static int32_t attn_seq_items(const attn_job *j, int32_t s) {
    const int32_t n_q = j->seq_start[s + 1] - j->seq_start[s];
    return (n_q + j->qt - 1) / j->qt * j->kv->n_kv_heads;
}

static void attn_task(void *p, int32_t task, int32_t n_tasks, int32_t thread) {
    const attn_job *j = p;
    int32_t total = 0;
    for (int32_t s = 0; s < j->n_seqs; s++) total += attn_seq_items(j, s);
    const int32_t nkv = j->kv->n_kv_heads, hd = j->kv->head_dim;
    const int32_t i0 = (int32_t)((int64_t)total * task / n_tasks);
    const int32_t i1 = (int32_t)((int64_t)total * (task + 1) / n_tasks);
    float *scr = j->c->attn_scr + (size_t)thread * j->c->attn_scr_floats;
    const size_t tok_stride = (size_t)j->n_heads * hd;
    int32_t s = 0, base = 0;
    for (int32_t it = i0; it < i1; it++) {
        while (it >= base + attn_seq_items(j, s)) base += attn_seq_items(j, s++);
        const int32_t local = it - base, tile = local / nkv, kvh = local % nkv;
        const int32_t t0 = j->seq_start[s] + tile * j->qt;
        const int32_t qt = IFD_MIN(j->qt, j->seq_start[s + 1] - t0);
        int32_t n_keys[KERN_ATTN_QT];
        for (int32_t i = 0; i < qt; i++) {
            n_keys[i] = j->pos[t0 + i] + 1;
            IFD_ASSERT((size_t)n_keys[i] * ((size_t)qt * j->group + 2) + (size_t)qt * j->group <=
                       j->c->attn_scr_floats);
        }
        const size_t off = (size_t)t0 * tok_stride + (size_t)kvh * j->group * hd;
        const int32_t *bt = j->block_tables + (size_t)s * j->max_blocks;
        if (j->c->k->attn_tile)
            j->c->k->attn_tile(j->out + off, j->q + off, tok_stride, qt, j->group, n_keys, j->kv,
                               kvh, bt, j->scale, scr);
        else
            j->c->k->attn(j->out + off, j->q + off, j->group, n_keys[0], j->kv, kvh, bt, j->scale,
                          scr);
    }
}

void op_attention(ops_ctx *c, float *out, const float *q, int32_t n_seqs,
                  const int32_t *seq_start, const int32_t *pos, int32_t n_heads,
                  const kv_view *kv, const int32_t *block_tables, int32_t max_blocks) {
    const int32_t n_tokens = seq_start[n_seqs] - seq_start[0];
    IFD_ASSERT(seq_start[0] == 0 && n_heads % kv->n_kv_heads == 0);
    attn_job j = {.c = c, .out = out, .q = q, .seq_start = seq_start, .pos = pos,
                  .block_tables = block_tables, .n_seqs = n_seqs, .n_heads = n_heads,
                  .max_blocks = max_blocks, .group = n_heads / kv->n_kv_heads,
                  .qt = c->k->attn_tile ? KERN_ATTN_QT : 1, .kv = kv,
                  .scale = 1.0f / sqrtf((float)kv->head_dim)};
    int32_t items = 0;
    for (int32_t s = 0; s < n_seqs; s++) items += attn_seq_items(&j, s);
    int64_t work = 0; /* keys x heads, to decide whether waking the pool pays */
    for (int32_t t = 0; t < n_tokens; t++) work += (int64_t)(pos[t] + 1) * n_heads;
    const int32_t tasks = work < 8192 ? 1 : IFD_MIN(items, c->n_threads * TASKS_PER_THREAD);
    tp_run(c->pool, attn_task, &j, tasks);
}

/* ---- RoPE ------------------------------------------------------------------------------ */

void op_rope_table(float *cs, const int32_t *pos, int32_t n, const rope_params *rp) {
    const int32_t half = rp->n_rot / 2;
    for (int32_t t = 0; t < n; t++)
        for (int32_t i = 0; i < half; i++) {
            /* the same angle computation as op_rope_ref */
            double theta =
                (double)pos[t] * rp->freq_scale * pow((double)rp->base, -2.0 * i / rp->n_rot);
            if (rp->freq_div) theta /= rp->freq_div[i];
            cs[((size_t)t * half + i) * 2] = (float)cos(theta);
            cs[((size_t)t * half + i) * 2 + 1] = (float)sin(theta);
        }
}

void op_rope_apply(float *x, int32_t n_heads, const float *cs, const rope_params *rp) {
    const int32_t half = rp->n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * rp->head_dim;
        for (int32_t i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const int32_t a = rp->layout == ROPE_NORM ? 2 * i : i;
            const int32_t b = rp->layout == ROPE_NORM ? 2 * i + 1 : i + half;
            const float x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * c - x1 * s;
            xh[b] = x0 * s + x1 * c;
        }
    }
}
