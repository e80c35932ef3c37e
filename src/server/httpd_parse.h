/* httpd_parse.h — pure HTTP/1.1 request parsing for httpd.c (see httpd_parse.c).
 * Every function returns 0 or the HTTP status to answer with (400, 413, 414, 417,
 * 431, 501, 505) and points *msg at a static message. */
#ifndef INFERD_SERVER_HTTPD_PARSE_H
#define INFERD_SERVER_HTTPD_PARSE_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "httpd.h"

/* A token character (RFC 9110 5.6.2): methods and header names. */
bool httpd_is_tchar(unsigned char ch);
/* The reason phrase of a status. */
const char *httpd_reason(int status);

typedef struct httpd_head_info {
    httpd_request rq;  /* method, target, path, version_minor, is_head, headers, n_headers,
                        * content_length (-1: chunked); the other fields zero */
    bool keep_alive;   /* HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with keep-alive */
    bool chunked;
    bool expect_100;   /* Expect: 100-continue on HTTP/1.1 with a body */
} httpd_head_info;

/* Parse a complete head: head[0..len) ends with an empty line and is NUL-terminated at
 * len; it is split in place (the strings in *out point into it). path receives the
 * target's path (up to '?'; absolute-form reduced to it) and needs len + 1 bytes.
 * hdrs holds max_headers entries. */
int httpd_parse_head(char *head, size_t len, char *path, httpd_header *hdrs, size_t max_target,
                     int max_headers, httpd_head_info *out, const char **msg);

/* A chunk-size line (without its line end): hex digits, then an optional extension.
 * room: the body bytes still allowed (413 above). */
int httpd_parse_chunk_size(const char *line, size_t n, size_t room, uint64_t *out, const char **msg);

#endif
