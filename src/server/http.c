/* http.c — the application on top of httpd.c: per-request context, routing, API keys,
 * CORS, the connection reserve, the small endpoints, the generation endpoints
 * (non-streaming: answered from on_wake once done; streaming: each wake writes the SSE
 * events that are ready; /v1/responses runs as the chat request rsp.h translates it
 * into, rendered by rsp_out.c), and the one place errors become HTTP responses. Runs on
 * the httpd I/O threads. */
#include "http.h"
#include "pd.h"
#include "structured.h"

#include <ctype.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "gen.h"
#include "httpd.h"
#include "model/model.h"
#include "response.h"
#include "rsp.h"
#include "tokenizer/tokenizer.h"
#include "util/log.h"

typedef struct http_req http_req;
typedef int (*route_fn)(http_req *hr);

typedef struct route {
    const char *path;
    const char *method; /* GET routes also answer HEAD */
    route_fn fn;
    bool open;         /* no API key needed */
    bool needs_engine; /* 503 while loading */
    bool quiet;        /* not logged unless --log-health */
    bool prefix;       /* path is a prefix ("/v1/models/") */
    bool reserve;      /* served over the connection limit too (health checks, metrics) */
} route;

struct http_req {
    server *s;
    httpd_conn *conn;
    const httpd_request *rq; /* during on_head / on_request only */
    const route *rt;
    char method[12];
    char path[128];
    char request_id[72];
    char client[64];
    char origin[256]; /* an allowed Origin, echoed in the CORS headers; "" when none */
    double t_start;
    const char *url;
    const char *body; /* on_request only */
    size_t body_n;
    bool responded;
    bool counted; /* in s->inflight */
    int status;
    const char *err_code;
    bool client_slot; /* holds a per-client concurrency slot */
    gen_req *gen;
    rsp_ctx *rsp; /* POST /v1/responses: the request's Responses side (rsp.h) */
    sbuf wbuf;    /* streaming: SSE bytes formatted for one write */
};

/* ---- responses: every response goes through respond(); every error through
 * http_error() -------------------------------------------------------------------- */

#define MAX_RESP_HEADERS 12

/* The headers every response carries: request id, CORS. */
static int common_headers(http_req *hr, httpd_header *h, int n) {
    h[n++] = (httpd_header){"X-Request-Id", hr->request_id};
    if (hr->origin[0]) {
        h[n++] = (httpd_header){"Access-Control-Allow-Origin", hr->origin};
        h[n++] = (httpd_header){"Access-Control-Expose-Headers", "X-Request-Id, Retry-After"};
        h[n++] = (httpd_header){"Vary", "Origin"};
    }
    return n;
}

static void allowed_methods(const route *rt, char *buf, size_t cap);

static int respond(http_req *hr, int status, const char *ctype, sbuf *body, const api_error *e) {
    httpd_header h[MAX_RESP_HEADERS];
    int n = 0;
    char ra[24], allow[64];
    h[n++] = (httpd_header){"Content-Type", ctype};
    n = common_headers(hr, h, n);
    if (status == 503 || status == 429) {
        snprintf(ra, sizeof ra, "%lld", (long long)hr->s->cfg.retry_after_s);
        h[n++] = (httpd_header){"Retry-After", ra};
    }
    if (status == 401) h[n++] = (httpd_header){"WWW-Authenticate", "Bearer"};
    if (status == 405 && hr->rt) {
        allowed_methods(hr->rt, allow, sizeof allow);
        h[n++] = (httpd_header){"Allow", allow};
    }
    hr->status = status;
    hr->err_code = e ? e->code : NULL;
    hr->responded = true;
    metrics_http(hr->s->metrics, status);
    int rc = httpd_respond(hr->conn, status, h, n, body->p ? body->p : "", body->n);
    sbuf_free(body);
    return rc;
}

static int http_error(http_req *hr, const api_error *e) {
    sbuf b = {0};
    api_error_json(&b, e);
    return respond(hr, e->status, "application/json", &b, e);
}

static int http_errorf(http_req *hr, int status, const char *code, const char *param,
                                   const char *fmt, ...) IFD_PRINTF(5, 6);
static int http_errorf(http_req *hr, int status, const char *code, const char *param,
                                   const char *fmt, ...) {
    api_error e;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_fail(&e, status, code, param, "%s", msg);
    return http_error(hr, &e);
}

static int respond_json(http_req *hr, sbuf *b) {
    if (b->oom) {
        sbuf_free(b);
        return http_errorf(hr, 500, NULL, NULL, "out of memory");
    }
    return respond(hr, 200, "application/json", b, NULL);
}

/* ---- API keys ------------------------------------------------------------------- */

