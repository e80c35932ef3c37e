/* cmd_grammar.c — `inferd grammar`: compile a constrained-decoding grammar and drive it
 * without a model, for tests and for trying schemas out.
 *
 *   inferd grammar (--json-schema FILE | --gbnf FILE | --regex RE | --json-object)
 *                  [--check] [--match FILE] [-m VOCAB.gguf --sample N [--seed S] [--max-tokens T]]
 *
 * --check prints `ok`, or the compile error on stderr (exit 1). --match reads one JSON
 * string per line and prints `true` / `false`: is the decoded text a sentence of the
 * grammar. --sample runs N generations over the file's vocabulary (only the tokenizer
 * is read, so vocab-only GGUFs work) with random choices standing in for logits: each
 * step takes the state's mask (gram_mask), picks an allowed token uniformly, ends only
 * where the grammar may end; past T/2 tokens it steers to an end: a completion in bytes
 * (the shortest when a small breadth-first search with gram_step finds it, else a
 * depth-first one trying closers first), followed by the longest allowed tokens that
 * are prefixes of it. Each text is printed as one JSON string per line; one that
 * does not finish within T tokens (or that is not valid UTF-8) is reported on stderr
 * and makes the exit status 1. One thread. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/grammar.h"
#include "../model/gguf.h"
#include "../tokenizer/tokenizer.h"
#include "../util/buf.h"
#include "../util/common.h"
#include "../util/utf8.h"
#include "cli.h"
#include "cli_util.h"

#define USAGE                                                                                                          \
    "usage: (--json-schema FILE | --gbnf FILE | --regex RE | --json-object) [--check] [--match FILE] "               \
    "[-m VOCAB.gguf --sample N [--seed S] [--max-tokens T]]"

/* ---- the vocabulary ------------------------------------------------------------------------ */
static size_t tk_piece(void *ctx, int32_t id, char *buf, size_t cap) { return tok_piece(ctx, id, false, buf, cap); }
static bool tk_eog(void *ctx, int32_t id) { return tok_is_eog(ctx, id); }

static tokenizer *load_tokenizer(const char *path) {
    gguf_file f;
    char err[512];
    tokenizer *t = NULL;
    if (gguf_open(&f, path, err, sizeof err)) {
        fprintf(stderr, "inferd grammar: %s\n", err);
        return NULL;
    }
    if (tok_create(&t, &f, err, sizeof err)) fprintf(stderr, "inferd grammar: %s\n", err);
    gguf_close(&f);
    return t;
}

/* ---- random choices ------------------------------------------------------------------------ */
static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- steering: a shortest completion ------------------------------------------------------- */
typedef struct bfs {
    gram_state *state; /* (n) visited states in order */
    int32_t *prev;     /* (n) index of the state it was reached from */
    uint8_t *byte;     /* (n) the byte that reached it */
    int64_t n, cap;
    int32_t *ix; /* open addressing: state -> index + 1 */
    int64_t ix_cap;
} bfs;

static bool bfs_grow(bfs *q) {
    if (q->n < q->cap) return true;
    int64_t nc = q->cap ? q->cap * 2 : 1024;
    gram_state *s = realloc(q->state, sizeof *s * (size_t)nc);
    if (s) q->state = s;
    int32_t *p = realloc(q->prev, sizeof *p * (size_t)nc);
    if (p) q->prev = p;
    uint8_t *b = realloc(q->byte, (size_t)nc);
    if (b) q->byte = b;
    if (!s || !p || !b) return false;
    q->cap = nc;
    return true;
}

/* Insert s unless seen; false when seen or out of memory (*oom). */
static bool bfs_add(bfs *q, gram_state s, int32_t prev, uint8_t byte, bool *oom) {
    if ((q->n + 1) * 2 > q->ix_cap) {
        int64_t nc = q->ix_cap ? q->ix_cap * 2 : 4096;
        int32_t *ix = calloc((size_t)nc, sizeof *ix);
        if (!ix) return !(*oom = true);
        for (int64_t i = 0; i < q->n; i++) {
            uint64_t h = (uint64_t)q->state[i] * 0x9e3779b97f4a7c15ull >> 20 & (uint64_t)(nc - 1);
            while (ix[h]) h = (h + 1) & (uint64_t)(nc - 1);
            ix[h] = (int32_t)i + 1;
        }
        free(q->ix);
        q->ix = ix;
        q->ix_cap = nc;
    }
    uint64_t h = (uint64_t)s * 0x9e3779b97f4a7c15ull >> 20 & (uint64_t)(q->ix_cap - 1);
    for (; q->ix[h]; h = (h + 1) & (uint64_t)(q->ix_cap - 1))
        if (q->state[q->ix[h] - 1] == s) return false;
    if (!bfs_grow(q)) return !(*oom = true);
    q->ix[h] = (int32_t)q->n + 1;
    q->state[q->n] = s;
    q->prev[q->n] = prev;
    q->byte[q->n] = byte;
    q->n++;
    return true;
}

