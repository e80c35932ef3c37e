/* tokenizer.h — text <-> token ids from a GGUF vocabulary.
 *
 * Two families: SentencePiece-style (tokenizer.ggml.model = "llama": scores, byte
 * fallback, leading-space rules) and byte-level BPE (tokenizer.ggml.model = "gpt2":
 * merges, plus the pre-tokenizer named by tokenizer.ggml.pre). Ids match llama.cpp's
 * tokenizer exactly. Control (and unknown) tokens are matched in the input only when
 * TOK_ENC_PARSE_SPECIAL is given (chat-template output), never inside user text.
 * User-defined tokens (the "added vocabulary": MPT's runs of spaces, DeepSeek's single
 * letters) are always split out first, as llama.cpp and HF tokenizers do.
 *
 * tokenizer.ggml.pre: default, gpt-2, llama-bpe (llama3), qwen2, deepseek-llm,
 * deepseek-coder, falcon, mpt, starcoder, refact, smollm and the other names llama.cpp
 * maps onto those regexes. An unknown or missing name uses the default splitter
 * (llama.cpp refuses unknown names; we accept the vocabulary without a warning).
 *
 * A tokenizer is immutable after tok_create: every function here is safe to call from
 * any number of threads at once. A tok_detok is single-threaded (one per sequence). */
#ifndef INFERD_TOKENIZER_H
#define INFERD_TOKENIZER_H
#include "../util/layer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../model/gguf.h"

typedef struct tokenizer tokenizer;

typedef enum tok_kind {
    TOK_KIND_SPM = 0, /* "llama" */
    TOK_KIND_BPE = 1, /* "gpt2" */
} tok_kind;

/* llama.cpp token types (tokenizer.ggml.token_type) */
typedef enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
} tok_type;

enum {
    TOK_ENC_ADD_BOS = 1 << 0,       /* prepend BOS if the vocabulary asks for it (add_bos_token) */
    TOK_ENC_PARSE_SPECIAL = 1 << 1, /* also match control/unknown tokens in the text */
    TOK_ENC_ADD_EOS = 1 << 2,       /* append EOS if the vocabulary asks for it (add_eos_token) */
};

/* Build from the tokenizer.ggml.* metadata of an open GGUF file. The tokenizer copies
 * what it needs; f may be closed afterwards. */
int tok_create(tokenizer **out, const gguf_file *f, char *err, size_t err_bytes);
void tok_destroy(tokenizer *t); /* accepts NULL */

/* A model with its vocabulary (tok_model.c): model_open (../model/model.h), then
 * tok_create on the same file, checked against the embedding rows (padded embeddings
 * are fine, fewer rows than tokens are not). Free with model_destroy, which frees the
 * tokenizer too. */
struct model;
int model_load(struct model **out, const char *path, char *err, size_t err_bytes);

/* A model built in memory (tok_synth.c): model_create_random (../model/model.h) of shape
 * with --dtype name dtype ("f32" ... "q6_k"), seed and n_threads, with the synthetic
 * vocabulary of tok_create_synthetic attached. Free with model_destroy. */
int model_load_random(struct model **out, const char *shape, const char *dtype, uint64_t seed,
                      int n_threads, char *err, size_t err_bytes);
/* The synthetic SentencePiece vocabulary of n_vocab (259 .. 2^24) tokens: <unk> 0,
 * <s> 1 (BOS), </s> 2 (EOS), byte tokens 3..258, then filler pieces ("▁", "▁a", ...,
 * "a", ..., "▁aa", ...). Any text encodes (byte fallback). */
int tok_create_synthetic(tokenizer **out, int32_t n_vocab, char *err, size_t err_bytes);

/* Encode n bytes of text (need not be valid UTF-8: invalid bytes are encoded as
 * byte tokens / U+FFFD the way llama.cpp does). *ids is malloc'ed (also when there are
 * no ids); caller frees. IFD_ERR_LIMIT above 256 MiB of text. The flags together give
 * llama.cpp's add_special (ADD_BOS | ADD_EOS) and parse_special. */
