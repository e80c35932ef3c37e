/* test_grammar.c — the grammar engine (src/grammar/): the IR and its compile checks,
 * GBNF, regular expressions and JSON Schema front ends on accept / reject cases, the
 * matcher's transitions against an independent stack simulation on random byte strings,
 * and the fast mask against the brute-force mask (every token fed through the grammar)
 * on random reachable states of real vocabularies: the Shakespeare model's 1,024-token
 * SentencePiece vocabulary, GPT-2's and DeepSeek's byte-level BPE vocabularies from
 * ../shared/tokenizer-tests, and Qwen2.5's 151,936-token one when the default model
 * has been fetched (models-cache/; INFERD_QWEN_GGUF overrides). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar_test_util.h"
#include "test_util.h"

#ifndef INFERD_SHARED_DIR
#define INFERD_SHARED_DIR "../shared"
#endif

static gram *gbnf(const char *src) {
    gram *g = NULL;
    char err[512] = "";
    if (gram_from_gbnf(src, strlen(src), &g, err, sizeof err)) {
        fprintf(stderr, "  gbnf failed: %s\n", err);
        return NULL;
    }
    return g;
}

static bool acc(gram *g, const char *s) { return gram_accepts(g, s, strlen(s)); }
static bool pre(gram *g, const char *s) { return gram_prefix_ok(g, s, strlen(s)); }

static void test_gbnf_basic(void) {
    gram *g = gbnf("root ::= \"ab\" [c-e]+ (\"x\" | \"yz\")? num\nnum ::= [0-9]{2,3}\n");
    CHECK(g);
    if (!g) return;
    CHECK(acc(g, "abc12"));
    CHECK(acc(g, "abcde123"));
    CHECK(acc(g, "abdx12"));
    CHECK(acc(g, "abeyz999"));
    CHECK(!acc(g, "ab12"));
    CHECK(!acc(g, "abc1"));
    CHECK(!acc(g, "abc1234"));
    CHECK(!acc(g, "abcy12"));
    CHECK(pre(g, "abcy"));
    CHECK(!pre(g, "abcq"));
    CHECK(pre(g, ""));
    CHECK(!acc(g, ""));
    gram_unref(g);

    /* comments, multi-line alternatives, escapes, any char, nested groups */
    g = gbnf("# a comment\nroot ::= ( item \",\" )* item # trailing\nitem ::= \"\\x41\" | \"\\u00e9\" |\n  [^\\n,]\n");
    CHECK(g);
    if (!g) return;
    CHECK(acc(g, "A"));
    CHECK(acc(g, "A,\xc3\xa9,z"));
    CHECK(acc(g, "\xe2\x82\xac")); /* any code point but newline / comma */
    CHECK(!acc(g, "\n"));
    CHECK(!acc(g, "A,"));
    CHECK(!acc(g, "\xc3"));         /* a cut UTF-8 sequence is not a sentence */
    CHECK(pre(g, "\xc3"));
    CHECK(!pre(g, "\xc0\x80"));     /* overlong: never valid UTF-8 */
    CHECK(!pre(g, "\xed\xa0\x80")); /* a surrogate */
    gram_unref(g);

    g = gbnf("root ::= .{3}");
    CHECK(g && acc(g, "a\xf0\x9f\x98\x80\n") && !acc(g, "ab") && !acc(g, "abcd"));
    gram_unref(g);
}

