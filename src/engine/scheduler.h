/* scheduler.h — what runs each step: the waiting and running queues, admission,
 * preemption, forking of n > 1 choices, the token budget, and the step plan.
 *
 * What it does: owns the queues of sched_seq (the scheduler's view of one sequence,
 * embedded by the engine in its own sequence), allocates their KV slots through the
 * kv_cache check-then-act pairs, and returns a plan: which sequences feed how many
 * tokens and which rows of the step's logits belong to each. After the forward and the
 * sampling, the engine tells it how many fed tokens were accepted (sched_commit: the
 * prefix-cache registration happens there), forks the choices of an n > 1 request when
 * its prompt is done (sched_fork), and removes finished sequences (sched_remove).
 * What it does not: know the model, the backend, requests, sampling or output. It
 * depends on kv_cache.h only, so tests drive it with a fake backend (test_scheduler.c).
 * Outcomes that the engine must act on come back to it: a sequence that cannot
 * proceed even with nothing left to preempt is moved to the stuck queue
 * (sched_next_stuck), and the engine finishes it.
 *
 * Not thread-safe: the engine thread owns the scheduler and every sched_seq. Nothing
 * on the step path allocates (sched_init sizes the plan by max_num_seqs).
 *
 * Also here: sched_cost, the fitted cost of a forward (ms ~ a + b * tokens) from which
 * the engine derives the token budget of a step that mixes prefill with decodes. */
#ifndef INFERD_SCHEDULER_H
#define INFERD_SCHEDULER_H
#include "../util/layer/engine.h"

#include <stdbool.h>
#include <stdint.h>

#include "kv_cache.h"

typedef enum sched_status {
    SCHED_NEW = 0,          /* not yet given to the scheduler */
    SCHED_WAITING = 1,      /* in the waiting queue (new or preempted) */
    SCHED_RUNNING = 2,      /* in the running set */
    SCHED_FORK_PENDING = 3, /* choice 1.. of an n > 1 request, waiting for the first
                               choice's prompt (on its parent's fork list) */
    SCHED_STUCK = 4,        /* in the stuck queue: the engine must finish it */
    SCHED_FINISHED = 5,     /* removed (sched_remove) */
    SCHED_HOLDING = 6,      /* in the holding queue: a seat and blocks for its whole prompt,
                               whose KV is being written from elsewhere (PD import); never
                               planned nor preempted until sched_release_hold */
} sched_status;

typedef struct sched_seq sched_seq;
struct sched_seq {
    sched_status status;
    kv_seq kv;
    bool kv_ready;          /* kv_seq_init done */
    int32_t *tokens;        /* prompt + generated, owned by the caller; the caller appends */
    int32_t n_tokens;       /* known tokens */
    int32_t n_computed;     /* tokens whose KV is final (accepted) */
    int32_t n_scheduled;    /* tokens fed this step (0 outside a step) */
    int32_t n_prompt;
    /* Speculative decoding: the last n_spec of tokens[0..n_tokens) are draft tokens,
     * set by the caller before sched_schedule on a decoding sequence (one known token
     * to feed). It is then planned as one verification entry: 1 + n_spec tokens fed,
     * 1 + n_spec logits rows. The scheduler may drop drafts (n_tokens and n_spec
     * shrink) when blocks, the token budget or logits rows are short, and drops all of
     * those of a sequence it does not plan or preempts, so after sched_schedule n_spec
     * > 0 only on a planned entry, whose n_logits is 1 + n_spec. sched_commit of a
     * verification removes them (see there). */
    int32_t n_spec;
    int32_t priority;       /* lower runs first */
    uint64_t arrival;       /* FCFS order within a priority */
    uint64_t admit_seq;     /* admission order: preemption picks the largest */
    /* every fed token of the prompt gets a logits row (prompt logprobs), and a prefix-
     * cache hit is never taken (the prompt is computed in full). The caller clears it
     * once the prompt's rows have been consumed, so a recompute after preemption asks
     * for the last row only. */
    bool all_prompt_logits;
    bool admitted_once;     /* cached_tokens set from its first admission */
    int32_t decodes_since_stall; /* decodes fed since a prefill burst last paused it */
    int32_t cached_tokens;  /* prefix-cache hit at its first admission */
    sched_seq *fork_list;   /* parent: pending children (SCHED_FORK_PENDING), in order */
    sched_seq *fork_next;   /* child: next on its parent's fork list */
    sched_seq *prev, *next; /* queue links */
};

