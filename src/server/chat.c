/* chat.c — chat templating for the server and tool-call parsing. Built once on the
 * main thread; renders and parses run on the HTTP threads (no shared mutable state).
 * Request data is escaped before rendering (chat_escape.h), so the prompt's control
 * tokens are the template's own. */
#include "chat.h"

#include <ctype.h>
#include <string.h>

#include "chat_escape.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/common.h"

#if __has_include("template/chat_template.h")
#include "template/chat_template.h"
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
    const tokenizer *tk; /* borrowed: outlives the chat_ctx */
    chat_esc *esc;       /* the vocabulary's control-token texts */
    const tool_format *tools; /* the template's tool-call format (tools.h) */
    bool thinks;              /* the template writes <think> (a reasoning model's) */
};

static char *dup_token_text(const tokenizer *tk, int32_t id) {
    const char *s = id >= 0 ? tok_text(tk, id) : NULL;
    return strdup(s ? s : "");
}

int chat_create(chat_ctx **out, const model *m, const char *template_src, const chat_limits *lim,
                char *err, size_t err_bytes) {
    return chat_create_vocab(out, m->tok, m->chat_template, template_src, lim, err, err_bytes);
}

int chat_create_vocab(chat_ctx **out, const tokenizer *tk, const char *model_template, const char *template_src,
                      const chat_limits *lim, char *err, size_t err_bytes) {
    *out = NULL;
    chat_ctx *c = calloc(1, sizeof *c);
    if (!c) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    c->lim = *lim;
    c->tk = tk;
    const char *src = template_src;
    c->origin = "file";
    if (!src) {
        src = model_template;
        c->origin = src ? "model" : "chatml";
    }
    if (!src) src = CHATML;
    c->tools = tool_format_detect(src);
    c->thinks = strstr(src, "<think>") != NULL;
    c->bos = dup_token_text(tk, tok_bos(tk));
    c->eos = dup_token_text(tk, tok_eos(tk));
    if (!c->bos || !c->eos) {
        chat_destroy(c);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    }
    /* end-of-turn tokens of the common chat formats, when the vocabulary has them */
    static const char *const EOT[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
                                       "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(EOT) && c->n_stop_ids < 8; i++) {
        int32_t id = tok_find(tk, EOT[i], strlen(EOT[i]));
        if (id >= 0 && tok_get_type(tk, id) == TOK_TYPE_CONTROL) c->stop_ids[c->n_stop_ids++] = id;
    }
    int rc = chat_esc_create(&c->esc, tk, err, err_bytes);
    if (rc) {
        chat_destroy(c);
        return rc;
    }
#if HAVE_CHAT_TEMPLATE
    rc = chat_template_create(&c->t, src, strlen(src), err, err_bytes);
    if (rc) {
        chat_destroy(c);
        return rc;
    }
#else
    if (template_src || model_template) c->origin = "chatml (no template interpreter in this build)";
#endif
    *out = c;
    return 0;
}

void chat_destroy(chat_ctx *c) {
    if (!c) return;
#if HAVE_CHAT_TEMPLATE
    chat_template_destroy(c->t);
#endif
    chat_esc_destroy(c->esc);
    free(c->bos);
    free(c->eos);
    free(c);
}

const char *chat_template_origin(const chat_ctx *c) { return c->origin; }
const tool_format *chat_tool_format(const chat_ctx *c) { return c ? c->tools : tool_format_detect(NULL); }
bool chat_thinks(const chat_ctx *c) { return c->thinks; }

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

/* The template context of r. Every piece of request data in it (messages, tools,
 * chat_template_kwargs: keys and strings) is escaped into tab; add_generation_prompt,
 * bos_token and eos_token are the server's and stay as they are. */
