/* test_rsp.c — the Responses API's pure parts without a model or sockets: the store
 * (bounds, LRU, sliding TTL, threads), the translation of Responses requests into chat
 * bodies (rsp_parse), and the rendering of a finished or streaming generation
 * (rsp_body, rsp_sse_fill) on a hand-made gen_req, including tool calls, which the
 * tiny test model never emits on its own. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/json.h"
#include "server/rsp.h"
#include "test_util.h"
#include "util/status.h"

/* ---- the store --------------------------------------------------------------------------- */

static char *dup(const char *s) { return strdup(s); }

static int put(rsp_store *st, const char *id, const char *items, double now) {
    return rsp_store_put(st, id, dup(items), strlen(items), dup("{}"), 2, now);
}

static bool has(rsp_store *st, const char *id, double now) {
    return rsp_store_get(st, id, now, NULL, NULL, NULL, NULL) == 0;
}

static void test_store_basic(void) {
    rsp_store *st;
    CHECK(rsp_store_create(&st, 3, 1 << 20, 100) == 0);
    CHECK(put(st, "a", "[1]", 0) == 0 && put(st, "b", "[2]", 1) == 0 &&
          put(st, "c", "[3]", 2) == 0);
    char *items, *obj;
    size_t ni, no;
    CHECK(rsp_store_get(st, "b", 3, &items, &ni, &obj, &no) == 0);
    CHECK(!strcmp(items, "[2]") && ni == 3 && !strcmp(obj, "{}") && no == 2);
    free(items);
    free(obj);
    CHECK(has(st, "a", 4)); /* a and b used since c: c is the least recently used */
    CHECK(put(st, "d", "[4]", 5) == 0);
    CHECK(rsp_store_count(st) == 3);
    CHECK(!has(st, "c", 6) && has(st, "a", 6) && has(st, "b", 6) && has(st, "d", 6));
    CHECK(put(st, "a", "[9]", 7) == 0); /* replaced, not doubled */
    CHECK(rsp_store_count(st) == 3);
    CHECK(rsp_store_get(st, "a", 8, &items, NULL, NULL, NULL) == 0 && !strcmp(items, "[9]"));
    free(items);
    CHECK(rsp_store_delete(st, "a", 9) == 0 && rsp_store_delete(st, "a", 9) == IFD_ERR_NOT_FOUND);
    CHECK(rsp_store_get(st, "zz", 9, &items, NULL, NULL, NULL) == IFD_ERR_NOT_FOUND &&
          items == NULL);
    char longid[RSP_ID_BYTES + 8];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    CHECK(put(st, longid, "[]", 10) == IFD_ERR_INVALID);
    rsp_store_destroy(st);
    rsp_store_destroy(NULL);
}

static void test_store_ttl_and_bytes(void) {
    rsp_store *st;
    CHECK(rsp_store_create(&st, 100, 1 << 20, 10) == 0);
    CHECK(put(st, "a", "[]", 0) == 0 && put(st, "b", "[]", 0) == 0);
    CHECK(has(st, "a", 9));     /* used at 9: kept until 19 */
    CHECK(!has(st, "b", 10.5)); /* unused since 0 */
    CHECK(has(st, "a", 19));
    CHECK(!has(st, "a", 29.5));
    CHECK(rsp_store_count(st) == 0);
    rsp_store_destroy(st);

    CHECK(rsp_store_create(&st, 100, 20, 0) == 0); /* 20 bytes: items + "{}" each */
    CHECK(put(st, "a", "[1,2,3]", 0) == 0 && put(st, "b", "[1,2,3]", 1) == 0); /* 9 + 9 */
    CHECK(put(st, "c", "[1,2,3]", 2) == 0);                                    /* a goes */
    CHECK(!has(st, "a", 3) && has(st, "b", 3) && has(st, "c", 3));
    CHECK(put(st, "big", "[1,2,3,4,5,6,7,8,9,10,11]", 4) == IFD_ERR_LIMIT);
    CHECK(has(st, "b", 1e9)); /* ttl 0: never expires */
    rsp_store_destroy(st);

    CHECK(rsp_store_create(&st, 0, 1 << 20, 10) == 0); /* storing off */
    CHECK(put(st, "a", "[]", 0) == IFD_ERR_UNSUPPORTED && !has(st, "a", 0));
    rsp_store_destroy(st);
}

