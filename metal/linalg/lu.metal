#include "lu.h"

// clang-format off
MPSL_KERNEL(lu_small, float32, float)
MPSL_KERNEL(lu_small, complex64, float2)
MPSL_KERNEL(lu_panel, float32, float)
MPSL_KERNEL(lu_panel, complex64, float2)
MPSL_KERNEL(lu_panel_tall, float32, float)
MPSL_KERNEL(lu_panel_tall, complex64, float2)
MPSL_KERNEL(lu_swap_trsm, float32, float)
MPSL_KERNEL(lu_swap_trsm, complex64, float2)
MPSL_KERNEL(lu_update, float32, float)
MPSL_KERNEL(lu_update, complex64, float2)
MPSL_KERNEL(lu_pivots_to_perm, int32, int)
MPSL_KERNEL(lu_pivots_to_perm_staged, int32, int)
// clang-format on
