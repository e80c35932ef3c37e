/* jinja_methods.c — Python methods templates call on values (str, dict, list, tuple)
 * under ImmutableSandboxedEnvironment rules (mutating list/dict methods are refused),
 * and the globals: range, dict, namespace, and transformers' raise_exception and
 * strftime_now.
 *
 * Runs on the rendering thread. */
#define _GNU_SOURCE /* timegm */
#include "jinja.h"

#include <string.h>
#include <sys/time.h>
#include <time.h>

enum { TY_STR = 1, TY_DICT = 2, TY_LIST = 4, TY_TUPLE = 8 };

enum {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_SWAPCASE, M_CASEFOLD, M_REPLACE, M_FIND,
    M_RFIND, M_INDEX, M_RINDEX, M_COUNT, M_JOIN, M_FORMAT, M_FORMAT_MAP, M_ISALNUM,
    M_ISALPHA, M_ISDIGIT, M_ISDECIMAL, M_ISNUMERIC, M_ISSPACE, M_ISLOWER, M_ISUPPER,
    M_ISTITLE, M_ISASCII, M_ISIDENTIFIER, M_ISPRINTABLE, M_CENTER, M_LJUST, M_RJUST, M_ZFILL,
    M_REMOVEPREFIX, M_REMOVESUFFIX, M_PARTITION, M_RPARTITION, M_EXPANDTABS,
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_COPY, M_LCOUNT, M_LINDEX, M_UNSUPPORTED, M_UNSAFE,
};

static const struct {
    const char *name;
    uint8_t types;
    uint8_t id;
} METHODS[] = {
    {"strip", TY_STR, M_STRIP}, {"lstrip", TY_STR, M_LSTRIP}, {"rstrip", TY_STR, M_RSTRIP},
    {"split", TY_STR, M_SPLIT}, {"rsplit", TY_STR, M_RSPLIT}, {"splitlines", TY_STR, M_SPLITLINES},
    {"startswith", TY_STR, M_STARTSWITH}, {"endswith", TY_STR, M_ENDSWITH},
    {"upper", TY_STR, M_UPPER}, {"lower", TY_STR, M_LOWER}, {"title", TY_STR, M_TITLE},
    {"capitalize", TY_STR, M_CAPITALIZE}, {"swapcase", TY_STR, M_SWAPCASE},
    {"casefold", TY_STR, M_CASEFOLD}, {"replace", TY_STR, M_REPLACE}, {"find", TY_STR, M_FIND},
    {"rfind", TY_STR, M_RFIND}, {"index", TY_STR, M_INDEX}, {"rindex", TY_STR, M_RINDEX},
    {"count", TY_STR, M_COUNT}, {"join", TY_STR, M_JOIN}, {"format", TY_STR, M_FORMAT},
    {"format_map", TY_STR, M_FORMAT_MAP}, {"isalnum", TY_STR, M_ISALNUM},
    {"isalpha", TY_STR, M_ISALPHA}, {"isdigit", TY_STR, M_ISDIGIT},
    {"isdecimal", TY_STR, M_ISDECIMAL}, {"isnumeric", TY_STR, M_ISNUMERIC},
    {"isspace", TY_STR, M_ISSPACE}, {"islower", TY_STR, M_ISLOWER}, {"isupper", TY_STR, M_ISUPPER},
    {"istitle", TY_STR, M_ISTITLE}, {"isascii", TY_STR, M_ISASCII},
    {"isidentifier", TY_STR, M_ISIDENTIFIER}, {"isprintable", TY_STR, M_ISPRINTABLE},
    {"center", TY_STR, M_CENTER}, {"ljust", TY_STR, M_LJUST}, {"rjust", TY_STR, M_RJUST},
    {"zfill", TY_STR, M_ZFILL}, {"removeprefix", TY_STR, M_REMOVEPREFIX},
    {"removesuffix", TY_STR, M_REMOVESUFFIX}, {"partition", TY_STR, M_PARTITION},
    {"rpartition", TY_STR, M_RPARTITION}, {"expandtabs", TY_STR, M_EXPANDTABS},
    {"encode", TY_STR, M_UNSUPPORTED}, {"translate", TY_STR, M_UNSUPPORTED},
    {"maketrans", TY_STR, M_UNSUPPORTED},
    {"get", TY_DICT, M_GET}, {"items", TY_DICT, M_ITEMS}, {"keys", TY_DICT, M_KEYS},
    {"values", TY_DICT, M_VALUES}, {"copy", TY_DICT | TY_LIST, M_COPY},
    {"fromkeys", TY_DICT, M_UNSUPPORTED},
    {"clear", TY_DICT | TY_LIST, M_UNSAFE}, {"pop", TY_DICT | TY_LIST, M_UNSAFE},
    {"popitem", TY_DICT, M_UNSAFE}, {"setdefault", TY_DICT, M_UNSAFE}, {"update", TY_DICT, M_UNSAFE},
    {"count", TY_LIST | TY_TUPLE, M_LCOUNT}, {"index", TY_LIST | TY_TUPLE, M_LINDEX},
    {"append", TY_LIST, M_UNSAFE}, {"extend", TY_LIST, M_UNSAFE}, {"insert", TY_LIST, M_UNSAFE},
    {"remove", TY_LIST, M_UNSAFE}, {"reverse", TY_LIST, M_UNSAFE}, {"sort", TY_LIST, M_UNSAFE},
};

