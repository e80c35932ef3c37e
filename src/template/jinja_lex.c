/* jinja_lex.c — template text -> tokens, following jinja2's lexer as transformers
 * configures it: trim_blocks (one newline after a block or comment tag is dropped),
 * lstrip_blocks (spaces before a block/comment tag on its own line are dropped), `-`
 * and `+` whitespace control, {% raw %}, newlines normalized to \n and one trailing
 * newline removed (keep_trailing_newline=False).
 *
 * Does not parse: the parser (jinja_parse.c) consumes the token array. Runs once per
 * template, on the caller's thread. */
#include "jinja.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LEX_MAX_NESTING 256

typedef struct lex {
    jlexer *lx;
    const char *s;
    size_t n, pos;
    uint32_t line;
    bool line_starting;
} lex;

static int lex_err(lex *L, const char *fmt, ...) IFD_PRINTF(2, 3);
static int lex_err(lex *L, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return ifd_errf(L->lx->err, L->lx->err_bytes, IFD_ERR_TEMPLATE, "%s (line %u)", msg,
                    L->line);
}

static jtok *push(lex *L, uint8_t type) {
    jlexer *lx = L->lx;
    if (lx->n == lx->cap) {
        size_t nc = lx->cap ? lx->cap * 2 : 256;
        jtok *nt = ja_alloc_array(lx->arena, nc, sizeof(jtok));
        if (lx->n) memcpy(nt, lx->toks, lx->n * sizeof(jtok));
        lx->toks = nt;
        lx->cap = nc;
    }
    jtok *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    t->line = L->line;
    return t;
}

static uint32_t count_nl(const char *s, size_t n) {
    uint32_t c = 0;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    return c;
}

/* Python \s at s[i]: returns its byte length, 0 if not whitespace */
static size_t ws_at(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    size_t adv;
    uint32_t cp = ju_decode(s + i, n - i, &adv);
    return ju_isspace(cp) ? adv : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    size_t k;
    while ((k = ws_at(s, n, i)) > 0) i += k;
    return i;
}

/* text.rstrip() length */
static size_t rstrip_len(const char *s, size_t n) {
    while (n > 0) {
        size_t b = n - 1;
        while (b > 0 && n - b < 4 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        size_t adv;
        uint32_t cp = ju_decode(s + b, n - b, &adv);
        if (b + adv != n) {
            b = n - 1;
            cp = 0xDC00 + (unsigned char)s[b];
        }
        if (!ju_isspace(cp)) break;
        n = b;
    }
    return n;
}

/* Emit the data before a tag, applying `-` stripping or lstrip_blocks. */
static void emit_data(lex *L, const char *text, size_t len, char sign, bool is_var) {
    if (sign == '-') {
        len = rstrip_len(text, len);
    } else if (sign != '+' && !is_var) {
        size_t l_pos = 0;
        for (size_t i = len; i > 0; i--)
            if (text[i - 1] == '\n') {
                l_pos = i;
                break;
            }
        if ((l_pos > 0 || L->line_starting) && l_pos < len) {
            size_t e = skip_ws(text, len, l_pos);
            if (e == len) len = l_pos;
        }
    }
    if (len) {
        jtok *t = push(L, T_DATA);
        t->s = text;
        t->n = len;
    }
}

static bool at(lex *L, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= L->n && !memcmp(L->s + i, lit, k);
}

/* Try "{%(-|+|)\s*NAME\s*(+%}|-%}\s*|%}SUFFIX)" at i; returns end or 0. *sign gets
 * the sign after {%. trim: apply trim_blocks' optional newline. */
static size_t match_named_block(lex *L, size_t i, const char *name, bool trim, char *sign) {
    if (!at(L, i, "{%")) return 0;
    size_t p = i + 2;
    *sign = 0;
    if (p < L->n && (L->s[p] == '-' || L->s[p] == '+')) *sign = L->s[p++];
    p = skip_ws(L->s, L->n, p);
    if (!at(L, p, name)) return 0;
    p += strlen(name);
    p = skip_ws(L->s, L->n, p);
    if (at(L, p, "+%}")) return p + 3;
    if (at(L, p, "-%}")) return skip_ws(L->s, L->n, p + 3);
    if (at(L, p, "%}")) {
        p += 2;
        if (trim && p < L->n && L->s[p] == '\n') p++;
        return p;
    }
    return 0;
}

static int decode_string(lex *L, const char *s, size_t n, jtok *t) {
    char *out = ja_alloc(L->lx->arena, n * 4 + 1); /* \x escapes grow at most 4x */
    size_t k = 0;
    uint32_t pending_hi = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) {
            out[k++] = c;
            continue;
        }
        char e = s[++i];
        uint32_t cp = 0;
        int hex = 0;
        switch (e) {
        case '\n': continue;
        case '\\': out[k++] = '\\'; continue;
        case '\'': out[k++] = '\''; continue;
        case '"': out[k++] = '"'; continue;
        case 'a': out[k++] = '\a'; continue;
        case 'b': out[k++] = '\b'; continue;
        case 'f': out[k++] = '\f'; continue;
        case 'n': out[k++] = '\n'; continue;
        case 'r': out[k++] = '\r'; continue;
        case 't': out[k++] = '\t'; continue;
        case 'v': out[k++] = '\v'; continue;
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        case 'N': return lex_err(L, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                int d = 0;
                while (d < 3 && i < n && s[i] >= '0' && s[i] <= '7') cp = cp * 8 + (uint32_t)(s[i++] - '0'), d++;
                i--;
                break;
            }
            out[k++] = '\\';
            out[k++] = e;
            continue;
        }
        if (hex) {
            for (int d = 0; d < hex; d++) {
                char h = (i + 1 + (size_t)d < n) ? s[i + 1 + (size_t)d] : 0;
                int v = (h >= '0' && h <= '9')   ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
                if (v < 0)
                    return lex_err(L, "truncated \\%cXXXX escape", e);
                cp = cp * 16 + (uint32_t)v;
            }
            i += (size_t)hex;
            if (cp > 0x10FFFF) return lex_err(L, "illegal Unicode character");
        }
        /* join surrogate pairs written as two \u escapes */
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            pending_hi = cp;
            continue;
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF && pending_hi) {
            cp = 0x10000 + ((pending_hi - 0xD800) << 10) + (cp - 0xDC00);
            pending_hi = 0;
        } else if (cp >= 0xD800 && cp <= 0xDFFF) {
            cp = 0xFFFD;
        }
        if (pending_hi) {
            k += ju_encode(0xFFFD, out + k);
            pending_hi = 0;
        }
        k += ju_encode(cp, out + k);
    }
    if (pending_hi) k += ju_encode(0xFFFD, out + k);
    out[k] = 0;
    t->s = out;
    t->n = k;
    return IFD_OK;
}

