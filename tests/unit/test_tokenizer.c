/* test_tokenizer.c — the tokenizers against llama.cpp's test vectors and hand-checked
 * expectations.
 *
 *  - every INFERD_SHARED_DIR/tokenizer-tests/<vocab>.gguf with its .inp/.out (llama.cpp
 *    test-tokenizer-0 format): no BOS, no special parsing, ids compared exactly;
 *  - decode(encode(x)) == x on those inputs (SPM adds the leading space);
 *  - the incremental detokenizer's UTF-8 holdback and U+FFFD replacement;
 *  - the Shakespeare SPM vocabulary against ids produced by the sentencepiece package;
 *  - hostile inputs (random bytes) and hostile vocabularies (built in memory);
 *  - the pre-tokenizer of every family on fixed strings, and the Unicode tables;
 *  - timing of tok_create on the largest vocabulary and of a long encode.
 * Single-threaded. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>

#include "model/gguf.h"
#include "test_util.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/common.h"

#define VOCAB_DIR INFERD_SHARED_DIR "/tokenizer-tests"

static tokenizer *load_tok(const char *path) {
    gguf_file f = {0};
    char err[512];
    tokenizer *t = NULL;
    if (gguf_open(&f, path, err, sizeof err)) {
        fprintf(stderr, "  %s: %s\n", path, err);
        return NULL;
    }
    if (tok_create(&t, &f, err, sizeof err)) fprintf(stderr, "  %s: tok_create: %s\n", path, err);
    gguf_close(&f); /* the tokenizer must not need the file afterwards */
    return t;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted *.gguf names of VOCAB_DIR; NULL (and a failure) when there are none. */
static char **list_vocabs(size_t *n) {
    *n = 0;
    DIR *d = opendir(VOCAB_DIR);
    if (!d) {
        fprintf(stderr, "  cannot open %s\n", VOCAB_DIR);
        return NULL;
    }
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".gguf")) continue;
        names = realloc(names, (*n + 1) * sizeof *names);
        names[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    if (*n) qsort(names, *n, sizeof *names, cmp_str);
    return names;
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

typedef struct vocab_case {
    char **inp; /* inputs (NUL-terminated; may contain no NUL themselves) */
    size_t *inp_len;
    size_t n_inp;
    int32_t **want;
    size_t *n_want;
    size_t n_out;
    char *inp_buf, *out_buf;
} vocab_case;

static void free_case(vocab_case *c) {
    for (size_t i = 0; i < c->n_out; i++) free(c->want[i]);
    free(c->want);
    free(c->n_want);
    free(c->inp);
    free(c->inp_len);
    free(c->inp_buf);
    free(c->out_buf);
}

/* Read <path>.inp / .out as llama.cpp's test-tokenizer-0 does: the inputs are the
 * pieces between "\n__ggml_vocab_test__\n" separators (the file ends with one, which
 * does not start another input); each .out line holds the ids of one input. */
static bool read_case(const char *gguf_path, vocab_case *c) {
    memset(c, 0, sizeof *c);
    char path[1024], err[512];
    size_t n;
    snprintf(path, sizeof path, "%s.inp", gguf_path);
    if (ifd_read_file(path, &c->inp_buf, &n, err, sizeof err)) {
        fprintf(stderr, "  %s\n", err);
        return false;
    }
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    size_t sl = sizeof SEP - 1;
    for (size_t pos = 0; pos < n;) {
        char *next = memmem(c->inp_buf + pos, n - pos, SEP, sl);
        size_t end = next ? (size_t)(next - c->inp_buf) : n;
        c->inp = realloc(c->inp, (c->n_inp + 1) * sizeof *c->inp);
        c->inp_len = realloc(c->inp_len, (c->n_inp + 1) * sizeof *c->inp_len);
        c->inp[c->n_inp] = c->inp_buf + pos;
        c->inp_len[c->n_inp] = end - pos;
        c->n_inp++;
        if (!next) break;
        *next = 0;
        pos = end + sl;
    }
    snprintf(path, sizeof path, "%s.out", gguf_path);
    if (ifd_read_file(path, &c->out_buf, &n, err, sizeof err)) {
        fprintf(stderr, "  %s\n", err);
        return false;
    }
    char *save = NULL;
    for (char *line = c->out_buf; line; line = save) {
        save = strchr(line, '\n');
        if (save)
            *save++ = 0;
        else if (!*line)
            break; /* no trailing empty line after the last newline */
        c->want = realloc(c->want, (c->n_out + 1) * sizeof *c->want);
        c->n_want = realloc(c->n_want, (c->n_out + 1) * sizeof *c->n_want);
        int32_t *ids = NULL;
        size_t k = 0;
        for (char *p = line;;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p) break;
            ids = realloc(ids, (k + 1) * sizeof *ids);
            ids[k++] = (int32_t)v;
            p = q;
        }
        c->want[c->n_out] = ids;
        c->n_want[c->n_out] = k;
        c->n_out++;
        if (!save || !*save) break;
    }
    if (c->n_inp != c->n_out) {
        fprintf(stderr, "  %s: %zu inputs but %zu expected lines\n", gguf_path, c->n_inp, c->n_out);
        return false;
    }
    return true;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s:", label);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n");
}

static void print_text(const char *s, size_t n) {
    fprintf(stderr, "    input (%zu bytes): \"", n);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n')
            fprintf(stderr, "\\n");
        else if (ch == '\t')
            fprintf(stderr, "\\t");
        else if (ch == '"' || ch == '\\')
            fprintf(stderr, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(stderr, "\\x%02x", ch);
        else
            fputc(ch, stderr);
    }
    fprintf(stderr, "\"\n");
}

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
static bool valid_utf8(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xC2 && c <= 0xDF ? 2
                     : c >= 0xE0 && c <= 0xEF ? 3
                     : c >= 0xF0 && c <= 0xF4 ? 4
                                              : 0;
        if (!len || i + len > n) return false;
        for (size_t j = 1; j < len; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        if (len > 1) {
            unsigned d = s[i + 1];
            if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) ||
                (c == 0xF4 && d > 0x8F))
                return false;
        }
        i += len;
    }
    return true;
}

