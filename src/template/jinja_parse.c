/* jinja_parse.c — tokens -> AST, a recursive-descent parser with jinja2's grammar and
 * operator precedence (condexpr < or < and < not < compare < + - < ~ < * / // % < ** <
 * unary < postfix/filters/tests). Statements: if/elif/else, for (with else, filter,
 * recursive), set (plain, namespace attribute, block), macro, call, filter, with,
 * print, break/continue, block/generation/autoescape (rendered in place).
 *
 * Fields used per node kind (see jn_node in jinja.h):
 *   N_CONST k | N_NAME name | N_NSREF name.name2 | N_GETATTR a.name | N_GETITEM a[b]
 *   N_SLICE a:b:c | N_CALL a(v.., w=N_KW{name,a}.., *c, **d) | N_FILTER/N_TEST a|name(...)
 *   with fid, a NULL in filter blocks | N_UNARY op a | N_BINOP a op b | N_CONCAT v
 *   N_COMPARE a then v=N_OPERAND{op,a} | N_COND b if a else c | N_LIST/N_TUPLE v
 *   N_DICT v=N_PAIR{a:b} | N_OUTPUT v | N_IF a v else w | N_FOR a in b if c: v else w
 *   N_SET a=b | N_SETBLOCK a, filter c, body v | N_MACRO name, params w (N_NAME, default
 *   a), body v | N_CALLBLOCK call a, params w, body v | N_FILTERBLOCK c, v | N_WITH w
 *   (N_SET), v | N_SCOPE v | N_TEMPLATE v
 *
 * Errors longjmp to jinja_parse, which frees the arena. Runs on the caller's thread. */
#include "jinja.h"

#include <stdio.h>
#include <string.h>

#define PARSE_MAX_DEPTH 200

typedef struct parser {
    jinja_arena *a;
    jtok *tok;
    size_t ntok, pos;
    jmp_buf jb;
    char *err;
    size_t err_bytes;
    int status;
    int depth;
    int loop_depth;
    jn_node *macro; /* innermost macro or call block being parsed */
} parser;

typedef struct nvec {
    jn_node **v;
    uint32_t n, cap;
} nvec;

_Noreturn static void pfail(parser *p, const char *fmt, ...) IFD_PRINTF(2, 3);
_Noreturn static void pfail(parser *p, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    uint32_t line = p->pos < p->ntok ? p->tok[p->pos].line : 0;
    ifd_errf(p->err, p->err_bytes, IFD_ERR_TEMPLATE, "%s (line %u)", msg, line);
    p->status = IFD_ERR_TEMPLATE;
    longjmp(p->jb, 1);
}

static void arena_fail(void *ctx, bool over_cap) {
    parser *p = ctx;
    ifd_errf(p->err, p->err_bytes, IFD_ERR_NOMEM, "out of memory while parsing the template%s",
             over_cap ? " (too large)" : "");
    p->status = IFD_ERR_NOMEM;
    longjmp(p->jb, 1);
}

static void nv_push(parser *p, nvec *v, jn_node *x) {
    if (v->n == v->cap) {
        uint32_t nc = v->cap ? v->cap * 2 : 4;
        jn_node **nn = ja_alloc_array(p->a, nc, sizeof(*nn));
        if (v->n) memcpy(nn, v->v, v->n * sizeof(*nn));
        v->v = nn;
        v->cap = nc;
    }
    v->v[v->n++] = x;
}

static jtok *cur(parser *p) { return &p->tok[p->pos]; }
static jtok *look(parser *p) { return &p->tok[p->pos + 1 < p->ntok ? p->pos + 1 : p->pos]; }
static jtok *next(parser *p) {
    jtok *t = &p->tok[p->pos];
    if (p->pos + 1 < p->ntok) p->pos++;
    return t;
}

static bool is_name(const jtok *t, const char *name) { return t->type == T_NAME && !strcmp(t->s, name); }
static bool is_op(const jtok *t, int op) { return t->type == T_OP && t->op == op; }

static bool skip_name(parser *p, const char *name) {
    if (!is_name(cur(p), name)) return false;
    next(p);
    return true;
}
static bool skip_op(parser *p, int op) {
    if (!is_op(cur(p), op)) return false;
    next(p);
    return true;
}

