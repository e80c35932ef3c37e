/* kv_cache.c — the paged KV block manager (see kv_cache.h for the contract).
 *
 * Data structures, all sized in kv_create:
 *   blk[n_blocks]          per-block state, refcount, LRU links, prefix-cache record
 *   tokens[n_blocks][bs]   token ids of each registered block (to verify a hash hit)
 *   free_stack[n_blocks]   free block ids (LIFO)
 *   LRU                    intrusive doubly-linked list through blk[].prev/next;
 *                          head = least recently freed = next to evict
 *   ht[2^k >= 2*n_blocks]  open addressing, linear probing, backward-shift deletion
 *                          (no tombstones); key = chained block hash; duplicate keys
 *                          allowed (a lookup checks tokens and parent of each)
 *   copy_list[n_blocks]    blocks that are the destination of a pending copy
 * Every operation is O(1) per block touched (a hash probe is O(1) expected at load
 * factor <= 1/2). Runs on the engine thread only. */
#include "kv_cache.h"

#include <string.h>

#include "../util/common.h"
#include "../util/hash.h"

enum { BLK_FREE = 0, BLK_USED = 1, BLK_CACHED = 2 };

typedef struct kv_block {
    uint64_t hash;       /* prefix-cache key; valid while registered (and kept after) */
    int32_t ref;         /* sequence tables holding the block */
    int32_t pins;        /* pending copies reading the block (keeps it out of the pool) */
    int32_t prev, next;  /* LRU links while BLK_CACHED */
    int32_t parent;      /* registered: block before it when its KV was computed, or -1 */
    uint32_t parent_gen; /* parent's gen at registration */
    uint32_t gen;        /* bumped each time the block leaves the prefix cache */
    int32_t copy_src;    /* pending copy into this block: its source; else -1 */
    uint8_t state;       /* BLK_* */
    bool registered;     /* in the hash table */
    bool in_copy_list;
} kv_block;

typedef struct ht_entry {
    uint64_t hash;
    int32_t block; /* -1: empty */
} ht_entry;

struct kv_cache {
    int32_t n_blocks, block_size, max_blocks_per_seq;
    bool prefix_caching;
    kv_block *blk;   /* [n_blocks] */
    int32_t *tokens; /* [n_blocks * block_size], NULL without prefix caching */
    int32_t *free_stack;
    int32_t n_free;
    int32_t lru_head, lru_tail, n_lru;
    ht_entry *ht;
    uint32_t ht_mask;
    int32_t n_registered;
    int32_t *copy_list; /* [n_blocks] */
    int32_t n_copy_list, n_pending;
    uint64_t key_mask; /* all ones; fewer bits only in tests (kv_debug_set_hash_bits) */
    uint64_t query_tokens, hit_tokens, evictions;
};

/* Prefix-cache key of a full block: chained over the parent block's key. */
static uint64_t block_key(const kv_cache *kv, uint64_t parent_key, const int32_t *toks) {
    return ifd_hash_i32(parent_key, toks, (size_t)kv->block_size) & kv->key_mask;
}

/* ---- hash table ------------------------------------------------------------------- */

static void ht_insert(kv_cache *kv, int32_t b) {
    uint64_t h = kv->blk[b].hash;
    uint32_t i = (uint32_t)h & kv->ht_mask;
    while (kv->ht[i].block >= 0) i = (i + 1) & kv->ht_mask;
    kv->ht[i].hash = h;
    kv->ht[i].block = b;
}

static void ht_remove(kv_cache *kv, int32_t b) {
    uint32_t m = kv->ht_mask, i = (uint32_t)kv->blk[b].hash & m;
    while (kv->ht[i].block != b) {
        IFD_ASSERT(kv->ht[i].block >= 0);
        i = (i + 1) & m;
    }
    /* Backward shift: pull later entries of the probe run into the hole when their home
     * slot is not cyclically after the hole. */
    for (uint32_t j = (i + 1) & m; kv->ht[j].block >= 0; j = (j + 1) & m) {
        uint32_t home = (uint32_t)kv->ht[j].hash & m;
        if (((j - home) & m) >= ((j - i) & m)) {
            kv->ht[i] = kv->ht[j];
            i = j;
        }
    }
    kv->ht[i].block = -1;
}

