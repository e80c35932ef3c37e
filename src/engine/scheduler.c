/* scheduler.c — decide what runs this step (engine thread only). See scheduler.h.
 *
 * Every running sequence that is decoding (one new token) is taken first; the rest of
 * the token budget goes to prefill chunks — running sequences still prefilling, then
 * waiting ones in (priority, arrival) order — so a long prompt is split across steps
 * while the others keep decoding (chunked prefill). The budget of a step with decodes
 * is the caller's (the engine derives it from the measured cost per token and
 * max_step_ms); a step without decodes may take max_num_batched_tokens. max_num_seqs
 * caps the running set. When a decode cannot get a KV slot, the most recently
 * admitted running sequence is preempted (blocks freed, recomputed later) and goes
 * back to the head of the waiting queue.
 *
 * Bounds, by construction: only running sequences are planned, each at most once, and
 * the running set never exceeds max_num_seqs (admission and sched_fork), so a plan
 * has at most max_num_seqs entries; a sequence gets more than one logits row only
 * while n_logits + (seats left) stays within max_logits, and every chunk is cut to the
 * token budget left. plan_add asserts all three (the engine's step buffers are sized
 * by them).
 *
 * Progress: a step in which live sequences exist but none could be planned would
 * repeat forever (a lone sequence the whole pool cannot hold preempts itself, gets its
 * blocks back from the prefix cache and tries again). Instead the most recently
 * admitted running sequence is preempted and the step rescheduled, and a sequence that
 * cannot proceed with nothing left to preempt goes to the stuck queue (the engine
 * finishes it, reason length) — never preempted in a loop. The engine clamps
 * max_model_len to what the pool holds at create, so a lone sequence always fits: this
 * is the last resort, not a path that engine tests reach. */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "../util/common.h"

/* ---- queues -------------------------------------------------------------------------- */

static void q_push_back(sched_queue *q, sched_seq *s) {
    s->next = NULL;
    s->prev = q->tail;
    if (q->tail)
        q->tail->next = s;
    else
        q->head = s;
    q->tail = s;
    q->n++;
}

static void q_remove(sched_queue *q, sched_seq *s) {
    if (s->prev)
        s->prev->next = s->next;
    else
        q->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        q->tail = s->prev;
    s->prev = s->next = NULL;
    q->n--;
}

/* (priority, arrival) order; a preempted sequence goes to the head of its band. */
static void q_insert_waiting(sched_queue *q, sched_seq *s, bool preempted) {
    const int32_t pr = s->priority;
    sched_seq *at = q->head;
    if (preempted) {
        while (at && at->priority < pr) at = at->next;
    } else {
        while (at && (at->priority < pr || (at->priority == pr && at->arrival <= s->arrival)))
            at = at->next;
    }
    if (!at) {
        q_push_back(q, s);
        return;
    }
    s->next = at;
    s->prev = at->prev;
    if (at->prev)
        at->prev->next = s;
    else
        q->head = s;
    at->prev = s;
    q->n++;
}

/* ---- lifecycle ----------------------------------------------------------------------- */

int sched_init(sched *s, const sched_config *cfg, kv_cache *kv) {
    memset(s, 0, sizeof *s);
    if (!kv || cfg->max_num_seqs < 1 || cfg->max_num_batched_tokens < 1 ||
        cfg->min_prefill_tokens < 0 || cfg->stall_every < 0)
        return IFD_ERR_INVALID;
    s->cfg = *cfg;
    if (s->cfg.max_logits < s->cfg.max_num_seqs) s->cfg.max_logits = s->cfg.max_num_seqs;
    s->kv = kv;
    s->plan.entries = calloc((size_t)cfg->max_num_seqs, sizeof(sched_entry));
    return s->plan.entries ? IFD_OK : IFD_ERR_NOMEM;
}

void sched_deinit(sched *s) {
    free(s->plan.entries);
    s->plan.entries = NULL;
}

