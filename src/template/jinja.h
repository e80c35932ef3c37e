/* jinja.h — internal interface of the Jinja-subset interpreter behind chat_template.h.
 *
 * Layout: jinja_lex.c (text -> tokens), jinja_parse.c (tokens -> immutable AST),
 * jinja_value.c (arena, values, Python-like str/repr/compare), jinja_str.c (UTF-8 and
 * Python string algorithms), jinja_format.c (% and str.format), jinja_json.c (cJSON <->
 * values, tojson), jinja_eval.c (expressions), jinja_exec.c (statements, scopes, render
 * entry), jinja_filters.c (filters), jinja_tests.c (tests, argument binding),
 * jinja_methods.c (str/dict/list methods and globals).
 *
 * Memory: everything a render creates lives in one arena (jinja_arena) that is freed in
 * one go when the render ends; values are never individually freed and need no
 * reference counts. Errors inside a render or a parse longjmp back to the entry point
 * (jr_fail in a render, pfail in the parser); that is safe because nothing but the arena and the output
 * buffer (both owned by the entry point) is allocated on the way.
 *
 * Threads: a parsed template (AST + constants) is never written after parsing, so any
 * number of renders may share it. Everything else is per render. Not for use outside
 * src/tokenizer/. */
#ifndef INFERD_JINJA_H
#define INFERD_JINJA_H
#include "../util/layer/template.h"

#include <locale.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/common.h"

/* ---- arena (jinja_value.c) ------------------------------------------------------- */

typedef struct ja_chunk ja_chunk;
typedef struct jinja_arena {
    ja_chunk *head;
    unsigned char *last_end; /* exact end of the most recent allocation */
    size_t used_bytes; /* sum of chunk sizes */
    size_t cap_bytes;  /* 0 = unlimited */
    /* called (must not return) when malloc fails or cap_bytes would be passed */
    void (*on_fail)(void *ctx, bool over_cap);
    void *fail_ctx;
} jinja_arena;

void ja_init(jinja_arena *a, size_t cap_bytes, void (*on_fail)(void *, bool), void *ctx);
void ja_free(jinja_arena *a);
void *ja_alloc(jinja_arena *a, size_t n);                 /* zeroed, 16-aligned */
void *ja_alloc_array(jinja_arena *a, size_t n, size_t size); /* checked n*size */
char *ja_strndup(jinja_arena *a, const char *s, size_t n);   /* NUL-terminated copy */
/* If end == the exact end of the most recent allocation and the chunk has room, grow
 * that allocation by extra bytes in place and return true. Lets `s = s + x` loops
 * append without copying: earlier string values keep their own length. */
bool ja_extend_last(jinja_arena *a, const void *end, size_t extra);

/* ---- values ----------------------------------------------------------------------- */

typedef enum jv_type {
    JV_MISSING = 0, /* internal: "argument not given"; never visible to templates */
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* list or tuple (jv_list.tuple) */
    JV_DICT,
    JV_NS,   /* namespace(): a mutable dict with attribute syntax */
    JV_FUNC, /* macro, global function, bound method, loop callables */
    JV_LOOP, /* the `loop` object of a for loop */
} jv_type;

typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;
typedef struct jv_func jv_func;
typedef struct jv_undef jv_undef;
typedef struct jv_loop jv_loop;

typedef struct jv {
    uint8_t t;    /* jv_type */
    uint8_t safe; /* JV_STR: a markupsafe.Markup (escapes str operands of +) */
    size_t n;     /* JV_STR: length in bytes (UTF-8) */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s; /* JV_STR: not NUL-terminated in general */
        jv_list *l;
        jv_dict *d; /* JV_DICT, JV_NS */
        jv_func *fn;
        jv_undef *u; /* may be NULL: plain Undefined */
        jv_loop *lp;
    };
} jv;

struct jv_list {
    jv *v;
    size_t n, cap;
    bool tuple;
    /* what Python would have here instead of a list: jinja's filters return lazy
     * iterators, which are always true, have no len() and cannot be indexed */
    uint8_t lazy; /* JL_LIST, JL_GENERATOR, JL_REVERSED */
};
enum { JL_LIST = 0, JL_GENERATOR = 1, JL_REVERSED = 2 };

