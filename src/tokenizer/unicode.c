/* unicode.c — UTF-8 decoding/encoding, category flags lookup and the GPT-2 byte map
 * for the tokenizers. Pure functions over read-only tables: thread-safe. */
#include "unicode.h"

uint16_t unicode_flags(uint32_t cpt) {
    if (cpt >= UNICODE_MAX_CPT) return UNICODE_F_UNDEFINED;
    /* last range whose start <= cpt; unicode_range_start[0] == 0 */
    size_t lo = 0, hi = unicode_n_ranges;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (unicode_range_start[mid] <= cpt)
            lo = mid;
        else
            hi = mid;
    }
    return unicode_range_flags[lo];
}

size_t unicode_decode_lenient(const char *str, size_t n, uint32_t *out) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, k = 0;
    while (i < n) {
        unsigned c = s[i];
        uint32_t cpt = UNICODE_REPLACEMENT;
        size_t len = 1;
        if (!(c & 0x80)) {
            cpt = c;
        } else if (!(c & 0x40)) {
            /* continuation byte as lead: invalid */
        } else if (!(c & 0x20)) {
            if (i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
                cpt = ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
                len = 2;
            }
        } else if (!(c & 0x10)) {
            if (i + 2 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
                cpt = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
                len = 3;
            }
        } else if (!(c & 0x08)) {
            if (i + 3 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 &&
                (s[i + 3] & 0xC0) == 0x80) {
                uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                             ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
                if (v < UNICODE_MAX_CPT) {
                    cpt = v;
                    len = 4;
                }
            }
        }
        out[k++] = cpt;
        i += len;
    }
    return k;
}

size_t unicode_encode(uint32_t cpt, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cpt <= 0x7F) {
        o[0] = (unsigned char)cpt;
        return 1;
    }
    if (cpt <= 0x7FF) {
        o[0] = (unsigned char)(0xC0 | (cpt >> 6));
        o[1] = (unsigned char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt <= 0xFFFF) {
        o[0] = (unsigned char)(0xE0 | (cpt >> 12));
        o[1] = (unsigned char)(0x80 | ((cpt >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    if (cpt >= UNICODE_MAX_CPT) cpt = UNICODE_REPLACEMENT; /* callers never pass these */
    if (cpt <= 0xFFFF) return unicode_encode(cpt, out);
    o[0] = (unsigned char)(0xF0 | (cpt >> 18));
    o[1] = (unsigned char)(0x80 | ((cpt >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cpt >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cpt & 0x3F));
    return 4;
}

int unicode_cpt_to_byte(uint32_t cpt) {
    /* The map sends 188 printable bytes to themselves and the other 68, in byte order
     * (0x00-0x20, 0x7F-0xA0, 0xAD), to U+0100..U+0143. */
    if (cpt < 256) return unicode_gpt2_byte_to_cpt[cpt] == cpt ? (int)cpt : -1;
    uint32_t nth = cpt - 256;
    if (nth < 33) return (int)nth;
    if (nth < 67) return (int)(0x7F + nth - 33);
    if (nth == 67) return 0xAD;
    return -1;
}