static const char *describe(const jtok *t) {
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_BLOCK_END: return "end of statement block";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "begin of statement block";
    case T_VAR_BEGIN: return "begin of print statement";
    case T_NAME: return t->s;
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_DATA: return "template data";
    default: break;
    }
    static const char *const names[] = {"?", "+", "-", "/", "//", "*", "%", "**", "~", "[", "]",
                                         "(", ")", "{", "}", "==", "!=", ">", ">=", "<", "<=",
                                         "=", ".", ":", "|", ",", ";"};
    return t->op < IFD_ARRAY_LEN(names) ? names[t->op] : "operator";
}

static void expect_op(parser *p, int op, const char *what) {
    if (!skip_op(p, op)) pfail(p, "expected token '%s', got '%s'", what, describe(cur(p)));
}
static void expect_type(parser *p, int type, const char *what) {
    if (cur(p)->type != type) pfail(p, "expected token '%s', got '%s'", what, describe(cur(p)));
    next(p);
}
static const char *expect_name(parser *p) {
    if (cur(p)->type != T_NAME) pfail(p, "expected token 'name', got '%s'", describe(cur(p)));
    return next(p)->s;
}

static jn_node *node(parser *p, int kind, uint32_t line) {
    jn_node *n = ja_alloc(p->a, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->line = line;
    n->fid = -1;
    return n;
}

static void enter(parser *p) {
    if (++p->depth > PARSE_MAX_DEPTH) pfail(p, "template nested too deeply");
}
static void leave(parser *p) { p->depth--; }

/* ---- expressions ------------------------------------------------------------------- */

static jn_node *parse_expression(parser *p, bool with_condexpr);
static jn_node *parse_tuple(parser *p, bool simplified, bool with_condexpr, const char *extra_end,
                            bool explicit_parens, bool with_namespace);
static jn_node *parse_unary(parser *p, bool with_filter);
static jn_node *parse_primary(parser *p, bool with_namespace);
static jn_node *parse_postfix(parser *p, jn_node *n);
static jn_node *parse_filter(parser *p, jn_node *n, bool start_inline);
static jn_node *parse_call_args(parser *p, jn_node *call);

static jn_node *binop(parser *p, int op, jn_node *l, jn_node *r, uint32_t line) {
    jn_node *n = node(p, N_BINOP, line);
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static jn_node *parse_condexpr(parser *p) {
    uint32_t line = cur(p)->line;
    enter(p);
    jn_node *e1 = parse_expression(p, false);
    while (skip_name(p, "if")) {
        jn_node *e2 = parse_expression(p, false);
        jn_node *e3 = skip_name(p, "else") ? parse_condexpr(p) : NULL;
        jn_node *c = node(p, N_COND, line);
        c->a = e2;
        c->b = e1;
        c->c = e3;
        e1 = c;
    }
    leave(p);
    return e1;
}

static jn_node *parse_not(parser *p);

static jn_node *parse_math2(parser *p);
static jn_node *parse_concat(parser *p) {
    uint32_t line = cur(p)->line;
    jn_node *first = parse_math2(p);
    if (!is_op(cur(p), TK_TILDE)) return first;
    nvec args = {0};
    nv_push(p, &args, first);
    while (skip_op(p, TK_TILDE)) nv_push(p, &args, parse_math2(p));
    jn_node *n = node(p, N_CONCAT, line);
    n->v = args.v;
    n->n = args.n;
    return n;
}

static jn_node *parse_math1(parser *p) {
    uint32_t line = cur(p)->line;
    jn_node *l = parse_concat(p);
    while (is_op(cur(p), TK_ADD) || is_op(cur(p), TK_SUB)) {
        int op = next(p)->op == TK_ADD ? OP_ADD : OP_SUB;
        l = binop(p, op, l, parse_concat(p), line);
    }
    return l;
}

static jn_node *parse_pow(parser *p) {
    uint32_t line = cur(p)->line;
    jn_node *l = parse_unary(p, true);
    while (skip_op(p, TK_POW)) l = binop(p, OP_POW, l, parse_unary(p, true), line);
    return l;
}

static jn_node *parse_math2(parser *p) {
    uint32_t line = cur(p)->line;
    jn_node *l = parse_pow(p);
    for (;;) {
        jtok *t = cur(p);
        int op = is_op(t, TK_MUL) ? OP_MUL : is_op(t, TK_DIV) ? OP_DIV
                 : is_op(t, TK_FLOORDIV) ? OP_FLOORDIV : is_op(t, TK_MOD) ? OP_MOD : 0;
        if (!op) break;
        next(p);
        l = binop(p, op, l, parse_pow(p), line);
    }
    return l;
}

static jn_node *parse_compare(parser *p) {
    uint32_t line = cur(p)->line;
    jn_node *e = parse_math1(p);
    nvec ops = {0};
    for (;;) {
        jtok *t = cur(p);
        int op = 0;
        if (t->type == T_OP) {
            switch (t->op) {
            case TK_EQ: op = OP_EQ; break;
            case TK_NE: op = OP_NE; break;
            case TK_LT: op = OP_LT; break;
            case TK_LE: op = OP_LE; break;
            case TK_GT: op = OP_GT; break;
            case TK_GE: op = OP_GE; break;
            default: break;
            }
            if (op) next(p);
        } else if (is_name(t, "in")) {
            next(p);
            op = OP_IN;
        } else if (is_name(t, "not") && is_name(look(p), "in")) {
            next(p);
            next(p);
            op = OP_NOTIN;
        }
        if (!op) break;
        jn_node *o = node(p, N_OPERAND, t->line);
        o->op = (uint8_t)op;
        o->a = parse_math1(p);
        nv_push(p, &ops, o);
    }
    if (!ops.n) return e;
    jn_node *n = node(p, N_COMPARE, line);
    n->a = e;
    n->v = ops.v;
    n->n = ops.n;
    return n;
}

static jn_node *parse_not(parser *p) {
    if (is_name(cur(p), "not")) {
        uint32_t line = next(p)->line;
        enter(p);
        jn_node *n = node(p, N_UNARY, line);
        n->op = OP_NOT;
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

static jn_node *parse_and(parser *p) {
    uint32_t line = cur(p)->line;
    jn_node *l = parse_not(p);
    while (skip_name(p, "and")) l = binop(p, OP_AND, l, parse_not(p), line);
    return l;
}

static jn_node *parse_or(parser *p) {
    uint32_t line = cur(p)->line;
    jn_node *l = parse_and(p);
    while (skip_name(p, "or")) l = binop(p, OP_OR, l, parse_and(p), line);
    return l;
}

static jn_node *parse_expression(parser *p, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static jn_node *parse_unary(parser *p, bool with_filter) {
    jtok *t = cur(p);
    jn_node *n;
    enter(p);
    if (is_op(t, TK_SUB) || is_op(t, TK_ADD)) {
        next(p);
        n = node(p, N_UNARY, t->line);
        n->op = t->op == TK_SUB ? OP_NEG : OP_POS;
        n->a = parse_unary(p, false);
    } else {
        n = parse_primary(p, false);
    }
    n = parse_postfix(p, n);
    if (with_filter) {
        for (;;) {
            if (is_op(cur(p), TK_PIPE)) {
                n = parse_filter(p, n, false);
            } else if (is_name(cur(p), "is")) {
                /* test */
                uint32_t line = next(p)->line;
                bool negated = skip_name(p, "not");
                const char *name = expect_name(p);
                while (is_op(cur(p), TK_DOT)) {
                    next(p);
                    const char *sub = expect_name(p);
                    size_t l1 = strlen(name), l2 = strlen(sub);
                    char *joined = ja_alloc(p->a, l1 + l2 + 2);
                    memcpy(joined, name, l1);
                    joined[l1] = '.';
                    memcpy(joined + l1 + 1, sub, l2 + 1);
                    name = joined;
                }
                jn_node *tn = node(p, N_TEST, line);
                tn->a = n;
                tn->name = name;
                tn->fid = jinja_test_find(name);
                jtok *c = cur(p);
                if (is_op(c, TK_LPAREN)) {
                    jn_node *call = node(p, N_CALL, line);
                    parse_call_args(p, call); /* args land on a throwaway call node */
                    tn->v = call->v, tn->n = call->n, tn->w = call->w, tn->m = call->m;
                    tn->c = call->c, tn->d = call->d;
                } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT ||
                            c->type == T_FLOAT || is_op(c, TK_LPAREN) || is_op(c, TK_LBRACKET) ||
                            is_op(c, TK_LBRACE)) &&
                           !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                    if (is_name(c, "is")) pfail(p, "You cannot chain multiple tests with is");
                    jn_node *arg = parse_postfix(p, parse_primary(p, false));
                    tn->v = ja_alloc(p->a, sizeof(jn_node *));
                    tn->v[0] = arg;
                    tn->n = 1;
                }
                n = tn;
                if (negated) {
                    jn_node *nn = node(p, N_UNARY, line);
                    nn->op = OP_NOT;
                    nn->a = n;
                    n = nn;
                }
            } else if (is_op(cur(p), TK_LPAREN)) {
                jn_node *call = node(p, N_CALL, cur(p)->line);
                call->a = n;
                parse_call_args(p, call);
                n = call;
            } else {
                break;
            }
        }
    }
    leave(p);
    return n;
}

static jn_node *constant(parser *p, jv k, uint32_t line) {
    jn_node *n = node(p, N_CONST, line);
    n->k = k;
    return n;
}

static void note_name(parser *p, const char *name) {
    if (!p->macro) return;
    if (!strcmp(name, "varargs")) p->macro->flags |= JN_USES_VARARGS;
    else if (!strcmp(name, "kwargs")) p->macro->flags |= JN_USES_KWARGS;
    else if (!strcmp(name, "caller")) p->macro->flags |= JN_USES_CALLER;
}

static jn_node *parse_primary(parser *p, bool with_namespace) {
    jtok *t = cur(p);
    jn_node *n;
    switch (t->type) {
    case T_NAME:
        next(p);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) return constant(p, jv_bool(true), t->line);
        if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) return constant(p, jv_bool(false), t->line);
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) return constant(p, jv_none(), t->line);
        if (with_namespace && is_op(cur(p), TK_DOT)) {
            next(p);
            n = node(p, N_NSREF, t->line);
            n->name = t->s;
            n->name2 = expect_name(p);
            return n;
        }
        n = node(p, N_NAME, t->line);
        n->name = t->s;
        note_name(p, t->s);
        return n;
    case T_STRING: {
        next(p);
        if (cur(p)->type != T_STRING) return constant(p, jv_str(t->s, t->n), t->line);
        size_t total = t->n;
        for (size_t i = p->pos; i < p->ntok && p->tok[i].type == T_STRING; i++) total += p->tok[i].n;
        char *buf = ja_alloc(p->a, total + 1);
        size_t k = t->n;
        memcpy(buf, t->s, t->n);
        while (cur(p)->type == T_STRING) {
            jtok *s = next(p);
            memcpy(buf + k, s->s, s->n);
            k += s->n;
        }
        return constant(p, jv_str(buf, k), t->line);
    }
    case T_INT:
        next(p);
        return constant(p, t->big ? jv_float(t->f) : jv_int(t->i), t->line);
    case T_FLOAT: next(p); return constant(p, jv_float(t->f), t->line);
    case T_OP:
        if (t->op == TK_LPAREN) {
            next(p);
            n = parse_tuple(p, false, true, NULL, true, false);
            expect_op(p, TK_RPAREN, ")");
            return n;
        }
        if (t->op == TK_LBRACKET) {
            next(p);
            nvec items = {0};
            while (!is_op(cur(p), TK_RBRACKET)) {
                if (items.n) expect_op(p, TK_COMMA, ",");
                if (is_op(cur(p), TK_RBRACKET)) break;
                nv_push(p, &items, parse_expression(p, true));
            }
            expect_op(p, TK_RBRACKET, "]");
            n = node(p, N_LIST, t->line);
            n->v = items.v;
            n->n = items.n;
            return n;
        }
        if (t->op == TK_LBRACE) {
            next(p);
            nvec items = {0};
            while (!is_op(cur(p), TK_RBRACE)) {
                if (items.n) expect_op(p, TK_COMMA, ",");
                if (is_op(cur(p), TK_RBRACE)) break;
                jn_node *pair = node(p, N_PAIR, cur(p)->line);
                pair->a = parse_expression(p, true);
                expect_op(p, TK_COLON, ":");
                pair->b = parse_expression(p, true);
                nv_push(p, &items, pair);
            }
            expect_op(p, TK_RBRACE, "}");
            n = node(p, N_DICT, t->line);
            n->v = items.v;
            n->n = items.n;
            return n;
        }
        break;
    default: break;
    }
    pfail(p, "unexpected '%s'", describe(t));
}

