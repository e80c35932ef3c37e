/* cpu_features.c — cpuid/xgetbv feature detection and the INFERD_CPU cap.
 * Feature bits (Intel SDM vol. 2, CPUID): leaf 1 ECX: FMA 12, OSXSAVE 27, AVX 28,
 * F16C 29; leaf 7.0 EBX: AVX2 5, AVX512F 16, AVX512BW 30, AVX512VL 31; leaf 7.0 ECX:
 * AVX512_VNNI 11; leaf 7.1 EAX: AVX-VNNI 4, AVX512_BF16 5. XCR0: bits 1-2 (SSE/AVX
 * state) for YMM, bits 5-7 (opmask, ZMM_Hi256, Hi16_ZMM) for AVX-512. */
#include "cpu_features.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define IFD_X86 1
#endif

/* Written once under pthread_once (which orders it before every return of
 * cpu_features_get), read-only afterwards. */
static cpu_features g_feat;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_probes; /* detect() runs, for cpu_features_debug_probes (atomic) */

#ifdef IFD_X86
static unsigned long long xgetbv0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

static void detect(cpu_features *f) {
    __atomic_add_fetch(&g_probes, 1, __ATOMIC_RELAXED);
    memset(f, 0, sizeof *f);
#ifdef IFD_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    const unsigned max_leaf = a;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    const bool fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave || !avx) return;
    const unsigned long long xcr0 = xgetbv0();
    const bool ymm_os = (xcr0 & 0x6) == 0x6;
    const bool zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0;
    if (!ymm_os || max_leaf < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned ebx7 = b, ecx7 = c;
    const unsigned max_sub7 = a;
    unsigned eax71 = 0;
    if (max_sub7 >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        eax71 = a;
    }
    f->avx2 = ebx7 & (1u << 5);
    f->fma = fma;
    f->f16c = f16c;
    f->avxvnni = eax71 & (1u << 4);
    if (zmm_os) {
        f->avx512f = ebx7 & (1u << 16);
        f->avx512bw = ebx7 & (1u << 30);
        f->avx512vl = ebx7 & (1u << 31);
        f->avx512vnni = f->avx512f && (ecx7 & (1u << 11));
        f->avx512bf16 = f->avx512f && (eax71 & (1u << 5));
    }
#endif
}

static void detect_once(void) { detect(&g_feat); }

const cpu_features *cpu_features_get(void) {
    pthread_once(&g_once, detect_once);
    return &g_feat;
}

int cpu_features_debug_probes(void) { return __atomic_load_n(&g_probes, __ATOMIC_RELAXED); }

cpu_level cpu_level_max(void) {
    const cpu_features *f = cpu_features_get();
    const bool avx2 = f->avx2 && f->fma && f->f16c;
    if (avx2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni)
        return CPU_LEVEL_AVX512;
    if (avx2) return CPU_LEVEL_AVX2;
    return CPU_LEVEL_SCALAR;
}

bool cpu_level_parse(const char *s, cpu_level *out) {
    static const char *names[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < CPU_LEVEL_COUNT_; i++)
        if (s && !strcmp(s, names[i])) {
            *out = (cpu_level)i;
            return true;
        }
    return false;
}

const char *cpu_level_name(cpu_level l) {
    switch (l) {
    case CPU_LEVEL_SCALAR: return "scalar";
    case CPU_LEVEL_AVX2: return "avx2";
    case CPU_LEVEL_AVX512: return "avx512";
    default: return "?";
    }
}

cpu_level cpu_level_default(void) {
    cpu_level max = cpu_level_max(), want;
    const char *env = getenv("INFERD_CPU");
    if (env && *env && cpu_level_parse(env, &want) && want < max) return want;
    return max;
}
