/* jinja_exec.c — statements and scopes, and the render entry point.
 *
 * Scoping follows jinja2: `if` shares its scope; each for-loop iteration gets a fresh
 * scope (a `set` inside does not survive the iteration, hence namespace()); macros
 * run in a scope whose parent is where they were defined (top level: the template
 * scope, read at call time); call-block bodies see the scope of the call site; `with`
 * opens a scope.
 *
 * Limits: every statement and expression node counts one step (plus work-sized
 * charges in filters); time is checked every 1024 steps; output and every string
 * are capped at max_output_bytes; the arena at max_memory_bytes; C recursion at
 * JR_MAX_DEPTH. A limit longjmps out with IFD_ERR_LIMIT.
 *
 * One render runs on one thread; the template it reads is shared and never written. */
#include "jinja.h"

#include <cjson/cJSON.h>
#include <locale.h>
#include <stdio.h>
#include <string.h>

/* ---- failure / limits ----------------------------------------------------------------- */

void jr_fail(jr *r, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (r->err && r->err_bytes) vsnprintf(r->err, r->err_bytes, fmt, ap);
    va_end(ap);
    r->status = code;
    longjmp(r->jb, 1);
}

static void arena_fail(void *ctx, bool over_cap) {
    jr *r = ctx;
    if (over_cap)
        jr_fail(r, IFD_ERR_LIMIT, "template render exceeded its memory limit of %zu bytes",
                r->arena.cap_bytes);
    jr_fail(r, IFD_ERR_NOMEM, "out of memory while rendering the template");
}

void jr_charge(jr *r, uint64_t units) {
    uint64_t before = r->steps;
    r->steps += units;
    if (r->steps > r->max_steps || r->steps < before)
        jr_fail(r, IFD_ERR_LIMIT, "template render exceeded the limit of %llu steps",
                (unsigned long long)r->max_steps);
    if ((before >> 10) != (r->steps >> 10) && ifd_now_s() > r->deadline)
        jr_fail(r, IFD_ERR_LIMIT, "template render exceeded its time limit");
}

void jr_step(jr *r) { jr_charge(r, 1); }

void jr_enter(jr *r) {
    if (++r->depth > JR_MAX_DEPTH)
        jr_fail(r, IFD_ERR_LIMIT, "maximum recursion depth exceeded (template nesting over %d)", JR_MAX_DEPTH);
}

void jr_emit_value(jr *r, jv v) {
    if (v.t == JV_STR) {
        jr_emit(r, v.s, v.n);
        return;
    }
    if (v.t == JV_UNDEF || v.t == JV_MISSING) return;
    jv_to_str(r, r->out, v);
}

/* ---- frames ------------------------------------------------------------------------------ */

jframe *jframe_new(jr *r, jframe *parent) {
    jframe *f = ja_alloc(&r->arena, sizeof(*f));
    f->parent = parent;
    return f;
}

void jframe_set(jr *r, jframe *f, const char *name, jv v) {
    for (uint32_t i = 0; i < f->n; i++)
        if (!strcmp(f->vars[i].name, name)) {
            f->vars[i].v = v;
            return;
        }
    if (f->n == f->cap) {
        uint32_t nc = f->cap ? f->cap * 2 : 8;
        jvar *nv = ja_alloc_array(&r->arena, nc, sizeof(jvar));
        if (f->n) memcpy(nv, f->vars, f->n * sizeof(jvar));
        f->vars = nv;
        f->cap = nc;
    }
    f->vars[f->n].name = name;
    f->vars[f->n].v = v;
    f->n++;
}

bool jframe_lookup(const jframe *f, const char *name, jv *out) {
    for (; f; f = f->parent)
        for (uint32_t i = f->n; i-- > 0;)
            if (!strcmp(f->vars[i].name, name)) {
                *out = f->vars[i].v;
                return true;
            }
    return false;
}

/* ---- assignment -------------------------------------------------------------------------- */

