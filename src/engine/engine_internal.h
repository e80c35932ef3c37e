/* engine_internal.h — the engine's private types: requests, sequences, queues, and the
 * engine struct. Shared by engine.c (requests, inbox, thread, postprocess) and runner.c
 * (flatten the scheduler's step plan into one batch). scheduler.c does not include it.
 * Everything here is owned by the engine thread except the inbox (mutex). */
#ifndef INFERD_ENGINE_INTERNAL_H
#define INFERD_ENGINE_INTERNAL_H
#include "../util/layer/engine.h"

#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../backend/backend.h"
#include "../grammar/grammar.h"
#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include "inferd.h"
#include "engine_tap.h"
#include "batch.h"
#include "draft.h"
#include "kv_cache.h"
#include "scheduler.h"
#include "sampler.h"
#include "stop.h"

struct request;

/* Constrained decoding with reasoning: before the grammar applies, the output may be
 * waiting to see whether it opens a reasoning (WAIT), or inside one (REASONING), the
 * last bytes of which are kept to find its end across token boundaries. */
typedef enum { GMODE_ACTIVE = 0, GMODE_WAIT, GMODE_REASONING } gmode;
typedef struct seq_gram {
    uint8_t mode;
    uint8_t n_tail;
    char tail[30]; /* the reasoning's last bytes (up to strlen(reasoning_end) - 1) */
} seq_gram;

/* One choice of a request. ss is the scheduler's view (queues, KV, token counts); the
 * rest is the engine's (sampling, detokenizing, stop matching). */
typedef struct sequence {
    sched_seq ss;         /* ss.tokens: prompt + generated, capacity max_model_len */
    struct request *req;
    int32_t index;        /* choice index */
    int32_t n_generated;
    int32_t max_tokens;   /* generation cap for this sequence (0: the prompt only) */
    ifd_rng rng;
    sampler_state samp;   /* penalty counts etc. */
    tok_detok detok;
    stop_matcher stop;
    inferd_finish_reason finish;
    const char *stop_reason;
    /* speculative decoding (speculate.c) */
    draft_seq dseq;       /* its state in the draft model's KV */
    /* per proposer, [0] the n-gram lookup and [1] the draft model (one's tokens say
     * nothing of the other's: n-gram misses on code must not switch the draft off) */
    float spec_alpha[2];      /* moving average of the per-token acceptance */
    int32_t spec_obs[2];      /* draft tokens observed since the last reset */
    int32_t spec_retry_at[2]; /* switched off: n_generated at which it tries again (0: on) */
    int32_t spec_backoff[2];  /* tokens of its last switch-off (doubles each time) */
    int32_t spec_idle[2];     /* measured, left plain by the choice: steps in a row */
    int32_t spec_idle_max[2]; /* steps after which it forgets its acceptance (doubles) */
    int32_t spec_src;     /* this step's drafts came from: 1 n-gram, 2 the draft model */
    int32_t spec_proposed, spec_accepted; /* its drafts verified / accepted (output events) */
    gram_state gstate;    /* constrained decoding: the grammar's state after its output */
    seq_gram g;           /* ... and where the output stands against its reasoning */
} sequence;

static inline sequence *seq_of(sched_seq *q) {
    return (sequence *)(void *)((char *)q - offsetof(sequence, ss));
}

