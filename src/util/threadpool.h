/* threadpool.h — a persistent pool of worker threads for data-parallel kernels.
 *
 * tp_run(tp, fn, ctx, n) runs fn(ctx, i, n, thread) for every task i in [0, n) and
 * returns when all are done; the calling thread runs tasks too. Tasks are handed out
 * in index order from a shared counter, so which thread runs which task depends on
 * timing: a task's result must depend only on its index (use `thread` only to pick
 * per-thread scratch). With that rule results never depend on timing or on the
 * number of threads.
 *
 * Between jobs the workers spin for a short while (decode steps issue jobs a few
 * microseconds apart) and then sleep on a condition variable, so an idle pool costs
 * no CPU. Thread-safety: one thread at a time drives a pool (tp_run is not reentrant
 * and must not be called from inside a task). */
#ifndef INFERD_THREADPOOL_H
#define INFERD_THREADPOOL_H

#include <stdint.h>

typedef struct tp tp;

/* fn(ctx, task_index, n_tasks, thread_index); thread_index in [0, tp_n_threads). */
typedef void (*tp_fn)(void *ctx, int32_t task, int32_t n_tasks, int32_t thread);

/* n_threads counts the caller: n - 1 workers are started. 0 = number of online CPUs.
 * Returns NULL when threads cannot be created. */
tp *tp_create(int n_threads);
void tp_destroy(tp *p); /* accepts NULL; joins the workers */
int tp_n_threads(const tp *p);
/* Run n_tasks tasks; blocks until all are done. p may be NULL (runs inline). */
void tp_run(tp *p, tp_fn fn, void *ctx, int32_t n_tasks);
/* Number of online CPUs (at least 1). */
int tp_online_cpus(void);

#endif
