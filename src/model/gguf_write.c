/* gguf_write.c — the GGUF v3 writer declared in gguf.h (gguf_write).
 *
 * What it does: serializes kvs (as the reader holds them: a kv read from one file is
 * written back byte for byte) and tensors into a new file, little-endian, tensor data
 * aligned. The file is written to PATH.tmp and renamed over PATH only when every byte
 * is out, so a failed write never leaves a half file under the asked-for name.
 * What it does not: validate metadata meaning or tensor contents.
 * Threads: any; one call writes one file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../util/common.h"
#include "gguf.h"

typedef struct wr {
    FILE *fp;
    bool bad;
    int err_no; /* of the first failed write */
    uint64_t off;
} wr;

static void put(wr *w, const void *p, size_t n) {
    if (w->bad || n == 0) return;
    if (fwrite(p, 1, n, w->fp) != n) {
        w->bad = true;
        w->err_no = errno ? errno : EIO;
    }
    w->off += n;
}

static void put_u32(wr *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wr *w, uint64_t v) { put(w, &v, 8); }
static void put_str(wr *w, gguf_str s) {
    put_u64(w, s.n);
    put(w, s.s, (size_t)s.n);
}

static size_t elem_bytes(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* one scalar at its declared width (the reader widened it: narrow it back) */
static void put_scalar(wr *w, const gguf_value *v) {
    uint8_t b[8];
    switch (v->type) {
    case GGUF_TYPE_UINT8: b[0] = (uint8_t)v->v.u64; break;
    case GGUF_TYPE_INT8: b[0] = (uint8_t)(int8_t)v->v.i64; break;
    case GGUF_TYPE_BOOL: b[0] = v->v.b ? 1 : 0; break;
    case GGUF_TYPE_UINT16: { uint16_t x = (uint16_t)v->v.u64; memcpy(b, &x, 2); break; }
    case GGUF_TYPE_INT16: { int16_t x = (int16_t)v->v.i64; memcpy(b, &x, 2); break; }
    case GGUF_TYPE_UINT32: { uint32_t x = (uint32_t)v->v.u64; memcpy(b, &x, 4); break; }
    case GGUF_TYPE_INT32: { int32_t x = (int32_t)v->v.i64; memcpy(b, &x, 4); break; }
    case GGUF_TYPE_FLOAT32: { float x = (float)v->v.f64; memcpy(b, &x, 4); break; }
    case GGUF_TYPE_UINT64: memcpy(b, &v->v.u64, 8); break;
    case GGUF_TYPE_INT64: memcpy(b, &v->v.i64, 8); break;
    case GGUF_TYPE_FLOAT64: memcpy(b, &v->v.f64, 8); break;
    default: w->bad = true; return;
    }
    put(w, b, elem_bytes(v->type));
}

/* the value's body (its type word is written by the caller) */
static void put_value(wr *w, const gguf_value *v) {
    if (v->type == GGUF_TYPE_STRING) {
        put_str(w, v->v.str);
        return;
    }
    if (v->type != GGUF_TYPE_ARRAY) {
        put_scalar(w, v);
        return;
    }
    const gguf_array *a = &v->v.arr;
    put_u32(w, (uint32_t)a->type);
    put_u64(w, a->n);
    if (elem_bytes(a->type)) {
        put(w, a->data, (size_t)a->n * elem_bytes(a->type));
    } else if (a->type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < a->n; i++) put_str(w, a->strs[i]);
    } else if (a->type == GGUF_TYPE_ARRAY) {
        for (uint64_t i = 0; i < a->n; i++) put_value(w, &a->arrs[i]);
    } else {
        w->bad = true;
    }
}

static void pad_to(wr *w, uint64_t align) {
    static const uint8_t zeros[256] = {0};
    uint64_t pad = (align - w->off % align) % align;
    while (pad) {
        const size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        put(w, zeros, k);
        pad -= k;
    }
}

/* bytes of a tensor's data, or false when its shape does not fit the type */
static bool tensor_bytes(const gguf_wtensor *t, uint64_t *out) {
    const ggml_type_info *ti = ggml_type_get((uint32_t)t->type);
    if (!ti || !ti->name || t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) return false;
    if (t->ne[0] < 0 || t->ne[0] % ti->block_size) return false;
    size_t nb = (size_t)t->ne[0] / ti->block_size;
    bool ok = ifd_mul_ok(nb, ti->type_bytes, &nb);
    for (uint32_t j = 1; j < t->n_dims && ok; j++)
        ok = t->ne[j] >= 0 && ifd_mul_ok(nb, (size_t)t->ne[j], &nb);
    *out = nb;
    return ok;
}

int gguf_write(const char *path, const gguf_kv *kv, size_t n_kv, const gguf_wtensor *t,
               size_t n_t, uint64_t alignment, char *err, size_t err_bytes) {
    if (alignment == 0 || (alignment & (alignment - 1)))
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "gguf write: alignment %llu is not a power of two",
                        (unsigned long long)alignment);
    uint64_t *bytes = malloc((n_t ? n_t : 1) * sizeof *bytes);
    if (!bytes) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "gguf write: out of memory");
    for (size_t i = 0; i < n_t; i++)
        if (!tensor_bytes(&t[i], &bytes[i])) {
            free(bytes);
            return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                            "gguf write: tensor %zu has a shape its type cannot hold", i);
        }
    const size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        free(bytes);
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "gguf write: out of memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int rc = IFD_OK;
    wr w = {.fp = fopen(tmp, "wb")};
    if (!w.fp) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_IO, "%s: %s", path, strerror(errno));
        goto done;
    }
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, (uint64_t)n_t);
    put_u64(&w, (uint64_t)n_kv);
    for (size_t i = 0; i < n_kv; i++) {
        put_str(&w, kv[i].key);
        put_u32(&w, (uint32_t)kv[i].val.type);
        put_value(&w, &kv[i].val);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n_t; i++) {
        put_str(&w, t[i].name);
        put_u32(&w, t[i].n_dims);
        for (uint32_t j = 0; j < t[i].n_dims; j++) put_u64(&w, (uint64_t)t[i].ne[j]);
        put_u32(&w, (uint32_t)t[i].type);
        put_u64(&w, off);
        off = (off + bytes[i] + alignment - 1) / alignment * alignment;
    }
    pad_to(&w, alignment);
    /* the data section starts aligned, so aligning file offsets aligns tensor offsets */
    for (size_t i = 0; i < n_t && !w.bad; i++) {
        if (i) pad_to(&w, alignment); /* the file ends where the last tensor does */
        put(&w, t[i].data, (size_t)bytes[i]);
    }
    if (fclose(w.fp) != 0 && !w.bad) {
        w.bad = true;
        w.err_no = errno ? errno : EIO;
    }
    if (w.bad) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_IO, "%s: write failed: %s", path,
                      strerror(w.err_no));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_IO, "%s: %s", path, strerror(errno));
        unlink(tmp);
    }
done:
    free(tmp);
    free(bytes);
    return rc;
}
