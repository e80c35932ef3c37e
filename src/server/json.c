/* json.c — the strict JSON parser of json.h: recursive descent over the bytes (one
 * level of recursion per nesting level, bounded by max_depth), one cJSON node per
 * value, number literals kept in `valuestring`, and a sort of each object's keys for
 * the duplicate check (O(k log k), no hash an attacker could flood).
 *
 * json_write prints a tree back out. Assumes the C locale for strtod and printf
 * (inferd never calls setlocale). Any thread; no shared state. */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/utf8.h"

/* Where the parser is, for error paths: a chain from the value up to the root. */
typedef struct jpath {
    const struct jpath *up;
    const char *key; /* an object member's key; NULL for an array element */
    size_t index;
} jpath;

typedef struct jparser {
    const unsigned char *s;
    size_t n, i;
    int depth, max_depth;
    json_key_ok key_ok;
    json_error *err;
} jparser;

/* ---- errors ------------------------------------------------------------------------ */

static bool jp_key_shown(const jparser *p, const char *key) {
    return p->key_ok && strlen(key) < sizeof(((json_error *)0)->key) && p->key_ok(key);
}

/* Append at's components to b, root first. Returns false at the first component that
 * cannot be shown (a refused key, or no room left); nothing after it is appended. */
static bool jp_path_put(const jparser *p, const jpath *at, char *b, size_t cap, size_t *len) {
    if (!at) return true;
    if (!jp_path_put(p, at->up, b, cap, len)) return false;
    char part[96];
    int k;
    if (at->key) {
        if (!jp_key_shown(p, at->key)) return false;
        k = snprintf(part, sizeof part, "%s%s", *len ? "." : "", at->key);
    } else {
        k = snprintf(part, sizeof part, "[%zu]", at->index);
    }
    if (k < 0 || *len + (size_t)k >= cap) return false;
    memcpy(b + *len, part, (size_t)k + 1);
    *len += (size_t)k;
    return true;
}

/* Record the first error (later calls keep it). Always returns NULL. */
static void *jp_fail(jparser *p, json_status st, const char *what, size_t off, const jpath *at) {
    json_error *e = p->err;
    if (e->status != JSON_OK) return NULL;
    e->status = st;
    e->what = what;
    e->offset = off;
    e->line = 1;
    e->column = 1;
    for (size_t i = 0; i < off && i < p->n; i++) {
        if (p->s[i] == '\n') {
            e->line++;
            e->column = 1;
        } else if ((p->s[i] & 0xC0) != 0x80) { /* count characters, not bytes */
            e->column++;
        }
    }
    size_t len = 0;
    e->path[0] = 0;
    jp_path_put(p, at, e->path, sizeof e->path, &len);
    return NULL;
}

static void *jp_nomem(jparser *p) { return jp_fail(p, JSON_ERR_NOMEM, "out of memory", p->i, NULL); }

/* ---- scalars ----------------------------------------------------------------------- */