typedef struct request {
    uint64_t id;
    int32_t priority;
    uint64_t arrival;     /* FCFS order within a priority */
    inferd_output_cb cb;
    void *user;
    inferd_sampling sp;   /* stop / logit_bias / stop ids point into owned copies below */
    sampler_params sparams;
    char **stop_strs;
    size_t *stop_lens;
    inferd_logit_bias *bias;
    int32_t *stop_ids;
    gram *gram;           /* constrained decoding (a reference), or NULL */
    char *rs_end;         /* the grammar applies after this (reasoning models), or NULL */
    int32_t rs_start_id;  /* the token that may open a reasoning first, or -1 */
    bool rs_may_open;     /* the output may open its reasoning (else the prompt did) */
    int32_t *prompt;
    int32_t n_prompt;
    int32_t cached_tokens;
    /* prompt logprobs (sp.prompt_logprobs >= 0): entry i-1 for prompt token i, each
     * 1 + plp_top entries; filled chunk by chunk, sent on choice 0's first event */
    inferd_token_logprob *plp; /* [(n_prompt - 1) * (1 + plp_top)] */
    int32_t plp_top;
    bool plp_sent;
    sequence *seqs;       /* n */
    int32_t n_seqs;
    int32_t n_live;       /* sequences not finished */
    bool forked;
    bool abort_requested;
    double t_submit, t_first_sched, t_first_token;
    /* PD (pd.c) */
    int32_t kv_hold_ms;        /* prefill side: pin the prompt's KV at the end (a lease) */
    inferd_kv_import_cb kv_import; /* decode side: the prompt's KV is imported */
    void *kv_import_user;
    uint8_t pd;                /* PD_NONE, PD_WAIT (no seat / blocks yet), PD_HOLD (importing) */
    bool pd_abort;             /* aborted while importing: ends when the import answers */
    bool pd_early;             /* importing: its first token is out already (inferd_kv_import_first) */
    uint64_t pd_lease;         /* prefill side: the lease made at the end (final event) */
    const int32_t *pd_blocks;
    int32_t pd_n_blocks;
    struct request *next_pd;   /* the queue of imports waiting for a seat and blocks */
    struct request *next_all; /* engine's list of live requests */
    struct request *next_inbox;
} request;

/* PD disaggregation's engine state (pd.c). */
enum { PD_NONE = 0, PD_WAIT = 1, PD_HOLD = 2 };
typedef struct pd_lease {
    uint64_t id;
    kv_seq kv;       /* holds the blocks (its own references) */
    double expiry;   /* ifd_now_s() */
    int32_t busy;    /* under mu: inferd_kv_read_lease calls copying its blocks */
    bool gone;       /* under mu: released or expired while busy (dropped when idle) */
} pd_lease;
typedef struct pd_msg {
    struct pd_msg *next;
    uint64_t id;     /* lease (release) or request (import answer) */
    int32_t token;   /* import answer: the first token, or -1 */
    bool release, recompute;
    bool early;      /* inferd_kv_import_first */
} pd_msg;
typedef struct pd_state {
    pd_lease *leases;
    int32_t n_leases, cap_leases;
    uint64_t next_lease;
    request *wait_head, *wait_tail; /* imports waiting for a seat and blocks */
    int32_t n_parked;      /* live requests waiting to import or importing */
    pd_msg *msgs;          /* under mu: releases and import answers, newest first */
    uv_timer_t timer;      /* threaded: lease expiry while leases exist */
    bool timer_init, timer_on;
    inferd_pd_stats cnt;   /* engine thread; published into pub by update_stats */
    inferd_pd_stats pub;   /* under mu */
    uint64_t compat_hash;
    char compat[256];
    size_t block_bytes;    /* one block, all layers, K and V */
} pd_state;

/* Step sizes (tokens) whose measured cost the adaptive choice keeps (speculate.c). */
#define SPEC_OBS_N 64

