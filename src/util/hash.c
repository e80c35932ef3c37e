/* hash.c — the hashes declared in hash.h: a multiply-rotate accumulator over 64-bit
 * words with a full-avalanche finish. Fast enough to hash a 16-token KV block in a few
 * nanoseconds; quality is checked by the prefix-cache tests (which also verify keys). */
#include "hash.h"

#include <string.h>

#define P1 0x9e3779b185ebca87ull
#define P2 0xc2b2ae3d27d4eb4full
#define P3 0x165667b19e3779f9ull

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t absorb(uint64_t acc, uint64_t k) {
    acc ^= rotl64(k * P2, 29) * P1;
    return rotl64(acc, 27) * P1 + P3;
}

static uint64_t finish(uint64_t acc, size_t n) { return ifd_hash_mix64(acc ^ ((uint64_t)n * P3)); }

uint64_t ifd_hash_i32(uint64_t seed, const int32_t *v, size_t n) {
    uint64_t acc = ifd_hash_mix64(seed + P1);
    size_t i = 0;
    for (; i + 2 <= n; i += 2)
        acc = absorb(acc, (uint64_t)(uint32_t)v[i] | (uint64_t)(uint32_t)v[i + 1] << 32);
    if (i < n) acc = absorb(acc, (uint64_t)(uint32_t)v[i] | (1ull << 63));
    return finish(acc, n);
}

uint64_t ifd_hash_bytes(uint64_t seed, const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t acc = ifd_hash_mix64(seed + P2);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t k;
        memcpy(&k, b + i, 8);
        acc = absorb(acc, k);
    }
    if (i < n) {
        uint64_t k = 0;
        memcpy(&k, b + i, n - i);
        acc = absorb(acc, k ^ ((uint64_t)(n - i) << 56));
    }
    return finish(acc, n);
}
