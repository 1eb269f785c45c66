#include "eig.h"

// clang-format off
MPSL_KERNEL(eig_group, float32, float)
MPSL_KERNEL(eig_group, complex64, float2)
MPSL_KERNEL(eig_device, float32, float)
MPSL_KERNEL(eig_device, complex64, float2)
// clang-format on