/* The registered block with key h, token ids toks and parent `parent` (as it is now:
 * same generation), or -1. */
static int32_t ht_find(const kv_cache *kv, uint64_t h, const int32_t *toks, int32_t parent) {
    size_t tok_bytes = (size_t)kv->block_size * sizeof(int32_t);
    for (uint32_t i = (uint32_t)h & kv->ht_mask; kv->ht[i].block >= 0; i = (i + 1) & kv->ht_mask) {
        if (kv->ht[i].hash != h) continue;
        int32_t b = kv->ht[i].block;
        const kv_block *B = &kv->blk[b];
        if (B->parent != parent) continue;
        if (parent >= 0 && B->parent_gen != kv->blk[parent].gen) continue;
        if (memcmp(kv->tokens + (size_t)b * kv->block_size, toks, tok_bytes) != 0) continue;
        return b;
    }
    return -1;
}

static void blk_register(kv_cache *kv, int32_t b, uint64_t h, const int32_t *toks, int32_t parent) {
    kv_block *B = &kv->blk[b];
    B->hash = h;
    B->parent = parent;
    B->parent_gen = parent >= 0 ? kv->blk[parent].gen : 0;
    memcpy(kv->tokens + (size_t)b * kv->block_size, toks, (size_t)kv->block_size * sizeof(int32_t));
    ht_insert(kv, b);
    B->registered = true;
    kv->n_registered++;
}

static void blk_unregister(kv_cache *kv, int32_t b) {
    ht_remove(kv, b);
    kv->blk[b].registered = false;
    kv->blk[b].gen++; /* blocks registered with this one as parent no longer match */
    kv->n_registered--;
}

/* ---- pool: free stack, LRU, refcounts ------------------------------------------------ */

static void lru_unlink(kv_cache *kv, int32_t b) {
    kv_block *B = &kv->blk[b];
    if (B->prev >= 0) kv->blk[B->prev].next = B->next;
    else kv->lru_head = B->next;
    if (B->next >= 0) kv->blk[B->next].prev = B->prev;
    else kv->lru_tail = B->prev;
    B->prev = B->next = -1;
    kv->n_lru--;
}

static void lru_push_tail(kv_cache *kv, int32_t b) {
    kv_block *B = &kv->blk[b];
    B->prev = kv->lru_tail;
    B->next = -1;
    if (kv->lru_tail >= 0) kv->blk[kv->lru_tail].next = b;
    else kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_lru++;
}

/* A block nobody holds or reads any more: evictable if cached, else free. */
static void blk_park(kv_cache *kv, int32_t b) {
    kv_block *B = &kv->blk[b];
    if (B->registered) {
        B->state = BLK_CACHED;
        lru_push_tail(kv, b);
    } else {
        B->state = BLK_FREE;
        kv->free_stack[kv->n_free++] = b;
    }
}

static void blk_acquire(kv_cache *kv, int32_t b) {
    kv_block *B = &kv->blk[b];
    if (B->state == BLK_CACHED) {
        lru_unlink(kv, b);
        B->state = BLK_USED;
    }
    IFD_ASSERT(B->state == BLK_USED);
    B->ref++;
}

static void blk_unpin(kv_cache *kv, int32_t b) {
    kv_block *B = &kv->blk[b];
    IFD_ASSERT(B->pins > 0);
    if (--B->pins == 0 && B->ref == 0) blk_park(kv, b);
}

static void blk_release(kv_cache *kv, int32_t b) {
    kv_block *B = &kv->blk[b];
    IFD_ASSERT(B->ref > 0 && B->state == BLK_USED);
    if (--B->ref > 0) return;
    if (B->copy_src >= 0) { /* nobody will read the copy: cancel it */
        int32_t src = B->copy_src;
        B->copy_src = -1;
        kv->n_pending--;
        blk_unpin(kv, src);
    }
    if (B->pins == 0) blk_park(kv, b);
}

/* A fresh block with ref 1: the free list first, else evict the LRU head. The caller
 * has checked availability. */
