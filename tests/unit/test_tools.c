/* test_tools.c — tool-call formats (src/server/tools.c) both ways: for every family, random
 * sentences of the grammar that forces calls (tool_grammar) scan back (tool_scan) into
 * exactly the calls written, with the right names and arguments that are JSON objects;
 * every prefix of a sentence scans as a stream that only appends (names once whole,
 * arguments growing); hand-written texts in each family's shape; the reasoning split
 * (src/server/reasoning.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "server/chat.h"
#include "server/reasoning.h"
#include "server/tools.h"
#include "test_util.h"

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static const char *TOOLS_JSON =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":6},\"unit\":{\"enum\":[\"c\",\"f\"]}},"
    "\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-99,\"maximum\":99},\"b\":{\"type\":\"boolean\"}},"
    "\"required\":[\"a\"],\"additionalProperties\":false}}}]";

/* A random sentence of g (bytes drawn among those that keep it alive; past `soft` bytes
 * the grammar's closing bytes are preferred, and it stops as soon as it may). */
static size_t sentence(gram *g, char *out, size_t cap, size_t soft) {
    gram_state s = gram_start(g);
    size_t n = 0;
    while (n + 1 < cap) {
        if (gram_must_end(g, s)) break;
        if (gram_can_end(g, s) && (n > soft || rnd() % 8 == 0)) break;
        uint8_t ok[256];
        int k = 0;
        for (int c = 1; c < 256; c++)
            if (gram_step(g, s, (uint8_t)c) != GRAM_DEAD) ok[k++] = (uint8_t)c;
        if (!k) break;
        uint8_t c = ok[rnd() % (uint64_t)k];
        if (n > soft) /* prefer what closes: quotes, brackets, tags */
            for (int j = 0; j < k; j++)
                if (strchr("\"}]<>\n", ok[j]) && ok[j]) c = ok[j];
        if (c >= 0x80 && rnd() % 4) c = ok[0]; /* mostly ASCII */
        out[n++] = (char)c;
        s = gram_step(g, s, c);
    }
    out[n] = 0;
    return n;
}

static void test_formats_round_trip(void) {
    const char *names[] = {"hermes", "qwen3-coder", "llama3", "mistral-v11", "mistral", "deepseek-v3"};
    cJSON *tools = cJSON_Parse(TOOLS_JSON);
    CHECK(tools);
    for (size_t fi = 0; fi < sizeof names / sizeof *names; fi++) {
        const tool_format *f = tool_format_by_name(names[fi]);
        CHECKF(f, "%s", names[fi]);
        if (!f) continue;
        for (int named = 0; named < 2; named++) {
            gram *g = NULL;
            api_error e;
            int rc = tool_grammar(f, tools, named ? "add" : NULL, !named, &g, &e);
            CHECKF(rc == 0 && g, "%s: %s", names[fi], rc ? e.message : "");
            if (!g) continue;
            for (int it = 0; it < 60; it++) {
                char text[4096];
                size_t n = sentence(g, text, sizeof text, 300);
                if (!gram_accepts(g, text, n)) continue; /* cut by the cap */
                tool_span sp[16];
                size_t ce;
                int k = tool_scan(f, text, n, true, sp, 16, &ce);
                CHECKF(k >= 1 && ce == 0, "%s: %d calls in '%s'", names[fi], k, text);
                for (int i = 0; i < k; i++) {
                    char *name = NULL, *args = NULL;
                    bool ok = sp[i].complete && tool_span_strings(f, text, &sp[i], &name, &args);
                    CHECKF(ok, "%s: call %d of '%s'", names[fi], i, text);
                    if (ok) {
                        CHECKF(!strcmp(name, "add") || (!named && !strcmp(name, "get_weather")), "%s: %s", names[fi],
                               name);
                        cJSON *a = cJSON_Parse(args);
                        CHECKF(cJSON_IsObject(a), "%s: args '%s'", names[fi], args);
                        if (!strcmp(name, "add") && strcmp(names[fi], "qwen3-coder"))
                            CHECKF(cJSON_IsNumber(cJSON_GetObjectItem(a, "a")), "%s: %s", names[fi], args);
                        cJSON_Delete(a);
                    }
                    free(name);
                    free(args);
                }
                /* the stream: every prefix scans to calls that only grow */
                int prev_done = 0;
                size_t prev_args = 0;
                for (size_t m = 0; m <= n; m++) {
                    int kp = tool_scan(f, text, m, false, sp, 16, &ce);
                    int done = 0;
                    for (int i = 0; i < kp; i++) done += sp[i].complete;
                    CHECKF(done >= prev_done, "%s: complete calls went back at %zu", names[fi], m);
                    if (kp > 0 && !sp[kp - 1].complete && sp[kp - 1].args_raw && kp - 1 == done) {
                        if (done == prev_done) CHECKF(sp[kp - 1].args_len >= prev_args, "%s: args shrank", names[fi]);
                        prev_args = sp[kp - 1].args_len;
                    } else {
                        prev_args = 0;
                    }
                    prev_done = done;
                }
            }
            gram_unref(g);
        }
    }
    cJSON_Delete(tools);
}

