/* jinja_filters.c — jinja2's builtin filters (as far as chat templates reach them) plus
 * transformers' tojson. Generators in jinja2 (map, select, ...) are lists here, so
 * printing one shows the list instead of "<generator object>".
 *
 * Not implemented (error "No filter named ..."): filesizeformat, random, striptags,
 * urlencode, urlize, wordwrap, xmlattr. Runs on the rendering thread. */
#include "jinja.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef jv (*filter_fn)(jr *r, jv v, const jargs *a);

#define BIND(fname, ...)                                                   \
    static const char *const P_[] = {__VA_ARGS__};                         \
    jv p[IFD_ARRAY_LEN(P_)];                                               \
    jargs_bind(r, fname, a, P_, IFD_ARRAY_LEN(P_), p)
#define GIVEN(x) ((x).t != JV_MISSING)

static void no_args(jr *r, const char *fname, const jargs *a) {
    if (a->n_pos || a->n_kw) jr_type_error(r, "%s() takes no arguments", fname);
}

static jv need_str(jr *r, jv v) {
    if (v.t == JV_UNDEF && v.u && v.u->security) je_undefined_fail(r, v);
    return jv_as_str(r, v);
}

static bool bool_arg(jr *r, jv v, bool dflt) { return GIVEN(v) ? je_truthy(r, v) : dflt; }

static int64_t int_arg(jr *r, jv v, int64_t dflt, const char *what) {
    if (!GIVEN(v) || v.t == JV_NONE) return dflt;
    if (v.t == JV_INT) return v.i;
    if (v.t == JV_BOOL) return v.b;
    jr_type_error(r, "'%s' object cannot be interpreted as an integer (%s)", jv_type_name(v), what);
}

static jv lower_if_str(jr *r, jv v) { return v.t == JV_STR ? ju_case(r, v, 0) : v; }

/* make_attrgetter: "a.b.0" walks items (ints for digit parts) */
static jv attr_get(jr *r, jv item, jv attribute, jv dflt) {
    if (!GIVEN(attribute) || attribute.t == JV_NONE) return item;
    if (attribute.t != JV_STR) {
        item = je_getitem(r, item, attribute);
        if (GIVEN(dflt) && dflt.t != JV_NONE && item.t == JV_UNDEF) item = dflt;
        return item;
    }
    size_t i = 0;
    while (i <= attribute.n) {
        const char *dot = memchr(attribute.s + i, '.', attribute.n - i);
        size_t e = dot ? (size_t)(dot - attribute.s) : attribute.n;
        jv part = jv_str(attribute.s + i, e - i);
        bool digits = part.n > 0;
        int64_t num = 0;
        for (size_t k = 0; k < part.n; k++) {
            if (part.s[k] < '0' || part.s[k] > '9') {
                digits = false;
                break;
            }
            if (num > 100000000) {
                digits = false;
                break;
            }
            num = num * 10 + (part.s[k] - '0');
        }
        item = je_getitem(r, item, digits ? jv_int(num) : part);
        if (GIVEN(dflt) && dflt.t != JV_NONE && item.t == JV_UNDEF) item = dflt;
        i = e + 1;
        if (!dot) break;
    }
    return item;
}

/* stable merge sort of vals by keys (Python's sorted: reverse keeps equal items in order) */
static void merge_sort(jr *r, jv *keys, jv *vals, jv *tk, jv *tv, size_t n, bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(r, keys, vals, tk, tv, h, reverse);
    merge_sort(r, keys + h, vals + h, tk, tv, n - h, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        jr_step(r);
        int c = reverse ? jv_compare(r, keys[i], keys[j], "<") : jv_compare(r, keys[j], keys[i], "<");
        /* take from the right only when strictly before */
        if (c == -1) {
            tk[k] = keys[j];
            tv[k++] = vals[j++];
        } else {
            tk[k] = keys[i];
            tv[k++] = vals[i++];
        }
    }
    while (i < h) tk[k] = keys[i], tv[k++] = vals[i++];
    while (j < n) tk[k] = keys[j], tv[k++] = vals[j++];
    memcpy(keys, tk, n * sizeof(jv));
    memcpy(vals, tv, n * sizeof(jv));
}

static void sort_by_keys(jr *r, jv *keys, jv *vals, size_t n, bool reverse) {
    jv *tk = ja_alloc_array(&r->arena, n ? n : 1, sizeof(jv));
    jv *tv = ja_alloc_array(&r->arena, n ? n : 1, sizeof(jv));
    merge_sort(r, keys, vals, tk, tv, n, reverse);
}


static jv lazy(jv v, int kind) {
    v.l->lazy = (uint8_t)kind;
    return v;
}

static jv copy_list(jr *r, jv_list *src, size_t n) {
    jv_list *l = jv_list_new(r, n);
    if (n) memcpy(l->v, src->v, n * sizeof(jv));
    l->n = n;
    return jv_list_val(l);
}

