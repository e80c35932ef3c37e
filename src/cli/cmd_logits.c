/* cmd_logits.c — `inferd logits -m FILE --ids "1 2 3" [--kv-cache-dtype D] [--device cpu|cuda|emu]`: one line
 * per position with the full vocabulary's logits (%.9g), ids used verbatim (no BOS).
 * The contract the NumPy cross-check tests use. The KV cache is f32 unless
 * --kv-cache-dtype says otherwise: this tool checks the forward's arithmetic, and a
 * reduced-precision cache (the engine's default elsewhere) is a separate, lossy choice.
 * --quantize int8|int4 (with --quantize-group-size, --quantize-lm-head,
 * --quantize-keep-layers) quantizes on load as the engine commands do. --device: the CPU
 * unless told otherwise (cuda, or emu: the CUDA kernels under the SIMT emulation).
 *
 * It runs the engine (non-threaded, one sequence) with a prompt-logprobs request of
 * max_tokens 0, so every prompt position's logits row is computed by the same path a
 * served request takes (chunked prefill, paged KV), and reads the rows through the
 * engine's private logits tap (engine/engine_tap.h). CLI thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/engine_tap.h"
#include "../util/common.h"
#include "cli.h"
#include "cli_util.h"

typedef struct rows {
    float *v;       /* [n][n_vocab] */
    int32_t n, n_vocab;
    bool *seen;     /* [n] */
    bool bad;
} rows;

static void on_row(void *user, uint64_t id, int32_t pos, const float *row, int32_t n_vocab) {
    (void)id;
    rows *r = user;
    if (pos < 0 || pos >= r->n || n_vocab != r->n_vocab) {
        r->bad = true;
        return;
    }
    memcpy(r->v + (size_t)pos * n_vocab, row, (size_t)n_vocab * sizeof(float));
    r->seen[pos] = true;
}

typedef struct fin {
    bool done;
    inferd_finish_reason why;
} fin;

static void on_out(const inferd_output *o, void *user) {
    fin *f = user;
    if (o->finished) {
        f->done = true;
        f->why = o->finish_reason;
    }
}

int cli_logits(int argc, char **argv) {
    const char *path = NULL, *ids_s = NULL, *kv_dtype = "f32", *keep = NULL;
    int bits = 0, group = 128;
    bool lm_head = false;
    inferd_device device = INFERD_DEVICE_CPU;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc)
            ids_s = argv[++i];
        else if (!strcmp(argv[i], "--kv-cache-dtype") && i + 1 < argc)
            kv_dtype = argv[++i];
        else if (!strcmp(argv[i], "--quantize") && i + 1 < argc) {
            const char *q = argv[++i];
            bits = !strcmp(q, "int8") ? 8 : !strcmp(q, "int4") ? 4 : !strcmp(q, "none") ? 0 : -1;
            if (bits < 0) {
                fprintf(stderr, "inferd logits: --quantize: expected one of none|int8|int4\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--quantize-group-size") && i + 1 < argc) {
            group = atoi(argv[++i]);
            if (group != 32 && group != 64 && group != 128) {
                fprintf(stderr, "inferd logits: --quantize-group-size: expected one of 32|64|128\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--quantize-lm-head"))
            lm_head = true;
        else if (!strcmp(argv[i], "--quantize-keep-layers") && i + 1 < argc)
            keep = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            const char *d = argv[++i];
            if (!strcmp(d, "cpu")) device = INFERD_DEVICE_CPU;
            else if (!strcmp(d, "cuda")) device = INFERD_DEVICE_CUDA;
            else if (!strcmp(d, "emu")) device = INFERD_DEVICE_EMU;
            else {
                fprintf(stderr, "inferd logits: --device: expected one of cpu|cuda|emu\n");
                return 2;
            }
        } else {
            fprintf(stderr, "inferd logits: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path || !ids_s) {
        fprintf(stderr, "inferd logits: usage: -m FILE --ids \"1 2 3\" [--quantize none|int8|int4] "
                        "[--quantize-group-size 32|64|128] [--quantize-lm-head] [--quantize-keep-layers LIST] "
                        "[--kv-cache-dtype D] [--device cpu|cuda|emu]\n");
        return 2;
    }
    int32_t *ids = NULL, n = 0;
    if (!cli_parse_ids(ids_s, &ids, &n) || n == 0 || n >= (1 << 24)) {
        fprintf(stderr, "inferd logits: --ids must be a non-empty list of token ids\n");
        free(ids);
        return 2;
    }
    char err[512];
    inferd_engine *e = NULL;
    rows r = {0};
    int ret = 1;
    inferd_engine_options eo;
    inferd_engine_options_default(&eo);
    eo.model_path = path;
    eo.threaded = false;
    eo.max_num_seqs = 1;
    eo.max_model_len = n + 1; /* the prompt must be shorter than the context */
    eo.enable_prefix_caching = false;
    eo.kv_cache_dtype = kv_dtype;
    eo.device = device;
    eo.quantize_bits = bits;
    eo.quantize_group_size = group;
    eo.quantize_lm_head = lm_head;
    eo.quantize_keep_layers = keep;
    if (inferd_engine_create(&e, &eo, err, sizeof err)) {
        fprintf(stderr, "inferd logits: %s\n", err);
        goto done;
    }
    const int32_t vocab = inferd_n_vocab(e);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= vocab) {
            fprintf(stderr, "inferd logits: token id %d out of range (vocabulary %d)\n", ids[i], vocab);
            goto done;
        }
    if (inferd_max_model_len(e) <= n) {
        fprintf(stderr, "inferd logits: %d ids do not fit the KV cache (%d tokens)\n", n,
                inferd_max_model_len(e));
        goto done;
    }
    r.n = n;
    r.n_vocab = vocab;
    r.v = malloc((size_t)n * (size_t)vocab * sizeof(float));
    r.seen = calloc((size_t)n, sizeof(bool));
    if (!r.v || !r.seen) {
        fprintf(stderr, "inferd logits: out of memory\n");
        goto done;
    }
    engine_set_logits_tap(e, on_row, &r);
    fin f = {0};
    inferd_request q = {.prompt = ids, .n_prompt = n, .cb = on_out, .user = &f};
    inferd_sampling_default(&q.sampling);
    q.sampling.max_tokens = 0;
    q.sampling.prompt_logprobs = 0;
    if (inferd_submit(e, &q, NULL, err, sizeof err)) {
        fprintf(stderr, "inferd logits: %s\n", err);
        goto done;
    }
    while (inferd_engine_step(e) > 0) {
    }
    bool all = !r.bad;
    for (int32_t t = 0; t < n; t++) all = all && r.seen[t];
    if (!f.done || f.why != INFERD_FINISH_LENGTH || !all) {
        fprintf(stderr, "inferd logits: forward failed\n");
        goto done;
    }
    for (int32_t t = 0; t < n; t++) {
        const float *row = r.v + (size_t)t * vocab;
        for (int32_t v = 0; v < vocab; v++) printf(v ? " %.9g" : "%.9g", (double)row[v]);
        printf("\n");
    }
    ret = 0;
done:
    inferd_engine_destroy(e);
    free(r.v);
    free(r.seen);
    free(ids);
    return ret;
}
