#include "triangular.h"

// clang-format off
MPSL_KERNEL(lu_trsm, float32, float)
MPSL_KERNEL(lu_trsm, complex64, float2)
MPSL_KERNEL(lu_trsv, float32, float)
MPSL_KERNEL(lu_trsv, complex64, float2)
// clang-format on
