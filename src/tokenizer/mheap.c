/* mheap.c — binary max-heap of merge candidates (see mheap.h). Single-threaded. */
#include "mheap.h"

#include <stdlib.h>

#include "../util/status.h"

/* a goes above b. NaN priorities compare false both ways and fall back to position,
 * which keeps the heap consistent enough to be memory-safe whatever the scores are. */
static inline bool above(const mheap_item *a, const mheap_item *b) {
    if (a->prio > b->prio) return true;
    if (a->prio < b->prio) return false;
    return a->left < b->left;
}

int mheap_push(mheap *h, mheap_item it) {
    if (h->n == h->cap) {
        size_t ncap = h->cap ? h->cap * 2 : 64;
        mheap_item *ni = realloc(h->items, ncap * sizeof *ni);
        if (!ni) return IFD_ERR_NOMEM;
        h->items = ni;
        h->cap = ncap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!above(&it, &h->items[p])) break;
        h->items[i] = h->items[p];
        i = p;
    }
    h->items[i] = it;
    return IFD_OK;
}

bool mheap_pop(mheap *h, mheap_item *out) {
    if (h->n == 0) return false;
    *out = h->items[0];
    mheap_item last = h->items[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t l = 2 * i + 1, best = l;
        if (l >= n) break;
        if (l + 1 < n && above(&h->items[l + 1], &h->items[l])) best = l + 1;
        if (!above(&h->items[best], &last)) break;
        h->items[i] = h->items[best];
        i = best;
    }
    if (n > 0) h->items[i] = last;
    return true;
}

void mheap_free(mheap *h) {
    if (!h) return;
    free(h->items);
    h->items = NULL;
    h->n = h->cap = 0;
}
