/* cmd_generate.c — `inferd generate -m FILE -p TEXT [-n N] [--temp T] [--seed S]
 * [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--stop S]... [--ids]
 * [--threads N] [-v]`: one completion through the engine API (driven in this thread).
 * Prints the text as it is generated (UTF-8 safe, stop strings held back), or with
 * --ids the generated token ids on one line. BOS is added when the vocabulary says so. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"
#include "cli_util.h"
#include "inferd.h"

typedef struct gen_ctx {
    bool print_ids;
    int32_t *ids;
    int32_t n_ids, cap;
    bool done;
    inferd_finish_reason reason;
    double t_first;
} gen_ctx;

static void on_output(const inferd_output *o, void *user) {
    gen_ctx *g = user;
    if (o->n_tokens && g->t_first == 0.0) g->t_first = ifd_now_s();
    for (int32_t i = 0; i < o->n_tokens && g->n_ids < g->cap; i++) g->ids[g->n_ids++] = o->tokens[i];
    if (!g->print_ids && o->text_bytes) {
        fwrite(o->text, 1, o->text_bytes, stdout);
        fflush(stdout);
    }
    if (o->finished) {
        g->done = true;
        g->reason = o->finish_reason;
    }
}

int cli_generate(int argc, char **argv) {
    const char *prompt = NULL;
    inferd_engine_options eo;
    inferd_engine_options_default(&eo);
    eo.threaded = false;
    eo.max_num_seqs = 1;
    inferd_sampling sp;
    inferd_sampling_default(&sp);
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.05f;
    sp.max_tokens = 128;
    sp.has_seed = true;
    sp.seed = (uint64_t)time(NULL);
    const char *stops[INFERD_MAX_STOP];
    bool print_ids = false, verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t iv = 0;
        bool ok = true;
        if (!strcmp(a, "--ids")) {
            print_ids = true;
            continue;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = true;
            continue;
        } else if (!strcmp(a, "--ignore-eos")) {
            sp.ignore_eos = true;
            continue;
        } else if (!strcmp(a, "--reference")) {
            eo.reference_kernels = true;
            continue;
        } else if (!v) {
            ok = false;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            eo.model_path = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            prompt = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            ok = cli_parse_i64(v, 0, 1 << 24, &iv);
            sp.max_tokens = (int32_t)iv;
        } else if (!strcmp(a, "--temp")) {
            ok = cli_parse_f32(v, 0.0f, 100.0f, &sp.temperature);
        } else if (!strcmp(a, "--top-k")) {
            ok = cli_parse_i64(v, 0, INT32_MAX, &iv);
            sp.top_k = (int32_t)iv;
        } else if (!strcmp(a, "--top-p")) {
            ok = cli_parse_f32(v, 0.0f, 1.0f, &sp.top_p) && sp.top_p > 0.0f;
        } else if (!strcmp(a, "--min-p")) {
            ok = cli_parse_f32(v, 0.0f, 1.0f, &sp.min_p);
        } else if (!strcmp(a, "--repeat-penalty")) {
            ok = cli_parse_f32(v, 0.01f, 100.0f, &sp.repetition_penalty);
        } else if (!strcmp(a, "--stop")) {
            ok = sp.n_stop < INFERD_MAX_STOP && v[0];
            if (ok) stops[sp.n_stop++] = v;
        } else if (!strcmp(a, "--seed")) {
            ok = cli_parse_u64(v, &sp.seed);
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            ok = cli_parse_i64(v, 0, 1024, &iv);
            eo.n_threads = (int)iv;
        } else if (!strcmp(a, "--max-num-batched-tokens") || !strcmp(a, "-b")) {
            ok = cli_parse_i64(v, 1, 1 << 20, &iv);
            eo.max_num_batched_tokens = (int32_t)iv;
        } else {
            fprintf(stderr, "inferd generate: unknown option '%s'\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "inferd generate: bad or missing value for %s\n", a);
            return 2;
        }
        i++;
    }
    if (!eo.model_path || !prompt) {
        fprintf(stderr, "inferd generate: usage: -m FILE -p TEXT [-n N] [--temp T] [--seed S] [--ids]\n");
        return 2;
    }
    sp.stop = stops;
    char err[512];
    inferd_engine *e = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    gen_ctx g = {.print_ids = print_ids};
    int ret = 1;
    /* One sequence: the pool is capped at what max_num_seqs can use anyway. */
    eo.kv_cache_fraction = 0.05;
    if (inferd_engine_create(&e, &eo, err, sizeof err)) {
        fprintf(stderr, "inferd generate: %s\n", err);
        return 1;
    }
    if (err[0]) fprintf(stderr, "inferd generate: warning: %s\n", err);
    const model *m = inferd_model(e);
    if (tok_encode(m->tok, prompt, strlen(prompt), TOK_ENC_ADD_BOS, &ids, &n_ids)) {
        fprintf(stderr, "inferd generate: cannot tokenize the prompt\n");
        goto done;
    }
    if (n_ids == 0) {
        fprintf(stderr, "inferd generate: empty prompt (and the vocabulary adds no BOS)\n");
        goto done;
    }
    const int32_t n_ctx = inferd_max_model_len(e);
    if ((int64_t)n_ids >= n_ctx) {
        fprintf(stderr, "inferd generate: the prompt has %zu tokens; the context length is %d\n",
                n_ids, n_ctx);
        goto done;
    }
    if (sp.max_tokens == 0) {
        printf("\n");
        ret = 0;
        goto done;
    }
    g.cap = sp.max_tokens;
    g.ids = malloc((size_t)g.cap * sizeof(int32_t));
    if (!g.ids) goto done;
    inferd_request q = {.prompt = ids, .n_prompt = (int32_t)n_ids, .sampling = sp, .cb = on_output,
                        .user = &g};
    const double t0 = ifd_now_s();
    if (inferd_submit(e, &q, NULL, err, sizeof err)) {
        fprintf(stderr, "inferd generate: %s\n", err);
        goto done;
    }
    while (inferd_engine_step(e) > 0) {
    }
    if (g.reason == INFERD_FINISH_ERROR) {
        fprintf(stderr, "inferd generate: generation failed\n");
        goto done;
    }
    if (print_ids) {
        /* an end-of-generation token ends the output without being part of it */
        int32_t n = g.n_ids;
        if (n > 0 && g.reason == INFERD_FINISH_STOP && tok_is_eog(m->tok, g.ids[n - 1]) && !sp.ignore_eos) n--;
        for (int32_t i = 0; i < n; i++) printf(i ? " %d" : "%d", g.ids[i]);
    }
    printf("\n");
    if (verbose) {
        const double t1 = ifd_now_s();
        fprintf(stderr, "prompt %zu tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.2f tok/s)\n",
                n_ids, g.t_first - t0, (double)n_ids / (g.t_first - t0), g.n_ids, t1 - g.t_first,
                g.n_ids > 1 ? (double)(g.n_ids - 1) / (t1 - g.t_first) : 0.0);
    }
    ret = 0;
done:
    free(g.ids);
    free(ids);
    inferd_engine_destroy(e);
    return ret;
}
