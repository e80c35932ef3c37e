/* grammar.c — the grammar IR: the builder (rules, alternatives, byte-set terminals, the
 * helper rules front ends compose) and gram_compile, which checks a builder and freezes
 * it into the flat layout the matcher walks (grammar_match.c).
 *
 * Layout of a compiled gram: every alternative of every rule is a run of symbols in one
 * array, `sym`, closed by GSYM_END; a position is an index into it. A rule's
 * alternatives start at alt_pos[rule_alt[r] .. rule_alt[r + 1]). Terminals are byte
 * sets; the compile also splits the 256 bytes into classes that no set tells apart, and
 * stores each set as a set of classes (the matcher's transitions are per class).
 * Any thread (a builder has one owner). */
#include "grammar_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

/* ---- growable arrays -------------------------------------------------------------------- */
bool gvec_grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

/* ---- builder ------------------------------------------------------------------------------ */
typedef struct brule {
    char *name; /* NULL: a helper */
    uint32_t name_len;
    int32_t n_alts;
    /* made by gb_repeat(rep_of, rep_min, -1): an unbounded repetition (rep_min 0 or 1),
     * else rep_of -1 */
    int32_t rep_of, rep_min;
} brule;

typedef struct balt {
    int32_t rule, off, n;
} balt;

struct gram_builder {
    brule *rules;
    int64_t n_rules, cap_rules;
    balt *alts;
    int64_t n_alts, cap_alts;
    gsym *syms;
    int64_t n_syms, cap_syms;
    uint32_t (*sets)[8];
    int64_t n_sets, cap_sets;
    /* open-addressing indexes: set contents -> id + 1, name -> rule + 1 */
    int32_t *set_ix, *name_ix;
    int64_t set_ix_cap, name_ix_cap;
    int32_t empty_rule; /* gb_empty's rule, -1 until made */
    char err[256];
    bool failed;
};

int gb_fail(gram_builder *b, const char *fmt, ...) {
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, sizeof b->err, fmt, ap);
        va_end(ap);
        b->failed = true;
    }
    return -1;
}

const char *gb_error(const gram_builder *b) { return b->failed ? b->err : NULL; }

gram_builder *gb_new(void) {
    gram_builder *b = calloc(1, sizeof *b);
    if (b) b->empty_rule = -1;
    return b;
}

void gb_free(gram_builder *b) {
    if (!b) return;
    for (int64_t i = 0; i < b->n_rules; i++) free(b->rules[i].name);
    free(b->rules);
    free(b->alts);
    free(b->syms);
    free(b->sets);
    free(b->set_ix);
    free(b->name_ix);
    free(b);
}

/* An open-addressing index of int32 ids (+1; 0 = empty) over *ix (cap a power of two,
 * grown at half full). key_hash(id) rehashes on growth. */
static bool ix_grow(int32_t **ix, int64_t *cap, int64_t n, uint64_t (*hash_of)(const gram_builder *, int32_t),
                    const gram_builder *b) {
    if ((n + 1) * 2 <= *cap) return true;
    int64_t nc = *cap ? *cap * 2 : 64;
    int32_t *q = calloc((size_t)nc, sizeof *q);
    if (!q) return false;
    for (int64_t i = 0; i < *cap; i++) {
        int32_t v = (*ix)[i];
        if (!v) continue;
        uint64_t h = hash_of(b, v - 1) & (uint64_t)(nc - 1);
        while (q[h]) h = (h + 1) & (uint64_t)(nc - 1);
        q[h] = v;
    }
    free(*ix);
    *ix = q;
    *cap = nc;
    return true;
}

static uint64_t set_hash(const gram_builder *b, int32_t id) {
    return ifd_hash_bytes(0x5e7, b->sets[id], sizeof b->sets[id]);
}
static uint64_t name_hash(const gram_builder *b, int32_t id) {
    return ifd_hash_bytes(0x4a3e, b->rules[id].name, b->rules[id].name_len);
}

int32_t gb_find(const gram_builder *b, const char *name, size_t name_len) {
    if (!b->name_ix_cap) return -1;
    uint64_t m = (uint64_t)b->name_ix_cap - 1, h = ifd_hash_bytes(0x4a3e, name, name_len) & m;
    for (; b->name_ix[h]; h = (h + 1) & m) {
        const brule *r = &b->rules[b->name_ix[h] - 1];
        if (r->name_len == name_len && !memcmp(r->name, name, name_len)) return b->name_ix[h] - 1;
    }
    return -1;
}

