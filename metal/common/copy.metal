#include "copy.h"

// clang-format off
MPSL_KERNEL(copy_strided, float32, float)
MPSL_KERNEL(copy_strided, complex64, float2)
MPSL_KERNEL(copy_strided, int32, int)
// clang-format on
