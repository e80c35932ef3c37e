/* gguf.c — the hardened GGUF v2/v3 reader declared in gguf.h.
 *
 * What it does: maps a file (or takes a caller buffer), parses the header, every
 * metadata value and every tensor info, and checks each count, length, shape and
 * offset against the bytes that are actually there before using or allocating for it.
 * Allocation is bounded by a small multiple of the file size whatever the file says.
 * What it does not: interpret metadata (arch.c), convert or copy tensor data
 * (weights.c), or support big-endian files or GGUF v1.
 * Threads: open/close on one thread; a parsed gguf_file is read-only and shareable. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/common.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian files with memcpy: a little-endian host is required"
#endif

#define GGUF_NAME_SHOW 64 /* bytes of a key/name quoted in an error message */

/* Bytes of one element of a fixed-size type; 0 for STRING/ARRAY/unknown. */
static size_t type_bytes(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static bool type_is_unsigned(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}
static bool type_is_signed(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}
static bool type_is_float(gguf_type t) {
    return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

const char *gguf_type_name(gguf_type t) {
    static const char *const NAMES[GGUF_TYPE_COUNT_] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < GGUF_TYPE_COUNT_ ? NAMES[t] : "unknown";
}

/* Quote file bytes for a one-line message: at most GGUF_NAME_SHOW bytes, control
 * bytes shown as '?', "..." when cut. buf needs GGUF_NAME_SHOW + 4 bytes. */
static const char *show(char *buf, gguf_str s) {
    size_t n = s.n < GGUF_NAME_SHOW ? (size_t)s.n : GGUF_NAME_SHOW;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.s[i];
        buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (s.n > n) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = 0;
    return buf;
}

/* ---- the bounded reader ------------------------------------------------------------ */

typedef struct rd {
    const uint8_t *p;
    size_t n, off;
    char *err;
    size_t err_bytes;
    char ctx[GGUF_NAME_SHOW + 64]; /* what is being read: "tensor info 3", "key 'x'" */
} rd;

#define RD_FAIL(r, code, ...) ifd_errf((r)->err, (r)->err_bytes, (code), __VA_ARGS__)

static size_t rd_left(const rd *r) { return r->n - r->off; }

static int rd_take(rd *r, size_t n, const char *what, const uint8_t **out) {
    if (rd_left(r) < n)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: truncated file reading %s (%s) at offset %zu",
                       r->ctx, what, r->off);
    *out = r->p + r->off;
    r->off += n;
    return IFD_OK;
}

static int rd_u32(rd *r, const char *what, uint32_t *v) {
    const uint8_t *q = NULL;
    int rc = rd_take(r, 4, what, &q);
    if (rc == IFD_OK) memcpy(v, q, 4);
    return rc;
}

static int rd_u64(rd *r, const char *what, uint64_t *v) {
    const uint8_t *q = NULL;
    int rc = rd_take(r, 8, what, &q);
    if (rc == IFD_OK) memcpy(v, q, 8);
    return rc;
}

static int rd_str(rd *r, const char *what, gguf_str *s) {
    uint64_t n;
    size_t at = r->off;
    int rc = rd_u64(r, what, &n);
    if (rc) return rc;
    if (n > rd_left(r))
        return RD_FAIL(r, IFD_ERR_FORMAT,
                       "gguf: string length %llu reading %s (%s) at offset %zu exceeds file size",
                       (unsigned long long)n, r->ctx, what, at);
    s->n = n;
    s->s = (const char *)r->p + r->off;
    r->off += (size_t)n;
    return IFD_OK;
}

/* ---- metadata values ---------------------------------------------------------------- */

static void value_free(gguf_value *v) {
    if (v->type != GGUF_TYPE_ARRAY) return;
    gguf_array *a = &v->v.arr;
    free(a->strs);
    if (a->arrs)
        for (uint64_t i = 0; i < a->n; i++) value_free(&a->arrs[i]);
    free(a->arrs);
    memset(a, 0, sizeof(*a));
}

/* Widen one element of a fixed-size type; q may be unaligned. */
static gguf_value decode(gguf_type t, const uint8_t *q) {
    gguf_value v = {.type = t};
    switch (t) {
    case GGUF_TYPE_UINT8: v.v.u64 = q[0]; break;
    case GGUF_TYPE_INT8: v.v.i64 = (int8_t)q[0]; break;
    case GGUF_TYPE_BOOL: v.v.b = q[0] != 0; break;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, q, 2); v.v.u64 = x; break; }
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, q, 2); v.v.i64 = x; break; }
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, q, 4); v.v.u64 = x; break; }
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, q, 4); v.v.i64 = x; break; }
    case GGUF_TYPE_FLOAT32: { float x; memcpy(&x, q, 4); v.v.f64 = x; break; }
    case GGUF_TYPE_UINT64: memcpy(&v.v.u64, q, 8); break;
    case GGUF_TYPE_INT64: memcpy(&v.v.i64, q, 8); break;
    case GGUF_TYPE_FLOAT64: memcpy(&v.v.f64, q, 8); break;
    default: IFD_ASSERT(!"decode: not a fixed-size type");
    }
    return v;
}

