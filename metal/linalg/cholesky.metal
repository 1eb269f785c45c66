#include "cholesky.h"

// clang-format off
MPSL_KERNEL(chol_potf2, float32, float)
MPSL_KERNEL(chol_potf2, complex64, float2)
MPSL_KERNEL(chol_trsm, float32, float)
MPSL_KERNEL(chol_trsm, complex64, float2)
MPSL_KERNEL(chol_syrk, float32, float)
MPSL_KERNEL(chol_syrk, complex64, float2)
// clang-format on
