/* test_gguf.c — the GGUF reader on files built here in memory, on a table of corrupt
 * files (each must fail with a one-line message, never crash or over-read: the
 * test_gguf_asan variant runs this same file under ASan+UBSan), and on every real GGUF
 * under ../shared/. Single-threaded. */
#include <glob.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "test_util.h"
#include "util/common.h"

/* ---- a tiny GGUF writer -------------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void w_bytes(wbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) abort();
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void w_u8(wbuf *b, uint8_t v) { w_bytes(b, &v, 1); }
static void w_u16(wbuf *b, uint16_t v) { w_bytes(b, &v, 2); }
static void w_u32(wbuf *b, uint32_t v) { w_bytes(b, &v, 4); }
static void w_u64(wbuf *b, uint64_t v) { w_bytes(b, &v, 8); }
static void w_f32(wbuf *b, float v) { w_bytes(b, &v, 4); }
static void w_f64(wbuf *b, double v) { w_bytes(b, &v, 8); }
static void w_strn(wbuf *b, const char *s, size_t n) {
    w_u64(b, n);
    w_bytes(b, s, n);
}
static void w_str(wbuf *b, const char *s) { w_strn(b, s, strlen(s)); }
static void w_key(wbuf *b, const char *key, gguf_type t) {
    w_str(b, key);
    w_u32(b, t);
}
static void w_arr_hdr(wbuf *b, gguf_type elem, uint64_t n) {
    w_u32(b, elem);
    w_u64(b, n);
}
/* The body of `levels` arrays nested in one another around a single int32. */
static void w_nested(wbuf *b, int levels) {
    if (levels == 1) {
        w_arr_hdr(b, GGUF_TYPE_INT32, 1);
        w_u32(b, 7);
        return;
    }
    w_arr_hdr(b, GGUF_TYPE_ARRAY, 1);
    w_nested(b, levels - 1);
}

static uint8_t pattern(size_t k) { return (uint8_t)(k * 31 + 7); }

/* ---- the valid file and its knobs ---------------------------------------------------- */

#define AUTO_OFFSET UINT64_MAX

typedef struct tspec {
    const char *name;
    uint32_t n_dims;
    int64_t ne[5];
    uint32_t type;
    uint64_t offset; /* AUTO_OFFSET: next aligned offset */
} tspec;

typedef struct gopts {
    uint32_t version;
    int align_kind; /* 0: no general.alignment; 'u': uint32; 's': string; 'i': int32 */
    uint64_t alignment;
    bool set_counts; /* write n_tensors/n_kv below instead of the true counts */
    uint64_t n_tensors_v, n_kv_v;
    int (*extra_kv)(wbuf *b); /* writes more kvs, returns how many */
    int n_tensors;
    tspec t[4];
} gopts;

static gopts defaults(void) {
    gopts o = {.version = 3, .n_tensors = 2};
    o.t[0] = (tspec){"w.f32", 2, {4, 5, 1, 1, 1}, GGML_TYPE_F32, AUTO_OFFSET};
    o.t[1] = (tspec){"w.q8", 2, {64, 2, 1, 1, 1}, GGML_TYPE_Q8_0, AUTO_OFFSET};
    return o;
}

/* Bytes of a tensor by the geometry table; 0 when the spec is deliberately bad. */
static uint64_t spec_bytes(const tspec *t) {
    const ggml_type_info *ti = ggml_type_get(t->type);
    if (!ti || t->n_dims > 4) return 0;
    uint64_t n = 1;
    for (uint32_t j = 0; j < t->n_dims; j++) {
        if (t->ne[j] < 0 || t->ne[j] > (1 << 20)) return 0;
        n *= (uint64_t)t->ne[j];
    }
    return n / ti->block_size * ti->type_bytes;
}

static const char *STRS[4] = {"a", "bc", "", "\xff\0z"};
static const size_t STR_LENS[4] = {1, 2, 0, 3};

/* Build a GGUF file: the header, 18 kvs (+ alignment, + extras), the tensor infos,
 * padding, and the data section filled with pattern() so that the file ends exactly at
 * the end of the last tensor. */
