/* test_scheduler.c — the scheduler with the KV block manager alone, no model: a fake
 * backend runs each plan. The fake backend keeps a KV pool of (token, position) per
 * slot: each planned token writes its slot, and every position a sequence attends to
 * (0 .. n_computed + fed) must hold that sequence's token at that position — so
 * prefix-cache hits, forks, copy-on-write copies and preemption are all checked to
 * hand a sequence exactly its own KV. It "samples" a token that is a function of the
 * sequence's tokens (the same for forks that share a prompt, different per choice).
 *
 * Cases: decode-first ordering, the token budget, chunking of a long prompt,
 * preemption victim choice (most recently admitted), priority ordering, max_num_seqs
 * with forks (n > 1), the time budget (mixed steps vs prefill-only steps) and the cost
 * model, prefill bursts (decodes paused at most once per stall_every decodes),
 * prompt-logprob rows (every prompt token, within max_logits, no prefix hit), giving up
 * on a sequence the pool cannot hold, and speculative decoding (random drafts verified
 * and rolled back under preemption, prefix sharing and forks). */
#include "engine/kv_cache.h"
#include "engine/scheduler.h"
#include "test_util.h"
#include "util/common.h"

#define MAXLEN 512

/* a local generator: the test needs nothing of the engine but the scheduler */
typedef struct t_rng {
    uint64_t s;
} t_rng;
static void t_seed(t_rng *r, uint64_t seed) { r->s = seed * 0x9e3779b97f4a7c15ull + 1; }
static uint64_t t_next(t_rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

typedef struct fseq {
    sched_seq ss;
    int32_t toks[MAXLEN];
    int32_t max_new, n_gen, choice;
    bool done;
} fseq;

typedef struct world {
    kv_cache *kv;
    sched s;
    int32_t bs, n_slots;
    int32_t *slot_tok, *slot_pos; /* fake KV pool */
    int32_t cs[64], cd[64];
} world;

static bool world_init(world *w, int32_t n_blocks, int32_t bs, int32_t max_seqs, int32_t max_tokens,
                       int32_t max_logits, bool prefix) {
    memset(w, 0, sizeof *w);
    w->bs = bs;
    w->n_slots = n_blocks * bs;
    if (kv_create(&w->kv, n_blocks, bs, MAXLEN / bs, prefix)) return false;
    const sched_config c = {.max_num_seqs = max_seqs,
                            .max_num_batched_tokens = max_tokens,
                            .max_logits = max_logits,
                            .min_prefill_tokens = 4};
    if (sched_init(&w->s, &c, w->kv)) return false;
    w->slot_tok = malloc((size_t)w->n_slots * sizeof(int32_t));
    w->slot_pos = malloc((size_t)w->n_slots * sizeof(int32_t));
    for (int32_t i = 0; i < w->n_slots; i++) w->slot_tok[i] = w->slot_pos[i] = -1;
    return true;
}

static void world_deinit(world *w, fseq *seqs, int n) {
    for (int i = 0; i < n; i++) sched_remove(&w->s, &seqs[i].ss);
    sched_deinit(&w->s);
    kv_destroy(w->kv);
    free(w->slot_tok);
    free(w->slot_pos);
}

static void fseq_init(fseq *f, int32_t n_prompt, int32_t prio, uint64_t arrival, uint32_t seed,
                      int32_t max_new) {
    memset(f, 0, sizeof *f);
    t_rng r;
    t_seed(&r, seed);
    for (int32_t i = 0; i < n_prompt; i++) f->toks[i] = 1 + (int32_t)(t_next(&r) % 997);
    f->ss.tokens = f->toks;
    f->ss.n_tokens = f->ss.n_prompt = n_prompt;
    f->ss.priority = prio;
    f->ss.arrival = arrival;
    f->max_new = max_new;
}

/* a child of parent: the same prompt, its own choice index */
static void fseq_child(fseq *c, const fseq *parent, int32_t choice) {
    fseq_init(c, parent->ss.n_prompt, parent->ss.priority, parent->ss.arrival, 0, parent->max_new);
    memcpy(c->toks, parent->toks, (size_t)parent->ss.n_prompt * sizeof(int32_t));
    c->choice = choice;
}

static int32_t fake_sample(const fseq *f) {
    uint64_t h = 1469598103934665603ull + (uint64_t)f->choice * 7919;
    for (int32_t i = 0; i < f->ss.n_tokens; i++) h = (h ^ (uint64_t)f->toks[i]) * 1099511628211ull;
    return 1 + (int32_t)(h % 997);
}

/* The fake backend: copies, then write and check the KV of each entry. Checks the
 * plan's bounds and its logits rows (contiguous, in order, one row per token at most). */
static void fake_forward(world *w, const sched_plan *p) {
    int32_t n;
    while ((n = kv_take_copies(w->kv, w->cs, w->cd, 64)) > 0)
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = 0; j < w->bs; j++) {
                w->slot_tok[w->cd[i] * w->bs + j] = w->slot_tok[w->cs[i] * w->bs + j];
                w->slot_pos[w->cd[i] * w->bs + j] = w->slot_pos[w->cs[i] * w->bs + j];
            }
    CHECK(p->n_seqs <= w->s.cfg.max_num_seqs);
    CHECK(p->n_tokens <= p->budget && p->budget <= w->s.cfg.max_num_batched_tokens);
    CHECK(p->n_logits <= w->s.cfg.max_logits);
    int32_t rows = 0, toks = 0;
    for (int32_t i = 0; i < p->n_seqs; i++) {
        const sched_entry *en = &p->entries[i];
        const sched_seq *q = en->seq;
        CHECK(q->status == SCHED_RUNNING && q->n_scheduled == en->n_tokens && en->n_tokens > 0);
        CHECK(en->n_logits >= 0 && en->n_logits <= en->n_tokens);
        CHECK(en->n_logits == 0 ? en->logits_first == -1 : en->logits_first == rows);
        rows += en->n_logits;
        toks += en->n_tokens;
        for (int32_t j = 0; j < en->n_tokens; j++) {
            const int32_t pos = q->n_computed + j, sl = kv_slot(w->kv, &q->kv, pos);
            CHECK(sl >= 0 && sl < w->n_slots);
            w->slot_tok[sl] = q->tokens[pos];
            w->slot_pos[sl] = pos;
        }
    }
    CHECK(rows == p->n_logits && toks == p->n_tokens);
    /* attention reads: every earlier position of each entry holds its own token */
    for (int32_t i = 0; i < p->n_seqs; i++) {
        const sched_seq *q = p->entries[i].seq;
        int bad = 0;
        for (int32_t pos = 0; pos < q->n_computed + p->entries[i].n_tokens; pos++) {
            const int32_t sl = kv_slot(w->kv, &q->kv, pos);
            if (w->slot_tok[sl] != q->tokens[pos] || w->slot_pos[sl] != pos) bad++;
        }
        CHECKF(bad == 0, "%d positions of a sequence read someone else's KV", bad);
    }
}