int32_t gb_rule(gram_builder *b, const char *name, size_t name_len) {
    if (b->failed) return -1;
    if (b->n_rules >= GRAM_MAX_RULES) return gb_fail(b, "grammar too large (more than %d rules)", GRAM_MAX_RULES);
    if (!GVEC_GROW(b->rules, b->cap_rules, b->n_rules + 1)) return gb_fail(b, "out of memory");
    brule *r = &b->rules[b->n_rules];
    *r = (brule){.rep_of = -1};
    if (name) {
        if (name_len > 200) return gb_fail(b, "rule name too long");
        if (gb_find(b, name, name_len) >= 0) return gb_fail(b, "rule '%.*s' defined twice", (int)name_len, name);
        r->name = malloc(name_len + 1);
        if (!r->name) return gb_fail(b, "out of memory");
        memcpy(r->name, name, name_len);
        r->name[name_len] = 0;
        r->name_len = (uint32_t)name_len;
        if (!ix_grow(&b->name_ix, &b->name_ix_cap, b->n_rules + 1, name_hash, b)) {
            free(r->name);
            r->name = NULL;
            return gb_fail(b, "out of memory");
        }
        uint64_t m = (uint64_t)b->name_ix_cap - 1, h = ifd_hash_bytes(0x4a3e, name, name_len) & m;
        while (b->name_ix[h]) h = (h + 1) & m;
        b->name_ix[h] = (int32_t)b->n_rules + 1;
    }
    return (int32_t)b->n_rules++;
}

int32_t gb_n_alts(const gram_builder *b, int32_t rule) {
    return rule >= 0 && rule < b->n_rules ? b->rules[rule].n_alts : 0;
}

int gb_alt(gram_builder *b, int32_t rule, const gsym *syms, int32_t n) {
    if (b->failed) return -1;
    if (rule < 0 || rule >= b->n_rules || n < 0) return gb_fail(b, "bad rule id");
    for (int32_t i = 0; i < n; i++)
        if (syms[i] >= b->n_rules || (syms[i] < 0 && ~syms[i] >= b->n_sets)) return gb_fail(b, "bad symbol");
    if (b->n_syms + n + 1 > GRAM_MAX_SYMS)
        return gb_fail(b, "grammar too large (more than %d symbols)", GRAM_MAX_SYMS);
    if (!GVEC_GROW(b->syms, b->cap_syms, b->n_syms + n) || !GVEC_GROW(b->alts, b->cap_alts, b->n_alts + 1))
        return gb_fail(b, "out of memory");
    if (n) memcpy(b->syms + b->n_syms, syms, sizeof *syms * (size_t)n);
    b->alts[b->n_alts++] = (balt){rule, (int32_t)b->n_syms, n};
    b->n_syms += n;
    b->rules[rule].n_alts++;
    return 0;
}

gsym gb_byteset(gram_builder *b, const uint32_t bits[8]) {
    if (b->failed) return -1;
    if (b->set_ix_cap) {
        uint64_t m = (uint64_t)b->set_ix_cap - 1, h = ifd_hash_bytes(0x5e7, bits, 32) & m;
        for (; b->set_ix[h]; h = (h + 1) & m)
            if (!memcmp(b->sets[b->set_ix[h] - 1], bits, 32)) return ~(b->set_ix[h] - 1);
    }
    if (b->n_sets >= GRAM_MAX_RULES) return gb_fail(b, "grammar too large (byte sets)");
    if (!GVEC_GROW(b->sets, b->cap_sets, b->n_sets + 1)) return gb_fail(b, "out of memory");
    memcpy(b->sets[b->n_sets], bits, 32);
    if (!ix_grow(&b->set_ix, &b->set_ix_cap, b->n_sets + 1, set_hash, b)) return gb_fail(b, "out of memory");
    uint64_t m = (uint64_t)b->set_ix_cap - 1, h = ifd_hash_bytes(0x5e7, bits, 32) & m;
    while (b->set_ix[h]) h = (h + 1) & m;
    b->set_ix[h] = (int32_t)b->n_sets + 1;
    return ~(gsym)b->n_sets++;
}

