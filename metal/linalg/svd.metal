#include "svd.h"
#include "svd_block.h"
// svd_small_<dtype>_m<m>_n<n>, m, n = 1 .. kSvdSmallMax (generated from the n <= 4 description).
#include "svd_small.h"

// clang-format off
MPSL_KERNEL(svd_jacobi, float32, float)
MPSL_KERNEL(svd_jacobi, complex64, float2)
MPSL_KERNEL(svd_block_scan, float32, float)
MPSL_KERNEL(svd_block_scan, complex64, float2)
MPSL_KERNEL(svd_block_scale, float32, float)
MPSL_KERNEL(svd_block_scale, complex64, float2)
MPSL_KERNEL(svd_block_load, float32, float)
MPSL_KERNEL(svd_block_load, complex64, float2)
MPSL_KERNEL(svd_block_gram, float32, float)
MPSL_KERNEL(svd_block_gram, complex64, float2)
MPSL_KERNEL(svd_block_rotate, float32, float)
MPSL_KERNEL(svd_block_rotate, complex64, float2)
MPSL_KERNEL(svd_block_norms, float32, float)
MPSL_KERNEL(svd_block_norms, complex64, float2)
MPSL_KERNEL(svd_block_output, float32, float)
MPSL_KERNEL(svd_block_output, complex64, float2)
MPSL_KERNEL(svd_block_complete, float32, float)
MPSL_KERNEL(svd_block_complete, complex64, float2)
// clang-format on
