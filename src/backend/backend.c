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
    if ((rc = backend_kv_dtype_check(k, cfg->kv_dtype, err, err_bytes))) return rc;
    if (cfg->observe && k != BACKEND_CPU)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "backend: an observer needs the CPU backend");
    if (cfg->logits_rows < 0 || (int64_t)cfg->logits_rows > (int64_t)m->hp.n_vocab)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "backend: logits_rows %d outside 0..n_vocab %lld",
                        (int)cfg->logits_rows, (long long)m->hp.n_vocab);
    if (cfg->logits_rows && k != BACKEND_CPU)
        return ifd_errf(err, err_bytes, IFD_ERR_UNSUPPORTED,
                        "backend: a restricted lm head (logits_rows) needs the CPU backend");
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

static const char *const KV_DTYPE_NAMES[BACKEND_KV_N_DTYPES] = {"f32", "f16", "bf16", "int8",
                                                                "fp8"};

const char *backend_kv_dtype_name(backend_kv_dtype d) {
    if (d == BACKEND_KV_AUTO) return "auto";
    return d >= 0 && d < BACKEND_KV_N_DTYPES ? KV_DTYPE_NAMES[d] : "?";
}

int backend_kv_dtype_parse(const char *name, backend_kv_dtype *out, char *err, size_t err_bytes) {
    *out = BACKEND_KV_AUTO;
    if (!name || !*name || !strcmp(name, "auto")) return IFD_OK;
    for (int i = 0; i < BACKEND_KV_N_DTYPES; i++)
        if (!strcmp(name, KV_DTYPE_NAMES[i])) {
            *out = (backend_kv_dtype)i;
            return IFD_OK;
        }
    return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                    "--kv-cache-dtype '%s': not one of auto|f32|f16|bf16|int8|fp8", name);
}

backend_kv_dtype backend_kv_dtype_resolve(backend_kind kind, backend_kv_dtype d) {
    if (d != BACKEND_KV_AUTO) return d;
    return backend_resolve_kind(kind) == BACKEND_CPU ? BACKEND_KV_F16 : BACKEND_KV_BF16;
}

int backend_kv_dtype_check(backend_kind kind, backend_kv_dtype d, char *err, size_t err_bytes) {
    (void)kind; /* every backend stores every dtype */
    if (d < BACKEND_KV_AUTO || d >= BACKEND_KV_N_DTYPES)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "backend: unknown KV cache dtype %d",
                        (int)d);
    return IFD_OK;
}

size_t backend_kv_row_bytes(backend_kv_dtype d, int32_t head_dim) {
    const size_t n = (size_t)head_dim;
    switch (d) {
    case BACKEND_KV_F16:
    case BACKEND_KV_BF16: return 2 * n;
    case BACKEND_KV_INT8: return n + sizeof(float);
    case BACKEND_KV_FP8: return n;
    default: return 4 * n; /* F32 (AUTO never reaches a pool) */
    }
}

size_t backend_kv_block_bytes(backend_kind kind, const model *m, int32_t block_size,
                              backend_kv_dtype dtype) {
    /* every backend stores block_size x n_kv_heads rows per block, layer and K / V
     * (the order of the rows inside a block is the backend's) */
    const backend_kv_dtype d = backend_kv_dtype_resolve(kind, dtype);
    return (size_t)2 * m->hp.n_layers * (size_t)block_size * m->hp.n_kv_heads *
           backend_kv_row_bytes(d, (int32_t)m->hp.head_dim);
}

void backend_log_kv(backend_kind kind, const model *m, backend_kv_dtype dtype, int32_t block_size,
                    int64_t n_blocks, int64_t budget_bytes) {
    const backend_kv_dtype d = backend_kv_dtype_resolve(kind, dtype);
    const size_t per_token = backend_kv_block_bytes(kind, m, 1, d);
    sbuf f = {0};
    sbuf_printf(&f,
                "\"kv_cache_dtype\":\"%s\",\"kv_bytes_per_token\":%zu,\"kv_budget_bytes\":%lld,"
                "\"kv_blocks\":%lld,\"kv_block_size\":%d,\"kv_tokens\":%lld,"
                "\"kv_tokens_per_gib\":%lld",
                backend_kv_dtype_name(d), per_token, (long long)budget_bytes, (long long)n_blocks,
                (int)block_size, (long long)(n_blocks * block_size),
                (long long)(per_token ? ((int64_t)1 << 30) / (int64_t)per_token : 0));
    if (!f.oom) slog_fields("info", "kv cache", sbuf_cstr(&f));
    sbuf_free(&f);
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
