/* engine_internal.h — the engine's private types: requests, sequences, queues, and the
 * per-step plan. Shared by engine.c (lifecycle, thread, postprocess), scheduler.c
 * (what runs this step) and runner.c (flatten the step into one batch).
 * Everything here is owned by the engine thread except the inbox (mutex). */
#ifndef INFERD_ENGINE_INTERNAL_H
#define INFERD_ENGINE_INTERNAL_H
#include "../util/layer/engine.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../backend/backend.h"
#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include "inferd.h"
#include "kv_cache.h"
#include "sampler.h"
#include "stop.h"

typedef enum seq_status {
    SEQ_NEW = 0,      /* created at submit, not yet queued */
    SEQ_WAITING = 1,  /* in the waiting queue (new or preempted) */
    SEQ_RUNNING = 2,  /* in the running set */
    SEQ_FORK_PENDING = 3, /* child of an n>1 request waiting for the parent's prefill */
    SEQ_FINISHED = 4,
} seq_status;

struct request;

typedef struct sequence {
    struct request *req;
    int32_t index;        /* choice index */
    seq_status status;
    kv_seq kv;
    bool kv_ready;        /* kv_seq_init done */
    int32_t *tokens;      /* prompt + generated; capacity max_model_len */
    int32_t n_tokens;     /* known tokens */
    int32_t n_computed;   /* tokens whose KV is in the cache */
    int32_t n_generated;
    int32_t max_tokens;   /* generation cap for this sequence */
    int32_t n_scheduled;  /* tokens fed this step */
    int32_t logits_row;   /* row in the step's logits, or -1 */
    uint64_t admit_seq;   /* admission order (preemption picks the largest) */
    ifd_rng rng;
    sampler_state samp;   /* penalty counts etc. */
    tok_detok detok;
    stop_matcher stop;
    inferd_finish_reason finish;
    const char *stop_reason;
    struct sequence *prev, *next; /* queue links (waiting or running) */
} sequence;

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
    int32_t *prompt;
    int32_t n_prompt;
    int32_t cached_tokens;
    sequence *seqs;       /* n */
    int32_t n_seqs;
    int32_t n_live;       /* sequences not finished */
    bool forked;
    bool abort_requested;
    double t_submit, t_first_sched, t_first_token;
    struct request *next_all; /* engine's list of live requests */
    struct request *next_inbox;
} request;

typedef struct seq_queue {
    sequence *head, *tail;
    int32_t n;
} seq_queue;

void seq_queue_push_back(seq_queue *q, sequence *s);
void seq_queue_push_front(seq_queue *q, sequence *s);
void seq_queue_remove(seq_queue *q, sequence *s);
/* Insert into the waiting queue in (priority, arrival) order; preempted sequences go
 * to the head of their priority band. */
void seq_queue_insert_waiting(seq_queue *q, sequence *s, bool preempted);

/* The step plan: which sequences run and how many tokens each feeds. */
typedef struct step_plan {
    sequence **seqs;      /* [max_num_seqs]: n_seqs <= max_num_seqs, n_logits <= n_seqs,
                             n_tokens <= max_num_batched_tokens (asserted in plan_add) */
    int32_t n_seqs;
    int32_t n_tokens;
    int32_t n_logits;
} step_plan;

struct inferd_engine {
    inferd_engine_options opt;
    model *m;
    backend *be;
    kv_cache *kv;
    int32_t max_model_len;
    int32_t max_blocks_per_seq;
    int32_t n_vocab;

    /* engine-thread state */
    seq_queue waiting, running;
    request *live;        /* all live requests */
    uint64_t admit_counter;
    step_plan plan;
    /* flat batch buffers */
    int32_t *b_tokens, *b_pos, *b_slot, *b_seq_start, *b_ctx_len, *b_block_table, *b_logits_idx;
    int32_t *copy_src, *copy_dst;
    float *logits;        /* [max_num_seqs][n_vocab] */
    sampler_scratch scratch;
    inferd_token_logprob *lp_buf;
    char *piece_buf;      /* [piece_cap]: one token's text from the detokenizer */
    size_t piece_cap;     /* from the vocabulary's longest token (engine create) */
    char *text_buf;       /* [text_cap]: one step's text of one sequence */
    size_t text_cap;
    ifd_rng seed_rng;     /* under mu */
    inferd_stats cnt;     /* engine-thread counters, published into stats by update_stats */

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

/* scheduler.c */
void sched_schedule(inferd_engine *e);
/* runner.c */
int runner_execute(inferd_engine *e);
/* engine.c */
void engine_preempt(inferd_engine *e, sequence *s);
/* s cannot get KV blocks even with nothing left to preempt: finish it (length), with
 * its never-forked siblings if it is an n > 1 parent. s leaves the queues; its request
 * may be freed. */
void engine_finish_stuck(inferd_engine *e, sequence *s);

#endif
