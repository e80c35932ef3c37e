/* buf.h — a growable byte buffer and JSON string output (escaping with UTF-8 repair).
 *
 * Responses are written by hand into an sbuf (no cJSON on the output path): the
 * streaming path formats one chunk per engine step per request, and hand-written
 * output controls number formatting and UTF-8 repair. An allocation failure sets
 * `oom` and turns further writes into no-ops; callers check it once at the end.
 * Not thread-safe: one owner at a time. */
#ifndef INFERD_UTIL_BUF_H
#define INFERD_UTIL_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

typedef struct sbuf {
    char *p;    /* NUL-terminated when n > 0 or after sbuf_cstr */
    size_t n;   /* bytes used */
    size_t cap; /* bytes allocated */
    bool oom;
} sbuf;

void sbuf_free(sbuf *b);
void sbuf_reset(sbuf *b); /* n = 0, keeps the allocation */
bool sbuf_reserve(sbuf *b, size_t extra);
void sbuf_put(sbuf *b, const void *s, size_t n);
void sbuf_puts(sbuf *b, const char *s);
void sbuf_printf(sbuf *b, const char *fmt, ...) IFD_PRINTF(2, 3);
const char *sbuf_cstr(sbuf *b); /* "" when empty */
/* Take the bytes out: returns the malloc'ed buffer (caller frees) and resets b. */
char *sbuf_take(sbuf *b, size_t *n);

/* A JSON string literal (with quotes) of n bytes of text. Invalid UTF-8 is replaced
 * by U+FFFD, so the output is always valid JSON whatever the input. */
void sbuf_json_str(sbuf *b, const char *s, size_t n);
/* A JSON number; NaN and infinities (not JSON) become -9999.0 / +-1e38. */
void sbuf_json_num(sbuf *b, double v);

/* n random characters [0-9a-zA-Z] (getrandom), NUL-terminated: out holds n + 1. */
void rand_alnum(char *out, size_t n);

#endif