static bool is_tuple_end(parser *p, const char *extra_end) {
    jtok *t = cur(p);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || is_op(t, TK_RPAREN)) return true;
    return extra_end && is_name(t, extra_end);
}

static jn_node *parse_tuple(parser *p, bool simplified, bool with_condexpr, const char *extra_end,
                            bool explicit_parens, bool with_namespace) {
    uint32_t line = cur(p)->line;
    nvec args = {0};
    bool is_tuple = false;
    enter(p);
    for (;;) {
        if (args.n) expect_op(p, TK_COMMA, ",");
        if (is_tuple_end(p, extra_end)) break;
        nv_push(p, &args, simplified ? parse_primary(p, with_namespace)
                                     : parse_expression(p, with_condexpr));
        if (is_op(cur(p), TK_COMMA))
            is_tuple = true;
        else
            break;
    }
    leave(p);
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) pfail(p, "Expected an expression, got '%s'", describe(cur(p)));
    }
    jn_node *n = node(p, N_TUPLE, line);
    n->v = args.v;
    n->n = args.n;
    return n;
}

static jn_node *parse_subscribed(parser *p) {
    uint32_t line = cur(p)->line;
    jn_node *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), TK_COLON)) {
        next(p);
    } else {
        jn_node *e = parse_expression(p, true);
        if (!is_op(cur(p), TK_COLON)) return e;
        next(p);
        parts[0] = e;
    }
    if (!is_op(cur(p), TK_COLON) && !is_op(cur(p), TK_RBRACKET) && !is_op(cur(p), TK_COMMA))
        parts[1] = parse_expression(p, true);
    if (is_op(cur(p), TK_COLON)) {
        next(p);
        if (!is_op(cur(p), TK_RBRACKET) && !is_op(cur(p), TK_COMMA)) parts[2] = parse_expression(p, true);
    }
    jn_node *n = node(p, N_SLICE, line);
    n->a = parts[0];
    n->b = parts[1];
    n->c = parts[2];
    return n;
}