static int type_bit(jv v) {
    switch (v.t) {
    case JV_STR: return TY_STR;
    case JV_DICT: return TY_DICT;
    case JV_LIST: return v.l->lazy ? 0 : v.l->tuple ? TY_TUPLE : TY_LIST;
    default: return 0;
    }
}

bool jm_lookup_method(jr *r, jv obj, const char *name, jv *out) {
    int bit = type_bit(obj);
    if (!bit) return false;
    for (size_t i = 0; i < IFD_ARRAY_LEN(METHODS); i++) {
        if (!(METHODS[i].types & bit) || strcmp(METHODS[i].name, name)) continue;
        if (METHODS[i].id == M_UNSAFE) {
            *out = je_unsafe_attr(r, obj, name);
            return true;
        }
        jv_func *fn = ja_alloc(&r->arena, sizeof(*fn));
        fn->kind = JFN_METHOD;
        fn->id = (int)i;
        fn->self = obj;
        fn->name = METHODS[i].name;
        *out = jv_missing();
        out->t = JV_FUNC;
        out->fn = fn;
        return true;
    }
    return false;
}

#define BIND(fname, ...)                                                   \
    static const char *const P_[] = {__VA_ARGS__};                         \
    jargs_bind(r, fname, a, P_, IFD_ARRAY_LEN(P_), p)
#define GIVEN(x) ((x).t != JV_MISSING)
#define NOARGS(fname)                                                                \
    do {                                                                             \
        if (a->n_pos || a->n_kw) jr_type_error(r, "%s() takes no arguments", fname); \
    } while (0)

static jv need_str_arg(jr *r, jv v, const char *what) {
    if (v.t == JV_UNDEF) je_undefined_fail(r, v);
    if (v.t != JV_STR) jr_type_error(r, "%s must be str, not %s", what, jv_type_name(v));
    return v;
}

static int64_t int_or(jr *r, jv v, int64_t dflt) {
    if (!GIVEN(v) || v.t == JV_NONE) return dflt;
    if (v.t == JV_INT) return v.i;
    if (v.t == JV_BOOL) return v.b;
    jr_type_error(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v));
}

/* clamp Python-style [start:end] code point bounds */
static void str_bounds(jr *r, jv s, jv start, jv end, int64_t *b, int64_t *e) {
    int64_t len = (int64_t)ju_len(s.s, s.n);
    jv st = GIVEN(start) ? start : jv_none(), en = GIVEN(end) ? end : jv_none(), step = jv_int(1);
    ju_slice_indices(r, len, &st, &en, &step, b, e, &step.i);
}

static bool affix_match(jr *r, jv s, jv affix, jv start, jv end, bool suffix) {
    int64_t b, e;
    str_bounds(r, s, start, end, &b, &e);
    if (e < b) return false;
    size_t bb = ju_offset(s.s, s.n, (size_t)b), be = ju_offset(s.s, s.n, (size_t)e);
    jv sub = jv_str(s.s + bb, be - bb);
    jv_list *cands;
    if (affix.t == JV_LIST && affix.l->tuple) {
        cands = affix.l;
    } else {
        if (affix.t != JV_STR)
            jr_type_error(r, "%s first arg must be str or a tuple of str, not %s",
                          suffix ? "endswith" : "startswith", jv_type_name(affix));
        cands = jv_list_new(r, 1);
        cands->v[0] = affix;
        cands->n = 1;
    }
    for (size_t i = 0; i < cands->n; i++) {
        jv c = cands->v[i];
        if (c.t != JV_STR) jr_type_error(r, "tuple for %s must only contain str, not %s",
                                         suffix ? "endswith" : "startswith", jv_type_name(c));
        if (c.n > sub.n) continue;
        if (!memcmp(suffix ? sub.s + sub.n - c.n : sub.s, c.s, c.n)) return true;
    }
    return false;
}

