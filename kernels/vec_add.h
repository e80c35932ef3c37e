/* vec_add.h — launcher for the trivial CUDA kernel that proves the toolchain works
 * (the CUDA backend proper comes later). Host-callable from C. */
#ifndef INFERD_KERNELS_VEC_ADD_H
#define INFERD_KERNELS_VEC_ADD_H

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = a[i] + b[i] on the default device, host pointers in and out.
 * Returns 0 on success or a negative value when CUDA fails (no device, ...). */
int ifd_cuda_vec_add(float *out, const float *a, const float *b, int n);
/* Number of CUDA devices, 0 when none or the driver is missing. */
int ifd_cuda_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
