/* gguf.h — a hardened reader for GGUF v2/v3 files.
 *
 * gguf_open() maps the file read-only and parses the header, every metadata value
 * (all types, arrays nested to any depth up to a fixed limit) and every tensor info.
 * Every count, size and offset is checked against the file size before use; a corrupt
 * or hostile file yields IFD_ERR_FORMAT/IFD_ERR_UNSUPPORTED with a message naming the
 * problem, never a crash or an over-read.
 *
 * Strings point into the mapping and are NOT NUL-terminated (use gguf_str_eq or copy).
 * Scalars of arrays are read with gguf_arr_* accessors (the data may be unaligned).
 * A gguf_file is immutable after open: safe to read from any thread. */
#ifndef INFERD_GGUF_H
#define INFERD_GGUF_H
#include "../util/layer/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ggml_types.h"

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT_ = 13,
} gguf_type;

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_ARRAY_DEPTH 8
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_str {
    uint64_t n;    /* bytes */
    const char *s; /* into the mapping; not NUL-terminated */
} gguf_str;

struct gguf_value;

typedef struct gguf_array {
    gguf_type type;            /* element type */
    uint64_t n;                /* element count */
    const uint8_t *data;       /* fixed-size element types: n * size bytes in the mapping */
    gguf_str *strs;            /* type == STRING: n entries (owned by the gguf_file) */
    struct gguf_value *arrs;   /* type == ARRAY: n nested values (owned) */
} gguf_array;

typedef struct gguf_value {
    gguf_type type;
    union {
        uint64_t u64; /* all unsigned integer types, widened */
        int64_t i64;  /* all signed integer types, widened */
        double f64;   /* FLOAT32 and FLOAT64, widened */
        bool b;
        gguf_str str;
        gguf_array arr;
    } v;
} gguf_value;

typedef struct gguf_kv {
    gguf_str key;
    gguf_value val;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims = 1 */
    ggml_type type;
    uint64_t offset;  /* from the start of the data section */
    uint64_t n_bytes; /* computed from type and shape, checked against the file */
    const void *data; /* into the mapping */
} gguf_tensor;

typedef struct gguf_file {
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset; /* file offset of the tensor data section */
    /* private */
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when we own an mmap */
    size_t map_bytes;
} gguf_file;

/* Open and validate a file. On failure *f is left closed (safe to gguf_close) and
 * err (if non-NULL) holds one line naming the problem. */
int gguf_open(gguf_file *f, const char *path, char *err, size_t err_bytes);
/* Same over a caller-owned buffer that must outlive f (used by the fuzzer/tests). */
int gguf_open_memory(gguf_file *f, const void *data, size_t n, char *err, size_t err_bytes);
void gguf_close(gguf_file *f); /* accepts a zeroed or half-built struct */

bool gguf_str_eq(gguf_str a, const char *b);
const char *gguf_type_name(gguf_type t);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: false if the key is missing or its value does not convert (integers
 * must fit the destination; floats accept any numeric type). */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Copy a string value into buf (NUL-terminated, truncated to cap-1). */
bool gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t cap);
/* Array value with the given element type (any elem type if elem == GGUF_TYPE_COUNT_). */
const gguf_array *gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem);

/* Element accessors for fixed-size arrays (any integer / float element type). */
int64_t gguf_arr_i64(const gguf_array *a, uint64_t i);
double gguf_arr_f64(const gguf_array *a, uint64_t i);

/* inferd's own tensor layouts (IFD_TYPE_* in ggml_types.h) are not ggml types: a file
 * may name them only when it declares them with this key (uint32, the layout version
 * of quant.h). The model loader refuses an IFD_TYPE_* tensor of a file without it. */
#define GGUF_KEY_IFD_LAYOUTS "inferd.quantization.layout_version"
#define GGUF_IFD_LAYOUT_VERSION 1
bool gguf_declares_ifd_layouts(const gguf_file *f);

/* ---- the writer (gguf_write.c) -------------------------------------------------------- */

/* A tensor to write: its data holds the bytes its type and shape call for (the writer
 * computes the size from ggml_types.h). */
typedef struct gguf_wtensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    ggml_type type;
    const void *data;
} gguf_wtensor;

/* Write a GGUF v3 file: the kvs in order (values as gguf_open reads them: scalars keep
 * their width from val.type; fixed-size arrays write their data bytes; string and
 * nested arrays their entries), then the tensor infos in order, then the data, each
 * tensor at a multiple of alignment (a power of two; a general.alignment kv, if any,
 * must say the same), the file ending with the last tensor's bytes. A file read by
 * gguf_open and written back with all its kvs and tensors comes out byte for byte the
 * same when it was laid out this way. The file appears at path only when complete (written to
 * path.tmp, then renamed). IFD_ERR_IO with errno's text when it cannot be written,
 * IFD_ERR_INVALID for a tensor whose shape does not fit its type. */
int gguf_write(const char *path, const gguf_kv *kv, size_t n_kv, const gguf_wtensor *t,
               size_t n_t, uint64_t alignment, char *err, size_t err_bytes);

#endif
