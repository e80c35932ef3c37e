/* grammar_json_prim.c — the pieces of JSON the schema front end composes: bounded
 * whitespace, string characters (raw code points and escapes, never a surrogate \u),
 * strings by length in code points, the formats (date, time, date-time, uuid, email,
 * ipv4: simple subsets that always validate), exact decimal integer ranges, bounded
 * numbers, and any JSON value / object / array. Each shared piece is built once per
 * jprim. Any thread (a jprim belongs to its builder's owner). */
#include "grammar_json_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQ(b, ...) gb_seq((b), (const gsym[]){__VA_ARGS__}, (int32_t)(sizeof((gsym[]){__VA_ARGS__}) / sizeof(gsym)))
#define CHOICE(b, ...)                                                                                                 \
    gb_choice((b), (const gsym[]){__VA_ARGS__}, (int32_t)(sizeof((gsym[]){__VA_ARGS__}) / sizeof(gsym)))

void jp_init(jprim *p, gram_builder *b) {
    *p = (jprim){.b = b};
    p->ws = p->digit = p->hex = p->str_char = p->string = p->number = p->integer = JP_UNSET;
    p->value = p->object = p->array = JP_UNSET;
}

void jp_deinit(jprim *p) {
    free(p->chain);
    p->chain = NULL;
    p->n_chain = 0;
}

/* A shared piece already built (after a builder error nothing is trusted: every later
 * call fails anyway). */
static bool cached(const jprim *p, gsym v) { return v != JP_UNSET && !gb_error(p->b); }

/* bytes of a C string as a one-byte-per-position set: "[abc]" style */
static gsym oneof(jprim *p, const char *chars) {
    uint32_t bits[8] = {0};
    for (const char *c = chars; *c; c++) bits[(uint8_t)*c >> 5] |= 1u << (*c & 31);
    return gb_byteset(p->b, bits);
}

gsym jp_lit(jprim *p, const char *s) { return gb_literal(p->b, s, strlen(s)); }

gsym jp_ws(jprim *p) {
    if (!cached(p, p->ws)) {
        /* nothing, one space, or one newline and an indentation: compact, ", "-separated
         * and pretty-printed JSON, never a run a model could pad to max_tokens with */
        gsym nl[2] = {gb_byte(p->b, '\n'), gb_repeat(p->b, oneof(p, " \t"), 0, GRAM_JSON_MAX_WS)};
        gsym alts[3] = {gb_empty(p->b), gb_byte(p->b, ' '), gb_seq(p->b, nl, 2)};
        p->ws = gb_choice(p->b, alts, 3);
    }
    return p->ws;
}

static gsym digit(jprim *p) {
    if (!cached(p, p->digit)) p->digit = gb_byterange(p->b, '0', '9');
    return p->digit;
}

static gsym hexdig(jprim *p) {
    if (!cached(p, p->hex)) {
        uint32_t bits[8] = {0};
        for (const char *c = "0123456789abcdefABCDEF"; *c; c++) bits[(uint8_t)*c >> 5] |= 1u << (*c & 31);
        p->hex = gb_byteset(p->b, bits);
    }
    return p->hex;
}

/* One character of a JSON string as written: a raw code point other than `"`, `\` and
 * U+0000..U+001F, or an escape (\uXXXX never a surrogate). */
