/* tools.c — the tool-call formats of model families (one table), the scanner that finds
 * calls in generated text (whole or streaming), and the grammar that forces them. See
 * tools.h. Any thread. */
#include "tools.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum tf_body {
    TF_JSON_OBJ,  /* {"name": NAME, KEY: ARGS} */
    TF_NAME_ARGS, /* NAME args_open ARGS (JSON) */
    TF_XML,       /* NAME args_open (<parameter=K>\nV\n</parameter>\n)* */
} tf_body;

/* One family's format. Literals match whitespace leniently when scanning (a space or
 * newline in a literal matches any run of whitespace, including none); a forced call
 * is written exactly as here. */
struct tool_format {
    const char *name;
    const char *detect[3]; /* a chat template containing any of these uses the format */
    const char *begin;     /* before the first call, "" none */
    const char *end;       /* after the last call */
    const char *sep;       /* between calls */
    const char *open;      /* before each call */
    const char *close;     /* after each call */
    tf_body body;
    const char *args_key;  /* TF_JSON_OBJ: the arguments' key when forcing */
    const char *args_open; /* TF_NAME_ARGS / TF_XML: between the name and the arguments */
    bool parallel;         /* more than one call per turn */
    const char *alt_begin; /* also accepted where begin is when scanning (llama3's python tag) */
};

#define FW "\xef\xbd\x9c" /* U+FF5C FULLWIDTH VERTICAL LINE (DeepSeek's tags) */
#define LB "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK */
static const tool_format FORMATS[] = {
    {.name = "hermes",
     .detect = {"<tool_call>"},
     .begin = "",
     .end = "",
     .sep = "\n",
     .open = "<tool_call>\n",
     .close = "\n</tool_call>",
     .body = TF_JSON_OBJ,
     .args_key = "arguments",
     .parallel = true},
    {.name = "qwen3-coder",
     .detect = {"<function=", "<parameter="},
     .begin = "",
     .end = "",
     .sep = "\n",
     .open = "<tool_call>\n<function=",
     .close = "</function>\n</tool_call>",
     .body = TF_XML,
     .args_open = ">\n",
     .parallel = true},
    {.name = "llama3",
     .detect = {"<|python_tag|>", "\"parameters\": dictionary of argument"},
     .begin = "",
     .end = "",
     .sep = "",
     .open = "",
     .close = "",
     .body = TF_JSON_OBJ,
     .args_key = "parameters",
     .parallel = false,
     .alt_begin = "<|python_tag|>"},
    {.name = "mistral-v11",
     .detect = {"[ARGS]"},
     .begin = "",
     .end = "",
     .sep = "",
     .open = "[TOOL_CALLS]",
     .close = "",
     .body = TF_NAME_ARGS,
     .args_open = "[ARGS]",
     .parallel = true},
    {.name = "mistral",
     .detect = {"[TOOL_CALLS]"},
     .begin = "[TOOL_CALLS][",
     .end = "]",
     .sep = ", ",
     .open = "",
     .close = "",
     .body = TF_JSON_OBJ,
     .args_key = "arguments",
     .parallel = true},
    {.name = "deepseek-v3",
     .detect = {"tool" LB "calls" LB "begin"},
     .begin = "<" FW "tool" LB "calls" LB "begin" FW ">",
     .end = "<" FW "tool" LB "calls" LB "end" FW ">",
     .sep = "\n",
     .open = "<" FW "tool" LB "call" LB "begin" FW ">function<" FW "tool" LB "sep" FW ">",
     .close = "\n```<" FW "tool" LB "call" LB "end" FW ">",
     .body = TF_NAME_ARGS,
     .args_open = "\n```json\n",
     .parallel = true},
};

const tool_format *tool_format_detect(const char *src) {
    if (src)
        for (size_t i = 0; i < IFD_ARRAY_LEN(FORMATS); i++)
            for (int k = 0; k < 3 && FORMATS[i].detect[k]; k++)
                if (strstr(src, FORMATS[i].detect[k])) return &FORMATS[i];
    return &FORMATS[0];
}

const tool_format *tool_format_by_name(const char *name) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(FORMATS); i++)
        if (!strcmp(FORMATS[i].name, name)) return &FORMATS[i];
    return NULL;
}

const char *tool_format_name(const tool_format *f) { return f->name; }

