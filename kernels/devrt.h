/* devrt.h — the device runtime the CUDA backend and its tests call: memory, copies,
 * streams, graphs, errors and the large GEMM. devrt_cuda.cu implements it over the CUDA
 * runtime and cuBLAS; emu/devrt_emu.cpp over host memory, the SIMT emulation and the
 * reference GEMM. Nothing else in the backend names a cuda* or cublas* function, so the
 * same backend source runs on a GPU and, in CI, on the CPU.
 *
 * Every call returns DEV_OK, DEV_ERR (a recoverable failure: the step that met it fails,
 * everything else goes on) or DEV_STICKY (the device context is lost: the process must
 * stop serving). One thread drives a device at a time. */
#ifndef INFERD_BACKEND_CUDA_DEVRT_H
#define INFERD_BACKEND_CUDA_DEVRT_H

#include "simt.h"

IFD_NS_BEGIN

enum { DEV_OK = 0, DEV_ERR = -1, DEV_STICKY = -2 };

typedef void *dev_stream; /* cudaStream_t; NULL = the default stream */
typedef struct dev_graph_s *dev_graph;
typedef struct dev_blas_s *dev_blas;

typedef struct dev_props {
    char name[256];
    size_t total_mem;
    int sm_count;
    int cc_major, cc_minor;
    size_t l2_bytes;
    size_t smem_per_block_optin; /* most dynamic shared memory one block may ask for */
} dev_props;

/* Devices present (0: none, or no driver). */
int dev_count(void);
/* Select device ordinal and read its properties. */
int dev_open(int ordinal, dev_props *p);
/* Free and total device memory now. */
int dev_mem_info(size_t *free_bytes, size_t *total_bytes);

int dev_malloc(void **p, size_t bytes);
void dev_free(void *p); /* accepts NULL */
int dev_host_alloc(void **p, size_t bytes); /* pinned host memory */
void dev_host_free(void *p);

int dev_h2d(void *dst, const void *src, size_t bytes, dev_stream s);
int dev_d2h(void *dst, const void *src, size_t bytes, dev_stream s);
int dev_d2d(void *dst, const void *src, size_t bytes, dev_stream s);
int dev_memset(void *p, int byte, size_t bytes, dev_stream s);

int dev_stream_create(dev_stream *s);
void dev_stream_destroy(dev_stream s);
int dev_sync(dev_stream s);

/* The status of the launches since the last call (after IFD_LAUNCH). */
int dev_check_launch(void);
/* The message of the last failure on this thread. */
const char *dev_error(void);

/* Record every launch and copy on s into a graph until capture_end; then replay it
 * with graph_launch (kernel arguments are the values seen at capture). */
int dev_graph_begin(dev_stream s);
int dev_graph_end(dev_stream s, dev_graph *g);
int dev_graph_launch(dev_graph g, dev_stream s);
void dev_graph_destroy(dev_graph g);

typedef enum dev_dtype { DEV_F32 = 0, DEV_F16 = 1, DEV_BF16 = 2 } dev_dtype;
int dev_blas_create(dev_blas *h, dev_stream s);
void dev_blas_destroy(dev_blas h);
/* C[m][n] = sum_k A[m][k] * B[n][k] (row-major; A: the m token rows, B: the n weight
 * rows, both of type t; C float; fp32 accumulation). cuBLAS on a GPU, the reference
 * loop under the emulation. */
int dev_gemm(dev_blas h, dev_dtype t, const void *A, const void *B, float *C, int m, int n,
             int k);

#if defined(IFD_SIMT_EMU)
/* Emulation only (emu/devrt_emu.cpp): arm an injected fault as IFD_EMU_FAULT does
 * ("recoverable@N", "sticky@N"; NULL or "" disarms), restarting the count and reviving
 * a lost context. DEV_ERR for a malformed spec (then nothing is armed). */
int dev_emu_fault_set(const char *spec);
#endif

IFD_NS_END

#endif
