/* grammar_test_util.h — what the grammar tests and the grammar benchmark share: a real
 * vocabulary as grammars see it (tokenizer from a GGUF, pieces and end tokens), the
 * fast-mask-against-brute-force walk over random reachable states, and the three
 * grammars the benchmark times (a nested JSON schema, a GBNF expression language, a
 * Hermes tool call). Header-only (static); include it from one test or bench file. */
#ifndef INFERD_TESTS_GRAMMAR_TEST_UTIL_H
#define INFERD_TESTS_GRAMMAR_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

static uint64_t gt_rs = 0x9E3779B97F4A7C15ull;
static inline uint64_t gt_rnd(void) {
    gt_rs ^= gt_rs << 13;
    gt_rs ^= gt_rs >> 7;
    gt_rs ^= gt_rs << 17;
    return gt_rs;
}

static size_t gt_piece(void *ctx, int32_t id, char *buf, size_t cap) { return tok_piece(ctx, id, false, buf, cap); }
static bool gt_eog(void *ctx, int32_t id) { return tok_is_eog(ctx, id); }

/* The tokenizer of a GGUF file (a vocab-only one will do); NULL with a message. */
static inline tokenizer *gt_load_tok(const char *path) {
    gguf_file f;
    char err[256];
    if (gguf_open(&f, path, err, sizeof err)) {
        fprintf(stderr, "  %s: %s\n", path, err);
        return NULL;
    }
    tokenizer *t = NULL;
    if (tok_create(&t, &f, err, sizeof err)) fprintf(stderr, "  %s: %s\n", path, err);
    gguf_close(&f);
    return t;
}

static inline gram_vocab *gt_vocab_of(tokenizer *t) { return gram_vocab_new(tok_n_vocab(t), gt_piece, gt_eog, t); }

/* Walk n_states random reachable states of g (random allowed tokens from the fast mask,
 * restarting at ends; a state that may end is left with probability 1/20 so texts get
 * finished), comparing the fast mask with the brute force at each. Returns the
 * mismatching states; *ends (when not NULL) counts finished texts. */
static inline int gt_check_masks(gram *g, const gram_vocab *v, int n_states, const char *label, int *ends) {
    const int32_t W = gram_mask_words(v), nv = gram_vocab_n(v);
    uint32_t *ref = malloc(sizeof *ref * (size_t)W), *fast = malloc(sizeof *fast * (size_t)W);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)nv);
    int bad = 0, dummy = 0;
    if (!ends) ends = &dummy;
    gram_state s = gram_start(g);
    for (int k = 0; k < n_states; k++) {
        const uint32_t *m = gram_mask(g, v, s);
        if (!m) {
            fprintf(stderr, "  %s: no mask at state %d\n", label, s);
            bad++;
            break;
        }
        memcpy(fast, m, sizeof *fast * (size_t)W);
        if (!gram_mask_bruteforce(g, v, s, ref)) {
            fprintf(stderr, "  %s: the brute force gave up at state %d\n", label, s);
            bad++;
            break;
        }
        if (memcmp(ref, fast, sizeof *fast * (size_t)W)) {
            bad++;
            for (int32_t id = 0; id < nv; id++) {
                bool a = ref[id >> 5] >> (id & 31) & 1, b = fast[id >> 5] >> (id & 31) & 1;
                if (a != b) {
                    size_t n;
                    const char *p = gram_vocab_piece(v, id, &n);
                    fprintf(stderr, "  %s: state %d token %d '%.*s': ref %d fast %d\n", label, s, id, (int)n, p, a, b);
                    break;
                }
            }
        }
        int32_t na = 0;
        for (int32_t id = 0; id < nv; id++)
            if (fast[id >> 5] >> (id & 31) & 1 && !gram_vocab_is_eog(v, id)) allowed[na++] = id;
        gram_state t = GRAM_DEAD;
        if (na && !(gram_can_end(g, s) && gt_rnd() % 20 == 0)) {
            int32_t pick = allowed[gt_rnd() % (uint64_t)na];
            t = gram_advance_token(g, v, s, pick);
            if (t == GRAM_DEAD) {
                fprintf(stderr, "  %s: allowed token %d leads nowhere\n", label, pick);
                bad++;
            }
        } else if (!na && !gram_can_end(g, s)) {
            fprintf(stderr, "  %s: a live state with no token allowed\n", label);
            bad++;
        }
        if (t == GRAM_DEAD || gram_must_end(g, t)) {
            *ends += gram_can_end(g, t == GRAM_DEAD ? s : t);
            t = gram_start(g);
        }
        s = t;
    }
    free(ref);
    free(fast);
    free(allowed);
    return bad;
}

