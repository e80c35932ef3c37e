/* membw.c — read bandwidth of this machine with 1..N threads (N = online CPUs): the
 * roofline the decode matmuls are measured against. Streams a buffer much larger than
 * the caches with 256-bit loads, best of several passes. Not a test: prints figures.
 *
 * usage: membw [MiB per pass, default 1024] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/threadpool.h"

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t read_sum(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, a0);
    return out[0] ^ out[1] ^ out[2] ^ out[3];
}
#else
static uint64_t read_sum(const uint8_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        s ^= v;
    }
    return s;
}
#endif

typedef struct job {
    const uint8_t *buf;
    size_t bytes;
    uint64_t sink[64];
} job;

static void task(void *p, int32_t i, int32_t n, int32_t thread) {
    job *j = p;
    const size_t per = j->bytes / (size_t)n / 128 * 128;
    j->sink[i % 64] ^= read_sum(j->buf + per * (size_t)i, per);
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 1024;
    const size_t bytes = mib << 20;
    uint8_t *buf = NULL;
    if (posix_memalign((void **)&buf, 64, bytes)) return 1;
    memset(buf, 1, bytes); /* fault in */
    const int max_threads = tp_online_cpus();
    printf("membw: %zu MiB buffer, read bandwidth (best of 5 passes)\n", mib);
    for (int nt = 1; nt <= max_threads; nt++) {
        tp *pool = tp_create(nt);
        job j = {.buf = buf, .bytes = bytes};
        double best = 1e9;
        for (int rep = 0; rep < 6; rep++) {
            double t0 = ifd_now_s();
            tp_run(pool, task, &j, nt);
            double dt = ifd_now_s() - t0;
            if (rep > 0 && dt < best) best = dt; /* first pass warms up the threads */
        }
        printf("  threads %d: %6.1f GB/s\n", nt, (double)bytes / best / 1e9);
        tp_destroy(pool);
    }
    free(buf);
    return 0;
}
