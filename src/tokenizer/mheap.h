/* mheap.h — the priority queue of candidate merges shared by the SPM and BPE
 * encoders: highest priority first, ties to the leftmost pair (the order llama.cpp's
 * std::priority_queue comparators define). SPM uses the token score as priority, BPE
 * minus the merge rank. Single-threaded (one per encode call). Internal. */
#ifndef INFERD_TOK_MHEAP_H
#define INFERD_TOK_MHEAP_H
#include "../util/layer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mheap_item {
    double prio;
    int32_t left, right; /* symbol indices */
    size_t size;         /* bytes of left + right when queued (stale check) */
} mheap_item;

typedef struct mheap {
    mheap_item *items;
    size_t n, cap;
} mheap;

/* Returns IFD_OK or IFD_ERR_NOMEM. */
int mheap_push(mheap *h, mheap_item it);
/* Removes the top into *out; false when empty. */
bool mheap_pop(mheap *h, mheap_item *out);
static inline void mheap_clear(mheap *h) {
    h->n = 0;
}
void mheap_free(mheap *h); /* accepts a zeroed struct */

#endif
