/* grammar_vocab.c — the vocabulary as grammars see it: every token's bytes (its piece in
 * output text), the end-of-generation ids, and tries of byte strings in DFS preorder
 * (rtrie, grammar_impl.h), the layout the mask walks stream through: a node's subtree is
 * the run of nodes up to end[i], so a dead prefix skips its whole subtree in one jump.
 * The vocabulary's own trie holds every piece; the matcher builds tries of tails of
 * pieces with the same code. A gram_vocab is built once per engine and immutable
 * afterwards (any number of threads read it). */
#include "grammar_impl.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local const gram_vocab *t_vocab; /* qsort's context */

static int cmp_tail(const void *a, const void *b) {
    const upair *x = a, *y = b;
    const gram_vocab *v = t_vocab;
    const char *px = v->bytes + v->off[x->tok] + x->off, *py = v->bytes + v->off[y->tok] + y->off;
    const uint32_t nx = v->off[x->tok + 1] - v->off[x->tok] - (uint32_t)x->off;
    const uint32_t ny = v->off[y->tok + 1] - v->off[y->tok] - (uint32_t)y->off;
    int c = memcmp(px, py, IFD_MIN(nx, ny));
    if (c) return c;
    if (nx != ny) return nx < ny ? -1 : 1;
    return (x->tok > y->tok) - (x->tok < y->tok);
}

void gram_rtrie_free(rtrie *t) {
    free(t->byte);
    free(t->depth);
    free(t->end);
    free(t->tok_off);
    free(t->toks);
    *t = (rtrie){0};
}

int64_t gram_rtrie_bytes(const rtrie *t) { return (int64_t)t->n_nodes * 15 + 8; }

/* Sort the tails: an LSD radix sort on their first 8 bytes (big-endian, zero padded),
 * then the runs that tie there by the full comparison. */
typedef struct keyed {
    uint64_t key;
    upair u;
} keyed;

static bool sort_tails(const gram_vocab *v, upair *u, int64_t nu) {
    keyed *a = malloc(sizeof *a * (size_t)nu), *b = malloc(sizeof *b * (size_t)nu);
    if (!a || !b) {
        free(a);
        free(b);
        return false;
    }
    for (int64_t k = 0; k < nu; k++) {
        const unsigned char *p = (const unsigned char *)v->bytes + v->off[u[k].tok] + u[k].off;
        const int64_t n = v->off[u[k].tok + 1] - v->off[u[k].tok] - (uint32_t)u[k].off;
        uint64_t key = 0;
        for (int i = 0; i < 8; i++) key = key << 8 | (i < n ? p[i] : 0);
        a[k] = (keyed){key, u[k]};
    }
    for (int pass = 0; pass < 8; pass++) {
        const int sh = 8 * pass;
        int64_t cnt[257] = {0};
        for (int64_t k = 0; k < nu; k++) cnt[(a[k].key >> sh & 0xFF) + 1]++;
        bool trivial = false;
        for (int c = 1; c <= 256; c++) trivial |= cnt[c] == nu;
        if (trivial) continue;
        for (int c = 0; c < 256; c++) cnt[c + 1] += cnt[c];
        for (int64_t k = 0; k < nu; k++) b[cnt[a[k].key >> sh & 0xFF]++] = a[k];
        keyed *t = a;
        a = b;
        b = t;
    }
    for (int64_t k = 0; k < nu; k++) u[k] = a[k].u;
    t_vocab = v;
    for (int64_t k = 0; k < nu;) {
        int64_t e = k + 1;
        while (e < nu && a[e].key == a[k].key) e++;
        if (e - k > 1) qsort(u + k, (size_t)(e - k), sizeof *u, cmp_tail);
        k = e;
    }
    t_vocab = NULL;
    free(a);
    free(b);
    return true;
}

