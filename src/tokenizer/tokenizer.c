/* tokenizer.c — building a tokenizer from GGUF tokenizer.ggml.* metadata, encoding
 * (special-token partition, then the SPM or BPE encoder per text fragment) and the
 * accessors of tokenizer.h. Decoding lives in tokenizer_decode.c.
 *
 * Follows llama.cpp's llama_vocab (load, tokenizer_st_partition, tokenize) so that ids
 * match it exactly; deviations are only where llama.cpp would crash or abort on bad
 * data, and are commented. A tokenizer is immutable once built: all functions here
 * are thread-safe after tok_create returns. */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "../util/common.h"
#include "tokenizer_impl.h"

#define KEY(k) "tokenizer.ggml." k

/* Largest input tok_encode accepts: symbol indices are int32, and SPM's escaping may
 * triple the text. */
#define TOK_MAX_INPUT_BYTES ((size_t)1 << 28)

int tok_ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t ncap = ids->cap ? ids->cap * 2 : 64;
        int32_t *nv = realloc(ids->v, ncap * sizeof *nv);
        if (!nv) return IFD_ERR_NOMEM;
        ids->v = nv;
        ids->cap = ncap;
    }
    ids->v[ids->n++] = id;
    return IFD_OK;
}

/* ---- building ------------------------------------------------------------------------ */

typedef struct pre_name {
    const char *name;
    pretok_type type;
    unsigned flags;
} pre_name;

enum { PRE_IGNORE_MERGES = 1, PRE_ADD_BOS = 2, PRE_NO_BOS = 4 };

/* tokenizer.ggml.pre names llama.cpp knows, for the regex families implemented here.
 * Any other name (and a missing one) uses the default splitter, as llama.cpp does for
 * a missing name; llama.cpp refuses unknown names, we accept them silently. */
