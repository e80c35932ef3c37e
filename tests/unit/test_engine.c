/* test_engine.c — engine equivalence on the shared Shakespeare model (greedy): output
 * is identical with prefix caching on and off, with a KV pool so small that
 * preemption must happen, with prefill chunk sizes 1, 7, 64 and whole-prompt, and for
 * a request run alone versus among 31 others of different lengths (batch invariance),
 * and for n > 1 choices (forked) versus n = 1, also with fewer seats (max_num_seqs)
 * than choices, where the plan must stay within max_num_seqs. "Identical" means the same token ids AND bit-identical top-20 logprobs (which are
 * computed from the raw logits row), so any difference in a sequence's logits shows. */
#include "engine/sampler.h"
#include "inferd.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "model/model.h"

#define MODEL INFERD_SHARED_DIR "/models/shakespeare-target.gguf"
#define MAX_OUT 40
#define NTOP 20

typedef struct result {
    int32_t ids[MAX_OUT];
    inferd_token_logprob lp[MAX_OUT][1 + NTOP];
    int32_t n;
    bool done;
    inferd_finish_reason reason;
} result;

static void on_out(const inferd_output *o, void *user) {
    result *r = user;
    for (int32_t i = 0; i < o->n_tokens && r->n < MAX_OUT; i++) {
        r->ids[r->n] = o->tokens[i];
        if (o->logprobs) memcpy(r->lp[r->n], o->logprobs + (size_t)i * (1 + o->n_top),
                                (size_t)(1 + o->n_top) * sizeof(inferd_token_logprob));
        r->n++;
    }
    if (o->finished) {
        r->done = true;
        r->reason = o->finish_reason;
    }
}

typedef struct prompt {
    int32_t ids[256];
    int32_t n;
    int32_t max_out;
} prompt;

static void make_prompts(prompt *p, int n, unsigned seed, bool shared_prefix) {
    ifd_rng rng;
    rng_seed(&rng, seed);
    int32_t prefix[64];
    for (int i = 0; i < 64; i++) prefix[i] = 3 + (int32_t)(rng_next(&rng) % 1000);
    for (int k = 0; k < n; k++) {
        /* with a shared prefix, at least 49 tokens: 3 full blocks of it are cacheable
         * (test_prefix_caching_on_off counts on it, whatever the RNG's stream) */
        p[k].n = shared_prefix ? 49 + (int32_t)(rng_next(&rng) % 106) : 5 + (int32_t)(rng_next(&rng) % 150);
        p[k].ids[0] = 1; /* BOS */
        for (int32_t i = 1; i < p[k].n; i++)
            p[k].ids[i] = shared_prefix && i < 64 ? prefix[i] : 3 + (int32_t)(rng_next(&rng) % 1000);
        p[k].max_out = 8 + (int32_t)(rng_next(&rng) % (MAX_OUT - 8));
    }
}

/* Run prompts through a fresh non-threaded engine; sequential == true submits each
 * after the previous finished (so the prefix cache can hit), else all at once. */
/* The engine's defaults, on the device INFERD_TEST_DEVICE names (cpu|cuda|emu; ctest
 * runs this file again as test_engine_emu: the CUDA backend under the SIMT emulation)
 * with the KV cache dtype INFERD_TEST_KV_DTYPE names (unset: auto; ctest runs the
 * cases again as test_engine_kv_<dtype>, tests/unit/kv_dtype.cmake). */
static void opts_default(inferd_engine_options *o) {
    inferd_engine_options_default(o);
    const char *d = getenv("INFERD_TEST_DEVICE");
    if (d && !strcmp(d, "emu")) o->device = INFERD_DEVICE_EMU;
    else if (d && !strcmp(d, "cuda")) o->device = INFERD_DEVICE_CUDA;
    else if (d && !strcmp(d, "cpu")) o->device = INFERD_DEVICE_CPU;
    o->kv_cache_dtype = getenv("INFERD_TEST_KV_DTYPE");
}

