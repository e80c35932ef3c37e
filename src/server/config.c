/* config.c — the one declarative option table and the four sources it drives:
 * defaults < JSON config file < INFERD_* environment < --flags. Also --help and the
 * effective-config JSON logged at start. Main thread, at startup only. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/buf.h"
#include "util/common.h"

typedef enum cfg_type { CFG_STR, CFG_INT, CFG_SIZE, CFG_FLOAT, CFG_BOOL, CFG_ENUM } cfg_type;

typedef struct cfg_opt {
    const char *name;  /* --name, INFERD_NAME (dashes -> underscores), "name" in the file */
    const char *alias; /* short flag or NULL */
    cfg_type type;
    size_t off;
    const char *def;     /* default, as text (NULL: unset string) */
    double lo, hi;       /* bounds for numbers */
    const char *choices; /* CFG_ENUM: "a|b|c" -> 0, 1, 2 */
    bool secret;         /* redacted in the effective-config line */
    const char *help;
} cfg_opt;

#define O(f) offsetof(server_config, f)
#define BIG 9.0e15
static const cfg_opt OPTS[] = {
    {"model", "-m", CFG_STR, O(model), NULL, 0, 0, NULL, false, "GGUF model file to serve"},
    {"served-model-name", NULL, CFG_STR, O(served_model_name), NULL, 0, 0, NULL, false,
     "model name(s) the API answers to, comma-separated (default: the file's base name, with and without .gguf)"},
    {"chat-template-file", NULL, CFG_STR, O(chat_template_file), NULL, 0, 0, NULL, false,
     "Jinja chat template to use instead of the model's (default: the GGUF's, else ChatML)"},
    {"allow-request-chat-template", NULL, CFG_BOOL, O(allow_request_chat_template), "false", 0, 0,
     NULL, false, "accept a chat_template field in chat requests"},
    {"host", NULL, CFG_STR, O(host), "127.0.0.1", 0, 0, NULL, false, "address to bind (:: or 0.0.0.0 for all)"},
    {"port", NULL, CFG_INT, O(port), "8000", 0, 65535, NULL, false, "TCP port"},
    {"api-key", NULL, CFG_STR, O(api_key), NULL, 0, 0, NULL, true,
     "require 'Authorization: Bearer KEY' on every route but /health*"},
    {"api-key-file", NULL, CFG_STR, O(api_key_file), NULL, 0, 0, NULL, false,
     "file with API keys, one per line (re-read on SIGHUP)"},
    {"http-threads", NULL, CFG_INT, O(http_threads), "4", 1, 256, NULL, false,
     "HTTP worker threads (parsing, templating, tokenizing)"},
    {"max-connections", NULL, CFG_INT, O(max_connections), "1024", 1, 65536, NULL, false,
     "open HTTP connections at most (idle kept-alive ones are closed to make room)"},
    {"reserve-connections", NULL, CFG_INT, O(reserve_connections), "32", 0, 4096, NULL, false,
     "connections over --max-connections that may still reach /health, /health/ready and /metrics"},
    {"connection-timeout", NULL, CFG_INT, O(connection_timeout_s), "600", 0, 86400, NULL, false,
     "seconds a response (e.g. a stream) may wait on a client that reads nothing (0 = forever)"},
    {"header-timeout", NULL, CFG_FLOAT, O(header_timeout_s), "10", 0.1, 3600, NULL, false,
     "seconds to receive a request's head, from its first byte (or from connecting)"},
    {"body-timeout", NULL, CFG_FLOAT, O(body_timeout_s), "30", 0.1, 3600, NULL, false,
     "seconds to receive a request's body, from the end of its head"},
    {"keepalive-timeout", NULL, CFG_FLOAT, O(keepalive_timeout_s), "30", 0.1, 86400, NULL, false,
     "seconds a kept-alive connection may sit idle between requests"},
    {"max-header-bytes", NULL, CFG_SIZE, O(max_header_bytes), "32K", 1024, 1 << 20, NULL, false,
     "largest request head (request line + headers; 431 above)"},
    {"allowed-origins", NULL, CFG_STR, O(allowed_origins), NULL, 0, 0, NULL, false,
     "CORS: origins allowed to call the API from a browser, comma-separated, or * (default: none)"},
    {"max-body-bytes", NULL, CFG_SIZE, O(max_body_bytes), "8M", 1024, 1 << 30, NULL, false,
     "largest request body (413 above)"},
    {"max-buffered-body-bytes", NULL, CFG_SIZE, O(max_buffered_body_bytes), "256M", 1024, BIG, NULL, false,
     "request bodies being received at once, all connections together (503 above)"},
    {"max-n", NULL, CFG_INT, O(max_n), "8", 1, 128, NULL, false, "largest n (choices per prompt)"},
    {"max-top-logprobs", NULL, CFG_INT, O(max_top_logprobs), "20", 0, 20, NULL, false,
     "largest top_logprobs / logprobs"},
    {"max-stop", NULL, CFG_INT, O(max_stop), "16", 0, 16, NULL, false, "most stop strings per request"},
    {"max-logit-bias", NULL, CFG_INT, O(max_logit_bias), "1024", 0, 1024, NULL, false,
     "most logit_bias entries per request"},
    {"max-prompts", NULL, CFG_INT, O(max_prompts), "64", 1, 4096, NULL, false,
     "most prompts in one completions request"},
    {"max-tokens-policy", NULL, CFG_ENUM, O(max_tokens_policy), "clamp", 0, 0, "clamp|reject", false,
     "max_tokens beyond the context: clamp to what is left, or reject with 400"},
    {"max-waiting-requests", NULL, CFG_INT, O(max_waiting_requests), "256", 0, 1 << 20, NULL, false,
     "requests waiting for their first token at most; more get 503 (0 = no limit)"},
    {"max-waiting-tokens", NULL, CFG_INT, O(max_waiting_tokens), "0", 0, BIG, NULL, false,
     "prompt tokens waiting at most; more get 503 (0 = no limit)"},
    {"max-requests-per-client", NULL, CFG_INT, O(max_requests_per_client), "0", 0, 1 << 20, NULL, false,
     "concurrent generation requests per client address; more get 429 (0 = no limit)"},
    {"queue-timeout", NULL, CFG_FLOAT, O(queue_timeout_s), "0", 0, 86400, NULL, false,
     "seconds a request may wait for its first token before it is dropped with 503 (0 = none)"},
    {"retry-after", NULL, CFG_INT, O(retry_after_s), "1", 0, 3600, NULL, false,
     "Retry-After seconds on 429 and 503"},
    {"keepalive-interval", NULL, CFG_FLOAT, O(keepalive_s), "10", 0.05, 3600, NULL, false,
     "seconds of silence before a ': keep-alive' comment on a stream"},
    {"shutdown-timeout", NULL, CFG_FLOAT, O(shutdown_timeout_s), "30", 0, 86400, NULL, false,
     "on SIGTERM, seconds in-flight requests get to finish before they are aborted"},
    {"template-timeout", NULL, CFG_FLOAT, O(template_timeout_s), "2", 0.01, 600, NULL, false,
     "seconds one chat-template render may take"},
    {"template-max-bytes", NULL, CFG_SIZE, O(template_max_bytes), "4M", 4096, 1 << 30, NULL, false,
     "largest chat-template output"},
    {"threads", "-t", CFG_INT, O(threads), "0", 0, 1024, NULL, false, "engine CPU threads (0 = all cores)"},
    {"max-num-seqs", NULL, CFG_INT, O(max_num_seqs), "64", 1, 65536, NULL, false,
     "sequences running at once"},
    {"max-num-batched-tokens", NULL, CFG_INT, O(max_num_batched_tokens), "256", 1, 1 << 24, NULL,
     false, "tokens per engine step"},
    {"kv-cache-memory", NULL, CFG_SIZE, O(kv_cache_memory), "0", 0, BIG, NULL, false,
     "KV cache bytes, e.g. 2G (0 = kv-cache-fraction of free memory)"},
    {"kv-cache-fraction", NULL, CFG_FLOAT, O(kv_cache_fraction), "0.25", 0.001, 1, NULL, false,
     "fraction of free memory for the KV cache"},
    {"block-size", NULL, CFG_INT, O(block_size), "16", 1, 1024, NULL, false, "KV block size in tokens"},
    {"max-model-len", NULL, CFG_INT, O(max_model_len), "0", 0, 1 << 24, NULL, false,
     "context length (0 = the model's)"},
    {"enable-prefix-caching", NULL, CFG_BOOL, O(enable_prefix_caching), "true", 0, 0, NULL, false,
     "reuse cached KV blocks of shared prompt prefixes"},
    {"reference-kernels", NULL, CFG_BOOL, O(reference_kernels), "false", 0, 0, NULL, false,
     "CPU plain C reference kernels (slow; for tests)"},
    {"log-requests", NULL, CFG_BOOL, O(log_requests), "true", 0, 0, NULL, false,
     "one JSON log line per request"},
    {"log-prompts", NULL, CFG_BOOL, O(log_prompts), "false", 0, 0, NULL, false,
     "include prompts in the request log lines"},
    {"log-health", NULL, CFG_BOOL, O(log_health), "false", 0, 0, NULL, false,
     "log /health, /health/ready and /metrics requests too"},
};
#undef O

