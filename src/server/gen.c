/* gen.c — generation requests: prompt preparation, admission, submission, the engine
 * output callback, aborts and the watcher thread. See gen.h for threads/lifetime. */
#define _GNU_SOURCE
#include "gen.h"
#include "pd.h"
#include "structured.h"
#include "reasoning.h"
#include "chat.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "httpd.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/log.h"

const char *gen_finish_str(inferd_finish_reason f) {
    switch (f) {
    case INFERD_FINISH_STOP: return "stop";
    case INFERD_FINISH_LENGTH: return "length";
    case INFERD_FINISH_ABORT: return "abort";
    case INFERD_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

/* ---- preparation (HTTP thread) --------------------------------------------------- */

static int tokenize(server *s, const char *text, size_t n, oai_prompt *p, api_error *e) {
    const tokenizer *tk = s->model->tok;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    /* A completions prompt is the client's own text: control tokens in it are parsed,
     * as llama.cpp and vLLM do. Chat prompts go through chat_prompt instead, where
     * request data never yields control tokens. */
    if (tok_encode(tk, text, n, TOK_ENC_ADD_BOS | TOK_ENC_PARSE_SPECIAL, &ids, &n_ids))
        return api_fail(e, 500, NULL, NULL, "tokenization failed");
    if (n_ids > INT32_MAX / 2) {
        free(ids);
        return api_fail(e, 400, "context_length_exceeded", "prompt", "the prompt is too long");
    }
    p->ids = ids;
    p->n_ids = (int32_t)n_ids;
    return 0;
}

static int add_prompt(oai_request *r, api_error *e) {
    oai_prompt *p = realloc(r->prompts, sizeof *p * (size_t)(r->n_prompts + 1));
    if (!p) return api_fail(e, 500, NULL, NULL, "out of memory");
    r->prompts = p;
    memset(&p[r->n_prompts++], 0, sizeof *p);
    return 0;
}

static int prompt_from_text(server *s, oai_request *r, const char *text, size_t n, api_error *e) {
    if (add_prompt(r, e)) return -1;
    oai_prompt *p = &r->prompts[r->n_prompts - 1];
    if (tokenize(s, text, n, p, e)) return -1;
    p->text = malloc(n + 1);
    if (!p->text) return api_fail(e, 500, NULL, NULL, "out of memory");
    memcpy(p->text, text, n);
    p->text[n] = 0;
    p->text_bytes = n;
    return 0;
}

static int prompt_from_ids(server *s, oai_request *r, const cJSON *arr, api_error *e) {
    if (add_prompt(r, e)) return -1;
    oai_prompt *p = &r->prompts[r->n_prompts - 1];
    if (oai_parse_ids(arr, "prompt", s->n_vocab, &p->ids, &p->n_ids, e)) return -1;
    if (r->echo && tok_decode(s->model->tok, p->ids, (size_t)p->n_ids, false, &p->text, &p->text_bytes))
        return api_fail(e, 500, NULL, NULL, "detokenization failed");
    return 0;
}

int gen_prepare(server *s, oai_request *r, api_error *e) {
    if (r->kind == OAI_CHAT) {
        /* render + tokenize: control tokens only from the template's own text */
        if (add_prompt(r, e) || chat_prompt(s->chat, r, TOK_ENC_ADD_BOS, &r->prompts[r->n_prompts - 1], e))
            return -1;
    } else if (cJSON_IsString(r->prompt)) {
        if (prompt_from_text(s, r, r->prompt->valuestring, strlen(r->prompt->valuestring), e)) return -1;
    } else if (cJSON_IsNumber(cJSON_GetArrayItem(r->prompt, 0))) {
        if (prompt_from_ids(s, r, r->prompt, e)) return -1;
    } else {
        const cJSON *it;
        cJSON_ArrayForEach(it, r->prompt) {
            int rc = cJSON_IsString(it) ? prompt_from_text(s, r, it->valuestring, strlen(it->valuestring), e)
                                        : prompt_from_ids(s, r, it, e);
            if (rc) return -1;
        }
    }
    const char *param = r->kind == OAI_CHAT ? "messages" : "prompt";
    const int32_t max_len = s->max_model_len;
    for (int32_t i = 0; i < r->n_prompts; i++) {
        oai_prompt *p = &r->prompts[i];
        if (p->n_ids == 0) return api_fail(e, 400, "invalid_value", param, "the prompt is empty");
        if (p->n_ids >= max_len)
            return api_fail(e, 400, "context_length_exceeded", param,
                            "This model's maximum context length is %d tokens. However, your prompt "
                            "has %d tokens, which leaves no room for the completion.",
                            (int)max_len, (int)p->n_ids);
        int64_t room = max_len - p->n_ids;
        if (r->max_tokens < 0) {
            p->max_tokens = (int32_t)room;
        } else if (r->max_tokens > room) {
            if (s->cfg.max_tokens_policy == MAXTOK_REJECT)
                return api_fail(e, 400, "context_length_exceeded",
                                r->kind == OAI_CHAT ? "max_completion_tokens" : "max_tokens",
                                "This model's maximum context length is %d tokens. However, you "
                                "requested %lld tokens (%d in the prompt, %lld for the completion).",
                                (int)max_len, (long long)(p->n_ids + r->max_tokens), (int)p->n_ids,
                                (long long)r->max_tokens);
            p->max_tokens = (int32_t)room;
        } else {
            p->max_tokens = (int32_t)r->max_tokens;
        }
    }
    /* a reasoning model's thinking: where the output has it, from the parser option
     * and the rendered prompt (a prompt whose last <think> is still open starts the
     * output inside the reasoning) */
    const int64_t rp = s->cfg.reasoning_parser;
    r->reasoning = OAI_REASONING_NONE;
    if (r->kind == OAI_CHAT && (rp == REASONING_THINK || (rp == REASONING_AUTO && chat_thinks(s->chat)))) {
        const oai_prompt *p = &r->prompts[0];
        const char *t = p->text ? p->text : "";
        const char *open = NULL, *close = NULL;
        for (const char *q = t; (q = strstr(q, REASONING_OPEN)); q++) open = q;
        for (const char *q = t; (q = strstr(q, REASONING_CLOSE)); q++) close = q;
        r->reasoning = open && (!close || close < open) ? OAI_REASONING_INSIDE : OAI_REASONING_MAY_OPEN;
    }
    return so_prepare(s, r, e); /* the grammar of a structured output, if any */
}

/* ---- lifetime ---------------------------------------------------------------------- */

static void gen_free(gen_req *g) {
    for (int32_t i = 0; i < g->n_choices; i++) {
        free(g->choices[i].tc_id);
        free(g->choices[i].tc_args);
        sbuf_free(&g->choices[i].text);
        free(g->choices[i].tokens);
        free(g->choices[i].lp);
    }
    free(g->choices);
    for (int32_t i = 0; g->subs && i < g->n_subs; i++) free(g->subs[i].prompt_lp);
    free(g->subs);
    oai_request_free(&g->req);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void gen_ref(gen_req *g) { atomic_fetch_add(&g->refs, 1); }

static void gen_unref(gen_req *g) {
    if (atomic_fetch_sub(&g->refs, 1) == 1) gen_free(g);
}

/* The sub has its first event (or is gone): it no longer counts as waiting. */
static void adm_release(server *s, gen_sub *sub, int32_t n_prompt) {
    pthread_mutex_lock(&s->adm_mu);
    s->pending_requests--;
    s->pending_tokens -= n_prompt;
    pthread_mutex_unlock(&s->adm_mu);
    (void)sub;
}

/* ---- the engine callback (engine thread) ------------------------------------------ */

static void choice_append(gen_choice *ch, const inferd_output *o) {
    if (o->text_bytes) sbuf_put(&ch->text, o->text, o->text_bytes);
    if (o->n_tokens <= 0) return;
    int32_t need = ch->n_tokens + o->n_tokens;
    if (need > ch->cap_tokens) {
        int32_t cap = IFD_MAX(need, ch->cap_tokens ? ch->cap_tokens * 2 : 64);
        int32_t *t = realloc(ch->tokens, sizeof *t * (size_t)cap);
        if (t) ch->tokens = t;
        if (t && o->logprobs) {
            inferd_token_logprob *lp = realloc(ch->lp, sizeof *lp * (size_t)cap * (size_t)(1 + o->n_top));
            if (lp) ch->lp = lp;
            else t = NULL;
        }
        if (!t) {
            ch->text.oom = true; /* reported as an internal error at the end */
            return;
        }
        ch->cap_tokens = cap;
    }
    memcpy(ch->tokens + ch->n_tokens, o->tokens, sizeof(int32_t) * (size_t)o->n_tokens);
    if (o->logprobs) {
        ch->n_top = o->n_top;
        memcpy(ch->lp + (size_t)ch->n_tokens * (size_t)(1 + o->n_top), o->logprobs,
               sizeof *ch->lp * (size_t)o->n_tokens * (size_t)(1 + o->n_top));
    }
    ch->n_tokens = need;
}

/* The prompt logprobs of a sub, copied from the event that carries them (once). */
static void sub_take_prompt_lp(gen_sub *sub, const inferd_output *o) {
    if (sub->prompt_lp || !o->prompt_logprobs || o->n_prompt_logprobs <= 0 || o->n_prompt_top < 0) return;
    size_t n = (size_t)o->n_prompt_logprobs * (size_t)(1 + o->n_prompt_top);
    sub->prompt_lp = malloc(sizeof *sub->prompt_lp * n);
    if (!sub->prompt_lp) {
        sub->prompt_lp_oom = true; /* reported as an internal error at the end */
        return;
    }
    memcpy(sub->prompt_lp, o->prompt_logprobs, sizeof *sub->prompt_lp * n);
    sub->n_prompt_lp = o->n_prompt_logprobs;
    sub->n_prompt_top = o->n_prompt_top;
}

static void on_output(const inferd_output *o, void *user) {
    gen_sub *sub = user;
    gen_req *g = sub->g;
    server *s = g->srv;
    const double now = ifd_now_s();
    bool sub_done = false, first_event = false;
    pthread_mutex_lock(&g->mu);
    if (!sub->started) {
        sub->started = first_event = true;
        if (o->queue_s > 0 || o->n_tokens > 0) metrics_observe(s->metrics, HIST_QUEUE, o->queue_s);
    }
    sub_take_prompt_lp(sub, o);
    int32_t ci = sub->idx * g->req.n + o->index;
    if (o->index >= 0 && o->index < g->req.n && ci < g->n_choices) {
        gen_choice *ch = &g->choices[ci];
        if (o->n_tokens > 0) {
            if (g->t_first_token == 0) {
                g->t_first_token = now;
                metrics_observe(s->metrics, HIST_TTFT, now - g->t_arrival);
                if (o->ttft_s > 0)
                    metrics_observe(s->metrics, HIST_PREFILL, IFD_MAX(0.0, o->ttft_s - o->queue_s));
            } else if (ch->t_last > 0) {
                metrics_observe_n(s->metrics, HIST_ITL, (now - ch->t_last) / o->n_tokens,
                                  (uint64_t)o->n_tokens);
            }
            ch->t_last = now;
        }
        choice_append(ch, o);
        ch->completion_tokens = o->completion_tokens;
        ch->spec_draft_tokens = o->spec_draft_tokens;
        ch->spec_accepted_tokens = o->spec_accepted_tokens;
        if (o->finished && !ch->finished) {
            ch->finished = true;
            ch->finish = o->finish_reason;
            g->n_finished++;
            if (++sub->n_finished == g->req.n) sub_done = true;
            if (g->n_finished == g->n_choices) g->all_done = true;
        }
    }
    sub->cached_tokens = o->cached_tokens;
    sub->queue_s = o->queue_s;
    sub->ttft_s = o->ttft_s;
    if (g->conn && (g->stream || g->all_done)) httpd_wake(g->conn);
    pthread_mutex_unlock(&g->mu);
    if (first_event) adm_release(s, sub, g->req.prompts[sub->idx].n_ids);
    if (sub_done) gen_unref(g); /* the engine's reference for this sub */
}

/* ---- start ---------------------------------------------------------------------- */

static void list_add(server *s, gen_req *g) {
    pthread_mutex_lock(&s->gen_mu);
    g->next = s->gens;
    if (s->gens) s->gens->prev = g;
    s->gens = g;
    s->n_gens++;
    pthread_mutex_unlock(&s->gen_mu);
}

static void list_remove(server *s, gen_req *g) {
    pthread_mutex_lock(&s->gen_mu);
    if (g->prev) g->prev->next = g->next;
    else if (s->gens == g) s->gens = g->next;
    if (g->next) g->next->prev = g->prev;
    g->prev = g->next = NULL;
    s->n_gens--;
    pthread_mutex_unlock(&s->gen_mu);
}

static int admit(server *s, const oai_request *r, api_error *e) {
    int64_t tokens = 0;
    for (int32_t i = 0; i < r->n_prompts; i++) tokens += r->prompts[i].n_ids;
    const server_config *c = &s->cfg;
    pthread_mutex_lock(&s->adm_mu);
    bool full = (c->max_waiting_requests > 0 &&
                 s->pending_requests + r->n_prompts > c->max_waiting_requests) ||
                (c->max_waiting_tokens > 0 && s->pending_tokens > 0 &&
                 s->pending_tokens + tokens > c->max_waiting_tokens);
    if (!full) {
        s->pending_requests += r->n_prompts;
        s->pending_tokens += tokens;
    }
    pthread_mutex_unlock(&s->adm_mu);
    if (full) {
        metrics_rejected(s->metrics, "server_overloaded");
        return api_fail(e, 503, "server_overloaded", NULL,
                        "The server is overloaded: too many requests are waiting. Retry later.");
    }
    return 0;
}

int gen_start(server *s, oai_request *r, struct httpd_conn *conn, double t_arrival, gen_req **out,
              api_error *e) {
    *out = NULL;
    if (admit(s, r, e)) {
        oai_request_free(r);
        return -1;
    }
    gen_req *g = calloc(1, sizeof *g);
    int32_t n_choices = r->n_prompts * r->n;
    if (g) {
        g->subs = calloc((size_t)r->n_prompts, sizeof *g->subs);
        g->choices = calloc((size_t)n_choices, sizeof *g->choices);
    }
    if (!g || !g->subs || !g->choices) {
        pthread_mutex_lock(&s->adm_mu);
        s->pending_requests -= r->n_prompts;
        for (int32_t i = 0; i < r->n_prompts; i++) s->pending_tokens -= r->prompts[i].n_ids;
        pthread_mutex_unlock(&s->adm_mu);
        if (g) {
            free(g->subs);
            free(g->choices);
            free(g);
        }
        oai_request_free(r);
        return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    pthread_mutex_init(&g->mu, NULL);
    g->refs = 1; /* the HTTP side */
    g->srv = s;
    g->req = *r;
    memset(r, 0, sizeof *r);
    g->n_subs = g->req.n_prompts;
    g->n_choices = n_choices;
    g->conn = conn;
    g->stream = g->req.stream;
    g->abort = ABORT_NONE;
    g->t_arrival = t_arrival;
    g->t_submit = g->t_last_write = ifd_now_s();
    g->created = (int64_t)time(NULL);
    g->model_name = server_model_name(s, g->req.model);
    if (!g->model_name) g->model_name = s->names[0];
    strcpy(g->id, g->req.kind == OAI_CHAT ? "chatcmpl-" : "cmpl-");
    rand_alnum(g->id + strlen(g->id), 24);
    for (int32_t i = 0; i < g->n_subs; i++) {
        g->subs[i].g = g;
        g->subs[i].idx = i;
        g->prompt_tokens += g->req.prompts[i].n_ids;
    }
    list_add(s, g);

    oai_request *q = &g->req;
    int32_t stop_ids[64 + 8];
    int32_t n_stop_ids = q->n_stop_ids;
    memcpy(stop_ids, q->stop_ids, sizeof(int32_t) * (size_t)n_stop_ids);
    if (q->kind == OAI_CHAT && !q->sampling.ignore_eos)
        n_stop_ids += chat_stop_token_ids(s->chat, stop_ids + n_stop_ids, 8);
    int rc = 0;
    char err[256] = "";
    int32_t i = 0;
    for (; i < g->n_subs; i++) {
        inferd_request er = {0};
        er.prompt = q->prompts[i].ids;
        er.n_prompt = q->prompts[i].n_ids;
        er.sampling = q->sampling;
        er.sampling.max_tokens = q->prompts[i].max_tokens;
        er.sampling.stop = q->stop;
        er.sampling.n_stop = q->n_stop;
        er.sampling.logit_bias = q->bias;
        er.sampling.n_logit_bias = q->n_bias;
        er.sampling.stop_token_ids = stop_ids;
        er.sampling.n_stop_token_ids = n_stop_ids;
        er.sampling.grammar = (const inferd_grammar *)(const void *)q->grammar;
        if (q->grammar && q->reasoning != OAI_REASONING_NONE) { /* constrained after the thinking */
            er.sampling.reasoning_end = REASONING_CLOSE;
            er.sampling.reasoning_start = q->reasoning == OAI_REASONING_MAY_OPEN ? REASONING_OPEN : NULL;
        }
        er.cb = on_output;
        er.user = &g->subs[i];
        pd_route_request(s, &er, &g->subs[i].pd); /* decode role: the prompt is prefilled elsewhere */
        gen_ref(g); /* the engine's, dropped at the sub's last final event */
        uint64_t id = 0;
        rc = inferd_submit(s->engine, &er, &id, err, sizeof err);
        if (rc) {
            pd_job_cancel(&er);
            gen_unref(g);
            break;
        }
        pthread_mutex_lock(&g->mu);
        g->subs[i].id = id;
        g->subs[i].submitted = true;
        pthread_mutex_unlock(&g->mu);
    }
    if (rc) {
        /* the subs from i on never reach the engine: they stop counting as waiting */
        for (int32_t k = i; k < g->n_subs; k++) adm_release(s, &g->subs[k], q->prompts[k].n_ids);
        if (rc == IFD_ERR_BUSY)
            api_fail(e, 503, "shutting_down", NULL, "The server is shutting down.");
        else if (rc == IFD_ERR_DEVICE_LOST)
            api_fail(e, 503, "device_lost", NULL, "The device failed; the server is restarting. Retry later.");
        else if (rc == IFD_ERR_LIMIT)
            api_fail(e, 400, "context_length_exceeded", q->kind == OAI_CHAT ? "messages" : "prompt", "%s", err);
        else if (rc == IFD_ERR_INVALID)
            api_fail(e, 400, "invalid_value", NULL, "%s", err);
        else
            api_fail(e, 500, NULL, NULL, "the engine refused the request");
        gen_abort(g, ABORT_ERROR);
        gen_release_http(g, ABORT_NONE);
        return -1;
    }
    /* an abort that raced with the submissions (before the ids were known) */
    pthread_mutex_lock(&g->mu);
    bool again = g->aborting;
    abort_reason why = g->abort;
    g->aborting = false;
    pthread_mutex_unlock(&g->mu);
    if (again) gen_abort(g, why);
    *out = g;
    return 0;
}

/* ---- aborts ------------------------------------------------------------------------- */

void gen_abort(gen_req *g, abort_reason why) {
    pthread_mutex_lock(&g->mu);
    if (g->all_done || (g->aborting && g->abort == why)) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    bool count = !g->abort_counted && why != ABORT_ERROR;
    if (count) g->abort_counted = true;
    g->aborting = true;
    g->abort = why;
    /* every submitted sub still running, however many --max-prompts allows. Under mu:
     * inferd_abort only takes the engine's inbox lock, which the engine never holds
     * while it calls back into on_output (the only other taker of mu there). */
    for (int32_t i = 0; i < g->n_subs; i++)
        if (g->subs[i].submitted && g->subs[i].n_finished < g->req.n) inferd_abort(g->srv->engine, g->subs[i].id);
    pthread_mutex_unlock(&g->mu);
    if (count) metrics_abort(g->srv->metrics, why);
}

void gen_release_http(gen_req *g, abort_reason why) {
    pthread_mutex_lock(&g->mu);
    g->conn = NULL;
    bool running = !g->all_done;
    pthread_mutex_unlock(&g->mu);
    if (running && why != ABORT_NONE) gen_abort(g, why);
    list_remove(g->srv, g);
    gen_unref(g);
}

/* Every live generation, collected with a reference each (caller unrefs). */
static int collect(server *s, gen_req ***out) {
    pthread_mutex_lock(&s->gen_mu);
    int n = 0;
    gen_req **v = s->n_gens ? malloc(sizeof *v * (size_t)s->n_gens) : NULL;
    for (gen_req *g = s->gens; v && g; g = g->next) {
        gen_ref(g);
        v[n++] = g;
    }
    pthread_mutex_unlock(&s->gen_mu);
    *out = v;
    return n;
}

void gen_abort_all(server *s, abort_reason why) {
    gen_req **v;
    int n = collect(s, &v);
    for (int i = 0; i < n; i++) {
        gen_abort(v[i], why);
        gen_unref(v[i]);
    }
    free(v);
}

/* ---- the watcher thread ---------------------------------------------------------- */

static void *watch_main(void *arg) {
    server *s = arg;
    while (!atomic_load(&s->watcher_stop)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        gen_req **v;
        int n = collect(s, &v);
        const double now = ifd_now_s();
        for (int i = 0; i < n; i++) {
            gen_req *g = v[i];
            abort_reason why = ABORT_NONE;
            pthread_mutex_lock(&g->mu);
            bool live = g->conn != NULL;
            if (live && !g->all_done && s->cfg.queue_timeout_s > 0 && !g->aborting &&
                       now - g->t_submit > s->cfg.queue_timeout_s) {
                bool waiting = false;
                for (int32_t k = 0; k < g->n_subs; k++) waiting |= !g->subs[k].started;
                if (waiting) {
                    why = ABORT_QUEUE_TIMEOUT;
                    g->has_error = true;
                    api_fail(&g->error, 503, "queue_timeout", NULL,
                             "The request waited longer than the server's queue timeout. Retry later.");
                    metrics_rejected(s->metrics, "queue_timeout");
                }
            }
            /* a stream silent for keepalive_s gets a comment (written on its thread) */
            if (live && g->stream && !g->all_done && now - g->t_last_write >= s->cfg.keepalive_s)
                httpd_wake(g->conn);
            pthread_mutex_unlock(&g->mu);
            if (why != ABORT_NONE) gen_abort(g, why);
            gen_unref(g);
        }
        free(v);
    }
    return NULL;
}

int gen_watch_start(server *s) {
    atomic_store(&s->watcher_stop, false);
    if (pthread_create(&s->watcher, NULL, watch_main, s)) return IFD_ERR_INTERNAL;
    s->watcher_started = true;
    return 0;
}

void gen_watch_stop(server *s) {
    if (!s->watcher_started) return;
    atomic_store(&s->watcher_stop, true);
    pthread_join(s->watcher, NULL);
    s->watcher_started = false;
}

int gen_engine_error(const gen_req *g, api_error *e) {
    if (g->srv->engine && !inferd_engine_healthy(g->srv->engine))
        return api_fail(e, 503, "device_lost", NULL,
                        "The device failed while generating; the server is restarting. Retry later.");
    return api_fail(e, 500, "engine_error", NULL, "The engine failed while generating.");
}
