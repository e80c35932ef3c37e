/* rsp_out.c — a generation in the Responses shape: the response object (the
 * non-streaming body, the object inside response.created / .completed, what GET
 * /v1/responses/{id} returns) and the typed SSE events of a stream, in the order the
 * API has them:
 *
 *   response.created, response.in_progress,
 *   per output item: response.output_item.added,
 *     message:       response.content_part.added, response.output_text.delta*,
 *                    response.output_text.done, response.content_part.done
 *     function_call: response.function_call_arguments.delta,
 *                    response.function_call_arguments.done
 *   response.output_item.done; then response.completed (or .incomplete, or .failed).
 *
 * Each event is "event: TYPE" + "data: {"type":TYPE,"sequence_number":N,...}"; no
 * [DONE] follows (the API sends none). Output items: the assistant's text as one
 * message item (unless it is only whitespace before tool calls), then one
 * function_call item per tool call parsed from the text (chat_parse_tool_calls). With
 * tools, text that may still become a tool call is held back (chat_tool_stream_safe),
 * and the message item is opened only once there is text that is not whitespace, so a
 * streamed response has the same items as the same response unstreamed. Ids are fixed
 * once and written the same in every event and in the final object.
 *
 * HTTP threads, with the generation's mutex held (as response.c / sse.c). */
#include "rsp.h"

#include <string.h>

#include "json.h"
#include "response.h"

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* a request field as given, or dflt (JSON text) */
static void echo(const cJSON *req, const char *name, const char *dflt, sbuf *o) {
    const cJSON *v = field(req, name);
    if (v)
        json_write(o, v);
    else
        sbuf_puts(o, dflt);
}

/* ---- the output, fixed once the generation is done ------------------------------------ */

typedef enum rsp_status { RSP_COMPLETED, RSP_INCOMPLETE, RSP_FAILED } rsp_status;

/* Did the generation fail (the chat path answers these with an HTTP error)? */
static bool failed(const gen_req *g, api_error *e) {
    if (g->has_error) {
        *e = g->error;
        return true;
    }
    for (int32_t i = 0; i < g->n_choices; i++) {
        if (g->choices[i].finish == INFERD_FINISH_ERROR) {
            gen_engine_error(g, e);
            return true;
        }
        if (g->choices[i].text.oom) {
            api_fail(e, 500, NULL, NULL, "out of memory");
            return true;
        }
    }
    return false;
}

static rsp_status status_of(const gen_req *g) {
    inferd_finish_reason f = g->choices[0].finish;
    return f == INFERD_FINISH_STOP ? RSP_COMPLETED : RSP_INCOMPLETE;
}

/* The items of the finished generation: tool calls, the message's extent, ids. */
static int out_fix(rsp_ctx *x, const gen_req *g) {
    if (x->out_ready) return 0;
    const gen_choice *ch = &g->choices[0];
    const char *text = ch->text.p ? ch->text.p : "";
    size_t end = ch->text.n;
    reasoning_split rs; /* a thinking model's reasoning is not the message */
    resp_split(g, ch, true, &rs);
    x->msg_base = rs.c0;
    x->sent_text = IFD_MAX(x->sent_text, x->msg_base);
    if (g->req.tools && resp_tool_calls_of(g, ch, &x->tc) > 0)
        end = x->tc.content_end;
    x->has_msg = x->tc.n == 0 || !resp_all_space(text + x->msg_base, end - x->msg_base) || x->msg_open;
    x->msg_bytes = IFD_MAX(end, x->sent_text);
    if (x->tc.n) {
        x->fc_ids = calloc((size_t)x->tc.n, sizeof *x->fc_ids);
        if (!x->fc_ids) return -1;
        for (int k = 0; k < x->tc.n; k++) {
            strcpy(x->fc_ids[k], "fc_");
            rand_alnum(x->fc_ids[k] + 3, 40);
        }
    }
    x->out_ready = true;
    return 0;
}

