/* chat.c — chat templating for the server and tool-call parsing. Built once on the
 * main thread; renders and parses run on the HTTP threads (no shared mutable state). */
#include "chat.h"

#include <ctype.h>
#include <string.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/common.h"

#if __has_include("tokenizer/chat_template.h")
#include "tokenizer/chat_template.h"
#define HAVE_CHAT_TEMPLATE 1
#else
#define HAVE_CHAT_TEMPLATE 0
#endif

/* The fallback for models without a template: ChatML, rendered through the same
 * interpreter as any other template. */
static const char CHATML[] =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

struct chat_ctx {
#if HAVE_CHAT_TEMPLATE
    chat_template *t;
#endif
    const char *origin;
    char *bos, *eos; /* token texts for the template context ("" when none) */
    chat_limits lim;
    int32_t stop_ids[8];
    int n_stop_ids;
};

static char *dup_token_text(const tokenizer *tk, int32_t id) {
    const char *s = id >= 0 ? tok_text(tk, id) : NULL;
    return strdup(s ? s : "");
}

int chat_create(chat_ctx **out, const model *m, const char *template_src, const chat_limits *lim,
                char *err, size_t err_bytes) {
    chat_ctx *c = calloc(1, sizeof *c);
    if (!c) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    c->lim = *lim;
    const char *src = template_src;
    c->origin = "file";
    if (!src) {
        src = m->chat_template;
        c->origin = src ? "model" : "chatml";
    }
    if (!src) src = CHATML;
    c->bos = dup_token_text(m->tok, tok_bos(m->tok));
    c->eos = dup_token_text(m->tok, tok_eos(m->tok));
    /* end-of-turn tokens of the common chat formats, when the vocabulary has them */
    static const char *const EOT[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
                                       "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(EOT) && c->n_stop_ids < 8; i++) {
        int32_t id = tok_find(m->tok, EOT[i], strlen(EOT[i]));
        if (id >= 0 && tok_get_type(m->tok, id) == TOK_TYPE_CONTROL) c->stop_ids[c->n_stop_ids++] = id;
    }
#if HAVE_CHAT_TEMPLATE
    int rc = chat_template_create(&c->t, src, strlen(src), err, err_bytes);
    if (rc) {
        chat_destroy(c);
        return rc;
    }
#else
    if (template_src || m->chat_template) c->origin = "chatml (no template interpreter in this build)";
#endif
    *out = c;
    return 0;
}

void chat_destroy(chat_ctx *c) {
    if (!c) return;
#if HAVE_CHAT_TEMPLATE
    chat_template_destroy(c->t);
#endif
    free(c->bos);
    free(c->eos);
    free(c);
}

const char *chat_template_origin(const chat_ctx *c) { return c->origin; }

int chat_stop_token_ids(const chat_ctx *c, int32_t *ids, int cap) {
    int n = IFD_MIN(cap, c->n_stop_ids);
    memcpy(ids, c->stop_ids, sizeof(int32_t) * (size_t)n);
    return n;
}

/* content: string, null, or parts -> a plain string joined with "\n" (vLLM's
 * "string" content format). */
static int normalize_content(cJSON *msg) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!cJSON_IsArray(c)) return 0;
    size_t total = 1;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) total += strlen(cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring) + 1;
    char *s = malloc(total), *p = s;
    if (!s) return -1;
    bool first = true;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        if (!first) *p++ = '\n';
        size_t k = strlen(t);
        memcpy(p, t, k);
        p += k;
        first = false;
    }
    *p = 0;
    cJSON *str = cJSON_CreateString(s);
    free(s);
    if (!str) return -1;
    cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", str);
    return 0;
}

/* Templates (HF convention) expect tool-call arguments as a mapping; the OpenAI API
 * sends a JSON string. Parse it when it is a JSON object. */
static void normalize_tool_calls(cJSON *msg) {
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    cJSON *call;
    cJSON_ArrayForEach(call, tc) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(args)) continue;
        cJSON *obj = cJSON_Parse(args->valuestring);
        if (cJSON_IsObject(obj))
            cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
        else
            cJSON_Delete(obj);
    }
}