/* ---- the llama.cpp test vectors -------------------------------------------------------- */

static void test_vocab_files(void) {
    size_t n_files;
    char **names = list_vocabs(&n_files);
    CHECKF(n_files > 0, "no *.gguf vocabularies in %s", VOCAB_DIR);
    size_t total = 0, total_bad = 0;
    for (size_t fi = 0; fi < n_files; fi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", VOCAB_DIR, names[fi]);
        vocab_case c;
        bool ok = read_case(path, &c);
        CHECKF(ok, "%s: missing or malformed .inp/.out", names[fi]);
        tokenizer *t = ok ? load_tok(path) : NULL;
        CHECKF(!ok || t, "%s: tok_create failed", names[fi]);
        size_t bad = 0;
        for (size_t i = 0; t && i < c.n_inp; i++) {
            int32_t *ids = NULL;
            size_t n_ids = 0;
            int rc = tok_encode(t, c.inp[i], c.inp_len[i], 0, &ids, &n_ids);
            bool same = rc == 0 && n_ids == c.n_want[i] &&
                        (n_ids == 0 || !memcmp(ids, c.want[i], n_ids * sizeof *ids));
            if (!same) {
                fprintf(stderr, "  MISMATCH %s input #%zu (rc %d)\n", names[fi], i, rc);
                print_text(c.inp[i], c.inp_len[i]);
                print_ids("expected", c.want[i], c.n_want[i]);
                print_ids("got     ", ids, n_ids);
                bad++;
            }
            free(ids);
        }
        CHECKF(bad == 0, "%s: %zu of %zu inputs differ", names[fi], bad, c.n_inp);
        printf("  %-34s %zu/%zu inputs match\n", names[fi], c.n_inp - bad, c.n_inp);
        total += c.n_inp;
        total_bad += bad;
        tok_destroy(t);
        free_case(&c);
    }
    printf("  vocab files: %zu, inputs: %zu, mismatches: %zu\n", n_files, total, total_bad);
    free_names(names, n_files);
}

/* decode(encode(x)) == x for valid UTF-8 inputs; SPM encodes a leading space. */
static void test_roundtrip(void) {
    size_t n_files;
    char **names = list_vocabs(&n_files);
    CHECK(n_files > 0);
    for (size_t fi = 0; fi < n_files; fi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", VOCAB_DIR, names[fi]);
        vocab_case c;
        bool ok = read_case(path, &c);
        tokenizer *t = ok ? load_tok(path) : NULL;
        CHECKF(t != NULL, "%s", names[fi]);
        size_t n_checked = 0;
        for (size_t i = 0; t && i < c.n_inp; i++) {
            if (!valid_utf8(c.inp[i], c.inp_len[i])) continue;
            int32_t *ids;
            size_t n_ids;
            char *s;
            size_t n_s;
            CHECK(tok_encode(t, c.inp[i], c.inp_len[i], 0, &ids, &n_ids) == 0);
            CHECK(tok_decode(t, ids, n_ids, false, &s, &n_s) == 0);
            const char *want = c.inp[i];
            size_t n_want = c.inp_len[i];
            char *tmp = NULL;
            if (tok_get_kind(t) == TOK_KIND_SPM && n_want > 0) { /* the prefix space */
                tmp = malloc(n_want + 1);
                tmp[0] = ' ';
                memcpy(tmp + 1, want, n_want);
                want = tmp;
                n_want++;
            }
            bool same = n_s == n_want && !memcmp(s, want, n_s);
            CHECKF(same, "%s input #%zu does not round-trip", names[fi], i);
            if (!same) {
                print_text(c.inp[i], c.inp_len[i]);
                print_text(s, n_s);
            }
            /* the incremental detokenizer gives the same text when the input is valid */
            tok_detok d;
            tok_detok_init(&d, t, false);
            char *acc = malloc(n_s + 64), buf[512];
            size_t n_acc = 0;
            for (size_t k = 0; k < n_ids; k++) {
                size_t w = tok_detok_push(&d, ids[k], buf, sizeof buf);
                memcpy(acc + n_acc, buf, w);
                n_acc += w;
            }
            n_acc += tok_detok_flush(&d, acc + n_acc, 16);
            CHECKF(n_acc == n_s && !memcmp(acc, s, n_s), "%s input #%zu: detok differs from decode",
                   names[fi], i);
            free(acc);
            free(tmp);
            free(s);
            free(ids);
            n_checked++;
        }
        printf("  %-34s %zu inputs round-trip\n", names[fi], n_checked);
        tok_destroy(t);
        if (ok) free_case(&c);
    }
    free_names(names, n_files);
}

/* ---- pre-tokenizers and Unicode tables ---------------------------------------------------- */

/* Word splits of every family, pinned. The ids these strings give with the GPT-2 vocabulary
 * under each tokenizer.ggml.pre were checked equal to llama.cpp's (llama-cpp-python 0.3.36),
 * as tests/python/test_tokenizer_llamacpp.py does for random strings. */
typedef struct pretok_case {
    pretok_type type;
    int input;
    const char *want; /* words joined by '|' */
} pretok_case;

