/* jinja_value.c — the arena, value constructors, and the Python-like behaviour of
 * values: str(), repr(), ==, ordering, float formatting.
 *
 * Runs on whichever thread renders; all state is in the jr / jinja_arena passed in. */
#include "jinja.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- arena ---------------------------------------------------------------------- */

struct ja_chunk {
    ja_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define JA_ALIGN 16
#define JA_MIN_CHUNK ((size_t)16 << 10)
#define JA_MAX_CHUNK ((size_t)1 << 20)

void ja_init(jinja_arena *a, size_t cap_bytes, void (*on_fail)(void *, bool), void *ctx) {
    memset(a, 0, sizeof(*a));
    a->cap_bytes = cap_bytes;
    a->on_fail = on_fail;
    a->fail_ctx = ctx;
}

void ja_free(jinja_arena *a) {
    if (!a) return;
    ja_chunk *c = a->head;
    while (c) {
        ja_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

static void ja_fail(jinja_arena *a, bool over_cap) {
    IFD_ASSERT(a->on_fail);
    a->on_fail(a->fail_ctx, over_cap);
    IFD_ASSERT(!"jinja arena on_fail returned");
}

void *ja_alloc(jinja_arena *a, size_t n) {
    if (n == 0) n = 1;
    size_t req = n;
    if (n > ((size_t)1 << 40)) ja_fail(a, true);
    n = (n + JA_ALIGN - 1) & ~(size_t)(JA_ALIGN - 1);
    ja_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t want = c ? IFD_MIN(c->size * 2, JA_MAX_CHUNK) : JA_MIN_CHUNK;
        if (want < n) want = n;
        if (a->cap_bytes && a->used_bytes + want > a->cap_bytes) {
            /* try the smallest chunk that fits before giving up */
            want = n;
            if (a->used_bytes + want > a->cap_bytes) ja_fail(a, true);
        }
        ja_chunk *nc = malloc(sizeof(ja_chunk) + want);
        if (!nc) ja_fail(a, false);
        nc->size = want;
        nc->used = 0;
        nc->next = c;
        a->head = nc;
        a->used_bytes += want;
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    a->last_end = (unsigned char *)p + req;
    return p;
}

bool ja_extend_last(jinja_arena *a, const void *end, size_t extra) {
    ja_chunk *c = a->head;
    if (!c || !end || end != a->last_end) return false;
    size_t start_used = (size_t)(a->last_end - c->data);
    size_t new_used = (start_used + extra + JA_ALIGN - 1) & ~(size_t)(JA_ALIGN - 1);
    if (extra > c->size || new_used > c->size) return false;
    c->used = new_used;
    a->last_end += extra;
    return true;
}

void *ja_alloc_array(jinja_arena *a, size_t n, size_t size) {
    size_t total;
    if (!ifd_mul_ok(n, size, &total)) ja_fail(a, true);
    return ja_alloc(a, total);
}

char *ja_strndup(jinja_arena *a, const char *s, size_t n) {
    char *p = ja_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* Grow the most recent allocation in place when possible, else copy. */
static void *ja_grow(jinja_arena *a, void *p, size_t old_n, size_t new_n) {
    if (p && new_n >= old_n && ja_extend_last(a, (unsigned char *)p + old_n, new_n - old_n))
        return p;
    void *np = ja_alloc(a, new_n);
    if (p && old_n) memcpy(np, p, old_n);
    return np;
}

/* ---- constructors ------------------------------------------------------------------ */

jv jv_cstr(const char *s) { return jv_str(s, strlen(s)); }


jv_list *jv_list_new(jr *r, size_t cap) {
    jv_list *l = ja_alloc(&r->arena, sizeof(*l));
    if (cap) {
        l->v = ja_alloc_array(&r->arena, cap, sizeof(jv));
        l->cap = cap;
    }
    return l;
}

void jv_list_push(jr *r, jv_list *l, jv v) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4, bytes;
        if (!ifd_mul_ok(nc, sizeof(jv), &bytes)) jr_fail(r, IFD_ERR_LIMIT, "list too large");
        l->v = ja_grow(&r->arena, l->v, l->cap * sizeof(jv), bytes);
        l->cap = nc;
    }
    l->v[l->n++] = v;
}

jv jv_list_val(jv_list *l) {
    jv v = {0};
    v.t = JV_LIST;
    v.l = l;
    return v;
}

jv_dict *jv_dict_new(jr *r, size_t cap) {
    jv_dict *d = ja_alloc(&r->arena, sizeof(*d));
    if (cap) {
        d->k = ja_alloc_array(&r->arena, cap, sizeof(jv));
        d->v = ja_alloc_array(&r->arena, cap, sizeof(jv));
        d->cap = cap;
    }
    return d;
}

void jv_dict_push(jr *r, jv_dict *d, jv key, jv val) {
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4, bytes;
        if (!ifd_mul_ok(nc, sizeof(jv), &bytes)) jr_fail(r, IFD_ERR_LIMIT, "dict too large");
        jv *nk = ja_alloc(&r->arena, bytes), *nv = ja_alloc(&r->arena, bytes);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
}

static bool key_eq(jr *r, jv a, jv b) {
    if (a.t == JV_STR && b.t == JV_STR) return a.n == b.n && (a.n == 0 || !memcmp(a.s, b.s, a.n));
    if (a.t == JV_STR || b.t == JV_STR) return false;
    return jv_equal(r, a, b);
}

void jv_dict_set(jr *r, jv_dict *d, jv key, jv val) {
    if (d->n > 64) jr_charge(r, d->n / 16);
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(r, d->k[i], key)) {
            d->v[i] = val;
            return;
        }
    jv_dict_push(r, d, key, val);
}

bool jv_dict_get(jr *r, const jv_dict *d, jv key, jv *out) {
    if (d->n > 64) jr_charge(r, d->n / 16);
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(r, d->k[i], key)) {
            *out = d->v[i];
            return true;
        }
    return false;
}

