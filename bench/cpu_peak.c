/* cpu_peak.c — the compute roofline prefill is measured against: core clock and the
 * int8 / f32 multiply-accumulate peak of this CPU, per core and for N threads.
 * Standalone (no inferd code), not a test: prints figures and one final JSON line.
 *
 *   cc -O2 -pthread bench/cpu_peak.c -o build/cpu_peak && build/cpu_peak [THREADS]
 *
 * Clock: a chain of dependent 1-cycle integer adds (cycles = adds). Peaks: each
 * instruction run on 12 independent accumulators (throughput, not latency bound),
 * counted as multiply-adds x 2 ops:
 *   - avx512_vnni: VPDPBUSD zmm = 64 u8 x s8 products summed into 16 int32 = 128 ops;
 *   - avx_vnni:    VPDPBUSD ymm (VEX) = 64 ops;
 *   - avx2_int8:   the AVX2 int8 dot kernels use (VPMADDUBSW ymm, then VPMADDWD by
 *                  ones, then VPADDD): 32 products = 64 ops per 3 instructions;
 *   - f32 FMA zmm (32 ops) and ymm (16 ops): the F16/BF16/F32 paths' peak.
 * peak(ISA) = instructions per cycle x ops per instruction x clock x threads. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU time of the calling thread: the machine may be shared, and time slices taken by
 * other processes must not count as slow cycles. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define ITERS 20000000L

/* adds per second of one dependent chain = clock */
static double clock_hz(void) {
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t x = 0, n = ITERS;
        double t0 = now_s();
        /* a register operand: newer Intel cores fold add-immediate chains at rename
         * (several a cycle), which read as a clock of 15 GHz */
        const uint64_t one = 1;
        __asm__ volatile("1:\n\t"
                         "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                         "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                         "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                         "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                         "dec %1\n\tjnz 1b"
                         : "+r"(x), "+r"(n)
                         : "r"(one));
        double dt = now_s() - t0;
        double hz = 16.0 * ITERS / dt;
        if (hz > best) best = hz;
    }
    return best;
}

#define ACC12(T, z) T a0 = z, a1 = z, a2 = z, a3 = z, a4 = z, a5 = z, a6 = z, a7 = z, a8 = z, a9 = z, a10 = z, a11 = z
#define APPLY12(OP) \
    OP(a0); OP(a1); OP(a2); OP(a3); OP(a4); OP(a5); OP(a6); OP(a7); OP(a8); OP(a9); OP(a10); OP(a11)
#define SUM12(add) add(add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7))), add(add(a8, a9), add(a10, a11)))

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double run_vnni512(long n) {
    __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-2);
    ACC12(__m512i, _mm512_setzero_si512());
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        __asm__ volatile("" : "+v"(w), "+v"(x));
#define OPV(a) a = _mm512_dpbusd_epi32(a, w, x); __asm__ volatile("" : "+v"(a))
        APPLY12(OPV);
#undef OPV
    }
    double dt = now_s() - t0;
    volatile int sink = _mm512_reduce_add_epi32(SUM12(_mm512_add_epi32));
    (void)sink;
    return dt;
}

__attribute__((target("avx2,avxvnni"))) static double run_vnni256(long n) {
    __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2);
    ACC12(__m256i, _mm256_setzero_si256());
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        __asm__ volatile("" : "+x"(w), "+x"(x));
#define OPV(a) a = _mm256_dpbusd_avx_epi32(a, w, x); __asm__ volatile("" : "+x"(a))
        APPLY12(OPV);
#undef OPV
    }
    double dt = now_s() - t0;
    volatile int sink = _mm256_extract_epi32(SUM12(_mm256_add_epi32), 0);
    (void)sink;
    return dt;
}

/* maddubs + madd + add per step, 12 independent chains (as kern_avx2.c's int8 dot) */
__attribute__((target("avx2"))) static double run_avx2_int8(long n) {
    const __m256i w = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    __m256i x = _mm256_set1_epi8(-2);
    __asm__ volatile("" : "+x"(x));
    ACC12(__m256i, _mm256_setzero_si256());
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
#define OPV(a) __asm__ volatile("" : "+x"(x)); a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones)); __asm__ volatile("" : "+x"(a))
        APPLY12(OPV);
#undef OPV
    }
    double dt = now_s() - t0;
    volatile int sink = _mm256_extract_epi32(SUM12(_mm256_add_epi32), 0);
    (void)sink;
    return dt;
}

