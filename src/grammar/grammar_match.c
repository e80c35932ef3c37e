/* grammar_match.c — the matcher: parse stacks as hash-consed nodes, states as interned
 * sets of stacks, transitions per byte class built lazily (a DFA that grows as output
 * explores it), and the vocabulary mask of a state: a walk of the token trie against
 * those transitions, cached per state.
 *
 * A node is (pos, parent): pos a position in gram.sym, parent the node below it (the
 * return point once pos's alternative ends); node 0 is the empty stack (ACCEPT: the
 * grammar may end). A state's nodes all have a terminal at pos (or are ACCEPT): the
 * closure expands rule references (pushing the return position, skipped when it is the
 * end of an alternative: tail calls keep right recursion from growing the stack) and
 * pops ended alternatives.
 *
 * Memory: everything grows on demand up to GRAM_MATCHER_MAX_BYTES (then the matcher
 * overflows: every step is GRAM_DEAD); cached masks are dropped wholesale past
 * GRAM_MASK_CACHE_BYTES. One thread at a time per gram. */
#include "grammar_impl.h"

#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

#define GRAM_MATCHER_MAX_BYTES ((int64_t)256 << 20)
/* stacks in one state at most: past it the grammar is too ambiguous to follow (a state
 * that large would cost every step as much; the matcher overflows instead) */
#define GRAM_MAX_STATE_NODES 32768
#define GRAM_MASK_CACHE_BYTES ((int64_t)96 << 20)
#define NEXT_UNKNOWN (-2)
#define ACCEPT 0
#define BOTTOM 1 /* the unknown rest of a stack: a position's local tables (below) */

typedef struct gnode {
    int32_t pos, parent;
} gnode;

typedef struct gstate {
    int32_t off, n;  /* its nodes: m->sn[off .. off + n), sorted */
    int32_t *next;   /* (n_classes) successor per class, NEXT_UNKNOWN until computed */
    uint32_t *mask;  /* the cached mask, or NULL */
    bool can_end, must_end, has_bottom;
} gstate;

/* A set of token ids: dense (a mask of n_words) when large, else a list. */
typedef struct iset {
    uint32_t *dense;
    int32_t *ids;
    int32_t n;
} iset;

/* The local walk of trie T from position p (the stack {(p, BOTTOM)}): the tokens of T
 * whose string p's frame accepts whatever lies below (acc), and the trie of the tails
 * left when the frame ends inside a string (rest: an index into m->rt, -1: none). */
typedef struct lwalk {
    iset acc;
    int32_t rest;    /* the tails' trie in m->rt, -1: none */
    int32_t n_tails; /* tokens with tails (not accepted outright) */
} lwalk;

/* An open-addressing map (a, b) -> value index; 0 in key_a + 1 means empty. */
typedef struct pmap {
    int32_t *ka, *kb, *val;
    int64_t cap, n;
} pmap;

struct gram_matcher {
    gnode *nodes;
    int64_t n_nodes, cap_nodes;
    int32_t *node_ix; /* (pos, parent) -> id + 1, open addressing */
    int64_t node_ix_cap;
    uint32_t *stamp; /* (cap_nodes) visited marks of the current closure */
    uint32_t cur_stamp;
    gstate *st;
    int64_t n_st, cap_st;
    int32_t *sn; /* states' node lists */
    int64_t n_sn, cap_sn;
    int32_t *st_ix; /* state contents -> id + 1 */
    int64_t st_ix_cap;
    int32_t start;
    int32_t *work, *acc; /* closure scratch: the visit stack, the collected tops */
    int64_t cap_work, n_acc, cap_acc;
    int64_t bytes, mask_bytes;
    bool overflow;
    const gram_vocab *vocab; /* the vocabulary the cached masks belong to */
    int32_t *walk;           /* (max_depth + 1) the trie walk's states by depth */
    int32_t *bot;            /* (max_depth + 1) depths with BOTTOM on the walk's path */
    int32_t *pstate;         /* (cap_nodes) the state of a node's closure, -2 unknown */
    /* mask memos (see "masks" below): rest tries (rt[0] unused: the vocabulary's trie),
     * local walks by (trie, position), and the tokens of a trie a stack accepts by
     * (trie, node) (dropped wholesale past the mask cache budget) */
    rtrie *rt;
    int64_t n_rt, cap_rt;
    lwalk *lw;
    int64_t n_lw, cap_lw;
    pmap lw_map;
    iset *us;
    int64_t n_us, cap_us;
    pmap u_map;
    int64_t u_bytes;
    int32_t *seen; /* gram_mask's scratch: the walks already OR'ed */
    uint8_t *khint; /* (n_sym) the truncation depth each position needed last */
    int64_t cap_seen;
    int64_t masks_computed, mask_hits, walks_built;
};

static void iset_free(iset *s) {
    free(s->dense);
    free(s->ids);
    *s = (iset){0};
}

static void pmap_free(pmap *m) {
    free(m->ka);
    free(m->kb);
    free(m->val);
    *m = (pmap){0};
}

