/* api_text.c — the public tokenizer and chat-template functions of include/inferd.h:
 * thin, bounds-checked wrappers over the engine model's tokenizer (src/tokenizer/) and
 * the Jinja chat-template interpreter. They touch only read-only model data, so any
 * thread may call them while the engine runs. They do not do the server's chat
 * handling (content-part joining, control-token escaping of request data: src/server/
 * chat.c); the text they render is what the template makes of the messages as given. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine_model.h"
#include "inferd.h"
#include "model/model.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/common.h"
#include "util/status.h"

/* the public codes are the status list's */
_Static_assert((int)INFERD_ERR_NOMEM == (int)IFD_ERR_NOMEM, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_IO == (int)IFD_ERR_IO, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_FORMAT == (int)IFD_ERR_FORMAT, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_UNSUPPORTED == (int)IFD_ERR_UNSUPPORTED, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_INVALID == (int)IFD_ERR_INVALID, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_NOT_FOUND == (int)IFD_ERR_NOT_FOUND, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_LIMIT == (int)IFD_ERR_LIMIT, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_INTERNAL == (int)IFD_ERR_INTERNAL, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_TEMPLATE == (int)IFD_ERR_TEMPLATE, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_BUSY == (int)IFD_ERR_BUSY, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_ABORTED == (int)IFD_ERR_ABORTED, "inferd.h codes = status.h codes");
_Static_assert((int)INFERD_ERR_DEVICE_LOST == (int)IFD_ERR_DEVICE_LOST, "inferd.h codes = status.h codes");

static const tokenizer *vocab(const inferd_engine *e) { return inferd_model(e)->tok; }

int32_t inferd_token_bos(const inferd_engine *e) { return tok_bos(vocab(e)); }
int32_t inferd_token_eos(const inferd_engine *e) { return tok_eos(vocab(e)); }

bool inferd_token_is_eog(const inferd_engine *e, int32_t id) {
    return id >= 0 && id < tok_n_vocab(vocab(e)) && tok_is_eog(vocab(e), id);
}

int32_t inferd_tokenize(const inferd_engine *e, const char *text, size_t n, bool add_special,
                        bool parse_special, int32_t *out, int32_t cap) {
    if ((!text && n) || cap < 0 || (!out && cap > 0)) return IFD_ERR_INVALID;
    const tokenizer *tk = vocab(e);
    unsigned flags = (add_special ? TOK_ENC_ADD_BOS | TOK_ENC_ADD_EOS : 0) |
                     (parse_special ? TOK_ENC_PARSE_SPECIAL : 0);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = tok_encode(tk, text ? text : "", n, flags, &ids, &n_ids);
    if (rc) return rc < 0 ? rc : IFD_ERR_INTERNAL;
    if (n_ids > INT32_MAX) {
        free(ids);
        return IFD_ERR_LIMIT;
    }
    if (cap > 0) memcpy(out, ids, sizeof(int32_t) * IFD_MIN(n_ids, (size_t)cap));
    free(ids);
    return (int32_t)n_ids;
}

/* copy the full text s[0..n) into out as snprintf would */
static void put_cut(char *out, size_t cap, const char *s, size_t n) {
    if (cap == 0) return;
    size_t k = IFD_MIN(n, cap - 1);
    memcpy(out, s, k);
    out[k] = 0;
}

int64_t inferd_detokenize(const inferd_engine *e, const int32_t *ids, int32_t n, bool render_special,
                          char *out, size_t cap) {
    if (n < 0 || (!ids && n > 0) || (!out && cap > 0)) return IFD_ERR_INVALID;
    const tokenizer *tk = vocab(e);
    const int32_t n_vocab = tok_n_vocab(tk);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) return IFD_ERR_INVALID;
    char *text = NULL;
    size_t bytes = 0;
    int rc = tok_decode(tk, ids, (size_t)n, render_special, &text, &bytes);
    if (rc) return rc < 0 ? rc : IFD_ERR_INTERNAL;
    put_cut(out, cap, text, bytes);
    free(text);
    return (int64_t)bytes;
}

int32_t inferd_token_to_piece(const inferd_engine *e, int32_t id, bool render_special, char *out,
                              size_t cap) {
    const tokenizer *tk = vocab(e);
    if (id < 0 || id >= tok_n_vocab(tk) || (!out && cap > 0)) return IFD_ERR_INVALID;
    char buf[256];
    size_t n = tok_piece(tk, id, render_special, buf, sizeof buf);
    if (n > sizeof buf) { /* a piece longer than the stack buffer: ask again at its size */
        char *big = malloc(n);
        if (!big) return IFD_ERR_NOMEM;
        n = IFD_MIN(n, tok_piece(tk, id, render_special, big, n));
        put_cut(out, cap, big, n);
        free(big);
    } else {
        put_cut(out, cap, buf, n);
    }
    return n > INT32_MAX ? IFD_ERR_LIMIT : (int32_t)n;
}

/* The fallback for models without a template: ChatML (as the server's). */
static const char CHATML[] =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

static int set_token_text(cJSON *ctx, const char *key, const tokenizer *tk, int32_t id) {
    if (cJSON_GetObjectItemCaseSensitive(ctx, key)) return 0; /* the caller's */
    const char *s = id >= 0 ? tok_text(tk, id) : NULL;
    return cJSON_AddStringToObject(ctx, key, s ? s : "") ? 0 : IFD_ERR_NOMEM;
}

int inferd_apply_chat_template(const inferd_engine *e, const char *messages_json,
                               bool add_generation_prompt, char **out, size_t *out_bytes, char *err,
                               size_t err_bytes) {
    char e2[512] = "";
    if (!err) err = e2, err_bytes = sizeof e2;
    if (err_bytes) err[0] = 0;
    if (!out) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "out is NULL");
    *out = NULL;
    if (out_bytes) *out_bytes = 0;
    if (!messages_json) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "messages_json is NULL");
    const model *m = inferd_model(e);
    const tokenizer *tk = m->tok;
    cJSON *in = cJSON_Parse(messages_json), *ctx = NULL;
    chat_template *t = NULL;
    int rc;
    if (!in) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_INVALID, "messages_json is not JSON");
        goto done;
    }
    if (cJSON_IsArray(in)) {
        ctx = cJSON_CreateObject();
        if (!ctx) {
            rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
            goto done;
        }
        cJSON_AddItemToObject(ctx, "messages", in);
        in = NULL;
    } else if (cJSON_IsObject(in)) {
        ctx = in;
        in = NULL;
    } else {
        rc = ifd_errf(err, err_bytes, IFD_ERR_INVALID, "messages_json is neither an array nor an object");
        goto done;
    }
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(ctx, "messages"))) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_INVALID, "no \"messages\" array");
        goto done;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "add_generation_prompt");
    if (!cJSON_AddBoolToObject(ctx, "add_generation_prompt", add_generation_prompt) ||
        set_token_text(ctx, "bos_token", tk, tok_bos(tk)) || set_token_text(ctx, "eos_token", tk, tok_eos(tk))) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
        goto done;
    }
    const char *src = m->chat_template ? m->chat_template : CHATML;
    if ((rc = chat_template_create(&t, src, strlen(src), err, err_bytes))) goto done;
    chat_template_limits lim = {.max_seconds = 2.0, .max_output_bytes = 4u << 20};
    size_t n = 0;
    rc = chat_template_render(t, ctx, &lim, out, &n, err, err_bytes);
    if (!rc && out_bytes) *out_bytes = n;
done:
    chat_template_destroy(t);
    cJSON_Delete(ctx);
    cJSON_Delete(in);
    return rc;
}
