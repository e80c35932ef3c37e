/* common.c — status names, error formatting, clock, whole-file reads. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

const char *ifd_status_str(int status) {
    switch (status) {
#define IFD_X(name, code, str) \
    case code:                 \
        return str;
        IFD_STATUS_MAP(IFD_X)
#undef IFD_X
    }
    return "unknown error";
}

int ifd_errf(char *err, size_t err_bytes, int code, const char *fmt, ...) {
    if (err && err_bytes) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_bytes, fmt, ap);
        va_end(ap);
    }
    return code;
}

double ifd_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ifd_read_file(const char *path, char **out, size_t *out_bytes, char *err, size_t err_bytes) {
    *out = NULL;
    *out_bytes = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return ifd_errf(err, err_bytes, IFD_ERR_IO, "%s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(fp);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n == cap) {
            size_t ncap = cap * 2;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                fclose(fp);
                return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        return ifd_errf(err, err_bytes, IFD_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    *out_bytes = n;
    return IFD_OK;
}
