/* grammar_json_impl.h — the JSON Schema front end's internals shared by its files:
 * the schema document (grammar_json_doc.c: a strict JSON parser keeping member order
 * and numbers as written, exact decimals, equality, compact output) and the JSON
 * grammar pieces (grammar_json_prim.c: whitespace, strings, formats, integer ranges,
 * numbers, any value), the keyword checks, $ref resolution and the oneOf proof
 * (grammar_json_check.c) for the schema walk (grammar_json.c). Not for use outside
 * src/grammar/. Any thread (each document, jprim and jctx has one owner). */
#ifndef INFERD_GRAMMAR_JSON_IMPL_H
#define INFERD_GRAMMAR_JSON_IMPL_H
#include "../util/layer/grammar.h"

#include <stdbool.h>
#include <stdint.h>

#include "grammar_impl.h"
#include "util/buf.h"

/* ---- the document ------------------------------------------------------------------------ */
typedef enum jn_type { JN_NULL, JN_BOOL, JN_NUM, JN_STR, JN_ARR, JN_OBJ } jn_type;

typedef struct jnode {
    jn_type t;
    bool b;              /* JN_BOOL */
    uint32_t n;          /* JN_STR, JN_NUM: bytes of s; JN_ARR, JN_OBJ: children */
    const char *s;       /* JN_STR: decoded UTF-8, NUL after; JN_NUM: the number as written */
    struct jnode **kid;  /* (n) elements / member values, in document order */
    struct jnode **key;  /* (n) JN_OBJ: member names (JN_STR nodes); unique */
} jnode;

typedef struct jdoc {
    jnode *root;
    void **blocks; /* every allocation, freed together */
    int64_t n_blocks, cap_blocks;
} jdoc;

#define JDOC_MAX_DEPTH 200 /* JSON nesting of a schema document */

/* Parse strict JSON (RFC 8259; duplicate member names are an error). 0, or -1 with one
 * line in err (what and the byte offset). jdoc_free accepts a half-built document. */
int jdoc_parse(jdoc *d, const char *text, size_t n, char *err, size_t err_bytes);
void jdoc_free(jdoc *d);
/* The member named key of object o, or NULL (also when o is not an object). */
const jnode *jn_get(const jnode *o, const char *key);
/* JSON Schema equality: numbers by value (1 == 1.0), objects regardless of member
 * order, booleans never equal to numbers. */
bool jn_equal(const jnode *a, const jnode *b);
/* The compact serialization of v (strings escaped as JSON requires, numbers as written). */
void jn_write(sbuf *out, const jnode *v);
/* A JSON string literal of s[0..n) (valid UTF-8): `"`, `\` and controls escaped. */
void jn_write_str(sbuf *out, const char *s, size_t n);

/* ---- exact decimals ------------------------------------------------------------------------ */
#define JDEC_DIGITS 64
/* value = (neg ? -1 : 1) * 0.d[0] d[1] ... d[nd-1] * 10^exp, with d[0] and d[nd-1] not
 * '0'; zero has nd == 0. */
typedef struct jdec {
    bool neg;
    int32_t nd, exp;
    char d[JDEC_DIGITS];
} jdec;

/* A JSON number's text into x: 0, or -1 when it has more than JDEC_DIGITS significant
 * digits (exponents are clamped to +-10^6: far beyond anything compared here). */
int jdec_parse(jdec *x, const char *s, size_t n);
int jdec_cmp(const jdec *a, const jdec *b); /* -1, 0, 1 */
bool jdec_is_int(const jdec *a);
/* floor(a) / ceil(a) into *out: returns 0, or -1 / +1 when the result is below INT64_MIN /
 * above INT64_MAX (*out untouched). */
int jdec_floor(const jdec *a, int64_t *out);
int jdec_ceil(const jdec *a, int64_t *out);

/* ---- grammar pieces -------------------------------------------------------------------------
 * Each returns a rule (or terminal) id, or -1 once the builder has failed. Shared pieces
 * are built once per jprim, on first use. */
typedef struct jprim {
    gram_builder *b;
    gsym ws, digit, hex, str_char, string, number, integer, value, object, array; /* JP_UNSET until built */
    gsym *chain; /* (n_chain) chain[k]: the string character repeated 0..k times */
    int64_t n_chain;
} jprim;
#define JP_UNSET INT32_MIN

#define JP_NUM_INT_DIGITS 15  /* a number's integer part: at most 15 digits */
#define JP_NUM_FRAC_DIGITS 15 /* its fraction */
#define JP_NUM_EXP_DIGITS 2   /* its exponent (2 digits: always a finite double) */
#define JP_NUM_LIM 999999999999999LL /* 10^15 - 1 */

void jp_init(jprim *p, gram_builder *b);
void jp_deinit(jprim *p);
gsym jp_ws(jprim *p);                      /* [ \t\n]{0,GRAM_JSON_MAX_WS} */
gsym jp_lit(jprim *p, const char *s);      /* the bytes of a C string */
gsym jp_string_any(jprim *p);              /* any JSON string literal */
/* A JSON string literal of min..max code points (max < 0: no bound; an escape is one
 * code point). Bounds above GRAM_MAX_REPEAT are built from several repeats; a max that
 * would exceed the builder's limits is lowered (fewer strings, all valid). */