/* Insertion-ordered; keys compare with Python == (so 1, 1.0 and True are one key). */
struct jv_dict {
    jv *k, *v;
    size_t n, cap;
};

struct jv_undef {
    const char *name;     /* variable / attribute name, or repr of an element key */
    const char *obj_repr; /* "dict object", "None", ... NULL: a missing variable */
    const char *hint;     /* full message if set (e.g. sandbox refusals) */
    bool element;         /* name is the repr of a non-string key */
    bool security;        /* hint is a sandbox refusal: raise on any use */
};

typedef struct jn_node jn_node;
typedef struct jframe jframe;

typedef enum jfn_kind {
    JFN_MACRO,   /* node = N_MACRO / N_CALLBLOCK, frame = defining scope */
    JFN_GLOBAL,  /* id = global function index */
    JFN_METHOD,  /* self.method(...), id = method index */
    JFN_CYCLE,   /* loop.cycle */
    JFN_CHANGED, /* loop.changed */
} jfn_kind;

struct jv_func {
    uint8_t kind;
    int id;
    const char *name;
    const jn_node *node;
    jframe *frame;
    jv self;
    jv_loop *lp;
};

struct jv_loop {
    jv_list *items;
    size_t index0;
    int depth0;
    const jn_node *node; /* the N_FOR, for recursive calls */
    jframe *frame;       /* scope the loop runs in */
    jv last_changed;
    bool changed_any;
};

/* ---- AST (jinja_parse.c) ---------------------------------------------------------- */

typedef enum jn_kind {
    /* expressions */
    N_CONST,
    N_NAME,
    N_NSREF, /* assignment target ns.attr: name, name2 */
    N_GETATTR,
    N_GETITEM,
    N_SLICE,
    N_CALL,
    N_FILTER,
    N_TEST,
    N_UNARY,
    N_BINOP,
    N_CONCAT,
    N_COMPARE,
    N_OPERAND,
    N_COND,
    N_LIST,
    N_TUPLE,
    N_DICT,
    N_PAIR,
    N_KW,
    /* statements */
    N_OUTPUT,
    N_IF,
    N_FOR,
    N_SET,
    N_SETBLOCK,
    N_MACRO,
    N_CALLBLOCK,
    N_FILTERBLOCK,
    N_WITH,
    N_BREAK,
    N_CONTINUE,
    N_SCOPE, /* block / generation / autoescape: body only */
    N_TEMPLATE,
} jn_kind;

typedef enum jn_op {
    OP_NONE,
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_AND,
    OP_OR,
    OP_NOT,
    OP_NEG,
    OP_POS,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN,
} jn_op;

/* Macro flags (jn_node.flags for N_MACRO / N_CALLBLOCK) */
enum { JN_USES_VARARGS = 1, JN_USES_KWARGS = 2, JN_USES_CALLER = 4, JN_RECURSIVE = 8 };

/* One node shape for all kinds; which fields mean what is listed per kind in
 * jinja_parse.c. Lists are arena arrays of node pointers. */
struct jn_node {
    uint8_t kind, op, flags;
    int fid; /* N_FILTER / N_TEST: index into the filter / test table, -1 unknown */
    uint32_t line;
    const char *name, *name2;
    jn_node *a, *b, *c, *d;
    jn_node **v; /* args / items / body */
    jn_node **w; /* kwargs / else body / params */
    uint32_t n, m;
    jv k; /* N_CONST */
};

typedef struct jinja_template {
    jinja_arena arena; /* owns every node and constant */
    jn_node *root;
} jinja_template;

/* Parse src (any bytes; need not be NUL-terminated). On failure returns
 * IFD_ERR_TEMPLATE (or IFD_ERR_NOMEM) with a message in err and *out = NULL. */
int jinja_parse(jinja_template **out, const char *src, size_t n, char *err, size_t err_bytes);
void jinja_template_free(jinja_template *t);

/* ---- lexer (jinja_lex.c) ---------------------------------------------------------- */