static void test_scan_shapes(void) {
    struct {
        const char *fmt, *text;
        int calls;
        const char *name, *args;
        size_t content_end;
    } cases[] = {
        {"hermes", "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>", 1, "f", "{\"x\": 1}", 6},
        {"hermes", "<tool_call>{\"arguments\":{},\"name\":\"g\"}</tool_call>\n<tool_call>{\"name\":\"h\"}</tool_call>", 2,
         "g", "{}", 0},
        {"hermes", "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 2}\"}\n</tool_call>", 1, "f", "{\"q\": 2}", 0},
        {"hermes", "no calls here", 0, NULL, NULL, 13},
        {"hermes", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": ", 0, NULL, NULL, 45}, /* cut: content */
        {"llama3", "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}", 1, "f", "{\"a\": [1, 2]}", 0},
        {"llama3", " {\"name\": \"f\", \"parameters\": {}}", 1, "f", "{}", 0},
        {"mistral", "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"z\": null}}]", 2,
         "a", "{}", 0},
        {"mistral-v11", "[TOOL_CALLS]get_x[ARGS]{\"k\": \"v\"}[TOOL_CALLS]y[ARGS]{}", 2, "get_x", "{\"k\": \"v\"}", 0},
        {"qwen3-coder", "ok <tool_call>\n<function=f>\n<parameter=n>\n5\n</parameter>\n<parameter=s>\nhi there\n"
                        "</parameter>\n</function>\n</tool_call>", 1, "f", "{\"n\":5,\"s\":\"hi there\"}", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const tool_format *f = tool_format_by_name(cases[i].fmt);
        tool_span sp[8];
        size_t ce;
        const char *t = cases[i].text;
        int k = tool_scan(f, t, strlen(t), true, sp, 8, &ce);
        CHECKF(k == cases[i].calls, "case %zu: %d calls", i, k);
        CHECKF(ce == cases[i].content_end, "case %zu: content_end %zu", i, ce);
        if (k > 0 && cases[i].name) {
            char *name = NULL, *args = NULL;
            CHECK(tool_span_strings(f, t, &sp[0], &name, &args));
            CHECKF(name && !strcmp(name, cases[i].name), "case %zu: %s", i, name ? name : "");
            CHECKF(args && !strcmp(args, cases[i].args), "case %zu: %s", i, args ? args : "");
            free(name);
            free(args);
        }
    }
    /* the shapes tried when the template's format finds nothing */
    {
        tool_calls tc;
        const char *t = "{{\"name\": \"f\", \"arguments\": {\"x\": 1}}}";
        CHECK(chat_tool_calls(tool_format_by_name("hermes"), t, strlen(t), false, &tc) == 1);
        CHECK(tc.n == 1 && !strcmp(tc.v[0].name, "f") && tc.content_end == 0);
        tool_calls_free(&tc);
        t = "```json\n{\"name\": \"g\", \"arguments\": {}}\n```";
        CHECK(chat_tool_calls(tool_format_by_name("hermes"), t, strlen(t), false, &tc) == 1);
        CHECK(tc.n == 1 && !strcmp(tc.v[0].name, "g"));
        tool_calls_free(&tc);
        t = "just text {not json}";
        CHECK(chat_tool_calls(tool_format_by_name("hermes"), t, strlen(t), false, &tc) == 0 && tc.content_end == strlen(t));
        tool_calls_free(&tc);
    }
    /* detection from real templates' text */
    CHECK(!strcmp(tool_format_name(tool_format_detect("... <tool_call> ...")), "hermes"));
    CHECK(!strcmp(tool_format_name(tool_format_detect("[TOOL_CALLS][ ...")), "mistral"));
    CHECK(!strcmp(tool_format_name(tool_format_detect("[TOOL_CALLS]name[ARGS]")), "mistral-v11"));
    CHECK(!strcmp(tool_format_name(tool_format_detect("<|python_tag|>")), "llama3"));
    CHECK(!strcmp(tool_format_name(tool_format_detect(NULL)), "hermes"));
}

static void test_reasoning_split(void) {
    reasoning_split v;
    const char *t = "<think>\nhm\n</think>\n\nAnswer";
    reasoning_split_of(1, t, strlen(t), true, &v); /* may open */
    CHECK(v.has && v.closed && v.known);
    CHECK(v.r1 - v.r0 == 4 && !memcmp(t + v.r0, "\nhm\n", 4));
    CHECK(!strcmp(t + v.c0, "Answer"));
    /* streaming: a maybe-end tag is held, content unknown until non-space follows */
    reasoning_split_of(1, t, 12, false, &v); /* "<think>\nhm\n<" */
    CHECK(v.has && !v.closed && v.safe == 11 && !v.known);
    reasoning_split_of(1, t, 21, false, &v); /* "...</think>\n\n" */
    CHECK(v.closed && !v.known);
    reasoning_split_of(1, "<thi", 4, false, &v);
    CHECK(!v.known && !v.has);
    reasoning_split_of(1, "<thx", 4, false, &v);
    CHECK(v.known && !v.has && v.c0 == 0);
    reasoning_split_of(1, "plain", 5, true, &v);
    CHECK(!v.has && v.c0 == 0);
    /* inside from the start (the prompt opened it) */
    const char *u = "thinking</think>x";
    reasoning_split_of(2, u, strlen(u), false, &v);
    CHECK(v.has && v.r0 == 0 && v.r1 == 8 && v.c0 == 16 && v.known);
    reasoning_split_of(2, "all thought", 11, true, &v);
    CHECK(v.has && !v.closed && v.r1 == 11 && v.c0 == 11);
    reasoning_split_of(0, u, strlen(u), false, &v);
    CHECK(!v.has && v.c0 == 0 && v.known);
}

TEST_MAIN(T(test_formats_round_trip), T(test_scan_shapes), T(test_reasoning_split))
