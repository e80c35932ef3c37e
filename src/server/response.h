/* response.h — response bodies from a finished (or running) generation: the
 * non-streaming chat.completion / text_completion JSON (response.c) and the SSE
 * stream's chunks (sse.c). Both read a gen_req under its mutex; both produce the same
 * text for the same generation (streamed text == non-streamed text). HTTP threads. */
#ifndef INFERD_SERVER_RESPONSE_H
#define INFERD_SERVER_RESPONSE_H
#include "../util/layer/server.h"

#include "gen.h"
#include "reasoning.h"
#include "util/buf.h"

/* ---- response.c ---- */

/* The whole non-streaming body. Returns 200, or an HTTP status with e filled when the
 * generation failed (queue timeout -> 503, engine error -> 500). g->mu held. */
int resp_body(gen_req *g, sbuf *out, api_error *e);

/* Shared with sse.c: logprobs of tokens [from, to) of a choice. */
void resp_logprobs_chat(const gen_req *g, const gen_choice *ch, int32_t from, int32_t to, sbuf *o);
/* The legacy (completions) shape of choice `choice`: with_prompt (echo), the prompt's
 * tokens first — the first with null logprob and null top_logprobs — then the
 * generated tokens [from, to). */
void resp_logprobs_legacy(const gen_req *g, int32_t choice, bool with_prompt, int32_t from, int32_t to,
                          sbuf *o);
void resp_usage(const gen_req *g, sbuf *o);
/* A choice's reasoning and content (reasoning.h) by the request's mode. */
void resp_split(const gen_req *g, const gen_choice *ch, bool at_end, reasoning_split *v);
/* The tokens of a choice's reasoning (usage.completion_tokens_details). */
int32_t resp_reasoning_tokens(const gen_req *g, const gen_choice *ch);
/* ,"system_fingerprint":"fp_…" (chat and completions bodies and chunks). */
void resp_fingerprint(const gen_req *g, sbuf *o);
/* The tokens of a choice that get logprob entries: all but the end token that stopped it. */
int32_t resp_lp_tokens(const gen_req *g, const gen_choice *ch);
void resp_tool_calls(const tool_calls *t, bool with_index, sbuf *o);
/* The tool calls of a finished choice in the template's format (chat_tool_calls) in its
 * content (after any reasoning), with the ids its stream gave out; content_end is an
 * offset into the choice's whole text. Returns the count. */
int resp_tool_calls_of(const gen_req *g, const gen_choice *ch, tool_calls *tc);
/* The API's finish_reason for a finished choice. */
const char *resp_finish(const gen_req *g, const gen_choice *ch, bool tool_calls);
bool resp_all_space(const char *s, size_t n);

/* ---- sse.c ---- */

/* Append whatever the stream can send now (role chunks, content deltas, final chunks,
 * the usage chunk, an error event, [DONE]). Returns true once [DONE] is written.
 * g->mu held. */
bool sse_fill(gen_req *g, sbuf *out);
void sse_keepalive(sbuf *out);
/* An error as an SSE event followed by [DONE] (errors after the 200 headers). */
void sse_error(const api_error *e, sbuf *out);

#endif
