/* fuzz_chat.c — libFuzzer target for the chat path: the fuzz bytes become a chat
 * request (system / user / assistant / tool messages with contents, names, tool calls
 * and their arguments, tools with schemas, chat_template_kwargs, continue_final_message),
 * built from pieces that are mostly control-token texts of the vocabulary, their
 * beginnings and ends in any case, the escape alphabet and whitespace. It goes through
 * oai_parse and chat_prompt (render + tokenize, as the server does) with one of the
 * shared chat templates or a few hostile ones, on one of the shared vocabularies.
 *
 * Invariants (a violation aborts with the request printed):
 *  - shared templates: the control / unknown ids of the prompt are, in order, those of
 *    the template's own text — found by rendering, with the interpreter alone, the same
 *    context with every request string fenced by sentinels and tokenizing only what
 *    lies outside the fences; the prompt text is the interpreter's rendering of the
 *    unescaped context;
 *  - hostile templates (request data only: adjacent strings, slices, lower / upper,
 *    title, trim, tojson, tool-call arguments): no control id at all;
 *  - no crash, leak or undefined behaviour (ASan + UBSan).
 * The vocabularies and templates are read once from INFERD_SHARED_DIR. Built by
 * tests/fuzz/fuzz.cmake with clang only; run by tests/fuzz/run_fuzz.sh. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/gguf.h"
#include "server/chat.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/common.h"

static const char *const VOCABS[] = {"phi-3", "llama-spm", "gpt-2", "deepseek-llm", "falcon", "mpt"};
static const char *const SHARED[] = {"Qwen-Qwen2.5-7B-Instruct",
                                     "Qwen-Qwen3-0.6B",
                                     "meta-llama-Llama-3.1-8B-Instruct",
                                     "meta-llama-Llama-3.2-3B-Instruct",
                                     "microsoft-Phi-3.5-mini-instruct",
                                     "google-gemma-2-2b-it",
                                     "HuggingFaceTB-SmolLM3-3B",
                                     "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                                     "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
                                     "mistralai-Mistral-Nemo-Instruct-2407",
                                     "Mistral-Small-3.2-24B-Instruct-2506"};
/* request data only: no control id may come out of these */
static const char *const HOSTILE[] = {
    "{% for m in messages %}{{ m.content }}{{ m.name }}{{ m.tool_call_id }}{% endfor %}{{ extra }}",
    /* slices through escapes, kept apart (a template that puts slices of one string back
     * together, or reverses it, rearranges request text: not covered, see chat_escape.h) */
    "{% for m in messages %}{% if m.content is string %}{{ m.content[1:-1] }} \u00a7 {{ m.content[:7] }} \u00a7 "
    "{{ m.content[3:] }} \u00a7 {{ m.content[2:9] }} \u00a7 {% endif %}{% endfor %}",
    "{% for m in messages %}{{ (m.content or '')|lower }}{{ (m.content or '')|upper }}"
    "{{ (m.name or '')|title }}{% endfor %}",
    "{% for m in messages %}{{ m|tojson }}{% endfor %}{{ tools|tojson }}{{ extra|tojson }}",
    "{% for m in messages %}{{ (m.content or '')|trim }}{{ (m.name or '')|trim }}{% endfor %}{{ extra|trim }}",
    "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments|tojson }}"
    "{% for k, v in c.function.arguments.items() %}{{ k }}{{ v }}{% endfor %}{% endfor %}{% endfor %}",
};
/* the prompt text must be the interpreter's rendering (not for slices and case changes) */
static const bool HOSTILE_EXACT[] = {true, false, false, true, true, true};

#define N_VOCABS IFD_ARRAY_LEN(VOCABS)
#define N_SHARED IFD_ARRAY_LEN(SHARED)
#define N_TEMPLATES (N_SHARED + IFD_ARRAY_LEN(HOSTILE))
#define FENCE_L "\xe2\x9f\xa6" /* U+27E6 */
#define FENCE_R "\xe2\x9f\xa7" /* U+27E7 */

typedef struct vocab {
    gguf_file f;
    tokenizer *tk;
    char **dict; /* pieces the fuzz input picks from */
    size_t n_dict;
} vocab;

