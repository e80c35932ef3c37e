/* pretok.h — the pre-tokenizers of byte-level BPE vocabularies: split text (as code
 * points) into the words that BPE merges within, exactly as llama.cpp's
 * unicode_regex_split does for each tokenizer.ggml.pre.
 *
 * There is no regex engine here: each regex that llama.cpp uses for the supported
 * families is a hand-written matcher (see pretok.c). Pure functions: thread-safe.
 * Internal to src/tokenizer/. */
#ifndef INFERD_TOK_PRETOK_H
#define INFERD_TOK_PRETOK_H
#include "../util/layer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef enum pretok_type {
    PRETOK_DEFAULT = 0,    /* "default", missing or unknown names */
    PRETOK_GPT2,           /* gpt-2, mpt, olmo, jais, phi-2, jina-*, roberta-bpe, gigachat */
    PRETOK_LLAMA3,         /* llama-bpe, llama3, llama-v3, falcon3, dbrx, smaug-bpe, chatglm-bpe */
    PRETOK_QWEN2,          /* qwen2, stablelm2, megrez */
    PRETOK_DEEPSEEK_LLM,   /* deepseek-llm */
    PRETOK_DEEPSEEK_CODER, /* deepseek-coder */
    PRETOK_FALCON,         /* falcon */
    PRETOK_STARCODER,      /* starcoder, refact, smollm, command-r, codeshell, exaone, minerva-7b */
} pretok_type;

/* Split n code points into words. *lens (malloc'ed, caller frees) receives each word's
 * length in code points, in order; they sum to n. Returns IFD_OK or IFD_ERR_NOMEM. */
int pretok_split(pretok_type type, const uint32_t *cpts, size_t n, size_t **lens, size_t *n_lens);

#endif
