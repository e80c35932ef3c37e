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
 * prompt-logprob rows (every prompt token, within max_logits, no prefix hit), and
 * giving up on a sequence the pool cannot hold. */
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

TEST_MAIN(T(test_decode_first), T(test_prefill_burst), T(test_chunking), T(test_token_budget_random),
          T(test_preemption_victim), T(test_priority_order), T(test_forks_max_num_seqs),
          T(test_time_budget), T(test_cost_model), T(test_prompt_logits_rows), T(test_stuck))