static inline uint64_t pair_hash(int32_t a, int32_t b) {
    return ifd_hash_mix64(((uint64_t)(uint32_t)a << 32) ^ (uint32_t)b ^ 0x9e3779b97f4a7c15ull);
}

static int32_t pmap_get(const pmap *m, int32_t a, int32_t b) {
    if (!m->cap) return -1;
    const uint64_t mk = (uint64_t)m->cap - 1;
    for (uint64_t h = pair_hash(a, b) & mk; m->ka[h]; h = (h + 1) & mk)
        if (m->ka[h] == a + 1 && m->kb[h] == b) return m->val[h];
    return -1;
}

static bool pmap_put(pmap *m, int32_t a, int32_t b, int32_t v) {
    if ((m->n + 1) * 2 > m->cap) {
        int64_t nc = m->cap ? m->cap * 2 : 256;
        pmap q = {calloc((size_t)nc, 4), malloc((size_t)nc * 4), malloc((size_t)nc * 4), nc, 0};
        if (!q.ka || !q.kb || !q.val) {
            pmap_free(&q);
            return false;
        }
        for (int64_t i = 0; i < m->cap; i++) {
            if (!m->ka[i]) continue;
            uint64_t h = pair_hash(m->ka[i] - 1, m->kb[i]) & (uint64_t)(nc - 1);
            while (q.ka[h]) h = (h + 1) & (uint64_t)(nc - 1);
            q.ka[h] = m->ka[i], q.kb[h] = m->kb[i], q.val[h] = m->val[i];
        }
        q.n = m->n;
        pmap_free(m);
        *m = q;
    }
    uint64_t h = pair_hash(a, b) & (uint64_t)(m->cap - 1);
    while (m->ka[h]) h = (h + 1) & (uint64_t)(m->cap - 1);
    m->ka[h] = a + 1, m->kb[h] = b, m->val[h] = v;
    m->n++;
    return true;
}

static void memo_free(gram_matcher *m) {
    for (int64_t i = 0; i < m->n_rt; i++) gram_rtrie_free(&m->rt[i]);
    for (int64_t i = 0; i < m->n_lw; i++) iset_free(&m->lw[i].acc);
    for (int64_t i = 0; i < m->n_us; i++) iset_free(&m->us[i]);
    free(m->rt);
    free(m->lw);
    free(m->us);
    pmap_free(&m->lw_map);
    pmap_free(&m->u_map);
    m->rt = NULL, m->lw = NULL, m->us = NULL;
    m->n_rt = m->cap_rt = m->n_lw = m->cap_lw = m->n_us = m->cap_us = m->u_bytes = 0;
}

void gram_matcher_free(gram *g) {
    gram_matcher *m = g->m;
    if (!m) return;
    for (int64_t i = 0; i < m->n_st; i++) {
        free(m->st[i].next);
        free(m->st[i].mask);
    }
    free(m->nodes);
    free(m->node_ix);
    free(m->stamp);
    free(m->st);
    free(m->sn);
    free(m->st_ix);
    free(m->work);
    free(m->acc);
    free(m->seen);
    free(m->khint);
    free(m->walk);
    free(m->bot);
    memo_free(m);
    free(m->pstate);
    free(m);
    g->m = NULL;
}

static bool charge(gram_matcher *m, int64_t n) {
    m->bytes += n;
    if (m->bytes > GRAM_MATCHER_MAX_BYTES) m->overflow = true;
    return !m->overflow;
}

/* ---- nodes ----------------------------------------------------------------------------- */
static inline uint64_t node_hash(int32_t pos, int32_t parent) {
    return ifd_hash_mix64(((uint64_t)(uint32_t)pos << 32) | (uint32_t)parent);
}

static bool node_ix_grow(gram_matcher *m) {
    if ((m->n_nodes + 1) * 2 <= m->node_ix_cap) return true;
    int64_t nc = m->node_ix_cap ? m->node_ix_cap * 2 : 1024;
    if (!charge(m, nc * 4)) return false;
    int32_t *q = calloc((size_t)nc, sizeof *q);
    if (!q) return (m->overflow = true, false);
    for (int64_t i = 1; i < m->n_nodes; i++) {
        uint64_t h = node_hash(m->nodes[i].pos, m->nodes[i].parent) & (uint64_t)(nc - 1);
        while (q[h]) h = (h + 1) & (uint64_t)(nc - 1);
        q[h] = (int32_t)i + 1;
    }
    free(m->node_ix);
    m->node_ix = q;
    m->node_ix_cap = nc;
    return true;
}