static cJSON *build_context(const chat_ctx *c, const oai_request *r, chat_esc_tab *tab) {
    sbuf key = {0};
    cJSON *ctx = cJSON_CreateObject();
    cJSON *msgs = cJSON_Duplicate(r->messages, true);
    if (!ctx || !msgs) {
        cJSON_Delete(msgs);
        goto fail;
    }
    cJSON_AddItemToObject(ctx, "messages", msgs);
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (normalize_content(m)) goto fail;
        normalize_tool_calls(m);
        /* an assistant's thinking comes back as reasoning_content or reasoning: the
         * templates read reasoning_content */
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(m, "reasoning");
        if (cJSON_IsString(rs) && !cJSON_GetObjectItemCaseSensitive(m, "reasoning_content"))
            cJSON_AddItemToObject(m, "reasoning_content", cJSON_Duplicate(rs, false));
    }
    if (chat_esc_json(c->esc, msgs, tab)) goto fail; /* after normalizing: the text the template sees */
    if (r->tools) {
        cJSON *t = cJSON_Duplicate(r->tools, true);
        if (!t) goto fail;
        cJSON_AddItemToObject(ctx, "tools", t);
        if (chat_esc_json(c->esc, t, tab)) goto fail;
    }
    if (!cJSON_AddBoolToObject(ctx, "add_generation_prompt", r->add_generation_prompt) ||
        !cJSON_AddStringToObject(ctx, "bos_token", c->bos) ||
        !cJSON_AddStringToObject(ctx, "eos_token", c->eos))
        goto fail;
    const cJSON *kw;
    /* reasoning_effort reaches the template; "none" also switches thinking off (the
     * templates' enable_thinking), unless chat_template_kwargs says otherwise */
    const cJSON *kws = r->chat_template_kwargs;
    if (r->reasoning_effort && !cJSON_GetObjectItemCaseSensitive(kws, "reasoning_effort") &&
        !cJSON_AddStringToObject(ctx, "reasoning_effort", r->reasoning_effort))
        goto fail;
    if (r->reasoning_effort && !strcmp(r->reasoning_effort, "none") &&
        !cJSON_GetObjectItemCaseSensitive(kws, "enable_thinking") && !cJSON_AddFalseToObject(ctx, "enable_thinking"))
        goto fail;
    cJSON_ArrayForEach(kw, r->chat_template_kwargs) {
        if (cJSON_GetObjectItemCaseSensitive(ctx, kw->string)) continue; /* never override the above */
        sbuf_reset(&key);
        chat_esc_str(c->esc, kw->string, strlen(kw->string), tab, &key);
        cJSON *d = cJSON_Duplicate(kw, true);
        if (!d || key.oom || chat_esc_json(c->esc, d, tab)) {
            cJSON_Delete(d);
            goto fail;
        }
        cJSON_AddItemToObject(ctx, sbuf_cstr(&key), d);
    }
    sbuf_free(&key);
    return ctx;
fail:
    sbuf_free(&key);
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

/* Render r into *raw with its request data escaped (tab). Errors as chat_prompt's;
 * a template's message that quotes request data is unescaped first. */
static int render_escaped(const chat_ctx *c, const oai_request *r, chat_esc_tab *tab, char **raw, size_t *raw_n,
                          api_error *e) {
    *raw = NULL;
    cJSON *ctx = build_context(c, r, tab);
    if (!ctx) return api_fail(e, 500, NULL, NULL, "out of memory");
    char err[512] = "";
    int rc;
#if HAVE_CHAT_TEMPLATE
    /* A request's own template (only with --allow-request-chat-template) is trusted
     * like the operator's: its literals may write control tokens. */
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
    rc = chat_template_render(t, ctx, &lim, raw, raw_n, err, sizeof err);
    chat_template_destroy(own);
#else
    rc = render_chatml(ctx, raw, raw_n) ? IFD_ERR_NOMEM : 0;
#endif
    if (rc) {
        cJSON_Delete(ctx);
        free(*raw);
        *raw = NULL;
        if (rc == IFD_ERR_NOMEM) return api_fail(e, 500, NULL, NULL, "out of memory");
        sbuf msg = {0}; /* raise_exception('... ' + message.role) quotes escaped data */
        chat_esc_unescape(c->esc, tab, err, strlen(err), &msg);
        const char *m = msg.oom ? err : sbuf_cstr(&msg);
        if (rc == IFD_ERR_LIMIT)
            api_fail(e, 400, "chat_template_limit", "messages",
                     "rendering the chat template exceeded its limits: %s", m);
        else
            api_fail(e, 400, "chat_template_error", r->chat_template ? "chat_template" : "messages", "%s",
                     m[0] ? m : "chat template error");
        sbuf_free(&msg);
        return -1;
    }
    if (r->continue_final_message) {
        /* cut what the template appended after the final message (end-of-turn); the
         * rendered text holds the content as escaped in the context */
        const cJSON *last = cJSON_GetArrayItem(r->messages, cJSON_GetArraySize(r->messages) - 1);
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
        const cJSON *elast = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(last, "content");
        const cJSON *econtent = cJSON_GetObjectItemCaseSensitive(elast, "content");
        if (cJSON_IsString(content) && content->valuestring[0] && cJSON_IsString(econtent)) {
            size_t k = strlen(econtent->valuestring);
            for (size_t i = *raw_n >= k ? *raw_n - k + 1 : 0; i-- > 0;)
                if (!memcmp(*raw + i, econtent->valuestring, k)) {
                    *raw_n = i + k;
                    (*raw)[*raw_n] = 0;
                    break;
                }
        }
    }
    cJSON_Delete(ctx);
    return 0;
}

