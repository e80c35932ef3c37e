/* rsp_req.c — a Responses API request, validated and translated into the equivalent
 * Chat Completions body (see rsp.h). Everything the Responses API names differently is
 * checked here, so errors name the Responses fields ("input[2].call_id",
 * "max_output_tokens"); what both APIs spell the same (temperature, top_p, seed, user,
 * parallel_tool_calls, and inferd's sampling extensions) is passed through for
 * oai_parse to check. Output-shape rules (usage, events) live in rsp_out.c.
 *
 * Input items -> chat messages:
 *   message {role, content: string | [input_text|output_text parts]}  -> that role's
 *       message ("developer" -> "system": most chat templates know no developer role);
 *   function_call {call_id, name, arguments} -> a tool call of an assistant message
 *       (merged into the assistant message just before it, if any);
 *   function_call_output {call_id, output} -> a "tool" message;
 *   reasoning -> nothing (inferd never produces reasoning items; clients echo them).
 * instructions becomes a system message first; previous_response_id puts the stored
 * conversation (its input and output items, not its instructions) before the input.
 *
 * HTTP threads; no shared state but the store (thread-safe). */
#include "rsp.h"

#include <string.h>
#include <time.h>

#include "json.h"
#include "util/common.h"

/* Response API fields an error may name, besides the chat ones (oai_known_field). */
static const char *const RSP_FIELDS[] = {
    "input",
    "instructions",
    "max_output_tokens",
    "previous_response_id",
    "call_id",
    "output",
    "reasoning",
    "effort",
    "summary",
    "generate_summary",
    "format",
    "schema",
    "include",
    "truncation",
    "background",
    "prompt_cache_key",
    "safety_identifier",
    "max_tool_calls",
    "verbosity",
    "status",
    "encrypted_content",
    "annotations",
    "conversation",
    "refusal",
    "input_text",
    "output_text",
};

static bool rsp_key_ok(const char *key) {
    if (oai_known_field(key)) return true;
    for (size_t i = 0; i < IFD_ARRAY_LEN(RSP_FIELDS); i++)
        if (!strcmp(RSP_FIELDS[i], key)) return true;
    return false;
}

