/* grammar.h — constrained decoding: a context-free grammar over bytes, its front ends
 * (GBNF, JSON Schema, regex), a matcher that follows a sequence's output byte by byte,
 * and the mask of the vocabulary's tokens allowed next.
 *
 * The one representation (the IR): rules, each a list of alternatives, each a sequence
 * of symbols; a symbol is a rule reference or a terminal, a set of bytes. Front ends
 * build it through gram_builder; character classes over code points become UTF-8
 * byte-sequence rules (gb_codepoints), so a grammar built from text classes only ever
 * produces valid UTF-8. gram_compile checks it (undefined rules, left recursion, size)
 * and freezes it into a gram, immutable and reference counted: the server caches
 * compiled grammars by their source text and hands the same gram to many requests.
 *
 * Matching: a state is a set of parse stacks, each a persistent, hash-consed list of
 * positions (the top is always a terminal; a special node means "the grammar may end
 * here"). The matcher (one per gram, built lazily) interns state sets and caches their
 * transitions per byte class (bytes no terminal tells apart share a class), which makes
 * it a lazily built DFA: following a token is one table lookup per byte. The mask of a
 * state is a walk of the vocabulary's byte trie (gram_vocab) against those transitions,
 * pruned at the first dead byte, and cached per state.
 *
 * Threads: builders and compiles on any thread (one builder per thread); gram_ref /
 * gram_unref on any thread; a gram's matcher (gram_start ... gram_mask) belongs to one
 * thread at a time (the engine thread); a gram_vocab is immutable once built. */
#ifndef INFERD_GRAMMAR_GRAMMAR_H
#define INFERD_GRAMMAR_GRAMMAR_H
#include "../util/layer/grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the IR builder -------------------------------------------------------------------
 * gsym: >= 0 a rule id; < 0 a terminal (~byte set id). */
typedef int32_t gsym;
typedef struct gram_builder gram_builder;

/* Limits on what a request may build (a 400 beyond them). */
#define GRAM_MAX_RULES (1 << 17)
#define GRAM_MAX_SYMS (1 << 21) /* symbols over all alternatives */
#define GRAM_MAX_REPEAT 1024    /* {m,n} bounds; more is an error */

gram_builder *gb_new(void);
void gb_free(gram_builder *b); /* NULL ok */
/* A new rule (no alternatives yet). name: for messages and GBNF lookups; NULL for a
 * generated helper rule. Returns the rule id, or -1 (limits / no memory: gb_error). */
int32_t gb_rule(gram_builder *b, const char *name, size_t name_len);
/* The rule named so, or -1. */
int32_t gb_find(const gram_builder *b, const char *name, size_t name_len);
/* Add an alternative (syms[0..n), n == 0 is the empty string) to rule. 0 or -1. */
int gb_alt(gram_builder *b, int32_t rule, const gsym *syms, int32_t n);
/* Number of alternatives rule has so far. */
int32_t gb_n_alts(const gram_builder *b, int32_t rule);

/* Terminals: a byte set (bits[c >> 5] >> (c & 31) & 1), one byte, a byte range. An
 * empty set is allowed (it matches nothing). */
gsym gb_byteset(gram_builder *b, const uint32_t bits[8]);
gsym gb_byte(gram_builder *b, uint8_t c);
gsym gb_byterange(gram_builder *b, uint8_t lo, uint8_t hi);

/* Helper rules (each returns a rule id, or -1 with gb_error set): */
gsym gb_literal(gram_builder *b, const char *s, size_t n); /* exactly the bytes s[0..n) */
gsym gb_seq(gram_builder *b, const gsym *syms, int32_t n);  /* one sequence (a group) */
gsym gb_choice(gram_builder *b, const gsym *syms, int32_t n); /* any one of syms[0..n) */
gsym gb_empty(gram_builder *b);                                /* the empty string */
/* One code point (UTF-8 encoded) in the union of ranges [lo, hi] (inclusive), or, when
 * negate, in none of them; never a surrogate (U+D800..U+DFFF) or above U+10FFFF. An
 * empty set is a rule with no alternatives (matches nothing). */
gsym gb_codepoints(gram_builder *b, const uint32_t (*ranges)[2], int32_t n_ranges, bool negate);
/* x repeated min..max times (max < 0: unbounded); bounds above GRAM_MAX_REPEAT fail. */
gsym gb_repeat(gram_builder *b, gsym x, int32_t min, int32_t max);

/* The first error, or NULL. Every call above fails once an error is set, so a front
 * end may check only at the end. */