/* Postprocess: commit, fork a parent whose prompt is done, sample, finish. */
static void fake_post(world *w, const sched_plan *p) {
    for (int32_t i = 0; i < p->n_seqs; i++) {
        const sched_entry *en = &p->entries[i];
        sched_seq *q = en->seq;
        fseq *f = (fseq *)(void *)q;
        const bool ends = q->n_computed + en->n_tokens == q->n_tokens;
        sched_commit(&w->s, q, en->n_tokens);
        if (!ends) {
            CHECK(en->n_logits == 0 || q->all_prompt_logits);
            continue;
        }
        CHECK(en->n_logits >= 1);
        q->all_prompt_logits = false;
        if (q->fork_list) {
            fseq *kids[16];
            int nk = 0;
            for (sched_seq *c = q->fork_list; c && nk < 16; c = c->fork_next) kids[nk++] = (fseq *)(void *)c;
            sched_fork(&w->s, q);
            for (int k = 0; k < nk; k++)
                if (kids[k]->ss.status == SCHED_RUNNING) {
                    kids[k]->toks[kids[k]->ss.n_tokens++] = fake_sample(kids[k]);
                    kids[k]->n_gen++;
                }
        }
        f->toks[q->n_tokens++] = fake_sample(f);
        if (++f->n_gen >= f->max_new || q->n_tokens >= MAXLEN) {
            f->done = true;
            sched_remove(&w->s, q);
        }
    }
    /* a forked child that sampled at its fork may already be done */
}

/* Run until nothing is live; returns steps, or -1 if it did not end. */
static int run_all(world *w, int32_t mixed_budget, int max_steps) {
    for (int step = 0; step < max_steps; step++) {
        const sched_plan *p = sched_schedule(&w->s, mixed_budget);
        CHECK(sched_next_stuck(&w->s) == NULL);
        if (p->n_seqs == 0) return step;
        fake_forward(w, p);
        fake_post(w, p);
    }
    return -1;
}

/* ---- cases --------------------------------------------------------------------------- */

static void test_decode_first(void) {
    world w;
    CHECK(world_init(&w, 64, 16, 8, 8, 8, true));
    static fseq f[4];
    for (int i = 0; i < 3; i++) {
        fseq_init(&f[i], 3, 0, (uint64_t)i, 10u + (uint32_t)i, 50);
        sched_add(&w.s, &f[i].ss);
    }
    /* the three prompts (9 tokens) do not fit one step of 8: 3 + 3 + 2, then 1 */
    const sched_plan *p = sched_schedule(&w.s, 0);
    CHECK(p->n_seqs == 3 && p->n_tokens == 8 && p->n_decodes == 0);
    fake_forward(&w, p);
    fake_post(&w, p);
    p = sched_schedule(&w.s, 0);
    /* two decode; the third's last prompt token is decode-shaped (one token, a row) */
    CHECK(p->n_seqs == 3 && p->n_tokens == 3 && p->n_logits == 3);
    CHECK(p->entries[0].n_tokens == 1 && p->entries[1].n_tokens == 1 && p->entries[2].n_tokens == 1);
    CHECK(p->entries[2].seq == &f[2].ss);
    fake_forward(&w, p);
    fake_post(&w, p);
    fseq_init(&f[3], 100, 0, 3, 99, 5);
    sched_add(&w.s, &f[3].ss);
    p = sched_schedule(&w.s, 0);
    /* decodes first, then a chunk of the long prompt with the rest of the budget */
    CHECK(p->n_seqs == 4 && p->n_decodes == 3 && p->n_tokens == 8);
    for (int i = 0; i < 3; i++) CHECK(p->entries[i].n_tokens == 1 && p->entries[i].n_logits == 1);
    CHECK(p->entries[3].seq == &f[3].ss && p->entries[3].n_tokens == 5 && p->entries[3].n_logits == 0);
    fake_forward(&w, p);
    fake_post(&w, p);
    CHECK(run_all(&w, 0, 1000) > 0);
    for (int i = 0; i < 4; i++) CHECK(f[i].done);
    world_deinit(&w, f, 4);
}

static void test_chunking(void) {
    world w;
    CHECK(world_init(&w, 64, 16, 4, 32, 4, true));
    static fseq f[2];
    fseq_init(&f[0], 100, 0, 0, 7, 3);
    sched_add(&w.s, &f[0].ss);
    const int32_t want[] = {32, 32, 32, 4, 1, 1};
    for (int k = 0; k < 6; k++) {
        const sched_plan *p = sched_schedule(&w.s, 0);
        CHECKF(p->n_seqs == 1 && p->entries[0].n_tokens == want[k], "step %d: %d tokens", k,
               p->n_seqs ? p->entries[0].n_tokens : -1);
        CHECK(p->entries[0].n_logits == (k >= 3 ? 1 : 0));
        fake_forward(&w, p);
        fake_post(&w, p);
    }
    CHECK(f[0].done);
    /* the same prompt again: the prefix cache serves its 6 full blocks */
    fseq_init(&f[1], 100, 0, 1, 7, 1);
    sched_add(&w.s, &f[1].ss);
    const sched_plan *p = sched_schedule(&w.s, 0);
    CHECK(p->n_seqs == 1 && p->entries[0].n_tokens == 4 && f[1].ss.cached_tokens == 96);
    fake_forward(&w, p);
    fake_post(&w, p);
    CHECK(f[1].done);
    world_deinit(&w, f, 2);
}

