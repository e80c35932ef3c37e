/* grammar_json.c — JSON Schema (Draft 2020-12 / Draft 7) into a grammar of JSON texts
 * that validate against it. It may produce fewer texts than the schema allows (members
 * in schema order, no extra members, one spelling of each constant, bounded numbers)
 * but never one the schema rejects, and every schema it accepts has a text it reaches.
 *
 * Keywords: type, properties, required, additionalProperties, items (a schema),
 * prefixItems, minItems, maxItems, enum, const, anyOf, oneOf (provably disjoint
 * branches only), allOf, $ref (#, #/$defs/.., #/definitions/.., any #/ pointer; each
 * target compiled once, recursion through named rules), $defs, definitions,
 * minLength, maxLength, pattern (grammar_regex.c), format (date, time, date-time, uuid,
 * email, ipv4), minimum, maximum, exclusiveMinimum, exclusiveMaximum. Ignored
 * annotations: title, description, default, examples, $schema, $id (root only),
 * $comment, deprecated, readOnly, writeOnly, discriminator, nullable (OpenAPI: null is
 * never generated for it, which every validator accepts). Any other keyword is an
 * error naming it and its JSON path.
 *
 * How: the schemas that must all hold at one place (a schema, the targets of its
 * $ref, its allOf elements: a conjunction) are merged keyword by keyword; anyOf and
 * oneOf distribute over the conjunction (S and (A or B) = (S and A) or (S and B)), so a
 * merged conjunction has no combinators left and builds one alternative per JSON type.
 * A schema met alone (a property's, an element's, a $ref target, the root) is compiled
 * once into a rule, so recursive $refs become recursive rules. A conjunction no value
 * satisfies (false, disjoint types, an enum filtered to nothing) is "empty": an anyOf
 * branch or optional property that is empty is left out. Any thread. */
#include "grammar_json_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

#define SEQ(b, ...) gb_seq((b), (const gsym[]){__VA_ARGS__}, (int32_t)(sizeof((gsym[]){__VA_ARGS__}) / sizeof(gsym)))

#define JR_EMPTY INT32_MIN /* a schema no value satisfies; other negatives: an error */
#define MAX_CONJ 64        /* schemas combined in one place (allOf, $ref) */
#define MAX_WORK 20000     /* anyOf / oneOf branches compiled (distribution multiplies them) */
#define MAX_COUNT 60000    /* minLength, minItems */

/* ---- compiling ---------------------------------------------------------------------------- */
static gsym compile_conj(jctx *c, const jitem *in, int n_in, int depth);

static gsym as_rule(jctx *c, gsym s) { return s >= 0 || s == JR_EMPTY ? s : gb_seq(c->b, &s, 1); }

/* The memo: schema node -> its entry, by pointer (open addressing, grown at half full). */
static uint64_t ptr_hash(const void *p) { return ifd_hash_mix64((uint64_t)(uintptr_t)p); }

static int64_t memo_find(const jctx *c, const jnode *node) {
    if (!c->memo_ix_cap) return -1;
    const uint64_t m = (uint64_t)c->memo_ix_cap - 1;
    for (uint64_t h = ptr_hash(node) & m; c->memo_ix[h]; h = (h + 1) & m)
        if (c->memo[c->memo_ix[h] - 1].node == node) return c->memo_ix[h] - 1;
    return -1;
}

/* Index entry c->n_memo (about to be filled for node). */
static bool memo_index(jctx *c, const jnode *node) {
    if ((c->n_memo + 1) * 2 > c->memo_ix_cap) {
        int64_t nc = c->memo_ix_cap ? c->memo_ix_cap * 2 : 256;
        int32_t *q = calloc((size_t)nc, sizeof *q);
        if (!q) return false;
        for (int64_t i = 0; i < c->n_memo; i++) {
            uint64_t h = ptr_hash(c->memo[i].node) & (uint64_t)(nc - 1);
            while (q[h]) h = (h + 1) & (uint64_t)(nc - 1);
            q[h] = (int32_t)i + 1;
        }
        free(c->memo_ix);
        c->memo_ix = q;
        c->memo_ix_cap = nc;
    }
    uint64_t h = ptr_hash(node) & (uint64_t)(c->memo_ix_cap - 1);
    while (c->memo_ix[h]) h = (h + 1) & (uint64_t)(c->memo_ix_cap - 1);
    c->memo_ix[h] = (int32_t)c->n_memo + 1;
    return true;
}

static gsym define_memo(jctx *c, int32_t r, gsym body);

/* One schema met alone: compiled once into a rule (named by its path, so a compile
 * error about recursion says where). */
static gsym compile_schema(jctx *c, const jnode *node, int64_t path, int depth) {
    for (int hops = 0; js_is_pure_ref(node); hops++) {
        if (js_check_node(c, node, path)) return -1;
        if (hops > 32) return js_fail(c, path, "JSON Schema: '$ref' cycle");
        int64_t tp;
        const jnode *t = js_resolve(c, jn_get(node, "$ref"), path, &tp, true);
        if (!t) return -1;
        node = t;
        path = tp;
    }
    if (node->t == JN_BOOL) return node->b ? jp_value(&c->p) : JR_EMPTY;
    int64_t seen = memo_find(c, node);
    if (seen >= 0) return c->memo[seen].empty ? JR_EMPTY : c->memo[seen].rule;
    if (!GVEC_GROW(c->memo, c->cap_memo, c->n_memo + 1) || !memo_index(c, node))
        return js_fail(c, -1, "out of memory");
    const char *ps = c->paths.p + path;
    char name[224];
    int nl = snprintf(name, sizeof name, "%s#%s", c->tag, ps);
    int32_t r = gb_rule(c->b, nl < 200 ? name : NULL, nl < 200 ? (size_t)nl : 0);
    if (r < 0) return -1;
    const int64_t m = c->n_memo++;
    c->memo[m] = (jmemo){.node = node, .rule = r};
    jitem it = {node, path, 0, -1};
    gsym body = compile_conj(c, &it, 1, depth);
    if (body == JR_EMPTY) c->memo[m].empty = true;
    return define_memo(c, r, body);
}

