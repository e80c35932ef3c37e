/* fuzz_httpd.c — libFuzzer target for the HTTP server (src/server/httpd.c): every
 * input is sent as raw bytes over a real loopback connection to an httpd running in
 * this process (started once), split into two writes at a point the input chooses,
 * then the client half-closes and reads until the server closes.
 *
 * The application is a stub that answers every request from its body (echoing its
 * length), answers some from the head (401 when an "X-Deny" header is present), and
 * streams a few chunks when the path is /stream (through httpd_wake from another
 * thread, like the engine does). Checked after each input: the server closed the
 * connection or answered, every request that reached on_head got exactly one on_done,
 * and the connection count is back to zero — a connection left behind is a leak.
 * ASan/UBSan catch the rest. Run: tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS fuzz_httpd */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/httpd.h"

static httpd *D;
static int PORT;
static _Atomic long HEADS, DONES;

typedef struct stub {
    httpd_conn *c;
    int left; /* stream chunks still to send */
    pthread_mutex_t mu;
    bool live;          /* between on_head and on_done */
    _Atomic int refs;   /* the connection's, and one per waker thread */
} stub;

static void stub_unref(stub *u) {
    if (atomic_fetch_sub(&u->refs, 1) == 1) {
        pthread_mutex_destroy(&u->mu);
        free(u);
    }
}

static void spawn_waker(stub *u);

static void on_head(void *app, httpd_conn *c, const httpd_request *rq) {
    (void)app;
    atomic_fetch_add(&HEADS, 1);
    stub *u = calloc(1, sizeof *u);
    if (!u) abort();
    u->c = c;
    pthread_mutex_init(&u->mu, NULL);
    u->live = true;
    u->refs = 1;
    httpd_set_user(c, u);
    if (httpd_header_get(rq, "X-Deny")) {
        static const httpd_header h[] = {{"Content-Type", "application/json"}};
        httpd_respond(c, 401, h, 1, "{}", 2);
    }
}

static void *waker(void *arg) {
    stub *u = arg;
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&u->mu);
    if (u->live) httpd_wake(u->c); /* like the engine: under the lock on_done takes */
    pthread_mutex_unlock(&u->mu);
    stub_unref(u);
    return NULL;
}

/* born detached: a pthread_detach after pthread_create touches a thread that may
 * already have ended (a 241k-input run crashed in pthread_detach under ASan) */
static void spawn_waker(stub *u) {
    pthread_t t;
    pthread_attr_t at;
    atomic_fetch_add(&u->refs, 1);
    int rc = pthread_attr_init(&at);
    if (rc == 0) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &at, waker, u);
        pthread_attr_destroy(&at);
    }
    if (rc) {
        stub_unref(u);
        httpd_stream_end(u->c);
    }
}

static void on_request(void *app, httpd_conn *c, const httpd_request *rq) {
    (void)app;
    stub *u = httpd_user(c);
    static const httpd_header h[] = {{"Content-Type", "text/plain"}};
    if (!strcmp(rq->path, "/stream")) {
        httpd_stream_start(c, 200, h, 1);
        u->left = 3;
        spawn_waker(u);
        return;
    }
    char b[64];
    int n = snprintf(b, sizeof b, "%zu %s", rq->body_bytes, rq->method);
    httpd_respond(c, 200, h, 1, b, (size_t)n);
}

static void on_wake(void *app, httpd_conn *c, void *user) {
    (void)app;
    stub *u = user;
    if (u->left <= 0) return;
    httpd_stream_write(c, "data: x\n\n", 9);
    if (--u->left == 0) httpd_stream_end(c);
    else spawn_waker(u);
}

static void on_done(void *app, httpd_conn *c, void *user, httpd_done why) {
    (void)app;
    (void)c;
    (void)why;
    stub *u = user;
    atomic_fetch_add(&DONES, 1);
    if (!u) return;
    pthread_mutex_lock(&u->mu);
    u->live = false; /* a waker still running sees it and does not wake */
    pthread_mutex_unlock(&u->mu);
    stub_unref(u);
}

