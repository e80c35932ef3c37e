/* test_server_units.c — the server's pure parts without a model or sockets: JSON
 * output and UTF-8 repair, the config table (flags, env, bounds, sizes), OpenAI
 * request validation, tool-call parsing and the streaming hold-back, the metrics
 * exposition and the error body.
 *
 * The server sources are compiled into this test directly, so it builds whether or
 * not inferd_core already contains src/server/ (their symbols then come from here and
 * the archive's copies are never pulled in). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.c"
#include "server/chat.c"
#include "server/config.c"
#include "server/metrics.c"
#include "server/openai.c"
#include "test_util.h"

static char *json_of(const char *s, size_t n) {
    sbuf b = {0};
    sbuf_json_str(&b, s, n);
    return sbuf_take(&b, NULL);
}

static void test_json_escape(void) {
    char *j = json_of("a\"b\\c\n\t\x01", 8);
    CHECKF(!strcmp(j, "\"a\\\"b\\\\c\\n\\t\\u0001\""), "%s", j);
    free(j);
    j = json_of("\xc3\xa9\xe2\x82\xac", 5); /* é€ kept */
    CHECK(!strcmp(j, "\"\xc3\xa9\xe2\x82\xac\""));
    free(j);
    j = json_of("x\xff\xe2\x82y", 5); /* invalid byte, truncated sequence -> U+FFFD each */
    CHECKF(!strcmp(j, "\"x\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdy\""), "%s", j);
    cJSON *p = cJSON_Parse(j);
    CHECK(p != NULL);
    cJSON_Delete(p);
    free(j);
    j = json_of("\xed\xa0\x80", 3); /* a UTF-16 surrogate is not UTF-8 */
    CHECK(strstr(j, "\xef\xbf\xbd") != NULL);
    free(j);
    CHECK(utf8_valid_prefix("ab\xc3\xa9", 4) == 4);
    CHECK(utf8_valid_prefix("ab\xc3", 3) == 2);
    CHECK(utf8_valid_prefix("\xc0\x80", 2) == 0); /* overlong */
    sbuf b = {0};
    sbuf_json_num(&b, -1.0 / 0.0);
    CHECK(!strcmp(sbuf_cstr(&b), "-9999"));
    sbuf_free(&b);
    char id[25];
    rand_alnum(id, 24);
    CHECK(strlen(id) == 24);
}

static void test_config(void) {
    server_config c;
    server_config_init(&c);
    char err[256];
    CHECK(c.port == 8000 && !strcmp(c.host, "127.0.0.1") && c.enable_prefix_caching);
    CHECK(server_config_set(&c, "max_num_seqs", "12", err, sizeof err) == 0 && c.max_num_seqs == 12);
    CHECK(server_config_set(&c, "--max-num-seqs", "0", err, sizeof err) != 0); /* below 1 */
    CHECK(server_config_set(&c, "port", "1.5", err, sizeof err) != 0);
    CHECK(server_config_set(&c, "kv-cache-memory", "2G", err, sizeof err) == 0 && c.kv_cache_memory == 2LL << 30);
    CHECK(server_config_set(&c, "max-body-bytes", "64KiB", err, sizeof err) == 0 && c.max_body_bytes == 65536);
    CHECK(server_config_set(&c, "max-tokens-policy", "reject", err, sizeof err) == 0 &&
          c.max_tokens_policy == MAXTOK_REJECT);
    CHECK(server_config_set(&c, "max-tokens-policy", "maybe", err, sizeof err) != 0);
    CHECK(server_config_set(&c, "nonsense", "1", err, sizeof err) != 0);
    server_config_deinit(&c);

    /* precedence: flags > environment > defaults */
    server_config_init(&c);
    setenv("INFERD_MAX_N", "3", 1);
    setenv("INFERD_PORT", "9001", 1);
    char *argv[] = {"serve", "-m", "x.gguf", "--port=9002", "--no-enable-prefix-caching", "--log-prompts",
                    "--api-key", "s3cret"};
    CHECK(server_config_load(&c, 8, argv, err, sizeof err) == 0);
    CHECK(c.max_n == 3 && c.port == 9002 && !c.enable_prefix_caching && c.log_prompts);
    CHECK(!strcmp(c.model, "x.gguf"));
    char *eff = server_config_effective_json(&c);
    cJSON *j = cJSON_Parse(eff);
    CHECK(j && !strcmp(cJSON_GetObjectItem(j, "api-key")->valuestring, "(set)")); /* redacted */
    CHECK(cJSON_GetObjectItem(j, "port")->valuedouble == 9002);
    cJSON_Delete(j);
    free(eff);
    unsetenv("INFERD_MAX_N");
    unsetenv("INFERD_PORT");
    char *bad[] = {"serve", "--bogus"};
    CHECK(server_config_load(&c, 2, bad, err, sizeof err) < 0 && strstr(err, "--bogus"));
    server_config_deinit(&c);
}