static void test_token_budget_random(void) {
    for (unsigned seed = 1; seed <= 20; seed++) {
        t_rng r;
        t_seed(&r, seed);
        const int32_t seqs = 1 + (int32_t)(t_next(&r) % 8), budget = 8 + (int32_t)(t_next(&r) % 120);
        const int32_t blocks = 40 + (int32_t)(t_next(&r) % 100);
        world w;
        CHECK(world_init(&w, blocks, 16, seqs, budget, seqs + (int32_t)(t_next(&r) % 64), t_next(&r) & 1));
        static fseq f[24];
        for (int i = 0; i < 24; i++) {
            fseq_init(&f[i], 1 + (int32_t)(t_next(&r) % 200), (int32_t)(t_next(&r) % 3), (uint64_t)i,
                      (uint32_t)(seed * 100 + (unsigned)(i % 5)), 1 + (int32_t)(t_next(&r) % 40));
            f[i].ss.all_prompt_logits = t_next(&r) % 4 == 0;
            sched_add(&w.s, &f[i].ss);
        }
        const int32_t mixed = (int32_t)(t_next(&r) % 3) == 0 ? 0 : 1 + (int32_t)(t_next(&r) % 64);
        CHECKF(run_all(&w, mixed, 100000) > 0, "seed %u did not finish", seed);
        for (int i = 0; i < 24; i++) CHECK(f[i].done);
        kv_stats ks;
        kv_get_stats(w.kv, &ks);
        CHECK(ks.n_used == 0);
        world_deinit(&w, f, 24);
    }
}

static void test_preemption_victim(void) {
    /* 12 blocks of 4: three sequences of 12-token prompts take 3 blocks each; decoding
     * needs new blocks soon and the pool runs out */
    world w;
    CHECK(world_init(&w, 12, 4, 8, 64, 8, false));
    static fseq f[3];
    for (int i = 0; i < 3; i++) {
        fseq_init(&f[i], 12, 0, (uint64_t)i, 20u + (uint32_t)i, 30);
        sched_add(&w.s, &f[i].ss);
    }
    bool seen = false;
    for (int step = 0; step < 400 && !seen; step++) {
        uint64_t admit_max = 0;
        sched_seq *newest = NULL;
        for (sched_seq *q = w.s.running.head; q; q = q->next)
            if (q->admit_seq > admit_max) {
                admit_max = q->admit_seq;
                newest = q;
            }
        const uint64_t before = w.s.n_preemptions;
        const int32_t running_before = w.s.running.n;
        const sched_plan *p = sched_schedule(&w.s, 0);
        if (w.s.n_preemptions > before && running_before == 3) {
            /* the most recently admitted one went back to the head of the waiting queue */
            CHECK(newest && newest->status == SCHED_WAITING && newest->n_computed == 0);
            CHECK(w.s.waiting.head == newest && newest->kv.n_blocks == 0);
            seen = true;
        }
        if (p->n_seqs == 0) break;
        fake_forward(&w, p);
        fake_post(&w, p);
    }
    CHECK(seen);
    CHECK(run_all(&w, 0, 10000) >= 0);
    for (int i = 0; i < 3; i++) CHECK(f[i].done);
    world_deinit(&w, f, 3);
}

static void test_priority_order(void) {
    world w;
    CHECK(world_init(&w, 64, 16, 1, 64, 1, true));
    static fseq f[5];
    const int32_t prio[5] = {5, 1, 3, 1, 0};
    for (int i = 0; i < 5; i++) {
        fseq_init(&f[i], 4, prio[i], (uint64_t)i, 30u + (uint32_t)i, 1);
        sched_add(&w.s, &f[i].ss);
    }
    /* one seat: admission order is (priority, arrival): 4, 1, 3, 2, 0 */
    const int order[5] = {4, 1, 3, 2, 0};
    for (int k = 0; k < 5; k++) {
        const sched_plan *p = sched_schedule(&w.s, 0);
        CHECKF(p->n_seqs == 1 && p->entries[0].seq == &f[order[k]].ss, "admission %d", k);
        fake_forward(&w, p);
        fake_post(&w, p);
        CHECK(f[order[k]].done);
    }
    world_deinit(&w, f, 5);
}

static void test_forks_max_num_seqs(void) {
    world w;
    CHECK(world_init(&w, 128, 16, 3, 64, 3, true));
    static fseq f[5];
    fseq_init(&f[0], 40, 0, 0, 44, 12);
    for (int c = 1; c < 5; c++) fseq_child(&f[c], &f[0], c);
    for (int c = 1; c < 5; c++) sched_add_fork(&f[0].ss, &f[c].ss);
    sched_add(&w.s, &f[0].ss);
    CHECK(f[1].ss.status == SCHED_FORK_PENDING);
    int max_running = 0;
    for (int step = 0; step < 500; step++) {
        const sched_plan *p = sched_schedule(&w.s, 0);
        if (p->n_seqs == 0) break;
        CHECK(p->n_seqs <= 3);
        fake_forward(&w, p);
        fake_post(&w, p);
        if (step == 0) {
            /* the prompt fit one step: two children seated, two wait */
            CHECK(w.s.running.n == 3 && w.s.waiting.n == 2);
            CHECK(f[1].ss.status == SCHED_RUNNING && f[2].ss.status == SCHED_RUNNING);
            CHECK(f[3].ss.status == SCHED_WAITING && f[4].ss.status == SCHED_WAITING);
            CHECK(f[1].n_gen == 1 && f[0].n_gen == 1 && f[3].n_gen == 0);
        }
        if (w.s.running.n > max_running) max_running = w.s.running.n;
    }
    CHECK(max_running == 3);
    for (int i = 0; i < 5; i++) CHECK(f[i].done);
    /* a waiting child prefilled the prompt itself, served by the prefix cache */
    CHECK(f[3].ss.cached_tokens == 32 && f[4].ss.cached_tokens == 32);
    world_deinit(&w, f, 5);
}

