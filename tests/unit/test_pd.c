/* test_pd.c — prefill/decode disaggregation in the engine (issue 13), through the public
 * API only: a prefill engine computes the prompt and draws the first token under a KV
 * lease, the bytes of its blocks move by inferd_kv_read / inferd_kv_write (what the
 * transports in src/kvx do over a network), and a decode engine imports them and decodes
 * on. Checked:
 *
 * - greedy and seeded outputs are the tokens of a colocated run, for prompts of 1, 15,
 *   16, 17 and 33 tokens (the shared Shakespeare model) and 1000 tokens (a random-weight
 *   model with a 2k context), with prefix-cache hits on the prefill side, the decode side
 *   or both (the same prompt again; a prompt sharing a prefix);
 * - a failed import with recompute gives the colocated output too; without it the request
 *   ends with an error; both leave the decode pool as it was;
 * - an abort while importing waits for the answer (the blocks are the importer's until
 *   then) and leaves nothing held;
 * - leases: released ones and expired ones give their blocks back (pinned 0);
 * - back-pressure: more imports than the decode pool holds at once all complete, in
 *   order, as blocks come free. */
#include <string.h>
#include <time.h>

#include "inferd.h"
#include "test_util.h"

#define TARGET INFERD_SHARED_DIR "/models/shakespeare-target.gguf"
#define MAX_OUT 64

typedef struct result {
    int32_t ids[MAX_OUT];
    int32_t n;
    bool done;
    inferd_finish_reason why;
    uint64_t lease;
    int32_t blocks[256];
    int32_t n_blocks;
} result;

static void on_out(const inferd_output *o, void *user) {
    result *r = user;
    for (int32_t i = 0; i < o->n_tokens && r->n < MAX_OUT; i++) r->ids[r->n++] = o->tokens[i];
    if (o->finished) {
        r->done = true;
        r->why = o->finish_reason;
        r->lease = o->kv_lease;
        r->n_blocks = o->n_kv_blocks < 256 ? o->n_kv_blocks : 256;
        if (o->kv_blocks) memcpy(r->blocks, o->kv_blocks, (size_t)r->n_blocks * sizeof(int32_t));
    }
}

typedef struct import {
    bool called;
    uint64_t id;
    int32_t n_cached;
    int32_t blocks[256];
    int32_t n_blocks;
} import;

static void on_import(void *user, uint64_t id, int32_t n_cached, const int32_t *blocks, int32_t n_blocks) {
    import *im = user;
    im->called = true;
    im->id = id;
    im->n_cached = n_cached;
    im->n_blocks = n_blocks < 256 ? n_blocks : 256;
    memcpy(im->blocks, blocks, (size_t)im->n_blocks * sizeof(int32_t));
}

static bool RANDOM; /* the random-weight model (long prompts) instead of the shared one */
static bool EARLY;  /* the importer hands token 1 over before the KV (inferd_kv_import_first) */

static inferd_engine *make(int64_t kv_bytes) {
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    if (RANDOM) {
        o.random_weights = "tiny";
        o.random_seed = 5;
    } else {
        o.model_path = TARGET;
    }
    /* INFERD_TEST_DEVICE=emu|cuda: the CUDA backend (test_pd_emu: under the SIMT emulation;
     * its KV moves through b_kv_rw's staging copies) */
    const char *d = getenv("INFERD_TEST_DEVICE");
    o.device = d && !strcmp(d, "emu") ? INFERD_DEVICE_EMU : d && !strcmp(d, "cuda") ? INFERD_DEVICE_CUDA : INFERD_DEVICE_CPU;
    o.threaded = false;
    o.max_num_seqs = 8;
    if (kv_bytes) {
        o.kv_cache_bytes = kv_bytes;
        o.kv_cache_fraction = 0;
    }
    char err[256] = "";
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) fprintf(stderr, "  engine: %s\n", err);
    return e;
}

static void drain(inferd_engine *e) {
    for (int guard = 0; inferd_engine_step(e) > 0 && guard < 100000; guard++) {
    }
}