static const pre_name PRE_NAMES[] = {
    {"default", PRETOK_DEFAULT, 0},
    {"llama3", PRETOK_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-v3", PRETOK_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-bpe", PRETOK_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon3", PRETOK_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"dbrx", PRETOK_LLAMA3, 0},
    {"smaug-bpe", PRETOK_LLAMA3, 0},
    {"chatglm-bpe", PRETOK_LLAMA3, PRE_NO_BOS},
    {"deepseek-llm", PRETOK_DEEPSEEK_LLM, 0},
    {"deepseek-coder", PRETOK_DEEPSEEK_CODER, 0},
    {"falcon", PRETOK_FALCON, 0},
    {"mpt", PRETOK_GPT2, 0},
    {"olmo", PRETOK_GPT2, 0},
    {"jais", PRETOK_GPT2, 0},
    {"gpt-2", PRETOK_GPT2, 0},
    {"phi-2", PRETOK_GPT2, 0},
    {"jina-es", PRETOK_GPT2, 0},
    {"jina-de", PRETOK_GPT2, 0},
    {"gigachat", PRETOK_GPT2, 0},
    {"jina-v1-en", PRETOK_GPT2, 0},
    {"jina-v2-es", PRETOK_GPT2, 0},
    {"jina-v2-de", PRETOK_GPT2, 0},
    {"jina-v2-code", PRETOK_GPT2, 0},
    {"roberta-bpe", PRETOK_GPT2, 0},
    {"starcoder", PRETOK_STARCODER, 0},
    {"refact", PRETOK_STARCODER, 0},
    {"command-r", PRETOK_STARCODER, 0},
    {"smollm", PRETOK_STARCODER, 0},
    {"codeshell", PRETOK_STARCODER, 0},
    {"exaone", PRETOK_STARCODER, 0},
    {"minerva-7b", PRETOK_STARCODER, 0},
    {"qwen2", PRETOK_QWEN2, 0},
    {"stablelm2", PRETOK_QWEN2, 0},
    {"megrez", PRETOK_QWEN2, 0},
};

static bool str_is(gguf_str s, const char *c) {
    return gguf_str_eq(s, c);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int build_merges(tokenizer *t, const gguf_file *f, char *err, size_t err_bytes) {
    const gguf_array *m = gguf_get_arr(f, KEY("merges"), GGUF_TYPE_STRING);
    if (!m) {
        if (gguf_find_kv(f, KEY("merges")))
            return ifd_errf(err, err_bytes, IFD_ERR_FORMAT,
                            "tokenizer.ggml.merges is not an array of strings");
        return ifd_errf(err, err_bytes, IFD_ERR_FORMAT, "BPE vocabulary without tokenizer.ggml.merges");
    }
    if (m->n > (uint64_t)INT32_MAX)
        return ifd_errf(err, err_bytes, IFD_ERR_LIMIT, "too many merges (%llu)", (unsigned long long)m->n);
    size_t total = 0;
    for (uint64_t i = 0; i < m->n; i++) {
        if (m->strs[i].n > UINT32_MAX - 1 || !ifd_add_ok(total, (size_t)m->strs[i].n + 1, &total))
            return ifd_errf(err, err_bytes, IFD_ERR_LIMIT, "merge %llu is too long", (unsigned long long)i);
    }
    int rc;
    if ((rc = strmap_init(&t->merges, (size_t)m->n)))
        return ifd_errf(err, err_bytes, rc, "out of memory for %llu merges", (unsigned long long)m->n);
    t->merge_text = malloc(total ? total : 1);
    if (!t->merge_text) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory for merges");
    size_t off = 0;
    for (uint64_t i = 0; i < m->n; i++) {
        gguf_str s = m->strs[i];
        /* llama.cpp splits at the first space after the first byte; a line without one
         * maps ("", "") and can never match two non-empty symbols, so it is dropped */
        const char *sp = s.n > 1 ? memchr(s.s + 1, ' ', (size_t)s.n - 1) : NULL;
        if (!sp) continue;
        char *key = t->merge_text + off;
        memcpy(key, s.s, (size_t)s.n);
        key[s.n] = 0;
        off += (size_t)s.n + 1;
        strmap_put(&t->merges, key, (uint32_t)s.n, (int32_t)i, false);
    }
    return IFD_OK;
}

int tok_create(tokenizer **out, const gguf_file *f, char *err, size_t err_bytes) {
    int rc;
    *out = NULL;
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = -1;

    gguf_str model;
    if (!gguf_get_str(f, KEY("model"), &model)) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_FORMAT, "no tokenizer.ggml.model in the file");
        goto fail;
    }
    if (str_is(model, "llama")) {
        t->kind = TOK_KIND_SPM;
    } else if (str_is(model, "gpt2")) {
        t->kind = TOK_KIND_BPE;
    } else {
        rc = ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED,
                      "tokenizer.ggml.model '%.*s' is not supported (only llama and gpt2)",
                      (int)IFD_MIN(model.n, 64), model.s);
        goto fail;
    }

    const gguf_array *toks = gguf_get_arr(f, KEY("tokens"), GGUF_TYPE_STRING);
    if (!toks || toks->n == 0) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_FORMAT, "tokenizer.ggml.tokens missing, empty or not strings");
        goto fail;
    }
    if (toks->n > (uint64_t)(1 << 28)) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_LIMIT, "vocabulary too large (%llu tokens)",
                      (unsigned long long)toks->n);
        goto fail;
    }
    int32_t n = (int32_t)toks->n;
    t->n_vocab = n;

    const gguf_array *scores = gguf_get_arr(f, KEY("scores"), GGUF_TYPE_COUNT_);
    const gguf_array *types = gguf_get_arr(f, KEY("token_type"), GGUF_TYPE_COUNT_);
    if ((!scores && gguf_find_kv(f, KEY("scores"))) ||
        (scores &&
         (scores->type == GGUF_TYPE_STRING || scores->type == GGUF_TYPE_ARRAY || scores->n < toks->n))) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_FORMAT, "tokenizer.ggml.scores must hold (at least) %d numbers",
                      n);
        goto fail;
    }
    if ((!types && gguf_find_kv(f, KEY("token_type"))) ||
        (types &&
         (types->type == GGUF_TYPE_STRING || types->type == GGUF_TYPE_ARRAY || types->n < toks->n))) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_FORMAT,
                      "tokenizer.ggml.token_type must hold (at least) %d integers", n);
        goto fail;
    }

    /* token strings: llama.cpp renames empty ones "[EMPTY_<id>]" */
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = toks->strs[i].n ? (size_t)toks->strs[i].n : 24;
        if (toks->strs[i].n > UINT32_MAX - 32 || !ifd_add_ok(total, len + 1, &total) || total > UINT32_MAX) {
            rc = ifd_errf(err, err_bytes, IFD_ERR_LIMIT, "vocabulary strings too large");
            goto fail;
        }
    }
    t->tok = calloc((size_t)n, sizeof *t->tok);
    t->text = malloc(total);
    if (!t->tok || !t->text || strmap_init(&t->by_text, (size_t)n)) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory for %d tokens", n);
        goto fail;
    }
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        tok_entry *e = &t->tok[i];
        gguf_str s = toks->strs[i];
        e->off = (uint32_t)off;
        if (s.n) {
            memcpy(t->text + off, s.s, (size_t)s.n);
            e->len = (uint32_t)s.n;
        } else {
            e->len = (uint32_t)snprintf(t->text + off, 24, "[EMPTY_%d]", (int)i);
        }
        t->text[off + e->len] = 0;
        off += e->len + 1;
        e->score = scores ? (float)gguf_arr_f64(scores, (uint64_t)i) : 0.0f;
        e->type = TOK_TYPE_NORMAL;
        if (types) {
            int64_t ty = gguf_arr_i64(types, (uint64_t)i);
            e->type = ty >= TOK_TYPE_UNDEFINED && ty <= TOK_TYPE_BYTE ? (uint8_t)ty : TOK_TYPE_UNDEFINED;
        }
        strmap_put(&t->by_text, t->text + e->off, e->len, i, true);
    }

    /* family defaults, then the pre-tokenizer, then metadata overrides (llama.cpp order) */
    if (t->kind == TOK_KIND_SPM) {
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
        t->pre = PRETOK_DEFAULT;
    } else {
        t->bos = 11;
        t->eos = 11;
        t->pre = PRETOK_DEFAULT;
        gguf_str pre;
        if (gguf_get_str(f, KEY("pre"), &pre)) {
            for (size_t i = 0; i < sizeof PRE_NAMES / sizeof PRE_NAMES[0]; i++) {
                if (!str_is(pre, PRE_NAMES[i].name)) continue;
                t->pre = PRE_NAMES[i].type;
                if (PRE_NAMES[i].flags & PRE_IGNORE_MERGES) t->ignore_merges = true;
                if (PRE_NAMES[i].flags & PRE_ADD_BOS) t->add_bos = true;
                if (PRE_NAMES[i].flags & PRE_NO_BOS) t->bos = -1;
                break;
            }
        }
        if ((rc = build_merges(t, f, err, err_bytes))) goto fail;
    }
    if (t->bos >= n) t->bos = -1;
    if (t->eos >= n) t->eos = -1;
    if (t->unk >= n) t->unk = -1;
    bool b;
    if (gguf_get_bool(f, KEY("add_space_prefix"), &b)) t->add_space_prefix = b;

    if ((rc = tok_build_special(t, f))) {
        ifd_errf(err, err_bytes, rc, "out of memory");
        goto fail;
    }

    for (int c = 0; c < 256; c++) {
        char one = (char)c;
        if (t->kind == TOK_KIND_SPM) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", c);
            int32_t id = strmap_get(&t->by_text, hex, 6);
            t->byte_tok[c] = id >= 0 ? id : strmap_get(&t->by_text, &one, 1);
        } else {
            t->byte_tok[c] = strmap_get(&t->by_text, &one, 1);
        }
    }

    *out = t;
    return IFD_OK;