typedef struct sched_queue {
    sched_seq *head, *tail;
    int32_t n;
} sched_queue;

/* One planned sequence. Its logits rows are those of its LAST n_logits fed tokens
 * (positions seq->n_computed + n_tokens - n_logits ..), rows logits_first.. of the
 * step: the last token when the chunk reaches the end of the known tokens, every
 * prompt token fed when all_prompt_logits (k+1 rows for a speculative verification
 * would be the same shape). n_logits 0: logits_first is -1. */
typedef struct sched_entry {
    sched_seq *seq;
    int32_t n_tokens;
    int32_t logits_first;
    int32_t n_logits;
} sched_entry;

typedef struct sched_plan {
    sched_entry *entries;   /* [max_num_seqs] */
    int32_t n_seqs;         /* <= max_num_seqs */
    int32_t n_tokens;       /* <= budget <= max_num_batched_tokens */
    int32_t n_logits;       /* <= max_logits */
    int32_t n_decodes;      /* entries with one token that were already running */
    int32_t budget;         /* the token budget this step was planned under */
} sched_plan;

typedef struct sched_config {
    int32_t max_num_seqs;           /* running-set cap */
    int32_t max_num_batched_tokens; /* hard cap on a step's tokens (buffers are sized by it) */
    int32_t max_logits;             /* logits rows per step, >= max_num_seqs */
    int32_t min_prefill_tokens;     /* prefill tokens a mixed step may always take, so a
                                       prompt progresses however slow the decodes are */
    int32_t stall_every;            /* prefill bursts: a running sequence is paused by one
                                       at most once per this many decodes (0: no bursts) */
} sched_config;

typedef struct sched {
    sched_config cfg;
    kv_cache *kv;
    sched_queue waiting, running, stuck, holding; /* running.n + holding.n <= max_num_seqs */
    uint64_t admit_counter;
    uint64_t n_preemptions;
    uint64_t n_bursts;
    int32_t burst_budget;           /* tokens a new prefill burst may take (sched_set_burst) */
    int32_t burst_left;             /* tokens left to the burst under way (0: none) */
    sched_plan plan;
} sched;

/* cfg->max_logits < max_num_seqs is raised to it. 0 or IFD_ERR_INVALID / NOMEM. */
int sched_init(sched *s, const sched_config *cfg, kv_cache *kv);
void sched_deinit(sched *s);

/* q (SCHED_NEW, tokens/n_tokens/n_prompt/priority/arrival set) joins the waiting queue
 * in (priority, arrival) order. */
void sched_add(sched *s, sched_seq *q);
/* child (SCHED_NEW, the same prompt in its tokens) goes to the end of parent's fork
 * list (SCHED_FORK_PENDING): it is forked from parent when the caller calls sched_fork
 * after parent's prompt is done. Call before parent's prompt is done. */
void sched_add_fork(sched_seq *parent, sched_seq *child);

/* Plan one step. Running sequences that decode (one token to feed) come first, each
 * with one row; then running sequences still prefilling, then waiting ones in
 * (priority, arrival) order, in chunks cut to the budget: mixed_budget tokens in all
 * when at least one decode is planned (raised to n_decodes + min_prefill_tokens, so
 * prefill always progresses), max_num_batched_tokens when none is; mixed_budget <= 0
 * means max_num_batched_tokens too. A decode without a KV slot preempts the most
 * recently admitted running sequence not yet planned (back to the head of its
 * priority band in the waiting queue, its blocks freed). Returns the plan, valid until
 * the next call; it is empty only when nothing is live (check sched_next_stuck). */
const sched_plan *sched_schedule(sched *s, int32_t mixed_budget);

/* Prefill bursts (cfg.stall_every > 0): when prompts wait and every running decode has
 * fed stall_every decodes since its last pause (a sequence admitted outside a burst
 * starts with that credit), steps plan no decodes and give their whole
 * max_num_batched_tokens to prefill, until the prompts are done or `tokens` prefill
 * tokens have run (the caller derives it from a time bound, each step). Each running
 * sequence is paused once per burst, so at most one of its stall_every inter-token gaps
 * is long: the p99 of the gaps stays the mixed steps' bound (max_step_ms) while a
 * backlog of prompts drains at the full prefill rate instead of at what a mixed step
 * leaves. A burst that can plan nothing (no seat, no blocks) gives way to a normal
 * step. tokens <= 0: no new burst. */
