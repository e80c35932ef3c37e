// cuda_backend.cu — the CUDA backend: a third op table under forward.c's one walk of
// the architecture, over kernels/ (GPU build: namespace ifd_cu; SIMT emulation build:
// ifd_emu, the same source run on the CPU by CI).
//
// At create: a shadow of the model whose weight pointers are device copies (matmul
// weights in the layout kernels/matmul prepares; norms, biases and the embedding as
// they are), the paged KV pool (per layer K and V, [n_slots][n_kv_heads][head_dim]
// f32), the activation buffers for the largest step, the step's batch arrays and the
// kernels' scratch: all allocated once, nothing on the request path. forward() uploads
// the batch arrays in one copy, runs fwd_run over the shadow model (so every op gets
// device pointers), and copies the logits rows back.
//
// Decode graphs (unless backend_config.graphs_off): create also records fwd_run over a
// step of B one-token sequences into a graph for every bucket B (1, 2, 4, 8, then
// every 8 to 64, 16 to 256, 32 beyond, and max_batch_seqs). Everything a graph reads
// that changes from step to step sits in d_batch at the bucket's fixed offsets, and
// its attention is planned from bounds (one query token, max_seq_len keys), so the
// arguments baked at capture serve every later step. A step whose sequences all have
// one token (logits row i = token i) is packed as the smallest bucket >= n, padded
// with rows that store nothing (slot BACKEND_SLOT_NONE, position 0, context 1, block
// table row 0) and replayed: one upload, one graph launch, one logits download,
// instead of ~12 launches a layer. The bits are the eager path's (batch invariance:
// every kernel's result for a row ignores the other rows and the grid). Any other
// step (prefill chunks, mixes, verification rows) runs eagerly.
//
// Failures: a recoverable device error fails the step (IFD_ERR_INTERNAL: the engine
// fails that step's requests); a sticky one marks the backend dead and returns
// IFD_ERR_DEVICE_LOST, as every later forward does at once (the engine dies, the server
// reports not ready and exits).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h" /* kernels/ */
#include "devrt.h"
#include "elementwise.h"
#include "ktypes.h"
#include "matmul.h"
#include "sample.h"

extern "C" {
#include "../../model/quant.h"
#include "../../util/common.h"
#include "../../util/log.h"
#include "../backend.h"
#include "../forward.h"
}

/* kernels/ktypes.h restates the model facts the kernels need; they must agree. */
static_assert((int)K_F32 == (int)GGML_TYPE_F32 && (int)K_F16 == (int)GGML_TYPE_F16 && (int)K_BF16 == (int)GGML_TYPE_BF16 &&
                  (int)K_Q8_0 == (int)GGML_TYPE_Q8_0 && (int)K_Q4_0 == (int)GGML_TYPE_Q4_0 && (int)K_Q5_0 == (int)GGML_TYPE_Q5_0 &&
                  (int)K_Q4_K == (int)GGML_TYPE_Q4_K && (int)K_Q6_K == (int)GGML_TYPE_Q6_K,
              "kernels/ktypes.h: GGUF type ids");
static_assert((int)K_Q4_1 == (int)GGML_TYPE_Q4_1 && (int)K_Q5_1 == (int)GGML_TYPE_Q5_1 && (int)K_Q2_K == (int)GGML_TYPE_Q2_K &&
                  (int)K_Q3_K == (int)GGML_TYPE_Q3_K && (int)K_Q5_K == (int)GGML_TYPE_Q5_K &&
                  (int)K_IQ4_NL == (int)GGML_TYPE_IQ4_NL && (int)K_IQ4_XS == (int)GGML_TYPE_IQ4_XS &&
                  (int)K_I8_G64 == (int)IFD_TYPE_I8_G64 && (int)K_I8_G128 == (int)IFD_TYPE_I8_G128 &&
                  (int)K_I4_G64 == (int)IFD_TYPE_I4_G64 && (int)K_I4_G128 == (int)IFD_TYPE_I4_G128,
              "kernels/ktypes.h: the newer type ids");
static_assert(K_Q8_0_BYTES == sizeof(block_q8_0) && K_Q4_0_BYTES == sizeof(block_q4_0) &&
                  K_Q5_0_BYTES == sizeof(block_q5_0) && K_Q4_K_BYTES == sizeof(block_q4_K) &&
                  K_Q6_K_BYTES == sizeof(block_q6_K) && K_QK_K == QK_K && K_QK8_0 == QK8_0,
              "kernels/ktypes.h: block layouts");
static_assert(K_Q4_1_BYTES == sizeof(block_q4_1) && K_Q5_1_BYTES == sizeof(block_q5_1) &&
                  K_IQ4_NL_BYTES == sizeof(block_iq4_nl) && K_Q2_K_BYTES == sizeof(block_q2_K) &&
                  K_Q3_K_BYTES == sizeof(block_q3_K) && K_Q5_K_BYTES == sizeof(block_q5_K) &&
                  K_IQ4_XS_BYTES == sizeof(block_iq4_xs) && K_I8_G64_BYTES == sizeof(block_i8_g64) &&
                  K_I8_G128_BYTES == sizeof(block_i8_g128) && K_I4_G64_BYTES == sizeof(block_i4_g64) &&
                  K_I4_G128_BYTES == sizeof(block_i4_g128),
              "kernels/ktypes.h: the newer block layouts");
static_assert((int)K_ROPE_NORM == (int)ROPE_NORM && (int)K_ROPE_NEOX == (int)ROPE_NEOX, "rope layouts");
static_assert((int)K_KV_F32 == (int)BACKEND_KV_F32 && (int)K_KV_F16 == (int)BACKEND_KV_F16 &&
                  (int)K_KV_BF16 == (int)BACKEND_KV_BF16 && (int)K_KV_INT8 == (int)BACKEND_KV_INT8 &&
                  (int)K_KV_FP8 == (int)BACKEND_KV_FP8,
              "KV dtypes");

#if defined(IFD_SIMT_EMU)
#define IFD_CUDA_ENTRY(x) ifd_emu_##x
#define IFD_CUDA_KIND "emu"
#else
#define IFD_CUDA_ENTRY(x) ifd_cu_##x
#define IFD_CUDA_KIND "cuda"
#endif

IFD_NS_BEGIN

struct cuda_backend {
    backend base; /* base.m: the host model */
    backend shadow; /* the same, with m = &dm (device pointers): what fwd_run walks */
    model dm;
    layer_weights *dlayers;
    dev_props props;
    dev_stream s;
    bool dead;
    /* KV hand-over between instances (b_kv_rw): its own stream, made at first use, so
     * that copies for other threads never wait behind the engine's steps */
    pthread_mutex_t xmu;
    dev_stream xs;
    bool xs_made;
    /* every device allocation, freed at destroy */
    void **allocs;
    size_t n_allocs, cap_allocs;
    /* [n_layers][K, V] pools of kv_pool_bytes each: [n_slots][n_kv_heads] rows of
     * head_dim elements of kv_dtype, then (INT8) the rows' f32 scales (ktypes.h's k_kv) */
    uint8_t *kv;
    size_t kv_pool_bytes, kv_data_bytes; /* one pool; its element part */
    int32_t kv_dtype;
    fwd_bufs buf;
    float *logits; /* [max_logits][n_vocab] */
    /* batch arrays: host staging (pinned) and device, same packing */
    int32_t *h_batch, *d_batch;
    /* device sampling (b_sample): staging on the host (pinned) and the device */
    struct samp_bufs {
        samp_row *h_rows, *d_rows;
        samp_pen *h_pen, *d_pen;
        samp_bias *h_bias, *d_bias;
        int32_t *h_ban, *d_ban;
        uint32_t *h_allow, *d_allow; /* [max_batch_seqs][words of n_vocab] */
        int32_t *h_extra, *d_extra;  /* [max_batch_seqs][BACKEND_SAMPLE_MAX_EXTRA] */
        int32_t *h_tok, *d_tok;
        samp_logprob *h_lp, *d_lp;
        float *work, *gather;
        size_t pen_cap; /* entries per row */
    } sb;
    size_t batch_ints;
    const int32_t *d_tokens, *d_pos, *d_slots, *d_seq_start, *d_ctx, *d_btab, *d_lidx;
    const ifd_batch *bt; /* the step's host batch (valid inside forward) */
    k_attn_batch ab;
    void *att_scratch, *mm_scratch;
    size_t att_scratch_bytes, mm_scratch_bytes;
    /* decode graphs: graphs[i] runs a step of graph_bucket[i] single-token sequences
     * (ascending buckets; n_graphs 0 = every step eager) */
    int32_t n_graphs;
    int32_t *graph_bucket;
    dev_graph *graphs;
    int32_t graph_mb;   /* block-table width the graphs were captured with */
    bool capturing;     /* fwd_run is being recorded into a graph (create only) */
    int64_t n_replays;  /* decode steps run as graph replays (tests) */
    int64_t n_steps;    /* forward calls */
};

