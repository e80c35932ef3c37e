/* matmul_ext.cu — the launches of the matmul kernels for Q4_1, Q5_1, IQ4_NL, Q2_K, Q3_K,
 * Q5_K, IQ4_XS and inferd's I8_G64/G128, I4_G64/G128 (matmul.cu has the rest, the layout
 * and the launchers; matmul_impl.cuh the kernels). */
#include "simt.h"

#include "matmul_impl.cuh"

IFD_NS_BEGIN

bool mm_launch_ext(int type, dev_stream s, mm_job &job, const float *x, int32_t n_tokens, int32_t xv) {
    switch (type) {
    case MM_Q4_1: mm_launch_type<MM_Q4_1>(s, job, x, n_tokens, xv); return true;
    case MM_Q5_1: mm_launch_type<MM_Q5_1>(s, job, x, n_tokens, xv); return true;
    case MM_IQ4_NL: mm_launch_type<MM_IQ4_NL>(s, job, x, n_tokens, xv); return true;
    case MM_Q2_K: mm_launch_type<MM_Q2_K>(s, job, x, n_tokens, xv); return true;
    case MM_Q3_K: mm_launch_type<MM_Q3_K>(s, job, x, n_tokens, xv); return true;
    case MM_Q5_K: mm_launch_type<MM_Q5_K>(s, job, x, n_tokens, xv); return true;
    case MM_IQ4_XS: mm_launch_type<MM_IQ4_XS>(s, job, x, n_tokens, xv); return true;
    case MM_I8_G64: mm_launch_type<MM_I8_G64>(s, job, x, n_tokens, xv); return true;
    case MM_I8_G128: mm_launch_type<MM_I8_G128>(s, job, x, n_tokens, xv); return true;
    case MM_I4_G64: mm_launch_type<MM_I4_G64>(s, job, x, n_tokens, xv); return true;
    case MM_I4_G128: mm_launch_type<MM_I4_G128>(s, job, x, n_tokens, xv); return true;
    default: return false;
    }
}

IFD_NS_END