static const char *const *cfg_str_at(const server_config *c, const cfg_opt *o) {
    return (const char *const *)((const char *)c + o->off);
}

/* "max-num-seqs", "max_num_seqs", "--max-num-seqs" -> the option, or NULL */
static const cfg_opt *cfg_find(const char *name, size_t n) {
    while (n && *name == '-') name++, n--;
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
        const char *on = OPTS[i].name;
        if (strlen(on) != n) continue;
        size_t k = 0;
        for (; k < n; k++) {
            char a = name[k] == '_' ? '-' : name[k];
            if (a != on[k]) break;
        }
        if (k == n) return &OPTS[i];
    }
    return NULL;
}

static int parse_bool(const char *v, bool *out) {
    if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        *out = true;
    else if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no") ||
             !strcasecmp(v, "off"))
        *out = false;
    else
        return -1;
    return 0;
}

static int opt_set(server_config *c, const cfg_opt *o, const char *v, char *err, size_t eb) {
    void *p = (char *)c + o->off;
    char *end = NULL;
    switch (o->type) {
    case CFG_STR: {
        char *s = strdup(v);
        if (!s) return ifd_errf(err, eb, IFD_ERR_NOMEM, "out of memory");
        free(*(char **)p);
        *(char **)p = s;
        return 0;
    }
    case CFG_BOOL:
        if (parse_bool(v, (bool *)p))
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected true or false", o->name);
        return 0;
    case CFG_ENUM: {
        int idx = 0;
        for (const char *s = o->choices; *s; idx++) {
            const char *bar = strchr(s, '|');
            size_t n = bar ? (size_t)(bar - s) : strlen(s);
            if (strlen(v) == n && !strncmp(v, s, n)) {
                *(int64_t *)p = idx;
                return 0;
            }
            s += n + (bar ? 1 : 0);
        }
        return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected one of %s", o->name, o->choices);
    }
    case CFG_INT:
    case CFG_SIZE:
    case CFG_FLOAT: {
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || errno == ERANGE || !isfinite(d))
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: not a number", o->name);
        if (o->type == CFG_SIZE && *end) {
            double mul = 1;
            switch (toupper((unsigned char)*end)) {
            case 'K': mul = 1024.0; break;
            case 'M': mul = 1024.0 * 1024; break;
            case 'G': mul = 1024.0 * 1024 * 1024; break;
            case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
            default: mul = 0;
            }
            if (mul == 0) return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: bad size suffix", o->name);
            d *= mul;
            end++;
            if (toupper((unsigned char)*end) == 'I') end++;
            if (toupper((unsigned char)*end) == 'B') end++;
        }
        if (*end) return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: not a number", o->name);
        if (o->type != CFG_FLOAT && d != floor(d))
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: expected an integer", o->name);
        if (d < o->lo || d > o->hi)
            return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s: out of range [%.17g, %.17g]", o->name,
                            o->lo, o->hi);
        if (o->type == CFG_FLOAT)
            *(double *)p = d;
        else
            *(int64_t *)p = (int64_t)d;
        return 0;
    }
    }
    return IFD_ERR_INTERNAL;
}