static int dev_fail(cuda_backend *cb, int rc, const char *what) {
    if (rc == DEV_OK) return IFD_OK;
    if (rc == DEV_STICKY) cb->dead = true;
    slog("error", "%s backend: %s: %s%s", IFD_CUDA_KIND, what, dev_error(),
            rc == DEV_STICKY ? " (the device is lost)" : "");
    return cb->dead ? IFD_ERR_DEVICE_LOST : IFD_ERR_INTERNAL;
}
#define DEV_TRY(cb, call, what)                               \
    do {                                                      \
        int rc_ = (call);                                     \
        if (rc_ != DEV_OK) return dev_fail((cb), rc_, (what)); \
    } while (0)

static void *dalloc(cuda_backend *cb, size_t bytes) {
    if (cb->n_allocs == cb->cap_allocs) {
        size_t cap = cb->cap_allocs ? 2 * cb->cap_allocs : 64;
        void **a = (void **)realloc(cb->allocs, cap * sizeof *a);
        if (!a) return NULL;
        cb->allocs = a;
        cb->cap_allocs = cap;
    }
    void *p = NULL;
    if (dev_malloc(&p, bytes) != DEV_OK) return NULL;
    cb->allocs[cb->n_allocs++] = p;
    return p;
}

static void *upload(cuda_backend *cb, const void *h, size_t bytes) {
    void *d = dalloc(cb, bytes);
    if (d && (dev_h2d(d, h, bytes, cb->s) != DEV_OK || dev_sync(cb->s) != DEV_OK)) return NULL;
    return d;
}

/* ---- the op table ------------------------------------------------------------------- */
/* Where the step's batch arrays sit in h_batch / d_batch (ints): tokens, positions,
 * slots [T]; seq_start [S+1]; context_len [S]; block table [S][mb]; logits_index [L].
 * A decode graph of bucket B packs with T = S = L = B and mb = graph_mb: its arrays sit
 * at the device addresses its capture baked into the kernels' arguments. */
typedef struct batch_layout {
    size_t pos, slots, seq_start, ctx, btab, lidx, n;
} batch_layout;

static batch_layout layout_of(int32_t T, int32_t S, int32_t mb, int32_t L) {
    batch_layout lo;
    lo.pos = (size_t)T;
    lo.slots = 2 * (size_t)T;
    lo.seq_start = 3 * (size_t)T;
    lo.ctx = lo.seq_start + (size_t)S + 1;
    lo.btab = lo.ctx + (size_t)S;
    lo.lidx = lo.btab + (size_t)S * (size_t)mb;
    lo.n = lo.lidx + (size_t)L;
    return lo;
}

static int o_begin(void *ctx, const ifd_batch *bt, const rope_params *rp) {
    (void)rp;
    cuda_backend *cb = (cuda_backend *)ctx;
    const backend_config *cfg = &cb->base.cfg;
    const int32_t T = bt->n_tokens, S = bt->n_seqs, L = bt->n_logits, mb = bt->max_blocks_per_seq;
    if (mb < 0 || mb > cfg->max_seq_len / cfg->block_size + 1) return IFD_ERR_INVALID;
    const batch_layout lo = layout_of(T, S, mb, L);
    if (lo.n > cb->batch_ints) return IFD_ERR_INVALID;
    /* While a graph is captured nothing is uploaded: each replay uploads its step's
     * arrays (run_graph) to these same addresses first. */
    if (!cb->capturing) {
        int32_t *h = cb->h_batch;
        memcpy(h, bt->token_ids, (size_t)T * 4);
        memcpy(h + lo.pos, bt->positions, (size_t)T * 4);
        memcpy(h + lo.slots, bt->slot_mapping, (size_t)T * 4);
        memcpy(h + lo.seq_start, bt->seq_start, (size_t)(S + 1) * 4);
        memcpy(h + lo.ctx, bt->context_len, (size_t)S * 4);
        memcpy(h + lo.btab, bt->block_table, (size_t)S * mb * 4);
        if (L) memcpy(h + lo.lidx, bt->logits_index, (size_t)L * 4);
        DEV_TRY(cb, dev_h2d(cb->d_batch, h, lo.n * 4, cb->s), "batch upload");
    }
    const int32_t *d = cb->d_batch;
    cb->d_tokens = d;
    cb->d_pos = d + lo.pos;
    cb->d_slots = d + lo.slots;
    cb->d_seq_start = d + lo.seq_start;
    cb->d_ctx = d + lo.ctx;
    cb->d_btab = d + lo.btab;
    cb->d_lidx = d + lo.lidx;
    cb->bt = bt;
    k_attn_batch *ab = &cb->ab;
    ab->n_tokens = T;
    ab->n_seqs = S;
    ab->max_blocks_per_seq = mb;
    ab->positions = cb->d_pos;
    ab->seq_start = cb->d_seq_start;
    ab->context_len = cb->d_ctx;
    ab->block_table = cb->d_btab;
    ab->h_positions = bt->positions;
    ab->h_seq_start = bt->seq_start;
    ab->h_context_len = bt->context_len;
    return IFD_OK;
}

static int o_embed(void *ctx, float *out, const wmat *e, const int32_t *ids, int32_t n) {
    cuda_backend *cb = (cuda_backend *)ctx;
    (void)ids; /* the host array; its device copy was uploaded in begin */
    DEV_TRY(cb, k_embed(cb->s, out, e->data, (int)e->type, e->n_cols, e->row_bytes, cb->d_tokens, n,
                        (int32_t)e->n_rows),
            "embedding");
    return IFD_OK;
}

static int o_rmsnorm(void *ctx, float *out, const float *x, const int32_t *rows, int32_t n_rows,
                     const float *w, int32_t n, float eps) {
    cuda_backend *cb = (cuda_backend *)ctx;
    const int32_t *drows = NULL;
    if (rows) {
        if (rows != cb->bt->logits_index) return IFD_ERR_INTERNAL; /* the only gather forward.c makes */
        drows = cb->d_lidx;
    }
    DEV_TRY(cb, k_rmsnorm(cb->s, out, x, drows, n_rows, w, n, eps), "rmsnorm");
    return IFD_OK;
}

