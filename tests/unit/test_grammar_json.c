/* test_grammar_json.c — the JSON Schema front end (src/grammar/grammar_json*.c): texts
 * accepted and rejected per keyword, an error naming the keyword (and where) for every
 * unsupported keyword and malformed schema, commas with every subset of optional
 * members, recursion through $ref, integer ranges against a brute-force decimal check
 * (every range within [-40, 40], the digit-count edges, int64's ends), number bounds
 * (every accepted candidate inside the range), the any-object / any-value rules, and
 * the fast mask against the brute-force one on the Shakespeare vocabulary.
 * tests/python/test_grammar_json.py samples a corpus and validates with jsonschema. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/common.h"
#include "model/gguf.h"
#include "grammar_test_util.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

#ifndef INFERD_SHARED_DIR
#define INFERD_SHARED_DIR "../shared"
#endif

static gram *schema(const char *src) {
    gram *g = NULL;
    char err[512] = "";
    if (gram_from_json_schema(src, strlen(src), &g, err, sizeof err)) {
        fprintf(stderr, "  schema %s failed: %s\n", src, err);
        return NULL;
    }
    return g;
}

static bool acc(gram *g, const char *s) { return gram_accepts(g, s, strlen(s)); }

/* ---- accept / reject per keyword ----------------------------------------------------------- */
typedef struct jcase {
    const char *schema;
    const char *yes[8];
    const char *no[8];
} jcase;