/* Bytes of one token's K and V in the shared model (4 layers, 2 KV heads of 64) at
 * o's KV cache dtype (auto: f16 on the CPU, f32 on CUDA / EMU; with device auto, which
 * may be CUDA: f32's, so the pool is 20 blocks or, as f16 on the CPU, 40). */
static int64_t kv_token_bytes(const inferd_engine_options *o) {
    const char *d = o->kv_cache_dtype;
    if (!d || !strcmp(d, "auto")) d = o->device == INFERD_DEVICE_CPU ? "f16" : "f32";
    const int64_t row = !strcmp(d, "f32") ? 256 : !strcmp(d, "int8") ? 68 : !strcmp(d, "fp8") ? 64 : 128;
    return 2 * 4 /*layers*/ * 2 /*kv heads*/ * row;
}

/* Submit p greedy (ignore_eos, NTOP logprobs) with out as its result; false (said on
 * stderr) if the engine refuses it. */
static bool submit_greedy(inferd_engine *e, const prompt *p, result *out) {
    char err[256];
    inferd_request q = {.prompt = p->ids, .n_prompt = p->n, .cb = on_out, .user = out};
    inferd_sampling_default(&q.sampling);
    q.sampling.temperature = 0.0f;
    q.sampling.max_tokens = p->max_out;
    q.sampling.ignore_eos = true;
    q.sampling.logprobs = NTOP;
    if (inferd_submit(e, &q, NULL, err, sizeof err)) {
        fprintf(stderr, "  submit: %s\n", err);
        return false;
    }
    return true;
}

static bool run(const inferd_engine_options *base, const prompt *p, int n, bool sequential,
                result *out, inferd_stats *st) {
    inferd_engine_options o = *base;
    o.model_path = MODEL;
    o.threaded = false;
    char err[256];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) {
        fprintf(stderr, "  engine: %s\n", err);
        return false;
    }
    memset(out, 0, sizeof(result) * (size_t)n);
    for (int k = 0; k < n; k++) {
        if (!submit_greedy(e, &p[k], &out[k])) {
            inferd_engine_destroy(e);
            return false;
        }
        if (sequential)
            while (inferd_engine_step(e) > 0) {
            }
    }
    int guard = 0;
    while (inferd_engine_step(e) > 0 && guard++ < 100000) {
    }
    if (st) inferd_engine_stats(e, st);
    inferd_engine_destroy(e);
    for (int k = 0; k < n; k++)
        if (!out[k].done) return false;
    return true;
}

static int compare(const result *a, const result *b, int n, const char *what) {
    int bad = 0;
    for (int k = 0; k < n; k++) {
        if (a[k].n != b[k].n || memcmp(a[k].ids, b[k].ids, (size_t)a[k].n * sizeof(int32_t))) {
            fprintf(stderr, "  %s: request %d tokens differ\n", what, k);
            bad++;
            continue;
        }
        if (memcmp(a[k].lp, b[k].lp, (size_t)a[k].n * sizeof a[k].lp[0])) {
            fprintf(stderr, "  %s: request %d logprobs differ\n", what, k);
            bad++;
        }
    }
    return bad;
}

#define NP 12
static prompt P[32];
static result R0[32], R1[32];

static void test_prefix_caching_on_off(void) {
    inferd_engine_options o;
    opts_default(&o);
    make_prompts(P, NP, 11, true);
    inferd_stats s0, s1;
    o.enable_prefix_caching = false;
    CHECK(run(&o, P, NP, true, R0, &s0));
    o.enable_prefix_caching = true;
    CHECK(run(&o, P, NP, true, R1, &s1));
    CHECK(s0.prefix_hits_tokens == 0);
    CHECKF(s1.prefix_hits_tokens >= 48 * (NP - 1), "hits %llu", (unsigned long long)s1.prefix_hits_tokens);
    CHECK(compare(R0, R1, NP, "prefix caching") == 0);
}

