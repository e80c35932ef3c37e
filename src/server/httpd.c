/* httpd.c — the HTTP/1.1 server of httpd.h: listening socket, I/O threads (one epoll
 * set each, level-triggered), per-connection state machine, request parser, chunked
 * bodies, response framing, deadlines, the connection limit with its reserve and
 * idle eviction, and cross-thread wake-ups (an eventfd per thread).
 *
 * A connection is in one of four states:
 *   HEAD    waiting for / reading a request head (also: idle between requests);
 *   BODY    head accepted by the application, reading the body;
 *   APP     the application holds the request; its response is being produced/sent;
 *   LINGER  our last response is out and we shut our side down; reading and
 *           discarding what the client still sends (so a close does not reset the
 *           connection under a response it has not read yet), briefly.
 * A closed connection is marked dead and freed at the end of its thread's event
 * batch, so a later event of the same batch never touches freed memory. Functions
 * the application calls only queue output; writes, state changes and closes happen
 * in conn_run once the callback has returned.
 *
 * The pure parsing lives in httpd_parse.c. The rest stays one file (past the usual
 * length) on purpose: the state machine, its deadlines, the limit/eviction logic and
 * the threads all work on one private connection struct and its invariants. */
#define _GNU_SOURCE
#include "httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "httpd_parse.h"
#include "util/common.h"

enum { CS_HEAD, CS_BODY, CS_APP, CS_LINGER };
enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER };

#define READ_CHUNK (16 * 1024)
#define PIPELINE_MAX (64 * 1024) /* input kept while a request is being answered */
#define LINGER_S 2.0
#define EARLY_WRITE_TIMEOUT_S 10.0 /* writing an error to a client that sent a bad request */
#define CHUNK_LINE_MAX 1024
#define EVICT_AFTER_S 0.5

typedef struct io_thread io_thread;

struct httpd_conn {
    io_thread *t;
    int fd;
    int st;
    bool dead;
    bool reserve;
    char client[64];
    uint32_t mask; /* epoll interest now */
    /* input */
    char *in;
    size_t in_n, in_cap;
    size_t scan;         /* head: bytes already searched for its end */
    double t_idle;       /* accept, or the end of the previous response */
    double t_first_byte; /* first byte of the request being read; 0: none yet */
    double t_body;       /* end of the head */
    double t_linger;
    int served;
    bool peer_eof;
    /* the request */
    char *head;
    httpd_header *hdrs;
    httpd_request rq;
    bool keep_alive;
    sbuf body; /* framing: c->rq.content_length (-1: chunked) */
    size_t body_budget; /* bytes of d->body_bytes this request holds */
    int ch_state;
    uint64_t ch_left;
    bool app;        /* on_head called, on_done not yet */
    bool expect_100; /* Expect: 100-continue */
    bool line_seen;  /* head: the request line's newline has arrived */
    void *user;
    /* output */
    sbuf out;
    size_t out_pos;
    double t_write; /* last progress writing, or when output became pending */
    bool resp_started, resp_complete, streaming, stream_chunked;
    bool close_after;
    bool broken;
    bool drained; /* a stream's output drained: tell the application */
    /* wake-ups */
    bool wake_queued;
    httpd_conn *wake_next;
    httpd_conn *prev, *next;
};

struct io_thread {
    httpd *d;
    pthread_t th;
    bool started;
    int ep, wfd;
    pthread_mutex_t wmu;
    httpd_conn *wake_head;
    httpd_conn *conns;
    httpd_conn *grave;
    bool listening;
    double listen_resume; /* accept paused (out of file descriptors) until then */
    _Atomic int n_evictable; /* idle connections that could be evicted (as of the last sweep) */
    _Atomic int evict_req;   /* evictions other threads asked of this one */
    char tag_listen, tag_wake;
};

struct httpd {
    httpd_config cfg;
    httpd_handlers h;
    void *app;
    int lfd;
    int port;
    io_thread *threads;
    int n_threads;
    _Atomic bool stopping;
    _Atomic int64_t n_conns, accepted, rejected, evicted, timeouts;
    _Atomic int64_t body_bytes; /* request bodies being received or held, all connections */
    int64_t max_body_total;
};

/* ---- small helpers ----------------------------------------------------------------- */

const char *httpd_header_get(const httpd_request *rq, const char *name) {
    for (int i = 0; i < rq->n_headers; i++)
        if (!strcasecmp(rq->headers[i].name, name)) return rq->headers[i].value;
    return NULL;
}

static bool out_pending(const httpd_conn *c) { return c->out_pos < c->out.n; }
size_t httpd_pending(const httpd_conn *c) { return c->out.n - c->out_pos; }
void httpd_set_user(httpd_conn *c, void *user) { c->user = user; }
void *httpd_user(const httpd_conn *c) { return c->user; }
void httpd_abort(httpd_conn *c) { c->broken = true; }
void httpd_close_after(httpd_conn *c) { c->close_after = true; }

