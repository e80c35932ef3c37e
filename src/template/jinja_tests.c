/* jinja_tests.c — jinja2's tests (`x is defined`, `x is divisibleby 3`, ...), argument
 * binding shared by filters, tests, methods and globals, and helpers the filters use
 * (attribute paths, stable sort).
 *
 * Runs on the rendering thread. */
#include "jinja.h"

#include <math.h>
#include <string.h>

/* ---- argument binding --------------------------------------------------------------- */

void jargs_bind(jr *r, const char *fname, const jargs *a, const char *const *params,
                size_t n_params, jv *out) {
    for (size_t i = 0; i < n_params; i++) out[i] = jv_missing();
    if (a->n_pos > n_params)
        jr_type_error(r, "%s() takes at most %zu argument%s (%zu given)", fname, n_params,
                      n_params == 1 ? "" : "s", a->n_pos);
    for (size_t i = 0; i < a->n_pos; i++) out[i] = a->pos[i];
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i;
        for (i = 0; i < n_params; i++)
            if (!strcmp(params[i], a->kw_names[k])) break;
        if (i == n_params)
            jr_type_error(r, "%s() got an unexpected keyword argument '%s'", fname, a->kw_names[k]);
        if (out[i].t != JV_MISSING)
            jr_type_error(r, "%s() got multiple values for argument '%s'", fname, a->kw_names[k]);
        out[i] = a->kw[k];
    }
}

/* ---- tests ------------------------------------------------------------------------------ */

typedef bool (*test_fn)(jr *r, jv v, const jargs *a);

static jv arg1(jr *r, const char *name, const jargs *a) {
    static const char *const P[] = {"other"};
    jv out[1];
    jargs_bind(r, name, a, P, 1, out);
    if (out[0].t == JV_MISSING) jr_type_error(r, "%s() missing 1 required positional argument", name);
    return out[0];
}

static bool t_defined(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t != JV_UNDEF; }
static bool t_undefined(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_UNDEF; }
static bool t_none(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_NONE; }
static bool t_boolean(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_BOOL; }
static bool t_true(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_BOOL && v.b; }
static bool t_false(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_BOOL && !v.b; }
static bool t_integer(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_INT; }
static bool t_float(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_FLOAT; }
static bool t_number(jr *r, jv v, const jargs *a) { (void)r, (void)a; return jv_is_num(v); }
static bool t_string(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_STR; }
static bool t_mapping(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_DICT; }
static bool t_escaped(jr *r, jv v, const jargs *a) { (void)r, (void)a; return v.t == JV_STR && v.safe; }
static bool t_callable(jr *r, jv v, const jargs *a) {
    (void)r, (void)a;
    return v.t == JV_FUNC || v.t == JV_UNDEF || (v.t == JV_LOOP && (v.lp->node->flags & JN_RECURSIVE));
}
static bool t_iterable(jr *r, jv v, const jargs *a) {
    (void)r, (void)a;
    return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF || v.t == JV_LOOP;
}
static bool t_sequence(jr *r, jv v, const jargs *a) {
    (void)r, (void)a;
    return v.t == JV_STR || (v.t == JV_LIST && !v.l->lazy) || v.t == JV_DICT || v.t == JV_UNDEF;
}

static jv mod_value(jr *r, jv v, jv m) { return je_binop(r, OP_MOD, v, m); }

static bool t_odd(jr *r, jv v, const jargs *a) {
    (void)a;
    return jv_equal(r, mod_value(r, v, jv_int(2)), jv_int(1));
}
static bool t_even(jr *r, jv v, const jargs *a) {
    (void)a;
    return jv_equal(r, mod_value(r, v, jv_int(2)), jv_int(0));
}
static bool t_divisibleby(jr *r, jv v, const jargs *a) {
    return jv_equal(r, mod_value(r, v, arg1(r, "divisibleby", a)), jv_int(0));
}
static bool t_eq(jr *r, jv v, const jargs *a) { return jv_equal(r, v, arg1(r, "eq", a)); }
static bool t_ne(jr *r, jv v, const jargs *a) { return !jv_equal(r, v, arg1(r, "ne", a)); }
static bool t_lt(jr *r, jv v, const jargs *a) { return jv_compare(r, v, arg1(r, "lt", a), "<") == -1; }
static bool t_gt(jr *r, jv v, const jargs *a) { return jv_compare(r, v, arg1(r, "gt", a), ">") == 1; }
static bool t_le(jr *r, jv v, const jargs *a) {
    int c = jv_compare(r, v, arg1(r, "le", a), "<=");
    return c == -1 || c == 0;
}
static bool t_ge(jr *r, jv v, const jargs *a) {
    int c = jv_compare(r, v, arg1(r, "ge", a), ">=");
    return c == 1 || c == 0;
}
static bool t_in(jr *r, jv v, const jargs *a) { return je_contains(r, arg1(r, "in", a), v); }

