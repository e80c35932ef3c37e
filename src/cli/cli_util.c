/* cli_util.c — number parsing for the CLI commands. */
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
