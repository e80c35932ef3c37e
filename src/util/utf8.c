/* utf8.c — strict UTF-8 validation (see utf8.h). Pure functions: any thread. */
#include "utf8.h"

int utf8_check(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return 0;
        unsigned b = s[i];
        unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return -(int)i;
    }
    return (int)need;
}

/* The second-byte ranges above are exactly what rejects overlong 3- and 4-byte forms,
 * surrogates (ED A0..BF) and code points past U+10FFFF, so a positive result is a
 * whole valid character; incomplete and invalid both mean "no character here". */
size_t utf8_char_len(const unsigned char *s, size_t n) {
    int r = utf8_check(s, n);
    return r > 0 ? (size_t)r : 0;
}

size_t utf8_valid_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_char_len((const unsigned char *)s + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    size_t len = utf8_char_len(s, n);
    if (len == 0) return 0;
    static const unsigned char lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t v = s[0] & lead_mask[len];
    for (size_t k = 1; k < len; k++) v = v << 6 | (s[k] & 0x3F);
    *cp = v;
    return len;
}

size_t utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