static int32_t blk_take(kv_cache *kv) {
    int32_t b;
    if (kv->n_free > 0) {
        b = kv->free_stack[--kv->n_free];
    } else {
        b = kv->lru_head;
        IFD_ASSERT(b >= 0);
        lru_unlink(kv, b);
        blk_unregister(kv, b);
        kv->evictions++;
    }
    kv_block *B = &kv->blk[b];
    IFD_ASSERT(B->ref == 0 && B->pins == 0 && B->copy_src < 0 && !B->registered);
    B->state = BLK_USED;
    B->ref = 1;
    return b;
}

/* ---- lifetime ---------------------------------------------------------------------- */

int kv_create(kv_cache **out, int32_t n_blocks, int32_t block_size, int32_t max_blocks_per_seq,
              bool prefix_caching) {
    *out = NULL;
    if (n_blocks <= 0 || block_size <= 0 || max_blocks_per_seq <= 0) return IFD_ERR_INVALID;
    /* slots (block * block_size + offset) and token positions are int32 */
    if ((int64_t)n_blocks * block_size > INT32_MAX) return IFD_ERR_INVALID;
    if ((int64_t)max_blocks_per_seq * block_size > INT32_MAX) return IFD_ERR_INVALID;
    if (n_blocks > (1 << 29)) return IFD_ERR_INVALID; /* hash table size fits uint32 */

    kv_cache *kv = calloc(1, sizeof(*kv));
    if (!kv) return IFD_ERR_NOMEM;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->max_blocks_per_seq = max_blocks_per_seq;
    kv->prefix_caching = prefix_caching;
    kv->key_mask = ~0ull;
    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)n_blocks) cap <<= 1;
    kv->ht_mask = cap - 1;
    kv->blk = calloc((size_t)n_blocks, sizeof(*kv->blk));
    kv->free_stack = malloc((size_t)n_blocks * sizeof(int32_t));
    kv->copy_list = malloc((size_t)n_blocks * sizeof(int32_t));
    kv->ht = malloc((size_t)cap * sizeof(*kv->ht));
    if (prefix_caching) kv->tokens = calloc((size_t)n_blocks * block_size, sizeof(int32_t));
    if (!kv->blk || !kv->free_stack || !kv->copy_list || !kv->ht ||
        (prefix_caching && !kv->tokens)) {
        kv_destroy(kv);
        return IFD_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < cap; i++) kv->ht[i].block = -1;
    kv->lru_head = kv->lru_tail = -1;
    /* Stack so that block 0 is handed out first. */
    for (int32_t b = 0; b < n_blocks; b++) {
        kv_block *B = &kv->blk[b];
        B->prev = B->next = B->parent = B->copy_src = -1;
        B->state = BLK_FREE;
        kv->free_stack[b] = n_blocks - 1 - b;
    }
    kv->n_free = n_blocks;
    *out = kv;
    return IFD_OK;
}

void kv_destroy(kv_cache *kv) {
    if (!kv) return;
    free(kv->blk);
    free(kv->tokens);
    free(kv->free_stack);
    free(kv->copy_list);
    free(kv->ht);
    free(kv);
}

void kv_debug_set_hash_bits(kv_cache *kv, int bits) {
    IFD_ASSERT(kv->n_registered == 0);
    kv->key_mask = bits >= 64 ? ~0ull : bits <= 0 ? 0 : (1ull << bits) - 1;
}

int32_t kv_block_size(const kv_cache *kv) { return kv->block_size; }
int32_t kv_max_blocks_per_seq(const kv_cache *kv) { return kv->max_blocks_per_seq; }

int kv_seq_init(kv_cache *kv, kv_seq *s) {
    memset(s, 0, sizeof(*s));
    s->blocks = malloc((size_t)kv->max_blocks_per_seq * sizeof(int32_t));
    return s->blocks ? IFD_OK : IFD_ERR_NOMEM;
}

void kv_seq_deinit(kv_cache *kv, kv_seq *s) {
    if (!s) return;
    if (s->blocks) kv_free(kv, s);
    free(s->blocks);
    memset(s, 0, sizeof(*s));
}

/* ---- the step path ------------------------------------------------------------------- */