static size_t py_len(jr *r, jv v) {
    switch (v.t) {
    case JV_STR: return ju_len(v.s, v.n);
    case JV_LIST:
        if (v.l->lazy) jr_type_error(r, "object of type '%s' has no len()", jv_type_name(v));
        return v.l->n;
    case JV_DICT: return v.d->n;
    case JV_UNDEF:
        if (v.u && v.u->security) je_undefined_fail(r, v);
        return 0;
    case JV_LOOP: return v.lp->items->n;
    default: jr_type_error(r, "object of type '%s' has no len()", jv_type_name(v));
    }
}

/* ---- the filters --------------------------------------------------------------------- */

static jv f_abs(jr *r, jv v, const jargs *a) {
    no_args(r, "abs", a);
    if (v.t == JV_INT) return v.i < 0 ? (v.i == INT64_MIN ? jv_float(-(double)v.i) : jv_int(-v.i)) : v;
    if (v.t == JV_BOOL) return jv_int(v.b);
    if (v.t == JV_FLOAT) return jv_float(fabs(v.f));
    jr_type_error(r, "bad operand type for abs(): '%s'", jv_type_name(v));
}

static jv f_attr(jr *r, jv v, const jargs *a) {
    BIND("attr", "name");
    jv name = need_str(r, p[0]);
    const char *n = ja_strndup(&r->arena, name.s, name.n);
    jv out;
    if (v.t == JV_DICT) {
        if (jm_lookup_method(r, v, n, &out)) return out;
        return je_make_undef(r, n, v, false);
    }
    return je_getattr(r, v, n);
}

static jv f_batch(jr *r, jv v, const jargs *a) {
    BIND("batch", "linecount", "fill_with");
    int64_t per = int_arg(r, p[0], 0, "linecount");
    if (per <= 0) jr_type_error(r, "batch linecount must be positive");
    jv_list *items = je_iterate(r, v), *out = jv_list_new(r, 0), *cur = NULL;
    for (size_t i = 0; i < items->n; i++) {
        if (!cur || (int64_t)cur->n == per) {
            cur = jv_list_new(r, 0);
            jv_list_push(r, out, jv_list_val(cur));
        }
        jv_list_push(r, cur, items->v[i]);
    }
    if (cur && GIVEN(p[1]) && p[1].t != JV_NONE)
        while ((int64_t)cur->n < per) jv_list_push(r, cur, p[1]);
    return lazy(jv_list_val(out), JL_GENERATOR);
}

static jv f_capitalize(jr *r, jv v, const jargs *a) { no_args(r, "capitalize", a); return ju_case(r, need_str(r, v), 2); }
static jv f_lower(jr *r, jv v, const jargs *a) { no_args(r, "lower", a); return ju_case(r, need_str(r, v), 0); }
static jv f_upper(jr *r, jv v, const jargs *a) { no_args(r, "upper", a); return ju_case(r, need_str(r, v), 1); }

static jv pad_center(jr *r, jv s, int64_t width) {
    int64_t len = (int64_t)ju_len(s.s, s.n);
    if (width <= len) return s;
    int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
    if (marg > (int64_t)r->max_out) jr_fail(r, IFD_ERR_LIMIT, "string exceeds the output limit");
    jbuf b = {0};
    for (int64_t i = 0; i < left; i++) jbuf_put(r, &b, " ", 1);
    jbuf_put(r, &b, s.s, s.n);
    for (int64_t i = 0; i < marg - left; i++) jbuf_put(r, &b, " ", 1);
    return jb_take(r, &b);
}

static jv f_center(jr *r, jv v, const jargs *a) {
    BIND("center", "width");
    return pad_center(r, need_str(r, v), int_arg(r, p[0], 80, "width"));
}

static jv f_length(jr *r, jv v, const jargs *a) {
    no_args(r, "length", a);
    return jv_int((int64_t)py_len(r, v));
}

static jv f_default(jr *r, jv v, const jargs *a) {
    BIND("default", "default_value", "boolean");
    if (v.t == JV_UNDEF || (bool_arg(r, p[1], false) && !je_truthy(r, v)))
        return GIVEN(p[0]) ? p[0] : jv_str("", 0);
    return v;
}

static jv f_dictsort(jr *r, jv v, const jargs *a) {
    BIND("dictsort", "case_sensitive", "by", "reverse");
    if (v.t == JV_UNDEF) je_undefined_fail(r, v);
    if (v.t != JV_DICT) jr_type_error(r, "'%s' object has no attribute 'items'", jv_type_name(v));
    int pos = 0;
    if (GIVEN(p[1])) {
        jv by = need_str(r, p[1]);
        if (by.n == 5 && !memcmp(by.s, "value", 5)) pos = 1;
        else if (!(by.n == 3 && !memcmp(by.s, "key", 3)))
            jr_fail(r, IFD_ERR_TEMPLATE, "You can only sort by either \"key\" or \"value\"");
    }
    size_t n = v.d->n;
    jv *keys = ja_alloc_array(&r->arena, n ? n : 1, sizeof(jv));
    jv *vals = ja_alloc_array(&r->arena, n ? n : 1, sizeof(jv));
    bool cs = bool_arg(r, p[0], false);
    for (size_t i = 0; i < n; i++) {
        jv_list *t = jv_list_new(r, 2);
        t->v[0] = v.d->k[i];
        t->v[1] = v.d->v[i];
        t->n = 2;
        t->tuple = true;
        vals[i] = jv_list_val(t);
        keys[i] = cs ? t->v[pos] : lower_if_str(r, t->v[pos]);
    }
    sort_by_keys(r, keys, vals, n, bool_arg(r, p[2], false));
    jv_list *l = jv_list_new(r, n);
    if (n) memcpy(l->v, vals, n * sizeof(jv));
    l->n = n;
    return jv_list_val(l);
}