static void bfs_free(bfs *q) {
    free(q->state);
    free(q->prev);
    free(q->byte);
    free(q->ix);
}

/* The path from the search's first state to state i, into *plan. */
static bool path_to(const bfs *q, int64_t i, sbuf *plan) {
    int64_t len = 0;
    for (int64_t k = i; q->prev[k] >= 0; k = q->prev[k]) len++;
    if (!sbuf_reserve(plan, (size_t)len + 1)) return false;
    plan->n = (size_t)len;
    for (int64_t k = i; q->prev[k] >= 0; k = q->prev[k]) plan->p[--len] = (char)q->byte[k];
    return true;
}

#define BFS_STATES 4000 /* breadth-first: exact but explodes where any value may nest */
#define DFS_STATES 200000
#define DFS_DEPTH 8192

/* Bytes to try first when any completion will do: closers and the shortest values;
 * openers and escapes last (they only lead deeper). */
static void byte_order(uint8_t order[256]) {
    static const char first[] = "\"}]0,:";
    bool used[256] = {0};
    int n = 0;
    for (const char *c = first; *c; c++) used[(uint8_t)(order[n++] = (uint8_t)*c)] = true;
    for (int c = 0x20; c < 0x7F; c++)
        if (!used[c] && c != '[' && c != '{' && c != '\\') used[order[n++] = (uint8_t)c] = true;
    for (const char *c = "[{\\"; *c; c++) used[(uint8_t)(order[n++] = (uint8_t)*c)] = true;
    for (int c = 0x80; c < 0x100; c++) order[n++] = (uint8_t)c;
    for (int c = 0; c < 0x20; c++) order[n++] = (uint8_t)c;
}

/* A completion from s to a state that may end, into *plan: the shortest one when a
 * small breadth-first search finds it, else the first a depth-first search finds,
 * trying bytes in byte_order (every state it meets is new: a state it left is dead or
 * explored). false when neither finds one within its limits. */
static bool find_completion(gram *g, gram_state s, sbuf *plan) {
    bfs q = {0};
    bool oom = false, found = false;
    sbuf_reset(plan);
    bfs_add(&q, s, -1, 0, &oom);
    for (int64_t i = 0; i < q.n && !oom && q.n < BFS_STATES && !found; i++) {
        if (gram_can_end(g, q.state[i])) {
            found = path_to(&q, i, plan);
            break;
        }
        for (int c = 0; c < 256 && !oom; c++) {
            gram_state t = gram_step(g, q.state[i], (uint8_t)c);
            if (t != GRAM_DEAD) bfs_add(&q, t, (int32_t)i, (uint8_t)c, &oom);
        }
    }
    bfs_free(&q);
    if (found || oom) return found;
    uint8_t order[256];
    byte_order(order);
    q = (bfs){0};
    int32_t *path = malloc(sizeof *path * DFS_DEPTH); /* search indices of the states on the path */
    uint16_t *next = malloc(sizeof *next * DFS_DEPTH); /* the next byte (position in order) to try */
    int32_t depth = 0;
    if (path && next && bfs_add(&q, s, -1, 0, &oom)) {
        path[0] = 0;
        next[0] = 0;
        depth = 1;
    }
    while (depth > 0 && !oom && q.n < DFS_STATES) {
        int32_t i = path[depth - 1];
        if (gram_can_end(g, q.state[i])) {
            found = path_to(&q, i, plan);
            break;
        }
        if (next[depth - 1] >= 256 || depth >= DFS_DEPTH) {
            depth--;
            continue;
        }
        uint8_t c = order[next[depth - 1]++];
        gram_state t = gram_step(g, q.state[i], c);
        if (t != GRAM_DEAD && bfs_add(&q, t, i, c, &oom)) {
            path[depth] = (int32_t)q.n - 1;
            next[depth] = 0;
            depth++;
        }
    }
    free(path);
    free(next);
    bfs_free(&q);
    return found;
}

