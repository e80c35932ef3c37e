/* test_engine_limits.c — the engine under limits that request data can reach, on the
 * shared Shakespeare model (context 256):
 *   - a KV pool smaller than one maximal sequence: max_model_len is clamped to what the
 *     pool holds, and sequences that would outgrow it finish (length) instead of
 *     preempting themselves forever; several such sequences at once all finish, with
 *     preemptions, in a bounded number of steps, with the same tokens and logprobs as
 *     on a big pool with the same max_model_len;
 *   - random small pools / budgets / seat counts / n: every choice finishes in a
 *     bounded number of steps;
 *   - more aborts in one step than any fixed batch: all take effect in that step;
 *   - a vocabulary with token texts longer than 512 bytes (and than 64 KiB): the text
 *     of such tokens reaches the output whole (the model is the shared one with two
 *     token texts replaced, written to a temporary file by this test). */
#include <stdlib.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/engine_model.h"
#include "engine/sampler.h"
#include "inferd.h"
#include "model/gguf.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

#define MODEL INFERD_SHARED_DIR "/models/shakespeare-target.gguf"
#define MAX_OUT 256
#define NTOP 5

typedef struct result {
    int32_t ids[MAX_OUT];
    inferd_token_logprob lp[MAX_OUT][1 + NTOP];
    int32_t n;
    int32_t n_events;
    bool done;
    inferd_finish_reason reason;
    char *text; /* malloc'ed, grows */
    size_t text_bytes;
} result;

static void on_out(const inferd_output *o, void *user) {
    result *r = (result *)user + o->index;
    for (int32_t i = 0; i < o->n_tokens && r->n < MAX_OUT; i++) {
        r->ids[r->n] = o->tokens[i];
        if (o->logprobs)
            memcpy(r->lp[r->n], o->logprobs + (size_t)i * (1 + o->n_top),
                   (size_t)(1 + o->n_top) * sizeof(inferd_token_logprob));
        r->n++;
    }
    if (o->text_bytes) {
        char *t = realloc(r->text, r->text_bytes + o->text_bytes);
        if (t) {
            memcpy(t + r->text_bytes, o->text, o->text_bytes);
            r->text = t;
            r->text_bytes += o->text_bytes;
        }
    }
    r->n_events++;
    if (o->finished) {
        r->done = true;
        r->reason = o->finish_reason;
    }
}

static void results_clear(result *r, int n) {
    for (int i = 0; i < n; i++) free(r[i].text);
    memset(r, 0, sizeof(result) * (size_t)n);
}

static void make_prompt(int32_t *ids, int32_t n, ifd_rng *rng) {
    ids[0] = 1; /* BOS */
    for (int32_t i = 1; i < n; i++) ids[i] = 3 + (int32_t)(rng_next(rng) % 1000);
}

static inferd_engine *engine_new(const inferd_engine_options *base, char *err, size_t err_bytes) {
    inferd_engine_options o = *base;
    o.model_path = o.model_path ? o.model_path : MODEL;
    o.threaded = false;
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, err_bytes)) {
        fprintf(stderr, "  engine: %s\n", err);
        return NULL;
    }
    return e;
}

/* Bytes of one KV block of the shared model at block size bs, in the engine's default
 * KV dtype on the device it picks (auto, auto: f16 on the CPU, f32 on CUDA). */
static int64_t block_bytes(int32_t bs) {
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.kv_cache_bytes = 1 << 24;
    char err[256];
    inferd_engine *e = engine_new(&o, err, sizeof err);
    if (!e) return 0;
    int64_t b = (int64_t)backend_kv_block_bytes(BACKEND_AUTO, inferd_model(e), bs, BACKEND_KV_AUTO);
    inferd_engine_destroy(e);
    return b;
}

typedef struct job {
    int32_t ids[256];
    int32_t n_prompt;
    int32_t max_tokens;
    int32_t n;
    float temperature;
} job;

/* Submit every job, step until nothing is live (at most max_calls calls of
 * inferd_engine_step, counted in *calls). out[k] holds job k's n choices. */
