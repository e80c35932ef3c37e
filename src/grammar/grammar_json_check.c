/* grammar_json_check.c — the JSON Schema front end's checks: the keyword table (every
 * keyword known, of the right JSON type, consistent within its schema; anything else is
 * an error naming it and its JSON path), $ref resolution (JSON pointers into the
 * document), the JSON paths errors name, and the proof that a oneOf's branches are
 * disjoint (then a value generated from one branch matches no other, and oneOf may be
 * compiled as anyOf). Any thread (a jctx has one owner). */
#include "grammar_json_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors and paths ----------------------------------------------------------------------- */
static const char *js_path_of(const jctx *c, int64_t off) {
    const char *s = c->paths.p ? c->paths.p + off : "";
    return *s ? s : "/";
}

int js_fail(jctx *c, int64_t path, const char *fmt, ...) {
    if (!c->failed) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (path >= 0) ifd_errf(c->err, c->err_bytes, -1, "%s at %s", msg, js_path_of(c, path));
        else ifd_errf(c->err, c->err_bytes, -1, "%s", msg);
        c->failed = true;
    }
    return -1;
}

/* parent + "/" + seg (escaped as a JSON pointer: ~0 ~1), NUL-terminated; its offset */
int64_t js_path_add(jctx *c, int64_t parent, const char *seg, size_t seg_n) {
    const size_t plen = strlen(c->paths.p + parent);
    if (!sbuf_reserve(&c->paths, plen + 2 * seg_n + 3)) return js_fail(c, -1, "out of memory");
    int64_t off = (int64_t)c->paths.n;
    sbuf_put(&c->paths, c->paths.p + parent, plen);
    sbuf_put(&c->paths, "/", 1);
    for (size_t i = 0; i < seg_n; i++) {
        if (seg[i] == '~') sbuf_put(&c->paths, "~0", 2);
        else if (seg[i] == '/') sbuf_put(&c->paths, "~1", 2);
        else sbuf_put(&c->paths, seg + i, 1);
    }
    sbuf_put(&c->paths, "", 1);
    return c->paths.oom ? js_fail(c, -1, "out of memory") : off;
}

int64_t js_path_kw(jctx *c, int64_t parent, const char *kw) { return js_path_add(c, parent, kw, strlen(kw)); }

int64_t js_path_kw_key(jctx *c, int64_t parent, const char *kw, const jnode *key) {
    int64_t p = js_path_kw(c, parent, kw);
    return p < 0 ? p : js_path_add(c, p, key->s, key->n);
}

int64_t js_path_kw_idx(jctx *c, int64_t parent, const char *kw, uint32_t i) {
    char num[16];
    int64_t p = js_path_kw(c, parent, kw);
    snprintf(num, sizeof num, "%u", i);
    return p < 0 ? p : js_path_add(c, p, num, strlen(num));
}

/* ---- keywords ------------------------------------------------------------------------------ */
typedef enum kw_kind {
    K_ANNOT, K_ID, K_BOOL, K_TYPE, K_OBJ_SCHEMAS, K_REQUIRED, K_SCHEMA, K_SCHEMA_LIST, K_COUNT, K_ENUM, K_CONST,
    K_NUMBER, K_STRING, K_FORMAT
} kw_kind;

static const struct {
    const char *name;
    kw_kind kind;
} KEYWORDS[] = {
    {"title", K_ANNOT}, {"description", K_ANNOT}, {"default", K_ANNOT}, {"examples", K_ANNOT},
    {"$schema", K_ANNOT}, {"$comment", K_ANNOT}, {"deprecated", K_ANNOT}, {"readOnly", K_ANNOT},
    {"writeOnly", K_ANNOT}, {"discriminator", K_ANNOT}, {"$id", K_ID}, {"nullable", K_BOOL},
    {"$defs", K_OBJ_SCHEMAS}, {"definitions", K_OBJ_SCHEMAS}, {"type", K_TYPE}, {"properties", K_OBJ_SCHEMAS},
    {"required", K_REQUIRED}, {"additionalProperties", K_SCHEMA}, {"items", K_SCHEMA},
    {"prefixItems", K_SCHEMA_LIST}, {"minItems", K_COUNT}, {"maxItems", K_COUNT}, {"enum", K_ENUM},
    {"const", K_CONST}, {"anyOf", K_SCHEMA_LIST}, {"oneOf", K_SCHEMA_LIST}, {"allOf", K_SCHEMA_LIST},
    {"$ref", K_STRING}, {"minLength", K_COUNT}, {"maxLength", K_COUNT}, {"pattern", K_STRING},
    {"format", K_FORMAT}, {"minimum", K_NUMBER}, {"maximum", K_NUMBER}, {"exclusiveMinimum", K_NUMBER},
    {"exclusiveMaximum", K_NUMBER},
};

