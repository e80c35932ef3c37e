/* structured.c — a request's constraint into a compiled grammar, through a small LRU
 * cache keyed by (what kind, the source text). See structured.h. HTTP threads; the cache
 * is under one mutex, compiles run outside it. */
#include "structured.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "server.h"
#include "tools.h"

typedef struct so_entry {
    char *key; /* kind letter + source */
    size_t key_len;
    gram *g;   /* one reference, the cache's */
    uint64_t used;
} so_entry;

struct so_cache {
    pthread_mutex_t mu;
    so_entry *v;
    int n, cap;
    uint64_t tick;
    int64_t hits, compiles;
};

so_cache *so_cache_create(int capacity) {
    so_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->cap = capacity > 0 ? capacity : 1;
    c->v = calloc((size_t)c->cap, sizeof *c->v);
    if (!c->v) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void so_cache_destroy(so_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->v[i].key);
        gram_unref(c->v[i].g);
    }
    free(c->v);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void so_cache_stats(so_cache *c, int64_t *hits, int64_t *compiles) {
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *compiles = c->compiles;
    pthread_mutex_unlock(&c->mu);
}

static gram *cache_get(so_cache *c, const char *key, size_t n) {
    gram *g = NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (c->v[i].key_len == n && !memcmp(c->v[i].key, key, n)) {
            g = c->v[i].g;
            gram_ref(g);
            c->v[i].used = ++c->tick;
            c->hits++;
            break;
        }
    pthread_mutex_unlock(&c->mu);
    return g;
}

/* Keep g under key (the cache takes its own reference; the least recently used entry
 * makes room). */
static void cache_put(so_cache *c, const char *key, size_t n, gram *g) {
    char *k = malloc(n + 1);
    if (!k) return;
    memcpy(k, key, n);
    k[n] = 0;
    pthread_mutex_lock(&c->mu);
    c->compiles++;
    int at = c->n;
    for (int i = 0; i < c->n; i++)
        if (c->v[i].key_len == n && !memcmp(c->v[i].key, key, n)) at = -1; /* raced: keep the first */
    if (at >= 0 && c->n == c->cap) {
        at = 0;
        for (int i = 1; i < c->n; i++)
            if (c->v[i].used < c->v[at].used) at = i;
        free(c->v[at].key);
        gram_unref(c->v[at].g);
    } else if (at >= 0) {
        c->n++;
    }
    if (at >= 0) {
        gram_ref(g);
        c->v[at] = (so_entry){k, n, g, ++c->tick};
        k = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    free(k);
}

static const char *so_param(const oai_request *r) {
    static const char *const PARAM[] = {"response_format", "response_format", "response_format", "guided_regex",
                                        "grammar", "guided_choice"};
    const cJSON *root = r->root;
    if (r->so_kind == OAI_SO_JSON_SCHEMA && !cJSON_GetObjectItemCaseSensitive(root, "response_format"))
        return cJSON_GetObjectItemCaseSensitive(root, "guided_json") ? "guided_json" : "json_schema";
    if (r->so_kind == OAI_SO_GBNF && cJSON_GetObjectItemCaseSensitive(root, "guided_grammar")) return "guided_grammar";
    return PARAM[r->so_kind];
}

/* One of the strings of a guided_choice, exactly. */
static int choice_grammar(const cJSON *arr, gram **out, char *err, size_t eb) {
    gram_builder *b = gb_new();
    if (!b) return ifd_errf(err, eb, -1, "out of memory");
    int32_t root = gb_rule(b, NULL, 0);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        gsym lit = gb_literal(b, it->valuestring, strlen(it->valuestring));
        gb_alt(b, root, &lit, 1);
    }
    int rc = gram_compile(b, root, out, err, eb);
    gb_free(b);
    return rc;
}

int so_prepare(server *s, oai_request *r, api_error *e) {
    r->grammar = NULL;
    const bool forced = r->kind == OAI_CHAT && r->tools && r->tool_mode != OAI_TOOLS_AUTO;
    if (!forced && r->so_kind == OAI_SO_NONE) return 0;
    sbuf key = {0};
    char *txt = NULL;
    const tool_format *tf = chat_tool_format(s->chat);
    if (forced) {
        txt = cJSON_PrintUnformatted(r->tools);
        sbuf_printf(&key, "T%s|%d|%d|%d|%s|", tool_format_name(tf), (int)r->tool_mode, (int)r->parallel_tool_calls,
                    (int)r->legacy_functions, r->tool_name ? r->tool_name : "");
    } else if (r->so_kind == OAI_SO_JSON_SCHEMA || r->so_kind == OAI_SO_CHOICE) {
        txt = cJSON_IsString(r->so_value) ? strdup(r->so_value->valuestring) : cJSON_PrintUnformatted(r->so_value);
        sbuf_printf(&key, "%d|", (int)r->so_kind);
    } else if (r->so_kind == OAI_SO_REGEX || r->so_kind == OAI_SO_GBNF) {
        txt = strdup(r->so_value->valuestring);
        sbuf_printf(&key, "%d|", (int)r->so_kind);
    } else {
        txt = strdup("");
        sbuf_printf(&key, "%d|", (int)r->so_kind);
    }
    if (!txt) {
        sbuf_free(&key);
        return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    sbuf_puts(&key, txt);
    if (key.oom) {
        free(txt);
        sbuf_free(&key);
        return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    gram *g = cache_get(s->grammars, key.p, key.n);
    int rc = 0;
    if (!g) {
        char err[512] = "";
        if (forced) {
            /* a named function is called once; "required" may call several when
             * parallel_tool_calls allows (one in the deprecated function_call shape) */
            const bool parallel = r->tool_mode == OAI_TOOLS_REQUIRED && r->parallel_tool_calls && !r->legacy_functions;
            rc = tool_grammar(tf, r->tools, r->tool_mode == OAI_TOOLS_NAMED ? r->tool_name : NULL, parallel, &g, e);
        } else {
            inferd_grammar_kind k = INFERD_GRAMMAR_JSON_OBJECT;
            int crc;
            if (r->so_kind == OAI_SO_CHOICE) {
                crc = choice_grammar(r->so_value, &g, err, sizeof err);
            } else {
                if (r->so_kind == OAI_SO_JSON_SCHEMA) k = INFERD_GRAMMAR_JSON_SCHEMA;
                else if (r->so_kind == OAI_SO_REGEX) k = INFERD_GRAMMAR_REGEX;
                else if (r->so_kind == OAI_SO_GBNF) k = INFERD_GRAMMAR_GBNF;
                crc = inferd_grammar_compile(k, txt, strlen(txt), (inferd_grammar **)(void *)&g, err, sizeof err);
            }
            if (crc) {
                const char *p = so_param(r);
                rc = api_fail(e, 400, "invalid_value", p, "'%s': %s", p, err[0] ? err : "cannot be compiled");
            }
        }
        if (rc == 0 && g) cache_put(s->grammars, key.p, key.n, g);
    }
    free(txt);
    sbuf_free(&key);
    if (rc) return -1;
    r->grammar = g;
    return 0;
}
