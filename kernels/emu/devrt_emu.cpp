/* devrt_emu.cpp — devrt.h on the host, for the SIMT emulation: device memory is host
 * memory, every copy and launch runs at once on the calling thread (streams order
 * nothing more), and dev_gemm is the reference loop cuBLAS stands for.
 *
 * The emulated device reports itself as "SIMT emulation (host)" with the host's memory
 * limits, so sizing code runs the same path as on a GPU. A graph records the copies and
 * memsets issued while capturing; launches are recorded by the IFD_LAUNCH closure
 * (emu.h asks capture_active()).
 *
 * Fault injection (tests; this file only, so never in the GPU build): IFD_EMU_FAULT=
 * recoverable@N or sticky@N makes the N-th check fail (N >= 1; a check is a call of
 * dev_sync, dev_check_launch or dev_graph_launch, counted from the first launch check or
 * graph launch, so the syncs of a backend's create before its first kernel are not
 * counted; nor are checks while a graph is being captured).
 * recoverable: that one check returns DEV_ERR, then all is well again. sticky: it returns
 * DEV_STICKY, and so does every later call that returns a status (the context is lost,
 * as a sticky CUDA error leaves it). The variable is read at the first check;
 * dev_emu_fault_set replaces it (tests). A malformed value is reported on stderr and
 * injects nothing. */
#include "../devrt.h"

#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

IFD_NS_BEGIN

static thread_local char t_msg[1024];

static int fail(const char *what) {
    snprintf(t_msg, sizeof t_msg, "%s", what);
    return DEV_ERR;
}

/* ---- fault injection ------------------------------------------------------------------- */
enum { FAULT_NONE = 0, FAULT_RECOVERABLE = 1, FAULT_STICKY = 2 };
static std::atomic<int> g_fault_kind{-1}; /* -1: IFD_EMU_FAULT not read yet */
static std::atomic<long long> g_fault_at{0}; /* the check that fails (1-based) */
static std::atomic<long long> g_checks{0}; /* checks counted so far */
static std::atomic<bool> g_counting{false}; /* from the first launch check on */
static std::atomic<bool> g_lost{false}; /* a sticky fault fired */

static int parse_fault(const char *spec, int *kind, long long *at) {
    *kind = FAULT_NONE;
    *at = 0;
    if (!spec || !spec[0]) return DEV_OK;
    const char *amp = strchr(spec, '@');
    if (!amp) return DEV_ERR;
    const size_t n = (size_t)(amp - spec);
    int k;
    if (n == 11 && !strncmp(spec, "recoverable", n)) k = FAULT_RECOVERABLE;
    else if (n == 6 && !strncmp(spec, "sticky", n)) k = FAULT_STICKY;
    else return DEV_ERR;
    char *end = NULL;
    const long long v = strtoll(amp + 1, &end, 10);
    if (end == amp + 1 || *end || v < 1) return DEV_ERR;
    *kind = k;
    *at = v;
    return DEV_OK;
}

int dev_emu_fault_set(const char *spec) {
    int kind;
    long long at;
    const int rc = parse_fault(spec, &kind, &at);
    g_fault_at = at;
    g_checks = 0;
    g_counting = false;
    g_lost = false;
    g_fault_kind = rc == DEV_OK ? kind : FAULT_NONE;
    return rc == DEV_OK ? DEV_OK : fail("IFD_EMU_FAULT: expected recoverable@N or sticky@N (N >= 1)");
}

static int fault_kind(void) {
    int k = g_fault_kind.load();
    if (k >= 0) return k;
    const char *spec = getenv("IFD_EMU_FAULT");
    if (dev_emu_fault_set(spec) != DEV_OK)
        fprintf(stderr, "IFD_EMU_FAULT='%s': expected recoverable@N or sticky@N (N >= 1); no fault injected\n", spec);
    return g_fault_kind.load();
}

