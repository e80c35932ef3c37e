/* tok_synth.c — the synthetic vocabulary of a model built in memory (--random-weights).
 *
 * The vocabulary is a SentencePiece one ("llama"): <unk>, <s> (BOS), </s> (EOS), the 256
 * byte tokens <0x00>..<0xFF> (byte fallback: every text encodes), then filler pieces
 * up to the model's n_vocab: "▁" and the lowercase letter strings of length 1, 2, 3 ...
 * with and without a leading "▁", shorter ones scored higher. It is written as GGUF
 * tokenizer metadata into a memory buffer and read by tok_create like any file's, so
 * no second vocabulary loader exists. The model's output over it is noise.
 * model_load_random (tok_model.c) attaches it to a model built in memory.
 *
 * Runs once at startup on the loading thread. */
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "../util/common.h"
#include "tokenizer.h"

/* ---- a minimal GGUF v3 writer (metadata only, no tensors) ---------------------------- */

static void put_u32(sbuf *b, uint32_t v) { sbuf_put(b, &v, 4); } /* little-endian hosts */
static void put_u64(sbuf *b, uint64_t v) { sbuf_put(b, &v, 8); }
static void put_str(sbuf *b, const char *s, size_t n) {
    put_u64(b, n);
    sbuf_put(b, s, n);
}
static void put_key(sbuf *b, const char *key, gguf_type t) {
    put_str(b, key, strlen(key));
    put_u32(b, (uint32_t)t);
}

/* Filler piece k (k >= 0) into buf: k = 0 is "▁"; then for length 1, 2, ...: every
 * lowercase string of that length with a leading "▁", then without. */
static size_t filler(uint64_t k, char *buf) {
    static const char SP[] = "\xE2\x96\x81"; /* U+2581 */
    if (k == 0) {
        memcpy(buf, SP, 3);
        return 3;
    }
    k--;
    uint64_t count = 26;
    int len = 1;
    while (k >= 2 * count && len < 12) {
        k -= 2 * count;
        count *= 26;
        len++;
    }
    size_t n = 0;
    if (k < count) {
        memcpy(buf, SP, 3);
        n = 3;
    } else {
        k -= count;
    }
    for (int i = len - 1; i >= 0; i--) {
        buf[n + (size_t)i] = (char)('a' + k % 26);
        k /= 26;
    }
    return n + (size_t)len;
}

#define SYNTH_FIRST_FILLER 259 /* <unk>, <s>, </s>, 256 bytes */

int tok_create_synthetic(tokenizer **out, int32_t n_vocab, char *err, size_t err_bytes) {
    *out = NULL;
    if (n_vocab < SYNTH_FIRST_FILLER || n_vocab > (1 << 24))
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "synthetic vocabulary: %d tokens (needs %d to %d)", n_vocab,
                        SYNTH_FIRST_FILLER, 1 << 24);
    sbuf b = {0};
    sbuf_put(&b, "GGUF", 4);
    put_u32(&b, 3);  /* version */
    put_u64(&b, 0);  /* tensors */
    put_u64(&b, 7);  /* key-value pairs */
    put_key(&b, "tokenizer.ggml.model", GGUF_TYPE_STRING);
    put_str(&b, "llama", 5);
    put_key(&b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_STRING);
    put_u64(&b, (uint64_t)n_vocab);
    put_str(&b, "<unk>", 5);
    put_str(&b, "<s>", 3);
    put_str(&b, "</s>", 4);
    for (int c = 0; c < 256; c++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", c);
        put_str(&b, hex, 6);
    }
    for (int32_t i = SYNTH_FIRST_FILLER; i < n_vocab; i++) {
        char piece[64];
        const size_t n = filler((uint64_t)(i - SYNTH_FIRST_FILLER), piece);
        put_str(&b, piece, n);
    }
    put_key(&b, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_FLOAT32);
    put_u64(&b, (uint64_t)n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) {
        const float s = i < SYNTH_FIRST_FILLER ? 0.0f : -(float)(i - SYNTH_FIRST_FILLER);
        sbuf_put(&b, &s, 4);
    }
    put_key(&b, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_INT32);
    put_u64(&b, (uint64_t)n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) {
        const int32_t ty = i == 0                        ? TOK_TYPE_UNKNOWN
                           : i < 3                       ? TOK_TYPE_CONTROL
                           : i < SYNTH_FIRST_FILLER      ? TOK_TYPE_BYTE
                                                         : TOK_TYPE_NORMAL;
        sbuf_put(&b, &ty, 4);
    }
    put_key(&b, "tokenizer.ggml.unknown_token_id", GGUF_TYPE_UINT32);
    put_u32(&b, 0);
    put_key(&b, "tokenizer.ggml.bos_token_id", GGUF_TYPE_UINT32);
    put_u32(&b, 1);
    put_key(&b, "tokenizer.ggml.eos_token_id", GGUF_TYPE_UINT32);
    put_u32(&b, 2);
    if (b.oom) {
        sbuf_free(&b);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "synthetic vocabulary: out of memory");
    }
    gguf_file f = {0};
    int rc = gguf_open_memory(&f, b.p, b.n, err, err_bytes);
    if (!rc) rc = tok_create(out, &f, err, err_bytes);
    gguf_close(&f);
    sbuf_free(&b);
    return rc;
}