static void sampling(inferd_sampling *s, bool seeded, int32_t max_tokens) {
    inferd_sampling_default(s);
    s->max_tokens = max_tokens;
    s->ignore_eos = true;
    if (seeded) {
        s->temperature = 0.9f;
        s->top_p = 0.95f;
        s->seed = 1234;
        s->has_seed = true;
    } else {
        s->temperature = 0;
    }
}

static int32_t *prompt_of(int32_t n, uint64_t salt, int32_t vocab, int32_t shared) {
    int32_t *p = malloc((size_t)n * sizeof(int32_t));
    uint64_t s = 77;
    for (int32_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull + (i >= shared ? salt : 0);
        p[i] = i == 0 ? 1 : 3 + (int32_t)((s >> 33) % (uint64_t)(vocab - 3));
    }
    return p;
}

static void colocated(inferd_engine *c, const int32_t *p, int32_t n, bool seeded, result *out) {
    memset(out, 0, sizeof *out);
    inferd_request q = {.prompt = p, .n_prompt = n, .cb = on_out, .user = out};
    sampling(&q.sampling, seeded, MAX_OUT);
    char err[256];
    CHECK(inferd_submit(c, &q, NULL, err, sizeof err) == 0);
    drain(c);
    CHECK(out->done && out->n == MAX_OUT);
}

/* One request through P and D; fail: the import fails (recompute or not). abort: the
 * request is aborted while importing. */
typedef enum { OK_, FAIL_RECOMPUTE, FAIL_ERROR, ABORT_ } how;

static void disaggregated(inferd_engine *P, inferd_engine *D, const int32_t *p, int32_t n, bool seeded, how h,
                          result *out, int32_t *n_cached_p, int32_t *n_cached_d) {
    char err[256];
    result pre = {0};
    inferd_request q = {.prompt = p, .n_prompt = n, .cb = on_out, .user = &pre, .kv_hold_ms = 60000};
    sampling(&q.sampling, seeded, 1);
    CHECK(inferd_submit(P, &q, NULL, err, sizeof err) == 0);
    drain(P);
    CHECK(pre.done && pre.n == 1 && pre.lease != 0);
    inferd_kv_info ki;
    inferd_kv_get_info(P, &ki);
    CHECKF(pre.n_blocks == (n + ki.block_size - 1) / ki.block_size, "%d blocks for %d tokens", pre.n_blocks, n);
    inferd_pd_stats ps;
    inferd_pd_get_stats(P, &ps);
    CHECK(ps.leases == 1 && ps.leased_blocks == pre.n_blocks);

    memset(out, 0, sizeof *out);
    import im = {0};
    q = (inferd_request){.prompt = p, .n_prompt = n, .cb = on_out, .user = out, .kv_import = on_import,
                         .kv_import_user = &im};
    sampling(&q.sampling, seeded, MAX_OUT);
    uint64_t id;
    CHECK(inferd_submit(D, &q, &id, err, sizeof err) == 0);
    for (int i = 0; i < 4 && !im.called; i++) inferd_engine_step(D);
    CHECK(im.called && im.id == id && im.n_blocks == pre.n_blocks);
    if (!im.called) return;
    if (n_cached_d) *n_cached_d = im.n_cached;
    if (n_cached_p) *n_cached_p = 0;
    /* nothing runs while importing: the steps find no work */
    CHECK(inferd_engine_step(D) == 1 && !out->done && out->n == 0);
    if (EARLY) { /* token 1 goes out at once; the sequence still waits for its KV */
        inferd_kv_import_first(D, id, pre.ids[0]);
        inferd_engine_step(D);
        CHECKF(out->n == 1 && out->ids[0] == pre.ids[0] && !out->done, "%d tokens out before the KV", out->n);
        inferd_kv_import_first(D, id, pre.ids[0]); /* twice: ignored */
        CHECK(inferd_engine_step(D) == 1 && out->n == 1 && !out->done);
    }
    const int32_t b0 = im.n_cached / ki.block_size, nb = im.n_blocks - b0;
    if (h == OK_ || h == ABORT_) {
        char *buf = malloc((size_t)(nb > 0 ? nb : 1) * ki.block_bytes);
        CHECK(inferd_kv_read_lease(P, pre.lease, b0, nb, buf) == 0);
        CHECK(inferd_kv_write(D, im.blocks + b0, nb, buf) == 0);
        CHECK(inferd_kv_read_lease(P, pre.lease, b0, nb + 1, buf) == INFERD_ERR_INVALID);
        free(buf);
    }
    inferd_kv_release(P, pre.lease);
    inferd_engine_step(P);
    inferd_pd_get_stats(P, &ps);
    CHECK(ps.leases == 0 && ps.leased_blocks == 0);
    {
        char one[1];
        CHECK(inferd_kv_read_lease(P, pre.lease, 0, 0, one) == INFERD_ERR_NOT_FOUND);
    }
    if (h == ABORT_) {
        inferd_abort(D, id);
        inferd_engine_step(D);
        CHECK(!out->done); /* deferred: the blocks are still the importer's */
        inferd_pd_stats ds;
        inferd_pd_get_stats(D, &ds);
        CHECK(ds.importing == 1);
    }
    inferd_kv_import_done(D, id, h == OK_ || h == ABORT_ ? pre.ids[0] : -1, h == FAIL_RECOMPUTE);
    drain(D);
    CHECK(out->done);
}

