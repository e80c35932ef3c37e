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

typedef struct ifd_batch {
    int32_t n_tokens;
    const int32_t *token_ids;    /* [n_tokens] all sequences' new tokens, concatenated */
    const int32_t *positions;    /* [n_tokens] position of each token in its sequence */
    const int32_t *slot_mapping; /* [n_tokens] KV slot: block * block_size + offset */
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
} backend_config;

typedef struct backend backend;

typedef struct backend_ops {
    const char *name;
    /* Run one step. logits: [batch->n_logits][n_vocab] (host memory). */
    int (*forward)(backend *b, const ifd_batch *batch, float *logits);
    /* Copy whole KV blocks src[i] -> dst[i] in every layer (copy-on-write). */
    void (*copy_blocks)(backend *b, const int32_t *src, const int32_t *dst, int32_t n);
    void (*destroy)(backend *b);
} backend_ops;

struct backend {
    const backend_ops *ops;
    const model *m;
    backend_config cfg;
};

/* Bytes of KV cache one block takes (all layers, K and V) on the CPU backend. */
size_t backend_kv_block_bytes(const model *m, int32_t block_size);

int backend_cpu_create(backend **out, const model *m, const backend_config *cfg, char *err,
                       size_t err_bytes);

static inline int backend_forward(backend *b, const ifd_batch *batch, float *logits) {
    return b->ops->forward(b, batch, logits);
}
static inline void backend_destroy(backend *b) {
    if (b) b->ops->destroy(b);
}

#endif
