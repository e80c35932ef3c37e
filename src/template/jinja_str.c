/* jinja_str.c — UTF-8 and the Python str algorithms templates rely on: strip, split,
 * splitlines, replace, case mapping, find/count, slicing, HTML escaping.
 * (%-formatting and str.format live in jinja_format.c.)
 *
 * Strings are UTF-8 byte ranges; Python semantics are by code point. Bytes that are not
 * valid UTF-8 decode to U+DC80..U+DCFF (like Python's surrogateescape) and encode back
 * to the same byte, so nothing is lost or crashes on malformed input.
 *
 * Case mapping uses the C.UTF-8 locale's tables (towupper_l), created once; without
 * that locale only ASCII is mapped. Thread-safe. */
#define _GNU_SOURCE /* memmem */
#include "jinja.h"

#include <locale.h>
#include <pthread.h>
#include <string.h>
#include <wctype.h>

/* ---- UTF-8 ------------------------------------------------------------------------- */

uint32_t ju_decode(const char *s, size_t n, size_t *adv) {
    const unsigned char *u = (const unsigned char *)s;
    uint32_t cp;
    size_t len;
    if (u[0] < 0x80) {
        *adv = 1;
        return u[0];
    }
    if ((u[0] & 0xE0) == 0xC0) {
        len = 2;
        cp = u[0] & 0x1F;
    } else if ((u[0] & 0xF0) == 0xE0) {
        len = 3;
        cp = u[0] & 0x0F;
    } else if ((u[0] & 0xF8) == 0xF0) {
        len = 4;
        cp = u[0] & 0x07;
    } else {
        goto bad;
    }
    if (len > n) goto bad;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) goto bad;
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        goto bad;
    *adv = len;
    return cp;
bad:
    *adv = 1;
    return 0xDC00 + u[0];
}

size_t ju_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp >= 0xDC80 && cp <= 0xDCFF) { /* an undecodable byte: give it back */
        out[0] = (char)(cp - 0xDC00);
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool ju_is_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

size_t ju_len(const char *s, size_t n) {
    size_t count = 0, i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
        } else {
            size_t adv;
            ju_decode(s + i, n - i, &adv);
            i += adv;
        }
        count++;
    }
    return count;
}

size_t ju_offset(const char *s, size_t n, size_t idx) {
    size_t i = 0;
    while (idx > 0 && i < n) {
        size_t adv = 1;
        if ((unsigned char)s[i] >= 0x80) ju_decode(s + i, n - i, &adv);
        i += adv;
        idx--;
    }
    return i;
}

/* ---- character classes ------------------------------------------------------------ */

static locale_t g_utf8_loc;
static pthread_once_t g_loc_once = PTHREAD_ONCE_INIT;

static void loc_init(void) {
    g_utf8_loc = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
    if (!g_utf8_loc) g_utf8_loc = newlocale(LC_ALL_MASK, "C.utf8", (locale_t)0);
}

static locale_t utf8_loc(void) {
    pthread_once(&g_loc_once, loc_init);
    return g_utf8_loc;
}

locale_t ju_locale(void) { return utf8_loc(); }

