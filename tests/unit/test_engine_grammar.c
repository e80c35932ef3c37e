/* test_engine_grammar.c — constrained decoding in the engine (issue 12) on the shared
 * Shakespeare models, through the public API (inferd_grammar_compile + submit):
 *
 * - every output of 16 mixed requests (greedy and seeded, n = 1 and n = 3 forks) is a
 *   sentence of its grammar (a JSON schema, a GBNF grammar, a regex), ended by the
 *   grammar itself or cut by max_tokens as a valid prefix;
 * - the same tokens whether the requests run alone or all at once, with prefix caching
 *   on and under a KV pool small enough to force preemptions (the grammar state is the
 *   sequence's, kept through a recompute);
 * - with speculative decoding (draft model, n-gram, both; fixed K so every step
 *   proposes), greedy and seeded outputs are the same tokens as without it;
 * - reasoning_end: the output is free until the end marker, the grammar applies after;
 * - EOS is drawn only where the grammar can end (ignore_eos off), and a grammar that
 *   can only end finishes the sequence with no further token;
 * - on the CUDA backend (test_engine_grammar_emu: under the SIMT emulation) masked rows
 *   drawn by the device sampler give the host sampler's tokens. */
#include <string.h>

#include "grammar/grammar.h"
#include "inferd.h"
#include "test_util.h"

#define TARGET INFERD_SHARED_DIR "/models/shakespeare-target.gguf"
#define DRAFT INFERD_SHARED_DIR "/models/shakespeare-draft.gguf"
#define MAX_OUT 160
#define NP 16
#define NC 3 /* choices of the forked requests */

typedef struct result {
    int32_t ids[MAX_OUT];
    char text[4 * MAX_OUT + 64];
    size_t n_text;
    int32_t n;
    bool done;
    inferd_finish_reason why;
} result;

typedef struct out3 {
    result c[NC];
} out3;

static void on_out(const inferd_output *o, void *user) {
    result *r = &((out3 *)user)->c[o->index];
    for (int32_t i = 0; i < o->n_tokens && r->n < MAX_OUT; i++) r->ids[r->n++] = o->tokens[i];
    if (r->n_text + o->text_bytes < sizeof r->text) {
        memcpy(r->text + r->n_text, o->text, o->text_bytes);
        r->n_text += o->text_bytes;
    }
    if (o->finished) {
        r->done = true;
        r->why = o->finish_reason;
    }
}

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"who\":{\"type\":\"string\",\"maxLength\":12},"
    "\"act\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5},\"lines\":{\"type\":\"array\",\"items\":"
    "{\"enum\":[\"to be\",\"or not\"]},\"maxItems\":3},\"dead\":{\"type\":\"boolean\"}},"
    "\"required\":[\"who\",\"act\",\"dead\"],\"additionalProperties\":false}";
static const char *GBNF = "root ::= line (\"\\n\" line){0,3}\nline ::= [A-Z][a-z]{1,8} \": \" [a-z ,]{3,30} [.!?]\n";
static const char *REGEX = "(ROMEO|JULIET|NURSE): [a-z ]{5,40}\\.";

static inferd_grammar *G[3];
static gram *GR[3]; /* the same, to check outputs */

static bool compile_all(void) {
    char err[256];
    const inferd_grammar_kind kinds[3] = {INFERD_GRAMMAR_JSON_SCHEMA, INFERD_GRAMMAR_GBNF, INFERD_GRAMMAR_REGEX};
    const char *src[3] = {SCHEMA, GBNF, REGEX};
    for (int i = 0; i < 3; i++) {
        if (G[i]) continue;
        if (inferd_grammar_compile(kinds[i], src[i], strlen(src[i]), &G[i], err, sizeof err) ||
            inferd_grammar_compile(kinds[i], src[i], strlen(src[i]), (inferd_grammar **)(void *)&GR[i], err,
                                   sizeof err)) {
            fprintf(stderr, "  grammar %d: %s\n", i, err);
            return false;
        }
    }
    return true;
}

typedef struct prompt {
    int32_t ids[64];
    int32_t n, max_out, grammar, n_choices;
    float temp;
} prompt;

static prompt P[NP];

static void make_prompts(void) {
    uint64_t s = 99;
    for (int k = 0; k < NP; k++) {
        prompt *p = &P[k];
        p->n = 4 + k % 5 * 9;
        p->ids[0] = 1;
        for (int32_t i = 1; i < p->n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            /* every other prompt shares its first 36 tokens (the prefix cache) */
            p->ids[i] = 3 + (int32_t)((k % 2 && i < 36 ? (uint64_t)i * 7919u : s >> 33) % 1000);
        }
        p->grammar = k % 3;
        p->max_out = 60 + 20 * (k % 5);
        p->temp = k % 4 == 0 ? 0.0f : 1.0f;
        p->n_choices = k % 5 == 3 ? NC : 1;
    }
}