/* Rule r (made before compiling, for recursion) gets body. An empty body: earlier
 * recursive references (if any) point at a rule that matches nothing, which the final
 * productivity check reports. */
static gsym define_memo(jctx *c, int32_t r, gsym body) {
    if (body == JR_EMPTY) {
        const uint32_t none[8] = {0};
        gsym z = gb_byteset(c->b, none);
        return gb_alt(c->b, r, &z, 1) ? -1 : JR_EMPTY;
    }
    if (body < 0) return -1;
    return gb_alt(c->b, r, &body, 1) ? -1 : r;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (const jnode *const *)a, y = (uintptr_t) * (const jnode *const *)b;
    return (x > y) - (x < y);
}

/* The schemas in l (fresh items) together; none: any value. Several schemas together
 * are compiled once per set too (a recursion through merged schemas meets its own set
 * again and refers to its rule). */
static gsym compile_list(jctx *c, const jitem *l, int n, int depth) {
    if (n == 0) return jp_value(&c->p);
    if (n == 1) return compile_schema(c, l[0].node, l[0].path, depth);
    const jnode *key[MAX_CONJ];
    int nk = 0;
    for (int i = 0; i < n && i < MAX_CONJ; i++) key[nk++] = l[i].node;
    qsort(key, (size_t)nk, sizeof *key, cmp_ptr);
    int k = 0;
    for (int i = 0; i < nk; i++)
        if (!k || key[k - 1] != key[i]) key[k++] = key[i];
    nk = k;
    const uint64_t h = ifd_hash_bytes(0x636f, key, sizeof *key * (size_t)nk);
    for (int64_t i = 0; i < c->n_sets; i++) {
        const jset *e = &c->sets[i];
        if (e->hash == h && e->n == nk && !memcmp(e->key, key, sizeof *key * (size_t)nk))
            return e->empty ? JR_EMPTY : e->rule;
    }
    const jnode **copy = malloc(sizeof *copy * (size_t)nk);
    int32_t r = copy ? gb_rule(c->b, NULL, 0) : -1;
    if (!copy || r < 0 || !GVEC_GROW(c->sets, c->cap_sets, c->n_sets + 1)) {
        free(copy);
        return r < 0 && copy ? -1 : js_fail(c, -1, "out of memory");
    }
    memcpy(copy, key, sizeof *key * (size_t)nk);
    const int64_t m = c->n_sets++;
    c->sets[m] = (jset){.key = copy, .n = nk, .hash = h, .rule = r};
    gsym body = compile_conj(c, l, n, depth);
    if (body == JR_EMPTY) c->sets[m].empty = true;
    return define_memo(c, r, body);
}

/* ---- merged keywords ------------------------------------------------------------------------ */
typedef struct bound {
    jdec v;
    bool set, excl;
} bound;

typedef struct jview {
    unsigned types;
    bool has_vals;
    nlist vals; /* enum / const, intersected */
    int64_t min_len, max_len; /* max_len < 0: none */
    const jnode *pattern, *format;
    int64_t pattern_path;
    bound lo, hi;
    int64_t min_items, max_items;
    bool kw_str, kw_num, kw_arr, kw_obj; /* keywords that constrain that type */
} jview;

static void tighten(bound *b, const jnode *v, bool excl, bool lower) {
    jdec d;
    if (jdec_parse(&d, v->s, v->n)) return; /* check_node refused it */
    int cmp = b->set ? jdec_cmp(&d, &b->v) : 0;
    if (!b->set || (lower ? cmp > 0 : cmp < 0)) {
        b->v = d;
        b->set = true;
        b->excl = excl;
    } else if (cmp == 0) {
        b->excl |= excl;
    }
}

/* Intersect the value set with list[0..n) (enum); -1 on no memory or when the pairs to
 * compare are too many. */
static int vals_intersect(jctx *c, int64_t path, jview *w, const jnode *const *list, uint32_t n) {
    if (w->has_vals && w->vals.n * (int64_t)n > 4000000)
        return js_fail(c, path, "JSON Schema: 'enum'/'const' values combined (allOf / $ref) are too many to intersect");
    if (!w->has_vals) {
        w->has_vals = true;
        for (uint32_t i = 0; i < n; i++)
            if (!GVEC_GROW(w->vals.v, w->vals.cap, w->vals.n + 1)) return js_fail(c, -1, "out of memory");
            else w->vals.v[w->vals.n++] = list[i];
        return 0;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < w->vals.n; i++) {
        bool in = false;
        for (uint32_t j = 0; j < n && !in; j++) in = jn_equal(w->vals.v[i], list[j]);
        if (in) w->vals.v[k++] = w->vals.v[i];
    }
    w->vals.n = k;
    return 0;
}