/* ---- scanning ------------------------------------------------------------------------------- */
static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static size_t skip_ws(const char *s, size_t i, size_t n) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* Match literal lit at text[*pos..n): 1 matched (*pos moves past it), 0 the text ends
 * inside it (a prefix so far), -1 no. Whitespace in lit matches any run of it. */
static int lit_match(const char *t, size_t *pos, size_t n, const char *lit) {
    size_t i = *pos;
    for (const char *l = lit; *l;) {
        if (is_ws(*l)) {
            while (*l && is_ws(*l)) l++;
            i = skip_ws(t, i, n);
            continue;
        }
        if (i >= n) return 0;
        if (t[i] != *l) return -1;
        i++, l++;
    }
    *pos = i;
    return 1;
}

/* The end of one JSON value at s[i..n): 1 complete (*end after it), 0 the text ends
 * inside a valid prefix, -1 not JSON. Numbers are complete only once something follows. */
static int json_end(const char *s, size_t i, size_t n, size_t *end) {
    int depth = 0;
    char stack[256];
    bool need_value = true;
    for (;;) {
        i = skip_ws(s, i, n);
        if (i >= n) return 0;
        char c = s[i];
        if (need_value) {
            if (c == '{' || c == '[') {
                if (depth == (int)sizeof stack) return -1;
                stack[depth++] = c;
                i++;
                i = skip_ws(s, i, n);
                if (i >= n) return 0;
                if (s[i] == (c == '{' ? '}' : ']')) {
                    depth--;
                    i++;
                    need_value = false;
                    goto after;
                }
                if (c == '{') {
                    if (s[i] != '"') return -1;
                    goto key;
                }
                continue;
            } else if (c == '"') {
                for (i++; i < n && s[i] != '"'; i++)
                    if (s[i] == '\\') i++;
                if (i >= n) return 0;
                i++;
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                while (i < n && (isdigit((unsigned char)s[i]) || s[i] == '-' || s[i] == '+' || s[i] == '.' ||
                                 s[i] == 'e' || s[i] == 'E'))
                    i++;
                if (i >= n) return 0;
            } else {
                const char *lits[] = {"true", "false", "null"};
                bool ok = false;
                for (int k = 0; k < 3 && !ok; k++) {
                    size_t L = strlen(lits[k]), m = IFD_MIN(L, n - i);
                    if (!memcmp(s + i, lits[k], m)) {
                        if (m < L) return 0;
                        i += L;
                        ok = true;
                    }
                }
                if (!ok) return -1;
            }
            need_value = false;
        }
    after:
        if (depth == 0) {
            *end = i;
            return 1;
        }
        i = skip_ws(s, i, n);
        if (i >= n) return 0;
        if (s[i] == ',') {
            i++;
            if (stack[depth - 1] == '{') {
                i = skip_ws(s, i, n);
                if (i >= n) return 0;
                if (s[i] != '"') return -1;
                goto key;
            }
            need_value = true;
            continue;
        }
        if (s[i] == (stack[depth - 1] == '{' ? '}' : ']')) {
            depth--;
            i++;
            goto after;
        }
        return -1;
    key:
        for (i++; i < n && s[i] != '"'; i++)
            if (s[i] == '\\') i++;
        if (i >= n) return 0;
        i = skip_ws(s, i + 1, n);
        if (i >= n) return 0;
        if (s[i] != ':') return -1;
        i++;
        need_value = true;
    }
}

/* A JSON string at s[i] (the quote): its contents span; 1 / 0 / -1 as json_end. */
static int json_str(const char *s, size_t i, size_t n, size_t *c0, size_t *c1) {
    if (i >= n) return 0;
    if (s[i] != '"') return -1;
    size_t j = i + 1;
    for (; j < n && s[j] != '"'; j++)
        if (s[j] == '\\') j++;
    if (j >= n) return 0;
    *c0 = i + 1;
    *c1 = j;
    return 1;
}

static bool key_is(const char *s, size_t k0, size_t k1, const char *key) {
    return k1 - k0 == strlen(key) && !memcmp(s + k0, key, k1 - k0);
}

/* {"name": …, "arguments"|"parameters": …} at t[*pos]: fills sp; 1 complete (pos moves
 * past it), 0 partial, -1 not a call. */