static void test_time_budget(void) {
    world w;
    CHECK(world_init(&w, 256, 16, 8, 256, 8, true));
    static fseq f[5];
    for (int i = 0; i < 4; i++) {
        fseq_init(&f[i], 2, 0, (uint64_t)i, 50u + (uint32_t)i, 100);
        sched_add(&w.s, &f[i].ss);
    }
    const sched_plan *p = sched_schedule(&w.s, 10);
    /* nothing decodes yet: the full cap is allowed */
    CHECK(p->n_decodes == 0 && p->budget == 256);
    fake_forward(&w, p);
    fake_post(&w, p);
    fseq_init(&f[4], 300, 0, 4, 77, 2);
    sched_add(&w.s, &f[4].ss);
    p = sched_schedule(&w.s, 10);
    /* four decodes + 6 prefill tokens: the mixed budget */
    CHECK(p->n_decodes == 4 && p->budget == 10 && p->n_tokens == 10);
    fake_forward(&w, p);
    fake_post(&w, p);
    /* a budget below the decodes: they all run, and prefill still gets min_prefill (4) */
    p = sched_schedule(&w.s, 2);
    CHECK(p->n_decodes == 4 && p->n_tokens == 8 && p->entries[4].n_tokens == 4);
    fake_forward(&w, p);
    fake_post(&w, p);
    /* no time bound (<= 0): the hard cap */
    p = sched_schedule(&w.s, 0);
    CHECK(p->n_decodes == 4 && p->n_tokens == 256);
    fake_forward(&w, p);
    fake_post(&w, p);
    CHECK(run_all(&w, 20, 10000) > 0);
    for (int i = 0; i < 5; i++) CHECK(f[i].done);
    world_deinit(&w, f, 5);
}

/* Prefill bursts: with prompts waiting and every decode holding its credit, a step
 * plans no decodes and the burst's tokens go to prefill; then the decodes resume (mixed
 * steps) and no new burst starts before each has fed stall_every decodes; a sequence
 * admitted inside a burst starts without credit; a burst that has no seat to offer
 * gives way to a normal step. */
static void test_prefill_burst(void) {
    world w;
    CHECK(world_init(&w, 256, 16, 8, 256, 8, true));
    w.s.cfg.stall_every = 8;
    sched_set_burst(&w.s, 100);
    static fseq f[8];
    for (int i = 0; i < 4; i++) {
        fseq_init(&f[i], 2, 0, (uint64_t)i, 90u + (uint32_t)i, 100);
        sched_add(&w.s, &f[i].ss);
    }
    const sched_plan *p = sched_schedule(&w.s, 10);
    /* no decodes yet: an ordinary full-cap step, not a burst */
    CHECK(p->n_decodes == 0 && p->budget == 256 && w.s.n_bursts == 0);
    fake_forward(&w, p);
    fake_post(&w, p);
    for (int i = 0; i < 4; i++) CHECK(f[i].ss.decodes_since_stall == 8);
    fseq_init(&f[4], 300, 0, 4, 97, 2);
    sched_add(&w.s, &f[4].ss);
    p = sched_schedule(&w.s, 10);
    /* a burst: no decodes, its 100 tokens to the prompt */
    CHECK(w.s.n_bursts == 1 && p->n_decodes == 0 && p->n_seqs == 1 && p->n_tokens == 100);
    for (int i = 0; i < 4; i++) CHECK(f[i].ss.decodes_since_stall == 0);
    fake_forward(&w, p);
    fake_post(&w, p);
    /* the burst is spent: mixed steps (4 decodes + 6), no new burst for 8 decodes */
    for (int k = 0; k < 8; k++) {
        p = sched_schedule(&w.s, 10);
        CHECK(p->n_decodes == 4 && p->n_tokens == 10 && w.s.n_bursts == 1);
        fake_forward(&w, p);
        fake_post(&w, p);
    }
    /* a second burst; a sequence admitted inside it starts without credit */
    fseq_init(&f[5], 2, 0, 5, 98, 30);
    sched_add(&w.s, &f[5].ss);
    sched_set_burst(&w.s, 200);
    p = sched_schedule(&w.s, 10);
    /* the prompt's last 152 tokens and the new one's 2 */
    CHECK(w.s.n_bursts == 2 && p->n_decodes == 0 && p->n_tokens == 154 && p->n_seqs == 2);
    CHECK(f[5].ss.status == SCHED_RUNNING && f[5].ss.decodes_since_stall == 0);
    fake_forward(&w, p);
    fake_post(&w, p);
    CHECK(run_all(&w, 10, 10000) > 0);
    for (int i = 0; i < 6; i++) CHECK(f[i].done);
    CHECK(w.s.n_bursts == 2); /* nothing waited again while every decode had credit */
    world_deinit(&w, f, 6);

    /* every seat taken: the waiting prompt cannot start, so no burst and no empty step */
    CHECK(world_init(&w, 256, 16, 4, 256, 4, true));
    w.s.cfg.stall_every = 8;
    sched_set_burst(&w.s, 100);
    for (int i = 0; i < 4; i++) {
        fseq_init(&f[i], 2, 0, (uint64_t)i, 60u + (uint32_t)i, 20);
        sched_add(&w.s, &f[i].ss);
    }
    p = sched_schedule(&w.s, 10);
    fake_forward(&w, p);
    fake_post(&w, p);
    fseq_init(&f[4], 50, 0, 4, 61, 5);
    sched_add(&w.s, &f[4].ss);
    p = sched_schedule(&w.s, 10);
    CHECK(p->n_decodes == 4 && w.s.n_bursts == 0);
    fake_forward(&w, p);
    fake_post(&w, p);
    CHECK(run_all(&w, 10, 10000) > 0);
    for (int i = 0; i < 5; i++) CHECK(f[i].done);
    world_deinit(&w, f, 5);
}

