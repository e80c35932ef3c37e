/* backend_cuda.c — the C doors of the CUDA backend (src/backend/cuda/cuda_backend.cu),
 * which is built twice: for a GPU (ifd_cu_*, when nvcc is found) and under the SIMT
 * emulation (ifd_emu_*, when CUDA's headers are). */
#include "backend.h"

#ifdef INFERD_HAVE_CUDA_BACKEND
#include <stdio.h>

#include "../util/common.h"

#define IFD_DOORS(p)                                                                          \
    int p##backend_create(backend **out, const model *m, const backend_config *cfg, char *err, \
                          size_t err_bytes);                                                   \
    int p##device_count(void);                                                                 \
    void p##device_name(char *buf, size_t cap);                                                \
    int p##kv_budget(const model *m, const backend_config *cfg, int64_t *kv_bytes, char *err,  \
                     size_t err_bytes);                                                        \
    int64_t p##graph_replays(const backend *b);                                                \
    int p##kv_access(backend *b, float *host, size_t bytes, int upload);
#ifdef INFERD_HAVE_EMU
IFD_DOORS(ifd_emu_)
#endif
#ifdef INFERD_HAVE_CUDA
IFD_DOORS(ifd_cu_)
#endif

static int no_build(int emulated, char *err, size_t err_bytes) {
    return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED, "this build has no %s",
                    emulated ? "SIMT emulation of the CUDA backend (CUDA headers were not found)"
                             : "CUDA backend for a GPU (nvcc was not found at build time)");
}

int backend_cuda_create(backend **out, const model *m, const backend_config *cfg, int emulated,
                        char *err, size_t err_bytes) {
    *out = NULL;
    if (emulated) {
#ifdef INFERD_HAVE_EMU
        return ifd_emu_backend_create(out, m, cfg, err, err_bytes);
#endif
    } else {
#ifdef INFERD_HAVE_CUDA
        return ifd_cu_backend_create(out, m, cfg, err, err_bytes);
#endif
    }
    return no_build(emulated, err, err_bytes);
}

int backend_cuda_device_count(void) {
#ifdef INFERD_HAVE_CUDA
    return ifd_cu_device_count();
#else
    return 0;
#endif
}

void backend_cuda_device_name(int emulated, char *buf, size_t cap) {
    if (!cap) return;
    snprintf(buf, cap, "(none)");
    if (emulated) {
#ifdef INFERD_HAVE_EMU
        ifd_emu_device_name(buf, cap);
#endif
    } else {
#ifdef INFERD_HAVE_CUDA
        ifd_cu_device_name(buf, cap);
#endif
    }
}

int backend_cuda_kv_budget(const model *m, const backend_config *cfg, int emulated,
                           int64_t *kv_bytes, char *err, size_t err_bytes) {
    *kv_bytes = 0;
    if (emulated) {
#ifdef INFERD_HAVE_EMU
        return ifd_emu_kv_budget(m, cfg, kv_bytes, err, err_bytes);
#endif
    } else {
#ifdef INFERD_HAVE_CUDA
        return ifd_cu_kv_budget(m, cfg, kv_bytes, err, err_bytes);
#endif
    }
    return no_build(emulated, err, err_bytes);
}

/* Each build's door answers for its own backends only (-1 / IFD_ERR_INVALID otherwise). */
int64_t backend_cuda_graph_replays(const backend *b) {
    int64_t n = -1;
#ifdef INFERD_HAVE_EMU
    if (n < 0) n = ifd_emu_graph_replays(b);
#endif
#ifdef INFERD_HAVE_CUDA
    if (n < 0) n = ifd_cu_graph_replays(b);
#endif
    (void)b;
    return n;
}

int backend_cuda_kv_access(backend *b, float *host, size_t bytes, int upload) {
    int rc = IFD_ERR_INVALID;
#ifdef INFERD_HAVE_EMU
    if (rc == IFD_ERR_INVALID) rc = ifd_emu_kv_access(b, host, bytes, upload);
#endif
#ifdef INFERD_HAVE_CUDA
    if (rc == IFD_ERR_INVALID) rc = ifd_cu_kv_access(b, host, bytes, upload);
#endif
    (void)b, (void)host, (void)bytes, (void)upload;
    return rc;
}
#endif
