/* tokenizer_impl.h — the tokenizer struct and the per-family encoders, shared by
 * tokenizer.c (building, encoding, accessors), tokenizer_decode.c (pieces, decoding),
 * spm.c and bpe.c. A tokenizer is immutable after tok_create (thread-safe reads).
 * Internal to src/tokenizer/. */
#ifndef INFERD_TOK_IMPL_H
#define INFERD_TOK_IMPL_H
#include "../util/layer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pretok.h"
#include "strmap.h"
#include "tokenizer.h"

enum {
    TOK_STRIP_LEFT = 1,  /* eat whitespace before the token when matched as special */
    TOK_STRIP_RIGHT = 2, /* ... and after it */
};

typedef struct tok_entry {
    uint32_t off; /* into tokenizer.text (NUL-terminated there) */
    uint32_t len; /* bytes */
    float score;  /* SPM merge priority; 0 when the file has no scores */
    uint8_t type; /* tok_type, after llama.cpp's control-token overrides */
    uint8_t strip;
} tok_entry;

struct tokenizer {
    tok_kind kind;
    pretok_type pre;
    int32_t n_vocab;
    tok_entry *tok;   /* n_vocab */
    char *text;       /* all token strings, each followed by a NUL */
    strmap by_text;   /* token string -> id (the last id wins for duplicates) */
    char *merge_text; /* BPE: the merge lines "left right", each NUL-terminated */
    strmap merges;    /* "left right" -> rank (the first occurrence wins) */

    int32_t *special; /* CONTROL / USER_DEFINED / UNKNOWN ids, longest text first */
    size_t n_special;
    int32_t *eog; /* sorted */
    size_t n_eog;

    int32_t bos, eos, eot, eom, unk, pad; /* -1 when none */
    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    /* Byte fallback. SPM: the "<0xXX>" token (else the 1-byte token); BPE: the token
     * whose text is that single byte. -1 when none. */
    int32_t byte_tok[256];
};

/* A growable list of ids. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

int tok_ids_push(tok_ids *ids, int32_t id);

/* tokenizer_special.c: special ids from metadata, llama.cpp's detection of EOT/EOM/FIM
 * and end-of-generation tokens by their text (with its type overrides), the cache of
 * tokens matched in text, per-model whitespace stripping. Needs t->tok, t->by_text and
 * the family defaults; returns IFD_OK or IFD_ERR_NOMEM. */
int tok_build_special(tokenizer *t, const gguf_file *f);

/* SPM over text that is already whitespace-escaped ("▁") and prefixed. */
int spm_encode(const tokenizer *t, const char *text, size_t n, tok_ids *out);
/* Byte-level BPE over raw text: pre-tokenize, byte-encode, merge. */
int bpe_encode(const tokenizer *t, const char *text, size_t n, tok_ids *out);

static inline const char *tok_entry_text(const tokenizer *t, int32_t id) {
    return t->text + t->tok[id].off;
}

#endif