static int o_matmul(void *ctx, int n, float *const *outs, const wmat *const *ws, const float *x,
                    int32_t n_tokens) {
    cuda_backend *cb = (cuda_backend *)ctx;
    if (n < 1 || n > K_MATMUL_MAX_GROUP) return IFD_ERR_INVALID;
    k_wmat w[K_MATMUL_MAX_GROUP];
    const k_wmat *wp[K_MATMUL_MAX_GROUP];
    for (int i = 0; i < n; i++) {
        w[i] = {ws[i]->data, (int)ws[i]->type, ws[i]->n_rows, ws[i]->n_cols};
        wp[i] = &w[i];
    }
    /* forward.c groups only matrices of one type and width (q/k/v, gate/up): one launch,
     * the same bits per element as one k_matmul each */
    if (n == 1)
        DEV_TRY(cb, k_matmul(cb->s, outs[0], wp[0], x, n_tokens, cb->mm_scratch, cb->mm_scratch_bytes), "matmul");
    else
        DEV_TRY(cb, k_matmul_group(cb->s, n, outs, wp, x, n_tokens, cb->mm_scratch, cb->mm_scratch_bytes), "matmul");
    return IFD_OK;
}

static int o_add_bias(void *ctx, float *x, const float *b, int32_t n_rows, int32_t n) {
    cuda_backend *cb = (cuda_backend *)ctx;
    DEV_TRY(cb, k_add_bias(cb->s, x, b, n_rows, n), "bias");
    return IFD_OK;
}

static int o_head_norm(void *ctx, float *x, const float *w, int32_t n_rows, int32_t n, float eps) {
    cuda_backend *cb = (cuda_backend *)ctx;
    DEV_TRY(cb, k_head_norm(cb->s, x, w, n_rows, n, eps), "q/k norm");
    return IFD_OK;
}

/* Layer l's K and V pools as the kernels take them. */
static k_kv kv_layer(const cuda_backend *cb, uint32_t l) {
    uint8_t *k = cb->kv + (size_t)l * 2 * cb->kv_pool_bytes, *v = k + cb->kv_pool_bytes;
    const bool sc = cb->kv_dtype == K_KV_INT8;
    return k_kv{k, v, sc ? (float *)(k + cb->kv_data_bytes) : NULL, sc ? (float *)(v + cb->kv_data_bytes) : NULL,
                cb->kv_dtype};
}

static int o_rope_store(void *ctx, uint32_t layer, float *q, float *k, const float *v, const ifd_batch *bt,
                        const rope_params *rp) {
    cuda_backend *cb = (cuda_backend *)ctx;
    const model_hparams *hp = &cb->base.m->hp;
    /* rp comes from the shadow model: rp->freq_div is already the device copy */
    const k_rope kr = {rp->head_dim, rp->n_rot, (int32_t)rp->layout, rp->base, rp->freq_scale};
    const k_kv c = kv_layer(cb, layer);
    DEV_TRY(cb, k_rope_store_kv(cb->s, q, k, v, &c, cb->d_pos, cb->d_slots,
                             bt->n_tokens, (int32_t)hp->n_heads, (int32_t)hp->n_kv_heads, kr, rp->freq_div),
            "rope");
    return IFD_OK;
}

static int o_attention(void *ctx, uint32_t layer, float *out, const float *q, const ifd_batch *bt) {
    cuda_backend *cb = (cuda_backend *)ctx;
    (void)bt;
    const model_hparams *hp = &cb->base.m->hp;
    const k_kv c = kv_layer(cb, layer);
    if (cb->capturing) {
        /* a decode graph: grids for one query token per sequence and any context up to
         * max_seq_len (the same bits as the planned launch gives: attention.h) */
        DEV_TRY(cb, k_attention_bounded_kv(cb->s, out, q, &c, &cb->ab,
                                        (int32_t)hp->n_heads, (int32_t)hp->n_kv_heads, (int32_t)hp->head_dim,
                                        cb->base.cfg.block_size, 1, cb->base.cfg.max_seq_len, cb->att_scratch,
                                        cb->att_scratch_bytes),
                "attention");
        return IFD_OK;
    }
    DEV_TRY(cb, k_attention_kv(cb->s, out, q, &c, &cb->ab, (int32_t)hp->n_heads,
                            (int32_t)hp->n_kv_heads, (int32_t)hp->head_dim, cb->base.cfg.block_size,
                            cb->att_scratch, cb->att_scratch_bytes),
            "attention");
    return IFD_OK;
}

static int o_add(void *ctx, float *x, const float *y, int64_t n) {
    cuda_backend *cb = (cuda_backend *)ctx;
    DEV_TRY(cb, k_add(cb->s, x, y, n), "add");
    return IFD_OK;
}

static int o_swiglu(void *ctx, float *out, const float *gate, const float *up, int64_t n) {
    cuda_backend *cb = (cuda_backend *)ctx;
    DEV_TRY(cb, k_swiglu(cb->s, out, gate, up, n), "swiglu");
    return IFD_OK;
}

static const fwd_ops CUDA_FWD = {
    IFD_CUDA_KIND, o_begin, o_embed, o_rmsnorm, o_matmul, o_add_bias, o_head_norm,
    o_rope_store, o_attention, o_add, o_swiglu,
};

/* ---- decode graphs ------------------------------------------------------------------- */
/* The buckets: 1, 2, 4, 8, then every 8 to 64, every 16 to 256, every 32 beyond, and
 * the largest decode step itself; a step of n decodes replays the smallest bucket >= n. */
static int32_t next_bucket(int32_t b) { return b < 8 ? 2 * b : b < 64 ? b + 8 : b < 256 ? b + 16 : b + 32; }
static int32_t bucket_top(const backend_config *cfg) {
    return IFD_MIN(IFD_MIN(cfg->max_batch_seqs, cfg->max_batch_tokens), cfg->max_logits);
}
static int32_t bucket_count(const backend_config *cfg) {
    int32_t n = 1; /* the top */
    for (int32_t b = 1; b < bucket_top(cfg); b = next_bucket(b)) n++;
    return n;
}

/* The graph a step runs as, or -1 (eager): every sequence one token, whose logits row
 * is its own (logits_index[i] == i), with 0 <= position < context_len inside the block
 * table the graphs read. Anything else (prefill chunks, verification rows, odd shapes,
 * which the eager path checks and refuses) runs eagerly. */
static int graph_for(const cuda_backend *cb, const ifd_batch *bt) {
    const backend_config *cfg = &cb->base.cfg;
    const int32_t n = bt->n_seqs, mb = bt->max_blocks_per_seq;
    if (cb->n_graphs == 0 || n < 1 || bt->n_tokens != n || bt->n_logits != n ||
        n > cb->graph_bucket[cb->n_graphs - 1] || mb < 1 || mb > cfg->max_seq_len / cfg->block_size + 1 ||
        bt->seq_start[n] != n)
        return -1;
    const int64_t cap = (int64_t)IFD_MIN(mb, cb->graph_mb) * cfg->block_size;
    for (int32_t i = 0; i < n; i++)
        if (bt->seq_start[i] != i || bt->logits_index[i] != i || bt->positions[i] < 0 ||
            bt->positions[i] >= bt->context_len[i] || bt->context_len[i] > cap)
            return -1;
    int g = 0;
    while (cb->graph_bucket[g] < n) g++;
    return g;
}

/* One decode step as a replay of graph g: the step's arrays packed as the bucket's
 * (padding rows: token 0, position 0, slot BACKEND_SLOT_NONE, context 1, block table
 * row of zeros — they store nothing and no real row reads them), one upload, the
 * replay, the real rows' logits back. */
