/* common.h — small helpers every module uses: the bug-check assert, min/max,
 * array length, an error-buffer printf. Thread-safe. */
#ifndef INFERD_COMMON_H
#define INFERD_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "status.h"

/* IFD_ASSERT is for bugs only: never for conditions reachable from request data or
 * file contents. It stays on in release builds (the checks are cheap). */
#define IFD_ASSERT(x)                                                                  \
    do {                                                                               \
        if (!(x)) {                                                                    \
            fprintf(stderr, "inferd: assertion failed: %s (%s:%d)\n", #x, __FILE__,   \
                    __LINE__);                                                         \
            abort();                                                                   \
        }                                                                              \
    } while (0)

#define IFD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define IFD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define IFD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define IFD_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define IFD_PRINTF(f, a)
#endif

/* Write a message into err (if non-NULL) and return code. */
int ifd_errf(char *err, size_t err_bytes, int code, const char *fmt, ...) IFD_PRINTF(4, 5);

/* Checked size arithmetic: return false on overflow. */
static inline bool ifd_mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool ifd_add_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Monotonic clock in seconds. */
double ifd_now_s(void);

/* Read a whole file into a malloc'ed, NUL-terminated buffer. */
int ifd_read_file(const char *path, char **out, size_t *out_bytes, char *err, size_t err_bytes);

#endif