/* Numeric conversions of a widened value: integers saturate, floats truncate toward
 * zero and saturate (NaN -> 0), bools are 0/1, non-numeric types 0. */
static int64_t value_i64(const gguf_value *v) {
    if (type_is_signed(v->type)) return v->v.i64;
    if (type_is_unsigned(v->type)) return v->v.u64 > INT64_MAX ? INT64_MAX : (int64_t)v->v.u64;
    if (v->type == GGUF_TYPE_BOOL) return v->v.b;
    if (!type_is_float(v->type) || isnan(v->v.f64)) return 0;
    if (v->v.f64 >= 9223372036854775807.0) return INT64_MAX;
    if (v->v.f64 <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v->v.f64;
}

static double value_f64(const gguf_value *v) {
    if (type_is_float(v->type)) return v->v.f64;
    if (type_is_signed(v->type)) return (double)v->v.i64;
    if (type_is_unsigned(v->type)) return (double)v->v.u64;
    if (v->type == GGUF_TYPE_BOOL) return v->v.b;
    return 0;
}

static int read_scalar(rd *r, gguf_type t, gguf_value *out) {
    const uint8_t *q = NULL;
    int rc = rd_take(r, type_bytes(t), "value", &q);
    if (rc) return rc;
    if (t == GGUF_TYPE_BOOL && q[0] > 1)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: bool value %u for %s is not 0 or 1", q[0],
                       r->ctx);
    *out = decode(t, q);
    return IFD_OK;
}

static int read_value(rd *r, uint32_t type, gguf_value *out, int depth);

/* The body of an ARRAY value: element type, count, elements. depth counts the arrays
 * enclosing this one plus one. out is freeable (value_free) at every failure. */
static int read_array(rd *r, gguf_value *out, int depth) {
    uint32_t et;
    uint64_t n;
    int rc;
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: arrays nested deeper than %d for %s",
                       GGUF_MAX_ARRAY_DEPTH, r->ctx);
    if ((rc = rd_u32(r, "array type", &et)) || (rc = rd_u64(r, "array length", &n))) return rc;
    if (et >= GGUF_TYPE_COUNT_)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: unknown array element type %u for %s", et,
                       r->ctx);
    /* Bound the count by the bytes left before allocating: a string takes at least
     * its 8-byte length, a nested array its 4-byte type and 8-byte count. */
    size_t min = type_bytes(et) ? type_bytes(et) : et == GGUF_TYPE_STRING ? 8 : 12;
    if (n > rd_left(r) / min)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: array length %llu for %s exceeds file size",
                       (unsigned long long)n, r->ctx);
    gguf_array *a = &out->v.arr;
    memset(a, 0, sizeof(*a));
    out->type = GGUF_TYPE_ARRAY;
    a->type = (gguf_type)et;
    if (type_bytes(a->type)) {
        a->data = r->p + r->off;
        a->n = n;
        r->off += (size_t)n * min;
        if (a->type == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (a->data[i] > 1)
                    return RD_FAIL(r, IFD_ERR_FORMAT,
                                   "gguf: bool value %u at index %llu for %s is not 0 or 1",
                                   a->data[i], (unsigned long long)i, r->ctx);
        return IFD_OK;
    }
    if (n == 0) return IFD_OK;
    if (a->type == GGUF_TYPE_STRING) {
        if (!(a->strs = calloc((size_t)n, sizeof(gguf_str)))) goto nomem;
        a->n = n;
        for (uint64_t i = 0; i < n; i++)
            if ((rc = rd_str(r, "array string", &a->strs[i]))) return rc;
        return IFD_OK;
    }
    if (!(a->arrs = calloc((size_t)n, sizeof(gguf_value)))) goto nomem;
    a->n = n;
    for (uint64_t i = 0; i < n; i++)
        if ((rc = read_value(r, GGUF_TYPE_ARRAY, &a->arrs[i], depth))) return rc;
    return IFD_OK;
nomem:
    return RD_FAIL(r, IFD_ERR_NOMEM, "gguf: out of memory for %llu-element array for %s",
                   (unsigned long long)n, r->ctx);
}

