/* test_threadpool.c — the persistent pool runs every task exactly once per job, with
 * valid thread indices, across many repeated jobs (including jobs with fewer tasks
 * than threads, one task, and zero tasks), after the workers went to sleep, and with a
 * NULL pool; create/destroy cycles do not leak or hang. Prints the per-job overhead. */
#include <unistd.h>

#include "test_util.h"
#include "util/common.h"
#include "util/threadpool.h"

typedef struct count_job {
    int32_t hits[1024];
    int32_t bad_thread;
    int n_threads;
    int64_t sum;
} count_job;

static void count_task(void *p, int32_t i, int32_t n, int32_t thread) {
    count_job *j = p;
    __atomic_fetch_add(&j->hits[i], 1, __ATOMIC_RELAXED);
    if (thread < 0 || thread >= j->n_threads) __atomic_fetch_add(&j->bad_thread, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&j->sum, (int64_t)i * n, __ATOMIC_RELAXED);
}

static int run_and_check(tp *p, int32_t n_tasks) {
    static count_job j;
    memset(&j, 0, sizeof j);
    j.n_threads = tp_n_threads(p);
    tp_run(p, count_task, &j, n_tasks);
    int ok = j.bad_thread == 0;
    for (int32_t i = 0; i < n_tasks; i++) ok = ok && j.hits[i] == 1;
    for (int32_t i = n_tasks; i < 1024; i++) ok = ok && j.hits[i] == 0;
    return ok;
}

static void test_every_task_once(void) {
    const int sizes[] = {1, 2, 3, 4};
    for (size_t s = 0; s < IFD_ARRAY_LEN(sizes); s++) {
        tp *p = tp_create(sizes[s]);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK(tp_n_threads(p) == sizes[s]);
        const int32_t counts[] = {0, 1, 2, 3, 7, 64, 1000, 1024};
        for (size_t c = 0; c < IFD_ARRAY_LEN(counts); c++)
            CHECKF(run_and_check(p, counts[c]), "threads %d tasks %d", sizes[s], counts[c]);
        tp_destroy(p);
    }
    CHECK(run_and_check(NULL, 17)); /* NULL pool runs inline */
    tp *p = tp_create(0);
    CHECK(p && tp_n_threads(p) == tp_online_cpus());
    tp_destroy(p);
    tp_destroy(NULL);
}

/* Many back-to-back jobs (workers spinning) and jobs after the workers slept. */
static void test_repeated_use(void) {
    tp *p = tp_create(3);
    CHECK(p != NULL);
    if (!p) return;
    int ok = 1;
    for (int rep = 0; rep < 2000; rep++) ok = ok && run_and_check(p, 1 + rep % 9);
    CHECK(ok);
    for (int rep = 0; rep < 3; rep++) {
        usleep(20000); /* longer than the spin phase: workers are asleep */
        CHECK(run_and_check(p, 50));
    }
    tp_destroy(p);
    for (int rep = 0; rep < 50; rep++) { /* create/destroy cycles */
        tp *q = tp_create(2);
        CHECK(q != NULL);
        if (rep % 2) CHECK(run_and_check(q, 5));
        tp_destroy(q);
    }
}

typedef struct sum_job {
    const float *x;
    float partial[64];
} sum_job;

/* Results depend on the task index only: a fixed split gives the same bits every time. */
static void sum_task(void *p, int32_t i, int32_t n, int32_t thread) {
    sum_job *j = p;
    float s = 0.0f;
    for (int k = i * 1000; k < (i + 1) * 1000; k++) s += j->x[k];
    j->partial[i] = s;
}

static void test_deterministic(void) {
    static float x[64000];
    for (int i = 0; i < 64000; i++) x[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.3f;
    float first = 0.0f;
    for (int nt = 1; nt <= 4; nt++) {
        tp *p = tp_create(nt);
        for (int rep = 0; rep < 100; rep++) {
            sum_job j = {.x = x};
            tp_run(p, sum_task, &j, 64);
            float s = 0.0f;
            for (int i = 0; i < 64; i++) s += j.partial[i];
            if (nt == 1 && rep == 0) first = s;
            CHECK(s == first);
        }
        tp_destroy(p);
    }
}

static void noop(void *p, int32_t i, int32_t n, int32_t t) {}

static void test_overhead(void) {
    tp *p = tp_create(0);
    CHECK(p != NULL);
    if (!p) return;
    const int reps = 2000;
    tp_run(p, noop, NULL, tp_n_threads(p));
    double t0 = ifd_now_s();
    for (int i = 0; i < reps; i++) tp_run(p, noop, NULL, tp_n_threads(p));
    double dt = ifd_now_s() - t0;
    printf("  %d threads: %.2f us per empty job (back to back)\n", tp_n_threads(p), dt / reps * 1e6);
    usleep(20000);
    t0 = ifd_now_s();
    tp_run(p, noop, NULL, tp_n_threads(p));
    printf("  first job after the workers slept: %.1f us\n", (ifd_now_s() - t0) * 1e6);
    tp_destroy(p);
}

TEST_MAIN(T(test_every_task_once), T(test_repeated_use), T(test_deterministic),
          T(test_overhead))
