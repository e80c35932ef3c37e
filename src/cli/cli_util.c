/* cli_util.c — number parsing and the single-sequence runner for the CLI commands. */
#include "cli_util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/common.h"

bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool cli_parse_f32(const char *s, float lo, float hi, float *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_ids(const char *s, int32_t **ids, int32_t *n) {
    size_t cap = 16, cnt = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return false;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            free(v);
            return false;
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                free(v);
                return false;
            }
            v = nv;
            cap *= 2;
        }
        v[cnt++] = (int32_t)x;
        p = end;
    }
    *ids = v;
    *n = (int32_t)cnt;
    return true;
}

int seq_runner_init(seq_runner *r, const model *m, int32_t max_len, char *err, size_t err_bytes) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->max_len = max_len;
    r->chunk = 256;
    const int32_t bs = 16, n_blocks = (max_len + bs - 1) / bs;
    backend_config cfg = {.n_threads = 0,
                          .block_size = bs,
                          .n_blocks = n_blocks,
                          .max_batch_tokens = r->chunk,
                          .max_batch_seqs = 1,
                          .max_logits = r->chunk,
                          .max_seq_len = max_len};
    int rc = backend_cpu_create(&r->be, m, &cfg, err, err_bytes);
    if (rc) return rc;
    r->block_table = malloc((size_t)n_blocks * sizeof(int32_t));
    r->tok = malloc((size_t)r->chunk * sizeof(int32_t));
    r->pos = malloc((size_t)r->chunk * sizeof(int32_t));
    r->slot = malloc((size_t)r->chunk * sizeof(int32_t));
    r->lidx = malloc((size_t)r->chunk * sizeof(int32_t));
    if (!r->block_table || !r->tok || !r->pos || !r->slot || !r->lidx) {
        seq_runner_deinit(r);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < n_blocks; i++) r->block_table[i] = i;
    return IFD_OK;
}

void seq_runner_deinit(seq_runner *r) {
    backend_destroy(r->be);
    free(r->block_table);
    free(r->tok);
    free(r->pos);
    free(r->slot);
    free(r->lidx);
    memset(r, 0, sizeof *r);
}

int seq_runner_feed(seq_runner *r, const int32_t *ids, int32_t n, bool all_logits, float *out) {
    if (n <= 0 || r->n_past + n > r->max_len) return IFD_ERR_LIMIT;
    const int32_t vocab = (int32_t)r->m->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return IFD_ERR_INVALID;
    for (int32_t done = 0; done < n;) {
        const int32_t c = IFD_MIN(r->chunk, n - done);
        for (int32_t i = 0; i < c; i++) {
            r->tok[i] = ids[done + i];
            r->pos[i] = r->n_past + i;
            r->slot[i] = r->n_past + i; /* identity block table */
            r->lidx[i] = i;
        }
        const bool last = done + c == n;
        int32_t seq_start[2] = {0, c}, ctx_len = r->n_past + c;
        ifd_batch b = {.n_tokens = c,
                       .token_ids = r->tok,
                       .positions = r->pos,
                       .slot_mapping = r->slot,
                       .n_seqs = 1,
                       .seq_start = seq_start,
                       .context_len = &ctx_len,
                       .block_table = r->block_table,
                       .max_blocks_per_seq = (r->max_len + 15) / 16,
                       .n_logits = all_logits ? c : (last ? 1 : 0),
                       .logits_index = all_logits ? r->lidx : r->lidx + (c - 1)};
        float *dst = all_logits ? out + (size_t)done * vocab : out;
        int rc = backend_forward(r->be, &b, dst);
        if (rc) return rc;
        r->n_past += c;
        done += c;
    }
    return IFD_OK;
}
