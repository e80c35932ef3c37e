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
    resp_fingerprint(g, o);
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
                  int32_t tok_from, int32_t tok_to, const char *tc, const char *finish,
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
        if (tc) { /* tool-call deltas, pre-rendered: "content":null,"tool_calls":[…] */
            sbuf_puts(o, comma ? "," : "");
            sbuf_puts(o, tc);
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

/* ---- tool calls ----------------------------------------------------------------------
 * Deltas that only ever append: a call's head ({index, id, type, function: {name,
 * arguments: ""}}) once its name is whole, then fragments of its arguments as they are
 * written. With a forced call (tool_choice required / named: the grammar guarantees
 * the format) the fragments stream as the model writes them; otherwise a call goes out
 * once it is complete, so text that turns out not to be a call is never half sent as
 * one. The final chunk sends what is left, with the same ids, so the deltas concatenate
 * to the non-streamed calls. The deprecated functions get function_call deltas. */
static void tc_head(const gen_req *g, int32_t i, const char *id, const char *name, size_t name_len, sbuf *o) {
    if (g->req.legacy_functions) {
        sbuf_puts(o, "\"content\":null,\"function_call\":{\"name\":");
        sbuf_json_str(o, name, name_len);
        sbuf_puts(o, ",\"arguments\":\"\"}");
        return;
    }
    sbuf_printf(o, "\"content\":null,\"tool_calls\":[{\"index\":%d,\"id\":", (int)i);
    sbuf_json_str(o, id, strlen(id));
    sbuf_puts(o, ",\"type\":\"function\",\"function\":{\"name\":");
    sbuf_json_str(o, name, name_len);
    sbuf_puts(o, ",\"arguments\":\"\"}}]");
}

static void tc_args(const gen_req *g, int32_t i, const char *frag, size_t n, sbuf *o) {
    if (g->req.legacy_functions) {
        sbuf_puts(o, "\"content\":null,\"function_call\":{\"arguments\":");
        sbuf_json_str(o, frag, n);
        sbuf_puts(o, "}");
        return;
    }
    sbuf_printf(o, "\"content\":null,\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", (int)i);
    sbuf_json_str(o, frag, n);
    sbuf_puts(o, "}}]");
}

static bool tc_state(gen_choice *ch) {
    if (ch->tc_id) return true;
    ch->tc_id = calloc(CHAT_MAX_TOOL_CALLS, sizeof *ch->tc_id);
    ch->tc_args = calloc(CHAT_MAX_TOOL_CALLS, sizeof *ch->tc_args);
    return ch->tc_id && ch->tc_args;
}

/* One chunk per delta (finish: on the last one of a final chunk, else NULL). */
static void tc_emit(gen_req *g, int32_t index, gen_choice *ch, sbuf *delta, const char *finish, sbuf *o) {
    chunk(g, index, ch, false, NULL, 0, 0, 0, delta->p ? delta->p : "", finish, false, o);
    sbuf_reset(delta);
}

/* The calls of a running choice that can go out now (spans from tool_scan). */
static void tc_stream(gen_req *g, int32_t index, gen_choice *ch, size_t base, const tool_span *sp, int k,
                      bool forced, sbuf *o) {
    const char *text = (ch->text.p ? ch->text.p : "") + base; /* the spans are in the content */
    const tool_format *f = chat_tool_format(g->srv ? g->srv->chat : NULL);
    sbuf d = {0};
    for (int i = 0; i < k && i < CHAT_MAX_TOOL_CALLS; i++) {
        if (!sp[i].complete && !(forced && sp[i].name_done)) break;
        if (g->req.legacy_functions && i > 0) break; /* one call in that shape */
        if (!tc_state(ch)) break;
        if (i >= ch->tc_sent) {
            snprintf(ch->tc_id[i], sizeof ch->tc_id[i], "call_");
            rand_alnum(ch->tc_id[i] + 5, 24);
            char *name = NULL, *args = NULL;
            if (sp[i].complete && tool_span_strings(f, text, &sp[i], &name, &args)) {
                tc_head(g, i, ch->tc_id[i], name, strlen(name), &d);
            } else if (!sp[i].complete) {
                tc_head(g, i, ch->tc_id[i], text + sp[i].name_off, sp[i].name_len, &d);
            } else {
                free(name);
                free(args);
                break; /* a complete call that does not convert: left to the final parse */
            }
            tc_emit(g, index, ch, &d, NULL, o);
            ch->tc_sent = i + 1;
            ch->tc_args[i] = 0;
            if (!sp[i].args_raw && args) { /* converted arguments: all at once */
                tc_args(g, i, args, strlen(args), &d);
                tc_emit(g, index, ch, &d, NULL, o);
                ch->tc_args[i] = SIZE_MAX;
            }
            free(name);
            free(args);
        }
        if (sp[i].args_raw && ch->tc_args[i] != SIZE_MAX && sp[i].args_len > ch->tc_args[i]) {
            tc_args(g, i, text + sp[i].args_off + ch->tc_args[i], sp[i].args_len - ch->tc_args[i], &d);
            tc_emit(g, index, ch, &d, NULL, o);
            ch->tc_args[i] = sp[i].args_len;
        }
    }
    sbuf_free(&d);
}

/* A reasoning delta: the thinking under both names clients read. */
static void reasoning_chunk(gen_req *g, int32_t index, gen_choice *ch, const char *t, size_t n, sbuf *o) {
    sbuf d = {0};
    sbuf_puts(&d, "\"reasoning_content\":");
    sbuf_json_str(&d, t, n);
    sbuf_puts(&d, ",\"reasoning\":");
    sbuf_json_str(&d, t, n);
    chunk(g, index, ch, false, NULL, 0, ch->sent_tokens, ch->n_tokens, d.p ? d.p : "", NULL, false, o);
    ch->sent_tokens = ch->n_tokens;
    o->oom |= d.oom;
    sbuf_free(&d);
}

/* The reasoning a choice can send now (all of it at the end). */
static void reasoning_out(gen_req *g, int32_t index, gen_choice *ch, const reasoning_split *rs, sbuf *o) {
    if (!rs->has) return;
    const size_t from = IFD_MAX(ch->sent_reason, rs->r0), to = rs->closed ? rs->r1 : rs->safe;
    if (to > from) reasoning_chunk(g, index, ch, ch->text.p + from, to - from, o);
    ch->sent_reason = IFD_MAX(ch->sent_reason, to);
}

/* The choice's final chunk: the rest of its reasoning and content, the rest of its tool
 * calls, finish_reason. */
static void final_chunk(gen_req *g, int32_t i, gen_choice *ch, sbuf *o) {
    const char *text = ch->text.p ? ch->text.p : "";
    reasoning_split rs;
    resp_split(g, ch, true, &rs);
    reasoning_out(g, i, ch, &rs, o);
    if (ch->sent_text < rs.c0) ch->sent_text = rs.c0;
    tool_calls tc = {0};
    size_t end = ch->text.n;
    if (g->req.kind == OAI_CHAT && g->req.tools && resp_tool_calls_of(g, ch, &tc) > 0) {
        end = tc.content_end;
        if (resp_all_space(text + rs.c0, end - rs.c0)) end = ch->sent_text; /* content is null: send no more */
    }
    size_t from = IFD_MIN(ch->sent_text, end);
    const char *finish = resp_finish(g, ch, tc.n > 0);
    int n_calls = g->req.legacy_functions ? IFD_MIN(tc.n, 1) : tc.n;
    if (n_calls == 0) {
        chunk(g, i, ch, false, text + from, end - from, ch->sent_tokens, ch->n_tokens, NULL, finish, false, o);
    } else {
        if (end > from || ch->n_tokens > ch->sent_tokens)
            chunk(g, i, ch, false, text + from, end - from, ch->sent_tokens, ch->n_tokens, NULL, NULL, false, o);
        sbuf d = {0};
        for (int k = 0; k < n_calls; k++) {
            const tool_call *c = &tc.v[k];
            size_t done = 0;
            if (k >= ch->tc_sent) {
                tc_head(g, k, c->id, c->name, strlen(c->name), &d);
                if (k + 1 == n_calls && !c->arguments[0]) break;
                tc_emit(g, i, ch, &d, NULL, o);
            } else {
                done = ch->tc_args[k] == SIZE_MAX ? strlen(c->arguments) : ch->tc_args[k];
            }
            const size_t len = strlen(c->arguments);
            if (done < len) tc_args(g, k, c->arguments + done, len - done, &d);
            if (d.n && k + 1 < n_calls) tc_emit(g, i, ch, &d, NULL, o);
        }
        if (d.n) tc_emit(g, i, ch, &d, finish, o);
        else chunk(g, i, ch, false, NULL, 0, 0, 0, NULL, finish, false, o);
        sbuf_free(&d);
    }
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
        /* the reasoning first; the content once where it starts is known */
        reasoning_split rs;
        resp_split(g, ch, false, &rs);
        reasoning_out(g, i, ch, &rs, o);
        if (!rs.known) continue;
        if (ch->sent_text < rs.c0) ch->sent_text = rs.c0;
        const size_t c0 = rs.c0;
        size_t safe = ch->text.n;
        tool_span sp[CHAT_MAX_TOOL_CALLS];
        int k = 0;
        const bool forced = q->tool_mode != OAI_TOOLS_AUTO;
        size_t content_end = ch->text.n;
        if (q->kind == OAI_CHAT && q->tools) {
            const char *text = (ch->text.p ? ch->text.p : "") + c0;
            const size_t n = ch->text.n - c0;
            k = tool_scan(chat_tool_format(g->srv ? g->srv->chat : NULL), text, n, false, sp, CHAT_MAX_TOOL_CALLS, &content_end);
            content_end += c0;
            safe = c0 + IFD_MIN(content_end - c0, chat_tool_stream_safe(text, n));
            if (forced) safe = c0; /* the grammar writes calls only */
        }
        if (safe > ch->sent_text && ch->tc_sent == 0) {
            chunk(g, i, ch, false, ch->text.p + ch->sent_text, safe - ch->sent_text, ch->sent_tokens,
                  ch->n_tokens, NULL, NULL, false, o);
            ch->sent_text = safe;
            ch->sent_tokens = ch->n_tokens;
        }
        /* calls go out once the content before them is out */
        if (k > 0 && (forced || ch->sent_text >= content_end)) tc_stream(g, i, ch, c0, sp, k, forced, o);
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
