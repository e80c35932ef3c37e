/* emu.h — the SIMT emulation: CUDA kernels compiled by the host C++ compiler run on the
 * CPU with CUDA's semantics. Included only through ../simt.h (with IFD_SIMT_EMU=1).
 *
 * A launch runs the grid's blocks one after another on the calling thread, in a
 * selectable order (forward, reverse, seeded random: emu_set_order / IFD_EMU_ORDER).
 * The threads of a block are fibers (an assembly context switch, emu.cpp): each runs
 * until it reaches a barrier or a warp collective, or returns. Then
 *   - __syncthreads() releases when every live thread of the block waits at it; threads
 *     waiting at different __syncthreads() calls (a divergent barrier), or a warp
 *     collective that can never complete (a missing participant), is reported with
 *     the kernel's name and the source lines, and the launch fails — never a hang;
 *   - a warp collective (__shfl*_sync, __ballot/any/all_sync, __syncwarp, __reduce_*_sync)
 *     completes when every thread named in its mask waits at the same collective with
 *     the same mask; a thread outside its own mask, or a mask naming an exited thread,
 *     is reported.
 * Threads within a block run in the block order too (reverse: the last thread first;
 * random: a seeded permutation), so code that relies on implicit warp lockstep or on
 * one thread's writes without a barrier fails in some order.
 * __shared__ arrays are per-host-thread statics (one block runs at a time per thread);
 * dynamic shared memory is a buffer of the launch's size, filled with 0xA5 bytes at
 * every block start (uninitialised reads show up as garbage, as on a GPU).
 *
 * What it cannot show: speed; memory ordering weaker than x86's (a missing
 * __threadfence passes); inter-block spin-waits (blocks never run concurrently: such
 * a kernel hangs, so none may be written); register or shared-memory limits beyond
 * the launch checks below; bank conflicts; tensor-core layouts beyond the fragment
 * tables coded here. The GPU run (tests/gpu/run.sh) covers those. */
#ifndef INFERD_BACKEND_CUDA_EMU_EMU_H
#define INFERD_BACKEND_CUDA_EMU_EMU_H

/* CUDA's own host headers first: they use the names redefined below. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace ifd_simt {

struct block_ctx; /* emu.cpp */

/* The running fiber's identity; cur is set at every switch. */
struct thread_ctx {
    uint3 tid;       /* threadIdx */
    unsigned linear; /* x + y*Dx + z*Dx*Dy */
    block_ctx *blk;
};
struct grid_ctx {
    uint3 bid;   /* blockIdx */
    dim3 bdim;   /* blockDim */
    dim3 gdim;   /* gridDim */
    unsigned char *dyn_smem;
};
extern thread_local thread_ctx *cur;
extern thread_local grid_ctx *cur_grid;

enum order { ORDER_FORWARD = 0, ORDER_REVERSE = 1, ORDER_RANDOM = 2 };
/* Block and thread order of later launches on this thread (IFD_EMU_ORDER=forward|
 * reverse|random[:seed] sets the initial one). */
void set_order(order o, uint64_t seed);
order get_order(void);

/* Launch fn(arg) as a grid. Returns 0, or -1 after reporting (stderr, and
 * last_error()) an invalid configuration or a fault found while running. */
typedef void (*kernel_fn)(void *arg);
int launch(const char *name, dim3 grid, dim3 block, size_t smem, kernel_fn fn, void *arg);
/* The message of the last failed launch on this thread ("" if none); clear_error(). */
const char *last_error(void);
void clear_error(void);
/* Launches that failed since the process started (tests assert 0 at exit). */
long n_faults(void);

/* Collectives (the fiber waits until they complete). */
void sync_block(const char *file, int line);
int sync_block_op(int op, int pred, const char *file, int line); /* 0 count, 1 and, 2 or */
enum warp_op { W_SHFL, W_SHFL_UP, W_SHFL_DOWN, W_SHFL_XOR, W_BALLOT, W_ANY, W_ALL, W_SYNC,
               W_REDUCE_ADD, W_REDUCE_MIN, W_REDUCE_MAX, W_REDUCE_AND, W_REDUCE_OR,
               W_REDUCE_XOR, W_MMA };