static bool t_sameas(jr *r, jv v, const jargs *a) {
    jv o = arg1(r, "sameas", a);
    if (v.t != o.t) return false;
    switch (v.t) {
    case JV_NONE:
    case JV_UNDEF: return v.t == JV_NONE || v.u == o.u;
    case JV_BOOL: return v.b == o.b;
    case JV_INT: return v.i == o.i && v.i >= -5 && v.i <= 256; /* CPython's small ints */
    case JV_STR: return v.s == o.s && v.n == o.n;
    case JV_LIST: return v.l == o.l;
    case JV_DICT:
    case JV_NS: return v.d == o.d;
    case JV_FUNC: return v.fn == o.fn;
    case JV_LOOP: return v.lp == o.lp;
    default: return false;
    }
}

static bool str_case_test(jr *r, jv v, bool upper) {
    jv s = jv_as_str(r, v);
    bool has = false;
    size_t i = 0;
    while (i < s.n) {
        size_t adv;
        uint32_t cp = ju_decode(s.s + i, s.n - i, &adv);
        i += adv;
        bool is_up = ju_lower(cp) != cp, is_lo = ju_upper(cp) != cp;
        if (upper ? is_lo : is_up) return false;
        if (upper ? is_up : is_lo) has = true;
    }
    return has;
}
static bool t_lower(jr *r, jv v, const jargs *a) { (void)a; return str_case_test(r, v, false); }
static bool t_upper(jr *r, jv v, const jargs *a) { (void)a; return str_case_test(r, v, true); }

static bool t_filter(jr *r, jv v, const jargs *a) {
    (void)a;
    if (v.t != JV_STR) return false;
    char *name = ja_strndup(&r->arena, v.s, v.n);
    return jinja_filter_find(name) >= 0;
}
static bool t_test(jr *r, jv v, const jargs *a) {
    (void)a;
    if (v.t != JV_STR) return false;
    char *name = ja_strndup(&r->arena, v.s, v.n);
    return jinja_test_find(name) >= 0;
}

static const struct {
    const char *name;
    test_fn fn;
} TESTS[] = {
    {"!=", t_ne},          {"<", t_lt},
    {"<=", t_le},          {"==", t_eq},
    {">", t_gt},           {">=", t_ge},
    {"boolean", t_boolean}, {"callable", t_callable},
    {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq},          {"equalto", t_eq},
    {"escaped", t_escaped}, {"even", t_even},
    {"false", t_false},    {"filter", t_filter},
    {"float", t_float},    {"ge", t_ge},
    {"greaterthan", t_gt}, {"gt", t_gt},
    {"in", t_in},          {"integer", t_integer},
    {"iterable", t_iterable}, {"le", t_le},
    {"lessthan", t_lt},    {"lower", t_lower},
    {"lt", t_lt},          {"mapping", t_mapping},
    {"ne", t_ne},          {"none", t_none},
    {"number", t_number},  {"odd", t_odd},
    {"sameas", t_sameas},  {"sequence", t_sequence},
    {"string", t_string},  {"test", t_test},
    {"true", t_true},      {"undefined", t_undefined},
    {"upper", t_upper},
};

int jinja_test_find(const char *name) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(TESTS); i++)
        if (!strcmp(TESTS[i].name, name)) return (int)i;
    return -1;
}

bool jinja_test_apply(jr *r, int tid, const char *name, jv v, const jargs *a) {
    if (tid < 0 || (size_t)tid >= IFD_ARRAY_LEN(TESTS))
        jr_fail(r, IFD_ERR_TEMPLATE, "No test named '%s'.", name);
    return TESTS[tid].fn(r, v, a);
}

bool jinja_test_by_name(jr *r, const char *name, jv v, const jargs *a) {
    int tid = jinja_test_find(name);
    if (tid < 0) jr_fail(r, IFD_ERR_TEMPLATE, "No test named '%s'.", name);
    return TESTS[tid].fn(r, v, a);
}