bool ju_isspace(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

bool ju_islinebreak(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
           cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

bool ju_isalpha(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    if (cp >= 0xDC80 && cp <= 0xDCFF) return false;
    locale_t l = utf8_loc();
    return l ? iswalpha_l((wint_t)cp, l) != 0 : false;
}

bool ju_isdigit(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    if (cp >= 0xDC80 && cp <= 0xDCFF) return false;
    locale_t l = utf8_loc();
    return l ? iswdigit_l((wint_t)cp, l) != 0 : false;
}

bool ju_isalnum(uint32_t cp) { return ju_isalpha(cp) || ju_isdigit(cp); }

uint32_t ju_upper(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    if (cp >= 0xDC80 && cp <= 0xDCFF) return cp;
    locale_t l = utf8_loc();
    return l ? (uint32_t)towupper_l((wint_t)cp, l) : cp;
}

uint32_t ju_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    if (cp >= 0xDC80 && cp <= 0xDCFF) return cp;
    locale_t l = utf8_loc();
    return l ? (uint32_t)towlower_l((wint_t)cp, l) : cp;
}

bool ju_iscased(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    if (cp >= 0xDC80 && cp <= 0xDCFF) return false;
    locale_t l = utf8_loc();
    if (!l) return false;
    return iswupper_l((wint_t)cp, l) || iswlower_l((wint_t)cp, l) ||
           towupper_l((wint_t)cp, l) != (wint_t)cp || towlower_l((wint_t)cp, l) != (wint_t)cp;
}

/* ---- strip / split ------------------------------------------------------------------ */

static bool in_chars(uint32_t cp, jv chars) {
    if (chars.t != JV_STR) return ju_isspace(cp);
    size_t i = 0;
    while (i < chars.n) {
        size_t adv;
        if (ju_decode(chars.s + i, chars.n - i, &adv) == cp) return true;
        i += adv;
    }
    return false;
}

/* start of the code point that ends at byte e (e > 0) */
static size_t prev_cp(const char *s, size_t e) {
    size_t b = e - 1;
    size_t lim = e >= 4 ? e - 4 : 0;
    while (b > lim && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
    size_t adv;
    ju_decode(s + b, e - b, &adv);
    if (b + adv != e) return e - 1; /* malformed: step one byte */
    return b;
}

jv ju_strip(jr *r, jv s, jv chars, bool left, bool right) {
    (void)r;
    if (chars.t != JV_STR && chars.t != JV_NONE && chars.t != JV_MISSING)
        jr_type_error(r, "strip arg must be None or str");
    size_t b = 0, e = s.n;
    if (left)
        while (b < e) {
            size_t adv;
            uint32_t cp = ju_decode(s.s + b, e - b, &adv);
            if (!in_chars(cp, chars)) break;
            b += adv;
        }
    if (right)
        while (e > b) {
            size_t p = prev_cp(s.s, e);
            size_t adv;
            uint32_t cp = ju_decode(s.s + p, e - p, &adv);
            if (!in_chars(cp, chars)) break;
            e = p;
        }
    return jv_str(s.s + b, e - b);
}

static size_t next_space(const char *s, size_t i, size_t n, bool want_space) {
    while (i < n) {
        size_t adv;
        uint32_t cp = ju_decode(s + i, n - i, &adv);
        if (ju_isspace(cp) == want_space) return i;
        i += adv;
    }
    return n;
}

static jv split_ws(jr *r, jv s, int64_t maxsplit) {
    jv_list *l = jv_list_new(r, 0);
    size_t i = 0, n = s.n;
    uint64_t left = maxsplit < 0 ? UINT64_MAX : (uint64_t)maxsplit;
    while (left-- > 0) {
        i = next_space(s.s, i, n, false);
        if (i == n) break;
        size_t j = i;
        i = next_space(s.s, i, n, true);
        jv_list_push(r, l, jv_str(s.s + j, i - j));
    }
    if (i < n) {
        i = next_space(s.s, i, n, false);
        if (i != n) jv_list_push(r, l, jv_str(s.s + i, n - i));
    }
    return jv_list_val(l);
}

static jv rsplit_ws(jr *r, jv s, int64_t maxsplit) {
    jv_list *l = jv_list_new(r, 0);
    size_t e = s.n;
    uint64_t left = maxsplit < 0 ? UINT64_MAX : (uint64_t)maxsplit;
    /* walk backwards by code point */
    while (left-- > 0) {
        while (e > 0) {
            size_t p = prev_cp(s.s, e), adv;
            if (!ju_isspace(ju_decode(s.s + p, e - p, &adv))) break;
            e = p;
        }
        if (e == 0) break;
        size_t j = e;
        while (e > 0) {
            size_t p = prev_cp(s.s, e), adv;
            if (ju_isspace(ju_decode(s.s + p, e - p, &adv))) break;
            e = p;
        }
        jv_list_push(r, l, jv_str(s.s + e, j - e));
    }
    if (e > 0) {
        while (e > 0) {
            size_t p = prev_cp(s.s, e), adv;
            if (!ju_isspace(ju_decode(s.s + p, e - p, &adv))) break;
            e = p;
        }
        if (e > 0) jv_list_push(r, l, jv_str(s.s, e));
    }
    /* reverse into order */
    for (size_t a = 0, b = l->n ? l->n - 1 : 0; a < b; a++, b--) {
        jv t = l->v[a];
        l->v[a] = l->v[b];
        l->v[b] = t;
    }
    return jv_list_val(l);
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    return memmem(h, hn, nd, nn);
}

static const char *rfind_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

jv ju_split(jr *r, jv s, jv sep, int64_t maxsplit, bool from_right) {
    if (sep.t == JV_NONE || sep.t == JV_MISSING)
        return from_right ? rsplit_ws(r, s, maxsplit) : split_ws(r, s, maxsplit);
    if (sep.t != JV_STR) jr_type_error(r, "must be str or None, not %s", jv_type_name(sep));
    if (sep.n == 0) jr_type_error(r, "empty separator");
    jv_list *l = jv_list_new(r, 0);
    uint64_t left = maxsplit < 0 ? UINT64_MAX : (uint64_t)maxsplit;
    if (!from_right) {
        size_t i = 0;
        while (left-- > 0) {
            const char *p = find_bytes(s.s + i, s.n - i, sep.s, sep.n);
            if (!p) break;
            size_t at = (size_t)(p - s.s);
            jv_list_push(r, l, jv_str(s.s + i, at - i));
            i = at + sep.n;
        }
        jv_list_push(r, l, jv_str(s.s + i, s.n - i));
        return jv_list_val(l);
    }
    size_t e = s.n;
    while (left-- > 0) {
        const char *p = rfind_bytes(s.s, e, sep.s, sep.n);
        if (!p) break;
        size_t at = (size_t)(p - s.s);
        jv_list_push(r, l, jv_str(s.s + at + sep.n, e - at - sep.n));
        e = at;
    }
    jv_list_push(r, l, jv_str(s.s, e));
    for (size_t a = 0, b = l->n - 1; a < b; a++, b--) {
        jv t = l->v[a];
        l->v[a] = l->v[b];
        l->v[b] = t;
    }
    return jv_list_val(l);
}

jv ju_splitlines(jr *r, jv s, bool keepends) {
    jv_list *l = jv_list_new(r, 0);
    size_t i = 0, start = 0;
    while (i < s.n) {
        size_t adv;
        uint32_t cp = ju_decode(s.s + i, s.n - i, &adv);
        if (ju_islinebreak(cp)) {
            size_t eol = i + adv;
            if (cp == '\r' && eol < s.n && s.s[eol] == '\n') eol++;
            jv_list_push(r, l, jv_str(s.s + start, (keepends ? eol : i) - start));
            start = i = eol;
        } else {
            i += adv;
        }
    }
    if (start < s.n) jv_list_push(r, l, jv_str(s.s + start, s.n - start));
    return jv_list_val(l);
}

jv ju_replace(jr *r, jv s, jv old, jv new_, int64_t count) {
    if (old.t != JV_STR || new_.t != JV_STR)
        jr_type_error(r, "replace() argument must be str, not %s",
                      jv_type_name(old.t != JV_STR ? old : new_));
    jbuf b = {0};
    uint64_t left = count < 0 ? UINT64_MAX : (uint64_t)count;
    if (old.n == 0) {
        size_t i = 0;
        while (true) {
            if (left > 0) {
                jbuf_put(r, &b, new_.s, new_.n);
                left--;
            }
            if (i >= s.n) break;
            size_t adv;
            ju_decode(s.s + i, s.n - i, &adv);
            jbuf_put(r, &b, s.s + i, adv);
            i += adv;
            if (left == 0) {
                jbuf_put(r, &b, s.s + i, s.n - i);
                break;
            }
        }
        return jb_take(r, &b);
    }
    size_t i = 0;
    while (left > 0) {
        const char *p = find_bytes(s.s + i, s.n - i, old.s, old.n);
        if (!p) break;
        size_t at = (size_t)(p - s.s);
        jbuf_put(r, &b, s.s + i, at - i);
        jbuf_put(r, &b, new_.s, new_.n);
        i = at + old.n;
        left--;
    }
    if (i == 0) return s;
    jbuf_put(r, &b, s.s + i, s.n - i);
    return jb_take(r, &b);
}

/* str.title: is the character before byte i cased? */
static bool prev_cased_before(jv s, size_t i) {
    if (i == 0) return false;
    size_t p = prev_cp(s.s, i), adv;
    return ju_iscased(ju_decode(s.s + p, i - p, &adv));
}

jv ju_case(jr *r, jv s, int mode) {
    jbuf b = {0};
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < s.n) {
        size_t adv;
        uint32_t cp = ju_decode(s.s + i, s.n - i, &adv), m = cp;
        switch (mode) {
        case 0: m = ju_lower(cp); break;
        case 1: m = ju_upper(cp); break;
        case 2: m = first ? ju_upper(cp) : ju_lower(cp); break;
        case 3:
            m = prev_cased ? ju_lower(cp) : ju_upper(cp);
            prev_cased = ju_iscased(cp);
            break;
        default: {
            uint32_t u = ju_upper(cp), lo = ju_lower(cp);
            m = u != cp ? u : lo;
        }
        }
        first = false;
        if (cp == 0xDF && m == cp && (mode == 1 || mode == 4 || ((mode == 2 || mode == 3) && ju_upper(cp) == cp &&
                                                                 (i == 0 || mode == 3)))) {
            /* the one common special casing: ß upper-cases to SS (title: Ss) */
            bool title = mode == 2 || mode == 3;
            if (mode == 3 && prev_cased_before(s, i)) {
                jbuf_put(r, &b, s.s + i, adv);
            } else {
                jbuf_put(r, &b, title ? "Ss" : "SS", 2);
            }
            i += adv;
            continue;
        }
        if (m == cp) {
            jbuf_put(r, &b, s.s + i, adv);
        } else {
            char enc[4];
            jbuf_put(r, &b, enc, ju_encode(m, enc));
        }
        i += adv;
    }
    return jb_take(r, &b);
}

/* ---- find / count / slicing -------------------------------------------------------- */

/* Python slice.indices(); *count = number of selected items */
void ju_slice_indices(jr *r, int64_t len, const jv *start, const jv *stop, const jv *step,
                      int64_t *s, int64_t *e, int64_t *st) {
    int64_t v[3];
    bool given[3];
    const jv *in[3] = {start, stop, step};
    for (int k = 0; k < 3; k++) {
        given[k] = in[k] && in[k]->t != JV_NONE && in[k]->t != JV_MISSING;
        if (!given[k]) continue;
        if (in[k]->t == JV_INT)
            v[k] = in[k]->i;
        else if (in[k]->t == JV_BOOL)
            v[k] = in[k]->b;
        else
            jr_type_error(r, "slice indices must be integers or None or have an __index__ method");
    }
    int64_t stp = given[2] ? v[2] : 1;
    if (stp == 0) jr_fail(r, IFD_ERR_TEMPLATE, "slice step cannot be zero");
    int64_t lo, hi;
    if (stp > 0) {
        lo = 0;
        hi = len;
    } else {
        lo = -1;
        hi = len - 1;
    }
    int64_t a, b;
    if (!given[0]) {
        a = stp > 0 ? lo : hi;
    } else {
        a = v[0];
        if (a < 0) {
            a += len;
            if (a < lo) a = lo;
        } else if (a > hi) {
            a = hi;
        }
    }
    if (!given[1]) {
        b = stp > 0 ? hi : lo;
    } else {
        b = v[1];
        if (b < 0) {
            b += len;
            if (b < lo) b = lo;
        } else if (b > hi) {
            b = hi;
        }
    }
    *s = a;
    *e = b;
    *st = stp;
}

int64_t ju_slice_count(int64_t a, int64_t b, int64_t st) {
    if (st > 0) return a < b ? (b - a - 1) / st + 1 : 0;
    return a > b ? (a - b - 1) / (-st) + 1 : 0;
}

jv ju_slice(jr *r, jv s, const jv *start, const jv *stop, const jv *step) {
    bool ascii = ju_is_ascii(s.s, s.n);
    int64_t len = ascii ? (int64_t)s.n : (int64_t)ju_len(s.s, s.n);
    int64_t a, b, st;
    ju_slice_indices(r, len, start, stop, step, &a, &b, &st);
    int64_t cnt = ju_slice_count(a, b, st);
    if (cnt <= 0) return jv_str("", 0);
    if (st == 1) {
        size_t ba = ascii ? (size_t)a : ju_offset(s.s, s.n, (size_t)a);
        size_t bb = ascii ? (size_t)b : ba + ju_offset(s.s + ba, s.n - ba, (size_t)(b - a));
        return jv_str(s.s + ba, bb - ba);
    }
    jbuf out = {0};
    if (ascii) {
        for (int64_t k = 0, i = a; k < cnt; k++, i += st) jbuf_put(r, &out, s.s + i, 1);
        return jb_take(r, &out);
    }
    /* non-ASCII with a step: index every code point once */
    size_t *offs = ja_alloc_array(&r->arena, (size_t)len + 1, sizeof(size_t));
    size_t i = 0;
    for (int64_t k = 0; k < len; k++) {
        offs[k] = i;
        size_t adv;
        ju_decode(s.s + i, s.n - i, &adv);
        i += adv;
    }
    offs[len] = s.n;
    for (int64_t k = 0, c = a; k < cnt; k++, c += st)
        jbuf_put(r, &out, s.s + offs[c], offs[c + 1] - offs[c]);
    return jb_take(r, &out);
}

int64_t ju_find(jv hay, jv needle, int64_t start, int64_t end, bool reverse) {
    /* start/end are code point indices already clamped to [0, len] */
    bool ascii = ju_is_ascii(hay.s, hay.n);
    size_t bs = ascii ? (size_t)start : ju_offset(hay.s, hay.n, (size_t)start);
    size_t be = ascii ? (size_t)end : ju_offset(hay.s, hay.n, (size_t)end);
    if (be < bs) return -1;
    const char *p = reverse ? rfind_bytes(hay.s + bs, be - bs, needle.s, needle.n)
                            : find_bytes(hay.s + bs, be - bs, needle.s, needle.n);
    if (!p) return -1;
    size_t off = (size_t)(p - hay.s);
    return ascii ? (int64_t)off : (int64_t)ju_len(hay.s, off);
}

int64_t ju_count(jv hay, jv needle) {
    if (needle.n == 0) return (int64_t)ju_len(hay.s, hay.n) + 1;
    int64_t c = 0;
    size_t i = 0;
    while (i < hay.n) {
        const char *p = find_bytes(hay.s + i, hay.n - i, needle.s, needle.n);
        if (!p) break;
        c++;
        i = (size_t)(p - hay.s) + needle.n;
    }
    return c;
}

jv ju_html_escape(jr *r, jv s) {
    jbuf b = {0};
    size_t last = 0;
    for (size_t i = 0; i < s.n; i++) {
        const char *rep = NULL;
        switch (s.s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        default: break;
        }
        if (!rep) continue;
        jbuf_put(r, &b, s.s + last, i - last);
        jb_puts(r, &b, rep);
        last = i + 1;
    }
    if (last == 0) {
        s.safe = 1;
        return s;
    }
    jbuf_put(r, &b, s.s + last, s.n - last);
    jv out = jb_take(r, &b);
    out.safe = 1;
    return out;
}