static wbuf build(const gopts *o) {
    wbuf b = {0};
    w_bytes(&b, "GGUF", 4);
    w_u32(&b, o->version);
    w_u64(&b, o->set_counts ? o->n_tensors_v : (uint64_t)o->n_tensors);
    size_t n_kv_at = b.n;
    w_u64(&b, 0);
    int n_kv = 0;

    w_key(&b, "general.architecture", GGUF_TYPE_STRING), w_str(&b, "llama"), n_kv++;
    w_key(&b, "t.u8", GGUF_TYPE_UINT8), w_u8(&b, 200), n_kv++;
    w_key(&b, "t.i8", GGUF_TYPE_INT8), w_u8(&b, (uint8_t)-100), n_kv++;
    w_key(&b, "t.u16", GGUF_TYPE_UINT16), w_u16(&b, 60000), n_kv++;
    w_key(&b, "t.i16", GGUF_TYPE_INT16), w_u16(&b, (uint16_t)-30000), n_kv++;
    w_key(&b, "t.u32", GGUF_TYPE_UINT32), w_u32(&b, 4000000000u), n_kv++;
    w_key(&b, "t.i32", GGUF_TYPE_INT32), w_u32(&b, (uint32_t)-2000000000), n_kv++;
    w_key(&b, "t.f32", GGUF_TYPE_FLOAT32), w_f32(&b, 1.5f), n_kv++;
    w_key(&b, "t.bool", GGUF_TYPE_BOOL), w_u8(&b, 1), n_kv++;
    w_key(&b, "t.str", GGUF_TYPE_STRING), w_str(&b, "hello"), n_kv++;
    w_key(&b, "t.u64", GGUF_TYPE_UINT64), w_u64(&b, (1ull << 40) + 5), n_kv++;
    w_key(&b, "t.i64", GGUF_TYPE_INT64), w_u64(&b, (uint64_t)-(1ll << 40)), n_kv++;
    w_key(&b, "t.f64", GGUF_TYPE_FLOAT64), w_f64(&b, 0.25), n_kv++;
    w_key(&b, "t.strs", GGUF_TYPE_ARRAY), w_arr_hdr(&b, GGUF_TYPE_STRING, 4), n_kv++;
    for (int i = 0; i < 4; i++) w_strn(&b, STRS[i], STR_LENS[i]);
    /* [[1, 2], [3], []] */
    w_key(&b, "t.nested", GGUF_TYPE_ARRAY), w_arr_hdr(&b, GGUF_TYPE_ARRAY, 3), n_kv++;
    w_arr_hdr(&b, GGUF_TYPE_INT32, 2), w_u32(&b, 1), w_u32(&b, 2);
    w_arr_hdr(&b, GGUF_TYPE_INT32, 1), w_u32(&b, 3);
    w_arr_hdr(&b, GGUF_TYPE_INT32, 0);
    w_key(&b, "t.i32s", GGUF_TYPE_ARRAY), w_arr_hdr(&b, GGUF_TYPE_INT32, 3), n_kv++;
    w_u32(&b, (uint32_t)-1), w_u32(&b, 2), w_u32(&b, 300000);
    w_key(&b, "t.f32s", GGUF_TYPE_ARRAY), w_arr_hdr(&b, GGUF_TYPE_FLOAT32, 2), n_kv++;
    w_f32(&b, 0.5f), w_f32(&b, -2.0f);
    w_key(&b, "t.bools", GGUF_TYPE_ARRAY), w_arr_hdr(&b, GGUF_TYPE_BOOL, 2), n_kv++;
    w_u8(&b, 0), w_u8(&b, 1);
    if (o->align_kind == 'u' || o->align_kind == 'i') {
        w_key(&b, "general.alignment", o->align_kind == 'u' ? GGUF_TYPE_UINT32 : GGUF_TYPE_INT32);
        w_u32(&b, (uint32_t)o->alignment);
    }
    if (o->align_kind == 's') w_key(&b, "general.alignment", GGUF_TYPE_STRING), w_str(&b, "32");
    n_kv += o->align_kind != 0;
    if (o->extra_kv) n_kv += o->extra_kv(&b);
    uint64_t n_kv_v = o->set_counts ? o->n_kv_v : (uint64_t)n_kv;
    memcpy(b.p + n_kv_at, &n_kv_v, 8);

    uint64_t align = o->align_kind == 'u' ? o->alignment : 32;
    if (align == 0 || (align & (align - 1))) align = 32;
    uint64_t next = 0, end = 0;
    for (int i = 0; i < o->n_tensors; i++) {
        const tspec *t = &o->t[i];
        uint64_t nb = spec_bytes(t);
        uint64_t off = t->offset == AUTO_OFFSET ? next : t->offset;
        w_str(&b, t->name);
        w_u32(&b, t->n_dims);
        for (uint32_t j = 0; j < t->n_dims && j < 5; j++) w_u64(&b, (uint64_t)t->ne[j]);
        w_u32(&b, t->type);
        w_u64(&b, off);
        next = (off + nb + align - 1) / align * align;
        if (off < (1 << 16) && off + nb > end) end = off + nb;
    }
    while (b.n % align) w_u8(&b, 0);
    for (uint64_t k = 0; k < end; k++) w_u8(&b, pattern(k));
    return b;
}

/* Parse a copy of exactly n bytes (so ASan sees any over-read). */
static int parse_exact(gguf_file *f, const uint8_t *p, size_t n, uint8_t **copy, char *err,
                       size_t cap) {
    *copy = malloc(n ? n : 1);
    if (!*copy) abort();
    if (n) memcpy(*copy, p, n);
    return gguf_open_memory(f, *copy, n, err, cap);
}

/* ---- valid files ------------------------------------------------------------------------ */