static int merge(jctx *c, const jitem *items, int n, jview *w) {
    *w = (jview){.types = T_ALL, .max_len = -1, .max_items = -1};
    for (int i = 0; i < n; i++) {
        const jnode *x = items[i].node;
        if (x->t != JN_OBJ) continue;
        for (uint32_t j = 0; j < x->n; j++) {
            const char *k = x->key[j]->s;
            const jnode *v = x->kid[j];
            if (!strcmp(k, "type")) {
                unsigned m = 0;
                if (v->t == JN_ARR)
                    for (uint32_t t = 0; t < v->n; t++) m |= js_type_mask(v->kid[t]);
                else m = js_type_mask(v);
                w->types &= m;
            } else if (!strcmp(k, "const")) {
                if (vals_intersect(c, items[i].path, w, (const jnode *const *)&v, 1)) return -1;
            } else if (!strcmp(k, "enum")) {
                if (vals_intersect(c, items[i].path, w, (const jnode *const *)v->kid, v->n)) return -1;
            } else if (!strcmp(k, "minLength")) {
                w->min_len = IFD_MAX(w->min_len, js_count_value(v));
                w->kw_str = true;
            } else if (!strcmp(k, "maxLength")) {
                int64_t m = js_count_value(v);
                w->max_len = w->max_len < 0 ? m : IFD_MIN(w->max_len, m);
                w->kw_str = true;
            } else if (!strcmp(k, "pattern") || !strcmp(k, "format")) {
                const jnode **slot = k[0] == 'p' ? &w->pattern : &w->format;
                if (*slot && !jn_equal(*slot, v))
                    return js_fail(c, items[i].path, "JSON Schema: two different '%s' values combined (allOf / $ref) "
                                                   "are not supported", k);
                *slot = v;
                if (k[0] == 'p') w->pattern_path = items[i].path;
                w->kw_str = true;
            } else if (!strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum")) {
                tighten(&w->lo, v, k[0] == 'e', true);
                w->kw_num = true;
            } else if (!strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum")) {
                tighten(&w->hi, v, k[0] == 'e', false);
                w->kw_num = true;
            } else if (!strcmp(k, "minItems")) {
                w->min_items = IFD_MAX(w->min_items, js_count_value(v));
                w->kw_arr = true;
            } else if (!strcmp(k, "maxItems")) {
                int64_t m = js_count_value(v);
                w->max_items = w->max_items < 0 ? m : IFD_MIN(w->max_items, m);
                w->kw_arr = true;
            } else if (!strcmp(k, "items") || !strcmp(k, "prefixItems")) {
                w->kw_arr = true;
            } else if (!strcmp(k, "properties") || !strcmp(k, "required") || !strcmp(k, "additionalProperties")) {
                w->kw_obj = true;
            }
        }
    }
    if (w->pattern && (w->min_len > 0 || w->max_len >= 0))
        return js_fail(c, w->pattern_path, "JSON Schema: 'pattern' combined with 'minLength'/'maxLength' is not supported");
    if (w->format && (w->pattern || w->min_len > 0 || w->max_len >= 0))
        return js_fail(c, items[0].path, "JSON Schema: 'format' combined with 'pattern'/'minLength'/'maxLength' is not "
                                       "supported");
    return 0;
}

static int64_t cp_count(const jnode *s) {
    int64_t n = 0;
    for (uint32_t i = 0; i < s->n; i++) n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
    return n;
}

/* enum / const: the values that pass the other keywords, each as its compact text. */
static gsym build_values(jctx *c, const jview *w, int64_t path) {
    gsym *alts = malloc(sizeof *alts * (size_t)(w->vals.n + 1)), r = -1;
    int32_t n = 0;
    sbuf out = {0};
    if (!alts) return js_fail(c, -1, "out of memory");
    for (int64_t i = 0; i < w->vals.n; i++) {
        const jnode *v = w->vals.v[i];
        if (!(js_value_type(v) & w->types)) continue;
        if (v->t == JN_STR) {
            if (w->pattern || w->format) {
                js_fail(c, path, "JSON Schema: 'enum'/'const' combined with '%s' is not supported",
                        w->pattern ? "pattern" : "format");
                goto out;
            }
            int64_t len = cp_count(v);
            if (len < w->min_len || (w->max_len >= 0 && len > w->max_len)) continue;
        } else if (v->t == JN_NUM) {
            jdec d;
            if (jdec_parse(&d, v->s, v->n)) continue;
            if (w->lo.set && (jdec_cmp(&d, &w->lo.v) < 0 || (w->lo.excl && !jdec_cmp(&d, &w->lo.v)))) continue;
            if (w->hi.set && (jdec_cmp(&d, &w->hi.v) > 0 || (w->hi.excl && !jdec_cmp(&d, &w->hi.v)))) continue;
        } else if ((v->t == JN_ARR && w->kw_arr) || (v->t == JN_OBJ && w->kw_obj)) {
            js_fail(c, path, "JSON Schema: 'enum'/'const' with %s keywords is not supported",
                    v->t == JN_ARR ? "array" : "object");
            goto out;
        }
        sbuf_reset(&out);
        jn_write(&out, v);
        if (out.oom) {
            js_fail(c, -1, "out of memory");
            goto out;
        }
        alts[n++] = gb_literal(c->b, out.p, out.n);
    }
    r = n ? gb_choice(c->b, alts, n) : JR_EMPTY;
out:
    sbuf_free(&out);
    free(alts);
    return r;
}