typedef enum jt_type {
    T_EOF,
    T_DATA,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_VAR_BEGIN,
    T_VAR_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
} jt_type;

/* operator tokens (jtok.op) */
enum {
    TK_ADD = 1, TK_SUB, TK_DIV, TK_FLOORDIV, TK_MUL, TK_MOD, TK_POW, TK_TILDE,
    TK_LBRACKET, TK_RBRACKET, TK_LPAREN, TK_RPAREN, TK_LBRACE, TK_RBRACE,
    TK_EQ, TK_NE, TK_GT, TK_GE, TK_LT, TK_LE, TK_ASSIGN, TK_DOT, TK_COLON,
    TK_PIPE, TK_COMMA, TK_SEMICOLON,
};

typedef struct jtok {
    uint8_t type, op;
    uint32_t line;
    const char *s; /* T_NAME/T_DATA/T_STRING: arena text (strings decoded), NUL-terminated */
    size_t n;
    int64_t i;
    double f;
    bool big; /* T_INT too large for int64: f holds it */
} jtok;

typedef struct jlexer {
    jinja_arena *arena;
    jtok *toks;
    size_t n, cap;
    char *err;
    size_t err_bytes;
} jlexer;

/* Tokenize; returns IFD_OK or IFD_ERR_TEMPLATE (message in lx->err). */
int jinja_lex(jlexer *lx, const char *src, size_t n);

/* ---- render state (jinja_exec.c) -------------------------------------------------- */

typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

typedef struct jvar {
    const char *name;
    jv v;
} jvar;

struct jframe {
    jframe *parent;
    jvar *vars;
    uint32_t n, cap;
};

typedef struct jr {
    jinja_arena arena;
    jmp_buf jb;
    int status;
    char *err;
    size_t err_bytes;
    jbuf *out;   /* current sink (captures push a new one) */
    jbuf *top;   /* the render's output */
    size_t max_out;
    uint64_t steps, max_steps;
    double deadline; /* ifd_now_s() value */
    int depth;       /* C recursion guard */
    jframe *root;
    bool have_now;   /* strftime_now fixed time */
    int now_tm[6];   /* Y M D h m s */
} jr;

#define JR_MAX_DEPTH 600

_Noreturn void jr_fail(jr *r, int code, const char *fmt, ...) IFD_PRINTF(3, 4);
/* TypeError-style failures are template errors; the helper keeps call sites short. */
#define jr_type_error(r, ...) jr_fail((r), IFD_ERR_TEMPLATE, __VA_ARGS__)
void jr_step(jr *r);                  /* count one step, check time / step limits */
void jr_charge(jr *r, uint64_t units); /* count work proportional to data size */
void jr_enter(jr *r); /* recursion guard */
static inline void jr_leave(jr *r) { r->depth--; }

/* output sinks */
void jbuf_put(jr *r, jbuf *b, const char *s, size_t n);
static inline void jr_emit(jr *r, const char *s, size_t n) { jbuf_put(r, r->out, s, n); }
void jr_emit_value(jr *r, jv v);

/* scopes */
jframe *jframe_new(jr *r, jframe *parent);
void jframe_set(jr *r, jframe *f, const char *name, jv v);
bool jframe_lookup(const jframe *f, const char *name, jv *out);

/* statements (jinja_exec.c) */
typedef enum jflow { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE } jflow;
jflow jx_exec_body(jr *r, jframe *f, jn_node **body, uint32_t n);
/* run body into a fresh buffer, return it as a string */
jv jx_capture(jr *r, jframe *f, jn_node **body, uint32_t n);
jv jx_call_macro(jr *r, jv_func *fn, const jv *args, size_t nargs, const char *const *kwn,
                 const jv *kwv, size_t nkw);
jv jx_loop_call(jr *r, jv_loop *lp, jv iterable);