bool rsp_id_ok(const char *id) {
    size_t n = strlen(id);
    if (n == 0 || n >= RSP_ID_BYTES) return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ---- typed access: absent and null are "not given" ---------------------------------- */

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int bad_type(api_error *e, const char *p, const char *what) {
    return api_fail(e, 400, "invalid_type", p, "'%s' must be %s", p, what);
}

static int missing(api_error *e, const char *p) {
    return api_fail(e, 400, "missing_required_parameter", p, "'%s' is required", p);
}

static int oom(api_error *e) { return api_fail(e, 500, NULL, NULL, "out of memory"); }

/* An optional string member: NULL when absent or null; a type error otherwise. */
static int opt_str(const cJSON *o, const char *name, const char *p, const char **out,
                   api_error *e) {
    const cJSON *v = field(o, name);
    *out = NULL;
    if (!v) return 0;
    if (!cJSON_IsString(v)) return bad_type(e, p, "a string");
    *out = v->valuestring;
    return 0;
}

/* A required, non-empty string member. */
static int req_str(const cJSON *o, const char *name, const char *p, const char **out,
                   api_error *e) {
    if (opt_str(o, name, p, out, e)) return -1;
    if (!*out) return missing(e, p);
    if (!(*out)[0]) return api_fail(e, 400, "invalid_value", p, "'%s' must not be empty", p);
    return 0;
}

static int opt_bool(const cJSON *o, const char *name, api_error *e) {
    const cJSON *v = field(o, name);
    if (v && !cJSON_IsBool(v)) return bad_type(e, name, "a boolean");
    return 0;
}

/* a copy of v added to o under name (NULL v: nothing) */
static int copy_to(cJSON *o, const char *name, const cJSON *v, api_error *e) {
    if (!v) return 0;
    cJSON *d = cJSON_Duplicate(v, true);
    if (!d || !cJSON_AddItemToObject(o, name, d)) {
        cJSON_Delete(d);
        return oom(e);
    }
    return 0;
}

static int add_str(cJSON *o, const char *name, const char *s, api_error *e) {
    return cJSON_AddStringToObject(o, name, s) ? 0 : oom(e);
}

/* ---- input items -> messages --------------------------------------------------------- */

/* Text content parts (input_text / output_text, and the chat API's text) as chat text
 * parts; a string stays a string. path: "input[3].content". */
static cJSON *text_content(const cJSON *c, const char *path, api_error *e) {
    char p[128];
    if (cJSON_IsString(c)) {
        cJSON *s = cJSON_CreateString(c->valuestring);
        if (!s) oom(e);
        return s;
    }
    if (!cJSON_IsArray(c)) {
        bad_type(e, path, "a string or an array of content parts");
        return NULL;
    }
    cJSON *parts = cJSON_CreateArray();
    if (!parts) {
        oom(e);
        return NULL;
    }
    int j = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const char *type = NULL, *text = NULL;
        snprintf(p, sizeof p, "%s[%d]", path, j);
        if (!cJSON_IsObject(part)) {
            bad_type(e, p, "an object");
            goto fail;
        }
        snprintf(p, sizeof p, "%s[%d].type", path, j);
        if (req_str(part, "type", p, &type, e)) goto fail;
        const char *key = "text";
        if (!strcmp(type, "refusal"))
            key = "refusal";
        else if (strcmp(type, "input_text") && strcmp(type, "output_text") &&
                 strcmp(type, "text")) {
            api_fail(e, 400, "unsupported_value", p,
                     "'%s': only text content parts (input_text, output_text) are supported", p);
            goto fail;
        }
        snprintf(p, sizeof p, "%s[%d].%s", path, j, key);
        const cJSON *t = field(part, key);
        if (!t) {
            missing(e, p);
            goto fail;
        }
        if (!cJSON_IsString(t)) {
            bad_type(e, p, "a string");
            goto fail;
        }
        text = t->valuestring;
        cJSON *cp = cJSON_CreateObject();
        if (!cp || !cJSON_AddItemToArray(parts, cp)) {
            cJSON_Delete(cp);
            oom(e);
            goto fail;
        }
        if (add_str(cp, "type", "text", e) || add_str(cp, "text", text, e)) goto fail;
        j++;
    }
    return parts;
fail:
    cJSON_Delete(parts);
    return NULL;
}

static cJSON *new_msg(cJSON *msgs, const char *role, api_error *e) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        oom(e);
        return NULL;
    }
    if (add_str(m, "role", role, e)) return NULL;
    return m;
}

static const char *const MSG_ROLES[] = {"user", "system", "developer", "assistant"};

static int message_item(const cJSON *it, const char *path, cJSON *msgs, api_error *e) {
    char p[128];
    const char *role = NULL;
    snprintf(p, sizeof p, "%s.role", path);
    if (req_str(it, "role", p, &role, e)) return -1;
    size_t k = 0;
    while (k < IFD_ARRAY_LEN(MSG_ROLES) && strcmp(MSG_ROLES[k], role)) k++;
    if (k == IFD_ARRAY_LEN(MSG_ROLES))
        return api_fail(e, 400, "invalid_value", p,
                        "'%s' must be one of 'user', 'system', 'developer', 'assistant'", p);
    snprintf(p, sizeof p, "%s.content", path);
    const cJSON *c = field(it, "content");
    if (!c) return missing(e, p);
    cJSON *content = text_content(c, p, e);
    if (!content) return -1;
    cJSON *m = new_msg(msgs, !strcmp(role, "developer") ? "system" : role, e);
    if (!m || !cJSON_AddItemToObject(m, "content", content)) {
        if (m) cJSON_Delete(content);
        return m ? oom(e) : -1;
    }
    return 0;
}

