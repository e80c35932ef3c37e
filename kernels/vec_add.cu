// vec_add.cu — a trivial kernel and its launcher: the CUDA backend's first brick.
#include <cuda_runtime.h>

#include "vec_add.h"

__global__ static void vec_add_kernel(float *out, const float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" int ifd_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" int ifd_cuda_vec_add(float *out, const float *a, const float *b, int n) {
    if (n <= 0) return 0;
    float *d = nullptr;
    size_t bytes = (size_t)n * sizeof(float);
    if (cudaMalloc(&d, 3 * bytes) != cudaSuccess) return -1;
    int rc = -1;
    if (cudaMemcpy(d, a, bytes, cudaMemcpyHostToDevice) == cudaSuccess &&
        cudaMemcpy(d + n, b, bytes, cudaMemcpyHostToDevice) == cudaSuccess) {
        vec_add_kernel<<<(n + 255) / 256, 256>>>(d + 2 * (size_t)n, d, d + n, n);
        if (cudaGetLastError() == cudaSuccess &&
            cudaMemcpy(out, d + 2 * (size_t)n, bytes, cudaMemcpyDeviceToHost) == cudaSuccess)
            rc = 0;
    }
    cudaFree(d);
    return rc;
}
