/* backend.h — the one interface between the engine and the compute backends.
 *
 * The engine builds one flat batch descriptor per step (vLLM / nano-vllm shape) and
 * calls forward(); the backend owns the weights' device copies (if any), the paged KV
 * pool and all scratch memory, sized once at create time — forward() allocates
 * nothing. A decode is a sequence with one new token, a prefill chunk a sequence with
 * many, a speculative verification a sequence with k+1: one forward handles any mix.
 *
 * Not thread-safe: one thread (the engine's) drives a backend. Backends may use their
 * own worker threads internally. */
#ifndef INFERD_BACKEND_H
#define INFERD_BACKEND_H
#include "../util/layer/backend.h"

#include <stddef.h>
#include <stdint.h>

#include "../model/model.h"

/* Which backend: --device auto|cuda|cpu|emu. BACKEND_EMU is the CUDA backend with its
 * kernels run on the CPU under the SIMT emulation (tests). BACKEND_AUTO is CUDA when a
 * device is present, else CPU (backend_resolve_kind). */
typedef enum backend_kind {
    BACKEND_AUTO = 0,
    BACKEND_CPU = 1,
    BACKEND_CUDA = 2,
    BACKEND_EMU = 3,
} backend_kind;

const char *backend_kind_name(backend_kind kind); /* "auto", "cpu", "cuda", "emu" */

/* Element type of the KV cache (--kv-cache-dtype). One (token, KV head) row of head_dim
 * elements is stored as:
 *   F32, F16, BF16: head_dim elements (f16 / bf16 rounded to nearest even on store);
 *   INT8: head_dim int8 then one f32 scale (amax / 127, symmetric; value = q * scale).
 *         The scale is f32, not f16: 4 bytes more a row (6% of a 64-wide row) buys a
 *         scale with no rounding of its own and no conversion in the attention loop;
 *   FP8:  head_dim FP8 E4M3 bytes (OCP "FN": bias 7, max 448, no infinities, NaN
 *         0x7F / 0xFF), rounded to nearest even, saturated to +-448 on store.
 * BACKEND_KV_AUTO is resolved per backend (backend_kv_dtype_resolve) before any
 * backend sees it. kv_dtype.h has the conversions. */
typedef enum backend_kv_dtype {
    BACKEND_KV_AUTO = -1,
    BACKEND_KV_F32 = 0,
    BACKEND_KV_F16 = 1,
    BACKEND_KV_BF16 = 2,
    BACKEND_KV_INT8 = 3,
    BACKEND_KV_FP8 = 4,
} backend_kv_dtype;
#define BACKEND_KV_N_DTYPES 5

/* "auto", "f32", "f16", "bf16", "int8", "fp8" ("?" for anything else). */
const char *backend_kv_dtype_name(backend_kv_dtype d);
/* NULL, "" or "auto": BACKEND_KV_AUTO; else one of the names above. IFD_OK, or
 * IFD_ERR_INVALID (with a message) for an unknown name. */
int backend_kv_dtype_parse(const char *name, backend_kv_dtype *out, char *err, size_t err_bytes);
/* AUTO: f16 on the CPU (its F16C conversions are cheap and f16 keeps 3 more mantissa
 * bits); bf16 on CUDA / EMU (f32's range, so no overflow of large activations, and a
 * shift to widen). Any other value is returned as it is. */
backend_kv_dtype backend_kv_dtype_resolve(backend_kind kind, backend_kv_dtype d);
/* IFD_OK when a backend of kind (AUTO resolved) stores dtype d (every backend stores
 * every dtype); IFD_ERR_INVALID with a message for a value outside the enum.
 * backend_create checks it too. */
int backend_kv_dtype_check(backend_kind kind, backend_kv_dtype d, char *err, size_t err_bytes);
/* Bytes of one (token, KV head) row of head_dim elements of dtype d (with INT8's scale). */
size_t backend_kv_row_bytes(backend_kv_dtype d, int32_t head_dim);