static const jcase CASES[] = {
    /* type */
    {"{\"type\":\"null\"}", {"null"}, {"nul", "0", "\"null\"", " null", "null "}},
    {"{\"type\":\"boolean\"}", {"true", "false"}, {"1", "null", "True"}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"a\"", "null"}, {"1", "true", "[]"}},
    {"{\"type\":\"integer\"}", {"0", "-5", "123", "9223372036854775807", "-9223372036854775808"},
     {"1.5", "01", "-0", "9223372036854775808", "-9223372036854775809", "1e3", "+1"}},
    {"{\"type\":\"number\"}", {"0", "-0.5", "1.25e10", "3E-2", "999999999999999", "1.000000000000001", "-7e+12", "5E-07"},
     {"01", ".5", "1.", "1e", "1000000000000000", "1.0000000000000001", "1e123", "NaN"}},
    /* strings */
    {"{\"type\":\"string\"}",
     {"\"\"", "\"a b\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u00e9\\uD7FF\\uE000\\uFFFF\"", "\"\xc3\xa9\xf0\x9f\x98\x80\""},
     {"\"\\ud800\"", "\"\\uDC00\"", "\"\x01\"", "\"\\x41\"", "\"a", "'a'", "\"\xc3\"", "\"\xed\xa0\x80\""}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
     {"\"ab\"", "\"abc\"", "\"\xc3\xa9\xe2\x82\xac\"", "\"\\n\\t\"", "\"\\u0041bc\""},
     {"\"a\"", "\"abcd\"", "\"\"", "\"\\u0041bcd\""}},
    {"{\"type\":\"string\",\"maxLength\":0}", {"\"\""}, {"\"a\""}},
    {"{\"type\":\"string\",\"minLength\":1030}", {0}, {"\"\"", "\"abc\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[a-c]+x$\"}", {"\"abx\"", "\"cccx\""}, {"\"x\"", "\"abdx\"", "\"abxx\""}},
    {"{\"type\":\"string\",\"pattern\":\"\\\\d{3}-q\\\"\"}", {"\"123-q\\\"\""}, {"\"123-q\"\"", "\"12-q\\\"\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-28\"", "\"1999-12-31\"", "\"2001-04-30\""},
     {"\"2024-02-30\"", "\"2024-13-01\"", "\"0000-01-01\"", "\"2024-04-31\"", "\"2024-1-01\""}},
    {"{\"type\":\"string\",\"format\":\"time\"}", {"\"23:59:59Z\"", "\"00:00:00.123+05:30\"", "\"12:30:00-08:00\""},
     {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:00\"", "\"12:00:61Z\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2020-01-01T00:00:00Z\"", "\"2020-06-30T13:14:15.5+01:00\""},
     {"\"2020-01-01 00:00:00Z\"", "\"2020-01-01T00:00:00\""}},
    {"{\"format\":\"uuid\",\"type\":\"string\"}", {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"ABCDEFAB-0000-0000-0000-000000000000\""},
     {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""}},
    {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a@b.co\"", "\"first.last@example.org\""}, {"\"ab.co\"", "\"@b.co\"", "\"a@b\""}},
    {"{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"0.0.0.0\"", "\"255.255.255.255\"", "\"192.168.1.10\""},
     {"\"256.0.0.1\"", "\"01.2.3.4\"", "\"1.2.3\"", "\"1.2.3.4.5\""}},
    /* enum, const */
    {"{\"enum\":[\"a\",1,null,[1,2],{\"k\":true},1.50]}", {"\"a\"", "1", "null", "[1,2]", "{\"k\":true}", "1.50"},
     {"\"b\"", "2", "[1, 2]", "true", "1.5"}},
    {"{\"const\":\"he said \\\"hi\\\"\\n\\u00e9\"}", {"\"he said \\\"hi\\\"\\n\xc3\xa9\""}, {"\"he said\"", "\"x\""}},
    {"{\"type\":\"string\",\"enum\":[\"a\",1,\"bcd\"],\"maxLength\":2}", {"\"a\""}, {"1", "\"bcd\""}},
    {"{\"type\":\"integer\",\"enum\":[1,2.5,3.0,\"x\"],\"minimum\":2}", {"3.0"}, {"1", "2.5", "\"x\""}},
    {"{\"allOf\":[{\"enum\":[1,2,3]},{\"enum\":[3,2.0,4]}]}", {"2", "3"}, {"1", "4", "2.0"}},
    /* objects */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
     {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}", "{ \"a\" : 1 , \"b\" : \"x\" }", "{\n\t\"a\":1\n}"},
     {"{}", "{\"b\":\"x\"}", "{\"b\":\"x\",\"a\":1}", "{\"a\":1,}", "{\"a\":1,\"c\":2}", "{\"a\":\"1\"}"}},
    {"{\"type\":\"object\",\"required\":[\"z\"]}", {"{\"z\":[1]}", "{\"z\":{\"q\":null}}"}, {"{}", "{\"y\":1}"}},
    {"{\"type\":\"object\",\"required\":[\"z\"],\"additionalProperties\":{\"type\":\"integer\"}}", {"{\"z\":5}"}, {"{\"z\":\"s\"}", "{}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{\"const\":0}}}", {"{}", "{\"b\":0}"}, {"{\"a\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"q\\\"/~\\u00e9\":{\"type\":\"null\"}},\"required\":[\"q\\\"/~\\u00e9\"]}",
     {"{\"q\\\"/~\xc3\xa9\":null}"}, {"{}"}},
    {"{\"type\":\"object\",\"additionalProperties\":false}", {"{}", "{ }"}, {"{\"a\":1}"}},
    /* arrays */
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", {"[1]", "[1,2,3]", "[ 1 , 2 ]"},
     {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]", "[,1]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
     {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]", "[\"a\",\"b\"]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"null\"},\"minItems\":2}",
     {"[\"a\",null]", "[\"a\",null,null]"}, {"[\"a\"]", "[null,null]", "[\"a\",\"b\"]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},false],\"maxItems\":5}", {"[]", "[\"a\"]"}, {"[\"a\",1]"}},
    {"{\"type\":\"array\",\"maxItems\":0}", {"[]", "[ ]"}, {"[1]"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2000,\"maxItems\":2000}", {0}, {"[]", "[1]"}},
    /* anyOf, oneOf, allOf */
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", {"1", "\"a\""}, {"\"ab\"", "null"}},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"},{\"const\":null}]}", {"1", "\"a\"", "null"}, {"1.5", "true"}},
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},"
     "\"required\":[\"kind\"]},{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"b\"]}},\"required\":[\"kind\"]}]}",
     {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\"}"}, {"{\"kind\":\"c\"}", "{\"x\":1}"}},
    {"{\"oneOf\":[{\"enum\":[1,2]},{\"enum\":[3,\"x\"]}]}", {"1", "\"x\""}, {"4"}},
    /* a tag member with distinct constants that is not required: generated always */
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1},\"a\":{\"type\":\"null\"}}},"
     "{\"type\":\"object\",\"properties\":{\"k\":{\"const\":2}}}],\"discriminator\":{\"propertyName\":\"k\"}}",
     {"{\"k\":1}", "{\"k\":2}", "{\"k\":1,\"a\":null}"}, {"{}", "{\"a\":null}", "{\"k\":3}"}},
    {"{\"allOf\":[{\"type\":\"integer\",\"minimum\":0}],\"maximum\":5}", {"0", "5"}, {"6", "-1"}},
    {"{\"allOf\":[{\"type\":[\"integer\",\"string\"]},{\"type\":[\"string\",\"null\"]}]}", {"\"x\""}, {"1", "null"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
     "\"anyOf\":[{\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":\"null\"}},\"required\":[\"b\"]}]}",
     {"{\"a\":1}", "{\"b\":null}", "{\"a\":1,\"b\":null}"}, {"{}", "{\"a\":\"x\",\"b\":null}"}},
    {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
     "{\"properties\":{\"a\":{\"minimum\":3},\"b\":{\"type\":\"string\"}}}],\"type\":\"object\"}",
     {"{\"a\":3}", "{\"a\":4,\"b\":\"x\"}"}, {"{\"a\":2}", "{\"b\":\"x\"}"}},
    {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false},"
     "{\"properties\":{\"b\":{\"type\":\"string\"}}}],\"type\":\"object\"}",
     {"{\"a\":1}", "{}"}, {"{\"b\":\"x\"}"}},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"type\":\"integer\"}", {"1"}, {"\"a\""}},
    /* $ref */
    {"{\"$defs\":{\"n\":{\"type\":\"integer\",\"minimum\":3}},\"$ref\":\"#/$defs/n\"}", {"3"}, {"2"}},
    {"{\"definitions\":{\"a~b/c d\":{\"const\":1}},\"properties\":{\"x\":{\"$ref\":\"#/definitions/a~0b~1c%20d\"}},"
     "\"type\":\"object\"}",
     {"{\"x\":1}", "{}"}, {"{\"x\":2}"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"$ref\":\"#/prefixItems/0\"}],\"items\":false,"
     "\"minItems\":2}",
     {"[true,false]"}, {"[true,1]", "[true]"}},
    {"{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":2}", {"\"ab\""}, {"\"abc\"", "1"}},
    /* true, {}, annotations */
    {"true", {"1", "{\"a\":[null,true,\"x\",-1.5e3]}", "\"s\"", "[[],{}]"}, {"", "{a:1}", "[1,]", "01"}},
    {"{\"title\":\"t\",\"description\":\"d\",\"default\":1,\"examples\":[1],\"$comment\":\"c\",\"deprecated\":false,"
     "\"readOnly\":true,\"writeOnly\":false,\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"x\"}",
     {"1", "{}"}, {""}},
    {"{\"type\":\"string\",\"nullable\":true}", {"\"a\""}, {"null"}},
    /* number bounds */
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", {"0", "1", "0.5", "0.999"}, {"1.5", "-0.1", "2", "1e0", "-0.0"}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", {"1", "9", "1.5", "9.99"},
     {"0", "10", "10.5", "-1"}},
    {"{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":-0.5}", {"-1"}, {"-2", "0", "-0.4"}},
    {"{\"type\":\"number\",\"minimum\":-3,\"maximum\":0}", {"-3", "0", "-2.5", "-0.5"}, {"-3.5", "0.5"}},
    /* whitespace between tokens: none, one space, or a newline and at most GRAM_JSON_MAX_WS
     * (16) spaces or tabs; none around the root */
    {"{\"type\":\"array\"}", {"[ ]", "[1,\n\t2]", "[ 1, 2 ]", "[\n                ]", "[\n]"},
     {"[  ]", "[\n                 ]", " []", "[] ", "[\r]", "[\t]", "[\n\n]", "[ \n]"}},
};