int chat_prompt(const chat_ctx *c, const oai_request *r, unsigned tok_flags, oai_prompt *p, api_error *e) {
    chat_esc_tab tab = {0};
    char *raw = NULL;
    size_t raw_n = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = -1;
    memset(p, 0, sizeof *p);
    if (render_escaped(c, r, &tab, &raw, &raw_n, e)) goto done;
    if (chat_esc_encode(c->esc, &tab, c->tk, raw, raw_n, tok_flags, &ids, &n_ids)) {
        api_fail(e, 500, NULL, NULL, "tokenization failed");
        goto done;
    }
    /* a template that writes bos_token itself, plus the tokenizer's BOS: keep one */
    int32_t bos = tok_bos(c->tk);
    if ((tok_flags & TOK_ENC_ADD_BOS) && n_ids >= 2 && bos >= 0 && ids[0] == bos && ids[1] == bos) {
        memmove(ids, ids + 1, (n_ids - 1) * sizeof *ids);
        n_ids--;
    }
    if (n_ids > INT32_MAX / 2) {
        api_fail(e, 400, "context_length_exceeded", "messages", "the prompt is too long");
        goto done;
    }
    /* the prompt as the template wrote it, request data unescaped (echo, logs) */
    if (chat_esc_tab_empty(&tab)) {
        p->text = raw;
        p->text_bytes = raw_n;
        raw = NULL;
    } else {
        sbuf b = {0};
        chat_esc_unescape(c->esc, &tab, raw, raw_n, &b);
        sbuf_cstr(&b);
        if (b.oom) {
            sbuf_free(&b);
            api_fail(e, 500, NULL, NULL, "out of memory");
            goto done;
        }
        p->text = sbuf_take(&b, &p->text_bytes);
        if (!p->text) {
            api_fail(e, 500, NULL, NULL, "out of memory");
            goto done;
        }
    }
    p->ids = ids;
    p->n_ids = (int32_t)n_ids;
    ids = NULL;
    rc = 0;
done:
    free(ids);
    free(raw);
    chat_esc_tab_free(&tab);
    return rc;
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

/* A JSON value; also the {{…}} shape small models copy from templates that escape
 * their braces (the inner object when the outer pair is doubled). */
static cJSON *parse_json_span(const char *s, size_t n) {
    cJSON *v = cJSON_ParseWithLength(s, n);
    if (v) return v;
    size_t a = 0, b = n;
    while (a < b && isspace((unsigned char)s[a])) a++;
    while (b > a && isspace((unsigned char)s[b - 1])) b--;
    if (b - a >= 4 && s[a] == '{' && s[a + 1] == '{' && s[b - 1] == '}' && s[b - 2] == '}')
        return cJSON_ParseWithLength(s + a + 1, b - a - 2);
    return NULL;
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

int chat_tool_calls(const tool_format *f, const char *text, size_t n, bool partial, tool_calls *out) {
    memset(out, 0, sizeof *out);
    out->content_end = n;
    tool_span sp[CHAT_MAX_TOOL_CALLS];
    size_t content_end;
    int k = tool_scan(f, text, n, !partial, sp, CHAT_MAX_TOOL_CALLS, &content_end);
    for (int i = 0; i < k; i++) {
        tool_call c = {0};
        if (!tool_span_strings(f, text, &sp[i], &c.name, &c.arguments)) break;
        tool_call *v = realloc(out->v, sizeof *v * (size_t)(out->n + 1));
        if (!v) {
            free(c.name);
            free(c.arguments);
            break;
        }
        out->v = v;
        snprintf(c.id, sizeof c.id, "call_");
        rand_alnum(c.id + 5, 24);
        out->v[out->n++] = c;
    }
    if (out->n > 0 || partial) {
        out->content_end = out->n > 0 ? content_end : n;
        return out->n;
    }
    /* not in the template's format: the shapes small models write anyway */
    return chat_parse_tool_calls(text, n, out);
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