static const char *const PRETOK_INPUTS[] = {
    "Hello's WORLD'LL  x 12345 \t\n\n  !!?? \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97 \xc7\x85"
    "a \xc2\xbd"
    "3 $+<=>^`~| \xc3\xa9\xc2\xa0"
    "b\r\n",
    "I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "   3.3 3..3 3...3  \n \n\n",
    "\xe3\x80\x80x\xe3\x80\x82 \xe3\x80\x80",
    "a\xf0\xae\xaf\xb0"
    "b \xf0\x90\xb5\x90"
    "c",
};
static const pretok_case PRETOK_CASES[] = {
    {PRETOK_DEFAULT, 0,
     "Hello|'|s| WORLD|'|LL| | x| |123|45| \t\n\n  |!!??| \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97| \xc7\x85"
     "a| |\xc2\xbd"
     "3| |$+<=>^|`|~|| \xc3\xa9|\xc2\xa0|b|\r\n"},
    {PRETOK_GPT2, 0,
     "Hello|'s| WORLD|'|LL| | x| 12345| \t\n\n | !!??| \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97| \xc7\x85"
     "a| \xc2\xbd"
     "3| $+<=>^`~|| \xc3\xa9|\xc2\xa0|b|\r\n"},
    {PRETOK_LLAMA3, 0,
     "Hello|'s| WORLD|'LL| | x| |123|45| \t\n\n| | !!??| \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97| \xc7\x85"
     "a| |\xc2\xbd"
     "3| $+<=>^`~|| \xc3\xa9|\xc2\xa0"
     "b|\r\n"},
    {PRETOK_QWEN2, 0,
     "Hello|'s| WORLD|'LL| | x| |1|2|3|4|5| \t\n\n| | !!??| \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97| \xc7\x85"
     "a| |\xc2\xbd|3| $+<=>^`~|| \xc3\xa9|\xc2\xa0"
     "b|\r\n"},
    {PRETOK_DEEPSEEK_LLM, 0,
     "Hello|'|s| WORLD|'|LL| | x| |12345| \t|\n|\n| | !!??| |\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97| "
     "\xc7\x85|a| |\xc2\xbd"
     "3| $+<=>^`~|| \xc3\xa9|\xc2\xa0"
     "b|\r|\n"},
    {PRETOK_DEEPSEEK_CODER, 0,
     "Hello|'|s| WORLD|'|LL| | x| |1|2|3|4|5| \t|\n|\n| | !!??| |\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97| "
     "\xc7\x85"
     "a| |\xc2\xbd|3| $+<=>^`~|| \xc3\xa9|\xc2\xa0"
     "b|\r|\n"},
    {PRETOK_FALCON, 0,
     "Hello|'|s| WORLD|'|LL| | x| |123|45| \t\n\n  |!!??| \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97| \xc7\x85"
     "a| \xc2\xbd"
     "3| |$+<=>^`~|| \xc3\xa9|\xc2\xa0|b|\r\n"},
    {PRETOK_STARCODER, 0,
     "Hello|'s| WORLD|'|LL| | x| |1|2|3|4|5| \t\n\n | !!??| \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97| \xc7\x85"
     "a| |\xc2\xbd|3| $+<=>^`~|| \xc3\xa9|\xc2\xa0|b|\r\n"},
    {PRETOK_DEFAULT, 1, "I|'|ve| been| |'|told| he|'|s| there|,| |'|RE| you| sure|?| We|'|Ve| a|'|lL"},
    {PRETOK_GPT2, 1, "I|'ve| been| '|told| he|'s| there|,| '|RE| you| sure|?| We|'|Ve| a|'|lL"},
    {PRETOK_LLAMA3, 1, "I|'ve| been| '|told| he|'s| there|,| '|RE| you| sure|?| We|'Ve| a|'lL"},
    {PRETOK_QWEN2, 1, "I|'ve| been| '|told| he|'s| there|,| '|RE| you| sure|?| We|'Ve| a|'lL"},
    {PRETOK_DEEPSEEK_LLM, 1, "I|'|ve| been| '|told| he|'|s| there|,| '|RE| you| sure|?| We|'|Ve| a|'|lL"},
    {PRETOK_DEEPSEEK_CODER, 1, "I|'|ve| been| '|told| he|'|s| there|,| '|RE| you| sure|?| We|'|Ve| a|'|lL"},
    {PRETOK_FALCON, 1, "I|'|ve| been| |'|told| he|'|s| there|,| |'|RE| you| sure|?| We|'|Ve| a|'|lL"},
    {PRETOK_STARCODER, 1, "I|'ve| been| '|told| he|'s| there|,| '|RE| you| sure|?| We|'|Ve| a|'|lL"},
    {PRETOK_DEFAULT, 2, "  | |3|.|3| |3|..|3| |3|...|3|  \n \n\n"},
    {PRETOK_GPT2, 2, "  | 3|.|3| 3|..|3| 3|...|3|  \n \n\n"},
    {PRETOK_LLAMA3, 2, "  | |3|.|3| |3|..|3| |3|...|3|  \n \n\n"},
    {PRETOK_QWEN2, 2, "  | |3|.|3| |3|..|3| |3|...|3|  \n \n\n"},
    {PRETOK_DEEPSEEK_LLM, 2, "   |3|.|3| |3|..|3| |3|...|3|  |\n| |\n|\n"},
    {PRETOK_DEEPSEEK_CODER, 2, "   |3|.|3| |3|..|3| |3|...|3|  |\n| |\n|\n"},
    {PRETOK_FALCON, 2, "  | 3|.|3| 3|..|3| 3|...|3|  \n \n\n"},
    {PRETOK_STARCODER, 2, "   |3|.|3| |3|..|3| |3|...|3|  \n \n\n"},
    {PRETOK_DEFAULT, 3, "\xe3\x80\x80|x|\xe3\x80\x82| \xe3\x80\x80"},
    {PRETOK_GPT2, 3, "\xe3\x80\x80|x|\xe3\x80\x82| \xe3\x80\x80"},
    {PRETOK_LLAMA3, 3, "\xe3\x80\x80x|\xe3\x80\x82| \xe3\x80\x80"},
    {PRETOK_QWEN2, 3, "\xe3\x80\x80x|\xe3\x80\x82| \xe3\x80\x80"},
    {PRETOK_DEEPSEEK_LLM, 3, "\xe3\x80\x80x|\xe3\x80\x82| \xe3\x80\x80"},
    {PRETOK_DEEPSEEK_CODER, 3, "\xe3\x80\x80x|\xe3\x80\x82| \xe3\x80\x80"},
    {PRETOK_FALCON, 3, "\xe3\x80\x80|x|\xe3\x80\x82| \xe3\x80\x80"},
    {PRETOK_STARCODER, 3, "\xe3\x80\x80|x|\xe3\x80\x82| \xe3\x80\x80"},
    {PRETOK_DEFAULT, 4,
     "a\xf0\xae\xaf\xb0"
     "b| \xf0\x90\xb5\x90|c"},
    {PRETOK_GPT2, 4,
     "a\xf0\xae\xaf\xb0"
     "b| \xf0\x90\xb5\x90|c"},
    {PRETOK_LLAMA3, 4,
     "a\xf0\xae\xaf\xb0"
     "b| \xf0\x90\xb5\x90|c"},
    {PRETOK_QWEN2, 4,
     "a\xf0\xae\xaf\xb0"
     "b| \xf0\x90\xb5\x90|c"},
    {PRETOK_DEEPSEEK_LLM, 4, "a|\xf0\xae\xaf\xb0|b| \xf0\x90\xb5\x90|c"},
    {PRETOK_DEEPSEEK_CODER, 4,
     "a\xf0\xae\xaf\xb0"
     "b| \xf0\x90\xb5\x90|c"},
    {PRETOK_FALCON, 4,
     "a\xf0\xae\xaf\xb0"
     "b| \xf0\x90\xb5\x90|c"},
    {PRETOK_STARCODER, 4,
     "a\xf0\xae\xaf\xb0"
     "b| \xf0\x90\xb5\x90|c"},
};