/* ---- items ------------------------------------------------------------------------------ */

static void part_json(const char *text, size_t n, sbuf *o) {
    sbuf_puts(o, "{\"type\":\"output_text\",\"text\":");
    sbuf_json_str(o, text, n);
    sbuf_puts(o, ",\"annotations\":[]}");
}

/* The message item; text NULL: in progress, no content yet. */
static void item_message(const rsp_ctx *x, const char *text, size_t n, const char *status,
                         sbuf *o) {
    sbuf_puts(o, "{\"id\":");
    sbuf_json_str(o, x->msg_id, strlen(x->msg_id));
    sbuf_printf(o, ",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[",
                status);
    if (text) part_json(text, n, o);
    sbuf_puts(o, "]}");
}

static void item_call(const rsp_ctx *x, int k, bool done, sbuf *o) {
    const tool_call *c = &x->tc.v[k];
    sbuf_puts(o, "{\"id\":");
    sbuf_json_str(o, x->fc_ids[k], strlen(x->fc_ids[k]));
    sbuf_printf(o, ",\"type\":\"function_call\",\"status\":\"%s\",\"call_id\":",
                done ? "completed" : "in_progress");
    sbuf_json_str(o, c->id, strlen(c->id));
    sbuf_puts(o, ",\"name\":");
    sbuf_json_str(o, c->name, strlen(c->name));
    sbuf_puts(o, ",\"arguments\":");
    if (done)
        sbuf_json_str(o, c->arguments, strlen(c->arguments));
    else
        sbuf_puts(o, "\"\"");
    sbuf_puts(o, "}");
}

static const char *msg_status(const gen_req *g) {
    return status_of(g) == RSP_COMPLETED ? "completed" : "incomplete";
}

/* Every output item, done. */
static void output_items(const rsp_ctx *x, const gen_req *g, sbuf *o) {
    const gen_choice *ch = &g->choices[0];
    bool comma = false;
    if (x->has_msg) {
        item_message(x, (ch->text.p ? ch->text.p : "") + x->msg_base, x->msg_bytes - x->msg_base, msg_status(g), o);
        comma = true;
    }
    for (int k = 0; k < x->tc.n; k++) {
        if (comma) sbuf_puts(o, ",");
        item_call(x, k, true, o);
        comma = true;
    }
}

/* ---- the response object ----------------------------------------------------------------- */

static void usage_json(const gen_req *g, sbuf *o) {
    int64_t out = 0, cached = 0;
    for (int32_t i = 0; i < g->n_choices; i++) out += g->choices[i].completion_tokens;
    for (int32_t i = 0; i < g->n_subs; i++) cached += g->subs[i].cached_tokens;
    sbuf_printf(o,
                "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%lld},\"output_"
                "tokens\":%lld,"
                "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%lld}",
                (int)g->prompt_tokens, (long long)cached, (long long)out,
                (long long)(g->prompt_tokens + out));
}

/* The tools as the Responses API shows them. */
static void tools_json(const cJSON *tools, sbuf *o) {
    sbuf_puts(o, "[");
    const cJSON *t;
    bool comma = false;
    cJSON_ArrayForEach(t, tools) {
        if (comma) sbuf_puts(o, ",");
        comma = true;
        sbuf_puts(o, "{\"type\":\"function\",\"name\":");
        echo(t, "name", "null", o);
        sbuf_puts(o, ",\"description\":");
        echo(t, "description", "null", o);
        sbuf_puts(o, ",\"parameters\":");
        echo(t, "parameters", "null", o);
        sbuf_puts(o, ",\"strict\":");
        echo(t, "strict", "null", o);
        sbuf_puts(o, "}");
    }
    sbuf_puts(o, "]");
}