static int read_value(rd *r, uint32_t type, gguf_value *out, int depth) {
    if (type >= GGUF_TYPE_COUNT_)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: unknown value type %u for %s", type, r->ctx);
    if (type == GGUF_TYPE_ARRAY) return read_array(r, out, depth + 1);
    if (type == GGUF_TYPE_STRING) {
        int rc = rd_str(r, "value", &out->v.str);
        if (rc == IFD_OK) out->type = GGUF_TYPE_STRING;
        return rc;
    }
    return read_scalar(r, (gguf_type)type, out);
}

/* ---- uniqueness of keys and tensor names -------------------------------------------- */

static int str_cmp(const void *pa, const void *pb) {
    const gguf_str *a = pa, *b = pb;
    size_t n = (size_t)(a->n < b->n ? a->n : b->n);
    int c = n ? memcmp(a->s, b->s, n) : 0;
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

_Static_assert(offsetof(gguf_kv, key) == 0 && offsetof(gguf_tensor, name) == 0,
               "check_unique reads the name at the start of each item");

/* Sort a copy of the names (O(n log n): a hostile file may hold millions). */
static int check_unique(rd *r, const void *items, size_t n, size_t stride, const char *what) {
    if (n < 2) return IFD_OK;
    gguf_str *v = malloc(n * sizeof(*v));
    if (!v) return RD_FAIL(r, IFD_ERR_NOMEM, "gguf: out of memory checking %s names", what);
    for (size_t i = 0; i < n; i++) memcpy(&v[i], (const char *)items + i * stride, sizeof(*v));
    qsort(v, n, sizeof(*v), str_cmp);
    int rc = IFD_OK;
    for (size_t i = 1; i < n && rc == IFD_OK; i++) {
        if (str_cmp(&v[i - 1], &v[i]) == 0) {
            char b[GGUF_NAME_SHOW + 4];
            rc = RD_FAIL(r, IFD_ERR_FORMAT, "gguf: duplicate %s '%s'", what, show(b, v[i]));
        }
    }
    free(v);
    return rc;
}

/* ---- tensors -------------------------------------------------------------------------- */

static int read_tensor_info(rd *r, gguf_tensor *t) {
    char b[GGUF_NAME_SHOW + 4];
    uint32_t type;
    int rc;
    if ((rc = rd_str(r, "name", &t->name)) || (rc = rd_u32(r, "n_dims", &t->n_dims))) return rc;
    if (t->n_dims > GGUF_MAX_DIMS)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: tensor '%s' has %u dimensions (max %d)",
                       show(b, t->name), t->n_dims, GGUF_MAX_DIMS);
    for (int j = 0; j < GGUF_MAX_DIMS; j++) t->ne[j] = 1;
    for (uint32_t j = 0; j < t->n_dims; j++)
        if ((rc = rd_u64(r, "ne", (uint64_t *)&t->ne[j]))) return rc;
    if ((rc = rd_u32(r, "type", &type)) || (rc = rd_u64(r, "offset", &t->offset))) return rc;

    /* Shape: every dim >= 0 and the product of the dims (zeros counted as 1, so a zero
     * dim cannot hide absurd others) fits int64. */
    uint64_t prod = 1;
    for (int j = 0; j < GGUF_MAX_DIMS; j++) {
        if (t->ne[j] < 0)
            return RD_FAIL(r, IFD_ERR_FORMAT,
                           "gguf: tensor '%s' has negative dimension ne[%d] = %lld",
                           show(b, t->name), j, (long long)t->ne[j]);
        if (__builtin_mul_overflow(prod, t->ne[j] ? (uint64_t)t->ne[j] : 1, &prod) ||
            prod > INT64_MAX)
            return RD_FAIL(r, IFD_ERR_FORMAT,
                           "gguf: tensor '%s' shape [%lld, %lld, %lld, %lld] overflows",
                           show(b, t->name), (long long)t->ne[0], (long long)t->ne[1],
                           (long long)t->ne[2], (long long)t->ne[3]);
    }
    const ggml_type_info *ti = ggml_type_get(type);
    if (!ti)
        return RD_FAIL(r, IFD_ERR_UNSUPPORTED, "gguf: unknown tensor type %u for tensor '%s'",
                       type, show(b, t->name));
    t->type = (ggml_type)type;
    if (t->ne[0] % ti->block_size != 0)
        return RD_FAIL(r, IFD_ERR_FORMAT,
                       "gguf: tensor '%s' row length %lld is not a multiple of the %s block "
                       "size %u",
                       show(b, t->name), (long long)t->ne[0], ti->name, ti->block_size);
    size_t nb = (size_t)t->ne[0] / ti->block_size;
    bool ok = ifd_mul_ok(nb, ti->type_bytes, &nb);
    for (int j = 1; j < GGUF_MAX_DIMS && ok; j++) ok = ifd_mul_ok(nb, (size_t)t->ne[j], &nb);
    if (!ok)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: tensor '%s' byte size overflows",
                       show(b, t->name));
    t->n_bytes = nb;
    return IFD_OK;
}

