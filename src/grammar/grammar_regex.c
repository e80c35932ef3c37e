/* grammar_regex.c — regular expressions (ECMAScript syntax, the subset JSON Schema's
 * "pattern" and the request's "regex" use) into the IR: alternation, groups ((..),
 * (?:..), (?<name>..)), classes with ranges and negation, the escapes \d \D \w \W \s \S
 * \n \r \t \f \v \0 \xHH \uHHHH \u{H..}, ".", quantifiers * + ? {m} {m,} {m,n} (lazy
 * forms mean the same here), ^ at the start and $ at the end. A regex is matched whole
 * (a generated text matching it whole also contains a match, which is what a JSON
 * Schema pattern asks). Back-references, look-around, \b \B and \cX are errors.
 *
 * GRAM_RE_JSON_STRING: the text as written inside a JSON string literal: a matched `"`
 * is written \", `\` is \\, U+0000..U+001F are \b \f \n \r \t or \u00XX, "/" may
 * also be \/; every other code point is written as itself.
 * Any thread. */
#include "grammar_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

typedef struct rx {
    const char *s;
    size_t n, i;
    gram_builder *b;
    unsigned flags;
    int depth;
    char *err;
    size_t err_bytes;
    bool failed;
} rx;

typedef struct cpset {
    uint32_t (*r)[2];
    int32_t n, cap;
} cpset;

static int rx_fail(rx *p, const char *what) {
    if (!p->failed) {
        ifd_errf(p->err, p->err_bytes, -1, "regex: %s at offset %zu", what, p->i);
        p->failed = true;
    }
    return -1;
}

static bool cs_add(cpset *c, uint32_t lo, uint32_t hi) {
    if (c->n == c->cap) {
        int32_t nc = c->cap ? c->cap * 2 : 8;
        void *q = realloc(c->r, sizeof *c->r * (size_t)nc);
        if (!q) return false;
        c->r = q;
        c->cap = nc;
    }
    c->r[c->n][0] = lo;
    c->r[c->n][1] = hi;
    c->n++;
    return true;
}

