/* kvx_tcp.c — the plain TCP transport of kvx.h: blocking sockets under deadlines (poll
 * before every read and write), one thread per served connection. */
#include "kvx.h"
#include "kvx_ucx.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../util/common.h"
#include "../util/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvx frames are little-endian: a big-endian port needs byte swaps here"
#endif

#define KVX_MAGIC 0x3158564bu /* "KVX1" */
enum {
    F_HELLO = 1,
    F_HELLO_OK = 2,
    F_ERROR = 3,
    F_CALL = 4,
    F_REPLY = 5,
    F_READ = 6,
    F_DATA = 7,
    F_RELEASE = 8,
    F_UCX_REQ = 9,       /* empty: "your UCX endpoint, please" */
    F_UCX_INFO = 10,     /* the answer: kvx_ucx_srv_info's blob (or F_ERROR) */
    F_RELEASE_CHECK = 11 /* u64 lease: answered by F_REPLY with an i32 status */
};
#define MAX_CALL_BYTES ((uint64_t)64 << 20)  /* a call or its reply (a prompt's JSON) */
#define MAX_DATA_BYTES ((uint64_t)4 << 30)   /* one read's blocks */
#define MAX_ERROR_BYTES 4096u
#define HELLO_BYTES (3 * 8 + 256)

typedef struct frame_head {
    uint32_t magic, type;
    uint64_t len;
} frame_head;

/* ---- deadline I/O ------------------------------------------------------------------- */

/* Move n bytes (write: from p, else into p) before the deadline (ifd_now_s() clock).
 * 0, IFD_ERR_IO (closed, reset, timed out). */
static int io_full(int fd, void *p, size_t n, double deadline, bool write) {
    char *b = p;
    while (n > 0) {
        const double left = deadline - ifd_now_s();
        if (left <= 0) return IFD_ERR_IO;
        struct pollfd pf = {.fd = fd, .events = write ? POLLOUT : POLLIN};
        const int pr = poll(&pf, 1, (int)(left * 1e3) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) return IFD_ERR_IO;
        const ssize_t k = write ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k <= 0) return IFD_ERR_IO;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_frame(int fd, uint32_t type, const void *a, size_t na, const void *b, size_t nb, double io_s) {
    frame_head h = {KVX_MAGIC, type, (uint64_t)na + nb};
    const double dl = ifd_now_s() + io_s;
    if (io_full(fd, &h, sizeof h, dl, true)) return IFD_ERR_IO;
    if (na && io_full(fd, (void *)(uintptr_t)a, na, dl, true)) return IFD_ERR_IO;
    /* a big payload gets time in proportion (at least 100 MB/s) */
    if (nb && io_full(fd, (void *)(uintptr_t)b, nb, dl + (double)nb / 1e8, true)) return IFD_ERR_IO;
    return 0;
}

static int send_error(int fd, int32_t status, const char *msg, double io_s) {
    size_t n = strlen(msg);
    if (n > MAX_ERROR_BYTES - 4) n = MAX_ERROR_BYTES - 4;
    return send_frame(fd, F_ERROR, &status, 4, msg, n, io_s);
}

static int recv_head(int fd, frame_head *h, double deadline) {
    if (io_full(fd, h, sizeof *h, deadline, false)) return IFD_ERR_IO;
    return h->magic == KVX_MAGIC ? 0 : IFD_ERR_FORMAT;
}

static void hello_pack(const kvx_hello *h, unsigned char *out) {
    memcpy(out, &h->compat_hash, 8);
    memcpy(out + 8, &h->epoch, 8);
    memcpy(out + 16, &h->block_bytes, 8);
    memset(out + 24, 0, 256);
    memcpy(out + 24, h->compat, strnlen(h->compat, 255));
}

static void hello_unpack(const unsigned char *in, kvx_hello *h) {
    memcpy(&h->compat_hash, in, 8);
    memcpy(&h->epoch, in + 8, 8);
    memcpy(&h->block_bytes, in + 16, 8);
    memcpy(h->compat, in + 24, 255);
    h->compat[255] = 0;
    for (char *c = h->compat; *c; c++) /* it goes into logs and error messages */
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) *c = '?';
}