static void *hammer(void *arg) {
    rsp_store *st = arg;
    char id[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(id, sizeof id, "t%p-%d", (void *)&id, i % 50);
        put(st, id, "[\"x\"]", i);
        char *items = NULL;
        if (rsp_store_get(st, id, i, &items, NULL, NULL, NULL) == 0) free(items);
        if (i % 7 == 0) rsp_store_delete(st, id, i);
    }
    return NULL;
}

static void test_store_threads(void) {
    rsp_store *st;
    CHECK(rsp_store_create(&st, 64, 1 << 20, 0) == 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, hammer, st);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    CHECK(rsp_store_count(st) <= 64);
    rsp_store_destroy(st);
}

/* ---- the request ------------------------------------------------------------------------ */

/* Parse body; on success return the chat body as a tree (caller frees). */
static cJSON *translate(rsp_store *st, const char *body, rsp_ctx **x, api_error *e) {
    sbuf chat = {0};
    rsp_ctx *ctx = NULL;
    if (rsp_parse(st, body, strlen(body), 0, &ctx, &chat, e)) {
        sbuf_free(&chat);
        return NULL;
    }
    cJSON *t = cJSON_Parse(sbuf_cstr(&chat));
    sbuf_free(&chat);
    if (x)
        *x = ctx;
    else
        rsp_ctx_destroy(ctx);
    return t;
}