static int run_graph(cuda_backend *cb, int g, const ifd_batch *bt, float *logits) {
    fwd_check_batch(&cb->base, bt);
    const int32_t B = cb->graph_bucket[g], n = bt->n_seqs, gmb = cb->graph_mb;
    const int32_t w = IFD_MIN(bt->max_blocks_per_seq, gmb);
    const batch_layout lo = layout_of(B, B, gmb, B);
    int32_t *h = cb->h_batch;
    const size_t pad = (size_t)(B - n) * 4;
    memcpy(h, bt->token_ids, (size_t)n * 4);
    memset(h + n, 0, pad);
    memcpy(h + lo.pos, bt->positions, (size_t)n * 4);
    memset(h + lo.pos + n, 0, pad);
    memcpy(h + lo.slots, bt->slot_mapping, (size_t)n * 4);
    for (int32_t i = n; i < B; i++) h[lo.slots + i] = BACKEND_SLOT_NONE;
    for (int32_t i = 0; i <= B; i++) h[lo.seq_start + i] = i;
    memcpy(h + lo.ctx, bt->context_len, (size_t)n * 4);
    for (int32_t i = n; i < B; i++) h[lo.ctx + i] = 1;
    for (int32_t i = 0; i < n; i++) {
        int32_t *row = h + lo.btab + (size_t)i * gmb;
        memcpy(row, bt->block_table + (size_t)i * bt->max_blocks_per_seq, (size_t)w * 4);
        memset(row + w, 0, (size_t)(gmb - w) * 4);
    }
    memset(h + lo.btab + (size_t)n * gmb, 0, (size_t)(B - n) * gmb * 4);
    for (int32_t i = 0; i < B; i++) h[lo.lidx + i] = i;
    int rc = dev_h2d(cb->d_batch, h, lo.n * 4, cb->s);
    if (rc == DEV_OK) rc = dev_graph_launch(cb->graphs[g], cb->s);
    if (rc == DEV_OK && logits) /* NULL: they stay on the device for b_sample */
        rc = dev_d2h(logits, cb->logits, (size_t)n * cb->base.m->hp.n_vocab * sizeof(float), cb->s);
    const int src = dev_sync(cb->s);
    if (rc == DEV_OK) rc = src;
    if (rc != DEV_OK) return dev_fail(cb, rc, "decode graph");
    cb->n_replays++;
    return IFD_OK;
}

/* At create: one graph per bucket, recorded from fwd_run over a step of padding rows
 * (nothing runs while capturing). */
static int capture_graphs(cuda_backend *cb) {
    const backend_config *cfg = &cb->base.cfg;
    const int32_t top = bucket_top(cfg), n = bucket_count(cfg);
    cb->graph_bucket = (int32_t *)calloc((size_t)n, sizeof(int32_t));
    cb->graphs = (dev_graph *)calloc((size_t)n, sizeof(dev_graph));
    cb->graph_mb = (cfg->max_seq_len + cfg->block_size - 1) / cfg->block_size;
    const int32_t gmb = cb->graph_mb;
    int32_t *a = (int32_t *)calloc((size_t)top * (6 + (size_t)gmb) + 1, sizeof(int32_t));
    if (!cb->graph_bucket || !cb->graphs || !a) {
        free(a);
        slog("error", "%s backend: out of host memory for the decode graphs", IFD_CUDA_KIND);
        return IFD_ERR_NOMEM;
    }
    int32_t *tok = a, *pos = tok + top, *slot = pos + top, *ss = slot + top, *ctx = ss + top + 1,
            *lidx = ctx + top, *btab = lidx + top;
    for (int32_t i = 0; i <= top; i++) ss[i] = i;
    for (int32_t i = 0; i < top; i++) slot[i] = BACKEND_SLOT_NONE, ctx[i] = 1, lidx[i] = i;
    int rc = IFD_OK;
    for (int32_t b = 1, i = 0; i < n; b = next_bucket(b), i++) {
        const int32_t B = i == n - 1 ? top : b;
        const ifd_batch bt = {B, tok, pos, slot, B, ss, ctx, btab, gmb, B, lidx};
        cb->capturing = true;
        int frc = IFD_OK;
        dev_graph gr = NULL;
        int drc = dev_graph_begin(cb->s);
        if (drc == DEV_OK) {
            frc = fwd_run(&CUDA_FWD, cb, &cb->shadow, &cb->buf, &bt, cb->logits);
            drc = dev_graph_end(cb->s, &gr);
        }
        cb->capturing = false;
        cb->bt = NULL;
        if (drc != DEV_OK || frc != IFD_OK) {
            if (drc == DEV_OK) dev_graph_destroy(gr);
            rc = drc != DEV_OK ? dev_fail(cb, drc, "decode graph capture") : frc;
            slog("error", "%s backend: capturing the decode graph of %d sequences failed", IFD_CUDA_KIND, B);
            break;
        }
        cb->graph_bucket[i] = B;
        cb->graphs[i] = gr;
        cb->n_graphs = i + 1;
    }
    free(a);
    return rc;
}

/* ---- backend_ops ---------------------------------------------------------------------- */
static int b_forward(backend *b, const ifd_batch *bt, float *logits) {
    cuda_backend *cb = (cuda_backend *)b;
    if (cb->dead) return IFD_ERR_DEVICE_LOST;
    cb->n_steps++;
    const int g = graph_for(cb, bt);
    if (g >= 0) return run_graph(cb, g, bt, logits);
    int rc = fwd_run(&CUDA_FWD, cb, &cb->shadow, &cb->buf, bt, cb->logits);
    cb->bt = NULL;
    if (rc != IFD_OK) {
        if (dev_sync(cb->s) == DEV_STICKY) cb->dead = true; /* drain; a sticky error shows here too */
        return cb->dead ? IFD_ERR_DEVICE_LOST : rc;
    }
    if (bt->n_logits && logits) /* NULL: they stay on the device for b_sample */
        DEV_TRY(cb, dev_d2h(logits, cb->logits, (size_t)bt->n_logits * b->m->hp.n_vocab * sizeof(float), cb->s),
                "logits download");
    DEV_TRY(cb, dev_sync(cb->s), "step");
    return IFD_OK;
}

/* Draw one token per row of the last forward's logits (kept on the device: forward was
 * called with logits == NULL), kernels/sample.cu: exactly the engine sampler's tokens. */