bool gram_rtrie_build(rtrie *t, const gram_vocab *v, upair *u, int64_t nu) {
    *t = (rtrie){0};
    if (nu <= 0) return true;
    if (!sort_tails(v, u, nu)) return false;
    int64_t maxn = 0;
    for (int64_t k = 0; k < nu; k++) maxn += v->off[u[k].tok + 1] - v->off[u[k].tok] - (uint32_t)u[k].off;
    if (maxn >= INT32_MAX || nu >= INT32_MAX) return false;
    t->byte = malloc((size_t)maxn + 1);
    t->depth = malloc(sizeof *t->depth * ((size_t)maxn + 1));
    t->end = malloc(sizeof *t->end * ((size_t)maxn + 1));
    t->tok_off = malloc(sizeof *t->tok_off * ((size_t)maxn + 2));
    t->toks = malloc(sizeof *t->toks * ((size_t)nu + 1));
    int32_t *path = malloc(sizeof *path * ((size_t)v->max_depth + 2));
    if (!t->byte || !t->depth || !t->end || !t->tok_off || !t->toks || !path) {
        free(path);
        gram_rtrie_free(t);
        return false;
    }
    /* sorted tails: each adds the nodes past its common prefix with the previous one;
     * equal tails are adjacent, so a tail's tokens go to the node made last (or the same
     * node again), and tok_off of a node is the token count when it was made */
    int32_t nn = 0, path_len = 0, nt = 0, prev_n = 0;
    const char *prev = NULL;
    for (int64_t k = 0; k < nu; k++) {
        const char *s = v->bytes + v->off[u[k].tok] + u[k].off;
        const int32_t n = (int32_t)(v->off[u[k].tok + 1] - v->off[u[k].tok]) - u[k].off;
        int32_t lcp = 0;
        if (prev)
            while (lcp < n && lcp < prev_n && prev[lcp] == s[lcp]) lcp++;
        for (int32_t d = path_len; d > lcp; d--) t->end[path[d]] = nn;
        for (int32_t d = lcp + 1; d <= n; d++) {
            t->byte[nn] = (uint8_t)s[d - 1];
            t->depth[nn] = (uint16_t)d;
            t->tok_off[nn] = nt;
            path[d] = nn++;
        }
        path_len = n;
        t->toks[nt++] = u[k].tok;
        prev = s;
        prev_n = n;
    }
    for (int32_t d = path_len; d > 0; d--) t->end[path[d]] = nn;
    t->tok_off[nn] = nt;
    t->n_nodes = nn;
    free(path);
    return true;
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v->is_eog);
    free(v->eog);
    gram_rtrie_free(&v->trie);
    free(v);
}

int32_t gram_vocab_n(const gram_vocab *v) { return v->n_vocab; }
int32_t gram_mask_words(const gram_vocab *v) { return v->n_words; }
int64_t gram_vocab_nodes(const gram_vocab *v) { return v->trie.n_nodes; }

const char *gram_vocab_piece(const gram_vocab *v, int32_t id, size_t *n) {
    if (id < 0 || id >= v->n_vocab) {
        *n = 0;
        return "";
    }
    *n = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

bool gram_vocab_is_eog(const gram_vocab *v, int32_t id) { return id >= 0 && id < v->n_vocab && v->is_eog[id]; }

#define MAX_PIECE 4096 /* longer pieces are left out (never allowed) */

gram_vocab *gram_vocab_new(int32_t n_vocab, size_t (*piece)(void *ctx, int32_t id, char *buf, size_t cap),
                           bool (*eog)(void *ctx, int32_t id), void *ctx) {
    if (n_vocab <= 0 || n_vocab > (1 << 24)) return NULL;
    gram_vocab *v = calloc(1, sizeof *v);
    char *buf = malloc(MAX_PIECE);
    upair *u = NULL;
    if (!v || !buf) goto fail;
    v->n_vocab = n_vocab;
    v->n_words = (n_vocab + 31) / 32;
    v->off = malloc(sizeof *v->off * ((size_t)n_vocab + 1));
    v->is_eog = calloc((size_t)n_vocab, 1);
    v->eog = malloc(sizeof *v->eog * (size_t)n_vocab);
    u = malloc(sizeof *u * (size_t)n_vocab);
    size_t total = 0, cap = (size_t)n_vocab * 8 + 64;
    v->bytes = malloc(cap);
    if (!v->off || !v->is_eog || !v->eog || !u || !v->bytes) goto fail;
    int64_t nu = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        v->off[id] = (uint32_t)total;
        if (eog && eog(ctx, id)) {
            v->is_eog[id] = 1;
            v->eog[v->n_eog++] = id;
            continue; /* an EOG id is never matched as bytes */
        }
        size_t n = piece(ctx, id, buf, MAX_PIECE);
        if (n > MAX_PIECE) n = 0;
        if (total + n > UINT32_MAX - 1) goto fail;
        if (total + n > cap) {
            while (total + n > cap) cap *= 2;
            char *q = realloc(v->bytes, cap);
            if (!q) goto fail;
            v->bytes = q;
        }
        memcpy(v->bytes + total, buf, n);
        total += n;
        if (n) u[nu++] = (upair){id, 0};
        if ((int32_t)n > v->max_depth) v->max_depth = (int32_t)n;
    }
    v->off[n_vocab] = (uint32_t)total;
    if (!gram_rtrie_build(&v->trie, v, u, nu)) goto fail;
    free(u);
    free(buf);
    return v;
fail:
    free(u);
    free(buf);
    gram_vocab_free(v);
    return NULL;
}