static void out_touch(httpd_conn *c) {
    if (!out_pending(c)) c->t_write = ifd_now_s();
}

/* Request bodies take memory before anything checks them: all connections together
 * may hold at most max_body_total bytes (503 beyond). */
static bool body_reserve(httpd_conn *c, size_t n) {
    httpd *d = c->t->d;
    int64_t now = atomic_fetch_add(&d->body_bytes, (int64_t)n) + (int64_t)n;
    if (now > d->max_body_total) {
        atomic_fetch_sub(&d->body_bytes, (int64_t)n);
        return false;
    }
    c->body_budget += n;
    return true;
}

static void body_release(httpd_conn *c) {
    if (c->body_budget) atomic_fetch_sub(&c->t->d->body_bytes, (int64_t)c->body_budget);
    c->body_budget = 0;
}

/* ---- close ------------------------------------------------------------------------ */

static void wake_unlink(httpd_conn *c) {
    io_thread *t = c->t;
    pthread_mutex_lock(&t->wmu);
    if (c->wake_queued) {
        for (httpd_conn **pp = &t->wake_head; *pp; pp = &(*pp)->wake_next)
            if (*pp == c) {
                *pp = c->wake_next;
                break;
            }
        c->wake_queued = false;
    }
    pthread_mutex_unlock(&t->wmu);
}

static void app_done(httpd_conn *c, httpd_done why) {
    if (!c->app) return;
    c->app = false;
    httpd *d = c->t->d;
    if (d->h.on_done) d->h.on_done(d->app, c, c->user, why);
    c->user = NULL;
}

static void conn_close(httpd_conn *c, httpd_done why) {
    if (c->dead) return;
    app_done(c, why);
    c->dead = true;
    wake_unlink(c);
    io_thread *t = c->t;
    epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    if (c->prev) c->prev->next = c->next;
    else t->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = NULL;
    c->next = t->grave;
    t->grave = c;
    atomic_fetch_sub(&t->d->n_conns, 1);
}

static void conn_free(httpd_conn *c) {
    body_release(c);
    free(c->in);
    free(c->head);
    free(c->hdrs);
    sbuf_free(&c->body);
    sbuf_free(&c->out);
    free(c);
}

static void free_grave(io_thread *t) {
    while (t->grave) {
        httpd_conn *c = t->grave;
        t->grave = c->next;
        conn_free(c);
    }
}

/* ---- responses ------------------------------------------------------------------------ */

static bool must_close(const httpd_conn *c) {
    return c->close_after || !c->keep_alive || c->reserve || atomic_load(&c->t->d->stopping);
}

static void put_head(httpd_conn *c, int status, const httpd_header *h, int nh) {
    sbuf *o = &c->out;
    sbuf_printf(o, "HTTP/1.1 %d %s\r\n", status, httpd_reason(status));
    for (int i = 0; i < nh; i++) {
        sbuf_puts(o, h[i].name);
        sbuf_puts(o, ": ");
        sbuf_puts(o, h[i].value);
        sbuf_puts(o, "\r\n");
    }
}

static void put_connection(httpd_conn *c) {
    if (must_close(c)) {
        c->close_after = true;
        sbuf_puts(&c->out, "Connection: close\r\n");
    } else if (c->rq.version_minor == 0) {
        sbuf_puts(&c->out, "Connection: keep-alive\r\n");
    }
}

int httpd_respond(httpd_conn *c, int status, const httpd_header *headers, int n_headers,
                  const char *body, size_t body_bytes) {
    if (c->resp_started || c->dead) return -1;
    out_touch(c);
    c->resp_started = c->resp_complete = true;
    put_head(c, status, headers, n_headers);
    sbuf_printf(&c->out, "Content-Length: %zu\r\n", body_bytes);
    put_connection(c);
    sbuf_puts(&c->out, "\r\n");
    if (!c->rq.is_head && body_bytes) sbuf_put(&c->out, body, body_bytes);
    return c->out.oom ? -1 : 0;
}

int httpd_stream_start(httpd_conn *c, int status, const httpd_header *headers, int n_headers) {
    if (c->resp_started || c->dead) return -1;
    out_touch(c);
    c->resp_started = c->streaming = true;
    c->stream_chunked = c->rq.version_minor >= 1;
    if (!c->stream_chunked) c->close_after = true;
    put_head(c, status, headers, n_headers);
    if (c->stream_chunked) sbuf_puts(&c->out, "Transfer-Encoding: chunked\r\n");
    put_connection(c);
    sbuf_puts(&c->out, "\r\n");
    return c->out.oom ? -1 : 0;
}

int httpd_stream_write(httpd_conn *c, const char *data, size_t n) {
    if (!c->streaming || c->resp_complete || c->dead) return -1;
    if (!n || c->rq.is_head) return 0;
    out_touch(c);
    if (c->stream_chunked) sbuf_printf(&c->out, "%zx\r\n", n);
    sbuf_put(&c->out, data, n);
    if (c->stream_chunked) sbuf_puts(&c->out, "\r\n");
    return c->out.oom ? -1 : 0;
}

