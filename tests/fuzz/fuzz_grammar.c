/* fuzz_grammar.c — libFuzzer target for the grammar front ends and the matcher, which
 * request data reaches (response_format json_schema, grammar, guided_regex, tools'
 * parameters): the first byte picks JSON Schema, GBNF or a regex, the rest is its text.
 * When it compiles, bytes derived from the input are fed through the matcher, and at a
 * few states the fast mask over a small vocabulary (every byte, plus multi-byte pieces)
 * must equal the brute-force one; then the grammar is freed. Nothing may crash, leak,
 * hang or disagree. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

static const char *PIECES[] = {"{", "}", "\"", "\":", "\": ", ", \"", "true", "null", "12", "-3.5e2", "\\n", "\\u00e9",
                               " ", "  ", "\n", "ab", "abc", "\xc3\xa9", "\xe2\x82\xac", "a\"", "\"}", "[1, 2]"};
#define N_PIECES (int32_t)(sizeof PIECES / sizeof *PIECES)

static size_t piece(void *ctx, int32_t id, char *buf, size_t cap) {
    (void)ctx;
    if (id == 0) return 0;            /* a control token */
    if (id <= 256) {                  /* every single byte (1..255, then 0) */
        if (cap) buf[0] = (char)(id & 255);
        return 1;
    }
    const char *s = PIECES[id - 257];
    size_t n = strlen(s);
    memcpy(buf, s, n < cap ? n : cap);
    return n;
}
static bool eog(void *ctx, int32_t id) {
    (void)ctx;
    return id == 0;
}

static gram_vocab *V;

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    if (n < 1 || n > 8192) return 0;
    if (!V) V = gram_vocab_new(257 + N_PIECES, piece, eog, NULL);
    gram *g = NULL;
    char err[256];
    const char *src = (const char *)d + 1;
    const size_t sn = n - 1;
    int rc;
    switch (d[0] % 3) {
    case 0: rc = gram_from_json_schema(src, sn, &g, err, sizeof err); break;
    case 1: rc = gram_from_gbnf(src, sn, &g, err, sizeof err); break;
    default: rc = gram_from_regex(src, sn, &g, err, sizeof err); break;
    }
    if (rc) {
        if (g || !err[0]) abort(); /* an error always says why and leaves nothing */
        return 0;
    }
    /* walk: each input byte picks an allowed token (by the fast mask), some states are
     * checked against the brute force */
    const int32_t W = gram_mask_words(V);
    uint32_t *ref = malloc(sizeof *ref * (size_t)W);
    gram_state s = gram_start(g);
    for (size_t i = 0; i < n && i < 64 && s != GRAM_DEAD; i++) {
        const uint32_t *m = gram_mask(g, V, s);
        if (!m) break; /* the matcher's limits */
        if (i % 8 == 0) {
            /* (the reference gives up where explicit stacks explode: nothing to compare) */
            if (gram_mask_bruteforce(g, V, s, ref) && memcmp(ref, m, sizeof *ref * (size_t)W)) abort();
        }
        int32_t ids[512], k = 0;
        for (int32_t id = 1; id < gram_vocab_n(V) && k < 512; id++)
            if (m[id >> 5] >> (id & 31) & 1) ids[k++] = id;
        if (!k) break;
        gram_state t = gram_advance_token(g, V, s, ids[d[i] % k]);
        if (t == GRAM_DEAD && !gram_overflowed(g)) abort(); /* an allowed token leads somewhere */
        s = t;
    }
    free(ref);
    gram_unref(g);
    return 0;
}
