/* response.c — non-streaming response bodies and the pieces the stream shares with
 * them (logprobs in the chat and the legacy shape, usage, tool calls). HTTP threads,
 * with the generation's mutex held. */
#include "response.h"

#include <ctype.h>
#include <string.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

bool resp_all_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return false;
    return true;
}

const char *resp_finish(const gen_choice *ch, bool tool_calls) {
    if (tool_calls && ch->finish == INFERD_FINISH_STOP) return "tool_calls";
    const char *s = gen_finish_str(ch->finish);
    return s ? s : "stop";
}

/* token text as the API shows it (special tokens rendered) */
static size_t piece(const gen_req *g, int32_t id, char *buf, size_t cap) {
    size_t k = tok_piece(g->srv->model->tok, id, true, buf, cap);
    return IFD_MIN(k, cap);
}

static void token_obj(const gen_req *g, int32_t id, float lp, sbuf *o) {
    char buf[256];
    size_t k = piece(g, id, buf, sizeof buf);
    sbuf_puts(o, "{\"token\":");
    sbuf_json_str(o, buf, k);
    sbuf_puts(o, ",\"logprob\":");
    sbuf_json_num(o, lp);
    sbuf_puts(o, ",\"bytes\":[");
    for (size_t i = 0; i < k; i++) sbuf_printf(o, i ? ",%u" : "%u", (unsigned char)buf[i]);
    sbuf_puts(o, "]");
}

void resp_logprobs_chat(const gen_req *g, const gen_choice *ch, int32_t from, int32_t to, sbuf *o) {
    sbuf_puts(o, "{\"content\":[");
    const int32_t w = 1 + ch->n_top;
    for (int32_t t = from; t < to && ch->lp; t++) {
        const inferd_token_logprob *row = ch->lp + (size_t)t * (size_t)w;
        if (t > from) sbuf_puts(o, ",");
        token_obj(g, ch->tokens[t], row[0].logprob, o);
        sbuf_puts(o, ",\"top_logprobs\":[");
        for (int32_t k = 1; k < w; k++) {
            if (k > 1) sbuf_puts(o, ",");
            token_obj(g, row[k].id, row[k].logprob, o);
            sbuf_puts(o, "}");
        }
        sbuf_puts(o, "]}");
    }
    sbuf_puts(o, "]}");
}

void resp_logprobs_legacy(const gen_req *g, const gen_choice *ch, int32_t from, int32_t to,
                          size_t text_base, sbuf *o) {
    const int32_t w = 1 + ch->n_top;
    char buf[256];
    size_t off = text_base;
    for (int32_t t = 0; t < from; t++) off += piece(g, ch->tokens[t], buf, sizeof buf);
    sbuf_puts(o, "{\"tokens\":[");
    for (int32_t t = from; t < to; t++) {
        if (t > from) sbuf_puts(o, ",");
        size_t k = piece(g, ch->tokens[t], buf, sizeof buf);
        sbuf_json_str(o, buf, k);
    }
    sbuf_puts(o, "],\"token_logprobs\":[");
    for (int32_t t = from; t < to && ch->lp; t++) {
        if (t > from) sbuf_puts(o, ",");
        sbuf_json_num(o, ch->lp[(size_t)t * (size_t)w].logprob);
    }
    sbuf_puts(o, "],\"top_logprobs\":[");
    for (int32_t t = from; t < to && ch->lp; t++) {
        const inferd_token_logprob *row = ch->lp + (size_t)t * (size_t)w;
        sbuf_puts(o, t > from ? ",{" : "{");
        for (int32_t k = 1; k < w; k++) {
            if (k > 1) sbuf_puts(o, ",");
            size_t n = piece(g, row[k].id, buf, sizeof buf);
            sbuf_json_str(o, buf, n);
            sbuf_puts(o, ":");
            sbuf_json_num(o, row[k].logprob);
        }
        sbuf_puts(o, "}");
    }
    sbuf_puts(o, "],\"text_offset\":[");
    for (int32_t t = from; t < to; t++) {
        sbuf_printf(o, t > from ? ",%zu" : "%zu", off);
        off += piece(g, ch->tokens[t], buf, sizeof buf);
    }
    sbuf_puts(o, "]}");
}

