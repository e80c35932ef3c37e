/* openai.c — request parsing and validation for /v1/chat/completions and
 * /v1/completions, and the one error-body formatter. HTTP worker threads; no shared
 * state. */
#include "openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int api_fail(api_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

void api_error_json(sbuf *o, const api_error *e) {
    sbuf_puts(o, "{\"error\":{\"message\":");
    sbuf_json_str(o, e->message, strlen(e->message));
    sbuf_puts(o, ",\"type\":");
    const char *t = error_type(e->status);
    sbuf_json_str(o, t, strlen(t));
    sbuf_puts(o, ",\"param\":");
    if (e->param[0]) sbuf_json_str(o, e->param, strlen(e->param));
    else sbuf_puts(o, "null");
    sbuf_puts(o, ",\"code\":");
    if (e->code) sbuf_json_str(o, e->code, strlen(e->code));
    else sbuf_puts(o, "null");
    sbuf_puts(o, "}}");
}

/* ---- typed field access: absent and null mean "not given" ------------------------ */

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int bad_type(api_error *e, const char *name, const char *what) {
    return api_fail(e, 400, "invalid_type", name, "'%s' must be %s", name, what);
}

static int get_bool(const cJSON *o, const char *name, bool *out, api_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return bad_type(e, name, "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

static bool is_int(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
}

/* *given is set when the field is present (may be NULL). */
static int get_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out,
                   bool *given, api_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!is_int(v)) return bad_type(e, name, "an integer");
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return api_fail(e, 400, "invalid_value", name, "'%s' must be in [%lld, %lld]", name,
                        (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    if (given) *given = true;
    return 0;
}

/* lo_open: the lower bound itself is not allowed. */
static int get_num(const cJSON *o, const char *name, double lo, double hi, bool lo_open,
                   float *out, api_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return bad_type(e, name, "a number");
    double d = v->valuedouble;
    if (d < lo || d > hi || (lo_open && d == lo))
        return api_fail(e, 400, "invalid_value", name, "'%s' must be in %s%g, %g]", name,
                        lo_open ? "(" : "[", lo, hi);
    *out = (float)d;
    return 0;
}

static int get_str(const cJSON *o, const char *name, const char **out, api_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return bad_type(e, name, "a string");
    *out = v->valuestring;
    return 0;
}

static int unsupported(api_error *e, const char *name, const char *why) {
    return api_fail(e, 400, "unsupported_value", name, "'%s': %s", name, why);
}

cJSON *oai_parse_object(const char *body, size_t n, api_error *e) {
    if (n == 0) {
        api_fail(e, 400, "invalid_json", NULL, "the request body is empty; expected a JSON object");
        return NULL;
    }
    if (utf8_valid_prefix(body, n) != n) {
        api_fail(e, 400, "invalid_encoding", NULL, "the request body is not valid UTF-8");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, n, &end, false);
    if (!root) {
        api_fail(e, 400, "invalid_json", NULL, "the request body is not valid JSON (near byte %zu)",
                 end && end >= body ? (size_t)(end - body) : (size_t)0);
        return NULL;
    }
    /* only whitespace may follow the value */
    for (const char *p = end; p && p < body + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != 0) {
            cJSON_Delete(root);
            api_fail(e, 400, "invalid_json", NULL, "the request body has data after the JSON value");
            return NULL;
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        api_fail(e, 400, "invalid_json", NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

int oai_parse_ids(const cJSON *arr, const char *param, int32_t n_vocab, int32_t **ids,
                  int32_t *n_ids, api_error *e) {
    *ids = NULL;
    *n_ids = 0;
    if (!cJSON_IsArray(arr)) return bad_type(e, param, "an array of token ids");
    int n = cJSON_GetArraySize(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!v) return api_fail(e, 500, NULL, NULL, "out of memory");
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!is_int(it)) {
            free(v);
            return bad_type(e, param, "an array of integer token ids");
        }
        if (it->valuedouble < 0 || it->valuedouble >= n_vocab) {
            free(v);
            return api_fail(e, 400, "invalid_value", param,
                            "'%s' has a token id outside the vocabulary [0, %d)", param, (int)n_vocab);
        }
        v[k++] = (int32_t)it->valuedouble;
    }
    *ids = v;
    *n_ids = k;
    return 0;
}

/* ---- parts of the request --------------------------------------------------------- */

static int parse_stop(oai_request *r, const oai_limits *lim, api_error *e) {
    const cJSON *v = field(r->root, "stop");
    if (!v) return 0;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return 0; /* "" means no stop string */
        if (lim->max_stop < 1) return api_fail(e, 400, "invalid_value", "stop", "'stop' is limited to 0 strings");
        if (strlen(v->valuestring) > 256)
            return api_fail(e, 400, "invalid_value", "stop", "each stop string must be at most 256 bytes");
        r->stop[r->n_stop++] = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v)) return bad_type(e, "stop", "a string or an array of strings");
    if (cJSON_GetArraySize(v) > lim->max_stop)
        return api_fail(e, 400, "invalid_value", "stop", "'stop' may hold at most %d strings",
                        (int)lim->max_stop);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsString(it)) return bad_type(e, "stop", "a string or an array of strings");
        if (!it->valuestring[0]) continue;
        if (strlen(it->valuestring) > 256)
            return api_fail(e, 400, "invalid_value", "stop", "each stop string must be at most 256 bytes");
        r->stop[r->n_stop++] = it->valuestring;
    }
    return 0;
}

