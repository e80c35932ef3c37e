/* httpd.h — a small HTTP/1.1 server on epoll, written for a daemon that hostile
 * clients talk to: strict request parsing (one Content-Length, no obs-fold, no NUL, no
 * smuggling through Transfer-Encoding + Content-Length), deadlines for the head, the
 * body and idle keep-alive connections, a write-stall deadline for responses, a
 * connection limit with a reserve for health checks and eviction of idle connections,
 * closed connections freed at once whatever state their request is in, and every
 * error it makes itself answered through the application's error formatter.
 *
 * What it does not do: routing, authentication, TLS, HTTP/2, compression. It knows
 * nothing of OpenAI; server/http.c is its one application.
 *
 * Threads. httpd_start starts n_threads I/O threads; each owns an epoll set and the
 * connections it accepted (all of them share the listening socket). Every callback
 * runs on the I/O thread that owns the connection, and every function below that
 * takes an httpd_conn must be called from there, inside a callback — except
 * httpd_wake, which any thread may call while the application holds the request
 * (from on_head until on_done returns). Callbacks must not block for long: they hold
 * up the other connections of their thread.
 *
 * One request's life, as the application sees it:
 *   on_head     the head is parsed (method, target, headers, the body's length known
 *               or chunked). The application may answer at once (an early 401/404/413:
 *               the body is then not read and the connection closes after the answer)
 *               or return to have the body read.
 *   on_request  the whole body is in. Answer now (httpd_respond), start a stream
 *               (httpd_stream_start), or keep the request and answer later from
 *               on_wake after another thread calls httpd_wake.
 *   on_wake     after httpd_wake, or when a stream's output has drained.
 *   on_done     exactly once for every request that reached on_head: the response was
 *               sent (HTTPD_DONE_OK), or the connection went away first (client closed
 *               or reset, a deadline passed, I/O error: HTTPD_DONE_CLOSED), or the
 *               server is stopping (HTTPD_DONE_SHUTDOWN). No httpd_wake after it. */
#ifndef INFERD_SERVER_HTTPD_H
#define INFERD_SERVER_HTTPD_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

typedef struct httpd httpd;
typedef struct httpd_conn httpd_conn;

typedef struct httpd_header {
    const char *name;
    const char *value; /* leading/trailing whitespace removed */
} httpd_header;

typedef struct httpd_request {
    const char *method;  /* as sent (a token) */
    const char *target;  /* request-target as sent: path and query */
    const char *path;    /* target up to '?' */
    int version_minor;   /* HTTP/1.0 or HTTP/1.1 */
    bool is_head;        /* method HEAD: the response has no body */
    const httpd_header *headers;
    int n_headers;
    int64_t content_length; /* -1: chunked */
    const char *body;       /* NUL-terminated (on_request only; NULL in on_head) */
    size_t body_bytes;
    const char *client;     /* peer address, text */
    bool reserve;           /* came in over the connection limit (see httpd_config) */
} httpd_request;

/* First header of that name (case-insensitive), or NULL. */
const char *httpd_header_get(const httpd_request *rq, const char *name);

typedef enum httpd_done {
    HTTPD_DONE_OK = 0,
    HTTPD_DONE_CLOSED = 1,
    HTTPD_DONE_SHUTDOWN = 2,
} httpd_done;

typedef struct httpd_handlers {
    void (*on_head)(void *app, httpd_conn *c, const httpd_request *rq);
    void (*on_request)(void *app, httpd_conn *c, const httpd_request *rq);
    void (*on_wake)(void *app, httpd_conn *c, void *user);
    void (*on_done)(void *app, httpd_conn *c, void *user, httpd_done why);
    /* Errors the server makes itself (malformed requests, limits, deadlines): write
     * the body (JSON) into out. Also the place to count and log them. */
    void (*error_body)(void *app, const char *client, int status, const char *message, sbuf *out);
} httpd_handlers;

typedef struct httpd_config {
    const char *host;          /* numeric or name; "::" is dual-stack */
    int port;
    int n_threads;             /* I/O threads */
    int max_connections;       /* served connections */
    int reserve_connections;   /* more, over the limit, that only see rq->reserve */
    double header_timeout_s;   /* from a request's first byte to the end of its head */
    double body_timeout_s;     /* from the end of the head to the end of the body */
    double idle_timeout_s;     /* keep-alive: from a response's end to the next first byte */
    double write_timeout_s;    /* a response whose client reads nothing this long; 0: never */
    size_t max_head_bytes;     /* request line + headers; 431 above */
    size_t max_target_bytes;   /* 414 above */
    int max_headers;           /* 431 above */
    size_t max_body_bytes;     /* 413 above */
    size_t max_body_total_bytes; /* bodies being received, all connections; 503 above (0: 256M) */
} httpd_config;

/* Binds, listens and starts the threads. 0, or a status with a message in err. */
int httpd_start(httpd **out, const httpd_config *cfg, const httpd_handlers *h, void *app,
                char *err, size_t err_bytes);
/* Stops accepting, closes every connection (on_done SHUTDOWN for the requests the
 * application holds), joins the threads, frees. Accepts NULL. Main thread. */
void httpd_stop(httpd *d);
/* The bound port (for port 0). */
int httpd_port(const httpd *d);

typedef struct httpd_stats {
    int64_t connections;      /* open now */
    int64_t accepted_total;
    int64_t rejected_total;   /* closed at accept: over max + reserve */
    int64_t evicted_total;    /* idle connections closed to make room */
    int64_t timeouts_total;   /* head, body, idle-with-partial-request and write deadlines */
} httpd_stats;
void httpd_get_stats(const httpd *d, httpd_stats *st); /* any thread */

/* ---- inside callbacks, on the connection's thread ------------------------------- */

void httpd_set_user(httpd_conn *c, void *user);
void *httpd_user(const httpd_conn *c);
/* Drop the connection once the callback returns (the request ends CLOSED). */
void httpd_abort(httpd_conn *c);
/* A whole response. headers: extra ones (Content-Type, ...); Content-Length and
 * Connection are added here. The body is copied; for HEAD it is not sent. 0, or -1
 * when a response was already started. */
int httpd_respond(httpd_conn *c, int status, const httpd_header *headers, int n_headers,
                  const char *body, size_t body_bytes);
/* A streamed response: chunked on HTTP/1.1, delimited by closing on HTTP/1.0. */
int httpd_stream_start(httpd_conn *c, int status, const httpd_header *headers, int n_headers);
int httpd_stream_write(httpd_conn *c, const char *data, size_t n);
int httpd_stream_end(httpd_conn *c);
/* Bytes queued and not yet written to the socket. */
size_t httpd_pending(const httpd_conn *c);
/* Close after this response even if the client wanted to keep the connection. */
void httpd_close_after(httpd_conn *c);

/* ---- any thread -------------------------------------------------------------------- */

/* Have on_wake called soon on the connection's thread. Only while the application
 * holds the request (on_head .. on_done); cheap and idempotent. */
void httpd_wake(httpd_conn *c);

#endif
