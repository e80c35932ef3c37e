/* buf.c — growable byte buffer, JSON string escaping with UTF-8 repair. Any thread
 * (one owner per buffer). */
#include "buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

void sbuf_free(sbuf *b) {
    if (!b) return;
    free(b->p);
    memset(b, 0, sizeof *b);
}

void sbuf_reset(sbuf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

bool sbuf_reserve(sbuf *b, size_t extra) {
    if (b->oom) return false;
    size_t need;
    if (!ifd_add_ok(b->n, extra + 1, &need)) {
        b->oom = true;
        return false;
    }
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void sbuf_put(sbuf *b, const void *s, size_t n) {
    if (!sbuf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sbuf_puts(sbuf *b, const char *s) { sbuf_put(b, s, strlen(s)); }

void sbuf_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        sbuf_put(b, tmp, (size_t)k);
        return;
    }
    if (!sbuf_reserve(b, (size_t)k)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

const char *sbuf_cstr(sbuf *b) { return b->p && !b->oom ? b->p : ""; }

char *sbuf_take(sbuf *b, size_t *n) {
    char *p = b->p;
    if (n) *n = b->n;
    if (!p) p = calloc(1, 1);
    memset(b, 0, sizeof *b);
    return p;
}

void sbuf_json_str(sbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (!sbuf_reserve(b, n + 2)) return;
    sbuf_put(b, "\"", 1);
    size_t run = 0; /* start of a run of bytes copied verbatim */
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[6];
        size_t k = 1;
        if (c >= 0x80) {
            k = utf8_char_len((const unsigned char *)s + i, n - i);
            if (k) {
                i += k;
                continue;
            }
            esc = "\xEF\xBF\xBD"; /* U+FFFD for one invalid byte */
            k = 1;
        } else if (c == '"') {
            esc = "\\\"";
        } else if (c == '\\') {
            esc = "\\\\";
        } else if (c == '\n') {
            esc = "\\n";
        } else if (c == '\r') {
            esc = "\\r";
        } else if (c == '\t') {
            esc = "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            ubuf[0] = '\\', ubuf[1] = 'u', ubuf[2] = '0', ubuf[3] = '0';
            ubuf[4] = hex[c >> 4], ubuf[5] = hex[c & 15];
            sbuf_put(b, s + run, i - run);
            sbuf_put(b, ubuf, 6);
            i += 1;
            run = i;
            continue;
        } else {
            i++;
            continue;
        }
        sbuf_put(b, s + run, i - run);
        sbuf_puts(b, esc);
        i += k;
        run = i;
    }
    sbuf_put(b, s + run, n - run);
    sbuf_put(b, "\"", 1);
}

void sbuf_json_num(sbuf *b, double v) {
    if (isnan(v) || (isinf(v) && v < 0)) v = -9999.0;
    else if (isinf(v)) v = 1e38;
    char tmp[40];
    int k = snprintf(tmp, sizeof tmp, "%.9g", v);
    /* %g may print "1e+10": valid JSON. Never prints inf/nan here. */
    sbuf_put(b, tmp, (size_t)k);
}

#include <sys/random.h>

void rand_alnum(char *out, size_t n) {
    static const char AL[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    unsigned char r[64];
    size_t k = 0;
    while (k < n) {
        size_t want = IFD_MIN(n - k, sizeof r);
        ssize_t got = getrandom(r, want, 0);
        if (got <= 0) { /* cannot happen on Linux >= 3.17; fall back to the clock */
            uint64_t x = (uint64_t)(ifd_now_s() * 1e9) ^ (uint64_t)(uintptr_t)out;
            for (size_t i = 0; i < want; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
                r[i] = (unsigned char)(x >> 33);
            got = (ssize_t)want;
        }
        for (ssize_t i = 0; i < got; i++) out[k++] = AL[r[i] % 62];
    }
    out[n] = 0;
}
