/* kvx_ucx.c — one-sided KV reads over UCX (see kvx_ucx.h). */
#include "kvx_ucx.h"

#include <stdlib.h>
#include <string.h>

#include "../util/status.h"

#ifndef INFERD_HAVE_UCX

bool kvx_ucx_built(void) { return false; }
int kvx_ucx_srv_create(kvx_ucx_srv **out, const kvx_region *r, char *err, size_t err_bytes) {
    (void)r;
    *out = NULL;
    return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "kvx: this build has no UCX (libucx-dev was not found)");
}
void kvx_ucx_srv_info(const kvx_ucx_srv *s, const void **blob, size_t *n) {
    (void)s;
    *blob = NULL;
    *n = 0;
}
void kvx_ucx_srv_destroy(kvx_ucx_srv *s) { (void)s; }
int kvx_ucx_cli_create(kvx_ucx_cli **out, const void *blob, size_t n, uint64_t block_bytes, char *err,
                       size_t err_bytes) {
    (void)blob, (void)n, (void)block_bytes;
    *out = NULL;
    return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "kvx: this build has no UCX (libucx-dev was not found)");
}
int kvx_ucx_cli_get(kvx_ucx_cli *c, const int32_t *remote, int32_t n, void *buf, double deadline, uint64_t *ops,
                    char *err, size_t err_bytes) {
    (void)c, (void)remote, (void)n, (void)buf, (void)deadline, (void)ops;
    return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "kvx: no UCX");
}
void kvx_ucx_cli_destroy(kvx_ucx_cli *c) { (void)c; }
void kvx_ucx_cli_interrupt(kvx_ucx_cli *c) { (void)c; }

#else

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include <dlfcn.h>

#include <ucp/api/ucp.h>

#include "../util/common.h"

bool kvx_ucx_built(void) { return true; }

/* ---- UCX is loaded when first used, not linked --------------------------------------
 * Linked, libucm's constructor patches mmap and friends in every inferd process at
 * start, whether it ever moves KV or not: under systemd's MemoryDenyWriteExecute that
 * fails with a warning on stdout, and under TSan it crashes. dlopen'ed, only an instance
 * started with --pd-transport ucx loads it. The headers give the types. */

#define UCX_FUNCS(X)                                                                   \
    X(ucp_cleanup) X(ucp_config_read) X(ucp_config_release) X(ucp_ep_close_nbx)         \
    X(ucp_ep_create) X(ucp_ep_rkey_unpack) X(ucp_get_nbx) X(ucp_init_version)           \
    X(ucp_mem_map) X(ucp_mem_unmap) X(ucp_request_cancel) X(ucp_request_check_status)   \
    X(ucp_request_free) X(ucp_rkey_buffer_release) X(ucp_rkey_destroy) X(ucp_rkey_pack) \
    X(ucp_worker_arm) X(ucp_worker_create) X(ucp_worker_destroy)                        \
    X(ucp_worker_get_address) X(ucp_worker_get_efd) X(ucp_worker_progress)              \
    X(ucp_worker_release_address) X(ucs_status_string)

#define X(f) static __typeof__(&f) p_##f;
UCX_FUNCS(X)
#undef X

static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static char g_load_err[256];

static void ucx_load(void) {
    void *h = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_load_err, sizeof g_load_err, "cannot load UCX (libucp.so.0; Debian: libucx0): %s", dlerror());
        return;
    }