static void check_valid(const gguf_file *f, const uint8_t *base, uint64_t align) {
    char buf[16];
    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    gguf_str s;

    CHECK(f->n_kv == 18 + (align != 32));
    CHECK(f->alignment == align);
    CHECK(f->data_offset % align == 0);
    CHECK(gguf_get_cstr(f, "general.architecture", buf, sizeof(buf)) && !strcmp(buf, "llama"));

    CHECK(gguf_get_u32(f, "t.u8", &u32) && u32 == 200);
    CHECK(gguf_get_u32(f, "t.u16", &u32) && u32 == 60000);
    CHECK(gguf_get_u32(f, "t.u32", &u32) && u32 == 4000000000u);
    CHECK(!gguf_get_u32(f, "t.i8", &u32));  /* negative */
    CHECK(!gguf_get_u32(f, "t.u64", &u32)); /* 2^40 + 5 does not fit */
    CHECK(!gguf_get_u32(f, "t.f32", &u32)); /* not an integer */
    CHECK(!gguf_get_u32(f, "missing", &u32));
    CHECK(gguf_get_i64(f, "t.i8", &i64) && i64 == -100);
    CHECK(gguf_get_i64(f, "t.i16", &i64) && i64 == -30000);
    CHECK(gguf_get_i64(f, "t.i32", &i64) && i64 == -2000000000);
    CHECK(gguf_get_i64(f, "t.i64", &i64) && i64 == -(1ll << 40));
    CHECK(gguf_get_i64(f, "t.u64", &i64) && i64 == (1ll << 40) + 5);
    CHECK(gguf_get_f32(f, "t.f32", &f32) && f32 == 1.5f);
    CHECK(gguf_get_f32(f, "t.f64", &f32) && f32 == 0.25f);
    CHECK(gguf_get_f32(f, "t.u8", &f32) && f32 == 200.0f);
    CHECK(gguf_get_f32(f, "t.i16", &f32) && f32 == -30000.0f);
    CHECK(!gguf_get_f32(f, "t.str", &f32));
    CHECK(gguf_get_bool(f, "t.bool", &b) && b);
    CHECK(!gguf_get_bool(f, "t.u8", &b));
    CHECK(gguf_get_str(f, "t.str", &s) && gguf_str_eq(s, "hello"));
    CHECK(!gguf_get_str(f, "t.u8", &s));
    CHECK(gguf_get_cstr(f, "t.str", buf, 3) && !strcmp(buf, "he"));
    CHECK(!gguf_get_cstr(f, "t.str", buf, 0));
    CHECK(gguf_find_kv(f, "t.u8")->val.type == GGUF_TYPE_UINT8);

    const gguf_array *a = gguf_get_arr(f, "t.strs", GGUF_TYPE_STRING);
    CHECK(a && a->n == 4);
    for (int i = 0; a && i < 4; i++)
        CHECK(a->strs[i].n == STR_LENS[i] && !memcmp(a->strs[i].s, STRS[i], STR_LENS[i]));
    CHECK(!gguf_get_arr(f, "t.strs", GGUF_TYPE_INT32));
    CHECK(gguf_get_arr(f, "t.strs", GGUF_TYPE_COUNT_) == a);
    CHECK(!gguf_get_arr(f, "t.str", GGUF_TYPE_COUNT_));

    a = gguf_get_arr(f, "t.nested", GGUF_TYPE_ARRAY);
    CHECK(a && a->n == 3);
    if (a && a->n == 3) {
        const gguf_array *a0 = &a->arrs[0].v.arr, *a1 = &a->arrs[1].v.arr, *a2 = &a->arrs[2].v.arr;
        CHECK(a->arrs[0].type == GGUF_TYPE_ARRAY && a0->type == GGUF_TYPE_INT32 && a0->n == 2);
        CHECK(a0->n == 2 && gguf_arr_i64(a0, 0) == 1 && gguf_arr_i64(a0, 1) == 2);
        CHECK(a1->n == 1 && gguf_arr_i64(a1, 0) == 3);
        CHECK(a2->type == GGUF_TYPE_INT32 && a2->n == 0);
    }
    a = gguf_get_arr(f, "t.i32s", GGUF_TYPE_INT32);
    CHECK(a && a->n == 3 && gguf_arr_i64(a, 0) == -1 && gguf_arr_i64(a, 2) == 300000);
    CHECK(a && gguf_arr_f64(a, 1) == 2.0);
    a = gguf_get_arr(f, "t.f32s", GGUF_TYPE_FLOAT32);
    CHECK(a && a->n == 2 && gguf_arr_f64(a, 0) == 0.5 && gguf_arr_f64(a, 1) == -2.0);
    CHECK(a && gguf_arr_i64(a, 1) == -2);
    a = gguf_get_arr(f, "t.bools", GGUF_TYPE_BOOL);
    CHECK(a && a->n == 2 && gguf_arr_i64(a, 0) == 0 && gguf_arr_i64(a, 1) == 1);

    CHECK(f->n_tensors == 2);
    const gguf_tensor *t0 = gguf_find_tensor(f, "w.f32"), *t1 = gguf_find_tensor(f, "w.q8");
    CHECK(t0 && t1 && !gguf_find_tensor(f, "w.q"));
    if (!t0 || !t1) return;
    CHECK(t0->type == GGML_TYPE_F32 && t0->n_dims == 2 && t0->ne[0] == 4 && t0->ne[1] == 5);
    CHECK(t0->ne[2] == 1 && t0->ne[3] == 1);
    CHECK(t0->n_bytes == 80 && t0->offset == 0);
    CHECK(t1->type == GGML_TYPE_Q8_0 && t1->ne[0] == 64 && t1->ne[1] == 2);
    CHECK(t1->n_bytes == 2 * 2 * 34); /* 2 rows of 2 blocks of 34 bytes */
    CHECK(t1->offset == (80 + align - 1) / align * align);
    for (int i = 0; i < 2; i++) {
        const gguf_tensor *t = i ? t1 : t0;
        CHECK((const uint8_t *)t->data == base + f->data_offset + t->offset);
        int bad = 0;
        for (uint64_t k = 0; k < t->n_bytes; k++)
            bad += ((const uint8_t *)t->data)[k] != pattern(t->offset + k);
        CHECKF(bad == 0, "tensor %d: %d bytes differ", i, bad);
    }
}

static void test_valid_v3(void) {
    gopts o = defaults();
    wbuf b = build(&o);
    gguf_file f;
    char err[256];
    uint8_t *copy;
    int rc = parse_exact(&f, b.p, b.n, &copy, err, sizeof(err));
    CHECKF(rc == IFD_OK, "%s", err);
    if (rc == IFD_OK) {
        CHECK(f.version == 3 && f.map == NULL);
        check_valid(&f, copy, 32);
    }
    gguf_close(&f);
    CHECK(f.kv == NULL && f.n_kv == 0 && f.tensors == NULL && f.base == NULL);
    gguf_close(&f); /* twice is fine */
    free(copy);
    free(b.p);
}

static void test_valid_v2(void) {
    gopts o = defaults();
    o.version = 2;
    wbuf b = build(&o);
    gguf_file f;
    char err[256];
    uint8_t *copy;
    int rc = parse_exact(&f, b.p, b.n, &copy, err, sizeof(err));
    CHECKF(rc == IFD_OK, "%s", err);
    if (rc == IFD_OK) {
        CHECK(f.version == 2);
        check_valid(&f, copy, 32);
    }
    gguf_close(&f);
    free(copy);
    free(b.p);
}

static void test_alignment_64(void) {
    gopts o = defaults();
    o.align_kind = 'u';
    o.alignment = 64;
    wbuf b = build(&o);
    gguf_file f;
    char err[256];
    uint8_t *copy;
    int rc = parse_exact(&f, b.p, b.n, &copy, err, sizeof(err));
    CHECKF(rc == IFD_OK, "%s", err);
    if (rc == IFD_OK) {
        check_valid(&f, copy, 64);
        CHECK(f.tensors[1].offset == 128);
    }
    gguf_close(&f);
    free(copy);
    free(b.p);
}

static int kv_deep8(wbuf *b) {
    w_key(b, "deep", GGUF_TYPE_ARRAY);
    w_nested(b, GGUF_MAX_ARRAY_DEPTH);
    return 1;
}