static int scan_json_obj(const char *t, size_t *pos, size_t n, tool_span *sp) {
    size_t i = skip_ws(t, *pos, n);
    if (i >= n) return 0;
    if (t[i] != '{') return -1;
    i++;
    bool have_name = false, have_args = false;
    for (;;) {
        i = skip_ws(t, i, n);
        if (i >= n) return 0;
        if (t[i] == '}') {
            if (!have_name) return -1;
            if (!have_args) { /* no arguments: {} */
                sp->args_off = i;
                sp->args_len = 0;
                sp->args_raw = false;
            }
            *pos = i + 1;
            return 1;
        }
        size_t k0, k1;
        int r = json_str(t, i, n, &k0, &k1);
        if (r <= 0) return r;
        i = skip_ws(t, k1 + 1, n);
        if (i >= n) return 0;
        if (t[i] != ':') return -1;
        i = skip_ws(t, i + 1, n);
        if (i >= n) return 0;
        if (key_is(t, k0, k1, "name")) {
            size_t c0, c1;
            r = json_str(t, i, n, &c0, &c1);
            if (r < 0) return -1;
            if (r == 0) {
                sp->name_off = i + 1;
                sp->name_len = n - IFD_MIN(n, i + 1);
                return 0;
            }
            sp->name_off = c0;
            sp->name_len = c1 - c0;
            sp->name_done = have_name = true;
            i = c1 + 1;
        } else if (key_is(t, k0, k1, "arguments") || key_is(t, k0, k1, "parameters")) {
            size_t e;
            r = json_end(t, i, n, &e);
            if (r < 0) return -1;
            sp->args_off = i;
            sp->args_raw = t[i] == '{';
            if (r == 0) {
                sp->args_len = n - i;
                return 0;
            }
            sp->args_len = e - i;
            if (t[i] != '{' && t[i] != '"') return -1;
            have_args = true;
            i = e;
        } else {
            size_t e;
            r = json_end(t, i, n, &e);
            if (r <= 0) return r;
            i = e;
        }
        i = skip_ws(t, i, n);
        if (i >= n) return 0;
        if (t[i] == ',') i++;
        else if (t[i] != '}') return -1;
    }
}

/* NAME args_open ARGS: 1 / 0 / -1. */
static int scan_name_args(const tool_format *f, const char *t, size_t *pos, size_t n, tool_span *sp) {
    size_t i = *pos;
    sp->name_off = i;
    const char *ao = f->args_open;
    /* the name: identifier characters up to args_open */
    while (i < n && (isalnum((unsigned char)t[i]) || t[i] == '_' || t[i] == '-' || t[i] == '.')) i++;
    sp->name_len = i - sp->name_off;
    if (i >= n) return 0;
    if (sp->name_len == 0) return -1;
    size_t j = i;
    int r = lit_match(t, &j, n, ao);
    if (r <= 0) return r;
    sp->name_done = true;
    if (f->body == TF_XML) {
        /* parameters up to "</function>" */
        const char *endtag = "</function>";
        sp->args_off = j;
        sp->args_raw = false;
        size_t L = strlen(endtag);
        for (size_t k = j; k + L <= n; k++)
            if (!memcmp(t + k, endtag, L)) {
                sp->args_len = k - j;
                *pos = k; /* the close literal starts with the end tag */
                return 1;
            }
        sp->args_len = n - j;
        return 0;
    }
    size_t e;
    j = skip_ws(t, j, n);
    r = json_end(t, j, n, &e);
    sp->args_off = j;
    sp->args_raw = true;
    if (r < 0 || (r == 1 && t[j] != '{')) return -1;
    if (r == 0) {
        sp->args_len = n - j;
        return 0;
    }
    sp->args_len = e - j;
    *pos = e;
    return 1;
}

static size_t find_lit(const char *t, size_t n, const char *lit) {
    size_t L = strlen(lit);
    for (size_t i = 0; i + L <= n; i++)
        if (!memcmp(t + i, lit, L)) return i;
    return n;
}

/* The length of the longest tail of t[0..n) that is a proper prefix of lit. */
static size_t prefix_tail(const char *t, size_t n, const char *lit) {
    size_t L = strlen(lit);
    for (size_t k = IFD_MIN(n, L ? L - 1 : 0); k > 0; k--)
        if (!memcmp(t + n - k, lit, k)) return k;
    return 0;
}