static void test_cost_model(void) {
    sched_cost c;
    sched_cost_init(&c);
    CHECK(sched_cost_budget(&c, 100.0, 512) == 1); /* no data: the floor */
    CHECK(sched_cost_budget(&c, 0.0, 512) == 512);  /* no time bound: the cap */
    t_rng r;
    t_seed(&r, 3);
    /* ms = 40 + 0.5 * tokens, +-10% noise, and every 10th step stalled 10x */
    for (int i = 0; i < 200; i++) {
        const int32_t t = i % 3 == 0 ? 8 : 8 + (int32_t)(t_next(&r) % 300);
        double ms = (40.0 + 0.5 * t) * (0.9 + 0.2 * (double)(t_next(&r) % 1000) / 1000.0);
        if (i % 10 == 9) ms *= 10.0;
        sched_cost_observe(&c, t, ms);
    }
    CHECKF(fabs(c.a - 40.0) < 15.0 && fabs(c.b - 0.5) < 0.15, "a %.2f b %.3f", c.a, c.b);
    const int32_t b = sched_cost_budget(&c, 100.0, 512);
    CHECKF(b >= 80 && b <= 160, "budget %d (true 120)", b);
    CHECK(sched_cost_budget(&c, 0.0, 512) == 512);
    CHECK(sched_cost_budget(&c, 1.0, 512) == 1);
    CHECK(sched_cost_budget(&c, 1e6, 512) == 512);
    /* steps of one size only: cost charged per token (cautious) */
    sched_cost_init(&c);
    for (int i = 0; i < 10; i++) sched_cost_observe(&c, 8, 80.0);
    const int32_t b1 = sched_cost_budget(&c, 100.0, 512);
    CHECKF(b1 == 9 || b1 == 10, "budget %d", b1);
    /* garbage is ignored */
    sched_cost_observe(&c, 0, 5.0);
    sched_cost_observe(&c, 8, NAN);
    sched_cost_observe(&c, 8, -1.0);
    CHECK(sched_cost_budget(&c, 100.0, 512) == b1);
}

static void test_prompt_logits_rows(void) {
    world w;
    /* max_logits 12 with 4 seats: a prompt-logprobs chunk gets at most 12 - 3 rows */
    CHECK(world_init(&w, 64, 16, 4, 64, 12, true));
    static fseq f[3];
    fseq_init(&f[0], 40, 0, 0, 61, 2);
    sched_add(&w.s, &f[0].ss);
    CHECK(run_all(&w, 0, 100) > 0); /* cached now */
    fseq_init(&f[1], 40, 0, 1, 61, 2);
    f[1].ss.all_prompt_logits = true;
    sched_add(&w.s, &f[1].ss);
    int32_t fed = 0;
    for (int step = 0; step < 100 && !f[1].done; step++) {
        const sched_plan *p = sched_schedule(&w.s, 0);
        CHECK(p->n_seqs == 1);
        if (fed < 40) {
            CHECK(p->entries[0].n_tokens == IFD_MIN(9, 40 - fed));
            CHECK(p->entries[0].n_logits == p->entries[0].n_tokens);
            fed += p->entries[0].n_tokens;
        } else {
            CHECK(p->entries[0].n_logits == 1);
        }
        fake_forward(&w, p);
        fake_post(&w, p);
    }
    CHECK(f[1].done && fed == 40 && f[1].ss.cached_tokens == 0);
    world_deinit(&w, f, 2);
}

static void test_stuck(void) {
    /* 2 blocks of 4 tokens and a 20-token prompt: it cannot be held even alone */
    world w;
    CHECK(world_init(&w, 2, 4, 2, 64, 2, false));
    static fseq f[2];
    fseq_init(&f[0], 20, 0, 0, 5, 2);
    fseq_init(&f[1], 3, 0, 1, 6, 2);
    sched_add(&w.s, &f[0].ss);
    sched_add(&w.s, &f[1].ss);
    const sched_plan *p = sched_schedule(&w.s, 0);
    /* the big one is given up; the small one runs */
    CHECK(sched_next_stuck(&w.s) == &f[0].ss && f[0].ss.status == SCHED_STUCK);
    sched_remove(&w.s, &f[0].ss);
    CHECK(sched_next_stuck(&w.s) == NULL);
    CHECK(p->n_seqs == 1 && p->entries[0].seq == &f[1].ss);
    fake_forward(&w, p);
    fake_post(&w, p);
    CHECK(run_all(&w, 0, 100) > 0 && f[1].done);
    world_deinit(&w, f, 2);
}

/* ---- speculative decoding: verification entries and rollback (randomized) ------------- */

/* A sequence of the speculative test. Every final token is a function of (stream,
 * position): the prompt's stream for prompt positions, the sequence's own for generated
 * ones (a choice 0 sequence continues its prompt's stream, so same-group sequences of
 * any prompt length share whole blocks of generated tokens through the prefix cache).
 * A rejected draft is a value the function never produces (>= SPEC_BAD). */
#define SPEC_BAD   1000
#define SPEC_SLOTS 16
typedef struct sfseq {
    fseq f; /* first: (sfseq *)sched_seq works */
    int32_t pstream, stream;
    int32_t k_given, a0; /* drafts given this step, how many of them are right */
    int32_t base;        /* n_tokens before the drafts */
    /* a probe: its prompt is a rejected stream (tokens up to and with rejected drafts,
     * the first wrong one at first_bad), so its prefix hit must stop before first_bad */
    bool probe, probe_checked;
    int32_t first_bad;
} sfseq;

static int32_t spec_val(int32_t stream, int32_t pos) {
    if (pos < 8) stream = -1; /* a prefix common to every prompt */
    uint64_t h =
        ((uint64_t)(stream + 7) * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)pos * 0xc2b2ae3d27d4eb4full);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return 1 + (int32_t)(h % 997);
}

static int32_t spec_final(const sfseq *q, int32_t pos) {
    if (q->probe && pos < q->f.ss.n_prompt) return q->f.toks[pos]; /* its own prompt */
    return spec_val(pos < q->f.ss.n_prompt ? q->pstream : q->stream, pos);
}

