/* spm.c — the SentencePiece-style encoder as llama.cpp runs it (llm_tokenizer_spm):
 * split the escaped text into UTF-8 characters (by lead byte), then repeatedly merge
 * the adjacent pair whose concatenation is the highest-scoring vocabulary token (ties:
 * leftmost), and finally emit each remaining piece as its token or, when it is not in
 * the vocabulary, as byte tokens (<0xXX>). O(n log n) in the text length.
 *
 * Called by tok_encode for one text fragment; allocates per call; thread-safe over an
 * immutable tokenizer. */
#include <stdlib.h>

#include "../util/status.h"
#include "mheap.h"
#include "tokenizer_impl.h"
#include "unicode.h"

typedef struct spm_sym {
    int32_t prev, next;
    size_t off, n; /* bytes of text; n == 0 once merged into its left neighbour */
} spm_sym;

static int try_add_pair(const tokenizer *t, const char *text, const spm_sym *syms, mheap *h, int32_t left,
                        int32_t right) {
    if (left < 0 || right < 0) return IFD_OK;
    size_t n = syms[left].n + syms[right].n;
    int32_t id = strmap_get(&t->by_text, text + syms[left].off, n);
    if (id < 0) return IFD_OK;
    mheap_item it = {.prio = t->tok[id].score, .left = left, .right = right, .size = n};
    return mheap_push(h, it);
}

int spm_encode(const tokenizer *t, const char *text, size_t n, tok_ids *out) {
    int rc = IFD_OK;
    mheap h = {0};
    spm_sym *syms = NULL;
    if (n == 0) return IFD_OK;
    syms = malloc(n * sizeof *syms);
    if (!syms) return IFD_ERR_NOMEM;

    int32_t ns = 0;
    for (size_t off = 0; off < n; ns++) {
        size_t len = unicode_len_utf8((unsigned char)text[off]);
        if (len > n - off) len = n - off;
        syms[ns] = (spm_sym){.prev = ns - 1, .next = off + len == n ? -1 : ns + 1, .off = off, .n = len};
        off += len;
    }

    for (int32_t i = 1; i < ns; i++)
        if ((rc = try_add_pair(t, text, syms, &h, i - 1, i))) goto fail;

    mheap_item it;
    while (mheap_pop(&h, &it)) {
        spm_sym *l = &syms[it.left], *r = &syms[it.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != it.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = it.left;
        if ((rc = try_add_pair(t, text, syms, &h, l->prev, it.left))) goto fail;
        if ((rc = try_add_pair(t, text, syms, &h, it.left, l->next))) goto fail;
    }

    for (int32_t i = 0; i != -1; i = syms[i].next) {
        const spm_sym *s = &syms[i];
        int32_t id = strmap_get(&t->by_text, text + s->off, s->n);
        if (id >= 0) {
            if ((rc = tok_ids_push(out, id))) goto fail;
            continue;
        }
        /* not a token: byte fallback (llama.cpp aborts when a byte token is missing;
         * we use <unk>, or drop the byte when there is none) */
        for (size_t j = 0; j < s->n; j++) {
            int32_t b = t->byte_tok[(unsigned char)text[s->off + j]];
            if (b < 0) b = t->unk;
            if (b >= 0 && (rc = tok_ids_push(out, b))) goto fail;
        }
    }

fail:
    mheap_free(&h);
    free(syms);
    return rc;
}