/* Speculative decoding's engine state (speculate.c). */
typedef struct spec_state {
    bool on;              /* a proposer is configured */
    int32_t K;
    bool ngram;
    int32_t ngram_min, ngram_max;
    bool adaptive;
    float min_acceptance;
    float p_min;          /* draft_p_min */
    draft *d;             /* the draft model, or NULL */
    int32_t d_rows;       /* the ids its logits rows hold (--draft-vocab, or its vocabulary) */
    /* measured forward cost, ms by tokens (one sequence), at create: target and draft */
    int32_t n_cost, n_dcost;
    double cost_n[24], cost_ms[24], dcost_n[24], dcost_ms[24];
    /* per-step scratch ([max_num_seqs]) */
    sched_seq **cand;
    int32_t *cap, *k, *src; /* src: 1 n-gram, 2 draft */
    int32_t *alt;           /* where the draft was picked: the n-gram's continuation (0: none) */
    int32_t *need;          /* the draft's first-round tokens, as the cost model counts them */
    double *catchup;        /* the draft's catch-up ms per token left (0: none) */
    int32_t *who, *got;     /* run_draft: a job's candidate, a candidate's drafts so far */
    double f_fwd, f_draft;  /* measured step time over the model's, moving averages */
    /* target forwards seen while serving whose every token had a logits row (decodes
     * and verifications only), by tokens: a moving average of their ms, and how many */
    double obs_ms[SPEC_OBS_N + 1];
    int32_t obs_cnt[SPEC_OBS_N + 1];
    bool optimistic;        /* choose_k's gate is being evaluated */
    int32_t n_plain;        /* the gate's plain decodes beside the candidates */
    int32_t *ngram_buf;     /* [max_num_seqs][K] */
    /* per proposer (prop_ix), over all sequences: the drafts observed while sequences were
     * still learning (their probes) and those accepted, decayed; a proposer whose pooled
     * acceptance falls below min_acceptance rests: no sequence probes it (those measured
     * go on) until `decodes` reaches rest_until; rest_len doubles while it stays low */
    double pool_obs[2], pool_acc[2];
    uint64_t decodes;       /* decoding sequence-steps so far (spec_propose's candidates) */
    uint64_t rest_until[2];
    int32_t rest_len[2];
    draft_job *jobs;
    inferd_stats cnt;     /* the spec_* counters */
    bool debug_accept_all; /* engine_spec_debug_accept_all (tests: a wrong rule) */
    bool debug_costs;      /* engine_spec_debug_costs: fixed tables, no correction */
} spec_state;

struct inferd_engine {
    inferd_engine_options opt;
    model *m;
    backend *be;
    kv_cache *kv;
    int32_t max_model_len;
    int32_t max_blocks_per_seq;
    int32_t n_vocab;

    /* engine-thread state */
    sched sch;            /* queues, admission, preemption, forks, the step plan */
    sched_cost cost;      /* measured forward cost: the token budget of mixed steps */
    const sched_plan *plan; /* this step's */
    request *live;        /* all live requests */
    /* flat batch buffers */
    step_batch batch;     /* the flat batch's host buffers (runner.c) */
    int32_t *copy_src, *copy_dst;
    int32_t max_logits;   /* logits rows per step (>= max_num_seqs; prompt logprobs) */
    float *logits;        /* [max_logits][n_vocab] */
    sampler_scratch scratch;
    inferd_token_logprob *lp_buf;
    /* this step's draws (postprocess): the sequences that advance, in order, and the
     * logits row each draws from; on the device (backend_ops.sample) when dev_sample */
    bool dev_sample;
    int32_t n_adv;
    sequence **adv_seq;          /* [max_num_seqs] */
    int32_t *adv_row;            /* [max_num_seqs] logits row of each */
    int32_t *adv_tok;            /* [max_num_seqs] */
    backend_sample_row *adv_rows; /* [max_num_seqs] */
    backend_logprob *adv_lp;     /* [max_num_seqs][1 + BACKEND_SAMPLE_MAX_TOP] */
    /* this step's verifications drawn on the device (verify_on_device) */
    const sched_entry **ver;     /* [max_num_seqs] */
    int32_t n_ver;
    backend_sample_row *ver_rows; /* [max_logits] */
    int32_t *ver_tok;            /* [max_logits] */
    backend_logprob *ver_lp;     /* [max_logits][1 + BACKEND_SAMPLE_MAX_TOP] */
    gram_vocab *gvocab;   /* the vocabulary as grammars see it (built on first use) */
    int32_t *gextra;      /* [SAMPLER_MAX_EXTRA] grammar_constrain's extra allowed ids */
    uint32_t *dmask;      /* [max_num_seqs][mask words] masks of the device draws (lazy) */
    int32_t *dextra;      /* [max_num_seqs][SAMPLER_MAX_EXTRA] their allowed-anyway ids */
    char *piece_buf;      /* [piece_cap]: one token's text from the detokenizer */
    size_t piece_cap;     /* from the vocabulary's longest token (engine create) */
    char *text_buf;       /* [text_cap]: one step's text of one sequence */
    size_t text_cap;
    ifd_rng seed_rng;     /* under mu */
    inferd_stats cnt;     /* engine-thread counters, published into stats by update_stats */
    engine_logits_tap tap; /* engine_tap.h: prompt rows for `inferd logits`, or NULL */
    spec_state spec;      /* speculative decoding */
    pd_state pd;          /* PD disaggregation */
    int32_t n_live;       /* requests on the live list */
    int32_t *vtok;        /* [K + 1] one verification's emitted tokens */
    void *tap_user;

