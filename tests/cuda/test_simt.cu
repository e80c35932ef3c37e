// test_simt.cu — the SIMT emulation itself (and, built natively, the same kernels on a
// GPU): indices, shared memory and barriers, warp collectives, atomics, fp16/bf16, graph
// capture; under emulation also that a divergent barrier, a warp collective with a
// missing lane and a missing barrier are caught rather than hanging or passing.
#include "cuda_test.h"

IFD_NS_BEGIN

__global__ void k_vadd(float *out, const float *a, const float *b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

// Block sum of 256 values through shared memory (tree with barriers).
__global__ void k_block_sum(float *out, const float *x) {
    __shared__ float s[256];
    unsigned t = threadIdx.x;
    s[t] = x[blockIdx.x * 256 + t];
    __syncthreads();
    for (unsigned h = 128; h > 0; h >>= 1) {
        if (t < h) s[t] += s[t + h];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// Warp collectives: xor butterfly, down-shift, broadcast within width 8, ballot/any/all.
__global__ void k_warp(float *xor_sum, float *down_sum, float *bcast8, unsigned *ballot, int *anyall,
                       const float *x) {
    unsigned t = threadIdx.x, lane = t & 31;
    float v = x[t];
    float a = v;
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    xor_sum[t] = a;
    float d = v;
    for (int o = 16; o > 0; o >>= 1) d += __shfl_down_sync(0xffffffffu, d, o);
    if (lane == 0) down_sum[t >> 5] = d;
    bcast8[t] = __shfl_sync(0xffffffffu, v, 3, 8);
    unsigned b = __ballot_sync(0xffffffffu, v > 0.5f);
    if (lane == 0) ballot[t >> 5] = b;
    int an = __any_sync(0xffffffffu, v > 0.99f), al = __all_sync(0xffffffffu, v > -1.f);
    if (lane == 0) anyall[t >> 5] = an * 2 + al;
}

// Dynamic shared memory: reverse each block's slice.
__global__ void k_reverse(int *out, const int *in) {
    IFD_DYN_SHARED(int, s);
    unsigned t = threadIdx.x, n = blockDim.x;
    s[t] = in[blockIdx.x * n + t];
    __syncthreads();
    out[blockIdx.x * n + t] = s[n - 1 - t];
}

__global__ void k_atomic(int *count, float *fsum) {
    atomicAdd(count, 1);
    atomicAdd(fsum, 0.5f);
}

// 3-D block and grid indices.
__global__ void k_index(int *out) {
    int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int nt = blockDim.x * blockDim.y * blockDim.z;
    out[bx * nt + tx] = (int)(threadIdx.z * 10000 + threadIdx.y * 100 + threadIdx.x) + 1000000 * bx;
}

__global__ void k_half(float *out, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half h = __float2half(x[i]);
    __nv_bfloat16 b = __float2bfloat16(x[i]);
    out[i] = __half2float(h) + __bfloat162float(b);
}

__global__ void k_scale(float *out, const float *in, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * s;
}

#if CT_EMULATED
__global__ void k_divergent_barrier(int *out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}
__global__ void k_missing_lane(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
// A shared-memory exchange without the barrier it needs.
__global__ void k_no_barrier(int *out, const int *in) {
    __shared__ int s[64];
    unsigned t = threadIdx.x;
    s[t] = in[t];
    out[t] = s[(t + 1) % 64];
}
#endif

IFD_NS_END

static void test_vadd(void) {
    const int n = 1000;
    float a[n], b[n], c[n], want[n];
    ct_fill(a, n, 1, -1, 1);
    ct_fill(b, n, 2, -1, 1);
    for (int i = 0; i < n; i++) want[i] = a[i] + b[i];
    float *da = (float *)ct_upload(a, sizeof a), *db = (float *)ct_upload(b, sizeof b);
    float *dc = (float *)ct_alloc(sizeof c);
    IFD_LAUNCH(k_vadd, 3, 128, 0, NULL, dc, da, db, n);
    CHECK(ct_sync() == DEV_OK);
    ct_download(c, dc, sizeof c);
    CHECK_CLOSE(c, want, n, 0, 0, "vadd (exact)");
    ct_free(da), ct_free(db), ct_free(dc);
}

static void test_block_sum(void) {
    const int nb = 5;
    float x[nb * 256], out[nb], want[nb];
    ct_fill(x, nb * 256, 3, 0, 1);
    for (int b = 0; b < nb; b++) {
        // the same tree order as the kernel, so the comparison is exact
        float s[256];
        memcpy(s, x + b * 256, sizeof s);
        for (int h = 128; h > 0; h >>= 1)
            for (int t = 0; t < h; t++) s[t] += s[t + h];
        want[b] = s[0];
    }
    float *dx = (float *)ct_upload(x, sizeof x), *dout = (float *)ct_alloc(sizeof out);
    IFD_LAUNCH(k_block_sum, nb, 256, 0, NULL, dout, dx);
    CHECK(ct_sync() == DEV_OK);
    ct_download(out, dout, sizeof out);
    CHECK_CLOSE(out, want, nb, 0, 0, "block sum (exact, same tree)");
    ct_free(dx), ct_free(dout);
}

static void test_warp(void) {
    const int n = 64;
    float x[n], xs[n], ds[2], b8[n];
    unsigned bal[2];
    int aa[2];
    ct_fill(x, n, 4, 0, 1);
    float *dx = (float *)ct_upload(x, sizeof x);
    float *dxs = (float *)ct_alloc(sizeof xs), *dds = (float *)ct_alloc(sizeof ds), *db8 = (float *)ct_alloc(sizeof b8);
    unsigned *dbal = (unsigned *)ct_alloc(sizeof bal);
    int *daa = (int *)ct_alloc(sizeof aa);
    IFD_LAUNCH(k_warp, 1, n, 0, NULL, dxs, dds, db8, dbal, daa, dx);
    CHECK(ct_sync() == DEV_OK);
    ct_download(xs, dxs, sizeof xs), ct_download(ds, dds, sizeof ds), ct_download(b8, db8, sizeof b8);
    ct_download(bal, dbal, sizeof bal), ct_download(aa, daa, sizeof aa);
    for (int w = 0; w < 2; w++) {
        double sum = 0;
        unsigned wb = 0;
        int any = 0;
        for (int l = 0; l < 32; l++) {
            sum += x[w * 32 + l];
            if (x[w * 32 + l] > 0.5f) wb |= 1u << l;
            if (x[w * 32 + l] > 0.99f) any = 1;
        }
        for (int l = 0; l < 32; l++) CHECKF(fabs(xs[w * 32 + l] - sum) < 1e-5, "xor sum lane %d", l);
        // every lane of the butterfly holds the same value, bit for bit
        for (int l = 1; l < 32; l++) CHECK(xs[w * 32 + l] == xs[w * 32]);
        CHECKF(fabs(ds[w] - sum) < 1e-5, "down sum warp %d", w);
        CHECKF(bal[w] == wb, "ballot %08x want %08x", bal[w], wb);
        CHECK(aa[w] == any * 2 + 1);
        for (int l = 0; l < 32; l++) CHECK(b8[w * 32 + l] == x[w * 32 + (l & ~7) + 3]);
    }
    ct_free(dx), ct_free(dxs), ct_free(dds), ct_free(db8), ct_free(dbal), ct_free(daa);
}

static void test_dyn_smem(void) {
    const int nb = 3, bs = 96;
    int in[nb * bs], out[nb * bs];
    for (int i = 0; i < nb * bs; i++) in[i] = i * 7 + 1;
    int *din = (int *)ct_upload(in, sizeof in), *dout = (int *)ct_alloc(sizeof out);
    IFD_LAUNCH(k_reverse, nb, bs, bs * sizeof(int), NULL, dout, din);
    CHECK(ct_sync() == DEV_OK);
    ct_download(out, dout, sizeof out);
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < bs; t++) CHECK(out[b * bs + t] == in[b * bs + bs - 1 - t]);
    ct_free(din), ct_free(dout);
}

static void test_atomics(void) {
    int zero = 0;
    float fz = 0;
    int *dc = (int *)ct_upload(&zero, sizeof zero);
    float *df = (float *)ct_upload(&fz, sizeof fz);
    IFD_LAUNCH(k_atomic, 7, 64, 0, NULL, dc, df);
    CHECK(ct_sync() == DEV_OK);
    int c;
    float f;
    ct_download(&c, dc, sizeof c), ct_download(&f, df, sizeof f);
    CHECK(c == 7 * 64);
    CHECK(f == 7 * 64 * 0.5f); // exact: halves add exactly in fp32 at this size
    ct_free(dc), ct_free(df);
}

static void test_index(void) {
    dim3 g(2, 3, 2), b(4, 3, 2);
    int n = 12 * 24;
    int *d = (int *)ct_alloc(n * sizeof(int));
    int *h = (int *)malloc(n * sizeof(int));
    IFD_LAUNCH(k_index, g, b, 0, NULL, d);
    CHECK(ct_sync() == DEV_OK);
    ct_download(h, d, n * sizeof(int));
    for (int bx = 0; bx < 12; bx++)
        for (int z = 0; z < 2; z++)
            for (int y = 0; y < 3; y++)
                for (int x = 0; x < 4; x++)
                    CHECK(h[bx * 24 + x + 4 * (y + 3 * z)] == z * 10000 + y * 100 + x + 1000000 * bx);
    free(h);
    ct_free(d);
}

static void test_half(void) {
    const int n = 200;
    float x[n], out[n], want[n];
    ct_fill(x, n, 5, -8, 8);
    for (int i = 0; i < n; i++) want[i] = __half2float(__float2half(x[i])) + __bfloat162float(__float2bfloat16(x[i]));
    float *dx = (float *)ct_upload(x, sizeof x), *dout = (float *)ct_alloc(sizeof out);
    IFD_LAUNCH(k_half, 2, 128, 0, NULL, dout, dx, n);
    CHECK(ct_sync() == DEV_OK);
    ct_download(out, dout, sizeof out);
    CHECK_CLOSE(out, want, n, 0, 0, "fp16/bf16 round trips (exact)");
    ct_free(dx), ct_free(dout);
}

// A graph keeps the kernel arguments of its capture and re-reads copy sources at replay.
static void test_graph(void) {
    const int n = 64;
    float h[n], out[n];
    ct_fill(h, n, 6, -1, 1);
    float *din = (float *)ct_alloc(sizeof h), *dout = (float *)ct_alloc(sizeof out);
    dev_stream s;
    CHECK(dev_stream_create(&s) == DEV_OK);
    dev_graph g = NULL;
    float scale = 2.0f;
    CHECK(dev_graph_begin(s) == DEV_OK);
    CHECK(dev_h2d(din, h, sizeof h, s) == DEV_OK);
    IFD_LAUNCH(k_scale, 1, n, 0, s, dout, din, scale, n);
    CHECK(dev_graph_end(s, &g) == DEV_OK);
    scale = 5.0f; // not seen by the graph
    for (int i = 0; i < n; i++) h[i] += 1.0f; // seen: the copy reads h at replay
    CHECK(dev_graph_launch(g, s) == DEV_OK);
    CHECK(dev_sync(s) == DEV_OK);
    ct_download(out, dout, sizeof out);
    for (int i = 0; i < n; i++) CHECK(out[i] == h[i] * 2.0f);
    dev_graph_destroy(g);
    dev_stream_destroy(s);
    ct_free(din), ct_free(dout);
}

#if CT_EMULATED
static void test_faults(void) {
    long before = ifd_simt::n_faults();
    int *d = (int *)ct_alloc(64 * sizeof(int));
    IFD_LAUNCH(k_divergent_barrier, 1, 32, 0, NULL, d);
    CHECK(dev_check_launch() == DEV_ERR);
    CHECK(strstr(dev_error(), "divergent __syncthreads") != NULL);
    float *f = (float *)ct_alloc(32 * sizeof(float));
    IFD_LAUNCH(k_missing_lane, 1, 32, 0, NULL, f);
    CHECK(dev_check_launch() == DEV_ERR);
    CHECK(strstr(dev_error(), "cannot go on") != NULL || strstr(dev_error(), "exited") != NULL);
    IFD_LAUNCH(k_vadd, 0, 32, 0, NULL, (float *)f, (const float *)f, (const float *)f, 0);
    CHECK(dev_check_launch() == DEV_ERR);
    CHECK(strstr(dev_error(), "invalid launch configuration") != NULL);
    IFD_LAUNCH(k_reverse, 1, 32, (size_t)300000, NULL, d, d);
    CHECK(dev_check_launch() == DEV_ERR);
    CHECK(ifd_simt::n_faults() == before + 4);
    // The missing barrier gives a wrong exchange in every order (each thread runs to its
    // end before the next starts), where a GPU gives the right one by luck most days.
    int in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = 1000 + i;
    int *din = (int *)ct_upload(in, sizeof in);
    int *dout = (int *)ct_alloc(sizeof out);
    IFD_LAUNCH(k_no_barrier, 1, 64, 0, NULL, dout, din);
    CHECK(ct_sync() == DEV_OK);
    ct_download(out, dout, sizeof out);
    int wrong = 0;
    for (int t = 0; t < 64; t++) wrong += out[t] != in[(t + 1) % 64];
    CHECKF(wrong > 0, "a missing __syncthreads went unnoticed (order %d)", (int)ifd_simt::get_order());
    ct_free(d), ct_free(f), ct_free(din), ct_free(dout);
}
#endif

TEST_MAIN(T(test_vadd), T(test_block_sum), T(test_warp), T(test_dyn_smem), T(test_atomics), T(test_index),
          T(test_half), T(test_graph)
#if CT_EMULATED
              ,
          T(test_faults)
#endif
)
