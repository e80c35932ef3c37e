/* http.c — libmicrohttpd glue: per-request context, routing, auth, body limits, the
 * small endpoints, the generation endpoints (non-streaming: suspend until done;
 * streaming: a callback response whose reader suspends when it has nothing to send),
 * and the one place errors become HTTP responses. MHD worker threads. */
#include "http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "gen.h"
#include "log.h"
#include "model/model.h"
#include "response.h"
#include "tokenizer/tokenizer.h"

typedef struct http_req http_req;
typedef enum MHD_Result (*route_fn)(http_req *hr);

typedef struct route {
    const char *path;
    const char *method; /* GET routes also answer HEAD */
    route_fn fn;
    bool open;         /* no API key needed */
    bool needs_engine; /* 503 while loading */
    bool quiet;        /* not logged unless --log-health */
    bool prefix;       /* path is a prefix ("/v1/models/") */
} route;

struct http_req {
    server *s;
    struct MHD_Connection *conn;
    const route *rt;
    char method[12];
    char path[128];
    char request_id[72];
    char client[64];
    double t_start;
    const char *url;
    bool responded;
    int status;
    const char *err_code;
    sbuf body;
    bool too_large;
    bool client_slot; /* holds a per-client concurrency slot */
    gen_req *gen;
    sbuf wbuf; /* streaming: bytes formatted, not yet handed to MHD */
    size_t wpos;
};

/* ---- responses: every response goes through respond(); every error through
 * http_error() -------------------------------------------------------------------- */