static bool isdig(char c) { return c >= '0' && c <= '9'; }

/* (\d+_)*\d+ ; returns end or 0 */
static size_t match_digits(lex *L, size_t p) {
    if (p >= L->n || !isdig(L->s[p])) return 0;
    while (p < L->n) {
        if (isdig(L->s[p])) {
            p++;
        } else if (L->s[p] == '_' && p + 1 < L->n && isdig(L->s[p + 1])) {
            p++;
        } else {
            break;
        }
    }
    return p;
}

static size_t match_float(lex *L, size_t p) {
    if (p > 0 && L->s[p - 1] == '.') return 0;
    size_t q = match_digits(L, p);
    if (!q) return 0;
    size_t frac = 0;
    if (q < L->n && L->s[q] == '.') frac = match_digits(L, q + 1);
    size_t after = frac ? frac : q;
    if (after < L->n && (L->s[after] == 'e' || L->s[after] == 'E')) {
        size_t e = after + 1;
        if (e < L->n && (L->s[e] == '+' || L->s[e] == '-')) e++;
        size_t d = match_digits(L, e);
        if (d) return d;
    }
    return frac;
}

static size_t match_int(lex *L, size_t p, int *base) {
    const char *s = L->s;
    size_t n = L->n;
    *base = 10;
    if (p + 1 < n && s[p] == '0') {
        char c = (char)(s[p + 1] | 0x20);
        int b = c == 'b' ? 2 : c == 'o' ? 8 : c == 'x' ? 16 : 0;
        if (b) {
            size_t q = p + 2, digits = 0;
            while (q < n) {
                char d = (char)(s[q] | 0x20);
                if (s[q] == '_' && digits) {
                    char e2 = q + 1 < n ? (char)(s[q + 1] | 0x20) : 0;
                    int v2 = isdig(s[q + 1 < n ? q + 1 : q]) && q + 1 < n ? s[q + 1] - '0'
                             : (e2 >= 'a' && e2 <= 'f') ? e2 - 'a' + 10 : 99;
                    if (v2 >= b) break;
                    q++;
                    continue;
                }
                int v = isdig(s[q]) ? s[q] - '0' : (d >= 'a' && d <= 'f') ? d - 'a' + 10 : 99;
                if (v >= b) break;
                q++;
                digits++;
            }
            if (digits) {
                *base = b;
                return q;
            }
        }
    }
    if (p < n && s[p] >= '1' && s[p] <= '9') return match_digits(L, p);
    if (p < n && s[p] == '0') {
        size_t q = p + 1;
        while (q < n && (s[q] == '0' || (s[q] == '_' && q + 1 < n && s[q + 1] == '0'))) q++;
        return q;
    }
    return 0;
}