static gsym build_string(jctx *c, const jview *w) {
    gram_builder *b = c->b;
    if (w->pattern) {
        int32_t rule = -1;
        char rerr[256];
        if (gram_regex(b, w->pattern->s, w->pattern->n, GRAM_RE_JSON_STRING, &rule, rerr, sizeof rerr))
            return js_fail(c, w->pattern_path, "JSON Schema: 'pattern': %s", rerr);
        gsym q = gb_byte(b, '"');
        return SEQ(b, q, rule, q);
    }
    if (w->format) return jp_format(&c->p, w->format->s);
    if (w->max_len >= 0 && w->min_len > w->max_len) return JR_EMPTY;
    if (w->min_len > MAX_COUNT) return js_fail(c, -1, "JSON Schema: 'minLength' above %d is not supported", MAX_COUNT);
    return jp_string(&c->p, w->min_len, w->max_len);
}

/* Integer bounds of the view: [*lo, *hi] within int64. *beyond: integers of the range
 * lie outside int64 only. */
static void int_bounds(const jview *w, int64_t *lo, int64_t *hi, bool *beyond) {
    int64_t v;
    int rc;
    *lo = INT64_MIN;
    *hi = INT64_MAX;
    *beyond = false;
    if (w->lo.set) {
        rc = w->lo.excl ? jdec_floor(&w->lo.v, &v) : jdec_ceil(&w->lo.v, &v);
        if (rc > 0 || (rc == 0 && w->lo.excl && v == INT64_MAX)) *beyond = true;
        else if (rc == 0) *lo = w->lo.excl ? v + 1 : v;
    }
    if (w->hi.set) {
        rc = w->hi.excl ? jdec_ceil(&w->hi.v, &v) : jdec_floor(&w->hi.v, &v);
        if (rc < 0 || (rc == 0 && w->hi.excl && v == INT64_MIN)) *beyond = true;
        else if (rc == 0) *hi = w->hi.excl ? v - 1 : v;
    }
}

/* Numbers: without bounds any (bounded-length) number or any int64; with bounds, the
 * integers of the range and, for "number", N.ddd where the whole of [N, N+1) (or of
 * (-(N+1), -N] for -N.ddd) lies in the range; no exponents. */
static gsym build_number(jctx *c, const jview *w, int64_t path) {
    gram_builder *b = c->b;
    const bool frac = w->types & T_FRAC;
    if (!w->lo.set && !w->hi.set) return frac ? jp_number_any(&c->p) : jp_integer_any(&c->p);
    if (w->lo.set && w->hi.set) {
        int cmp = jdec_cmp(&w->lo.v, &w->hi.v);
        if (cmp > 0 || (cmp == 0 && (w->lo.excl || w->hi.excl))) return JR_EMPTY;
    }
    int64_t lo, hi;
    bool beyond;
    int_bounds(w, &lo, &hi, &beyond);
    if (!frac) {
        if (beyond) return js_fail(c, path, "JSON Schema: 'minimum'/'maximum': the integers allowed are outside int64");
        return lo <= hi ? jp_int_range(&c->p, lo, hi) : JR_EMPTY;
    }
    const int64_t L = JP_NUM_LIM;
    gsym alts[3];
    int32_t n = 0;
    if (!beyond && IFD_MAX(lo, -L) <= IFD_MIN(hi, L)) alts[n++] = jp_int_range(&c->p, IFD_MAX(lo, -L), IFD_MIN(hi, L));
    if (!beyond) {
        int64_t v;
        /* N.ddd: N >= lo, N + 1 <= hi */
        int64_t top = L;
        int rc = w->hi.set ? jdec_floor(&w->hi.v, &v) : 1;
        if (rc < 0) top = -1;
        else if (rc == 0) top = v < 1 ? -1 : IFD_MIN(L, v - 1);
        int64_t bot = IFD_MAX(lo, 0);
        if (bot <= top) alts[n++] = SEQ(b, jp_uint_range(&c->p, (uint64_t)bot, (uint64_t)top), jp_fraction(&c->p));
        /* -N.ddd: -(N + 1) >= lo, -N <= hi */
        top = L;
        rc = w->lo.set ? jdec_ceil(&w->lo.v, &v) : -1;
        if (rc > 0 || (rc == 0 && v > -1)) top = -1;
        else if (rc == 0 && v > -L - 1) top = -v - 1;
        bot = hi >= 0 ? 0 : hi < -L ? L + 1 : -hi;
        if (bot <= top)
            alts[n++] = SEQ(b, gb_byte(b, '-'), jp_uint_range(&c->p, (uint64_t)bot, (uint64_t)top), jp_fraction(&c->p));
    }
    if (!n)
        return js_fail(c, path, "JSON Schema: 'minimum'/'maximum' on a number: no value in the range has the forms "
                              "generated (integers, and N.ddd where all of [N, N+1) lies in the range; at most %d "
                              "integer digits)",
                     JP_NUM_INT_DIGITS);
    return gb_choice(b, alts, n);
}

/* Arrays: position i's schemas are each schema's prefixItems[i], or its items past its
 * prefix; "[" ws (e0 ws ("," ws e ws)*)? "]" with the count in [min, max]. */
