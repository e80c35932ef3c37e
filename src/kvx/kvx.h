/* kvx.h — KV transfer between inferd instances (prefill/decode disaggregation).
 *
 * What it does: connects a decode instance (the client) to a prefill instance (the
 * server) and carries, over one connection, the three things disaggregation needs: a
 * metadata handshake (a compatibility hash and an epoch: a mismatch is refused with both
 * sides' descriptions), a call (the decode side's prefill request, JSON, answered by the
 * prefill side's JSON), and block reads (a lease's blocks first .. first + n - 1, raw
 * bytes in the exchange layout of inferd_kv_read) with a release that needs no answer.
 * What it does not: know the engine, HTTP or what a block holds. The prefill side's
 * answers come from handlers the server gives (kvx_handlers); the decode side writes
 * what it reads into its own pool itself.
 *
 * Transports: the control connection is always TCP (kvx_tcp.c: blocking sockets, every
 * send and receive under a deadline, one thread per served connection). Frames are
 * {u32 magic, u32 type, u64 length} + payload, little-endian; a frame too large for its
 * type, an unknown type or a call before the handshake closes the connection. Blocks
 * travel either on it (kvx_read: the prefill side copies a lease's blocks into a frame)
 * or, with UCX (kvx_server_ucx + kvx_ucx_attach, kvx_ucx.c), by one-sided reads of the
 * prefill side's registered KV region (kvx_get), confirmed by kvx_release_check: the
 * lease was still live when the reads were done, so they read its blocks.
 *
 * Trust: a peer that passed the handshake and attached over UCX may read the whole
 * registered region (every request's KV, as with any RDMA KV connector): the KV port
 * belongs on the cluster's private network.
 *
 * Thread-safety: a kvx_conn is used by one thread at a time; the server runs its own
 * threads and calls the handlers from them, concurrently. */
#ifndef INFERD_KVX_H
#define INFERD_KVX_H
#include "../util/layer/kvx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What each side says about its KV in the handshake. */
typedef struct kvx_hello {
    uint64_t compat_hash; /* equal on both sides, or the connection is refused */
    uint64_t epoch;       /* the prefill process's (a restart invalidates its leases) */
    uint64_t block_bytes; /* one block in the exchange layout */
    char compat[256];     /* the hash's facts as text (the refusal names both) */
} kvx_hello;

/* ---- prefill side ---------------------------------------------------------------- */

typedef struct kvx_handlers {
    /* A call: req[0..n) (JSON text, not NUL-terminated). Set *reply to a malloc'ed
     * answer of *reply_n bytes (kvx frees it). May block (it waits for the engine).
     * Nonzero: the connection closes. */
    int (*call)(void *user, const char *req, size_t n, char **reply, size_t *reply_n);
    /* Blocks first .. first + n - 1 of lease into buf (n * block_bytes). 0, or a
     * negative status: the client gets an error frame and the connection stays. */
    int (*read)(void *user, uint64_t lease, int32_t first, int32_t n, void *buf);
    /* Give the lease back: 0 it was live, IFD_ERR_NOT_FOUND it had expired (or never was). */
    int (*release)(void *user, uint64_t lease);
    void *user;
} kvx_handlers;

/* The prefill side's KV region for one-sided reads: block b's segment s (s < n_segs, in
 * the exchange layout's order: layer 0 K, layer 0 V, layer 1 K, ...) is seg_bytes at
 * base + seg_off[s] + b * block_stride; n_segs * seg_bytes is the block_bytes of the
 * handshake. */
#define KVX_MAX_SEGS 1024
typedef struct kvx_region {
    void *base;
    size_t bytes;
    int32_t n_blocks, n_segs;
    uint64_t seg_bytes, block_stride;
    uint64_t seg_off[KVX_MAX_SEGS];
} kvx_region;

/* Whether this build has the UCX transport. */
bool kvx_ucx_built(void);

typedef struct kvx_server kvx_server;