int httpd_stream_end(httpd_conn *c) {
    if (!c->streaming || c->resp_complete || c->dead) return -1;
    out_touch(c);
    if (c->stream_chunked && !c->rq.is_head) sbuf_puts(&c->out, "0\r\n\r\n");
    c->resp_complete = true;
    return c->out.oom ? -1 : 0;
}

/* An error made here (not by the application). If the application holds the request
 * it is told first that the request is over. The connection closes after it. */
static void conn_error(httpd_conn *c, int status, const char *msg) {
    httpd *d = c->t->d;
    if (c->resp_started) { /* cannot answer twice: just close */
        conn_close(c, HTTPD_DONE_CLOSED);
        return;
    }
    app_done(c, HTTPD_DONE_CLOSED);
    c->close_after = true;
    sbuf b = {0};
    if (d->h.error_body) d->h.error_body(d->app, c->client, status, msg, &b);
    const httpd_header h[] = {{"Content-Type", "application/json"}};
    httpd_respond(c, status, h, 1, b.p ? b.p : "", b.n);
    sbuf_free(&b);
}

/* ---- the request head ----------------------------------------------------------------- */

/* Parse c->head (len bytes) into c->rq and the framing fields. 0 or an HTTP status. */
static int parse_head(httpd_conn *c, size_t len, const char **msg) {
    httpd *d = c->t->d;
    httpd_head_info h;
    int st = httpd_parse_head(c->head, len, c->head + len + 1, c->hdrs, d->cfg.max_target_bytes,
                              d->cfg.max_headers, &h, msg);
    if (st) return st;
    c->rq = h.rq;
    c->rq.client = c->client;
    c->rq.reserve = c->reserve;
    c->keep_alive = h.keep_alive;
    c->expect_100 = h.expect_100;
    return 0;
}

/* The start of a request line, checked as it arrives so garbage (NUL bytes, binary,
 * TLS handshakes) is answered at once instead of after a deadline. */
static int check_line_prefix(httpd_conn *c, const char **msg) {
    const httpd *d = c->t->d;
    size_t i = 0;
    for (; i < c->in_n && c->in[i] != ' '; i++) {
        if (!httpd_is_tchar((unsigned char)c->in[i])) return *msg = "malformed request line", 400;
        if (i >= 32) return *msg = "request method too long", 400;
    }
    if (c->line_seen) return 0;
    /* no newline before c->scan yet (the end-of-head search stops at the first one) */
    const char *nl = memchr(c->in + c->scan, '\n', c->in_n - c->scan);
    size_t line = nl ? (size_t)(nl - c->in) : c->in_n;
    if (nl) c->line_seen = true;
    if (line > d->cfg.max_target_bytes + 48) return *msg = "request target too long", 414;
    return 0;
}

/* HEAD state: find the end of the head, parse it, hand it to the application.
 * Returns true when it consumed a head (the state moved on). */