static void assign(jr *r, jframe *f, const jn_node *t, jv v) {
    switch (t->kind) {
    case N_NAME: jframe_set(r, f, t->name, v); return;
    case N_TUPLE: {
        if (v.t == JV_UNDEF) je_undefined_fail(r, v);
        jv_list *items = je_iterate(r, v);
        if (items->n < t->n)
            jr_type_error(r, "not enough values to unpack (expected %u, got %zu)", t->n, items->n);
        if (items->n > t->n) jr_type_error(r, "too many values to unpack (expected %u)", t->n);
        for (uint32_t i = 0; i < t->n; i++) jframe_set(r, f, t->v[i]->name, items->v[i]);
        return;
    }
    case N_NSREF: {
        jv ns;
        if (!jframe_lookup(f, t->name, &ns) || ns.t != JV_NS)
            jr_fail(r, IFD_ERR_TEMPLATE, "cannot assign attribute on non-namespace object");
        jv_dict_set(r, ns.d, jv_cstr(t->name2), v);
        return;
    }
    default: jr_fail(r, IFD_ERR_INTERNAL, "bad assignment target");
    }
}

/* ---- capture, macros, loops ------------------------------------------------------------- */

jv jx_capture(jr *r, jframe *f, jn_node **body, uint32_t n) {
    jbuf *saved = r->out;
    jbuf *b = ja_alloc(&r->arena, sizeof(*b));
    r->out = b;
    jx_exec_body(r, f, body, n);
    r->out = saved;
    return jb_take(r, b);
}

jv jx_call_macro(jr *r, jv_func *fn, const jv *args, size_t nargs, const char *const *kwn,
                 const jv *kwv, size_t nkw) {
    const jn_node *m = fn->node;
    const char *mname = fn->name ? fn->name : "caller";
    jframe *mf = jframe_new(r, fn->frame);
    bool *given = ja_alloc_array(&r->arena, m->m + 1, sizeof(bool));
    bool caller_given = false;
    for (size_t i = 0; i < nargs && i < m->m; i++) {
        jframe_set(r, mf, m->w[i]->name, args[i]);
        given[i] = true;
    }
    jv_dict *extra_kw = NULL;
    for (size_t k = 0; k < nkw; k++) {
        uint32_t i;
        for (i = 0; i < m->m; i++)
            if (!strcmp(m->w[i]->name, kwn[k])) break;
        if (i < m->m && !given[i]) {
            jframe_set(r, mf, kwn[k], kwv[k]);
            given[i] = true;
            if (!strcmp(kwn[k], "caller")) caller_given = true;
            continue;
        }
        if (!strcmp(kwn[k], "caller") && (m->flags & JN_USES_CALLER) && !caller_given) {
            jframe_set(r, mf, "caller", kwv[k]);
            caller_given = true;
            continue;
        }
        if (m->flags & JN_USES_KWARGS) {
            if (!extra_kw) extra_kw = jv_dict_new(r, 0);
            jv_dict_set(r, extra_kw, jv_cstr(kwn[k]), kwv[k]);
            continue;
        }
        if (!strcmp(kwn[k], "caller"))
            jr_type_error(r, "macro '%s' was invoked with two values for the special caller argument. This is most likely a bug.", mname);
        jr_type_error(r, "macro '%s' takes no keyword argument '%s'", mname, kwn[k]);
    }
    if (nargs > m->m && !(m->flags & JN_USES_VARARGS))
        jr_type_error(r, "macro '%s' takes not more than %u argument(s)", mname, m->m);
    for (uint32_t i = 0; i < m->m; i++) {
        if (given[i]) continue;
        const jn_node *p = m->w[i];
        if (p->a) {
            jframe_set(r, mf, p->name, je_eval(r, mf, p->a));
        } else {
            jv_undef *u = ja_alloc(&r->arena, sizeof(*u));
            char *hint = ja_alloc(&r->arena, strlen(p->name) + 32);
            sprintf(hint, "parameter '%s' was not provided", p->name);
            u->hint = hint;
            jv uv = jv_undef_plain();
            uv.u = u;
            jframe_set(r, mf, p->name, uv);
        }
    }
    if (m->kind == N_MACRO && (m->flags & JN_USES_CALLER) && !caller_given) {
        jv_undef *u = ja_alloc(&r->arena, sizeof(*u));
        u->hint = "No caller defined";
        jv uv = jv_undef_plain();
        uv.u = u;
        jframe_set(r, mf, "caller", uv);
    }
    if (m->flags & JN_USES_VARARGS) {
        jv_list *l = jv_list_new(r, 0);
        l->tuple = true;
        for (size_t i = m->m; i < nargs; i++) jv_list_push(r, l, args[i]);
        jframe_set(r, mf, "varargs", jv_list_val(l));
    }
    if (m->flags & JN_USES_KWARGS) jframe_set(r, mf, "kwargs", jv_dict_val(extra_kw ? extra_kw : jv_dict_new(r, 0)));
    jr_enter(r);
    jv out = jx_capture(r, mf, m->v, m->n);
    jr_leave(r);
    return out;
}

