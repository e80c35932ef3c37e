/* stop.c — incremental stop-string matcher (one KMP automaton per string, held text
 * kept implicitly as a stop string's prefix) and the stop-token-id set. Runs on the
 * thread that owns the sequence (the engine thread). */
#include "stop.h"

#include <string.h>

#include "../util/common.h"

/* fail[j] = length of the longest proper border of s[0 .. j]. */
static void kmp_build(const char *s, int32_t len, uint16_t *fail) {
    fail[0] = 0;
    int32_t k = 0;
    for (int32_t j = 1; j < len; j++) {
        while (k > 0 && s[j] != s[k]) k = fail[k - 1];
        if (s[j] == s[k]) k++;
        fail[j] = (uint16_t)k;
    }
}

int stop_init(stop_matcher *m, const char *const *stops, const size_t *lens, int n,
              bool include_stop) {
    memset(m, 0, offsetof(stop_matcher, fail)); /* the tables need no clearing */
    m->include_stop = include_stop;
    m->matched = -1;
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        const size_t len = lens ? lens[i] : strlen(stops[i]);
        if (len == 0) continue;
        if (m->n == STOP_MAX_STRINGS || len > STOP_MAX_BYTES - used) goto fail_limit;
        if (((unsigned char)stops[i][0] & 0xC0) == 0x80) {
            m->n = 0;
            return IFD_ERR_INVALID;
        }
        memcpy(m->pool + used, stops[i], len);
        kmp_build(m->pool + used, (int32_t)len, m->fail + used);
        m->orig[m->n] = (int16_t)i;
        m->off[m->n] = (uint16_t)used;
        m->len[m->n] = (uint16_t)len;
        m->n++;
        used += len;
    }
    return IFD_OK;
fail_limit:
    m->n = 0;
    return IFD_ERR_LIMIT;
}

int stop_set_ids(stop_matcher *m, const int32_t *ids, int n) {
    if (n < 0 || n > STOP_MAX_IDS) return IFD_ERR_LIMIT;
    if (n > 0) memcpy(m->ids, ids, (size_t)n * sizeof *ids);
    m->n_ids = n;
    return IFD_OK;
}

void stop_reset(stop_matcher *m) {
    memset(m->state, 0, sizeof m->state);
    m->held = 0;
    m->witness = 0;
    m->stopped = false;
    m->matched = -1;
}

bool stop_is_stop_id(const stop_matcher *m, int32_t id) {
    for (int32_t i = 0; i < m->n_ids; i++)
        if (m->ids[i] == id) return true;
    return false;
}

/* Append window[0 .. e) to out, where window = held text (h bytes of held) + c. */
static size_t emit_window(char *out, const char *held, int32_t h, char c, int32_t e) {
    const int32_t from_held = IFD_MIN(e, h);
    memcpy(out, held, (size_t)from_held);
    if (e > h) out[from_held] = c;
    return (size_t)e;
}

size_t stop_push(stop_matcher *m, const char *text, size_t n, char *out, size_t cap,
                 bool *stopped) {
    if (m->stopped || m->n == 0) {
        if (stopped) *stopped = m->stopped;
        if (m->stopped) return 0;
        IFD_ASSERT(cap >= n);
        memcpy(out, text, n);
        return n;
    }
    IFD_ASSERT(cap >= n + (size_t)m->held);
    size_t w = 0;
    for (size_t b = 0; b < n; b++) {
        const char c = text[b];
        const int32_t h = m->held;
        const char *held = m->pool + m->off[m->witness];
        int32_t best = -1, new_max = 0, new_wit = 0;
        for (int32_t i = 0; i < m->n; i++) {
            const char *s = m->pool + m->off[i];
            const uint16_t *fail = m->fail + m->off[i];
            int32_t q = m->state[i];
            while (q > 0 && s[q] != c) q = fail[q - 1];
            if (s[q] == c) q++;
            if (q == m->len[i]) {
                if (best < 0 || m->len[i] > m->len[best]) best = i;
                q = fail[q - 1]; /* unused after a stop; keeps state < len */
            }
            m->state[i] = (uint16_t)q;
            if (q > new_max) {
                new_max = q;
                new_wit = i;
            }
        }
        if (best >= 0) {
            const int32_t e = m->include_stop ? h + 1 : h + 1 - m->len[best];
            w += emit_window(out + w, held, h, c, e);
            m->stopped = true;
            m->matched = m->orig[best];
            m->held = 0;
            break;
        }
        w += emit_window(out + w, held, h, c, h + 1 - new_max);
        m->held = new_max;
        m->witness = new_wit;
    }
    if (stopped) *stopped = m->stopped;
    return w;
}

size_t stop_flush(stop_matcher *m, char *out, size_t cap) {
    const int32_t h = m->held;
    if (m->stopped || h == 0) return 0;
    IFD_ASSERT(cap >= (size_t)h);
    memcpy(out, m->pool + m->off[m->witness], (size_t)h);
    memset(m->state, 0, sizeof m->state);
    m->held = 0;
    return (size_t)h;
}