static int cmp_r(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sorted, merged, optionally complemented in [0, 0x10FFFF]. */
static bool cs_normalize(cpset *c, bool negate) {
    if (c->n > 1) qsort(c->r, (size_t)c->n, sizeof *c->r, cmp_r);
    int32_t m = 0;
    for (int32_t i = 0; i < c->n; i++) {
        if (m && c->r[i][0] <= c->r[m - 1][1] + 1) {
            if (c->r[i][1] > c->r[m - 1][1]) c->r[m - 1][1] = c->r[i][1];
        } else {
            c->r[m][0] = c->r[i][0];
            c->r[m][1] = c->r[i][1];
            m++;
        }
    }
    c->n = m;
    if (!negate) return true;
    cpset o = {0};
    uint32_t next = 0;
    for (int32_t i = 0; i < m; i++) {
        if (c->r[i][0] > next && !cs_add(&o, next, c->r[i][0] - 1)) return false;
        next = c->r[i][1] + 1;
    }
    if (next <= 0x10FFFF && !cs_add(&o, next, 0x10FFFF)) return false;
    free(c->r);
    *c = o;
    return true;
}

static bool add_class_escape(cpset *c, char e) {
    static const uint32_t space[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                        {0xFEFF, 0xFEFF}};
    static const uint32_t word[][2] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const uint32_t digit[][2] = {{'0', '9'}};
    const uint32_t(*set)[2] = NULL;
    size_t n = 0;
    bool neg = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
    case 'd': case 'D': set = digit, n = 1; break;
    case 'w': case 'W': set = word, n = 4; break;
    case 's': case 'S': set = space, n = sizeof space / sizeof *space; break;
    default: return false;
    }
    if (!neg) {
        for (size_t k = 0; k < n; k++)
            if (!cs_add(c, set[k][0], set[k][1])) return false;
        return true;
    }
    uint32_t next = 0;
    for (size_t k = 0; k < n; k++) {
        if (set[k][0] > next && !cs_add(c, next, set[k][0] - 1)) return false;
        next = set[k][1] + 1;
    }
    return cs_add(c, next, 0x10FFFF);
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* An escape after the backslash (p->i at the letter) that stands for one code point:
 * returns it, or -2 when the escape is a class (\d ...; *cls gets its letter), -1 on
 * error. in_class: \b is a backspace there. */
static int64_t read_escape(rx *p, bool in_class, char *cls) {
    if (p->i >= p->n) return rx_fail(p, "a trailing backslash");
    char e = p->s[p->i++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': *cls = e; return -2;
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0':
        if (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') return rx_fail(p, "octal escapes are not supported");
        return 0;
    case 'b':
        if (in_class) return '\b';
        p->i--;
        return rx_fail(p, "word boundaries (\\b) are not supported");
    case 'B': p->i--; return rx_fail(p, "\\B is not supported");
    case 'c': p->i--; return rx_fail(p, "control escapes (\\cX) are not supported");
    case 'x': {
        int a = p->i + 1 < p->n ? hexv(p->s[p->i]) : -1, b = a >= 0 ? hexv(p->s[p->i + 1]) : -1;
        if (a < 0 || b < 0) return rx_fail(p, "bad \\x escape");
        p->i += 2;
        return a * 16 + b;
    }
    case 'u': {
        uint32_t v = 0;
        if (p->i < p->n && p->s[p->i] == '{') {
            p->i++;
            int nd = 0;
            while (p->i < p->n && p->s[p->i] != '}') {
                int h = hexv(p->s[p->i++]);
                if (h < 0 || ++nd > 6) return rx_fail(p, "bad \\u{} escape");
                v = v << 4 | (uint32_t)h;
            }
            if (p->i >= p->n || nd == 0) return rx_fail(p, "bad \\u{} escape");
            p->i++;
        } else {
            for (int k = 0; k < 4; k++) {
                int h = p->i < p->n ? hexv(p->s[p->i]) : -1;
                if (h < 0) return rx_fail(p, "bad \\u escape");
                v = v << 4 | (uint32_t)h;
                p->i++;
            }
            /* a surrogate pair written as two escapes */
            if (v >= 0xD800 && v <= 0xDBFF && p->i + 5 < p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                uint32_t w = 0;
                bool ok = true;
                for (int k = 0; k < 4 && ok; k++) {
                    int h = hexv(p->s[p->i + 2 + k]);
                    ok = h >= 0;
                    w = w << 4 | (uint32_t)(h < 0 ? 0 : h);
                }
                if (ok && w >= 0xDC00 && w <= 0xDFFF) {
                    p->i += 6;
                    v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
                }
            }
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return rx_fail(p, "escape is not a Unicode scalar value");
        return v;
    }
    default:
        if (e >= '1' && e <= '9') {
            p->i--;
            return rx_fail(p, "back-references are not supported");
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
            p->i--;
            return rx_fail(p, "unknown escape");
        }
        {
            /* an escaped punctuation (or any other) character: itself */
            p->i--;
            uint32_t cp;
            size_t len = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, &cp);
            if (!len) return rx_fail(p, "invalid UTF-8");
            p->i += len;
            return cp;
        }
    }
}

/* The rule for one code point set (merged ranges): raw, or JSON-string-encoded. */
static gsym emit_set(rx *p, cpset *c) {
    if (!(p->flags & GRAM_RE_JSON_STRING)) return gb_codepoints(p->b, (const uint32_t(*)[2])c->r, c->n, false);
    /* split: the code points written as themselves, and those that need an escape */
    cpset plain = {0};
    gsym alts[40];
    int na = 0;
    bool oom = false;
    for (int32_t i = 0; i < c->n && !oom; i++) {
        uint32_t lo = c->r[i][0], hi = c->r[i][1];
        for (uint32_t x = lo; x <= hi && x < 0x20; x++) {
            static const char *const short_esc[32] = {[8] = "\\b", [9] = "\\t", [10] = "\\n", [12] = "\\f", [13] = "\\r"};
            char u[8];
            const char *lit = short_esc[x];
            if (!lit) {
                snprintf(u, sizeof u, "\\u%04x", x);
                /* \u00XX with either case of hex digits */
                gsym parts[6] = {gb_byte(p->b, '\\'), gb_byte(p->b, 'u'), gb_byte(p->b, '0'), gb_byte(p->b, '0'),
                                 gb_byte(p->b, (uint8_t)u[4]), -1};
                char d = u[5];
                uint32_t bits[8] = {0};
                bits[(uint8_t)d >> 5] |= 1u << ((uint8_t)d & 31);
                if (d >= 'a' && d <= 'f') bits[(uint8_t)(d - 32) >> 5] |= 1u << ((uint8_t)(d - 32) & 31);
                parts[5] = gb_byteset(p->b, bits);
                alts[na++] = gb_seq(p->b, parts, 6);
            } else {
                alts[na++] = gb_literal(p->b, lit, 2);
            }
        }
        uint32_t a = IFD_MAX(lo, 0x20u);
        /* carve out '"' and '\\' */
        while (a <= hi && !oom) {
            uint32_t stop = hi;
            if (a <= '"' && hi >= '"') stop = a == '"' ? '"' : '"' - 1;
            else if (a <= '\\' && hi >= '\\') stop = a == '\\' ? '\\' : '\\' - 1;
            if (a == '"' || a == '\\') {
                alts[na++] = gb_literal(p->b, a == '"' ? "\\\"" : "\\\\", 2);
            } else {
                if (a <= '/' && stop >= '/') alts[na++] = gb_literal(p->b, "\\/", 2);
                oom = !cs_add(&plain, a, stop);
            }
            if (stop == 0x10FFFF) break;
            a = stop + 1;
        }
    }
    if (oom) {
        free(plain.r);
        return rx_fail(p, "out of memory");
    }
    if (plain.n) alts[na++] = gb_codepoints(p->b, (const uint32_t(*)[2])plain.r, plain.n, false);
    free(plain.r);
    if (na == 0) return gb_codepoints(p->b, NULL, 0, false); /* the empty set */
    return gb_choice(p->b, alts, na);
}

static gsym emit_cp(rx *p, uint32_t cp) {
    if (!(p->flags & GRAM_RE_JSON_STRING) || (cp >= 0x20 && cp != '"' && cp != '\\' && cp != '/')) {
        unsigned char u[4];
        size_t n = utf8_encode(cp, u);
        return gb_literal(p->b, (const char *)u, n);
    }
    cpset one = {0};
    if (!cs_add(&one, cp, cp)) return rx_fail(p, "out of memory");
    gsym g = emit_set(p, &one);
    free(one.r);
    return g;
}

static gsym parse_class(rx *p) {
    p->i++; /* [ */
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    cpset c = {0};
    while (p->i < p->n && p->s[p->i] != ']') {
        int64_t lo;
        char cls = 0;
        if (p->s[p->i] == '\\') {
            p->i++;
            lo = read_escape(p, true, &cls);
            if (lo == -1) goto fail;
            if (lo == -2) {
                if (!add_class_escape(&c, cls)) goto oom;
                continue;
            }
        } else {
            uint32_t cp;
            size_t len = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, &cp);
            if (!len) {
                rx_fail(p, "invalid UTF-8");
                goto fail;
            }
            p->i += len;
            lo = cp;
        }
        int64_t hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (p->s[p->i] == '\\') {
                p->i++;
                hi = read_escape(p, true, &cls);
                if (hi == -1) goto fail;
                if (hi == -2) {
                    rx_fail(p, "a class escape cannot end a range");
                    goto fail;
                }
            } else {
                uint32_t cp;
                size_t len = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, &cp);
                if (!len) {
                    rx_fail(p, "invalid UTF-8");
                    goto fail;
                }
                p->i += len;
                hi = cp;
            }
            if (hi < lo) {
                rx_fail(p, "class range out of order");
                goto fail;
            }
        }
        if (!cs_add(&c, (uint32_t)lo, (uint32_t)hi)) goto oom;
    }
    if (p->i >= p->n) {
        rx_fail(p, "unterminated character class");
        goto fail;
    }
    p->i++;
    if (!cs_normalize(&c, neg)) goto oom;
    gsym g = emit_set(p, &c);
    free(c.r);
    return g;