static bool spec_live(const sfseq *q) {
    return q->f.ss.status == SCHED_WAITING || q->f.ss.status == SCHED_RUNNING ||
           q->f.ss.status == SCHED_STUCK || q->f.ss.status == SCHED_FORK_PENDING;
}

/* kv_check over every sequence with a table (waiting ones hold no blocks) */
static int spec_kv_check(world *w, sfseq *sl, int step) {
    kv_seq *live[SPEC_SLOTS];
    int32_t n = 0;
    for (int i = 0; i < SPEC_SLOTS; i++)
        if (sl[i].f.ss.kv_ready) live[n++] = &sl[i].f.ss.kv;
    char err[256] = "";
    const int rc = kv_check(w->kv, live, n, err, sizeof err);
    CHECKF(rc == 0, "step %d: kv_check: %s", step, err);
    return rc;
}

/* remove q and, if its prompt is not done yet, its pending children */
static void spec_remove(world *w, sfseq *q) {
    sched_seq *kids[SPEC_SLOTS];
    int nk = 0;
    for (sched_seq *c = q->f.ss.fork_list; c && nk < SPEC_SLOTS; c = c->fork_next) kids[nk++] = c;
    q->f.ss.fork_list = NULL;
    for (int i = 0; i < nk; i++) sched_remove(&w->s, kids[i]);
    sched_remove(&w->s, &q->f.ss);
}

static void spec_start(sfseq *q, int32_t pstream, int32_t stream, int32_t n_prompt, int32_t prio,
                       uint64_t arrival, int32_t max_new) {
    memset(q, 0, sizeof *q);
    fseq_init(&q->f, n_prompt, prio, arrival, 0, max_new);
    q->pstream = pstream;
    q->stream = stream;
    for (int32_t i = 0; i < n_prompt; i++) q->f.toks[i] = spec_val(pstream, i);
}

typedef struct spec_cfg {
    int32_t n_blocks, bs, max_seqs, max_tokens, max_logits, stall_every, hash_bits;
    int32_t max_prompt, max_new;
} spec_cfg;

