/* tools.h — tool calls in the model families' own formats, described once (a table in
 * tools.c) and used both ways: to parse calls out of generated text (whole, or as a
 * stream that only ever appends) and to force them with a grammar (tool_choice
 * "required" or a named function; the arguments follow the function's JSON schema).
 *
 * Formats: hermes (Qwen2.5, Qwen3, Hermes: <tool_call>\n{"name": …, "arguments": …}\n
 * </tool_call>), llama3 ({"name": …, "parameters": …}, optionally after <|python_tag|>),
 * mistral ([TOOL_CALLS][{…}, {…}]), mistral-v11 ([TOOL_CALLS]name[ARGS]{…}), deepseek-v3
 * (<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{…}\n```
 * <｜tool▁call▁end｜>…), qwen3-coder (<tool_call>\n<function=name>\n<parameter=k>\nv\n
 * </parameter>\n</function>\n</tool_call>). The family is detected from the chat template.
 * Pure functions on immutable tables: any thread. */
#ifndef INFERD_SERVER_TOOLS_H
#define INFERD_SERVER_TOOLS_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "../grammar/grammar.h"
#include "openai.h"

typedef struct tool_format tool_format;

/* The format a chat template writes its calls in (hermes when none is recognized). */
const tool_format *tool_format_detect(const char *template_src);
const tool_format *tool_format_by_name(const char *name); /* NULL when unknown */
const char *tool_format_name(const tool_format *f);

/* One call found in a text: spans into the text. A complete call has its name and
 * arguments whole; the last call of a text still being generated may be partial: its
 * name so far (name_done once it is whole) and its arguments so far. Arguments are JSON
 * text (args_json: a span of the text) except for formats whose arguments are not
 * written as JSON (qwen3-coder's XML parameters, or "arguments" written as a JSON
 * string), which only a complete call yields, converted (tool_call_fill). */
typedef struct tool_span {
    size_t off, end;           /* the call's text (its open tag .. close tag) */
    size_t name_off, name_len;
    size_t args_off, args_len;
    bool name_done, complete;
    bool args_raw;             /* the arguments are text[args_off .. +args_len) as they are */
} tool_span;

/* Scan text[0..n) for calls in format f. at_end: the generation is over (a call cut
 * short is then not a call). Returns the number of spans written (at most max): the
 * complete calls in order, then possibly one partial call (only when !at_end).
 * *content_end: the text before the calls (n when there are none; while !at_end it stops
 * before a tail that may still become a call's opening). Calls stop at the first one
 * that does not parse; text after the last call is dropped. */
int tool_scan(const tool_format *f, const char *text, size_t n, bool at_end, tool_span *spans, int max,
              size_t *content_end);

/* The name and the arguments (JSON text) of a call, malloc'ed: a complete one, or a
 * partial one whose name is whole and whose arguments are JSON text so far (a forced
 * call cut by max_tokens); false otherwise (or on no memory). */
bool tool_span_strings(const tool_format *f, const char *text, const tool_span *s, char **name, char **args);

/* The grammar of a forced call in format f: one call (or, when parallel, one or more)
 * of the functions in tools (an OpenAI "tools" array), only `only` when not NULL. Each
 * function's arguments follow its "parameters" schema; a schema the grammar engine does
 * not support is a 400 naming the keyword when the function is strict, else the
 * arguments are any JSON object. */
int tool_grammar(const tool_format *f, const cJSON *tools, const char *only, bool parallel, gram **out,
                 api_error *e);

#endif