static gsym build_array(jctx *c, const jitem *items, int n, const jview *w, int depth) {
    gram_builder *b = c->b;
    uint32_t P = 0;
    for (int i = 0; i < n; i++) {
        const jnode *pi = jn_get(items[i].node, "prefixItems");
        if (pi) P = IFD_MAX(P, pi->n);
    }
    int64_t min = w->min_items, max = w->max_items;
    if (min > MAX_COUNT) return js_fail(c, items[0].path, "JSON Schema: 'minItems' above %d is not supported", MAX_COUNT);
    if (max >= 0 && min > max) return JR_EMPTY;
    gsym *el = calloc((size_t)P + 1, sizeof *el); /* el[P]: past the prefixes */
    jitem *l = malloc(sizeof *l * (size_t)(n + 1));
    gsym r = -1;
    if (!el || !l) {
        r = js_fail(c, -1, "out of memory");
        goto out;
    }
    for (uint32_t pos = 0; pos <= P; pos++) {
        if (max >= 0 && pos >= max) break;
        int m = 0;
        for (int i = 0; i < n; i++) {
            const jnode *x = items[i].node, *pi = jn_get(x, "prefixItems"), *it = jn_get(x, "items");
            if (pi && pos < pi->n && pos < P) {
                l[m] = (jitem){pi->kid[pos], js_path_kw_idx(c, items[i].path, "prefixItems", pos), 0, -1};
                m++;
            } else if (it) {
                l[m] = (jitem){it, js_path_kw(c, items[i].path, "items"), 0, -1};
                m++;
            }
        }
        if (c->failed) goto out;
        el[pos] = compile_list(c, l, m, depth + 1);
        if (el[pos] == JR_EMPTY) {
            if (pos < min) {
                r = JR_EMPTY;
                goto out;
            }
            max = pos; /* no value fits this position: stop before it */
            break;
        }
        if (el[pos] < 0) goto out;
    }
    gsym ws = jp_ws(&c->p), comma = gb_byte(b, ',');
    if (max == 0) {
        r = SEQ(b, gb_byte(b, '['), ws, gb_byte(b, ']'));
        goto out;
    }
    /* R(i): the elements from i on, each after a comma, i already written (i >= 1) */
    const uint32_t start = IFD_MAX(P, 1u);
    gsym R;
    if (max >= 0 && max <= start) R = gb_empty(b);
    else R = jp_repeat(&c->p, SEQ(b, comma, ws, el[P], ws), IFD_MAX(0, min - start), max < 0 ? -1 : max - start);
    for (uint32_t i = start - 1; i >= 1 && i < P; i--) {
        if (max >= 0 && i >= max) continue; /* R stays empty */
        gsym more = SEQ(b, comma, ws, el[i], ws, R);
        R = i >= min ? gb_choice(b, (const gsym[]){more, gb_empty(b)}, 2) : more;
    }
    gsym first = SEQ(b, el[0], ws, R);
    gsym body = min == 0 ? gb_repeat(b, first, 0, 1) : first;
    r = SEQ(b, gb_byte(b, '['), ws, body, gb_byte(b, ']'));
out:
    free(el);
    free(l);
    return r;
}

/* Member names -> their index in a list (open addressing on the name's bytes, grown at
 * half full): objects with many members stay linear. */
typedef struct nameix {
    int32_t *slot; /* index + 1; 0 empty */
    int64_t cap;
} nameix;

static uint64_t name_hash(const jnode *k) { return ifd_hash_bytes(0x6a73, k->s, k->n); }

/* The index of name k in list (via ix), or -1. */
static int64_t nameix_find(const nameix *ix, const nlist *list, const jnode *k) {
    if (!ix->cap) return -1;
    const uint64_t m = (uint64_t)ix->cap - 1;
    for (uint64_t h = name_hash(k) & m; ix->slot[h]; h = (h + 1) & m) {
        const jnode *o = list->v[ix->slot[h] - 1];
        if (o->n == k->n && !memcmp(o->s, k->s, k->n)) return ix->slot[h] - 1;
    }
    return -1;
}

/* Append k to list unless it is there; false on no memory. */
static bool nameix_add(nameix *ix, nlist *list, const jnode *k) {
    if (nameix_find(ix, list, k) >= 0) return true;
    if ((list->n + 1) * 2 > ix->cap) {
        int64_t nc = ix->cap ? ix->cap * 2 : 64;
        int32_t *q = calloc((size_t)nc, sizeof *q);
        if (!q) return false;
        for (int64_t i = 0; i < list->n; i++) {
            uint64_t h = name_hash(list->v[i]) & (uint64_t)(nc - 1);
            while (q[h]) h = (h + 1) & (uint64_t)(nc - 1);
            q[h] = (int32_t)i + 1;
        }
        free(ix->slot);
        ix->slot = q;
        ix->cap = nc;
    }
    if (!GVEC_GROW(list->v, list->cap, list->n + 1)) return false;
    uint64_t h = name_hash(k) & (uint64_t)(ix->cap - 1);
    while (ix->slot[h]) h = (h + 1) & (uint64_t)(ix->cap - 1);
    ix->slot[h] = (int32_t)list->n + 1;
    list->v[list->n++] = k;
    return true;
}

/* Objects: the members named in properties (schema order; merged over the
 * conjunction), then required names without a properties entry (checked against
 * additionalProperties); optional ones may be left out. F(i): members from i on with
 * none written yet; C(i): the same after one (each starts with a comma). */