/* Place each tensor in the data section: aligned, wholly inside the file. */
static int place_tensor(rd *r, const gguf_file *f, gguf_tensor *t) {
    char b[GGUF_NAME_SHOW + 4];
    if (t->offset % f->alignment != 0)
        return RD_FAIL(r, IFD_ERR_FORMAT,
                       "gguf: tensor '%s' offset %llu is not aligned to %llu", show(b, t->name),
                       (unsigned long long)t->offset, (unsigned long long)f->alignment);
    size_t start, end;
    if (!ifd_add_ok(f->data_offset, t->offset, &start) || start > f->size)
        return RD_FAIL(r, IFD_ERR_FORMAT,
                       "gguf: tensor '%s' offset %llu lies past end of file (data section at "
                       "%zu, size %zu)",
                       show(b, t->name), (unsigned long long)t->offset, f->data_offset, f->size);
    if (!ifd_add_ok(start, t->n_bytes, &end) || end > f->size)
        return RD_FAIL(r, IFD_ERR_FORMAT,
                       "gguf: tensor '%s' data [%zu, %zu+%llu) lies past end of file (size %zu)",
                       show(b, t->name), start, start, (unsigned long long)t->n_bytes, f->size);
    t->data = f->base + start;
    return IFD_OK;
}

/* ---- the file -------------------------------------------------------------------------- */

static int read_alignment(rd *r, gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return IFD_OK;
    if (!type_is_unsigned(kv->val.type))
        return RD_FAIL(r, IFD_ERR_FORMAT,
                       "gguf: general.alignment has type %s, expected an unsigned integer",
                       gguf_type_name(kv->val.type));
    uint64_t a = kv->val.v.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return RD_FAIL(r, IFD_ERR_FORMAT, "gguf: alignment %llu is not a power of two",
                       (unsigned long long)a);
    f->alignment = a;
    return IFD_OK;
}