static void jp_skip_ws(jparser *p) {
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

static bool jp_is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int jp_hex_val(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits at s[i..i+4), all before end. */
static bool jp_hex4(const unsigned char *s, size_t i, size_t end, uint32_t *out) {
    if (i + 4 > end) return false;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; k++) {
        int h = jp_hex_val(s[i + k]);
        if (h < 0) return false;
        v = v << 4 | (uint32_t)h;
    }
    *out = v;
    return true;
}

static size_t jp_utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static bool jp_string_fail(jparser *p, char *o, json_status st, const char *what, size_t off, const jpath *at) {
    cJSON_free(o);
    jp_fail(p, st, what, off, at);
    return false;
}

/* The string at p->i (its opening quote) -> *out (cJSON_malloc'ed, NUL-terminated).
 * The input is valid UTF-8 already (checked once up front). at: the path the string's
 * errors belong to (a key's errors belong to its object). */
static bool jp_parse_string(jparser *p, const jpath *at, char **out) {
    const unsigned char *s = p->s;
    const size_t open = p->i, start = open + 1;
    size_t end = start;
    for (;;) { /* find the closing quote; escapes never grow, so its span bounds the output */
        if (end >= p->n) return jp_string_fail(p, NULL, JSON_ERR_SYNTAX, "unterminated string", open, at);
        if (s[end] == '"') break;
        if (s[end] < 0x20)
            return jp_string_fail(p, NULL, JSON_ERR_SYNTAX, "a control character in a string (it must be escaped)",
                               end, at);
        end += s[end] == '\\' ? 2 : 1;
    }
    char *o = cJSON_malloc(end - start + 1);
    if (!o) return jp_nomem(p), false;
    size_t k = 0;
    for (size_t i = start; i < end;) {
        if (s[i] != '\\') {
            o[k++] = (char)s[i++];
            continue;
        }
        /* the scan above skipped the byte after each backslash, so i + 1 < end */
        uint32_t cp;
        switch (s[i + 1]) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u': {
            if (!jp_hex4(s, i + 2, end, &cp))
                return jp_string_fail(p, o, JSON_ERR_SYNTAX, "an invalid \\u escape (four hex digits expected)", i, at);
            size_t len = 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return jp_string_fail(p, o, JSON_ERR_SYNTAX, "a lone UTF-16 surrogate in a \\u escape", i, at);
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its low half must follow */
                uint32_t lo;
                if (i + 12 > end || s[i + 6] != '\\' || s[i + 7] != 'u' || !jp_hex4(s, i + 8, end, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return jp_string_fail(p, o, JSON_ERR_SYNTAX, "a lone UTF-16 surrogate in a \\u escape", i, at);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                len = 12;
            }
            if (cp == 0) return jp_string_fail(p, o, JSON_ERR_NUL, "U+0000 (\\u0000) in a string", i, at);
            k += jp_utf8_put(cp, o + k);
            i += len;
            continue;
        }
        default: return jp_string_fail(p, o, JSON_ERR_SYNTAX, "an invalid escape sequence", i, at);
        }
        o[k++] = (char)cp;
        i += 2;
    }
    o[k] = 0;
    p->i = end + 1;
    *out = o;
    return true;
}

/* RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static cJSON *jp_parse_number(jparser *p, const jpath *at) {
    const unsigned char *s = p->s;
    const size_t st = p->i;
    size_t i = st;
    if (i < p->n && s[i] == '-') i++;
    if (i >= p->n || !jp_is_digit(s[i])) return jp_fail(p, JSON_ERR_SYNTAX, "an invalid number", st, at);
    if (s[i] == '0') {
        i++;
        if (i < p->n && jp_is_digit(s[i]))
            return jp_fail(p, JSON_ERR_SYNTAX, "a number with a leading zero", st, at);
    } else {
        while (i < p->n && jp_is_digit(s[i])) i++;
    }
    if (i < p->n && s[i] == '.') {
        i++;
        if (i >= p->n || !jp_is_digit(s[i])) return jp_fail(p, JSON_ERR_SYNTAX, "an invalid number", st, at);
        while (i < p->n && jp_is_digit(s[i])) i++;
    }
    if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < p->n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= p->n || !jp_is_digit(s[i])) return jp_fail(p, JSON_ERR_SYNTAX, "an invalid number", st, at);
        while (i < p->n && jp_is_digit(s[i])) i++;
    }
    const size_t len = i - st;
    char *lit = cJSON_malloc(len + 1);
    if (!lit) return jp_nomem(p);
    memcpy(lit, s + st, len);
    lit[len] = 0;
    cJSON *v = cJSON_CreateNumber(strtod(lit, NULL));
    if (!v) {
        cJSON_free(lit);
        return jp_nomem(p);
    }
    v->valuestring = lit;
    p->i = i;
    return v;
}

static cJSON *jp_parse_value(jparser *p, const jpath *at);

/* ---- containers -------------------------------------------------------------------- */