static int b_sample(backend *b, const backend_sample_row *rows, int32_t n, int32_t *tokens, backend_logprob *lp) {
    cuda_backend *cb = (cuda_backend *)b;
    if (cb->dead) return IFD_ERR_DEVICE_LOST;
    struct cuda_backend::samp_bufs *q = &cb->sb;
    const int32_t V = (int32_t)b->m->hp.n_vocab;
    if (n < 0 || n > b->cfg.max_batch_seqs) return IFD_ERR_INVALID;
    if (n == 0) return IFD_OK;
    size_t np = 0, nb = 0, nban = 0, nal = 0, nex = 0;
    const size_t W = ((size_t)V + 31) / 32;
    bool identity = true;
    for (int32_t i = 0; i < n; i++) {
        const backend_sample_row *r = &rows[i];
        if (r->logits_row < 0 || r->logits_row >= b->cfg.max_logits || r->n_seen < 0 ||
            (size_t)r->n_seen > q->pen_cap || r->n_bias < 0 || r->n_bias > BACKEND_SAMPLE_MAX_BIAS ||
            r->n_ban < 0 || r->n_ban > BACKEND_SAMPLE_MAX_BAN || r->n_logprobs > BACKEND_SAMPLE_MAX_TOP ||
            r->n_allow_extra < 0 || r->n_allow_extra > BACKEND_SAMPLE_MAX_EXTRA)
            return IFD_ERR_INVALID;
        identity = identity && r->logits_row == i;
        samp_row *w = &q->h_rows[i];
        w->temperature = r->temperature;
        w->top_k = r->top_k;
        w->top_p = r->top_p;
        w->min_p = r->min_p;
        w->repetition_penalty = r->repetition_penalty;
        w->presence_penalty = r->presence_penalty;
        w->frequency_penalty = r->frequency_penalty;
        w->n_logprobs = r->n_logprobs;
        w->key = r->key;
        w->position = r->position;
        w->pen_off = (int32_t)np;
        w->n_pen = r->seen ? r->n_seen : 0;
        for (int32_t j = 0; j < w->n_pen; j++) {
            const int32_t id = r->seen[j];
            q->h_pen[np++] = {id, id >= 0 && id < V ? r->count[id] : 0};
        }
        w->bias_off = (int32_t)nb;
        w->n_bias = r->bias ? r->n_bias : 0;
        for (int32_t j = 0; j < w->n_bias; j++) q->h_bias[nb++] = {r->bias[j].id, r->bias[j].bias};
        w->ban_off = (int32_t)nban;
        w->n_ban = r->ban ? r->n_ban : 0;
        for (int32_t j = 0; j < w->n_ban; j++) q->h_ban[nban++] = r->ban[j];
        w->allow_off = -1;
        w->extra_off = (int32_t)nex;
        w->n_extra = 0;
        if (r->allow) { /* the grammar's mask, and the ids allowed anyway */
            w->allow_off = (int64_t)nal;
            memcpy(q->h_allow + nal, r->allow, W * sizeof(uint32_t));
            nal += W;
            w->n_extra = r->allow_extra ? r->n_allow_extra : 0;
            for (int32_t j = 0; j < w->n_extra; j++) q->h_extra[nex++] = r->allow_extra[j];
        }
    }
    DEV_TRY(cb, dev_h2d(q->d_rows, q->h_rows, (size_t)n * sizeof(samp_row), cb->s), "sampling upload");
    if (np) DEV_TRY(cb, dev_h2d(q->d_pen, q->h_pen, np * sizeof(samp_pen), cb->s), "sampling upload");
    if (nb) DEV_TRY(cb, dev_h2d(q->d_bias, q->h_bias, nb * sizeof(samp_bias), cb->s), "sampling upload");
    if (nban) DEV_TRY(cb, dev_h2d(q->d_ban, q->h_ban, nban * sizeof(int32_t), cb->s), "sampling upload");
    if (nal) DEV_TRY(cb, dev_h2d(q->d_allow, q->h_allow, nal * sizeof(uint32_t), cb->s), "sampling upload");
    if (nex) DEV_TRY(cb, dev_h2d(q->d_extra, q->h_extra, nex * sizeof(int32_t), cb->s), "sampling upload");
    const float *logits = cb->logits;
    if (!identity) { /* forks draw from their parent's row: gather */
        for (int32_t i = 0; i < n; i++)
            DEV_TRY(cb, dev_d2d(q->gather + (size_t)i * V, cb->logits + (size_t)rows[i].logits_row * V,
                                (size_t)V * sizeof(float), cb->s),
                    "sampling gather");
        logits = q->gather;
    }
    DEV_TRY(cb, samp_sample(cb->s, logits, n, V, q->d_rows, np ? q->d_pen : NULL, (int32_t)np,
                            nb ? q->d_bias : NULL, (int32_t)nb, nban ? q->d_ban : NULL, (int32_t)nban,
                            nal ? q->d_allow : NULL, (int64_t)nal, nex ? q->d_extra : NULL, (int32_t)nex, q->work,
                            q->d_tok, lp ? q->d_lp : NULL),
            "sampling");
    DEV_TRY(cb, dev_d2h(q->h_tok, q->d_tok, (size_t)n * sizeof(int32_t), cb->s), "sampling download");
    if (lp)
        DEV_TRY(cb, dev_d2h(q->h_lp, q->d_lp, (size_t)n * (1 + SAMP_MAX_TOP) * sizeof(samp_logprob), cb->s),
                "sampling download");
    DEV_TRY(cb, dev_sync(cb->s), "sampling");
    memcpy(tokens, q->h_tok, (size_t)n * sizeof(int32_t));
    if (lp) memcpy(lp, q->h_lp, (size_t)n * (1 + SAMP_MAX_TOP) * sizeof(samp_logprob));
    return IFD_OK;
}

static int b_copy_blocks(backend *b, const int32_t *src, const int32_t *dst, int32_t n) {
    cuda_backend *cb = (cuda_backend *)b;
    if (cb->dead) return IFD_ERR_DEVICE_LOST;
    const model_hparams *hp = &b->m->hp;
    /* a block's rows in one pool: its elements, and (INT8) its scales */
    const size_t rows = (size_t)b->cfg.block_size * hp->n_kv_heads;
    const size_t eb = rows * hp->head_dim * (size_t)k_kv_elem_bytes(cb->kv_dtype), sb = rows * sizeof(float);
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const k_kv c = kv_layer(cb, l);
        for (int32_t i = 0; i < n; i++)
            for (int p = 0; p < 2; p++) {
                uint8_t *pool = (uint8_t *)(p ? c.v : c.k);
                DEV_TRY(cb, dev_d2d(pool + (size_t)dst[i] * eb, pool + (size_t)src[i] * eb, eb, cb->s), "copy blocks");
                uint8_t *scl = (uint8_t *)(p ? c.v_scale : c.k_scale);
                if (scl)
                    DEV_TRY(cb, dev_d2d(scl + (size_t)dst[i] * sb, scl + (size_t)src[i] * sb, sb, cb->s),
                            "copy blocks");
            }
    }
    DEV_TRY(cb, dev_sync(cb->s), "copy blocks");
    return IFD_OK;
}

/* Blocks between the pool and host memory in the exchange layout of backend.h: per block,
 * per layer, K then V, each its elements then (INT8) its scales, as the pool stores them.
 * Any thread: blocks no step touches; its own stream, under xmu. */
static int b_kv_rw(backend *b, const int32_t *blocks, int32_t n, void *buf, int write) {
    cuda_backend *cb = (cuda_backend *)b;
    if (cb->dead) return IFD_ERR_DEVICE_LOST;
    for (int32_t i = 0; i < n; i++)
        if (blocks[i] < 0 || blocks[i] >= b->cfg.n_blocks) return IFD_ERR_INVALID;
    const model_hparams *hp = &b->m->hp;
    const size_t rows = (size_t)b->cfg.block_size * hp->n_kv_heads;
    const size_t eb = rows * hp->head_dim * (size_t)k_kv_elem_bytes(cb->kv_dtype), sb = rows * sizeof(float);
    pthread_mutex_lock(&cb->xmu);
    int rc = DEV_OK;
    if (!cb->xs_made) {
        rc = dev_stream_create(&cb->xs);
        cb->xs_made = rc == DEV_OK;
    }
    uint8_t *p = (uint8_t *)buf;
    for (int32_t i = 0; i < n && rc == DEV_OK; i++)
        for (uint32_t l = 0; l < hp->n_layers && rc == DEV_OK; l++) {
            const k_kv c = kv_layer(cb, l);
            for (int part = 0; part < 2 && rc == DEV_OK; part++) {
                uint8_t *pool = (uint8_t *)(part ? c.v : c.k) + (size_t)blocks[i] * eb;
                rc = write ? dev_h2d(pool, p, eb, cb->xs) : dev_d2h(p, pool, eb, cb->xs);
                p += eb;
                uint8_t *scl = (uint8_t *)(part ? c.v_scale : c.k_scale);
                if (scl && rc == DEV_OK) {
                    scl += (size_t)blocks[i] * sb;
                    rc = write ? dev_h2d(scl, p, sb, cb->xs) : dev_d2h(p, scl, sb, cb->xs);
                    p += sb;
                }
            }
        }
    if (rc == DEV_OK) rc = dev_sync(cb->xs);
    pthread_mutex_unlock(&cb->xmu);
    return rc == DEV_OK ? IFD_OK : IFD_ERR_INTERNAL;
}