/* ---- the benchmark's grammars ------------------------------------------------------------ */
static const char *GT_NESTED_SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":100000},"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"red\",\"green\",\"blue\"]},\"maxItems\":5},"
    "\"address\":{\"$ref\":\"#/$defs/address\"},"
    "\"orders\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-\\\\d{4}$\"},"
    "\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},"
    "\"price\":{\"type\":\"number\"},"
    "\"note\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"sku\",\"qty\",\"price\"],\"additionalProperties\":false}},"
    "\"active\":{\"type\":\"boolean\"}},"
    "\"required\":[\"id\",\"name\",\"address\",\"orders\",\"active\"],\"additionalProperties\":false,"
    "\"$defs\":{\"address\":{\"type\":\"object\",\"properties\":{"
    "\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^\\\\d{5}$\"}},"
    "\"required\":[\"street\",\"city\"],\"additionalProperties\":false}}}";

/* A small expression language (statements, expressions, identifiers, numbers). */
static const char *GT_EXPR_GBNF =
    "root ::= stmt ( \"\\n\" stmt ){0,20}\n"
    "stmt ::= ident ws \"=\" ws expr \";\" | \"print(\" expr \");\" | \"if (\" expr \") {\" ws stmt ws \"}\"\n"
    "expr ::= term ( ws [-+*/] ws term )*\n"
    "term ::= ident | num | \"(\" expr \")\" | ident \"(\" ( expr ( \", \" expr )* )? \")\"\n"
    "ident ::= [a-zA-Z_] [a-zA-Z0-9_]{0,15}\n"
    "num ::= [0-9]{1,9} ( \".\" [0-9]{1,6} )?\n"
    "ws ::= \" \"?\n";

static const char *GT_TOOL_ARGS =
    "{\"type\":\"object\",\"properties\":{"
    "\"location\":{\"type\":\"string\",\"description\":\"City and country\"},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14}},"
    "\"required\":[\"location\",\"unit\"],\"additionalProperties\":false}";

/* Hermes / Qwen2.5: <tool_call>\n{"name": "get_weather", "arguments": ARGS}\n</tool_call> */
static inline int gt_tool_call_grammar(gram **out, char *err, size_t eb) {
    gram_builder *b = gb_new();
    int32_t args;
    int rc = gram_json_schema(b, GT_TOOL_ARGS, strlen(GT_TOOL_ARGS), &args, err, eb);
    if (rc == 0) {
        static const char pre[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", post[] = "}\n</tool_call>";
        gsym v[3] = {gb_literal(b, pre, sizeof pre - 1), args, gb_literal(b, post, sizeof post - 1)};
        rc = gram_compile(b, gb_seq(b, v, 3), out, err, eb);
    }
    gb_free(b);
    return rc;
}

/* The three: 0 the JSON schema, 1 the GBNF grammar, 2 the tool call. */
static inline int gt_bench_grammar(int which, gram **out, char *err, size_t eb) {
    if (which == 0) return gram_from_json_schema(GT_NESTED_SCHEMA, strlen(GT_NESTED_SCHEMA), out, err, eb);
    if (which == 1) return gram_from_gbnf(GT_EXPR_GBNF, strlen(GT_EXPR_GBNF), out, err, eb);
    return gt_tool_call_grammar(out, err, eb);
}
static const char *const GT_BENCH_NAMES[3] = {"json-schema", "gbnf", "tool-call"};

#endif