static bool run_jobs(inferd_engine *e, const job *jobs, int n_jobs, result **out, int max_calls,
                     int *calls) {
    char err[256];
    for (int k = 0; k < n_jobs; k++) {
        results_clear(out[k], jobs[k].n);
        inferd_request q = {.prompt = jobs[k].ids, .n_prompt = jobs[k].n_prompt, .cb = on_out,
                            .user = out[k]};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = jobs[k].temperature;
        q.sampling.has_seed = true;
        q.sampling.seed = 1000 + (uint64_t)k;
        q.sampling.max_tokens = jobs[k].max_tokens;
        q.sampling.ignore_eos = true;
        q.sampling.logprobs = NTOP;
        q.sampling.n = jobs[k].n;
        if (inferd_submit(e, &q, NULL, err, sizeof err)) {
            fprintf(stderr, "  submit %d: %s\n", k, err);
            return false;
        }
    }
    *calls = 0;
    while (*calls < max_calls) {
        ++*calls;
        if (inferd_engine_step(e) == 0) break;
    }
    bool ok = true;
    for (int k = 0; k < n_jobs; k++)
        for (int32_t i = 0; i < jobs[k].n; i++)
            if (!out[k][i].done) {
                fprintf(stderr, "  job %d choice %d not finished after %d steps\n", k, i, *calls);
                ok = false;
            }
    return ok;
}

static int compare(const result *a, const result *b, const char *what) {
    if (a->n != b->n || memcmp(a->ids, b->ids, (size_t)a->n * sizeof(int32_t))) {
        fprintf(stderr, "  %s: tokens differ (%d vs %d)\n", what, a->n, b->n);
        return 1;
    }
    if (memcmp(a->lp, b->lp, (size_t)a->n * sizeof a->lp[0])) {
        fprintf(stderr, "  %s: logprobs differ\n", what);
        return 1;
    }
    return 0;
}

/* ---- a pool smaller than one maximal sequence --------------------------------------- */

#define POOL_BLOCKS 4
#define BS 16

static void test_pool_clamps_max_model_len(void) {
    const int64_t bb = block_bytes(BS);
    CHECK(bb > 0);
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.kv_cache_bytes = POOL_BLOCKS * bb + bb / 2; /* a part block is no block */
    char err[256] = "stale";
    inferd_engine *e = engine_new(&o, err, sizeof err);
    CHECK(e != NULL);
    if (!e) return;
    inferd_stats st;
    inferd_engine_stats(e, &st);
    CHECK(st.kv_blocks_total == POOL_BLOCKS);
    CHECKF(inferd_max_model_len(e) == POOL_BLOCKS * BS, "max_model_len %d", inferd_max_model_len(e));
    CHECKF(strstr(err, "max_model_len") != NULL, "create said '%s'", err);
    /* the clamped limit is what submit enforces */
    int32_t ids[POOL_BLOCKS * BS];
    ifd_rng rng;
    rng_seed(&rng, 5);
    make_prompt(ids, POOL_BLOCKS * BS, &rng);
    result r[1] = {0};
    inferd_request q = {.prompt = ids, .n_prompt = POOL_BLOCKS * BS, .cb = on_out, .user = r};
    inferd_sampling_default(&q.sampling);
    CHECK(inferd_submit(e, &q, NULL, err, sizeof err) == IFD_ERR_LIMIT);
    inferd_engine_destroy(e);

    /* a pool that holds a whole sequence: no clamp, no message */
    o.kv_cache_bytes = 0;
    strcpy(err, "stale");
    e = engine_new(&o, err, sizeof err);
    CHECK(e != NULL);
    if (!e) return;
    CHECK(inferd_max_model_len(e) == (int32_t)inferd_model(e)->hp.n_ctx_train);
    CHECKF(err[0] == 0, "create said '%s'", err);
    inferd_engine_destroy(e);

    /* fewer than two blocks is refused, with the numbers */
    o.kv_cache_bytes = bb + bb / 2;
    inferd_engine *e2 = NULL;
    o.model_path = MODEL;
    o.threaded = false;
    CHECK(inferd_engine_create(&e2, &o, err, sizeof err) == IFD_ERR_NOMEM);
    CHECKF(strstr(err, "holds 1 blocks") != NULL, "create said '%s'", err);
    CHECK(e2 == NULL);
}

static job J[12];
static result RA[12][4], RB[12][4];
static result *PA[12], *PB[12];

static void set_ptrs(void) {
    for (int k = 0; k < 12; k++) PA[k] = RA[k], PB[k] = RB[k];
}