static jv f_escape(jr *r, jv v, const jargs *a) {
    no_args(r, "escape", a);
    if (v.t == JV_STR && v.safe) return v;
    return ju_html_escape(r, need_str(r, v));
}

static jv f_forceescape(jr *r, jv v, const jargs *a) {
    no_args(r, "forceescape", a);
    return ju_html_escape(r, need_str(r, v));
}

static jv f_safe(jr *r, jv v, const jargs *a) {
    no_args(r, "safe", a);
    jv s = need_str(r, v);
    s.safe = 1;
    return s;
}

static jv f_first(jr *r, jv v, const jargs *a) {
    no_args(r, "first", a);
    if (v.t == JV_LIST) {
        if (v.l->n) return v.l->v[0];
    } else {
        jv_list *l = je_iterate(r, v);
        if (l->n) return l->v[0];
    }
    jv u = je_make_undef(r, NULL, jv_missing(), false);
    u.u->hint = "No first item, sequence was empty.";
    return u;
}

static jv f_last(jr *r, jv v, const jargs *a) {
    no_args(r, "last", a);
    if (v.t == JV_UNDEF) {
        jv u = je_make_undef(r, NULL, jv_missing(), false);
        u.u->hint = "No last item, sequence was empty.";
        return u;
    }
    if ((v.t != JV_STR && v.t != JV_LIST && v.t != JV_DICT) || (v.t == JV_LIST && v.l->lazy))
        jr_type_error(r, "'%s' object is not reversible", jv_type_name(v));
    jv_list *l = je_iterate(r, v);
    if (l->n) return l->v[l->n - 1];
    jv u = je_make_undef(r, NULL, jv_missing(), false);
    u.u->hint = "No last item, sequence was empty.";
    return u;
}

/* Python float(str) / int(str) parsing with surrounding whitespace and '_' */
static bool parse_number(jv s, bool want_int, int base, int64_t *iv, double *fv) {
    char tmp[128];
    size_t b = 0, e = s.n, k = 0;
    while (b < e && (s.s[b] == ' ' || (s.s[b] >= '\t' && s.s[b] <= '\r'))) b++;
    while (e > b && (s.s[e - 1] == ' ' || (s.s[e - 1] >= '\t' && s.s[e - 1] <= '\r'))) e--;
    if (e == b || e - b >= sizeof(tmp)) return false;
    for (size_t i = b; i < e; i++) {
        if (s.s[i] == '_') {
            if (i == b || i + 1 == e || s.s[i - 1] == '_') return false;
            continue;
        }
        tmp[k++] = s.s[i];
    }
    tmp[k] = 0;
    char *end;
    if (want_int) {
        const char *q = tmp;
        if (*q == '+' || *q == '-') q++;
        if (base == 10 && q[0] == '0' && q[1] && q[1] != '0') return false;
        if (*q == '+' || *q == '-') return false;
        for (const char *c = q; *c; c++)
            if (!((*c >= '0' && *c <= '9') || ((*c | 0x20) >= 'a' && (*c | 0x20) <= 'z'))) return false;
        /* an optional 0b/0o/0x prefix matching the base (base 0: any, as Python) */
        char *digits = (char *)q;
        if (q[0] == '0' && q[1]) {
            char pc = (char)(q[1] | 0x20);
            int pb = pc == 'b' ? 2 : pc == 'o' ? 8 : pc == 'x' ? 16 : 0;
            if (pb && (base == 0 || base == pb)) {
                base = pb;
                digits = (char *)q + 2;
            }
        }
        if (base == 0) base = 10;
        if (!*digits) return false;
        long long x = strtoll(digits, &end, base);
        if (tmp[0] == '-') x = -x;
        if (*end) return false;
        *iv = x;
        return true;
    }
    for (const char *c = tmp; *c; c++)
        if (*c == 'x' || *c == 'X' || *c == 'p' || *c == 'P') return false; /* no hex floats */
    double d = strtod(tmp, &end);
    if (*end) return false;
    *fv = d;
    return true;
}