static bool read_head(httpd_conn *c) {
    httpd *d = c->t->d;
    const char *msg = NULL;
    if (c->scan == 0) { /* empty lines before a request line are ignored (RFC 9112 2.2) */
        size_t k = 0;
        while (k < c->in_n && (c->in[k] == '\r' || c->in[k] == '\n')) k++;
        if (k) {
            memmove(c->in, c->in + k, c->in_n - k);
            c->in_n -= k;
        }
        if (c->in_n == 0) return false;
    }
    int st = check_line_prefix(c, &msg);
    if (st) {
        conn_error(c, st, msg);
        return true;
    }
    /* the end of the head: "\n\n" or "\n\r\n" */
    size_t end = 0;
    size_t i = c->scan;
    while (i < c->in_n) {
        const char *nl = memchr(c->in + i, '\n', c->in_n - i);
        if (!nl) {
            i = c->in_n;
            break;
        }
        size_t at = (size_t)(nl - c->in);
        if (at + 1 >= c->in_n) {
            i = at;
            break;
        }
        if (c->in[at + 1] == '\n') {
            end = at + 2;
            break;
        }
        if (c->in[at + 1] == '\r') {
            if (at + 2 >= c->in_n) {
                i = at;
                break;
            }
            if (c->in[at + 2] == '\n') {
                end = at + 3;
                break;
            }
        }
        i = at + 1;
    }
    if (!end) {
        c->scan = i;
        if (c->in_n > d->cfg.max_head_bytes) {
            conn_error(c, 431, "request head too large");
            return true;
        }
        return false;
    }
    if (end > d->cfg.max_head_bytes) {
        conn_error(c, 431, "request head too large");
        return true;
    }
    /* copy the head out (parsed in place there) with room for the path after it */
    free(c->head);
    c->head = malloc(2 * end + 2);
    if (!c->hdrs) c->hdrs = malloc(sizeof *c->hdrs * (size_t)d->cfg.max_headers);
    if (!c->head || !c->hdrs) {
        conn_close(c, HTTPD_DONE_CLOSED);
        return true;
    }
    memcpy(c->head, c->in, end);
    c->head[end] = 0;
    memmove(c->in, c->in + end, c->in_n - end);
    c->in_n -= end;
    c->scan = 0;
    c->line_seen = false;
    c->ch_state = CH_SIZE;
    c->expect_100 = false;
    memset(&c->rq, 0, sizeof c->rq);
    st = parse_head(c, end, &msg);
    if (st) {
        conn_error(c, st, msg);
        return true;
    }
    const int64_t cl = c->rq.content_length;
    if (cl > 0 && (uint64_t)cl > d->cfg.max_body_bytes) {
        conn_error(c, 413, "request body too large");
        return true;
    }
    const bool has_body = cl != 0;
    if (cl > 0 && !body_reserve(c, (size_t)cl)) {
        conn_error(c, 503, "the server is receiving too many request bodies; retry later");
        return true;
    }
    c->t_body = ifd_now_s();
    c->app = true;
    if (d->h.on_head) d->h.on_head(d->app, c, &c->rq);
    if (c->dead) return true;
    if (c->resp_started) {
        /* answered from the head: the body is not read; close after the answer */
        if (has_body) c->close_after = true;
        c->st = has_body ? CS_BODY : CS_APP;
        return true;
    }
    if (c->expect_100 && c->in_n == 0) {
        out_touch(c);
        sbuf_puts(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
    }
    sbuf_reset(&c->body);
    c->st = CS_BODY;
    return true;
}

/* ---- the body ------------------------------------------------------------------------ */

static void dispatch(httpd_conn *c) {
    httpd *d = c->t->d;
    sbuf_reserve(&c->body, 1);
    if (c->body.oom) {
        conn_error(c, 500, "out of memory");
        return;
    }
    c->body.p[c->body.n] = 0;
    c->rq.body = c->body.p;
    c->rq.body_bytes = c->body.n;
    c->st = CS_APP;
    if (d->h.on_request) d->h.on_request(d->app, c, &c->rq);
    /* the body was the application's during on_request only */
    c->rq.body = NULL;
    c->rq.body_bytes = 0;
    body_release(c);
    sbuf_reset(&c->body);
    if (c->body.cap > (64 << 10)) sbuf_free(&c->body);
}

static void consume(httpd_conn *c, size_t n) {
    memmove(c->in, c->in + n, c->in_n - n);
    c->in_n -= n;
}

/* BODY state: move input into the body. Returns true when the request was dispatched
 * (or failed). Chunked input is walked with an offset and consumed once at the end,
 * so a body of many tiny chunks costs linear time. */
static bool chunked_step(httpd_conn *c, size_t *off, bool *done);

static bool read_body(httpd_conn *c) {
    const int64_t cl = c->rq.content_length;
    if (cl >= 0) {
        size_t want = (size_t)cl - c->body.n;
        size_t k = IFD_MIN(want, c->in_n);
        if (k) {
            sbuf_put(&c->body, c->in, k);
            consume(c, k);
        }
        if (c->body.n < (size_t)cl) return false;
        dispatch(c);
        return true;
    }
    size_t off = 0;
    bool done = false, more;
    do more = chunked_step(c, &off, &done);
    while (more);
    if (c->dead) return true;
    consume(c, off); /* the pipelined rest stays for the next request */
    if (!done) return c->resp_started;
    dispatch(c);
    return true;
}

/* One element of a chunked body at c->in + *off: false when it needs more input, the
 * body is complete (*done) or an error was answered. */
static bool chunked_step(httpd_conn *c, size_t *off, bool *done) {
    httpd *d = c->t->d;
    const char *p = c->in + *off;
    const size_t avail = c->in_n - *off;
    if (c->ch_state == CH_DATA) {
        size_t k = (size_t)IFD_MIN((uint64_t)avail, c->ch_left);
        if (k) {
            sbuf_put(&c->body, p, k);
            *off += k;
            c->ch_left -= k;
        }
        if (c->ch_left) return false;
        c->ch_state = CH_DATA_END;
        return true;
    }
    const char *nl = memchr(p, '\n', avail);
    if (!nl) {
        if (avail > CHUNK_LINE_MAX) conn_error(c, 400, "malformed chunked body");
        return false;
    }
    size_t n = (size_t)(nl - p), adv = n + 1;
    if (n && p[n - 1] == '\r') n--;
    if (n > CHUNK_LINE_MAX) {
        conn_error(c, 400, "malformed chunked body");
        return false;
    }
    *off += adv;
    if (c->ch_state == CH_DATA_END) {
        if (n != 0) {
            conn_error(c, 400, "malformed chunked body");
            return false;
        }
        c->ch_state = CH_SIZE;
        return true;
    }
    if (c->ch_state == CH_TRAILER) { /* header lines until an empty one; ignored */
        if (n == 0) {
            *done = true;
            return false;
        }
        return true;
    }
    /* CH_SIZE */
    uint64_t v = 0;
    const char *msg = NULL;
    const size_t room = d->cfg.max_body_bytes - IFD_MIN(c->body.n, d->cfg.max_body_bytes);
    int st = httpd_parse_chunk_size(p, n, room, &v, &msg);
    if (st) {
        conn_error(c, st, msg);
        return false;
    }
    if (v && !body_reserve(c, (size_t)v)) {
        conn_error(c, 503, "the server is receiving too many request bodies; retry later");
        return false;
    }
    if (v == 0) c->ch_state = CH_TRAILER;
    else {
        c->ch_left = v;
        c->ch_state = CH_DATA;
    }
    return true;
}

/* ---- the connection driver --------------------------------------------------------- */

static size_t read_limit(const httpd_conn *c) {
    const httpd *d = c->t->d;
    switch (c->st) {
    case CS_HEAD: return d->cfg.max_head_bytes + 1;
    case CS_BODY: return READ_CHUNK * 4;
    case CS_APP: return PIPELINE_MAX;
    default: return READ_CHUNK;
    }
}

static void update_interest(httpd_conn *c) {
    if (c->dead) return;
    uint32_t m = 0;
    if (!c->peer_eof) {
        m |= EPOLLRDHUP;
        if (c->in_n < read_limit(c)) m |= EPOLLIN;
    }
    if (out_pending(c)) m |= EPOLLOUT;
    if (m == c->mask) return;
    struct epoll_event ev = {.events = m, .data.ptr = c};
    if (epoll_ctl(c->t->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0) c->mask = m;
}

static void reset_request(httpd_conn *c) {
    body_release(c);
    free(c->head);
    c->head = NULL;
    sbuf_reset(&c->body);
    if (c->body.cap > (1 << 20)) sbuf_free(&c->body);
    memset(&c->rq, 0, sizeof c->rq);
    c->resp_started = c->resp_complete = c->streaming = c->stream_chunked = false;
    c->drained = false;
    c->user = NULL;
}

/* The response is complete and written: the request is over. */
static void finish_request(httpd_conn *c) {
    app_done(c, HTTPD_DONE_OK);
    c->served++;
    const bool close_now = must_close(c);
    reset_request(c);
    sbuf_reset(&c->out);
    if (c->out.cap > (1 << 20)) sbuf_free(&c->out);
    c->out_pos = 0;
    const double now = ifd_now_s();
    if (close_now) {
        if (c->peer_eof) {
            conn_close(c, HTTPD_DONE_OK);
            return;
        }
        shutdown(c->fd, SHUT_WR);
        c->st = CS_LINGER;
        c->t_linger = now;
        c->in_n = 0;
        return;
    }
    c->st = CS_HEAD;
    c->scan = 0;
    c->t_idle = now;
    c->t_first_byte = c->in_n ? now : 0;
    if (c->peer_eof && !c->in_n) conn_close(c, HTTPD_DONE_OK); /* else: pipelined requests first */
}

/* Write what can be written. */
static void conn_write(httpd_conn *c) {
    const bool was_pending = out_pending(c);
    while (out_pending(c)) {
        ssize_t k = send(c->fd, c->out.p + c->out_pos, c->out.n - c->out_pos, MSG_NOSIGNAL);
        if (k > 0) {
            c->out_pos += (size_t)k;
            c->t_write = ifd_now_s();
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            c->broken = true;
            return;
        }
    }
    if (!out_pending(c) && c->out.n) {
        sbuf_reset(&c->out);
        c->out_pos = 0;
        if (was_pending && c->streaming && !c->resp_complete) c->drained = true;
    }
}

/* Run the connection until nothing more can happen without new input: write, finish
 * requests, parse what is buffered, tell a stream its output drained. */
static void conn_run(httpd_conn *c) {
    httpd *d = c->t->d;
    while (!c->dead) {
        bool progress = false;
        if (c->out.oom) {
            conn_close(c, HTTPD_DONE_CLOSED);
            return;
        }
        conn_write(c);
        if (c->broken) {
            conn_close(c, HTTPD_DONE_CLOSED);
            return;
        }
        if (c->resp_complete && !out_pending(c)) {
            finish_request(c);
            progress = true;
            if (c->dead) return;
        }
        if (c->drained && c->app) {
            c->drained = false;
            if (d->h.on_wake) d->h.on_wake(d->app, c, c->user);
            if (c->dead) return;
            if (out_pending(c) || c->resp_complete) progress = true;
        }
        if (c->st == CS_HEAD && !c->resp_started && c->in_n) progress |= read_head(c);
        else if (c->st == CS_BODY && !c->resp_started) progress |= read_body(c);
        else if (c->st == CS_LINGER || (c->resp_complete && c->st != CS_APP)) c->in_n = 0;
        if (!progress) break;
    }
    if (c->dead) return;
    /* The client sent all it will (end of input). Everything buffered has been parsed
     * above. A request still incomplete, or one the application is still working on,
     * has nobody to answer to (a client that half-closes and waits gets only answers
     * that were ready at once): close. A complete response still being written is
     * finished first (finish_request closes after it). */
    if (c->peer_eof && (c->st == CS_LINGER || !c->resp_complete)) {
        conn_close(c, HTTPD_DONE_CLOSED);
        return;
    }
    update_interest(c);
}

static void conn_read(httpd_conn *c) {
    for (;;) {
        size_t lim = read_limit(c);
        if (c->st == CS_LINGER || (c->resp_complete && c->st != CS_APP)) c->in_n = 0; /* discard */
        if (c->in_n >= lim) break;
        size_t want = IFD_MIN((size_t)READ_CHUNK, lim - c->in_n);
        if (c->in_cap < c->in_n + want) {
            size_t cap = IFD_MAX(c->in_cap * 2, c->in_n + want);
            char *p = realloc(c->in, cap);
            if (!p) {
                conn_close(c, HTTPD_DONE_CLOSED);
                return;
            }
            c->in = p;
            c->in_cap = cap;
        }
        ssize_t k = recv(c->fd, c->in + c->in_n, want, 0);
        if (k > 0) {
            if (c->st == CS_HEAD && c->t_first_byte == 0) c->t_first_byte = ifd_now_s();
            c->in_n += (size_t)k;
            if ((size_t)k < want) break;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (k < 0) { /* a reset */
            conn_close(c, HTTPD_DONE_CLOSED);
            return;
        }
        c->peer_eof = true; /* the client sent all it will: answer what is buffered */
        break;
    }
    conn_run(c);
}

static void conn_event(httpd_conn *c, uint32_t ev) {
    if (ev & EPOLLERR) {
        conn_close(c, HTTPD_DONE_CLOSED);
        return;
    }
    if (ev & EPOLLOUT) {
        conn_run(c);
        if (c->dead) return;
    }
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) {
        if (!(c->mask & EPOLLIN) && (ev & (EPOLLRDHUP | EPOLLHUP))) {
            /* not reading (pipelined input is full): a hang-up means the client is gone */
            conn_close(c, HTTPD_DONE_CLOSED);
            return;
        }
        conn_read(c);
    }
}

/* ---- accept, eviction, deadlines --------------------------------------------------- */

static bool conn_idle(const httpd_conn *c) {
    return c->st == CS_HEAD && c->in_n == 0 && !c->resp_started && !out_pending(c) && !c->app;
}

/* Close this thread's longest-idle connection: no request in progress, and either
 * kept alive after a response or silent since it connected for EVICT_AFTER_S (so a
 * burst of new connections does not evict itself before its requests arrive). */
static bool evictable(const httpd_conn *c, double now) {
    return conn_idle(c) && (c->served || now - c->t_idle >= EVICT_AFTER_S);
}

static bool evict_idle(io_thread *t) {
    httpd_conn *victim = NULL;
    const double now = ifd_now_s();
    for (httpd_conn *c = t->conns; c; c = c->next)
        if (evictable(c, now) && (!victim || c->t_idle < victim->t_idle)) victim = c;
    if (!victim) return false;
    atomic_fetch_add(&t->d->evicted, 1);
    conn_close(victim, HTTPD_DONE_CLOSED);
    return true;
}

static void kick(io_thread *t) {
    uint64_t one = 1;
    ssize_t r = write(t->wfd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is already non-zero, the thread will wake */
}

/* This thread has no idle connection to give up: ask one that has. The limit is
 * exceeded until that thread runs (microseconds), by at most the reserve. */
static bool evict_elsewhere(io_thread *self) {
    httpd *d = self->d;
    for (int k = 1; k < d->n_threads; k++) {
        io_thread *t = &d->threads[(int)((self - d->threads) + k) % d->n_threads];
        int avail = atomic_load(&t->n_evictable);
        while (avail > 0 && !atomic_compare_exchange_weak(&t->n_evictable, &avail, avail - 1)) {
        }
        if (avail > 0) {
            atomic_fetch_add(&t->evict_req, 1);
            kick(t);
            return true;
        }
    }
    return false;
}

static void listen_pause(io_thread *t, double until) {
    if (t->listening) epoll_ctl(t->ep, EPOLL_CTL_DEL, t->d->lfd, NULL);
    t->listening = false;
    t->listen_resume = until;
}

static void listen_resume(io_thread *t) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &t->tag_listen};
    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, t->d->lfd, &ev) == 0) t->listening = true;
}