static void test_pretok(void) {
    for (size_t i = 0; i < sizeof PRETOK_CASES / sizeof PRETOK_CASES[0]; i++) {
        const pretok_case *c = &PRETOK_CASES[i];
        const char *in = PRETOK_INPUTS[c->input];
        size_t n = strlen(in);
        uint32_t *cpts = malloc((n + 1) * sizeof *cpts);
        size_t nc = unicode_decode_lenient(in, n, cpts), *lens, n_lens;
        CHECK(pretok_split(c->type, cpts, nc, &lens, &n_lens) == IFD_OK);
        char got[512];
        size_t k = 0, at = 0;
        for (size_t w = 0; w < n_lens && k + 8 < sizeof got; w++) {
            if (w) got[k++] = '|';
            for (size_t j = 0; j < lens[w] && k + 8 < sizeof got; j++)
                k += unicode_encode(cpts[at++], got + k);
        }
        got[k] = 0;
        CHECKF(!strcmp(got, c->want), "family %d input %d:\n      got  %s\n      want %s", (int)c->type,
               c->input, got, c->want);
        free(lens);
        free(cpts);
    }
}

static void test_unicode(void) {
    /* categories and White_Space, Unicode 15.1 as llama.cpp */
    CHECK(unicode_flags('A') == UNICODE_F_LETTER && unicode_flags('7') == UNICODE_F_NUMBER);
    CHECK(unicode_flags(' ') == (UNICODE_F_SEPARATOR | UNICODE_F_WHITESPACE));
    CHECK(unicode_flags('\n') == (UNICODE_F_CONTROL | UNICODE_F_WHITESPACE));
    CHECK(unicode_flags(0x1C) == UNICODE_F_CONTROL); /* not White_Space (Python's isspace says yes) */
    CHECK(unicode_flags(0x85) == (UNICODE_F_CONTROL | UNICODE_F_WHITESPACE));
    CHECK(unicode_flags(0x3000) == (UNICODE_F_SEPARATOR | UNICODE_F_WHITESPACE));
    CHECK(unicode_flags(0x2EBF0) == UNICODE_F_LETTER);    /* CJK Extension I, Unicode 15.1 */
    CHECK(unicode_flags(0x10D50) == UNICODE_F_UNDEFINED); /* Garay, Unicode 16 */
    CHECK(unicode_flags(0x0301) == UNICODE_F_MARK && unicode_flags('$') == UNICODE_F_SYMBOL);
    CHECK(unicode_flags('!') == UNICODE_F_PUNCTUATION && unicode_flags(0xD800) == UNICODE_F_CONTROL);
    CHECK(unicode_flags(0x10FFFF) == UNICODE_F_UNDEFINED && unicode_flags(0x110000) == UNICODE_F_UNDEFINED);
    /* the GPT-2 byte map is a bijection onto its 256 code points */
    for (int b = 0; b < 256; b++) CHECK(unicode_cpt_to_byte(unicode_byte_to_cpt((unsigned char)b)) == b);
    CHECK(unicode_byte_to_cpt(' ') == 0x120 && unicode_byte_to_cpt('\n') == 0x10A &&
          unicode_byte_to_cpt(0xAD) == 0x143);
    CHECK(unicode_cpt_to_byte(0x144) == -1 && unicode_cpt_to_byte(0x20) == -1);
    /* lenient decoding, as llama.cpp: invalid -> U+FFFD per byte, overlongs/surrogates kept */
    uint32_t c[16];
    CHECK(unicode_decode_lenient("a\xff\xc3", 3, c) == 3 && c[0] == 'a' && c[1] == 0xFFFD && c[2] == 0xFFFD);
    CHECK(unicode_decode_lenient("\xc0\x80\xed\xa0\x80", 5, c) == 2 && c[0] == 0 && c[1] == 0xD800);
    CHECK(unicode_decode_lenient("\xf4\x90\x80\x80", 4, c) == 4 && c[0] == 0xFFFD); /* > U+10FFFF */
    CHECK(unicode_decode_lenient("\xe2\x96", 2, c) == 2 && c[1] == 0xFFFD);
}