void sched_add(sched *s, sched_seq *q) {
    IFD_ASSERT(q->status == SCHED_NEW);
    q->status = SCHED_WAITING;
    q_insert_waiting(&s->waiting, q, false);
}

void sched_add_fork(sched_seq *parent, sched_seq *child) {
    IFD_ASSERT(child->status == SCHED_NEW);
    child->status = SCHED_FORK_PENDING;
    child->fork_next = NULL;
    sched_seq **at = &parent->fork_list;
    while (*at) at = &(*at)->fork_next;
    *at = child;
}

static void release_kv(sched *s, sched_seq *q) {
    if (q->kv_ready) {
        kv_seq_deinit(s->kv, &q->kv);
        q->kv_ready = false;
    }
}

void sched_remove(sched *s, sched_seq *q) {
    switch (q->status) {
    case SCHED_WAITING: q_remove(&s->waiting, q); break;
    case SCHED_RUNNING: q_remove(&s->running, q); break;
    case SCHED_STUCK: q_remove(&s->stuck, q); break;
    case SCHED_HOLDING: q_remove(&s->holding, q); break;
    default: break;
    }
    /* a pending child stays on its parent's list only while the parent lives: the
     * engine removes a parent's pending children with it (request end), and a parent
     * that forked has emptied its list */
    q->fork_next = NULL;
    q->n_scheduled = 0;
    release_kv(s, q);
    q->status = SCHED_FINISHED;
}

sched_seq *sched_next_stuck(sched *s) { return s->stuck.head; }

int32_t sched_admit_hold(sched *s, sched_seq *q) {
    IFD_ASSERT(q->status == SCHED_NEW && q->n_tokens == q->n_prompt && q->n_prompt > 0);
    if (s->running.n + s->holding.n >= s->cfg.max_num_seqs) return -1;
    if (!q->kv_ready) {
        if (kv_seq_init(s->kv, &q->kv)) return -1;
        q->kv_ready = true;
    }
    const int32_t hit = kv_match_prefix(s->kv, &q->kv, q->tokens, q->n_prompt);
    if (!kv_can_alloc_slots(s->kv, &q->kv, q->n_prompt - hit)) {
        const bool never = kv_blocks_needed(s->kv, &q->kv, q->n_prompt - hit) < 0;
        kv_free(s->kv, &q->kv);
        return never ? -2 : -1;
    }
    kv_alloc_slots(s->kv, &q->kv, q->n_prompt - hit);
    q->n_computed = hit;
    q->cached_tokens = hit;
    q->admitted_once = true;
    q->decodes_since_stall = s->cfg.stall_every;
    q->admit_seq = ++s->admit_counter;
    q->status = SCHED_HOLDING;
    q_push_back(&s->holding, q);
    return hit;
}

void sched_release_hold(sched *s, sched_seq *q, int32_t n_computed) {
    IFD_ASSERT(q->status == SCHED_HOLDING && n_computed >= 0 && n_computed <= q->n_prompt);
    q_remove(&s->holding, q);
    if (n_computed < q->kv.n_tokens) kv_truncate(s->kv, &q->kv, n_computed);
    q->n_computed = n_computed;
    kv_commit(s->kv, &q->kv, q->tokens, n_computed);
    q->status = SCHED_RUNNING;
    q_push_back(&s->running, q);
}

/* ---- the step ------------------------------------------------------------------------ */

/* Tokens known for certain (the drafts excluded). */
static int32_t n_known(const sched_seq *q) { return q->n_tokens - q->n_spec; }

void sched_drop_spec(sched_seq *q) {
    IFD_ASSERT(q->n_scheduled == 0);
    q->n_tokens -= q->n_spec;
    q->n_spec = 0;
}

/* Drop up to n of q's last drafts. */
static void trim_spec(sched_seq *q, int32_t n) {
    n = IFD_MIN(n, q->n_spec);
    if (n <= 0) return;
    q->n_tokens -= n;
    q->n_spec -= n;
}