/* status: "in_progress" (no output, no usage yet), or the finished generation's. */
static void object_json(const rsp_ctx *x, const gen_req *g, const char *status,
                        const api_error *err, sbuf *o) {
    const cJSON *q = x->req;
    const bool done = strcmp(status, "in_progress") != 0;
    sbuf_puts(o, "{\"id\":");
    sbuf_json_str(o, x->id, strlen(x->id));
    sbuf_printf(o,
                ",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"background\":"
                "false,\"error\":",
                (long long)x->created_at, status);
    if (err) {
        const char *code = err->code            ? err->code
                           : err->status >= 500 ? "server_error"
                                                : "invalid_request";
        sbuf_puts(o, "{\"code\":");
        sbuf_json_str(o, code, strlen(code));
        sbuf_puts(o, ",\"message\":");
        sbuf_json_str(o, err->message, strlen(err->message));
        sbuf_puts(o, "}");
    } else {
        sbuf_puts(o, "null");
    }
    sbuf_puts(o, ",\"incomplete_details\":");
    if (done && !err && status_of(g) == RSP_INCOMPLETE)
        sbuf_printf(o, "{\"reason\":\"%s\"}",
                    g->choices[0].finish == INFERD_FINISH_LENGTH ? "max_output_tokens"
                                                                 : "cancelled");
    else
        sbuf_puts(o, "null");
    sbuf_puts(o, ",\"instructions\":");
    echo(q, "instructions", "null", o);
    sbuf_puts(o, ",\"max_output_tokens\":");
    echo(q, "max_output_tokens", "null", o);
    sbuf_puts(o, ",\"max_tool_calls\":");
    echo(q, "max_tool_calls", "null", o);
    sbuf_puts(o, ",\"metadata\":");
    echo(q, "metadata", "{}", o);
    sbuf_puts(o, ",\"model\":");
    sbuf_json_str(o, g->model_name, strlen(g->model_name));
    sbuf_puts(o, ",\"output\":[");
    if (done && !err) output_items(x, g, o);
    sbuf_puts(o, "],\"parallel_tool_calls\":");
    echo(q, "parallel_tool_calls", "true", o);
    sbuf_puts(o, ",\"previous_response_id\":");
    echo(q, "previous_response_id", "null", o);
    const cJSON *r = field(q, "reasoning");
    sbuf_puts(o, ",\"reasoning\":{\"effort\":");
    echo(r, "effort", "null", o);
    sbuf_puts(o, ",\"summary\":");
    echo(r, "summary", "null", o);
    sbuf_printf(o, "},\"store\":%s,\"temperature\":", x->store ? "true" : "false");
    echo(q, "temperature", "1.0", o);
    sbuf_puts(o, ",\"text\":{\"format\":");
    echo(field(q, "text"), "format", "{\"type\":\"text\"}", o);
    sbuf_puts(o, "},\"tool_choice\":");
    echo(q, "tool_choice", "\"auto\"", o);
    sbuf_puts(o, ",\"tools\":");
    tools_json(field(q, "tools"), o);
    sbuf_puts(o, ",\"top_p\":");
    echo(q, "top_p", "1.0", o);
    sbuf_puts(o, ",\"truncation\":");
    echo(q, "truncation", "\"disabled\"", o);
    sbuf_puts(o, ",\"usage\":");
    if (done && !err)
        usage_json(g, o);
    else
        sbuf_puts(o, "null");
    sbuf_puts(o, ",\"user\":");
    echo(q, "user", "null", o);
    sbuf_puts(o, "}");
}

/* The finished response into the store: its conversation (the items it was given and
 * the ones it produced) and its object. */
static void store_put(rsp_ctx *x, const gen_req *g, const sbuf *object) {
    if (!x->store || object->oom) return;
    sbuf items = {0};
    sbuf_puts(&items, "[");
    const cJSON *it;
    bool comma = false;
    cJSON_ArrayForEach(it, x->items) {
        if (comma) sbuf_puts(&items, ",");
        json_write(&items, it);
        comma = true;
    }
    if (comma && (x->has_msg || x->tc.n)) sbuf_puts(&items, ",");
    output_items(x, g, &items);
    sbuf_puts(&items, "]");
    char *obj = malloc(object->n + 1);
    if (items.oom || !obj) {
        sbuf_free(&items);
        free(obj);
        return;
    }
    memcpy(obj, object->p, object->n);
    obj[object->n] = 0;
    size_t n_items = 0;
    char *t = sbuf_take(&items, &n_items);
    rsp_store_put(x->store, x->id, t, n_items, obj, object->n, ifd_now_s()); /* best effort */
}