    /* cross-thread inbox */
    pthread_mutex_t mu;
    request *inbox_head, *inbox_tail;
    uint64_t *abort_ids;  /* [cap_abort], n_abort pending */
    int32_t n_abort, cap_abort;
    uint64_t *abort_spare; /* [cap_spare], engine thread only: swapped with abort_ids when
                              the inbox is drained */
    int32_t cap_spare;
    uint64_t next_id, next_arrival;
    bool stopping;
    bool dead;            /* the backend lost its device (IFD_ERR_DEVICE_LOST): every
                             request fails from then on; set by the engine thread */
    inferd_stats stats;   /* snapshot, under mu */

    /* engine thread */
    bool threaded;
    uv_thread_t thread;
    uv_loop_t loop;
    uv_async_t async;
    uv_idle_t idle;
    bool idle_on;
    uv_sem_t started;
};

/* speculate.c */
int spec_init(inferd_engine *e, model *dm, backend_kind kind, const backend_config *bc,
              char *err, size_t err_bytes);
void spec_deinit(inferd_engine *e);
/* Before sched_schedule: drafts for the running decodes (tokens appended, ss.n_spec). */
int spec_propose(inferd_engine *e);
/* After a verification of s that proposed k and accepted a. */
void spec_observe(inferd_engine *e, sequence *s, int32_t k, int32_t a);
/* After a forward of n_tokens (n_logits rows) that took ms: the forward cost's correction
 * factor, and the average of its size where every token had a row. */
void spec_observe_step(inferd_engine *e, int32_t n_tokens, int32_t n_logits, double ms);
/* s is finished: its draft KV goes back. */
void spec_seq_done(inferd_engine *e, sequence *s);

/* engine.c, for pd.c */
void engine_request_end(inferd_engine *e, request *r, inferd_finish_reason why);
/* The token drawn for s (penalty state, stop checks, output event); true: s finished. */
bool engine_seq_take(inferd_engine *e, sequence *s, int32_t id);
/* Whether taking id leaves s running (no EOS, stop id, length limit; s has no stop
 * strings, whose matching could end it or hold text back). */
bool engine_take_continues(const inferd_engine *e, const sequence *s, int32_t id);
void engine_wake(inferd_engine *e);
void engine_update_stats(inferd_engine *e); /* publish the counters (inferd_engine_stats) */

/* pd.c */
void pd_init(inferd_engine *e, backend_kind kind); /* the compat hash; everything else zero */
void pd_deinit(inferd_engine *e); /* before kv_destroy: leases' tables, messages */
/* A request taken from the inbox: an import joins the waiting imports (true). */
bool pd_route(inferd_engine *e, request *r);
/* Imports that find a seat and blocks start (their callback runs); each step. */
void pd_admit(inferd_engine *e);
/* Releases and import answers (engine thread; called by drain_inbox). */
void pd_drain(inferd_engine *e);
/* An abort of r: true when pd.c took it (waiting: ended now; importing: deferred). */
bool pd_abort(inferd_engine *e, request *r);
/* s (choice 0 of a kv_hold request) ends: keep its blocks under a lease (request's
 * pd_lease / pd_blocks set for the final event). */
void pd_lease_take(inferd_engine *e, sequence *s);
/* Leases past their expiry go back (each step; the timer while idle). */
void pd_expire(inferd_engine *e);
bool pd_has_msgs(inferd_engine *e); /* under mu */

/* runner.c: flatten e->plan into the batch descriptor and run the forward */
int runner_execute(inferd_engine *e);

#endif