/* A slot_mapping entry that stores nothing: the token's K/V is not written to the KV
 * cache (a decode batch padded to a size a CUDA graph was captured for). The row is
 * computed like any other (its attention reads the cache as it is, keys 0..position
 * through its block table, so its output means nothing); no other row sees it. */
#define BACKEND_SLOT_NONE (-1)

typedef struct ifd_batch {
    int32_t n_tokens;
    const int32_t *token_ids;    /* [n_tokens] all sequences' new tokens, concatenated */
    const int32_t *positions;    /* [n_tokens] position of each token in its sequence */
    const int32_t *slot_mapping; /* [n_tokens] KV slot: block * block_size + offset, or
                                    BACKEND_SLOT_NONE (write nothing) */
    int32_t n_seqs;
    const int32_t *seq_start;    /* [n_seqs + 1] token range of sequence s: [seq_start[s], seq_start[s+1]) */
    const int32_t *context_len;  /* [n_seqs] tokens in the KV cache after this step */
    const int32_t *block_table;  /* [n_seqs][max_blocks_per_seq] */
    int32_t max_blocks_per_seq;
    int32_t n_logits;
    const int32_t *logits_index; /* [n_logits] token rows whose logits are wanted */
} ifd_batch;

typedef struct backend_config {
    int n_threads;            /* CPU worker threads (0 = all cores) */
    int32_t block_size;       /* tokens per KV block */
    int32_t n_blocks;         /* KV pool size in blocks */
    int32_t max_batch_tokens; /* most tokens in one forward */
    int32_t max_batch_seqs;   /* most sequences in one forward */
    int32_t max_logits;       /* most logits rows in one forward */
    int32_t max_seq_len;      /* longest sequence (positions < max_seq_len) */
    int reference;            /* CPU: use the plain C reference kernels */
    backend_kv_dtype kv_dtype; /* KV cache element type */
    /* KV sizing (backend_kv_budget; create ignores them) */
    double kv_cache_fraction;      /* CPU: of MemAvailable, (0, 1] */
    double gpu_memory_utilization; /* CUDA: of the device's free memory, (0, 1] */
    int graphs_off;                /* CUDA: run every step eagerly (debugging); 0: decode
                                      steps replay graphs captured at create */
    /* Optional, CPU only (tools: calibration): called on the backend's thread before the
     * matmuls of every layer with each linear input, x [n_rows][w->n_cols] (host
     * memory, valid during the call): w is the model's view of the first matrix fed by
     * it (q for q/k/v, gate for gate/up, o, down). */
    void (*observe)(void *user, const wmat *w, const float *x, int32_t n_rows);
    void *observe_user;
    /* Optional, CPU: run on this CPU backend's worker threads instead of starting new
     * ones (a draft model beside its target: the two never run at once, and two pools
     * of spinning workers on the same cores would slow both). It must outlive this one.
     * NULL, or a backend of another kind: a pool of its own. */
    const struct backend *share_threads;
    /* CPU only (0: all): the output matmul computes the first logits_rows vocabulary
     * rows, the rest of every logits row is -INFINITY. For a draft model (speculative
     * decoding): its proposals are argmax picks, so an id it cannot propose lowers the
     * acceptance, never changes the output; the lm head is a large share of a small
     * model's weights read per token. */
    int32_t logits_rows;
} backend_config;

typedef struct backend backend;

/* ---- sampling on the device (backend_ops.sample) ----------------------------------
 * One token drawn from one row of the last forward's logits, with the engine sampler's
 * pipeline and arithmetic (src/engine/sampler.h), so the token is exactly the one
 * sampler_sample_at would return for the same row: the logits never travel to the host. */