static void opts(inferd_engine_options *o) {
    inferd_engine_options_default(o);
    o->model_path = TARGET;
    o->threaded = false;
    /* INFERD_TEST_DEVICE=emu: the CUDA backend under the SIMT emulation (ctest's
     * test_engine_grammar_emu), where masked rows are drawn by the device sampler */
    const char *d = getenv("INFERD_TEST_DEVICE");
    o->device = d && !strcmp(d, "emu")    ? INFERD_DEVICE_EMU
                : d && !strcmp(d, "cuda") ? INFERD_DEVICE_CUDA
                                          : INFERD_DEVICE_CPU;
    o->max_num_seqs = 16;
}

static void drain(inferd_engine *e) {
    for (int guard = 0; inferd_engine_step(e) > 0 && guard < 1000000; guard++) {
    }
}

static bool submit(inferd_engine *e, const prompt *p, out3 *out, const char *reasoning_end) {
    char err[256];
    inferd_request q = {.prompt = p->ids, .n_prompt = p->n, .cb = on_out, .user = out};
    inferd_sampling_default(&q.sampling);
    q.sampling.temperature = p->temp;
    q.sampling.seed = 1000 + (uint64_t)p->n;
    q.sampling.has_seed = true;
    q.sampling.max_tokens = p->max_out;
    q.sampling.n = p->n_choices;
    q.sampling.grammar = G[p->grammar];
    q.sampling.reasoning_end = reasoning_end;
    if (inferd_submit(e, &q, NULL, err, sizeof err)) {
        fprintf(stderr, "  submit: %s\n", err);
        return false;
    }
    return true;
}

static bool run(const inferd_engine_options *o, bool alone, out3 *out, inferd_stats *st) {
    char err[512];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, o, err, sizeof err)) {
        fprintf(stderr, "  engine: %s\n", err);
        return false;
    }
    memset(out, 0, sizeof(out3) * NP);
    bool ok = true;
    for (int k = 0; k < NP && ok; k++) {
        ok = submit(e, &P[k], &out[k], NULL);
        if (alone) drain(e);
    }
    drain(e);
    if (st) inferd_engine_stats(e, st);
    inferd_engine_destroy(e);
    for (int k = 0; k < NP; k++)
        for (int c = 0; c < P[k].n_choices; c++) ok = ok && out[k].c[c].done;
    return ok;
}

/* Each output a sentence of its grammar (ended by it: STOP) or a valid prefix (LENGTH). */
static int check_valid(const out3 *out, const char *what) {
    int bad = 0;
    for (int k = 0; k < NP; k++)
        for (int c = 0; c < P[k].n_choices; c++) {
            const result *r = &out[k].c[c];
            gram *g = GR[P[k].grammar];
            const bool ok = r->why == INFERD_FINISH_STOP ? gram_accepts(g, r->text, r->n_text)
                                                         : r->why == INFERD_FINISH_LENGTH &&
                                                               gram_prefix_ok(g, r->text, r->n_text);
            if (!ok) {
                fprintf(stderr, "  %s: request %d choice %d (finish %d) '%.*s' breaks its grammar\n", what, k, c,
                        (int)r->why, (int)r->n_text, r->text);
                bad++;
            }
        }
    return bad;
}

static int compare(const out3 *a, const out3 *b, const char *what) {
    int bad = 0;
    for (int k = 0; k < NP; k++)
        for (int c = 0; c < P[k].n_choices; c++) {
            const result *x = &a[k].c[c], *y = &b[k].c[c];
            if (x->n != y->n || memcmp(x->ids, y->ids, sizeof(int32_t) * (size_t)x->n)) {
                fprintf(stderr, "  %s: request %d choice %d differs\n", what, k, c);
                bad++;
            }
        }
    return bad;
}

static out3 R0[NP], R1[NP];

static void test_valid_and_batch_invariant(void) {
    make_prompts();
    CHECK(compile_all());
    inferd_engine_options o;
    opts(&o);
    CHECK(run(&o, false, R0, NULL));
    CHECK(check_valid(R0, "batch of 16") == 0);
    int stops = 0;
    for (int k = 0; k < NP; k++) stops += R0[k].c[0].why == INFERD_FINISH_STOP;
    CHECKF(stops >= 4, "only %d outputs ended by their grammar", stops);
    CHECK(run(&o, true, R1, NULL));
    CHECK(compare(R0, R1, "alone vs batch") == 0);
    /* a small pool: preemptions with grammar states in flight */
    o.kv_cache_bytes = 0;
    o.block_size = 16;
    o.kv_cache_fraction = 0;
    inferd_stats st;
    inferd_engine_options small = o;
    small.kv_cache_bytes = (int64_t)14 * 16 * 4 * 2 * 2 * 64 * 2; /* ~14 blocks (f16, 4 layers, 2 KV heads) */
    CHECK(run(&small, false, R1, &st));
    CHECKF(st.preemptions > 0, "%llu preemptions", (unsigned long long)st.preemptions);
    CHECK(compare(R0, R1, "small pool") == 0);
    CHECK(check_valid(R1, "small pool") == 0);
}