static bool name_start(unsigned char c) { return c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c >= 0x80; }
static bool name_char(unsigned char c) { return name_start(c) || isdig((char)c); }

static const struct {
    const char *s;
    uint8_t op;
} OPS[] = {
    {"//", TK_FLOORDIV}, {"**", TK_POW}, {"==", TK_EQ}, {"!=", TK_NE}, {">=", TK_GE},
    {"<=", TK_LE},       {"+", TK_ADD},  {"-", TK_SUB}, {"/", TK_DIV}, {"*", TK_MUL},
    {"%", TK_MOD},       {"~", TK_TILDE}, {"[", TK_LBRACKET}, {"]", TK_RBRACKET},
    {"(", TK_LPAREN},    {")", TK_RPAREN}, {"{", TK_LBRACE},  {"}", TK_RBRACE},
    {">", TK_GT},        {"<", TK_LT},   {"=", TK_ASSIGN}, {".", TK_DOT}, {":", TK_COLON},
    {"|", TK_PIPE},      {",", TK_COMMA}, {";", TK_SEMICOLON},
};

/* Tokens inside {% %} or {{ }} up to and including the end tag. */
static int lex_tag(lex *L, bool is_block) {
    char stack[LEX_MAX_NESTING];
    int depth = 0;
    const char *s = L->s;
    for (;;) {
        size_t p = L->pos;
        if (p >= L->n) return lex_err(L, "unexpected end of template inside a tag");
        if (depth == 0) {
            size_t end = 0;
            if (is_block) {
                if (at(L, p, "+%}"))
                    end = p + 3;
                else if (at(L, p, "-%}"))
                    end = skip_ws(s, L->n, p + 3);
                else if (at(L, p, "%}")) {
                    end = p + 2;
                    if (end < L->n && s[end] == '\n') end++;
                }
            } else {
                if (at(L, p, "-}}"))
                    end = skip_ws(s, L->n, p + 3);
                else if (at(L, p, "}}"))
                    end = p + 2;
            }
            if (end) {
                push(L, is_block ? T_BLOCK_END : T_VAR_END);
                L->line += count_nl(s + p, end - p);
                L->line_starting = s[end - 1] == '\n';
                L->pos = end;
                return IFD_OK;
            }
        }
        size_t w = skip_ws(s, L->n, p);
        if (w > p) {
            L->line += count_nl(s + p, w - p);
            L->pos = w;
            continue;
        }
        size_t q;
        int base;
        if ((q = match_float(L, p)) > 0) {
            jtok *t = push(L, T_FLOAT);
            char tmp[128];
            size_t k = 0;
            for (size_t i = p; i < q && k + 1 < sizeof(tmp); i++)
                if (s[i] != '_') tmp[k++] = s[i];
            tmp[k] = 0;
            t->f = strtod(tmp, NULL);
            L->pos = q;
            continue;
        }
        if ((q = match_int(L, p, &base)) > 0) {
            jtok *t = push(L, T_INT);
            size_t i = p + (base != 10 ? 2 : 0);
            uint64_t v = 0;
            double f = 0;
            bool big = false;
            for (; i < q; i++) {
                if (s[i] == '_') continue;
                char d = (char)(s[i] | 0x20);
                int dv = isdig(s[i]) ? s[i] - '0' : d - 'a' + 10;
                f = f * base + dv;
                if (v > (UINT64_MAX - (uint64_t)dv) / (uint64_t)base) big = true;
                v = v * (uint64_t)base + (uint64_t)dv;
            }
            if (big || v > (uint64_t)INT64_MAX) {
                t->big = true;
                t->f = f;
            } else {
                t->i = (int64_t)v;
            }
            L->pos = q;
            continue;
        }
        if (name_start((unsigned char)s[p])) {
            q = p + 1;
            while (q < L->n && name_char((unsigned char)s[q])) q++;
            jtok *t = push(L, T_NAME);
            t->s = ja_strndup(L->lx->arena, s + p, q - p);
            t->n = q - p;
            L->pos = q;
            continue;
        }
        if (s[p] == '\'' || s[p] == '"') {
            char quote = s[p];
            q = p + 1;
            while (q < L->n && s[q] != quote) q += (s[q] == '\\' && q + 1 < L->n) ? 2 : 1;
            if (q < L->n) {
                jtok *t = push(L, T_STRING);
                int rc = decode_string(L, s + p + 1, q - p - 1, t);
                if (rc) return rc;
                L->line += count_nl(s + p, q - p);
                L->pos = q + 1;
                continue;
            }
        }
        size_t oi;
        for (oi = 0; oi < IFD_ARRAY_LEN(OPS); oi++)
            if (at(L, p, OPS[oi].s)) break;
        if (oi == IFD_ARRAY_LEN(OPS)) {
            if ((unsigned char)s[p] >= 0x20 && (unsigned char)s[p] < 0x7f)
                return lex_err(L, "unexpected char '%c' at %zu", s[p], p);
            return lex_err(L, "unexpected char '\\x%02x' at %zu", (unsigned char)s[p], p);
        }
        uint8_t op = OPS[oi].op;
        if (op == TK_LBRACE || op == TK_LPAREN || op == TK_LBRACKET) {
            if (depth == LEX_MAX_NESTING) return lex_err(L, "brackets nested too deeply");
            stack[depth++] = op == TK_LBRACE ? '}' : op == TK_LPAREN ? ')' : ']';
        } else if (op == TK_RBRACE || op == TK_RPAREN || op == TK_RBRACKET) {
            if (!depth) return lex_err(L, "unexpected '%c'", s[p]);
            char want = stack[--depth];
            if (want != s[p]) return lex_err(L, "unexpected '%c', expected '%c'", s[p], want);
        }
        jtok *t = push(L, T_OP);
        t->op = op;
        L->pos = p + strlen(OPS[oi].s);
    }
}