int http_load_keys(server *s, char *err, size_t eb) {
    char **keys = NULL;
    int n = 0;
    if (s->cfg.api_key && s->cfg.api_key[0]) {
        keys = malloc(sizeof *keys);
        if (!keys || !(keys[0] = strdup(s->cfg.api_key))) {
            free(keys);
            return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
        }
        n = 1;
    }
    if (s->cfg.api_key_file) {
        char *text = NULL;
        size_t len = 0;
        char e2[256];
        if (ifd_read_file(s->cfg.api_key_file, &text, &len, e2, sizeof e2)) {
            for (int i = 0; i < n; i++) free(keys[i]);
            free(keys);
            return ifd_errf(err, eb, IFD_ERR_IO, "--api-key-file: %s", e2);
        }
        for (char *line = strtok(text, "\r\n"); line; line = strtok(NULL, "\r\n")) {
            while (*line == ' ' || *line == '\t') line++;
            size_t k = strlen(line);
            while (k && (line[k - 1] == ' ' || line[k - 1] == '\t')) line[--k] = 0;
            if (!k || line[0] == '#') continue;
            char **nk = realloc(keys, sizeof *keys * (size_t)(n + 1));
            if (!nk) break;
            keys = nk;
            if ((keys[n] = strdup(line))) n++;
        }
        free(text);
        if (n == 0) return ifd_errf(err, eb, IFD_ERR_INVALID, "--api-key-file holds no key");
    }
    pthread_mutex_lock(&s->keys_mu);
    char **old = s->keys;
    int n_old = s->n_keys;
    s->keys = keys;
    s->n_keys = n;
    pthread_mutex_unlock(&s->keys_mu);
    for (int i = 0; i < n_old; i++) free(old[i]);
    free(old);
    return 0;
}

/* Equal in time that depends only on the lengths, not on where they differ. */
static bool ct_equal(const char *a, size_t an, const char *b, size_t bn) {
    size_t n = IFD_MAX(an, bn);
    unsigned char d = an != bn;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)((i < an ? a[i] : 0) ^ (i < bn ? b[i] : 0));
    return d == 0;
}

static bool authorized(http_req *hr) {
    server *s = hr->s;
    pthread_mutex_lock(&s->keys_mu);
    bool need = s->n_keys > 0, ok = false;
    if (need) {
        const char *h = httpd_header_get(hr->rq, "Authorization");
        if (h && !strncasecmp(h, "Bearer ", 7)) {
            const char *k = h + 7;
            while (*k == ' ') k++;
            size_t kn = strlen(k);
            for (int i = 0; i < s->n_keys; i++) ok |= ct_equal(k, kn, s->keys[i], strlen(s->keys[i]));
        }
    }
    pthread_mutex_unlock(&s->keys_mu);
    return !need || ok;
}

/* ---- per-client concurrency (429) ----------------------------------------------- */

typedef struct client_slot {
    char addr[64];
    int count;
} client_slot;

static bool client_acquire(http_req *hr) {
    server *s = hr->s;
    if (s->cfg.max_requests_per_client <= 0) return true;
    bool ok = false;
    pthread_mutex_lock(&s->clients_mu);
    client_slot *free_slot = NULL, *mine = NULL;
    for (int i = 0; i < s->n_client_slots; i++) {
        client_slot *c = &s->clients[i];
        if (c->count > 0 && !strcmp(c->addr, hr->client)) mine = c;
        else if (c->count == 0 && !free_slot) free_slot = c;
    }
    if (!mine && free_slot) {
        mine = free_slot;
        snprintf(mine->addr, sizeof mine->addr, "%s", hr->client);
    }
    if (mine && mine->count < s->cfg.max_requests_per_client) {
        mine->count++;
        ok = hr->client_slot = true;
    }
    pthread_mutex_unlock(&s->clients_mu);
    return ok;
}

static void client_release(http_req *hr) {
    server *s = hr->s;
    if (!hr->client_slot) return;
    pthread_mutex_lock(&s->clients_mu);
    for (int i = 0; i < s->n_client_slots; i++)
        if (s->clients[i].count > 0 && !strcmp(s->clients[i].addr, hr->client)) {
            s->clients[i].count--;
            break;
        }
    pthread_mutex_unlock(&s->clients_mu);
    hr->client_slot = false;
}

/* ---- small endpoints ---------------------------------------------------------------- */

static int ep_health(http_req *hr) {
    sbuf b = {0};
    sbuf_puts(&b, "{\"status\":\"ok\"}");
    return respond_json(hr, &b);
}

/* The server's state, with a dead engine seen at once (server.c's loop notices it
 * within 100 ms and sets SRV_DEVICE_LOST itself). */
static int state_now(server *s) {
    int st = atomic_load(&s->state);
    if ((st == SRV_READY || st == SRV_DRAINING) && s->engine && !inferd_engine_healthy(s->engine))
        st = SRV_DEVICE_LOST;
    return st;
}

static int ep_ready(http_req *hr) {
    int st = state_now(hr->s);
    if (st == SRV_READY) {
        sbuf b = {0};
        sbuf_puts(&b, "{\"status\":\"ready\"}");
        return respond_json(hr, &b);
    }
    if (st == SRV_LOADING) return http_errorf(hr, 503, "model_loading", NULL, "Not ready: the model is loading.");
    if (st == SRV_DRAINING) return http_errorf(hr, 503, "shutting_down", NULL, "Not ready: the server is shutting down.");
    if (st == SRV_DEVICE_LOST)
        return http_errorf(hr, 503, "device_lost", NULL, "Not ready: the device failed; the server is exiting.");
    return http_errorf(hr, 503, "model_load_failed", NULL, "Not ready: the model failed to load.");
}

/* GET /pd/metadata: this instance's role and KV compatibility (a prefill instance's is
 * what decode instances must match); 404 for role both. */
static int ep_pd_meta(http_req *hr) {
    sbuf b = {0};
    if (!pd_metadata(hr->s, &b)) {
        sbuf_free(&b);
        return http_errorf(hr, 404, "not_found", NULL, "This instance is not disaggregated (--role both).");
    }
    return respond_json(hr, &b);
}

