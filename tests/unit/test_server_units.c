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

#include "server/chat.c"
#include "server/config.c"
#include "server/json.c"
#include "server/metrics.c"
#include "server/openai.c"
#include "test_util.h"
#include "util/buf.c"
#include "util/utf8.c"

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

static bool json_parse_ok(const char *s, const json_opts *o) {
    json_error je;
    cJSON *v = json_parse(s, strlen(s), o, &je);
    cJSON_Delete(v);
    return v != NULL;
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
    CHECK(r.sampling.prompt_logprobs == -1); /* no echo: no prompt logprobs */
    oai_request_free(&r);
    /* echo with logprobs: the prompt's logprobs too; max_tokens 0 scores the prompt only */
    CHECK(parse(OAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true,\"logprobs\":1,\"max_tokens\":0}", &r, &e) == 0);
    CHECK(r.echo && r.sampling.logprobs == 1 && r.sampling.prompt_logprobs == 1 && r.max_tokens == 0);
    oai_request_free(&r);
    CHECK(parse(OAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", &r, &e) == 0);
    CHECK(r.echo && r.sampling.prompt_logprobs == -1);
    oai_request_free(&r);
    CHECK(parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":9,"
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
    expect_400(OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens");
    expect_400(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens");
    expect_400(OAI_COMPLETION, "{}", "prompt");
    /* body-level errors carry no param */
    expect_400(OAI_CHAT, "{\"messages\":", "");
    expect_400(OAI_CHAT, "[]", "");
    expect_400(OAI_CHAT, "{\"a\":\"\xff\"}", "");
}

/* ---- request hardening: exact integers, strict JSON, OpenAI's validation ---------- */

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

/* A 400 whose param and code are the given ones (code NULL: any). */
static void expect_400c(oai_kind k, const char *body, size_t n, const char *param, const char *code) {
    oai_request r;
    api_error e = {0};
    int rc = oai_parse(&r, k, body, n, &LIM, &e);
    CHECKF(rc != 0 && e.status == 400 && !strcmp(e.param, param) && (!code || (e.code && !strcmp(e.code, code))),
           "%.160s -> rc %d, %d param '%s' code %s (%s)", body, rc, e.status, e.param, e.code ? e.code : "null",
           e.message);
    oai_request_free(&r);
}

static void expect_ok(oai_kind k, const char *body) {
    oai_request r;
    api_error e = {0};
    int rc = parse(k, body, &r, &e);
    CHECKF(rc == 0, "%s -> %d %s (%s)", body, e.status, e.param, e.message);
    oai_request_free(&r);
}

/* seed of a chat request with "seed": lit; returns the parse status */
static int seed_of(const char *lit, uint64_t *seed, api_error *e) {
    char body[256];
    snprintf(body, sizeof body, "{" MSG ",\"seed\":%s}", lit);
    oai_request r;
    int rc = parse(OAI_CHAT, body, &r, e);
    *seed = rc == 0 && r.sampling.has_seed ? r.sampling.seed : 0;
    oai_request_free(&r);
    return rc;
}

static void test_parse_integers(void) {
    uint64_t seed;
    api_error e = {0};
    /* int64 range, exactly: the documented maximum rounds to 2^63 as a double */
    CHECK(seed_of("9223372036854775807", &seed, &e) == 0 && seed == (uint64_t)INT64_MAX);
    CHECK(seed_of("-9223372036854775808", &seed, &e) == 0 && seed == (uint64_t)1 << 63);
    CHECK(seed_of("9007199254740993", &seed, &e) == 0 && seed == 9007199254740993u); /* 2^53 + 1 */
    CHECK(seed_of("-1", &seed, &e) == 0 && seed == UINT64_MAX); /* two's complement */
    CHECK(seed_of("12345678901234567e2", &seed, &e) == 0 && seed == 1234567890123456700u);
    CHECK(seed_of("9.2233720368547758e18", &seed, &e) == 0 && seed == 9223372036854775800u); /* cJSON's print of 2^63-1 */
    const char *out_of_range[] = {"9223372036854775808", "-9223372036854775809", "18446744073709551615",
                                  "18446744073709551616", "1e19", "-1e19", "1e400", "9.2233720368547759e18"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(out_of_range); i++) {
        e = (api_error){0};
        int rc = seed_of(out_of_range[i], &seed, &e);
        CHECKF(rc != 0 && e.status == 400 && !strcmp(e.param, "seed") && e.code && !strcmp(e.code, "invalid_value"),
               "seed %s -> rc %d code %s (%s)", out_of_range[i], rc, e.code ? e.code : "null", e.message);
    }
    /* integral values in any JSON number form are integers (pydantic's lax mode); a
     * fractional part, however small, is not */
    oai_request r;
    CHECK(parse(OAI_CHAT, "{" MSG ",\"max_tokens\":1.0,\"n\":2e0,\"top_k\":-0}", &r, &e) == 0);
    CHECK(r.max_tokens == 1 && r.n == 2 && r.sampling.top_k == 0);
    oai_request_free(&r);
    CHECK(parse(OAI_CHAT, "{" MSG ",\"max_tokens\":1e2,\"seed\":0.5e1}", &r, &e) == 0);
    CHECK(r.max_tokens == 100 && r.sampling.seed == 5);
    oai_request_free(&r);
    const char *B = "{" MSG ",\"max_tokens\":1.0000000000000001}"; /* == 1.0 as a double */
    expect_400c(OAI_CHAT, B, strlen(B), "max_tokens", "invalid_type");
    B = "{" MSG ",\"max_tokens\":2147483647.00000001}";
    expect_400c(OAI_CHAT, B, strlen(B), "max_tokens", "invalid_type");
    B = "{" MSG ",\"max_tokens\":2147483648}";
    expect_400c(OAI_CHAT, B, strlen(B), "max_tokens", "invalid_value");
    B = "{" MSG ",\"n\":1.5}";
    expect_400c(OAI_CHAT, B, strlen(B), "n", "invalid_type");
    B = "{" MSG ",\"seed\":1e-1}";
    expect_400c(OAI_CHAT, B, strlen(B), "seed", "invalid_type");
    B = "{" MSG ",\"logprobs\":true,\"top_logprobs\":2.000000000000000001}";
    expect_400c(OAI_CHAT, B, strlen(B), "top_logprobs", "invalid_type");
    B = "{\"prompt\":\"x\",\"logprobs\":1.00000000000000001}";
    expect_400c(OAI_COMPLETION, B, strlen(B), "logprobs", "invalid_type");
    B = "{" MSG ",\"stop_token_ids\":[1.00000000000000001]}";
    expect_400c(OAI_CHAT, B, strlen(B), "stop_token_ids", "invalid_type");
    B = "{" MSG ",\"stop_token_ids\":[4294967296]}";
    expect_400c(OAI_CHAT, B, strlen(B), "stop_token_ids", "invalid_value");
    /* token-id arrays (prompts, /detokenize) */
    const char *ids_bad[] = {"[1,2.00000000000000001]", "[18446744073709551617]", "[1e400]", "[-0.5]"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(ids_bad); i++) {
        cJSON *root = NULL;
        char body[64];
        snprintf(body, sizeof body, "{\"tokens\":%s}", ids_bad[i]);
        root = oai_parse_object(body, strlen(body), &e);
        int32_t *ids = NULL, n_ids = 0;
        e = (api_error){0};
        int rc = root ? oai_parse_ids(cJSON_GetObjectItem(root, "tokens"), "tokens", 1000, &ids, &n_ids, &e) : -1;
        CHECKF(rc != 0 && e.status == 400 && !strcmp(e.param, "tokens"), "%s -> rc %d", ids_bad[i], rc);
        free(ids);
        cJSON_Delete(root);
    }
    /* logit_bias keys are plain decimal token ids */
    const char *keys[] = {"01", "+1", " 1", "1 ", "1.0", "1e2", "-0", "", "0x1", "1\\n"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(keys); i++) {
        char body[128];
        snprintf(body, sizeof body, "{" MSG ",\"logit_bias\":{\"%s\":1}}", keys[i]);
        expect_400c(OAI_CHAT, body, strlen(body), "logit_bias", "invalid_value");
    }
    CHECK(parse(OAI_CHAT, "{" MSG ",\"logit_bias\":{\"0\":1,\"999\":-1}}", &r, &e) == 0);
    CHECK(r.n_bias == 2 && r.bias[0].id == 0 && r.bias[1].id == 999);
    oai_request_free(&r);
}

static void test_parse_strict_json(void) {
    /* duplicate keys: rejected, naming the key when it is a field inferd knows */
    const char *B = "{" MSG ",\"max_tokens\":2,\"max_tokens\":3}";
    expect_400c(OAI_CHAT, B, strlen(B), "max_tokens", "duplicate_key");
    B = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"role\":\"system\"}]}";
    expect_400c(OAI_CHAT, B, strlen(B), "messages[0].role", "duplicate_key");
    B = "{" MSG ",\"logit_bias\":{\"5\":1,\"5\":-1}}";
    expect_400c(OAI_CHAT, B, strlen(B), "logit_bias", "duplicate_key");
    B = "{" MSG ",\"zz_private_17\":1,\"zz_private_17\":2}"; /* an unknown key is not echoed */
    oai_request r;
    api_error e = {0};
    CHECK(parse(OAI_CHAT, B, &r, &e) != 0 && e.status == 400 && !strstr(e.message, "zz_private_17") &&
          !strstr(e.param, "zz_private_17"));
    oai_request_free(&r);
    /* many keys: the duplicate check is not quadratic, and still finds the late one */
    sbuf big = {0};
    sbuf_puts(&big, "{" MSG ",\"chat_template_kwargs\":{");
    for (int i = 0; i < 20000; i++) sbuf_printf(&big, "\"k%d\":%d,", i, i);
    sbuf_puts(&big, "\"k7\":0}}");
    expect_400c(OAI_CHAT, big.p, big.n, "chat_template_kwargs", "duplicate_key");
    sbuf_free(&big);

    /* NUL characters: cJSON strings end at the first NUL, so content would be cut */
    B = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\\u0000there\"}]}";
    expect_400c(OAI_CHAT, B, strlen(B), "messages[0].content", "invalid_value");
    B = "{\"prompt\":[\"a\",\"b\\u0000\"]}";
    expect_400c(OAI_COMPLETION, B, strlen(B), "prompt[1]", "invalid_value");
    B = "{\"prompt\":\"x\",\"a\\u0000b\":1}"; /* in a key */
    expect_400c(OAI_COMPLETION, B, strlen(B), "", "invalid_value");
    static const char raw_nul[] = "{\"prompt\":\"x\"}\0";
    expect_400c(OAI_COMPLETION, raw_nul, sizeof raw_nul - 1, "", "invalid_json"); /* after the value */
    static const char raw_nul2[] = "{\"prompt\":\"a\0b\"}";
    expect_400c(OAI_COMPLETION, raw_nul2, sizeof raw_nul2 - 1, "", "invalid_json"); /* raw control byte */

    /* surrogates: pairs decode, lone ones are not Unicode */
    CHECK(parse(OAI_COMPLETION, "{\"prompt\":\"\\ud83d\\ude00\\u00e9\"}", &r, &e) == 0 &&
          !strcmp(r.prompt->valuestring, "\xf0\x9f\x98\x80\xc3\xa9"));
    oai_request_free(&r);
    const char *bad_strings[] = {"\"\\ud800\"", "\"\\udc00\"", "\"\\ud800x\"", "\"\\ud800\\u0041\"",
                                 "\"\\ud800\\ud800\"", "\"\\u12\"", "\"\\x41\"", "\"tab\there\"", "\"nl\nx\""};
    for (size_t i = 0; i < IFD_ARRAY_LEN(bad_strings); i++) {
        char body[96];
        snprintf(body, sizeof body, "{\"prompt\":%s}", bad_strings[i]);
        expect_400c(OAI_COMPLETION, body, strlen(body), "", NULL);
    }
    /* numbers: RFC 8259's grammar, nothing more */
    const char *bad_numbers[] = {"01", "-01", "1.", ".5", "+1", "-", "1e", "1e+", "0x10", "NaN", "Infinity",
                                 "-Infinity", "1.5.2", "--1", "1ee2"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(bad_numbers); i++) {
        char body[96];
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"extra\":%s}", bad_numbers[i]);
        expect_400c(OAI_COMPLETION, body, strlen(body), "", "invalid_json");
    }
    /* nesting depth */
    sbuf deep = {0};
    sbuf_puts(&deep, "{\"prompt\":\"x\",\"extra\":");
    for (int i = 0; i < 200; i++) sbuf_puts(&deep, "[");
    for (int i = 0; i < 200; i++) sbuf_puts(&deep, "]");
    sbuf_puts(&deep, "}");
    expect_400c(OAI_COMPLETION, deep.p, deep.n, "", "invalid_json");
    sbuf_free(&deep);
    /* a byte-order mark is not JSON whitespace */
    B = "\xef\xbb\xbf{\"prompt\":\"x\"}";
    expect_400c(OAI_COMPLETION, B, strlen(B), "", "invalid_json");
    /* the error says where */
    B = "{\"prompt\":\"x\",\n \"n\":1,}";
    e = (api_error){0};
    CHECK(oai_parse(&r, OAI_COMPLETION, B, strlen(B), &LIM, &e) != 0);
    CHECKF(strstr(e.message, "line 2") && strstr(e.message, "column 8"), "%s", e.message);
    oai_request_free(&r);
}

static void test_parse_openai_rules(void) {
    /* roles */
    expect_ok(OAI_CHAT, "{\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"system\",\"content\":\"s\"},"
                        "{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":"
                        "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"},"
                        "{\"role\":\"function\",\"name\":\"f\",\"content\":\"r\"},{\"role\":\"assistant\",\"content\":\"a\"}]}");
    const char *B = "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}";
    expect_400c(OAI_CHAT, B, strlen(B), "messages[0].role", "invalid_value");
    B = "{\"messages\":[{\"role\":\"User\",\"content\":\"x\"}]}";
    expect_400c(OAI_CHAT, B, strlen(B), "messages[0].role", "invalid_value");
    B = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":\"r\"}]}";
    expect_400c(OAI_CHAT, B, strlen(B), "messages[1].tool_call_id", "missing_required_parameter");
    B = "{\"messages\":[{\"role\":\"function\",\"content\":\"r\"}]}";
    expect_400c(OAI_CHAT, B, strlen(B), "messages[0].name", "missing_required_parameter");
    const char *no_content[] = {"{\"role\":\"user\"}", "{\"role\":\"system\"}", "{\"role\":\"developer\"}",
                                "{\"role\":\"user\",\"content\":null}",
                                "{\"role\":\"tool\",\"tool_call_id\":\"c\"}"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(no_content); i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"messages\":[%s]}", no_content[i]);
        expect_400c(OAI_CHAT, body, strlen(body), "messages[0].content", NULL);
    }
    /* stream_options only with stream: true (null is "not given") */
    B = "{" MSG ",\"stream_options\":{\"include_usage\":true}}";
    expect_400c(OAI_CHAT, B, strlen(B), "stream_options", "invalid_value");
    B = "{" MSG ",\"stream\":false,\"stream_options\":{}}";
    expect_400c(OAI_CHAT, B, strlen(B), "stream_options", "invalid_value");
    B = "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":false}}";
    expect_400c(OAI_COMPLETION, B, strlen(B), "stream_options", "invalid_value");
    expect_ok(OAI_CHAT, "{" MSG ",\"stream_options\":null}");
    expect_ok(OAI_CHAT, "{" MSG ",\"stream\":true,\"stream_options\":{\"include_usage\":false}}");
    /* chat_template_kwargs may not override what the server puts into the context */
    const char *reserved[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
                              "raise_exception", "strftime_now", "range", "namespace", "dict"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(reserved); i++) {
        char body[160];
        snprintf(body, sizeof body, "{" MSG ",\"chat_template_kwargs\":{\"enable_thinking\":false,\"%s\":1}}",
                 reserved[i]);
        expect_400c(OAI_CHAT, body, strlen(body), "chat_template_kwargs", "invalid_value");
    }
    expect_ok(OAI_CHAT, "{" MSG ",\"chat_template_kwargs\":{\"enable_thinking\":false,\"documents\":[]}}");
}