/* ---- pieces and the incremental detokenizer -------------------------------------------- */

static void test_pieces(void) {
    tokenizer *t = load_tok(VOCAB_DIR "/ggml-vocab-llama-spm.gguf");
    CHECK(t != NULL);
    if (!t) return;
    char buf[64];
    int32_t hello = tok_find(t, "\xe2\x96\x81Hello", 8);
    CHECK(hello >= 0);
    CHECK(tok_piece(t, hello, false, buf, sizeof buf) == 6 && !memcmp(buf, " Hello", 6));
    CHECK(tok_piece(t, hello, false, buf, 3) == 6 && !memcmp(buf, " He", 3)); /* snprintf-like */
    int32_t nl = tok_find(t, "<0x0A>", 6);
    CHECK(nl == 13 && tok_get_type(t, nl) == TOK_TYPE_BYTE);
    CHECK(tok_piece(t, nl, false, buf, sizeof buf) == 1 && buf[0] == '\n');
    CHECK(tok_piece(t, 2, false, buf, sizeof buf) == 0);                           /* </s> */
    CHECK(tok_piece(t, 2, true, buf, sizeof buf) == 4 && !memcmp(buf, "</s>", 4)); /* rendered */
    CHECK(tok_piece(t, -1, true, buf, sizeof buf) == 0);
    CHECK(tok_piece(t, 1 << 30, true, buf, sizeof buf) == 0);
    CHECK(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_add_bos(t) && !tok_add_eos(t));
    CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 1) && !tok_is_eog(t, -1));
    CHECK(!strcmp(tok_text(t, 1), "<s>") && !strcmp(tok_text(t, -5), ""));
    CHECK(tok_n_vocab(t) == 32000 && tok_get_kind(t) == TOK_KIND_SPM);

    /* BOS only on request; control tokens only parsed on request */
    int32_t *ids;
    size_t n;
    CHECK(tok_encode(t, "Hello", 5, TOK_ENC_ADD_BOS, &ids, &n) == 0);
    CHECK(n == 2 && ids[0] == 1 && ids[1] == hello);
    free(ids);
    CHECK(tok_encode(t, "<s>Hello", 8, 0, &ids, &n) == 0);
    bool has_bos = false;
    for (size_t i = 0; i < n; i++) has_bos |= ids[i] == 1;
    CHECK(!has_bos);
    free(ids);
    CHECK(tok_encode(t, "<s>Hello</s>", 12, TOK_ENC_PARSE_SPECIAL, &ids, &n) == 0);
    CHECK(n == 3 && ids[0] == 1 && ids[1] == hello && ids[2] == 2); /* space prefix after <s> */
    free(ids);
    CHECK(tok_encode(t, "", 0, 0, &ids, &n) == 0 && n == 0 && ids != NULL);
    free(ids);
    tok_destroy(t);

    t = load_tok(VOCAB_DIR "/ggml-vocab-gpt-2.gguf");
    CHECK(t != NULL);
    if (!t) return;
    int32_t world = tok_find(t, "\xc4\xa0world", 7); /* "Ġworld" */
    CHECK(world >= 0 && tok_piece(t, world, false, buf, sizeof buf) == 6 && !memcmp(buf, " world", 6));
    CHECK(tok_bos(t) == 50256 && !tok_add_bos(t) && tok_is_eog(t, 50256));
    CHECK(tok_piece(t, 50256, false, buf, sizeof buf) == 0);
    CHECK(tok_piece(t, 50256, true, buf, sizeof buf) == 13);
    CHECK(tok_encode(t, "<|endoftext|>", 13, TOK_ENC_PARSE_SPECIAL, &ids, &n) == 0 && n == 1 &&
          ids[0] == 50256);
    free(ids);
    CHECK(tok_encode(t, "<|endoftext|>", 13, 0, &ids, &n) == 0 && n > 1);
    free(ids);
    tok_destroy(t);
}

static size_t push_all(tok_detok *d, const int32_t *ids, size_t n, char *out, size_t *emitted) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t w = tok_detok_push(d, ids[i], out + k, 64);
        if (emitted) emitted[i] = w;
        k += w;
    }
    return k;
}