void resp_usage(const gen_req *g, sbuf *o) {
    int64_t completion = 0, cached = 0;
    for (int32_t i = 0; i < g->n_choices; i++) completion += g->choices[i].completion_tokens;
    for (int32_t i = 0; i < g->n_subs; i++) cached += g->subs[i].cached_tokens;
    sbuf_printf(o, "{\"prompt_tokens\":%d,\"completion_tokens\":%lld,\"total_tokens\":%lld",
                (int)g->prompt_tokens, (long long)completion, (long long)(g->prompt_tokens + completion));
    if (cached > 0) sbuf_printf(o, ",\"prompt_tokens_details\":{\"cached_tokens\":%lld}", (long long)cached);
    sbuf_puts(o, "}");
}

void resp_tool_calls(const tool_calls *t, bool with_index, sbuf *o) {
    sbuf_puts(o, "[");
    for (int i = 0; i < t->n; i++) {
        if (i) sbuf_puts(o, ",");
        sbuf_puts(o, "{");
        if (with_index) sbuf_printf(o, "\"index\":%d,", i);
        sbuf_puts(o, "\"id\":");
        sbuf_json_str(o, t->v[i].id, strlen(t->v[i].id));
        sbuf_puts(o, ",\"type\":\"function\",\"function\":{\"name\":");
        sbuf_json_str(o, t->v[i].name, strlen(t->v[i].name));
        sbuf_puts(o, ",\"arguments\":");
        sbuf_json_str(o, t->v[i].arguments, strlen(t->v[i].arguments));
        sbuf_puts(o, "}}");
    }
    sbuf_puts(o, "]");
}

static void body_head(const gen_req *g, const char *object, sbuf *o) {
    sbuf_puts(o, "{\"id\":");
    sbuf_json_str(o, g->id, strlen(g->id));
    sbuf_printf(o, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, (long long)g->created);
    sbuf_json_str(o, g->model_name, strlen(g->model_name));
}

int resp_body(gen_req *g, sbuf *o, api_error *e) {
    if (g->has_error) {
        *e = g->error;
        return e->status;
    }
    for (int32_t i = 0; i < g->n_choices; i++) {
        if (g->choices[i].finish == INFERD_FINISH_ERROR)
            return api_fail(e, 500, "engine_error", NULL, "The engine failed while generating.");
        if (g->choices[i].text.oom) return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    const oai_request *q = &g->req;
    const bool chat = q->kind == OAI_CHAT;
    body_head(g, chat ? "chat.completion" : "text_completion", o);
    sbuf_puts(o, ",\"choices\":[");
    for (int32_t i = 0; i < g->n_choices; i++) {
        gen_choice *ch = &g->choices[i];
        const oai_prompt *p = &q->prompts[i / q->n];
        if (i) sbuf_puts(o, ",");
        sbuf_printf(o, "{\"index\":%d,", (int)i);
        tool_calls tc = {0};
        if (chat && q->tools) chat_parse_tool_calls(ch->text.p ? ch->text.p : "", ch->text.n, &tc);
        if (chat) {
            size_t n = tc.n ? tc.content_end : ch->text.n;
            sbuf_puts(o, "\"message\":{\"role\":\"assistant\",\"content\":");
            if (tc.n && resp_all_space(ch->text.p, n)) sbuf_puts(o, "null");
            else sbuf_json_str(o, ch->text.p ? ch->text.p : "", n);
            if (tc.n) {
                sbuf_puts(o, ",\"tool_calls\":");
                resp_tool_calls(&tc, false, o);
            }
            sbuf_puts(o, "},\"logprobs\":");
            if (q->logprobs) resp_logprobs_chat(g, ch, 0, ch->n_tokens, o);
            else sbuf_puts(o, "null");
        } else {
            sbuf_puts(o, "\"text\":");
            if (q->echo && p->text) {
                sbuf b = {0};
                sbuf_put(&b, p->text, p->text_bytes);
                sbuf_put(&b, ch->text.p, ch->text.n);
                sbuf_json_str(o, b.p ? b.p : "", b.n);
                o->oom |= b.oom;
                sbuf_free(&b);
            } else {
                sbuf_json_str(o, ch->text.p ? ch->text.p : "", ch->text.n);
            }
            sbuf_puts(o, ",\"logprobs\":");
            if (q->logprobs) resp_logprobs_legacy(g, ch, 0, ch->n_tokens, 0, o);
            else sbuf_puts(o, "null");
        }
        sbuf_puts(o, ",\"finish_reason\":");
        const char *fr = resp_finish(ch, tc.n > 0);
        sbuf_json_str(o, fr, strlen(fr));
        sbuf_puts(o, "}");
        tool_calls_free(&tc);
    }
    sbuf_puts(o, "],\"usage\":");
    resp_usage(g, o);
    sbuf_puts(o, "}");
    if (o->oom) return api_fail(e, 500, NULL, NULL, "out of memory");
    return 200;
}
