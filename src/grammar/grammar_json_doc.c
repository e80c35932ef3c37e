/* grammar_json_doc.c — the JSON Schema front end's view of a schema document: a strict
 * JSON parser that keeps member order (properties come out in schema order), numbers as
 * written (exact bounds, const values emitted as the schema spells them) and rejects
 * duplicate member names; exact decimals for bounds and equality; compact output.
 * Not a general JSON library: the server parses requests elsewhere. Any thread. */
#include "grammar_json_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"
#include "util/utf8.h"

/* ---- parser ------------------------------------------------------------------------------ */
typedef struct jparse {
    const char *s;
    size_t n, i;
    jdoc *d;
    char *err;
    size_t err_bytes;
    int depth;
    bool failed;
} jparse;

static int jp_fail(jparse *p, const char *what) {
    if (!p->failed) {
        ifd_errf(p->err, p->err_bytes, -1, "JSON Schema: invalid JSON: %s at byte %zu", what, p->i);
        p->failed = true;
    }
    return -1;
}

static void *jalloc(jparse *p, size_t bytes) {
    jdoc *d = p->d;
    if (!GVEC_GROW(d->blocks, d->cap_blocks, d->n_blocks + 1)) return NULL;
    void *q = calloc(1, bytes ? bytes : 1);
    if (q) d->blocks[d->n_blocks++] = q;
    return q;
}

static void skip_ws(jparse *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        *v = *v << 4 | (uint32_t)h;
    }
    return 0;
}

/* A string at p->i (the opening quote) into a new JN_STR node. */
static jnode *parse_string(jparse *p) {
    size_t st = ++p->i, e = st;
    while (e < p->n && p->s[e] != '"') e += p->s[e] == '\\' ? 2 : 1;
    if (e >= p->n) {
        jp_fail(p, "unterminated string");
        return NULL;
    }
    jnode *v = jalloc(p, sizeof *v);
    char *o = jalloc(p, e - st + 1);
    if (!v || !o) {
        jp_fail(p, "out of memory");
        return NULL;
    }
    size_t k = 0;
    while (p->i < e) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20) {
            jp_fail(p, "control character in a string");
            return NULL;
        }
        if (c != '\\') {
            size_t len = utf8_char_len((const unsigned char *)p->s + p->i, e - p->i);
            if (!len) {
                jp_fail(p, "invalid UTF-8 in a string");
                return NULL;
            }
            memcpy(o + k, p->s + p->i, len);
            k += len;
            p->i += len;
            continue;
        }
        char x = p->s[p->i + 1];
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *f = x ? strchr(from, x) : NULL;
        if (f) {
            o[k++] = to[f - from];
            p->i += 2;
            continue;
        }
        uint32_t cp, lo;
        if (x != 'u' || p->i + 6 > e || hex4(p->s + p->i + 2, &cp)) {
            jp_fail(p, "bad escape in a string");
            return NULL;
        }
        p->i += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            jp_fail(p, "lone surrogate escape in a string");
            return NULL;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (p->i + 6 > e || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' || hex4(p->s + p->i + 2, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF) {
                jp_fail(p, "lone surrogate escape in a string");
                return NULL;
            }
            p->i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        k += utf8_encode(cp, (unsigned char *)o + k);
    }
    p->i = e + 1;
    o[k] = 0;
    *v = (jnode){.t = JN_STR, .s = o, .n = (uint32_t)k};
    return v;
}

static jnode *parse_value(jparse *p);

/* Children of an array or object: a growable list while parsing, then one allocation. */
typedef struct kidvec {
    jnode **v;
    int64_t n, cap;
} kidvec;

/* Member names seen so far in one object: a scan while few, then open addressing (an
 * object with many members stays linear). */
typedef struct keyix {
    int32_t *slot; /* index + 1 into the names; 0 empty */
    int64_t cap;
} keyix;

static uint64_t key_hash(const jnode *k) { return ifd_hash_bytes(0x6b65, k->s, k->n); }

/* 1 when k is among keys->v[0..n) (k not yet added), 0 when not (then, from 16 names
 * on, k is indexed as entry n: the caller appends it), -1 on no memory. */
