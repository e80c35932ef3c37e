/* test_httpd_parse.c — the HTTP/1.1 head and chunk-size parsers (src/server/httpd_parse.c):
 * what a valid head yields (method, target, path, version, headers, framing,
 * keep-alive, 100-continue), the status every malformed or ambiguous head gets
 * (smuggling: conflicting Content-Length, Transfer-Encoding with Content-Length or in
 * HTTP/1.0; obs-fold; control bytes; 414/431/501/505/417), and chunk-size lines. The
 * end-to-end behaviour over sockets is tests/python/test_server_http.py. */
#include <stdint.h>
#include <string.h>

#include "server/httpd_parse.h"
#include "test_util.h"

#define MAX_HDRS 8
#define MAX_TARGET 64

typedef struct parsed {
    char head[512], path[512];
    httpd_header hdrs[MAX_HDRS];
    httpd_head_info h;
    const char *msg;
    int st;
} parsed;

static parsed P;

static int parse(const char *text) {
    size_t n = strlen(text);
    memset(&P, 0, sizeof P);
    memcpy(P.head, text, n + 1);
    P.st = httpd_parse_head(P.head, n, P.path, P.hdrs, MAX_TARGET, MAX_HDRS, &P.h, &P.msg);
    return P.st;
}

static void test_valid_heads(void) {
    CHECK(parse("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Two:  b c \t\r\n\r\n") == 0);
    CHECK(!strcmp(P.h.rq.method, "GET") && !strcmp(P.h.rq.target, "/v1/models?x=1"));
    CHECK(!strcmp(P.h.rq.path, "/v1/models") && P.h.rq.version_minor == 1 && !P.h.rq.is_head);
    CHECK(P.h.rq.n_headers == 2 && !strcmp(P.hdrs[1].name, "X-Two") && !strcmp(P.hdrs[1].value, "b c"));
    CHECK(P.h.keep_alive && !P.h.chunked && P.h.rq.content_length == 0 && !P.h.expect_100);
    CHECK(!strcmp(httpd_header_get(&P.h.rq, "x-two"), "b c") && !httpd_header_get(&P.h.rq, "nope"));

    /* bare LF line ends; HTTP/1.0 closes unless keep-alive; HEAD */
    CHECK(parse("HEAD / HTTP/1.0\nConnection: Keep-Alive\n\n") == 0);
    CHECK(P.h.rq.is_head && P.h.rq.version_minor == 0 && P.h.keep_alive);
    CHECK(parse("GET / HTTP/1.0\r\n\r\n") == 0 && !P.h.keep_alive);
    CHECK(parse("GET / HTTP/1.1\r\nConnection: upgrade, close\r\n\r\n") == 0 && !P.h.keep_alive);

    /* framing: one Content-Length (repeats of the same value are fine), or chunked */
    CHECK(parse("POST /x HTTP/1.1\r\nContent-Length: 12\r\ncontent-length: 12\r\n\r\n") == 0);
    CHECK(P.h.rq.content_length == 12 && !P.h.chunked);
    CHECK(parse("POST /x HTTP/1.1\r\nTransfer-Encoding: Chunked\r\nExpect: 100-continue\r\n\r\n") == 0);
    CHECK(P.h.chunked && P.h.rq.content_length == -1 && P.h.expect_100);
    CHECK(parse("GET /x HTTP/1.1\r\nExpect: 100-continue\r\n\r\n") == 0 && !P.h.expect_100); /* no body */

    /* absolute-form targets are reduced to their path */
    CHECK(parse("GET http://example.com:8000/health?a HTTP/1.1\r\n\r\n") == 0 && !strcmp(P.h.rq.path, "/health"));
    CHECK(parse("GET https://example.com HTTP/1.1\r\n\r\n") == 0 && !strcmp(P.h.rq.path, "/"));
    /* HTTP/1.x beyond 1.1 is served as 1.1 */
    CHECK(parse("GET / HTTP/1.7\r\n\r\n") == 0 && P.h.rq.version_minor == 1);
}

static void test_bad_heads(void) {
    static const struct {
        const char *head;
        int status;
    } cases[] = {
        {"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400},
        {"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX: 1\r\n continued\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX : 1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n: 1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX: a\x01" "b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417},
        {"GET  / HTTP/1.1\r\n\r\n", 400},
        {"GET /\r\n\r\n", 400},
        {"GET / HTTP/1.1 extra\r\n\r\n", 400},
        {"G(T / HTTP/1.1\r\n\r\n", 400},
        {"GET /a\x80 HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"GET / HTTP/0.9\r\n\r\n", 505},
        {"GET / HTTP/1.10\r\n\r\n", 400},
        {"GET / http/1.1\r\n\r\n", 400},
        {"GET /" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n\r\n", 414},
        {"GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\nI: 1\r\n\r\n", 431},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = parse(cases[i].head);
        CHECKF(st == cases[i].status && P.msg && *P.msg, "case %zu: %d (%s), want %d", i, st,
               P.msg ? P.msg : "-", cases[i].status);
    }
    /* a NUL inside a header value (the head is split at NULs by nobody else) */
    static const char nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
    memset(&P, 0, sizeof P);
    memcpy(P.head, nul, sizeof nul);
    CHECK(httpd_parse_head(P.head, sizeof nul - 1, P.path, P.hdrs, MAX_TARGET, MAX_HDRS, &P.h, &P.msg) == 400);
}

static void test_chunk_sizes(void) {
    static const struct {
        const char *line;
        size_t room;
        int status;
        uint64_t v;
    } cases[] = {
        {"0", 10, 0, 0},
        {"a", 10, 0, 10},
        {"A;name=value", 10, 0, 10},
        {"00000000000000F", 100, 0, 15},
        {"b", 10, 413, 0},
        {"10000000000000000", 1000, 413, 0}, /* 17 hex digits */
        {"fffffffffffffff", (size_t)-1, 0, 0xfffffffffffffffull},
        {"", 10, 400, 0},
        {"x", 10, 400, 0},
        {"-1", 10, 400, 0},
        {"1x", 10, 400, 0},
        {"1;a\x01", 10, 400, 0},
        {"1 ", 10, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = 12345;
        const char *msg = NULL;
        int st = httpd_parse_chunk_size(cases[i].line, strlen(cases[i].line), cases[i].room, &v, &msg);
        CHECKF(st == cases[i].status, "case %zu ('%s'): %d, want %d", i, cases[i].line, st, cases[i].status);
        if (st == 0) CHECKF(v == cases[i].v, "case %zu: %llu", i, (unsigned long long)v);
        else CHECK(msg && *msg);
    }
}

static void test_reasons_and_tchars(void) {
    CHECK(!strcmp(httpd_reason(431), "Request Header Fields Too Large"));
    CHECK(!strcmp(httpd_reason(505), "HTTP Version Not Supported"));
    CHECK(httpd_reason(299) && httpd_reason(599));
    int n = 0;
    for (int ch = 0; ch < 256; ch++) n += httpd_is_tchar((unsigned char)ch);
    CHECK(n == 26 * 2 + 10 + 15); /* ALPHA, DIGIT and !#$%&'*+-.^_`|~ */
    CHECK(!httpd_is_tchar(0) && !httpd_is_tchar(' ') && !httpd_is_tchar(':') && !httpd_is_tchar(0x80));
}

TEST_MAIN(T(test_valid_heads), T(test_bad_heads), T(test_chunk_sizes), T(test_reasons_and_tchars))
