/* cmd_quantize.c — `inferd quantize IN.gguf OUT.gguf --type TYPE [options]`: a copy of
 * a GGUF file with its linear weights quantized offline.
 *
 * The selection and the conversion are model_quantize's (model_quant.h), so a file
 * quantized here holds the very bytes --quantize would make at load and gives the
 * same logits. Every metadata key of IN is copied as it is (tokenizer, chat template
 * included) except general.file_type, which says the new type, and inferd's
 * inferd.quantization.* keys, which are written anew: the type, bits and group size,
 * the kept layers, whether the lm head was quantized, and — when a tensor has one of
 * inferd's own layouts — the declaration the reader requires (gguf.h). Tensors keep
 * IN's order; OUT appears only once it is complete. CLI thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/gguf.h"
#include "../model/model.h"
#include "../model/model_quant.h"
#include "../model/quant.h"
#include "../engine/engine_calib.h"
#include "../model/model_awq.h"
#include "../server/config.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"
#include "quant_report.h"

/* --type choices, in the table's order */
typedef struct qtype {
    const char *name;
    int bits;     /* 8 / 4: model_quantize at the group size; 0: model_quantize_to(t) */
    ggml_type t;  /* the ggml type; GGML_TYPE_COUNT_ for int8 / int4 */
    uint32_t ftype; /* general.file_type (llama.cpp's LLAMA_FTYPE_MOSTLY_*) */
} qtype;

static const qtype TYPES[] = {
    /* q8_0 is int8 at group 32 (quant_quantize_row_int8 makes Q8_0 blocks whose q are
     * rounded against the stored fp16 scale): the bytes --quantize int8
     * --quantize-group-size 32 makes at load, so the two give the same logits */
    {"q8_0", 8, GGML_TYPE_Q8_0, 7}, {"q4_0", 0, GGML_TYPE_Q4_0, 2},
    {"q4_k", 0, GGML_TYPE_Q4_K, 14}, /* MOSTLY_Q4_K_S: every selected tensor Q4_K */
    {"q5_k", 0, GGML_TYPE_Q5_K, 16}, /* MOSTLY_Q5_K_S */
    {"q6_k", 0, GGML_TYPE_Q6_K, 18}, {"int8", 8, GGML_TYPE_COUNT_, 0},
    {"int4", 4, GGML_TYPE_COUNT_, 0},
};

/* general.file_type of inferd's own layouts: no llama.cpp ftype exists for them, so a
 * value far past llama.cpp's (which stop under 64): 1024 + the IFD_TYPE_* id */
#define IFD_FTYPE_BASE 1024u

static uint32_t ftype_of(ggml_type t, uint32_t given) {
    if (given) return given;
    switch (t) {
    case GGML_TYPE_Q8_0: return 7;
    case GGML_TYPE_Q4_1: return 3;
    default: return IFD_FTYPE_BASE + (uint32_t)t;
    }
}

static bool is_ifd_type(ggml_type t) { return t >= IFD_TYPE_I8_G64 && t <= IFD_TYPE_I4_G128; }

/* the model's view of a tensor by its name, or NULL for tensors it does not bind as
 * matrices */
