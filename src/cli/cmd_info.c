/* cmd_info.c — `inferd info -m FILE`: architecture, hyper-parameters, tensor count and
 * types, vocabulary kind, chat template present or not. */
#include <stdio.h>
#include <string.h>

#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"

int cli_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            path = argv[++i];
        else {
            fprintf(stderr, "inferd info: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "inferd info: usage: -m FILE\n");
        return 2;
    }
    char err[512];
    model *m = NULL;
    if (model_load(&m, path, err, sizeof err)) {
        fprintf(stderr, "inferd info: %s\n", err);
        return 1;
    }
    const model_hparams *hp = &m->hp;
    printf("file:               %s\n", path);
    printf("name:               %s\n", m->name);
    printf("gguf version:       %u\n", m->gguf.version);
    printf("architecture:       %s\n", model_arch_name(hp->arch));
    printf("vocab size:         %u\n", hp->n_vocab);
    printf("context length:     %u\n", hp->n_ctx_train);
    printf("embedding length:   %u\n", hp->dim);
    printf("layers:             %u\n", hp->n_layers);
    printf("heads:              %u\n", hp->n_heads);
    printf("kv heads:           %u (GQA ratio %u)\n", hp->n_kv_heads, hp->n_heads / hp->n_kv_heads);
    printf("head dim:           %u\n", hp->head_dim);
    printf("ffn length:         %u\n", hp->ffn_dim);
    printf("rope:               %s, dims %u, base %g, freq scale %g%s\n",
           hp->rope_layout == ROPE_NORM ? "normal" : "neox", hp->n_rot, (double)hp->rope_base,
           (double)hp->rope_freq_scale, m->rope_freqs ? ", llama3 freq factors" : "");
    printf("rms eps:            %g\n", (double)hp->rms_eps);
    printf("tied embeddings:    %s\n", hp->tied_embeddings ? "yes" : "no");
    printf("qkv bias:           %s\n", hp->has_qkv_bias ? "yes" : "no");
    printf("qk norm:            %s\n", hp->has_qk_norm ? "yes" : "no");
    uint64_t counts[GGML_TYPE_COUNT_] = {0};
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++) counts[m->gguf.tensors[i].type]++;
    printf("tensors:            %llu (", (unsigned long long)m->gguf.n_tensors);
    bool first = true;
    for (int t = 0; t < GGML_TYPE_COUNT_; t++)
        if (counts[t]) {
            printf("%s%s: %llu", first ? "" : ", ", ggml_type_get((uint32_t)t)->name,
                   (unsigned long long)counts[t]);
            first = false;
        }
    printf(")\n");
    printf("weights:            %.2f MiB\n", (double)m->weight_bytes / (1024.0 * 1024.0));
    printf("tokenizer:          %s, %d tokens, bos %d%s, eos %d\n",
           tok_get_kind(m->tok) == TOK_KIND_SPM ? "llama (SentencePiece)" : "gpt2 (byte-level BPE)",
           tok_n_vocab(m->tok), tok_bos(m->tok), tok_add_bos(m->tok) ? " (added)" : "",
           tok_eos(m->tok));
    printf("chat template:      %s\n", m->chat_template ? "yes" : "no");
    model_destroy(m);
    return 0;
}
