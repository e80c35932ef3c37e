/* simt.h — the one header every CUDA source of inferd includes first, so that the same
 * kernel source compiles with nvcc for a GPU and with the host C++ compiler for the SIMT
 * emulation (emu/emu.h: threads of a block as fibers, CUDA's semantics for indices,
 * shared memory, barriers, warp collectives and atomics).
 *
 * Rules for kernel sources (kernels/ and src/backend/cuda/, *.cu files):
 *   - everything lives between IFD_NS_BEGIN and IFD_NS_END: namespace ifd_cu under nvcc,
 *     ifd_emu under emulation, so both builds link into one binary;
 *   - launch with IFD_LAUNCH(kernel, grid, block, shared_bytes, stream, args...), never
 *     with <<<...>>> (the host compiler cannot parse it);
 *   - dynamic shared memory through IFD_DYN_SHARED(T, name); static __shared__ arrays
 *     as usual (inside a kernel body only);
 *   - no inline PTX outside a wrapper that also has an emulated body in this header;
 *   - the CUDA runtime and cuBLAS only through devrt.h (the emulation implements that
 *     interface on the host; cuBLAS becomes the reference GEMM).
 * Built with IFD_SIMT_EMU=1 for the emulation. */
#ifndef INFERD_BACKEND_CUDA_SIMT_H
#define INFERD_BACKEND_CUDA_SIMT_H

#include <stddef.h>
#include <stdint.h>

#if defined(IFD_SIMT_EMU)
#include "emu/emu.h"
#define IFD_NS ifd_emu
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define IFD_NS ifd_cu
#define IFD_LAUNCH(kern, grid, block, smem, stream, ...) \
    kern<<<(grid), (block), (smem), (cudaStream_t)(stream)>>>(__VA_ARGS__)
#define IFD_DYN_SHARED(T, name)                                   \
    extern __shared__ __align__(16) unsigned char ifd_dyn_smem_[]; \
    T *name = reinterpret_cast<T *>(ifd_dyn_smem_)
#else
#error "simt.h: compile with nvcc, or with IFD_SIMT_EMU=1 for the emulation"
#endif

#define IFD_NS_BEGIN namespace IFD_NS {
#define IFD_NS_END }

#define IFD_WARP 32
#define IFD_FULL_MASK 0xffffffffu

#endif
