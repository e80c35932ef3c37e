/* jinja_json.c — cJSON -> template values (the render context), and values -> JSON
 * text the way Python's json.dumps writes it (transformers' tojson: ensure_ascii off,
 * separators ", " and ": " or "," with indent, keys in insertion order unless
 * sort_keys).
 *
 * JSON numbers become int when integral and in int64 range, else float: cJSON keeps
 * no text, so "1.0" in the context reads as int 1 (a known difference from Python).
 * Runs on the rendering thread. */
#include "jinja.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JJ_MAX_DEPTH 500

jv jj_from_cjson(jr *r, const cJSON *j, int depth) {
    if (depth > JJ_MAX_DEPTH) jr_fail(r, IFD_ERR_LIMIT, "context JSON nested too deeply");
    jr_step(r);
    if (cJSON_IsNull(j) || cJSON_IsInvalid(j)) return jv_none();
    if (cJSON_IsTrue(j)) return jv_bool(true);
    if (cJSON_IsFalse(j)) return jv_bool(false);
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j) || cJSON_IsRaw(j))
        return j->valuestring ? jv_str(j->valuestring, strlen(j->valuestring)) : jv_str("", 0);
    if (cJSON_IsArray(j)) {
        jv_list *l = jv_list_new(r, 0);
        for (const cJSON *c = j->child; c; c = c->next) jv_list_push(r, l, jj_from_cjson(r, c, depth + 1));
        return jv_list_val(l);
    }
    if (cJSON_IsObject(j)) {
        jv_dict *d = jv_dict_new(r, 0);
        for (const cJSON *c = j->child; c; c = c->next) {
            const char *k = c->string ? c->string : "";
            /* push: no duplicate check (linear per key); cJSON keeps duplicates too */
            jv_dict_push(r, d, jv_str(k, strlen(k)), jj_from_cjson(r, c, depth + 1));
        }
        return jv_dict_val(d);
    }
    return jv_none();
}

static void dump_str(jr *r, jbuf *b, const char *s, size_t n, bool ensure_ascii) {
    jbuf_put(r, b, "\"", 1);
    size_t last = 0, i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        const char *rep = NULL;
        size_t adv = 1;
        if (c == '"') rep = "\\\"";
        else if (c == '\\') rep = "\\\\";
        else if (c == '\n') rep = "\\n";
        else if (c == '\r') rep = "\\r";
        else if (c == '\t') rep = "\\t";
        else if (c == '\b') rep = "\\b";
        else if (c == '\f') rep = "\\f";
        else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            rep = esc;
        } else if (c >= 0x80) {
            uint32_t cp = ju_decode(s + i, n - i, &adv);
            if (ensure_ascii) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(esc, sizeof(esc), "\\u%04x", cp);
                }
                rep = esc;
            }
        }
        if (rep) {
            jbuf_put(r, b, s + last, i - last);
            jb_puts(r, b, rep);
            last = i + adv;
        }
        i += adv;
    }
    jbuf_put(r, b, s + last, n - last);
    jbuf_put(r, b, "\"", 1);
}

static void newline_indent(jr *r, jbuf *b, const jj_opts *o, int level) {
    jbuf_put(r, b, "\n", 1);
    for (int i = 0; i < level; i++) jb_puts(r, b, o->indent);
}

static _Noreturn void not_serializable(jr *r, jv v) {
    jr_type_error(r, "Object of type %s is not JSON serializable", jv_type_name(v));
}

/* a dict key as json.dumps converts it */
static jv key_str(jr *r, jv k) {
    switch (k.t) {
    case JV_STR: return k;
    case JV_NONE: return jv_cstr("null");
    case JV_BOOL: return jv_cstr(k.b ? "true" : "false");
    case JV_INT:
    case JV_FLOAT: return jv_as_str(r, k);
    default: jr_type_error(r, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static int cmp_keys(const void *a, const void *b) {
    const jv *x = a, *y = b;
    size_t m = IFD_MIN(x[0].n, y[0].n);
    int c = m ? memcmp(x[0].s, y[0].s, m) : 0;
    if (c) return c;
    return x[0].n < y[0].n ? -1 : x[0].n > y[0].n;
}

void jj_dump(jr *r, jbuf *b, jv v, const jj_opts *o, int depth) {
    if (depth > JJ_MAX_DEPTH) jr_type_error(r, "Circular reference detected");
    jr_step(r);
    char tmp[64];
    switch (v.t) {
    case JV_NONE: jb_puts(r, b, "null"); return;
    case JV_BOOL: jb_puts(r, b, v.b ? "true" : "false"); return;
    case JV_INT: jb_printf(r, b, "%lld", (long long)v.i); return;
    case JV_FLOAT:
        if (isnan(v.f)) jb_puts(r, b, "NaN");
        else if (isinf(v.f)) jb_puts(r, b, v.f < 0 ? "-Infinity" : "Infinity");
        else {
            jv_fmt_float(tmp, sizeof(tmp), v.f);
            jb_puts(r, b, tmp);
        }
        return;
    case JV_STR: dump_str(r, b, v.s, v.n, o->ensure_ascii); return;
    case JV_LIST:
        if (v.l->lazy) not_serializable(r, v);
        if (!v.l->n) {
            jb_puts(r, b, "[]");
            return;
        }
        jbuf_put(r, b, "[", 1);
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jb_puts(r, b, o->item_sep);
            if (o->indent) newline_indent(r, b, o, depth + 1);
            jj_dump(r, b, v.l->v[i], o, depth + 1);
        }
        if (o->indent) newline_indent(r, b, o, depth);
        jbuf_put(r, b, "]", 1);
        return;
    case JV_DICT: {
        if (!v.d->n) {
            jb_puts(r, b, "{}");
            return;
        }
        /* pairs of (key string, value) */
        size_t n = v.d->n;
        jv *pairs = ja_alloc_array(&r->arena, n * 2, sizeof(jv));
        for (size_t i = 0; i < n; i++) {
            pairs[2 * i] = key_str(r, v.d->k[i]);
            pairs[2 * i + 1] = v.d->v[i];
        }
        if (o->sort_keys) qsort(pairs, n, 2 * sizeof(jv), cmp_keys);
        jbuf_put(r, b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            if (i) jb_puts(r, b, o->item_sep);
            if (o->indent) newline_indent(r, b, o, depth + 1);
            dump_str(r, b, pairs[2 * i].s, pairs[2 * i].n, o->ensure_ascii);
            jb_puts(r, b, o->key_sep);
            jj_dump(r, b, pairs[2 * i + 1], o, depth + 1);
        }
        if (o->indent) newline_indent(r, b, o, depth);
        jbuf_put(r, b, "}", 1);
        return;
    }
    default: not_serializable(r, v);
    }
}