static int kw_find(const jnode *key) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(KEYWORDS); i++)
        if (strlen(KEYWORDS[i].name) == key->n && !memcmp(KEYWORDS[i].name, key->s, key->n)) return (int)i;
    return -1;
}

static const struct {
    const char *name;
    unsigned mask;
} TYPES[] = {{"null", T_NULL}, {"boolean", T_BOOL}, {"object", T_OBJ}, {"array", T_ARR},
             {"string", T_STR}, {"integer", T_INT}, {"number", T_INT | T_FRAC}};

unsigned js_type_mask(const jnode *s) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(TYPES); i++)
        if (s->t == JN_STR && strlen(TYPES[i].name) == s->n && !memcmp(TYPES[i].name, s->s, s->n)) return TYPES[i].mask;
    return 0;
}

/* The type bit of a JSON value (a number without a fraction is an integer: 1.0 is). */
unsigned js_value_type(const jnode *v) {
    switch (v->t) {
    case JN_NULL: return T_NULL;
    case JN_BOOL: return T_BOOL;
    case JN_OBJ: return T_OBJ;
    case JN_ARR: return T_ARR;
    case JN_STR: return T_STR;
    case JN_NUM: {
        jdec d;
        return jdec_parse(&d, v->s, v->n) || jdec_is_int(&d) ? T_INT : T_FRAC;
    }
    }
    return 0;
}

static bool is_schema(const jnode *v) { return v->t == JN_OBJ || v->t == JN_BOOL; }

/* A non-negative integer keyword value (as JSON Schema allows: 2.0 is one), saturated
 * at INT64_MAX / 4 (far beyond anything generated). -1 when it is not one. */
int64_t js_count_value(const jnode *v) {
    jdec d;
    int64_t x;
    if (v->t != JN_NUM || jdec_parse(&d, v->s, v->n) || !jdec_is_int(&d) || (d.neg && d.nd)) return -1;
    if (jdec_floor(&d, &x) || x > INT64_MAX / 4) return INT64_MAX / 4;
    return x;
}

static int64_t get_count(const jnode *node, const char *kw, int64_t none) {
    const jnode *v = jn_get(node, kw);
    return v ? js_count_value(v) : none;
}

/* The member of object o named by the string node key (whole names: a key may hold NUL). */
const jnode *js_member(const jnode *o, const jnode *key) {
    if (!o || o->t != JN_OBJ) return NULL;
    for (uint32_t i = 0; i < o->n; i++)
        if (o->key[i]->n == key->n && !memcmp(o->key[i]->s, key->s, key->n)) return o->kid[i];
    return NULL;
}