static void test_detok_holdback(void) {
    tokenizer *t = load_tok(VOCAB_DIR "/ggml-vocab-llama-spm.gguf");
    CHECK(t != NULL);
    if (!t) return;
    /* "🦙" = F0 9F A6 99: the SPM vocab has no piece for it, so it encodes as bytes */
    int32_t *ids;
    size_t n;
    CHECK(tok_encode(t, "\xf0\x9f\xa6\x99", 4, 0, &ids, &n) == 0);
    CHECK(n == 5 && ids[0] == tok_find(t, "\xe2\x96\x81", 3) && ids[1] == 3 + 0xF0 && ids[4] == 3 + 0x99);
    char out[256];
    size_t emitted[8];
    tok_detok d;
    tok_detok_init(&d, t, false);
    size_t k = push_all(&d, ids, n, out, emitted);
    CHECK(emitted[0] == 1 && emitted[1] == 0 && emitted[2] == 0 && emitted[3] == 0 && emitted[4] == 4);
    CHECK(k == 5 && !memcmp(out, " \xf0\x9f\xa6\x99", 5));
    CHECK(tok_detok_flush(&d, out, sizeof out) == 0);
    free(ids);

    /* invalid: a lone continuation byte, a lead byte followed by ASCII, a cut sequence */
    int32_t bad[] = {3 + 0x99, 3 + 0xE2, 3 + 'a', 3 + 0xF0, 3 + 0x9F};
    tok_detok_init(&d, t, false);
    k = push_all(&d, bad, 5, out, emitted);
    CHECK(emitted[0] == 3 && emitted[1] == 0 && emitted[2] == 4 && emitted[3] == 0 && emitted[4] == 0);
    CHECK(k == 7 && !memcmp(out,
                            "\xef\xbf\xbd\xef\xbf\xbd"
                            "a",
                            7));
    CHECK(tok_detok_flush(&d, out, sizeof out) == 3 && !memcmp(out, "\xef\xbf\xbd", 3));
    CHECK(tok_detok_flush(&d, out, sizeof out) == 0);
    /* surrogates and overlongs are invalid (ED A0 80, C0 80): never emitted raw */
    int32_t sur[] = {3 + 0xED, 3 + 0xA0, 3 + 0x80, 3 + 0xC0, 3 + 0x80};
    tok_detok_init(&d, t, false);
    k = push_all(&d, sur, 5, out, NULL);
    k += tok_detok_flush(&d, out + k, 16);
    CHECK(k == 15); /* ED | A0 | 80 | C0 | 80: five replacements */
    /* a small cap drops whole characters, never part of one */
    int32_t llama[] = {3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x99};
    tok_detok_init(&d, t, false);
    for (int i = 0; i < 3; i++) CHECK(tok_detok_push(&d, llama[i], out, 2) == 0);
    CHECK(tok_detok_push(&d, llama[3], out, 2) == 0);
    tok_destroy(t);

    /* byte-level BPE: the same character as four one-byte tokens */
    t = load_tok(VOCAB_DIR "/ggml-vocab-gpt-2.gguf");
    CHECK(t != NULL);
    if (!t) return;
    /* GPT-2's printable stand-ins for F0 9F A6 99: U+00F0 U+0141 U+00A6 U+013B */
    const char *mapped[4] = {"\xc3\xb0", "\xc5\x81", "\xc2\xa6", "\xc4\xbb"};
    int32_t bids[4];
    for (int i = 0; i < 4; i++) bids[i] = tok_find(t, mapped[i], strlen(mapped[i]));
    CHECK(bids[0] >= 0 && bids[1] >= 0 && bids[2] >= 0 && bids[3] >= 0);
    tok_detok_init(&d, t, false);
    k = push_all(&d, bids, 4, out, emitted);
    CHECK(emitted[0] == 0 && emitted[1] == 0 && emitted[2] == 0 && emitted[3] == 4);
    CHECK(k == 4 && !memcmp(out, "\xf0\x9f\xa6\x99", 4));
    tok_destroy(t);
}

/* ---- the Shakespeare SPM vocabulary ---------------------------------------------------- */

/* Expected ids from the sentencepiece package on shared/models/shakespeare1k.spm.model
 * (sp.encode(text) with BOS 1 prepended), checked when this test was written;
 * tests/python/test_tokenizer_spm.py compares many random strings the same way. */
typedef struct spm_case {
    const char *text;
    int32_t ids[40];
    size_t n;
} spm_case;

static const spm_case SPM_CASES[] = {
    {"ROMEO:", {1, 870, 983}, 3},
    {"Hello world", {1, 329, 429, 963, 880}, 5},
    {" leading space", {1, 960, 283, 961, 350, 303, 428, 883}, 8},
    {"First Citizen:\nBefore we proceed any further, hear me speak.",
     {1,   679, 339, 946, 983, 13,  1002, 961, 558, 340, 589,
      315, 321, 804, 274, 376, 717, 975,  680, 324, 618, 984},
     22},
    {"tabs\tand  double  spaces",
     {1, 259, 912, 966, 12, 414, 960, 280, 262, 484, 960, 428, 964, 978, 285},
     15},
    {"caf\xc3\xa9 \xf0\x9f\xa6\x99 \xe4\xb8\xad\xe6\x96\x87",
     {1, 281, 964, 977, 198, 172, 960, 243, 162, 169, 156, 960, 231, 187, 176, 233, 153, 138},
     18},
    {"", {1}, 1},
    {"trailing  ", {1, 259, 366, 439, 303, 960, 960}, 7},
};

static void test_shakespeare(void) {
    tokenizer *t = load_tok(INFERD_SHARED_DIR "/models/shakespeare-target.gguf");
    CHECK(t != NULL);
    if (!t) return;
    CHECK(tok_n_vocab(t) == 1024 && tok_bos(t) == 1 && tok_eos(t) == 2 && tok_add_bos(t));
    for (size_t i = 0; i < sizeof SPM_CASES / sizeof SPM_CASES[0]; i++) {
        const spm_case *c = &SPM_CASES[i];
        int32_t *ids;
        size_t n;
        CHECK(tok_encode(t, c->text, strlen(c->text), TOK_ENC_ADD_BOS, &ids, &n) == 0);
        bool same = n == c->n && !memcmp(ids, c->ids, n * sizeof *ids);
        CHECKF(same, "shakespeare case %zu", i);
        if (!same) {
            print_text(c->text, strlen(c->text));
            print_ids("expected", c->ids, c->n);
            print_ids("got     ", ids, n);
        }
        free(ids);
    }
    tok_destroy(t);
}