static cJSON *build_context(const chat_ctx *c, const oai_request *r) {
    cJSON *ctx = cJSON_CreateObject();
    cJSON *msgs = cJSON_Duplicate(r->messages, true);
    if (!ctx || !msgs) goto fail;
    cJSON_AddItemToObject(ctx, "messages", msgs);
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (normalize_content(m)) goto fail;
        normalize_tool_calls(m);
    }
    if (r->tools) {
        cJSON *t = cJSON_Duplicate(r->tools, true);
        if (!t) goto fail;
        cJSON_AddItemToObject(ctx, "tools", t);
    }
    if (!cJSON_AddBoolToObject(ctx, "add_generation_prompt", r->add_generation_prompt) ||
        !cJSON_AddStringToObject(ctx, "bos_token", c->bos) ||
        !cJSON_AddStringToObject(ctx, "eos_token", c->eos))
        goto fail;
    const cJSON *kw;
    cJSON_ArrayForEach(kw, r->chat_template_kwargs) {
        if (cJSON_GetObjectItemCaseSensitive(ctx, kw->string)) continue; /* never override the above */
        cJSON *d = cJSON_Duplicate(kw, true);
        if (!d) goto fail;
        cJSON_AddItemToObject(ctx, kw->string, d);
    }
    return ctx;
fail:
    cJSON_Delete(ctx);
    return NULL;
}

#if !HAVE_CHAT_TEMPLATE
/* Stand-in for builds without the interpreter: ChatML in C. */
static int render_chatml(const cJSON *ctx, char **text, size_t *n) {
    sbuf b = {0};
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(ctx, "messages")) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        sbuf_puts(&b, "<|im_start|>");
        sbuf_puts(&b, role->valuestring);
        sbuf_puts(&b, "\n");
        if (cJSON_IsString(content)) sbuf_puts(&b, content->valuestring);
        sbuf_puts(&b, "<|im_end|>\n");
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "add_generation_prompt")))
        sbuf_puts(&b, "<|im_start|>assistant\n");
    if (b.oom) {
        sbuf_free(&b);
        return -1;
    }
    *text = sbuf_take(&b, n);
    return 0;
}
#endif

int chat_render(const chat_ctx *c, const oai_request *r, char **text, size_t *text_bytes,
                api_error *e) {
    cJSON *ctx = build_context(c, r);
    if (!ctx) return api_fail(e, 500, NULL, NULL, "out of memory");
    char err[512] = "";
    int rc;
#if HAVE_CHAT_TEMPLATE
    chat_template *own = NULL;
    const chat_template *t = c->t;
    if (r->chat_template) {
        rc = chat_template_create(&own, r->chat_template, strlen(r->chat_template), err, sizeof err);
        if (rc) {
            cJSON_Delete(ctx);
            return api_fail(e, 400, "invalid_chat_template", "chat_template",
                            "the chat template does not parse: %s", err);
        }
        t = own;
    }
    chat_template_limits lim = {.max_seconds = c->lim.max_seconds,
                                .max_output_bytes = c->lim.max_output_bytes};
    rc = chat_template_render(t, ctx, &lim, text, text_bytes, err, sizeof err);
    chat_template_destroy(own);
#else
    rc = render_chatml(ctx, text, text_bytes) ? IFD_ERR_NOMEM : 0;
#endif
    cJSON_Delete(ctx);
    if (rc == IFD_ERR_NOMEM) return api_fail(e, 500, NULL, NULL, "out of memory");
    if (rc == IFD_ERR_LIMIT)
        return api_fail(e, 400, "chat_template_limit", "messages",
                        "rendering the chat template exceeded its limits: %s", err);
    if (rc)
        return api_fail(e, 400, "chat_template_error", r->chat_template ? "chat_template" : "messages", "%s",
                        err[0] ? err : "chat template error");
    if (r->continue_final_message) {
        /* cut what the template appended after the final message (end-of-turn) */
        const cJSON *last = cJSON_GetArrayItem(r->messages, cJSON_GetArraySize(r->messages) - 1);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(last, "content");
        if (cJSON_IsString(content) && content->valuestring[0]) {
            size_t k = strlen(content->valuestring);
            for (size_t i = *text_bytes >= k ? *text_bytes - k + 1 : 0; i-- > 0;)
                if (!memcmp(*text + i, content->valuestring, k)) {
                    *text_bytes = i + k;
                    (*text)[*text_bytes] = 0;
                    break;
                }
        }
    }
    return 0;
}