static const char *jstr(const cJSON *o, const char *path) {
    /* "a.b.0.c" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *k = strtok(buf, "."); k && v; k = strtok(NULL, "."))
        v = (*k >= '0' && *k <= '9') ? cJSON_GetArrayItem(v, atoi(k))
                                     : cJSON_GetObjectItemCaseSensitive(v, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jeq(const cJSON *o, const char *path, const char *want) {
    const char *s = jstr(o, path);
    if (!s || strcmp(s, want)) {
        fprintf(stderr, "  %s = %s, want %s\n", path, s ? s : "(none)", want);
        return false;
    }
    return true;
}

static void test_translate(void) {
    api_error e;
    cJSON *c = translate(
        NULL,
        "{\"model\":\"m\",\"input\":\"hi\",\"instructions\":\"sys\",\"max_output_tokens\":"
        "2147483647,"
        "\"seed\":9223372036854775807,\"temperature\":0.5,\"stream\":true,\"store\":false,"
        "\"reasoning\":{\"effort\":\"low\"},\"metadata\":{\"a\":\"b\"}}",
        NULL, &e);
    CHECK(c != NULL);
    CHECK(jeq(c, "model", "m") && jeq(c, "messages.0.role", "system") &&
          jeq(c, "messages.0.content", "sys"));
    CHECK(jeq(c, "messages.1.role", "user") && jeq(c, "messages.1.content", "hi"));
    CHECK(jeq(c, "reasoning_effort", "low"));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(c, "stream")));
    CHECK(!cJSON_GetObjectItem(c, "metadata") && !cJSON_GetObjectItem(c, "store") &&
          !cJSON_GetObjectItem(c, "input"));
    cJSON_Delete(c);
    /* integers go through exactly (the literal, not a double) */
    sbuf chat = {0};
    rsp_ctx *x = NULL;
    const char *b =
        "{\"input\":\"hi\",\"seed\":9223372036854775807,\"max_output_tokens\":2147483647}";
    CHECK(rsp_parse(NULL, b, strlen(b), 0, &x, &chat, &e) == 0);
    CHECK(strstr(sbuf_cstr(&chat), "\"seed\":9223372036854775807") != NULL);
    CHECK(strstr(sbuf_cstr(&chat), "\"max_tokens\":2147483647") != NULL);
    CHECK(x && !x->store && !x->stream && !strncmp(x->id, "resp_", 5) &&
          !strncmp(x->msg_id, "msg_", 4));
    rsp_ctx_destroy(x);
    sbuf_free(&chat);

    /* items: developer -> system, parts -> chat text parts, calls merged into the
     * assistant's message, outputs as tool messages, reasoning skipped */
    c = translate(
        NULL,
        "{\"input\":[{\"role\":\"developer\",\"content\":\"d\"},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":"
        "\"u\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs\",\"summary\":[]},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
        "\"text\":\"a\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"g\",\"arguments\":\"{\\\"x\\\":"
        "1}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"r1\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":\"input_"
        "text\",\"text\":\"r2\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"c3\",\"name\":\"h\",\"arguments\":\"\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":\"D\",\"parameters\":{"
        "\"type\":\"object\"},\"strict\":true}],"
        "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
        "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\",\"schema\":{\"type\":"
        "\"object\"},\"strict\":true}}}",
        NULL, &e);
    CHECKF(c != NULL, "%s", e.message);
    const cJSON *m = cJSON_GetObjectItem(c, "messages");
    CHECK(cJSON_GetArraySize(m) == 6);
    CHECK(jeq(c, "messages.0.role", "system") && jeq(c, "messages.0.content", "d"));
    CHECK(jeq(c, "messages.1.role", "user") && jeq(c, "messages.1.content.0.type", "text") &&
          jeq(c, "messages.1.content.0.text", "u"));
    CHECK(jeq(c, "messages.2.role", "assistant") && jeq(c, "messages.2.content.0.text", "a"));
    CHECK(jeq(c, "messages.2.tool_calls.0.id", "c1") &&
          jeq(c, "messages.2.tool_calls.0.function.name", "f") &&
          jeq(c, "messages.2.tool_calls.1.function.arguments", "{\"x\":1}"));
    CHECK(jeq(c, "messages.3.role", "tool") && jeq(c, "messages.3.tool_call_id", "c1") &&
          jeq(c, "messages.3.content", "r1"));
    CHECK(jeq(c, "messages.4.tool_call_id", "c2") && jeq(c, "messages.4.content.0.text", "r2"));
    CHECK(jeq(c, "messages.5.role", "assistant") &&
          cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(m, 5), "content")) &&
          jeq(c, "messages.5.tool_calls.0.function.name", "h"));
    CHECK(jeq(c, "tools.0.type", "function") && jeq(c, "tools.0.function.name", "f") &&
          jeq(c, "tools.0.function.description", "D") &&
          jeq(c, "tools.0.function.parameters.type", "object"));
    CHECK(jeq(c, "tool_choice.type", "function") && jeq(c, "tool_choice.function.name", "f"));
    CHECK(jeq(c, "response_format.type", "json_schema") &&
          jeq(c, "response_format.json_schema.name", "n") &&
          jeq(c, "response_format.json_schema.schema.type", "object"));
    cJSON_Delete(c);
}

static void expect_400(const char *body, const char *param, const char *code) {
    api_error e;
    rsp_ctx *x = NULL;
    sbuf chat = {0};
    int rc = rsp_parse(NULL, body, strlen(body), 0, &x, &chat, &e);
    CHECKF(rc == -1 && x == NULL, "%s", body);
    if (rc == 0) {
        rsp_ctx_destroy(x);
    } else {
        CHECKF(e.status == 400 && !strcmp(e.param, param) && e.code && !strcmp(e.code, code),
               "%s: %d %s %s (%s)", body, e.status, e.param, e.code ? e.code : "null", e.message);
    }
    sbuf_free(&chat);
}

