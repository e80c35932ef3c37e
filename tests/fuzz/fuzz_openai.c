/* fuzz_openai.c — libFuzzer target for the request parser: the input as a request body
 * through json_parse (src/server/json.c) and oai_parse for both /v1/chat/completions
 * and /v1/completions with the server's default limits, then what the server does
 * next without a model (token-id prompts through oai_parse_ids, the error body through
 * api_error_json), freeing everything.
 *
 * Beyond "no crash, no leak, no UB" it checks properties and traps when one fails:
 * an accepted tree prints (cJSON) to text json_parse accepts again; an integer read
 * exactly from its literal equals the double whenever the double is exact (|x| <=
 * 2^53); an accepted request is within its limits; an error is 400 (or 500) with a
 * message, and its body is valid JSON.
 * Built by tests/fuzz/fuzz.cmake with clang only; run by tests/fuzz/run_fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/json.h"
#include "server/openai.h"

#define REQUIRE(c)                                                                     \
    do {                                                                               \
        if (!(c)) __builtin_trap();                                                    \
    } while (0)

static volatile size_t sink;

static bool any_key(const char *k) { return k[0] != 0; }

/* Every number of the tree: its exact integer agrees with the double where both are exact. */
static void check_numbers(const cJSON *v) {
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            REQUIRE(json_number_literal(v) != NULL);
            int64_t x;
            if (json_int64(v, &x) == JSON_INT_OK && x >= -(INT64_C(1) << 53) && x <= INT64_C(1) << 53)
                REQUIRE((double)x == v->valuedouble);
        }
        if (cJSON_IsString(v)) REQUIRE(v->valuestring != NULL);
        check_numbers(v->child);
    }
}

static void check_tree(const char *s, size_t n) {
    json_error je;
    const json_opts opts = {.key_ok = any_key};
    cJSON *root = json_parse(s, n, &opts, &je);
    if (!root) {
        REQUIRE(je.status != JSON_OK && je.what && je.offset <= n && je.line >= 1 && je.column >= 1);
        REQUIRE(strlen(je.path) < sizeof je.path && strlen(je.key) < sizeof je.key);
        return;
    }
    check_numbers(root);
    cJSON *copy = cJSON_Duplicate(root, true);
    char *text = cJSON_PrintUnformatted(copy ? copy : root);
    if (text) { /* cJSON writes what json_parse reads back */
        cJSON *again = json_parse(text, strlen(text), &opts, &je);
        REQUIRE(again != NULL);
        cJSON_Delete(again);
        free(text);
    }
    cJSON_Delete(copy);
    cJSON_Delete(root);
}

static void check_request(oai_kind kind, const char *s, size_t n) {
    static const oai_limits lim = {.max_n = 8, .max_top_logprobs = 20, .max_stop = 16, .max_logit_bias = 1024,
                                   .max_prompts = 64, .n_vocab = 32000, .allow_request_chat_template = true};
    oai_request r;
    api_error e = {0};
    if (oai_parse(&r, kind, s, n, &lim, &e) == 0) {
        REQUIRE(r.n >= 1 && r.n <= lim.max_n && r.n_stop <= lim.max_stop && r.n_bias <= lim.max_logit_bias);
        REQUIRE(r.top_logprobs >= 0 && r.top_logprobs <= lim.max_top_logprobs);
        /* completions may ask for 0 tokens (the prompt only: echo + logprobs), chat for 1 or more */
        REQUIRE(r.max_tokens == -1 || (r.max_tokens >= (kind == OAI_COMPLETION ? 0 : 1) && r.max_tokens <= INT32_MAX));
        for (int32_t i = 0; i < r.n_bias; i++) REQUIRE(r.bias[i].id >= 0 && r.bias[i].id < lim.n_vocab);
        for (int32_t i = 0; i < r.n_stop_ids; i++) REQUIRE(r.stop_ids[i] >= 0 && r.stop_ids[i] < lim.n_vocab);
        for (int32_t i = 0; i < r.n_stop; i++) sink += strlen(r.stop[i]);
        if (kind == OAI_CHAT) {
            REQUIRE(cJSON_IsArray(r.messages) && cJSON_GetArraySize(r.messages) > 0);
        } else if (cJSON_IsArray(r.prompt)) { /* what gen.c does with token-id prompts */
            const cJSON *first = cJSON_GetArrayItem(r.prompt, 0), *it;
            int32_t *ids, n_ids;
            api_error e2;
            if (cJSON_IsNumber(first)) {
                if (oai_parse_ids(r.prompt, "prompt", lim.n_vocab, &ids, &n_ids, &e2) == 0) {
                    for (int32_t i = 0; i < n_ids; i++) REQUIRE(ids[i] >= 0 && ids[i] < lim.n_vocab);
                    free(ids);
                }
            } else {
                cJSON_ArrayForEach(it, r.prompt) {
                    if (cJSON_IsString(it) || oai_parse_ids(it, "prompt", lim.n_vocab, &ids, &n_ids, &e2)) continue;
                    free(ids);
                }
            }
        }
    } else {
        REQUIRE((e.status == 400 || e.status == 500) && e.message[0]);
        sbuf b = {0};
        api_error_json(&b, &e);
        json_error je;
        cJSON *body = b.oom ? NULL : json_parse(b.p, b.n, NULL, &je);
        REQUIRE(b.oom || body != NULL);
        cJSON_Delete(body);
        sbuf_free(&b);
    }
    oai_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    check_tree(s, size);
    check_request(OAI_CHAT, s, size);
    check_request(OAI_COMPLETION, s, size);
    return 0;
}