/* Reference: the same jobs on a big pool with max_model_len set to the clamped value. */
static bool run_reference(const job *jobs, int n_jobs, int32_t max_model_len) {
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.max_model_len = max_model_len;
    char err[256];
    inferd_engine *e = engine_new(&o, err, sizeof err);
    if (!e) return false;
    int calls;
    bool ok = run_jobs(e, jobs, n_jobs, PB, 100000, &calls);
    inferd_engine_destroy(e);
    return ok;
}

/* One sequence whose prompt + max_tokens is far beyond the pool: it finishes (length)
 * when it reaches the clamped max_model_len, after about one step per token. */
static void test_long_sequence_small_pool(void) {
    set_ptrs();
    const int64_t bb = block_bytes(BS);
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.kv_cache_bytes = POOL_BLOCKS * bb;
    char err[256];
    inferd_engine *e = engine_new(&o, err, sizeof err);
    if (!e) {
        CHECK(0);
        return;
    }
    const int32_t max_len = inferd_max_model_len(e);
    ifd_rng rng;
    rng_seed(&rng, 21);
    J[0] = (job){.n_prompt = 40, .max_tokens = 1000, .n = 1};
    make_prompt(J[0].ids, J[0].n_prompt, &rng);
    int calls = 0;
    /* one step for the prompt, one per generated token; twice that is the bound */
    const int bound = 2 * (max_len + 1);
    CHECK(run_jobs(e, J, 1, PA, bound, &calls));
    CHECKF(calls <= bound, "%d steps", calls);
    CHECK(RA[0][0].reason == INFERD_FINISH_LENGTH);
    CHECKF(J[0].n_prompt + RA[0][0].n == max_len, "%d tokens generated", RA[0][0].n);
    inferd_engine_destroy(e);
    if (max_len < 256) {
        CHECK(run_reference(J, 1, max_len));
        CHECK(compare(&RA[0][0], &RB[0][0], "long sequence vs big pool") == 0);
    }
    results_clear(RA[0], 1);
    results_clear(RB[0], 1);
}

/* Several sequences that together (and each) exceed the pool: all finish, with
 * preemptions, in a bounded number of steps; greedy ones equal the big-pool run. */
static void test_concurrent_exceed_pool(void) {
    set_ptrs();
    const int64_t bb = block_bytes(BS);
    ifd_rng rng;
    rng_seed(&rng, 22);
    const int NJ = 6;
    for (int k = 0; k < NJ; k++) {
        J[k] = (job){.n_prompt = 10 + (int32_t)(rng_next(&rng) % 40), .max_tokens = 1000, .n = 1};
        if (k == 4) J[k].n = 3, J[k].temperature = 1.0f; /* sampled, forked */
        make_prompt(J[k].ids, J[k].n_prompt, &rng);
    }
    const int32_t budgets[] = {256, 16, 7};
    for (int c = 0; c < 3; c++) {
        inferd_engine_options o;
        inferd_engine_options_default(&o);
        o.kv_cache_bytes = POOL_BLOCKS * bb;
        o.max_num_seqs = 4;
        o.max_num_batched_tokens = budgets[c];
        char err[256];
        inferd_engine *e = engine_new(&o, err, sizeof err);
        if (!e) {
            CHECK(0);
            return;
        }
        const int32_t max_len = inferd_max_model_len(e);
        /* work without preemption: every prompt and generated token once; recomputing
         * a preempted sequence costs at most its length again per preemption, so allow
         * each sequence's whole length a few times over */
        int total = 0;
        for (int k = 0; k < NJ; k++) total += J[k].n * max_len;
        const int bound = 4 * total;
        int calls = 0;
        const bool ok = run_jobs(e, J, NJ, PA, bound, &calls);
        CHECKF(ok, "budget %d", budgets[c]);
        inferd_stats st;
        inferd_engine_stats(e, &st);
        CHECKF(st.preemptions > 0, "budget %d: %llu preemptions", budgets[c],
               (unsigned long long)st.preemptions);
        CHECK(st.kv_blocks_used == 0);
        printf("  budget %d: %d steps (bound %d), %llu preemptions\n", budgets[c], calls, bound,
               (unsigned long long)st.preemptions);
        inferd_engine_destroy(e);
        if (!ok) continue;
        for (int k = 0; k < NJ; k++)
            for (int32_t i = 0; i < J[k].n; i++) {
                CHECK(RA[k][i].reason == INFERD_FINISH_LENGTH);
                CHECK(J[k].n_prompt + RA[k][i].n == max_len);
            }
        CHECK(run_reference(J, NJ, max_len));
        for (int k = 0; k < NJ; k++)
            for (int32_t i = 0; i < J[k].n; i++) {
                char what[64];
                snprintf(what, sizeof what, "budget %d job %d choice %d", budgets[c], k, i);
                CHECK(compare(&RA[k][i], &RB[k][i], what) == 0);
            }
    }
    for (int k = 0; k < NJ; k++) results_clear(RA[k], 4), results_clear(RB[k], 4);
}