static int parse(gguf_file *f, char *err, size_t err_bytes) {
    rd r = {.p = f->base, .n = f->size, .err = err, .err_bytes = err_bytes, .ctx = "header"};
    const uint8_t *magic = NULL;
    uint32_t ver;
    uint64_t n_tensors, n_kv;
    int rc;
    char b[GGUF_NAME_SHOW + 4];

    if ((rc = rd_take(&r, 4, "magic", &magic))) return rc;
    if (memcmp(magic, "GGUF", 4) != 0)
        return RD_FAIL(&r, IFD_ERR_FORMAT, "gguf: bad magic (not a GGUF file)");
    if ((rc = rd_u32(&r, "version", &ver))) return rc;
    if (ver != 2 && ver != 3) {
        uint32_t swapped = __builtin_bswap32(ver);
        return RD_FAIL(&r, IFD_ERR_UNSUPPORTED,
                       "gguf: version %u is not supported (only 2 and 3%s)", ver,
                       swapped == 2 || swapped == 3 ? "; big-endian file?" : "");
    }
    f->version = ver;
    if ((rc = rd_u64(&r, "tensor count", &n_tensors)) || (rc = rd_u64(&r, "kv count", &n_kv)))
        return rc;
    /* Smallest encodings: a kv is an 8-byte key length, 1 key byte, a 4-byte type and
     * a 1-byte value; a tensor info an 8-byte name length, 4-byte n_dims, 4-byte type
     * and 8-byte offset. */
    if (n_kv > rd_left(&r) / 14)
        return RD_FAIL(&r, IFD_ERR_FORMAT, "gguf: kv count %llu exceeds file size",
                       (unsigned long long)n_kv);
    if (n_tensors > rd_left(&r) / 24)
        return RD_FAIL(&r, IFD_ERR_FORMAT, "gguf: tensor count %llu exceeds file size",
                       (unsigned long long)n_tensors);

    if (n_kv && !(f->kv = calloc((size_t)n_kv, sizeof(gguf_kv)))) goto nomem;
    f->n_kv = n_kv;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        uint32_t type;
        snprintf(r.ctx, sizeof(r.ctx), "kv %llu", (unsigned long long)i);
        if ((rc = rd_str(&r, "key", &kv->key))) return rc;
        if (kv->key.n == 0)
            return RD_FAIL(&r, IFD_ERR_FORMAT, "gguf: kv %llu has an empty key",
                           (unsigned long long)i);
        snprintf(r.ctx, sizeof(r.ctx), "key '%s'", show(b, kv->key));
        if ((rc = rd_u32(&r, "value type", &type))) return rc;
        if ((rc = read_value(&r, type, &kv->val, 0))) return rc;
    }
    if ((rc = check_unique(&r, f->kv, (size_t)n_kv, sizeof(gguf_kv), "key"))) return rc;
    if ((rc = read_alignment(&r, f))) return rc;

    if (n_tensors && !(f->tensors = calloc((size_t)n_tensors, sizeof(gguf_tensor)))) goto nomem;
    f->n_tensors = n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++) {
        snprintf(r.ctx, sizeof(r.ctx), "tensor info %llu", (unsigned long long)i);
        if ((rc = read_tensor_info(&r, &f->tensors[i]))) return rc;
    }
    rc = check_unique(&r, f->tensors, (size_t)n_tensors, sizeof(gguf_tensor), "tensor name");
    if (rc) return rc;

    /* The data section starts at the next multiple of the alignment; a file without
     * tensors may end before it (vocab-only files do). */
    size_t pad = (size_t)((f->alignment - r.off % f->alignment) % f->alignment);
    if (!ifd_add_ok(r.off, pad, &f->data_offset))
        return RD_FAIL(&r, IFD_ERR_FORMAT, "gguf: alignment %llu overflows the data offset",
                       (unsigned long long)f->alignment);
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((rc = place_tensor(&r, f, &f->tensors[i]))) return rc;
    return IFD_OK;
nomem:
    return RD_FAIL(&r, IFD_ERR_NOMEM, "gguf: out of memory for the kv/tensor tables");
}

int gguf_open_memory(gguf_file *f, const void *data, size_t n, char *err, size_t err_bytes) {
    memset(f, 0, sizeof(*f));
    if (err && err_bytes) err[0] = 0;
    f->base = data;
    f->size = n;
    int rc = parse(f, err, err_bytes);
    if (rc) gguf_close(f);
    return rc;
}

