#include "refine.h"

// clang-format off
MPSL_KERNEL(refine_split, float32, float)
MPSL_KERNEL(refine_residual, float32, float)
MPSL_KERNEL(refine_residual, complex64, float2)
MPSL_KERNEL(refine_update, float32, float)
MPSL_KERNEL(refine_update, complex64, float2)
MPSL_KERNEL(refine_selftest, float32, float)
// clang-format on