typedef bool (*cp_pred)(uint32_t);
static bool all_cp(jv s, cp_pred pred) {
    if (!s.n) return false;
    size_t i = 0;
    while (i < s.n) {
        size_t adv;
        if (!pred(ju_decode(s.s + i, s.n - i, &adv))) return false;
        i += adv;
    }
    return true;
}
static bool is_ascii_cp(uint32_t cp) { return cp < 0x80; }
static bool is_printable_cp(uint32_t cp) { return cp >= 0x20 && cp != 0x7f && !(cp >= 0x80 && cp < 0xa0) && !ju_islinebreak(cp); }

static jv pad(jr *r, jv s, int64_t width, jv fill, int align) {
    int64_t len = (int64_t)ju_len(s.s, s.n);
    if (width <= len) return s;
    if (width - len > (int64_t)r->max_out) jr_fail(r, IFD_ERR_LIMIT, "string exceeds the output limit");
    if (fill.t != JV_STR || ju_len(fill.s, fill.n) != 1)
        jr_type_error(r, "The fill character must be exactly one character long");
    int64_t marg = width - len, left = align < 0 ? 0 : align > 0 ? marg : marg / 2 + (marg & width & 1);
    jbuf b = {0};
    for (int64_t i = 0; i < left; i++) jbuf_put(r, &b, fill.s, fill.n);
    jbuf_put(r, &b, s.s, s.n);
    for (int64_t i = 0; i < marg - left; i++) jbuf_put(r, &b, fill.s, fill.n);
    return jb_take(r, &b);
}

static jv tuple3(jr *r, jv a, jv b, jv c) {
    jv_list *l = jv_list_new(r, 3);
    l->v[0] = a, l->v[1] = b, l->v[2] = c;
    l->n = 3;
    l->tuple = true;
    return jv_list_val(l);
}