static void preempt(sched *s, sched_seq *q) {
    IFD_ASSERT(q->status == SCHED_RUNNING && q->n_scheduled == 0);
    sched_drop_spec(q);
    q_remove(&s->running, q);
    kv_free(s->kv, &q->kv);
    q->n_computed = 0;
    q->status = SCHED_WAITING;
    q_insert_waiting(&s->waiting, q, true);
    s->n_preemptions++;
}

static void give_up(sched *s, sched_seq *q) {
    sched_drop_spec(q);
    if (q->status == SCHED_WAITING)
        q_remove(&s->waiting, q);
    else if (q->status == SCHED_RUNNING)
        q_remove(&s->running, q);
    if (q->kv_ready) kv_free(s->kv, &q->kv);
    q->n_computed = 0;
    q->status = SCHED_STUCK;
    q_push_back(&s->stuck, q);
}

/* Rows q may take beyond one while keeping a row for every seat still unplanned. */
static int32_t extra_rows(const sched *s) {
    const sched_plan *p = &s->plan;
    return s->cfg.max_logits - p->n_logits - (s->cfg.max_num_seqs - p->n_seqs);
}

/* Tokens of q's next chunk limited by its logits rows: every prompt token fed needs a
 * row while all_prompt_logits. */
static int32_t cap_by_rows(const sched *s, const sched_seq *q, int32_t chunk) {
    if (!q->all_prompt_logits || q->n_computed >= q->n_prompt) return chunk;
    const int32_t rows = 1 + extra_rows(s);
    return IFD_MIN(chunk, IFD_MAX(rows, 1));
}

static void plan_add(sched *s, sched_seq *q, int32_t n) {
    sched_plan *p = &s->plan;
    IFD_ASSERT(q->status == SCHED_RUNNING && q->n_scheduled == 0 && n > 0);
    IFD_ASSERT(p->n_seqs < s->cfg.max_num_seqs);
    IFD_ASSERT(n <= p->budget - p->n_tokens);
    sched_entry *en = &p->entries[p->n_seqs++];
    en->seq = q;
    en->n_tokens = n;
    en->n_logits = 0;
    if (q->all_prompt_logits && q->n_computed < q->n_prompt)
        en->n_logits = n; /* every fed token's row (the prompt's, and the one that samples) */
    else if (q->n_spec > 0)
        en->n_logits = n; /* a verification: a row per fed token */
    else if (q->n_computed + n == q->n_tokens)
        en->n_logits = 1;
    en->logits_first = en->n_logits ? p->n_logits : -1;
    p->n_logits += en->n_logits;
    q->n_scheduled = n;
    p->n_tokens += n;
    IFD_ASSERT(p->n_logits + (s->cfg.max_num_seqs - p->n_seqs) <= s->cfg.max_logits);
}

static bool is_decode(const sched_seq *q) {
    return n_known(q) - q->n_computed == 1 && !q->n_scheduled;
}

/* 1. decodes: running sequences with exactly one known token to feed (and their
 * drafts, when they fit: each decode still to plan keeps a token of the budget and a
 * row, so drafts never cost another sequence its decode) */
