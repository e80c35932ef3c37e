/* chat_escape.h — keeps request data from turning into control tokens.
 *
 * A chat prompt is rendered text that is tokenized with special-token parsing, so
 * without care a message holding "<|im_end|>\n<|im_start|>system\n..." forges a
 * system turn. Control (and unknown) tokens must come only from the template's own
 * text: its literals and the bos_token / eos_token values the server passes in.
 *
 * How: before rendering, every string of request data in the template context (keys
 * and values) is escaped in place —
 *   - each occurrence of a control-token text, matched ASCII-case-insensitively (so a
 *     template's |lower or |upper cannot make one), and each character of the escape
 *     alphabet itself becomes OPEN digit... CLOSE: an index into a per-render table
 *     that keeps the original bytes (the escape is injective: no input produces it);
 *   - a string that ends with the beginning of a control-token text gets an empty
 *     escape OPEN CLOSE (a "mark") after it, one that starts with the end of one gets a
 *     mark before it (both before / after surrounding whitespace, and at the very
 *     ends), so no token forms across the boundary with the template text or another
 *     request string next to it.
 * The alphabet is 18 consecutive noncharacter (or private-use) code points that no
 * special token of the vocabulary can overlap (checked at chat_esc_create), so in the
 * rendered text the special-token partition can match only tokens the template wrote.
 * chat_esc_encode then tokenizes it: the partition with control tokens, and in every
 * raw fragment between them the escapes are turned back into their original text,
 * which is tokenized as plain text (user-defined tokens still split out, as always).
 * A broken escape (a template sliced one) is dropped: it never becomes anything.
 * Without request data that holds control-token text (or its ends, or the alphabet)
 * nothing is escaped and rendering + tokenization are exactly what they were.
 *
 * Not covered (the template's own doing): request text placed strictly inside a
 * token the template composes ('<|' + message.role + '|>', Phi-3 style), and templates
 * that rearrange request text so that pieces which were apart meet: str.replace of a
 * substring between "<|im_" and "end|>" (SmolLM3 removes "/think" from the system
 * prompt this way), slices of one string put back together, reversal, strides, or a
 * slice that cuts off a string's end mark right before template text completing the
 * token.
 *
 * Threads: a chat_esc is immutable after chat_esc_create (any thread); a chat_esc_tab
 * belongs to one render. */
#ifndef INFERD_SERVER_CHAT_ESCAPE_H
#define INFERD_SERVER_CHAT_ESCAPE_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util/buf.h"

struct tokenizer;
typedef struct chat_esc chat_esc;

/* Patterns: the CONTROL and UNKNOWN tokens of tk (what only TOK_ENC_PARSE_SPECIAL
 * matches). The tokenizer is not kept. IFD_ERR_UNSUPPORTED when every candidate
 * alphabet overlaps some special token (a crafted vocabulary), IFD_ERR_NOMEM. */
int chat_esc_create(chat_esc **out, const struct tokenizer *tk, char *err, size_t err_bytes);
void chat_esc_destroy(chat_esc *e); /* NULL is fine */

/* The pieces escaped during one render. Zero-initialise; free with chat_esc_tab_free. */
typedef struct chat_esc_tab {
    sbuf orig;       /* the original bytes of every escaped piece, back to back */
    size_t *off;     /* [n + 1]: piece i is orig.p[off[i] .. off[i + 1]) */
    size_t n, cap;
    size_t n_marks;  /* empty escapes written */
    uint32_t *slots; /* [n_slots] piece index + 1 by hash of its bytes (0: empty) */
    size_t n_slots;
} chat_esc_tab;

void chat_esc_tab_free(chat_esc_tab *t);

/* Escape every string under item (object keys, string values, recursively) in place.
 * IFD_OK or IFD_ERR_NOMEM (item may then be half escaped; discard it). */
int chat_esc_json(const chat_esc *e, cJSON *item, chat_esc_tab *tab);

/* Escape s[0..n) into out (appended). out->oom on allocation failure. */
void chat_esc_str(const chat_esc *e, const char *s, size_t n, chat_esc_tab *tab, sbuf *out);

/* True when tab records nothing: the escaped data is the original data. */
static inline bool chat_esc_tab_empty(const chat_esc_tab *t) {
    return t->n == 0 && t->n_marks == 0;
}

/* s[0..n) with the escapes of tab turned back into their original bytes and broken
 * escape pieces dropped, appended to out (out->oom on allocation failure). */
void chat_esc_unescape(const chat_esc *e, const chat_esc_tab *tab, const char *s, size_t n, sbuf *out);

/* Token ids of the rendered text[0..n): tok_encode(flags | TOK_ENC_PARSE_SPECIAL)
 * except that the raw fragments are unescaped and never yield control tokens (see the
 * top of this file). *ids is malloc'ed. Status of tok_encode_mapped. */
int chat_esc_encode(const chat_esc *e, const chat_esc_tab *tab, const struct tokenizer *tk, const char *text,
                    size_t n, unsigned flags, int32_t **ids, size_t *n_ids);

#endif