static int ep_metrics(http_req *hr) {
    server *s = hr->s;
    inferd_stats st;
    bool up = atomic_load(&s->state) != SRV_LOADING && s->engine;
    if (up) inferd_engine_stats(s->engine, &st);
    sbuf b = {0};
    metrics_render(s->metrics, up ? &st : NULL, &b);
    if (up) {
        pd_metrics(s, &b);
        metrics_render_vllm(&st, s->names[0], (int32_t)s->cfg.block_size, &b);
    }
    if (s->grammars) { /* structured outputs: compiled grammars served from the cache */
        int64_t hits = 0, compiles = 0;
        so_cache_stats(s->grammars, &hits, &compiles);
        sbuf_printf(&b,
                    "# HELP inferd_grammar_compiles_total Structured-output grammars compiled (cache misses).\n"
                    "# TYPE inferd_grammar_compiles_total counter\n"
                    "inferd_grammar_compiles_total %lld\n"
                    "# HELP inferd_grammar_cache_hits_total Requests whose grammar came from the cache.\n"
                    "# TYPE inferd_grammar_cache_hits_total counter\n"
                    "inferd_grammar_cache_hits_total %lld\n",
                    (long long)compiles, (long long)hits);
    }
    httpd_stats hs;
    httpd_get_stats(s->httpd, &hs);
    sbuf_printf(&b,
                "# HELP inferd_http_connections Open HTTP connections.\n"
                "# TYPE inferd_http_connections gauge\n"
                "inferd_http_connections %lld\n"
                "# HELP inferd_http_connections_accepted_total HTTP connections accepted.\n"
                "# TYPE inferd_http_connections_accepted_total counter\n"
                "inferd_http_connections_accepted_total %lld\n"
                "# HELP inferd_http_connections_rejected_total Connections closed at once: over --max-connections plus the reserve.\n"
                "# TYPE inferd_http_connections_rejected_total counter\n"
                "inferd_http_connections_rejected_total %lld\n"
                "# HELP inferd_http_connections_evicted_total Idle connections closed to make room.\n"
                "# TYPE inferd_http_connections_evicted_total counter\n"
                "inferd_http_connections_evicted_total %lld\n"
                "# HELP inferd_http_timeouts_total Connections closed by a head, body or write deadline.\n"
                "# TYPE inferd_http_timeouts_total counter\n"
                "inferd_http_timeouts_total %lld\n",
                (long long)hs.connections, (long long)hs.accepted_total, (long long)hs.rejected_total,
                (long long)hs.evicted_total, (long long)hs.timeouts_total);
    if (b.oom) {
        sbuf_free(&b);
        return http_errorf(hr, 500, NULL, NULL, "out of memory");
    }
    return respond(hr, 200, "text/plain; version=0.0.4; charset=utf-8", &b, NULL);
}

static void model_obj(const server *s, const char *name, sbuf *b) {
    sbuf_puts(b, "{\"id\":");
    sbuf_json_str(b, name, strlen(name));
    sbuf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"inferd\",\"root\":",
                (long long)s->created);
    sbuf_json_str(b, s->names[0], strlen(s->names[0]));
    sbuf_printf(b, ",\"parent\":null,\"max_model_len\":%d}", (int)s->max_model_len);
}

static int ep_models(http_req *hr) {
    server *s = hr->s;
    sbuf b = {0};
    sbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < s->n_names; i++) {
        if (i) sbuf_puts(&b, ",");
        model_obj(s, s->names[i], &b);
    }
    sbuf_puts(&b, "]}");
    return respond_json(hr, &b);
}

static int ep_model(http_req *hr) {
    const char *id = hr->url + strlen("/v1/models/");
    for (int i = 0; i < hr->s->n_names; i++)
        if (!strcmp(id, hr->s->names[i])) {
            sbuf b = {0};
            model_obj(hr->s, hr->s->names[i], &b);
            return respond_json(hr, &b);
        }
    return http_errorf(hr, 404, "model_not_found", "model", "The model does not exist.");
}

/* add_special_tokens (default true) -> the BOS the vocabulary asks for */
static unsigned tok_flags(const cJSON *special) {
    return !special || cJSON_IsNull(special) || cJSON_IsTrue(special) ? TOK_ENC_ADD_BOS : 0;
}

