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
 * Transports: "tcp" (this file's implementation, kvx_tcp.c: blocking sockets, every
 * send and receive under a deadline, one thread per served connection). Frames are
 * {u32 magic, u32 type, u64 length} + payload, little-endian; a frame too large for its
 * type, an unknown type or a call before the handshake closes the connection.
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
    void (*release)(void *user, uint64_t lease);
    void *user;
} kvx_handlers;

typedef struct kvx_server kvx_server;

/* Listen on host:port (port 0: any; kvx_server_port says which) and serve up to
 * max_conns connections at once (more are closed at accept). idle_s: a connection idle
 * that long is closed; io_s: the bound on one frame's send or receive. 0, or a negative
 * status with one line in err. */
int kvx_server_start(kvx_server **out, const char *host, int port, const kvx_hello *me, const kvx_handlers *h,
                     int max_conns, double idle_s, double io_s, char *err, size_t err_bytes);
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
/* The connection broke (IFD_ERR_IO or a protocol error on it): close it, never reuse. */
bool kvx_broken(const kvx_conn *c);
void kvx_close(kvx_conn *c); /* NULL ok */

#endif