int gguf_open(gguf_file *f, const char *path, char *err, size_t err_bytes) {
    struct stat st;
    int rc;
    memset(f, 0, sizeof(*f));
    if (err && err_bytes) err[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ifd_errf(err, err_bytes, IFD_ERR_IO, "gguf: %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_IO, "gguf: %s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_IO, "gguf: %s: not a regular file", path);
        goto fail;
    }
    if (st.st_size == 0) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_FORMAT, "gguf: %s: empty file", path);
        goto fail;
    }
#if SIZE_MAX < UINT64_MAX
    if ((uint64_t)st.st_size > SIZE_MAX) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_LIMIT, "gguf: %s: file too large to map", path);
        goto fail;
    }
#endif
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_IO, "gguf: %s: mmap: %s", path, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    f->map = map;
    f->map_bytes = (size_t)st.st_size;
    f->base = map;
    f->size = (size_t)st.st_size;
    if ((rc = parse(f, err, err_bytes))) goto fail;
    return IFD_OK;
fail:
    if (fd >= 0) close(fd);
    gguf_close(f);
    return rc;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) value_free(&f->kv[i].val);
    free(f->kv);
    free(f->tensors);
    if (f->map) munmap(f->map, f->map_bytes);
    memset(f, 0, sizeof(*f));
}

/* ---- lookups and getters -------------------------------------------------------------- */

bool gguf_str_eq(gguf_str a, const char *b) {
    size_t n = strlen(b);
    return a.n == n && (n == 0 || memcmp(a.s, b, n) == 0);
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return false;
    if (type_is_unsigned(kv->val.type) && kv->val.v.u64 <= UINT32_MAX) {
        *out = (uint32_t)kv->val.v.u64;
        return true;
    }
    if (type_is_signed(kv->val.type) && kv->val.v.i64 >= 0 && kv->val.v.i64 <= UINT32_MAX) {
        *out = (uint32_t)kv->val.v.i64;
        return true;
    }
    return false;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return false;
    if (type_is_signed(kv->val.type)) {
        *out = kv->val.v.i64;
        return true;
    }
    if (type_is_unsigned(kv->val.type) && kv->val.v.u64 <= INT64_MAX) {
        *out = (int64_t)kv->val.v.u64;
        return true;
    }
    return false;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    gguf_type t = kv ? kv->val.type : GGUF_TYPE_COUNT_;
    if (!type_is_float(t) && !type_is_signed(t) && !type_is_unsigned(t)) return false;
    double d = value_f64(&kv->val);
    /* out of float range is undefined in C: make it the infinity IEEE would give */
    *out = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->val.type != GGUF_TYPE_BOOL) return false;
    *out = kv->val.v.b;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->val.type != GGUF_TYPE_STRING) return false;
    *out = kv->val.v.str;
    return true;
}

bool gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t cap) {
    gguf_str s;
    if (cap == 0 || !gguf_get_str(f, key, &s)) return false;
    size_t n = s.n < cap - 1 ? (size_t)s.n : cap - 1;
    if (n) memcpy(buf, s.s, n);
    buf[n] = 0;
    return true;
}

bool gguf_declares_ifd_layouts(const gguf_file *f) {
    uint32_t v;
    return gguf_get_u32(f, GGUF_KEY_IFD_LAYOUTS, &v) && v == GGUF_IFD_LAYOUT_VERSION;
}

const gguf_array *gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->val.type != GGUF_TYPE_ARRAY) return NULL;
    if (elem != GGUF_TYPE_COUNT_ && kv->val.v.arr.type != elem) return NULL;
    return &kv->val.v.arr;
}

/* The index comes from the caller's loop, so an out-of-range one is a bug. STRING and
 * ARRAY elements read as 0 (check a->type first). */
int64_t gguf_arr_i64(const gguf_array *a, uint64_t i) {
    IFD_ASSERT(i < a->n);
    size_t sz = type_bytes(a->type);
    if (!sz) return 0;
    gguf_value v = decode(a->type, a->data + (size_t)i * sz);
    return value_i64(&v);
}

double gguf_arr_f64(const gguf_array *a, uint64_t i) {
    IFD_ASSERT(i < a->n);
    size_t sz = type_bytes(a->type);
    if (!sz) return 0;
    gguf_value v = decode(a->type, a->data + (size_t)i * sz);
    return value_f64(&v);
}
