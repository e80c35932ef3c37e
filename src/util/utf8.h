/* utf8.h — the one strict UTF-8 validator (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF) and the helpers built on it. The tokenizer's incremental
 * detokenizer, the JSON output (buf.c) and the request parser (server/json.c) all use
 * these. Pure functions: any thread. */
#ifndef INFERD_UTIL_UTF8_H
#define INFERD_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The sequence starting at s[0] with n bytes available:
 *   > 0  a complete valid sequence of that many bytes,
 *   0    a valid but incomplete prefix (all n bytes, n < needed; also n == 0),
 *   < 0  -k: the first k bytes (k >= 1) are a maximal invalid subpart -> one U+FFFD. */
int utf8_check(const unsigned char *s, size_t n);

/* Length of the one character at s (n bytes available), or 0 when the bytes there are
 * not a valid, complete UTF-8 sequence. */
size_t utf8_char_len(const unsigned char *s, size_t n);

/* Length of the longest prefix of s[0..n) made of whole valid UTF-8 characters
 * followed by no invalid bytes: returns n when the whole text is valid. */
size_t utf8_valid_prefix(const char *s, size_t n);

/* The code point of the one valid character at s (n bytes available) into *cp; returns
 * its length, or 0 when the bytes there are not a valid, complete sequence. */
size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* UTF-8 of code point cp (<= 0x10FFFF, not a surrogate) into out[0..4); returns the
 * length (1..4), or 0 for a value that is not a Unicode scalar value. */
size_t utf8_encode(uint32_t cp, unsigned char *out);

#endif