static vocab V[N_VOCABS];
static char *TSRC[N_TEMPLATES];
static chat_ctx *C[N_VOCABS][N_TEMPLATES];
static chat_template *T[N_TEMPLATES];

static void die(const char *what) {
    fprintf(stderr, "fuzz_chat: %s\n", what);
    abort();
}

static void dict_add(vocab *v, const char *s, size_t n) {
    v->dict = realloc(v->dict, (v->n_dict + 1) * sizeof *v->dict);
    char *c = malloc(n + 1);
    if (!v->dict || !c) die("out of memory");
    memcpy(c, s, n);
    c[n] = 0;
    v->dict[v->n_dict++] = c;
}

static void build_dict(vocab *v) {
    static const char *const FIXED[] = {" ", "\n", "\t", "  \n", "<", ">", "|", "|>", "<|", "</", "s>", "[", "]",
                                        "\"", "\\", "'", "x", "system", "user",
                                        "\xef\xb7\x90", "\xef\xb7\x91", "\xef\xb7\x92", "\xef\xb7\xa1",
                                        "\xf3\xb0\x80\x80", FENCE_L};
    for (size_t i = 0; i < IFD_ARRAY_LEN(FIXED); i++) dict_add(v, FIXED[i], strlen(FIXED[i]));
    int k = 0;
    for (int32_t id = 0; id < tok_n_vocab(v->tk) && k < 24; id++) {
        tok_type ty = tok_get_type(v->tk, id);
        if (ty != TOK_TYPE_CONTROL && ty != TOK_TYPE_UNKNOWN) continue;
        if (id != tok_bos(v->tk) && id != tok_eos(v->tk) && k >= 20) continue;
        const char *t = tok_text(v->tk, id);
        size_t n = tok_text_len(v->tk, id), h = n / 2;
        char up[256];
        if (n >= sizeof up || memchr(t, 0, n)) continue;
        dict_add(v, t, n);
        dict_add(v, t, h);         /* its beginning */
        dict_add(v, t + h, n - h); /* its end */
        for (size_t i = 0; i < n; i++) up[i] = (char)(t[i] >= 'a' && t[i] <= 'z' ? t[i] - 32 : t[i]);
        dict_add(v, up, n);
        k++;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char path[512], err[512];
    for (size_t t = 0; t < N_TEMPLATES; t++) {
        if (t < N_SHARED) {
            size_t n;
            snprintf(path, sizeof path, "%s/templates/%s.jinja", INFERD_SHARED_DIR, SHARED[t]);
            if (ifd_read_file(path, &TSRC[t], &n, err, sizeof err)) die(err);
        } else if (!(TSRC[t] = strdup(HOSTILE[t - N_SHARED]))) {
            die("out of memory");
        }
        if (chat_template_create(&T[t], TSRC[t], strlen(TSRC[t]), err, sizeof err)) die(err);
    }
    for (size_t v = 0; v < N_VOCABS; v++) {
        snprintf(path, sizeof path, "%s/tokenizer-tests/ggml-vocab-%s.gguf", INFERD_SHARED_DIR, VOCABS[v]);
        if (gguf_open(&V[v].f, path, err, sizeof err) || tok_create(&V[v].tk, &V[v].f, err, sizeof err)) die(err);
        build_dict(&V[v]);
        chat_limits lim = {.max_seconds = 5, .max_output_bytes = 1 << 20};
        for (size_t t = 0; t < N_TEMPLATES; t++)
            if (chat_create_vocab(&C[v][t], V[v].tk, NULL, TSRC[t], &lim, err, sizeof err)) die(err);
    }
    return 0;
}

/* ---- the request from the bytes ---------------------------------------------------- */

typedef struct in {
    const uint8_t *d;
    size_t n, i;
} in;

static uint8_t next(in *s) {
    return s->i < s->n ? s->d[s->i++] : 0;
}

/* A string: up to 7 pieces, each a dictionary entry or 1-8 raw bytes. */
static char *gen_str(in *s, const vocab *v) {
    char buf[1024];
    size_t n = 0;
    int pieces = next(s) % 8;
    for (int p = 0; p < pieces; p++) {
        uint8_t c = next(s);
        if (c < 160) {
            const char *d = v->dict[c % v->n_dict];
            size_t k = strlen(d);
            if (n + k < sizeof buf) memcpy(buf + n, d, k), n += k;
        } else {
            int k = (c - 160) % 8 + 1;
            for (int j = 0; j < k && n + 1 < sizeof buf; j++) {
                uint8_t b = next(s);
                buf[n++] = (char)(b ? b : ' ');
            }
        }
    }
    buf[n] = 0;
    /* The oracle finds request data between FENCE_L and the next FENCE_R: a FENCE_R in
     * the data (raw bytes can spell it) would end its fence early and expose the rest of
     * the data as template text. The server treats the character like any other, so the
     * data loses nothing by not containing it: it becomes '?'. */
    for (char *q; (q = strstr(buf, FENCE_R));) memmove(q + 1, q + 3, strlen(q + 3) + 1), *q = '?';
    return strdup(buf);
}

/* Two views of the request data: the request body and the template context the
 * oracle renders, whose request strings are fenced (or not). */
typedef struct pair {
    cJSON *req, *ctx_plain, *ctx_fenced;
} pair;

/* s between the fences; "" stays "" (it carries nothing, and templates test it) */
static char *fenced(const char *s) {
    char *f = malloc(strlen(s) + 7);
    if (!f) die("out of memory");
    sprintf(f, s[0] ? FENCE_L "%s" FENCE_R : "%s", s);
    return f;
}

/* key: s in the request r (when given) and the plain context cp, fenced or not in cf */
static void add_str3(cJSON *r, cJSON *cp, cJSON *cf, const char *key, const char *s, bool fence) {
    char *f = fence ? fenced(s) : NULL;
    if (r) cJSON_AddStringToObject(r, key, s);
    cJSON_AddStringToObject(cp, key, s);
    cJSON_AddStringToObject(cf, key, f ? f : s);
    free(f);
}

static void gen_request(in *s, const vocab *v, pair *p, bool *continue_final) {
    static const char *const ROLES[] = {"system", "user", "assistant", "tool", "user", "assistant"};
    p->req = cJSON_CreateObject();
    p->ctx_plain = cJSON_CreateObject();
    p->ctx_fenced = cJSON_CreateObject();
    cJSON *rm = cJSON_AddArrayToObject(p->req, "messages"), *pm = cJSON_AddArrayToObject(p->ctx_plain, "messages"),
          *fm = cJSON_AddArrayToObject(p->ctx_fenced, "messages");
    uint8_t flags = next(s);
    int n_msgs = next(s) % 5 + 1;
    for (int i = 0; i < n_msgs; i++) {
        uint8_t mf = next(s);
        const char *role = ROLES[mf % IFD_ARRAY_LEN(ROLES)];
        cJSON *r = cJSON_CreateObject(), *cp = cJSON_CreateObject(), *cf = cJSON_CreateObject();
        cJSON_AddItemToArray(rm, r);
        cJSON_AddItemToArray(pm, cp);
        cJSON_AddItemToArray(fm, cf);
        add_str3(r, cp, cf, "role", role, false);
        char *content = gen_str(s, v);
        if ((mf & 0x40) && !strcmp(role, "assistant")) {
            cJSON_AddNullToObject(r, "content");
            cJSON_AddNullToObject(cp, "content");
            cJSON_AddNullToObject(cf, "content");
        } else {
            add_str3(r, cp, cf, "content", content, true);
        }
        free(content);
        if (mf & 0x80) {
            char *name = gen_str(s, v);
            add_str3(r, cp, cf, "name", name, true);
            free(name);
        }
        if (!strcmp(role, "tool")) add_str3(r, cp, cf, "tool_call_id", "call12345", false);
        if (!strcmp(role, "assistant") && (mf & 0x20)) {
            cJSON *rt = cJSON_AddArrayToObject(r, "tool_calls"), *pt = cJSON_AddArrayToObject(cp, "tool_calls"),
                  *ft = cJSON_AddArrayToObject(cf, "tool_calls");
            cJSON *rc = cJSON_CreateObject(), *pc = cJSON_CreateObject(), *fc = cJSON_CreateObject();
            cJSON_AddItemToArray(rt, rc);
            cJSON_AddItemToArray(pt, pc);
            cJSON_AddItemToArray(ft, fc);
            add_str3(rc, pc, fc, "id", "call12345", false);
            add_str3(rc, pc, fc, "type", "function", false);
            cJSON *rf = cJSON_AddObjectToObject(rc, "function"), *pf = cJSON_AddObjectToObject(pc, "function"),
                  *ff = cJSON_AddObjectToObject(fc, "function");
            char *name = gen_str(s, v), *k = gen_str(s, v), *val = gen_str(s, v), *fk = fenced(k), *fv = fenced(val);
            add_str3(rf, pf, ff, "name", name, true);
            cJSON *args = cJSON_CreateObject(), *fargs = cJSON_CreateObject();
            cJSON_AddStringToObject(args, k, val);
            cJSON_AddStringToObject(fargs, fk, fv);
            char *json = cJSON_PrintUnformatted(args); /* the OpenAI wire form: a JSON string */
            cJSON_AddStringToObject(rf, "arguments", json ? json : "{}");
            free(json);
            cJSON_AddItemToObject(pf, "arguments", args);
            cJSON_AddItemToObject(ff, "arguments", fargs);
            free(name);
            free(k);
            free(val);
            free(fk);
            free(fv);
        }
    }
    if (flags & 1) { /* tools */
        cJSON *rt = cJSON_AddArrayToObject(p->req, "tools"), *pt = cJSON_AddArrayToObject(p->ctx_plain, "tools"),
              *ft = cJSON_AddArrayToObject(p->ctx_fenced, "tools");
        int n_tools = next(s) % 2 + 1;
        for (int i = 0; i < n_tools; i++) {
            char *name = gen_str(s, v), *desc = gen_str(s, v), *prop = gen_str(s, v);
            if (!name[0]) {
                free(name);
                name = strdup("f");
            }
            cJSON *t = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(t, "function");
            cJSON_AddStringToObject(t, "type", "function");
            cJSON_AddStringToObject(fn, "name", name);
            cJSON_AddStringToObject(fn, "description", desc);
            cJSON *par = cJSON_AddObjectToObject(fn, "parameters");
            cJSON_AddStringToObject(par, "type", "object");
            cJSON *props = cJSON_AddObjectToObject(par, "properties");
            cJSON *pr = cJSON_AddObjectToObject(props, prop);
            cJSON_AddStringToObject(pr, "type", "string");
            cJSON_AddStringToObject(pr, "description", desc);
            cJSON_AddItemToArray(rt, t);
            cJSON_AddItemToArray(pt, cJSON_Duplicate(t, true));
            /* fenced: the same with name, description and property fenced */
            char *fname = fenced(name), *fdesc = fenced(desc), *fprop = fenced(prop);
            cJSON *f = cJSON_CreateObject(), *ffn = cJSON_AddObjectToObject(f, "function");
            cJSON_AddStringToObject(f, "type", "function");
            cJSON_AddStringToObject(ffn, "name", fname);
            cJSON_AddStringToObject(ffn, "description", fdesc);
            cJSON *fpar = cJSON_AddObjectToObject(ffn, "parameters");
            cJSON_AddStringToObject(fpar, "type", "object");
            cJSON *fprops = cJSON_AddObjectToObject(fpar, "properties");
            cJSON *fpr = cJSON_AddObjectToObject(fprops, fprop);
            cJSON_AddStringToObject(fpr, "type", "string");
            cJSON_AddStringToObject(fpr, "description", fdesc);
            cJSON_AddItemToArray(ft, f);
            free(name);
            free(desc);
            free(prop);
            free(fname);
            free(fdesc);
            free(fprop);
        }
    }
    char *extra = gen_str(s, v);
    if (flags & 2) { /* chat_template_kwargs */
        cJSON *kw = cJSON_AddObjectToObject(p->req, "chat_template_kwargs");
        cJSON_AddStringToObject(kw, "extra", extra);
        add_str3(NULL, p->ctx_plain, p->ctx_fenced, "extra", extra, true);
    }
    free(extra);
    *continue_final = (flags & 4) != 0;
    bool agp = !*continue_final && !(flags & 8);
    if (*continue_final) cJSON_AddTrueToObject(p->req, "continue_final_message");
    else cJSON_AddBoolToObject(p->req, "add_generation_prompt", agp);
    cJSON_AddBoolToObject(p->ctx_plain, "add_generation_prompt", agp);
    cJSON_AddBoolToObject(p->ctx_fenced, "add_generation_prompt", agp);
    const tokenizer *tk = v->tk;
    const char *bos = tok_bos(tk) >= 0 ? tok_text(tk, tok_bos(tk)) : "";
    const char *eos = tok_eos(tk) >= 0 ? tok_text(tk, tok_eos(tk)) : "";
    cJSON_AddStringToObject(p->ctx_plain, "bos_token", bos);
    cJSON_AddStringToObject(p->ctx_plain, "eos_token", eos);
    cJSON_AddStringToObject(p->ctx_fenced, "bos_token", bos);
    cJSON_AddStringToObject(p->ctx_fenced, "eos_token", eos);
}

/* ---- the checks ----------------------------------------------------------------------- */

static bool is_ctrl(const tokenizer *tk, int32_t id) {
    tok_type ty = tok_get_type(tk, id);
    return ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN;
}

typedef struct idl {
    int32_t *v;
    size_t n, cap;
} idl;

static void idl_push(idl *l, int32_t id) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        if (!(l->v = realloc(l->v, l->cap * sizeof *l->v))) die("out of memory");
    }
    l->v[l->n++] = id;
}

