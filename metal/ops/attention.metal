#include "attention.h"

// clang-format off
MPSL_KERNEL_P(attention_rows, float32, mask0, float, 0)
MPSL_KERNEL_P(attention_rows, float32, mask1, float, 1)
MPSL_KERNEL_P(attention_rows, float32, mask2, float, 2)
MPSL_KERNEL_P(attention_rows, float16, mask0, half, 0)
MPSL_KERNEL_P(attention_rows, float16, mask1, half, 1)
MPSL_KERNEL_P(attention_rows, float16, mask2, half, 2)
MPSL_KERNEL_P(attention_rows, bfloat16, mask0, bfloat, 0)
MPSL_KERNEL_P(attention_rows, bfloat16, mask1, bfloat, 1)
MPSL_KERNEL_P(attention_rows, bfloat16, mask2, bfloat, 2)
MPSL_KERNEL_P(attention_decode, float32, mask0, float, 0)
MPSL_KERNEL_P(attention_decode, float32, mask1, float, 1)
MPSL_KERNEL_P(attention_decode, float32, mask2, float, 2)
MPSL_KERNEL_P(attention_decode, float16, mask0, half, 0)
MPSL_KERNEL_P(attention_decode, float16, mask1, half, 1)
MPSL_KERNEL_P(attention_decode, float16, mask2, half, 2)
MPSL_KERNEL_P(attention_decode, bfloat16, mask0, bfloat, 0)
MPSL_KERNEL_P(attention_decode, bfloat16, mask1, bfloat, 1)
MPSL_KERNEL_P(attention_decode, bfloat16, mask2, bfloat, 2)
MPSL_KERNEL(attention_dropout_mask, float32, float)
// clang-format on