static jv f_int(jr *r, jv v, const jargs *a) {
    BIND("int", "default", "base");
    jv dflt = GIVEN(p[0]) ? p[0] : jv_int(0);
    int64_t base = int_arg(r, p[1], 10, "base");
    int64_t iv;
    double fv;
    switch (v.t) {
    case JV_UNDEF: je_undefined_fail(r, v); /* int(Undefined) raises */
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.b);
    case JV_FLOAT:
        if (!isfinite(v.f)) jr_type_error(r, "cannot convert float %s to integer", isnan(v.f) ? "NaN" : "infinity");
        return fabs(v.f) < 9.2e18 ? jv_int((int64_t)v.f) : jv_float(trunc(v.f));
    case JV_STR:
        if ((base == 0 || (base >= 2 && base <= 36)) && parse_number(v, true, (int)base, &iv, &fv))
            return jv_int(iv);
        if (parse_number(v, false, 10, &iv, &fv)) {
            if (!isfinite(fv)) jr_type_error(r, "cannot convert float %s to integer", isnan(fv) ? "NaN" : "infinity");
            return fabs(fv) < 9.2e18 ? jv_int((int64_t)fv) : jv_float(trunc(fv));
        }
        return dflt;
    default: return dflt;
    }
}

static jv f_float(jr *r, jv v, const jargs *a) {
    BIND("float", "default");
    jv dflt = GIVEN(p[0]) ? p[0] : jv_float(0.0);
    int64_t iv;
    double fv;
    switch (v.t) {
    case JV_UNDEF: je_undefined_fail(r, v); /* float(Undefined) raises */
    case JV_FLOAT: return v;
    case JV_INT: return jv_float((double)v.i);
    case JV_BOOL: return jv_float(v.b);
    case JV_STR: return parse_number(v, false, 10, &iv, &fv) ? jv_float(fv) : dflt;
    default: return dflt;
    }
}

static jv f_format(jr *r, jv v, const jargs *a) {
    if (a->n_pos && a->n_kw) jr_fail(r, IFD_ERR_TEMPLATE, "can't handle positional and keyword arguments at the same time");
    jv s = need_str(r, v);
    if (a->n_kw) {
        jv_dict *d = jv_dict_new(r, a->n_kw);
        for (size_t i = 0; i < a->n_kw; i++) jv_dict_push(r, d, jv_cstr(a->kw_names[i]), a->kw[i]);
        return ju_percent_format(r, s, jv_dict_val(d));
    }
    jv_list *l = jv_list_new(r, a->n_pos);
    if (a->n_pos) memcpy(l->v, a->pos, a->n_pos * sizeof(jv));
    l->n = a->n_pos;
    l->tuple = true;
    return ju_percent_format(r, s, jv_list_val(l));
}

static jv f_groupby(jr *r, jv v, const jargs *a) {
    BIND("groupby", "attribute", "default", "case_sensitive");
    jv_list *items = je_iterate(r, v);
    size_t n = items->n;
    bool cs = bool_arg(r, p[2], false);
    jv *keys = ja_alloc_array(&r->arena, n ? n : 1, sizeof(jv));
    jv *vals = ja_alloc_array(&r->arena, n ? n : 1, sizeof(jv));
    for (size_t i = 0; i < n; i++) {
        vals[i] = items->v[i];
        jv k = attr_get(r, items->v[i], p[0], p[1]);
        keys[i] = cs ? k : lower_if_str(r, k);
    }
    sort_by_keys(r, keys, vals, n, false);
    jv_list *out = jv_list_new(r, 0);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && jv_equal(r, keys[j], keys[i])) j++;
        jv_list *t = jv_list_new(r, 2);
        t->v[0] = cs ? keys[i] : attr_get(r, vals[i], p[0], p[1]);
        jv_list *grp = jv_list_new(r, j - i);
        memcpy(grp->v, vals + i, (j - i) * sizeof(jv));
        grp->n = j - i;
        t->v[1] = jv_list_val(grp);
        t->n = 2;
        t->tuple = true;
        jv_list_push(r, out, jv_list_val(t));
        i = j;
    }
    return jv_list_val(out);
}