static int function_call_item(const cJSON *it, const char *path, cJSON *msgs, api_error *e) {
    char p[128];
    const char *call_id, *name, *args;
    snprintf(p, sizeof p, "%s.call_id", path);
    if (req_str(it, "call_id", p, &call_id, e)) return -1;
    snprintf(p, sizeof p, "%s.name", path);
    if (req_str(it, "name", p, &name, e)) return -1;
    snprintf(p, sizeof p, "%s.arguments", path);
    if (opt_str(it, "arguments", p, &args, e)) return -1;
    if (!args) return missing(e, p);
    /* the assistant message just before (its text, or earlier calls of the same turn) */
    cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *lrole = cJSON_GetObjectItemCaseSensitive(last, "role");
    cJSON *m =
        last && cJSON_IsString(lrole) && !strcmp(lrole->valuestring, "assistant") ? last : NULL;
    if (!m) {
        if (!(m = new_msg(msgs, "assistant", e))) return -1;
        if (!cJSON_AddNullToObject(m, "content")) return oom(e);
    }
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls && !(calls = cJSON_AddArrayToObject(m, "tool_calls"))) return oom(e);
    cJSON *call = cJSON_CreateObject();
    if (!call || !cJSON_AddItemToArray(calls, call)) {
        cJSON_Delete(call);
        return oom(e);
    }
    cJSON *fn;
    if (add_str(call, "id", call_id, e) || add_str(call, "type", "function", e)) return -1;
    if (!(fn = cJSON_AddObjectToObject(call, "function"))) return oom(e);
    return add_str(fn, "name", name, e) || add_str(fn, "arguments", args, e) ? -1 : 0;
}

static int function_call_output_item(const cJSON *it, const char *path, cJSON *msgs, api_error *e) {
    char p[128];
    const char *call_id;
    snprintf(p, sizeof p, "%s.call_id", path);
    if (req_str(it, "call_id", p, &call_id, e)) return -1;
    snprintf(p, sizeof p, "%s.output", path);
    const cJSON *out = field(it, "output");
    if (!out) return missing(e, p);
    cJSON *content = text_content(out, p, e);
    if (!content) return -1;
    cJSON *m = new_msg(msgs, "tool", e);
    if (!m || !cJSON_AddItemToObject(m, "content", content)) {
        if (m) cJSON_Delete(content);
        return m ? oom(e) : -1;
    }
    return add_str(m, "tool_call_id", call_id, e);
}

/* One input item (items[i]) appended to msgs as chat messages. */
static int item_to_msgs(const cJSON *it, int i, cJSON *msgs, api_error *e) {
    char path[64], p[96];
    snprintf(path, sizeof path, "input[%d]", i);
    if (!cJSON_IsObject(it)) return bad_type(e, path, "an object (an input item)");
    const char *type;
    snprintf(p, sizeof p, "%s.type", path);
    if (opt_str(it, "type", p, &type, e)) return -1;
    if (!type) { /* an easy input message: {"role", "content"} */
        if (!field(it, "role")) return missing(e, p);
        type = "message";
    }
    if (!strcmp(type, "message")) return message_item(it, path, msgs, e);
    if (!strcmp(type, "function_call")) return function_call_item(it, path, msgs, e);
    if (!strcmp(type, "function_call_output")) return function_call_output_item(it, path, msgs, e);
    if (!strcmp(type, "reasoning")) return 0;
    return api_fail(
        e, 400, "invalid_value", p,
        "'%s' must be one of 'message', 'function_call', 'function_call_output', 'reasoning'", p);
}

/* ---- the other fields ------------------------------------------------------------------ */

/* tools: the Responses shape {"type":"function","name","description","parameters",
 * "strict"} -> the chat shape {"type":"function","function":{...}}. */
static int tools_to_chat(const cJSON *t, cJSON *chat, api_error *e) {
    char p[64];
    if (!t) return 0;
    if (!cJSON_IsArray(t)) return bad_type(e, "tools", "an array of tools");
    if (cJSON_GetArraySize(t) == 0) return 0;
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    if (!out) return oom(e);
    int i = 0;
    const cJSON *tool;
    cJSON_ArrayForEach(tool, t) {
        snprintf(p, sizeof p, "tools[%d]", i);
        if (!cJSON_IsObject(tool)) return bad_type(e, p, "an object");
        const char *type, *name, *desc;
        snprintf(p, sizeof p, "tools[%d].type", i);
        if (req_str(tool, "type", p, &type, e)) return -1;
        if (strcmp(type, "function"))
            return api_fail(e, 400, "unsupported_value", p,
                            "'%s': only function tools are supported", p);
        snprintf(p, sizeof p, "tools[%d].name", i);
        if (req_str(tool, "name", p, &name, e)) return -1;
        snprintf(p, sizeof p, "tools[%d].description", i);
        if (opt_str(tool, "description", p, &desc, e)) return -1;
        const cJSON *params = field(tool, "parameters"), *strict = field(tool, "strict");
        snprintf(p, sizeof p, "tools[%d].parameters", i);
        if (params && !cJSON_IsObject(params)) return bad_type(e, p, "an object (a JSON schema)");
        snprintf(p, sizeof p, "tools[%d].strict", i);
        if (strict && !cJSON_IsBool(strict)) return bad_type(e, p, "a boolean");
        cJSON *ct = cJSON_CreateObject(), *fn;
        if (!ct || !cJSON_AddItemToArray(out, ct)) {
            cJSON_Delete(ct);
            return oom(e);
        }
        if (add_str(ct, "type", "function", e)) return -1;
        if (!(fn = cJSON_AddObjectToObject(ct, "function"))) return oom(e);
        if (add_str(fn, "name", name, e) || (desc && add_str(fn, "description", desc, e)) ||
            copy_to(fn, "parameters", params, e) || copy_to(fn, "strict", strict, e))
            return -1;
        i++;
    }
    return 0;
}