static int ep_tokenize(http_req *hr) {
    server *s = hr->s;
    api_error e;
    cJSON *root = oai_parse_object(hr->body, hr->body_n, &e);
    if (!root) return http_error(hr, &e);
    int ret;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(root, "add_special_tokens");
    const cJSON *strs = cJSON_GetObjectItemCaseSensitive(root, "return_token_strs");
    char *text = NULL;
    size_t n = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    bool chat = messages && !cJSON_IsNull(messages);
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model)) {
        ret = http_errorf(hr, 400, "invalid_type", "model", "'model' must be a string");
        goto done;
    }
    if (cJSON_IsString(model) && !server_model_matches(s, model->valuestring)) {
        ret = http_errorf(hr, 404, "model_not_found", "model", "The model does not exist.");
        goto done;
    }
    if ((special && !cJSON_IsNull(special) && !cJSON_IsBool(special)) ||
        (strs && !cJSON_IsNull(strs) && !cJSON_IsBool(strs))) {
        ret = http_errorf(hr, 400, "invalid_type", special && !cJSON_IsBool(special) ? "add_special_tokens" : "return_token_strs",
                          "expected a boolean");
        goto done;
    }
    if (chat) {
        /* reuse the chat parser for messages/tools/template flags */
        oai_request r;
        oai_limits lim = {.max_n = 1, .max_top_logprobs = 0, .max_stop = 0, .max_logit_bias = 0,
                          .max_prompts = 1, .n_vocab = s->n_vocab,
                          .allow_request_chat_template = s->cfg.allow_request_chat_template};
        int rc = oai_parse(&r, OAI_CHAT, hr->body, hr->body_n, &lim, &e); /* the body itself: exact numbers */
        oai_prompt p = {0}; /* the same render + tokenize as generation */
        if (!rc) rc = chat_prompt(s->chat, &r, tok_flags(special), &p, &e);
        ids = p.ids;
        n_ids = (size_t)p.n_ids;
        text = p.text;
        n = p.text_bytes;
        oai_request_free(&r);
        if (rc) {
            ret = http_error(hr, &e);
            goto done;
        }
    } else if (cJSON_IsString(prompt)) {
        text = strdup(prompt->valuestring);
        n = strlen(prompt->valuestring);
    } else {
        ret = http_errorf(hr, 400, prompt ? "invalid_type" : "missing_required_parameter", "prompt",
                          "'prompt' (a string) or 'messages' is required");
        goto done;
    }
    /* a plain prompt is the client's own text: control tokens in it are parsed (as
     * llama.cpp and vLLM do) */
    if (!chat && (!text || tok_encode(s->model->tok, text, n, tok_flags(special) | TOK_ENC_PARSE_SPECIAL, &ids, &n_ids))) {
        ret = http_errorf(hr, 500, NULL, NULL, "tokenization failed");
        goto done;
    }
    sbuf b = {0};
    sbuf_printf(&b, "{\"count\":%zu,\"max_model_len\":%d,\"tokens\":[", n_ids, (int)s->max_model_len);
    for (size_t i = 0; i < n_ids; i++) sbuf_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
    sbuf_puts(&b, "]");
    if (cJSON_IsTrue(strs)) {
        sbuf_puts(&b, ",\"token_strs\":[");
        for (size_t i = 0; i < n_ids; i++) {
            const char *t = tok_text(s->model->tok, ids[i]);
            if (i) sbuf_puts(&b, ",");
            sbuf_json_str(&b, t ? t : "", t ? strlen(t) : 0);
        }
        sbuf_puts(&b, "]");
    }
    sbuf_puts(&b, "}");
    ret = respond_json(hr, &b);
done:
    free(ids);
    free(text);
    cJSON_Delete(root);
    return ret;
}

static int ep_detokenize(http_req *hr) {
    server *s = hr->s;
    api_error e;
    cJSON *root = oai_parse_object(hr->body, hr->body_n, &e);
    if (!root) return http_error(hr, &e);
    int ret;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    int32_t *ids = NULL, n_ids = 0;
    char *text = NULL;
    size_t n = 0;
    if (cJSON_IsString(model) && !server_model_matches(s, model->valuestring)) {
        ret = http_errorf(hr, 404, "model_not_found", "model", "The model does not exist.");
    } else if (model && !cJSON_IsNull(model) && !cJSON_IsString(model)) {
        ret = http_errorf(hr, 400, "invalid_type", "model", "'model' must be a string");
    } else if (!tokens) {
        ret = http_errorf(hr, 400, "missing_required_parameter", "tokens", "'tokens' is required");
    } else if (oai_parse_ids(tokens, "tokens", s->n_vocab, &ids, &n_ids, &e)) {
        ret = http_error(hr, &e);
    } else if (tok_decode(s->model->tok, ids, (size_t)n_ids, false, &text, &n)) {
        ret = http_errorf(hr, 500, NULL, NULL, "detokenization failed");
    } else {
        sbuf b = {0};
        sbuf_puts(&b, "{\"prompt\":");
        sbuf_json_str(&b, text, n);
        sbuf_puts(&b, "}");
        ret = respond_json(hr, &b);
    }
    free(ids);
    free(text);
    cJSON_Delete(root);
    return ret;
}

/* ---- generation endpoints ------------------------------------------------------------ */

/* Streaming: write the SSE events that are ready (on_wake / right after the start);
 * a comment when the stream has been silent for the keep-alive interval. */
static void stream_pump(http_req *hr) {
    gen_req *g = hr->gen;
    if (httpd_pending(hr->conn) > (1u << 20)) return; /* a slow reader: wait for the drain */
    sbuf_reset(&hr->wbuf);
    const double now = ifd_now_s();
    pthread_mutex_lock(&g->mu);
    bool done = hr->rsp ? rsp_sse_fill(hr->rsp, g, &hr->wbuf) : sse_fill(g, &hr->wbuf);
    if (hr->wbuf.n == 0 && !done && now - g->t_last_write >= hr->s->cfg.keepalive_s) sse_keepalive(&hr->wbuf);
    if (hr->wbuf.n) g->t_last_write = now;
    pthread_mutex_unlock(&g->mu);
    if (hr->wbuf.oom || (hr->wbuf.n && httpd_stream_write(hr->conn, hr->wbuf.p, hr->wbuf.n))) {
        httpd_abort(hr->conn);
        return;
    }
    if (done) httpd_stream_end(hr->conn);
}

