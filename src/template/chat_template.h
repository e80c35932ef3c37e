/* chat_template.h — render Hugging Face chat templates (Jinja) to prompt text.
 *
 * The template language is the Jinja2 subset that transformers' apply_chat_template
 * sees: an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
 * loopcontrols extension, plus transformers' tojson (json.dumps, ensure_ascii off),
 * raise_exception(msg) and strftime_now(fmt). Output and error messages follow
 * Python jinja2 byte for byte where the templates in ../shared/templates reach.
 *
 * Threads: a chat_template is immutable after chat_template_create; any number of
 * threads may call chat_template_render on the same template at once. */
#ifndef INFERD_CHAT_TEMPLATE_H
#define INFERD_CHAT_TEMPLATE_H
#include "../util/layer/template.h"

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct chat_template chat_template;

/* Zero fields mean the defaults. */
typedef struct chat_template_limits {
    size_t max_output_bytes; /* 0 = 1 MiB; also caps every intermediate string */
    double max_seconds;      /* 0 = 1 s of wall time */
    uint64_t max_steps;      /* 0 = 10M evaluation steps */
    size_t max_memory_bytes; /* 0 = 128 MiB of render scratch memory */
    /* "YYYY-MM-DD HH:MM:SS": the time strftime_now() reports (tests pin it);
     * NULL = the real local time. */
    const char *fixed_now;
} chat_template_limits;

/* Parse once. src need not be NUL-terminated. Returns IFD_OK, or IFD_ERR_TEMPLATE
 * (syntax error, message in err) / IFD_ERR_NOMEM. *out is NULL on failure. */
int chat_template_create(chat_template **out, const char *src, size_t n, char *err,
                         size_t err_bytes);

/* Render with ctx (a JSON object: messages, tools, add_generation_prompt, bos_token,
 * eos_token and any other variables; NULL = none). lim may be NULL. On success *out is
 * a malloc'ed NUL-terminated string the caller frees, *out_bytes its length (it may
 * contain NUL bytes). On failure returns IFD_ERR_TEMPLATE (template raised or a
 * runtime error; for raise_exception("msg") err is exactly "msg"), IFD_ERR_LIMIT (time,
 * steps, output size, memory or recursion), IFD_ERR_INVALID (ctx not an object, bad
 * fixed_now) or IFD_ERR_NOMEM, with the message in err. */
int chat_template_render(const chat_template *t, const cJSON *ctx, const chat_template_limits *lim,
                         char **out, size_t *out_bytes, char *err, size_t err_bytes);

void chat_template_destroy(chat_template *t); /* NULL is fine */

#endif