gsym gb_byterange(gram_builder *b, uint8_t lo, uint8_t hi) {
    uint32_t bits[8] = {0};
    for (unsigned c = lo; c <= hi; c++) bits[c >> 5] |= 1u << (c & 31);
    return gb_byteset(b, bits);
}

gsym gb_byte(gram_builder *b, uint8_t c) { return gb_byterange(b, c, c); }

gsym gb_seq(gram_builder *b, const gsym *syms, int32_t n) {
    if (n == 1 && syms[0] >= 0) return syms[0];
    int32_t r = gb_rule(b, NULL, 0);
    if (r < 0 || gb_alt(b, r, syms, n)) return -1;
    return r;
}

gsym gb_choice(gram_builder *b, const gsym *syms, int32_t n) {
    if (n == 1 && syms[0] >= 0) return syms[0];
    int32_t r = gb_rule(b, NULL, 0);
    if (r < 0) return -1;
    for (int32_t i = 0; i < n; i++)
        if (gb_alt(b, r, &syms[i], 1)) return -1;
    return r;
}

gsym gb_empty(gram_builder *b) {
    if (b->empty_rule >= 0 && !b->failed) return b->empty_rule;
    int32_t r = gb_rule(b, NULL, 0);
    if (r < 0 || gb_alt(b, r, NULL, 0)) return -1;
    return b->empty_rule = r;
}

gsym gb_literal(gram_builder *b, const char *s, size_t n) {
    if (b->failed) return -1;
    if (n > (size_t)GRAM_MAX_SYMS) return gb_fail(b, "literal too long");
    gsym stack[64], *v = n <= 64 ? stack : malloc(sizeof *v * n);
    if (!v) return gb_fail(b, "out of memory");
    for (size_t i = 0; i < n; i++) v[i] = gb_byte(b, (uint8_t)s[i]);
    int32_t r = gb_rule(b, NULL, 0);
    if (r >= 0 && gb_alt(b, r, v, (int32_t)n)) r = -1;
    if (v != stack) free(v);
    return r;
}

gsym gb_repeat(gram_builder *b, gsym x, int32_t min, int32_t max) {
    if (b->failed) return -1;
    if (min < 0 || min > GRAM_MAX_REPEAT || max > GRAM_MAX_REPEAT || (max >= 0 && max < min))
        return gb_fail(b, "repetition bounds {%d,%d} out of range (at most %d)", min, max, GRAM_MAX_REPEAT);
    /* an unbounded repetition of an unbounded repetition is one: (y*)* (y*)+ (y+)* = y*,
     * (y+)+ = y+ (nested ones would make every nesting level a stack frame of its own:
     * a hostile (((a+)+)+)... would have the matcher track exponentially many) */
    if (max < 0 && min <= 1 && x >= 0 && x < b->n_rules && b->rules[x].rep_of >= 0)
        return gb_repeat(b, b->rules[x].rep_of, min && b->rules[x].rep_min ? 1 : 0, -1);
    int32_t r = gb_rule(b, NULL, 0);
    if (r < 0) return -1;
    if (max < 0 && min <= 1) {
        b->rules[r].rep_of = x;
        b->rules[r].rep_min = min;
    }
    /* tail: x{0,max-min} as nested optionals (x (x (x)?)?)?, or x* as T ::= x T | "" */
    gsym tail = -1;
    if (max < 0) {
        tail = gb_rule(b, NULL, 0);
        gsym two[2] = {x, tail};
        if (tail < 0 || gb_alt(b, tail, two, 2) || gb_alt(b, tail, NULL, 0)) return -1;
    } else {
        for (int32_t k = 0; k < max - min; k++) {
            int32_t t = gb_rule(b, NULL, 0);
            gsym two[2] = {x, tail};
            if (t < 0 || gb_alt(b, t, two, tail >= 0 ? 2 : 1) || gb_alt(b, t, NULL, 0)) return -1;
            tail = t;
        }
    }
    int32_t n = min + (tail >= 0);
    gsym stack[64], *v = n <= 64 ? stack : malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) return gb_fail(b, "out of memory");
    for (int32_t i = 0; i < min; i++) v[i] = x;
    if (tail >= 0) v[min] = tail;
    int rc = gb_alt(b, r, v, n);
    if (v != stack) free(v);
    return rc ? -1 : r;
}