#define X(f)                                                                           \
    if (!g_load_err[0] && !(*(void **)&p_##f = dlsym(h, #f)))                          \
        snprintf(g_load_err, sizeof g_load_err, "UCX has no %s (too old a libucp?)", #f);
    UCX_FUNCS(X)
#undef X
    /* h stays open for the process's life */
}

static int ucx_ready(char *err, size_t eb) {
    pthread_once(&g_load_once, ucx_load);
    return g_load_err[0] ? ifd_errf(err, eb, IFD_ERR_UNSUPPORTED, "kvx: %s", g_load_err) : 0;
}

/* every call below goes through the loaded pointers */
#define ucp_cleanup p_ucp_cleanup
#define ucp_config_read p_ucp_config_read
#define ucp_config_release p_ucp_config_release
#define ucp_ep_close_nbx p_ucp_ep_close_nbx
#define ucp_ep_create p_ucp_ep_create
#define ucp_ep_rkey_unpack p_ucp_ep_rkey_unpack
#define ucp_get_nbx p_ucp_get_nbx
#define ucp_mem_map p_ucp_mem_map
#define ucp_mem_unmap p_ucp_mem_unmap
#define ucp_request_cancel p_ucp_request_cancel
#define ucp_request_check_status p_ucp_request_check_status
#define ucp_request_free p_ucp_request_free
#define ucp_rkey_buffer_release p_ucp_rkey_buffer_release
#define ucp_rkey_destroy p_ucp_rkey_destroy
#define ucp_rkey_pack p_ucp_rkey_pack
#define ucp_worker_arm p_ucp_worker_arm
#define ucp_worker_create p_ucp_worker_create
#define ucp_worker_destroy p_ucp_worker_destroy
#define ucp_worker_get_address p_ucp_worker_get_address
#define ucp_worker_get_efd p_ucp_worker_get_efd
#define ucp_worker_progress p_ucp_worker_progress
#define ucp_worker_release_address p_ucp_worker_release_address
#define ucs_status_string p_ucs_status_string

/* ---- one context per process, made on first use, gone with its last worker ---------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ucp_context_h g_ctx;
static int g_refs;

static int ctx_get(ucp_context_h *out, char *err, size_t eb) {
    const int lr = ucx_ready(err, eb);
    if (lr) return lr;
    pthread_mutex_lock(&g_mu);
    if (!g_ctx) {
        ucp_config_t *cfg = NULL;
        ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
        if (st == UCS_OK) {
            ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                              .features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
                              .mt_workers_shared = 1};
            st = p_ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &g_ctx);
            ucp_config_release(cfg);
        }
        if (st != UCS_OK) {
            g_ctx = NULL;
            pthread_mutex_unlock(&g_mu);
            return ifd_errf(err, eb, IFD_ERR_IO, "kvx: UCX would not start: %s", ucs_status_string(st));
        }
    }
    g_refs++;
    *out = g_ctx;
    pthread_mutex_unlock(&g_mu);
    return 0;
}

static void ctx_put(void) {
    pthread_mutex_lock(&g_mu);
    if (--g_refs == 0 && g_ctx) {
        ucp_cleanup(g_ctx);
        g_ctx = NULL;
    }
    pthread_mutex_unlock(&g_mu);
}

static int worker_new(ucp_context_h ctx, ucp_worker_h *w, int *efd, char *err, size_t eb) {
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucs_status_t st = ucp_worker_create(ctx, &wp, w);
    if (st != UCS_OK) return ifd_errf(err, eb, IFD_ERR_IO, "kvx: UCX worker: %s", ucs_status_string(st));
    st = ucp_worker_get_efd(*w, efd);
    if (st != UCS_OK) {
        ucp_worker_destroy(*w);
        return ifd_errf(err, eb, IFD_ERR_IO, "kvx: UCX event fd: %s", ucs_status_string(st));
    }
    return 0;
}

/* Progress until nothing is left to do, then arm the event fd; true: armed (sleep on
 * it), false: more events came meanwhile (progress again). */
static bool progress_and_arm(ucp_worker_h w) {
    while (ucp_worker_progress(w)) {
    }
    return ucp_worker_arm(w) != UCS_ERR_BUSY;
}

/* ---- the info blob ---------------------------------------------------------------------
 * u32 version, u32 n_segs, u64 n_blocks, seg_bytes, block_stride, base, bytes,
 * seg_off[n_segs], u32 addr_len, addr, u32 rkey_len, rkey (little-endian). */

#define INFO_VERSION 1u
#define INFO_HEAD (4 + 4 + 5 * 8)

typedef struct rd {
    const unsigned char *p;
    size_t left;
    bool bad;
} rd;

static void get_bytes(rd *r, void *out, size_t n) {
    if (r->bad || r->left < n) {
        r->bad = true;
        memset(out, 0, n);
        return;
    }
    memcpy(out, r->p, n);
    r->p += n;
    r->left -= n;
}

/* ---- prefill side ------------------------------------------------------------------- */

struct kvx_ucx_srv {
    ucp_context_h ctx;
    ucp_worker_h w;
    int efd;
    ucp_mem_h memh;
    unsigned char *info;
    size_t info_n;
    pthread_t th;
    bool th_on;
    _Atomic bool stop;
};

static void *srv_progress_main(void *arg) {
    kvx_ucx_srv *s = arg;
    while (!atomic_load(&s->stop)) {
        if (!progress_and_arm(s->w)) continue;
        /* 5 ms at most: not every message that needs an answer signals the event fd
         * (see wait_reqs); 200 idle wake-ups a second cost nothing measurable */
        struct pollfd pf = {.fd = s->efd, .events = POLLIN};
        (void)poll(&pf, 1, 5);
    }
    return NULL;
}

int kvx_ucx_srv_create(kvx_ucx_srv **out, const kvx_region *r, char *err, size_t eb) {
    *out = NULL;
    if (!r->base || r->n_segs < 1 || r->n_segs > KVX_MAX_SEGS || r->n_blocks < 1 || !r->seg_bytes)
        return ifd_errf(err, eb, IFD_ERR_INVALID, "kvx: an empty KV region");
    kvx_ucx_srv *s = calloc(1, sizeof *s);
    if (!s) return ifd_errf(err, eb, IFD_ERR_NOMEM, "kvx: out of memory");
    int rc = ctx_get(&s->ctx, err, eb);
    if (rc) {
        free(s);
        return rc;
    }
    rc = worker_new(s->ctx, &s->w, &s->efd, err, eb);
    if (rc) {
        ctx_put();
        free(s);
        return rc;
    }
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = r->base,
                               .length = r->bytes};
    ucs_status_t st = ucp_mem_map(s->ctx, &mp, &s->memh);
    void *rkey = NULL, *addr = NULL;
    size_t rkey_n = 0, addr_n = 0;
    if (st == UCS_OK) st = ucp_rkey_pack(s->ctx, s->memh, &rkey, &rkey_n);
    if (st == UCS_OK) st = ucp_worker_get_address(s->w, (ucp_address_t **)&addr, &addr_n);
    if (st != UCS_OK) {
        rc = ifd_errf(err, eb, IFD_ERR_IO, "kvx: registering the KV pool with UCX: %s", ucs_status_string(st));
    } else {
        const size_t n = INFO_HEAD + (size_t)r->n_segs * 8 + 4 + addr_n + 4 + rkey_n;
        unsigned char *b = n <= KVX_UCX_MAX_INFO ? malloc(n) : NULL;
        if (!b) {
            rc = ifd_errf(err, eb, IFD_ERR_NOMEM, "kvx: out of memory");
        } else {
            unsigned char *p = b;
            const uint32_t v = INFO_VERSION, ns = (uint32_t)r->n_segs, an = (uint32_t)addr_n, kn = (uint32_t)rkey_n;
            const uint64_t head[5] = {(uint64_t)r->n_blocks, r->seg_bytes, r->block_stride,
                                      (uint64_t)(uintptr_t)r->base, (uint64_t)r->bytes};
            memcpy(p, &v, 4), p += 4;
            memcpy(p, &ns, 4), p += 4;
            memcpy(p, head, sizeof head), p += sizeof head;
            memcpy(p, r->seg_off, (size_t)r->n_segs * 8), p += (size_t)r->n_segs * 8;
            memcpy(p, &an, 4), p += 4;
            memcpy(p, addr, addr_n), p += addr_n;
            memcpy(p, &kn, 4), p += 4;
            memcpy(p, rkey, rkey_n);
            s->info = b;
            s->info_n = n;
        }
    }
    if (rkey) ucp_rkey_buffer_release(rkey);
    if (addr) ucp_worker_release_address(s->w, addr);
    if (!rc) {
        if (pthread_create(&s->th, NULL, srv_progress_main, s))
            rc = ifd_errf(err, eb, IFD_ERR_NOMEM, "kvx: no thread");
        else
            s->th_on = true;
    }
    if (rc) {
        kvx_ucx_srv_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

void kvx_ucx_srv_info(const kvx_ucx_srv *s, const void **blob, size_t *n) {
    *blob = s->info;
    *n = s->info_n;
}

void kvx_ucx_srv_destroy(kvx_ucx_srv *s) {
    if (!s) return;
    if (s->th_on) {
        atomic_store(&s->stop, true);
        pthread_join(s->th, NULL);
    }
    if (s->memh) ucp_mem_unmap(s->ctx, s->memh);
    if (s->w) ucp_worker_destroy(s->w);
    free(s->info);
    if (s->ctx) ctx_put();
    free(s);
}

/* ---- decode side -------------------------------------------------------------------- */

struct kvx_ucx_cli {
    ucp_context_h ctx;
    ucp_worker_h w;
    int efd;
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    _Atomic bool ep_failed;
    bool broken;
    int32_t n_segs, n_blocks;
    uint64_t seg_bytes, block_stride, base, bytes;
    uint64_t *seg_off;
    unsigned char *tmp; /* segment-major staging of one run */
    size_t tmp_n;
};

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st) {
    (void)ep, (void)st;
    kvx_ucx_cli *c = arg;
    atomic_store(&c->ep_failed, true);
}

int kvx_ucx_cli_create(kvx_ucx_cli **out, const void *blob, size_t n, uint64_t block_bytes, char *err, size_t eb) {
    *out = NULL;
    rd r = {.p = blob, .left = n};
    uint32_t v = 0, ns = 0, an = 0, kn = 0;
    uint64_t head[5];
    get_bytes(&r, &v, 4);
    get_bytes(&r, &ns, 4);
    get_bytes(&r, head, sizeof head);
    if (r.bad || v != INFO_VERSION || ns < 1 || ns > KVX_MAX_SEGS || head[0] < 1 || head[0] > INT32_MAX ||
        head[1] == 0 || head[1] > block_bytes || (uint64_t)ns * head[1] != block_bytes)
        return ifd_errf(err, eb, IFD_ERR_FORMAT, "kvx: the peer's UCX region does not match this instance's KV");
    kvx_ucx_cli *c = calloc(1, sizeof *c);
    if (!c) return ifd_errf(err, eb, IFD_ERR_NOMEM, "kvx: out of memory");
    c->n_segs = (int32_t)ns;
    c->n_blocks = (int32_t)head[0];
    c->seg_bytes = head[1];
    c->block_stride = head[2];
    c->base = head[3];
    c->bytes = head[4];
    c->seg_off = malloc((size_t)ns * 8);
    int rc = c->seg_off ? 0 : ifd_errf(err, eb, IFD_ERR_NOMEM, "kvx: out of memory");
    if (!rc) get_bytes(&r, c->seg_off, (size_t)ns * 8);
    /* every segment's last block inside the registered bytes (no overflow) */
    for (uint32_t s = 0; !rc && !r.bad && s < ns; s++) {
        const uint64_t last = (uint64_t)(c->n_blocks - 1);
        if (c->block_stride && last > (UINT64_MAX - c->seg_bytes) / c->block_stride) r.bad = true;
        const uint64_t span = last * c->block_stride + c->seg_bytes;
        if (c->seg_off[s] > c->bytes || span > c->bytes - c->seg_off[s]) r.bad = true;
    }
    get_bytes(&r, &an, 4);
    const unsigned char *addr = r.p;
    if (an > r.left) r.bad = true;
    if (!r.bad) r.p += an, r.left -= an;
    get_bytes(&r, &kn, 4);
    const unsigned char *rkey = r.p;
    if (kn > r.left || kn == 0 || an == 0) r.bad = true;
    if (!rc && r.bad) rc = ifd_errf(err, eb, IFD_ERR_FORMAT, "kvx: a malformed UCX endpoint description from the peer");
    if (!rc) rc = ctx_get(&c->ctx, err, eb);
    if (rc) {
        free(c->seg_off);
        free(c);
        return rc;
    }
    rc = worker_new(c->ctx, &c->w, &c->efd, err, eb);
    if (!rc) {
        ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                            UCP_EP_PARAM_FIELD_ERR_HANDLER,
                              .address = (const ucp_address_t *)addr,
                              .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                              .err_handler = {.cb = on_ep_error, .arg = c}};
        ucs_status_t st = ucp_ep_create(c->w, &ep, &c->ep);
        if (st == UCS_OK) st = ucp_ep_rkey_unpack(c->ep, rkey, &c->rkey);
        if (st != UCS_OK) rc = ifd_errf(err, eb, IFD_ERR_IO, "kvx: UCX endpoint to the peer: %s", ucs_status_string(st));
    }
    if (rc) {
        kvx_ucx_cli_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Wait for reqs[0..n) before the deadline; each freed. false: a failure or the deadline
 * (then the ones in flight are cancelled and waited for, up to 5 s more; one that still
 * does not complete is left to the endpoint's forced close: the client is broken). */
static bool wait_reqs(kvx_ucx_cli *c, void **reqs, int n, double deadline) {
    bool ok = true, cancelled = false;
    const double hard = deadline + 5;
    for (;;) {
        int live = 0;
        for (int i = 0; i < n; i++) {
            if (!reqs[i]) continue;
            const ucs_status_t st = ucp_request_check_status(reqs[i]);
            if (st == UCS_INPROGRESS) {
                live++;
                continue;
            }
            if (st != UCS_OK) ok = false;
            ucp_request_free(reqs[i]);
            reqs[i] = NULL;
        }
        if (!live) return ok;
        const double now = ifd_now_s();
        if (!cancelled && (atomic_load(&c->ep_failed) || now > deadline)) {
            ok = false;
            cancelled = true;
            for (int i = 0; i < n; i++)
                if (reqs[i]) ucp_request_cancel(c->w, reqs[i]);
        }
        if (cancelled && now > hard) return false;
        if (!progress_and_arm(c->w)) continue;
        /* 1 ms at most: over tcp the replies that complete an emulated GET do not all
         * signal the event fd (measured: a 12 MB read took 112 ms waiting in 100 ms
         * slices, 7 ms spinning); a 1 ms wait costs little and spins no core */
        const double left = (cancelled ? hard : deadline) - now;
        struct pollfd pf = {.fd = c->efd, .events = POLLIN};
        (void)poll(&pf, 1, left > 0.001 ? 1 : 0);
    }
}

#define MAX_INFLIGHT 256

int kvx_ucx_cli_get(kvx_ucx_cli *c, const int32_t *remote, int32_t n, void *buf, double deadline, uint64_t *ops,
                    char *err, size_t eb) {
    if (c->broken || atomic_load(&c->ep_failed)) {
        c->broken = true;
        return ifd_errf(err, eb, IFD_ERR_IO, "kvx: UCX: the peer failed");
    }
    for (int32_t i = 0; i < n; i++)
        if (remote[i] < 0 || remote[i] >= c->n_blocks)
            return ifd_errf(err, eb, IFD_ERR_INVALID, "kvx: block %d is outside the peer's pool (%d)", remote[i],
                            c->n_blocks);
    const uint64_t bb = (uint64_t)c->n_segs * c->seg_bytes;
    /* the region is block-major in the exchange layout (a staging arena): one GET per run */
    bool exchange = c->block_stride == bb;
    for (int32_t s = 0; exchange && s < c->n_segs; s++) exchange = c->seg_off[s] == (uint64_t)s * c->seg_bytes;
    void *reqs[MAX_INFLIGHT];
    int nr = 0;
    uint64_t issued = 0;
    ucp_request_param_t prm = {.op_attr_mask = 0};
    unsigned char *out = buf;
    bool ok = true;
    for (int32_t i = 0; ok && i < n;) {
        int32_t k = 1; /* the run remote[i .. i + k) of consecutive ids */
        while (i + k < n && remote[i + k] == remote[i] + k) k++;
        /* segment-major: each segment's run lands contiguous in tmp, then is spread */
        const size_t need = exchange ? 0 : (size_t)k * bb;
        if (need > c->tmp_n) {
            unsigned char *t = realloc(c->tmp, need);
            if (!t) return ifd_errf(err, eb, IFD_ERR_NOMEM, "kvx: out of memory");
            c->tmp = t;
            c->tmp_n = need;
        }
        const int32_t n_gets = exchange ? 1 : c->n_segs;
        for (int32_t s = 0; ok && s < n_gets; s++) {
            const uint64_t off = exchange ? (uint64_t)remote[i] * bb
                                          : c->seg_off[s] + (uint64_t)remote[i] * c->block_stride;
            void *dst = exchange ? out + (size_t)i * bb : c->tmp + (size_t)s * k * c->seg_bytes;
            const size_t len = exchange ? (size_t)k * bb : (size_t)k * c->seg_bytes;
            if (!exchange && c->block_stride != c->seg_bytes) { /* not contiguous: block by block */
                for (int32_t b = 0; ok && b < k; b++) {
                    void *rq = ucp_get_nbx(c->ep, (unsigned char *)dst + (size_t)b * c->seg_bytes, c->seg_bytes,
                                           c->base + off + (uint64_t)b * c->block_stride, c->rkey, &prm);
                    issued++;
                    if (UCS_PTR_IS_ERR(rq)) ok = false;
                    else if (rq) reqs[nr++] = rq;
                    if (nr == MAX_INFLIGHT) ok = wait_reqs(c, reqs, nr, deadline), nr = 0;
                }
                continue;
            }
            void *rq = ucp_get_nbx(c->ep, dst, len, c->base + off, c->rkey, &prm);
            issued++;
            if (UCS_PTR_IS_ERR(rq)) ok = false;
            else if (rq) reqs[nr++] = rq;
            if (nr == MAX_INFLIGHT) ok = wait_reqs(c, reqs, nr, deadline), nr = 0;
        }
        if (ok && !exchange) { /* this run's segments must be here before tmp is reused */
            ok = wait_reqs(c, reqs, nr, deadline);
            nr = 0;
            for (int32_t b = 0; ok && b < k; b++)
                for (int32_t s = 0; s < c->n_segs; s++)
                    memcpy(out + (size_t)(i + b) * bb + (size_t)s * c->seg_bytes,
                           c->tmp + ((size_t)s * k + (size_t)b) * c->seg_bytes, c->seg_bytes);
        }
        i += k;
    }
    if (nr && !wait_reqs(c, reqs, nr, deadline)) ok = false;
    if (ops) *ops = issued;
    if (!ok) {
        c->broken = true;
        return ifd_errf(err, eb, IFD_ERR_IO, "kvx: UCX: a read failed (the peer died or timed out)");
    }
    return 0;
}

void kvx_ucx_cli_interrupt(kvx_ucx_cli *c) { atomic_store(&c->ep_failed, true); }

void kvx_ucx_cli_destroy(kvx_ucx_cli *c) {
    if (!c) return;
    if (c->rkey) ucp_rkey_destroy(c->rkey);
    if (c->ep) {
        ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
        void *rq = ucp_ep_close_nbx(c->ep, &prm);
        if (rq && !UCS_PTR_IS_ERR(rq)) {
            const double dl = ifd_now_s() + 2;
            while (ucp_request_check_status(rq) == UCS_INPROGRESS && ifd_now_s() < dl) ucp_worker_progress(c->w);
            ucp_request_free(rq);
        }
    }
    if (c->w) ucp_worker_destroy(c->w);
    if (c->ctx) ctx_put();
    free(c->seg_off);
    free(c->tmp);
    free(c);
}

#endif
