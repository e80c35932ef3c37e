/* cmd_generate.c — `inferd generate -m FILE -p TEXT [-n N] [--temp T] [--seed S]
 * [--top-k K] [--top-p P] [--min-p P] [--ids]`: one completion on the CPU. Prints the
 * text as it is generated (UTF-8 safe), or with --ids the generated token ids on one
 * line. BOS is added when the vocabulary says so. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../engine/sampler.h"
#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"
#include "cli_util.h"

int cli_generate(int argc, char **argv) {
    const char *path = NULL, *prompt = NULL;
    int64_t n_predict = 128;
    sampler_params sp = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f};
    uint64_t seed = (uint64_t)time(NULL);
    bool print_ids = false, verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t iv;
        bool ok = true;
        if (!strcmp(a, "--ids")) {
            print_ids = true;
            continue;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = true;
            continue;
        } else if (!v) {
            ok = false;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            path = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            prompt = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            ok = cli_parse_i64(v, 0, 1 << 24, &n_predict);
        } else if (!strcmp(a, "--temp")) {
            ok = cli_parse_f32(v, 0.0f, 100.0f, &sp.temperature);
        } else if (!strcmp(a, "--top-k")) {
            ok = cli_parse_i64(v, 0, INT32_MAX, &iv);
            sp.top_k = (int32_t)iv;
        } else if (!strcmp(a, "--top-p")) {
            ok = cli_parse_f32(v, 0.0f, 1.0f, &sp.top_p);
        } else if (!strcmp(a, "--min-p")) {
            ok = cli_parse_f32(v, 0.0f, 1.0f, &sp.min_p);
        } else if (!strcmp(a, "--seed")) {
            ok = cli_parse_u64(v, &seed);
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
    if (!path || !prompt) {
        fprintf(stderr, "inferd generate: usage: -m FILE -p TEXT [-n N] [--temp T] [--seed S] [--ids]\n");
        return 2;
    }
    char err[512];
    model *m = NULL;
    seq_runner r = {0};
    sampler_scratch scr = {0};
    int32_t *ids = NULL, *out_ids = NULL;
    float *logits = NULL;
    size_t n_ids = 0;
    int ret = 1;
    if (model_load(&m, path, err, sizeof err)) {
        fprintf(stderr, "inferd generate: %s\n", err);
        goto done;
    }
    if (tok_encode(m->tok, prompt, strlen(prompt), TOK_ENC_ADD_BOS, &ids, &n_ids)) {
        fprintf(stderr, "inferd generate: cannot tokenize the prompt\n");
        goto done;
    }
    if (n_ids == 0) {
        fprintf(stderr, "inferd generate: empty prompt (and the vocabulary adds no BOS)\n");
        goto done;
    }
    const int64_t n_ctx = m->hp.n_ctx_train;
    if ((int64_t)n_ids >= n_ctx) {
        fprintf(stderr, "inferd generate: prompt has %zu tokens, context length is %lld\n", n_ids,
                (long long)n_ctx);
        goto done;
    }
    if ((int64_t)n_ids + n_predict > n_ctx) n_predict = n_ctx - (int64_t)n_ids;
    const int32_t vocab = (int32_t)m->hp.n_vocab;
    if (seq_runner_init(&r, m, (int32_t)(n_ids + n_predict), err, sizeof err) ||
        sampler_scratch_init(&scr, vocab)) {
        fprintf(stderr, "inferd generate: %s\n", err);
        goto done;
    }
    logits = malloc((size_t)vocab * sizeof(float));
    out_ids = malloc((size_t)(n_predict + 1) * sizeof(int32_t));
    if (!logits || !out_ids) {
        fprintf(stderr, "inferd generate: out of memory\n");
        goto done;
    }
    ifd_rng rng;
    rng_seed(&rng, seed);
    tok_detok dt;
    tok_detok_init(&dt, m->tok, false);
    char piece[512];
    double t0 = ifd_now_s(), t_first = 0;
    if (seq_runner_feed(&r, ids, (int32_t)n_ids, false, logits)) {
        fprintf(stderr, "inferd generate: forward failed\n");
        goto done;
    }
    int64_t n_gen = 0;
    while (n_gen < n_predict) {
        int32_t id = sampler_sample(&sp, logits, vocab, &rng, &scr);
        if (n_gen == 0) t_first = ifd_now_s();
        if (tok_is_eog(m->tok, id)) break;
        out_ids[n_gen++] = id;
        if (!print_ids) {
            size_t k = tok_detok_push(&dt, id, piece, sizeof piece);
            fwrite(piece, 1, k, stdout);
            fflush(stdout);
        }
        if (n_gen == n_predict) break;
        if (seq_runner_feed(&r, &id, 1, false, logits)) {
            fprintf(stderr, "inferd generate: forward failed\n");
            goto done;
        }
    }
    if (print_ids) {
        for (int64_t i = 0; i < n_gen; i++) printf(i ? " %d" : "%d", out_ids[i]);
    } else {
        size_t k = tok_detok_flush(&dt, piece, sizeof piece);
        fwrite(piece, 1, k, stdout);
    }
    printf("\n");
    if (verbose) {
        double t1 = ifd_now_s();
        fprintf(stderr, "prompt %zu tokens in %.3f s, generated %lld tokens in %.3f s (%.2f tok/s)\n",
                n_ids, t_first - t0, (long long)n_gen, t1 - t_first,
                n_gen > 1 ? (double)(n_gen - 1) / (t1 - t_first) : 0.0);
    }
    ret = 0;
done:
    free(logits);
    free(out_ids);
    free(ids);
    sampler_scratch_deinit(&scr);
    seq_runner_deinit(&r);
    model_destroy(m);
    return ret;
}
