#include "ldl.h"

// clang-format off
MPSL_KERNEL(ldl_factor_group, float32, float)
MPSL_KERNEL(ldl_factor_group, complex64, float2)
MPSL_KERNEL(ldl_factor_device, float32, float)
MPSL_KERNEL(ldl_factor_device, complex64, float2)
MPSL_KERNEL(ldl_solve, float32, float)
MPSL_KERNEL(ldl_solve, complex64, float2)
// clang-format on