static void test_keywords(void) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(CASES); i++) {
        gram *g = schema(CASES[i].schema);
        CHECKF(g, "case %zu", i);
        if (!g) continue;
        for (int k = 0; k < 8 && CASES[i].yes[k]; k++)
            CHECKF(acc(g, CASES[i].yes[k]), "%s should accept %s", CASES[i].schema, CASES[i].yes[k]);
        for (int k = 0; k < 8 && CASES[i].no[k]; k++)
            CHECKF(!acc(g, CASES[i].no[k]), "%s should reject %s", CASES[i].schema, CASES[i].no[k]);
        gram_unref(g);
    }
    /* long strings: bounds above GRAM_MAX_REPEAT */
    gram *g = schema("{\"type\":\"string\",\"minLength\":1030,\"maxLength\":1040}");
    CHECK(g);
    if (g) {
        char *s = malloc(1100);
        for (int n = 1028; n <= 1042; n++) {
            s[0] = '"';
            memset(s + 1, 'x', (size_t)n);
            s[n + 1] = '"';
            s[n + 2] = 0;
            CHECKF(acc(g, s) == (n >= 1030 && n <= 1040), "length %d", n);
        }
        free(s);
        gram_unref(g);
    }
}

/* ---- errors ------------------------------------------------------------------------------ */
typedef struct ecase {
    const char *schema;
    const char *want[2]; /* substrings of the message */
} ecase;