fail:
    tok_destroy(t);
    return rc;
}

void tok_destroy(tokenizer *t) {
    if (!t) return;
    strmap_deinit(&t->by_text);
    strmap_deinit(&t->merges);
    free(t->tok);
    free(t->text);
    free(t->merge_text);
    free(t->special);
    free(t->eog);
    free(t);
}

/* ---- encoding ------------------------------------------------------------------------ */

typedef struct frag {
    int32_t id;      /* >= 0: a special token; -1: raw text */
    size_t off, len; /* raw text: bytes of the input */
} frag;

typedef struct frag_list {
    frag *v;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, frag f) {
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 16;
        frag *nv = realloc(l->v, ncap * sizeof *nv);
        if (!nv) return IFD_ERR_NOMEM;
        l->v = nv;
        l->cap = ncap;
    }
    l->v[l->n++] = f;
    return IFD_OK;
}

static inline bool is_c_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Cut one raw fragment at every occurrence of token id (left to right, without
 * overlap), with the token's whitespace stripping: llama.cpp's inner loop. */
static int cut_fragment(const tokenizer *t, const char *text, frag fr, int32_t id, frag_list *out) {
    const char *tt = tok_entry_text(t, id);
    size_t tl = t->tok[id].len;
    uint8_t strip = t->tok[id].strip;
    size_t base = fr.off, len = fr.len;
    int rc;
    for (;;) {
        const char *m = len >= tl ? memmem(text + base, len, tt, tl) : NULL;
        if (!m) {
            if (len > 0 && (rc = frag_push(out, (frag){-1, base, len}))) return rc;
            return IFD_OK;
        }
        size_t pos = (size_t)(m - text);
        size_t left = pos - base;
        if (strip & TOK_STRIP_LEFT)
            while (left > 0 && is_c_space(text[base + left - 1])) left--;
        if (left > 0 && (rc = frag_push(out, (frag){-1, base, left}))) return rc;
        if ((rc = frag_push(out, (frag){id, 0, 0}))) return rc;
        size_t roff = pos + tl, rlen = base + len - roff;
        if (strip & TOK_STRIP_RIGHT) {
            while (rlen > 0 && is_c_space(text[roff])) {
                roff++;
                rlen--;
            }
        }
        base = roff;
        len = rlen;
    }
}

