#include "search.h"

// clang-format off
MPSL_KERNEL_P(searchsorted, float32, out32, float, int)
MPSL_KERNEL_P(searchsorted, float32, out64, float, long)
MPSL_KERNEL_P(searchsorted, float16, out32, half, int)
MPSL_KERNEL_P(searchsorted, float16, out64, half, long)
MPSL_KERNEL_P(searchsorted, bfloat16, out32, bfloat, int)
MPSL_KERNEL_P(searchsorted, bfloat16, out64, bfloat, long)
MPSL_KERNEL_P(searchsorted, int32, out32, int, int)
MPSL_KERNEL_P(searchsorted, int32, out64, int, long)
MPSL_KERNEL_P(searchsorted, int64, out32, long, int)
MPSL_KERNEL_P(searchsorted, int64, out64, long, long)
// clang-format on