/* ---- code points -> UTF-8 byte rules ------------------------------------------------------ */
typedef struct cprange {
    uint32_t lo, hi;
} cprange;

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void utf8_enc(uint32_t cp, int len, uint8_t *o) {
    static const uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int k = len - 1; k > 0; k--, cp >>= 6) o[k] = (uint8_t)(0x80 | (cp & 0x3F));
    o[0] = (uint8_t)(len == 1 ? cp : (lead[len] | cp));
}

/* Alternatives of rule r for the code points [lo, hi], all of encoded length len: split
 * until every byte position is one contiguous range on its own, then one alternative of
 * byte ranges per piece (the way regex engines compile UTF-8 classes). */
static int utf8_alts(gram_builder *b, int32_t r, uint32_t lo, uint32_t hi, int len) {
    for (int i = 1; i < len; i++) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                if (utf8_alts(b, r, lo, lo | m, len)) return -1;
                return utf8_alts(b, r, (lo | m) + 1, hi, len);
            }
            if ((hi & m) != m) {
                if (utf8_alts(b, r, lo, (hi & ~m) - 1, len)) return -1;
                return utf8_alts(b, r, hi & ~m, hi, len);
            }
        }
    }
    uint8_t el[4], eh[4];
    utf8_enc(lo, len, el);
    utf8_enc(hi, len, eh);
    gsym v[4];
    for (int k = 0; k < len; k++) v[k] = gb_byterange(b, el[k], eh[k]);
    return gb_alt(b, r, v, len);
}

gsym gb_codepoints(gram_builder *b, const uint32_t (*ranges)[2], int32_t n_ranges, bool negate) {
    if (b->failed) return -1;
    if (n_ranges < 0 || n_ranges > 100000) return gb_fail(b, "character class too large");
    cprange *v = malloc(sizeof *v * (size_t)(n_ranges + 4));
    cprange *w = malloc(sizeof *w * (size_t)(2 * n_ranges + 8));
    if (!v || !w) {
        free(v);
        free(w);
        return gb_fail(b, "out of memory");
    }
    int32_t n = 0;
    for (int32_t i = 0; i < n_ranges; i++) {
        uint32_t lo = ranges[i][0], hi = IFD_MIN(ranges[i][1], 0x10FFFFu);
        if (lo <= hi) v[n++] = (cprange){lo, hi};
    }
    qsort(v, (size_t)n, sizeof *v, cmp_range);
    int32_t m = 0; /* merged */
    for (int32_t i = 0; i < n; i++) {
        if (m && v[i].lo <= w[m - 1].hi + 1) {
            if (v[i].hi > w[m - 1].hi) w[m - 1].hi = v[i].hi;
        } else {
            w[m++] = v[i];
        }
    }
    if (negate) { /* the complement in [0, 0x10FFFF] */
        int32_t k = 0;
        uint32_t next = 0;
        for (int32_t i = 0; i < m; i++) {
            if (w[i].lo > next) v[k++] = (cprange){next, w[i].lo - 1};
            next = w[i].hi + 1;
        }
        if (next <= 0x10FFFF) v[k++] = (cprange){next, 0x10FFFF};
        memcpy(w, v, sizeof *v * (size_t)k);
        m = k;
    }
    free(v);
    int32_t r = gb_rule(b, NULL, 0);
    static const uint32_t bound[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int32_t i = 0; i < m && r >= 0; i++) {
        /* cut out the surrogates, then split by encoded length */
        cprange parts[2] = {w[i], {1, 0}};
        if (w[i].lo <= 0xDFFF && w[i].hi >= 0xD800) {
            parts[0] = (cprange){w[i].lo, 0xD7FF};
            parts[1] = (cprange){0xE000, w[i].hi};
            if (w[i].lo >= 0xD800) parts[0] = (cprange){1, 0};
        }
        for (int p = 0; p < 2; p++) {
            if (parts[p].lo > parts[p].hi) continue;
            for (int len = 1; len <= 4; len++) {
                uint32_t lo = IFD_MAX(parts[p].lo, bound[len - 1] + (len > 1)), hi = IFD_MIN(parts[p].hi, bound[len]);
                if (len == 1) lo = parts[p].lo;
                if (lo > hi) continue;
                if (utf8_alts(b, r, lo, hi, len)) r = -1;
            }
        }
    }
    free(w);
    return b->failed ? -1 : r;
}

