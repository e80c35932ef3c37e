/* grammar_bench.c — constrained decoding's cost per token: for a nested JSON schema, a
 * GBNF grammar and a tool-call grammar, G generations on a real vocabulary where each
 * step takes the state's mask (gram_mask) and follows a token drawn from random logits
 * among the allowed ones (gram_advance_token), as the engine does. Prints, per grammar:
 * compile time, mask time per token (mean, p50, p99, max) over all tokens and over the
 * first generation alone (a cold cache), the masks computed (not cached), and the DFA's
 * size. The grammar is compiled once and reused, as the server's cache does.
 *
 *   build/grammar_bench VOCAB.gguf [--gens G] [--max-tokens T] [--seed S]
 *
 * VOCAB.gguf: any GGUF with a tokenizer (the default model: models-cache/default.gguf). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/unit/grammar_test_util.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}


static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s VOCAB.gguf [--gens G] [--max-tokens T] [--seed S]\n", argv[0]);
        return 2;
    }
    int gens = 50, max_tokens = 400;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--gens")) gens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-tokens")) max_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) gt_rs = strtoull(argv[i + 1], NULL, 10) | 1;
    }
    char err[512];
    tokenizer *t = gt_load_tok(argv[1]);
    if (!t) return 1;
    double t0 = now_ns();
    gram_vocab *v = gt_vocab_of(t);
    if (!v) return 1;
    printf("vocabulary: %d tokens, %lld trie nodes, built in %.1f ms\n", gram_vocab_n(v),
           (long long)gram_vocab_nodes(v), (now_ns() - t0) / 1e6);
    const int32_t nv = gram_vocab_n(v), W = gram_mask_words(v);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)nv);
    double *times = malloc(sizeof *times * (size_t)gens * (size_t)(max_tokens + 1));
    printf("%-12s %9s %8s %9s %9s %9s %9s %9s %7s %7s %7s %8s\n", "grammar", "compile", "tokens", "mean_us", "p50_us",
           "p99_us", "max_us", "cold_mean", "masks", "walks", "states", "classes");
    for (int which = 0; which < 3; which++) {
        const char *name = GT_BENCH_NAMES[which];
        gram *g = NULL;
        t0 = now_ns();
        int rc = gt_bench_grammar(which, &g, err, sizeof err);
        double compile_ms = (now_ns() - t0) / 1e6;
        if (rc) {
            printf("%-12s compile failed: %s\n", name, err);
            continue;
        }
        int64_t n = 0, n_cold = 0;
        double cold_sum = 0;
        for (int gi = 0; gi < gens; gi++) {
            gram_state s = gram_start(g);
            for (int k = 0; k < max_tokens && s >= 0; k++) {
                double a = now_ns();
                const uint32_t *m = gram_mask(g, v, s);
                double b = now_ns();
                if (!m) break;
                /* random logits over the allowed tokens: a uniform pick among them,
                 * EOG taken only past half the budget */
                int32_t na = 0;
                for (int32_t w = 0; w < W; w++)
                    for (uint32_t bits = m[w]; bits; bits &= bits - 1) allowed[na++] = w * 32 + __builtin_ctz(bits);
                if (!na) break;
                int32_t id = allowed[gt_rnd() % (uint64_t)na];
                if (gram_vocab_is_eog(v, id) && k < max_tokens / 2 && na > 1) id = allowed[(gt_rnd() % (uint64_t)na)];
                double c = now_ns();
                gram_state nx = gram_vocab_is_eog(v, id) ? GRAM_DEAD : gram_advance_token(g, v, s, id);
                double d = now_ns();
                times[n++] = (b - a + d - c) / 1e3;
                if (gi == 0) {
                    cold_sum += (b - a + d - c) / 1e3;
                    n_cold++;
                }
                if (gram_vocab_is_eog(v, id) || gram_must_end(g, nx)) break;
                s = nx;
            }
        }
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += times[i];
        qsort(times, (size_t)n, sizeof *times, cmp_d);
        gram_stats st;
        gram_get_stats(g, &st);
        printf("%-12s %7.2fms %8lld %9.2f %9.2f %9.2f %9.1f %9.2f %7lld %7lld %7lld %8lld\n", name, compile_ms,
               (long long)n, n ? sum / (double)n : 0, n ? times[n / 2] : 0, n ? times[(int64_t)(n * 0.99)] : 0,
               n ? times[n - 1] : 0, n_cold ? cold_sum / (double)n_cold : 0, (long long)st.masks_computed,
               (long long)st.walks, (long long)st.states, (long long)st.n_classes);
        gram_unref(g);
    }
    free(allowed);
    free(times);
    gram_vocab_free(v);
    tok_destroy(t);
    return 0;
}