static int32_t used_blocks(inferd_engine *e) {
    inferd_stats st;
    inferd_engine_stats(e, &st);
    return st.kv_blocks_used;
}

static void same(const result *a, const result *b, const char *what, int32_t n, bool seeded) {
    bool eq = a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * sizeof(int32_t));
    CHECKF(eq, "%s: prompt %d %s: %d vs %d tokens, first %d/%d", what, n, seeded ? "seeded" : "greedy", a->n, b->n,
           a->n ? a->ids[0] : -1, b->n ? b->ids[0] : -1);
}

static void run_lengths(const int32_t *lens, int n_lens) {
    inferd_engine *C = make(0), *P = make(0), *D = make(0);
    CHECK(C && P && D);
    if (!C || !P || !D) goto out;
    inferd_kv_info ip, id_;
    inferd_kv_get_info(P, &ip);
    inferd_kv_get_info(D, &id_);
    CHECK(ip.supported && ip.compat_hash == id_.compat_hash && ip.block_bytes > 0);
    const int32_t vocab = inferd_n_vocab(C);
    for (int k = 0; k < n_lens; k++) {
        const int32_t n = lens[k];
        int32_t *p = prompt_of(n, (uint64_t)k, vocab, 0);
        int32_t *p2 = prompt_of(n, 999, vocab, n / 2); /* shares the first half */
        for (int seeded = 0; seeded < 2; seeded++) {
            result ref, ref2, got;
            colocated(C, p, n, seeded, &ref);
            colocated(C, p2, n, seeded, &ref2);
            const int32_t base_d = used_blocks(D);
            int32_t hit_d = -1;
            /* 1: cold on both sides (the first pass; later passes find the prompt cached) */
            disaggregated(P, D, p, n, seeded, OK_, &got, NULL, &hit_d);
            same(&ref, &got, "disaggregated", n, seeded);
            CHECK(used_blocks(D) == base_d);
            /* 2: again: the decode side's prefix cache holds the full blocks */
            disaggregated(P, D, p, n, seeded, OK_, &got, NULL, &hit_d);
            same(&ref, &got, "decode-side hit", n, seeded);
            CHECKF(hit_d == (n - 1) / ip.block_size * ip.block_size, "hit %d for %d tokens", hit_d, n);
            /* 3: a prompt sharing half: hits on both sides for that half */
            disaggregated(P, D, p2, n, seeded, OK_, &got, NULL, NULL);
            same(&ref2, &got, "shared prefix", n, seeded);
            CHECK(used_blocks(D) == base_d);
        }
        free(p);
        free(p2);
    }
out:
    inferd_engine_destroy(C);
    inferd_engine_destroy(P);
    inferd_engine_destroy(D);
}

static void test_identical_shakespeare(void) {
    RANDOM = false;
    const int32_t lens[] = {1, 15, 16, 17, 33, 150};
    run_lengths(lens, 6);
}

