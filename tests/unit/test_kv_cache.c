/* test_kv_cache.c — the KV block manager without a model: unit cases for prefix hits,
 * LRU eviction, copy-on-write, truncation and exhaustion, and a seeded property test
 * of random admissions, steps, forks, frees, preemptions and truncations that checks
 * kv_check and a shadow of the KV contents (token ids) after every operation. */
#include <stdint.h>

#include "engine/kv_cache.h"
#include "test_util.h"
#include "util/common.h"

/* ---- helpers -------------------------------------------------------------------------- */

static uint64_t t_rng_state;
static uint32_t rnd(void) { /* xorshift64* */
    t_rng_state ^= t_rng_state >> 12;
    t_rng_state ^= t_rng_state << 25;
    t_rng_state ^= t_rng_state >> 27;
    return (uint32_t)((t_rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static int32_t rnd_in(int32_t lo, int32_t hi) { /* [lo, hi] */
    return lo + (int32_t)(rnd() % (uint32_t)(hi - lo + 1));
}

static int check_ok(const kv_cache *kv, kv_seq *const *live, int32_t n) {
    char err[256] = "";
    int rc = kv_check(kv, live, n, err, sizeof(err));
    CHECKF(rc == 0, "kv_check: %s", err);
    return rc;
}

/* admit + compute a whole prompt in one step (no shadow) */
static int32_t run_prompt(kv_cache *kv, kv_seq *s, const int32_t *tok, int32_t n) {
    int32_t m = kv_match_prefix(kv, s, tok, n);
    CHECK(kv_alloc_slots(kv, s, n - m) == 0);
    kv_commit(kv, s, tok, n);
    return m;
}

static void fill(int32_t *tok, int32_t n, int32_t base) {
    for (int32_t i = 0; i < n; i++) tok[i] = base + i;
}

/* ---- unit cases --------------------------------------------------------------------- */

static void test_prefix_hit(void) {
    kv_cache *kv;
    CHECK(kv_create(&kv, 32, 4, 16, true) == 0);
    kv_seq a = {0}, b = {0}, c = {0}, d = {0};
    kv_seq_init(kv, &a), kv_seq_init(kv, &b), kv_seq_init(kv, &c), kv_seq_init(kv, &d);
    int32_t ta[14], tb[15];
    fill(ta, 14, 100);
    fill(tb, 15, 100);
    tb[12] = 7, tb[13] = 8, tb[14] = 9; /* shared 3-block prefix, different tail */

    CHECK(run_prompt(kv, &a, ta, 14) == 0);
    CHECK(a.n_hashed_blocks == 3 && a.n_tokens == 14 && a.n_blocks == 4);
    CHECK(run_prompt(kv, &b, tb, 15) == 12);
    for (int k = 0; k < 3; k++) CHECK(a.blocks[k] == b.blocks[k]);
    CHECK(a.blocks[3] != b.blocks[3]);
    kv_stats st;
    kv_get_stats(kv, &st);
    CHECK(st.prefix_queries_tokens == 29 && st.prefix_hits_tokens == 12);
    CHECK(st.n_used == 5 && st.n_free == 27);
    kv_seq *live[4] = {&a, &b};
    check_ok(kv, live, 2);

    /* full-prompt match leaves the last token to compute */
    CHECK(kv_match_prefix(kv, &c, ta, 12) == 8);
    kv_free(kv, &c);
    CHECK(kv_match_prefix(kv, &c, ta, 13) == 12);
    kv_free(kv, &c);
    CHECK(kv_match_prefix(kv, &c, ta, 1) == 0);
    CHECK(kv_match_prefix(kv, &c, ta, 0) == 0);

    /* a hit in the middle does not match the rest: same tokens after a different
     * block 0 hash differently (and the parent check backs that up) */
    int32_t tx[9];
    fill(tx, 9, 100);
    tx[0] = 1;
    CHECK(kv_match_prefix(kv, &c, tx, 9) == 0);

    /* after A and B finish, their blocks stay findable */
    kv_free(kv, &a);
    kv_free(kv, &b);
    kv_get_stats(kv, &st);
    CHECK(st.n_used == 0 && st.n_cached_evictable == 3 && st.n_free == 29); /* tails were partial */
    check_ok(kv, live, 0);
    CHECK(kv_match_prefix(kv, &c, tb, 15) == 12); /* A's partial block 4 was never cached */
    kv_get_stats(kv, &st);
    CHECK(st.n_used == 3 && st.n_cached_evictable == 0);
    live[0] = &c;
    check_ok(kv, live, 1);

    /* two requests computing the same prompt in one step: the second commit switches
     * to the cached blocks and frees its own copies */
    kv_free(kv, &c);
    int32_t tn[9];
    fill(tn, 9, 500);
    CHECK(kv_match_prefix(kv, &c, tn, 9) == 0);
    CHECK(kv_match_prefix(kv, &d, tn, 9) == 0);
    CHECK(kv_alloc_slots(kv, &c, 9) == 0 && kv_alloc_slots(kv, &d, 9) == 0);
    kv_get_stats(kv, &st);
    int32_t free_before = st.n_free;
    kv_commit(kv, &c, tn, 9);
    kv_commit(kv, &d, tn, 9);
    CHECK(c.blocks[0] == d.blocks[0] && c.blocks[1] == d.blocks[1] && c.blocks[2] != d.blocks[2]);
    kv_get_stats(kv, &st);
    CHECK(st.n_free == free_before + 2);
    live[0] = &c, live[1] = &d;
    check_ok(kv, live, 2);

    kv_seq_deinit(kv, &a), kv_seq_deinit(kv, &b), kv_seq_deinit(kv, &c), kv_seq_deinit(kv, &d);
    check_ok(kv, live, 0);
    kv_destroy(kv);
}

static void test_lru_eviction_order(void) {
    kv_cache *kv;
    CHECK(kv_create(&kv, 4, 4, 4, true) == 0);
    kv_seq a = {0}, b = {0}, c = {0};
    kv_seq_init(kv, &a), kv_seq_init(kv, &b), kv_seq_init(kv, &c);
    int32_t ta[9], tb[9], tc[16];
    fill(ta, 9, 10);
    fill(tb, 9, 20);
    fill(tc, 16, 30);
    run_prompt(kv, &a, ta, 8);
    run_prompt(kv, &b, tb, 8);
    int32_t a0 = a.blocks[0], a1 = a.blocks[1], b0 = b.blocks[0], b1 = b.blocks[1];
    kv_free(kv, &a); /* LRU: a1 a0 (a sequence's tail goes first) */
    kv_free(kv, &b); /* LRU: a1 a0 b1 b0 */
    kv_stats st;
    kv_get_stats(kv, &st);
    CHECK(st.n_free == 0 && st.n_cached_evictable == 4);

    /* touching B's blocks makes them most recent: LRU a1 a0 b1 b0 -> (match b) -> a1 a0,
     * free b -> a1 a0 b1 b0 again */
    CHECK(kv_match_prefix(kv, &b, tb, 9) == 8);
    kv_free(kv, &b);

    CHECK(kv_can_alloc_slots(kv, &c, 4));
    CHECK(kv_alloc_slots(kv, &c, 4) == 0);
    CHECK(c.blocks[0] == a1);
    kv_get_stats(kv, &st);
    CHECK(st.evictions == 1);
    CHECK(kv_match_prefix(kv, &a, ta, 9) == 4); /* a0 still cached, a1 gone */
    kv_free(kv, &a);                            /* LRU: b1 b0 a0 */
    CHECK(kv_alloc_slots(kv, &c, 4) == 0);
    CHECK(c.blocks[1] == b1);
    CHECK(kv_alloc_slots(kv, &c, 4) == 0);
    CHECK(c.blocks[2] == b0);
    CHECK(kv_match_prefix(kv, &b, tb, 9) == 0);
    CHECK(kv_match_prefix(kv, &a, ta, 9) == 4);
    CHECK(a.blocks[0] == a0);
    kv_get_stats(kv, &st);
    CHECK(st.evictions == 3 && st.n_used == 4 && st.n_cached_evictable == 0);
    kv_seq *live[2] = {&a, &c};
    check_ok(kv, live, 2);
    kv_seq_deinit(kv, &a), kv_seq_deinit(kv, &b), kv_seq_deinit(kv, &c);
    kv_destroy(kv);
}

static void test_cow_fork(void) {
    kv_cache *kv;
    CHECK(kv_create(&kv, 16, 4, 8, true) == 0);
    kv_seq a = {0}, b = {0}, c = {0}, d = {0};
    kv_seq_init(kv, &a);
    int32_t t[8];
    fill(t, 8, 40);
    run_prompt(kv, &a, t, 6); /* 1 full block + 2 tokens */
    CHECK(kv_fork(kv, &a, &b) == 0); /* allocates b's table */
    CHECK(b.n_tokens == 6 && b.n_blocks == 2 && b.blocks[1] == a.blocks[1]);
    CHECK(b.n_hashed_blocks == 1 && b.last_hash == a.last_hash);
    CHECK(kv_fork(kv, &a, &b) == IFD_ERR_INVALID); /* child not empty */
    kv_seq *live[4] = {&a, &b, &c, &d};
    check_ok(kv, live, 2);

    /* b writes into the shared partial block: copy-on-write */
    int32_t src[8], dst[8];
    CHECK(kv_blocks_needed(kv, &b, 1) == 1);
    CHECK(kv_alloc_slots(kv, &b, 1) == 0);
    CHECK(b.blocks[0] == a.blocks[0] && b.blocks[1] != a.blocks[1]);
    check_ok(kv, live, 2);
    /* and c, forked from b before the copy ran, copies from the original source */
    CHECK(kv_fork(kv, &b, &c) == 0);
    CHECK(kv_alloc_slots(kv, &c, 1) == 0);
    check_ok(kv, live, 3);
    /* a writes into its block, now its own: no copy */
    CHECK(kv_blocks_needed(kv, &a, 1) == 0);
    CHECK(kv_alloc_slots(kv, &a, 1) == 0);
    int32_t n = kv_take_copies(kv, src, dst, 8);
    CHECK(n == 2);
    CHECK(src[0] == a.blocks[1] && dst[0] == b.blocks[1]);
    CHECK(src[1] == a.blocks[1] && dst[1] == c.blocks[1]);
    CHECK(kv_take_copies(kv, src, dst, 8) == 0);
    check_ok(kv, live, 3);

    /* a copy whose destination is freed before the drain is cancelled */
    CHECK(kv_fork(kv, &a, &d) == 0);
    CHECK(kv_alloc_slots(kv, &d, 1) == 0);
    check_ok(kv, live, 4);
    kv_free(kv, &d);
    check_ok(kv, live, 3);
    CHECK(kv_take_copies(kv, src, dst, 8) == 0);

    /* the source of a pending copy stays out of the pool until the copy is taken */
    CHECK(kv_fork(kv, &a, &d) == 0);
    CHECK(kv_alloc_slots(kv, &d, 1) == 0);
    int32_t pinned = a.blocks[1];
    kv_free(kv, &a); /* nobody holds a's partial block now, but d's copy still reads it */
    kv_stats st;
    kv_get_stats(kv, &st);
    live[0] = &b, live[1] = &c, live[2] = &d;
    check_ok(kv, live, 3);
    int32_t used_before = st.n_used;
    CHECK(kv_take_copies(kv, src, dst, 1) == 1 && src[0] == pinned && dst[0] == d.blocks[1]);
    kv_get_stats(kv, &st);
    CHECK(st.n_used == used_before - 1);
    check_ok(kv, live, 3);

    /* fork at a block boundary: no copy needed */
    kv_seq_deinit(kv, &b), kv_seq_deinit(kv, &c), kv_seq_deinit(kv, &d);
    run_prompt(kv, &a, t, 8);
    CHECK(kv_fork(kv, &a, &b) == 0);
    CHECK(kv_blocks_needed(kv, &b, 1) == 1 && kv_alloc_slots(kv, &b, 1) == 0);
    CHECK(kv_alloc_slots(kv, &a, 1) == 0);
    CHECK(kv_take_copies(kv, src, dst, 8) == 0);
    live[0] = &a, live[1] = &b;
    check_ok(kv, live, 2);
    kv_seq_deinit(kv, &a), kv_seq_deinit(kv, &b);
    check_ok(kv, live, 0);
    kv_get_stats(kv, &st);
    CHECK(st.n_used == 0);
    kv_destroy(kv);
}

static void test_truncate(void) {
    kv_cache *kv;
    CHECK(kv_create(&kv, 16, 4, 8, true) == 0);
    kv_seq a = {0}, b = {0}, c = {0};
    kv_seq_init(kv, &a), kv_seq_init(kv, &c);
    int32_t t[16];
    fill(t, 16, 70);
    run_prompt(kv, &a, t, 10);
    CHECK(a.n_hashed_blocks == 2);
    uint64_t h1 = a.last_hash;
    int32_t b1 = a.blocks[1];
    kv_truncate(kv, &a, 6); /* into the registered block 1, held only by a */
    CHECK(a.n_tokens == 6 && a.n_blocks == 2 && a.n_hashed_blocks == 1 && a.last_hash != h1);
    kv_seq *live[3] = {&a, &b, &c};
    check_ok(kv, live, 1);
    CHECK(kv_match_prefix(kv, &c, t, 9) == 8); /* block 1 is still cached, now shared */
    kv_free(kv, &c);
    t[6] = 999; /* speculative rollback: a different token follows */
    CHECK(kv_blocks_needed(kv, &a, 4) == 1);
    CHECK(kv_alloc_slots(kv, &a, 4) == 0);
    CHECK(a.blocks[1] == b1); /* only a held it: no copy, it left the cache */
    CHECK(kv_match_prefix(kv, &c, t, 9) == 4);
    kv_free(kv, &c);
    check_ok(kv, live, 1);
    kv_commit(kv, &a, t, 10);
    CHECK(a.n_hashed_blocks == 2);
    CHECK(kv_match_prefix(kv, &c, t, 9) == 8);
    kv_free(kv, &c);

    /* truncating into a block that another sequence holds keeps it cached and copies it
     * on the next write */
    CHECK(kv_fork(kv, &a, &b) == 0);
    int32_t shared = a.blocks[1];
    kv_truncate(kv, &b, 5);
    CHECK(b.n_blocks == 2 && b.blocks[1] == shared && b.n_hashed_blocks == 1);
    CHECK(kv_blocks_needed(kv, &b, 1) == 1);
    CHECK(kv_alloc_slots(kv, &b, 1) == 0 && b.blocks[1] != shared);
    int32_t src[4], dst[4];
    CHECK(kv_take_copies(kv, src, dst, 4) == 1 && src[0] == shared && dst[0] == b.blocks[1]);
    CHECK(kv_match_prefix(kv, &c, t, 9) == 8 && c.blocks[1] == shared);
    check_ok(kv, live, 3);
    kv_truncate(kv, &c, 0);
    CHECK(c.n_blocks == 0 && c.n_hashed_blocks == 0 && c.last_hash == 0);
    check_ok(kv, live, 3);
    kv_seq_deinit(kv, &a), kv_seq_deinit(kv, &b), kv_seq_deinit(kv, &c);
    check_ok(kv, live, 0);
    kv_destroy(kv);
}

/* Two sequences computing the same blocks in one step, one of them forked before its
 * commit: the first commit registers, the second finds its copy shared (refcount 2)
 * and registers it under the same key, the fork's commit finds it registered. */
static void test_commit_shared(void) {
    kv_cache *kv;
    CHECK(kv_create(&kv, 16, 4, 8, true) == 0);
    kv_seq x = {0}, a = {0}, b = {0}, c = {0};
    kv_seq_init(kv, &x), kv_seq_init(kv, &a), kv_seq_init(kv, &c);
    int32_t t[9];
    fill(t, 9, 300);
    CHECK(kv_alloc_slots(kv, &x, 9) == 0 && kv_alloc_slots(kv, &a, 9) == 0);
    CHECK(kv_fork(kv, &a, &b) == 0);
    kv_commit(kv, &x, t, 9);
    kv_commit(kv, &a, t, 9);
    kv_commit(kv, &b, t, 9);
    CHECK(a.n_hashed_blocks == 2 && b.n_hashed_blocks == 2 && a.last_hash == x.last_hash);
    CHECK(a.blocks[0] != x.blocks[0] && a.blocks[0] == b.blocks[0]);
    kv_seq *live[4] = {&x, &a, &b, &c};
    check_ok(kv, live, 3);
    kv_free(kv, &x);
    CHECK(kv_match_prefix(kv, &c, t, 9) == 8);
    kv_free(kv, &a);
    kv_free(kv, &b);
    check_ok(kv, live + 3, 1);
    kv_free(kv, &c);
    kv_stats st;
    kv_get_stats(kv, &st);
    CHECK(st.n_cached_evictable == 4 && st.n_used == 0);
    check_ok(kv, live, 0);
    kv_seq_deinit(kv, &x), kv_seq_deinit(kv, &a), kv_seq_deinit(kv, &b), kv_seq_deinit(kv, &c);
    kv_destroy(kv);
}

/* With every key colliding, matches still need equal tokens and the same parent. */
static void test_hash_collisions(void) {
    kv_cache *kv;
    CHECK(kv_create(&kv, 32, 4, 8, true) == 0);
    kv_debug_set_hash_bits(kv, 0);
    kv_seq a = {0}, b = {0}, c = {0};
    kv_seq_init(kv, &a), kv_seq_init(kv, &b), kv_seq_init(kv, &c);
    int32_t ta[13], tb[13], tc[13];
    fill(ta, 13, 0);
    fill(tb, 13, 0);
    tb[1] = 99;                  /* block 0 differs, blocks 1-2 equal to a's */
    for (int i = 0; i < 13; i++) /* block 0 equal, block 1 = a's block 2 */
        tc[i] = i < 4 ? ta[i] : ta[i + 4 < 13 ? i + 4 : i];
    CHECK(run_prompt(kv, &a, ta, 13) == 0);
    CHECK(run_prompt(kv, &b, tb, 13) == 0);
    CHECK(run_prompt(kv, &c, tc, 13) == 4);
    kv_seq *live[3] = {&a, &b, &c};
    check_ok(kv, live, 3);
    kv_free(kv, &a), kv_free(kv, &b), kv_free(kv, &c);
    CHECK(kv_match_prefix(kv, &a, ta, 13) == 12);
    CHECK(kv_match_prefix(kv, &b, tb, 13) == 12);
    CHECK(a.blocks[1] != b.blocks[1] && a.blocks[2] != b.blocks[2]);
    check_ok(kv, live, 2);
    kv_seq_deinit(kv, &a), kv_seq_deinit(kv, &b), kv_seq_deinit(kv, &c);
    kv_destroy(kv);
}

static void test_disabled_prefix_caching(void) {
    kv_cache *kv;
    CHECK(kv_create(&kv, 16, 4, 8, false) == 0);
    kv_seq a = {0}, b = {0};
    kv_seq_init(kv, &a), kv_seq_init(kv, &b);
    int32_t t[12];
    fill(t, 12, 5);
    CHECK(run_prompt(kv, &a, t, 12) == 0);
    CHECK(a.n_hashed_blocks == 0);
    CHECK(run_prompt(kv, &b, t, 12) == 0);
    for (int k = 0; k < 3; k++) CHECK(a.blocks[k] != b.blocks[k]);
    kv_free(kv, &a);
    CHECK(kv_match_prefix(kv, &a, t, 12) == 0);
    kv_stats st;
    kv_get_stats(kv, &st);
    CHECK(st.prefix_hits_tokens == 0 && st.prefix_queries_tokens == 0);
    CHECK(st.n_cached_evictable == 0 && st.n_free == 13 && st.n_used == 3);
    kv_seq *live[1] = {&b};
    check_ok(kv, live, 1);
    kv_seq_deinit(kv, &a), kv_seq_deinit(kv, &b);
    kv_destroy(kv);
}

static void test_exhaustion(void) {
    kv_cache *kv;
    CHECK(kv_create(&kv, 4, 4, 3, true) == 0);
    kv_seq a = {0}, b = {0}, c = {0};
    kv_seq_init(kv, &a), kv_seq_init(kv, &b), kv_seq_init(kv, &c);
    kv_seq *live[3] = {&a, &b, &c};
    CHECK(kv_alloc_slots(kv, &a, 12) == 0);
    CHECK(!kv_can_alloc_slots(kv, &a, 1)); /* past max_blocks_per_seq */
    CHECK(kv_alloc_slots(kv, &a, 1) == IFD_ERR_LIMIT);
    CHECK(kv_blocks_needed(kv, &a, 1) == -1);
    CHECK(!kv_can_alloc_slots(kv, &b, 8));
    kv_stats st0, st;
    kv_get_stats(kv, &st0);
    CHECK(kv_alloc_slots(kv, &b, 8) == IFD_ERR_NOMEM);
    CHECK(b.n_tokens == 0 && b.n_blocks == 0);
    kv_get_stats(kv, &st);
    CHECK(memcmp(&st, &st0, sizeof(st)) == 0);
    CHECK(kv_alloc_slots(kv, &b, -1) == IFD_ERR_INVALID && !kv_can_alloc_slots(kv, &b, -1));
    CHECK(kv_can_alloc_slots(kv, &b, 0) && kv_alloc_slots(kv, &b, 0) == 0);
    CHECK(kv_can_alloc_slots(kv, &b, 2) && kv_alloc_slots(kv, &b, 2) == 0);
    check_ok(kv, live, 2);
    /* the pool is full: b can still fill its partial block */
    CHECK(kv_can_alloc_slots(kv, &b, 2) && !kv_can_alloc_slots(kv, &b, 3));
    /* a fork of b cannot write: its copy-on-write needs a block */
    CHECK(kv_fork(kv, &b, &c) == 0);
    CHECK(kv_blocks_needed(kv, &c, 1) == 1 && !kv_can_alloc_slots(kv, &c, 1));
    CHECK(kv_alloc_slots(kv, &c, 1) == IFD_ERR_NOMEM);
    CHECK(c.blocks[0] == b.blocks[0] && c.n_tokens == 2);
    int32_t src[2], dst[2];
    CHECK(kv_take_copies(kv, src, dst, 2) == 0);
    check_ok(kv, live, 3);
    kv_free(kv, &a);
    CHECK(kv_can_alloc_slots(kv, &c, 1) && kv_alloc_slots(kv, &c, 1) == 0);
    CHECK(kv_take_copies(kv, src, dst, 2) == 1);
    check_ok(kv, live, 3);
    kv_free(kv, &b), kv_free(kv, &c);
    kv_get_stats(kv, &st);
    CHECK(st.n_free + st.n_cached_evictable == 4 && st.n_used == 0);
    check_ok(kv, live, 0);
    kv_seq_deinit(kv, &a), kv_seq_deinit(kv, &b), kv_seq_deinit(kv, &c);
    kv_destroy(kv);

    /* bad arguments */
    CHECK(kv_create(&kv, 0, 4, 4, true) == IFD_ERR_INVALID && kv == NULL);
    CHECK(kv_create(&kv, 4, 0, 4, true) == IFD_ERR_INVALID);
    CHECK(kv_create(&kv, 1 << 20, 1 << 12, 4, true) == IFD_ERR_INVALID);
    kv_destroy(NULL);
}

/* ---- property test ------------------------------------------------------------------- */

#define P_NSEQ 16
#define P_MAXT 96
#define P_NTEMPL 4

enum { PS_EMPTY, PS_RUNNING, PS_WAITING };

typedef struct pseq {
    kv_seq kv;
    int state;
    int32_t len;   /* tokens the sequence will have */
    int32_t done;  /* tokens computed (== kv.n_tokens while running, between steps) */
    int32_t known; /* waiting: tokens to offer kv_match_prefix on (re)admission */
    int32_t tok[P_MAXT];
} pseq;

typedef struct prop {
    kv_cache *kv;
    int32_t bs, n_blocks, maxt;
    int32_t *shadow; /* [n_blocks * bs] simulated KV: the token id written to each slot */
    int32_t templ[P_NTEMPL][P_MAXT];
    pseq seq[P_NSEQ];
    uint64_t n_copies, n_fail_checked;
} prop;

static void p_gen_tokens(prop *p, pseq *q, int32_t from) {
    int binary = rnd() % 4 == 0; /* tiny vocabulary: equal blocks behind different prefixes */
    int t = rnd_in(0, P_NTEMPL - 1);
    int32_t shared = rnd_in(0, p->maxt);
    for (int32_t i = from; i < p->maxt; i++)
        q->tok[i] = binary ? (int32_t)(rnd() % 2)
                    : i < shared ? p->templ[t][i] : (int32_t)(rnd() % 1000);
}

/* kv_check + every running sequence's positions read back their own tokens */
static int p_verify(prop *p) {
    kv_seq *live[P_NSEQ];
    int32_t n = 0;
    for (int i = 0; i < P_NSEQ; i++) {
        pseq *q = &p->seq[i];
        if (q->state == PS_RUNNING) live[n++] = &q->kv;
        else if (q->kv.n_blocks || q->kv.n_tokens) {
            CHECKF(0, "seq %d not running but holds %d blocks", i, q->kv.n_blocks);
            return -1;
        }
    }
    if (check_ok(p->kv, live, n)) return -1;
    return 0;
}

static int p_verify_contents(prop *p) {
    for (int i = 0; i < P_NSEQ; i++) {
        pseq *q = &p->seq[i];
        if (q->state != PS_RUNNING) continue;
        if (q->kv.n_tokens != q->done) {
            CHECKF(0, "seq %d: kv n_tokens %d, computed %d", i, q->kv.n_tokens, q->done);
            return -1;
        }
        for (int32_t pos = 0; pos < q->done; pos++) {
            int32_t v = p->shadow[kv_slot(p->kv, &q->kv, pos)];
            if (v != q->tok[pos]) {
                CHECKF(0, "seq %d pos %d: KV holds token %d, sequence has %d", i, pos, v,
                       q->tok[pos]);
                return -1;
            }
        }
    }
    return 0;
}

/* Drain pending copies (in small pieces) into the shadow, checking independence. */
static int p_drain(prop *p) {
    int32_t src[64], dst[64], n_all = 0, cap = rnd_in(1, 4);
    for (;;) {
        int32_t n = kv_take_copies(p->kv, src + n_all, dst + n_all, cap);
        n_all += n;
        if (n < cap) break;
        if (n_all + cap > 64) {
            CHECKF(0, "too many pending copies");
            return -1;
        }
    }
    for (int32_t i = 0; i < n_all; i++)
        for (int32_t j = 0; j < n_all; j++)
            if (dst[i] == src[j] || (i != j && dst[i] == dst[j])) {
                CHECKF(0, "copies not independent: %d->%d, %d->%d", src[i], dst[i], src[j], dst[j]);
                return -1;
            }
    for (int32_t i = 0; i < n_all; i++)
        memcpy(p->shadow + (size_t)dst[i] * p->bs, p->shadow + (size_t)src[i] * p->bs,
               (size_t)p->bs * sizeof(int32_t));
    p->n_copies += (uint64_t)n_all;
    return 0;
}

/* can_alloc -> alloc; checks the pair agrees and blocks_needed is exact. */
static bool p_alloc(prop *p, pseq *q, int32_t n_new) {
    kv_stats before, after;
    kv_get_stats(p->kv, &before);
    int32_t need = kv_blocks_needed(p->kv, &q->kv, n_new);
    bool can = kv_can_alloc_slots(p->kv, &q->kv, n_new);
    if (!can && rnd() % 2 == 0) return false;
    int rc = kv_alloc_slots(p->kv, &q->kv, n_new);
    kv_get_stats(p->kv, &after);
    if (!can) {
        CHECKF(rc == IFD_ERR_NOMEM || rc == IFD_ERR_LIMIT, "alloc after can_alloc false: %d", rc);
        CHECK(memcmp(&before, &after, sizeof(before)) == 0);
        p->n_fail_checked++;
        return false;
    }
    CHECKF(rc == 0, "alloc after can_alloc true: %d", rc);
    int32_t took = (before.n_free + before.n_cached_evictable) -
                   (after.n_free + after.n_cached_evictable);
    CHECKF(took == need, "alloc took %d blocks, blocks_needed said %d", took, need);
    return rc == 0;
}

static pseq *p_pick(prop *p, int state) {
    int start = rnd_in(0, P_NSEQ - 1);
    for (int i = 0; i < P_NSEQ; i++) {
        pseq *q = &p->seq[(start + i) % P_NSEQ];
        if (q->state == state) return q;
    }
    return NULL;
}

static int32_t p_chunk(pseq *q) {
    int32_t left = q->len - q->done;
    if (left <= 0) return 0;
    return IFD_MIN(left, rnd() % 3 == 0 ? 1 : rnd_in(1, 24));
}

/* One engine step over a random subset of running sequences: alloc, maybe abort some
 * before the forward, drain copies, "forward" (write the shadow), commit. */
static int p_step(prop *p) {
    pseq *batch[P_NSEQ];
    int32_t from[P_NSEQ], n_new[P_NSEQ], nb = 0;
    for (int i = 0; i < P_NSEQ; i++) {
        pseq *q = &p->seq[i];
        if (q->state != PS_RUNNING || rnd() % 2) continue;
        int32_t c = p_chunk(q);
        if (c == 0) continue;
        if (!p_alloc(p, q, c)) {
            /* out of blocks: preempt a random running sequence (maybe one already in
             * this batch: it is dropped before the forward) */
            if (rnd() % 2) {
                pseq *v = p_pick(p, PS_RUNNING);
                if (v && v != q) {
                    kv_free(p->kv, &v->kv);
                    v->state = PS_WAITING;
                    v->known = IFD_MAX(v->done, 1);
                    v->done = 0;
                    for (int j = 0; j < nb; j++)
                        if (batch[j] == v) batch[j] = NULL;
                }
            }
            if (p_verify(p)) return -1;
            continue;
        }
        batch[nb] = q, from[nb] = q->done, n_new[nb] = c, nb++;
        if (p_verify(p)) return -1;
        if (rnd() % 20 == 0) { /* abort a batch member before the forward */
            int j = rnd_in(0, nb - 1);
            if (batch[j]) {
                kv_free(p->kv, &batch[j]->kv);
                batch[j]->state = PS_EMPTY;
                batch[j] = NULL;
                if (p_verify(p)) return -1;
            }
        }
    }
    if (p_drain(p)) return -1;
    for (int j = 0; j < nb; j++) {
        pseq *q = batch[j];
        if (!q) continue;
        for (int32_t pos = from[j]; pos < from[j] + n_new[j]; pos++)
            p->shadow[kv_slot(p->kv, &q->kv, pos)] = q->tok[pos];
    }
    for (int j = 0; j < nb; j++) {
        pseq *q = batch[j];
        if (!q) continue;
        q->done = from[j] + n_new[j];
        kv_commit(p->kv, &q->kv, q->tok, q->done);
        if (p_verify(p)) return -1;
    }
    return p_verify_contents(p);
}

/* Admit an empty or waiting sequence: match, then compute its first chunk. */
static int p_admit(prop *p) {
    pseq *q = rnd() % 2 ? p_pick(p, PS_WAITING) : NULL;
    if (!q) {
        q = p_pick(p, PS_EMPTY);
        if (!q) return 0;
        p_gen_tokens(p, q, 0);
        q->len = rnd_in(1, p->maxt);
        q->known = rnd_in(1, q->len); /* the prompt */
        q->done = 0;
    }
    int32_t m = kv_match_prefix(p->kv, &q->kv, q->tok, q->known);
    CHECKF(m >= 0 && m % p->bs == 0 && (m == 0 || m <= q->known - 1), "matched %d of %d", m,
           q->known);
    q->state = PS_RUNNING;
    q->done = m;
    if (p_verify(p) || p_verify_contents(p)) return -1;
    int32_t c = IFD_MIN(q->known - m, 24);
    if (c > 0 && !p_alloc(p, q, c)) { /* does not fit: back to waiting */
        kv_free(p->kv, &q->kv);
        q->state = PS_WAITING;
        q->done = 0;
        return p_verify(p);
    }
    if (p_drain(p)) return -1;
    for (int32_t pos = m; pos < m + c; pos++) p->shadow[kv_slot(p->kv, &q->kv, pos)] = q->tok[pos];
    q->done = m + c;
    kv_commit(p->kv, &q->kv, q->tok, q->done);
    if (p_verify(p)) return -1;
    return p_verify_contents(p);
}

static int p_op(prop *p) {
    int r = rnd_in(0, 99);
    if (getenv("KV_TRACE")) {
        fprintf(stderr, "op r=%d:", r);
        for (int i = 0; i < P_NSEQ; i++) {
            pseq *x = &p->seq[i];
            if (x->state == PS_EMPTY) continue;
            fprintf(stderr, " [%d %c done %d len %d blk", i, x->state == PS_RUNNING ? 'R' : 'W',
                    x->done, x->len);
            for (int k = 0; k < x->kv.n_blocks; k++) fprintf(stderr, " %d", x->kv.blocks[k]);
            fprintf(stderr, " h%d]", x->kv.n_hashed_blocks);
        }
        fprintf(stderr, "\n");
    }
    pseq *q;
    if (r < 15) return p_admit(p);
    if (r < 55) return p_step(p);
    if (r < 65) { /* fork */
        q = p_pick(p, PS_RUNNING);
        pseq *c = p_pick(p, PS_EMPTY);
        if (!q || !c) return 0;
        CHECK(kv_fork(p->kv, &q->kv, &c->kv) == 0);
        memcpy(c->tok, q->tok, sizeof(c->tok));
        if (rnd() % 2) p_gen_tokens(p, c, q->done); /* diverge after the fork point */
        c->len = rnd_in(q->done > 0 ? q->done : 1, p->maxt);
        c->done = q->done;
        c->known = q->done;
        c->state = PS_RUNNING;
    } else if (r < 75) { /* finish or abort */
        if (!(q = p_pick(p, PS_RUNNING))) return 0;
        if (rnd() % 2) kv_free(p->kv, &q->kv);
        else kv_seq_deinit(p->kv, &q->kv), kv_seq_init(p->kv, &q->kv);
        q->state = PS_EMPTY;
    } else if (r < 85) { /* preempt: recompute later */
        if (!(q = p_pick(p, PS_RUNNING))) return 0;
        kv_free(p->kv, &q->kv);
        q->state = PS_WAITING;
        q->known = IFD_MAX(q->done, 1);
        q->done = 0;
    } else if (r < 95) { /* truncate: speculative rollback or recompute */
        if (!(q = p_pick(p, PS_RUNNING))) return 0;
        int32_t n = rnd_in(0, q->done);
        kv_truncate(p->kv, &q->kv, n);
        q->done = n;
        if (rnd() % 2) p_gen_tokens(p, q, n);
    } else { /* a waiting sequence gives up */
        if (!(q = p_pick(p, PS_WAITING))) return 0;
        q->state = PS_EMPTY;
    }
    if (p_verify(p)) return -1;
    return p_verify_contents(p);
}

/* hash_bits < 64 forces prefix-cache key collisions (0: every key collides). */
static void run_property(uint64_t seed, int32_t n_blocks, int32_t bs, int32_t max_blocks,
                         bool prefix, int hash_bits, int n_ops) {
    prop p;
    memset(&p, 0, sizeof(p));
    t_rng_state = seed;
    p.bs = bs;
    p.n_blocks = n_blocks;
    p.maxt = IFD_MIN(P_MAXT, max_blocks * bs);
    CHECK(kv_create(&p.kv, n_blocks, bs, max_blocks, prefix) == 0);
    kv_debug_set_hash_bits(p.kv, hash_bits);
    p.shadow = malloc((size_t)n_blocks * bs * sizeof(int32_t));
    for (int32_t i = 0; i < n_blocks * bs; i++) p.shadow[i] = -1;
    for (int t = 0; t < P_NTEMPL; t++)
        for (int i = 0; i < P_MAXT; i++) p.templ[t][i] = (int32_t)(rnd() % 1000);
    for (int i = 0; i < P_NSEQ; i++) kv_seq_init(p.kv, &p.seq[i].kv);

    int op = 0;
    for (; op < n_ops; op++)
        if (p_op(&p)) break;
    CHECKF(op == n_ops, "seed %llu bs %d prefix %d: failed at op %d", (unsigned long long)seed,
           bs, prefix, op);

    kv_stats st;
    kv_get_stats(p.kv, &st);
    printf("  bs %2d pool %3d prefix %d key bits %2d: %d ops, hits %llu/%llu tokens, "
           "%llu evictions, %llu copies, %llu failed allocs checked\n",
           bs, n_blocks, prefix, hash_bits, op, (unsigned long long)st.prefix_hits_tokens,
           (unsigned long long)st.prefix_queries_tokens, (unsigned long long)st.evictions,
           (unsigned long long)p.n_copies, (unsigned long long)p.n_fail_checked);
    if (prefix) CHECK(st.prefix_hits_tokens > 0 && st.evictions > 0);
    else CHECK(st.prefix_hits_tokens == 0 && st.n_cached_evictable == 0);
    if (bs > 1) CHECK(p.n_copies > 0);
    CHECK(p.n_fail_checked > 0);

    for (int i = 0; i < P_NSEQ; i++) {
        kv_seq_deinit(p.kv, &p.seq[i].kv);
        p.seq[i].state = PS_EMPTY;
    }
    p_verify(&p);
    kv_get_stats(p.kv, &st);
    CHECK(st.n_used == 0 && st.n_free + st.n_cached_evictable == n_blocks);
    free(p.shadow);
    kv_destroy(p.kv);
}

static void test_property(void) {
    run_property(1, 96, 4, 24, true, 64, 20000);
    run_property(2, 40, 16, 6, true, 64, 5000);
    run_property(3, 200, 1, 96, true, 64, 5000);
    run_property(4, 64, 4, 24, false, 64, 5000);
    run_property(5, 128, 3, 32, true, 64, 5000);
}

/* The same with colliding keys: hits must come from the token and parent checks. */
static void test_property_collisions(void) {
    run_property(6, 96, 4, 24, true, 3, 10000);
    run_property(7, 96, 2, 48, true, 0, 5000);
    run_property(8, 200, 1, 96, true, 2, 5000);
}

TEST_MAIN(T(test_prefix_hit), T(test_lru_eviction_order), T(test_cow_fork), T(test_truncate),
          T(test_commit_shared), T(test_hash_collisions), T(test_disabled_prefix_caching),
          T(test_exhaustion), T(test_property), T(test_property_collisions))