static void run_loop(jr *r, jframe *f, const jn_node *n, jv iterable, int depth0) {
    if (iterable.t == JV_UNDEF && iterable.u && iterable.u->security) je_undefined_fail(r, iterable);
    jv_list *items = je_iterate(r, iterable);
    if (n->c) {
        jv_list *kept = jv_list_new(r, 0);
        jframe *tf = jframe_new(r, f);
        for (size_t i = 0; i < items->n; i++) {
            jr_step(r);
            tf->n = 0;
            assign(r, tf, n->a, items->v[i]);
            if (je_truthy(r, je_eval(r, tf, n->c))) jv_list_push(r, kept, items->v[i]);
        }
        items = kept;
    }
    jv_loop *lp = ja_alloc(&r->arena, sizeof(*lp));
    lp->items = items;
    lp->depth0 = depth0;
    lp->node = n;
    lp->frame = f;
    jv loopv = jv_missing();
    loopv.t = JV_LOOP;
    loopv.lp = lp;
    jframe *itf = jframe_new(r, f);
    for (size_t i = 0; i < items->n; i++) {
        jr_step(r);
        itf->n = 0; /* a fresh scope per iteration, without a fresh allocation */
        assign(r, itf, n->a, items->v[i]);
        jframe_set(r, itf, "loop", loopv);
        lp->index0 = i;
        if (jx_exec_body(r, itf, n->v, n->n) == FLOW_BREAK) break;
    }
    if (items->n == 0 && n->m) jx_exec_body(r, f, n->w, n->m);
}

jv jx_loop_call(jr *r, jv_loop *lp, jv iterable) {
    jbuf *saved = r->out;
    jbuf *b = ja_alloc(&r->arena, sizeof(*b));
    r->out = b;
    jr_enter(r);
    run_loop(r, lp->frame, lp->node, iterable, lp->depth0 + 1);
    jr_leave(r);
    r->out = saved;
    return jb_take(r, b);
}

/* ---- statements -------------------------------------------------------------------------- */

static jflow exec_stmt(jr *r, jframe *f, const jn_node *s) {
    jr_step(r);
    switch (s->kind) {
    case N_OUTPUT:
        for (uint32_t i = 0; i < s->n; i++) {
            const jn_node *part = s->v[i];
            if (part->kind == N_CONST && part->k.t == JV_STR)
                jr_emit(r, part->k.s, part->k.n);
            else
                jr_emit_value(r, je_eval(r, f, part));
        }
        return FLOW_NORMAL;
    case N_IF:
        if (je_truthy(r, je_eval(r, f, s->a))) return jx_exec_body(r, f, s->v, s->n);
        return jx_exec_body(r, f, s->w, s->m);
    case N_FOR: run_loop(r, f, s, je_eval(r, f, s->b), 0); return FLOW_NORMAL;
    case N_SET: assign(r, f, s->a, je_eval(r, f, s->b)); return FLOW_NORMAL;
    case N_SETBLOCK: {
        jv v = jx_capture(r, f, s->v, s->n);
        if (s->c) v = je_filter_chain(r, f, s->c, v);
        assign(r, f, s->a, v);
        return FLOW_NORMAL;
    }
    case N_MACRO: {
        jv_func *fn = ja_alloc(&r->arena, sizeof(*fn));
        fn->kind = JFN_MACRO;
        fn->node = s;
        fn->frame = f;
        fn->name = s->name;
        jv v = jv_missing();
        v.t = JV_FUNC;
        v.fn = fn;
        jframe_set(r, f, s->name, v);
        return FLOW_NORMAL;
    }
    case N_CALLBLOCK: {
        jv_func *fn = ja_alloc(&r->arena, sizeof(*fn));
        fn->kind = JFN_MACRO;
        fn->node = s;
        fn->frame = f;
        fn->name = "caller";
        jv caller = jv_missing();
        caller.t = JV_FUNC;
        caller.fn = fn;
        jr_emit_value(r, je_eval_call(r, f, s->a, "caller", caller));
        return FLOW_NORMAL;
    }
    case N_FILTERBLOCK: {
        jv v = jx_capture(r, f, s->v, s->n);
        jr_emit_value(r, je_filter_chain(r, f, s->c, v));
        return FLOW_NORMAL;
    }
    case N_WITH: {
        jframe *wf = jframe_new(r, f);
        for (uint32_t i = 0; i < s->m; i++) assign(r, wf, s->w[i]->a, je_eval(r, f, s->w[i]->b));
        return jx_exec_body(r, wf, s->v, s->n);
    }
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    case N_SCOPE: return jx_exec_body(r, f, s->v, s->n);
    default: jr_fail(r, IFD_ERR_INTERNAL, "cannot execute node kind %d", s->kind);
    }
}