void server_config_init(server_config *c) {
    memset(c, 0, sizeof *c);
    char err[256];
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++)
        if (OPTS[i].def) IFD_ASSERT(opt_set(c, &OPTS[i], OPTS[i].def, err, sizeof err) == 0);
}

void server_config_deinit(server_config *c) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++)
        if (OPTS[i].type == CFG_STR) {
            free(*(char **)((char *)c + OPTS[i].off));
            *(char **)((char *)c + OPTS[i].off) = NULL;
        }
    free(c->config_file);
    c->config_file = NULL;
}

int server_config_set(server_config *c, const char *name, const char *value, char *err,
                      size_t err_bytes) {
    const cfg_opt *o = cfg_find(name, strlen(name));
    if (!o) return ifd_errf(err, err_bytes, IFD_ERR_NOT_FOUND, "unknown option '%s'", name);
    return opt_set(c, o, value, err, err_bytes);
}

static int load_file(server_config *c, const char *path, char *err, size_t eb) {
    char *text = NULL;
    size_t n = 0;
    char e2[256];
    if (ifd_read_file(path, &text, &n, e2, sizeof e2))
        return ifd_errf(err, eb, IFD_ERR_IO, "--config %s: %s", path, e2);
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ifd_errf(err, eb, IFD_ERR_FORMAT, "--config %s: not a JSON object", path);
    }
    int rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const cfg_opt *o = cfg_find(it->string, strlen(it->string));
        if (!o) {
            rc = ifd_errf(err, eb, IFD_ERR_INVALID, "--config %s: unknown option '%s'", path, it->string);
            break;
        }
        char num[64];
        const char *v = NULL;
        if (cJSON_IsString(it))
            v = it->valuestring;
        else if (cJSON_IsBool(it))
            v = cJSON_IsTrue(it) ? "true" : "false";
        else if (cJSON_IsNumber(it)) {
            snprintf(num, sizeof num, "%.17g", it->valuedouble);
            v = num;
        } else if (cJSON_IsNull(it))
            continue;
        if (!v) {
            rc = ifd_errf(err, eb, IFD_ERR_INVALID, "--config %s: '%s' has the wrong type", path, it->string);
            break;
        }
        if ((rc = opt_set(c, o, v, e2, sizeof e2))) {
            ifd_errf(err, eb, rc, "--config %s: %s", path, e2);
            break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

static void env_name(const cfg_opt *o, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "INFERD_");
    for (const char *s = o->name; *s && k + 1 < cap; s++)
        out[k++] = *s == '-' ? '_' : (char)toupper((unsigned char)*s);
    out[k] = 0;
}