/* The node (pos, parent), made if new; -1 on overflow. */
static int32_t node_get(gram_matcher *m, int32_t pos, int32_t parent) {
    if (!node_ix_grow(m)) return -1;
    const uint64_t mk = (uint64_t)m->node_ix_cap - 1;
    uint64_t h = node_hash(pos, parent) & mk;
    for (; m->node_ix[h]; h = (h + 1) & mk) {
        const gnode *n = &m->nodes[m->node_ix[h] - 1];
        if (n->pos == pos && n->parent == parent) return m->node_ix[h] - 1;
    }
    if (m->n_nodes >= INT32_MAX - 1 || !charge(m, 12)) return (m->overflow = true, -1);
    const int64_t old = m->cap_nodes;
    if (!GVEC_GROW(m->nodes, m->cap_nodes, m->n_nodes + 1)) return (m->overflow = true, -1);
    if (m->cap_nodes != old) {
        uint32_t *s = realloc(m->stamp, sizeof *s * (size_t)m->cap_nodes);
        if (!s) return (m->overflow = true, -1);
        memset(s + old, 0, sizeof *s * (size_t)(m->cap_nodes - old));
        m->stamp = s;
        int32_t *ps = realloc(m->pstate, sizeof *ps * (size_t)m->cap_nodes);
        if (!ps) return (m->overflow = true, -1);
        for (int64_t k = old; k < m->cap_nodes; k++) ps[k] = NEXT_UNKNOWN;
        m->pstate = ps;
    }
    m->nodes[m->n_nodes] = (gnode){pos, parent};
    m->node_ix[h] = (int32_t)m->n_nodes + 1;
    return (int32_t)m->n_nodes++;
}

static bool push_work(gram_matcher *m, int64_t *sp, int32_t n) {
    if (n < 0) return false;
    if (!GVEC_GROW(m->work, m->cap_work, *sp + 1)) return (m->overflow = true, false);
    m->work[(*sp)++] = n;
    return true;
}

static void new_stamp(gram_matcher *m) {
    if (++m->cur_stamp == 0) {
        memset(m->stamp, 0, sizeof *m->stamp * (size_t)m->cap_nodes);
        m->cur_stamp = 1;
    }
    m->n_acc = 0;
}

/* Close the nodes on the work stack (sp of them) into m->acc: tops at terminals, and
 * ACCEPT. False on overflow. */
static bool closure(gram *g, int64_t sp) {
    gram_matcher *m = g->m;
    while (sp > 0) {
        if (m->n_acc > GRAM_MAX_STATE_NODES) return (m->overflow = true, false);
        const int32_t n = m->work[--sp];
        if (m->stamp[n] == m->cur_stamp) continue;
        m->stamp[n] = m->cur_stamp;
        if (n == ACCEPT || n == BOTTOM) {
            if (!GVEC_GROW(m->acc, m->cap_acc, m->n_acc + 1)) return (m->overflow = true, false);
            m->acc[m->n_acc++] = n;
            continue;
        }
        const int32_t pos = m->nodes[n].pos, parent = m->nodes[n].parent, s = g->sym[pos];
        if (s == GSYM_END) {
            if (!push_work(m, &sp, parent)) return false;
        } else if (s < 0) {
            if (!GVEC_GROW(m->acc, m->cap_acc, m->n_acc + 1)) return (m->overflow = true, false);
            m->acc[m->n_acc++] = n;
        } else {
            const int32_t ret = g->sym[pos + 1] == GSYM_END ? parent : node_get(m, pos + 1, parent);
            if (ret < 0) return false;
            for (int32_t a = g->rule_alt[s]; a < g->rule_alt[s + 1]; a++)
                if (!push_work(m, &sp, node_get(m, g->alt_pos[a], ret))) return false;
        }
    }
    return true;
}

/* ---- states ------------------------------------------------------------------------------ */
static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static uint64_t state_hash(const int32_t *v, int32_t n) { return ifd_hash_i32(0x57a7e, v, (size_t)n); }

/* The state whose node set is m->acc (sorted here), made if new; GRAM_DEAD when empty
 * or on overflow. */
