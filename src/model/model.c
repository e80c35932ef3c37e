/* model.c — architecture hyper-parameters from GGUF metadata and weight binding.
 *
 * Every tensor the architecture needs is looked up by its llama.cpp name and checked
 * for type (quant_type_supported) and exact shape before use, so the forward pass can
 * trust the views. Small 1-D tensors (norms, biases, rope factors) are converted to f32
 * once. Runs once at startup on the loading thread. */
#include "model.h"
#include "model_awq.h"

#include <math.h>
#include <string.h>

#include "../util/common.h"
#include "quant.h"

const char *model_arch_name(model_arch a) {
    switch (a) {
    case ARCH_LLAMA:
        return "llama";
    case ARCH_QWEN2:
        return "qwen2";
    case ARCH_QWEN3:
        return "qwen3";
    }
    return "?";
}

typedef struct loader {
    model *m;
    char *err;
    size_t err_bytes;
    size_t vec_used, vec_cap; /* floats */
} loader;

static bool get_hp_u32(const model *m, const char *suffix, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
    return gguf_get_u32(&m->gguf, key, out);
}

static bool get_hp_f32(const model *m, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
    return gguf_get_f32(&m->gguf, key, out);
}

static int need_u32(loader *L, const char *suffix, uint32_t *out, uint32_t lo, uint32_t hi) {
    if (!get_hp_u32(L->m, suffix, out))
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT, "model: missing or invalid %s.%s",
                        L->m->hp.arch_name, suffix);
    if (*out < lo || *out > hi)
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                        "model: %s.%s = %u is out of range [%u, %u]", L->m->hp.arch_name, suffix,
                        *out, lo, hi);
    return IFD_OK;
}

static int read_hparams(loader *L) {
    model *m = L->m;
    model_hparams *hp = &m->hp;
    if (!gguf_get_cstr(&m->gguf, "general.architecture", hp->arch_name, sizeof hp->arch_name))
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                        "model: general.architecture missing");
    if (!strcmp(hp->arch_name, "llama"))
        hp->arch = ARCH_LLAMA;
    else if (!strcmp(hp->arch_name, "qwen2"))
        hp->arch = ARCH_QWEN2;
    else if (!strcmp(hp->arch_name, "qwen3"))
        hp->arch = ARCH_QWEN3;
    else
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_UNSUPPORTED,
                        "model: unsupported architecture '%s' (supported: llama, qwen2, qwen3)",
                        hp->arch_name);
    int rc;
    const uint32_t BIG = 1u << 20;
    if ((rc = need_u32(L, "embedding_length", &hp->dim, 1, BIG))) return rc;
    if ((rc = need_u32(L, "block_count", &hp->n_layers, 1, 1024))) return rc;
    if ((rc = need_u32(L, "feed_forward_length", &hp->ffn_dim, 1, BIG))) return rc;
    if ((rc = need_u32(L, "attention.head_count", &hp->n_heads, 1, 4096))) return rc;
    if (!get_hp_u32(m, "attention.head_count_kv", &hp->n_kv_heads)) hp->n_kv_heads = hp->n_heads;
    if (hp->n_kv_heads == 0 || hp->n_kv_heads > hp->n_heads || hp->n_heads % hp->n_kv_heads)
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                        "model: head_count_kv %u does not divide head_count %u", hp->n_kv_heads,
                        hp->n_heads);
    if (!get_hp_u32(m, "attention.key_length", &hp->head_dim)) {
        if (hp->dim % hp->n_heads)
            return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                            "model: embedding_length %u not divisible by head_count %u", hp->dim,
                            hp->n_heads);
        hp->head_dim = hp->dim / hp->n_heads;
    }
    uint32_t vlen;
    if (get_hp_u32(m, "attention.value_length", &vlen) && vlen != hp->head_dim)
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_UNSUPPORTED,
                        "model: value_length %u != key_length %u is not supported", vlen,
                        hp->head_dim);
    if (hp->head_dim == 0 || hp->head_dim > 1024 || hp->head_dim % 2)
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT, "model: bad head_dim %u",
                        hp->head_dim);
    if (!get_hp_u32(m, "rope.dimension_count", &hp->n_rot)) hp->n_rot = hp->head_dim;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                        "model: rope.dimension_count %u invalid for head_dim %u", hp->n_rot,
                        hp->head_dim);
    if (!get_hp_u32(m, "context_length", &hp->n_ctx_train) || hp->n_ctx_train == 0)
        hp->n_ctx_train = 2048;
    if (!get_hp_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps)) hp->rms_eps = 1e-5f;
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f))
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT, "model: bad rms epsilon %g",
                        (double)hp->rms_eps);
    if (!get_hp_f32(m, "rope.freq_base", &hp->rope_base)) hp->rope_base = 10000.0f;
    if (!(hp->rope_base > 1.0f && isfinite(hp->rope_base)))
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT, "model: bad rope.freq_base %g",
                        (double)hp->rope_base);
    hp->rope_freq_scale = 1.0f;
    char key[128], stype[32] = "";
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch_name);
    gguf_get_cstr(&m->gguf, key, stype, sizeof stype);
    float factor = 0.0f;
    if (!get_hp_f32(m, "rope.scaling.factor", &factor)) factor = 0.0f;
    if (!strcmp(stype, "linear")) {
        if (!(factor > 0.0f && isfinite(factor)))
            return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                            "model: linear rope scaling needs a positive rope.scaling.factor");
        hp->rope_freq_scale = 1.0f / factor;
    } else if (stype[0] && strcmp(stype, "none") && strcmp(stype, "llama3")) {
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_UNSUPPORTED,
                        "model: rope scaling type '%s' is not supported", stype);
    }
    hp->rope_layout = hp->arch == ARCH_LLAMA ? ROPE_NORM : ROPE_NEOX;
    hp->has_qkv_bias = hp->arch == ARCH_QWEN2;
    hp->has_qk_norm = hp->arch == ARCH_QWEN3;
    return IFD_OK;
}