static jv str_method(jr *r, jv s, int id, const char *name, const jargs *a) {
    jv p[4];
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        BIND(name, "chars");
        return ju_strip(r, s, GIVEN(p[0]) ? p[0] : jv_none(), id != M_RSTRIP, id != M_LSTRIP);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        BIND(name, "sep", "maxsplit");
        return ju_split(r, s, p[0], int_or(r, p[1], -1), id == M_RSPLIT);
    }
    case M_SPLITLINES: {
        BIND(name, "keepends");
        return ju_splitlines(r, s, GIVEN(p[0]) && je_truthy(r, p[0]));
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        BIND(name, "prefix", "start", "end");
        if (!GIVEN(p[0])) jr_type_error(r, "%s() takes at least 1 argument (0 given)", name);
        return jv_bool(affix_match(r, s, p[0], p[1], p[2], id == M_ENDSWITH));
    }
    case M_UPPER: NOARGS(name); return ju_case(r, s, 1);
    case M_LOWER:
    case M_CASEFOLD: NOARGS(name); return ju_case(r, s, 0);
    case M_TITLE: NOARGS(name); return ju_case(r, s, 3);
    case M_CAPITALIZE: NOARGS(name); return ju_case(r, s, 2);
    case M_SWAPCASE: NOARGS(name); return ju_case(r, s, 4);
    case M_REPLACE: {
        BIND(name, "old", "new", "count");
        if (!GIVEN(p[0]) || !GIVEN(p[1])) jr_type_error(r, "replace expected at least 2 arguments");
        return ju_replace(r, s, need_str_arg(r, p[0], "replace() argument 1"),
                          need_str_arg(r, p[1], "replace() argument 2"), int_or(r, p[2], -1));
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX: {
        BIND(name, "sub", "start", "end");
        jv sub = need_str_arg(r, GIVEN(p[0]) ? p[0] : jv_none(), "argument");
        int64_t b, e;
        str_bounds(r, s, p[1], p[2], &b, &e);
        int64_t at = ju_find(s, sub, b, e, id == M_RFIND || id == M_RINDEX);
        if (at < 0 && (id == M_INDEX || id == M_RINDEX)) jr_type_error(r, "substring not found");
        return jv_int(at);
    }
    case M_COUNT: {
        BIND(name, "sub", "start", "end");
        jv sub = need_str_arg(r, GIVEN(p[0]) ? p[0] : jv_none(), "argument");
        int64_t b, e;
        str_bounds(r, s, p[1], p[2], &b, &e);
        if (e < b) return jv_int(0);
        size_t bb = ju_offset(s.s, s.n, (size_t)b), be = ju_offset(s.s, s.n, (size_t)e);
        return jv_int(ju_count(jv_str(s.s + bb, be - bb), sub));
    }
    case M_JOIN: {
        BIND(name, "iterable");
        if (!GIVEN(p[0])) jr_type_error(r, "join() takes exactly one argument (0 given)");
        jv_list *items = je_iterate(r, p[0]);
        jbuf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            jv it = items->v[i];
            if (it.t != JV_STR)
                jr_type_error(r, "sequence item %zu: expected str instance, %s found", i, jv_type_name(it));
            if (i) jbuf_put(r, &b, s.s, s.n);
            jbuf_put(r, &b, it.s, it.n);
        }
        return jb_take(r, &b);
    }
    case M_FORMAT: return ju_str_format(r, s, a->pos, a->n_pos, a->kw_names, a->kw, a->n_kw);
    case M_FORMAT_MAP: {
        if (a->n_kw || a->n_pos != 1) jr_type_error(r, "format_map() takes exactly one argument (%zu given)", a->n_pos);
        jv m = a->pos[0];
        if (m.t != JV_DICT) jr_type_error(r, "format_map() argument must be a mapping");
        const char **kn = ja_alloc_array(&r->arena, m.d->n + 1, sizeof(char *));
        for (size_t i = 0; i < m.d->n; i++) {
            jv k = jv_as_str(r, m.d->k[i]);
            kn[i] = ja_strndup(&r->arena, k.s, k.n);
        }
        return ju_str_format(r, s, NULL, 0, kn, m.d->v, m.d->n);
    }
    case M_ISALNUM: NOARGS(name); return jv_bool(all_cp(s, ju_isalnum));
    case M_ISALPHA: NOARGS(name); return jv_bool(all_cp(s, ju_isalpha));
    case M_ISDIGIT:
    case M_ISDECIMAL:
    case M_ISNUMERIC: NOARGS(name); return jv_bool(all_cp(s, ju_isdigit));
    case M_ISSPACE: NOARGS(name); return jv_bool(all_cp(s, ju_isspace));
    case M_ISASCII: NOARGS(name); return jv_bool(s.n == 0 || all_cp(s, is_ascii_cp));
    case M_ISPRINTABLE: NOARGS(name); return jv_bool(s.n == 0 || all_cp(s, is_printable_cp));
    case M_ISLOWER:
    case M_ISUPPER: {
        NOARGS(name);
        bool has = false, upper = id == M_ISUPPER;
        size_t i = 0;
        while (i < s.n) {
            size_t adv;
            uint32_t cp = ju_decode(s.s + i, s.n - i, &adv);
            i += adv;
            bool is_up = ju_lower(cp) != cp, is_lo = ju_upper(cp) != cp;
            if (upper ? is_lo : is_up) return jv_bool(false);
            if (upper ? is_up : is_lo) has = true;
        }
        return jv_bool(has);
    }
    case M_ISTITLE: {
        NOARGS(name);
        jv t = ju_case(r, s, 3);
        bool cased = false;
        for (size_t i = 0; i < s.n; i++) cased |= ju_iscased((unsigned char)s.s[i]) || (unsigned char)s.s[i] >= 0x80;
        return jv_bool(cased && t.n == s.n && !memcmp(t.s, s.s, s.n));
    }
    case M_ISIDENTIFIER: {
        NOARGS(name);
        if (!s.n || (s.s[0] >= '0' && s.s[0] <= '9')) return jv_bool(false);
        for (size_t i = 0; i < s.n; i++) {
            unsigned char c = (unsigned char)s.s[i];
            if (!(c == '_' || c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')))
                return jv_bool(false);
        }
        return jv_bool(true);
    }
    case M_CENTER:
    case M_LJUST:
    case M_RJUST: {
        BIND(name, "width", "fillchar");
        if (!GIVEN(p[0])) jr_type_error(r, "%s() takes at least 1 argument (0 given)", name);
        return pad(r, s, int_or(r, p[0], 0), GIVEN(p[1]) ? p[1] : jv_cstr(" "),
                   id == M_LJUST ? -1 : id == M_RJUST ? 1 : 0);
    }
    case M_ZFILL: {
        BIND(name, "width");
        int64_t w = int_or(r, p[0], 0), len = (int64_t)ju_len(s.s, s.n);
        if (w <= len) return s;
        if (w - len > (int64_t)r->max_out) jr_fail(r, IFD_ERR_LIMIT, "string exceeds the output limit");
        jbuf b = {0};
        size_t signlen = (s.n && (s.s[0] == '+' || s.s[0] == '-')) ? 1 : 0;
        jbuf_put(r, &b, s.s, signlen);
        for (int64_t i = 0; i < w - len; i++) jbuf_put(r, &b, "0", 1);
        jbuf_put(r, &b, s.s + signlen, s.n - signlen);
        return jb_take(r, &b);
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        BIND(name, "affix");
        jv x = need_str_arg(r, GIVEN(p[0]) ? p[0] : jv_none(), "argument");
        if (x.n > s.n) return s;
        if (id == M_REMOVEPREFIX)
            return memcmp(s.s, x.s, x.n) ? s : jv_str(s.s + x.n, s.n - x.n);
        return memcmp(s.s + s.n - x.n, x.s, x.n) ? s : jv_str(s.s, s.n - x.n);
    }
    case M_PARTITION:
    case M_RPARTITION: {
        BIND(name, "sep");
        jv sep = need_str_arg(r, GIVEN(p[0]) ? p[0] : jv_none(), "argument");
        if (!sep.n) jr_type_error(r, "empty separator");
        int64_t at = ju_find(s, sep, 0, (int64_t)ju_len(s.s, s.n), id == M_RPARTITION);
        if (at < 0)
            return id == M_PARTITION ? tuple3(r, s, jv_str("", 0), jv_str("", 0))
                                     : tuple3(r, jv_str("", 0), jv_str("", 0), s);
        size_t off = ju_offset(s.s, s.n, (size_t)at);
        return tuple3(r, jv_str(s.s, off), sep, jv_str(s.s + off + sep.n, s.n - off - sep.n));
    }
    case M_EXPANDTABS: {
        BIND(name, "tabsize");
        int64_t ts = int_or(r, p[0], 8), col = 0;
        jbuf b = {0};
        size_t i = 0;
        while (i < s.n) {
            size_t adv;
            uint32_t cp = ju_decode(s.s + i, s.n - i, &adv);
            if (cp == '\t') {
                if (ts > 0) {
                    int64_t sp = ts - col % ts;
                    if (sp > 4096) jr_fail(r, IFD_ERR_LIMIT, "tab size too large");
                    for (int64_t k = 0; k < sp; k++) jbuf_put(r, &b, " ", 1);
                    col += sp;
                }
            } else {
                jbuf_put(r, &b, s.s + i, adv);
                col = (cp == '\n' || cp == '\r') ? 0 : col + 1;
            }
            i += adv;
        }
        return jb_take(r, &b);
    }
    default: jr_fail(r, IFD_ERR_TEMPLATE, "str.%s() is not supported by this template engine", name);
    }
}