static void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- server ------------------------------------------------------------------------- */

typedef struct srv_conn {
    struct kvx_server *srv;
    int fd;
    pthread_t th;
    bool done; /* under srv->mu: the thread has finished (join it) */
    struct srv_conn *next;
} srv_conn;

struct kvx_server {
    int lfd, port, max_conns;
    double idle_s, io_s;
    kvx_hello me;
    kvx_handlers h;
    pthread_t accept_th;
    pthread_mutex_t mu;
    srv_conn *conns;
    int n_conns;
    bool stopping;
    kvx_ucx_srv *ucx; /* under mu: set once (kvx_server_ucx) */
};

static void serve_conn(srv_conn *c) {
    kvx_server *s = c->srv;
    const int fd = c->fd;
    bool hello = false;
    for (;;) {
        frame_head h;
        /* idle: wait for the next frame (in slices, so a stop is seen) */
        double idle_end = ifd_now_s() + s->idle_s;
        for (;;) {
            pthread_mutex_lock(&s->mu);
            const bool stop = s->stopping;
            pthread_mutex_unlock(&s->mu);
            if (stop) return;
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            const int pr = poll(&pf, 1, 200);
            if (pr > 0) break;
            if (pr < 0 && errno != EINTR) return;
            if (ifd_now_s() > idle_end) return;
        }
        if (recv_head(fd, &h, ifd_now_s() + s->io_s)) return;
        const double dl = ifd_now_s() + s->io_s;
        if (!hello) {
            unsigned char in[HELLO_BYTES], out[HELLO_BYTES];
            if (h.type != F_HELLO || h.len != HELLO_BYTES || io_full(fd, in, sizeof in, dl, false)) return;
            kvx_hello peer;
            hello_unpack(in, &peer);
            if (peer.compat_hash != s->me.compat_hash || peer.block_bytes != s->me.block_bytes) {
                char msg[700];
                snprintf(msg, sizeof msg, "incompatible KV: this prefill instance has [%s], the decode instance [%s]",
                         s->me.compat, peer.compat);
                send_error(fd, IFD_ERR_FORMAT, msg, s->io_s);
                return;
            }
            hello_pack(&s->me, out);
            if (send_frame(fd, F_HELLO_OK, out, sizeof out, NULL, 0, s->io_s)) return;
            hello = true;
            continue;
        }
        if (h.type == F_CALL) {
            if (h.len > MAX_CALL_BYTES) return;
            char *req = malloc(h.len ? h.len : 1);
            if (!req) return;
            if (io_full(fd, req, h.len, dl + (double)h.len / 1e8, false)) {
                free(req);
                return;
            }
            char *reply = NULL;
            size_t reply_n = 0;
            const int rc = s->h.call(s->h.user, req, h.len, &reply, &reply_n);
            free(req);
            if (rc || reply_n > MAX_CALL_BYTES) {
                free(reply);
                return;
            }
            const int sr = send_frame(fd, F_REPLY, reply, reply_n, NULL, 0, s->io_s);
            free(reply);
            if (sr) return;
        } else if (h.type == F_READ) {
            unsigned char in[16];
            if (h.len != sizeof in || io_full(fd, in, sizeof in, dl, false)) return;
            uint64_t lease;
            int32_t first, n;
            memcpy(&lease, in, 8);
            memcpy(&first, in + 8, 4);
            memcpy(&n, in + 12, 4);
            const uint64_t bytes = (uint64_t)(n > 0 ? n : 0) * s->me.block_bytes;
            if (first < 0 || n <= 0 || bytes > MAX_DATA_BYTES) {
                if (send_error(fd, IFD_ERR_INVALID, "read: a block range out of bounds", s->io_s)) return;
                continue;
            }
            void *buf = malloc(bytes);
            if (!buf) {
                if (send_error(fd, IFD_ERR_NOMEM, "read: out of memory", s->io_s)) return;
                continue;
            }
            const int rc = s->h.read(s->h.user, lease, first, n, buf);
            int sr;
            if (rc == 0)
                sr = send_frame(fd, F_DATA, NULL, 0, buf, bytes, s->io_s);
            else
                sr = send_error(fd, rc, rc == IFD_ERR_NOT_FOUND ? "read: no such lease (expired or released)"
                                                                : "read: the blocks could not be read",
                                s->io_s);
            free(buf);
            if (sr) return;
        } else if (h.type == F_RELEASE) {
            uint64_t lease;
            if (h.len != 8 || io_full(fd, &lease, 8, dl, false)) return;
            (void)s->h.release(s->h.user, lease);
        } else if (h.type == F_RELEASE_CHECK) {
            uint64_t lease;
            if (h.len != 8 || io_full(fd, &lease, 8, dl, false)) return;
            const int32_t st = s->h.release(s->h.user, lease);
            if (send_frame(fd, F_REPLY, &st, 4, NULL, 0, s->io_s)) return;
        } else if (h.type == F_UCX_REQ) {
            if (h.len != 0) return;
            pthread_mutex_lock(&s->mu);
            kvx_ucx_srv *u = s->ucx;
            pthread_mutex_unlock(&s->mu);
            const void *blob = NULL;
            size_t bn = 0;
            if (u) kvx_ucx_srv_info(u, &blob, &bn);
            const int sr = u ? send_frame(fd, F_UCX_INFO, blob, bn, NULL, 0, s->io_s)
                             : send_error(fd, IFD_ERR_UNSUPPORTED, "this prefill instance serves no KV over UCX", s->io_s);
            if (sr) return;
        } else {
            return; /* unknown: a broken or hostile peer */
        }
    }
}

