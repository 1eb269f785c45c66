#include "small_inverse.h"

// One kernel per (op, dtype, n): host names like small_inv_float32_n4.
#define MPSL_SMALL_ALL_N(op, tname, T) \
  MPSL_KERNEL_P(op, tname, n1, T, 1)   \
  MPSL_KERNEL_P(op, tname, n2, T, 2)   \
  MPSL_KERNEL_P(op, tname, n3, T, 3)   \
  MPSL_KERNEL_P(op, tname, n4, T, 4)

// clang-format off
MPSL_SMALL_ALL_N(small_inv, float32, float)
MPSL_SMALL_ALL_N(small_inv, complex64, float2)
MPSL_SMALL_ALL_N(small_solve, float32, float)
MPSL_SMALL_ALL_N(small_solve, complex64, float2)
MPSL_SMALL_ALL_N(small_det, float32, float)
MPSL_SMALL_ALL_N(small_det, complex64, float2)
MPSL_SMALL_ALL_N(small_slogdet, float32, float)
MPSL_SMALL_ALL_N(small_slogdet, complex64, float2)
// clang-format on