int server_config_load(server_config *c, int argc, char **argv, char *err, size_t eb) {
    /* 1. --config (or INFERD_CONFIG) first: the file sits under env and flags */
    const char *cfg = getenv("INFERD_CONFIG");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            server_config_help(stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--config") && i + 1 < argc) cfg = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9)) cfg = argv[i] + 9;
    }
    if (cfg && *cfg) {
        c->config_file = strdup(cfg);
        if (load_file(c, cfg, err, eb)) return -1;
    }
    /* 2. environment */
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
        char name[96], e2[256];
        env_name(&OPTS[i], name, sizeof name);
        const char *v = getenv(name);
        if (!v) continue;
        if (opt_set(c, &OPTS[i], v, e2, sizeof e2)) {
            ifd_errf(err, eb, IFD_ERR_INVALID, "%s: %s", name, e2);
            return -1;
        }
    }
    /* 3. flags */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--config=", 9)) continue;
        const char *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const cfg_opt *o = NULL;
        bool negated = false;
        for (size_t k = 0; k < IFD_ARRAY_LEN(OPTS) && a[0] == '-' && a[1] != '-'; k++)
            if (OPTS[k].alias && !strcmp(OPTS[k].alias, a)) o = &OPTS[k];
        if (!o && !strncmp(a, "--", 2)) o = cfg_find(a, n);
        if (!o && !strncmp(a, "--no-", 5)) {
            o = cfg_find(a + 5, n - 5);
            if (o && o->type != CFG_BOOL) o = NULL;
            negated = o != NULL;
        }
        if (!o) return ifd_errf(err, eb, IFD_ERR_INVALID, "unknown option '%s' (see --help)", a);
        const char *v;
        if (o->type == CFG_BOOL && !eq) {
            v = negated ? "false" : "true";
        } else if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) return ifd_errf(err, eb, IFD_ERR_INVALID, "--%s needs a value", o->name);
            v = argv[++i];
        }
        char e2[256];
        if (opt_set(c, o, v, e2, sizeof e2)) {
            snprintf(err, eb, "%s", e2);
            return -1;
        }
    }
    return 0;
}