static const ecase ERRORS[] = {
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"patternProperties\":{}}}}", {"'patternProperties'", "/properties/a"}},
    {"{\"not\":{}}", {"'not'", "at /"}},
    {"{\"if\":{},\"then\":{}}", {"'if'"}},
    {"{\"items\":{\"propertyNames\":{}}}", {"'propertyNames'", "/items"}},
    {"{\"contains\":{}}", {"'contains'"}},
    {"{\"minContains\":1}", {"'minContains'"}},
    {"{\"uniqueItems\":true}", {"'uniqueItems'"}},
    {"{\"multipleOf\":2}", {"'multipleOf'"}},
    {"{\"minProperties\":1}", {"'minProperties'"}},
    {"{\"maxProperties\":1}", {"'maxProperties'"}},
    {"{\"dependentRequired\":{}}", {"'dependentRequired'"}},
    {"{\"dependentSchemas\":{}}", {"'dependentSchemas'"}},
    {"{\"dependencies\":{}}", {"'dependencies'"}},
    {"{\"unevaluatedProperties\":false}", {"'unevaluatedProperties'"}},
    {"{\"unevaluatedItems\":false}", {"'unevaluatedItems'"}},
    {"{\"additionalItems\":false}", {"'additionalItems'"}},
    {"{\"$anchor\":\"a\"}", {"'$anchor'"}},
    {"{\"$dynamicRef\":\"#a\"}", {"'$dynamicRef'"}},
    {"{\"contentEncoding\":\"base64\"}", {"'contentEncoding'"}},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"else\":{}}]}", {"'else'", "/anyOf/1"}},
    {"{\"$defs\":{\"x\":{\"type\":\"integer\",\"exclusiveMinimum\":true}},\"$ref\":\"#/$defs/x\"}",
     {"'exclusiveMinimum'", "/$defs/x"}},
    {"{\"properties\":{\"a\":{\"$id\":\"inner\"}}}", {"'$id'", "/properties/a"}},
    {"{\"properties\":{\"a~b/c\":{\"foo\":1}}}", {"'foo'", "/properties/a~0b~1c"}},
    /* in places the grammar never uses: still refused */
    {"{\"type\":\"object\",\"additionalProperties\":{\"not\":{}}}", {"'not'", "/additionalProperties"}},
    {"{\"$defs\":{\"unused\":{\"uniqueItems\":true}},\"type\":\"null\"}", {"'uniqueItems'", "/$defs/unused"}},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#/nowhere\"},\"maxItems\":0}]}",
     {"$ref", "/anyOf/1/items"}},
    /* malformed JSON */
    {"{", {"invalid JSON"}},
    {"{\"type\":}", {"invalid JSON"}},
    {"{\"a\":1,\"a\":2}", {"duplicate"}},
    {"[1,]", {"invalid JSON"}},
    {"{\"type\":\"string\"} x", {"invalid JSON"}},
    {"{\"const\":\"\\ud800\"}", {"surrogate"}},
    {"", {"invalid JSON"}},
    {"1", {"must be an object or a boolean"}},
    /* wrong keyword types */
    {"{\"type\":\"strin\"}", {"'type'"}},
    {"{\"type\":[]}", {"'type'"}},
    {"{\"minLength\":-1}", {"'minLength'"}},
    {"{\"maxItems\":1.5}", {"'maxItems'"}},
    {"{\"required\":\"a\"}", {"'required'"}},
    {"{\"required\":[1]}", {"'required'"}},
    {"{\"properties\":[]}", {"'properties'"}},
    {"{\"properties\":{\"a\":3}}", {"'properties'"}},
    {"{\"items\":[{}]}", {"'items'", "prefixItems"}},
    {"{\"prefixItems\":{}}", {"'prefixItems'"}},
    {"{\"enum\":[]}", {"'enum'"}},
    {"{\"enum\":3}", {"'enum'"}},
    {"{\"anyOf\":[]}", {"'anyOf'"}},
    {"{\"allOf\":{}}", {"'allOf'"}},
    {"{\"oneOf\":[3]}", {"'oneOf'"}},
    {"{\"$ref\":5}", {"'$ref'"}},
    {"{\"pattern\":1}", {"'pattern'"}},
    {"{\"format\":\"uri\"}", {"format 'uri'"}},
    {"{\"minimum\":\"1\"}", {"'minimum'"}},
    {"{\"additionalProperties\":1}", {"'additionalProperties'"}},
    {"{\"nullable\":1}", {"'nullable'"}},
    {"{\"$defs\":[]}", {"'$defs'"}},
    /* references */
    {"{\"$ref\":\"#/$defs/missing\"}", {"$ref", "#/$defs/missing"}},
    {"{\"$ref\":\"http://example.com/s.json\"}", {"$ref"}},
    {"{\"$ref\":\"#anchor\"}", {"$ref"}},
    {"{\"properties\":{\"a\":{\"$ref\":\"#/properties/b\"}}}", {"$ref", "/properties/a"}},
    {"{\"$ref\":\"#\"}", {"$ref"}},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", {"$ref"}},
    {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", {"recursion"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", {"finite"}},
    /* inconsistent or unsatisfiable */
    {"{\"type\":\"object\",\"required\":[\"b\"],\"properties\":{\"a\":{}},\"additionalProperties\":false}",
     {"required", "'b'"}},
    {"{\"minItems\":3,\"maxItems\":2}", {"'minItems' > 'maxItems'"}},
    {"{\"minLength\":3,\"maxLength\":2}", {"'minLength' > 'maxLength'"}},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", {"no JSON value"}},
    {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", {"no JSON value"}},
    {"{\"type\":\"string\",\"enum\":[1,2]}", {"no JSON value"}},
    {"false", {"no JSON value"}},
    {"{\"type\":\"string\",\"pattern\":\"a+\",\"minLength\":2}", {"'pattern'", "minLength"}},
    {"{\"allOf\":[{\"pattern\":\"a+\"},{\"pattern\":\"b+\"}]}", {"'pattern'"}},
    {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", {"'pattern'", "regex"}},
    {"{\"type\":\"string\",\"pattern\":\"[]\"}", {"finite"}},
    {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":20}", {"'format'"}},
    {"{\"enum\":[\"a\"],\"pattern\":\"a\"}", {"'enum'", "pattern"}},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", {"'oneOf'", "at /"}},
    {"{\"properties\":{\"p\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}}}", {"'oneOf'", "/properties/p"}},
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}}},{\"type\":\"object\",\"properties\":"
     "{\"k\":{\"type\":\"integer\"}}}]}",
     {"'oneOf'"}},
    {"{\"type\":\"number\",\"minimum\":0.2,\"maximum\":0.3}", {"'minimum'"}},
    {"{\"type\":\"integer\",\"minimum\":1e30}", {"int64"}},
    {"{\"minimum\":1.00000000000000000000000000000000000000000000000000000000000000001}", {"'minimum'"}},
};