__attribute__((target("avx512f"))) static double run_fma512(long n) {
    __m512 w = _mm512_set1_ps(1.0001f), x = _mm512_set1_ps(0.9999f);
    ACC12(__m512, _mm512_setzero_ps());
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        __asm__ volatile("" : "+v"(w), "+v"(x));
#define OPV(a) a = _mm512_fmadd_ps(w, x, a); __asm__ volatile("" : "+v"(a))
        APPLY12(OPV);
#undef OPV
    }
    double dt = now_s() - t0;
    volatile float sink = _mm512_reduce_add_ps(SUM12(_mm512_add_ps));
    (void)sink;
    return dt;
}

__attribute__((target("avx2,fma"))) static double run_fma256(long n) {
    __m256 w = _mm256_set1_ps(1.0001f), x = _mm256_set1_ps(0.9999f);
    ACC12(__m256, _mm256_setzero_ps());
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        __asm__ volatile("" : "+x"(w), "+x"(x));
#define OPV(a) a = _mm256_fmadd_ps(w, x, a); __asm__ volatile("" : "+x"(a))
        APPLY12(OPV);
#undef OPV
    }
    double dt = now_s() - t0;
    __m256 s = SUM12(_mm256_add_ps);
    volatile float sink = _mm256_cvtss_f32(s);
    (void)sink;
    return dt;
}

typedef double (*kernel_fn)(long);
typedef struct bench {
    const char *name, *feature;
    kernel_fn fn;
    double ops_per_insn; /* 2 x multiply-adds per counted instruction (group) */
} bench;

typedef struct targ {
    kernel_fn fn;
    long n;
    double dt;
} targ;

static void *thread_main(void *p) {
    targ *a = p;
    a->dt = a->fn(a->n);
    return NULL;
}

/* best-of-3 instructions per second over nt threads running concurrently */
static double insn_rate(kernel_fn fn, int nt) {
    const long n = 4000000; /* x 12 instructions */
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[64];
        targ a[64];
        for (int i = 0; i < nt; i++) {
            a[i] = (targ){fn, n, 0};
            pthread_create(&th[i], NULL, thread_main, &a[i]);
        }
        double worst = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            if (a[i].dt > worst) worst = a[i].dt;
        }
        double r = 12.0 * (double)n * nt / worst;
        if (r > best) best = r;
    }
    return best;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    if (nt < 1 || nt > 64) nt = 2;
    __builtin_cpu_init();
    const double hz = clock_hz();
    const bench benches[] = {
        {"avx512_vnni (vpdpbusd zmm)", "avx512vnni", run_vnni512, 128},
        {"avx_vnni (vpdpbusd ymm)", "avxvnni", run_vnni256, 64},
        {"avx2_int8 (maddubs+madd+add ymm)", "avx2", run_avx2_int8, 64},
        {"f32 fma zmm", "avx512f", run_fma512, 32},
        {"f32 fma ymm", "fma", run_fma256, 16},
    };
    printf("cpu_peak: clock %.3f GHz (dependent-add chain, 1 thread), %d threads\n", hz / 1e9, nt);
    printf("%-34s %10s %12s %14s %14s\n", "kernel", "insn/cyc", "ops/cyc/core", "peak 1t GOPS",
           "measured GOPS");
    char json[2048];
    int off = snprintf(json, sizeof json, "{\"clock_ghz\": %.4f, \"threads\": %d", hz / 1e9, nt);
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) {
        const bench *b = &benches[i];
        int have = 1;
        if (!strcmp(b->feature, "avx512vnni")) have = __builtin_cpu_supports("avx512vnni");
        else if (!strcmp(b->feature, "avxvnni")) have = __builtin_cpu_supports("avxvnni");
        else if (!strcmp(b->feature, "avx512f")) have = __builtin_cpu_supports("avx512f");
        else if (!strcmp(b->feature, "avx2")) have = __builtin_cpu_supports("avx2");
        else if (!strcmp(b->feature, "fma")) have = __builtin_cpu_supports("fma");
        if (!have) {
            printf("%-34s %10s\n", b->name, "n/a");
            continue;
        }
        const double r1 = insn_rate(b->fn, 1);
        const double ipc = r1 / hz;
        const double rn = insn_rate(b->fn, nt);
        printf("%-34s %10.2f %12.1f %14.1f %14.1f\n", b->name, ipc, ipc * b->ops_per_insn,
               r1 * b->ops_per_insn / 1e9, rn * b->ops_per_insn / 1e9);
        off += snprintf(json + off, sizeof json - (size_t)off,
                        ", \"%s\": {\"ipc\": %.3f, \"gops_1t\": %.1f, \"gops\": %.1f}", b->feature,
                        ipc, r1 * b->ops_per_insn / 1e9, rn * b->ops_per_insn / 1e9);
    }
    printf("(peak N threads = measured with N threads running at once)\n%s}\n", json);
    return 0;
}