static int32_t state_intern(gram *g) {
    gram_matcher *m = g->m;
    if (m->n_acc == 0 || m->overflow) return GRAM_DEAD;
    qsort(m->acc, (size_t)m->n_acc, sizeof *m->acc, cmp_i32);
    const int32_t n = (int32_t)m->n_acc;
    const uint64_t h0 = state_hash(m->acc, n);
    if (m->st_ix_cap) {
        const uint64_t mk = (uint64_t)m->st_ix_cap - 1;
        for (uint64_t h = h0 & mk; m->st_ix[h]; h = (h + 1) & mk) {
            const gstate *s = &m->st[m->st_ix[h] - 1];
            if (s->n == n && !memcmp(m->sn + s->off, m->acc, sizeof *m->acc * (size_t)n)) return m->st_ix[h] - 1;
        }
    }
    if (m->n_st >= INT32_MAX / 2 || !charge(m, (int64_t)sizeof(gstate) + 4 * n + 8)) return GRAM_DEAD;
    if (!GVEC_GROW(m->st, m->cap_st, m->n_st + 1) || !GVEC_GROW(m->sn, m->cap_sn, m->n_sn + n))
        return (m->overflow = true, GRAM_DEAD);
    if ((m->n_st + 1) * 2 > m->st_ix_cap) {
        int64_t nc = m->st_ix_cap ? m->st_ix_cap * 2 : 256;
        int32_t *q = calloc((size_t)nc, sizeof *q);
        if (!q || !charge(m, nc * 4)) {
            free(q);
            return (m->overflow = true, GRAM_DEAD);
        }
        for (int64_t i = 0; i < m->n_st; i++) {
            uint64_t h = state_hash(m->sn + m->st[i].off, m->st[i].n) & (uint64_t)(nc - 1);
            while (q[h]) h = (h + 1) & (uint64_t)(nc - 1);
            q[h] = (int32_t)i + 1;
        }
        free(m->st_ix);
        m->st_ix = q;
        m->st_ix_cap = nc;
    }
    gstate *s = &m->st[m->n_st];
    *s = (gstate){.off = (int32_t)m->n_sn, .n = n};
    memcpy(m->sn + m->n_sn, m->acc, sizeof *m->acc * (size_t)n);
    m->n_sn += n;
    s->can_end = m->acc[0] == ACCEPT; /* sorted: ACCEPT (0), BOTTOM (1) first */
    s->has_bottom = m->acc[0] == BOTTOM || (n > 1 && m->acc[1] == BOTTOM);
    s->must_end = n == 1 && s->can_end;
    const uint64_t mk = (uint64_t)m->st_ix_cap - 1;
    uint64_t h = h0 & mk;
    while (m->st_ix[h]) h = (h + 1) & mk;
    m->st_ix[h] = (int32_t)m->n_st + 1;
    return (int32_t)m->n_st++;
}

static bool matcher_init(gram *g) {
    if (g->m) return !g->m->overflow;
    gram_matcher *m = calloc(1, sizeof *m);
    if (!m) return false;
    g->m = m;
    m->start = GRAM_DEAD;
    if (node_get(m, -1, -1) != ACCEPT) return false; /* node 0: the empty stack */
    if (node_get(m, -2, -1) != BOTTOM) return false; /* node 1: an unknown rest */
    m->khint = calloc((size_t)g->n_sym + 1, 1);
    if (!m->khint) return false;
    new_stamp(m);
    int64_t sp = 0;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (!push_work(m, &sp, node_get(m, g->alt_pos[a], ACCEPT))) return false;
    if (!closure(g, sp)) return false;
    m->start = state_intern(g);
    return !m->overflow;
}

gram_state gram_start(gram *g) {
    if (!matcher_init(g)) return GRAM_DEAD;
    return g->m->start;
}

/* The successor of state s on byte class c (computed and cached). */
static int32_t step_class(gram *g, int32_t s, int c) {
    gram_matcher *m = g->m;
    if (m->overflow) return GRAM_DEAD;
    gstate *st = &m->st[s];
    if (!st->next) {
        if (!charge(m, 4 * g->n_classes)) return GRAM_DEAD;
        st->next = malloc(sizeof *st->next * (size_t)g->n_classes);
        if (!st->next) return (m->overflow = true, GRAM_DEAD);
        for (int k = 0; k < g->n_classes; k++) st->next[k] = NEXT_UNKNOWN;
    } else if (st->next[c] != NEXT_UNKNOWN) {
        return st->next[c];
    }
    new_stamp(m);
    int64_t sp = 0;
    const int32_t off = st->off, n = st->n;
    for (int32_t i = 0; i < n; i++) {
        const int32_t nd = m->sn[off + i];
        if (nd == ACCEPT || nd == BOTTOM) continue;
        const gnode x = m->nodes[nd];
        if (gram_term_has(g, g->sym[x.pos], c) && !push_work(m, &sp, node_get(m, x.pos + 1, x.parent)))
            return GRAM_DEAD;
    }
    if (!closure(g, sp)) return GRAM_DEAD;
    const int32_t t = state_intern(g);
    if (m->overflow) return GRAM_DEAD;
    m->st[s].next[c] = t; /* m->st may have moved */
    return t;
}

static inline int32_t step_fast(gram *g, int32_t s, int c) {
    const int32_t *nx = g->m->st[s].next;
    if (nx && nx[c] != NEXT_UNKNOWN) return nx[c];
    return step_class(g, s, c);
}

gram_state gram_step(gram *g, gram_state s, uint8_t c) {
    if (s < 0 || !g->m || s >= g->m->n_st || g->m->overflow) return GRAM_DEAD;
    return step_fast(g, s, g->byte_class[c]);
}

gram_state gram_feed(gram *g, gram_state s, const void *bytes, size_t n) {
    const uint8_t *p = bytes;
    for (size_t i = 0; i < n && s >= 0; i++) s = gram_step(g, s, p[i]);
    return s;
}

bool gram_can_end(const gram *g, gram_state s) {
    return s >= 0 && g->m && s < g->m->n_st && g->m->st[s].can_end;
}

bool gram_must_end(const gram *g, gram_state s) {
    return s >= 0 && g->m && s < g->m->n_st && g->m->st[s].must_end;
}

bool gram_accepts(gram *g, const void *text, size_t n) {
    return gram_can_end(g, gram_feed(g, gram_start(g), text, n));
}

