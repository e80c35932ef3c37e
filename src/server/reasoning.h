/* reasoning.h — a reasoning model's output split into its thinking and its content:
 * <think>…</think> (Qwen3, QwQ, DeepSeek-R1 and its distills). The thinking goes to
 * message.reasoning_content (and .reasoning), streamed as delta.reasoning_content; the
 * content is what follows the end tag, leading whitespace dropped. Pure functions:
 * any thread. */
#ifndef INFERD_SERVER_REASONING_H
#define INFERD_SERVER_REASONING_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>

#define REASONING_OPEN "<think>"
#define REASONING_CLOSE "</think>"

typedef struct reasoning_split {
    bool has;      /* the output has a reasoning part (opened, or the prompt opened it) */
    bool closed;   /* its end tag was written */
    size_t r0, r1; /* the reasoning's text */
    size_t safe;   /* streaming: reasoning bytes [r0, safe) may go out (a maybe-end-tag held) */
    size_t c0;     /* the content starts here (n while it cannot be told yet) */
    bool known;    /* c0 is final (content may stream from it) */
} reasoning_split;

/* mode: OAI_REASONING_* (openai.h). at_end: the generation is over (nothing held). */
void reasoning_split_of(int mode, const char *t, size_t n, bool at_end, reasoning_split *v);

#endif
