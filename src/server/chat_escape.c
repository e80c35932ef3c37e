/* chat_escape.c — escaping request data in a chat template context so that only the
 * template's own text yields control tokens (design and limits: chat_escape.h).
 *
 * The control-token texts sit in two byte tries, one of the texts and one of the
 * texts reversed, both folded to ASCII lower case. Escaping a string is one pass of
 * longest-match lookups (leftmost, longest, no overlaps), so its cost is
 * O(bytes x longest control token) whatever the number of control tokens, plus
 * O(longest^2) for the boundary checks at each end. Built once per vocabulary at
 * startup; escapes run on the HTTP threads. */
#define _GNU_SOURCE /* memmem */
#include "chat_escape.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/common.h"
#include "util/hash.h"

/* ---- byte tries ----------------------------------------------------------------------- */

/* Nodes in breadth-first order; the children of a node are contiguous and sorted by
 * the byte on their edge. */
typedef struct esc_trie {
    uint32_t *first;  /* [n_nodes] index of the first child */
    uint16_t *n_kids; /* [n_nodes] */
    uint8_t *byte;    /* [n_nodes] byte on the edge into the node */
    size_t n_nodes;
    bool starts[256]; /* first bytes of the patterns */
} esc_trie;

typedef struct esc_pat {
    const uint8_t *s;
    size_t n;
} esc_pat;

static int cmp_pat(const void *a, const void *b) {
    const esc_pat *x = a, *y = b;
    int c = memcmp(x->s, y->s, IFD_MIN(x->n, y->n));
    if (c) return c;
    return (x->n > y->n) - (x->n < y->n);
}

static void trie_free(esc_trie *t) {
    free(t->first);
    free(t->n_kids);
    free(t->byte);
    memset(t, 0, sizeof *t);
}

/* pats[0..np) (sorted here) hold total bytes in all. */
static int trie_build(esc_trie *t, esc_pat *pats, size_t np, size_t total) {
    typedef struct qent {
        uint32_t node, lo, hi, depth;
    } qent;
    if (total >= UINT32_MAX || np >= UINT32_MAX) return IFD_ERR_LIMIT;
    qsort(pats, np, sizeof *pats, cmp_pat);
    size_t cap = total + 1;
    t->first = calloc(cap, sizeof *t->first);
    t->n_kids = calloc(cap, sizeof *t->n_kids);
    t->byte = calloc(cap, sizeof *t->byte);
    qent *q = malloc(cap * sizeof *q);
    if (!t->first || !t->n_kids || !t->byte || !q) {
        free(q);
        trie_free(t);
        return IFD_ERR_NOMEM;
    }
    for (size_t i = 0; i < np; i++) t->starts[pats[i].s[0]] = true;
    size_t head = 0, tail = 0;
    t->n_nodes = 1;
    q[tail++] = (qent){0, 0, (uint32_t)np, 0};
    while (head < tail) {
        qent e = q[head++];
        uint32_t lo = e.lo;
        while (lo < e.hi && pats[lo].n == e.depth) lo++; /* patterns ending here */
        t->first[e.node] = (uint32_t)t->n_nodes;
        while (lo < e.hi) {
            uint8_t b = pats[lo].s[e.depth];
            uint32_t g = lo;
            while (g < e.hi && pats[g].s[e.depth] == b) g++;
            uint32_t c = (uint32_t)t->n_nodes++;
            t->byte[c] = b;
            t->n_kids[e.node]++;
            q[tail++] = (qent){c, lo, g, e.depth + 1};
            lo = g;
        }
    }
    free(q);
    return IFD_OK;
}