const char *gb_error(const gram_builder *b);
/* Set the error (printf-style, the first one wins); returns -1. */
int gb_fail(gram_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- compiled grammars ---------------------------------------------------------------- */
typedef struct gram gram;

/* Freeze b with start rule root: fails (-1, err) on an error in b, a named rule
 * referenced but never given an alternative (named in the message; helpers with no
 * alternatives are fine: they match nothing), left recursion (a rule reachable from
 * itself without consuming a byte: named), or the limits. *out has one reference. b is
 * left as is (it may be freed). */
int gram_compile(gram_builder *b, int32_t root, gram **out, char *err, size_t err_bytes);
void gram_ref(gram *g);
void gram_unref(gram *g); /* NULL ok; frees at zero (any thread) */

/* ---- front ends (grammar_gbnf.c, grammar_regex.c, grammar_json.c) ---------------------
 * Each returns 0, or -1 with one line in err (what and where: a byte offset, a JSON
 * path, the unsupported keyword). */

/* llama.cpp's GBNF: rules `name ::= ...`, start rule `root`; "literals", [classes],
 * ".", groups, | * + ? {m} {m,} {m,n}, # comments. */
int gram_from_gbnf(const char *text, size_t n, gram **out, char *err, size_t err_bytes);

/* Regular expressions (ECMAScript syntax, the subset JSON Schema's "pattern" uses),
 * always matched whole (a leading ^ / trailing $ are accepted and mean nothing more).
 * Into builder b: *rule gets a rule matching the text. flags: GRAM_RE_JSON_STRING: the
 * text as it is written inside a JSON string (the regex constrains the decoded string:
 * `"` is written \", `\` is \\, controls are escapes). */
#define GRAM_RE_JSON_STRING 1u
int gram_regex(gram_builder *b, const char *re, size_t n, unsigned flags, int32_t *rule, char *err,
               size_t err_bytes);
int gram_from_regex(const char *re, size_t n, gram **out, char *err, size_t err_bytes);

/* JSON Schema (a JSON text) -> a grammar of the JSON texts it accepts (grammar_json.c
 * lists the keywords). Whitespace between tokens: none, one space, or one newline and
 * at most GRAM_JSON_MAX_WS spaces or tabs (compact, ", "-separated and pretty-printed
 * JSON; never a run a model could pad its output with). */
#define GRAM_JSON_MAX_WS 16
int gram_json_schema(gram_builder *b, const char *schema, size_t n, int32_t *rule, char *err,
                     size_t err_bytes);
int gram_from_json_schema(const char *schema, size_t n, gram **out, char *err, size_t err_bytes);
/* Any JSON object (response_format json_object); any JSON value. */
int gram_json_any_object(gram_builder *b, int32_t *rule);
int gram_json_any_value(gram_builder *b, int32_t *rule);

/* ---- matching -------------------------------------------------------------------------- */
/* A state of a gram's matcher: an interned id (copy it to fork a sequence). */
typedef int32_t gram_state;
#define GRAM_DEAD (-1)

/* The start state (GRAM_DEAD only when out of memory). */
gram_state gram_start(gram *g);
/* The state after one more byte, or GRAM_DEAD. */
gram_state gram_step(gram *g, gram_state s, uint8_t c);
/* The state after bytes[0..n), or GRAM_DEAD. */
gram_state gram_feed(gram *g, gram_state s, const void *bytes, size_t n);
/* May the output end in state s? */
bool gram_can_end(const gram *g, gram_state s);
/* May no byte follow s (it can only end)? */
bool gram_must_end(const gram *g, gram_state s);
/* Whole-text checks (tests): the text is a sentence of the grammar / a prefix of one. */
bool gram_accepts(gram *g, const void *text, size_t n);
bool gram_prefix_ok(gram *g, const void *text, size_t n);
/* Non-zero once the matcher hit its memory limit: every later step is GRAM_DEAD. */
bool gram_overflowed(const gram *g);

/* ---- the vocabulary side ---------------------------------------------------------------- */
typedef struct gram_vocab gram_vocab;
/* The byte trie of n_vocab tokens: piece(id) gives a token's bytes as output text has
 * them (length 0: never allowed by a grammar, e.g. control tokens; the function returns
 * the full length and writes at most cap bytes); eog(id): an end-of-generation token,
 * allowed exactly when the grammar can end. NULL on no memory. */
gram_vocab *gram_vocab_new(int32_t n_vocab, size_t (*piece)(void *ctx, int32_t id, char *buf, size_t cap),
                           bool (*eog)(void *ctx, int32_t id), void *ctx);
void gram_vocab_free(gram_vocab *v);
int32_t gram_vocab_n(const gram_vocab *v);
/* Words of a mask: ceil(n_vocab / 32). Bit id set: token id allowed. */
int32_t gram_mask_words(const gram_vocab *v);
/* Trie nodes (bench, stats). */
int64_t gram_vocab_nodes(const gram_vocab *v);
/* The bytes of token id (tests, tools); *n gets the length. */
const char *gram_vocab_piece(const gram_vocab *v, int32_t id, size_t *n);
bool gram_vocab_is_eog(const gram_vocab *v, int32_t id);
/* The mask of state s (cached per state): points into g's cache, valid until the next
 * gram call on g. NULL on GRAM_DEAD / overflow. A gram serves one vocabulary at a time
 * (a different v flushes the cache). */
const uint32_t *gram_mask(gram *g, const gram_vocab *v, gram_state s);
/* The state after token id (its bytes) from s, or GRAM_DEAD (also for an EOG token, or
 * one with no bytes). */
gram_state gram_advance_token(gram *g, const gram_vocab *v, gram_state s, int32_t id);
/* The reference: the same mask by feeding every token's bytes from s one byte at a
 * time through an independent, uncached simulation of the parse stacks (tests). False
 * when it could not: a dead state, no memory, or more explicit stacks than it keeps
 * (nested repetitions make them exponential where the matcher's shared nodes are not). */
bool gram_mask_bruteforce(gram *g, const gram_vocab *v, gram_state s, uint32_t *out);

/* Statistics (bench, metrics). */
typedef struct gram_stats {
    int64_t states, nodes, masks_computed, mask_hits, bytes, n_classes;
    int64_t walks; /* local walks built (trie, position) */
} gram_stats;
void gram_get_stats(const gram *g, gram_stats *st);

#endif
