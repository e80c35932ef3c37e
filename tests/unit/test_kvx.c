/* test_kvx.c — the KV-transfer room on its own (src/kvx): a kvx server over a made-up
 * KV region (a pattern every byte of which names its block, segment and offset) and a
 * client on real sockets. UCX: one-sided reads of runs, of scattered ids, of the three
 * region shapes (per-segment arrays like the CPU pool, a block-major staging arena, a
 * padded stride), ids out of the peer's range refused, the release check, a peer without
 * UCX, and every truncation of the endpoint description (it comes from the network).
 * ctest runs it twice: with UCX's own transport choice and with UCX_TLS=tcp (where a GET
 * is emulated with active messages and the server's progress thread must answer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvx/kvx.h"
#include "kvx/kvx_ucx.h"
#include "test_util.h"
#include "util/status.h"

#define NSEG 6
#define NBLK 40
#define SEGB 48

static unsigned char pat(int32_t b, int32_t s, size_t i) { return (unsigned char)(b * 31 + s * 7 + (int)i * 3 + 1); }

typedef struct fake {
    kvx_region r;
    unsigned char *mem;
    uint64_t live_lease;
} fake;

/* shape 0: per-segment arrays (the CPU pool); 1: block-major exchange layout (an
 * arena); 2: per-segment arrays with a padded stride (block by block) */
static void fake_init(fake *f, int shape) {
    memset(f, 0, sizeof *f);
    const uint64_t stride = shape == 0 ? SEGB : shape == 1 ? (uint64_t)NSEG * SEGB : SEGB + 16;
    const size_t seg_span = shape == 1 ? SEGB : (size_t)stride * NBLK;
    const size_t bytes = shape == 1 ? (size_t)NBLK * NSEG * SEGB : seg_span * NSEG;
    f->mem = calloc(1, bytes);
    f->r = (kvx_region){.base = f->mem, .bytes = bytes, .n_blocks = NBLK, .n_segs = NSEG, .seg_bytes = SEGB,
                        .block_stride = stride};
    for (int32_t s = 0; s < NSEG; s++) f->r.seg_off[s] = shape == 1 ? (uint64_t)s * SEGB : (uint64_t)s * seg_span;
    for (int32_t b = 0; b < NBLK; b++)
        for (int32_t s = 0; s < NSEG; s++)
            for (size_t i = 0; i < SEGB; i++) f->mem[f->r.seg_off[s] + (size_t)b * stride + i] = pat(b, s, i);
    f->live_lease = 7;
}

static int h_call(void *user, const char *req, size_t n, char **reply, size_t *reply_n) {
    (void)user;
    *reply = malloc(n + 1);
    if (!*reply) return -1;
    memcpy(*reply, req, n);
    *reply_n = n;
    return 0;
}

static int h_read(void *user, uint64_t lease, int32_t first, int32_t n, void *buf) {
    fake *f = user;
    if (lease != f->live_lease) return IFD_ERR_NOT_FOUND;
    unsigned char *o = buf;
    for (int32_t b = first; b < first + n; b++)
        for (int32_t s = 0; s < NSEG; s++, o += SEGB) memcpy(o, f->mem + f->r.seg_off[s] + (size_t)b * f->r.block_stride, SEGB);
    return 0;
}

static int h_release(void *user, uint64_t lease) {
    fake *f = user;
    return lease == f->live_lease ? 0 : IFD_ERR_NOT_FOUND;
}

static kvx_hello hello(void) {
    kvx_hello h = {.compat_hash = 0x1234, .epoch = 1, .block_bytes = (uint64_t)NSEG * SEGB};
    snprintf(h.compat, sizeof h.compat, "test region");
    return h;
}

static bool expect_blocks(const unsigned char *buf, const int32_t *ids, int32_t n) {
    for (int32_t k = 0; k < n; k++)
        for (int32_t s = 0; s < NSEG; s++)
            for (size_t i = 0; i < SEGB; i++)
                if (buf[((size_t)k * NSEG + (size_t)s) * SEGB + i] != pat(ids[k], s, i)) {
                    fprintf(stderr, "  block %d (id %d) segment %d byte %zu differs\n", k, ids[k], s, i);
                    return false;
                }
    return true;
}

static bool need_ucx(void) {
    if (kvx_ucx_built()) return true;
    if (getenv("CI")) {
        CHECKF(false, "this build has no UCX, and CI must test it (scripts/deps.sh installs libucx-dev)");
    } else {
        printf("  (skipped: no UCX in this build)\n");
    }
    return false;
}