static jv f_indent(jr *r, jv v, const jargs *a) {
    BIND("indent", "width", "first", "blank");
    if (v.t == JV_UNDEF) je_undefined_fail(r, v); /* s += "\n" on Undefined */
    if (v.t != JV_STR) jr_type_error(r, "unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(v));
    jv s = v;
    jv ind;
    if (GIVEN(p[0]) && p[0].t == JV_STR) {
        ind = p[0];
    } else {
        int64_t w = int_arg(r, p[0], 4, "width");
        if (w < 0) w = 0;
        if (w > 4096) jr_fail(r, IFD_ERR_LIMIT, "indent width too large");
        char *sp = ja_alloc(&r->arena, (size_t)w + 1);
        memset(sp, ' ', (size_t)w);
        ind = jv_str(sp, (size_t)w);
    }
    bool first = bool_arg(r, p[1], false), blank = bool_arg(r, p[2], false);
    jbuf b = {0};
    jbuf_put(r, &b, s.s, s.n);
    jbuf_put(r, &b, "\n", 1);
    jv_list *lines = ju_splitlines(r, jb_take(r, &b), false).l;
    jbuf o = {0};
    for (size_t i = 0; i < lines->n; i++) {
        jv ln = lines->v[i];
        if (i) {
            jbuf_put(r, &o, "\n", 1);
            if (blank || ln.n) jbuf_put(r, &o, ind.s, ind.n);
        }
        jbuf_put(r, &o, ln.s, ln.n);
    }
    jv rv = jb_take(r, &o);
    if (first) {
        jbuf f = {0};
        jbuf_put(r, &f, ind.s, ind.n);
        jbuf_put(r, &f, rv.s, rv.n);
        rv = jb_take(r, &f);
    }
    return rv;
}

static jv f_items(jr *r, jv v, const jargs *a) {
    no_args(r, "items", a);
    if (v.t == JV_UNDEF) return lazy(jv_list_val(jv_list_new(r, 0)), JL_GENERATOR);
    if (v.t != JV_DICT) jr_type_error(r, "Can only get item pairs from a mapping.");
    jv_list *l = jv_list_new(r, v.d->n);
    for (size_t i = 0; i < v.d->n; i++) {
        jv_list *t = jv_list_new(r, 2);
        t->v[0] = v.d->k[i];
        t->v[1] = v.d->v[i];
        t->n = 2;
        t->tuple = true;
        l->v[l->n++] = jv_list_val(t);
    }
    return lazy(jv_list_val(l), JL_GENERATOR);
}

static jv f_join(jr *r, jv v, const jargs *a) {
    BIND("join", "d", "attribute");
    jv sep = GIVEN(p[0]) ? need_str(r, p[0]) : jv_str("", 0);
    jv_list *items = je_iterate(r, v);
    jbuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        jr_step(r);
        if (i) jbuf_put(r, &b, sep.s, sep.n);
        jv it = GIVEN(p[1]) ? attr_get(r, items->v[i], p[1], jv_missing()) : items->v[i];
        if (it.t == JV_STR) jbuf_put(r, &b, it.s, it.n);
        else jv_to_str(r, &b, it);
    }
    return jb_take(r, &b);
}

static jv f_list(jr *r, jv v, const jargs *a) {
    no_args(r, "list", a);
    jv_list *l = je_iterate(r, v);
    return copy_list(r, l, l->n);
}

static jv f_map(jr *r, jv v, const jargs *a) {
    jv_list *out = jv_list_new(r, 0);
    if (!je_truthy(r, v)) return lazy(jv_list_val(out), JL_GENERATOR);
    jv_list *items = je_iterate(r, v);
    if (a->n_pos == 0) {
        jv attribute = jv_missing(), dflt = jv_missing();
        for (size_t k = 0; k < a->n_kw; k++) {
            if (!strcmp(a->kw_names[k], "attribute")) attribute = a->kw[k];
            else if (!strcmp(a->kw_names[k], "default")) dflt = a->kw[k];
            else jr_fail(r, IFD_ERR_TEMPLATE, "Unexpected keyword argument '%s'", a->kw_names[k]);
        }
        if (!GIVEN(attribute)) jr_fail(r, IFD_ERR_TEMPLATE, "map requires a filter argument");
        for (size_t i = 0; i < items->n; i++) {
            jr_step(r);
            jv_list_push(r, out, attr_get(r, items->v[i], attribute, dflt));
        }
        return lazy(jv_list_val(out), JL_GENERATOR);
    }
    jv fname = need_str(r, a->pos[0]);
    const char *name = ja_strndup(&r->arena, fname.s, fname.n);
    jargs rest = {a->pos + 1, a->n_pos - 1, a->kw_names, a->kw, a->n_kw};
    for (size_t i = 0; i < items->n; i++) {
        jr_step(r);
        jv_list_push(r, out, jinja_filter_by_name(r, name, items->v[i], &rest));
    }
    return lazy(jv_list_val(out), JL_GENERATOR);
}

static jv minmax(jr *r, jv v, const jargs *a, bool want_max) {
    BIND(want_max ? "max" : "min", "case_sensitive", "attribute");
    jv_list *items = je_iterate(r, v);
    if (!items->n) {
        jv u = je_make_undef(r, NULL, jv_missing(), false);
        u.u->hint = "No aggregated item, sequence was empty.";
        return u;
    }
    bool cs = bool_arg(r, p[0], false);
    size_t best = 0;
    jv bestk = attr_get(r, items->v[0], p[1], jv_missing());
    if (!cs) bestk = lower_if_str(r, bestk);
    for (size_t i = 1; i < items->n; i++) {
        jr_step(r);
        jv k = attr_get(r, items->v[i], p[1], jv_missing());
        if (!cs) k = lower_if_str(r, k);
        int c = jv_compare(r, k, bestk, want_max ? ">" : "<");
        if (c == (want_max ? 1 : -1)) {
            best = i;
            bestk = k;
        }
    }
    return items->v[best];
}
static jv f_max(jr *r, jv v, const jargs *a) { return minmax(r, v, a, true); }
static jv f_min(jr *r, jv v, const jargs *a) { return minmax(r, v, a, false); }

static jv f_pprint(jr *r, jv v, const jargs *a) {
    no_args(r, "pprint", a);
    jbuf b = {0};
    jv_repr(r, &b, v);
    return jb_take(r, &b);
}