bool gram_prefix_ok(gram *g, const void *text, size_t n) {
    return gram_feed(g, gram_start(g), text, n) != GRAM_DEAD;
}

bool gram_overflowed(const gram *g) { return g->m && g->m->overflow; }

void gram_get_stats(const gram *g, gram_stats *out) {
    *out = (gram_stats){.n_classes = g->n_classes};
    if (!g->m) return;
    out->states = g->m->n_st;
    out->nodes = g->m->n_nodes;
    out->masks_computed = g->m->masks_computed;
    out->mask_hits = g->m->mask_hits;
    out->walks = g->m->walks_built;
    out->bytes = g->m->bytes + g->m->mask_bytes + g->m->u_bytes;
}

/* ---- masks ------------------------------------------------------------------------------
 * A stack accepts a token when its top k frames accept all of it, or when they can all
 * end after part of it and the stack below them accepts the tail. The top k frames of
 * node n, cut off from the rest of the stack, are a node too: trunc(n, k), with BOTTOM
 * where the rest was. Its local walk, L(trunc) (a walk of the vocabulary trie from the
 * state {trunc}, memoized per truncated node), splits the vocabulary into the tokens
 * it accepts outright and the tails left where the cut-off frames end (a trie). The
 * mask of a state is the union over its nodes of L.acc and the tails the stack below
 * accepts (a walk of the tail trie from that stack's closure, memoized per (truncated
 * node, node below)). k starts at 1 and grows while the tails are many (the frames of
 * whitespace or one-character rules end at once): the walk of a deeper cut sees more of
 * the grammar's own context, which is the same for every state that shares those top
 * frames. Truncated nodes depend only on the top k positions, so their walks are shared
 * by every state whose stacks start alike, whatever lies deeper; state masks are cached
 * too. */
#define TRUNC_MAX 6      /* frames a cut may keep */
#define TAILS_DEEPER 256 /* tails above which a deeper cut is tried */

static void drop_masks(gram_matcher *m) {
    for (int64_t i = 0; i < m->n_st; i++) {
        free(m->st[i].mask);
        m->st[i].mask = NULL;
    }
    m->mask_bytes = 0;
    for (int64_t i = 0; i < m->n_us; i++) iset_free(&m->us[i]);
    m->n_us = 0;
    pmap_free(&m->u_map);
    m->u_bytes = 0;
}

static inline void iset_or(uint32_t *mask, const iset *s, int32_t n_words) {
    if (s->dense) {
        for (int32_t w = 0; w < n_words; w++) mask[w] |= s->dense[w];
    } else {
        for (int32_t k = 0; k < s->n; k++) mask[s->ids[k] >> 5] |= 1u << (s->ids[k] & 31);
    }
}

/* A set from a dense mask with n ids set (takes ownership of dense). */
static bool iset_make(iset *s, uint32_t *dense, int32_t n, int32_t n_words) {
    *s = (iset){.n = n};
    if (n > n_words / 2) {
        s->dense = dense;
        return true;
    }
    if (n) {
        s->ids = malloc(sizeof *s->ids * (size_t)n);
        if (!s->ids) {
            free(dense);
            return false;
        }
        int32_t k = 0;
        for (int32_t w = 0; w < n_words; w++)
            for (uint32_t bits = dense[w]; bits; bits &= bits - 1) s->ids[k++] = w * 32 + __builtin_ctz(bits);
        s->n = k;
    }
    free(dense);
    return true;
}

static int64_t iset_bytes(const iset *s, int32_t n_words) { return s->dense ? 4 * (int64_t)n_words : 4 * (int64_t)s->n; }

