/* bench_kernels.c — CPU kernel micro-benchmarks (figures, not tests): matmul GB/s of
 * weights streamed at decode shape (T = 1), GFLOP/s at a decode batch of 16 (T = 16,
 * weights from DRAM as in a serving step) and at prefill shape (T = 512) for every
 * weight type, and paged attention, at each dispatch level (or the one forced
 * by INFERD_CPU). Shapes are the ~1B Llama's (dim 2048, FFN 8192).
 *
 * usage: bench_kernels [-t threads] [-l scalar|avx2|avx512] [-q (quick: fewer reps)]
 *                      [-s ROWSxK (matmul shape, default 8192x2048)] [-y TYPE,TYPE.. (only
 *                      these weight types)] [-n (no attention)] [-c (process CPU time
 *                      instead of wall time: with -t 1, figures a loaded machine cannot
 *                      skew by descheduling; cache / memory contention still can)]
 *                      [-v (verify shape: also the time of T = 2..9, weights from DRAM,
 *                      relative to T = 1 — what a speculative verification of k = T - 1
 *                      drafts costs against a decode)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "backend/cpu/ops.h"
#include "backend/kv_dtype.h"
#include "model/quant.h"
#include "util/common.h"
#include "util/cpu_features.h"

static uint32_t rng = 12345;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return ((float)(rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

/* A random rows x cols matrix of type t (malloc'ed data). */
static wmat make_w(ggml_type t, int64_t rows, int64_t cols) {
    wmat w = {.type = t, .n_rows = rows, .n_cols = cols, .row_bytes = quant_row_bytes(t, cols)};
    uint8_t *d = malloc(w.row_bytes * (size_t)rows);
    float *tmp = malloc((size_t)cols * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = d + (size_t)r * w.row_bytes;
        for (int64_t i = 0; i < cols; i++) tmp[i] = frand() * 0.05f;
        const quant_traits *qt = quant_traits_of(t);
        if (qt->quantize_row) {
            qt->quantize_row(tmp, row, cols);
            continue;
        }
        /* K-quants: random bytes with sane super-block scales */
        for (size_t i = 0; i < w.row_bytes; i++) row[i] = (uint8_t)(frand() * 127 + 128);
        for (int64_t b = 0; b < cols / 256; b++) {
            if (t == GGML_TYPE_Q4_K) {
                block_q4_K *blk = (block_q4_K *)row + b;
                blk->d = ifd_f32_to_fp16(0.001f);
                blk->dmin = ifd_f32_to_fp16(0.001f);
            } else if (t == GGML_TYPE_Q5_K) {
                block_q5_K *blk = (block_q5_K *)row + b;
                blk->d = ifd_f32_to_fp16(0.001f);
                blk->dmin = ifd_f32_to_fp16(0.001f);
            } else if (t == GGML_TYPE_Q3_K) {
                ((block_q3_K *)row + b)->d = ifd_f32_to_fp16(0.001f);
            } else if (t == GGML_TYPE_Q2_K) {
                block_q2_K *blk = (block_q2_K *)row + b;
                blk->d = ifd_f32_to_fp16(0.002f);
                blk->dmin = ifd_f32_to_fp16(0.001f);
            } else if (t == GGML_TYPE_IQ4_XS) {
                ((block_iq4_xs *)row + b)->d = ifd_f32_to_fp16(0.00005f);
            } else {
                ((block_q6_K *)row + b)->d = ifd_f32_to_fp16(0.0005f);
            }
        }
    }
    free(tmp);
    w.data = d;
    return w;
}

