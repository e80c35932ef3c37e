/* test_engine_backend_fault.c — a failing backend op fails the requests of its step and
 * nothing else (backend.h: every op returns a status). The engine runs the in-memory
 * `tiny` model (--random-weights) on the CPU backend, whose op table is wrapped so that
 * copy_blocks (the copy-on-write of an n > 1 request's shared partial block) or
 * forward fails once: the requests scheduled in that step end with
 * INFERD_FINISH_ERROR, a request that was waiting then runs to its full length, a
 * request submitted afterwards does too, and no KV block is leaked.
 *
 * A lost device (the backend returns IFD_ERR_DEVICE_LOST from then on, as the CUDA
 * backend does after a sticky error) kills the engine instead: every request live or
 * waiting ends with INFERD_FINISH_ERROR in that step, inferd_engine_healthy turns
 * false, every later submit is refused with INFERD_ERR_DEVICE_LOST, and a threaded
 * engine's clients all get their final event (no hang). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

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
/* the device is lost after this many more forwards / at the next copy with n > 0:
 * every call from then on returns IFD_ERR_DEVICE_LOST (-1: armed off) */
static int lose_after_forwards = -1, lose_at_copy;
static bool device_lost;
static int n_forward_calls;

static int wrap_forward(backend *b, const ifd_batch *bt, float *logits) {
    n_forward_calls++;
    if (lose_after_forwards == 0) device_lost = true;
    if (lose_after_forwards > 0) lose_after_forwards--;
    if (device_lost) return IFD_ERR_DEVICE_LOST;
    if (fail_forward) {
        fail_forward = 0;
        return IFD_ERR_INTERNAL;
    }
    return real_ops->forward(b, bt, logits);
}
static int wrap_copy(backend *b, const int32_t *src, const int32_t *dst, int32_t n) {
    n_copy_calls++;
    if (lose_at_copy && n > 0) device_lost = true;
    if (device_lost) return IFD_ERR_DEVICE_LOST;
    if (fail_copy && n > 0) {
        fail_copy = 0;
        return IFD_ERR_INTERNAL;
    }
    return real_ops->copy_blocks(b, src, dst, n);
}
static backend_ops wrapped;

static void arm_reset(void) {
    fail_copy = fail_forward = 0;
    lose_after_forwards = -1;
    lose_at_copy = 0;
    device_lost = false;
    n_forward_calls = n_copy_calls = 0;
}

static inferd_engine *engine_new_opt(bool threaded) {
    arm_reset();
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.random_weights = "tiny";
    o.random_dtype = "f32";
    o.n_threads = 2;
    o.max_num_seqs = 3;
    o.kv_cache_bytes = 8 << 20;
    o.max_model_len = 256;
    o.threaded = threaded;
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
    e->be->ops = &wrapped; /* a threaded engine is idle until the first submit */
    return e;
}
static inferd_engine *engine_new(void) { return engine_new_opt(false); }

static int try_submit(inferd_engine *e, int32_t n_prompt, int32_t n, int32_t max_tokens, result *out) {
    int32_t ids[64];
    for (int32_t i = 0; i < n_prompt; i++) ids[i] = i ? 259 + (i * 37) % 250 : 1;
    inferd_request q = {.prompt = ids, .n_prompt = n_prompt, .cb = on_out, .user = out};
    inferd_sampling_default(&q.sampling);
    q.sampling.temperature = 0.0f;
    q.sampling.max_tokens = max_tokens;
    q.sampling.ignore_eos = true;
    q.sampling.n = n;
    char err[256] = "";
    return inferd_submit(e, &q, NULL, err, sizeof err);
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
    CHECK(inferd_engine_healthy(e)); /* a recoverable failure: the engine goes on */
    submit(e, 8, 1, 5, b);
    run(e, 100);
    CHECK(b[0].done && b[0].reason == INFERD_FINISH_LENGTH && b[0].n == 5);
    check_no_leak(e);
    inferd_engine_destroy(e);
}

/* Every request of r[0..n) ended with an error. */
static void check_all_failed(const result *r, int n, const char *what) {
    for (int i = 0; i < n; i++)
        CHECKF(r[i].done && r[i].reason == INFERD_FINISH_ERROR, "%s %d: done %d reason %d", what, i,
               (int)r[i].done, (int)r[i].reason);
}