int rsp_body(rsp_ctx *x, gen_req *g, sbuf *o, api_error *e) {
    if (failed(g, e)) return e->status;
    if (out_fix(x, g)) return api_fail(e, 500, NULL, NULL, "out of memory");
    object_json(x, g, status_of(g) == RSP_COMPLETED ? "completed" : "incomplete", NULL, o);
    if (o->oom) return api_fail(e, 500, NULL, NULL, "out of memory");
    store_put(x, g, o);
    return 200;
}

/* ---- the stream ------------------------------------------------------------------------- */

static void ev_begin(rsp_ctx *x, const char *type, sbuf *o) {
    sbuf_printf(o, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%lld", type, type,
                (long long)x->seq++);
}

static void ev_end(sbuf *o) { sbuf_puts(o, "}\n\n"); }

/* the item_id / output_index / content_index members of a message event */
static void ev_msg_at(const rsp_ctx *x, sbuf *o) {
    sbuf_puts(o, ",\"item_id\":");
    sbuf_json_str(o, x->msg_id, strlen(x->msg_id));
    sbuf_puts(o, ",\"output_index\":0,\"content_index\":0");
}

static void ev_object(rsp_ctx *x, const gen_req *g, const char *type, const char *status,
                      const api_error *err, sbuf *o) {
    ev_begin(x, type, o);
    sbuf_puts(o, ",\"response\":");
    object_json(x, g, status, err, o);
    ev_end(o);
}

static void msg_open(rsp_ctx *x, sbuf *o) {
    ev_begin(x, "response.output_item.added", o);
    sbuf_puts(o, ",\"output_index\":0,\"item\":");
    item_message(x, NULL, 0, "in_progress", o);
    ev_end(o);
    ev_begin(x, "response.content_part.added", o);
    ev_msg_at(x, o);
    sbuf_puts(o, ",\"part\":");
    part_json("", 0, o);
    ev_end(o);
    x->msg_open = true;
}

static void msg_delta(rsp_ctx *x, const char *text, size_t n, sbuf *o) {
    ev_begin(x, "response.output_text.delta", o);
    ev_msg_at(x, o);
    sbuf_puts(o, ",\"delta\":");
    sbuf_json_str(o, text, n);
    sbuf_puts(o, ",\"logprobs\":[]");
    ev_end(o);
}

static void msg_close(rsp_ctx *x, const gen_req *g, sbuf *o) {
    const char *text = g->choices[0].text.p ? g->choices[0].text.p : "";
    ev_begin(x, "response.output_text.done", o);
    ev_msg_at(x, o);
    sbuf_puts(o, ",\"text\":");
    sbuf_json_str(o, text + x->msg_base, x->msg_bytes - x->msg_base);
    sbuf_puts(o, ",\"logprobs\":[]");
    ev_end(o);
    ev_begin(x, "response.content_part.done", o);
    ev_msg_at(x, o);
    sbuf_puts(o, ",\"part\":");
    part_json(text + x->msg_base, x->msg_bytes - x->msg_base, o);
    ev_end(o);
    ev_begin(x, "response.output_item.done", o);
    sbuf_puts(o, ",\"output_index\":0,\"item\":");
    item_message(x, text + x->msg_base, x->msg_bytes - x->msg_base, msg_status(g), o);
    ev_end(o);
}

