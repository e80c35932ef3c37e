/* strmap.c — open-addressing (linear probing) string -> int32 map; see strmap.h.
 * Building is single-threaded; lookups are read-only and thread-safe. */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

#include "../util/status.h"

/* FNV-1a, 64-bit, then a final mix so the low bits (the slot index) depend on all. */
static inline uint64_t fnv_step(uint64_t h, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static inline uint64_t fnv_final(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

#define FNV_INIT 0xcbf29ce484222325ull

int strmap_init(strmap *m, size_t n_max) {
    size_t cap = 16;
    while (cap < 2 * n_max) {
        if (cap > SIZE_MAX / 4 / sizeof(strmap_slot)) return IFD_ERR_NOMEM;
        cap *= 2;
    }
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return IFD_ERR_NOMEM;
    m->mask = cap - 1;
    m->n = 0;
    return IFD_OK;
}

void strmap_deinit(strmap *m) {
    if (!m) return;
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
    m->n = 0;
}

void strmap_put(strmap *m, const char *key, uint32_t len, int32_t value, bool overwrite) {
    uint64_t h = fnv_final(fnv_step(FNV_INIT, key, len));
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        strmap_slot *s = &m->slots[i];
        if (!s->key) {
            s->key = key;
            s->len = len;
            s->value = value;
            s->hash = h;
            m->n++;
            return;
        }
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            if (overwrite) s->value = value;
            return;
        }
    }
}

int32_t strmap_get(const strmap *m, const char *key, size_t len) {
    if (!m->slots || len > UINT32_MAX) return -1;
    uint64_t h = fnv_final(fnv_step(FNV_INIT, key, len));
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        const strmap_slot *s = &m->slots[i];
        if (!s->key) return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s->value;
    }
}

int32_t strmap_get2(const strmap *m, const char *a, size_t na, char sep, const char *b, size_t nb) {
    size_t len = na + 1 + nb;
    if (!m->slots || len > UINT32_MAX) return -1;
    uint64_t h = fnv_step(FNV_INIT, a, na);
    h = fnv_step(h, &sep, 1);
    h = fnv_final(fnv_step(h, b, nb));
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        const strmap_slot *s = &m->slots[i];
        if (!s->key) return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, a, na) == 0 && s->key[na] == sep &&
            memcmp(s->key + na + 1, b, nb) == 0)
            return s->value;
    }
}