jflow jx_exec_body(jr *r, jframe *f, jn_node **body, uint32_t n) {
    jr_enter(r);
    for (uint32_t i = 0; i < n; i++) {
        jflow fl = exec_stmt(r, f, body[i]);
        if (fl != FLOW_NORMAL) {
            jr_leave(r);
            return fl;
        }
    }
    jr_leave(r);
    return FLOW_NORMAL;
}

/* ---- entry point ---------------------------------------------------------------------------- */

static bool parse_now(const char *s, int out[6]) {
    int y, mo, d, h = 0, mi = 0, sec = 0;
    int k = sscanf(s, "%d-%d-%d%*[ T]%d:%d:%d", &y, &mo, &d, &h, &mi, &sec);
    if (k != 3 && k != 6) return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 60)
        return false;
    out[0] = y, out[1] = mo, out[2] = d, out[3] = h, out[4] = mi, out[5] = sec;
    return true;
}

int jinja_render(const jinja_template *t, const cJSON *ctx, const jinja_render_opts *o,
                 char **out, size_t *out_bytes, char *err, size_t err_bytes) {
    *out = NULL;
    if (out_bytes) *out_bytes = 0;
    if (err && err_bytes) err[0] = 0;
    if (ctx && !cJSON_IsObject(ctx))
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "template context must be a JSON object");
    jr *r = calloc(1, sizeof(*r)); /* holds the jmp_buf; its fields survive longjmp */
    if (!r) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    r->err = err;
    r->err_bytes = err_bytes;
    r->max_out = o->max_output_bytes;
    r->max_steps = o->max_steps;
    r->deadline = ifd_now_s() + o->max_seconds;
    if (o->now) {
        if (!parse_now(o->now, r->now_tm)) {
            free(r);
            return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "bad fixed time '%s' (want YYYY-MM-DD HH:MM:SS)", o->now);
        }
        r->have_now = true;
    }
    ja_init(&r->arena, o->max_memory_bytes, arena_fail, r);
    /* this thread runs in C.UTF-8 until the render returns (numbers print with '.') */
    locale_t loc = ju_locale();
    locale_t prev = loc ? uselocale(loc) : (locale_t)0;
    if (setjmp(r->jb)) {
        int rc = r->status ? r->status : IFD_ERR_INTERNAL;
        if (prev) uselocale(prev);
        ja_free(&r->arena);
        free(r);
        return rc;
    }
    r->top = ja_alloc(&r->arena, sizeof(jbuf));
    r->out = r->top;
    r->root = jframe_new(r, NULL);
    if (ctx)
        for (const cJSON *c = ctx->child; c; c = c->next) {
            if (!c->string) continue;
            jframe_set(r, r->root, c->string, jj_from_cjson(r, c, 0));
        }
    jx_exec_body(r, r->root, t->root->v, t->root->n);
    if (prev) uselocale(prev);
    char *res = malloc(r->top->n + 1);
    if (!res) {
        ja_free(&r->arena);
        free(r);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    }
    if (r->top->n) memcpy(res, r->top->p, r->top->n);
    res[r->top->n] = 0;
    *out = res;
    if (out_bytes) *out_bytes = r->top->n;
    ja_free(&r->arena);
    free(r);
    return IFD_OK;
}