/* The literal before the calls: begin, or each call's open. */
static const char *marker(const tool_format *f) { return f->begin[0] ? f->begin : f->open; }

int tool_scan(const tool_format *f, const char *t, size_t n, bool at_end, tool_span *spans, int max,
              size_t *content_end) {
    *content_end = n;
    size_t pos;
    const char *mk = marker(f);
    if (mk[0]) {
        /* the marker's first word, then the whole marker matched leniently from there */
        char head[64];
        size_t hl = 0;
        while (mk[hl] && !is_ws(mk[hl]) && hl + 1 < sizeof head) head[hl] = mk[hl], hl++;
        head[hl] = 0;
        size_t at = n, from = 0, after = n;
        while (from < n) {
            size_t a = from + find_lit(t + from, n - from, head);
            if (a >= n) break;
            size_t q = a;
            int r = lit_match(t, &q, n, mk);
            if (r == 1 || (r == 0 && !at_end)) {
                at = a;
                after = r == 1 ? q : n;
                break;
            }
            from = a + 1;
        }
        size_t alt = f->alt_begin ? find_lit(t, n, f->alt_begin) : n;
        if (at == n && alt == n) {
            if (!at_end) {
                size_t k = IFD_MAX(prefix_tail(t, n, head), f->alt_begin ? prefix_tail(t, n, f->alt_begin) : 0);
                *content_end = n - k;
            }
            return 0;
        }
        if (alt < at) {
            *content_end = alt;
            pos = alt + strlen(f->alt_begin);
        } else {
            *content_end = at;
            if (after == n && !at_end) return 0; /* the marker is still being written */
            /* with a begin marker the calls follow it; without one the first call's
             * open tag is matched again below */
            pos = f->begin[0] ? after : at;
        }
    } else {
        /* a bare call (llama3): the text starts with it, or with the python tag */
        pos = skip_ws(t, 0, n);
        if (f->alt_begin) {
            size_t p = pos;
            int r = lit_match(t, &p, n, f->alt_begin);
            if (r == 0 && !at_end) {
                *content_end = 0;
                return 0;
            }
            if (r == 1) pos = p;
        }
        pos = skip_ws(t, pos, n);
        if (pos >= n) {
            if (!at_end) *content_end = 0;
            return 0;
        }
        if (t[pos] != '{') return 0;
        *content_end = 0;
    }
    int k = 0;
    while (k < max) {
        size_t p = pos;
        if (k > 0) {
            if (!f->parallel) break;
            p = skip_ws(t, p, n);
            if (f->sep[0]) {
                int r = lit_match(t, &p, n, f->sep);
                if (r <= 0 && f->open[0]) { /* no separator: another open tag will do */
                    p = skip_ws(t, pos, n);
                    size_t q = p;
                    r = lit_match(t, &q, n, f->open);
                    if (r == 0 && !at_end) break;
                    if (r != 1) break;
                } else if (r <= 0) {
                    break;
                }
            }
        }
        tool_span sp = {.off = p};
        if (f->open[0]) {
            p = k == 0 && !f->begin[0] ? p : skip_ws(t, p, n);
            int r = lit_match(t, &p, n, f->open);
            if (r <= 0) break;
        }
        int r = f->body == TF_JSON_OBJ ? scan_json_obj(t, &p, n, &sp) : scan_name_args(f, t, &p, n, &sp);
        if (r < 0) break;
        if (r == 0) {
            if (!at_end) spans[k++] = sp;
            break;
        }
        if (f->close[0]) {
            size_t q = p;
            int c = lit_match(t, &q, n, f->close);
            if (c < 0) break;
            if (c == 0) { /* the body is whole, the close tag still coming */
                if (!at_end) spans[k++] = sp;
                break;
            }
            p = q;
        }
        sp.end = p;
        sp.complete = true;
        spans[k++] = sp;
        pos = p;
    }
    if (k == 0 && at_end) *content_end = n;
    return k;
}

/* ---- strings of a call ---------------------------------------------------------------------- */
static char *dup_span(const char *t, size_t off, size_t len) {
    char *s = malloc(len + 1);
    if (s) {
        memcpy(s, t + off, len);
        s[len] = 0;
    }
    return s;
}

/* qwen3-coder parameters -> a JSON object text: each value is JSON when it parses as
 * JSON, else a string. */