static jv pairs_list(jr *r, jv_dict *d, int which) {
    jv_list *l = jv_list_new(r, d->n);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 0) {
            l->v[i] = d->k[i];
        } else if (which == 1) {
            l->v[i] = d->v[i];
        } else {
            jv_list *t = jv_list_new(r, 2);
            t->v[0] = d->k[i];
            t->v[1] = d->v[i];
            t->n = 2;
            t->tuple = true;
            l->v[i] = jv_list_val(t);
        }
    }
    l->n = d->n;
    return jv_list_val(l);
}

jv jm_call_method(jr *r, jv self, int idx, const jargs *a) {
    if (idx < 0 || (size_t)idx >= IFD_ARRAY_LEN(METHODS)) jr_fail(r, IFD_ERR_INTERNAL, "bad method");
    int id = METHODS[idx].id;
    const char *name = METHODS[idx].name;
    jv p[3];
    jr_enter(r);
    jv out;
    if (self.t == JV_STR) {
        out = str_method(r, self, id, name, a);
    } else {
        switch (id) {
        case M_GET: {
            BIND(name, "key", "default");
            if (!GIVEN(p[0])) jr_type_error(r, "get expected at least 1 argument, got 0");
            if (!jv_dict_get(r, self.d, p[0], &out)) out = GIVEN(p[1]) ? p[1] : jv_none();
            break;
        }
        case M_ITEMS: NOARGS(name); out = pairs_list(r, self.d, 2); break;
        case M_KEYS: NOARGS(name); out = pairs_list(r, self.d, 0); break;
        case M_VALUES: NOARGS(name); out = pairs_list(r, self.d, 1); break;
        case M_COPY:
            NOARGS(name);
            if (self.t == JV_DICT) {
                jv_dict *d = jv_dict_new(r, self.d->n);
                for (size_t i = 0; i < self.d->n; i++) jv_dict_push(r, d, self.d->k[i], self.d->v[i]);
                out = jv_dict_val(d);
            } else {
                jv_list *l = jv_list_new(r, self.l->n);
                if (self.l->n) memcpy(l->v, self.l->v, self.l->n * sizeof(jv));
                l->n = self.l->n;
                out = jv_list_val(l);
            }
            break;
        case M_LCOUNT:
        case M_LINDEX: {
            BIND(name, "value");
            if (!GIVEN(p[0])) jr_type_error(r, "%s() takes exactly one argument (0 given)", name);
            int64_t count = 0, first = -1;
            for (size_t i = 0; i < self.l->n; i++)
                if (jv_equal(r, self.l->v[i], p[0])) {
                    if (first < 0) first = (int64_t)i;
                    count++;
                }
            if (id == M_LINDEX && first < 0) {
                jbuf b = {0};
                jv_repr(r, &b, p[0]);
                jb_puts(r, &b, " is not in list");
                jbuf_put(r, &b, "", 1);
                jr_type_error(r, "%s", b.p);
            }
            out = jv_int(id == M_LCOUNT ? count : first);
            break;
        }
        default: jr_fail(r, IFD_ERR_TEMPLATE, "%s.%s() is not supported by this template engine", jv_type_name(self), name);
        }
    }
    jr_leave(r);
    return out;
}

