/* kvx_bench.c — the KV transfer layer alone: one lease's worth of blocks read over the
 * kvx control connection (tcp: the server copies the blocks into a frame) and with
 * one-sided UCX GETs of a registered region laid out as the CPU pool is (per layer K
 * and V arrays), on loopback in one process (server and client threads). Prints the
 * time and GB/s of each, best and median of --reps.
 *
 *   build/kvx_bench [--blocks 63] [--layers 24] [--seg-bytes 4096] [--reps 20]
 *   UCX_TLS=tcp build/kvx_bench          # UCX held to tcp
 * Defaults: a 1000-token prompt of Qwen2.5-0.5B (24 layers, 2 KV heads x 64 x f16 x 16
 * tokens = 4 KiB per layer K or V per block): 12.4 MB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvx/kvx.h"
#include "util/common.h"

typedef struct region_src {
    kvx_region r;
} region_src;

static int h_call(void *u, const char *req, size_t n, char **out, size_t *out_n) {
    (void)u;
    *out = malloc(n + 1);
    if (!*out) return -1;
    memcpy(*out, req, n);
    *out_n = n;
    return 0;
}

/* the tcp path: copy the blocks out of the region as the engine's kv_rw does */
static int h_read(void *u, uint64_t lease, int32_t first, int32_t n, void *buf) {
    (void)lease;
    const kvx_region *r = &((region_src *)u)->r;
    unsigned char *o = buf;
    for (int32_t b = first; b < first + n; b++)
        for (int32_t s = 0; s < r->n_segs; s++, o += r->seg_bytes)
            memcpy(o, (unsigned char *)r->base + r->seg_off[s] + (size_t)b * r->block_stride, r->seg_bytes);
    return 0;
}

static int h_release(void *u, uint64_t lease) {
    (void)u, (void)lease;
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int blocks = 63, layers = 24, reps = 20;
    long seg = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--blocks")) blocks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seg-bytes")) seg = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (blocks < 1 || layers < 1 || 2 * layers > KVX_MAX_SEGS || seg < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "bad sizes\n");
        return 2;
    }
    const int pool = blocks + 16; /* the lease sits inside a larger pool */
    region_src src = {0};
    kvx_region *r = &src.r;
    r->n_blocks = pool;
    r->n_segs = 2 * layers;
    r->seg_bytes = (uint64_t)seg;
    r->block_stride = (uint64_t)seg;
    r->bytes = (size_t)pool * (size_t)r->n_segs * (size_t)seg;
    r->base = malloc(r->bytes);
    if (!r->base) return 1;
    memset(r->base, 0x5a, r->bytes);
    for (int s = 0; s < r->n_segs; s++) r->seg_off[s] = (uint64_t)s * (uint64_t)pool * (uint64_t)seg;
    const size_t bb = (size_t)r->n_segs * (size_t)seg, total = (size_t)blocks * bb;
    kvx_hello me = {.compat_hash = 1, .epoch = 1, .block_bytes = bb};
    snprintf(me.compat, sizeof me.compat, "kvx_bench");
    kvx_handlers h = {.call = h_call, .read = h_read, .release = h_release, .user = &src};
    kvx_server *srv = NULL;
    kvx_conn *c = NULL;
    char err[256] = "";
    int32_t *ids = malloc((size_t)blocks * sizeof *ids);
    unsigned char *buf = malloc(total);
    double *t_tcp = malloc((size_t)reps * sizeof(double)), *t_ucx = malloc((size_t)reps * sizeof(double));
    if (!ids || !buf || !t_tcp || !t_ucx) return 1;
    for (int i = 0; i < blocks; i++) ids[i] = 8 + i;
    if (kvx_server_start(&srv, "127.0.0.1", 0, &me, &h, 4, 30, 30, err, sizeof err) ||
        kvx_connect(&c, "127.0.0.1", kvx_server_port(srv), &me, NULL, 10, err, sizeof err)) {
        fprintf(stderr, "kvx_bench: %s\n", err);
        return 1;
    }
    const bool ucx = kvx_ucx_built() && kvx_server_ucx(srv, r, err, sizeof err) == 0 &&
                     kvx_ucx_attach(c, err, sizeof err) == 0;
    if (!ucx) fprintf(stderr, "kvx_bench: no UCX (%s): tcp only\n", err[0] ? err : "not built");
    uint64_t ops = 0;
    for (int k = 0; k < reps; k++) {
        double t0 = ifd_now_s();
        if (kvx_read(c, 1, 8, blocks, buf, err, sizeof err)) {
            fprintf(stderr, "kvx_bench: tcp: %s\n", err);
            return 1;
        }
        t_tcp[k] = ifd_now_s() - t0;
        if (ucx) {
            t0 = ifd_now_s();
            if (kvx_get(c, ids, blocks, buf, 30, &ops, err, sizeof err)) {
                fprintf(stderr, "kvx_bench: ucx: %s\n", err);
                return 1;
            }
            t_ucx[k] = ifd_now_s() - t0;
        }
    }
    qsort(t_tcp, (size_t)reps, sizeof(double), cmp_d);
    qsort(t_ucx, (size_t)reps, sizeof(double), cmp_d);
    printf("kvx_bench: %d blocks x %d layers x K,V x %ld B = %.1f MB per read, %d reps, loopback\n", blocks, layers, seg,
           (double)total / 1e6, reps);
    printf("%-5s %10s %10s %10s %8s\n", "path", "best_ms", "median_ms", "GB/s_med", "ops");
    printf("%-5s %10.2f %10.2f %10.2f %8d\n", "tcp", t_tcp[0] * 1e3, t_tcp[reps / 2] * 1e3,
           (double)total / t_tcp[reps / 2] / 1e9, 1);
    if (ucx)
        printf("%-5s %10.2f %10.2f %10.2f %8llu\n", "ucx", t_ucx[0] * 1e3, t_ucx[reps / 2] * 1e3,
               (double)total / t_ucx[reps / 2] / 1e9, (unsigned long long)ops);
    kvx_close(c);
    kvx_server_stop(srv);
    free(r->base);
    free(ids);
    free(buf);
    free(t_tcp);
    free(t_ucx);
    return 0;
}