static char *xml_args(const char *t, size_t off, size_t len) {
    cJSON *o = cJSON_CreateObject();
    size_t i = off, end = off + len;
    const char *po = "<parameter=", *pc = "</parameter>";
    bool ok = o != NULL;
    while (ok) {
        i = skip_ws(t, i, end);
        if (i >= end) break;
        if (end - i < strlen(po) || memcmp(t + i, po, strlen(po))) {
            ok = false;
            break;
        }
        i += strlen(po);
        size_t k0 = i;
        while (i < end && t[i] != '>') i++;
        if (i >= end) {
            ok = false;
            break;
        }
        char *key = dup_span(t, k0, i - k0);
        i++;
        if (i < end && t[i] == '\n') i++;
        size_t v0 = i, v1 = v0;
        while (v1 + strlen(pc) <= end && memcmp(t + v1, pc, strlen(pc))) v1++;
        if (v1 + strlen(pc) > end) {
            free(key);
            ok = false;
            break;
        }
        i = v1 + strlen(pc);
        if (v1 > v0 && t[v1 - 1] == '\n') v1--;
        char *val = dup_span(t, v0, v1 - v0);
        cJSON *v = val ? cJSON_ParseWithLength(val, v1 - v0) : NULL;
        if (!v && val) v = cJSON_CreateString(val);
        ok = key && v && cJSON_AddItemToObject(o, key, v);
        if (!ok) cJSON_Delete(v);
        free(key);
        free(val);
    }
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

bool tool_span_strings(const tool_format *f, const char *t, const tool_span *s, char **name, char **args) {
    *name = *args = NULL;
    if (!s->name_done || s->name_len == 0 || (!s->complete && !s->args_raw)) return false;
    if (f->body == TF_JSON_OBJ) { /* a JSON string: decode it */
        char *q = malloc(s->name_len + 3);
        if (!q) return false;
        q[0] = '"';
        memcpy(q + 1, t + s->name_off, s->name_len);
        q[s->name_len + 1] = '"';
        q[s->name_len + 2] = 0;
        cJSON *v = cJSON_ParseWithLength(q, s->name_len + 2);
        free(q);
        if (cJSON_IsString(v) && v->valuestring[0]) *name = strdup(v->valuestring);
        cJSON_Delete(v);
    } else {
        *name = dup_span(t, s->name_off, s->name_len);
    }
    if (!*name) return false;
    if (f->body == TF_XML) {
        *args = xml_args(t, s->args_off, s->args_len);
    } else if (s->args_len == 0) {
        *args = strdup("{}");
    } else if (s->args_raw) {
        *args = dup_span(t, s->args_off, s->args_len);
    } else { /* "arguments": "{...}" — a JSON string holding the arguments */
        cJSON *v = cJSON_ParseWithLength(t + s->args_off, s->args_len);
        if (cJSON_IsString(v)) *args = strdup(v->valuestring);
        cJSON_Delete(v);
    }
    if (!*args) {
        free(*name);
        *name = NULL;
        return false;
    }
    return true;
}

/* ---- forcing --------------------------------------------------------------------------------- */
/* The arguments of one function: its schema's grammar, or any JSON object. */
static int args_rule(gram_builder *b, const cJSON *fn, int32_t *rule, api_error *e, int idx) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(fn, "strict");
    if (params && cJSON_IsObject(params)) {
        char *txt = cJSON_PrintUnformatted(params);
        if (!txt) return api_fail(e, 500, NULL, NULL, "out of memory");
        char err[256];
        int rc = gram_json_schema(b, txt, strlen(txt), rule, err, sizeof err);
        free(txt);
        if (rc == 0) return 0;
        if (gb_error(b)) return api_fail(e, 400, "invalid_value", "tools", "tools[%d]: %s", idx, gb_error(b));
        if (cJSON_IsTrue(strict))
            return api_fail(e, 400, "invalid_value", "tools", "tools[%d].function.parameters: %s", idx, err);
    }
    if (gram_json_any_object(b, rule)) return api_fail(e, 500, NULL, NULL, "grammar: %s", gb_error(b) ? gb_error(b) : "error");
    return 0;
}

/* The JSON text of a name inside a JSON string (names are plain; escape anyway). */
static char *json_name(const char *name) {
    cJSON *s = cJSON_CreateString(name);
    char *out = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    return out; /* with its quotes */
}