/* ---- globals ------------------------------------------------------------------------------ */

enum { G_RANGE, G_DICT, G_NAMESPACE, G_RAISE, G_STRFTIME };
static const char *const GLOBALS[] = {"range", "dict", "namespace", "raise_exception", "strftime_now"};

int jm_global_find(const char *name) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(GLOBALS); i++)
        if (!strcmp(GLOBALS[i], name)) return (int)i;
    return -1;
}

const char *jm_global_name(int id) {
    return id >= 0 && (size_t)id < IFD_ARRAY_LEN(GLOBALS) ? GLOBALS[id] : "?";
}

#define MAX_RANGE 100000

static jv g_range(jr *r, const jargs *a) {
    if (a->n_kw) jr_type_error(r, "range() takes no keyword arguments");
    if (a->n_pos < 1 || a->n_pos > 3) jr_type_error(r, "range expected 1 to 3 arguments, got %zu", a->n_pos);
    int64_t v[3] = {0, 0, 0};
    for (size_t i = 0; i < a->n_pos; i++) {
        jv x = a->pos[i];
        if (x.t == JV_UNDEF) je_undefined_fail(r, x);
        if (x.t == JV_INT) v[i] = x.i;
        else if (x.t == JV_BOOL) v[i] = x.b;
        else jr_type_error(r, "'%s' object cannot be interpreted as an integer", jv_type_name(x));
    }
    int64_t start = 0, stop, step = 1;
    if (a->n_pos == 1) {
        stop = v[0];
    } else {
        start = v[0];
        stop = v[1];
        if (a->n_pos == 3) step = v[2];
    }
    if (step == 0) jr_type_error(r, "range() arg 3 must not be zero");
    double count_d = step > 0 ? ((double)stop - (double)start) / (double)step
                              : ((double)start - (double)stop) / (double)-step;
    if (count_d > MAX_RANGE)
        jr_fail(r, IFD_ERR_TEMPLATE, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    jv_list *l = jv_list_new(r, 0);
    for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step) {
        jv_list_push(r, l, jv_int(x));
        if (l->n > MAX_RANGE) break;
    }
    return jv_list_val(l);
}

