// test_fault.cu — device errors as devrt.h reports them (issue 9 item 4). On a GPU and
// under the emulation: an invalid launch configuration is a recoverable error (DEV_ERR,
// not DEV_STICKY), and the next launch on the same context works. Under the emulation
// also the fault injection the server tests use (IFD_EMU_FAULT, dev_emu_fault_set):
// which check fails, that a recoverable fault fails once, that a sticky one fails every
// later call until disarmed, that checks during a graph capture are not counted, and
// that a malformed spec arms nothing.
#include "cuda_test.h"

IFD_NS_BEGIN

__global__ void k_iota(int *out, int base, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = base + i;
}

enum { N = 300 };

// Launch k_iota over N with `block` threads per block; the launch check's status.
static int launch(int *d, int base, int block) {
    IFD_LAUNCH(k_iota, (N + block - 1) / block, block, 0, NULL, d, base, N);
    return dev_check_launch();
}

static bool iota_ok(const int *d, int base) {
    int h[N];
    ct_download(h, d, sizeof h);
    for (int i = 0; i < N; i++)
        if (h[i] != base + i) return false;
    return true;
}

static void test_bad_launch_is_recoverable(void) {
    int *d = (int *)ct_alloc(N * sizeof(int));
    CHECK(launch(d, 5, 128) == DEV_OK && dev_sync(NULL) == DEV_OK);
    CHECK(iota_ok(d, 5));
    CHECK(launch(d, 9, 2048) == DEV_ERR); // > 1024 threads per block: invalid configuration
    CHECK(dev_error()[0] != 0);
    CHECK(dev_sync(NULL) == DEV_OK); // not sticky: the context goes on
    CHECK(launch(d, 7, 64) == DEV_OK && dev_sync(NULL) == DEV_OK);
    CHECK(iota_ok(d, 7));
    ct_free(d);
}

#if CT_EMULATED
static void test_injected_recoverable(void) {
    int *d = (int *)ct_alloc(N * sizeof(int));
    CHECK(dev_emu_fault_set("recoverable@3") == DEV_OK);
    // syncs before the first launch check are not counted (a backend's create)
    for (int i = 0; i < 5; i++) CHECK(dev_sync(NULL) == DEV_OK);
    CHECK(launch(d, 1, 128) == DEV_OK); // check 1
    CHECK(dev_sync(NULL) == DEV_OK); // 2
    CHECK(launch(d, 2, 128) == DEV_ERR); // 3: the injected fault
    CHECK(strstr(dev_error(), "IFD_EMU_FAULT") != NULL);
    for (int i = 0; i < 20; i++) CHECK(launch(d, 3 + i, 128) == DEV_OK && dev_sync(NULL) == DEV_OK);
    CHECK(iota_ok(d, 22));
    CHECK(dev_emu_fault_set(NULL) == DEV_OK);
    ct_free(d);
}

static void test_injected_sticky(void) {
    int *d = (int *)ct_alloc(N * sizeof(int));
    int h[N] = {0};
    CHECK(dev_emu_fault_set("sticky@2") == DEV_OK);
    CHECK(launch(d, 4, 128) == DEV_OK); // 1
    CHECK(dev_h2d(d, h, sizeof h, NULL) == DEV_OK); // copies are not checks
    CHECK(dev_sync(NULL) == DEV_STICKY); // 2: the context is lost
    CHECK(strstr(dev_error(), "IFD_EMU_FAULT") != NULL);
    // from now on every call that returns a status fails the same way
    CHECK(launch(d, 4, 128) == DEV_STICKY);
    CHECK(dev_sync(NULL) == DEV_STICKY);
    CHECK(dev_h2d(d, h, sizeof h, NULL) == DEV_STICKY);
    CHECK(dev_d2h(h, d, sizeof h, NULL) == DEV_STICKY);
    CHECK(dev_memset(d, 0, sizeof h, NULL) == DEV_STICKY);
    void *p = (void *)1;
    CHECK(dev_malloc(&p, 64) == DEV_STICKY && p == NULL);
    // disarming revives the (emulated) context
    CHECK(dev_emu_fault_set("") == DEV_OK);
    CHECK(launch(d, 6, 128) == DEV_OK && dev_sync(NULL) == DEV_OK);
    CHECK(iota_ok(d, 6));
    ct_free(d);
}

static void test_capture_not_counted(void) {
    int *d = (int *)ct_alloc(N * sizeof(int));
    CHECK(dev_emu_fault_set("recoverable@1") == DEV_OK);
    dev_graph g = NULL;
    CHECK(dev_graph_begin(NULL) == DEV_OK);
    CHECK(launch(d, 8, 128) == DEV_OK); // recorded, not run: not counted
    CHECK(dev_graph_end(NULL, &g) == DEV_OK && g);
    CHECK(dev_graph_launch(g, NULL) == DEV_ERR); // the first counted check
    CHECK(dev_graph_launch(g, NULL) == DEV_OK && dev_sync(NULL) == DEV_OK);
    CHECK(iota_ok(d, 8));
    dev_graph_destroy(g);
    CHECK(dev_emu_fault_set(NULL) == DEV_OK);
    ct_free(d);
}

static void test_malformed_spec(void) {
    int *d = (int *)ct_alloc(N * sizeof(int));
    const char *bad[] = {"sticky", "sticky@", "sticky@0", "sticky@-3", "sticky@2x", "bogus@2", "Sticky@2", "@2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECKF(dev_emu_fault_set(bad[i]) == DEV_ERR, "'%s' accepted", bad[i]);
        for (int k = 0; k < 5; k++) CHECKF(launch(d, k, 128) == DEV_OK, "'%s' armed a fault", bad[i]);
    }
    CHECK(dev_emu_fault_set(NULL) == DEV_OK);
    ct_free(d);
}
#endif

IFD_NS_END

using namespace IFD_NS;
#if CT_EMULATED
TEST_MAIN(T(test_bad_launch_is_recoverable), T(test_injected_recoverable), T(test_injected_sticky),
          T(test_capture_not_counted), T(test_malformed_spec))
#else
TEST_MAIN(T(test_bad_launch_is_recoverable))
#endif