static void plan_decodes(sched *s) {
    sched_plan *p = &s->plan;
    int32_t decodes_left = 0;
    for (const sched_seq *q = s->running.head; q; q = q->next) decodes_left += is_decode(q);
    for (sched_seq *q = s->running.head, *next; q; q = next) {
        next = q->next;
        if (!is_decode(q)) continue;
        decodes_left--;
        if (p->n_tokens >= p->budget) break;
        if (q->n_spec > 0) {
            const int32_t by_budget = p->budget - p->n_tokens - 1 - decodes_left;
            const int32_t by_rows = extra_rows(s);
            int32_t keep = IFD_MAX(0, IFD_MIN(q->n_spec, IFD_MIN(by_budget, by_rows)));
            while (keep > 0 && !kv_can_alloc_slots(s->kv, &q->kv, 1 + keep)) keep--;
            trim_spec(q, q->n_spec - keep);
        }
        bool skip = false;
        while (!kv_can_alloc_slots(s->kv, &q->kv, 1)) {
            sched_seq *victim = s->running.tail;
            /* never preempt something already planned this step */
            while (victim && victim->n_scheduled && victim != q) victim = victim->prev;
            if (!victim) break;
            if (victim == q && s->running.n == 1) {
                /* alone and still no slot: preempting itself would only repeat this;
                 * unless imports hold blocks: they will run (and be preemptible) */
                if (!s->holding.n) give_up(s, q);
                skip = true;
                break;
            }
            if (victim == next) next = next->next;
            preempt(s, victim);
            if (victim == q) {
                skip = true;
                break;
            }
        }
        if (skip || !kv_can_alloc_slots(s->kv, &q->kv, 1 + q->n_spec)) {
            if (q->status == SCHED_RUNNING) sched_drop_spec(q);
            continue;
        }
        kv_alloc_slots(s->kv, &q->kv, 1 + q->n_spec);
        plan_add(s, q, 1 + q->n_spec);
        p->n_decodes++;
        if (q->decodes_since_stall < INT32_MAX) q->decodes_since_stall++;
    }
}

/* 2. running sequences still prefilling (chunked) */
static void plan_running_prefills(sched *s) {
    sched_plan *p = &s->plan;
    for (sched_seq *q = s->running.head; q && p->n_tokens < p->budget; q = q->next) {
        const int32_t remaining = n_known(q) - q->n_computed;
        if (remaining <= 1 || q->n_scheduled) continue;
        int32_t chunk = cap_by_rows(s, q, IFD_MIN(remaining, p->budget - p->n_tokens));
        while (chunk > 0 && !kv_can_alloc_slots(s->kv, &q->kv, chunk)) chunk /= 2;
        if (chunk <= 0) continue;
        kv_alloc_slots(s->kv, &q->kv, chunk);
        plan_add(s, q, chunk);
    }
}

/* 3. admit waiting sequences while budget, seats and blocks last */
static void plan_admissions(sched *s) {
    sched_plan *p = &s->plan;
    while (s->waiting.head && p->n_tokens < p->budget && s->running.n + s->holding.n < s->cfg.max_num_seqs) {
        sched_seq *q = s->waiting.head;
        if (!q->kv_ready) {
            if (kv_seq_init(s->kv, &q->kv)) break;
            q->kv_ready = true;
        }
        if (!q->admitted_once) /* outside a burst it may be paused by the next one */
            q->decodes_since_stall = s->burst_left > 0 ? 0 : s->cfg.stall_every;
        if (q->n_computed == 0 && q->kv.n_blocks == 0 && !q->all_prompt_logits) {
            const int32_t hit = kv_match_prefix(s->kv, &q->kv, q->tokens, q->n_tokens);
            q->n_computed = hit;
            if (!q->admitted_once) q->cached_tokens = hit;
        }
        const int32_t remaining = q->n_tokens - q->n_computed;
        const int32_t chunk = cap_by_rows(s, q, IFD_MIN(remaining, p->budget - p->n_tokens));
        if (!kv_can_alloc_slots(s->kv, &q->kv, chunk)) {
            /* not enough blocks now: give back the prefix references and wait */
            kv_free(s->kv, &q->kv);
            q->n_computed = 0;
            break;
        }
        kv_alloc_slots(s->kv, &q->kv, chunk);
        q_remove(&s->waiting, q);
        q_push_back(&s->running, q);
        q->status = SCHED_RUNNING;
        q->admit_seq = ++s->admit_counter;
        q->admitted_once = true;
        plan_add(s, q, chunk);
    }
    IFD_ASSERT(s->running.n + s->holding.n <= s->cfg.max_num_seqs);
}

void sched_set_burst(sched *s, int32_t tokens) { s->burst_budget = IFD_MAX(tokens, 0); }

