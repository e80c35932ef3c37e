/* openai.c — request parsing and validation for /v1/chat/completions and
 * /v1/completions, and the one error-body formatter. Bodies are parsed by json.c
 * (strict JSON, exact integers); this file applies the API's rules to the tree. It
 * does not template or tokenize (chat.c, gen.c). HTTP worker threads; no shared
 * state. */
#include "openai.h"

#include "../grammar/grammar.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "json.h"

int api_fail(api_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->code = code;
    e->type = NULL;
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
    const char *t = e->type ? e->type : error_type(e->status);
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

/* Integer fields are read exactly from the number's literal (json_int64): 1.0 and 1e2
 * are integers (pydantic's lax mode, which vLLM uses, agrees), 1.5 and
 * 1.0000000000000001 are not (pydantic would take the latter: it is 1.0 as a double).
 * *given is set when the field is present (may be NULL). */
static int get_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out,
                   bool *given, api_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    int64_t x = 0;
    json_int_status st = json_int64(v, &x);
    if (st == JSON_INT_NOT_INTEGER) return bad_type(e, name, "an integer");
    if (st == JSON_INT_RANGE || x < lo || x > hi)
        return api_fail(e, 400, "invalid_value", name, "'%s' must be in [%lld, %lld]", name,
                        (long long)lo, (long long)hi);
    *out = x;
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

/* Field names an error may show: the request fields of the OpenAI API (and the
 * extensions inferd reads). A key outside this list is input, and is never echoed. */
static const char *const KNOWN_FIELDS[] = {
    "add_generation_prompt", "add_special_tokens", "arguments", "audio", "best_of", "chat_template",
    "chat_template_kwargs", "content", "continue_final_message", "description", "detail", "echo",
    "frequency_penalty", "function", "function_call", "functions", "grammar", "guided_choice", "guided_grammar",
    "guided_json", "guided_regex", "id", "ignore_eos", "image_url", "json_schema", "schema",
    "include_usage", "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "messages", "metadata",
    "min_p", "modalities", "model", "n", "name", "parallel_tool_calls", "parameters", "prediction",
    "presence_penalty", "prompt", "reasoning_effort", "refusal", "repetition_penalty", "response_format",
    "return_token_strs", "role", "seed", "service_tier", "stop", "stop_token_ids", "store", "stream",
    "stream_options", "strict", "suffix", "temperature", "text", "tokens", "tool_call_id", "tool_calls",
    "tool_choice", "tools", "top_k", "top_logprobs", "top_p", "type", "url", "user",
};

bool oai_known_field(const char *key) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(KNOWN_FIELDS); i++)
        if (!strcmp(KNOWN_FIELDS[i], key)) return true;
    return false;
}

/* json.c's error -> the API's. Syntax errors carry no param (as OpenAI's); a NUL or a
 * duplicate key names the value's path as far as it is made of known field names. */
static void json_fail(const json_error *j, api_error *e) {
    char at[96];
    snprintf(at, sizeof at, "at line %zu, column %zu (byte %zu)", j->line, j->column, j->offset);
    switch (j->status) {
    case JSON_ERR_ENCODING:
        api_fail(e, 400, "invalid_encoding", NULL, "the request body is not valid UTF-8 (%s)", at);
        break;
    case JSON_ERR_NOMEM: api_fail(e, 500, NULL, NULL, "out of memory"); break;
    case JSON_ERR_DEPTH:
        api_fail(e, 400, "invalid_json", NULL,
                 "the request body nests arrays and objects deeper than %d levels (%s)",
                 JSON_DEFAULT_MAX_DEPTH, at);
        break;
    case JSON_ERR_NUL:
        if (j->path[0])
            api_fail(e, 400, "invalid_value", j->path,
                     "'%s' contains a NUL character (\\u0000), which is not supported (%s)", j->path, at);
        else
            api_fail(e, 400, "invalid_value", NULL,
                     "the request body has a NUL character (\\u0000) in a string, which is not supported (%s)", at);
        break;
    case JSON_ERR_DUPLICATE:
        if (j->key[0])
            api_fail(e, 400, "duplicate_key", j->path, "'%s' is given twice: duplicate key '%s' (%s)", j->path,
                     j->key, at);
        else if (j->path[0])
            api_fail(e, 400, "duplicate_key", j->path, "an object in '%s' has a duplicate key (%s)", j->path, at);
        else
            api_fail(e, 400, "duplicate_key", NULL, "the request body has a duplicate key (%s)", at);
        break;
    default:
        api_fail(e, 400, "invalid_json", NULL, "the request body is not valid JSON: %s %s",
                 j->what ? j->what : "a syntax error", at);
        break;
    }
}