static int lost(void) {
    snprintf(t_msg, sizeof t_msg, "injected sticky fault (IFD_EMU_FAULT): the emulated device context is lost");
    return DEV_STICKY;
}
#define IFD_EMU_LOST_GUARD()               \
    do {                                   \
        if (g_lost.load()) return lost(); \
    } while (0)

/* One check (dev_sync, dev_check_launch, dev_graph_launch): DEV_OK, or the injected
 * failure when this is the armed one. launch: a launch check, which starts the count. */
static int fault_check(bool launch) {
    const int k = fault_kind();
    if (k == FAULT_NONE) return DEV_OK;
    if (g_lost.load()) return lost();
    if (launch) g_counting = true;
    if (!g_counting.load()) return DEV_OK;
    if (++g_checks != g_fault_at.load()) return DEV_OK;
    if (k == FAULT_STICKY) {
        g_lost = true;
        return lost();
    }
    snprintf(t_msg, sizeof t_msg, "injected recoverable fault (IFD_EMU_FAULT) at check %lld", g_fault_at.load());
    return DEV_ERR;
}

int dev_count(void) { return 1; }

int dev_open(int ordinal, dev_props *p) {
    if (ordinal != 0) return fail("no such emulated device");
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "SIMT emulation (host)");
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    p->total_mem = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)1 << 32;
    p->sm_count = 1;
    p->cc_major = 9;
    p->cc_minor = 0;
    p->l2_bytes = (size_t)50 << 20;
    p->smem_per_block_optin = 232448;
    return DEV_OK;
}

int dev_mem_info(size_t *free_bytes, size_t *total_bytes) {
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    *total_bytes = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)1 << 32;
    *free_bytes = avail > 0 && psz > 0 ? (size_t)avail * (size_t)psz : *total_bytes / 2;
    return DEV_OK;
}

int dev_malloc(void **p, size_t bytes) {
    /* 256-byte alignment, as cudaMalloc gives */
    void *q = NULL;
    *p = NULL;
    IFD_EMU_LOST_GUARD();
    if (posix_memalign(&q, 256, bytes ? bytes : 1) != 0) {
        *p = NULL;
        return fail("out of (emulated device) memory");
    }
    *p = q;
    return DEV_OK;
}
void dev_free(void *p) { free(p); }
int dev_host_alloc(void **p, size_t bytes) { return dev_malloc(p, bytes); }
void dev_host_free(void *p) { free(p); }

/* ---- graphs: a list of recorded operations ------------------------------------------ */
struct op_rec {
    int kind; /* 0 copy, 1 memset, 2 launch */
    void *dst;
    const void *src;
    size_t bytes;
    int byte;
    ifd_simt::captured_launch *launch;
};
struct dev_graph_s {
    op_rec *ops;
    size_t n, cap;
};
static thread_local dev_graph_s *t_capture;

static int record(op_rec r) {
    dev_graph_s *g = t_capture;
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 64;
        op_rec *o = (op_rec *)realloc(g->ops, cap * sizeof *o);
        if (!o) return fail("out of host memory while capturing a graph");
        g->ops = o;
        g->cap = cap;
    }
    g->ops[g->n++] = r;
    return DEV_OK;
}

static void capture_launch_hook(ifd_simt::captured_launch *l) {
    op_rec r = {2, NULL, NULL, 0, 0, l};
    if (record(r) != DEV_OK) ifd_simt::captured_free(l);
}

static int copy(void *dst, const void *src, size_t bytes) {
    IFD_EMU_LOST_GUARD();
    if (!bytes) return DEV_OK;
    if (!dst || !src) return fail("copy with a NULL pointer");
    if (t_capture) {
        op_rec r = {0, dst, src, bytes, 0, NULL};
        return record(r);
    }
    memmove(dst, src, bytes);
    return DEV_OK;
}
int dev_h2d(void *dst, const void *src, size_t bytes, dev_stream) { return copy(dst, src, bytes); }
int dev_d2h(void *dst, const void *src, size_t bytes, dev_stream) { return copy(dst, src, bytes); }
int dev_d2d(void *dst, const void *src, size_t bytes, dev_stream) { return copy(dst, src, bytes); }
int dev_memset(void *p, int byte, size_t bytes, dev_stream) {
    IFD_EMU_LOST_GUARD();
    if (!bytes) return DEV_OK;
    if (!p) return fail("memset of a NULL pointer");
    if (t_capture) {
        op_rec r = {1, p, NULL, bytes, byte, NULL};
        return record(r);
    }
    memset(p, byte, bytes);
    return DEV_OK;
}