/* The same on the device INFERD_TEST_DEVICE names (the CPU when unset): a few lengths. */
static void test_identical_device(void) {
    RANDOM = false;
    const int32_t lens[] = {1, 16, 17, 40};
    run_lengths(lens, 4);
}

static void test_identical_long(void) {
    RANDOM = true;
    const int32_t lens[] = {1000};
    run_lengths(lens, 1);
    RANDOM = false;
}

static void test_failures(void) {
    RANDOM = false;
    inferd_engine *C = make(0), *P = make(0), *D = make(0);
    CHECK(C && P && D);
    if (!C || !P || !D) goto out;
    const int32_t vocab = inferd_n_vocab(C);
    for (int32_t n = 17; n <= 40; n += 23) {
        int32_t *p = prompt_of(n, 5, vocab, 0);
        for (int seeded = 0; seeded < 2; seeded++) {
            result ref, got;
            colocated(C, p, n, seeded, &ref);
            const int32_t base = used_blocks(D);
            disaggregated(P, D, p, n, seeded, FAIL_RECOMPUTE, &got, NULL, NULL);
            same(&ref, &got, "recompute", n, seeded);
            CHECK(got.why == INFERD_FINISH_LENGTH);
            CHECK(used_blocks(D) == base);
            disaggregated(P, D, p, n, seeded, FAIL_ERROR, &got, NULL, NULL);
            CHECK(got.why == INFERD_FINISH_ERROR && got.n == (EARLY ? 1 : 0));
            CHECK(used_blocks(D) == base);
            disaggregated(P, D, p, n, seeded, ABORT_, &got, NULL, NULL);
            CHECK(got.why == INFERD_FINISH_ABORT && got.n == (EARLY ? 1 : 0));
            CHECK(used_blocks(D) == base);
        }
        free(p);
    }
    inferd_pd_stats ds;
    inferd_pd_get_stats(D, &ds);
    CHECKF(ds.importing == 0 && ds.import_failures == 8 && ds.import_recomputes == 4 && ds.imports_total == 12,
           "importing %d failures %llu recomputes %llu total %llu", ds.importing,
           (unsigned long long)ds.import_failures, (unsigned long long)ds.import_recomputes,
           (unsigned long long)ds.imports_total);
    /* an import may not come with a hold, n > 1, a grammar or prompt logprobs */
    {
        int32_t one = 1;
        char err[256];
        inferd_request q = {.prompt = &one, .n_prompt = 1, .cb = on_out, .kv_import = on_import};
        sampling(&q.sampling, false, 4);
        q.sampling.n = 2;
        CHECK(inferd_submit(D, &q, NULL, err, sizeof err) == INFERD_ERR_INVALID);
        q.sampling.n = 1;
        q.sampling.prompt_logprobs = 0;
        CHECK(inferd_submit(D, &q, NULL, err, sizeof err) == INFERD_ERR_INVALID);
        q.sampling.prompt_logprobs = -1;
        q.kv_hold_ms = 10;
        CHECK(inferd_submit(D, &q, NULL, err, sizeof err) == INFERD_ERR_INVALID);
    }
out:
    inferd_engine_destroy(C);
    inferd_engine_destroy(P);
    inferd_engine_destroy(D);
}

/* Token 1 before the KV: the same outputs (cold, cached, shared prefix), and after a
 * failed import the prompt and token 1 are recomputed and the output is still the
 * colocated one; a token that would end the request waits for the answer. */
