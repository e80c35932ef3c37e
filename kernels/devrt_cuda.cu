// devrt_cuda.cu — devrt.h over the CUDA runtime and cuBLAS (the GPU build only).
#include <cublas_v2.h>
#include <stdio.h>
#include <string.h>

#include "devrt.h"

IFD_NS_BEGIN

static thread_local char t_msg[1024];

/* Sticky errors leave the context unusable; everything else fails one call. */
static bool sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorUnknown: return true;
    default: return false;
    }
}

static int st(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return DEV_OK;
    snprintf(t_msg, sizeof t_msg, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return sticky(e) ? DEV_STICKY : DEV_ERR;
}

int dev_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

int dev_open(int ordinal, dev_props *p) {
    int rc = st(cudaSetDevice(ordinal), "cudaSetDevice");
    if (rc) return rc;
    cudaDeviceProp pr;
    if ((rc = st(cudaGetDeviceProperties(&pr, ordinal), "cudaGetDeviceProperties"))) return rc;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", pr.name);
    p->total_mem = pr.totalGlobalMem;
    p->sm_count = pr.multiProcessorCount;
    p->cc_major = pr.major;
    p->cc_minor = pr.minor;
    p->l2_bytes = (size_t)pr.l2CacheSize;
    p->smem_per_block_optin = pr.sharedMemPerBlockOptin;
    return DEV_OK;
}

int dev_mem_info(size_t *free_bytes, size_t *total_bytes) {
    return st(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

int dev_malloc(void **p, size_t bytes) { return st(cudaMalloc(p, bytes ? bytes : 1), "cudaMalloc"); }
void dev_free(void *p) {
    if (p) cudaFree(p);
}
int dev_host_alloc(void **p, size_t bytes) { return st(cudaMallocHost(p, bytes ? bytes : 1), "cudaMallocHost"); }
void dev_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

int dev_h2d(void *dst, const void *src, size_t bytes, dev_stream s) {
    return st(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)s), "copy to device");
}
int dev_d2h(void *dst, const void *src, size_t bytes, dev_stream s) {
    return st(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)s), "copy to host");
}
int dev_d2d(void *dst, const void *src, size_t bytes, dev_stream s) {
    return st(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)s), "device copy");
}
int dev_memset(void *p, int byte, size_t bytes, dev_stream s) {
    return st(cudaMemsetAsync(p, byte, bytes, (cudaStream_t)s), "cudaMemsetAsync");
}

int dev_stream_create(dev_stream *s) {
    cudaStream_t c;
    int rc = st(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking), "cudaStreamCreate");
    *s = rc ? NULL : (dev_stream)c;
    return rc;
}
void dev_stream_destroy(dev_stream s) {
    if (s) cudaStreamDestroy((cudaStream_t)s);
}
int dev_sync(dev_stream s) { return st(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize"); }

int dev_check_launch(void) { return st(cudaGetLastError(), "kernel launch"); }
const char *dev_error(void) { return t_msg; }

struct dev_graph_s {
    cudaGraph_t g;
    cudaGraphExec_t x;
};

int dev_graph_begin(dev_stream s) {
    return st(cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}
int dev_graph_end(dev_stream s, dev_graph *out) {
    dev_graph_s *g = new dev_graph_s();
    int rc = st(cudaStreamEndCapture((cudaStream_t)s, &g->g), "cudaStreamEndCapture");
    if (!rc) rc = st(cudaGraphInstantiate(&g->x, g->g, 0), "cudaGraphInstantiate");
    if (rc) {
        if (g->g) cudaGraphDestroy(g->g);
        delete g;
        *out = NULL;
        return rc;
    }
    *out = g;
    return DEV_OK;
}
int dev_graph_launch(dev_graph g, dev_stream s) { return st(cudaGraphLaunch(g->x, (cudaStream_t)s), "cudaGraphLaunch"); }
void dev_graph_destroy(dev_graph g) {
    if (!g) return;
    cudaGraphExecDestroy(g->x);
    cudaGraphDestroy(g->g);
    delete g;
}

struct dev_blas_s {
    cublasHandle_t h;
};
int dev_blas_create(dev_blas *out, dev_stream s) {
    dev_blas_s *b = new dev_blas_s();
    if (cublasCreate(&b->h) != CUBLAS_STATUS_SUCCESS) {
        delete b;
        snprintf(t_msg, sizeof t_msg, "cublasCreate failed");
        return DEV_ERR;
    }
    cublasSetStream(b->h, (cudaStream_t)s);
    *out = b;
    return DEV_OK;
}
void dev_blas_destroy(dev_blas h) {
    if (!h) return;
    cublasDestroy(h->h);
    delete h;
}

int dev_gemm(dev_blas h, dev_dtype t, const void *A, const void *B, float *C, int m, int n, int k) {
    /* Row-major C[m][n] = A[m][k] B[n][k]^T is column-major C^T[n][m] = B^T... : op(B)=T on
     * the k x n column-major view of B, op(A)=N on the k x m view of A. */
    static const cudaDataType ty[] = {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF};
    float one = 1.f, zero = 0.f;
    cublasStatus_t s = cublasGemmEx(h->h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, B, ty[t], k, A, ty[t], k,
                                    &zero, C, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(t_msg, sizeof t_msg, "cublasGemmEx: status %d", (int)s);
        return DEV_ERR;
    }
    return DEV_OK;
}

IFD_NS_END