static const wmat *mat_by_name(const model *m, gguf_str name) {
    if (gguf_str_eq(name, "token_embd.weight")) return &m->tok_embd;
    if (gguf_str_eq(name, "output.weight") && !m->hp.tied_embeddings) return &m->output;
    static const char *const SUFFIX[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                         "ffn_gate", "ffn_up", "ffn_down"};
    for (uint32_t l = 0; l < m->hp.n_layers; l++) {
        const layer_weights *w = &m->layers[l];
        const wmat *ws[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (size_t i = 0; i < IFD_ARRAY_LEN(SUFFIX); i++) {
            char n[96];
            snprintf(n, sizeof n, "blk.%u.%s.weight", l, SUFFIX[i]);
            if (gguf_str_eq(name, n)) return ws[i];
        }
    }
    return NULL;
}

/* The f32 vector the model holds for a tensor AWQ may have rescaled (the norms before
 * q/k/v and gate/up, V's bias), or NULL. */
static const float *vec_by_name(const model *m, gguf_str name) {
    for (uint32_t l = 0; l < m->hp.n_layers; l++) {
        const layer_weights *w = &m->layers[l];
        char n[96];
        snprintf(n, sizeof n, "blk.%u.attn_norm.weight", l);
        if (gguf_str_eq(name, n)) return w->attn_norm;
        snprintf(n, sizeof n, "blk.%u.ffn_norm.weight", l);
        if (gguf_str_eq(name, n)) return w->ffn_norm;
        snprintf(n, sizeof n, "blk.%u.attn_v.bias", l);
        if (gguf_str_eq(name, n)) return w->bv;
    }
    return NULL;
}

static gguf_str S(const char *s) { return (gguf_str){.n = strlen(s), .s = s}; }

static gguf_kv kv_u32(const char *key, uint32_t v) {
    return (gguf_kv){.key = S(key), .val = {.type = GGUF_TYPE_UINT32, .v.u64 = v}};
}

int cli_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int npos = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            config_help(CFG_CMD_QUANTIZE, stdout);
            return 0;
        }
    while (1 + npos < argc && npos < 2 && argv[1 + npos][0] != '-') npos++;
    if (npos < 2) {
        fprintf(stderr, "inferd quantize: usage: inferd quantize IN.gguf OUT.gguf --type "
                        "q8_0|q4_0|q4_k|q5_k|q6_k|int8|int4 [options] (see --help)\n");
        return 2;
    }
    in = argv[1];
    out = argv[2];
    server_config c;
    config_init(&c, CFG_CMD_QUANTIZE);
    char err[512] = "";
    char **rest = malloc((size_t)argc * sizeof *rest);
    if (!rest) return 1;
    rest[0] = argv[0];
    for (int i = 3; i < argc; i++) rest[i - 2] = argv[i];
    const int lrc = config_load(&c, argc - 2, rest, err, sizeof err);
    free(rest);
    int ret = 2;
    model *m = NULL;
    bool *keep = NULL;
    gguf_kv *kvs = NULL;
    gguf_wtensor *ts = NULL;
    int32_t *kept = NULL;
    if (lrc != 0) {
        if (lrc > 0) ret = 0;
        else fprintf(stderr, "inferd quantize: %s\n", err);
        goto done;
    }
    if (!config_given(&c, "type")) {
        fprintf(stderr, "inferd quantize: --type is required (q8_0|q4_0|q4_k|q5_k|q6_k|int8|int4)\n");
        goto done;
    }
    const qtype *qt = &TYPES[c.quant_type];
    static const int GROUPS[] = {32, 64, 128};
    const bool is_int = qt->t == GGML_TYPE_COUNT_; /* int8 / int4 */
    const int group = qt->t == GGML_TYPE_Q8_0 ? 32 : GROUPS[c.quantize_group_size];
    if (!is_int && config_given(&c, "quantize-group-size")) {
        fprintf(stderr, "inferd quantize: --quantize-group-size applies to int8 / int4 only\n");
        goto done;
    }
    ret = 1;
    if (!qt->bits) {
        const quant_traits *tr = quant_traits_of(qt->t);
        if (!tr || !tr->quantize_row) {
            fprintf(stderr, "inferd quantize: --type %s: this build has no %s quantizer yet\n",
                    qt->name, ggml_type_get((uint32_t)qt->t)->name);
            goto done;
        }
    }
    if (c.quant_report && !c.calibration) {
        fprintf(stderr, "inferd quantize: --report needs --calibration TEXT\n");
        ret = 2;
        goto done;
    }
    /* --calibration tokenizes the text: the vocabulary is loaded too */
    if (c.calibration ? model_load(&m, in, err, sizeof err) : model_open(&m, in, err, sizeof err)) {
        fprintf(stderr, "inferd quantize: %s\n", err);
        goto done;
    }
    const uint32_t L = m->hp.n_layers;
    keep = calloc(L, sizeof *keep);
    kept = malloc((L ? L : 1) * sizeof *kept);
    if (!keep || !kept) goto nomem;
    if (model_quant_parse_layers(c.quantize_keep_layers, L, keep, err, sizeof err)) {
        fprintf(stderr, "inferd quantize: %s\n", err);
        ret = 2;
        goto done;
    }
    size_t before[GGML_TYPE_COUNT_], after[GGML_TYPE_COUNT_];
    model_weight_bytes_by_type(m, before);
    const model_quant_opts qo = {.bits = qt->bits, .group_size = group, .lm_head = c.quantize_lm_head,
                                 .keep = keep, .n_threads = (int)c.threads,
                                 .requantize = c.allow_requantize};
    const ggml_type to = qt->bits ? quant_int_type(qt->bits, group) : qt->t;
    if (c.quant_report) {
        const quant_report_opts ro = {.model_path = in, .calibration = c.calibration, .bits = qt->bits,
                                      .type = to, .qo = qo, .budget_pct = c.ppl_budget};
        if (quant_report(&ro, stdout)) goto done;
    }
    const double t0 = ifd_now_s();
    int qrc = c.calibration ? engine_calibrate(m, c.calibration, to, keep, (int)c.threads, err, sizeof err) : 0;
    if (!qrc)
        qrc = qt->bits ? model_quantize(m, &qo, err, sizeof err)
                       : model_quantize_to(m, &qo, qt->t, err, sizeof err);
    model_awq_trim(m);
    if (qrc) {
        fprintf(stderr, "inferd quantize: %s\n", err);
        goto done;
    }
    const double secs = ifd_now_s() - t0;
    model_weight_bytes_by_type(m, after);

    /* the tensors: IN's order, converted ones from the model's views */
    const gguf_file *f = &m->gguf;
    ts = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *ts);
    if (!ts) goto nomem;
    bool any_ifd = false;
    size_t file_bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        gguf_wtensor *w = &ts[i];
        w->name = t->name;
        w->n_dims = t->n_dims;
        memcpy(w->ne, t->ne, sizeof w->ne);
        w->type = t->type;
        w->data = t->data;
        const wmat *v = mat_by_name(m, t->name);
        const float *vec = c.calibration ? vec_by_name(m, t->name) : NULL;
        if (v && v->data != t->data) { /* converted (or rescaled by AWQ) */
            w->type = v->type;
            w->data = v->data;
            file_bytes += v->row_bytes * (size_t)v->n_rows;
        } else if (vec) { /* AWQ divided it by its input's scales: the model's f32 copy */
            w->type = GGML_TYPE_F32;
            w->data = vec;
            file_bytes += (size_t)t->ne[0] * sizeof(float);
        } else {
            file_bytes += t->n_bytes;
        }
        any_ifd = any_ifd || is_ifd_type(w->type);
    }
    /* the kvs: IN's, with general.file_type and inferd.quantization.* anew */
    const size_t n_new = 9;
    kvs = calloc(f->n_kv + n_new, sizeof *kvs);
    if (!kvs) goto nomem;
    size_t nk = 0;
    bool ftype_done = false;
    const uint32_t ftype = m->n_quantized ? ftype_of(to, qt->ftype) : 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->key.n >= 20 && !memcmp(kv->key.s, "inferd.quantization.", 20)) continue;
        if (gguf_str_eq(kv->key, "general.file_type")) {
            if (m->n_quantized) {
                kvs[nk++] = kv_u32("general.file_type", ftype);
                ftype_done = true;
                continue;
            }
        }
        kvs[nk++] = *kv;
    }
    if (m->n_quantized && !ftype_done) kvs[nk++] = kv_u32("general.file_type", ftype);
    const char *tn = ggml_type_get((uint32_t)to)->name;
    kvs[nk++] = (gguf_kv){.key = S("inferd.quantization.type"),
                          .val = {.type = GGUF_TYPE_STRING, .v.str = S(tn)}};
    if (is_int) {
        kvs[nk++] = kv_u32("inferd.quantization.bits", (uint32_t)qt->bits);
        kvs[nk++] = kv_u32("inferd.quantization.group_size", (uint32_t)group);
    }
    uint32_t n_kept = 0;
    for (uint32_t l = 0; l < L; l++)
        if (keep[l]) kept[n_kept++] = (int32_t)l;
    kvs[nk++] = (gguf_kv){.key = S("inferd.quantization.kept_layers"),
                          .val = {.type = GGUF_TYPE_ARRAY,
                                  .v.arr = {.type = GGUF_TYPE_INT32, .n = n_kept,
                                            .data = (const uint8_t *)kept}}};
    kvs[nk++] = (gguf_kv){.key = S("inferd.quantization.lm_head"),
                          .val = {.type = GGUF_TYPE_BOOL, .v.b = c.quantize_lm_head}};
    if (c.calibration) { /* the scales are folded into the weights: this only says so */
        const char *base = strrchr(c.calibration, '/');
        kvs[nk++] = (gguf_kv){.key = S("inferd.quantization.awq_calibration"),
                              .val = {.type = GGUF_TYPE_STRING, .v.str = S(base ? base + 1 : c.calibration)}};
    }
    if (any_ifd) kvs[nk++] = kv_u32(GGUF_KEY_IFD_LAYOUTS, GGUF_IFD_LAYOUT_VERSION);
    if (gguf_write(out, kvs, nk, ts, (size_t)f->n_tensors, f->alignment, err, sizeof err)) {
        fprintf(stderr, "inferd quantize: %s\n", err);
        goto done;
    }
    char text[512];
    model_weight_bytes_str(before, after, text, sizeof text);
    fprintf(stderr,
            "inferd quantize: %s -> %s: %u matrices to %s in %.2f s, %u left as they are; "
            "weights %s; tensor data %.2f MiB\n",
            in, out, m->n_quantized, tn, secs, m->n_quant_skipped, text,
            (double)file_bytes / (1024.0 * 1024.0));
    ret = 0;
    goto done;
nomem:
    fprintf(stderr, "inferd quantize: out of memory\n");
    ret = 1;
done:
    free(kvs);
    free(ts);
    free(kept);
    free(keep);
    model_destroy(m);
    server_config_deinit(&c);
    return ret;
}
