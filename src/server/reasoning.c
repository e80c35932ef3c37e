/* reasoning.c — see reasoning.h. */
#include "reasoning.h"

#include <string.h>

#include "openai.h"

static size_t skip_ws(const char *t, size_t i, size_t n) {
    while (i < n && (t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r')) i++;
    return i;
}

static size_t find(const char *t, size_t from, size_t n, const char *lit) {
    const size_t L = strlen(lit);
    for (size_t i = from; i + L <= n; i++)
        if (!memcmp(t + i, lit, L)) return i;
    return n;
}

/* The longest tail of t[from..n) that is a proper prefix of lit. */
static size_t held(const char *t, size_t from, size_t n, const char *lit) {
    const size_t L = strlen(lit);
    for (size_t k = L - 1; k > 0; k--)
        if (n - from >= k && !memcmp(t + n - k, lit, k)) return k;
    return 0;
}

void reasoning_split_of(int mode, const char *t, size_t n, bool at_end, reasoning_split *v) {
    *v = (reasoning_split){.c0 = 0, .known = true};
    if (mode == OAI_REASONING_NONE) return;
    size_t r0 = 0;
    if (mode == OAI_REASONING_MAY_OPEN) {
        const size_t i = skip_ws(t, 0, n);
        const size_t L = strlen(REASONING_OPEN);
        if (n - i < L && !memcmp(t + i, REASONING_OPEN, n - i) && !at_end) {
            v->c0 = n; /* whitespace or a part of the open tag so far: undecided */
            v->known = false;
            return;
        }
        if (n - i < L || memcmp(t + i, REASONING_OPEN, L)) return; /* no reasoning: all content */
        r0 = i + L;
    }
    v->has = true;
    v->r0 = r0;
    const size_t k = find(t, r0, n, REASONING_CLOSE);
    if (k < n) {
        v->closed = true;
        v->r1 = v->safe = k;
        v->c0 = skip_ws(t, k + strlen(REASONING_CLOSE), n);
        v->known = at_end || v->c0 < n; /* only whitespace after it so far: not yet */
        return;
    }
    v->r1 = n;
    v->safe = at_end ? n : n - held(t, r0, n, REASONING_CLOSE);
    v->c0 = n;
    v->known = at_end;
}