static void b_destroy(backend *b) {
    cuda_backend *cb = (cuda_backend *)b;
    if (!cb) return;
    if (cb->xs_made) dev_stream_destroy(cb->xs);
    pthread_mutex_destroy(&cb->xmu);
    if (cb->s) (void)dev_sync(cb->s);
    if (cb->n_graphs)
        slog("info", "%s backend: %lld of %lld steps ran as decode-graph replays", IFD_CUDA_KIND,
             (long long)cb->n_replays, (long long)cb->n_steps);
    for (int32_t i = 0; i < cb->n_graphs; i++) dev_graph_destroy(cb->graphs[i]);
    free(cb->graphs);
    free(cb->graph_bucket);
    for (size_t i = 0; i < cb->n_allocs; i++) dev_free(cb->allocs[i]);
    free(cb->allocs);
    dev_host_free(cb->h_batch);
    dev_host_free(cb->sb.h_rows);
    dev_host_free(cb->sb.h_pen);
    dev_host_free(cb->sb.h_bias);
    dev_host_free(cb->sb.h_ban);
    dev_host_free(cb->sb.h_allow);
    dev_host_free(cb->sb.h_extra);
    dev_host_free(cb->sb.h_tok);
    dev_host_free(cb->sb.h_lp);
    free(cb->dlayers);
    if (cb->s) dev_stream_destroy(cb->s);
    free(cb);
}

/* kv_region NULL: the pool is device memory (a UCX peer reads it through kv_rw's host staging) */
static const backend_ops CUDA_OPS = {IFD_CUDA_KIND, b_forward, b_copy_blocks, b_destroy, b_sample, b_kv_rw, NULL};
static_assert(sizeof(samp_logprob) == sizeof(backend_logprob) && SAMP_MAX_TOP == BACKEND_SAMPLE_MAX_TOP,
              "kernels/sample.h and backend.h agree on the logprob rows");

/* ---- create --------------------------------------------------------------------------- */
static const float *up_vec(cuda_backend *cb, const float *h, size_t n, bool *ok) {
    if (!h) return NULL;
    const float *d = (const float *)upload(cb, h, n * sizeof(float));
    if (!d) *ok = false;
    return d;
}

/* The device copy of a matmul weight, in the kernels' prepared layout. */
static void up_mat(cuda_backend *cb, wmat *dst, const wmat *src, bool *ok) {
    *dst = *src;
    dst->data = NULL;
    if (!*ok) return;
    size_t bytes = k_matmul_prepared_bytes((int)src->type, src->n_rows, src->n_cols);
    void *h = bytes ? malloc(bytes) : NULL;
    if (!h || k_matmul_prepare(h, src->data, (int)src->type, src->n_rows, src->n_cols) != DEV_OK) {
        free(h);
        *ok = false;
        return;
    }
    dst->data = upload(cb, h, bytes);
    free(h);
    if (!dst->data) *ok = false;
}

/* Device sampling's buffers: per row its parameters, penalty list (distinct ids seen:
 * at most min(n_vocab, max_seq_len)), bias and ban lists, token and logprobs, the
 * kernel's work copy and a gather of the rows' logits. */
static size_t samp_pen_cap(const model *m, const backend_config *cfg) {
    return (size_t)IFD_MIN((int64_t)m->hp.n_vocab, (int64_t)cfg->max_seq_len);
}
static size_t samp_bytes(const model *m, const backend_config *cfg) {
    const size_t S = (size_t)cfg->max_batch_seqs, V = m->hp.n_vocab;
    return S * (sizeof(samp_row) + samp_pen_cap(m, cfg) * sizeof(samp_pen) +
                BACKEND_SAMPLE_MAX_BIAS * sizeof(samp_bias) + BACKEND_SAMPLE_MAX_BAN * 4 + 4 +
                (V + 31) / 32 * 4 + BACKEND_SAMPLE_MAX_EXTRA * 4 +
                (1 + SAMP_MAX_TOP) * sizeof(samp_logprob) + V * sizeof(float)) +
           samp_scratch_bytes((int32_t)S, (int32_t)V);
}
static bool samp_alloc(cuda_backend *cb) {
    const model *m = cb->base.m;
    const backend_config *cfg = &cb->base.cfg;
    struct cuda_backend::samp_bufs *q = &cb->sb;
    const size_t S = (size_t)cfg->max_batch_seqs, V = m->hp.n_vocab;
    q->pen_cap = samp_pen_cap(m, cfg);
    const size_t sz[] = {S * sizeof(samp_row), S * q->pen_cap * sizeof(samp_pen),
                         S * BACKEND_SAMPLE_MAX_BIAS * sizeof(samp_bias), S * BACKEND_SAMPLE_MAX_BAN * 4, S * 4,
                         S * (1 + SAMP_MAX_TOP) * sizeof(samp_logprob), S * ((V + 31) / 32) * 4,
                         S * BACKEND_SAMPLE_MAX_EXTRA * 4};
    void **h[] = {(void **)&q->h_rows, (void **)&q->h_pen, (void **)&q->h_bias, (void **)&q->h_ban,
                  (void **)&q->h_tok, (void **)&q->h_lp, (void **)&q->h_allow, (void **)&q->h_extra};
    void **d[] = {(void **)&q->d_rows, (void **)&q->d_pen, (void **)&q->d_bias, (void **)&q->d_ban,
                  (void **)&q->d_tok, (void **)&q->d_lp, (void **)&q->d_allow, (void **)&q->d_extra};
    for (size_t i = 0; i < IFD_ARRAY_LEN(sz); i++) {
        if (dev_host_alloc(h[i], sz[i]) != DEV_OK) return false;
        if (!(*d[i] = dalloc(cb, sz[i]))) return false;
    }
    const size_t wb = samp_scratch_bytes((int32_t)S, (int32_t)V);
    if (!(q->work = (float *)dalloc(cb, wb ? wb : 4))) return false;
    if (!(q->gather = (float *)dalloc(cb, S * V * sizeof(float)))) return false;
    return true;
}

/* What create allocates besides the KV pool: the weights' device copies and the
 * activations, logits, batch arrays and scratch of the largest step. */
static void plan_bytes(const model *m, const backend_config *cfg, size_t *weights, size_t *acts) {
    const model_hparams *hp = &m->hp;
    const size_t T = (size_t)cfg->max_batch_tokens, L = (size_t)cfg->max_logits, S = (size_t)cfg->max_batch_seqs;
    const size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim, q_dim = (size_t)hp->n_heads * hp->head_dim;
    const size_t rows = T > L ? T : L;
    size_t w = 0;
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const layer_weights *lw = &m->layers[l];
        const wmat *ws[] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_up, &lw->w_down};
        for (size_t i = 0; i < IFD_ARRAY_LEN(ws); i++)
            w += k_matmul_prepared_bytes((int)ws[i]->type, ws[i]->n_rows, ws[i]->n_cols);
        w += (2 * hp->dim + 2 * q_dim + 2 * kv_dim + 2 * hp->head_dim) * sizeof(float);
    }
    w += k_matmul_prepared_bytes((int)m->output.type, m->output.n_rows, m->output.n_cols);
    w += (size_t)m->tok_embd.n_rows * m->tok_embd.row_bytes + (hp->dim + hp->n_rot) * sizeof(float);
    const size_t xbw = hp->dim > q_dim ? hp->dim : q_dim;
    size_t a = (T * hp->dim + rows * xbw + 2 * T * q_dim + 2 * T * kv_dim + 3 * T * hp->ffn_dim) * sizeof(float);
    a += L * hp->n_vocab * sizeof(float);
    a += (3 * T + 2 * S + 1 + S * ((size_t)cfg->max_seq_len / cfg->block_size + 1) + L) * 4;
    const size_t max_cols = IFD_MAX(IFD_MAX((size_t)hp->dim, (size_t)hp->ffn_dim), q_dim);
    a += k_attention_scratch_bytes((int32_t)T, (int32_t)S, (int32_t)hp->n_heads, (int32_t)hp->head_dim,
                                   cfg->max_seq_len);
    a += k_matmul_scratch_bytes((int32_t)rows, (int64_t)max_cols);
    a += samp_bytes(m, cfg);
    a += 256 * 64; /* allocation rounding */
    /* the decode graphs' device-side state (instantiated nodes; ~12 a layer): a reserve */
    if (!cfg->graphs_off) a += (size_t)bucket_count(cfg) << 20;
    *weights = w;
    *acts = a;
}