static void error_body(void *app, const char *client, int status, const char *msg, sbuf *out) {
    (void)app;
    (void)client;
    sbuf_printf(out, "{\"error\":{\"status\":%d,\"message\":\"%s\"}}", status, msg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    httpd_config cfg = {.host = "127.0.0.1",
                        .port = 0,
                        .n_threads = 2,
                        .max_connections = 64,
                        .reserve_connections = 4,
                        .header_timeout_s = 0.5,
                        .body_timeout_s = 0.5,
                        .idle_timeout_s = 0.5,
                        .write_timeout_s = 2,
                        .max_head_bytes = 4096,
                        .max_target_bytes = 512,
                        .max_headers = 20,
                        .max_body_bytes = 8192,
                        .max_body_total_bytes = 1 << 20};
    httpd_handlers h = {.on_head = on_head, .on_request = on_request, .on_wake = on_wake,
                        .on_done = on_done, .error_body = error_body};
    char err[256];
    if (httpd_start(&D, &cfg, &h, NULL, err, sizeof err)) {
        fprintf(stderr, "fuzz_httpd: %s\n", err);
        abort();
    }
    PORT = httpd_port(D);
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* connect, where a signal may land in the middle (libFuzzer's -timeout alarm, each
 * second): the connection then goes on in the background, so wait for it to finish
 * instead of calling connect again. 0, or -1 with errno set. */
static int connect_eintr(int fd, const struct sockaddr *a, socklen_t len) {
    if (connect(fd, a, len) == 0) return 0;
    if (errno != EINTR) return -1;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int r = poll(&pf, 1, 5000);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = ETIMEDOUT;
            return -1;
        }
        int e = 0;
        socklen_t el = sizeof e;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el)) return -1;
        if (e) {
            errno = e;
            return -1;
        }
        return 0;
    }
}

/* every byte, through short writes and signals; a server that closed first ends it */
static void send_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        p += k;
        n -= (size_t)k;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    /* the client's address goes round 127.0.0.2 .. 127.0.0.251: every closed connection
     * holds its address pair in TIME_WAIT for a minute, and from one address the
     * ephemeral ports run out at some 28k connections (connect: EADDRNOTAVAIL), which
     * a fast machine reaches in 15 s */
    static uint32_t src_i;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002u + src_i++ % 250u)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)PORT),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof src) ||
        connect_eintr(fd, (struct sockaddr *)&a, sizeof a)) {
        fprintf(stderr, "fuzz_httpd: %s: %s\n", fd < 0 ? "socket" : "bind/connect", strerror(errno));
        abort();
    }
    size_t split = n ? data[0] % (n + 1) : 0;
    const uint8_t *p = n ? data + 1 : data;
    size_t m = n ? n - 1 : 0;
    if (split > m) split = m;
    send_all(fd, p, split);
    send_all(fd, p + split, m - split);
    shutdown(fd, SHUT_WR);
    /* read until the server closes; it must within its deadlines (0.5 s + linger) */
    const double t_end = now_s() + 5.0;
    char buf[4096];
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        double left = t_end - now_s();
        if (left <= 0) {
            fprintf(stderr, "fuzz_httpd: the server kept the connection open\n");
            abort();
        }
        if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0) continue;
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
    close(fd);
    /* every connection the server had is gone (it closes on our half-close / its
     * deadlines), and every request that reached the application was ended once */
    const double t_free = now_s() + 5.0;
    httpd_stats st;
    for (;;) {
        httpd_get_stats(D, &st);
        if (st.connections == 0 && atomic_load(&HEADS) == atomic_load(&DONES)) break;
        if (now_s() > t_free) {
            fprintf(stderr, "fuzz_httpd: %lld connections left, %ld heads vs %ld dones\n",
                    (long long)st.connections, atomic_load(&HEADS), atomic_load(&DONES));
            abort();
        }
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}
