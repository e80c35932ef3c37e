/* sse.c — the Server-Sent Events stream of a generation: the first chunk per choice
 * (role + empty content, or the echoed prompt with its logprobs), content deltas as whole UTF-8
 * characters (the engine only emits whole characters; with tools, text that may be a
 * tool call is held back), the final chunk carrying finish_reason, the usage chunk,
 * errors after the headers, and [DONE]. HTTP threads, with the generation's mutex
 * held. */
#include "response.h"

#include <string.h>

static void chunk_head(const gen_req *g, sbuf *o) {
    sbuf_puts(o, "data: {\"id\":");
    sbuf_json_str(o, g->id, strlen(g->id));
    sbuf_printf(o, ",\"object\":\"%s\",\"created\":%lld,\"model\":",
                g->req.kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion",
                (long long)g->created);
    sbuf_json_str(o, g->model_name, strlen(g->model_name));
    sbuf_puts(o, ",\"choices\":[");
}

static void chunk_tail(const gen_req *g, sbuf *o) {
    sbuf_puts(o, "]");
    if (g->req.include_usage) sbuf_puts(o, ",\"usage\":null");
    sbuf_puts(o, "}\n\n");
}

/* One chunk for one choice. text may be NULL (no content key); finish NULL: null.
 * echo_lp: the echoed prompt's logprobs (completions with echo and logprobs). */
static void chunk(gen_req *g, int32_t index, gen_choice *ch, bool role, const char *text, size_t n,
                  int32_t tok_from, int32_t tok_to, const tool_calls *tc, const char *finish,
                  bool echo_lp, sbuf *o) {
    const oai_request *q = &g->req;
    chunk_head(g, o);
    sbuf_printf(o, "{\"index\":%d,", (int)index);
    if (q->kind == OAI_CHAT) {
        sbuf_puts(o, "\"delta\":{");
        bool comma = false;
        if (role) {
            sbuf_puts(o, "\"role\":\"assistant\"");
            comma = true;
        }
        if (text) {
            sbuf_puts(o, comma ? ",\"content\":" : "\"content\":");
            sbuf_json_str(o, text, n);
            comma = true;
        }
        if (tc && tc->n) {
            sbuf_puts(o, comma ? ",\"tool_calls\":" : "\"tool_calls\":");
            resp_tool_calls(tc, true, o);
        }
        sbuf_puts(o, "},\"logprobs\":");
        if (q->logprobs && tok_to > tok_from) resp_logprobs_chat(g, ch, tok_from, tok_to, o);
        else sbuf_puts(o, "null");
    } else {
        sbuf_puts(o, "\"text\":");
        sbuf_json_str(o, text ? text : "", text ? n : 0);
        sbuf_puts(o, ",\"logprobs\":");
        if (q->logprobs && (tok_to > tok_from || echo_lp)) {
            resp_logprobs_legacy(g, index, echo_lp, tok_from, tok_to, o);
        } else {
            sbuf_puts(o, "null");
        }
    }
    sbuf_puts(o, ",\"finish_reason\":");
    if (finish) sbuf_json_str(o, finish, strlen(finish));
    else sbuf_puts(o, "null");
    sbuf_puts(o, "}");
    chunk_tail(g, o);
}

/* The choice's final chunk: the rest of its content, its tool calls, finish_reason. */
static void final_chunk(gen_req *g, int32_t i, gen_choice *ch, sbuf *o) {
    const char *text = ch->text.p ? ch->text.p : "";
    tool_calls tc = {0};
    size_t end = ch->text.n;
    if (g->req.kind == OAI_CHAT && g->req.tools && chat_parse_tool_calls(text, ch->text.n, &tc) > 0) {
        end = tc.content_end;
        if (resp_all_space(text, end)) end = ch->sent_text; /* content is null: send no more */
    }
    size_t from = IFD_MIN(ch->sent_text, end);
    chunk(g, i, ch, false, text + from, end - from, ch->sent_tokens, ch->n_tokens, &tc,
          resp_finish(ch, tc.n > 0), false, o);
    ch->sent_text = ch->text.n;
    ch->sent_tokens = ch->n_tokens;
    ch->sent_final = true;
    tool_calls_free(&tc);
}

bool sse_fill(gen_req *g, sbuf *o) {
    if (g->sent_done) return true;
    const oai_request *q = &g->req;
    bool failed = g->has_error;
    for (int32_t i = 0; i < g->n_choices; i++) {
        if (g->choices[i].finish == INFERD_FINISH_ERROR) failed = true;
        if (g->choices[i].text.oom) failed = true;
    }
    for (int32_t i = 0; i < g->n_subs; i++)
        if (g->subs[i].prompt_lp_oom) failed = true;
    if (failed) {
        if (!g->all_done) return false; /* the engine still writes into this request */
        api_error e = g->error;
        if (!g->has_error) gen_engine_error(g, &e);
        sse_error(&e, o);
        g->sent_done = true;
        return true;
    }
    bool all_final = true;
    for (int32_t i = 0; i < g->n_choices; i++) {
        gen_choice *ch = &g->choices[i];
        if (!ch->sent_role) {
            /* the echoed prompt comes first; with logprobs it waits for the prompt's
             * logprobs, which come with the prompt's first engine event */
            const oai_prompt *p = &q->prompts[i / q->n];
            const bool echo_lp = q->echo && q->logprobs;
            if (echo_lp && !g->subs[i / q->n].started) {
                all_final = false;
                continue;
            }
            ch->sent_role = true;
            if (q->kind == OAI_CHAT) chunk(g, i, ch, true, "", 0, 0, 0, NULL, NULL, false, o);
            else if (q->echo && p->text)
                chunk(g, i, ch, false, p->text, p->text_bytes, 0, 0, NULL, NULL, echo_lp, o);
        }
        if (ch->sent_final) continue;
        if (ch->finished) {
            final_chunk(g, i, ch, o);
            continue;
        }
        all_final = false;
        size_t safe = ch->text.n;
        if (q->kind == OAI_CHAT && q->tools) safe = chat_tool_stream_safe(ch->text.p ? ch->text.p : "", ch->text.n);
        if (safe > ch->sent_text) {
            chunk(g, i, ch, false, ch->text.p + ch->sent_text, safe - ch->sent_text, ch->sent_tokens,
                  ch->n_tokens, NULL, NULL, false, o);
            ch->sent_text = safe;
            ch->sent_tokens = ch->n_tokens;
        }
    }
    if (!all_final) return false;
    if (q->include_usage && !g->sent_usage) {
        chunk_head(g, o);
        sbuf_puts(o, "],\"usage\":");
        resp_usage(g, o);
        sbuf_puts(o, "}\n\n");
        g->sent_usage = true;
    }
    sbuf_puts(o, "data: [DONE]\n\n");
    g->sent_done = true;
    return true;
}

void sse_keepalive(sbuf *o) { sbuf_puts(o, ": keep-alive\n\n"); }

void sse_error(const api_error *e, sbuf *o) {
    sbuf_puts(o, "data: ");
    api_error_json(o, e);
    sbuf_puts(o, "\n\ndata: [DONE]\n\n");
}