static gsym str_char(jprim *p) {
    if (cached(p, p->str_char)) return p->str_char;
    gram_builder *b = p->b;
    static const uint32_t raw[3][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
    gsym h = hexdig(p);
    gsym u = CHOICE(b, SEQ(b, oneof(p, "0123456789abcABC"), h, h, h), SEQ(b, oneof(p, "dD"), gb_byterange(b, '0', '7'), h, h),
                    SEQ(b, oneof(p, "efEF"), h, h, h));
    gsym esc = SEQ(b, gb_byte(b, '\\'), CHOICE(b, oneof(p, "\"\\/bfnrt"), SEQ(b, gb_byte(b, 'u'), u)));
    p->str_char = CHOICE(b, gb_codepoints(b, raw, 3, false), esc);
    return p->str_char;
}

/* The tails of x repeated: chain[k] matches x{0,k} (chain[0] the empty string); kept
 * for the string character, which every bounded string shares. */
static gsym char_tail(jprim *p, int64_t k) {
    if (gb_error(p->b)) return -1;
    if (k >= p->n_chain) {
        gsym *q = realloc(p->chain, sizeof *q * (size_t)(k + 1));
        if (!q) return gb_fail(p->b, "out of memory");
        p->chain = q;
        gsym x = str_char(p);
        if (!p->n_chain) p->chain[p->n_chain++] = gb_empty(p->b);
        for (; p->n_chain <= k; p->n_chain++) { /* chain[i] ::= x chain[i-1] | "" */
            int32_t r = gb_rule(p->b, NULL, 0);
            gsym two[2] = {x, p->chain[p->n_chain - 1]};
            if (r < 0 || gb_alt(p->b, r, two, 2) || gb_alt(p->b, r, NULL, 0)) return -1;
            p->chain[p->n_chain] = r;
        }
    }
    return p->chain[k];
}

gsym jp_repeat(jprim *p, gsym x, int64_t min, int64_t max) {
    gram_builder *b = p->b;
    if (max >= 0 && max - min > GRAM_MAX_REPEAT) max = min + GRAM_MAX_REPEAT;
    gsym parts[64];
    int32_t n = 0;
    gsym full = -1;
    while (min > GRAM_MAX_REPEAT) {
        if (n >= 60) return gb_fail(b, "repetition too long (more than %d)", 60 * GRAM_MAX_REPEAT);
        if (full == -1) full = gb_repeat(b, x, GRAM_MAX_REPEAT, GRAM_MAX_REPEAT);
        parts[n++] = full;
        min -= GRAM_MAX_REPEAT;
        if (max >= 0) max -= GRAM_MAX_REPEAT;
    }
    if (x == p->str_char && max >= 0) {
        /* x{min} then the shared tail x{0,max-min} */
        gsym t = char_tail(p, max - min);
        if (min) parts[n++] = gb_repeat(b, x, (int32_t)min, (int32_t)min);
        parts[n++] = t;
    } else {
        parts[n++] = gb_repeat(b, x, (int32_t)min, (int32_t)max);
    }
    return gb_seq(b, parts, n);
}

gsym jp_string_any(jprim *p) {
    if (!cached(p, p->string)) {
        gsym q = gb_byte(p->b, '"');
        p->string = SEQ(p->b, q, gb_repeat(p->b, str_char(p), 0, -1), q);
    }
    return p->string;
}

gsym jp_string(jprim *p, int64_t min, int64_t max) {
    if (min == 0 && max < 0) return jp_string_any(p);
    gsym q = gb_byte(p->b, '"');
    return SEQ(p->b, q, jp_repeat(p, str_char(p), min, max), q);
}

/* ---- formats -------------------------------------------------------------------------------- */
/* two digits "00".."hi" (hi < 100, as text "hi") */
static gsym two_digits(jprim *p, int hi) {
    gram_builder *b = p->b;
    gsym d = digit(p);
    int t = hi / 10, u = hi % 10;
    gsym full = t > 0 ? SEQ(b, gb_byterange(b, '0', (uint8_t)('0' + t - 1)), d) : -1;
    gsym last = SEQ(b, gb_byte(b, (uint8_t)('0' + t)), gb_byterange(b, '0', (uint8_t)('0' + u)));
    return t > 0 ? CHOICE(b, full, last) : last;
}

static gsym fmt_date(jprim *p) {
    gram_builder *b = p->b;
    gsym d = digit(p), dash = gb_byte(b, '-');
    gsym year = SEQ(b, gb_byterange(b, '1', '2'), d, d, d); /* 1000..2999: no year 0 */
    gsym mon_any = CHOICE(b, SEQ(b, gb_byte(b, '0'), gb_byterange(b, '1', '9')), SEQ(b, gb_byte(b, '1'), gb_byterange(b, '0', '2')));
    gsym day28 = CHOICE(b, SEQ(b, gb_byte(b, '0'), gb_byterange(b, '1', '9')), SEQ(b, gb_byte(b, '1'), d),
                        SEQ(b, gb_byte(b, '2'), gb_byterange(b, '0', '8')));
    gsym mon30 = CHOICE(b, SEQ(b, gb_byte(b, '0'), oneof(p, "13456789")), SEQ(b, gb_byte(b, '1'), gb_byterange(b, '0', '2')));
    gsym mon31 = CHOICE(b, SEQ(b, gb_byte(b, '0'), oneof(p, "13578")), SEQ(b, gb_byte(b, '1'), oneof(p, "02")));
    gsym md = CHOICE(b, SEQ(b, mon_any, dash, day28), SEQ(b, mon30, dash, CHOICE(b, jp_lit(p, "29"), jp_lit(p, "30"))),
                     SEQ(b, mon31, dash, jp_lit(p, "31")));
    return SEQ(b, year, dash, md);
}

static gsym fmt_time(jprim *p) {
    gram_builder *b = p->b;
    gsym colon = gb_byte(b, ':');
    gsym hh = two_digits(p, 23), mm = two_digits(p, 59);
    gsym frac = gb_repeat(b, SEQ(b, gb_byte(b, '.'), gb_repeat(b, digit(p), 1, 6)), 0, 1);
    gsym off = CHOICE(b, gb_byte(b, 'Z'), SEQ(b, oneof(p, "+-"), hh, colon, mm));
    return SEQ(b, hh, colon, mm, colon, mm, frac, off);
}

static gsym fmt_email(jprim *p) {
    gram_builder *b = p->b;
    static const uint32_t alnum[3][2] = {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}};
    gsym word = gb_repeat(b, gb_codepoints(b, alnum, 3, false), 1, 32);
    gsym dot = gb_byte(b, '.');
    gsym local = SEQ(b, word, gb_repeat(b, SEQ(b, dot, word), 0, 3));
    gsym domain = SEQ(b, word, gb_repeat(b, SEQ(b, dot, word), 1, 3));
    return SEQ(b, local, gb_byte(b, '@'), domain);
}