/* Listen on host:port (port 0: any; kvx_server_port says which) and serve up to
 * max_conns connections at once (more are closed at accept). idle_s: a connection idle
 * that long is closed; io_s: the bound on one frame's send or receive. 0, or a negative
 * status with one line in err. */
int kvx_server_start(kvx_server **out, const char *host, int port, const kvx_hello *me, const kvx_handlers *h,
                     int max_conns, double idle_s, double io_s, char *err, size_t err_bytes);
/* Register r once and serve one-sided reads of it over UCX to connections that attach
 * (after kvx_server_start, before decode instances attach; r's memory must outlive s).
 * 0, IFD_ERR_UNSUPPORTED (no UCX in this build), or another negative status. */
int kvx_server_ucx(kvx_server *s, const kvx_region *r, char *err, size_t err_bytes);
int kvx_server_port(const kvx_server *s);
/* Connections served now, and reads served in all (tests, metrics). */
int kvx_server_conns(kvx_server *s);
/* Close the listener and every connection, wait for their threads (handlers return
 * first: a call blocked in the engine keeps it waiting). NULL ok. */
void kvx_server_stop(kvx_server *s);

/* ---- decode side ------------------------------------------------------------------- */

typedef struct kvx_conn kvx_conn;

/* Connect and shake hands: their hello into *peer (may be NULL). A compat mismatch is
 * IFD_ERR_FORMAT with both descriptions in err; no answer within io_s is IFD_ERR_IO. */
int kvx_connect(kvx_conn **out, const char *host, int port, const kvx_hello *me, kvx_hello *peer, double io_s,
                char *err, size_t err_bytes);
/* A call; the answer is malloc'ed into *reply (NUL-terminated, *reply_n bytes without
 * the NUL). call_s bounds the wait for it (the prefill itself). */
int kvx_call(kvx_conn *c, const char *req, size_t n, double call_s, char **reply, size_t *reply_n, char *err,
             size_t err_bytes);
/* Blocks first .. first + n - 1 of the peer's lease into buf (n * block_bytes).
 * IFD_ERR_NOT_FOUND when the peer no longer has the lease. */
int kvx_read(kvx_conn *c, uint64_t lease, int32_t first, int32_t n, void *buf, char *err, size_t err_bytes);
int kvx_release(kvx_conn *c, uint64_t lease);
/* Release and confirm: 0 the lease was live until now (so reads done before are of its
 * blocks), IFD_ERR_NOT_FOUND it had expired (what was read may be another's), IFD_ERR_IO. */
int kvx_release_check(kvx_conn *c, uint64_t lease, char *err, size_t err_bytes);
/* Ask the peer for its UCX endpoint and connect to it: 0 (kvx_get works from now on),
 * IFD_ERR_UNSUPPORTED (this build, or the peer, has no UCX: kvx_read still works), or
 * another negative status. */
int kvx_ucx_attach(kvx_conn *c, char *err, size_t err_bytes);
bool kvx_ucx_attached(const kvx_conn *c);
/* One-sided reads of the peer's blocks remote[0..n) (its pool's ids: the call's answer
 * names them) into buf (n * block_bytes, the exchange layout), before io_s passes.
 * *ops (may be NULL): the GETs issued (runs of consecutive ids are coalesced). Confirm
 * with kvx_release_check before trusting the data. */
int kvx_get(kvx_conn *c, const int32_t *remote, int32_t n, void *buf, double io_s, uint64_t *ops, char *err,
            size_t err_bytes);
/* The connection broke (IFD_ERR_IO or a protocol error on it): close it, never reuse. */
bool kvx_broken(const kvx_conn *c);
/* From another thread (the only call that may be): what c is doing or does next fails
 * at once with IFD_ERR_IO (a shutdown: c stays valid until kvx_close by its user). */
void kvx_interrupt(kvx_conn *c);
void kvx_close(kvx_conn *c); /* NULL ok */

#endif
