#include "eigh.h"
#include "eigh_tridiagonal.h"
#include "eigh_divide.h"
// eigh_small_<dtype>_n<n>, n = 1 .. kEighSmallMax (generated from the n <= 4 description).
#include "eigh_small.h"

// clang-format off
MPSL_KERNEL(eigh_group, float32, float)
MPSL_KERNEL(eigh_group, complex64, float2)
MPSL_KERNEL(eigh_device, float32, float)
MPSL_KERNEL(eigh_device, complex64, float2)
MPSL_KERNEL(eigh_tridiag_load, float32, float)
MPSL_KERNEL(eigh_tridiag_load, complex64, float2)
MPSL_KERNEL(eigh_tridiag_step, float32, float)
MPSL_KERNEL(eigh_tridiag_step, complex64, float2)
MPSL_KERNEL(eigh_tridiag_tail, float32, float)
MPSL_KERNEL(eigh_tridiag_tail, complex64, float2)
MPSL_KERNEL(eigh_tridiag_bisect, float32, float)
MPSL_KERNEL(eigh_tridiag_bisect, complex64, float2)
// divide and conquer on the real tridiagonal (the same kernels serve complex64's)
MPSL_KERNEL(eigh_dc_leaf, float32, float)
MPSL_KERNEL(eigh_dc_merge, float32, float)
MPSL_KERNEL(eigh_dc_secular, float32, float)
MPSL_KERNEL(eigh_dc_zhat, float32, float)
MPSL_KERNEL(eigh_dc_mix, float32, float)
// clang-format on