static void test_preemption(void) {
    inferd_engine_options o;
    opts_default(&o);
    make_prompts(P, NP, 12, false);
    inferd_stats s0, s1;
    CHECK(run(&o, P, NP, false, R0, &s0));
    /* 20 blocks of 16 tokens: 12 sequences of up to ~190 tokens cannot all fit */
    const model *m = NULL;
    (void)m;
    o.kv_cache_bytes = 20 * 16 * kv_token_bytes(&o);
    CHECK(run(&o, P, NP, false, R1, &s1));
    CHECKF(s1.preemptions > 0, "preemptions %llu", (unsigned long long)s1.preemptions);
    CHECK(compare(R0, R1, NP, "preemption") == 0);
}

static void test_chunk_sizes(void) {
    make_prompts(P, 4, 13, false);
    inferd_engine_options o;
    opts_default(&o);
    o.max_num_batched_tokens = 4096; /* whole prompt in one step */
    CHECK(run(&o, P, 4, false, R0, NULL));
    const int chunks[] = {1, 7, 64};
    for (int c = 0; c < 3; c++) {
        o.max_num_batched_tokens = chunks[c];
        o.max_num_seqs = chunks[c] < 4 ? chunks[c] : 4;
        CHECK(run(&o, P, 4, false, R1, NULL));
        char what[32];
        snprintf(what, sizeof what, "chunk %d", chunks[c]);
        CHECK(compare(R0, R1, 4, what) == 0);
    }
}

/* Prefill bursts: four requests decode, then eight more arrive; with bursts on (and a
 * mixed-step bound so small that mixed steps take only the floor) the engine pauses the
 * decodes for the new prompts at least once, and every request's tokens and logprobs
 * equal those of the same run without bursts, bit for bit. */
static bool run_staggered(const inferd_engine_options *base, const prompt *p, result *out,
                          inferd_stats *st) {
    inferd_engine_options o = *base;
    o.model_path = MODEL;
    o.threaded = false;
    char err[256];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) {
        fprintf(stderr, "  engine: %s\n", err);
        return false;
    }
    memset(out, 0, sizeof(result) * 12);
    bool ok = true;
    for (int k = 0; k < 12 && ok; k++) {
        ok = submit_greedy(e, &p[k], &out[k]);
        if (k == 3) /* the first four prefill and start decoding */
            for (int i = 0; i < 12; i++) inferd_engine_step(e);
    }
    int guard = 0;
    while (ok && inferd_engine_step(e) > 0 && guard++ < 100000) {
    }
    inferd_engine_stats(e, st);
    inferd_engine_destroy(e);
    for (int k = 0; k < 12; k++) ok = ok && out[k].done;
    return ok;
}

static void test_prefill_bursts(void) {
    make_prompts(P, 12, 15, false);
    for (int k = 0; k < 4; k++) P[k].max_out = MAX_OUT; /* still decoding when the rest come */
    inferd_engine_options o;
    opts_default(&o);
    o.max_num_batched_tokens = 64;
    o.max_step_ms = 0.001;
    inferd_stats s0, s1;
    CHECK(run_staggered(&o, P, R0, &s0));
    CHECK(s0.prefill_bursts == 0);
    o.max_prefill_stall_ms = 10000;
    CHECK(run_staggered(&o, P, R1, &s1));
    CHECKF(s1.prefill_bursts >= 1, "bursts %llu", (unsigned long long)s1.prefill_bursts);
    CHECK(compare(R0, R1, 12, "prefill bursts") == 0);
}

static void test_batch_invariance(void) {
    make_prompts(P, 32, 14, false);
    inferd_engine_options o;
    opts_default(&o);
    CHECK(run(&o, P, 1, false, R0, NULL)); /* request 0 alone */
    CHECK(run(&o, P, 32, false, R1, NULL)); /* among 31 others */
    CHECK(compare(R0, R1, 1, "alone vs 32") == 0);
}

