#include "svd.h"

// One svd_small kernel per (dtype, m, n), m, n = 1 .. kSvdSmallMax: host names like
// svd_small_float32_m3_n3.
#define MPSL_SVD_SMALL_N(tname, T, M)                   \
  MPSL_KERNEL_P(svd_small, tname, m##M##_n1, T, M, 1) \
  MPSL_KERNEL_P(svd_small, tname, m##M##_n2, T, M, 2) \
  MPSL_KERNEL_P(svd_small, tname, m##M##_n3, T, M, 3) \
  MPSL_KERNEL_P(svd_small, tname, m##M##_n4, T, M, 4)
#define MPSL_SVD_SMALL_ALL(tname, T) \
  MPSL_SVD_SMALL_N(tname, T, 1)      \
  MPSL_SVD_SMALL_N(tname, T, 2)      \
  MPSL_SVD_SMALL_N(tname, T, 3)      \
  MPSL_SVD_SMALL_N(tname, T, 4)

// clang-format off
MPSL_KERNEL(svd_jacobi, float32, float)
MPSL_KERNEL(svd_jacobi, complex64, float2)
MPSL_SVD_SMALL_ALL(float32, float)
MPSL_SVD_SMALL_ALL(complex64, float2)
// clang-format on