static void test_speculation(void) {
    make_prompts();
    CHECK(compile_all());
    inferd_engine_options o;
    opts(&o);
    CHECK(run(&o, false, R0, NULL));
    struct {
        const char *draft;
        bool ngram;
    } cfg[] = {{DRAFT, false}, {NULL, true}, {DRAFT, true}};
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        opts(&o);
        o.draft_model_path = cfg[c].draft;
        o.speculative_ngram = cfg[c].ngram;
        o.num_speculative_tokens = 4;
        o.speculative_adaptive = false;
        inferd_stats st;
        CHECK(run(&o, false, R1, &st));
        char what[64];
        snprintf(what, sizeof what, "speculation %s%s", cfg[c].draft ? "draft" : "", cfg[c].ngram ? "+ngram" : "");
        CHECK(compare(R0, R1, what) == 0);
        CHECK(check_valid(R1, what) == 0);
        CHECKF(st.spec_verifications > 0, "%s: %llu verifications", what, (unsigned long long)st.spec_verifications);
    }
}

/* reasoning_end "," : free text up to the first comma, the grammar after it. */
static void test_reasoning_end(void) {
    make_prompts();
    CHECK(compile_all());
    inferd_engine_options o;
    opts(&o);
    char err[512];
    inferd_engine *e = NULL;
    CHECK(inferd_engine_create(&e, &o, err, sizeof err) == 0);
    if (!e) return;
    out3 out[4];
    memset(out, 0, sizeof out);
    for (int k = 0; k < 4; k++) {
        prompt p = P[k];
        p.grammar = 2; /* the regex */
        p.n_choices = 1;
        p.temp = 1.0f;
        p.max_out = 120;
        CHECK(submit(e, &p, &out[k], ","));
    }
    drain(e);
    inferd_engine_destroy(e);
    int checked = 0;
    for (int k = 0; k < 4; k++) {
        const result *r = &out[k].c[0];
        const char *comma = memchr(r->text, ',', r->n_text);
        if (!comma) continue; /* never ended its reasoning: all free text */
        const char *rest = comma + 1;
        size_t n = r->n_text - (size_t)(rest - r->text);
        while (n && (*rest == ' ' || *rest == '\n')) rest++, n--;
        const bool ok = r->why == INFERD_FINISH_STOP ? gram_accepts(GR[2], rest, n) : gram_prefix_ok(GR[2], rest, n);
        CHECKF(ok, "request %d: after the reasoning '%.*s'", k, (int)n, rest);
        checked++;
    }
    CHECKF(checked >= 2, "only %d outputs ended their reasoning", checked);
}

/* A grammar of exactly one string: the output is that string, finished with no EOS
 * token; ignore_eos changes nothing. */
static void test_must_end(void) {
    char err[256];
    inferd_grammar *g = NULL;
    const char *src = "root ::= \"To be, or not to be\"";
    CHECK(inferd_grammar_compile(INFERD_GRAMMAR_GBNF, src, strlen(src), &g, err, sizeof err) == 0);
    inferd_engine_options o;
    opts(&o);
    inferd_engine *e = NULL;
    CHECK(inferd_engine_create(&e, &o, err, sizeof err) == 0);
    if (!e || !g) return;
    out3 out[2];
    memset(out, 0, sizeof out);
    make_prompts();
    for (int k = 0; k < 2; k++) {
        inferd_request q = {.prompt = P[k].ids, .n_prompt = P[k].n, .cb = on_out, .user = &out[k]};
        inferd_sampling_default(&q.sampling);
        q.sampling.max_tokens = 100;
        q.sampling.grammar = g;
        q.sampling.ignore_eos = k == 1;
        CHECK(inferd_submit(e, &q, NULL, err, sizeof err) == 0);
    }
    inferd_grammar_free(g); /* the engine holds its own references */
    drain(e);
    inferd_engine_destroy(e);
    for (int k = 0; k < 2; k++) {
        const result *r = &out[k].c[0];
        CHECKF(r->done && r->why == INFERD_FINISH_STOP && r->n_text == strlen("To be, or not to be") &&
                   !memcmp(r->text, "To be, or not to be", r->n_text),
               "request %d: finish %d '%.*s'", k, (int)r->why, (int)r->n_text, r->text);
    }
}

/* On a backend with a device sampler: the masked rows drawn there give the same tokens
 * as the host's sampler on the same logits (no_device_sampling), and valid outputs. */
static void test_device_masks(void) {
    make_prompts();
    CHECK(compile_all());
    inferd_engine_options o;
    opts(&o);
    o.no_device_sampling = true;
    CHECK(run(&o, false, R0, NULL));
    opts(&o);
    CHECK(run(&o, false, R1, NULL));
    CHECK(compare(R0, R1, "device vs host sampling") == 0);
    CHECK(check_valid(R1, "device sampling") == 0);
}

static void cleanup(void) {
    for (int i = 0; i < 3; i++) {
        inferd_grammar_free(G[i]);
        gram_unref(GR[i]);
        G[i] = NULL;
        GR[i] = NULL;
    }
}

static void test_zz_cleanup(void) { cleanup(); }

TEST_MAIN(T(test_valid_and_batch_invariant), T(test_speculation), T(test_reasoning_end), T(test_must_end),
          T(test_device_masks), T(test_zz_cleanup))
