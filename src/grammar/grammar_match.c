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

#define GRAM_MATCHER_MAX_BYTES ((int64_t)512 << 20)
#define GRAM_MASK_CACHE_BYTES ((int64_t)96 << 20)
#define NEXT_UNKNOWN (-2)
#define ACCEPT 0

typedef struct gnode {
    int32_t pos, parent;
} gnode;

typedef struct gstate {
    int32_t off, n;  /* its nodes: m->sn[off .. off + n), sorted */
    int32_t *next;   /* (n_classes) successor per class, NEXT_UNKNOWN until computed */
    uint32_t *mask;  /* the cached mask, or NULL */
    bool can_end, must_end;
} gstate;

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
    int64_t masks_computed, mask_hits;
};

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
    free(m->walk);
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
        const int32_t n = m->work[--sp];
        if (m->stamp[n] == m->cur_stamp) continue;
        m->stamp[n] = m->cur_stamp;
        if (n == ACCEPT) {
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
    s->can_end = m->acc[0] == ACCEPT; /* sorted: ACCEPT (0) first */
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
        if (nd == ACCEPT) continue;
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
    out->bytes = g->m->bytes + g->m->mask_bytes;
}

/* ---- masks --------------------------------------------------------------------------------- */
static void drop_masks(gram_matcher *m) {
    for (int64_t i = 0; i < m->n_st; i++) {
        free(m->st[i].mask);
        m->st[i].mask = NULL;
    }
    m->mask_bytes = 0;
}