/* ---- hostile inputs ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static void test_random_bytes(void) {
    size_t n_files;
    char **names = list_vocabs(&n_files);
    CHECK(n_files > 0);
    static const char *PIECES[] = {" ",
                                   "  ",
                                   "\n",
                                   "\r\n",
                                   "\t",
                                   "'s",
                                   "'LL",
                                   "a",
                                   "Z",
                                   "3",
                                   "333",
                                   "é",
                                   "\xe2\x96\x81",
                                   "ö",
                                   "🦙",
                                   "中",
                                   "\xc2\xa0",
                                   "\xe3\x80\x80",
                                   "!",
                                   "``",
                                   "<s>",
                                   "</s>",
                                   "<|endoftext|>",
                                   "\xff",
                                   "\xc3",
                                   "\xed\xa0\x80",
                                   "\xf4\x90\x80\x80"};
    char buf[600];
    for (size_t fi = 0; fi < n_files; fi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", VOCAB_DIR, names[fi]);
        tokenizer *t = load_tok(path);
        CHECK(t != NULL);
        if (!t) continue;
        int32_t nv = tok_n_vocab(t);
        size_t bad = 0;
        for (int iter = 0; iter < 300; iter++) {
            size_t n = 0;
            if (iter % 2) { /* raw random bytes */
                n = rnd() % 200;
                for (size_t i = 0; i < n; i++) buf[i] = (char)rnd();
            } else { /* random runs of interesting pieces */
                while (n < 500) {
                    const char *p = PIECES[rnd() % (sizeof PIECES / sizeof PIECES[0])];
                    size_t l = strlen(p);
                    if (n + l > 500) break;
                    memcpy(buf + n, p, l);
                    n += l;
                    if (rnd() % 8 == 0) break;
                }
            }
            for (unsigned flags = 0; flags < 4; flags++) {
                int32_t *ids;
                size_t n_ids;
                if (tok_encode(t, buf, n, flags, &ids, &n_ids)) {
                    bad++;
                    continue;
                }
                for (size_t i = 0; i < n_ids; i++) bad += ids[i] < 0 || ids[i] >= nv;
                char *s;
                size_t n_s;
                if (tok_decode(t, ids, n_ids, flags & 1, &s, &n_s) == 0) {
                    /* valid UTF-8 text without special tokens round-trips */
                    if (flags == 0 && tok_get_kind(t) == TOK_KIND_BPE && valid_utf8(buf, n) &&
                        !(n_s == n && !memcmp(s, buf, n)) && !memmem(buf, n, "<|endoftext|>", 13)) {
                        bad++;
                        print_text(buf, n);
                    }
                    free(s);
                }
                free(ids);
            }
        }
        CHECKF(bad == 0, "%s: %zu failures on random input", names[fi], bad);
        tok_destroy(t);
    }
    free_names(names, n_files);
}

/* ---- hostile vocabularies: GGUF files built in memory ----------------------------------- */

typedef struct gbuf {
    unsigned char *p;
    size_t n, cap;
    uint64_t n_kv;
} gbuf;

