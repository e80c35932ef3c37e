/* pretok.c — pre-tokenizer splitters for byte-level BPE (see pretok.h).
 *
 * llama.cpp splits with a list of regexes applied in turn: each regex cuts every
 * current segment into its matches and the unmatched text between them, and the next
 * regex sees each segment on its own (a segment's end is the end of input for it).
 * The GPT-2 and Llama-3/Qwen2 regexes run through hand-written matchers there; the
 * rest go through std::regex over a "collapsed" text where every non-ASCII code point
 * stands for its category. The matchers below reproduce both paths:
 *
 *  - split_gpt2     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *  - split_llama3   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *                   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Qwen2: \p{N})
 *  - split_run      [SET]+ and \s?[SET]+ (leftmost, greedy)
 *  - split_single   one-character classes: [\r\n], \p{N}
 *  - split_trailing \s+$
 *  - split_digits3  [0-9][0-9][0-9]
 *
 * Semantics of the classes as llama.cpp has them: \s is White_Space (std::regex \s
 * plus non-ASCII whitespace collapsed to \v); \p{X} is the general category family;
 * a non-ASCII whitespace code point is in no other class. Pure functions: thread-safe. */
#include "pretok.h"

#include <stdbool.h>
#include <stdlib.h>

#include "../util/status.h"
#include "unicode.h"

#define OUT_OF_RANGE 0xFFFFFFFFu

typedef struct seg_ctx {
    const uint32_t *cpts;
    const uint16_t *flags; /* unicode_flags of every code point */
    size_t a, e;           /* the segment being split: [a, e) */
    size_t prev;           /* end of the last emitted word */
    size_t *out;           /* emitted word lengths */
    size_t n_out;
} seg_ctx;

static inline uint32_t cpt_at(const seg_ctx *c, size_t pos) {
    return pos >= c->a && pos < c->e ? c->cpts[pos] : OUT_OF_RANGE;
}

static inline uint16_t flags_at(const seg_ctx *c, size_t pos) {
    return pos >= c->a && pos < c->e ? c->flags[pos] : 0;
}

/* Emit the word [prev, end) if non-empty; returns its length. */
static inline size_t emit(seg_ctx *c, size_t end) {
    size_t len = end - c->prev;
    if (len > 0) c->out[c->n_out++] = len;
    c->prev = end;
    return len;
}

static inline uint32_t ascii_lower(uint32_t x) {
    return x >= 'A' && x <= 'Z' ? x + 32 : x;
}

/* 's 't 'm 'd 're 've 'll at pos: returns the match length (0 if none). */
static size_t match_contraction(const seg_ctx *c, size_t pos, bool icase) {
    if (cpt_at(c, pos) != '\'' || pos + 1 >= c->e) return 0;
    uint32_t n1 = cpt_at(c, pos + 1);
    if (icase) n1 = ascii_lower(n1);
    if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
    if (pos + 2 >= c->e) return 0;
    uint32_t n2 = cpt_at(c, pos + 2);
    if (icase) n2 = ascii_lower(n2);
    if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
    return 0;
}

enum { F_WS = UNICODE_F_WHITESPACE, F_L = UNICODE_F_LETTER, F_N = UNICODE_F_NUMBER };

static void split_gpt2(seg_ctx *c) {
    size_t pos = c->a;
    while (pos < c->e) {
        uint32_t cpt = cpt_at(c, pos);
        uint16_t f = flags_at(c, pos);
        size_t k = match_contraction(c, pos, false);
        if (k) {
            pos += k;
            emit(c, pos);
            continue;
        }
        uint16_t f2 = cpt == ' ' ? flags_at(c, pos + 1) : f;
        if (f2 & F_L) { /* ' ?\p{L}+' */
            pos += cpt == ' ';
            while (flags_at(c, pos) & F_L) pos++;
            emit(c, pos);
            continue;
        }
        if (f2 & F_N) { /* ' ?\p{N}+' */
            pos += cpt == ' ';
            while (flags_at(c, pos) & F_N) pos++;
            emit(c, pos);
            continue;
        }
        if (!(f2 & (F_WS | F_L | F_N)) && f2) { /* ' ?[^\s\p{L}\p{N}]+' */
            pos += cpt == ' ';
            for (uint16_t g = flags_at(c, pos); !(g & (F_WS | F_L | F_N)) && g; g = flags_at(c, pos)) pos++;
            emit(c, pos);
            continue;
        }
        size_t nws = 0;
        while (flags_at(c, pos + nws) & F_WS) nws++;
        if (nws > 1 && pos + nws < c->e) { /* '\s+(?!\S)': leave the last one */
            pos += nws - 1;
            emit(c, pos);
            continue;
        }
        if (nws > 0) { /* '\s+' */
            pos += nws;
            emit(c, pos);
            continue;
        }
        emit(c, ++pos); /* no alternative matches: a word of its own */
    }
}

