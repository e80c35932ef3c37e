/* response.c — non-streaming response bodies and the pieces the stream shares with
 * them (logprobs in the chat and the legacy shape, usage, tool calls). HTTP threads,
 * with the generation's mutex held. */
#include "response.h"
#include "chat.h"
#include "reasoning.h"

#include <ctype.h>
#include <string.h>

#include "model/model.h"
#include "util/hash.h"
#include "tokenizer/tokenizer.h"

bool resp_all_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return false;
    return true;
}

const char *resp_finish(const gen_req *g, const gen_choice *ch, bool tool_calls) {
    if (tool_calls && ch->finish == INFERD_FINISH_STOP) return g->req.legacy_functions ? "function_call" : "tool_calls";
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

int32_t resp_lp_tokens(const gen_req *g, const gen_choice *ch) {
    int32_t n = ch->n_tokens;
    /* the end token that stopped a choice is not content: no logprob entry for it */
    if (ch->finished && ch->finish == INFERD_FINISH_STOP && n > 0) {
        const int32_t id = ch->tokens[n - 1];
        bool stop_id = tok_is_eog(g->srv->model->tok, id);
        for (int32_t i = 0; i < g->req.n_stop_ids && !stop_id; i++) stop_id = g->req.stop_ids[i] == id;
        if (!stop_id && g->req.kind == OAI_CHAT) {
            int32_t ids[8];
            const int k = chat_stop_token_ids(g->srv->chat, ids, 8);
            for (int i = 0; i < k && !stop_id; i++) stop_id = ids[i] == id;
        }
        if (stop_id) n--;
    }
    return n;
}

void resp_logprobs_chat(const gen_req *g, const gen_choice *ch, int32_t from, int32_t to, sbuf *o) {
    to = IFD_MIN(to, resp_lp_tokens(g, ch));
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

/* The tokens a legacy logprobs object lists: with the prompt (echo), the prompt's
 * tokens first, then the choice's generated tokens [from, to). */
typedef struct lp_view {
    const gen_req *g;
    const gen_choice *ch;
    const oai_prompt *p;
    const gen_sub *sub;
    int32_t n_pr; /* prompt tokens listed (0 without the prompt) */
    int32_t from, n;
} lp_view;

static int32_t lv_id(const lp_view *v, int32_t k) {
    return k < v->n_pr ? v->p->ids[k] : v->ch->tokens[v->from + k - v->n_pr];
}

/* the logprob row of entry k (the token, then the top-N) and its width; NULL for the
 * first prompt token (no context) or logprobs the engine did not give */
static const inferd_token_logprob *lv_row(const lp_view *v, int32_t k, int32_t *w) {
    if (k < v->n_pr) {
        *w = 1 + v->sub->n_prompt_top;
        if (k == 0 || !v->sub->prompt_lp || k - 1 >= v->sub->n_prompt_lp) return NULL;
        return v->sub->prompt_lp + (size_t)(k - 1) * (size_t)*w;
    }
    *w = 1 + v->ch->n_top;
    return v->ch->lp ? v->ch->lp + (size_t)(v->from + k - v->n_pr) * (size_t)*w : NULL;
}

/* bytes a token adds to the choice's text (control tokens add none) */
static size_t text_width(const gen_req *g, int32_t id) {
    char buf[256];
    return IFD_MIN(tok_piece(g->srv->model->tok, id, false, buf, sizeof buf), sizeof buf);
}

void resp_logprobs_legacy(const gen_req *g, int32_t choice, bool with_prompt, int32_t from, int32_t to,
                          sbuf *o) {
    const oai_request *q = &g->req;
    to = IFD_MAX(from, IFD_MIN(to, resp_lp_tokens(g, &g->choices[choice])));
    lp_view v = {.g = g, .ch = &g->choices[choice], .p = &q->prompts[choice / q->n], .sub = &g->subs[choice / q->n],
                 .from = from};
    v.n_pr = with_prompt ? v.p->n_ids : 0;
    v.n = v.n_pr + (to - from);
    char buf[256];
    sbuf_puts(o, "{\"tokens\":[");
    for (int32_t k = 0; k < v.n; k++) {
        if (k) sbuf_puts(o, ",");
        size_t n = piece(g, lv_id(&v, k), buf, sizeof buf);
        sbuf_json_str(o, buf, n);
    }
    sbuf_puts(o, "],\"token_logprobs\":[");
    for (int32_t k = 0; k < v.n; k++) {
        int32_t w;
        const inferd_token_logprob *row = lv_row(&v, k, &w);
        if (k) sbuf_puts(o, ",");
        if (row) sbuf_json_num(o, row[0].logprob);
        else sbuf_puts(o, "null");
    }
    sbuf_puts(o, "],\"top_logprobs\":[");
    for (int32_t k = 0; k < v.n; k++) {
        int32_t w;
        const inferd_token_logprob *row = lv_row(&v, k, &w);
        if (k) sbuf_puts(o, ",");
        if (!row) {
            sbuf_puts(o, "null");
            continue;
        }
        sbuf_puts(o, "{");
        bool has_sampled = false;
        for (int32_t j = 1; j < w; j++) {
            if (j > 1) sbuf_puts(o, ",");
            size_t n = piece(g, row[j].id, buf, sizeof buf);
            sbuf_json_str(o, buf, n);
            sbuf_puts(o, ":");
            sbuf_json_num(o, row[j].logprob);
            has_sampled |= row[j].id == row[0].id;
        }
        if (!has_sampled && k >= v.n_pr) { /* the sampled token is always among them (as OpenAI's) */
            if (w > 1) sbuf_puts(o, ",");
            size_t n = piece(g, row[0].id, buf, sizeof buf);
            sbuf_json_str(o, buf, n);
            sbuf_puts(o, ":");
            sbuf_json_num(o, row[0].logprob);
        }
        sbuf_puts(o, "}");
    }
    /* offsets into the choice's text: the echoed prompt's tokens from 0 (their pieces:
     * with a SentencePiece vocabulary the first one carries the space the tokenizer
     * prepended), the generated tokens from the end of the echoed text */
    sbuf_puts(o, "],\"text_offset\":[");
    size_t off = 0;
    for (int32_t k = 0; k < v.n; k++) {
        if (k == v.n_pr) {
            off = q->echo && v.p->text ? v.p->text_bytes : 0;
            for (int32_t t = 0; t < from; t++) off += text_width(g, v.ch->tokens[t]);
        }
        sbuf_printf(o, k ? ",%zu" : "%zu", off);
        off += text_width(g, lv_id(&v, k));
    }
    sbuf_puts(o, "]}");
}

void resp_split(const gen_req *g, const gen_choice *ch, bool at_end, reasoning_split *v) {
    reasoning_split_of(g->req.kind == OAI_CHAT ? g->req.reasoning : OAI_REASONING_NONE, ch->text.p ? ch->text.p : "",
                       ch->text.n, at_end, v);
}

int32_t resp_reasoning_tokens(const gen_req *g, const gen_choice *ch) {
    reasoning_split v;
    resp_split(g, ch, true, &v);
    if (!v.has) return 0;
    /* the tokens that end at or before the end tag's last byte (their pieces make the
     * text; the first token past it is content) */
    const size_t end = v.closed ? v.r1 + strlen(REASONING_CLOSE) : v.r1;
    size_t off = 0;
    int32_t k = 0;
    char buf[256];
    for (; k < ch->n_tokens && off < end; k++) off += IFD_MIN(tok_piece(g->srv->model->tok, ch->tokens[k], false, buf, sizeof buf), sizeof buf);
    return k;
}

void resp_usage(const gen_req *g, sbuf *o) {
    int64_t completion = 0, cached = 0, reasoning = 0;
    for (int32_t i = 0; i < g->n_choices; i++) {
        completion += g->choices[i].completion_tokens;
        if (g->req.reasoning != OAI_REASONING_NONE) reasoning += resp_reasoning_tokens(g, &g->choices[i]);
    }
    for (int32_t i = 0; i < g->n_subs; i++) cached += g->subs[i].cached_tokens;
    sbuf_printf(o, "{\"prompt_tokens\":%d,\"completion_tokens\":%lld,\"total_tokens\":%lld",
                (int)g->prompt_tokens, (long long)completion, (long long)(g->prompt_tokens + completion));
    if (cached > 0) sbuf_printf(o, ",\"prompt_tokens_details\":{\"cached_tokens\":%lld}", (long long)cached);
    if (g->req.reasoning != OAI_REASONING_NONE)
        sbuf_printf(o, ",\"completion_tokens_details\":{\"reasoning_tokens\":%lld}", (long long)reasoning);
    sbuf_puts(o, "}");
}

int resp_tool_calls_of(const gen_req *g, const gen_choice *ch, tool_calls *tc) {
    /* calls are in the content, after any reasoning */
    reasoning_split v;
    resp_split(g, ch, true, &v);
    const char *text = ch->text.p ? ch->text.p : "";
    const int n = chat_tool_calls(chat_tool_format(g->srv ? g->srv->chat : NULL), text + v.c0, ch->text.n - v.c0,
                                  g->req.tool_mode != OAI_TOOLS_AUTO, tc);
    tc->content_end += v.c0;
    /* the ids a stream already gave out */
    for (int i = 0; i < n && i < ch->tc_sent && ch->tc_id; i++) memcpy(tc->v[i].id, ch->tc_id[i], sizeof tc->v[i].id);
    return n;
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

void resp_fingerprint(const gen_req *g, sbuf *o) {
    /* the model's weights and this build's engine: a hash of the model's name and the
     * server's start (clients compare it to tell deployments apart) */
    const char *name = g->srv->names[0];
    uint64_t h = ifd_hash_bytes((uint64_t)g->srv->created, name, strlen(name));
    sbuf_printf(o, ",\"system_fingerprint\":\"fp_%012llx\"", (unsigned long long)(h & 0xFFFFFFFFFFFFull));
}

static void body_head(const gen_req *g, const char *object, sbuf *o) {
    sbuf_puts(o, "{\"id\":");
    sbuf_json_str(o, g->id, strlen(g->id));
    sbuf_printf(o, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, (long long)g->created);
    sbuf_json_str(o, g->model_name, strlen(g->model_name));
    resp_fingerprint(g, o);
}

int resp_body(gen_req *g, sbuf *o, api_error *e) {
    if (g->has_error) {
        *e = g->error;
        return e->status;
    }
    for (int32_t i = 0; i < g->n_choices; i++) {
        if (g->choices[i].finish == INFERD_FINISH_ERROR) return gen_engine_error(g, e);
        if (g->choices[i].text.oom) return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    for (int32_t i = 0; i < g->n_subs; i++)
        if (g->subs[i].prompt_lp_oom) return api_fail(e, 500, NULL, NULL, "out of memory");
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
        if (chat && q->tools) resp_tool_calls_of(g, ch, &tc);
        if (chat) {
            reasoning_split rs;
            resp_split(g, ch, true, &rs);
            const char *text = ch->text.p ? ch->text.p : "";
            size_t n = tc.n ? tc.content_end : ch->text.n;
            sbuf_puts(o, "\"message\":{\"role\":\"assistant\",\"content\":");
            if (tc.n && resp_all_space(text + rs.c0, n - rs.c0)) sbuf_puts(o, "null");
            else sbuf_json_str(o, text + rs.c0, n - rs.c0);
            if (rs.has) { /* the thinking, under both names clients read */
                sbuf_puts(o, ",\"reasoning_content\":");
                sbuf_json_str(o, text + rs.r0, rs.r1 - rs.r0);
                sbuf_puts(o, ",\"reasoning\":");
                sbuf_json_str(o, text + rs.r0, rs.r1 - rs.r0);
            }
            if (tc.n && q->legacy_functions) { /* the deprecated shape: the first call */
                sbuf_puts(o, ",\"function_call\":{\"name\":");
                sbuf_json_str(o, tc.v[0].name, strlen(tc.v[0].name));
                sbuf_puts(o, ",\"arguments\":");
                sbuf_json_str(o, tc.v[0].arguments, strlen(tc.v[0].arguments));
                sbuf_puts(o, "}");
            } else if (tc.n) {
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
            if (q->logprobs) resp_logprobs_legacy(g, i, q->echo, 0, ch->n_tokens, o);
            else sbuf_puts(o, "null");
        }
        sbuf_puts(o, ",\"finish_reason\":");
        const char *fr = resp_finish(g, ch, tc.n > 0);
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
