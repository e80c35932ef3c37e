/* public_api_test.c — the public tokenizer / chat-template API of include/inferd.h,
 * compiled with only include/ on the include path (tests/unit/public_api.cmake), so
 * it also proves the header stands alone. Uses the Shakespeare target model of
 * ../shared/models (SentencePiece, 1,024 tokens, BOS 1 added, EOS 2; its chat template
 * writes each message's content and a blank line). Cross-checks the token ids against
 * `inferd tokenize`, which reads the vocabulary from the GGUF on its own. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferd.h"
#include "test_util.h"

#define MODEL INFERD_SHARED_DIR "/models/shakespeare-target.gguf"

static inferd_engine *E;

static inferd_engine *engine(void) {
    if (E) return E;
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    o.model_path = MODEL;
    o.threaded = false;
    o.max_num_seqs = 1;
    o.kv_cache_bytes = 4 << 20;
    char err[512] = "";
    if (inferd_engine_create(&E, &o, err, sizeof err)) {
        fprintf(stderr, "  cannot load %s: %s\n", MODEL, err);
        exit(1);
    }
    return E;
}

/* ids of text via `inferd tokenize -m MODEL --bos TEXT` (text has no quote) */
static int cli_ids(const char *text, int32_t *ids, int cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' --bos '%s'", INFERD_BINARY, MODEL, text);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int n = 0, v;
    while (n < cap && fscanf(p, "%d", &v) == 1) ids[n++] = v;
    return pclose(p) == 0 ? n : -1;
}

static void test_tokenize(void) {
    inferd_engine *e = engine();
    const char *text = "ROMEO:\nBut soft, what light through yonder window breaks?";
    int32_t ids[256], want[256];
    int32_t n = inferd_tokenize(e, text, strlen(text), true, false, ids, 256);
    int nw = cli_ids(text, want, 256);
    CHECKF(n > 5 && n == nw, "n %d, inferd tokenize %d", (int)n, nw);
    CHECK(n == nw && !memcmp(ids, want, sizeof(int32_t) * (size_t)n));
    CHECK(inferd_token_bos(e) >= 0 && ids[0] == inferd_token_bos(e)); /* add_bos_token */
    /* without add_special: the same ids, no BOS */
    int32_t plain[256];
    int32_t np = inferd_tokenize(e, text, strlen(text), false, false, plain, 256);
    CHECK(np == n - 1 && !memcmp(plain, ids + 1, sizeof(int32_t) * (size_t)np));
    /* the size question, and a short buffer holding the first cap ids */
    CHECK(inferd_tokenize(e, text, strlen(text), true, false, NULL, 0) == n);
    int32_t few[3] = {-1, -1, -1};
    CHECK(inferd_tokenize(e, text, strlen(text), true, false, few, 2) == n);
    CHECK(few[0] == ids[0] && few[1] == ids[1] && few[2] == -1);
    /* text need not be NUL-terminated: the first 5 bytes alone */
    int32_t head[16];
    int32_t nh = inferd_tokenize(e, text, 5, false, false, head, 16);
    int32_t nh2 = inferd_tokenize(e, "ROMEO", 5, false, false, NULL, 0);
    CHECK(nh > 0 && nh == nh2);
    CHECK(inferd_tokenize(e, NULL, 3, true, false, ids, 256) == INFERD_ERR_INVALID);
    CHECK(inferd_tokenize(e, text, 3, true, false, ids, -1) == INFERD_ERR_INVALID);
    CHECK(inferd_tokenize(e, "", 0, false, false, ids, 256) == 0);
}

static void test_special(void) {
    inferd_engine *e = engine();
    const int32_t eos = inferd_token_eos(e);
    CHECK(eos >= 0 && inferd_token_is_eog(e, eos));
    CHECK(!inferd_token_is_eog(e, -1) && !inferd_token_is_eog(e, inferd_n_vocab(e)));
    char eos_text[64];
    int32_t k = inferd_token_to_piece(e, eos, true, eos_text, sizeof eos_text);
    CHECK(k > 0 && k < (int32_t)sizeof eos_text && inferd_token_to_piece(e, eos, false, NULL, 0) == 0);
    /* parse_special: the control token's text is that token; otherwise it is text */
    int32_t ids[64];
    CHECK(inferd_tokenize(e, eos_text, strlen(eos_text), false, true, ids, 64) == 1 && ids[0] == eos);
    int32_t n = inferd_tokenize(e, eos_text, strlen(eos_text), false, false, ids, 64);
    CHECK(n > 1);
    for (int32_t i = 0; i < n; i++) CHECK(ids[i] != eos);
}