static gsym build_object(jctx *c, const jitem *items, int n, int depth) {
    gram_builder *b = c->b;
    nlist keys = {0}, req = {0};
    nameix kix = {0}, rix = {0};
    jitem *l = malloc(sizeof *l * (size_t)(n + 1));
    gsym *val = NULL, r = -1;
    const jnode **cell = NULL; /* (keys.n, n) each schema's properties entry for each key */
    sbuf lit = {0};
    if (!l) return js_fail(c, -1, "out of memory");
    for (int i = 0; i < n; i++) {
        const jnode *pr = jn_get(items[i].node, "properties"), *rq = jn_get(items[i].node, "required");
        for (uint32_t j = 0; pr && j < pr->n; j++)
            if (!nameix_add(&kix, &keys, pr->key[j])) goto oom;
        for (uint32_t j = 0; rq && j < rq->n; j++)
            if (!nameix_add(&rix, &req, rq->kid[j])) goto oom;
    }
    /* required names not among the keys go last */
    for (int64_t k = 0; k < req.n; k++)
        if (!nameix_add(&kix, &keys, req.v[k])) goto oom;
    if (keys.n * n > 10000000) {
        r = js_fail(c, items[0].path, "JSON Schema: too many properties");
        goto out;
    }
    val = malloc(sizeof *val * (size_t)(keys.n + 1));
    cell = calloc((size_t)(keys.n * n + 1), sizeof *cell);
    if (!val || !cell) goto oom;
    for (int i = 0; i < n; i++) {
        const jnode *pr = jn_get(items[i].node, "properties");
        for (uint32_t j = 0; pr && j < pr->n; j++) cell[nameix_find(&kix, &keys, pr->key[j]) * n + i] = pr->kid[j];
    }
    for (int64_t k = 0; k < keys.n; k++) {
        int m = 0;
        for (int i = 0; i < n; i++) {
            const jnode *x = items[i].node, *pr = cell[k * n + i], *ap;
            if (pr) l[m++] = (jitem){pr, js_path_kw_key(c, items[i].path, "properties", keys.v[k]), 0, -1};
            else if ((ap = jn_get(x, "additionalProperties")))
                l[m++] = (jitem){ap, js_path_kw(c, items[i].path, "additionalProperties"), 0, -1};
        }
        if (c->failed) goto out;
        val[k] = compile_list(c, l, m, depth + 1);
        if (val[k] != JR_EMPTY && val[k] < 0) goto out;
    }
    gsym ws = jp_ws(&c->p), comma = gb_byte(b, ','), colon = gb_byte(b, ':');
    gsym F = gb_empty(b), C = F;
    for (int64_t k = keys.n - 1; k >= 0; k--) {
        const bool required = nameix_find(&rix, &req, keys.v[k]) >= 0;
        if (val[k] == JR_EMPTY) {
            if (required) {
                r = JR_EMPTY;
                goto out;
            }
            continue;
        }
        sbuf_reset(&lit);
        jn_write_str(&lit, keys.v[k]->s, keys.v[k]->n);
        if (lit.oom) goto oom;
        gsym kv = SEQ(b, gb_literal(b, lit.p, lit.n), ws, colon, ws, val[k]);
        gsym cn = SEQ(b, comma, ws, kv, ws, C), fn = SEQ(b, kv, ws, C);
        if (!required) {
            cn = gb_choice(b, (const gsym[]){cn, C}, 2);
            fn = gb_choice(b, (const gsym[]){fn, F}, 2);
        }
        C = cn;
        F = fn;
    }
    r = SEQ(b, gb_byte(b, '{'), ws, F, gb_byte(b, '}'));
    goto out;
oom:
    r = js_fail(c, -1, "out of memory");
out:
    sbuf_free(&lit);
    free(val);
    free(cell);
    free(keys.v);
    free(req.v);
    free(kix.slot);
    free(rix.slot);
    free(l);
    return r;
}

/* A conjunction with no combinators left: one alternative per JSON type it allows. */
static gsym build(jctx *c, const jitem *items, int n, int depth) {
    gram_builder *b = c->b;
    jview w;
    gsym r = -1;
    if (merge(c, items, n, &w)) goto out;
    if (!w.types) {
        r = JR_EMPTY;
        goto out;
    }
    if (w.has_vals) {
        r = build_values(c, &w, items[0].path);
        goto out;
    }
    if (w.types == T_ALL && !w.kw_str && !w.kw_num && !w.kw_arr && !w.kw_obj) {
        r = jp_value(&c->p);
        goto out;
    }
    gsym alts[6];
    int32_t na = 0;
    gsym part;
    if (w.types & T_NULL) alts[na++] = jp_lit(&c->p, "null");
    if (w.types & T_BOOL) alts[na++] = gb_choice(b, (const gsym[]){jp_lit(&c->p, "true"), jp_lit(&c->p, "false")}, 2);
    if (w.types & T_STR) {
        if ((part = w.kw_str ? build_string(c, &w) : jp_string_any(&c->p)) != JR_EMPTY) alts[na++] = part;
        if (c->failed) goto out;
    }
    if (w.types & (T_INT | T_FRAC)) {
        if ((part = build_number(c, &w, items[0].path)) != JR_EMPTY) alts[na++] = part;
        if (c->failed) goto out;
    }
    if (w.types & T_ARR) {
        if ((part = w.kw_arr ? build_array(c, items, n, &w, depth) : jp_array(&c->p)) != JR_EMPTY) alts[na++] = part;
        if (c->failed) goto out;
    }
    if (w.types & T_OBJ) {
        if ((part = w.kw_obj ? build_object(c, items, n, depth) : jp_object(&c->p)) != JR_EMPTY) alts[na++] = part;
        if (c->failed) goto out;
    }
    r = na ? gb_choice(b, alts, na) : JR_EMPTY;
out:
    free(w.vals.v);
    return c->failed ? -1 : r;
}