static void test_max_depth_ok(void) {
    gopts o = defaults();
    o.extra_kv = kv_deep8;
    wbuf b = build(&o);
    gguf_file f;
    char err[256];
    uint8_t *copy;
    int rc = parse_exact(&f, b.p, b.n, &copy, err, sizeof(err));
    CHECKF(rc == IFD_OK, "%s", err);
    const gguf_array *a = rc ? NULL : gguf_get_arr(&f, "deep", GGUF_TYPE_ARRAY);
    for (int d = 1; a && d < GGUF_MAX_ARRAY_DEPTH; d++) {
        CHECK(a->n == 1 && a->arrs[0].type == GGUF_TYPE_ARRAY);
        a = a->n == 1 ? &a->arrs[0].v.arr : NULL;
    }
    CHECK(a && a->type == GGUF_TYPE_INT32 && a->n == 1 && gguf_arr_i64(a, 0) == 7);
    gguf_close(&f);
    free(copy);
    free(b.p);
}

static int kv_edges(wbuf *b) {
    w_key(b, "e.big", GGUF_TYPE_FLOAT64), w_f64(b, 1e300);
    w_key(b, "e.u64max", GGUF_TYPE_UINT64), w_u64(b, UINT64_MAX);
    w_key(b, "e.i64min", GGUF_TYPE_INT64), w_u64(b, (uint64_t)INT64_MIN);
    w_key(b, "e.u64s", GGUF_TYPE_ARRAY), w_arr_hdr(b, GGUF_TYPE_UINT64, 1), w_u64(b, UINT64_MAX);
    w_key(b, "e.f64s", GGUF_TYPE_ARRAY), w_arr_hdr(b, GGUF_TYPE_FLOAT64, 4);
    w_f64(b, 1e300), w_f64(b, NAN), w_f64(b, -1e300), w_f64(b, -3.7);
    return 5;
}

/* Conversions at the edges: nothing that does not fit is returned, floats saturate. */
static void test_getter_edges(void) {
    gopts o = defaults();
    o.extra_kv = kv_edges;
    wbuf b = build(&o);
    gguf_file f;
    char err[256];
    uint8_t *copy;
    int rc = parse_exact(&f, b.p, b.n, &copy, err, sizeof(err));
    CHECKF(rc == IFD_OK, "%s", err);
    if (rc == IFD_OK) {
        uint32_t u32;
        int64_t i64;
        float f32;
        CHECK(gguf_get_f32(&f, "e.big", &f32) && isinf(f32) && f32 > 0);
        CHECK(!gguf_get_i64(&f, "e.u64max", &i64) && !gguf_get_u32(&f, "e.u64max", &u32));
        CHECK(gguf_get_f32(&f, "e.u64max", &f32) && f32 > 1.8e19f);
        CHECK(gguf_get_i64(&f, "e.i64min", &i64) && i64 == INT64_MIN);
        CHECK(!gguf_get_u32(&f, "e.i64min", &u32));
        const gguf_array *a = gguf_get_arr(&f, "e.u64s", GGUF_TYPE_UINT64);
        CHECK(a && gguf_arr_i64(a, 0) == INT64_MAX && gguf_arr_f64(a, 0) > 1.8e19);
        a = gguf_get_arr(&f, "e.f64s", GGUF_TYPE_FLOAT64);
        CHECK(a && a->n == 4);
        if (a && a->n == 4) {
            CHECK(gguf_arr_i64(a, 0) == INT64_MAX && gguf_arr_i64(a, 1) == 0);
            CHECK(gguf_arr_i64(a, 2) == INT64_MIN && gguf_arr_i64(a, 3) == -3);
            CHECK(isnan(gguf_arr_f64(a, 1)) && gguf_arr_f64(a, 3) == -3.7);
        }
        a = gguf_get_arr(&f, "t.strs", GGUF_TYPE_STRING);
        CHECK(a && gguf_arr_i64(a, 0) == 0 && gguf_arr_f64(a, 0) == 0); /* not numeric */
    }
    gguf_close(&f);
    free(copy);
    free(b.p);
}

/* gguf_open on a real file, an empty file, a missing path and a directory. */
static void test_open_file(void) {
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    gopts o = defaults();
    wbuf b = build(&o);
    CHECK(write(fd, b.p, b.n) == (ssize_t)b.n);
    close(fd);
    gguf_file f;
    char err[256];
    int rc = gguf_open(&f, path, err, sizeof(err));
    CHECKF(rc == IFD_OK, "%s", err);
    if (rc == IFD_OK) {
        CHECK(f.map != NULL && f.size == b.n);
        check_valid(&f, f.base, 32);
    }
    gguf_close(&f);
    CHECK(f.map == NULL);

    CHECK(truncate(path, 0) == 0);
    rc = gguf_open(&f, path, err, sizeof(err));
    CHECKF(rc == IFD_ERR_FORMAT && strstr(err, "empty file"), "%d %s", rc, err);
    gguf_close(&f);
    unlink(path);

    rc = gguf_open(&f, path, err, sizeof(err));
    CHECKF(rc == IFD_ERR_IO && strstr(err, path), "%d %s", rc, err);
    rc = gguf_open(&f, "/tmp", err, sizeof(err));
    CHECKF(rc == IFD_ERR_IO && strstr(err, "not a regular file"), "%d %s", rc, err);
    rc = gguf_open(&f, path, NULL, 0); /* no error buffer */
    CHECK(rc == IFD_ERR_IO);
    free(b.p);
}

/* ---- the writer ------------------------------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    uint8_t *p = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap && !(p = realloc(p, cap = cap ? 2 * cap : 4096))) abort();
        size_t k = fread(p + *n, 1, cap - *n, fp);
        if (!k) break;
        *n += k;
    }
    fclose(fp);
    return p;
}

/* Read a file, write back all its kvs and tensors: the same bytes (every value type,
 * nested arrays, strings with NULs, both alignments). */