/* ---- tool calls --------------------------------------------------------------------- */

static const char TC_OPEN[] = "<tool_call>", TC_CLOSE[] = "</tool_call>";
static const char PY_TAG[] = "<|python_tag|>", MISTRAL_TAG[] = "[TOOL_CALLS]";

static const char *find_mem(const char *h, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(h + i, needle, k)) return h + i;
    return NULL;
}

static size_t skip_ws(const char *s, size_t i, size_t n) {
    while (i < n && isspace((unsigned char)s[i])) i++;
    return i;
}

/* One call object {"name": ..., "arguments"|"parameters": {...} | "..."} -> call. */
static bool call_from_json(const cJSON *o, tool_call *c) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !name->valuestring[0]) return false;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    char *a = NULL;
    if (cJSON_IsString(args))
        a = strdup(args->valuestring);
    else if (args)
        a = cJSON_PrintUnformatted(args);
    else
        a = strdup("{}");
    c->name = strdup(name->valuestring);
    c->arguments = a;
    snprintf(c->id, sizeof c->id, "call_");
    rand_alnum(c->id + 5, 24);
    return c->name && c->arguments;
}

static bool push_call(tool_calls *t, const cJSON *o) {
    tool_call *v = realloc(t->v, sizeof *v * (size_t)(t->n + 1));
    if (!v) return false;
    t->v = v;
    memset(&v[t->n], 0, sizeof v[t->n]);
    if (!call_from_json(o, &v[t->n])) {
        free(v[t->n].name);
        free(v[t->n].arguments);
        return false;
    }
    t->n++;
    return true;
}

static cJSON *parse_json_span(const char *s, size_t n) {
    return cJSON_ParseWithLength(s, n);
}

int chat_parse_tool_calls(const char *text, size_t n, tool_calls *out) {
    memset(out, 0, sizeof *out);
    out->content_end = n;
    const char *open = find_mem(text, n, TC_OPEN);
    if (open) { /* Hermes / Qwen: content, then <tool_call>{json}</tool_call> blocks */
        const char *p = open, *end = text + n;
        bool ok = true;
        while (ok && p) {
            const char *body = p + strlen(TC_OPEN);
            const char *close = find_mem(body, (size_t)(end - body), TC_CLOSE);
            const char *bend = close ? close : end;
            cJSON *o = parse_json_span(body, (size_t)(bend - body));
            ok = o && push_call(out, o);
            cJSON_Delete(o);
            if (!close) break;
            /* another block may follow after whitespace; other trailing text is dropped */
            const char *next = close + strlen(TC_CLOSE);
            const char *q = next + skip_ws(next, 0, (size_t)(end - next));
            size_t k = strlen(TC_OPEN);
            p = (size_t)(end - q) >= k && !memcmp(q, TC_OPEN, k) ? q : NULL;
        }
        if (ok && out->n > 0) {
            out->content_end = (size_t)(open - text);
            return out->n;
        }
        tool_calls_free(out);
        out->content_end = n;
        return 0;
    }
    size_t i = skip_ws(text, 0, n);
    /* a call wrapped in a markdown fence (```json {...} ```), as small models often write */
    if (n - i >= 3 && !memcmp(text + i, "```", 3)) {
        size_t j = i + 3;
        if (n - j >= 4 && !memcmp(text + j, "json", 4)) j += 4;
        j = skip_ws(text, j, n);
        size_t e = n;
        while (e > j && isspace((unsigned char)text[e - 1])) e--;
        if (e - j >= 3 && !memcmp(text + e - 3, "```", 3)) e -= 3;
        else return 0;
        if (j >= e || (text[j] != '{' && text[j] != '[')) return 0;
        cJSON *o = parse_json_span(text + j, e - j);
        bool ok = o != NULL;
        if (ok && cJSON_IsArray(o)) {
            const cJSON *it;
            cJSON_ArrayForEach(it, o) if (!(ok = push_call(out, it))) break;
        } else if (ok) {
            ok = push_call(out, o);
        }
        cJSON_Delete(o);
        if (!ok || out->n == 0) {
            tool_calls_free(out);
            out->content_end = n;
            return 0;
        }
        out->content_end = 0;
        return out->n;
    }
    bool mistral = false;
    if (n - i >= strlen(PY_TAG) && !memcmp(text + i, PY_TAG, strlen(PY_TAG))) i += strlen(PY_TAG);
    else if (n - i >= strlen(MISTRAL_TAG) && !memcmp(text + i, MISTRAL_TAG, strlen(MISTRAL_TAG))) {
        i += strlen(MISTRAL_TAG);
        mistral = true;
    }
    i = skip_ws(text, i, n);
    if (i >= n || (text[i] != '{' && !(mistral && text[i] == '['))) return 0;
    cJSON *o = parse_json_span(text + i, n - i);
    bool ok = o != NULL;
    if (ok && cJSON_IsArray(o)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, o) if (!(ok = push_call(out, it))) break;
    } else if (ok) {
        ok = push_call(out, o);
    }
    cJSON_Delete(o);
    if (!ok || out->n == 0) {
        tool_calls_free(out);
        out->content_end = n;
        return 0;
    }
    out->content_end = 0;
    return out->n;
}