int tool_grammar(const tool_format *f, const cJSON *tools, const char *only, bool parallel, gram **out,
                 api_error *e) {
    *out = NULL;
    gram_builder *b = gb_new();
    if (!b) return api_fail(e, 500, NULL, NULL, "out of memory");
    int rc = -1;
    int32_t calls = gb_rule(b, NULL, 0);
    int idx = 0, n_alts = 0;
    const cJSON *tool;
    cJSON_ArrayForEach(tool, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *nm = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if (!cJSON_IsString(nm) || (only && strcmp(only, nm->valuestring))) {
            idx++;
            continue;
        }
        int32_t args;
        if (args_rule(b, fn, &args, e, idx)) goto done;
        gsym v[8];
        int nv = 0;
        if (f->open[0]) v[nv++] = gb_literal(b, f->open, strlen(f->open));
        if (f->body == TF_JSON_OBJ) {
            char *q = json_name(nm->valuestring);
            if (!q) {
                api_fail(e, 500, NULL, NULL, "out of memory");
                goto done;
            }
            char head[64];
            snprintf(head, sizeof head, "{\"name\": ");
            v[nv++] = gb_literal(b, head, strlen(head));
            v[nv++] = gb_literal(b, q, strlen(q));
            free(q);
            snprintf(head, sizeof head, ", \"%s\": ", f->args_key);
            v[nv++] = gb_literal(b, head, strlen(head));
            v[nv++] = args;
            v[nv++] = gb_literal(b, "}", 1);
        } else if (f->body == TF_NAME_ARGS) {
            v[nv++] = gb_literal(b, nm->valuestring, strlen(nm->valuestring));
            v[nv++] = gb_literal(b, f->args_open, strlen(f->args_open));
            v[nv++] = args;
        } else { /* TF_XML: one <parameter=…> per property, values as JSON text */
            v[nv++] = gb_literal(b, nm->valuestring, strlen(nm->valuestring));
            v[nv++] = gb_literal(b, f->args_open, strlen(f->args_open));
            /* the XML parameters are not constrained by the schema here: any
             * <parameter=k>\nvalue\n</parameter>\n sequence */
            uint32_t key_cls[][2] = {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}, {'-', '-'}};
            gsym key = gb_repeat(b, gb_codepoints(b, (const uint32_t(*)[2])key_cls, 5, false), 1, 64);
            uint32_t not_lt[][2] = {{'<', '<'}};
            gsym val = gb_repeat(b, gb_codepoints(b, (const uint32_t(*)[2])not_lt, 1, true), 0, -1);
            gsym pv[5] = {gb_literal(b, "<parameter=", 11), key, gb_literal(b, ">\n", 2), val,
                          gb_literal(b, "\n</parameter>\n", 14)};
            v[nv++] = gb_repeat(b, gb_seq(b, pv, 5), 0, 64);
        }
        if (f->close[0]) v[nv++] = gb_literal(b, f->close, strlen(f->close));
        gsym one = gb_seq(b, v, nv);
        if (gb_alt(b, calls, &one, 1)) break;
        n_alts++;
        idx++;
    }
    if (gb_error(b)) {
        api_fail(e, 400, "invalid_value", "tools", "tools: %s", gb_error(b));
        goto done;
    }
    if (n_alts == 0) {
        api_fail(e, 400, "invalid_value", "tool_choice", "'tool_choice' names a function that is not in 'tools'");
        goto done;
    }
    gsym root_syms[4];
    int nr = 0;
    if (f->begin[0]) root_syms[nr++] = gb_literal(b, f->begin, strlen(f->begin));
    root_syms[nr++] = calls;
    if (parallel && f->parallel) {
        gsym more[2] = {gb_literal(b, f->sep, strlen(f->sep)), calls};
        root_syms[nr++] = gb_repeat(b, gb_seq(b, more, 2), 0, 63);
    }
    if (f->end[0]) root_syms[nr++] = gb_literal(b, f->end, strlen(f->end));
    int32_t root = gb_seq(b, root_syms, nr);
    char err[256];
    if (root < 0 || gram_compile(b, root, out, err, sizeof err)) {
        api_fail(e, 400, "invalid_value", "tools", "tools: %s", gb_error(b) ? gb_error(b) : err);
        goto done;
    }
    rc = 0;
done:
    gb_free(b);
    return rc;
}
