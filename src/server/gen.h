/* gen.h — one generation request on its way through the engine: the prompts
 * (chat-rendered or tokenized), admission, submission to the engine (one engine
 * request per prompt, n choices each), the engine callback that accumulates each
 * choice's text / tokens / logprobs, aborts, and the watcher thread that wakes streams
 * for keep-alive comments and enforces the queue deadline.
 *
 * Threads and lifetime: a gen_req is shared by the HTTP side (the connection that
 * owns it) and the engine (until the last choice's final event); it is reference
 * counted and freed by whichever lets go last. Everything mutable is under g->mu; the
 * engine callback holds it only to append bytes, flip flags and wake the connection
 * (never blocks). Client disconnects are seen by the HTTP server (httpd.c), which ends
 * the request; gen_release_http then aborts what is still running. */
#ifndef INFERD_SERVER_GEN_H
#define INFERD_SERVER_GEN_H
#include "../util/layer/server.h"

#include <pthread.h>
#include <stdatomic.h>

#include "metrics.h"
#include "openai.h"
#include "pd.h"
#include "server.h"
#include "util/buf.h"

struct httpd_conn;

typedef struct gen_choice {
    sbuf text;                 /* everything generated so far */
    int32_t *tokens;           /* [n_tokens] */
    inferd_token_logprob *lp;  /* [n_tokens][1 + n_top] when logprobs were asked for */
    int32_t n_tokens, cap_tokens, n_top;
    int32_t completion_tokens;
    int32_t spec_draft_tokens, spec_accepted_tokens; /* speculative decoding (request log) */
    bool finished;
    inferd_finish_reason finish;
    double t_last; /* time of the last token (inter-token latency) */
    /* streaming cursor (HTTP thread, under g->mu) */
    bool sent_role, sent_final;
    size_t sent_text;   /* content streamed up to here (an offset into text) */
    size_t sent_reason; /* reasoning streamed up to here */
    int32_t sent_tokens;
    /* streamed tool calls: those whose head (id, name) went out, their ids, and how
     * many bytes of each one's arguments */
    int32_t tc_sent;
    char (*tc_id)[40];  /* [CHAT_MAX_TOOL_CALLS] once a call streams */
    size_t *tc_args;    /* [CHAT_MAX_TOOL_CALLS] */
} gen_choice;

typedef struct gen_sub { /* one engine request: one prompt, n choices */
    struct gen_req *g;
    int32_t idx;
    uint64_t id;
    bool submitted, started;
    int32_t n_finished;
    int32_t cached_tokens;
    double queue_s, ttft_s;
    /* prompt logprobs (echo with logprobs): the engine's rows for prompt tokens
     * 1..n_prompt-1, each 1 + n_prompt_top entries (the token, then the top-N); shared
     * by the prompt's n choices. NULL until the first event brought them. */
    inferd_token_logprob *prompt_lp;
    int32_t n_prompt_lp, n_prompt_top;
    bool prompt_lp_oom;
    pd_info pd; /* filled by the PD worker before it answers the import (pd.h) */
} gen_sub;

typedef struct gen_req {
    pthread_mutex_t mu;
    _Atomic int refs;
    server *srv;
    oai_request req; /* owned */
    gen_sub *subs;   /* one per prompt */
    int32_t n_subs;
    gen_choice *choices; /* prompt i, choice c -> [i * n + c] */
    int32_t n_choices, n_finished;
    bool all_done;
    char id[48];     /* "chatcmpl-..." / "cmpl-..." */
    int64_t created; /* unix seconds */
    const char *model_name;
    double t_arrival, t_submit, t_first_token, t_last_write;
    int32_t prompt_tokens; /* sum over prompts */
    /* HTTP side: the connection to wake (httpd_wake) when there is something to send;
     * NULL once the HTTP side let go (gen_release_http), which happens on the
     * connection's thread under mu, so a wake under mu never reaches a freed one */
    struct httpd_conn *conn;
    bool stream;
    bool aborting;
    bool abort_counted; /* aborted_total counted once */
    abort_reason abort;
    bool has_error; /* an error after submission (queue timeout, engine error) */
    api_error error;
    /* streaming (HTTP thread) */
    bool sent_usage, sent_done;
    struct gen_req *prev, *next; /* server->gens */
} gen_req;

/* Chat: render + tokenize; completions: tokenize / take ids. Then the context check
 * and max_tokens clamp. Fills r->prompts. 400 / 500 in e on failure. */
int gen_prepare(server *s, oai_request *r, api_error *e);

/* Admission + submission. Takes ownership of *r (also on failure). On success *out
 * holds one reference for the HTTP side (drop it with gen_release_http). */
int gen_start(server *s, oai_request *r, struct httpd_conn *conn, double t_arrival, gen_req **out,
              api_error *e);

/* The HTTP side is done with g (response sent, or connection gone). If the generation
 * is still running it is aborted with `why` (ABORT_NONE: do not abort). */
void gen_release_http(gen_req *g, abort_reason why);
void gen_abort(gen_req *g, abort_reason why);

/* The client's error for a generation the engine ended with INFERD_FINISH_ERROR: 503
 * device_lost once the engine is dead (the server is exiting), else 500 engine_error.
 * Returns -1, as api_fail. */
int gen_engine_error(const gen_req *g, api_error *e);
void gen_abort_all(server *s, abort_reason why);

int gen_watch_start(server *s);
void gen_watch_stop(server *s);

const char *gen_finish_str(inferd_finish_reason f); /* "stop", "length", "abort", "error" */

#endif