/* n > 1: greedy choices all equal the n = 1 output (forked sequences share the prompt's
 * blocks, copy-on-write on the partial last block); every block returns afterwards. */
#define MAX_N 8
typedef struct multi {
    result r[MAX_N];
} multi;

static void on_multi(const inferd_output *o, void *user) {
    multi *m = user;
    on_out(o, &m->r[o->index]);
}

static inferd_engine *make_engine(void) {
    inferd_engine_options o;
    opts_default(&o);
    o.model_path = MODEL;
    o.threaded = false;
    char err[256];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) fprintf(stderr, "  engine: %s\n", err);
    return e;
}

static void test_n_fork(void) {
    make_prompts(P, 1, 15, false);
    P[0].n = 37; /* not a multiple of the block size: the last block is shared and partial */
    inferd_engine_options o;
    opts_default(&o);
    CHECK(run(&o, P, 1, false, R0, NULL));
    inferd_engine *e = make_engine();
    if (!e) return;
    static multi mu;
    memset(&mu, 0, sizeof mu);
    inferd_request q = {.prompt = P[0].ids, .n_prompt = P[0].n, .cb = on_multi, .user = &mu};
    inferd_sampling_default(&q.sampling);
    q.sampling.temperature = 0.0f;
    q.sampling.max_tokens = P[0].max_out;
    q.sampling.ignore_eos = true;
    q.sampling.logprobs = NTOP;
    q.sampling.n = 3;
    char err[256];
    CHECK(inferd_submit(e, &q, NULL, err, sizeof err) == 0);
    while (inferd_engine_step(e) > 0) {
    }
    for (int i = 0; i < 3; i++) {
        CHECK(mu.r[i].done);
        CHECK(compare(R0, &mu.r[i], 1, "n=3 choice") == 0);
    }
    inferd_stats st;
    inferd_engine_stats(e, &st);
    CHECK(st.kv_blocks_used == 0);
    /* sampled choices with one seed differ from each other but repeat across runs */
    static multi a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    q.sampling.temperature = 1.0f;
    q.sampling.has_seed = true;
    q.sampling.seed = 1234;
    q.user = &a;
    CHECK(inferd_submit(e, &q, NULL, err, sizeof err) == 0);
    while (inferd_engine_step(e) > 0) {
    }
    q.user = &b;
    CHECK(inferd_submit(e, &q, NULL, err, sizeof err) == 0);
    while (inferd_engine_step(e) > 0) {
    }
    for (int i = 0; i < 3; i++) CHECK(compare(&a.r[i], &b.r[i], 1, "seeded choice") == 0);
    CHECK(a.r[0].n != a.r[1].n || memcmp(a.r[0].ids, a.r[1].ids, sizeof(int32_t) * (size_t)a.r[0].n));
    inferd_engine_destroy(e);
}

/* n > 1 with fewer seats than choices: 9 prompts x n = 8 under max_num_seqs 1, 2, 4, 8
 * (and a step budget that is not a multiple of anything). Forked choices never push the
 * running set past max_num_seqs (checked after every step: stats.running and the
 * largest step batch); a choice that found no seat when its parent's prompt finished
 * prefills itself later. Every choice completes and, greedy, equals the n = 1 run token
 * for token with bit-identical logprobs. Then a seeded sampled n = 8 request gives the
 * same choices under max_num_seqs 2 as under the default 64 (a choice that recomputed
 * its prompt samples from identical logits with its own RNG). */
#define NF 9
static multi MF[NF];

