/* cmd_generate.c — `inferd generate -m FILE -p TEXT [options]`: one completion through
 * the engine API (driven in this thread). Prints the text as it is generated (UTF-8
 * safe, stop strings held back), or with --ids the generated token ids on one line.
 * BOS is added when the vocabulary says so. Options: the shared engine entries and
 * generate's own in src/server/config.c's table (`inferd generate --help`). It talks
 * to the engine through the public API (include/inferd.h) alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../server/config.h"
#include "../util/common.h"
#include "cli.h"
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
    server_config c;
    config_init(&c, CFG_CMD_GENERATE);
    char err[512];
    int rc = config_load(&c, argc, argv, err, sizeof err);
    if (rc) {
        if (rc < 0) fprintf(stderr, "inferd generate: %s\n", err);
        server_config_deinit(&c);
        return rc > 0 ? 0 : 2;
    }
    if ((!c.model && !c.random_weights) || !c.prompt || c.top_p <= 0) {
        fprintf(stderr, "inferd generate: %s (see --help)\n",
                c.top_p <= 0 ? "--top-p must be > 0"
                             : "-m FILE (or --random-weights SHAPE) and -p TEXT are required");
        server_config_deinit(&c);
        return 2;
    }
    inferd_engine_options eo;
    inferd_engine_options_default(&eo);
    config_engine_options(&c, &eo);
    eo.threaded = false;
    inferd_sampling sp;
    inferd_sampling_default(&sp);
    sp.temperature = (float)c.temp;
    sp.top_k = (int32_t)c.top_k;
    sp.top_p = (float)c.top_p;
    sp.min_p = (float)c.min_p;
    sp.repetition_penalty = (float)c.repeat_penalty;
    sp.max_tokens = (int32_t)c.n_predict;
    sp.ignore_eos = c.ignore_eos;
    sp.has_seed = true;
    sp.seed = config_given(&c, "seed") ? c.seed : (uint64_t)time(NULL);
    sp.stop = (const char *const *)c.stop.v;
    sp.n_stop = c.stop.n;
    const char *prompt = c.prompt;
    const bool print_ids = c.print_ids, verbose = c.verbose;
    inferd_engine *e = NULL;
    int32_t *ids = NULL;
    int32_t n_ids = 0;
    gen_ctx g = {.print_ids = print_ids};
    int ret = 1;
    /* One sequence (generate's defaults: max-num-seqs 1, kv-cache-fraction 0.05). */
    if (inferd_engine_create(&e, &eo, err, sizeof err)) {
        fprintf(stderr, "inferd generate: %s\n", err);
        server_config_deinit(&c);
        return 1;
    }
    if (err[0]) fprintf(stderr, "inferd generate: warning: %s\n", err);
    /* the prompt is the user's own text: control tokens in it are not parsed (as before) */
    n_ids = inferd_tokenize(e, prompt, strlen(prompt), true, false, NULL, 0);
    if (n_ids > 0 && (ids = malloc(sizeof(int32_t) * (size_t)n_ids)))
        n_ids = inferd_tokenize(e, prompt, strlen(prompt), true, false, ids, n_ids);
    if (n_ids < 0 || (n_ids > 0 && !ids)) {
        fprintf(stderr, "inferd generate: cannot tokenize the prompt\n");
        goto done;
    }
    if (n_ids == 0) {
        fprintf(stderr, "inferd generate: empty prompt (and the vocabulary adds no BOS)\n");
        goto done;
    }
    const int32_t n_ctx = inferd_max_model_len(e);
    if (n_ids >= n_ctx) {
        fprintf(stderr, "inferd generate: the prompt has %d tokens; the context length is %d\n",
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
    inferd_request q = {.prompt = ids, .n_prompt = n_ids, .sampling = sp, .cb = on_output,
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
        if (n > 0 && g.reason == INFERD_FINISH_STOP && inferd_token_is_eog(e, g.ids[n - 1]) && !sp.ignore_eos) n--;
        for (int32_t i = 0; i < n; i++) printf(i ? " %d" : "%d", g.ids[i]);
    }
    printf("\n");
    if (verbose) {
        const double t1 = ifd_now_s();
        fprintf(stderr, "prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.2f tok/s)\n",
                n_ids, g.t_first - t0, (double)n_ids / (g.t_first - t0), g.n_ids, t1 - g.t_first,
                g.n_ids > 1 ? (double)(g.n_ids - 1) / (t1 - g.t_first) : 0.0);
    }
    ret = 0;
done:
    free(g.ids);
    free(ids);
    inferd_engine_destroy(e);
    server_config_deinit(&c);
    return ret;
}
