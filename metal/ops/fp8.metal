#include "fp8.h"

// scaled_mm_<out dtype>_rows<R>: R rows of A per simdgroup (decode shapes M <= 8).
#define MPSL_SCALED_MM_ALL_ROWS(tname, T)       \
  MPSL_KERNEL_P(scaled_mm, tname, rows1, T, 1)  \
  MPSL_KERNEL_P(scaled_mm, tname, rows2, T, 2)  \
  MPSL_KERNEL_P(scaled_mm, tname, rows4, T, 4)  \
  MPSL_KERNEL_P(scaled_mm, tname, rows8, T, 8)

// clang-format off
MPSL_SCALED_MM_ALL_ROWS(float32, float)
MPSL_SCALED_MM_ALL_ROWS(float16, half)
MPSL_SCALED_MM_ALL_ROWS(bfloat16, bfloat)
MPSL_KERNEL(fp8_encode, float32, float)
MPSL_KERNEL(fp8_encode, float16, half)
MPSL_KERNEL(fp8_encode, bfloat16, bfloat)
MPSL_KERNEL(fp8_decode, float32, float)
MPSL_KERNEL(fp8_decode, float16, half)
MPSL_KERNEL(fp8_decode, bfloat16, bfloat)
// clang-format on
