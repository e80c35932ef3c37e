/* test_cuda_vec_add.c — the trivial CUDA kernel against the obvious CPU result on
 * random inputs; skips (77) without a device. */
#include <stdio.h>
#include <stdlib.h>

#include "vec_add.h"

int main(void) {
    if (ifd_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    enum { N = 100003 };
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float)),
          *c = malloc(N * sizeof(float));
    srand(7);
    for (int i = 0; i < N; i++) {
        a[i] = (float)rand() / RAND_MAX - 0.5f;
        b[i] = (float)rand() / RAND_MAX - 0.5f;
    }
    int bad = ifd_cuda_vec_add(c, a, b, N) != 0;
    for (int i = 0; i < N && !bad; i++) bad = c[i] != a[i] + b[i];
    printf("%s\n", bad ? "0 passed, 1 failed" : "1 passed, 0 failed");
    free(a);
    free(b);
    free(c);
    return bad;
}