static const oai_limits LIM = {.max_n = 4, .max_top_logprobs = 20, .max_stop = 4, .max_logit_bias = 8,
                               .max_prompts = 8, .n_vocab = 1000};

static int parse(oai_kind k, const char *body, oai_request *r, api_error *e) {
    int rc = oai_parse(r, k, body, strlen(body), &LIM, e);
    return rc;
}

static void expect_400(oai_kind k, const char *body, const char *param) {
    oai_request r;
    api_error e = {0};
    int rc = parse(k, body, &r, &e);
    CHECKF(rc != 0 && e.status == 400 && !strcmp(e.param, param), "%s -> %d %s (%s)", body, e.status,
           e.param, e.message);
    oai_request_free(&r);
}

static void test_parse(void) {
    oai_request r;
    api_error e;
    CHECK(parse(OAI_CHAT,
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":5,"
                "\"temperature\":0.5,\"top_k\":-1,\"stop\":[\"a\",\"\",\"b\"],\"seed\":-3,\"n\":2,"
                "\"logprobs\":true,\"top_logprobs\":3,\"logit_bias\":{\"7\":-100},\"stream\":true,"
                "\"stream_options\":{\"include_usage\":true},\"whatever\":[1]}",
                &r, &e) == 0);
    CHECK(r.max_tokens == 5 && r.sampling.temperature == 0.5f && r.sampling.top_k == 0);
    CHECK(r.n_stop == 2 && !strcmp(r.stop[1], "b"));
    CHECK(r.sampling.has_seed && r.sampling.seed == (uint64_t)-3);
    CHECK(r.n == 2 && r.sampling.n == 2 && r.sampling.logprobs == 3);
    CHECK(r.n_bias == 1 && r.bias[0].id == 7 && r.bias[0].bias == -100.0f);
    CHECK(r.stream && r.include_usage && !strcmp(r.model, "m"));
    oai_request_free(&r);
    CHECK(parse(OAI_COMPLETION, "{\"prompt\":[[1,2],[3]],\"logprobs\":2,\"echo\":false}", &r, &e) == 0);
    CHECK(r.logprobs && r.top_logprobs == 2 && cJSON_GetArraySize(r.prompt) == 2);
    oai_request_free(&r);
    CHECK(parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":null}],\"max_completion_tokens\":9,"
                          "\"max_tokens\":3}", &r, &e) == 0);
    CHECK(r.max_tokens == 9);
    oai_request_free(&r);

    expect_400(OAI_CHAT, "{\"messages\":\"hi\"}", "messages");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":5}", "n");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"1\"}", "temperature");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", "top_p");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"1000\":1}}", "logit_bias");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
               "messages[0].content[0].type");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "tool_choice");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template\":\"x\"}", "chat_template");
    expect_400(OAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true,\"logprobs\":1}", "echo");
    expect_400(OAI_COMPLETION, "{}", "prompt");
    /* body-level errors carry no param */
    expect_400(OAI_CHAT, "{\"messages\":", "");
    expect_400(OAI_CHAT, "[]", "");
    expect_400(OAI_CHAT, "{\"a\":\"\xff\"}", "");
}

static void test_error_json(void) {
    api_error e;
    api_fail(&e, 404, "model_not_found", "model", "The model does not exist.");
    sbuf b = {0};
    api_error_json(&b, &e);
    CHECKF(!strcmp(sbuf_cstr(&b), "{\"error\":{\"message\":\"The model does not exist.\",\"type\":"
                                  "\"not_found_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}"),
           "%s", sbuf_cstr(&b));
    sbuf_free(&b);
    api_fail(&e, 500, NULL, NULL, "x");
    api_error_json(&b, &e);
    CHECK(strstr(sbuf_cstr(&b), "\"param\":null,\"code\":null"));
    sbuf_free(&b);
}