static void *conn_main(void *arg) {
    srv_conn *c = arg;
    serve_conn(c);
    shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_lock(&c->srv->mu);
    c->done = true;
    pthread_mutex_unlock(&c->srv->mu);
    return NULL;
}

/* Join and free the connections that finished (mu held by the caller: no, taken here). */
static void reap(kvx_server *s, bool all) {
    for (;;) {
        srv_conn *dead = NULL;
        pthread_mutex_lock(&s->mu);
        for (srv_conn **pp = &s->conns; *pp; pp = &(*pp)->next)
            if ((*pp)->done || all) {
                dead = *pp;
                *pp = dead->next;
                s->n_conns--;
                break;
            }
        pthread_mutex_unlock(&s->mu);
        if (!dead) return;
        pthread_join(dead->th, NULL);
        close(dead->fd);
        free(dead);
    }
}

static void *accept_main(void *arg) {
    kvx_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        const bool stop = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        reap(s, false);
        struct pollfd pf = {.fd = s->lfd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) continue;
        const int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) continue;
        tune(fd);
        pthread_mutex_lock(&s->mu);
        const bool full = s->n_conns >= s->max_conns;
        pthread_mutex_unlock(&s->mu);
        srv_conn *c = full ? NULL : calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->srv = s;
        c->fd = fd;
        pthread_mutex_lock(&s->mu);
        c->next = s->conns;
        s->conns = c;
        s->n_conns++;
        const bool ok = pthread_create(&c->th, NULL, conn_main, c) == 0;
        if (!ok) {
            s->conns = c->next;
            s->n_conns--;
        }
        pthread_mutex_unlock(&s->mu);
        if (!ok) {
            close(fd);
            free(c);
        }
    }
    return NULL;
}

static int listen_on(const char *host, int port, int *fd_out, int *port_out, char *err, size_t err_bytes) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const int gr = getaddrinfo(host && host[0] ? host : NULL, ps, &hints, &res);
    if (gr) return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: %s:%d: %s", host ? host : "*", port, gai_strerror(gr));
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 128)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: cannot listen on %s:%d: %s", host ? host : "*", port,
                        strerror(errno));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return 0;
}

