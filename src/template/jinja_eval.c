/* jinja_eval.c — expression evaluation with jinja2's sandboxed semantics: name lookup,
 * attribute/item access (attribute first for `.`, item first for `[]`), Undefined
 * propagation and its error messages, Python operators with Python's TypeError texts,
 * calls (macros, globals, bound methods), filters and tests.
 *
 * Runs on the rendering thread; every allocation goes to the render arena. */
#define _GNU_SOURCE /* memmem */
#include "jinja.h"

#include <math.h>
#include <string.h>

/* ---- undefined ------------------------------------------------------------------------ */

jv je_make_undef(jr *r, const char *name, jv obj, bool element) {
    jv_undef *u = ja_alloc(&r->arena, sizeof(*u));
    u->name = name;
    u->obj_repr = obj.t == JV_MISSING ? NULL : jv_obj_repr(obj);
    u->element = element;
    jv v = jv_undef_plain();
    v.u = u;
    return v;
}

static jv undef_var(jr *r, const char *name) { return je_make_undef(r, name, jv_missing(), false); }

static jv undef_key(jr *r, jv obj, jv key) {
    if (key.t == JV_STR) return je_make_undef(r, ja_strndup(&r->arena, key.s, key.n), obj, false);
    jbuf b = {0};
    jv_repr(r, &b, key);
    jbuf_put(r, &b, "", 1);
    return je_make_undef(r, b.p, obj, true);
}

static jv undef_hint(jr *r, const char *hint, bool security) {
    jv_undef *u = ja_alloc(&r->arena, sizeof(*u));
    u->hint = hint;
    u->security = security;
    jv v = jv_undef_plain();
    v.u = u;
    return v;
}

_Noreturn void je_undefined_fail(jr *r, jv v) {
    const jv_undef *u = v.t == JV_UNDEF ? v.u : NULL;
    if (!u) jr_fail(r, IFD_ERR_TEMPLATE, "'%s' is undefined", "value");
    if (u->hint) jr_fail(r, IFD_ERR_TEMPLATE, "%s", u->hint);
    jbuf b = {0};
    if (!u->obj_repr) {
        jv_repr(r, &b, jv_cstr(u->name ? u->name : "?"));
        jb_puts(r, &b, " is undefined");
    } else if (u->element) {
        jb_printf(r, &b, "%s has no element %s", u->obj_repr, u->name);
    } else {
        jv_repr(r, &b, jv_cstr(u->obj_repr));
        jb_puts(r, &b, " has no attribute ");
        jv_repr(r, &b, jv_cstr(u->name));
    }
    jbuf_put(r, &b, "", 1);
    jr_fail(r, IFD_ERR_TEMPLATE, "%s", b.p);
}

static inline void need_defined(jr *r, jv v) {
    if (v.t == JV_UNDEF) je_undefined_fail(r, v);
}

/* ---- truthiness / iteration --------------------------------------------------------- */

bool je_truthy(jr *r, jv v) {
    (void)r;
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE:
    case JV_MISSING: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return v.n != 0;
    case JV_LIST: return v.l->lazy || v.l->n != 0;
    case JV_DICT: return v.d->n != 0;
    default: return true;
    }
}