/* ---- compile ------------------------------------------------------------------------------- */
void gram_ref(gram *g) { atomic_fetch_add(&g->refs, 1); }

void gram_unref(gram *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    gram_matcher_free(g);
    free(g->sym);
    free(g->rule_alt);
    free(g->alt_pos);
    free(g->set_cls);
    free(g->sets);
    free(g->nullable);
    free(g);
}

/* Left recursion: a rule reachable from itself through leftmost positions (each
 * preceded only by nullable symbols). Builds those edges, then an iterative DFS with
 * colors; returns a rule on a cycle, -1 when there is none, -2 on no memory. */
static int32_t find_left_cycle(const gram *g) {
    const int32_t nr = g->n_rules;
    int32_t *deg = calloc((size_t)nr + 1, sizeof *deg), *adj = NULL, *fill = NULL, *stk = NULL;
    uint8_t *color = calloc((size_t)nr + 1, 1);
    int32_t found = -2;
    if (!deg || !color) goto out;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t r = 0; r < nr; r++)
            for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
                for (int32_t p = g->alt_pos[a]; g->sym[p] >= 0; p++) {
                    if (pass == 0) deg[r + 1]++;
                    else adj[fill[r]++] = g->sym[p];
                    if (!g->nullable[g->sym[p]]) break;
                }
        if (pass == 0) {
            for (int32_t r = 0; r < nr; r++) deg[r + 1] += deg[r];
            adj = malloc(sizeof *adj * (size_t)(deg[nr] + 1));
            fill = malloc(sizeof *fill * (size_t)(nr + 1));
            stk = malloc(sizeof *stk * (size_t)(2 * nr + 2));
            if (!adj || !fill || !stk) goto out;
            memcpy(fill, deg, sizeof *fill * (size_t)nr);
        }
    }
    found = -1;
    for (int32_t s = 0; s < nr && found < 0; s++) {
        if (color[s]) continue;
        int32_t sp = 0;
        stk[sp++] = s;
        stk[sp++] = deg[s];
        color[s] = 1;
        while (sp && found < 0) {
            int32_t r = stk[sp - 2], e = stk[sp - 1];
            if (e == deg[r + 1]) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stk[sp - 1] = e + 1;
            int32_t t = adj[e];
            if (color[t] == 1) {
                found = t;
            } else if (color[t] == 0) {
                color[t] = 1;
                stk[sp++] = t;
                stk[sp++] = deg[t];
            }
        }
    }
out:
    free(deg);
    free(adj);
    free(fill);
    free(stk);
    free(color);
    return found;
}

/* Rules for which some alternative has every symbol "good": a rule symbol is good when
 * its rule is (a least fixpoint, by a worklist: linear in the grammar), a terminal when
 * productive says its byte set is not empty (for nullability no terminal is good).
 * Returns a calloc'ed flag per rule, NULL on no memory. */