/* Non-streaming: answer once every choice is done (called again on each wake). */
static int finish_nonstream(http_req *hr) {
    gen_req *g = hr->gen;
    sbuf b = {0};
    api_error e;
    pthread_mutex_lock(&g->mu);
    if (!g->all_done) {
        pthread_mutex_unlock(&g->mu);
        return 0;
    }
    int status = hr->rsp ? rsp_body(hr->rsp, g, &b, &e) : resp_body(g, &b, &e);
    pthread_mutex_unlock(&g->mu);
    if (status != 200) {
        sbuf_free(&b);
        return http_error(hr, &e);
    }
    return respond_json(hr, &b);
}

/* A generation request whose body (body, n) is in the chat or completions shape:
 * the request's own, or the chat translation of a Responses request (hr->rsp). */
static int generate_body(http_req *hr, oai_kind kind, const char *body, size_t body_n) {
    server *s = hr->s;
    api_error e;
    oai_limits lim = {.max_n = (int32_t)s->cfg.max_n,
                      .max_top_logprobs = (int32_t)s->cfg.max_top_logprobs,
                      .max_stop = (int32_t)s->cfg.max_stop,
                      .max_logit_bias = (int32_t)s->cfg.max_logit_bias,
                      .max_prompts = (int32_t)s->cfg.max_prompts,
                      .n_vocab = s->n_vocab,
                      .allow_request_chat_template = s->cfg.allow_request_chat_template};
    oai_request r;
    if (oai_parse(&r, kind, body, body_n, &lim, &e)) {
        oai_request_free(&r);
        if (hr->rsp) rsp_chat_error(&e);
        return http_error(hr, &e);
    }
    if (!server_model_matches(s, r.model)) {
        oai_request_free(&r);
        return http_errorf(hr, 404, "model_not_found", "model", "The model does not exist.");
    }
    if (!client_acquire(hr)) {
        oai_request_free(&r);
        metrics_rejected(s->metrics, "rate_limit_exceeded");
        return http_errorf(hr, 429, "rate_limit_exceeded", NULL,
                           "Too many concurrent requests from this client. Retry later.");
    }
    if (gen_prepare(s, &r, &e)) {
        oai_request_free(&r);
        if (hr->rsp) rsp_chat_error(&e);
        return http_error(hr, &e);
    }
    bool stream = r.stream;
    if (gen_start(s, &r, hr->conn, hr->t_start, &hr->gen, &e)) return http_error(hr, &e);
    if (!stream) return finish_nonstream(hr);
    httpd_header h[MAX_RESP_HEADERS];
    int n = 0;
    h[n++] = (httpd_header){"Content-Type", "text/event-stream; charset=utf-8"};
    h[n++] = (httpd_header){"Cache-Control", "no-cache"};
    h[n++] = (httpd_header){"X-Accel-Buffering", "no"};
    n = common_headers(hr, h, n);
    hr->status = 200;
    hr->responded = true;
    metrics_http(s->metrics, 200);
    int ret = httpd_stream_start(hr->conn, 200, h, n);
    if (!ret) stream_pump(hr);
    return ret;
}

static int ep_chat(http_req *hr) { return generate_body(hr, OAI_CHAT, hr->body, hr->body_n); }
static int ep_completions(http_req *hr) { return generate_body(hr, OAI_COMPLETION, hr->body, hr->body_n); }

/* ---- /v1/responses (rsp.h): translated into a chat request, rendered back ---------- */

static int ep_responses(http_req *hr) {
    api_error e;
    sbuf chat = {0};
    if (rsp_parse(hr->s->responses, hr->body, hr->body_n, ifd_now_s(), &hr->rsp, &chat, &e)) {
        sbuf_free(&chat);
        return http_error(hr, &e);
    }
    int rc = generate_body(hr, OAI_CHAT, chat.p, chat.n);
    sbuf_free(&chat);
    return rc;
}

/* GET / DELETE /v1/responses/{id}: the stored response. */
static int ep_response_id(http_req *hr) {
    const char *id = hr->url + strlen("/v1/responses/");
    char buf[RSP_ID_BYTES];
    size_t k = strlen(id);
    while (k && id[k - 1] == '/') k--;
    bool ok = k > 0 && k < sizeof buf;
    if (ok) {
        memcpy(buf, id, k);
        buf[k] = 0;
        ok = rsp_id_ok(buf);
    }
    const bool del = !strcmp(hr->method, "DELETE");
    char *obj = NULL;
    size_t n = 0;
    int rc = !ok ? IFD_ERR_NOT_FOUND
             : del ? rsp_store_delete(hr->s->responses, buf, ifd_now_s())
                   : rsp_store_get(hr->s->responses, buf, ifd_now_s(), NULL, NULL, &obj, &n);
    if (rc == IFD_ERR_NOMEM) return http_errorf(hr, 500, NULL, NULL, "out of memory");
    if (rc) {
        api_error e;
        if (ok) api_fail(&e, 404, "response_not_found", NULL, "Response with id '%s' not found.", buf);
        else api_fail(&e, 404, "response_not_found", NULL, "Response not found.");
        e.type = "invalid_request_error";
        return http_error(hr, &e);
    }
    sbuf b = {0};
    if (del) {
        sbuf_puts(&b, "{\"id\":");
        sbuf_json_str(&b, buf, strlen(buf));
        sbuf_puts(&b, ",\"object\":\"response.deleted\",\"deleted\":true}");
    } else {
        sbuf_put(&b, obj, n);
        free(obj);
    }
    return respond_json(hr, &b);
}