static cJSON *jp_parse_array(jparser *p, const jpath *at) {
    if (p->depth >= p->max_depth) return jp_fail(p, JSON_ERR_DEPTH, "arrays and objects nested too deeply", p->i, at);
    p->depth++;
    p->i++; /* [ */
    cJSON *a = cJSON_CreateArray();
    if (!a) return jp_nomem(p);
    jp_skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        p->depth--;
        return a;
    }
    for (size_t idx = 0;; idx++) {
        const jpath here = {at, NULL, idx};
        cJSON *v = jp_parse_value(p, &here);
        if (!v) goto fail;
        cJSON_AddItemToArray(a, v);
        jp_skip_ws(p);
        if (p->i >= p->n) {
            jp_fail(p, JSON_ERR_SYNTAX, "unexpected end of input", p->i, at);
            goto fail;
        }
        if (p->s[p->i] == ']') break;
        if (p->s[p->i] != ',') {
            jp_fail(p, JSON_ERR_SYNTAX, "expected ',' or ']'", p->i, at);
            goto fail;
        }
        p->i++;
    }
    p->i++;
    p->depth--;
    return a;
fail:
    cJSON_Delete(a);
    return NULL;
}

typedef struct jkey {
    const char *key; /* owned by the member node */
    size_t offset;   /* where the key starts in the input */
} jkey;

static int jkey_cmp(const void *a, const void *b) {
    const jkey *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Any key twice among keys[0..n)? Reports the duplicate that comes first in the input. */
static bool jp_check_duplicates(jparser *p, jkey *keys, size_t n, const jpath *at) {
    if (n < 2) return true;
    qsort(keys, n, sizeof *keys, jkey_cmp);
    const jkey *dup = NULL;
    for (size_t i = 1; i < n; i++)
        if (!strcmp(keys[i - 1].key, keys[i].key) && (!dup || keys[i].offset < dup->offset)) dup = &keys[i];
    if (!dup) return true;
    const jpath here = {at, dup->key, 0};
    jp_fail(p, JSON_ERR_DUPLICATE, "a duplicate key", dup->offset, &here);
    char full[sizeof p->err->path];
    size_t len = 0;
    if (jp_path_put(p, &here, full, sizeof full, &len)) /* named only when its whole path is */
        snprintf(p->err->key, sizeof p->err->key, "%s", dup->key);
    return false;
}

static cJSON *jp_parse_object(jparser *p, const jpath *at) {
    if (p->depth >= p->max_depth) return jp_fail(p, JSON_ERR_DEPTH, "arrays and objects nested too deeply", p->i, at);
    p->depth++;
    p->i++; /* { */
    jkey few[16], *keys = few;
    size_t n_keys = 0, cap = IFD_ARRAY_LEN(few);
    cJSON *o = cJSON_CreateObject();
    if (!o) return jp_nomem(p);
    jp_skip_ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        p->depth--;
        return o;
    }
    for (;;) {
        jp_skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != '"') {
            jp_fail(p, JSON_ERR_SYNTAX, p->i >= p->n ? "unexpected end of input" : "expected a string key", p->i, at);
            goto fail;
        }
        const size_t key_off = p->i;
        char *key;
        if (!jp_parse_string(p, at, &key)) goto fail;
        if (n_keys == cap) {
            jkey *k = malloc(sizeof *k * cap * 2);
            if (!k) {
                cJSON_free(key);
                jp_nomem(p);
                goto fail;
            }
            memcpy(k, keys, sizeof *k * n_keys);
            if (keys != few) free(keys);
            keys = k;
            cap *= 2;
        }
        jp_skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ':') {
            cJSON_free(key);
            jp_fail(p, JSON_ERR_SYNTAX, p->i >= p->n ? "unexpected end of input" : "expected ':'", p->i, at);
            goto fail;
        }
        p->i++;
        const jpath here = {at, key, 0};
        cJSON *v = jp_parse_value(p, &here);
        if (!v) {
            cJSON_free(key);
            goto fail;
        }
        v->string = key;
        cJSON_AddItemToArray(o, v); /* links a member; the key is already set */
        keys[n_keys++] = (jkey){key, key_off};
        jp_skip_ws(p);
        if (p->i >= p->n) {
            jp_fail(p, JSON_ERR_SYNTAX, "unexpected end of input", p->i, at);
            goto fail;
        }
        if (p->s[p->i] == '}') break;
        if (p->s[p->i] != ',') {
            jp_fail(p, JSON_ERR_SYNTAX, "expected ',' or '}'", p->i, at);
            goto fail;
        }
        p->i++;
    }
    p->i++;
    if (!jp_check_duplicates(p, keys, n_keys, at)) goto fail;
    if (keys != few) free(keys);
    p->depth--;
    return o;