int kvx_server_start(kvx_server **out, const char *host, int port, const kvx_hello *me, const kvx_handlers *h,
                     int max_conns, double idle_s, double io_s, char *err, size_t err_bytes) {
    *out = NULL;
    kvx_server *s = calloc(1, sizeof *s);
    if (!s) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "kvx: out of memory");
    s->me = *me;
    s->h = *h;
    s->max_conns = max_conns > 0 ? max_conns : 64;
    s->idle_s = idle_s > 0 ? idle_s : 300;
    s->io_s = io_s > 0 ? io_s : 30;
    pthread_mutex_init(&s->mu, NULL);
    int rc = listen_on(host, port, &s->lfd, &s->port, err, err_bytes);
    if (rc) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    if (pthread_create(&s->accept_th, NULL, accept_main, s)) {
        close(s->lfd);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "kvx: no thread");
    }
    *out = s;
    return 0;
}

int kvx_server_ucx(kvx_server *s, const kvx_region *r, char *err, size_t err_bytes) {
    kvx_ucx_srv *u = NULL;
    const int rc = kvx_ucx_srv_create(&u, r, err, err_bytes);
    if (rc) return rc;
    pthread_mutex_lock(&s->mu);
    kvx_ucx_srv *old = s->ucx;
    if (!old) s->ucx = u;
    pthread_mutex_unlock(&s->mu);
    if (old) {
        kvx_ucx_srv_destroy(u);
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "kvx: a region is registered already");
    }
    return 0;
}

int kvx_server_port(const kvx_server *s) { return s->port; }