static void test_gbnf_errors(void) {
    const char *bad[] = {
        "root ::= foo",                  /* undefined rule */
        "root ::= root \"a\" | \"b\"",   /* left recursion */
        "root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", /* left recursion through a nullable */
        "root ::= \"abc",                /* unterminated literal */
        "root ::= [abc",                 /* unterminated class */
        "root ::= (\"a\"",               /* unclosed group */
        "root ::= \"a\"{5,2}",           /* bad bounds */
        "root ::= \"a\"{2000}",          /* too many */
        "root = \"a\"",                  /* no ::= */
        "other ::= \"a\"",               /* no root */
        "root ::= \"a\"\nroot ::= \"b\"", /* defined twice */
        "root ::= \"\\q\"",              /* bad escape */
        "root ::= [z-a]",                /* range out of order */
        "root ::= \"\xff\"",             /* invalid UTF-8 in the grammar */
        "root ::= \"\\uD800\"",          /* a surrogate escape */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gram *g = NULL;
        char err[256] = "";
        int rc = gram_from_gbnf(bad[i], strlen(bad[i]), &g, err, sizeof err);
        CHECKF(rc != 0 && !g && err[0], "case %zu (%s) should fail", i, bad[i]);
        gram_unref(g);
    }
    /* right recursion and nullable rules are fine */
    gram *g = gbnf("root ::= \"a\" root | \"\"\n");
    CHECK(g && acc(g, "") && acc(g, "aaaa") && !acc(g, "ab"));
    gram_unref(g);
    /* an empty body is the empty sentence (the fuzzer's "\x01root ::=" found a NULL + 0
     * there, now also a seed of run_fuzz.sh's grammar corpus) */
    g = gbnf("root ::=");
    CHECK(g && acc(g, "") && !acc(g, "a") && !pre(g, "a"));
    gram_unref(g);
    g = gbnf("root ::= a\na ::=\n");
    CHECK(g && acc(g, "") && !acc(g, "a"));
    gram_unref(g);
}

static gram *regex(const char *re) {
    gram *g = NULL;
    char err[512] = "";
    if (gram_from_regex(re, strlen(re), &g, err, sizeof err)) {
        fprintf(stderr, "  regex %s failed: %s\n", re, err);
        return NULL;
    }
    return g;
}

/* The state count stays bounded on right recursion (tail calls): 10,000 repetitions. */
static void test_right_recursion_bounded(void) {
    gram *g = gbnf("root ::= item*\nitem ::= \"ab\" | \"c\"\n");
    CHECK(g);
    if (!g) return;
    gram_state s = gram_start(g);
    for (int i = 0; i < 10000 && s >= 0; i++) s = gram_feed(g, s, i % 3 ? "ab" : "c", i % 3 ? 2 : 1);
    CHECK(s >= 0 && gram_can_end(g, s));
    gram_stats st;
    gram_get_stats(g, &st);
    CHECKF(st.states < 10 && st.nodes < 50, "states %lld nodes %lld", (long long)st.states, (long long)st.nodes);
    gram_unref(g);
    /* nested unbounded repetitions are one: 30 levels of + cost what one does */
    char re[64] = "x";
    for (int i = 0; i < 30; i++) strcat(re, "+");
    strcat(re, "y");
    g = regex(re);
    CHECK(g);
    if (!g) return;
    s = gram_start(g);
    for (int i = 0; i < 1000 && s >= 0; i++) s = gram_step(g, s, 'x');
    CHECK(s >= 0 && !gram_can_end(g, s) && gram_can_end(g, gram_step(g, s, 'y')));
    gram_get_stats(g, &st);
    CHECKF(st.states < 10 && st.nodes < 50, "nested +: states %lld nodes %lld", (long long)st.states, (long long)st.nodes);
    CHECK(acc(g, "xxy") && !acc(g, "y") && !acc(g, "xx"));
    gram_unref(g);
}


/* A regex inside a JSON string: the grammar "\"" regex "\"" built by hand. */
static gram *regex_json(const char *re) {
    gram_builder *b = gb_new();
    int32_t r = -1, root;
    char err[512] = "";
    gram *g = NULL;
    if (gram_regex(b, re, strlen(re), GRAM_RE_JSON_STRING, &r, err, sizeof err)) {
        fprintf(stderr, "  regex %s failed: %s\n", re, err);
    } else {
        gsym q = gb_byte(b, '"');
        gsym v[3] = {q, r, q};
        root = gb_seq(b, v, 3);
        if (gram_compile(b, root, &g, err, sizeof err)) fprintf(stderr, "  compile: %s\n", err);
    }
    gb_free(b);
    return g;
}