/* One lane's part of a warp collective: value in, result out (64 bits of payload). */
uint64_t warp_collective(warp_op op, unsigned mask, uint64_t v, int arg, int width,
                         const char *file, int line);
unsigned active_mask(void);

template <typename T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffle of more than 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <typename T> static inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

/* Launch glue: the kernel's arguments are copied (by value, as CUDA does) into a
 * closure every fiber of the grid calls. */
template <typename F> static void call_closure(void *p) { (*static_cast<F *>(p))(); }
template <typename F> static void delete_closure(void *p) { delete static_cast<F *>(p); }

/* Graph capture (devrt's dev_graph_begin sets a hook): a launch is recorded with a copy
 * of its closure, and replayed by captured_run — arguments as seen at capture, as a
 * CUDA graph's kernel nodes keep them. */
struct captured_launch {
    const char *name;
    dim3 grid, block;
    size_t smem;
    kernel_fn fn;
    void *arg;
    void (*del)(void *);
};
typedef void (*capture_hook)(captured_launch *l);
capture_hook get_capture_hook(void);
void set_capture_hook(capture_hook h);
int captured_run(captured_launch *l);
void captured_free(captured_launch *l);

template <typename F>
static inline int launch_closure(const char *name, dim3 grid, dim3 block, size_t smem, F f) {
    if (capture_hook h = get_capture_hook()) {
        h(new captured_launch{name, grid, block, smem, &call_closure<F>, new F(f), &delete_closure<F>});
        return 0;
    }
    return launch(name, grid, block, smem, &call_closure<F>, &f);
}

} /* namespace ifd_simt */

/* ---- CUDA's vocabulary on the host ---------------------------------------------------- */
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __constant__ static const
#define __shared__ static thread_local
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)

#define threadIdx (::ifd_simt::cur->tid)
#define blockIdx (::ifd_simt::cur_grid->bid)
#define blockDim (::ifd_simt::cur_grid->bdim)
#define gridDim (::ifd_simt::cur_grid->gdim)
#define warpSize 32

#define __syncthreads() ::ifd_simt::sync_block(__FILE__, __LINE__)
#define __syncthreads_count(p) ::ifd_simt::sync_block_op(0, (p), __FILE__, __LINE__)
#define __syncthreads_and(p) ::ifd_simt::sync_block_op(1, (p), __FILE__, __LINE__)
#define __syncthreads_or(p) ::ifd_simt::sync_block_op(2, (p), __FILE__, __LINE__)
#define __syncwarp(...) \
    ((void)::ifd_simt::warp_collective(::ifd_simt::W_SYNC, ifd_emu_mask_(__VA_ARGS__), 0, 0, 32, __FILE__, __LINE__))
#define __shfl_sync(m, v, src, ...) ifd_emu_shfl_(::ifd_simt::W_SHFL, (m), (v), (src), ifd_emu_width_(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_up_sync(m, v, d, ...) ifd_emu_shfl_(::ifd_simt::W_SHFL_UP, (m), (v), (d), ifd_emu_width_(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_down_sync(m, v, d, ...) ifd_emu_shfl_(::ifd_simt::W_SHFL_DOWN, (m), (v), (d), ifd_emu_width_(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_xor_sync(m, v, x, ...) ifd_emu_shfl_(::ifd_simt::W_SHFL_XOR, (m), (v), (x), ifd_emu_width_(__VA_ARGS__), __FILE__, __LINE__)
#define __ballot_sync(m, p) ((unsigned)::ifd_simt::warp_collective(::ifd_simt::W_BALLOT, (m), (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(m, p) ((int)::ifd_simt::warp_collective(::ifd_simt::W_ANY, (m), (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __all_sync(m, p) ((int)::ifd_simt::warp_collective(::ifd_simt::W_ALL, (m), (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __reduce_add_sync(m, v) ((unsigned)::ifd_simt::warp_collective(::ifd_simt::W_REDUCE_ADD, (m), (uint32_t)(v), 0, 32, __FILE__, __LINE__))
#define __reduce_min_sync(m, v) ((unsigned)::ifd_simt::warp_collective(::ifd_simt::W_REDUCE_MIN, (m), (uint32_t)(v), 0, 32, __FILE__, __LINE__))
#define __reduce_max_sync(m, v) ((unsigned)::ifd_simt::warp_collective(::ifd_simt::W_REDUCE_MAX, (m), (uint32_t)(v), 0, 32, __FILE__, __LINE__))
#define __activemask() (::ifd_simt::active_mask())