int kvx_server_conns(kvx_server *s) {
    pthread_mutex_lock(&s->mu);
    const int n = s->n_conns;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void kvx_server_stop(kvx_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (srv_conn *c = s->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->accept_th, NULL);
    reap(s, true);
    close(s->lfd);
    kvx_ucx_srv_destroy(s->ucx); /* no connection hands its info out any more */
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- client ------------------------------------------------------------------------- */

struct kvx_conn {
    int fd;
    double io_s;
    uint64_t block_bytes;
    bool broken;
    kvx_ucx_cli *ucx; /* kvx_ucx_attach */
};

static int conn_fail(kvx_conn *c, int rc, char *err, size_t err_bytes, const char *what) {
    c->broken = true;
    return ifd_errf(err, err_bytes, rc, "kvx: %s", what);
}

/* An error frame's text into err; its status, or IFD_ERR_FORMAT. */
static int read_error(kvx_conn *c, const frame_head *h, char *err, size_t err_bytes) {
    char buf[MAX_ERROR_BYTES + 1];
    if (h->len < 4 || h->len > MAX_ERROR_BYTES || io_full(c->fd, buf, h->len, ifd_now_s() + c->io_s, false))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "a malformed error frame");
    int32_t st;
    memcpy(&st, buf, 4);
    buf[h->len] = 0;
    for (char *p = buf + 4; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
    if (st >= 0 || st < -64) st = IFD_ERR_FORMAT;
    return ifd_errf(err, err_bytes, st, "kvx: peer: %s", buf + 4);
}

static int connect_to(const char *host, int port, double io_s, int *out, char *err, size_t err_bytes) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const int gr = getaddrinfo(host, ps, &hints, &res);
    if (gr) return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: %s:%d: %s", host, port, gai_strerror(gr));
    int fd = -1, e = ECONNREFUSED;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
            e = errno;
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int so = 0;
        socklen_t sl = sizeof so;
        if (poll(&pf, 1, (int)(io_s * 1e3)) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) || so) {
            e = so ? so : ETIMEDOUT;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: cannot connect to %s:%d: %s", host, port, strerror(e));
    tune(fd);
    *out = fd;
    return 0;
}

int kvx_connect(kvx_conn **out, const char *host, int port, const kvx_hello *me, kvx_hello *peer, double io_s,
                char *err, size_t err_bytes) {
    *out = NULL;
    kvx_conn *c = calloc(1, sizeof *c);
    if (!c) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "kvx: out of memory");
    c->io_s = io_s > 0 ? io_s : 30;
    c->block_bytes = me->block_bytes;
    int rc = connect_to(host, port, c->io_s, &c->fd, err, err_bytes);
    if (rc) {
        free(c);
        return rc;
    }
    unsigned char buf[HELLO_BYTES];
    hello_pack(me, buf);
    frame_head h;
    if (send_frame(c->fd, F_HELLO, buf, sizeof buf, NULL, 0, c->io_s) ||
        recv_head(c->fd, &h, ifd_now_s() + c->io_s)) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: %s:%d: no handshake (not a prefill instance's KV port?)",
                      host, port);
    } else if (h.type == F_ERROR) {
        rc = read_error(c, &h, err, err_bytes);
    } else if (h.type != F_HELLO_OK || h.len != HELLO_BYTES ||
               io_full(c->fd, buf, sizeof buf, ifd_now_s() + c->io_s, false)) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: %s:%d: a malformed handshake", host, port);
    } else {
        kvx_hello p;
        hello_unpack(buf, &p);
        if (p.compat_hash != me->compat_hash || p.block_bytes != me->block_bytes)
            rc = ifd_errf(err, err_bytes, IFD_ERR_FORMAT, "kvx: incompatible KV: the prefill instance has [%s], this one [%s]",
                          p.compat, me->compat);
        if (peer) *peer = p;
    }
    if (rc) {
        close(c->fd);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int kvx_call(kvx_conn *c, const char *req, size_t n, double call_s, char **reply, size_t *reply_n, char *err,
             size_t err_bytes) {
    *reply = NULL;
    *reply_n = 0;
    if (c->broken) return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: a broken connection");
    if (n > MAX_CALL_BYTES) return ifd_errf(err, err_bytes, IFD_ERR_LIMIT, "kvx: a call of %zu bytes", n);
    if (send_frame(c->fd, F_CALL, req, n, NULL, 0, c->io_s))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "call: the peer is gone");
    frame_head h;
    const int hr = recv_head(c->fd, &h, ifd_now_s() + call_s);
    if (hr) return conn_fail(c, IFD_ERR_IO, err, err_bytes, "call: no answer (the peer died or timed out)");
    if (h.type == F_ERROR) return read_error(c, &h, err, err_bytes);
    if (h.type != F_REPLY || h.len > MAX_CALL_BYTES)
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "call: a malformed answer");
    char *r = malloc(h.len + 1);
    if (!r) return conn_fail(c, IFD_ERR_NOMEM, err, err_bytes, "call: out of memory");
    if (io_full(c->fd, r, h.len, ifd_now_s() + c->io_s + (double)h.len / 1e8, false)) {
        free(r);
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "call: the answer was cut");
    }
    r[h.len] = 0;
    *reply = r;
    *reply_n = h.len;
    return 0;
}

int kvx_read(kvx_conn *c, uint64_t lease, int32_t first, int32_t n, void *buf, char *err, size_t err_bytes) {
    if (c->broken) return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: a broken connection");
    if (n <= 0 || first < 0) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "kvx: read of %d blocks", n);
    unsigned char req[16];
    memcpy(req, &lease, 8);
    memcpy(req + 8, &first, 4);
    memcpy(req + 12, &n, 4);
    if (send_frame(c->fd, F_READ, req, sizeof req, NULL, 0, c->io_s))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "read: the peer is gone");
    frame_head h;
    if (recv_head(c->fd, &h, ifd_now_s() + c->io_s))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "read: no answer (the peer died?)");
    if (h.type == F_ERROR) return read_error(c, &h, err, err_bytes);
    const uint64_t want = (uint64_t)n * c->block_bytes;
    if (h.type != F_DATA || h.len != want) return conn_fail(c, IFD_ERR_IO, err, err_bytes, "read: a malformed answer");
    if (io_full(c->fd, buf, want, ifd_now_s() + c->io_s + (double)want / 1e8, false))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "read: the data was cut (the peer died?)");
    return 0;
}