static gsym fmt_ipv4(jprim *p) {
    gram_builder *b = p->b;
    gsym octet = jp_uint_range(p, 0, 255), dot = gb_byte(b, '.');
    return SEQ(b, octet, dot, octet, dot, octet, dot, octet);
}

static gsym fmt_uuid(jprim *p) {
    gram_builder *b = p->b;
    gsym h = hexdig(p), dash = gb_byte(b, '-');
    return SEQ(b, gb_repeat(b, h, 8, 8), dash, gb_repeat(b, h, 4, 4), dash, gb_repeat(b, h, 4, 4), dash,
               gb_repeat(b, h, 4, 4), dash, gb_repeat(b, h, 12, 12));
}

static const char *const FORMATS[] = {"date", "time", "date-time", "uuid", "email", "ipv4"};

bool jp_format_known(const char *name) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(FORMATS); i++)
        if (!strcmp(name, FORMATS[i])) return true;
    return false;
}

gsym jp_format(jprim *p, const char *name) {
    gram_builder *b = p->b;
    gsym body;
    if (!strcmp(name, "date")) body = fmt_date(p);
    else if (!strcmp(name, "time")) body = fmt_time(p);
    else if (!strcmp(name, "date-time")) body = SEQ(b, fmt_date(p), gb_byte(b, 'T'), fmt_time(p));
    else if (!strcmp(name, "uuid")) body = fmt_uuid(p);
    else if (!strcmp(name, "email")) body = fmt_email(p);
    else if (!strcmp(name, "ipv4")) body = fmt_ipv4(p);
    else return -2;
    gsym q = gb_byte(b, '"');
    return SEQ(b, q, body, q);
}

/* ---- integers ------------------------------------------------------------------------------- */
static bool all_of(const char *s, char c, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] != c) return false;
    return true;
}

/* Digit strings of length len between x and y (x <= y, both len digits; leading zeros
 * are part of the range here). Splits on the first digit: x's own first digit followed
 * by x's rest up to all nines, the digits strictly between followed by anything, y's
 * first digit followed by all zeros up to y's rest; pieces that cover a whole first
 * digit merge into the middle. */
static gsym range_same(jprim *p, const char *x, const char *y, int len) {
    static const char nines[] = "99999999999999999999", zeros[] = "00000000000000000000";
    gram_builder *b = p->b;
    if (len == 0) return gb_empty(b);
    if (x[0] == y[0]) return SEQ(b, gb_byte(b, (uint8_t)x[0]), range_same(p, x + 1, y + 1, len - 1));
    gsym alts[3];
    int32_t n = 0;
    char lo = x[0], hi = y[0];
    if (!all_of(x + 1, '0', len - 1)) {
        alts[n++] = SEQ(b, gb_byte(b, (uint8_t)x[0]), range_same(p, x + 1, nines, len - 1));
        lo++;
    }
    if (!all_of(y + 1, '9', len - 1)) {
        alts[n++] = SEQ(b, gb_byte(b, (uint8_t)y[0]), range_same(p, zeros, y + 1, len - 1));
        hi--;
    }
    if (lo <= hi) {
        gsym first = gb_byterange(b, (uint8_t)lo, (uint8_t)hi);
        alts[n++] = len > 1 ? SEQ(b, first, gb_repeat(b, digit(p), len - 1, len - 1)) : SEQ(b, first);
    }
    return gb_choice(b, alts, n);
}