jv_list *je_iterate(jr *r, jv v) {
    switch (v.t) {
    case JV_LIST: return v.l;
    case JV_DICT: {
        jv_list *l = jv_list_new(r, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) l->v[i] = v.d->k[i];
        l->n = v.d->n;
        return l;
    }
    case JV_STR: {
        jv_list *l = jv_list_new(r, v.n);
        size_t i = 0;
        while (i < v.n) {
            size_t adv;
            ju_decode(v.s + i, v.n - i, &adv);
            jv_list_push(r, l, jv_str(v.s + i, adv));
            i += adv;
        }
        return l;
    }
    case JV_UNDEF:
        if (v.u && v.u->security) je_undefined_fail(r, v);
        return jv_list_new(r, 0);
    case JV_LOOP: return v.lp->items;
    default: jr_type_error(r, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- attribute / item access -------------------------------------------------------- */

static jv loop_attr(jr *r, jv_loop *lp, const char *name, bool *found) {
    size_t n = lp->items->n, i = lp->index0;
    *found = true;
    if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int((int64_t)n);
    if (!strcmp(name, "depth")) return jv_int(lp->depth0 + 1);
    if (!strcmp(name, "depth0")) return jv_int(lp->depth0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? lp->items->v[i - 1] : undef_hint(r, "there is no previous item", false);
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? lp->items->v[i + 1] : undef_hint(r, "there is no next item", false);
    int kind = !strcmp(name, "cycle") ? JFN_CYCLE : !strcmp(name, "changed") ? JFN_CHANGED : -1;
    if (kind >= 0) {
        jv_func *fn = ja_alloc(&r->arena, sizeof(*fn));
        fn->kind = (uint8_t)kind;
        fn->lp = lp;
        fn->name = kind == JFN_CYCLE ? "cycle" : "changed";
        jv v = {0};
        v.t = JV_FUNC;
        v.fn = fn;
        return v;
    }
    *found = false;
    return jv_missing();
}

static bool is_dunder(const char *name) {
    size_t n = strlen(name);
    return n >= 4 && name[0] == '_' && name[1] == '_' && name[n - 2] == '_' && name[n - 1] == '_';
}

jv je_unsafe_attr(jr *r, jv obj, const char *name) {
    jbuf b = {0};
    jb_puts(r, &b, "access to attribute ");
    jv_repr(r, &b, jv_cstr(name));
    jb_printf(r, &b, " of '%s' object is unsafe.", jv_type_name(obj));
    jbuf_put(r, &b, "", 1);
    return undef_hint(r, b.p, true);
}

jv je_getattr(jr *r, jv obj, const char *name) {
    need_defined(r, obj);
    if (is_dunder(name)) return je_unsafe_attr(r, obj, name);
    jv out;
    switch (obj.t) {
    case JV_DICT:
        if (jm_lookup_method(r, obj, name, &out)) return out;
        if (jv_dict_get_str(obj.d, name, strlen(name), &out)) return out;
        break;
    case JV_NS:
        if (jv_dict_get_str(obj.d, name, strlen(name), &out)) return out;
        break;
    case JV_LOOP: {
        bool found;
        out = loop_attr(r, obj.lp, name, &found);
        if (found) return out;
        break;
    }
    case JV_FUNC:
        if (!strcmp(name, "name") && obj.fn->name) return jv_cstr(obj.fn->name);
        break;
    default:
        if (jm_lookup_method(r, obj, name, &out)) return out;
        break;
    }
    return je_make_undef(r, name, obj, false);
}

static bool v_is_lazy(jv v) { return v.t == JV_LIST && v.l->lazy; }

static bool as_index(jv key, int64_t *i) {
    if (key.t == JV_INT) {
        *i = key.i;
        return true;
    }
    if (key.t == JV_BOOL) {
        *i = key.b;
        return true;
    }
    return false;
}

jv je_getitem(jr *r, jv obj, jv key) {
    need_defined(r, obj);
    int64_t idx;
    jv out;
    switch (obj.t) {
    case JV_DICT:
        if (jv_dict_get(r, obj.d, key, &out)) return out;
        break;
    case JV_LIST:
        if (v_is_lazy(obj)) break;
        if (as_index(key, &idx)) {
            int64_t n = (int64_t)obj.l->n;
            if (idx < 0) idx += n;
            if (idx >= 0 && idx < n) return obj.l->v[idx];
            return undef_key(r, obj, key);
        }
        break;
    case JV_STR:
        if (as_index(key, &idx)) {
            bool ascii = ju_is_ascii(obj.s, obj.n);
            int64_t n = ascii ? (int64_t)obj.n : (int64_t)ju_len(obj.s, obj.n);
            if (idx < 0) idx += n;
            if (idx >= 0 && idx < n) {
                size_t off = ascii ? (size_t)idx : ju_offset(obj.s, obj.n, (size_t)idx), adv = 1;
                if (!ascii) ju_decode(obj.s + off, obj.n - off, &adv);
                return jv_str(obj.s + off, adv);
            }
            return undef_key(r, obj, key);
        }
        break;
    default: break;
    }
    if (key.t == JV_STR) {
        const char *name = ja_strndup(&r->arena, key.s, key.n);
        if (obj.t == JV_DICT) {
            if (is_dunder(name)) return je_unsafe_attr(r, obj, name);
            if (jm_lookup_method(r, obj, name, &out)) return out;
            return je_make_undef(r, name, obj, false);
        }
        return je_getattr(r, obj, name);
    }
    return undef_key(r, obj, key);
}

/* ---- operators ------------------------------------------------------------------------- */

static _Noreturn void unsupported(jr *r, const char *op, jv a, jv b) {
    jr_type_error(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
                  jv_type_name(b));
}

static int64_t as_i64(jv v) { return v.t == JV_BOOL ? (int64_t)v.b : v.i; }
static bool is_intlike(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }

static jv concat_str(jr *r, jv a, jv b) {
    if (!b.n) return a;
    if (!a.n) return b;
    size_t total;
    if (!ifd_add_ok(a.n, b.n, &total) || total > r->max_out)
        jr_fail(r, IFD_ERR_LIMIT, "string exceeds the output limit of %zu bytes", r->max_out);
    if (ja_extend_last(&r->arena, a.s + a.n, b.n)) {
        memcpy((char *)a.s + a.n, b.s, b.n);
        return jv_str(a.s, total);
    }
    char *p = ja_alloc(&r->arena, total);
    memcpy(p, a.s, a.n);
    memcpy(p + a.n, b.s, b.n);
    return jv_str(p, total);
}

static jv repeat(jr *r, jv seq, int64_t times) {
    if (times <= 0) {
        if (seq.t == JV_STR) return jv_str("", 0);
        jv_list *l = jv_list_new(r, 0);
        l->tuple = seq.l->tuple;
        return jv_list_val(l);
    }
    if (seq.t == JV_STR) {
        size_t total;
        if (!ifd_mul_ok(seq.n, (size_t)times, &total) || total > r->max_out)
            jr_fail(r, IFD_ERR_LIMIT, "string exceeds the output limit of %zu bytes", r->max_out);
        char *p = ja_alloc(&r->arena, total);
        for (int64_t i = 0; i < times; i++) memcpy(p + (size_t)i * seq.n, seq.s, seq.n);
        return jv_str(p, total);
    }
    size_t total;
    if (!ifd_mul_ok(seq.l->n, (size_t)times, &total) || total > ((size_t)1 << 24))
        jr_fail(r, IFD_ERR_LIMIT, "list repetition too large");
    jv_list *l = jv_list_new(r, total);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.l->n; k++) l->v[l->n++] = seq.l->v[k];
    l->tuple = seq.l->tuple;
    return jv_list_val(l);
}

static double py_fmod(double a, double b) {
    double m = fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    if (m == 0) m = copysign(0.0, b);
    return m;
}

static jv int_pow(jr *r, int64_t base, int64_t exp) {
    int64_t result = 1, b = base;
    bool overflow = false;
    int64_t e = exp;
    while (e > 0) {
        if (e & 1) overflow |= __builtin_mul_overflow(result, b, &result);
        e >>= 1;
        if (e) overflow |= __builtin_mul_overflow(b, b, &b);
    }
    (void)r;
    if (overflow) return jv_float(pow((double)base, (double)exp));
    return jv_int(result);
}

jv je_binop(jr *r, int op, jv a, jv b) {
    need_defined(r, a);
    need_defined(r, b);
    bool nums = jv_is_num(a) && jv_is_num(b);
    bool ints = is_intlike(a) && is_intlike(b);
    switch (op) {
    case OP_ADD:
        if (ints) {
            int64_t res;
            if (__builtin_add_overflow(as_i64(a), as_i64(b), &res))
                return jv_float((double)as_i64(a) + (double)as_i64(b));
            return jv_int(res);
        }
        if (nums) return jv_float(jv_as_double(a) + jv_as_double(b));
        if (a.t == JV_STR && b.t == JV_STR) {
            if (a.safe != b.safe) {
                /* markupsafe: Markup + str escapes the str */
                if (a.safe) b = ju_html_escape(r, b);
                else a = ju_html_escape(r, a);
            }
            jv res = concat_str(r, a, b);
            res.safe = a.safe | b.safe;
            return res;
        }
        if (a.t == JV_LIST && b.t == JV_LIST && a.l->tuple == b.l->tuple) {
            jv_list *l = jv_list_new(r, a.l->n + b.l->n);
            if (a.l->n) memcpy(l->v, a.l->v, a.l->n * sizeof(jv));
            if (b.l->n) memcpy(l->v + a.l->n, b.l->v, b.l->n * sizeof(jv));
            l->n = a.l->n + b.l->n;
            l->tuple = a.l->tuple;
            return jv_list_val(l);
        }
        if (a.t == JV_STR || a.t == JV_LIST)
            jr_type_error(r, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                          jv_type_name(b), jv_type_name(a));
        unsupported(r, "+", a, b);
    case OP_SUB:
        if (ints) {
            int64_t res;
            if (__builtin_sub_overflow(as_i64(a), as_i64(b), &res))
                return jv_float((double)as_i64(a) - (double)as_i64(b));
            return jv_int(res);
        }
        if (nums) return jv_float(jv_as_double(a) - jv_as_double(b));
        unsupported(r, "-", a, b);
    case OP_MUL:
        if (ints) {
            int64_t res;
            if (__builtin_mul_overflow(as_i64(a), as_i64(b), &res))
                return jv_float((double)as_i64(a) * (double)as_i64(b));
            return jv_int(res);
        }
        if (nums) return jv_float(jv_as_double(a) * jv_as_double(b));
        if ((a.t == JV_STR || a.t == JV_LIST) && is_intlike(b)) return repeat(r, a, as_i64(b));
        if ((b.t == JV_STR || b.t == JV_LIST) && is_intlike(a)) return repeat(r, b, as_i64(a));
        if (a.t == JV_STR || a.t == JV_LIST || b.t == JV_STR || b.t == JV_LIST)
            jr_type_error(r, "can't multiply sequence by non-int of type '%s'",
                          jv_type_name(a.t == JV_STR || a.t == JV_LIST ? b : a));
        unsupported(r, "*", a, b);
    case OP_DIV:
        if (nums) {
            double y = jv_as_double(b);
            if (y == 0) jr_type_error(r, "division by zero");
            return jv_float(jv_as_double(a) / y);
        }
        unsupported(r, "/", a, b);
    case OP_FLOORDIV:
        if (ints) {
            int64_t x = as_i64(a), y = as_i64(b);
            if (y == 0) jr_type_error(r, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return jv_float(-(double)INT64_MIN);
            int64_t q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
            return jv_int(q);
        }
        if (nums) {
            double y = jv_as_double(b);
            if (y == 0) jr_type_error(r, "float floor division by zero");
            return jv_float(floor(jv_as_double(a) / y));
        }
        unsupported(r, "//", a, b);
    case OP_MOD:
        if (a.t == JV_STR) return ju_percent_format(r, a, b);
        if (ints) {
            int64_t x = as_i64(a), y = as_i64(b);
            if (y == 0) jr_type_error(r, "integer modulo by zero");
            if (y == -1) return jv_int(0);
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return jv_int(m);
        }
        if (nums) {
            double y = jv_as_double(b);
            if (y == 0) jr_type_error(r, "float modulo");
            return jv_float(py_fmod(jv_as_double(a), y));
        }
        unsupported(r, "%", a, b);
    case OP_POW:
        if (ints && as_i64(b) >= 0) return int_pow(r, as_i64(a), as_i64(b));
        if (nums) {
            double x = jv_as_double(a), y = jv_as_double(b);
            if (x == 0 && y < 0) jr_type_error(r, "0.0 cannot be raised to a negative power");
            return jv_float(pow(x, y));
        }
        unsupported(r, "** or pow()", a, b);
    default: jr_fail(r, IFD_ERR_INTERNAL, "bad operator %d", op);
    }
}

bool je_contains(jr *r, jv c, jv item) {
    switch (c.t) {
    case JV_STR:
        if (item.t != JV_STR)
            jr_type_error(r, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (item.n == 0) return true;
        return item.n <= c.n && memmem(c.s, c.n, item.s, item.n) != NULL;
    case JV_LIST:
        jr_charge(r, c.l->n / 8);
        for (size_t i = 0; i < c.l->n; i++)
            if (jv_equal(r, c.l->v[i], item)) return true;
        return false;
    case JV_DICT: {
        jv out;
        if ((item.t == JV_LIST && !item.l->tuple) || item.t == JV_DICT || item.t == JV_NS)
            jr_type_error(r, "unhashable type: '%s'", jv_type_name(item));
        return jv_dict_get(r, c.d, item, &out);
    }
    case JV_UNDEF:
        if (c.u && c.u->security) je_undefined_fail(r, c);
        return false;
    case JV_LOOP:
        for (size_t i = 0; i < c.lp->items->n; i++)
            if (jv_equal(r, c.lp->items->v[i], item)) return true;
        return false;
    default: jr_type_error(r, "argument of type '%s' is not iterable", jv_type_name(c));
    }
}

/* ---- calls ----------------------------------------------------------------------------- */

jv je_call(jr *r, jv callee, const jv *args, size_t nargs, const char *const *kwn, const jv *kwv,
           size_t nkw) {
    if (callee.t == JV_UNDEF) je_undefined_fail(r, callee);
    if (callee.t == JV_LOOP) {
        if (!(callee.lp->node->flags & JN_RECURSIVE))
            jr_type_error(r, "The loop must have the 'recursive' marker to be called recursively.");
        if (nargs != 1 || nkw) jr_type_error(r, "loop() takes exactly one argument");
        return jx_loop_call(r, callee.lp, args[0]);
    }
    if (callee.t != JV_FUNC) jr_type_error(r, "'%s' object is not callable", jv_type_name(callee));
    jv_func *fn = callee.fn;
    jargs a = {args, nargs, kwn, kwv, nkw};
    switch (fn->kind) {
    case JFN_MACRO: return jx_call_macro(r, fn, args, nargs, kwn, kwv, nkw);
    case JFN_GLOBAL: return jm_call_global(r, fn->id, &a);
    case JFN_METHOD: return jm_call_method(r, fn->self, fn->id, &a);
    case JFN_CYCLE:
        if (!nargs) jr_type_error(r, "no items for cycling given");
        return args[fn->lp->index0 % nargs];
    case JFN_CHANGED: {
        jv cur;
        if (nargs == 1) {
            cur = args[0];
        } else {
            jv_list *l = jv_list_new(r, nargs);
            for (size_t i = 0; i < nargs; i++) l->v[i] = args[i];
            l->n = nargs;
            l->tuple = true;
            cur = jv_list_val(l);
        }
        jv_loop *lp = fn->lp;
        if (lp->changed_any && jv_equal(r, lp->last_changed, cur)) return jv_bool(false);
        lp->changed_any = true;
        lp->last_changed = cur;
        return jv_bool(true);
    }
    default: jr_fail(r, IFD_ERR_INTERNAL, "bad callable");
    }
}

typedef struct evargs {
    jv *pos;
    size_t n_pos;
    const char **kwn;
    jv *kwv;
    size_t n_kw;
} evargs;

/* Evaluate the arguments of a call / filter / test node: v positional, w keywords,
 * c *args, d **kwargs. */
static void eval_args(jr *r, jframe *f, const jn_node *n, evargs *out) {
    size_t n_pos = n->n, n_kw = n->m;
    jv dyn = jv_missing(), dynkw = jv_missing();
    if (n->c) {
        dyn = je_eval(r, f, n->c);
        jv_list *l = je_iterate(r, dyn);
        dyn = jv_list_val(l);
        n_pos += l->n;
    }
    if (n->d) {
        dynkw = je_eval(r, f, n->d);
        if (dynkw.t != JV_DICT) jr_type_error(r, "argument after ** must be a mapping, not %s", jv_type_name(dynkw));
        n_kw += dynkw.d->n;
    }
    out->pos = n_pos ? ja_alloc_array(&r->arena, n_pos, sizeof(jv)) : NULL;
    out->kwn = n_kw ? ja_alloc_array(&r->arena, n_kw, sizeof(char *)) : NULL;
    out->kwv = n_kw ? ja_alloc_array(&r->arena, n_kw, sizeof(jv)) : NULL;
    size_t k = 0;
    for (uint32_t i = 0; i < n->n; i++) out->pos[k++] = je_eval(r, f, n->v[i]);
    if (dyn.t == JV_LIST)
        for (size_t i = 0; i < dyn.l->n; i++) out->pos[k++] = dyn.l->v[i];
    out->n_pos = k;
    k = 0;
    for (uint32_t i = 0; i < n->m; i++) {
        out->kwn[k] = n->w[i]->name;
        out->kwv[k++] = je_eval(r, f, n->w[i]->a);
    }
    if (dynkw.t == JV_DICT)
        for (size_t i = 0; i < dynkw.d->n; i++) {
            jv key = dynkw.d->k[i];
            if (key.t != JV_STR) jr_type_error(r, "keywords must be strings");
            out->kwn[k] = ja_strndup(&r->arena, key.s, key.n);
            out->kwv[k++] = dynkw.d->v[i];
        }
    out->n_kw = k;
}

jv je_eval_call(jr *r, jframe *f, const jn_node *n, const char *extra_kw, jv extra_val) {
    jv callee;
    if (n->a->kind == N_GETATTR) {
        jv obj = je_eval(r, f, n->a->a);
        callee = je_getattr(r, obj, n->a->name);
    } else {
        callee = je_eval(r, f, n->a);
    }
    evargs ea;
    eval_args(r, f, n, &ea);
    if (extra_kw) {
        const char **kwn = ja_alloc_array(&r->arena, ea.n_kw + 1, sizeof(char *));
        jv *kwv = ja_alloc_array(&r->arena, ea.n_kw + 1, sizeof(jv));
        for (size_t i = 0; i < ea.n_kw; i++) kwn[i] = ea.kwn[i], kwv[i] = ea.kwv[i];
        kwn[ea.n_kw] = extra_kw;
        kwv[ea.n_kw] = extra_val;
        ea.kwn = kwn;
        ea.kwv = kwv;
        ea.n_kw++;
    }
    return je_call(r, callee, ea.pos, ea.n_pos, (const char *const *)ea.kwn, ea.kwv, ea.n_kw);
}

static jv eval_filter(jr *r, jframe *f, const jn_node *n, jv operand) {
    evargs ea;
    eval_args(r, f, n, &ea);
    jargs a = {ea.pos, ea.n_pos, (const char *const *)ea.kwn, ea.kwv, ea.n_kw};
    if (n->fid < 0) jr_fail(r, IFD_ERR_TEMPLATE, "No filter named '%s'.", n->name);
    return jinja_filter_apply(r, n->fid, n->name, operand, &a);
}

/* Apply a filter chain whose innermost operand is NULL (filter blocks, set blocks). */
jv je_filter_chain(jr *r, jframe *f, const jn_node *n, jv input) {
    jv operand = n->a ? je_filter_chain(r, f, n->a, input) : input;
    return eval_filter(r, f, n, operand);
}

static jv eval_compare(jr *r, jframe *f, const jn_node *n) {
    jv left = je_eval(r, f, n->a);
    for (uint32_t i = 0; i < n->n; i++) {
        const jn_node *o = n->v[i];
        jv right = je_eval(r, f, o->a);
        bool ok;
        switch (o->op) {
        case OP_EQ: ok = jv_equal(r, left, right); break;
        case OP_NE: ok = !jv_equal(r, left, right); break;
        case OP_LT: ok = jv_compare(r, left, right, "<") == -1; break;
        case OP_LE: {
            int c = jv_compare(r, left, right, "<=");
            ok = c == -1 || c == 0;
            break;
        }
        case OP_GT: ok = jv_compare(r, left, right, ">") == 1; break;
        case OP_GE: {
            int c = jv_compare(r, left, right, ">=");
            ok = c == 1 || c == 0;
            break;
        }
        case OP_IN: ok = je_contains(r, right, left); break;
        case OP_NOTIN: ok = !je_contains(r, right, left); break;
        default: ok = false;
        }
        if (!ok) return jv_bool(false);
        left = right;
    }
    return jv_bool(true);
}

static jv lookup(jr *r, jframe *f, const char *name) {
    jv v;
    if (jframe_lookup(f, name, &v)) return v;
    int g = jm_global_find(name);
    if (g >= 0) {
        jv_func *fn = ja_alloc(&r->arena, sizeof(*fn));
        fn->kind = JFN_GLOBAL;
        fn->id = g;
        fn->name = jm_global_name(g);
        v = jv_missing();
        v.t = JV_FUNC;
        v.fn = fn;
        return v;
    }
    return undef_var(r, name);
}

jv je_eval(jr *r, jframe *f, const jn_node *n) {
    jr_step(r);
    jr_enter(r);
    jv res;
    switch (n->kind) {
    case N_CONST: res = n->k; break;
    case N_NAME: res = lookup(r, f, n->name); break;
    case N_GETATTR: res = je_getattr(r, je_eval(r, f, n->a), n->name); break;
    case N_GETITEM: {
        jv obj = je_eval(r, f, n->a);
        if (n->b->kind == N_SLICE) {
            const jn_node *s = n->b;
            jv parts[3];
            for (int i = 0; i < 3; i++) {
                const jn_node *e = i == 0 ? s->a : i == 1 ? s->b : s->c;
                parts[i] = e ? je_eval(r, f, e) : jv_none();
            }
            /* jinja2 compiles slices to a plain Python subscript (no Undefined fallback) */
            need_defined(r, obj);
            if (obj.t == JV_STR) {
                res = ju_slice(r, obj, &parts[0], &parts[1], &parts[2]);
            } else if (obj.t == JV_LIST && !obj.l->lazy) {
                int64_t a, b, st;
                ju_slice_indices(r, (int64_t)obj.l->n, &parts[0], &parts[1], &parts[2], &a, &b, &st);
                int64_t cnt = ju_slice_count(a, b, st);
                jv_list *l = jv_list_new(r, cnt > 0 ? (size_t)cnt : 0);
                for (int64_t k = 0, i = a; k < cnt; k++, i += st) l->v[l->n++] = obj.l->v[i];
                l->tuple = obj.l->tuple;
                res = jv_list_val(l);
            } else if (obj.t == JV_DICT) {
                jr_type_error(r, "unhashable type: 'slice'");
            } else {
                jr_type_error(r, "'%s' object is not subscriptable", jv_type_name(obj));
            }
        } else {
            res = je_getitem(r, obj, je_eval(r, f, n->b));
        }
        break;
    }
    case N_CALL: res = je_eval_call(r, f, n, NULL, jv_missing()); break;
    case N_FILTER: res = eval_filter(r, f, n, je_eval(r, f, n->a)); break;
    case N_TEST: {
        jv v = je_eval(r, f, n->a);
        evargs ea;
        eval_args(r, f, n, &ea);
        jargs a = {ea.pos, ea.n_pos, (const char *const *)ea.kwn, ea.kwv, ea.n_kw};
        if (n->fid < 0) jr_fail(r, IFD_ERR_TEMPLATE, "No test named '%s'.", n->name);
        res = jv_bool(jinja_test_apply(r, n->fid, n->name, v, &a));
        break;
    }
    case N_UNARY: {
        jv v = je_eval(r, f, n->a);
        if (n->op == OP_NOT) {
            res = jv_bool(!je_truthy(r, v));
            break;
        }
        need_defined(r, v);
        if (v.t == JV_INT) {
            res = n->op == OP_NEG ? (v.i == INT64_MIN ? jv_float(-(double)v.i) : jv_int(-v.i)) : v;
        } else if (v.t == JV_BOOL) {
            res = jv_int(n->op == OP_NEG ? -(int64_t)v.b : (int64_t)v.b);
        } else if (v.t == JV_FLOAT) {
            res = n->op == OP_NEG ? jv_float(-v.f) : v;
        } else {
            jr_type_error(r, "bad operand type for unary %c: '%s'", n->op == OP_NEG ? '-' : '+',
                          jv_type_name(v));
        }
        break;
    }
    case N_BINOP:
        if (n->op == OP_AND) {
            jv a = je_eval(r, f, n->a);
            res = je_truthy(r, a) ? je_eval(r, f, n->b) : a;
        } else if (n->op == OP_OR) {
            jv a = je_eval(r, f, n->a);
            res = je_truthy(r, a) ? a : je_eval(r, f, n->b);
        } else {
            jv a = je_eval(r, f, n->a);
            jv b = je_eval(r, f, n->b);
            res = je_binop(r, n->op, a, b);
        }
        break;
    case N_CONCAT: {
        res = jv_str("", 0);
        for (uint32_t i = 0; i < n->n; i++) {
            jv part = je_eval(r, f, n->v[i]);
            res = concat_str(r, res, jv_as_str(r, part));
        }
        res.safe = 0;
        break;
    }
    case N_COMPARE: res = eval_compare(r, f, n); break;
    case N_SLICE:
        /* a slice inside a tuple subscript (x[1:2, 3]): Python raises TypeError there,
         * which jinja's getitem turns into Undefined */
        res = jv_undef_plain();
        break;
    case N_COND:
        if (je_truthy(r, je_eval(r, f, n->a)))
            res = je_eval(r, f, n->b);
        else if (n->c)
            res = je_eval(r, f, n->c);
        else
            res = undef_hint(r, "the inline if-expression evaluated to false and no else section was defined.", false);
        break;
    case N_LIST:
    case N_TUPLE: {
        jv_list *l = jv_list_new(r, n->n);
        for (uint32_t i = 0; i < n->n; i++) l->v[i] = je_eval(r, f, n->v[i]);
        l->n = n->n;
        l->tuple = n->kind == N_TUPLE;
        res = jv_list_val(l);
        break;
    }
    case N_DICT: {
        jv_dict *d = jv_dict_new(r, n->n);
        for (uint32_t i = 0; i < n->n; i++) {
            jv k = je_eval(r, f, n->v[i]->a);
            jv v = je_eval(r, f, n->v[i]->b);
            if (k.t == JV_LIST && !k.l->tuple) jr_type_error(r, "unhashable type: 'list'");
            if (k.t == JV_DICT) jr_type_error(r, "unhashable type: 'dict'");
            jv_dict_set(r, d, k, v);
        }
        res = jv_dict_val(d);
        break;
    }
    default: jr_fail(r, IFD_ERR_INTERNAL, "cannot evaluate node kind %d", n->kind);
    }
    jr_leave(r);
    return res;
}