static jn_node *parse_call_args(parser *p, jn_node *call) {
    expect_op(p, TK_LPAREN, "(");
    nvec args = {0}, kwargs = {0};
    bool need_comma = false;
    while (!is_op(cur(p), TK_RPAREN)) {
        if (need_comma) {
            expect_op(p, TK_COMMA, ",");
            if (is_op(cur(p), TK_RPAREN)) break;
        }
        if (is_op(cur(p), TK_MUL)) {
            if (call->c || call->d) pfail(p, "invalid syntax for function call expression");
            next(p);
            call->c = parse_expression(p, true);
        } else if (is_op(cur(p), TK_POW)) {
            if (call->d) pfail(p, "invalid syntax for function call expression");
            next(p);
            call->d = parse_expression(p, true);
        } else if (cur(p)->type == T_NAME && is_op(look(p), TK_ASSIGN)) {
            if (call->d) pfail(p, "invalid syntax for function call expression");
            jn_node *kw = node(p, N_KW, cur(p)->line);
            kw->name = next(p)->s;
            next(p);
            kw->a = parse_expression(p, true);
            nv_push(p, &kwargs, kw);
        } else {
            if (call->c || call->d || kwargs.n) pfail(p, "invalid syntax for function call expression");
            nv_push(p, &args, parse_expression(p, true));
        }
        need_comma = true;
    }
    expect_op(p, TK_RPAREN, ")");
    call->v = args.v;
    call->n = args.n;
    call->w = kwargs.v;
    call->m = kwargs.n;
    return call;
}