static void test_early_first_token(void) {
    EARLY = true;
    const int32_t lens[] = {1, 17, 33};
    run_lengths(lens, 3);
    test_failures();
    EARLY = false;
    RANDOM = false;
    inferd_engine *P = make(0), *D = make(0);
    CHECK(P && D);
    if (P && D) {
        const int32_t vocab = inferd_n_vocab(D);
        int32_t *p = prompt_of(20, 3, vocab, 0);
        char err[256];
        result pre = {0}, out = {0};
        inferd_request q = {.prompt = p, .n_prompt = 20, .cb = on_out, .user = &pre, .kv_hold_ms = 60000};
        sampling(&q.sampling, false, 1);
        CHECK(inferd_submit(P, &q, NULL, err, sizeof err) == 0);
        drain(P);
        import im = {0};
        q = (inferd_request){.prompt = p, .n_prompt = 20, .cb = on_out, .user = &out, .kv_import = on_import,
                             .kv_import_user = &im};
        sampling(&q.sampling, false, 1); /* max_tokens 1: token 1 ends it */
        uint64_t id;
        CHECK(inferd_submit(D, &q, &id, err, sizeof err) == 0);
        for (int i = 0; i < 4 && !im.called; i++) inferd_engine_step(D);
        CHECK(im.called);
        inferd_kv_import_first(D, id, pre.ids[0]);
        inferd_engine_step(D);
        CHECK(out.n == 0 && !out.done); /* not yet: it would end the request under the importer */
        inferd_kv_info ki;
        inferd_kv_get_info(P, &ki);
        char *buf = malloc((size_t)im.n_blocks * ki.block_bytes);
        CHECK(inferd_kv_read_lease(P, pre.lease, 0, im.n_blocks, buf) == 0);
        CHECK(inferd_kv_write(D, im.blocks, im.n_blocks, buf) == 0);
        free(buf);
        CHECK(inferd_kv_release(P, pre.lease) == 0); /* live until now: what was read is its */
        inferd_engine_step(P);
        CHECK(inferd_kv_release(P, pre.lease) == INFERD_ERR_NOT_FOUND); /* gone */
        inferd_kv_import_done(D, id, pre.ids[0], false);
        drain(D);
        drain(P);
        CHECK(out.done && out.n == 1 && out.ids[0] == pre.ids[0] && out.why == INFERD_FINISH_LENGTH);
        CHECK(used_blocks(D) == 0);
        free(p);
    }
    inferd_engine_destroy(P);
    inferd_engine_destroy(D);
}

/* A lease not released expires; its blocks go back (the prefix cache keeps them). */
static void test_lease_expiry(void) {
    RANDOM = false;
    inferd_engine *P = make(0);
    CHECK(P);
    if (!P) return;
    int32_t *p = prompt_of(40, 3, inferd_n_vocab(P), 0);
    result pre = {0};
    char err[256];
    inferd_request q = {.prompt = p, .n_prompt = 40, .cb = on_out, .user = &pre, .kv_hold_ms = 50};
    sampling(&q.sampling, false, 1);
    CHECK(inferd_submit(P, &q, NULL, err, sizeof err) == 0);
    drain(P);
    CHECK(pre.done && pre.lease != 0 && pre.n_blocks == 3);
    CHECK(used_blocks(P) == 3);
    inferd_engine_step(P);
    inferd_pd_stats ps;
    inferd_pd_get_stats(P, &ps);
    CHECK(ps.leases == 1 && ps.leased_blocks == 3 && ps.lease_expiries == 0);
    nanosleep(&(struct timespec){0, 80 * 1000000}, NULL);
    inferd_engine_step(P);
    inferd_pd_get_stats(P, &ps);
    CHECK(ps.leases == 0 && ps.leased_blocks == 0 && ps.lease_expiries == 1);
    CHECK(used_blocks(P) == 0);
    inferd_kv_release(P, pre.lease); /* late: ignored */
    inferd_engine_step(P);
    free(p);
    inferd_engine_destroy(P);
}

/* Threaded: a lease expires with the engine otherwise idle (its timer). */
static void test_lease_expiry_threaded(void) {
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.model_path = TARGET;
    o.device = INFERD_DEVICE_CPU;
    char err[256];
    inferd_engine *P = NULL;
    CHECK(inferd_engine_create(&P, &o, err, sizeof err) == 0);
    if (!P) return;
    int32_t *p = prompt_of(20, 4, inferd_n_vocab(P), 0);
    result pre = {0};
    inferd_request q = {.prompt = p, .n_prompt = 20, .cb = on_out, .user = &pre, .kv_hold_ms = 100};
    sampling(&q.sampling, false, 1);
    CHECK(inferd_submit(P, &q, NULL, err, sizeof err) == 0);
    inferd_pd_stats ps = {0};
    for (int i = 0; i < 400 && ps.lease_expiries == 0; i++) {
        nanosleep(&(struct timespec){0, 5 * 1000000}, NULL);
        inferd_pd_get_stats(P, &ps);
    }
    CHECK(ps.leases_total == 1 && ps.lease_expiries == 1 && ps.leases == 0);
    free(p);
    inferd_engine_destroy(P);
}