/* Find a tensor and check its shape: ne0 (row length) and ne1 (rows; 0 for 1-D). */
static int find_tensor(loader *L, const char *name, int64_t ne0, int64_t ne1, bool optional,
                       const gguf_tensor **out) {
    *out = NULL;
    const gguf_tensor *t = gguf_find_tensor(&L->m->gguf, name);
    if (!t) {
        if (optional) return IFD_OK;
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT, "model: tensor '%s' missing", name);
    }
    bool ok = t->ne[0] == ne0 && t->ne[2] == 1 && t->ne[3] == 1 &&
              (ne1 == 0 ? (t->n_dims == 1 && t->ne[1] == 1) : t->ne[1] == ne1);
    if (!ok)
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                        "model: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                        name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)t->ne[3], (long long)ne0, (long long)(ne1 ? ne1 : 1));
    if (!quant_type_supported(t->type)) {
        const ggml_type_info *ti = ggml_type_get(t->type);
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_UNSUPPORTED,
                        "model: tensor '%s' has unsupported type %s", name, ti ? ti->name : "?");
    }
    /* inferd's own layouts only from a file that says it means them (gguf.h) */
    if (t->type >= IFD_TYPE_I8_G64 && t->type <= IFD_TYPE_I4_G128 &&
        !gguf_declares_ifd_layouts(&L->m->gguf))
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_UNSUPPORTED,
                        "model: tensor '%s' has unsupported type %s (inferd's own layout, but the "
                        "file does not declare %s = %d)",
                        name, ggml_type_get(t->type)->name, GGUF_KEY_IFD_LAYOUTS,
                        GGUF_IFD_LAYOUT_VERSION);
    *out = t;
    return IFD_OK;
}

static int bind_mat(loader *L, const char *name, int64_t rows, int64_t cols, bool optional,
                    wmat *w) {
    const gguf_tensor *t;
    int rc = find_tensor(L, name, cols, rows, optional, &t);
    if (rc || !t) return rc;
    const ggml_type_info *ti = ggml_type_get(t->type);
    w->type = t->type;
    w->n_rows = rows;
    w->n_cols = cols;
    w->row_bytes = (size_t)(cols / ti->block_size) * ti->type_bytes;
    w->data = t->data;
    L->m->weight_bytes += t->n_bytes;
    return IFD_OK;
}

/* A 1-D tensor of n floats, converted to f32 in the model's pool. */
static int bind_vec(loader *L, const char *name, int64_t n, bool optional, const float **out) {
    *out = NULL;
    const gguf_tensor *t;
    int rc = find_tensor(L, name, n, 0, optional, &t);
    if (rc || !t) return rc;
    const quant_traits *qt = quant_traits_of(t->type); /* find_tensor checked support */
    if (!qt || qt->block_size != 1 || qt->act != QUANT_ACT_F32) /* F32, F16, BF16 */
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_UNSUPPORTED,
                        "model: 1-D tensor '%s' must be F32, F16 or BF16", name);
    IFD_ASSERT(L->vec_used + (size_t)n <= L->vec_cap);
    float *dst = L->m->vec_pool + L->vec_used;
    quant_dequantize_row_ref(t->type, t->data, dst, n);
    L->vec_used += (size_t)n;
    L->m->weight_bytes += t->n_bytes;
    *out = dst;
    return IFD_OK;
}