static void gput(gbuf *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void gu32(gbuf *b, uint32_t v) {
    gput(b, &v, 4);
}
static void gu64(gbuf *b, uint64_t v) {
    gput(b, &v, 8);
}
static void gstr(gbuf *b, const char *s) {
    gu64(b, strlen(s));
    gput(b, s, strlen(s));
}
static void kv_str(gbuf *b, const char *k, const char *v) {
    gstr(b, k);
    gu32(b, GGUF_TYPE_STRING);
    gstr(b, v);
    b->n_kv++;
}
static void kv_i32(gbuf *b, const char *k, int32_t v) {
    gstr(b, k);
    gu32(b, GGUF_TYPE_INT32);
    gput(b, &v, 4);
    b->n_kv++;
}
static void kv_strs(gbuf *b, const char *k, const char *const *v, size_t n) {
    gstr(b, k);
    gu32(b, GGUF_TYPE_ARRAY);
    gu32(b, GGUF_TYPE_STRING);
    gu64(b, n);
    for (size_t i = 0; i < n; i++) gstr(b, v[i]);
    b->n_kv++;
}
static void kv_i32s(gbuf *b, const char *k, const int32_t *v, size_t n) {
    gstr(b, k);
    gu32(b, GGUF_TYPE_ARRAY);
    gu32(b, GGUF_TYPE_INT32);
    gu64(b, n);
    gput(b, v, n * 4);
    b->n_kv++;
}

/* Finish: header in front of the kvs, then open + tok_create. */
static int build(gbuf *kvs, tokenizer **t, char *err, size_t err_bytes) {
    gbuf f = {0};
    gput(&f, "GGUF", 4);
    gu32(&f, 3);
    gu64(&f, 0);
    gu64(&f, kvs->n_kv);
    gput(&f, kvs->p, kvs->n);
    gguf_file g = {0};
    *t = NULL;
    int rc = gguf_open_memory(&g, f.p, f.n, err, err_bytes);
    if (rc == 0) rc = tok_create(t, &g, err, err_bytes);
    gguf_close(&g);
    free(f.p);
    free(kvs->p);
    memset(kvs, 0, sizeof *kvs);
    return rc;
}

static void test_bad_vocab(void) {
    char err[256];
    tokenizer *t;
    gbuf b = {0};
    static const char *const BPE_TOKS[] = {"a",
                                           "b",
                                           "c",
                                           "ab",
                                           "abc",
                                           "\xc4\xa0",
                                           "\xc4\xa0"
                                           "a",
                                           "<|x|>"};
    static const char *const MERGES[] = {"a b", "ab c", "\xc4\xa0 a", "nosplit", " leading", "zz qq", "a b"};

    /* gpt2 without merges */
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    kv_strs(&b, "tokenizer.ggml.tokens", BPE_TOKS, 8);
    CHECK(build(&b, &t, err, sizeof err) == IFD_ERR_FORMAT && t == NULL && strstr(err, "merges"));

    /* unsupported model, missing tokens, empty tokens, mismatched types */
    kv_str(&b, "tokenizer.ggml.model", "bert");
    kv_strs(&b, "tokenizer.ggml.tokens", BPE_TOKS, 8);
    CHECK(build(&b, &t, err, sizeof err) == IFD_ERR_UNSUPPORTED && strstr(err, "bert"));
    kv_str(&b, "tokenizer.ggml.model", "llama");
    CHECK(build(&b, &t, err, sizeof err) == IFD_ERR_FORMAT && strstr(err, "tokens"));
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", BPE_TOKS, 0);
    CHECK(build(&b, &t, err, sizeof err) == IFD_ERR_FORMAT);
    int32_t types[3] = {1, 1, 1};
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", BPE_TOKS, 8);
    kv_i32s(&b, "tokenizer.ggml.token_type", types, 3);
    CHECK(build(&b, &t, err, sizeof err) == IFD_ERR_FORMAT && strstr(err, "token_type"));
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", BPE_TOKS, 8);
    kv_str(&b, "tokenizer.ggml.scores", "nope");
    CHECK(build(&b, &t, err, sizeof err) == IFD_ERR_FORMAT && strstr(err, "scores"));

    /* a tiny BPE vocab with bad ids, odd merges and an unknown pre-tokenizer */
    int32_t ttypes[8] = {1, 1, 1, 1, 1, 1, 1, 4};
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    kv_str(&b, "tokenizer.ggml.pre", "no-such-pre");
    kv_strs(&b, "tokenizer.ggml.tokens", BPE_TOKS, 8);
    kv_i32s(&b, "tokenizer.ggml.token_type", ttypes, 8);
    kv_strs(&b, "tokenizer.ggml.merges", MERGES, 7);
    kv_i32(&b, "tokenizer.ggml.bos_token_id", 1000);
    kv_i32(&b, "tokenizer.ggml.eos_token_id", -7);
    CHECK(build(&b, &t, err, sizeof err) == 0);
    if (t) {
        CHECK(tok_bos(t) == -1 && tok_eos(t) == -1); /* defaults (11) are out of range too */
        int32_t *ids;
        size_t n;
        CHECK(tok_encode(t, "abc ab<|x|>a\xff", 13, TOK_ENC_ADD_BOS | TOK_ENC_ADD_EOS, &ids, &n) == 0);
        /* abc | Ġ ab (rank 0 "a b" beats rank 2 "Ġ a") | <|x|> (user-defined, always
         * matched) | a | the bytes of U+FFFD, which have no tokens: dropped */
        int32_t want[] = {4, 5, 3, 7, 0};
        CHECK(n == 5 && !memcmp(ids, want, sizeof want));
        free(ids);
        tok_destroy(t);
    }

    /* a tiny SPM vocab without byte tokens: unknown bytes become <unk> (llama.cpp's
     * default id 0 here, the metadata's 99 being out of range) */
    static const char *const SPM_TOKS[] = {"\xe2\x96\x81", "h", "i", "hi", "\xe2\x96\x81hi"};
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", SPM_TOKS, 5);
    kv_i32(&b, "tokenizer.ggml.unknown_token_id", 99);
    CHECK(build(&b, &t, err, sizeof err) == 0);
    if (t) {
        int32_t *ids;
        size_t n;
        CHECK(tok_bos(t) == 1 && tok_eos(t) == 2); /* llama.cpp's defaults, in range here */
        CHECK(tok_encode(t, "hi\xff\xc3 hi", 7, 0, &ids, &n) == 0);
        /* ▁hi | FF | C3 E2 (C3 takes the next byte, from the escaped space) | 96 | 81 | hi */
        int32_t want[] = {4, 0, 0, 0, 0, 0, 3};
        CHECK(n == 7 && !memcmp(ids, want, sizeof want));
        free(ids);
        tok_destroy(t);
    }
}

/* ---- speed ------------------------------------------------------------------------------ */

static void test_speed(void) {
    /* the largest vocabulary: 102400 tokens, 99757 merges */
    double t0 = ifd_now_s();
    tokenizer *t = load_tok(VOCAB_DIR "/ggml-vocab-deepseek-llm.gguf");
    double t_create = ifd_now_s() - t0;
    CHECK(t != NULL);
    if (!t) return;
    size_t n = 1 << 20;
    char *text = malloc(n);
    static const char *WORDS[] = {"the ",  "quick ", "brown ", "fox ",   "123 ",
                                  "über ", "中文 ",  "\n",     "naïve, "};
    size_t k = 0;
    while (k + 16 < n) {
        const char *w = WORDS[rnd() % 9];
        memcpy(text + k, w, strlen(w));
        k += strlen(w);
    }
    memset(text + k, 'a', n - k); /* and one long word at the end */
    t0 = ifd_now_s();
    int32_t *ids;
    size_t n_ids;
    CHECK(tok_encode(t, text, n, 0, &ids, &n_ids) == 0);
    double t_enc = ifd_now_s() - t0;
    free(ids);
    /* pathological: one 256 KiB word of a single letter, one of spaces */
    memset(text, 'x', 1 << 18);
    t0 = ifd_now_s();
    CHECK(tok_encode(t, text, 1 << 18, 0, &ids, &n_ids) == 0);
    free(ids);
    memset(text, ' ', 1 << 18);
    CHECK(tok_encode(t, text, 1 << 18, 0, &ids, &n_ids) == 0);
    free(ids);
    /* many user-defined tokens in the text: ö and ø are added tokens of this vocab */
    for (size_t i = 0; i + 4 <= (1 << 18); i += 4)
        memcpy(text + i,
               i % 8 ? "\xc3\xb6"
                       "a "
                     : "\xc3\xb8"
                       "b ",
               4);
    CHECK(tok_encode(t, text, 1 << 18, 0, &ids, &n_ids) == 0);
    CHECK(n_ids > 0 && ids[0] == tok_find(t, "\xc3\xb8", 2));
    free(ids);
    double t_patho = ifd_now_s() - t0;
    printf("  tok_create %.3f s (102400 tokens), encode 1 MiB %.3f s, 3 x 256 KiB pathological %.3f s\n",
           t_create, t_enc, t_patho);
    /* generous bounds (sanitizer builds are slow); the printed numbers are the measure */
    CHECK(t_create < 5.0 && t_enc < 30.0 && t_patho < 30.0);
    free(text);
    tok_destroy(t);
}

TEST_MAIN(T(test_vocab_files), T(test_roundtrip), T(test_pretok), T(test_unicode), T(test_pieces),
          T(test_detok_holdback), T(test_shakespeare), T(test_random_bytes), T(test_bad_vocab), T(test_speed))
