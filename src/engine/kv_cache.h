/* kv_cache.h — the paged KV block manager with prefix caching.
 *
 * What it does: owns the bookkeeping of the KV pool — block ids, each sequence's block
 * table, reference counts, the prefix cache (content hash -> block) and the LRU of
 * freed-but-cached blocks. It hands the engine slot numbers (block * block_size +
 * offset) for the batch descriptor and a list of copy-on-write block copies to run.
 * What it does not: hold K/V tensors (the backend owns them) or decide who runs or who
 * gets preempted (the scheduler does, using the check-then-act pairs below).
 *
 * Not thread-safe: the engine thread owns the kv_cache and every kv_seq.
 * All memory is allocated in kv_create and kv_seq_init; nothing on the step path
 * (match, alloc, commit, fork, free, truncate, take_copies) allocates.
 *
 * Block states. Every block is in exactly one of:
 *   free       on the free list; content meaningless, not in the prefix cache;
 *   used       held by >= 1 sequence table (refcount > 0), or the source of a pending
 *              copy-on-write copy that has not been taken yet (pinned);
 *   evictable  refcount 0, registered in the prefix cache, on the LRU list. A prefix
 *              match revives it; an allocation that finds the free list empty evicts
 *              the least recently freed one.
 *
 * Prefix-cache keys. A full block's key is hash(parent block's key, its block_size
 * token ids) with parent key 0 for block 0. A match also checks the block's stored
 * token ids and that its recorded parent is the very block just matched for the
 * previous position (same id, same generation), so a 64-bit hash collision can never
 * hand out KV computed for different tokens or a different prefix.
 *
 * Engine contract per step: kv_can_alloc_slots -> kv_alloc_slots for each scheduled
 * sequence (kv_match_prefix first on admission), kv_slot for the slot mapping,
 * kv_take_copies and backend copy_blocks, forward, then kv_commit with the tokens whose
 * KV is now final. */
#ifndef INFERD_KV_CACHE_H
#define INFERD_KV_CACHE_H
#include "../util/layer/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv_cache kv_cache;

/* One sequence's view. Caller-allocated; zero-initialized means empty and without a
 * table (kv_seq_init allocates the table). The kv_cache maintains every field; the
 * caller reads them (blocks/n_blocks go into the batch descriptor) but never writes. */
typedef struct kv_seq {
    int32_t *blocks;         /* [max_blocks_per_seq] block table, first n_blocks valid */
    int32_t n_blocks;        /* == ceil(n_tokens / block_size), always */
    int32_t n_tokens;        /* tokens with slots allocated (KV written or about to be) */
    int32_t n_hashed_blocks; /* leading full blocks registered in the prefix cache */
    uint64_t last_hash;      /* key of block n_hashed_blocks-1 (chain parent), 0 if none */
} kv_seq;

/* n_blocks: pool size; block_size: tokens per block; max_blocks_per_seq: table size
 * (longest sequence = max_blocks_per_seq * block_size tokens). prefix_caching false:
 * blocks are never registered nor matched. Returns 0, IFD_ERR_INVALID or
 * IFD_ERR_NOMEM; *out is NULL on failure. */
int kv_create(kv_cache **out, int32_t n_blocks, int32_t block_size, int32_t max_blocks_per_seq,
              bool prefix_caching);
/* Accepts NULL. Sequences must have been kv_seq_deinit'ed first (their tables are
 * theirs; the blocks they hold are simply forgotten). */
void kv_destroy(kv_cache *kv);

/* Test only: keep `bits` bits of each prefix-cache key, so that hash collisions are
 * common and the token and parent checks are exercised. Call before anything is
 * cached. */
void kv_debug_set_hash_bits(kv_cache *kv, int bits);

int32_t kv_block_size(const kv_cache *kv);
int32_t kv_max_blocks_per_seq(const kv_cache *kv);

/* Allocate s's table (max_blocks_per_seq entries); s becomes empty. 0 or IFD_ERR_NOMEM. */
int kv_seq_init(kv_cache *kv, kv_seq *s);
/* kv_free, then free the table; s is zeroed. Accepts a zeroed (never-initialized) s. */
void kv_seq_deinit(kv_cache *kv, kv_seq *s);

/* Admission of an empty sequence: reuse the longest run of leading cached full blocks
 * matching tokens[0..n), at most (n-1)/block_size blocks so at least one token is left
 * to compute (its logits are needed). Takes a reference on each matched block (an
 * evictable one leaves the LRU) and sets s->n_tokens to the matched token count, which
 * it returns. Counts n query tokens and the matched tokens in the stats (only when
 * prefix caching is on). If the remaining tokens then do not fit (kv_can_alloc_slots
 * false), kv_free gives the blocks back to the cache. */
int32_t kv_match_prefix(kv_cache *kv, kv_seq *s, const int32_t *tokens, int32_t n);

/* Blocks kv_alloc_slots(s, n_new) would take from the pool: new blocks plus one for a
 * copy-on-write of a shared partial last block. -1 if n_new < 0 or the sequence would
 * exceed max_blocks_per_seq. */