int32_t kv_match_prefix(kv_cache *kv, kv_seq *s, const int32_t *tokens, int32_t n) {
    IFD_ASSERT(s->blocks && s->n_tokens == 0 && s->n_blocks == 0);
    if (!kv->prefix_caching || n <= 0) return 0;
    kv->query_tokens += (uint64_t)n;
    int32_t bs = kv->block_size;
    int32_t max = IFD_MIN((n - 1) / bs, kv->max_blocks_per_seq);
    uint64_t h = 0;
    int32_t parent = -1;
    for (int32_t k = 0; k < max; k++) {
        const int32_t *toks = tokens + (size_t)k * bs;
        uint64_t hk = block_key(kv, h, toks);
        int32_t b = ht_find(kv, hk, toks, parent);
        if (b < 0) break;
        blk_acquire(kv, b);
        s->blocks[s->n_blocks++] = b;
        h = hk;
        parent = b;
    }
    s->n_tokens = s->n_blocks * bs;
    s->n_hashed_blocks = s->n_blocks;
    s->last_hash = h;
    kv->hit_tokens += (uint64_t)s->n_tokens;
    return s->n_tokens;
}

/* Whether writing at position s->n_tokens would land in a block someone else holds. */
static bool needs_cow(const kv_cache *kv, const kv_seq *s) {
    return s->n_tokens % kv->block_size != 0 && kv->blk[s->blocks[s->n_blocks - 1]].ref > 1;
}

int32_t kv_blocks_needed(const kv_cache *kv, const kv_seq *s, int32_t n_new) {
    if (n_new < 0) return -1;
    if (n_new == 0) return 0;
    int32_t bs = kv->block_size;
    int32_t max_tokens = kv->max_blocks_per_seq * bs; /* fits int32: checked at create */
    if (n_new > max_tokens - s->n_tokens) return -1;
    int32_t total = s->n_tokens + n_new;
    int32_t need = (int32_t)(((int64_t)total + bs - 1) / bs) - s->n_blocks;
    return need + (needs_cow(kv, s) ? 1 : 0);
}

int32_t kv_n_available(const kv_cache *kv) { return kv->n_free + kv->n_lru; }

bool kv_can_alloc_slots(const kv_cache *kv, const kv_seq *s, int32_t n_new) {
    int32_t need = kv_blocks_needed(kv, s, n_new);
    return need >= 0 && need <= kv_n_available(kv);
}

int kv_alloc_slots(kv_cache *kv, kv_seq *s, int32_t n_new) {
    IFD_ASSERT(s->blocks);
    if (n_new < 0) return IFD_ERR_INVALID;
    int32_t need = kv_blocks_needed(kv, s, n_new);
    if (need < 0) return IFD_ERR_LIMIT;
    if (need > kv_n_available(kv)) return IFD_ERR_NOMEM;
    if (n_new == 0) return IFD_OK;

    if (s->n_tokens % kv->block_size != 0) {
        /* Writing into a partial last block that is still cached (s truncated into a
         * registered block): if s is its only holder it leaves the cache, which it no
         * longer describes once written; a shared one is copied below. */
        int32_t last = s->blocks[s->n_blocks - 1];
        if (kv->blk[last].registered && kv->blk[last].ref == 1) blk_unregister(kv, last);
    }
    if (needs_cow(kv, s)) {
        int32_t old = s->blocks[s->n_blocks - 1];
        int32_t dst = blk_take(kv);
        /* If old is itself waiting for its copy, its content is still in that copy's
         * source: copy from there, so the copies of one drain are independent. */
        int32_t src = kv->blk[old].copy_src >= 0 ? kv->blk[old].copy_src : old;
        kv->blk[src].pins++;
        kv->blk[dst].copy_src = src;
        kv->n_pending++;
        if (!kv->blk[dst].in_copy_list) {
            kv->blk[dst].in_copy_list = true;
            kv->copy_list[kv->n_copy_list++] = dst;
        }
        s->blocks[s->n_blocks - 1] = dst;
        blk_release(kv, old); /* still held by the other sharer(s) */
    }
    int32_t bs = kv->block_size;
    int32_t total = s->n_tokens + n_new;
    int32_t nb = (int32_t)(((int64_t)total + bs - 1) / bs);
    while (s->n_blocks < nb) s->blocks[s->n_blocks++] = blk_take(kv);
    s->n_tokens = total;
    return IFD_OK;
}