static void test_errors(void) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(ERRORS); i++) {
        gram *g = NULL;
        char err[512] = "";
        int rc = gram_from_json_schema(ERRORS[i].schema, strlen(ERRORS[i].schema), &g, err, sizeof err);
        CHECKF(rc != 0 && !g, "%s should fail", ERRORS[i].schema);
        for (int k = 0; k < 2 && ERRORS[i].want[k]; k++)
            CHECKF(strstr(err, ERRORS[i].want[k]), "%s: message '%s' lacks '%s'", ERRORS[i].schema, err, ERRORS[i].want[k]);
        gram_unref(g);
    }
}

/* Limits: nesting, size, anyOf blow-up. */
static void test_limits(void) {
    char *s = malloc(2000000);
    /* 64 nested levels are fine, 70 are not */
    for (int levels = 60; levels <= 70; levels += 10) {
        size_t n = 0;
        for (int i = 0; i < levels; i++) n += (size_t)sprintf(s + n, "{\"items\":");
        n += (size_t)sprintf(s + n, "{\"type\":\"null\"}");
        for (int i = 0; i < levels; i++) s[n++] = '}';
        s[n] = 0;
        gram *g = NULL;
        char err[512] = "";
        int rc = gram_from_json_schema(s, n, &g, err, sizeof err);
        if (levels <= 64) CHECKF(rc == 0, "%d levels: %s", levels, err);
        else CHECKF(rc != 0 && strstr(err, "nested"), "%d levels: '%s'", levels, err);
        gram_unref(g);
    }
    /* too many rules: an enum of 140,000 numbers */
    {
        size_t n = (size_t)sprintf(s, "{\"enum\":[");
        for (int i = 0; i < 140000; i++) n += (size_t)sprintf(s + n, i ? ",%d" : "%d", i);
        n += (size_t)sprintf(s + n, "]}");
        gram *g = NULL;
        char err[512] = "";
        int rc = gram_from_json_schema(s, n, &g, err, sizeof err);
        CHECKF(rc != 0 && strstr(err, "too large"), "big enum: '%s'", err);
        gram_unref(g);
    }
    /* anyOf combinations: 3^12 */
    {
        size_t n = (size_t)sprintf(s, "{\"allOf\":[");
        for (int i = 0; i < 12; i++)
            n += (size_t)sprintf(s + n, "%s{\"anyOf\":[{\"minimum\":%d},{\"maximum\":%d},{\"type\":\"string\"}]}", i ? "," : "", i, 100 + i);
        n += (size_t)sprintf(s + n, "]}");
        gram *g = NULL;
        char err[512] = "";
        int rc = gram_from_json_schema(s, n, &g, err, sizeof err);
        CHECKF(rc != 0 && strstr(err, "too complex"), "anyOf blow-up: '%s'", err);
        gram_unref(g);
    }
    free(s);
}

/* ---- commas ------------------------------------------------------------------------------- */
/* Members a, b, c, d (each required or not per req_mask): every subset written in
 * order with correct commas is accepted exactly when it holds the required ones;
 * misplaced commas and other orders never are. */
static void test_commas(void) {
    static const char *const names[4] = {"a", "b", "c", "d"};
    for (int req = 0; req < 16; req++) {
        char src[512];
        size_t n = (size_t)sprintf(src, "{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1},\"b\":{\"type\":\"null\"},"
                                        "\"c\":{\"type\":\"boolean\"},\"d\":{\"enum\":[\"x\"]}},\"required\":[");
        for (int k = 0, first = 1; k < 4; k++)
            if (req >> k & 1) {
                n += (size_t)sprintf(src + n, "%s\"%s\"", first ? "" : ",", names[k]);
                first = 0;
            }
        sprintf(src + n, "],\"additionalProperties\":false}");
        gram *g = schema(src);
        CHECK(g);
        if (!g) continue;
        static const char *const vals[4] = {"1", "null", "true", "\"x\""};
        for (int sub = 0; sub < 16; sub++) {
            char t[128], bad[160];
            size_t m = (size_t)sprintf(t, "{");
            int cnt = 0;
            for (int k = 0; k < 4; k++)
                if (sub >> k & 1) m += (size_t)sprintf(t + m, "%s\"%s\":%s", cnt++ ? "," : "", names[k], vals[k]);
            sprintf(t + m, "}");
            CHECKF(acc(g, t) == ((sub & req) == req), "req %x: %s", req, t);
            /* a leading, trailing or doubled comma */
            snprintf(bad, sizeof bad, "{,%s", t + 1);
            CHECKF(!acc(g, bad), "%s", bad);
            if (cnt) {
                snprintf(bad, sizeof bad, "%.*s,}", (int)m, t);
                CHECKF(!acc(g, bad), "%s", bad);
            }
            char *comma = strchr(t + 1, ',');
            if (comma) {
                snprintf(bad, sizeof bad, "%.*s,%s", (int)(comma - t), t, comma);
                CHECKF(!acc(g, bad), "%s", bad);
                snprintf(bad, sizeof bad, "%.*s%s", (int)(comma - t), t, comma + 1);
                CHECKF(!acc(g, bad), "%s", bad);
            }
        }
        CHECK(!acc(g, "{\"b\":null,\"a\":1}"));
        gram_unref(g);
    }
}

