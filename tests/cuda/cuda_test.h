/* cuda_test.h — shared pieces of the kernel tests in tests/cuda/: each test_*.cu is built
 * twice, under the SIMT emulation (ctest runs it in the forward, reverse and random
 * block orders: IFD_EMU_ORDER) and, on a GPU host, natively (tests/gpu/run.sh). Inputs
 * are seeded random values, never zeros; results are compared with the plain C
 * reference (src/backend/cpu/ops_ref.c, src/model/quant.c) within the tolerance stated
 * beside each check. */
#ifndef INFERD_TESTS_CUDA_TEST_H
#define INFERD_TESTS_CUDA_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/test_util.h"
#include "devrt.h"

using namespace IFD_NS;

/* Deterministic uniform floats in [lo, hi). */
static inline uint64_t ct_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline void ct_fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)((ct_next(&s) >> 40) * (1.0 / 16777216.0));
}

/* A device copy of host data (freed by ct_free). */
static inline void *ct_upload(const void *h, size_t bytes) {
    void *d = NULL;
    if (dev_malloc(&d, bytes) != DEV_OK || dev_h2d(d, h, bytes, NULL) != DEV_OK || dev_sync(NULL) != DEV_OK) {
        fprintf(stderr, "ct_upload: %s\n", dev_error());
        exit(1);
    }
    return d;
}
static inline void *ct_alloc(size_t bytes) {
    void *d = NULL;
    if (dev_malloc(&d, bytes) != DEV_OK || dev_memset(d, 0x7f, bytes, NULL) != DEV_OK) {
        fprintf(stderr, "ct_alloc: %s\n", dev_error());
        exit(1);
    }
    return d;
}
static inline void ct_download(void *h, const void *d, size_t bytes) {
    if (dev_d2h(h, d, bytes, NULL) != DEV_OK || dev_sync(NULL) != DEV_OK) {
        fprintf(stderr, "ct_download: %s\n", dev_error());
        exit(1);
    }
}
static inline void ct_free(void *d) { dev_free(d); }

/* Largest |a-b| / (atol + rtol*|b|) over n; <= 1 passes. Reports the worst index. */
static inline double ct_compare(const float *a, const float *b, size_t n, double atol, double rtol,
                                const char *what) {
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double lim = atol + rtol * fabs((double)b[i]);
        double r = (a[i] != a[i] || b[i] != b[i]) ? INFINITY : d / lim;
        if (r > worst) {
            worst = r;
            wi = i;
        }
    }
    if (worst > 1.0)
        fprintf(stderr, "  %s: worst at %zu: got %.9g want %.9g (%.3g of the tolerance)\n", what, wi,
                (double)a[wi], (double)b[wi], worst);
    return worst;
}
#define CHECK_CLOSE(got, want, n, atol, rtol, what) CHECK(ct_compare((got), (want), (n), (atol), (rtol), (what)) <= 1.0)

/* A launch's status (after IFD_LAUNCH and the launcher's return). */
static inline int ct_sync(void) {
    int rc = dev_sync(NULL);
    if (rc != DEV_OK) fprintf(stderr, "  device: %s\n", dev_error());
    return rc;
}

#ifdef IFD_SIMT_EMU
#define CT_EMULATED 1
#else
#define CT_EMULATED 0
#endif

#endif