gsym jp_string(jprim *p, int64_t min, int64_t max);
/* A JSON string literal in a format (a simple always-valid subset), or -2 for a format
 * this file does not know. */
gsym jp_format(jprim *p, const char *name);
bool jp_format_known(const char *name);
/* x repeated min..max times (max < 0: unbounded); counts above GRAM_MAX_REPEAT are built
 * from several repeats; max - min above GRAM_MAX_REPEAT is lowered to it. */
gsym jp_repeat(jprim *p, gsym x, int64_t min, int64_t max);
/* Decimal integers in [lo, hi] (lo <= hi), no leading zeros, no "-0". */
gsym jp_int_range(jprim *p, int64_t lo, int64_t hi);
gsym jp_uint_range(jprim *p, uint64_t lo, uint64_t hi);
gsym jp_integer_any(jprim *p); /* any int64 */
gsym jp_number_any(jprim *p);  /* -?(0|[1-9][0-9]{0,14})(.[0-9]{1,15})?([eE][+-]?[0-9]{1,2})? */
gsym jp_fraction(jprim *p);    /* "." [0-9]{1,15} */
gsym jp_value(jprim *p);       /* any JSON value */
gsym jp_object(jprim *p);      /* any JSON object */
gsym jp_array(jprim *p);       /* any JSON array */

/* ---- the schema walk (grammar_json.c, grammar_json_check.c) ------------------------------ */
#define JS_MAX_DEPTH 64 /* schema nesting */

/* JSON types as a mask; numbers split into integers and the rest */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_FRAC = 64, T_ALL = 127 };

/* Schemas that hold at one place: each is an item of a conjunction. */
enum { D_REF = 1, D_ALLOF = 2, D_ANYOF = 4, D_ONEOF = 8 }; /* combinators already expanded */

typedef struct jitem {
    const jnode *node;
    int64_t path;   /* offset of its JSON pointer in jctx.paths */
    unsigned done;
    int32_t parent; /* the item whose $ref / allOf / anyOf / oneOf brought it in, or -1 */
} jitem;

typedef struct jmemo {
    const jnode *node;
    gsym rule;
    bool empty;
} jmemo;

typedef struct jset { /* several schemas compiled together: sorted nodes -> rule */
    const jnode **key;
    int n;
    uint64_t hash;
    gsym rule;
    bool empty;
} jset;

typedef struct jctx {
    gram_builder *b;
    jprim p;
    const jnode *root;
    char *err;
    size_t err_bytes;
    bool failed;
    sbuf paths; /* NUL-terminated JSON pointers */
    jmemo *memo;
    int64_t n_memo, cap_memo;
    int32_t *memo_ix; /* node -> memo index + 1, open addressing */
    int64_t memo_ix_cap;
    jset *sets;
    int64_t n_sets, cap_sets;
    void **synth; /* schemas made up here (a oneOf tag made required), freed at the end */
    int64_t n_synth, cap_synth;
    char tag[16]; /* rule-name prefix: a builder may hold several schemas */
    int64_t work; /* anyOf / oneOf branches compiled */
} jctx;

typedef struct nlist {
    const jnode **v;
    int64_t n, cap;
} nlist;

/* Set the error (the first one wins): the message, then " at " and the JSON pointer at
 * offset path (path < 0: no place). Returns -1. */
int js_fail(jctx *c, int64_t path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* JSON pointers, kept in c->paths: parent + "/" + kw (+ "/" + key or index); offsets. */
int64_t js_path_add(jctx *c, int64_t parent, const char *seg, size_t seg_n);
int64_t js_path_kw(jctx *c, int64_t parent, const char *kw);
int64_t js_path_kw_key(jctx *c, int64_t parent, const char *kw, const jnode *key);
int64_t js_path_kw_idx(jctx *c, int64_t parent, const char *kw, uint32_t i);
/* The keywords of one schema object: known, of the right JSON type, consistent. 0 / -1. */
int js_check_node(jctx *c, const jnode *node, int64_t path);
/* The whole document from node: every schema reachable through keywords checked and every
 * $ref resolved, used by the grammar or not. 0 / -1. */
int js_check_tree(jctx *c, const jnode *node, int64_t path, int depth);
/* Is every keyword of node but $ref an annotation (so node means its target)? */
bool js_is_pure_ref(const jnode *node);
/* The node a "$ref" string names and (path != NULL) its JSON pointer; NULL when
 * unresolvable (an error at `at` when report). */
const jnode *js_resolve(jctx *c, const jnode *ref, int64_t at, int64_t *path, bool report);
/* oneOf at items[io] with branches br: 0 when every two branches (each with the rest of
 * the conjunction) are provably disjoint, else an error naming oneOf. Objects may be
 * told apart by a member (*tag) that the branches flagged in force[0..br->n) do not
 * require: the caller then generates it always in those branches (a subset of each). */
int js_check_oneof(jctx *c, const jitem *items, int n, int io, const jnode *br, const jnode **tag, bool *force);
unsigned js_type_mask(const jnode *type_name); /* 0: not a type name */
unsigned js_value_type(const jnode *v);        /* a value's T_ bit (1.0 is an integer) */
int64_t js_count_value(const jnode *v);        /* a non-negative integer keyword, or -1 */
const jnode *js_member(const jnode *o, const jnode *key); /* by whole name */

#endif
