/* threadpool.c — persistent pthread pool: a generation counter publishes each job,
 * workers spin on it for SPIN_NS and then sleep on a condition variable; the caller
 * wakes sleepers only when there are any, runs tasks itself, and waits until every
 * worker has checked in for the job (so the next job can reuse the job slot safely).
 *
 * Memory ordering: the caller writes the job slot, then bumps `gen` (seq_cst); a
 * worker that reads the new `gen` (seq_cst) sees the slot. Sleeping uses the
 * store-then-load pairing (gen / n_sleeping, both seq_cst) so a wake-up is never lost:
 * either the caller sees the sleeper and broadcasts under the mutex, or the sleeper
 * sees the new generation before it waits. */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long an idle worker spins before sleeping. Jobs inside one forward pass come
 * microseconds apart; a whole decode step is ~10 ms, so 1 ms of spinning covers the
 * gaps within a step and between back-to-back steps without burning a core forever. */
#define SPIN_NS 1000000LL

typedef struct tp_worker {
    tp *pool;
    pthread_t th;
    int32_t index;
} tp_worker;

struct tp {
    int n_threads; /* including the caller */
    tp_worker *workers;
    int n_started;
    /* job slot (written by the caller while no job runs) */
    tp_fn fn;
    void *ctx;
    int32_t n_tasks;
    int32_t next;  /* atomic: next task index to hand out */
    int32_t n_done; /* atomic: workers that finished the current job */
    uint64_t gen;   /* atomic: job generation */
    int stop;       /* atomic */
    int n_sleeping; /* atomic */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

int tp_online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void run_tasks(tp *p, int32_t thread) {
    const tp_fn fn = p->fn;
    void *ctx = p->ctx;
    const int32_t n = p->n_tasks;
    for (;;) {
        const int32_t i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (i >= n) break;
        fn(ctx, i, n, thread);
    }
}

/* Wait until gen != seen; returns the new generation. */
static uint64_t wait_job(tp *p, uint64_t seen) {
    uint64_t g;
    int64_t t0 = 0;
    for (uint32_t it = 0;; it++) {
        g = __atomic_load_n(&p->gen, __ATOMIC_SEQ_CST);
        if (g != seen) return g;
        CPU_RELAX();
        if ((it & 255) == 255) {
            const int64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) break;
        }
    }
    pthread_mutex_lock(&p->mu);
    __atomic_fetch_add(&p->n_sleeping, 1, __ATOMIC_SEQ_CST);
    while ((g = __atomic_load_n(&p->gen, __ATOMIC_SEQ_CST)) == seen)
        pthread_cond_wait(&p->cv, &p->mu);
    __atomic_fetch_sub(&p->n_sleeping, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    tp_worker *w = arg;
    tp *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) break;
        run_tasks(p, w->index);
        __atomic_fetch_add(&p->n_done, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void publish(tp *p) {
    __atomic_fetch_add(&p->gen, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&p->n_sleeping, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

tp *tp_create(int n_threads) {
    if (n_threads <= 0) n_threads = tp_online_cpus();
    tp *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            tp_destroy(p);
            return NULL;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            tp_worker *w = &p->workers[i];
            w->pool = p;
            w->index = i + 1;
            if (pthread_create(&w->th, NULL, worker_main, w)) {
                tp_destroy(p);
                return NULL;
            }
            p->n_started++;
        }
    }
    return p;
}

void tp_destroy(tp *p) {
    if (!p) return;
    if (p->n_started) {
        __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
        publish(p);
        for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].th, NULL);
    }
    free(p->workers);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int tp_n_threads(const tp *p) {
    return p ? p->n_threads : 1;
}

void tp_run(tp *p, tp_fn fn, void *ctx, int32_t n_tasks) {
    if (n_tasks <= 0) return;
    if (!p || p->n_started == 0 || n_tasks == 1) {
        for (int32_t i = 0; i < n_tasks; i++) fn(ctx, i, n_tasks, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    __atomic_store_n(&p->next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->n_done, 0, __ATOMIC_RELAXED);
    publish(p);
    run_tasks(p, 0);
    for (uint32_t it = 0; __atomic_load_n(&p->n_done, __ATOMIC_ACQUIRE) < p->n_started; it++) {
        CPU_RELAX();
        if ((it & 4095) == 4095) sched_yield(); /* a worker lost its core */
    }
}