/* expressions (jinja_eval.c) */
jv je_eval(jr *r, jframe *f, const jn_node *n);
bool je_truthy(jr *r, jv v);
jv je_getattr(jr *r, jv obj, const char *name);
jv je_getitem(jr *r, jv obj, jv key);
jv je_binop(jr *r, int op, jv a, jv b);
bool je_contains(jr *r, jv container, jv item);
/* apply a filter chain whose innermost operand is NULL (filter / set blocks) to input */
jv je_filter_chain(jr *r, jframe *f, const jn_node *n, jv input);
/* evaluate an N_CALL, optionally adding one keyword argument (call blocks' caller) */
jv je_eval_call(jr *r, jframe *f, const jn_node *call, const char *extra_kw, jv extra_val);
jv je_call(jr *r, jv callee, const jv *args, size_t nargs, const char *const *kwn,
           const jv *kwv, size_t nkw);
/* iterate as Python's iter(): list of items (dict keys, string chars, ...) */
jv_list *je_iterate(jr *r, jv v);
_Noreturn void je_undefined_fail(jr *r, jv u);
jv je_make_undef(jr *r, const char *name, jv obj, bool element);
/* the sandbox's refusal for a mutating method (an Undefined that raises when used) */
jv je_unsafe_attr(jr *r, jv obj, const char *name);

/* entry point (jinja_exec.c); 0 fields in opts are not defaults here: the caller fills
 * every field. */
typedef struct jinja_render_opts {
    size_t max_output_bytes, max_memory_bytes;
    double max_seconds;
    uint64_t max_steps;
    const char *now; /* "YYYY-MM-DD HH:MM:SS" for strftime_now, NULL = the real clock */
} jinja_render_opts;
struct cJSON;
int jinja_render(const jinja_template *t, const struct cJSON *ctx, const jinja_render_opts *o,
                 char **out, size_t *out_bytes, char *err, size_t err_bytes);

/* ---- value helpers (jinja_value.c) ------------------------------------------------ */

static inline jv jv_missing(void) { jv v = {0}; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.t = JV_BOOL; v.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.f = f; return v; }
static inline jv jv_str(const char *s, size_t n) {
    jv v = {0};
    v.t = JV_STR;
    v.s = s;
    v.n = n;
    return v;
}
static inline jv jv_undef_plain(void) { jv v = {0}; v.t = JV_UNDEF; return v; }
jv jv_cstr(const char *s);

jv_list *jv_list_new(jr *r, size_t cap);
void jv_list_push(jr *r, jv_list *l, jv v);
jv jv_list_val(jv_list *l);
jv_dict *jv_dict_new(jr *r, size_t cap);
/* set (replace if the key exists, else append) */
void jv_dict_set(jr *r, jv_dict *d, jv key, jv val);
/* append without the duplicate check (for keys known to be new) */
void jv_dict_push(jr *r, jv_dict *d, jv key, jv val);
bool jv_dict_get(jr *r, const jv_dict *d, jv key, jv *out);
bool jv_dict_get_str(const jv_dict *d, const char *key, size_t n, jv *out);
jv jv_dict_val(jv_dict *d);

bool jv_is_num(jv v);            /* bool, int, float */
double jv_as_double(jv v);       /* for numbers */
const char *jv_type_name(jv v);  /* Python type name: "str", "NoneType", ... */
const char *jv_obj_repr(jv v);   /* jinja object_type_repr: "dict object", "None" */

bool jv_equal(jr *r, jv a, jv b);                 /* Python == */
int jv_compare(jr *r, jv a, jv b, const char *op); /* <0,0,>0 or TypeError for op */

/* str(v) / repr(v) appended to b */
void jv_to_str(jr *r, jbuf *b, jv v);
void jv_repr(jr *r, jbuf *b, jv v);
jv jv_as_str(jr *r, jv v); /* str(v) as a value (no copy for strings) */
void jv_fmt_float(char *out, size_t out_bytes, double f); /* Python repr(float) */

/* small jbuf helpers that allocate from the render arena */
void jb_puts(jr *r, jbuf *b, const char *s);
void jb_printf(jr *r, jbuf *b, const char *fmt, ...) IFD_PRINTF(3, 4);
jv jb_take(jr *r, jbuf *b); /* the buffer's bytes as a string value */

/* ---- strings (jinja_str.c) --------------------------------------------------------- */

/* the C.UTF-8 locale (or NULL if the system lacks it); renders run under it so that
 * printf/strtod/strftime behave as Python's do whatever the process locale is */
