/* tokenizer_decode.c — ids back to text: tok_piece (one token's bytes, as llama.cpp's
 * token_to_piece), tok_decode (their concatenation) and the incremental detokenizer
 * that only ever emits complete, valid UTF-8.
 *
 * tok_piece/tok_decode read an immutable tokenizer: thread-safe. A tok_detok belongs to
 * one sequence and one thread. */
#include <string.h>

#include "../util/common.h"
#include "../util/utf8.h"
#include "tokenizer_impl.h"
#include "unicode.h"

typedef void (*sink_fn)(void *ctx, const char *s, size_t n);

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Feed the decoded bytes of token id to sink; returns how many. */
static size_t piece_emit(const tokenizer *t, int32_t id, bool render_special, sink_fn sink, void *ctx) {
    if (id < 0 || id >= t->n_vocab) return 0;
    const tok_entry *e = &t->tok[id];
    const char *s = tok_entry_text(t, id);
    size_t n = e->len;
    switch (e->type) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNKNOWN:
        if (!render_special) return 0;
        /* fall through */
    case TOK_TYPE_USER_DEFINED: sink(ctx, s, n); return n;
    case TOK_TYPE_NORMAL: break;
    case TOK_TYPE_BYTE:
        if (t->kind != TOK_KIND_SPM) return 0; /* llama.cpp: byte tokens are SPM-only */
        if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
            char b = (char)(hexval(s[3]) * 16 + hexval(s[4]));
            sink(ctx, &b, 1);
            return 1;
        }
        sink(ctx, s, n); /* not of the <0xXX> form: the text as it is */
        return n;
    default: /* UNUSED, UNDEFINED: nothing, as in llama.cpp */ return 0;
    }

    size_t total = 0, run = 0; /* run: bytes of s not yet handed to sink */
    if (t->kind == TOK_KIND_SPM) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
                if (i > run) sink(ctx, s + run, i - run);
                total += i - run;
                sink(ctx, " ", 1);
                total++;
                i += 3;
                run = i;
            } else {
                i++;
            }
        }
        if (n > run) sink(ctx, s + run, n - run);
        return total + (n - run);
    }

    /* byte-level BPE: each character stands for one byte; characters outside the map
     * (llama.cpp prints an [UNK_BYTE_...] marker for them) pass through unchanged */
    for (size_t i = 0; i < n;) {
        uint32_t cpts[4];
        size_t len = unicode_len_utf8((unsigned char)s[i]);
        if (len > n - i) len = n - i;
        int b = unicode_decode_lenient(s + i, len, cpts) == 1 ? unicode_cpt_to_byte(cpts[0]) : -1;
        if (b >= 0) {
            char c = (char)b;
            sink(ctx, &c, 1);
            total++;
        } else {
            sink(ctx, s + i, len);
            total += len;
        }
        i += len;
    }
    return total;
}

typedef struct buf_sink {
    char *buf;
    size_t cap, n;
} buf_sink;

static void buf_write(void *ctx, const char *s, size_t n) {
    buf_sink *b = ctx;
    if (b->n < b->cap) {
        size_t k = IFD_MIN(n, b->cap - b->n);
        memcpy(b->buf + b->n, s, k);
    }
    b->n += n;
}

size_t tok_piece(const tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap) {
    buf_sink b = {.buf = buf, .cap = buf ? cap : 0};
    piece_emit(t, id, render_special, buf_write, &b);
    return b.n;
}

int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **out,
               size_t *out_bytes) {
    *out = NULL;
    if (out_bytes) *out_bytes = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (!ifd_add_ok(total, tok_piece(t, ids[i], render_special, NULL, 0), &total)) return IFD_ERR_LIMIT;
    if (total == SIZE_MAX) return IFD_ERR_LIMIT;
    char *s = malloc(total + 1);
    if (!s) return IFD_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += tok_piece(t, ids[i], render_special, s + k, total - k);
    s[k] = 0;
    *out = s;
    if (out_bytes) *out_bytes = k;
    return IFD_OK;
}

/* ---- incremental detokenizer ---------------------------------------------------------- */

typedef struct detok_sink {
    tok_detok *d;
    char *out;
    size_t cap, n;
} detok_sink;

static void out_write(detok_sink *o, const void *s, size_t n) {
    if (o->n + n > o->cap) return; /* does not fit: dropped, never cut mid-character */
    memcpy(o->out + o->n, s, n);
    o->n += n;
}

/* Add one byte to the held sequence and emit whatever is now decided. */
static void detok_byte(detok_sink *o, unsigned char c) {
    tok_detok *d = o->d;
    if (d->n_held == 0 && c < 0x80) {
        out_write(o, &c, 1);
        return;
    }
    d->held[d->n_held++] = c;
    while (d->n_held > 0) {
        int r = utf8_check(d->held, (size_t)d->n_held);
        if (r == 0) return; /* incomplete: hold */
        size_t k = r > 0 ? (size_t)r : (size_t)-r;
        if (r > 0)
            out_write(o, d->held, k);
        else
            out_write(o, "\xef\xbf\xbd", 3);
        memmove(d->held, d->held + k, (size_t)d->n_held - k);
        d->n_held -= (int)k;
    }
}

static void detok_write(void *ctx, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) detok_byte(ctx, (unsigned char)s[i]);
}

void tok_detok_init(tok_detok *d, const tokenizer *t, bool render_special) {
    memset(d, 0, sizeof *d);
    d->t = t;
    d->render_special = render_special;
}

size_t tok_detok_push(tok_detok *d, int32_t id, char *out, size_t cap) {
    detok_sink o = {.d = d, .out = out, .cap = out ? cap : 0};
    piece_emit(d->t, id, d->render_special, detok_write, &o);
    return o.n;
}

size_t tok_detok_flush(tok_detok *d, char *out, size_t cap) {
    detok_sink o = {.d = d, .out = out, .cap = out ? cap : 0};
    if (d->n_held > 0) out_write(&o, "\xef\xbf\xbd", 3);
    d->n_held = 0;
    return o.n;
}
