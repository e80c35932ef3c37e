/* backend.c — the backend factory and the per-kind memory queries: picks the backend
 * for --device (auto: CUDA when a device is present, else CPU), logs the choice and
 * the device, and answers the KV sizing questions (bytes per block, the pool budget)
 * for a kind, so the engine never reads /proc/meminfo or asks a driver itself.
 *
 * The CUDA backend (src/backend/cuda/) is called only where this build has it
 * (INFERD_HAVE_CUDA_BACKEND); elsewhere CUDA and EMU are refused with a message.
 * Called once at engine start, on the creating thread. */
#include <stdio.h>
#include <string.h>

#include "../util/buf.h"
#include "../util/common.h"
#include "../util/log.h"
#include "backend.h"

const char *backend_kind_name(backend_kind kind) {
    switch (kind) {
    case BACKEND_AUTO: return "auto";
    case BACKEND_CPU: return "cpu";
    case BACKEND_CUDA: return "cuda";
    case BACKEND_EMU: return "emu";
    }
    return "?";
}

static int cuda_device_count(void) {
#ifdef INFERD_HAVE_CUDA_BACKEND
    return backend_cuda_device_count();
#else
    return 0;
#endif
}

backend_kind backend_resolve_kind(backend_kind kind) {
    if (kind != BACKEND_AUTO) return kind;
    return cuda_device_count() > 0 ? BACKEND_CUDA : BACKEND_CPU;
}

#ifndef INFERD_HAVE_CUDA_BACKEND
static int no_cuda(backend_kind kind, char *err, size_t err_bytes) {
    return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED,
                    "--device %s: this build has no CUDA backend", backend_kind_name(kind));
}
#endif

int backend_create(backend **out, backend_kind kind, const model *m, const backend_config *cfg,
                   char *err, size_t err_bytes) {
    *out = NULL;
    const backend_kind k = backend_resolve_kind(kind);
    char device[256] = "";
    int rc;
    if (cfg->observe && k != BACKEND_CPU)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "backend: an observer needs the CPU backend");
    switch (k) {
    case BACKEND_CPU:
        rc = backend_cpu_create(out, m, cfg, err, err_bytes);
        snprintf(device, sizeof device, "host CPU (%s kernels)", cfg->reference ? "reference" : "fast");
        break;
    case BACKEND_CUDA:
    case BACKEND_EMU:
#ifdef INFERD_HAVE_CUDA_BACKEND
        rc = backend_cuda_create(out, m, cfg, k == BACKEND_EMU, err, err_bytes);
        backend_cuda_device_name(k == BACKEND_EMU, device, sizeof device);
#else
        rc = no_cuda(k, err, err_bytes);
#endif
        break;
    default:
        rc = ifd_errf(err, err_bytes, IFD_ERR_INVALID, "backend: unknown kind %d", (int)kind);
    }
    if (rc) return rc;
    sbuf f = {0};
    sbuf_printf(&f, "\"backend\":\"%s\",\"requested\":\"%s\",\"device_name\":",
                backend_kind_name(k), backend_kind_name(kind));
    sbuf_json_str(&f, device, strlen(device));
    if (!f.oom) slog_fields("info", "backend", sbuf_cstr(&f));
    sbuf_free(&f);
    return IFD_OK;
}

size_t backend_kv_block_bytes(backend_kind kind, const model *m, int32_t block_size,
                              backend_kv_dtype dtype) {
    /* every backend stores K and V as [slot][n_kv_heads][head_dim] of dtype today */
    (void)kind;
    (void)dtype;
    const size_t elem = sizeof(float); /* BACKEND_KV_F32, the only dtype so far */
    return (size_t)2 * m->hp.n_layers * (size_t)block_size * m->hp.n_kv_heads * m->hp.head_dim *
           elem;
}

int backend_kv_budget(backend_kind kind, const model *m, const backend_config *cfg,
                      int64_t *kv_bytes, char *err, size_t err_bytes) {
    *kv_bytes = 0;
    switch (backend_resolve_kind(kind)) {
    case BACKEND_CPU: {
        const double frac = cfg->kv_cache_fraction > 0 && cfg->kv_cache_fraction <= 1
                                ? cfg->kv_cache_fraction
                                : 0.25;
        *kv_bytes = (int64_t)(frac * (double)backend_cpu_mem_available());
        return IFD_OK;
    }
    case BACKEND_CUDA:
    case BACKEND_EMU:
#ifdef INFERD_HAVE_CUDA_BACKEND
        return backend_cuda_kv_budget(m, cfg, backend_resolve_kind(kind) == BACKEND_EMU, kv_bytes,
                                      err, err_bytes);
#else
        return no_cuda(backend_resolve_kind(kind), err, err_bytes);
#endif
    default:
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "backend: unknown kind %d", (int)kind);
    }
}