static void dict_update_from(jr *r, jv_dict *d, jv src, const char *who) {
    if (src.t == JV_DICT || src.t == JV_NS) {
        for (size_t i = 0; i < src.d->n; i++) jv_dict_set(r, d, src.d->k[i], src.d->v[i]);
        return;
    }
    jv_list *items = je_iterate(r, src);
    for (size_t i = 0; i < items->n; i++) {
        jv_list *pair = je_iterate(r, items->v[i]);
        if (pair->n != 2)
            jr_type_error(r, "%s update sequence element #%zu has length %zu; 2 is required", who, i, pair->n);
        jv_dict_set(r, d, pair->v[0], pair->v[1]);
    }
}

static void fmt_time(jr *r, jbuf *b, const char *fmt, size_t n) {
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    long usec = 0;
    if (r->have_now) {
        tm.tm_year = r->now_tm[0] - 1900;
        tm.tm_mon = r->now_tm[1] - 1;
        tm.tm_mday = r->now_tm[2];
        tm.tm_hour = r->now_tm[3];
        tm.tm_min = r->now_tm[4];
        tm.tm_sec = r->now_tm[5];
        time_t t = timegm(&tm); /* fills wday/yday without a time zone */
        gmtime_r(&t, &tm);
    } else {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        time_t t = tv.tv_sec;
        localtime_r(&t, &tm);
        usec = (long)tv.tv_usec;
    }
    /* Python adds %f (microseconds); hand the rest to strftime one directive at a time */
    for (size_t i = 0; i < n; i++) {
        if (fmt[i] != '%' || i + 1 >= n) {
            jbuf_put(r, b, fmt + i, 1);
            continue;
        }
        size_t j = i + 1;
        while (j < n && (fmt[j] == '-' || fmt[j] == '_' || fmt[j] == '0' || fmt[j] == '^' || fmt[j] == '#' ||
                         fmt[j] == 'E' || fmt[j] == 'O'))
            j++;
        if (j >= n) {
            jbuf_put(r, b, fmt + i, n - i);
            break;
        }
        if (fmt[j] == 'f') {
            jb_printf(r, b, "%06ld", usec);
        } else {
            char spec[16], out[256];
            size_t k = j - i + 1;
            if (k >= sizeof(spec)) k = sizeof(spec) - 1;
            memcpy(spec, fmt + i, k);
            spec[k] = 0;
            size_t w = strftime(out, sizeof(out), spec, &tm);
            jbuf_put(r, b, out, w);
        }
        i = j;
    }
}

jv jm_call_global(jr *r, int id, const jargs *a) {
    switch (id) {
    case G_RANGE: return g_range(r, a);
    case G_DICT: {
        jv_dict *d = jv_dict_new(r, 0);
        if (a->n_pos > 1) jr_type_error(r, "dict expected at most 1 argument, got %zu", a->n_pos);
        if (a->n_pos) dict_update_from(r, d, a->pos[0], "dictionary");
        for (size_t i = 0; i < a->n_kw; i++) jv_dict_set(r, d, jv_cstr(a->kw_names[i]), a->kw[i]);
        return jv_dict_val(d);
    }
    case G_NAMESPACE: {
        jv_dict *d = jv_dict_new(r, 0);
        if (a->n_pos > 1) jr_type_error(r, "dict expected at most 1 argument, got %zu", a->n_pos);
        if (a->n_pos) dict_update_from(r, d, a->pos[0], "dictionary");
        for (size_t i = 0; i < a->n_kw; i++) jv_dict_set(r, d, jv_cstr(a->kw_names[i]), a->kw[i]);
        jv v = jv_dict_val(d);
        v.t = JV_NS;
        return v;
    }
    case G_RAISE: {
        if (a->n_pos != 1 || a->n_kw) jr_type_error(r, "raise_exception() takes exactly one argument");
        jv msg = jv_as_str(r, a->pos[0]);
        jr_fail(r, IFD_ERR_TEMPLATE, "%.*s", (int)IFD_MIN(msg.n, (size_t)1 << 20), msg.s);
    }
    case G_STRFTIME: {
        static const char *const P[] = {"format"};
        jv p[1];
        jargs_bind(r, "strftime_now", a, P, 1, p);
        if (p[0].t != JV_STR) jr_type_error(r, "strftime() argument 1 must be str, not %s", jv_type_name(p[0]));
        jbuf b = {0};
        fmt_time(r, &b, p[0].s, p[0].n);
        return jb_take(r, &b);
    }
    default: jr_fail(r, IFD_ERR_INTERNAL, "bad global");
    }
}