/* A prompt is still to be fed: a running sequence with more than one token to feed, or
 * a waiting one with a seat for it. */
static bool prefill_pending(const sched *s) {
    for (const sched_seq *q = s->running.head; q; q = q->next)
        if (n_known(q) - q->n_computed > 1) return true;
    return s->waiting.head && s->running.n + s->holding.n < s->cfg.max_num_seqs;
}

/* Decodes are running and every one of them may be paused now. */
static bool burst_may_start(const sched *s) {
    bool any = false;
    for (const sched_seq *q = s->running.head; q; q = q->next) {
        if (n_known(q) - q->n_computed != 1) continue;
        if (q->decodes_since_stall < s->cfg.stall_every) return false;
        any = true;
    }
    return any;
}

/* Plan a step of a prefill burst (no decodes, the full budget) if one is under way or
 * may start; false: plan a normal step. */
static bool schedule_burst(sched *s) {
    sched_plan *p = &s->plan;
    /* no burst under way and none may start: no scan of the queues (every step) */
    if (s->cfg.stall_every <= 0 || (s->burst_left <= 0 && s->burst_budget <= 0) ||
        !prefill_pending(s)) {
        s->burst_left = 0;
        return false;
    }
    if (s->burst_left <= 0) {
        if (s->burst_budget <= 0 || !burst_may_start(s)) return false;
        s->burst_left = s->burst_budget;
        for (sched_seq *q = s->running.head; q; q = q->next) q->decodes_since_stall = 0;
        s->n_bursts++;
    }
    p->budget = IFD_MIN(s->cfg.max_num_batched_tokens, s->burst_left);
    plan_running_prefills(s);
    plan_admissions(s);
    if (p->n_seqs == 0) { /* nothing plannable: no burst */
        s->burst_left = 0;
        return false;
    }
    s->burst_left -= p->n_tokens;
    return true;
}

static void schedule_once(sched *s, int32_t mixed_budget) {
    sched_plan *p = &s->plan;
    const int32_t hard = s->cfg.max_num_batched_tokens;
    p->n_seqs = p->n_tokens = p->n_logits = p->n_decodes = 0;
    p->budget = hard;
    if (schedule_burst(s)) return;
    p->budget = hard;
    plan_decodes(s);
    if (p->n_decodes > 0 && mixed_budget > 0) {
        const int32_t floor_ = p->n_tokens + s->cfg.min_prefill_tokens;
        p->budget = IFD_MIN(hard, IFD_MAX(mixed_budget, floor_));
    }
    plan_running_prefills(s);
    plan_admissions(s);
}

/* Drafts of sequences left out of the plan go (a burst step, a decode that found no
 * slot): after sched_schedule only planned entries carry drafts. */
static void drop_unplanned_spec(sched *s) {
    for (sched_seq *q = s->running.head; q; q = q->next)
        if (q->n_spec > 0 && !q->n_scheduled) sched_drop_spec(q);
}

const sched_plan *sched_schedule(sched *s, int32_t mixed_budget) {
    for (;;) {
        schedule_once(s, mixed_budget);
        drop_unplanned_spec(s);
        if (s->plan.n_seqs > 0 || (!s->running.head && !s->waiting.head)) return &s->plan;
        /* imports hold what is missing: wait for them to run (then they can be preempted) */
        if (s->holding.n > 0 && s->running.n <= 1) return &s->plan;
        /* Live sequences, none plannable, and nothing planned will free blocks: make
         * room (each pass preempts or gives up one sequence, so this ends). With an
         * empty running set the waiting head was refused the whole pool. */
        if (s->running.n > 1)
            preempt(s, s->running.tail);
        else
            give_up(s, s->running.head ? s->running.head : s->waiting.head);
    }
}