static int parse_stop_ids(oai_request *r, const oai_limits *lim, api_error *e) {
    const cJSON *v = field(r->root, "stop_token_ids");
    if (!v) return 0;
    if (!cJSON_IsArray(v)) return bad_type(e, "stop_token_ids", "an array of token ids");
    if (cJSON_GetArraySize(v) > 32)
        return api_fail(e, 400, "invalid_value", "stop_token_ids", "'stop_token_ids' may hold at most 32 ids");
    int32_t *ids, n;
    if (oai_parse_ids(v, "stop_token_ids", lim->n_vocab, &ids, &n, e)) return -1;
    memcpy(r->stop_ids, ids, sizeof(int32_t) * (size_t)n);
    r->n_stop_ids = n;
    free(ids);
    return 0;
}

static int parse_logit_bias(oai_request *r, const oai_limits *lim, api_error *e) {
    const cJSON *v = field(r->root, "logit_bias");
    if (!v) return 0;
    if (!cJSON_IsObject(v)) return bad_type(e, "logit_bias", "an object mapping token ids to numbers");
    int n = cJSON_GetArraySize(v);
    if (n > lim->max_logit_bias)
        return api_fail(e, 400, "invalid_value", "logit_bias", "'logit_bias' may hold at most %d entries",
                        (int)lim->max_logit_bias);
    if (n == 0) return 0;
    r->bias = calloc((size_t)n, sizeof *r->bias);
    if (!r->bias) return api_fail(e, 500, NULL, NULL, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        char *end = NULL;
        long id = strtol(it->string, &end, 10);
        if (!it->string[0] || *end || id < 0 || id >= lim->n_vocab)
            return api_fail(e, 400, "invalid_value", "logit_bias",
                            "'logit_bias' keys must be token ids in [0, %d)", (int)lim->n_vocab);
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return bad_type(e, "logit_bias", "an object mapping token ids to numbers");
        if (it->valuedouble < -100 || it->valuedouble > 100)
            return api_fail(e, 400, "invalid_value", "logit_bias", "'logit_bias' values must be in [-100, 100]");
        r->bias[r->n_bias].id = (int32_t)id;
        r->bias[r->n_bias].bias = (float)it->valuedouble;
        r->n_bias++;
    }
    return 0;
}

static int parse_content(const cJSON *c, int i, api_error *e) {
    char p[96];
    if (!c || cJSON_IsNull(c) || cJSON_IsString(c)) return 0;
    if (!cJSON_IsArray(c)) {
        snprintf(p, sizeof p, "messages[%d].content", i);
        return bad_type(e, p, "a string, null or an array of content parts");
    }
    int j = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const char *type = NULL;
        snprintf(p, sizeof p, "messages[%d].content[%d]", i, j);
        if (!cJSON_IsObject(part)) return bad_type(e, p, "an object");
        snprintf(p, sizeof p, "messages[%d].content[%d].type", i, j);
        if (get_str(part, "type", &type, e)) return bad_type(e, p, "a string");
        if (!type) return api_fail(e, 400, "missing_required_parameter", p, "'%s' is required", p);
        if (strcmp(type, "text"))
            return api_fail(e, 400, "unsupported_value", p, "'%s': only text content parts are supported", p);
        const cJSON *t = field(part, "text");
        snprintf(p, sizeof p, "messages[%d].content[%d].text", i, j);
        if (!cJSON_IsString(t)) return bad_type(e, p, "a string");
        j++;
    }
    return 0;
}