static void spec_run(const spec_cfg *c, uint64_t seed, int steps) {
    world w;
    CHECK(world_init(&w, c->n_blocks, c->bs, c->max_seqs, c->max_tokens, c->max_logits, true));
    if (c->hash_bits) kv_debug_set_hash_bits(w.kv, c->hash_bits);
    w.s.cfg.stall_every = c->stall_every;
    /* a lone sequence always fits the pool (never stuck), drafts and bonus included */
    const int32_t limit = IFD_MIN(MAXLEN - 1, c->n_blocks * c->bs * 2 / 3);
    CHECK(c->max_prompt + 2 < limit);
    static sfseq sl[SPEC_SLOTS];
    memset(sl, 0, sizeof sl);
    t_rng r;
    t_seed(&r, seed);
    uint64_t arrival = 0;
    int64_t n_verif = 0, n_verif_rejects = 0, n_trimmed = 0, n_dropped = 0, n_forks = 0;
    int64_t n_finished = 0, n_aborted = 0, fails_before = t_failures;
    int64_t n_probes = 0, n_probe_hits = 0;
    static int32_t probe_toks[MAXLEN];
    int32_t probe_n = 0, probe_bad = 0; /* probe_n > 0: a probe to start */
    const uint64_t preempt0 = w.s.n_preemptions;
    for (int step = 0; step < steps; step++) {
        /* admissions: a new sequence now and then, sometimes with fork children */
        int n_live = 0;
        for (int i = 0; i < SPEC_SLOTS; i++) n_live += spec_live(&sl[i]);
        if (n_live < 12 && t_next(&r) % 3 == 0) {
            int at = -1;
            for (int i = 0; i < SPEC_SLOTS && at < 0; i++)
                if (!spec_live(&sl[i])) at = i;
            const int32_t g = (int32_t)(t_next(&r) % 4);
            const int32_t L = 1 + (int32_t)(t_next(&r) % (uint64_t)c->max_prompt);
            const int32_t prio = t_next(&r) % 4 == 0 ? 1 : 0;
            spec_start(&sl[at], g, g, L, prio, arrival++,
                       1 + (int32_t)(t_next(&r) % (uint64_t)c->max_new));
            int n_kids = t_next(&r) % 6 == 0 ? 1 + (int)(t_next(&r) % 2) : 0;
            for (int kd = 1; kd <= n_kids; kd++) {
                int ck = -1;
                for (int i = 0; i < SPEC_SLOTS && ck < 0; i++)
                    if (i != at && !spec_live(&sl[i])) ck = i;
                if (ck < 0) break;
                spec_start(&sl[ck], g, 100 + g * 8 + kd, L, prio, sl[at].f.ss.arrival,
                           1 + (int32_t)(t_next(&r) % (uint64_t)c->max_new));
                sl[ck].f.choice = kd;
                sched_add_fork(&sl[at].f.ss, &sl[ck].f.ss);
            }
            sched_add(&w.s, &sl[at].f.ss);
        }
        /* a probe of the last rejection saved, first in line */
        if (probe_n > 0) {
            int at = -1;
            for (int i = 0; i < SPEC_SLOTS && at < 0; i++)
                if (!spec_live(&sl[i])) at = i;
            if (at >= 0) {
                sfseq *q = &sl[at];
                spec_start(q, 0, 999, probe_n + 1, -1, arrival++, 1);
                memcpy(q->f.toks, probe_toks, (size_t)probe_n * sizeof(int32_t));
                q->f.toks[probe_n] = 1;
                q->probe = true;
                q->first_bad = probe_bad;
                sched_add(&w.s, &q->f.ss);
                probe_n = 0;
                n_probes++;
            }
        }
        /* an abort now and then (a pending child only goes with its parent) */
        if (t_next(&r) % 40 == 0) {
            sfseq *q = &sl[t_next(&r) % SPEC_SLOTS];
            if (spec_live(q) && q->f.ss.status != SCHED_FORK_PENDING) {
                spec_remove(&w, q);
                n_aborted++;
            }
        }
        /* drafts for the decoding sequences */
        for (int i = 0; i < SPEC_SLOTS; i++) {
            sfseq *q = &sl[i];
            sched_seq *ss = &q->f.ss;
            q->k_given = q->a0 = 0;
            q->base = ss->n_tokens;
            if (ss->status != SCHED_RUNNING || ss->n_tokens - ss->n_computed != 1 ||
                ss->n_spec != 0 || ss->fork_list)
                continue;
            int32_t k = (int32_t)(t_next(&r) % 9);
            k = IFD_MIN(k, limit - 1 - ss->n_tokens);
            if (k <= 0 || t_next(&r) % 4 == 0) continue;
            q->k_given = k;
            q->a0 = (int32_t)(t_next(&r) % (uint64_t)(k + 1));
            for (int32_t j = 0; j < k; j++) {
                const int32_t pos = ss->n_tokens + j;
                q->f.toks[pos] =
                    j < q->a0 ? spec_final(q, pos) : SPEC_BAD + (int32_t)(t_next(&r) % 1000);
            }
            ss->n_tokens += k;
            ss->n_spec = k;
        }
        if (c->stall_every)
            sched_set_burst(&w.s, t_next(&r) % 2 ? 1 + (int32_t)(t_next(&r) % 64) : 0);
        const int32_t mixed =
            t_next(&r) % 3 == 0 ? 0 : 1 + (int32_t)(t_next(&r) % (uint64_t)c->max_tokens);
        const sched_plan *p = sched_schedule(&w.s, mixed);
        sched_seq *stuck = sched_next_stuck(&w.s);
        CHECKF(stuck == NULL, "step %d: a sequence got stuck", step);
        if (stuck) spec_remove(&w, (sfseq *)(void *)stuck);
        CHECK(p->n_tokens <= p->budget && p->budget <= c->max_tokens);
        CHECK(p->n_logits <= w.s.cfg.max_logits && p->n_seqs <= c->max_seqs);
        /* drafts only on planned entries, trimmed from the end, never grown */
        for (int i = 0; i < SPEC_SLOTS; i++) {
            const sfseq *q = &sl[i];
            const sched_seq *ss = &q->f.ss;
            if (!spec_live(q)) continue;
            CHECKF(ss->n_computed <= ss->n_tokens, "step %d: n_computed %d > n_tokens %d", step,
                   ss->n_computed, ss->n_tokens);
            CHECKF(
                ss->n_spec == 0 ||
                    (ss->status == SCHED_RUNNING && ss->n_scheduled == 1 + ss->n_spec),
                "step %d: %d drafts on a sequence not planned for them (status %d, n_scheduled %d)",
                step, ss->n_spec, ss->status, ss->n_scheduled);
            if (q->k_given) {
                CHECK(ss->n_spec >= 0 && ss->n_spec <= q->k_given);
                CHECKF(ss->n_tokens == q->base + ss->n_spec,
                       "step %d: n_tokens %d, base %d, n_spec %d", step, ss->n_tokens, q->base,
                       ss->n_spec);
                if (ss->n_scheduled && ss->n_spec < q->k_given) n_trimmed++;
                if (!ss->n_scheduled) n_dropped++;
            }
        }
        for (int32_t e = 0; e < p->n_seqs; e++) {
            const sched_entry *en = &p->entries[e];
            if (en->seq->n_spec > 0)
                CHECKF(en->n_tokens == 1 + en->seq->n_spec && en->n_logits == en->n_tokens,
                       "step %d: verification of %d drafts: %d tokens, %d rows", step,
                       en->seq->n_spec, en->n_tokens, en->n_logits);
        }
        if (p->n_seqs > 0) fake_forward(&w, p);
        /* accept, commit, append the bonus / sampled token, finish */
        for (int32_t e = 0; e < p->n_seqs; e++) {
            const sched_entry *en = &p->entries[e];
            sched_seq *ss = en->seq;
            sfseq *q = (sfseq *)(void *)ss;
            if (ss->n_spec > 0) {
                const int32_t k = ss->n_spec;
                int32_t a = IFD_MIN(q->a0, k);
                if (t_next(&r) % 8 == 0) a = (int32_t)(t_next(&r) % (uint64_t)(a + 1));
                const int32_t c0 = ss->n_computed, nb0 = ss->kv.n_blocks;
                const int32_t av0 = kv_n_available(w.kv);
                bool stop = false; /* the bonus is a stop token: the blocks go to the cache now */
                if (probe_n == 0 && q->a0 < k && c0 + 2 + k < limit && t_next(&r) % 3 == 0) {
                    probe_n = c0 + 1 + k;
                    probe_bad = c0 + 1 + q->a0;
                    memcpy(probe_toks, ss->tokens, (size_t)probe_n * sizeof(int32_t));
                    stop = t_next(&r) % 2 == 0;
                }
                sched_commit(&w.s, ss, 1 + a);
                n_verif++;
                n_verif_rejects += a < k;
                CHECKF(ss->n_computed == c0 + 1 + a && ss->n_spec == 0 &&
                           ss->n_tokens == ss->n_computed && ss->n_scheduled == 0,
                       "step %d: after verifying %d of %d: n_computed %d (was %d), n_tokens %d, "
                       "n_spec %d",
                       step, a, k, ss->n_computed, c0, ss->n_tokens, ss->n_spec);
                CHECKF(ss->kv.n_tokens == ss->n_computed &&
                           ss->kv.n_blocks == (ss->n_computed + c->bs - 1) / c->bs,
                       "step %d: KV not truncated: %d tokens in %d blocks, %d computed", step,
                       ss->kv.n_tokens, ss->kv.n_blocks, ss->n_computed);
                CHECKF(kv_n_available(w.kv) >= av0 + (nb0 - ss->kv.n_blocks),
                       "step %d: %d blocks dropped but available %d -> %d", step,
                       nb0 - ss->kv.n_blocks, av0, kv_n_available(w.kv));
                q->f.n_gen += a;
                if (stop) q->f.n_gen = q->f.max_new;
            } else {
                const bool ends = ss->n_computed + en->n_tokens == ss->n_tokens;
                sched_commit(&w.s, ss, en->n_tokens);
                if (!ends) continue;
                if (ss->fork_list) {
                    sched_seq *kids[SPEC_SLOTS];
                    int nk = 0;
                    for (sched_seq *cq = ss->fork_list; cq && nk < SPEC_SLOTS; cq = cq->fork_next)
                        kids[nk++] = cq;
                    sched_fork(&w.s, ss);
                    n_forks += nk;
                    for (int kd = 0; kd < nk; kd++) {
                        sfseq *ch = (sfseq *)(void *)kids[kd];
                        if (kids[kd]->status != SCHED_RUNNING) continue;
                        ch->f.toks[kids[kd]->n_tokens] = spec_final(ch, kids[kd]->n_tokens);
                        kids[kd]->n_tokens++;
                        if (++ch->f.n_gen >= ch->f.max_new) {
                            sched_remove(&w.s, kids[kd]);
                            n_finished++;
                        }
                    }
                }
            }
            q->f.toks[ss->n_tokens] = spec_final(q, ss->n_tokens);
            ss->n_tokens++;
            if (++q->f.n_gen >= q->f.max_new || ss->n_tokens >= limit - 1) {
                sched_remove(&w.s, ss);
                n_finished++;
            }
        }
        /* every live sequence: no drafts left, only final tokens, KV as computed */
        for (int i = 0; i < SPEC_SLOTS; i++) {
            const sfseq *q = &sl[i];
            const sched_seq *ss = &q->f.ss;
            if (!spec_live(q)) continue;
            CHECK(ss->n_spec == 0 && ss->n_scheduled == 0 && ss->n_computed <= ss->n_tokens);
            int bad = 0, first_bad = -1;
            for (int32_t pos = 0; pos < ss->n_tokens; pos++)
                if (ss->tokens[pos] != spec_final(q, pos) && bad++ == 0) first_bad = pos;
            CHECKF(bad == 0, "step %d: %d non-final tokens (first at %d: %d)", step, bad, first_bad,
                   first_bad >= 0 ? ss->tokens[first_bad] : 0);
            if (ss->status == SCHED_RUNNING) CHECK(ss->kv.n_tokens == ss->n_computed);
            if (q->probe && ss->admitted_once && !q->probe_checked) {
                sl[i].probe_checked = true;
                n_probe_hits += ss->cached_tokens > 0;
                CHECKF(ss->cached_tokens <= q->first_bad,
                       "step %d: a prefix hit of %d tokens on a rejected stream (first rejected "
                       "draft at %d)",
                       step, ss->cached_tokens, q->first_bad);
            }
            if (ss->status == SCHED_WAITING && ss->kv_ready) CHECK(ss->kv.n_blocks == 0);
        }
        spec_kv_check(&w, sl, step);
        if (t_failures - fails_before > 20) break; /* one bug, not thousands of lines */
    }
    const int64_t n_preempt = (int64_t)(w.s.n_preemptions - preempt0);
    kv_stats ks;
    kv_get_stats(w.kv, &ks);
    printf(
        "  spec %d blocks x %d: %lld verifications (%lld with rejections), %lld trimmed, "
        "%lld dropped, %lld preemptions, %lld forks, %lld finished, %lld aborted, "
        "prefix hits %llu/%llu tokens, %lld probes (%lld hits)\n",
        c->n_blocks, c->bs, (long long)n_verif, (long long)n_verif_rejects, (long long)n_trimmed,
        (long long)n_dropped, (long long)n_preempt, (long long)n_forks, (long long)n_finished,
        (long long)n_aborted, (unsigned long long)ks.prefix_hits_tokens,
        (unsigned long long)ks.prefix_queries_tokens, (long long)n_probes, (long long)n_probe_hits);
    CHECK(n_verif > 100 && n_verif_rejects > 50);
    CHECK(n_preempt > 20);
    CHECK(n_trimmed > 0 && n_finished > 50);
    CHECK(ks.prefix_hits_tokens > 0 && n_probes > 20 && n_probe_hits > 0);
    /* the end: everything removed, the pool all free or evictable */
    for (int i = 0; i < SPEC_SLOTS; i++)
        if (spec_live(&sl[i])) spec_remove(&w, &sl[i]);
    spec_kv_check(&w, sl, steps);
    kv_get_stats(w.kv, &ks);
    CHECKF(ks.n_used == 0 && ks.n_free + ks.n_cached_evictable == ks.n_blocks,
           "used %d free %d evictable %d", ks.n_used, ks.n_free, ks.n_cached_evictable);
    static fseq none[1];
    world_deinit(&w, none, 0);
}

