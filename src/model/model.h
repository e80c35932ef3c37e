/* model.h — a loaded model: hyper-parameters from GGUF metadata, weight views into the
 * mapped file, the tokenizer and the chat template.
 *
 * Supported architectures: llama (Llama 2/3, Mistral, TinyLlama, SmolLM), qwen2 (q/k/v
 * bias), qwen3 (per-head q/k RMSNorm). A model is immutable after model_load: safe to
 * read from any thread. */
#ifndef INFERD_MODEL_H
#define INFERD_MODEL_H
#include "../util/layer/model.h"

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "ggml_types.h"

struct tokenizer;

typedef enum model_arch {
    ARCH_LLAMA = 0,
    ARCH_QWEN2 = 1,
    ARCH_QWEN3 = 2,
} model_arch;

typedef enum rope_layout {
    ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]) — GGUF llama */
    ROPE_NEOX = 1, /* rotate (x[i], x[i + n_rot/2]) — qwen2/qwen3 */
} rope_layout;

typedef struct model_hparams {
    model_arch arch;
    char arch_name[32];
    uint32_t n_vocab;
    uint32_t n_ctx_train;  /* {arch}.context_length */
    uint32_t dim;          /* embedding_length */
    uint32_t n_layers;
    uint32_t n_heads;
    uint32_t n_kv_heads;
    uint32_t head_dim;     /* key_length (defaults to dim / n_heads) */
    uint32_t ffn_dim;
    uint32_t n_rot;        /* rope.dimension_count (defaults to head_dim) */
    float rms_eps;
    float rope_base;
    float rope_freq_scale; /* 1 / linear scaling factor (1 when none) */
    rope_layout rope_layout;
    bool tied_embeddings;  /* no output.weight: logits use token_embd */
    bool has_qkv_bias;     /* qwen2 */
    bool has_qk_norm;      /* qwen3 */
} model_hparams;

/* A 2-D weight matrix view: rows of n_cols elements, stored row-major in the file. */
typedef struct wmat {
    ggml_type type;
    int64_t n_rows;
    int64_t n_cols;
    size_t row_bytes;
    const void *data; /* into the mapping */
} wmat;

typedef struct layer_weights {
    const float *attn_norm; /* (dim) */
    wmat wq;                /* (n_heads*head_dim, dim) */
    wmat wk;                /* (n_kv_heads*head_dim, dim) */
    wmat wv;                /* (n_kv_heads*head_dim, dim) */
    const float *bq;        /* (n_heads*head_dim) qwen2, else NULL */
    const float *bk;        /* (n_kv_heads*head_dim) */
    const float *bv;        /* (n_kv_heads*head_dim) */
    const float *q_norm;    /* (head_dim) qwen3, else NULL */
    const float *k_norm;    /* (head_dim) */
    wmat wo;                /* (dim, n_heads*head_dim) */
    const float *ffn_norm;  /* (dim) */
    wmat w_gate;            /* (ffn_dim, dim) */
    wmat w_up;              /* (ffn_dim, dim) */
    wmat w_down;            /* (dim, ffn_dim) */
} layer_weights;

typedef struct model {
    gguf_file gguf;
    model_hparams hp;
    wmat tok_embd;            /* (n_vocab, dim) */
    const float *output_norm; /* (dim) */
    wmat output;              /* (n_vocab, dim); == tok_embd when tied */
    const float *rope_freqs;  /* (n_rot/2) per-frequency divisors (llama3 scaling), or NULL */
    layer_weights *layers;    /* n_layers */
    /* the vocabulary: NULL after model_open; model_load (tokenizer room) attaches it
     * and sets tok_free, which model_destroy calls (the model room does not use the
     * tokenizer: DESIGN.md's arrows run tokenizer -> model) */
    struct tokenizer *tok;
    void (*tok_free)(struct tokenizer *tok);
    char *chat_template;      /* tokenizer.chat_template, NUL-terminated, or NULL */
    char name[128];           /* general.name or the file's base name */
    /* private: f32 copies of the small 1-D tensors (norms, biases) */
    float *vec_pool;
    size_t weight_bytes; /* bytes of all weight tensors in the file */
} model;

/* Map the file, read the hyper-parameters, bind the weights, copy the chat template
 * and name. The vocabulary is not read (m->tok stays NULL): model_load in
 * ../tokenizer/tokenizer.h does both. */
int model_open(model **out, const char *path, char *err, size_t err_bytes);
void model_destroy(model *m); /* accepts NULL */

const char *model_arch_name(model_arch a);

#endif
