/* grammar_vocab.c — the vocabulary as grammars see it: every token's bytes (its piece in
 * output text), the end-of-generation ids, and a byte trie of the pieces in DFS
 * preorder (grammar_impl.h), the layout the mask walk streams through: a node's subtree
 * is the run of nodes up to end[i], so a dead prefix skips its whole subtree in one
 * jump. Built once per engine; immutable afterwards (any number of threads read it). */
#include "grammar_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct sort_ctx {
    const uint32_t *off;
    const char *bytes;
} sort_ctx;

static _Thread_local const sort_ctx *g_sort;

static int cmp_piece(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint32_t nx = g_sort->off[x + 1] - g_sort->off[x], ny = g_sort->off[y + 1] - g_sort->off[y];
    int c = memcmp(g_sort->bytes + g_sort->off[x], g_sort->bytes + g_sort->off[y], IFD_MIN(nx, ny));
    if (c) return c;
    if (nx != ny) return nx < ny ? -1 : 1;
    return (x > y) - (x < y);
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v->is_eog);
    free(v->eog);
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok);
    free(v->dup);
    free(v);
}

int32_t gram_vocab_n(const gram_vocab *v) { return v->n_vocab; }
int32_t gram_mask_words(const gram_vocab *v) { return v->n_words; }
int64_t gram_vocab_nodes(const gram_vocab *v) { return v->n_nodes; }

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
    int32_t *order = NULL, *path = NULL;
    if (!v || !buf) goto fail;
    v->n_vocab = n_vocab;
    v->n_words = (n_vocab + 31) / 32;
    v->off = malloc(sizeof *v->off * ((size_t)n_vocab + 1));
    v->is_eog = calloc((size_t)n_vocab, 1);
    v->eog = malloc(sizeof *v->eog * (size_t)n_vocab);
    v->dup = malloc(sizeof *v->dup * (size_t)n_vocab);
    order = malloc(sizeof *order * (size_t)n_vocab);
    if (!v->off || !v->is_eog || !v->eog || !v->dup || !order) goto fail;
    /* pieces */
    size_t total = 0, cap = (size_t)n_vocab * 8 + 64;
    v->bytes = malloc(cap);
    if (!v->bytes) goto fail;
    int32_t n_order = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        v->off[id] = (uint32_t)total;
        v->dup[id] = -1;
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
        if (n) order[n_order++] = id;
    }
    v->off[n_vocab] = (uint32_t)total;
    /* the trie: sorted pieces; each new piece adds the nodes past its common prefix
     * with the previous one */
    sort_ctx sc = {v->off, v->bytes};
    g_sort = &sc;
    qsort(order, (size_t)n_order, sizeof *order, cmp_piece);
    g_sort = NULL;
    int64_t n_nodes_max = 0;
    for (int32_t k = 0; k < n_order; k++) n_nodes_max += v->off[order[k] + 1] - v->off[order[k]];
    if (n_nodes_max > INT32_MAX - 1) goto fail;
    v->byte = malloc((size_t)n_nodes_max + 1);
    v->depth = malloc(sizeof *v->depth * ((size_t)n_nodes_max + 1));
    v->end = malloc(sizeof *v->end * ((size_t)n_nodes_max + 1));
    v->tok = malloc(sizeof *v->tok * ((size_t)n_nodes_max + 1));
    path = malloc(sizeof *path * (MAX_PIECE + 1)); /* node at each depth of the current path */
    if (!v->byte || !v->depth || !v->end || !v->tok || !path) goto fail;
    int32_t nn = 0, path_len = 0, prev = -1;
    for (int32_t k = 0; k < n_order; k++) {
        const int32_t id = order[k];
        const char *s = v->bytes + v->off[id];
        const int32_t n = (int32_t)(v->off[id + 1] - v->off[id]);
        int32_t lcp = 0;
        if (prev >= 0) {
            const char *p = v->bytes + v->off[prev];
            const int32_t pn = (int32_t)(v->off[prev + 1] - v->off[prev]);
            while (lcp < n && lcp < pn && p[lcp] == s[lcp]) lcp++;
        }
        /* close the path's nodes deeper than the common prefix */
        for (int32_t d = path_len; d > lcp; d--) v->end[path[d]] = nn;
        path_len = lcp;
        for (int32_t d = lcp + 1; d <= n; d++) {
            v->byte[nn] = (uint8_t)s[d - 1];
            v->depth[nn] = (uint16_t)d;
            v->tok[nn] = -1;
            path[d] = nn++;
        }
        path_len = n;
        const int32_t at = path[n];
        if (v->tok[at] < 0) {
            v->tok[at] = id;
        } else { /* the same bytes as an earlier id: chain it */
            int32_t x = v->tok[at];
            while (v->dup[x] >= 0) x = v->dup[x];
            v->dup[x] = id;
        }
        if (n > v->max_depth) v->max_depth = n;
        prev = id;
    }
    for (int32_t d = path_len; d > 0; d--) v->end[path[d]] = nn;
    v->n_nodes = nn;
    free(order);
    free(path);
    free(buf);
    return v;
fail:
    free(order);
    free(path);
    free(buf);
    gram_vocab_free(v);
    return NULL;
}
