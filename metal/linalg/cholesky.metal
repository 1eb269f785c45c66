#include "cholesky.h"

// clang-format off
MPSL_KERNEL(chol_potf2_simd, float32, float)
MPSL_KERNEL(chol_potf2_simd, complex64, float2)
MPSL_KERNEL(chol_potf2, float32, float)
MPSL_KERNEL(chol_potf2, complex64, float2)
MPSL_KERNEL_P(chol_update, float32, tile32, float, 32)
MPSL_KERNEL_P(chol_update, float32, tile64, float, 64)
MPSL_KERNEL_P(chol_update, complex64, tile32, float2, 32)
MPSL_KERNEL_P(chol_lauum, float32, tile32, float, 32)
MPSL_KERNEL_P(chol_lauum, float32, tile64, float, 64)
MPSL_KERNEL_P(chol_lauum, complex64, tile32, float2, 32)
// clang-format on
