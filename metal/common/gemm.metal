#include "gemm.h"

// clang-format off
MPSL_KERNEL(gemm, float32, float)
MPSL_KERNEL(gemm, complex64, float2)
MPSL_KERNEL(gemm_narrow, float32, float)
MPSL_KERNEL(gemm_narrow, complex64, float2)
// clang-format on