/* Keywords of one schema object: known, of the right JSON type, consistent. */
int js_check_node(jctx *c, const jnode *node, int64_t path) {
    if (node->t == JN_BOOL) return 0;
    if (node->t != JN_OBJ) return js_fail(c, path, "JSON Schema: a schema must be an object or a boolean");
    for (uint32_t i = 0; i < node->n; i++) {
        const jnode *k = node->key[i], *v = node->kid[i];
        int ix = kw_find(k);
        if (ix < 0 || (KEYWORDS[ix].kind == K_ID && node != c->root))
            return js_fail(c, path, "unsupported JSON Schema keyword '%.*s'", (int)IFD_MIN(k->n, 64), k->s);
        const char *kw = KEYWORDS[ix].name, *want = NULL;
        switch (KEYWORDS[ix].kind) {
        case K_ANNOT:
        case K_ID:
        case K_CONST: break;
        case K_BOOL:
            if (v->t != JN_BOOL) want = "a boolean";
            break;
        case K_TYPE:
            if (v->t == JN_ARR) {
                if (!v->n) want = "a type name or a non-empty array of them";
                for (uint32_t j = 0; j < v->n; j++)
                    if (!js_type_mask(v->kid[j])) want = "a type name or a non-empty array of them";
            } else if (!js_type_mask(v)) {
                want = "one of null, boolean, object, array, string, integer, number";
            }
            break;
        case K_OBJ_SCHEMAS:
            if (v->t != JN_OBJ) want = "an object of schemas";
            for (uint32_t j = 0; !want && j < v->n; j++)
                if (!is_schema(v->kid[j]) && strcmp(kw, "$defs") && strcmp(kw, "definitions")) want = "an object of schemas";
            break;
        case K_REQUIRED:
            if (v->t != JN_ARR) want = "an array of strings";
            for (uint32_t j = 0; !want && j < v->n; j++)
                if (v->kid[j]->t != JN_STR) want = "an array of strings";
            break;
        case K_SCHEMA:
            if (!is_schema(v))
                want = v->t == JN_ARR && !strcmp(kw, "items") ? "a schema (the array form of Draft 7 is not supported: use prefixItems)"
                                                               : "a schema";
            break;
        case K_SCHEMA_LIST:
            if (v->t != JN_ARR || !v->n) want = "a non-empty array of schemas";
            for (uint32_t j = 0; !want && j < v->n; j++)
                if (!is_schema(v->kid[j])) want = "a non-empty array of schemas";
            break;
        case K_COUNT:
            if (js_count_value(v) < 0) want = "a non-negative integer";
            break;
        case K_ENUM:
            if (v->t != JN_ARR || !v->n) want = "a non-empty array";
            break;
        case K_NUMBER: {
            jdec d;
            if (v->t != JN_NUM) want = "a number";
            else if (jdec_parse(&d, v->s, v->n)) want = "a number of at most 64 significant digits";
            break;
        }
        case K_STRING:
            if (v->t != JN_STR) want = "a string";
            break;
        case K_FORMAT:
            if (v->t != JN_STR) want = "a string";
            else if (!jp_format_known(v->s))
                return js_fail(c, path, "JSON Schema: unsupported format '%.*s' (supported: date, time, date-time, uuid, "
                                      "email, ipv4)",
                             (int)IFD_MIN(v->n, 64), v->s);
            break;
        }
        if (want) return js_fail(c, path, "JSON Schema: '%s' must be %s", kw, want);
    }
    /* consistency within this schema */
    static const char *const pairs[][2] = {{"minLength", "maxLength"}, {"minItems", "maxItems"}};
    for (size_t i = 0; i < IFD_ARRAY_LEN(pairs); i++) {
        int64_t lo = get_count(node, pairs[i][0], 0), hi = get_count(node, pairs[i][1], -1);
        if (hi >= 0 && lo > hi) return js_fail(c, path, "JSON Schema: '%s' > '%s'", pairs[i][0], pairs[i][1]);
    }
    if (jn_get(node, "pattern") && (jn_get(node, "minLength") || jn_get(node, "maxLength")))
        return js_fail(c, path, "JSON Schema: 'pattern' combined with 'minLength'/'maxLength' is not supported");
    if (jn_get(node, "pattern") && jn_get(node, "format"))
        return js_fail(c, path, "JSON Schema: 'pattern' combined with 'format' is not supported");
    if (jn_get(node, "format") && (jn_get(node, "minLength") || jn_get(node, "maxLength")))
        return js_fail(c, path, "JSON Schema: 'format' combined with 'minLength'/'maxLength' is not supported");
    const jnode *req = jn_get(node, "required"), *ap = jn_get(node, "additionalProperties");
    if (req && ap && ap->t == JN_BOOL && !ap->b) {
        const jnode *props = jn_get(node, "properties");
        for (uint32_t j = 0; j < req->n; j++)
            if (!js_member(props, req->kid[j]))
                return js_fail(c, path,
                             "JSON Schema: required property '%.*s' is not in 'properties' and additionalProperties is "
                             "false",
                             (int)IFD_MIN(req->kid[j]->n, 64), req->kid[j]->s);
    }
    return 0;
}