#define BACKEND_SAMPLE_MAX_TOP 20     /* top logprobs per row (LOGPROBS_MAX_TOP) */
#define BACKEND_SAMPLE_MAX_BIAS 1024  /* logit_bias entries per row (the engine's limit) */
#define BACKEND_SAMPLE_MAX_BAN 256    /* banned ids per row */
#define BACKEND_SAMPLE_MAX_EXTRA 65   /* allowed-anyway ids per row (SAMP_MAX_EXTRA) */
typedef struct backend_bias {
    int32_t id;
    float bias;
} backend_bias; /* the layout of sampler_bias */
typedef struct backend_logprob {
    int32_t id;
    float logprob;
} backend_logprob; /* the layout of logprob_entry / inferd_token_logprob */
typedef struct backend_sample_row {
    int32_t logits_row; /* row of the last forward's logits, < its n_logits */
    float temperature, top_p, min_p;
    int32_t top_k;
    float repetition_penalty, presence_penalty, frequency_penalty;
    int32_t n_logprobs;     /* < 0: none; else top N <= BACKEND_SAMPLE_MAX_TOP */
    uint64_t key, position; /* the counter-based RNG (ifd_rng key, counter) */
    /* penalties: the distinct ids seen (prompt + output) and dense per-id counts of
     * generated tokens ([n_vocab]); n_seen 0 / NULL: none */
    const int32_t *seen;
    int32_t n_seen;
    const int32_t *count;
    const backend_bias *bias; /* [n_bias] applied in order */
    int32_t n_bias;
    const int32_t *ban; /* [n_ban] ids never drawn */
    int32_t n_ban;
    /* constrained decoding: the grammar's mask ((n_vocab + 31) / 32 words, bit id set:
     * allowed), NULL none; ids allowed anyway ([n_allow_extra] <= BACKEND_SAMPLE_MAX_EXTRA:
     * the stop tokens where the grammar may end). Host memory, read during the call. */
    const uint32_t *allow;
    const int32_t *allow_extra;
    int32_t n_allow_extra;
} backend_sample_row;

typedef struct backend_ops {
    const char *name;
    /* Run one step. logits: [batch->n_logits][n_vocab] (host memory), or NULL when the
     * backend has sample(): the logits stay on the device for it. IFD_OK or a
     * negative status: the step failed (its requests fail, the backend stays usable),
     * or IFD_ERR_DEVICE_LOST: the device is gone for good (a sticky CUDA error) and
     * every later forward / copy_blocks returns it too (the engine dies). */
    int (*forward)(backend *b, const ifd_batch *batch, float *logits);
    /* Copy whole KV blocks src[i] -> dst[i] in every layer (copy-on-write). IFD_OK or a
     * negative status (the copies may be partly done: the destinations are garbage);
     * IFD_ERR_DEVICE_LOST as forward's. */
    int (*copy_blocks)(backend *b, const int32_t *src, const int32_t *dst, int32_t n);
    void (*destroy)(backend *b); /* accepts a half-built backend */
    /* Optional (NULL: the engine samples on the host from forward's logits). Draw
     * tokens[i] from row rows[i].logits_row of the last forward (run with logits ==
     * NULL), i < n <= cfg.max_batch_seqs; lp: [n][1 + BACKEND_SAMPLE_MAX_TOP] or NULL:
     * lp[i][0] = (token, its logprob), lp[i][1..] the top n_logprobs, for rows that
     * ask. Statuses as forward's. */
    int (*sample)(backend *b, const backend_sample_row *rows, int32_t n, int32_t *tokens,
                  backend_logprob *lp);
    /* Optional (NULL: the engine cannot hand KV to another instance). Copy whole KV
     * blocks between the pool and host memory buf in the exchange layout: block after
     * block, each its layers in order, each layer the block's K then its V exactly as
     * the pool stores them (backend_kv_block_bytes per block in all). write: buf ->
     * pool, else pool -> buf. Ids are checked (IFD_ERR_INVALID). May run on any
     * thread, concurrently with forward, for blocks no step reads or writes meanwhile
     * (a lease's, an import's). IFD_OK or a negative status. */
    int (*kv_rw)(backend *b, const int32_t *blocks, int32_t n, void *buf, int write);
    /* Optional (NULL: the pool is not in host memory). The whole pool as one host
     * allocation: *base, *bytes; block b of layer l's K at base + seg_off[2l] + b *
     * *stride, its V at base + seg_off[2l + 1] + b * *stride, each of the exchange
     * layout's per-layer bytes (seg_off has 2 * n_layers entries). IFD_OK. */
    int (*kv_region)(backend *b, void **base, size_t *bytes, size_t *seg_off, size_t *stride);
} backend_ops;