/* tool_choice: "auto" | "none" | "required" | {"type":"function","name"} -> the chat
 * shape (the chat path decides what it supports). */
static int tool_choice_to_chat(const cJSON *c, cJSON *chat, api_error *e) {
    if (!c) return 0;
    if (cJSON_IsString(c)) {
        const char *s = c->valuestring;
        if (strcmp(s, "auto") && strcmp(s, "none") && strcmp(s, "required"))
            return api_fail(e, 400, "invalid_value", "tool_choice",
                            "'tool_choice' must be 'auto', 'none', 'required' or "
                            "{\"type\":\"function\",\"name\":...}");
        return add_str(chat, "tool_choice", s, e);
    }
    if (!cJSON_IsObject(c)) return bad_type(e, "tool_choice", "a string or an object");
    const char *type, *name;
    if (req_str(c, "type", "tool_choice.type", &type, e)) return -1;
    if (strcmp(type, "function"))
        return api_fail(e, 400, "unsupported_value", "tool_choice.type",
                        "'tool_choice.type': only function tools are supported");
    if (req_str(c, "name", "tool_choice.name", &name, e)) return -1;
    cJSON *tc = cJSON_AddObjectToObject(chat, "tool_choice"), *fn;
    if (!tc || add_str(tc, "type", "function", e)) return tc ? -1 : oom(e);
    if (!(fn = cJSON_AddObjectToObject(tc, "function"))) return oom(e);
    return add_str(fn, "name", name, e);
}

/* text: {"format": {"type": "text" | "json_object" | "json_schema", ...}, "verbosity"}
 * -> response_format. */
static int text_to_chat(const cJSON *t, cJSON *chat, api_error *e) {
    if (!t) return 0;
    if (!cJSON_IsObject(t)) return bad_type(e, "text", "an object");
    const char *verbosity;
    if (opt_str(t, "verbosity", "text.verbosity", &verbosity, e)) return -1;
    if (verbosity && strcmp(verbosity, "low") && strcmp(verbosity, "medium") &&
        strcmp(verbosity, "high"))
        return api_fail(e, 400, "invalid_value", "text.verbosity",
                        "'text.verbosity' must be 'low', 'medium' or 'high'");
    const cJSON *f = field(t, "format");
    if (!f) return 0;
    if (!cJSON_IsObject(f)) return bad_type(e, "text.format", "an object");
    const char *type;
    if (req_str(f, "type", "text.format.type", &type, e)) return -1;
    cJSON *rf;
    if (!strcmp(type, "text") || !strcmp(type, "json_object")) {
        if (!(rf = cJSON_AddObjectToObject(chat, "response_format"))) return oom(e);
        return add_str(rf, "type", type, e);
    }
    if (strcmp(type, "json_schema"))
        return api_fail(e, 400, "invalid_value", "text.format.type",
                        "'text.format.type' must be 'text', 'json_object' or 'json_schema'");
    const char *name, *desc;
    if (req_str(f, "name", "text.format.name", &name, e)) return -1;
    if (opt_str(f, "description", "text.format.description", &desc, e)) return -1;
    const cJSON *schema = field(f, "schema"), *strict = field(f, "strict");
    if (!schema) return missing(e, "text.format.schema");
    if (!cJSON_IsObject(schema))
        return bad_type(e, "text.format.schema", "an object (a JSON schema)");
    if (strict && !cJSON_IsBool(strict)) return bad_type(e, "text.format.strict", "a boolean");
    cJSON *js;
    if (!(rf = cJSON_AddObjectToObject(chat, "response_format"))) return oom(e);
    if (add_str(rf, "type", "json_schema", e)) return -1;
    if (!(js = cJSON_AddObjectToObject(rf, "json_schema"))) return oom(e);
    return add_str(js, "name", name, e) || (desc && add_str(js, "description", desc, e)) ||
                   copy_to(js, "schema", schema, e) || copy_to(js, "strict", strict, e)
               ? -1
               : 0;
}