/* The child of node along byte b, or 0 (the root is nobody's child). */
static uint32_t trie_child(const esc_trie *t, uint32_t node, uint8_t b) {
    uint32_t lo = t->first[node], hi = lo + t->n_kids[node];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->byte[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->first[node] + t->n_kids[node] && t->byte[lo] == b ? lo : 0;
}

static inline uint8_t fold(uint8_t c) {
    return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
}

/* ---- the vocabulary's patterns and alphabet --------------------------------------------- */

enum { SYM_OPEN = 0, SYM_CLOSE = 1, SYM_DIGIT0 = 2, N_SYMS = 18 };

struct chat_esc {
    esc_trie fwd, rev;  /* folded patterns, and the same reversed */
    bool *term;         /* [fwd.n_nodes] a pattern ends at this node of fwd */
    size_t max_len;     /* longest pattern, bytes */
    uint8_t sym[N_SYMS][4]; /* UTF-8 of OPEN, CLOSE, digits 0..15: all sym_len bytes, */
    size_t sym_len;         /* equal but for the last */
};

static size_t utf8_put(uint32_t cp, uint8_t *o) {
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18);
    o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Could a match of token text t (n bytes) in some text overlap an occurrence of x (xl
 * bytes)? It would contain x, start or end inside it, or lie inside it. */
static bool overlaps(const uint8_t *t, size_t n, const uint8_t *x, size_t xl) {
    if (n >= xl && memmem(t, n, x, xl)) return true;
    if (n < xl && memmem(x, xl, t, n)) return true;
    for (size_t k = 1; k < xl && k <= n; k++) {
        if (!memcmp(t + n - k, x, k)) return true;      /* t ends inside x */
        if (!memcmp(t, x + xl - k, k)) return true;     /* t starts inside x */
    }
    return false;
}

static bool is_pattern_type(tok_type ty) {
    return ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN;
}

static bool is_special_type(tok_type ty) {
    return is_pattern_type(ty) || ty == TOK_TYPE_USER_DEFINED;
}

/* The first alphabet no special token (control, unknown or user-defined: anything the
 * partition may match) can overlap. Bases keep all 18 code points inside one block of
 * 64, so the symbols differ in their last byte only. */
static int choose_alphabet(chat_esc *e, const tokenizer *tk) {
    static const uint32_t BASES[] = {0xFDD0, 0xF0000, 0xF4000, 0x100000, 0x104000};
    int32_t nv = tok_n_vocab(tk);
    for (size_t b = 0; b < IFD_ARRAY_LEN(BASES); b++) {
        for (int i = 0; i < N_SYMS; i++) e->sym_len = utf8_put(BASES[b] + (uint32_t)i, e->sym[i]);
        bool ok = true;
        for (int32_t id = 0; id < nv && ok; id++) {
            if (!is_special_type(tok_get_type(tk, id))) continue;
            const uint8_t *t = (const uint8_t *)tok_text(tk, id);
            size_t n = tok_text_len(tk, id);
            for (int i = 0; i < N_SYMS && ok; i++) ok = !overlaps(t, n, e->sym[i], e->sym_len);
        }
        if (ok) return IFD_OK;
    }
    return IFD_ERR_UNSUPPORTED;
}

int chat_esc_create(chat_esc **out, const tokenizer *tk, char *err, size_t err_bytes) {
    *out = NULL;
    chat_esc *e = calloc(1, sizeof *e);
    if (!e) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    int rc = choose_alphabet(e, tk);
    if (rc) {
        chat_esc_destroy(e);
        return ifd_errf(err, err_bytes, rc,
                        "every escape alphabet overlaps a special token of this vocabulary");
    }
    /* patterns: the control / unknown texts and the alphabet's symbols, folded */
    int32_t nv = tok_n_vocab(tk);
    size_t np = N_SYMS, total = N_SYMS * e->sym_len;
    for (int32_t id = 0; id < nv; id++) {
        if (!is_pattern_type(tok_get_type(tk, id))) continue;
        size_t n = tok_text_len(tk, id);
        if (n == 0) continue;
        np++;
        if (!ifd_add_ok(total, n, &total)) {
            chat_esc_destroy(e);
            return ifd_errf(err, err_bytes, IFD_ERR_LIMIT, "control tokens too large");
        }
    }
    uint8_t *fw = malloc(total), *rv = malloc(total);
    esc_pat *pf = malloc(np * sizeof *pf), *pr = malloc(np * sizeof *pr);
    if (!fw || !rv || !pf || !pr) {
        rc = IFD_ERR_NOMEM;
        goto done;
    }
    size_t k = 0, off = 0;
    for (int32_t id = -N_SYMS; id < nv; id++) {
        const uint8_t *t;
        size_t n;
        if (id < 0) {
            t = e->sym[id + N_SYMS];
            n = e->sym_len;
        } else {
            if (!is_pattern_type(tok_get_type(tk, id)) || !(n = tok_text_len(tk, id))) continue;
            t = (const uint8_t *)tok_text(tk, id);
        }
        for (size_t i = 0; i < n; i++) {
            fw[off + i] = fold(t[i]);
            rv[off + n - 1 - i] = fold(t[i]);
        }
        pf[k] = (esc_pat){fw + off, n};
        pr[k] = (esc_pat){rv + off, n};
        e->max_len = IFD_MAX(e->max_len, n);
        k++;
        off += n;
    }
    if ((rc = trie_build(&e->fwd, pf, np, total)) || (rc = trie_build(&e->rev, pr, np, total))) goto done;
    e->term = calloc(e->fwd.n_nodes, sizeof *e->term);
    if (!e->term) {
        rc = IFD_ERR_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < np; i++) { /* walk each pattern to its node */
        uint32_t node = 0;
        for (size_t j = 0; j < pf[i].n; j++) node = trie_child(&e->fwd, node, pf[i].s[j]);
        e->term[node] = true;
    }
done:
    free(fw);
    free(rv);
    free(pf);
    free(pr);
    if (rc) {
        chat_esc_destroy(e);
        return ifd_errf(err, err_bytes, rc, "cannot build the control-token matcher: %s", ifd_status_str(rc));
    }
    *out = e;
    return IFD_OK;
}

void chat_esc_destroy(chat_esc *e) {
    if (!e) return;
    trie_free(&e->fwd);
    trie_free(&e->rev);
    free(e->term);
    free(e);
}

void chat_esc_tab_free(chat_esc_tab *t) {
    if (!t) return;
    sbuf_free(&t->orig);
    free(t->off);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

/* ---- escaping ------------------------------------------------------------------------- */

/* Length of the longest pattern starting at s[0..n), 0 when none. */
static size_t longest_at(const chat_esc *e, const uint8_t *s, size_t n) {
    uint32_t node = 0;
    size_t best = 0;
    for (size_t j = 0; j < n; j++) {
        node = trie_child(&e->fwd, node, fold(s[j]));
        if (!node) break;
        if (e->term[node]) best = j + 1;
    }
    return best;
}

/* Does s[beg..end) end with the beginning of a pattern (a suffix of it that leads to a
 * trie node)? Only suffixes shorter than the longest pattern can. */
static bool ends_with_partial(const chat_esc *e, const uint8_t *s, size_t beg, size_t end) {
    size_t kmax = IFD_MIN(end - beg, e->max_len - 1);
    for (size_t k = 1; k <= kmax; k++) {
        size_t p = end - k;
        if (!e->fwd.starts[fold(s[p])]) continue;
        uint32_t node = 0;
        size_t j = p;
        while (j < end && (node = trie_child(&e->fwd, node, fold(s[j])))) j++;
        if (j == end) return true;
    }
    return false;
}

/* Does s[beg..end) start with the end of a pattern? (The reversed trie, walked
 * backwards.) */
static bool starts_with_partial(const chat_esc *e, const uint8_t *s, size_t beg, size_t end) {
    size_t kmax = IFD_MIN(end - beg, e->max_len - 1);
    for (size_t k = 1; k <= kmax; k++) {
        size_t p = beg + k; /* s[beg..p) reversed must be a path */
        if (!e->rev.starts[fold(s[p - 1])]) continue;
        uint32_t node = 0;
        size_t j = p;
        while (j > beg && (node = trie_child(&e->rev, node, fold(s[j - 1])))) j--;
        if (j == beg) return true;
    }
    return false;
}

static inline bool is_ws(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

typedef struct span {
    size_t pos, len;
} span;

static void put_escape(const chat_esc *e, size_t idx, bool mark, sbuf *out) {
    sbuf_put(out, e->sym[SYM_OPEN], e->sym_len);
    if (!mark) {
        int nd = 1;
        while (nd < (int)(2 * sizeof idx) && (idx >> (4 * nd)) != 0) nd++;
        for (int d = nd - 1; d >= 0; d--) sbuf_put(out, e->sym[SYM_DIGIT0 + (idx >> (4 * d) & 15)], e->sym_len);
    }
    sbuf_put(out, e->sym[SYM_CLOSE], e->sym_len);
}

static bool piece_is(const chat_esc_tab *t, size_t i, const char *s, size_t n) {
    return t->off[i + 1] - t->off[i] == n && !memcmp(t->orig.p + t->off[i], s, n);
}

/* Find piece s in the slots (open addressing, at most 32 probes: a probe sequence that
 * is crafted to collide only costs dedupe, never time). Returns the slot to fill (its
 * value 0) or holding s; SIZE_MAX when the probes ran out. */
static size_t tab_slot(const chat_esc_tab *t, const char *s, size_t n) {
    uint64_t h = ifd_hash_bytes(0x9e3779b97f4a7c15ull, s, n);
    for (size_t k = 0; k < 32; k++) {
        size_t i = (size_t)(h + k) & (t->n_slots - 1);
        if (!t->slots[i] || piece_is(t, t->slots[i] - 1, s, n)) return i;
    }
    return SIZE_MAX;
}

static bool tab_rehash(chat_esc_tab *t) {
    size_t ns = t->n_slots ? 2 * t->n_slots : 64;
    uint32_t *old = t->slots;
    size_t old_n = t->n_slots;
    if (!(t->slots = calloc(ns, sizeof *t->slots))) {
        t->slots = old;
        return false;
    }
    t->n_slots = ns;
    for (size_t i = 0; i < old_n; i++) {
        if (!old[i]) continue;
        size_t p = old[i] - 1, j = tab_slot(t, t->orig.p + t->off[p], t->off[p + 1] - t->off[p]);
        if (j != SIZE_MAX) t->slots[j] = old[i];
    }
    free(old);
    return true;
}

/* The index of piece s[0..n) (equal pieces share one, so equal strings escape
 * equally: continue_final_message's search relies on it). */
static bool tab_add(chat_esc_tab *t, const char *s, size_t n, size_t *idx) {
    if (t->n >= UINT32_MAX - 1) return false;
    if (2 * (t->n + 1) > t->n_slots && !tab_rehash(t)) return false;
    size_t slot = tab_slot(t, s, n);
    if (slot != SIZE_MAX && t->slots[slot]) {
        *idx = t->slots[slot] - 1;
        return true;
    }
    if (t->n + 2 > t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        size_t *no = realloc(t->off, ncap * sizeof *no);
        if (!no) return false;
        t->off = no;
        t->cap = ncap;
    }
    if (t->n == 0) t->off[0] = 0;
    sbuf_put(&t->orig, s, n);
    if (t->orig.oom) return false;
    *idx = t->n++;
    t->off[t->n] = t->orig.n;
    if (slot != SIZE_MAX) t->slots[slot] = (uint32_t)(*idx + 1);
    return true;
}

/* Writes s escaped into out; returns false when nothing needed escaping (out then
 * holds nothing new). */
static bool esc_str(const chat_esc *e, const char *str, size_t n, chat_esc_tab *tab, sbuf *out) {
    const uint8_t *s = (const uint8_t *)str;
    span stack_m[8], *m = stack_m;
    size_t nm = 0, cap_m = IFD_ARRAY_LEN(stack_m);
    bool ok = true;
    for (size_t i = 0; i < n;) {
        size_t len = e->fwd.starts[fold(s[i])] ? longest_at(e, s + i, n - i) : 0;
        if (!len) {
            i++;
            continue;
        }
        if (nm == cap_m) {
            span *nv = malloc(2 * cap_m * sizeof *nv);
            if (!nv) {
                ok = false;
                break;
            }
            memcpy(nv, m, nm * sizeof *m);
            if (m != stack_m) free(m);
            m = nv;
            cap_m *= 2;
        }
        m[nm++] = (span){i, len};
        i += len;
    }
    /* marks: at the ends of the first and last unescaped stretches, inside and
     * outside their whitespace */
    size_t head_end = nm ? m[0].pos : n, tail_beg = nm ? m[nm - 1].pos + m[nm - 1].len : 0;
    size_t w = 0, t = n;
    while (w < head_end && is_ws(s[w])) w++;
    while (t > tail_beg && is_ws(s[t - 1])) t--;
    size_t marks[4];
    int n_marks = 0;
    if (w > 0 && starts_with_partial(e, s, 0, head_end)) marks[n_marks++] = 0;
    if (starts_with_partial(e, s, w, head_end)) marks[n_marks++] = w;
    if (ends_with_partial(e, s, tail_beg, t)) marks[n_marks++] = t;
    if (t < n && ends_with_partial(e, s, tail_beg, n)) marks[n_marks++] = n;
    for (int i = 1; i < n_marks; i++) /* insertion sort of <= 4 */
        for (int j = i; j > 0 && marks[j - 1] > marks[j]; j--) {
            size_t x = marks[j];
            marks[j] = marks[j - 1];
            marks[j - 1] = x;
        }
    if (!ok) {
        out->oom = true;
    } else if (nm || n_marks) {
        size_t pos = 0, xi = 0;
        int mi = 0;
        for (;;) {
            size_t nmark = mi < n_marks ? marks[mi] : SIZE_MAX, nmatch = xi < nm ? m[xi].pos : SIZE_MAX;
            if (nmark == SIZE_MAX && nmatch == SIZE_MAX) break;
            if (nmark <= nmatch) {
                sbuf_put(out, s + pos, nmark - pos);
                put_escape(e, 0, true, out);
                tab->n_marks++;
                pos = nmark;
                mi++;
            } else {
                size_t idx;
                sbuf_put(out, s + pos, nmatch - pos);
                if (!tab_add(tab, str + nmatch, m[xi].len, &idx)) {
                    out->oom = true;
                    break;
                }
                put_escape(e, idx, false, out);
                pos = nmatch + m[xi].len;
                xi++;
            }
        }
        sbuf_put(out, s + pos, n - pos);
    }
    if (m != stack_m) free(m);
    return !ok || nm || n_marks;
}

void chat_esc_str(const chat_esc *e, const char *s, size_t n, chat_esc_tab *tab, sbuf *out) {
    if (!esc_str(e, s, n, tab, out)) sbuf_put(out, s, n);
}

/* Escape the NUL-terminated *s; *changed = a new string in b (NUL-terminated). */
static int esc_cstr(const chat_esc *e, const char *s, chat_esc_tab *tab, sbuf *b, bool *changed) {
    sbuf_reset(b);
    *changed = esc_str(e, s, strlen(s), tab, b);
    if (*changed) sbuf_cstr(b);
    return b->oom ? IFD_ERR_NOMEM : IFD_OK;
}

static int esc_json(const chat_esc *e, cJSON *item, chat_esc_tab *tab, sbuf *b) {
    bool changed;
    int rc;
    if (item->string) { /* an object member's key */
        if ((rc = esc_cstr(e, item->string, tab, b, &changed))) return rc;
        if (changed) {
            char *k = cJSON_malloc(b->n + 1);
            if (!k) return IFD_ERR_NOMEM;
            memcpy(k, b->p, b->n + 1);
            if (!(item->type & cJSON_StringIsConst)) cJSON_free(item->string);
            item->string = k;
            item->type &= ~cJSON_StringIsConst;
        }
    }
    if (cJSON_IsString(item) && item->valuestring) {
        if ((rc = esc_cstr(e, item->valuestring, tab, b, &changed))) return rc;
        if (changed && !cJSON_SetValuestring(item, b->p)) return IFD_ERR_NOMEM;
    }
    for (cJSON *c = item->child; c && (cJSON_IsArray(item) || cJSON_IsObject(item)); c = c->next)
        if ((rc = esc_json(e, c, tab, b))) return rc;
    return IFD_OK;
}

int chat_esc_json(const chat_esc *e, cJSON *item, chat_esc_tab *tab) {
    if (!item) return IFD_OK;
    sbuf b = {0};
    int rc = esc_json(e, item, tab, &b);
    sbuf_free(&b);
    return rc;
}

/* ---- unescaping and tokenizing --------------------------------------------------------- */

/* The symbol at s[i..n), or -1. */
static int sym_at(const chat_esc *e, const uint8_t *s, size_t n, size_t i) {
    size_t l = e->sym_len;
    if (n - i < l || memcmp(s + i, e->sym[0], l - 1)) return -1;
    int k = s[i + l - 1] - e->sym[0][l - 1];
    return k >= 0 && k < N_SYMS ? k : -1;
}

void chat_esc_unescape(const chat_esc *e, const chat_esc_tab *tab, const char *str, size_t n, sbuf *out) {
    const uint8_t *s = (const uint8_t *)str;
    size_t copied = 0, i = 0;
    for (;;) {
        const uint8_t *p = i < n ? memchr(s + i, e->sym[0][0], n - i) : NULL;
        if (!p) break;
        size_t at = (size_t)(p - s);
        int k = sym_at(e, s, n, at);
        if (k < 0) {
            i = at + 1;
            continue;
        }
        sbuf_put(out, s + copied, at - copied);
        size_t q = at + e->sym_len;
        if (k == SYM_OPEN) {
            size_t idx = 0, nd = 0;
            bool big = false;
            int d;
            while ((d = sym_at(e, s, n, q)) >= SYM_DIGIT0) {
                if (idx > SIZE_MAX >> 4) big = true;
                idx = idx << 4 | (size_t)(d - SYM_DIGIT0);
                nd++;
                q += e->sym_len;
            }
            if (d == SYM_CLOSE) {
                q += e->sym_len;
                if (nd && !big && idx < tab->n)
                    sbuf_put(out, tab->orig.p + tab->off[idx], tab->off[idx + 1] - tab->off[idx]);
            } /* else: broken (cut by the template): OPEN and its digits are dropped */
        } /* a lone CLOSE or digit: dropped */
        i = copied = q;
    }
    sbuf_put(out, s + copied, n - copied);
}

typedef struct map_ctx {
    const chat_esc *e;
    const chat_esc_tab *tab;
    sbuf buf;
} map_ctx;

static int map_unescape(void *ctx, const char *s, size_t n, const char **out, size_t *out_n) {
    map_ctx *mc = ctx;
    if (!memchr(s, mc->e->sym[0][0], n)) { /* nothing to undo: the fragment as it is */
        *out = s;
        *out_n = n;
        return IFD_OK;
    }
    sbuf_reset(&mc->buf);
    chat_esc_unescape(mc->e, mc->tab, s, n, &mc->buf);
    if (mc->buf.oom) return IFD_ERR_NOMEM;
    *out = mc->buf.p;
    *out_n = mc->buf.n;
    return IFD_OK;
}

int chat_esc_encode(const chat_esc *e, const chat_esc_tab *tab, const tokenizer *tk, const char *text, size_t n,
                    unsigned flags, int32_t **ids, size_t *n_ids) {
    flags |= TOK_ENC_PARSE_SPECIAL;
    if (chat_esc_tab_empty(tab)) return tok_encode(tk, text, n, flags, ids, n_ids);
    map_ctx mc = {e, tab, {0}};
    int rc = tok_encode_mapped(tk, text, n, flags, map_unescape, &mc, ids, n_ids);
    sbuf_free(&mc.buf);
    return rc;
}