oom:
    rx_fail(p, "out of memory");
fail:
    free(c.r);
    return -1;
}

static gsym parse_alt(rx *p);

static int read_count(rx *p, int32_t *out) {
    size_t st = p->i;
    int64_t v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > GRAM_MAX_REPEAT) return rx_fail(p, "repetition count too large");
    }
    if (p->i == st) return 1;
    *out = (int32_t)v;
    return 0;
}

static gsym parse_atom(rx *p) {
    char c = p->s[p->i];
    if (c == '(') {
        p->i++;
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 < p->n && p->s[p->i + 1] == ':') {
                p->i += 2;
            } else if (p->i + 1 < p->n && p->s[p->i + 1] == '<' && p->i + 2 < p->n && p->s[p->i + 2] != '=' &&
                       p->s[p->i + 2] != '!') {
                while (p->i < p->n && p->s[p->i] != '>') p->i++;
                if (p->i >= p->n) return rx_fail(p, "unterminated group name");
                p->i++;
            } else {
                return rx_fail(p, "look-around and other (? groups are not supported");
            }
        }
        if (++p->depth > 100) return rx_fail(p, "groups nested too deeply");
        gsym g = parse_alt(p);
        if (g < 0) return -1;
        if (p->i >= p->n || p->s[p->i] != ')') return rx_fail(p, "expected ')'");
        p->i++;
        p->depth--;
        return g;
    }
    if (c == '[') return parse_class(p);
    if (c == '.') {
        p->i++;
        cpset cs = {0};
        bool ok = cs_add(&cs, '\n', '\n') && cs_add(&cs, '\r', '\r') && cs_add(&cs, 0x2028, 0x2029) &&
                  cs_normalize(&cs, true);
        gsym g = ok ? emit_set(p, &cs) : rx_fail(p, "out of memory");
        free(cs.r);
        return g;
    }
    if (c == '\\') {
        p->i++;
        char cls = 0;
        int64_t cp = read_escape(p, false, &cls);
        if (cp == -1) return -1;
        if (cp == -2) {
            cpset cs = {0};
            bool ok = add_class_escape(&cs, cls) && cs_normalize(&cs, false);
            gsym g = ok ? emit_set(p, &cs) : rx_fail(p, "out of memory");
            free(cs.r);
            return g;
        }
        return emit_cp(p, (uint32_t)cp);
    }
    if (c == '*' || c == '+' || c == '?') return rx_fail(p, "nothing to repeat");
    if (c == '{') {
        /* a '{' that does not open a quantifier is itself (ECMAScript Annex B); {,n} is
         * one in Python's re and not in ECMAScript: refused as ambiguous */
        size_t j = p->i + 1;
        if (j < p->n && (p->s[j] == ',' || (p->s[j] >= '0' && p->s[j] <= '9')))
            return rx_fail(p, p->s[j] == ',' ? "{,n} is ambiguous (ECMAScript: literal, Python: a quantifier)"
                                              : "nothing to repeat");
    }
    if (c == '^' || c == '$') return rx_fail(p, "anchors are only supported at the start (^) and end ($)");
    uint32_t cp;
    size_t len = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, &cp);
    if (!len) return rx_fail(p, "invalid UTF-8");
    p->i += len;
    return emit_cp(p, cp);
}