static void test_regex(void) {
    struct {
        const char *re;
        const char *yes[4];
        const char *no[4];
    } cases[] = {
        {"^[a-z]+@[a-z]+\\.(com|org)$", {"ab@cd.com", "x@y.org"}, {"ab@cd.net", "@cd.com", "AB@cd.com"}},
        {"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234", "555-12345"}},
        {"(?:ab)*c?", {"", "abab", "ababc", "c"}, {"aba", "cc"}},
        {"[^\\s]+", {"abc", "\xc3\xa9t\xc3\xa9"}, {"a b", "", "a\tb"}},
        {"a.c", {"abc", "a\xe2\x82\xac" "c"}, {"a\nc", "ac"}},
        {"x{2,}y{0,1}", {"xx", "xxxxy"}, {"x", "xxyy"}},
        {"\\u00e9|\\x41|\\n", {"\xc3\xa9", "A", "\n"}, {"e"}},
        {"[\\w-]+", {"a_b-9"}, {"a b", "a.b"}},
        {"(?<yr>\\d\\d)a{3}?", {"12aaa"}, {"12aa"}},
        {"\\D\\W\\S", {"a!x"}, {"1!x", "aax", "a! "}},
        {"a{x}", {"a{x}"}, {"a"}}, /* not a quantifier: literal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gram *g = regex(cases[i].re);
        CHECKF(g, "%s", cases[i].re);
        if (!g) continue;
        for (int k = 0; k < 4 && cases[i].yes[k]; k++) CHECKF(acc(g, cases[i].yes[k]), "%s ~ '%s'", cases[i].re, cases[i].yes[k]);
        for (int k = 0; k < 4 && cases[i].no[k]; k++) CHECKF(!acc(g, cases[i].no[k]), "%s !~ '%s'", cases[i].re, cases[i].no[k]);
        gram_unref(g);
    }
    const char *bad[] = {"(a", "a)", "[a", "*a", "a{3,1}", "(?=a)", "(?!a)", "(?<=a)b", "\\1", "\\bx", "a^b",
                         "a$b", "\\cA", "a{2000}", "\\q", "[z-a]", "\\u{110000}", "a{,3}", "{2}", "[]", "x[]+y"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gram *g = NULL;
        char err[256] = "";
        CHECKF(gram_from_regex(bad[i], strlen(bad[i]), &g, err, sizeof err) != 0 && !g && err[0], "%s", bad[i]);
        gram_unref(g);
    }
    /* inside a JSON string: escapes where JSON needs them */
    gram *g = regex_json("[^a]{1,3}");
    CHECK(g);
    if (g) {
        CHECK(acc(g, "\"b\""));
        CHECK(acc(g, "\"\\\"\""));        /* a quote, written \" */
        CHECK(acc(g, "\"\\\\\""));        /* a backslash, written \\ */
        CHECK(acc(g, "\"\\n\\u0001\\u001F\"")); /* controls as escapes, either hex case */
        CHECK(acc(g, "\"/\\/\""));        /* "/" raw or escaped */
        CHECK(!acc(g, "\"\"\""));         /* a raw quote ends the string */
        CHECK(!acc(g, "\"\n\""));         /* a raw newline is not JSON */
        CHECK(!acc(g, "\"\\a\""));
        CHECK(!acc(g, "\"a\""));
        gram_unref(g);
    }
    g = regex_json("\\\\d\"");
    CHECK(g && acc(g, "\"\\\\d\\\"\"") && !acc(g, "\"\\d\"\""));
    gram_unref(g);
}

/* ---- vocabularies ---------------------------------------------------------------------- */
static tokenizer *load_tok(const char *path) { return gt_load_tok(path); }
static gram_vocab *vocab_of(tokenizer *t) { return gt_vocab_of(t); }
static int check_masks(gram *g, const gram_vocab *v, int n_states, const char *label) {
    return gt_check_masks(g, v, n_states, label, NULL);
}

static const char *JSONISH =
    "root ::= obj\n"
    "obj ::= \"{\" ws ( pair ( \",\" ws pair )* )? \"}\"\n"
    "pair ::= str ws \":\" ws val ws\n"
    "val ::= str | num | obj | arr | \"true\" | \"false\" | \"null\"\n"
    "arr ::= \"[\" ws ( val ws ( \",\" ws val ws )* )? \"]\"\n"
    "str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
    "num ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )?\n"
    "ws ::= [ \\t\\n]{0,8}\n";