/* Random small pools, budgets, seat counts, n and lengths: nothing hangs. */
static void test_random_small_pools(void) {
    set_ptrs();
    const int64_t bb = block_bytes(BS);
    ifd_rng rng;
    rng_seed(&rng, 23);
    for (int round = 0; round < 24; round++) {
        inferd_engine_options o;
        inferd_engine_options_default(&o);
        const int32_t blocks = 2 + (int32_t)(rng_next(&rng) % 6);
        o.kv_cache_bytes = blocks * bb;
        o.max_num_seqs = 1 + (int32_t)(rng_next(&rng) % 6);
        o.max_num_batched_tokens = 1 + (int32_t)(rng_next(&rng) % 40);
        o.enable_prefix_caching = rng_next(&rng) % 4 != 0;
        char err[256];
        inferd_engine *e = engine_new(&o, err, sizeof err);
        if (!e) {
            CHECK(0);
            return;
        }
        const int32_t max_len = inferd_max_model_len(e);
        const int NJ = 1 + (int)(rng_next(&rng) % 8);
        int total = 0;
        for (int k = 0; k < NJ; k++) {
            J[k] = (job){.n_prompt = 1 + (int32_t)(rng_next(&rng) % (uint64_t)(max_len - 1)),
                         .max_tokens = 1 + (int32_t)(rng_next(&rng) % 80),
                         .n = 1 + (int32_t)(rng_next(&rng) % 4),
                         .temperature = rng_next(&rng) % 2 ? 1.0f : 0.0f};
            make_prompt(J[k].ids, J[k].n_prompt, &rng);
            total += J[k].n * max_len;
        }
        const int bound = 4 * total + 16;
        int calls = 0;
        const bool ok = run_jobs(e, J, NJ, PA, bound, &calls);
        CHECKF(ok, "round %d: %d blocks, %d seats, budget %d, %d jobs: %d steps", round, blocks,
               o.max_num_seqs, o.max_num_batched_tokens, NJ, calls);
        inferd_stats st;
        inferd_engine_stats(e, &st);
        CHECK(st.max_step_seqs <= o.max_num_seqs);
        const int32_t budget = o.max_num_batched_tokens > o.max_num_seqs ? o.max_num_batched_tokens
                                                                         : o.max_num_seqs;
        CHECK(st.max_step_tokens <= budget); /* the engine raises the budget to max_num_seqs */
        CHECK(st.kv_blocks_used == 0);
        inferd_engine_destroy(e);
        for (int k = 0; k < NJ; k++) results_clear(RA[k], 4);
        if (!ok) break;
    }
}

/* ---- aborts ----------------------------------------------------------------------- */

/* 300 aborts before one step: every one takes effect in that step. */
static void test_many_aborts_one_step(void) {
    enum { NR = 300 };
    static result r[NR];
    static int32_t ids[NR][8];
    uint64_t rid[NR];
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    char err[256];
    inferd_engine *e = engine_new(&o, err, sizeof err);
    if (!e) {
        CHECK(0);
        return;
    }
    ifd_rng rng;
    rng_seed(&rng, 31);
    results_clear(r, NR);
    for (int k = 0; k < NR; k++) {
        make_prompt(ids[k], 8, &rng);
        inferd_request q = {.prompt = ids[k], .n_prompt = 8, .cb = on_out, .user = &r[k]};
        inferd_sampling_default(&q.sampling);
        q.sampling.max_tokens = 100;
        q.sampling.ignore_eos = true;
        CHECK(inferd_submit(e, &q, &rid[k], err, sizeof err) == 0);
    }
    inferd_engine_step(e);
    for (int k = 0; k < NR; k++) inferd_abort(e, rid[k]);
    const int live = inferd_engine_step(e);
    CHECKF(live == 0, "%d requests still live after the step", live);
    int aborted = 0;
    for (int k = 0; k < NR; k++) aborted += r[k].done && r[k].reason == INFERD_FINISH_ABORT;
    CHECKF(aborted == NR, "%d of %d aborted", aborted, NR);
    inferd_stats st;
    inferd_engine_stats(e, &st);
    CHECK(st.aborted == NR);
    CHECK(st.kv_blocks_used == 0);
    inferd_engine_destroy(e);
    results_clear(r, NR);
}