static void test_tool_calls(void) {
    tool_calls t;
    const char *h = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                    "</tool_call>\n<tool_call>{\"name\":\"time\",\"arguments\":\"{}\"}</tool_call>";
    CHECK(chat_parse_tool_calls(h, strlen(h), &t) == 2);
    CHECK(!strcmp(t.v[0].name, "get_weather") && !strcmp(t.v[0].arguments, "{\"city\":\"Paris\"}"));
    CHECK(!strcmp(t.v[1].name, "time") && !strcmp(t.v[1].arguments, "{}"));
    CHECK(t.content_end == strlen("Let me check.\n"));
    CHECK(!strncmp(t.v[0].id, "call_", 5) && strlen(t.v[0].id) == 29);
    tool_calls_free(&t);
    const char *l3 = "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
    CHECK(chat_parse_tool_calls(l3, strlen(l3), &t) == 1 && t.content_end == 0);
    CHECK(!strcmp(t.v[0].arguments, "{\"city\":\"Oslo\"}"));
    tool_calls_free(&t);
    const char *py = "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}";
    CHECK(chat_parse_tool_calls(py, strlen(py), &t) == 1);
    tool_calls_free(&t);
    const char *ms = "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]";
    CHECK(chat_parse_tool_calls(ms, strlen(ms), &t) == 2);
    tool_calls_free(&t);
    const char *fence = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```\n";
    CHECK(chat_parse_tool_calls(fence, strlen(fence), &t) == 1 && !strcmp(t.v[0].name, "get_weather"));
    tool_calls_free(&t);
    const char *code = "```python\nprint(1)\n```";
    CHECK(chat_parse_tool_calls(code, strlen(code), &t) == 0);
    CHECK(chat_tool_stream_safe("``", 2) == 0);
    CHECK(chat_tool_stream_safe("```json\n", 8) == 0);
    CHECK(chat_tool_stream_safe("```json\n{", 9) == 0);
    CHECK(chat_tool_stream_safe("```python\n", 10) == 10);
    const char *bad[] = {"just text", "<tool_call>{not json}</tool_call>", "{\"no_name\": 1}", "{broken"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(bad); i++) {
        CHECK(chat_parse_tool_calls(bad[i], strlen(bad[i]), &t) == 0);
        CHECK(t.content_end == strlen(bad[i]) && t.n == 0);
    }
    /* streaming hold-back */
    CHECK(chat_tool_stream_safe("Hello there", 11) == 11);
    CHECK(chat_tool_stream_safe("Hello <tool", 11) == 6);
    CHECK(chat_tool_stream_safe("Hello <", 7) == 6);
    CHECK(chat_tool_stream_safe("Hi <tool_call>{\"na", 18) == 3);
    CHECK(chat_tool_stream_safe("  ", 2) == 0);
    CHECK(chat_tool_stream_safe(" {\"name\"", 8) == 0);
    CHECK(chat_tool_stream_safe("<tool_c", 7) == 0);
    CHECK(chat_tool_stream_safe("<|python_t", 10) == 0);
    CHECK(chat_tool_stream_safe("a < b", 5) == 5);
}

static void test_metrics(void) {
    metrics *m = NULL;
    CHECK(metrics_create(&m) == 0);
    metrics_observe(m, HIST_TTFT, 0.003);
    metrics_observe(m, HIST_TTFT, 5000); /* beyond the last bound */
    metrics_observe_n(m, HIST_ITL, 0.02, 3);
    metrics_abort(m, ABORT_CLIENT_DISCONNECT);
    metrics_http(m, 404);
    sbuf b = {0};
    inferd_stats st = {.running = 2, .kv_blocks_total = 10, .kv_blocks_used = 4, .generated_tokens = 77};
    metrics_render(m, &st, &b);
    const char *t = sbuf_cstr(&b);
    CHECK(strstr(t, "inferd_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"));
    CHECK(strstr(t, "inferd_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
    CHECK(strstr(t, "inferd_time_to_first_token_seconds_bucket{le=\"3600\"} 1\n"));
    CHECK(strstr(t, "inferd_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
    CHECK(strstr(t, "inferd_time_to_first_token_seconds_count 2\n"));
    CHECK(strstr(t, "inferd_inter_token_latency_seconds_count 3\n"));
    CHECK(strstr(t, "inferd_aborted_total{reason=\"client_disconnect\"} 1\n"));
    CHECK(strstr(t, "inferd_aborted_total{reason=\"shutdown\"} 0\n"));
    CHECK(strstr(t, "inferd_http_responses_total{code=\"404\"} 1\n"));
    CHECK(strstr(t, "inferd_num_requests_running 2\n"));
    CHECK(strstr(t, "inferd_generation_tokens_total 77\n"));
    CHECK(strstr(t, "# TYPE inferd_kv_blocks_used gauge\n"));
    sbuf_free(&b);
    metrics_destroy(m);
}

TEST_MAIN(T(test_json_escape), T(test_config), T(test_parse), T(test_error_json), T(test_tool_calls),
          T(test_metrics))