static int seen_key(keyix *ix, const kidvec *keys, const jnode *k) {
    const int64_t n = keys->n;
    if (n < 16) {
        for (int64_t j = 0; j < n; j++)
            if (keys->v[j]->n == k->n && !memcmp(keys->v[j]->s, k->s, k->n)) return 1;
        return 0;
    }
    if ((n + 1) * 2 > ix->cap) {
        int64_t nc = ix->cap ? ix->cap * 2 : 64;
        int32_t *q = calloc((size_t)nc, sizeof *q);
        if (!q) return -1;
        for (int64_t j = 0; j < n; j++) {
            uint64_t h = key_hash(keys->v[j]) & (uint64_t)(nc - 1);
            while (q[h]) h = (h + 1) & (uint64_t)(nc - 1);
            q[h] = (int32_t)j + 1;
        }
        free(ix->slot);
        ix->slot = q;
        ix->cap = nc;
    }
    const uint64_t m = (uint64_t)ix->cap - 1;
    uint64_t h = key_hash(k) & m;
    for (; ix->slot[h]; h = (h + 1) & m) {
        const jnode *o = keys->v[ix->slot[h] - 1];
        if (o->n == k->n && !memcmp(o->s, k->s, k->n)) return 1;
    }
    ix->slot[h] = (int32_t)n + 1; /* k becomes entry n */
    return 0;
}

static jnode *parse_container(jparse *p, bool obj) {
    if (++p->depth > JDOC_MAX_DEPTH) {
        jp_fail(p, "nested too deeply");
        return NULL;
    }
    const char close = obj ? '}' : ']';
    kidvec keys = {0}, vals = {0};
    keyix ix = {0};
    jnode *out = NULL;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
    } else {
        for (;;) {
            jnode *k = NULL;
            skip_ws(p);
            if (obj) {
                if (p->i >= p->n || p->s[p->i] != '"') {
                    jp_fail(p, "expected a member name");
                    goto done;
                }
                size_t at = p->i;
                if (!(k = parse_string(p))) goto done;
                int dup = seen_key(&ix, &keys, k);
                if (dup) {
                    p->i = at;
                    jp_fail(p, dup < 0 ? "out of memory" : "duplicate member name");
                    goto done;
                }
                skip_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') {
                    jp_fail(p, "expected ':'");
                    goto done;
                }
                p->i++;
            }
            jnode *v = parse_value(p);
            if (!v) goto done;
            if (!GVEC_GROW(vals.v, vals.cap, vals.n + 1) || (obj && !GVEC_GROW(keys.v, keys.cap, keys.n + 1))) {
                jp_fail(p, "out of memory");
                goto done;
            }
            vals.v[vals.n++] = v;
            if (obj) keys.v[keys.n++] = k;
            skip_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == close) {
                p->i++;
                break;
            }
            jp_fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
            goto done;
        }
    }
    if (vals.n > UINT32_MAX / 2) {
        jp_fail(p, "too many elements");
        goto done;
    }
    out = jalloc(p, sizeof *out);
    jnode **kid = jalloc(p, sizeof *kid * (size_t)vals.n), **key = obj ? jalloc(p, sizeof *key * (size_t)vals.n) : NULL;
    if (!out || !kid || (obj && !key)) {
        jp_fail(p, "out of memory");
        out = NULL;
        goto done;
    }
    if (vals.n) memcpy(kid, vals.v, sizeof *kid * (size_t)vals.n);
    if (obj && vals.n) memcpy(key, keys.v, sizeof *key * (size_t)vals.n);
    *out = (jnode){.t = obj ? JN_OBJ : JN_ARR, .n = (uint32_t)vals.n, .kid = kid, .key = key};
    p->depth--;
done:
    free(keys.v);
    free(vals.v);
    free(ix.slot);
    return out;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static jnode *parse_number(jparse *p) {
    size_t st = p->i;
    if (p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || !is_digit(p->s[p->i])) goto bad;
    if (p->s[p->i] == '0') p->i++;
    else
        while (p->i < p->n && is_digit(p->s[p->i])) p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || !is_digit(p->s[p->i])) goto bad;
        while (p->i < p->n && is_digit(p->s[p->i])) p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || !is_digit(p->s[p->i])) goto bad;
        while (p->i < p->n && is_digit(p->s[p->i])) p->i++;
    }
    if (p->i - st > 1000) {
        p->i = st;
        jp_fail(p, "number too long");
        return NULL;
    }
    jnode *v = jalloc(p, sizeof *v);
    if (!v) {
        jp_fail(p, "out of memory");
        return NULL;
    }
    *v = (jnode){.t = JN_NUM, .s = p->s + st, .n = (uint32_t)(p->i - st)};
    return v;
bad:
    jp_fail(p, "bad number");
    return NULL;
}