static jn_node *parse_postfix(parser *p, jn_node *n) {
    for (;;) {
        jtok *t = cur(p);
        if (is_op(t, TK_DOT)) {
            next(p);
            jtok *a = next(p);
            if (a->type == T_NAME) {
                jn_node *g = node(p, N_GETATTR, t->line);
                g->a = n;
                g->name = a->s;
                n = g;
            } else if (a->type == T_INT) {
                jn_node *g = node(p, N_GETITEM, t->line);
                g->a = n;
                g->b = constant(p, jv_int(a->i), a->line);
                n = g;
            } else {
                pfail(p, "expected name or number");
            }
        } else if (is_op(t, TK_LBRACKET)) {
            next(p);
            nvec args = {0};
            while (!is_op(cur(p), TK_RBRACKET)) {
                if (args.n) expect_op(p, TK_COMMA, ",");
                nv_push(p, &args, parse_subscribed(p));
            }
            expect_op(p, TK_RBRACKET, "]");
            if (!args.n) pfail(p, "expected subscript expression");
            jn_node *g = node(p, N_GETITEM, t->line);
            g->a = n;
            if (args.n == 1) {
                g->b = args.v[0];
            } else {
                jn_node *tup = node(p, N_TUPLE, t->line);
                tup->v = args.v;
                tup->n = args.n;
                g->b = tup;
            }
            n = g;
        } else if (is_op(t, TK_LPAREN)) {
            jn_node *call = node(p, N_CALL, t->line);
            call->a = n;
            parse_call_args(p, call);
            n = call;
        } else {
            return n;
        }
    }
}