const uint32_t *gram_mask(gram *g, const gram_vocab *v, gram_state s) {
    gram_matcher *m = g->m;
    if (s < 0 || !m || s >= m->n_st || m->overflow) return NULL;
    if (m->vocab != v) {
        drop_masks(m);
        free(m->walk);
        m->walk = malloc(sizeof *m->walk * (size_t)(v->max_depth + 1));
        if (!m->walk) return (m->overflow = true, NULL);
        m->vocab = v;
    }
    if (m->st[s].mask) {
        m->mask_hits++;
        return m->st[s].mask;
    }
    const size_t mb = sizeof(uint32_t) * (size_t)v->n_words;
    if (m->mask_bytes + (int64_t)mb > GRAM_MASK_CACHE_BYTES) drop_masks(m);
    uint32_t *mask = calloc(1, mb);
    if (!mask) return (m->overflow = true, NULL);
    /* the walk: node i extends its parent's state (walk[depth - 1]) by its byte's class */
    int32_t *walk = m->walk;
    walk[0] = s;
    const uint8_t *byte = v->byte, *cls = g->byte_class;
    const uint16_t *depth = v->depth;
    const int32_t *end = v->end, *tok = v->tok;
    for (int32_t i = 0; i < v->n_nodes;) {
        const int32_t d = depth[i];
        const int32_t t = step_fast(g, walk[d - 1], cls[byte[i]]);
        if (t < 0) {
            if (m->overflow) {
                free(mask);
                return NULL;
            }
            i = end[i];
            continue;
        }
        walk[d] = t;
        for (int32_t id = tok[i]; id >= 0; id = v->dup[id]) mask[id >> 5] |= 1u << (id & 31);
        i++;
    }
    if (m->st[s].can_end)
        for (int32_t k = 0; k < v->n_eog; k++) mask[v->eog[k] >> 5] |= 1u << (v->eog[k] & 31);
    m->st[s].mask = mask;
    m->mask_bytes += (int64_t)mb;
    m->masks_computed++;
    return mask;
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

static bool bs_push(bstacks *b, const int32_t *v, int32_t n) {
    for (int64_t i = 0, o = 0; i < b->n; o += b->len[i++])
        if (b->len[i] == n && !memcmp(b->pos + o, v, sizeof *v * (size_t)n)) return true; /* have it */
    if (!GVEC_GROW(b->len, b->cap_n, b->n + 1) || !GVEC_GROW(b->pos, b->cap_pos, b->npos + n + 1)) return false;
    if (n) memcpy(b->pos + b->npos, v, sizeof *v * (size_t)n);
    b->npos += n;
    b->len[b->n++] = n;
    return true;
}

/* Expand the stack v[0..n) (its top v[n-1] may be a rule ref or an END) into stacks
 * with a terminal on top (or empty), added to out. buf: scratch of 4096 + n entries. */
static bool bs_expand(const gram *g, const int32_t *v, int32_t n, bstacks *out, int depth) {
    if (depth > 4096) return false;
    if (n == 0) return bs_push(out, v, 0);
    const int32_t top = v[n - 1], s = g->sym[top];
    if (s == GSYM_END) {
        if (n == 1) return bs_push(out, v, 0);
        /* pop; the position below is already the return point */
        return bs_expand(g, v, n - 1, out, depth + 1);
    }
    if (s < 0) return bs_push(out, v, n);
    int32_t *w = malloc(sizeof *w * (size_t)(n + 1));
    if (!w) return false;
    memcpy(w, v, sizeof *w * (size_t)n);
    w[n - 1] = top + 1; /* the return point (may be an END: popped when reached) */
    bool ok = true;
    for (int32_t a = g->rule_alt[s]; a < g->rule_alt[s + 1] && ok; a++) {
        w[n] = g->alt_pos[a];
        ok = bs_expand(g, w, n + 1, out, depth + 1);
    }
    free(w);
    return ok;
}

static bool bs_step(const gram *g, const bstacks *in, uint8_t c, bstacks *out) {
    out->n = out->npos = 0;
    int64_t o = 0;
    for (int64_t i = 0; i < in->n; o += in->len[i++]) {
        const int32_t n = in->len[i];
        if (n == 0) continue;
        const int32_t *v = in->pos + o, s = g->sym[v[n - 1]];
        if (!(g->sets[~s][c >> 5] >> (c & 31) & 1)) continue;
        int32_t *w = malloc(sizeof *w * (size_t)n);
        if (!w) return false;
        memcpy(w, v, sizeof *w * (size_t)n);
        w[n - 1]++;
        bool ok = bs_expand(g, w, n, out, 0);
        free(w);
        if (!ok) return false;
    }
    return true;
}

void gram_mask_bruteforce(gram *g, const gram_vocab *v, gram_state s, uint32_t *out) {
    memset(out, 0, sizeof *out * (size_t)v->n_words);
    if (s < 0 || !g->m || s >= g->m->n_st) return;
    /* the state's stacks, unrolled from its nodes */
    bstacks start = {0}, a = {0}, b = {0};
    const gstate st = g->m->st[s];
    bool can_end = false;
    for (int32_t i = 0; i < st.n; i++) {
        int32_t nd = g->m->sn[st.off + i], len = 0;
        if (nd == ACCEPT) {
            can_end = true;
            bs_push(&start, NULL, 0);
            continue;
        }
        for (int32_t x = nd; x != ACCEPT; x = g->m->nodes[x].parent) len++;
        int32_t *w = malloc(sizeof *w * (size_t)len);
        if (!w) goto out;
        int32_t k = len;
        for (int32_t x = nd; x != ACCEPT; x = g->m->nodes[x].parent) w[--k] = g->m->nodes[x].pos;
        bs_push(&start, w, len);
        free(w);
    }
    for (int32_t id = 0; id < v->n_vocab; id++) {
        const uint32_t n = v->off[id + 1] - v->off[id];
        if (v->is_eog[id]) {
            if (can_end) out[id >> 5] |= 1u << (id & 31);
            continue;
        }
        if (n == 0) continue;
        const bstacks *cur = &start;
        bool alive = true;
        for (uint32_t k = 0; k < n && alive; k++) {
            bstacks *nx = cur == &a ? &b : &a;
            if (!bs_step(g, cur, (uint8_t)v->bytes[v->off[id] + k], nx)) goto out;
            cur = nx;
            alive = cur->n > 0;
        }
        if (alive) out[id >> 5] |= 1u << (id & 31);
    }
out:
    free(start.pos);
    free(start.len);
    free(a.pos);
    free(a.len);
    free(b.pos);
    free(b.len);
}