/* The control ids of text outside the fences, in order. */
static void ctrl_outside_fences(const tokenizer *tk, const char *text, size_t n, idl *out) {
    const char *p = text, *end = text + n;
    while (p < end) {
        const char *l = memmem(p, (size_t)(end - p), FENCE_L, 3);
        const char *seg_end = l ? l : end;
        int32_t *ids;
        size_t k;
        if (tok_encode(tk, p, (size_t)(seg_end - p), TOK_ENC_PARSE_SPECIAL, &ids, &k)) die("tok_encode failed");
        for (size_t i = 0; i < k; i++)
            if (is_ctrl(tk, ids[i])) idl_push(out, ids[i]);
        free(ids);
        if (!l) break;
        const char *r = memmem(l, (size_t)(end - l), FENCE_R, 3);
        p = r ? r + 3 : end;
    }
}

static void report(const char *what, const char *body, size_t v, size_t t, const oai_prompt *pr, const char *want) {
    fprintf(stderr, "fuzz_chat: %s\n  vocab %s, template %zu (%s)\n  request: %s\n  prompt: %s\n", what, VOCABS[v],
            t, t < N_SHARED ? SHARED[t] : HOSTILE[t - N_SHARED], body, pr->text ? pr->text : "");
    if (want) fprintf(stderr, "  want:   %s\n", want);
    fprintf(stderr, "  ids:");
    for (int32_t i = 0; i < pr->n_ids; i++) fprintf(stderr, " %d", (int)pr->ids[i]);
    fprintf(stderr, "\n");
    abort();
}