static uint8_t *rules_where_all(const gram_builder *b, bool productive) {
    const int64_t nr = b->n_rules, na = b->n_alts;
    uint8_t *res = calloc((size_t)nr + 1, 1), *bad = calloc((size_t)na + 1, 1);
    int32_t *cnt = calloc((size_t)na + 1, sizeof *cnt), *deg = calloc((size_t)nr + 2, sizeof *deg);
    int32_t *occ = NULL, *queue = malloc(sizeof *queue * (size_t)(nr + 1));
    if (!res || !bad || !cnt || !deg || !queue) goto fail;
    for (int64_t a = 0; a < na; a++)
        for (int32_t i = 0; i < b->alts[a].n; i++) {
            const gsym x = b->syms[b->alts[a].off + i];
            if (x >= 0) {
                cnt[a]++;
                deg[x + 1]++;
            } else if (!productive) {
                bad[a] = 1;
            } else {
                bool empty = true;
                for (int w = 0; w < 8; w++) empty &= b->sets[~x][w] == 0;
                if (empty) bad[a] = 1;
            }
        }
    for (int64_t r = 0; r < nr; r++) deg[r + 1] += deg[r];
    occ = malloc(sizeof *occ * (size_t)(deg[nr] + 1));
    if (!occ) goto fail;
    {
        int32_t *fill = malloc(sizeof *fill * (size_t)(nr + 1));
        if (!fill) goto fail;
        memcpy(fill, deg, sizeof *fill * (size_t)nr);
        for (int64_t a = 0; a < na; a++)
            for (int32_t i = 0; i < b->alts[a].n; i++) {
                const gsym x = b->syms[b->alts[a].off + i];
                if (x >= 0) occ[fill[x]++] = (int32_t)a;
            }
        free(fill);
    }
    int64_t qh = 0, qt = 0;
    for (int64_t a = 0; a < na; a++)
        if (!cnt[a] && !bad[a] && !res[b->alts[a].rule]) {
            res[b->alts[a].rule] = 1;
            queue[qt++] = b->alts[a].rule;
        }
    while (qh < qt) {
        const int32_t r = queue[qh++];
        for (int32_t k = deg[r]; k < deg[r + 1]; k++) {
            const int32_t a = occ[k];
            if (--cnt[a] == 0 && !bad[a] && !res[b->alts[a].rule]) {
                res[b->alts[a].rule] = 1;
                queue[qt++] = b->alts[a].rule;
            }
        }
    }
    free(bad);
    free(cnt);
    free(deg);
    free(occ);
    free(queue);
    return res;
fail:
    free(res);
    free(bad);
    free(cnt);
    free(deg);
    free(occ);
    free(queue);
    return NULL;
}

static const char *rule_label(const gram_builder *b, int32_t r, char *buf, size_t n) {
    if (b->rules[r].name) snprintf(buf, n, "'%s'", b->rules[r].name);
    else snprintf(buf, n, "a generated rule (#%d)", r);
    return buf;
}