static const route ROUTES[] = {
    {"/v1/chat/completions", "POST", ep_chat, false, true, false, false, false},
    {"/v1/completions", "POST", ep_completions, false, true, false, false, false},
    {"/v1/responses", "POST", ep_responses, false, true, false, false, false},
    {"/v1/responses/", "GET", ep_response_id, false, false, false, true, false},
    {"/v1/responses/", "DELETE", ep_response_id, false, false, false, true, false},
    {"/v1/models", "GET", ep_models, false, true, false, false, false},
    {"/v1/models/", "GET", ep_model, false, true, false, true, false},
    {"/tokenize", "POST", ep_tokenize, false, true, false, false, false},
    {"/detokenize", "POST", ep_detokenize, false, true, false, false, false},
    {"/health", "GET", ep_health, true, false, true, false, true},
    {"/health/ready", "GET", ep_ready, true, false, true, false, true},
    {"/metrics", "GET", ep_metrics, false, false, true, false, true},
    {"/pd/metadata", "GET", ep_pd_meta, false, true, true, false, true},
};

static bool route_matches(const route *r, const char *url, size_t n) {
    size_t k = strlen(r->path);
    return r->prefix ? (n > k && !strncmp(url, r->path, k)) : (n == k && !strncmp(url, r->path, k));
}

static bool method_matches(const route *r, const char *method) {
    return !strcmp(method, r->method) || (!strcmp(method, "HEAD") && !strcmp(r->method, "GET"));
}

/* The route of url for method; the path's first route when none takes the method
 * (answered 405). */
static const route *route_find(const char *url, const char *method) {
    size_t n = strlen(url);
    while (n > 1 && url[n - 1] == '/') n--; /* "/v1/models/" == "/v1/models" */
    const route *first = NULL;
    for (size_t i = 0; i < IFD_ARRAY_LEN(ROUTES); i++) {
        const route *r = &ROUTES[i];
        if (!route_matches(r, url, n)) continue;
        if (method_matches(r, method)) return r;
        if (!first) first = r;
    }
    return first;
}

/* The Allow header of a 405: the methods of every route with rt's path. */
static void allowed_methods(const route *rt, char *buf, size_t cap) {
    buf[0] = 0;
    for (size_t i = 0; i < IFD_ARRAY_LEN(ROUTES); i++) {
        const route *r = &ROUTES[i];
        if (strcmp(r->path, rt->path) || r->prefix != rt->prefix) continue;
        size_t k = strlen(buf);
        snprintf(buf + k, cap - k, "%s%s", k ? ", " : "", !strcmp(r->method, "GET") ? "GET, HEAD" : r->method);
    }
}

/* ---- the httpd callbacks ----------------------------------------------------------- */

static void request_id(http_req *hr) {
    const char *h = httpd_header_get(hr->rq, "X-Request-Id");
    size_t n = h ? strlen(h) : 0;
    bool ok = n > 0 && n < sizeof hr->request_id;
    for (size_t i = 0; ok && i < n; i++) {
        char c = h[i];
        ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
             c == '_' || c == '.' || c == ':';
    }
    if (ok) memcpy(hr->request_id, h, n + 1);
    else rand_alnum(hr->request_id, 32);
}

/* --allowed-origins: a comma-separated list of exact origins, or "*". Returns what
 * Access-Control-Allow-Origin echoes ("*" or the origin), or NULL when not allowed. */
static const char *origin_allowed(const server *s, const char *origin) {
    const char *list = s->cfg.allowed_origins;
    if (!list || !*list || !origin || !*origin) return NULL;
    const size_t on = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *f = e;
        while (f > p && f[-1] == ' ') f--;
        size_t k = (size_t)(f - p);
        if (k == 1 && *p == '*') return "*";
        if (k == on && !memcmp(p, origin, k)) return origin;
        p = e;
    }
    return NULL;
}

/* A header value listing header names: tokens, commas and spaces only. */
static bool header_list_ok(const char *v) {
    if (strlen(v) > 512) return false;
    for (const char *p = v; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalnum(c) || c == '-' || c == '_' || c == ',' || c == ' ')) return false;
    }
    return true;
}

/* CORS preflight: OPTIONS with Origin and Access-Control-Request-Method. Answered for
 * allowed origins without the API key (browsers send no credentials here); refused
 * with 403 for the others. */
static int preflight(http_req *hr) {
    if (!hr->origin[0])
        return http_errorf(hr, 403, "cors_origin_not_allowed", NULL, "This origin is not allowed (--allowed-origins).");
    const char *req_h = httpd_header_get(hr->rq, "Access-Control-Request-Headers");
    httpd_header h[MAX_RESP_HEADERS];
    int n = common_headers(hr, h, 0);
    h[n++] = (httpd_header){"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"};
    h[n++] = (httpd_header){"Access-Control-Allow-Headers",
                            req_h && *req_h && header_list_ok(req_h) ? req_h
                                                                    : "Authorization, Content-Type, X-Request-Id"};
    h[n++] = (httpd_header){"Access-Control-Max-Age", "600"};
    hr->status = 204;
    hr->responded = true;
    metrics_http(hr->s->metrics, 204);
    return httpd_respond(hr->conn, 204, h, n, "", 0);
}

/* Checks that need only the head. Answers (and returns) when the request goes no
 * further. Order: CORS preflight; the key (before any route is revealed, except the
 * open ones); route and method; the connection reserve; the server's state. */