static void client_text(const struct sockaddr_storage *ss, char *out, size_t n) {
    snprintf(out, n, "?");
    if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, out, (socklen_t)n);
    else if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) inet_ntop(AF_INET, &a->s6_addr[12], out, (socklen_t)n);
        else inet_ntop(AF_INET6, a, out, (socklen_t)n);
    }
}

static void accept_some(io_thread *t) {
    httpd *d = t->d;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(d->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                listen_pause(t, ifd_now_s() + 0.1);
            return;
        }
        atomic_fetch_add(&d->accepted, 1);
        int64_t n = atomic_fetch_add(&d->n_conns, 1) + 1;
        bool reserve = false;
        /* over the limit: idle connections make room (the reserve's too), this thread's
         * first, then another thread's (it closes one of its idle ones now: the count
         * is ahead of the open descriptors by those pending closes). Past limit +
         * reserve too: which thread accepts is the kernel's choice, and the idle
         * connections may all sit on other threads. */
        while (n > d->cfg.max_connections && evict_idle(t)) n--;
        while (n > d->cfg.max_connections && evict_elsewhere(t)) n--;
        if (n > d->cfg.max_connections) {
            if (n > (int64_t)d->cfg.max_connections + d->cfg.reserve_connections) {
                close(fd);
                atomic_fetch_sub(&d->n_conns, 1);
                atomic_fetch_add(&d->rejected, 1);
                continue;
            }
            reserve = true;
        }
        httpd_conn *c = calloc(1, sizeof *c);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (!c || epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev)) {
            free(c);
            close(fd);
            atomic_fetch_sub(&d->n_conns, 1);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->t = t;
        c->fd = fd;
        c->st = CS_HEAD;
        c->reserve = reserve;
        c->mask = ev.events;
        c->t_idle = ifd_now_s();
        client_text(&ss, c->client, sizeof c->client);
        c->next = t->conns;
        if (t->conns) t->conns->prev = c;
        t->conns = c;
    }
}

