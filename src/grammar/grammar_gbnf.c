/* grammar_gbnf.c — llama.cpp's GBNF grammar format into the IR.
 *
 *   root  ::= item ("," ws item)*        # rules; the start rule is `root`
 *   item  ::= "lit\n" | [a-z0-9_] | [^"\\] | . | name | ( group ) | x* x+ x? x{2} x{2,} x{2,5} x{,5}
 *
 * Names are [A-Za-z0-9_-]+; literals and classes are code points (written as UTF-8 or
 * as \xHH \uHHHH \UHHHHHHHH escapes, plus \n \r \t \\ \" \' \[ \] \-), encoded as UTF-8
 * bytes; "." is any code point. A rule ends at a newline unless inside parentheses or
 * right after "|". Errors give the byte offset. Any thread. */
#include "grammar_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

typedef struct gp {
    const char *s;
    size_t n, i;
    gram_builder *b;
    char *err;
    size_t err_bytes;
    int depth;
    bool failed;
} gp;

static int gp_fail(gp *p, const char *what) {
    if (!p->failed) {
        ifd_errf(p->err, p->err_bytes, -1, "grammar: %s at byte %zu", what, p->i);
        p->failed = true;
    }
    return -1;
}

static bool is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void skip_space(gp *p, bool newline_ok) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') p->i++;
        } else {
            break;
        }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One code point of a literal or class at p->i (escapes decoded); -1 on error. */
static int64_t read_char(gp *p) {
    if (p->i >= p->n) return gp_fail(p, "unexpected end");
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        if (++p->i >= p->n) return gp_fail(p, "unexpected end after \\");
        char e = p->s[p->i++];
        int nd = 0;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': return (unsigned char)e;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        default: p->i--; return gp_fail(p, "unknown escape");
        }
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
            if (h < 0) return gp_fail(p, "bad hex escape");
            v = v << 4 | (uint32_t)h;
            p->i++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return gp_fail(p, "escape is not a Unicode scalar value");
        return v;
    }
    uint32_t cp;
    size_t len = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, &cp);
    if (len == 0) return gp_fail(p, "invalid UTF-8");
    p->i += len;
    return cp;
}

static gsym parse_alternates(gp *p, int32_t rule);

static gsym parse_literal(gp *p) {
    p->i++; /* the quote */
    char buf[4096];
    size_t n = 0;
    gsym out;
    char *big = NULL;
    size_t cap = sizeof buf;
    char *w = buf;
    while (p->i < p->n && p->s[p->i] != '"') {
        int64_t cp = read_char(p);
        if (cp < 0) {
            free(big);
            return -1;
        }
        if (n + 4 > cap) {
            size_t nc = cap * 2;
            char *q = realloc(big, nc);
            if (!q) {
                free(big);
                return gp_fail(p, "out of memory");
            }
            if (!big) memcpy(q, buf, n);
            big = q;
            w = big;
            cap = nc;
        }
        n += utf8_encode((uint32_t)cp, (unsigned char *)w + n);
    }
    if (p->i >= p->n) {
        free(big);
        return gp_fail(p, "unterminated literal");
    }
    p->i++;
    out = gb_literal(p->b, w, n);
    free(big);
    return out;
}

static gsym parse_class(gp *p) {
    p->i++; /* [ */
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    uint32_t (*r)[2] = NULL;
    int32_t n = 0, cap = 0;
    while (p->i < p->n && p->s[p->i] != ']') {
        int64_t lo = read_char(p), hi;
        if (lo < 0) goto fail;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = read_char(p);
            if (hi < 0) goto fail;
            if (hi < lo) {
                gp_fail(p, "class range out of order");
                goto fail;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            void *q = realloc(r, sizeof *r * (size_t)cap);
            if (!q) {
                gp_fail(p, "out of memory");
                goto fail;
            }
            r = q;
        }
        r[n][0] = (uint32_t)lo;
        r[n][1] = (uint32_t)hi;
        n++;
    }
    if (p->i >= p->n) {
        gp_fail(p, "unterminated character class");
        goto fail;
    }
    p->i++;
    gsym g = gb_codepoints(p->b, (const uint32_t(*)[2])r, n, neg);
    free(r);
    return g;
fail:
    free(r);
    return -1;
}

static int parse_int(gp *p, int32_t *out) {
    size_t st = p->i;
    int64_t v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > GRAM_MAX_REPEAT) return gp_fail(p, "repetition count too large");
    }
    if (p->i == st) return 1; /* none */
    *out = (int32_t)v;
    return 0;
}

