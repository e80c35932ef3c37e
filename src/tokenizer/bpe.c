/* bpe.c — the byte-level BPE encoder as llama.cpp runs it (llm_tokenizer_bpe):
 * decode the text to code points (invalid UTF-8 -> U+FFFD), split it into words with
 * the vocabulary's pre-tokenizer, map every byte of each word's UTF-8 to GPT-2's
 * printable code points, then within each word repeatedly apply the lowest-ranked
 * merge among adjacent symbols (ties: leftmost). O(w log w) per word of w characters.
 *
 * Called by tok_encode for one text fragment; allocates per call; thread-safe over an
 * immutable tokenizer. */
#include <stdlib.h>

#include "../util/status.h"
#include "mheap.h"
#include "tokenizer_impl.h"
#include "unicode.h"

typedef struct bpe_sym {
    int32_t prev, next;
    size_t off, n; /* bytes of the encoded word; n == 0 once merged */
} bpe_sym;

typedef struct bpe_work {
    const tokenizer *t;
    const char *w; /* the byte-encoded word */
    bpe_sym *syms;
    mheap heap;
} bpe_work;

static int add_pair(bpe_work *b, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return IFD_OK;
    const bpe_sym *l = &b->syms[left], *r = &b->syms[right];
    int32_t rank = strmap_get2(&b->t->merges, b->w + l->off, l->n, ' ', b->w + r->off, r->n);
    if (rank < 0) return IFD_OK;
    mheap_item it = {.prio = -(double)rank, .left = left, .right = right, .size = l->n + r->n};
    return mheap_push(&b->heap, it);
}

/* Merge one encoded word w[0..n) and append its ids. syms has room for n symbols. */
static int encode_word(bpe_work *b, const char *w, size_t n, tok_ids *out) {
    const tokenizer *t = b->t;
    int rc;
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->by_text, w, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    b->w = w;
    mheap_clear(&b->heap);
    int32_t ns = 0;
    for (size_t off = 0; off < n; ns++) {
        size_t len = unicode_len_utf8((unsigned char)w[off]);
        if (len > n - off) len = n - off;
        b->syms[ns] = (bpe_sym){.prev = ns - 1, .next = off + len == n ? -1 : ns + 1, .off = off, .n = len};
        off += len;
    }
    for (int32_t i = 1; i < ns; i++)
        if ((rc = add_pair(b, i - 1, i))) return rc;

    mheap_item it;
    while (mheap_pop(&b->heap, &it)) {
        bpe_sym *l = &b->syms[it.left], *r = &b->syms[it.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != it.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) b->syms[r->next].prev = it.left;
        if ((rc = add_pair(b, l->prev, it.left))) return rc;
        if ((rc = add_pair(b, it.left, l->next))) return rc;
    }

    for (int32_t i = 0; i != -1 && ns > 0; i = b->syms[i].next) {
        const bpe_sym *s = &b->syms[i];
        int32_t id = strmap_get(&t->by_text, w + s->off, s->n);
        if (id >= 0) {
            if ((rc = tok_ids_push(out, id))) return rc;
            continue;
        }
        /* llama.cpp: each byte of the piece as a one-byte token, where one exists */
        for (size_t j = 0; j < s->n; j++) {
            int32_t bt = t->byte_tok[(unsigned char)w[s->off + j]];
            if (bt >= 0 && (rc = tok_ids_push(out, bt))) return rc;
        }
    }
    return IFD_OK;
}

int bpe_encode(const tokenizer *t, const char *text, size_t n, tok_ids *out) {
    int rc = IFD_OK;
    uint32_t *cpts = NULL;
    size_t *lens = NULL, n_lens = 0;
    char *wbuf = NULL;
    bpe_work b = {.t = t};
    if (n == 0) return IFD_OK;

    cpts = malloc(n * sizeof *cpts);
    if (!cpts) return IFD_ERR_NOMEM;
    size_t nc = unicode_decode_lenient(text, n, cpts);
    if ((rc = pretok_split(t->pre, cpts, nc, &lens, &n_lens))) goto fail;

    size_t max_len = 0;
    for (size_t i = 0; i < n_lens; i++)
        if (lens[i] > max_len) max_len = lens[i];
    /* a code point is <= 4 UTF-8 bytes, each mapped to a <= 2-byte character */
    wbuf = malloc(max_len * 8 + 1);
    b.syms = malloc((max_len * 4 + 1) * sizeof *b.syms);
    if (!wbuf || !b.syms) {
        rc = IFD_ERR_NOMEM;
        goto fail;
    }

    size_t start = 0;
    for (size_t i = 0; i < n_lens; i++) {
        size_t wn = 0;
        for (size_t k = start; k < start + lens[i]; k++) {
            char u[4];
            size_t ul = unicode_encode(cpts[k], u);
            for (size_t j = 0; j < ul; j++)
                wn += unicode_encode(unicode_byte_to_cpt((unsigned char)u[j]), wbuf + wn);
        }
        start += lens[i];
        if ((rc = encode_word(&b, wbuf, wn, out))) goto fail;
    }

fail:
    mheap_free(&b.heap);
    free(b.syms);
    free(wbuf);
    free(lens);
    free(cpts);
    return rc;
}