static jn_node *parse_filter(parser *p, jn_node *n, bool start_inline) {
    while (is_op(cur(p), TK_PIPE) || start_inline) {
        if (!start_inline) next(p);
        start_inline = false;
        uint32_t line = cur(p)->line;
        const char *name = expect_name(p);
        while (is_op(cur(p), TK_DOT)) {
            next(p);
            const char *sub = expect_name(p);
            size_t l1 = strlen(name), l2 = strlen(sub);
            char *joined = ja_alloc(p->a, l1 + l2 + 2);
            memcpy(joined, name, l1);
            joined[l1] = '.';
            memcpy(joined + l1 + 1, sub, l2 + 1);
            name = joined;
        }
        jn_node *f = node(p, N_FILTER, line);
        f->a = n;
        f->name = name;
        f->fid = jinja_filter_find(name);
        if (is_op(cur(p), TK_LPAREN)) parse_call_args(p, f);
        n = f;
    }
    return n;
}

/* ---- statements --------------------------------------------------------------------- */

static void subparse(parser *p, nvec *body, const char *const *end_tokens);

/* Skip an optional ':' and the block end, parse a body up to one of end_tokens. The
 * current token is then that end name (drop: also consumed). */
static void parse_statements(parser *p, nvec *body, const char *const *end_tokens, bool drop) {
    skip_op(p, TK_COLON);
    expect_type(p, T_BLOCK_END, "end of statement block");
    subparse(p, body, end_tokens);
    if (cur(p)->type == T_EOF) {
        char want[200] = "";
        size_t k = 0;
        for (int i = 0; end_tokens[i]; i++)
            k += (size_t)snprintf(want + k, sizeof(want) - IFD_MIN(k, sizeof(want) - 1), "%s'%s'",
                                  i ? " or " : "", end_tokens[i]);
        pfail(p, "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
    }
    if (drop) next(p);
}

static jn_node *parse_assign_target(parser *p, bool name_only, const char *extra_end,
                                    bool with_namespace) {
    jn_node *t;
    if (name_only) {
        uint32_t line = cur(p)->line;
        t = node(p, N_NAME, line);
        t->name = expect_name(p);
    } else {
        t = parse_tuple(p, true, true, extra_end, false, with_namespace);
    }
    if (t->kind == N_TUPLE) {
        for (uint32_t i = 0; i < t->n; i++)
            if (t->v[i]->kind != N_NAME) pfail(p, "can't assign to 'tuple'");
    } else if (t->kind != N_NAME && t->kind != N_NSREF) {
        pfail(p, "can't assign to '%s'", t->kind == N_CONST ? "const" : "expression");
    }
    return t;
}

static void parse_signature(parser *p, jn_node *n) {
    nvec params = {0};
    bool have_default = false;
    expect_op(p, TK_LPAREN, "(");
    while (!is_op(cur(p), TK_RPAREN)) {
        if (params.n) expect_op(p, TK_COMMA, ",");
        jn_node *arg = parse_assign_target(p, true, NULL, false);
        if (skip_op(p, TK_ASSIGN)) {
            arg->a = parse_expression(p, true);
            have_default = true;
        } else if (have_default) {
            pfail(p, "non-default argument follows default argument");
        }
        nv_push(p, &params, arg);
    }
    expect_op(p, TK_RPAREN, ")");
    n->w = params.v;
    n->m = params.n;
}

static jn_node *parse_statement(parser *p) {
    jtok *t = cur(p);
    if (t->type != T_NAME) pfail(p, "tag name expected");
    const char *tag = t->s;
    uint32_t line = t->line;
    jn_node *n;
    static const char *const END_FOR[] = {"endfor", "else", NULL}, *const END_FOR2[] = {"endfor", NULL};
    static const char *const END_IF[] = {"elif", "else", "endif", NULL}, *const END_IF2[] = {"endif", NULL};

    if (!strcmp(tag, "if")) {
        next(p);
        jn_node *result = node(p, N_IF, line), *cur_if = result;
        for (;;) {
            cur_if->a = parse_tuple(p, false, false, NULL, false, false);
            nvec body = {0};
            parse_statements(p, &body, END_IF, false);
            cur_if->v = body.v;
            cur_if->n = body.n;
            jtok *e = next(p);
            if (is_name(e, "elif")) {
                jn_node *ni = node(p, N_IF, e->line);
                cur_if->w = ja_alloc(p->a, sizeof(jn_node *));
                cur_if->w[0] = ni;
                cur_if->m = 1;
                cur_if = ni;
                continue;
            }
            if (is_name(e, "else")) {
                nvec els = {0};
                parse_statements(p, &els, END_IF2, true);
                cur_if->w = els.v;
                cur_if->m = els.n;
            }
            break;
        }
        return result;
    }
    if (!strcmp(tag, "for")) {
        next(p);
        n = node(p, N_FOR, line);
        n->a = parse_assign_target(p, false, "in", false);
        if (!skip_name(p, "in")) pfail(p, "expected token 'in', got '%s'", describe(cur(p)));
        n->b = parse_tuple(p, false, false, "recursive", false, false);
        if (skip_name(p, "if")) n->c = parse_expression(p, true);
        if (skip_name(p, "recursive")) n->flags |= JN_RECURSIVE;
        p->loop_depth++;
        nvec body = {0};
        parse_statements(p, &body, END_FOR, false);
        p->loop_depth--;
        n->v = body.v;
        n->n = body.n;
        if (!strcmp(next(p)->s, "else")) {
            nvec els = {0};
            parse_statements(p, &els, END_FOR2, true);
            n->w = els.v;
            n->m = els.n;
        }
        return n;
    }
    if (!strcmp(tag, "set")) {
        next(p);
        jn_node *target = parse_assign_target(p, false, NULL, true);
        if (skip_op(p, TK_ASSIGN)) {
            n = node(p, N_SET, line);
            n->a = target;
            n->b = parse_tuple(p, false, true, NULL, false, false);
            return n;
        }
        n = node(p, N_SETBLOCK, line);
        n->a = target;
        n->c = parse_filter(p, NULL, false);
        static const char *const END_SET[] = {"endset", NULL};
        nvec body = {0};
        parse_statements(p, &body, END_SET, true);
        n->v = body.v;
        n->n = body.n;
        return n;
    }
    if (!strcmp(tag, "macro") || !strcmp(tag, "call")) {
        bool is_macro = tag[0] == 'm';
        next(p);
        n = node(p, is_macro ? N_MACRO : N_CALLBLOCK, line);
        if (is_macro) {
            n->name = expect_name(p);
            parse_signature(p, n);
        } else {
            if (is_op(cur(p), TK_LPAREN)) parse_signature(p, n);
            n->a = parse_expression(p, true);
            if (n->a->kind != N_CALL) pfail(p, "expected call");
        }
        jn_node *saved_macro = p->macro;
        int saved_loops = p->loop_depth;
        p->macro = n;
        p->loop_depth = 0;
        static const char *const END_MACRO[] = {"endmacro", NULL}, *const END_CALL[] = {"endcall", NULL};
        nvec body = {0};
        parse_statements(p, &body, is_macro ? END_MACRO : END_CALL, true);
        p->macro = saved_macro;
        p->loop_depth = saved_loops;
        n->v = body.v;
        n->n = body.n;
        return n;
    }
    if (!strcmp(tag, "filter")) {
        next(p);
        n = node(p, N_FILTERBLOCK, line);
        n->c = parse_filter(p, NULL, true);
        static const char *const END_FILTER[] = {"endfilter", NULL};
        nvec body = {0};
        parse_statements(p, &body, END_FILTER, true);
        n->v = body.v;
        n->n = body.n;
        return n;
    }
    if (!strcmp(tag, "with")) {
        next(p);
        n = node(p, N_WITH, line);
        nvec sets = {0};
        while (cur(p)->type != T_BLOCK_END) {
            if (sets.n) expect_op(p, TK_COMMA, ",");
            jn_node *s = node(p, N_SET, cur(p)->line);
            s->a = parse_assign_target(p, false, NULL, false);
            expect_op(p, TK_ASSIGN, "=");
            s->b = parse_expression(p, true);
            nv_push(p, &sets, s);
        }
        n->w = sets.v;
        n->m = sets.n;
        static const char *const END_WITH[] = {"endwith", NULL};
        nvec body = {0};
        parse_statements(p, &body, END_WITH, true);
        n->v = body.v;
        n->n = body.n;
        return n;
    }
    if (!strcmp(tag, "print")) {
        next(p);
        n = node(p, N_OUTPUT, line);
        nvec parts = {0};
        while (cur(p)->type != T_BLOCK_END) {
            if (parts.n) expect_op(p, TK_COMMA, ",");
            nv_push(p, &parts, parse_expression(p, true));
        }
        n->v = parts.v;
        n->n = parts.n;
        return n;
    }
    if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        next(p);
        if (!p->loop_depth) pfail(p, "'%s' outside of a loop", tag);
        return node(p, tag[0] == 'b' ? N_BREAK : N_CONTINUE, line);
    }
    if (!strcmp(tag, "block") || !strcmp(tag, "generation") || !strcmp(tag, "autoescape")) {
        next(p);
        static const char *const END_BLOCK[] = {"endblock", NULL}, *const END_GEN[] = {"endgeneration", NULL},
                                 *const END_AE[] = {"endautoescape", NULL};
        const char *const *ends = END_GEN;
        const char *block_name = NULL;
        if (tag[0] == 'b') {
            block_name = expect_name(p);
            skip_name(p, "scoped");
            skip_name(p, "required");
            ends = END_BLOCK;
        } else if (tag[0] == 'a') {
            parse_expression(p, true);
            ends = END_AE;
        }
        n = node(p, N_SCOPE, line);
        nvec body = {0};
        parse_statements(p, &body, ends, true);
        if (block_name) skip_name(p, block_name);
        n->v = body.v;
        n->n = body.n;
        return n;
    }
    if (!strcmp(tag, "extends") || !strcmp(tag, "include") || !strcmp(tag, "import") ||
        !strcmp(tag, "from"))
        pfail(p, "'%s' is not supported: chat templates are rendered standalone", tag);
    pfail(p, "Encountered unknown tag '%s'.", tag);
}

