/* cpu_features.h — what SIMD the CPU (and the OS, for the wide register state) offers,
 * and which dispatch level the CPU kernels should use.
 *
 * Detection runs cpuid + xgetbv exactly once per process (pthread_once: callers that
 * race on the first call wait for it) and caches the answer; the environment variable
 * INFERD_CPU=scalar|avx2|avx512 caps the level (to test the lower paths on a machine
 * that has the higher ones; it never raises it). Thread-safe. */
#ifndef INFERD_CPU_FEATURES_H
#define INFERD_CPU_FEATURES_H

#include <stdbool.h>

typedef struct cpu_features {
    bool avx2, fma, f16c;             /* with OS support for YMM state */
    bool avx512f, avx512bw, avx512vl; /* with OS support for ZMM/opmask state */
    bool avx512vnni;                  /* VPDPBUSD on 128/256/512-bit registers */
    bool avx512bf16;                  /* VDPBF16PS */
    bool avxvnni;                     /* VEX-encoded VPDPBUSD (256-bit) */
} cpu_features;

/* Kernel dispatch levels, lowest first. */
typedef enum cpu_level {
    CPU_LEVEL_SCALAR = 0, /* plain C */
    CPU_LEVEL_AVX2 = 1,   /* AVX2 + FMA + F16C */
    CPU_LEVEL_AVX512 = 2, /* AVX-512 F/BW/VL + VNNI (+ the AVX2 set) */
    CPU_LEVEL_COUNT_ = 3,
} cpu_level;

const cpu_features *cpu_features_get(void);
/* Test only: how many times the probe itself has run in this process (1 after any
 * number of cpu_features_get calls from any number of threads). */
int cpu_features_debug_probes(void);
/* Highest level this CPU supports (ignores INFERD_CPU). */
cpu_level cpu_level_max(void);
/* Level to use by default: cpu_level_max() capped by INFERD_CPU when set. */
cpu_level cpu_level_default(void);
const char *cpu_level_name(cpu_level l);
/* Parse "scalar" / "avx2" / "avx512"; returns false for anything else. */
bool cpu_level_parse(const char *s, cpu_level *out);

#endif