/* A sequence of items (one alternative) into syms; ends at | ) newline or end. */
static int parse_sequence(gp *p, gsym **syms, int32_t *n, int32_t *cap) {
    *n = 0;
    for (;;) {
        skip_space(p, p->depth > 0);
        if (p->i >= p->n) break;
        char c = p->s[p->i];
        gsym item;
        if (c == '"') {
            item = parse_literal(p);
        } else if (c == '[') {
            item = parse_class(p);
        } else if (c == '.') {
            p->i++;
            item = gb_codepoints(p->b, NULL, 0, true);
        } else if (c == '(') {
            p->i++;
            if (++p->depth > 64) return gp_fail(p, "groups nested too deeply");
            int32_t g = gb_rule(p->b, NULL, 0);
            if (g < 0 || parse_alternates(p, g) < 0) return -1;
            skip_space(p, true);
            if (p->i >= p->n || p->s[p->i] != ')') return gp_fail(p, "expected ')'");
            p->i++;
            p->depth--;
            item = g;
        } else if (is_name(c)) {
            size_t st = p->i;
            while (p->i < p->n && is_name(p->s[p->i])) p->i++;
            const size_t nl = p->i - st;
            skip_space(p, false);
            if (p->i + 2 < p->n && !memcmp(p->s + p->i, "::=", 3)) { /* the next rule begins */
                p->i = st;
                break;
            }
            item = gb_find(p->b, p->s + st, nl);
            if (item < 0) item = gb_rule(p->b, p->s + st, nl);
        } else {
            break;
        }
        if (item == -1 && (p->failed || gb_error(p->b))) return gp_fail(p, gb_error(p->b) ? gb_error(p->b) : "error");
        /* postfix operators */
        for (;;) {
            skip_space(p, p->depth > 0);
            if (p->i >= p->n) break;
            char o = p->s[p->i];
            int32_t lo, hi;
            if (o == '*') lo = 0, hi = -1;
            else if (o == '+') lo = 1, hi = -1;
            else if (o == '?') lo = 0, hi = 1;
            else if (o == '{') {
                p->i++;
                skip_space(p, false);
                lo = 0;
                int rc = parse_int(p, &lo);
                if (rc < 0) return -1;
                skip_space(p, false);
                hi = lo;
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    skip_space(p, false);
                    hi = -1;
                    if (parse_int(p, &hi) < 0) return -1;
                    skip_space(p, false);
                } else if (rc) {
                    return gp_fail(p, "expected a number in {}");
                }
                if (p->i >= p->n || p->s[p->i] != '}') return gp_fail(p, "expected '}'");
                if (hi >= 0 && hi < lo) return gp_fail(p, "repetition {m,n} with n < m");
            } else {
                break;
            }
            p->i++;
            item = gb_repeat(p->b, item, lo, hi);
            if (item < 0) return gp_fail(p, gb_error(p->b) ? gb_error(p->b) : "bad repetition");
        }
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 16;
            void *q = realloc(*syms, sizeof **syms * (size_t)*cap);
            if (!q) return gp_fail(p, "out of memory");
            *syms = q;
        }
        (*syms)[(*n)++] = item;
    }
    return 0;
}

static gsym parse_alternates(gp *p, int32_t rule) {
    gsym *syms = NULL;
    int32_t n = 0, cap = 0;
    for (;;) {
        if (parse_sequence(p, &syms, &n, &cap) < 0) break;
        if (gb_alt(p->b, rule, syms, n)) {
            gp_fail(p, gb_error(p->b));
            break;
        }
        skip_space(p, p->depth > 0);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            skip_space(p, true);
            continue;
        }
        free(syms);
        return rule;
    }
    free(syms);
    return -1;
}

int gram_from_gbnf(const char *text, size_t n, gram **out, char *err, size_t err_bytes) {
    *out = NULL;
    gp p = {.s = text, .n = n, .err = err, .err_bytes = err_bytes};
    p.b = gb_new();
    if (!p.b) return ifd_errf(err, err_bytes, -1, "out of memory");
    for (;;) {
        skip_space(&p, true);
        if (p.i >= p.n) break;
        size_t st = p.i;
        while (p.i < p.n && is_name(p.s[p.i])) p.i++;
        if (p.i == st) {
            gp_fail(&p, "expected a rule name");
            break;
        }
        const char *name = p.s + st;
        size_t nl = p.i - st;
        skip_space(&p, false);
        if (p.i + 3 > p.n || memcmp(p.s + p.i, "::=", 3)) {
            gp_fail(&p, "expected '::='");
            break;
        }
        p.i += 3;
        int32_t r = gb_find(p.b, name, nl);
        if (r < 0) r = gb_rule(p.b, name, nl);
        if (r < 0) {
            gp_fail(&p, gb_error(p.b));
            break;
        }
        if (gb_n_alts(p.b, r) > 0) {
            p.i = st;
            char msg[300];
            snprintf(msg, sizeof msg, "rule '%.*s' defined twice", (int)IFD_MIN(nl, 200), name);
            gp_fail(&p, msg);
            break;
        }
        skip_space(&p, false);
        if (parse_alternates(&p, r) < 0) break;
        skip_space(&p, false);
        if (p.i < p.n && p.s[p.i] != '\n' && p.s[p.i] != '\r') {
            gp_fail(&p, "unexpected character");
            break;
        }
    }
    int rc = -1;
    if (!p.failed) {
        int32_t root = gb_find(p.b, "root", 4);
        if (root < 0) ifd_errf(err, err_bytes, -1, "grammar: no 'root' rule");
        else rc = gram_compile(p.b, root, out, err, err_bytes);
        if (rc && err && err_bytes && strncmp(err, "grammar", 7)) {
            char tmp[512];
            snprintf(tmp, sizeof tmp, "grammar: %s", err);
            snprintf(err, err_bytes, "%s", tmp);
        }
    }
    gb_free(p.b);
    return rc;
}