static void precheck(http_req *hr) {
    server *s = hr->s;
    const route *r = hr->rt;
    const char *method = hr->rq->method;
    if (!strcmp(method, "OPTIONS") && httpd_header_get(hr->rq, "Origin") &&
        httpd_header_get(hr->rq, "Access-Control-Request-Method")) {
        preflight(hr);
        return;
    }
    bool method_ok = r && method_matches(r, method);
    if (!(r && r->open && method_ok) && !authorized(hr)) {
        http_errorf(hr, 401, "invalid_api_key", NULL, "Missing or invalid API key.");
        return;
    }
    if (!r) {
        /* the OpenAI endpoints inferd does not serve: say which and what it serves */
        static const char *const UNSUPPORTED[] = {"/v1/embeddings", "/v1/audio/", "/v1/images/", "/v1/moderations",
                                                  "/v1/files", "/v1/batches", "/v1/fine_tuning/", "/v1/assistants",
                                                  "/v1/threads", "/v1/rerank", "/v1/score"};
        for (size_t i = 0; i < IFD_ARRAY_LEN(UNSUPPORTED); i++)
            if (!strncmp(hr->url, UNSUPPORTED[i], strlen(UNSUPPORTED[i]))) {
                char what[48];
                snprintf(what, sizeof what, "%s", UNSUPPORTED[i] + 4);
                if (what[strlen(what) - 1] == '/') what[strlen(what) - 1] = 0;
                http_errorf(hr, 404, "unsupported_endpoint", NULL,
                            "inferd does not implement /v1/%s: it serves a generative model through "
                            "/v1/chat/completions, /v1/completions and /v1/responses.",
                            what);
                return;
            }
        http_errorf(hr, 404, "not_found", NULL, "Unknown route.");
        return;
    }
    if (!method_ok) {
        http_errorf(hr, 405, "method_not_allowed", NULL, "Method not allowed on this route.");
        return;
    }
    if (hr->rq->reserve && !r->reserve) {
        metrics_rejected(s->metrics, "too_many_connections");
        http_errorf(hr, 503, "too_many_connections", NULL,
                    "The server has too many open connections. Retry later.");
        return;
    }
    int st = state_now(s);
    if (st == SRV_DRAINING && r->needs_engine) {
        metrics_rejected(s->metrics, "shutting_down");
        http_errorf(hr, 503, "shutting_down", NULL, "The server is shutting down.");
        return;
    }
    if (st == SRV_DEVICE_LOST && r->needs_engine) {
        http_errorf(hr, 503, "device_lost", NULL, "The device failed; the server is restarting. Retry later.");
        return;
    }
    if (st != SRV_READY && r->needs_engine)
        http_errorf(hr, 503, st == SRV_LOADING ? "model_loading" : "model_load_failed", NULL,
                    st == SRV_LOADING ? "The model is loading." : "The model failed to load.");
}

static void on_head(void *app, httpd_conn *c, const httpd_request *rq) {
    server *s = app;
    http_req *hr = calloc(1, sizeof *hr);
    if (!hr) {
        httpd_abort(c);
        return;
    }
    httpd_set_user(c, hr);
    hr->s = s;
    hr->conn = c;
    hr->rq = rq;
    hr->url = rq->path;
    hr->t_start = ifd_now_s();
    snprintf(hr->method, sizeof hr->method, "%s", rq->method);
    snprintf(hr->path, sizeof hr->path, "%s", rq->path);
    snprintf(hr->client, sizeof hr->client, "%s", rq->client);
    hr->rt = route_find(rq->path, rq->method);
    request_id(hr);
    const char *echo = origin_allowed(s, httpd_header_get(rq, "Origin"));
    if (echo && strlen(echo) < sizeof hr->origin) snprintf(hr->origin, sizeof hr->origin, "%s", echo);
    precheck(hr);
    hr->rq = NULL;
}

static void on_request(void *app, httpd_conn *c, const httpd_request *rq) {
    server *s = app;
    http_req *hr = httpd_user(c);
    if (!hr) return;
    hr->rq = rq;
    hr->body = rq->body;
    hr->body_n = rq->body_bytes;
    hr->counted = true;
    atomic_fetch_add(&s->inflight, 1);
    hr->rt->fn(hr);
    hr->rq = NULL;
    hr->body = NULL;
    hr->body_n = 0;
}

static void on_wake(void *app, httpd_conn *c, void *user) {
    http_req *hr = user;
    (void)app;
    (void)c;
    if (!hr || !hr->gen) return;
    if (hr->gen->stream) stream_pump(hr);
    else if (!hr->responded) finish_nonstream(hr);
}