/* Add x to the conjunction unless it is there already. A schema that brings in itself
 * (through its $ref / allOf / anyOf / oneOf chain) would be validated forever at one
 * place: an error. */
static int conj_add(jctx *c, jitem *items, int *n, jitem x, int64_t at) {
    for (int32_t k = x.parent; k >= 0; k = items[k].parent)
        if (items[k].node == x.node)
            return js_fail(c, at, "JSON Schema: '$ref' recursion without progress (a schema includes itself at the "
                                "same place)");
    for (int i = 0; i < *n; i++)
        if (items[i].node == x.node) return 0;
    if (*n >= MAX_CONJ) return js_fail(c, at, "JSON Schema: more than %d schemas combined with allOf / $ref", MAX_CONJ);
    items[(*n)++] = x;
    return 0;
}

/* The schema {"required": [tag]}, made here (kept until the end of the compile). */
static const jnode *synth_required(jctx *c, const jnode *tag) {
    static jnode required_name = {.t = JN_STR, .s = "required", .n = 8};
    struct synth {
        jnode obj, arr;
        jnode *obj_kid[1], *obj_key[1], *arr_kid[1];
    } *s = calloc(1, sizeof *s);
    if (!s || !GVEC_GROW(c->synth, c->cap_synth, c->n_synth + 1)) {
        free(s);
        js_fail(c, -1, "out of memory");
        return NULL;
    }
    c->synth[c->n_synth++] = s;
    s->arr_kid[0] = (jnode *)tag; /* never written through */
    s->arr = (jnode){.t = JN_ARR, .n = 1, .kid = s->arr_kid};
    s->obj_kid[0] = &s->arr;
    s->obj_key[0] = &required_name;
    s->obj = (jnode){.t = JN_OBJ, .n = 1, .kid = s->obj_kid, .key = s->obj_key};
    return &s->obj;
}

/* The schemas in[0..n_in) together. */
static gsym compile_conj(jctx *c, const jitem *in, int n_in, int depth) {
    if (depth > JS_MAX_DEPTH) return js_fail(c, in[0].path, "JSON Schema: nested more than %d levels deep", JS_MAX_DEPTH);
    jitem *items = malloc(sizeof *items * MAX_CONJ);
    gsym r = -1;
    if (!items) return js_fail(c, -1, "out of memory");
    int n = 0;
    for (int i = 0; i < n_in; i++)
        if (conj_add(c, items, &n, in[i], in[i].path)) goto out;
    /* expand $ref and allOf */
    for (int i = 0; i < n; i++) {
        const jnode *x = items[i].node;
        if (js_check_node(c, x, items[i].path)) goto out;
        if (x->t == JN_BOOL) {
            if (!x->b) {
                r = JR_EMPTY;
                goto out;
            }
            continue;
        }
        const jnode *ref = jn_get(x, "$ref"), *all = jn_get(x, "allOf");
        if (ref && !(items[i].done & D_REF)) {
            int64_t tp;
            const jnode *t = js_resolve(c, ref, items[i].path, &tp, true);
            items[i].done |= D_REF;
            if (!t || conj_add(c, items, &n, (jitem){t, tp, 0, i}, items[i].path)) goto out;
        }
        if (all && !(items[i].done & D_ALLOF)) {
            items[i].done |= D_ALLOF;
            for (uint32_t k = 0; k < all->n; k++) {
                int64_t p = js_path_kw_idx(c, items[i].path, "allOf", k);
                if (p < 0 || conj_add(c, items, &n, (jitem){all->kid[k], p, 0, i}, items[i].path)) goto out;
            }
        }
    }
    /* distribute the first anyOf / oneOf */
    for (int i = 0; i < n; i++) {
        const jnode *x = items[i].node, *any = jn_get(x, "anyOf"), *one = jn_get(x, "oneOf");
        const jnode *br = any && !(items[i].done & D_ANYOF) ? any : one && !(items[i].done & D_ONEOF) ? one : NULL;
        if (!br) continue;
        const unsigned flag = br == any ? D_ANYOF : D_ONEOF;
        gsym *alts = malloc(sizeof *alts * br->n);
        jitem *sub = malloc(sizeof *sub * (size_t)(n + 2));
        bool *force = calloc(br->n, sizeof *force);
        const jnode *tag = NULL, *req = NULL;
        int32_t na = 0;
        if (!alts || !sub || !force) {
            free(alts);
            free(sub);
            free(force);
            js_fail(c, -1, "out of memory");
            goto out;
        }
        if (flag == D_ONEOF && br->n > 1 &&
            (js_check_oneof(c, items, n, i, br, &tag, force) || (tag && !(req = synth_required(c, tag))))) {
            free(alts);
            free(sub);
            free(force);
            goto out;
        }
        for (uint32_t k = 0; k < br->n; k++) {
            if (++c->work > MAX_WORK) {
                js_fail(c, items[i].path, "JSON Schema: too complex (more than %d branches of anyOf / oneOf "
                                          "compiled: combinations multiply)", MAX_WORK);
                na = -1;
                break;
            }
            memcpy(sub, items, sizeof *sub * (size_t)n);
            sub[i].done |= flag;
            int64_t p = js_path_kw_idx(c, items[i].path, flag == D_ANYOF ? "anyOf" : "oneOf", k);
            sub[n] = (jitem){br->kid[k], p, 0, i};
            if (force[k]) sub[n + 1] = (jitem){req, items[i].path, 0, i};
            gsym a = p < 0 ? -1 : compile_conj(c, sub, n + 1 + force[k], depth + 1);
            if (a == JR_EMPTY) continue;
            if (a < 0) {
                na = -1;
                break;
            }
            alts[na++] = a;
        }
        r = na < 0 ? -1 : na ? gb_choice(c->b, alts, na) : JR_EMPTY;
        free(alts);
        free(sub);
        free(force);
        goto out;
    }
    r = build(c, items, n, depth);
out:
    free(items);
    if (c->failed) return -1;
    return as_rule(c, r);
}