/* ---- sampling ------------------------------------------------------------------------------- */
/* One generation into *out; 0 when it ended in an accepting state, -1 otherwise (why). */
static int sample_one(gram *g, const gram_vocab *v, uint64_t *rng, int64_t max_tokens, sbuf *out, const char **why) {
    const int32_t nv = gram_vocab_n(v), W = gram_mask_words(v);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)nv);
    sbuf plan = {0};
    size_t plan_at = 0;
    bool have_plan = false;
    int rc = -1;
    *why = "out of memory";
    sbuf_reset(out);
    gram_state s = gram_start(g);
    if (!allowed || s == GRAM_DEAD) goto done;
    for (int64_t step = 0;; step++) {
        if (gram_must_end(g, s)) break;
        if (step >= max_tokens) {
            *why = "did not finish within --max-tokens";
            goto done;
        }
        const uint32_t *m = gram_mask(g, v, s);
        if (!m) {
            *why = gram_overflowed(g) ? "the matcher ran out of memory" : "no mask";
            goto done;
        }
        int32_t na = 0;
        for (int32_t w = 0; w < W; w++)
            for (uint32_t bits = m[w]; bits; bits &= bits - 1) {
                int32_t id = w * 32 + __builtin_ctz(bits);
                if (!gram_vocab_is_eog(v, id)) allowed[na++] = id;
            }
        const bool can_end = gram_can_end(g, s);
        int32_t pick = -1;
        if (step >= max_tokens / 2) { /* steer to the nearest end */
            if (can_end) break;
            if (!have_plan || plan_at >= plan.n) {
                if (!find_completion(g, s, &plan)) {
                    *why = gram_overflowed(g) ? "the matcher ran out of memory" : "no completion found";
                    goto done;
                }
                plan_at = 0;
                have_plan = true;
            }
            size_t best = 0;
            for (int32_t k = 0; k < na; k++) {
                size_t n;
                const char *p = gram_vocab_piece(v, allowed[k], &n);
                if (n > best && n <= plan.n - plan_at && !memcmp(p, plan.p + plan_at, n)) {
                    best = n;
                    pick = allowed[k];
                }
            }
            if (pick >= 0) plan_at += best;
            else have_plan = false; /* no token follows the plan: a random one, then plan again */
        }
        if (pick < 0) {
            uint64_t r = rng_next(rng) % (uint64_t)(na + (can_end ? 1 : 0));
            if (r == (uint64_t)na) break; /* the end-of-generation choice */
            if (!na) {
                *why = "no token allowed";
                goto done;
            }
            pick = allowed[r];
        }
        size_t n;
        const char *p = gram_vocab_piece(v, pick, &n);
        s = gram_advance_token(g, v, s, pick);
        if (s == GRAM_DEAD) {
            *why = "an allowed token led to a dead state";
            goto done;
        }
        sbuf_put(out, p, n);
    }
    if (!gram_can_end(g, s)) {
        *why = "ended where the grammar cannot end";
        goto done;
    }
    if (out->oom) goto done;
    if (utf8_valid_prefix(out->p ? out->p : "", out->n) != out->n) {
        *why = "not valid UTF-8";
        goto done;
    }
    rc = 0;
done:
    free(allowed);
    sbuf_free(&plan);
    return rc;
}

static int run_samples(gram *g, const char *vocab_path, int64_t n, uint64_t seed, int64_t max_tokens) {
    tokenizer *t = load_tokenizer(vocab_path);
    if (!t) return 1;
    gram_vocab *v = gram_vocab_new(tok_n_vocab(t), tk_piece, tk_eog, t);
    if (!v) {
        fprintf(stderr, "inferd grammar: out of memory\n");
        tok_destroy(t);
        return 1;
    }
    int status = 0;
    uint64_t rng = seed;
    sbuf out = {0}, line = {0};
    for (int64_t i = 0; i < n; i++) {
        const char *why;
        if (sample_one(g, v, &rng, max_tokens, &out, &why)) {
            fprintf(stderr, "inferd grammar: sample %lld: %s (after %zu bytes: %.*s)\n", (long long)i, why, out.n,
                    (int)IFD_MIN(out.n, 200), out.p ? out.p : "");
            status = 1;
            continue;
        }
        sbuf_reset(&line);
        sbuf_json_str(&line, out.p ? out.p : "", out.n);
        sbuf_put(&line, "\n", 1);
        if (line.oom || fwrite(line.p, 1, line.n, stdout) != line.n) {
            fprintf(stderr, "inferd grammar: write error\n");
            status = 1;
            break;
        }
    }
    fflush(stdout);
    sbuf_free(&out);
    sbuf_free(&line);
    gram_vocab_free(v);
    tok_destroy(t);
    return status;
}

