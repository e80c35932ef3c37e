/* tokenizer_special.c — the special tokens of a vocabulary, as llama.cpp's llama_vocab
 * load() settles them: ids from metadata (out-of-range ids keep the default), tokens
 * found by their spelling when the metadata does not name them (EOT, EOM, FIM), the
 * end-of-generation set, the type overrides that come with both ("control-looking"
 * tokens become CONTROL, so they are no longer matched in plain text), a few per-model
 * workarounds, and the list of tokens tokenizer_st_partition looks for in text.
 *
 * The spelling lists follow llama.cpp as bundled in llama-cpp-python 0.3.36 (2026). They
 * change what is parsed out of text only for tokens that are not CONTROL already.
 * Runs once inside tok_create (single-threaded). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "../util/common.h"
#include "tokenizer_impl.h"

#define KEY(k) "tokenizer.ggml." k
#define NAMES(a) a, sizeof(a) / sizeof(a[0])

/* DeepSeek's full-width bars and U+2581 */
#define DS_BAR "\xef\xbd\x9c"
#define DS_SP "\xe2\x96\x81"

static const char *const EOT_NAMES[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "<|end_of_text|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "<end_of_utterance>",
                                        "<" DS_BAR "end" DS_SP "of" DS_SP "sentence" DS_BAR ">"};
static const char *const EOM_NAMES[] = {"<|eom_id|>"};
static const char *const FIM_PRE[] = {
    "<|fim_prefix|>", "<fim-prefix>",    "<fim_prefix>", "<" DS_BAR "fim" DS_SP "begin" DS_BAR ">",
    "<PRE>",          "<|code_prefix|>", "<|prefix|>"};
static const char *const FIM_SUF[] = {
    "<|fim_suffix|>", "<fim-suffix>",    "<fim_suffix>", "<" DS_BAR "fim" DS_SP "hole" DS_BAR ">",
    "<SUF>",          "<|code_suffix|>", "<|suffix|>"};
static const char *const FIM_MID[] = {
    "<|fim_middle|>", "<fim-middle>",    "<fim_middle>", "<" DS_BAR "fim" DS_SP "end" DS_BAR ">",
    "<MID>",          "<|code_middle|>", "<|middle|>"};