/* ---- long token texts --------------------------------------------------------------- */

typedef struct wbuf {
    FILE *fp;
    bool ok;
} wbuf;

static void w_bytes(wbuf *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->fp) != n) w->ok = false;
}
static void w_u32(wbuf *w, uint32_t v) { w_bytes(w, &v, 4); }
static void w_u64(wbuf *w, uint64_t v) { w_bytes(w, &v, 8); }
static void w_str(wbuf *w, const char *s, uint64_t n) {
    w_u64(w, n);
    w_bytes(w, s, (size_t)n);
}

static size_t scalar_bytes(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

typedef struct token_swap {
    int64_t id;
    const char *text;
    size_t n;
} token_swap;

/* The body of a value (no type tag), tokenizer.ggml.tokens entries swapped per sw. */
static void w_value(wbuf *w, const gguf_value *v, const token_swap *sw, int n_sw) {
    switch (v->type) {
    case GGUF_TYPE_STRING: w_str(w, v->v.str.s, v->v.str.n); return;
    case GGUF_TYPE_ARRAY: {
        const gguf_array *a = &v->v.arr;
        w_u32(w, (uint32_t)a->type);
        w_u64(w, a->n);
        if (scalar_bytes(a->type)) {
            w_bytes(w, a->data, (size_t)a->n * scalar_bytes(a->type));
        } else if (a->type == GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < a->n; i++) {
                const token_swap *s = NULL;
                for (int k = 0; k < n_sw; k++)
                    if (sw[k].id == (int64_t)i) s = &sw[k];
                if (s) w_str(w, s->text, s->n);
                else w_str(w, a->strs[i].s, a->strs[i].n);
            }
        } else {
            for (uint64_t i = 0; i < a->n; i++) w_value(w, &a->arrs[i], NULL, 0);
        }
        return;
    }
    case GGUF_TYPE_FLOAT32: {
        float f = (float)v->v.f64;
        w_bytes(w, &f, 4);
        return;
    }
    case GGUF_TYPE_FLOAT64: w_bytes(w, &v->v.f64, 8); return;
    case GGUF_TYPE_BOOL: {
        uint8_t b = v->v.b;
        w_bytes(w, &b, 1);
        return;
    }
    default: /* integers, widened in the reader; little-endian: the low bytes */
        w_bytes(w, &v->v.u64, scalar_bytes(v->type));
        return;
    }
}

/* Copy the GGUF at src to dst with some tokenizer.ggml.tokens texts replaced; the
 * tensor data section is copied as it is (offsets are relative to it). */
static bool gguf_copy_swapping_tokens(const char *src, const char *dst, const token_swap *sw,
                                      int n_sw) {
    gguf_file f;
    char err[256];
    if (gguf_open(&f, src, err, sizeof err)) {
        fprintf(stderr, "  %s\n", err);
        return false;
    }
    wbuf w = {.fp = fopen(dst, "wb"), .ok = true};
    if (!w.fp) {
        gguf_close(&f);
        return false;
    }
    w_bytes(&w, "GGUF", 4);
    w_u32(&w, 3);
    w_u64(&w, f.n_tensors);
    w_u64(&w, f.n_kv);
    for (uint64_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        w_str(&w, kv->key.s, kv->key.n);
        w_u32(&w, (uint32_t)kv->val.type);
        const bool toks = gguf_str_eq(kv->key, "tokenizer.ggml.tokens");
        w_value(&w, &kv->val, toks ? sw : NULL, toks ? n_sw : 0);
    }
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        w_str(&w, t->name.s, t->name.n);
        w_u32(&w, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) w_u64(&w, (uint64_t)t->ne[d]);
        w_u32(&w, (uint32_t)t->type);
        w_u64(&w, t->offset);
    }
    long pos = ftell(w.fp);
    static const char zeros[256];
    size_t pad = pos < 0 ? 0 : (size_t)((f.alignment - (uint64_t)pos % f.alignment) % f.alignment);
    w_bytes(&w, zeros, pad);
    w_bytes(&w, f.base + f.data_offset, f.size - (size_t)f.data_offset);
    if (fclose(w.fp)) w.ok = false;
    gguf_close(&f);
    return w.ok && pos >= 0;
}