static void test_write_roundtrip(void) {
    for (int pass = 0; pass < 2; pass++) {
        gopts o = defaults();
        if (pass) o.align_kind = 'u', o.alignment = 64;
        o.n_tensors = 3;
        o.t[2] = (tspec){"w.i4", 2, {128, 3, 1, 1, 1}, IFD_TYPE_I4_G128, AUTO_OFFSET};
        wbuf b = build(&o);
        gguf_file f;
        char err[256] = "", path[] = "/tmp/test_gguf_w_XXXXXX";
        uint8_t *copy;
        int rc = parse_exact(&f, b.p, b.n, &copy, err, sizeof(err));
        CHECKF(rc == IFD_OK, "%s", err);
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        if (rc || fd < 0) return;
        close(fd);
        gguf_wtensor ts[3];
        for (uint64_t i = 0; i < f.n_tensors; i++) {
            const gguf_tensor *t = &f.tensors[i];
            ts[i] = (gguf_wtensor){.name = t->name, .n_dims = t->n_dims, .type = t->type, .data = t->data};
            memcpy(ts[i].ne, t->ne, sizeof ts[i].ne);
        }
        rc = gguf_write(path, f.kv, (size_t)f.n_kv, ts, (size_t)f.n_tensors, f.alignment, err, sizeof err);
        CHECKF(rc == IFD_OK, "%s", err);
        size_t n = 0;
        uint8_t *back = slurp(path, &n);
        /* build() fills the padding between tensors with its pattern, the writer with
         * zeros: the header, the infos and every tensor's bytes must be equal */
        size_t at = 0;
        while (back && at < n && at < f.data_offset && back[at] == b.p[at]) at++;
        CHECKF(back && n == b.n && at == f.data_offset, "pass %d: %zu bytes written, %zu built, first difference at %zu",
               pass, n, b.n, at);
        for (uint64_t i = 0; back && n == b.n && i < f.n_tensors; i++) {
            const size_t o0 = f.data_offset + f.tensors[i].offset;
            CHECKF(!memcmp(back + o0, b.p + o0, f.tensors[i].n_bytes), "pass %d tensor %llu", pass,
                   (unsigned long long)i);
        }
        CHECK(!gguf_declares_ifd_layouts(&f));
        /* a shape its type cannot hold is refused, and nothing is left behind */
        unlink(path);
        ts[2].ne[0] = 100;
        rc = gguf_write(path, f.kv, (size_t)f.n_kv, ts, 3, f.alignment, err, sizeof err);
        CHECKF(rc == IFD_ERR_INVALID && access(path, F_OK) != 0, "%d %s", rc, err);
        /* an unwritable place: IFD_ERR_IO naming the path */
        rc = gguf_write("/nonexistent-dir/x.gguf", f.kv, (size_t)f.n_kv, ts, 2, f.alignment, err, sizeof err);
        CHECKF(rc == IFD_ERR_IO && strstr(err, "/nonexistent-dir/x.gguf"), "%d %s", rc, err);
        free(back);
        gguf_close(&f);
        free(copy);
        free(b.p);
    }
}

static int kv_declare(wbuf *b) {
    w_key(b, GGUF_KEY_IFD_LAYOUTS, GGUF_TYPE_UINT32), w_u32(b, GGUF_IFD_LAYOUT_VERSION);
    return 1;
}
static int kv_declare_v2(wbuf *b) {
    w_key(b, GGUF_KEY_IFD_LAYOUTS, GGUF_TYPE_UINT32), w_u32(b, GGUF_IFD_LAYOUT_VERSION + 1);
    return 1;
}

/* The declaration of inferd's layouts: present with the right version, or not. */
static void test_ifd_declaration(void) {
    int (*kvs[])(wbuf *) = {NULL, kv_declare, kv_declare_v2};
    for (int i = 0; i < 3; i++) {
        gopts o = defaults();
        o.t[1] = (tspec){"w.i4", 2, {128, 2, 1, 1, 1}, IFD_TYPE_I4_G128, AUTO_OFFSET};
        o.extra_kv = kvs[i];
        wbuf b = build(&o);
        gguf_file f;
        char err[256] = "";
        uint8_t *copy;
        int rc = parse_exact(&f, b.p, b.n, &copy, err, sizeof(err));
        CHECKF(rc == IFD_OK, "%s", err);
        CHECK(rc || gguf_find_tensor(&f, "w.i4")->n_bytes == 2 * 68);
        CHECKF(rc || gguf_declares_ifd_layouts(&f) == (i == 1), "case %d", i);
        gguf_close(&f);
        free(copy);
        free(b.p);
    }
}

/* ---- corrupt files ---------------------------------------------------------------------- */

static int kv_str_past_eof(wbuf *b) {
    w_key(b, "x", GGUF_TYPE_STRING);
    w_u64(b, 1 << 20);
    w_bytes(b, "abc", 3);
    return 1;
}
static int kv_key_past_eof(wbuf *b) {
    w_u64(b, 1ull << 63);
    w_bytes(b, "x", 1);
    return 1;
}
static int kv_arr_2p62(wbuf *b) {
    w_key(b, "x", GGUF_TYPE_ARRAY);
    w_arr_hdr(b, GGUF_TYPE_UINT32, 1ull << 62);
    return 1;
}
static int kv_strarr_max(wbuf *b) {
    w_key(b, "x", GGUF_TYPE_ARRAY);
    w_arr_hdr(b, GGUF_TYPE_STRING, UINT64_MAX);
    return 1;
}
static int kv_arrarr_huge(wbuf *b) {
    w_key(b, "x", GGUF_TYPE_ARRAY);
    w_arr_hdr(b, GGUF_TYPE_ARRAY, 1ull << 40);
    return 1;
}
static int kv_deep9(wbuf *b) {
    w_key(b, "x", GGUF_TYPE_ARRAY);
    w_nested(b, GGUF_MAX_ARRAY_DEPTH + 1);
    return 1;
}
static int kv_type13(wbuf *b) {
    w_key(b, "x", (gguf_type)13);
    w_u32(b, 0);
    return 1;
}
static int kv_elem13(wbuf *b) {
    w_key(b, "x", GGUF_TYPE_ARRAY);
    w_arr_hdr(b, (gguf_type)13, 1);
    w_u32(b, 0);
    return 1;
}
static int kv_bool7(wbuf *b) {
    w_key(b, "x", GGUF_TYPE_BOOL);
    w_u8(b, 7);
    return 1;
}
static int kv_boolarr2(wbuf *b) {
    w_key(b, "x", GGUF_TYPE_ARRAY);
    w_arr_hdr(b, GGUF_TYPE_BOOL, 2);
    w_u8(b, 1), w_u8(b, 2);
    return 1;
}
static int kv_dup(wbuf *b) {
    w_key(b, "t.u8", GGUF_TYPE_UINT8);
    w_u8(b, 1);
    return 1;
}
static int kv_dup_ctrl(wbuf *b) { /* a key with a newline, twice: the message stays one line */
    for (int i = 0; i < 2; i++) {
        w_strn(b, "a\nb", 3);
        w_u32(b, GGUF_TYPE_UINT8);
        w_u8(b, 1);
    }
    return 2;
}
static int kv_empty_key(wbuf *b) {
    w_key(b, "", GGUF_TYPE_UINT8);
    w_u8(b, 1);
    return 1;
}