static bool run_forked(int32_t max_seqs, int32_t budget, const prompt *p, int np, int32_t n,
                       float temperature, multi *out) {
    inferd_engine_options o;
    opts_default(&o);
    o.model_path = MODEL;
    o.threaded = false;
    o.max_num_seqs = max_seqs;
    if (budget > 0) o.max_num_batched_tokens = budget;
    char err[256];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) {
        fprintf(stderr, "  engine: %s\n", err);
        return false;
    }
    memset(out, 0, sizeof(multi) * (size_t)np);
    for (int k = 0; k < np; k++) {
        inferd_request q = {.prompt = p[k].ids, .n_prompt = p[k].n, .cb = on_multi, .user = &out[k]};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = temperature;
        q.sampling.has_seed = true;
        q.sampling.seed = 77 + (uint64_t)k;
        q.sampling.max_tokens = p[k].max_out;
        q.sampling.ignore_eos = true;
        q.sampling.logprobs = NTOP;
        q.sampling.n = n;
        if (inferd_submit(e, &q, NULL, err, sizeof err)) {
            fprintf(stderr, "  submit: %s\n", err);
            inferd_engine_destroy(e);
            return false;
        }
    }
    bool ok = true;
    int guard = 0;
    inferd_stats st;
    while (inferd_engine_step(e) > 0 && guard++ < 200000) {
        inferd_engine_stats(e, &st);
        if (st.running > max_seqs || st.max_step_seqs > max_seqs) {
            /* stop stepping: the next schedule would overrun the step buffers */
            fprintf(stderr, "  max_num_seqs %d: %d sequences running, %d in one step\n", max_seqs,
                    st.running, st.max_step_seqs);
            ok = false;
            break;
        }
    }
    inferd_engine_stats(e, &st);
    inferd_engine_destroy(e);
    /* the seats were used (as many as there are choices) and the token budget held */
    const int32_t fill = np * n < max_seqs ? np * n : max_seqs;
    CHECKF(!ok || st.max_step_seqs == fill, "max_num_seqs %d: at most %d in a step", max_seqs,
           st.max_step_seqs);
    CHECK(st.max_step_tokens <= o.max_num_batched_tokens);
    CHECK(st.kv_blocks_used == 0);
    for (int k = 0; ok && k < np; k++)
        for (int32_t i = 0; i < n; i++)
            if (!out[k].r[i].done || out[k].r[i].reason != INFERD_FINISH_LENGTH) {
                fprintf(stderr, "  max_num_seqs %d: prompt %d choice %d not completed\n", max_seqs,
                        k, i);
                ok = false;
            }
    return ok;
}

static void test_n_fork_few_seats(void) {
    make_prompts(P, NF, 17, true); /* shared prefix: the prefix cache serves waiting choices */
    P[0].n = 37;
    inferd_engine_options o;
    opts_default(&o);
    CHECK(run(&o, P, NF, false, R0, NULL));
    const int32_t seats[] = {1, 2, 4, 8};
    for (int c = 0; c < 4; c++) {
        const bool ok = run_forked(seats[c], c == 2 ? 23 : 0, P, NF, MAX_N, 0.0f, MF);
        CHECKF(ok, "max_num_seqs %d", seats[c]);
        for (int k = 0; ok && k < NF; k++)
            for (int i = 0; i < MAX_N; i++) {
                char what[64];
                snprintf(what, sizeof what, "seats %d prompt %d choice %d", seats[c], k, i);
                CHECK(compare(&R0[k], &MF[k].r[i], 1, what) == 0);
            }
    }
    static multi a[2], b[2];
    CHECK(run_forked(64, 0, P, 2, MAX_N, 1.0f, a));
    const bool ok = run_forked(2, 0, P, 2, MAX_N, 1.0f, b);
    CHECK(ok);
    for (int k = 0; ok && k < 2; k++)
        for (int i = 0; i < MAX_N; i++)
            CHECK(compare(&a[k].r[i], &b[k].r[i], 1, "seeded n=8, 2 seats") == 0);
    CHECK(a[0].r[0].n != a[0].r[1].n ||
          memcmp(a[0].r[0].ids, a[0].r[1].ids, sizeof(int32_t) * (size_t)a[0].r[0].n));
}