static inline unsigned ifd_emu_mask_() { return 0xffffffffu; }
static inline unsigned ifd_emu_mask_(unsigned m) { return m; }
static inline int ifd_emu_width_() { return 32; }
static inline int ifd_emu_width_(int w) { return w; }
template <typename T>
static inline T ifd_emu_shfl_(::ifd_simt::warp_op op, unsigned mask, T v, int arg, int width,
                              const char *file, int line) {
    return ::ifd_simt::from_bits<T>(
        ::ifd_simt::warp_collective(op, mask, ::ifd_simt::to_bits(v), arg, width, file, line));
}

#define IFD_LAUNCH(kern, grid, block, smem, stream, ...)                                   \
    ((void)(stream), ::ifd_simt::launch_closure(#kern, dim3(grid), dim3(block), (smem),     \
                                                 [=]() { kern(__VA_ARGS__); }))
#define IFD_DYN_SHARED(T, name) T *name = reinterpret_cast<T *>(::ifd_simt::cur_grid->dyn_smem)

/* Device intrinsics that the host lacks (kernels live in namespace ifd_emu). */
namespace ifd_emu {
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __expf(float x) { return expf(x); }
static inline float __logf(float x) { return logf(x); }
static inline float __powf(float x, float y) { return powf(x, y); }
static inline float __sinf(float x) { return sinf(x); }
static inline float __cosf(float x) { return cosf(x); }
static inline float __fdividef(float x, float y) { return x / y; }
/* IEEE operations rounded to nearest that nvcc never contracts into an FMA. On the
 * host they are plain operations: a source that needs them bit-exact must also keep
 * the host compiler from contracting (kernels/sample.cu: #pragma GCC optimize). */
static inline float __fmul_rn(float x, float y) { return x * y; }
static inline float __fadd_rn(float x, float y) { return x + y; }
static inline float __fsub_rn(float x, float y) { return x - y; }
static inline float __fdiv_rn(float x, float y) { return x / y; }
static inline double __dmul_rn(double x, double y) { return x * y; }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
/* __dp4a: four signed byte products summed into c. */
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
static inline int __dp4a(unsigned a, unsigned b, unsigned c) { return __dp4a((int)a, (int)b, (int)c); }
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <typename T> static inline T min(T a, T b) { return b < a ? b : a; }
template <typename T> static inline T max(T a, T b) { return a < b ? b : a; }
static inline unsigned min(unsigned a, int b) { return a < (unsigned)b ? a : (unsigned)b; }
static inline unsigned max(unsigned a, int b) { return a > (unsigned)b ? a : (unsigned)b; }

/* Atomics (blocks run one at a time, but keep them atomic for the threads of a host
 * pool later). */
template <typename T> static inline T atomicAdd(T *p, T v) {
    if constexpr (std::is_integral<T>::value) {
        return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
    } else {
        T old = *p, want;
        do { want = old + v; } while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
        return old;
    }
}
template <typename T> static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicExch(T *p, T v) {
    T old;
    __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
template <typename T> static inline T atomicCAS(T *p, T cmp, T v) {
    __atomic_compare_exchange(p, &cmp, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
template <typename T> static inline T atomicMax(T *p, T v) {
    T old = *p;
    while (old < v && !__atomic_compare_exchange(p, &old, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}
template <typename T> static inline T atomicMin(T *p, T v) {
    T old = *p;
    while (v < old && !__atomic_compare_exchange(p, &old, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}
template <typename T> static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
} /* namespace ifd_emu */

#endif