fail:
    if (keys != few) free(keys);
    cJSON_Delete(o);
    return NULL;
}

static bool jp_take_word(jparser *p, const char *w) {
    size_t k = strlen(w);
    if (p->n - p->i < k || memcmp(p->s + p->i, w, k)) return false;
    p->i += k;
    return true;
}

static cJSON *jp_parse_value(jparser *p, const jpath *at) {
    jp_skip_ws(p);
    if (p->i >= p->n) return jp_fail(p, JSON_ERR_SYNTAX, "unexpected end of input", p->i, at);
    const size_t st = p->i;
    cJSON *v = NULL;
    switch (p->s[p->i]) {
    case '{': return jp_parse_object(p, at);
    case '[': return jp_parse_array(p, at);
    case '"': {
        char *str;
        if (!jp_parse_string(p, at, &str)) return NULL;
        v = cJSON_CreateNull();
        if (!v) {
            cJSON_free(str);
            return jp_nomem(p);
        }
        v->type = cJSON_String; /* takes str as is: no second copy */
        v->valuestring = str;
        return v;
    }
    case 't':
        if (jp_take_word(p, "true")) v = cJSON_CreateTrue();
        break;
    case 'f':
        if (jp_take_word(p, "false")) v = cJSON_CreateFalse();
        break;
    case 'n':
        if (jp_take_word(p, "null")) v = cJSON_CreateNull();
        break;
    default:
        if (p->s[p->i] == '-' || jp_is_digit(p->s[p->i])) return jp_parse_number(p, at);
        return jp_fail(p, JSON_ERR_SYNTAX, "expected a value", st, at);
    }
    if (p->i == st) return jp_fail(p, JSON_ERR_SYNTAX, "expected a value", st, at);
    return v ? v : jp_nomem(p);
}

/* ---- the interface ----------------------------------------------------------------- */

cJSON *json_parse(const char *s, size_t n, const json_opts *opts, json_error *err) {
    memset(err, 0, sizeof *err);
    jparser p = {.s = (const unsigned char *)s, .n = n, .err = err};
    p.max_depth = opts && opts->max_depth > 0 ? opts->max_depth : JSON_DEFAULT_MAX_DEPTH;
    if (p.max_depth > JSON_HARD_MAX_DEPTH) p.max_depth = JSON_HARD_MAX_DEPTH;
    p.key_ok = opts ? opts->key_ok : NULL;
    size_t valid = n ? utf8_valid_prefix(s, n) : 0;
    if (valid != n) return jp_fail(&p, JSON_ERR_ENCODING, "invalid UTF-8", valid, NULL);
    cJSON *root = jp_parse_value(&p, NULL);
    if (!root) return NULL;
    jp_skip_ws(&p);
    if (p.i != n) {
        cJSON_Delete(root);
        return jp_fail(&p, JSON_ERR_SYNTAX, "data after the JSON value", p.i, NULL);
    }
    return root;
}

const char *json_number_literal(const cJSON *v) { return cJSON_IsNumber(v) ? v->valuestring : NULL; }