int jinja_lex(jlexer *lx, const char *src, size_t n) {
    /* normalize newlines; drop one trailing newline */
    char *s = ja_alloc(lx->arena, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (k && s[k - 1] == '\n') k--;
    s[k] = 0;

    lex L = {.lx = lx, .s = s, .n = k, .pos = 0, .line = 1, .line_starting = true};
    while (L.pos < L.n) {
        size_t i = L.pos;
        const char *hit = NULL;
        while (i + 1 < L.n) {
            const char *b = memchr(s + i, '{', L.n - i - 1);
            if (!b) break;
            char c = b[1];
            if (c == '{' || c == '%' || c == '#') {
                hit = b;
                break;
            }
            i = (size_t)(b - s) + 1;
        }
        if (!hit) {
            jtok *t = push(&L, T_DATA);
            t->s = s + L.pos;
            t->n = L.n - L.pos;
            L.line += count_nl(t->s, t->n);
            break;
        }
        size_t tag = (size_t)(hit - s);
        char kind = hit[1];
        char sign = (tag + 2 < L.n && (s[tag + 2] == '-' || s[tag + 2] == '+')) ? s[tag + 2] : 0;
        const char *text = s + L.pos;
        size_t text_n = tag - L.pos;
        uint32_t text_lines = count_nl(text, text_n);

        if (kind == '%') {
            char rsign;
            size_t raw_end = match_named_block(&L, tag, "raw", false, &rsign);
            if (raw_end) {
                emit_data(&L, text, text_n, rsign, false);
                L.line += text_lines + count_nl(s + tag, raw_end - tag);
                L.line_starting = s[raw_end - 1] == '\n';
                /* find {% endraw %} */
                size_t p = raw_end, e = 0;
                char esign = 0;
                for (; p + 1 < L.n; p++) {
                    if (s[p] != '{' || s[p + 1] != '%') continue;
                    e = match_named_block(&L, p, "endraw", true, &esign);
                    if (e) break;
                }
                if (!e) return lex_err(&L, "Missing end of raw directive");
                emit_data(&L, s + raw_end, p - raw_end, esign, false);
                L.line += count_nl(s + raw_end, e - raw_end);
                L.line_starting = s[e - 1] == '\n';
                L.pos = e;
                continue;
            }
        }
        emit_data(&L, text, text_n, sign, kind == '{');
        L.line += text_lines;
        L.pos = tag + 2 + (sign ? 1 : 0);
        L.line_starting = false;
        if (kind == '#') {
            size_t p = L.pos, e = 0;
            for (; p < L.n; p++) {
                if (at(&L, p, "+#}")) {
                    e = p + 3;
                } else if (at(&L, p, "-#}")) {
                    e = skip_ws(s, L.n, p + 3);
                } else if (at(&L, p, "#}")) {
                    e = p + 2;
                    if (e < L.n && s[e] == '\n') e++;
                }
                if (e) break;
            }
            if (!e) return lex_err(&L, "Missing end of comment tag");
            L.line += count_nl(s + L.pos, e - L.pos);
            L.line_starting = s[e - 1] == '\n';
            L.pos = e;
            continue;
        }
        push(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN);
        int rc = lex_tag(&L, kind == '%');
        if (rc) return rc;
    }
    push(&L, T_EOF);
    return IFD_OK;
}