/* More imports than the decode pool holds at once: each waits for blocks (in order) and
 * all complete with the colocated tokens. */
static void test_back_pressure(void) {
    RANDOM = false;
    inferd_engine *C = make(0), *P = make(0);
    /* 12 blocks of 16 tokens (f16, 4 layers, 2 KV heads, head_dim 64): 3 prompts of 60 tokens
     * with their outputs do not fit at once */
    inferd_engine *D = make((int64_t)12 * 16 * 4 * 2 * 2 * 64 * 2);
    CHECK(C && P && D);
    if (!C || !P || !D) goto out;
    enum { N = 5, LEN = 60 };
    const int32_t vocab = inferd_n_vocab(C);
    int32_t *p[N];
    result ref[N], pre[N], got[N];
    import im[N];
    uint64_t ids[N];
    bool answered[N];
    char err[256];
    for (int k = 0; k < N; k++) {
        p[k] = prompt_of(LEN, (uint64_t)k + 10, vocab, 0);
        colocated(C, p[k], LEN, k % 2, &ref[k]);
        memset(&pre[k], 0, sizeof pre[k]);
        inferd_request q = {.prompt = p[k], .n_prompt = LEN, .cb = on_out, .user = &pre[k], .kv_hold_ms = 60000};
        sampling(&q.sampling, k % 2, 1);
        CHECK(inferd_submit(P, &q, NULL, err, sizeof err) == 0);
    }
    drain(P);
    for (int k = 0; k < N; k++) {
        memset(&got[k], 0, sizeof got[k]);
        memset(&im[k], 0, sizeof im[k]);
        answered[k] = false;
        inferd_request q = {.prompt = p[k], .n_prompt = LEN, .cb = on_out, .user = &got[k], .kv_import = on_import,
                            .kv_import_user = &im[k]};
        sampling(&q.sampling, k % 2, MAX_OUT);
        CHECK(inferd_submit(D, &q, &ids[k], err, sizeof err) == 0);
    }
    inferd_kv_info ki;
    inferd_kv_get_info(P, &ki);
    int max_at_once = 0;
    for (int guard = 0; guard < 100000; guard++) {
        const int live = inferd_engine_step(D);
        int at_once = 0;
        for (int k = 0; k < N; k++) at_once += im[k].called && !answered[k];
        if (at_once > max_at_once) max_at_once = at_once;
        for (int k = 0; k < N; k++)
            if (im[k].called && !answered[k]) {
                const int32_t b0 = im[k].n_cached / ki.block_size, nb = im[k].n_blocks - b0;
                char *buf = malloc((size_t)nb * ki.block_bytes);
                CHECK(inferd_kv_read(P, pre[k].blocks + b0, nb, buf) == 0);
                CHECK(inferd_kv_write(D, im[k].blocks + b0, nb, buf) == 0);
                free(buf);
                inferd_kv_release(P, pre[k].lease);
                inferd_kv_import_done(D, ids[k], pre[k].ids[0], false);
                answered[k] = true;
            }
        if (live == 0) break;
    }
    CHECKF(max_at_once < N, "all %d imports held blocks at once", max_at_once);
    for (int k = 0; k < N; k++) {
        CHECK(answered[k]);
        same(&ref[k], &got[k], "back-pressure", LEN, k % 2);
        free(p[k]);
    }
    CHECK(used_blocks(D) == 0);
out:
    inferd_engine_destroy(C);
    inferd_engine_destroy(P);
    inferd_engine_destroy(D);
}

TEST_MAIN(T(test_identical_shakespeare), T(test_identical_device), T(test_identical_long), T(test_failures), T(test_early_first_token), T(test_lease_expiry),
          T(test_lease_expiry_threaded), T(test_back_pressure))