static json_int_status jp_literal_int64(const char *lit, int64_t *out) {
    const char *q = lit;
    bool neg = *q == '-';
    if (neg) q++;
    const char *int_digits = q;
    while (jp_is_digit((unsigned char)*q)) q++;
    const size_t n_int = (size_t)(q - int_digits);
    if (!n_int) return JSON_INT_NOT_INTEGER;
    const char *frac = q;
    size_t n_frac = 0;
    if (*q == '.') {
        frac = ++q;
        while (jp_is_digit((unsigned char)*q)) q++;
        n_frac = (size_t)(q - frac);
        if (!n_frac) return JSON_INT_NOT_INTEGER;
    }
    int64_t exp = 0;
    if (*q == 'e' || *q == 'E') {
        q++;
        bool eneg = *q == '-';
        if (*q == '+' || *q == '-') q++;
        if (!jp_is_digit((unsigned char)*q)) return JSON_INT_NOT_INTEGER;
        for (; jp_is_digit((unsigned char)*q); q++)
            if (exp < 1000000000000) exp = exp * 10 + (*q - '0'); /* saturates: far beyond any int64 */
        if (eneg) exp = -exp;
    }
    if (*q) return JSON_INT_NOT_INTEGER;
    /* the value is digits d[0..n) (the integer then the fraction digits) times
     * 10^(exp - n_frac); digit k has place n_int - 1 - k + exp */
    const size_t n = n_int + n_frac;
#define DIGIT(k) ((k) < n_int ? int_digits[k] : frac[(k) - n_int])
    size_t first = 0, last = n;
    while (first < n && DIGIT(first) == '0') first++;
    if (first == n) {
        *out = 0; /* 0, -0, 0.000e5 */
        return JSON_INT_OK;
    }
    while (DIGIT(last - 1) == '0') last--;
    const int64_t low_place = (int64_t)n_int - (int64_t)last + exp; /* place of the last nonzero digit */
    const int64_t high_place = (int64_t)n_int - 1 - (int64_t)first + exp;
    if (low_place < 0) return JSON_INT_NOT_INTEGER;
    if (high_place > 18) return JSON_INT_RANGE; /* >= 10^19 > 2^63 */
    uint64_t mag = 0; /* at most 19 digits: fits */
    for (size_t k = first; k < last; k++) mag = mag * 10 + (uint64_t)(DIGIT(k) - '0');
    for (int64_t z = 0; z < low_place; z++) mag *= 10;
#undef DIGIT
    if (neg) {
        if (mag > (uint64_t)INT64_MAX + 1) return JSON_INT_RANGE;
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX) return JSON_INT_RANGE;
        *out = (int64_t)mag;
    }
    return JSON_INT_OK;
}

json_int_status json_int64(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return JSON_INT_NOT_INTEGER;
    if (v->valuestring) return jp_literal_int64(v->valuestring, out);
    const double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) return JSON_INT_NOT_INTEGER;
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return JSON_INT_RANGE;
    *out = (int64_t)d;
    return JSON_INT_OK;
}

/* ---- output ------------------------------------------------------------------------ */

void json_write(sbuf *o, const cJSON *v) {
    if (!v) {
        sbuf_puts(o, "null");
        return;
    }
    switch (v->type & 0xff) {
    case cJSON_NULL: sbuf_puts(o, "null"); break;
    case cJSON_False: sbuf_puts(o, "false"); break;
    case cJSON_True: sbuf_puts(o, "true"); break;
    case cJSON_Raw: sbuf_puts(o, v->valuestring ? v->valuestring : "null"); break;
    case cJSON_String: sbuf_json_str(o, v->valuestring, strlen(v->valuestring)); break;
    case cJSON_Number: {
        const double d = v->valuedouble;
        if (v->valuestring) sbuf_puts(o, v->valuestring);
        else if (isfinite(d) && d == floor(d) && fabs(d) < 9007199254740992.0) sbuf_printf(o, "%lld", (long long)d);
        else if (isfinite(d)) sbuf_printf(o, "%.17g", d);
        else sbuf_json_num(o, d);
        break;
    }
    case cJSON_Array:
    case cJSON_Object: {
        const bool obj = (v->type & 0xff) == cJSON_Object;
        sbuf_puts(o, obj ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) sbuf_puts(o, ",");
            if (obj) {
                const char *k = c->string ? c->string : "";
                sbuf_json_str(o, k, strlen(k));
                sbuf_puts(o, ":");
            }
            json_write(o, c);
        }
        sbuf_puts(o, obj ? "}" : "]");
        break;
    }
    default: sbuf_puts(o, "null"); break;
    }
}