/* Is every keyword of node but $ref an annotation (so node means its target)? */
bool js_is_pure_ref(const jnode *node) {
    if (node->t != JN_OBJ || !jn_get(node, "$ref")) return false;
    for (uint32_t i = 0; i < node->n; i++) {
        int ix = kw_find(node->key[i]);
        if (ix < 0) return false;
        kw_kind k = KEYWORDS[ix].kind;
        if (!(k == K_ANNOT || k == K_ID || k == K_BOOL || !strcmp(KEYWORDS[ix].name, "$ref") ||
              !strcmp(KEYWORDS[ix].name, "$defs") || !strcmp(KEYWORDS[ix].name, "definitions")))
            return false;
    }
    return true;
}

static int hexval(char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* The node a "$ref" names, and (path != NULL) its JSON pointer. Only references into
 * this document ("#", "#/a/b": percent-decoded, then ~1 ~0). NULL when unresolvable
 * (an error when report). */
const jnode *js_resolve(jctx *c, const jnode *ref, int64_t at, int64_t *path, bool report) {
    const char *s = ref->s;
    const jnode *node = c->root;
    if (path) *path = 0;
    if (s[0] != '#' || (s[1] && s[1] != '/')) {
        if (report)
            js_fail(c, at, "JSON Schema: unresolvable $ref '%.*s' (only '#' and '#/...' pointers into this document "
                         "are supported)",
                  (int)IFD_MIN(ref->n, 100), s);
        return NULL;
    }
    char seg[256];
    for (size_t i = 1; s[i] && node;) {
        size_t n = 0;
        for (i++; s[i] && s[i] != '/'; i++) {
            char ch = s[i];
            if (ch == '%' && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
                ch = (char)(hexval(s[i + 1]) << 4 | hexval(s[i + 2]));
                i += 2;
            }
            if (n + 1 >= sizeof seg) {
                node = NULL;
                break;
            }
            seg[n++] = ch;
        }
        if (!node) break;
        /* JSON pointer escapes, in place */
        size_t m = 0;
        for (size_t k = 0; k < n; k++) {
            if (seg[k] == '~' && k + 1 < n && (seg[k + 1] == '0' || seg[k + 1] == '1')) {
                seg[m++] = seg[k + 1] == '0' ? '~' : '/';
                k++;
            } else {
                seg[m++] = seg[k];
            }
        }
        seg[m] = 0;
        const jnode *next = NULL;
        if (node->t == JN_OBJ) {
            for (uint32_t k = 0; k < node->n && !next; k++)
                if (node->key[k]->n == m && !memcmp(node->key[k]->s, seg, m)) next = node->kid[k];
        } else if (node->t == JN_ARR && m > 0 && m < 10 && (seg[0] != '0' || m == 1)) {
            uint32_t ix = 0;
            bool ok = true;
            for (size_t k = 0; k < m; k++) {
                if (seg[k] < '0' || seg[k] > '9') ok = false;
                ix = ix * 10 + (uint32_t)(seg[k] - '0');
            }
            if (ok && ix < node->n) next = node->kid[ix];
        }
        node = next;
        if (node && path && (*path = js_path_add(c, *path, seg, m)) < 0) return NULL;
    }
    if (!node && report)
        js_fail(c, at, "JSON Schema: unresolvable $ref '%.*s'", (int)IFD_MIN(ref->n, 100), s);
    return node;
}

/* Every schema of the document reachable through its keywords (properties, items,
 * prefixItems, additionalProperties, anyOf / oneOf / allOf, $defs, definitions), checked
 * with js_check_node and every $ref resolved, whether or not the grammar ends up using
 * it: an unsupported keyword or a dangling reference is never silently ignored. */
int js_check_tree(jctx *c, const jnode *node, int64_t path, int depth) {
    if (depth > JS_MAX_DEPTH) return js_fail(c, path, "JSON Schema: nested more than %d levels deep", JS_MAX_DEPTH);
    if (js_check_node(c, node, path)) return -1;
    if (node->t != JN_OBJ) return 0;
    const jnode *ref = jn_get(node, "$ref");
    if (ref && !js_resolve(c, ref, path, NULL, true)) return -1;
    for (uint32_t i = 0; i < node->n; i++) {
        const char *kw = node->key[i]->s;
        const jnode *v = node->kid[i];
        const bool map = !strcmp(kw, "properties") || !strcmp(kw, "$defs") || !strcmp(kw, "definitions");
        const bool one = !strcmp(kw, "items") || !strcmp(kw, "additionalProperties");
        const bool list = !strcmp(kw, "prefixItems") || !strcmp(kw, "anyOf") || !strcmp(kw, "oneOf") || !strcmp(kw, "allOf");
        if (one) {
            int64_t p = js_path_kw(c, path, kw);
            if (p < 0 || js_check_tree(c, v, p, depth + 1)) return -1;
        }
        for (uint32_t k = 0; (map || list) && k < v->n; k++) {
            int64_t p = map ? js_path_kw_key(c, path, kw, v->key[k]) : js_path_kw_idx(c, path, kw, k);
            if (p < 0 || js_check_tree(c, v->kid[k], p, depth + 1)) return -1;
        }
    }
    return 0;
}

/* ---- semantics for oneOf: what a schema may match, as a superset ----------------------------- */
static bool nl_push(nlist *l, const jnode *x) {
    for (int64_t i = 0; i < l->n; i++)
        if (l->v[i] == x) return true;
    if (!GVEC_GROW(l->v, l->cap, l->n + 1)) return false;
    l->v[l->n++] = x;
    return true;
}

/* The schemas that hold wherever the ones in l hold: l closed under $ref and allOf
 * (unresolvable references are left out: compiling reports them). */
static bool closure(jctx *c, nlist *l) {
    for (int64_t i = 0; i < l->n && l->n < 256; i++) {
        const jnode *x = l->v[i], *r = jn_get(x, "$ref"), *all = jn_get(x, "allOf"), *t;
        if (r && r->t == JN_STR && (t = js_resolve(c, r, -1, NULL, false)) && !nl_push(l, t)) return false;
        for (uint32_t k = 0; all && all->t == JN_ARR && k < all->n; k++)
            if (!nl_push(l, all->kid[k])) return false;
    }
    return true;
}

static unsigned sem_types(jctx *c, const jnode *x, int depth);

static unsigned sem_types_list(jctx *c, nlist *l, int depth) {
    unsigned m = T_ALL;
    if (!closure(c, l)) return T_ALL;
    for (int64_t i = 0; i < l->n; i++) {
        const jnode *x = l->v[i];
        if (x->t == JN_BOOL) {
            if (!x->b) m = 0;
            continue;
        }
        const jnode *t = jn_get(x, "type"), *e = jn_get(x, "enum"), *k = jn_get(x, "const");
        if (t) {
            unsigned tm = 0;
            if (t->t == JN_ARR)
                for (uint32_t j = 0; j < t->n; j++) tm |= js_type_mask(t->kid[j]);
            else tm = js_type_mask(t);
            m &= tm ? tm : T_ALL;
        }
        if (k) m &= js_value_type(k);
        if (e && e->t == JN_ARR) {
            unsigned em = 0;
            for (uint32_t j = 0; j < e->n; j++) em |= js_value_type(e->kid[j]);
            m &= em;
        }
        static const char *const unions[] = {"anyOf", "oneOf"};
        for (int u = 0; u < 2; u++) {
            const jnode *a = jn_get(x, unions[u]);
            if (!a || a->t != JN_ARR) continue;
            unsigned um = 0;
            for (uint32_t j = 0; j < a->n; j++) um |= sem_types(c, a->kid[j], depth + 1);
            m &= um;
        }
    }
    return m;
}

static unsigned sem_types(jctx *c, const jnode *x, int depth) {
    if (depth > 16) return T_ALL;
    nlist l = {0};
    unsigned m = nl_push(&l, x) ? sem_types_list(c, &l, depth) : T_ALL;
    free(l.v);
    return m;
}

/* A finite set of values l's schemas may match (the first enum / const among them),
 * into *vals; false when none is known. */
static bool sem_values(const nlist *l, nlist *vals) {
    for (int64_t i = 0; i < l->n; i++) {
        const jnode *e = jn_get(l->v[i], "enum"), *k = jn_get(l->v[i], "const");
        if (k) return nl_push(vals, k);
        if (e && e->t == JN_ARR) {
            for (uint32_t j = 0; j < e->n; j++)
                if (!nl_push(vals, e->kid[j])) return false;
            return true;
        }
    }
    return false;
}

static bool disjoint_values(const nlist *a, const nlist *b) {
    for (int64_t i = 0; i < a->n; i++)
        for (int64_t j = 0; j < b->n; j++)
            if (jn_equal(a->v[i], b->v[j])) return false;
    return true;
}

static bool sem_requires(const nlist *l, const jnode *key) {
    for (int64_t i = 0; i < l->n; i++) {
        const jnode *r = jn_get(l->v[i], "required");
        for (uint32_t j = 0; r && r->t == JN_ARR && j < r->n; j++)
            if (jn_equal(r->kid[j], key)) return true;
    }
    return false;
}

/* The finite values l allows for member key (from a properties[key] with enum/const). */
static bool sem_member_values(jctx *c, const nlist *l, const jnode *key, nlist *vals) {
    for (int64_t i = 0; i < l->n; i++) {
        const jnode *pr = js_member(jn_get(l->v[i], "properties"), key);
        if (!pr) continue;
        nlist sub = {0};
        bool ok = nl_push(&sub, pr) && closure(c, &sub) && sem_values(&sub, vals);
        free(sub.v);
        if (ok) return true;
        vals->n = 0;
    }
    return false;
}

/* Objects of a and b told apart by a member both require, with disjoint finite values. */
static bool discriminated(jctx *c, const nlist *a, const nlist *b) {
    for (int64_t i = 0; i < a->n; i++) {
        const jnode *r = jn_get(a->v[i], "required");
        for (uint32_t j = 0; r && r->t == JN_ARR && j < r->n; j++) {
            const jnode *key = r->kid[j];
            if (key->t != JN_STR || !sem_requires(b, key)) continue;
            nlist va = {0}, vb = {0};
            bool ok = sem_member_values(c, a, key, &va) && sem_member_values(c, b, key, &vb) && disjoint_values(&va, &vb);
            free(va.v);
            free(vb.v);
            if (ok) return true;
        }
    }
    return false;
}

/* oneOf at items[io] (branches br): every two branches, each with the rest of the
 * conjunction, must be provably disjoint: then a value generated from one matches no
 * other, and oneOf is anyOf. */
/* Does member key take finite, disjoint values in a and b (properties[key] with enum /
 * const)? Then objects holding key tell the two apart. */
static bool tag_separates(jctx *c, const nlist *a, const nlist *b, const jnode *key) {
    nlist va = {0}, vb = {0};
    bool ok = sem_member_values(c, a, key, &va) && sem_member_values(c, b, key, &vb) && disjoint_values(&va, &vb);
    free(va.v);
    free(vb.v);
    return ok;
}

/* A member that tells apart every pair of branches in need (need[a * k + b]): the
 * discriminator's propertyName first, then the names in branch a0's properties. */
static const jnode *find_tag(jctx *c, const jnode *oneof_node, const nlist *sets, uint32_t k, const bool *need,
                             uint32_t a0) {
    const jnode *disc = jn_get(jn_get(oneof_node, "discriminator"), "propertyName");
    nlist cand = {0};
    if (disc && disc->t == JN_STR) nl_push(&cand, disc);
    for (int64_t i = 0; i < sets[a0].n; i++) {
        const jnode *pr = jn_get(sets[a0].v[i], "properties");
        for (uint32_t j = 0; pr && pr->t == JN_OBJ && j < pr->n && cand.n < 64; j++) nl_push(&cand, pr->key[j]);
    }
    const jnode *tag = NULL;
    for (int64_t t = 0; t < cand.n && !tag; t++) {
        bool all = true;
        for (uint32_t a = 0; a < k && all; a++)
            for (uint32_t b = a + 1; b < k && all; b++)
                if (need[a * k + b]) all = tag_separates(c, &sets[a], &sets[b], cand.v[t]);
        if (all) tag = cand.v[t];
    }
    free(cand.v);
    return tag;
}

int js_check_oneof(jctx *c, const jitem *items, int n, int io, const jnode *br, const jnode **tag, bool *force) {
    const uint32_t k = br->n;
    nlist *sets = calloc(k, sizeof *sets), *vals = calloc(k, sizeof *vals);
    unsigned *mask = calloc(k, sizeof *mask);
    bool *finite = calloc(k, sizeof *finite), *need = calloc((size_t)k * k, sizeof *need);
    int rc = 0;
    int64_t first_need = -1;
    *tag = NULL;
    memset(force, 0, sizeof *force * k);
    if (!sets || !vals || !mask || !finite || !need) {
        rc = js_fail(c, -1, "out of memory");
        goto out;
    }
    for (uint32_t a = 0; a < k && !rc; a++) {
        bool ok = nl_push(&sets[a], br->kid[a]);
        for (int i = 0; i < n && ok; i++) ok = nl_push(&sets[a], items[i].node);
        ok = ok && closure(c, &sets[a]);
        if (!ok) rc = js_fail(c, -1, "out of memory");
        mask[a] = sem_types_list(c, &sets[a], 0);
        finite[a] = sem_values(&sets[a], &vals[a]);
    }
    int64_t work = 0; /* value comparisons: bounded, a request may hold large enums */
    for (uint32_t a = 0; a < k && !rc; a++)
        for (uint32_t b2 = a + 1; b2 < k && !rc; b2++) {
            unsigned ov = mask[a] & mask[b2];
            work += 1 + (finite[a] && finite[b2] ? vals[a].n * vals[b2].n : 0);
            if (work > 4000000) {
                rc = js_fail(c, items[io].path, "JSON Schema: 'oneOf' too large to check for disjoint branches");
                break;
            }
            if (!ov || (finite[a] && finite[b2] && disjoint_values(&vals[a], &vals[b2]))) continue;
            if (ov == T_OBJ && discriminated(c, &sets[a], &sets[b2])) continue;
            if (ov == T_OBJ) { /* perhaps a tag member that is not required: generated always */
                need[a * k + b2] = true;
                if (first_need < 0) first_need = a;
                continue;
            }
            rc = js_fail(c, items[io].path,
                       "JSON Schema: 'oneOf' branches %u and %u may both match (only provably disjoint branches are "
                       "supported: different types, different constants, or objects with a member of different "
                       "constant values; use anyOf if overlap is fine)",
                       a, b2);
        }
    if (!rc && first_need >= 0) {
        *tag = find_tag(c, items[io].node, sets, k, need, (uint32_t)first_need);
        if (!*tag) {
            uint32_t a = 0, b2 = 0;
            for (uint32_t x = 0; x < k * k; x++)
                if (need[x]) {
                    a = x / k;
                    b2 = x % k;
                    break;
                }
            rc = js_fail(c, items[io].path,
                         "JSON Schema: 'oneOf' branches %u and %u may both match (only provably disjoint branches are "
                         "supported: different types, different constants, or objects with a member of different "
                         "constant values; use anyOf if overlap is fine)",
                         a, b2);
        }
        for (uint32_t x = 0; x < k * k && !rc; x++)
            if (need[x]) force[x / k] = force[x % k] = true;
    }
out:
    for (uint32_t a = 0; a < k && sets && vals; a++) {
        free(sets[a].v);
        free(vals[a].v);
    }
    free(sets);
    free(vals);
    free(mask);
    free(finite);
    free(need);
    return rc;
}