locale_t ju_locale(void);
uint32_t ju_decode(const char *s, size_t n, size_t *adv); /* one code point */
size_t ju_encode(uint32_t cp, char out[4]);
size_t ju_len(const char *s, size_t n);               /* code points */
size_t ju_offset(const char *s, size_t n, size_t idx); /* byte offset of code point idx */
bool ju_is_ascii(const char *s, size_t n);
bool ju_isspace(uint32_t cp); /* Python str.isspace */
bool ju_isalpha(uint32_t cp);
bool ju_isalnum(uint32_t cp);
bool ju_isdigit(uint32_t cp);
bool ju_islinebreak(uint32_t cp); /* str.splitlines boundaries */
uint32_t ju_upper(uint32_t cp);
uint32_t ju_lower(uint32_t cp);
bool ju_iscased(uint32_t cp);

jv ju_strip(jr *r, jv s, jv chars, bool left, bool right);
jv ju_split(jr *r, jv s, jv sep, int64_t maxsplit, bool from_right);
jv ju_splitlines(jr *r, jv s, bool keepends);
jv ju_replace(jr *r, jv s, jv old, jv new_, int64_t count);
jv ju_case(jr *r, jv s, int mode); /* 0 lower, 1 upper, 2 capitalize, 3 title, 4 swapcase */
int64_t ju_find(jv hay, jv needle, int64_t start, int64_t end, bool reverse); /* cp index */
int64_t ju_count(jv hay, jv needle);
jv ju_slice(jr *r, jv s, const jv *start, const jv *stop, const jv *step);
/* Python slice.indices(len) and the number of items it selects */
void ju_slice_indices(jr *r, int64_t len, const jv *start, const jv *stop, const jv *step,
                      int64_t *s, int64_t *e, int64_t *st);
int64_t ju_slice_count(int64_t a, int64_t b, int64_t st);
jv ju_html_escape(jr *r, jv s);
/* jinja_format.c */
jv ju_percent_format(jr *r, jv fmt, jv args);             /* Python fmt % args */
jv ju_str_format(jr *r, jv fmt, const jv *args, size_t nargs, const char *const *kwn,
                 const jv *kwv, size_t nkw);            /* str.format */

/* ---- JSON (jinja_json.c) ------------------------------------------------------------ */

struct cJSON;
jv jj_from_cjson(jr *r, const struct cJSON *j, int depth);
typedef struct jj_opts {
    const char *indent; /* NULL: single line */
    const char *item_sep, *key_sep;
    bool ensure_ascii, sort_keys;
} jj_opts;
void jj_dump(jr *r, jbuf *b, jv v, const jj_opts *o, int depth);

/* ---- filters, tests, methods, globals ---------------------------------------------- */

typedef struct jargs {
    const jv *pos;
    size_t n_pos;
    const char *const *kw_names;
    const jv *kw;
    size_t n_kw;
} jargs;

/* Bind arguments to parameter names (Python rules). out[i] is JV_MISSING when not
 * given. fname is used in error messages. */
void jargs_bind(jr *r, const char *fname, const jargs *a, const char *const *params,
                size_t n_params, jv *out);

int jinja_filter_find(const char *name); /* -1 if unknown */
int jinja_test_find(const char *name);
jv jinja_filter_apply(jr *r, int fid, const char *name, jv v, const jargs *a);
bool jinja_test_apply(jr *r, int tid, const char *name, jv v, const jargs *a);
/* for map('filter') / select('test') at runtime */
jv jinja_filter_by_name(jr *r, const char *name, jv v, const jargs *a);
bool jinja_test_by_name(jr *r, const char *name, jv v, const jargs *a);

/* methods: returns true and sets *out when obj has an attribute `name` that is a
 * method (as a JV_FUNC) or a sandbox refusal (as an Undefined). */
bool jm_lookup_method(jr *r, jv obj, const char *name, jv *out);
jv jm_call_method(jr *r, jv self, int id, const jargs *a);
int jm_global_find(const char *name);
jv jm_call_global(jr *r, int id, const jargs *a);
const char *jm_global_name(int id);

#endif