static jv select_common(jr *r, jv v, const jargs *a, bool reject, bool by_attr) {
    jv_list *out = jv_list_new(r, 0);
    if (!je_truthy(r, v)) return lazy(jv_list_val(out), JL_GENERATOR);
    size_t off = 0;
    jv attribute = jv_missing();
    if (by_attr) {
        if (!a->n_pos) jr_fail(r, IFD_ERR_TEMPLATE, "Missing parameter for attribute name");
        attribute = a->pos[0];
        off = 1;
    }
    const char *test = NULL;
    if (a->n_pos > off) {
        jv tn = need_str(r, a->pos[off]);
        test = ja_strndup(&r->arena, tn.s, tn.n);
        off++;
    }
    jargs rest = {a->n_pos > off ? a->pos + off : NULL, a->n_pos > off ? a->n_pos - off : 0, a->kw_names, a->kw, a->n_kw};
    jv_list *items = je_iterate(r, v);
    for (size_t i = 0; i < items->n; i++) {
        jr_step(r);
        jv x = by_attr ? attr_get(r, items->v[i], attribute, jv_missing()) : items->v[i];
        bool ok = test ? jinja_test_by_name(r, test, x, &rest) : je_truthy(r, x);
        if (ok != reject) jv_list_push(r, out, items->v[i]);
    }
    return lazy(jv_list_val(out), JL_GENERATOR);
}
static jv f_select(jr *r, jv v, const jargs *a) { return select_common(r, v, a, false, false); }
static jv f_reject(jr *r, jv v, const jargs *a) { return select_common(r, v, a, true, false); }
static jv f_selectattr(jr *r, jv v, const jargs *a) { return select_common(r, v, a, false, true); }
static jv f_rejectattr(jr *r, jv v, const jargs *a) { return select_common(r, v, a, true, true); }

static jv f_replace(jr *r, jv v, const jargs *a) {
    BIND("replace", "old", "new", "count");
    if (!GIVEN(p[0]) || !GIVEN(p[1])) jr_type_error(r, "replace() missing required arguments");
    int64_t count = GIVEN(p[2]) && p[2].t != JV_NONE ? int_arg(r, p[2], -1, "count") : -1;
    return ju_replace(r, need_str(r, v), need_str(r, p[0]), need_str(r, p[1]), count);
}

static jv f_reverse(jr *r, jv v, const jargs *a) {
    no_args(r, "reverse", a);
    if (v.t == JV_STR) {
        jv step = jv_int(-1);
        return ju_slice(r, v, NULL, NULL, &step);
    }
    jv_list *l = je_iterate(r, v);
    jv_list *o = jv_list_new(r, l->n);
    for (size_t i = 0; i < l->n; i++) o->v[i] = l->v[l->n - 1 - i];
    o->n = l->n;
    bool was_lazy = v.t == JV_LIST && v.l->lazy; /* reversed(generator) fails: jinja lists it */
    return was_lazy ? jv_list_val(o) : lazy(jv_list_val(o), JL_REVERSED);
}

static jv f_round(jr *r, jv v, const jargs *a) {
    BIND("round", "precision", "method");
    int64_t prec = int_arg(r, p[0], 0, "precision");
    int method = 0;
    if (GIVEN(p[1])) {
        jv m = need_str(r, p[1]);
        if (m.n == 4 && !memcmp(m.s, "ceil", 4)) method = 1;
        else if (m.n == 5 && !memcmp(m.s, "floor", 5)) method = 2;
        else if (!(m.n == 6 && !memcmp(m.s, "common", 6)))
            jr_fail(r, IFD_ERR_TEMPLATE, "method must be common, ceil or floor");
    }
    if (!jv_is_num(v)) jr_type_error(r, "type %s doesn't define __round__ method", jv_type_name(v));
    if (method == 0) {
        if (v.t != JV_FLOAT) {
            int64_t x = v.t == JV_BOOL ? v.b : v.i;
            if (prec >= 0) return jv_int(x);
            /* round half to even at 10^-prec */
            int64_t m = 1;
            for (int64_t i = 0; i < -prec && m < INT64_MAX / 10; i++) m *= 10;
            int64_t q = x / m, rem = x % m;
            if (rem < 0) rem += m, q--;
            if (rem * 2 > m || (rem * 2 == m && (q & 1))) q++;
            return jv_int(q * m);
        }
        if (!isfinite(v.f) || prec > 300) return v;
        if (prec < -308) return jv_float(0.0 * v.f);
        if (prec >= 0) {
            char buf[720]; /* 309 integer digits + '.' + 300 decimals */
            snprintf(buf, sizeof(buf), "%.*f", (int)prec, v.f);
            return jv_float(strtod(buf, NULL));
        }
        double m = pow(10.0, (double)-prec);
        double y = v.f / m, rnd = nearbyint(y);
        return jv_float(rnd * m);
    }
    double m = pow(10.0, (double)prec);
    double x = jv_as_double(v) * m;
    return jv_float((method == 1 ? ceil(x) : floor(x)) / m);
}

