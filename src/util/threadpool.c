/* threadpool.c — persistent pthread pool.
 *
 * A job is published in one 64-bit word, `work` = generation (24 bits) | next task
 * index (20) | task count (20); any thread (the caller or a worker) claims task i by a
 * compare-and-swap of i -> i + 1 on that word, and the caller returns once `n_done`
 * reaches the task count. Workers never have to check in: a worker that is asleep or
 * descheduled when a job arrives costs nothing (the caller, or the other workers, run
 * its share), which keeps a loaded machine from stalling every job on the slowest
 * thread's next time slice.
 *
 * Why a claim is safe without a lock: the job slot (fn, ctx) is rewritten only after
 * every task of the previous job has completed, hence after every claim of it. A
 * claimer reads the slot after an acquire load of `work` = (g, i, n) and only runs the
 * task if its CAS from that same value succeeds; success with i < n means job g was
 * still unfinished, so the slot it read was job g's (the generation field rules out
 * ABA across jobs).
 *
 * Sleeping: idle workers spin on `gen` for SPIN_NS, then wait on a condition variable;
 * the store-then-load pairing (gen / n_sleeping, both seq_cst) means a wake-up is never
 * lost: either the caller sees the sleeper and broadcasts under the mutex, or the
 * sleeper sees the new generation before it waits. */
#include "threadpool.h"

#include <pthread.h>
#include <stdbool.h>
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
    /* job slot: written (relaxed atomics) by the caller while no job runs */
    tp_fn fn;
    void *ctx;
    uint64_t work;  /* atomic: gen | next | n, see WORK_* */
    int32_t n_done; /* atomic: tasks of the current job completed */
    uint32_t job_gen;
    uint64_t gen;   /* atomic: bumped per job, what idle workers watch */
    int stop;       /* atomic */
    int n_sleeping; /* atomic */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

#define WORK_BITS 20
#define WORK_MASK ((1ull << WORK_BITS) - 1)
#define WORK_PACK(g, i, n) (((uint64_t)(g) << (2 * WORK_BITS)) | ((uint64_t)(i) << WORK_BITS) | (uint64_t)(n))

int tp_online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Claim and run tasks of the current job until none is left. */
static void run_tasks(tp *p, int32_t thread) {
    for (;;) {
        uint64_t w = __atomic_load_n(&p->work, __ATOMIC_ACQUIRE);
        const uint32_t i = (uint32_t)((w >> WORK_BITS) & WORK_MASK), n = (uint32_t)(w & WORK_MASK);
        if (i >= n) return;
        const tp_fn fn = __atomic_load_n(&p->fn, __ATOMIC_RELAXED);
        void *ctx = __atomic_load_n(&p->ctx, __ATOMIC_RELAXED);
        if (!__atomic_compare_exchange_n(&p->work, &w, w + (1ull << WORK_BITS), false,
                                         __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;
        fn(ctx, (int32_t)i, (int32_t)n, thread);
        __atomic_fetch_add(&p->n_done, 1, __ATOMIC_RELEASE);
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
    if ((uint64_t)n_tasks > WORK_MASK) { /* more tasks than the word holds: run in rounds */
        for (int32_t i = 0; i < n_tasks; i++) fn(ctx, i, n_tasks, 0);
        return;
    }
    __atomic_store_n(&p->fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&p->ctx, ctx, __ATOMIC_RELAXED);
    __atomic_store_n(&p->n_done, 0, __ATOMIC_RELAXED);
    p->job_gen = (p->job_gen + 1) & 0xffffff;
    __atomic_store_n(&p->work, WORK_PACK(p->job_gen, 0, n_tasks), __ATOMIC_RELEASE);
    publish(p);
    run_tasks(p, 0);
    /* every task is claimed; wait for the ones other threads are still running */
    for (uint32_t it = 0; __atomic_load_n(&p->n_done, __ATOMIC_ACQUIRE) < n_tasks; it++) {
        CPU_RELAX();
        if ((it & 1023) == 1023) sched_yield(); /* its thread lost its core */
    }
}