static int parse_messages(oai_request *r, api_error *e) {
    const cJSON *m = field(r->root, "messages");
    if (!m) return api_fail(e, 400, "missing_required_parameter", "messages", "'messages' is required");
    if (!cJSON_IsArray(m)) return bad_type(e, "messages", "an array of messages");
    if (cJSON_GetArraySize(m) == 0)
        return api_fail(e, 400, "invalid_value", "messages", "'messages' must not be empty");
    int i = 0;
    const cJSON *msg;
    char p[96];
    cJSON_ArrayForEach(msg, m) {
        snprintf(p, sizeof p, "messages[%d]", i);
        if (!cJSON_IsObject(msg)) return bad_type(e, p, "an object");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        snprintf(p, sizeof p, "messages[%d].role", i);
        if (!role) return api_fail(e, 400, "missing_required_parameter", p, "'%s' is required", p);
        if (!cJSON_IsString(role)) return bad_type(e, p, "a string");
        if (parse_content(cJSON_GetObjectItemCaseSensitive(msg, "content"), i, e)) return -1;
        const cJSON *tc = field(msg, "tool_calls");
        if (tc) {
            snprintf(p, sizeof p, "messages[%d].tool_calls", i);
            if (!cJSON_IsArray(tc)) return bad_type(e, p, "an array");
            const cJSON *call;
            cJSON_ArrayForEach(call, tc) {
                const cJSON *fn = cJSON_IsObject(call) ? field(call, "function") : NULL;
                if (!cJSON_IsObject(fn) || !cJSON_IsString(field(fn, "name")))
                    return bad_type(e, p, "an array of {\"type\":\"function\",\"function\":{\"name\",\"arguments\"}}");
                const cJSON *args = field(fn, "arguments");
                if (args && !cJSON_IsString(args) && !cJSON_IsObject(args))
                    return bad_type(e, p, "an array of calls whose arguments are JSON strings");
            }
        }
        const char *names[] = {"name", "tool_call_id"};
        for (size_t k = 0; k < 2; k++) {
            const cJSON *s = field(msg, names[k]);
            snprintf(p, sizeof p, "messages[%d].%s", i, names[k]);
            if (s && !cJSON_IsString(s)) return bad_type(e, p, "a string");
        }
        i++;
    }
    r->messages = m;
    return 0;
}

static int parse_tools(oai_request *r, api_error *e) {
    const cJSON *t = field(r->root, "tools");
    const cJSON *choice = field(r->root, "tool_choice");
    if (choice) {
        if (cJSON_IsString(choice)) {
            if (!strcmp(choice->valuestring, "none")) t = NULL;
            else if (strcmp(choice->valuestring, "auto"))
                return unsupported(e, "tool_choice", "only \"auto\" and \"none\" are supported");
        } else if (cJSON_IsObject(choice)) {
            return unsupported(e, "tool_choice", "only \"auto\" and \"none\" are supported");
        } else {
            return bad_type(e, "tool_choice", "a string");
        }
    }
    bool ptc = true;
    if (get_bool(r->root, "parallel_tool_calls", &ptc, e)) return -1;
    if (!t) return 0;
    if (!cJSON_IsArray(t)) return bad_type(e, "tools", "an array of tools");
    int i = 0;
    const cJSON *tool;
    char p[64];
    cJSON_ArrayForEach(tool, t) {
        snprintf(p, sizeof p, "tools[%d]", i);
        if (!cJSON_IsObject(tool)) return bad_type(e, p, "an object");
        const char *type = NULL;
        snprintf(p, sizeof p, "tools[%d].type", i);
        if (get_str(tool, "type", &type, e)) return bad_type(e, p, "a string");
        if (type && strcmp(type, "function"))
            return api_fail(e, 400, "unsupported_value", p, "'%s': only function tools are supported", p);
        const cJSON *fn = field(tool, "function");
        snprintf(p, sizeof p, "tools[%d].function", i);
        if (!cJSON_IsObject(fn)) return bad_type(e, p, "an object");
        snprintf(p, sizeof p, "tools[%d].function.name", i);
        const cJSON *name = field(fn, "name");
        if (!cJSON_IsString(name) || !name->valuestring[0]) return bad_type(e, p, "a non-empty string");
        const cJSON *params = field(fn, "parameters");
        snprintf(p, sizeof p, "tools[%d].function.parameters", i);
        if (params && !cJSON_IsObject(params)) return bad_type(e, p, "an object");
        i++;
    }
    if (i > 0) r->tools = t;
    return 0;
}