/* tokenizer_st_partition: for each special token, longest first, split every raw
 * fragment at its occurrences. Control and unknown tokens only when parse_special;
 * user-defined tokens always (as llama.cpp and HF tokenizers do). */
static int partition(const tokenizer *t, const char *text, size_t n, bool parse_special, frag_list *frags) {
    int rc = IFD_OK;
    frag_list next = {0};
    bool present[256] = {false};
    for (size_t i = 0; i < n; i++) present[(unsigned char)text[i]] = true;
    if (n > 0 && (rc = frag_push(frags, (frag){-1, 0, n}))) return rc;

    for (size_t s = 0; s < t->n_special; s++) {
        int32_t id = t->special[s];
        const tok_entry *e = &t->tok[id];
        if (!parse_special && (e->type == TOK_TYPE_CONTROL || e->type == TOK_TYPE_UNKNOWN)) continue;
        /* cheap rejections before touching the fragments: absent from the whole text
         * means absent from every fragment */
        if (e->len > n || !present[(unsigned char)t->text[e->off]]) continue;
        if (!memmem(text, n, t->text + e->off, e->len)) continue;
        next.n = 0;
        for (size_t i = 0; i < frags->n; i++) {
            frag fr = frags->v[i];
            rc = fr.id >= 0 ? frag_push(&next, fr) : cut_fragment(t, text, fr, id, &next);
            if (rc) goto done;
        }
        frag_list tmp = *frags;
        *frags = next;
        next = tmp;
    }
done:
    free(next.v);
    return rc;
}

