/* openai.h — the OpenAI API shapes: request parsing and validation (JSON body ->
 * oai_request), the one error formatter, and the non-streaming response bodies.
 *
 * Parsing never looks at the model beyond the vocabulary size; chat templating and
 * tokenization happen in chat.c / gen.c. Every client-visible error goes through
 * api_fail() into an api_error, and out through api_error_json() — the one place an
 * error body is written. Error messages name fields and numbers, never echo input.
 * Any thread; an oai_request has one owner. */
#ifndef INFERD_SERVER_OPENAI_H
#define INFERD_SERVER_OPENAI_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "inferd.h"
#include "util/buf.h"

typedef struct api_error {
    int status;       /* HTTP status: 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *code; /* static: "invalid_value", "context_length_exceeded", ... or NULL */
    char param[128];  /* the offending field ("" = null) */
    char message[512];
    const char *type; /* static; NULL: from the status (api_fail leaves it NULL) */
} api_error;

/* Fill e and return -1 (so `return api_fail(...)` reads naturally). */
int api_fail(api_error *e, int status, const char *code, const char *param, const char *fmt, ...)
    IFD_PRINTF(5, 6);
/* {"error":{"message","type","param","code"}}; type follows from the status. */
void api_error_json(sbuf *out, const api_error *e);

typedef enum oai_kind { OAI_CHAT = 0, OAI_COMPLETION = 1 } oai_kind;
/* Where a chat output's reasoning is: none (all content), it may open with <think>, or
 * it starts inside one (the prompt opened it). */
enum { OAI_REASONING_NONE = 0, OAI_REASONING_MAY_OPEN = 1, OAI_REASONING_INSIDE = 2 };
typedef enum oai_tool_mode { OAI_TOOLS_AUTO = 0, OAI_TOOLS_REQUIRED, OAI_TOOLS_NAMED } oai_tool_mode;
typedef enum oai_so_kind {
    OAI_SO_NONE = 0,
    OAI_SO_JSON_OBJECT,
    OAI_SO_JSON_SCHEMA,
    OAI_SO_REGEX,
    OAI_SO_GBNF,
    OAI_SO_CHOICE,
} oai_so_kind;

typedef struct oai_limits {
    int32_t max_n, max_top_logprobs, max_stop, max_logit_bias, max_prompts;
    int32_t n_vocab;
    bool allow_request_chat_template;
} oai_limits;

/* One prompt of a request (chat: exactly one). */
typedef struct oai_prompt {
    int32_t *ids; /* malloc'ed token ids, after BOS handling */
    int32_t n_ids;
    char *text;   /* malloc'ed prompt text (echo, logging); NULL for token-id prompts until needed */
    size_t text_bytes;
    int32_t max_tokens; /* effective, after clamping to the context */
} oai_prompt;

typedef struct oai_request {
    oai_kind kind;
    cJSON *root;       /* owns the parsed body; the const pointers below point into it */
    const char *model; /* NULL = not given */
    bool stream, include_usage, echo;
    int32_t n;
    bool logprobs;        /* chat: logprobs; completions: logprobs given (not null) */
    int32_t top_logprobs; /* alternatives per token (completions: the logprobs number) */
    int64_t max_tokens;   /* -1 = not given */
    inferd_sampling sampling; /* temperature ... ignore_eos; pointers filled by gen.c */
    const char *stop[INFERD_MAX_STOP];
    int32_t n_stop;
    int32_t stop_ids[64];
    int32_t n_stop_ids;
    inferd_logit_bias *bias; /* malloc'ed */
    int32_t n_bias;
    /* chat */
    const cJSON *messages;
    const cJSON *tools;                /* NULL unless tools are to be offered */
    /* tool_choice: auto (the model decides), required (at least one call), named (that
     * function's call); none clears tools. functions / function_call (deprecated) map
     * here and are answered with message.function_call (legacy_functions). */
    oai_tool_mode tool_mode;
    const char *tool_name;   /* OAI_TOOLS_NAMED */
    bool parallel_tool_calls;
    bool legacy_functions;
    /* structured outputs: response_format json_object / json_schema, or the
     * extensions grammar (GBNF), json_schema (llama.cpp), guided_json, guided_regex,
     * guided_grammar, guided_choice (vLLM); value: the schema object, the pattern /
     * grammar string, the choice array */
    oai_so_kind so_kind;
    const cJSON *so_value;
    bool so_strict;
    struct gram *grammar; /* the compiled constraint (structured.c; a reference), or NULL */
    /* reasoning models: reasoning_effort ("none" switches thinking off) reaches the
     * template; reasoning (gen.c, from the parser and the rendered prompt): where the
     * output's thinking is, OAI_REASONING_* */
    const char *reasoning_effort;
    int reasoning;
    const cJSON *chat_template_kwargs; /* object or NULL */
    const char *chat_template;         /* request-supplied (only when allowed) */
    bool add_generation_prompt, continue_final_message;
    /* completions */
    const cJSON *prompt;
    /* filled by gen.c */
    oai_prompt *prompts;
    int32_t n_prompts;
} oai_request;

/* Parse and validate a request body of n bytes (need not be NUL-terminated).
 * Returns 0, or -1 with e filled (400 for anything wrong with the request).
 *
 * The rules beyond types and ranges, as OpenAI's API has them unless noted:
 * - the body is strict JSON (json.h): a duplicate key, U+0000 in a string, a lone
 *   surrogate, nesting past JSON_DEFAULT_MAX_DEPTH are 400s;
 * - integer fields are exact (read from the number's text, not a double): integral
 *   values in any JSON form count (1.0, 1e2; pydantic's lax mode, as in vLLM), any
 *   fractional part is invalid_type; seed is any int64 (vLLM's range; 2^63 and up are
 *   invalid_value) and a negative seed is its two's complement as the engine's uint64
 *   (-1 -> 2^64-1), so distinct int64 seeds are distinct seeds;
 * - roles: system, user, assistant, tool, developer, and the deprecated function
 *   (which needs a name); system/user/developer/tool messages need content (not
 *   null); tool messages need tool_call_id; the assistant's content may be absent;
 * - stream_options only with stream: true (null counts as absent);
 * - logit_bias keys are token ids written as plain decimals ("01", "+1", "1.0" are not);
 * - chat_template_kwargs may not set a name the server puts into the template context
 *   (messages, tools, add_generation_prompt, bos_token, eos_token) or a template global
 *   (range, dict, namespace, raise_exception, strftime_now). */
int oai_parse(oai_request *r, oai_kind kind, const char *body, size_t n, const oai_limits *lim,
              api_error *e);
void oai_request_free(oai_request *r); /* accepts a half-built request */

/* Helpers shared with http.c for /tokenize and /detokenize: parse a body into a cJSON
 * object (strict JSON as above, a JSON object) or fail with 400. Its number nodes
 * carry their literal (json.h), which oai_parse_ids reads. */
cJSON *oai_parse_object(const char *body, size_t n, api_error *e);
/* The same, with the keys an error may name decided by key_ok (NULL: oai_known_field). */
cJSON *oai_parse_object_keys(const char *body, size_t n, bool (*key_ok)(const char *key), api_error *e);
/* The request fields of the chat and completions APIs (and inferd's extensions): the
 * keys an error message may show. */
bool oai_known_field(const char *key);
/* Token ids from a JSON array: each an integer in [0, n_vocab), read exactly. */
int oai_parse_ids(const cJSON *arr, const char *param, int32_t n_vocab, int32_t **ids,
                  int32_t *n_ids, api_error *e);

#endif
