#include "grouped_gemm.h"

// grouped_mm_<dtype>_wide<0|1>: wide1 writes float32 from low-precision inputs (out_dtype).
// clang-format off
MPSL_KERNEL_P(grouped_mm, float32, wide0, float, float)
MPSL_KERNEL_P(grouped_mm, float16, wide0, half, half)
MPSL_KERNEL_P(grouped_mm, bfloat16, wide0, bfloat, bfloat)
MPSL_KERNEL_P(grouped_mm, float16, wide1, half, float)
MPSL_KERNEL_P(grouped_mm, bfloat16, wide1, bfloat, float)
// clang-format on