struct backend {
    const backend_ops *ops;
    const model *m;
    backend_config cfg;
};

/* ---- the factory (backend.c) ------------------------------------------------------- */

/* kind, or for BACKEND_AUTO: BACKEND_CUDA when backend_cuda_device_count() > 0, else
 * BACKEND_CPU. */
backend_kind backend_resolve_kind(backend_kind kind);

/* Create a backend of kind (AUTO resolved as above) for m; the choice and the device
 * name are logged. IFD_ERR_UNSUPPORTED (with a message) for CUDA / EMU in a build
 * without the CUDA backend. m must outlive the backend. */
int backend_create(backend **out, backend_kind kind, const model *m, const backend_config *cfg,
                   char *err, size_t err_bytes);

/* ---- memory queries and KV sizing, per kind (AUTO is resolved first) ----------------- */

/* Bytes of KV cache one block takes (all layers, K and V) on a backend of kind, dtype
 * resolved as backend_kv_dtype_resolve does. */
size_t backend_kv_block_bytes(backend_kind kind, const model *m, int32_t block_size,
                              backend_kv_dtype dtype);

/* Bytes the KV pool may take on a backend of kind for model m under cfg (block_size,
 * the batch limits, kv_cache_fraction, gpu_memory_utilization). CPU: kv_cache_fraction
 * of /proc/meminfo's MemAvailable (0 when it cannot be read). CUDA / EMU: the device's
 * free memory x gpu_memory_utilization, less the weights and the largest step's
 * activations. Returns IFD_OK or a negative status with a message. */
int backend_kv_budget(backend_kind kind, const model *m, const backend_config *cfg,
                      int64_t *kv_bytes, char *err, size_t err_bytes);

/* Log one line at engine start: the KV cache's dtype, bytes per token (all layers, K
 * and V), the pool's blocks and the tokens they hold (n_blocks * block_size). */
void backend_log_kv(backend_kind kind, const model *m, backend_kv_dtype dtype, int32_t block_size,
                    int64_t n_blocks, int64_t budget_bytes);

/* ---- the backends ---------------------------------------------------------------------- */

int backend_cpu_create(backend **out, const model *m, const backend_config *cfg, char *err,
                       size_t err_bytes);
/* CPU side of the KV budget: MemAvailable bytes (0 when unknown). */
int64_t backend_cpu_mem_available(void);

#ifdef INFERD_HAVE_CUDA_BACKEND
/* src/backend/cuda/: emulated != 0 runs the kernels under the SIMT emulation. */
int backend_cuda_create(backend **out, const model *m, const backend_config *cfg, int emulated,
                        char *err, size_t err_bytes);
/* Visible CUDA devices (0 when none or no driver). */
int backend_cuda_device_count(void);
/* Name of device 0 into buf (NUL-terminated); emulated: the emulation's name. */
void backend_cuda_device_name(int emulated, char *buf, size_t cap);
/* The CUDA side of backend_kv_budget (same contract). */
int backend_cuda_kv_budget(const model *m, const backend_config *cfg, int emulated,
                           int64_t *kv_bytes, char *err, size_t err_bytes);
/* Test-only. Decode steps b has run as CUDA-graph replays (-1: b is not a CUDA / EMU
 * backend). */
int64_t backend_cuda_graph_replays(const backend *b);
/* Test-only. Copy b's whole KV pool (every layer's K then V, [n_slots][kv_dim] f32 each;
 * bytes must be its exact size) to host (upload 0) or from it (upload 1). */
int backend_cuda_kv_access(backend *b, float *host, size_t bytes, int upload);
#endif

static inline int backend_forward(backend *b, const ifd_batch *batch, float *logits) {
    return b->ops->forward(b, batch, logits);
}
static inline int backend_copy_blocks(backend *b, const int32_t *src, const int32_t *dst,
                                      int32_t n) {
    return b->ops->copy_blocks(b, src, dst, n);
}
static inline void backend_destroy(backend *b) {
    if (b) b->ops->destroy(b);
}

#endif