/* ---- recursion ------------------------------------------------------------------------------- */
static void test_recursion(void) {
    gram *g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
                     "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}");
    CHECK(g);
    if (g) {
        CHECK(acc(g, "{\"v\":1}"));
        CHECK(acc(g, "{\"v\":1,\"kids\":[]}"));
        CHECK(acc(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[{\"v\":5}]}]}]}"));
        CHECK(!acc(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"kids\":[]}]}"));
        CHECK(!acc(g, "{\"v\":1,\"kids\":[{\"v\":\"2\"}]}"));
        /* 200 levels deep: recursion is a rule, not unrolled */
        char *s = malloc(4000);
        size_t n = 0;
        for (int i = 0; i < 200; i++) n += (size_t)sprintf(s + n, "{\"v\":%d,\"kids\":[", i);
        n += (size_t)sprintf(s + n, "{\"v\":0}");
        for (int i = 0; i < 200; i++) n += (size_t)sprintf(s + n, "]}");
        CHECK(gram_accepts(g, s, n));
        free(s);
        gram_unref(g);
    }
    /* a linked list through the root, optional next */
    g = schema("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"},\"next\":{\"anyOf\":[{\"$ref\":\"#\"},"
               "{\"type\":\"null\"}]}},\"required\":[\"x\",\"next\"]}");
    CHECK(g);
    if (g) {
        CHECK(acc(g, "{\"x\":\"a\",\"next\":null}"));
        CHECK(acc(g, "{\"x\":\"a\",\"next\":{\"x\":\"b\",\"next\":{\"x\":\"c\",\"next\":null}}}"));
        CHECK(!acc(g, "{\"x\":\"a\",\"next\":{\"x\":\"b\"}}"));
        gram_unref(g);
    }
    /* recursion through merged schemas: allOf's two views of "p" meet again one level down */
    g = schema("{\"allOf\":[{\"properties\":{\"p\":{\"$ref\":\"#\"}}},{\"properties\":{\"p\":{\"type\":\"object\"},"
               "\"q\":{\"type\":\"integer\"}}}],\"type\":\"object\"}");
    CHECK(g);
    if (g) {
        CHECK(acc(g, "{}") && acc(g, "{\"p\":{\"p\":{\"q\":1}}}") && acc(g, "{\"p\":{},\"q\":2}"));
        CHECK(!acc(g, "{\"p\":{\"p\":1}}") && !acc(g, "{\"p\":{\"q\":\"x\"}}"));
        gram_unref(g);
    }
    /* the same $defs entry reached by two spellings: compiled once */
    g = schema("{\"$defs\":{\"s\":{\"type\":\"string\"}},\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"#/$defs/s\"},"
               "{\"$ref\":\"#/%24defs/s\"}],\"items\":false}");
    CHECK(g && acc(g, "[\"a\",\"b\"]") && !acc(g, "[\"a\",1]"));
    gram_unref(g);
}

/* ---- integer ranges ------------------------------------------------------------------------ */
static gram *int_range(const char *lo_kw, const char *lo, const char *hi_kw, const char *hi) {
    char src[256];
    snprintf(src, sizeof src, "{\"type\":\"integer\",\"%s\":%s,\"%s\":%s}", lo_kw, lo, hi_kw, hi);
    return schema(src);
}

/* Every integer text in [lo - 30, hi + 30] (and odd spellings) accepted exactly when in
 * [lo, hi]. */
static int check_range(gram *g, int64_t lo, int64_t hi, int64_t from, int64_t to) {
    int bad = 0;
    char t[40];
    for (int64_t v = from; v <= to; v++) {
        snprintf(t, sizeof t, "%" PRId64, v);
        if (acc(g, t) != (v >= lo && v <= hi)) {
            if (bad++ < 3) fprintf(stderr, "  range [%" PRId64 ", %" PRId64 "]: %s\n", lo, hi, t);
        }
    }
    static const char *const odd[] = {"-0", "00", "01", "-01", "+1", "1.0", "", "-"};
    for (size_t k = 0; k < IFD_ARRAY_LEN(odd); k++) bad += acc(g, odd[k]);
    return bad;
}