/* L(tnode): memoized by the truncated node; its index in m->lw, or -1 on overflow. */
static int32_t local_walk(gram *g, const gram_vocab *v, int32_t tnode) {
    gram_matcher *m = g->m;
    int32_t k = pmap_get(&m->lw_map, tnode, 0);
    if (k >= 0) return k;
    uint32_t *acc = calloc((size_t)v->n_words, sizeof *acc);
    upair *u = NULL;
    int64_t nu = 0, cap_u = 0;
    if (!acc) goto fail;
    m->n_acc = 0;
    if (!GVEC_GROW(m->acc, m->cap_acc, 1)) goto fail;
    m->acc[m->n_acc++] = tnode;
    const int32_t L = state_intern(g);
    if (L < 0) goto fail;
    const rtrie *t = &v->trie;
    int32_t *walk = m->walk, *bot = m->bot, nb = 0, n_acc = 0, n_unc = 0;
    walk[0] = L;
    const uint8_t *cls = g->byte_class;
    for (int32_t i = 0; i < t->n_nodes;) {
        const int32_t d = t->depth[i];
        while (nb && bot[nb - 1] >= d) nb--;
        const int32_t ps = walk[d - 1];
        const int32_t s = ps >= 0 ? step_fast(g, ps, cls[t->byte[i]]) : GRAM_DEAD;
        if (m->overflow) goto fail;
        if (s < 0 && nb == 0) {
            i = t->end[i];
            continue;
        }
        walk[d] = s;
        for (int32_t x = t->tok_off[i]; x < t->tok_off[i + 1]; x++) {
            const int32_t id = t->toks[x];
            if (s >= 0) {
                acc[id >> 5] |= 1u << (id & 31);
                n_acc++;
            } else {
                n_unc++;
                for (int32_t j = 0; j < nb; j++) { /* the tail after bot[j] bytes */
                    if (!GVEC_GROW(u, cap_u, nu + 1)) goto fail;
                    u[nu++] = (upair){id, bot[j]};
                }
            }
        }
        if (s >= 0 && m->st[s].has_bottom) bot[nb++] = d;
        i++;
    }
    int32_t rest = -1;
    if (nu) {
        if (!GVEC_GROW(m->rt, m->cap_rt, m->n_rt + 1)) goto fail;
        if (!gram_rtrie_build(&m->rt[m->n_rt], v, u, nu)) goto fail;
        rest = (int32_t)m->n_rt++;
        charge(m, gram_rtrie_bytes(&m->rt[rest]));
    }
    free(u);
    u = NULL;
    if (!GVEC_GROW(m->lw, m->cap_lw, m->n_lw + 1)) goto fail;
    lwalk *w = &m->lw[m->n_lw];
    w->rest = rest;
    w->n_tails = n_unc;
    if (!iset_make(&w->acc, acc, n_acc, v->n_words)) {
        acc = NULL;
        goto fail;
    }
    acc = NULL;
    charge(m, iset_bytes(&w->acc, v->n_words) + 32);
    k = (int32_t)m->n_lw++;
    if (!pmap_put(&m->lw_map, tnode, 0, k)) goto fail;
    m->walks_built++;
    return m->overflow ? -1 : k;
fail:
    free(acc);
    free(u);
    m->overflow = true;
    return -1;
}

/* The closure of node x as a state (cached per node). */
static int32_t node_state(gram *g, int32_t x) {
    gram_matcher *m = g->m;
    if (m->pstate[x] != NEXT_UNKNOWN) return m->pstate[x];
    new_stamp(m);
    int64_t sp = 0;
    if (!push_work(m, &sp, x) || !closure(g, sp)) return GRAM_DEAD;
    const int32_t s = state_intern(g);
    if (m->overflow) return GRAM_DEAD;
    m->pstate[x] = s;
    return s;
}

/* The tokens of tail trie T (of truncated node tnode) that the stack `below` accepts,
 * into mask (memoized per (tnode, below)). False on overflow. */
static bool tails_below(gram *g, const gram_vocab *v, int32_t tnode, int32_t T, int32_t below, uint32_t *mask) {
    gram_matcher *m = g->m;
    if (below == ACCEPT) return true; /* tails are never empty: nothing may follow */
    int32_t k = pmap_get(&m->u_map, tnode, below);
    if (k < 0) {
        uint32_t *tmp = calloc((size_t)v->n_words, sizeof *tmp);
        if (!tmp) return (m->overflow = true, false);
        const int32_t s = node_state(g, below);
        int32_t n = 0;
        if (s >= 0) {
            int32_t *walk = m->walk;
            walk[0] = s;
            const uint8_t *cls = g->byte_class;
            for (int32_t i = 0; i < m->rt[T].n_nodes;) {
                const rtrie *t = &m->rt[T];
                const int32_t d = t->depth[i];
                const int32_t x = step_fast(g, walk[d - 1], cls[t->byte[i]]);
                if (x < 0) {
                    if (m->overflow) {
                        free(tmp);
                        return false;
                    }
                    i = t->end[i];
                    continue;
                }
                walk[d] = x;
                for (int32_t j = t->tok_off[i]; j < t->tok_off[i + 1]; j++) {
                    const int32_t id = t->toks[j];
                    n += !(tmp[id >> 5] >> (id & 31) & 1);
                    tmp[id >> 5] |= 1u << (id & 31);
                }
                i++;
            }
        } else if (m->overflow) {
            free(tmp);
            return false;
        }
        if (!GVEC_GROW(m->us, m->cap_us, m->n_us + 1)) {
            free(tmp);
            return (m->overflow = true, false);
        }
        if (!iset_make(&m->us[m->n_us], tmp, n, v->n_words)) return (m->overflow = true, false);
        k = (int32_t)m->n_us++;
        m->u_bytes += iset_bytes(&m->us[k], v->n_words) + 16;
        if (!pmap_put(&m->u_map, tnode, below, k)) return (m->overflow = true, false);
    }
    iset_or(mask, &m->us[k], v->n_words);
    return true;
}

/* The top k frames of node n over BOTTOM (n itself when its stack is not deeper than
 * k); *below gets the node the cut removed (ACCEPT when none). -1 on overflow. */