bool jv_dict_get_str(const jv_dict *d, const char *key, size_t n, jv *out) {
    for (size_t i = 0; i < d->n; i++) {
        const jv *k = &d->k[i];
        if (k->t == JV_STR && k->n == n && (n == 0 || !memcmp(k->s, key, n))) {
            *out = d->v[i];
            return true;
        }
    }
    return false;
}

jv jv_dict_val(jv_dict *d) {
    jv v = {0};
    v.t = JV_DICT;
    v.d = d;
    return v;
}

/* ---- type names -------------------------------------------------------------------- */

bool jv_is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }

double jv_as_double(jv v) {
    switch (v.t) {
    case JV_BOOL: return v.b ? 1.0 : 0.0;
    case JV_INT: return (double)v.i;
    case JV_FLOAT: return v.f;
    default: return 0.0;
    }
}

const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return v.safe ? "Markup" : "str";
    case JV_LIST:
        if (v.l->lazy) return v.l->lazy == JL_GENERATOR ? "generator" : "list_reverseiterator";
        return v.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC:
        if (v.fn->kind == JFN_MACRO) return "Macro";
        if (v.fn->kind == JFN_METHOD) return "builtin_function_or_method";
        return "function";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

const char *jv_obj_repr(jv v) {
    switch (v.t) {
    case JV_NONE: return "None";
    case JV_BOOL: return "bool object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_STR: return v.safe ? "markupsafe.Markup object" : "str object";
    case JV_LIST:
        if (v.l->lazy) return v.l->lazy == JL_GENERATOR ? "generator object" : "list_reverseiterator object";
        return v.l->tuple ? "tuple object" : "list object";
    case JV_DICT: return "dict object";
    case JV_NS: return "jinja2.utils.Namespace object";
    case JV_FUNC:
        return v.fn->kind == JFN_MACRO ? "jinja2.runtime.Macro object"
                                       : "builtin_function_or_method object";
    case JV_LOOP: return "jinja2.runtime.LoopContext object";
    case JV_UNDEF: return "jinja2.runtime.Undefined object";
    default: return "object";
    }
}

/* ---- equality and ordering -------------------------------------------------------- */

static bool num_eq(jv a, jv b) {
    if (a.t == JV_FLOAT || b.t == JV_FLOAT) return jv_as_double(a) == jv_as_double(b);
    int64_t x = a.t == JV_BOOL ? a.b : a.i, y = b.t == JV_BOOL ? b.b : b.i;
    return x == y;
}

bool jv_equal(jr *r, jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) return num_eq(a, b);
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE:
    case JV_MISSING: return true;
    case JV_STR: return a.n == b.n && (a.n == 0 || !memcmp(a.s, b.s, a.n));
    case JV_LIST:
        if (a.l == b.l) return true;
        if (a.l->lazy || b.l->lazy) return false;
        if (a.l->tuple != b.l->tuple || a.l->n != b.l->n) return false;
        jr_enter(r);
        for (size_t i = 0; i < a.l->n; i++)
            if (!jv_equal(r, a.l->v[i], b.l->v[i])) {
                jr_leave(r);
                return false;
            }
        jr_leave(r);
        return true;
    case JV_DICT:
        if (a.d == b.d) return true;
        if (a.d->n != b.d->n) return false;
        jr_enter(r);
        for (size_t i = 0; i < a.d->n; i++) {
            jv o;
            if (!jv_dict_get(r, b.d, a.d->k[i], &o) || !jv_equal(r, a.d->v[i], o)) {
                jr_leave(r);
                return false;
            }
        }
        jr_leave(r);
        return true;
    case JV_NS: return a.d == b.d;
    case JV_FUNC: return a.fn == b.fn;
    case JV_LOOP: return a.lp == b.lp;
    default: return false;
    }
}

