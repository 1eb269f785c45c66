#include "gemv.h"

// Host names gemv_<dtype>_rows<R>: R rows of x per simdgroup (decode shapes M <= 8).
#define MPSL_GEMV_ALL_ROWS(tname, T)       \
  MPSL_KERNEL_P(gemv, tname, rows1, T, 1)  \
  MPSL_KERNEL_P(gemv, tname, rows2, T, 2)  \
  MPSL_KERNEL_P(gemv, tname, rows4, T, 4)  \
  MPSL_KERNEL_P(gemv, tname, rows8, T, 8)

// clang-format off
MPSL_GEMV_ALL_ROWS(float32, float)
MPSL_GEMV_ALL_ROWS(float16, half)
MPSL_GEMV_ALL_ROWS(bfloat16, bfloat)
// clang-format on
