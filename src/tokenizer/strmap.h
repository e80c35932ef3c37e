/* strmap.h — a fixed-size open-addressing hash map from byte strings to int32 values,
 * built once (vocabulary text -> id, BPE merge "a b" -> rank) and then only read.
 *
 * Keys are not copied: they point into memory that must outlive the map (the
 * tokenizer's arenas). Lookups may be split in two parts joined by one separator byte
 * so that "left right" merge keys need no temporary string. Reads are thread-safe;
 * building is not. Internal to src/tokenizer/. */
#ifndef INFERD_TOK_STRMAP_H
#define INFERD_TOK_STRMAP_H
#include "../util/layer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct strmap_slot {
    const char *key; /* NULL: empty slot */
    uint32_t len;
    int32_t value;
    uint64_t hash;
} strmap_slot;

typedef struct strmap {
    strmap_slot *slots;
    size_t mask; /* capacity - 1 (power of two) */
    size_t n;
} strmap;

/* Room for up to n_max keys (load factor <= 1/2). Returns IFD_OK or IFD_ERR_NOMEM. */
int strmap_init(strmap *m, size_t n_max);
void strmap_deinit(strmap *m); /* accepts a zeroed struct */

/* Insert key -> value. overwrite: replace the value of an existing key (else keep the
 * first). The map must have room (at most n_max keys in all). */
void strmap_put(strmap *m, const char *key, uint32_t len, int32_t value, bool overwrite);

/* Value of key, or -1 when absent. */
int32_t strmap_get(const strmap *m, const char *key, size_t len);
/* Value of the key a || sep || b, or -1. */
int32_t strmap_get2(const strmap *m, const char *a, size_t na, char sep, const char *b, size_t nb);

#endif