/* A concatenation: atoms with their quantifiers, up to | or ) or the end. */
static gsym parse_concat(rx *p) {
    gsym *v = NULL;
    int32_t n = 0, cap = 0;
    gsym out = -1;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        if (p->s[p->i] == '$' && p->i + 1 == p->n && p->depth == 0) { /* a final anchor */
            p->i++;
            break;
        }
        gsym a = parse_atom(p);
        if (a == -1 && (p->failed || gb_error(p->b))) goto done;
        while (p->i < p->n) {
            char q = p->s[p->i];
            int32_t lo, hi;
            if (q == '*') lo = 0, hi = -1, p->i++;
            else if (q == '+') lo = 1, hi = -1, p->i++;
            else if (q == '?') lo = 0, hi = 1, p->i++;
            else if (q == '{') {
                size_t save = p->i;
                p->i++;
                lo = 0;
                int rc = read_count(p, &lo);
                if (rc < 0) goto done;
                hi = lo;
                if (rc == 0 && p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    hi = -1;
                    if (read_count(p, &hi) < 0) goto done;
                }
                if (rc != 0 || p->i >= p->n || p->s[p->i] != '}') {
                    /* not a quantifier: a literal '{' (ECMAScript's Annex B), except
                     * {,n}, a quantifier in Python's re (jsonschema's checker) */
                    p->i = save;
                    if (p->i + 1 < p->n && p->s[p->i + 1] == ',') {
                        rx_fail(p, "{,n} is ambiguous (ECMAScript: literal, Python: a quantifier)");
                        goto done;
                    }
                    break;
                }
                p->i++;
                if (hi >= 0 && hi < lo) {
                    rx_fail(p, "repetition {m,n} with n < m");
                    goto done;
                }
            } else {
                break;
            }
            if (p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy: the same language */
            a = gb_repeat(p->b, a, lo, hi);
            if (a < 0) {
                rx_fail(p, gb_error(p->b) ? gb_error(p->b) : "bad repetition");
                goto done;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            void *q = realloc(v, sizeof *v * (size_t)cap);
            if (!q) {
                rx_fail(p, "out of memory");
                goto done;
            }
            v = q;
        }
        v[n++] = a;
    }
    out = gb_seq(p->b, v, n);
    if (out < 0 && !p->failed) rx_fail(p, gb_error(p->b) ? gb_error(p->b) : "error");
done:
    free(v);
    return out;
}

static gsym parse_alt(rx *p) {
    gsym alts[256];
    int n = 0;
    for (;;) {
        gsym c = parse_concat(p);
        if (c < 0) return -1;
        if (n == (int)(sizeof alts / sizeof *alts)) return rx_fail(p, "too many alternatives in one group");
        alts[n++] = c;
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    int32_t r = gb_rule(p->b, NULL, 0);
    for (int k = 0; k < n && r >= 0; k++)
        if (gb_alt(p->b, r, &alts[k], 1)) r = -1;
    if (r < 0) return rx_fail(p, gb_error(p->b) ? gb_error(p->b) : "error");
    return r;
}

int gram_regex(gram_builder *b, const char *re, size_t n, unsigned flags, int32_t *rule, char *err,
               size_t err_bytes) {
    rx p = {.s = re, .n = n, .b = b, .flags = flags, .err = err, .err_bytes = err_bytes};
    if (p.n && p.s[0] == '^') p.i = 1;
    gsym g = parse_alt(&p);
    if (g < 0) {
        if (!p.failed) rx_fail(&p, gb_error(b) ? gb_error(b) : "error");
        return -1;
    }
    if (p.i < p.n) return rx_fail(&p, p.s[p.i] == ')' ? "unmatched ')'" : "unexpected character");
    *rule = g;
    return 0;
}

int gram_from_regex(const char *re, size_t n, gram **out, char *err, size_t err_bytes) {
    *out = NULL;
    gram_builder *b = gb_new();
    if (!b) return ifd_errf(err, err_bytes, -1, "out of memory");
    int32_t r;
    int rc = gram_regex(b, re, n, 0, &r, err, err_bytes);
    if (rc == 0) rc = gram_compile(b, r, out, err, err_bytes);
    gb_free(b);
    return rc;
}