/* reasoning: {"effort", "summary", "generate_summary"} -> reasoning_effort. */
static int reasoning_to_chat(const cJSON *r, cJSON *chat, api_error *e) {
    if (!r) return 0;
    if (!cJSON_IsObject(r)) return bad_type(e, "reasoning", "an object");
    static const char *const EFFORTS[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    const char *effort, *s;
    if (opt_str(r, "effort", "reasoning.effort", &effort, e)) return -1;
    if (opt_str(r, "summary", "reasoning.summary", &s, e)) return -1;
    if (opt_str(r, "generate_summary", "reasoning.generate_summary", &s, e)) return -1;
    if (!effort) return 0;
    size_t k = 0;
    while (k < IFD_ARRAY_LEN(EFFORTS) && strcmp(EFFORTS[k], effort)) k++;
    if (k == IFD_ARRAY_LEN(EFFORTS))
        return api_fail(e, 400, "invalid_value", "reasoning.effort",
                        "'reasoning.effort' must be one of 'none', 'minimal', 'low', 'medium', "
                        "'high', 'xhigh'");
    return add_str(chat, "reasoning_effort", effort, e);
}

/* metadata: at most 16 string values, keys up to 64 characters, values up to 512. */
static int check_metadata(const cJSON *m, api_error *e) {
    if (!m) return 0;
    if (!cJSON_IsObject(m)) return bad_type(e, "metadata", "an object of strings");
    if (cJSON_GetArraySize(m) > 16)
        return api_fail(e, 400, "invalid_value", "metadata", "'metadata' may hold at most 16 keys");
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        if (!cJSON_IsString(it)) return bad_type(e, "metadata", "an object of strings");
        if (strlen(it->string) > 64 || strlen(it->valuestring) > 512)
            return api_fail(
                e, 400, "invalid_value", "metadata",
                "'metadata' keys may have at most 64 characters and values at most 512");
    }
    return 0;
}

/* Fields of the Responses API inferd accepts and ignores (type-checked), and those it
 * refuses unless they ask for nothing. */
static int check_ignored(const cJSON *o, api_error *e) {
    static const char *const STRINGS[] = {"prompt_cache_key", "safety_identifier", "service_tier"};
    const char *s;
    for (size_t i = 0; i < IFD_ARRAY_LEN(STRINGS); i++)
        if (opt_str(o, STRINGS[i], STRINGS[i], &s, e)) return -1;
    const cJSON *inc = field(o, "include");
    if (inc) {
        if (!cJSON_IsArray(inc)) return bad_type(e, "include", "an array of strings");
        const cJSON *it;
        cJSON_ArrayForEach(it, inc) if (!cJSON_IsString(it)) return bad_type(e, "include",
                                                                             "an array of strings");
    }
    if (opt_str(o, "truncation", "truncation", &s, e)) return -1;
    if (s && strcmp(s, "auto") && strcmp(s, "disabled"))
        return api_fail(e, 400, "invalid_value", "truncation",
                        "'truncation' must be 'auto' or 'disabled'");
    if (opt_bool(o, "background", e)) return -1;
    if (cJSON_IsTrue(field(o, "background")))
        return api_fail(e, 400, "unsupported_value", "background",
                        "'background': background responses are not supported");
    if (field(o, "conversation"))
        return api_fail(
            e, 400, "unsupported_value", "conversation",
            "'conversation': conversations are not supported; use previous_response_id");
    if (field(o, "prompt"))
        return api_fail(e, 400, "unsupported_value", "prompt",
                        "'prompt': prompt templates are not supported");
    const cJSON *tl = field(o, "top_logprobs"), *mtc = field(o, "max_tool_calls");
    int64_t v = 0;
    if (tl && (json_int64(tl, &v) != JSON_INT_OK || v < 0 || v > 20))
        return api_fail(e, 400, "invalid_value", "top_logprobs",
                        "'top_logprobs' must be an integer in [0, 20]");
    if (v > 0)
        return api_fail(e, 400, "unsupported_value", "top_logprobs",
                        "'top_logprobs': logprobs are not supported on /v1/responses");
    if (mtc && (json_int64(mtc, &v) != JSON_INT_OK || v < 1))
        return api_fail(e, 400, "invalid_value", "max_tool_calls",
                        "'max_tool_calls' must be a positive integer");
    const cJSON *so = field(o, "stream_options");
    if (so && !cJSON_IsObject(so)) return bad_type(e, "stream_options", "an object");
    return 0;
}