cJSON *oai_parse_object(const char *body, size_t n, api_error *e) {
    return oai_parse_object_keys(body, n, NULL, e);
}

cJSON *oai_parse_object_keys(const char *body, size_t n, bool (*key_ok)(const char *key), api_error *e) {
    if (n == 0) {
        api_fail(e, 400, "invalid_json", NULL, "the request body is empty; expected a JSON object");
        return NULL;
    }
    const json_opts opts = {.max_depth = JSON_DEFAULT_MAX_DEPTH, .key_ok = key_ok ? key_ok : oai_known_field};
    json_error je;
    cJSON *root = json_parse(body, n, &opts, &je);
    if (!root) {
        json_fail(&je, e);
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
        int64_t id = 0;
        json_int_status st = json_int64(it, &id);
        if (st == JSON_INT_NOT_INTEGER) {
            free(v);
            return bad_type(e, param, "an array of integer token ids");
        }
        if (st == JSON_INT_RANGE || id < 0 || id >= n_vocab) {
            free(v);
            return api_fail(e, 400, "invalid_value", param,
                            "'%s' has a token id outside the vocabulary [0, %d)", param, (int)n_vocab);
        }
        v[k++] = (int32_t)id;
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

/* A logit_bias key: a token id written as a plain decimal ("0" or [1-9][0-9]*) — no
 * sign, spaces, leading zeros, fraction or exponent (OpenAI documents "token IDs"). */
static bool parse_id_key(const char *k, int32_t n_vocab, int32_t *id) {
    if (!k[0] || (k[0] == '0' && k[1])) return false;
    int64_t v = 0;
    for (const char *c = k; *c; c++) {
        if (*c < '0' || *c > '9') return false;
        v = v * 10 + (*c - '0');
        if (v >= n_vocab) return false;
    }
    *id = (int32_t)v;
    return true;
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
        int32_t id = 0;
        if (!parse_id_key(it->string, lim->n_vocab, &id))
            return api_fail(e, 400, "invalid_value", "logit_bias",
                            "'logit_bias' keys must be token ids in [0, %d), written as plain decimals",
                            (int)lim->n_vocab);
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return bad_type(e, "logit_bias", "an object mapping token ids to numbers");
        if (it->valuedouble < -100 || it->valuedouble > 100)
            return api_fail(e, 400, "invalid_value", "logit_bias", "'logit_bias' values must be in [-100, 100]");
        r->bias[r->n_bias].id = id;
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

/* OpenAI's roles; "function" is the deprecated one (it needs a name). */
static const char *const ROLES[] = {"system", "user", "assistant", "tool", "developer", "function"};

/* A required string member of a message: absent or null -> missing; not a string -> type. */
static int required_str(const cJSON *msg, int i, const char *name, api_error *e) {
    char p[96];
    snprintf(p, sizeof p, "messages[%d].%s", i, name);
    const cJSON *v = field(msg, name);
    if (!v) return api_fail(e, 400, "missing_required_parameter", p, "'%s' is required", p);
    if (!cJSON_IsString(v)) return bad_type(e, p, "a string");
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
        size_t k_role = 0;
        while (k_role < IFD_ARRAY_LEN(ROLES) && strcmp(ROLES[k_role], role->valuestring)) k_role++;
        if (k_role == IFD_ARRAY_LEN(ROLES))
            return api_fail(e, 400, "invalid_value", p,
                            "'%s' must be one of 'system', 'user', 'assistant', 'tool', 'developer', 'function'", p);
        const char *rs = ROLES[k_role];
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        /* content is required except from the assistant (tool_calls instead) and the
         * deprecated function role, as in OpenAI's API */
        if (strcmp(rs, "assistant") && strcmp(rs, "function")) {
            snprintf(p, sizeof p, "messages[%d].content", i);
            if (!content) return api_fail(e, 400, "missing_required_parameter", p, "'%s' is required", p);
            if (cJSON_IsNull(content)) return bad_type(e, p, "a string or an array of content parts");
        }
        if (parse_content(content, i, e)) return -1;
        if (!strcmp(rs, "tool") && required_str(msg, i, "tool_call_id", e)) return -1;
        if (!strcmp(rs, "function") && required_str(msg, i, "name", e)) return -1;
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

/* The deprecated functions / function_call: functions becomes tools (each wrapped as
 * {"type":"function","function":…}, added to the body so the template sees them) and
 * function_call a tool_choice. */
static int legacy_functions(oai_request *r, api_error *e) {
    const cJSON *fns = field(r->root, "functions");
    const cJSON *fc = field(r->root, "function_call");
    if (!fns && !fc) return 0;
    if (field(r->root, "tools") || field(r->root, "tool_choice"))
        return api_fail(e, 400, "invalid_value", "functions",
                        "'functions' / 'function_call' cannot be combined with 'tools' / 'tool_choice'");
    if (fc && !fns) return api_fail(e, 400, "invalid_value", "function_call", "'function_call' needs 'functions'");
    if (!cJSON_IsArray(fns)) return bad_type(e, "functions", "an array of functions");
    cJSON *tools = cJSON_CreateArray();
    if (!tools) return api_fail(e, 500, NULL, NULL, "out of memory");
    const cJSON *f;
    cJSON_ArrayForEach(f, fns) {
        cJSON *t = cJSON_CreateObject();
        cJSON *dup = cJSON_Duplicate(f, true);
        if (!t || !dup || !cJSON_AddStringToObject(t, "type", "function") || !cJSON_AddItemToObject(t, "function", dup)) {
            cJSON_Delete(t);
            cJSON_Delete(dup);
            cJSON_Delete(tools);
            return api_fail(e, 500, NULL, NULL, "out of memory");
        }
        cJSON_AddItemToArray(tools, t);
    }
    if (!cJSON_AddItemToObject(r->root, "tools", tools)) {
        cJSON_Delete(tools);
        return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    if (fc) {
        cJSON *choice = NULL;
        if (cJSON_IsString(fc)) {
            choice = cJSON_CreateString(fc->valuestring);
        } else if (cJSON_IsObject(fc)) {
            const cJSON *nm = field(fc, "name");
            if (!cJSON_IsString(nm)) return bad_type(e, "function_call", "\"none\", \"auto\" or {\"name\": …}");
            choice = cJSON_CreateObject();
            cJSON *fn = cJSON_CreateObject();
            if (choice && fn && cJSON_AddStringToObject(fn, "name", nm->valuestring) &&
                cJSON_AddStringToObject(choice, "type", "function") && cJSON_AddItemToObject(choice, "function", fn))
                fn = NULL;
            cJSON_Delete(fn);
        } else {
            return bad_type(e, "function_call", "\"none\", \"auto\" or {\"name\": …}");
        }
        if (!choice || !cJSON_AddItemToObject(r->root, "tool_choice", choice)) {
            cJSON_Delete(choice);
            return api_fail(e, 500, NULL, NULL, "out of memory");
        }
    }
    r->legacy_functions = true;
    return 0;
}

static int parse_tools(oai_request *r, api_error *e) {
    if (legacy_functions(r, e)) return -1;
    const cJSON *t = field(r->root, "tools");
    const cJSON *choice = field(r->root, "tool_choice");
    const char *pc = r->legacy_functions ? "function_call" : "tool_choice";
    r->parallel_tool_calls = true;
    if (get_bool(r->root, "parallel_tool_calls", &r->parallel_tool_calls, e)) return -1;
    r->tool_mode = OAI_TOOLS_AUTO;
    if (choice) {
        if (cJSON_IsString(choice)) {
            const char *c = choice->valuestring;
            if (!strcmp(c, "none")) t = NULL;
            else if (!strcmp(c, "required")) r->tool_mode = OAI_TOOLS_REQUIRED;
            else if (strcmp(c, "auto"))
                return api_fail(e, 400, "invalid_value", pc,
                                "'%s' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                "\"function\": {\"name\": …}}",
                                pc);
        } else if (cJSON_IsObject(choice)) {
            const char *type = NULL;
            if (get_str(choice, "type", &type, e)) return -1;
            if (type && strcmp(type, "function"))
                return api_fail(e, 400, "unsupported_value", pc, "'%s': only function tools are supported", pc);
            const cJSON *fn = field(choice, "function");
            const cJSON *nm = cJSON_IsObject(fn) ? field(fn, "name") : field(choice, "name");
            if (!cJSON_IsString(nm) || !nm->valuestring[0])
                return bad_type(e, pc, "{\"type\": \"function\", \"function\": {\"name\": …}}");
            r->tool_mode = OAI_TOOLS_NAMED;
            r->tool_name = nm->valuestring;
        } else {
            return bad_type(e, pc, "a string or an object");
        }
    }
    if (!t) {
        if (r->tool_mode != OAI_TOOLS_AUTO)
            return api_fail(e, 400, "invalid_value", pc, "'%s' %s needs 'tools'", pc,
                            r->tool_mode == OAI_TOOLS_REQUIRED ? "\"required\"" : "naming a function");
        return 0;
    }
    if (!cJSON_IsArray(t)) return bad_type(e, "tools", "an array of tools");
    int i = 0;
    bool found = r->tool_mode != OAI_TOOLS_NAMED;
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
        if (strlen(name->valuestring) > 256) return api_fail(e, 400, "invalid_value", p, "'%s' is too long", p);
        if (r->tool_name && !strcmp(r->tool_name, name->valuestring)) found = true;
        const cJSON *params = field(fn, "parameters");
        snprintf(p, sizeof p, "tools[%d].function.parameters", i);
        if (params && !cJSON_IsObject(params)) return bad_type(e, p, "an object");
        const cJSON *strict = field(fn, "strict");
        snprintf(p, sizeof p, "tools[%d].function.strict", i);
        if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict)) return bad_type(e, p, "a boolean");
        i++;
    }
    if (!found)
        return api_fail(e, 400, "invalid_value", pc, "'%s' names a function that is not in '%s'", pc,
                        r->legacy_functions ? "functions" : "tools");
    if (i > 0) r->tools = t;
    else if (r->tool_mode != OAI_TOOLS_AUTO)
        return api_fail(e, 400, "invalid_value", pc, "'%s' needs at least one tool", pc);
    return 0;
}

/* What the output is constrained to: response_format, or one of the extensions. */
static int parse_structured(oai_request *r, api_error *e) {
    const cJSON *o = r->root;
    r->so_kind = OAI_SO_NONE;
    const cJSON *rf = field(o, "response_format");
    int given = 0;
    if (rf && !cJSON_IsNull(rf)) {
        const char *t = NULL;
        if (!cJSON_IsObject(rf)) return bad_type(e, "response_format", "an object");
        if (get_str(rf, "type", &t, e)) return bad_type(e, "response_format.type", "a string");
        if (!t) return api_fail(e, 400, "invalid_value", "response_format.type", "'response_format.type' is required");
        if (!strcmp(t, "json_object")) {
            r->so_kind = OAI_SO_JSON_OBJECT;
            given++;
        } else if (!strcmp(t, "json_schema")) {
            const cJSON *js = field(rf, "json_schema");
            if (!cJSON_IsObject(js)) return bad_type(e, "response_format.json_schema", "an object");
            const cJSON *schema = field(js, "schema");
            if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
                return bad_type(e, "response_format.json_schema.schema", "an object");
            const char *name = NULL;
            if (get_str(js, "name", &name, e)) return -1;
            const cJSON *strict = field(js, "strict");
            if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
                return bad_type(e, "response_format.json_schema.strict", "a boolean");
            r->so_kind = schema ? OAI_SO_JSON_SCHEMA : OAI_SO_JSON_OBJECT;
            r->so_value = schema;
            r->so_strict = cJSON_IsTrue(strict);
            given++;
        } else if (strcmp(t, "text")) {
            return api_fail(e, 400, "invalid_value", "response_format.type",
                            "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        }
    }
    static const struct {
        const char *key;
        oai_so_kind kind;
        int type; /* cJSON type wanted: 0 string, 1 object (or a JSON text), 2 array of strings */
    } EXT[] = {{"grammar", OAI_SO_GBNF, 0},       {"guided_grammar", OAI_SO_GBNF, 0},
               {"json_schema", OAI_SO_JSON_SCHEMA, 1}, {"guided_json", OAI_SO_JSON_SCHEMA, 1},
               {"guided_regex", OAI_SO_REGEX, 0},  {"guided_choice", OAI_SO_CHOICE, 2}};
    for (size_t k = 0; k < IFD_ARRAY_LEN(EXT); k++) {
        const cJSON *v = field(o, EXT[k].key);
        if (!v || cJSON_IsNull(v)) continue;
        if (EXT[k].type == 0 && !cJSON_IsString(v)) return bad_type(e, EXT[k].key, "a string");
        if (EXT[k].type == 1 && !cJSON_IsObject(v) && !cJSON_IsString(v) && !cJSON_IsBool(v))
            return bad_type(e, EXT[k].key, "a JSON Schema object");
        if (EXT[k].type == 2) {
            if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v)) return bad_type(e, EXT[k].key, "a non-empty array of strings");
            const cJSON *it;
            cJSON_ArrayForEach(it, v) if (!cJSON_IsString(it)) return bad_type(e, EXT[k].key, "an array of strings");
        }
        r->so_kind = EXT[k].kind;
        r->so_value = v;
        given++;
    }
    if (given > 1)
        return api_fail(e, 400, "invalid_value", "response_format",
                        "give at most one of 'response_format' (json), 'grammar', 'json_schema', 'guided_json', "
                        "'guided_regex', 'guided_grammar', 'guided_choice'");
    return 0;
}

/* Names the server owns in the template context: what chat.c's build_context() sets
 * there, and the template interpreter's globals (jinja_methods.c), which a context
 * variable would shadow — a JSON value is never callable, so shadowing a global can
 * only break the template. Keep in step with both. */
static const char *const CONTEXT_KEYS[] = {"messages",  "tools", "add_generation_prompt", "bos_token",
                                           "eos_token", "range", "dict",                  "namespace",
                                           "raise_exception", "strftime_now"};

static int check_template_kwargs(const cJSON *kw, api_error *e) {
    const cJSON *it;
    cJSON_ArrayForEach(it, kw) {
        for (size_t i = 0; i < IFD_ARRAY_LEN(CONTEXT_KEYS); i++)
            if (!strcmp(it->string, CONTEXT_KEYS[i]))
                return api_fail(e, 400, "invalid_value", "chat_template_kwargs",
                                "'chat_template_kwargs' may not set '%s': the server sets it", CONTEXT_KEYS[i]);
    }
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
        if (!r->stream)
            return api_fail(e, 400, "invalid_value", "stream_options",
                            "'stream_options' is only allowed when 'stream' is true");
        bool iu = false;
        if (get_bool(so, "include_usage", &iu, e)) return bad_type(e, "stream_options.include_usage", "a boolean");
        r->include_usage = iu;
    }
    if (get_int(o, "n", 1, lim->max_n, &iv, &given, e)) return -1;
    if (given) r->n = (int32_t)iv;
    given = false;
    /* completions: max_tokens 0 runs the prompt only (echo + logprobs: log-likelihoods,
     * as lm-eval-harness asks for them); chat needs at least one token */
    if (get_int(o, "max_tokens", kind == OAI_COMPLETION ? 0 : 1, INT32_MAX, &iv, &given, e)) return -1;
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
    /* seed: int64, as vLLM (and OpenAI's documented maximum 2^63-1); a negative seed is
     * its two's complement as the engine's uint64 (-1 -> 2^64-1), so every int64 is a
     * distinct seed */
    if (get_int(o, "seed", INT64_MIN, INT64_MAX, &iv, &given, e)) return -1;
    if (given) {
        s->seed = (uint64_t)iv;
        s->has_seed = true;
    }
    if (get_bool(o, "ignore_eos", &s->ignore_eos, e)) return -1;
    const char *user = NULL;
    if (get_str(o, "user", &user, e)) return -1;
    if (get_str(o, "reasoning_effort", &r->reasoning_effort, e)) return -1;
    if (r->reasoning_effort) {
        static const char *const EFF[] = {"none", "minimal", "low", "medium", "high"};
        bool ok = false;
        for (size_t i = 0; i < IFD_ARRAY_LEN(EFF); i++) ok |= !strcmp(EFF[i], r->reasoning_effort);
        if (!ok)
            return api_fail(e, 400, "invalid_value", "reasoning_effort",
                            "'reasoning_effort' must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\"");
    }
    if (parse_stop(r, lim, e) || parse_stop_ids(r, lim, e) || parse_logit_bias(r, lim, e)) return -1;

    if (parse_structured(r, e)) return -1;

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
        if (kw && check_template_kwargs(kw, e)) return -1;
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
        /* echo with logprobs: the prompt's tokens get logprobs too (the first one null) */
        if (get_bool(o, "echo", &r->echo, e)) return -1;
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
    s->prompt_logprobs = r->echo && r->logprobs ? r->top_logprobs : -1;
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
    gram_unref(r->grammar);
    cJSON_Delete(r->root);
    memset(r, 0, sizeof *r);
}