/* Speculative decoding: random drafts (0..8) on decoding sequences, random acceptance,
 * preemption, prefix sharing, forks, aborts and bursts. After sched_schedule drafts are
 * only on planned verification entries (1 + n_spec tokens and rows); after the commit
 * the rejected drafts are gone (tokens, KV, blocks), only final tokens remain, and the
 * prefix cache never serves a rejected one: a probe whose prompt is a rejected stream
 * gets no hit past its first rejected draft (its source sometimes finishes at once, so
 * its blocks reach the cache before any later write could take them out). */
static void test_spec_verify_rollback_random(void) {
    /* blocks, block size, seats, token cap, logits rows, stall_every (bursts), hash bits
     * (collisions), longest prompt, most new tokens: rows bind the drafts in the first
     * two, the token cap in the third */
    const spec_cfg cfgs[] = {
        {40, 4, 6, 32, 14, 0, 0, 40, 60},
        {36, 8, 8, 24, 12, 4, 0, 60, 150},
        {24, 2, 4, 16, 40, 0, 5, 16, 40},
    };
    for (int i = 0; i < (int)(sizeof cfgs / sizeof cfgs[0]); i++)
        spec_run(&cfgs[i], 1234u + (uint64_t)i, 4000);
}

TEST_MAIN(T(test_decode_first), T(test_prefill_burst), T(test_chunking),
          T(test_token_budget_random), T(test_preemption_victim), T(test_priority_order),
          T(test_forks_max_num_seqs), T(test_time_budget), T(test_cost_model),
          T(test_prompt_logits_rows), T(test_stuck), T(test_spec_verify_rollback_random))