static int32_t trunc_node(gram_matcher *m, int32_t n, int k, int32_t *below) {
    int32_t chain[TRUNC_MAX];
    int32_t x = n, c = 0;
    while (c < k && x != ACCEPT) {
        chain[c++] = x;
        x = m->nodes[x].parent;
    }
    *below = x;
    if (x == ACCEPT) return n;
    int32_t t = BOTTOM;
    for (int32_t i = c - 1; i >= 0 && t >= 0; i--) t = node_get(m, m->nodes[chain[i]].pos, t);
    return t;
}

static bool ensure_vocab(gram_matcher *m, const gram_vocab *v) {
    if (m->vocab == v) return true;
    drop_masks(m);
    memo_free(m);
    free(m->walk);
    free(m->bot);
    m->walk = malloc(sizeof *m->walk * (size_t)(v->max_depth + 1));
    m->bot = malloc(sizeof *m->bot * (size_t)(v->max_depth + 1));
    if (!m->walk || !m->bot) return (m->overflow = true, false);
    m->vocab = v;
    return true;
}

const uint32_t *gram_mask(gram *g, const gram_vocab *v, gram_state s) {
    gram_matcher *m = g->m;
    if (s < 0 || !m || s >= m->n_st || m->overflow) return NULL;
    if (!ensure_vocab(m, v)) return NULL;
    if (m->st[s].mask) {
        m->mask_hits++;
        return m->st[s].mask;
    }
    const size_t mb = sizeof(uint32_t) * (size_t)v->n_words;
    if (m->mask_bytes + m->u_bytes + (int64_t)mb > GRAM_MASK_CACHE_BYTES) drop_masks(m);
    uint32_t *mask = calloc(1, mb);
    if (!mask) return (m->overflow = true, NULL);
    int32_t n_seen = 0;
    for (int32_t j = 0; j < m->st[s].n; j++) {
        const int32_t nd = m->sn[m->st[s].off + j];
        if (nd == ACCEPT) {
            for (int32_t e = 0; e < v->n_eog; e++) mask[v->eog[e] >> 5] |= 1u << (v->eog[e] & 31);
            continue;
        }
        /* start at the depth this position needed last time (any depth is exact; a
         * shallower one that leaves too many tails would be a wasted walk) */
        int32_t below = ACCEPT, tn = -1, l = -1;
        const int32_t pos = m->nodes[nd].pos;
        int k = IFD_MAX(1, m->khint[pos]);
        for (; k <= TRUNC_MAX; k++) {
            tn = trunc_node(m, nd, k, &below);
            if (tn < 0 || (l = local_walk(g, v, tn)) < 0) goto fail;
            if (below == ACCEPT || m->lw[l].n_tails <= TAILS_DEEPER) break;
        }
        if (below != ACCEPT) m->khint[pos] = (uint8_t)IFD_MIN(k, TRUNC_MAX);
        /* stacks that share their top frames share the walk: its accepted set once */
        bool seen = false;
        for (int32_t q = 0; q < n_seen && !seen; q++) seen = m->seen[q] == l;
        if (!seen) {
            if (!GVEC_GROW(m->seen, m->cap_seen, n_seen + 1)) goto fail;
            m->seen[n_seen++] = l;
            iset_or(mask, &m->lw[l].acc, v->n_words);
        }
        if (m->lw[l].rest >= 0 && !tails_below(g, v, tn, m->lw[l].rest, below, mask)) goto fail;
    }
    m->st[s].mask = mask;
    m->mask_bytes += (int64_t)mb;
    m->masks_computed++;
    return mask;
fail:
    free(mask);
    m->overflow = true;
    return NULL;
}

gram_state gram_advance_token(gram *g, const gram_vocab *v, gram_state s, int32_t id) {
    if (id < 0 || id >= v->n_vocab || v->off[id] == v->off[id + 1]) return GRAM_DEAD;
    return gram_feed(g, s, v->bytes + v->off[id], v->off[id + 1] - v->off[id]);
}

/* ---- the brute-force reference ---------------------------------------------------------------
 * Parse stacks as plain arrays of positions (bottom first), no interning, no caches, no
 * byte classes: a set of stacks is stepped one byte at a time through the grammar's
 * symbols and byte sets directly. */
typedef struct bstacks {
    int32_t *pos;  /* all stacks' positions, concatenated */
    int32_t *len;  /* each stack's length */
    int64_t n, npos, cap_n, cap_pos;
} bstacks;

#define BS_MAX_STACKS 256 /* explicit stacks are exponential where the DAG is not */
static bool bs_push(bstacks *b, const int32_t *v, int32_t n) {
    if (b->n >= BS_MAX_STACKS) return false;
    for (int64_t i = 0, o = 0; i < b->n; o += b->len[i++])
        if (b->len[i] == n && !memcmp(b->pos + o, v, sizeof *v * (size_t)n)) return true; /* have it */
    if (!GVEC_GROW(b->len, b->cap_n, b->n + 1) || !GVEC_GROW(b->pos, b->cap_pos, b->npos + n + 1)) return false;
    if (n) memcpy(b->pos + b->npos, v, sizeof *v * (size_t)n);
    b->npos += n;
    b->len[b->n++] = n;
    return true;
}