/* A kvx server on 127.0.0.1 serving f (NULL: it failed, reported). */
static kvx_server *serve(fake *f) {
    const kvx_hello me = hello();
    kvx_handlers h = {.call = h_call, .read = h_read, .release = h_release, .user = f};
    kvx_server *srv = NULL;
    char err[256] = "";
    CHECKF(kvx_server_start(&srv, "127.0.0.1", 0, &me, &h, 8, 30, 10, err, sizeof err) == 0, "%s", err);
    return srv;
}

static void reads_of_shape(int shape, uint64_t want_ops) {
    fake f;
    fake_init(&f, shape);
    const kvx_hello me = hello();
    kvx_server *srv = serve(&f);
    kvx_conn *c = NULL;
    char err[256] = "";
    if (!srv) goto out;
    CHECKF(kvx_server_ucx(srv, &f.r, err, sizeof err) == 0, "%s", err);
    CHECK(kvx_server_ucx(srv, &f.r, err, sizeof err) == IFD_ERR_INVALID); /* once */
    CHECKF(kvx_connect(&c, "127.0.0.1", kvx_server_port(srv), &me, NULL, 10, err, sizeof err) == 0, "%s", err);
    if (!c) goto out;
    CHECK(!kvx_ucx_attached(c));
    CHECKF(kvx_ucx_attach(c, err, sizeof err) == 0, "%s", err);
    CHECK(kvx_ucx_attached(c));
    /* runs {3,4,5} {9,10} {0} {39} {20}: 5 runs */
    const int32_t ids[] = {3, 4, 5, 9, 10, 0, 39, 20};
    const int32_t n = (int32_t)(sizeof ids / sizeof ids[0]);
    unsigned char *buf = calloc((size_t)n, (size_t)NSEG * SEGB);
    uint64_t ops = 0;
    CHECKF(kvx_get(c, ids, n, buf, 10, &ops, err, sizeof err) == 0, "%s", err);
    CHECK(expect_blocks(buf, ids, n));
    CHECKF(ops == want_ops, "shape %d: %llu GETs, expected %llu", shape, (unsigned long long)ops,
           (unsigned long long)want_ops);
    /* the whole pool in one run */
    int32_t all[NBLK];
    for (int32_t i = 0; i < NBLK; i++) all[i] = i;
    unsigned char *big = calloc(NBLK, (size_t)NSEG * SEGB);
    CHECKF(kvx_get(c, all, NBLK, big, 10, &ops, err, sizeof err) == 0, "%s", err);
    CHECK(expect_blocks(big, all, NBLK));
    free(big);
    /* an id outside the peer's pool: refused before any GET, the connection stays */
    const int32_t bad[] = {1, NBLK};
    CHECK(kvx_get(c, bad, 2, buf, 10, &ops, err, sizeof err) == IFD_ERR_INVALID);
    const int32_t neg[] = {-1};
    CHECK(kvx_get(c, neg, 1, buf, 10, &ops, err, sizeof err) == IFD_ERR_INVALID);
    CHECK(!kvx_broken(c));
    /* the control connection still calls, and the release check answers */
    char *reply = NULL;
    size_t rn = 0;
    CHECK(kvx_call(c, "{\"x\":1}", 7, 10, &reply, &rn, err, sizeof err) == 0 && rn == 7 && !memcmp(reply, "{\"x\":1}", 7));
    free(reply);
    CHECK(kvx_release_check(c, 7, err, sizeof err) == 0);
    CHECK(kvx_release_check(c, 8, err, sizeof err) == IFD_ERR_NOT_FOUND);
    /* the tcp path on the same connection */
    memset(buf, 0, (size_t)n * NSEG * SEGB);
    CHECKF(kvx_read(c, 7, 3, 3, buf, err, sizeof err) == 0, "%s", err);
    CHECK(expect_blocks(buf, ids, 3));
    free(buf);
out:
    kvx_close(c);
    kvx_server_stop(srv);
    free(f.mem);
}

static void test_ucx_reads_pool(void) {
    if (need_ucx()) reads_of_shape(0, 5 * NSEG);
}
static void test_ucx_reads_arena(void) {
    if (need_ucx()) reads_of_shape(1, 5);
}
static void test_ucx_reads_padded(void) {
    if (need_ucx()) reads_of_shape(2, 8 * NSEG);
}