static jnode *parse_value(jparse *p) {
    skip_ws(p);
    if (p->i >= p->n) {
        jp_fail(p, "unexpected end");
        return NULL;
    }
    char c = p->s[p->i];
    if (c == '{' || c == '[') return parse_container(p, c == '{');
    if (c == '"') return parse_string(p);
    if (c == '-' || is_digit(c)) return parse_number(p);
    static const struct {
        const char *w;
        jn_type t;
        bool b;
    } words[] = {{"null", JN_NULL, false}, {"true", JN_BOOL, true}, {"false", JN_BOOL, false}};
    for (size_t k = 0; k < IFD_ARRAY_LEN(words); k++) {
        size_t len = strlen(words[k].w);
        if (p->n - p->i >= len && !memcmp(p->s + p->i, words[k].w, len)) {
            jnode *v = jalloc(p, sizeof *v);
            if (!v) {
                jp_fail(p, "out of memory");
                return NULL;
            }
            p->i += len;
            *v = (jnode){.t = words[k].t, .b = words[k].b};
            return v;
        }
    }
    jp_fail(p, "unexpected character");
    return NULL;
}

int jdoc_parse(jdoc *d, const char *text, size_t n, char *err, size_t err_bytes) {
    *d = (jdoc){0};
    jparse p = {.s = text, .n = n, .d = d, .err = err, .err_bytes = err_bytes};
    d->root = parse_value(&p);
    if (!d->root) return -1;
    skip_ws(&p);
    if (p.i != n) return jp_fail(&p, "text after the value");
    return 0;
}

void jdoc_free(jdoc *d) {
    if (!d) return;
    for (int64_t i = 0; i < d->n_blocks; i++) free(d->blocks[i]);
    free(d->blocks);
    *d = (jdoc){0};
}

const jnode *jn_get(const jnode *o, const char *key) {
    if (!o || o->t != JN_OBJ) return NULL;
    size_t len = strlen(key);
    for (uint32_t i = 0; i < o->n; i++)
        if (o->key[i]->n == len && !memcmp(o->key[i]->s, key, len)) return o->kid[i];
    return NULL;
}

/* ---- decimals ---------------------------------------------------------------------------- */
int jdec_parse(jdec *x, const char *s, size_t n) {
    *x = (jdec){0};
    size_t i = 0;
    if (i < n && s[i] == '-') {
        x->neg = true;
        i++;
    }
    /* digits of the mantissa without the point; point = digits before it */
    int64_t point = 0;
    bool seen_point = false, lead = true;
    for (; i < n && (is_digit(s[i]) || s[i] == '.'); i++) {
        if (s[i] == '.') {
            seen_point = true;
            continue;
        }
        if (lead && s[i] == '0') { /* a leading zero: shifts the point when after it */
            if (seen_point) point--;
            continue;
        }
        lead = false;
        if (x->nd >= JDEC_DIGITS) {
            if (s[i] != '0') return -1;
        } else {
            x->d[x->nd++] = s[i];
        }
        if (!seen_point) point++;
    }
    int64_t e = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        bool en = false;
        if (++i < n && (s[i] == '+' || s[i] == '-')) en = s[i++] == '-';
        for (; i < n && is_digit(s[i]); i++)
            if (e < 10000000) e = e * 10 + (s[i] - '0');
        if (en) e = -e;
    }
    while (x->nd && x->d[x->nd - 1] == '0') x->nd--;
    if (!x->nd) {
        *x = (jdec){0};
        return 0;
    }
    int64_t ex = point + e;
    x->exp = (int32_t)(ex > 1000000 ? 1000000 : ex < -1000000 ? -1000000 : ex);
    return 0;
}

static int cmp_mag(const jdec *a, const jdec *b) {
    if (!a->nd || !b->nd) return (a->nd > 0) - (b->nd > 0);
    if (a->exp != b->exp) return a->exp < b->exp ? -1 : 1;
    int32_t m = IFD_MIN(a->nd, b->nd);
    int c = memcmp(a->d, b->d, (size_t)m);
    if (c) return c < 0 ? -1 : 1;
    return (a->nd > b->nd) - (a->nd < b->nd);
}

int jdec_cmp(const jdec *a, const jdec *b) {
    bool an = a->neg && a->nd, bn = b->neg && b->nd;
    if (an != bn) return an ? -1 : 1;
    int c = cmp_mag(a, b);
    return an ? -c : c;
}

bool jdec_is_int(const jdec *a) { return a->nd == 0 || a->nd <= a->exp; }

