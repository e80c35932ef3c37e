/* structured.h — structured outputs on the server side: the compiled grammar a chat or
 * completions request constrains its output to (a forced tool call in the template's
 * format, response_format json_object / json_schema, or the grammar / guided_*
 * extensions), through a cache of compiled grammars keyed by their source, shared by
 * the HTTP threads (compiling a schema once serves every request that sends it).
 * Thread-safe. */
#ifndef INFERD_SERVER_STRUCTURED_H
#define INFERD_SERVER_STRUCTURED_H
#include "../util/layer/server.h"

#include "../grammar/grammar.h"
#include "openai.h"

struct server;
typedef struct so_cache so_cache;

so_cache *so_cache_create(int capacity); /* NULL on no memory */
void so_cache_destroy(so_cache *c);      /* NULL ok */
/* Cache statistics (metrics): lookups that found a compiled grammar, compiles. */
void so_cache_stats(so_cache *c, int64_t *hits, int64_t *compiles);

/* The grammar of request r into r->grammar (a reference; NULL when the output is not
 * constrained): tools forced by tool_choice win over response_format. 400 naming the
 * field when the schema / grammar / pattern does not compile (an unsupported JSON
 * Schema keyword is named). */
int so_prepare(struct server *s, oai_request *r, api_error *e);

#endif