static void test_int_ranges(void) {
    int bad = 0;
    char a[32], b[32];
    for (int lo = -40; lo <= 40; lo++)
        for (int hi = lo; hi <= 40; hi++) {
            snprintf(a, sizeof a, "%d", lo);
            snprintf(b, sizeof b, "%d", hi);
            gram *g = int_range("minimum", a, "maximum", b);
            if (!g) {
                bad++;
                continue;
            }
            bad += check_range(g, lo, hi, -150, 150);
            gram_unref(g);
        }
    CHECKF(bad == 0, "%d mismatches in small ranges", bad);
    /* the digit-count edges, exclusive and decimal bounds */
    static const int edges[] = {-1001, -1000, -999, -101, -100, -99, -11, -10, -9, -1, 0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001};
    bad = 0;
    for (size_t i = 0; i < IFD_ARRAY_LEN(edges); i++)
        for (size_t j = i; j < IFD_ARRAY_LEN(edges); j++) {
            int lo = edges[i], hi = edges[j];
            /* exclusive bounds one outside, and decimal bounds that round inwards */
            snprintf(a, sizeof a, "%d", lo - 1);
            if (hi < 0) snprintf(b, sizeof b, "-%d.5", -hi - 1); /* in (hi, hi + 1): rounds down to hi */
            else snprintf(b, sizeof b, "%d.5", hi);
            gram *g = int_range("exclusiveMinimum", a, "maximum", b);
            if (!g) {
                bad++;
                continue;
            }
            bad += check_range(g, lo, hi, lo - 1100 > -1200 ? lo - 100 : -1200, hi + 100);
            gram_unref(g);
            /* a bound in (lo - 1, lo) rounds up to lo */
            if (lo <= 0) snprintf(a, sizeof a, "-%d.75", -lo);
            else snprintf(a, sizeof a, "%d.25", lo - 1);
            snprintf(b, sizeof b, "%d", hi + 1);
            g = int_range("minimum", a, "exclusiveMaximum", b);
            if (!g) {
                bad++;
                continue;
            }
            bad += check_range(g, lo, hi, lo - 100, hi + 100);
            gram_unref(g);
        }
    CHECKF(bad == 0, "%d mismatches at digit edges", bad);
    /* int64's ends */
    gram *g = int_range("minimum", "-9223372036854775808", "maximum", "9223372036854775807");
    CHECK(g);
    if (g) {
        CHECK(acc(g, "-9223372036854775808") && acc(g, "9223372036854775807") && acc(g, "0"));
        CHECK(!acc(g, "-9223372036854775809") && !acc(g, "9223372036854775808") && !acc(g, "10000000000000000000"));
        gram_unref(g);
    }
    g = int_range("minimum", "9223372036854775800", "maximum", "1e300");
    CHECK(g);
    if (g) {
        bad = 0;
        for (int k = 0; k <= 9; k++) {
            char t[32];
            snprintf(t, sizeof t, "922337203685477579%d", k);
            bad += acc(g, t);
            snprintf(t, sizeof t, "922337203685477580%d", k);
            bad += acc(g, t) != (k <= 7);
        }
        CHECKF(bad == 0, "%d mismatches near INT64_MAX", bad);
        gram_unref(g);
    }
    g = int_range("exclusiveMinimum", "-9223372036854775809", "exclusiveMaximum", "-9223372036854775807");
    CHECK(g && acc(g, "-9223372036854775808") && !acc(g, "-9223372036854775807"));
    gram_unref(g);
}

/* Number bounds: every candidate the grammar accepts lies inside the range, and some
 * candidate is accepted. */
static void test_number_bounds(void) {
    static const char *const bounds[] = {"-10.5", "-3", "-2.5", "-1", "0", "0.5", "1", "7.25", "12", "1e1"};
    char cand[400][32];
    int nc = 0;
    for (int v = -14; v <= 14; v++) {
        snprintf(cand[nc++], sizeof cand[0], "%d", v);
        for (int f = 0; f < 10; f += 3) {
            snprintf(cand[nc++], sizeof cand[0], "%d.%d", v < 0 ? -v : v, f);
            snprintf(cand[nc++], sizeof cand[0], "-%d.%d5", v < 0 ? -v : v, f);
        }
    }
    int bad = 0, empty = 0;
    for (size_t i = 0; i < IFD_ARRAY_LEN(bounds); i++)
        for (size_t j = 0; j < IFD_ARRAY_LEN(bounds); j++)
            for (int ex = 0; ex < 4; ex++) {
                double lo = atof(bounds[i]), hi = atof(bounds[j]);
                char src[200];
                snprintf(src, sizeof src, "{\"type\":\"number\",\"%s\":%s,\"%s\":%s}", ex & 1 ? "exclusiveMinimum" : "minimum",
                         bounds[i], ex & 2 ? "exclusiveMaximum" : "maximum", bounds[j]);
                gram *g = NULL;
                char err[512];
                if (gram_from_json_schema(src, strlen(src), &g, err, sizeof err)) {
                    /* refused: only when no candidate form fits */
                    bool fits = false;
                    for (int k = 0; k < nc; k++) {
                        double v = atof(cand[k]);
                        if (strchr(cand[k], '.') == NULL && (ex & 1 ? v > lo : v >= lo) && (ex & 2 ? v < hi : v <= hi)) fits = true;
                    }
                    if (fits) {
                        fprintf(stderr, "  %s refused: %s\n", src, err);
                        bad++;
                    }
                    empty++;
                    continue;
                }
                int n_acc = 0;
                for (int k = 0; k < nc; k++) {
                    if (!acc(g, cand[k])) continue;
                    n_acc++;
                    double v = atof(cand[k]);
                    if (!((ex & 1 ? v > lo : v >= lo) && (ex & 2 ? v < hi : v <= hi))) {
                        if (bad++ < 5) fprintf(stderr, "  %s accepts %s\n", src, cand[k]);
                    }
                }
                if (!n_acc) {
                    fprintf(stderr, "  %s accepts no candidate\n", src);
                    bad++;
                }
                gram_unref(g);
            }
    CHECKF(bad == 0, "%d number-bound mismatches (%d refused)", bad, empty);
}