void tool_calls_free(tool_calls *t) {
    for (int i = 0; t && i < t->n; i++) {
        free(t->v[i].name);
        free(t->v[i].arguments);
    }
    if (t) {
        free(t->v);
        t->v = NULL;
        t->n = 0;
    }
}

/* true when s[0..n) is a prefix of tag (n < strlen(tag)) */
static bool is_prefix_of(const char *s, size_t n, const char *tag) {
    size_t k = strlen(tag);
    return n < k && !memcmp(s, tag, n);
}

size_t chat_tool_stream_safe(const char *text, size_t n) {
    size_t i = skip_ws(text, 0, n);
    if (i == n) return 0; /* only whitespace so far: undecided */
    const char *rest = text + i;
    size_t rn = n - i;
    if (rest[0] == '{' || rest[0] == '[') return 0; /* a bare JSON call (Llama 3 / Mistral) */
    if (is_prefix_of(rest, rn, "```")) return 0;
    if (rn >= 3 && !memcmp(rest, "```", 3)) { /* a fenced call? undecided until its first char */
        size_t j = 3;
        while (j < rn && j < 7 && rest[j] == "```json"[j]) j++;
        if (j < 7 && j < rn && j > 3) j = 3; /* "```j..." that is not "```json" */
        j = skip_ws(rest, j, rn);
        if (j >= rn || rest[j] == '{' || rest[j] == '[') return 0;
    }
    if (rn >= strlen(PY_TAG) && !memcmp(rest, PY_TAG, strlen(PY_TAG))) return 0;
    if (rn >= strlen(MISTRAL_TAG) && !memcmp(rest, MISTRAL_TAG, strlen(MISTRAL_TAG))) return 0;
    if (is_prefix_of(rest, rn, PY_TAG) || is_prefix_of(rest, rn, MISTRAL_TAG) ||
        is_prefix_of(rest, rn, TC_OPEN))
        return 0;
    const char *open = find_mem(text, n, TC_OPEN);
    if (open) return (size_t)(open - text);
    /* hold a tail that may be the start of "<tool_call>" */
    size_t k = strlen(TC_OPEN) - 1;
    for (size_t t = IFD_MIN(k, n); t > 0; t--)
        if (!memcmp(text + n - t, TC_OPEN, t)) return n - t;
    return n;
}