int32_t kv_slot(const kv_cache *kv, const kv_seq *s, int32_t pos) {
    int32_t bs = kv->block_size;
    IFD_ASSERT(pos >= 0 && pos / bs < s->n_blocks);
    return s->blocks[pos / bs] * bs + pos % bs;
}

void kv_commit(kv_cache *kv, kv_seq *s, const int32_t *tokens, int32_t n_computed) {
    IFD_ASSERT(n_computed >= 0 && n_computed <= s->n_tokens);
    if (!kv->prefix_caching) return;
    int32_t bs = kv->block_size;
    int32_t full = n_computed / bs;
    for (int32_t k = s->n_hashed_blocks; k < full; k++) {
        const int32_t *toks = tokens + (size_t)k * bs;
        int32_t parent = k > 0 ? s->blocks[k - 1] : -1;
        uint64_t h = block_key(kv, s->last_hash, toks);
        int32_t b = s->blocks[k];
        kv_block *B = &kv->blk[b];
        IFD_ASSERT(B->copy_src < 0); /* committed before its copy-on-write was taken */
        if (B->registered) {
            /* a fork sibling or the match that brought it in registered it already */
            IFD_ASSERT(B->hash == h && B->parent == parent);
        } else {
            int32_t c = ht_find(kv, h, toks, parent);
            if (c >= 0 && B->ref == 1) {
                blk_acquire(kv, c);
                s->blocks[k] = c;
                blk_release(kv, b); /* unregistered: back to the free list */
            } else {
                blk_register(kv, b, h, toks, parent);
            }
        }
        s->last_hash = h;
        s->n_hashed_blocks = k + 1;
    }
}

int kv_fork(kv_cache *kv, const kv_seq *parent, kv_seq *child) {
    if (child == parent) return IFD_ERR_INVALID;
    if (!child->blocks) {
        int rc = kv_seq_init(kv, child);
        if (rc) return rc;
    }
    if (child->n_tokens != 0 || child->n_blocks != 0) return IFD_ERR_INVALID;
    for (int32_t k = 0; k < parent->n_blocks; k++) {
        child->blocks[k] = parent->blocks[k];
        blk_acquire(kv, parent->blocks[k]);
    }
    child->n_blocks = parent->n_blocks;
    child->n_tokens = parent->n_tokens;
    child->n_hashed_blocks = parent->n_hashed_blocks;
    child->last_hash = parent->last_hash;
    return IFD_OK;
}

void kv_free(kv_cache *kv, kv_seq *s) {
    for (int32_t k = s->n_blocks - 1; k >= 0; k--) blk_release(kv, s->blocks[k]);
    s->n_blocks = s->n_tokens = s->n_hashed_blocks = 0;
    s->last_hash = 0;
}

void kv_truncate(kv_cache *kv, kv_seq *s, int32_t n_tokens) {
    IFD_ASSERT(n_tokens >= 0 && n_tokens <= s->n_tokens);
    int32_t bs = kv->block_size;
    int32_t nb = (int32_t)(((int64_t)n_tokens + bs - 1) / bs);
    for (int32_t k = s->n_blocks - 1; k >= nb; k--) blk_release(kv, s->blocks[k]);
    s->n_blocks = nb;
    s->n_tokens = n_tokens;
    int32_t full = n_tokens / bs;
    if (s->n_hashed_blocks > full) {
        s->n_hashed_blocks = full;
        s->last_hash = full > 0 ? kv->blk[s->blocks[full - 1]].hash : 0;
    }
}

int32_t kv_take_copies(kv_cache *kv, int32_t *src, int32_t *dst, int32_t cap) {
    int32_t n = 0, w = 0;
    for (int32_t i = 0; i < kv->n_copy_list; i++) {
        int32_t d = kv->copy_list[i];
        kv_block *D = &kv->blk[d];
        if (D->copy_src < 0) { /* cancelled */
            D->in_copy_list = false;
            continue;
        }
        if (n >= cap) {
            kv->copy_list[w++] = d;
            continue;
        }
        int32_t sb = D->copy_src;
        src[n] = sb;
        dst[n] = d;
        n++;
        D->copy_src = -1;
        D->in_copy_list = false;
        kv->n_pending--;
        blk_unpin(kv, sb);
    }
    kv->n_copy_list = w;
    return n;
}