void server_config_help(FILE *fp) {
    fprintf(fp, "usage: inferd serve -m FILE [options]\n\n"
                "Serves the model over an OpenAI-compatible HTTP API. Every option may also be\n"
                "given in a JSON file (--config FILE, keys as below) or as an INFERD_* environment\n"
                "variable; flags win over the environment, which wins over the file.\n\n"
                "options:\n"
                "  --config FILE                 JSON config file (INFERD_CONFIG)\n");
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
        const cfg_opt *o = &OPTS[i];
        const char *meta = o->type == CFG_STR    ? " STR"
                           : o->type == CFG_BOOL ? ""
                           : o->type == CFG_FLOAT ? " X"
                           : o->type == CFG_SIZE ? " BYTES"
                           : o->type == CFG_ENUM ? " MODE"
                                                 : " N";
        char flag[64], env[96];
        snprintf(flag, sizeof flag, "%s%s--%s%s", o->alias ? o->alias : "", o->alias ? ", " : "",
                 o->name, meta);
        env_name(o, env, sizeof env);
        fprintf(fp, "  %-29s %s", flag, o->help);
        if (o->type == CFG_ENUM) fprintf(fp, " [%s]", o->choices);
        if (o->def && !o->secret) fprintf(fp, " (default %s)", o->def);
        fprintf(fp, " {%s}\n", env);
    }
}

char *server_config_effective_json(const server_config *c) {
    sbuf b = {0};
    sbuf_puts(&b, "{");
    for (size_t i = 0; i < IFD_ARRAY_LEN(OPTS); i++) {
        const cfg_opt *o = &OPTS[i];
        const void *p = (const char *)c + o->off;
        if (i) sbuf_puts(&b, ",");
        sbuf_json_str(&b, o->name, strlen(o->name));
        sbuf_puts(&b, ":");
        switch (o->type) {
        case CFG_STR: {
            const char *s = *cfg_str_at(c, o);
            if (!s) sbuf_puts(&b, "null");
            else if (o->secret) sbuf_puts(&b, "\"(set)\"");
            else sbuf_json_str(&b, s, strlen(s));
            break;
        }
        case CFG_BOOL: sbuf_puts(&b, *(const bool *)p ? "true" : "false"); break;
        case CFG_FLOAT: sbuf_json_num(&b, *(const double *)p); break;
        case CFG_INT:
        case CFG_SIZE: sbuf_printf(&b, "%lld", (long long)*(const int64_t *)p); break;
        case CFG_ENUM: {
            int64_t idx = *(const int64_t *)p;
            const char *s = o->choices;
            for (int64_t k = 0; k < idx && strchr(s, '|'); k++) s = strchr(s, '|') + 1;
            const char *bar = strchr(s, '|');
            sbuf_json_str(&b, s, bar ? (size_t)(bar - s) : strlen(s));
            break;
        }
        }
    }
    if (c->config_file) {
        sbuf_puts(&b, ",\"config\":");
        sbuf_json_str(&b, c->config_file, strlen(c->config_file));
    }
    sbuf_puts(&b, "}");
    if (b.oom) {
        sbuf_free(&b);
        return NULL;
    }
    return sbuf_take(&b, NULL);
}
