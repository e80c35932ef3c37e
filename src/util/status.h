/* status.h — the one list of recoverable error codes (libuv style).
 *
 * Every fallible function in inferd returns an int: 0 (IFD_OK) on success or a
 * negative code from this list. Human-readable detail goes into a caller-provided
 * error buffer where the function takes one. Thread-safe (pure data). */
#ifndef INFERD_STATUS_H
#define INFERD_STATUS_H

#define IFD_STATUS_MAP(X)                                   \
    X(OK, 0, "ok")                                          \
    X(ERR_NOMEM, -1, "out of memory")                       \
    X(ERR_IO, -2, "i/o error")                              \
    X(ERR_FORMAT, -3, "invalid or corrupt file")            \
    X(ERR_UNSUPPORTED, -4, "unsupported")                   \
    X(ERR_INVALID, -5, "invalid argument")                  \
    X(ERR_NOT_FOUND, -6, "not found")                       \
    X(ERR_LIMIT, -7, "limit exceeded")                      \
    X(ERR_INTERNAL, -8, "internal error")                   \
    X(ERR_TEMPLATE, -9, "template error")                   \
    X(ERR_BUSY, -10, "resource busy")                       \
    X(ERR_ABORTED, -11, "aborted")                          \
    X(ERR_DEVICE_LOST, -12, "device lost")

enum {
#define IFD_X(name, code, str) IFD_##name = code,
    IFD_STATUS_MAP(IFD_X)
#undef IFD_X
};

const char *ifd_status_str(int status);

#endif
