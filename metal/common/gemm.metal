#include "gemm.h"

// clang-format off
MPSL_KERNEL_P(gemm, float32, tile32, float, 32)
MPSL_KERNEL_P(gemm, float32, tile64, float, 64)
MPSL_KERNEL_P(gemm, complex64, tile32, float2, 32)
MPSL_KERNEL(gemm_narrow, float32, float)
MPSL_KERNEL(gemm_narrow, complex64, float2)
// clang-format on
