#include "svd.h"
// svd_small_<dtype>_m<m>_n<n>, m, n = 1 .. kSvdSmallMax (generated from the n <= 4 description).
#include "svd_small.h"

// clang-format off
MPSL_KERNEL(svd_jacobi, float32, float)
MPSL_KERNEL(svd_jacobi, complex64, float2)
// clang-format on