static void bad_magic(wbuf *b) { b->p[0] = 'X'; }
static void empty_input(wbuf *b) { b->n = 0; }
static void drop_last_byte(wbuf *b) { b->n--; }
static void v1(gopts *o) { o->version = 1; }
static void v99(gopts *o) { o->version = 99; }
static void v3_big_endian(gopts *o) { o->version = 0x03000000; }
static void absurd_tensors(gopts *o) {
    o->set_counts = true, o->n_tensors_v = 1ull << 63, o->n_kv_v = 18;
}
static void absurd_kv(gopts *o) { o->set_counts = true, o->n_tensors_v = 2, o->n_kv_v = 1ull << 63; }
static void str_past_eof(gopts *o) { o->n_tensors = 0, o->extra_kv = kv_str_past_eof; }
static void key_past_eof(gopts *o) { o->extra_kv = kv_key_past_eof; }
static void arr_2p62(gopts *o) { o->extra_kv = kv_arr_2p62; }
static void strarr_max(gopts *o) { o->extra_kv = kv_strarr_max; }
static void arrarr_huge(gopts *o) { o->extra_kv = kv_arrarr_huge; }
static void deep9(gopts *o) { o->extra_kv = kv_deep9; }
static void type13(gopts *o) { o->extra_kv = kv_type13; }
static void elem13(gopts *o) { o->extra_kv = kv_elem13; }
static void bool7(gopts *o) { o->extra_kv = kv_bool7; }
static void boolarr2(gopts *o) { o->extra_kv = kv_boolarr2; }
static void dup_key(gopts *o) { o->extra_kv = kv_dup; }
static void dup_ctrl(gopts *o) { o->extra_kv = kv_dup_ctrl; }
static void empty_key(gopts *o) { o->extra_kv = kv_empty_key; }
static void ndims5(gopts *o) { o->t[0].n_dims = 5; }
static void neg_dim(gopts *o) { o->t[0].ne[1] = -1; }
static void dims_2p40sq(gopts *o) { o->t[0].ne[0] = 1ll << 40, o->t[0].ne[1] = 1ll << 40; }
static void dims_wrap0(gopts *o) { o->t[0].ne[0] = 1ll << 32, o->t[0].ne[1] = 1ll << 32; }
static void dims_zero_hides(gopts *o) {
    o->t[0].n_dims = 3;
    o->t[0].ne[0] = 0, o->t[0].ne[1] = 1ll << 40, o->t[0].ne[2] = 1ll << 40;
}
static void bytes_overflow(gopts *o) { /* 2^62 elements fit int64; 2^62*4 bytes do not */
    o->t[0].ne[0] = 1ll << 31, o->t[0].ne[1] = 1ll << 31;
}
static void type99(gopts *o) { o->t[1].type = 99; }
static void q8_row48(gopts *o) { o->t[1].ne[0] = 48; }
static void unaligned(gopts *o) { o->t[1].offset = 72; }
static void past_eof(gopts *o) { o->t[1].offset = 1 << 20; }
static void offset_wraps(gopts *o) { o->t[1].offset = UINT64_MAX - 31; }
static void align0(gopts *o) { o->align_kind = 'u', o->alignment = 0; }
static void align3(gopts *o) { o->align_kind = 'u', o->alignment = 3; }
static void align_str(gopts *o) { o->align_kind = 's'; }
static void align_i32(gopts *o) { o->align_kind = 'i', o->alignment = 32; }
static void dup_tensor(gopts *o) { o->t[1].name = "w.f32"; }
/* inferd's own layouts: sized by their geometry like any block type */
static void i8g64_row32(gopts *o) { o->t[1] = (tspec){"w.i8", 2, {32, 2, 1, 1, 1}, IFD_TYPE_I8_G64, AUTO_OFFSET}; }
static void i4g128_row64(gopts *o) { o->t[1] = (tspec){"w.i4", 2, {64, 2, 1, 1, 1}, IFD_TYPE_I4_G128, AUTO_OFFSET}; }
static void i4g128(gopts *o) { o->t[1] = (tspec){"w.i4", 2, {128, 2, 1, 1, 1}, IFD_TYPE_I4_G128, AUTO_OFFSET}; }
static void i8g128_unaligned(gopts *o) {
    o->t[1] = (tspec){"w.i8", 2, {128, 1, 1, 1, 1}, IFD_TYPE_I8_G128, 72};
}
static void type44(gopts *o) { o->t[1].type = GGML_TYPE_COUNT_; }

typedef struct bad_case {
    const char *name;
    void (*tweak)(gopts *o); /* applied to defaults() before building */
    void (*patch)(wbuf *b);  /* applied to the built bytes */
    const char *expect;      /* substring of the error message */
} bad_case;