void kv_get_stats(const kv_cache *kv, kv_stats *st) {
    st->n_blocks = kv->n_blocks;
    st->n_free = kv->n_free;
    st->n_cached_evictable = kv->n_lru;
    st->n_used = kv->n_blocks - kv->n_free - kv->n_lru;
    st->prefix_queries_tokens = kv->query_tokens;
    st->prefix_hits_tokens = kv->hit_tokens;
    st->evictions = kv->evictions;
}

/* ---- invariants (debug/test) ------------------------------------------------------ */

#define FAILF(...)                                                                   \
    do {                                                                             \
        rc = ifd_errf(err, err_bytes, IFD_ERR_INTERNAL, __VA_ARGS__);                \
        goto out;                                                                    \
    } while (0)

int kv_check(const kv_cache *kv, kv_seq *const *live, int32_t n_live, char *err,
             size_t err_bytes) {
    int rc = IFD_OK;
    int32_t nb = kv->n_blocks, bs = kv->block_size;
    /* refs: table references; pins: pending copies per source; mark: scratch */
    int32_t *refs = calloc((size_t)nb * 3, sizeof(int32_t));
    if (!refs) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "kv_check: out of memory");
    int32_t *pins = refs + nb, *mark = refs + 2 * (size_t)nb;

    /* free stack */
    if (kv->n_free < 0 || kv->n_free > nb) FAILF("n_free %d out of range", kv->n_free);
    for (int32_t i = 0; i < kv->n_free; i++) {
        int32_t b = kv->free_stack[i];
        if (b < 0 || b >= nb) FAILF("free stack holds bad id %d", b);
        const kv_block *B = &kv->blk[b];
        if (mark[b]++) FAILF("block %d on the free stack twice", b);
        if (B->state != BLK_FREE || B->ref || B->pins || B->registered || B->copy_src >= 0)
            FAILF("free block %d: state %d ref %d pins %d registered %d copy_src %d", b,
                  B->state, B->ref, B->pins, B->registered, B->copy_src);
    }
    /* LRU */
    int32_t n_lru = 0, prev = -1;
    for (int32_t b = kv->lru_head; b >= 0; b = kv->blk[b].next) {
        if (b >= nb) FAILF("LRU holds bad id %d", b);
        const kv_block *B = &kv->blk[b];
        if (mark[b]++) FAILF("block %d on two lists or an LRU cycle", b);
        if (B->prev != prev) FAILF("LRU block %d: prev %d, expected %d", b, B->prev, prev);
        if (B->state != BLK_CACHED || B->ref || B->pins || !B->registered || B->copy_src >= 0)
            FAILF("evictable block %d: state %d ref %d pins %d registered %d", b, B->state,
                  B->ref, B->pins, B->registered);
        prev = b;
        n_lru++;
    }
    if (prev != kv->lru_tail) FAILF("LRU tail %d, expected %d", kv->lru_tail, prev);
    if (n_lru != kv->n_lru) FAILF("LRU length %d, recorded %d", n_lru, kv->n_lru);

    /* sequences */
    for (int32_t i = 0; i < n_live; i++) {
        const kv_seq *s = live[i];
        if (!s->blocks) FAILF("live seq %d has no table", i);
        if (s->n_tokens < 0 || s->n_tokens > kv->max_blocks_per_seq * bs)
            FAILF("seq %d: n_tokens %d", i, s->n_tokens);
        if (s->n_blocks != (s->n_tokens + bs - 1) / bs)
            FAILF("seq %d: %d blocks for %d tokens", i, s->n_blocks, s->n_tokens);
        if (s->n_hashed_blocks < 0 || s->n_hashed_blocks > s->n_tokens / bs ||
            (!kv->prefix_caching && s->n_hashed_blocks))
            FAILF("seq %d: n_hashed_blocks %d for %d tokens", i, s->n_hashed_blocks, s->n_tokens);
        uint64_t h = 0;
        for (int32_t k = 0; k < s->n_blocks; k++) {
            int32_t b = s->blocks[k];
            if (b < 0 || b >= nb) FAILF("seq %d: block[%d] = %d out of range", i, k, b);
            if (mark[b] == -(i + 1)) FAILF("seq %d holds block %d twice", i, b);
            if (mark[b] > 0) FAILF("seq %d holds block %d, which is free or evictable", i, b);
            mark[b] = -(i + 1);
            refs[b]++;
            if (k >= s->n_hashed_blocks) continue;
            const kv_block *B = &kv->blk[b];
            int32_t parent = k > 0 ? s->blocks[k - 1] : -1;
            if (!B->registered) FAILF("seq %d: hashed block[%d] = %d not registered", i, k, b);
            if (B->parent != parent || (parent >= 0 && B->parent_gen != kv->blk[parent].gen))
                FAILF("seq %d: block[%d] = %d has parent %d/gen %u, table has %d", i, k, b,
                      B->parent, B->parent_gen, parent);
            h = block_key(kv, h, kv->tokens + (size_t)b * bs);
            if (B->hash != h) FAILF("seq %d: block[%d] = %d key != its tokens' key", i, k, b);
        }
        if (s->last_hash != h) FAILF("seq %d: last_hash does not match its chain", i);
    }

    /* pending copies */
    int32_t n_pending = 0;
    for (int32_t i = 0; i < kv->n_copy_list; i++) {
        int32_t d = kv->copy_list[i];
        if (d < 0 || d >= nb || !kv->blk[d].in_copy_list) FAILF("copy list entry %d bad", d);
    }
    for (int32_t b = 0; b < nb; b++) {
        const kv_block *B = &kv->blk[b];
        if (B->copy_src < 0) continue;
        if (!B->in_copy_list) FAILF("block %d has a pending copy but is not listed", b);
        if (B->ref == 0 || B->registered)
            FAILF("copy dst %d: ref %d registered %d", b, B->ref, B->registered);
        if (kv->blk[B->copy_src].copy_src >= 0)
            FAILF("copy %d -> %d reads a pending dst", B->copy_src, b);
        pins[B->copy_src]++;
        n_pending++;
    }
    if (n_pending != kv->n_pending)
        FAILF("%d pending copies, recorded %d", n_pending, kv->n_pending);

    /* per block: refcounts, pins, states */
    int32_t n_used = 0, n_registered = 0;
    for (int32_t b = 0; b < nb; b++) {
        const kv_block *B = &kv->blk[b];
        if (B->ref != refs[b])
            FAILF("block %d: refcount %d, held by %d tables", b, B->ref, refs[b]);
        if (B->pins != pins[b])
            FAILF("block %d: %d pins, %d pending copies read it", b, B->pins, pins[b]);
        if (B->registered) n_registered++;
        if (B->ref > 0 || B->pins > 0) {
            if (B->state != BLK_USED) FAILF("held block %d in state %d", b, B->state);
            n_used++;
        } else if (mark[b] <= 0) {
            FAILF("block %d is unreferenced but on no list (leak)", b);
        }
    }
    if (kv->n_free + n_lru + n_used != nb)
        FAILF("free %d + evictable %d + used %d != pool %d", kv->n_free, n_lru, n_used, nb);

    /* hash table */
    if (n_registered != kv->n_registered)
        FAILF("%d registered, recorded %d", n_registered, kv->n_registered);
    if (!kv->prefix_caching && n_registered) FAILF("blocks registered with prefix caching off");
    memset(mark, 0, (size_t)nb * sizeof(int32_t));
    int32_t n_entries = 0;
    for (uint32_t i = 0; i <= kv->ht_mask; i++) {
        int32_t b = kv->ht[i].block;
        if (b < 0) continue;
        if (b >= nb) FAILF("hash slot %u holds bad id %d", i, b);
        if (mark[b]++) FAILF("block %d in the hash table twice", b);
        if (!kv->blk[b].registered || kv->blk[b].hash != kv->ht[i].hash)
            FAILF("hash slot %u: block %d not registered under this key", i, b);
        for (uint32_t j = (uint32_t)kv->ht[i].hash & kv->ht_mask; j != i; j = (j + 1) & kv->ht_mask)
            if (kv->ht[j].block < 0)
                FAILF("hash slot %u (block %d) unreachable from its home", i, b);
        n_entries++;
    }
    if (n_entries != n_registered)
        FAILF("%d hash entries for %d registered blocks", n_entries, n_registered);

out:
    free(refs);
    return rc;
}