static int bind_weights(loader *L) {
    model *m = L->m;
    model_hparams *hp = &m->hp;
    const int64_t dim = hp->dim, q_dim = (int64_t)hp->n_heads * hp->head_dim,
                  kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim, ffn = hp->ffn_dim;
    const gguf_tensor *emb = gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (!emb)
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                        "model: tensor 'token_embd.weight' missing");
    if (emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT, "model: bad vocabulary size %lld",
                        (long long)emb->ne[1]);
    hp->n_vocab = (uint32_t)emb->ne[1];

    /* f32 pool for all 1-D tensors */
    size_t per_layer = 2 * (size_t)dim + (hp->has_qkv_bias ? (size_t)(q_dim + 2 * kv_dim) : 0) +
                       (hp->has_qk_norm ? 2 * (size_t)hp->head_dim : 0);
    L->vec_cap = per_layer * hp->n_layers + (size_t)dim + hp->n_rot / 2;
    m->vec_pool = malloc(L->vec_cap * sizeof(float));
    m->layers = calloc(hp->n_layers, sizeof(layer_weights));
    if (!m->vec_pool || !m->layers)
        return ifd_errf(L->err, L->err_bytes, IFD_ERR_NOMEM, "model: out of memory");

    int rc;
    if ((rc = bind_mat(L, "token_embd.weight", hp->n_vocab, dim, false, &m->tok_embd))) return rc;
    if ((rc = bind_vec(L, "output_norm.weight", dim, false, &m->output_norm))) return rc;
    if ((rc = bind_mat(L, "output.weight", hp->n_vocab, dim, true, &m->output))) return rc;
    hp->tied_embeddings = m->output.data == NULL;
    if (hp->tied_embeddings) m->output = m->tok_embd;
    if ((rc = bind_vec(L, "rope_freqs.weight", hp->n_rot / 2, true, &m->rope_freqs))) return rc;
    if (m->rope_freqs)
        for (uint32_t i = 0; i < hp->n_rot / 2; i++)
            if (!(m->rope_freqs[i] > 0.0f && isfinite(m->rope_freqs[i])))
                return ifd_errf(L->err, L->err_bytes, IFD_ERR_FORMAT,
                                "model: rope_freqs.weight[%u] = %g is not a positive number", i,
                                (double)m->rope_freqs[i]);

    for (uint32_t l = 0; l < hp->n_layers; l++) {
        layer_weights *w = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%u." s, l), n)
        if ((rc = bind_vec(L, NAME("attn_norm.weight"), dim, false, &w->attn_norm))) return rc;
        if ((rc = bind_mat(L, NAME("attn_q.weight"), q_dim, dim, false, &w->wq))) return rc;
        if ((rc = bind_mat(L, NAME("attn_k.weight"), kv_dim, dim, false, &w->wk))) return rc;
        if ((rc = bind_mat(L, NAME("attn_v.weight"), kv_dim, dim, false, &w->wv))) return rc;
        if ((rc = bind_mat(L, NAME("attn_output.weight"), dim, q_dim, false, &w->wo))) return rc;
        if (hp->has_qkv_bias) {
            if ((rc = bind_vec(L, NAME("attn_q.bias"), q_dim, false, &w->bq))) return rc;
            if ((rc = bind_vec(L, NAME("attn_k.bias"), kv_dim, false, &w->bk))) return rc;
            if ((rc = bind_vec(L, NAME("attn_v.bias"), kv_dim, false, &w->bv))) return rc;
        }
        if (hp->has_qk_norm) {
            if ((rc = bind_vec(L, NAME("attn_q_norm.weight"), hp->head_dim, false, &w->q_norm)))
                return rc;
            if ((rc = bind_vec(L, NAME("attn_k_norm.weight"), hp->head_dim, false, &w->k_norm)))
                return rc;
        }
        if ((rc = bind_vec(L, NAME("ffn_norm.weight"), dim, false, &w->ffn_norm))) return rc;
        if ((rc = bind_mat(L, NAME("ffn_gate.weight"), ffn, dim, false, &w->w_gate))) return rc;
        if ((rc = bind_mat(L, NAME("ffn_up.weight"), ffn, dim, false, &w->w_up))) return rc;
        if ((rc = bind_mat(L, NAME("ffn_down.weight"), dim, ffn, false, &w->w_down))) return rc;
#undef NAME
    }
    return IFD_OK;
}

int model_open(model **out, const char *path, char *err, size_t err_bytes) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "model: out of memory");
    loader L = {.m = m, .err = err, .err_bytes = err_bytes};
    int rc = gguf_open(&m->gguf, path, err, err_bytes);
    if (rc) goto fail;
    if ((rc = read_hparams(&L))) goto fail;
    if ((rc = bind_weights(&L))) goto fail;
    gguf_str tmpl;
    if (gguf_get_str(&m->gguf, "tokenizer.chat_template", &tmpl)) {
        m->chat_template = malloc(tmpl.n + 1);
        if (!m->chat_template) {
            rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "model: out of memory");
            goto fail;
        }
        memcpy(m->chat_template, tmpl.s, tmpl.n);
        m->chat_template[tmpl.n] = 0;
    }
    if (!gguf_get_cstr(&m->gguf, "general.name", m->name, sizeof m->name) || !m->name[0]) {
        const char *base = strrchr(path, '/');
        snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
    }
    *out = m;
    return IFD_OK;
fail:
    model_destroy(m);
    return rc;
}

void model_destroy(model *m) {
    if (!m) return;
    if (m->tok_free) m->tok_free(m->tok);
    free(m->chat_template);
    free(m->layers);
    free(m->vec_pool);
    free(m->synth_weights);
    model_awq_free(m);
    free(m->quant_weights);
    gguf_close(&m->gguf);
    free(m);
}