static const bad_case BAD[] = {
    {"empty input", NULL, empty_input, "gguf: truncated file reading header (magic) at offset 0"},
    {"bad magic", NULL, bad_magic, "gguf: bad magic"},
    {"version 1", v1, NULL, "gguf: version 1 is not supported"},
    {"version 99", v99, NULL, "gguf: version 99 is not supported"},
    {"version 3 big-endian", v3_big_endian, NULL, "big-endian"},
    {"n_tensors 2^63", absurd_tensors, NULL, "gguf: tensor count 9223372036854775808 exceeds file size"},
    {"n_kv 2^63", absurd_kv, NULL, "gguf: kv count 9223372036854775808 exceeds file size"},
    {"string past EOF", str_past_eof, NULL, "string length 1048576 reading key 'x' (value)"},
    {"key length past EOF", key_past_eof, NULL, "string length 9223372036854775808 reading kv 18 (key)"},
    {"array length 2^62", arr_2p62, NULL, "gguf: array length 4611686018427387904 for key 'x' exceeds file size"},
    {"string array length 2^64-1", strarr_max, NULL, "array length 18446744073709551615 for key 'x' exceeds file size"},
    {"array of arrays 2^40", arrarr_huge, NULL, "array length 1099511627776 for key 'x'"},
    {"arrays nested 9 deep", deep9, NULL, "gguf: arrays nested deeper than 8 for key 'x'"},
    {"unknown value type", type13, NULL, "gguf: unknown value type 13 for key 'x'"},
    {"unknown array element type", elem13, NULL, "gguf: unknown array element type 13 for key 'x'"},
    {"bool value 7", bool7, NULL, "gguf: bool value 7 for key 'x' is not 0 or 1"},
    {"bool array value 2", boolarr2, NULL, "bool value 2 at index 1 for key 'x'"},
    {"duplicate key", dup_key, NULL, "gguf: duplicate key 't.u8'"},
    {"duplicate key with newline", dup_ctrl, NULL, "gguf: duplicate key 'a?b'"},
    {"empty key", empty_key, NULL, "gguf: kv 18 has an empty key"},
    {"tensor n_dims 5", ndims5, NULL, "gguf: tensor 'w.f32' has 5 dimensions (max 4)"},
    {"negative dim", neg_dim, NULL, "gguf: tensor 'w.f32' has negative dimension ne[1] = -1"},
    {"dims 2^40 x 2^40", dims_2p40sq, NULL, "gguf: tensor 'w.f32' shape [1099511627776, 1099511627776, 1, 1] overflows"},
    {"dims 2^32 x 2^32 wrap to 0", dims_wrap0, NULL, "shape [4294967296, 4294967296, 1, 1] overflows"},
    {"zero dim hiding 2^80", dims_zero_hides, NULL, "shape [0, 1099511627776, 1099511627776, 1] overflows"},
    {"byte size overflow", bytes_overflow, NULL, "gguf: tensor 'w.f32' byte size overflows"},
    {"unknown tensor type", type99, NULL, "gguf: unknown tensor type 99 for tensor 'w.q8'"},
    {"Q8_0 row not whole blocks", q8_row48, NULL, "gguf: tensor 'w.q8' row length 48 is not a multiple of the Q8_0 block size 32"},
    {"offset not aligned", unaligned, NULL, "gguf: tensor 'w.q8' offset 72 is not aligned to 32"},
    {"data past EOF", NULL, drop_last_byte, "gguf: tensor 'w.q8' data [800, 800+136) lies past end of file (size 935)"},
    {"offset past EOF", past_eof, NULL, "gguf: tensor 'w.q8' offset 1048576 lies past end of file"},
    {"offset wraps", offset_wraps, NULL, "gguf: tensor 'w.q8' offset 18446744073709551584 lies past end of file"},
    {"alignment 0", align0, NULL, "gguf: alignment 0 is not a power of two"},
    {"alignment 3", align3, NULL, "gguf: alignment 3 is not a power of two"},
    {"alignment as string", align_str, NULL, "gguf: general.alignment has type string, expected an unsigned integer"},
    {"alignment as int32", align_i32, NULL, "general.alignment has type int32"},
    {"duplicate tensor name", dup_tensor, NULL, "gguf: duplicate tensor name 'w.f32'"},
    {"I8_G64 row not whole groups", i8g64_row32, NULL, "gguf: tensor 'w.i8' row length 32 is not a multiple of the I8_G64 block size 64"},
    {"I4_G128 row not whole groups", i4g128_row64, NULL, "row length 64 is not a multiple of the I4_G128 block size 128"},
    /* 2 rows of one 68-byte group: 136 bytes, as the Q8_0 case above */
    {"I4_G128 data past EOF", i4g128, drop_last_byte, "gguf: tensor 'w.i4' data [800, 800+136) lies past end of file (size 935)"},
    {"I8_G128 offset not aligned", i8g128_unaligned, NULL, "gguf: tensor 'w.i8' offset 72 is not aligned to 32"},
    {"type id past inferd's", type44, NULL, "gguf: unknown tensor type 44 for tensor 'w.q8'"},
};

/* A failed parse: an error code from the file-format family, a one-line message, and
 * *f left closed. */
static void check_failed(const char *what, int rc, const gguf_file *f, const char *err) {
    CHECKF(rc == IFD_ERR_FORMAT || rc == IFD_ERR_UNSUPPORTED, "%s: rc %d (%s)", what, rc, err);
    CHECKF(strncmp(err, "gguf: ", 6) == 0 && !strchr(err, '\n'), "%s: message '%s'", what, err);
    CHECKF(f->kv == NULL && f->tensors == NULL && f->n_kv == 0 && f->n_tensors == 0 &&
               f->base == NULL,
           "%s: struct not closed", what);
}

static void test_corrupt_table(void) {
    for (size_t i = 0; i < IFD_ARRAY_LEN(BAD); i++) {
        const bad_case *c = &BAD[i];
        gopts o = defaults();
        if (c->tweak) c->tweak(&o);
        wbuf b = build(&o);
        if (c->patch) c->patch(&b);
        gguf_file f;
        char err[256] = "";
        uint8_t *copy;
        int rc = parse_exact(&f, b.p, b.n, &copy, err, sizeof(err));
        check_failed(c->name, rc, &f, err);
        CHECKF(strstr(err, c->expect) != NULL, "%s: got '%s', want '%s'", c->name, err, c->expect);
        gguf_close(&f);
        free(copy);
        free(b.p);
    }
}

/* Every strict prefix of a valid file fails cleanly (the file ends with tensor data). */
static void test_every_truncation(void) {
    gopts o = defaults();
    o.extra_kv = kv_deep8;
    wbuf b = build(&o);
    int n_truncated = 0;
    for (size_t n = 0; n < b.n; n++) {
        gguf_file f;
        char err[256] = "";
        uint8_t *copy;
        int rc = parse_exact(&f, b.p, n, &copy, err, sizeof(err));
        char what[32];
        snprintf(what, sizeof(what), "prefix %zu", n);
        check_failed(what, rc, &f, err);
        n_truncated += strstr(err, "truncated") != NULL;
        gguf_close(&f);
        free(copy);
    }
    CHECK(n_truncated > 100);
    free(b.p);
}