static void sweep(io_thread *t, double now) {
    httpd *d = t->d;
    const httpd_config *cf = &d->cfg;
    int n_evictable = 0;
    for (httpd_conn *c = t->conns, *next; c; c = next) {
        next = c->next;
        if (evictable(c, now)) n_evictable++;
        if (out_pending(c)) {
            double lim = c->st == CS_APP && !c->close_after ? cf->write_timeout_s : EARLY_WRITE_TIMEOUT_S;
            if (lim > 0 && now - c->t_write > lim) {
                atomic_fetch_add(&d->timeouts, 1);
                conn_close(c, HTTPD_DONE_CLOSED);
            }
            continue;
        }
        if (c->resp_started) continue;
        if (c->st == CS_HEAD) {
            if (c->in_n == 0 && c->t_first_byte == 0) {
                double lim = c->served ? cf->idle_timeout_s : cf->header_timeout_s;
                if (now - c->t_idle > lim) conn_close(c, HTTPD_DONE_CLOSED);
            } else if (now - (c->t_first_byte ? c->t_first_byte : c->t_idle) > cf->header_timeout_s) {
                atomic_fetch_add(&d->timeouts, 1);
                conn_error(c, 408, "timed out receiving the request head");
                conn_run(c);
            }
        } else if (c->st == CS_BODY) {
            if (now - c->t_body > cf->body_timeout_s) {
                atomic_fetch_add(&d->timeouts, 1);
                conn_error(c, 408, "timed out receiving the request body");
                conn_run(c);
            }
        } else if (c->st == CS_LINGER) {
            if (now - c->t_linger > LINGER_S) conn_close(c, HTTPD_DONE_OK);
        }
    }
    atomic_store(&t->n_evictable, n_evictable);
}

