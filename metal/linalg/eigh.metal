#include "eigh.h"
// eigh_small_<dtype>_n<n>, n = 1 .. kEighSmallMax (generated from the n <= 4 description).
#include "eigh_small.h"

// clang-format off
MPSL_KERNEL(eigh_group, float32, float)
MPSL_KERNEL(eigh_group, complex64, float2)
MPSL_KERNEL(eigh_device, float32, float)
MPSL_KERNEL(eigh_device, complex64, float2)
// clang-format on
