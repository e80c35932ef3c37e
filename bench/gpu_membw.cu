// gpu_membw.cu — the limit the GPU figures are fractions of: device-to-device copy
// bandwidth (bytes read + bytes written per second) on the device the backend uses.
// Prints one line of JSON: {"device": ..., "copy_gbps": ...}. GPU build only.
#include <stdio.h>
#include <time.h>

#include "devrt.h"

using namespace IFD_NS;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 2048;
    dev_props p;
    if (dev_count() < 1 || dev_open(0, &p) != DEV_OK) {
        fprintf(stderr, "gpu_membw: no device\n");
        return 77;
    }
    size_t bytes = mib << 20;
    void *a = NULL, *b = NULL;
    if (dev_malloc(&a, bytes) != DEV_OK || dev_malloc(&b, bytes) != DEV_OK) {
        fprintf(stderr, "gpu_membw: %s\n", dev_error());
        return 1;
    }
    dev_memset(a, 1, bytes, NULL);
    dev_sync(NULL);
    double best = 0;
    for (int rep = 0; rep < 10; rep++) {
        double t0 = now();
        for (int i = 0; i < 5; i++) dev_d2d(b, a, bytes, NULL);
        if (dev_sync(NULL) != DEV_OK) return 1;
        double gbps = 5.0 * 2.0 * (double)bytes / (now() - t0) / 1e9;
        if (gbps > best) best = gbps;
    }
    printf("{\"device\": \"%s\", \"copy_gbps\": %.1f, \"buffer_mib\": %zu}\n", p.name, best, mib);
    dev_free(a);
    dev_free(b);
    return 0;
}