void sched_commit(sched *s, sched_seq *q, int32_t n_accepted) {
    IFD_ASSERT(n_accepted >= 0 && n_accepted <= q->n_scheduled);
    q->n_computed += n_accepted;
    if (n_accepted < q->n_scheduled) kv_truncate(s->kv, &q->kv, q->n_computed);
    q->n_scheduled = 0;
    if (q->n_spec > 0) {
        q->n_tokens = q->n_computed;
        q->n_spec = 0;
    }
    kv_commit(s->kv, &q->kv, q->tokens, q->n_computed);
}

int32_t sched_fork(sched *s, sched_seq *q) {
    int32_t seated_n = 0;
    for (sched_seq *c = q->fork_list, *next; c; c = next) {
        next = c->fork_next;
        c->fork_next = NULL;
        IFD_ASSERT(c->status == SCHED_FORK_PENDING);
        bool seated = s->running.n + s->holding.n < s->cfg.max_num_seqs;
        if (seated && !c->kv_ready) {
            seated = kv_seq_init(s->kv, &c->kv) == 0;
            c->kv_ready = seated;
        }
        if (seated) seated = kv_fork(s->kv, &q->kv, &c->kv) == 0;
        if (!seated) {
            /* c->tokens already holds the prompt; nothing computed */
            c->status = SCHED_WAITING;
            q_insert_waiting(&s->waiting, c, false);
            continue;
        }
        memcpy(c->tokens, q->tokens, (size_t)q->n_tokens * sizeof(int32_t));
        c->n_tokens = q->n_tokens;
        c->n_computed = q->n_computed;
        c->status = SCHED_RUNNING;
        c->admit_seq = ++s->admit_counter;
        c->admitted_once = true;
        q_push_back(&s->running, c);
        seated_n++;
    }
    q->fork_list = NULL;
    IFD_ASSERT(s->running.n + s->holding.n <= s->cfg.max_num_seqs);
    return seated_n;
}

/* ---- step cost model ------------------------------------------------------------------ */

#define COST_DECAY 0.95 /* weight of the past per observation: ~20 steps of memory */

void sched_cost_init(sched_cost *c) { memset(c, 0, sizeof *c); }

static double cost_predict(const sched_cost *c, int32_t tokens) { return c->a + c->b * tokens; }

void sched_cost_observe(sched_cost *c, int32_t tokens, double ms) {
    if (tokens < 1 || !(ms >= 0.0) || ms > 1e9) return;
    if (c->n_obs >= 3) { /* clip only once the fit stands on a few steps */
        const double pred = cost_predict(c, tokens);
        if (pred > 0 && ms > 2.0 * pred) ms = 2.0 * pred;
    }
    const double x = tokens, y = ms;
    c->sw = c->sw * COST_DECAY + 1.0;
    c->sx = c->sx * COST_DECAY + x;
    c->sy = c->sy * COST_DECAY + y;
    c->sxx = c->sxx * COST_DECAY + x * x;
    c->sxy = c->sxy * COST_DECAY + x * y;
    c->n_obs++;
    const double mx = c->sx / c->sw, my = c->sy / c->sw;
    const double vxx = c->sxx / c->sw - mx * mx, vxy = c->sxy / c->sw - mx * my;
    double a, b;
    if (vxx > 0.25 && vxy > 0) {
        b = vxy / vxx;
        a = my - b * mx;
        if (a < 0) { /* the per-step part cannot be negative: all of it per token */
            a = 0;
            b = my / mx;
        }
    } else {
        /* steps of one size (or noise without a slope): charge everything per token,
         * which over-estimates bigger steps: a cautious budget until mixed steps come */
        a = 0;
        b = my / mx;
    }
    c->a = a;
    c->b = b;
}

int32_t sched_cost_budget(const sched_cost *c, double max_ms, int32_t cap) {
    if (max_ms <= 0) return cap;
    if (c->n_obs == 0) return 1; /* nothing measured yet: the scheduler's floor */
    if (!(c->b > 0)) return cap;
    const double t = (max_ms - c->a) / c->b;
    if (t >= (double)cap) return cap;
    return t < 1.0 ? 1 : (int32_t)t;
}