/* The weight types kernels/ has matmul (k_matmul) and embedding (k_embed) kernels for:
 * every type quant.h's traits compute with, GGUF's and inferd's own --quantize group
 * types. A model holding another fails create here, by name, before anything is
 * allocated; the error lists this table, so it stays the one place to extend. */
static const ggml_type CUDA_TYPES[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,   GGML_TYPE_Q4_0,    GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,   GGML_TYPE_Q4_K,    GGML_TYPE_Q5_K,
    GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, IFD_TYPE_I8_G64, IFD_TYPE_I8_G128, IFD_TYPE_I4_G64,
    IFD_TYPE_I4_G128,
};
static bool type_has_kernels(ggml_type t) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(CUDA_TYPES); i++)
        if (CUDA_TYPES[i] == t) return true;
    return false;
}

static int check_types(const model *m, char *err, size_t err_bytes) {
    static const char *const LAYER_MATS[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                             "ffn_gate", "ffn_up", "ffn_down"};
    const wmat *bad = NULL;
    char name[96] = "";
    if (!type_has_kernels(m->tok_embd.type)) {
        bad = &m->tok_embd;
        snprintf(name, sizeof name, "token_embd.weight");
    } else if (!type_has_kernels(m->output.type)) {
        bad = &m->output;
        snprintf(name, sizeof name, "output.weight");
    }
    for (uint32_t l = 0; !bad && l < m->hp.n_layers; l++) {
        const layer_weights *lw = &m->layers[l];
        const wmat *ws[] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_up, &lw->w_down};
        for (size_t i = 0; !bad && i < IFD_ARRAY_LEN(ws); i++)
            if (!type_has_kernels(ws[i]->type)) {
                bad = ws[i];
                snprintf(name, sizeof name, "blk.%u.%s.weight", l, LAYER_MATS[i]);
            }
    }
    if (!bad) return IFD_OK;
    const ggml_type_info *ti = ggml_type_get((uint32_t)bad->type);
    char list[256] = "";
    size_t at = 0;
    for (size_t i = 0; i < IFD_ARRAY_LEN(CUDA_TYPES) && at < sizeof list; i++) {
        const ggml_type_info *ci = ggml_type_get((uint32_t)CUDA_TYPES[i]);
        const int k = snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", ci ? ci->name : "?");
        if (k < 0) break;
        at += (size_t)k;
    }
    return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED,
                    "%s backend: tensor '%s' has type %s, which has no CUDA kernels (the %s backend computes "
                    "%s; use --device cpu for this model)",
                    IFD_CUDA_KIND, name, ti ? ti->name : "?", IFD_CUDA_KIND, list);
}

/* KV budget: total x utilization, less what other processes use now, the weights and
 * the largest step's activations (vLLM's reading of --gpu-memory-utilization). */
static int kv_budget(const model *m, const backend_config *cfg, int64_t *kv_bytes, char *err, size_t err_bytes) {
    *kv_bytes = 0;
    int trc = check_types(m, err, err_bytes);
    if (trc != IFD_OK) return trc;
    if (dev_count() < 1)
        return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "%s backend: no CUDA device", IFD_CUDA_KIND);
    dev_props p;
    size_t fr = 0, tot = 0;
    if (dev_open(0, &p) != DEV_OK || dev_mem_info(&fr, &tot) != DEV_OK)
        return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "%s backend: %s", IFD_CUDA_KIND, dev_error());
    size_t w, a;
    plan_bytes(m, cfg, &w, &a);
    double util = cfg->gpu_memory_utilization > 0 && cfg->gpu_memory_utilization <= 1 ? cfg->gpu_memory_utilization : 0.9;
    double budget = (double)tot * util - (double)(tot - fr) - (double)w - (double)a;
    if (budget < 1)
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM,
                        "%s backend: %s has %zu MiB free of %zu; the weights take %zu MiB and the largest step %zu MiB: "
                        "nothing is left for the KV cache at --gpu-memory-utilization %.2f",
                        IFD_CUDA_KIND, p.name, fr >> 20, tot >> 20, w >> 20, a >> 20, util);
    *kv_bytes = (int64_t)budget;
    return IFD_OK;
}

