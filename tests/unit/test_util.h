/* test_util.h — a tiny test harness: tests registered in one list, each runnable by
 * name (libuv style): `test_x` runs all, `test_x NAME` runs one. */
#ifndef INFERD_TEST_UTIL_H
#define INFERD_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failures = 0;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            t_failures++;                                                             \
        }                                                                             \
    } while (0)

#define CHECKF(cond, ...)                                                             \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            t_failures++;                                                             \
        }                                                                             \
    } while (0)

typedef struct test_case {
    const char *name;
    void (*fn)(void);
} test_case;

static inline int test_main(int argc, char **argv, const test_case *cases, int n) {
    int ran = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
        int before = t_failures;
        cases[i].fn();
        ran++;
        if (t_failures != before) failed++;
        printf("%s %s\n", t_failures == before ? "ok  " : "FAIL", cases[i].name);
    }
    if (ran == 0) {
        fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "(any)");
        return 1;
    }
    printf("%d passed, %d failed\n", ran - failed, failed);
    return t_failures ? 1 : 0;
}

#define TEST_MAIN(...)                                                                \
    int main(int argc, char **argv) {                                                 \
        static const test_case cases[] = {__VA_ARGS__};                               \
        return test_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0]))); \
    }
#define T(fn) {#fn, fn}

#endif