static char *render(size_t t, const cJSON *ctx, size_t *n) {
    char err[512], *out = NULL;
    chat_template_limits lim = {.max_seconds = 5, .max_output_bytes = 1 << 20};
    if (chat_template_render(T[t], ctx, &lim, &out, n, err, sizeof err)) return NULL;
    return out;
}

static size_t count_mem(const char *h, size_t n, const char *needle, size_t k) {
    size_t c = 0;
    for (const char *q = h; k && (q = memmem(q, n - (size_t)(q - h), needle, k)); q++) c++;
    return c;
}

/* continue_final_message: the server cuts the prompt after the last occurrence of the
 * final message's content. The fenced render f is cut the same way when that place is
 * unambiguous (the content occurs once in the plain rendering); false: skip the check. */
static bool cut_after_content(size_t t, const pair *p, const char *f, size_t *fn) {
    const cJSON *pm = cJSON_GetObjectItem(p->ctx_plain, "messages"), *fm = cJSON_GetObjectItem(p->ctx_fenced, "messages");
    const cJSON *pc = cJSON_GetObjectItem(cJSON_GetArrayItem(pm, cJSON_GetArraySize(pm) - 1), "content");
    const cJSON *fc = cJSON_GetObjectItem(cJSON_GetArrayItem(fm, cJSON_GetArraySize(fm) - 1), "content");
    if (!cJSON_IsString(pc) || !pc->valuestring[0]) return true; /* nothing is cut */
    size_t n = 0, k = strlen(fc->valuestring);
    char *plain = render(t, p->ctx_plain, &n);
    bool once = plain && count_mem(plain, n, pc->valuestring, strlen(pc->valuestring)) == 1;
    free(plain);
    const char *at = once ? memmem(f, *fn, fc->valuestring, k) : NULL;
    if (!at) return false;
    *fn = (size_t)(at - f) + k;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    in s = {data, size, 0};
    size_t vi = next(&s) % N_VOCABS, ti = next(&s) % N_TEMPLATES;
    const vocab *v = &V[vi];
    pair p;
    bool cont;
    gen_request(&s, v, &p, &cont);
    char *body = cJSON_PrintUnformatted(p.req);
    if (!body) die("out of memory");

    oai_request r;
    oai_prompt pr = {0};
    api_error e;
    oai_limits ol = {.max_n = 1, .max_prompts = 1, .n_vocab = tok_n_vocab(v->tk)};
    bool shared = ti < N_SHARED;
    int rc = oai_parse(&r, OAI_CHAT, body, strlen(body), &ol, &e);
    if (!rc) rc = chat_prompt(C[vi][ti], &r, shared ? TOK_ENC_ADD_BOS : 0, &pr, &e);
    oai_request_free(&r);
    if (!rc) {
        bool exact = shared || HOSTILE_EXACT[ti - N_SHARED];
        if (!shared) {
            for (int32_t i = 0; i < pr.n_ids; i++)
                if (is_ctrl(v->tk, pr.ids[i])) report("a control id from request data", body, vi, ti, &pr, NULL);
        } else {
            size_t fn = 0;
            char *f = render(ti, p.ctx_fenced, &fn);
            if (f && cont && !cut_after_content(ti, &p, f, &fn)) {
                free(f);
                f = NULL;
            }
            if (f) {
                idl want = {0}, got = {0};
                bool added = tok_add_bos(v->tk);
                if (added) idl_push(&want, tok_bos(v->tk));
                ctrl_outside_fences(v->tk, f, fn, &want);
                /* a template that starts with bos_token: the tokenizer's BOS is not added twice */
                const char *bos = tok_bos(v->tk) >= 0 ? tok_text(v->tk, tok_bos(v->tk)) : "";
                if (added && want.n >= 2 && want.v[1] == want.v[0] && bos[0] &&
                    fn >= strlen(bos) && !memcmp(f, bos, strlen(bos)))
                    memmove(want.v, want.v + 1, --want.n * sizeof *want.v);
                for (int32_t i = 0; i < pr.n_ids; i++)
                    if (is_ctrl(v->tk, pr.ids[i])) idl_push(&got, pr.ids[i]);
                if (got.n != want.n || (got.n && memcmp(got.v, want.v, got.n * sizeof *got.v))) {
                    fprintf(stderr, "  control ids wanted:");
                    for (size_t i = 0; i < want.n; i++) fprintf(stderr, " %d", (int)want.v[i]);
                    fprintf(stderr, "\n");
                    report("control ids differ from the template's own", body, vi, ti, &pr, f);
                }
                free(want.v);
                free(got.v);
            }
            free(f);
        }
        if (exact && !cont) {
            size_t n = 0;
            char *want = render(ti, p.ctx_plain, &n);
            if (want && (n != pr.text_bytes || memcmp(want, pr.text, n)))
                report("the prompt text differs from the interpreter's", body, vi, ti, &pr, want);
            free(want);
        }
    }
    free(pr.ids);
    free(pr.text);
    free(body);
    cJSON_Delete(p.req);
    cJSON_Delete(p.ctx_plain);
    cJSON_Delete(p.ctx_fenced);
    return 0;
}