/* The clock of every figure: wall time, or (-c) the process's CPU time. */
static int use_cpu_time;
static double now_s(void) {
    if (!use_cpu_time) return ifd_now_s();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Is name one of the comma-separated names of list (case-insensitive)? */
static int name_in_list(const char *name, const char *list) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncasecmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* Best time of one pass over n matrices (several copies defeat the L3 at T = 1, so the
 * figure is DRAM streaming as in a real decode step). */
static double bench_matmul(ops_ctx *c, const wmat *w, int n, const float *x, float *out,
                           int32_t T, int reps) {
    for (int m = 0; m < n; m++) op_matmul(c, out, x, &w[m], T); /* warm-up */
    double best = 1e9;
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        for (int m = 0; m < n; m++) op_matmul(c, out, x, &w[m], T);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

int main(int argc, char **argv) {
    int n_threads = 0, quick = 0, only = -1, no_attn = 0, verify = 0;
    long long rows_arg = 8192, k_arg = 2048;
    const char *type_list = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            if (sscanf(argv[++i], "%lldx%lld", &rows_arg, &k_arg) != 2 || rows_arg <= 0 ||
                k_arg <= 0 || k_arg % 256 != 0)
                return 2; /* K a multiple of every block size */
        } else if (!strcmp(argv[i], "-y") && i + 1 < argc) type_list = argv[++i];
        else if (!strcmp(argv[i], "-n")) no_attn = 1;
        else if (!strcmp(argv[i], "-c")) use_cpu_time = 1;
        else if (!strcmp(argv[i], "-q")) quick = 1;
        else if (!strcmp(argv[i], "-v")) verify = 1;
        else if (!strcmp(argv[i], "-l") && i + 1 < argc) {
            cpu_level l;
            if (!cpu_level_parse(argv[++i], &l)) return 2;
            only = (int)l;
        }
    }
    const char *env = getenv("INFERD_CPU");
    const int lo = only >= 0 ? only : (env && *env ? (int)cpu_level_default() : 0);
    const int hi = only >= 0 ? only : (int)cpu_level_default();
    const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                               GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
                               /* the 32-element block family */
                               GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL,
                               /* the super-block family */
                               GGML_TYPE_Q5_K, GGML_TYPE_Q3_K, GGML_TYPE_Q2_K, GGML_TYPE_IQ4_XS,
                               /* inferd's INT8 / INT4 groups (--quantize) */
                               IFD_TYPE_I8_G64, IFD_TYPE_I8_G128, IFD_TYPE_I4_G64, IFD_TYPE_I4_G128};
    const int64_t ROWS = rows_arg, K = k_arg; /* default: the FFN gate/up shape */
    const int32_t TP = 512;
    enum { COPIES = 40 };
    float *x = malloc((size_t)TP * K * sizeof(float));
    float *out = malloc((size_t)TP * ROWS * sizeof(float));
    for (int64_t i = 0; i < (int64_t)TP * K; i++) x[i] = frand();
    for (int level = lo; level <= hi; level++) {
        if (level == CPU_LEVEL_SCALAR && !(only == 0 || (env && !strcmp(env, "scalar")))) continue;
        ops_ctx *c = ops_ctx_create(n_threads, level);
        if (!c) continue;
        ops_ctx_reserve(c, TP, K, 4096, 4);
        printf("level %s, %d threads — matmul %lld x %lld\n", cpu_level_name((cpu_level)level),
               ops_ctx_n_threads(c), (long long)ROWS, (long long)K);
        printf("  %-8s %12s %12s %14s %14s\n", "type", "T=1 GB/s", "T=1 us", "T=16 GFLOP/s",
               "T=512 GFLOP/s");
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            if (type_list && !name_in_list(ggml_type_get(types[ti])->name, type_list)) continue;
            wmat w[COPIES];
            const double bytes = (double)quant_row_bytes(types[ti], K) * ROWS;
            const int n = (int)IFD_MIN(COPIES, IFD_MAX(2, (int)(320e6 / bytes)));
            for (int m = 0; m < n; m++) {
                w[m] = make_w(types[ti], ROWS, K);
                /* as the backend does at create: packed copies where the level has them */
                if (ops_ctx_prepare_weights(c, &w[m]) != IFD_OK) return 1;
            }
            const double t1 = bench_matmul(c, w, n, x, out, 1, quick ? 3 : 10) / n;
            /* a decode step of 16 sequences: weights from DRAM as at T = 1 */
            const double t16 = bench_matmul(c, w, n, x, out, 16, quick ? 2 : 5) / n;
            const double tp = bench_matmul(c, w, 1, x, out, TP, quick ? 1 : 3);
            printf("  %-8s %12.1f %12.0f %14.1f %14.1f\n", ggml_type_get(types[ti])->name,
                   bytes / t1 / 1e9, t1 * 1e6, 2.0 * ROWS * K * 16 / t16 / 1e9,
                   2.0 * ROWS * K * TP / tp / 1e9);
            if (verify) {
                printf("  %-8s T=1..9 / T=1:", "");
                for (int32_t T = 1; T <= 9; T++)
                    printf(" %.2f", bench_matmul(c, w, n, x, out, T, quick ? 3 : 10) / n / t1);
                printf("\n");
            }
            ops_ctx_drop_weights(c);
            for (int m = 0; m < n; m++) free((void *)w[m].data);
        }
        if (no_attn) {
            ops_ctx_destroy(c);
            continue;
        }
        /* attention: 32 heads, 8 KV heads, head_dim 64, block 16, at each KV cache
         * dtype (f32 in the slot order, the others blocked, as the CPU backend stores
         * them) */
        enum { NH = 32, NKV = 8, HD = 64, BS = 16 };
        const int32_t ctx_len = 1024, nq = 256;
        const int32_t nblk = ctx_len / BS;
        float *kc = malloc((size_t)ctx_len * NKV * HD * 4), *vc = malloc((size_t)ctx_len * NKV * HD * 4);
        for (size_t i = 0; i < (size_t)ctx_len * NKV * HD; i++) {
            kc[i] = frand();
            vc[i] = frand();
        }
        int32_t *bt = malloc(nblk * sizeof(int32_t)), *pos = malloc(nq * sizeof(int32_t));
        for (int i = 0; i < nblk; i++) bt[i] = (i * 7) % nblk;
        float *q = malloc((size_t)nq * NH * HD * 4), *o = malloc((size_t)nq * NH * HD * 4);
        for (size_t i = 0; i < (size_t)nq * NH * HD; i++) q[i] = frand();
        for (int dt = 0; dt < BACKEND_KV_N_DTYPES; dt++) {
        kv_view kv = {kc, vc, NKV, HD, BS, (backend_kv_dtype)dt, dt != BACKEND_KV_F32};
        const size_t rb = kv_view_row_bytes(&kv);
        uint8_t *kq = NULL, *vq = NULL;
        if (dt != BACKEND_KV_F32) {
            kq = malloc((size_t)ctx_len * NKV * rb);
            vq = malloc((size_t)ctx_len * NKV * rb);
            for (int32_t sl = 0; sl < ctx_len; sl++)
                for (int32_t h = 0; h < NKV; h++) {
                    const size_t src = ((size_t)sl * NKV + h) * HD, row = kv_row_index(&kv, sl, h);
                    kv_store_row(kv.dtype, kq + row * rb, kc + src, HD);
                    kv_store_row(kv.dtype, vq + row * rb, vc + src, HD);
                }
            kv.k = kq;
            kv.v = vq;
        }
        for (int mode = 0; mode < 2; mode++) {
            const int32_t n = mode ? nq : 1;
            for (int i = 0; i < n; i++) pos[i] = ctx_len - n + i;
            int32_t ss[2] = {0, n};
            double best = 1e9;
            for (int rep = 0; rep < (quick ? 2 : 5); rep++) {
                double t0 = now_s();
                op_attention(c, o, q, 1, ss, pos, NH, &kv, bt, nblk);
                double dt_s = now_s() - t0;
                if (dt_s < best) best = dt_s;
            }
            double keys = 0;
            for (int i = 0; i < n; i++) keys += pos[i] + 1;
            printf("  attention %s kv %s (%d queries, ctx %d): %.3f ms, %.1f GFLOP/s\n",
                   mode ? "prefill" : "decode", backend_kv_dtype_name(kv.dtype), n, ctx_len,
                   best * 1e3, 4.0 * keys * NH * HD / best / 1e9);
        }
        free(kq);
        free(vq);
        {
            /* a serving decode step: 16 sequences of 256 keys in each of 16 layers' pools,
             * ~270 MB of f32 KV in all (DRAM, as in a real step; 1/2, ~1/4 of it at
             * f16 / bf16, int8 / fp8) */
            enum { NS = 16, CTX = 256, NL = 16, NB = CTX / BS };
            const size_t half_rows = (size_t)NS * CTX * NKV, half = half_rows * rb;
            uint8_t *pools = malloc((size_t)NL * 2 * half);
            float row[HD];
            for (size_t r = 0; r < (size_t)NL * 2 * half_rows; r++) {
                for (int i = 0; i < HD; i++) row[i] = frand() * 0.5f;
                kv_store_row(kv.dtype, pools + r * rb, row, HD);
            }
            int32_t sst[NS + 1], dpos[NS], dbt[NS * NB];
            for (int s = 0; s <= NS; s++) sst[s] = s;
            for (int s = 0; s < NS; s++) {
                dpos[s] = CTX - 1;
                for (int b = 0; b < NB; b++) dbt[s * NB + b] = (b * NS + s * 5) % (NS * NB);
            }
            double best = 1e9;
            for (int rep = 0; rep < (quick ? 3 : 8); rep++) {
                double t0 = now_s();
                for (int l = 0; l < NL; l++) {
                    uint8_t *kp = pools + (size_t)l * 2 * half;
                    kv_view lkv = kv;
                    lkv.k = kp;
                    lkv.v = kp + half;
                    op_attention(c, o, q, NS, sst, dpos, NH, &lkv, dbt, NB);
                }
                double dt_s = now_s() - t0;
                if (dt_s < best) best = dt_s;
            }
            printf("  attention decode step kv %s (%d seqs x ctx %d x %d layers): %.3f ms, %.1f GB/s of KV\n",
                   backend_kv_dtype_name(kv.dtype), NS, CTX, NL, best * 1e3,
                   (double)NL * 2 * half / best / 1e9);
            free(pools);
        }
        }
        free(kc);
        free(vc);
        free(bt);
        free(pos);
        free(q);
        free(o);
        ops_ctx_destroy(c);
    }
    free(x);
    free(out);
    return 0;
}
