#include "cholesky.h"

// clang-format off
MPSL_KERNEL(chol_potf2_simd, float32, float)
MPSL_KERNEL(chol_potf2_simd, complex64, float2)
MPSL_KERNEL(chol_potf2, float32, float)
MPSL_KERNEL(chol_potf2, complex64, float2)
MPSL_KERNEL(chol_update, float32, float)
MPSL_KERNEL(chol_update, complex64, float2)
MPSL_KERNEL(chol_lauum, float32, float)
MPSL_KERNEL(chol_lauum, complex64, float2)
// clang-format on
