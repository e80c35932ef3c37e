/* test_engine_backend_fault.c — a failing backend op fails the requests of its step and
 * nothing else (backend.h: every op returns a status). The engine runs the in-memory
 * `tiny` model (--random-weights) on the CPU backend, whose op table is wrapped so that
 * copy_blocks (the copy-on-write of an n > 1 request's shared partial block) or
 * forward fails once: the requests scheduled in that step end with
 * INFERD_FINISH_ERROR, a request that was waiting then runs to its full length, a
 * request submitted afterwards does too, and no KV block is leaked. */
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "inferd.h"
#include "test_util.h"
#include "util/status.h"

typedef struct result {
    int32_t n;
    bool done;
    inferd_finish_reason reason;
} result;

static void on_out(const inferd_output *o, void *user) {
    result *r = (result *)user + o->index;
    r->n += o->n_tokens;
    if (o->finished) {
        r->done = true;
        r->reason = o->finish_reason;
    }
}

/* The wrapped op table: the real one, with one failure armed. */
static const backend_ops *real_ops;
static int fail_copy, fail_forward; /* fail the next call with n > 0 (copy) / any call */
static int n_copy_calls;

static int wrap_forward(backend *b, const ifd_batch *bt, float *logits) {
    if (fail_forward) {
        fail_forward = 0;
        return IFD_ERR_INTERNAL;
    }
    return real_ops->forward(b, bt, logits);
}
static int wrap_copy(backend *b, const int32_t *src, const int32_t *dst, int32_t n) {
    n_copy_calls++;
    if (fail_copy && n > 0) {
        fail_copy = 0;
        return IFD_ERR_INTERNAL;
    }
    return real_ops->copy_blocks(b, src, dst, n);
}
static backend_ops wrapped;

static inferd_engine *engine_new(void) {
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.random_weights = "tiny";
    o.random_dtype = "f32";
    o.n_threads = 2;
    o.max_num_seqs = 3;
    o.kv_cache_bytes = 8 << 20;
    o.max_model_len = 256;
    o.threaded = false;
    o.device = INFERD_DEVICE_CPU;
    char err[256];
    inferd_engine *e = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) {
        CHECKF(0, "%s", err);
        return NULL;
    }
    real_ops = e->be->ops;
    wrapped = *real_ops;
    wrapped.forward = wrap_forward;
    wrapped.copy_blocks = wrap_copy;
    e->be->ops = &wrapped;
    return e;
}

static void submit(inferd_engine *e, int32_t n_prompt, int32_t n, int32_t max_tokens, result *out) {
    int32_t ids[64];
    for (int32_t i = 0; i < n_prompt; i++) ids[i] = i ? 259 + (i * 37) % 250 : 1;
    inferd_request q = {.prompt = ids, .n_prompt = n_prompt, .cb = on_out, .user = out};
    inferd_sampling_default(&q.sampling);
    q.sampling.temperature = 0.0f;
    q.sampling.max_tokens = max_tokens;
    q.sampling.ignore_eos = true;
    q.sampling.n = n;
    char err[256];
    CHECKF(inferd_submit(e, &q, NULL, err, sizeof err) == 0, "%s", err);
}

static void run(inferd_engine *e, int max_steps) {
    for (int i = 0; i < max_steps && inferd_engine_step(e) > 0; i++) {
    }
}

static void check_no_leak(inferd_engine *e) {
    inferd_stats st;
    inferd_engine_stats(e, &st);
    CHECKF(st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0, "running %d waiting %d used %d",
           st.running, st.waiting, st.kv_blocks_used);
}

static void test_copy_failure(void) {
    inferd_engine *e = engine_new();
    if (!e) return;
    /* A: n = 2 over a 10-token prompt (a partial block: its first decodes copy it);
     * B: n = 1 in the same steps; W, submitted after the first step, waits (max_num_seqs
     * 3 = A's two + B) */
    result a[2] = {0}, b[1] = {0}, w[1] = {0}, later[2] = {0};
    submit(e, 10, 2, 8, a);
    submit(e, 20, 1, 8, b);
    n_copy_calls = 0;
    run(e, 1); /* both prompts; A forks (its child shares the partial block) */
    CHECK(a[0].n == 1 && a[1].n == 1 && b[0].n == 1 && n_copy_calls == 0);
    submit(e, 12, 1, 8, w);
    fail_copy = 1;
    run(e, 200);
    CHECK(n_copy_calls > 0 && fail_copy == 0); /* the failure was used */
    CHECK(a[0].done && a[1].done && a[0].reason == INFERD_FINISH_ERROR && a[1].reason == INFERD_FINISH_ERROR);
    CHECK(b[0].done && b[0].reason == INFERD_FINISH_ERROR); /* in the failed step */
    CHECKF(w[0].done && w[0].reason == INFERD_FINISH_LENGTH && w[0].n == 8, "waiting: %d tokens, reason %d",
           w[0].n, (int)w[0].reason);
    submit(e, 10, 2, 6, later); /* n = 2 again: its copies now succeed */
    run(e, 200);
    CHECK(later[0].done && later[0].reason == INFERD_FINISH_LENGTH && later[0].n == 6);
    CHECK(later[1].done && later[1].reason == INFERD_FINISH_LENGTH && later[1].n == 6);
    check_no_leak(e);
    inferd_engine_destroy(e);
}

static void test_forward_failure(void) {
    inferd_engine *e = engine_new();
    if (!e) return;
    result a[1] = {0}, b[1] = {0};
    submit(e, 8, 1, 5, a);
    run(e, 2); /* a's prompt and a first decode */
    CHECK(!a[0].done && a[0].n >= 1);
    fail_forward = 1;
    run(e, 1);
    CHECK(a[0].done && a[0].reason == INFERD_FINISH_ERROR);
    submit(e, 8, 1, 5, b);
    run(e, 100);
    CHECK(b[0].done && b[0].reason == INFERD_FINISH_LENGTH && b[0].n == 5);
    check_no_leak(e);
    inferd_engine_destroy(e);
}

TEST_MAIN(T(test_copy_failure), T(test_forward_failure))