static int parse_prompt(oai_request *r, const oai_limits *lim, api_error *e) {
    const cJSON *p = field(r->root, "prompt");
    if (!p) return api_fail(e, 400, "missing_required_parameter", "prompt", "'prompt' is required");
    const char *what = "a string, an array of strings, an array of token ids or an array of token-id arrays";
    if (cJSON_IsString(p)) {
        r->prompt = p;
        return 0;
    }
    if (!cJSON_IsArray(p)) return bad_type(e, "prompt", what);
    int n = cJSON_GetArraySize(p);
    if (n == 0) return api_fail(e, 400, "invalid_value", "prompt", "'prompt' must not be empty");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsNumber(first)) { /* one prompt of token ids */
        r->prompt = p;
        return 0;
    }
    if (n > lim->max_prompts)
        return api_fail(e, 400, "invalid_value", "prompt", "'prompt' may hold at most %d prompts",
                        (int)lim->max_prompts);
    const cJSON *it;
    cJSON_ArrayForEach(it, p) {
        bool ok = cJSON_IsString(first) ? cJSON_IsString(it) : cJSON_IsArray(it) && cJSON_GetArraySize(it) > 0;
        if (!ok) return bad_type(e, "prompt", what);
    }
    r->prompt = p;
    return 0;
}