static jv f_slice(jr *r, jv v, const jargs *a) {
    BIND("slice", "slices", "fill_with");
    int64_t slices = int_arg(r, p[0], 0, "slices");
    if (slices <= 0 || slices > 100000) jr_type_error(r, "slices must be positive");
    jv_list *seq = je_iterate(r, v), *out = jv_list_new(r, (size_t)slices);
    int64_t length = (int64_t)seq->n, per = length / slices, extra = length % slices, offset = 0;
    for (int64_t s = 0; s < slices; s++) {
        int64_t start = offset + s * per;
        if (s < extra) offset++;
        int64_t end = offset + (s + 1) * per;
        jv_list *t = jv_list_new(r, 0);
        for (int64_t i = start; i < end && i < length; i++) jv_list_push(r, t, seq->v[i]);
        if (GIVEN(p[1]) && p[1].t != JV_NONE && s >= extra) jv_list_push(r, t, p[1]);
        jv_list_push(r, out, jv_list_val(t));
    }
    return lazy(jv_list_val(out), JL_GENERATOR);
}

static jv f_sort(jr *r, jv v, const jargs *a) {
    BIND("sort", "reverse", "case_sensitive", "attribute");
    jv_list *items = je_iterate(r, v);
    size_t n = items->n;
    bool cs = bool_arg(r, p[1], false);
    jv *keys = ja_alloc_array(&r->arena, n ? n : 1, sizeof(jv));
    jv_list *out = jv_list_new(r, n);
    if (n) memcpy(out->v, items->v, n * sizeof(jv));
    out->n = n;
    /* comma-separated attributes sort by a list of keys */
    bool multi = GIVEN(p[2]) && p[2].t == JV_STR && memchr(p[2].s, ',', p[2].n);
    for (size_t i = 0; i < n; i++) {
        if (multi) {
            jv_list *kl = jv_list_new(r, 0);
            jv attrs = ju_split(r, p[2], jv_cstr(","), -1, false);
            for (size_t k = 0; k < attrs.l->n; k++) {
                jv x = attr_get(r, items->v[i], attrs.l->v[k], jv_missing());
                jv_list_push(r, kl, cs ? x : lower_if_str(r, x));
            }
            keys[i] = jv_list_val(kl);
        } else {
            jv x = attr_get(r, items->v[i], p[2], jv_missing());
            keys[i] = cs ? x : lower_if_str(r, x);
        }
    }
    sort_by_keys(r, keys, out->v, n, bool_arg(r, p[0], false));
    return jv_list_val(out);
}

static jv f_string(jr *r, jv v, const jargs *a) {
    no_args(r, "string", a);
    if (v.t == JV_STR) return v;
    return need_str(r, v);
}

static jv f_sum(jr *r, jv v, const jargs *a) {
    BIND("sum", "attribute", "start");
    jv acc = GIVEN(p[1]) ? p[1] : jv_int(0);
    jv_list *items = je_iterate(r, v);
    for (size_t i = 0; i < items->n; i++) {
        jr_step(r);
        jv x = attr_get(r, items->v[i], p[0], jv_missing());
        if (acc.t == JV_STR) jr_type_error(r, "sum() can't sum strings [use ''.join(seq) instead]");
        acc = je_binop(r, OP_ADD, acc, x);
    }
    return acc;
}

/* jinja's title: split on runs of [-\s({[<], upper first char, lower the rest */
static jv f_title(jr *r, jv v, const jargs *a) {
    no_args(r, "title", a);
    jv s = need_str(r, v);
    jbuf b = {0};
    size_t i = 0;
    bool at_word_start = true;
    while (i < s.n) {
        size_t adv;
        uint32_t cp = ju_decode(s.s + i, s.n - i, &adv);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || ju_isspace(cp);
        uint32_t m = cp;
        if (!sep) {
            m = at_word_start ? ju_upper(cp) : ju_lower(cp);
            at_word_start = false;
        } else {
            at_word_start = true;
        }
        if (m == cp) {
            jbuf_put(r, &b, s.s + i, adv);
        } else {
            char enc[4];
            jbuf_put(r, &b, enc, ju_encode(m, enc));
        }
        i += adv;
    }
    return jb_take(r, &b);
}

/* transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
static jv f_tojson(jr *r, jv v, const jargs *a) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    jj_opts o = {NULL, ", ", ": ", bool_arg(r, p[0], false), bool_arg(r, p[3], false)};
    if (GIVEN(p[1]) && p[1].t != JV_NONE) {
        if (p[1].t == JV_STR) {
            o.indent = ja_strndup(&r->arena, p[1].s, p[1].n);
        } else {
            int64_t w = int_arg(r, p[1], 0, "indent");
            if (w < 0) w = 0;
            if (w > 1024) jr_fail(r, IFD_ERR_LIMIT, "indent too large");
            char *sp = ja_alloc(&r->arena, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            o.indent = sp;
        }
        o.item_sep = ",";
    }
    if (GIVEN(p[2]) && p[2].t != JV_NONE) {
        jv_list *l = je_iterate(r, p[2]);
        if (l->n != 2 || l->v[0].t != JV_STR || l->v[1].t != JV_STR)
            jr_type_error(r, "separators must be a pair of strings");
        o.item_sep = ja_strndup(&r->arena, l->v[0].s, l->v[0].n);
        o.key_sep = ja_strndup(&r->arena, l->v[1].s, l->v[1].n);
    }
    jbuf b = {0};
    jj_dump(r, &b, v, &o, 0);
    return jb_take(r, &b);
}

static jv f_trim(jr *r, jv v, const jargs *a) {
    BIND("trim", "chars");
    return ju_strip(r, need_str(r, v), GIVEN(p[0]) ? p[0] : jv_none(), true, true);
}

static jv f_truncate(jr *r, jv v, const jargs *a) {
    BIND("truncate", "length", "killwords", "end", "leeway");
    jv s = need_str(r, v);
    int64_t length = int_arg(r, p[0], 255, "length");
    jv end = GIVEN(p[2]) ? need_str(r, p[2]) : jv_cstr("...");
    int64_t leeway = int_arg(r, p[3], 5, "leeway");
    int64_t end_len = (int64_t)ju_len(end.s, end.n), slen = (int64_t)ju_len(s.s, s.n);
    if (length < end_len) jr_fail(r, IFD_ERR_TEMPLATE, "expected length >= %lld, got %lld", (long long)end_len, (long long)length);
    if (leeway < 0) jr_fail(r, IFD_ERR_TEMPLATE, "expected leeway >= 0, got %lld", (long long)leeway);
    if (slen <= length + leeway) return s;
    jv stop = jv_int(length - end_len);
    jv head = ju_slice(r, s, NULL, &stop, NULL);
    jv res;
    if (bool_arg(r, p[1], false)) {
        res = head;
    } else {
        jv parts = ju_split(r, head, jv_cstr(" "), 1, true);
        res = parts.l->v[0];
    }
    jbuf b = {0};
    jbuf_put(r, &b, res.s, res.n);
    jbuf_put(r, &b, end.s, end.n);
    return jb_take(r, &b);
}

static jv f_unique(jr *r, jv v, const jargs *a) {
    BIND("unique", "case_sensitive", "attribute");
    bool cs = bool_arg(r, p[0], false);
    jv_list *items = je_iterate(r, v), *out = jv_list_new(r, 0), *seen = jv_list_new(r, 0);
    for (size_t i = 0; i < items->n; i++) {
        jr_step(r);
        jv k = attr_get(r, items->v[i], p[1], jv_missing());
        if (!cs) k = lower_if_str(r, k);
        if (je_contains(r, jv_list_val(seen), k)) continue;
        jv_list_push(r, seen, k);
        jv_list_push(r, out, items->v[i]);
    }
    return lazy(jv_list_val(out), JL_GENERATOR);
}

static jv f_wordcount(jr *r, jv v, const jargs *a) {
    no_args(r, "wordcount", a);
    jv s = need_str(r, v);
    int64_t count = 0;
    bool in_word = false;
    size_t i = 0;
    while (i < s.n) {
        size_t adv;
        uint32_t cp = ju_decode(s.s + i, s.n - i, &adv);
        bool w = cp == '_' || ju_isalnum(cp);
        if (w && !in_word) count++;
        in_word = w;
        i += adv;
    }
    return jv_int(count);
}

static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},
    {"capitalize", f_capitalize}, {"center", f_center}, {"count", f_length},
    {"d", f_default},       {"default", f_default},     {"dictsort", f_dictsort},
    {"e", f_escape},        {"escape", f_escape},       {"first", f_first},
    {"float", f_float},     {"forceescape", f_forceescape}, {"format", f_format},
    {"groupby", f_groupby}, {"indent", f_indent},       {"int", f_int},
    {"items", f_items},     {"join", f_join},           {"last", f_last},
    {"length", f_length},   {"list", f_list},           {"lower", f_lower},
    {"map", f_map},         {"max", f_max},             {"min", f_min},
    {"pprint", f_pprint},   {"reject", f_reject},       {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse},     {"round", f_round},
    {"safe", f_safe},       {"select", f_select},       {"selectattr", f_selectattr},
    {"slice", f_slice},     {"sort", f_sort},           {"string", f_string},
    {"sum", f_sum},         {"title", f_title},         {"tojson", f_tojson},
    {"trim", f_trim},       {"truncate", f_truncate},   {"unique", f_unique},
    {"upper", f_upper},     {"wordcount", f_wordcount},
};

int jinja_filter_find(const char *name) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(FILTERS); i++)
        if (!strcmp(FILTERS[i].name, name)) return (int)i;
    return -1;
}

jv jinja_filter_apply(jr *r, int fid, const char *name, jv v, const jargs *a) {
    if (fid < 0 || (size_t)fid >= IFD_ARRAY_LEN(FILTERS))
        jr_fail(r, IFD_ERR_TEMPLATE, "No filter named '%s'.", name);
    jr_enter(r);
    jv out = FILTERS[fid].fn(r, v, a);
    jr_leave(r);
    return out;
}

jv jinja_filter_by_name(jr *r, const char *name, jv v, const jargs *a) {
    return jinja_filter_apply(r, jinja_filter_find(name), name, v, a);
}