int dev_stream_create(dev_stream *s) {
    static int token;
    *s = &token;
    return DEV_OK;
}
void dev_stream_destroy(dev_stream) {}
/* The launches' status since the last call (a launch runs at once, so a sync has
 * nothing more to wait for). */
static int launch_status(void) {
    const char *e = ifd_simt::last_error();
    if (e[0]) {
        snprintf(t_msg, sizeof t_msg, "%s", e);
        ifd_simt::clear_error();
        return DEV_ERR;
    }
    return DEV_OK;
}

/* Checks while a graph is captured are not counted: nothing runs then. */
int dev_sync(dev_stream) {
    const int rc = launch_status();
    const int f = t_capture ? DEV_OK : fault_check(false);
    return f != DEV_OK ? f : rc;
}

int dev_check_launch(void) {
    const int rc = launch_status();
    const int f = t_capture ? DEV_OK : fault_check(true);
    return f != DEV_OK ? f : rc;
}
const char *dev_error(void) { return t_msg; }

int dev_graph_begin(dev_stream) {
    if (t_capture) return fail("graph capture already under way");
    dev_graph_s *g = (dev_graph_s *)calloc(1, sizeof *g);
    if (!g) return fail("out of host memory");
    t_capture = g;
    ifd_simt::set_capture_hook(&capture_launch_hook);
    return DEV_OK;
}
int dev_graph_end(dev_stream, dev_graph *out) {
    if (!t_capture) return fail("no graph capture under way");
    *out = t_capture;
    t_capture = NULL;
    ifd_simt::set_capture_hook(NULL);
    return DEV_OK;
}
int dev_graph_launch(dev_graph g, dev_stream) {
    if (t_capture) return fail("graph launch while capturing");
    const int f = fault_check(true);
    if (f != DEV_OK) return f;
    for (size_t i = 0; i < g->n; i++) {
        op_rec *r = &g->ops[i];
        if (r->kind == 0) memmove(r->dst, r->src, r->bytes);
        else if (r->kind == 1) memset(r->dst, r->byte, r->bytes);
        else if (ifd_simt::captured_run(r->launch) != 0) return dev_check_launch();
    }
    return DEV_OK;
}
void dev_graph_destroy(dev_graph g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++)
        if (g->ops[i].kind == 2) ifd_simt::captured_free(g->ops[i].launch);
    free(g->ops);
    free(g);
}

/* ---- GEMM: the reference cuBLAS stands for ------------------------------------------ */
struct dev_blas_s {
    int unused;
};
int dev_blas_create(dev_blas *h, dev_stream) {
    *h = (dev_blas)calloc(1, sizeof(dev_blas_s));
    return *h ? DEV_OK : fail("out of host memory");
}
void dev_blas_destroy(dev_blas h) { free(h); }

static inline float load(dev_dtype t, const void *p, size_t i) {
    switch (t) {
    case DEV_F16: return __half2float(((const __half *)p)[i]);
    case DEV_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

int dev_gemm(dev_blas h, dev_dtype t, const void *A, const void *B, float *C, int m, int n, int k) {
    IFD_EMU_LOST_GUARD();
    if (!h || m < 0 || n < 0 || k < 0) return fail("dev_gemm: bad arguments");
    if (t_capture) return fail("dev_gemm inside a graph capture is not emulated");
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.f;
            for (int x = 0; x < k; x++)
                acc += load(t, A, (size_t)i * k + x) * load(t, B, (size_t)j * k + x);
            C[(size_t)i * n + j] = acc;
        }
    return DEV_OK;
}

IFD_NS_END