static int n_digits(uint64_t v) {
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

gsym jp_uint_range(jprim *p, uint64_t lo, uint64_t hi) {
    gram_builder *b = p->b;
    if (lo > hi) return gb_fail(b, "internal: empty integer range");
    gsym alts[21];
    int32_t n = 0;
    uint64_t first = 0, last = 9; /* the L-digit numbers */
    for (int L = 1; L <= 20; L++) {
        if (L > 1) {
            first = first ? first * 10 : 10;
            last = L == 20 ? UINT64_MAX : last * 10 + 9;
        }
        if (L < n_digits(lo) || L > n_digits(hi)) continue;
        uint64_t a = IFD_MAX(lo, first), z = IFD_MIN(hi, last);
        if (a > z) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%0*llu", L, (unsigned long long)a);
        snprintf(ys, sizeof ys, "%0*llu", L, (unsigned long long)z);
        alts[n++] = range_same(p, xs, ys, L);
    }
    return gb_choice(b, alts, n);
}

gsym jp_int_range(jprim *p, int64_t lo, int64_t hi) {
    gram_builder *b = p->b;
    if (lo > hi) return gb_fail(b, "internal: empty integer range");
    gsym alts[2];
    int32_t n = 0;
    if (lo < 0) { /* magnitudes of [lo, min(hi, -1)] */
        int64_t top = IFD_MIN(hi, -1);
        uint64_t mlo = (uint64_t)(-(top + 1)) + 1, mhi = (uint64_t)(-(lo + 1)) + 1;
        alts[n++] = SEQ(b, gb_byte(b, '-'), jp_uint_range(p, mlo, mhi));
    }
    if (hi >= 0) alts[n++] = jp_uint_range(p, (uint64_t)IFD_MAX(lo, 0), (uint64_t)hi);
    return gb_choice(b, alts, n);
}

gsym jp_integer_any(jprim *p) {
    if (!cached(p, p->integer)) p->integer = jp_int_range(p, INT64_MIN, INT64_MAX);
    return p->integer;
}

gsym jp_fraction(jprim *p) {
    return SEQ(p->b, gb_byte(p->b, '.'), gb_repeat(p->b, digit(p), 1, JP_NUM_FRAC_DIGITS));
}

gsym jp_number_any(jprim *p) {
    if (cached(p, p->number)) return p->number;
    gram_builder *b = p->b;
    gsym d = digit(p);
    gsym ip = CHOICE(b, gb_byte(b, '0'), SEQ(b, gb_byterange(b, '1', '9'), gb_repeat(b, d, 0, JP_NUM_INT_DIGITS - 1)));
    gsym ex = SEQ(b, oneof(p, "eE"), gb_repeat(b, oneof(p, "+-"), 0, 1), gb_repeat(b, d, 1, JP_NUM_EXP_DIGITS));
    p->number = SEQ(b, gb_repeat(b, gb_byte(b, '-'), 0, 1), ip, gb_repeat(b, jp_fraction(p), 0, 1), gb_repeat(b, ex, 0, 1));
    return p->number;
}

/* ---- any value ------------------------------------------------------------------------------- */
/* "[" ws (x ws ("," ws x ws)*)? "]", or the same with "{" "}" */
static gsym list_of(jprim *p, gsym x, char open, char close) {
    gram_builder *b = p->b;
    gsym ws = jp_ws(p);
    gsym more = gb_repeat(b, SEQ(b, gb_byte(b, ','), ws, x, ws), 0, -1);
    gsym body = gb_repeat(b, SEQ(b, x, ws, more), 0, 1);
    return SEQ(b, gb_byte(b, (uint8_t)open), ws, body, gb_byte(b, (uint8_t)close));
}

gsym jp_value(jprim *p) {
    if (cached(p, p->value)) return p->value;
    gram_builder *b = p->b;
    int32_t v = gb_rule(b, NULL, 0);
    if (v < 0) return -1;
    p->value = v;
    gsym ws = jp_ws(p);
    gsym member = SEQ(b, jp_string_any(p), ws, gb_byte(b, ':'), ws, v);
    p->object = list_of(p, member, '{', '}');
    p->array = list_of(p, v, '[', ']');
    gsym alts[] = {p->object, p->array, jp_string_any(p), jp_number_any(p), jp_lit(p, "true"), jp_lit(p, "false"),
                   jp_lit(p, "null")};
    for (size_t i = 0; i < IFD_ARRAY_LEN(alts); i++)
        if (gb_alt(b, v, &alts[i], 1)) return -1;
    return v;
}

gsym jp_object(jprim *p) {
    if (!cached(p, p->value)) jp_value(p);
    return gb_error(p->b) ? -1 : p->object;
}

gsym jp_array(jprim *p) {
    if (!cached(p, p->value)) jp_value(p);
    return gb_error(p->b) ? -1 : p->array;
}

/* ---- the public any-JSON rules ----------------------------------------------------------------- */
int gram_json_any_value(gram_builder *b, int32_t *rule) {
    jprim p;
    jp_init(&p, b);
    *rule = jp_value(&p);
    jp_deinit(&p);
    return gb_error(b) ? -1 : 0;
}

int gram_json_any_object(gram_builder *b, int32_t *rule) {
    jprim p;
    jp_init(&p, b);
    *rule = jp_object(&p);
    jp_deinit(&p);
    return gb_error(b) ? -1 : 0;
}