int gram_compile(gram_builder *b, int32_t root, gram **out, char *err, size_t err_bytes) {
    *out = NULL;
    if (b->failed) return ifd_errf(err, err_bytes, -1, "%s", b->err);
    if (root < 0 || root >= b->n_rules) return ifd_errf(err, err_bytes, -1, "no start rule");
    char lab[256];
    for (int64_t r = 0; r < b->n_rules; r++)
        if (b->rules[r].name && b->rules[r].n_alts == 0)
            return ifd_errf(err, err_bytes, -1, "rule '%s' is referenced but never defined", b->rules[r].name);
    gram *g = calloc(1, sizeof *g);
    if (!g) return ifd_errf(err, err_bytes, -1, "out of memory");
    atomic_init(&g->refs, 1);
    g->n_rules = (int32_t)b->n_rules;
    g->n_sets = (int32_t)b->n_sets;
    g->root = root;
    const int64_t n_sym = b->n_syms + b->n_alts;
    g->sym = malloc(sizeof *g->sym * (size_t)(n_sym + 1));
    g->rule_alt = calloc((size_t)g->n_rules + 1, sizeof *g->rule_alt);
    g->alt_pos = malloc(sizeof *g->alt_pos * (size_t)(b->n_alts + 1));
    g->nullable = calloc((size_t)g->n_rules + 1, 1);
    g->set_cls = calloc((size_t)g->n_sets + 1, sizeof *g->set_cls);
    g->sets = malloc(sizeof *g->sets * (size_t)(g->n_sets + 1));
    if (!g->sets || !g->rule_alt || !g->alt_pos || !g->nullable || !g->set_cls) goto nomem;
    /* only productive alternatives (every symbol can derive some text): then every
     * stack's closure is non-empty, which the masks rely on (a frame that ends leaves a
     * live stack below); a root that derives nothing is an error */
    uint8_t *prod = rules_where_all(b, true), *nul = prod ? rules_where_all(b, false) : NULL;
    uint8_t *keep = calloc((size_t)b->n_alts + 1, 1);
    if (!prod || !nul || !keep) {
        free(prod);
        free(nul);
        free(keep);
        goto nomem;
    }
    if (!prod[root]) {
        free(prod);
        free(nul);
        free(keep);
        gram_unref(g);
        return ifd_errf(err, err_bytes, -1, "the grammar matches no text (its start rule derives no finite text)");
    }
    for (int64_t a = 0; a < b->n_alts; a++) {
        bool ok = true;
        for (int32_t i = 0; i < b->alts[a].n && ok; i++) {
            const gsym x = b->syms[b->alts[a].off + i];
            if (x >= 0) {
                ok = prod[x];
            } else {
                bool empty = true;
                for (int w = 0; w < 8; w++) empty &= b->sets[~x][w] == 0;
                ok = !empty;
            }
        }
        keep[a] = ok;
    }
    memcpy(g->nullable, nul, (size_t)g->n_rules);
    free(prod);
    free(nul);
    /* alternatives grouped by rule, in the order added */
    for (int64_t a = 0; a < b->n_alts; a++)
        if (keep[a]) g->rule_alt[b->alts[a].rule + 1]++;
    for (int32_t r = 0; r < g->n_rules; r++) g->rule_alt[r + 1] += g->rule_alt[r];
    {
        int32_t *fill = malloc(sizeof *fill * (size_t)(g->n_rules + 1));
        int64_t *alt_of = malloc(sizeof *alt_of * (size_t)(b->n_alts + 1));
        if (!fill || !alt_of) {
            free(fill);
            free(alt_of);
            free(keep);
            goto nomem;
        }
        memcpy(fill, g->rule_alt, sizeof *fill * (size_t)g->n_rules);
        for (int64_t a = 0; a < b->n_alts; a++)
            if (keep[a]) alt_of[fill[b->alts[a].rule]++] = a;
        const int64_t n_kept = g->rule_alt[g->n_rules];
        int32_t p = 0;
        for (int64_t k = 0; k < n_kept; k++) {
            const balt *al = &b->alts[alt_of[k]];
            g->alt_pos[k] = p;
            if (al->n) /* an empty alternative ("root ::=") may leave b->syms NULL */
                memcpy(g->sym + p, b->syms + al->off, sizeof *g->sym * (size_t)al->n);
            p += al->n;
            g->sym[p++] = GSYM_END;
        }
        g->n_sym = p;
        free(fill);
        free(alt_of);
        free(keep);
    }
    {
        int32_t lr = find_left_cycle(g);
        if (lr == -2) goto nomem;
        if (lr >= 0) {
            ifd_errf(err, err_bytes, -1, "left recursion: %s can reach itself without consuming a byte",
                     rule_label(b, lr, lab, sizeof lab));
            gram_unref(g);
            return -1;
        }
    }
    if (g->n_sets) memcpy(g->sets, b->sets, sizeof *g->sets * (size_t)g->n_sets);
    /* byte classes: refine the partition of 0..255 by every set */
    {
        uint16_t cls[256] = {0};
        int nc = 1;
        for (int32_t s = 0; s < g->n_sets; s++) {
            int16_t map_in[256], map_out[256];
            memset(map_in, -1, sizeof map_in);
            memset(map_out, -1, sizeof map_out);
            int k = 0;
            uint16_t nw[256];
            for (int c = 0; c < 256; c++) {
                bool in = b->sets[s][c >> 5] >> (c & 31) & 1;
                int16_t *mp = in ? map_in : map_out;
                if (mp[cls[c]] < 0) mp[cls[c]] = (int16_t)k++;
                nw[c] = (uint16_t)mp[cls[c]];
            }
            memcpy(cls, nw, sizeof cls);
            nc = k;
        }
        g->n_classes = nc;
        memset(g->class_rep, 0, sizeof g->class_rep);
        for (int c = 255; c >= 0; c--) {
            g->byte_class[c] = (uint8_t)cls[c];
            g->class_rep[cls[c]] = (uint8_t)c;
        }
        for (int32_t s = 0; s < g->n_sets; s++)
            for (int c = 0; c < 256; c++)
                if (b->sets[s][c >> 5] >> (c & 31) & 1) g->set_cls[s][cls[c] >> 5] |= 1u << (cls[c] & 31);
    }
    *out = g;
    return 0;
nomem:
    gram_unref(g);
    return ifd_errf(err, err_bytes, -1, "out of memory");
}