int tok_encode(const tokenizer *t, const char *text, size_t n, unsigned flags, int32_t **ids, size_t *n_ids);

/* tok_encode for text in which only some stretches may yield special tokens (a chat
 * prompt rendered from escaped request data, see src/server/chat_escape.h). The
 * special-token partition runs over text as tok_encode's does (control tokens too when
 * flags has TOK_ENC_PARSE_SPECIAL); then every raw fragment left between the matched
 * tokens is passed to map, and the text map returns (*out, *out_n bytes, owned by map
 * and valid until its next call; may be s itself) is encoded as tok_encode without
 * TOK_ENC_PARSE_SPECIAL would encode it: user-defined tokens are split out, control
 * tokens never. An empty result drops the fragment. map == NULL: exactly tok_encode.
 * A non-zero status from map is returned as is. */
typedef int (*tok_map_fn)(void *ctx, const char *s, size_t n, const char **out, size_t *out_n);
int tok_encode_mapped(const tokenizer *t, const char *text, size_t n, unsigned flags, tok_map_fn map,
                      void *map_ctx, int32_t **ids, size_t *n_ids);

tok_kind tok_get_kind(const tokenizer *t);
int32_t tok_n_vocab(const tokenizer *t);
int32_t tok_bos(const tokenizer *t); /* -1 when none */
int32_t tok_eos(const tokenizer *t); /* -1 when none */
int32_t tok_eot(const tokenizer *t); /* -1 when none */
bool tok_add_bos(const tokenizer *t);
bool tok_add_eos(const tokenizer *t);            /* add_eos_token (and an EOS id exists) */
bool tok_is_eog(const tokenizer *t, int32_t id); /* EOS, EOT, EOM and similar end-of-generation ids */
tok_type tok_get_type(const tokenizer *t, int32_t id);
/* The vocabulary string of a token exactly as stored (e.g. "▁the", "Ġthe", "<0x0A>"). */
const char *tok_text(const tokenizer *t, int32_t id);
size_t tok_text_len(const tokenizer *t, int32_t id); /* bytes of tok_text (it may hold NULs) */
/* Find a token by its exact vocabulary string; -1 if absent. */
int32_t tok_find(const tokenizer *t, const char *text, size_t n);

/* Decoded bytes of one token as they appear in output text: "▁" -> " ", byte tokens
 * -> the raw byte, byte-level BPE unmapped to bytes. Control tokens give "" unless
 * render_special. Writes at most cap bytes; returns the full length (like snprintf,
 * without NUL). */
size_t tok_piece(const tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap);

/* Decode a whole sequence into a malloc'ed NUL-terminated string: the concatenation of
 * the pieces (raw bytes, may be invalid UTF-8 if the ids are). Unlike llama.cpp's
 * llama_detokenize it neither drops SPM's leading space nor cleans up spaces. */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **out,
               size_t *out_bytes);

/* Incremental detokenizer: push ids one at a time, get back only complete UTF-8
 * characters; an incomplete trailing sequence is held until it completes (or is
 * flushed). Invalid sequences are replaced with U+FFFD. */
typedef struct tok_detok {
    const tokenizer *t;
    bool render_special;
    unsigned char held[8];
    int n_held;
} tok_detok;

void tok_detok_init(tok_detok *d, const tokenizer *t, bool render_special);
/* Appends the newly complete text to out (cap bytes) and returns the byte count written.
 * A valid piece needs at most its length + 3 bytes; 3 x piece length + 3 always suffices
 * (each invalid byte may become a 3-byte U+FFFD). Text that does not fit is dropped,
 * never cut inside a character. */
size_t tok_detok_push(tok_detok *d, int32_t id, char *out, size_t cap);
/* Emits whatever is held (as U+FFFD for incomplete sequences); returns bytes written. */
size_t tok_detok_flush(tok_detok *d, char *out, size_t cap);

#endif