/* ---- wake-ups ------------------------------------------------------------------------ */

void httpd_wake(httpd_conn *c) {
    io_thread *t = c->t;
    bool want_kick = false;
    pthread_mutex_lock(&t->wmu);
    if (!c->wake_queued) {
        c->wake_queued = true;
        want_kick = t->wake_head == NULL;
        c->wake_next = t->wake_head;
        t->wake_head = c;
    }
    pthread_mutex_unlock(&t->wmu);
    if (want_kick) kick(t);
}

static void drain_wakes(io_thread *t) {
    httpd *d = t->d;
    uint64_t v;
    ssize_t r = read(t->wfd, &v, sizeof v);
    (void)r;
    for (int n = atomic_exchange(&t->evict_req, 0); n > 0 && evict_idle(t); n--) {
    }
    pthread_mutex_lock(&t->wmu);
    httpd_conn *list = t->wake_head;
    t->wake_head = NULL;
    pthread_mutex_unlock(&t->wmu);
    /* each stays marked queued (so httpd_wake leaves its link alone) until taken */
    for (httpd_conn *c = list, *next; c; c = next) {
        pthread_mutex_lock(&t->wmu);
        next = c->wake_next;
        c->wake_queued = false;
        pthread_mutex_unlock(&t->wmu);
        if (c->dead || !c->app) continue;
        if (d->h.on_wake) d->h.on_wake(d->app, c, c->user);
        if (!c->dead) conn_run(c);
    }
}

/* ---- threads and lifetime ------------------------------------------------------------- */