/* Two tokens get texts of 700 bytes and of 70,000 bytes (mixed 1-, 2- and 3-byte UTF-8
 * characters); a request forces each (logit_bias +100, greedy) and must see its text,
 * max_tokens times, in full; one also runs through a stop-string matcher. */
static void test_long_token_text(void) {
    const size_t lens[2] = {700, 70000};
    char *texts[2];
    for (int k = 0; k < 2; k++) {
        texts[k] = malloc(lens[k]);
        if (!texts[k]) {
            CHECK(0);
            return;
        }
        static const char *unit[] = {"ab", "\xc3\xa9", "\xe2\x82\xac", "x"}; /* é, € */
        memcpy(texts[k], "\xe2\x96\x81", 3); /* ▁: a leading space once decoded */
        size_t n = 3;
        for (int u = 0; n + strlen(unit[u]) <= lens[k]; u = (u + 1) % 4) {
            memcpy(texts[k] + n, unit[u], strlen(unit[u]));
            n += strlen(unit[u]);
        }
        while (n < lens[k]) texts[k][n++] = 'z';
    }
    char path[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/inferd_longtok_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    /* the model's last two ids are ordinary pieces */
    const token_swap sw[2] = {{1022, texts[0], lens[0]}, {1023, texts[1], lens[1]}};
    CHECK(gguf_copy_swapping_tokens(MODEL, path, sw, 2));
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.model_path = path;
    char err[256];
    inferd_engine *e = engine_new(&o, err, sizeof err);
    CHECK(e != NULL);
    for (int k = 0; e && k < 2; k++) {
        const tokenizer *tok = inferd_model(e)->tok;
        CHECK(tok_get_type(tok, (int32_t)sw[k].id) == TOK_TYPE_NORMAL);
        const size_t piece = tok_piece(tok, (int32_t)sw[k].id, false, NULL, 0);
        CHECKF(piece == lens[k] - 2, "piece of %zu bytes", piece); /* ▁ (3 bytes) -> ' ' */
        int32_t ids[4] = {1, 50, 60, 70};
        result r[1] = {0};
        const inferd_logit_bias bias = {(int32_t)sw[k].id, 100.0f};
        const char *stop[1] = {"\xe2\x82\xac" "QQ"}; /* held back at every €, never matches */
        inferd_request q = {.prompt = ids, .n_prompt = 4, .cb = on_out, .user = r};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = 0.0f;
        q.sampling.max_tokens = 3;
        q.sampling.logit_bias = &bias;
        q.sampling.n_logit_bias = 1;
        if (k == 1) q.sampling.stop = stop, q.sampling.n_stop = 1;
        CHECK(inferd_submit(e, &q, NULL, err, sizeof err) == 0);
        while (inferd_engine_step(e) > 0) {
        }
        CHECK(r[0].done && r[0].reason == INFERD_FINISH_LENGTH);
        CHECK(r[0].n == 3);
        for (int32_t i = 0; i < r[0].n; i++) CHECK(r[0].ids[i] == (int32_t)sw[k].id);
        char *want = malloc(3 * piece + 1);
        size_t n_want = 0;
        for (int i = 0; want && i < 3; i++)
            n_want += tok_piece(tok, (int32_t)sw[k].id, false, want + n_want, piece);
        CHECKF(r[0].text_bytes == n_want, "token %d: %zu text bytes, want %zu", k, r[0].text_bytes,
               n_want);
        CHECK(want && r[0].text_bytes == n_want && memcmp(r[0].text, want, n_want) == 0);
        free(want);
        results_clear(r, 1);
    }
    inferd_engine_destroy(e);
    unlink(path);
    free(texts[0]);
    free(texts[1]);
}

TEST_MAIN(T(test_pool_clamps_max_model_len), T(test_long_sequence_small_pool),
          T(test_concurrent_exceed_pool), T(test_random_small_pools), T(test_many_aborts_one_step),
          T(test_long_token_text))