static int cmp_str(jv a, jv b) {
    size_t m = IFD_MIN(a.n, b.n);
    int c = m ? memcmp(a.s, b.s, m) : 0; /* UTF-8 byte order == code point order */
    if (c) return c < 0 ? -1 : 1;
    return a.n < b.n ? -1 : a.n > b.n ? 1 : 0;
}

int jv_compare(jr *r, jv a, jv b, const char *op) {
    if (a.t == JV_UNDEF) je_undefined_fail(r, a);
    if (b.t == JV_UNDEF) je_undefined_fail(r, b);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.b : a.i, y = b.t == JV_BOOL ? b.b : b.i;
            return x < y ? -1 : x > y;
        }
        double x = jv_as_double(a), y = jv_as_double(b);
        if (x < y) return -1;
        if (x > y) return 1;
        if (x == y) return 0;
        return 2; /* NaN: every ordering is false */
    }
    if (a.t == JV_STR && b.t == JV_STR) return cmp_str(a, b);
    if (a.t == JV_LIST && b.t == JV_LIST && a.l->tuple == b.l->tuple && !a.l->lazy && !b.l->lazy) {
        size_t m = IFD_MIN(a.l->n, b.l->n);
        jr_enter(r);
        for (size_t i = 0; i < m; i++) {
            if (jv_equal(r, a.l->v[i], b.l->v[i])) continue;
            int c = jv_compare(r, a.l->v[i], b.l->v[i], op);
            jr_leave(r);
            return c;
        }
        jr_leave(r);
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    jr_type_error(r, "'%s' not supported between instances of '%s' and '%s'", op,
                  jv_type_name(a), jv_type_name(b));
}

/* ---- jbuf helpers ---------------------------------------------------------------- */

void jbuf_put(jr *r, jbuf *b, const char *s, size_t n) {
    if (!n) return;
    size_t need;
    if (!ifd_add_ok(b->n, n, &need)) jr_fail(r, IFD_ERR_LIMIT, "output too large");
    if (need > r->max_out)
        jr_fail(r, IFD_ERR_LIMIT, "template output exceeds the limit of %zu bytes", r->max_out);
    if (need > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < need) nc *= 2;
        if (nc > r->max_out + 1) nc = r->max_out + 1;
        b->p = ja_grow(&r->arena, b->p, b->cap, nc);
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void jb_puts(jr *r, jbuf *b, const char *s) { jbuf_put(r, b, s, strlen(s)); }

void jb_printf(jr *r, jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof(tmp)) {
        jbuf_put(r, b, tmp, (size_t)k);
        return;
    }
    char *big = ja_alloc(&r->arena, (size_t)k + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    jbuf_put(r, b, big, (size_t)k);
}

jv jb_take(jr *r, jbuf *b) {
    if (!b->n) return jv_str("", 0);
    (void)r;
    return jv_str(b->p, b->n);
}

/* ---- float formatting (Python repr) ---------------------------------------------- */

void jv_fmt_float(char *out, size_t out_bytes, double f) {
    if (isnan(f)) {
        snprintf(out, out_bytes, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, out_bytes, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        snprintf(out, out_bytes, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char buf[48];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, exp10 = 0;
    bool neg = false;
    const char *p = buf;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < (int)sizeof(digits) - 1) digits[nd++] = *p;
    digits[nd] = 0;
    if (*p == 'e') exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    char res[64];
    size_t k = 0;
    if (neg) res[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) res[k++] = i < nd ? digits[i] : '0';
            res[k++] = '.';
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++) res[k++] = digits[i];
            else
                res[k++] = '0';
        } else {
            res[k++] = '0';
            res[k++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) res[k++] = '0';
            for (int i = 0; i < nd; i++) res[k++] = digits[i];
        }
        res[k] = 0;
    } else {
        res[k++] = digits[0];
        if (nd > 1) {
            res[k++] = '.';
            for (int i = 1; i < nd; i++) res[k++] = digits[i];
        }
        res[k] = 0;
        snprintf(res + k, sizeof(res) - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(out, out_bytes, "%s", res);
}

/* ---- str() / repr() ------------------------------------------------------------- */

static void repr_str(jr *r, jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jbuf_put(r, b, &q, 1);
    size_t i = 0;
    while (i < n) {
        size_t adv;
        uint32_t cp = ju_decode(s + i, n - i, &adv);
        char tmp[16];
        if (cp == (uint32_t)q || cp == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)cp;
            jbuf_put(r, b, tmp, 2);
        } else if (cp == '\n') {
            jbuf_put(r, b, "\\n", 2);
        } else if (cp == '\r') {
            jbuf_put(r, b, "\\r", 2);
        } else if (cp == '\t') {
            jbuf_put(r, b, "\\t", 2);
        } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0xa0) || cp == 0xad) {
            snprintf(tmp, sizeof(tmp), "\\x%02x", cp);
            jb_puts(r, b, tmp);
        } else if ((cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
                   (cp >= 0x205f && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff ||
                   (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0xe000 && cp <= 0xf8ff)) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", cp);
            jb_puts(r, b, tmp);
        } else {
            jbuf_put(r, b, s + i, adv);
        }
        i += adv;
    }
    jbuf_put(r, b, &q, 1);
}