static void subparse(parser *p, nvec *body, const char *const *end_tokens) {
    nvec data = {0};
    uint32_t data_line = 0;
#define FLUSH()                                     \
    do {                                            \
        if (data.n) {                               \
            jn_node *o = node(p, N_OUTPUT, data_line); \
            o->v = data.v;                          \
            o->n = data.n;                          \
            nv_push(p, body, o);                    \
            data = (nvec){0};                       \
        }                                           \
    } while (0)
    enter(p);
    for (;;) {
        jtok *t = cur(p);
        if (t->type == T_EOF) break;
        if (t->type == T_DATA) {
            if (!data.n) data_line = t->line;
            nv_push(p, &data, constant(p, jv_str(t->s, t->n), t->line));
            next(p);
        } else if (t->type == T_VAR_BEGIN) {
            if (!data.n) data_line = t->line;
            next(p);
            nv_push(p, &data, parse_tuple(p, false, true, NULL, false, false));
            expect_type(p, T_VAR_END, "end of print statement");
        } else if (t->type == T_BLOCK_BEGIN) {
            FLUSH();
            next(p);
            if (end_tokens)
                for (int i = 0; end_tokens[i]; i++)
                    if (is_name(cur(p), end_tokens[i])) {
                        leave(p);
                        return;
                    }
            nv_push(p, body, parse_statement(p));
            expect_type(p, T_BLOCK_END, "end of statement block");
        } else {
            pfail(p, "unexpected '%s'", describe(t));
        }
    }
    FLUSH();
#undef FLUSH
    leave(p);
}