/* Several clients at once, each its own thread-free connection (used in turn). */
static void test_ucx_many_clients(void) {
    if (!need_ucx()) return;
    fake f;
    fake_init(&f, 0);
    const kvx_hello me = hello();
    kvx_server *srv = serve(&f);
    char err[256] = "";
    CHECKF(srv && kvx_server_ucx(srv, &f.r, err, sizeof err) == 0, "%s", err);
    kvx_conn *c[4] = {0};
    for (int k = 0; srv && k < 4; k++)
        CHECKF(kvx_connect(&c[k], "127.0.0.1", kvx_server_port(srv), &me, NULL, 10, err, sizeof err) == 0 &&
                   kvx_ucx_attach(c[k], err, sizeof err) == 0,
               "%s", err);
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 4; k++) {
            if (!c[k]) continue;
            int32_t ids[5];
            for (int i = 0; i < 5; i++) ids[i] = (k * 7 + round * 11 + i * 3) % NBLK;
            unsigned char buf[5 * NSEG * SEGB];
            CHECKF(kvx_get(c[k], ids, 5, buf, 10, NULL, err, sizeof err) == 0, "%s", err);
            CHECK(expect_blocks(buf, ids, 5));
        }
    for (int k = 0; k < 4; k++) kvx_close(c[k]);
    kvx_server_stop(srv);
    free(f.mem);
}

/* A server that serves no region: attach says so, the connection keeps working. */
static void test_ucx_peer_without_region(void) {
    fake f;
    fake_init(&f, 0);
    const kvx_hello me = hello();
    kvx_server *srv = serve(&f);
    kvx_conn *c = NULL;
    char err[256] = "";
    CHECKF(srv && kvx_connect(&c, "127.0.0.1", kvx_server_port(srv), &me, NULL, 10, err, sizeof err) == 0, "%s", err);
    if (c) {
        CHECK(kvx_ucx_attach(c, err, sizeof err) == IFD_ERR_UNSUPPORTED);
        CHECK(!kvx_ucx_attached(c) && !kvx_broken(c));
        const int32_t ids[] = {1};
        unsigned char buf[NSEG * SEGB];
        CHECK(kvx_get(c, ids, 1, buf, 10, NULL, err, sizeof err) == IFD_ERR_UNSUPPORTED);
        CHECKF(kvx_read(c, 7, 1, 1, buf, err, sizeof err) == 0, "%s", err);
        CHECK(expect_blocks(buf, ids, 1));
    }
    kvx_close(c);
    kvx_server_stop(srv);
    free(f.mem);
}

/* The endpoint description comes from the network: every truncation, and a few lies
 * about the region, are refused without a crash (ASan would see an overread). */
static void test_ucx_hostile_info(void) {
    if (!need_ucx()) return;
    fake f;
    fake_init(&f, 0);
    kvx_ucx_srv *s = NULL;
    char err[256] = "";
    CHECKF(kvx_ucx_srv_create(&s, &f.r, err, sizeof err) == 0, "%s", err);
    if (!s) {
        free(f.mem);
        return;
    }
    const void *blob;
    size_t n;
    kvx_ucx_srv_info(s, &blob, &n);
    const uint64_t bb = (uint64_t)NSEG * SEGB;
    kvx_ucx_cli *c = NULL;
    CHECKF(kvx_ucx_cli_create(&c, blob, n, bb, err, sizeof err) == 0, "%s", err);
    kvx_ucx_cli_destroy(c);
    for (size_t k = 0; k < n; k++) {
        unsigned char *t = malloc(k ? k : 1); /* exactly k bytes: ASan catches a read past */
        memcpy(t, blob, k);
        c = NULL;
        const int rc = kvx_ucx_cli_create(&c, t, k, bb, err, sizeof err);
        CHECKF(rc != 0 && !c, "a description cut at %zu of %zu bytes was taken", k, n);
        kvx_ucx_cli_destroy(c);
        free(t);
    }
    unsigned char *t = malloc(n);
    /* another block size; n_segs huge; a segment reaching past the registered bytes */
    CHECK(kvx_ucx_cli_create(&c, blob, n, bb + SEGB, err, sizeof err) == IFD_ERR_FORMAT && !c);
    memcpy(t, blob, n);
    const uint32_t huge = 1u << 30;
    memcpy(t + 4, &huge, 4);
    CHECK(kvx_ucx_cli_create(&c, t, n, bb, err, sizeof err) != 0 && !c);
    memcpy(t, blob, n);
    const uint64_t far = (uint64_t)1 << 62;
    memcpy(t + 8 + 5 * 8, &far, 8); /* seg_off[0] */
    CHECK(kvx_ucx_cli_create(&c, t, n, bb, err, sizeof err) == IFD_ERR_FORMAT && !c);
    memcpy(t, blob, n);
    const uint64_t nb = (uint64_t)NBLK * 1000; /* more blocks than the bytes hold */
    memcpy(t + 8, &nb, 8);
    CHECK(kvx_ucx_cli_create(&c, t, n, bb, err, sizeof err) == IFD_ERR_FORMAT && !c);
    free(t);
    kvx_ucx_srv_destroy(s);
    free(f.mem);
}

TEST_MAIN(T(test_ucx_reads_pool), T(test_ucx_reads_arena), T(test_ucx_reads_padded), T(test_ucx_many_clients),
          T(test_ucx_peer_without_region), T(test_ucx_hostile_info))