/* Overwrite each byte with a few values: anything may come back but a crash/over-read. */
static void test_byte_mutations(void) {
    static const uint8_t VALS[] = {0x00, 0x01, 0x09, 0x7f, 0xff};
    gopts o = defaults();
    o.align_kind = 'u';
    o.alignment = 64;
    wbuf b = build(&o);
    int n_ok = 0, n_fail = 0;
    for (size_t pos = 0; pos < b.n; pos++) {
        for (size_t v = 0; v < IFD_ARRAY_LEN(VALS); v++) {
            uint8_t *m = malloc(b.n);
            if (!m) abort();
            memcpy(m, b.p, b.n);
            m[pos] = VALS[v];
            gguf_file f;
            char err[256] = "";
            if (gguf_open_memory(&f, m, b.n, err, sizeof(err)) == IFD_OK) {
                n_ok++;
                for (uint64_t t = 0; t < f.n_tensors; t++) {
                    const gguf_tensor *ti = &f.tensors[t];
                    CHECK((const uint8_t *)ti->data + ti->n_bytes <= m + b.n);
                }
            } else {
                n_fail++;
                CHECKF(strncmp(err, "gguf: ", 6) == 0, "pos %zu: '%s'", pos, err);
            }
            gguf_close(&f);
            free(m);
        }
    }
    CHECK(n_ok > 0 && n_fail > 0);
    free(b.p);
}

/* ---- real files --------------------------------------------------------------------------- */

static const char *REAL[] = {
    "models/shakespeare-target.gguf",     "models/shakespeare-draft.gguf",
    "models/shakespeare-target-Q8_0.gguf", "models/shakespeare-target-Q4_0.gguf",
    "models/shakespeare-target-Q4_K_M.gguf", "tokenizer-tests/ggml-vocab-deepseek-llm.gguf",
    "tokenizer-tests/ggml-vocab-falcon.gguf", "tokenizer-tests/ggml-vocab-gpt-2.gguf",
    "tokenizer-tests/ggml-vocab-llama-spm.gguf", "tokenizer-tests/ggml-vocab-mpt.gguf",
    "tokenizer-tests/ggml-vocab-phi-3.gguf",
};

static void check_real(const char *path) {
    gguf_file f;
    char err[512];
    int rc = gguf_open(&f, path, err, sizeof(err));
    CHECKF(rc == IFD_OK, "%s: %s", path, err);
    if (rc) return;
    gguf_str s;
    CHECKF(f.version == 2 || f.version == 3, "%s", path);
    CHECKF(gguf_get_str(&f, "general.architecture", &s) && s.n > 0, "%s", path);
    const gguf_array *tok = gguf_get_arr(&f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    CHECKF(tok && tok->n > 0, "%s: tokenizer.ggml.tokens", path);
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        CHECKF(t->offset % f.alignment == 0, "%s: tensor %llu", path, (unsigned long long)i);
        CHECKF((const uint8_t *)t->data == f.base + f.data_offset + t->offset &&
                   f.data_offset + t->offset + t->n_bytes <= f.size,
               "%s: tensor %llu", path, (unsigned long long)i);
    }
    if (strstr(path, "/shakespeare-target.gguf")) {
        char arch[16];
        uint32_t u;
        float eps;
        bool b;
        CHECK(gguf_get_cstr(&f, "general.architecture", arch, sizeof(arch)) &&
              !strcmp(arch, "llama"));
        CHECK(tok && tok->n == 1024);
        CHECK(gguf_get_u32(&f, "llama.embedding_length", &u) && u == 256);
        CHECK(gguf_get_u32(&f, "llama.block_count", &u) && u == 4);
        CHECK(gguf_get_u32(&f, "tokenizer.ggml.bos_token_id", &u) && u == 1);
        CHECK(gguf_get_f32(&f, "llama.attention.layer_norm_rms_epsilon", &eps) &&
              fabsf(eps - 1e-5f) < 1e-9f);
        CHECK(gguf_get_bool(&f, "tokenizer.ggml.add_bos_token", &b) && b);
        const gguf_array *sc = gguf_get_arr(&f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32);
        CHECK(sc && sc->n == 1024);
        CHECK(f.n_tensors == 39);
        const gguf_tensor *e = gguf_find_tensor(&f, "token_embd.weight");
        CHECK(e && e->type == GGML_TYPE_F32 && e->ne[0] == 256 && e->ne[1] == 1024 &&
              e->n_bytes == 256 * 1024 * 4);
        CHECK(gguf_find_tensor(&f, "output.weight") != NULL);
    }
    if (strstr(path, "-Q8_0.gguf")) {
        const gguf_tensor *q = gguf_find_tensor(&f, "blk.0.attn_q.weight");
        CHECK(q && q->type == GGML_TYPE_Q8_0 && q->n_bytes == 256 / 32 * 34 * 256);
    }
    gguf_close(&f);
}

static void test_real_files(void) {
    struct stat st;
    for (size_t i = 0; i < IFD_ARRAY_LEN(REAL); i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", INFERD_SHARED_DIR, REAL[i]);
        CHECKF(stat(path, &st) == 0, "missing %s", path);
    }
    /* and anything else that lands there */
    static const char *DIRS[] = {"models", "tokenizer-tests"};
    for (size_t d = 0; d < IFD_ARRAY_LEN(DIRS); d++) {
        char pat[1024];
        glob_t g;
        snprintf(pat, sizeof(pat), "%s/%s/*.gguf", INFERD_SHARED_DIR, DIRS[d]);
        int grc = glob(pat, 0, NULL, &g);
        CHECKF(grc == 0 && g.gl_pathc > 0, "no files match %s", pat);
        for (size_t i = 0; grc == 0 && i < g.gl_pathc; i++) check_real(g.gl_pathv[i]);
        if (grc == 0) globfree(&g);
    }
}

TEST_MAIN(T(test_valid_v3), T(test_valid_v2), T(test_alignment_64), T(test_max_depth_ok),
          T(test_getter_edges), T(test_open_file), T(test_write_roundtrip), T(test_ifd_declaration),
          T(test_corrupt_table),
          T(test_every_truncation), T(test_byte_mutations), T(test_real_files))