int kvx_release(kvx_conn *c, uint64_t lease) {
    if (c->broken) return IFD_ERR_IO;
    if (send_frame(c->fd, F_RELEASE, &lease, 8, NULL, 0, c->io_s)) {
        c->broken = true;
        return IFD_ERR_IO;
    }
    return 0;
}

int kvx_release_check(kvx_conn *c, uint64_t lease, char *err, size_t err_bytes) {
    if (c->broken) return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: a broken connection");
    if (send_frame(c->fd, F_RELEASE_CHECK, &lease, 8, NULL, 0, c->io_s))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "release: the peer is gone");
    frame_head h;
    int32_t st;
    if (recv_head(c->fd, &h, ifd_now_s() + c->io_s))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "release: no answer (the peer died?)");
    if (h.type == F_ERROR) return read_error(c, &h, err, err_bytes);
    if (h.type != F_REPLY || h.len != 4 || io_full(c->fd, &st, 4, ifd_now_s() + c->io_s, false))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "release: a malformed answer");
    if (st == 0) return 0;
    return ifd_errf(err, err_bytes, IFD_ERR_NOT_FOUND, "kvx: the lease had expired before the reads were confirmed");
}

int kvx_ucx_attach(kvx_conn *c, char *err, size_t err_bytes) {
    if (c->ucx) return 0;
    if (c->broken) return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: a broken connection");
    if (!kvx_ucx_built())
        return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "kvx: this build has no UCX (libucx-dev was not found)");
    if (send_frame(c->fd, F_UCX_REQ, NULL, 0, NULL, 0, c->io_s))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "ucx: the peer is gone");
    frame_head h;
    if (recv_head(c->fd, &h, ifd_now_s() + c->io_s))
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "ucx: no answer (the peer died?)");
    if (h.type == F_ERROR) return read_error(c, &h, err, err_bytes);
    if (h.type != F_UCX_INFO || h.len > KVX_UCX_MAX_INFO)
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "ucx: a malformed answer");
    void *blob = malloc(h.len ? h.len : 1);
    if (!blob) return conn_fail(c, IFD_ERR_NOMEM, err, err_bytes, "ucx: out of memory");
    if (io_full(c->fd, blob, h.len, ifd_now_s() + c->io_s, false)) {
        free(blob);
        return conn_fail(c, IFD_ERR_IO, err, err_bytes, "ucx: the answer was cut");
    }
    const int rc = kvx_ucx_cli_create(&c->ucx, blob, h.len, c->block_bytes, err, err_bytes);
    free(blob);
    return rc;
}

bool kvx_ucx_attached(const kvx_conn *c) { return c->ucx != NULL; }

int kvx_get(kvx_conn *c, const int32_t *remote, int32_t n, void *buf, double io_s, uint64_t *ops, char *err,
            size_t err_bytes) {
    if (ops) *ops = 0;
    if (c->broken) return ifd_errf(err, err_bytes, IFD_ERR_IO, "kvx: a broken connection");
    if (!c->ucx) return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "kvx: get without kvx_ucx_attach");
    if (n <= 0) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "kvx: get of %d blocks", n);
    const int rc = kvx_ucx_cli_get(c->ucx, remote, n, buf, ifd_now_s() + io_s, ops, err, err_bytes);
    if (rc == IFD_ERR_IO) c->broken = true;
    return rc;
}

bool kvx_broken(const kvx_conn *c) { return c->broken; }

void kvx_interrupt(kvx_conn *c) {
    shutdown(c->fd, SHUT_RDWR);
    if (c->ucx) kvx_ucx_cli_interrupt(c->ucx);
}

void kvx_close(kvx_conn *c) {
    if (!c) return;
    kvx_ucx_cli_destroy(c->ucx);
    close(c->fd);
    free(c);
}