static void *io_main(void *arg) {
    io_thread *t = arg;
    httpd *d = t->d;
    struct epoll_event ev[64];
    double next_sweep = 0;
    while (!atomic_load(&d->stopping)) {
        int n = epoll_wait(t->ep, ev, 64, 100);
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &t->tag_listen) accept_some(t);
            else if (p == &t->tag_wake) drain_wakes(t);
            else {
                httpd_conn *c = p;
                if (!c->dead) conn_event(c, ev[i].events);
            }
        }
        const double now = ifd_now_s();
        if (!t->listening && now >= t->listen_resume) listen_resume(t);
        if (now >= next_sweep) {
            sweep(t, now);
            next_sweep = now + 0.1;
        }
        free_grave(t);
    }
    while (t->conns) conn_close(t->conns, HTTPD_DONE_SHUTDOWN);
    free_grave(t);
    return NULL;
}

static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int httpd_start(httpd **out, const httpd_config *cfg, const httpd_handlers *h, void *app,
                char *err, size_t eb) {
    *out = NULL;
    httpd *d = calloc(1, sizeof *d);
    if (!d) return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
    d->cfg = *cfg;
    d->h = *h;
    d->app = app;
    d->lfd = -1;
    d->max_body_total = cfg->max_body_total_bytes ? (int64_t)cfg->max_body_total_bytes : (int64_t)256 << 20;
    if (d->cfg.n_threads < 1) d->cfg.n_threads = 1;
    if (d->cfg.max_headers < 1) d->cfg.max_headers = 100;
    if (d->cfg.max_head_bytes < 256) d->cfg.max_head_bytes = 256;
    if (d->cfg.max_target_bytes < 16) d->cfg.max_target_bytes = 16;
    raise_fd_limit();

    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai) {
        free(d);
        return ifd_errf(err, eb, IFD_ERR_INVALID, "--host %s: %s", cfg->host, gai_strerror(gai));
    }
    int rc = IFD_OK;
    d->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (d->lfd < 0) {
        rc = ifd_errf(err, eb, IFD_ERR_IO, "socket: %s", strerror(errno));
        goto fail;
    }
    int one = 1, zero = 0;
    setsockopt(d->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6 && !strcmp(cfg->host, "::"))
        setsockopt(d->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(d->lfd, ai->ai_addr, ai->ai_addrlen) || listen(d->lfd, 4096)) {
        rc = ifd_errf(err, eb, IFD_ERR_IO, "cannot listen on %s port %d: %s", cfg->host, cfg->port,
                      strerror(errno));
        goto fail;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(d->lfd, (struct sockaddr *)&ss, &sl) == 0)
        d->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    freeaddrinfo(ai);
    ai = NULL;

    d->threads = calloc((size_t)d->cfg.n_threads, sizeof *d->threads);
    if (!d->threads) {
        rc = ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < d->cfg.n_threads; i++) {
        io_thread *t = &d->threads[i];
        t->d = d;
        t->ep = epoll_create1(EPOLL_CLOEXEC);
        t->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        pthread_mutex_init(&t->wmu, NULL);
        d->n_threads++;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &t->tag_wake};
        if (t->ep < 0 || t->wfd < 0 || epoll_ctl(t->ep, EPOLL_CTL_ADD, t->wfd, &ev)) {
            rc = ifd_errf(err, eb, IFD_ERR_IO, "epoll: %s", strerror(errno));
            goto fail;
        }
        listen_resume(t);
        if (!t->listening) {
            rc = ifd_errf(err, eb, IFD_ERR_IO, "epoll: %s", strerror(errno));
            goto fail;
        }
    }
    for (int i = 0; i < d->n_threads; i++) {
        if (pthread_create(&d->threads[i].th, NULL, io_main, &d->threads[i])) {
            rc = ifd_errf(err, eb, IFD_ERR_INTERNAL, "cannot start the HTTP threads");
            goto fail;
        }
        d->threads[i].started = true;
    }
    *out = d;
    return IFD_OK;
fail:
    if (ai) freeaddrinfo(ai);
    httpd_stop(d);
    return rc;
}

void httpd_stop(httpd *d) {
    if (!d) return;
    atomic_store(&d->stopping, true);
    for (int i = 0; i < d->n_threads; i++) {
        io_thread *t = &d->threads[i];
        if (t->wfd >= 0) {
            uint64_t one = 1;
            ssize_t r = write(t->wfd, &one, sizeof one);
            (void)r;
        }
    }
    for (int i = 0; i < d->n_threads; i++) {
        io_thread *t = &d->threads[i];
        if (t->started) pthread_join(t->th, NULL);
        if (t->ep >= 0) close(t->ep);
        if (t->wfd >= 0) close(t->wfd);
        pthread_mutex_destroy(&t->wmu);
    }
    free(d->threads);
    if (d->lfd >= 0) close(d->lfd);
    free(d);
}

int httpd_port(const httpd *d) { return d->port; }

void httpd_get_stats(const httpd *d, httpd_stats *st) {
    httpd *m = (httpd *)d;
    st->connections = atomic_load(&m->n_conns);
    st->accepted_total = atomic_load(&m->accepted);
    st->rejected_total = atomic_load(&m->rejected);
    st->evicted_total = atomic_load(&m->evicted);
    st->timeouts_total = atomic_load(&m->timeouts);
}