static int create(backend **out, const model *m, const backend_config *cfg, char *err, size_t err_bytes) {
    *out = NULL;
    if (cfg->block_size < 1 || cfg->n_blocks < 1 || cfg->max_batch_tokens < 1 || cfg->max_batch_seqs < 1 ||
        cfg->max_logits < 1 || cfg->max_seq_len < 1)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "%s backend: invalid configuration", IFD_CUDA_KIND);
    int trc = check_types(m, err, err_bytes);
    if (trc != IFD_OK) return trc;
    if (dev_count() < 1)
        return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "%s backend: no CUDA device", IFD_CUDA_KIND);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (cb) pthread_mutex_init(&cb->xmu, NULL);
    if (!cb) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "%s backend: out of memory", IFD_CUDA_KIND);
    cb->base.ops = &CUDA_OPS;
    cb->base.m = m;
    cb->base.cfg = *cfg;
    int rc = dev_open(0, &cb->props);
    if (rc == DEV_OK) rc = dev_stream_create(&cb->s);
    if (rc != DEV_OK) {
        ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "%s backend: %s", IFD_CUDA_KIND, dev_error());
        b_destroy(&cb->base);
        return IFD_ERR_UNSUPPORTED;
    }
    const model_hparams *hp = &m->hp;
    const size_t T = (size_t)cfg->max_batch_tokens, L = (size_t)cfg->max_logits, S = (size_t)cfg->max_batch_seqs;
    const size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim, q_dim = (size_t)hp->n_heads * hp->head_dim;
    const size_t rows = T > L ? T : L;
    bool ok = true;

    /* the shadow model: the same shapes, device pointers */
    cb->dm = *m;
    cb->dlayers = (layer_weights *)calloc(hp->n_layers ? hp->n_layers : 1, sizeof(layer_weights));
    if (!cb->dlayers) ok = false;
    for (uint32_t l = 0; ok && l < hp->n_layers; l++) {
        const layer_weights *hw = &m->layers[l];
        layer_weights *dw = &cb->dlayers[l];
        dw->attn_norm = up_vec(cb, hw->attn_norm, hp->dim, &ok);
        dw->ffn_norm = up_vec(cb, hw->ffn_norm, hp->dim, &ok);
        dw->bq = up_vec(cb, hw->bq, q_dim, &ok);
        dw->bk = up_vec(cb, hw->bk, kv_dim, &ok);
        dw->bv = up_vec(cb, hw->bv, kv_dim, &ok);
        dw->q_norm = up_vec(cb, hw->q_norm, hp->head_dim, &ok);
        dw->k_norm = up_vec(cb, hw->k_norm, hp->head_dim, &ok);
        up_mat(cb, &dw->wq, &hw->wq, &ok);
        up_mat(cb, &dw->wk, &hw->wk, &ok);
        up_mat(cb, &dw->wv, &hw->wv, &ok);
        up_mat(cb, &dw->wo, &hw->wo, &ok);
        up_mat(cb, &dw->w_gate, &hw->w_gate, &ok);
        up_mat(cb, &dw->w_up, &hw->w_up, &ok);
        up_mat(cb, &dw->w_down, &hw->w_down, &ok);
    }
    cb->dm.layers = cb->dlayers;
    cb->dm.output_norm = up_vec(cb, m->output_norm, hp->dim, &ok);
    cb->dm.rope_freqs = up_vec(cb, m->rope_freqs, hp->n_rot / 2, &ok);
    /* the embedding rows are gathered in their GGUF layout */
    cb->dm.tok_embd.data = ok ? upload(cb, m->tok_embd.data, (size_t)m->tok_embd.n_rows * m->tok_embd.row_bytes) : NULL;
    if (!cb->dm.tok_embd.data) ok = false;
    up_mat(cb, &cb->dm.output, &m->output, &ok);
    cb->shadow = cb->base;
    cb->shadow.m = &cb->dm;

    /* KV pool, activations, logits, batch arrays, scratch */
    /* backend_kv_block_bytes's sizes: n_slots x n_kv_heads rows of backend_kv_row_bytes */
    const size_t kv_rows = (size_t)cfg->n_blocks * cfg->block_size * hp->n_kv_heads;
    cb->kv_dtype = (int32_t)cfg->kv_dtype;
    cb->kv_data_bytes = kv_rows * hp->head_dim * (size_t)k_kv_elem_bytes(cb->kv_dtype);
    cb->kv_pool_bytes = cb->kv_data_bytes + (cb->kv_dtype == K_KV_INT8 ? kv_rows * sizeof(float) : 0);
    if (cb->kv_dtype < K_KV_F32 || cb->kv_dtype > K_KV_FP8 ||
        cb->kv_pool_bytes != kv_rows * backend_kv_row_bytes(cfg->kv_dtype, (int32_t)hp->head_dim))
        ok = false;
    /* every pool's size is a multiple of 64 bytes (INT8: of 4), so each pool starts aligned for
     * the kernels' vector loads (head_dim % 32 == 0) */
    if (ok) cb->kv = (uint8_t *)dalloc(cb, cb->kv_pool_bytes * 2 * hp->n_layers);
    if (!cb->kv) ok = false;
    fwd_bufs *buf = &cb->buf;
    const size_t xbw = hp->dim > q_dim ? hp->dim : q_dim;
    float **bufs[] = {&buf->x, &buf->xb, &buf->q, &buf->k, &buf->v, &buf->att, &buf->gate, &buf->up, &buf->hb};
    const size_t sizes[] = {T * hp->dim, rows * xbw, T * q_dim, T * kv_dim, T * kv_dim, T * q_dim,
                            T * hp->ffn_dim, T * hp->ffn_dim, T * hp->ffn_dim};
    for (size_t i = 0; ok && i < IFD_ARRAY_LEN(bufs); i++)
        if (!(*bufs[i] = (float *)dalloc(cb, sizes[i] * sizeof(float)))) ok = false;
    if (ok && !(cb->logits = (float *)dalloc(cb, L * hp->n_vocab * sizeof(float)))) ok = false;
    const size_t mb = (size_t)cfg->max_seq_len / cfg->block_size + 1;
    cb->batch_ints = 3 * T + 2 * S + 1 + S * mb + L;
    if (ok && dev_host_alloc((void **)&cb->h_batch, cb->batch_ints * 4) != DEV_OK) ok = false;
    if (ok && !(cb->d_batch = (int32_t *)dalloc(cb, cb->batch_ints * 4))) ok = false;
    const size_t max_cols = IFD_MAX(IFD_MAX((size_t)hp->dim, (size_t)hp->ffn_dim), q_dim);
    cb->att_scratch_bytes = k_attention_scratch_bytes((int32_t)T, (int32_t)S, (int32_t)hp->n_heads,
                                                      (int32_t)hp->head_dim, cfg->max_seq_len);
    cb->mm_scratch_bytes = k_matmul_scratch_bytes((int32_t)rows, (int64_t)max_cols);
    if (ok && cb->att_scratch_bytes && !(cb->att_scratch = dalloc(cb, cb->att_scratch_bytes))) ok = false;
    if (ok && cb->mm_scratch_bytes && !(cb->mm_scratch = dalloc(cb, cb->mm_scratch_bytes))) ok = false;
    if (ok && !samp_alloc(cb)) ok = false;
    if (ok && dev_memset(cb->kv, 0, cb->kv_pool_bytes * 2 * hp->n_layers, cb->s) != DEV_OK)
        ok = false;
    if (ok && dev_sync(cb->s) != DEV_OK) ok = false;
    if (!ok) {
        size_t fr = 0, tot = 0;
        (void)dev_mem_info(&fr, &tot);
        ifd_errf(err, err_bytes, IFD_ERR_NOMEM,
                 "%s backend: cannot place the weights, KV pool and buffers on %s (%zu MiB free of %zu)%s%s",
                 IFD_CUDA_KIND, cb->props.name, fr >> 20, tot >> 20, dev_error()[0] ? ": " : "", dev_error());
        b_destroy(&cb->base);
        return IFD_ERR_NOMEM;
    }
    if (!cfg->graphs_off && (rc = capture_graphs(cb)) != IFD_OK) {
        /* a lost device fails create; anything else leaves every step eager */
        if (cb->dead) {
            ifd_errf(err, err_bytes, rc, "%s backend: the device was lost while capturing the decode graphs: %s",
                     IFD_CUDA_KIND, dev_error());
            b_destroy(&cb->base);
            return rc;
        }
        slog("warn", "%s backend: decode graphs not captured (%s); every step runs eagerly", IFD_CUDA_KIND,
             ifd_status_str(rc));
        for (int32_t i = 0; i < cb->n_graphs; i++) dev_graph_destroy(cb->graphs[i]);
        cb->n_graphs = 0;
    }
    slog("info", "%s backend on %s (sm_%d%d, %d SMs, %zu MiB); decode graphs: %s%d buckets up to %d sequences",
            IFD_CUDA_KIND, cb->props.name, cb->props.cc_major, cb->props.cc_minor, cb->props.sm_count,
            cb->props.total_mem >> 20, cb->n_graphs ? "" : "off, ", cb->n_graphs,
            cb->n_graphs ? cb->graph_bucket[cb->n_graphs - 1] : 0);
    *out = &cb->base;
    return IFD_OK;
}

IFD_NS_END

extern "C" int IFD_CUDA_ENTRY(backend_create)(backend **out, const model *m, const backend_config *cfg, char *err,
                                              size_t err_bytes) {
    return IFD_NS::create(out, m, cfg, err, err_bytes);
}
extern "C" int IFD_CUDA_ENTRY(device_count)(void) { return IFD_NS::dev_count(); }
/* Test-only doors (backend.h: backend_cuda_graph_replays, backend_cuda_kv_access). */
extern "C" int64_t IFD_CUDA_ENTRY(graph_replays)(const backend *b) {
    if (!b || b->ops != &IFD_NS::CUDA_OPS) return -1;
    return ((const IFD_NS::cuda_backend *)b)->n_replays;
}
extern "C" int IFD_CUDA_ENTRY(kv_access)(backend *b, float *host, size_t bytes, int upload) {
    if (!b || b->ops != &IFD_NS::CUDA_OPS) return IFD_ERR_INVALID;
    IFD_NS::cuda_backend *cb = (IFD_NS::cuda_backend *)b;
    if (bytes != cb->kv_pool_bytes * 2 * b->m->hp.n_layers) return IFD_ERR_INVALID;
    int rc = upload ? IFD_NS::dev_h2d(cb->kv, host, bytes, cb->s) : IFD_NS::dev_d2h(host, cb->kv, bytes, cb->s);
    if (rc == IFD_NS::DEV_OK) rc = IFD_NS::dev_sync(cb->s);
    return rc == IFD_NS::DEV_OK ? IFD_OK : IFD_ERR_INTERNAL;
}
extern "C" void IFD_CUDA_ENTRY(device_name)(char *buf, size_t cap) {
    IFD_NS::dev_props p;
    if (cap == 0) return;
    if (IFD_NS::dev_count() < 1 || IFD_NS::dev_open(0, &p) != IFD_NS::DEV_OK) snprintf(buf, cap, "(no device)");
    else snprintf(buf, cap, "%s", p.name);
}
extern "C" int IFD_CUDA_ENTRY(kv_budget)(const model *m, const backend_config *cfg, int64_t *kv_bytes, char *err,
                                         size_t err_bytes) {
    return IFD_NS::kv_budget(m, cfg, kv_bytes, err, err_bytes);
}