static void test_translate_errors(void) {
    expect_400("{}", "input", "missing_required_parameter");
    expect_400("{\"input\":[]}", "input", "invalid_value");
    expect_400("{\"input\":[{\"type\":\"x\"}]}", "input[0].type", "invalid_value");
    expect_400("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\"}]}]}",
               "input[0].content[0].type", "unsupported_value");
    expect_400("{\"input\":\"x\",\"max_output_tokens\":2147483648}", "max_output_tokens",
               "invalid_value");
    expect_400("{\"input\":\"x\",\"max_output_tokens\":-1}", "max_output_tokens", "invalid_value");
    expect_400("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"strict\":1}]}",
               "tools[0].strict", "invalid_type");
    expect_400("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\","
               "\"schema\":{},\"strict\":\"y\"}}}",
               "text.format.strict", "invalid_type");
    expect_400("{\"input\":\"x\",\"metadata\":{\"k\":null}}", "metadata", "invalid_type");
    expect_400("{\"input\":\"x\",\"input\":\"y\"}", "input", "duplicate_key");
    expect_400("{\"input\":\"\\ud800\"}", "", "invalid_json");
    /* an unknown key is never echoed in an error path */
    expect_400("{\"input\":[{\"role\":\"user\",\"content\":\"x\",\"SECRET\":1,\"SECRET\":2}]}",
               "input[0]", "duplicate_key");
    /* the chat path's params, renamed */
    api_error e;
    api_fail(&e, 400, "x", "max_tokens", "m");
    rsp_chat_error(&e);
    CHECK(!strcmp(e.param, "max_output_tokens"));
    api_fail(&e, 400, "x", "messages[3].content", "m");
    rsp_chat_error(&e);
    CHECK(!strcmp(e.param, "input"));
    api_fail(&e, 400, "x", "response_format", "m");
    rsp_chat_error(&e);
    CHECK(!strcmp(e.param, "text.format"));
    CHECK(rsp_id_ok("resp_abc-1") && !rsp_id_ok("") && !rsp_id_ok("a/b") && !rsp_id_ok("a'b"));
}

static void test_previous(void) {
    rsp_store *st;
    CHECK(rsp_store_create(&st, 8, 1 << 20, 0) == 0);
    const char *prev =
        "[{\"type\":\"message\",\"role\":\"user\",\"content\":\"q1\"},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"id\":\"msg_1\",\"status\":\"completed\","
        "\"content\":[{\"type\":\"output_text\",\"text\":\"a1\",\"annotations\":[]}]}]";
    CHECK(put(st, "resp_1", prev, 0) == 0);
    api_error e;
    rsp_ctx *x = NULL;
    cJSON *c = translate(
        st, "{\"input\":\"q2\",\"previous_response_id\":\"resp_1\",\"instructions\":\"i\"}", &x,
        &e);
    CHECK(c != NULL);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c, "messages")) == 4);
    CHECK(jeq(c, "messages.0.content", "i") && jeq(c, "messages.1.content", "q1") &&
          jeq(c, "messages.2.content.0.text", "a1") && jeq(c, "messages.3.content", "q2"));
    CHECK(x && x->store == st &&
          cJSON_GetArraySize(x->items) == 3); /* the conversation, without instructions */
    rsp_ctx_destroy(x);
    cJSON_Delete(c);
    c = translate(st, "{\"input\":\"q\",\"previous_response_id\":\"resp_2\"}", NULL, &e);
    CHECK(!c && e.status == 404 && !strcmp(e.code, "previous_response_not_found") &&
          !strcmp(e.param, "previous_response_id") && e.type &&
          !strcmp(e.type, "invalid_request_error"));
    CHECK(strstr(e.message, "'resp_2'") != NULL);
    c = translate(st, "{\"input\":\"q\",\"previous_response_id\":\"<script>\"}", NULL, &e);
    CHECK(!c && e.status == 404 && !strstr(e.message, "<script>"));
    sbuf b = {0};
    api_error_json(&b, &e);
    CHECK(strstr(sbuf_cstr(&b), "\"type\":\"invalid_request_error\"") != NULL);
    sbuf_free(&b);
    rsp_store_destroy(st);
}

/* ---- the output -------------------------------------------------------------------------- */