static void test_mask_shakespeare(void) {
    tokenizer *t = load_tok(INFERD_SHARED_DIR "/models/shakespeare-target.gguf");
    CHECK(t);
    if (!t) return;
    gram_vocab *v = vocab_of(t);
    CHECK(v);
    const char *grammars[] = {
        JSONISH,
        "root ::= ( [A-Z][a-z]* \" \" )+ \".\"\n",
        "root ::= \"ROMEO:\" [^\\n]{1,40} \"\\n\"\n",
    };
    for (size_t i = 0; i < sizeof grammars / sizeof *grammars && v; i++) {
        gram *g = gbnf(grammars[i]);
        CHECK(g);
        if (!g) continue;
        char lab[32];
        snprintf(lab, sizeof lab, "shakespeare g%zu", i);
        CHECKF(check_masks(g, v, 1000, lab) == 0, "%s", lab);
        gram_unref(g);
    }
    gram_vocab_free(v);
    tok_destroy(t);
}

static void test_mask_bpe(void) {
    const char *files[] = {INFERD_SHARED_DIR "/tokenizer-tests/ggml-vocab-gpt-2.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        tokenizer *t = load_tok(files[f]);
        CHECKF(t, "%s", files[f]);
        if (!t) continue;
        gram_vocab *v = vocab_of(t);
        gram *g = gbnf(JSONISH);
        CHECK(v && g);
        if (v && g) CHECKF(check_masks(g, v, 60, "gpt-2 json") == 0, "gpt-2");
        gram_unref(g);
        gram_vocab_free(v);
        tok_destroy(t);
    }
}

/* ---- the oracle on the grammars the benchmark times (bench/grammar_bench.c) -------------- */
/* The three benchmark grammars, n_states random reachable states each. */
static void oracle_suite(gram_vocab *v, int n_states, const char *vname) {
    for (int i = 0; i < 3; i++) {
        gram *g = NULL;
        char err[256] = "";
        CHECKF(gt_bench_grammar(i, &g, err, sizeof err) == 0 && g, "%s: %s", GT_BENCH_NAMES[i], err);
        if (!g) continue;
        char lab[64];
        snprintf(lab, sizeof lab, "%s %s", vname, GT_BENCH_NAMES[i]);
        CHECKF(check_masks(g, v, n_states, lab) == 0, "%s", lab);
        gram_unref(g);
    }
}

static void test_oracle_shakespeare(void) {
    tokenizer *t = load_tok(INFERD_SHARED_DIR "/models/shakespeare-target.gguf");
    CHECK(t);
    if (!t) return;
    gram_vocab *v = vocab_of(t);
    if (v) oracle_suite(v, 1000, "shakespeare");
    gram_vocab_free(v);
    tok_destroy(t);
}

/* Qwen2.5's 151,936-token byte-level BPE vocabulary, from the default model (either size:
 * they share it). Required in CI (scripts/test.sh fetches the 0.5B model). */
static void test_oracle_qwen(void) {
    const char *env = getenv("INFERD_QWEN_GGUF");
    const char *cands[] = {env, INFERD_SOURCE_DIR "/models-cache/qwen0.5b.gguf", INFERD_SOURCE_DIR "/models-cache/default.gguf"};
    const char *path = NULL;
    for (size_t i = 0; i < 3 && !path; i++) {
        FILE *f = cands[i] ? fopen(cands[i], "rb") : NULL;
        if (f) {
            fclose(f);
            path = cands[i];
        }
    }
    const char *ci = getenv("CI");
    if (!path) {
        fprintf(stderr, "  no Qwen vocabulary (scripts/fetch_default_model.sh, or INFERD_QWEN_GGUF)\n");
        CHECKF(!(ci && !strcmp(ci, "true")), "the Qwen vocabulary is required in CI");
        return;
    }
    tokenizer *t = load_tok(path);
    CHECK(t);
    if (!t) return;
    CHECK(tok_n_vocab(t) > 150000);
    gram_vocab *v = vocab_of(t);
    const char *ns = getenv("INFERD_ORACLE_STATES");
    if (v) oracle_suite(v, ns ? atoi(ns) : 1000, "qwen");
    gram_vocab_free(v);
    tok_destroy(t);
}

TEST_MAIN(T(test_gbnf_basic), T(test_gbnf_errors), T(test_regex), T(test_right_recursion_bounded), T(test_mask_shakespeare),
          T(test_mask_bpe), T(test_oracle_shakespeare), T(test_oracle_qwen))