static enum MHD_Result respond(http_req *hr, int status, const char *ctype, sbuf *body,
                               const api_error *e) {
    size_t n = 0;
    char *p = sbuf_take(body, &n);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, p, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(p);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "X-Request-Id", hr->request_id);
    if (status == 503 || status == 429) {
        char ra[24];
        snprintf(ra, sizeof ra, "%lld", (long long)hr->s->cfg.retry_after_s);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405 && hr->rt) MHD_add_response_header(r, "Allow", hr->rt->method);
    hr->status = status;
    hr->err_code = e ? e->code : NULL;
    hr->responded = true;
    metrics_http(hr->s->metrics, status);
    enum MHD_Result ret = MHD_queue_response(hr->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result http_error(http_req *hr, const api_error *e) {
    sbuf b = {0};
    api_error_json(&b, e);
    return respond(hr, e->status, "application/json", &b, e);
}

static enum MHD_Result http_errorf(http_req *hr, int status, const char *code, const char *param,
                                   const char *fmt, ...) IFD_PRINTF(5, 6);
static enum MHD_Result http_errorf(http_req *hr, int status, const char *code, const char *param,
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

static enum MHD_Result respond_json(http_req *hr, sbuf *b) {
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
        const char *h = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND, "Authorization");
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

static enum MHD_Result ep_health(http_req *hr) {
    sbuf b = {0};
    sbuf_puts(&b, "{\"status\":\"ok\"}");
    return respond_json(hr, &b);
}

static enum MHD_Result ep_ready(http_req *hr) {
    int st = atomic_load(&hr->s->state);
    if (st == SRV_READY) {
        sbuf b = {0};
        sbuf_puts(&b, "{\"status\":\"ready\"}");
        return respond_json(hr, &b);
    }
    if (st == SRV_LOADING) return http_errorf(hr, 503, "model_loading", NULL, "Not ready: the model is loading.");
    if (st == SRV_DRAINING) return http_errorf(hr, 503, "shutting_down", NULL, "Not ready: the server is shutting down.");
    return http_errorf(hr, 503, "model_load_failed", NULL, "Not ready: the model failed to load.");
}

static enum MHD_Result ep_metrics(http_req *hr) {
    server *s = hr->s;
    inferd_stats st;
    bool up = atomic_load(&s->state) != SRV_LOADING && s->engine;
    if (up) inferd_engine_stats(s->engine, &st);
    sbuf b = {0};
    metrics_render(s->metrics, up ? &st : NULL, &b);
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
    const char *root = s->model ? s->model->name : name;
    sbuf_json_str(b, root, strlen(root));
    sbuf_printf(b, ",\"parent\":null,\"max_model_len\":%d}", (int)s->max_model_len);
}

static enum MHD_Result ep_models(http_req *hr) {
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

static enum MHD_Result ep_model(http_req *hr) {
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

static enum MHD_Result ep_tokenize(http_req *hr) {
    server *s = hr->s;
    api_error e;
    cJSON *root = oai_parse_object(hr->body.p, hr->body.n, &e);
    if (!root) return http_error(hr, &e);
    enum MHD_Result ret;
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
        char *copy = cJSON_PrintUnformatted(root);
        int rc = copy ? oai_parse(&r, OAI_CHAT, copy, strlen(copy), &lim, &e) : api_fail(&e, 500, NULL, NULL, "out of memory");
        free(copy);
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

static enum MHD_Result ep_detokenize(http_req *hr) {
    server *s = hr->s;
    api_error e;
    cJSON *root = oai_parse_object(hr->body.p, hr->body.n, &e);
    if (!root) return http_error(hr, &e);
    enum MHD_Result ret;
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

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    http_req *hr = cls;
    gen_req *g = hr->gen;
    (void)pos;
    if (hr->wpos == hr->wbuf.n) {
        sbuf_reset(&hr->wbuf);
        hr->wpos = 0;
        const double now = ifd_now_s();
        pthread_mutex_lock(&g->mu);
        if (g->disconnected) {
            pthread_mutex_unlock(&g->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        bool done = sse_fill(g, &hr->wbuf);
        if (hr->wbuf.n == 0) {
            if (done) {
                pthread_mutex_unlock(&g->mu);
                return MHD_CONTENT_READER_END_OF_STREAM;
            }
            if (now - g->t_last_write < hr->s->cfg.keepalive_s) {
                g->suspended = true;
                MHD_suspend_connection(hr->conn);
                pthread_mutex_unlock(&g->mu);
                return 0;
            }
            sse_keepalive(&hr->wbuf);
        }
        g->t_last_write = now;
        pthread_mutex_unlock(&g->mu);
        if (hr->wbuf.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = IFD_MIN(max, hr->wbuf.n - hr->wpos);
    memcpy(buf, hr->wbuf.p + hr->wpos, k);
    hr->wpos += k;
    return (ssize_t)k;
}

static enum MHD_Result finish_nonstream(http_req *hr) {
    gen_req *g = hr->gen;
    sbuf b = {0};
    api_error e;
    pthread_mutex_lock(&g->mu);
    if (g->disconnected) {
        pthread_mutex_unlock(&g->mu);
        return MHD_NO; /* nobody to answer: close */
    }
    if (!g->all_done) { /* woken early (keep-alive tick): wait on */
        g->suspended = true;
        MHD_suspend_connection(hr->conn);
        pthread_mutex_unlock(&g->mu);
        return MHD_YES;
    }
    int status = resp_body(g, &b, &e);
    pthread_mutex_unlock(&g->mu);
    if (status != 200) {
        sbuf_free(&b);
        return http_error(hr, &e);
    }
    return respond_json(hr, &b);
}

static enum MHD_Result generate(http_req *hr, oai_kind kind) {
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
    if (oai_parse(&r, kind, hr->body.p, hr->body.n, &lim, &e)) {
        oai_request_free(&r);
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
        return http_error(hr, &e);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(hr->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    bool stream = r.stream;
    if (gen_start(s, &r, hr->conn, fd, hr->t_start, &hr->gen, &e)) return http_error(hr, &e);
    if (!stream) return finish_nonstream(hr);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, hr, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    MHD_add_response_header(resp, "X-Request-Id", hr->request_id);
    hr->status = 200;
    hr->responded = true;
    metrics_http(s->metrics, 200);
    enum MHD_Result ret = MHD_queue_response(hr->conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result ep_chat(http_req *hr) { return generate(hr, OAI_CHAT); }
static enum MHD_Result ep_completions(http_req *hr) { return generate(hr, OAI_COMPLETION); }

static const route ROUTES[] = {
    {"/v1/chat/completions", "POST", ep_chat, false, true, false, false},
    {"/v1/completions", "POST", ep_completions, false, true, false, false},
    {"/v1/models", "GET", ep_models, false, true, false, false},
    {"/v1/models/", "GET", ep_model, false, true, false, true},
    {"/tokenize", "POST", ep_tokenize, false, true, false, false},
    {"/detokenize", "POST", ep_detokenize, false, true, false, false},
    {"/health", "GET", ep_health, true, false, true, false},
    {"/health/ready", "GET", ep_ready, true, false, true, false},
    {"/metrics", "GET", ep_metrics, false, false, true, false},
};

static const route *route_find(const char *url) {
    size_t n = strlen(url);
    while (n > 1 && url[n - 1] == '/') n--; /* "/v1/models/" == "/v1/models" */
    for (size_t i = 0; i < IFD_ARRAY_LEN(ROUTES); i++) {
        const route *r = &ROUTES[i];
        size_t k = strlen(r->path);
        if (r->prefix ? (n > k && !strncmp(url, r->path, k)) : (n == k && !strncmp(url, r->path, k))) return r;
    }
    return NULL;
}

/* ---- the MHD callbacks ---------------------------------------------------------------- */

static void request_id(http_req *hr) {
    const char *h = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND, "X-Request-Id");
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

static void client_addr(http_req *hr) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(hr->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(hr->client, sizeof hr->client, "?");
    if (!ci || !ci->client_addr) return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, hr->client, sizeof hr->client);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, hr->client, sizeof hr->client);
}

/* Checks that need only the headers. Returns MHD_YES with nothing queued to go on. */
static enum MHD_Result precheck(http_req *hr, const char *method) {
    server *s = hr->s;
    const route *r = hr->rt;
    if (!r) return http_errorf(hr, 404, "not_found", NULL, "Unknown route.");
    bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (strcmp(method, r->method) && !(is_get && !strcmp(r->method, "GET")))
        return http_errorf(hr, 405, "method_not_allowed", NULL, "Method not allowed on this route.");
    if (!r->open && !authorized(hr))
        return http_errorf(hr, 401, "invalid_api_key", NULL, "Missing or invalid API key.");
    int st = atomic_load(&s->state);
    if (st == SRV_DRAINING && r->needs_engine) {
        metrics_rejected(s->metrics, "shutting_down");
        return http_errorf(hr, 503, "shutting_down", NULL, "The server is shutting down.");
    }
    if (st != SRV_READY && r->needs_engine)
        return http_errorf(hr, 503, st == SRV_LOADING ? "model_loading" : "model_load_failed", NULL,
                           st == SRV_LOADING ? "The model is loading." : "The model failed to load.");
    const char *cl = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->cfg.max_body_bytes)
        return http_errorf(hr, 413, "request_too_large", NULL, "The request body exceeds %lld bytes.",
                           (long long)s->cfg.max_body_bytes);
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    server *s = cls;
    (void)version;
    http_req *hr = *con_cls;
    if (!hr) {
        hr = calloc(1, sizeof *hr);
        if (!hr) return MHD_NO;
        atomic_fetch_add(&s->inflight, 1);
        *con_cls = hr;
        hr->s = s;
        hr->conn = conn;
        hr->url = url;
        hr->t_start = ifd_now_s();
        snprintf(hr->method, sizeof hr->method, "%s", method);
        snprintf(hr->path, sizeof hr->path, "%s", url);
        hr->rt = route_find(url);
        request_id(hr);
        client_addr(hr);
        return precheck(hr, method);
    }
    if (hr->responded && !hr->gen) { /* early answer: drop the rest of the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!hr->too_large) {
            if (hr->body.n + *upload_size > (size_t)s->cfg.max_body_bytes) {
                hr->too_large = true;
                sbuf_free(&hr->body);
            } else {
                sbuf_put(&hr->body, upload, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (hr->gen) return finish_nonstream(hr); /* resumed */
    if (hr->too_large)
        return http_errorf(hr, 413, "request_too_large", NULL, "The request body exceeds %lld bytes.",
                           (long long)s->cfg.max_body_bytes);
    if (hr->body.oom) return http_errorf(hr, 500, NULL, NULL, "out of memory");
    return hr->rt->fn(hr);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    server *s = cls;
    http_req *hr = *con_cls;
    (void)conn;
    if (!hr) return;
    *con_cls = NULL;
    const double now = ifd_now_s();
    req_log L = {.request_id = hr->request_id, .method = hr->method, .path = hr->path,
                 .client = hr->client, .status = hr->status ? hr->status : 499,
                 .error_code = hr->err_code, .queue_s = -1, .ttft_s = -1, .total_s = now - hr->t_start};
    gen_req *g = hr->gen;
    if (g) {
        abort_reason why = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? ABORT_NONE
                           : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? ABORT_SHUTDOWN
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
        }
        L.queue_s = q;
        L.ttft_s = g->t_first_token > 0 ? g->t_first_token - g->t_arrival : -1;
        for (int32_t i = 0; i < g->n_choices; i++) {
            gen_choice *ch = &g->choices[i];
            L.completion_tokens += ch->completion_tokens;
            bool tc = false;
            if (g->req.tools && ch->finished && ch->finish == INFERD_FINISH_STOP) {
                tool_calls t;
                tc = chat_parse_tool_calls(ch->text.p ? ch->text.p : "", ch->text.n, &t) > 0;
                tool_calls_free(&t);
            }
            if (!ch->finished) continue;
            const char *fr = resp_finish(ch, tc);
            finish_label fl = !strcmp(fr, "stop") ? FIN_STOP : !strcmp(fr, "length") ? FIN_LENGTH
                              : !strcmp(fr, "tool_calls") ? FIN_TOOL_CALLS : !strcmp(fr, "abort") ? FIN_ABORT : FIN_ERROR;
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
        if (s->cfg.log_requests && (!hr->rt || !hr->rt->quiet || s->cfg.log_health)) slog_request(&L);
        gen_release_http(g, done ? ABORT_NONE : why);
    } else if (s->cfg.log_requests && (!hr->rt || !hr->rt->quiet || s->cfg.log_health)) {
        slog_request(&L);
    }
    client_release(hr);
    sbuf_free(&hr->body);
    sbuf_free(&hr->wbuf);
    free(hr);
    atomic_fetch_sub(&s->inflight, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    (void)cls;
    slog("warn", "http: %s", msg);
}

int http_start(server *s, char *err, size_t eb) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%lld", (long long)s->cfg.port);
    int gai = getaddrinfo(s->cfg.host, port, &hints, &ai);
    if (gai) return ifd_errf(err, eb, IFD_ERR_INVALID, "--host %s: %s", s->cfg.host, gai_strerror(gai));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    if (ai->ai_family == AF_INET6 && !strcmp(s->cfg.host, "::")) flags |= MHD_USE_DUAL_STACK;
    s->n_client_slots = 1024;
    s->clients = calloc((size_t)s->n_client_slots, sizeof *s->clients);
    if (!s->clients) {
        freeaddrinfo(ai);
        return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
    }
    s->mhd = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.http_threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.connection_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd)
        return ifd_errf(err, eb, IFD_ERR_IO, "cannot listen on %s port %lld (in use, or not permitted)",
                        s->cfg.host, (long long)s->cfg.port);
    return 0;
}

void http_stop(server *s) {
    if (s->mhd) MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    free(s->clients);
    s->clients = NULL;
}