typedef struct fake {
    gen_req g;
    gen_choice ch;
    gen_sub sub;
    cJSON *tools;
} fake;

static void fake_init(fake *f, bool tools) {
    memset(f, 0, sizeof *f);
    f->g.choices = &f->ch;
    f->g.n_choices = 1;
    f->g.subs = &f->sub;
    f->g.n_subs = 1;
    f->g.model_name = "m";
    f->g.prompt_tokens = 5;
    f->g.req.n = 1;
    if (tools) f->g.req.tools = f->tools = cJSON_Parse("[{}]");
}

static void fake_free(fake *f) {
    sbuf_free(&f->ch.text);
    cJSON_Delete(f->tools);
}

static void fake_finish(fake *f, const char *text, inferd_finish_reason why) {
    sbuf_reset(&f->ch.text);
    sbuf_puts(&f->ch.text, text);
    f->ch.finished = true;
    f->ch.finish = why;
    f->ch.completion_tokens = 7;
    f->g.all_done = true;
}

static rsp_ctx *ctx_for(const char *body) {
    api_error e;
    sbuf chat = {0};
    rsp_ctx *x = NULL;
    CHECK(rsp_parse(NULL, body, strlen(body), 0, &x, &chat, &e) == 0);
    sbuf_free(&chat);
    return x;
}

static const char *TOOL_BODY =
    "{\"input\":\"w\",\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\"}]}";
static const char *CALL_TEXT = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", "
                               "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

static void test_body(void) {
    fake f;
    fake_init(&f, false);
    rsp_ctx *x = ctx_for("{\"input\":\"hi\",\"max_output_tokens\":7,\"metadata\":{\"a\":\"b\"}}");
    fake_finish(&f, "Hello there", INFERD_FINISH_LENGTH);
    sbuf b = {0};
    api_error e;
    CHECK(rsp_body(x, &f.g, &b, &e) == 200);
    cJSON *r = cJSON_Parse(sbuf_cstr(&b));
    CHECK(r != NULL);
    CHECK(jeq(r, "object", "response") && jeq(r, "status", "incomplete") &&
          jeq(r, "incomplete_details.reason", "max_output_tokens"));
    CHECK(jeq(r, "output.0.type", "message") && jeq(r, "output.0.status", "incomplete") &&
          jeq(r, "output.0.content.0.text", "Hello there") && jeq(r, "output.0.id", x->msg_id));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "output")) == 1);
    CHECK(jeq(r, "metadata.a", "b") && jeq(r, "model", "m") && jeq(r, "id", x->id));
    const cJSON *u = cJSON_GetObjectItem(r, "usage");
    CHECK(cJSON_GetObjectItem(u, "input_tokens")->valueint == 5 &&
          cJSON_GetObjectItem(u, "output_tokens")->valueint == 7 &&
          cJSON_GetObjectItem(u, "total_tokens")->valueint == 12);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(r, "error")));
    cJSON_Delete(r);
    sbuf_free(&b);
    rsp_ctx_destroy(x);
    fake_free(&f);

    /* tool calls: a message (its text before the call) and a function_call item */
    fake_init(&f, true);
    x = ctx_for(TOOL_BODY);
    fake_finish(&f, CALL_TEXT, INFERD_FINISH_STOP);
    CHECK(rsp_body(x, &f.g, &b, &e) == 200);
    r = cJSON_Parse(sbuf_cstr(&b));
    CHECK(jeq(r, "status", "completed") &&
          cJSON_IsNull(cJSON_GetObjectItem(r, "incomplete_details")));
    CHECK(jeq(r, "output.0.type", "message") &&
          jeq(r, "output.0.content.0.text", "Let me check.\n"));
    CHECK(jeq(r, "output.1.type", "function_call") && jeq(r, "output.1.name", "get_weather") &&
          jeq(r, "output.1.arguments", "{\"city\": \"Paris\"}") &&
          jeq(r, "output.1.status", "completed"));
    CHECK(!strncmp(jstr(r, "output.1.id"), "fc_", 3) &&
          !strncmp(jstr(r, "output.1.call_id"), "call_", 5));
    CHECK(jeq(r, "tools.0.name", "get_weather") && jeq(r, "tools.0.type", "function"));
    cJSON_Delete(r);
    sbuf_free(&b);
    rsp_ctx_destroy(x);
    fake_free(&f);

    /* only whitespace before the call: no message item */
    fake_init(&f, true);
    x = ctx_for(TOOL_BODY);
    fake_finish(&f, "\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{}}</tool_call>",
                INFERD_FINISH_STOP);
    CHECK(rsp_body(x, &f.g, &b, &e) == 200);
    r = cJSON_Parse(sbuf_cstr(&b));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "output")) == 1 &&
          jeq(r, "output.0.type", "function_call"));
    cJSON_Delete(r);
    sbuf_free(&b);
    rsp_ctx_destroy(x);
    fake_free(&f);

    /* a failed generation is the HTTP error of the chat path */
    fake_init(&f, false);
    x = ctx_for("{\"input\":\"hi\"}");
    f.g.has_error = true;
    api_fail(&f.g.error, 503, "queue_timeout", NULL, "waited too long");
    fake_finish(&f, "", INFERD_FINISH_ABORT);
    CHECK(rsp_body(x, &f.g, &b, &e) == 503 && !strcmp(e.code, "queue_timeout"));
    sbuf_free(&b);
    rsp_ctx_destroy(x);
    fake_free(&f);
}