static void check_dead(inferd_engine *e) {
    CHECK(!inferd_engine_healthy(e));
    result late[1] = {0};
    CHECK(try_submit(e, 8, 1, 4, late) == INFERD_ERR_DEVICE_LOST);
    CHECK(!late[0].done && late[0].n == 0); /* refused: never reaches the engine */
}

static void test_forward_device_lost(void) {
    inferd_engine *e = engine_new();
    if (!e) return;
    /* a, b, c run (max_num_seqs 3); w waits for a seat */
    result a[1] = {0}, b[1] = {0}, c[1] = {0}, w[1] = {0};
    submit(e, 8, 1, 20, a);
    submit(e, 9, 1, 20, b);
    submit(e, 10, 1, 20, c);
    submit(e, 11, 1, 20, w);
    run(e, 2);
    CHECK(a[0].n >= 1 && b[0].n >= 1 && c[0].n >= 1 && w[0].n == 0 && !w[0].done);
    CHECK(inferd_engine_healthy(e));
    lose_after_forwards = 0;
    const int calls = n_forward_calls;
    CHECK(inferd_engine_step(e) == 0); /* nothing is left alive */
    CHECK(n_forward_calls == calls + 1);
    check_all_failed(a, 1, "a");
    check_all_failed(b, 1, "b");
    check_all_failed(c, 1, "c");
    check_all_failed(w, 1, "waiting");
    check_dead(e);
    CHECK(inferd_engine_step(e) == 0 && n_forward_calls == calls + 1); /* no forward again */
    check_no_leak(e);
    inferd_engine_destroy(e);
}

static void test_copy_device_lost(void) {
    inferd_engine *e = engine_new();
    if (!e) return;
    result a[2] = {0}, b[1] = {0};
    submit(e, 10, 2, 8, a); /* n = 2 over a partial block: its first decodes copy it */
    submit(e, 20, 1, 8, b);
    run(e, 1);
    CHECK(a[0].n == 1 && a[1].n == 1 && b[0].n == 1);
    lose_at_copy = 1;
    run(e, 50);
    CHECK(device_lost && n_copy_calls > 0);
    check_all_failed(a, 2, "a");
    check_all_failed(b, 1, "b");
    check_dead(e);
    check_no_leak(e);
    inferd_engine_destroy(e);
}

/* Threaded: clients wait on a condition variable for their final events, as the HTTP
 * threads do; the device is lost mid-generation with requests running and queued. */
static pthread_mutex_t t_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t t_cv = PTHREAD_COND_INITIALIZER;
static int t_done;
static void on_out_threaded(const inferd_output *o, void *user) {
    pthread_mutex_lock(&t_mu);
    on_out(o, user);
    if (o->finished) t_done++;
    pthread_cond_broadcast(&t_cv);
    pthread_mutex_unlock(&t_mu);
}

static void test_threaded_device_lost(void) {
    inferd_engine *e = engine_new_opt(true);
    if (!e) return;
    enum { N = 6 };
    result r[N];
    memset(r, 0, sizeof r);
    t_done = 0;
    pthread_mutex_lock(&t_mu);
    lose_after_forwards = 3; /* written before the first submit wakes the engine thread */
    pthread_mutex_unlock(&t_mu);
    for (int i = 0; i < N; i++) {
        int32_t ids[16];
        for (int32_t k = 0; k < 8 + i; k++) ids[k] = k ? 259 + (k * 37 + i) % 250 : 1;
        inferd_request q = {.prompt = ids, .n_prompt = 8 + i, .cb = on_out_threaded, .user = &r[i]};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = 0.0f;
        q.sampling.max_tokens = 200;
        q.sampling.ignore_eos = true;
        char err[256];
        CHECKF(inferd_submit(e, &q, NULL, err, sizeof err) == 0, "%s", err);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&t_mu);
    while (t_done < N)
        if (pthread_cond_timedwait(&t_cv, &t_mu, &until) != 0) break;
    const int done = t_done;
    pthread_mutex_unlock(&t_mu);
    CHECKF(done == N, "%d of %d requests got a final event within 30 s", done, N);
    if (done == N) {
        check_all_failed(r, N, "request");
        for (int i = 0; i < N; i++) CHECK(r[i].n < 200); /* ended by the loss, not by max_tokens */
    }
    check_dead(e);
    inferd_engine_destroy(e); /* joins the engine thread: no hang */
}

TEST_MAIN(T(test_copy_failure), T(test_forward_failure), T(test_forward_device_lost), T(test_copy_device_lost),
          T(test_threaded_device_lost))