static void on_done(void *app, httpd_conn *c, void *user, httpd_done why_done) {
    server *s = app;
    http_req *hr = user;
    (void)c;
    if (!hr) return;
    const double now = ifd_now_s();
    req_log L = {.request_id = hr->request_id, .method = hr->method, .path = hr->path,
                 .client = hr->client, .status = hr->status ? hr->status : 499,
                 .error_code = hr->err_code, .queue_s = -1, .ttft_s = -1, .total_s = now - hr->t_start};
    gen_req *g = hr->gen;
    const bool quiet = hr->rt && hr->rt->quiet && !s->cfg.log_health;
    if (g) {
        abort_reason why = why_done == HTTPD_DONE_OK         ? ABORT_NONE
                           : why_done == HTTPD_DONE_SHUTDOWN ? ABORT_SHUTDOWN
                                                             : ABORT_CLIENT_DISCONNECT;
        pthread_mutex_lock(&g->mu);
        bool done = g->all_done;
        if (!done && why == ABORT_NONE) why = ABORT_CLIENT_DISCONNECT;
        L.stream = g->stream;
        L.n_prompts = g->n_subs;
        L.n_choices = g->n_choices;
        L.prompt_tokens = g->prompt_tokens;
        double q = -1;
        for (int32_t i = 0; i < g->n_subs; i++) {
            L.cached_tokens += g->subs[i].cached_tokens;
            if (g->subs[i].started) q = IFD_MAX(q, g->subs[i].queue_s);
            if (g->subs[i].pd.prefill[0] && !L.pd_prefill) { /* the first prompt's */
                L.pd_prefill = g->subs[i].pd.prefill;
                L.pd_prefill_s = g->subs[i].pd.prefill_s;
                L.pd_transfer_s = g->subs[i].pd.transfer_s;
            }
        }
        L.queue_s = q;
        L.ttft_s = g->t_first_token > 0 ? g->t_first_token - g->t_arrival : -1;
        for (int32_t i = 0; i < g->n_choices; i++) {
            gen_choice *ch = &g->choices[i];
            L.completion_tokens += ch->completion_tokens;
            L.spec_draft_tokens += ch->spec_draft_tokens;
            L.spec_accepted_tokens += ch->spec_accepted_tokens;
            bool tc = false;
            if (g->req.tools && ch->finished && ch->finish == INFERD_FINISH_STOP) {
                tool_calls t;
                tc = resp_tool_calls_of(g, ch, &t) > 0;
                tool_calls_free(&t);
            }
            if (!ch->finished) continue;
            const char *fr = resp_finish(g, ch, tc);
            finish_label fl = !strcmp(fr, "stop") ? FIN_STOP : !strcmp(fr, "length") ? FIN_LENGTH
                              : (!strcmp(fr, "tool_calls") || !strcmp(fr, "function_call")) ? FIN_TOOL_CALLS : !strcmp(fr, "abort") ? FIN_ABORT : FIN_ERROR;
            metrics_finished(s->metrics, fl);
            if (!L.finish_reason || strcmp(fr, "stop")) L.finish_reason = fr;
        }
        if (!done && !L.finish_reason) L.finish_reason = "abort";
        if (g->aborting || !done) L.abort_reason = abort_reason_str(g->aborting ? g->abort : why);
        if (s->cfg.log_prompts && g->req.n_prompts > 0 && g->req.prompts[0].text) {
            L.prompt = g->req.prompts[0].text;
            L.prompt_bytes = g->req.prompts[0].text_bytes;
        }
        pthread_mutex_unlock(&g->mu);
        if (hr->status == 200 && done && !L.abort_reason) metrics_observe(s->metrics, HIST_E2E, now - g->t_arrival);
        if (s->cfg.log_requests && !quiet) slog_request(&L);
        gen_release_http(g, done ? ABORT_NONE : why);
    } else if (s->cfg.log_requests && !quiet) {
        slog_request(&L);
    }
    client_release(hr);
    rsp_ctx_destroy(hr->rsp);
    sbuf_free(&hr->wbuf);
    if (hr->counted) atomic_fetch_sub(&s->inflight, 1);
    free(hr);
}

/* Errors httpd makes itself (malformed requests, limits, deadlines): OpenAI JSON. */
static void error_body(void *app, const char *client, int status, const char *message, sbuf *out) {
    server *s = app;
    (void)client;
    const char *code = status == 408   ? "request_timeout"
                       : status == 413 ? "request_too_large"
                       : status == 414 ? "uri_too_long"
                       : status == 431 ? "request_header_fields_too_large"
                       : status == 417 ? "expectation_failed"
                       : status == 501 ? "not_implemented"
                       : status == 505 ? "http_version_not_supported"
                       : status == 503 ? "server_busy"
                       : status >= 500 ? NULL
                                       : "invalid_request";
    api_error e;
    if (status == 413)
        api_fail(&e, status, code, NULL, "The request body exceeds %lld bytes.", (long long)s->cfg.max_body_bytes);
    else
        api_fail(&e, status, code, NULL, "%s", message);
    api_error_json(out, &e);
    metrics_http(s->metrics, status);
}

int http_start(server *s, char *err, size_t eb) {
    s->n_client_slots = 1024;
    s->clients = calloc((size_t)s->n_client_slots, sizeof *s->clients);
    if (!s->clients) return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
    const server_config *c = &s->cfg;
    httpd_config hc = {.host = c->host,
                       .port = (int)c->port,
                       .n_threads = (int)c->http_threads,
                       .max_connections = (int)c->max_connections,
                       .reserve_connections = (int)c->reserve_connections,
                       .header_timeout_s = c->header_timeout_s,
                       .body_timeout_s = c->body_timeout_s,
                       .idle_timeout_s = c->keepalive_timeout_s,
                       .write_timeout_s = (double)c->connection_timeout_s,
                       .max_head_bytes = (size_t)c->max_header_bytes,
                       .max_target_bytes = 8192,
                       .max_headers = 100,
                       .max_body_bytes = (size_t)c->max_body_bytes,
                       .max_body_total_bytes = (size_t)c->max_buffered_body_bytes};
    const httpd_handlers h = {.on_head = on_head,
                              .on_request = on_request,
                              .on_wake = on_wake,
                              .on_done = on_done,
                              .error_body = error_body};
    return httpd_start(&s->httpd, &hc, &h, s, err, eb);
}

void http_stop(server *s) {
    httpd_stop(s->httpd);
    s->httpd = NULL;
    free(s->clients);
    s->clients = NULL;
}
