/* hash.h — 64-bit non-cryptographic hashing for in-process tables (prefix-cache block
 * keys, string interning). Not for anything an attacker must not be able to collide:
 * callers that act on a match verify the key itself. Pure functions, thread-safe. */
#ifndef INFERD_HASH_H
#define INFERD_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Bijective 64-bit finalizer: every input bit affects every output bit. */
static inline uint64_t ifd_hash_mix64(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

/* Hash n int32 values, chained on seed (pass a parent hash to build a hash chain). */
uint64_t ifd_hash_i32(uint64_t seed, const int32_t *v, size_t n);

/* Hash n bytes, chained on seed. */
uint64_t ifd_hash_bytes(uint64_t seed, const void *p, size_t n);

#endif