/* Llama 3 (max_digits 3) and Qwen2 (max_digits 1). */
static void split_llama3(seg_ctx *c, size_t max_digits) {
    size_t pos = c->a;
    while (pos < c->e) {
        uint32_t cpt = cpt_at(c, pos);
        uint16_t f = flags_at(c, pos);
        size_t k = match_contraction(c, pos, true);
        if (k) {
            pos += k;
            emit(c, pos);
            continue;
        }
        /* '[^\r\n\p{L}\p{N}]?\p{L}+' */
        if (!(cpt == '\r' || cpt == '\n' || (f & F_N))) {
            if ((f & F_L) || (flags_at(c, pos + 1) & F_L)) {
                pos++;
                while (flags_at(c, pos) & F_L) pos++;
                emit(c, pos);
                continue;
            }
        }
        if (f & F_N) { /* '\p{N}{1,max_digits}' */
            size_t ini = pos;
            while (flags_at(c, pos) & F_N) {
                if (++pos - ini >= max_digits) {
                    emit(c, pos);
                    ini = pos;
                }
            }
            emit(c, pos);
            continue;
        }
        /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' (llama.cpp tests the current flags for "in range") */
        uint16_t f2 = cpt == ' ' ? flags_at(c, pos + 1) : f;
        if (!(f2 & (F_WS | F_L | F_N)) && f) {
            pos += cpt == ' ';
            for (uint16_t g = flags_at(c, pos); !(g & (F_WS | F_L | F_N)) && g; g = flags_at(c, pos)) pos++;
            for (uint32_t x = cpt_at(c, pos); x == '\r' || x == '\n'; x = cpt_at(c, pos)) pos++;
            emit(c, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (flags_at(c, pos + nws) & F_WS) {
            uint32_t x = cpt_at(c, pos + nws);
            if (x == '\r' || x == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* '\s*[\r\n]+' */
            pos = last_rn;
            emit(c, pos);
            continue;
        }
        if (nws > 1 && pos + nws < c->e) { /* '\s+(?!\S)' */
            pos += nws - 1;
            emit(c, pos);
            continue;
        }
        if (nws > 0) { /* '\s+' */
            pos += nws;
            emit(c, pos);
            continue;
        }
        emit(c, ++pos);
    }
}

/* ---- character classes of the std::regex-based families ------------------------- */

typedef bool (*cls_fn)(uint32_t cpt, uint16_t flags);

typedef struct cpt_range {
    uint32_t lo, hi;
} cpt_range;

static bool in_ranges(const cpt_range *r, size_t n, uint32_t x) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x < r[mid].lo)
            hi = mid;
        else if (x > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

static bool cls_rn(uint32_t x, uint16_t f) {
    (void)f;
    return x == '\r' || x == '\n';
}
static bool cls_number(uint32_t x, uint16_t f) {
    (void)x;
    return f & F_N;
}
static bool cls_letter(uint32_t x, uint16_t f) {
    (void)x;
    return f & F_L;
}
static bool cls_punct(uint32_t x, uint16_t f) {
    (void)x;
    return f & UNICODE_F_PUNCTUATION;
}
/* default: [\p{P}\$\+<=>\^~\|]+ */
static bool cls_punct_default(uint32_t x, uint16_t f) {
    return (f & UNICODE_F_PUNCTUATION) || x == '$' || x == '+' || x == '<' || x == '=' || x == '>' ||
           x == '^' || x == '~' || x == '|';
}
/* falcon: [\p{P}\$\+<=>\^~\|`]+ */
static bool cls_punct_falcon(uint32_t x, uint16_t f) {
    return cls_punct_default(x, f) || x == '`';
}

/* [一-龥ࠀ-一가-퟿] (deepseek) */
static const cpt_range CJK_RANGES[] = {{0x0800, 0x9FA5}, {0xAC00, 0xD7FF}};
static bool cls_cjk(uint32_t x, uint16_t f) {
    /* llama.cpp matches these in a text where non-ASCII whitespace became \v */
    return !(f & F_WS) && in_ranges(CJK_RANGES, sizeof CJK_RANGES / sizeof CJK_RANGES[0], x);
}

/* deepseek-llm's letters: the explicit list of cased letters in its tokenizer.json. */
static const cpt_range DSL_LETTERS[] = {
    {0x0041, 0x005A},   {0x0061, 0x007A},   {0x00B5, 0x00B5},   {0x00C0, 0x00D6},   {0x00D8, 0x00F6},
    {0x00F8, 0x01BA},   {0x01BC, 0x01BF},   {0x01C4, 0x0293},   {0x0295, 0x02AF},   {0x0370, 0x0373},
    {0x0376, 0x0377},   {0x037B, 0x037D},   {0x037F, 0x037F},   {0x0386, 0x0386},   {0x0388, 0x038A},
    {0x038C, 0x038C},   {0x038E, 0x03A1},   {0x03A3, 0x03F5},   {0x03F7, 0x0481},   {0x048A, 0x052F},
    {0x0531, 0x0556},   {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},
    {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},
    {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
static bool cls_dsl_letter(uint32_t x, uint16_t f) {
    return !(f & F_WS) && in_ranges(DSL_LETTERS, sizeof DSL_LETTERS / sizeof DSL_LETTERS[0], x);
}

/* [!-/:-~！-／：-～‘-‟　-。] (deepseek-llm); U+3000 is whitespace and so never matches */
static const cpt_range DSL_PUNCT[] = {{0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F},
                                      {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}};
static bool cls_dsl_punct(uint32_t x, uint16_t f) {
    return !(f & F_WS) && in_ranges(DSL_PUNCT, sizeof DSL_PUNCT / sizeof DSL_PUNCT[0], x);
}

/* ---- generic std::regex-equivalent matchers ------------------------------------------ */

/* [SET]+ or (lead_ws) \s?[SET]+: leftmost greedy matches; the text between matches
 * stays as words too. */
static void split_run(seg_ctx *c, cls_fn cls, bool lead_ws) {
    size_t pos = c->a;
    while (pos < c->e) {
        size_t start = pos, end;
        if (cls(c->cpts[pos], c->flags[pos])) {
            end = pos + 1;
        } else if (lead_ws && (c->flags[pos] & F_WS) && pos + 1 < c->e &&
                   cls(c->cpts[pos + 1], c->flags[pos + 1])) {
            end = pos + 2;
        } else {
            pos++;
            continue;
        }
        while (end < c->e && cls(c->cpts[end], c->flags[end])) end++;
        emit(c, start);
        emit(c, end);
        pos = end;
    }
    emit(c, c->e);
}

/* A one-character class: every match is a word of its own. */
static void split_single(seg_ctx *c, cls_fn cls) {
    for (size_t pos = c->a; pos < c->e; pos++) {
        if (cls(c->cpts[pos], c->flags[pos])) {
            emit(c, pos);
            emit(c, pos + 1);
        }
    }
    emit(c, c->e);
}

/* \s+$ : the whitespace that ends the segment. */
static void split_trailing_ws(seg_ctx *c) {
    size_t t = c->e;
    while (t > c->a && (c->flags[t - 1] & F_WS)) t--;
    emit(c, t);
    emit(c, c->e);
}

/* [0-9][0-9][0-9] */
static void split_digits3(seg_ctx *c) {
    size_t pos = c->a;
    while (pos + 3 <= c->e) {
        const uint32_t *p = c->cpts + pos;
        if (p[0] >= '0' && p[0] <= '9' && p[1] >= '0' && p[1] <= '9' && p[2] >= '0' && p[2] <= '9') {
            emit(c, pos);
            emit(c, pos + 3);
            pos += 3;
        } else {
            pos++;
        }
    }
    emit(c, c->e);
}

/* ---- the families -------------------------------------------------------------------- */

typedef enum step_kind {
    STEP_GPT2,
    STEP_LLAMA3,
    STEP_QWEN2,
    STEP_RUN,      /* [SET]+ */
    STEP_WS_RUN,   /* \s?[SET]+ */
    STEP_SINGLE,   /* [SET] */
    STEP_TRAILING, /* \s+$ */
    STEP_DIGITS3,  /* [0-9][0-9][0-9] */
} step_kind;

typedef struct step {
    step_kind kind;
    cls_fn cls;
} step;

#define MAX_STEPS 6

typedef struct family {
    int n;
    step steps[MAX_STEPS];
} family;

static const family FAMILIES[] = {
    [PRETOK_DEFAULT] =
        {4, {{STEP_RUN, cls_punct_default}, {STEP_GPT2, NULL}, {STEP_RUN, cls_number}, {STEP_DIGITS3, NULL}}},
    [PRETOK_GPT2] = {1, {{STEP_GPT2, NULL}}},
    [PRETOK_LLAMA3] = {1, {{STEP_LLAMA3, NULL}}},
    [PRETOK_QWEN2] = {1, {{STEP_QWEN2, NULL}}},
    [PRETOK_DEEPSEEK_LLM] = {6,
                             {{STEP_SINGLE, cls_rn},
                              {STEP_WS_RUN, cls_dsl_letter},
                              {STEP_WS_RUN, cls_dsl_punct},
                              {STEP_TRAILING, NULL},
                              {STEP_RUN, cls_cjk},
                              {STEP_RUN, cls_number}}},
    [PRETOK_DEEPSEEK_CODER] = {5,
                               {{STEP_SINGLE, cls_rn},
                                {STEP_WS_RUN, cls_letter},
                                {STEP_WS_RUN, cls_punct},
                                {STEP_RUN, cls_cjk},
                                {STEP_SINGLE, cls_number}}},
    [PRETOK_FALCON] = {3, {{STEP_RUN, cls_punct_falcon}, {STEP_GPT2, NULL}, {STEP_DIGITS3, NULL}}},
    [PRETOK_STARCODER] = {2, {{STEP_SINGLE, cls_number}, {STEP_GPT2, NULL}}},
};

int pretok_split(pretok_type type, const uint32_t *cpts, size_t n, size_t **lens, size_t *n_lens) {
    *lens = NULL;
    *n_lens = 0;
    if ((unsigned)type >= sizeof FAMILIES / sizeof FAMILIES[0]) type = PRETOK_DEFAULT;
    const family *fam = &FAMILIES[type];

    size_t cap = n ? n : 1; /* every word is non-empty: at most n of them */
    size_t *cur = malloc(cap * sizeof *cur);
    size_t *next = malloc(cap * sizeof *next);
    uint16_t *flags = malloc(cap * sizeof *flags);
    if (!cur || !next || !flags) goto fail;
    for (size_t i = 0; i < n; i++) flags[i] = unicode_flags(cpts[i]);

    size_t n_cur = 0;
    if (n) cur[n_cur++] = n;
    for (int s = 0; s < fam->n; s++) {
        const step *st = &fam->steps[s];
        seg_ctx c = {.cpts = cpts, .flags = flags, .out = next, .n_out = 0};
        size_t start = 0;
        for (size_t i = 0; i < n_cur; i++) {
            c.a = c.prev = start;
            c.e = start + cur[i];
            switch (st->kind) {
            case STEP_GPT2: split_gpt2(&c); break;
            case STEP_LLAMA3: split_llama3(&c, 3); break;
            case STEP_QWEN2: split_llama3(&c, 1); break;
            case STEP_RUN: split_run(&c, st->cls, false); break;
            case STEP_WS_RUN: split_run(&c, st->cls, true); break;
            case STEP_SINGLE: split_single(&c, st->cls); break;
            case STEP_TRAILING: split_trailing_ws(&c); break;
            case STEP_DIGITS3: split_digits3(&c); break;
            }
            start = c.e;
        }
        size_t *tmp = cur;
        cur = next;
        next = tmp;
        n_cur = c.n_out;
    }
    free(next);
    free(flags);
    *lens = cur;
    *n_lens = n_cur;
    return IFD_OK;

fail:
    free(cur);
    free(next);
    free(flags);
    return IFD_ERR_NOMEM;
}