static const char *const FIM_PAD[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
static const char *const FIM_REP[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
static const char *const FIM_SEP[] = {"<|file_sep|>"};
static const char *const EOG_NAMES[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<|return|>",
                                        "<|call|>",
                                        "<|flush|>",
                                        "<|calls|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "</s>",
                                        "<|eom_id|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "[EOS]",
                                        "<|end_of_text|>",
                                        "<end_of_utterance>",
                                        "<eos>",
                                        "<turn|>",
                                        "<|tool_response>"};
/* gpt-oss: always rendered, so always user-defined */
static const char *const HARMONY_USER[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

/* An id from metadata if present and in range (llama.cpp keeps the default otherwise). */
static void read_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t *id) {
    int64_t v;
    if (gguf_get_i64(f, key, &v) && v >= 0 && v < n_vocab) *id = (int32_t)v;
}

static int32_t find_cstr(const tokenizer *t, const char *s) {
    return strmap_get(&t->by_text, s, strlen(s));
}

/* When the metadata names none, the first token with one of the spellings (lowest id;
 * llama.cpp takes whichever its hash map yields first) is taken and made CONTROL. */
static int32_t detect(tokenizer *t, int32_t cur, const char *const *names, size_t n_names) {
    if (cur >= 0) return cur;
    int32_t best = -1;
    for (size_t i = 0; i < n_names; i++) {
        int32_t id = find_cstr(t, names[i]);
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    if (best >= 0) t->tok[best].type = TOK_TYPE_CONTROL;
    return best;
}

static bool eog_has(const tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

static int eog_add(tokenizer *t, int32_t id) {
    if (id < 0 || eog_has(t, id)) return IFD_OK;
    int32_t *n = realloc(t->eog, (t->n_eog + 1) * sizeof *n);
    if (!n) return IFD_ERR_NOMEM;
    t->eog = n;
    t->eog[t->n_eog++] = id;
    return IFD_OK;
}

static void eog_remove(tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eog; i++) {
        if (t->eog[i] != id) continue;
        t->eog[i] = t->eog[--t->n_eog];
        return;
    }
}

/* The EOG member spelled s, or -1. */
static int32_t eog_find(const tokenizer *t, const char *s) {
    int32_t id = find_cstr(t, s);
    return id >= 0 && eog_has(t, id) ? id : -1;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

/* longest first, then by id (llama.cpp's std::sort leaves ties unspecified) */
static int cmp_len_id(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool is_special_type(uint8_t ty) {
    return ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN;
}

static int build_cache(tokenizer *t) {
    size_t ns = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) ns += is_special_type(t->tok[id].type);
    if (!ns) return IFD_OK;
    len_id *tmp = malloc(ns * sizeof *tmp);
    t->special = malloc(ns * sizeof *t->special);
    if (!tmp || !t->special) {
        free(tmp);
        return IFD_ERR_NOMEM;
    }
    size_t k = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->tok[id].type)) tmp[k++] = (len_id){t->tok[id].len, id};
    qsort(tmp, ns, sizeof *tmp, cmp_len_id);
    for (size_t i = 0; i < ns; i++) t->special[i] = tmp[i].id;
    t->n_special = ns;
    free(tmp);
    return IFD_OK;
}

/* llama.cpp sets these by pre-tokenizer / model name, not from the file. */
static void set_strip(tokenizer *t, const gguf_file *f) {
    gguf_str pre = {0}, name = {0};
    gguf_get_str(f, KEY("pre"), &pre);
    gguf_get_str(f, "general.name", &name);
    char lname[256];
    size_t ln = name.n < sizeof lname - 1 ? (size_t)name.n : sizeof lname - 1;
    for (size_t i = 0; i < ln; i++) lname[i] = (char)tolower((unsigned char)name.s[i]);
    lname[ln] = 0;
    if (gguf_str_eq(pre, "jina-v2-de") || gguf_str_eq(pre, "jina-v2-es") ||
        gguf_str_eq(pre, "jina-v2-code")) {
        int32_t id = find_cstr(t, "<mask>");
        if (id >= 0) t->tok[id].strip |= TOK_STRIP_LEFT;
    } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (size_t i = 0; i < t->n_special; i++) t->tok[t->special[i]].strip |= TOK_STRIP_RIGHT;
        int32_t id = find_cstr(t, "</s>");
        if (id >= 0) t->tok[id].strip |= TOK_STRIP_RIGHT;
        static const char *const KEEP[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < 3; i++) {
            id = find_cstr(t, KEEP[i]);
            if (id >= 0) t->tok[id].strip &= (uint8_t)~TOK_STRIP_RIGHT;
        }
    }
}

int tok_build_special(tokenizer *t, const gguf_file *f) {
    int rc;
    int32_t n = t->n_vocab;
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;

    read_id(f, KEY("bos_token_id"), n, &t->bos);
    read_id(f, KEY("eos_token_id"), n, &t->eos);
    read_id(f, KEY("eot_token_id"), n, &t->eot);
    read_id(f, KEY("eom_token_id"), n, &t->eom);
    read_id(f, KEY("unknown_token_id"), n, &t->unk);
    read_id(f, KEY("padding_token_id"), n, &t->pad);
    read_id(f, KEY("fim_pre_token_id"), n, &fim_pre);
    read_id(f, KEY("fim_suf_token_id"), n, &fim_suf);
    read_id(f, KEY("fim_mid_token_id"), n, &fim_mid);
    read_id(f, KEY("fim_pad_token_id"), n, &fim_pad);
    read_id(f, KEY("fim_rep_token_id"), n, &fim_rep);
    read_id(f, KEY("fim_sep_token_id"), n, &fim_sep);
    read_id(f, KEY("prefix_token_id"), n, &fim_pre); /* deprecated spellings */
    read_id(f, KEY("suffix_token_id"), n, &fim_suf);
    read_id(f, KEY("middle_token_id"), n, &fim_mid);

    bool b;
    if (gguf_get_bool(f, KEY("add_bos_token"), &b)) t->add_bos = b;
    if (gguf_get_bool(f, KEY("add_eos_token"), &b)) t->add_eos = b;

    t->eot = detect(t, t->eot, NAMES(EOT_NAMES));
    t->eom = detect(t, t->eom, NAMES(EOM_NAMES));
    fim_pre = detect(t, fim_pre, NAMES(FIM_PRE));
    fim_suf = detect(t, fim_suf, NAMES(FIM_SUF));
    fim_mid = detect(t, fim_mid, NAMES(FIM_MID));
    fim_pad = detect(t, fim_pad, NAMES(FIM_PAD));
    fim_rep = detect(t, fim_rep, NAMES(FIM_REP));
    fim_sep = detect(t, fim_sep, NAMES(FIM_SEP));

    /* end of generation: FIM pad/repo/separator, the known spellings (made CONTROL),
     * then EOS, EOT, EOM */
    if ((rc = eog_add(t, fim_pad)) || (rc = eog_add(t, fim_rep)) || (rc = eog_add(t, fim_sep))) return rc;
    for (size_t i = 0; i < sizeof EOG_NAMES / sizeof EOG_NAMES[0]; i++) {
        int32_t id = find_cstr(t, EOG_NAMES[i]);
        if (id < 0) continue;
        t->tok[id].type = TOK_TYPE_CONTROL;
        if ((rc = eog_add(t, id))) return rc;
    }
    for (size_t i = 0; i < sizeof HARMONY_USER / sizeof HARMONY_USER[0]; i++) {
        int32_t id = find_cstr(t, HARMONY_USER[i]);
        if (id >= 0) t->tok[id].type = TOK_TYPE_USER_DEFINED;
    }
    if ((rc = eog_add(t, t->eos)) || (rc = eog_add(t, t->eot)) || (rc = eog_add(t, t->eom))) return rc;

    /* o200k_harmony / solar-open: <|end|> ends a message, not the generation */
    int32_t end = eog_find(t, "<|end|>");
    bool ret = eog_find(t, "<|return|>") >= 0, flush = eog_find(t, "<|flush|>") >= 0;
    bool call = eog_find(t, "<|call|>") >= 0 || eog_find(t, "<|calls|>") >= 0;
    if (end >= 0 && ((ret && call) || (call && flush))) {
        eog_remove(t, end);
        t->tok[end].type = TOK_TYPE_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is text there */
    int32_t s_end = eog_find(t, "</s>");
    if (s_end >= 0 && eog_find(t, "<|tool_response>") >= 0) {
        eog_remove(t, s_end);
        t->tok[s_end].type = TOK_TYPE_NORMAL;
    }
    if (t->n_eog) qsort(t->eog, t->n_eog, sizeof *t->eog, cmp_i32);

    if ((rc = build_cache(t))) return rc;
    set_strip(t, f);
    return IFD_OK;
}