static bool any_key(const char *k) { return k[0] != 'h'; /* "hidden..." keys are refused */ }

/* json.c directly: trees like cJSON's, literals that survive cJSON, errors with paths. */
static void test_json_parser(void) {
    json_error je;
    const char *doc = "{\"a\":[1,-2.5e3,true,false,null,\"x\\u00e9\\n\"],\"b\":{\"c\":{}},\"d\":[],\"e\":0.1}";
    cJSON *ours = json_parse(doc, strlen(doc), NULL, &je), *theirs = cJSON_Parse(doc);
    CHECK(ours && theirs && cJSON_Compare(ours, theirs, true));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(ours, "a")) == 6);
    /* the literal: kept, copied by cJSON_Duplicate (and freed by cJSON_Delete: the ASan
     * copy of this test checks for leaks) */
    const cJSON *num = cJSON_GetArrayItem(cJSON_GetObjectItem(ours, "a"), 1);
    CHECK(json_number_literal(num) && !strcmp(json_number_literal(num), "-2.5e3") && num->valuedouble == -2500);
    CHECK(json_number_literal(cJSON_GetArrayItem(cJSON_GetObjectItem(theirs, "a"), 1)) == NULL);
    cJSON *dup = cJSON_Duplicate(ours, true);
    CHECK(dup && !strcmp(json_number_literal(cJSON_GetArrayItem(cJSON_GetObjectItem(dup, "a"), 1)), "-2.5e3"));
    int64_t x = 0;
    CHECK(json_int64(cJSON_GetArrayItem(cJSON_GetObjectItem(dup, "a"), 1), &x) == JSON_INT_OK && x == -2500);
    CHECK(json_int64(cJSON_GetObjectItem(dup, "e"), &x) == JSON_INT_NOT_INTEGER);
    CHECK(json_int64(cJSON_GetObjectItem(dup, "b"), &x) == JSON_INT_NOT_INTEGER); /* not a number */
    char *printed = cJSON_PrintUnformatted(dup); /* output goes by valuedouble, as always */
    cJSON *again = printed ? json_parse(printed, strlen(printed), NULL, &je) : NULL;
    CHECK(again && cJSON_Compare(again, theirs, true));
    cJSON_Delete(again);
    free(printed);
    cJSON_Delete(dup);
    cJSON_Delete(ours);
    cJSON_Delete(theirs);

    /* trees from elsewhere: the double, without undefined casts at the int64 edges */
    cJSON *d = cJSON_CreateNumber(9223372036854775807.0); /* == 2^63 */
    CHECK(json_int64(d, &x) == JSON_INT_RANGE);
    cJSON_SetNumberValue(d, -9223372036854775808.0);
    CHECK(json_int64(d, &x) == JSON_INT_OK && x == INT64_MIN);
    cJSON_SetNumberValue(d, 1.0 / 0.0);
    CHECK(json_int64(d, &x) == JSON_INT_NOT_INTEGER);
    cJSON_SetNumberValue(d, 3.0);
    CHECK(json_int64(d, &x) == JSON_INT_OK && x == 3);
    cJSON_Delete(d);

    /* exact integer literals */
    static const struct { const char *lit; json_int_status st; int64_t v; } ints[] = {
        {"0", JSON_INT_OK, 0}, {"-0", JSON_INT_OK, 0}, {"0e99999999999999999999", JSON_INT_OK, 0},
        {"1.0", JSON_INT_OK, 1}, {"1.50e1", JSON_INT_OK, 15}, {"1500e-2", JSON_INT_OK, 15},
        {"0.000001e6", JSON_INT_OK, 1}, {"9223372036854775807", JSON_INT_OK, INT64_MAX},
        {"-9223372036854775808", JSON_INT_OK, INT64_MIN}, {"922337203685477580.7e1", JSON_INT_OK, INT64_MAX},
        {"9223372036854775808", JSON_INT_RANGE, 0}, {"-9223372036854775809", JSON_INT_RANGE, 0},
        {"10000000000000000000", JSON_INT_RANGE, 0}, {"1e19", JSON_INT_RANGE, 0},
        {"1e99999999999999999999", JSON_INT_RANGE, 0}, {"1.5", JSON_INT_NOT_INTEGER, 0},
        {"15e-1", JSON_INT_NOT_INTEGER, 0}, {"1e-99999999999999999999", JSON_INT_NOT_INTEGER, 0},
        {"1.0000000000000000000000000001", JSON_INT_NOT_INTEGER, 0},
    };
    for (size_t i = 0; i < IFD_ARRAY_LEN(ints); i++) {
        cJSON *v = json_parse(ints[i].lit, strlen(ints[i].lit), NULL, &je);
        x = -42;
        json_int_status st = v ? json_int64(v, &x) : (json_int_status)-1;
        CHECKF(st == ints[i].st && (st != JSON_INT_OK || x == ints[i].v), "%s -> %d %lld", ints[i].lit, (int)st,
               (long long)x);
        cJSON_Delete(v);
    }

    /* errors: what, where (line, column in characters), and the path as far as keys may be shown */
    const json_opts show = {.key_ok = any_key};
    const char *bad = "{\"a\":[{\"b\":1},{\"c\":\"\xc3\xa9\\u0000\"}]}";
    CHECK(!json_parse(bad, strlen(bad), &show, &je) && je.status == JSON_ERR_NUL);
    CHECKF(!strcmp(je.path, "a[1].c") && je.line == 1 && je.column == 22 && je.offset == 22, "%s %zu %zu",
           je.path, je.column, je.offset);
    CHECK(!json_parse(bad, strlen(bad), NULL, &je) && !strcmp(je.path, "")); /* no keys shown */
    bad = "{\"a\":{\"hidden\":{\"x\":1,\"x\":2}}}";
    CHECK(!json_parse(bad, strlen(bad), &show, &je) && je.status == JSON_ERR_DUPLICATE);
    CHECK(!strcmp(je.path, "a") && !je.key[0] && je.offset == 22);
    bad = "{\"k\":1,\"j\":2,\"k\":3,\"j\":4}"; /* the first duplicate in the input is reported */
    CHECK(!json_parse(bad, strlen(bad), &show, &je) && !strcmp(je.key, "k") && !strcmp(je.path, "k"));
    const json_opts shallow = {.max_depth = 3};
    CHECK(json_parse_ok("[[[]]]", &shallow));
    CHECK(!json_parse("[[[[]]]]", 8, &shallow, &je) && je.status == JSON_ERR_DEPTH && je.offset == 3);
    CHECK(json_parse_ok("{\"a\":{\"b\":{\"c\":1}}}", &shallow));
    CHECK(!json_parse("{\"a\":{\"b\":{\"c\":[]}}}", 20, &shallow, &je) && je.status == JSON_ERR_DEPTH);
    sbuf deep = {0};
    for (int i = 0; i < 5000; i++) sbuf_puts(&deep, "[");
    const json_opts huge = {.max_depth = 1 << 30}; /* capped: the parser recurses */
    CHECK(!json_parse(deep.p, deep.n, &huge, &je) && je.status == JSON_ERR_DEPTH &&
          je.offset == JSON_HARD_MAX_DEPTH);
    sbuf_free(&deep);
    CHECK(!json_parse("\"\xff\"", 3, NULL, &je) && je.status == JSON_ERR_ENCODING && je.offset == 1);
    CHECK(!json_parse("", 0, NULL, &je) && je.status == JSON_ERR_SYNTAX);
    CHECK(!json_parse(" ", 1, NULL, &je) && je.status == JSON_ERR_SYNTAX);
    CHECK(!json_parse("tru", 3, NULL, &je) && je.status == JSON_ERR_SYNTAX);
    CHECK(!json_parse("nulll", 5, NULL, &je) && je.status == JSON_ERR_SYNTAX && je.offset == 4);
    CHECK(!json_parse("\"abc", 4, NULL, &je) && je.status == JSON_ERR_SYNTAX && je.offset == 0);
    CHECK(!json_parse("\"a\\", 3, NULL, &je) && je.status == JSON_ERR_SYNTAX);
    CHECK(!json_parse("[1 2]", 5, NULL, &je) && je.offset == 3);
    CHECK(!json_parse("{\"a\" 1}", 7, NULL, &je) && je.offset == 5);
    CHECK(!json_parse("{1:2}", 5, NULL, &je) && je.offset == 1);
    CHECK(json_parse_ok(" \t\r\n{ \"a\" : [ ] , \"b\" : { } }\n ", NULL));
    CHECK(json_parse_ok("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\uD834\\uDD1E\"", NULL));
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

TEST_MAIN(T(test_json_escape), T(test_config), T(test_parse), T(test_parse_integers),
          T(test_parse_strict_json), T(test_parse_openai_rules), T(test_json_parser), T(test_error_json), T(test_tool_calls),
          T(test_metrics))