/* SPM text: a leading space when asked, and every ' ' escaped as U+2581. */
static int spm_fragment(const tokenizer *t, const char *s, size_t n, bool prefix, tok_ids *out) {
    size_t spaces = prefix;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    size_t len = n + prefix + 2 * spaces;
    char *buf = malloc(len ? len : 1);
    if (!buf) return IFD_ERR_NOMEM;
    size_t k = 0;
    if (prefix) {
        memcpy(buf, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(buf + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            buf[k++] = s[i];
        }
    }
    int rc = spm_encode(t, buf, k, out);
    free(buf);
    return rc;
}

/* The ids of the fragments of text, in order: special tokens as they are, raw text
 * through the SPM or BPE encoder. *prev_special carries llama.cpp's is_prev_special
 * across calls (SPM: a raw fragment right after a special token, or first, gets the
 * space prefix). */
static int encode_frags(const tokenizer *t, const char *text, const frag_list *frags, bool *prev_special,
                        tok_ids *out) {
    int rc = IFD_OK;
    for (size_t i = 0; i < frags->n && !rc; i++) {
        const frag *fr = &frags->v[i];
        if (fr->id >= 0) {
            rc = tok_ids_push(out, fr->id);
            *prev_special = true;
        } else if (t->kind == TOK_KIND_SPM) {
            rc = spm_fragment(t, text + fr->off, fr->len, t->add_space_prefix && *prev_special, out);
            *prev_special = false;
        } else {
            rc = bpe_encode(t, text + fr->off, fr->len, out);
        }
    }
    return rc;
}

int tok_encode(const tokenizer *t, const char *text, size_t n, unsigned flags, int32_t **ids, size_t *n_ids) {
    return tok_encode_mapped(t, text, n, flags, NULL, NULL, ids, n_ids);
}

int tok_encode_mapped(const tokenizer *t, const char *text, size_t n, unsigned flags, tok_map_fn map,
                      void *map_ctx, int32_t **ids, size_t *n_ids) {
    int rc;
    tok_ids out = {0};
    frag_list frags = {0}, sub = {0};
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && n)) return IFD_ERR_INVALID;
    if (n > TOK_MAX_INPUT_BYTES) return IFD_ERR_LIMIT;

    if ((flags & TOK_ENC_ADD_BOS) && t->add_bos && t->bos >= 0 && (rc = tok_ids_push(&out, t->bos)))
        goto fail;
    if ((rc = partition(t, text, n, (flags & TOK_ENC_PARSE_SPECIAL) != 0, &frags))) goto fail;

    bool prev_special = true; /* SPM: the first text fragment gets the space prefix */
    if (!map) {
        if ((rc = encode_frags(t, text, &frags, &prev_special, &out))) goto fail;
    } else {
        /* each raw fragment becomes map's text, split again at user-defined tokens only:
         * what tok_encode without TOK_ENC_PARSE_SPECIAL does with it */
        for (size_t i = 0; i < frags.n; i++) {
            const frag *fr = &frags.v[i];
            if (fr->id >= 0) {
                if ((rc = tok_ids_push(&out, fr->id))) goto fail;
                prev_special = true;
                continue;
            }
            const char *s = NULL;
            size_t sn = 0;
            if ((rc = map(map_ctx, text + fr->off, fr->len, &s, &sn))) goto fail;
            if (sn == 0) continue; /* mapped to nothing: as if the fragment were not there */
            if (sn > TOK_MAX_INPUT_BYTES) {
                rc = IFD_ERR_LIMIT;
                goto fail;
            }
            sub.n = 0;
            if ((rc = partition(t, s, sn, false, &sub)) || (rc = encode_frags(t, s, &sub, &prev_special, &out)))
                goto fail;
        }
    }
    if ((flags & TOK_ENC_ADD_EOS) && t->add_eos && t->eos >= 0 && (rc = tok_ids_push(&out, t->eos)))
        goto fail;

    free(frags.v);
    free(sub.v);
    if (!out.v) out.v = malloc(sizeof(int32_t)); /* a valid pointer even for no ids */
    if (!out.v) return IFD_ERR_NOMEM;
    *ids = out.v;
    *n_ids = out.n;
    return IFD_OK;

fail:
    free(frags.v);
    free(sub.v);
    free(out.v);
    return rc;
}

/* ---- accessors ----------------------------------------------------------------------- */

tok_kind tok_get_kind(const tokenizer *t) {
    return t->kind;
}
int32_t tok_n_vocab(const tokenizer *t) {
    return t->n_vocab;
}
int32_t tok_bos(const tokenizer *t) {
    return t->bos;
}
int32_t tok_eos(const tokenizer *t) {
    return t->eos;
}
int32_t tok_eot(const tokenizer *t) {
    return t->eot;
}
bool tok_add_bos(const tokenizer *t) {
    return t->add_bos && t->bos >= 0;
}
bool tok_add_eos(const tokenizer *t) {
    return t->add_eos && t->eos >= 0;
}

bool tok_is_eog(const tokenizer *t, int32_t id) {
    if (id < 0) return false;
    return bsearch(&id, t->eog, t->n_eog, sizeof *t->eog, cmp_i32) != NULL;
}

tok_type tok_get_type(const tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return TOK_TYPE_UNDEFINED;
    return (tok_type)t->tok[id].type;
}

const char *tok_text(const tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return "";
    return tok_entry_text(t, id);
}

size_t tok_text_len(const tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return 0;
    return t->tok[id].len;
}

int32_t tok_find(const tokenizer *t, const char *text, size_t n) {
    return strmap_get(&t->by_text, text, n);
}