/* ---- entry points ---------------------------------------------------------------------------- */
/* Reachable rules of g that derive no string (a recursion that never ends, a pattern
 * or a rule that matches nothing) would let a generation walk into a dead end. */
static int check_productive(const gram *g, char *err, size_t err_bytes) {
    const int32_t nr = g->n_rules;
    uint8_t *prod = calloc((size_t)nr + 1, 1), *seen = calloc((size_t)nr + 1, 1);
    int32_t *stack = malloc(sizeof *stack * ((size_t)nr + 1));
    int rc = -1;
    if (!prod || !seen || !stack) {
        ifd_errf(err, err_bytes, -1, "out of memory");
        goto out;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < nr; r++) {
            if (prod[r]) continue;
            for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !prod[r]; a++) {
                bool ok = true;
                for (int32_t p = g->alt_pos[a]; ok && g->sym[p] != GSYM_END; p++) {
                    int32_t s = g->sym[p];
                    if (s >= 0) ok = prod[s];
                    else {
                        ok = false;
                        for (int k = 0; k < 8 && !ok; k++) ok = g->sets[~s][k] != 0;
                    }
                }
                if (ok) prod[r] = changed = 1;
            }
        }
    }
    int32_t sp = 0;
    stack[sp++] = g->root;
    seen[g->root] = 1;
    rc = 0;
    while (sp && !rc) {
        int32_t r = stack[--sp];
        if (!prod[r]) {
            rc = ifd_errf(err, err_bytes, -1,
                          "JSON Schema: part of the schema admits no finite JSON value (a required recursion that "
                          "never ends, or a pattern that matches nothing)");
            break;
        }
        for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            for (int32_t p = g->alt_pos[a]; g->sym[p] != GSYM_END; p++)
                if (g->sym[p] >= 0 && !seen[g->sym[p]]) {
                    seen[g->sym[p]] = 1;
                    stack[sp++] = g->sym[p];
                }
    }
out:
    free(prod);
    free(seen);
    free(stack);
    return rc;
}

/* The schema's rule into b (no productivity check). */
static int build_schema(gram_builder *b, const jdoc *d, int32_t *rule, char *err, size_t err_bytes) {
    jctx c = {.b = b, .root = d->root, .err = err, .err_bytes = err_bytes};
    jp_init(&c.p, b);
    *rule = -1;
    for (int k = 1; k < 1000; k++) {
        char probe[20];
        c.tag[0] = 0;
        if (k > 1) snprintf(c.tag, sizeof c.tag, "%d", k);
        int n = snprintf(probe, sizeof probe, "%s#", c.tag);
        if (gb_find(b, probe, (size_t)n) < 0) break;
    }
    sbuf_put(&c.paths, "", 1); /* the root's pointer "" at offset 0 */
    gsym r = c.paths.oom ? js_fail(&c, -1, "out of memory") : js_check_tree(&c, d->root, 0, 0) ? -1 : compile_schema(&c, d->root, 0, 0);
    if (!c.failed && r == JR_EMPTY) js_fail(&c, 0, "JSON Schema: no JSON value satisfies the schema");
    if (!c.failed && gb_error(b)) js_fail(&c, -1, "JSON Schema: %s", gb_error(b));
    if (!c.failed) *rule = r;
    jp_deinit(&c.p);
    sbuf_free(&c.paths);
    free(c.memo);
    free(c.memo_ix);
    for (int64_t i = 0; i < c.n_sets; i++) free(c.sets[i].key);
    free(c.sets);
    for (int64_t i = 0; i < c.n_synth; i++) free(c.synth[i]);
    free(c.synth);
    return c.failed ? -1 : 0;
}

int gram_from_json_schema(const char *schema, size_t n, gram **out, char *err, size_t err_bytes) {
    *out = NULL;
    jdoc d;
    int32_t root;
    gram_builder *b = gb_new();
    int rc = -1;
    if (!b) return ifd_errf(err, err_bytes, -1, "out of memory");
    if (!jdoc_parse(&d, schema, n, err, err_bytes) && !build_schema(b, &d, &root, err, err_bytes)) {
        char cerr[400];
        if (gram_compile(b, root, out, cerr, sizeof cerr)) ifd_errf(err, err_bytes, -1, "JSON Schema: %s", cerr);
        else if (check_productive(*out, err, err_bytes)) {
            gram_unref(*out);
            *out = NULL;
        } else {
            rc = 0;
        }
    }
    jdoc_free(&d);
    gb_free(b);
    return rc;
}

int gram_json_schema(gram_builder *b, const char *schema, size_t n, int32_t *rule, char *err, size_t err_bytes) {
    /* the checks need a compiled grammar: build it once alone, then into b */
    *rule = -1;
    gram *g = NULL;
    if (gram_from_json_schema(schema, n, &g, err, err_bytes)) return -1;
    gram_unref(g);
    jdoc d;
    if (jdoc_parse(&d, schema, n, err, err_bytes)) return -1;
    int rc = build_schema(b, &d, rule, err, err_bytes);
    jdoc_free(&d);
    return rc;
}