/* Expand the stack buf[0..n) (its top buf[n-1] may be a rule ref or an END) into stacks
 * with a terminal on top (or empty), added to out. buf has room for cap entries; it is
 * left as it was. */
static bool bs_expand(const gram *g, int32_t *buf, int32_t n, int32_t cap, bstacks *out, int depth) {
    if (depth > 4096 || n >= cap) return false;
    if (n == 0) return bs_push(out, buf, 0);
    const int32_t top = buf[n - 1], s = g->sym[top];
    if (s == GSYM_END) { /* pop; the position below is already the return point */
        if (n == 1) return bs_push(out, buf, 0);
        return bs_expand(g, buf, n - 1, cap, out, depth + 1);
    }
    if (s < 0) return bs_push(out, buf, n);
    /* the return point; when it is the end of its alternative the frame is dropped at
     * once (returning there would only pop it): without that, nested repetitions give
     * stacks that differ only in their run of ended frames, exponentially many */
    const bool tail = g->sym[top + 1] == GSYM_END;
    const int32_t at = tail ? n - 1 : n;
    buf[n - 1] = top + 1;
    bool ok = true;
    for (int32_t a = g->rule_alt[s]; a < g->rule_alt[s + 1] && ok; a++) {
        buf[at] = g->alt_pos[a];
        ok = bs_expand(g, buf, at + 1, cap, out, depth + 1);
    }
    buf[n - 1] = top;
    return ok;
}

#define BS_CAP 8192
static bool bs_step(const gram *g, const bstacks *in, uint8_t c, bstacks *out, int32_t *buf) {
    out->n = out->npos = 0;
    int64_t o = 0;
    for (int64_t i = 0; i < in->n; o += in->len[i++]) {
        const int32_t n = in->len[i];
        if (n == 0) continue;
        const int32_t *v = in->pos + o, s = g->sym[v[n - 1]];
        if (!(g->sets[~s][c >> 5] >> (c & 31) & 1)) continue;
        if (n + 1 >= BS_CAP) return false;
        memcpy(buf, v, sizeof *buf * (size_t)n);
        buf[n - 1]++;
        if (!bs_expand(g, buf, n, BS_CAP, out, 0)) return false;
    }
    return true;
}

bool gram_mask_bruteforce(gram *g, const gram_vocab *v, gram_state s, uint32_t *out) {
    memset(out, 0, sizeof *out * (size_t)v->n_words);
    if (s < 0 || !g->m || s >= g->m->n_st) return false;
    bool finished = false;
    /* the state's stacks, unrolled from its nodes */
    bstacks start = {0}, a = {0}, b = {0}, *first = NULL;
    int32_t *buf = NULL;
    uint8_t done[256] = {0};
    const gstate st = g->m->st[s];
    bool can_end = false;
    for (int32_t i = 0; i < st.n; i++) {
        int32_t nd = g->m->sn[st.off + i], len = 0;
        if (nd == ACCEPT) {
            can_end = true;
            if (!bs_push(&start, NULL, 0)) goto out;
            continue;
        }
        for (int32_t x = nd; x != ACCEPT; x = g->m->nodes[x].parent) len++;
        int32_t *w = malloc(sizeof *w * (size_t)len);
        if (!w) goto out;
        int32_t k = len;
        for (int32_t x = nd; x != ACCEPT; x = g->m->nodes[x].parent) w[--k] = g->m->nodes[x].pos;
        const bool pushed = bs_push(&start, w, len);
        free(w);
        if (!pushed) goto out;
    }
    /* every token fed byte by byte from the state's stacks (the first byte's stacks
     * computed once per byte value) */
    buf = malloc(sizeof *buf * BS_CAP);
    first = calloc(256, sizeof *first);
    if (!buf || !first) goto out;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        const uint32_t n = v->off[id + 1] - v->off[id];
        if (v->is_eog[id]) {
            if (can_end) out[id >> 5] |= 1u << (id & 31);
            continue;
        }
        if (n == 0) continue;
        const uint8_t c0 = (uint8_t)v->bytes[v->off[id]];
        if (!done[c0]) {
            if (!bs_step(g, &start, c0, &first[c0], buf)) goto out;
            done[c0] = 1;
        }
        const bstacks *cur = &first[c0];
        bool alive = cur->n > 0;
        for (uint32_t k = 1; k < n && alive; k++) {
            bstacks *nx = cur == &a ? &b : &a;
            if (!bs_step(g, cur, (uint8_t)v->bytes[v->off[id] + k], nx, buf)) goto out;
            cur = nx;
            alive = cur->n > 0;
        }
        if (alive) out[id >> 5] |= 1u << (id & 31);
    }
    finished = true;
out:
    free(buf);
    for (int c = 0; first && c < 256; c++) {
        free(first[c].pos);
        free(first[c].len);
    }
    free(first);
    free(start.pos);
    free(start.len);
    free(a.pos);
    free(a.len);
    free(b.pos);
    free(b.len);
    return finished;
}
