#include "eigh.h"

// One eigh_small kernel per (dtype, n), n = 1 .. kEighSmallMax: host names like
// eigh_small_float32_n3.
#define MPSL_EIGH_SMALL_ALL(tname, T)         \
  MPSL_KERNEL_P(eigh_small, tname, n1, T, 1) \
  MPSL_KERNEL_P(eigh_small, tname, n2, T, 2) \
  MPSL_KERNEL_P(eigh_small, tname, n3, T, 3) \
  MPSL_KERNEL_P(eigh_small, tname, n4, T, 4)

// clang-format off
MPSL_KERNEL(eigh_group, float32, float)
MPSL_KERNEL(eigh_group, complex64, float2)
MPSL_KERNEL(eigh_device, float32, float)
MPSL_KERNEL(eigh_device, complex64, float2)
MPSL_EIGH_SMALL_ALL(float32, float)
MPSL_EIGH_SMALL_ALL(complex64, float2)
// clang-format on