/* Abort at the next step: a final ABORT event, blocks back in the pool, others unaffected. */
static void test_abort(void) {
    make_prompts(P, 4, 16, false);
    inferd_engine_options o;
    opts_default(&o);
    CHECK(run(&o, P, 4, false, R0, NULL));
    inferd_engine *e = make_engine();
    if (!e) return;
    memset(R1, 0, sizeof(result) * 4);
    uint64_t ids[4];
    char err[256];
    for (int k = 0; k < 4; k++) {
        inferd_request q = {.prompt = P[k].ids, .n_prompt = P[k].n, .cb = on_out, .user = &R1[k]};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = 0.0f;
        q.sampling.max_tokens = P[k].max_out;
        q.sampling.ignore_eos = true;
        q.sampling.logprobs = NTOP;
        CHECK(inferd_submit(e, &q, &ids[k], err, sizeof err) == 0);
    }
    for (int i = 0; i < 3; i++) inferd_engine_step(e);
    inferd_abort(e, ids[2]);
    inferd_abort(e, 999999); /* unknown ids are ignored */
    while (inferd_engine_step(e) > 0) {
    }
    CHECK(R1[2].done && R1[2].reason == INFERD_FINISH_ABORT);
    CHECK(R1[2].n < P[2].max_out);
    CHECK(compare(R0, R1, 2, "abort: others") == 0);
    CHECK(compare(R0 + 3, R1 + 3, 1, "abort: others") == 0);
    inferd_stats st;
    inferd_engine_stats(e, &st);
    CHECK(st.kv_blocks_used == 0);
    CHECK(st.aborted == 1);
    inferd_engine_destroy(e);
}

/* Penalty counts are kept only for requests that ask for a penalty; with one, greedy
 * decoding picks argmax(logit - frequency_penalty x count) at every step — checked
 * against the raw top-20 logprobs the engine reports (same shift as the logits) — and
 * it changes the output where plain greedy repeats itself. */
static void test_frequency_penalty(void) {
    make_prompts(P, 1, 21, false);
    inferd_engine *e = make_engine();
    if (!e) return;
    const float pen = 1.5f;
    result plain = {0}, pr = {0};
    char err[256];
    for (int k = 0; k < 2; k++) {
        inferd_request q = {.prompt = P[0].ids, .n_prompt = P[0].n, .cb = on_out, .user = k ? &pr : &plain};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = 0.0f;
        q.sampling.max_tokens = MAX_OUT;
        q.sampling.ignore_eos = true;
        q.sampling.logprobs = NTOP;
        if (k) q.sampling.frequency_penalty = pen;
        CHECK(inferd_submit(e, &q, NULL, err, sizeof err) == 0);
        while (inferd_engine_step(e) > 0) {
        }
    }
    CHECK(plain.done && pr.done && plain.n == MAX_OUT && pr.n == MAX_OUT);
    int changed = 0;
    for (int32_t t = 0; t < pr.n; t++) {
        const inferd_token_logprob *lp = pr.lp[t];
        int32_t cnt_chosen = 0;
        for (int32_t u = 0; u < t; u++) cnt_chosen += pr.ids[u] == pr.ids[t];
        const float chosen = lp[0].logprob - pen * (float)cnt_chosen;
        CHECK(lp[0].id == pr.ids[t]);
        for (int j = 1; j <= NTOP; j++) {
            int32_t cnt = 0;
            for (int32_t u = 0; u < t; u++) cnt += pr.ids[u] == lp[j].id;
            CHECKF(lp[j].logprob - pen * (float)cnt <= chosen + 1e-4f, "step %d: id %d beats the chosen %d",
                   (int)t, (int)lp[j].id, (int)pr.ids[t]);
        }
        changed += lp[1].id != pr.ids[t];
    }
    CHECKF(changed > 0, "the penalty never changed a choice");
    CHECK(memcmp(plain.ids, pr.ids, sizeof plain.ids) != 0);
    inferd_engine_destroy(e);
}