/* --match: one JSON string per line; prints true / false. */
static int run_match(gram *g, const char *path) {
    char *text = NULL, err[512];
    size_t n = 0;
    if (ifd_read_file(path, &text, &n, err, sizeof err)) {
        fprintf(stderr, "inferd grammar: %s\n", err);
        return 1;
    }
    int status = 0;
    for (char *line = text, *end; line < text + n; line = end + 1) {
        end = memchr(line, '\n', (size_t)(text + n - line));
        if (!end) end = text + n;
        if (end == line) continue;
        *end = 0;
        cJSON *j = cJSON_Parse(line);
        if (!cJSON_IsString(j)) {
            fprintf(stderr, "inferd grammar: %s: a line is not a JSON string\n", path);
            cJSON_Delete(j);
            status = 1;
            break;
        }
        printf("%s\n", gram_accepts(g, j->valuestring, strlen(j->valuestring)) ? "true" : "false");
        cJSON_Delete(j);
    }
    free(text);
    fflush(stdout);
    return status;
}

int cli_grammar(int argc, char **argv) {
    const char *vocab = NULL, *schema = NULL, *gbnf = NULL, *re = NULL, *match = NULL;
    bool object = false, check = false;
    int64_t n_samples = 0, max_tokens = 256;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool used = true;
        if (!strcmp(a, "-m") && val) vocab = val;
        else if (!strcmp(a, "--json-schema") && val) schema = val;
        else if (!strcmp(a, "--gbnf") && val) gbnf = val;
        else if (!strcmp(a, "--regex") && val) re = val;
        else if (!strcmp(a, "--match") && val) match = val;
        else if (!strcmp(a, "--sample") && val && cli_parse_i64(val, 0, INT32_MAX, &n_samples)) {
        } else if (!strcmp(a, "--max-tokens") && val && cli_parse_i64(val, 1, 1 << 20, &max_tokens)) {
        } else if (!strcmp(a, "--seed") && val && cli_parse_u64(val, &seed)) {
        } else {
            used = false;
            if (!strcmp(a, "--json-object")) object = true;
            else if (!strcmp(a, "--check")) check = true;
            else {
                fprintf(stderr, "inferd grammar: unknown or incomplete option '%s'\n" USAGE "\n", a);
                return 2;
            }
        }
        i += used;
    }
    if ((schema != NULL) + (gbnf != NULL) + (re != NULL) + object != 1 || (n_samples && !vocab) ||
        (!check && !match && !n_samples)) {
        fprintf(stderr, "inferd grammar: " USAGE "\n");
        return 2;
    }
    char err[512] = "";
    char *text = NULL;
    size_t n = 0;
    gram *g = NULL;
    int rc;
    const char *file = schema ? schema : gbnf;
    if (file && ifd_read_file(file, &text, &n, err, sizeof err)) {
        fprintf(stderr, "inferd grammar: %s\n", err);
        return 1;
    }
    if (schema) {
        rc = gram_from_json_schema(text, n, &g, err, sizeof err);
    } else if (gbnf) {
        rc = gram_from_gbnf(text, n, &g, err, sizeof err);
    } else if (re) {
        rc = gram_from_regex(re, strlen(re), &g, err, sizeof err);
    } else {
        gram_builder *b = gb_new();
        int32_t root = -1;
        rc = !b || gram_json_any_object(b, &root) ? -1 : gram_compile(b, root, &g, err, sizeof err);
        if (rc && !err[0]) snprintf(err, sizeof err, "%s", b && gb_error(b) ? gb_error(b) : "out of memory");
        gb_free(b);
    }
    free(text);
    if (rc) {
        fprintf(stderr, "inferd grammar: %s\n", err);
        return 1;
    }
    int status = 0;
    if (check) printf("ok\n");
    if (match) status |= run_match(g, match);
    if (n_samples && !status) status |= run_samples(g, vocab, n_samples, seed, max_tokens);
    gram_unref(g);
    return status;
}