/* ---- any value, builder entry points -------------------------------------------------------- */
static void test_any(void) {
    gram_builder *b = gb_new();
    int32_t obj = -1, val = -1, s1 = -1, s2 = -1, s3 = -1;
    char err[512] = "";
    CHECK(gram_json_any_object(b, &obj) == 0 && gram_json_any_value(b, &val) == 0);
    /* two schemas into one builder: their rule names do not clash */
    const char *sa = "{\"$defs\":{\"x\":{\"type\":\"integer\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/x\"}}";
    const char *sb = "{\"$defs\":{\"x\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/x\"}";
    CHECKF(gram_json_schema(b, sa, strlen(sa), &s1, err, sizeof err) == 0, "%s", err);
    CHECKF(gram_json_schema(b, sb, strlen(sb), &s2, err, sizeof err) == 0, "%s", err);
    CHECK(gram_json_schema(b, "{\"not\":1}", 9, &s3, err, sizeof err) != 0 && strstr(err, "'not'") && s3 == -1);
    gram *g[4] = {0};
    int32_t roots[4] = {obj, val, s1, s2};
    for (int i = 0; i < 4; i++) CHECKF(gram_compile(b, roots[i], &g[i], err, sizeof err) == 0, "%s", err);
    if (g[0] && g[1] && g[2] && g[3]) {
        CHECK(acc(g[0], "{}") && acc(g[0], "{\"a\":[1,{\"b\":null}],\"c\":-1.5e-3}") && !acc(g[0], "[]") && !acc(g[0], "1"));
        CHECK(acc(g[1], "[]") && acc(g[1], "\"x\"") && acc(g[1], "{ \"a\" : [ true , false ] }") && !acc(g[1], "[1 2]"));
        CHECK(!acc(g[1], "1.") && !acc(g[1], "{\"a\"}") && !acc(g[1], "[1,]"));
        CHECK(acc(g[2], "[1,2]") && !acc(g[2], "[\"a\"]") && acc(g[3], "\"a\"") && !acc(g[3], "1"));
    }
    for (int i = 0; i < 4; i++) gram_unref(g[i]);
    gb_free(b);
}

/* ---- masks on a real vocabulary ---------------------------------------------------------------- */
static tokenizer *load_tok(const char *path) { return gt_load_tok(path); }
static int check_masks(gram *g, const gram_vocab *v, int n_states, const char *label, int *ends) {
    return gt_check_masks(g, v, n_states, label, ends);
}

static void test_mask_shakespeare(void) {
    tokenizer *t = load_tok(INFERD_SHARED_DIR "/models/shakespeare-target.gguf");
    CHECK(t);
    if (!t) return;
    gram_vocab *v = gt_vocab_of(t);
    CHECK(v);
    const char *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},\"age\":{\"type\":\"integer\","
        "\"minimum\":0,\"maximum\":150},\"role\":{\"enum\":[\"king\",\"queen\",\"fool\"]},\"lines\":{\"type\":\"array\","
        "\"items\":{\"type\":\"string\",\"maxLength\":12},\"maxItems\":3}},\"required\":[\"name\",\"role\"],\"additionalProperties\":false}",
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},\"kids\":{\"type\":\"array\","
        "\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
        "{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"date-time\"},\"id\":{\"type\":"
        "\"string\",\"format\":\"uuid\"},\"ip\":{\"format\":\"ipv4\",\"type\":\"string\"},\"x\":{\"anyOf\":[{\"type\":\"null\"},"
        "{\"type\":\"number\",\"minimum\":-1,\"maximum\":1}]}},\"required\":[\"when\",\"id\",\"ip\",\"x\"]}",
        "true",
    };
    for (size_t i = 0; i < IFD_ARRAY_LEN(schemas) && v; i++) {
        gram *g = schema(schemas[i]);
        CHECK(g);
        if (!g) continue;
        char lab[32];
        int ends = 0;
        snprintf(lab, sizeof lab, "shakespeare schema %zu", i);
        CHECKF(check_masks(g, v, 600, lab, &ends) == 0, "%s", lab);
        CHECKF(ends > 0, "%s: no text finished", lab);
        gram_unref(g);
    }
    gram_vocab_free(v);
    tok_destroy(t);
}

TEST_MAIN(T(test_keywords), T(test_errors), T(test_limits), T(test_commas), T(test_recursion), T(test_int_ranges),
          T(test_number_bounds), T(test_any), T(test_mask_shakespeare))