int32_t kv_blocks_needed(const kv_cache *kv, const kv_seq *s, int32_t n_new);
/* Blocks available to allocations: free + evictable. */
int32_t kv_n_available(const kv_cache *kv);

/* Check-then-act pair. kv_can_alloc_slots: would kv_alloc_slots(s, n_new) succeed?
 * kv_alloc_slots: make positions s->n_tokens .. s->n_tokens+n_new-1 writable, taking
 * free blocks first and evicting least-recently-freed cached blocks when the free list
 * is empty. If the write would land in a partial last block shared with another
 * sequence (after kv_fork or kv_truncate), the block is copied first: a fresh block
 * replaces it in s's table and the (src, dst) pair is queued for kv_take_copies. A
 * partial last block still in the prefix cache that only s holds (after kv_truncate)
 * leaves the cache instead.
 * All or nothing: returns 0, IFD_ERR_LIMIT (past max_blocks_per_seq), IFD_ERR_NOMEM
 * (pool exhausted) or IFD_ERR_INVALID (n_new < 0), changing nothing on error. */
bool kv_can_alloc_slots(const kv_cache *kv, const kv_seq *s, int32_t n_new);
int kv_alloc_slots(kv_cache *kv, kv_seq *s, int32_t n_new);

/* KV slot of position pos (< s->n_blocks * block_size): block * block_size + offset. */
int32_t kv_slot(const kv_cache *kv, const kv_seq *s, int32_t pos);

/* After a forward wrote the KV of tokens[0..n_computed) of s (n_computed <= n_tokens;
 * tokens is the sequence's whole token array): register each newly full block in the
 * prefix cache. Only KV that is final may be committed (after a speculative step, the
 * accepted tokens only). If an identical block (same key, tokens and parent) is
 * already cached and s holds the only reference to its own copy, s switches to the
 * cached block and its own goes back to the free list: no duplicate entry, one more
 * free block, and later blocks chain on the shared one. If s's copy is shared (a fork
 * that computed in step with its sibling), it is registered as a second entry under
 * the same key instead. So s->blocks[k] may change: build the step's block table
 * from s->blocks after the previous step's commits. No-op when prefix caching is off. */
void kv_commit(kv_cache *kv, kv_seq *s, const int32_t *tokens, int32_t n_computed);

/* child (empty; its table is allocated here if it has none) shares all of parent's
 * blocks (refcount++) and its n_tokens and hash chain. A later write into the shared
 * partial last block copies it (see kv_alloc_slots). 0, IFD_ERR_INVALID (child not
 * empty) or IFD_ERR_NOMEM. */
int kv_fork(kv_cache *kv, const kv_seq *parent, kv_seq *child);

/* Drop all of s's blocks, last block first (so the LRU evicts a sequence's tail before
 * its head). A block reaching refcount 0 becomes evictable if registered, else free.
 * s keeps its table and is empty. For finish, abort and preemption. */
void kv_free(kv_cache *kv, kv_seq *s);

/* Shorten s to n_tokens (0 <= n_tokens <= s->n_tokens): drop the blocks past the end,
 * shorten the hash chain. A cached block that becomes s's partial last block stays
 * cached (others may still match it) until s writes into it: then kv_alloc_slots
 * copies it if it is shared, or takes it out of the cache if s is its only holder. */
void kv_truncate(kv_cache *kv, kv_seq *s, int32_t n_tokens);

/* Take up to cap pending copy-on-write copies (whole blocks, src[i] -> dst[i]); call
 * again while it returns cap. Drain them all and run them (backend copy_blocks) after
 * the step's allocations and before its forward, with no kv_alloc_slots in between:
 * a taken copy's source is no longer protected from reuse. The copies of one drain
 * are independent (no dst is another's src), so they may run in any order or in
 * parallel. A copy whose destination was freed before the drain is dropped. */
int32_t kv_take_copies(kv_cache *kv, int32_t *src, int32_t *dst, int32_t cap);

typedef struct kv_stats {
    int32_t n_blocks;           /* pool size */
    int32_t n_free;             /* on the free list */
    int32_t n_used;             /* held by sequences or pinned by a pending copy */
    int32_t n_cached_evictable; /* refcount 0, in the prefix cache (LRU) */
    uint64_t prefix_queries_tokens; /* tokens offered to kv_match_prefix */
    uint64_t prefix_hits_tokens;    /* tokens it matched */
    uint64_t evictions;             /* cached blocks reclaimed by allocations */
} kv_stats;
void kv_get_stats(const kv_cache *kv, kv_stats *st);

/* Debug/test: verify every invariant — lists and states agree, free + used + evictable
 * == pool, each refcount == the number of tables among live[0..n_live) holding the
 * block (so live must be all sequences holding blocks), pinned blocks match the pending
 * copies, the hash table holds exactly the registered blocks and each is reachable,
 * each live sequence's hash chain is registered and linked. Allocates scratch (not for
 * the step path). Returns 0, or IFD_ERR_INTERNAL with a message in err. */
int kv_check(const kv_cache *kv, kv_seq *const *live, int32_t n_live, char *err,
             size_t err_bytes);

#endif
