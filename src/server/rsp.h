/* rsp.h — POST /v1/responses (the OpenAI Responses API) on top of the chat path, and
 * the store behind previous_response_id and GET / DELETE /v1/responses/{id}.
 *
 * A Responses request is translated into the equivalent Chat Completions body
 * (rsp_req.c: input items -> messages, flat tools -> nested ones, text.format ->
 * response_format, max_output_tokens -> max_tokens, reasoning.effort ->
 * reasoning_effort), which then runs through oai_parse / gen_prepare / gen_start as
 * any chat request does; rsp_out.c renders the generation in the Responses shape
 * (the response object, or the typed SSE events). rsp_store.c keeps finished
 * responses in memory.
 *
 * Threads: an rsp_ctx belongs to one HTTP request (its connection's thread); the
 * rsp_out.c functions read the gen_req under its mutex, as response.c and sse.c do.
 * The store is thread-safe. */
#ifndef INFERD_SERVER_RSP_H
#define INFERD_SERVER_RSP_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "chat.h"
#include "gen.h"
#include "openai.h"
#include "util/buf.h"

#define RSP_ID_BYTES 64 /* ids ("resp_...", "msg_...", "fc_...") with their NUL, at most */

/* ---- rsp_store.c: finished responses by id ------------------------------------------ */

typedef struct rsp_store rsp_store;

/* At most max_entries entries (0: store nothing) and max_bytes bytes of JSON; an
 * entry unused for ttl_s seconds expires (0: never). */
int rsp_store_create(rsp_store **out, int64_t max_entries, int64_t max_bytes, double ttl_s);
void rsp_store_destroy(rsp_store *st); /* accepts NULL */
/* Store (or replace) id's entry: items, the conversation as a JSON array; object, the
 * response object. Takes ownership of both malloc'ed texts, also on failure. May
 * evict others. now: seconds on the clock the TTL is measured with. Returns 0,
 * IFD_ERR_UNSUPPORTED when storing is off, IFD_ERR_LIMIT when the entry alone is over
 * max_bytes, IFD_ERR_INVALID for an id too long, IFD_ERR_NOMEM. */
int rsp_store_put(rsp_store *st, const char *id, char *items, size_t items_bytes, char *object,
                  size_t object_bytes, double now);
/* Malloc'ed, NUL-terminated copies of id's texts (either pointer may be NULL: not
 * wanted); the entry counts as used now. IFD_ERR_NOT_FOUND when unknown or expired. */
int rsp_store_get(rsp_store *st, const char *id, double now, char **items, size_t *items_bytes,
                  char **object, size_t *object_bytes);
int rsp_store_delete(rsp_store *st, const char *id, double now); /* IFD_ERR_NOT_FOUND */
int64_t rsp_store_count(rsp_store *st);

/* ---- rsp_req.c: the request ------------------------------------------------------------ */

typedef struct rsp_ctx {
    char id[RSP_ID_BYTES];     /* "resp_..." */
    char msg_id[RSP_ID_BYTES]; /* the output message's id ("msg_..."), fixed up front for the stream
                                */
    int64_t created_at;        /* unix seconds */
    cJSON *req;   /* the Responses body (owned): the fields the response object echoes */
    cJSON *items; /* the conversation without instructions (owned): the previous
                   * response's items, then this request's input items */
    bool stream;
    rsp_store *store; /* where the finished response goes; NULL: store: false */
    /* the output, fixed once the generation is done (rsp_out.c) */
    bool out_ready;
    tool_calls tc;
    bool has_msg;                 /* a message item (besides the function calls) */
    size_t msg_bytes;             /* its text: the choice's text [msg_base, msg_bytes) */
    size_t msg_base;              /* where the content starts (after a reasoning model's thinking) */
    char (*fc_ids)[RSP_ID_BYTES]; /* [tc.n] "fc_..." */
    /* streaming (HTTP thread, g->mu held) */
    int64_t seq; /* the next event's sequence_number */
    bool sent_head, msg_open, sent_end;
    size_t sent_text;
} rsp_ctx;

/* Validate a Responses body of n bytes and translate it: *out gets the request's
 * context, chat the equivalent Chat Completions body (JSON text). previous_response_id
 * is looked up in st (404 previous_response_not_found when it is not there). Returns 0,
 * or -1 with e filled (400 for anything malformed, 404, 500). */
int rsp_parse(rsp_store *st, const char *body, size_t n, double now, rsp_ctx **out, sbuf *chat,
              api_error *e);
void rsp_ctx_destroy(rsp_ctx *x); /* accepts NULL */
/* An error of the chat path (oai_parse, gen_prepare) on the translated body: its param
 * renamed to the Responses field it came from (max_tokens -> max_output_tokens,
 * response_format -> text.format, messages... -> input). */
void rsp_chat_error(api_error *e);
/* Might this be one of our ids: [A-Za-z0-9_-], 1 to RSP_ID_BYTES - 1 characters. */
bool rsp_id_ok(const char *id);

/* ---- rsp_out.c: the response ----------------------------------------------------------- */

/* The non-streaming body: the response object, once every choice is done. Stores the
 * response when x->store. Returns 200, or an HTTP status with e filled when the
 * generation failed. g->mu held. */
int rsp_body(rsp_ctx *x, gen_req *g, sbuf *out, api_error *e);
/* Streaming: append the events that can go out now. Returns true once the terminal
 * event (response.completed / .incomplete / .failed) is written. g->mu held. */
bool rsp_sse_fill(rsp_ctx *x, gen_req *g, sbuf *out);

#endif