/* The types of the events in an SSE text, space-separated; checks sequence numbers,
 * that each data's type is its event's, and collects the text deltas. */
static void events_of(const char *sse, sbuf *types, sbuf *deltas, int64_t *next_seq) {
    const char *p = sse;
    while ((p = strstr(p, "event: "))) {
        const char *nl = strchr(p, '\n');
        const char *data = nl ? strstr(nl, "data: ") : NULL;
        const char *end = data ? strstr(data, "\n\n") : NULL;
        if (!end) {
            CHECK(false);
            return;
        }
        char type[96];
        snprintf(type, sizeof type, "%.*s", (int)(nl - p - 7), p + 7);
        cJSON *d = cJSON_ParseWithLength(data + 6, (size_t)(end - data - 6));
        CHECK(d && jeq(d, "type", type));
        const cJSON *seq = cJSON_GetObjectItem(d, "sequence_number");
        CHECKF(cJSON_IsNumber(seq) && seq->valueint == *next_seq, "%s", type);
        (*next_seq)++;
        if (!strcmp(type, "response.output_text.delta")) sbuf_puts(deltas, jstr(d, "delta"));
        cJSON_Delete(d);
        if (types->n) sbuf_puts(types, " ");
        sbuf_puts(types, type);
        p = end;
    }
}

