#include "triangular.h"

// clang-format off
MPSL_KERNEL(trsm, float32, float)
MPSL_KERNEL(trsm, complex64, float2)
MPSL_KERNEL(trsv, float32, float)
MPSL_KERNEL(trsv, complex64, float2)
MPSL_KERNEL(trsm_diag, float32, float)
MPSL_KERNEL(trsm_diag, complex64, float2)
MPSL_KERNEL(trsm_update, float32, float)
MPSL_KERNEL(trsm_update, complex64, float2)
// clang-format on