/* Seeded sampling with every filter and penalty, n = 2 choices (the second draws from
 * its parent's row) and top logprobs: the draws on the device (backend_ops.sample, the
 * CUDA backend: INFERD_TEST_DEVICE=emu) give exactly the host sampler's tokens, and
 * logprobs within 1e-5. On the CPU backend both runs sample on the host. */
static multi DS[2][4];
static bool run_sampled(bool no_device, multi *out, int n_prompts) {
    inferd_engine_options o;
    opts_default(&o);
    o.model_path = MODEL;
    o.threaded = false;
    o.no_device_sampling = no_device;
    char err[256];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) {
        fprintf(stderr, "  engine: %s\n", err);
        return false;
    }
    static const inferd_logit_bias bias[] = {{5, 2.0f}, {17, -100.0f}, {40, 1.5f}};
    memset(out, 0, sizeof(multi) * (size_t)n_prompts);
    for (int k = 0; k < n_prompts; k++) {
        inferd_request q = {.prompt = P[k].ids, .n_prompt = P[k].n, .cb = on_multi, .user = &out[k]};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = 0.7f + 0.2f * (float)k;
        q.sampling.top_k = k == 1 ? 0 : 40;
        q.sampling.top_p = k == 2 ? 1.0f : 0.9f;
        q.sampling.min_p = k == 3 ? 0.05f : 0.0f;
        q.sampling.presence_penalty = 0.3f;
        q.sampling.frequency_penalty = 0.2f;
        q.sampling.repetition_penalty = 1.1f;
        q.sampling.logit_bias = bias;
        q.sampling.n_logit_bias = 3;
        q.sampling.seed = 1000 + (uint64_t)k;
        q.sampling.has_seed = true;
        q.sampling.n = 2;
        q.sampling.max_tokens = 24;
        q.sampling.ignore_eos = true;
        q.sampling.logprobs = NTOP;
        if (inferd_submit(e, &q, NULL, err, sizeof err)) {
            fprintf(stderr, "  submit: %s\n", err);
            inferd_engine_destroy(e);
            return false;
        }
    }
    int guard = 0;
    while (inferd_engine_step(e) > 0 && guard++ < 100000) {
    }
    inferd_engine_destroy(e);
    return true;
}

static void test_device_sampling(void) {
    make_prompts(P, 4, 23, false);
    CHECK(run_sampled(false, DS[0], 4));
    CHECK(run_sampled(true, DS[1], 4));
    int differ_between_choices = 0;
    for (int k = 0; k < 4; k++)
        for (int c = 0; c < 2; c++) {
            const result *a = &DS[0][k].r[c], *b = &DS[1][k].r[c];
            CHECKF(a->done && b->done && a->n == 24 && b->n == 24, "prompt %d choice %d", k, c);
            CHECKF(memcmp(a->ids, b->ids, sizeof a->ids) == 0, "prompt %d choice %d: device and host draws differ", k, c);
            for (int32_t t = 0; t < a->n; t++)
                for (int j = 0; j <= NTOP; j++) {
                    CHECK(a->lp[t][j].id == b->lp[t][j].id);
                    CHECK(fabsf(a->lp[t][j].logprob - b->lp[t][j].logprob) <= 1e-5f ||
                          (isinf(a->lp[t][j].logprob) && isinf(b->lp[t][j].logprob)));
                }
            if (c == 1) differ_between_choices += memcmp(a->ids, DS[0][k].r[0].ids, sizeof a->ids) != 0;
        }
    CHECK(differ_between_choices > 0); /* the choices have their own RNG streams */
}

TEST_MAIN(T(test_device_sampling), T(test_prefill_bursts), T(test_n_fork), T(test_n_fork_few_seats), T(test_abort), T(test_frequency_penalty), T(test_prefix_caching_on_off),
          T(test_preemption), T(test_chunk_sizes),
          T(test_batch_invariance))
