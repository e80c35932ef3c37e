/* quant_tool.c — a test tool: runs inferd's reference quant kernels on raw files, so
 * tests/python/test_quant_types.py can compare them with gguf's numpy implementation.
 *
 *   quant_tool dequant TYPE IN OUT   IN: whole blocks of TYPE; OUT: float32 (little endian)
 *   quant_tool quant TYPE IN OUT     IN: float32, a multiple of the block size; OUT: blocks
 *   quant_tool dot TYPE IN X OUT     one row IN of TYPE . float32 X -> one float32
 *
 * TYPE is a ggml type name (Q4_1, IQ4_XS, ...). Exit status 0 on success, 1 on a bad
 * argument or file, 2 when the type has no such reference kernel. Single-threaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"

static void *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    *n = len;
    return buf;
}

static int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    int rc = fwrite(p, 1, n, f) == n ? 0 : 1;
    return fclose(f) ? 1 : rc;
}

static const quant_traits *type_named(const char *name) {
    for (uint32_t t = 0; t < GGML_TYPE_COUNT_; t++) {
        const ggml_type_info *ti = ggml_type_get(t);
        if (ti && !strcmp(ti->name, name)) return quant_traits_of((ggml_type)t);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: quant_tool dequant|quant|dot TYPE IN [X] OUT\n");
        return 1;
    }
    const quant_traits *qt = type_named(argv[2]);
    if (!qt) {
        fprintf(stderr, "quant_tool: no reference kernels for type %s\n", argv[2]);
        return 2;
    }
    size_t n_in = 0;
    uint8_t *in = read_all(argv[3], &n_in);
    if (!in) {
        fprintf(stderr, "quant_tool: cannot read %s\n", argv[3]);
        return 1;
    }
    int rc = 1;
    float *f = NULL;
    uint8_t *q = NULL;
    if (!strcmp(argv[1], "dequant") || !strcmp(argv[1], "dot")) {
        if (n_in % qt->block_bytes) {
            fprintf(stderr, "quant_tool: %zu bytes is not whole %s blocks\n", n_in, qt->name);
            goto done;
        }
        const int64_t n = (int64_t)(n_in / qt->block_bytes) * qt->block_size;
        if (!strcmp(argv[1], "dequant")) {
            if (!(f = malloc((size_t)n * sizeof(float) + 1))) goto done;
            qt->dequantize_row(in, f, n);
            rc = write_all(argv[4], f, (size_t)n * sizeof(float));
        } else {
            size_t n_x = 0;
            if (argc < 6 || !(f = read_all(argv[4], &n_x)) || n_x != (size_t)n * sizeof(float)) {
                fprintf(stderr, "quant_tool: dot needs X of %lld float32\n", (long long)n);
                goto done;
            }
            const float r = qt->dot(in, f, n);
            rc = write_all(argv[5], &r, sizeof r);
        }
    } else if (!strcmp(argv[1], "quant")) {
        if (!qt->quantize_row) {
            rc = 2;
            fprintf(stderr, "quant_tool: %s has no reference quantizer\n", qt->name);
            goto done;
        }
        if (n_in % (qt->block_size * sizeof(float))) goto done;
        const int64_t n = (int64_t)(n_in / sizeof(float));
        const size_t qb = (size_t)(n / qt->block_size) * qt->block_bytes;
        if (!(q = malloc(qb + 1))) goto done;
        qt->quantize_row((const float *)in, q, n);
        rc = write_all(argv[4], q, qb);
    } else {
        fprintf(stderr, "quant_tool: unknown command %s\n", argv[1]);
    }
done:
    free(in);
    free(f);
    free(q);
    return rc;
}