int oai_parse(oai_request *r, oai_kind kind, const char *body, size_t n, const oai_limits *lim,
              api_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->n = 1;
    r->add_generation_prompt = true;
    inferd_sampling_default(&r->sampling);
    r->root = oai_parse_object(body, n, e);
    if (!r->root) return -1;
    const cJSON *o = r->root;
    int64_t iv = 0;
    bool given = false;

    if (field(o, "model") && !cJSON_IsString(field(o, "model"))) return bad_type(e, "model", "a string");
    if (get_str(o, "model", &r->model, e)) return -1;
    if (get_bool(o, "stream", &r->stream, e)) return -1;
    const cJSON *so = field(o, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return bad_type(e, "stream_options", "an object");
        bool iu = false;
        if (get_bool(so, "include_usage", &iu, e)) return bad_type(e, "stream_options.include_usage", "a boolean");
        r->include_usage = iu && r->stream;
    }
    if (get_int(o, "n", 1, lim->max_n, &iv, &given, e)) return -1;
    if (given) r->n = (int32_t)iv;
    given = false;
    if (get_int(o, "max_tokens", 1, INT32_MAX, &iv, &given, e)) return -1;
    if (given) r->max_tokens = iv;
    given = false;
    if (kind == OAI_CHAT && get_int(o, "max_completion_tokens", 1, INT32_MAX, &iv, &given, e)) return -1;
    if (given) r->max_tokens = iv; /* wins over the deprecated max_tokens */

    inferd_sampling *s = &r->sampling;
    if (get_num(o, "temperature", 0, 2, false, &s->temperature, e)) return -1;
    if (get_num(o, "top_p", 0, 1, true, &s->top_p, e)) return -1;
    given = false;
    if (get_int(o, "top_k", -1, INT32_MAX, &iv, &given, e)) return -1;
    if (given) s->top_k = iv < 0 ? 0 : (int32_t)iv;
    if (get_num(o, "min_p", 0, 1, false, &s->min_p, e)) return -1;
    if (get_num(o, "presence_penalty", -2, 2, false, &s->presence_penalty, e)) return -1;
    if (get_num(o, "frequency_penalty", -2, 2, false, &s->frequency_penalty, e)) return -1;
    if (get_num(o, "repetition_penalty", 0, 100, true, &s->repetition_penalty, e)) return -1;
    given = false;
    if (get_int(o, "seed", INT64_MIN, INT64_MAX, &iv, &given, e)) return -1;
    if (given) {
        s->seed = (uint64_t)iv;
        s->has_seed = true;
    }
    if (get_bool(o, "ignore_eos", &s->ignore_eos, e)) return -1;
    const char *user = NULL;
    if (get_str(o, "user", &user, e)) return -1;
    if (parse_stop(r, lim, e) || parse_stop_ids(r, lim, e) || parse_logit_bias(r, lim, e)) return -1;

    const cJSON *rf = field(o, "response_format");
    if (rf) {
        const char *t = NULL;
        if (!cJSON_IsObject(rf)) return bad_type(e, "response_format", "an object");
        if (get_str(rf, "type", &t, e)) return bad_type(e, "response_format.type", "a string");
        if (t && strcmp(t, "text")) return unsupported(e, "response_format", "only {\"type\":\"text\"} is supported");
    }

    if (kind == OAI_CHAT) {
        if (get_bool(o, "logprobs", &r->logprobs, e)) return -1;
        given = false;
        if (get_int(o, "top_logprobs", 0, lim->max_top_logprobs, &iv, &given, e)) return -1;
        if (given) {
            if (!r->logprobs && iv > 0)
                return api_fail(e, 400, "invalid_value", "top_logprobs",
                                "'top_logprobs' needs 'logprobs' set to true");
            r->top_logprobs = (int32_t)iv;
        }
        if (parse_messages(r, e) || parse_tools(r, e)) return -1;
        if (get_bool(o, "add_generation_prompt", &r->add_generation_prompt, e)) return -1;
        if (get_bool(o, "continue_final_message", &r->continue_final_message, e)) return -1;
        if (r->continue_final_message && r->add_generation_prompt && field(o, "add_generation_prompt"))
            return api_fail(e, 400, "invalid_value", "continue_final_message",
                            "'continue_final_message' and 'add_generation_prompt' cannot both be true");
        if (r->continue_final_message) r->add_generation_prompt = false;
        const cJSON *kw = field(o, "chat_template_kwargs");
        if (kw && !cJSON_IsObject(kw)) return bad_type(e, "chat_template_kwargs", "an object");
        r->chat_template_kwargs = kw;
        if (get_str(o, "chat_template", &r->chat_template, e)) return -1;
        if (r->chat_template && !lim->allow_request_chat_template)
            return unsupported(e, "chat_template",
                               "request-supplied chat templates are disabled on this server");
    } else {
        given = false;
        const cJSON *lp = field(o, "logprobs");
        if (lp && cJSON_IsBool(lp)) { /* some clients send true/false */
            r->logprobs = cJSON_IsTrue(lp);
        } else {
            if (get_int(o, "logprobs", 0, lim->max_top_logprobs, &iv, &given, e)) return -1;
            if (given) {
                r->logprobs = true;
                r->top_logprobs = (int32_t)iv;
            }
        }
        if (get_bool(o, "echo", &r->echo, e)) return -1;
        if (r->echo && r->logprobs)
            return unsupported(e, "echo", "'echo' together with 'logprobs' (prompt logprobs) is not supported");
        given = false;
        if (get_int(o, "best_of", 1, lim->max_n, &iv, &given, e)) return -1;
        if (given && iv != r->n) return unsupported(e, "best_of", "only best_of equal to n is supported");
        const char *suffix = NULL;
        if (get_str(o, "suffix", &suffix, e)) return -1;
        if (suffix && suffix[0]) return unsupported(e, "suffix", "suffix is not supported");
        if (parse_prompt(r, lim, e)) return -1;
    }
    s->n = r->n;
    s->logprobs = r->logprobs ? r->top_logprobs : -1;
    return 0;
}

void oai_request_free(oai_request *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    free(r->bias);
    cJSON_Delete(r->root);
    memset(r, 0, sizeof *r);
}