static void call_events(rsp_ctx *x, int k, int index, sbuf *o) {
    const tool_call *c = &x->tc.v[k];
    ev_begin(x, "response.output_item.added", o);
    sbuf_printf(o, ",\"output_index\":%d,\"item\":", index);
    item_call(x, k, false, o);
    ev_end(o);
    static const char *const ARGS_EV[] = {"response.function_call_arguments.delta",
                                          "response.function_call_arguments.done"};
    for (int d = 0; d < 2; d++) {
        ev_begin(x, ARGS_EV[d], o);
        sbuf_puts(o, ",\"item_id\":");
        sbuf_json_str(o, x->fc_ids[k], strlen(x->fc_ids[k]));
        sbuf_printf(o, ",\"output_index\":%d,", index);
        if (d == 1) {
            sbuf_puts(o, "\"name\":");
            sbuf_json_str(o, c->name, strlen(c->name));
            sbuf_puts(o, ",");
        }
        sbuf_puts(o, d == 0 ? "\"delta\":" : "\"arguments\":");
        sbuf_json_str(o, c->arguments, strlen(c->arguments));
        ev_end(o);
    }
    ev_begin(x, "response.output_item.done", o);
    sbuf_printf(o, ",\"output_index\":%d,\"item\":", index);
    item_call(x, k, true, o);
    ev_end(o);
}

bool rsp_sse_fill(rsp_ctx *x, gen_req *g, sbuf *o) {
    if (x->sent_end) return true;
    api_error err;
    if (!x->sent_head) {
        ev_object(x, g, "response.created", "in_progress", NULL, o);
        ev_object(x, g, "response.in_progress", "in_progress", NULL, o);
        x->sent_head = true;
    }
    const gen_choice *ch = &g->choices[0];
    const char *text = ch->text.p ? ch->text.p : "";
    if (failed(g, &err)) {
        if (!g->all_done) return false; /* the engine still writes into this request */
        ev_object(x, g, "response.failed", "failed", &err, o);
        x->sent_end = true;
        return true;
    }
    if (!ch->finished) {
        reasoning_split rs; /* the message starts after a thinking model's reasoning */
        resp_split(g, ch, false, &rs);
        if (!rs.known) return false;
        x->msg_base = rs.c0;
        x->sent_text = IFD_MAX(x->sent_text, rs.c0);
        size_t safe = g->req.tools ? rs.c0 + chat_tool_stream_safe(text + rs.c0, ch->text.n - rs.c0) : ch->text.n;
        if (safe > x->sent_text) {
            if (!x->msg_open && (!g->req.tools || !resp_all_space(text, safe))) msg_open(x, o);
            if (x->msg_open) {
                msg_delta(x, text + x->sent_text, safe - x->sent_text, o);
                x->sent_text = safe;
            }
        }
        return false;
    }
    if (out_fix(x, g)) {
        api_fail(&err, 500, NULL, NULL, "out of memory");
        ev_object(x, g, "response.failed", "failed", &err, o);
        x->sent_end = true;
        return true;
    }
    int index = 0;
    if (x->has_msg) {
        if (!x->msg_open) msg_open(x, o);
        if (x->msg_bytes > x->sent_text)
            msg_delta(x, text + x->sent_text, x->msg_bytes - x->sent_text, o);
        x->sent_text = x->msg_bytes;
        msg_close(x, g, o);
        index = 1;
    }
    for (int k = 0; k < x->tc.n; k++) call_events(x, k, index++, o);
    const bool complete = status_of(g) == RSP_COMPLETED;
    const char *status = complete ? "completed" : "incomplete";
    ev_begin(x, complete ? "response.completed" : "response.incomplete", o);
    sbuf_puts(o, ",\"response\":");
    const size_t obj_at = o->n;
    object_json(x, g, status, NULL, o);
    if (x->store && !o->oom) {
        sbuf obj = {0};
        sbuf_put(&obj, o->p + obj_at, o->n - obj_at);
        store_put(x, g, &obj);
        sbuf_free(&obj);
    }
    ev_end(o);
    x->sent_end = true;
    return true;
}
