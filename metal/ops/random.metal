#include "random.h"

// clang-format off
MPSL_KERNEL(log_normal, float32, float)
MPSL_KERNEL(log_normal, float16, half)
MPSL_KERNEL(log_normal, bfloat16, bfloat)
// clang-format on
