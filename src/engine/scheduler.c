/* scheduler.c — decide what runs this step (engine thread only).
 *
 * Every running sequence that is decoding (one new token) is taken first; the rest of
 * the token budget (max_num_batched_tokens) goes to prefill chunks — running
 * sequences still prefilling, then waiting ones in (priority, arrival) order — so a
 * long prompt is split across steps while the others keep decoding (chunked prefill).
 * max_num_seqs caps the running set. When a decode cannot get a KV slot, the most
 * recently admitted running sequence is preempted (blocks freed, recomputed later) and
 * goes back to the head of the waiting queue.
 *
 * Bounds, by construction: only running sequences are planned, each at most once, and
 * the running set never exceeds max_num_seqs (admission here, forks in engine.c), so a
 * plan has at most max_num_seqs sequences and logits rows; every chunk is cut to the
 * token budget left. plan_add asserts all three (the step buffers are sized by them).
 *
 * Progress: a step in which live sequences exist but none could be planned would
 * repeat forever (a lone sequence the whole pool cannot hold preempts itself, gets its
 * blocks back from the prefix cache and tries again). Instead the most recently
 * admitted running sequence is preempted and the step rescheduled, and a sequence that
 * cannot proceed with nothing left to preempt is finished (engine_finish_stuck, reason
 * length) — never preempted in a loop. The engine clamps max_model_len to what the pool
 * holds at create, so a lone sequence always fits: this is the last resort, not a path
 * that tests reach (random small pools, budgets and seat counts never took it). */
#include "../util/common.h"
#include "engine_internal.h"

void seq_queue_push_back(seq_queue *q, sequence *s) {
    s->next = NULL;
    s->prev = q->tail;
    if (q->tail)
        q->tail->next = s;
    else
        q->head = s;
    q->tail = s;
    q->n++;
}

void seq_queue_push_front(seq_queue *q, sequence *s) {
    s->prev = NULL;
    s->next = q->head;
    if (q->head)
        q->head->prev = s;
    else
        q->tail = s;
    q->head = s;
    q->n++;
}

void seq_queue_remove(seq_queue *q, sequence *s) {
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

void seq_queue_insert_waiting(seq_queue *q, sequence *s, bool preempted) {
    const int32_t pr = s->req->priority;
    sequence *at = q->head;
    if (preempted) {
        while (at && at->req->priority < pr) at = at->next;
    } else {
        while (at && (at->req->priority < pr ||
                      (at->req->priority == pr && at->req->arrival <= s->req->arrival)))
            at = at->next;
    }
    if (!at) {
        seq_queue_push_back(q, s);
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

static void plan_add(inferd_engine *e, sequence *s, int32_t n) {
    step_plan *p = &e->plan;
    /* the step buffers (plan, b_*, logits) hold max_num_seqs sequences / logits rows
     * and max_num_batched_tokens tokens; the callers keep within them */
    IFD_ASSERT(s->status == SEQ_RUNNING && s->n_scheduled == 0 && n > 0);
    IFD_ASSERT(p->n_seqs < e->opt.max_num_seqs);
    IFD_ASSERT(n <= e->opt.max_num_batched_tokens - p->n_tokens);
    s->n_scheduled = n;
    s->logits_row = -1;
    if (s->n_computed + n == s->n_tokens) s->logits_row = p->n_logits++;
    p->seqs[p->n_seqs++] = s;
    p->n_tokens += n;
    IFD_ASSERT(p->n_logits <= p->n_seqs);
}

static void schedule_once(inferd_engine *e) {
    step_plan *p = &e->plan;
    p->n_seqs = p->n_tokens = p->n_logits = 0;
    const int32_t budget = e->opt.max_num_batched_tokens;

    /* 1. decodes: running sequences with exactly one token to feed */
    for (sequence *s = e->running.head, *next; s; s = next) {
        next = s->next;
        if (s->n_tokens - s->n_computed != 1 || s->n_scheduled) continue;
        if (p->n_tokens >= budget) break;
        bool gave_up = false;
        while (!kv_can_alloc_slots(e->kv, &s->kv, 1)) {
            sequence *victim = e->running.tail;
            /* never preempt something already planned this step */
            while (victim && victim->n_scheduled && victim != s) victim = victim->prev;
            if (!victim) break;
            if (victim == s && e->running.n == 1) {
                /* alone and still no slot: preempting itself would only repeat this */
                engine_finish_stuck(e, s);
                gave_up = true;
                break;
            }
            if (victim == next) next = next->next;
            engine_preempt(e, victim);
            if (victim == s) {
                gave_up = true;
                break;
            }
        }
        if (gave_up) continue;
        if (!kv_can_alloc_slots(e->kv, &s->kv, 1)) continue; /* cannot happen once alone */
        kv_alloc_slots(e->kv, &s->kv, 1);
        plan_add(e, s, 1);
    }

    /* 2. running sequences still prefilling (chunked) */
    for (sequence *s = e->running.head; s && p->n_tokens < budget; s = s->next) {
        const int32_t remaining = s->n_tokens - s->n_computed;
        if (remaining <= 1 || s->n_scheduled) continue;
        int32_t chunk = IFD_MIN(remaining, budget - p->n_tokens);
        while (chunk > 0 && !kv_can_alloc_slots(e->kv, &s->kv, chunk)) chunk /= 2;
        if (chunk <= 0) continue;
        kv_alloc_slots(e->kv, &s->kv, chunk);
        plan_add(e, s, chunk);
    }

    /* 3. admit waiting sequences while budget, seats and blocks last */
    while (e->waiting.head && p->n_tokens < budget && e->running.n < e->opt.max_num_seqs) {
        sequence *s = e->waiting.head;
        if (!s->kv_ready) {
            if (kv_seq_init(e->kv, &s->kv)) break;
            s->kv_ready = true;
        }
        if (s->n_computed == 0 && s->kv.n_blocks == 0) {
            int32_t hit = kv_match_prefix(e->kv, &s->kv, s->tokens, s->n_tokens);
            s->n_computed = hit;
            if (s->req->t_first_sched == 0.0) s->req->cached_tokens = hit;
        }
        const int32_t remaining = s->n_tokens - s->n_computed;
        int32_t chunk = IFD_MIN(remaining, budget - p->n_tokens);
        if (!kv_can_alloc_slots(e->kv, &s->kv, chunk)) {
            /* not enough blocks now: give back the prefix references and wait */
            kv_free(e->kv, &s->kv);
            s->n_computed = 0;
            break;
        }
        kv_alloc_slots(e->kv, &s->kv, chunk);
        seq_queue_remove(&e->waiting, s);
        seq_queue_push_back(&e->running, s);
        s->status = SEQ_RUNNING;
        s->admit_seq = ++e->admit_counter;
        if (s->req->t_first_sched == 0.0) s->req->t_first_sched = ifd_now_s();
        plan_add(e, s, chunk);
    }
    IFD_ASSERT(e->running.n <= e->opt.max_num_seqs);
}

void sched_schedule(inferd_engine *e) {
    for (;;) {
        schedule_once(e);
        if (e->plan.n_seqs > 0 || (!e->running.head && !e->waiting.head)) return;
        /* Live sequences, none plannable, and nothing planned will free blocks: make
         * room (each pass preempts or finishes one sequence, so this ends). With an
         * empty running set the waiting head was refused the whole pool. */
        if (e->running.n > 1)
            engine_preempt(e, e->running.tail);
        else
            engine_finish_stuck(e, e->running.head ? e->running.head : e->waiting.head);
    }
}