static void test_stream(void) {
    fake f;
    fake_init(&f, true);
    rsp_ctx *x = ctx_for(TOOL_BODY);
    sbuf o = {0}, types = {0}, deltas = {0}, all = {0};
    int64_t seq = 0;
    /* the text arrives in pieces; the call's text must never go out as a delta (the
     * "\n" before it waits until the call is known: the third delta comes at the end) */
    const char *pieces[] = {"Let", " me check.", "\n<tool", "_call>\n{\"name\": \"get_weather\", ",
                            "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(pieces); i++) {
        sbuf_puts(&f.ch.text, pieces[i]);
        sbuf_reset(&o);
        CHECK(!rsp_sse_fill(x, &f.g, &o));
        sbuf_puts(&all, sbuf_cstr(&o));
    }
    f.ch.finished = f.g.all_done = true;
    f.ch.finish = INFERD_FINISH_STOP;
    sbuf_reset(&o);
    CHECK(rsp_sse_fill(x, &f.g, &o));
    sbuf_puts(&all, sbuf_cstr(&o));
    sbuf_reset(&o);
    CHECK(rsp_sse_fill(x, &f.g, &o) && o.n == 0); /* nothing after the end */
    CHECK(!strstr(sbuf_cstr(&all), "[DONE]"));
    events_of(sbuf_cstr(&all), &types, &deltas, &seq);
    const char *want =
        "response.created response.in_progress response.output_item.added "
        "response.content_part.added "
        "response.output_text.delta response.output_text.delta response.output_text.delta "
        "response.output_text.done "
        "response.content_part.done response.output_item.done response.output_item.added "
        "response.function_call_arguments.delta response.function_call_arguments.done "
        "response.output_item.done response.completed";
    CHECKF(!strcmp(sbuf_cstr(&types), want), "%s", sbuf_cstr(&types));
    CHECKF(!strcmp(sbuf_cstr(&deltas), "Let me check.\n"), "%s", sbuf_cstr(&deltas));
    /* the final object has the ids of the events */
    const char *last = strstr(sbuf_cstr(&all), "event: response.completed");
    cJSON *d = last ? cJSON_Parse(strstr(last, "data: ") + 6) : NULL;
    CHECK(d && jeq(d, "response.output.0.id", x->msg_id) &&
          jeq(d, "response.output.1.id", x->fc_ids[0]) &&
          jeq(d, "response.output.1.call_id", x->tc.v[0].id) && jeq(d, "response.id", x->id));
    CHECK(strstr(sbuf_cstr(&all), x->fc_ids[0]) < last); /* the same id in the item's own events */
    cJSON_Delete(d);
    rsp_ctx_destroy(x);
    fake_free(&f);

    /* no tools, nothing generated, an error: response.failed after the head */
    fake_init(&f, false);
    x = ctx_for("{\"input\":\"hi\",\"stream\":true}");
    sbuf_reset(&o);
    sbuf_reset(&types);
    seq = 0;
    f.g.has_error = true;
    api_fail(&f.g.error, 500, "engine_error", NULL, "boom");
    f.g.all_done = true;
    CHECK(rsp_sse_fill(x, &f.g, &o));
    events_of(sbuf_cstr(&o), &types, &deltas, &seq);
    CHECKF(!strcmp(sbuf_cstr(&types), "response.created response.in_progress response.failed"),
           "%s", sbuf_cstr(&types));
    CHECK(strstr(sbuf_cstr(&o), "\"error\":{\"code\":\"engine_error\",\"message\":\"boom\"}") !=
          NULL);
    rsp_ctx_destroy(x);
    fake_free(&f);
    sbuf_free(&o);
    sbuf_free(&types);
    sbuf_free(&deltas);
    sbuf_free(&all);
}

static void test_json_write(void) {
    json_error je;
    const char *src = "{\"a\":[1,2.50,-0,1e400,9223372036854775807],\"b\":\"\\u00e9\\n\",\"c\":{"
                      "\"d\":null,\"e\":true}}";
    cJSON *t = json_parse(src, strlen(src), NULL, &je);
    CHECK(t != NULL);
    sbuf o = {0};
    json_write(&o, t);
    CHECKF(!strcmp(sbuf_cstr(&o), "{\"a\":[1,2.50,-0,1e400,9223372036854775807],\"b\":"
                                  "\"\xc3\xa9\\n\",\"c\":{\"d\":null,\"e\":true}}"),
           "%s", sbuf_cstr(&o));
    cJSON_Delete(t);
    sbuf_reset(&o);
    t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "i", 42);
    cJSON_AddNumberToObject(t, "f", 0.25);
    json_write(&o, t);
    CHECKF(!strcmp(sbuf_cstr(&o), "{\"i\":42,\"f\":0.25}"), "%s", sbuf_cstr(&o));
    cJSON_Delete(t);
    sbuf_free(&o);
}

TEST_MAIN(T(test_store_basic), T(test_store_ttl_and_bytes), T(test_store_threads),
          T(test_translate), T(test_translate_errors), T(test_previous), T(test_body),
          T(test_stream), T(test_json_write))
