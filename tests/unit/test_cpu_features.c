/* test_cpu_features.c — the CPU-feature probe runs exactly once per process, however
 * many threads make the first call at the same moment (it used to let racing first
 * callers each run it and write the shared answer: a data race), and every caller
 * sees the same answer. Each trial is a fresh process (fork) whose threads are
 * released together from a spin barrier into their first cpu_features_get. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "util/cpu_features.h"

#define N_THREADS 4
#define N_TRIALS 200

static atomic_int g_arrived;
static const cpu_features *g_seen[N_THREADS];

static void *first_call(void *arg) {
    const int i = (int)(intptr_t)arg;
    atomic_fetch_add(&g_arrived, 1);
    while (atomic_load(&g_arrived) < N_THREADS) {
    }
    g_seen[i] = cpu_features_get();
    return NULL;
}

/* In a child: N_THREADS racing first calls; exit status = probe runs, or 100 + error. */
static void trial(void) {
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        if (pthread_create(&th[i], NULL, first_call, (void *)(intptr_t)i)) _exit(101);
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 1; i < N_THREADS; i++)
        if (g_seen[i] != g_seen[0] || memcmp(g_seen[i], g_seen[0], sizeof(cpu_features))) _exit(102);
    _exit(cpu_features_debug_probes());
}

static void test_probe_runs_once(void) {
    int hist[4] = {0}; /* exit 1, 2, >2, other */
    for (int t = 0; t < N_TRIALS; t++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid < 0) return;
        if (pid == 0) trial();
        int st = 0;
        CHECK(waitpid(pid, &st, 0) == pid);
        const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        hist[code == 1 ? 0 : code == 2 ? 1 : code > 2 && code < 100 ? 2 : 3]++;
    }
    printf("  %d trials: probe ran once in %d, twice in %d, more in %d, failed %d\n", N_TRIALS,
           hist[0], hist[1], hist[2], hist[3]);
    CHECKF(hist[0] == N_TRIALS, "the probe ran more than once (or a trial failed)");
    /* and in this process, after many calls */
    for (int i = 0; i < 1000; i++) (void)cpu_features_get();
    CHECK(cpu_features_debug_probes() == 1);
    CHECK(cpu_level_max() >= CPU_LEVEL_SCALAR && cpu_level_max() < CPU_LEVEL_COUNT_);
}

TEST_MAIN(T(test_probe_runs_once))