/* The chat fields with the same name and meaning, checked by oai_parse: the Responses
 * API's own and inferd's sampling extensions. */
static const char *const PASS_THROUGH[] = {
    "model",
    "temperature",
    "top_p",
    "seed",
    "user",
    "parallel_tool_calls",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "ignore_eos",
    "stop",
    "stop_token_ids",
    "logit_bias",
    "chat_template_kwargs",
    "chat_template",
};

/* ---- the request --------------------------------------------------------------------- */

void rsp_ctx_destroy(rsp_ctx *x) {
    if (!x) return;
    cJSON_Delete(x->req);
    cJSON_Delete(x->items);
    tool_calls_free(&x->tc);
    free(x->fc_ids);
    free(x);
}

/* The previous response's conversation, prepended to x->items. */
static int load_previous(rsp_store *st, const char *id, double now, cJSON *items, api_error *e) {
    char *text = NULL;
    size_t n = 0;
    int rc = rsp_store_get(st, id, now, &text, &n, NULL, NULL);
    if (rc == IFD_ERR_NOMEM) return oom(e);
    if (rc) {
        if (rsp_id_ok(id))
            api_fail(e, 404, "previous_response_not_found", "previous_response_id",
                     "Previous response with id '%s' not found.", id);
        else
            api_fail(e, 404, "previous_response_not_found", "previous_response_id",
                     "Previous response not found.");
        e->type = "invalid_request_error";
        return -1;
    }
    json_error je;
    cJSON *prev = json_parse(text, n, NULL, &je);
    free(text);
    if (!cJSON_IsArray(prev)) {
        cJSON_Delete(prev);
        return api_fail(e, 500, NULL, NULL, "a stored response could not be read");
    }
    /* prev's items, then the ones already in items (none yet) */
    cJSON *it;
    while ((it = cJSON_DetachItemFromArray(prev, 0))) cJSON_AddItemToArray(items, it);
    cJSON_Delete(prev);
    return 0;
}

static int input_items(const cJSON *input, cJSON *items, api_error *e) {
    if (cJSON_IsString(input)) {
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddItemToArray(items, m)) {
            cJSON_Delete(m);
            return oom(e);
        }
        return add_str(m, "type", "message", e) || add_str(m, "role", "user", e) ||
                       add_str(m, "content", input->valuestring, e)
                   ? -1
                   : 0;
    }
    if (!cJSON_IsArray(input)) return bad_type(e, "input", "a string or an array of input items");
    const cJSON *it;
    cJSON_ArrayForEach(it, input) {
        cJSON *d = cJSON_Duplicate(it, true);
        if (!d || !cJSON_AddItemToArray(items, d)) {
            cJSON_Delete(d);
            return oom(e);
        }
    }
    return 0;
}

