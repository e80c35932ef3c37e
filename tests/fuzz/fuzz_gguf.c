/* fuzz_gguf.c — libFuzzer target for the GGUF reader: parse the input with
 * gguf_open_memory and, when it is accepted, touch everything the reader hands out
 * (every kv through every getter, every array element, every tensor's first and last
 * data byte) so an over-read or a bad pointer shows up under ASan/UBSan.
 * Built by tests/fuzz/fuzz.cmake with clang only; run by tests/fuzz/run_fuzz.sh. */
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"

static volatile uint64_t sink; /* keeps the reads from being optimized away */

static void touch_str(gguf_str s) {
    if (s.n) sink += (uint8_t)s.s[0] + (uint8_t)s.s[s.n - 1];
}

static void touch_array(const gguf_array *a) {
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_TYPE_STRING) touch_str(a->strs[i]);
        else if (a->type == GGUF_TYPE_ARRAY) touch_array(&a->arrs[i].v.arr);
        else sink += (uint64_t)gguf_arr_i64(a, i) + (gguf_arr_f64(a, i) > 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file f;
    char err[256];
    if (gguf_open_memory(&f, data, size, err, sizeof(err)) != 0) {
        sink += strlen(err);
        return 0;
    }
    for (uint64_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        char key[128], buf[64];
        uint32_t u32;
        int64_t i64;
        float f32;
        bool b;
        gguf_str s;
        touch_str(kv->key);
        /* Keys may hold any bytes; the getters take C strings, so look up a copy. */
        size_t n = kv->key.n < sizeof(key) - 1 ? (size_t)kv->key.n : sizeof(key) - 1;
        memcpy(key, kv->key.s, n);
        key[n] = 0;
        sink += gguf_find_kv(&f, key) != NULL;
        sink += gguf_get_u32(&f, key, &u32) ? u32 : 0;
        sink += gguf_get_i64(&f, key, &i64) ? (uint64_t)i64 : 0;
        sink += gguf_get_f32(&f, key, &f32);
        sink += gguf_get_bool(&f, key, &b) ? b : 0;
        if (gguf_get_str(&f, key, &s)) touch_str(s);
        sink += gguf_get_cstr(&f, key, buf, sizeof(buf)) ? strlen(buf) : 0;
        sink += gguf_get_arr(&f, key, GGUF_TYPE_COUNT_) != NULL;
        sink += strlen(gguf_type_name(kv->val.type));
        if (kv->val.type == GGUF_TYPE_STRING) touch_str(kv->val.v.str);
        if (kv->val.type == GGUF_TYPE_ARRAY) touch_array(&kv->val.v.arr);
    }
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        const uint8_t *d = t->data;
        touch_str(t->name);
        if (t->n_bytes) sink += d[0] + d[t->n_bytes - 1];
        if (t->name.n < 128) {
            char name[128];
            memcpy(name, t->name.s, (size_t)t->name.n);
            name[t->name.n] = 0;
            sink += gguf_find_tensor(&f, name) != NULL;
        }
    }
    gguf_close(&f);
    return 0;
}