static void test_detokenize(void) {
    inferd_engine *e = engine();
    const char *text = "JULIET:\nO Romeo, Romeo!";
    int32_t ids[128];
    int32_t n = inferd_tokenize(e, text, strlen(text), true, false, ids, 128);
    CHECK(n > 3);
    char out[256];
    int64_t len = inferd_detokenize(e, ids, n, false, out, sizeof out);
    /* SentencePiece: the text with the space the tokenizer prepended; BOS adds nothing */
    CHECKF(len == (int64_t)strlen(out) && !strcmp(out, " JULIET:\nO Romeo, Romeo!"), "'%s'", out);
    /* the pieces, one by one, make the same text */
    char cat[256] = "", piece[64];
    for (int32_t i = 0; i < n; i++) {
        int32_t k = inferd_token_to_piece(e, ids[i], false, piece, sizeof piece);
        CHECK(k >= 0 && k < (int32_t)sizeof piece);
        strcat(cat, piece);
    }
    CHECK(!strcmp(cat, out));
    /* rendered specials: BOS's text first */
    char bos[64];
    inferd_token_to_piece(e, inferd_token_bos(e), true, bos, sizeof bos);
    CHECK(inferd_detokenize(e, ids, n, true, out, sizeof out) == len + (int64_t)strlen(bos));
    CHECK(!strncmp(out, bos, strlen(bos)));
    /* snprintf convention: the full length, a cut NUL-terminated copy */
    char small[5];
    CHECK(inferd_detokenize(e, ids, n, false, small, sizeof small) == len);
    CHECK(strlen(small) == 4 && !strncmp(small, " JUL", 4));
    CHECK(inferd_detokenize(e, ids, n, false, NULL, 0) == len);
    int32_t bad[2] = {ids[1], inferd_n_vocab(e)};
    CHECK(inferd_detokenize(e, bad, 2, false, out, sizeof out) == INFERD_ERR_INVALID);
    CHECK(inferd_token_to_piece(e, -1, false, out, sizeof out) == INFERD_ERR_INVALID);
}

static void test_chat_template(void) {
    inferd_engine *e = engine();
    const char *msgs = "[{\"role\":\"user\",\"content\":\"ROMEO:\"},{\"role\":\"assistant\",\"content\":\"Speak.\"}]";
    char *out = NULL, err[256];
    size_t n = 0;
    /* the model's template: "{% for message in messages %}{{ message['content'] }}\n\n{% endfor %}" */
    CHECK(inferd_apply_chat_template(e, msgs, true, &out, &n, err, sizeof err) == 0);
    CHECKF(out && !strcmp(out, "ROMEO:\n\nSpeak.\n\n") && n == strlen(out), "'%s'", out ? out : "(null)");
    /* rendered text tokenizes like any text */
    int32_t ids[64];
    CHECK(out && inferd_tokenize(e, out, n, true, false, ids, 64) > 2);
    free(out);
    /* the object form: the whole context */
    out = NULL;
    CHECK(inferd_apply_chat_template(e, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"x\":1}", false,
                                     &out, NULL, err, sizeof err) == 0);
    CHECK(out && !strcmp(out, "a\n\n"));
    free(out);
    out = NULL;
    CHECK(inferd_apply_chat_template(e, "[{\"role\":", true, &out, NULL, err, sizeof err) == INFERD_ERR_INVALID);
    CHECK(!out && err[0]);
    CHECK(inferd_apply_chat_template(e, "{\"x\":1}", true, &out, NULL, NULL, 0) == INFERD_ERR_INVALID);
    CHECK(inferd_apply_chat_template(e, "7", true, &out, NULL, err, sizeof err) == INFERD_ERR_INVALID);
    CHECK(!out);
}

static void test_done(void) {
    inferd_engine_destroy(E);
    E = NULL;
}

TEST_MAIN(T(test_tokenize), T(test_special), T(test_detokenize), T(test_chat_template), T(test_done))
