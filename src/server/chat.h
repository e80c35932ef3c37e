/* chat.h — chat requests: messages -> template context -> prompt text (through the
 * Jinja-subset interpreter of src/template/chat_template.h, with a ChatML fallback for
 * models that carry no template), and tool calls parsed back out of generated text
 * (Hermes/Qwen <tool_call>{json}</tool_call>, Llama 3 bare JSON, Mistral [TOOL_CALLS]).
 *
 * A chat_ctx is built once at startup and read-only afterwards: renders run on any
 * number of HTTP threads at once. */
#ifndef INFERD_SERVER_CHAT_H
#define INFERD_SERVER_CHAT_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>

#include "openai.h"
#include "tools.h"

struct model;
struct tokenizer;
typedef struct chat_ctx chat_ctx;

typedef struct chat_limits {
    double max_seconds;
    size_t max_output_bytes;
} chat_limits;

/* template_src: the operator's template text, or NULL for the model's (ChatML when the
 * model has none). The model (its tokenizer) must outlive the chat_ctx. */
int chat_create(chat_ctx **out, const struct model *m, const char *template_src,
                const chat_limits *lim, char *err, size_t err_bytes);
/* The same from a vocabulary alone (tk outlives the chat_ctx) and the model's template
 * (tokenizer.chat_template, or NULL): for tools and tests without weights. */
int chat_create_vocab(chat_ctx **out, const struct tokenizer *tk, const char *model_template,
                      const char *template_src, const chat_limits *lim, char *err, size_t err_bytes);
void chat_destroy(chat_ctx *c);
const char *chat_template_origin(const chat_ctx *c); /* "file", "model", "chatml" */

/* The prompt of a chat request: r's messages (tools, kwargs) rendered with the
 * template and tokenized, into p->ids / p->n_ids and p->text / p->text_bytes (the
 * rendered text, for echo and logs; all malloc'ed, p is overwritten). tok_flags:
 * TOK_ENC_ADD_BOS (a BOS the template also wrote is kept once) / TOK_ENC_ADD_EOS.
 * Control tokens come only from the template's own text (its literals, bos_token,
 * eos_token), never from request data: text in messages, tools or kwargs that spells
 * one is tokenized as plain text (chat_escape.h). 400 with the template's message when
 * it raises, or when the prompt is absurdly long; 500 for internal faults. */
int chat_prompt(const chat_ctx *c, const oai_request *r, unsigned tok_flags, oai_prompt *p, api_error *e);

/* Token ids that end an assistant turn in this model's chat format (e.g. <|im_end|>,
 * <|eot_id|>): added to the request's stop_token_ids. Returns the count (<= cap). */
int chat_stop_token_ids(const chat_ctx *c, int32_t *ids, int cap);

/* ---- tool calls ----------------------------------------------------------------- */

typedef struct tool_call {
    char id[40];     /* "call_" + 24 random characters */
    char *name;      /* malloc'ed */
    char *arguments; /* malloc'ed JSON text */
} tool_call;

typedef struct tool_calls {
    tool_call *v;
    int n;
    size_t content_end; /* text[0..content_end) is content; the calls follow */
} tool_calls;

/* The template's tool-call format (tools.h); hermes for a NULL c. */
const tool_format *chat_tool_format(const chat_ctx *c);
/* Does the template write <think> (a reasoning model's template)? */
bool chat_thinks(const chat_ctx *c);
#define CHAT_MAX_TOOL_CALLS 64
/* The calls of a finished generation in format f (tools.h), with fresh ids; when none
 * parse in f, the shapes of chat_parse_tool_calls. partial (a forced call, whose
 * format the grammar guarantees): a last call cut short counts, with its arguments so
 * far, and nothing else is tried. Returns the number found (0: the text is plain
 * content, out->content_end = n). */
int chat_tool_calls(const tool_format *f, const char *text, size_t n, bool partial, tool_calls *out);
/* The shapes small models write whatever their template says: Hermes tags, Llama 3 bare
 * JSON, Mistral [TOOL_CALLS], a JSON call in a markdown fence. */
int chat_parse_tool_calls(const char *text, size_t n, tool_calls *out);
void tool_calls_free(tool_calls *t);

/* Streaming with tools: how many bytes of the text so far may go out as content now —
 * the text before anything that is, or may still become, a tool call. */
size_t chat_tool_stream_safe(const char *text, size_t n);

#endif