int jinja_parse(jinja_template **out, const char *src, size_t n, char *err, size_t err_bytes) {
    *out = NULL;
    jinja_template *t = calloc(1, sizeof(*t));
    if (!t) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    parser *p = calloc(1, sizeof(*p)); /* holds a jmp_buf: keep it off the stack frame */
    if (!p) {
        free(t);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    }
    p->err = err;
    p->err_bytes = err_bytes;
    p->a = &t->arena;
    ja_init(&t->arena, (size_t)256 << 20, arena_fail, p);
    if (setjmp(p->jb)) {
        int rc = p->status ? p->status : IFD_ERR_TEMPLATE;
        ja_free(&t->arena);
        free(t);
        free(p);
        return rc;
    }
    jlexer lx = {.arena = &t->arena, .err = err, .err_bytes = err_bytes};
    int rc = jinja_lex(&lx, src, n);
    if (rc) {
        ja_free(&t->arena);
        free(t);
        free(p);
        return rc;
    }
    p->tok = lx.toks;
    p->ntok = lx.n;
    nvec body = {0};
    subparse(p, &body, NULL);
    t->root = node(p, N_TEMPLATE, 1);
    t->root->v = body.v;
    t->root->n = body.n;
    free(p);
    *out = t;
    return IFD_OK;
}

void jinja_template_free(jinja_template *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}