static void repr_dict_body(jr *r, jbuf *b, const jv_dict *d) {
    jb_puts(r, b, "{");
    for (size_t i = 0; i < d->n; i++) {
        if (i) jb_puts(r, b, ", ");
        jv_repr(r, b, d->k[i]);
        jb_puts(r, b, ": ");
        jv_repr(r, b, d->v[i]);
    }
    jb_puts(r, b, "}");
}

static void str_common(jr *r, jbuf *b, jv v, bool repr) {
    char tmp[64];
    switch (v.t) {
    case JV_MISSING:
    case JV_UNDEF:
        if (repr) jb_puts(r, b, "Undefined");
        return;
    case JV_NONE: jb_puts(r, b, "None"); return;
    case JV_BOOL: jb_puts(r, b, v.b ? "True" : "False"); return;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v.i);
        jb_puts(r, b, tmp);
        return;
    case JV_FLOAT:
        jv_fmt_float(tmp, sizeof(tmp), v.f);
        jb_puts(r, b, tmp);
        return;
    case JV_STR:
        if (repr) {
            if (v.safe) jb_puts(r, b, "Markup(");
            repr_str(r, b, v.s, v.n);
            if (v.safe) jb_puts(r, b, ")");
        } else {
            jbuf_put(r, b, v.s, v.n);
        }
        return;
    case JV_LIST:
        if (v.l->lazy) {
            jb_printf(r, b, "<%s object at 0x%012llx>", jv_type_name(v),
                      (unsigned long long)(uintptr_t)v.l & 0xffffffffffffull);
            return;
        }
        jr_enter(r);
        jb_puts(r, b, v.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jb_puts(r, b, ", ");
            jv_repr(r, b, v.l->v[i]);
        }
        if (v.l->tuple && v.l->n == 1) jb_puts(r, b, ",");
        jb_puts(r, b, v.l->tuple ? ")" : "]");
        jr_leave(r);
        return;
    case JV_DICT:
        jr_enter(r);
        repr_dict_body(r, b, v.d);
        jr_leave(r);
        return;
    case JV_NS:
        jr_enter(r);
        jb_puts(r, b, "<Namespace ");
        repr_dict_body(r, b, v.d);
        jb_puts(r, b, ">");
        jr_leave(r);
        return;
    case JV_FUNC:
        if (v.fn->kind == JFN_MACRO)
            jb_printf(r, b, "<Macro '%s'>", v.fn->name ? v.fn->name : "caller");
        else
            jb_printf(r, b, "<function %s>", v.fn->name ? v.fn->name : "?");
        return;
    case JV_LOOP:
        jb_printf(r, b, "<LoopContext %zu/%zu>", v.lp->index0 + 1, v.lp->items->n);
        return;
    default: return;
    }
}

void jv_to_str(jr *r, jbuf *b, jv v) { str_common(r, b, v, false); }
void jv_repr(jr *r, jbuf *b, jv v) { str_common(r, b, v, true); }

jv jv_as_str(jr *r, jv v) {
    if (v.t == JV_STR) {
        v.safe = 0;
        return v;
    }
    if (v.t == JV_UNDEF || v.t == JV_MISSING) return jv_str("", 0);
    if (v.t == JV_NONE) return jv_cstr("None");
    if (v.t == JV_BOOL) return jv_cstr(v.b ? "True" : "False");
    jbuf b = {0};
    jv_to_str(r, &b, v);
    return jb_take(r, &b);
}
