/* httpd_parse.c — the pure parts of HTTP/1.1 request parsing (RFC 9110/9112) for
 * httpd.c: the request line and header fields of a complete head, the framing they
 * imply (one Content-Length, or chunked; nothing ambiguous), and chunk-size lines.
 * No I/O, no allocation, no state: any thread. Strict where leniency lets a proxy and
 * this server disagree about where a request ends (request smuggling): conflicting
 * or malformed Content-Length, Transfer-Encoding with Content-Length or in HTTP/1.0,
 * obs-fold, control bytes. */
#define _GNU_SOURCE
#include "httpd_parse.h"

#include <string.h>
#include <strings.h>

bool httpd_is_tchar(unsigned char ch) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) return true;
    return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

const char *httpd_reason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

/* Trim spaces and tabs around s (in place). */
static char *trim_ows(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    return s;
}

/* Does the comma-separated list v hold token tok (case-insensitive)? */
static bool list_has(const char *v, const char *tok) {
    const size_t k = strlen(tok);
    for (const char *p = v; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *f = e;
        while (f > p && (f[-1] == ' ' || f[-1] == '\t')) f--;
        if ((size_t)(f - p) == k && !strncasecmp(p, tok, k)) return true;
        p = e;
    }
    return false;
}

int httpd_parse_head(char *head, size_t len, char *path, httpd_header *hdrs, size_t max_target,
                     int max_headers, httpd_head_info *out, const char **msg) {
    httpd_request *rq = &out->rq;
    memset(out, 0, sizeof *out);
    char *p = head, *end = head + len;
    int n_lines = 0;
    bool have_cl = false, have_te = false, have_host = false, expect_100 = false;
    char *conn_hdr = NULL;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break; /* cannot happen: the head ends with a newline */
        char *line = p;
        size_t n = (size_t)(nl - p);
        p = nl + 1;
        if (n && line[n - 1] == '\r') n--;
        line[n] = 0;
        if (memchr(line, '\r', n)) return *msg = "stray CR in the request head", 400;
        if (n_lines++ == 0) {
            /* request-line = method SP request-target SP HTTP-version */
            char *sp1 = strchr(line, ' ');
            if (!sp1) return *msg = "malformed request line", 400;
            *sp1 = 0;
            char *target = sp1 + 1;
            char *sp2 = strchr(target, ' ');
            if (!sp2) return *msg = "malformed request line", 400;
            *sp2 = 0;
            char *version = sp2 + 1;
            if (!*line || !*target) return *msg = "malformed request line", 400;
            for (char *q = line; *q; q++)
                if (!httpd_is_tchar((unsigned char)*q)) return *msg = "malformed request method", 400;
            size_t tn = strlen(target);
            if (tn > max_target) return *msg = "request target too long", 414;
            for (char *q = target; *q; q++)
                if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
                    return *msg = "malformed request target", 400;
            if (strncmp(version, "HTTP/", 5) || !(version[5] >= '0' && version[5] <= '9') ||
                version[6] != '.' || !(version[7] >= '0' && version[7] <= '9') || version[8])
                return *msg = "malformed HTTP version", 400;
            if (version[5] != '1') return *msg = "only HTTP/1.0 and HTTP/1.1 are supported", 505;
            rq->version_minor = version[7] == '0' ? 0 : 1;
            rq->method = line;
            rq->target = target;
            continue;
        }
        if (n == 0) break; /* the empty line ending the head */
        if (line[0] == ' ' || line[0] == '\t') return *msg = "obsolete header line folding", 400;
        char *colon = strchr(line, ':');
        if (!colon || colon == line) return *msg = "malformed header line", 400;
        for (char *q = line; q < colon; q++)
            if (!httpd_is_tchar((unsigned char)*q)) return *msg = "malformed header name", 400;
        *colon = 0;
        char *value = colon + 1;
        for (char *q = value; *q; q++) {
            unsigned char ch = (unsigned char)*q;
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return *msg = "control character in a header value", 400;
        }
        if ((size_t)(line + n - value) != strlen(value)) return *msg = "NUL in a header", 400;
        value = trim_ows(value);
        if (rq->n_headers >= max_headers) return *msg = "too many header fields", 431;
        hdrs[rq->n_headers++] = (httpd_header){line, value};
        if (!strcasecmp(line, "Content-Length")) {
            if (!*value || strlen(value) > 18) return *msg = "invalid Content-Length", 400;
            int64_t v = 0;
            for (const char *q = value; *q; q++) {
                if (*q < '0' || *q > '9') return *msg = "invalid Content-Length", 400;
                v = v * 10 + (*q - '0');
            }
            if (have_cl && v != rq->content_length) return *msg = "conflicting Content-Length headers", 400;
            have_cl = true;
            rq->content_length = v;
        } else if (!strcasecmp(line, "Transfer-Encoding")) {
            if (have_te) return *msg = "more than one Transfer-Encoding header", 400;
            have_te = true;
            if (strcasecmp(value, "chunked")) return *msg = "unsupported transfer coding (only chunked)", 501;
            out->chunked = true;
        } else if (!strcasecmp(line, "Host")) {
            if (have_host) return *msg = "more than one Host header", 400;
            have_host = true;
        } else if (!strcasecmp(line, "Connection")) {
            conn_hdr = value;
        } else if (!strcasecmp(line, "Expect")) {
            if (strcasecmp(value, "100-continue")) return *msg = "unsupported expectation", 417;
            expect_100 = true;
        }
    }
    if (have_te && have_cl) return *msg = "both Transfer-Encoding and Content-Length", 400;
    if (have_te && rq->version_minor == 0) return *msg = "Transfer-Encoding in an HTTP/1.0 request", 400;
    if (out->chunked) rq->content_length = -1;
    out->keep_alive = rq->version_minor >= 1 ? !(conn_hdr && list_has(conn_hdr, "close"))
                                             : (conn_hdr && list_has(conn_hdr, "keep-alive"));
    /* path: the target up to '?'; absolute-form ("http://host/path") reduced to its path */
    const char *t = rq->target;
    if (!strncasecmp(t, "http://", 7) || !strncasecmp(t, "https://", 8)) {
        const char *q = strchr(t + (t[4] == ':' ? 7 : 8), '/');
        t = q ? q : "/";
    }
    size_t k = strcspn(t, "?");
    memcpy(path, t, k);
    path[k] = 0;
    rq->path = path;
    rq->is_head = !strcmp(rq->method, "HEAD");
    rq->headers = hdrs;
    out->expect_100 = expect_100 && rq->version_minor >= 1 && rq->content_length != 0;
    return 0;
}


int httpd_parse_chunk_size(const char *line, size_t n, size_t room, uint64_t *out, const char **msg) {
    uint64_t v = 0;
    size_t j = 0;
    for (; j < n; j++) {
        char ch = line[j];
        int dv = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (dv < 0) break;
        if (j >= 15) return *msg = "request body too large", 413;
        v = v * 16 + (uint64_t)dv;
    }
    if (j == 0 || (j < n && line[j] != ';' && line[j] != ' ' && line[j] != '\t'))
        return *msg = "malformed chunk size", 400;
    for (size_t q = j; q < n; q++)
        if ((unsigned char)line[q] < 0x20 && line[q] != '\t') return *msg = "malformed chunk extension", 400;
    if (v > room) return *msg = "request body too large", 413;
    *out = v;
    return 0;
}