/* The integer part of |a| (saturating at UINT64_MAX) and whether a fraction is left. */
static uint64_t trunc_mag(const jdec *a, bool *frac) {
    *frac = a->nd > 0 && a->nd > a->exp;
    if (a->nd == 0 || a->exp <= 0) return 0;
    if (a->exp > 20) return UINT64_MAX;
    uint64_t m = 0;
    for (int32_t k = 0; k < a->exp; k++) {
        unsigned dg = k < a->nd ? (unsigned)(a->d[k] - '0') : 0;
        if (m > (UINT64_MAX - dg) / 10) return UINT64_MAX;
        m = m * 10 + dg;
    }
    return m;
}

/* -(m + extra) or m + extra as int64, with the range check of jdec_floor. */
static int to_i64(bool neg, uint64_t m, unsigned extra, int64_t *out) {
    const uint64_t lim = (uint64_t)INT64_MAX;
    if (m == UINT64_MAX || m + extra < m) return neg ? -1 : 1;
    m += extra;
    if (!neg) {
        if (m > lim) return 1;
        *out = (int64_t)m;
    } else {
        if (m > lim + 1) return -1;
        *out = m == lim + 1 ? INT64_MIN : -(int64_t)m;
    }
    return 0;
}

int jdec_floor(const jdec *a, int64_t *out) {
    bool frac;
    uint64_t m = trunc_mag(a, &frac);
    return a->neg && a->nd ? to_i64(true, m, frac, out) : to_i64(false, m, 0, out);
}

int jdec_ceil(const jdec *a, int64_t *out) {
    bool frac;
    uint64_t m = trunc_mag(a, &frac);
    return a->neg && a->nd ? to_i64(true, m, 0, out) : to_i64(false, m, frac, out);
}

/* ---- equality, output -------------------------------------------------------------------- */
bool jn_equal(const jnode *a, const jnode *b) {
    if (a->t != b->t) return false;
    switch (a->t) {
    case JN_NULL: return true;
    case JN_BOOL: return a->b == b->b;
    case JN_STR: return a->n == b->n && !memcmp(a->s, b->s, a->n);
    case JN_NUM: {
        jdec x, y;
        if (jdec_parse(&x, a->s, a->n) || jdec_parse(&y, b->s, b->n))
            return a->n == b->n && !memcmp(a->s, b->s, a->n);
        return jdec_cmp(&x, &y) == 0;
    }
    case JN_ARR:
        if (a->n != b->n) return false;
        for (uint32_t i = 0; i < a->n; i++)
            if (!jn_equal(a->kid[i], b->kid[i])) return false;
        return true;
    case JN_OBJ:
        if (a->n != b->n) return false;
        for (uint32_t i = 0; i < a->n; i++) {
            const jnode *o = NULL;
            for (uint32_t j = 0; j < b->n && !o; j++)
                if (b->key[j]->n == a->key[i]->n && !memcmp(b->key[j]->s, a->key[i]->s, a->key[i]->n)) o = b->kid[j];
            if (!o || !jn_equal(a->kid[i], o)) return false;
        }
        return true;
    }
    return false;
}

void jn_write_str(sbuf *out, const char *s, size_t n) {
    sbuf_put(out, "\"", 1);
    size_t run = 0; /* bytes copied as they are, flushed before an escape */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        sbuf_put(out, s + i - run, run);
        run = 0;
        static const char from[] = "\"\\\b\f\n\r\t", to[] = "\"\\bfnrt";
        const char *f = c ? strchr(from, c) : NULL;
        if (f) {
            char e[2] = {'\\', to[f - from]};
            sbuf_put(out, e, 2);
        } else {
            sbuf_printf(out, "\\u%04x", c);
        }
    }
    sbuf_put(out, s + n - run, run);
    sbuf_put(out, "\"", 1);
}

void jn_write(sbuf *out, const jnode *v) {
    switch (v->t) {
    case JN_NULL: sbuf_puts(out, "null"); break;
    case JN_BOOL: sbuf_puts(out, v->b ? "true" : "false"); break;
    case JN_NUM: sbuf_put(out, v->s, v->n); break;
    case JN_STR: jn_write_str(out, v->s, v->n); break;
    case JN_ARR:
    case JN_OBJ:
        sbuf_put(out, v->t == JN_ARR ? "[" : "{", 1);
        for (uint32_t i = 0; i < v->n; i++) {
            if (i) sbuf_put(out, ",", 1);
            if (v->t == JN_OBJ) {
                jn_write_str(out, v->key[i]->s, v->key[i]->n);
                sbuf_put(out, ":", 1);
            }
            jn_write(out, v->kid[i]);
        }
        sbuf_put(out, v->t == JN_ARR ? "]" : "}", 1);
        break;
    }
}