void sched_set_burst(sched *s, int32_t tokens);

/* After the step: n_accepted of q's n_scheduled fed tokens are final (all of them,
 * except after a speculative verification). n_computed advances, the newly full
 * blocks go into the prefix cache, n_scheduled returns to 0. Call it for every
 * planned sequence before it is removed (a finish releases its blocks).
 * A verification (n_spec > 0): the rejected positions leave the KV (kv_truncate: a
 * block left empty goes back to the pool) and the tokens past the accepted ones leave
 * tokens (n_tokens = n_computed, n_spec = 0); the caller appends what it emits. Only
 * accepted tokens ever reach the prefix cache. */
void sched_commit(sched *s, sched_seq *q, int32_t n_accepted);

/* q's prompt is done (committed): each child on its fork list that finds a seat in
 * the running set shares q's blocks (copy-on-write) and its tokens (q->tokens[0..
 * n_tokens) are copied into child->tokens) and is SCHED_RUNNING, so it can sample from
 * q's logits row this step; the others join the waiting queue (FCFS with their
 * arrival) and prefill the prompt themselves later (the prefix cache serves its full
 * blocks). Returns how many were seated. The fork list is emptied. */
int32_t sched_fork(sched *s, sched_seq *q);

/* PD import. q (SCHED_NEW, its prompt in tokens, n_tokens == n_prompt) takes a seat and
 * blocks for its whole prompt: the longest cached prefix (kv_match_prefix), fresh blocks
 * for the rest. Returns the cached tokens (q->n_computed, a multiple of the block size)
 * and q is SCHED_HOLDING; or -1 when no seat or too few blocks (nothing changed: call
 * again later) or the prompt can never fit (IFD_ERR_LIMIT as -2). The caller fills the
 * KV of positions n_computed .. n_prompt in q->kv.blocks, then calls sched_release_hold. */
int32_t sched_admit_hold(sched *s, sched_seq *q);
/* q (SCHED_HOLDING) joins the running set with its first n_computed tokens' KV final
 * (n_prompt when the import succeeded, or fewer: the KV past them is dropped and the
 * scheduler prefills the rest as usual); full blocks go into the prefix cache. */
void sched_release_hold(sched *s, sched_seq *q, int32_t n_computed);

/* Drop q's draft tokens (n_tokens -= n_spec, n_spec = 0); q must not be planned. */
void sched_drop_spec(sched_seq *q);

/* Take q out of whatever queue holds it and free its KV; q becomes SCHED_FINISHED. A
 * pending child is not unlinked from its parent's fork list (its fork_next is cleared,
 * which would cut off the siblings after it): pending children are removed together
 * with their parent, as the engine does. Safe in any state. A parent's
 * pending children are not touched (the caller removes them). */
void sched_remove(sched *s, sched_seq *q);

/* First sequence the scheduler gave up on (its KV cannot be had even alone), or NULL.
 * It stays in the stuck queue (holding no blocks) until the caller finishes it
 * (reason: length) and calls sched_remove. */
sched_seq *sched_next_stuck(sched *s);

/* ---- step cost model ------------------------------------------------------------------ */

/* ms(step) ~ a + b * tokens, fitted by least squares over exponentially decayed sums
 * (recent steps weigh most; a machine whose speed changes is followed within ~20
 * steps), each observation clipped to 2x the current prediction once the fit stands,
 * so a step stalled by another process does not shrink the budget for long. */
typedef struct sched_cost {
    double sw, sx, sy, sxx, sxy; /* decayed weights and moments */
    int32_t n_obs;
    double a, b;                 /* the fit (ms, ms per token) */
} sched_cost;

void sched_cost_init(sched_cost *c);
void sched_cost_observe(sched_cost *c, int32_t tokens, double ms);
/* Most tokens a step may hold to take at most max_ms: floor((max_ms - a) / b), at
 * least 1, at most cap; cap when max_ms <= 0; 1 (the scheduler's floor) before any
 * observation, so the first mixed step cannot stall the decodes for a whole cap. */
int32_t sched_cost_budget(const sched_cost *c, double max_ms, int32_t cap);

#endif