int rsp_parse(rsp_store *st, const char *body, size_t n, double now, rsp_ctx **out, sbuf *chat_out,
              api_error *e) {
    *out = NULL;
    rsp_ctx *x = calloc(1, sizeof *x);
    cJSON *chat = cJSON_CreateObject();
    if (!x || !chat || !(x->items = cJSON_CreateArray())) {
        oom(e);
        goto fail;
    }
    if (!(x->req = oai_parse_object_keys(body, n, rsp_key_ok, e))) goto fail;
    const cJSON *o = x->req;

    /* the plain fields first: a bad value is named before a bad conversation */
    const char *instructions, *prev_id;
    bool store = true;
    if (opt_str(o, "instructions", "instructions", &instructions, e)) goto fail;
    if (opt_str(o, "previous_response_id", "previous_response_id", &prev_id, e)) goto fail;
    if (opt_bool(o, "stream", e) || opt_bool(o, "store", e) ||
        check_metadata(field(o, "metadata"), e) || check_ignored(o, e))
        goto fail;
    x->stream = cJSON_IsTrue(field(o, "stream"));
    if (field(o, "store")) store = cJSON_IsTrue(field(o, "store"));
    const cJSON *mot = field(o, "max_output_tokens");
    int64_t max_out = 0;
    if (mot) {
        json_int_status js = json_int64(mot, &max_out);
        if (js == JSON_INT_NOT_INTEGER) {
            bad_type(e, "max_output_tokens", "an integer");
            goto fail;
        }
        if (js != JSON_INT_OK || max_out < 1 || max_out > INT32_MAX) {
            api_fail(e, 400, "invalid_value", "max_output_tokens",
                     "'max_output_tokens' must be in [1, %d]", INT32_MAX);
            goto fail;
        }
    }
    const cJSON *input = field(o, "input");
    if (!input) {
        missing(e, "input");
        goto fail;
    }

    for (size_t i = 0; i < IFD_ARRAY_LEN(PASS_THROUGH); i++)
        if (copy_to(chat, PASS_THROUGH[i], field(o, PASS_THROUGH[i]), e)) goto fail;
    if (x->stream && !cJSON_AddTrueToObject(chat, "stream")) {
        oom(e);
        goto fail;
    }
    if (mot && copy_to(chat, "max_tokens", mot, e)) goto fail;
    if (tools_to_chat(field(o, "tools"), chat, e) ||
        tool_choice_to_chat(field(o, "tool_choice"), chat, e) ||
        text_to_chat(field(o, "text"), chat, e) ||
        reasoning_to_chat(field(o, "reasoning"), chat, e))
        goto fail;

    /* the conversation: the previous one, then this input */
    if (prev_id && load_previous(st, prev_id, now, x->items, e)) goto fail;
    if (input_items(input, x->items, e)) goto fail;
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    if (!msgs) {
        oom(e);
        goto fail;
    }
    if (instructions) {
        cJSON *m = new_msg(msgs, "system", e);
        if (!m || add_str(m, "content", instructions, e)) goto fail;
    }
    /* items from the store come first and were checked when they were stored; the
     * input's indices count from the first item of this request */
    const int n_prev =
        cJSON_GetArraySize(x->items) - (cJSON_IsArray(input) ? cJSON_GetArraySize(input) : 1);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, x->items) {
        if (item_to_msgs(it, i - n_prev, msgs, e)) goto fail;
        i++;
    }
    if (cJSON_GetArraySize(msgs) == 0) {
        api_fail(e, 400, "invalid_value", "input", "'input' must not be empty");
        goto fail;
    }

    strcpy(x->id, "resp_");
    rand_alnum(x->id + 5, 40);
    strcpy(x->msg_id, "msg_");
    rand_alnum(x->msg_id + 4, 40);
    x->created_at = (int64_t)time(NULL);
    x->store = store ? st : NULL;
    json_write(chat_out, chat);
    cJSON_Delete(chat);
    if (chat_out->oom) {
        rsp_ctx_destroy(x);
        return oom(e);
    }
    *out = x;
    return 0;
fail:
    cJSON_Delete(chat);
    rsp_ctx_destroy(x);
    return -1;
}

void rsp_chat_error(api_error *e) {
    static const char *const MAP[][2] = {
        {"max_tokens", "max_output_tokens"},
        {"max_completion_tokens", "max_output_tokens"},
        {"response_format", "text.format"},
        {"reasoning_effort", "reasoning.effort"},
    };
    for (size_t i = 0; i < IFD_ARRAY_LEN(MAP); i++)
        if (!strcmp(e->param, MAP[i][0])) {
            snprintf(e->param, sizeof e->param, "%s", MAP[i][1]);
            return;
        }
    if (!strncmp(e->param, "messages", 8)) snprintf(e->param, sizeof e->param, "input");
}
